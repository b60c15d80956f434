//! One limit as the provider states it: its window learned from the resets it reports, its
//! level set from the remaining it states.
//!
//! * **The window comes from the reset.** A stated (limit L, remaining R, reset in T) means
//!   the bucket is full again in T: it refills at (L − R) / T, a window of L · T / (L − R). An
//!   observation is trusted when it is deep enough — at least [`MIN_DEPTH`] of the limit used
//!   — for the reset's rounding not to matter; a shallower one still says the window is at
//!   least T. An implied window within [`SNAP`] of the dialect's documented one is the
//!   documented one. Until anything is learned: the documented window, else a minute.
//! * **Stated remaining is the truth at the moment it was stated**, both ways: the level
//!   becomes R less what this client booked after the request that got the answer. A report
//!   older than one already applied changes nothing; the answer to a request admitted without
//!   a booking (before the key had any state) can only lower the level, since what was booked
//!   after it is not known. The client's own refunds do not touch these buckets: the next
//!   answer's truth already counts what was used.

use std::time::Duration;

use tokio::time::Instant;

use super::bucket::Bucket;
use super::Window;

/// The least share of the limit an observation must have used for the window it implies to
/// be adopted: at 5 %, a reset rounded to the second moves a one-minute window by under 2 %
/// once 3 of 60 requests are used, while a nearly full bucket (OpenAI's documented example:
/// 16 of 150,000 tokens used, reset 6 min) implies nothing reliable.
pub(crate) const MIN_DEPTH: f64 = 0.05;

/// An implied window within this share of the documented one is the documented one.
pub(crate) const SNAP: f64 = 0.25;

/// The window assumed when neither the dialect nor any response says one.
pub(crate) const DEFAULT_WINDOW: Duration = Duration::from_secs(60);

/// What is known of a window's length, and from what.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Learned {
    pub(crate) window: Duration,
    /// The depth of the observation it came from (0: the documented or default window, or a
    /// lower bound from a reset).
    pub(crate) depth: f64,
}

impl Learned {
    /// The window before any observation: `prior` (documented), else [`DEFAULT_WINDOW`].
    pub(crate) fn prior(prior: Option<Duration>) -> Self {
        Learned {
            window: prior.unwrap_or(DEFAULT_WINDOW),
            depth: 0.0,
        }
    }
}

/// What one stated (limit, remaining, time to reset) teaches about the window (pure).
///
/// A deep enough observation replaces what was known unless an earlier one was deeper; its
/// window snaps to `prior` when within [`SNAP`] of it. A shallow one only raises the window to
/// at least the time to reset (a bucket cannot take longer to fill than its window).
pub(crate) fn learn(
    known: Learned,
    limit: u64,
    remaining: u64,
    until_reset: Duration,
    prior: Option<Duration>,
) -> Learned {
    if limit == 0 || remaining >= limit || until_reset.is_zero() {
        return known;
    }
    let depth = (limit - remaining) as f64 / limit as f64;
    if depth >= MIN_DEPTH && depth >= known.depth {
        let implied = until_reset.as_secs_f64() / depth;
        let window = match prior {
            Some(p) if (implied / p.as_secs_f64() - 1.0).abs() <= SNAP => p,
            _ => Duration::from_secs_f64(implied),
        };
        return Learned { window, depth };
    }
    if until_reset > known.window {
        return Learned {
            window: until_reset,
            depth: known.depth,
        };
    }
    known
}

/// One stated dimension (requests, tokens, input or output tokens) of one key.
#[derive(Clone, Debug)]
pub(crate) struct Stated {
    pub(crate) bucket: Bucket,
    learned: Learned,
    prior: Option<Duration>,
    /// The booking whose answer was applied last (`None`: none with a booking).
    applied: Option<u64>,
}

impl Stated {
    /// A dimension first stated with `limit`, full.
    pub(crate) fn new(
        limit: u64,
        prior: Option<Duration>,
        allowance: Duration,
        now: Instant,
    ) -> Self {
        let learned = Learned::prior(prior);
        Stated {
            bucket: Bucket::new(limit, learned.window, now).with_allowance(allowance),
            learned,
            prior,
            applied: None,
        }
    }

    /// The window as learned so far.
    pub(crate) fn window(&self) -> Duration {
        self.learned.window
    }

