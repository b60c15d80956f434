//! The `openai` adapter over real loopback HTTP, driven exactly as the router drives it
//! (`chat_once`, `chat_stream_once`, `transcribe_once`).
//!
//! Wire formats follow OpenAI's API reference:
//! - Chat Completions: https://platform.openai.com/docs/api-reference/chat/create (request
//!   fields, the `chat.completion` object; the fixture is its example response),
//! - streaming: https://platform.openai.com/docs/api-reference/chat-streaming (the
//!   `chat.completion.chunk` object, `data: [DONE]`) and `stream_options.include_usage` ("an
//!   additional chunk will be streamed before the `data: [DONE]` message … the `choices` field
//!   will always be an empty array"),
//! - audio: https://platform.openai.com/docs/api-reference/audio/createTranscription (multipart
//!   `file`, `model`, `language`, `prompt`, `response_format`, `temperature`; the `json` and
//!   `verbose_json` example bodies),
//! - errors: https://platform.openai.com/docs/guides/error-codes (401, 403, 429 "Rate limit
//!   reached" vs "You exceeded your current quota", 500, 503 "engine overloaded") and the
//!   rate-limits guide https://platform.openai.com/docs/guides/rate-limits,
//! - Groq: https://console.groq.com/docs/openai (base URL `https://api.groq.com/openai/v1`).

use std::time::Duration;

use bytes::Bytes;
use emulator::scripted::{Recorded, Reply, ReplyBody, ScriptedServer};
use futures_util::StreamExt;
use llm_failover::clock::{Clock, ManualClock};
use llm_failover::http::{Transport, TransportOptions};
use llm_failover::provider::openai::OpenAi;
use llm_failover::provider::{
    chat_once, chat_stream_once, transcribe_once, ChunkStream, Exchange, Provider,
    RequestContext,
};
use llm_failover::ratelimit::delay_in_message;
use llm_failover::{
    AudioInput, ChatChunk, ChatRequest, ChatResponse, Credential, Error, ErrorKind, FinishReason,
    ProviderId, ResponseFormat, Transcript, TranscriptFormat, TranscriptionRequest, Usage,
};

const TIMEOUT: Duration = Duration::from_secs(5);
const CHAT: &str = "/v1/chat/completions";
const AUDIO: &str = "/v1/audio/transcriptions";
const SENTINEL: &str = "sk-SENTINEL-abc123";

struct Harness {
    server: ScriptedServer,
    provider: OpenAi,
    transport: Transport,
    clock: ManualClock,
}

impl Harness {
    async fn new() -> Self {
        Self::at("/v1").await
    }

    async fn at(base_path: &str) -> Self {
        let server = ScriptedServer::start().await;
        let base = format!("{}{base_path}", server.url()).parse().unwrap();
        Harness {
            provider: OpenAi::new(ProviderId::new("openai"), base)
                .with_chat_model("gpt-4o-mini")
                .with_transcription_model("whisper-1"),
            server,
            transport: Transport::new(&TransportOptions::default()).unwrap(),
            clock: ManualClock::new(),
        }
    }

    async fn chat_with(&self, req: &ChatRequest, key: Option<&Credential>) -> Exchange<ChatResponse> {
        let ctx = RequestContext::new("gpt-4o-mini", key);
        chat_once(&self.provider, &self.transport, req, ctx, TIMEOUT, || self.clock.both()).await
    }

    async fn chat(&self, req: &ChatRequest) -> Exchange<ChatResponse> {
        let key = Credential::new(SENTINEL);
        self.chat_with(req, Some(&key)).await
    }

    async fn stream(&self, req: &ChatRequest) -> Exchange<ChunkStream> {
        let key = Credential::new(SENTINEL);
        let ctx = RequestContext::new("gpt-4o-mini", Some(&key));
        chat_stream_once(&self.provider, &self.transport, req, ctx, TIMEOUT, || self.clock.both())
            .await
    }

