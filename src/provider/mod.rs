//! Provider adapters: one per wire format, translation only.
//!
//! An adapter turns a neutral [`ChatRequest`] or [`TranscriptionRequest`] into an
//! [`HttpRequest`] in its provider's format, a [`RawResponse`] back into a neutral result or a
//! classified [`Error`], and the response headers into a [`LimitReport`]. It never sends
//! anything, sleeps or retries: [`crate::http`] does the I/O and the router decides.

pub mod anthropic;
pub mod azure;
mod body;
pub mod deepgram;
mod exchange;
mod extra;
pub mod gemini;
pub mod openai;
mod sse;

#[cfg_attr(feature = "test-util", visibility::make(pub))]
#[cfg_attr(not(feature = "test-util"), allow(unused_imports))]
pub(crate) use exchange::{chat_once, chat_stream_once, transcribe_once};
#[cfg_attr(feature = "test-util", visibility::make(pub))]
#[cfg_attr(not(feature = "test-util"), allow(unused_imports))]
pub(crate) use exchange::{ChunkStream, Exchange};
pub(crate) use extra::check as check_extra_body;
pub use sse::SseEvent;
#[cfg_attr(feature = "test-util", visibility::make(pub))]
#[cfg_attr(not(feature = "test-util"), allow(unused_imports))]
pub(crate) use sse::SseParser;

use std::fmt;
use std::sync::Arc;

use reqwest::header::HeaderMap;

use crate::id::{Capabilities, Capability, Credential, ProviderId};

use crate::clock::Now;
use crate::error::{Error, Result};
use crate::http::{HttpRequest, RawResponse};
use crate::ratelimit::LimitReport;
use crate::types::{ChatChunk, ChatRequest, ChatResponse, Transcript, TranscriptionRequest};

/// What an adapter needs, besides the request, to build an HTTP request.
///
/// # Examples
///
/// ```
/// use llm_failover::provider::{openai::OpenAi, Provider, RequestContext};
/// use llm_failover::{ChatRequest, Credential, ProviderId};
///
/// let openai = OpenAi::new(ProviderId::new("openai"), "http://127.0.0.1:8080/v1".parse()?);
/// let key = Credential::new("sk-test");
/// let ctx = RequestContext::new("gpt-4o-mini", Some(&key)).streaming();
/// assert!(ctx.stream);
///
/// let http = openai.chat_request(&ChatRequest::from_prompt("Hi"), &ctx)?;
/// assert_eq!(http.url.as_str(), "http://127.0.0.1:8080/v1/chat/completions");
/// assert!(http.headers["authorization"].is_sensitive());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct RequestContext<'a> {
    /// The model to ask for (the request's override or the provider's default).
    pub model: &'a str,
    /// The key to send, if the provider needs one.
    pub credential: Option<&'a Credential>,
    /// Ask for a streamed answer.
    pub stream: bool,
    /// The provider's extra body fields
    /// ([`ProviderSettings::extra_body`](crate::ProviderSettings::extra_body)). Adapters need
    /// not read them: they are merged, with the request's, into the JSON body an adapter
    /// builds, after it built it.
    pub extra_body: Option<&'a serde_json::Map<String, serde_json::Value>>,
}

impl<'a> RequestContext<'a> {
    /// A context for a non-streamed request.
    pub fn new(model: &'a str, credential: Option<&'a Credential>) -> Self {
        RequestContext {
            model,
            credential,
            stream: false,
            extra_body: None,
        }
    }

    /// The same context with the provider's extra body fields.
    pub fn with_extra_body(
        mut self,
        extra_body: &'a serde_json::Map<String, serde_json::Value>,
    ) -> Self {
        self.extra_body = Some(extra_body);
        self
    }

    /// The same context, streaming.
    pub fn streaming(mut self) -> Self {
        self.stream = true;
        self
    }
}

/// Turns the events of one streamed answer into chunks.
///
/// # Examples
///
/// A decoder for a stream whose events carry plain text and end with an `end` event:
///
/// ```
/// use llm_failover::{provider::{SseEvent, StreamDecoder}, ChatChunk};
///
/// #[derive(Debug, Default)]
/// struct PlainText { done: bool }
///
/// impl StreamDecoder for PlainText {
///     fn decode(&mut self, event: &SseEvent) -> llm_failover::Result<Option<ChatChunk>> {
///         self.done = event.event == "end";
///         Ok((!self.done).then(|| ChatChunk::text(event.data.as_str())))
///     }
///     fn is_done(&self) -> bool { self.done }
/// }
///
/// let mut decoder: Box<dyn StreamDecoder> = Box::new(PlainText::default());
/// let hi = SseEvent { data: "Hi".into(), ..SseEvent::default() };
/// assert_eq!(decoder.decode(&hi)?.map(|c| c.delta), Some("Hi".to_owned()));
/// decoder.decode(&SseEvent { event: "end".into(), ..SseEvent::default() })?;
/// assert!(decoder.is_done());
/// # Ok::<(), llm_failover::Error>(())
/// ```
pub trait StreamDecoder: Send + fmt::Debug {
    /// Decodes one server-sent event. Returns a chunk when the event carries content or
    /// metadata, `None` for keep-alives and bookkeeping events, and an error (classified like
    /// the matching HTTP status) when the provider reports one inside the stream.
    fn decode(&mut self, event: &SseEvent) -> Result<Option<ChatChunk>>;

    /// True once the provider has signalled the end of the answer (`[DONE]`,
    /// `message_stop`, a final finish reason). A stream that ends before this is an error.
    fn is_done(&self) -> bool;
}

