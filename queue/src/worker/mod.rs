//! Workers: take jobs from a [`Queue`], run each through its kind's [`Handler`] with the
//! [`Client`], and settle the claim by what came back.

use std::collections::HashMap;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::FutureExt;
use tokio::task::JoinSet;

use super::job::{Fenced, Job, wall_ms};
use super::policy::FailPolicy;
use super::queue::Queue;
use llm_failover_core::Client;
use llm_failover_core::batch::Stop;
use llm_failover_core::clock::Clock;
use llm_failover_core::{Error, ErrorKind, Result};

pub(crate) mod decide;
mod report;
mod run;
#[cfg(feature = "jsonschema")]
mod schema;

pub use report::{Ended, WorkerReport};
#[cfg(feature = "jsonschema")]
pub use schema::schema_contract;

/// A worker's lease by default: how long after a worker's death its jobs may be claimed
/// again (it renews them every third of it while alive).
pub(crate) const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// A check a kind's result must pass before it is accepted: `Err(reason)` sends the job to
/// `review` with that reason instead of `done`.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use llm_failover_queue::{Contract, Job};
///
/// let has_category: Contract = Arc::new(|_job: &Job, result: &str| {
///     let value: serde_json::Value = serde_json::from_str(result).map_err(|e| e.to_string())?;
///     match value.get("category").and_then(|c| c.as_str()) {
///         Some(_) => Ok(()),
///         None => Err("no category".to_owned()),
///     }
/// });
/// ```
pub type Contract = Arc<dyn Fn(&Job, &str) -> std::result::Result<(), String> + Send + Sync>;

/// What a worker does with one job of a kind: turn its payload into requests through the
/// client and answer its result as JSON text.
///
/// The error decides what becomes of the job: a 429, an exhausted quota or every provider
/// closed until a stated time **snoozes** it until then (no failure counted; the worker goes
/// on with other jobs), a terminal error (a 4xx that can only repeat, a bad payload: return
/// an error of a terminal kind such as [`ErrorKind::InvalidRequest`]) **dead-letters** it
/// at once with the reason, and anything else **fails** it (backoff, dead at the policy's
/// limit).
///
/// # Examples
///
/// ```
/// use async_trait::async_trait;
/// use llm_failover_queue::{Handler, JobContext};
/// use llm_failover::{ChatRequest, Error, ErrorKind};
///
/// struct Summarise;
///
/// #[async_trait]
/// impl Handler for Summarise {
///     async fn run(&self, ctx: &JobContext) -> Result<String, Error> {
///         let text = ctx.job().payload.as_str();
///         let prompt: String = serde_json::from_str(text)
///             .map_err(|e| Error::new(ErrorKind::InvalidRequest, format!("payload: {e}")))?;
///         let answer = ctx.client().chat(ChatRequest::from_prompt(prompt)).await?;
///         Ok(serde_json::json!({ "summary": answer.text }).to_string())
///     }
/// }
/// ```
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// Runs `ctx.job()`; `Ok` is its result (JSON text).
    async fn run(&self, ctx: &JobContext) -> Result<String>;
}

/// What a [`Handler`] is given: the claimed job, the client, and a way to extend the lease.
#[derive(Clone)]
pub struct JobContext {
    job: Job,
    client: Client,
    queue: Queue,
    lease: Duration,
    /// When the handler asked to be run again ([`later`](Self::later)), in wall ms.
    later: Arc<std::sync::Mutex<Option<i64>>>,
}

impl fmt::Debug for JobContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobContext")
            .field("id", &self.job.id)
            .field("attempt", &self.job.attempt)
            .finish_non_exhaustive()
    }
}

impl JobContext {
    /// The claimed job (state `running`; its `attempt` is this claim's fencing token).
    pub fn job(&self) -> &Job {
        &self.job
    }

    /// The client to send through: its limits are the admission gate every worker on it
    /// shares.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The queue the job is in.
    pub fn queue(&self) -> &Queue {
        &self.queue
    }

