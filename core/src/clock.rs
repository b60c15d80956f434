//! The injected time source.
//!
//! Every decision in this crate (buckets, breaker, backoff) is a pure function of a `now`
//! value; only the limiter and the router wait, and only through [`Clock::sleep_until`]. The
//! default [`TokioClock`] uses `tokio::time`, so unit tests can run under
//! `tokio::time::pause()`. HTTP tests use `ManualClock` (feature `test-util`), which records
//! every requested wait and returns at once: paused time and real sockets do not mix.
//!
//! # Examples
//!
//! Code that takes a `&dyn Clock` runs on real time in production and on a `ManualClock`
//! (feature `test-util`) in a test, where an hour's wait passes at once:
//!
//! ```
//! use std::time::Duration;
//! use llm_failover::clock::{Clock, ManualClock, TokioClock};
//! use tokio::time::Instant;
//!
//! /// When a request given `budget` must have finished.
//! fn deadline(clock: &dyn Clock, budget: Duration) -> Instant {
//!     clock.now() + budget
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let real = TokioClock;
//! assert!(deadline(&real, Duration::from_secs(1)) > real.now());
//!
//! let manual = ManualClock::new();
//! let due = deadline(&manual, Duration::from_secs(3600));
//! let started = std::time::Instant::now();
//! manual.sleep_until(due).await; // returns at once, the wait recorded
//! assert_eq!(manual.now(), due);
//! assert_eq!(manual.sleeps(), [Duration::from_secs(3600)]);
//! assert!(started.elapsed() < Duration::from_secs(60));
//! # }
//! ```

use std::fmt;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use tokio::time::Instant;

/// A moment seen by both clocks: the monotonic instant used for every decision and the wall
/// time used once, when a header carries a wall-clock reset (HTTP-date, RFC 3339, epoch).
///
/// # Examples
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use llm_failover::clock::{Clock, TokioClock};
///
/// let now = TokioClock.both();
/// let reset = now.wall + Duration::from_secs(30); // e.g. a header's HTTP-date
/// assert_eq!(now.until_wall(reset), Some(Duration::from_secs(30)));
/// assert_eq!(now.instant_at(reset), now.instant + Duration::from_secs(30));
/// assert_eq!(now.until_wall(SystemTime::UNIX_EPOCH), None); // in the past
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Now {
    /// The monotonic instant.
    pub instant: Instant,
    /// The wall-clock time at that instant.
    pub wall: SystemTime,
}

impl Now {
    /// Converts a wall-clock instant to a monotonic one; past times clamp to `self.instant`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use llm_failover::clock::{Clock, TokioClock};
    ///
    /// let now = TokioClock.both();
    /// // A reset stated as a wall-clock time (an HTTP-date 90 s from now) ...
    /// let reset = now.wall + Duration::from_secs(90);
    /// // ... becomes the instant the limiter waits for.
    /// assert_eq!(now.instant_at(reset) - now.instant, Duration::from_secs(90));
    /// // A time already past is "now", never earlier.
    /// assert_eq!(now.instant_at(SystemTime::UNIX_EPOCH), now.instant);
    /// ```
    pub fn instant_at(&self, wall: SystemTime) -> Instant {
        match wall.duration_since(self.wall) {
            Ok(ahead) => self.instant + ahead,
            Err(_) => self.instant,
        }
    }

    /// The delay from now until `wall`, or `None` when `wall` is not in the future.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use llm_failover::clock::Now;
    /// use tokio::time::Instant;
    ///
    /// let now = Now {
    ///     instant: Instant::now(),
    ///     wall: SystemTime::UNIX_EPOCH + Duration::from_secs(1_000),
    /// };
    /// let later = SystemTime::UNIX_EPOCH + Duration::from_secs(1_045);
    /// assert_eq!(now.until_wall(later), Some(Duration::from_secs(45)));
    /// assert_eq!(now.until_wall(now.wall), None); // not in the future
    /// assert_eq!(now.until_wall(SystemTime::UNIX_EPOCH), None); // in the past
    /// ```
    pub fn until_wall(&self, wall: SystemTime) -> Option<Duration> {
        wall.duration_since(self.wall).ok().filter(|d| !d.is_zero())
    }
}

