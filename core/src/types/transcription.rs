//! Speech-to-text requests and results.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::Origin;
use crate::error::{Error, ErrorKind, Result};
use crate::id::ProviderId;

/// Audio to transcribe, held as [`Bytes`] so retries and failover can send it again without
/// copying.
///
/// `Debug` shows the file name, MIME type and size, never the audio.
///
/// # Examples
///
/// ```
/// use llm_failover::{AudioInput, TranscriptionRequest};
///
/// let audio = AudioInput::from_bytes(vec![0u8; 1024], "memo.m4a")?; // or `from_path(…).await?`
/// assert_eq!((audio.mime_type(), audio.len()), ("audio/mp4", 1024));
/// assert_eq!(audio.duration(), None); // read from WAV files only
/// assert!(AudioInput::from_bytes(vec![0u8; 16], "notes.txt").is_err());
///
/// let req = TranscriptionRequest::new(audio).language("en");
/// # let _ = req;
/// # Ok::<(), llm_failover::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct AudioInput {
    bytes: Bytes,
    file_name: String,
    mime_type: String,
}

impl AudioInput {
    /// Audio from memory; the MIME type is guessed from the file name's extension.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidRequest`] if the audio is empty, the extension is not a known audio
    /// format, or a `.wav` file does not start with a RIFF/WAVE header.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::AudioInput;
    ///
    /// let audio = AudioInput::from_bytes(vec![0u8; 16], "note.mp3").unwrap();
    /// assert_eq!(audio.mime_type(), "audio/mpeg");
    /// assert!(AudioInput::from_bytes(Vec::new(), "note.mp3").is_err());
    /// ```
    pub fn from_bytes(bytes: impl Into<Bytes>, file_name: impl Into<String>) -> Result<Self> {
        let file_name = file_name.into();
        let mime = mime_for(&file_name).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidRequest,
                format!(
                    "audio `{file_name}`: unknown audio extension (expected one of wav, mp3, \
                     mpga, mpeg, m4a, mp4, ogg, oga, opus, flac, webm, aac)"
                ),
            )
        })?;
        Self::with_mime_type(bytes, file_name, mime)
    }

    /// Audio from memory with an explicit MIME type.
    ///
    /// # Errors
    ///
    /// As [`from_bytes`](Self::from_bytes), except for the extension check.
    pub fn with_mime_type(
        bytes: impl Into<Bytes>,
        file_name: impl Into<String>,
        mime_type: impl Into<String>,
    ) -> Result<Self> {
        let audio = AudioInput {
            bytes: bytes.into(),
            file_name: file_name.into(),
            mime_type: mime_type.into(),
        };
        if audio.bytes.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidRequest,
                format!("audio `{}` is empty", audio.file_name),
            ));
        }
        // It travels as a `Content-Type` (Deepgram) or a form part's type (Whisper).
        if reqwest::header::HeaderValue::from_str(&audio.mime_type).is_err() {
            return Err(Error::new(
                ErrorKind::InvalidRequest,
                format!(
                    "audio `{}`: the MIME type `{}` cannot be sent in an HTTP header",
                    audio.file_name,
                    audio.mime_type.escape_debug()
                ),
            ));
        }
        if audio.is_wav() {
            wav_duration(&audio.bytes).map_err(|why| {
                Error::new(
                    ErrorKind::InvalidRequest,
                    format!("audio `{}` is not a valid WAV file: {why}", audio.file_name),
                )
            })?;
        }
        Ok(audio)
    }

    /// Reads an audio file; the file name and MIME type come from the path.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Io`] naming the path if it cannot be read; otherwise as
    /// [`from_bytes`](Self::from_bytes).
    pub async fn from_path(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let bytes = tokio::fs::read(path).await.map_err(|e| {
            Error::new(
                ErrorKind::Io,
                format!("cannot read audio file `{}`: {e}", path.display()),
            )
            .with_source(e)
        })?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "audio".to_owned());
        Self::from_bytes(bytes, name)
    }

    /// The audio bytes (a cheap clone).
    pub fn bytes(&self) -> Bytes {
        self.bytes.clone()
    }

    /// The size in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Always false: empty audio is rejected at construction.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The file name sent in multipart uploads.
    pub fn file_name(&self) -> &str {
        &self.file_name
    }

    /// The MIME type (`audio/wav`, `audio/mpeg`, …).
    pub fn mime_type(&self) -> &str {
        &self.mime_type
    }

    /// The duration, when it can be read from the container (WAV only).
    pub fn duration(&self) -> Option<Duration> {
        if self.is_wav() {
            wav_duration(&self.bytes).ok()
        } else {
            None
        }
    }

    fn is_wav(&self) -> bool {
        matches!(
            self.mime_type.as_str(),
            "audio/wav" | "audio/x-wav" | "audio/wave"
        )
    }
}

