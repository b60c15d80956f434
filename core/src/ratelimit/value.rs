//! Reading one header value: counts, relative and wall-clock resets, converted once to an
//! [`Instant`] through the injected [`Now`].
//!
//! Every reader returns `None` for a value it cannot read (non-UTF-8, non-numeric, negative,
//! overflowing, absurd): a bad field is unknown, never zero.

use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tokio::time::Instant;

use super::Per;
use super::duration::{decimal_nanos_of_seconds, decimal_seconds, go_duration, nanos_to_duration};
use crate::clock::Now;

/// A reset further away than this is not a rate-limit window but garbage (a misread epoch, a
/// date in the year 9999): it is ignored. Generous enough for monthly quotas.
pub(super) const MAX_SANE_RESET: Duration = Duration::from_secs(366 * 86_400);

/// The first value of `name`, trimmed, when it is visible ASCII and not empty.
pub(super) fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    let v = headers.get(name)?.to_str().ok()?.trim();
    (!v.is_empty()).then_some(v)
}

/// Every value of `name` joined with `,` (how HTTP combines repeated list fields), skipping
/// values that are not visible ASCII.
pub(super) fn header_list(headers: &HeaderMap, name: &str) -> Option<String> {
    let parts: Vec<&str> = headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .collect();
    (!parts.is_empty()).then(|| parts.join(","))
}

