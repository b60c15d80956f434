//! The `azure` adapter over real loopback HTTP, driven as the router drives it.
//!
//! Wire format: Azure OpenAI REST reference (data plane inference,
//! https://learn.microsoft.com/azure/ai-services/openai/reference):
//! `POST {endpoint}/openai/deployments/{deployment-id}/chat/completions?api-version=…` and
//! `…/audio/transcriptions?api-version=…`, key in the `api-key` header; the chat fixture is the
//! reference's example response (with `prompt_filter_results` / `content_filter_results`).
//! Errors: content filtering answers 400 `code: content_filter` with `innererror.code =
//! ResponsibleAIPolicyViolation` (https://learn.microsoft.com/azure/ai-services/openai/concepts/content-filter);
//! throttling answers 429 `code: "429"` "… Please retry after N seconds" with `retry-after` /
//! `retry-after-ms` headers (https://learn.microsoft.com/azure/ai-services/openai/quotas-limits,
//! https://learn.microsoft.com/azure/ai-services/openai/how-to/quota); an unknown deployment
//! answers 404 `DeploymentNotFound` (reported verbatim in MicrosoftDocs/azure-docs#114013).
//!
//! Tools, images and structured answers (the OpenAI format's, see `adapter_openai/tools.rs`):
//! - function calling, https://learn.microsoft.com/azure/ai-services/openai/how-to/function-calling:
//!   `tools` and `tool_choice` since api-version `2023-12-01-preview`; its `get_current_time`
//!   tool and its parallel example's three calls (ids, names and arguments as the how-to prints
//!   them) are `chat_completion_parallel_tool_calls.json`, whose envelope (id, usage, filter
//!   results) follows the reference's chat completion; its single call
//!   `call_pOsKdUlqvdyttYB67MOj434b` streamed in pieces, after Azure's filter-only first chunk,
//!   is `chat_stream_tool_call.sse` (the pieces' shape is OpenAI's streaming one);
//! - structured outputs, https://learn.microsoft.com/azure/ai-services/openai/how-to/structured-outputs:
//!   since `2024-08-01-preview`; its REST example request (`CalendarEventResponse`) and output
//!   (`chat_completion_json_schema.json`);
//! - vision, https://learn.microsoft.com/azure/ai-services/openai/how-to/gpt-with-vision: its
//!   sample body ("Describe this picture:", an `image_url` part, a base64 image as
//!   `data:image/jpeg;base64,…`) and output (`chat_completion_image.json`).

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use llm_failover::Capability;
use llm_failover::provider::azure::Azure;
use llm_failover::provider::{Exchange, Provider};
use llm_failover::ratelimit::delay_in_message;
use llm_failover::{
    AudioInput, ChatChunk, ChatRequest, ChatResponse, Credential, Error, ErrorKind, FinishReason,
    ProviderId, Transcript, TranscriptFormat, TranscriptionRequest, Usage,
};
use llm_failover_emulator::scripted::{Recorded, Reply, ReplyBody, ScriptedServer};

use crate::support::adapter;

const API_VERSION: &str = "2024-10-21";
const CHAT: &str = "/openai/deployments/gpt4o-prod/chat/completions";
const AUDIO: &str = "/openai/deployments/whisper-prod/audio/transcriptions";
const SENTINEL: &str = "sk-SENTINEL-abc123";

struct Harness {
    server: ScriptedServer,
    provider: Azure,
}

impl Harness {
    async fn new() -> Self {
        Self::with_base(|url| url).await
    }

    async fn with_base(base: impl Fn(String) -> String) -> Self {
        let server = ScriptedServer::start().await;
        let provider = Azure::new(
            ProviderId::new("azure-east"),
            base(server.url()).parse().unwrap(),
            API_VERSION,
        )
        .with_chat_model("gpt4o-prod")
        .with_transcription_model("whisper-prod");
        Harness { server, provider }
    }

    async fn chat_as(&self, deployment: &str) -> Exchange<ChatResponse> {
        let key = Credential::new(SENTINEL);
        let req = ChatRequest::new()
            .system("Be brief.")
            .user("Does Azure support CMK?");
        adapter::chat(&self.provider, &req, deployment, Some(&key)).await
    }

