//! Deepgram pre-recorded audio: `POST /v1/listen?model=…` with the raw audio as the body
//! (`Content-Type: audio/*`), `Authorization: Token KEY`; answers
//! `{"metadata": {…}, "results": {"channels": [{"alternatives": [{"transcript", "words"}]}]}}`;
//! errors as `{"err_code", "err_msg", "request_id"}` (developers.deepgram.com/reference/listen-file,
//! …/reference/errors). A JSON body with a `url` is refused: the emulator fetches nothing.

use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, Method, StatusCode};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    ApiError, ChatReq, Cx, Field, JSON, Op, OpKind, Rendered, Route, StreamParts, SttFormat,
    SttReq, Usage, Wire, auth_scheme, content_type, hv, json_bytes, query_param,
};
use crate::headers::rfc3339;
use crate::text::{Transcript, round3};
use crate::tools::Answer;

pub(super) struct Deepgram;

/// Deepgram accepts files up to 2 GB; the emulator holds bodies in memory, so it stops at
/// 128 MiB with Deepgram's 413.
const BODY_LIMIT: usize = 128 << 20;

/// The model when the query names none.
const DEFAULT_MODEL: &str = "nova-3";

fn bad(msg: &str) -> ApiError {
    ApiError::bad(msg)
}

impl Wire for Deepgram {
    fn route(&self, method: &Method, path: &str, _query: Option<&str>) -> Option<Route> {
        (method == Method::POST && path == "/v1/listen").then(|| Route::new(OpKind::Transcribe))
    }

    fn authorize(&self, parts: &Parts, key: &str) -> Result<(), ApiError> {
        match auth_scheme(parts, "token") {
            None => Err(ApiError::MissingKey),
            Some(k) if k == key => Ok(()),
            Some(k) => Err(ApiError::WrongKey(k.to_owned())),
        }
    }

    fn body_limit(&self, _op: OpKind) -> usize {
        BODY_LIMIT
    }

    fn parse(
        &self,
        _route: &Route,
        parts: &Parts,
        body: &Bytes,
        _form: &[Field],
    ) -> Result<Op, ApiError> {
        #[derive(Deserialize)]
        struct UrlBody {
            url: Option<String>,
        }
        if content_type(parts) == "application/json" {
            return match serde_json::from_slice::<UrlBody>(body) {
                Ok(UrlBody { url: Some(_) }) => Err(ApiError::Raw {
                    status: 400,
                    body: json!({
                        "err_code": "REMOTE_CONTENT_ERROR",
                        "err_msg": "Could not fetch the audio URL: the emulator fetches no \
                                    remote content; send the audio as the request body.",
                    }),
                }),
                _ => Err(bad(
                    "Content-type was application/json, but we could not process the JSON \
                     payload.",
                )),
            };
        }
        if body.is_empty() {
            return Err(bad(
                "Bad Request: failed to process audio: corrupt or unsupported data",
            ));
        }
        let q = parts.uri.query();
        let on = |name: &str| query_param(q, name) == Some("true");
        Ok(Op::Stt(SttReq {
            model: query_param(q, "model")
                .filter(|m| !m.is_empty())
                .unwrap_or(DEFAULT_MODEL)
                .to_owned(),
            audio: body.clone(),
            language: query_param(q, "language").map(str::to_owned),
            format: SttFormat::Json,
            punctuate: on("punctuate") || on("smart_format"),
        }))
    }

