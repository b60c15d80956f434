//! Anthropic Messages API (`POST /v1/messages`), plain and streamed.
//!
//! Translation choices, each tested in `tests/adapter_anthropic.rs`:
//!
//! - **System messages** are taken out of the conversation and joined (blank line between them)
//!   into the top-level `system` field: the Messages API has no `system` role.
//! - **Consecutive messages of one role** are merged into one message (blank line between
//!   them), so a neutral conversation that repeats a role is still a valid alternation.
//! - **`max_tokens`** is required by Anthropic and always sent: the request's value, else
//!   [`DEFAULT_MAX_TOKENS`].
//! - **Tools**: `tools` as `{name, description, input_schema}`; the tool choice as
//!   `{"type": "auto" | "none" | "any"}` (`any` for [`ToolChoice::Required`]) or
//!   `{"type": "tool", "name"}`. An assistant turn's calls are `tool_use` blocks after its
//!   text; tool results are `tool_result` blocks of one user message — consecutive results
//!   merge, and a user text right after them joins that message after them, as Anthropic
//!   requires. Call ids go out in Anthropic's pattern (`a-z A-Z 0-9 _ -`, others become `_`,
//!   on calls and results alike; an id an earlier turn already used gets a `_2` suffix), so
//!   a conversation begun at another provider goes on here. Calls in answers keep
//!   Anthropic's ids; streamed calls are assembled and delivered whole.
//! - **Images**: `image` blocks before the message's text (as the vision guide advises),
//!   base64 (a `data:` URL too) or an http(s) URL source; JPEG, PNG, GIF and WebP only.
//! - **Structured answers** go through a forced tool, Anthropic's documented way ("JSON mode"
//!   in its tool-use guide): the only tool, `json_answer-<schema name>` with the schema as
//!   its `input_schema` (`json_answer` with `{"type": "object"}` for
//!   [`ResponseFormat::JsonObject`]), forced for exactly one call. Its input becomes the
//!   answer's text (streamed: its pieces), finish reason `Stop`, no tool calls. A system-prompt
//!   instruction, the schema spelled out, stands in when the request has tools of its own
//!   (their tool choice stands), when extended thinking is on in the extra body (Anthropic
//!   refuses forced tools with it), or when the schema's root is not an object.
//! - **Refused before sending** ([`Provider::check_chat`]), never sent in part: images of
//!   another type or scheme, results not in the message right after their calls, calls left
//!   without results, a caller's tool named like the answer tool (`json_answer…`).
//! - **Errors** are classified by the body's `error.type` first (`overloaded_error` →
//!   [`ErrorKind::Overloaded`](crate::ErrorKind::Overloaded), `rate_limit_error` →
//!   `RateLimited`, …), then by status. The same classification applies to an `event: error`
//!   inside a stream that began with `200 OK`.
//!
//! [`ToolChoice::Required`]: crate::types::ToolChoice::Required
//! [`ResponseFormat::JsonObject`]: crate::types::ResponseFormat::JsonObject

mod bulk;
mod error;

#[cfg(test)]
pub(crate) use bulk::fits as bulk_id_fits;
mod messages;
mod stream;
mod structured;
mod wire;

use reqwest::header::{HeaderMap, HeaderValue};
use url::Url;

use super::{Provider, RequestContext, StreamDecoder};
use crate::clock::Now;
use crate::config::{ProviderConfig, ProviderKind};
use crate::error::{Error, Result};
use crate::http::{HttpRequest, RawResponse};
use crate::id::{Capabilities, Capability, ProviderId};
use crate::provider::tools::check_conversation;
use crate::ratelimit::{HeaderDialect, LimitReport, parse_limit_headers};
use crate::types::{ChatRequest, ChatResponse};

/// The wire format's name, as written in `providers.toml` (`kind = "anthropic"`).
pub(crate) const PROVIDER_TYPE: &str = "anthropic";

/// Anthropic's API root.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// The `anthropic-version` header sent when the configuration names none.
pub const DEFAULT_VERSION: &str = "2023-06-01";

/// `max_tokens` sent when the request sets none (Anthropic requires the field). 4096 is the
/// largest output every current Claude model accepts.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// An Anthropic Messages API provider.
///
/// # Examples
///
/// ```
/// use llm_failover::provider::anthropic::{Anthropic, DEFAULT_BASE_URL};
/// use llm_failover::provider::Provider;
/// use llm_failover::Capability;
/// use llm_failover::ProviderId;
///
/// let claude = Anthropic::new(ProviderId::new("claude"), DEFAULT_BASE_URL.parse().unwrap())
///     .with_model("claude-sonnet-4-5")
///     .with_version("2023-06-01");
/// assert_eq!(claude.default_model(Capability::Chat), Some("claude-sonnet-4-5"));
/// assert!(!claude.capabilities().transcription);
/// ```
#[derive(Clone, Debug)]
pub struct Anthropic {
    id: ProviderId,
    base_url: Url,
    model: Option<String>,
    version: String,
}

