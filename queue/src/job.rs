//! The job, its states and what each queue operation answers.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use llm_failover_core::admission::{Priority, Tenant};
use llm_failover_core::{Error, ErrorKind, Result};

/// Wall-clock milliseconds since the Unix epoch: the one time unit the queue stores.
///
/// The queue never reads a clock; every operation takes `now_ms` from the caller, usually
/// `wall_ms(clock.wall())` with the [`Clock`](llm_failover_core::clock::Clock) the rest of the SDK uses.
/// A time before the epoch is 0; one past `i64::MAX` ms is `i64::MAX`.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use llm_failover::clock::{Clock, ManualClock};
/// use llm_failover_queue::wall_ms;
///
/// assert_eq!(wall_ms(SystemTime::UNIX_EPOCH + Duration::from_millis(1_500)), 1_500);
/// let clock = ManualClock::new();
/// assert!(wall_ms(clock.wall()) > 0);
/// ```
pub fn wall_ms(at: SystemTime) -> i64 {
    llm_failover_core::wing::wall_ms(at)
}

/// A duration in whole milliseconds, saturating (for leases and backoffs).
pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Where a job is in its life; see the [module docs](crate) for the transitions.
///
/// # Examples
///
/// ```
/// use llm_failover_queue::JobState;
///
/// assert_eq!("review".parse::<JobState>().unwrap(), JobState::Review);
/// assert!(JobState::Done.is_terminal());
/// assert!(!JobState::Running.is_terminal());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JobState {
    /// Waiting to be claimed once `eligible_at` has passed.
    Ready,
    /// Claimed by a worker holding a lease until `lease_until`.
    Running,
    /// Completed: its result was accepted.
    Done,
    /// Given up on, with a reason; [`requeue`](crate::Queue::requeue) revives it.
    Dead,
    /// A result arrived but did not pass its contract; waits for a person.
    Review,
}

impl JobState {
    /// The name stored in the database.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(llm_failover_queue::JobState::Ready.as_str(), "ready");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Ready => "ready",
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Dead => "dead",
            JobState::Review => "review",
        }
    }

    /// Whether no worker will touch the job again by itself (`done`, `dead`, `review`).
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(llm_failover_queue::JobState::Dead.is_terminal());
    /// ```
    pub fn is_terminal(self) -> bool {
        matches!(self, JobState::Done | JobState::Dead | JobState::Review)
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for JobState {
    type Err = Error;

    fn from_str(s: &str) -> Result<JobState> {
        Ok(match s {
            "ready" => JobState::Ready,
            "running" => JobState::Running,
            "done" => JobState::Done,
            "dead" => JobState::Dead,
            "review" => JobState::Review,
            other => {
                return Err(Error::new(
                    ErrorKind::Config,
                    format!("unknown job state {other:?}"),
                ));
            }
        })
    }
}

/// A job to enqueue: the caller's id, a kind, a tenant, a priority and a JSON payload.
///
/// The id is the caller's (a hash of the input line, a recording's path and hash): enqueueing
/// the same id again changes nothing, so several processes may enqueue the same input. The
/// payload is JSON text describing the work. It is stored as written and shown by
/// [`dead_letters`](crate::Queue::dead_letters): never put a key or other secret
/// in it, and reference audio by path and hash rather than copying it in.
///
/// # Examples
///
/// ```
/// use llm_failover::admission::Priority;
/// use llm_failover_queue::NewJob;
///
/// let job = NewJob::new("line-17", "chat", r#"{"prompt":"Why is the sky blue?"}"#)
///     .with_tenant("acme")
///     .with_priority(Priority::Interactive);
/// assert_eq!(job.tenant, "acme");
/// assert_eq!(job.eligible_at_ms, None); // eligible once enqueued
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NewJob {
    /// The caller's id, unique in the queue.
    pub id: String,
    /// What sort of work (`chat`, `transcribe`, …): the worker dispatches on it.
    pub kind: String,
    /// Whose work it is: tenants take turns ([admission order](llm_failover_core::admission)). Default
    /// `default`.
    pub tenant: Tenant,
    /// Interactive or bulk: every eligible interactive job is claimed before any bulk one.
    /// Default bulk.
    pub priority: Priority,
    /// JSON text.
    pub payload: String,
    /// Not claimed before this wall-clock time (ms). Default `None`: from the enqueue's
    /// `now_ms` (so the queue's oldest-eligible age counts from then).
    pub eligible_at_ms: Option<i64>,
}

impl NewJob {
    /// A bulk job for the `default` tenant, eligible once enqueued.
    ///
    /// # Examples
    ///
    /// ```
    /// let job = llm_failover_queue::NewJob::new("a", "chat", "{}");
    /// assert_eq!(job.tenant, "default");
    /// ```
    pub fn new(id: impl Into<String>, kind: impl Into<String>, payload: impl Into<String>) -> Self {
        NewJob {
            id: id.into(),
            kind: kind.into(),
            tenant: Tenant::default(),
            priority: Priority::Bulk,
            payload: payload.into(),
            eligible_at_ms: None,
        }
    }

    /// The same job for `tenant`.
    ///
    /// # Examples
    ///
    /// ```
    /// let job = llm_failover_queue::NewJob::new("a", "chat", "{}").with_tenant("acme");
    /// assert_eq!(job.tenant, "acme");
    /// ```
    #[must_use]
    pub fn with_tenant(mut self, tenant: impl Into<Tenant>) -> Self {
        self.tenant = tenant.into();
        self
    }

    /// The same job with `priority`.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::admission::Priority;
    /// use llm_failover_queue::NewJob;
    /// let job = NewJob::new("a", "chat", "{}").with_priority(Priority::Interactive);
    /// assert_eq!(job.priority, Priority::Interactive);
    /// ```
    #[must_use]
    pub fn with_priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }

    /// The same job, not claimed before `at_ms` (wall-clock ms).
    ///
    /// # Examples
    ///
    /// ```
    /// let job = llm_failover_queue::NewJob::new("a", "chat", "{}").with_eligible_at(5_000);
    /// assert_eq!(job.eligible_at_ms, Some(5_000));
    /// ```
    #[must_use]
    pub fn with_eligible_at(mut self, at_ms: i64) -> Self {
        self.eligible_at_ms = Some(at_ms);
        self
    }

    /// Checks what the database cannot: non-empty id, kind and tenant, a JSON payload.
    pub(crate) fn validate(&self) -> Result<()> {
        for (name, value) in [
            ("id", self.id.as_str()),
            ("kind", self.kind.as_str()),
            ("tenant", self.tenant.as_str()),
        ] {
            if value.is_empty() {
                return Err(Error::new(
                    ErrorKind::Config,
                    format!("job {name} must not be empty"),
                ));
            }
        }
        check_json(&self.payload, || format!("payload of job {:?}", self.id))
    }
}