    async fn chat(&self) -> Exchange<ChatResponse> {
        self.chat_as("gpt4o-prod").await
    }

    fn only_request(&self) -> Recorded {
        adapter::only_request(&self.server)
    }
}

fn query_pairs(got: &Recorded) -> Vec<(String, String)> {
    url::form_urlencoded::parse(got.query.as_deref().unwrap_or_default().as_bytes())
        .into_owned()
        .collect()
}

#[tokio::test]
async fn chat_goes_to_the_deployment_with_api_version_and_api_key() {
    let h = Harness::new().await;
    h.server.push(
        CHAT,
        Reply::json(200, include_str!("../fixtures/azure/chat_completion.json"))
            .header("apim-request-id", "apim-1")
            .header("x-request-id", "xr-1"),
    );
    let resp = h.chat().await.result.unwrap();
    assert_eq!(
        resp.text,
        "Yes, Azure Cognitive Search supports customer managed keys (CMK) for encryption at rest."
    );
    assert_eq!(resp.finish_reason, Some(FinishReason::Stop));
    assert_eq!(resp.usage, Some(Usage::new(33, 557)));
    assert_eq!(resp.model, "gpt-4o-2024-08-06");
    assert_eq!(resp.request_id.as_deref(), Some("apim-1"));

    let got = h.only_request();
    assert_eq!(got.method, "POST");
    assert_eq!(got.path, CHAT);
    assert_eq!(
        query_pairs(&got),
        [("api-version".to_owned(), API_VERSION.to_owned())]
    );
    assert_eq!(got.header("api-key"), Some(SENTINEL));
    assert!(got.headers.get("authorization").is_none());
    let body = got.json();
    assert_eq!(
        body["messages"][0],
        serde_json::json!({"role": "system", "content": "Be brief."})
    );
    assert_eq!(body["model"], "gpt4o-prod");
}

#[tokio::test]
async fn a_trailing_slash_in_the_endpoint_does_not_double_the_path_separator() {
    let h = Harness::with_base(|url| format!("{url}/")).await;
    h.server.push(
        CHAT,
        Reply::json(200, include_str!("../fixtures/azure/chat_completion.json")),
    );
    h.chat().await.result.unwrap();
    assert_eq!(h.only_request().path, CHAT);
}

#[tokio::test]
async fn deployment_names_are_escaped_in_the_path() {
    let h = Harness::new().await;
    let path = "/openai/deployments/gpt%204o%2Fprod%3F/chat/completions";
    h.server.push(
        path,
        Reply::json(200, include_str!("../fixtures/azure/chat_completion.json")),
    );
    h.chat_as("gpt 4o/prod?").await.result.unwrap();
    let got = h.only_request();
    assert_eq!(got.path, path);
    assert_eq!(query_pairs(&got).len(), 1);
}

#[tokio::test]
async fn transcription_goes_to_the_whisper_deployment() {
    let h = Harness::new().await;
    h.server.push(
        AUDIO,
        Reply::json(
            200,
            include_str!("../fixtures/openai/transcription_verbose.json"),
        )
        .header("x-ms-request-id", "ms-7"),
    );
    let audio = AudioInput::from_bytes(vec![7u8; 64], "call.mp3").unwrap();
    let req = TranscriptionRequest::new(audio)
        .language("en")
        .response_format(TranscriptFormat::VerboseJson);
    let key = Credential::new(SENTINEL);
    let model = h.provider.default_model(Capability::Transcription).unwrap();
    let t: Transcript = adapter::transcribe(&h.provider, &req, model, Some(&key))
        .await
        .result
        .unwrap();
    assert_eq!(t.segments.len(), 2);
    assert_eq!(t.request_id.as_deref(), Some("ms-7"));
    assert_eq!(t.model, "whisper-prod");

    let got = h.only_request();
    assert_eq!(got.path, AUDIO);
    assert_eq!(
        query_pairs(&got),
        [("api-version".to_owned(), API_VERSION.to_owned())]
    );
    assert_eq!(got.header("api-key"), Some(SENTINEL));
    let file = got.field("file").unwrap();
    assert_eq!(file.file_name.as_deref(), Some("call.mp3"));
    assert_eq!(file.content_type.as_deref(), Some("audio/mpeg"));
    assert_eq!(&file.data[..], &[7u8; 64][..]);
    assert_eq!(got.field_text("language").as_deref(), Some("en"));
    assert_eq!(
        got.field_text("response_format").as_deref(),
        Some("verbose_json")
    );
}

