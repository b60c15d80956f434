//! A budget that stopped a batch: shared by the run's report and its summary.

use std::time::{Duration, SystemTime};

use serde::Serialize;

/// A budget that stopped a batch ([`ErrorKind::BudgetExhausted`](crate::ErrorKind)): the
/// items it held back were not sent and are not failed — a run after `until_unix_ms` sends
/// them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct BudgetSpent {
    /// What the budget's refusal said (whose budget, which window, what it holds).
    pub message: String,
    /// When the run first met it (Unix ms, the client clock's wall time).
    pub at_unix_ms: u64,
    /// When its window starts again (Unix ms).
    pub until_unix_ms: u64,
    /// Items held back by it in this run.
    pub items: u64,
}

impl BudgetSpent {
    /// A budget's refusal saying `message`, met at wall time `wall`, its window starting
    /// again `retry_after` later; no item counted yet.
    pub fn new(message: impl Into<String>, wall: SystemTime, retry_after: Duration) -> Self {
        let ms = |t: SystemTime| crate::clock::wall_ms(t).unsigned_abs();
        BudgetSpent {
            message: message.into(),
            at_unix_ms: ms(wall),
            until_unix_ms: ms(wall + retry_after),
            items: 0,
        }
    }
}
