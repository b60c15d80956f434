//! The Anthropic adapter over real loopback HTTP, driven by the same one-attempt functions the
//! router uses (`chat_once`, `chat_stream_once`).
//!
//! Wire format references (fixtures are the docs' example bodies):
//! - Messages API: <https://docs.claude.com/en/api/messages> (`POST /v1/messages`, headers
//!   `x-api-key` and `anthropic-version`, required `max_tokens`, top-level `system`).
//! - Streaming: <https://docs.claude.com/en/docs/build-with-claude/streaming> (typed events
//!   `message_start` … `message_stop`, `ping`, and `event: error` after a `200`).
//! - Errors: <https://docs.claude.com/en/api/errors> (400 `invalid_request_error`, 401
//!   `authentication_error`, 403 `permission_error`, 404 `not_found_error`, 413
//!   `request_too_large`, 429 `rate_limit_error`, 500 `api_error`, 529 `overloaded_error`;
//!   the `request-id` header). Which kind each status and body is, is a row of the
//!   conformance table (`conformance.rs`), every kind alike; here, what goes beyond it.
//! - Rate limits: <https://docs.claude.com/en/api/rate-limits> (`retry-after` on a 429,
//!   `anthropic-ratelimit-*` headers).
//! - Tools, images and structured answers: see `adapter_anthropic/tools.rs`.

use std::time::Duration;

use llm_failover::provider::anthropic::{Anthropic, DEFAULT_MAX_TOKENS};
use llm_failover::{
    ChatRequest, ChatResponse, Credential, Disposition, Error, ErrorKind, FinishReason, ProviderId,
    Result, Usage,
};
use llm_failover_emulator::scripted::{Reply, ScriptedServer};
use serde_json::json;

use crate::support::adapter::{self, only_request};

#[path = "adapter_anthropic/tools.rs"]
mod tools;

const MODEL: &str = "claude-sonnet-4-5";
const SENTINEL: &str = "sk-ant-SENTINEL-abc123";
const PATH: &str = "/v1/messages";

fn provider(server: &ScriptedServer) -> Anthropic {
    Anthropic::new(ProviderId::new("claude"), server.url().parse().unwrap()).with_model(MODEL)
}

async fn chat_with(
    server: &ScriptedServer,
    req: &ChatRequest,
    key: Option<&Credential>,
) -> Result<ChatResponse> {
    adapter::chat(&provider(server), req, MODEL, key)
        .await
        .result
}

async fn chat(server: &ScriptedServer, req: &ChatRequest) -> Result<ChatResponse> {
    chat_with(server, req, Some(&Credential::new(SENTINEL))).await
}

/// Streams `req`; returns every item the stream yielded.
async fn stream(
    server: &ScriptedServer,
    req: &ChatRequest,
) -> Result<Vec<Result<llm_failover::ChatChunk>>> {
    let key = Credential::new(SENTINEL);
    adapter::stream_items(&provider(server), req, MODEL, Some(&key)).await
}

fn error_body(vendor_type: &str, message: &str) -> String {
    json!({"type": "error", "error": {"type": vendor_type, "message": message}}).to_string()
}

fn assert_no_secret(err: &Error) {
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(SENTINEL), "key leaked: {shown}");
}

#[tokio::test]
async fn sends_a_messages_request_with_system_separated_and_max_tokens_always_present() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(200, include_str!("../fixtures/anthropic/message_ok.json")),
    );
    let req = ChatRequest::new()
        .system("You are terse.")
        .user("Hello")
        .user("Are you there?")
        .assistant("Yes.")
        .system("Answer in English.")
        .user("Name?")
        .temperature(0.7)
        .stop("\n\nHuman:");
    chat(&server, &req).await.unwrap();

    let got = only_request(&server);
    assert_eq!(got.method, "POST");
    assert_eq!(got.path, PATH);
    assert_eq!(got.query, None);
    assert_eq!(got.header("x-api-key"), Some(SENTINEL));
    assert_eq!(got.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(got.header("content-type"), Some("application/json"));
    assert_eq!(
        got.json(),
        json!({
            "model": MODEL,
            "max_tokens": DEFAULT_MAX_TOKENS,
            "system": "You are terse.\n\nAnswer in English.",
            "messages": [
                {"role": "user", "content": "Hello\n\nAre you there?"},
                {"role": "assistant", "content": "Yes."},
                {"role": "user", "content": "Name?"}
            ],
            "temperature": 0.7,
            "stop_sequences": ["\n\nHuman:"]
        })
    );
}

