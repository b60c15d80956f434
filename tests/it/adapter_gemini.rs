//! The Gemini adapter over real loopback HTTP, driven by the same one-attempt functions the
//! router uses (`chat_once`, `chat_stream_once`).
//!
//! Wire format references (fixtures are the docs' example bodies):
//! - `generateContent` / `streamGenerateContent?alt=sse`:
//!   <https://ai.google.dev/api/generate-content> (`contents[].parts[].text`, roles `user` and
//!   `model`, `systemInstruction`, `generationConfig`, `usageMetadata`, `modelVersion`,
//!   `responseId`, `promptFeedback.blockReason`); the key in the `x-goog-api-key` header
//!   (<https://ai.google.dev/gemini-api/docs/api-key>).
//! - Structured output: <https://ai.google.dev/gemini-api/docs/structured-output> ("JSON
//!   Schema support": `responseMimeType: "application/json"` with `responseJsonSchema`, the
//!   field that takes JSON Schema; `responseSchema` takes the OpenAPI subset) and
//!   `GenerationConfig.responseJsonSchema` in <https://ai.google.dev/api/generate-content>.
//!   `structured_ok.json` is the guide's cookie-recipe answer (list of `recipeName` /
//!   `ingredients`).
//! - Function calling: <https://ai.google.dev/gemini-api/docs/function-calling> —
//!   `tools[].functionDeclarations` (`name`, `description`, parameters), `toolConfig.
//!   functionCallingConfig` (`mode` `AUTO` / `ANY` / `NONE`, `allowedFunctionNames` with
//!   `ANY`), `functionCall` parts in answers (`finishReason: "STOP"`), results sent back as
//!   `functionResponse {name, response}` parts of a `user` content after the `model` content
//!   that made the calls, parallel calls as several `functionCall` parts of one content.
//!   `FunctionDeclaration.parametersJsonSchema` (JSON Schema, exclusive with `parameters`)
//!   and `FunctionCall.id` (optional) are in the API reference
//!   (<https://ai.google.dev/api/caching#FunctionDeclaration>,
//!   <https://ai.google.dev/api/caching#FunctionCall>). `function_call.json` is the guide's
//!   `schedule_meeting` answer ("Schedule a meeting with Bob and Alice for 03/14/2025 at
//!   10:00 AM about the Q3 planning."); `function_call_parallel.json` its parallel
//!   "party" answer (`power_disco_ball`, `start_music`, `dim_lights`), the first call
//!   carrying a `thoughtSignature` as <https://ai.google.dev/gemini-api/docs/thought-signatures>
//!   describes for parallel calls; `stream_function_call.txt` the guide's
//!   `get_current_temperature` call for London, streamed (a call arrives whole in one event).
//! - Thought signatures for calls Gemini did not sign (history from another model):
//!   <https://ai.google.dev/gemini-api/docs/thought-signatures> (FAQ) and
//!   <https://docs.cloud.google.com/vertex-ai/generative-ai/docs/thought-signatures>
//!   (`"skip_thought_signature_validator"`).
//! - Images: <https://ai.google.dev/gemini-api/docs/image-understanding> (`inlineData`
//!   `{mimeType, data}`, the image before the text; PNG, JPEG, WEBP, HEIC and HEIF) and
//!   <https://ai.google.dev/gemini-api/docs/file-input-methods> with Google's announcement
//!   <https://blog.google/innovation-and-ai/technology/developers-tools/gemini-api-new-file-limits>
//!   (public and signed `https` URLs as `fileData.fileUri`, fetched by Gemini).
//! - Errors: <https://ai.google.dev/gemini-api/docs/troubleshooting> (400 INVALID_ARGUMENT /
//!   FAILED_PRECONDITION, 403 PERMISSION_DENIED, 404 NOT_FOUND, 429 RESOURCE_EXHAUSTED,
//!   500 INTERNAL, 503 UNAVAILABLE, 504 DEADLINE_EXCEEDED) and
//!   <https://ai.google.dev/gemini-api/docs/rate-limits> (RPM vs RPD quotas). The 429 bodies
//!   with `google.rpc.QuotaFailure` / `RetryInfo` are as reported in
//!   google-gemini/gemini-cli#8437 and the API's own free-tier answers. Which kind each
//!   status and body is, is a row of the conformance table (`conformance.rs`), every kind
//!   alike; here, what goes beyond it (the delays a quota states, errors inside streams).

