//! [`RedisCacheStore`]: cached answers in Redis, shared by every process and host that uses it.
//!
//! * **Keys**, under one hash tag so one script touches an entry and its index atomically:
//!   `{<prefix>:cache}:e:<key hex>` holds an entry (a 17-byte header — format, `stored_at`,
//!   `expires_at` — then the value), `{<prefix>:cache}:idx` is a sorted set of the key hexes
//!   scored by `stored_at`. On a Redis Cluster the entries are kept in 16 shards, by the first
//!   byte of their key, each under a tag of its own (`{<prefix>:cache:<0-f>}`), so they spread
//!   over the primaries and each put stays one atomic call on one of them.
//! * **A put is one Lua script** (EVALSHA, loaded again after a `NOSCRIPT`): `SET … PX`, `ZADD`
//!   to the index, then while the index holds more than its bound, `ZPOPMIN` the excess and
//!   delete their entries. The bound is exact on one Redis (`max_entries`; expired entries
//!   whose index member is still there count toward it until they are popped as the oldest);
//!   on a cluster each shard keeps its part, `max_entries` ÷ 16 rounded up.
//! * **Expiry is the client's clock**: a get checks `expires_at_ms > now_ms` against the
//!   caller's now; Redis's own `PX` (the entry's lifetime) only collects the garbage. An entry
//!   whose index member is gone (popped by a concurrent put) is still served until it is
//!   deleted.
//! * **Bounded calls**: the connection is made on first use; every call (connecting included)
//!   is bounded by the timeout, and a call that fails drops the connection so the next call
//!   connects anew. Errors name `redis://host:port/db` and the key tag, never the password
//!   or a value.

use std::fmt;
use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::connect::{Conn, Source};
use async_trait::async_trait;
use redis::Script;
use secrecy::{ExposeSecret, SecretString};

use llm_failover_core::error::{Error, ErrorKind, Result};
use llm_failover_core::ratelimit::{RedisTls, SharedSettings};
use llm_failover_core::wing::redis::{Key, Store, Stored, scrub};

use crate::connect::config_error;

/// Stores one entry and keeps the index within the bound.
///
/// `KEYS[1]` the entry, `KEYS[2]` the index; `ARGV[1]` the encoded entry, `ARGV[2]` its `PX`,
/// `ARGV[3]` its `stored_at`, `ARGV[4]` its key hex, `ARGV[5]` the bound, `ARGV[6]` the
/// entries' key prefix. Returns how many entries it evicted.
const PUT_SCRIPT: &str = r"
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
local excess = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[5])
if excess <= 0 then
  return 0
end
local popped = redis.call('ZPOPMIN', KEYS[2], excess)
for i = 1, #popped, 2 do
  redis.call('DEL', ARGV[6] .. popped[i])
end
return excess
";

/// Drops up to `ARGV[2]` entries named by the index `KEYS[1]` (entries' key prefix `ARGV[1]`)
/// and their index members. Returns how many it dropped.
const CLEAR_SCRIPT: &str = r"
local members = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1)
for _, m in ipairs(members) do
  redis.call('DEL', ARGV[1] .. m)
end
if #members > 0 then
  redis.call('ZREM', KEYS[1], unpack(members))
end
return #members
";

/// How many entries one call of [`CLEAR_SCRIPT`] drops.
const CLEAR_BATCH: usize = 500;

/// The first byte of every entry this build writes.
const FORMAT: u8 = 1;

/// Format byte, `stored_at` and `expires_at` (big-endian `i64`s), then the value.
const HEADER_LEN: usize = 17;

/// The longest `PX` written (a century): Redis refuses an expiry that overflows its clock.
const MAX_PX: i64 = 100 * 365 * 86_400_000;

/// A cache backend in Redis (the `redis` feature), shared by every process that uses the same
/// Redis and prefix; the bound is exact. See the module documentation for the keys and the
/// scripts.
pub(crate) struct RedisCacheStore {
    source: Source,
    /// The connection; dropped when a call fails, made again by the next call.
    conn: Mutex<Option<Conn>>,
    /// `redis://host:port/db`, for messages.
    name: String,
    keys: Keys,
    timeout: Duration,
    max_entries: u64,
    put_script: Script,
    clear_script: Script,
    /// Scrubbed from every message, in case an error of the client repeats it.
    secrets: Vec<SecretString>,
}

