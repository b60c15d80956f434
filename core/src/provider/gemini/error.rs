//! Google API error bodies → classified [`Error`]s.
//!
//! Shape (<https://ai.google.dev/gemini-api/docs/troubleshooting>,
//! <https://cloud.google.com/apis/design/errors>):
//! `{"error":{"code":429,"message":"…","status":"RESOURCE_EXHAUSTED","details":[…]}}`, where
//! `details` may hold `google.rpc.QuotaFailure` (violated quota ids), `google.rpc.RetryInfo`
//! (`retryDelay: "26s"`) and `google.rpc.ErrorInfo` (`reason: "API_KEY_INVALID"`).

use std::time::{Duration, SystemTime};

use time::{Month, OffsetDateTime, PrimitiveDateTime, Time};

use reqwest::header::HeaderMap;
use serde::Deserialize;
use serde_json::Value;

use crate::clock::Now;
use crate::error::{Error, ErrorKind};
use crate::provider::body::{kind_for_status, snippet};
use crate::ratelimit::{
    LimitReport, MAX_SANE_RETRY_AFTER, Per, Window, delay_in_message, go_duration, retry_after,
};

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

/// The limits a Gemini error body states: each `QuotaFailure` violation with a positive
/// `quotaValue` is a window of that many requests or tokens (by its `quotaId`:
/// `GenerateRequestsPerMinutePerProjectPerModel-FreeTier` → 10 requests a minute), which the
/// error says is used up. A per-minute window resets when `RetryInfo` says; a per-day one at
/// the next midnight Pacific time ("Requests per day (RPD) quotas reset at midnight Pacific
/// time", ai.google.dev/gemini-api/docs/rate-limits), not after a fixed cooldown.
pub(super) fn body_report(body: &[u8], now: Now) -> LimitReport {
    let mut report = LimitReport::default();
    if !body.windows(12).any(|w| w == b"QuotaFailure") {
        return report;
    }
    let Some(error) = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| match v {
            Value::Array(items) => items.into_iter().next(),
            v => Some(v),
        })
        .and_then(|mut v| v.get_mut("error").map(Value::take))
    else {
        return report;
    };
    let status: Status = serde_json::from_value(error).unwrap_or_default();
    let retry = read_details(&status.details).retry_delay;
    for d in &status.details {
        let kind = d.get("@type").and_then(Value::as_str).unwrap_or_default();
        if !kind.ends_with("google.rpc.QuotaFailure") {
            continue;
        }
        let violations = d.get("violations").and_then(Value::as_array);
        for v in violations.into_iter().flatten() {
            let id = v.get("quotaId").and_then(Value::as_str).unwrap_or_default();
            let Some(limit) = quota_value(v.get("quotaValue")).filter(|n| *n > 0) else {
                continue;
            };
            let slot = if id.contains("InputTokens") {
                &mut report.input_tokens
            } else if id.contains("OutputTokens") {
                &mut report.output_tokens
            } else if id.contains("Tokens") {
                &mut report.tokens
            } else if id.contains("Requests") {
                &mut report.requests
            } else {
                continue;
            };
            let window = quota_window(id, limit, retry, now);
            // Two violations of one kind (a minute's and a day's): the one that reopens later.
            if slot.is_none_or(|w| w.reset_at < window.reset_at) {
                *slot = Some(window);
            }
        }
    }
    report
}

/// The window of a violated quota `id` of `limit`: used up until it resets, per day at the
/// next midnight Pacific time, otherwise when `retry` says (and nothing said to be left when
/// nothing says when it resets).
fn quota_window(id: &str, limit: u64, retry: Option<Duration>, now: Now) -> Window {
    let (per, reset_at) = if id.contains("PerDay") {
        (
            Per::Day,
            Some(now.instant_at(next_midnight_pacific(now.wall))),
        )
    } else if id.contains("PerMinute") {
        (Per::Minute, retry.map(|d| now.instant + d))
    } else {
        (Per::Unknown, retry.map(|d| now.instant + d))
    };
    Window {
        limit: Some(limit),
        remaining: reset_at.map(|_| 0),
        reset_at,
        per,
    }
}

