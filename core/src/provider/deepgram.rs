//! Deepgram pre-recorded speech-to-text (`POST /v1/listen`).
//!
//! Translation choices, each tested in `tests/adapter_deepgram.rs`:
//!
//! - **The audio** is the raw request body, with the audio's MIME type as `Content-Type`
//!   (<https://developers.deepgram.com/reference/speech-to-text-api/listen>); options travel in
//!   the query: `model`, `smart_format=true`, and `language` when the request gives one, else
//!   `detect_language=true`.
//! - **The key** is sent as `Authorization: Token KEY`.
//! - **Not sent**: the request's `prompt` and `temperature` (Deepgram has no free-text prompt
//!   or sampling temperature; they are hints that other providers may use). The response is
//!   always Deepgram's JSON, whatever `response_format` asks.
//! - **Segments**: Deepgram's `utterances` when present, else the sentences of its
//!   `paragraphs` (which `smart_format` turns on), else one segment per word
//!   (`punctuated_word` when given).
//! - **Errors**: `{"err_code":"INVALID_AUTH","err_msg":"…","request_id":"…"}` (and the newer
//!   `{"category":…,"message":…}` form) classified by status and code
//!   (<https://developers.deepgram.com/reference/errors>): 402 (no credit left) is
//!   `QuotaExhausted`, 413 `PayloadTooLarge`, 429 `RateLimited`, 503 `Overloaded`.
//! - Chat is not offered: the chat methods return `Unsupported`.

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde::Deserialize;
use url::Url;

use super::body::{decode_json, kind_for_status, snippet};
use super::{Provider, RequestContext, SseEvent, StreamDecoder};
use crate::clock::Now;
use crate::config::{ProviderConfig, ProviderKind};
use crate::error::{Error, ErrorKind, Result};
use crate::http::{Body, HttpRequest, RawResponse};
use crate::id::{Capabilities, Capability, ProviderId};
use crate::ratelimit::{HeaderDialect, LimitReport, parse_limit_headers};
use crate::types::{
    ChatChunk, ChatRequest, ChatResponse, Segment, Transcript, TranscriptionRequest,
};

/// The wire format's name, as written in `providers.toml` (`kind = "deepgram"`).
pub(crate) const PROVIDER_TYPE: &str = "deepgram";

/// Deepgram's API root.
pub const DEFAULT_BASE_URL: &str = "https://api.deepgram.com";

/// A Deepgram speech-to-text provider.
///
/// # Examples
///
/// ```
/// use llm_failover::provider::deepgram::{Deepgram, DEFAULT_BASE_URL};
/// use llm_failover::provider::Provider;
/// use llm_failover::Capability;
/// use llm_failover::ProviderId;
///
/// let dg = Deepgram::new(ProviderId::new("deepgram"), DEFAULT_BASE_URL.parse().unwrap())
///     .with_model("nova-3");
/// assert_eq!(dg.default_model(Capability::Transcription), Some("nova-3"));
/// assert!(!dg.capabilities().chat);
/// ```
#[derive(Clone, Debug)]
pub struct Deepgram {
    id: ProviderId,
    base_url: Url,
    model: Option<String>,
}

impl Deepgram {
    /// A provider named `id` at `base_url` (normally [`DEFAULT_BASE_URL`]), with no default
    /// model.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::http::Body;
    /// use llm_failover::provider::{deepgram::Deepgram, Provider, RequestContext};
    /// use llm_failover::{AudioInput, Capability, Credential, ProviderId, TranscriptionRequest};
    ///
    /// let dg = Deepgram::new(ProviderId::new("deepgram"), "http://127.0.0.1:8083".parse()?);
    /// assert_eq!(dg.default_model(Capability::Transcription), None);
    ///
    /// let key = Credential::new("dg-test");
    /// let audio = AudioInput::from_bytes(vec![0u8; 64], "memo.mp3")?;
    /// let req = TranscriptionRequest::new(audio).language("de");
    /// let http = dg.transcription_request(&req, &RequestContext::new("nova-3", Some(&key)))?;
    /// assert_eq!(
    ///     http.url.as_str(),
    ///     "http://127.0.0.1:8083/v1/listen?model=nova-3&smart_format=true&language=de",
    /// );
    /// assert!(matches!(&http.body, Body::Bytes { content_type, .. } if content_type == "audio/mpeg"));
    /// assert!(http.headers["authorization"].is_sensitive()); // `Token KEY`
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(id: ProviderId, base_url: Url) -> Self {
        Deepgram {
            id,
            base_url,
            model: None,
        }
    }

