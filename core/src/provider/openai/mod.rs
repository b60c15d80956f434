//! The OpenAI wire format: OpenAI itself and every OpenAI-compatible host (Groq, Together,
//! OpenRouter, DeepSeek, Mistral, Fireworks, xAI, vLLM, Ollama). A new host is a config
//! entry (`kind = "openai"`, its `base_url`, maybe a `header_dialect`), not code.
//!
//! - Chat: `POST {base_url}/chat/completions`, JSON; streamed as server-sent events ending in
//!   `data: [DONE]`, with `stream_options.include_usage` so the last chunk carries usage.
//!   Tools (`tools`, `tool_choice`, `tool_calls`, `role: "tool"` results), images in user
//!   messages (`image_url` parts, carried images as `data:` URLs) and structured answers
//!   (`response_format: json_schema`); streamed calls are put together from their pieces and
//!   handed over whole with the finishing chunk.
//! - Speech to text: `POST {base_url}/audio/transcriptions`, `multipart/form-data`.
//! - Embeddings: `POST {base_url}/embeddings`, JSON; many inputs in one request (at most
//!   2,048, the API's limit: more are refused before sending).
//! - Auth: `Authorization: Bearer KEY` (marked sensitive); no header at all when the provider
//!   has no credential (Ollama, vLLM).
//! - Errors: the status, refined by `{"error": {"message", "type", "code"}}` — see
//!   [`OpenAi::error`](crate::provider::Provider::error).
//!
//! `base_url` includes the version path: `https://api.openai.com/v1`,
//! `https://api.groq.com/openai/v1`, `http://localhost:11434/v1`.
//!
//! The request, response, stream and error code here is also the Azure adapter's
//! ([`super::azure`]); only URLs, the key header and the header dialect differ.

mod audio;
pub(crate) mod bulk;
mod chat;
mod embed;
mod error;
mod message;
mod stream;
mod wire;

use reqwest::header::HeaderMap;
use url::Url;

use crate::clock::Now;
use crate::error::{Error, Result};
use crate::http::{HttpRequest, RawResponse};
use crate::id::{Capabilities, Capability, ProviderId};
use crate::provider::{Provider, RequestContext, StreamDecoder};
use crate::ratelimit::{HeaderDialect, LimitReport, parse_limit_headers};
use crate::types::{
    ChatRequest, ChatResponse, EmbeddingRequest, EmbeddingResponse, Transcript,
    TranscriptionRequest,
};

pub(crate) use error::{classify, error_report};
pub(crate) use stream::ChunkDecoder;

/// The wire format's name, as written in `providers.toml` (`kind = "openai"`).
pub(crate) const PROVIDER_TYPE: &str = "openai";

/// An OpenAI or OpenAI-compatible provider.
///
/// # Examples
///
/// ```
/// use llm_failover::provider::openai::OpenAi;
/// use llm_failover::provider::Provider;
/// use llm_failover::ratelimit::HeaderDialect;
/// use llm_failover::ProviderId;
///
/// let groq = OpenAi::new(
///     ProviderId::new("groq"),
///     "https://api.groq.com/openai/v1".parse().unwrap(),
/// )
/// .with_chat_model("llama-3.1-8b-instant")
/// .with_transcription_model("whisper-large-v3")
/// .with_dialect(HeaderDialect::Groq);
/// assert_eq!(groq.kind(), "openai");
/// ```
#[derive(Clone, Debug)]
pub struct OpenAi {
    id: ProviderId,
    base_url: Url,
    /// `{base_url}/chat/completions`, built once (`None`: `base_url` cannot take a path; the
    /// request then says so).
    chat_url: Option<Url>,
    chat_model: Option<String>,
    transcription_model: Option<String>,
    embedding_model: Option<String>,
    dialect: HeaderDialect,
}