#[tokio::test]
async fn sends_the_requests_max_tokens_and_no_key_header_without_a_credential() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(200, include_str!("../fixtures/anthropic/message_ok.json")),
    );
    chat_with(
        &server,
        &ChatRequest::from_prompt("hi").max_tokens(64),
        None,
    )
    .await
    .unwrap();
    let got = only_request(&server);
    assert_eq!(got.json()["max_tokens"], 64);
    assert!(got.json().get("system").is_none());
    assert_eq!(got.header("x-api-key"), None);
}

#[tokio::test]
async fn sends_the_configured_anthropic_version() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(200, include_str!("../fixtures/anthropic/message_ok.json")),
    );
    let p = provider(&server).with_version("2024-10-22");
    adapter::chat(&p, &ChatRequest::from_prompt("hi"), MODEL, None)
        .await
        .result
        .unwrap();
    assert_eq!(
        only_request(&server).header("anthropic-version"),
        Some("2024-10-22")
    );
}

#[tokio::test]
async fn reads_text_usage_stop_reason_model_and_request_id() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(200, include_str!("../fixtures/anthropic/message_ok.json"))
            .header("request-id", "req_018EeWyXxfu5pfWkrYcMdjWG"),
    );
    let resp = chat(&server, &ChatRequest::from_prompt("Hello"))
        .await
        .unwrap();
    assert_eq!(resp.text, "Hi! My name is Claude.");
    assert_eq!(resp.finish_reason, Some(FinishReason::Stop));
    assert_eq!(resp.usage, Some(Usage::new(2095, 503)));
    assert_eq!(resp.model, "claude-3-7-sonnet-20250219");
    assert_eq!(resp.provider.as_str(), "claude");
    assert_eq!(
        resp.request_id.as_deref(),
        Some("req_018EeWyXxfu5pfWkrYcMdjWG")
    );
}

#[tokio::test]
async fn joins_text_blocks_and_maps_every_stop_reason() {
    let cases = [
        ("end_turn", FinishReason::Stop),
        ("stop_sequence", FinishReason::Stop),
        ("max_tokens", FinishReason::Length),
        ("refusal", FinishReason::ContentFilter),
        ("pause_turn", FinishReason::Other("pause_turn".into())),
    ];
    let server = ScriptedServer::start().await;
    for (stop, _) in &cases {
        let body = json!({
            "type": "message", "model": MODEL, "stop_reason": stop,
            "content": [{"type": "text", "text": "Hel"}, {"type": "thinking", "thinking": "…"},
                        {"type": "text", "text": "lo"}],
            "usage": {"input_tokens": 1, "output_tokens": 2}
        });
        server.push(PATH, Reply::json(200, body.to_string()));
    }
    for (stop, reason) in cases {
        let resp = chat(&server, &ChatRequest::from_prompt("x")).await.unwrap();
        assert_eq!(resp.text, "Hello", "{stop}");
        assert_eq!(resp.finish_reason, Some(reason), "{stop}");
    }
}

