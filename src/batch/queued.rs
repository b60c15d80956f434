//! The batch on a durable queue: the input's items become jobs (idempotently, so several
//! processes may be given the same input and queue), [`Worker`]s run them, and the results
//! file is an export of what the queue accepted.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::AsyncWriteExt;

use super::files::{results_file, Access};
use super::input::{InputReader, Parsed};
use super::key::ItemKey;
use super::outcome::{failure_line, Answer, LineHead, Outcome};
use super::results::{warn_unreadable, warn_unreadable_rest};
use super::runner::RunReport;
use crate::error::{Error, ErrorKind, Result};
use crate::jobs::{
    wall_ms, Handler, Job, JobContext, JobState, NewJob, Queue, Worker, WorkerReport,
};
use crate::stop::Stop;
use crate::{ChatRequest, Client, RequestOptions};

/// The job kind of a batch item.
pub const CHAT_KIND: &str = "chat";

/// Items enqueued per transaction.
const ENQUEUE_CHUNK: usize = 1_000;

/// A JSON-lines prompt batch run through a durable [`Queue`]: what
/// [`FileJob`](super::FileJob) does, but every item is a job that survives a crash, waits
/// through an outage longer than its deadline instead of failing, and is accepted once however
/// many processes run the batch.
///
/// [`run`](Self::run) enqueues every item of the input (an id already queued is left as it
/// is), runs a [`Worker`] until the queue is drained (or has made no progress for the
/// patience: then the items left stay queued for the next run), and writes the results file
/// as an export of the queue: in input order, one line per item that is `done` (its answer)
/// or `dead` (its failure), and one per bad input line. Items still waiting are not written;
/// the report counts them.
///
/// # Examples
///
/// ```no_run
/// use llm_failover::batch::{QueuedJob, Stop};
/// use llm_failover::jobs::Queue;
/// use llm_failover::Client;
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
    lease: Option<Duration>,
    patience: Duration,
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
    /// This run as a [`Runner`](super::Runner) run reports it, for a
    /// [`Summary`](super::Summary): `ok` is what this process answered; the failures are every
    /// failed line of the export, by kind.
    pub run: RunReport,
}

impl QueuedJob {
    /// Prompts from `input`, results to `output`, jobs in `queue`.
    pub fn new(input: impl Into<PathBuf>, output: impl Into<PathBuf>, queue: Queue) -> Self {
        QueuedJob {
            input: input.into(),
            output: output.into(),
            queue,
            retry_failed: false,
            concurrency: super::DEFAULT_CONCURRENCY,
            deadline: Duration::from_secs(3_600),
            lease: None,
            patience: Duration::from_secs(30 * 60),
        }
    }

