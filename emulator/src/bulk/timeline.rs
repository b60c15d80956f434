//! The timeline of one emulated batch, pure over `now`: when it leaves validation, when each
//! of its items is done, when it ends — so a test on a manual clock steps through a batch by
//! advancing the clock, and nothing runs in the background.
//!
//! The items of a batch are done one after the other in its processing order, evenly over
//! the processing time: item `k` (of `n`) is done at `start + processing × (k + 1) / n`.
//! Exactly one item is in flight at any instant of the processing time, which gives
//! cancellation its rule: what was in flight when the cancel arrived is finished and kept
//! (OpenAI: "The batch will be in status `cancelling` for up to 10 minutes, before changing
//! to `cancelled`, where it will have partial results (if any) available in the output
//! file", platform.openai.com/docs/api-reference/batch/cancel; Anthropic: "canceled batches
//! also end up `ended` and may contain results", docs.anthropic.com/en/api/canceling-message-batches).
//! A batch that has not finished when its window closes expires with what was done by then
//! (platform.openai.com/docs/guides/batch, "Batch expiration").

use std::time::Duration;

use tokio::time::Instant;

/// Where a batch is. The names are OpenAI's statuses; each wire format maps them to its own
/// (Anthropic `in_progress | canceling | ended`, Gemini `BATCH_STATE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Validating,
    InProgress,
    Finalizing,
    Completed,
    Failed,
    Expired,
    Cancelling,
    Cancelled,
}

impl Phase {
    /// Whether the batch is over (its tokens and queue places are released).
    pub(crate) fn is_ended(self) -> bool {
        matches!(
            self,
            Phase::Completed | Phase::Failed | Phase::Expired | Phase::Cancelled
        )
    }

    /// OpenAI's name of the phase (the emulator's log uses it for every provider).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Phase::Validating => "validating",
            Phase::InProgress => "in_progress",
            Phase::Finalizing => "finalizing",
            Phase::Completed => "completed",
            Phase::Failed => "failed",
            Phase::Expired => "expired",
            Phase::Cancelling => "cancelling",
            Phase::Cancelled => "cancelled",
        }
    }
}

/// The fixed facts of one batch's schedule.
#[derive(Clone, Debug)]
pub(crate) struct Timeline {
    pub(crate) created: Instant,
    pub(crate) validating: Duration,
    pub(crate) processing: Duration,
    pub(crate) finalizing: Duration,
    /// From creation to expiry (OpenAI's and Anthropic's 24 h, Gemini's 48 h).
    pub(crate) window: Duration,
    pub(crate) items: usize,
    /// The batch fails at the end of validation (OpenAI's `failed`: a bad input file, or the
    /// enqueued-token limit).
    pub(crate) fails: bool,
    pub(crate) cancel_at: Option<Instant>,
    /// A cancel finishes the item in flight (OpenAI, Anthropic) instead of ending at once.
    pub(crate) finish_in_flight: bool,
}

/// Where a batch is at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Progress {
    pub(crate) phase: Phase,
    /// Items done: the first `done` of the processing order.
    pub(crate) done: usize,
    /// When the phase that ended the batch began (`completed_at`, `expired_at`, …).
    pub(crate) ended_at: Option<Instant>,
}

impl Timeline {
    /// End of validation, start of processing.
    pub(crate) fn start(&self) -> Instant {
        self.created + self.validating
    }

    /// When processing ends and finalizing begins.
    pub(crate) fn processing_end(&self) -> Instant {
        self.start() + self.processing
    }

    /// When the batch completes, if nothing stops it first.
    pub(crate) fn completed_at(&self) -> Instant {
        self.processing_end() + self.finalizing
    }

    pub(crate) fn expires_at(&self) -> Instant {
        self.created + self.window
    }