    async fn transcribe(&self, req: &TranscriptionRequest) -> Exchange<Transcript> {
        let key = Credential::new(SENTINEL);
        let ctx = RequestContext::new("whisper-1", Some(&key));
        transcribe_once(&self.provider, &self.transport, req, ctx, TIMEOUT, || self.clock.both())
            .await
    }

    fn only_request(&self) -> Recorded {
        let mut all = self.server.requests();
        assert_eq!(all.len(), 1, "expected exactly one request");
        all.remove(0)
    }
}

async fn collect(stream: ChunkStream) -> Vec<Result<ChatChunk, Error>> {
    stream.collect().await
}

/// Splits `text` into pieces of `size` bytes (cutting lines, JSON and UTF-8 characters).
fn pieces(text: &str, size: usize) -> Vec<Bytes> {
    text.as_bytes()
        .chunks(size)
        .map(Bytes::copy_from_slice)
        .collect()
}

fn sse_reply(text: &str, size: usize) -> Reply {
    let chunks = pieces(text, size)
        .into_iter()
        .map(|b| (Duration::ZERO, b))
        .collect();
    Reply::status(200)
        .header("content-type", "text/event-stream")
        .with_body(ReplyBody::Chunks(chunks))
}

fn prompt() -> ChatRequest {
    ChatRequest::new()
        .system("You are terse.")
        .user("Say hello.")
        .assistant("Hello.")
        .system("Now in French.")
        .user("Again.")
        .max_tokens(32)
        .temperature(0.2)
        .stop("\n\n")
}

fn wav() -> Vec<u8> {
    let data_len: u32 = 1600;
    let mut v = Vec::new();
    v.extend_from_slice(b"RIFF");
    v.extend_from_slice(&(36 + data_len).to_le_bytes());
    v.extend_from_slice(b"WAVEfmt ");
    v.extend_from_slice(&16u32.to_le_bytes());
    v.extend_from_slice(&1u16.to_le_bytes());
    v.extend_from_slice(&1u16.to_le_bytes());
    v.extend_from_slice(&8000u32.to_le_bytes());
    v.extend_from_slice(&16000u32.to_le_bytes());
    v.extend_from_slice(&2u16.to_le_bytes());
    v.extend_from_slice(&16u16.to_le_bytes());
    v.extend_from_slice(b"data");
    v.extend_from_slice(&data_len.to_le_bytes());
    v.extend((0..data_len).map(|i| (i % 251) as u8));
    v
}

// ---------------------------------------------------------------------------------------------
// Chat

#[tokio::test]
async fn sends_a_chat_completion_and_reads_text_usage_model_and_request_id() {
    let h = Harness::new().await;
    h.server.push(
        CHAT,
        Reply::json(200, include_str!("fixtures/openai/chat_completion.json"))
            .header("x-request-id", "req_abc"),
    );
    let ex = h.chat(&prompt()).await;
    let resp = ex.result.unwrap();
    assert_eq!(resp.text, "Hello! How can I assist you today?");
    assert_eq!(resp.finish_reason, Some(FinishReason::Stop));
    assert_eq!(
        resp.usage,
        Some(Usage {
            input_tokens: 19,
            output_tokens: 10
        })
    );
    assert_eq!(resp.model, "gpt-4.1-2025-04-14");
    assert_eq!(resp.request_id.as_deref(), Some("req_abc"));
    assert_eq!(resp.provider.as_str(), "openai");
    assert!(ex.report.is_some());

    let got = h.only_request();
    assert_eq!(got.method, "POST");
    assert_eq!(got.path, CHAT);
    assert_eq!(got.query, None);
    assert_eq!(got.header("authorization"), Some(&*format!("Bearer {SENTINEL}")));
    assert_eq!(got.header("content-type"), Some("application/json"));
    // System messages stay where they were, in order.
    assert_eq!(
        got.json(),
        serde_json::json!({
            "model": "gpt-4o-mini",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Say hello."},
                {"role": "assistant", "content": "Hello."},
                {"role": "system", "content": "Now in French."},
                {"role": "user", "content": "Again."},
            ],
            "max_tokens": 32,
            "temperature": 0.2,
            "stop": ["\n\n"],
        })
    );
}