/// A non-negative integer count (`limit`, `remaining`). `-1` (Azure's "unknown"), fractions,
/// signs and overflow are rejected.
pub(super) fn count(v: &str) -> Option<u64> {
    let v = v.trim();
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

/// The window a limit counts over, from its length in seconds.
pub(super) fn per_from_window_secs(secs: u64) -> Per {
    match secs {
        60 => Per::Minute,
        86_400 => Per::Day,
        _ => Per::Unknown,
    }
}

/// `now + delay`, for a reset stated relative to the response.
pub(super) fn after(now: Now, delay: Duration) -> Option<Instant> {
    if delay > MAX_SANE_RESET {
        return None;
    }
    now.instant.checked_add(delay)
}

/// The instant of a wall-clock reset; one at or before `now` clamps to `now`.
pub(super) fn at_wall(now: Now, wall: SystemTime) -> Option<Instant> {
    if wall.duration_since(now.wall).unwrap_or_default() > MAX_SANE_RESET {
        return None;
    }
    Some(now.instant_at(wall))
}

/// A relative reset: a Go-style duration (`6m0s`) or bare seconds (`30`, `1.5`).
pub(super) fn relative_reset(v: &str, now: Now) -> Option<Instant> {
    let delay = go_duration(v).or_else(|| decimal_seconds(v))?;
    after(now, delay)
}

/// An RFC 3339 instant (`2024-06-01T12:00:30Z`, Anthropic's reset headers).
pub(super) fn rfc3339(v: &str) -> Option<SystemTime> {
    OffsetDateTime::parse(v.trim(), &Rfc3339)
        .ok()
        .map(SystemTime::from)
}

/// A reset in whatever form a generic server chose: a number told apart by magnitude
/// (above 10^12 → epoch milliseconds, above 10^9 → epoch seconds, otherwise delta seconds),
/// an RFC 3339 instant, or an HTTP-date.
pub(super) fn any_reset(v: &str, now: Now) -> Option<Instant> {
    const EPOCH_MS_ABOVE: u128 = 1_000_000_000_000 * 1_000_000_000;
    const EPOCH_S_ABOVE: u128 = 1_000_000_000 * 1_000_000_000;
    if let Some(nanos) = decimal_nanos_of_seconds(v) {
        return if nanos > EPOCH_MS_ABOVE {
            // The number was milliseconds: as-if-seconds nanos / 1000 = real nanos.
            at_wall(now, epoch_plus(nanos / 1_000)?)
        } else if nanos > EPOCH_S_ABOVE {
            at_wall(now, epoch_plus(nanos)?)
        } else {
            after(now, nanos_to_duration(nanos)?)
        };
    }
    let wall = rfc3339(v).or_else(|| httpdate::parse_http_date(v.trim()).ok())?;
    at_wall(now, wall)
}

fn epoch_plus(nanos: u128) -> Option<SystemTime> {
    SystemTime::UNIX_EPOCH.checked_add(nanos_to_duration(nanos)?)
}

#[cfg(test)]
pub(super) mod test_support {
    use std::time::{Duration, SystemTime};

    use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

    use crate::clock::Now;
    use crate::ratelimit::HeaderDialect;

    /// Every dialect, for tests that must hold in all of them.
    pub(crate) const ALL_DIALECTS: [HeaderDialect; 5] = [
        HeaderDialect::OpenAi,
        HeaderDialect::Groq,
        HeaderDialect::Azure,
        HeaderDialect::Anthropic,
        HeaderDialect::Generic,
    ];

    /// 2024-06-01T12:00:00Z, a Saturday.
    pub(crate) const WALL_SECS: u64 = 1_717_243_200;

    /// A fixed wall time paired with the current tokio instant.
    pub(crate) fn fixed_now() -> Now {
        Now {
            instant: tokio::time::Instant::now(),
            wall: SystemTime::UNIX_EPOCH + Duration::from_secs(WALL_SECS),
        }
    }

    /// Header `(name, value)` pairs, as test tables write them.
    pub(crate) type Pairs<'a> = &'a [(&'a str, &'a str)];

    /// A header map from `(name, value)` pairs; repeated names append.
    pub(crate) fn headers(pairs: Pairs<'_>) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).expect("test header name"),
                HeaderValue::from_str(value).expect("test header value"),
            );
        }
        map
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;

    #[test]
    fn counts_are_plain_non_negative_integers() {
        let cases: &[(&str, Option<u64>)] = &[
            ("60", Some(60)),
            (" 149984 ", Some(149_984)),
            ("0", Some(0)),
            ("18446744073709551615", Some(u64::MAX)),
            ("18446744073709551616", None),
            ("-1", None),
            ("+5", None),
            ("1.5", None),
            ("1e3", None),
            ("NaN", None),
            ("", None),
            ("ten", None),
        ];
        for (input, want) in cases {
            assert_eq!(count(input), *want, "input {input:?}");
        }
    }

    #[test]
    fn generic_resets_are_told_apart_by_magnitude() {
        let now = fixed_now();
        let in_30s = Some(now.instant + Duration::from_secs(30));
        let cases: &[(&str, Option<Instant>)] = &[
            // Delta seconds.
            ("30", in_30s),
            ("0.5", Some(now.instant + Duration::from_millis(500))),
            // Epoch seconds (https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api
            // documents X-RateLimit-Reset in UTC epoch seconds).
            (&format!("{}", WALL_SECS + 30), in_30s),
            // Epoch milliseconds (OpenRouter, https://openrouter.ai/docs/api-reference/limits).
            (&format!("{}", (WALL_SECS + 30) * 1000), in_30s),
            (
                &format!("{}500", WALL_SECS + 30),
                Some(now.instant + Duration::from_millis(30_500)),
            ),
            // A past epoch clamps to now.
            ("1600000000", Some(now.instant)),
            ("2024-06-01T12:00:30Z", in_30s),
            ("Sat, 01 Jun 2024 12:00:30 GMT", in_30s),
            // Absurdly far: ignored, not an overflow.
            ("99999999999999999999999999999", None),
            ("9999-12-31T23:59:59Z", None),
            ("-30", None),
            ("soon", None),
        ];
        for (input, want) in cases {
            assert_eq!(any_reset(input, now), *want, "input {input:?}");
        }
    }

    #[test]
    fn relative_resets_accept_go_durations_and_bare_seconds() {
        let now = fixed_now();
        assert_eq!(
            relative_reset("6m0s", now),
            Some(now.instant + Duration::from_secs(360))
        );
        assert_eq!(
            relative_reset("12", now),
            Some(now.instant + Duration::from_secs(12))
        );
        assert_eq!(relative_reset("-1", now), None);
        assert_eq!(relative_reset("100000000h", now), None);
    }
}