/// A `quotaValue`: a number, or a number in a string (the API sends both).
fn quota_value(v: Option<&Value>) -> Option<u64> {
    match v? {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// The first midnight in US Pacific time after `now`: 07:00 UTC while daylight time is in
/// effect there, else 08:00 UTC. Daylight time runs from the second Sunday of March at 02:00
/// standard time (10:00 UTC) to the first Sunday of November at 02:00 daylight time (09:00
/// UTC), as US law has it since 2007 (15 U.S.C. § 260a).
pub(crate) fn next_midnight_pacific(now: SystemTime) -> SystemTime {
    let utc = OffsetDateTime::from(now);
    let local_date = (utc - hours(pacific_hours_behind(utc))).date();
    let next = local_date.next_day().unwrap_or(local_date);
    let midnight = PrimitiveDateTime::new(next, Time::MIDNIGHT).assume_utc();
    // Midnight is before the 02:00 change: its offset is the one of 00:00 standard time.
    let behind = pacific_hours_behind(midnight + hours(8));
    (midnight + hours(behind)).into()
}

fn hours(n: u8) -> time::Duration {
    time::Duration::hours(i64::from(n))
}

/// How many hours US Pacific time is behind UTC at `utc`: 7 in daylight time, else 8.
fn pacific_hours_behind(utc: OffsetDateTime) -> u8 {
    let year = utc.year();
    // The `nth` Sunday of `month`, at `hour` UTC.
    let sunday = |month: Month, nth: u8, hour: u8| {
        let first = time::Date::from_calendar_date(year, month, 1).ok()?;
        let ahead = (7 - first.weekday().number_days_from_sunday()) % 7;
        let day = first + time::Duration::days(i64::from(ahead) + 7 * i64::from(nth - 1));
        Some(PrimitiveDateTime::new(day, Time::MIDNIGHT).assume_utc() + hours(hour))
    };
    match (sunday(Month::March, 2, 10), sunday(Month::November, 1, 9)) {
        (Some(start), Some(end)) if utc >= start && utc < end => 7,
        _ => 8,
    }
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
    match details.reason.as_deref() {
        Some("API_KEY_INVALID") => kind = ErrorKind::Auth,
        // A project whose billing is off (google/api/error_reason.proto: "the billing account
        // associated has been disabled"; the message says "enable billing … then retry"): the
        // key is good and the money is not there, as every other kind's spent credit —
        // QuotaExhausted, which fails over and reopens after the quota's cooldown, not a
        // rejected key that ends the request and closes the provider for good.
        Some("BILLING_DISABLED") => kind = ErrorKind::QuotaExhausted,
        _ => {}
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

    /// The next midnight Pacific time, across both daylight-time changes (2026: daylight
    /// from Sunday 8 March 10:00 UTC to Sunday 1 November 09:00 UTC).
    #[test]
    fn the_next_midnight_pacific_follows_daylight_time() {
        let at = |s: &str| -> SystemTime {
            OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
                .unwrap()
                .into()
        };
        let table = [
            // Winter: midnight is 08:00 UTC.
            ("2026-01-15T12:00:00Z", "2026-01-16T08:00:00Z"),
            ("2026-01-15T07:59:59Z", "2026-01-15T08:00:00Z"),
            ("2026-01-15T08:00:00Z", "2026-01-16T08:00:00Z"),
            // The day daylight time starts (Sunday 8 March): its midnight is still standard
            // time; the next one is daylight time, 07:00 UTC.
            ("2026-03-08T05:00:00Z", "2026-03-08T08:00:00Z"),
            ("2026-03-08T12:00:00Z", "2026-03-09T07:00:00Z"),
            // Summer.
            ("2026-07-04T06:59:59Z", "2026-07-04T07:00:00Z"),
            ("2026-07-04T07:00:00Z", "2026-07-05T07:00:00Z"),
            // The day daylight time ends (Sunday 1 November): its midnight is still daylight
            // time; the next is standard time.
            ("2026-11-01T05:00:00Z", "2026-11-01T07:00:00Z"),
            ("2026-11-01T12:00:00Z", "2026-11-02T08:00:00Z"),
            // New Year's Eve in Pacific time is New Year's Day in UTC.
            ("2026-12-31T20:00:00Z", "2027-01-01T08:00:00Z"),
            ("2027-01-01T03:00:00Z", "2027-01-01T08:00:00Z"),
        ];
        for (now, want) in table {
            assert_eq!(next_midnight_pacific(at(now)), at(want), "{now}");
        }
    }

    /// A 429's `QuotaFailure` with values reaches the report: a per-minute quota of 10
    /// requests resetting when `RetryInfo` says, a per-day quota of 250 resetting at midnight
    /// Pacific time; a quota without a value or of 0 states no window.
    #[test]
    fn the_quotas_a_429_names_become_windows_with_their_values_and_resets() {
        let now = Now {
            instant: tokio::time::Instant::now(),
            wall: OffsetDateTime::parse(
                "2026-07-04T12:00:00Z",
                &time::format_description::well_known::Rfc3339,
            )
            .unwrap()
            .into(),
        };
        let body = |violations: serde_json::Value, retry: Option<&str>| {
            let mut details = vec![
                json!({"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": violations}),
            ];
            if let Some(r) = retry {
                details.push(
                    json!({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": r}),
                );
            }
            json!({"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "quota", "details": details}})
                .to_string()
        };
        let minute = body(
            json!([{"quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier", "quotaValue": "10"}]),
            Some("26s"),
        );
        let r = body_report(minute.as_bytes(), now);
        let w = r.requests.unwrap();
        assert_eq!(
            (w.limit, w.remaining, w.per),
            (Some(10), Some(0), Per::Minute)
        );
        assert_eq!(w.reset_at, Some(now.instant + Duration::from_secs(26)));

        let day = body(
            json!([{"quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier", "quotaValue": 250},
                   {"quotaId": "GenerateContentInputTokensPerModelPerMinute-FreeTier", "quotaValue": "250000"}]),
            None,
        );
        let r = body_report(day.as_bytes(), now);
        let w = r.requests.unwrap();
        assert_eq!(
            (w.limit, w.remaining, w.per),
            (Some(250), Some(0), Per::Day)
        );
        // 12:00 UTC on 4 July is 05:00 PDT: the quota reopens at 07:00 UTC on 5 July.
        assert_eq!(
            w.reset_at,
            Some(now.instant + Duration::from_secs(19 * 3_600))
        );
        assert_eq!(
            r.exhausted_until(),
            Some(now.instant + Duration::from_secs(19 * 3_600))
        );
        // The token quota without a RetryInfo: its value, no reset, nothing said to be left.
        let t = r.input_tokens.unwrap();
        assert_eq!(
            (t.limit, t.remaining, t.reset_at),
            (Some(250_000), None, None)
        );

        let none = body(
            json!([{"quotaId": "GenerateRequestsPerDayPerProjectPerModel"},
                               {"quotaId": "GenerateContentInputTokensPerModelPerMinute", "quotaValue": 0}]),
            None,
        );
        assert!(body_report(none.as_bytes(), now).is_empty());
        assert!(body_report(b"{}", now).is_empty());
        assert!(body_report(b"not json QuotaFailure", now).is_empty());
    }

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
