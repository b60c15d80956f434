//! Routing and the life of one request: provider by prefix, fault, authentication,
//! validation, limits, answer. Each wire format lives in its own file and only translates
//! (the [`Wire`] trait); this file holds the one flow they share. `/_admin/` paths go to
//! `admin.rs`, a Vertex provider's `/token` to `token.rs`.

mod admin;
mod anthropic;
mod anthropic_messages;
mod azure;
mod bedrock;
mod bedrock_converse;
mod bedrock_invoke;
mod body;
mod bulk;
mod bulk_anthropic;
mod bulk_dispatch;
mod bulk_gemini;
mod bulk_openai;
mod deepgram;
mod embed;
mod eventstream;
mod exchange;
mod gemini;
mod gemini_embed;
mod gemini_generate;
mod openai;
mod openai_answer;
mod openai_chat;
mod openai_embed;
mod token;
mod transcription;
mod vertex;
mod vertex_predict;

use std::time::{Duration, SystemTime};

use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use bytes::Bytes;
use serde_json::Value;

use crate::config::Kind;
use crate::headers::RetryHeader;
use crate::limits::LimitName;
use crate::state::ProviderState;
use crate::text::{PromptDigest, Transcript};
use crate::tools::{Answer, Asks};

pub(crate) use embed::{EmbedForm, EmbedInput, EmbedReq, EmbedText};
pub(crate) use exchange::{ConnHandle, Listener, handle};

/// What a path asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OpKind {
    Chat,
    Transcribe,
    /// A prompt's token count (Anthropic `POST /v1/messages/count_tokens`).
    CountTokens,
    /// Embedding vectors (OpenAI `/v1/embeddings`, Gemini `:embedContent`, …).
    Embed,
}

/// A recognised route.
#[derive(Clone, Debug)]
pub(crate) struct Route {
    pub(crate) op: OpKind,
    /// The model (deployment) when the path names it (Azure, Gemini).
    pub(crate) model: Option<String>,
    /// The path asks for a stream (Gemini `:streamGenerateContent`).
    pub(crate) stream: bool,
}

impl Route {
    pub(crate) fn new(op: OpKind) -> Self {
        Route {
            op,
            model: None,
            stream: false,
        }
    }
}

/// A chat request, provider-neutral.
#[derive(Clone, Debug)]
pub(crate) struct ChatReq {
    pub(crate) model: String,
    pub(crate) prompt: PromptDigest,
    pub(crate) max_tokens: Option<u64>,
    pub(crate) stream: bool,
    /// Server-sent events (false only for Gemini streams without `alt=sse`: a JSON array).
    pub(crate) sse: bool,
    /// OpenAI `stream_options.include_usage`.
    pub(crate) include_usage: bool,
    /// Tools, tool choice, response format and how the conversation ends.
    pub(crate) asks: Asks,
    /// What the request's images cost, as the provider counts them (roughly).
    pub(crate) image_tokens: u64,
    /// The provider's own state sent back with its turns: `[own, verified; placeholders]`
    /// (Gemini's thought signatures, Anthropic's signed thinking blocks).
    pub(crate) returned: [u32; 2],
    /// Anthropic's extended thinking asked for: the answer starts with a signed thinking
    /// block.
    pub(crate) thinking: bool,
}

impl ChatReq {
    /// Input tokens: the prompt's text (tools and schemas included) and its images.
    pub(crate) fn input_tokens(&self) -> u64 {
        self.prompt.tokens() + self.image_tokens
    }
}

/// Transcription response formats (OpenAI `response_format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SttFormat {
    Json,
    /// With the `timestamp_granularities[]` asked for: `words`, `segments` (the default).
    VerboseJson {
        words: bool,
        segments: bool,
    },
    Text,
    Srt,
    Vtt,
}

/// A transcription request, provider-neutral.
#[derive(Clone, Debug)]
pub(crate) struct SttReq {
    pub(crate) model: String,
    pub(crate) audio: Bytes,
    pub(crate) language: Option<String>,
    pub(crate) format: SttFormat,
    /// Deepgram `punctuate`/`smart_format` (always on for OpenAI).
    pub(crate) punctuate: bool,
}

