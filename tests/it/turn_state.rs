//! Provider state that travels with an assistant turn, end to end against the emulator:
//! Gemini 3's thought signatures and Claude's signed thinking blocks are kept on the turn
//! (`ChatResponse::to_message`, the last chunk of a stream), sent back to the provider that
//! gave them — which verifies them, and refuses a tool-use turn without them as the real
//! services do — and dropped on the way to any other provider.
//!
//! The documents: ai.google.dev/gemini-api/docs/thought-signatures ("the signature is attached
//! to the first functionCall part"; Gemini 3 refuses the current turn's calls without one;
//! `skip_thought_signature_validator` for calls it did not sign), docs.claude.com/en/docs/
//! build-with-claude/extended-thinking ("Preserving thinking blocks": a tool-use turn sent
//! back with thinking on must start with its thinking blocks, unchanged).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use llm_failover::clock::ManualClock;
use llm_failover::config::Policy;
use llm_failover::provider::Provider;
use llm_failover::provider::anthropic::Anthropic;
use llm_failover::provider::gemini::Gemini;
use llm_failover::rng::SeededRng;
use llm_failover::{
    ChatRequest, ChatResponse, Client, Credential, ErrorKind, Message, ProviderId,
    ProviderSettings, RequestOptions, Tool, ToolChoice,
};
use llm_failover_emulator::{Emulator, LogEntry};
use serde_json::json;

const GEMINI_3: &str = "gemini-3-flash-preview";

fn adapter(emu: &Emulator, prefix: &str) -> Arc<dyn Provider> {
    let id = ProviderId::new(prefix);
    let base = emu.base_url(prefix);
    if prefix.starts_with("claude") {
        Arc::new(Anthropic::new(id, base.parse().unwrap()).with_model("claude-sonnet-4-5"))
    } else {
        Arc::new(Gemini::new(id, format!("{base}/v1beta").parse().unwrap()).with_model(GEMINI_3))
    }
}

async fn emulator() -> Emulator {
    Emulator::builder()
        .gemini("gemini")
        .gemini("gemini-eu")
        .anthropic("claude")
        .start()
        .await
        .unwrap()
}

