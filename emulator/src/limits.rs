//! Limit arithmetic: continuously refilled buckets over an explicit `now`.
//!
//! A bucket holds at most `capacity` (the limit) and refills `capacity` per window, evenly,
//! the way OpenAI and Anthropic describe their limits ("a limit of 60 RPM is enforced as one
//! request per second"). A request is admitted when every bucket can pay for it; a denied
//! request charges nothing. Nothing here reads a clock: the server passes `now`.

use std::time::Duration;

use tokio::time::Instant;

use crate::config::Limits;

/// The minutes in a day: a day window is 1440 (possibly scaled) minutes.
pub const MINUTES_PER_DAY: u32 = 1440;

/// The day of a (possibly scaled) minute: 1440 of them, saturating.
pub fn day_of(minute: Duration) -> Duration {
    minute.checked_mul(MINUTES_PER_DAY).unwrap_or(Duration::MAX)
}

/// Seconds as a `Duration`, rounded to the microsecond (so 1/0.05 is exactly 20 s).
fn secs(s: f64) -> Duration {
    Duration::from_micros((s * 1e6).round().max(0.0) as u64)
}

/// One continuously refilled bucket, or a fixed-window counter.
#[derive(Clone, Debug, PartialEq)]
pub struct Bucket {
    capacity: f64,
    level: f64,
    /// Refill per second.
    rate: f64,
    at: Instant,
    /// A fixed window instead (LiteLLM's per-minute counters): its length and the start of
    /// the current one. The count starts again at each boundary; nothing refills between.
    fixed: Option<(Duration, Instant)>,
}

impl Bucket {
    /// A full bucket of `capacity` refilling `capacity` per `window`.
    pub fn full(capacity: u64, window: Duration, now: Instant) -> Self {
        let capacity = capacity as f64;
        let secs = window.as_secs_f64().max(1e-3);
        Bucket {
            capacity,
            level: capacity,
            rate: capacity / secs,
            at: now,
            fixed: None,
        }
    }

    /// A full fixed-window counter of `capacity` per `window`, the first window starting
    /// `now`.
    pub fn fixed(capacity: u64, window: Duration, now: Instant) -> Self {
        Bucket {
            fixed: Some((window.max(Duration::from_millis(1)), now)),
            ..Bucket::full(capacity, window, now)
        }
    }

    /// The start of the window `now` falls in, for a fixed window.
    fn window_start(&self, now: Instant) -> Option<Instant> {
        let (w, start) = self.fixed?;
        let passed = now.saturating_duration_since(start).as_nanos() / w.as_nanos().max(1);
        Some(start + w * u32::try_from(passed).unwrap_or(u32::MAX))
    }

    /// The limit.
    pub fn capacity(&self) -> u64 {
        self.capacity as u64
    }

    /// The level at `now` (fractional).
    pub fn level(&self, now: Instant) -> f64 {
        if let (Some((_, start)), Some(current)) = (self.fixed, self.window_start(now)) {
            return if current > start {
                self.capacity
            } else {
                self.level
            };
        }
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        (self.level + dt * self.rate).min(self.capacity)
    }

    /// What is left at `now`, rounded down.
    pub fn remaining(&self, now: Instant) -> u64 {
        self.level(now).max(0.0).floor() as u64
    }

    /// How long until the bucket holds `n` (zero if it does now; `None` if `n` exceeds the
    /// capacity: it never will).
    pub fn wait_for(&self, n: u64, now: Instant) -> Option<Duration> {
        let n = n as f64;
        if n > self.capacity {
            return None;
        }
        let missing = n - self.level(now);
        Some(if missing <= 0.0 {
            Duration::ZERO
        } else if let Some(((w, _), start)) = self.fixed.zip(self.window_start(now)) {
            (start + w).saturating_duration_since(now)
        } else {
            secs(missing / self.rate)
        })
    }

    /// How long until the bucket is full again (what "reset" means in every provider's
    /// headers: the time until the limit is back to its initial state).
    pub fn until_full(&self, now: Instant) -> Duration {
        let missing = self.capacity - self.level(now);
        if missing <= 0.0 {
            Duration::ZERO
        } else if let Some(((w, _), start)) = self.fixed.zip(self.window_start(now)) {
            (start + w).saturating_duration_since(now)
        } else {
            secs(missing / self.rate)
        }
    }

    fn settle(&mut self, now: Instant) {
        self.level = self.level(now);
        if let (Some((w, _)), Some(start)) = (self.fixed, self.window_start(now)) {
            self.fixed = Some((w, start));
        }
        if now > self.at {
            self.at = now;
        }
    }

    /// Takes `n` (the caller checked it fits).
    pub fn take(&mut self, n: u64, now: Instant) {
        self.settle(now);
        self.level -= n as f64;
    }