    /// The results file `output` resolves to (a symbolic link is followed), once it is known
    /// to be usable with `input`: a regular file (or none yet) with one link, not the input
    /// by any name. Check it before opening a queue beside it.
    ///
    /// # Errors
    ///
    /// `Config` saying what is wrong with `output`.
    pub fn check_files(input: &Path, output: &Path) -> Result<PathBuf> {
        if super::files::same_file(input, output) {
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
    /// let spec = llm_failover::batch::QueuedJob::default_queue(Path::new("out/results.jsonl"));
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
    /// [`DEFAULT_CONCURRENCY`](super::DEFAULT_CONCURRENCY)).
    #[must_use]
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Longest time one request may take, waits included (default 1 hour). An item whose
    /// providers stay closed past it is snoozed until they reopen, not failed.
    #[must_use]
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// How long a worker holds a claimed item before the queue gives it to another (default:
    /// twice the deadline). A worker that stops (a crash, a pause) past it loses the item,
    /// and its late answer is refused.
    #[must_use]
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// How long the run waits without any item settling (an outage) before it ends and
    /// leaves the rest queued (default 30 minutes).
    #[must_use]
    pub fn patience(mut self, patience: Duration) -> Self {
        self.patience = patience;
        self
    }

    /// Enqueues the input, runs it, exports the results. See the type's documentation.
    ///
    /// # Errors
    ///
    /// `Io` when the input cannot be read or the results cannot be written (the queue keeps
    /// every accepted result: a rerun exports them), or the queue's database fails; `Config`
    /// when the results file is the input.
    pub async fn run(&self, client: &Client, stop: &Stop) -> Result<QueuedReport> {
        let clock = client.clock().clone();
        let started = clock.now();
        let output = QueuedJob::check_files(&self.input, &self.output)?;
        let previous = previous_lines(&output).await?;
        let now = wall_ms(clock.wall());
        let enqueued = self.enqueue(&previous, now).await?;
        let requeued = if self.retry_failed {
            self.requeue_dead(&enqueued.ids, now).await?
        } else {
            0
        };
        let served = Arc::new(Served::default());
        let worker = self.work(client, stop, &served).await?;
        let export = self.export(&output, &previous).await?;
        let run = RunReport {
            ok: worker.completed,
            cached: served.cached.load(Ordering::Relaxed),
            tokens_saved: served.tokens_saved.load(Ordering::Relaxed),
            failed_by_kind: export.failed_by_kind,
            not_done: worker.released,
            stopped: worker.ended == crate::jobs::Ended::Stopped,
            input_exhausted: true,
            elapsed: clock.now().saturating_duration_since(started),
            usage: Default::default(),
            models: BTreeMap::new(),
        };
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
    ) -> Result<WorkerReport> {
        let chat = BatchChat {
            deadline: self.deadline,
            served: served.clone(),
        };
        Worker::builder(self.queue.clone(), client.clone())
            .handler(CHAT_KIND, Arc::new(chat))
            .concurrency(self.concurrency)
            .lease(self.lease.unwrap_or(self.deadline * 2))
            .until_drained(self.patience)
            .build()?
            .run(stop)
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

    /// Every good line as a job, but those the results file already answered (or failed,
    /// unless retrying failures) and the queue does not know: they keep their line.
    async fn enqueue(&self, previous: &Previous, now: i64) -> Result<Enqueued> {
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
            if let Some((_, ok)) = previous.get(&item.id) {
                if *ok || !self.retry_failed {
                    continue;
                }
            }
            let payload = serde_json::to_string(&item.request).map_err(|e| {
                Error::new(ErrorKind::Config, format!("item {:?}: {e}", item.id)).with_source(e)
            })?;
            counts.ids.insert(item.id.clone());
            chunk.push(NewJob::new(item.id, CHAT_KIND, payload));
            if chunk.len() == ENQUEUE_CHUNK {
                counts.added += self
                    .queue
                    .enqueue_all(std::mem::take(&mut chunk), now)
                    .await?;
            }
        }
        counts.added += self.queue.enqueue_all(chunk, now).await?;
        Ok(counts)
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

    async fn requeue_dead(&self, ids: &HashSet<String>, now: i64) -> Result<u64> {
        let mut requeued = 0;
        for job in self.queue.dead_letters().await? {
            if ids.contains(&job.id) && self.queue.requeue(&job.id, now).await? {
                requeued += 1;
            }
        }
        Ok(requeued)
    }

    /// Writes the results file from the queue, in input order, through a temporary file
    /// renamed over it.
    async fn export(&self, output: &Path, previous: &Previous) -> Result<Export> {
        let mut reader = self.open_input().await?;
        let temp = temp_path(output);
        let file = tokio::fs::File::create(&temp)
            .await
            .map_err(|e| io_error(e, "cannot create", &temp))?;
        let mut out = tokio::io::BufWriter::new(file);
        let mut export = Export::default();
        let mut seen = HashSet::new();
        while let Some(parsed) = self.next(&mut reader).await? {
            let line = match parsed {
                Err(bad) => Some((Outcome::invalid_input(&bad).to_json_line(), false)),
                Ok(item) => {
                    let line = match self.queue.get(&item.id).await? {
                        Some(job) => export_line(&job),
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
}

impl Export {
    fn count(&mut self, line: &str, ok: bool) {
        if ok {
            self.ok += 1;
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

/// The results line of a job in a state that has one — its answer, or its failure — and
/// whether it is an answer.
fn export_line(job: &Job) -> Option<(String, bool)> {
    let line = match job.state {
        JobState::Done => return job.result.as_ref().map(|r| (format!("{r}\n"), true)),
        JobState::Dead => {
            let error = job.last_error.as_deref().or(job.reason.as_deref());
            let (kind, status, provider, message) = parse_reason(error.unwrap_or("dead"));
            failure_line(&job.id, kind, status, provider, message, job.attempt)
        }
        JobState::Review => {
            let message = job.reason.as_deref().unwrap_or("refused by its contract");
            failure_line(&job.id, "review", None, None, message, job.attempt)
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

fn io_error(e: std::io::Error, what: &str, path: &Path) -> Error {
    Error::new(ErrorKind::Io, format!("{what} {}: {e}", path.display())).with_source(e)
}

/// A batch item's job: its chat request, sent with the batch's deadline; the result is the
/// item's results line.
struct BatchChat {
    deadline: Duration,
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
        let request: ChatRequest = serde_json::from_str(&job.payload).map_err(|e| {
            Error::new(
                ErrorKind::InvalidRequest,
                format!("job {:?}: the payload is not a chat request: {e}", job.id),
            )
        })?;
        let clock = ctx.client().clock().clone();
        let started = clock.now();
        let options = RequestOptions::new().deadline(self.deadline);
        let response = ctx.client().chat_with(request, &options).await?;
        let answer =
            Answer::from_response(response, clock.now().saturating_duration_since(started));
        if answer.cached {
            let tokens = answer.usage.map_or(0, |u| u.total());
            self.served.cached.fetch_add(1, Ordering::Relaxed);
            self.served
                .tokens_saved
                .fetch_add(tokens, Ordering::Relaxed);
        }
        Ok(Outcome::ok(job.id.clone(), answer)
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