use std::time::Duration;

use llm_failover::provider::gemini::Gemini;
use llm_failover::{
    ChatChunk, ChatRequest, ChatResponse, Credential, Disposition, Error, ErrorKind, FinishReason,
    ProviderId, ResponseFormat, Result, Usage,
};
use llm_failover_emulator::scripted::{Reply, ScriptedServer};
use serde_json::json;

use crate::support::adapter::{self, only_request};

#[path = "adapter_gemini/tools.rs"]
mod tools;

const MODEL: &str = "gemini-2.5-flash";
const SENTINEL: &str = "sk-ant-SENTINEL-abc123";
const PATH: &str = "/v1beta/models/gemini-2.5-flash:generateContent";
const STREAM_PATH: &str = "/v1beta/models/gemini-2.5-flash:streamGenerateContent";

fn provider(server: &ScriptedServer) -> Gemini {
    let base = format!("{}/v1beta", server.url());
    Gemini::new(ProviderId::new("gemini"), base.parse().unwrap()).with_model(MODEL)
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

async fn stream(server: &ScriptedServer, req: &ChatRequest) -> Result<Vec<Result<ChatChunk>>> {
    let key = Credential::new(SENTINEL);
    adapter::stream_items(&provider(server), req, MODEL, Some(&key)).await
}

fn google_error(code: u16, status: &str, message: &str) -> String {
    json!({"error": {"code": code, "message": message, "status": status}}).to_string()
}

#[tokio::test]
async fn sends_contents_system_instruction_and_generation_config_with_the_key_in_a_header() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(200, include_str!("../fixtures/gemini/generate_ok.json")),
    );
    let req = ChatRequest::new()
        .system("You are terse.")
        .user("Hello")
        .assistant("Hi.")
        .user("Explain AI")
        .user("in one line")
        .max_tokens(128)
        .temperature(0.2)
        .stop("END");
    chat(&server, &req).await.unwrap();

    let got = only_request(&server);
    assert_eq!(got.method, "POST");
    assert_eq!(got.path, PATH);
    assert_eq!(got.query, None, "the key must never travel in the URL");
    assert_eq!(got.header("x-goog-api-key"), Some(SENTINEL));
    assert_eq!(got.header("content-type"), Some("application/json"));
    assert_eq!(
        got.json(),
        json!({
            "contents": [
                {"role": "user", "parts": [{"text": "Hello"}]},
                {"role": "model", "parts": [{"text": "Hi."}]},
                {"role": "user", "parts": [{"text": "Explain AI"}, {"text": "in one line"}]}
            ],
            "systemInstruction": {"parts": [{"text": "You are terse."}]},
            "generationConfig": {
                "maxOutputTokens": 128,
                "temperature": 0.2,
                "stopSequences": ["END"]
            }
        })
    );
}

#[tokio::test]
async fn sends_no_generation_config_or_key_when_there_is_none() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(200, include_str!("../fixtures/gemini/generate_ok.json")),
    );
    chat_with(&server, &ChatRequest::from_prompt("hi"), None)
        .await
        .unwrap();
    let got = only_request(&server);
    assert_eq!(
        got.json(),
        json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
    );
    assert_eq!(got.header("x-goog-api-key"), None);
}

