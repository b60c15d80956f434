//! [`SqliteStore`]: cached answers in one SQLite file, shared by every process that opens it.
//!
//! * **Opening is lazy.** [`SqliteStore::open`] touches nothing; the first call opens the file
//!   (creating it and its table), and a call after a failed open tries again. A missing
//!   directory, a file that is not a database or a file locked by another process make calls
//!   fail (the front serves a miss and warns); they never stop the client from being built.
//! * **Short waits.** WAL mode (readers never wait for a writer), `synchronous = NORMAL`, and a
//!   busy timeout of [`BUSY_TIMEOUT`] (100 ms): a locked cache must not stall a request when a
//!   miss only costs the provider call.
//! * **Hits are pure reads**: one `SELECT` by primary key, nothing written.
//! * **The bound is approximate.** Trimming (the expired entries, then the oldest stored beyond
//!   `max_entries`) runs when the file is first opened and then every [`TRIM_EVERY`] puts of
//!   this store, in the same transaction as that put. Between two trims the file may hold up to
//!   [`TRIM_EVERY`] entries more than the bound, plus whatever other processes put meanwhile.
//! * **Schema**: table `llm_failover_cache` (`WITHOUT ROWID`, keyed by the 32-byte key, an
//!   index on `stored_at`), its version in `llm_failover_cache_meta`; a file written by a newer
//!   schema is refused (a `Config` error) rather than misread. The names are the cache's own, so
//!   the file may also hold other tables.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::store::{Key, Store, Stored};
use crate::error::{Error, ErrorKind, Result};

/// How long a statement waits for another connection's lock before the call fails.
const BUSY_TIMEOUT: Duration = Duration::from_millis(100);

/// Trimming runs every this many puts (and when the file is first opened).
const TRIM_EVERY: u64 = 64;

/// The schema version this code writes (in `llm_failover_cache_meta`).
const SCHEMA_VERSION: i64 = 1;

/// The tables, created in one `BEGIN IMMEDIATE` transaction by the first process to open a file.
const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS llm_failover_cache_meta (
        name  TEXT PRIMARY KEY,
        value INTEGER NOT NULL
    );
    CREATE TABLE IF NOT EXISTS llm_failover_cache (
        key        BLOB PRIMARY KEY,
        value      BLOB NOT NULL,
        stored_at  INTEGER NOT NULL,
        expires_at INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS llm_failover_cache_stored_at
        ON llm_failover_cache (stored_at);";

/// A hit: the entry under `?1` unless it expired at `?2`.
const GET: &str = "SELECT value, stored_at, expires_at FROM llm_failover_cache
                   WHERE key = ?1 AND expires_at > ?2";

/// Stores an entry, replacing the one under the same key.
const PUT: &str = "INSERT INTO llm_failover_cache (key, value, stored_at, expires_at)
                   VALUES (?1, ?2, ?3, ?4)
                   ON CONFLICT (key) DO UPDATE SET value = excluded.value,
                       stored_at = excluded.stored_at, expires_at = excluded.expires_at";

/// Drops every entry but the `?1` stored last (walking the `stored_at` index newest first).
const TRIM_OLDEST: &str = "DELETE FROM llm_failover_cache WHERE key IN (
                               SELECT key FROM llm_failover_cache
                               ORDER BY stored_at DESC, key DESC LIMIT -1 OFFSET ?1)";