    /// Gives `n` back, never above capacity.
    pub fn give(&mut self, n: u64, now: Instant) {
        self.settle(now);
        self.level = (self.level + n as f64).min(self.capacity);
    }

    /// Empties the bucket.
    pub fn drain(&mut self, now: Instant) {
        self.settle(now);
        self.level = 0.0;
    }

    /// Changes the capacity and window, keeping the current level (clamped to the new
    /// capacity).
    pub fn reconfigure(&mut self, capacity: u64, window: Duration, now: Instant) {
        self.settle(now);
        let fresh = Bucket::full(capacity, window, now);
        self.capacity = fresh.capacity;
        self.rate = fresh.rate;
        self.level = self.level.min(self.capacity);
    }
}

/// Which limit a request ran into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LimitName {
    /// Requests per minute.
    Rpm,
    /// Tokens per minute.
    Tpm,
    /// Requests per day.
    Rpd,
    /// Tokens per day.
    Tpd,
    /// Requests in flight.
    Concurrency,
}

impl LimitName {
    /// True for the per-day limits.
    pub fn is_daily(self) -> bool {
        matches!(self, LimitName::Rpd | LimitName::Tpd)
    }

    /// True for the token limits.
    pub fn is_tokens(self) -> bool {
        matches!(self, LimitName::Tpm | LimitName::Tpd)
    }
}

/// The state of one bucket as headers state it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowState {
    /// The limit.
    pub limit: u64,
    /// What is left (rounded down).
    pub remaining: u64,
    /// Time until the bucket is full again.
    pub reset: Duration,
}

/// Every bucket of one scope at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Requests per minute.
    pub rpm: Option<WindowState>,
    /// Tokens per minute.
    pub tpm: Option<WindowState>,
    /// Requests per day.
    pub rpd: Option<WindowState>,
    /// Tokens per day.
    pub tpd: Option<WindowState>,
}

/// Why a request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Denial {
    /// The limit that refused it (the one with the longest wait).
    pub which: LimitName,
    /// That limit's value.
    pub limit: u64,
    /// How much of it is in use (limit − remaining).
    pub used: u64,
    /// What the request asked for.
    pub requested: u64,
    /// How long until it would pass; `None` when it never can (more than the capacity).
    pub retry_after: Option<Duration>,
}

/// The answer to "may this request pass now?".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Admitted and charged.
    Admitted,
    /// Refused, nothing charged.
    Denied(Denial),
}

/// The buckets of one scope (a model, or a whole provider).
#[derive(Clone, Debug, PartialEq)]
pub struct LimitSet {
    rpm: Option<Bucket>,
    tpm: Option<Bucket>,
    rpd: Option<Bucket>,
    tpd: Option<Bucket>,
}

impl LimitSet {
    /// Full buckets for `limits`, with a minute of `minute`.
    pub fn new(limits: &Limits, minute: Duration, now: Instant) -> Self {
        Self::with_windows(limits, minute, false, now)
    }

    /// Full buckets for `limits`; fixed-window counters when `fixed`.
    pub fn with_windows(limits: &Limits, minute: Duration, fixed: bool, now: Instant) -> Self {
        let day = day_of(minute);
        let mk = |l: Option<u64>, w: Duration| {
            l.map(|l| {
                if fixed {
                    Bucket::fixed(l, w, now)
                } else {
                    Bucket::full(l, w, now)
                }
            })
        };
        LimitSet {
            rpm: mk(limits.rpm, minute),
            tpm: mk(limits.tpm, minute),
            rpd: mk(limits.rpd, day),
            tpd: mk(limits.tpd, day),
        }
    }

    /// Applies new limits, keeping current levels where a limit stays.
    pub fn reconfigure(&mut self, limits: &Limits, minute: Duration, now: Instant) {
        let day = day_of(minute);
        let apply = |b: &mut Option<Bucket>, l: Option<u64>, w: Duration| match (b.as_mut(), l) {
            (Some(bucket), Some(l)) => bucket.reconfigure(l, w, now),
            (_, l) => *b = l.map(|l| Bucket::full(l, w, now)),
        };
        apply(&mut self.rpm, limits.rpm, minute);
        apply(&mut self.tpm, limits.tpm, minute);
        apply(&mut self.rpd, limits.rpd, day);
        apply(&mut self.tpd, limits.tpd, day);
    }

    fn buckets(&self) -> [(LimitName, Option<&Bucket>, bool); 4] {
        [
            (LimitName::Rpm, self.rpm.as_ref(), false),
            (LimitName::Tpm, self.tpm.as_ref(), true),
            (LimitName::Rpd, self.rpd.as_ref(), false),
            (LimitName::Tpd, self.tpd.as_ref(), true),
        ]
    }