/// `at` in milliseconds since the Unix epoch (0 before it, saturating far after): the
/// wall-clock times the cache, the job queue and the send traces keep.
pub(crate) fn wall_ms(at: SystemTime) -> i64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A source of time that can also wait.
///
/// # Examples
///
/// ```
/// use llm_failover::clock::{Clock, TokioClock};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let clock = TokioClock;
/// let start = clock.now();
/// clock.sleep_until(start).await; // a past deadline returns at once
/// assert!(clock.now() >= start);
/// # }
/// ```
#[async_trait]
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current monotonic instant.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use llm_failover::clock::{Clock, ManualClock, TokioClock};
    ///
    /// let clock = ManualClock::new();
    /// let t0 = clock.now();
    /// clock.advance(Duration::from_secs(5));
    /// assert_eq!(clock.now() - t0, Duration::from_secs(5));
    ///
    /// let real = TokioClock.now();
    /// assert!(TokioClock.now() >= real); // monotonic
    /// ```
    fn now(&self) -> Instant;

    /// The current wall-clock time.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use llm_failover::clock::{Clock, ManualClock, TokioClock};
    ///
    /// let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600);
    /// let clock = ManualClock::with_wall(start);
    /// clock.advance(Duration::from_secs(60));
    /// assert_eq!(clock.wall(), start + Duration::from_secs(60));
    ///
    /// assert!(TokioClock.wall() > SystemTime::UNIX_EPOCH); // the system clock
    /// ```
    fn wall(&self) -> SystemTime;

    /// Both at once.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use llm_failover::clock::{Clock, ManualClock};
    ///
    /// let clock = ManualClock::new();
    /// clock.advance(Duration::from_secs(10));
    /// let now = clock.both();
    /// assert_eq!(now.instant, clock.now());
    /// assert_eq!(now.wall, clock.wall());
    /// ```
    fn both(&self) -> Now {
        Now {
            instant: self.now(),
            wall: self.wall(),
        }
    }

    /// Waits until `deadline` (returns at once if it has passed).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use llm_failover::clock::{Clock, ManualClock, TokioClock};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let real = TokioClock;
    /// let due = real.now() + Duration::from_millis(10);
    /// real.sleep_until(due).await;
    /// assert!(real.now() >= due);
    ///
    /// let manual = ManualClock::new();
    /// let t0 = manual.now();
    /// manual.sleep_until(t0 + Duration::from_secs(2)).await;
    /// manual.sleep_until(t0).await; // already past: returns at once, not recorded
    /// assert_eq!(manual.sleeps(), [Duration::from_secs(2)]);
    /// # }
    /// ```
    async fn sleep_until(&self, deadline: Instant);

    /// Waits until the time reaches `deadline` for an upkeep of the caller's own — a worker
    /// renewing its leases while its jobs run — without being a cause for time to move: by
    /// default [`sleep_until`](Self::sleep_until); a
    // `ManualClock` exists only with `test-util`: linked when it does.
    #[cfg_attr(any(test, feature = "test-util"), doc = "[`ManualClock`],")]
    #[cfg_attr(
        not(any(test, feature = "test-util")),
        doc = "`ManualClock` (feature `test-util`),"
    )]
    /// whose time moves only when someone sleeps or advances it, waits until someone else has
    /// moved it past `deadline` (a sleep of its own there would jump time on every renewal, in
    /// a spin).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use llm_failover::clock::{Clock, ManualClock};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let clock = ManualClock::new();
    /// let due = clock.now() + Duration::from_secs(10);
    /// let upkeep = tokio::spawn({
    ///     let clock = clock.clone();
    ///     async move { clock.wait_for_time(due).await }
    /// });
    /// tokio::task::yield_now().await;
    /// assert!(!upkeep.is_finished()); // nobody moved the time
    /// clock.sleep_until(due + Duration::from_secs(1)).await; // the logic sleeps past it
    /// upkeep.await.unwrap();
    /// assert_eq!(clock.sleeps(), [Duration::from_secs(11)]); // the upkeep recorded nothing
    /// # }
    /// ```
    async fn wait_for_time(&self, deadline: Instant) {
        self.sleep_until(deadline).await;
    }
}

