//! What a cache backend does: keep bytes under a 32-byte key until a wall-clock time, drop
//! the oldest entries past a bound. The [`Cache`](super::Cache) in front of it decides what
//! to keep, under which key, and turns every backend error into a miss with a warning.

use std::fmt;

use async_trait::async_trait;

use crate::error::Result;

/// A cache key: the SHA-256 of everything that decides the answer (see `key.rs`). Never
/// the request itself, never a credential.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(pub [u8; 32]);

impl Key {
    /// Lower-case hex, 64 characters (Redis key names; logs show its first 12).
    pub fn hex(&self) -> String {
        use std::fmt::Write;
        let mut s = String::with_capacity(64);
        for b in self.0 {
            let _ = write!(s, "{b:02x}");
        }
        s
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({}…)", &self.hex()[..12])
    }
}

/// One stored answer: the serialized answer and its times, in wall-clock milliseconds since
/// the Unix epoch as the client's clock tells them (so tests move them with a manual clock).
#[derive(Clone, PartialEq, Eq)]
pub struct Stored {
    /// The answer, as `serde_json` wrote it.
    pub value: Vec<u8>,
    /// When it was stored.
    pub stored_at_ms: i64,
    /// Not served at or after this time.
    pub expires_at_ms: i64,
}

impl fmt::Debug for Stored {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stored")
            .field("value_len", &self.value.len())
            .field("stored_at_ms", &self.stored_at_ms)
            .field("expires_at_ms", &self.expires_at_ms)
            .finish()
    }
}

/// A cache backend. Every method may fail (a file locked or corrupt, Redis gone); the front
/// logs and counts the failure and goes on as if nothing were cached.
// `len` counts what a backend keeps for the cache's stats; an `is_empty` would be one more
// call to Redis that nothing asks.
#[allow(clippy::len_without_is_empty)]
#[async_trait]
pub trait Store: Send + Sync + fmt::Debug {
    /// The entry under `key`, unless there is none or it expired at `now_ms`
    /// (`expires_at_ms <= now_ms`).
    async fn get(&self, key: &Key, now_ms: i64) -> Result<Option<Stored>>;

    /// Stores `entry` under `key`, replacing what was there; then, when more than the bound's
    /// entries are kept, drops the oldest stored (and any expired) — at once or within a few
    /// more puts, as the backend documents.
    async fn put(&self, key: &Key, entry: Stored) -> Result<()>;

    /// How many entries are kept now (expired ones not yet dropped included).
    async fn len(&self) -> Result<u64>;

    /// Drops every entry.
    async fn clear(&self) -> Result<()>;

    /// Where the entries live, for warnings: `memory`, `sqlite:PATH`, `redis://host:port/db`
    /// (never a password).
    fn describe(&self) -> &str;

    /// Whether the backend serves this client, asked once before work starts: `Config` when
    /// its server refuses the client's credentials (a cache that cannot be reached is a miss,
    /// not an error). `Ok` (the default) for a backend of this process or file.
    async fn check(&self) -> Result<()> {
        Ok(())
    }
}

/// Builds the cache's store on Redis: the Redis wing's (`llm-failover-redis`), found in
/// `REDIS_CACHES` when the build links it.
pub trait RedisCaches: Sync {
    /// The store on the Redis at `url`: every key starts with `prefix`, a call slower than
    /// `timeout` is a miss, at most `max_entries` are kept; `tls` for a `rediss://` URL;
    /// `cluster` when the URL names a node of a Redis Cluster.
    fn cache_store(
        &self,
        url: &str,
        prefix: &str,
        timeout: std::time::Duration,
        max_entries: u64,
        tls: &crate::ratelimit::RedisTls,
        cluster: bool,
    ) -> Result<Box<dyn Store>>;
}

/// The Redis cache stores this build links: none, or the Redis wing's.
#[linkme::distributed_slice]
pub static REDIS_CACHES: [&'static dyn RedisCaches];

/// The Redis wing's cache stores, when the build links the wing.
pub(crate) fn redis_caches() -> Option<&'static dyn RedisCaches> {
    REDIS_CACHES.first().copied()
}