#[tokio::test]
async fn streams_through_azure_skipping_the_filter_only_first_chunk() {
    let h = Harness::new().await;
    let sse = include_str!("../fixtures/azure/chat_stream.sse");
    let chunks = sse
        .as_bytes()
        .chunks(13)
        .map(|c| (Duration::ZERO, Bytes::copy_from_slice(c)))
        .collect();
    h.server.push(
        CHAT,
        Reply::status(200)
            .header("content-type", "text/event-stream")
            .with_body(ReplyBody::Chunks(chunks)),
    );
    let key = Credential::new(SENTINEL);
    let req = ChatRequest::from_prompt("Does Azure support CMK?");
    let stream = adapter::stream(&h.provider, &req, "gpt4o-prod", Some(&key))
        .await
        .result
        .unwrap();
    let chunks: Vec<ChatChunk> = stream
        .collect::<Vec<Result<ChatChunk, Error>>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    let text: String = chunks.iter().map(|c| c.delta.as_str()).collect();
    assert_eq!(text, "Yes");
    assert_eq!(chunks.len(), 3, "text, finish, usage");
    assert_eq!(chunks[1].finish_reason, Some(FinishReason::Stop));
    assert_eq!(chunks[2].usage, Some(Usage::new(12, 1)));
    // 2024-10-21, the GA version, has no `stream_options` in its spec (a preview from
    // 2024-09-01 has): not sent; the usage a host sends anyway is read.
    assert!(h.only_request().json().get("stream_options").is_none());
}

#[tokio::test]
async fn a_429_waits_for_the_header_first_and_the_message_otherwise() {
    let h = Harness::new().await;
    let body = include_str!("../fixtures/azure/error_429.json");
    h.server.push(
        CHAT,
        Reply::json(429, body)
            .header("retry-after-ms", "6500")
            .header("retry-after", "7"),
    );
    h.server.push(CHAT, Reply::json(429, body));

    let with_header = h.chat().await.result.unwrap_err();
    assert_eq!(with_header.kind(), ErrorKind::RateLimited);
    assert_eq!(with_header.code(), Some("429"));
    assert_eq!(with_header.retry_after(), Some(Duration::from_millis(6500)));

    let message_only = h.chat().await.result.unwrap_err();
    assert_eq!(message_only.kind(), ErrorKind::RateLimited);
    assert!(
        message_only
            .message()
            .contains("Please retry after 9 seconds")
    );
    // The message parser is `ratelimit::delay_in_message`; the adapter hands its answer on.
    assert_eq!(
        message_only.retry_after(),
        delay_in_message(message_only.message())
    );
    if delay_in_message("Please retry after 1 second.").is_some() {
        assert_eq!(message_only.retry_after(), Some(Duration::from_secs(9)));
    }
}

#[tokio::test]
async fn a_429_without_retry_after_waits_for_the_reset_of_the_limit_it_names() {
    // Azure stopped sending `Retry-After` on token-limit 429s and sends
    // `x-rate-limit-reset-tokens: 55` instead (headers quoted in
    // github.com/openai/openai-python/issues/937), while its message may say "Please retry
    // after 86400 seconds" whatever the wait (github.com/alex-wolf-ps/dbchatprov2/issues/2):
    // the header of the limit the message names is the delay.
    let tokens = r#"{"error":{"code":"429","message":"Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-05-01-preview have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 86400 seconds. Please go here: https://aka.ms/oai/quotaincrease if you would like to further increase the default rate limit."}}"#;
    let calls = r#"{"error":{"code":"429","message":"Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have exceeded call rate limit of your current OpenAI S0 pricing tier. Please retry after 86400 seconds."}}"#;
    let unnamed = r#"{"error":{"code":"429","message":"Rate limit is exceeded. Try again in 86400 seconds."}}"#;
    let reply = |body: &str| {
        Reply::json(429, body)
            .header("x-rate-limit-reset-tokens", "55")
            .header("x-rate-limit-reset-requests", "7")
            .header("x-ratelimit-remaining-requests", "99")
            .header("policy-id", "DeploymentRatelimit-Token")
    };
    let h = Harness::new().await;
    for body in [tokens, calls, unnamed] {
        h.server.push(CHAT, reply(body));
    }
    for (body, secs) in [(tokens, 55), (calls, 7), (unnamed, 55)] {
        let err = h.chat().await.result.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::RateLimited, "{body}: {err}");
        assert_eq!(err.retry_after(), Some(Duration::from_secs(secs)), "{body}");
    }
    // Without the header, the message's day is believed: a day is an exhausted quota.
    h.server.push(CHAT, Reply::json(429, tokens));
    let err = h.chat().await.result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::QuotaExhausted, "{err}");
    assert_eq!(err.retry_after(), Some(Duration::from_secs(86_400)));
    // `Retry-After` still comes first.
    h.server
        .push(CHAT, reply(tokens).header("retry-after-ms", "1500"));
    let err = h.chat().await.result.unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_millis(1500)));
}