impl fmt::Debug for RedisCacheStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisCacheStore")
            .field("redis", &self.name)
            .field("keys", &self.keys.tag(0))
            .field("timeout", &self.timeout)
            .field("max_entries", &self.max_entries)
            .finish_non_exhaustive()
    }
}

/// The key names under one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Keys {
    prefix: String,
    /// 1 on one Redis; [`CLUSTER_SHARDS`] on a cluster.
    shards: u8,
}

/// How many shards (hash tags) a cache on a Redis Cluster spreads its entries over.
const CLUSTER_SHARDS: u8 = 16;

impl Keys {
    fn new(prefix: &str, shards: u8) -> Keys {
        Keys {
            prefix: prefix.to_owned(),
            shards: shards.max(1),
        }
    }

    /// The shard `key` is kept in.
    fn shard_of(&self, key: &Key) -> u8 {
        key.0[0] % self.shards
    }

    /// The hash tag of `shard`: `{<prefix>:cache}` on one Redis, `{<prefix>:cache:<s>}` on a
    /// cluster.
    fn tag(&self, shard: u8) -> String {
        if self.shards == 1 {
            format!("{{{}:cache}}", self.prefix)
        } else {
            format!("{{{}:cache:{shard:x}}}", self.prefix)
        }
    }

    /// What every entry's key in `shard` starts with: `<tag>:e:`.
    fn entry_prefix(&self, shard: u8) -> String {
        format!("{}:e:", self.tag(shard))
    }

    /// The entry under `key`: `<tag>:e:<key hex>`.
    fn entry(&self, key: &Key) -> String {
        format!("{}{}", self.entry_prefix(self.shard_of(key)), key.hex())
    }

    /// The index of stored times of `shard`: `<tag>:idx`.
    fn index(&self, shard: u8) -> String {
        format!("{}:idx", self.tag(shard))
    }

    /// Each shard's part of `max_entries`.
    fn bound(&self, max_entries: u64) -> u64 {
        max_entries.div_ceil(u64::from(self.shards))
    }
}

impl RedisCacheStore {
    /// A store in Redis at `url` (`redis://[:password@]host[:port][/db]`), its keys under
    /// `{<prefix>:cache}`, each call bounded by `timeout`, at most `max_entries` entries. It
    /// connects on first use; nothing is sent here.
    ///
    /// # Errors
    ///
    /// `Config` when `url` is not a `redis://` URL (the message names the host at most, never
    /// the password), or `prefix` holds a brace (it would break the hash tag).
    pub(crate) fn new(
        url: &str,
        prefix: &str,
        timeout: Duration,
        max_entries: u64,
        tls: &RedisTls,
        cluster: bool,
    ) -> Result<RedisCacheStore> {
        let host = SharedSettings::new(url).host();
        let parsed = url::Url::parse(url).ok();
        if !matches!(
            parsed.as_ref().map(url::Url::scheme),
            Some("redis" | "rediss")
        ) {
            return Err(config_error(format!(
                "cache: `{host}` is not a Redis URL; write redis://host:port[/db] (rediss:// \
                 for TLS)"
            )));
        }
        if prefix.contains(['{', '}']) {
            return Err(config_error(format!(
                "cache: the Redis key prefix `{prefix}` holds a brace; the cache's keys put it \
                 inside a hash tag, {{<prefix>:cache}}"
            )));
        }
        let client = crate::connect::client(url, tls, "cache", &host)?;
        let settings = client.get_connection_info().redis_settings();
        let mut secrets: Vec<SecretString> = Vec::new();
        if let Some(password) = settings.password() {
            secrets.push(password.into());
        }
        if let Some(raw) = parsed.as_ref().and_then(url::Url::password) {
            secrets.push(raw.into());
        }
        Ok(RedisCacheStore {
            name: format!("redis://{host}/{}", settings.db()),
            source: crate::connect::source(&client, url, tls, cluster, timeout, "cache", &host)?,
            conn: Mutex::new(None),
            keys: Keys::new(prefix, if cluster { CLUSTER_SHARDS } else { 1 }),
            timeout,
            max_entries,
            put_script: Script::new(PUT_SCRIPT),
            clear_script: Script::new(CLEAR_SCRIPT),
            secrets,
        })
    }

