//! A response cache, so the same question is not paid for twice.
//!
//! Off unless configured ([`ClientBuilder::cache`](crate::ClientBuilder::cache), or `[cache]`
//! in `providers.toml`). With a cache, a chat request or a transcription is first looked up
//! by a key made of everything that decides its answer and of whose answer it is; a hit is
//! returned at once — no admission, no request, nothing spent — marked
//! [`Origin::Cache`](crate::Origin::Cache), and a streamed request replays it as a stream.
//! A miss goes through the providers as usual, and its answer is kept if it is whole.
//!
//! # What is stored, where, for how long
//!
//! - **Keys** are SHA-256 hashes of the request (messages, system prompt, model, `max_tokens`,
//!   temperature, stop sequences, response format, extra body fields) and, for each provider
//!   that may answer it in failover order, its name, model, extra body and the account the
//!   request spends there: the account's name and the API key itself, hashed with the rest
//!   and never stored. A transcription's key hashes its audio (and options). So one key's
//!   (or account's) answers are never served to another, and no key can be turned back into a
//!   prompt or a credential.
//! - **Values** are the answers, as this crate serializes them (text, finish reason, usage,
//!   provider, model, the provider's request id): what the caller was already given. They
//!   are as sensitive as the answers themselves: keep an SQLite cache file where you would
//!   keep the results, and a Redis cache on a server only your application reaches.
//! - **Kept** until their TTL ([`CacheBuilder::ttl`], 7 days by default, by the client's
//!   clock), and at most [`CacheBuilder::max_entries`] of them (100 000 by default): past it
//!   the oldest stored go first.
//! - **Kept only whole answers**: a success that finished (stop, length, a tool call, or no
//!   reason given) and says something (text other than whitespace, or a tool call; a
//!   transcript's text) — never an error, never an answer the content filter cut, never an
//!   empty one (a provider's empty 200 is returned, and the next ask is sent again), never a
//!   stream that did not reach its end.
//! - Backends: [`Cache::memory`] (this process),
// `Cache::sqlite` exists only with its feature: linked when it does.
#![cfg_attr(
    feature = "sqlite",
    doc = "  [`Cache::sqlite`] (a file: a rerun of a script hits it; feature `sqlite`),"
)]
#![cfg_attr(
    not(feature = "sqlite"),
    doc = "  `Cache::sqlite` (a file: a rerun of a script hits it; feature `sqlite`),"
)]
//!  and Redis (shared by replicas; the Redis wing, feature `redis` of `llm-failover`).
//!   [`Cache::open`] takes `memory`, `sqlite:PATH` or `redis://…`.
//!
//! A cache that fails — a file locked by another process past 100 ms, a corrupt file, Redis
//! gone — is a miss, with a warning when it starts failing and another when it works again;
//! the request itself never fails because of its cache. [`CacheStats::errors`] counts the
//! failures.
//!
//! Identical requests in flight at once in one process are sent once: the others wait for
//! the first one's answer and are served it from the cache (or, if it failed, the next one
//! goes).
//!
//! Per request, [`RequestOptions::cache`](crate::RequestOptions::cache) bypasses the cache or
//! refreshes an entry ([`CacheMode`]).
//!
//! # Examples
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use llm_failover::cache::Cache;
//! use llm_failover::provider::openai::OpenAi;
//! use llm_failover::{Client, ProviderId, ProviderSettings};
//!
//! let cache = Cache::builder("memory").ttl(Duration::from_secs(3600)).max_entries(1000).build()?;
//! let local = OpenAi::new(ProviderId::new("local"), "http://127.0.0.1:11434/v1".parse()?);
//! let client = Client::builder()
//!     .provider(Arc::new(local), ProviderSettings::new())
//!     .cache(cache.clone())
//!     .build()?;
//! assert_eq!(client.cache().map(|c| c.describe()), Some("memory"));
//! assert_eq!(cache.stats().hits, 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use crate::error::{Error, ErrorKind, Result};

mod key;
mod memory;
#[cfg(feature = "sqlite")]
mod sqlite;
mod store;

pub(crate) use key::{Answerer, bulk_key, chat_key, embedding_key, transcription_key};
pub(crate) use store::Key;
use store::{Store, Stored};

/// What the Redis wing's cache store implements, and where it adds itself
/// (`crate::wing::redis`).
pub(crate) mod wing {
    pub use super::store::{Key, REDIS_CACHES, RedisCaches, Store, Stored};
}

