//! The injected source of randomness (jitter).
//!
//! Backoff and jitter draw from an [`Rng`], so tests pass a seeded or fixed sequence and
//! assert exact waits.
//!
//! # Examples
//!
//! Jitter drawn from an `&dyn Rng`: reproducible with a seed, exact with `FixedRng`
//! (feature `test-util`).
//!
//! ```
//! use std::time::Duration;
//! use llm_failover::rng::{FixedRng, Rng, SeededRng};
//!
//! /// A wait between half of `base` and all of it.
//! fn jittered(base: Duration, rng: &dyn Rng) -> Duration {
//!     base.mul_f64(0.5 + 0.5 * rng.next_f64())
//! }
//!
//! let base = Duration::from_secs(2);
//! assert_eq!(jittered(base, &FixedRng::new([0.5])), Duration::from_millis(1500));
//! assert_eq!(
//!     jittered(base, &SeededRng::new(3)),
//!     jittered(base, &SeededRng::new(3)),
//! );
//! let w = jittered(base, &SeededRng::from_entropy());
//! assert!(w >= Duration::from_secs(1) && w < base);
//! ```

use std::fmt;
use std::sync::Mutex;

use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng};

/// A source of uniform numbers in `[0, 1)`, shared across tasks.
///
/// # Examples
///
/// ```
/// use llm_failover::rng::{Rng, SeededRng};
///
/// let a = SeededRng::new(7);
/// let b = SeededRng::new(7);
/// assert_eq!(a.next_f64(), b.next_f64());
/// ```
pub trait Rng: Send + Sync + fmt::Debug {
    /// A number in `[0, 1)`.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::rng::{Rng, SeededRng};
    ///
    /// let rng = SeededRng::from_entropy();
    /// let draws: Vec<f64> = (0..1000).map(|_| rng.next_f64()).collect();
    /// assert!(draws.iter().all(|x| (0.0..1.0).contains(x)));
    /// // Not stuck on one value.
    /// assert!(draws.iter().any(|&x| x != draws[0]));
    /// ```
    fn next_f64(&self) -> f64;
}

fn _obj_safe(_: &dyn Rng) {}

/// A `StdRng` behind a mutex: seeded from the OS by default, or from a fixed seed.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use llm_failover::rng::{Rng, SeededRng};
/// use llm_failover::Client;
///
/// let x = SeededRng::new(42).next_f64();
/// assert!((0.0..1.0).contains(&x));
/// assert_eq!(x, SeededRng::new(42).next_f64()); // same seed, same sequence
///
/// // Reproducible jitter, e.g. for a soak test:
/// # let local = std::sync::Arc::new(llm_failover::provider::openai::OpenAi::new(
/// #     llm_failover::ProviderId::new("local"),
/// #     "http://127.0.0.1:11434/v1".parse().unwrap(),
/// # ).with_chat_model("llama3.2"));
/// let client = Client::builder()
///     .provider(local, llm_failover::ProviderSettings::new())
///     .rng(Arc::new(SeededRng::new(42)))
///     .build()?;
/// # let _ = client;
/// # Ok::<(), llm_failover::Error>(())
/// ```
#[derive(Debug)]
pub struct SeededRng {
    inner: Mutex<StdRng>,
}

impl SeededRng {
    /// A generator with a fixed seed (tests, reproducible soaks).
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::rng::{Rng, SeededRng};
    ///
    /// let a = SeededRng::new(2026);
    /// let b = SeededRng::new(2026);
    /// let first: Vec<f64> = (0..5).map(|_| a.next_f64()).collect();
    /// let again: Vec<f64> = (0..5).map(|_| b.next_f64()).collect();
    /// assert_eq!(first, again); // same seed, same sequence
    /// assert_ne!(first[0], SeededRng::new(2027).next_f64());
    /// ```
    pub fn new(seed: u64) -> Self {
        SeededRng {
            inner: Mutex::new(StdRng::seed_from_u64(seed)),
        }
    }

