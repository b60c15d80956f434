//! Exponential backoff with full jitter over an injected [`Rng`].

// Internal: reachable from outside only with the `test-util` feature (tests, benches and
// fuzzers); without it every `pub` here is crate-private.
#![cfg_attr(not(feature = "test-util"), allow(unreachable_pub, dead_code))]

use std::fmt;
use std::time::Duration;

use crate::rng::Rng;

/// The backoff's parameters were invalid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InvalidBackoff(&'static str);

impl fmt::Display for InvalidBackoff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid backoff: {}", self.0)
    }
}

impl std::error::Error for InvalidBackoff {}

/// Exponential backoff with full jitter: the n-th delay (n from 0) is uniform in
/// `[0, min(cap, base · 2ⁿ))`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use llm_failover::retry::Backoff;
/// use llm_failover::rng::SeededRng;
///
/// let b = Backoff::try_new(Duration::from_secs(1), Duration::from_secs(60)).unwrap();
/// let d = b.delay(3, &SeededRng::new(1));
/// assert!(d < Duration::from_secs(8));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
}

impl Backoff {
    /// A backoff from `base` up to `cap`.
    ///
    /// # Errors
    ///
    /// [`InvalidBackoff`] when `base` is zero or `cap < base`.
    pub fn try_new(base: Duration, cap: Duration) -> Result<Self, InvalidBackoff> {
        if base.is_zero() {
            return Err(InvalidBackoff("base must be greater than zero"));
        }
        if cap < base {
            return Err(InvalidBackoff("cap must be at least base"));
        }
        Ok(Backoff { base, cap })
    }

    /// The ceiling of the `attempt`-th delay: `min(cap, base · 2^attempt)`.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        self.base
            .saturating_mul(2u32.saturating_pow(attempt.min(31)))
            .min(self.cap)
    }

    /// The `attempt`-th delay (from 0), drawn from `rng`.
    pub fn delay(&self, attempt: u32, rng: &dyn Rng) -> Duration {
        self.ceiling(attempt)
            .mul_f64(rng.next_f64().clamp(0.0, 1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{FixedRng, SeededRng};

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn rejects_invalid_parameters() {
        assert!(Backoff::try_new(Duration::ZERO, S).is_err());
        assert!(Backoff::try_new(2 * S, S).is_err());
    }

    #[test]
    fn ceiling_doubles_up_to_the_cap() {
        let b = Backoff::try_new(S, 60 * S).unwrap();
        let c: Vec<_> = (0..8).map(|n| b.ceiling(n).as_secs()).collect();
        assert_eq!(c, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(b.ceiling(u32::MAX), 60 * S);
    }

    #[test]
    fn delay_is_the_ceiling_scaled_by_the_draw() {
        let b = Backoff::try_new(S, 60 * S).unwrap();
        let rng = FixedRng::new([0.5, 0.25]);
        assert_eq!(b.delay(2, &rng), 2 * S);
        assert_eq!(b.delay(3, &rng), 2 * S);
    }

    #[test]
    fn delays_stay_within_bounds() {
        let b = Backoff::try_new(Duration::from_millis(100), 10 * S).unwrap();
        let rng = SeededRng::new(9);
        for n in 0..50 {
            assert!(b.delay(n, &rng) < b.ceiling(n));
        }
    }
}