#[tokio::test]
async fn json_mode_sets_response_mime_type_and_schema() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(200, include_str!("../fixtures/gemini/generate_ok.json")),
    );
    server.push(
        PATH,
        Reply::json(200, include_str!("../fixtures/gemini/generate_ok.json")),
    );
    chat(
        &server,
        &ChatRequest::from_prompt("x").response_format(ResponseFormat::JsonObject),
    )
    .await
    .unwrap();
    // The guide's recipe schema, as JSON Schema (what `ResponseFormat::JsonSchema` holds).
    let schema = json!({
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "recipeName": {"type": "string"},
                "ingredients": {"type": "array", "items": {"type": "string"}}
            },
            "required": ["recipeName", "ingredients"]
        }
    });
    chat(
        &server,
        &ChatRequest::from_prompt("x").response_format(ResponseFormat::JsonSchema {
            name: "recipe".into(),
            schema: schema.clone(),
        }),
    )
    .await
    .unwrap();
    let reqs = server.requests();
    assert_eq!(
        reqs[0].json()["generationConfig"],
        json!({"responseMimeType": "application/json"})
    );
    assert_eq!(
        reqs[1].json()["generationConfig"],
        json!({"responseMimeType": "application/json", "responseJsonSchema": schema})
    );
}

/// The structured-output guide's answer: the JSON is the text, for the router to check.
#[tokio::test]
async fn a_structured_answer_is_its_json_text() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(200, include_str!("../fixtures/gemini/structured_ok.json")),
    );
    let req = ChatRequest::from_prompt(
        "List a few popular cookie recipes, and include the amounts of ingredients.",
    )
    .response_format(ResponseFormat::JsonObject);
    let resp = chat(&server, &req).await.unwrap();
    let recipes = resp.json().unwrap();
    assert_eq!(recipes[0]["recipeName"], "Chocolate Chip Cookies");
    assert_eq!(recipes[1]["ingredients"].as_array().map(Vec::len), Some(5));
    assert_eq!(resp.finish_reason, Some(FinishReason::Stop));
    assert!(resp.tool_calls.is_empty());
}

#[tokio::test]
async fn reads_text_usage_finish_reason_model_version_and_response_id() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(200, include_str!("../fixtures/gemini/generate_ok.json")),
    );
    let resp = chat(&server, &ChatRequest::from_prompt("Explain AI"))
        .await
        .unwrap();
    assert_eq!(
        resp.text,
        "AI learns patterns from data to make predictions or decisions."
    );
    assert_eq!(resp.finish_reason, Some(FinishReason::Stop));
    assert_eq!(resp.usage, Some(Usage::new(8, 12)));
    assert_eq!(resp.model, "gemini-2.0-flash");
    assert_eq!(resp.request_id.as_deref(), Some("gRz0aOXhNqaYmtkPr5uk4Ak"));
}

#[tokio::test]
async fn maps_finish_reasons_and_joins_parts() {
    let cases = [
        ("STOP", FinishReason::Stop),
        ("MAX_TOKENS", FinishReason::Length),
        ("SAFETY", FinishReason::ContentFilter),
        ("RECITATION", FinishReason::ContentFilter),
        ("BLOCKLIST", FinishReason::ContentFilter),
        ("PROHIBITED_CONTENT", FinishReason::ContentFilter),
        ("LANGUAGE", FinishReason::Other("LANGUAGE".into())),
    ];
    let server = ScriptedServer::start().await;
    for (reason, _) in &cases {
        let body = json!({"candidates": [{"content": {"role": "model",
            "parts": [{"text": "Hel"}, {"text": "lo"}]}, "finishReason": reason}]});
        server.push(PATH, Reply::json(200, body.to_string()));
    }
    for (reason, expected) in cases {
        let resp = chat(&server, &ChatRequest::from_prompt("x")).await.unwrap();
        assert_eq!(resp.text, "Hello", "{reason}");
        assert_eq!(resp.finish_reason, Some(expected), "{reason}");
        assert_eq!(resp.usage, None);
    }
}