impl Anthropic {
    /// A provider named `id` at `base_url` (normally [`DEFAULT_BASE_URL`]), sending
    /// `anthropic-version: 2023-06-01` and with no default model.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::provider::{anthropic::Anthropic, Provider, RequestContext};
    /// use llm_failover::{Capability, ChatRequest, Credential, ProviderId};
    ///
    /// // A proxy on this machine; `base_url` is the API root, without `/v1`.
    /// let claude = Anthropic::new(ProviderId::new("claude"), "http://127.0.0.1:8081".parse()?);
    /// assert_eq!(claude.default_model(Capability::Chat), None);
    ///
    /// let key = Credential::new("sk-ant-test");
    /// let ctx = RequestContext::new("claude-sonnet-4-5", Some(&key));
    /// let http = claude.chat_request(&ChatRequest::from_prompt("Hi"), &ctx)?;
    /// assert_eq!(http.url.as_str(), "http://127.0.0.1:8081/v1/messages");
    /// assert_eq!(http.headers["anthropic-version"], "2023-06-01");
    /// assert!(http.headers["x-api-key"].is_sensitive());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(id: ProviderId, base_url: Url) -> Self {
        Anthropic {
            id,
            base_url,
            model: None,
            version: DEFAULT_VERSION.to_owned(),
        }
    }

    /// Sets the model used when a request names none.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::provider::{anthropic::Anthropic, Provider, RequestContext};
    /// use llm_failover::{Capability, ChatRequest, ProviderId};
    ///
    /// let claude = Anthropic::new(ProviderId::new("claude"), "http://127.0.0.1:8081".parse()?)
    ///     .with_model("claude-haiku-4-5");
    /// let model = claude.default_model(Capability::Chat).unwrap();
    /// assert_eq!(model, "claude-haiku-4-5");
    /// assert_eq!(claude.default_model(Capability::Transcription), None); // chat only
    ///
    /// let http = claude.chat_request(&ChatRequest::from_prompt("Hi"), &RequestContext::new(model, None))?;
    /// let body: serde_json::Value = serde_json::from_slice(http.json_body().unwrap())?;
    /// assert_eq!(body["model"], "claude-haiku-4-5");
    /// assert_eq!(body["max_tokens"], 4096); // always sent: Anthropic requires it
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Sets the `anthropic-version` header value.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::provider::{anthropic::Anthropic, Provider, RequestContext};
    /// use llm_failover::{ChatRequest, ProviderId};
    ///
    /// let claude = Anthropic::new(ProviderId::new("claude"), "http://127.0.0.1:8081".parse()?)
    ///     .with_version("2024-01-01");
    /// let ctx = RequestContext::new("claude-sonnet-4-5", None);
    /// let http = claude.chat_request(&ChatRequest::from_prompt("Hi"), &ctx)?;
    /// assert_eq!(http.headers["anthropic-version"], "2024-01-01");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn with_version(mut self, version: impl Into<String>) -> Self {
        self.version = version.into();
        self
    }

    /// Builds the adapter from a validated provider entry.
    ///
    /// # Errors
    ///
    /// `Config` when the entry is not of kind `anthropic`, sets a `transcription_model`
    /// (Anthropic offers no speech-to-text), or has an `api_version` that cannot be a header.
    #[allow(dead_code, reason = "called by the provider factory")]
    pub(crate) fn from_config(cfg: &ProviderConfig) -> Result<Self> {
        let at = |field: &str| format!("providers.{}.{field}", cfg.id);
        if cfg.kind != ProviderKind::Anthropic {
            return Err(Error::config(format!(
                "{}: expected kind `{PROVIDER_TYPE}`, found `{}`",
                at("kind"),
                cfg.kind
            )));
        }
        if cfg.transcription_model.is_some() {
            return Err(Error::config(format!(
                "{}: Anthropic offers no speech-to-text; remove it or use a transcription \
                 provider",
                at("transcription_model")
            )));
        }
        let mut provider = Self::new(cfg.id.clone(), cfg.base_url.clone());
        provider.model = cfg.model.clone();
        if let Some(version) = &cfg.api_version {
            if version.trim().is_empty() || HeaderValue::from_str(version).is_err() {
                return Err(Error::config(format!(
                    "{}: `{version}` is not a valid `anthropic-version` header value \
                     (e.g. \"{DEFAULT_VERSION}\")",
                    at("api_version")
                )));
            }
            provider.version = version.clone();
        }
        Ok(provider)
    }

    fn endpoint(&self) -> Result<Url> {
        crate::provider::url_with_path(&self.id, &self.base_url, ["v1", "messages"])
    }
}

