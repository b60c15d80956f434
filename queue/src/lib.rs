//! # llm-failover-queue
//!
//! The queue wing of [llm-failover](https://docs.rs/llm-failover): durable jobs. A [`Queue`] on SQLite (one
//! host, nothing to install) or PostgreSQL (workers on many hosts) that survives crashes,
//! accepts at most one result per job, and lets a 429 move a job's eligible time instead of
//! putting a worker to sleep; [`Worker`]s that run its jobs through a
//! [`Client`](llm_failover_core::Client), settling each by what it answered; and [`QueuedJob`], a
//! JSON-lines prompt batch on the queue.
//!
//! Most programs enqueue and run a [`Worker`] (its documentation has an example), or, for a
//! JSON-lines prompt batch, [`QueuedJob`]. The queue's own operations, which a worker uses:
//!
//! ```
//! use std::time::Duration;
//! use llm_failover_queue::{FailPolicy, NewJob, Fenced, Queue};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
//! let queue = Queue::sqlite_in_memory()?; // Queue::open("sqlite:PATH" or "postgres://…")
//! queue.enqueue(NewJob::new("line-1", "chat", r#"{"prompt":"hi"}"#).with_tenant("acme"), 0).await?;
//!
//! let lease = Duration::from_secs(30);
//! let job = queue.claim("worker-1", lease, 1_000).await?.expect("one job is eligible");
//! // ... send job.payload through the Client ...
//! match queue.complete(&job.id, job.attempt, r#"{"text":"hello"}"#).await? {
//!     Fenced::Applied => {}                // the result is the job's, once
//!     Fenced::Lost => { /* reaped and claimed again: discard ours */ }
//! }
//! queue.reap(200_000, &FailPolicy::default()).await?; // now and then: expired leases back
//! # Ok(()) }
//! ```
//!
//! # The state machine
//!
//! ```text
//!            enqueue                  claim (attempt + 1, lease)
//!   (none) ─────────► ready ────────────────────────────────────► running
//!                      ▲ ▲ ▲                                          │
//!                      │ │ └── snooze (eligible_at = until; no failure)┤
//!                      │ └──── fail (failures + 1, backoff) ──────────┤
//!                      │       reap (lease expired: failures + 1) ────┤
//!                      │                                              ├── complete ──► done
//!                      │                                              ├── fail (last allowed),
//!                      │                                              │   dead_now, reap (last) ──► dead
//!                      └─────────── requeue ◄── dead, review          └── review ──► review
//! ```
//!
//! Every arrow out of `running` is fenced by the claim: `WHERE id = ? AND attempt = ? AND
//! state = 'running'`. A call for any other `(id, attempt)`, or for a job no longer running,
//! changes nothing and answers [`Fenced::Lost`] (or [`Failed::Lost`]).
//!
//! # Invariants
//!
//! - **One job per id.** Enqueue is `INSERT … ON CONFLICT DO NOTHING` on the caller's id:
//!   several processes may enqueue the same input; the first one's payload stays.
//! - **Every claim is a unique `(id, attempt)`.** The claim sets `running`, the lease and
//!   `attempt = attempt + 1` in one transaction, and nothing ever lowers `attempt` (not even
//!   [`requeue`](Queue::requeue)), so the attempt is a fencing token.
//! - **At most one accepted result per id.** [`complete`](Queue::complete) applies only
//!   to the current claim of a running job; once it is `done`, every later completion is
//!   `Lost`. A worker that stalled past its lease was reaped, the job was claimed again, and
//!   its late result is refused.
//! - **Snoozing is not failing.** [`snooze`](Queue::snooze) (a 429, an open breaker)
//!   moves `eligible_at` and counts nothing; [`fail`](Queue::fail) and an expired lease
//!   count a failure, back off per [`FailPolicy`], and dead-letter at its limit;
//!   [`dead_now`](Queue::dead_now) dead-letters a failure that can only repeat.
//! - **Interactive before bulk; tenants take turns.** Within a lane, the claim serves the
//!   next tenant after the lane's cursor that has an eligible job, so a tenant with 10,000
//!   jobs and one with 2 alternate, and a tenant with nothing eligible is never waited on.
//! - **Time comes from the caller.** Every operation takes wall-clock milliseconds
//!   ([`wall_ms`]`(clock.wall())`); the queue reads no clock, so tests drive it.
//!
//! What stays at-least-once is the work itself: a worker that stalled past its lease may have
//! been billed by a provider for a result that is then refused. A [`Worker`] renews the
//! leases of the jobs it holds on its own, all at once ([`heartbeat_all`](Queue::heartbeat_all)),
//! every third of its lease; a loop of your own calls [`heartbeat`](Queue::heartbeat) or
//! `heartbeat_all` likewise. The payload is stored and listed as written: never put a key in
//! it, and reference audio by path and hash rather than copying it in.
//!
//! # SQLite
//!
//! One schema, versioned in `PRAGMA user_version`; opening applies the missing migrations
//! and refuses (a `Config` error) a file whose schema is newer than this build. The file is
//! in WAL mode (readers never block the writer), every statement waits up to 5 s
//! (`busy_timeout`) for another connection's write lock, and every write is a
//! `BEGIN IMMEDIATE` transaction: a deferred `BEGIN` that reads and then writes must upgrade
//! its lock, and under concurrent writers that upgrade fails with `SQLITE_BUSY` at once,
//! whatever the timeout. Several processes may share one file on one host.
//!
//! # Why rusqlite (and tokio-postgres for PostgreSQL), not sqlx
//!
//! The queue is a dozen hand-written statements. rusqlite is a thin, well-kept binding
//! (SQLite compiled in through the `bundled` feature, so nothing to install), and
//! tokio-postgres is the same for PostgreSQL; with them the SQL is plain text in one file per
//! backend that a reader can check against the state machine above. sqlx would bring its
//! macro and compile-time-database machinery, its own pool and runtime glue, and a far larger
//! dependency tree, for queries we do not need checked against a live database at build time
//! (the tests run them). rusqlite's calls block, so each runs on tokio's blocking pool;
//! tokio-postgres is async, and on PostgreSQL the queue sends each operation as one statement (a
//! claim calls a PL/pgSQL function of the schema that takes jobs `FOR UPDATE SKIP LOCKED`),
//! over a unix socket or TCP, with TLS (rustls, through tokio-postgres-rustls) as libpq's
//! `sslmode` says: `verify-full` with `sslrootcert` for a managed server
//! (`Queue::postgres` has the modes).

#![forbid(unsafe_code)]

mod batch;
mod bulk;
mod job;
#[cfg(feature = "otel")]
mod metrics;
mod policy;
#[cfg(feature = "postgres")]
mod postgres;
mod queue;
#[cfg(feature = "sqlite")]
mod schema;
#[cfg(feature = "sqlite")]
mod sqlite;
mod worker;

pub use batch::{LaneChoice, QueuedJob, QueuedReport};
pub use job::{Failed, Fenced, Job, JobState, NewJob, QueueStats, Reaped, wall_ms};
#[cfg(feature = "otel")]
pub use metrics::QueueMetrics;
pub use policy::FailPolicy;
pub use queue::Queue;
pub(crate) use queue::patiently;
pub(crate) use worker::DEFAULT_LEASE;
#[cfg(feature = "jsonschema")]
pub use worker::schema_contract;
pub use worker::{Contract, Ended, Handler, JobContext, Worker, WorkerBuilder, WorkerReport};