    /// Applies a window the provider stated in the answer to booking `booked` (`None`: a
    /// request admitted without a booking), when `inflight` more of this dimension was
    /// booked after it.
    pub(crate) fn observe(&mut self, w: &Window, booked: Option<u64>, inflight: f64, now: Instant) {
        if let (Some(b), Some(last)) = (booked, self.applied) {
            if b < last {
                return; // older news than what was applied
            }
        }
        if booked.is_some() {
            self.applied = booked;
        }
        let limit = w.limit.filter(|l| *l > 0).unwrap_or(self.bucket.capacity());
        if let (Some(r), Some(reset)) = (w.remaining, w.reset_at) {
            let until = reset.saturating_duration_since(now);
            self.learned = learn(self.learned, limit, r, until, self.prior);
        }
        if limit != self.bucket.capacity() || self.learned.window != self.bucket.window() {
            self.bucket.set_limit(limit, self.learned.window, now);
        }
        if let Some(r) = w.remaining {
            match booked {
                Some(_) => self.bucket.set_level(r as f64 - inflight, now),
                // What was booked after an unbooked request is not known: its answer can
                // only lower the level.
                None => self.bucket.tighten(r, now),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);
    const MIN: Option<Duration> = Some(Duration::from_secs(60));
    const DAY: Option<Duration> = Some(Duration::from_secs(86_400));

    fn known(prior: Option<Duration>) -> Learned {
        Learned::prior(prior)
    }

    /// A name, what was known, limit, remaining, time to reset, documented window → window.
    type Case = (
        &'static str,
        Learned,
        u64,
        u64,
        Duration,
        Option<Duration>,
        Duration,
    );

    #[test]
    fn the_window_comes_from_the_reset() {
        // (what was known, limit, remaining, time to reset, documented window) → window.
        let cases: [Case; 8] = [
            (
                "a 6 s window: 60 a window, 30 left, full in 3 s",
                known(MIN),
                60,
                30,
                3 * S,
                MIN,
                6 * S,
            ),
            (
                "a minute snaps to the documented minute",
                known(MIN),
                60,
                50,
                Duration::from_millis(10_400),
                MIN,
                60 * S,
            ),
            (
                "Groq's per-day requests: too shallow to imply, the day stays",
                known(DAY),
                14_400,
                14_370,
                180 * S,
                DAY,
                86_400 * S,
            ),
            (
                "OpenAI's documented example: too shallow; the reset is a lower bound",
                known(MIN),
                150_000,
                149_984,
                360 * S,
                MIN,
                360 * S,
            ),
            (
                "a day-scale token reset on a minute dialect",
                known(MIN),
                1_000_000,
                400_000,
                50_400 * S,
                MIN,
                84_000 * S,
            ),
            (
                "remaining 0, reset 10 h away: a 10 h window",
                known(MIN),
                1_000,
                0,
                36_000 * S,
                MIN,
                36_000 * S,
            ),
            (
                "a full bucket says nothing",
                known(MIN),
                60,
                60,
                Duration::ZERO,
                MIN,
                60 * S,
            ),
            (
                "no documented window: a minute until told",
                known(None),
                100,
                100,
                Duration::ZERO,
                None,
                60 * S,
            ),
        ];
        for (name, k, limit, remaining, until, prior, want) in cases {
            let got = learn(k, limit, remaining, until, prior).window;
            let err = (got.as_secs_f64() - want.as_secs_f64()).abs();
            assert!(
                err < 1e-6 * want.as_secs_f64().max(1.0),
                "{name}: {got:?} != {want:?}"
            );
        }
    }

    #[test]
    fn a_deeper_observation_wins_and_a_shallow_one_only_raises_the_window() {
        let deep = learn(known(None), 100, 50, 5 * S, None);
        assert_eq!((deep.window, deep.depth), (10 * S, 0.5));
        // Shallower, implying 20 s: the deeper one stands.
        assert_eq!(learn(deep, 100, 90, 2 * S, None), deep);
        // A shallow one whose reset is longer than the window: the window is at least that.
        let shallow = learn(deep, 1000, 999, 30 * S, None);
        assert_eq!(shallow.window, 30 * S);
    }

    #[tokio::test(start_paused = true)]
    async fn stated_remaining_sets_the_level_both_ways_less_what_was_booked_since() {
        let now = Instant::now();
        let mut s = Stated::new(100, MIN, Duration::ZERO, now);
        s.bucket.charge(100, now); // drained locally
        let w = |remaining| Window {
            limit: Some(100),
            remaining: Some(remaining),
            reset_at: None,
            per: crate::ratelimit::Per::Minute,
        };
        // The provider says 80 left when the answer to booking 7 was sent; 5 were booked since.
        s.observe(&w(80), Some(7), 5.0, now);
        assert_eq!(s.bucket.level(now), 75.0, "raised to the truth");
        s.observe(&w(10), Some(9), 0.0, now);
        assert_eq!(s.bucket.level(now), 10.0, "and lowered to it");
        // An older answer arriving late changes nothing.
        s.observe(&w(90), Some(8), 0.0, now);
        assert_eq!(s.bucket.level(now), 10.0);
        // The answer to an unbooked request can only lower it.
        s.observe(&w(50), None, 0.0, now);
        assert_eq!(s.bucket.level(now), 10.0);
        s.observe(&w(4), None, 0.0, now);
        assert_eq!(s.bucket.level(now), 4.0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_learned_window_sets_the_refill_rate() {
        let now = Instant::now();
        let mut s = Stated::new(60, MIN, Duration::ZERO, now);
        let w = Window {
            limit: Some(60),
            remaining: Some(30),
            reset_at: Some(now + 3 * S),
            per: crate::ratelimit::Per::Minute,
        };
        s.observe(&w, None, 0.0, now);
        assert_eq!(s.window(), 6 * S);
        assert_eq!(s.bucket.per_sec(), 10.0, "60 per 6 s");
        assert_eq!(s.bucket.level(now + S), 40.0);
    }
}
