//! Google Gemini API (`models/{model}:generateContent`, streamed with
//! `:streamGenerateContent?alt=sse`).
//!
//! Translation choices, each tested in `tests/it/adapter_gemini.rs`:
//!
//! - **System messages** become the parts of `systemInstruction` (one part each); `user` and
//!   `assistant` messages become `contents` with roles `user` and `model`, consecutive
//!   messages of one role sharing one content (one part each).
//! - **The key** travels in the `x-goog-api-key` header, never in the URL.
//! - **Tools** are one `tools[]` entry of `functionDeclarations`, each tool's JSON Schema as
//!   `parametersJsonSchema` (the field that takes JSON Schema; `parameters` takes Gemini's
//!   OpenAPI subset, which refuses or ignores keywords a JSON Schema may use). The tool
//!   choice is `toolConfig.functionCallingConfig.mode`: `AUTO`, `NONE`, `ANY` (required),
//!   `ANY` with `allowedFunctionNames: [name]` (a named tool).
//! - **Calls in answers**: each `functionCall` part is a [`ToolCall`](crate::ToolCall) with
//!   Gemini's `id` when it gives one, else a made-up id that the same call always gets
//!   (`call_<index>_<hash>`), so the conversation can go on at any provider. `STOP` with
//!   calls is [`FinishReason::ToolCalls`](crate::FinishReason::ToolCalls). Streamed calls
//!   arrive whole, each on the chunk that carries it.
//! - **Calls in the history** (an assistant turn) are `model` parts: the text when there is
//!   some, then one `functionCall {name, args}` per call, without ids (Gemini's are optional
//!   and the history may hold another provider's). The first call of each turn carries the
//!   `thoughtSignature` Google documents for calls whose own signature was not kept —
//!   Gemini 3 refuses function calls sent back without one, and the neutral
//!   [`ToolCall`](crate::ToolCall) holds none.
//! - **Tool results** are `functionResponse {name, response}` parts of a `user` content, the
//!   name found from the result's call id earlier in the conversation, the result as an
//!   object (`{"result": …}` unless it is a JSON object); consecutive results share one
//!   content of their own, in order.
//! - **Images** (user messages) come before the message's text, as in Google's examples:
//!   carried bytes (and `data:` URLs) as `inlineData`, an `https` URL as `fileData`, which
//!   Gemini fetches. [`check_chat`](crate::provider::Provider::check_chat) refuses
//!   (`Unsupported`) the types Gemini does not read (it reads PNG, JPEG, WEBP, HEIC, HEIF —
//!   not GIF) and URLs that are not `https` or whose path does not name one of those types.
//! - **JSON mode**: `generationConfig.responseMimeType = "application/json"`, plus the schema
//!   of [`ResponseFormat::JsonSchema`](crate::types::ResponseFormat::JsonSchema) as
//!   `responseJsonSchema` (JSON Schema, what the neutral type holds; `responseSchema` is the
//!   OpenAPI subset).
//! - **Usage**: input = `promptTokenCount`; output = `candidatesTokenCount` +
//!   `thoughtsTokenCount` (thinking tokens are billed and rate-limited as output). Thought
//!   parts are not part of the answer's text.
//! - **Request id**: a request-id header when one is sent (a proxy's), else `responseId`.
//! - **Embeddings** (`embed.rs`): one input through `:embedContent`, several through
//!   `:batchEmbedContents` (at most 100: more are refused before sending, so the router
//!   passes over this provider for that request); `taskType` from the request's
//!   [`InputType`](crate::InputType), `outputDimensionality` from its `dimensions`.
//! - **Errors**: the body's `status` (`RESOURCE_EXHAUSTED`, `INVALID_ARGUMENT`, …) and details
//!   decide. A `RESOURCE_EXHAUSTED` whose `QuotaFailure` names a per-day quota (or a limit of
//!   0) is [`ErrorKind::QuotaExhausted`], whatever its
//!   `RetryInfo` says; otherwise it is `RateLimited` with `retry_after` from `RetryInfo`.
//!   A prompt blocked by `promptFeedback.blockReason` is `ContentFiltered`.

mod bulk;
mod embed;
mod error;
mod request;
mod stream;
mod wire;

use reqwest::header::HeaderMap;
use url::Url;

