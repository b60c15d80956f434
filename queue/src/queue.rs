//! [`Queue`]: the one queue type, on whichever backend a job store names.

#[cfg(feature = "sqlite")]
use std::path::Path;
use std::time::Duration;

use super::job::{Failed, Fenced, Job, NewJob, QueueStats, Reaped, check_json, wall_ms};
use super::policy::FailPolicy;
#[cfg(feature = "postgres")]
use super::postgres::PostgresQueue;
#[cfg(feature = "sqlite")]
use super::sqlite::SqliteQueue;
use llm_failover_core::clock::Clock;
use llm_failover_core::{Error, ErrorKind, Result};

/// A durable job queue on SQLite (one host) or PostgreSQL (many hosts): the same schema, the
/// same state machine and the same answers on both (the [module documentation](super) has
/// them). Cheap to clone: clones share the backend's connections.
///
/// Open one with [`Queue::open`] from a spec (`sqlite:PATH` or `postgres://…`), or with the
/// backend's constructor; every operation takes wall-clock milliseconds from the caller
/// ([`wall_ms`](super::wall_ms)).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use llm_failover_queue::{NewJob, Fenced, Queue};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
/// let queue = Queue::sqlite_in_memory()?;
/// queue.enqueue(NewJob::new("line-1", "chat", r#"{"prompt":"hi"}"#), 0).await?;
/// let job = queue.claim("worker-1", Duration::from_secs(60), 0).await?.unwrap();
/// assert_eq!(queue.complete(&job.id, job.attempt, r#""hello""#).await?, Fenced::Applied);
/// assert_eq!(queue.stats(0).await?.done, 1);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Queue {
    backend: Backend,
}

#[derive(Clone, Debug)]
enum Backend {
    #[cfg(feature = "sqlite")]
    Sqlite(SqliteQueue),
    #[cfg(feature = "postgres")]
    Postgres(PostgresQueue),
}

/// Runs `$body` with `$q` bound to the backend's queue.
macro_rules! on_backend {
    ($self:ident, $q:ident => $body:expr) => {
        match &$self.backend {
            #[cfg(feature = "sqlite")]
            Backend::Sqlite($q) => $body,
            #[cfg(feature = "postgres")]
            Backend::Postgres($q) => $body,
        }
    };
}

/// The forms [`Queue::open`] takes, for its error messages.
const SPEC_FORMS: &str =
    "sqlite:PATH, postgres://user@host:port/database, or host=… dbname=… (libpq's key=value)";

impl Queue {
    /// Opens the queue a spec names: `sqlite:PATH` (the file is created if need be), or a
    /// PostgreSQL connection string, `postgres://…` / `postgresql://…` or `key=value` pairs
    /// starting with a key (`host=db.internal dbname=jobs …`), as [`postgres`](Self::postgres)
    /// reads it (the schema is created if need be). A backend this build was compiled without
    /// is a `Config` error naming the feature; no error quotes the spec past its scheme.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
    /// let dir = std::env::temp_dir().join(format!("queue-open-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let spec = format!("sqlite:{}", dir.join("jobs.sqlite").display());
    /// let queue = llm_failover_queue::Queue::open(&spec).await?;
    /// assert_eq!(queue.stats(0).await?.ready, 0);
    ///
    /// let err = llm_failover_queue::Queue::open("jobs.sqlite").await.unwrap_err();
    /// assert_eq!(err.kind(), llm_failover::ErrorKind::Config);
    /// # drop(queue); std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `Config` for a spec of neither form, an empty path, or a backend not built in; then
    /// as the backend's constructor.
    pub async fn open(spec: &str) -> Result<Queue> {
        if let Some(path) = spec.strip_prefix("sqlite:") {
            if path.is_empty() {
                return Err(spec_error(spec, "the path after sqlite: is empty"));
            }
            return Queue::sqlite_spec(path).await;
        }
        if spec.starts_with("postgres://")
            || spec.starts_with("postgresql://")
            || starts_with_key(spec)
        {
            return Queue::postgres_spec(spec).await;
        }
        Err(spec_error(spec, "it names no backend"))
    }

    #[cfg(feature = "sqlite")]
    async fn sqlite_spec(path: &str) -> Result<Queue> {
        Queue::sqlite(path).await
    }

    #[cfg(not(feature = "sqlite"))]
    async fn sqlite_spec(_: &str) -> Result<Queue> {
        Err(not_built("sqlite:", "sqlite"))
    }

    #[cfg(feature = "postgres")]
    async fn postgres_spec(url: &str) -> Result<Queue> {
        Queue::postgres(url).await
    }