    /// Sets the model used when a request names none (`nova-3`, …).
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::provider::{deepgram::Deepgram, Provider, RequestContext};
    /// use llm_failover::{AudioInput, Capability, ProviderId, TranscriptionRequest};
    ///
    /// let dg = Deepgram::new(ProviderId::new("deepgram"), "http://127.0.0.1:8083".parse()?)
    ///     .with_model("nova-3");
    /// let model = dg.default_model(Capability::Transcription).unwrap();
    /// assert_eq!(model, "nova-3");
    /// assert_eq!(dg.default_model(Capability::Chat), None); // speech to text only
    ///
    /// let req = TranscriptionRequest::new(AudioInput::from_bytes(vec![0u8; 64], "memo.mp3")?);
    /// let http = dg.transcription_request(&req, &RequestContext::new(model, None))?;
    /// let query: Vec<_> = http.url.query_pairs().collect();
    /// assert!(query.contains(&("model".into(), "nova-3".into())));
    /// assert!(query.contains(&("detect_language".into(), "true".into()))); // no language given
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Builds the adapter from a validated provider entry; the model is `transcription_model`,
    /// else `model`.
    ///
    /// # Errors
    ///
    /// `Config` when the entry is not of kind `deepgram`, names two different models, or sets
    /// `api_version` (the version is part of the path).
    #[allow(dead_code, reason = "called by the provider factory")]
    pub(crate) fn from_config(cfg: &ProviderConfig) -> Result<Self> {
        let at = |field: &str| format!("providers.{}.{field}", cfg.id);
        if cfg.kind != ProviderKind::Deepgram {
            return Err(Error::config(format!(
                "{}: expected kind `{PROVIDER_TYPE}`, found `{}`",
                at("kind"),
                cfg.kind
            )));
        }
        if cfg.api_version.is_some() {
            return Err(Error::config(format!(
                "{}: Deepgram takes no api_version (the adapter calls `/v1/listen`)",
                at("api_version")
            )));
        }
        let model = match (&cfg.transcription_model, &cfg.model) {
            (Some(t), Some(m)) if t != m => {
                return Err(Error::config(format!(
                    "{}: `{t}` differs from `{}` = `{m}`; Deepgram serves one model, name it once",
                    at("transcription_model"),
                    at("model")
                )));
            }
            (t, m) => t.clone().or_else(|| m.clone()),
        };
        let mut provider = Self::new(cfg.id.clone(), cfg.base_url.clone());
        provider.model = model;
        Ok(provider)
    }

    fn endpoint(&self) -> Result<Url> {
        crate::provider::url_with_path(&self.id, &self.base_url, ["v1", "listen"])
    }
}

impl Provider for Deepgram {
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
            transcription: true,
            ..Capabilities::default()
        }
    }

    fn default_model(&self, capability: Capability) -> Option<&str> {
        match capability {
            Capability::Transcription => self.model.as_deref(),
            Capability::Chat | Capability::Embedding => None,
        }
    }

    fn chat_request(&self, req: &ChatRequest, ctx: &RequestContext<'_>) -> Result<HttpRequest> {
        let _ = (req, ctx);
        Err(Error::unsupported(&self.id, "chat"))
    }

    fn chat_response(&self, raw: RawResponse, model: &str) -> Result<ChatResponse> {
        let _ = (raw, model);
        Err(Error::unsupported(&self.id, "chat"))
    }

    fn stream_decoder(&self, model: &str) -> Box<dyn StreamDecoder> {
        let _ = model;
        Box::new(NoChat(self.id.clone()))
    }

    fn transcription_request(
        &self,
        req: &TranscriptionRequest,
        ctx: &RequestContext<'_>,
    ) -> Result<HttpRequest> {
        if ctx.model.trim().is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidRequest,
                format!("provider `{}`: no Deepgram model named", self.id),
            ));
        }
        let mut url = self.endpoint()?;
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("model", ctx.model);
            q.append_pair("smart_format", "true");
            match req.language.as_deref().map(str::trim) {
                Some(lang) if !lang.is_empty() => q.append_pair("language", lang),
                _ => q.append_pair("detect_language", "true"),
            };
        }
        let mut http = HttpRequest::new(reqwest::Method::POST, url);
        http.body = Body::Bytes {
            bytes: req.audio.bytes(),
            content_type: req.audio.mime_type().to_owned(),
        };
        if let Some(key) = ctx.credential {
            http = http.secret_header("authorization", &format!("Token {}", key.expose()))?;
        }
        Ok(http)
    }

    fn transcription_response(&self, raw: RawResponse, model: &str) -> Result<Transcript> {
        let mut t = parse_transcript(&self.id, &raw.body, model)?;
        if let Some(id) = self.request_id(&raw.headers) {
            t.request_id = Some(id);
        }
        Ok(t)
    }

    fn error(&self, raw: &RawResponse, now: Now) -> Error {
        let _ = now; // Deepgram states delays in headers only (read by `limit_report`).
        classify(raw.status, &raw.body)
    }

    fn limit_report(&self, headers: &HeaderMap, now: Now) -> LimitReport {
        parse_limit_headers(HeaderDialect::Generic, headers, now)
    }

    fn request_id(&self, headers: &HeaderMap) -> Option<String> {
        headers
            .get("dg-request-id")
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
            .or_else(|| super::default_request_id(headers))
    }
}

