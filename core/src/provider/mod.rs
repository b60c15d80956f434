//! Provider adapters: one per wire format, translation only.
//!
//! An adapter turns a neutral [`ChatRequest`], [`TranscriptionRequest`] or
//! [`EmbeddingRequest`] into an
//! [`HttpRequest`] in its provider's format, a [`RawResponse`] back into a neutral result or a
//! classified [`Error`], and the response headers into a [`LimitReport`]. It never sends
//! anything, sleeps or retries: [`crate::http`] does the I/O and the router decides.
//!
//! # Examples
//!
//! One exchange with the Anthropic adapter, the response written by hand: nothing is sent.
//!
//! ```
//! use reqwest::header::HeaderMap;
//! use llm_failover::clock::{Clock, TokioClock};
//! use llm_failover::http::RawResponse;
//! use llm_failover::provider::{anthropic::Anthropic, Provider, RequestContext};
//! use llm_failover::{ChatRequest, ErrorKind, FinishReason, ProviderId};
//!
//! let claude = Anthropic::new(ProviderId::new("claude"), "http://127.0.0.1:8081".parse()?);
//! let ctx = RequestContext::new("claude-sonnet-4-5", None);
//! let http = claude.chat_request(&ChatRequest::new().system("Be brief.").user("Hi"), &ctx)?;
//! assert_eq!(http.url.path(), "/v1/messages");
//!
//! let ok = RawResponse::new(200, HeaderMap::new(), r#"{"type":"message","role":"assistant",
//!     "content":[{"type":"text","text":"Hello!"}],"stop_reason":"end_turn",
//!     "usage":{"input_tokens":9,"output_tokens":3}}"#);
//! let answer = claude.chat_response(ok, ctx.model)?;
//! assert_eq!(answer.text, "Hello!");
//! assert_eq!(answer.finish_reason, Some(FinishReason::Stop));
//! assert_eq!(answer.usage.map(|u| u.total()), Some(12));
//!
//! let busy = RawResponse::new(529, HeaderMap::new(),
//!     r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#);
//! let err = claude.error(&busy, TokioClock.both());
//! assert_eq!(err.kind(), ErrorKind::Overloaded);
//! assert!(err.is_retryable()); // the router would try the next provider
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod anthropic;
pub mod azure;
pub(crate) mod body;
pub mod bulk;
pub mod deepgram;
mod exchange;
mod extra;
pub mod gemini;
pub mod openai;
mod sse;
pub(crate) mod tools;

pub(crate) use exchange::{BulkAnswer, bulk_once, no_bulk};
#[cfg_attr(feature = "test-util", visibility::make(pub))]
#[cfg_attr(not(feature = "test-util"), allow(unused_imports))]
pub(crate) use exchange::{ChunkStream, Exchange};
#[cfg_attr(feature = "test-util", visibility::make(pub))]
#[cfg_attr(not(feature = "test-util"), allow(unused_imports))]
pub(crate) use exchange::{chat_once, chat_stream_once, embed_once, transcribe_once};
pub(crate) use extra::apply as apply_extra;
pub(crate) use extra::check as check_extra_body;
#[cfg_attr(feature = "test-util", visibility::make(pub))]
#[cfg_attr(not(feature = "test-util"), allow(unused_imports))]
pub(crate) use sse::SseParser;
pub use sse::{JsonLines, SseEvent};

use std::fmt;
use std::sync::Arc;

use reqwest::header::HeaderMap;

use crate::id::{Capabilities, Capability, Credential, ProviderId};

