//! A pace learned from 429s alone, for a key whose provider states no limit and for which
//! none is configured (Gemini-style, or a proxy that says nothing).
//!
//! The algorithm (TCP's, on a request rate):
//!
//! * **Start** at the first 429: [`START`] requests a second, doubling every clean
//!   [`INTERVAL`] (slow start: the provider's rate is unknown) until the next 429.
//! * **Multiplicative decrease** at a 429: the rate becomes [`DECREASE`] × the rate that was
//!   being achieved (bookings over the last [`MEASURE`]), never above the rate allowed then.
//!   Only a 429 to a request booked after the last cut counts: the ones in flight at a cut
//!   were sent at the old rate.
//! * **Additive increase** after each clean [`INTERVAL`]: + [`INCREASE`] × the rate set at the
//!   last cut, so the pace creeps back up to the provider's limit and, past it, drains only
//!   what the provider refilled meanwhile before the next 429.
//! * **Slower near the last 429**: from [`NEAR`] × the rate that was refused last, the step is
//!   [`PROBE_SHARE`] of that (CUBIC's plateau, in its simplest form): the rate that drew the
//!   last 429 is where the limit most likely is, so the pace lingers just below it and probes
//!   past it slowly. Each saw-tooth of the additive increase is a 429; against Bedrock's
//!   header-less 60 a minute this makes them rarer (`B1_SHAPES=bedrock`, BENCHMARKS.md) for a
//!   little less of the limit used between them.
//!
//! Requests are paced by a bucket at that rate with [`BURST`] of it in reserve.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use super::bucket::Bucket;

/// The rate after the first 429, in requests per second.
pub(crate) const START: f64 = 1.0;
/// The rate after a 429, as a share of the rate achieved just before it.
pub(crate) const DECREASE: f64 = 0.8;
/// The rate's rise after each clean interval, as a share of the rate set at the last cut.
pub(crate) const INCREASE: f64 = 0.02;
/// From this share of the rate that drew the last 429, the pace rises more slowly.
pub(crate) const NEAR: f64 = 0.95;
/// The additive step's share near (and past) the rate that drew the last 429.
pub(crate) const PROBE_SHARE: f64 = 0.25;
/// A stretch without a 429 that raises the rate.
pub(crate) const INTERVAL: Duration = Duration::from_secs(5);
/// The stretch over which the achieved rate is measured.
pub(crate) const MEASURE: Duration = Duration::from_secs(10);
/// The burst the bucket allows, in seconds of the rate (at least one request).
pub(crate) const BURST: Duration = Duration::from_secs(1);

/// The learned pace of one key.
#[derive(Clone, Debug)]
pub(crate) struct Paced {
    pub(crate) bucket: Bucket,
    /// Requests per second.
    rate: f64,
    /// Doubling until the first cut.
    slow_start: bool,
    /// The rate set at the last cut (the additive step's base).
    cut_rate: f64,
    /// The rate being achieved when the last 429 came (before the cut); none before one.
    refused_at: f64,
    /// When the rate last changed.
    changed: Instant,
    /// The first booking number made under the current rate: a 429 to an older booking was
    /// sent before the last cut and says nothing new.
    since_booking: u64,
    /// Recent bookings, for the achieved rate.
    booked: VecDeque<Instant>,
    started: Instant,
}

impl Paced {
    /// A pace started by a first 429; bookings from `next_booking` on are under it.
    pub(crate) fn start(next_booking: u64, now: Instant) -> Self {
        Paced {
            bucket: bucket(START, now),
            rate: START,
            slow_start: true,
            cut_rate: START,
            refused_at: f64::INFINITY,
            changed: now,
            since_booking: next_booking,
            booked: VecDeque::new(),
            started: now,
        }
    }

    /// Requests per second now.
    pub(crate) fn rate(&self) -> f64 {
        self.rate
    }

    /// A request was booked at `now`: counted, and the rate raised if a clean interval passed.
    pub(crate) fn booked(&mut self, now: Instant) {
        self.booked.push_back(now);
        while self
            .booked
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) > MEASURE)
        {
            self.booked.pop_front();
        }
        if now.saturating_duration_since(self.changed) >= INTERVAL {
            let rate = if self.slow_start {
                self.rate * 2.0
            } else {
                self.rate + step(self.rate, self.cut_rate, self.refused_at)
            };
            self.set(rate, now);
        }
    }

    /// A 429 to booking `booking` (`None`: one admitted without a booking) arrived at `now`,
    /// when `next_booking` is the number the next booking will get.
    pub(crate) fn throttled(&mut self, booking: Option<u64>, next_booking: u64, now: Instant) {
        if booking.is_none_or(|b| b < self.since_booking) {
            return; // sent before the last cut: nothing new
        }
        let span = now
            .saturating_duration_since(self.started)
            .min(MEASURE)
            .max(Duration::from_millis(1));
        let achieved = self.booked.len() as f64 / span.as_secs_f64();
        let refused_at = achieved.min(self.rate);
        let rate = DECREASE * refused_at;
        self.refused_at = refused_at;
        self.slow_start = false;
        self.cut_rate = rate.max(MIN_RATE);
        self.since_booking = next_booking;
        self.set(rate, now);
    }

    fn set(&mut self, rate: f64, now: Instant) {
        self.rate = rate.max(MIN_RATE);
        self.changed = now;
        let level = self.bucket.level(now);
        let capacity = burst_of(self.rate);
        self.bucket
            .set_limit(capacity, window_of(capacity, self.rate), now);
        self.bucket.set_level(level.min(capacity as f64), now);
    }
}