#[tokio::test]
async fn streams_typed_events_into_text_usage_and_stop_reason() {
    let server = ScriptedServer::start().await;
    let events: Vec<String> = include_str!("../fixtures/anthropic/stream_ok.txt")
        .split_inclusive("\n\n")
        .map(str::to_owned)
        .collect();
    server.push(PATH, Reply::sse(events));
    let items = stream(&server, &ChatRequest::from_prompt("Hello"))
        .await
        .unwrap();
    let chunks: Vec<_> = items.into_iter().map(|c| c.unwrap()).collect();

    let text: String = chunks.iter().map(|c| c.delta.as_str()).collect();
    assert_eq!(text, "Hello!");
    assert_eq!(chunks[0].model.as_deref(), Some("claude-opus-4-20250514"));
    let last = chunks.last().unwrap();
    assert_eq!(last.finish_reason, Some(FinishReason::Stop));
    assert_eq!(last.usage, Some(Usage::new(25, 15)));
    let got = only_request(&server);
    assert_eq!(got.json()["stream"], true);
    assert_eq!(got.json()["max_tokens"], DEFAULT_MAX_TOKENS);
}

#[tokio::test]
async fn an_error_event_mid_stream_ends_it_with_the_classified_error() {
    let server = ScriptedServer::start().await;
    let overloaded = include_str!("../fixtures/anthropic/error_overloaded.json").trim();
    let rate_limited = error_body("rate_limit_error", "Number of request tokens exceeded");
    for body in [overloaded.to_owned(), rate_limited] {
        server.push(
            PATH,
            Reply::sse([
                r#"event: message_start
data: {"type":"message_start","message":{"model":"claude-x","usage":{"input_tokens":5,"output_tokens":1}}}

"#
                .to_owned(),
                "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Par\"}}\n\n".to_owned(),
                format!("event: error\ndata: {body}\n\n"),
                "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"never\"}}\n\n".to_owned(),
            ]),
        );
    }
    for (kind, code) in [
        (ErrorKind::Overloaded, "overloaded_error"),
        (ErrorKind::RateLimited, "rate_limit_error"),
    ] {
        let items = stream(&server, &ChatRequest::from_prompt("x"))
            .await
            .unwrap();
        assert_eq!(items.len(), 3, "model chunk, text, error; nothing after");
        assert_eq!(items[1].as_ref().unwrap().delta, "Par");
        let err = items[2].as_ref().unwrap_err();
        assert_eq!(err.kind(), kind);
        assert_eq!(err.code(), Some(code));
        assert_eq!(err.provider().map(ProviderId::as_str), Some("claude"));
        assert!(err.is_retryable());
    }
}

#[tokio::test]
async fn a_stream_cut_mid_event_is_a_decode_error() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::sse([
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_de",
        ]),
    );
    let items = stream(&server, &ChatRequest::from_prompt("x"))
        .await
        .unwrap();
    assert_eq!(items[0].as_ref().unwrap().delta, "Hi");
    let err = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Decode, "{err}");
    assert!(err.to_string().starts_with("claude: "), "{err}");
}

#[tokio::test]
async fn a_stream_refused_before_it_starts_is_classified_by_status() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(429, error_body("rate_limit_error", "slow down")).header("retry-after", "12"),
    );
    let err = stream(&server, &ChatRequest::from_prompt("x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RateLimited);
    assert_eq!(err.retry_after(), Some(Duration::from_secs(12)));
    assert_eq!(err.status(), Some(429));
}

#[tokio::test]
async fn the_not_found_error_keeps_the_body_request_id_and_message() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(
            404,
            include_str!("../fixtures/anthropic/error_not_found.json"),
        ),
    );
    let err = chat(&server, &ChatRequest::from_prompt("x"))
        .await
        .unwrap_err();
    assert_eq!(err.request_id(), Some("req_011CSHoEeqs5C35K2UUqR7Fy"));
    assert_eq!(err.message(), "The requested resource could not be found.");
    assert!(err.is_terminal());
}

