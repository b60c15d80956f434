//! Google API error bodies → classified [`Error`]s.
//!
//! Shape (<https://ai.google.dev/gemini-api/docs/troubleshooting>,
//! <https://cloud.google.com/apis/design/errors>):
//! `{"error":{"code":429,"message":"…","status":"RESOURCE_EXHAUSTED","details":[…]}}`, where
//! `details` may hold `google.rpc.QuotaFailure` (violated quota ids), `google.rpc.RetryInfo`
//! (`retryDelay: "26s"`) and `google.rpc.ErrorInfo` (`reason: "API_KEY_INVALID"`).

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde::Deserialize;
use serde_json::Value;

use crate::clock::Now;
use crate::error::{Error, ErrorKind};
use crate::provider::body::{kind_for_status, snippet};
use crate::ratelimit::{MAX_SANE_RETRY_AFTER, delay_in_message, go_duration, retry_after};

/// Classifies a non-2xx response. A `Retry-After` header (from a proxy) takes precedence over
/// the body's `RetryInfo`.
pub(super) fn classify(status: u16, body: &[u8], headers: &HeaderMap, now: Now) -> Error {
    let object = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| match v {
            // The streaming endpoint without `alt=sse` wraps errors in an array.
            Value::Array(items) => items.into_iter().next(),
            v => Some(v),
        });
    let Some(error) = object.as_ref().and_then(|v| v.get("error")) else {
        return Error::new(
            kind_for_status(status),
            format!(
                "HTTP {status} without a Google error object: {}",
                snippet(body)
            ),
        );
    };
    let err = from_value(Some(status), error);
    match retry_after(headers, now) {
        Some(delay) if err.kind() == ErrorKind::RateLimited => err.with_retry_after(Some(delay)),
        _ => err,
    }
}

#[derive(Debug, Default, Deserialize)]
struct Status {
    code: Option<u16>,
    message: Option<String>,
    status: Option<String>,
    #[serde(default)]
    details: Vec<Value>,
}

/// What the `details` of an error say.
#[derive(Debug, Default, PartialEq)]
struct Details {
    /// `QuotaFailure` violation ids, in order.
    quota_ids: Vec<String>,
    /// A violated quota counts per day.
    per_day: bool,
    /// A violated quota's value (limit) is 0: nothing will pass until it is raised.
    zero_limit: bool,
    /// `RetryInfo.retryDelay`.
    retry_delay: Option<Duration>,
    /// `ErrorInfo.reason`.
    reason: Option<String>,
}

fn read_details(details: &[Value]) -> Details {
    let mut out = Details::default();
    for d in details {
        let kind = d.get("@type").and_then(Value::as_str).unwrap_or_default();
        if kind.ends_with("google.rpc.QuotaFailure") {
            let violations = d.get("violations").and_then(Value::as_array);
            for v in violations.into_iter().flatten() {
                let id = v.get("quotaId").and_then(Value::as_str).unwrap_or_default();
                let metric = v
                    .get("quotaMetric")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if id.contains("PerDay") || metric.contains("per_day") {
                    out.per_day = true;
                }
                let value = v.get("quotaValue");
                if value.and_then(Value::as_str) == Some("0")
                    || value.and_then(Value::as_u64) == Some(0)
                {
                    out.zero_limit = true;
                }
                if !id.is_empty() {
                    out.quota_ids.push(id.to_owned());
                }
            }
        } else if kind.ends_with("google.rpc.RetryInfo") {
            // A zero or absurd delay is no delay, as for `Retry-After` (found by
            // fuzz/fuzz_targets/adapter_responses.rs: `"retryDelay": "00s"`).
            out.retry_delay = d
                .get("retryDelay")
                .and_then(Value::as_str)
                .and_then(go_duration)
                .filter(|d| !d.is_zero() && *d <= MAX_SANE_RETRY_AFTER);
        } else if kind.ends_with("google.rpc.ErrorInfo") {
            out.reason = d.get("reason").and_then(Value::as_str).map(str::to_owned);
        }
    }
    out
}

