//! Azure OpenAI: the OpenAI wire format behind per-deployment URLs.
//!
//! - Chat: `POST {endpoint}/openai/deployments/{deployment}/chat/completions?api-version={v}`
//! - Speech to text: `POST {endpoint}/openai/deployments/{deployment}/audio/transcriptions?api-version={v}`
//! - Auth: `api-key: KEY` (marked sensitive).
//!
//! `endpoint` is the resource endpoint (`https://RESOURCE.openai.azure.com`); the configured
//! model is the *deployment* name. Bodies, streams and error classification are the OpenAI
//! adapter's ([`super::openai`]); on top, Azure says `"code": "429"` as a string, states
//! delays in the message ("Please retry after 9 seconds"), reports content filtering as
//! `content_filter` with `innererror.code = ResponsibleAIPolicyViolation`, and a missing
//! deployment as `DeploymentNotFound` — all handled by the shared classifier. Rate-limit
//! headers are read in the [`HeaderDialect::Azure`] dialect.
//!
//! Tools, images and structured answers are written as the OpenAI adapter writes them;
//! `check_chat` also refuses what the configured `api_version` predates (tools before
//! `2023-12-01-preview`, `json_schema` before `2024-08-01-preview`), so the router fails over
//! instead of sending a request the deployment would reject.

use reqwest::header::HeaderMap;
use url::Url;

use super::openai::{
    ChunkDecoder, chat_http, chat_result, check_base_url, check_chat_format,
    check_embedding_format, classify, embedding_http, embedding_result, endpoint, error_report,
    transcription_http, transcription_result,
};
use super::{Provider, RequestContext, StreamDecoder};
use crate::clock::Now;
use crate::error::{Error, ErrorKind, Result};
use crate::http::{HttpRequest, RawResponse};
use crate::id::{Capabilities, Capability, ProviderId};
use crate::ratelimit::{HeaderDialect, LimitReport, parse_limit_headers};
use crate::types::{
    ChatRequest, ChatResponse, EmbeddingRequest, EmbeddingResponse, ResponseFormat, Role,
    Transcript, TranscriptionRequest,
};

/// The first api-version with `tools` and `tool_choice` (they replaced `functions` and
/// `function_call`): <https://learn.microsoft.com/azure/ai-services/openai/how-to/function-calling>.
const TOOLS_SINCE: &str = "2023-12-01";

/// The first api-version with structured outputs (`response_format: json_schema`):
/// <https://learn.microsoft.com/azure/ai-services/openai/how-to/structured-outputs>
/// ("first added in API version `2024-08-01-preview`").
const JSON_SCHEMA_SINCE: &str = "2024-08-01";

/// The first preview api-version that takes `stream_options` (a stream's usage in its last
/// chunk): 2024-09-01-preview. The GA version 2024-10-21 does not: its
/// `createChatCompletionRequest` lists `stop`, `stream`, `temperature`, … and no
/// `stream_options` (`specification/cognitiveservices/data-plane/AzureOpenAI/inference/
/// stable/2024-10-21/inference.json` of `Azure/azure-rest-api-specs`). So it is sent to a
/// preview version from that date on, to a GA version after 2024-10-21, and to a version that
/// is not a date (`preview`, `latest`); elsewhere a stream's booking is reconciled from the
/// estimate.
const STREAM_OPTIONS_SINCE: &str = "2024-09-01";

/// The last GA api-version without `stream_options` ([`STREAM_OPTIONS_SINCE`]).
const LAST_GA_WITHOUT_STREAM_OPTIONS: &str = "2024-10-21";

/// The wire format's name, as written in `providers.toml` (`kind = "azure"`).
pub(crate) const PROVIDER_TYPE: &str = "azure";

