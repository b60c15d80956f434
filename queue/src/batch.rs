//! The batch on a durable queue: the input's items become jobs (idempotently, so several
//! processes may be given the same input and queue), [`Worker`]s run them, and the results
//! file is an export of what the queue accepted.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use crate::bulk;
use crate::{Handler, Job, JobContext, JobState, NewJob, Queue, Worker, WorkerReport, patiently};
use llm_failover_core::Config;
use llm_failover_core::batch::BatchRequest;
use llm_failover_core::batch::{Answer, InputReader, ItemKey, ItemOutcome, RunReport, Summary};
use llm_failover_core::batch::{Lane, Stop};
use llm_failover_core::clock::Clock;
use llm_failover_core::price::Cost;
use llm_failover_core::wing::batch::{
    Access, LineHead, Parsed, create_replacement, failure_line, results_file, same_file,
    set_skipped_ok, warn_unreadable, warn_unreadable_rest,
};
use llm_failover_core::{Client, RequestOptions};
use llm_failover_core::{Error, ErrorKind, Result};

/// The job kind of a batch item.
use crate::job::CHAT_KIND;

/// Items enqueued per transaction.
const ENQUEUE_CHUNK: usize = 1_000;

/// The longest an item waits inside the client by default (for a provider to reopen, for its
/// slot) before it goes back to the queue until the stated time.
const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(10);

/// How long the queue's database may fail at the start, in the middle or at the end of a run
/// by default.
const DEFAULT_DATABASE_PATIENCE: Duration = Duration::from_secs(60);

/// A JSON-lines prompt batch run through a durable [`Queue`]: what
/// [`FileJob`](llm_failover_core::batch::FileJob) does, but every item is a job that survives a crash, waits
/// through an outage longer than its deadline instead of failing, and is accepted once however
/// many processes run the batch.
///
/// [`run`](Self::run) enqueues every item of the input (one already queued is left as it
/// is), runs a [`Worker`] until the queue is drained (or has made no progress for the
/// patience: then the items left stay queued for the next run), and writes the results file
/// as an export of the queue: in input order, one line per item that is `done` (its answer)
/// or `dead` (its failure), and one per bad input line. Items still waiting are not written;
/// the report counts them.
///
/// An item is its id **and** its question: its job in the queue is named by both
/// ([`job_id`](Self::job_id)). The same id with another request — a prompt edited before a
/// rerun, another input file on a shared queue — is another job, asked anew, never answered
/// with the other's result.
///
/// The defaults a run lives with: an item waits inside the client at most
/// [`max_wait`](Self::max_wait) (10 s) for a throttled or closed provider, then goes back to
/// the queue until the stated time; a worker's lease is 30 s, renewed while the item runs,
/// so a killed process's items come back within about that; the queue's database may fail
/// for a minute (at the start, in the middle, at the end) before the run gives up.
///
/// # Examples
///
/// ```no_run
/// use llm_failover::batch::Stop;
/// use llm_failover::Client;
/// use llm_failover_queue::{Queue, QueuedJob};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let client = Client::builder().config_path("providers.toml").build()?;
/// let queue = Queue::open("sqlite:results.jsonl.queue.sqlite").await?;
/// let report = QueuedJob::new("prompts.jsonl", "results.jsonl", queue)
///     .run(&client, &Stop::new())
///     .await?;
/// eprintln!("{} ok, {} failed, {} still waiting", report.ok, report.failed, report.pending);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct QueuedJob {
    input: PathBuf,
    output: PathBuf,
    queue: Queue,
    retry_failed: bool,
    concurrency: usize,
    deadline: Duration,
    lease: Duration,
    patience: Duration,
    max_wait: Duration,
    database_patience: Duration,
    lane: LaneChoice,
}

/// Which lane a [`QueuedJob`]'s chat items take.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum LaneChoice {
    /// Live requests through the router (the default).
    #[default]
    Live,
    /// The Batch API of the first provider in the chat order that has one: hours, half
    /// price. The run refuses to start when no provider has one.
    ProviderBatch,
    /// The provider batch where a provider has a Batch API, else live.
    Auto,
}