impl fmt::Debug for AudioInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AudioInput")
            .field("file_name", &self.file_name)
            .field("mime_type", &self.mime_type)
            .field("len", &self.bytes.len())
            .finish()
    }
}

fn mime_for(file_name: &str) -> Option<&'static str> {
    let ext = file_name.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match ext.as_str() {
        "wav" | "wave" => "audio/wav",
        "mp3" | "mpga" | "mpeg" => "audio/mpeg",
        "m4a" => "audio/mp4",
        "mp4" => "audio/mp4",
        "ogg" | "oga" | "opus" => "audio/ogg",
        "flac" => "audio/flac",
        "webm" => "audio/webm",
        "aac" => "audio/aac",
        _ => return None,
    })
}

/// Reads a RIFF/WAVE header and returns the audio's duration.
fn wav_duration(b: &[u8]) -> std::result::Result<Duration, &'static str> {
    if b.len() < 12 || &b[0..4] != b"RIFF" || &b[8..12] != b"WAVE" {
        return Err("missing RIFF/WAVE header");
    }
    let mut pos = 12;
    let mut byte_rate = None;
    while pos + 8 <= b.len() {
        let id = &b[pos..pos + 4];
        let size = u32::from_le_bytes([b[pos + 4], b[pos + 5], b[pos + 6], b[pos + 7]]) as usize;
        let body = pos + 8;
        if id == b"fmt " {
            if size < 16 || body + 16 > b.len() {
                return Err("truncated `fmt ` chunk");
            }
            let rate = u32::from_le_bytes([b[body + 8], b[body + 9], b[body + 10], b[body + 11]]);
            if rate == 0 {
                return Err("byte rate is zero");
            }
            byte_rate = Some(rate);
        } else if id == b"data" {
            let rate = byte_rate.ok_or("`data` chunk before `fmt ` chunk")?;
            // Streaming writers put 0 or u32::MAX as the size: use what is there.
            let len = size.min(b.len() - body);
            return Ok(Duration::from_secs_f64(len as f64 / f64::from(rate)));
        }
        pos = body.saturating_add(size).saturating_add(size & 1);
    }
    Err("no `data` chunk")
}

/// The format a speech-to-text provider answers in.
///
/// # Examples
///
/// ```
/// use llm_failover::{AudioInput, TranscriptFormat, TranscriptionRequest};
///
/// let audio = AudioInput::from_bytes(vec![0u8; 64], "memo.mp3")?;
/// let req = TranscriptionRequest::new(audio).response_format(TranscriptFormat::VerboseJson);
/// assert_eq!(req.response_format.as_str(), "verbose_json"); // with segments and language
/// assert_eq!(TranscriptFormat::default(), TranscriptFormat::Json);
/// # Ok::<(), llm_failover::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TranscriptFormat {
    /// JSON with the text (and whatever else the provider adds).
    #[default]
    Json,
    /// JSON with language, duration and segments (OpenAI `verbose_json`).
    VerboseJson,
    /// Plain text.
    Text,
}

impl TranscriptFormat {
    /// The OpenAI-style name.
    pub fn as_str(self) -> &'static str {
        match self {
            TranscriptFormat::Json => "json",
            TranscriptFormat::VerboseJson => "verbose_json",
            TranscriptFormat::Text => "text",
        }
    }
}