use super::{Provider, RequestContext, StreamDecoder};
use crate::clock::Now;
use crate::config::{ProviderConfig, ProviderKind};
use crate::error::{Error, ErrorKind, Result};
use crate::http::{HttpRequest, RawResponse};
use crate::id::{Capabilities, Capability, ProviderId};
use crate::ratelimit::{HeaderDialect, LimitReport, parse_limit_headers};
use crate::types::{ChatRequest, ChatResponse, EmbeddingRequest, EmbeddingResponse};

/// The wire format's name, as written in `providers.toml` (`kind = "gemini"`).
pub(crate) const PROVIDER_TYPE: &str = "gemini";

/// The Gemini API root, version included.
pub const DEFAULT_BASE_URL: &str = "https://generativelanguage.googleapis.com/v1beta";

/// A Google Gemini API provider.
///
/// # Examples
///
/// ```
/// use llm_failover::provider::gemini::{Gemini, DEFAULT_BASE_URL};
/// use llm_failover::provider::Provider;
/// use llm_failover::Capability;
/// use llm_failover::ProviderId;
///
/// let gemini = Gemini::new(ProviderId::new("gemini"), DEFAULT_BASE_URL.parse().unwrap())
///     .with_model("gemini-2.5-flash");
/// assert_eq!(gemini.default_model(Capability::Chat), Some("gemini-2.5-flash"));
/// assert_eq!(gemini.kind(), "gemini");
/// ```
#[derive(Clone, Debug)]
pub struct Gemini {
    id: ProviderId,
    base_url: Url,
    model: Option<String>,
    embedding_model: Option<String>,
}

impl Gemini {
    /// A provider named `id` at `base_url` (normally [`DEFAULT_BASE_URL`]), with no default
    /// model.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::provider::{gemini::Gemini, Provider, RequestContext};
    /// use llm_failover::{Capability, ChatRequest, Credential, ProviderId};
    ///
    /// // A proxy on this machine; the version is part of `base_url`.
    /// let gemini = Gemini::new(ProviderId::new("gemini"), "http://127.0.0.1:8082/v1beta".parse()?);
    /// assert_eq!(gemini.default_model(Capability::Chat), None);
    ///
    /// let key = Credential::new("AIza-test");
    /// let ctx = RequestContext::new("gemini-2.5-flash", Some(&key));
    /// let http = gemini.chat_request(&ChatRequest::from_prompt("Hi"), &ctx)?;
    /// assert_eq!(http.url.path(), "/v1beta/models/gemini-2.5-flash:generateContent");
    /// assert_eq!(http.url.query(), None); // the key is never in the URL ...
    /// assert!(http.headers["x-goog-api-key"].is_sensitive()); // ... but in a header
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(id: ProviderId, base_url: Url) -> Self {
        Gemini {
            id,
            base_url,
            model: None,
            embedding_model: None,
        }
    }