impl LaneChoice {
    /// Its name on the command line: `live`, `provider-batch`, `auto`.
    pub fn as_str(self) -> &'static str {
        match self {
            LaneChoice::Live => "live",
            LaneChoice::ProviderBatch => "provider-batch",
            LaneChoice::Auto => "auto",
        }
    }
}

/// What a [`QueuedJob::run`] did.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct QueuedReport {
    /// Items in the input (good lines).
    pub items: u64,
    /// Of those, jobs this run added to the queue (the others were queued before).
    pub enqueued: u64,
    /// Bad input lines (each written as an `invalid_input` result).
    pub invalid: u64,
    /// Dead jobs of this input put back by `retry_failed`.
    pub requeued: u64,
    /// What this process's worker did.
    pub worker: WorkerReport,
    /// Items exported with an answer.
    pub ok: u64,
    /// Items exported with a failure (dead, or refused by a contract).
    pub failed: u64,
    /// Items still queued (waiting for a reset, or running elsewhere): not exported yet.
    pub pending: u64,
    /// Items whose line was kept from the results file because the queue does not know them
    /// (answered by an earlier run without the queue).
    pub carried: u64,
    /// Complete lines of the results file that were not result lines (warned about, dropped).
    pub unreadable: u64,
    /// This run as a [`Runner`](llm_failover_core::batch::Runner) run reports it, for a
    /// [`Summary`](llm_failover_core::batch::Summary): `ok` is what this process answered; the failures are every
    /// failed line of the export, by kind.
    pub run: RunReport,
}

impl QueuedReport {
    /// The run's [`Summary`]: what this process answered, every failed line of the export
    /// (this run's and earlier ones'), and as skipped the items answered before this run.
    /// `config`, when given, names each provider's model, whose limiter state is read.
    pub async fn summary(&self, client: &Client, config: Option<&Config>) -> Summary {
        let mut s = Summary::for_run(client, &self.run, config).await;
        set_skipped_ok(&mut s, self.ok.saturating_sub(self.run.ok));
        s.unreadable_lines = self.unreadable;
        s
    }
}

impl QueuedJob {
    /// Prompts from `input`, results to `output`, jobs in `queue`.
    pub fn new(input: impl Into<PathBuf>, output: impl Into<PathBuf>, queue: Queue) -> Self {
        QueuedJob {
            input: input.into(),
            output: output.into(),
            queue,
            retry_failed: false,
            concurrency: llm_failover_core::batch::DEFAULT_CONCURRENCY,
            deadline: Duration::from_secs(3_600),
            lease: crate::DEFAULT_LEASE,
            patience: Duration::from_secs(30 * 60),
            max_wait: DEFAULT_MAX_WAIT,
            database_patience: DEFAULT_DATABASE_PATIENCE,
            lane: LaneChoice::Live,
        }
    }

    /// The queue's id of the item `id` whose request is `payload` (its JSON): the id, `#`,
    /// and 16 hex digits of the payload's SHA-256 — so another question under the same id is
    /// another job.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover_queue::QueuedJob;
    ///
    /// let a = QueuedJob::job_id("q1", r#"{"messages":[{"role":"user","content":"Hi"}]}"#);
    /// let b = QueuedJob::job_id("q1", r#"{"messages":[{"role":"user","content":"Hello"}]}"#);
    /// assert_ne!(a, b);
    /// assert!(a.starts_with("q1#") && a.len() == "q1#".len() + 16);
    /// assert_eq!(QueuedJob::item_id(&a), "q1");
    /// ```
    pub fn job_id(id: &str, payload: &str) -> String {
        use std::fmt::Write;
        let digest = Sha256::digest(payload.as_bytes());
        let mut job = String::with_capacity(id.len() + 17);
        job.push_str(id);
        job.push('#');
        for b in &digest[..8] {
            let _ = write!(job, "{b:02x}"); // writing to a String cannot fail
        }
        job
    }

    /// The item id a [`job_id`](Self::job_id) stands for (the text before its last `#`).
    pub fn item_id(job_id: &str) -> &str {
        crate::job::item_id(job_id)
    }