#[tokio::test]
async fn a_blocked_prompt_is_a_content_filtered_error() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(200, include_str!("../fixtures/gemini/prompt_blocked.json")),
    );
    let err = chat(&server, &ChatRequest::from_prompt("x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ContentFiltered);
    assert_eq!(err.code(), Some("SAFETY"));
    assert!(err.is_terminal());
}

#[tokio::test]
async fn streams_sse_responses_until_a_finish_reason() {
    let server = ScriptedServer::start().await;
    let events: Vec<String> = include_str!("../fixtures/gemini/stream_ok.txt")
        .split_inclusive("\n\n")
        .map(str::to_owned)
        .collect();
    server.push(STREAM_PATH, Reply::sse(events));
    let items = stream(&server, &ChatRequest::from_prompt("Why is the sky blue?"))
        .await
        .unwrap();
    let chunks: Vec<_> = items.into_iter().map(|c| c.unwrap()).collect();
    let text: String = chunks.iter().map(|c| c.delta.as_str()).collect();
    assert_eq!(text, "The sky appears blue because of Rayleigh scattering.");
    assert_eq!(chunks[0].model.as_deref(), Some("gemini-2.0-flash"));
    let last = chunks.last().unwrap();
    assert_eq!(last.finish_reason, Some(FinishReason::Stop));
    assert_eq!(last.usage, Some(Usage::new(9, 10)));

    let got = only_request(&server);
    assert_eq!(got.path, STREAM_PATH);
    assert_eq!(got.query.as_deref(), Some("alt=sse"));
    assert_eq!(got.header("x-goog-api-key"), Some(SENTINEL));
    assert!(got.json().get("stream").is_none());
}

#[tokio::test]
async fn an_error_inside_the_stream_ends_it_with_the_classified_error() {
    let server = ScriptedServer::start().await;
    server.push(
        STREAM_PATH,
        Reply::sse([
            "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Par\"}],\"role\":\"model\"}}]}\n\n".to_owned(),
            format!("data: {}\n\n", google_error(503, "UNAVAILABLE", "The model is overloaded. Please try again later.")),
        ]),
    );
    let items = stream(&server, &ChatRequest::from_prompt("x"))
        .await
        .unwrap();
    assert_eq!(items[0].as_ref().unwrap().delta, "Par");
    let err = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Overloaded);
    assert_eq!(err.code(), Some("UNAVAILABLE"));
}

#[tokio::test]
async fn a_stream_cut_before_a_finish_reason_is_a_decode_error() {
    let server = ScriptedServer::start().await;
    server.push(
        STREAM_PATH,
        Reply::sse([
            "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Par\"}],\"role\":\"model\"}}]}\n\n",
            "data: {\"candidates\":[{\"content\":{\"pa",
        ]),
    );
    let items = stream(&server, &ChatRequest::from_prompt("x"))
        .await
        .unwrap();
    let err = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Decode, "{err}");
    assert!(err.to_string().starts_with("gemini: "), "{err}");
}

