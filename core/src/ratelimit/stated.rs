//! One limit as the provider states it: its window learned from the resets it reports, its
//! level set from the remaining it states.
//!
//! * **The window comes from the reset.** A stated (limit L, remaining R, reset in T) means
//!   the bucket is full again in T: it refills at (L − R) / T, a window of L · T / (L − R). An
//!   observation is trusted when it is deep enough — at least [`MIN_DEPTH`] of the limit used
//!   — for the reset's rounding not to matter; a shallower one still says the window is at
//!   least T. An implied window within [`SNAP`] of the dialect's documented one is the
//!   documented one. Until anything is learned: the documented window, else a minute.
//! * **Fixed windows** are told from buckets by how a stated level moves, for providers that
//!   state no reset: a jump back to the limit within a quarter window is a boundary; no
//!   refill where a bucket would have given units back, twice, or "none left" where a bucket
//!   would have one back, is a fixed window whose boundary comes a window after the first
//!   stated level at the latest. In a fixed window nothing comes back before the boundary:
//!   a request that does not fit waits for it (not a second at a time).
//! * **Stated remaining is the truth at the moment it was stated**, both ways: the level
//!   becomes R less what this client booked after the request that got the answer. A report
//!   older than one already applied changes nothing; the answer to a request admitted without
//!   a booking (before the key had any state) can only lower the level, since what was booked
//!   after it is not known. The client's own refunds do not touch these buckets: the next
//!   answer's truth already counts what was used.

use std::time::Duration;

use tokio::time::Instant;

use super::Window;
use super::bucket::{Bucket, InsufficientCapacity};

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

/// How a stated limit refills.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Refill {
    /// A bucket: continuously, the limit per window (what OpenAI and Anthropic document).
    Continuous,
    /// A fixed window (a counter that starts again at each boundary, e.g. a calendar
    /// minute): nothing comes back before `next`, then the whole limit does.
    Fixed { next: Instant },
}

/// What one stated level says of how the limit refills (pure): `gain` is what the provider
/// gave back since the last stated level (the stated level now, less what the local model
/// says would be left with no refill at all), `bucket_gain` what a bucket of the learned
/// window would have given back, over `elapsed` of a `window` of `limit`.
pub(crate) enum Sign {
    /// The limit came back at once: a fixed window's boundary passed.
    Jump,
    /// Nothing came back where a bucket would have given a few units.
    Dry,
    /// About what a bucket gives back.
    Steady,
    /// Too little time or too little at stake to tell.
    Unclear,
}

/// Reads a stated level's move (see [`Sign`]).
pub(crate) fn sign(
    gain: f64,
    bucket_gain: f64,
    elapsed: Duration,
    window: Duration,
    limit: u64,
) -> Sign {
    let limit = limit as f64;
    if gain >= limit / 2.0 && elapsed < window / 4 {
        return Sign::Jump;
    }
    if bucket_gain < DRY_UNITS {
        return Sign::Unclear;
    }
    if gain < bucket_gain / 4.0 {
        Sign::Dry
    } else if gain >= bucket_gain / 2.0 {
        Sign::Steady
    } else {
        Sign::Unclear
    }
}

/// The least a bucket would have given back, in units, for its absence to say something.
const DRY_UNITS: f64 = 3.0;

/// Stated levels in a row that saw no refill before the limit counts as a fixed window.
const DRY_RUN: u32 = 2;

/// A statement whose move said nothing is read against the last one that did until that one
/// is this share of a window old (a jump back to the limit is told within a quarter window).
const REREAD: f64 = 0.125;