/// The additive step at `rate`, from a cut to `cut_rate` of a rate refused at `refused_at`.
fn step(rate: f64, cut_rate: f64, refused_at: f64) -> f64 {
    let share = if rate >= NEAR * refused_at {
        PROBE_SHARE
    } else {
        1.0
    };
    share * INCREASE * cut_rate
}

/// The least rate: one request a minute.
const MIN_RATE: f64 = 1.0 / 60.0;

fn burst_of(rate: f64) -> u64 {
    (rate * BURST.as_secs_f64()).floor().max(1.0) as u64
}

fn window_of(capacity: u64, rate: f64) -> Duration {
    Duration::from_secs_f64(capacity as f64 / rate)
}

fn bucket(rate: f64, now: Instant) -> Bucket {
    let capacity = burst_of(rate);
    Bucket::new(capacity, window_of(capacity, rate), now)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    /// Books `n` requests spread evenly over `over` from `from`; returns the end.
    fn book(p: &mut Paced, n: u32, from: Instant, over: Duration) -> Instant {
        for i in 0..n {
            p.booked(from + over * i / n);
        }
        from + over
    }

    #[tokio::test(start_paused = true)]
    async fn slow_start_doubles_each_clean_interval_until_a_429() {
        let t0 = Instant::now();
        let mut p = Paced::start(0, t0);
        assert_eq!(p.rate(), START);
        p.booked(t0 + INTERVAL);
        assert_eq!(p.rate(), 2.0 * START);
        p.booked(t0 + 2 * INTERVAL);
        assert_eq!(p.rate(), 4.0 * START);
    }

    #[tokio::test(start_paused = true)]
    async fn a_429_cuts_to_a_share_of_what_was_achieved_then_the_rate_creeps_up() {
        let t0 = Instant::now();
        let mut p = Paced::start(0, t0);
        // Slow start to 8 a second, then 3 a second achieved over the last 10 s.
        for i in 1..=3 {
            p.booked(t0 + INTERVAL * i);
        }
        assert_eq!(p.rate(), 8.0);
        let t1 = t0 + 3 * INTERVAL;
        let t2 = book(&mut p, 30, t1, MEASURE);
        p.throttled(Some(5), 40, t2);
        let cut = p.rate();
        assert!(
            (cut - DECREASE * 30.0 / MEASURE.as_secs_f64()).abs() < 0.2,
            "{cut}"
        );
        // In-flight 429s of bookings before the cut change nothing.
        p.throttled(Some(39), 40, t2);
        p.throttled(None, 40, t2);
        assert_eq!(p.rate(), cut);
        // A clean interval: + 5 % of the cut rate.
        p.booked(t2 + INTERVAL);
        assert!((p.rate() - cut * (1.0 + INCREASE)).abs() < 1e-9);
        // A 429 to a booking after the cut counts.
        p.throttled(Some(40), 41, t2 + INTERVAL);
        assert!(p.rate() < cut);
    }

    /// The additive step, as a table: (rate, cut rate, rate refused at, step).
    #[test]
    fn the_step_slows_near_the_rate_that_drew_the_last_429() {
        let full = INCREASE * 8.0;
        let table = [
            // Before any cut (slow start never reaches here): nothing refused yet, full step.
            (8.0, 8.0, f64::INFINITY, full),
            // Just after a cut to 0.8 of 10: full step.
            (8.0, 8.0, 10.0, full),
            (9.4, 8.0, 10.0, full),
            // From 95 % of the refused rate, and past it: a quarter.
            (9.5, 8.0, 10.0, PROBE_SHARE * full),
            (10.0, 8.0, 10.0, PROBE_SHARE * full),
            (12.0, 8.0, 10.0, PROBE_SHARE * full),
        ];
        for (rate, cut, refused, want) in table {
            let got = step(rate, cut, refused);
            assert!(
                (got - want).abs() < 1e-12,
                "{rate} {cut} {refused}: {got} ≠ {want}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn near_the_refused_rate_the_pace_rises_a_quarter_as_fast() {
        let t0 = Instant::now();
        let mut p = Paced::start(0, t0);
        // 10 a second achieved over the last 10 s, then a 429: cut to 8.
        p.booked(t0 + INTERVAL);
        p.booked(t0 + 2 * INTERVAL);
        p.booked(t0 + 3 * INTERVAL);
        p.booked(t0 + 4 * INTERVAL);
        let t1 = t0 + 4 * INTERVAL;
        let t2 = book(&mut p, 100, t1, MEASURE);
        p.throttled(Some(10), 200, t2);
        let cut = p.rate();
        assert!((cut - DECREASE * 10.0).abs() < 0.1, "{cut}");
        // Clean intervals: full steps up to 95 % of 10, then quarter steps.
        let mut t = t2;
        let mut steps = Vec::new();
        while p.rate() < 10.0 {
            let before = p.rate();
            t += INTERVAL;
            p.booked(t);
            steps.push(p.rate() - before);
        }
        let full = INCREASE * cut;
        assert!((steps[0] - full).abs() < 1e-9, "{steps:?}");
        assert!(
            (steps.last().unwrap() - PROBE_SHARE * full).abs() < 1e-9,
            "{steps:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_bucket_paces_at_the_rate_with_a_small_burst() {
        let t0 = Instant::now();
        let mut p = Paced::start(0, t0);
        for i in 1..=2 {
            p.booked(t0 + INTERVAL * i);
        }
        assert_eq!(p.rate(), 4.0);
        // A moment later the bucket has refilled to its new burst.
        let t = t0 + 2 * INTERVAL + S;
        let mut b = p.bucket.clone();
        assert_eq!(b.capacity(), 4, "a second of the rate");
        for _ in 0..4 {
            assert_eq!(b.reserve(1, t), Ok(Duration::ZERO));
        }
        assert_eq!(b.reserve(1, t), Ok(S / 4));
    }
}
