//! [`Runner`]: items in, one outcome per item out, with bounded concurrency.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use tokio::task::{Id, JoinSet};

use super::budget::BudgetSpent;
use super::input::{BatchItem, BatchRequest, InputError};
use super::outcome::{Answer, Failure, ItemOutcome};
use super::sink::OutcomeSink;
use crate::admission::Priority;
use crate::client::Client;
use crate::clock::{Clock, TokioClock};
use crate::id::ProviderId;
use crate::router::RequestOptions;
use crate::stop::Stop;
use crate::types::Usage;
use crate::types::price::Cost;

/// Items in flight when none is set.
pub const DEFAULT_CONCURRENCY: usize = 16;

/// Runs items through a [`Client`], at most `concurrency` at a time, and hands every outcome
/// to a sink as soon as it is known.
///
/// Concurrency only bounds the work in flight (memory, sockets); the pace is the client's:
/// each request waits for admission by its provider's buckets and fails over as the router
/// decides. Every item read ends in exactly one outcome — a success or a labelled
/// [`Failure`] — and a failing item never stops the batch. A bad input line becomes an
/// `invalid_input` failure without a request.
///
/// A [`Stop`] ends the run early: after [`Stop::stop`] no new item is read and the ones in
/// flight finish; after [`Stop::abort`] the ones in flight are dropped and counted as
/// [`not_done`](RunReport::not_done) (they get no outcome, so a resumed run sends them
/// again).
///
/// # Examples
///
/// ```no_run
/// use futures_util::stream;
/// use llm_failover::batch::{BatchItem, ItemOutcome, Runner, Stop};
/// use llm_failover::{ChatRequest, Client};
///
/// # async fn run(client: Client) -> std::io::Result<()> {
/// let items = (0..100).map(|i| {
///     Ok(BatchItem::new(format!("q{i}"), ChatRequest::from_prompt(format!("What is {i} squared?"))))
/// });
/// let mut outcomes: Vec<ItemOutcome> = Vec::new();
/// let report = Runner::new(client)
///     .concurrency(8)
///     .run(stream::iter(items), &mut outcomes, &Stop::new())
///     .await?;
/// assert_eq!(report.ok + report.failed(), 100);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Runner {
    client: Client,
    concurrency: usize,
    options: RequestOptions,
    clock: Arc<dyn Clock>,
    progress: Progress,
}

impl Runner {
    /// A runner over `client` with [`DEFAULT_CONCURRENCY`] and the client's policy deadline.
    pub fn new(client: Client) -> Self {
        Runner {
            client,
            concurrency: DEFAULT_CONCURRENCY,
            options: RequestOptions::new().priority(Priority::Bulk),
            clock: Arc::new(TokioClock),
            progress: Progress::default(),
        }
    }