/// The default time an answer is kept.
pub const DEFAULT_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// The default most answers kept.
pub const DEFAULT_MAX_ENTRIES: u64 = 100_000;

/// What one request does with the cache ([`RequestOptions::cache`](crate::RequestOptions::cache)).
///
/// # Examples
///
/// ```
/// use llm_failover::cache::CacheMode;
/// use llm_failover::RequestOptions;
///
/// // Ask again, and keep the new answer in place of the old one.
/// let opts = RequestOptions::new().cache(CacheMode::Refresh);
/// # let _ = opts;
/// assert_eq!(CacheMode::default(), CacheMode::Use);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum CacheMode {
    /// Served from the cache when it holds the answer; else asked, and the answer kept.
    #[default]
    Use,
    /// Not looked up, and the answer not kept.
    Bypass,
    /// Not looked up; the answer kept, replacing what was there.
    Refresh,
}

/// What the cache did since it was made (shared by every client it was given to).
///
/// # Examples
///
/// ```
/// use llm_failover::cache::CacheStats;
///
/// let stats = CacheStats::default();
/// assert_eq!(stats.hit_ratio(), None); // nothing looked up yet
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct CacheStats {
    /// Requests served from the cache.
    pub hits: u64,
    /// Requests looked up and not found (then sent).
    pub misses: u64,
    /// Answers kept.
    pub stores: u64,
    /// Tokens the hits' answers had used when first asked (input and output): what was not
    /// spent again.
    pub tokens_saved: u64,
    /// Backend failures (each one a miss, or an answer not kept).
    pub errors: u64,
}

impl CacheStats {
    /// Hits over lookups (`None` before any).
    pub fn hit_ratio(&self) -> Option<f64> {
        let looked = self.hits + self.misses;
        (looked > 0).then(|| self.hits as f64 / looked as f64)
    }
}

/// A response cache: cheap to clone; clones share the backend, the counters and the
/// requests in flight. See [the module](self) for what it keeps, where and how long.
#[derive(Clone)]
pub struct Cache {
    inner: Arc<Inner>,
}

struct Inner {
    store: Box<dyn Store>,
    ttl: Duration,
    hits: AtomicU64,
    misses: AtomicU64,
    stores: AtomicU64,
    tokens_saved: AtomicU64,
    errors: AtomicU64,
    /// Whether the last backend call failed (a warning is logged when this changes).
    failing: AtomicBool,
    /// Lookups waiting now for an identical request in flight (tests watch it).
    waiting: AtomicU64,
    /// The requests being asked now, by key: the others with that key wait for it.
    flights: Mutex<HashMap<Key, watch::Receiver<()>>>,
}

impl fmt::Debug for Cache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cache")
            .field("store", &self.inner.store.describe())
            .field("ttl", &self.inner.ttl)
            .field("stats", &self.stats())
            .finish()
    }
}

/// Builds a [`Cache`] from a backend name and bounds.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use llm_failover::cache::Cache;
///
/// let cache = Cache::builder("memory").ttl(Duration::from_secs(600)).build()?;
/// assert_eq!(cache.ttl(), Duration::from_secs(600));
/// assert!(Cache::builder("ftp://nowhere").build().is_err());
/// # Ok::<(), llm_failover::Error>(())
/// ```
#[derive(Clone)]
#[must_use]
pub struct CacheBuilder {
    spec: secrecy::SecretString,
    ttl: Duration,
    max_entries: u64,
    prefix: String,
    timeout: Duration,
    tls: crate::ratelimit::RedisTls,
    cluster: bool,
}

impl fmt::Debug for CacheBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheBuilder")
            .field("ttl", &self.ttl)
            .field("max_entries", &self.max_entries)
            .finish_non_exhaustive()
    }
}

impl CacheBuilder {
    /// How long an answer is kept ([`DEFAULT_TTL`] unless set).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The most answers kept ([`DEFAULT_MAX_ENTRIES`] unless set); past it the oldest go.
    pub fn max_entries(mut self, n: u64) -> Self {
        self.max_entries = n;
        self
    }

