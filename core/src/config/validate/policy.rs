//! `[policy]`: retry, breaker and timeout settings.

use std::time::Duration;

use super::{Check, MAX_MS};
use crate::config::raw::RawPolicy;
use crate::config::source::{Issue, TomlPath};
use crate::config::types::Policy;

pub(super) fn policy(path: &TomlPath, raw: &RawPolicy) -> Check<Policy> {
    let d = Policy::default();
    let (max_attempts, failure_threshold, max_response_bytes, retry_budget) =
        counts(path, raw, &d)?;
    let policy = Policy {
        max_attempts,
        deadline: millis(path, "deadline_ms", raw.deadline_ms, d.deadline)?,
        request_timeout: millis(
            path,
            "request_timeout_ms",
            raw.request_timeout_ms,
            d.request_timeout,
        )?,
        connect_timeout: millis(
            path,
            "connect_timeout_ms",
            raw.connect_timeout_ms,
            d.connect_timeout,
        )?,
        max_retry_after: millis(
            path,
            "max_retry_after_ms",
            raw.max_retry_after_ms,
            d.max_retry_after,
        )?,
        quota_cooldown: millis(
            path,
            "quota_cooldown_ms",
            raw.quota_cooldown_ms,
            d.quota_cooldown,
        )?,
        failure_threshold,
        breaker_cooldown: millis(
            path,
            "breaker_cooldown_ms",
            raw.breaker_cooldown_ms,
            d.breaker_cooldown,
        )?,
        breaker_cooldown_max: millis(
            path,
            "breaker_cooldown_max_ms",
            raw.breaker_cooldown_max_ms,
            d.breaker_cooldown_max,
        )?,
        backoff_base: millis(path, "backoff_base_ms", raw.backoff_base_ms, d.backoff_base)?,
        backoff_cap: millis(path, "backoff_cap_ms", raw.backoff_cap_ms, d.backoff_cap)?,
        max_response_bytes,
        retry_budget,
        spill_after: millis_or_zero(path, "spill_after_ms", raw.spill_after_ms, d.spill_after)?,
        latency_allowance: millis_or_zero(
            path,
            "latency_allowance_ms",
            raw.latency_allowance_ms,
            d.latency_allowance,
        )?,
    };
    ordered(path, &policy)?;
    Ok(policy)
}

/// The settings that are counts and fractions: max attempts, failure threshold, response
/// bytes, retry budget.
fn counts(path: &TomlPath, raw: &RawPolicy, d: &Policy) -> Check<(u32, u32, usize, f64)> {
    let max_attempts = match raw.max_attempts {
        None => d.max_attempts,
        Some(n) if n < 1 => {
            return Err(Issue::new(
                path.key("max_attempts"),
                format!("must be at least 1 (a single attempt, no retry), not {n}"),
            ));
        }
        Some(n) => u32::try_from(n).map_err(|_| {
            Issue::new(
                path.key("max_attempts"),
                format!("must be at most {}, not {n}", u32::MAX),
            )
        })?,
    };
    let failure_threshold = match raw.failure_threshold {
        None => d.failure_threshold,
        Some(n) => u32::try_from(n).map_err(|_| {
            Issue::new(
                path.key("failure_threshold"),
                format!(
                    "must be 0 (never open the breaker on failures) up to {}, not {n}",
                    u32::MAX
                ),
            )
        })?,
    };
    let max_response_bytes = match raw.max_response_bytes {
        None => d.max_response_bytes,
        Some(n) => usize::try_from(n).ok().filter(|&b| b > 0).ok_or_else(|| {
            Issue::new(
                path.key("max_response_bytes"),
                format!("must be a positive number of bytes, not {n}"),
            )
        })?,
    };
    let retry_budget = match raw.retry_budget {
        None => d.retry_budget,
        Some(b) if b.is_finite() && (0.0..=10.0).contains(&b) => b,
        Some(b) => {
            return Err(Issue::new(
                path.key("retry_budget"),
                format!(
                    "must be between 0 and 10 (retries as a fraction of first attempts: 0.2 = \
                     20 % extra load), not {b}"
                ),
            ));
        }
    };
    Ok((
        max_attempts,
        failure_threshold,
        max_response_bytes,
        retry_budget,
    ))
}

