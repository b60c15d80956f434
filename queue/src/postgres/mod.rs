//! The queue on one PostgreSQL database: every operation one statement (a claim calls the
//! schema's PL/pgSQL function), so that each is atomic without a client-side transaction and
//! several operations share a connection. Connecting, enqueueing, claiming and reading are
//! here; what a worker reports about its claim, and the reaper, are in `settle.rs`; the
//! connections in `pool.rs`, their TLS in `tls.rs` (libpq's `sslmode`, on rustls; the
//! certificate checks rustls lacks in `verify.rs`) from the options `conninfo.rs` takes out of
//! the connection string; the schema in `schema.rs`.

use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::Row;
use tokio_postgres::types::{FromSql, ToSql, Type};

use super::job::{Job, NewJob, QueueStats, millis};
use llm_failover_core::admission::{Priority, Tenant};
use llm_failover_core::{Error, ErrorKind, Result};

mod conninfo;
mod pool;
mod schema;
mod settle;
mod tls;
mod verify;

use pool::Pool;
use schema::pg_error;

/// The columns [`job_from_row`] reads, in its order.
const COLUMNS: &str = "id, kind, tenant, lane, payload, state, attempt, failures, eligible_at, \
                       lease_until, worker, last_error, reason, result, created_at";

/// How many connections [`PostgresQueue::connect`] keeps.
const CONNECTIONS: usize = 4;

/// A durable job queue in a PostgreSQL database, shared by every process on every host that
/// connects to it: the same schema, state machine and answers as
/// [`SqliteQueue`](super::SqliteQueue) (the [module documentation](super) has them).
///
/// Clones share a small fixed set of connections (4 unless
/// [`connect_with`](Self::connect_with) says otherwise), taken in turn; each carries several
/// operations at once. A connection found closed (the server restarted) is opened again on
/// the next call that falls to it, so a queue outlives a restart of its server: the calls
/// during the outage fail with `Io` errors, the ones after it work.
///
/// Every operation is one statement, hence one round trip: a claim runs the schema's claim
/// function, which takes jobs with `FOR UPDATE SKIP LOCKED`, so concurrent claimers — in
/// this process or any other — never share a job and never wait for each other.
///
/// It speaks TCP, with TLS as the connection string's `sslmode` says (rustls; `tls.rs` has
/// what each mode checks), or a unix socket. Put the tables in a database (or a schema,
/// `options=-csearch_path=…`) of their own: they are named `jobs` and `tenant_cursor`, as in
/// SQLite.
///
/// All times are wall-clock milliseconds passed in by the caller (see
/// [`wall_ms`](super::wall_ms)); the queue reads no clock.
#[derive(Clone)]
pub(crate) struct PostgresQueue {
    pool: Arc<Pool>,
}

impl std::fmt::Debug for PostgresQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresQueue")
            .field("db", &self.pool.name())
            .field("connections", &self.pool.size())
            .finish_non_exhaustive()
    }
}

impl PostgresQueue {
    /// `host:port/database`, never the user or password.
    pub(crate) fn location(&self) -> &str {
        self.pool.name()
    }

    /// Connects to the database `url` names and brings its schema up to date.
    ///
    /// `url` is a libpq connection string: a URL
    /// (`postgres://user[:password]@host[:port]/database`, `?option=…&…`) or `key=value`
    /// pairs (`host=/run/postgresql user=jobs dbname=jobs`); its TLS options (`sslmode`,
    /// `sslrootcert`, `sslcert`, `sslkey`) are read by `conninfo.rs` and `tls.rs`, the rest by
    /// tokio-postgres. Without a `connect_timeout`, connecting gives up after 10 s. Errors and
    /// `Debug` name the database as `host:port/database`, never with the password.
    ///
    /// # Errors
    ///
    /// `Config` when `url` does not parse, its TLS options are not libpq's or name files
    /// that cannot serve, or the database's schema is newer than this build knows; `Io` when
    /// the server cannot be reached or refuses (TLS, its certificate, the login, the
    /// migration).
    pub(crate) async fn connect(url: &str) -> Result<PostgresQueue> {
        PostgresQueue::connect_with(url, CONNECTIONS).await
    }