    /// The results file `output` resolves to (a symbolic link is followed), once it is known
    /// to be usable with `input`: a regular file (or none yet) with one link, not the input
    /// by any name. Check it before opening a queue beside it.
    ///
    /// # Errors
    ///
    /// `Config` saying what is wrong with `output`.
    pub fn check_files(input: &Path, output: &Path) -> Result<PathBuf> {
        if same_file(input, output) {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "the results file {} is the input {}: write the results to another file",
                    output.display(),
                    input.display()
                ),
            ));
        }
        results_file(output, Access::Replace).map_err(|e| {
            Error::new(
                ErrorKind::Config,
                format!("cannot use the results file {}: {e}", output.display()),
            )
        })
    }

    /// The queue a batch writing `output` uses by default: an SQLite file beside it,
    /// `<output>.queue.sqlite`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::path::Path;
    /// let spec = llm_failover_queue::QueuedJob::default_queue(Path::new("out/results.jsonl"));
    /// assert_eq!(spec, "sqlite:out/results.jsonl.queue.sqlite");
    /// ```
    pub fn default_queue(output: &Path) -> String {
        format!("sqlite:{}.queue.sqlite", output.display())
    }

    /// Also puts this input's dead jobs back in the queue before running.
    #[must_use]
    pub fn retry_failed(mut self, yes: bool) -> Self {
        self.retry_failed = yes;
        self
    }

    /// Items in flight at most in this process (default
    /// [`DEFAULT_CONCURRENCY`](llm_failover_core::batch::DEFAULT_CONCURRENCY)).
    #[must_use]
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Longest time one request may take, waits included (default 1 hour).
    #[must_use]
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// How long a worker holds a claimed item without renewing it before the queue gives it
    /// to another (default 30 s). A live worker renews the leases of its items every third
    /// of it, however long they take; a worker that dies (a crash, a `kill -9`) loses them
    /// about one lease later, and its late answers are refused.
    #[must_use]
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The longest an item waits inside the client — for a throttled or closed provider to
    /// reopen, for its booked slot — before it goes back to the queue, eligible at the time
    /// the provider stated (default 10 s). The queue, not a worker, is where a batch waits
    /// through a long throttle or an outage, so the [`patience`](Self::patience) holds.
    #[must_use]
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = max_wait;
        self
    }

    /// How long the queue's database may fail — locked by another process, its server at its
    /// connection limit or restarting — at any point of the run (enqueueing, running,
    /// exporting) before the run ends with the error (default 1 minute).
    #[must_use]
    pub fn database_patience(mut self, patience: Duration) -> Self {
        self.database_patience = patience;
        self
    }

    /// How long the run waits without any item settling (an outage) before it ends and
    /// leaves the rest queued (default 30 minutes).
    #[must_use]
    pub fn patience(mut self, patience: Duration) -> Self {
        self.patience = patience;
        self
    }

    /// Which lane the items go by (default [`LaneChoice::Live`]). With
    /// [`LaneChoice::ProviderBatch`] (or [`LaneChoice::Auto`] where a provider has a Batch
    /// API), the chat items are sent through the Batch API of the first
    /// provider in the chat order that has one (hours, half price: see
    /// [`llm_failover_core::bulk`]); what its batch cannot carry, expired, or refused
    /// retryably is answered live in the same run, and a terminal refusal (a 400) ends its
    /// item as failed. A remote batch lives in the queue: a rerun after a crash polls the
    /// same batch, never submits its items again. Whatever the lane, a run settles the
    /// remote batches an earlier run left.
    #[must_use]
    pub fn lane(mut self, lane: LaneChoice) -> Self {
        self.lane = lane;
        self
    }

    /// Enqueues the input, runs it, exports the results. See the type's documentation.
    ///
    /// # Errors
    ///
    /// `Io` when the input cannot be read or the results cannot be written (the queue keeps
    /// every accepted result: a rerun exports them), or the queue's database fails; `Config`
    /// when the results file is the input, or when a store the client shares with other
    /// processes refuses it ([`Client::check_stores`], asked before anything is enqueued or
    /// claimed: every item stays as it was).
    pub async fn run(&self, client: &Client, stop: &Stop) -> Result<QueuedReport> {
        let clock = llm_failover_core::wing::client_clock(client).clone();
        let started = clock.now();
        let output = QueuedJob::check_files(&self.input, &self.output)?;
        client.check_stores().await?;
        remove_stale_temps(&output).await;
        let previous = previous_lines(&output).await?;
        let enqueued = self.enqueue(clock.as_ref(), &previous).await?;
        let requeued = if self.retry_failed {
            self.requeue_dead(clock.as_ref(), &enqueued.ids).await?
        } else {
            0
        };
        let aside = self.set_aside(clock.as_ref(), client).await?;
        if aside.batches > 0 {
            tracing::info!(
                batches = aside.batches,
                items = aside.items,
                live = aside.live,
                "items set aside in the providers' batches"
            );
        }
        let served = Arc::new(Served::default());
        let tally = Arc::new(bulk::Tally::default());
        let worker = self.work(client, stop, &served, &tally).await?;
        if stop.is_aborted() && self.lane != LaneChoice::Live {
            // An abort (a second Ctrl-C) stops the remote batches too; what they answered
            // is kept for the next run.
            let n = self.cancel_remote_batches(client).await?;
            if n > 0 {
                tracing::warn!(
                    batches = n,
                    "aborted: the providers' batches were asked to cancel"
                );
            }
        }
        // The last answers' reports, for the other processes sharing the limits (every
        // result is in the queue already: a warning, not an error).
        if let Err(e) = client.flush().await {
            tracing::warn!(error = %e, "could not send the last answers' limit reports");
        }
        let export = self.export(clock.as_ref(), &output, &previous).await?;
        let mut run = RunReport::default();
        // The worker's completions count the bulk lane's own jobs, not the items a remote
        // batch answered (settled by its poll job): items are what the report counts.
        let bulk_jobs = tally.jobs.load(Ordering::Relaxed);
        run.provider_batch = tally.answered.load(Ordering::Relaxed);
        run.provider_batch_usage = llm_failover_core::Usage::new(
            tally.input_tokens.load(Ordering::Relaxed),
            tally.output_tokens.load(Ordering::Relaxed),
        );
        run.ok = worker.completed.saturating_sub(bulk_jobs) + run.provider_batch;
        run.cached = served.cached.load(Ordering::Relaxed);
        run.tokens_saved = served.tokens_saved.load(Ordering::Relaxed);
        run.failed_by_kind = export.failed_by_kind;
        run.cost = export.cost;
        run.provider_batch_cost = export.provider_batch_cost;
        run.not_done = worker.released;
        run.stopped = worker.ended == crate::Ended::Stopped;
        run.budget_spent = worker.budget_spent.clone();
        run.input_exhausted = true;
        run.elapsed = clock.now().saturating_duration_since(started);
        Ok(QueuedReport {
            items: enqueued.items,
            enqueued: enqueued.added,
            invalid: enqueued.invalid,
            requeued,
            worker,
            ok: export.ok,
            failed: export.failed,
            pending: export.pending,
            carried: export.carried,
            unreadable: previous.unreadable,
            run,
        })
    }

    async fn work(
        &self,
        client: &Client,
        stop: &Stop,
        served: &Arc<Served>,
        tally: &Arc<bulk::Tally>,
    ) -> Result<WorkerReport> {
        let chat = BatchChat {
            deadline: self.deadline,
            max_wait: self.max_wait,
            served: served.clone(),
        };
        Worker::builder(self.queue.clone(), client.clone())
            .handler(CHAT_KIND, Arc::new(chat))
            .handler(
                bulk::CREATE_KIND,
                Arc::new(bulk::Create::new(tally.clone())),
            )
            .handler(bulk::POLL_KIND, Arc::new(bulk::Poll(tally.clone())))
            .concurrency(self.concurrency)
            .lease(self.lease)
            .until_drained(self.patience)
            .database_patience(self.database_patience)
            .build()?
            .run(stop)
            .await
    }

    /// Asks the providers to cancel every remote batch this queue still polls (the bulk
    /// lane's); returns how many accepted. What they already answered is kept: a later run
    /// collects it and answers the rest live. A batch that has already ended refuses the
    /// cancel (logged, not counted).
    ///
    /// # Errors
    ///
    /// `Io` when the queue's database fails.
    pub async fn cancel_remote_batches(&self, client: &Client) -> Result<u64> {
        bulk::cancel_all(&self.queue, client).await
    }

    /// In the bulk lane, the eligible chat items set aside in remote batches of the first
    /// provider that has a Batch API.
    async fn set_aside(&self, clock: &dyn Clock, client: &Client) -> Result<bulk::SetAside> {
        if self.lane == LaneChoice::Live {
            return Ok(bulk::SetAside::default());
        }
        let Some(provider) = client.bulk_providers().into_iter().next() else {
            if self.lane == LaneChoice::Auto {
                return Ok(bulk::SetAside::default());
            }
            return Err(Error::new(
                ErrorKind::Config,
                "the provider-batch lane needs a provider with a Batch API (OpenAI or an \
                 OpenAI-compatible host, Anthropic, Gemini) in the chat order",
            ));
        };
        let queue = &self.queue;
        let lease = self.lease;
        let provider = provider.as_str().to_owned();
        self.patiently(clock, |_| bulk::set_aside(queue, client, &provider, lease))
            .await
    }

    async fn open_input(&self) -> Result<InputReader<tokio::io::BufReader<tokio::fs::File>>> {
        let file = tokio::fs::File::open(&self.input)
            .await
            .map_err(|e| io_error(e, "cannot open the input", &self.input))?;
        Ok(InputReader::new(tokio::io::BufReader::with_capacity(
            64 * 1024,
            file,
        )))
    }

    /// Runs the queue operation `op` for the database patience (a locked or restarting
    /// database is waited for, as the worker waits for it).
    async fn patiently<T, F, Fut>(&self, clock: &dyn Clock, op: F) -> Result<T>
    where
        F: Fn(i64) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        patiently(clock, self.database_patience, op, |err, wait| {
            tracing::warn!(
                error = %err,
                retry_in_ms = wait.as_millis() as u64,
                "the job queue failed; trying again"
            );
        })
        .await
    }

    /// Every good line as a job. On a queue that knows no job yet (the first run with it),
    /// lines the results file already holds (a run without the queue answered them; failed
    /// ones unless retrying failures) are carried instead: that file is then the only record
    /// of them. On a queue in use, the results file is its export and is not consulted: an
    /// item is asked by what it asks now.
    async fn enqueue(&self, clock: &dyn Clock, previous: &Previous) -> Result<Enqueued> {
        let queue = &self.queue;
        let stats = self.patiently(clock, |now| queue.stats(now)).await?;
        let fresh = stats.ready + stats.running + stats.done + stats.dead + stats.review == 0;
        let mut reader = self.open_input().await?;
        let mut counts = Enqueued::default();
        let mut chunk = Vec::with_capacity(ENQUEUE_CHUNK);
        while let Some(parsed) = self.next(&mut reader).await? {
            let item = match parsed {
                Ok(item) => item,
                Err(_) => {
                    counts.invalid += 1;
                    continue;
                }
            };
            counts.items += 1;
            if fresh
                && let Some((_, ok)) = previous.get(&item.id)
                && (*ok || !self.retry_failed)
            {
                continue;
            }
            let payload = payload(&item.id, &item.request)?;
            let id = QueuedJob::job_id(&item.id, &payload);
            counts.ids.insert(id.clone());
            chunk.push(NewJob::new(id, CHAT_KIND, payload));
            if chunk.len() == ENQUEUE_CHUNK {
                counts.added += self
                    .enqueue_chunk(clock, std::mem::take(&mut chunk))
                    .await?;
            }
        }
        counts.added += self.enqueue_chunk(clock, chunk).await?;
        Ok(counts)
    }

    async fn enqueue_chunk(&self, clock: &dyn Clock, chunk: Vec<NewJob>) -> Result<u64> {
        let queue = &self.queue;
        self.patiently(clock, |now| queue.enqueue_all(chunk.clone(), now))
            .await
    }

    async fn next(
        &self,
        reader: &mut InputReader<tokio::io::BufReader<tokio::fs::File>>,
    ) -> Result<Option<Parsed>> {
        reader
            .next()
            .await
            .map_err(|e| io_error(e, "cannot read the input", &self.input))
    }

    async fn requeue_dead(&self, clock: &dyn Clock, ids: &HashSet<String>) -> Result<u64> {
        let queue = &self.queue;
        let dead = self.patiently(clock, |_| queue.dead_letters()).await?;
        let mut requeued = 0;
        for job in dead.iter().filter(|job| ids.contains(&job.id)) {
            if self
                .patiently(clock, |now| queue.requeue(&job.id, now))
                .await?
            {
                requeued += 1;
            }
        }
        Ok(requeued)
    }

    /// Writes the results file from the queue, in input order, through a temporary file
    /// renamed over it.
    async fn export(
        &self,
        clock: &dyn Clock,
        output: &Path,
        previous: &Previous,
    ) -> Result<Export> {
        let mut reader = self.open_input().await?;
        let temp = temp_path(output);
        // With the results file's permissions from its creation (a read-only or private
        // results file stays so once replaced).
        let file =
            create_replacement(output, &temp).map_err(|e| io_error(e, "cannot create", &temp))?;
        let mut out = tokio::io::BufWriter::new(tokio::fs::File::from_std(file));
        let mut export = Export::default();
        let mut seen = HashSet::new();
        let queue = &self.queue;
        while let Some(parsed) = self.next(&mut reader).await? {
            let line = match parsed {
                Err(bad) => {
                    // Its line is written from the input, whatever an earlier run wrote.
                    if let Some(id) = &bad.id {
                        seen.insert(id.clone());
                    }
                    Some((ItemOutcome::invalid_input(&bad).to_json_line(), false))
                }
                Ok(item) => {
                    let id = QueuedJob::job_id(&item.id, &payload(&item.id, &item.request)?);
                    let line = match self.patiently(clock, |_| queue.get(&id)).await? {
                        Some(job) => export_line(&item.id, &job),
                        None => previous.get(&item.id).map(|(line, ok)| {
                            export.carried += 1;
                            (line.clone(), *ok)
                        }),
                    };
                    seen.insert(item.id);
                    line
                }
            };
            match line {
                Some((line, ok)) => {
                    export.count(&line, ok);
                    write_line(&mut out, &line, &temp).await?;
                }
                None => export.pending += 1,
            }
        }
        // Lines of ids this input does not have (an earlier input's) stay, after it.
        for id in previous.order.iter().filter(|id| !seen.contains(*id)) {
            if let Some((line, _)) = previous.get(id) {
                write_line(&mut out, line, &temp).await?;
            }
        }
        out.flush()
            .await
            .map_err(|e| io_error(e, "cannot write", &temp))?;
        out.into_inner()
            .sync_all()
            .await
            .map_err(|e| io_error(e, "cannot sync", &temp))?;
        tokio::fs::rename(&temp, output)
            .await
            .map_err(|e| io_error(e, "cannot replace", output))?;
        Ok(export)
    }
}