/// One stated dimension (requests, tokens, input or output tokens) of one key.
#[derive(Clone, Debug)]
pub(crate) struct Stated {
    pub(crate) bucket: Bucket,
    learned: Learned,
    prior: Option<Duration>,
    /// The booking whose answer was applied last (`None`: none with a booking).
    applied: Option<u64>,
    refill: Refill,
    /// When the level was last set from a stated remaining, and to what (and when the first
    /// was).
    last_truth: Option<(Instant, f64)>,
    first_truth: Option<Instant>,
    /// What was booked since the last stated level.
    charged: f64,
    /// Stated levels in a row that saw no refill.
    dry: u32,
    /// The last stated level came without a reset (LiteLLM's limits: a limit and what is
    /// left, nothing on when it is full again).
    resetless: bool,
    /// A stated level has shown a bucket's refill: the limit is a bucket, not a fixed window.
    proven: bool,
    /// The level the last statement set (what was left, less what was in flight).
    stated_level: Option<f64>,
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
            refill: Refill::Continuous,
            last_truth: None,
            first_truth: None,
            charged: 0.0,
            dry: 0,
            resetless: false,
            proven: false,
            stated_level: None,
        }
    }

    /// None left of a limit stated without a reset whose refill is not known yet: a bucket
    /// would give a unit back at its refill rate, a fixed window nothing before its boundary.
    /// Until an answer tells which, one request at a time finds out
    /// ([`KeyState`](super::key_state::KeyState)'s probe): every request sent at the refill
    /// rate into a closed window is refused, and those sent while the first refusal is on
    /// its way are refused with it.
    /// A request sent after it was spent was answered: it gives back before a window ends.
    pub(crate) fn prove(&mut self) {
        if self.refill == Refill::Continuous {
            self.proven = true;
        }
    }

    ///
    /// Spent is what the last statement said (a unit or less left, less what was in flight),
    /// not the level since: that one counts the refill that is in doubt.
    pub(crate) fn empty_and_unproven(&self) -> bool {
        self.resetless
            && !self.proven
            && self.refill == Refill::Continuous
            && self.stated_level.is_some_and(|l| l < 1.0)
    }

    /// The window as learned so far.
    pub(crate) fn window(&self) -> Duration {
        self.learned.window
    }

    /// A fixed window's boundaries that `now` has passed give the limit back.
    fn roll(&mut self, now: Instant) {
        let Refill::Fixed { next } = self.refill else {
            return;
        };
        if now < next {
            return;
        }
        let w = self.learned.window.max(Duration::from_millis(1));
        let passed = 1 + now.saturating_duration_since(next).as_nanos() / w.as_nanos();
        let level = self.bucket.level(now) + self.bucket.capacity() as f64 * passed as f64;
        self.bucket.set_level(level, now);
        self.refill = Refill::Fixed {
            next: next + w * u32::try_from(passed).unwrap_or(u32::MAX),
        };
    }

    /// The level at `now`.
    pub(crate) fn level(&mut self, now: Instant) -> f64 {
        self.roll(now);
        self.bucket.level(now)
    }

    /// When the level is back at its highest (`None`: it is there now); in a fixed window,
    /// the boundary from which the windows' limits fill it.
    pub(crate) fn full_at(&mut self, now: Instant) -> Option<Instant> {
        self.roll(now);
        let full = self.bucket.full_at(now)?;
        let Refill::Fixed { next } = self.refill else {
            return Some(full);
        };
        let missing = self.bucket.capacity() as f64 - self.bucket.level(now);
        let windows = (missing / self.bucket.capacity().max(1) as f64)
            .ceil()
            .clamp(1.0, f64::from(u32::MAX)) as u32;
        Some(next + self.learned.window * (windows - 1))
    }

    /// How long `n` would wait now (see [`Bucket::peek`]); in a fixed window, until the
    /// boundary from which the windows' limits cover it.
    pub(crate) fn wait(&mut self, n: u64, now: Instant) -> Result<Duration, InsufficientCapacity> {
        self.roll(now);
        let Refill::Fixed { next } = self.refill else {
            return self.bucket.peek(n, now);
        };
        // Checks the capacity; the bucket's own (near-zero) refill says nothing here.
        self.bucket.peek(n, now)?;
        let missing = n as f64 - self.bucket.level(now);
        if missing <= 0.0 {
            return Ok(Duration::ZERO);
        }
        let windows = (missing / self.bucket.capacity() as f64).ceil().max(1.0) as u32;
        Ok((next + self.learned.window * (windows - 1)).saturating_duration_since(now))
    }

    /// Books `n`.
    pub(crate) fn charge(&mut self, n: u64, now: Instant) {
        self.roll(now);
        self.bucket.charge(n, now);
        self.charged += n as f64;
    }

    /// Empties it (a 429 about it): how the level moves is read from here on.
    ///
    /// A refusal of a limit stated without a reset, while it is modelled as a bucket, is a
    /// fixed window: the bucket let the request go (it had refilled a unit), and the provider
    /// had nothing — a closed window, as at every refill slot after a LiteLLM proxy's burst
    /// (it counts per calendar minute and states no reset). Waited out to its boundary from
    /// here on, not retried at the refill rate into the wall.
    pub(crate) fn drain(&mut self, now: Instant) {
        self.roll(now);
        let refused_open =
            self.resetless && self.last_truth.is_some() && self.refill == Refill::Continuous;
        self.bucket.drain(now);
        if self.last_truth.is_some() {
            self.last_truth = Some((now, self.bucket.level(now)));
            self.charged = 0.0;
        }
        if refused_open {
            self.fix_boundary(now);
            let limit = self.bucket.capacity();
            self.shape_bucket(limit, now);
        }
    }

    /// When a closed fixed window opens again: its boundary, while none is left before it
    /// (`None`: a bucket, or units left).
    pub(crate) fn closed_until(&mut self, now: Instant) -> Option<Instant> {
        self.roll(now);
        match self.refill {
            Refill::Fixed { next } if self.bucket.level(now) < 1.0 => Some(next),
            _ => None,
        }
    }

    /// A fixed window whose boundary was not seen: the window that held the first stated
    /// level ends a window after it at the latest.
    fn fix_boundary(&mut self, now: Instant) {
        let window = self.learned.window;
        let mut next = self.first_truth.unwrap_or(now) + window;
        while next <= now {
            next += window;
        }
        self.refill = Refill::Fixed { next };
    }

    /// Applies a window the provider stated in the answer to booking `booked` (`None`: a
    /// request admitted without a booking), when `inflight` more of this dimension is booked
    /// and not yet answered.
    pub(crate) fn observe(&mut self, w: &Window, booked: Option<u64>, inflight: f64, now: Instant) {
        if let (Some(b), Some(last)) = (booked, self.applied)
            && b < last
        {
            return; // older news than what was applied
        }
        self.roll(now);
        if booked.is_some() {
            self.applied = booked;
        }
        let limit = w.limit.filter(|l| *l > 0).unwrap_or(self.bucket.capacity());
        if let (Some(r), Some(reset)) = (w.remaining, w.reset_at) {
            let until = reset.saturating_duration_since(now);
            self.learned = learn(self.learned, limit, r, until, self.prior);
        }
        self.shape_bucket(limit, now);
        let Some(r) = w.remaining else { return };
        let Some(_) = booked else {
            // What was booked after an unbooked request is not known: its answer can only
            // lower the level.
            self.bucket.tighten(r, now);
            return;
        };
        let truth = r as f64 - inflight;
        self.resetless = w.reset_at.is_none();
        let read = !self.resetless || self.classify(truth, limit, now);
        self.bucket.set_level(truth, now);
        self.stated_level = Some(truth);
        tracing::trace!(
            remaining = r,
            truth,
            proven = self.proven,
            fixed = self.refill != Refill::Continuous,
            "stated level"
        );
        if read {
            self.last_truth = Some((now, self.bucket.level(now)));
            self.charged = 0.0;
        }
        self.first_truth.get_or_insert(now);
    }

    /// The bucket's capacity and rate for `limit` and the learned window: in a fixed window
    /// it does not refill (the boundaries do).
    fn shape_bucket(&mut self, limit: u64, now: Instant) {
        let window = match self.refill {
            Refill::Continuous => self.learned.window,
            Refill::Fixed { .. } => self.learned.window * 1_000,
        };
        if limit != self.bucket.capacity() || window != self.bucket.window() {
            self.bucket.set_limit(limit, window, now);
        }
    }

    /// Learns, from how a stated level moved, whether the limit is a fixed window. Only for
    /// providers that state no reset (a reset says which it is: a bucket's counts down from
    /// the window, a fixed window's to its boundary — both read as "full again then").
    ///
    /// The move is read against the last statement it was read against, not the last one:
    /// answers 100 ms apart never show a bucket's refill (a tenth of a unit), a few seconds
    /// of them do. Returns whether this statement is the one to read the next against: it
    /// said something, or the last one is [`REREAD`] of a window old.
    fn classify(&mut self, truth: f64, limit: u64, now: Instant) -> bool {
        let Some((last, level)) = self.last_truth else {
            return true;
        };
        let elapsed = now.saturating_duration_since(last);
        let window = self.learned.window;
        // Where the level would be with no refill at all, and what a bucket would have
        // given back since (never above full).
        let dry_level = level - self.charged;
        let bucket_gain = match self.refill {
            Refill::Continuous => {
                let rate = limit as f64 / window.as_secs_f64().max(1e-3);
                (elapsed.as_secs_f64() * rate).min((limit as f64 - dry_level).max(0.0))
            }
            Refill::Fixed { .. } => 0.0,
        };
        let gain = truth - dry_level;
        // None left where a bucket would have a unit back by now: it did not refill as a
        // bucket would — decisive on its own (that is how a closed fixed window answers).
        let closed = truth < 1.0 && dry_level + bucket_gain >= 1.0;
        let read = if closed {
            self.dry = DRY_RUN - 1;
            Sign::Dry
        } else {
            sign(gain, bucket_gain, elapsed, window, limit)
        };
        match read {
            Sign::Jump => {
                // The boundary passed between the last truth and now: the next is a window
                // after now at the latest.
                self.refill = Refill::Fixed { next: now + window };
                self.dry = 0;
            }
            Sign::Dry if self.refill == Refill::Continuous => {
                self.dry += 1;
                if self.dry >= DRY_RUN {
                    self.fix_boundary(now);
                }
            }
            Sign::Steady if self.refill == Refill::Continuous => {
                self.dry = 0;
                self.proven = true;
            }
            Sign::Unclear if elapsed < window.mul_f64(REREAD) => return false,
            _ => {}
        }
        self.shape_bucket(limit, now);
        true
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

    /// LiteLLM's shape: limit and remaining, no reset, a count per calendar minute.
    fn litellm(remaining: u64) -> Window {
        Window {
            limit: Some(60),
            remaining: Some(remaining),
            reset_at: None,
            per: crate::ratelimit::Per::Minute,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn no_refill_where_a_bucket_would_show_some_is_a_fixed_window_waited_out() {
        let t0 = Instant::now();
        let mut s = Stated::new(60, MIN, Duration::ZERO, t0);
        for _ in 0..30 {
            s.charge(1, t0);
        }
        s.observe(&litellm(30), Some(0), 0.0, t0);
        // Ten more in 5 s, ten more in the next 5: a bucket would have given 5 back each time
        // (a nearly full one would have had nothing to give, and would say nothing).
        for (i, (n, left)) in [(10, 20), (10, 10)].into_iter().enumerate() {
            let t = t0 + 5 * S * (i as u32 + 1);
            for _ in 0..n {
                s.charge(1, t);
            }
            s.observe(&litellm(left), Some(i as u64 + 1), 0.0, t);
        }
        let t = t0 + 10 * S;
        assert_eq!(s.refill, Refill::Fixed { next: t0 + 60 * S });
        // Ten fit now; the eleventh waits for the window's end, not a second.
        assert_eq!(s.wait(10, t), Ok(Duration::ZERO));
        assert_eq!(s.wait(11, t), Ok(50 * S));
        // At the boundary the limit is back.
        assert_eq!(
            s.level(t0 + 60 * S),
            60.0,
            "10 left plus the new window, capped"
        );
    }

    /// LiteLLM after its burst: none left, then a refusal at the first refill slot (a bucket
    /// would have had a unit back): a fixed window, waited out to its boundary, not retried
    /// each second. A limit stated with a reset is not judged by a refusal.
    #[tokio::test(start_paused = true)]
    async fn a_refusal_at_a_refill_slot_of_a_resetless_limit_is_a_fixed_window() {
        let t0 = Instant::now();
        let mut s = Stated::new(60, MIN, Duration::ZERO, t0);
        for _ in 0..60 {
            s.charge(1, t0);
        }
        s.observe(&litellm(0), Some(0), 0.0, t0);
        assert_eq!(s.refill, Refill::Continuous);
        let t = t0 + S;
        assert_eq!(s.wait(1, t), Ok(Duration::ZERO), "a bucket refilled one");
        s.charge(1, t);
        s.drain(t);
        assert_eq!(s.refill, Refill::Fixed { next: t0 + 60 * S });
        assert_eq!(s.wait(1, t), Ok(59 * S), "to the boundary, not a second");
        assert_eq!(s.level(t0 + 60 * S), 60.0);

        // The same with a stated reset: the reset says what the window is.
        let mut r = Stated::new(60, MIN, Duration::ZERO, t0);
        let with_reset = Window {
            reset_at: Some(t0 + 60 * S),
            ..litellm(0)
        };
        r.observe(&with_reset, Some(0), 0.0, t0);
        r.drain(t);
        assert_eq!(r.refill, Refill::Continuous);
    }

    /// LiteLLM under a fast burst: an answer every 100 ms, each stating one fewer left. No
    /// two answers in a row are far enough apart for a bucket's refill to show (a tenth of a
    /// unit), but over seconds it would have given several back: the move is read against an
    /// older statement, and the window is known to be fixed well before the burst ends (at
    /// the boundary a window after the first statement), not after requests went into the
    /// wall at the bucket's refill rate.
    #[tokio::test(start_paused = true)]
    async fn a_fast_burst_is_read_against_an_older_statement() {
        // (ms between answers, the answer by which it is known at the latest): 60 in 8 s,
        // the real proxy's burst, is known after two dry reads (6 s); 60 in 6 s by the
        // answer that says none is left where a bucket would have had units back.
        for (gap_ms, by) in [(133, 46), (100, 59)] {
            let gap = Duration::from_millis(gap_ms);
            let t0 = Instant::now();
            let mut s = Stated::new(60, MIN, Duration::ZERO, t0);
            let mut fixed_at = None;
            for i in 0..60u32 {
                let t = t0 + gap * i;
                s.charge(1, t);
                s.observe(&litellm(59 - u64::from(i)), Some(u64::from(i)), 0.0, t);
                if fixed_at.is_none() && s.refill != Refill::Continuous {
                    fixed_at = Some(i);
                }
            }
            let at = fixed_at.expect("learned as a fixed window");
            assert!(at <= by, "{gap_ms} ms: learned after {at} answers of 60");
            assert_eq!(s.refill, Refill::Fixed { next: t0 + 60 * S }, "{gap_ms} ms");
            // None left: nothing until the boundary (a bucket would let one go within a
            // second).
            let t = t0 + gap * 60;
            assert_eq!(s.wait(1, t), Ok(t0 + 60 * S - t), "{gap_ms} ms");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_jump_back_to_the_limit_marks_the_boundary() {
        let t0 = Instant::now();
        let mut s = Stated::new(60, MIN, Duration::ZERO, t0);
        for _ in 0..50 {
            s.charge(1, t0);
        }
        s.observe(&litellm(10), Some(0), 0.0, t0);
        // Two seconds later it says 59 of 60 left after one more: the window started again.
        let t = t0 + 2 * S;
        s.charge(1, t);
        s.observe(&litellm(59), Some(1), 0.0, t);
        assert_eq!(s.refill, Refill::Fixed { next: t + 60 * S });
    }

    #[tokio::test(start_paused = true)]
    async fn a_bucket_that_refills_steadily_stays_a_bucket() {
        let t0 = Instant::now();
        let mut s = Stated::new(60, MIN, Duration::ZERO, t0);
        for _ in 0..40 {
            s.charge(1, t0);
        }
        s.observe(&litellm(20), Some(0), 0.0, t0);
        for i in 1..=4u32 {
            // Ten seconds, ten units back, five booked.
            let t = t0 + 10 * S * i;
            for _ in 0..5 {
                s.charge(1, t);
            }
            s.observe(&litellm(20 + 5 * u64::from(i)), Some(u64::from(i)), 0.0, t);
        }
        assert_eq!(s.refill, Refill::Continuous);
    }
}