    /// Sets the model used when a request names none (`gemini-2.5-flash`; a `models/` prefix
    /// is accepted).
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::provider::{gemini::Gemini, Provider, RequestContext};
    /// use llm_failover::{Capability, ChatRequest, ProviderId};
    ///
    /// let gemini = Gemini::new(ProviderId::new("gemini"), "http://127.0.0.1:8082/v1beta".parse()?)
    ///     .with_model("models/gemini-2.5-flash");
    /// let model = gemini.default_model(Capability::Chat).unwrap();
    /// let ctx = RequestContext::new(model, None).streaming();
    /// let http = gemini.chat_request(&ChatRequest::from_prompt("Hi"), &ctx)?;
    /// // The prefix is not doubled.
    /// assert_eq!(
    ///     http.url.as_str(),
    ///     "http://127.0.0.1:8082/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
    /// );
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Sets the embedding model used when a request names none (`gemini-embedding-001`).
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::provider::{gemini::Gemini, Provider, RequestContext};
    /// use llm_failover::{Capability, EmbeddingRequest, ProviderId};
    ///
    /// let gemini = Gemini::new(ProviderId::new("gemini"), "http://127.0.0.1:8082/v1beta".parse()?)
    ///     .with_embedding_model("gemini-embedding-001");
    /// let model = gemini.default_model(Capability::Embedding).unwrap();
    /// let ctx = RequestContext::new(model, None);
    /// let one = gemini.embedding_request(&EmbeddingRequest::new("hi"), &ctx)?;
    /// assert_eq!(one.url.path(), "/v1beta/models/gemini-embedding-001:embedContent");
    /// let two = gemini.embedding_request(&EmbeddingRequest::many(["a", "b"]), &ctx)?;
    /// assert_eq!(two.url.path(), "/v1beta/models/gemini-embedding-001:batchEmbedContents");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn with_embedding_model(mut self, model: impl Into<String>) -> Self {
        self.embedding_model = Some(model.into());
        self
    }

    /// Builds the adapter from a validated provider entry.
    ///
    /// # Errors
    ///
    /// `Config` when the entry is not of kind `gemini`, or sets `transcription_model` or
    /// `api_version` (the version is part of `base_url` for Gemini).
    #[allow(dead_code, reason = "called by the provider factory")]
    pub(crate) fn from_config(cfg: &ProviderConfig) -> Result<Self> {
        let at = |field: &str| format!("providers.{}.{field}", cfg.id);
        if cfg.kind != ProviderKind::Gemini {
            return Err(Error::config(format!(
                "{}: expected kind `{PROVIDER_TYPE}`, found `{}`",
                at("kind"),
                cfg.kind
            )));
        }
        if cfg.transcription_model.is_some() {
            return Err(Error::config(format!(
                "{}: this adapter serves Gemini chat only; remove it or use a transcription \
                 provider",
                at("transcription_model")
            )));
        }
        if cfg.api_version.is_some() {
            return Err(Error::config(format!(
                "{}: Gemini's API version is part of `base_url` (e.g. `{DEFAULT_BASE_URL}`)",
                at("api_version")
            )));
        }
        let mut provider = Self::new(cfg.id.clone(), cfg.base_url.clone());
        provider.model = cfg.model.clone();
        provider.embedding_model = cfg.embedding_model.clone();
        Ok(provider)
    }

    /// `{base}/models/{model}:{method}`; the model is one path segment, percent-encoded.
    fn endpoint(&self, model: &str, method: &str) -> Result<Url> {
        let model = model.strip_prefix("models/").unwrap_or(model);
        if model.trim().is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidRequest,
                format!("provider `{}`: no Gemini model named", self.id),
            ));
        }
        let last = format!("{model}:{method}");
        crate::provider::url_with_path(&self.id, &self.base_url, ["models", last.as_str()])
    }
}