/// The stream decoder of a provider without chat: every event is an `Unsupported` error.
#[derive(Debug)]
struct NoChat(ProviderId);

impl StreamDecoder for NoChat {
    fn decode(&mut self, event: &SseEvent) -> Result<Option<ChatChunk>> {
        let _ = event;
        Err(Error::unsupported(&self.0, "chat"))
    }

    fn is_done(&self) -> bool {
        false
    }
}

#[derive(Debug, Deserialize)]
struct ListenResponse {
    metadata: Option<Metadata>,
    results: Option<Results>,
}

#[derive(Debug, Deserialize)]
struct Metadata {
    request_id: Option<String>,
    duration: Option<f64>,
}

#[derive(Debug, Deserialize)]
struct Results {
    #[serde(default)]
    channels: Vec<Channel>,
    utterances: Option<Vec<Utterance>>,
}

#[derive(Debug, Deserialize)]
struct Channel {
    #[serde(default)]
    alternatives: Vec<Alternative>,
    detected_language: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Alternative {
    transcript: Option<String>,
    #[serde(default)]
    words: Vec<Word>,
    paragraphs: Option<Paragraphs>,
}

#[derive(Debug, Deserialize)]
struct Word {
    word: Option<String>,
    punctuated_word: Option<String>,
    start: f64,
    end: f64,
}

#[derive(Debug, Deserialize)]
struct Paragraphs {
    #[serde(default)]
    paragraphs: Vec<Paragraph>,
}

#[derive(Debug, Deserialize)]
struct Paragraph {
    #[serde(default)]
    sentences: Vec<Sentence>,
}

#[derive(Debug, Deserialize)]
struct Sentence {
    text: String,
    start: f64,
    end: f64,
}

#[derive(Debug, Deserialize)]
struct Utterance {
    transcript: String,
    start: f64,
    end: f64,
}

/// Seconds from Deepgram → `Duration`; negative, non-finite or absurd values are errors.
fn seconds(v: f64, what: &str) -> Result<Duration> {
    Duration::try_from_secs_f64(v).map_err(|_| {
        Error::decode(format!(
            "Deepgram response: {what} is not a valid time ({v} s)"
        ))
    })
}

fn segment(start: f64, end: f64, text: String, what: &str) -> Result<Segment> {
    let start = seconds(start, &format!("{what} start"))?;
    let end = seconds(end, &format!("{what} end"))?;
    if end < start {
        return Err(Error::decode(format!(
            "Deepgram response: {what} ends before it starts"
        )));
    }
    Ok(Segment { start, end, text })
}

fn parse_transcript(id: &ProviderId, body: &[u8], model: &str) -> Result<Transcript> {
    let resp: ListenResponse = decode_json(body, "a Deepgram /v1/listen response")?;
    let results = resp
        .results
        .ok_or_else(|| Error::decode("Deepgram response has no `results`"))?;
    let channel = results
        .channels
        .first()
        .ok_or_else(|| Error::decode("Deepgram response has no channel in `results.channels`"))?;
    let alt = channel.alternatives.first().ok_or_else(|| {
        Error::decode("Deepgram response has no alternative in `results.channels[0]`")
    })?;
    let text = alt.transcript.clone().ok_or_else(|| {
        Error::decode(
            "Deepgram response has no `transcript` in `results.channels[0].alternatives[0]`",
        )
    })?;
    let segments = if let Some(utterances) = results.utterances.filter(|u| !u.is_empty()) {
        utterances
            .into_iter()
            .enumerate()
            .map(|(i, u)| segment(u.start, u.end, u.transcript, &format!("utterance {i}")))
            .collect::<Result<Vec<_>>>()?
    } else if let Some(sentences) = alt
        .paragraphs
        .as_ref()
        .map(|p| {
            p.paragraphs
                .iter()
                .flat_map(|p| &p.sentences)
                .collect::<Vec<_>>()
        })
        .filter(|s| !s.is_empty())
    {
        sentences
            .into_iter()
            .enumerate()
            .map(|(i, s)| segment(s.start, s.end, s.text.clone(), &format!("sentence {i}")))
            .collect::<Result<Vec<_>>>()?
    } else {
        alt.words
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let text = w
                    .punctuated_word
                    .clone()
                    .or_else(|| w.word.clone())
                    .ok_or_else(|| {
                        Error::decode(format!("Deepgram response: word {i} has no text"))
                    })?;
                segment(w.start, w.end, text, &format!("word {i}"))
            })
            .collect::<Result<Vec<_>>>()?
    };
    let mut t = Transcript::new(id.clone(), model, text);
    t.segments = segments;
    t.language = channel.detected_language.clone();
    if let Some(meta) = resp.metadata {
        t.duration = meta
            .duration
            .map(|d| seconds(d, "metadata.duration"))
            .transpose()?;
        t.request_id = meta.request_id;
    }
    Ok(t)
}

