//! [`Stop`]: the signal that ends a batch or a worker early (Ctrl-C, a shutdown, a test);
//! public as `batch::Stop`.

use std::sync::Arc;

use tokio::sync::watch;

/// How far a stop has gone.
const RUNNING: u8 = 0;
const DRAINING: u8 = 1;
const ABORTED: u8 = 2;

/// Ends a batch early, in two steps.
///
/// [`stop`](Self::stop) stops admitting new items and lets the ones in flight finish;
/// [`abort`](Self::abort) also drops the ones in flight, which are then recorded as not done
/// (no output line, so a rerun sends them again). Both only ever move forward: a stopped
/// signal never restarts. Cheap to clone; every clone is the same signal.
///
/// # Examples
///
/// ```
/// use llm_failover::batch::Stop;
///
/// let stop = Stop::new();
/// let handle = stop.clone(); // e.g. moved into a Ctrl-C handler
/// assert!(!stop.is_stopped());
/// handle.stop();
/// assert!(stop.is_stopped() && !stop.is_aborted());
/// handle.abort();
/// assert!(stop.is_aborted());
/// ```
#[derive(Clone, Debug)]
pub struct Stop {
    level: Arc<watch::Sender<u8>>,
}

impl Default for Stop {
    fn default() -> Self {
        Self::new()
    }
}

impl Stop {
    /// A signal that has not fired.
    pub fn new() -> Self {
        Stop {
            level: Arc::new(watch::Sender::new(RUNNING)),
        }
    }

    fn raise(&self, to: u8) {
        self.level.send_if_modified(|l| {
            if *l < to {
                *l = to;
                true
            } else {
                false
            }
        });
    }

    /// Stops admitting new items; items in flight finish.
    pub fn stop(&self) {
        self.raise(DRAINING);
    }

    /// Stops admitting new items and drops the ones in flight (recorded as not done).
    pub fn abort(&self) {
        self.raise(ABORTED);
    }

    /// [`stop`](Self::stop) or [`abort`](Self::abort) was called.
    pub fn is_stopped(&self) -> bool {
        *self.level.borrow() >= DRAINING
    }

    /// [`abort`](Self::abort) was called.
    pub fn is_aborted(&self) -> bool {
        *self.level.borrow() >= ABORTED
    }

    /// Resolves once [`stop`](Self::stop) (or [`abort`](Self::abort)) has been called.
    pub async fn stopped(&self) {
        self.reached(DRAINING).await;
    }

    /// Resolves once [`abort`](Self::abort) has been called.
    pub async fn aborted(&self) {
        self.reached(ABORTED).await;
    }

    async fn reached(&self, level: u8) {
        let mut rx = self.level.subscribe();
        // The sender lives in `self`, so the channel cannot close while we wait.
        let _ = rx.wait_for(|l| *l >= level).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stopped_resolves_for_a_stop_and_aborted_only_for_an_abort() {
        let stop = Stop::new();
        let s = stop.clone();
        let waiter = tokio::spawn(async move { s.stopped().await });
        stop.stop();
        waiter.await.unwrap();
        assert!(!stop.is_aborted());

        let s = stop.clone();
        let waiter = tokio::spawn(async move { s.aborted().await });
        stop.abort();
        waiter.await.unwrap();
        assert!(stop.is_aborted() && stop.is_stopped());
    }

    #[test]
    fn a_stop_after_an_abort_does_not_undo_it() {
        let stop = Stop::new();
        stop.abort();
        stop.stop();
        assert!(stop.is_aborted());
    }
}