#[tokio::test]
async fn json_modes_send_response_format() {
    let h = Harness::new().await;
    let answer = r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"{\"city\":\"Paris\"}"},"finish_reason":"stop"}]}"#;
    h.server.push(CHAT, Reply::json(200, answer));
    h.server.push(CHAT, Reply::json(200, answer));
    let object = ChatRequest::from_prompt("Capital of France as JSON")
        .response_format(ResponseFormat::JsonObject);
    let schema = ChatRequest::from_prompt("Capital of France as JSON").response_format(
        ResponseFormat::JsonSchema {
            name: "capital".into(),
            schema: serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        },
    );
    let a = h.chat(&object).await.result.unwrap();
    let b = h.chat(&schema).await.result.unwrap();
    assert_eq!(a.text, r#"{"city":"Paris"}"#);
    assert_eq!(b.text, a.text);
    let sent = h.server.requests();
    assert_eq!(sent[0].json()["response_format"], serde_json::json!({"type": "json_object"}));
    assert_eq!(
        sent[1].json()["response_format"],
        serde_json::json!({
            "type": "json_schema",
            "json_schema": {"name": "capital", "schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
        })
    );
}

#[tokio::test]
async fn sends_no_authorization_header_without_a_credential() {
    // Ollama and vLLM run without keys: https://github.com/ollama/ollama/blob/main/docs/openai.md
    let h = Harness::new().await;
    h.server
        .push(CHAT, Reply::json(200, include_str!("fixtures/openai/chat_completion.json")));
    h.chat_with(&ChatRequest::from_prompt("hi"), None)
        .await
        .result
        .unwrap();
    let got = h.only_request();
    assert!(got.headers.get("authorization").is_none());
}

#[tokio::test]
async fn null_content_is_empty_text_not_a_panic() {
    // A tool call answers with `content: null` (Chat Completions reference, function calling).
    let h = Harness::new().await;
    h.server.push(
        CHAT,
        Reply::json(200, include_str!("fixtures/openai/chat_completion_tool_call.json")),
    );
    let resp = h.chat(&prompt()).await.result.unwrap();
    assert_eq!(resp.text, "");
    assert_eq!(resp.finish_reason, Some(FinishReason::ToolCalls));
}

#[tokio::test]
async fn keeps_the_version_path_of_compatible_hosts() {
    // Groq: base_url https://api.groq.com/openai/v1 (https://console.groq.com/docs/openai).
    let h = Harness::at("/openai/v1/").await;
    h.server.push(
        "/openai/v1/chat/completions",
        Reply::json(200, include_str!("fixtures/openai/chat_completion.json")),
    );
    h.chat(&prompt()).await.result.unwrap();
    assert_eq!(h.only_request().path, "/openai/v1/chat/completions");
}

#[tokio::test]
async fn an_invalid_request_never_reaches_the_server() {
    let h = Harness::new().await;
    let ex = h.chat(&ChatRequest::new()).await;
    let err = ex.result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidRequest);
    assert_eq!(err.provider().map(ProviderId::as_str), Some("openai"));
    assert!(ex.report.is_none());
    assert!(h.server.requests().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Streaming

#[tokio::test]
async fn streams_chunks_split_across_writes_until_done() {
    let sse = include_str!("fixtures/openai/chat_stream.sse");
    // 1 byte per write cuts every line, every JSON value and the two-byte `ö`.
    for size in [1, 7, 64, sse.len()] {
        let h = Harness::new().await;
        h.server.push(CHAT, sse_reply(sse, size).header("x-request-id", "req_s"));
        let ex = h.stream(&prompt()).await;
        let chunks: Vec<ChatChunk> = collect(ex.result.unwrap())
            .await
            .into_iter()
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("split {size}: {e}"));
        let text: String = chunks.iter().map(|c| c.delta.as_str()).collect();
        assert_eq!(text, "Hello, wörld", "split {size}");
        let finish: Vec<_> = chunks.iter().filter_map(|c| c.finish_reason.clone()).collect();
        assert_eq!(finish, [FinishReason::Stop]);
        let usage: Vec<_> = chunks.iter().filter_map(|c| c.usage).collect();
        assert_eq!(
            usage,
            [Usage {
                input_tokens: 9,
                output_tokens: 3
            }]
        );
        assert_eq!(chunks[0].model.as_deref(), Some("gpt-4o-mini"));

        let got = h.only_request();
        let body = got.json();
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"], serde_json::json!({"include_usage": true}));
    }
}

#[tokio::test]
async fn nothing_after_done_is_read() {
    let h = Harness::new().await;
    let sse = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\ndata: {garbage\n\n";
    h.server.push(CHAT, sse_reply(sse, sse.len()));
    let items = collect(h.stream(&prompt()).await.result.unwrap()).await;
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].as_ref().unwrap().delta, "a");
}

