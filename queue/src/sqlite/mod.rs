//! The queue on one SQLite file: every operation one `BEGIN IMMEDIATE` transaction, run on
//! tokio's blocking pool. Opening, enqueueing, claiming and reading are here; what a worker
//! reports about its claim, and the reaper, are in `settle.rs`.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Row, Transaction, TransactionBehavior, params};

use super::job::{Fenced, Job, NewJob, QueueStats, millis};
use super::schema::{self, sql_error};
use llm_failover_core::admission::{Priority, Tenant};
use llm_failover_core::{Error, ErrorKind, Result};

mod settle;

/// The columns [`job_from_row`] reads, in its order.
const COLUMNS: &str = "id, kind, tenant, lane, payload, state, attempt, failures, eligible_at, \
                       lease_until, worker, last_error, reason, result, created_at";

/// A durable job queue in one SQLite file (WAL mode), shared by every process that opens it.
///
/// Each `SqliteQueue` is one connection; clones share it. SQLite lets one connection write at
/// a time, so more connections in one process add no write throughput; open one per process
/// (or a few, for reads alongside writes). Every call runs on tokio's blocking pool and waits
/// up to 5 s for another connection's write lock before failing with an `Io` error.
///
/// All times are wall-clock milliseconds passed in by the caller (see
/// [`wall_ms`](super::wall_ms)); the queue reads no clock.
#[derive(Clone)]
pub(crate) struct SqliteQueue {
    conn: Arc<Mutex<Connection>>,
    /// The file's path as given (or `:memory:`), for error messages.
    name: Arc<str>,
}

impl std::fmt::Debug for SqliteQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteQueue")
            .field("db", &self.name)
            .finish_non_exhaustive()
    }
}

impl SqliteQueue {
    /// The file's path as given (or `:memory:`).
    pub(crate) fn location(&self) -> &str {
        &self.name
    }

    /// Opens (creating if need be) the queue in the SQLite file at `path`, in WAL mode, and
    /// brings its schema up to date.
    ///
    /// # Errors
    ///
    /// `Io` when the file cannot be opened or created, is not an SQLite database (or is
    /// corrupt), or stays locked past the busy timeout; `Config` when its schema is newer than
    /// this build knows.
    pub(crate) async fn open(path: impl AsRef<Path>) -> Result<SqliteQueue> {
        let path = path.as_ref().to_owned();
        let name: Arc<str> = path.display().to_string().into();
        let db = name.clone();
        let conn = tokio::task::spawn_blocking(move || {
            let mut conn = Connection::open(&path).map_err(|e| sql_error(&db, "opening", e))?;
            schema::prepare(&mut conn, &db, false, schema::BUSY_TIMEOUT)?;
            Ok::<_, Error>(conn)
        })
        .await
        .map_err(join_error)??;
        Ok(SqliteQueue {
            conn: Arc::new(Mutex::new(conn)),
            name,
        })
    }

    /// A queue in memory, gone when the last clone is dropped: for tests and examples.
    ///
    /// # Errors
    ///
    /// `Io` if SQLite cannot allocate the database.
    pub(crate) fn open_in_memory() -> Result<SqliteQueue> {
        let name: Arc<str> = ":memory:".into();
        let mut conn = Connection::open_in_memory().map_err(|e| sql_error(&name, "opening", e))?;
        schema::prepare(&mut conn, &name, true, schema::BUSY_TIMEOUT)?;
        Ok(SqliteQueue {
            conn: Arc::new(Mutex::new(conn)),
            name,
        })
    }

    /// [`Queue::enqueue_all`](crate::Queue::enqueue_all) on SQLite.
    pub(crate) async fn enqueue_all(&self, jobs: Vec<NewJob>, now_ms: i64) -> Result<u64> {
        self.write("enqueueing", move |tx| {
            let mut insert = tx.prepare_cached(
                "INSERT INTO jobs (id, kind, tenant, lane, payload, state, eligible_at, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, 'ready', ?6, ?7)
                 ON CONFLICT (id) DO NOTHING",
            )?;
            let mut added = 0;
            for job in &jobs {
                added += insert.execute(params![
                    job.id,
                    job.kind,
                    job.tenant.as_str(),
                    job.priority.as_str(),
                    job.payload,
                    job.eligible_at_ms.unwrap_or(now_ms),
                    now_ms
                ])? as u64;
            }
            Ok(added)
        })
        .await
    }

