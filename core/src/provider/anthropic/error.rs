//! Anthropic error bodies → classified [`Error`]s.
//!
//! Shape (<https://docs.claude.com/en/api/errors>):
//! `{"type":"error","error":{"type":"rate_limit_error","message":"…"},"request_id":"req_…"}`.
//! The same object arrives as the data of an `event: error` in a stream.

use serde::Deserialize;

use crate::error::{Error, ErrorKind};
use crate::provider::body::{kind_for_status, snippet};

#[derive(Debug, Deserialize)]
struct ErrorBody {
    error: Option<ErrorObject>,
    request_id: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ErrorObject {
    #[serde(rename = "type")]
    kind: Option<String>,
    message: Option<String>,
}

/// Classifies an error response (`status` is `None` for an error event inside a `200`
/// stream). The body's `error.type` decides when known; the status otherwise. A body that is
/// not Anthropic's JSON (a proxy's HTML page, nothing, invalid UTF-8) still yields an error
/// of the status's kind with a short, lossy snippet.
pub(super) fn classify(status: Option<u16>, body: &[u8]) -> Error {
    let parsed = serde_json::from_slice::<ErrorBody>(body)
        .ok()
        .and_then(|b| Some((b.error?, b.request_id)));
    let Some((obj, request_id)) = parsed else {
        let kind = status.map_or(ErrorKind::Decode, kind_for_status);
        let what = match status {
            Some(s) => format!("HTTP {s} without an Anthropic error object"),
            None => "an error event without an Anthropic error object".to_owned(),
        };
        return Error::new(kind, format!("{what}: {}", snippet(body)));
    };
    let vendor_type = obj.kind.unwrap_or_default();
    // An error object without a message still says what happened (found by fuzzing: an
    // empty message is no message).
    let message = obj
        .message
        .filter(|m| !m.trim().is_empty())
        .unwrap_or_else(|| match status {
            Some(s) => format!("HTTP {s}: an Anthropic error object without a message"),
            None => "an error event whose Anthropic error object has no message".to_owned(),
        });
    let kind = kind_for_type(&vendor_type)
        .or_else(|| status.map(kind_for_status))
        .unwrap_or(ErrorKind::Server);
    let kind = refine(kind, &message);
    let mut err = Error::new(kind, message).with_request_id(request_id);
    if !vendor_type.is_empty() {
        err = err.with_code(vendor_type);
    }
    err
}

/// The error types of <https://docs.claude.com/en/api/errors>.
fn kind_for_type(vendor_type: &str) -> Option<ErrorKind> {
    Some(match vendor_type {
        "invalid_request_error" => ErrorKind::InvalidRequest,
        "authentication_error" => ErrorKind::Auth,
        "permission_error" => ErrorKind::PermissionDenied,
        "not_found_error" => ErrorKind::NotFound,
        "request_too_large" => ErrorKind::PayloadTooLarge,
        "rate_limit_error" => ErrorKind::RateLimited,
        "api_error" => ErrorKind::Server,
        "overloaded_error" => ErrorKind::Overloaded,
        "billing_error" => ErrorKind::QuotaExhausted,
        "timeout_error" => ErrorKind::Timeout,
        _ => return None,
    })
}

/// Messages that say more than their type: a prompt over the context window, an account out
/// of credit or past its spend limit (both sent as `invalid_request_error`), and an
/// entitlement the account lacks sent as a `rate_limit_error` 429.
fn refine(kind: ErrorKind, message: &str) -> ErrorKind {
    let m = message.to_ascii_lowercase();
    // "Extra usage is required for long context requests.": a request over 200K input tokens
    // on an account without long-context access (docs.claude.com/en/docs/build-with-claude/
    // context-windows, "1M token context window": an organization needs the tier or extra
    // usage for it). It comes as a 429 `rate_limit_error`, but waiting never admits it: the
    // request is refused, not the key (seen verbatim in github.com/anthropics/claude-code
    // issues 41054, 27252, 42616).
    if kind == ErrorKind::RateLimited && m.contains("extra usage is required") {
        return ErrorKind::PermissionDenied;
    }
    if kind != ErrorKind::InvalidRequest {
        return kind;
    }
    if m.contains("prompt is too long") || m.contains("exceed context limit") {
        ErrorKind::ContextLengthExceeded
    } else if m.contains("credit balance is too low") || m.contains("api usage limits") {
        ErrorKind::QuotaExhausted
    } else {
        kind
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(t: &str, msg: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "type": "error", "error": {"type": t, "message": msg}, "request_id": "req_1"
        }))
        .unwrap()
    }

    #[test]
    fn the_error_type_decides_over_the_status() {
        let err = classify(Some(500), &body("overloaded_error", "Overloaded"));
        assert_eq!(err.kind(), ErrorKind::Overloaded);
        assert_eq!(err.code(), Some("overloaded_error"));
        assert_eq!(err.request_id(), Some("req_1"));
    }

    #[test]
    fn an_error_event_without_status_uses_its_type() {
        assert_eq!(
            classify(None, &body("rate_limit_error", "slow down")).kind(),
            ErrorKind::RateLimited
        );
        assert_eq!(
            classify(None, &body("new_error", "?")).kind(),
            ErrorKind::Server
        );
        assert_eq!(classify(None, b"not json").kind(), ErrorKind::Decode);
    }

    #[test]
    fn an_error_object_without_a_message_still_says_what_happened() {
        // Found by fuzz/fuzz_targets/adapter_responses.rs: a missing or blank `message`
        // gave an error whose message was empty.
        for (status, body) in [
            (
                Some(503),
                br#"{"type":"error","error":{"type":"overloaded_error"}}"#.as_slice(),
            ),
            (
                Some(429),
                br#"{"error":{"type":"rate_limit_error","message":"  "}}"#,
            ),
            (None, br#"{"error":{}}"#),
        ] {
            let err = classify(status, body);
            assert!(!err.message().trim().is_empty(), "{err:?}");
            assert!(
                err.message().contains("without a message")
                    || err.message().contains("has no message"),
                "{err}"
            );
            if let Some(s) = status {
                assert!(err.message().contains(&format!("HTTP {s}")), "{err}");
            }
        }
        assert_eq!(
            classify(Some(503), br#"{"error":{"type":"overloaded_error"}}"#).kind(),
            ErrorKind::Overloaded
        );
    }

    #[test]
    fn messages_refine_invalid_request() {
        let too_long = body(
            "invalid_request_error",
            "prompt is too long: 208310 tokens > 200000 maximum",
        );
        assert_eq!(
            classify(Some(400), &too_long).kind(),
            ErrorKind::ContextLengthExceeded
        );
        let credit = body(
            "invalid_request_error",
            "Your credit balance is too low to access the Anthropic API.",
        );
        assert_eq!(
            classify(Some(400), &credit).kind(),
            ErrorKind::QuotaExhausted
        );
    }
}