/// An Azure OpenAI resource.
///
/// # Examples
///
/// ```
/// use llm_failover::provider::azure::Azure;
/// use llm_failover::provider::Provider;
/// use llm_failover::Capability;
/// use llm_failover::ProviderId;
///
/// let azure = Azure::new(
///     ProviderId::new("azure"),
///     "https://my-resource.openai.azure.com".parse().unwrap(),
///     "2024-10-21",
/// )
/// .with_chat_model("gpt-4o-mini-prod") // the deployment name
/// .with_transcription_model("whisper");
/// assert_eq!(azure.default_model(Capability::Chat), Some("gpt-4o-mini-prod"));
/// ```
#[derive(Clone, Debug)]
pub struct Azure {
    id: ProviderId,
    base_url: Url,
    api_version: String,
    chat_deployment: Option<String>,
    transcription_deployment: Option<String>,
    embedding_deployment: Option<String>,
    dialect: HeaderDialect,
}

impl Azure {
    /// A resource at `base_url` (`https://RESOURCE.openai.azure.com`), called with
    /// `api-version={api_version}`.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::provider::{azure::Azure, Provider, RequestContext};
    /// use llm_failover::{ChatRequest, Credential, ProviderId};
    ///
    /// // A gateway on this machine in front of the resource.
    /// let azure = Azure::new(ProviderId::new("azure"), "http://127.0.0.1:8443".parse()?, "2024-10-21");
    /// let key = Credential::new("azure-key");
    /// // The model is the deployment's name.
    /// let ctx = RequestContext::new("gpt-4o-mini-prod", Some(&key));
    /// let http = azure.chat_request(&ChatRequest::from_prompt("Hi"), &ctx)?;
    /// assert_eq!(
    ///     http.url.as_str(),
    ///     "http://127.0.0.1:8443/openai/deployments/gpt-4o-mini-prod/chat/completions\
    ///      ?api-version=2024-10-21",
    /// );
    /// assert!(http.headers["api-key"].is_sensitive()); // not `Authorization: Bearer`
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(id: ProviderId, base_url: Url, api_version: impl Into<String>) -> Self {
        Azure {
            id,
            base_url,
            api_version: api_version.into(),
            chat_deployment: None,
            transcription_deployment: None,
            embedding_deployment: None,
            dialect: HeaderDialect::Azure,
        }
    }

