//! Rate-limit headers in each provider's own format.
//!
//! | style | headers |
//! | --- | --- |
//! | OpenAI | `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, reset a Go duration (`6m0s`, `1.5s`, `12ms`), per minute |
//! | Groq | the same names; requests count per day (RPD), tokens per minute (TPM) |
//! | OpenRouter | `X-RateLimit-{Limit,Remaining,Reset}` for requests, reset in epoch milliseconds |
//! | Azure | `x-ratelimit-remaining-{requests,tokens}`, `x-rate-limit-reset-tokens` in seconds; 429: `retry-after-ms` + `retry-after` |
//! | Anthropic | `anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}`, reset an RFC 3339 instant |
//! | none | nothing (Gemini states limits in its 429 body; Deepgram states none) |
//!
//! A reset is the time until the bucket is full again; durations are rounded *up* (to the
//! millisecond, or to the second where the format has seconds) so a client that waits what
//! a header says is never early.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, HeaderName, HeaderValue};

use crate::config::HeaderStyle;
use crate::limits::{Snapshot, WindowState};

/// Milliseconds, rounded up.
pub fn ceil_ms(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// Whole seconds, rounded up.
pub fn ceil_secs(d: Duration) -> u64 {
    let s = d.as_secs();
    if d.subsec_nanos() > 0 {
        s.saturating_add(1)
    } else {
        s
    }
}

/// A duration the way Go's `time.Duration.String()` prints it, at millisecond precision
/// (rounded up): `0s`, `12ms`, `1.5s`, `59.472s`, `6m0s`, `2m59.56s`, `23h18m29.144s`.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(llm_failover_emulator::headers::go_duration(Duration::from_secs(360)), "6m0s");
/// assert_eq!(llm_failover_emulator::headers::go_duration(Duration::from_millis(1500)), "1.5s");
/// assert_eq!(llm_failover_emulator::headers::go_duration(Duration::from_micros(11_200)), "12ms");
/// ```
pub fn go_duration(d: Duration) -> String {
    let ms = ceil_ms(d);
    if ms == 0 {
        return "0s".to_owned();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (h, m, s, frac) = (
        ms / 3_600_000,
        (ms / 60_000) % 60,
        (ms / 1000) % 60,
        ms % 1000,
    );
    let mut out = String::with_capacity(16);
    if h > 0 {
        let _ = write!(out, "{h}h");
    }
    if h > 0 || m > 0 {
        let _ = write!(out, "{m}m");
    }
    let _ = write!(out, "{s}");
    if frac > 0 {
        let f = format!("{frac:03}");
        out.push('.');
        out.push_str(f.trim_end_matches('0'));
    }
    out.push('s');
    out
}

/// An RFC 3339 UTC instant at whole seconds, rounded up (`2025-01-01T00:00:01Z`).
pub fn rfc3339(t: SystemTime) -> String {
    let secs = ceil_secs(t.duration_since(UNIX_EPOCH).unwrap_or_default());
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, mo, d) = civil_from_days(days);
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// Days since 1970-01-01 → (year, month, day) (H. Hinnant's civil-from-days).
pub(crate) fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Milliseconds since the Unix epoch of `wall + d`.
pub fn epoch_ms(wall: SystemTime, d: Duration) -> u64 {
    let at = wall.checked_add(d).unwrap_or(wall);
    u64::try_from(
        at.duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis(),
    )
    .unwrap_or(u64::MAX)
}

fn put(h: &mut HeaderMap, name: &'static str, value: impl Into<HeaderValue>) {
    h.insert(HeaderName::from_static(name), value.into());
}

fn put_str(h: &mut HeaderMap, name: &'static str, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        h.insert(HeaderName::from_static(name), v);
    }
}

/// Adds the rate-limit headers of `style` for the buckets in `snap`, with wall-clock resets
/// computed from `wall` (now).
pub fn rate_limit_headers(
    style: HeaderStyle,
    snap: &Snapshot,
    wall: SystemTime,
    h: &mut HeaderMap,
) {
    match style {
        HeaderStyle::OpenAi => openai_family(h, snap.rpm, snap.tpm),
        HeaderStyle::Groq => openai_family(h, snap.rpd, snap.tpm),
        HeaderStyle::OpenRouter => {
            let w = match (snap.rpm, snap.rpd) {
                (Some(m), Some(d)) if d.remaining < m.remaining => Some(d),
                (m, d) => m.or(d),
            };
            if let Some(w) = w {
                put(h, "x-ratelimit-limit", w.limit);
                put(h, "x-ratelimit-remaining", w.remaining);
                put(h, "x-ratelimit-reset", epoch_ms(wall, w.reset));
            }
        }
        HeaderStyle::Azure => {
            if let Some(w) = snap.rpm {
                put(h, "x-ratelimit-remaining-requests", w.remaining);
            }
            if let Some(w) = snap.tpm {
                put(h, "x-ratelimit-remaining-tokens", w.remaining);
                put(h, "x-rate-limit-reset-tokens", ceil_secs(w.reset));
            }
        }
        HeaderStyle::Anthropic => {
            let names = [
                (
                    snap.rpm,
                    [
                        "anthropic-ratelimit-requests-limit",
                        "anthropic-ratelimit-requests-remaining",
                        "anthropic-ratelimit-requests-reset",
                    ],
                ),
                (
                    snap.tpm,
                    [
                        "anthropic-ratelimit-tokens-limit",
                        "anthropic-ratelimit-tokens-remaining",
                        "anthropic-ratelimit-tokens-reset",
                    ],
                ),
            ];
            for (w, [limit, remaining, reset]) in names {
                if let Some(w) = w {
                    put(h, limit, w.limit);
                    put(h, remaining, w.remaining);
                    let at = wall.checked_add(w.reset).unwrap_or(wall);
                    put_str(h, reset, &rfc3339(at));
                }
            }
        }
        HeaderStyle::LiteLlm => {
            for (w, [limit, remaining]) in [
                (
                    snap.rpm,
                    [
                        "x-ratelimit-limit-requests",
                        "x-ratelimit-remaining-requests",
                    ],
                ),
                (
                    snap.tpm,
                    ["x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens"],
                ),
            ] {
                if let Some(w) = w {
                    put(h, limit, w.limit);
                    put(h, remaining, w.remaining);
                }
            }
        }
        HeaderStyle::None => {}
    }
}

fn openai_family(h: &mut HeaderMap, requests: Option<WindowState>, tokens: Option<WindowState>) {
    if let Some(w) = requests {
        put(h, "x-ratelimit-limit-requests", w.limit);
        put(h, "x-ratelimit-remaining-requests", w.remaining);
        put_str(h, "x-ratelimit-reset-requests", &go_duration(w.reset));
    }
    if let Some(w) = tokens {
        put(h, "x-ratelimit-limit-tokens", w.limit);
        put(h, "x-ratelimit-remaining-tokens", w.remaining);
        put_str(h, "x-ratelimit-reset-tokens", &go_duration(w.reset));
    }
}

/// What a 429's `Retry-After` says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RetryHeader {
    /// A delay: `retry-after` in whole seconds (rounded up); Azure adds `retry-after-ms`.
    Delay(Duration),
    /// This exact text in `retry-after` (HTTP-date, garbage, …).
    Raw(String),
    /// No `retry-after`.
    Absent,
}