    /// [`Queue::claim_many`](crate::Queue::claim_many) on SQLite.
    pub(crate) async fn claim_many(
        &self,
        worker: &str,
        max: usize,
        lease: Duration,
        now_ms: i64,
    ) -> Result<Vec<Job>> {
        let worker = worker.to_owned();
        let lease_until = now_ms.saturating_add(millis(lease));
        self.write("claiming", move |tx| {
            let mut jobs = Vec::with_capacity(max.min(1_024));
            for lane in Priority::ALL {
                while jobs.len() < max {
                    match claim_in_lane(tx, lane, &worker, lease_until, now_ms)? {
                        Some(job) => jobs.push(job),
                        None => break,
                    }
                }
            }
            Ok(jobs)
        })
        .await
    }

    /// [`Queue::claim_ids`](crate::Queue::claim_ids) on SQLite.
    pub(crate) async fn claim_ids(
        &self,
        ids: &[String],
        worker: &str,
        lease: Duration,
        now_ms: i64,
    ) -> Result<Vec<Job>> {
        let ids = ids.to_vec();
        let worker = worker.to_owned();
        let lease_until = now_ms.saturating_add(millis(lease));
        self.write("claiming by id", move |tx| {
            let mut claim = tx.prepare_cached(&format!(
                "UPDATE jobs SET state = 'running', attempt = attempt + 1, lease_until = ?2,
                                 worker = ?3
                 WHERE id = ?1 AND state = 'ready' RETURNING {COLUMNS}"
            ))?;
            let mut jobs = Vec::with_capacity(ids.len());
            for id in &ids {
                if let Some(job) = claim
                    .query_row(params![id, lease_until, worker], job_from_row)
                    .optional()?
                {
                    jobs.push(job);
                }
            }
            Ok(jobs)
        })
        .await
    }

    /// [`Queue::stats`](crate::Queue::stats) on SQLite.
    pub(crate) async fn stats(&self, now_ms: i64) -> Result<QueueStats> {
        self.read("reading stats", move |conn| {
            let mut stats = QueueStats::default();
            let mut counts = conn
                .prepare_cached("SELECT state, count(*), sum(attempt) FROM jobs GROUP BY state")?;
            let mut rows = counts.query([])?;
            while let Some(row) = rows.next()? {
                let state: String = row.get(0)?;
                let n = row.get::<_, i64>(1)?.max(0) as u64;
                stats.claims += row.get::<_, i64>(2)?.max(0) as u64;
                match state.as_str() {
                    "ready" => stats.ready = n,
                    "running" => stats.running = n,
                    "done" => stats.done = n,
                    "dead" => stats.dead = n,
                    "review" => stats.review = n,
                    _ => {}
                }
            }
            let next: Option<i64> = conn.query_row(
                "SELECT min(eligible_at) FROM jobs WHERE state = 'ready'",
                [],
                |r| r.get(0),
            )?;
            stats.next_eligible_at_ms = next;
            stats.oldest_eligible_age = next
                .filter(|&at| at <= now_ms)
                .map(|at| Duration::from_millis(now_ms.saturating_sub(at).max(0) as u64));
            Ok(stats)
        })
        .await
    }

    /// [`Queue::get`](crate::Queue::get) on SQLite.
    pub(crate) async fn get(&self, id: &str) -> Result<Option<Job>> {
        let id = id.to_owned();
        self.read("reading a job", move |conn| {
            conn.query_row(
                &format!("SELECT {COLUMNS} FROM jobs WHERE id = ?1"),
                params![id],
                job_from_row,
            )
            .optional()
        })
        .await
    }