    /// Sets the default chat deployment.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::provider::{azure::Azure, Provider, RequestContext};
    /// use llm_failover::{Capability, ChatRequest, ProviderId};
    ///
    /// let azure = Azure::new(ProviderId::new("azure"), "http://127.0.0.1:8443".parse()?, "2024-10-21")
    ///     .with_chat_model("chat-eu");
    /// let deployment = azure.default_model(Capability::Chat).unwrap();
    /// assert_eq!(deployment, "chat-eu");
    /// let http = azure.chat_request(&ChatRequest::from_prompt("Hi"), &RequestContext::new(deployment, None))?;
    /// assert_eq!(http.url.path(), "/openai/deployments/chat-eu/chat/completions");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn with_chat_model(mut self, deployment: impl Into<String>) -> Self {
        self.chat_deployment = Some(deployment.into());
        self
    }

    /// Sets the default transcription (Whisper) deployment.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::provider::{azure::Azure, Provider, RequestContext};
    /// use llm_failover::{AudioInput, Capability, ProviderId, TranscriptionRequest};
    ///
    /// let azure = Azure::new(ProviderId::new("azure"), "http://127.0.0.1:8443".parse()?, "2024-06-01")
    ///     .with_transcription_model("whisper-eu");
    /// let deployment = azure.default_model(Capability::Transcription).unwrap();
    /// assert_eq!(azure.default_model(Capability::Chat), None); // set separately
    ///
    /// let req = TranscriptionRequest::new(AudioInput::from_bytes(vec![0u8; 64], "memo.mp3")?);
    /// let http = azure.transcription_request(&req, &RequestContext::new(deployment, None))?;
    /// assert_eq!(http.url.path(), "/openai/deployments/whisper-eu/audio/transcriptions");
    /// assert_eq!(http.url.query(), Some("api-version=2024-06-01"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn with_transcription_model(mut self, deployment: impl Into<String>) -> Self {
        self.transcription_deployment = Some(deployment.into());
        self
    }

    /// Sets the default embedding deployment.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::provider::{azure::Azure, Provider, RequestContext};
    /// use llm_failover::{Capability, EmbeddingRequest, ProviderId};
    ///
    /// let azure = Azure::new(ProviderId::new("azure"), "http://127.0.0.1:8443".parse()?, "2024-10-21")
    ///     .with_embedding_model("embed-eu");
    /// let deployment = azure.default_model(Capability::Embedding).unwrap();
    /// let http = azure.embedding_request(&EmbeddingRequest::new("hi"), &RequestContext::new(deployment, None))?;
    /// assert_eq!(http.url.path(), "/openai/deployments/embed-eu/embeddings");
    /// assert_eq!(http.url.query(), Some("api-version=2024-10-21"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn with_embedding_model(mut self, deployment: impl Into<String>) -> Self {
        self.embedding_deployment = Some(deployment.into());
        self
    }

    /// Sets how rate-limit headers are read (default [`HeaderDialect::Azure`]).
    ///
    /// # Examples
    ///
    /// Azure's request counter has no stated window; a gateway speaking OpenAI's headers counts
    /// per minute:
    ///
    /// ```
    /// use reqwest::header::{HeaderMap, HeaderValue};
    /// use llm_failover::clock::{Clock, TokioClock};
    /// use llm_failover::provider::{azure::Azure, Provider};
    /// use llm_failover::ratelimit::{HeaderDialect, Per};
    /// use llm_failover::ProviderId;
    ///
    /// let base: url::Url = "http://127.0.0.1:8443".parse()?;
    /// let azure = Azure::new(ProviderId::new("azure"), base.clone(), "2024-10-21");
    /// let gateway = Azure::new(ProviderId::new("gw"), base, "2024-10-21")
    ///     .with_dialect(HeaderDialect::OpenAi);
    ///
    /// let mut headers = HeaderMap::new();
    /// headers.insert("x-ratelimit-limit-requests", HeaderValue::from_static("100"));
    /// headers.insert("x-ratelimit-remaining-requests", HeaderValue::from_static("99"));
    /// let now = TokioClock.both();
    /// let per = |p: &Azure| p.limit_report(&headers, now).requests.map(|w| w.per);
    /// assert_eq!(per(&azure), Some(Per::Unknown));
    /// assert_eq!(per(&gateway), Some(Per::Minute));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn with_dialect(mut self, dialect: HeaderDialect) -> Self {
        self.dialect = dialect;
        self
    }

    /// Builds the adapter from a validated `[providers.<id>]` entry.
    ///
    /// The config's neutral default dialect (`openai`) is read as `azure`: an Azure resource
    /// never sends OpenAI's reset headers. Any other explicit `header_dialect` is kept.
    ///
    /// # Errors
    ///
    /// `Config` naming `providers.<id>.api_version` when it is missing or empty, or
    /// `providers.<id>.base_url` when it cannot carry a path.
    #[cfg_attr(not(test), allow(dead_code, reason = "called by the provider factory"))]
    pub(crate) fn from_config(cfg: &crate::config::ProviderConfig) -> Result<Self> {
        check_base_url(&cfg.id, &cfg.base_url)?;
        let id = &cfg.id;
        let api_version = cfg
            .api_version
            .as_deref()
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                Error::config(format!(
                    "`providers.{id}.api_version` is required for kind = \"azure\" \
                     (e.g. api_version = \"2024-10-21\")"
                ))
            })?;
        let dialect = match cfg.header_dialect {
            HeaderDialect::OpenAi => HeaderDialect::Azure,
            other => other,
        };
        let mut p = Azure::new(id.clone(), cfg.base_url.clone(), api_version).with_dialect(dialect);
        p.chat_deployment = cfg.model.clone();
        p.transcription_deployment = cfg.transcription_model.clone();
        p.embedding_deployment = cfg.embedding_model.clone();
        Ok(p)
    }

    /// `{base}/openai/deployments/{deployment}/{op…}?api-version={v}`.
    fn url(&self, deployment: &str, op: &[&str], setting: &str) -> Result<Url> {
        let id = &self.id;
        if deployment.trim().is_empty() {
            return Err(Error::config(format!(
                "no deployment for provider `{id}`: set `providers.{id}.{setting}` \
                 (the deployment name) or the request's model"
            )));
        }
        if self.api_version.trim().is_empty() {
            return Err(Error::config(format!(
                "`providers.{id}.api_version` is empty"
            )));
        }
        let mut path = vec!["openai", "deployments", deployment];
        path.extend_from_slice(op);
        let mut url = endpoint(id, &self.base_url, &path)?;
        url.query_pairs_mut()
            .append_pair("api-version", &self.api_version);
        Ok(url)
    }

    /// Whether the api-version is a date (`2024-10-21`, `2024-08-01-preview`) before `date`.
    fn predates(&self, date: &str) -> bool {
        self.date().is_some_and(|d| d < date)
    }

    /// The api-version's date, when it is one (`2024-10-21`, `2024-08-01-preview`).
    fn date(&self) -> Option<&str> {
        let d = self.api_version.trim().get(..10)?;
        let date = d.len() == 10
            && d.bytes().enumerate().all(|(i, b)| {
                if i == 4 || i == 7 {
                    b == b'-'
                } else {
                    b.is_ascii_digit()
                }
            });
        date.then_some(d)
    }

    /// Whether the api-version takes `stream_options` ([`STREAM_OPTIONS_SINCE`]).
    fn takes_stream_options(&self) -> bool {
        match self.date() {
            None => true, // `preview`, `latest`
            Some(d) if self.api_version.trim().ends_with("-preview") => d >= STREAM_OPTIONS_SINCE,
            Some(d) => d > LAST_GA_WITHOUT_STREAM_OPTIONS,
        }
    }

    fn too_old(&self, what: &str, since: &str) -> Error {
        let id = &self.id;
        Error::new(
            ErrorKind::Unsupported,
            format!(
                "azure cannot carry {what} at api-version `{}` (`providers.{id}.api_version`): \
                 they need {since} or later",
                self.api_version
            ),
        )
        .with_provider(id.clone())
    }

    fn api_key(&self, http: HttpRequest, ctx: &RequestContext<'_>) -> Result<HttpRequest> {
        match ctx.credential {
            Some(key) => http.secret_header("api-key", key.expose()),
            None => Ok(http),
        }
    }
}

