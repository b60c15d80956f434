//! The injected source of randomness (jitter).
//!
//! Backoff and jitter draw from an [`Rng`], so tests pass a seeded or fixed sequence and
//! assert exact waits.

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
    pub fn new(seed: u64) -> Self {
        SeededRng {
            inner: Mutex::new(StdRng::seed_from_u64(seed)),
        }
    }

    /// A generator seeded from the operating system.
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
