//! Prompt batches that finish: bounded concurrency, one outcome per item, resumable results.
//!
//! A batch is a stream of items (an id and a [`ChatRequest`](crate::ChatRequest) or an
//! [`EmbeddingRequest`](crate::EmbeddingRequest): a [`BatchRequest`]) run through
//! a [`Client`](crate::Client) by a [`Runner`]. The client does the pacing — every request
//! waits for its provider's buckets and fails over as the router decides — so the runner's
//! concurrency only bounds the work in flight. Every item ends in exactly one [`ItemOutcome`]: a
//! success, or a [`Failure`] labelled with its kind, HTTP status, provider and attempts. A
//! failing item never stops the batch; outcomes go to an [`OutcomeSink`] as they complete.
//!
//! [`FileJob`] is the whole job of `llm-failover --no-queue`: JSON lines in ([`InputReader`];
//! bad lines become `invalid_input` failures naming their line, filed under their [`ItemKey`]),
//! JSON lines out ([`ResultsWriter`]: each line written and flushed before it counts, to a
//! regular file that is not the input), a rerun that skips what is done ([`ResumeIndex`]),
//! and a final atomic [`compact`]ion to one line per item.
//! [`Summary`] reports the run against each provider's limits. With a client that has a
//! response [cache](crate::cache), an answer served from it is recorded as such
//! ([`Answer::cached`], `"cached":true` in its line) and the summary counts the run's hits,
//! misses and tokens saved ([`CacheSummary`]).
//!
//! A [`Stop`] ends a run early: first no new items, then (on [`Stop::abort`]) the items in
//! flight are dropped and counted as not done. Nothing recorded is lost, and a rerun sends
//! exactly what is missing.
//!
//! # Examples
//!
//! ```no_run
//! use llm_failover::batch::{FileJob, Runner, Stop, Summary};
//! use llm_failover::Client;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = Client::builder().config_path("providers.toml").environment("prod").build()?;
//! let runner = Runner::new(client.clone()).concurrency(16);
//! let stop = Stop::new();
//! let ctrl_c = stop.clone();
//! tokio::spawn(async move {
//!     let _ = tokio::signal::ctrl_c().await;
//!     ctrl_c.stop();
//! });
//! let report = FileJob::new("prompts.jsonl", "results.jsonl").run(&runner, &stop).await?;
//! eprintln!("{}", Summary::collect(&client, &report, None).await);
//! # Ok(()) }
//! ```

mod budget;
mod files;
mod input;
mod job;
mod key;
mod outcome;
mod results;
mod runner;
mod sink;
mod summary;

pub use crate::stop::Stop;
pub use input::{BatchItem, BatchRequest, InputError, InputReader};
// Public with `test-util`, for tests that compute a line's job id.
pub use budget::BudgetSpent;
#[cfg_attr(feature = "test-util", visibility::make(pub))]
#[cfg_attr(not(feature = "test-util"), allow(unused_imports))]
pub(crate) use input::parse_line;
pub use job::{FileJob, JobReport};
pub use key::ItemKey;
pub use outcome::{Answer, Failure, FailureKind, ItemOutcome, Lane};
pub use results::{Compaction, ResultsWriter, ResumeIndex, compact};
pub use runner::{DEFAULT_CONCURRENCY, Progress, ProgressSnapshot, RunReport, Runner};
pub use sink::OutcomeSink;
pub use summary::{CacheSummary, LaneSummary, ProviderSummary, Summary};

/// What the batch on the queue (the queue wing's `QueuedJob`) shares with [`FileJob`]: result
/// files, input lines, result lines, the summary's count of items answered earlier. Reached
/// through the hidden `wing` module.
pub(crate) mod wing {
    pub use super::files::{Access, create_replacement, results_file, same_file};
    pub use super::input::Parsed;
    pub use super::outcome::{LineHead, failure_line};
    pub use super::results::{warn_unreadable, warn_unreadable_rest};

    /// Counts `n` items as answered before this run.
    pub fn set_skipped_ok(summary: &mut super::Summary, n: u64) {
        super::summary::set_skipped_ok(summary, n);
    }
}