use crate::clock::Now;
use crate::error::{Error, Result};
use crate::http::{HttpRequest, RawResponse};
use crate::ratelimit::LimitReport;
use crate::types::{
    ChatChunk, ChatRequest, ChatResponse, EmbeddingRequest, EmbeddingResponse, Transcript,
    TranscriptionRequest,
};

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
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::provider::RequestContext;
    /// use llm_failover::Credential;
    ///
    /// let key = Credential::new("sk-test");
    /// let ctx = RequestContext::new("gpt-4o-mini", Some(&key));
    /// assert_eq!(ctx.model, "gpt-4o-mini");
    /// assert_eq!(ctx.credential.map(Credential::expose), Some("sk-test"));
    /// assert!(!ctx.stream && ctx.extra_body.is_none());
    ///
    /// let keyless = RequestContext::new("llama3.2", None); // Ollama, vLLM
    /// assert!(keyless.credential.is_none());
    /// ```
    pub fn new(model: &'a str, credential: Option<&'a Credential>) -> Self {
        RequestContext {
            model,
            credential,
            stream: false,
            extra_body: None,
        }
    }

    /// The same context with the provider's extra body fields.
    ///
    /// # Examples
    ///
    /// ```
    /// use serde_json::json;
    /// use llm_failover::provider::{openai::OpenAi, Provider, RequestContext};
    /// use llm_failover::{ChatRequest, ProviderId};
    ///
    /// let extra = json!({ "seed": 7 }).as_object().unwrap().clone();
    /// let ctx = RequestContext::new("gpt-4o-mini", None).with_extra_body(&extra);
    /// assert_eq!(ctx.extra_body.map(|m| m["seed"].clone()), Some(json!(7)));
    ///
    /// // An adapter builds its body without them; the client merges them in afterwards.
    /// let openai = OpenAi::new(ProviderId::new("openai"), "http://127.0.0.1:8080/v1".parse()?);
    /// let http = openai.chat_request(&ChatRequest::from_prompt("Hi"), &ctx)?;
    /// let body: serde_json::Value = serde_json::from_slice(http.json_body().unwrap())?;
    /// assert_eq!(body["model"], "gpt-4o-mini");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_extra_body(
        mut self,
        extra_body: &'a serde_json::Map<String, serde_json::Value>,
    ) -> Self {
        self.extra_body = Some(extra_body);
        self
    }

    /// The same context, streaming.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::provider::{openai::OpenAi, Provider, RequestContext};
    /// use llm_failover::{ChatRequest, ProviderId};
    ///
    /// let ctx = RequestContext::new("gpt-4o-mini", None).streaming();
    /// assert!(ctx.stream);
    ///
    /// let openai = OpenAi::new(ProviderId::new("openai"), "http://127.0.0.1:8080/v1".parse()?);
    /// let http = openai.chat_request(&ChatRequest::from_prompt("Hi"), &ctx)?;
    /// let body: serde_json::Value = serde_json::from_slice(http.json_body().unwrap())?;
    /// assert_eq!(body["stream"], true);
    /// assert_eq!(body["stream_options"]["include_usage"], true); // usage in the last chunk
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
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
    ///
    /// # Examples
    ///
    /// With the OpenAI adapter's decoder:
    ///
    /// ```
    /// use llm_failover::provider::{openai::OpenAi, Provider, SseEvent};
    /// use llm_failover::{FinishReason, ProviderId};
    ///
    /// let openai = OpenAi::new(ProviderId::new("openai"), "http://127.0.0.1:8080/v1".parse()?);
    /// let mut decoder = openai.stream_decoder("gpt-4o-mini");
    /// let data = |s: &str| SseEvent { data: s.to_owned(), ..SseEvent::default() };
    ///
    /// let chunk = decoder.decode(&data(r#"{"choices":[{"index":0,"delta":{"content":"Hi"}}]}"#))?;
    /// assert_eq!(chunk.map(|c| c.delta), Some("Hi".to_owned()));
    /// let last = decoder
    ///     .decode(&data(r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#))?
    ///     .unwrap();
    /// assert_eq!(last.finish_reason, Some(FinishReason::Stop));
    ///
    /// // An error inside a stream that began with 200 OK:
    /// let err = decoder
    ///     .decode(&data(r#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#))
    ///     .unwrap_err();
    /// assert!(err.is_rate_limited());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn decode(&mut self, event: &SseEvent) -> Result<Option<ChatChunk>>;

    /// True once the provider has signalled the end of the answer (`[DONE]`,
    /// `message_stop`, a final finish reason). A stream that ends before this is an error.
    ///
    /// # Examples
    ///
    /// With the Anthropic adapter's decoder:
    ///
    /// ```
    /// use llm_failover::provider::{anthropic::Anthropic, Provider, SseEvent};
    /// use llm_failover::ProviderId;
    ///
    /// let claude = Anthropic::new(ProviderId::new("claude"), "http://127.0.0.1:8081".parse()?);
    /// let mut decoder = claude.stream_decoder("claude-sonnet-4-5");
    /// let event = |name: &str, data: &str| SseEvent {
    ///     event: name.to_owned(),
    ///     data: data.to_owned(),
    ///     ..SseEvent::default()
    /// };
    ///
    /// decoder.decode(&event(
    ///     "content_block_delta",
    ///     r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
    /// ))?;
    /// assert!(!decoder.is_done()); // a stream cut off here is an error
    /// decoder.decode(&event("message_stop", r#"{"type":"message_stop"}"#))?;
    /// assert!(decoder.is_done());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
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
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::provider::{openai::OpenAi, Provider};
    /// use llm_failover::ProviderId;
    ///
    /// let groq = OpenAi::new(ProviderId::new("groq"), "http://127.0.0.1:8080/openai/v1".parse()?);
    /// assert_eq!(groq.id(), &ProviderId::new("groq"));
    /// assert_eq!(groq.id().as_str(), "groq"); // the name errors and stats use
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn id(&self) -> &ProviderId;

    /// The wire format's name (`"openai"`, `"anthropic"`, …), as written in `providers.toml`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use llm_failover::provider::{anthropic::Anthropic, azure::Azure, openai::OpenAi, Provider};
    /// use llm_failover::ProviderId;
    ///
    /// let url: url::Url = "http://127.0.0.1:8080".parse()?;
    /// let adapters: [Arc<dyn Provider>; 3] = [
    ///     Arc::new(OpenAi::new(ProviderId::new("together"), url.clone())),
    ///     Arc::new(Azure::new(ProviderId::new("azure"), url.clone(), "2024-10-21")),
    ///     Arc::new(Anthropic::new(ProviderId::new("claude"), url)),
    /// ];
    /// let kinds: Vec<&str> = adapters.iter().map(|p| p.kind()).collect();
    /// assert_eq!(kinds, ["openai", "azure", "anthropic"]);
    /// assert_eq!(
    ///     llm_failover::config::ProviderKind::from_name(adapters[2].kind()),
    ///     Some(llm_failover::config::ProviderKind::Anthropic),
    /// );
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn kind(&self) -> &'static str;

    /// Where this provider is reached, if it says: its host and port become the
    /// `server.address` and `server.port` of the metrics
    /// ([`observe::otel`](crate::observe)). `None` by default.
    fn base_url(&self) -> Option<&url::Url> {
        None
    }

    /// What this provider offers.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::provider::{deepgram::Deepgram, openai::OpenAi, Provider};
    /// use llm_failover::{Capability, ProviderId};
    ///
    /// let openai = OpenAi::new(ProviderId::new("openai"), "http://127.0.0.1:8080/v1".parse()?);
    /// assert!(openai.capabilities().supports(Capability::Chat));
    /// assert!(openai.capabilities().supports(Capability::Transcription));
    ///
    /// let deepgram = Deepgram::new(ProviderId::new("deepgram"), "http://127.0.0.1:8083".parse()?);
    /// assert!(!deepgram.capabilities().supports(Capability::Chat)); // speech to text only
    /// assert!(deepgram.capabilities().transcription);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn capabilities(&self) -> Capabilities;

    /// The model used when a request names none, per capability.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::provider::{openai::OpenAi, Provider};
    /// use llm_failover::{Capability, ProviderId};
    ///
    /// let local = OpenAi::new(ProviderId::new("local"), "http://127.0.0.1:8000/v1".parse()?)
    ///     .with_chat_model("qwen2.5")
    ///     .with_transcription_model("whisper-large-v3");
    /// assert_eq!(local.default_model(Capability::Chat), Some("qwen2.5"));
    /// assert_eq!(local.default_model(Capability::Transcription), Some("whisper-large-v3"));
    ///
    /// let bare = OpenAi::new(ProviderId::new("bare"), "http://127.0.0.1:8000/v1".parse()?);
    /// assert_eq!(bare.default_model(Capability::Chat), None); // requests must name one
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn default_model(&self, capability: Capability) -> Option<&str>;

    /// Builds the HTTP request for a chat completion (streamed when `ctx.stream`).
    ///
    /// # Errors
    ///
    /// When the request cannot be expressed in this format.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::provider::{gemini::Gemini, Provider, RequestContext};
    /// use llm_failover::{ChatRequest, ProviderId};
    ///
    /// let gemini = Gemini::new(ProviderId::new("gemini"), "http://127.0.0.1:8082/v1beta".parse()?);
    /// let req = ChatRequest::new().system("Be brief.").user("Hi").max_tokens(64);
    /// let http = gemini.chat_request(&req, &RequestContext::new("gemini-2.5-flash", None))?;
    /// assert_eq!(http.url.path(), "/v1beta/models/gemini-2.5-flash:generateContent");
    /// let body: serde_json::Value = serde_json::from_slice(http.json_body().unwrap())?;
    /// assert_eq!(body["systemInstruction"]["parts"][0]["text"], "Be brief.");
    /// assert_eq!(body["contents"][0]["role"], "user");
    /// assert_eq!(body["generationConfig"]["maxOutputTokens"], 64);
    ///
    /// // A request the format cannot express is refused before anything is sent.
    /// let none = gemini.chat_request(&req, &RequestContext::new("", None)).unwrap_err();
    /// assert_eq!(none.kind(), llm_failover::ErrorKind::InvalidRequest);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn chat_request(&self, req: &ChatRequest, ctx: &RequestContext<'_>) -> Result<HttpRequest>;

    /// Whether this format can carry everything `req` holds — its images, tools, tool calls
    /// and results — checked before anything is sent. An adapter never drops what it cannot
    /// carry: it refuses here, and the router skips this provider for the request (and
    /// fails over to one that can). The default accepts everything.
    ///
    /// # Errors
    ///
    /// `Unsupported`, naming the part this format cannot carry.
    fn check_chat(&self, req: &ChatRequest) -> Result<()> {
        let _ = req;
        Ok(())
    }

    /// Parses a successful (2xx) chat response. Errors reported inside a 200 become the
    /// matching [`Error`].
    ///
    /// # Errors
    ///
    /// `Decode` when the body is not what the format promises.
    ///
    /// # Examples
    ///
    /// ```
    /// use reqwest::header::{HeaderMap, HeaderValue};
    /// use llm_failover::http::RawResponse;
    /// use llm_failover::provider::{openai::OpenAi, Provider};
    /// use llm_failover::{FinishReason, ProviderId};
    ///
    /// let openai = OpenAi::new(ProviderId::new("openai"), "http://127.0.0.1:8080/v1".parse()?);
    /// let mut headers = HeaderMap::new();
    /// headers.insert("x-request-id", HeaderValue::from_static("req_123"));
    /// let raw = RawResponse::new(200, headers, r#"{"choices":[{"index":0,
    ///     "message":{"role":"assistant","content":"Bonjour"},"finish_reason":"length"}],
    ///     "usage":{"prompt_tokens":12,"completion_tokens":1}}"#);
    /// let answer = openai.chat_response(raw, "gpt-4o-mini")?;
    /// assert_eq!(answer.text, "Bonjour");
    /// assert_eq!(answer.finish_reason, Some(FinishReason::Length));
    /// assert_eq!(answer.usage.map(|u| (u.input_tokens, u.output_tokens)), Some((12, 1)));
    /// assert_eq!(answer.request_id.as_deref(), Some("req_123"));
    ///
    /// let html = RawResponse::new(200, HeaderMap::new(), "<html>captive portal</html>");
    /// assert!(openai.chat_response(html, "gpt-4o-mini").unwrap_err().is_decode());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn chat_response(&self, raw: RawResponse, model: &str) -> Result<ChatResponse>;

    /// A decoder for one streamed answer.
    ///
    /// # Examples
    ///
    /// Feeding it the events of a Gemini stream:
    ///
    /// ```
    /// use llm_failover::provider::{gemini::Gemini, Provider, SseEvent};
    /// use llm_failover::ProviderId;
    ///
    /// let gemini = Gemini::new(ProviderId::new("gemini"), "http://127.0.0.1:8082/v1beta".parse()?);
    /// let mut decoder = gemini.stream_decoder("gemini-2.5-flash");
    /// let mut text = String::new();
    /// for data in [
    ///     r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"Hel"}]}}]}"#,
    ///     r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"lo"}]},"finishReason":"STOP"}]}"#,
    /// ] {
    ///     let event = SseEvent { data: data.to_owned(), ..SseEvent::default() };
    ///     if let Some(chunk) = decoder.decode(&event)? {
    ///         text.push_str(&chunk.delta);
    ///     }
    /// }
    /// assert_eq!(text, "Hello");
    /// assert!(decoder.is_done());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn stream_decoder(&self, model: &str) -> Box<dyn StreamDecoder>;

    /// Builds the HTTP request for a transcription.
    ///
    /// # Errors
    ///
    /// `Unsupported` by default.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::provider::{anthropic::Anthropic, openai::OpenAi, Provider, RequestContext};
    /// use llm_failover::{AudioInput, ErrorKind, ProviderId, TranscriptionRequest};
    ///
    /// let audio = AudioInput::from_bytes(vec![0u8; 64], "memo.mp3")?;
    /// let req = TranscriptionRequest::new(audio).language("en");
    /// let ctx = RequestContext::new("whisper-1", None);
    ///
    /// let openai = OpenAi::new(ProviderId::new("openai"), "http://127.0.0.1:8080/v1".parse()?);
    /// let http = openai.transcription_request(&req, &ctx)?;
    /// assert_eq!(http.url.path(), "/v1/audio/transcriptions");
    ///
    /// // An adapter without speech to text keeps the default:
    /// let claude = Anthropic::new(ProviderId::new("claude"), "http://127.0.0.1:8081".parse()?);
    /// let err = claude.transcription_request(&req, &ctx).unwrap_err();
    /// assert_eq!(err.kind(), ErrorKind::Unsupported);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
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
    ///
    /// # Examples
    ///
    /// ```
    /// use reqwest::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
    /// use llm_failover::http::RawResponse;
    /// use llm_failover::provider::{openai::OpenAi, Provider};
    /// use llm_failover::ProviderId;
    ///
    /// let openai = OpenAi::new(ProviderId::new("openai"), "http://127.0.0.1:8080/v1".parse()?);
    /// let mut headers = HeaderMap::new();
    /// headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    /// let raw = RawResponse::new(200, headers.clone(), r#"{"text":"Hello there."}"#);
    /// let transcript = openai.transcription_response(raw, "whisper-1")?;
    /// assert_eq!(transcript.text, "Hello there.");
    /// assert_eq!(transcript.model, "whisper-1");
    ///
    /// let truncated = RawResponse::new(200, headers, r#"{"text":"Hel"#);
    /// assert!(openai.transcription_response(truncated, "whisper-1").unwrap_err().is_decode());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn transcription_response(&self, raw: RawResponse, model: &str) -> Result<Transcript> {
        let _ = (raw, model);
        Err(Error::unsupported(self.id(), "transcription"))
    }

    /// Whether this provider can embed `req` — its number of inputs, its options — checked
    /// before anything is sent; when it cannot, the router skips it for the request and fails
    /// over to one that can. By default: `Unsupported` unless the
    /// [`capabilities`](Self::capabilities) include embeddings.
    ///
    /// # Errors
    ///
    /// `Unsupported`, naming what this provider cannot take.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::provider::{anthropic::Anthropic, gemini::Gemini, Provider};
    /// use llm_failover::{EmbeddingRequest, ErrorKind, ProviderId};
    ///
    /// let gemini = Gemini::new(ProviderId::new("gemini"), "http://127.0.0.1:8082/v1beta".parse()?);
    /// assert!(gemini.check_embedding(&EmbeddingRequest::many(["a", "b"])).is_ok());
    /// // batchEmbedContents takes at most 100 texts:
    /// let many = EmbeddingRequest::many((0..101).map(|i| format!("text {i}")));
    /// assert_eq!(gemini.check_embedding(&many).unwrap_err().kind(), ErrorKind::Unsupported);
    ///
    /// let claude = Anthropic::new(ProviderId::new("claude"), "http://127.0.0.1:8081".parse()?);
    /// let err = claude.check_embedding(&EmbeddingRequest::new("a")).unwrap_err();
    /// assert_eq!(err.kind(), ErrorKind::Unsupported); // no embeddings at all
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn check_embedding(&self, req: &EmbeddingRequest) -> Result<()> {
        let _ = req;
        if self.capabilities().embedding {
            Ok(())
        } else {
            Err(Error::unsupported(self.id(), "embeddings"))
        }
    }

    /// Builds the HTTP request for the embedding vectors of `req`'s inputs.
    ///
    /// # Errors
    ///
    /// `Unsupported` by default (a provider without embeddings); `InvalidRequest` for a
    /// request without inputs or with an empty one.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::provider::{anthropic::Anthropic, openai::OpenAi, Provider, RequestContext};
    /// use llm_failover::{EmbeddingRequest, ErrorKind, ProviderId};
    ///
    /// let req = EmbeddingRequest::many(["first", "second"]).dimensions(256);
    /// let ctx = RequestContext::new("text-embedding-3-small", None);
    /// let openai = OpenAi::new(ProviderId::new("openai"), "http://127.0.0.1:8080/v1".parse()?);
    /// let http = openai.embedding_request(&req, &ctx)?;
    /// assert_eq!(http.url.path(), "/v1/embeddings");
    /// let body: serde_json::Value = serde_json::from_slice(http.json_body().unwrap())?;
    /// assert_eq!(body["input"], serde_json::json!(["first", "second"]));
    /// assert_eq!(body["dimensions"], 256);
    ///
    /// // An adapter without embeddings keeps the default:
    /// let claude = Anthropic::new(ProviderId::new("claude"), "http://127.0.0.1:8081".parse()?);
    /// let err = claude.embedding_request(&req, &ctx).unwrap_err();
    /// assert_eq!(err.kind(), ErrorKind::Unsupported);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn embedding_request(
        &self,
        req: &EmbeddingRequest,
        ctx: &RequestContext<'_>,
    ) -> Result<HttpRequest> {
        let _ = (req, ctx);
        Err(Error::unsupported(self.id(), "embeddings"))
    }

    /// Parses a successful (2xx) embedding response: the vectors in the order the request
    /// gave its inputs (the router then checks there is one per input).
    ///
    /// # Errors
    ///
    /// `Unsupported` by default; `Decode` on a malformed body.
    ///
    /// # Examples
    ///
    /// ```
    /// use reqwest::header::HeaderMap;
    /// use llm_failover::http::RawResponse;
    /// use llm_failover::provider::{openai::OpenAi, Provider};
    /// use llm_failover::ProviderId;
    ///
    /// let openai = OpenAi::new(ProviderId::new("openai"), "http://127.0.0.1:8080/v1".parse()?);
    /// // `data` in any order: each item's `index` says whose vector it is.
    /// let raw = RawResponse::new(200, HeaderMap::new(), r#"{"object":"list","data":[
    ///     {"object":"embedding","index":1,"embedding":[0.0,1.0]},
    ///     {"object":"embedding","index":0,"embedding":[1.0,0.0]}],
    ///     "model":"text-embedding-3-small","usage":{"prompt_tokens":4,"total_tokens":4}}"#);
    /// let answer = openai.embedding_response(raw, "text-embedding-3-small")?;
    /// assert_eq!(answer.vectors, [vec![1.0, 0.0], vec![0.0, 1.0]]);
    /// assert_eq!(answer.usage.map(|u| u.input_tokens), Some(4));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn embedding_response(&self, raw: RawResponse, model: &str) -> Result<EmbeddingResponse> {
        let _ = (raw, model);
        Err(Error::unsupported(self.id(), "embeddings"))
    }

    /// Classifies a non-2xx response: kind from status and body, the provider's message
    /// (truncated), its error code, and any delay stated in the body.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use reqwest::header::{HeaderMap, HeaderValue};
    /// use llm_failover::clock::{Clock, TokioClock};
    /// use llm_failover::http::RawResponse;
    /// use llm_failover::provider::{openai::OpenAi, Provider};
    /// use llm_failover::{ErrorKind, ProviderId};
    ///
    /// let openai = OpenAi::new(ProviderId::new("openai"), "http://127.0.0.1:8080/v1".parse()?);
    /// let now = TokioClock.both();
    ///
    /// let mut headers = HeaderMap::new();
    /// headers.insert("retry-after", HeaderValue::from_static("7"));
    /// let throttled = RawResponse::new(429, headers, r#"{"error":{"message":"Rate limit reached",
    ///     "type":"requests","code":"rate_limit_exceeded"}}"#);
    /// let err = openai.error(&throttled, now);
    /// assert!(err.is_rate_limited());
    /// assert_eq!(err.retry_after(), Some(Duration::from_secs(7)));
    /// assert_eq!(err.code(), Some("rate_limit_exceeded"));
    /// assert_eq!(err.provider().map(|p| p.as_str()), Some("openai"));
    ///
    /// // The same status, but no credit left: waiting will not help.
    /// let broke = RawResponse::new(429, HeaderMap::new(), r#"{"error":{
    ///     "message":"You exceeded your current quota","type":"insufficient_quota"}}"#);
    /// assert_eq!(openai.error(&broke, now).kind(), ErrorKind::QuotaExhausted);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn error(&self, raw: &RawResponse, now: Now) -> Error;

    /// Reads the rate-limit state from a response's headers.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use reqwest::header::{HeaderMap, HeaderValue};
    /// use llm_failover::clock::Now;
    /// use llm_failover::provider::{anthropic::Anthropic, Provider};
    /// use llm_failover::ProviderId;
    ///
    /// let claude = Anthropic::new(ProviderId::new("claude"), "http://127.0.0.1:8081".parse()?);
    /// let now = Now {
    ///     instant: tokio::time::Instant::now(),
    ///     wall: SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600), // 2026-01-01
    /// };
    /// let mut headers = HeaderMap::new();
    /// for (name, value) in [
    ///     ("anthropic-ratelimit-requests-limit", "50"),
    ///     ("anthropic-ratelimit-requests-remaining", "0"),
    ///     ("anthropic-ratelimit-requests-reset", "2026-01-01T00:00:20Z"),
    /// ] {
    ///     headers.insert(name, HeaderValue::from_static(value));
    /// }
    /// let report = claude.limit_report(&headers, now);
    /// let requests = report.requests.unwrap();
    /// assert_eq!((requests.limit, requests.remaining), (Some(50), Some(0)));
    /// assert_eq!(report.exhausted_until(), Some(now.instant + Duration::from_secs(20)));
    /// assert!(claude.limit_report(&HeaderMap::new(), now).is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn limit_report(&self, headers: &HeaderMap, now: Now) -> LimitReport;

    /// Reads the rate-limit state from an error response: its headers and, for a format whose
    /// hosts put limits in the error body (OpenRouter's `error.metadata.headers`), its body.
    /// The headers alone by default.
    ///
    /// # Examples
    ///
    /// OpenRouter (the OpenAI adapter) forwards an upstream's `Retry-After` inside the body;
    /// an adapter keeping the default reads headers only:
    ///
    /// ```
    /// use std::time::Duration;
    /// use reqwest::header::HeaderMap;
    /// use llm_failover::clock::{Clock, TokioClock};
    /// use llm_failover::http::RawResponse;
    /// use llm_failover::provider::{gemini::Gemini, openai::OpenAi, Provider};
    /// use llm_failover::ProviderId;
    ///
    /// let raw = RawResponse::new(429, HeaderMap::new(), r#"{"error":{"message":"Rate limited",
    ///     "code":429,"metadata":{"headers":{"Retry-After":"17"}}}}"#);
    /// let now = TokioClock.both();
    ///
    /// let router = OpenAi::new(ProviderId::new("openrouter"), "http://127.0.0.1:8080/api/v1".parse()?);
    /// let report = router.error_limit_report(&raw, now);
    /// assert_eq!(report.retry_after, Some(Duration::from_secs(17)));
    ///
    /// let gemini = Gemini::new(ProviderId::new("gemini"), "http://127.0.0.1:8082/v1beta".parse()?);
    /// assert!(gemini.error_limit_report(&raw, now).is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn error_limit_report(&self, raw: &RawResponse, now: Now) -> LimitReport {
        self.limit_report(&raw.headers, now)
    }

    /// The provider's id for this request, from the response headers.
    ///
    /// # Examples
    ///
    /// ```
    /// use reqwest::header::{HeaderMap, HeaderValue};
    /// use llm_failover::provider::{anthropic::Anthropic, openai::OpenAi, Provider};
    /// use llm_failover::ProviderId;
    ///
    /// let openai = OpenAi::new(ProviderId::new("openai"), "http://127.0.0.1:8080/v1".parse()?);
    /// let claude = Anthropic::new(ProviderId::new("claude"), "http://127.0.0.1:8081".parse()?);
    ///
    /// let mut headers = HeaderMap::new();
    /// headers.insert("x-request-id", HeaderValue::from_static("req_abc"));
    /// assert_eq!(openai.request_id(&headers).as_deref(), Some("req_abc"));
    ///
    /// // Anthropic's own header comes first.
    /// headers.insert("request-id", HeaderValue::from_static("req_011CV"));
    /// assert_eq!(claude.request_id(&headers).as_deref(), Some("req_011CV"));
    /// assert_eq!(openai.request_id(&HeaderMap::new()), None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn request_id(&self, headers: &HeaderMap) -> Option<String> {
        default_request_id(headers)
    }

    /// The last step before a request is sent, once its body is complete (the caller's extra
    /// body merged): where a provider that signs its requests (AWS's SigV4 over the body)
    /// signs, or one whose token is fetched separately sets it. `now` is the client's clock
    /// (a signature's date). As built by default.
    ///
    /// # Errors
    ///
    /// When the request cannot be finished (a credential that cannot sign it): nothing is
    /// sent.
    ///
    /// # Examples
    ///
    /// An adapter adding a header over the finished body (a checksum a signature would cover):
    ///
    /// ```
    /// # use llm_failover::clock::{Clock, Now, TokioClock};
    /// # use llm_failover::http::{Body, HttpRequest};
    /// # use llm_failover::provider::{openai::OpenAi, Provider, RequestContext};
    /// # use llm_failover::ProviderId;
    /// let openai = OpenAi::new(ProviderId::new("openai"), "http://127.0.0.1:8080/v1".parse()?);
    /// let req = HttpRequest::new(reqwest::Method::POST, "http://127.0.0.1:8080/v1/x".parse()?);
    /// let ctx = RequestContext::new("gpt-4o-mini", None);
    /// // The OpenAI adapter keeps the default: the request as built.
    /// let finished = openai.finish(req, &ctx, TokioClock.both())?;
    /// assert!(finished.headers.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn finish(&self, req: HttpRequest, ctx: &RequestContext<'_>, now: Now) -> Result<HttpRequest> {
        let _ = (ctx, now);
        Ok(req)
    }

    /// How a streamed answer's bytes are cut into events for the
    /// [`stream_decoder`](Self::stream_decoder): server-sent events by default; an adapter
    /// whose provider frames its stream otherwise (AWS's event-stream, JSON lines) returns
    /// its own [`FrameParser`], each frame as one [`SseEvent`] (its type in `event`, its
    /// payload in `data`).
    ///
    /// # Examples
    ///
    /// ```
    /// # use llm_failover::provider::{openai::OpenAi, Provider};
    /// # use llm_failover::ProviderId;
    /// let openai = OpenAi::new(ProviderId::new("openai"), "http://127.0.0.1:8080/v1".parse()?);
    /// let mut frames = openai.frames();
    /// let events = frames.feed(b"data: {\"a\":1}\n\n")?;
    /// assert_eq!(events[0].data, r#"{"a":1}"#);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn frames(&self) -> Box<dyn FrameParser> {
        Box::new(SseParser::new())
    }

    /// The credential a request is sent with, when the provider must fetch it first from
    /// the configured one (an OAuth 2 access token for a service account's key): the router
    /// awaits it before each attempt, and the adapter's builders then see it as
    /// `ctx.credential` (the configured credential still names where the key came from in
    /// an `Auth` error). `None` by default: the configured credential as it is.
    ///
    /// A provider that fetches keeps what it fetched (refreshing it before it expires, one
    /// fetch at a time) and sends its own requests through [`Authorizing::send`], the
    /// client's transport.
    ///
    /// # Errors
    ///
    /// The future's error ends the attempt before anything is sent to the provider:
    /// `Auth` (terminal) for a refused key, a retryable kind for a token endpoint that is
    /// down, `Config` for a credential of the wrong shape.
    fn authorize<'a>(&'a self, auth: Authorizing<'a>) -> Option<Authorized<'a>> {
        let _ = auth;
        None
    }

    /// Whether `credential` (the provider's configured one, `None` without a key) is of the
    /// shape this provider needs, checked when the client is built: a service-account key
    /// file that is no such JSON fails there, not at the first request. Every shape by
    /// default.
    ///
    /// # Errors
    ///
    /// `Config`, naming where the credential came from and what is wrong (never the key).
    fn check_credential(&self, credential: Option<&Credential>) -> Result<()> {
        let _ = credential;
        Ok(())
    }

    /// The provider's Batch API, for the bulk lane ([`bulk`]): `None` (the default) when it
    /// has none, and its items go live.
    fn bulk(&self) -> Option<&dyn bulk::BulkApi> {
        None
    }
}