impl OpenAi {
    /// A provider at `base_url` (including the version path, e.g. `https://api.openai.com/v1`),
    /// reading rate-limit headers in the OpenAI dialect.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::provider::{openai::OpenAi, Provider, RequestContext};
    /// use llm_failover::{Capability, ChatRequest, ProviderId};
    ///
    /// // Ollama on this machine: the version path is part of `base_url`.
    /// let ollama = OpenAi::new(ProviderId::new("ollama"), "http://127.0.0.1:11434/v1".parse()?);
    /// assert_eq!(ollama.id().as_str(), "ollama");
    /// assert_eq!(ollama.default_model(Capability::Chat), None); // until one is set
    ///
    /// let ctx = RequestContext::new("llama3.2", None);
    /// let http = ollama.chat_request(&ChatRequest::from_prompt("Hi"), &ctx)?;
    /// assert_eq!(http.url.as_str(), "http://127.0.0.1:11434/v1/chat/completions");
    /// assert!(http.headers.get("authorization").is_none()); // no key, no header
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(id: ProviderId, base_url: Url) -> Self {
        let chat_url = endpoint(&id, &base_url, &["chat", "completions"]).ok();
        OpenAi {
            id,
            base_url,
            chat_url,
            chat_model: None,
            transcription_model: None,
            embedding_model: None,
            dialect: HeaderDialect::OpenAi,
        }
    }

    /// Sets the default chat model.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::provider::{openai::OpenAi, Provider, RequestContext};
    /// use llm_failover::{Capability, ChatRequest, ProviderId};
    ///
    /// let local = OpenAi::new(ProviderId::new("local"), "http://127.0.0.1:11434/v1".parse()?)
    ///     .with_chat_model("llama3.2");
    /// assert_eq!(local.default_model(Capability::Chat), Some("llama3.2"));
    /// assert_eq!(local.default_model(Capability::Transcription), None);
    ///
    /// // A request naming no model is sent with the default:
    /// let model = local.default_model(Capability::Chat).unwrap();
    /// let http = local.chat_request(&ChatRequest::from_prompt("Hi"), &RequestContext::new(model, None))?;
    /// let body: serde_json::Value = serde_json::from_slice(http.json_body().unwrap())?;
    /// assert_eq!(body["model"], "llama3.2");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn with_chat_model(mut self, model: impl Into<String>) -> Self {
        self.chat_model = Some(model.into());
        self
    }

    /// Sets the default transcription model.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::http::{Body, FormPart};
    /// use llm_failover::provider::{openai::OpenAi, Provider, RequestContext};
    /// use llm_failover::{AudioInput, Capability, ProviderId, TranscriptionRequest};
    ///
    /// let whisper = OpenAi::new(ProviderId::new("whisper"), "http://127.0.0.1:8000/v1".parse()?)
    ///     .with_transcription_model("whisper-1");
    /// let model = whisper.default_model(Capability::Transcription).unwrap();
    /// assert_eq!(model, "whisper-1");
    ///
    /// let audio = AudioInput::from_bytes(vec![0u8; 64], "memo.mp3")?;
    /// let req = TranscriptionRequest::new(audio);
    /// let http = whisper.transcription_request(&req, &RequestContext::new(model, None))?;
    /// assert_eq!(http.url.path(), "/v1/audio/transcriptions");
    /// let Body::Multipart(parts) = &http.body else { panic!("expected a form") };
    /// assert!(parts.iter().any(|p| matches!(p,
    ///     FormPart::Text { name, value } if name == "model" && value == "whisper-1")));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn with_transcription_model(mut self, model: impl Into<String>) -> Self {
        self.transcription_model = Some(model.into());
        self
    }

    /// Sets the default embedding model.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::provider::{openai::OpenAi, Provider};
    /// use llm_failover::{Capability, ProviderId};
    ///
    /// let openai = OpenAi::new(ProviderId::new("openai"), "http://127.0.0.1:8080/v1".parse()?)
    ///     .with_embedding_model("text-embedding-3-small");
    /// assert_eq!(openai.default_model(Capability::Embedding), Some("text-embedding-3-small"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn with_embedding_model(mut self, model: impl Into<String>) -> Self {
        self.embedding_model = Some(model.into());
        self
    }

    /// Sets how rate-limit headers are read (e.g. [`HeaderDialect::Groq`]).
    ///
    /// # Examples
    ///
    /// Groq sends OpenAI's header names, but counts requests per day:
    ///
    /// ```
    /// use reqwest::header::{HeaderMap, HeaderValue};
    /// use llm_failover::clock::{Clock, TokioClock};
    /// use llm_failover::provider::{openai::OpenAi, Provider};
    /// use llm_failover::ratelimit::{HeaderDialect, Per};
    /// use llm_failover::ProviderId;
    ///
    /// let mut headers = HeaderMap::new();
    /// headers.insert("x-ratelimit-limit-requests", HeaderValue::from_static("14400"));
    /// headers.insert("x-ratelimit-remaining-requests", HeaderValue::from_static("14399"));
    ///
    /// let base = "http://127.0.0.1:8080/openai/v1".parse::<url::Url>()?;
    /// let plain = OpenAi::new(ProviderId::new("plain"), base.clone());
    /// let groq = OpenAi::new(ProviderId::new("groq"), base).with_dialect(HeaderDialect::Groq);
    ///
    /// let now = TokioClock.both();
    /// let per = |p: &OpenAi| p.limit_report(&headers, now).requests.map(|w| w.per);
    /// assert_eq!(per(&plain), Some(Per::Minute));
    /// assert_eq!(per(&groq), Some(Per::Day));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn with_dialect(mut self, dialect: HeaderDialect) -> Self {
        self.dialect = dialect;
        self
    }

    /// Builds the adapter from a validated `[providers.<id>]` entry.
    ///
    /// # Errors
    ///
    /// `Config` when `base_url` cannot carry a path (e.g. `mailto:`).
    #[cfg_attr(not(test), allow(dead_code, reason = "called by the provider factory"))]
    pub(crate) fn from_config(cfg: &crate::config::ProviderConfig) -> Result<Self> {
        check_base_url(&cfg.id, &cfg.base_url)?;
        let mut p =
            OpenAi::new(cfg.id.clone(), cfg.base_url.clone()).with_dialect(cfg.header_dialect);
        p.chat_model = cfg.model.clone();
        p.transcription_model = cfg.transcription_model.clone();
        p.embedding_model = cfg.embedding_model.clone();
        Ok(p)
    }

    fn bearer(&self, http: HttpRequest, ctx: &RequestContext<'_>) -> Result<HttpRequest> {
        match ctx.credential {
            Some(key) => {
                let key = key.expose();
                let mut value = String::with_capacity(7 + key.len());
                value.push_str("Bearer ");
                value.push_str(key);
                http.secret_header("authorization", &value)
            }
            None => Ok(http),
        }
    }
}

