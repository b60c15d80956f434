//! The providers' Batch APIs, emulated: the batches and files a provider holds, the settings
//! a test gives them (processing time, result order, per-item failures, the batch lanes'
//! own limits) and the log a test reads back.
//!
//! A batch's items are answered when it is created, by the same chat answers the live
//! endpoints give (with usage); when each answer becomes visible is the batch's
//! [timeline](timeline), pure over the emulator's time source. The wire formats — OpenAI's
//! files and batches (Azure's too), Anthropic's Message Batches, Gemini's
//! `batchGenerateContent` operations — are `routes/bulk_*.rs`.

mod timeline;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::time::Instant;

use crate::text::mix;
pub(crate) use timeline::{Phase, Progress, Timeline};

/// How long a provider's batches take, on the emulator's time source.
///
/// A batch validates for `validating`, then answers its items one after the other, evenly
/// over `processing`, then finalizes for `finalizing`; it expires `window` after it was
/// created if it has not completed by then (`None`: the provider's own window, 24 h for
/// OpenAI and Anthropic, 48 h for Gemini).
///
/// # Defaults
///
/// 100 ms validating, 1 s processing, 100 ms finalizing, the provider's window: short enough
/// for the no-key demo on real time; a test on a manual clock advances through any of them.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use llm_failover_emulator::BatchTiming;
///
/// // Six hours of processing: with a 24-hour window it completes; with a 3-hour one it
/// // expires with half of its items answered.
/// let slow = BatchTiming::new(Duration::from_secs(6 * 3600)).with_window(Duration::from_secs(3 * 3600));
/// assert_eq!(slow.validating, Duration::ZERO);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchTiming {
    /// OpenAI's `validating` (and, for the others, the start of `in_progress`).
    pub validating: Duration,
    /// From the first item to the last.
    pub processing: Duration,
    /// OpenAI's `finalizing`.
    pub finalizing: Duration,
    /// From creation to expiry; `None`: the provider's documented window.
    pub window: Option<Duration>,
}

impl Default for BatchTiming {
    fn default() -> Self {
        BatchTiming {
            validating: Duration::from_millis(100),
            processing: Duration::from_secs(1),
            finalizing: Duration::from_millis(100),
            window: None,
        }
    }
}

impl BatchTiming {
    /// `processing` long, with no validating or finalizing time and the provider's window.
    pub fn new(processing: Duration) -> Self {
        BatchTiming {
            validating: Duration::ZERO,
            processing,
            finalizing: Duration::ZERO,
            window: None,
        }
    }

    /// Sets the validating time.
    #[must_use]
    pub fn with_validating(mut self, d: Duration) -> Self {
        self.validating = d;
        self
    }

    /// Sets the finalizing time.
    #[must_use]
    pub fn with_finalizing(mut self, d: Duration) -> Self {
        self.finalizing = d;
        self
    }

    /// Sets the window after which an unfinished batch expires.
    #[must_use]
    pub fn with_window(mut self, d: Duration) -> Self {
        self.window = Some(d);
        self
    }
}

/// The order in which a batch answers its items (and so the order of OpenAI's output file
/// and Anthropic's results, which document no order: "Results in the file are not
/// guaranteed to be in the same order as requests", docs.anthropic.com/en/api/retrieving-message-batch-results;
/// OpenAI: "The output line order may not match the input line order",
/// platform.openai.com/docs/guides/batch). Gemini's inline responses are always in input
/// order ("The responses will be in the same order as the input requests",
/// ai.google.dev/api/batch-mode#InlinedResponses).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BatchOrder {
    /// A seeded shuffle that is never the input order (for two or more items).
    #[default]
    Shuffled,
    /// The input order.
    Input,
}

/// How one item of a batch fails, whatever its request (see
/// [`Emulator::fail_batch_item`](crate::Emulator::fail_batch_item)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BatchItemFault {
    /// A 500 in the provider's error body (OpenAI `server_error`, Anthropic `api_error`,
    /// Gemini `INTERNAL`): worth another try.
    ServerError,
    /// Overloaded (OpenAI 503, Anthropic 529 `overloaded_error`, Gemini 503 `UNAVAILABLE`):
    /// worth another try.
    Overloaded,
    /// A 400 `invalid_request_error` (Gemini `INVALID_ARGUMENT`): the request itself is
    /// wrong, another try gets the same.
    InvalidRequest,
}

/// What a test reads back about one provider's batches
/// ([`Emulator::batch_log`](crate::Emulator::batch_log)).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BatchLog {
    /// Batches created (a create answered with a batch, even one that later fails).
    pub creates: u64,
    /// Creates refused with an error status (validation, Anthropic's queue limit, …).
    pub refused: u64,
    /// Reads of one batch (OpenAI `GET /v1/batches/{id}`, Anthropic `GET
    /// /v1/messages/batches/{id}`, Gemini `GET /v1beta/batches/{id}`).
    pub polls: u64,
    /// Downloads of results (OpenAI file content, Anthropic results).
    pub downloads: u64,
    /// Every batch created, oldest first.
    pub batches: Vec<BatchRecord>,
}

