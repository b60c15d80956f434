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
//!   the `request-id` header).
//! - Rate limits: <https://docs.claude.com/en/api/rate-limits> (`retry-after` on a 429,
//!   `anthropic-ratelimit-*` headers).
//! - Tool use: <https://docs.claude.com/en/docs/agents-and-tools/tool-use/overview> — the
//!   `get_weather` / `get_time` definitions, `message_tool_use.json` (the "Single tool
//!   example" answer, verbatim) and the follow-up request with its `tool_result`, and the
//!   "JSON mode" section (a single tool forced with `tool_choice`; its `record_summary`
//!   schema). `message_json_answer.json` is that section's answer as the adapter's answer
//!   tool receives it: the docs' `tool_use` answer shape, named `json_answer-record_summary`,
//!   its input following the schema (the docs show the request only).
//! - Implementing tool use: <https://docs.claude.com/en/docs/agents-and-tools/tool-use/implement-tool-use>
//!   — `tool_choice` `auto` / `any` / `tool` / `none`; "Parallel tool use" (one text block,
//!   then four calls `toolu_01` … `toolu_04`: `message_parallel_tool_use.json`, in the
//!   Messages API's message envelope); tool results "must immediately follow" their calls,
//!   and "the tool_result blocks must come FIRST in the content array".
//! - Streaming with tools: <https://docs.claude.com/en/docs/build-with-claude/streaming>,
//!   "Streaming request with tool use": `stream_tool_use.txt` verbatim (`content_block_start`
//!   with the `tool_use` id and name, `input_json_delta` pieces, `content_block_stop`).
//!   `stream_json_answer.txt` is the same answer as the adapter's forced answer tool gets it:
//!   no text block (forced tool use emits none, per "Forcing tool use" in the implementing
//!   guide) and the tool named `json_answer-weather`.
//! - Vision: <https://docs.claude.com/en/docs/build-with-claude/vision> — `image` blocks with
//!   a `base64` source (`media_type`, `data`) or a `url` source (the docs' ant photo), images
//!   before the text.

use std::time::Duration;

use llm_failover::provider::anthropic::{Anthropic, DEFAULT_MAX_TOKENS};
use llm_failover::provider::Provider;
use llm_failover::{
    ChatRequest, ChatResponse, Credential, Disposition, Error, ErrorKind, FinishReason, Image,
    Message, ProviderId, ResponseFormat, Result, Tool, ToolCall, ToolChoice, Usage,
};
use llm_failover_emulator::scripted::{Reply, ScriptedServer};
use serde_json::json;