#[tokio::test]
async fn a_per_day_quota_is_exhausted_whatever_retry_info_says() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(
            429,
            include_str!("../fixtures/gemini/quota_per_day_429.json"),
        ),
    );
    let err = chat(&server, &ChatRequest::from_prompt("x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::QuotaExhausted);
    assert_eq!(err.disposition(), Disposition::QuotaExhausted);
    // Not the 26 s of its RetryInfo: the daily quota reopens at midnight Pacific time
    // (ai.google.dev/gemini-api/docs/rate-limits). The manual clock's wall time is
    // 2026-01-01T00:00Z, 16:00 the day before in Pacific standard time: 8 hours to midnight.
    assert_eq!(
        err.retry_after(),
        Some(std::time::Duration::from_secs(8 * 3_600)),
        "a 26s RetryInfo must not reopen a daily quota before midnight Pacific time"
    );
    assert!(
        err.message()
            .contains("GenerateRequestsPerDayPerProjectPerModel-FreeTier"),
        "{err}"
    );
    assert_eq!(err.code(), Some("RESOURCE_EXHAUSTED"));
}

/// `retryDelay` ("26s", a protobuf Duration) is read with `ratelimit::go_duration`: this test
/// passes once the rate-limit header work replaces that function's first-cut stub.
#[tokio::test]
async fn a_per_minute_quota_is_rate_limited_for_the_retry_info_delay() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(
            429,
            include_str!("../fixtures/gemini/quota_per_minute_429.json"),
        ),
    );
    let err = chat(&server, &ChatRequest::from_prompt("x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RateLimited);
    assert_eq!(err.retry_after(), Some(Duration::from_secs(26)));
}

#[tokio::test]
async fn a_retry_after_header_takes_precedence_over_retry_info() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(
            429,
            include_str!("../fixtures/gemini/quota_per_minute_429.json"),
        )
        .header("retry-after", "7"),
    );
    let err = chat(&server, &ChatRequest::from_prompt("x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RateLimited);
    assert_eq!(err.retry_after(), Some(Duration::from_secs(7)));
}

#[tokio::test]
async fn bad_success_bodies_are_decode_errors_naming_provider_and_status() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("malformed JSON", b"{\"candidates\": [".to_vec()),
        (
            "no candidates",
            br#"{"modelVersion":"gemini-2.0-flash"}"#.to_vec(),
        ),
        ("empty candidates", br#"{"candidates":[]}"#.to_vec()),
        (
            "candidate without text",
            br#"{"candidates":[{"finishReason":"STOP"}]}"#.to_vec(),
        ),
        (
            "parts of the wrong type",
            br#"{"candidates":[{"content":{"parts":"Hi"}}]}"#.to_vec(),
        ),
        (
            "HTML page",
            b"<html><body>Service Unavailable</body></html>".to_vec(),
        ),
        ("empty body", Vec::new()),
        (
            "invalid UTF-8",
            b"{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"\xff\"}]}}]}".to_vec(),
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
        assert!(
            err.to_string()
                .starts_with("gemini: could not decode response (HTTP 200)"),
            "{what}: {err}"
        );
    }
}

fn assert_no_secret(err: &Error) {
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(SENTINEL), "key leaked: {shown}");
}

#[tokio::test]
async fn the_key_never_appears_in_an_error_even_when_the_server_echoes_it() {
    let server = ScriptedServer::start().await;
    let echo = format!("API key not valid: {SENTINEL}");
    server.push(
        PATH,
        Reply::json(
            400,
            json!({"error": {"code": 400, "message": echo, "status": "INVALID_ARGUMENT",
                "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": SENTINEL}]}})
            .to_string(),
        ),
    );
    server.push(
        PATH,
        Reply::status(502).body(format!("proxy saw key={SENTINEL}")),
    );
    server.push(
        STREAM_PATH,
        Reply::sse([format!(
            "data: {}\n\n",
            google_error(500, "INTERNAL", &echo)
        )]),
    );
    for _ in 0..2 {
        assert_no_secret(
            &chat(&server, &ChatRequest::from_prompt("x"))
                .await
                .unwrap_err(),
        );
    }
    let items = stream(&server, &ChatRequest::from_prompt("x"))
        .await
        .unwrap();
    assert_no_secret(items.last().unwrap().as_ref().unwrap_err());
}

#[tokio::test]
async fn requests_that_cannot_be_expressed_are_rejected_before_sending() {
    let server = ScriptedServer::start().await;
    for req in [
        ChatRequest::new().system("only instructions"),
        ChatRequest::from_prompt("x").temperature(f32::INFINITY),
        ChatRequest::from_prompt("x").model(" "),
    ] {
        let model = req.model.clone().unwrap_or_else(|| MODEL.to_owned());
        let err = adapter::chat(&provider(&server), &req, &model, None)
            .await
            .result
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidRequest, "{err}");
    }
    assert!(server.requests().is_empty());
}