/// A cache backend on one SQLite file (the `sqlite` feature), for one process or several.
///
/// One connection, opened on first use and kept; every call runs on tokio's blocking pool
/// and holds the connection only for its own statements. See the module documentation for
/// the bound, which may be exceeded by up to [`TRIM_EVERY`] entries between trims.
pub(crate) struct SqliteStore {
    path: Arc<Path>,
    /// `sqlite:<path as given>`, for messages.
    name: Arc<str>,
    max_entries: u64,
    /// The connection; `None` until the first call opens it (or after an open failed).
    conn: Arc<Mutex<Option<Connection>>>,
    /// Puts since the last trim (a trim that could not run leaves it due).
    puts_since_trim: Arc<AtomicU64>,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .field("max_entries", &self.max_entries)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// A store on the SQLite file at `path` keeping about `max_entries` entries. Nothing is
    /// opened here: the first call opens (or creates) the file, so this never fails; a path
    /// that cannot be opened makes each call fail instead, and each call tries again.
    pub(crate) fn open(path: impl AsRef<Path>, max_entries: u64) -> SqliteStore {
        let path: PathBuf = path.as_ref().to_owned();
        let name: Arc<str> = format!("sqlite:{}", path.display()).into();
        SqliteStore {
            path: path.into(),
            name,
            max_entries,
            conn: Arc::new(Mutex::new(None)),
            puts_since_trim: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Runs `f` on the connection on the blocking pool, opening the file first if need be
    /// (`now_ms`, when known, lets the trim on opening drop expired entries too).
    async fn run<T, F>(&self, doing: &'static str, now_ms: Option<i64>, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let conn = self.conn.clone();
        let path = self.path.clone();
        let name = self.name.clone();
        let puts = self.puts_since_trim.clone();
        let bound = self.max_entries;
        tokio::task::spawn_blocking(move || {
            // A panic inside `f` rolled its transaction back as it unwound: the connection is
            // still sound, so a poisoned lock is taken over.
            let mut guard = conn.lock().unwrap_or_else(PoisonError::into_inner);
            let conn = match &mut *guard {
                Some(conn) => conn,
                slot @ None => {
                    let conn = slot.insert(open_file(&path, &name)?);
                    match trim(conn, bound, now_ms) {
                        Ok(()) => puts.store(0, Ordering::Relaxed),
                        // Locked by another process now: the next put trims.
                        Err(_) => puts.store(TRIM_EVERY, Ordering::Relaxed),
                    }
                    conn
                }
            };
            f(conn).map_err(|e| sql_error(&name, doing, e))
        })
        .await
        .map_err(|e| {
            Error::new(
                ErrorKind::Io,
                format!("cache {}: {doing}: the task did not finish: {e}", self.name),
            )
        })?
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn get(&self, key: &Key, now_ms: i64) -> Result<Option<Stored>> {
        let key = key.0;
        self.run("reading", Some(now_ms), move |conn| {
            conn.prepare_cached(GET)?
                .query_row(params![&key[..], now_ms], |row| {
                    Ok(Stored {
                        value: row.get(0)?,
                        stored_at_ms: row.get(1)?,
                        expires_at_ms: row.get(2)?,
                    })
                })
                .optional()
        })
        .await
    }

    async fn put(&self, key: &Key, entry: Stored) -> Result<()> {
        let key = key.0;
        let puts = self.puts_since_trim.clone();
        let bound = self.max_entries;
        let now_ms = entry.stored_at_ms;
        self.run("writing", Some(now_ms), move |conn| {
            let due = puts.fetch_add(1, Ordering::Relaxed) + 1 >= TRIM_EVERY;
            let upsert = |conn: &Connection| {
                conn.prepare_cached(PUT)?
                    .execute(params![
                        &key[..],
                        entry.value,
                        entry.stored_at_ms,
                        entry.expires_at_ms
                    ])
                    .map(drop)
            };
            if !due {
                return upsert(conn);
            }
            // The put and its trim together: an error leaves neither done, and the trim due.
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            upsert(&tx)?;
            trim(&tx, bound, Some(now_ms))?;
            tx.commit()?;
            puts.store(0, Ordering::Relaxed);
            Ok(())
        })
        .await
    }

    async fn len(&self) -> Result<u64> {
        self.run("counting", None, |conn| {
            conn.query_row("SELECT count(*) FROM llm_failover_cache", [], |r| {
                r.get::<_, i64>(0)
            })
            .map(|n| n.max(0) as u64)
        })
        .await
    }

    async fn clear(&self) -> Result<()> {
        self.run("clearing", None, |conn| {
            conn.execute("DELETE FROM llm_failover_cache", []).map(drop)
        })
        .await
    }

    fn describe(&self) -> &str {
        &self.name
    }
}

/// Opens the file at `path` and sets the connection up: busy timeout, WAL, `synchronous =
/// NORMAL`, the schema created or checked.
///
/// # Errors
///
/// `Io` for anything SQLite refuses (a missing directory, not a database, locked past the busy
/// timeout); `Config` for a file whose cache schema is newer than [`SCHEMA_VERSION`].
fn open_file(path: &Path, name: &str) -> Result<Connection> {
    let err = |doing: &'static str| move |e| sql_error(name, doing, e);
    let mut conn = Connection::open(path).map_err(err("opening"))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(err("setting the busy timeout"))?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .map_err(err("switching to WAL"))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Error::new(
            ErrorKind::Io,
            format!("cache {name}: opening: SQLite kept journal mode {mode:?}, not WAL"),
        ));
    }
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(err("setting synchronous = NORMAL"))?;
    let version = schema_version(&conn).map_err(err("reading the schema version"))?;
    check_version(name, version)?;
    if version == SCHEMA_VERSION {
        return Ok(conn);
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(err("creating the schema"))?;
    // Another process may have created it between the read above and the lock.
    let version = schema_version(&tx).map_err(err("reading the schema version"))?;
    check_version(name, version)?;
    tx.execute_batch(SCHEMA)
        .map_err(err("creating the schema"))?;
    tx.execute(
        "INSERT INTO llm_failover_cache_meta (name, value) VALUES ('schema_version', ?1)
         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        params![SCHEMA_VERSION],
    )
    .map_err(err("recording the schema version"))?;
    tx.commit().map_err(err("creating the schema"))?;
    Ok(conn)
}

/// The cache schema's version in this file: 0 when it has none yet.
fn schema_version(conn: &Connection) -> rusqlite::Result<i64> {
    let has_meta: bool = conn.query_row(
        "SELECT count(*) > 0 FROM sqlite_master
         WHERE type = 'table' AND name = 'llm_failover_cache_meta'",
        [],
        |r| r.get(0),
    )?;
    if !has_meta {
        return Ok(0);
    }
    let version: Option<i64> = conn
        .query_row(
            "SELECT value FROM llm_failover_cache_meta WHERE name = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    Ok(version.unwrap_or(0))
}

/// Refuses a file written by a newer schema: this build would misread (or spoil) its entries.
fn check_version(name: &str, version: i64) -> Result<()> {
    if version > SCHEMA_VERSION {
        return Err(Error::config(format!(
            "cache {name}: the file's cache schema is version {version}, newer than this \
             build's {SCHEMA_VERSION}: use a newer llm-failover, or another file"
        )));
    }
    Ok(())
}

/// Drops the entries expired at `now_ms` (when known), then all but the `bound` stored last.
fn trim(conn: &Connection, bound: u64, now_ms: Option<i64>) -> rusqlite::Result<()> {
    if let Some(now_ms) = now_ms {
        conn.prepare_cached("DELETE FROM llm_failover_cache WHERE expires_at <= ?1")?
            .execute(params![now_ms])?;
    }
    let keep = i64::try_from(bound).unwrap_or(i64::MAX);
    conn.prepare_cached(TRIM_OLDEST)?.execute(params![keep])?;
    Ok(())
}

/// An SQLite failure as an `Io` error naming the file and what was being done, with a hint
/// for the common causes. Never the cached value (no statement's parameters are in it).
fn sql_error(name: &str, doing: &str, e: rusqlite::Error) -> Error {
    Error::sqlite(
        &format!("cache {name}"),
        "the cache's 100 ms busy timeout",
        doing,
        e,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path in a fresh directory of its own under the temp dir, removed on drop.
    struct TempDb {
        dir: PathBuf,
        path: PathBuf,
    }

    impl TempDb {
        fn new(name: &str) -> TempDb {
            use std::sync::atomic::AtomicU32;
            static SEQ: AtomicU32 = AtomicU32::new(0);
            let dir = std::env::temp_dir().join(format!(
                "llm-failover-cache-sqlite-{name}-{}-{}",
                std::process::id(),
                SEQ.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join("cache.db");
            TempDb { dir, path }
        }
    }

    impl Drop for TempDb {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn key(n: u8) -> Key {
        Key([n; 32])
    }

    fn entry(value: &str, stored_at_ms: i64, expires_at_ms: i64) -> Stored {
        Stored {
            value: value.as_bytes().to_vec(),
            stored_at_ms,
            expires_at_ms,
        }
    }

    #[tokio::test]
    async fn round_trips_an_entry() {
        let db = TempDb::new("round-trip");
        let store = SqliteStore::open(&db.path, 100);
        assert_eq!(store.get(&key(1), 0).await.unwrap(), None);
        store
            .put(&key(1), entry("answer", 10, 1_000))
            .await
            .unwrap();
        assert_eq!(
            store.get(&key(1), 20).await.unwrap(),
            Some(entry("answer", 10, 1_000))
        );
        assert_eq!(store.get(&key(2), 20).await.unwrap(), None);
        assert_eq!(store.describe(), format!("sqlite:{}", db.path.display()));
    }

    #[tokio::test]
    async fn an_entry_expires_at_exactly_its_expiry() {
        let db = TempDb::new("expiry");
        let store = SqliteStore::open(&db.path, 100);
        store.put(&key(1), entry("a", 0, 1_000)).await.unwrap();
        assert!(store.get(&key(1), 999).await.unwrap().is_some());
        assert_eq!(store.get(&key(1), 1_000).await.unwrap(), None);
        assert_eq!(store.get(&key(1), 5_000).await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_put_replaces_the_entry_under_its_key() {
        let db = TempDb::new("replace");
        let store = SqliteStore::open(&db.path, 100);
        store.put(&key(1), entry("old", 0, 100)).await.unwrap();
        store.put(&key(1), entry("new", 50, 500)).await.unwrap();
        assert_eq!(
            store.get(&key(1), 200).await.unwrap(),
            Some(entry("new", 50, 500))
        );
        assert_eq!(store.len().await.unwrap(), 1);
    }

    #[tokio::test]
    async fn trimming_every_64_puts_keeps_the_newest_stored() {
        let db = TempDb::new("bound");
        let store = SqliteStore::open(&db.path, 3);
        // Stored out of key order, so the oldest are not the lowest keys.
        for i in 0..(TRIM_EVERY - 1) {
            let n = (TRIM_EVERY - 1 - i) as u8;
            store
                .put(&key(n), entry("v", i as i64, 1_000_000))
                .await
                .unwrap();
        }
        assert_eq!(store.len().await.unwrap(), TRIM_EVERY - 1, "no trim yet");
        store
            .put(&key(0), entry("v", 100, 1_000_000))
            .await
            .unwrap();
        assert_eq!(store.len().await.unwrap(), 3);
        // Kept: stored at 100 (key 0), 62 (key 1), 61 (key 2).
        for n in 0..3 {
            assert!(store.get(&key(n), 200).await.unwrap().is_some(), "{n}");
        }
        assert_eq!(store.get(&key(3), 200).await.unwrap(), None);
    }

    #[tokio::test]
    async fn opening_trims_expired_then_oldest() {
        let db = TempDb::new("open-trim");
        let big = SqliteStore::open(&db.path, 1_000);
        for n in 0..10u8 {
            let expires = if n < 2 { 50 } else { 1_000 };
            big.put(&key(n), entry("v", i64::from(n), expires))
                .await
                .unwrap();
        }
        assert_eq!(big.len().await.unwrap(), 10);
        let small = SqliteStore::open(&db.path, 3);
        // Its first call opens the file and trims: expired at 100 (keys 0, 1), then the oldest.
        assert!(small.get(&key(9), 100).await.unwrap().is_some());
        assert_eq!(small.len().await.unwrap(), 3);
        assert!(small.get(&key(7), 100).await.unwrap().is_some());
        assert_eq!(small.get(&key(6), 100).await.unwrap(), None);
    }

    #[tokio::test]
    async fn clear_drops_everything_and_len_counts() {
        let db = TempDb::new("clear");
        let store = SqliteStore::open(&db.path, 100);
        assert_eq!(store.len().await.unwrap(), 0);
        for n in 0..5 {
            store.put(&key(n), entry("v", 0, 10)).await.unwrap();
        }
        // Expired entries not yet trimmed are counted.
        assert_eq!(store.len().await.unwrap(), 5);
        store.clear().await.unwrap();
        assert_eq!(store.len().await.unwrap(), 0);
        assert_eq!(store.get(&key(1), 0).await.unwrap(), None);
    }

    #[tokio::test]
    async fn two_stores_on_one_file_see_each_others_puts() {
        let db = TempDb::new("shared");
        let a = SqliteStore::open(&db.path, 100);
        let b = SqliteStore::open(&db.path, 100);
        a.put(&key(1), entry("from a", 0, 100)).await.unwrap();
        assert_eq!(
            b.get(&key(1), 1).await.unwrap(),
            Some(entry("from a", 0, 100))
        );
        b.put(&key(2), entry("from b", 0, 100)).await.unwrap();
        assert_eq!(a.get(&key(2), 1).await.unwrap().unwrap().value, b"from b");
        assert_eq!(a.len().await.unwrap(), 2);
    }

    #[tokio::test]
    async fn a_file_that_is_not_a_database_fails_each_call_naming_it() {
        let db = TempDb::new("garbage");
        let garbage: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 13) as u8).collect();
        std::fs::write(&db.path, garbage).unwrap();
        let store = SqliteStore::open(&db.path, 100);
        let path = db.path.display().to_string();
        let err = store.get(&key(1), 0).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Io);
        assert!(err.to_string().contains(&format!("sqlite:{path}")), "{err}");
        assert!(err.to_string().contains("not an SQLite database"), "{err}");
        let err = store.put(&key(1), entry("secret answer", 0, 10)).await;
        let err = err.unwrap_err();
        assert!(err.to_string().contains(&path), "{err}");
        assert!(!err.to_string().contains("secret answer"), "{err}");
        assert!(store.len().await.is_err());
    }

    #[tokio::test]
    async fn a_file_locked_by_another_connection_fails_a_put_within_the_busy_timeout() {
        let db = TempDb::new("locked");
        let store = SqliteStore::open(&db.path, 100);
        store.put(&key(1), entry("v", 0, 100)).await.unwrap();
        let busy: i64 = {
            let conn = store.conn.lock().unwrap();
            let conn = conn.as_ref().unwrap();
            conn.query_row("PRAGMA busy_timeout", [], |r| r.get(0))
                .unwrap()
        };
        assert_eq!(busy, 100);
        let other = Connection::open(&db.path).unwrap();
        other.execute_batch("BEGIN EXCLUSIVE").unwrap();
        // Bounded well below the jobs queue's 5 s: the cache's own timeout applies.
        let second = key(2);
        let put = store.put(&second, entry("v", 0, 100));
        let err = tokio::time::timeout(Duration::from_secs(3), put)
            .await
            .expect("the put waits no longer than the busy timeout")
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Io);
        assert!(err.to_string().contains("locked"), "{err}");
        assert!(err.to_string().contains(&db.path.display().to_string()));
        other.execute_batch("ROLLBACK").unwrap();
        store.put(&key(2), entry("v", 0, 100)).await.unwrap();
        assert_eq!(store.len().await.unwrap(), 2);
    }

    #[tokio::test]
    async fn a_missing_directory_fails_each_call_until_it_exists() {
        let db = TempDb::new("missing-dir");
        let path = db.dir.join("not-yet").join("cache.db");
        let store = SqliteStore::open(&path, 100);
        let err = store.get(&key(1), 0).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Io);
        assert!(
            err.to_string().contains(&path.display().to_string()),
            "{err}"
        );
        assert!(store.put(&key(1), entry("v", 0, 100)).await.is_err());
        // The next call opens it again.
        std::fs::create_dir_all(db.dir.join("not-yet")).unwrap();
        store.put(&key(1), entry("v", 0, 100)).await.unwrap();
        assert!(store.get(&key(1), 1).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn a_row_of_the_wrong_type_is_an_error() {
        let db = TempDb::new("bad-row");
        let store = SqliteStore::open(&db.path, 100);
        store.put(&key(1), entry("v", 0, 100)).await.unwrap();
        let other = Connection::open(&db.path).unwrap();
        other
            .execute(
                "INSERT INTO llm_failover_cache VALUES (?1, 42, 'soon', 100)",
                params![&key(2).0[..]],
            )
            .unwrap();
        let err = store.get(&key(2), 1).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Io);
        assert!(err.to_string().contains("reading"), "{err}");
        assert!(store.get(&key(1), 1).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn a_newer_schema_is_refused() {
        let db = TempDb::new("newer");
        let store = SqliteStore::open(&db.path, 100);
        store.len().await.unwrap();
        let other = Connection::open(&db.path).unwrap();
        other
            .execute(
                "UPDATE llm_failover_cache_meta SET value = 2 WHERE name = 'schema_version'",
                [],
            )
            .unwrap();
        let err = SqliteStore::open(&db.path, 100).len().await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config);
        assert!(err.to_string().contains("version 2"), "{err}");
    }
}