use crate::support::adapter::{self, only_request};

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
    assert_eq!(
        resp.usage,
        Some(Usage {
            input_tokens: 2095,
            output_tokens: 503
        })
    );
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
    assert_eq!(
        last.usage,
        Some(Usage {
            input_tokens: 25,
            output_tokens: 15
        })
    );
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
async fn classifies_each_error_class_by_status_and_type() {
    let html = "<html><body><h1>502 Bad Gateway</h1></body></html>";
    let cases: Vec<(u16, String, ErrorKind, Option<&str>)> = vec![
        (400, error_body("invalid_request_error", "messages: roles must alternate"), ErrorKind::InvalidRequest, Some("invalid_request_error")),
        (400, error_body("invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum"), ErrorKind::ContextLengthExceeded, Some("invalid_request_error")),
        (400, error_body("invalid_request_error", "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."), ErrorKind::QuotaExhausted, Some("invalid_request_error")),
        (401, error_body("authentication_error", "invalid x-api-key"), ErrorKind::Auth, Some("authentication_error")),
        (403, error_body("permission_error", "Your API key does not have permission to use the specified resource."), ErrorKind::PermissionDenied, Some("permission_error")),
        (404, include_str!("../fixtures/anthropic/error_not_found.json").to_owned(), ErrorKind::NotFound, Some("not_found_error")),
        (413, error_body("request_too_large", "Request exceeds the maximum allowed number of bytes."), ErrorKind::PayloadTooLarge, Some("request_too_large")),
        (429, error_body("rate_limit_error", "Number of requests has exceeded your rate limit"), ErrorKind::RateLimited, Some("rate_limit_error")),
        // An entitlement refused as a 429: waiting never admits it (see anthropic/error.rs
        // `refine`; recorded verbatim in github.com/anthropics/claude-code/issues/41054, the
        // long-context requirement in docs.claude.com/en/docs/build-with-claude/context-windows).
        (429, include_str!("../fixtures/anthropic/error_extra_usage_long_context.json").to_owned(), ErrorKind::PermissionDenied, Some("rate_limit_error")),
        (500, error_body("api_error", "Internal server error"), ErrorKind::Server, Some("api_error")),
        (529, include_str!("../fixtures/anthropic/error_overloaded.json").to_owned(), ErrorKind::Overloaded, Some("overloaded_error")),
        (502, html.to_owned(), ErrorKind::Server, None),
        (503, String::new(), ErrorKind::Overloaded, None),
        (413, "<html>413 Request Entity Too Large</html>".to_owned(), ErrorKind::PayloadTooLarge, None),
    ];
    let server = ScriptedServer::start().await;
    for (status, body, _, _) in &cases {
        server.push(PATH, Reply::status(*status).body(body.clone()));
    }
    for (status, body, kind, code) in cases {
        let err = chat(&server, &ChatRequest::from_prompt("x"))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), kind, "{status} {body}: {err}");
        assert_eq!(err.status(), Some(status));
        assert_eq!(err.code(), code, "{status}");
        assert_eq!(err.provider().map(ProviderId::as_str), Some("claude"));
        assert_eq!(err.model(), Some(MODEL));
    }
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

fn fixture_events(text: &str) -> Vec<String> {
    text.split_inclusive("\n\n").map(str::to_owned).collect()
}

/// The tool-use overview's `get_weather`.
fn weather_tool() -> Tool {
    Tool::new(
        "get_weather",
        json!({
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"],
                         "description": "The unit of temperature, either 'celsius' or 'fahrenheit'"}
            },
            "required": ["location"]
        }),
    )
    .description("Get the current weather in a given location")
}

/// The tool-use overview's `get_time`.
fn time_tool() -> Tool {
    Tool::new(
        "get_time",
        json!({
            "type": "object",
            "properties": {
                "timezone": {"type": "string", "description": "The IANA time zone name, e.g. America/Los_Angeles"}
            },
            "required": ["timezone"]
        }),
    )
    .description("Get the current time in a given time zone")
}

/// The "JSON mode" section's `record_summary` schema.
fn record_summary_schema() -> serde_json::Value {
    json!({
        "type": "object",
        "properties": {
            "key_colors": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "r": {"type": "number", "description": "red value [0.0, 1.0]"},
                        "g": {"type": "number", "description": "green value [0.0, 1.0]"},
                        "b": {"type": "number", "description": "blue value [0.0, 1.0]"},
                        "name": {"type": "string", "description": "Human-readable color name in snake_case, e.g. \"olive_green\" or \"turquoise\""}
                    },
                    "required": ["r", "g", "b", "name"]
                },
                "description": "Key colors in the image. Limit to less than four."
            },
            "description": {"type": "string", "description": "Image description. One to two sentences max."},
            "estimated_year": {"type": "integer", "description": "Estimated year that the image was taken, if it is a photo. Only set this if the image appears to be non-fictional. Rough estimates are okay!"}
        },
        "required": ["key_colors", "description"]
    })
}