impl Provider for Azure {
    fn id(&self) -> &ProviderId {
        &self.id
    }

    fn kind(&self) -> &'static str {
        PROVIDER_TYPE
    }

    fn base_url(&self) -> Option<&Url> {
        Some(&self.base_url)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            chat: true,
            transcription: true,
            embedding: true,
        }
    }

    fn default_model(&self, capability: Capability) -> Option<&str> {
        match capability {
            Capability::Chat => self.chat_deployment.as_deref(),
            Capability::Transcription => self.transcription_deployment.as_deref(),
            Capability::Embedding => self.embedding_deployment.as_deref(),
        }
    }

    fn chat_request(&self, req: &ChatRequest, ctx: &RequestContext<'_>) -> Result<HttpRequest> {
        let url = self.url(ctx.model, &["chat", "completions"], "model")?;
        let stream_usage = self.takes_stream_options();
        let http = chat_http(&self.id, PROVIDER_TYPE, url, req, ctx, stream_usage)?;
        self.api_key(http, ctx)
    }

    /// What the OpenAI format refuses (see [`OpenAi`](super::openai::OpenAi)'s `check_chat`),
    /// then what the configured `api_version` predates: tools before `2023-12-01-preview`,
    /// `json_schema` answers before `2024-08-01-preview`. An api-version that is not a date
    /// (`preview`, `latest`) is taken as current.
    fn check_chat(&self, req: &ChatRequest) -> Result<()> {
        check_chat_format(&self.id, req, PROVIDER_TYPE)?;
        let uses_tools = !req.tools.is_empty()
            || req
                .messages
                .iter()
                .any(|m| !m.tool_calls.is_empty() || m.role == Role::Tool);
        if uses_tools && self.predates(TOOLS_SINCE) {
            return Err(self.too_old("tools", "2023-12-01-preview"));
        }
        if matches!(req.response_format, ResponseFormat::JsonSchema { .. })
            && self.predates(JSON_SCHEMA_SINCE)
        {
            return Err(self.too_old("JSON Schema answers", "2024-08-01-preview"));
        }
        Ok(())
    }

    fn chat_response(&self, raw: RawResponse, model: &str) -> Result<ChatResponse> {
        chat_result(&self.id, &raw, model, self.request_id(&raw.headers))
    }

    /// Azure OpenAI's global batch ([`bulk`](crate::provider::bulk)): OpenAI's Batch API
    /// under `/openai` with the api-version.
    fn bulk(&self) -> Option<&dyn crate::provider::bulk::BulkApi> {
        Some(self)
    }

    fn stream_decoder(&self, _model: &str) -> Box<dyn StreamDecoder> {
        Box::new(ChunkDecoder::new(self.id.clone()))
    }

    fn transcription_request(
        &self,
        req: &TranscriptionRequest,
        ctx: &RequestContext<'_>,
    ) -> Result<HttpRequest> {
        let url = self.url(
            ctx.model,
            &["audio", "transcriptions"],
            "transcription_model",
        )?;
        self.api_key(transcription_http(&self.id, url, req, ctx)?, ctx)
    }

    fn transcription_response(&self, raw: RawResponse, model: &str) -> Result<Transcript> {
        transcription_result(&self.id, &raw, model, self.request_id(&raw.headers))
    }

    /// At most 2,048 inputs per request, as OpenAI.
    fn check_embedding(&self, req: &EmbeddingRequest) -> Result<()> {
        check_embedding_format(&self.id, req)
    }

    fn embedding_request(
        &self,
        req: &EmbeddingRequest,
        ctx: &RequestContext<'_>,
    ) -> Result<HttpRequest> {
        let url = self.url(ctx.model, &["embeddings"], "embedding_model")?;
        self.api_key(embedding_http(url, req, ctx)?, ctx)
    }

    fn embedding_response(&self, raw: RawResponse, model: &str) -> Result<EmbeddingResponse> {
        embedding_result(&self.id, &raw, model, self.request_id(&raw.headers))
    }

    /// Classifies a non-2xx response as the OpenAI adapter does (see
    /// [`OpenAi`](super::openai::OpenAi)), which also reads Azure's string codes,
    /// `innererror` and `DeploymentNotFound`.
    fn error(&self, raw: &RawResponse, now: Now) -> Error {
        classify(&self.id, raw, self.dialect, now)
    }

    fn limit_report(&self, headers: &HeaderMap, now: Now) -> LimitReport {
        parse_limit_headers(self.dialect, headers, now)
    }

    fn error_limit_report(&self, raw: &RawResponse, now: Now) -> LimitReport {
        error_report(raw, self.dialect, now)
    }

    /// `apim-request-id` (API Management, always sent), then `x-ms-request-id`, then
    /// `x-request-id`.
    fn request_id(&self, headers: &HeaderMap) -> Option<String> {
        ["apim-request-id", "x-ms-request-id", "x-request-id"]
            .iter()
            .find_map(|name| headers.get(*name)?.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    }
}