    /// Runs `f` on the connection (made now if there is none), the whole bounded by the
    /// timeout; a failure drops the connection, so the next call connects anew.
    async fn run<T, F, Fut>(&self, doing: &str, f: F) -> Result<T>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let work = async {
            let conn = self.connection().await?;
            f(conn).await
        };
        let why = match tokio::time::timeout(self.timeout, work).await {
            Ok(Ok(value)) => return Ok(value),
            // The connection's own timeouts are the same as this one.
            Ok(Err(e)) if !e.is_timeout() => e.to_string(),
            Ok(Err(_)) | Err(_) => format!("no answer within {:?}", self.timeout),
        };
        self.conn
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        Err(self.error(doing, &why))
    }

    /// The connection, made now if there is none (first use, or a call failed since).
    async fn connection(&self) -> redis::RedisResult<Conn> {
        crate::connect::held_or_new(&self.conn, &self.source, self.timeout).await
    }

    /// An `Io` error naming the Redis, the key tag and what was being done; any password
    /// scrubbed.
    fn error(&self, doing: &str, why: &str) -> Error {
        let err = Error::new(
            ErrorKind::Io,
            format!(
                "cache {} (keys {}): {doing}: {why}",
                self.name,
                self.keys.tag(0)
            ),
        );
        self.secrets
            .iter()
            .fold(err, |err, secret| scrub(err, secret.expose_secret()))
    }
}

#[async_trait]
impl Store for RedisCacheStore {
    async fn get(&self, key: &Key, now_ms: i64) -> Result<Option<Stored>> {
        let entry_key = self.keys.entry(key);
        let raw: Option<Vec<u8>> = self
            .run("reading", |mut conn| async move {
                redis::cmd("GET")
                    .arg(entry_key)
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        let Some(raw) = raw else { return Ok(None) };
        let entry = decode(raw).ok_or_else(|| {
            self.error(
                "reading",
                &format!(
                    "the entry under {}{}… is not one this build wrote",
                    self.keys.entry_prefix(self.keys.shard_of(key)),
                    &key.hex()[..12]
                ),
            )
        })?;
        Ok((entry.expires_at_ms > now_ms).then_some(entry))
    }

    async fn put(&self, key: &Key, entry: Stored) -> Result<()> {
        let px = entry
            .expires_at_ms
            .saturating_sub(entry.stored_at_ms)
            .clamp(1, MAX_PX);
        let invocation = {
            let mut inv = self.put_script.prepare_invoke();
            let shard = self.keys.shard_of(key);
            inv.key(self.keys.entry(key))
                .key(self.keys.index(shard))
                .arg(encode(&entry))
                .arg(px)
                .arg(entry.stored_at_ms)
                .arg(key.hex())
                .arg(self.keys.bound(self.max_entries))
                .arg(self.keys.entry_prefix(shard));
            inv
        };
        self.run("writing", |mut conn| async move {
            invocation.invoke_async::<i64>(&mut conn).await
        })
        .await
        .map(drop)
    }

    async fn len(&self) -> Result<u64> {
        let mut total = 0;
        for shard in 0..self.keys.shards {
            let index = self.keys.index(shard);
            let n: u64 = self
                .run("counting", |mut conn| async move {
                    redis::cmd("ZCARD").arg(index).query_async(&mut conn).await
                })
                .await?;
            total += n;
        }
        Ok(total)
    }

    async fn clear(&self) -> Result<()> {
        for shard in 0..self.keys.shards {
            loop {
                let invocation = {
                    let mut inv = self.clear_script.prepare_invoke();
                    inv.key(self.keys.index(shard))
                        .arg(self.keys.entry_prefix(shard))
                        .arg(CLEAR_BATCH);
                    inv
                };
                let dropped: usize = self
                    .run("clearing", |mut conn| async move {
                        invocation.invoke_async(&mut conn).await
                    })
                    .await?;
                if dropped < CLEAR_BATCH {
                    break;
                }
            }
        }
        Ok(())
    }

    fn describe(&self) -> &str {
        &self.name
    }

    /// Connects and sends a PING now: `Config` when Redis refuses this client (a wrong
    /// password); a Redis that cannot be reached is a miss later, not an error now.
    async fn check(&self) -> Result<()> {
        let work = async {
            let mut conn = self.connection().await?;
            redis::cmd("PING").query_async::<String>(&mut conn).await
        };
        match tokio::time::timeout(self.timeout, work).await {
            Ok(Err(e)) if crate::limiter::refuses(&e) => {
                let err = match crate::limiter::tls_failure(&e) {
                    Some(why) => config_error(format!(
                        "cache {}: TLS with Redis failed ({why}): check the CA and client \
                         certificate ([cache] redis_tls_ca_file, redis_tls_client_cert_file, \
                         redis_tls_client_key_file) and that the URL names a host the server's \
                         certificate holds",
                        self.name
                    )),
                    None => config_error(format!(
                        "cache {}: Redis refused this client ({}): check the password and user \
                         in the cache's Redis URL ([cache] url)",
                        self.name,
                        e.code().unwrap_or("authentication failed")
                    )),
                };
                Err(self
                    .secrets
                    .iter()
                    .fold(err, |err, secret| scrub(err, secret.expose_secret())))
            }
            _ => Ok(()),
        }
    }
}

/// An entry as stored: [`FORMAT`], `stored_at`, `expires_at` (big-endian), the value.
fn encode(entry: &Stored) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + entry.value.len());
    out.push(FORMAT);
    out.extend_from_slice(&entry.stored_at_ms.to_be_bytes());
    out.extend_from_slice(&entry.expires_at_ms.to_be_bytes());
    out.extend_from_slice(&entry.value);
    out
}