#[tokio::test]
async fn sends_tools_with_their_input_schemas_and_each_tool_choice() {
    let server = ScriptedServer::start().await;
    let choices = [
        (None, None),
        (Some(ToolChoice::Auto), Some(json!({"type": "auto"}))),
        (Some(ToolChoice::None), Some(json!({"type": "none"}))),
        (Some(ToolChoice::Required), Some(json!({"type": "any"}))),
        (
            Some(ToolChoice::named("get_time")),
            Some(json!({"type": "tool", "name": "get_time"})),
        ),
    ];
    for _ in &choices {
        server.push(
            PATH,
            Reply::json(
                200,
                include_str!("../fixtures/anthropic/message_tool_use.json"),
            ),
        );
    }
    for (choice, _) in &choices {
        let mut req = ChatRequest::from_prompt(
            "What is the weather like right now in New York? Also what time is it there?",
        )
        .tool(weather_tool())
        .tool(time_tool());
        req.tool_choice = choice.clone();
        chat(&server, &req).await.unwrap();
    }
    let reqs = server.requests();
    assert_eq!(
        reqs[0].json()["tools"],
        json!([
            {
                "name": "get_weather",
                "description": "Get the current weather in a given location",
                "input_schema": weather_tool().parameters
            },
            {
                "name": "get_time",
                "description": "Get the current time in a given time zone",
                "input_schema": time_tool().parameters
            }
        ])
    );
    for (got, (choice, want)) in reqs.iter().zip(&choices) {
        assert_eq!(got.json().get("tool_choice"), want.as_ref(), "{choice:?}");
        assert_eq!(got.json()["tools"].as_array().map(Vec::len), Some(2));
    }
}

#[tokio::test]
async fn reads_a_tool_use_answer_and_sends_its_result_back_as_the_docs_show() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(
            200,
            include_str!("../fixtures/anthropic/message_tool_use.json"),
        ),
    );
    server.push(
        PATH,
        Reply::json(200, include_str!("../fixtures/anthropic/message_ok.json")),
    );
    let question =
        ChatRequest::from_prompt("What is the weather like in San Francisco?").tool(weather_tool());
    let answer = chat(&server, &question).await.unwrap();
    assert_eq!(
        answer.text,
        "I'll check the current weather in San Francisco for you."
    );
    assert_eq!(answer.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(
        answer.tool_calls,
        vec![ToolCall::new(
            "toolu_01A09q90qw90lq917835lq9",
            "get_weather",
            json!({"location": "San Francisco, CA", "unit": "celsius"})
        )]
    );
    assert_eq!(answer.model, "claude-sonnet-4-5");

    let follow_up = question
        .message(answer.to_message())
        .message(Message::tool_result(
            "toolu_01A09q90qw90lq917835lq9",
            "15 degrees",
        ));
    chat(&server, &follow_up).await.unwrap();
    assert_eq!(
        server.requests()[1].json()["messages"],
        json!([
            {"role": "user", "content": "What is the weather like in San Francisco?"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "I'll check the current weather in San Francisco for you."},
                {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather",
                 "input": {"location": "San Francisco, CA", "unit": "celsius"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01A09q90qw90lq917835lq9", "content": "15 degrees"}
            ]}
        ])
    );
}

#[tokio::test]
async fn reads_parallel_calls_in_order_after_the_text_before_them() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(
            200,
            include_str!("../fixtures/anthropic/message_parallel_tool_use.json"),
        ),
    );
    let req = ChatRequest::from_prompt("Weather and time in San Francisco and New York?")
        .tool(weather_tool())
        .tool(time_tool());
    let answer = chat(&server, &req).await.unwrap();
    assert_eq!(answer.text, "I'll check both locations...");
    assert_eq!(answer.finish_reason, Some(FinishReason::ToolCalls));
    let calls: Vec<(&str, &str, &serde_json::Value)> = answer
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), &c.arguments))
        .collect();
    assert_eq!(
        calls,
        [
            (
                "toolu_01",
                "get_weather",
                &json!({"location": "San Francisco, CA"})
            ),
            (
                "toolu_02",
                "get_weather",
                &json!({"location": "New York, NY"})
            ),
            (
                "toolu_03",
                "get_time",
                &json!({"timezone": "America/Los_Angeles"})
            ),
            (
                "toolu_04",
                "get_time",
                &json!({"timezone": "America/New_York"})
            ),
        ]
    );
    assert_eq!(
        answer.usage,
        Some(Usage {
            input_tokens: 523,
            output_tokens: 89
        })
    );
}