/// Azure OpenAI's global batch (<https://learn.microsoft.com/en-us/azure/ai-services/openai/how-to/batch>):
/// OpenAI's Batch API under `{resource}/openai/…?api-version=` with the `api-key` header;
/// each line's `url` is `/chat/completions` and its `model` the global-batch deployment (the
/// body's `model`, as the live lane sends it); at most 100,000 requests and 200 MB per file.
impl crate::provider::bulk::BulkApi for Azure {
    fn shape(&self) -> crate::provider::bulk::BulkShape {
        crate::provider::bulk::BulkShape::File
    }

    fn limits(&self) -> crate::provider::bulk::BulkLimits {
        crate::provider::bulk::BulkLimits::new(100_000, 200 * 1024 * 1024)
    }

    fn fits_id(&self, id: &str) -> bool {
        super::openai::bulk::plain_id(id)
    }

    fn finds_by_label(&self) -> bool {
        true
    }

    fn request(
        &self,
        step: &crate::provider::bulk::BulkStep,
        ctx: &RequestContext<'_>,
    ) -> Result<HttpRequest> {
        let url = |segments: &[&str]| -> Result<Url> {
            let mut path = vec!["openai"];
            path.extend_from_slice(segments);
            let mut url = endpoint(&self.id, &self.base_url, &path)?;
            url.query_pairs_mut()
                .append_pair("api-version", &self.api_version);
            Ok(url)
        };
        let http = super::openai::bulk::step_request(
            &self.id,
            &url,
            step,
            "/chat/completions",
            "/chat/completions",
        )?;
        self.api_key(http, ctx)
    }