#[tokio::test]
async fn a_529_overloaded_is_transient_and_a_429_carries_its_retry_after() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(
            529,
            include_str!("../fixtures/anthropic/error_overloaded.json"),
        )
        .header("request-id", "req_529"),
    );
    server.push(
        PATH,
        Reply::json(
            429,
            error_body(
                "rate_limit_error",
                "Number of request tokens has exceeded your per-minute rate limit",
            ),
        )
        .header("retry-after", "30")
        .header("anthropic-ratelimit-requests-limit", "50")
        .header("anthropic-ratelimit-requests-remaining", "0"),
    );
    let err = chat(&server, &ChatRequest::from_prompt("x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Overloaded);
    assert_eq!(err.disposition(), Disposition::Transient);
    assert_eq!(err.request_id(), Some("req_529"));

    let err = chat(&server, &ChatRequest::from_prompt("x"))
        .await
        .unwrap_err();
    assert!(err.is_rate_limited());
    assert_eq!(err.retry_after(), Some(Duration::from_secs(30)));
    assert_eq!(err.disposition(), Disposition::RateLimited);
}

#[tokio::test]
async fn bad_success_bodies_are_decode_errors_naming_provider_and_status() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("malformed JSON", b"{\"content\": [".to_vec()),
        ("not an object", b"[1, 2, 3]".to_vec()),
        (
            "missing content",
            br#"{"type":"message","model":"m","stop_reason":"end_turn"}"#.to_vec(),
        ),
        (
            "empty content",
            br#"{"type":"message","content":[],"stop_reason":"end_turn"}"#.to_vec(),
        ),
        (
            "content of the wrong type",
            br#"{"type":"message","content":"Hi"}"#.to_vec(),
        ),
        (
            "HTML page",
            b"<!DOCTYPE html><html><body>Gateway</body></html>".to_vec(),
        ),
        ("empty body", Vec::new()),
        (
            "invalid UTF-8",
            b"{\"content\": [{\"type\": \"text\", \"text\": \"\xff\xfe\"}]}".to_vec(),
        ),
    ];
    let server = ScriptedServer::start().await;
    for (_, body) in &cases {
        server.push(
            PATH,
            Reply::status(200)
                .header("content-type", "application/json")
                .body(body.clone()),
        );
    }
    for (what, _) in cases {
        let err = chat(&server, &ChatRequest::from_prompt("x"))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Decode, "{what}: {err}");
        let shown = err.to_string();
        assert!(
            shown.starts_with("claude: could not decode response (HTTP 200)"),
            "{what}: {shown}"
        );
    }
}

#[tokio::test]
async fn an_error_object_inside_a_200_is_classified() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(
            200,
            include_str!("../fixtures/anthropic/error_overloaded.json"),
        ),
    );
    let err = chat(&server, &ChatRequest::from_prompt("x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Overloaded);
}

#[tokio::test]
async fn the_key_never_appears_in_an_error_even_when_the_server_echoes_it() {
    let server = ScriptedServer::start().await;
    let echo = format!("invalid x-api-key: {SENTINEL}");
    server.push(
        PATH,
        Reply::json(
            401,
            json!({"type": "error", "error": {"type": SENTINEL, "message": echo}}).to_string(),
        )
        .header("request-id", SENTINEL),
    );
    server.push(
        PATH,
        Reply::status(502).body(format!("<html>bad key {SENTINEL}</html>")),
    );
    server.push(
        PATH,
        Reply::sse([format!(
            "event: error\ndata: {}\n\n",
            json!({"type": "error", "error": {"type": "api_error", "message": echo}})
        )]),
    );
    for _ in 0..2 {
        let err = chat(&server, &ChatRequest::from_prompt("x"))
            .await
            .unwrap_err();
        assert_no_secret(&err);
    }
    let items = stream(&server, &ChatRequest::from_prompt("x"))
        .await
        .unwrap();
    let err = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Server);
    assert_no_secret(err);
    assert!(err.message().contains("[redacted]"), "{err}");
}

#[tokio::test]
async fn requests_that_cannot_be_expressed_are_rejected_before_sending() {
    let server = ScriptedServer::start().await;
    for req in [
        ChatRequest::new().system("only instructions"),
        ChatRequest::from_prompt("x").temperature(f32::NAN),
    ] {
        let err = chat(&server, &req).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidRequest, "{err}");
        assert_eq!(err.provider().map(ProviderId::as_str), Some("claude"));
    }
    assert!(server.requests().is_empty());
}