#[tokio::test]
async fn continues_a_tool_conversation_begun_on_openai() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(200, include_str!("../fixtures/anthropic/message_ok.json")),
    );
    // As OpenAI answered it: parallel calls with `call_…` ids, then one tool message per
    // result, then the user's next words; a second round with text before its call.
    let req = ChatRequest::new()
        .system("Be brief.")
        .user("What's the weather like in Paris and Tokyo?")
        .message(Message::assistant_calls(
            "",
            vec![
                ToolCall::new(
                    "call_abc123",
                    "get_weather",
                    json!({"location": "Paris, France"}),
                ),
                ToolCall::new(
                    "call_def456",
                    "get_weather",
                    json!({"location": "Tokyo, Japan"}),
                ),
            ],
        ))
        .message(Message::tool_result(
            "call_abc123",
            r#"{"temperature_c": 18}"#,
        ))
        .message(Message::tool_result(
            "call_def456",
            r#"{"temperature_c": 24}"#,
        ))
        .user("And the time in Tokyo?")
        .message(Message::assistant_calls(
            "Let me check.",
            vec![ToolCall::new(
                "call_ghi789",
                "get_time",
                json!({"timezone": "Asia/Tokyo"}),
            )],
        ))
        .message(Message::tool_result("call_ghi789", "21:04"))
        .tool(weather_tool())
        .tool(time_tool());
    provider(&server).check_chat(&req).unwrap();
    chat(&server, &req).await.unwrap();
    let body = only_request(&server).json();
    assert_eq!(body["system"], "Be brief.");
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": "What's the weather like in Paris and Tokyo?"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "call_abc123", "name": "get_weather", "input": {"location": "Paris, France"}},
                {"type": "tool_use", "id": "call_def456", "name": "get_weather", "input": {"location": "Tokyo, Japan"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_abc123", "content": "{\"temperature_c\": 18}"},
                {"type": "tool_result", "tool_use_id": "call_def456", "content": "{\"temperature_c\": 24}"},
                {"type": "text", "text": "And the time in Tokyo?"}
            ]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "call_ghi789", "name": "get_time", "input": {"timezone": "Asia/Tokyo"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_ghi789", "content": "21:04"}
            ]}
        ])
    );
}

#[tokio::test]
async fn ids_outside_anthropics_pattern_are_made_portable_on_calls_and_results_alike() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(200, include_str!("../fixtures/anthropic/message_ok.json")),
    );
    let req = ChatRequest::from_prompt("Weather?")
        .message(Message::assistant_calls(
            "",
            vec![ToolCall::new(
                "fc:1/a",
                "get_weather",
                json!({"location": "Oslo"}),
            )],
        ))
        .message(Message::tool_result("fc:1/a", "-3 C"))
        .tool(weather_tool());
    chat(&server, &req).await.unwrap();
    let body = only_request(&server).json();
    assert_eq!(body["messages"][1]["content"][0]["id"], "fc_1_a");
    assert_eq!(body["messages"][2]["content"][0]["tool_use_id"], "fc_1_a");
}

#[tokio::test]
async fn sends_images_from_base64_and_url_sources_before_the_text() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(200, include_str!("../fixtures/anthropic/message_ok.json")),
    );
    let ant =
        "https://upload.wikimedia.org/wikipedia/commons/a/a7/Camponotus_flavomarginatus_ant.jpg";
    let req = ChatRequest::new().message(
        Message::user("How are these images different?")
            .image(Image::base64("image/jpeg", "/9j/4AAQSkZJRg..."))
            .image(Image::url(ant)),
    );
    provider(&server).check_chat(&req).unwrap();
    chat(&server, &req).await.unwrap();
    assert_eq!(
        only_request(&server).json()["messages"],
        json!([{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQSkZJRg..."}},
            {"type": "image", "source": {"type": "url", "url": ant}},
            {"type": "text", "text": "How are these images different?"}
        ]}])
    );
}