    fn error(&self, e: &ApiError, cx: &Cx<'_>) -> Rendered {
        let (status, code, msg): (u16, &str, String) = match e {
            ApiError::NotFound => (404, "NOT_FOUND", format!("No route for {}", cx.path)),
            ApiError::MissingKey | ApiError::WrongKey(_) => {
                (401, "INVALID_AUTH", "Invalid credentials.".to_owned())
            }
            ApiError::BadRequest { message, .. } => (400, "Bad Request", message.clone()),
            ApiError::ModelNotFound(_) => (
                400,
                "Bad Request",
                "No such model/language/tier combination found.".to_owned(),
            ),
            ApiError::PayloadTooLarge { limit, .. } => (
                413,
                "PAYLOAD_TOO_LARGE",
                format!("Payload too large: the limit is {limit} bytes."),
            ),
            ApiError::RateLimited(_) => (
                429,
                "TOO_MANY_REQUESTS",
                "Too many requests. Please try again later".to_owned(),
            ),
            ApiError::InsufficientQuota => (
                402,
                "ASR_PAYMENT_REQUIRED",
                "Project does not have enough credits for an ASR request and does not have an \
                 overage agreement."
                    .to_owned(),
            ),
            ApiError::Overloaded => (
                503,
                "SERVICE_UNAVAILABLE",
                "The service is temporarily unavailable. Please try again later.".to_owned(),
            ),
            ApiError::Status(s) if *s >= 500 => (
                *s,
                "INTERNAL_SERVER_ERROR",
                "An internal server error occurred. Please retry.".to_owned(),
            ),
            ApiError::Status(s) => (
                *s,
                "Bad Request",
                StatusCode::from_u16(*s)
                    .ok()
                    .and_then(|c| c.canonical_reason())
                    .unwrap_or("Error")
                    .to_owned(),
            ),
            ApiError::Raw { status, body } => {
                let mut body = body.clone();
                body["request_id"] = json!(cx.request_id);
                return (
                    StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                    JSON,
                    json_bytes(&body),
                );
            }
        };
        (
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            JSON,
            json_bytes(&json!({"err_code": code, "err_msg": msg, "request_id": cx.request_id})),
        )
    }

    fn chat(&self, _req: &ChatReq, _a: &Answer, _usage: Usage, _cx: &Cx<'_>) -> Bytes {
        // No Deepgram route parses into a chat.
        Bytes::new()
    }

    fn chat_stream(&self, _req: &ChatReq, _a: &Answer, _u: Usage, _cx: &Cx<'_>) -> StreamParts {
        StreamParts::default()
    }

    fn stream_error(&self, _cx: &Cx<'_>) -> Bytes {
        Bytes::new()
    }

    fn transcript(&self, req: &SttReq, t: &Transcript, cx: &Cx<'_>) -> (&'static str, Bytes) {
        let model_id = "1abfe86b-e047-4eed-858a-35e5625b41ee";
        let shape = |w: &str| -> String {
            if req.punctuate {
                w.to_owned()
            } else {
                w.trim_end_matches('.').to_lowercase()
            }
        };
        let words: Vec<Value> = t
            .words
            .iter()
            .map(|(w, start, end)| {
                let mut v = json!({
                    "word": w.trim_end_matches('.').to_lowercase(),
                    "start": round3(*start), "end": round3(*end), "confidence": 0.99,
                });
                if req.punctuate {
                    v["punctuated_word"] = json!(w);
                }
                v
            })
            .collect();
        let transcript: Vec<String> = t.words.iter().map(|(w, _, _)| shape(w)).collect();
        let body = json!({
            "metadata": {
                "transaction_key": "deprecated",
                "request_id": cx.request_id,
                // The SHA-256 of the audio as sent (developers.deepgram.com/reference/listen-file
                // `metadata.sha256`; a required field of deepgram-sdk's ListenV1ResponseMetadata).
                "sha256": sha256_hex(&req.audio),
                "created": rfc3339(cx.wall),
                "duration": t.duration,
                "channels": 1,
                "models": [model_id],
                "model_info": {model_id: {"name": format!("general-{}", req.model), "version": "2025-01-01.0", "arch": req.model}},
            },
            "results": {"channels": [{"alternatives": [{
                "transcript": transcript.join(" "),
                "confidence": 0.99,
                "words": words,
            }]}]},
        });
        (JSON, json_bytes(&body))
    }

    fn id_headers(&self, cx: &Cx<'_>, h: &mut HeaderMap) {
        h.insert(HeaderName::from_static("dg-request-id"), hv(&cx.request_id));
    }
}

/// The SHA-256 of `data` as lower-case hex.
fn sha256_hex(data: &[u8]) -> String {
    use std::fmt::Write;
    let digest = ring::digest::digest(&ring::digest::SHA256, data);
    digest
        .as_ref()
        .iter()
        .fold(String::with_capacity(64), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::sha256_hex;

    #[test]
    fn the_audio_digest_is_lower_case_hex_sha256() {
        // FIPS 180-2 example vectors.
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