    #[cfg(not(feature = "postgres"))]
    async fn postgres_spec(_: &str) -> Result<Queue> {
        Err(not_built("postgres://", "postgres"))
    }

    /// Opens (creating if need be) the queue in the SQLite file at `path` and brings its
    /// schema up to date.
    ///
    /// Each `Queue` on a file is one connection; clones share it. SQLite lets one connection
    /// write at a time, so more connections in one process add no write throughput: open one
    /// per process. The file is in WAL mode (readers never block the writer); every write is
    /// a `BEGIN IMMEDIATE` transaction and waits up to 5 s for another process's write lock
    /// (a [`Worker`](super::Worker) tries again after that, within its database patience).
    /// Several processes on one host may share the file. Calls run on tokio's blocking pool.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
    /// let dir = std::env::temp_dir().join(format!("queue-sqlite-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let queue = llm_failover_queue::Queue::sqlite(dir.join("jobs.sqlite")).await?;
    /// assert_eq!(queue.stats(0).await?.ready, 0);
    /// # drop(queue); std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `Io` when the file cannot be opened or created, is not an SQLite database (or is
    /// corrupt), or stays locked past the busy timeout; `Config` when its schema is newer than
    /// this build knows.
    #[cfg(feature = "sqlite")]
    pub async fn sqlite(path: impl AsRef<Path>) -> Result<Queue> {
        Ok(Queue::from_backend(Backend::Sqlite(
            SqliteQueue::open(path).await?,
        )))
    }

    /// A queue in memory, gone with its last clone: for tests and examples.
    ///
    /// # Examples
    ///
    /// ```
    /// let queue = llm_failover_queue::Queue::sqlite_in_memory()?;
    /// # Ok::<(), llm_failover::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// `Io` if SQLite cannot allocate the database.
    #[cfg(feature = "sqlite")]
    pub fn sqlite_in_memory() -> Result<Queue> {
        Ok(Queue::from_backend(Backend::Sqlite(
            SqliteQueue::open_in_memory()?,
        )))
    }

    /// Connects to the PostgreSQL database `url` names and brings its schema up to date.
    ///
    /// `url` is a libpq connection string: a URL
    /// (`postgres://user[:password]@host[:port]/database`, `?option=…&…`) or `key=value`
    /// pairs (`host=/run/postgresql user=jobs dbname=jobs`), with the options tokio-postgres
    /// reads and libpq's TLS options. Without a `connect_timeout`, connecting gives up after
    /// 10 s. Errors and `Debug` name the database as `host:port/database`, never with the
    /// password.
    ///
    /// TLS (rustls) is as libpq's `sslmode` says: `disable`; `prefer` (the default: TLS when
    /// the server offers it); `require` (TLS or no connection); `verify-ca` (and the server's
    /// certificate chains to a CA of `sslrootcert`); `verify-full` (and it is for the host
    /// connected to). `sslrootcert=PATH` names a PEM file of CAs, and makes `prefer` and
    /// `require` check the chain too; `sslrootcert=system` is the platform's CAs, with
    /// `verify-full` only. `sslcert=PATH` and `sslkey=PATH` give a client certificate. No
    /// file is read that the string does not name. A handshake that fails is an `Io` error
    /// naming the database and why; it never goes on in plain text.
    ///
    /// Clones share 4 connections ([`postgres_with`](Self::postgres_with) for another
    /// number), taken in turn; each carries several operations at once, and one found closed
    /// (the server restarted) is opened again on the next call that falls to it. Every
    /// operation is one statement: a claim runs the schema's claim function, which takes jobs
    /// `FOR UPDATE SKIP LOCKED`, so claimers on every host never share a job or wait for each
    /// other. Give the tables (`jobs`, `tenant_cursor`) a database or schema of their own.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
    /// let queue = llm_failover_queue::Queue::postgres("postgres://jobs@127.0.0.1:5432/jobs").await?;
    /// assert_eq!(queue.stats(0).await?.ready, 0);
    /// // A managed server, its certificate checked against the provider's CA file:
    /// let queue = llm_failover_queue::Queue::postgres(
    ///     "postgres://jobs@db.example.com/jobs?sslmode=verify-full&sslrootcert=/etc/ssl/rds-ca.pem",
    /// )
    /// .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `Config` when `url` does not parse, its TLS options are not libpq's or contradict each
    /// other, a file they name cannot be read or holds no usable certificate or key, or the
    /// database's schema is newer than this build knows; `Io` when the server cannot be
    /// reached or refuses (TLS, its certificate, the login, the migration).
    #[cfg(feature = "postgres")]
    pub async fn postgres(url: &str) -> Result<Queue> {
        Ok(Queue::from_backend(Backend::Postgres(
            PostgresQueue::connect(url).await?,
        )))
    }

