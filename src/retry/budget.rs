//! A retry budget: retries may add at most a fraction of recent first attempts.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

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
        self.current(now).1 += 1;
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
}