    /// The worker's lease: how long a claim is held without renewal.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// Asks for this job to be run again `after` from now, whatever the handler then
    /// returns: the job is snoozed (no failure counted, no worker holds it) — for work that
    /// waits on something remote, such as a provider's batch polled until it ends.
    pub fn later(&self, after: Duration) {
        let now = wall_ms(llm_failover_core::wing::client_clock(&self.client).wall());
        let until = now.saturating_add(crate::job::millis(after));
        *self
            .later
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(until);
    }

    /// Extends this claim's lease by the worker's lease from now. The worker already renews
    /// the lease of every job it holds on its own; call this only to learn early, between the
    /// steps of long work (an upload, a long transcription), that the claim was lost. `false` when the claim is lost (the job
    /// was reaped and claimed again): stop and return anything; the result will be refused.
    ///
    /// # Errors
    ///
    /// `Io` when the queue's database fails.
    pub async fn heartbeat(&self) -> Result<bool> {
        let now = wall_ms(llm_failover_core::wing::client_clock(&self.client).wall());
        let outcome = (self.queue)
            .heartbeat(&self.job.id, self.job.attempt, self.lease, now)
            .await?;
        Ok(outcome == Fenced::Applied)
    }
}

/// Runs jobs from one [`Queue`] through one [`Client`]: up to `concurrency` at once, each by
/// the [`Handler`] of its kind, each settled by what it answered (see [`Handler`]).
///
/// Pacing is the client's: every request waits for its provider's buckets and breaker, shared
/// by every worker on the client (and, with a shared store, every process). A worker never
/// sleeps on a 429: the job is snoozed until the stated reset and the worker takes another.
/// While jobs run, the worker claims more as they finish; when none runs and none is
/// eligible, it sleeps until the next one is (at most [`idle_poll`](WorkerBuilder::idle_poll)),
/// reaping expired leases now and then. Several workers — in one process or many, on one
/// host or (with PostgreSQL) many — may share one queue: every claim is a unique
/// `(id, attempt)` and at most one result per job is accepted.
///
/// Leases follow the work: a claim is leased for a short time (30 s by default) and the
/// worker renews the lease of every job it holds, all in one write, every third of the
/// lease, however long a provider keeps a job waiting. A worker that dies (a crash, a
/// `kill -9`) stops renewing, and its jobs are claimable again about one lease later.
///
/// What stays at-least-once is the provider call: a worker that stalled past its lease (a
/// process paused longer than a lease) may have been billed for a result the queue then
/// refuses ([`WorkerReport::lost`]).
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use async_trait::async_trait;
/// use llm_failover::batch::Stop;
/// use llm_failover_queue::{Ended, Handler, JobContext, NewJob, Queue, Worker};
/// use llm_failover::{Client, Error};
///
/// struct Echo;
/// #[async_trait]
/// impl Handler for Echo {
///     async fn run(&self, ctx: &JobContext) -> Result<String, Error> {
///         Ok(ctx.job().payload.clone())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
/// # use llm_failover::provider::openai::OpenAi;
/// # use llm_failover::{Credential, ProviderId, ProviderSettings};
/// # let url = "http://127.0.0.1:9/v1".parse().unwrap();
/// # let local = Arc::new(OpenAi::new(ProviderId::new("local"), url));
/// # let settings = ProviderSettings::new().credential(Credential::new("sk-test"));
/// let client = Client::builder().provider(local, settings).build()?; // (Echo sends nothing)
/// let queue = Queue::sqlite_in_memory()?;
/// queue.enqueue(NewJob::new("a", "echo", r#"{"n":1}"#), 0).await?;
/// let worker = Worker::builder(queue.clone(), client)
///     .handler("echo", Arc::new(Echo))
///     .until_drained(std::time::Duration::from_secs(60))
///     .build()?;
/// let report = worker.run(&Stop::new()).await?;
/// assert_eq!((report.ended, report.completed), (Ended::Drained, 1));
/// assert_eq!(queue.get("a").await?.unwrap().result.as_deref(), Some(r#"{"n":1}"#));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Worker {
    inner: Arc<Inner>,
}