/// One batch in the [`BatchLog`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BatchRecord {
    /// The provider's id (`batch_…`, `msgbatch_…`, `batches/…`).
    pub id: String,
    /// The model its requests named.
    pub model: String,
    /// Its items' ids in input order (OpenAI's and Anthropic's `custom_id`, Gemini's
    /// `metadata.key`, else the item's index).
    pub custom_ids: Vec<String>,
    /// Where it is now, in OpenAI's words (`validating`, `in_progress`, `finalizing`,
    /// `completed`, `failed`, `expired`, `cancelling`, `cancelled`).
    pub status: String,
    /// The code of the error that failed it (`token_limit_exceeded`, `duplicate_custom_id`, …).
    pub error_code: Option<String>,
    /// Reads of this batch.
    pub polls: u64,
    /// Its input tokens (what OpenAI's enqueued-token limit counts).
    pub tokens: u64,
}

/// One item's answer, fixed when the batch is created.
#[derive(Clone, Debug)]
pub(crate) enum Outcome {
    /// The provider's whole chat answer and its usage `[input, output]`.
    Answer { body: Value, usage: [u64; 2] },
    /// The provider's error answer: status and body.
    Error { status: u16, body: Value },
}

/// One item of a batch.
#[derive(Clone, Debug)]
pub(crate) struct Item {
    /// `custom_id` (Gemini: `metadata.key`, else the index).
    pub(crate) key: String,
    /// Gemini's `metadata`, echoed back with the response.
    pub(crate) metadata: Option<Value>,
    pub(crate) outcome: Outcome,
    /// OpenAI's output line id (`batch_req_…`) and the answer's request id.
    pub(crate) line_id: String,
    pub(crate) request_id: String,
}

/// One batch.
#[derive(Debug)]
pub(crate) struct Job {
    pub(crate) id: String,
    pub(crate) model: String,
    pub(crate) created_wall: SystemTime,
    pub(crate) timeline: Timeline,
    /// Input order.
    pub(crate) items: Vec<Item>,
    /// Processing order: indexes into `items`.
    pub(crate) order: Vec<usize>,
    /// Input tokens of every item.
    pub(crate) tokens: u64,
    /// Why it fails at the end of validation (OpenAI's `errors.data[]`: `code`, `message`,
    /// `line`, `param`); empty when it does not.
    pub(crate) errors: Vec<Value>,
    /// The provider's own fields, kept as given (OpenAI: `input_file_id`, `endpoint`,
    /// `completion_window`, `metadata`; Gemini: `displayName`).
    pub(crate) spec: Value,
    pub(crate) polls: u64,
    pub(crate) cancel_wall: Option<SystemTime>,
}

impl Job {
    pub(crate) fn progress(&self, now: Instant) -> Progress {
        self.timeline.at(now)
    }

    /// The wall time of `at` on this batch's clock.
    pub(crate) fn wall(&self, at: Instant) -> SystemTime {
        self.created_wall + at.saturating_duration_since(self.timeline.created)
    }

    /// Unix seconds of `at`.
    pub(crate) fn unix(&self, at: Instant) -> u64 {
        self.wall(at)
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs()
    }

