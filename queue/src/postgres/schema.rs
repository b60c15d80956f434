//! The PostgreSQL schema, as numbered migrations, and how a failure is reported.
//!
//! The table `llm_failover_schema` holds how many migrations the database has had. Connecting
//! reads it; when migrations are missing they are applied in one transaction holding a
//! transaction-level advisory lock (`pg_advisory_xact_lock`), which re-reads the version first,
//! so two processes connecting to a new database at once migrate it once. A database whose
//! version is higher than this code knows is refused: an older binary must not write rows whose
//! meaning it does not know.
//!
//! The tables and columns are SQLite's (`queue/src/schema.rs`), in PostgreSQL's types: `BIGINT`
//! for times in ms and counts, tenants compared byte by byte (`COLLATE "C"`, as SQLite
//! compares text) so that tenants take turns in the same order on both. The claim is a
//! PL/pgSQL function, so that a claim of many jobs is one round trip.

use std::error::Error as _;

use tokio_postgres::Client;

use crate::job::check_schema_version;
use llm_failover_core::{Error, ErrorKind, Result};

/// Migration `n` (1-based) is `MIGRATIONS[n - 1]`; never edit one that has shipped, add one.
const MIGRATIONS: &[&str] = &[
    // 1: jobs, the per-lane tenant cursor (a row per lane: claims lock it, never create it),
    // and the claim.
    r#"CREATE TABLE jobs (
         seq         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
         id          TEXT NOT NULL UNIQUE,
         kind        TEXT NOT NULL,
         tenant      TEXT COLLATE "C" NOT NULL,
         lane        TEXT NOT NULL CHECK (lane IN ('interactive', 'bulk')),
         payload     TEXT NOT NULL,
         state       TEXT NOT NULL
                     CHECK (state IN ('ready', 'running', 'done', 'dead', 'review')),
         attempt     BIGINT NOT NULL DEFAULT 0,
         failures    BIGINT NOT NULL DEFAULT 0,
         eligible_at BIGINT NOT NULL,
         lease_until BIGINT,
         worker      TEXT,
         last_error  TEXT,
         reason      TEXT,
         result      TEXT,
         created_at  BIGINT NOT NULL
     );
     CREATE INDEX jobs_claim ON jobs (lane, tenant, eligible_at, seq) WHERE state = 'ready';
     CREATE INDEX jobs_state ON jobs (state);
     CREATE TABLE tenant_cursor (
         lane   TEXT PRIMARY KEY,
         tenant TEXT COLLATE "C" NOT NULL
     );
     INSERT INTO tenant_cursor (lane, tenant) VALUES ('interactive', ''), ('bulk', '');
     CREATE FUNCTION llm_failover_claim_in_lane(
         p_lane text, p_cursor text, p_worker text, p_lease_until bigint, p_now bigint
     ) RETURNS jobs LANGUAGE plpgsql AS $$
     -- The lane's first tenant after the cursor (in byte order, wrapping round once) with an
     -- eligible job that no other claim holds, and that tenant's job eligible longest: claimed.
     -- NULL when there is none. Tenants are never empty, so every one sorts after ''.
     DECLARE
         v_probe   text COLLATE "C" := p_cursor;
         v_tenant  text COLLATE "C";
         v_wrapped boolean := false;
         v_seq     bigint;
         v_job     jobs;
     BEGIN
         LOOP
             SELECT tenant INTO v_tenant FROM jobs
              WHERE state = 'ready' AND lane = p_lane AND tenant > v_probe
                AND eligible_at <= p_now
              ORDER BY tenant LIMIT 1;
             IF NOT FOUND THEN
                 IF v_wrapped THEN RETURN NULL; END IF;
                 v_wrapped := true;
                 v_probe := '';
                 CONTINUE;
             END IF;
             IF v_wrapped AND v_tenant > p_cursor COLLATE "C" THEN RETURN NULL; END IF;
             SELECT seq INTO v_seq FROM jobs
              WHERE state = 'ready' AND lane = p_lane AND tenant = v_tenant
                AND eligible_at <= p_now
              ORDER BY eligible_at, seq LIMIT 1
              FOR UPDATE SKIP LOCKED;
             IF FOUND THEN
                 UPDATE jobs SET state = 'running', attempt = attempt + 1,
                                 lease_until = p_lease_until, worker = p_worker
                  WHERE seq = v_seq
                  RETURNING * INTO v_job;
                 RETURN v_job;
             END IF;
             -- Every eligible job of this tenant is being claimed by someone else: the next.
             v_probe := v_tenant;
         END LOOP;
     END $$;
     CREATE FUNCTION llm_failover_claim(
         p_lanes text[], p_worker text, p_lease_until bigint, p_now bigint, p_max integer
     ) RETURNS SETOF jobs LANGUAGE plpgsql AS $$
     -- Up to p_max claims, lane by lane in the order given, each lane's tenants in turn from
     -- its cursor. The cursor's row is locked without waiting: while another claim holds it,
     -- this one starts from its committed value and leaves it as it is.
     DECLARE
         v_lane    text;
         v_cursor  text COLLATE "C";
         v_start   text COLLATE "C";
         v_held    boolean;
         v_job     jobs;
         v_claimed integer := 0;
     BEGIN
         FOREACH v_lane IN ARRAY p_lanes LOOP
             EXIT WHEN v_claimed >= p_max;
             SELECT tenant INTO v_cursor FROM tenant_cursor WHERE lane = v_lane
                FOR UPDATE SKIP LOCKED;
             v_held := FOUND;
             IF NOT v_held THEN
                 SELECT tenant INTO v_cursor FROM tenant_cursor WHERE lane = v_lane;
                 IF NOT FOUND THEN
                     INSERT INTO tenant_cursor (lane, tenant) VALUES (v_lane, '')
                         ON CONFLICT DO NOTHING;
                     v_held := FOUND;
                 END IF;
             END IF;
             v_cursor := coalesce(v_cursor, '');
             v_start := v_cursor;
             WHILE v_claimed < p_max LOOP
                 v_job := llm_failover_claim_in_lane(v_lane, v_cursor, p_worker,
                                                     p_lease_until, p_now);
                 EXIT WHEN v_job.seq IS NULL;
                 v_cursor := v_job.tenant;
                 v_claimed := v_claimed + 1;
                 RETURN NEXT v_job;
             END LOOP;
             IF v_held AND v_cursor <> v_start THEN
                 UPDATE tenant_cursor SET tenant = v_cursor WHERE lane = v_lane;
             END IF;
         END LOOP;
     END $$;"#,
    // 2: the claim, again, one function. Migration 1's claim read every `ready` job's index
    // entry per claim: PL/pgSQL gives a function's text parameters the collation of its call,
    // and the cursor it passed (`COLLATE "C"`) made the inner function's `lane = p_lane`
    // compare in "C", which is not the collation of `jobs_claim`'s `lane` (the database
    // default), so the index could not narrow on the lane (16,990 entries read to claim one of
    // 17,000). Here every comparison names the collation of the column it compares: `lane` in
    // "default", `tenant` in "C" (the byte order the tenants take turns in, as on SQLite),
    // whatever collation the call or a variable carries.
    //
    // Each claim is one index range scan from the cursor in `jobs_claim`'s own order (tenant,
    // eligible_at, seq), locking the first row it may take: the next tenant with eligible work
    // that no other claim holds, and that tenant's job eligible longest — what migration 1's
    // two look-ups per job (the tenant, then its job) found.
    //
    // A claimed job's entry stays in the partial index, dead, until a vacuum, and sits at the
    // front of its tenant, where the next scan starts: a claim of 64 from one tenant stepped
    // over the 63 entries it had just made dead, which no other transaction may skip yet (a
    // visit of the heap each), and over the ones other workers' open claims left — the rate
    // fell over the run (BENCHMARKS.md, B7). So once a call comes back to
    // a tenant it has served (every tenant with work has had its turn), it stops scanning
    // from the cursor: it goes round the tenants it served, in the same order, each from just
    // after the job it last claimed of it (`(eligible_at, seq) > …`, a seek in the index),
    // dropping a tenant with nothing more. What became eligible meanwhile behind those jobs
    // (a reaped job, a claim rolled back) or in a tenant it did not serve waits for the next
    // call, which scans from the cursor again. That call steps over the entries of jobs
    // claimed since the last vacuum once per tenant, not once per job; those are marked dead
    // in the index by the first scan that finds them so, and are cheap to step over after.
    //
    // Not here, measured or ruled out (BENCHMARKS.md, B7): per-table autovacuum settings
    // (scale factor 0, a threshold of 10,000, no cost delay) made no difference to a
    // two-minute drain with as many jobs enqueued, with or without them, since autovacuum
    // visits a database at most once per `autovacuum_naptime` (server-wide, 1 min) either
    // way, and a B7 row is over before the first visit; a lower `fillfactor` makes room for
    // HOT updates, but a claim and a completion change `state`, which indexes use, so
    // neither can be one.
    r#"DROP FUNCTION llm_failover_claim_in_lane(text, text, text, bigint, bigint);
     CREATE OR REPLACE FUNCTION llm_failover_claim(
         p_lanes text[], p_worker text, p_lease_until bigint, p_now bigint, p_max integer
     ) RETURNS SETOF jobs LANGUAGE plpgsql AS $$
     -- Up to p_max claims, lane by lane in the order given, each lane's tenants in turn from
     -- its cursor (in byte order, wrapping round), each tenant's job eligible longest first.
     -- The cursor's row is locked without waiting: while another claim holds it, this one
     -- starts from its committed value and leaves it as it is. Tenants are never empty, so
     -- every one sorts after ''.
     DECLARE
         v_lane    text;
         v_cursor  text;
         v_start   text;
         v_held    boolean;
         v_job     jobs;
         v_claimed integer := 0;
         -- The lane's tenants this call has served, in the order served, and the key of the
         -- job it last claimed of each; a tenant with nothing more is NULL.
         v_tenants text[];
         v_at      bigint[];
         v_seq     bigint[];
         v_live    integer;
         -- Where the call is in its round of v_tenants; NULL while it scans from the cursor.
         v_i       integer;
     BEGIN
         FOREACH v_lane IN ARRAY p_lanes LOOP
             EXIT WHEN v_claimed >= p_max;
             SELECT tenant INTO v_cursor FROM tenant_cursor
              WHERE lane = v_lane COLLATE "default"
                FOR UPDATE SKIP LOCKED;
             v_held := FOUND;
             IF NOT v_held THEN
                 SELECT tenant INTO v_cursor FROM tenant_cursor
                  WHERE lane = v_lane COLLATE "default";
                 IF NOT FOUND THEN
                     INSERT INTO tenant_cursor (lane, tenant) VALUES (v_lane, '')
                         ON CONFLICT DO NOTHING;
                     v_held := FOUND;
                 END IF;
             END IF;
             v_cursor := coalesce(v_cursor, '');
             v_start := v_cursor;
             v_tenants := '{}';
             v_at := '{}';
             v_seq := '{}';
             v_i := NULL;
             WHILE v_claimed < p_max LOOP
                 IF v_i IS NULL THEN
                     -- The first job it may take after the cursor; else from the first
                     -- tenant up to the cursor's.
                     UPDATE jobs SET state = 'running', attempt = attempt + 1,
                                     lease_until = p_lease_until, worker = p_worker
                      WHERE seq = (SELECT seq FROM jobs
                                    WHERE state = 'ready' AND lane = v_lane COLLATE "default"
                                      AND tenant > v_cursor COLLATE "C"
                                      AND eligible_at <= p_now
                                    ORDER BY tenant, eligible_at, seq LIMIT 1
                                    FOR UPDATE SKIP LOCKED)
                      RETURNING * INTO v_job;
                     IF NOT FOUND THEN
                         UPDATE jobs SET state = 'running', attempt = attempt + 1,
                                         lease_until = p_lease_until, worker = p_worker
                          WHERE seq = (SELECT seq FROM jobs
                                        WHERE state = 'ready'
                                          AND lane = v_lane COLLATE "default"
                                          AND tenant <= v_cursor COLLATE "C"
                                          AND eligible_at <= p_now
                                        ORDER BY tenant, eligible_at, seq LIMIT 1
                                        FOR UPDATE SKIP LOCKED)
                          RETURNING * INTO v_job;
                         EXIT WHEN NOT FOUND;
                     END IF;
                     v_i := array_position(v_tenants, v_job.tenant COLLATE "C");
                     IF v_i IS NULL THEN
                         v_tenants := v_tenants || v_job.tenant;
                         v_at := v_at || v_job.eligible_at;
                         v_seq := v_seq || v_job.seq;
                     ELSE
                         -- Back at a tenant it served: from now on, round v_tenants.
                         v_live := cardinality(v_tenants);
                         v_at[v_i] := v_job.eligible_at;
                         v_seq[v_i] := v_job.seq;
                     END IF;
                 ELSE
                     v_job := NULL;
                     -- The next tenant of the round, from just after the job last claimed
                     -- of it: a seek, not a walk over the entries this call made dead.
                     WHILE v_live > 0 LOOP
                         v_i := v_i % cardinality(v_tenants) + 1;
                         CONTINUE WHEN v_tenants[v_i] IS NULL;
                         UPDATE jobs SET state = 'running', attempt = attempt + 1,
                                         lease_until = p_lease_until, worker = p_worker
                          WHERE seq = (SELECT seq FROM jobs
                                        WHERE state = 'ready'
                                          AND lane = v_lane COLLATE "default"
                                          AND tenant = v_tenants[v_i] COLLATE "C"
                                          AND eligible_at <= p_now
                                          AND (eligible_at, seq) > (v_at[v_i], v_seq[v_i])
                                        ORDER BY eligible_at, seq LIMIT 1
                                        FOR UPDATE SKIP LOCKED)
                          RETURNING * INTO v_job;
                         EXIT WHEN FOUND;
                         v_tenants[v_i] := NULL;
                         v_live := v_live - 1;
                     END LOOP;
                     EXIT WHEN v_job.seq IS NULL;
                     v_at[v_i] := v_job.eligible_at;
                     v_seq[v_i] := v_job.seq;
                 END IF;
                 v_cursor := v_job.tenant;
                 v_claimed := v_claimed + 1;
                 RETURN NEXT v_job;
             END LOOP;
             IF v_held AND v_cursor <> v_start COLLATE "C" THEN
                 UPDATE tenant_cursor SET tenant = v_cursor
                  WHERE lane = v_lane COLLATE "default";
             END IF;
         END LOOP;
     END $$;"#,
];