/// What an input's enqueueing counted.
#[derive(Default)]
struct Enqueued {
    items: u64,
    added: u64,
    invalid: u64,
    ids: HashSet<String>,
}

/// What an export wrote.
#[derive(Default)]
struct Export {
    ok: u64,
    failed: u64,
    pending: u64,
    carried: u64,
    failed_by_kind: BTreeMap<String, u64>,
    /// What the answers written cost (their lines' `cost_usd`), and of that the bulk lane's.
    cost: Option<Cost>,
    provider_batch_cost: Option<Cost>,
}

/// What the summary reads of an answer's line.
#[derive(serde::Deserialize)]
struct Costed {
    #[serde(default)]
    cost_usd: Option<Cost>,
    #[serde(default)]
    lane: Option<String>,
}

impl Export {
    fn count(&mut self, line: &str, ok: bool) {
        if ok {
            self.ok += 1;
            if let Ok(Costed {
                cost_usd: Some(c),
                lane,
            }) = serde_json::from_str::<Costed>(line)
            {
                *self.cost.get_or_insert(Cost::ZERO) += c;
                if lane.as_deref() == Some(Lane::ProviderBatch.as_str()) {
                    *self.provider_batch_cost.get_or_insert(Cost::ZERO) += c;
                }
            }
        } else {
            self.failed += 1;
            *self.failed_by_kind.entry(failed_kind(line)).or_default() += 1;
        }
    }
}