    /// When item `k` of the processing order is done.
    pub(crate) fn item_done(&self, k: usize) -> Instant {
        let n = self.items.max(1) as u128;
        let nanos = self.processing.as_nanos() * (k as u128 + 1) / n;
        self.start() + Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// Items done by `t`: how many `k` have `item_done(k) <= t`.
    pub(crate) fn done_by(&self, t: Instant) -> usize {
        let n = self.items;
        if t < self.start() {
            return 0;
        }
        let p = self.processing.as_nanos();
        if p == 0 {
            return n;
        }
        let e = t.duration_since(self.start()).as_nanos();
        // floor(p·(k+1)/n) <= e  ⟺  k + 1 <= ceil(n·(e+1)/p) − 1
        let k = (n as u128 * (e + 1)).div_ceil(p) - 1;
        usize::try_from(k).unwrap_or(usize::MAX).min(n)
    }

    /// When a cancel at `c` ends, and how many items it keeps: nothing in flight before
    /// processing starts; else the item in flight is finished.
    fn cancel_end(&self, c: Instant) -> (Instant, usize) {
        if c < self.start() {
            return (c, 0);
        }
        let done = self.done_by(c);
        if !self.finish_in_flight {
            return (c, done);
        }
        if done >= self.items {
            (c, self.items)
        } else {
            (self.item_done(done).max(c), done + 1)
        }
    }

    /// Where the batch is at `now`.
    pub(crate) fn at(&self, now: Instant) -> Progress {
        let ended = |phase, done, at| Progress {
            phase,
            done,
            ended_at: Some(at),
        };
        let running = |phase, done| Progress {
            phase,
            done,
            ended_at: None,
        };
        if self.fails {
            return if now < self.start() {
                running(Phase::Validating, 0)
            } else {
                ended(Phase::Failed, 0, self.start())
            };
        }
        if let Some(c) = self.cancel_at {
            let (end, kept) = self.cancel_end(c);
            return if now < end {
                running(Phase::Cancelling, self.done_by(now))
            } else {
                ended(Phase::Cancelled, kept, end)
            };
        }
        let expires = self.expires_at();
        if expires < self.completed_at() && now >= expires {
            return ended(Phase::Expired, self.done_by(expires), expires);
        }
        if now < self.start() {
            running(Phase::Validating, 0)
        } else if now < self.processing_end() {
            running(Phase::InProgress, self.done_by(now))
        } else if now < self.completed_at() {
            running(Phase::Finalizing, self.items)
        } else {
            ended(Phase::Completed, self.items, self.completed_at())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeline(items: usize, processing_ms: u64) -> Timeline {
        Timeline {
            created: Instant::now(),
            validating: Duration::from_millis(100),
            processing: Duration::from_millis(processing_ms),
            finalizing: Duration::from_millis(50),
            window: Duration::from_secs(24 * 3600),
            items,
            fails: false,
            cancel_at: None,
            finish_in_flight: true,
        }
    }

    #[test]
    fn done_by_agrees_with_each_items_instant() {
        for (n, p) in [(1, 10), (2, 10), (3, 1000), (7, 13), (10, 3), (5, 0)] {
            let t = timeline(n, p);
            for ms in 0..(p + 200) {
                let at = t.created + Duration::from_millis(ms);
                let brute = (0..n).filter(|&k| t.item_done(k) <= at).count();
                assert_eq!(t.done_by(at), brute, "n={n} p={p} at {ms} ms");
            }
        }
    }

    #[test]
    fn walks_through_validating_in_progress_finalizing_completed() {
        let t = timeline(4, 400);
        let at = |ms| t.at(t.created + Duration::from_millis(ms));
        assert_eq!(at(0).phase, Phase::Validating);
        assert_eq!(at(100).phase, Phase::InProgress);
        assert_eq!(at(100).done, 0);
        assert_eq!(at(200).done, 1);
        assert_eq!(at(499).done, 3);
        assert_eq!(at(500).phase, Phase::Finalizing);
        assert_eq!(at(550).phase, Phase::Completed);
        assert_eq!(at(550).done, 4);
        assert_eq!(
            at(9_999).ended_at,
            Some(t.created + Duration::from_millis(550))
        );
    }

    #[test]
    fn expires_with_what_was_done_when_the_window_closed() {
        let mut t = timeline(4, 400);
        t.window = Duration::from_millis(350); // item 2 is done at 400 ms
        let p = t.at(t.created + Duration::from_secs(1));
        assert_eq!(p.phase, Phase::Expired);
        assert_eq!(p.done, 2);
        assert_eq!(p.ended_at, Some(t.created + Duration::from_millis(350)));
    }

    #[test]
    fn a_cancel_finishes_the_item_in_flight_and_keeps_it() {
        let cancelled = |cancel_ms: u64, finish: bool, at_ms: u64| {
            let mut t = timeline(4, 400);
            t.cancel_at = Some(t.created + Duration::from_millis(cancel_ms));
            t.finish_in_flight = finish;
            let p = t.at(t.created + Duration::from_millis(at_ms));
            (p.phase, p.done)
        };
        // At 250 ms item 1 is in flight (done at 300 ms): it is finished and kept.
        assert_eq!(cancelled(250, true, 260), (Phase::Cancelling, 1));
        assert_eq!(cancelled(250, true, 300), (Phase::Cancelled, 2));
        // Cancelled while validating: nothing was in flight.
        assert_eq!(cancelled(50, true, 50), (Phase::Cancelled, 0));
        // A provider whose cancel ends the batch at once keeps only what was done.
        assert_eq!(cancelled(250, false, 250), (Phase::Cancelled, 1));
    }

    #[test]
    fn a_failing_batch_fails_when_validation_ends() {
        let mut t = timeline(4, 400);
        t.fails = true;
        assert_eq!(t.at(t.created).phase, Phase::Validating);
        let p = t.at(t.created + Duration::from_millis(100));
        assert_eq!((p.phase, p.done), (Phase::Failed, 0));
    }
}
