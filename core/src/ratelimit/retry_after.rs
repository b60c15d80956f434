//! `retry-after-ms`, `Retry-After` and `x-should-retry`.

// Internal: reachable from outside only with the `test-util` feature (tests, benches and
// fuzzers); without it every `pub` here is crate-private.
#![cfg_attr(not(feature = "test-util"), allow(unreachable_pub, dead_code))]

use std::time::Duration;

use reqwest::header::HeaderMap;

use super::duration::{decimal_millis, decimal_seconds};
use super::value::header;
use crate::clock::Now;

/// The longest delay a `Retry-After` (or a delay in a message) is taken as: 30 days. A valid
/// longer one (an HTTP date decades ahead) is this long — the provider said "not for a long
/// while", which is never "retry in a second".
///
/// A long delay (a day, for an exhausted daily quota) is returned as stated: deciding that it
/// is too long to wait for is the router's job (`max_retry_after`: the provider is skipped for
/// that long and the request fails over), not the parser's.
pub const MAX_SANE_RETRY_AFTER: Duration = Duration::from_secs(30 * 86_400);

/// The delay a response asks for, from its headers.
///
/// Precedence: `retry-after-ms` (Azure OpenAI, and the OpenAI SDKs' convention) when present
/// and valid; then `Retry-After` as delay-seconds (a fraction such as `1.5` is tolerated) or
/// an HTTP-date in any of the three RFC 9110 formats (IMF-fixdate, RFC 850, asctime), turned
/// into a delay against `now.wall`.
///
/// Returns `None` when no usable value is present: negative, `NaN`, `inf`, exponent forms,
/// garbage, a date at or before now, or a zero delay (the caller then falls back to jittered
/// backoff). A delay above [`MAX_SANE_RETRY_AFTER`] is that maximum.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use reqwest::header::{HeaderMap, HeaderValue};
/// use llm_failover::clock::Now;
/// use llm_failover::ratelimit::retry_after;
///
/// let now = Now {
///     instant: tokio::time::Instant::now(),
///     wall: SystemTime::UNIX_EPOCH + Duration::from_secs(1_717_243_200), // 2024-06-01T12:00:00Z
/// };
/// let mut headers = HeaderMap::new();
/// headers.insert("retry-after", HeaderValue::from_static("Sat, 01 Jun 2024 12:00:30 GMT"));
/// assert_eq!(retry_after(&headers, now), Some(Duration::from_secs(30)));
///
/// headers.insert("retry-after-ms", HeaderValue::from_static("1500"));
/// assert_eq!(retry_after(&headers, now), Some(Duration::from_millis(1500)));
/// ```
pub fn retry_after(headers: &HeaderMap, now: Now) -> Option<Duration> {
    header(headers, "retry-after-ms")
        .and_then(decimal_millis)
        .and_then(sane_delay)
        .or_else(|| {
            let v = header(headers, "retry-after")?;
            let delay = decimal_seconds(v)
                .or_else(|| now.until_wall(httpdate::parse_http_date(v).ok()?))?;
            sane_delay(delay)
        })
}

/// `x-should-retry: true|false` (trimmed, any case), sent by OpenAI and Anthropic to override
/// the status-based retry decision; `None` when absent or anything else.
pub fn should_retry(headers: &HeaderMap) -> Option<bool> {
    let v = header(headers, "x-should-retry")?;
    if v.eq_ignore_ascii_case("true") {
        Some(true)
    } else if v.eq_ignore_ascii_case("false") {
        Some(false)
    } else {
        None
    }
}

/// A stated delay worth honouring: positive, and at most [`MAX_SANE_RETRY_AFTER`].
pub(super) fn sane_delay(delay: Duration) -> Option<Duration> {
    (!delay.is_zero()).then_some(delay.min(MAX_SANE_RETRY_AFTER))
}

#[cfg(test)]
mod tests {
    use super::super::value::test_support::{Pairs, fixed_now, headers};
    use super::*;

    fn secs(n: u64) -> Option<Duration> {
        Some(Duration::from_secs(n))
    }

    fn ms(n: u64) -> Option<Duration> {
        Some(Duration::from_millis(n))
    }