    /// Redis only: every key starts with this (`llm-failover` unless set).
    pub fn redis_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Redis only: the longest one call may take before it counts as a miss (250 ms unless
    /// set).
    pub fn redis_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Redis over TLS (`rediss://`) only: the CA to trust and the client certificate
    /// (the platform's roots and none unless set).
    pub fn redis_tls(mut self, tls: crate::ratelimit::RedisTls) -> Self {
        self.tls = tls;
        self
    }

    /// Redis only: the URL names a node of a Redis Cluster. The entries are then kept in 16
    /// shards, each under a hash tag of its own (spread over the primaries), each bounded by
    /// its part of the most answers kept (`max_entries` ÷ 16, rounded up).
    pub fn redis_cluster(mut self, cluster: bool) -> Self {
        self.cluster = cluster;
        self
    }

    /// The cache.
    ///
    /// # Errors
    ///
    /// `Config` when the backend is not `memory`, `sqlite:PATH` or a `redis://` URL, when
    /// this build lacks its feature, or when the TTL or the bound is zero. An SQLite file
    /// is opened (or created) on first use, and a Redis server connected to then: a file or
    /// server that fails makes misses, not errors.
    pub fn build(self) -> Result<Cache> {
        if self.ttl.is_zero() {
            return Err(Error::config("cache: the TTL must be more than zero"));
        }
        if self.max_entries == 0 {
            return Err(Error::config("cache: max_entries must be at least 1"));
        }
        let store = self.store()?;
        Ok(Cache::from_store(store, self.ttl))
    }

    fn store(&self) -> Result<Box<dyn Store>> {
        use secrecy::ExposeSecret;
        let spec = self.spec.expose_secret();
        if spec == "memory" {
            return Ok(Box::new(memory::MemoryStore::new(self.max_entries)));
        }
        if let Some(path) = spec.strip_prefix("sqlite:") {
            if path.is_empty() {
                return Err(Error::config(
                    "cache `sqlite:`: the path after sqlite: is empty",
                ));
            }
            return self.sqlite(path);
        }
        if spec.starts_with("redis://") || spec.starts_with("rediss://") {
            return self.redis(spec);
        }
        let shown: String = spec.chars().take_while(|c| *c != ':').take(20).collect();
        Err(Error::config(format!(
            "cache `{shown}…`: not a cache backend; write memory, sqlite:PATH or redis://host:port"
        )))
    }

    #[cfg(feature = "sqlite")]
    fn sqlite(&self, path: &str) -> Result<Box<dyn Store>> {
        Ok(Box::new(sqlite::SqliteStore::open(path, self.max_entries)))
    }

    #[cfg(not(feature = "sqlite"))]
    fn sqlite(&self, _: &str) -> Result<Box<dyn Store>> {
        Err(Error::config(
            "cache sqlite:: this build lacks the `sqlite` feature (enable it in Cargo.toml)",
        ))
    }

    fn redis(&self, url: &str) -> Result<Box<dyn Store>> {
        let Some(wing) = store::redis_caches() else {
            return Err(Error::config(
                "cache redis://: this build of llm-failover has no Redis wing: enable its \
                 `redis` feature (llm-failover = { version = \"…\", features = [\"redis\"] }), \
                 or use memory or sqlite:PATH",
            ));
        };
        wing.cache_store(
            url,
            &self.prefix,
            self.timeout,
            self.max_entries,
            &self.tls,
            self.cluster,
        )
    }
}

/// What a lookup found.
pub(crate) enum Lookup<T> {
    /// The answer, as stored, and when it was.
    Hit { answer: T, stored_at_ms: i64 },
    /// Not there: ask, then hand the answer to the fill (`None`: keep nothing).
    Miss(Option<Fill>),
}

/// The right and duty to keep one key's answer: while it lives, identical requests wait
/// for it; dropped without [`keep`](Fill::keep), they go on (the next one asks).
pub(crate) struct Fill {
    cache: Cache,
    key: Key,
    /// Dropped when the fill ends, which wakes the waiters.
    _done: Option<watch::Sender<()>>,
}

impl fmt::Debug for Fill {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fill").field("key", &self.key).finish()
    }
}

impl Fill {
    /// Keeps `value` (an answer, serialized) from `now_ms` for the cache's TTL.
    pub(crate) async fn keep(self, value: Vec<u8>, now_ms: i64) {
        let inner = &self.cache.inner;
        let ttl = i64::try_from(inner.ttl.as_millis()).unwrap_or(i64::MAX);
        let entry = Stored {
            value,
            stored_at_ms: now_ms,
            expires_at_ms: now_ms.saturating_add(ttl),
        };
        match inner.store.put(&self.key, entry).await {
            Ok(()) => {
                inner.stores.fetch_add(1, Ordering::Relaxed);
                self.cache.healthy();
            }
            Err(e) => self.cache.failed("keeping an answer", &e),
        }
    }
}

impl Drop for Fill {
    fn drop(&mut self) {
        if self._done.is_some() {
            self.cache
                .inner
                .flights
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&self.key);
        }
    }
}

