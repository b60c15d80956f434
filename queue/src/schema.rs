//! The one schema, as numbered migrations, and opening a connection onto it.
//!
//! `PRAGMA user_version` holds how many migrations a database has had. Opening applies the
//! missing ones in one `BEGIN IMMEDIATE` transaction (so two processes opening a new file at
//! once migrate it once), and refuses a database whose version is higher than this code knows:
//! an older binary must not write rows whose meaning it does not know.

use std::time::Duration;

use rusqlite::{Connection, TransactionBehavior};

use crate::job::check_schema_version;
use llm_failover_core::{Error, ErrorKind, Result};

/// How long a statement waits for another connection's write lock before failing.
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Migration `n` (1-based) is `MIGRATIONS[n - 1]`; never edit one that has shipped, add one.
const MIGRATIONS: &[&str] = &[
    // 1: jobs and the per-lane tenant cursor.
    "CREATE TABLE jobs (
         seq         INTEGER PRIMARY KEY,
         id          TEXT NOT NULL UNIQUE,
         kind        TEXT NOT NULL,
         tenant      TEXT NOT NULL,
         lane        TEXT NOT NULL CHECK (lane IN ('interactive', 'bulk')),
         payload     TEXT NOT NULL,
         state       TEXT NOT NULL
                     CHECK (state IN ('ready', 'running', 'done', 'dead', 'review')),
         attempt     INTEGER NOT NULL DEFAULT 0,
         failures    INTEGER NOT NULL DEFAULT 0,
         eligible_at INTEGER NOT NULL,
         lease_until INTEGER,
         worker      TEXT,
         last_error  TEXT,
         reason      TEXT,
         result      TEXT,
         created_at  INTEGER NOT NULL
     );
     CREATE INDEX jobs_claim ON jobs (lane, tenant, eligible_at, seq) WHERE state = 'ready';
     CREATE INDEX jobs_state ON jobs (state);
     CREATE TABLE tenant_cursor (
         lane   TEXT PRIMARY KEY,
         tenant TEXT NOT NULL
     );",
];

/// The schema version this code writes.
pub(crate) const VERSION: i64 = MIGRATIONS.len() as i64;

/// An SQLite failure as an [`Error`] of kind `Io`, naming the database and what was being done.
pub(crate) fn sql_error(db: &str, doing: &str, e: rusqlite::Error) -> Error {
    llm_failover_core::wing::sqlite_error(
        &format!("jobs database {db}"),
        "the busy timeout",
        doing,
        e,
    )
}

/// Sets the connection up (busy timeout, WAL for a file) and brings its schema to [`VERSION`].
///
/// # Errors
///
/// `Config` for a schema newer than [`VERSION`]; `Io` for anything SQLite refuses.
pub(crate) fn prepare(
    conn: &mut Connection,
    db: &str,
    in_memory: bool,
    busy_timeout: Duration,
) -> Result<()> {
    let err = |doing: &'static str| move |e| sql_error(db, doing, e);
    conn.busy_timeout(busy_timeout)
        .map_err(err("setting the busy timeout"))?;
    if !in_memory {
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(err("switching to WAL"))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(Error::new(
                ErrorKind::Io,
                format!("jobs database {db}: SQLite kept journal mode {mode:?}, not WAL"),
            ));
        }
    }
    let version = user_version(conn).map_err(err("reading the schema version"))?;
    check_schema_version(db, VERSION, "file", version)?;
    if version == VERSION {
        return Ok(());
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(err("starting the migration"))?;
    // Another process may have migrated between the read above and the lock.
    let version = user_version(&tx).map_err(err("reading the schema version"))?;
    check_schema_version(db, VERSION, "file", version)?;
    for (n, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        tx.execute_batch(sql)
            .map_err(|e| sql_error(db, &format!("applying migration {}", n + 1), e))?;
    }
    tx.pragma_update(None, "user_version", VERSION)
        .map_err(err("recording the schema version"))?;
    tx.commit().map_err(err("committing the migration"))
}

fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_file(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "llm-failover-jobs-schema-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("queue.sqlite")
    }

    #[test]
    fn a_new_file_is_migrated_to_the_latest_version_once() {
        let path = temp_file("migrate");
        for _ in 0..2 {
            let mut conn = Connection::open(&path).unwrap();
            prepare(&mut conn, "q", false, BUSY_TIMEOUT).unwrap();
            assert_eq!(user_version(&conn).unwrap(), VERSION);
            let mode: String = conn
                .query_row("PRAGMA journal_mode", [], |r| r.get(0))
                .unwrap();
            assert_eq!(mode, "wal");
        }
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_file_locked_past_the_busy_timeout_is_an_io_error_naming_it() {
        let path = temp_file("locked");
        let holder = Connection::open(&path).unwrap();
        holder.execute_batch("BEGIN EXCLUSIVE").unwrap();
        let mut conn = Connection::open(&path).unwrap();
        let err = prepare(&mut conn, "queue.sqlite", false, Duration::from_millis(20)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Io);
        let message = err.to_string();
        assert!(
            message.contains("jobs database queue.sqlite") && message.contains("busy timeout"),
            "{message}"
        );
        drop(holder);
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn versions_above_the_code_or_below_zero_are_refused() {
        assert!(check_schema_version("q", VERSION, "file", 0).is_ok());
        assert!(check_schema_version("q", VERSION, "file", VERSION).is_ok());
        for bad in [VERSION + 1, -1] {
            assert_eq!(
                check_schema_version("q", VERSION, "file", bad)
                    .unwrap_err()
                    .kind(),
                ErrorKind::Config
            );
        }
    }
}