/// A token-count request: the prompt of a chat request, answered with its estimate.
#[derive(Clone, Debug)]
pub(crate) struct CountReq {
    pub(crate) model: String,
    pub(crate) prompt: PromptDigest,
    /// What the request's images cost.
    pub(crate) image_tokens: u64,
}

/// A parsed request.
#[derive(Clone, Debug)]
pub(crate) enum Op {
    Chat(ChatReq),
    Stt(SttReq),
    Count(CountReq),
    Embed(EmbedReq),
}

impl Op {
    pub(crate) fn model(&self) -> &str {
        match self {
            Op::Chat(c) => &c.model,
            Op::Stt(s) => &s.model,
            Op::Count(c) => &c.model,
            Op::Embed(e) => &e.model,
        }
    }
}

/// A multipart form field.
#[derive(Clone, Debug)]
pub(crate) struct Field {
    pub(crate) name: String,
    pub(crate) file_name: Option<String>,
    pub(crate) data: Bytes,
}

impl Field {
    pub(crate) fn text(&self) -> Option<&str> {
        std::str::from_utf8(&self.data).ok()
    }
}

pub(crate) fn field<'a>(form: &'a [Field], name: &str) -> Option<&'a Field> {
    form.iter().find(|f| f.name == name)
}

/// Token counts of an answer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Usage {
    pub(crate) input: u64,
    pub(crate) output: u64,
    /// Of `input`, the tokens read from the prompt cache.
    pub(crate) cached: u64,
}

/// A refusal by a limit, real or injected.
#[derive(Clone, Debug)]
pub(crate) struct Limited {
    pub(crate) which: LimitName,
    pub(crate) limit: u64,
    pub(crate) used: u64,
    pub(crate) requested: u64,
    /// The delay the body states (`None`: the body states none).
    pub(crate) delay: Option<Duration>,
    /// What `Retry-After` says.
    pub(crate) header: RetryHeader,
    /// More than the limit's capacity: it can never pass.
    pub(crate) too_large: bool,
    pub(crate) model: String,
}

/// Every error a wire format renders in its own body.
#[derive(Clone, Debug)]
pub(crate) enum ApiError {
    /// No such route.
    NotFound,
    /// No credential.
    MissingKey,
    /// A credential that is not the key (the presented value, for masking).
    WrongKey(String),
    /// Invalid request.
    BadRequest {
        message: String,
        param: Option<&'static str>,
        code: Option<&'static str>,
    },
    /// The model (deployment) is not served.
    ModelNotFound(String),
    /// Body above the cap.
    PayloadTooLarge { limit: usize, got: Option<u64> },
    /// 429 from a limit.
    RateLimited(Box<Limited>),
    /// Out of credit.
    InsufficientQuota,
    /// An injected status.
    Status(u16),
    /// Overloaded.
    Overloaded,
    /// A provider-specific answer built by the wire module itself.
    Raw { status: u16, body: Value },
}

impl ApiError {
    pub(crate) fn bad(message: impl Into<String>) -> Self {
        ApiError::BadRequest {
            message: message.into(),
            param: None,
            code: None,
        }
    }

    pub(crate) fn bad_param(
        message: impl Into<String>,
        param: &'static str,
        code: Option<&'static str>,
    ) -> Self {
        ApiError::BadRequest {
            message: message.into(),
            param: Some(param),
            code,
        }
    }
}

/// The context of one answer.
#[derive(Debug)]
pub(crate) struct Cx<'a> {
    pub(crate) provider: &'a ProviderState,
    /// Method and path after the prefix, for "Invalid URL (POST /v1/x)" messages.
    pub(crate) method: &'a str,
    pub(crate) path: &'a str,
    pub(crate) started: tokio::time::Instant,
    pub(crate) request_id: String,
    pub(crate) wall: SystemTime,
    pub(crate) api_version: Option<String>,
    /// The latency added to this answer (Bedrock states it as `metrics.latencyMs`).
    pub(crate) latency: Duration,
}

impl Cx<'_> {
    /// Unix seconds now (`created`).
    pub(crate) fn created(&self) -> u64 {
        self.wall
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs()
    }
}

