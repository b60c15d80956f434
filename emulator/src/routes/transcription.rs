//! Transcriptions in OpenAI's format, shared by OpenAI and Azure: a multipart form in
//! (`file`, `model`, `language`, `prompt`, `response_format`, `timestamp_granularities[]`),
//! `json` / `verbose_json` / `text` / `srt` / `vtt` out
//! (platform.openai.com/docs/api-reference/audio/createTranscription).

use axum::http::request::Parts;
use bytes::Bytes;
use serde_json::{Value, json};

use super::{ApiError, Field, JSON, SttFormat, SttReq, content_type, field, json_bytes};
use crate::text::{Transcript, round3};

/// Parses a transcription form; `model` comes from the path for Azure.
pub(super) fn parse(
    parts: &Parts,
    form: &[Field],
    model: Option<&str>,
) -> Result<SttReq, ApiError> {
    let ct = content_type(parts);
    if ct != "multipart/form-data" {
        return Err(ApiError::bad(format!(
            "Invalid Content-Type header ({ct}), expected multipart/form-data. (HINT: If you're \
             using curl, you can pass -F 'key=value' to send multipart form data.)"
        )));
    }
    let text = |name: &str| field(form, name).and_then(Field::text);
    let model = match (model, text("model")) {
        (Some(m), _) => m.to_owned(),
        (None, Some(m)) if !m.is_empty() => m.to_owned(),
        _ => {
            return Err(ApiError::bad_param(
                "Missing required parameter: 'model'.",
                "model",
                Some("missing_required_parameter"),
            ));
        }
    };
    let Some(file) = field(form, "file").filter(|f| f.file_name.is_some() || !f.data.is_empty())
    else {
        return Err(ApiError::bad_param(
            "Missing required parameter: 'file'.",
            "file",
            Some("missing_required_parameter"),
        ));
    };
    let format = match text("response_format").unwrap_or("json") {
        "json" => SttFormat::Json,
        "verbose_json" => {
            let (words, segments) = granularities(form)?;
            SttFormat::VerboseJson { words, segments }
        }
        "text" => SttFormat::Text,
        "srt" => SttFormat::Srt,
        "vtt" => SttFormat::Vtt,
        other => {
            return Err(ApiError::bad_param(
                format!(
                    "'{other}' is not one of ['json', 'text', 'srt', 'verbose_json', 'vtt'] - \
                     'response_format'"
                ),
                "response_format",
                Some("invalid_value"),
            ));
        }
    };
    let short = file.data.is_empty()
        || (file.data.starts_with(b"RIFF") && crate::text::audio_duration(&file.data) < 0.1);
    if short {
        return Err(ApiError::bad_param(
            "Audio file is too short. Minimum audio length is 0.1 seconds.",
            "file",
            Some("audio_too_short"),
        ));
    }
    Ok(SttReq {
        model,
        audio: file.data.clone(),
        language: text("language").map(str::to_owned),
        format,
        punctuate: true,
    })
}

/// `timestamp_granularities[]` (repeatable: `word`, `segment`; `segment` when absent) as
/// (words, segments). Only `verbose_json` carries timestamps; other formats ignore the field
/// (platform.openai.com/docs/api-reference/audio/createTranscription#audio-createtranscription-timestamp_granularities).
fn granularities(form: &[Field]) -> Result<(bool, bool), ApiError> {
    let (mut words, mut segments, mut any) = (false, false, false);
    let asked = form.iter().filter(|f| {
        matches!(
            f.name.as_str(),
            "timestamp_granularities[]" | "timestamp_granularities"
        )
    });
    for f in asked {
        any = true;
        match f.text() {
            Some("word") => words = true,
            Some("segment") => segments = true,
            other => {
                return Err(ApiError::bad_param(
                    format!(
                        "Invalid value: '{}'. Supported values are: 'word' and 'segment'.",
                        other.unwrap_or("")
                    ),
                    "timestamp_granularities",
                    Some("invalid_value"),
                ));
            }
        }
    }
    Ok(if any {
        (words, segments)
    } else {
        (false, true)
    })
}

fn language_name(code: Option<&str>) -> &'static str {
    match code.unwrap_or("en") {
        "de" => "german",
        "es" => "spanish",
        "fr" => "french",
        "it" => "italian",
        "ja" => "japanese",
        "nl" => "dutch",
        "pt" => "portuguese",
        "zh" => "chinese",
        _ => "english",
    }
}

fn timestamp(secs: f64, sep: char) -> String {
    let ms = (secs * 1000.0).round() as u64;
    format!(
        "{:02}:{:02}:{:02}{sep}{:03}",
        ms / 3_600_000,
        (ms / 60_000) % 60,
        (ms / 1000) % 60,
        ms % 1000
    )
}

/// Segments of about ten words.
fn segments(t: &Transcript) -> Vec<(f64, f64, String)> {
    t.words
        .chunks(10)
        .map(|ws| {
            let start = ws.first().map_or(0.0, |w| w.1);
            let end = ws.last().map_or(0.0, |w| w.2);
            let text: Vec<&str> = ws.iter().map(|w| w.0.as_str()).collect();
            (start, end, text.join(" "))
        })
        .collect()
}

pub(super) fn render(req: &SttReq, t: &Transcript) -> (&'static str, Bytes) {
    let usage = json!({"type": "duration", "seconds": t.duration.ceil() as u64});
    match req.format {
        SttFormat::Json => (JSON, json_bytes(&json!({"text": t.text, "usage": usage}))),
        // platform.openai.com/docs/api-reference/audio/verbose-json-object: `segments` and
        // `words` ([{"word", "start", "end"}]) each as the granularities ask.
        SttFormat::VerboseJson {
            words,
            segments: with_segments,
        } => {
            let mut body = json!({
                "task": "transcribe", "language": language_name(req.language.as_deref()),
                "duration": t.duration, "text": t.text, "usage": usage,
            });
            if with_segments {
                let segs: Vec<Value> = segments(t)
                    .into_iter()
                    .enumerate()
                    .map(|(i, (start, end, text))| {
                        json!({
                            "id": i, "seek": 0, "start": round3(start), "end": round3(end),
                            "text": format!(" {text}"), "tokens": [], "temperature": 0.0,
                            "avg_logprob": -0.2, "compression_ratio": 1.2,
                            "no_speech_prob": 0.01,
                        })
                    })
                    .collect();
                body["segments"] = Value::from(segs);
            }
            if words {
                // Words come without the punctuation the text carries.
                let ws: Vec<Value> = t
                    .words
                    .iter()
                    .map(|(w, start, end)| {
                        json!({
                            "word": w.trim_end_matches(|c: char| c.is_ascii_punctuation()),
                            "start": round3(*start), "end": round3(*end),
                        })
                    })
                    .collect();
                body["words"] = Value::from(ws);
            }
            (JSON, json_bytes(&body))
        }
        SttFormat::Text => (
            "text/plain; charset=utf-8",
            Bytes::from(format!("{}\n", t.text)),
        ),
        SttFormat::Srt | SttFormat::Vtt => {
            let vtt = req.format == SttFormat::Vtt;
            let mut out = String::from(if vtt { "WEBVTT\n\n" } else { "" });
            for (i, (start, end, text)) in segments(t).into_iter().enumerate() {
                let sep = if vtt { '.' } else { ',' };
                if !vtt {
                    out.push_str(&format!("{}\n", i + 1));
                }
                out.push_str(&format!(
                    "{} --> {}\n{text}\n\n",
                    timestamp(start, sep),
                    timestamp(end, sep)
                ));
            }
            ("text/plain; charset=utf-8", Bytes::from(out))
        }
    }
}