impl Cache {
    /// A cache built from `spec`: `memory`, `sqlite:PATH` or `redis://host:port[/db]`.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::cache::Cache;
    ///
    /// let cache = Cache::builder("sqlite:answers.sqlite").max_entries(50_000).build()?;
    /// assert_eq!(cache.describe(), "sqlite:answers.sqlite"); // opened on first use
    /// # Ok::<(), llm_failover::Error>(())
    /// ```
    pub fn builder(spec: impl Into<String>) -> CacheBuilder {
        CacheBuilder {
            spec: secrecy::SecretString::from(spec.into()),
            ttl: DEFAULT_TTL,
            max_entries: DEFAULT_MAX_ENTRIES,
            prefix: "llm-failover".to_owned(),
            timeout: Duration::from_millis(250),
            tls: crate::ratelimit::RedisTls::default(),
            cluster: false,
        }
    }

    /// [`builder(spec)`](Self::builder) with the default TTL and bound.
    ///
    /// # Errors
    ///
    /// As [`CacheBuilder::build`].
    pub fn open(spec: &str) -> Result<Cache> {
        Cache::builder(spec).build()
    }

    /// A cache in this process's memory, with the default TTL and bound.
    pub fn memory() -> Cache {
        Cache::from_store(
            Box::new(memory::MemoryStore::new(DEFAULT_MAX_ENTRIES)),
            DEFAULT_TTL,
        )
    }

    /// A cache in the SQLite file at `path` (created on first use), with the default TTL and
    /// bound. Several processes may share the file.
    #[cfg(feature = "sqlite")]
    pub fn sqlite(path: impl AsRef<std::path::Path>) -> Cache {
        let store = sqlite::SqliteStore::open(path, DEFAULT_MAX_ENTRIES);
        Cache::from_store(Box::new(store), DEFAULT_TTL)
    }

    fn from_store(store: Box<dyn Store>, ttl: Duration) -> Cache {
        Cache {
            inner: Arc::new(Inner {
                store,
                ttl,
                hits: AtomicU64::new(0),
                misses: AtomicU64::new(0),
                stores: AtomicU64::new(0),
                tokens_saved: AtomicU64::new(0),
                errors: AtomicU64::new(0),
                failing: AtomicBool::new(false),
                waiting: AtomicU64::new(0),
                flights: Mutex::default(),
            }),
        }
    }

    /// Where the answers are kept: `memory`, `sqlite:PATH` or `redis://host:port/db` (never a
    /// password).
    pub fn describe(&self) -> &str {
        self.inner.store.describe()
    }

    /// How long an answer is kept.
    pub fn ttl(&self) -> Duration {
        self.inner.ttl
    }

    /// The counters since the cache was made.
    pub fn stats(&self) -> CacheStats {
        let i = &self.inner;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CacheStats {
            hits: get(&i.hits),
            misses: get(&i.misses),
            stores: get(&i.stores),
            tokens_saved: get(&i.tokens_saved),
            errors: get(&i.errors),
        }
    }

    /// How many lookups wait now for an identical request in flight (tests: to know they
    /// reached the cache before the first one's answer is let through).
    #[cfg_attr(feature = "test-util", visibility::make(pub))]
    #[allow(dead_code)]
    pub(crate) fn waiting(&self) -> u64 {
        self.inner.waiting.load(Ordering::Relaxed)
    }

    /// How many answers are kept now (expired ones the backend has not dropped yet included).
    ///
    /// # Errors
    ///
    /// `Io` when the backend fails.
    pub async fn len(&self) -> Result<u64> {
        self.inner.store.len().await
    }

    /// Whether nothing is kept.
    ///
    /// # Errors
    ///
    /// As [`len`](Self::len).
    pub async fn is_empty(&self) -> Result<bool> {
        Ok(self.len().await? == 0)
    }

    /// Drops every answer kept.
    ///
    /// # Errors
    ///
    /// `Io` when the backend fails.
    pub async fn clear(&self) -> Result<()> {
        self.inner.store.clear().await
    }