/// `Ok` when a database at schema `version` may be used by this build, which knows
/// migrations up to `known`; a Config error naming `db` otherwise (a newer schema: an older
/// binary must not write rows whose meaning it does not know; `instead` names what to use).
pub(crate) fn check_schema_version(
    db: &str,
    known: i64,
    instead: &str,
    version: i64,
) -> Result<()> {
    if version > known {
        return Err(Error::new(
            ErrorKind::Config,
            format!(
                "jobs database {db} has schema version {version}, newer than this build of \
                 llm-failover knows ({known}): upgrade llm-failover, or use another {instead}"
            ),
        ));
    }
    if version < 0 {
        return Err(Error::new(
            ErrorKind::Config,
            format!("jobs database {db} has schema version {version}, which no build wrote"),
        ));
    }
    Ok(())
}

/// `Ok` when `text` is one JSON value; a Config error naming `what` otherwise.
pub(crate) fn check_json(text: &str, what: impl FnOnce() -> String) -> Result<()> {
    serde_json::from_str::<serde::de::IgnoredAny>(text)
        .map(|_| ())
        .map_err(|e| {
            Error::new(ErrorKind::Config, format!("{} is not JSON: {e}", what())).with_source(e)
        })
}

/// A job as stored: what was enqueued plus where it is now.
///
/// [`Queue::claim`](crate::Queue::claim) returns one in state
/// [`Running`](JobState::Running); its `(id, attempt)` is the fencing token every later call
/// about this claim passes back.
///
/// # Examples
///
/// ```
/// use llm_failover_queue::{JobState, NewJob, Queue};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
/// let queue = Queue::sqlite_in_memory()?;
/// queue.enqueue(NewJob::new("a", "chat", "{}"), 0).await?;
/// let job = queue.claim("worker-1", std::time::Duration::from_secs(60), 1_000).await?.unwrap();
/// assert_eq!((job.state, job.attempt, job.lease_until_ms), (JobState::Running, 1, Some(61_000)));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Job {
    /// The caller's id.
    pub id: String,
    /// What sort of work.
    pub kind: String,
    /// Whose work.
    pub tenant: Tenant,
    /// Interactive or bulk.
    pub priority: Priority,
    /// JSON text, as enqueued.
    pub payload: String,
    /// Where the job is.
    pub state: JobState,
    /// How many times it was claimed: the fencing token of the latest claim.
    pub attempt: u32,
    /// Failures counted since it was enqueued or requeued (fails and expired leases).
    pub failures: u32,
    /// Not claimed before this (wall-clock ms).
    pub eligible_at_ms: i64,
    /// While running: the lease's end (wall-clock ms).
    pub lease_until_ms: Option<i64>,
    /// The worker that claimed it last.
    pub worker: Option<String>,
    /// The latest failure's reason (kept while the job waits to be tried again).
    pub last_error: Option<String>,
    /// Why it is dead or in review.
    pub reason: Option<String>,
    /// The accepted result (JSON text) when done; the refused one when in review.
    pub result: Option<String>,
    /// When it was first enqueued (wall-clock ms).
    pub created_at_ms: i64,
}