/// What each Azure body means is a row of the conformance table (`conformance/`: content
/// filtered by its code or its inner code, an unknown deployment, a wrong key, 500, 503); over
/// HTTP, the error also keeps the code and status, and names the provider, the deployment and
/// API Management's request id.
#[tokio::test]
async fn an_error_keeps_the_code_status_provider_deployment_and_request_id() {
    let h = Harness::new().await;
    h.server.push(
        CHAT,
        Reply::json(
            404,
            include_str!("../fixtures/azure/error_deployment_not_found.json"),
        )
        .header("apim-request-id", "apim-e"),
    );
    let err = h.chat().await.result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(err.code(), Some("DeploymentNotFound"));
    assert_eq!(err.status(), Some(404));
    assert_eq!(err.provider().map(ProviderId::as_str), Some("azure-east"));
    assert_eq!(err.model(), Some("gpt4o-prod"));
    assert_eq!(err.request_id(), Some("apim-e"));
}

#[tokio::test]
async fn the_key_never_appears_in_errors_even_when_echoed() {
    let h = Harness::new().await;
    let echo =
        format!(r#"{{"error":{{"code":"401","message":"Access denied for key {SENTINEL}."}}}}"#);
    h.server.push(CHAT, Reply::json(401, echo));
    let err = h.chat().await.result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Auth);
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(SENTINEL), "{shown}");
    assert!(shown.contains("[redacted]"), "{shown}");
}

#[tokio::test]
async fn a_missing_deployment_is_a_config_error_before_any_request() {
    let h = Harness::new().await;
    let err = h.chat_as("").await.result.unwrap_err();
    assert!(err.is_config(), "{err}");
    assert!(
        err.message().contains("providers.azure-east.model"),
        "{err}"
    );
    assert!(h.server.requests().is_empty());
}

#[tokio::test]
async fn sends_no_key_header_without_a_credential() {
    let h = Harness::new().await;
    h.server.push(
        CHAT,
        Reply::json(200, include_str!("../fixtures/azure/chat_completion.json")),
    );
    adapter::chat(
        &h.provider,
        &ChatRequest::from_prompt("x"),
        "gpt4o-prod",
        None,
    )
    .await
    .result
    .unwrap();
    let got = h.only_request();
    assert!(got.headers.get("api-key").is_none());
    assert!(got.headers.get("authorization").is_none());
}

#[test]
fn the_adapter_reports_its_kind_and_capabilities() {
    let p = Azure::new(
        ProviderId::new("a"),
        "https://r.openai.azure.com".parse().unwrap(),
        "v",
    );
    assert_eq!(p.kind(), "azure"); // as written in providers.toml
    assert!(p.capabilities().chat && p.capabilities().transcription);
}

/// The function-calling how-to's `get_current_time` tool.
fn time_tool() -> llm_failover::Tool {
    llm_failover::Tool::new(
        "get_current_time",
        serde_json::json!({
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The city name, e.g. San Francisco"},
            },
            "required": ["location"],
        }),
    )
    .description("Get the current time in a given location")
}

async fn chat_with(h: &Harness, req: &ChatRequest) -> Exchange<ChatResponse> {
    let key = Credential::new(SENTINEL);
    adapter::chat(&h.provider, req, "gpt4o-prod", Some(&key)).await
}