/// Each cap at least its base: the breaker's cooldowns, the backoff's.
fn ordered(path: &TomlPath, policy: &Policy) -> Check<()> {
    for (low, high, low_name, high_name) in [
        (
            policy.breaker_cooldown,
            policy.breaker_cooldown_max,
            "breaker_cooldown_ms",
            "breaker_cooldown_max_ms",
        ),
        (
            policy.backoff_base,
            policy.backoff_cap,
            "backoff_base_ms",
            "backoff_cap_ms",
        ),
    ] {
        if high < low {
            return Err(Issue::new(
                path.key(high_name),
                format!(
                    "({} ms) must be at least {low_name} ({} ms)",
                    high.as_millis(),
                    low.as_millis()
                ),
            ));
        }
    }
    Ok(())
}

/// A `_ms` value: positive, at most 30 days.
pub(super) fn millis(
    path: &TomlPath,
    key: &str,
    value: Option<i64>,
    default: Duration,
) -> Check<Duration> {
    match value {
        None => Ok(default),
        Some(n) if n <= 0 => Err(Issue::new(
            path.key(key),
            format!("must be a positive number of milliseconds, not {n}"),
        )),
        Some(n) if n > MAX_MS => Err(Issue::new(
            path.key(key),
            format!("must be at most {MAX_MS} (30 days), not {n}"),
        )),
        Some(n) => Ok(Duration::from_millis(u64::try_from(n).unwrap_or(0))),
    }
}

/// Like [`millis`], but 0 is meaningful ("never wait" / "no allowance"); at most a minute.
fn millis_or_zero(
    path: &TomlPath,
    key: &str,
    value: Option<i64>,
    default: Duration,
) -> Check<Duration> {
    match value {
        None => Ok(default),
        Some(n) if (0..=60_000).contains(&n) => {
            Ok(Duration::from_millis(u64::try_from(n).unwrap_or(0)))
        }
        Some(n) => Err(Issue::new(
            path.key(key),
            format!("must be between 0 and 60000 milliseconds, not {n}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_is_allowed_where_it_means_none() {
        let p = TomlPath::root();
        let d = Duration::from_secs(1);
        assert_eq!(
            millis_or_zero(&p, "x_ms", Some(0), d).unwrap(),
            Duration::ZERO
        );
        assert_eq!(millis_or_zero(&p, "x_ms", None, d).unwrap(), d);
        for bad in [-1, 60_001, i64::MIN] {
            let issue = millis_or_zero(&p, "x_ms", Some(bad), d).unwrap_err();
            assert_eq!(issue.path.to_string(), "x_ms");
        }
    }

    #[test]
    fn millis_take_positive_values_up_to_thirty_days() {
        let p = TomlPath::root();
        let d = Duration::from_secs(7);
        assert_eq!(millis(&p, "x_ms", None, d).unwrap(), d);
        assert_eq!(
            millis(&p, "x_ms", Some(1), d).unwrap(),
            Duration::from_millis(1)
        );
        assert_eq!(
            millis(&p, "x_ms", Some(MAX_MS), d).unwrap(),
            Duration::from_secs(30 * 24 * 3600)
        );
        for bad in [0, -1, MAX_MS + 1, i64::MIN, i64::MAX] {
            let issue = millis(&p, "x_ms", Some(bad), d).unwrap_err();
            assert_eq!(issue.path.to_string(), "x_ms");
            assert!(
                issue.message.contains(&bad.to_string()),
                "{}",
                issue.message
            );
        }
    }

    #[test]
    fn an_empty_policy_is_the_default() {
        let p = TomlPath::root().key("policy");
        assert_eq!(
            policy(&p, &RawPolicy::default()).unwrap(),
            Policy::default()
        );
    }

    #[test]
    fn retry_budget_refuses_nan_and_infinity() {
        let p = TomlPath::root().key("policy");
        for b in [f64::NAN, f64::INFINITY, 10.01] {
            let raw = RawPolicy {
                retry_budget: Some(b),
                ..RawPolicy::default()
            };
            assert_eq!(
                policy(&p, &raw).unwrap_err().path.to_string(),
                "policy.retry_budget"
            );
        }
    }
}
