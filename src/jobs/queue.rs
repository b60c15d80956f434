//! [`Queue`]: the one queue type, on whichever backend a job store names.

#[cfg(feature = "sqlite")]
use std::path::Path;
use std::time::Duration;

use super::job::{Failed, Job, NewJob, Outcome, QueueStats, Reaped};
use super::policy::FailPolicy;
#[cfg(feature = "postgres")]
use super::postgres::PostgresQueue;
#[cfg(feature = "sqlite")]
use super::sqlite::SqliteQueue;
use crate::error::{Error, ErrorKind, Result};

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
/// use llm_failover::jobs::{NewJob, Outcome, Queue};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
/// let queue = Queue::sqlite_in_memory()?;
/// queue.enqueue(NewJob::new("line-1", "chat", r#"{"prompt":"hi"}"#), 0).await?;
/// let job = queue.claim("worker-1", Duration::from_secs(60), 0).await?.unwrap();
/// assert_eq!(queue.complete(&job.id, job.attempt, r#""hello""#).await?, Outcome::Applied);
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
const SPEC_FORMS: &str = "sqlite:PATH or postgres://user@host:port/database";

impl Queue {
    /// Opens the queue a spec names: `sqlite:PATH` (the file is created if need be) or
    /// `postgres://…` / `postgresql://…` (a connection URL; the schema is created if need
    /// be). A backend this build was compiled without is a `Config` error naming the feature.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
    /// let dir = std::env::temp_dir().join(format!("queue-open-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let spec = format!("sqlite:{}", dir.join("jobs.sqlite").display());
    /// let queue = llm_failover::jobs::Queue::open(&spec).await?;
    /// assert_eq!(queue.stats(0).await?.ready, 0);
    ///
    /// let err = llm_failover::jobs::Queue::open("jobs.sqlite").await.unwrap_err();
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
        if spec.starts_with("postgres://") || spec.starts_with("postgresql://") {
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

    /// The queue in the SQLite file at `path` (see [`SqliteQueue::open`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
    /// let dir = std::env::temp_dir().join(format!("queue-sqlite-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let queue = llm_failover::jobs::Queue::sqlite(dir.join("jobs.sqlite")).await?;
    /// # drop(queue); std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`SqliteQueue::open`].
    #[cfg(feature = "sqlite")]
    pub async fn sqlite(path: impl AsRef<Path>) -> Result<Queue> {
        Ok(Queue::from(SqliteQueue::open(path).await?))
    }

    /// A queue in memory, gone with its last clone: for tests and examples.
    ///
    /// # Examples
    ///
    /// ```
    /// let queue = llm_failover::jobs::Queue::sqlite_in_memory()?;
    /// # Ok::<(), llm_failover::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`SqliteQueue::open_in_memory`].
    #[cfg(feature = "sqlite")]
    pub fn sqlite_in_memory() -> Result<Queue> {
        Ok(Queue::from(SqliteQueue::open_in_memory()?))
    }

    /// The queue in the PostgreSQL database at `url` (see [`PostgresQueue::connect`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
    /// let queue = llm_failover::jobs::Queue::postgres("postgres://jobs@127.0.0.1:5432/jobs").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`PostgresQueue::connect`].
    #[cfg(feature = "postgres")]
    pub async fn postgres(url: &str) -> Result<Queue> {
        Ok(Queue::from(PostgresQueue::connect(url).await?))
    }

    /// Which backend: `"sqlite"` or `"postgres"`.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(llm_failover::jobs::Queue::sqlite_in_memory()?.backend(), "sqlite");
    /// # Ok::<(), llm_failover::Error>(())
    /// ```
    pub fn backend(&self) -> &'static str {
        backend_name(&self.backend)
    }

    /// See [`SqliteQueue::enqueue`].
    ///
    /// # Errors
    ///
    /// `Config` for an invalid job; `Io` when the database fails.
    pub async fn enqueue(&self, job: NewJob, now_ms: i64) -> Result<bool> {
        on_backend!(self, q => q.enqueue(job, now_ms).await)
    }

    /// See [`SqliteQueue::enqueue_all`].
    ///
    /// # Errors
    ///
    /// `Config` for an invalid job (nothing is added); `Io` when the database fails.
    pub async fn enqueue_all(&self, jobs: Vec<NewJob>, now_ms: i64) -> Result<u64> {
        on_backend!(self, q => q.enqueue_all(jobs, now_ms).await)
    }