/// A streamed answer in three parts, so a fault can cut it after some content.
#[derive(Debug, Default)]
pub(crate) struct StreamParts {
    pub(crate) head: Vec<Bytes>,
    pub(crate) body: Vec<Bytes>,
    pub(crate) tail: Vec<Bytes>,
}

/// An error rendered: status, content type, body.
pub(crate) type Rendered = (StatusCode, &'static str, Bytes);

pub(crate) const JSON: &str = "application/json";

/// One wire format: recognises its routes, checks credentials as the provider does, parses
/// requests into neutral ones and renders answers and errors in its own bodies.
pub(crate) trait Wire: Sync + Send {
    /// The route a method + path (after the prefix) names.
    fn route(&self, method: &Method, path: &str, query: Option<&str>) -> Option<Route>;
    /// Credentials and required headers/parameters, in the provider's order.
    fn authorize(&self, parts: &Parts, key: &str) -> Result<(), ApiError>;
    /// What only the whole request shows, checked once the body is read: a signature over
    /// the body (Bedrock's SigV4). Only a wire format that signs requests overrides it.
    fn verify(&self, _parts: &Parts, _body: &Bytes, _cx: &Cx<'_>) -> Result<(), ApiError> {
        Ok(())
    }
    /// Largest body accepted.
    fn body_limit(&self, op: OpKind) -> usize;
    /// Parses a request.
    fn parse(
        &self,
        route: &Route,
        parts: &Parts,
        body: &Bytes,
        form: &[Field],
    ) -> Result<Op, ApiError>;
    /// Renders an error.
    fn error(&self, e: &ApiError, cx: &Cx<'_>) -> Rendered;
    /// Headers an error carries besides the id headers (Bedrock's `x-amzn-ErrorType`).
    fn error_headers(&self, _e: &ApiError, _h: &mut HeaderMap) {}
    /// Whether the provider caches long prompts by itself and says how much of a prompt it
    /// read from its cache: OpenAI (and Azure OpenAI) for prompts of 1,024 tokens or more
    /// (<https://platform.openai.com/docs/guides/prompt-caching>), Gemini's implicit caching
    /// (<https://ai.google.dev/gemini-api/docs/caching#implicit-caching>). Anthropic and
    /// Bedrock cache only at the request's `cache_control` / `cachePoint` marks, which the
    /// emulator does not read.
    fn caches_prompts(&self) -> bool {
        false
    }
    /// A whole chat answer.
    fn chat(&self, req: &ChatReq, a: &Answer, usage: Usage, cx: &Cx<'_>) -> Bytes;
    /// A streamed chat answer.
    fn chat_stream(&self, req: &ChatReq, a: &Answer, usage: Usage, cx: &Cx<'_>) -> StreamParts;
    /// The content type of a streamed chat answer: server-sent events, or JSON (Gemini
    /// without `alt=sse`).
    fn stream_content_type(&self, req: &ChatReq) -> &'static str {
        if req.sse { "text/event-stream" } else { JSON }
    }
    /// The error event a stream carries when it fails midway.
    fn stream_error(&self, cx: &Cx<'_>) -> Bytes;
    /// A transcription answer: content type and body.
    fn transcript(&self, req: &SttReq, t: &Transcript, cx: &Cx<'_>) -> (&'static str, Bytes);
    /// A token-count answer (JSON). Only a wire format with a count route overrides it.
    fn token_count(&self, _req: &CountReq, _tokens: u64, _cx: &Cx<'_>) -> Bytes {
        Bytes::new()
    }
    /// An embeddings answer (JSON). Only a wire format with embedding routes overrides it.
    fn embeddings(&self, _req: &EmbedReq, _cx: &Cx<'_>) -> Bytes {
        Bytes::new()
    }
    /// The path of an OAuth 2 token endpoint served beside the API (Vertex's `/token`),
    /// answered by `token.rs` outside faults, limits and counters.
    fn token_path(&self) -> Option<&'static str> {
        None
    }
    /// Headers an embeddings answer carries besides the id headers (Bedrock's token counts).
    fn embed_headers(&self, _req: &EmbedReq, _cx: &Cx<'_>, _h: &mut HeaderMap) {}
    /// Request-id and other per-response headers.
    fn id_headers(&self, cx: &Cx<'_>, h: &mut HeaderMap);
}

/// The wire format of `kind` (the one `match` on kind).
pub(crate) fn wire(kind: Kind) -> &'static dyn Wire {
    match kind {
        Kind::OpenAi => &openai::OpenAi,
        Kind::Azure => &azure::Azure,
        Kind::Anthropic => &anthropic::Anthropic,
        Kind::Gemini => &gemini::Gemini,
        Kind::Bedrock => &bedrock::Bedrock,
        Kind::Vertex => &vertex::Vertex,
        Kind::Deepgram => &deepgram::Deepgram,
    }
}

/// `data: {json}\n\n`.
pub(crate) fn sse_data(v: &impl serde::Serialize) -> Bytes {
    let mut out = b"data: ".to_vec();
    let _ = serde_json::to_writer(&mut out, v);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// `event: {name}\ndata: {json}\n\n`.
pub(crate) fn sse_event(name: &str, v: &impl serde::Serialize) -> Bytes {
    let mut out = format!("event: {name}\ndata: ").into_bytes();
    let _ = serde_json::to_writer(&mut out, v);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

pub(crate) fn json_bytes(v: &impl serde::Serialize) -> Bytes {
    Bytes::from(serde_json::to_vec(v).unwrap_or_default())
}

/// A header's value as text.
pub(crate) fn header<'a>(parts: &'a Parts, name: &str) -> Option<&'a str> {
    parts.headers.get(name).and_then(|v| v.to_str().ok())
}

/// A query parameter (no percent-decoding beyond `+`/`%20`-free values, which is all the
/// parameters the emulator reads use).
pub(crate) fn query_param<'a>(query: Option<&'a str>, name: &str) -> Option<&'a str> {
    query?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then_some(v)
    })
}

