//! A retry budget: retries may add at most a fraction of recent first attempts.

// Internal: reachable from outside only with the `test-util` feature (tests, benches and
// fuzzers); without it every `pub` here is crate-private.
#![cfg_attr(not(feature = "test-util"), allow(unreachable_pub, dead_code))]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::striped::Striped;

/// Tracks first attempts and retries over a sliding window (ten one-second slots).
///
/// A retry is allowed while `retries < floor + ratio · first_attempts` over the window.
///
/// # Examples
///
/// ```
/// use llm_failover::retry::RetryBudget;
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let now = tokio::time::Instant::now();
/// let mut budget = RetryBudget::new(0.2, 0);
/// for _ in 0..10 { budget.deposit(now); }
/// assert!(budget.withdraw(now));
/// assert!(budget.withdraw(now));
/// assert!(!budget.withdraw(now)); // 20 % of 10 spent
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct RetryBudget {
    ratio: f64,
    floor: u64,
    slot: Duration,
    slots: usize,
    /// (slot start, first attempts, retries), oldest first.
    ring: VecDeque<(Instant, u64, u64)>,
}

impl RetryBudget {
    /// A budget allowing `ratio` retries per first attempt plus `floor` retries per window.
    /// A negative or non-finite ratio counts as 0.
    pub fn new(ratio: f64, floor: u64) -> Self {
        RetryBudget {
            ratio: if ratio.is_finite() {
                ratio.max(0.0)
            } else {
                0.0
            },
            floor,
            slot: Duration::from_secs(1),
            slots: 10,
            ring: VecDeque::new(),
        }
    }

    fn current(&mut self, now: Instant) -> &mut (Instant, u64, u64) {
        let horizon = self.slot * self.slots as u32;
        while let Some(&(start, _, _)) = self.ring.front() {
            if now.saturating_duration_since(start) >= horizon {
                self.ring.pop_front();
            } else {
                break;
            }
        }
        let fresh = match self.ring.back() {
            Some(&(start, _, _)) => now.saturating_duration_since(start) >= self.slot,
            None => true,
        };
        if fresh {
            self.ring.push_back((now, 0, 0));
        }
        // Just pushed or present: the ring is not empty.
        let last = self.ring.len() - 1;
        &mut self.ring[last]
    }

    /// Records a first attempt.
    pub fn deposit(&mut self, now: Instant) {
        self.deposit_many(now, 1);
    }

    /// Records `n` first attempts.
    pub fn deposit_many(&mut self, now: Instant, n: u64) {
        if n > 0 {
            self.current(now).1 += n;
        }
    }

    /// Asks for one retry; records it and returns true when the budget allows it.
    pub fn withdraw(&mut self, now: Instant) -> bool {
        self.current(now);
        let (firsts, retries) = self
            .ring
            .iter()
            .fold((0u64, 0u64), |(f, r), s| (f + s.1, r + s.2));
        let allowed = self.floor as f64 + self.ratio * firsts as f64;
        if (retries as f64) < allowed.floor() {
            self.current(now).2 += 1;
            true
        } else {
            false
        }
    }
}

/// The router's budget, shared by every request. A first attempt is counted in the calling
/// thread's stripe and handed over to the budget with the others of its one-second slot: by
/// the first attempt of the next slot, or before a retry asks for budget. A request that is
/// answered at once takes no lock (and two threads' requests pass no lock's cache line back
/// and forth). Handed-over attempts are booked at the time of the previous hand-over, in the
/// slot they were made in (give or take the attempts racing a hand-over).
#[derive(Debug)]
pub(crate) struct SharedBudget {
    /// The budget, and when attempts were last handed over.
    inner: Mutex<(RetryBudget, Option<Instant>)>,
    /// First attempts not handed over yet.
    pending: Striped<AtomicU64>,
    /// Slot (whole seconds since `epoch`) of the last hand-over; `u64::MAX` before the first.
    synced: AtomicU64,
    epoch: Instant,
}