/// Rejects a `base_url` that cannot take path segments, naming the config key.
pub(crate) fn check_base_url(id: &ProviderId, base: &Url) -> Result<()> {
    if base.cannot_be_a_base() {
        return Err(Error::config(format!(
            "`providers.{id}.base_url` = `{base}` cannot take a path; expected e.g. \
             `https://api.openai.com/v1`"
        )));
    }
    Ok(())
}

/// `base` with `segments` appended as path segments (each percent-encoded, so a `/` or `?`
/// in a name cannot change the route); a trailing slash in `base` does not produce `//`.
pub(crate) fn endpoint(id: &ProviderId, base: &Url, segments: &[&str]) -> Result<Url> {
    check_base_url(id, base)?;
    let mut url = base.clone();
    url.set_fragment(None);
    {
        let Ok(mut path) = url.path_segments_mut() else {
            return Err(Error::config(format!(
                "`providers.{id}.base_url` cannot take a path"
            )));
        };
        path.pop_if_empty().extend(segments);
    }
    Ok(url)
}

/// Chat request in the OpenAI format at `url` (shared with Azure); `kind` names the format
/// in a refusal.
pub(crate) fn chat_http(
    id: &ProviderId,
    kind: &str,
    url: Url,
    req: &ChatRequest,
    ctx: &RequestContext<'_>,
    stream_usage: bool,
) -> Result<HttpRequest> {
    chat::build_request(id, kind, url, req, ctx, stream_usage)
}

/// Whether the OpenAI format can carry `req` (shared with Azure): see [`message::check`].
pub(crate) fn check_chat_format(id: &ProviderId, req: &ChatRequest, kind: &str) -> Result<()> {
    message::check(id, req, kind)
}

/// Parses a chat completion (shared with Azure).
pub(crate) fn chat_result(
    id: &ProviderId,
    raw: &RawResponse,
    model: &str,
    request_id: Option<String>,
) -> Result<ChatResponse> {
    chat::parse_response(id, raw, model, request_id)
}