/// The credential after `scheme ` in `Authorization` (scheme compared case-insensitively).
pub(crate) fn auth_scheme<'a>(parts: &'a Parts, scheme: &str) -> Option<&'a str> {
    let v = header(parts, "authorization")?.trim();
    let (s, rest) = v.split_once(' ')?;
    s.eq_ignore_ascii_case(scheme).then(|| rest.trim())
}

/// A key as OpenAI echoes it: the first 8 and last 4 characters around asterisks for a long
/// key; only asterisks and the last 4 for a short one; never the whole key.
pub(crate) fn mask_key(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    let n = chars.len();
    let tail: String = chars[n.saturating_sub(4)..].iter().collect();
    if n >= 16 {
        let head: String = chars[..8].iter().collect();
        format!("{head}{}{tail}", "*".repeat(n - 12))
    } else if n > 8 {
        format!("{}{tail}", "*".repeat(n - 4))
    } else {
        "*".repeat(n)
    }
}

/// The content type of a request, lower-cased, without parameters.
pub(crate) fn content_type(parts: &Parts) -> String {
    header(parts, "content-type")
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

pub(crate) fn hv(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_keys_like_openai_and_never_echoes_a_whole_key() {
        assert_eq!(
            mask_key("sk-WRQsPabcdefghijklmnopqrstuvwxyz0123456789xQBt"),
            format!("sk-WRQsP{}xQBt", "*".repeat(36))
        );
        assert_eq!(mask_key("wrong-key-12"), "********y-12");
        assert_eq!(mask_key("API_KEY"), "*******");
        assert_eq!(mask_key(""), "");
        for key in ["a", "abcd", "abcdefgh", "abcdefghi", "0123456789abcdef"] {
            assert_ne!(mask_key(key), key);
        }
    }

    #[test]
    fn reads_query_parameters() {
        assert_eq!(query_param(Some("alt=sse&key=k1"), "key"), Some("k1"));
        assert_eq!(query_param(Some("alt"), "alt"), Some(""));
        assert_eq!(query_param(None, "alt"), None);
        assert_eq!(query_param(Some("x=1"), "alt"), None);
    }
}