    /// Items in flight at most (at least 1).
    #[must_use]
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Longest time one item may take, admission waits and failovers included.
    #[must_use]
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.options = self.options.deadline(deadline);
        self
    }

    /// Options sent with every item (deadline, provider pin, credentials, place in the
    /// [admission order](crate::admission)). By default items are
    /// [bulk](crate::admission::Priority::Bulk): an interactive request of the same client,
    /// or of another process sharing its limits, goes before them.
    #[must_use]
    pub fn request_options(mut self, options: RequestOptions) -> Self {
        self.options = options;
        self
    }

    /// The clock that times items and the run (the client's own by default is
    /// [`TokioClock`](crate::clock::TokioClock)).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The client items are sent through.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Live counters (for a progress display); clones share them.
    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    /// Runs every item of `items`, recording each outcome in `sink`, until the items end or
    /// `stop` fires.
    ///
    /// # Errors
    ///
    /// When `sink` fails to record an outcome (items in flight are then dropped); and, before
    /// any item is read, when a store the client shares with other processes refuses it
    /// ([`Client::check_stores`]: the client's `Config` error inside the `io::Error`, every
    /// item left as it was).
    pub async fn run<S, K>(&self, items: S, sink: &mut K, stop: &Stop) -> io::Result<RunReport>
    where
        S: Stream<Item = Result<BatchItem, InputError>>,
        K: OutcomeSink + ?Sized,
    {
        self.client.check_stores().await.map_err(io::Error::other)?;
        let started = self.clock.now();
        let mut items = std::pin::pin!(items);
        let mut report = RunReport::default();
        let mut set: JoinSet<ItemOutcome> = JoinSet::new();
        let mut ids: HashMap<Id, String> = HashMap::new();
        let mut input_done = false;
        let mut budget_spent = false;

        loop {
            // Admit items until the window is full.
            while !input_done && !budget_spent && set.len() < self.concurrency && !stop.is_stopped()
            {
                let next = tokio::select! {
                    biased;
                    () = stop.stopped() => break,
                    next = items.next() => next,
                };
                match next {
                    None => input_done = true,
                    Some(Err(bad)) => {
                        self.progress.inner.started.fetch_add(1, Relaxed);
                        let outcome = ItemOutcome::invalid_input(&bad);
                        if let Err(e) = self.keep(sink, &outcome, &mut report).await {
                            return Err(self.give_up(e, &mut set, &mut report).await);
                        }
                    }
                    Some(Ok(item)) => self.spawn_item(item, &mut set, &mut ids),
                }
            }
            if set.is_empty() {
                break;
            }
            let joined = tokio::select! {
                biased;
                () = stop.aborted() => {
                    set.abort_all();
                    None
                }
                joined = set.join_next_with_id() => joined,
            };
            let Some(joined) = joined else {
                self.drain_aborted(&mut set, &mut ids, sink, &mut report)
                    .await?;
                break;
            };
            self.progress.inner.in_flight.fetch_sub(1, Relaxed);
            let outcome = match joined {
                Ok((id, outcome)) => {
                    ids.remove(&id);
                    outcome
                }
                Err(e) => panicked(&mut ids, &e),
            };
            if let Some(refused) = outcome.budget_refusal() {
                // Not sent, not failed: no outcome is kept (a rerun after the budget's
                // reset sends it), and nothing more is started.
                report.not_done += 1;
                let b = report.budget_spent.get_or_insert_with(|| {
                    let until = refused.retry_after.unwrap_or_default();
                    BudgetSpent::new(refused.message.clone(), self.clock.wall(), until)
                });
                b.items += 1;
                budget_spent = true;
                continue;
            }
            if let Err(e) = self.keep(sink, &outcome, &mut report).await {
                return Err(self.give_up(e, &mut set, &mut report).await);
            }
        }

        // The last answers' reports, for the other processes sharing the limits (a store
        // that fails here has every outcome kept already: a warning, not an error).
        if let Err(e) = self.client.flush().await {
            tracing::warn!(error = %e, "could not send the last answers' limit reports");
        }
        report.input_exhausted = input_done;
        report.stopped = stop.is_stopped() && !input_done;
        report.elapsed = self.clock.now().saturating_duration_since(started);
        Ok(report)
    }

    /// Starts `item` in `set`, remembering its id by task (for a panic's outcome).
    fn spawn_item(
        &self,
        item: BatchItem,
        set: &mut JoinSet<ItemOutcome>,
        ids: &mut HashMap<Id, String>,
    ) {
        self.progress.inner.started.fetch_add(1, Relaxed);
        self.progress.inner.in_flight.fetch_add(1, Relaxed);
        let id = item.id.clone();
        let task = run_item(
            self.client.clone(),
            item,
            self.options.clone(),
            self.clock.clone(),
        );
        let handle = set.spawn(task);
        ids.insert(handle.id(), id);
    }

    /// After an abort: keeps what finished anyway, counts the rest as not done.
    async fn drain_aborted<K: OutcomeSink + ?Sized>(
        &self,
        set: &mut JoinSet<ItemOutcome>,
        ids: &mut HashMap<Id, String>,
        sink: &mut K,
        report: &mut RunReport,
    ) -> io::Result<()> {
        while let Some(joined) = set.join_next_with_id().await {
            self.progress.inner.in_flight.fetch_sub(1, Relaxed);
            match joined {
                Ok((_, outcome)) => self.keep(sink, &outcome, report).await?,
                Err(e) if e.is_cancelled() => report.not_done += 1,
                Err(e) => {
                    let outcome = panicked(ids, &e);
                    self.keep(sink, &outcome, report).await?;
                }
            }
        }
        Ok(())
    }

    /// Hands `outcome` to the sink, then counts it.
    async fn keep<K: OutcomeSink + ?Sized>(
        &self,
        sink: &mut K,
        outcome: &ItemOutcome,
        report: &mut RunReport,
    ) -> io::Result<()> {
        sink.record(outcome).await?;
        match &outcome.result {
            Ok(answer) => {
                self.progress.inner.ok.fetch_add(1, Relaxed);
                report.ok += 1;
                if let Some(u) = answer.usage {
                    report.usage.input_tokens += u.input_tokens;
                    report.usage.output_tokens += u.output_tokens;
                }
                if let Some(c) = answer.cost {
                    *report.cost.get_or_insert(Cost::ZERO) += c;
                }
                if answer.cached {
                    report.cached += 1;
                    report.tokens_saved += answer.usage.map_or(0, |u| u.total());
                }
                report
                    .models
                    .insert(answer.provider.clone(), answer.model.clone());
            }
            Err(failure) => {
                self.progress.inner.failed.fetch_add(1, Relaxed);
                *report
                    .failed_by_kind
                    .entry(failure.kind.as_str().to_owned())
                    .or_default() += 1;
            }
        }
        tracing::debug!(
            item = %outcome.key,
            outcome = match &outcome.result {
                Ok(_) => "ok",
                Err(f) => f.kind.as_str(),
            },
            "batch item done"
        );
        Ok(())
    }

    /// The sink failed: drop what is in flight and return its error.
    async fn give_up(
        &self,
        err: io::Error,
        set: &mut JoinSet<ItemOutcome>,
        report: &mut RunReport,
    ) -> io::Error {
        report.not_done += set.len() as u64;
        set.abort_all();
        while set.join_next().await.is_some() {
            self.progress.inner.in_flight.fetch_sub(1, Relaxed);
        }
        err
    }
}

