//! Streaming through the client: failover only before the first content, errors after it
//! surface on the stream.

use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use futures_util::StreamExt;
use llm_failover::clock::ManualClock;
use llm_failover::provider::anthropic::Anthropic;
use llm_failover::rng::FixedRng;
use llm_failover::{ChatRequest, Client, Credential, ErrorKind, ProviderId, ProviderSettings};
use llm_failover_emulator::scripted::{Reply, ReplyBody, ScriptedServer};

fn delta(text: &str) -> String {
    format!(
        "data: {{\"id\":\"c1\",\"model\":\"gpt-4o-mini\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}},\"finish_reason\":null}}]}}\n\n"
    )
}

fn finish() -> Vec<String> {
    vec![
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n".into(),
        "data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2,\"total_tokens\":11}}\n\n".into(),
        "data: [DONE]\n\n".into(),
    ]
}

fn req() -> ChatRequest {
    ChatRequest::from_prompt("hello").max_tokens(16)
}

async fn collect(mut s: llm_failover::ChatStream) -> (String, Option<llm_failover::Error>) {
    let mut text = String::new();
    while let Some(item) = s.next().await {
        match item {
            Ok(c) => text.push_str(&c.delta),
            Err(e) => return (text, Some(e)),
        }
    }
    (text, None)
}

#[tokio::test]
async fn streams_the_answer_piece_by_piece() {
    let a = ScriptedServer::start().await;
    let mut events = vec![delta("Hel"), delta("lo")];
    events.extend(finish());
    a.push(CHAT, Reply::sse(events));
    let h = client(&[("a", &a)], policy());
    let s = h.client.chat_stream(req()).await.unwrap();
    assert_eq!(s.provider().as_str(), "a");
    let (text, err) = collect(s).await;
    assert_eq!(text, "Hello");
    assert!(err.is_none());
    assert_eq!(a.requests()[0].json()["stream"], true);
}

#[tokio::test]
async fn fails_over_when_the_primary_errors_before_any_content() {
    let (a, b) = (ScriptedServer::start().await, ScriptedServer::start().await);
    a.push(
        CHAT,
        Reply::json(503, error_body("server_error", None, "overloaded")),
    );
    let mut events = vec![delta("from b")];
    events.extend(finish());
    b.push(CHAT, Reply::sse(events));
    let h = client(&[("a", &a), ("b", &b)], policy());
    let s = h.client.chat_stream(req()).await.unwrap();
    assert_eq!(s.provider().as_str(), "b");
    assert_eq!(s.attempts(), 2);
    assert_eq!(collect(s).await.0, "from b");
}

#[tokio::test]
async fn an_error_event_before_content_still_fails_over() {
    let (a, b) = (ScriptedServer::start().await, ScriptedServer::start().await);
    a.push(
        CHAT,
        Reply::sse(["data: {\"error\":{\"message\":\"The server had an error\",\"type\":\"server_error\",\"code\":null}}\n\n"]),
    );
    let mut events = vec![delta("b")];
    events.extend(finish());
    b.push(CHAT, Reply::sse(events));
    let h = client(&[("a", &a), ("b", &b)], policy());
    let s = h.client.chat_stream(req()).await.unwrap();
    assert_eq!(s.provider().as_str(), "b");
}

#[tokio::test]
async fn an_error_after_content_surfaces_on_the_stream_without_failover() {
    let (a, b) = (ScriptedServer::start().await, ScriptedServer::start().await);
    a.push(
        CHAT,
        Reply::sse([
            delta("partial "),
            "data: {\"error\":{\"message\":\"The server had an error\",\"type\":\"server_error\",\"code\":null}}\n\n".to_owned(),
        ]),
    );
    let h = client(&[("a", &a), ("b", &b)], policy());
    let s = h.client.chat_stream(req()).await.unwrap();
    let (text, err) = collect(s).await;
    assert_eq!(text, "partial ");
    let err = err.expect("the error surfaces on the stream");
    assert_eq!(err.kind(), ErrorKind::Server);
    assert_eq!(err.provider().map(|p| p.as_str()), Some("a"));
    assert_eq!(b.count(CHAT), 0);
}

#[tokio::test]
async fn a_stream_cut_after_content_is_an_error_not_a_silent_end() {
    let a = ScriptedServer::start().await;
    a.push(
        CHAT,
        Reply::status(200)
            .header("content-type", "text/event-stream")
            .with_body(ReplyBody::Truncated(delta("cut ").into())),
    );
    let h = client(&[("a", &a)], policy());
    let s = h.client.chat_stream(req()).await.unwrap();
    let (text, err) = collect(s).await;
    assert_eq!(text, "cut ");
    assert!(err.is_some(), "a cut stream must not end silently");
}

#[tokio::test]
async fn streams_across_wire_formats_when_the_primary_is_throttled() {
    let (a, b) = (ScriptedServer::start().await, ScriptedServer::start().await);
    a.push(CHAT, rate_limited().header("retry-after", "10"));
    b.push(
        "/v1/messages",
        Reply::sse([
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-3-5-haiku-latest\",\"stop_reason\":null,\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Bonjour\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":2}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        ]),
    );
    let clock = ManualClock::new();
    let client = Client::builder()
        .clock(Arc::new(clock.clone()))
        .rng(Arc::new(FixedRng::new([0.5])))
        .policy(policy())
        .provider(
            openai("a", &a),
            ProviderSettings::new().credential(Credential::new(SENTINEL)),
        )
        .provider(
            Arc::new(
                Anthropic::new(ProviderId::new("b"), b.url().parse().unwrap())
                    .with_model("claude-3-5-haiku-latest"),
            ),
            ProviderSettings::new().credential(Credential::new("sk-ant-test")),
        )
        .build()
        .unwrap();
    let s = client.chat_stream(req()).await.unwrap();
    assert_eq!(s.provider().as_str(), "b");
    assert_eq!(collect(s).await.0, "Bonjour");
    assert!(clock.sleeps().is_empty());
    assert_eq!(client.stats().provider("a").unwrap().rate_limited, 1);
    let _ = Duration::ZERO;
}