    /// As [`postgres`](Self::postgres), keeping `connections` connections (at least 1).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
    /// let queue = llm_failover_queue::Queue::postgres_with("postgres://jobs@127.0.0.1/jobs", 8).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`postgres`](Self::postgres).
    #[cfg(feature = "postgres")]
    pub async fn postgres_with(url: &str, connections: usize) -> Result<Queue> {
        Ok(Queue::from_backend(Backend::Postgres(
            PostgresQueue::connect_with(url, connections).await?,
        )))
    }

    fn from_backend(backend: Backend) -> Queue {
        Queue { backend }
    }

    /// Where the queue is, as messages name it: the SQLite file's path as given (or
    /// `:memory:`), or a PostgreSQL database's `host:port/database`. Never a user or password:
    /// this is what to print of a connection string.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(llm_failover_queue::Queue::sqlite_in_memory()?.location(), ":memory:");
    /// # Ok::<(), llm_failover::Error>(())
    /// ```
    pub fn location(&self) -> &str {
        on_backend!(self, q => q.location())
    }

    /// Which backend: `"sqlite"` or `"postgres"`.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(llm_failover_queue::Queue::sqlite_in_memory()?.backend(), "sqlite");
    /// # Ok::<(), llm_failover::Error>(())
    /// ```
    pub fn backend(&self) -> &'static str {
        backend_name(&self.backend)
    }

    /// Adds `job` unless a job with its id is already queued (in any state); `true` when it
    /// was new. `now_ms` is recorded as its creation time.
    ///
    /// # Examples
    ///
    /// ```
    /// # use llm_failover_queue::{NewJob, Queue};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
    /// let queue = Queue::sqlite_in_memory()?;
    /// assert!(queue.enqueue(NewJob::new("a", "chat", "{}"), 0).await?);
    /// assert!(!queue.enqueue(NewJob::new("a", "chat", r#"{"other":1}"#), 5).await?); // kept as it was
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `Config` when the id, kind or tenant is empty or the payload is not JSON; `Io` when
    /// the database fails.
    pub async fn enqueue(&self, job: NewJob, now_ms: i64) -> Result<bool> {
        Ok(self.enqueue_all(vec![job], now_ms).await? == 1)
    }

    /// Adds every job in `jobs` whose id is not yet queued, in one transaction; returns how
    /// many were new. Nothing is added when one of them is invalid.
    ///
    /// # Examples
    ///
    /// ```
    /// # use llm_failover_queue::{NewJob, Queue};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
    /// let queue = Queue::sqlite_in_memory()?;
    /// let jobs = (0..3).map(|i| NewJob::new(format!("line-{i}"), "chat", "{}")).collect();
    /// assert_eq!(queue.enqueue_all(jobs, 0).await?, 3);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`enqueue`](Self::enqueue).
    pub async fn enqueue_all(&self, jobs: Vec<NewJob>, now_ms: i64) -> Result<u64> {
        for job in &jobs {
            job.validate()?;
        }
        on_backend!(self, q => q.enqueue_all(jobs, now_ms).await)
    }

    /// Claims the next eligible job for `worker`, leased for `lease` from `now_ms`.
    ///
    /// Eligible means `ready` with `eligible_at <= now_ms`. Every eligible interactive job goes
    /// before any bulk one; within a lane, tenants that have eligible work take turns (the
    /// lane's tenant cursor moves to the tenant served), and within a tenant the job eligible
    /// longest goes first. The claim sets `running`, the lease and `attempt + 1` in one
    /// transaction, so every claim is a unique `(id, attempt)`. `None` when nothing is
    /// eligible.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use llm_failover_queue::{NewJob, Queue};
    /// # use llm_failover::admission::Priority;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
    /// let queue = Queue::sqlite_in_memory()?;
    /// queue.enqueue(NewJob::new("bulk-1", "chat", "{}"), 0).await?;
    /// queue.enqueue(NewJob::new("now-1", "chat", "{}").with_priority(Priority::Interactive), 0).await?;
    /// let lease = Duration::from_secs(30);
    /// assert_eq!(queue.claim("w", lease, 0).await?.unwrap().id, "now-1");
    /// assert_eq!(queue.claim("w", lease, 0).await?.unwrap().id, "bulk-1");
    /// assert!(queue.claim("w", lease, 0).await?.is_none());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `Io` when the database fails.
    pub async fn claim(&self, worker: &str, lease: Duration, now_ms: i64) -> Result<Option<Job>> {
        Ok(self.claim_many(worker, 1, lease, now_ms).await?.pop())
    }

    /// Up to `max` claims in one transaction, each chosen as [`claim`](Self::claim) would
    /// choose it after the ones before: interactive first, tenants in turn. Fewer (or none)
    /// when fewer are eligible. A worker that runs several jobs at once claims them together,
    /// one write instead of `max`.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use llm_failover_queue::{NewJob, Queue};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
    /// let queue = Queue::sqlite_in_memory()?;
    /// for (id, tenant) in [("a1", "a"), ("a2", "a"), ("b1", "b")] {
    ///     queue.enqueue(NewJob::new(id, "chat", "{}").with_tenant(tenant), 0).await?;
    /// }
    /// let jobs = queue.claim_many("w", 8, Duration::from_secs(30), 0).await?;
    /// let ids: Vec<_> = jobs.iter().map(|j| j.id.as_str()).collect();
    /// assert_eq!(ids, ["a1", "b1", "a2"]); // tenants take turns
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `Io` when the database fails.
    pub async fn claim_many(
        &self,
        worker: &str,
        max: usize,
        lease: Duration,
        now_ms: i64,
    ) -> Result<Vec<Job>> {
        on_backend!(self, q => q.claim_many(worker, max, lease, now_ms).await)
    }

    /// Jobs not yet settled (`ready` or `running`), by kind, in the order of the kinds'
    /// names: how many chat items wait, how many remote batches are being created or
    /// polled (`bulk-create`, `bulk-poll`).
    ///
    /// # Examples
    ///
    /// ```
    /// # use llm_failover_queue::{NewJob, Queue};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
    /// let queue = Queue::sqlite_in_memory()?;
    /// queue.enqueue(NewJob::new("a", "chat", "{}"), 0).await?;
    /// queue.enqueue(NewJob::new("b", "chat", "{}"), 0).await?;
    /// queue.enqueue(NewJob::new("c", "bulk-poll", "{}"), 0).await?;
    /// let kinds = queue.unsettled_by_kind().await?;
    /// assert_eq!(kinds, [("bulk-poll".to_owned(), 1), ("chat".to_owned(), 2)]);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `Io` when the database fails.
    pub async fn unsettled_by_kind(&self) -> Result<Vec<(String, u64)>> {
        on_backend!(self, q => q.unsettled_by_kind().await)
    }

    /// The jobs of `kind` not yet settled (`ready` or `running`), in the order they were
    /// enqueued: the remote batches still being polled, for instance.
    ///
    /// # Errors
    ///
    /// `Io` when the database fails.
    pub async fn unsettled_of_kind(&self, kind: &str) -> Result<Vec<Job>> {
        on_backend!(self, q => q.unsettled_of_kind(kind).await)
    }

    /// Claims the jobs named by `ids` that are `ready`, whenever they are eligible (a job
    /// snoozed far ahead is claimed too), outside the admission order: for work that holds
    /// jobs aside — a provider's remote batch holds its items snoozed while it runs, and
    /// claims them back to settle them when it ends. A job not `ready` (running elsewhere,
    /// done, dead, unknown) is left as it is and not returned; each one claimed is a new
    /// `(id, attempt)`.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use llm_failover_queue::{NewJob, Queue};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
    /// let queue = Queue::sqlite_in_memory()?;
    /// for id in ["a", "b", "c"] {
    ///     queue.enqueue(NewJob::new(id, "chat", "{}"), 0).await?;
    /// }
    /// let held = queue.claim("w", Duration::from_secs(30), 0).await?.unwrap(); // "a"
    /// queue.snooze(&held.id, held.attempt, 86_400_000).await?; // set aside for a day
    /// let got = queue
    ///     .claim_ids(&["a".into(), "c".into(), "zz".into()], "w", Duration::from_secs(30), 1_000)
    ///     .await?;
    /// let ids: Vec<_> = got.iter().map(|j| (j.id.as_str(), j.attempt)).collect();
    /// assert_eq!(ids, [("a", 2), ("c", 1)]);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `Io` when the database fails.
    pub async fn claim_ids(
        &self,
        ids: &[String],
        worker: &str,
        lease: Duration,
        now_ms: i64,
    ) -> Result<Vec<Job>> {
        on_backend!(self, q => q.claim_ids(ids, worker, lease, now_ms).await)
    }

    /// Extends the lease of claim `(id, attempt)` to `now_ms + lease`, for a long upload or
    /// transcription. A lease that has expired but not yet been reaped can still be extended.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use llm_failover_queue::{NewJob, Fenced, Queue};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
    /// let queue = Queue::sqlite_in_memory()?;
    /// queue.enqueue(NewJob::new("a", "transcribe", "{}"), 0).await?;
    /// let job = queue.claim("w", Duration::from_secs(10), 0).await?.unwrap();
    /// let outcome = queue.heartbeat("a", job.attempt, Duration::from_secs(10), 8_000).await?;
    /// assert_eq!(outcome, Fenced::Applied);
    /// assert_eq!(queue.get("a").await?.unwrap().lease_until_ms, Some(18_000));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `Io` when the database fails.
    pub async fn heartbeat(
        &self,
        id: &str,
        attempt: u32,
        lease: Duration,
        now_ms: i64,
    ) -> Result<Fenced> {
        on_backend!(self, q => q.heartbeat(id, attempt, lease, now_ms).await)
    }

    /// Extends the lease of every claim in `claims` to `now_ms + lease`, in one write: a
    /// worker renews every job it holds at once, once per interval, however many it holds.
    /// Returns how many were extended (a claim that is no longer running, or is stale, is
    /// left as it is).
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use llm_failover_queue::{NewJob, Queue};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
    /// let queue = Queue::sqlite_in_memory()?;
    /// queue.enqueue_all(vec![NewJob::new("a", "chat", "{}"), NewJob::new("b", "chat", "{}")], 0).await?;
    /// let lease = Duration::from_secs(30);
    /// let claims: Vec<_> = queue.claim_many("w", 2, lease, 0).await?
    ///     .into_iter().map(|j| (j.id, j.attempt)).collect();
    /// let mut with_stale = claims.clone();
    /// with_stale.push(("a".into(), 7)); // not a's current claim
    /// assert_eq!(queue.heartbeat_all(with_stale, lease, 20_000).await?, 2);
    /// assert_eq!(queue.get("b").await?.unwrap().lease_until_ms, Some(50_000));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `Io` when the database fails.
    pub async fn heartbeat_all(
        &self,
        claims: Vec<(String, u32)>,
        lease: Duration,
        now_ms: i64,
    ) -> Result<u64> {
        if claims.is_empty() {
            return Ok(0);
        }
        on_backend!(self, q => q.heartbeat_all(claims, lease, now_ms).await)
    }

    /// Accepts `result` (JSON text) for claim `(id, attempt)`: the job is `done`. `Lost` when
    /// the claim is stale; then the result was not stored and must be discarded.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use llm_failover_queue::{JobState, NewJob, Fenced, Queue};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
    /// let queue = Queue::sqlite_in_memory()?;
    /// queue.enqueue(NewJob::new("a", "chat", "{}"), 0).await?;
    /// let job = queue.claim("w", Duration::from_secs(10), 0).await?.unwrap();
    /// assert_eq!(queue.complete("a", job.attempt, r#""ok""#).await?, Fenced::Applied);
    /// assert_eq!(queue.complete("a", job.attempt, r#""again""#).await?, Fenced::Lost);
    /// assert_eq!(queue.get("a").await?.unwrap().result.as_deref(), Some(r#""ok""#));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `Config` when `result` is not JSON; `Io` when the database fails.
    pub async fn complete(&self, id: &str, attempt: u32, result: &str) -> Result<Fenced> {
        let one = vec![(id.to_owned(), attempt, result.to_owned())];
        Ok(self.complete_all(one).await?.pop().unwrap_or(Fenced::Lost))
    }

    /// Completes every `(id, attempt, result)` in one transaction, each as
    /// [`complete`](Self::complete) would; the outcomes are in the same order. A worker
    /// finishing many short jobs settles them together, one write instead of many.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use llm_failover_queue::{NewJob, Fenced, Queue};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
    /// let queue = Queue::sqlite_in_memory()?;
    /// queue.enqueue_all(vec![NewJob::new("a", "chat", "{}"), NewJob::new("b", "chat", "{}")], 0).await?;
    /// let jobs = queue.claim_many("w", 2, Duration::from_secs(10), 0).await?;
    /// let results = jobs.iter().map(|j| (j.id.clone(), j.attempt, r#""ok""#.to_owned()));
    /// let mut results: Vec<_> = results.collect();
    /// results.push(("a".into(), 1, r#""twice""#.into())); // a is done by then
    /// let outcomes = queue.complete_all(results).await?;
    /// assert_eq!(outcomes, [Fenced::Applied, Fenced::Applied, Fenced::Lost]);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `Config` when a result is not JSON (nothing is written then); `Io` when the database fails.
    pub async fn complete_all(&self, results: Vec<(String, u32, String)>) -> Result<Vec<Fenced>> {
        for (id, _, result) in &results {
            check_json(result, || format!("result of job {id:?}"))?;
        }
        on_backend!(self, q => q.complete_all(results).await)
    }

    /// Puts claim `(id, attempt)` back to `ready`, eligible at `until_ms`, counting no
    /// failure: for a 429 or an open breaker, `until_ms` being the stated reset.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use llm_failover_queue::{NewJob, Fenced, Queue};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
    /// let queue = Queue::sqlite_in_memory()?;
    /// queue.enqueue(NewJob::new("a", "chat", "{}"), 0).await?;
    /// let job = queue.claim("w", Duration::from_secs(10), 0).await?.unwrap();
    /// assert_eq!(queue.snooze("a", job.attempt, 30_000).await?, Fenced::Applied);
    /// assert!(queue.claim("w", Duration::from_secs(10), 29_999).await?.is_none());
    /// let again = queue.claim("w", Duration::from_secs(10), 30_000).await?.unwrap();
    /// assert_eq!((again.attempt, again.failures), (2, 0));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `Io` when the database fails.
    pub async fn snooze(&self, id: &str, attempt: u32, until_ms: i64) -> Result<Fenced> {
        on_backend!(self, q => q.snooze(id, attempt, until_ms).await)
    }

    /// Counts a failure of claim `(id, attempt)`: back to `ready` after the policy's backoff,
    /// or `dead` (with `reason`) when it was the policy's last allowed failure.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use llm_failover_queue::{FailPolicy, Failed, JobState, NewJob, Queue};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
    /// let queue = Queue::sqlite_in_memory()?;
    /// let policy = FailPolicy::default().with_max_failures(2);
    /// queue.enqueue(NewJob::new("a", "chat", "{}"), 0).await?;
    /// let lease = Duration::from_secs(10);
    /// let job = queue.claim("w", lease, 0).await?.unwrap();
    /// assert_eq!(queue.fail("a", job.attempt, "503", 0, &policy).await?, Failed::Retry { eligible_at_ms: 1_000 });
    /// let job = queue.claim("w", lease, 1_000).await?.unwrap();
    /// assert_eq!(queue.fail("a", job.attempt, "503", 1_000, &policy).await?, Failed::Dead);
    /// assert_eq!(queue.get("a").await?.unwrap().state, JobState::Dead);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `Io` when the database fails.
    pub async fn fail(
        &self,
        id: &str,
        attempt: u32,
        reason: &str,
        now_ms: i64,
        policy: &FailPolicy,
    ) -> Result<Failed> {
        on_backend!(self, q => q.fail(id, attempt, reason, now_ms, policy).await)
    }

    /// Makes claim `(id, attempt)` `dead` at once with `reason`: for a failure that can only
    /// repeat (a terminal 4xx). Counts the failure.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use llm_failover_queue::{NewJob, Fenced, Queue};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
    /// let queue = Queue::sqlite_in_memory()?;
    /// queue.enqueue(NewJob::new("a", "chat", "{}"), 0).await?;
    /// let job = queue.claim("w", Duration::from_secs(10), 0).await?.unwrap();
    /// assert_eq!(queue.dead_now("a", job.attempt, "400 context_length_exceeded").await?, Fenced::Applied);
    /// assert_eq!(queue.dead_letters().await?[0].reason.as_deref(), Some("400 context_length_exceeded"));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `Io` when the database fails.
    pub async fn dead_now(&self, id: &str, attempt: u32, reason: &str) -> Result<Fenced> {
        on_backend!(self, q => q.dead_now(id, attempt, reason).await)
    }

    /// Sets claim `(id, attempt)` aside for a person: its `result` (JSON text; wrap a raw answer in a JSON string)
    /// failed its contract for `reason`. Not counted as done.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use llm_failover_queue::{JobState, NewJob, Fenced, Queue};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
    /// let queue = Queue::sqlite_in_memory()?;
    /// queue.enqueue(NewJob::new("a", "triage", "{}"), 0).await?;
    /// let job = queue.claim("w", Duration::from_secs(10), 0).await?.unwrap();
    /// let outcome = queue.review("a", job.attempt, r#"{"urgency":"banana"}"#, "urgency is not 1-5").await?;
    /// assert_eq!(outcome, Fenced::Applied);
    /// assert_eq!(queue.get("a").await?.unwrap().state, JobState::Review);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `Config` when `result` is not JSON; `Io` when the database fails.
    pub async fn review(
        &self,
        id: &str,
        attempt: u32,
        result: &str,
        reason: &str,
    ) -> Result<Fenced> {
        check_json(result, || format!("result of job {id:?}"))?;
        on_backend!(self, q => q.review(id, attempt, result, reason).await)
    }

    /// Puts every `running` job whose lease ended at or before `now_ms` back to `ready`
    /// (eligible at once, in its old place: it goes before the jobs queued after it), counting a
    /// failure; one whose count reaches the policy's limit is
    /// `dead` instead. The stale worker's later calls for that claim come back `Lost`.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use llm_failover_queue::{FailPolicy, NewJob, Queue};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
    /// let queue = Queue::sqlite_in_memory()?;
    /// queue.enqueue(NewJob::new("a", "chat", "{}"), 0).await?;
    /// queue.claim("w", Duration::from_secs(10), 0).await?.unwrap();
    /// assert_eq!(queue.reap(9_999, &FailPolicy::default()).await?.requeued, 0);
    /// assert_eq!(queue.reap(10_000, &FailPolicy::default()).await?.requeued, 1);
    /// assert_eq!(queue.get("a").await?.unwrap().failures, 1);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `Io` when the database fails.
    pub async fn reap(&self, now_ms: i64, policy: &FailPolicy) -> Result<Reaped> {
        on_backend!(self, q => q.reap(now_ms, policy).await)
    }

    /// Counts per state, and how long the oldest eligible `ready` job has waited at `now_ms`.
    ///
    /// # Examples
    ///
    /// See [`QueueStats`].
    ///
    /// # Errors
    ///
    /// `Io` when the database fails.
    pub async fn stats(&self, now_ms: i64) -> Result<QueueStats> {
        on_backend!(self, q => q.stats(now_ms).await)
    }

    /// The job with this id, in whatever state.
    ///
    /// # Examples
    ///
    /// ```
    /// # use llm_failover_queue::{JobState, NewJob, Queue};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
    /// let queue = Queue::sqlite_in_memory()?;
    /// queue.enqueue(NewJob::new("a", "chat", "{}"), 7).await?;
    /// let job = queue.get("a").await?.unwrap();
    /// assert_eq!((job.state, job.attempt, job.created_at_ms), (JobState::Ready, 0, 7));
    /// assert!(queue.get("b").await?.is_none());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `Io` when the database fails.
    pub async fn get(&self, id: &str) -> Result<Option<Job>> {
        on_backend!(self, q => q.get(id).await)
    }

    /// Every `dead` job, oldest first, with its reason.
    ///
    /// # Examples
    ///
    /// See [`dead_now`](Self::dead_now).
    ///
    /// # Errors
    ///
    /// `Io` when the database fails.
    pub async fn dead_letters(&self) -> Result<Vec<Job>> {
        on_backend!(self, q => q.dead_letters().await)
    }

    /// Puts a `dead` (or `review`) job back to `ready`, eligible at `now_ms`, with its
    /// failures, reason and result cleared; `false` when no such job is dead or in review. Its
    /// attempt count is kept, so the next claim is still a new `(id, attempt)`.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use llm_failover_queue::{JobState, NewJob, Queue};
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
    /// let queue = Queue::sqlite_in_memory()?;
    /// queue.enqueue(NewJob::new("a", "chat", "{}"), 0).await?;
    /// let job = queue.claim("w", Duration::from_secs(10), 0).await?.unwrap();
    /// let _ = queue.dead_now("a", job.attempt, "401").await?;
    /// assert!(queue.requeue("a", 5_000).await?);
    /// assert!(!queue.requeue("a", 5_000).await?); // already ready
    /// assert_eq!(queue.claim("w", Duration::from_secs(10), 5_000).await?.unwrap().attempt, 2);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `Io` when the database fails.
    pub async fn requeue(&self, id: &str, now_ms: i64) -> Result<bool> {
        on_backend!(self, q => q.requeue(id, now_ms).await)
    }
}

