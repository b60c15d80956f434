//! A continuously refilled bucket that books future slots: pure arithmetic over `now`.
//!
//! The bucket holds `level` units (it may go negative: booked debt). A reservation of `n`
//! units subtracts `n` at once and returns how long its holder must wait until the level it
//! saw has refilled to zero — so reservations are served strictly in the order they were
//! booked (FIFO): a large request booked before small ones is not starved, and small ones
//! booked after it wait behind it. A cost larger than the capacity can never be admitted
//! ([`InsufficientCapacity`]): "never" is not "not now".

// Internal: reachable from outside only with the `test-util` feature (tests, benches and
// fuzzers); without it every `pub` here is crate-private.
#![cfg_attr(not(feature = "test-util"), allow(unreachable_pub, dead_code))]

use std::time::Duration;

use tokio::time::Instant;

/// The bucket can never hold this many units: the request must go elsewhere or be split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InsufficientCapacity {
    /// What was asked.
    pub cost: u64,
    /// The bucket's capacity.
    pub capacity: u64,
}

/// A continuously refilled bucket: capacity = limit per window, refill = limit / window.
///
/// An optional *latency allowance* keeps `refill × allowance` of the capacity in reserve
/// (never below one unit): see [`Policy::latency_allowance`](crate::config::Policy).
#[derive(Clone, Debug, PartialEq)]
pub struct Bucket {
    capacity: f64,
    /// The highest level: the capacity less the allowance's share.
    cap: f64,
    per_sec: f64,
    allowance_secs: f64,
    level: f64,
    updated: Instant,
}

impl Bucket {
    /// A full bucket of `limit` units per `window`.
    ///
    /// `limit` 0 is treated as 1 and a zero window as 1 ms: config validation rejects both,
    /// this only keeps the arithmetic finite.
    pub fn new(limit: u64, window: Duration, now: Instant) -> Self {
        let capacity = limit.max(1) as f64;
        let secs = window.as_secs_f64().max(0.001);
        Bucket {
            capacity,
            cap: capacity,
            per_sec: capacity / secs,
            allowance_secs: 0.0,
            level: capacity,
            updated: now,
        }
    }

    /// Keeps `allowance` worth of refill in reserve (the level never rises above
    /// `capacity − refill × allowance`, nor is that lowered below one unit).
    #[must_use]
    pub fn with_allowance(mut self, allowance: Duration) -> Self {
        self.allowance_secs = allowance.as_secs_f64();
        self.cap = self.cap_for(self.capacity, self.per_sec);
        self.level = self.level.min(self.cap);
        self
    }

    fn cap_for(&self, capacity: f64, per_sec: f64) -> f64 {
        (capacity - per_sec * self.allowance_secs).max(capacity.min(1.0))
    }

    /// The capacity (limit per window).
    pub fn capacity(&self) -> u64 {
        self.capacity as u64
    }

    /// Units refilled per second.
    pub fn per_sec(&self) -> f64 {
        self.per_sec
    }

    /// The window: how long an empty bucket takes to fill.
    pub fn window(&self) -> Duration {
        Duration::from_secs_f64(self.capacity / self.per_sec)
    }

    fn refill(&mut self, now: Instant) {
        if now > self.updated {
            let dt = (now - self.updated).as_secs_f64();
            self.level = (self.level + dt * self.per_sec).min(self.cap);
            self.updated = now;
        }
    }

    /// The level at `now` (negative when slots are booked ahead).
    pub fn level(&mut self, now: Instant) -> f64 {
        self.refill(now);
        self.level
    }

    /// When the level is back at its highest at the refill rate (`None`: it is there now).
    pub fn full_at(&mut self, now: Instant) -> Option<Instant> {
        self.refill(now);
        if self.level >= self.cap {
            return None;
        }
        // Clamped (a level booked far ahead): an instant decades out is as good as any.
        let secs = ((self.cap - self.level) / self.per_sec).min(1e9);
        Some(now + Duration::from_secs_f64(secs))
    }

    /// How long a reservation of `cost` made now would wait, without booking it.
    ///
    /// # Errors
    ///
    /// [`InsufficientCapacity`] when `cost` exceeds the capacity.
    pub fn peek(&mut self, cost: u64, now: Instant) -> Result<Duration, InsufficientCapacity> {
        self.check(cost)?;
        self.refill(now);
        Ok(self.wait_for(self.level - cost as f64))
    }

    /// Books `cost` units and returns how long to wait before using them.
    ///
    /// # Errors
    ///
    /// [`InsufficientCapacity`] when `cost` exceeds the capacity (nothing is booked).
    pub fn reserve(&mut self, cost: u64, now: Instant) -> Result<Duration, InsufficientCapacity> {
        let wait = self.peek(cost, now)?;
        self.level -= cost as f64;
        Ok(wait)
    }

    /// Gives `n` units back (a cancelled reservation, unused tokens), never above capacity.
    pub fn refund(&mut self, n: u64, now: Instant) {
        self.refill(now);
        self.level = (self.level + n as f64).min(self.cap);
    }

    /// Takes `n` more units (usage above what was reserved).
    pub fn charge(&mut self, n: u64, now: Instant) {
        self.refill(now);
        self.level -= n as f64;
    }

    /// Lowers the level to at most `remaining` (a provider's report). Never raises it.
    pub fn tighten(&mut self, remaining: u64, now: Instant) {
        self.refill(now);
        self.level = self.level.min(remaining as f64);
    }

    /// Sets the level (what the provider says is left, less what was booked since): raises it
    /// as well as lowering it, never above the highest level.
    pub fn set_level(&mut self, level: f64, now: Instant) {
        self.refill(now);
        self.level = level.min(self.cap);
    }