fn client(emu: &Emulator, order: &[&str]) -> Client {
    let mut policy = Policy::default();
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

fn question() -> ChatRequest {
    ChatRequest::new()
        .user("What is the weather in Paris?")
        .tool(
            Tool::new(
                "get_weather",
                json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
            )
            .description("The current weather in a city."),
        )
        // Auto: extended thinking refuses a forced tool ("Thinking may not be enabled when
        // tool_choice forces tool use"); the emulator calls the tool the user mentions.
        .tool_choice(ToolChoice::Auto)
        .max_tokens(2048)
}

/// Extended thinking on, as Anthropic's guide turns it on.
fn thinking(req: ChatRequest) -> ChatRequest {
    req.extra_body(
        "thinking",
        json!({"type": "enabled", "budget_tokens": 1024}),
    )
}

/// The tool's answer to every call of `turn`, after it.
fn answered(req: ChatRequest, turn: Message) -> ChatRequest {
    let ids: Vec<String> = turn.tool_calls.iter().map(|c| c.id.clone()).collect();
    let mut req = req.message(turn);
    for id in ids {
        req = req.message(Message::tool_result(id, r#"{"temperature_c": 18}"#));
    }
    req
}

/// The emulator's log entry of the last chat request to `prefix`.
fn last(emu: &Emulator, prefix: &str) -> LogEntry {
    emu.log()
        .into_iter()
        .rev()
        .find(|e| e.provider == prefix)
        .expect("a request to the provider")
}

#[tokio::test]
async fn gemini_3_gets_its_own_signature_back_and_refuses_the_turn_without_one() {
    let emu = emulator().await;
    let c = client(&emu, &["gemini"]);
    let first = c.chat(question()).await.unwrap();
    assert_eq!(first.tool_calls.len(), 1);
    let state = first
        .provider_state
        .as_ref()
        .expect("Gemini 3 signed its call");
    assert_eq!(state.provider(), &ProviderId::new("gemini"));
    // The turn, kept whole, goes back: Gemini verifies its own signature.
    let next = answered(question(), first.to_message());
    let second = c.chat(next.clone()).await.unwrap();
    assert!(!second.text.is_empty());
    assert_eq!(last(&emu, "gemini").returned, [1, 0]);

    // A turn whose state was not kept (rebuilt by hand) gets the documented placeholder:
    // accepted, and counted as such.
    let bare = Message::assistant_calls(first.text.clone(), first.tool_calls.clone());
    c.chat(answered(question(), bare)).await.unwrap();
    assert_eq!(last(&emu, "gemini").returned, [0, 1]);

    // A signature tampered with is refused by Gemini 3: terminal, sent once.
    let mut forged: serde_json::Value = serde_json::to_value(first.to_message()).unwrap();
    let sig = forged["provider_state"]["calls"]
        .as_object_mut()
        .unwrap()
        .values_mut()
        .next()
        .unwrap();
    *sig = json!("Zm9yZ2Vk");
    let forged: Message = serde_json::from_value(forged).unwrap();
    let before = emu.counters("gemini").requests;
    let err = c.chat(answered(question(), forged)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidRequest, "{err}");
    assert!(err.to_string().contains("thought_signature"), "{err}");
    assert_eq!(emu.counters("gemini").requests, before + 1);
}

#[tokio::test]
async fn a_streamed_gemini_turn_hands_its_signatures_over_on_the_last_chunk() {
    let emu = emulator().await;
    let c = client(&emu, &["gemini"]);
    let mut stream = c.chat_stream(question()).await.unwrap();
    let (mut calls, mut state) = (Vec::new(), None);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        calls.extend(chunk.tool_calls);
        if chunk.provider_state.is_some() {
            assert!(
                chunk.finish_reason.is_some(),
                "the state comes with the end"
            );
            state = chunk.provider_state;
        }
    }
    let mut turn = Message::assistant_calls("", calls);
    turn.provider_state = state;
    assert!(turn.provider_state.is_some());
    c.chat(answered(question(), turn)).await.unwrap();
    assert_eq!(last(&emu, "gemini").returned, [1, 0]);

    // A text answer's signature rides on an empty part of the last chunk; sent back with
    // the text, it verifies too.
    let plain = ChatRequest::from_prompt("Say hello.").max_tokens(64);
    let mut stream = c.chat_stream(plain.clone()).await.unwrap();
    let (mut text, mut state) = (String::new(), None);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        text.push_str(&chunk.delta);
        state = state.or(chunk.provider_state);
    }
    let mut turn = Message::assistant(text);
    turn.provider_state = state;
    c.chat(plain.message(turn).user("And goodbye?"))
        .await
        .unwrap();
    assert_eq!(last(&emu, "gemini").returned, [1, 0]);
}

/// The same kind, another provider (another key, another project): Gemini's signatures are
/// its own, so the turn goes with the placeholder, never the first provider's signature.
#[tokio::test]
async fn a_turn_failed_over_to_another_provider_goes_without_the_first_ones_state() {
    let emu = emulator().await;
    let first = client(&emu, &["gemini"]).chat(question()).await.unwrap();
    assert!(first.provider_state.is_some());
    let next = answered(question(), first.to_message());
    let other = client(&emu, &["gemini-eu"]);
    other.chat(next.clone()).await.unwrap();
    assert_eq!(last(&emu, "gemini-eu").returned, [0, 1]);
    // To Claude with thinking on, a Gemini turn has no thinking blocks to give: Anthropic
    // refuses it, terminal — the state of one provider is never passed off as another's.
    let err = client(&emu, &["claude"])
        .chat(thinking(next))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidRequest, "{err}");
    assert!(err.to_string().contains("thinking"), "{err}");
}

#[tokio::test]
async fn claude_gets_its_thinking_blocks_back_first_and_refuses_a_tool_turn_without_them() {
    let emu = emulator().await;
    let c = client(&emu, &["claude"]);
    for stream in [false, true] {
        let first = if stream {
            let mut s = c.chat_stream(thinking(question())).await.unwrap();
            let mut answer = ChatResponse::new(ProviderId::new("claude"), "m", "");
            while let Some(chunk) = s.next().await {
                let chunk = chunk.unwrap();
                answer.text.push_str(&chunk.delta);
                answer.tool_calls.extend(chunk.tool_calls);
                answer.provider_state = answer.provider_state.or(chunk.provider_state);
            }
            answer
        } else {
            c.chat(thinking(question())).await.unwrap()
        };
        assert_eq!(first.tool_calls.len(), 1, "stream: {stream}");
        assert!(
            !format!("{first:?}").contains("I read the conversation"),
            "no thinking text in Debug"
        );
        assert!(first.provider_state.is_some(), "stream: {stream}");
        let next = thinking(answered(question(), first.to_message()));
        c.chat(next).await.unwrap();
        assert_eq!(last(&emu, "claude").returned, [1, 0], "stream: {stream}");
        // Without its thinking blocks the turn is one Anthropic refuses: terminal, once.
        let bare = Message::assistant_calls(first.text.clone(), first.tool_calls.clone());
        let err = c
            .chat_with(thinking(answered(question(), bare)), &RequestOptions::new())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidRequest, "{err}");
        assert!(err.to_string().contains("thinking"), "{err}");
    }
}
