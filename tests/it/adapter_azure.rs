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

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use llm_failover::provider::azure::Azure;
use llm_failover::provider::{Exchange, Provider};
use llm_failover::ratelimit::delay_in_message;
use llm_failover::Capability;
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
    assert_eq!(
        resp.usage,
        Some(Usage {
            input_tokens: 33,
            output_tokens: 557
        })
    );
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
    assert_eq!(
        chunks[2].usage,
        Some(Usage {
            input_tokens: 12,
            output_tokens: 1
        })
    );
    assert_eq!(
        h.only_request().json()["stream_options"]["include_usage"],
        true
    );
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
    assert!(message_only
        .message()
        .contains("Please retry after 9 seconds"));
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

#[tokio::test]
async fn azure_error_bodies_are_classified() {
    let cases = [
        (
            400,
            include_str!("../fixtures/azure/error_content_filter.json"),
            ErrorKind::ContentFiltered,
            Some("content_filter"),
        ),
        // The same policy violation signalled only by the inner code.
        (
            400,
            r#"{"error":{"message":"filtered","type":null,"param":"prompt","code":null,"status":400,"innererror":{"code":"ResponsibleAIPolicyViolation"}}}"#,
            ErrorKind::ContentFiltered,
            None,
        ),
        (
            404,
            include_str!("../fixtures/azure/error_deployment_not_found.json"),
            ErrorKind::NotFound,
            Some("DeploymentNotFound"),
        ),
        (
            401,
            r#"{"error":{"code":"401","message":"Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource."}}"#,
            ErrorKind::Auth,
            Some("401"),
        ),
        (
            500,
            r#"{"error":{"code":"InternalServerError","message":"The service is temporarily unable to process your request. Please try again later."}}"#,
            ErrorKind::Server,
            Some("InternalServerError"),
        ),
        (
            503,
            r#"{"error":{"code":"ServiceUnavailable","message":"The service is temporarily unable to process your request."}}"#,
            ErrorKind::Overloaded,
            Some("ServiceUnavailable"),
        ),
    ];
    for (status, body, kind, code) in cases {
        let h = Harness::new().await;
        h.server.push(
            CHAT,
            Reply::json(status, body).header("apim-request-id", "apim-e"),
        );
        let err = h.chat().await.result.unwrap_err();
        assert_eq!(err.kind(), kind, "{body}");
        assert_eq!(err.code(), code, "{body}");
        assert_eq!(err.status(), Some(status));
        assert_eq!(err.provider().map(ProviderId::as_str), Some("azure-east"));
        assert_eq!(err.model(), Some("gpt4o-prod"));
        assert_eq!(err.request_id(), Some("apim-e"));
    }
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
    assert_eq!(p.kind(), llm_failover::provider::azure::PROVIDER_TYPE);
    assert!(p.capabilities().chat && p.capabilities().transcription);
}