#[tokio::test]
async fn a_schema_answer_is_a_forced_tool_whose_input_becomes_the_text() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(
            200,
            include_str!("../fixtures/anthropic/message_json_answer.json"),
        ),
    );
    let req = ChatRequest::new()
        .message(
            Message::user("Describe this image.")
                .image(Image::base64("image/jpeg", "/9j/4AAQSkZJRg...")),
        )
        .response_format(ResponseFormat::JsonSchema {
            name: "record_summary".into(),
            schema: record_summary_schema(),
        });
    let answer = chat(&server, &req).await.unwrap();

    let body = only_request(&server).json();
    assert!(
        body.get("system").is_none(),
        "no instruction: the tool carries the schema"
    );
    let tools = body["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0]["name"], "json_answer-record_summary");
    assert_eq!(tools[0]["input_schema"], record_summary_schema());
    assert!(tools[0]["description"]
        .as_str()
        .unwrap()
        .contains("`record_summary`"));
    assert_eq!(
        body["tool_choice"],
        json!({"type": "tool", "name": "json_answer-record_summary", "disable_parallel_tool_use": true})
    );

    let fixture: serde_json::Value = serde_json::from_str(include_str!(
        "../fixtures/anthropic/message_json_answer.json"
    ))
    .unwrap();
    assert_eq!(answer.json().unwrap(), fixture["content"][0]["input"]);
    assert_eq!(answer.text, fixture["content"][0]["input"].to_string());
    assert!(answer.tool_calls.is_empty(), "not a call of the caller's");
    assert_eq!(answer.finish_reason, Some(FinishReason::Stop));
}

#[tokio::test]
async fn json_object_is_forced_too_and_a_request_with_its_own_tools_gets_an_instruction() {
    let server = ScriptedServer::start().await;
    for _ in 0..2 {
        server.push(
            PATH,
            Reply::json(200, include_str!("../fixtures/anthropic/message_ok.json")),
        );
    }
    let plain = ChatRequest::new()
        .system("Be exact.")
        .user("List two colours.")
        .response_format(ResponseFormat::JsonObject);
    chat(&server, &plain).await.unwrap();
    let schema = json!({"type": "object", "properties": {"colours": {"type": "array"}}});
    let with_tools = ChatRequest::from_prompt("List two colours, checking the weather first.")
        .tool(weather_tool())
        .tool_choice(ToolChoice::Auto)
        .response_format(ResponseFormat::JsonSchema {
            name: "palette".into(),
            schema: schema.clone(),
        });
    chat(&server, &with_tools).await.unwrap();

    let reqs = server.requests();
    let forced = reqs[0].json();
    assert_eq!(forced["system"], "Be exact.");
    assert_eq!(forced["tools"][0]["name"], "json_answer");
    assert_eq!(
        forced["tools"][0]["input_schema"],
        json!({"type": "object"})
    );
    assert_eq!(
        forced["tool_choice"],
        json!({"type": "tool", "name": "json_answer", "disable_parallel_tool_use": true})
    );
    assert!(forced.get("response_format").is_none());

    let told = reqs[1].json();
    assert_eq!(
        told["tools"].as_array().map(Vec::len),
        Some(1),
        "the caller's tool only"
    );
    assert_eq!(told["tool_choice"], json!({"type": "auto"}));
    let system = told["system"].as_str().unwrap();
    assert!(system.contains("`palette`"), "{system}");
    assert!(system.contains(&schema.to_string()), "{system}");
}