/// A speech-to-text request.
///
/// # Examples
///
/// ```
/// use llm_failover::{AudioInput, TranscriptionRequest};
///
/// let audio = AudioInput::from_bytes(vec![1u8; 32], "memo.mp3").unwrap();
/// let req = TranscriptionRequest::new(audio).language("en");
/// assert_eq!(req.language.as_deref(), Some("en"));
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct TranscriptionRequest {
    /// The audio.
    pub audio: AudioInput,
    /// Overrides the provider's configured model.
    pub model: Option<String>,
    /// ISO-639-1 language hint.
    pub language: Option<String>,
    /// Text to guide the model (names, spelling).
    pub prompt: Option<String>,
    /// What the provider should answer with.
    pub response_format: TranscriptFormat,
    /// Sampling temperature.
    pub temperature: Option<f32>,
}

impl TranscriptionRequest {
    /// A request for `audio` with the provider's defaults.
    pub fn new(audio: AudioInput) -> Self {
        TranscriptionRequest {
            audio,
            model: None,
            language: None,
            prompt: None,
            response_format: TranscriptFormat::default(),
            temperature: None,
        }
    }

    /// Sets the model.
    #[must_use]
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Sets the language hint.
    #[must_use]
    pub fn language(mut self, language: impl Into<String>) -> Self {
        self.language = Some(language.into());
        self
    }

    /// Sets the prompt.
    #[must_use]
    pub fn prompt(mut self, prompt: impl Into<String>) -> Self {
        self.prompt = Some(prompt.into());
        self
    }

    /// Sets the response format.
    #[must_use]
    pub fn response_format(mut self, format: TranscriptFormat) -> Self {
        self.response_format = format;
        self
    }

    /// Sets the temperature.
    #[must_use]
    pub fn temperature(mut self, t: f32) -> Self {
        self.temperature = Some(t);
        self
    }
}

/// A timed piece of a transcript.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use llm_failover::Segment;
///
/// fn timestamp(d: Duration) -> String {
///     format!("{:02}:{:02}.{:03}", d.as_secs() / 60, d.as_secs() % 60, d.subsec_millis())
/// }
///
/// let s = Segment {
///     start: Duration::from_millis(1_500),
///     end: Duration::from_millis(63_250),
///     text: "Hello there.".into(),
/// };
/// let cue = format!("{} --> {}  {}", timestamp(s.start), timestamp(s.end), s.text);
/// assert_eq!(cue, "00:01.500 --> 01:03.250  Hello there.");
/// ```
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    /// Start, from the beginning of the audio.
    pub start: Duration,
    /// End, from the beginning of the audio.
    pub end: Duration,
    /// The words.
    pub text: String,
}

impl fmt::Debug for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Segment")
            .field("start", &self.start)
            .field("end", &self.end)
            .field("text_len", &self.text.len())
            .finish()
    }
}

/// The result of a transcription.
///
/// `Debug` shows lengths, never the transcript.
///
/// # Examples
///
/// ```
/// use llm_failover::{ProviderId, Transcript};
///
/// fn describe(t: &Transcript) -> String {
///     let lang = t.language.as_deref().unwrap_or("?");
///     format!("[{lang}, {} segment(s), by {}] {}", t.segments.len(), t.provider, t.text)
/// }
///
/// // `Client::transcribe` returns one; `new` builds one, e.g. for a test.
/// let mut t = Transcript::new(ProviderId::new("deepgram"), "nova-2", "Hello there.");
/// t.language = Some("en".into());
/// assert_eq!(describe(&t), "[en, 0 segment(s), by deepgram] Hello there.");
/// ```
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Transcript {
    /// The full text.
    pub text: String,
    /// The detected or given language, when the provider says.
    pub language: Option<String>,
    /// The audio's duration, when the provider says.
    pub duration: Option<Duration>,
    /// Timed segments, when the provider gives them.
    pub segments: Vec<Segment>,
    /// The provider that answered.
    pub provider: ProviderId,
    /// The model that answered.
    pub model: String,
    /// The provider's request id.
    pub request_id: Option<String>,
    /// How many attempts the router made (1 = first try; 0 = served from the cache).
    pub attempts: u32,
    /// Where the transcript came from: the provider, or the response cache.
    #[serde(default)]
    pub origin: Origin,
    /// What it cost, where the model has a price per minute of audio: estimated from the
    /// audio's length before sending, and by the duration the provider reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spend: Option<crate::types::price::Spend>,
}