#[tokio::test]
async fn a_stream_that_ends_before_done_is_an_error() {
    let h = Harness::new().await;
    // The body ends cleanly in the middle of an event: a decode error.
    let cut = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choi";
    h.server.push(CHAT, sse_reply(cut, 10));
    let items = collect(h.stream(&prompt()).await.result.unwrap()).await;
    let err = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Decode, "{err}");
    assert_eq!(err.provider().map(ProviderId::as_str), Some("openai"));
    assert_eq!(err.status(), Some(200));

    // The connection is reset mid-event: a connection error, retryable.
    h.server.push(
        CHAT,
        Reply::status(200)
            .header("content-type", "text/event-stream")
            .with_body(ReplyBody::Truncated(Bytes::from_static(b"data: {\"choices\":[{\"ind"))),
    );
    // Depending on when the reset lands, the error surfaces when the stream opens or from it.
    let err = match h.stream(&prompt()).await.result {
        Ok(stream) => collect(stream).await.pop().unwrap().unwrap_err(),
        Err(e) => e,
    };
    assert_eq!(err.kind(), ErrorKind::Connect, "{err}");
    assert!(err.is_retryable(), "{err}");
    assert_eq!(err.provider().map(ProviderId::as_str), Some("openai"));
}

#[tokio::test]
async fn errors_inside_a_stream_are_classified() {
    let cases = [
        (
            r#"{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}"#,
            ErrorKind::Server,
            Some("server_error"),
        ),
        (
            r#"{"error":{"message":"Rate limit reached for requests","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#,
            ErrorKind::RateLimited,
            Some("rate_limit_exceeded"),
        ),
        (
            r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":null}}"#,
            ErrorKind::QuotaExhausted,
            Some("insufficient_quota"),
        ),
        // OpenRouter ends a failed upstream generation with finish_reason "error".
        (
            r#"{"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}]}"#,
            ErrorKind::Server,
            Some("error"),
        ),
    ];
    for (event, kind, code) in cases {
        let h = Harness::new().await;
        let sse = format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"par\"}}}}]}}\n\ndata: {event}\n\n"
        );
        h.server.push(CHAT, sse_reply(&sse, 5));
        let items = collect(h.stream(&prompt()).await.result.unwrap()).await;
        assert_eq!(items.len(), 2, "{event}");
        assert_eq!(items[0].as_ref().unwrap().delta, "par");
        let err = items[1].as_ref().unwrap_err();
        assert_eq!(err.kind(), kind, "{event}");
        assert_eq!(err.code(), code, "{event}");
        assert_eq!(err.provider().map(ProviderId::as_str), Some("openai"));
    }
}

#[tokio::test]
async fn malformed_stream_json_is_a_decode_error_naming_the_provider() {
    let h = Harness::new().await;
    h.server.push(CHAT, sse_reply("data: {\"choices\": [tru\n\n", 4));
    let items = collect(h.stream(&prompt()).await.result.unwrap()).await;
    let err = items[0].as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Decode);
    assert!(err.to_string().starts_with("openai: "), "{err}");
    assert!(err.message().contains("chat.completion.chunk"), "{err}");
}