fn panicked(ids: &mut HashMap<Id, String>, e: &tokio::task::JoinError) -> ItemOutcome {
    let id = ids.remove(&e.id()).unwrap_or_default();
    ItemOutcome::failed(
        id,
        Failure::panicked("the task running this item panicked".to_owned()),
    )
}

async fn run_item(
    client: Client,
    item: BatchItem,
    options: RequestOptions,
    clock: Arc<dyn Clock>,
) -> ItemOutcome {
    let started = clock.now();
    let latency = || clock.now().saturating_duration_since(started);
    let answered = match item.request {
        BatchRequest::Chat(req) => client
            .chat_with(req, &options)
            .await
            .map(|r| Answer::from_response(r, latency())),
        BatchRequest::Embed(req) => client
            .embed_with(&req, &options)
            .await
            .map(|r| Answer::from_embedding(r, latency())),
    };
    match answered {
        Ok(answer) => ItemOutcome::ok(item.id, answer),
        Err(err) => ItemOutcome::failed(item.id, Failure::from_error(&err)),
    }
}

/// What one [`Runner::run`] did.
///
/// # Examples
///
/// ```
/// use futures_util::stream;
/// use llm_failover::batch::{InputReader, ItemOutcome, Runner, Stop};
///
/// # use std::sync::Arc;
/// # use llm_failover::provider::openai::OpenAi;
/// # use llm_failover::{Client, ProviderId, ProviderSettings};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let local = OpenAi::new(ProviderId::new("local"), "http://127.0.0.1:9/v1".parse()?)
/// #     .with_chat_model("llama3.2");
/// # let client = Client::builder().provider(Arc::new(local), ProviderSettings::new()).build()?;
/// // Two bad lines: they fail without a request.
/// let mut input = InputReader::new(&b"not json\n{\"id\": \"q2\"}\n"[..]);
/// let mut items = Vec::new();
/// while let Some(item) = input.next().await? {
///     items.push(item);
/// }
/// let mut outcomes: Vec<ItemOutcome> = Vec::new();
/// let report = Runner::new(client).run(stream::iter(items), &mut outcomes, &Stop::new()).await?;
/// assert_eq!((report.ok, report.failed()), (0, 2));
/// assert_eq!(report.failed_by_kind["invalid_input"], 2);
/// assert!(report.input_exhausted && !report.stopped);
/// assert_eq!(outcomes.len(), 2);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunReport {
    /// Items that succeeded.
    pub ok: u64,
    /// Failed items by [`FailureKind`](super::FailureKind) name.
    pub failed_by_kind: BTreeMap<String, u64>,
    /// Items dropped in flight by an abort (no outcome recorded).
    pub not_done: u64,
    /// The run was stopped before the items ran out.
    pub stopped: bool,
    /// Every item was read.
    pub input_exhausted: bool,
    /// From the start of the run to its end.
    pub elapsed: Duration,
    /// Tokens reported by the successful answers (those from the cache included: what they
    /// used when first asked).
    pub usage: Usage,
    /// Of the items that succeeded, those answered from the response cache (nothing sent).
    pub cached: u64,
    /// Tokens (input and output) the answers from the cache had used when first asked: what
    /// this run did not spend again.
    pub tokens_saved: u64,
    /// The model that last answered for each provider.
    pub models: BTreeMap<ProviderId, String>,
    /// Of the items that succeeded, those a provider's Batch API answered (the bulk lane);
    /// the others went live.
    pub provider_batch: u64,
    /// Tokens the bulk lane's answers reported.
    pub provider_batch_usage: Usage,
    /// What the answers cost, the sum of their results lines' `cost_usd` (`None`: no answer
    /// had a price).
    pub cost: Option<Cost>,
    /// Of that, what the bulk lane's answers cost.
    pub provider_batch_cost: Option<Cost>,
    /// A budget was spent: the run stopped sending, its items held back are not done.
    pub budget_spent: Option<BudgetSpent>,
}