impl SharedBudget {
    pub(crate) fn new(budget: RetryBudget, epoch: Instant) -> Self {
        SharedBudget {
            inner: Mutex::new((budget, None)),
            pending: Striped::default(),
            synced: AtomicU64::new(u64::MAX),
            epoch,
        }
    }

    /// Records a first attempt.
    pub(crate) fn deposit(&self, now: Instant) {
        self.pending.here().fetch_add(1, Relaxed);
        let slot = now.saturating_duration_since(self.epoch).as_secs();
        if self.synced.load(Relaxed) != slot {
            let mut inner = self.lock();
            Self::hand_over(&mut inner, &self.pending, now);
            inner.1 = Some(now);
            self.synced.store(slot, Relaxed);
        }
    }

    /// Asks for one retry (see [`RetryBudget::withdraw`]), every first attempt counted.
    pub(crate) fn withdraw(&self, now: Instant) -> bool {
        let mut inner = self.lock();
        Self::hand_over(&mut inner, &self.pending, now);
        inner.0.withdraw(now)
    }

    fn hand_over(
        inner: &mut (RetryBudget, Option<Instant>),
        pending: &Striped<AtomicU64>,
        now: Instant,
    ) {
        let n = pending.iter().map(|a| a.swap(0, Relaxed)).sum();
        inner.0.deposit_many(inner.1.unwrap_or(now), n);
    }

    fn lock(&self) -> MutexGuard<'_, (RetryBudget, Option<Instant>)> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allows_the_ratio_plus_the_floor() {
        let t0 = Instant::now();
        let mut b = RetryBudget::new(0.5, 1);
        for _ in 0..4 {
            b.deposit(t0);
        }
        assert!(b.withdraw(t0));
        assert!(b.withdraw(t0));
        assert!(b.withdraw(t0));
        assert!(!b.withdraw(t0));
    }

    #[test]
    fn old_attempts_leave_the_window() {
        let t0 = Instant::now();
        let mut b = RetryBudget::new(1.0, 0);
        b.deposit(t0);
        let later = t0 + Duration::from_secs(11);
        assert!(!b.withdraw(later), "the deposit is older than the window");
        b.deposit(later);
        assert!(b.withdraw(later));
    }

    #[test]
    fn zero_ratio_and_floor_allow_nothing() {
        let t0 = Instant::now();
        let mut b = RetryBudget::new(0.0, 0);
        b.deposit(t0);
        assert!(!b.withdraw(t0));
    }

    #[test]
    fn the_shared_budget_counts_every_threads_first_attempts_before_a_retry() {
        let t0 = Instant::now();
        let shared = std::sync::Arc::new(SharedBudget::new(RetryBudget::new(0.5, 0), t0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let s = shared.clone();
                std::thread::spawn(move || {
                    for i in 0..5 {
                        s.deposit(t0 + Duration::from_millis(i * 10));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("a thread");
        }
        // 20 first attempts in one slot, most of them still in their threads' stripes: a
        // retry counts them all, so 10 retries are allowed and the 11th is not.
        let now = t0 + Duration::from_millis(100);
        for _ in 0..10 {
            assert!(shared.withdraw(now));
        }
        assert!(!shared.withdraw(now));
    }

    #[test]
    fn the_shared_budget_books_attempts_in_their_slot_so_they_still_leave_the_window() {
        let t0 = Instant::now();
        let shared = SharedBudget::new(RetryBudget::new(1.0, 0), t0);
        // The first hands itself over; the next nine wait in a stripe.
        for i in 0..10 {
            shared.deposit(t0 + Duration::from_millis(i * 50));
        }
        // Twelve seconds later they are older than the window, though handed over only now.
        let later = t0 + Duration::from_secs(12);
        assert!(!shared.withdraw(later));
        // A first attempt of a new slot hands over at once and is counted.
        shared.deposit(later);
        assert!(shared.withdraw(later));
        assert!(!shared.withdraw(later));
    }
}