struct Inner {
    queue: Queue,
    client: Client,
    clock: Arc<dyn Clock>,
    name: String,
    kinds: HashMap<String, Kind>,
    concurrency: usize,
    lease: Duration,
    policy: FailPolicy,
    idle_poll: Duration,
    patience: Option<Duration>,
    db_patience: Duration,
}

struct Kind {
    handler: Arc<dyn Handler>,
    contract: Option<Contract>,
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut kinds: Vec<_> = self.inner.kinds.keys().collect();
        kinds.sort();
        f.debug_struct("Worker")
            .field("name", &self.inner.name)
            .field("kinds", &kinds)
            .field("concurrency", &self.inner.concurrency)
            .field("lease", &self.inner.lease)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// A builder for a worker on `queue` sending through `client`.
    pub fn builder(queue: Queue, client: Client) -> WorkerBuilder {
        WorkerBuilder {
            queue,
            client,
            name: None,
            kinds: HashMap::new(),
            contracts: HashMap::new(),
            concurrency: 16,
            lease: DEFAULT_LEASE,
            policy: FailPolicy::default(),
            idle_poll: Duration::from_secs(1),
            patience: None,
            db_patience: Duration::from_secs(60),
        }
    }

    /// The name claims are recorded under.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Runs until `stop` fires (then the jobs in flight finish; on [`Stop::abort`] they are
    /// dropped and their leases released, counting no failure) or, with
    /// [`until_drained`](WorkerBuilder::until_drained), until the queue has nothing left to
    /// do or has made no progress for the patience.
    ///
    /// # Errors
    ///
    /// When the queue's database fails (`Io`) for longer than the
    /// [database patience](WorkerBuilder::database_patience): the jobs in flight are dropped,
    /// their leases expire and the reaper gives them back. Nothing accepted is lost.
    pub async fn run(&self, stop: &Stop) -> Result<WorkerReport> {
        run::Run::new(&self.inner).go(stop).await
    }
}

/// Builds a [`Worker`]; see [`Worker::builder`].
pub struct WorkerBuilder {
    queue: Queue,
    client: Client,
    name: Option<String>,
    kinds: HashMap<String, Arc<dyn Handler>>,
    contracts: HashMap<String, Contract>,
    concurrency: usize,
    lease: Duration,
    policy: FailPolicy,
    idle_poll: Duration,
    patience: Option<Duration>,
    db_patience: Duration,
}

impl fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("name", &self.name)
            .field("concurrency", &self.concurrency)
            .finish_non_exhaustive()
    }
}

impl WorkerBuilder {
    /// The name claims are recorded under (default: `worker-<pid>-<n>`).
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Runs jobs of `kind` with `handler`.
    #[must_use]
    pub fn handler(mut self, kind: impl Into<String>, handler: Arc<dyn Handler>) -> Self {
        self.kinds.insert(kind.into(), handler);
        self
    }

    /// Checks every result of `kind` with `contract` before accepting it.
    #[must_use]
    pub fn contract(mut self, kind: impl Into<String>, contract: Contract) -> Self {
        self.contracts.insert(kind.into(), contract);
        self
    }

