//! [`SharedSettings`]: how several processes share one quota through Redis — where Redis is,
//! how its keys are named, how long a call may take, and what happens while it is away
//! ([`WhenDown`]). The settings exist with or without the Redis wing, so a
//! configuration that names Redis is understood everywhere and refused with a clear error by
//! a build that cannot use it.

use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};

use super::LimiterStore;
use crate::error::Result;

/// Builds the limiter store that shares limits through Redis: the Redis wing's
/// (`llm-failover-redis`), found in `REDIS_LIMITERS` when the build links it.
pub trait RedisLimiters: Sync {
    /// The limiter store on the Redis at `settings`, keeping `latency_allowance` as the
    /// in-memory store does (`Policy::latency_allowance`).
    fn limiter_store(
        &self,
        settings: &SharedSettings,
        latency_allowance: Duration,
    ) -> Result<std::sync::Arc<dyn LimiterStore>>;
}

/// The Redis limiter stores this build links: none, or the Redis wing's.
#[linkme::distributed_slice]
pub static REDIS_LIMITERS: [&'static dyn RedisLimiters];

/// The Redis wing's limiter stores, when the build links the wing.
pub(crate) fn redis_limiters() -> Option<&'static dyn RedisLimiters> {
    REDIS_LIMITERS.first().copied()
}

/// The environment variable that turns sharing on for any program using this crate
/// (`LLM_FAILOVER_REDIS_URL=redis://127.0.0.1:6379`), over `[shared] redis_url` in
/// `providers.toml`.
pub const REDIS_URL_VAR: &str = "LLM_FAILOVER_REDIS_URL";

/// What admission does while Redis cannot be reached (or answers slower than
/// [`SharedSettings::timeout`]).
///
/// # Examples
///
/// ```
/// use std::num::NonZeroU32;
/// use llm_failover::ratelimit::WhenDown;
///
/// // Four workers on one key: each keeps to a quarter of the configured limits meanwhile.
/// let share = WhenDown::LocalShare { processes: NonZeroU32::new(4).unwrap() };
/// assert_ne!(share, WhenDown::default());
/// assert_eq!(WhenDown::default(), WhenDown::Wait);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum WhenDown {
    /// Fail closed: nothing is admitted until Redis answers again. A request waits for it
    /// within its deadline, then ends with a retryable error (`RateLimited`/
    /// `AllProvidersUnavailable`, `retry_after` the next try): no quota is overshot, and no
    /// batch item is lost (it is retried later).
    #[default]
    Wait,
    /// Fall back to this process's own buckets, each configured limit divided by
    /// `processes` (the number of processes expected to share the quota); limits the
    /// providers state are learned from their answers as usual. Traffic goes on, at a share.
    LocalShare {
        /// How many processes share the quota.
        processes: NonZeroU32,
    },
}

/// TLS to Redis beyond what a `rediss://` URL says: the CA to trust instead of the
/// platform's roots, and a client certificate for a server that asks for one. With a
/// `rediss://` URL and none of these, the server's certificate is checked against the
/// platform's roots and its name against the URL's host; certificate checks are never turned
/// off (a `#insecure` URL is refused). A relative path is relative to the working directory.
///
/// # Examples
///
/// ```
/// use llm_failover::ratelimit::{RedisTls, SharedSettings};
///
/// let tls = RedisTls::new().ca_file("/etc/redis/ca.pem");
/// let shared = SharedSettings::new("rediss://:s3cret@cache.internal:6380").tls(tls);
/// assert_eq!(shared.tls.ca_file.as_deref(), Some(std::path::Path::new("/etc/redis/ca.pem")));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisTls {
    /// A PEM file of the CA certificates to trust (`None`: the platform's roots).
    pub ca_file: Option<std::path::PathBuf>,
    /// A PEM client certificate, sent when the server asks for one; with its key.
    pub client_cert_file: Option<std::path::PathBuf>,
    /// The PEM private key of [`client_cert_file`](Self::client_cert_file).
    pub client_key_file: Option<std::path::PathBuf>,
}

impl RedisTls {
    /// The platform's roots, no client certificate.
    pub fn new() -> Self {
        RedisTls::default()
    }

    /// Trusts the CA certificates of the PEM file at `path` instead of the platform's roots.
    #[must_use]
    pub fn ca_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// Sends the PEM certificate at `cert` with the key at `key` when the server asks for one.
    #[must_use]
    pub fn client_cert(
        mut self,
        cert: impl Into<std::path::PathBuf>,
        key: impl Into<std::path::PathBuf>,
    ) -> Self {
        self.client_cert_file = Some(cert.into());
        self.client_key_file = Some(key.into());
        self
    }