/// The entry [`encode`] wrote, or `None` for anything else (too short, another format).
fn decode(mut raw: Vec<u8>) -> Option<Stored> {
    if raw.len() < HEADER_LEN || raw[0] != FORMAT {
        return None;
    }
    let stored_at_ms = i64::from_be_bytes(raw.get(1..9)?.try_into().ok()?);
    let expires_at_ms = i64::from_be_bytes(raw.get(9..17)?.try_into().ok()?);
    let value = raw.split_off(HEADER_LEN);
    Some(Stored {
        value,
        stored_at_ms,
        expires_at_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(url: &str) -> Result<RedisCacheStore> {
        RedisCacheStore::new(
            url,
            "app",
            Duration::from_millis(250),
            100,
            &RedisTls::new(),
            false,
        )
    }

    #[test]
    fn refuses_urls_that_are_not_redis_naming_the_host_at_most() {
        for url in [
            "http://user:s3cret@example.com:8080",
            "rediss://:s3cret@example.com/#insecure",
            "not a url",
            "",
        ] {
            let err = store(url).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config, "{url}");
            assert!(!err.to_string().contains("s3cret"), "{err}");
            assert!(!err.to_string().contains("user"), "{err}");
        }
        let err = store("http://user:s3cret@example.com:8080").unwrap_err();
        assert!(err.to_string().contains("example.com:8080"), "{err}");
        let err = store("rediss://:s3cret@example.com/#insecure").unwrap_err();
        assert!(err.to_string().contains("never does"), "{err}");
        // TLS is built in: a rediss:// URL makes a store (it connects on first use).
        let s = store("rediss://:s3cret@example.com").unwrap();
        assert_eq!(s.describe(), "redis://example.com:6379/0");
    }

    #[test]
    fn refuses_a_prefix_with_a_brace() {
        let err = RedisCacheStore::new(
            "redis://localhost",
            "a}b",
            Duration::from_secs(1),
            1,
            &RedisTls::new(),
            false,
        );
        assert_eq!(err.unwrap_err().kind(), ErrorKind::Config);
    }

    #[test]
    fn describes_host_port_and_db_without_the_password() {
        let s = store("redis://:s3cret@127.0.0.1:6380/2").unwrap();
        assert_eq!(s.describe(), "redis://127.0.0.1:6380/2");
        assert!(!format!("{s:?}").contains("s3cret"));
        let s = store("redis://user:s3cret@localhost").unwrap();
        assert_eq!(s.describe(), "redis://localhost:6379/0");
    }

    #[test]
    fn names_every_key_under_one_hash_tag_or_one_per_shard_on_a_cluster() {
        let keys = Keys::new("app", 1);
        let key = Key([0xab; 32]);
        assert_eq!(
            keys.entry(&key),
            format!("{{app:cache}}:e:{}", "ab".repeat(32))
        );
        assert_eq!(keys.index(0), "{app:cache}:idx");
        assert_eq!(keys.entry_prefix(0), "{app:cache}:e:");
        assert_eq!(keys.bound(100), 100);
        // A cluster: 16 shards by the key's first byte (0xab % 16 = 0xb), each bounded by
        // its part.
        let keys = Keys::new("app", CLUSTER_SHARDS);
        assert_eq!(
            keys.entry(&key),
            format!("{{app:cache:b}}:e:{}", "ab".repeat(32))
        );
        assert_eq!(keys.index(11), "{app:cache:b}:idx");
        assert_eq!(keys.bound(100), 7);
        assert_eq!(keys.bound(1), 1);
    }

    #[test]
    fn decodes_what_it_encodes_and_refuses_anything_else() {
        let entry = Stored {
            value: b"answer".to_vec(),
            stored_at_ms: -5,
            expires_at_ms: 1_700_000_000_000,
        };
        assert_eq!(decode(encode(&entry)), Some(entry.clone()));
        let empty = Stored {
            value: Vec::new(),
            ..entry
        };
        assert_eq!(decode(encode(&empty)), Some(empty));
        assert_eq!(decode(Vec::new()), None);
        assert_eq!(decode(vec![FORMAT; HEADER_LEN - 1]), None);
        let mut other = encode(&Stored {
            value: b"x".to_vec(),
            stored_at_ms: 0,
            expires_at_ms: 0,
        });
        other[0] = 2;
        assert_eq!(decode(other), None);
    }

    #[test]
    fn errors_scrub_the_password() {
        let s = store("redis://:s3cret%21@127.0.0.1:6380").unwrap();
        let err = s.error("reading", "the server said s3cret! and s3cret%21");
        assert!(!err.to_string().contains("s3cret"), "{err}");
        assert!(
            err.to_string().contains("redis://127.0.0.1:6380/0"),
            "{err}"
        );
        assert!(err.to_string().contains("{app:cache}"), "{err}");
    }

    #[tokio::test]
    async fn a_redis_that_is_not_there_fails_each_call_with_an_io_error() {
        // A loopback port nobody listens on: refused at once.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let s = store(&format!("redis://:s3cret@127.0.0.1:{port}")).unwrap();
        let err = s.get(&Key([1; 32]), 0).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Io);
        assert!(
            err.to_string().contains(&format!("127.0.0.1:{port}")),
            "{err}"
        );
        assert!(!err.to_string().contains("s3cret"), "{err}");
        let entry = Stored {
            value: b"private answer".to_vec(),
            stored_at_ms: 0,
            expires_at_ms: 10,
        };
        let err = s.put(&Key([1; 32]), entry).await.unwrap_err();
        assert!(!err.to_string().contains("private answer"), "{err}");
        assert!(s.len().await.is_err());
        assert!(s.clear().await.is_err());
    }

    #[tokio::test]
    async fn a_redis_that_does_not_answer_fails_within_the_timeout() {
        // Connections are accepted (by the kernel, into the backlog) and never answered.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = silent.local_addr().unwrap().port();
        let url = format!("redis://127.0.0.1:{port}");
        let s = RedisCacheStore::new(
            &url,
            "app",
            Duration::from_millis(100),
            100,
            &RedisTls::new(),
            false,
        )
        .unwrap();
        let get = s.get(&Key([1; 32]), 0);
        let err = tokio::time::timeout(Duration::from_secs(5), get)
            .await
            .expect("bounded by the store's timeout")
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Io);
        assert!(err.to_string().contains("no answer within 100ms"), "{err}");
        drop(silent);
    }
}