impl Transcript {
    /// A transcript from `provider` with the given text; the other fields empty.
    pub fn new(provider: ProviderId, model: impl Into<String>, text: impl Into<String>) -> Self {
        Transcript {
            text: text.into(),
            language: None,
            duration: None,
            segments: Vec::new(),
            provider,
            model: model.into(),
            request_id: None,
            attempts: 1,
            origin: Origin::Provider,
            spend: None,
        }
    }

    /// Whether the transcript holds any text other than whitespace. One without (an empty
    /// 200) is returned, but never kept by the response cache, so the same audio is sent
    /// again.
    pub(crate) fn has_content(&self) -> bool {
        !self.text.trim().is_empty()
    }
}

impl fmt::Debug for Transcript {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transcript")
            .field("text_len", &self.text.len())
            .field("language", &self.language)
            .field("duration", &self.duration)
            .field("segments", &self.segments.len())
            .field("provider", &self.provider)
            .field("model", &self.model)
            .field("request_id", &self.request_id)
            .field("attempts", &self.attempts)
            .field("origin", &self.origin)
            .field("spend", &self.spend)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn wav(seconds: u32, rate: u32) -> Vec<u8> {
        let data_len = seconds * rate * 2;
        let mut v = Vec::new();
        v.extend_from_slice(b"RIFF");
        v.extend_from_slice(&(36 + data_len).to_le_bytes());
        v.extend_from_slice(b"WAVEfmt ");
        v.extend_from_slice(&16u32.to_le_bytes());
        v.extend_from_slice(&1u16.to_le_bytes()); // PCM
        v.extend_from_slice(&1u16.to_le_bytes()); // mono
        v.extend_from_slice(&rate.to_le_bytes());
        v.extend_from_slice(&(rate * 2).to_le_bytes());
        v.extend_from_slice(&2u16.to_le_bytes());
        v.extend_from_slice(&16u16.to_le_bytes());
        v.extend_from_slice(b"data");
        v.extend_from_slice(&data_len.to_le_bytes());
        v.resize(v.len() + data_len as usize, 0);
        v
    }

    #[test]
    fn reads_wav_duration() {
        let audio = AudioInput::from_bytes(wav(3, 8000), "a.wav").unwrap();
        assert_eq!(audio.duration(), Some(Duration::from_secs(3)));
        assert_eq!(audio.mime_type(), "audio/wav");
    }

    #[test]
    fn rejects_bad_audio_with_a_reason() {
        let err = AudioInput::from_bytes(b"not a wav".to_vec(), "a.wav").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidRequest);
        assert!(err.message().contains("a.wav"), "{err}");
        let mut truncated = wav(1, 8000);
        truncated.truncate(30);
        assert!(AudioInput::from_bytes(truncated, "t.wav").is_err());
        let err = AudioInput::from_bytes(vec![1, 2, 3], "a.txt").unwrap_err();
        assert!(err.message().contains("unknown audio extension"));
        let err =
            AudioInput::with_mime_type(vec![1, 2, 3], "a.mp3", "audio/mpeg\r\nx-a: b").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidRequest);
        assert!(
            err.message().contains("cannot be sent in an HTTP header"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn missing_file_is_an_io_error_naming_the_path() {
        let err = AudioInput::from_path("/nonexistent/x.wav")
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Io);
        assert!(err.message().contains("/nonexistent/x.wav"));
    }

    #[test]
    fn debug_hides_the_audio() {
        let audio = AudioInput::from_bytes(vec![7u8; 10], "a.mp3").unwrap();
        assert_eq!(
            format!("{audio:?}"),
            r#"AudioInput { file_name: "a.mp3", mime_type: "audio/mpeg", len: 10 }"#
        );
    }
}