    /// Admits one request costing `tokens` (charging every bucket), or says which limit
    /// refuses it and for how long. A request larger than a token bucket's capacity is
    /// refused with `retry_after: None`: it can never pass.
    pub fn admit(&mut self, tokens: u64, now: Instant) -> Admission {
        let mut worst: Option<Denial> = None;
        for (name, bucket, is_tokens) in self.buckets() {
            let Some(b) = bucket else { continue };
            let need = if is_tokens { tokens } else { 1 };
            if need == 0 {
                continue;
            }
            let wait = b.wait_for(need, now);
            if wait == Some(Duration::ZERO) {
                continue;
            }
            let denial = Denial {
                which: name,
                limit: b.capacity(),
                used: b.capacity().saturating_sub(b.remaining(now)),
                requested: need,
                retry_after: wait,
            };
            let worse = match (&worst, wait) {
                (None, _) => true,
                (Some(w), None) => w.retry_after.is_some(),
                (Some(w), Some(d)) => w.retry_after.is_some_and(|wd| d > wd),
            };
            if worse {
                worst = Some(denial);
            }
        }
        if let Some(d) = worst {
            return Admission::Denied(d);
        }
        for (b, n) in [
            (&mut self.rpm, 1),
            (&mut self.tpm, tokens),
            (&mut self.rpd, 1),
            (&mut self.tpd, tokens),
        ] {
            if let Some(b) = b.as_mut() {
                b.take(n, now);
            }
        }
        Admission::Admitted
    }

    /// Gives back tokens charged but not used.
    pub fn refund(&mut self, tokens: u64, now: Instant) {
        for b in [&mut self.tpm, &mut self.tpd].into_iter().flatten() {
            b.give(tokens, now);
        }
    }

    /// Empties every bucket (used by tests and by a daily-quota fault).
    pub fn drain(&mut self, now: Instant) {
        for b in [&mut self.rpm, &mut self.tpm, &mut self.rpd, &mut self.tpd]
            .into_iter()
            .flatten()
        {
            b.drain(now);
        }
    }