#[derive(Debug, Deserialize)]
struct ErrorBody {
    err_code: Option<String>,
    err_msg: Option<String>,
    category: Option<String>,
    message: Option<String>,
    details: Option<String>,
    request_id: Option<String>,
}

/// Classifies a Deepgram error response by status, refined by `err_code`.
fn classify(status: u16, body: &[u8]) -> Error {
    let Ok(parsed) = serde_json::from_slice::<ErrorBody>(body) else {
        return Error::new(
            kind_for_status(status),
            format!(
                "HTTP {status} without a Deepgram error object: {}",
                snippet(body)
            ),
        );
    };
    let code = parsed.err_code.or(parsed.category);
    // A blank text is no text (found by tests/proptests.rs: `{"err_msg":""}` gave an empty
    // message).
    let text = |s: Option<String>| s.filter(|m| !m.trim().is_empty());
    let message = match (
        text(parsed.err_msg).or(text(parsed.message)),
        text(parsed.details),
    ) {
        (Some(m), Some(d)) => format!("{m} {d}"),
        (Some(m), None) => m,
        (None, Some(d)) => d,
        (None, None) => format!("HTTP {status}: {}", snippet(body)),
    };
    let lower = message.to_ascii_lowercase();
    let kind = match (status, code.as_deref()) {
        (_, Some("INVALID_AUTH")) => ErrorKind::Auth,
        // Deepgram answers 401 both for a bad key and for a key lacking a scope.
        (401, _) if lower.contains("permission") => ErrorKind::PermissionDenied,
        (_, Some("ASR_PAYMENT_REQUIRED")) => ErrorKind::QuotaExhausted,
        (_, Some("TOO_MANY_REQUESTS")) => ErrorKind::RateLimited,
        (s, _) => kind_for_status(s),
    };
    let mut err = Error::new(kind, message).with_request_id(parsed.request_id);
    if let Some(code) = code {
        err = err.with_code(code);
    }
    err
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::config::Limits;

    fn config() -> ProviderConfig {
        ProviderConfig {
            id: ProviderId::new("dg"),
            kind: ProviderKind::Deepgram,
            base_url: DEFAULT_BASE_URL.parse().unwrap(),
            model: None,
            transcription_model: Some("nova-3".into()),
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
    fn from_config_takes_either_model_field_but_not_two_different_ones() {
        let p = Deepgram::from_config(&config()).unwrap();
        assert_eq!(p.default_model(Capability::Transcription), Some("nova-3"));
        assert_eq!(p.default_model(Capability::Chat), None);
        let mut cfg = config();
        cfg.transcription_model = None;
        cfg.model = Some("nova-2".into());
        assert_eq!(
            Deepgram::from_config(&cfg)
                .unwrap()
                .default_model(Capability::Transcription),
            Some("nova-2")
        );
        cfg.transcription_model = Some("nova-3".into());
        let err = Deepgram::from_config(&cfg).unwrap_err();
        assert!(
            err.message().contains("providers.dg.transcription_model"),
            "{err}"
        );
        let mut cfg = config();
        cfg.kind = ProviderKind::OpenAi;
        assert!(Deepgram::from_config(&cfg).unwrap_err().is_config());
        let mut cfg = config();
        cfg.api_version = Some("v2".into());
        assert!(Deepgram::from_config(&cfg).unwrap_err().is_config());
    }

    #[test]
    fn segments_prefer_utterances_then_sentences_then_words() {
        let id = ProviderId::new("dg");
        let words = r#"[{"word":"hi","punctuated_word":"Hi.","start":0.1,"end":0.4},
                        {"word":"yes","start":0.5,"end":0.9}]"#;
        let body = format!(
            r#"{{"results":{{"channels":[{{"alternatives":[{{"transcript":"Hi. yes","words":{words}}}]}}]}}}}"#
        );
        let t = parse_transcript(&id, body.as_bytes(), "m").unwrap();
        let texts: Vec<_> = t.segments.iter().map(|s| s.text.as_str()).collect();
        assert_eq!(texts, ["Hi.", "yes"]);
        assert_eq!(t.segments[1].end, Duration::from_millis(900));

        let body = format!(
            r#"{{"results":{{"channels":[{{"alternatives":[{{"transcript":"Hi. yes","words":{words},
              "paragraphs":{{"paragraphs":[{{"sentences":[{{"text":"Hi. Yes.","start":0.1,"end":0.9}}]}}]}}}}]}}],
              "utterances":[{{"transcript":"Hi yes","start":0.0,"end":1.0}}]}}}}"#
        );
        let t = parse_transcript(&id, body.as_bytes(), "m").unwrap();
        assert_eq!(t.segments.len(), 1);
        assert_eq!(t.segments[0].text, "Hi yes");
    }

    #[test]
    fn impossible_times_are_decode_errors() {
        let id = ProviderId::new("dg");
        for words in [
            r#"[{"word":"a","start":-1.0,"end":0.4}]"#,
            r#"[{"word":"a","start":2.0,"end":1.0}]"#,
            r#"[{"start":0.0,"end":1.0}]"#,
        ] {
            let body = format!(
                r#"{{"results":{{"channels":[{{"alternatives":[{{"transcript":"a","words":{words}}}]}}]}}}}"#
            );
            let err = parse_transcript(&id, body.as_bytes(), "m").unwrap_err();
            assert!(err.is_decode(), "{words}: {err}");
            assert!(err.message().contains("word 0"), "{err}");
        }
    }

    #[test]
    fn the_newer_error_shape_is_understood() {
        let err = classify(
            400,
            br#"{"category":"INVALID_JSON","message":"Invalid JSON submitted.","details":"Json deserialize error","request_id":"r1"}"#,
        );
        assert_eq!(err.kind(), ErrorKind::InvalidRequest);
        assert_eq!(err.code(), Some("INVALID_JSON"));
        assert_eq!(err.request_id(), Some("r1"));
        assert!(err.message().contains("Invalid JSON submitted."));
    }

    #[test]
    fn an_error_with_blank_texts_still_says_what_happened() {
        // Found by tests/proptests.rs (a long run): `{"err_msg":""}` gave an empty message.
        for body in [
            br#"{"err_msg":""}"#.as_slice(),
            br#"{"err_code":"Bad Request","err_msg":"  ","details":""}"#,
            br#"{"message":"","details":" "}"#,
        ] {
            let err = classify(400, body);
            assert!(err.message().starts_with("HTTP 400: "), "{err:?}");
        }
        let err = classify(400, br#"{"err_msg":"","message":"Bad audio."}"#);
        assert_eq!(err.message(), "Bad audio.");
    }

    #[test]
    fn chat_is_unsupported() {
        let p = Deepgram::from_config(&config()).unwrap();
        let req = ChatRequest::from_prompt("hi");
        let err = p
            .chat_request(&req, &RequestContext::new("nova-3", None))
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        let err = p
            .stream_decoder("nova-3")
            .decode(&SseEvent::default())
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
    }
}
