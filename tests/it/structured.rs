//! Structured answers and what a provider cannot carry, through the router: an answer that
//! is not the JSON its request asked for is an `InvalidAnswer` of its own (counted apart
//! from transport errors; the provider is not blamed), returned at once unless the request
//! asks to fail over on it; a provider whose format cannot carry a request is skipped for it
//! before anything is sent.

use std::sync::Arc;

use llm_failover::clock::{ManualClock, Now};
use llm_failover::http::{HttpRequest, RawResponse};
use llm_failover::provider::{Provider, RequestContext, StreamDecoder, openai::OpenAi};
use llm_failover::ratelimit::LimitReport;
use llm_failover::rng::FixedRng;
use llm_failover::{
    Capabilities, Capability, ChatRequest, ChatResponse, Client, Credential, Error, ErrorKind,
    Image, Message, ProviderId, ProviderSettings, RequestOptions, ResponseFormat,
};
use llm_failover_emulator::scripted::ScriptedServer;
use reqwest::header::HeaderMap;
use serde_json::json;

use crate::support::*;

fn triage() -> ChatRequest {
    ChatRequest::from_prompt("Triage: the printer is on fire.").response_format(
        ResponseFormat::JsonSchema {
            name: "triage".into(),
            schema: json!({
                "type": "object",
                "required": ["urgency"],
                "properties": { "urgency": { "enum": ["low", "high"] } }
            }),
        },
    )
}

#[derive(serde::Deserialize, Debug, PartialEq)]
struct Triage {
    urgency: String,
}