fn _obj_safe(_: &dyn Clock) {}

/// The default clock: `tokio::time` for instants and sleeping, the system clock for wall time.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use llm_failover::clock::{Clock, TokioClock};
/// use llm_failover::Client;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> llm_failover::Result<()> {
/// let clock = TokioClock;
/// let start = clock.now();
/// clock.sleep_until(start + Duration::from_millis(5)).await;
/// assert!(clock.now() >= start + Duration::from_millis(5));
///
/// # let local = std::sync::Arc::new(llm_failover::provider::openai::OpenAi::new(
/// #     llm_failover::ProviderId::new("local"),
/// #     "http://127.0.0.1:11434/v1".parse().unwrap(),
/// # ).with_chat_model("llama3.2"));
/// let client = Client::builder()
///     .provider(local, llm_failover::ProviderSettings::new())
///     .clock(Arc::new(clock)) // the default clock
///     .build()?;
/// # let _ = client;
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioClock;

#[async_trait]
impl Clock for TokioClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    #[expect(
        clippy::disallowed_methods,
        reason = "the one sanctioned wall-clock read"
    )]
    fn wall(&self) -> SystemTime {
        SystemTime::now()
    }

    async fn sleep_until(&self, deadline: Instant) {
        tokio::time::sleep_until(deadline).await;
    }
}

#[cfg(any(test, feature = "test-util"))]
pub use fast::FastClock;
#[cfg(any(test, feature = "test-util"))]
pub use manual::ManualClock;

#[cfg(any(test, feature = "test-util"))]
mod fast {
    use super::*;

    /// A clock running `factor` times faster than real time, for tests where concurrent
    /// requests and a server must share a timeline that moves on its own (pacing a burst
    /// against a server enforcing the same limits): a 60 s wait passes in 60/`factor` real
    /// seconds, and causality between tasks is kept, which a [`ManualClock`] that jumps on
    /// every sleep cannot do. Waits end late, never early, so assertions stay deterministic.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use llm_failover::clock::{Clock, FastClock};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let clock = FastClock::new(1000.0);
    /// let t0 = clock.now();
    /// clock.sleep_until(t0 + Duration::from_secs(2)).await; // about 2 ms of real time
    /// assert!(clock.now() - t0 >= Duration::from_secs(2));
    /// # }
    /// ```
    #[derive(Clone, Copy, Debug)]
    pub struct FastClock {
        factor: f64,
        real_start: Instant,
        wall_start: SystemTime,
    }

    impl FastClock {
        /// A clock `factor` (≥ 1) times faster than real time, starting at wall time
        /// 2026-01-01T00:00:00Z.
        ///
        /// # Examples
        ///
        /// ```
        /// use std::time::{Duration, SystemTime};
        /// use llm_failover::clock::{Clock, FastClock};
        ///
        /// let clock = FastClock::new(60.0); // a minute per real second
        /// let new_year = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600);
        /// assert!(clock.wall() >= new_year);
        /// assert!(clock.wall() < new_year + Duration::from_secs(3600));
        ///
        /// // A factor below 1 (or not finite) runs at real speed instead.
        /// for slow in [0.5, f64::NAN] {
        ///     assert!(format!("{:?}", FastClock::new(slow)).contains("factor: 1.0"));
        /// }
        /// ```
        pub fn new(factor: f64) -> Self {
            FastClock {
                factor: if factor.is_finite() {
                    factor.max(1.0)
                } else {
                    1.0
                },
                real_start: Instant::now(),
                wall_start: SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600),
            }
        }