    /// A generator seeded from the operating system (also what [`SeededRng::default`]
    /// gives).
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::rng::{Rng, SeededRng};
    ///
    /// let a = SeededRng::from_entropy();
    /// let b = SeededRng::default();
    /// let xs: Vec<f64> = (0..4).map(|_| a.next_f64()).collect();
    /// let ys: Vec<f64> = (0..4).map(|_| b.next_f64()).collect();
    /// assert!(xs.iter().chain(&ys).all(|x| (0.0..1.0).contains(x)));
    /// assert_ne!(xs, ys); // two independent seeds
    /// ```
    pub fn from_entropy() -> Self {
        SeededRng {
            inner: Mutex::new(StdRng::from_os_rng()),
        }
    }
}

impl Default for SeededRng {
    fn default() -> Self {
        Self::from_entropy()
    }
}

impl Rng for SeededRng {
    fn next_f64(&self) -> f64 {
        let mut rng = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        rng.random::<f64>()
    }
}

#[cfg(any(test, feature = "test-util"))]
pub use fixed::FixedRng;

#[cfg(any(test, feature = "test-util"))]
mod fixed {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Returns the given values in a cycle; for tests that assert exact jitter.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use llm_failover::rng::{FixedRng, Rng};
    /// use llm_failover::Client;
    ///
    /// let rng = FixedRng::new([0.1, 0.9]);
    /// let draws = [rng.next_f64(), rng.next_f64(), rng.next_f64()];
    /// assert_eq!(draws, [0.1, 0.9, 0.1]);
    ///
    /// // Exact jitter for a client under test:
    /// # let local = Arc::new(llm_failover::provider::openai::OpenAi::new(
    /// #     llm_failover::ProviderId::new("local"),
    /// #     "http://127.0.0.1:11434/v1".parse().unwrap(),
    /// # ).with_chat_model("llama3.2"));
    /// let client = Client::builder()
    ///     .provider(local, llm_failover::ProviderSettings::new())
    ///     .rng(Arc::new(FixedRng::new([0.5])))
    ///     .build()?;
    /// # let _ = client;
    /// # Ok::<(), llm_failover::Error>(())
    /// ```
    #[derive(Debug)]
    pub struct FixedRng {
        values: Vec<f64>,
        next: AtomicUsize,
    }

    impl FixedRng {
        /// Cycles through `values` (each clamped into `[0, 1)`).
        ///
        /// # Panics
        ///
        /// If `values` is empty.
        ///
        /// # Examples
        ///
        /// ```
        /// use llm_failover::rng::{FixedRng, Rng};
        ///
        /// let rng = FixedRng::new(vec![-1.0, 0.25, 7.0]);
        /// assert_eq!(rng.next_f64(), 0.0); // clamped up
        /// assert_eq!(rng.next_f64(), 0.25);
        /// assert!(rng.next_f64() < 1.0); // clamped below 1
        /// assert_eq!(rng.next_f64(), 0.0); // and round again
        /// ```
        ///
        /// ```should_panic
        /// llm_failover::rng::FixedRng::new(Vec::new()); // needs at least one value
        /// ```
        pub fn new(values: impl Into<Vec<f64>>) -> Self {
            let values: Vec<f64> = values
                .into()
                .into_iter()
                .map(|v| v.clamp(0.0, 1.0 - f64::EPSILON))
                .collect();
            assert!(!values.is_empty(), "FixedRng needs at least one value");
            FixedRng {
                values,
                next: AtomicUsize::new(0),
            }
        }
    }

    impl Rng for FixedRng {
        fn next_f64(&self) -> f64 {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            self.values[i % self.values.len()]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_values_are_reproducible_and_in_range() {
        let a = SeededRng::new(42);
        let b = SeededRng::new(42);
        for _ in 0..100 {
            let x = a.next_f64();
            assert_eq!(x, b.next_f64());
            assert!((0.0..1.0).contains(&x));
        }
    }

    #[test]
    fn fixed_rng_cycles() {
        let r = FixedRng::new([0.25, 0.5]);
        assert_eq!(
            [r.next_f64(), r.next_f64(), r.next_f64()],
            [0.25, 0.5, 0.25]
        );
    }
}