/// Transcription request in the OpenAI format at `url` (shared with Azure).
pub(crate) fn transcription_http(
    id: &ProviderId,
    url: Url,
    req: &TranscriptionRequest,
    ctx: &RequestContext<'_>,
) -> Result<HttpRequest> {
    audio::build_request(id, url, req, ctx)
}

/// Refuses more inputs than one request in the OpenAI format takes (shared with Azure).
pub(crate) fn check_embedding_format(id: &ProviderId, req: &EmbeddingRequest) -> Result<()> {
    embed::check(id, req)
}

/// Embedding request in the OpenAI format at `url` (shared with Azure).
pub(crate) fn embedding_http(
    url: Url,
    req: &EmbeddingRequest,
    ctx: &RequestContext<'_>,
) -> Result<HttpRequest> {
    embed::build_request(url, req, ctx)
}

/// Parses an embedding answer (shared with Azure).
pub(crate) fn embedding_result(
    id: &ProviderId,
    raw: &RawResponse,
    model: &str,
    request_id: Option<String>,
) -> Result<EmbeddingResponse> {
    embed::parse_response(id, raw, model, request_id)
}

/// Parses a transcription (shared with Azure).
pub(crate) fn transcription_result(
    id: &ProviderId,
    raw: &RawResponse,
    model: &str,
    request_id: Option<String>,
) -> Result<Transcript> {
    audio::parse_response(id, raw, model, request_id)
}