    /// Whether anything is set.
    pub fn is_set(&self) -> bool {
        self.ca_file.is_some() || self.client_cert_file.is_some() || self.client_key_file.is_some()
    }
}

/// Where and how limits and breakers are shared.
///
/// The URL can carry a password (`redis://:secret@host:6379`): it is kept secret — never in
/// `Debug`, logs or errors, which name only the host and port.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use llm_failover::ratelimit::SharedSettings;
///
/// let shared = SharedSettings::new("redis://:s3cret@127.0.0.1:6379")
///     .prefix("batch-7")
///     .timeout(Duration::from_millis(100));
/// assert_eq!(shared.host(), "127.0.0.1:6379");
/// assert!(!format!("{shared:?}").contains("s3cret"));
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct SharedSettings {
    url: SecretString,
    /// Every key starts with this (`llm-failover` by default), so several applications can
    /// share one Redis.
    pub key_prefix: String,
    /// The longest a Redis call may take before it counts as Redis being down.
    pub timeout: Duration,
    /// What admission does while Redis is down.
    pub when_down: WhenDown,
    /// How often a Redis that was down is tried again.
    pub retry_interval: Duration,
    /// The CA and client certificate for a `rediss://` URL.
    pub tls: RedisTls,
    /// The URL names one node of a Redis Cluster: the others are found from it, and each
    /// key's calls go to the primary that owns its hash tag (one per provider, model and
    /// account), following the cluster when slots move.
    pub cluster: bool,
}

impl SharedSettings {
    /// Redis at `url` (`redis://host:port`, `redis://:password@host:port`, `/N` after the port
    /// for database N; `rediss://` for TLS, see [`tls`](Self::tls)), with the default prefix,
    /// a 250 ms timeout, [`WhenDown::Wait`] and a retry every second. The URL is checked when
    /// a client is built.
    pub fn new(url: impl Into<String>) -> Self {
        SharedSettings {
            url: SecretString::from(url.into()),
            key_prefix: "llm-failover".to_owned(),
            timeout: Duration::from_millis(250),
            when_down: WhenDown::Wait,
            retry_interval: Duration::from_secs(1),
            tls: RedisTls::default(),
            cluster: false,
        }
    }

    /// Sets whether the URL names a node of a Redis Cluster.
    #[must_use]
    pub fn cluster(mut self, cluster: bool) -> Self {
        self.cluster = cluster;
        self
    }

    /// Sets the CA and client certificate of a `rediss://` URL.
    #[must_use]
    pub fn tls(mut self, tls: RedisTls) -> Self {
        self.tls = tls;
        self
    }

    /// Sets the key prefix.
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Sets the timeout of each Redis call.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets what admission does while Redis is down.
    #[must_use]
    pub fn when_down(mut self, when_down: WhenDown) -> Self {
        self.when_down = when_down;
        self
    }

    /// Sets how often a Redis that was down is tried again.
    #[must_use]
    pub fn retry_interval(mut self, interval: Duration) -> Self {
        self.retry_interval = interval;
        self
    }

    /// The URL, password included: for the connection only.
    pub(crate) fn url(&self) -> &str {
        self.url.expose_secret()
    }

    /// The same settings for Redis at `url` (`LLM_FAILOVER_REDIS_URL` over the file's
    /// `redis_url`, the file's other `[shared]` values kept).
    pub(crate) fn with_url(mut self, url: impl Into<String>) -> Self {
        self.url = SecretString::from(url.into());
        self
    }

    /// `host:port` (or what the URL has in their place), for messages: never the password.
    pub fn host(&self) -> String {
        match url::Url::parse(self.url()) {
            Ok(u) => match (u.host_str(), u.port()) {
                (Some(h), Some(p)) => format!("{h}:{p}"),
                (Some(h), None) => format!("{h}:6379"),
                _ => "(no host)".to_owned(),
            },
            Err(_) => "(an unreadable URL)".to_owned(),
        }
    }
}

impl fmt::Debug for SharedSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedSettings")
            .field("host", &self.host())
            .field("key_prefix", &self.key_prefix)
            .field("timeout", &self.timeout)
            .field("when_down", &self.when_down)
            .field("retry_interval", &self.retry_interval)
            .field("tls", &self.tls)
            .field("cluster", &self.cluster)
            .finish()
    }
}

impl PartialEq for SharedSettings {
    fn eq(&self, other: &Self) -> bool {
        self.url() == other.url()
            && self.key_prefix == other.key_prefix
            && self.timeout == other.timeout
            && self.when_down == other.when_down
            && self.retry_interval == other.retry_interval
            && self.tls == other.tls
            && self.cluster == other.cluster
    }
}