fn backend_name(backend: &Backend) -> &'static str {
    match backend {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite(_) => "sqlite",
        #[cfg(feature = "postgres")]
        Backend::Postgres(_) => "postgres",
    }
}

fn spec_error(spec: &str, why: &str) -> Error {
    // A spec may carry a password: name only its scheme, when it has one.
    let scheme = spec.split_once(':').map(|(scheme, _)| scheme).filter(|s| {
        s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    });
    let shown = match scheme {
        Some(scheme) => format!(" {scheme:?}…"),
        None => String::new(),
    };
    Error::new(
        ErrorKind::Config,
        format!("job queue{shown}: {why}; give {SPEC_FORMS}"),
    )
}

/// Whether `spec` starts as libpq's `key=value` form does: a key of letters and `_`, then `=`.
fn starts_with_key(spec: &str) -> bool {
    let spec = spec.trim_start();
    let key = spec
        .find(|c: char| !(c.is_ascii_alphabetic() || c == '_'))
        .map_or(spec, |end| &spec[..end]);
    !key.is_empty() && spec[key.len()..].trim_start().starts_with('=')
}

#[cfg(not(all(feature = "sqlite", feature = "postgres")))]
fn not_built(scheme: &str, feature: &str) -> Error {
    Error::new(
        ErrorKind::Config,
        format!(
            "a {scheme} job queue needs llm-failover built with the `{feature}` feature \
             (features = [\"{feature}\"] in Cargo.toml)"
        ),
    )
}