#[tokio::test]
async fn sends_tools_and_reads_the_how_tos_parallel_calls() {
    use llm_failover::{Message, ToolCall, ToolChoice};
    let h = Harness::new().await;
    h.server.push(
        CHAT,
        Reply::json(
            200,
            include_str!("../fixtures/azure/chat_completion_parallel_tool_calls.json"),
        ),
    );
    h.server.push(
        CHAT,
        Reply::json(200, include_str!("../fixtures/azure/chat_completion.json")),
    );
    let req =
        ChatRequest::from_prompt("What's the current time in San Francisco, Tokyo, and Paris?")
            .tool(time_tool())
            .tool_choice(ToolChoice::Auto);
    assert!(h.provider.check_chat(&req).is_ok());
    let resp = chat_with(&h, &req).await.result.unwrap();
    assert_eq!(resp.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(
        resp.tool_calls,
        [
            ("call_IjcAVz9JOv5BXwUx1jd076C1", "San Francisco"),
            ("call_XIPQYTCtKIaNCCPTdvwjkaSN", "Tokyo"),
            ("call_OHIB5aJzO8HGqanmsdzfytvp", "Paris"),
        ]
        .map(|(id, city)| ToolCall::new(
            id,
            "get_current_time",
            serde_json::json!({ "location": city })
        ))
    );
    let sent = h.only_request().json();
    assert_eq!(
        sent["tools"],
        serde_json::json!([{"type": "function", "function": {
            "name": "get_current_time",
            "description": "Get the current time in a given location",
            "parameters": {
                "type": "object",
                "properties": {"location": {"type": "string", "description": "The city name, e.g. San Francisco"}},
                "required": ["location"],
            },
        }}])
    );
    assert_eq!(sent["tool_choice"], "auto");

    // The next turn: one `tool` message per call, each naming its call.
    let mut next = req.message(resp.to_message());
    for (call, time) in resp
        .tool_calls
        .iter()
        .zip(["09:24 AM", "01:24 AM", "06:24 PM"])
    {
        next = next.message(Message::tool_result(call.id.clone(), time));
    }
    chat_with(&h, &next).await.result.unwrap();
    let messages = h.server.requests()[1].json()["messages"].clone();
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(messages[1]["content"], serde_json::Value::Null);
    assert_eq!(
        messages[1]["tool_calls"][2],
        serde_json::json!({"id": "call_OHIB5aJzO8HGqanmsdzfytvp", "type": "function",
            "function": {"name": "get_current_time", "arguments": "{\"location\":\"Paris\"}"}})
    );
    assert_eq!(
        messages[4],
        serde_json::json!({"role": "tool", "tool_call_id": "call_OHIB5aJzO8HGqanmsdzfytvp", "content": "06:24 PM"})
    );
}

#[tokio::test]
async fn streams_a_tool_call_after_the_filter_only_first_chunk() {
    let sse = include_str!("../fixtures/azure/chat_stream_tool_call.sse");
    for size in [1, 13, sse.len()] {
        let h = Harness::new().await;
        let pieces = sse
            .as_bytes()
            .chunks(size)
            .map(|c| (Duration::ZERO, Bytes::copy_from_slice(c)))
            .collect();
        h.server.push(
            CHAT,
            Reply::status(200)
                .header("content-type", "text/event-stream")
                .with_body(ReplyBody::Chunks(pieces)),
        );
        let key = Credential::new(SENTINEL);
        let req =
            ChatRequest::from_prompt("What's the current time in San Francisco").tool(time_tool());
        let chunks: Vec<ChatChunk> =
            adapter::stream_items(&h.provider, &req, "gpt4o-prod", Some(&key))
                .await
                .unwrap()
                .into_iter()
                .collect::<Result<_, _>>()
                .unwrap();
        assert_eq!(
            chunks.len(),
            2,
            "the calls with the finish, then usage (split {size})"
        );
        assert_eq!(chunks[0].finish_reason, Some(FinishReason::ToolCalls));
        assert_eq!(
            chunks[0].tool_calls,
            [llm_failover::ToolCall::new(
                "call_pOsKdUlqvdyttYB67MOj434b",
                "get_current_time",
                serde_json::json!({"location": "San Francisco"})
            )]
        );
        assert_eq!(chunks[1].usage, Some(Usage::new(66, 16)));
    }
}

#[tokio::test]
async fn sends_a_json_schema_and_reads_the_how_tos_structured_answer() {
    #[derive(Debug, PartialEq, serde::Deserialize)]
    struct CalendarEventResponse {
        name: String,
        date: String,
        participants: Vec<String>,
    }
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "date": {"type": "string"},
            "participants": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["name", "date", "participants"],
        "additionalProperties": false,
    });
    let h = Harness::new().await;
    h.server.push(
        CHAT,
        Reply::json(
            200,
            include_str!("../fixtures/azure/chat_completion_json_schema.json"),
        ),
    );
    let req = ChatRequest::new()
        .system("Extract the event information.")
        .user("Alice and Bob are going to a science fair on Friday.")
        .response_format(llm_failover::ResponseFormat::JsonSchema {
            name: "CalendarEventResponse".into(),
            schema: schema.clone(),
        });
    assert!(h.provider.check_chat(&req).is_ok());
    let resp = chat_with(&h, &req).await.result.unwrap();
    assert_eq!(
        resp.parse::<CalendarEventResponse>().unwrap(),
        CalendarEventResponse {
            name: "Science Fair".into(),
            date: "Friday".into(),
            participants: vec!["Alice".into(), "Bob".into()],
        }
    );
    assert_eq!(resp.finish_reason, Some(FinishReason::Stop));
    let body = h.only_request().json();
    assert_eq!(body["response_format"]["type"], "json_schema");
    assert_eq!(
        body["response_format"]["json_schema"]["name"],
        "CalendarEventResponse"
    );
    assert_eq!(body["response_format"]["json_schema"]["schema"], schema);
}