async fn write_line(
    out: &mut tokio::io::BufWriter<tokio::fs::File>,
    line: &str,
    path: &Path,
) -> Result<()> {
    out.write_all(line.as_bytes())
        .await
        .map_err(|e| io_error(e, "cannot write", path))
}

/// What a run without the queue (or an earlier export) left in the results file: each id's
/// last line (its text with its newline, and whether it is a success), the ids in the order
/// they first appear, and how many complete lines were not result lines.
#[derive(Default)]
struct Previous {
    lines: HashMap<String, (String, bool)>,
    order: Vec<String>,
    unreadable: u64,
}

impl Previous {
    fn get(&self, id: &str) -> Option<&(String, bool)> {
        self.lines.get(id)
    }
}

async fn previous_lines(output: &Path) -> Result<Previous> {
    let text = match tokio::fs::read(output).await {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Previous::default()),
        Err(e) => return Err(io_error(e, "cannot read the results file", output)),
    };
    let mut previous = Previous::default();
    let complete = text.ends_with(b"\n");
    let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
    let last = lines.len().saturating_sub(1);
    for (n, line) in lines.into_iter().enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let id = match LineHead::parse(line) {
            Some(LineHead {
                key: ItemKey::Id(id),
                ok,
            }) => (id, ok),
            // A bad input line's result: written again from the input.
            Some(_) => continue,
            // A torn last line (a crash mid-write) is dropped; any other is reported.
            None if n == last && !complete => continue,
            None => {
                previous.unreadable += 1;
                warn_unreadable(output, n as u64 + 1, line.len(), previous.unreadable);
                continue;
            }
        };
        let (id, ok) = id;
        let mut text = String::from_utf8_lossy(line).into_owned();
        text.push('\n');
        if previous.lines.insert(id.clone(), (text, ok)).is_none() {
            previous.order.push(id);
        }
    }
    warn_unreadable_rest(output, previous.unreadable);
    Ok(previous)
}