    /// Looks `key` up as `mode` says, at `now_ms` (the client's wall clock). While an
    /// identical request is being asked in this process, waits for its answer first.
    ///
    /// An entry that does not read back as a `T` counts as a failure and a miss (its new
    /// answer replaces it).
    pub(crate) async fn lookup<T: DeserializeOwned>(
        &self,
        key: Key,
        mode: CacheMode,
        now_ms: i64,
    ) -> Lookup<T> {
        match mode {
            CacheMode::Bypass => return Lookup::Miss(None),
            CacheMode::Refresh => return Lookup::Miss(Some(self.fill(key, None))),
            CacheMode::Use => {}
        }
        loop {
            if let Some((answer, stored_at_ms)) = self.found(&key, now_ms).await {
                return Lookup::Hit {
                    answer,
                    stored_at_ms,
                };
            }
            let mut waiting = match self.join_or_lead(key) {
                Ok(rx) => rx,
                Err(fill) => {
                    // The request that asked before may have kept its answer and left between
                    // the look above and this lead (it keeps, then leaves): look once more.
                    if let Some((answer, stored_at_ms)) = self.found(&key, now_ms).await {
                        return Lookup::Hit {
                            answer,
                            stored_at_ms,
                        };
                    }
                    self.inner.misses.fetch_add(1, Ordering::Relaxed);
                    return Lookup::Miss(Some(fill));
                }
            };
            // Ends when the first request's fill does (kept or not): look again.
            self.inner.waiting.fetch_add(1, Ordering::Relaxed);
            let _ = waiting.changed().await;
            self.inner.waiting.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The answer kept under `key` and when it was kept, read back as a `T` (an entry that
    /// does not read back counts as a failure, and as not there).
    async fn found<T: DeserializeOwned>(&self, key: &Key, now_ms: i64) -> Option<(T, i64)> {
        let stored = self.get(key, now_ms).await?;
        match serde_json::from_slice(&stored.value) {
            Ok(answer) => Some((answer, stored.stored_at_ms)),
            Err(e) => {
                self.unreadable(&e);
                None
            }
        }
    }

    /// The flight of `key` to wait on, or (none in the air) the lead of a new one.
    fn join_or_lead(&self, key: Key) -> std::result::Result<watch::Receiver<()>, Fill> {
        let mut flights = self
            .inner
            .flights
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(rx) = flights.get(&key) {
            return Ok(rx.clone());
        }
        let (tx, rx) = watch::channel(());
        flights.insert(key, rx);
        drop(flights);
        Err(self.fill(key, Some(tx)))
    }

    fn fill(&self, key: Key, done: Option<watch::Sender<()>>) -> Fill {
        Fill {
            cache: self.clone(),
            key,
            _done: done,
        }
    }

    /// The entry under `key`, or `None` (a backend failure is a miss).
    async fn get(&self, key: &Key, now_ms: i64) -> Option<Stored> {
        match self.inner.store.get(key, now_ms).await {
            Ok(found) => {
                self.healthy();
                found
            }
            Err(e) => {
                self.failed("looking an answer up", &e);
                None
            }
        }
    }

    /// Counts a hit that saved `tokens`.
    pub(crate) fn hit(&self, tokens: u64) {
        self.inner.hits.fetch_add(1, Ordering::Relaxed);
        self.inner.tokens_saved.fetch_add(tokens, Ordering::Relaxed);
    }

    /// A stored answer that could not be read back: counted as a failure.
    fn unreadable(&self, err: &serde_json::Error) {
        let e = Error::new(
            ErrorKind::Io,
            format!("a stored answer is not one this build reads ({err})"),
        );
        self.failed("reading an answer back", &e);
    }

    /// Whether the backend serves this client ([`Store::check`]).
    pub(crate) async fn check(&self) -> Result<()> {
        self.inner.store.check().await
    }

    fn healthy(&self) {
        if self.inner.failing.swap(false, Ordering::Relaxed) {
            tracing::warn!(cache = self.describe(), "the response cache works again");
        }
    }

    fn failed(&self, doing: &str, e: &Error) {
        self.inner.errors.fetch_add(1, Ordering::Relaxed);
        if self.inner.failing.swap(true, Ordering::Relaxed) {
            tracing::debug!(cache = self.describe(), error = %e, "{doing}: the response cache failed");
        } else {
            tracing::warn!(
                cache = self.describe(),
                error = %e,
                "{doing}: the response cache failed; requests go on uncached until it works again"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The core alone (this unit test binary never links the Redis wing) understands a
    /// `redis://` cache and says which feature builds it, never the password.
    #[test]
    fn a_redis_cache_without_the_wing_names_the_feature() {
        assert!(store::redis_caches().is_none());
        let err = Cache::builder("redis://:hunter2@127.0.0.1:6379/0")
            .build()
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config);
        let text = err.to_string();
        assert!(text.contains("no Redis wing"), "{text}");
        assert!(text.contains("features = [\"redis\"]"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
    }
}