impl Provider for OpenAi {
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
            Capability::Chat => self.chat_model.as_deref(),
            Capability::Transcription => self.transcription_model.as_deref(),
            Capability::Embedding => self.embedding_model.as_deref(),
        }
    }

    fn chat_request(&self, req: &ChatRequest, ctx: &RequestContext<'_>) -> Result<HttpRequest> {
        let url = match &self.chat_url {
            Some(url) => url.clone(),
            None => endpoint(&self.id, &self.base_url, &["chat", "completions"])?,
        };
        self.bearer(
            chat_http(&self.id, PROVIDER_TYPE, url, req, ctx, true)?,
            ctx,
        )
    }

    /// Refuses what the Chat Completions format cannot carry: image types other than PNG,
    /// JPEG, WEBP and GIF, and a tool result that is not right after the assistant turn that
    /// made its call (the API answers 400 to both); before them, the checks every format
    /// makes (tool names, results answering earlier calls, images only from the user).
    fn check_chat(&self, req: &ChatRequest) -> Result<()> {
        check_chat_format(&self.id, req, PROVIDER_TYPE)
    }

    fn chat_response(&self, raw: RawResponse, model: &str) -> Result<ChatResponse> {
        chat_result(&self.id, &raw, model, self.request_id(&raw.headers))
    }

    fn stream_decoder(&self, _model: &str) -> Box<dyn StreamDecoder> {
        Box::new(ChunkDecoder::new(self.id.clone()))
    }

    fn transcription_request(
        &self,
        req: &TranscriptionRequest,
        ctx: &RequestContext<'_>,
    ) -> Result<HttpRequest> {
        let url = endpoint(&self.id, &self.base_url, &["audio", "transcriptions"])?;
        self.bearer(transcription_http(&self.id, url, req, ctx)?, ctx)
    }

    fn transcription_response(&self, raw: RawResponse, model: &str) -> Result<Transcript> {
        transcription_result(&self.id, &raw, model, self.request_id(&raw.headers))
    }

    /// At most 2,048 inputs per request (the API's limit).
    fn check_embedding(&self, req: &EmbeddingRequest) -> Result<()> {
        check_embedding_format(&self.id, req)
    }

    fn embedding_request(
        &self,
        req: &EmbeddingRequest,
        ctx: &RequestContext<'_>,
    ) -> Result<HttpRequest> {
        let url = endpoint(&self.id, &self.base_url, &["embeddings"])?;
        self.bearer(embedding_http(url, req, ctx)?, ctx)
    }

    fn embedding_response(&self, raw: RawResponse, model: &str) -> Result<EmbeddingResponse> {
        embedding_result(&self.id, &raw, model, self.request_id(&raw.headers))
    }

    /// OpenAI's Batch API ([`bulk`](crate::provider::bulk)): a file uploaded, a batch
    /// created on it.
    fn bulk(&self) -> Option<&dyn crate::provider::bulk::BulkApi> {
        Some(self)
    }

    /// Classifies a non-2xx response.
    ///
    /// | status | kind |
    /// | --- | --- |
    /// | 400, 422 | `InvalidRequest`; `context_length_exceeded` → `ContextLengthExceeded`; `content_filter`, `content_policy_violation` → `ContentFiltered` |
    /// | 401 / 402 / 403 / 404 | `Auth` / `QuotaExhausted` / `PermissionDenied` / `NotFound` |
    /// | 408 / 409 / 413 | `Timeout` / `Conflict` / `PayloadTooLarge` |
    /// | 429 | `RateLimited`; `insufficient_quota` (type or code), "exceeded your current quota", "used all available credits", "credit balance" → `QuotaExhausted`; "Request too large … Limit N, Requested M" (M > N) → `RequestTooLarge` |
    /// | 503, 529 / other 5xx | `Overloaded` / `Server` |
    fn error(&self, raw: &RawResponse, now: Now) -> Error {
        classify(&self.id, raw, self.dialect, now)
    }

    fn limit_report(&self, headers: &HeaderMap, now: Now) -> LimitReport {
        parse_limit_headers(self.dialect, headers, now)
    }

    fn error_limit_report(&self, raw: &RawResponse, now: Now) -> LimitReport {
        error_report(raw, self.dialect, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Limits, ProviderConfig, ProviderKind};
    use crate::id::Credential;
    use std::collections::BTreeMap;

    fn url(s: &str) -> Url {
        s.parse().unwrap()
    }

    #[test]
    fn endpoints_join_without_double_slashes_and_escape_names() {
        let id = ProviderId::new("p");
        for base in ["https://api.openai.com/v1", "https://api.openai.com/v1/"] {
            let u = endpoint(&id, &url(base), &["chat", "completions"]).unwrap();
            assert_eq!(u.as_str(), "https://api.openai.com/v1/chat/completions");
        }
        let u = endpoint(&id, &url("http://h:1"), &["a/b?c", "x y"]).unwrap();
        assert_eq!(u.as_str(), "http://h:1/a%2Fb%3Fc/x%20y");
        let err = endpoint(&id, &url("mailto:x@y"), &["a"]).unwrap_err();
        assert!(err.is_config());
        assert!(err.message().contains("providers.p.base_url"), "{err}");
    }

    #[test]
    fn sends_a_bearer_key_only_when_there_is_one() {
        let p = OpenAi::new(ProviderId::new("p"), url("http://127.0.0.1:1/v1"));
        let req = ChatRequest::from_prompt("x");
        let key = Credential::new("sk-test-1");
        let with = p
            .chat_request(&req, &RequestContext::new("m", Some(&key)))
            .unwrap();
        let auth = with.headers.get("authorization").unwrap();
        assert!(auth.is_sensitive());
        assert_eq!(auth, "Bearer sk-test-1");
        assert!(!format!("{with:?}").contains("sk-test-1"));
        let without = p
            .chat_request(&req, &RequestContext::new("m", None))
            .unwrap();
        assert!(without.headers.get("authorization").is_none());
    }

    #[test]
    fn from_config_takes_models_and_dialect() {
        let cfg = ProviderConfig {
            id: ProviderId::new("groq"),
            kind: ProviderKind::OpenAi,
            base_url: url("https://api.groq.com/openai/v1"),
            model: Some("llama".into()),
            transcription_model: Some("whisper-large-v3".into()),
            embedding_model: None,
            keys: BTreeMap::new(),
            limits: Limits::none(),
            model_limits: BTreeMap::new(),
            prices: Default::default(),
            budget: None,
            timeout: None,
            allow_http: false,
            api_version: None,
            header_dialect: HeaderDialect::Groq,
            extra_body: Default::default(),
            region: None,
        };
        let p = OpenAi::from_config(&cfg).unwrap();
        assert_eq!(p.default_model(Capability::Chat), Some("llama"));
        assert_eq!(
            p.default_model(Capability::Transcription),
            Some("whisper-large-v3")
        );
        assert_eq!(p.dialect, HeaderDialect::Groq);
        assert!(p.capabilities().supports(Capability::Transcription));
        let mut bad = cfg;
        bad.base_url = url("data:text/plain,x");
        assert!(OpenAi::from_config(&bad).unwrap_err().is_config());
    }
}