/// A provider adapter: translation between neutral types and one wire format.
///
/// Object safe; the router holds `Arc<dyn Provider>`.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use llm_failover::provider::{openai::OpenAi, Provider, RequestContext};
/// use llm_failover::{Capability, ChatRequest, Client, ProviderId, ProviderSettings};
///
/// let local = OpenAi::new(ProviderId::new("local"), "http://127.0.0.1:11434/v1".parse()?);
/// let adapter: Arc<dyn Provider> = Arc::new(local.with_chat_model("llama3.2"));
/// assert!(adapter.capabilities().supports(Capability::Chat));
///
/// let model = adapter.default_model(Capability::Chat).unwrap();
/// let req = ChatRequest::from_prompt("Hi");
/// let http = adapter.chat_request(&req, &RequestContext::new(model, None))?;
/// assert_eq!(http.url.path(), "/v1/chat/completions");
///
/// let client = Client::builder().provider(adapter, ProviderSettings::new()).build()?;
/// assert_eq!(client.chat_providers(), [ProviderId::new("local")]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Provider: Send + Sync + fmt::Debug {
    /// The configured name.
    fn id(&self) -> &ProviderId;

    /// The wire format's name (`"openai"`, `"anthropic"`, …), as written in `providers.toml`.
    fn kind(&self) -> &'static str;

    /// What this provider offers.
    fn capabilities(&self) -> Capabilities;

    /// The model used when a request names none, per capability.
    fn default_model(&self, capability: Capability) -> Option<&str>;

    /// Builds the HTTP request for a chat completion (streamed when `ctx.stream`).
    ///
    /// # Errors
    ///
    /// When the request cannot be expressed in this format.
    fn chat_request(&self, req: &ChatRequest, ctx: &RequestContext<'_>) -> Result<HttpRequest>;

    /// Parses a successful (2xx) chat response. Errors reported inside a 200 become the
    /// matching [`Error`].
    ///
    /// # Errors
    ///
    /// `Decode` when the body is not what the format promises.
    fn chat_response(&self, raw: RawResponse, model: &str) -> Result<ChatResponse>;

    /// A decoder for one streamed answer.
    fn stream_decoder(&self, model: &str) -> Box<dyn StreamDecoder>;

    /// Builds the HTTP request for a transcription.
    ///
    /// # Errors
    ///
    /// `Unsupported` by default.
    fn transcription_request(
        &self,
        req: &TranscriptionRequest,
        ctx: &RequestContext<'_>,
    ) -> Result<HttpRequest> {
        let _ = (req, ctx);
        Err(Error::unsupported(self.id(), "transcription"))
    }

    /// Parses a successful (2xx) transcription response.
    ///
    /// # Errors
    ///
    /// `Unsupported` by default; `Decode` on a malformed body.
    fn transcription_response(&self, raw: RawResponse, model: &str) -> Result<Transcript> {
        let _ = (raw, model);
        Err(Error::unsupported(self.id(), "transcription"))
    }

    /// Classifies a non-2xx response: kind from status and body, the provider's message
    /// (truncated), its error code, and any delay stated in the body.
    fn error(&self, raw: &RawResponse, now: Now) -> Error;

    /// Reads the rate-limit state from a response's headers.
    fn limit_report(&self, headers: &HeaderMap, now: Now) -> LimitReport;

    /// Reads the rate-limit state from an error response: its headers and, for a format whose
    /// hosts put limits in the error body (OpenRouter's `error.metadata.headers`), its body.
    /// The headers alone by default.
    fn error_limit_report(&self, raw: &RawResponse, now: Now) -> LimitReport {
        self.limit_report(&raw.headers, now)
    }

    /// The provider's id for this request, from the response headers.
    fn request_id(&self, headers: &HeaderMap) -> Option<String> {
        default_request_id(headers)
    }
}

fn _obj_safe(_: &dyn Provider, _: &dyn StreamDecoder) {}

/// The request id under the header names providers use.
pub(crate) fn default_request_id(headers: &HeaderMap) -> Option<String> {
    use reqwest::header::HeaderName;
    // Names as constants: a lookup by `&str` would parse the name on every response.
    static NAMES: [HeaderName; 5] = [
        HeaderName::from_static("x-request-id"),
        HeaderName::from_static("request-id"),
        HeaderName::from_static("apim-request-id"),
        HeaderName::from_static("dg-request-id"),
        HeaderName::from_static("x-goog-request-id"),
    ];
    NAMES
        .iter()
        .find_map(|name| headers.get(name)?.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

/// Builds the adapter a provider's configuration names: the one `match` on provider kind.
///
/// # Errors
///
/// `Config` when the configuration lacks something the wire format needs (e.g. Azure's
/// `api_version`).
pub fn from_config(cfg: &crate::config::ProviderConfig) -> Result<Arc<dyn Provider>> {
    use crate::config::ProviderKind;
    Ok(match cfg.kind {
        ProviderKind::OpenAi => Arc::new(openai::OpenAi::from_config(cfg)?),
        ProviderKind::Azure => Arc::new(azure::Azure::from_config(cfg)?),
        ProviderKind::Anthropic => Arc::new(anthropic::Anthropic::from_config(cfg)?),
        ProviderKind::Gemini => Arc::new(gemini::Gemini::from_config(cfg)?),
        ProviderKind::Deepgram => Arc::new(deepgram::Deepgram::from_config(cfg)?),
    })
}
