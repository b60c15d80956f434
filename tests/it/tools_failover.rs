//! End to end, against the emulator over loopback: a tool conversation that starts on one
//! provider and, when that provider fails mid-conversation, goes on at another of another
//! wire format — its calls (and their ids) and the tools' results translated — and a
//! structured answer from each format.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use llm_failover::clock::ManualClock;
use llm_failover::config::Policy;
use llm_failover::provider::Provider;
use llm_failover::provider::anthropic::Anthropic;
use llm_failover::provider::gemini::Gemini;
use llm_failover::provider::openai::OpenAi;
use llm_failover::rng::SeededRng;
use llm_failover::{
    ChatRequest, Client, Credential, FinishReason, Message, ProviderId, ProviderSettings,
    ResponseFormat, Tool, ToolChoice,
};
use llm_failover_emulator::{Emulator, Fault};
use serde_json::json;

fn adapter(emu: &Emulator, prefix: &str) -> Arc<dyn Provider> {
    let id = ProviderId::new(prefix);
    let base = emu.base_url(prefix);
    match prefix {
        "openai" => Arc::new(OpenAi::new(id, base.parse().unwrap()).with_chat_model("gpt-4o-mini")),
        "anthropic" => Arc::new(
            Anthropic::new(id, base.parse().unwrap()).with_model("claude-3-5-haiku-latest"),
        ),
        // Gemini's API version is part of the base URL the adapter is given.
        "gemini" => Arc::new(
            Gemini::new(id, format!("{base}/v1beta").parse().unwrap())
                .with_model("gemini-2.5-flash"),
        ),
        other => panic!("no emulated chat provider `{other}` here"),
    }
}

async fn emulator() -> Emulator {
    Emulator::builder()
        .openai("openai")
        .anthropic("anthropic")
        .gemini("gemini")
        .start()
        .await
        .unwrap()
}

/// A client over `order`, in that failover order.
fn client(emu: &Emulator, order: &[&str]) -> Client {
    let mut policy = Policy::default();
    policy.request_timeout = Duration::from_secs(5);
    policy.deadline = Duration::from_secs(3600);
    let mut b = Client::builder()
        .clock(Arc::new(ManualClock::new()))
        .rng(Arc::new(SeededRng::new(7)))
        .policy(policy);
    for prefix in order {
        b = b.provider(
            adapter(emu, prefix),
            ProviderSettings::new().credential(Credential::new(emu.key(prefix))),
        );
    }
    b.build().unwrap()
}

fn weather() -> Tool {
    Tool::new(
        "get_weather",
        json!({
            "type": "object",
            "properties": { "city": { "type": "string" } },
            "required": ["city"]
        }),
    )
    .description("The current weather in a city.")
}

fn question() -> ChatRequest {
    ChatRequest::new()
        .system("Use the tools you are given.")
        .user("What is the weather in Paris?")
        .tool(weather())
        .tool_choice(ToolChoice::Required)
        .max_tokens(200)
}

/// Turn one at `first`; `first` fails; turn two (the tool's result) is answered by `then`.
async fn fails_over_mid_conversation(first: &str, then: &str) {
    let emu = emulator().await;
    let client = client(&emu, &[first, then]);
    let turn = client.chat(question()).await.unwrap();
    assert_eq!(turn.provider.as_str(), first);
    assert_eq!(turn.finish_reason, Some(FinishReason::ToolCalls), "{first}");
    let call = turn.tool_calls.first().expect("a tool call").clone();
    assert_eq!(call.name, "get_weather");
    assert!(
        call.arguments["city"].is_string(),
        "{first}: {:?}",
        call.arguments
    );
    assert!(!call.id.is_empty());

    emu.script(first, [Fault::Status { status: 503 }]);
    let follow_up = question()
        .tool_choice(ToolChoice::Auto)
        .message(turn.to_message())
        .message(Message::tool_result(
            &call.id,
            r#"{"temperature_c": 18, "sky": "clear"}"#,
        ));
    let answer = client.chat(follow_up).await.unwrap();
    assert_eq!(answer.provider.as_str(), then, "{first} → {then}");
    assert_eq!(answer.attempts, 2);
    assert!(
        answer.tool_calls.is_empty(),
        "{first} → {then}: an answer, not another call"
    );
    assert!(
        answer.text.contains("18"),
        "{first} → {then}: the tool's result reached the second provider: {}",
        answer.text
    );
    assert_eq!(emu.counters(first).server_errors, 1);
}

#[tokio::test]
async fn a_tool_conversation_started_on_openai_goes_on_at_anthropic() {
    fails_over_mid_conversation("openai", "anthropic").await;
}

#[tokio::test]
async fn a_tool_conversation_started_on_anthropic_goes_on_at_gemini() {
    fails_over_mid_conversation("anthropic", "gemini").await;
}

#[tokio::test]
async fn a_tool_conversation_started_on_gemini_goes_on_at_openai() {
    fails_over_mid_conversation("gemini", "openai").await;
}

#[tokio::test]
async fn streamed_tool_calls_arrive_whole_in_every_format() {
    let emu = emulator().await;
    for prefix in ["openai", "anthropic", "gemini"] {
        let client = client(&emu, &[prefix]);
        let mut stream = client.chat_stream(question()).await.unwrap();
        let mut calls = Vec::new();
        let mut finish = None;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.unwrap();
            calls.extend(chunk.tool_calls);
            finish = chunk.finish_reason.or(finish);
        }
        assert_eq!(calls.len(), 1, "{prefix}");
        assert_eq!(calls[0].name, "get_weather", "{prefix}");
        assert!(calls[0].arguments["city"].is_string(), "{prefix}");
        assert_eq!(finish, Some(FinishReason::ToolCalls), "{prefix}");
    }
}

#[tokio::test]
async fn every_format_gives_a_structured_answer_that_parses() {
    #[derive(serde::Deserialize, Debug)]
    #[allow(dead_code)]
    struct Triage {
        category: String,
        urgency: String,
    }
    let emu = emulator().await;
    for prefix in ["openai", "anthropic", "gemini"] {
        let client = client(&emu, &[prefix]);
        let req = ChatRequest::from_prompt("Triage: the printer is on fire.")
            .max_tokens(200)
            .response_format(ResponseFormat::JsonSchema {
                name: "triage".into(),
                schema: json!({
                    "type": "object",
                    "properties": {
                        "category": { "type": "string" },
                        "urgency": { "type": "string", "enum": ["low", "normal", "high"] }
                    },
                    "required": ["category", "urgency"]
                }),
            });
        let answer = client.chat(req).await.unwrap();
        let triage: Triage = answer.parse().unwrap_or_else(|e| panic!("{prefix}: {e}"));
        assert!(
            ["low", "normal", "high"].contains(&triage.urgency.as_str()),
            "{prefix}"
        );
        assert!(
            answer.tool_calls.is_empty(),
            "{prefix}: the schema is not the caller's tool"
        );
    }
}