#[tokio::test]
async fn sends_the_vision_how_tos_image_parts() {
    use llm_failover::{Image, Message};
    let h = Harness::new().await;
    h.server.push(
        CHAT,
        Reply::json(
            200,
            include_str!("../fixtures/azure/chat_completion_image.json"),
        ),
    );
    let req = ChatRequest::new()
        .system("You are a helpful assistant.")
        .message(
            Message::user("Describe this picture:")
                .image(Image::url("https://example.com/award.jpg"))
                .image(Image::base64("image/jpeg", "/9j/4AAQSkZJRg==")),
        )
        .max_tokens(100);
    let resp = chat_with(&h, &req).await.result.unwrap();
    assert!(
        resp.text
            .starts_with("The picture shows an individual dressed in formal attire")
    );
    assert_eq!(resp.usage, Some(Usage::new(1156, 80)));
    let body = h.only_request().json();
    assert_eq!(
        body["messages"][1],
        serde_json::json!({"role": "user", "content": [
            {"type": "text", "text": "Describe this picture:"},
            {"type": "image_url", "image_url": {"url": "https://example.com/award.jpg"}},
            {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQSkZJRg=="}},
        ]})
    );
    assert_eq!(body["max_tokens"], 100);
}

#[tokio::test]
async fn refuses_tools_and_json_schema_the_api_version_predates() {
    let server = ScriptedServer::start().await;
    let old = Azure::new(
        ProviderId::new("azure-old"),
        server.url().parse().unwrap(),
        "2023-05-15",
    );
    let tools = ChatRequest::from_prompt("What time is it in Paris?").tool(time_tool());
    let err = old.check_chat(&tools).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert!(err.message().contains("2023-12-01-preview"), "{err}");
    assert!(
        err.message().contains("providers.azure-old.api_version"),
        "{err}"
    );
    assert_eq!(err.provider().map(ProviderId::as_str), Some("azure-old"));
    let schema =
        ChatRequest::from_prompt("x").response_format(llm_failover::ResponseFormat::JsonSchema {
            name: "s".into(),
            schema: serde_json::json!({"type": "object"}),
        });
    let ga = Azure::new(
        ProviderId::new("azure-ga"),
        server.url().parse().unwrap(),
        "2024-06-01",
    );
    assert!(ga.check_chat(&tools).is_ok());
    assert_eq!(
        ga.check_chat(&schema).unwrap_err().kind(),
        ErrorKind::Unsupported
    );
    assert!(server.requests().is_empty());
}