/// The credential [`Provider::authorize`] fetched, once awaited.
pub type Authorized<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Credential>> + Send + 'a>>;

/// What [`Provider::authorize`] is given: the configured credential, the client's clock, and
/// the client's transport for a request of its own (a token endpoint's).
#[derive(Clone, Copy)]
pub struct Authorizing<'a> {
    /// The request's credential: its own, else the provider's configured one.
    pub credential: Option<&'a Credential>,
    /// The client's clock, before the attempt.
    pub now: Now,
    transport: &'a dyn crate::http::Transport,
    timeout: std::time::Duration,
}

impl<'a> Authorizing<'a> {
    #[cfg_attr(not(feature = "test-util"), allow(dead_code))]
    pub(crate) fn new(
        credential: Option<&'a Credential>,
        now: Now,
        transport: &'a dyn crate::http::Transport,
        timeout: std::time::Duration,
    ) -> Self {
        Authorizing {
            credential,
            now,
            transport,
            timeout,
        }
    }

    /// Sends `req` through the client's transport (its TLS, no redirects, the body capped),
    /// within the attempt's timeout, and reads the whole answer.
    ///
    /// # Errors
    ///
    /// As a provider request's: `Timeout`, `Connect`, `Decode` (a body over the cap).
    pub fn send(
        &self,
        req: HttpRequest,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<RawResponse>> + Send + 'static>>
    {
        self.transport.send(req, self.timeout)
    }
}

impl fmt::Debug for Authorizing<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Authorizing")
            .field("credential", &self.credential)
            .field("now", &self.now)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Cuts a streamed body into events, as bytes arrive in arbitrary pieces
/// ([`Provider::frames`]).
pub trait FrameParser: Send + fmt::Debug {
    /// Takes the next piece of the body; returns the events it completed.
    ///
    /// # Errors
    ///
    /// A `Decode` error for a frame that is malformed or too large (the stream ends there).
    fn feed(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>>;

    /// The body ended: the event a format lets end without its terminator (the last
    /// server-sent event without its blank line, a last JSON line without its newline).
    ///
    /// # Errors
    ///
    /// A `Decode` error for a frame cut off in the middle.
    fn end(&mut self) -> Result<Vec<SseEvent>>;
}

fn _obj_safe(_: &dyn Provider, _: &dyn StreamDecoder) {}

/// `base` with `segments` appended to its path (a trailing `/` of `base` dropped first).
///
/// # Errors
///
/// `Config` naming provider `id` when `base` cannot carry a path.
pub(crate) fn url_with_path<'s>(
    id: &ProviderId,
    base: &url::Url,
    segments: impl IntoIterator<Item = &'s str>,
) -> Result<url::Url> {
    let mut url = base.clone();
    url.path_segments_mut()
        .map_err(|()| {
            Error::config(format!(
                "provider `{id}`: base_url `{base}` cannot carry a path"
            ))
        })?
        .pop_if_empty()
        .extend(segments);
    Ok(url)
}

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
///
/// # Examples
///
/// ```
/// use llm_failover::config::{Config, ProviderConfig, ProviderKind};
/// use llm_failover::provider::from_config;
/// use llm_failover::Capability;
///
/// let config = Config::builder("dev")
///     .provider(
///         "local",
///         ProviderConfig::builder(ProviderKind::OpenAi, "http://127.0.0.1:11434/v1")
///             .model("llama3.2")
///             .no_key(),
///     )
///     .chat("dev", ["local"])
///     .build()?;
/// let adapter = from_config(config.provider("local")?)?;
/// assert_eq!(adapter.kind(), "openai");
/// assert_eq!(adapter.id().as_str(), "local");
/// assert_eq!(adapter.default_model(Capability::Chat), Some("llama3.2"));
/// # Ok::<(), llm_failover::Error>(())
/// ```
pub fn from_config(cfg: &crate::config::ProviderConfig) -> Result<Arc<dyn Provider>> {
    use crate::config::ProviderKind;
    // Each kind's factory: the other half of its registry row (`config::kind`, which the
    // configuration's checks read and the adapters may not: it is below them).
    Ok(match cfg.kind {
        ProviderKind::OpenAi => Arc::new(openai::OpenAi::from_config(cfg)?),
        ProviderKind::Azure => Arc::new(azure::Azure::from_config(cfg)?),
        ProviderKind::Anthropic => Arc::new(anthropic::Anthropic::from_config(cfg)?),
        ProviderKind::Gemini => Arc::new(gemini::Gemini::from_config(cfg)?),
        ProviderKind::Deepgram => Arc::new(deepgram::Deepgram::from_config(cfg)?),
        ProviderKind::Bedrock => wing_adapter(cfg, "bedrock", "llm-failover-bedrock")?,
        ProviderKind::Vertex => wing_adapter(cfg, "vertex", "llm-failover-vertex")?,
    })
}

/// A kind whose adapter a wing brings: the one the build links (`PROVIDER_WINGS`), else an
/// error naming the feature.
fn wing_adapter(
    cfg: &crate::config::ProviderConfig,
    feature: &str,
    wing: &str,
) -> Result<Arc<dyn Provider>> {
    match PROVIDER_WINGS.iter().find(|w| w.kind() == cfg.kind) {
        Some(w) => w.build(cfg),
        None => Err(Error::config(format!(
            "provider kind `{}` needs the `{feature}` feature of llm-failover (the {wing} \
             wing): this build does not link it",
            cfg.kind
        ))),
    }
}

/// The adapters of kinds a wing brings (Bedrock), in the builds that link the wing.
#[doc(hidden)]
#[linkme::distributed_slice]
pub static PROVIDER_WINGS: [&'static dyn ProviderWing];

/// A wing's adapter factory for one provider kind (`crate::wing::providers`).
#[doc(hidden)]
pub trait ProviderWing: Send + Sync {
    /// The kind it builds.
    fn kind(&self) -> crate::config::ProviderKind;
    /// Builds the adapter from a validated configuration.
    ///
    /// # Errors
    ///
    /// `Config` when the configuration cannot make one.
    fn build(&self, cfg: &crate::config::ProviderConfig) -> Result<Arc<dyn Provider>>;
}