    /// See [`SqliteQueue::claim`].
    ///
    /// # Errors
    ///
    /// `Io` when the database fails.
    pub async fn claim(&self, worker: &str, lease: Duration, now_ms: i64) -> Result<Option<Job>> {
        on_backend!(self, q => q.claim(worker, lease, now_ms).await)
    }

    /// See [`SqliteQueue::claim_many`].
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

    /// See [`SqliteQueue::heartbeat`].
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
    ) -> Result<Outcome> {
        on_backend!(self, q => q.heartbeat(id, attempt, lease, now_ms).await)
    }

    /// See [`SqliteQueue::complete`].
    ///
    /// # Errors
    ///
    /// `Config` when `result` is not JSON; `Io` when the database fails.
    pub async fn complete(&self, id: &str, attempt: u32, result: &str) -> Result<Outcome> {
        on_backend!(self, q => q.complete(id, attempt, result).await)
    }

    /// See [`SqliteQueue::complete_all`].
    ///
    /// # Errors
    ///
    /// `Config` when a result is not JSON (nothing is written); `Io` when the database fails.
    pub async fn complete_all(&self, results: Vec<(String, u32, String)>) -> Result<Vec<Outcome>> {
        on_backend!(self, q => q.complete_all(results).await)
    }

    /// See [`SqliteQueue::snooze`].
    ///
    /// # Errors
    ///
    /// `Io` when the database fails.
    pub async fn snooze(&self, id: &str, attempt: u32, until_ms: i64) -> Result<Outcome> {
        on_backend!(self, q => q.snooze(id, attempt, until_ms).await)
    }

    /// See [`SqliteQueue::fail`].
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

    /// See [`SqliteQueue::dead_now`].
    ///
    /// # Errors
    ///
    /// `Io` when the database fails.
    pub async fn dead_now(&self, id: &str, attempt: u32, reason: &str) -> Result<Outcome> {
        on_backend!(self, q => q.dead_now(id, attempt, reason).await)
    }

    /// See [`SqliteQueue::review`].
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
    ) -> Result<Outcome> {
        on_backend!(self, q => q.review(id, attempt, result, reason).await)
    }

    /// See [`SqliteQueue::reap`].
    ///
    /// # Errors
    ///
    /// `Io` when the database fails.
    pub async fn reap(&self, now_ms: i64, policy: &FailPolicy) -> Result<Reaped> {
        on_backend!(self, q => q.reap(now_ms, policy).await)
    }

    /// See [`SqliteQueue::stats`].
    ///
    /// # Errors
    ///
    /// `Io` when the database fails.
    pub async fn stats(&self, now_ms: i64) -> Result<QueueStats> {
        on_backend!(self, q => q.stats(now_ms).await)
    }

    /// See [`SqliteQueue::get`].
    ///
    /// # Errors
    ///
    /// `Io` when the database fails.
    pub async fn get(&self, id: &str) -> Result<Option<Job>> {
        on_backend!(self, q => q.get(id).await)
    }

    /// See [`SqliteQueue::dead_letters`].
    ///
    /// # Errors
    ///
    /// `Io` when the database fails.
    pub async fn dead_letters(&self) -> Result<Vec<Job>> {
        on_backend!(self, q => q.dead_letters().await)
    }

    /// See [`SqliteQueue::requeue`].
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

#[cfg(feature = "sqlite")]
impl From<SqliteQueue> for Queue {
    fn from(q: SqliteQueue) -> Queue {
        Queue {
            backend: Backend::Sqlite(q),
        }
    }
}

#[cfg(feature = "postgres")]
impl From<PostgresQueue> for Queue {
    fn from(q: PostgresQueue) -> Queue {
        Queue {
            backend: Backend::Postgres(q),
        }
    }
}

fn spec_error(spec: &str, why: &str) -> Error {
    // A URL may carry a password: name only what is before its first ':'.
    let shown = spec.split(':').next().unwrap_or("");
    Error::new(
        ErrorKind::Config,
        format!("job queue {shown:?}…: {why}; give {SPEC_FORMS}"),
    )
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