impl RunReport {
    /// Items that failed, of every kind.
    pub fn failed(&self) -> u64 {
        self.failed_by_kind.values().sum()
    }
}

/// Live counts of a run, to read from another task while it runs (a progress bar).
///
/// # Examples
///
/// ```
/// use futures_util::stream;
/// use llm_failover::batch::{InputReader, ItemOutcome, Runner, Stop};
///
/// # use std::sync::Arc;
/// # use llm_failover::provider::openai::OpenAi;
/// # use llm_failover::{Client, ProviderId, ProviderSettings};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let local = OpenAi::new(ProviderId::new("local"), "http://127.0.0.1:9/v1".parse()?)
/// #     .with_chat_model("llama3.2");
/// # let client = Client::builder().provider(Arc::new(local), ProviderSettings::new()).build()?;
/// let runner = Runner::new(client);
/// let progress = runner.progress().clone(); // e.g. moved into a progress-bar task
/// let mut outcomes: Vec<ItemOutcome> = Vec::new();
/// let bad = InputReader::new(&b"not json\n"[..]).next().await?.unwrap();
/// runner.run(stream::iter([bad]), &mut outcomes, &Stop::new()).await?;
/// let now = progress.snapshot();
/// assert_eq!((now.started, now.failed, now.in_flight), (1, 1, 0));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default)]
pub struct Progress {
    inner: Arc<ProgressCounters>,
}

#[derive(Debug, Default)]
struct ProgressCounters {
    started: AtomicU64,
    in_flight: AtomicU64,
    ok: AtomicU64,
    failed: AtomicU64,
    skipped: AtomicU64,
}

/// A reading of [`Progress`].
///
/// # Examples
///
/// ```
/// use llm_failover::batch::{ProgressSnapshot, Runner};
///
/// fn status_line(now: ProgressSnapshot, total: u64) -> String {
///     let percent = 100 * now.finished() / total.max(1);
///     format!("{percent}% ({} ok, {} failed, {} in flight)", now.ok, now.failed, now.in_flight)
/// }
/// # use std::sync::Arc;
/// # use llm_failover::provider::openai::OpenAi;
/// # use llm_failover::{Client, ProviderId, ProviderSettings};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let local = OpenAi::new(ProviderId::new("local"), "http://127.0.0.1:9/v1".parse()?)
/// #     .with_chat_model("llama3.2");
/// # let client = Client::builder().provider(Arc::new(local), ProviderSettings::new()).build()?;
/// let runner = Runner::new(client);
/// assert_eq!(status_line(runner.progress().snapshot(), 10), "0% (0 ok, 0 failed, 0 in flight)");
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProgressSnapshot {
    /// Items read and started (bad lines included).
    pub started: u64,
    /// Items sent and not yet ended.
    pub in_flight: u64,
    /// Items that succeeded.
    pub ok: u64,
    /// Items that failed.
    pub failed: u64,
    /// Items skipped because an earlier run finished them.
    pub skipped: u64,
}

impl ProgressSnapshot {
    /// Items that need no more work in this run: ok, failed and skipped.
    pub fn finished(&self) -> u64 {
        self.ok + self.failed + self.skipped
    }
}

impl Progress {
    /// The counts now.
    pub fn snapshot(&self) -> ProgressSnapshot {
        let c = &self.inner;
        ProgressSnapshot {
            started: c.started.load(Relaxed),
            in_flight: c.in_flight.load(Relaxed),
            ok: c.ok.load(Relaxed),
            failed: c.failed.load(Relaxed),
            skipped: c.skipped.load(Relaxed),
        }
    }

    pub(crate) fn add_skipped(&self) {
        self.inner.skipped.fetch_add(1, Relaxed);
    }
}
