//! [`OutcomeSink`]: where a batch's outcomes go as they complete.

use std::io;

use async_trait::async_trait;
use tokio::sync::mpsc;

use super::outcome::ItemOutcome;

/// Receives each outcome as soon as its item ends (in completion order, not input order).
///
/// An error from [`record`](Self::record) stops the batch: items in flight are dropped
/// (recorded as not done) and the runner returns the error, since outcomes it cannot keep
/// would be lost. Implemented for [`ResultsWriter`](super::ResultsWriter) (a JSON-lines
/// file), `Vec<ItemOutcome>` and `tokio::sync::mpsc::Sender<ItemOutcome>`.
///
/// # Examples
///
/// A sink that only counts:
///
/// ```
/// use llm_failover::batch::{ItemOutcome, OutcomeSink};
///
/// #[derive(Default)]
/// struct Count { ok: u64, failed: u64 }
///
/// #[async_trait::async_trait]
/// impl OutcomeSink for Count {
///     async fn record(&mut self, outcome: &ItemOutcome) -> std::io::Result<()> {
///         if outcome.is_ok() { self.ok += 1 } else { self.failed += 1 }
///         Ok(())
///     }
/// }
/// ```
#[async_trait]
pub trait OutcomeSink: Send {
    /// Keeps one outcome. When this returns `Ok`, the outcome counts as done.
    ///
    /// # Errors
    ///
    /// When the outcome cannot be kept (disk full, receiver gone).
    async fn record(&mut self, outcome: &ItemOutcome) -> io::Result<()>;
}

fn _obj_safe(_: &dyn OutcomeSink) {}

#[async_trait]
impl OutcomeSink for Vec<ItemOutcome> {
    async fn record(&mut self, outcome: &ItemOutcome) -> io::Result<()> {
        self.push(outcome.clone());
        Ok(())
    }
}

#[async_trait]
impl OutcomeSink for mpsc::Sender<ItemOutcome> {
    async fn record(&mut self, outcome: &ItemOutcome) -> io::Result<()> {
        self.send(outcome.clone())
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the outcome receiver is gone"))
    }
}

#[async_trait]
impl<S: OutcomeSink + ?Sized> OutcomeSink for &mut S {
    async fn record(&mut self, outcome: &ItemOutcome) -> io::Result<()> {
        (**self).record(outcome).await
    }
}