/// Adds the `Retry-After` headers of `style` (none for [`HeaderStyle::None`]: Gemini puts the
/// delay in its body, Deepgram states none).
pub fn retry_headers(style: HeaderStyle, retry: &RetryHeader, h: &mut HeaderMap) {
    if matches!(style, HeaderStyle::None | HeaderStyle::LiteLlm) {
        return;
    }
    match retry {
        RetryHeader::Delay(d) => {
            if style == HeaderStyle::Azure {
                put(h, "retry-after-ms", ceil_ms(*d));
            }
            put(h, "retry-after", ceil_secs(*d));
        }
        RetryHeader::Raw(s) => put_str(h, "retry-after", s),
        RetryHeader::Absent => {}
    }
}

/// Replaces the rate-limit headers of `style` with unparseable values (a fault).
pub fn malformed_headers(style: HeaderStyle, h: &mut HeaderMap) {
    let bad: &[(&'static str, &str)] = match style {
        HeaderStyle::OpenAi | HeaderStyle::Groq | HeaderStyle::LiteLlm => &[
            ("x-ratelimit-limit-requests", "lots"),
            ("x-ratelimit-remaining-requests", "-3"),
            ("x-ratelimit-reset-requests", "soon"),
            ("x-ratelimit-remaining-tokens", "1e400"),
            ("x-ratelimit-reset-tokens", "6m0"),
        ],
        HeaderStyle::OpenRouter => &[
            ("x-ratelimit-limit", "∞"),
            ("x-ratelimit-remaining", "none"),
            ("x-ratelimit-reset", "tomorrow"),
        ],
        HeaderStyle::Azure => &[
            ("x-ratelimit-remaining-requests", "NaN"),
            ("x-ratelimit-remaining-tokens", ""),
            ("x-rate-limit-reset-tokens", "-1.5e"),
        ],
        HeaderStyle::Anthropic => &[
            ("anthropic-ratelimit-requests-limit", "fifty"),
            ("anthropic-ratelimit-requests-remaining", "-1"),
            ("anthropic-ratelimit-requests-reset", "2024-13-45T25:61:61Z"),
            ("anthropic-ratelimit-tokens-reset", "yesterday"),
        ],
        HeaderStyle::None => &[],
    };
    for (name, value) in bad {
        match HeaderValue::from_bytes(value.as_bytes()) {
            Ok(v) => {
                h.insert(HeaderName::from_static(name), v);
            }
            Err(_) => {
                h.insert(HeaderName::from_static(name), HeaderValue::from_static("?"));
            }
        }
    }
    put_str(h, "retry-after", "later");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn win(limit: u64, remaining: u64, reset_ms: u64) -> Option<WindowState> {
        Some(WindowState {
            limit,
            remaining,
            reset: Duration::from_millis(reset_ms),
        })
    }

    fn get<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
        h.get(name).and_then(|v| v.to_str().ok())
    }

    #[test]
    fn go_durations_look_like_go_prints_them() {
        let cases = [
            (0, "0s"),
            (1, "1ms"),
            (12, "12ms"),
            (999, "999ms"),
            (1000, "1s"),
            (1500, "1.5s"),
            (59_472, "59.472s"),
            (60_000, "1m0s"),
            (360_000, "6m0s"),
            (179_560, "2m59.56s"),
            (3_600_000, "1h0m0s"),
            (83_909_144, "23h18m29.144s"),
        ];
        for (ms, want) in cases {
            assert_eq!(go_duration(Duration::from_millis(ms)), want, "{ms} ms");
        }
        // Sub-millisecond remainders round up, never down.
        assert_eq!(go_duration(Duration::from_nanos(1)), "1ms");
        assert_eq!(go_duration(Duration::from_micros(1_000_001)), "1.001s");
    }

    #[test]
    fn rfc3339_formats_utc_and_rounds_up_to_the_second() {
        let cases = [
            (0, "1970-01-01T00:00:00Z"),
            (951_782_400, "2000-02-29T00:00:00Z"),
            (1_735_689_599, "2024-12-31T23:59:59Z"),
            (4_102_444_800, "2100-01-01T00:00:00Z"),
        ];
        for (secs, want) in cases {
            assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_secs(secs)), want);
        }
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_millis(1_735_689_598_001)),
            "2024-12-31T23:59:59Z"
        );
    }

    #[test]
    fn openai_style_states_minute_windows_with_go_durations() {
        let snap = Snapshot {
            rpm: win(500, 499, 120),
            tpm: win(200_000, 198_976, 307),
            ..Snapshot::default()
        };
        let mut h = HeaderMap::new();
        rate_limit_headers(HeaderStyle::OpenAi, &snap, SystemTime::UNIX_EPOCH, &mut h);
        assert_eq!(get(&h, "x-ratelimit-limit-requests"), Some("500"));
        assert_eq!(get(&h, "x-ratelimit-remaining-requests"), Some("499"));
        assert_eq!(get(&h, "x-ratelimit-reset-requests"), Some("120ms"));
        assert_eq!(get(&h, "x-ratelimit-limit-tokens"), Some("200000"));
        assert_eq!(get(&h, "x-ratelimit-remaining-tokens"), Some("198976"));
        assert_eq!(get(&h, "x-ratelimit-reset-tokens"), Some("307ms"));
    }

    #[test]
    fn groq_style_counts_requests_per_day() {
        let snap = Snapshot {
            rpm: win(30, 29, 2000),
            tpm: win(6000, 5000, 10_000),
            rpd: win(14_400, 14_399, 6000),
            ..Snapshot::default()
        };
        let mut h = HeaderMap::new();
        rate_limit_headers(HeaderStyle::Groq, &snap, SystemTime::UNIX_EPOCH, &mut h);
        assert_eq!(get(&h, "x-ratelimit-limit-requests"), Some("14400"));
        assert_eq!(get(&h, "x-ratelimit-reset-requests"), Some("6s"));
        assert_eq!(get(&h, "x-ratelimit-limit-tokens"), Some("6000"));
        assert_eq!(get(&h, "x-ratelimit-reset-tokens"), Some("10s"));
    }

    #[test]
    fn anthropic_style_states_rfc3339_resets() {
        let snap = Snapshot {
            rpm: win(50, 49, 1200),
            tpm: win(40_000, 39_000, 1500),
            ..Snapshot::default()
        };
        let wall = UNIX_EPOCH + Duration::from_secs(1_735_689_598);
        let mut h = HeaderMap::new();
        rate_limit_headers(HeaderStyle::Anthropic, &snap, wall, &mut h);
        assert_eq!(get(&h, "anthropic-ratelimit-requests-limit"), Some("50"));
        assert_eq!(
            get(&h, "anthropic-ratelimit-requests-remaining"),
            Some("49")
        );
        assert_eq!(
            get(&h, "anthropic-ratelimit-requests-reset"),
            Some("2025-01-01T00:00:00Z")
        );
        assert_eq!(
            get(&h, "anthropic-ratelimit-tokens-remaining"),
            Some("39000")
        );
    }

    #[test]
    fn azure_style_states_remaining_and_token_reset_seconds() {
        let snap = Snapshot {
            rpm: win(60, 10, 50_000),
            tpm: win(1000, 400, 36_001),
            ..Snapshot::default()
        };
        let mut h = HeaderMap::new();
        rate_limit_headers(HeaderStyle::Azure, &snap, SystemTime::UNIX_EPOCH, &mut h);
        assert_eq!(get(&h, "x-ratelimit-remaining-requests"), Some("10"));
        assert_eq!(get(&h, "x-ratelimit-remaining-tokens"), Some("400"));
        assert_eq!(get(&h, "x-rate-limit-reset-tokens"), Some("37"));
        retry_headers(
            HeaderStyle::Azure,
            &RetryHeader::Delay(Duration::from_millis(1234)),
            &mut h,
        );
        assert_eq!(get(&h, "retry-after-ms"), Some("1234"));
        assert_eq!(get(&h, "retry-after"), Some("2"));
    }

    #[test]
    fn openrouter_style_states_the_tighter_request_window_in_epoch_ms() {
        let snap = Snapshot {
            rpm: win(20, 19, 3000),
            rpd: win(50, 0, 7_200_000),
            ..Snapshot::default()
        };
        let wall = UNIX_EPOCH + Duration::from_secs(1_741_298_400);
        let mut h = HeaderMap::new();
        rate_limit_headers(HeaderStyle::OpenRouter, &snap, wall, &mut h);
        assert_eq!(get(&h, "x-ratelimit-limit"), Some("50"));
        assert_eq!(get(&h, "x-ratelimit-remaining"), Some("0"));
        assert_eq!(get(&h, "x-ratelimit-reset"), Some("1741305600000"));
    }

    #[test]
    fn no_style_and_no_limits_mean_no_headers() {
        let mut h = HeaderMap::new();
        let snap = Snapshot {
            rpm: win(1, 1, 0),
            ..Snapshot::default()
        };
        rate_limit_headers(HeaderStyle::None, &snap, SystemTime::UNIX_EPOCH, &mut h);
        retry_headers(
            HeaderStyle::None,
            &RetryHeader::Delay(Duration::from_secs(1)),
            &mut h,
        );
        rate_limit_headers(
            HeaderStyle::OpenAi,
            &Snapshot::default(),
            SystemTime::UNIX_EPOCH,
            &mut h,
        );
        assert!(h.is_empty(), "{h:?}");
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        let mut h = HeaderMap::new();
        retry_headers(
            HeaderStyle::OpenAi,
            &RetryHeader::Delay(Duration::from_millis(1001)),
            &mut h,
        );
        assert_eq!(get(&h, "retry-after"), Some("2"));
        assert_eq!(get(&h, "retry-after-ms"), None);
    }

    #[test]
    fn malformed_headers_are_still_valid_header_values() {
        for style in [
            HeaderStyle::OpenAi,
            HeaderStyle::OpenRouter,
            HeaderStyle::Azure,
            HeaderStyle::Anthropic,
        ] {
            let mut h = HeaderMap::new();
            malformed_headers(style, &mut h);
            assert!(h.len() >= 3, "{style:?}");
            assert_eq!(get(&h, "retry-after"), Some("later"));
        }
    }
}