#[tokio::test]
async fn streams_tool_use_pieces_into_one_whole_call() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::sse(fixture_events(include_str!(
            "../fixtures/anthropic/stream_tool_use.txt"
        ))),
    );
    let req = ChatRequest::from_prompt("What is the weather like in San Francisco?")
        .tool(weather_tool())
        .tool_choice(ToolChoice::Required);
    let chunks: Vec<_> = stream(&server, &req)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.unwrap())
        .collect();

    let text: String = chunks.iter().map(|c| c.delta.as_str()).collect();
    assert_eq!(text, "Okay, let's check the weather for San Francisco, CA:");
    let with_calls: Vec<_> = chunks.iter().filter(|c| !c.tool_calls.is_empty()).collect();
    assert_eq!(with_calls.len(), 1, "the call goes out once, whole");
    assert_eq!(
        with_calls[0].tool_calls,
        vec![ToolCall::new(
            "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
            "get_weather",
            json!({"location": "San Francisco, CA", "unit": "fahrenheit"})
        )]
    );
    assert!(with_calls[0].finish_reason.is_none(), "at its block's stop");
    let last = chunks.last().unwrap();
    assert_eq!(last.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(
        last.usage,
        Some(Usage {
            input_tokens: 472,
            output_tokens: 89
        })
    );
    let body = only_request(&server).json();
    assert_eq!(body["stream"], true);
    assert_eq!(body["tool_choice"], json!({"type": "any"}));
}

#[tokio::test]
async fn streams_a_structured_answer_as_text() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::sse(fixture_events(include_str!(
            "../fixtures/anthropic/stream_json_answer.txt"
        ))),
    );
    let req = ChatRequest::from_prompt("What is the weather like in San Francisco?")
        .response_format(ResponseFormat::JsonSchema {
            name: "weather".into(),
            schema: weather_tool().parameters,
        });
    let chunks: Vec<_> = stream(&server, &req)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.unwrap())
        .collect();
    let text: String = chunks.iter().map(|c| c.delta.as_str()).collect();
    assert_eq!(
        text,
        r#"{"location": "San Francisco, CA", "unit": "fahrenheit"}"#
    );
    assert!(chunks.iter().all(|c| c.tool_calls.is_empty()));
    assert_eq!(
        chunks.last().unwrap().finish_reason,
        Some(FinishReason::Stop)
    );
    assert_eq!(
        only_request(&server).json()["tool_choice"],
        json!({"type": "tool", "name": "json_answer-weather", "disable_parallel_tool_use": true})
    );
}

#[tokio::test]
async fn refuses_before_sending_what_anthropic_cannot_carry() {
    let server = ScriptedServer::start().await;
    let call = || ToolCall::new("call_1", "get_weather", json!({"location": "Paris"}));
    let cases: Vec<(ChatRequest, ErrorKind, &str)> = vec![
        (
            ChatRequest::new()
                .message(Message::user("What is this?").image(Image::base64("image/bmp", "Qk0="))),
            ErrorKind::Unsupported,
            "`image/bmp`",
        ),
        (
            ChatRequest::from_prompt("Weather?")
                .message(Message::assistant_calls("", vec![call()]))
                .user("Never mind."),
            ErrorKind::Unsupported,
            "call `call_1` has no result",
        ),
        (
            ChatRequest::from_prompt("x").tool(Tool::new("json_answer", json!({"type": "object"}))),
            ErrorKind::Unsupported,
            "`json_answer`",
        ),
        (
            ChatRequest::from_prompt("x").message(Message::tool_result("call_9", "18 C")),
            ErrorKind::InvalidRequest,
            "no earlier assistant",
        ),
    ];
    for (req, kind, want) in cases {
        let err = provider(&server).check_chat(&req).unwrap_err();
        assert_eq!(err.kind(), kind, "{want}: {err}");
        assert!(err.message().contains(want), "{want}: {err}");
        let err = chat(&server, &req).await.unwrap_err();
        assert_eq!(err.kind(), kind, "{want}: {err}");
    }
    assert!(server.requests().is_empty(), "nothing sent");
}