#[tokio::test]
async fn a_streamed_request_that_fails_before_the_first_event_is_classified() {
    let h = Harness::new().await;
    h.server.push(
        CHAT,
        Reply::json(429, include_str!("fixtures/openai/error_rate_limit_tokens.json"))
            .header("retry-after", "1"),
    );
    let ex = h.stream(&prompt()).await;
    let err = ex.result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RateLimited);
    assert_eq!(err.retry_after(), Some(Duration::from_secs(1)));
    assert!(ex.report.is_some());
}

// ---------------------------------------------------------------------------------------------
// Errors

#[tokio::test]
async fn error_statuses_and_bodies_are_classified() {
    use ErrorKind::*;
    let f = |name: &str| -> String {
        std::fs::read_to_string(format!(
            "{}/tests/fixtures/openai/{name}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    };
    let inline = |code: &str| format!(r#"{{"error":{{"message":"m","type":"invalid_request_error","param":null,"code":"{code}"}}}}"#);
    let plain = |ty: &str| format!(r#"{{"error":{{"message":"m","type":"{ty}","param":null,"code":null}}}}"#);
    let cases: Vec<(u16, String, ErrorKind, Option<&str>)> = vec![
        (400, plain("invalid_request_error"), InvalidRequest, Some("invalid_request_error")),
        (400, f("error_context_length.json"), ContextLengthExceeded, Some("context_length_exceeded")),
        (400, f("error_content_policy.json"), ContentFiltered, Some("content_policy_violation")),
        (400, inline("content_filter"), ContentFiltered, Some("content_filter")),
        (401, f("error_invalid_api_key.json"), Auth, Some("invalid_api_key")),
        (402, r#"{"error":{"message":"Insufficient credits","code":402}}"#.into(), QuotaExhausted, Some("402")),
        (403, r#"{"error":{"message":"Country, region, or territory not supported","type":"request_forbidden","param":null,"code":"unsupported_country_region_territory"}}"#.into(), PermissionDenied, Some("unsupported_country_region_territory")),
        (404, f("error_model_not_found.json"), NotFound, Some("model_not_found")),
        (408, plain("timeout"), Timeout, Some("timeout")),
        (409, plain("conflict"), Conflict, Some("conflict")),
        (413, plain("invalid_request_error"), PayloadTooLarge, Some("invalid_request_error")),
        (422, plain("invalid_request_error"), InvalidRequest, Some("invalid_request_error")),
        (418, plain("teapot"), InvalidRequest, Some("teapot")),
        (429, f("error_rate_limit_tokens.json"), RateLimited, Some("rate_limit_exceeded")),
        (429, f("error_insufficient_quota.json"), QuotaExhausted, Some("insufficient_quota")),
        (429, f("error_insufficient_quota_code_null.json"), QuotaExhausted, Some("insufficient_quota")),
        (429, r#"{"error":{"message":"You have used all available credits for this month.","type":"requests","code":null}}"#.into(), QuotaExhausted, Some("requests")),
        (429, r#"{"error":{"message":"Your credit balance is too low to access the API."}}"#.into(), QuotaExhausted, None),
        (429, f("error_request_too_large.json"), RequestTooLarge, Some("rate_limit_exceeded")),
        (500, f("error_server.json"), Server, Some("server_error")),
        (502, f("error_server.json"), Server, Some("server_error")),
        (503, f("error_overloaded.json"), Overloaded, Some("server_error")),
        (504, f("error_server.json"), Server, Some("server_error")),
        (520, f("error_server.json"), Server, Some("server_error")),
    ];
    for (status, body, kind, code) in cases {
        let h = Harness::new().await;
        h.server.push(CHAT, Reply::json(status, body.clone()).header("x-request-id", "req_e"));
        let ex = h.chat(&prompt()).await;
        let err = ex.result.unwrap_err();
        assert_eq!(err.kind(), kind, "{status} {body}");
        assert_eq!(err.code(), code, "{status} {body}");
        assert_eq!(err.status(), Some(status));
        assert_eq!(err.provider().map(ProviderId::as_str), Some("openai"));
        assert_eq!(err.model(), Some("gpt-4o-mini"));
        assert_eq!(err.request_id(), Some("req_e"));
        let message = serde_json::from_str::<serde_json::Value>(&body).unwrap()["error"]["message"]
            .as_str()
            .map(str::to_owned);
        if let Some(m) = message {
            assert_eq!(err.message(), m, "the provider's message is kept");
        }
    }
}

#[tokio::test]
async fn quota_and_oversized_requests_are_not_retried_like_throttling() {
    let h = Harness::new().await;
    h.server.push(CHAT, Reply::json(429, include_str!("fixtures/openai/error_insufficient_quota.json")));
    h.server.push(CHAT, Reply::json(429, include_str!("fixtures/openai/error_request_too_large.json")));
    let quota = h.chat(&prompt()).await.result.unwrap_err();
    assert!(!quota.is_retryable() && !quota.is_rate_limited());
    let too_large = h.chat(&prompt()).await.result.unwrap_err();
    assert!(too_large.is_terminal(), "{too_large}");
}

#[tokio::test]
async fn non_json_error_bodies_are_classified_by_status() {
    let cases: Vec<(u16, Vec<u8>, ErrorKind, &str)> = vec![
        (
            502,
            b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>cloudflare</body></html>".to_vec(),
            ErrorKind::Server,
            "502 Bad Gateway",
        ),
        (503, Vec::new(), ErrorKind::Overloaded, "empty response body"),
        (429, b"Too Many Requests".to_vec(), ErrorKind::RateLimited, "Too Many Requests"),
        (500, b"\xff\xfe\x00oops".to_vec(), ErrorKind::Server, "not valid UTF-8"),
        (401, b"{\"detail\": \"Unauthorized\"}".to_vec(), ErrorKind::Auth, "Unauthorized"),
    ];
    for (status, body, kind, needle) in cases {
        let h = Harness::new().await;
        h.server.push(CHAT, Reply::status(status).header("content-type", "text/html").body(body));
        let err = h.chat(&prompt()).await.result.unwrap_err();
        assert_eq!(err.kind(), kind, "{status}");
        assert_eq!(err.status(), Some(status));
        assert_eq!(err.code(), None);
        assert!(err.message().contains(needle), "{status}: {err}");
    }
}

#[tokio::test]
async fn bad_success_bodies_are_decode_errors() {
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("malformed JSON", b"{\"choices\": [".to_vec(), "malformed chat.completion"),
        ("missing choices", b"{\"id\":\"x\",\"object\":\"chat.completion\"}".to_vec(), "no `choices`"),
        ("empty choices", b"{\"choices\":[]}".to_vec(), "empty `choices`"),
        ("choice without message", b"{\"choices\":[{\"index\":0}]}".to_vec(), "no `message`"),
        ("HTML page", b"<!DOCTYPE html><html><body>Welcome to nginx!</body></html>".to_vec(), "Welcome to nginx!"),
        ("empty 200", Vec::new(), "an empty body"),
        ("invalid UTF-8", b"\xff\xfe\xfd".to_vec(), "expected a chat.completion"),
        ("content is a number", b"{\"choices\":[{\"message\":{\"content\":7}}]}".to_vec(), "content"),
    ];
    for (what, body, needle) in cases {
        let h = Harness::new().await;
        h.server.push(CHAT, Reply::status(200).header("content-type", "application/json").body(body));
        let err = h.chat(&prompt()).await.result.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Decode, "{what}: {err}");
        assert_eq!(err.status(), Some(200), "{what}");
        assert_eq!(err.provider().map(ProviderId::as_str), Some("openai"), "{what}");
        assert!(err.message().contains(needle), "{what}: {err}");
        assert!(err.is_retryable(), "{what}");
    }
}

#[tokio::test]
async fn an_error_object_in_a_200_is_classified() {
    let h = Harness::new().await;
    h.server.push(CHAT, Reply::json(200, include_str!("fixtures/openai/error_overloaded.json")));
    let err = h.chat(&prompt()).await.result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Server);
    assert_eq!(err.message(), "The engine is currently overloaded, please try again later.");
}

#[tokio::test]
async fn the_header_delay_wins_over_the_message_delay() {
    let h = Harness::new().await;
    let body = r#"{"error":{"message":"Rate limit reached for gpt-4o on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 20s.","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#;
    h.server.push(CHAT, Reply::json(429, body).header("retry-after", "2"));
    let err = h.chat(&prompt()).await.result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RateLimited);
    assert_eq!(err.retry_after(), Some(Duration::from_secs(2)));
}

#[tokio::test]
async fn the_message_delay_is_used_when_headers_state_none() {
    let h = Harness::new().await;
    h.server.push(CHAT, Reply::json(429, include_str!("fixtures/openai/error_rate_limit_tokens.json")));
    let err = h.chat(&prompt()).await.result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RateLimited);
    // "Please try again in 644ms." The message parser is `ratelimit::delay_in_message`; the
    // adapter must hand its answer on unchanged.
    assert_eq!(err.retry_after(), delay_in_message(err.message()));
    if delay_in_message("Please try again in 1s.").is_some() {
        assert_eq!(err.retry_after(), Some(Duration::from_millis(644)));
    }
}

// ---------------------------------------------------------------------------------------------
// Secrets

#[tokio::test]
async fn the_key_never_appears_in_errors_even_when_the_server_echoes_it() {
    let echo = format!(
        r#"{{"error":{{"message":"Incorrect API key provided: {SENTINEL}. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}}}"#
    );
    // The key straddles the 512-byte message cap: it must not survive half-cut.
    let long = format!(
        r#"{{"error":{{"message":"{} {SENTINEL} trailing words","type":"invalid_request_error"}}}}"#,
        "x".repeat(500)
    );
    let html = format!("<html><body>bad key {SENTINEL}</body></html>");
    let stream_echo = format!("data: {{\"error\":{{\"message\":\"key {SENTINEL} revoked\",\"type\":\"authentication_error\"}}}}\n\n");

    let h = Harness::new().await;
    for body in [echo, long, html] {
        h.server.push(CHAT, Reply::json(401, body));
    }
    h.server.push(CHAT, sse_reply(&stream_echo, 9));
    let mut errors = Vec::new();
    for _ in 0..3 {
        errors.push(h.chat(&prompt()).await.result.unwrap_err());
    }
    let items = collect(h.stream(&prompt()).await.result.unwrap()).await;
    errors.push(items.into_iter().next().unwrap().unwrap_err());
    for err in &errors {
        assert_eq!(err.kind(), ErrorKind::Auth, "{err}");
        let shown = format!("{err} {err:?} {}", err.message());
        assert!(!shown.contains(SENTINEL), "{shown}");
        assert!(!shown.contains("sk-S"), "not even part of the key: {shown}");
    }
    assert!(errors[0].message().contains("[redacted]"), "{}", errors[0]);
}

// ---------------------------------------------------------------------------------------------
// Transcription

fn audio_request() -> TranscriptionRequest {
    TranscriptionRequest::new(AudioInput::from_bytes(wav(), "memo.wav").unwrap())
        .language("en")
        .prompt("Names: Zoë, Jörg.")
        .temperature(0.2)
}

#[tokio::test]
async fn transcribes_json_and_sends_every_multipart_field() {
    let h = Harness::new().await;
    h.server.push(
        AUDIO,
        Reply::json(200, include_str!("fixtures/openai/transcription.json")).header("x-request-id", "req_t"),
    );
    let t = h.transcribe(&audio_request()).await.result.unwrap();
    assert!(t.text.starts_with("Imagine the wildest idea"), "{t:?}");
    assert_eq!(t.model, "whisper-1");
    assert_eq!(t.request_id.as_deref(), Some("req_t"));
    assert!(t.segments.is_empty());

    let got = h.only_request();
    assert_eq!(got.method, "POST");
    assert_eq!(got.path, AUDIO);
    assert_eq!(got.header("authorization"), Some(&*format!("Bearer {SENTINEL}")));
    assert!(got.header("content-type").unwrap().starts_with("multipart/form-data; boundary="));
    let file = got.field("file").expect("file part");
    assert_eq!(file.file_name.as_deref(), Some("memo.wav"));
    assert_eq!(file.content_type.as_deref(), Some("audio/wav"));
    assert_eq!(&file.data[..], &wav()[..]);
    assert_eq!(got.field_text("model").as_deref(), Some("whisper-1"));
    assert_eq!(got.field_text("language").as_deref(), Some("en"));
    assert_eq!(got.field_text("prompt").as_deref(), Some("Names: Zoë, Jörg."));
    assert_eq!(got.field_text("response_format").as_deref(), Some("json"));
    assert_eq!(got.field_text("temperature").as_deref(), Some("0.2"));
}

#[tokio::test]
async fn transcribes_verbose_json_with_language_duration_and_segments() {
    let h = Harness::new().await;
    h.server.push(
        AUDIO,
        Reply::json(200, include_str!("fixtures/openai/transcription_verbose.json")),
    );
    let req = audio_request().response_format(TranscriptFormat::VerboseJson);
    let t = h.transcribe(&req).await.result.unwrap();
    assert_eq!(t.language.as_deref(), Some("english"));
    assert_eq!(t.duration, Some(Duration::from_secs_f64(8.470000267028809)));
    assert_eq!(t.segments.len(), 2);
    assert_eq!(t.segments[0].start, Duration::ZERO);
    assert_eq!(t.segments[0].end, Duration::from_secs_f64(3.319999933242798));
    assert_eq!(t.segments[1].text, " People were swimming in the ocean, building sandcastles, and playing beach volleyball.");
    assert_eq!(h.only_request().field_text("response_format").as_deref(), Some("verbose_json"));
}

#[tokio::test]
async fn transcribes_plain_text() {
    let h = Harness::new().await;
    h.server.push(
        AUDIO,
        Reply::status(200)
            .header("content-type", "text/plain; charset=utf-8")
            .body(include_str!("fixtures/openai/transcription.txt")),
    );
    let req = TranscriptionRequest::new(AudioInput::from_bytes(wav(), "memo.wav").unwrap())
        .response_format(TranscriptFormat::Text);
    let t = h.transcribe(&req).await.result.unwrap();
    assert_eq!(t.text, "Imagine the wildest idea that you have ever had.");
    let got = h.only_request();
    assert_eq!(got.field_text("response_format").as_deref(), Some("text"));
    assert!(got.field("language").is_none());
    assert!(got.field("prompt").is_none());
    assert!(got.field("temperature").is_none());
}

#[tokio::test]
async fn the_same_transcription_request_can_be_sent_again() {
    let h = Harness::new().await;
    for _ in 0..2 {
        h.server.push(AUDIO, Reply::json(200, include_str!("fixtures/openai/transcription.json")));
    }
    let req = audio_request();
    h.transcribe(&req).await.result.unwrap();
    h.transcribe(&req).await.result.unwrap();
    for got in h.server.requests() {
        assert_eq!(&got.field("file").unwrap().data[..], &wav()[..]);
    }
}

#[tokio::test]
async fn transcription_errors_and_bad_bodies() {
    let h = Harness::new().await;
    h.server.push(AUDIO, Reply::json(413, r#"{"error":{"message":"Maximum content size limit (26214400) exceeded (26289999 bytes read)","type":"server_error","param":null,"code":null}}"#));
    h.server.push(AUDIO, Reply::status(200).header("content-type", "text/html").body("<html>maintenance</html>"));
    h.server.push(AUDIO, Reply::json(200, r#"{"language":"en"}"#));
    let err = h.transcribe(&audio_request()).await.result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PayloadTooLarge);
    for needle in ["text/html", "no `text`"] {
        let err = h.transcribe(&audio_request()).await.result.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Decode, "{err}");
        assert!(err.message().contains(needle), "{err}");
    }
}

#[test]
fn the_adapter_reports_its_kind_and_capabilities() {
    let p = OpenAi::new(ProviderId::new("x"), "http://127.0.0.1:1/v1".parse().unwrap());
    assert_eq!(p.kind(), llm_failover::provider::openai::PROVIDER_TYPE);
    assert!(p.capabilities().chat && p.capabilities().transcription);
}