    /// At most `n` jobs at once (default 16; at least 1).
    #[must_use]
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// How long a claim is held without a heartbeat (default 30 s). The worker renews the
    /// leases of the jobs it holds every third of it, so it bounds how late a dead worker's
    /// jobs come back, not how long a job may take.
    #[must_use]
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How failures are retried and when they are dead (default [`FailPolicy::default`]).
    #[must_use]
    pub fn fail_policy(mut self, policy: FailPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The longest idle sleep before looking at the queue again (default 1 s): how soon a
    /// job enqueued by another process is seen.
    #[must_use]
    pub fn idle_poll(mut self, every: Duration) -> Self {
        self.idle_poll = every;
        self
    }

    /// How long the queue's database may fail — locked by another process, its connection
    /// lost, its server restarting — before the run ends with the error (default 1 minute).
    /// Meanwhile every queue operation is tried again (0.1 s doubling to 5 s) and the results
    /// in hand are kept: a database that comes back loses nothing.
    #[must_use]
    pub fn database_patience(mut self, patience: Duration) -> Self {
        self.db_patience = patience;
        self
    }

    /// Ends the run when the queue has no job `ready` or `running` (of any worker), or when
    /// no job has been settled for `patience` (an outage longer than that: the jobs stay
    /// queued, eligible later, and a later run finishes them).
    #[must_use]
    pub fn until_drained(mut self, patience: Duration) -> Self {
        self.patience = Some(patience);
        self
    }

    /// The worker.
    ///
    /// # Errors
    ///
    /// `Config` when no handler is given, a contract names a kind without a handler, or the
    /// lease or idle poll is zero.
    pub fn build(self) -> Result<Worker> {
        let config = |m: String| Err(Error::new(ErrorKind::Config, m));
        if self.kinds.is_empty() {
            return config("a worker needs a handler for at least one job kind".into());
        }
        if let Some(kind) = self.contracts.keys().find(|k| !self.kinds.contains_key(*k)) {
            return config(format!(
                "a contract for job kind {kind:?}, which has no handler"
            ));
        }
        if self.lease.is_zero() || self.idle_poll.is_zero() {
            return config("a worker's lease and idle poll must be longer than zero".into());
        }
        let mut contracts = self.contracts;
        let kinds = self
            .kinds
            .into_iter()
            .map(|(name, handler)| {
                let contract = contracts.remove(&name);
                (name, Kind { handler, contract })
            })
            .collect();
        let clock = llm_failover_core::wing::client_clock(&self.client).clone();
        Ok(Worker {
            inner: Arc::new(Inner {
                name: self.name.unwrap_or_else(default_name),
                queue: self.queue,
                client: self.client,
                clock,
                kinds,
                concurrency: self.concurrency,
                lease: self.lease,
                policy: self.policy,
                idle_poll: self.idle_poll,
                patience: self.patience,
                db_patience: self.db_patience,
            }),
        })
    }
}

fn default_name() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "worker-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Runs `job` through its kind's handler, a panic caught as an error.
async fn run_job(inner: Arc<Inner>, job: Job) -> (Job, Answered) {
    let Some(kind) = inner.kinds.get(&job.kind) else {
        let err = Error::new(
            ErrorKind::Unsupported,
            format!(
                "no handler for job kind {:?} in worker {}",
                job.kind, inner.name
            ),
        );
        return (job, Answered::Now(Err(err)));
    };
    let ctx = JobContext {
        job,
        client: inner.client.clone(),
        queue: inner.queue.clone(),
        lease: inner.lease,
        later: Arc::default(),
    };
    let answer = AssertUnwindSafe(kind.handler.run(&ctx))
        .catch_unwind()
        .await
        .unwrap_or_else(|_| {
            Err(Error::new(
                ErrorKind::Server,
                format!("the handler of job kind {:?} panicked", ctx.job.kind),
            ))
        });
    let later = *ctx
        .later
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match later {
        Some(until_ms) => (ctx.job, Answered::Later { until_ms }),
        None => (ctx.job, Answered::Now(answer)),
    }
}

/// What a handler's run came to.
#[derive(Debug)]
pub(crate) enum Answered {
    /// Its answer, settled by [`decide::settle`].
    Now(Result<String>),
    /// It asked to be run again then ([`JobContext::later`]): snoozed.
    Later { until_ms: i64 },
}

type Running = JoinSet<(Job, Answered)>;