/// The error kind of a failed results line (`unknown` when it has none).
fn failed_kind(line: &str) -> String {
    serde_json::from_str::<serde_json::Value>(line)
        .ok()
        .and_then(|v| v["error"]["kind"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The request of item `id` as the queue stores it (its JSON).
fn payload(id: &str, request: &BatchRequest) -> Result<String> {
    serde_json::to_string(request)
        .map_err(|e| Error::new(ErrorKind::Config, format!("item {id:?}: {e}")).with_source(e))
}

/// The results line of item `id`'s job in a state that has one — its answer, or its failure
/// — and whether it is an answer.
fn export_line(id: &str, job: &Job) -> Option<(String, bool)> {
    let line = match job.state {
        JobState::Done => return job.result.as_ref().map(|r| (format!("{r}\n"), true)),
        JobState::Dead => {
            let error = job.last_error.as_deref().or(job.reason.as_deref());
            let (kind, status, provider, message) = parse_reason(error.unwrap_or("dead"));
            failure_line(id, kind, status, provider, message, job.attempt)
        }
        JobState::Review => {
            let message = job.reason.as_deref().unwrap_or("refused by its contract");
            failure_line(id, "review", None, None, message, job.attempt)
        }
        _ => return None,
    };
    Some((line, false))
}

/// Splits a failure as the worker records it — `kind[ status][ from provider]: message` — into
/// its parts; a text of another form (a lease that expired) is all message.
fn parse_reason(text: &str) -> (&str, Option<u16>, Option<&str>, &str) {
    let Some((head, message)) = text.split_once(": ") else {
        return ("dead", None, None, text);
    };
    let mut words = head.split(' ');
    let kind = words.next().unwrap_or("");
    if kind.is_empty() || !kind.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
        return ("dead", None, None, text);
    }
    let rest: Vec<&str> = words.collect();
    let (status, rest) = match rest.first().and_then(|w| w.parse::<u16>().ok()) {
        Some(s) => (Some(s), &rest[1..]),
        None => (None, &rest[..]),
    };
    let provider = match rest {
        ["from", p] => Some(*p),
        [] => None,
        _ => return ("dead", None, None, text),
    };
    (kind, status, provider, message)
}

fn temp_path(output: &Path) -> PathBuf {
    let mut name = output.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".export-{}.tmp", std::process::id()));
    output.with_file_name(name)
}