/// The schema version this code writes.
pub(super) const VERSION: i64 = MIGRATIONS.len() as i64;

/// The advisory lock migrations hold ("llm_jobs" in ASCII): one migrator at a time.
const MIGRATION_LOCK: i64 = 0x6c6c_6d5f_6a6f_6273;

/// Brings the database `client` is connected to up to [`VERSION`].
///
/// # Errors
///
/// `Config` for a schema newer than [`VERSION`]; `Io` for anything the server refuses.
pub(super) async fn migrate(client: &mut Client, db: &str) -> Result<()> {
    let err = |doing: &'static str| move |e| pg_error(db, doing, &e);
    let version = read_version(client)
        .await
        .map_err(err("reading the schema version"))?;
    check_schema_version(db, VERSION, "database", version.unwrap_or(0))?;
    if version == Some(VERSION) {
        return Ok(());
    }
    let tx = client
        .transaction()
        .await
        .map_err(err("starting the migration"))?;
    tx.batch_execute(&format!(
        "SELECT pg_advisory_xact_lock({MIGRATION_LOCK});
         CREATE TABLE IF NOT EXISTS llm_failover_schema (version BIGINT NOT NULL);"
    ))
    .await
    .map_err(err("locking the migration"))?;
    // Another process may have migrated between the read above and the lock.
    let version = tx
        .query_opt("SELECT version FROM llm_failover_schema", &[])
        .await
        .map_err(err("reading the schema version"))?
        .map(|row| row.try_get::<_, i64>(0))
        .transpose()
        .map_err(err("reading the schema version"))?;
    let applied = version.unwrap_or(0);
    check_schema_version(db, VERSION, "database", applied)?;
    for (n, sql) in MIGRATIONS.iter().enumerate().skip(applied as usize) {
        tx.batch_execute(sql)
            .await
            .map_err(|e| pg_error(db, &format!("applying migration {}", n + 1), &e))?;
    }
    let record = match version {
        Some(_) => "UPDATE llm_failover_schema SET version = $1",
        None => "INSERT INTO llm_failover_schema (version) VALUES ($1)",
    };
    tx.execute(record, &[&VERSION])
        .await
        .map_err(err("recording the schema version"))?;
    tx.commit().await.map_err(err("committing the migration"))
}