    /// As [`connect`](Self::connect), keeping `connections` connections (at least 1).
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    pub(crate) async fn connect_with(url: &str, connections: usize) -> Result<PostgresQueue> {
        let pool = Pool::new(url, connections)?;
        let mut client = pool.open("migrating").await?;
        schema::migrate(&mut client, pool.name()).await?;
        pool.adopt(client);
        Ok(PostgresQueue {
            pool: Arc::new(pool),
        })
    }

    /// [`Queue::enqueue_all`](crate::Queue::enqueue_all) on PostgreSQL. A text holding a NUL character, which PostgreSQL cannot
    /// store, is a `Config` error.
    pub(crate) async fn enqueue_all(&self, jobs: Vec<NewJob>, now_ms: i64) -> Result<u64> {
        for job in &jobs {
            for (what, text) in [
                ("id", job.id.as_str()),
                ("kind", job.kind.as_str()),
                ("tenant", job.tenant.as_str()),
            ] {
                no_nul(text, || format!("job {what} {:?}", job.id))?;
            }
        }
        if jobs.is_empty() {
            return Ok(0);
        }
        let column = |f: fn(&NewJob) -> &str| jobs.iter().map(f).collect::<Vec<_>>();
        let (ids, kinds, tenants) = (
            column(|j| &j.id),
            column(|j| &j.kind),
            column(|j| j.tenant.as_str()),
        );
        let (lanes, payloads) = (column(|j| j.priority.as_str()), column(|j| &j.payload));
        let eligible: Vec<i64> = jobs
            .iter()
            .map(|j| j.eligible_at_ms.unwrap_or(now_ms))
            .collect();
        self.execute(
            "enqueueing",
            "INSERT INTO jobs (id, kind, tenant, lane, payload, state, eligible_at, created_at)
             SELECT u.id, u.kind, u.tenant, u.lane, u.payload, 'ready', u.eligible_at, $7
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[])
                  WITH ORDINALITY AS u(id, kind, tenant, lane, payload, eligible_at, n)
             ORDER BY u.n
             ON CONFLICT (id) DO NOTHING",
            &[
                (&ids, Type::TEXT_ARRAY),
                (&kinds, Type::TEXT_ARRAY),
                (&tenants, Type::TEXT_ARRAY),
                (&lanes, Type::TEXT_ARRAY),
                (&payloads, Type::TEXT_ARRAY),
                (&eligible, Type::INT8_ARRAY),
                (&now_ms, Type::INT8),
            ],
        )
        .await
    }

    /// [`Queue::claim_many`](crate::Queue::claim_many) on PostgreSQL. Jobs held by a concurrent
    /// claim are skipped (`SKIP LOCKED`), so fewer may come back. A text holding a NUL character, which PostgreSQL cannot
    /// store, is a `Config` error.
    pub(crate) async fn claim_many(
        &self,
        worker: &str,
        max: usize,
        lease: Duration,
        now_ms: i64,
    ) -> Result<Vec<Job>> {
        no_nul(worker, || "worker name".to_owned())?;
        if max == 0 {
            return Ok(Vec::new());
        }
        let lanes: Vec<&str> = Priority::ALL.iter().map(|l| l.as_str()).collect();
        let lease_until = now_ms.saturating_add(millis(lease));
        let max = i32::try_from(max).unwrap_or(i32::MAX);
        let rows = self
            .query(
                "claiming",
                &format!(
                    "SELECT {COLUMNS}
                     FROM llm_failover_claim($1, $2, $3, $4, $5) WITH ORDINALITY AS c
                     ORDER BY c.ordinality"
                ),
                &[
                    (&lanes, Type::TEXT_ARRAY),
                    (&worker, Type::TEXT),
                    (&lease_until, Type::INT8),
                    (&now_ms, Type::INT8),
                    (&max, Type::INT4),
                ],
            )
            .await?;
        rows.iter().map(|r| job_from_row(&self.pool, r)).collect()
    }

    /// [`Queue::claim_ids`](crate::Queue::claim_ids) on PostgreSQL. A text holding a NUL
    /// character, which PostgreSQL cannot store, is a `Config` error.
    pub(crate) async fn claim_ids(
        &self,
        ids: &[String],
        worker: &str,
        lease: Duration,
        now_ms: i64,
    ) -> Result<Vec<Job>> {
        no_nul(worker, || "worker name".to_owned())?;
        for id in ids {
            no_nul(id, || "job id".to_owned())?;
        }
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let lease_until = now_ms.saturating_add(millis(lease));
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let rows = self
            .query(
                "claiming by id",
                &format!(
                    "UPDATE jobs SET state = 'running', attempt = attempt + 1,
                                     lease_until = $2, worker = $3
                      WHERE id = ANY($1) AND state = 'ready'
                      RETURNING {COLUMNS}"
                ),
                &[
                    (&ids, Type::TEXT_ARRAY),
                    (&lease_until, Type::INT8),
                    (&worker, Type::TEXT),
                ],
            )
            .await?;
        rows.iter().map(|r| job_from_row(&self.pool, r)).collect()
    }

    /// [`Queue::stats`](crate::Queue::stats) on PostgreSQL. A text holding a NUL character, which PostgreSQL cannot
    /// store, is a `Config` error.
    pub(crate) async fn stats(&self, now_ms: i64) -> Result<QueueStats> {
        let doing = "reading stats";
        let rows = self
            .query(
                doing,
                "SELECT count(*) FILTER (WHERE state = 'ready'),
                        count(*) FILTER (WHERE state = 'running'),
                        count(*) FILTER (WHERE state = 'done'),
                        count(*) FILTER (WHERE state = 'dead'),
                        count(*) FILTER (WHERE state = 'review'),
                        min(eligible_at) FILTER (WHERE state = 'ready'),
                        coalesce(sum(attempt), 0)::bigint
                 FROM jobs",
                &[],
            )
            .await?;
        let row = rows.first().ok_or_else(|| no_row(&self.pool, doing))?;
        let count = |i: usize| column::<i64>(&self.pool, row, i).map(|n| n.max(0) as u64);
        let mut stats = QueueStats::default();
        (stats.ready, stats.running, stats.done) = (count(0)?, count(1)?, count(2)?);
        (stats.dead, stats.review) = (count(3)?, count(4)?);
        let next: Option<i64> = column(&self.pool, row, 5)?;
        stats.next_eligible_at_ms = next;
        stats.claims = count(6)?;
        stats.oldest_eligible_age = next
            .filter(|&at| at <= now_ms)
            .map(|at| Duration::from_millis(now_ms.saturating_sub(at).max(0) as u64));
        Ok(stats)
    }

    /// [`Queue::get`](crate::Queue::get) on PostgreSQL. A text holding a NUL character, which PostgreSQL cannot
    /// store, is a `Config` error.
    pub(crate) async fn get(&self, id: &str) -> Result<Option<Job>> {
        no_nul(id, || "job id".to_owned())?;
        let rows = self
            .query(
                "reading a job",
                &format!("SELECT {COLUMNS} FROM jobs WHERE id = $1"),
                &[(&id, Type::TEXT)],
            )
            .await?;
        rows.first()
            .map(|r| job_from_row(&self.pool, r))
            .transpose()
    }

    /// [`Queue::unsettled_by_kind`](crate::Queue::unsettled_by_kind) on PostgreSQL.
    pub(crate) async fn unsettled_by_kind(&self) -> Result<Vec<(String, u64)>> {
        let rows = self
            .query(
                "counting jobs by kind",
                "SELECT kind, count(*) FROM jobs WHERE state IN ('ready', 'running')
                 GROUP BY kind ORDER BY kind",
                &[],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1).max(0) as u64))
            .collect())
    }

    /// [`Queue::unsettled_of_kind`](crate::Queue::unsettled_of_kind) on PostgreSQL.
    pub(crate) async fn unsettled_of_kind(&self, kind: &str) -> Result<Vec<Job>> {
        no_nul(kind, || "job kind".to_owned())?;
        let rows = self
            .query(
                "listing jobs of a kind",
                &format!(
                    "SELECT {COLUMNS} FROM jobs WHERE kind = $1 AND state IN ('ready', 'running')
                     ORDER BY seq"
                ),
                &[(&kind, Type::TEXT)],
            )
            .await?;
        rows.iter().map(|r| job_from_row(&self.pool, r)).collect()
    }

    /// [`Queue::dead_letters`](crate::Queue::dead_letters) on PostgreSQL. A text holding a NUL character, which PostgreSQL cannot
    /// store, is a `Config` error.
    pub(crate) async fn dead_letters(&self) -> Result<Vec<Job>> {
        let rows = self
            .query(
                "listing dead letters",
                &format!("SELECT {COLUMNS} FROM jobs WHERE state = 'dead' ORDER BY seq"),
                &[],
            )
            .await?;
        rows.iter().map(|r| job_from_row(&self.pool, r)).collect()
    }

    /// [`Queue::requeue`](crate::Queue::requeue) on PostgreSQL. A text holding a NUL character, which PostgreSQL cannot
    /// store, is a `Config` error.
    pub(crate) async fn requeue(&self, id: &str, now_ms: i64) -> Result<bool> {
        no_nul(id, || "job id".to_owned())?;
        let changed = self
            .execute(
                "requeueing",
                "UPDATE jobs SET state = 'ready', failures = 0, eligible_at = $2, reason = NULL,
                                 result = NULL, lease_until = NULL
                 WHERE id = $1 AND state IN ('dead', 'review')",
                &[(&id, Type::TEXT), (&now_ms, Type::INT8)],
            )
            .await?;
        Ok(changed == 1)
    }

    /// Runs one statement that changes rows and answers how many.
    async fn execute(
        &self,
        doing: &str,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<u64> {
        let conn = self.pool.conn(doing).await?;
        let changed = conn.client.execute_typed(sql, params).await;
        conn.done(doing, changed)
    }

    /// Runs one statement that returns rows.
    async fn query(
        &self,
        doing: &str,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>> {
        let conn = self.pool.conn(doing).await?;
        let rows = conn.client.query_typed(sql, params).await;
        conn.done(doing, rows)
    }
}

/// `Ok` unless `text` holds a NUL character, which PostgreSQL's text cannot store (SQLite's
/// can): a Config error naming `what` then, before anything is sent.
fn no_nul(text: &str, what: impl FnOnce() -> String) -> Result<()> {
    if text.contains('\0') {
        return Err(Error::new(
            ErrorKind::Config,
            format!(
                "{} holds a NUL character, which PostgreSQL cannot store",
                what()
            ),
        ));
    }
    Ok(())
}

fn no_row(pool: &Pool, doing: &str) -> Error {
    Error::new(
        ErrorKind::Io,
        format!("jobs database {}: {doing}: no row came back", pool.name()),
    )
}

/// Column `i` of `row` as a `T`; a value of another type is an `Io` error naming the database.
fn column<'a, T: FromSql<'a>>(pool: &Pool, row: &'a Row, i: usize) -> Result<T> {
    row.try_get(i)
        .map_err(|e| pg_error(pool.name(), "reading a row", &e))
}

fn job_from_row(pool: &Pool, row: &Row) -> Result<Job> {
    let bad = |name: &str, why: String| {
        Error::new(
            ErrorKind::Io,
            format!("jobs database {}: reading a job: {name} {why}", pool.name()),
        )
    };
    let text = |i: usize| column::<String>(pool, row, i);
    let count = |i: usize, name: &str| {
        let n: i64 = column(pool, row, i)?;
        u32::try_from(n).map_err(|_| bad(name, format!("{n} is not a count")))
    };
    Ok(Job {
        id: text(0)?,
        kind: text(1)?,
        tenant: Tenant::from(text(2)?),
        priority: text(3)?
            .parse()
            .map_err(|e: Error| bad("lane:", e.to_string()))?,
        payload: text(4)?,
        state: text(5)?
            .parse()
            .map_err(|e: Error| bad("state:", e.to_string()))?,
        attempt: count(6, "attempt")?,
        failures: count(7, "failures")?,
        eligible_at_ms: column(pool, row, 8)?,
        lease_until_ms: column(pool, row, 9)?,
        worker: column(pool, row, 10)?,
        last_error: column(pool, row, 11)?,
        reason: column(pool, row, 12)?,
        result: column(pool, row, 13)?,
        created_at_ms: column(pool, row, 14)?,
    })
}