/// What a fenced call did: applied, or refused because the claim is no longer current.
///
/// `Lost` means the job was reaped and claimed again, or finished by someone else: the caller
/// must discard whatever it computed for that claim.
///
/// # Examples
///
/// ```
/// use llm_failover_queue::Fenced;
///
/// assert!(Fenced::Lost.is_lost());
/// assert!(!Fenced::Applied.is_lost());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a Lost outcome means the caller's result must be discarded"]
pub enum Fenced {
    /// The claim was current and the change was made.
    Applied,
    /// The claim is stale (another attempt, or no longer running): nothing changed.
    Lost,
}

impl Fenced {
    /// Whether the claim was stale.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(llm_failover_queue::Fenced::Lost.is_lost());
    /// ```
    pub fn is_lost(self) -> bool {
        self == Fenced::Lost
    }
}

/// What [`Queue::fail`](crate::Queue::fail) did with a failure.
///
/// # Examples
///
/// ```
/// use llm_failover_queue::Failed;
///
/// let f = Failed::Retry { eligible_at_ms: 2_000 };
/// assert!(!f.is_lost());
/// assert!(Failed::Lost.is_lost());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a Lost outcome means the caller's claim was stale"]
pub enum Failed {
    /// Back to `ready`, eligible again at this wall-clock time (ms).
    Retry {
        /// When it may be claimed again.
        eligible_at_ms: i64,
    },
    /// Dead: too many failures, or a failure that can only repeat.
    Dead,
    /// The claim was stale: nothing changed.
    Lost,
}

impl Failed {
    /// Whether the claim was stale.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(!llm_failover_queue::Failed::Dead.is_lost());
    /// ```
    pub fn is_lost(self) -> bool {
        self == Failed::Lost
    }
}

/// What [`Queue::reap`](crate::Queue::reap) found: expired leases.
///
/// # Examples
///
/// ```
/// let r = llm_failover_queue::Reaped::default();
/// assert_eq!((r.requeued, r.dead), (0, 0));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reaped {
    /// Jobs put back to `ready` (a failure counted).
    pub requeued: u64,
    /// Jobs whose expired lease was their last allowed failure: now `dead`.
    pub dead: u64,
}

/// Counts per state and the age of the oldest eligible job.
///
/// # Examples
///
/// ```
/// use llm_failover_queue::{NewJob, Queue};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
/// let queue = Queue::sqlite_in_memory()?;
/// queue.enqueue(NewJob::new("a", "chat", "{}").with_eligible_at(1_000), 1_000).await?;
/// let stats = queue.stats(4_000).await?;
/// assert_eq!(stats.ready, 1);
/// assert_eq!(stats.oldest_eligible_age, Some(std::time::Duration::from_secs(3)));
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueStats {
    /// Jobs in `ready` (eligible now or later).
    pub ready: u64,
    /// Jobs in `running`.
    pub running: u64,
    /// Jobs in `done`.
    pub done: u64,
    /// Jobs in `dead`.
    pub dead: u64,
    /// Jobs in `review`.
    pub review: u64,
    /// How long the longest-waiting eligible `ready` job has been eligible; `None` when none is.
    pub oldest_eligible_age: Option<Duration>,
    /// When the next `ready` job is (or was) eligible, in wall ms: a time at or before `now`
    /// when one is eligible now; `None` when no job is `ready`.
    pub next_eligible_at_ms: Option<i64>,
    /// Claims made of every job so far (each is an attempted request, a 429 or a crash
    /// included): the denominator of [`transport_success`](Self::transport_success).
    pub claims: u64,
}

impl QueueStats {
    /// **Transport success**: answers received (`done` + `review`) over the claims made — how
    /// many attempts got an answer at all. `None` before any claim.
    ///
    /// # Examples
    ///
    /// ```
    /// let mut stats = llm_failover_queue::QueueStats::default();
    /// (stats.done, stats.review, stats.claims) = (6, 2, 10);
    /// assert_eq!(stats.transport_success(), Some(0.8));
    /// assert_eq!(stats.correctness(), Some(0.75));
    /// ```
    pub fn transport_success(&self) -> Option<f64> {
        (self.claims > 0).then(|| (self.done + self.review) as f64 / self.claims as f64)
    }

    /// **Structured correctness**: results that passed their contract (`done`) over the
    /// answers received (`done` + `review`). `None` before any answer.
    pub fn correctness(&self) -> Option<f64> {
        let answered = self.done + self.review;
        (answered > 0).then(|| self.done as f64 / answered as f64)
    }
}

/// The job kind of a batch item (a chat or an embedding request).
pub(crate) const CHAT_KIND: &str = "chat";

/// The item id a batch item's job id stands for (the text before its last `#`; see
/// `QueuedJob::job_id`).
pub(crate) fn item_id(job_id: &str) -> &str {
    job_id.rsplit_once('#').map_or(job_id, |(id, _)| id)
}