    #[test]
    fn retry_after_reads_every_documented_form() {
        // The fixed wall clock is 2024-06-01T12:00:00Z (a Saturday).
        let cases: &[(Pairs, Option<Duration>)] = &[
            // https://www.rfc-editor.org/rfc/rfc9110#field.retry-after ("Retry-After: 120")
            (&[("retry-after", "120")], secs(120)),
            // https://docs.anthropic.com/en/api/rate-limits#response-headers
            // ("retry-after: the number of seconds to wait until you can retry")
            (&[("retry-after", "60")], secs(60)),
            // A fractional delay is tolerated.
            (&[("retry-after", "1.5")], ms(1_500)),
            (&[("Retry-After", " 7 ")], secs(7)),
            // https://learn.microsoft.com/en-us/azure/ai-foundry/openai/how-to/quota
            // (Azure OpenAI 429s carry retry-after-ms and retry-after); ms wins.
            (
                &[("retry-after-ms", "1500"), ("retry-after", "2")],
                ms(1_500),
            ),
            (
                &[("retry-after-ms", "250.5")],
                Some(Duration::from_micros(250_500)),
            ),
            // An invalid retry-after-ms falls back to Retry-After.
            (&[("retry-after-ms", "-1"), ("retry-after", "2")], secs(2)),
            (&[("retry-after-ms", "0"), ("retry-after", "2")], secs(2)),
            (&[("retry-after-ms", "soon"), ("retry-after", "2")], secs(2)),
            // RFC 9110 HTTP-date, all three formats: exact seconds from the fixed `now`.
            (
                &[("retry-after", "Sat, 01 Jun 2024 12:00:30 GMT")],
                secs(30),
            ),
            (
                &[("retry-after", "Saturday, 01-Jun-24 12:00:30 GMT")],
                secs(30),
            ),
            (&[("retry-after", "Sat Jun  1 12:00:30 2024")], secs(30)),
            (
                &[("retry-after", "Sun, 02 Jun 2024 12:00:00 GMT")],
                secs(86_400),
            ),
            // A day is a legitimate answer; the router decides whether to wait for it.
            (&[("retry-after", "86400")], secs(86_400)),
            (&[("retry-after", "2592000")], secs(2_592_000)),
        ];
        for (pairs, want) in cases {
            assert_eq!(
                retry_after(&headers(pairs), fixed_now()),
                *want,
                "headers {pairs:?}"
            );
        }
    }

    #[test]
    fn retry_after_ignores_bad_past_and_absurd_values() {
        let cases: &[&[(&str, &str)]] = &[
            &[],
            &[("retry-after", "-5")],
            &[("retry-after", "NaN")],
            &[("retry-after", "nan")],
            &[("retry-after", "inf")],
            &[("retry-after", "-inf")],
            &[("retry-after", "infinity")],
            &[("retry-after", "1e400")],
            &[("retry-after", "1e3")],
            &[("retry-after", "0")],
            &[("retry-after", "")],
            &[("retry-after", "soon")],
            &[("retry-after", "30s")],
            &[("retry-after", "0x10")],
            // Past and present HTTP-dates.
            &[("retry-after", "Sat, 01 Jun 2024 11:59:30 GMT")],
            &[("retry-after", "Sat, 01 Jun 2024 12:00:00 GMT")],
            &[("retry-after", "Thu, 01 Jan 1970 00:00:00 GMT")],
            // Wrong weekday: not a valid HTTP-date.
            &[("retry-after", "Mon, 01 Jun 2024 12:00:30 GMT")],
            &[("retry-after-ms", "NaN")],
            // A number no duration can hold is garbage, not a delay.
            &[("retry-after", "99999999999999999999999")],
        ];
        for pairs in cases {
            assert_eq!(
                retry_after(&headers(pairs), fixed_now()),
                None,
                "headers {pairs:?}"
            );
        }
    }

    /// Found testing against documented behaviour: a date decades ahead was "invalid" and the
    /// provider was retried after about a second. A valid delay is never garbage: longer than
    /// 30 days, it is 30 days.
    #[test]
    fn a_valid_delay_beyond_the_maximum_is_the_maximum() {
        let cases: [&[(&str, &str)]; 3] = [
            &[("retry-after", "2592001")],
            &[("retry-after", "Fri, 31 Dec 9999 23:59:59 GMT")],
            &[("retry-after-ms", "2592000001")],
        ];
        for pairs in cases {
            assert_eq!(
                retry_after(&headers(pairs), fixed_now()),
                Some(MAX_SANE_RETRY_AFTER),
                "headers {pairs:?}"
            );
        }
    }

    #[test]
    fn retry_after_ignores_non_utf8_values() {
        let mut map = HeaderMap::new();
        map.insert(
            "retry-after",
            reqwest::header::HeaderValue::from_bytes(b"\xff\xfe30").expect("opaque bytes"),
        );
        assert_eq!(retry_after(&map, fixed_now()), None);
    }

    #[test]
    fn should_retry_reads_true_and_false_only() {
        // https://github.com/openai/openai-python/blob/main/src/openai/_base_client.py
        // (`x-should-retry: true|false` overrides the status-based decision)
        let cases: &[(Pairs, Option<bool>)] = &[
            (&[("x-should-retry", "true")], Some(true)),
            (&[("x-should-retry", "false")], Some(false)),
            (&[("x-should-retry", " TRUE ")], Some(true)),
            (&[("X-Should-Retry", "False")], Some(false)),
            (&[("x-should-retry", "yes")], None),
            (&[("x-should-retry", "1")], None),
            (&[("x-should-retry", "")], None),
            (&[], None),
        ];
        for (pairs, want) in cases {
            assert_eq!(should_retry(&headers(pairs)), *want, "headers {pairs:?}");
        }
    }
}