    fn reply(
        &self,
        step: &crate::provider::bulk::BulkStep,
        raw: RawResponse,
    ) -> Result<crate::provider::bulk::BulkReply> {
        super::openai::bulk::step_reply(&self.id, step, raw)
    }

    fn answers(
        &self,
        _status: &crate::provider::bulk::BulkStatus,
        fetched: &[Vec<u8>],
        _submitted: &[String],
    ) -> Result<Vec<(String, crate::provider::bulk::ItemAnswer)>> {
        super::openai::bulk::file_answers(&self.id, fetched)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Limits, ProviderConfig, ProviderKind};
    use crate::id::Credential;
    use reqwest::header::HeaderValue;
    use std::collections::BTreeMap;

    fn cfg(api_version: Option<&str>) -> ProviderConfig {
        ProviderConfig {
            id: ProviderId::new("azure-east"),
            kind: ProviderKind::Azure,
            base_url: "https://res.openai.azure.com/".parse().unwrap(),
            model: Some("chat-dep".into()),
            transcription_model: Some("whisper-dep".into()),
            embedding_model: None,
            keys: BTreeMap::new(),
            limits: Limits::none(),
            model_limits: BTreeMap::new(),
            prices: Default::default(),
            budget: None,
            timeout: None,
            allow_http: false,
            api_version: api_version.map(str::to_owned),
            header_dialect: HeaderDialect::OpenAi,
            extra_body: Default::default(),
            region: None,
        }
    }

    #[test]
    fn from_config_requires_an_api_version() {
        for missing in [None, Some(""), Some("  ")] {
            let err = Azure::from_config(&cfg(missing)).unwrap_err();
            assert!(err.is_config());
            assert!(
                err.message().contains("providers.azure-east.api_version"),
                "{err}"
            );
        }
        let p = Azure::from_config(&cfg(Some("2024-10-21"))).unwrap();
        assert_eq!(p.dialect, HeaderDialect::Azure);
        assert_eq!(
            p.default_model(Capability::Transcription),
            Some("whisper-dep")
        );
    }

    #[test]
    fn builds_deployment_urls_with_escaped_names() {
        let p = Azure::from_config(&cfg(Some("2024-10-21"))).unwrap();
        let u = p
            .url("chat-dep", &["chat", "completions"], "model")
            .unwrap();
        assert_eq!(
            u.as_str(),
            "https://res.openai.azure.com/openai/deployments/chat-dep/chat/completions?api-version=2024-10-21"
        );
        let u = p
            .url("a/b c?", &["audio", "transcriptions"], "model")
            .unwrap();
        assert_eq!(
            u.as_str(),
            "https://res.openai.azure.com/openai/deployments/a%2Fb%20c%3F/audio/transcriptions?api-version=2024-10-21"
        );
        let err = p.url("", &["chat", "completions"], "model").unwrap_err();
        assert!(
            err.message().contains("providers.azure-east.model"),
            "{err}"
        );
    }