/// The recorded version; `None` before the first migration (no table, or no row).
async fn read_version(client: &Client) -> Result<Option<i64>, tokio_postgres::Error> {
    let exists = client
        .query_one("SELECT to_regclass('llm_failover_schema') IS NOT NULL", &[])
        .await?
        .try_get::<_, bool>(0)?;
    if !exists {
        return Ok(None);
    }
    client
        .query_opt("SELECT version FROM llm_failover_schema", &[])
        .await?
        .map(|row| row.try_get(0))
        .transpose()
}

/// A PostgreSQL failure as an [`Error`] of kind `Io`, naming the database (`host:port/db`)
/// and what was being done.
pub(super) fn pg_error(db: &str, doing: &str, e: &tokio_postgres::Error) -> Error {
    let hint = if e.as_db_error().is_some() {
        ""
    } else if e.is_closed() {
        " (the connection was closed: the server restarted or went away; the next call \
         connects again)"
    } else if let Some(hint) = super::tls::hint(e) {
        hint
    } else if describe_error(e).starts_with("error connecting") {
        " (is PostgreSQL running and accepting connections there?)"
    } else {
        ""
    };
    Error::new(
        ErrorKind::Io,
        format!("jobs database {db}: {doing}: {}{hint}", describe_error(e)),
    )
}

/// The error with its causes (tokio-postgres keeps the server's message in the source):
/// `db error: ERROR: … (SQLSTATE 23505)`, `error connecting to server: Connection refused`.
pub(super) fn describe_error(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let (severity, message, code) = (db.severity(), db.message(), db.code().code());
        let mut text = format!("{severity}: {message} (SQLSTATE {code})");
        if let Some(detail) = db.detail() {
            text.push_str(&format!("; {detail}"));
        }
        return text;
    }
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_above_the_code_or_below_zero_are_refused() {
        assert!(check_schema_version("h:5432/q", VERSION, "database", 0).is_ok());
        assert!(check_schema_version("h:5432/q", VERSION, "database", VERSION).is_ok());
        for bad in [VERSION + 1, -1] {
            let err = check_schema_version("h:5432/q", VERSION, "database", bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config);
            assert!(err.to_string().contains("h:5432/q"), "{err}");
        }
    }
}