#[tokio::test]
async fn an_answer_off_its_schema_is_an_invalid_answer_sent_once_and_counted_apart() {
    let a = ScriptedServer::start().await;
    a.push(CHAT, ok(r#"{"urgency": "whenever"}"#));
    let h = client(&[("a", &a)], policy());
    let err = h.client.chat(triage()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidAnswer);
    assert!(
        err.message().contains("/urgency: enum"),
        "{}",
        err.message()
    );
    assert!(
        !err.message().contains("whenever"),
        "never the answer's text"
    );
    assert_eq!(err.sends(), Some(1));
    let a_stats = h.client.stats().provider("a").cloned().unwrap();
    assert_eq!(
        (
            a_stats.ok,
            a_stats.invalid_answers,
            a_stats.transient,
            a_stats.terminal
        ),
        (1, 1, 0, 0)
    );
}

#[tokio::test]
async fn a_valid_structured_answer_parses_into_the_callers_type() {
    let a = ScriptedServer::start().await;
    a.push(CHAT, ok(r#"{"urgency": "high"}"#));
    let h = client(&[("a", &a)], policy());
    let answer = h.client.chat(triage()).await.unwrap();
    assert_eq!(
        answer.parse::<Triage>().unwrap(),
        Triage {
            urgency: "high".into()
        }
    );
    assert_eq!(answer.json().unwrap()["urgency"], "high");
}

#[tokio::test]
async fn asked_to_it_fails_over_on_an_invalid_answer_without_blaming_the_provider() {
    let (a, b) = (ScriptedServer::start().await, ScriptedServer::start().await);
    a.push(CHAT, ok("Sure! The urgency is high."));
    b.push(CHAT, ok(r#"{"urgency": "high"}"#));
    a.push(CHAT, ok("plain text is fine here"));
    let h = client(&[("a", &a), ("b", &b)], policy());
    let opts = RequestOptions::new().fail_over_on_invalid_answer(true);
    let answer = h.client.chat_with(triage(), &opts).await.unwrap();
    assert_eq!(answer.provider.as_str(), "b");
    assert_eq!(answer.attempts, 2);
    assert_eq!(
        h.client.stats().provider("a").map(|s| s.invalid_answers),
        Some(1)
    );
    // `a` is not blamed: the next request goes to it first.
    let next = h.client.chat(ChatRequest::from_prompt("hi")).await.unwrap();
    assert_eq!(next.provider.as_str(), "a");
}

#[tokio::test]
async fn when_every_provider_answers_off_schema_the_error_says_so_with_each() {
    let (a, b) = (ScriptedServer::start().await, ScriptedServer::start().await);
    a.push(CHAT, ok("not json"));
    b.push(CHAT, ok("[1, 2, 3]"));
    let h = client(&[("a", &a), ("b", &b)], policy());
    let opts = RequestOptions::new().fail_over_on_invalid_answer(true);
    let err = h.client.chat_with(triage(), &opts).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidAnswer);
    assert_eq!(err.attempts().len(), 2);
    assert_eq!((a.count(CHAT), b.count(CHAT)), (1, 1), "each asked once");
}

/// An OpenAI-format provider that cannot carry images (as a format without vision would).
#[derive(Debug)]
struct NoImages(OpenAi);

impl Provider for NoImages {
    fn id(&self) -> &ProviderId {
        self.0.id()
    }
    fn kind(&self) -> &'static str {
        "no-images"
    }
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
    fn default_model(&self, capability: Capability) -> Option<&str> {
        self.0.default_model(capability)
    }
    fn chat_request(
        &self,
        req: &ChatRequest,
        ctx: &RequestContext<'_>,
    ) -> llm_failover::Result<HttpRequest> {
        self.0.chat_request(req, ctx)
    }
    fn check_chat(&self, req: &ChatRequest) -> llm_failover::Result<()> {
        if req.messages.iter().any(|m| !m.images.is_empty()) {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!("{} cannot carry images", self.id()),
            ));
        }
        self.0.check_chat(req)
    }
    fn chat_response(&self, raw: RawResponse, model: &str) -> llm_failover::Result<ChatResponse> {
        self.0.chat_response(raw, model)
    }
    fn stream_decoder(&self, model: &str) -> Box<dyn StreamDecoder> {
        self.0.stream_decoder(model)
    }
    fn error(&self, raw: &RawResponse, now: Now) -> Error {
        self.0.error(raw, now)
    }
    fn limit_report(&self, headers: &HeaderMap, now: Now) -> LimitReport {
        self.0.limit_report(headers, now)
    }
}

fn mixed(a: &ScriptedServer, b: &ScriptedServer) -> Client {
    let blind = NoImages(
        OpenAi::new(
            ProviderId::new("blind"),
            format!("{}/v1", a.url()).parse().unwrap(),
        )
        .with_chat_model("gpt-4o-mini"),
    );
    Client::builder()
        .clock(Arc::new(ManualClock::new()))
        .rng(Arc::new(FixedRng::new([0.5])))
        .policy(policy())
        .provider(
            Arc::new(blind),
            ProviderSettings::new().credential(Credential::new(SENTINEL)),
        )
        .provider(
            openai("seeing", b),
            ProviderSettings::new().credential(Credential::new(SENTINEL)),
        )
        .build()
        .unwrap()
}

fn with_image() -> ChatRequest {
    ChatRequest::new()
        .message(Message::user("What is this?").image(Image::base64("image/png", "iVBORw0KGgo=")))
}

#[tokio::test]
async fn a_provider_that_cannot_carry_a_request_is_skipped_before_sending() {
    let (a, b) = (ScriptedServer::start().await, ScriptedServer::start().await);
    b.push(CHAT, ok("a cat"));
    a.push(CHAT, ok("text only"));
    let client = mixed(&a, &b);
    let answer = client.chat(with_image()).await.unwrap();
    assert_eq!((answer.provider.as_str(), answer.attempts), ("seeing", 1));
    assert_eq!(
        a.count(CHAT),
        0,
        "nothing sent to the provider that cannot carry it"
    );
    let sent = &b.requests()[0].json();
    assert_eq!(sent["messages"][0]["content"][1]["type"], "image_url");
    // Its breaker and counters are untouched: the next plain request goes to it first.
    let plain = client.chat(ChatRequest::from_prompt("hi")).await.unwrap();
    assert_eq!(plain.provider.as_str(), "blind");
    assert_eq!(
        client
            .stats()
            .provider("blind")
            .map(|s| (s.sent, s.terminal)),
        Some((1, 0))
    );
}

#[tokio::test]
async fn pinned_to_a_provider_that_cannot_carry_it_the_request_is_refused_unsent() {
    let (a, b) = (ScriptedServer::start().await, ScriptedServer::start().await);
    let client = mixed(&a, &b);
    let err = client
        .chat_with(with_image(), &RequestOptions::new().provider("blind"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    assert!(
        err.message().contains("cannot carry images"),
        "{}",
        err.message()
    );
    assert_eq!(err.sends(), Some(0));
    assert_eq!(a.count(CHAT) + b.count(CHAT), 0);
}