    #[test]
    fn sends_the_key_as_a_sensitive_api_key_header() {
        let p = Azure::from_config(&cfg(Some("v"))).unwrap();
        let key = Credential::new("azure-key-1");
        let http = p
            .chat_request(
                &ChatRequest::from_prompt("x"),
                &RequestContext::new("chat-dep", Some(&key)),
            )
            .unwrap();
        let v = http.headers.get("api-key").unwrap();
        assert!(v.is_sensitive());
        assert_eq!(v, "azure-key-1");
        assert!(http.headers.get("authorization").is_none());
    }

    #[test]
    fn request_id_prefers_apim_then_ms() {
        let p = Azure::from_config(&cfg(Some("v"))).unwrap();
        let mut h = HeaderMap::new();
        h.insert("x-ms-request-id", HeaderValue::from_static("ms-1"));
        assert_eq!(p.request_id(&h).as_deref(), Some("ms-1"));
        h.insert("apim-request-id", HeaderValue::from_static("apim-1"));
        assert_eq!(p.request_id(&h).as_deref(), Some("apim-1"));
    }

    #[test]
    fn refuses_what_the_api_version_predates() {
        use crate::types::{Message, Tool, ToolCall};
        let tools = ChatRequest::from_prompt("x").tool(Tool::new("t", serde_json::json!({})));
        let history = ChatRequest::from_prompt("x")
            .message(Message::assistant_calls(
                "",
                vec![ToolCall::new("c", "t", serde_json::json!({}))],
            ))
            .message(Message::tool_result("c", "1"));
        let schema = ChatRequest::from_prompt("x").response_format(ResponseFormat::JsonSchema {
            name: "s".into(),
            schema: serde_json::json!({"type": "object"}),
        });
        let at = |v: &str| Azure::from_config(&cfg(Some(v))).unwrap();
        for old in ["2023-05-15", "2023-10-01-preview"] {
            for req in [&tools, &history] {
                let err = at(old).check_chat(req).unwrap_err();
                assert_eq!(err.kind(), ErrorKind::Unsupported);
                assert!(err.message().contains("2023-12-01-preview"), "{err}");
                assert!(
                    err.message().contains("providers.azure-east.api_version"),
                    "{err}"
                );
            }
        }
        for new in ["2023-12-01-preview", "2024-02-01", "preview", "latest"] {
            assert!(at(new).check_chat(&tools).is_ok(), "{new}");
        }
        for old in ["2024-06-01", "2024-07-01-preview"] {
            let err = at(old).check_chat(&schema).unwrap_err();
            assert!(err.message().contains("2024-08-01-preview"), "{err}");
            assert!(at(old).check_chat(&tools).is_ok());
        }
        for new in ["2024-08-01-preview", "2024-10-21", "2025-04-01-preview"] {
            assert!(at(new).check_chat(&schema).is_ok(), "{new}");
        }
        // A stream asks for its usage only where the api-version takes `stream_options`.
        let stream = RequestContext::new("d", None).streaming();
        let sent = |v: &str| {
            let http = at(v)
                .chat_request(&ChatRequest::from_prompt("x"), &stream)
                .unwrap();
            let body: serde_json::Value =
                serde_json::from_slice(http.json_body().unwrap()).unwrap();
            body.get("stream_options").is_some()
        };
        for without in ["2024-06-01", "2024-08-01-preview", "2024-10-21"] {
            assert!(!sent(without), "{without}");
        }
        for with in [
            "2024-09-01-preview",
            "2025-04-01-preview",
            "2025-06-01",
            "preview",
            "latest",
        ] {
            assert!(sent(with), "{with}");
        }
        // The format's own checks come first, named for Azure.
        let orphan = ChatRequest::new().message(Message::tool_result("c", "1"));
        let err = at("2024-10-21").check_chat(&orphan).unwrap_err();
        assert!(err.message().starts_with("azure request:"), "{err}");
    }
}