/// Classifies one Google error object; `status` is the HTTP status when there was one (an
/// error inside a `200` stream has none, and its `code` stands in).
pub(super) fn from_value(status: Option<u16>, error: &Value) -> Error {
    let body: Status = serde_json::from_value(error.clone()).unwrap_or_default();
    let http = status.or(body.code);
    // A missing or blank message still says what happened (found by tests/proptests.rs).
    let message = body
        .message
        .filter(|m| !m.trim().is_empty())
        .unwrap_or_else(|| match http {
            Some(s) => format!("HTTP {s}: a Google error object without a message"),
            None => "a Google error object without a message".to_owned(),
        });
    let details = read_details(&body.details);
    let grpc = body.status.as_deref().unwrap_or_default();
    let mut kind = kind_for_grpc(grpc)
        .or_else(|| http.map(kind_for_status))
        .unwrap_or(ErrorKind::Server);
    if details.reason.as_deref() == Some("API_KEY_INVALID") {
        kind = ErrorKind::Auth;
    }
    let exhausted = details.per_day || details.zero_limit || states_zero_limit(&message);
    if kind == ErrorKind::RateLimited && exhausted {
        kind = ErrorKind::QuotaExhausted;
    }
    if kind == ErrorKind::InvalidRequest && message.contains("exceeds the maximum number of tokens")
    {
        kind = ErrorKind::ContextLengthExceeded;
    }
    let text = if details.quota_ids.is_empty() {
        message.clone()
    } else {
        format!("{message} [quota: {}]", details.quota_ids.join(", "))
    };
    let mut err = Error::new(kind, text);
    if let Some(code) = details
        .reason
        .or_else(|| (!grpc.is_empty()).then(|| grpc.to_owned()))
    {
        err = err.with_code(code);
    }
    if kind == ErrorKind::RateLimited {
        // A per-day quota is exhausted whatever RetryInfo says, so only a short limit keeps it.
        err = err.with_retry_after(details.retry_delay.or_else(|| delay_in_message(&message)));
    }
    err
}

/// "Quota exceeded for metric: …, limit: 0" (a model not offered on this tier at all).
fn states_zero_limit(message: &str) -> bool {
    message.match_indices("limit: 0").any(|(at, m)| {
        !message[at + m.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit() || c == '.')
    })
}

