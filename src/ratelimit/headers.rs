//! Rate-limit headers of every dialect → [`LimitReport`].
//!
//! (First cut: `Retry-After`/`retry-after-ms` in seconds and `x-should-retry`. The dialects
//! of DESIGN.md are filled in by the rate-limit header work.)

use std::time::Duration;

use reqwest::header::HeaderMap;

use super::{HeaderDialect, LimitReport};
use crate::clock::Now;

/// Reads every rate-limit header a response carries, in `dialect`.
pub fn parse_limit_headers(dialect: HeaderDialect, headers: &HeaderMap, now: Now) -> LimitReport {
    let _ = dialect;
    LimitReport {
        retry_after: retry_after(headers, now),
        should_retry: should_retry(headers),
        ..LimitReport::default()
    }
}

/// The delay a response asks for: `retry-after-ms` first, then `Retry-After`.
pub fn retry_after(headers: &HeaderMap, now: Now) -> Option<Duration> {
    let _ = now;
    let get = |name: &str| headers.get(name)?.to_str().ok()?.trim().parse::<f64>().ok();
    let secs = get("retry-after-ms")
        .map(|ms| ms / 1000.0)
        .or_else(|| get("retry-after"))?;
    (secs.is_finite() && secs > 0.0 && secs < 30.0 * 86_400.0)
        .then(|| Duration::from_secs_f64(secs))
}

/// `x-should-retry: true|false`.
pub fn should_retry(headers: &HeaderMap) -> Option<bool> {
    match headers.get("x-should-retry")?.to_str().ok()?.trim() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// A Go-style duration (`1s`, `6m0s`, `12ms`, `2m59.56s`, `23h18m29.144s`).
pub fn go_duration(s: &str) -> Option<Duration> {
    let _ = s;
    None
}

/// A delay stated only in an error message ("Please try again in 18.642s").
pub fn delay_in_message(text: &str) -> Option<Duration> {
    let _ = text;
    None
}