    /// The state of every bucket at `now`.
    pub fn snapshot(&self, now: Instant) -> Snapshot {
        let st = |b: &Option<Bucket>| {
            b.as_ref().map(|b| WindowState {
                limit: b.capacity(),
                remaining: b.remaining(now),
                reset: b.until_full(now),
            })
        };
        Snapshot {
            rpm: st(&self.rpm),
            tpm: st(&self.tpm),
            rpd: st(&self.rpd),
            tpd: st(&self.tpd),
        }
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_fixed_window_counts_to_its_limit_then_waits_for_the_boundary() {
        let t0 = Instant::now();
        let mut b = Bucket::fixed(3, MIN, t0);
        for _ in 0..3 {
            assert_eq!(b.wait_for(1, t0), Some(Duration::ZERO));
            b.take(1, t0);
        }
        // Nothing refills within the window: the wait is the window's end.
        let t = t0 + Duration::from_secs(40);
        assert_eq!(b.level(t), 0.0);
        assert_eq!(b.wait_for(1, t), Some(Duration::from_secs(20)));
        assert_eq!(b.until_full(t), Duration::from_secs(20));
        // At the boundary the count starts again.
        let next = t0 + MIN;
        assert_eq!(b.level(next), 3.0);
        b.take(1, next);
        assert_eq!(b.remaining(next + Duration::from_secs(59)), 2);
        assert_eq!(b.remaining(t0 + 2 * MIN), 3);
    }
    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_full_bucket_admits_its_capacity_then_refuses() {
        let t0 = Instant::now();
        let mut set = LimitSet::new(&Limits::per_minute(3, 1000), MIN, t0);
        for _ in 0..3 {
            assert_eq!(set.admit(10, t0), Admission::Admitted);
        }
        let Admission::Denied(d) = set.admit(10, t0) else {
            panic!("fourth request admitted")
        };
        assert_eq!(d.which, LimitName::Rpm);
        assert_eq!((d.limit, d.used, d.requested), (3, 3, 1));
        // 3 per minute refill one every 20 s.
        assert_eq!(d.retry_after, Some(Duration::from_secs(20)));
    }

    #[test]
    fn refills_continuously_at_limit_per_window() {
        let t0 = Instant::now();
        let mut b = Bucket::full(60, MIN, t0);
        b.take(60, t0);
        assert_eq!(b.remaining(t0), 0);
        assert_eq!(b.remaining(t0 + ms(999)), 0);
        assert_eq!(b.remaining(t0 + ms(1000)), 1);
        assert_eq!(b.remaining(t0 + Duration::from_secs(30)), 30);
        assert_eq!(b.remaining(t0 + Duration::from_secs(600)), 60, "capped");
        assert_eq!(b.until_full(t0), MIN);
        assert_eq!(
            b.until_full(t0 + Duration::from_secs(45)),
            Duration::from_secs(15)
        );
    }

    #[test]
    fn a_scaled_minute_refills_faster() {
        let t0 = Instant::now();
        let mut set = LimitSet::new(&Limits::per_minute(10, 10_000), ms(100), t0);
        for _ in 0..10 {
            assert_eq!(set.admit(1, t0), Admission::Admitted);
        }
        assert!(matches!(set.admit(1, t0), Admission::Denied(_)));
        assert_eq!(set.admit(1, t0 + ms(10)), Admission::Admitted);
    }

    #[test]
    fn the_token_bucket_refuses_with_the_wait_for_the_missing_tokens() {
        let t0 = Instant::now();
        let mut set = LimitSet::new(&Limits::per_minute(100, 6000), MIN, t0);
        assert_eq!(set.admit(5000, t0), Admission::Admitted);
        let Admission::Denied(d) = set.admit(1500, t0) else {
            panic!("admitted past TPM")
        };
        assert_eq!(d.which, LimitName::Tpm);
        assert_eq!((d.limit, d.used, d.requested), (6000, 5000, 1500));
        // 500 missing at 100 tokens/s.
        assert_eq!(d.retry_after, Some(Duration::from_secs(5)));
        // A denied request charged nothing.
        assert_eq!(set.snapshot(t0).rpm.unwrap().remaining, 99);
    }

    #[test]
    fn a_request_larger_than_capacity_can_never_pass() {
        let t0 = Instant::now();
        let mut set = LimitSet::new(&Limits::per_minute(100, 1000), MIN, t0);
        let Admission::Denied(d) = set.admit(1001, t0) else {
            panic!("too large admitted")
        };
        assert_eq!((d.which, d.retry_after), (LimitName::Tpm, None));
    }

    #[test]
    fn the_longest_wait_names_the_limit() {
        let t0 = Instant::now();
        let limits = Limits::per_minute(2, 1000).with_daily(Some(2), None);
        let mut set = LimitSet::new(&limits, MIN, t0);
        set.admit(1, t0);
        set.admit(1, t0);
        let Admission::Denied(d) = set.admit(1, t0) else {
            panic!()
        };
        assert_eq!(d.which, LimitName::Rpd);
        assert_eq!(d.retry_after, Some(MIN * 1440 / 2));
        assert!(d.which.is_daily());
    }

    #[test]
    fn refunds_never_exceed_capacity() {
        let t0 = Instant::now();
        let mut set = LimitSet::new(&Limits::per_minute(10, 1000), MIN, t0);
        set.admit(600, t0);
        set.refund(500, t0);
        assert_eq!(set.snapshot(t0).tpm.unwrap().remaining, 900);
        set.refund(500, t0);
        assert_eq!(set.snapshot(t0).tpm.unwrap().remaining, 1000);
    }

    #[test]
    fn snapshot_states_limit_remaining_and_time_to_full() {
        let t0 = Instant::now();
        let mut set = LimitSet::new(&Limits::per_minute(60, 6000), MIN, t0);
        set.admit(600, t0);
        let s = set.snapshot(t0);
        assert_eq!(
            s.rpm,
            Some(WindowState {
                limit: 60,
                remaining: 59,
                reset: Duration::from_secs(1)
            })
        );
        assert_eq!(
            s.tpm,
            Some(WindowState {
                limit: 6000,
                remaining: 5400,
                reset: Duration::from_secs(6)
            })
        );
        assert_eq!((s.rpd, s.tpd), (None, None));
    }

    #[test]
    fn reconfigure_keeps_the_level_clamped_to_the_new_capacity() {
        let t0 = Instant::now();
        let mut set = LimitSet::new(&Limits::per_minute(10, 1000), MIN, t0);
        set.admit(100, t0);
        set.reconfigure(&Limits::per_minute(5, 2000), MIN, t0);
        let s = set.snapshot(t0);
        assert_eq!(s.rpm.map(|w| (w.limit, w.remaining)), Some((5, 5)));
        assert_eq!(s.tpm.map(|w| (w.limit, w.remaining)), Some((2000, 900)));
        set.reconfigure(&Limits::none(), MIN, t0);
        assert_eq!(set.snapshot(t0), Snapshot::default());
    }

    #[test]
    fn time_never_runs_backwards_for_a_bucket() {
        let t0 = Instant::now();
        let mut b = Bucket::full(10, MIN, t0 + ms(500));
        b.take(1, t0); // an earlier `now` does not refill or panic
        assert_eq!(b.remaining(t0), 9);
    }
}