impl Provider for Gemini {
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
            transcription: false,
            embedding: true,
        }
    }

    fn default_model(&self, capability: Capability) -> Option<&str> {
        match capability {
            Capability::Chat => self.model.as_deref(),
            Capability::Transcription => None,
            Capability::Embedding => self.embedding_model.as_deref(),
        }
    }

    fn chat_request(&self, req: &ChatRequest, ctx: &RequestContext<'_>) -> Result<HttpRequest> {
        let url = if ctx.stream {
            let mut url = self.endpoint(ctx.model, "streamGenerateContent")?;
            url.query_pairs_mut().append_pair("alt", "sse");
            url
        } else {
            self.endpoint(ctx.model, "generateContent")?
        };
        let mut http = HttpRequest::post_json(url, &request::request_body(req, &self.id)?)?;
        if let Some(key) = ctx.credential {
            http = http.secret_header("x-goog-api-key", key.expose())?;
        }
        Ok(http)
    }

    /// Refuses what Gemini cannot carry (see the module documentation): image types it does
    /// not read, image URLs that are not `https` or do not name their type, call arguments
    /// that are not objects — after the checks every format makes.
    fn check_chat(&self, req: &ChatRequest) -> Result<()> {
        request::check(req)
    }

    fn chat_response(&self, raw: RawResponse, model: &str) -> Result<ChatResponse> {
        let mut resp = wire::parse_response(&self.id, &raw.body, model)?;
        if let Some(id) = self.request_id(&raw.headers) {
            resp.request_id = Some(id);
        }
        Ok(resp)
    }

    fn stream_decoder(&self, model: &str) -> Box<dyn StreamDecoder> {
        Box::new(stream::Decoder::new(&self.id, model))
    }

    /// Gemini's batch mode ([`bulk`](crate::provider::bulk)): the requests inline, the
    /// responses inline.
    fn bulk(&self) -> Option<&dyn crate::provider::bulk::BulkApi> {
        Some(self)
    }

    /// At most 100 inputs per request (`batchEmbedContents`' limit).
    fn check_embedding(&self, req: &EmbeddingRequest) -> Result<()> {
        embed::check(&self.id, req)
    }

    fn embedding_request(
        &self,
        req: &EmbeddingRequest,
        ctx: &RequestContext<'_>,
    ) -> Result<HttpRequest> {
        let model = ctx.model.strip_prefix("models/").unwrap_or(ctx.model);
        let (method, body) = embed::request_body(req, model);
        let mut http = HttpRequest::post_json(self.endpoint(model, method)?, &body)?;
        if let Some(key) = ctx.credential {
            http = http.secret_header("x-goog-api-key", key.expose())?;
        }
        Ok(http)
    }

    fn embedding_response(&self, raw: RawResponse, model: &str) -> Result<EmbeddingResponse> {
        let mut answer = embed::parse_response(&self.id, &raw.body, model)?;
        answer.request_id = self.request_id(&raw.headers);
        Ok(answer)
    }

    fn error(&self, raw: &RawResponse, now: Now) -> Error {
        error::classify(raw.status, &raw.body, &raw.headers, now)
    }

    /// Gemini sends no rate-limit headers; a proxy in front of it may (`Retry-After`, the
    /// IETF draft fields), so the generic reader still runs.
    fn limit_report(&self, headers: &HeaderMap, now: Now) -> LimitReport {
        parse_limit_headers(HeaderDialect::Generic, headers, now)
    }

    /// The headers a proxy may add, then the quotas the body's `QuotaFailure` names: each
    /// violation with a positive `quotaValue` is a window of that many requests or tokens,
    /// used up, resetting when `RetryInfo` says (per minute) or at the next midnight Pacific
    /// time (per day).
    fn error_limit_report(&self, raw: &RawResponse, now: Now) -> LimitReport {
        let mut report = self.limit_report(&raw.headers, now);
        report.fill_from(error::body_report(&raw.body, now));
        report
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::config::Limits;

    fn config() -> ProviderConfig {
        ProviderConfig {
            id: ProviderId::new("gem"),
            kind: ProviderKind::Gemini,
            base_url: DEFAULT_BASE_URL.parse().unwrap(),
            model: Some("gemini-2.5-flash".into()),
            transcription_model: None,
            embedding_model: None,
            keys: BTreeMap::new(),
            limits: Limits::none(),
            model_limits: BTreeMap::new(),
            prices: Default::default(),
            budget: None,
            timeout: None,
            allow_http: false,
            api_version: None,
            header_dialect: HeaderDialect::Generic,
            extra_body: Default::default(),
            region: None,
        }
    }

    #[test]
    fn from_config_reads_the_model_and_rejects_foreign_fields() {
        let p = Gemini::from_config(&config()).unwrap();
        assert_eq!(p.default_model(Capability::Chat), Some("gemini-2.5-flash"));
        let mut cfg = config();
        cfg.api_version = Some("v1".into());
        let err = Gemini::from_config(&cfg).unwrap_err();
        assert!(err.message().contains("providers.gem.api_version"), "{err}");
        let mut cfg = config();
        cfg.kind = ProviderKind::Anthropic;
        assert!(Gemini::from_config(&cfg).unwrap_err().is_config());
        let mut cfg = config();
        cfg.transcription_model = Some("x".into());
        assert!(Gemini::from_config(&cfg).unwrap_err().is_config());
    }

    #[test]
    fn endpoint_puts_the_model_in_one_encoded_segment() {
        let p = Gemini::new(ProviderId::new("g"), DEFAULT_BASE_URL.parse().unwrap());
        assert_eq!(
            p.endpoint("models/gemini-2.5-flash", "generateContent")
                .unwrap()
                .as_str(),
            "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent"
        );
        let odd = p.endpoint("a/b?c", "generateContent").unwrap();
        assert_eq!(odd.query(), None);
        assert!(
            odd.path().ends_with("/models/a%2Fb%3Fc:generateContent"),
            "{odd}"
        );
        assert_eq!(
            p.endpoint(" ", "generateContent").unwrap_err().kind(),
            ErrorKind::InvalidRequest
        );
    }
}