        fn elapsed(&self) -> Duration {
            (Instant::now() - self.real_start).mul_f64(self.factor)
        }
    }

    #[async_trait]
    impl Clock for FastClock {
        fn now(&self) -> Instant {
            self.real_start + self.elapsed()
        }

        fn wall(&self) -> SystemTime {
            self.wall_start + self.elapsed()
        }

        async fn sleep_until(&self, deadline: Instant) {
            loop {
                let now = self.now();
                if now >= deadline {
                    return;
                }
                // Round up by a millisecond so the wake-up is never early.
                let real = (deadline - now).div_f64(self.factor) + Duration::from_millis(1);
                tokio::time::sleep_until(Instant::now() + real).await;
            }
        }
    }
}

#[cfg(any(test, feature = "test-util"))]
mod manual {
    use super::*;
    use std::sync::{Arc, Mutex, PoisonError};

    /// A clock for HTTP tests: time only moves when someone sleeps or calls
    /// [`advance`](ManualClock::advance); every requested wait is recorded and returns at once.
    ///
    /// Cloning shares the same time.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use llm_failover::clock::{Clock, ManualClock};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let clock = ManualClock::new();
    /// let t0 = clock.now();
    /// clock.sleep_until(t0 + Duration::from_secs(30)).await; // returns at once
    /// assert_eq!(clock.now() - t0, Duration::from_secs(30));
    /// assert_eq!(clock.sleeps(), vec![Duration::from_secs(30)]);
    /// # }
    /// ```
    #[derive(Clone, Debug)]
    pub struct ManualClock {
        state: Arc<Mutex<State>>,
        /// Told every time the time moves, for [`Clock::wait_for_time`].
        moved: Arc<tokio::sync::Notify>,
    }

    #[derive(Debug)]
    struct State {
        start: Instant,
        wall_start: SystemTime,
        elapsed: Duration,
        sleeps: Vec<Duration>,
    }

    impl Default for ManualClock {
        fn default() -> Self {
            Self::new()
        }
    }

    impl ManualClock {
        /// A clock starting now, at a fixed wall time (2026-01-01T00:00:00Z).
        ///
        /// # Examples
        ///
        /// ```
        /// use std::time::{Duration, SystemTime};
        /// use llm_failover::clock::{Clock, ManualClock};
        ///
        /// let clock = ManualClock::new();
        /// let new_year = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600);
        /// assert_eq!(clock.wall(), new_year);
        /// assert_eq!(clock.elapsed(), Duration::ZERO);
        /// assert!(clock.sleeps().is_empty());
        /// ```
        pub fn new() -> Self {
            Self::with_wall(SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600))
        }

        /// A clock whose wall time starts at `wall`.
        ///
        /// # Examples
        ///
        /// ```
        /// use std::time::{Duration, SystemTime};
        /// use llm_failover::clock::{Clock, ManualClock};
        ///
        /// // Just before a minute boundary, to test a reset stated as an HTTP-date.
        /// let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_659);
        /// let clock = ManualClock::with_wall(start);
        /// assert_eq!(clock.wall(), start);
        /// let reset = start + Duration::from_secs(1);
        /// assert_eq!(clock.both().until_wall(reset), Some(Duration::from_secs(1)));
        /// ```
        pub fn with_wall(wall: SystemTime) -> Self {
            ManualClock {
                state: Arc::new(Mutex::new(State {
                    start: Instant::now(),
                    wall_start: wall,
                    elapsed: Duration::ZERO,
                    sleeps: Vec::new(),
                })),
                moved: Arc::new(tokio::sync::Notify::new()),
            }
        }

