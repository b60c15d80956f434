//! Reading and writing provider bodies safely: JSON decoding whose errors never quote a model's
//! answer, short snippets of non-JSON bodies for error messages, and the kind an HTTP status
//! means when the body says nothing more.

use serde::de::DeserializeOwned;

use crate::error::{Error, ErrorKind, Result};

/// Parses a JSON body; `what` names what was expected ("a Messages API response").
///
/// An empty body, a non-JSON body (a proxy's HTML page, invalid UTF-8) and malformed JSON are
/// `Decode` errors saying so. A non-JSON body is quoted as a short snippet; a JSON body never
/// is, since it may hold the model's answer or a transcript.
pub(crate) fn decode_json<T: DeserializeOwned>(body: &[u8], what: &str) -> Result<T> {
    let trimmed = body.trim_ascii_start();
    if trimmed.is_empty() {
        return Err(Error::decode(format!(
            "empty body where {what} was expected"
        )));
    }
    if !matches!(trimmed.first(), Some(b'{' | b'[')) {
        return Err(Error::decode(format!(
            "expected {what} in JSON, got: {}",
            snippet(body)
        )));
    }
    serde_json::from_slice(body).map_err(|e| json_error(&e, what))
}

/// A `Decode` error for a JSON parse failure, with position but no quoted data.
pub(crate) fn json_error(e: &serde_json::Error, what: &str) -> Error {
    let why = match e.classify() {
        serde_json::error::Category::Data => "unexpected shape",
        serde_json::error::Category::Eof => "truncated JSON",
        _ => "malformed JSON",
    };
    Error::decode(format!(
        "{what}: {why} at line {} column {}",
        e.line(),
        e.column()
    ))
}

/// A short, lossy, single-line excerpt of a body for an error message.
pub(crate) fn snippet(body: &[u8]) -> String {
    const MAX: usize = 160;
    if body.iter().all(u8::is_ascii_whitespace) {
        return "(empty body)".to_owned();
    }
    let text = String::from_utf8_lossy(body);
    let mut out = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if out.len() > MAX {
        let mut end = MAX;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
        out.push('…');
    }
    out
}

/// The kind an HTTP error status means when the body does not say more.
pub fn kind_for_status(status: u16) -> ErrorKind {
    match status {
        401 => ErrorKind::Auth,
        // OpenRouter and Together answer 402 when the account's credits are used up.
        402 => ErrorKind::QuotaExhausted,
        403 => ErrorKind::PermissionDenied,
        404 => ErrorKind::NotFound,
        408 | 504 => ErrorKind::Timeout,
        409 => ErrorKind::Conflict,
        413 => ErrorKind::PayloadTooLarge,
        429 => ErrorKind::RateLimited,
        // Groq's own status for "flex tier at capacity" (`capacity_exceeded`), documented as
        // retryable: console.groq.com/docs/errors, console.groq.com/docs/flex-processing.
        498 => ErrorKind::Overloaded,
        503 | 529 => ErrorKind::Overloaded,
        500..=599 => ErrorKind::Server,
        // 400, 422 and every other 4xx.
        400..=499 => ErrorKind::InvalidRequest,
        // A redirect that was not followed, or a status outside HTTP's classes: an answer
        // that cannot be read as this API's.
        _ => ErrorKind::Decode,
    }
}

/// An `f32` request parameter as the `f64` of its shortest decimal form, so `0.7` is sent as
/// `0.7`, not `0.699999988079071`.
///
/// # Errors
///
/// `InvalidRequest` naming `field` when the value is NaN or infinite (JSON cannot carry it).
pub(crate) fn json_f32(v: f32, field: &str) -> Result<f64> {
    if !v.is_finite() {
        return Err(Error::new(
            ErrorKind::InvalidRequest,
            format!("`{field}` must be a finite number, got {v}"),
        ));
    }
    Ok(v.to_string().parse().unwrap_or(f64::from(v)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct Shape {
        #[allow(dead_code)]
        items: Vec<u32>,
    }

    #[test]
    fn decode_errors_say_what_was_wrong_without_quoting_json() {
        let err = decode_json::<Shape>(br#"{"items": "secret answer"}"#, "a list").unwrap_err();
        assert!(err.is_decode());
        assert!(err.message().contains("unexpected shape"), "{err}");
        assert!(!err.message().contains("secret answer"), "{err}");
        let err = decode_json::<Shape>(br#"{"items": [1,"#, "a list").unwrap_err();
        assert!(err.message().contains("truncated"), "{err}");
        let err = decode_json::<Shape>(b"<html>502 Bad Gateway</html>", "a list").unwrap_err();
        assert!(err.message().contains("<html>502 Bad Gateway"), "{err}");
        let err = decode_json::<Shape>(b"  \n", "a list").unwrap_err();
        assert!(err.message().contains("empty body"), "{err}");
        let err = decode_json::<Shape>(b"\xff\xfe", "a list").unwrap_err();
        assert!(err.is_decode());
    }

    #[test]
    fn snippets_are_short_single_line_and_lossy() {
        assert_eq!(snippet(b""), "(empty body)");
        assert_eq!(
            snippet(b"<html>\n  <h1>502</h1>\n</html>"),
            "<html> <h1>502</h1> </html>"
        );
        assert!(snippet(b"\xff\xfeok").ends_with("ok"));
        let long = snippet("é".repeat(500).as_bytes());
        assert!(long.len() <= 160 + '…'.len_utf8());
    }

    #[test]
    fn statuses_map_to_kinds() {
        for (status, kind) in [
            (400, ErrorKind::InvalidRequest),
            (401, ErrorKind::Auth),
            (402, ErrorKind::QuotaExhausted),
            (403, ErrorKind::PermissionDenied),
            (404, ErrorKind::NotFound),
            (408, ErrorKind::Timeout),
            (409, ErrorKind::Conflict),
            (413, ErrorKind::PayloadTooLarge),
            (422, ErrorKind::InvalidRequest),
            (429, ErrorKind::RateLimited),
            (498, ErrorKind::Overloaded),
            (499, ErrorKind::InvalidRequest),
            (500, ErrorKind::Server),
            (502, ErrorKind::Server),
            (503, ErrorKind::Overloaded),
            (504, ErrorKind::Timeout),
            (529, ErrorKind::Overloaded),
            (302, ErrorKind::Decode),
            (600, ErrorKind::Decode),
        ] {
            assert_eq!(kind_for_status(status), kind, "{status}");
        }
    }

    #[test]
    fn floats_keep_their_decimal_form_and_non_finite_ones_are_rejected() {
        assert_eq!(json_f32(0.7, "t").unwrap(), 0.7);
        assert_eq!(json_f32(1.0, "t").unwrap(), 1.0);
        let err = json_f32(f32::NAN, "temperature").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidRequest);
        assert!(err.message().contains("`temperature`"), "{err}");
        assert!(json_f32(f32::INFINITY, "t").is_err());
    }
}