impl Provider for Anthropic {
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
            ..Capabilities::default()
        }
    }

    fn default_model(&self, capability: Capability) -> Option<&str> {
        match capability {
            Capability::Chat => self.model.as_deref(),
            Capability::Transcription | Capability::Embedding => None,
        }
    }

    fn chat_request(&self, req: &ChatRequest, ctx: &RequestContext<'_>) -> Result<HttpRequest> {
        let body = wire::request_body(req, ctx, &self.id)?;
        let mut http = HttpRequest::post_json(self.endpoint()?, &body)?
            .header("anthropic-version", &self.version)?;
        if let Some(key) = ctx.credential {
            http = http.secret_header("x-api-key", key.expose())?;
        }
        Ok(http)
    }

    fn check_chat(&self, req: &ChatRequest) -> Result<()> {
        check_conversation(req, PROVIDER_TYPE)?;
        wire::check(req)
    }

    fn chat_response(&self, raw: RawResponse, model: &str) -> Result<ChatResponse> {
        let mut resp = wire::parse_response(&self.id, &raw, model)?;
        resp.request_id = self.request_id(&raw.headers);
        Ok(resp)
    }

    fn stream_decoder(&self, model: &str) -> Box<dyn StreamDecoder> {
        Box::new(stream::Decoder::new(&self.id, model))
    }

    /// Anthropic's Message Batches ([`bulk`](crate::provider::bulk)): the requests inline in the
    /// create.
    fn bulk(&self) -> Option<&dyn crate::provider::bulk::BulkApi> {
        Some(self)
    }

    fn error(&self, raw: &RawResponse, now: Now) -> Error {
        let _ = now; // Anthropic states delays in headers only (read by `limit_report`).
        error::classify(Some(raw.status), &raw.body)
    }

    fn limit_report(&self, headers: &HeaderMap, now: Now) -> LimitReport {
        parse_limit_headers(HeaderDialect::Anthropic, headers, now)
    }

    fn request_id(&self, headers: &HeaderMap) -> Option<String> {
        headers
            .get("request-id")
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
            .or_else(|| super::default_request_id(headers))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::ErrorKind;
    use crate::config::Limits;

    fn config(kind: ProviderKind) -> ProviderConfig {
        ProviderConfig {
            id: ProviderId::new("claude"),
            kind,
            base_url: DEFAULT_BASE_URL.parse().unwrap(),
            model: Some("claude-sonnet-4-5".into()),
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
            header_dialect: HeaderDialect::Anthropic,
            extra_body: Default::default(),
            region: None,
        }
    }

    #[test]
    fn from_config_reads_model_and_defaults_the_version() {
        let p = Anthropic::from_config(&config(ProviderKind::Anthropic)).unwrap();
        assert_eq!(p.default_model(Capability::Chat), Some("claude-sonnet-4-5"));
        assert_eq!(p.version, DEFAULT_VERSION);
        let mut cfg = config(ProviderKind::Anthropic);
        cfg.api_version = Some("2024-01-01".into());
        assert_eq!(Anthropic::from_config(&cfg).unwrap().version, "2024-01-01");
    }

    #[test]
    fn from_config_rejects_what_anthropic_cannot_do() {
        let err = Anthropic::from_config(&config(ProviderKind::Gemini)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config);
        assert!(err.message().contains("providers.claude.kind"), "{err}");

        let mut cfg = config(ProviderKind::Anthropic);
        cfg.transcription_model = Some("whisper-1".into());
        let err = Anthropic::from_config(&cfg).unwrap_err();
        assert!(
            err.message()
                .contains("providers.claude.transcription_model"),
            "{err}"
        );

        let mut cfg = config(ProviderKind::Anthropic);
        cfg.api_version = Some("bad\nversion".into());
        let err = Anthropic::from_config(&cfg).unwrap_err();
        assert!(
            err.message().contains("providers.claude.api_version"),
            "{err}"
        );
    }

    #[test]
    fn endpoint_keeps_a_path_prefix() {
        let p = Anthropic::new(
            ProviderId::new("a"),
            "https://proxy.example/anthropic/".parse().unwrap(),
        );
        assert_eq!(
            p.endpoint().unwrap().as_str(),
            "https://proxy.example/anthropic/v1/messages"
        );
        let p = Anthropic::new(ProviderId::new("a"), DEFAULT_BASE_URL.parse().unwrap());
        assert_eq!(
            p.endpoint().unwrap().as_str(),
            "https://api.anthropic.com/v1/messages"
        );
    }
}