/// Removes the export temp files of `output` that processes no longer alive left (a run killed
/// while exporting). One of a live process — another worker exporting now — is left; where
/// liveness cannot be told (no `/proc`), only those older than a day go. Best effort: a file
/// that cannot be removed is left for the next run.
async fn remove_stale_temps(output: &Path) {
    let (Some(dir), Some(name)) = (output.parent(), output.file_name()) else {
        return;
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let prefix = format!("{}.export-", name.to_string_lossy());
    let Ok(mut entries) = tokio::fs::read_dir(dir).await else {
        return;
    };
    let proc = Path::new("/proc/self").exists();
    while let Ok(Some(entry)) = entries.next_entry().await {
        let file = entry.file_name();
        let file = file.to_string_lossy();
        let Some(pid) = file
            .strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix(".tmp"))
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let stale = if proc {
            pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists()
        } else {
            entry
                .metadata()
                .await
                .ok()
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > Duration::from_secs(86_400))
        };
        if stale {
            let _ = tokio::fs::remove_file(entry.path()).await;
        }
    }
}

fn io_error(e: std::io::Error, what: &str, path: &Path) -> Error {
    Error::new(ErrorKind::Io, format!("{what} {}: {e}", path.display())).with_source(e)
}

/// A batch item's job: its chat request, sent with the batch's deadline; the result is the
/// item's results line.
struct BatchChat {
    deadline: Duration,
    max_wait: Duration,
    served: Arc<Served>,
}

