//! How a failed job is tried again: exponential backoff with a cap, dead after N failures.

use std::time::Duration;

use super::job::millis;

/// When a failed job is tried again, and after how many failures it is dead.
///
/// The `n`th failure (counting from 1) makes the job eligible again after
/// `base × 2^(n−1)`, at most `cap`; the `max_failures`th failure makes it dead instead. The
/// backoff has no jitter: a job's failures are spread by their own times, and a queue's
/// claims are serial, so there is no herd to scatter.
///
/// # Defaults
///
/// 5 failures; backoff from 1 s, capped at 5 minutes.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use llm_failover_queue::FailPolicy;
///
/// let policy = FailPolicy::default()
///     .with_max_failures(3)
///     .with_backoff(Duration::from_secs(2), Duration::from_secs(5));
/// assert_eq!(policy.backoff(1), Duration::from_secs(2));
/// assert_eq!(policy.backoff(2), Duration::from_secs(4));
/// assert_eq!(policy.backoff(3), Duration::from_secs(5)); // capped
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailPolicy {
    max_failures: u32,
    base: Duration,
    cap: Duration,
}

impl Default for FailPolicy {
    fn default() -> Self {
        FailPolicy {
            max_failures: 5,
            base: Duration::from_secs(1),
            cap: Duration::from_secs(300),
        }
    }
}

impl FailPolicy {
    /// The same policy, dead at the `n`th failure (at least 1: a job fails at most once more
    /// than allowed).
    ///
    /// # Examples
    ///
    /// ```
    /// let p = llm_failover_queue::FailPolicy::default().with_max_failures(0);
    /// assert_eq!(p.max_failures(), 1);
    /// ```
    #[must_use]
    pub fn with_max_failures(mut self, n: u32) -> Self {
        self.max_failures = n.max(1);
        self
    }

    /// The same policy with backoff from `base`, doubling, capped at `cap` (a `cap` below
    /// `base` is raised to it).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let p = llm_failover_queue::FailPolicy::default()
    ///     .with_backoff(Duration::from_millis(100), Duration::from_secs(1));
    /// assert_eq!(p.backoff(5), Duration::from_secs(1));
    /// ```
    #[must_use]
    pub fn with_backoff(mut self, base: Duration, cap: Duration) -> Self {
        self.base = base;
        self.cap = cap.max(base);
        self
    }

    /// The failure count at which a job is dead.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(llm_failover_queue::FailPolicy::default().max_failures(), 5);
    /// ```
    pub fn max_failures(&self) -> u32 {
        self.max_failures
    }

    /// The wait after the `failures`th failure (1 for the first).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let p = llm_failover_queue::FailPolicy::default();
    /// assert_eq!(p.backoff(1), Duration::from_secs(1));
    /// assert_eq!(p.backoff(40), Duration::from_secs(300));
    /// ```
    pub fn backoff(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(31);
        self.base
            .checked_mul(1u32 << doublings)
            .map_or(self.cap, |d| d.min(self.cap))
    }

    /// The backoff in ms, for SQL.
    pub(crate) fn backoff_ms(&self, failures: u32) -> i64 {
        millis(self.backoff(failures))
    }

    /// One more failure, `error`, of a job that had `failures`: the new count, and the dead
    /// letter's reason when that count is the last allowed (`None`: it is tried again).
    pub(crate) fn count_failure(&self, failures: u32, error: &str) -> (u32, Option<String>) {
        let failures = failures.saturating_add(1);
        let dead = (failures >= self.max_failures)
            .then(|| format!("{failures} failures, the last: {error}"));
        (failures, dead)
    }
}

/// The failure an expired lease counts, naming the worker that held it.
pub(crate) fn lease_expired(worker: Option<&str>) -> String {
    format!("lease expired (worker {})", worker.unwrap_or("unknown"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_allowed_failure_gives_the_dead_letters_reason() {
        let policy = FailPolicy::default().with_max_failures(3);
        assert_eq!(policy.count_failure(0, "503"), (1, None));
        assert_eq!(policy.count_failure(1, "503"), (2, None));
        let (n, reason) = policy.count_failure(2, "503");
        assert_eq!(
            (n, reason.as_deref()),
            (3, Some("3 failures, the last: 503"))
        );
        assert_eq!(policy.count_failure(u32::MAX, "x").0, u32::MAX);
        assert_eq!(lease_expired(Some("w2")), "lease expired (worker w2)");
        assert_eq!(lease_expired(None), "lease expired (worker unknown)");
    }
}