        fn lock(&self) -> std::sync::MutexGuard<'_, State> {
            self.state.lock().unwrap_or_else(PoisonError::into_inner)
        }

        /// Moves time forward by `by` without recording a sleep.
        ///
        /// # Examples
        ///
        /// ```
        /// use std::time::Duration;
        /// use llm_failover::clock::{Clock, ManualClock};
        ///
        /// let clock = ManualClock::new();
        /// let shared = clock.clone(); // clones share the same time
        /// let t0 = clock.now();
        /// shared.advance(Duration::from_secs(61));
        /// assert_eq!(clock.now() - t0, Duration::from_secs(61));
        /// assert!(clock.sleeps().is_empty()); // an advance is not a sleep
        /// ```
        pub fn advance(&self, by: Duration) {
            self.lock().elapsed += by;
            self.moved.notify_waiters();
        }

        /// Every wait requested through [`Clock::sleep_until`] so far, in order (zero-length
        /// waits are not recorded).
        ///
        /// # Examples
        ///
        /// ```
        /// use std::time::Duration;
        /// use llm_failover::clock::{Clock, ManualClock};
        ///
        /// # #[tokio::main(flavor = "current_thread")] async fn main() {
        /// let clock = ManualClock::new();
        /// for ms in [100, 200, 400] {
        ///     clock.sleep_until(clock.now() + Duration::from_millis(ms)).await;
        /// }
        /// clock.sleep_until(clock.now()).await; // zero-length: not recorded
        /// assert_eq!(
        ///     clock.sleeps(),
        ///     [100, 200, 400].map(Duration::from_millis),
        /// );
        /// # }
        /// ```
        pub fn sleeps(&self) -> Vec<Duration> {
            self.lock().sleeps.clone()
        }

        /// How much time has passed since the clock was created.
        ///
        /// # Examples
        ///
        /// ```
        /// use std::time::Duration;
        /// use llm_failover::clock::{Clock, ManualClock};
        ///
        /// # #[tokio::main(flavor = "current_thread")] async fn main() {
        /// let clock = ManualClock::new();
        /// clock.advance(Duration::from_secs(1));
        /// clock.sleep_until(clock.now() + Duration::from_secs(2)).await;
        /// // Advances and sleeps both count.
        /// assert_eq!(clock.elapsed(), Duration::from_secs(3));
        /// # }
        /// ```
        pub fn elapsed(&self) -> Duration {
            self.lock().elapsed
        }
    }

    #[async_trait]
    impl Clock for ManualClock {
        fn now(&self) -> Instant {
            let s = self.lock();
            s.start + s.elapsed
        }

        fn wall(&self) -> SystemTime {
            let s = self.lock();
            s.wall_start + s.elapsed
        }

        async fn sleep_until(&self, deadline: Instant) {
            {
                let mut s = self.lock();
                let now = s.start + s.elapsed;
                if deadline > now {
                    let wait = deadline - now;
                    s.sleeps.push(wait);
                    s.elapsed += wait;
                }
            }
            self.moved.notify_waiters();
            // Let other tasks run, as a real sleep would.
            tokio::task::yield_now().await;
        }

        async fn wait_for_time(&self, deadline: Instant) {
            loop {
                let moved = self.moved.notified();
                tokio::pin!(moved);
                // Registered before the time is read: a move in between is not missed.
                moved.as_mut().enable();
                if self.now() >= deadline {
                    return;
                }
                moved.await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_times_convert_to_instants_and_past_ones_clamp() {
        let now = Now {
            instant: Instant::now(),
            wall: SystemTime::UNIX_EPOCH + Duration::from_secs(1000),
        };
        let later = SystemTime::UNIX_EPOCH + Duration::from_secs(1030);
        assert_eq!(now.instant_at(later) - now.instant, Duration::from_secs(30));
        let earlier = SystemTime::UNIX_EPOCH + Duration::from_secs(900);
        assert_eq!(now.instant_at(earlier), now.instant);
        assert_eq!(now.until_wall(earlier), None);
        assert_eq!(now.until_wall(later), Some(Duration::from_secs(30)));
    }

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_follows_paused_time() {
        let clock = TokioClock;
        let t0 = clock.now();
        clock.sleep_until(t0 + Duration::from_secs(60)).await;
        assert!(clock.now() - t0 >= Duration::from_secs(60));
    }

    #[tokio::test]
    async fn manual_clock_records_waits_and_ignores_past_deadlines() {
        let clock = ManualClock::new();
        let t0 = clock.now();
        clock.sleep_until(t0 + Duration::from_millis(1500)).await;
        clock.sleep_until(t0).await;
        assert_eq!(clock.sleeps(), vec![Duration::from_millis(1500)]);
        assert_eq!(clock.elapsed(), Duration::from_millis(1500));
    }
}