/// What this process's handler answered from the response cache (for the summary): counted
/// when the answer is made, so an answer whose completion the queue then refuses (a lost
/// lease) is counted too — the summary bounds the hits by the items completed.
#[derive(Debug, Default)]
struct Served {
    cached: AtomicU64,
    tokens_saved: AtomicU64,
}

#[async_trait]
impl Handler for BatchChat {
    async fn run(&self, ctx: &JobContext) -> Result<String> {
        let job = ctx.job();
        let request: BatchRequest = serde_json::from_str(&job.payload).map_err(|e| {
            Error::new(
                ErrorKind::InvalidRequest,
                format!(
                    "job {:?}: the payload is neither a chat nor an embedding request: {e}",
                    job.id
                ),
            )
        })?;
        let clock = llm_failover_core::wing::client_clock(ctx.client()).clone();
        let started = clock.now();
        // The job's place in the admission order is its request's.
        let options = RequestOptions::new()
            .deadline(self.deadline)
            .max_wait(self.max_wait)
            .priority(job.priority)
            .tenant(job.tenant.clone());
        let latency = || clock.now().saturating_duration_since(started);
        let answer = match request {
            BatchRequest::Chat(req) => {
                Answer::from_response(ctx.client().chat_with(req, &options).await?, latency())
            }
            BatchRequest::Embed(req) => {
                Answer::from_embedding(ctx.client().embed_with(&req, &options).await?, latency())
            }
            _ => {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    format!(
                        "job {:?}: a batch request of a kind this worker does not know",
                        job.id
                    ),
                ));
            }
        };
        if answer.cached {
            let tokens = answer.usage.map_or(0, |u| u.total());
            self.served.cached.fetch_add(1, Ordering::Relaxed);
            self.served
                .tokens_saved
                .fetch_add(tokens, Ordering::Relaxed);
        }
        Ok(ItemOutcome::ok(QueuedJob::item_id(&job.id), answer)
            .to_json_line()
            .trim_end()
            .to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_failure_splits_into_its_parts() {
        let table = [
            (
                "invalid_request 400 from openai: bad model: gpt-9",
                (
                    "invalid_request",
                    Some(400),
                    Some("openai"),
                    "bad model: gpt-9",
                ),
            ),
            ("server 500: boom", ("server", Some(500), None, "boom")),
            ("timeout from a: slow", ("timeout", None, Some("a"), "slow")),
            (
                "lease expired (worker w-1)",
                ("dead", None, None, "lease expired (worker w-1)"),
            ),
            ("Odd: text", ("dead", None, None, "Odd: text")),
            (
                "server 500 twice over: x",
                ("dead", None, None, "server 500 twice over: x"),
            ),
        ];
        for (text, want) in table {
            assert_eq!(parse_reason(text), want, "{text}");
        }
    }
}