/// Runs the queue operation `op` (given the wall time of each try) until it succeeds, while
/// its database fails — an `Io` error: locked past the busy timeout, a connection lost, a
/// server restarting — for no longer than `patience`, waiting between tries (0.1 s doubling
/// to 5 s) and telling `on_retry` of each failure and the wait before the next try. Other
/// errors, and the last one after the patience, are returned.
pub(crate) async fn patiently<T, F, Fut>(
    clock: &dyn Clock,
    patience: Duration,
    op: F,
    mut on_retry: impl FnMut(&Error, Duration),
) -> Result<T>
where
    F: Fn(i64) -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let started = clock.now();
    let mut wait = Duration::from_millis(100);
    loop {
        let err = match op(wall_ms(clock.wall())).await {
            Ok(value) => return Ok(value),
            Err(e) if e.kind() == ErrorKind::Io => e,
            Err(e) => return Err(e),
        };
        if clock.now().saturating_duration_since(started) >= patience {
            return Err(err);
        }
        on_retry(&err, wait);
        clock.sleep_until(clock.now() + wait).await;
        wait = (wait * 2).min(Duration::from_secs(5));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;
    use llm_failover_core::clock::ManualClock;

    #[test]
    fn a_spec_is_read_as_a_backend_and_never_quoted_past_its_scheme() {
        // (spec, whether it is libpq's key=value form)
        let cases = [
            ("host=db user=u password=s3cret", true),
            ("  dbname = jobs", true),
            ("sslmode=require host=db", true),
            ("jobs.sqlite", false),
            ("=x", false),
            ("my-db=1", false),
            ("postgres://u:s3cret@h/db", false),
        ];
        for (spec, pairs) in cases {
            assert_eq!(starts_with_key(spec), pairs, "{spec}");
        }
        for (spec, shown) in [
            ("postgress://u:s3cret@h/db", "job queue \"postgress\"…: "),
            ("host password=s3cret:x", "job queue: "),
            ("s3cret", "job queue: "),
        ] {
            let message = spec_error(spec, "it names no backend").to_string();
            assert!(message.contains(shown), "{message}");
            assert!(!message.contains("s3cret"), "{message}");
        }
    }

    fn locked() -> Error {
        Error::new(ErrorKind::Io, "database is locked")
    }

    #[tokio::test]
    async fn a_failing_database_is_tried_again_for_the_patience_then_its_error_returned() {
        // Locked for four tries, then free: the fifth answers, after 0.1 + 0.2 + 0.4 + 0.8 s.
        let clock = ManualClock::new();
        let tries = AtomicU32::new(0);
        let mut told = Vec::new();
        let op = |_now| {
            let n = tries.fetch_add(1, Ordering::SeqCst);
            async move { if n < 4 { Err(locked()) } else { Ok(n) } }
        };
        let patience = Duration::from_secs(60);
        let got = patiently(&clock, patience, op, |_, wait| told.push(wait)).await;
        assert_eq!(got.unwrap(), 4);
        let ms = Duration::from_millis;
        assert_eq!(clock.sleeps(), [ms(100), ms(200), ms(400), ms(800)]);
        assert_eq!(told, clock.sleeps());

        // Locked for good: the waits double up to 5 s, and past the patience its error comes.
        let clock = ManualClock::new();
        let op = |_now| async { Err::<(), _>(locked()) };
        let err = patiently(&clock, Duration::from_secs(12), op, |_, _| {})
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Io);
        let waits = clock.sleeps();
        assert_eq!(
            waits,
            [
                ms(100),
                ms(200),
                ms(400),
                ms(800),
                ms(1600),
                ms(3200),
                ms(5000),
                ms(5000)
            ]
        );
        assert!(clock.elapsed() >= Duration::from_secs(12));

        // Any other error is returned at once.
        let clock = ManualClock::new();
        let op = |_now| async { Err::<(), _>(Error::new(ErrorKind::Config, "bad payload")) };
        let err = patiently(&clock, patience, op, |_, _| {})
            .await
            .unwrap_err();
        assert_eq!((err.kind(), clock.sleeps().len()), (ErrorKind::Config, 0));
    }
}