    /// Empties the bucket (a 429): nothing passes until it refills.
    pub fn drain(&mut self, now: Instant) {
        self.refill(now);
        self.level = self.level.min(0.0);
    }

    /// Adopts a learned limit per window, keeping the current level (clamped to the new
    /// capacity).
    pub fn set_limit(&mut self, limit: u64, window: Duration, now: Instant) {
        self.refill(now);
        let fresh = Bucket::new(limit, window, now);
        self.capacity = fresh.capacity;
        self.per_sec = fresh.per_sec;
        self.cap = self.cap_for(self.capacity, self.per_sec);
        self.level = self.level.min(self.cap);
    }

    fn check(&self, cost: u64) -> Result<(), InsufficientCapacity> {
        if cost as f64 > self.capacity {
            Err(InsufficientCapacity {
                cost,
                capacity: self.capacity(),
            })
        } else {
            Ok(())
        }
    }

    fn wait_for(&self, level_after: f64) -> Duration {
        if level_after >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-level_after / self.per_sec)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    #[test]
    fn admits_a_full_burst_then_paces_at_the_refill_rate() {
        let t0 = Instant::now();
        let mut b = Bucket::new(60, MIN, t0);
        for _ in 0..60 {
            assert_eq!(b.reserve(1, t0), Ok(Duration::ZERO));
        }
        // The 61st waits one refill interval (1 s), the 62nd two.
        assert_eq!(b.reserve(1, t0), Ok(Duration::from_secs(1)));
        assert_eq!(b.reserve(1, t0), Ok(Duration::from_secs(2)));
    }

    #[test]
    fn reservations_are_served_in_booking_order() {
        let t0 = Instant::now();
        let mut b = Bucket::new(100, MIN, t0);
        b.reserve(100, t0).unwrap();
        let big = b.reserve(90, t0).unwrap();
        let small = b.reserve(1, t0).unwrap();
        assert!(
            small > big,
            "a small request booked later waits behind the large one"
        );
    }

    #[test]
    fn a_cost_above_capacity_is_never_admitted() {
        let t0 = Instant::now();
        let mut b = Bucket::new(1000, MIN, t0);
        assert_eq!(
            b.reserve(1001, t0),
            Err(InsufficientCapacity {
                cost: 1001,
                capacity: 1000
            })
        );
        assert_eq!(b.level(t0), 1000.0, "nothing booked");
    }

    #[test]
    fn refill_is_continuous_and_capped() {
        let t0 = Instant::now();
        let mut b = Bucket::new(60, MIN, t0);
        b.reserve(60, t0).unwrap();
        assert_eq!(b.level(t0 + Duration::from_millis(500)), 0.5);
        assert_eq!(b.level(t0 + Duration::from_secs(3600)), 60.0);
    }

    #[test]
    fn refund_never_exceeds_capacity() {
        let t0 = Instant::now();
        let mut b = Bucket::new(10, MIN, t0);
        b.reserve(4, t0).unwrap();
        b.refund(100, t0);
        assert_eq!(b.level(t0), 10.0);
    }

    #[test]
    fn tighten_only_lowers_and_drain_empties() {
        let t0 = Instant::now();
        let mut b = Bucket::new(100, MIN, t0);
        b.tighten(30, t0);
        assert_eq!(b.level(t0), 30.0);
        b.tighten(80, t0);
        assert_eq!(b.level(t0), 30.0);
        b.drain(t0);
        assert_eq!(b.level(t0), 0.0);
        assert_eq!(b.peek(1, t0), Ok(Duration::from_millis(600)));
    }

    #[test]
    fn drain_keeps_existing_debt() {
        let t0 = Instant::now();
        let mut b = Bucket::new(10, MIN, t0);
        b.reserve(10, t0).unwrap();
        b.reserve(5, t0).unwrap();
        b.drain(t0);
        assert_eq!(b.level(t0), -5.0);
    }

    #[test]
    fn an_allowance_holds_back_a_slice_of_the_burst_not_the_rate() {
        let t0 = Instant::now();
        let mut b = Bucket::new(6000, MIN, t0).with_allowance(Duration::from_secs(1));
        // 100 units per second: one second of refill (100) is held back from the burst.
        assert_eq!(b.level(t0), 5900.0);
        assert_eq!(b.reserve(5900, t0), Ok(Duration::ZERO));
        // The rate is untouched: 100 more units take one second.
        assert_eq!(b.reserve(100, t0), Ok(Duration::from_secs(1)));
        // A cost up to the stated limit is still admissible (after a wait), never too large.
        assert!(b.peek(6000, t0).is_ok());
        // A tiny limit keeps at least one unit.
        let mut one = Bucket::new(1, MIN, t0).with_allowance(Duration::from_secs(30));
        assert_eq!(one.level(t0), 1.0);
    }

    #[test]
    fn a_set_level_raises_and_lowers_but_never_past_the_top() {
        let t0 = Instant::now();
        let mut b = Bucket::new(100, MIN, t0);
        b.drain(t0);
        b.set_level(70.0, t0);
        assert_eq!(b.level(t0), 70.0);
        b.set_level(-5.0, t0);
        assert_eq!(b.level(t0), -5.0, "booked debt is kept");
        b.set_level(500.0, t0);
        assert_eq!(b.level(t0), 100.0);
        assert_eq!(b.window(), MIN);
    }

    #[test]
    fn a_learned_limit_changes_capacity_and_rate() {
        let t0 = Instant::now();
        let mut b = Bucket::new(10, MIN, t0);
        b.set_limit(120, MIN, t0);
        assert_eq!(b.capacity(), 120);
        assert_eq!(b.per_sec(), 2.0);
        assert_eq!(b.level(t0), 10.0, "the level is not raised by learning");
    }
}
