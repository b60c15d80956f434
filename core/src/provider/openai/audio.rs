//! Audio transcriptions: a multipart upload, answered as `json`, `verbose_json` or `text`.

use std::time::Duration;

use url::Url;

use super::error::{ApiError, from_api_error, snippet};
use super::wire::TranscriptionWire;
use crate::error::{Error, Result};
use crate::http::{Body, FormPart, HttpRequest, RawResponse};
use crate::id::ProviderId;
use crate::provider::RequestContext;
use crate::types::{Segment, Transcript, TranscriptionRequest};

/// Builds `POST url` with the multipart form (no credential header). The form is a list of
/// parts holding the audio as `Bytes`, so the transport rebuilds it for every send.
pub(crate) fn build_request(
    id: &ProviderId,
    url: Url,
    req: &TranscriptionRequest,
    ctx: &RequestContext<'_>,
) -> Result<HttpRequest> {
    if ctx.model.trim().is_empty() {
        return Err(Error::config(format!(
            "no transcription model for provider `{id}`: set \
             `providers.{id}.transcription_model` or the request's model"
        )));
    }
    let audio = &req.audio;
    let mut parts = vec![
        FormPart::file("file", audio.bytes(), audio.file_name(), audio.mime_type()),
        FormPart::text("model", ctx.model),
    ];
    if let Some(language) = &req.language {
        parts.push(FormPart::text("language", language));
    }
    if let Some(prompt) = &req.prompt {
        parts.push(FormPart::text("prompt", prompt));
    }
    parts.push(FormPart::text(
        "response_format",
        req.response_format.as_str(),
    ));
    if let Some(t) = req.temperature {
        parts.push(FormPart::text("temperature", t.to_string()));
    }
    let mut http = HttpRequest::new(reqwest::Method::POST, url);
    http.body = Body::Multipart(parts);
    Ok(http)
}

/// Parses a 2xx transcription body. The format is read from the response itself (the
/// `Content-Type`, else the body's first byte), because a host may ignore the requested one.
///
/// An empty body is accepted only as `text/plain` (silence transcribes to nothing).
pub(crate) fn parse_response(
    id: &ProviderId,
    raw: &RawResponse,
    model: &str,
    request_id: Option<String>,
) -> Result<Transcript> {
    let decode = |what: String| {
        Error::decode(what)
            .with_provider(id.clone())
            .with_status(raw.status)
    };
    let content_type = raw
        .headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.to_ascii_lowercase());
    let first = raw.body.iter().find(|b| !b.is_ascii_whitespace()).copied();
    let is_json = match content_type.as_deref() {
        Some(ct) if ct.contains("json") => true,
        Some(ct) if ct.starts_with("text/plain") => false,
        Some(ct) => {
            return Err(decode(format!(
                "unexpected content type `{ct}` for a transcription: {}",
                snippet(&raw.body)
            )));
        }
        None => first == Some(b'{'),
    };
    let mut transcript = if is_json {
        from_json(id, raw, model, decode)?
    } else {
        let text = std::str::from_utf8(&raw.body)
            .map_err(|_| decode("transcription text is not valid UTF-8".to_owned()))?;
        if text.trim().is_empty() && content_type.is_none() {
            return Err(decode("empty transcription body".to_owned()));
        }
        Transcript::new(id.clone(), model, text.trim_end_matches(['\r', '\n']))
    };
    transcript.request_id = request_id;
    Ok(transcript)
}

fn from_json(
    id: &ProviderId,
    raw: &RawResponse,
    model: &str,
    decode: impl Fn(String) -> Error,
) -> Result<Transcript> {
    let wire: TranscriptionWire = serde_json::from_slice(&raw.body).map_err(|e| {
        decode(if raw.body.is_empty() {
            "empty transcription body".to_owned()
        } else if raw.body.first() == Some(&b'{') {
            format!("malformed transcription JSON: {e}")
        } else {
            format!(
                "expected a transcription JSON object, got: {}",
                snippet(&raw.body)
            )
        })
    })?;
    if let Some(err) = wire.error.as_ref().and_then(ApiError::from_value) {
        return Err(from_api_error(id, &err).with_status(raw.status));
    }
    let text = wire
        .text
        .ok_or_else(|| decode("transcription has no `text`".to_owned()))?;
    let mut t = Transcript::new(id.clone(), model, text);
    t.language = wire.language.filter(|l| !l.is_empty());
    t.duration = wire
        .duration
        .map(|d| seconds(d).ok_or_else(|| decode(format!("invalid `duration`: {d}"))))
        .transpose()?;
    for (i, s) in wire.segments.unwrap_or_default().into_iter().enumerate() {
        let time = |v: Option<f64>, field: &str| {
            v.and_then(seconds)
                .ok_or_else(|| decode(format!("`segments[{i}].{field}` is missing or invalid")))
        };
        t.segments.push(Segment {
            start: time(s.start, "start")?,
            end: time(s.end, "end")?,
            text: s.text.unwrap_or_default(),
        });
    }
    Ok(t)
}

fn seconds(s: f64) -> Option<Duration> {
    Duration::try_from_secs_f64(s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::types::AudioInput;
    use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};

    fn id() -> ProviderId {
        ProviderId::new("whisper")
    }

    fn raw(ct: Option<&str>, body: &'static [u8]) -> RawResponse {
        let mut h = HeaderMap::new();
        if let Some(ct) = ct {
            h.insert(CONTENT_TYPE, HeaderValue::from_str(ct).unwrap());
        }
        RawResponse::new(200, h, body)
    }

    #[test]
    fn writes_only_the_fields_that_are_set() {
        let audio = AudioInput::from_bytes(vec![1u8; 8], "a.mp3").unwrap();
        let req = TranscriptionRequest::new(audio);
        let url: Url = "http://127.0.0.1:1/v1/audio/transcriptions"
            .parse()
            .unwrap();
        let http =
            build_request(&id(), url, &req, &RequestContext::new("whisper-1", None)).unwrap();
        let Body::Multipart(parts) = &http.body else {
            panic!("not multipart")
        };
        let names: Vec<_> = parts
            .iter()
            .map(|p| match p {
                FormPart::Text { name, .. } | FormPart::File { name, .. } => name.as_str(),
            })
            .collect();
        assert_eq!(names, ["file", "model", "response_format"]);
    }

    #[test]
    fn reads_the_format_from_the_response() {
        let t = parse_response(&id(), &raw(None, b"{\"text\":\"hi\"}"), "m", None).unwrap();
        assert_eq!(t.text, "hi");
        let t = parse_response(
            &id(),
            &raw(Some("text/plain; charset=utf-8"), b"hi there\n"),
            "m",
            None,
        )
        .unwrap();
        assert_eq!(t.text, "hi there");
        let t = parse_response(&id(), &raw(Some("text/plain"), b""), "m", None).unwrap();
        assert_eq!(t.text, "");
        for bad in [
            raw(None, b""),
            raw(Some("application/json"), b""),
            raw(Some("text/html"), b"<html>"),
            raw(Some("text/plain"), b"\xff\xfe"),
            raw(Some("application/json"), b"{\"language\":\"en\"}"),
            raw(
                Some("application/json"),
                b"{\"text\":\"x\",\"duration\":-1}",
            ),
            raw(
                Some("application/json"),
                b"{\"text\":\"x\",\"segments\":[{\"start\":0,\"text\":\"x\"}]}",
            ),
        ] {
            let err = parse_response(&id(), &bad, "m", None).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Decode, "{err}");
            assert_eq!(err.status(), Some(200));
        }
    }
}