/// The canonical Google status codes
/// (<https://cloud.google.com/apis/design/errors#handling_errors>).
fn kind_for_grpc(status: &str) -> Option<ErrorKind> {
    Some(match status {
        "RESOURCE_EXHAUSTED" => ErrorKind::RateLimited,
        "INVALID_ARGUMENT" | "FAILED_PRECONDITION" | "OUT_OF_RANGE" => ErrorKind::InvalidRequest,
        "UNAUTHENTICATED" => ErrorKind::Auth,
        "PERMISSION_DENIED" => ErrorKind::PermissionDenied,
        "NOT_FOUND" => ErrorKind::NotFound,
        "ABORTED" | "ALREADY_EXISTS" => ErrorKind::Conflict,
        "INTERNAL" | "UNKNOWN" | "DATA_LOSS" => ErrorKind::Server,
        "UNAVAILABLE" => ErrorKind::Overloaded,
        "DEADLINE_EXCEEDED" => ErrorKind::Timeout,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_quota_failure_retry_info_and_error_info() {
        let d = read_details(&[
            json!({"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [
                {"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                 "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier", "quotaValue": "10"}
            ]}),
            json!({"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "RATE_LIMIT_EXCEEDED"}),
            json!({"@type": "type.googleapis.com/google.rpc.Help", "links": []}),
            json!("not an object"),
        ]);
        assert_eq!(
            d.quota_ids,
            ["GenerateRequestsPerMinutePerProjectPerModel-FreeTier"]
        );
        assert!(!d.per_day && !d.zero_limit);
        assert_eq!(d.reason.as_deref(), Some("RATE_LIMIT_EXCEEDED"));
    }

    #[test]
    fn a_per_day_metric_or_a_zero_limit_exhausts_the_quota() {
        // From a report of `generate_requests_per_model_per_day` with no quotaId suffix.
        let per_day = read_details(&[
            json!({"@type": "type.googleapis.com/google.rpc.QuotaFailure",
            "violations": [{"quotaMetric": "generativelanguage.googleapis.com/generate_requests_per_model_per_day",
                            "quotaId": "GenerateRequestsPerDayPerProjectPerModel"}]}),
        ]);
        assert!(per_day.per_day);
        let zero = read_details(&[
            json!({"@type": "type.googleapis.com/google.rpc.QuotaFailure",
            "violations": [{"quotaId": "GenerateContentInputTokensPerModelPerMinute-FreeTier", "quotaValue": 0}]}),
        ]);
        assert!(zero.zero_limit);
    }

    #[test]
    fn a_zero_limit_is_read_from_the_message_only_when_it_is_zero() {
        assert!(states_zero_limit(
            "metric: x, limit: 0, model: gemini-2.5-pro"
        ));
        assert!(states_zero_limit("limit: 0"));
        assert!(!states_zero_limit("limit: 0.5 per second"));
        assert!(!states_zero_limit("limit: 05"));
        assert!(!states_zero_limit("limit: 10"));
    }

    #[test]
    fn an_error_object_without_a_message_still_says_what_happened() {
        // Found by tests/proptests.rs: `{"error":{}}` or a blank message gave an empty one.
        for (status, error) in [
            (Some(429), json!({"status": "RESOURCE_EXHAUSTED"})),
            (Some(500), json!({"message": " \n"})),
            (None, json!({})),
            (None, json!(false)),
        ] {
            let err = from_value(status, &error);
            assert!(
                err.message()
                    .contains("a Google error object without a message"),
                "{err:?}"
            );
            if let Some(s) = status {
                assert!(err.message().starts_with(&format!("HTTP {s}")), "{err}");
            }
        }
        let err = from_value(Some(429), &json!({"status": "RESOURCE_EXHAUSTED"}));
        assert_eq!(err.kind(), ErrorKind::RateLimited);
    }

    #[test]
    fn a_zero_or_absurd_retry_delay_is_no_delay() {
        // Found by fuzz/fuzz_targets/adapter_responses.rs: `"retryDelay": "00s"` became a
        // zero `retry_after`, which would retry at once.
        let error = |delay: &str, message: &str| {
            json!({"code": 429, "message": message, "status": "RESOURCE_EXHAUSTED", "details": [
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}
            ]})
        };
        for delay in ["0s", "00s", "0.000s", "2592001s", "99999999999s"] {
            let err = from_value(Some(429), &error(delay, "Quota exceeded."));
            assert_eq!(err.kind(), ErrorKind::RateLimited, "{delay}");
            assert_eq!(err.retry_after(), None, "{delay}");
            // The message's own delay is still read.
            let err = from_value(Some(429), &error(delay, "Please retry in 26.5s."));
            assert_eq!(
                err.retry_after(),
                Some(Duration::from_millis(26_500)),
                "{delay}"
            );
        }
        let err = from_value(Some(429), &error("26s", "Quota exceeded."));
        assert_eq!(err.retry_after(), Some(Duration::from_secs(26)));
    }

    #[test]
    fn unknown_statuses_fall_back_to_the_code() {
        let err = from_value(
            None,
            &json!({"code": 503, "message": "later", "status": "NEW_THING"}),
        );
        assert_eq!(err.kind(), ErrorKind::Overloaded);
        assert_eq!(err.code(), Some("NEW_THING"));
        let err = from_value(None, &json!({"message": "??"}));
        assert_eq!(err.kind(), ErrorKind::Server);
        let err = from_value(Some(400), &json!({"code": "four hundred"}));
        assert_eq!(err.kind(), ErrorKind::InvalidRequest);
    }
}