    /// The items done by `p`, in processing order.
    pub(crate) fn done<'a>(&'a self, p: &Progress) -> impl Iterator<Item = &'a Item> + 'a {
        self.order[..p.done.min(self.order.len())]
            .iter()
            .map(|&i| &self.items[i])
    }

    /// The items not done by `p`, in processing order.
    pub(crate) fn undone<'a>(&'a self, p: &Progress) -> impl Iterator<Item = &'a Item> + 'a {
        self.order[p.done.min(self.order.len())..]
            .iter()
            .map(|&i| &self.items[i])
    }

    fn record(&self, now: Instant) -> BatchRecord {
        BatchRecord {
            id: self.id.clone(),
            model: self.model.clone(),
            custom_ids: self.items.iter().map(|i| i.key.clone()).collect(),
            status: self.progress(now).phase.as_str().to_owned(),
            error_code: self
                .errors
                .first()
                .and_then(|e| e.get("code"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            polls: self.polls,
            tokens: self.tokens,
        }
    }
}

/// An uploaded file (OpenAI's Files API, for `purpose: "batch"`).
#[derive(Debug)]
pub(crate) struct StoredFile {
    pub(crate) id: String,
    pub(crate) filename: String,
    pub(crate) purpose: String,
    pub(crate) created: u64,
    pub(crate) bytes: bytes::Bytes,
}

/// A test's settings of one provider's batches.
#[derive(Clone, Debug, Default)]
pub(crate) struct Settings {
    pub(crate) timing: BatchTiming,
    pub(crate) order: BatchOrder,
    pub(crate) item_faults: HashMap<String, BatchItemFault>,
    /// OpenAI's enqueued-token limit: for every model, and per model.
    pub(crate) token_limit: Option<u64>,
    pub(crate) model_token_limits: HashMap<String, u64>,
    /// Anthropic's limit of requests in the processing queue.
    pub(crate) queue_limit: Option<u64>,
}

impl Settings {
    pub(crate) fn token_limit_for(&self, model: &str) -> Option<u64> {
        self.model_token_limits
            .get(model)
            .copied()
            .or(self.token_limit)
    }
}

/// Everything under the store's lock.
#[derive(Debug, Default)]
pub(crate) struct Inner {
    pub(crate) settings: Settings,
    /// Oldest first.
    pub(crate) jobs: Vec<Job>,
    pub(crate) files: Vec<StoredFile>,
    pub(crate) creates: u64,
    pub(crate) refused: u64,
    pub(crate) polls: u64,
    pub(crate) downloads: u64,
    shuffles: u64,
}

impl Inner {
    pub(crate) fn job(&self, id: &str) -> Option<&Job> {
        self.jobs.iter().find(|j| j.id == id)
    }

    pub(crate) fn job_mut(&mut self, id: &str) -> Option<&mut Job> {
        self.jobs.iter_mut().find(|j| j.id == id)
    }

    pub(crate) fn file(&self, id: &str) -> Option<&StoredFile> {
        self.files.iter().find(|f| f.id == id)
    }

    /// Input tokens of `model`'s batches not yet ended at `now` (OpenAI's enqueued tokens:
    /// "Once your batch request is completed, your batch rate limit is reset, as your input
    /// tokens are cleared" — OpenAI's Batch API FAQ, quoted in
    /// community.openai.com/t/batch-api-request-limit-violates-terms-of-service/1002388). A
    /// batch that fails holds none.
    pub(crate) fn enqueued_tokens(&self, model: &str, now: Instant) -> u64 {
        self.jobs
            .iter()
            .filter(|j| j.model == model && j.errors.is_empty())
            .filter(|j| !j.progress(now).phase.is_ended())
            .map(|j| j.tokens)
            .sum()
    }

    /// Requests of batches still processing at `now` (Anthropic's processing queue).
    pub(crate) fn queued_requests(&self, now: Instant) -> u64 {
        self.jobs
            .iter()
            .filter(|j| !j.progress(now).phase.is_ended())
            .map(|j| j.items.len() as u64)
            .sum()
    }

    /// The processing order of a new batch of `n` items.
    pub(crate) fn processing_order(&mut self, n: usize, seed: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..n).collect();
        if self.settings.order == BatchOrder::Input || n < 2 {
            return order;
        }
        self.shuffles += 1;
        let mut x = mix(seed ^ self.shuffles.wrapping_mul(0x9e37_79b9));
        for i in (1..n).rev() {
            x = mix(x);
            let j = (x % (i as u64 + 1)) as usize;
            order.swap(i, j);
        }
        if order.iter().enumerate().all(|(i, &o)| i == o) {
            order.rotate_left(1);
        }
        order
    }
}

/// One provider's batches, files, settings and log.
#[derive(Debug)]
pub(crate) struct Store {
    inner: Mutex<Inner>,
    pub(crate) seed: u64,
}

impl Store {
    pub(crate) fn new(seed: u64) -> Self {
        Store {
            inner: Mutex::new(Inner::default()),
            seed,
        }
    }

    /// Runs `f` under the lock (arithmetic and rendering only: never an `.await`).
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        f(&mut lock(&self.inner))
    }

    pub(crate) fn settings(&self) -> Settings {
        self.with(|s| s.settings.clone())
    }

    pub(crate) fn log(&self, now: Instant) -> BatchLog {
        self.with(|s| BatchLog {
            creates: s.creates,
            refused: s.refused,
            polls: s.polls,
            downloads: s.downloads,
            batches: s.jobs.iter().map(|j| j.record(now)).collect(),
        })
    }

    /// Forgets every batch, file and count (the settings stay).
    pub(crate) fn reset(&self) {
        self.with(|s| {
            let settings = std::mem::take(&mut s.settings);
            *s = Inner {
                settings,
                ..Inner::default()
            };
        });
    }
}

/// A mutex's contents, a panic elsewhere notwithstanding (as `state::lock`, which imports
/// this module, so it keeps its own copy).
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shuffled_order_is_a_permutation_and_never_the_input_order() {
        let mut inner = Inner::default();
        for n in 2..40 {
            let order = inner.processing_order(n, 7);
            let mut sorted = order.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..n).collect::<Vec<_>>());
            assert_ne!(order, sorted, "n = {n}");
        }
        inner.settings.order = BatchOrder::Input;
        assert_eq!(inner.processing_order(5, 7), vec![0, 1, 2, 3, 4]);
    }
}