    /// [`Queue::dead_letters`](crate::Queue::dead_letters) on SQLite.
    pub(crate) async fn dead_letters(&self) -> Result<Vec<Job>> {
        self.read("listing dead letters", move |conn| {
            conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM jobs WHERE state = 'dead' ORDER BY seq"
            ))?
            .query_map([], job_from_row)?
            .collect()
        })
        .await
    }

    /// [`Queue::unsettled_by_kind`](crate::Queue::unsettled_by_kind) on SQLite.
    pub(crate) async fn unsettled_by_kind(&self) -> Result<Vec<(String, u64)>> {
        self.read("counting jobs by kind", move |conn| {
            conn.prepare_cached(
                "SELECT kind, count(*) FROM jobs WHERE state IN ('ready', 'running')
                 GROUP BY kind ORDER BY kind",
            )?
            .query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)?.max(0) as u64)))?
            .collect()
        })
        .await
    }

    /// [`Queue::unsettled_of_kind`](crate::Queue::unsettled_of_kind) on SQLite.
    pub(crate) async fn unsettled_of_kind(&self, kind: &str) -> Result<Vec<Job>> {
        let kind = kind.to_owned();
        self.read("listing jobs of a kind", move |conn| {
            conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM jobs WHERE kind = ?1 AND state IN ('ready', 'running')
                 ORDER BY seq"
            ))?
            .query_map(params![kind], job_from_row)?
            .collect()
        })
        .await
    }

    /// [`Queue::requeue`](crate::Queue::requeue) on SQLite.
    pub(crate) async fn requeue(&self, id: &str, now_ms: i64) -> Result<bool> {
        let id = id.to_owned();
        self.write("requeueing", move |tx| {
            let changed = tx.execute(
                "UPDATE jobs SET state = 'ready', failures = 0, eligible_at = ?2, reason = NULL,
                                 result = NULL, lease_until = NULL
                 WHERE id = ?1 AND state IN ('dead', 'review')",
                params![id, now_ms],
            )?;
            Ok(changed == 1)
        })
        .await
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction on the blocking pool, committing on `Ok`.
    async fn write<T, F>(&self, doing: &'static str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> rusqlite::Result<T> + Send + 'static,
    {
        self.blocking(doing, move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let value = f(&tx)?;
            tx.commit()?;
            Ok(value)
        })
        .await
    }

    /// A fenced single-statement update: `Applied` when it changed the row, `Lost` when not.
    async fn fenced<F>(&self, doing: &'static str, id: &str, attempt: u32, f: F) -> Result<Fenced>
    where
        F: FnOnce(&Transaction<'_>, &str, u32) -> rusqlite::Result<usize> + Send + 'static,
    {
        let id = id.to_owned();
        self.write(doing, move |tx| {
            Ok(match f(tx, &id, attempt)? {
                0 => Fenced::Lost,
                _ => Fenced::Applied,
            })
        })
        .await
    }

    /// Runs a read on the blocking pool (no transaction: one statement, or a consistent enough
    /// pair for stats).
    async fn read<T, F>(&self, doing: &'static str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        self.blocking(doing, move |conn| f(conn)).await
    }

    async fn blocking<T, F>(&self, doing: &'static str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let conn = self.conn.clone();
        let name = self.name.clone();
        tokio::task::spawn_blocking(move || {
            // A panic inside `f` rolled its transaction back when it unwound: the connection
            // is still sound, so a poisoned lock is taken over.
            let mut conn = conn.lock().unwrap_or_else(PoisonError::into_inner);
            f(&mut conn).map_err(|e| sql_error(&name, doing, e))
        })
        .await
        .map_err(join_error)?
    }
}

/// The lane's first tenant after `?2` (in name order) with a job eligible at `?3`.
const NEXT_TENANT: &str = "SELECT tenant FROM jobs
     WHERE state = 'ready' AND lane = ?1 AND tenant > ?2 AND eligible_at <= ?3
     ORDER BY tenant LIMIT 1";

/// Claims tenant `?2`'s job in lane `?1` eligible longest at `?5`: lease `?3`, worker `?4`.
const CLAIM_JOB: &str =
    "UPDATE jobs SET state = 'running', attempt = attempt + 1, lease_until = ?3,
                     worker = ?4
     WHERE seq = (SELECT seq FROM jobs
                  WHERE state = 'ready' AND lane = ?1 AND tenant = ?2 AND eligible_at <= ?5
                  ORDER BY eligible_at, seq LIMIT 1)";

/// The claim within one priority (the `lane` column), by the [admission
/// order](llm_failover_core::admission): the next tenant after the cursor with eligible work (wrapping
/// round), then that tenant's longest-eligible job.
fn claim_in_lane(
    tx: &Transaction<'_>,
    lane: Priority,
    worker: &str,
    lease_until: i64,
    now_ms: i64,
) -> rusqlite::Result<Option<Job>> {
    let cursor: Option<String> = tx
        .query_row(
            "SELECT tenant FROM tenant_cursor WHERE lane = ?1",
            params![lane.as_str()],
            |r| r.get(0),
        )
        .optional()?;
    let mut next_tenant = tx.prepare_cached(NEXT_TENANT)?;
    let mut after = |t: &str| {
        next_tenant
            .query_row(params![lane.as_str(), t, now_ms], |r| r.get::<_, String>(0))
            .optional()
    };
    // Every tenant sorts after "" (tenants are never empty), so the second look wraps round.
    let tenant = match cursor.as_deref() {
        Some(c) => match after(c)? {
            Some(t) => Some(t),
            None => after("")?,
        },
        None => after("")?,
    };
    let Some(tenant) = tenant else {
        return Ok(None);
    };
    drop(next_tenant);
    let job = tx
        .query_row(
            &format!("{CLAIM_JOB} RETURNING {COLUMNS}"),
            params![lane.as_str(), tenant, lease_until, worker, now_ms],
            job_from_row,
        )
        .optional()?;
    tx.execute(
        "INSERT INTO tenant_cursor (lane, tenant) VALUES (?1, ?2)
         ON CONFLICT (lane) DO UPDATE SET tenant = excluded.tenant",
        params![lane.as_str(), tenant],
    )?;
    Ok(job)
}

fn job_from_row(row: &Row<'_>) -> rusqlite::Result<Job> {
    let bad = |i: usize, e: Error| {
        rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, Box::new(e))
    };
    let lane: String = row.get(3)?;
    let state: String = row.get(5)?;
    Ok(Job {
        id: row.get(0)?,
        kind: row.get(1)?,
        tenant: Tenant::from(row.get::<_, String>(2)?),
        priority: lane.parse().map_err(|e| bad(3, e))?,
        payload: row.get(4)?,
        state: state.parse().map_err(|e| bad(5, e))?,
        attempt: row.get(6)?,
        failures: row.get(7)?,
        eligible_at_ms: row.get(8)?,
        lease_until_ms: row.get(9)?,
        worker: row.get(10)?,
        last_error: row.get(11)?,
        reason: row.get(12)?,
        result: row.get(13)?,
        created_at_ms: row.get(14)?,
    })
}

fn join_error(e: tokio::task::JoinError) -> Error {
    Error::new(
        ErrorKind::Io,
        format!("jobs database task did not finish: {e}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plan SQLite picks for `sql`, one line per step.
    fn plan(conn: &Connection, sql: &str) -> String {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let rows = stmt
            .query_map(params!["bulk", "t", 0, "w", 0], |r| r.get::<_, String>(3))
            .unwrap();
        rows.map(Result::unwrap).collect::<Vec<_>>().join("\n")
    }

    #[test]
    fn claims_search_the_claim_index_rather_than_scan_the_table() {
        let queue = SqliteQueue::open_in_memory().unwrap();
        let conn = queue.conn.lock().unwrap();
        let next = plan(&conn, &NEXT_TENANT.replace("?3", "?5"));
        assert!(
            next.contains("INDEX jobs_claim (lane=? AND tenant>?)") && !next.contains("SCAN"),
            "{next}"
        );
        let claim = plan(&conn, CLAIM_JOB);
        assert!(
            claim.contains("INDEX jobs_claim (lane=? AND tenant=? AND eligible_at<?)"),
            "{claim}"
        );
        assert!(!claim.contains("SCAN"), "{claim}");
    }

    /// The claim is the admission order's face in SQL: for jobs all eligible at once, it
    /// claims them in the order a limiter's line serves the same waiters.
    #[tokio::test]
    async fn claims_follow_the_admission_order() {
        use Priority::{Bulk, Interactive};
        use llm_failover_core::admission::{Priority, Tenant};
        use llm_failover_core::wing::serve_order;
        let tables: &[&[(Priority, &str)]] = &[
            &[
                (Bulk, "b"),
                (Bulk, "a"),
                (Bulk, "b"),
                (Bulk, "c"),
                (Bulk, "a"),
            ],
            &[
                (Bulk, "a"),
                (Interactive, "z"),
                (Bulk, "b"),
                (Interactive, "y"),
                (Interactive, "z"),
                (Bulk, "a"),
            ],
            &[
                (Interactive, "default"),
                (Bulk, "default"),
                (Interactive, "default"),
            ],
        ];
        for table in tables {
            let queue = crate::Queue::sqlite_in_memory().unwrap();
            for (i, (priority, tenant)) in table.iter().enumerate() {
                let job = NewJob::new(i.to_string(), "chat", "{}")
                    .with_tenant(*tenant)
                    .with_priority(*priority);
                queue.enqueue(job, 1_000).await.unwrap();
            }
            let mut claimed = Vec::new();
            while let Some(job) = queue
                .claim("w", Duration::from_secs(60), 2_000)
                .await
                .unwrap()
            {
                claimed.push(job.id.parse::<usize>().unwrap());
            }
            let waiting: Vec<(Priority, Tenant)> = table
                .iter()
                .map(|(priority, tenant)| (*priority, Tenant::new(tenant)))
                .collect();
            assert_eq!(claimed, serve_order(&waiting), "{table:?}");
        }
    }
}
