//! What a worker's run did.

/// Why a [`Worker::run`](super::Worker::run) ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ended {
    /// [`Stop::stop`](llm_failover_core::batch::Stop::stop) or [`abort`](llm_failover_core::batch::Stop::abort).
    Stopped,
    /// No job was `ready` or `running` in the queue.
    Drained,
    /// Jobs were left but none was settled for the patience (the provider is still down, or
    /// every job waits for a reset further away): they stay queued for a later run.
    OutOfPatience,
    /// A budget was spent ([`ErrorKind::BudgetExhausted`](llm_failover_core::ErrorKind)):
    /// its jobs wait, snoozed, for its reset, and nothing else could run before it
    /// ([`WorkerReport::budget_spent`]).
    BudgetSpent,
}

/// Counts of one worker's run: what it settled, and how.
///
/// Two denominators: **transport success** is how many of the jobs run got an answer at all
/// ([`transport_success`](Self::transport_success)); **structured correctness** is how many
/// of those answers passed the kind's contract ([`correctness`](Self::correctness)).
///
/// # Examples
///
/// ```
/// let mut report = llm_failover_queue::WorkerReport::default();
/// report.completed = 8;
/// report.reviewed = 2;
/// report.failed = 10;
/// assert_eq!(report.transport_success(), Some(0.5));
/// assert_eq!(report.correctness(), Some(0.8));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerReport {
    /// Why the run ended.
    pub ended: Ended,
    /// Jobs claimed.
    pub claimed: u64,
    /// Results accepted (`done`).
    pub completed: u64,
    /// Results that failed their contract (`review`).
    pub reviewed: u64,
    /// Jobs put back until a stated reset (429, quota, every provider closed), no failure.
    pub snoozed: u64,
    /// Failures that will be tried again after a backoff.
    pub failed: u64,
    /// Jobs dead-lettered (a terminal error, or the policy's last failure).
    pub dead: u64,
    /// Settlements refused because the claim was stale (reaped and claimed again while this
    /// worker ran it): the work was done, its result discarded.
    pub lost: u64,
    /// Leases given back unfinished on [`abort`](llm_failover_core::batch::Stop::abort).
    pub released: u64,
    /// Expired leases (of any worker) this worker gave back to the queue.
    pub reaped: u64,
    /// Jobs `ready` or `running` in the queue when the run ended.
    pub left: u64,
    /// Queue operations that failed and were tried again (the database was locked, or away).
    pub queue_errors: u64,
    /// Times the leases of the jobs in flight were renewed (one write each, for all of them).
    pub heartbeats: u64,
    /// The first budget that held a job back, and how many it held (each snoozed to its
    /// reset, not failed).
    pub budget_spent: Option<llm_failover_core::batch::BudgetSpent>,
}

impl Default for WorkerReport {
    fn default() -> Self {
        WorkerReport {
            ended: Ended::Stopped,
            claimed: 0,
            completed: 0,
            reviewed: 0,
            snoozed: 0,
            failed: 0,
            dead: 0,
            lost: 0,
            released: 0,
            reaped: 0,
            left: 0,
            queue_errors: 0,
            heartbeats: 0,
            budget_spent: None,
        }
    }
}

impl WorkerReport {
    /// Answers received over jobs run to a settlement other than a snooze: `(completed +
    /// reviewed) / (completed + reviewed + failed + dead)`; `None` before any.
    pub fn transport_success(&self) -> Option<f64> {
        let answered = self.completed + self.reviewed;
        ratio(answered, answered + self.failed + self.dead)
    }

    /// Answers that passed their contract over answers received: `completed / (completed +
    /// reviewed)`; `None` before any answer.
    pub fn correctness(&self) -> Option<f64> {
        ratio(self.completed, self.completed + self.reviewed)
    }
}

fn ratio(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}
