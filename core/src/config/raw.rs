//! Stage one: `providers.toml` exactly as written.
//!
//! Every table denies unknown fields, so a typo is an error that names its TOML path. Numbers
//! are read as `i64` (TOML's own integer type) so that a negative or zero value reaches
//! validation and gets a message that says what is allowed, rather than a bare "expected u64".
//! Strings that must be one of a few names (`kind`, `auth`, `header_dialect`) are read as
//! strings for the same reason. `#[serde(default)]` appears only where an absent value has a
//! meaning: an absent `[policy]` is the default policy, an absent list is an empty list, an
//! absent `allow_http` is `false`.
//!
//! These types never hold a provider's key: the key policy scan (`source.rs`) rejects a literal key or a
//! list of keys before serde runs, and `api_key_env` holds variable names only. The secrets
//! they may hold are the passwords inside `[shared] redis_url` and `[cache] url` (the user's
//! own Redis, like a database URL), which no `Debug` or message shows.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    pub(crate) default_environment: String,
    #[serde(default)]
    pub(crate) policy: RawPolicy,
    pub(crate) environments: BTreeMap<String, RawEnvironment>,
    pub(crate) providers: BTreeMap<String, RawProvider>,
    /// `[shared]`: absent, limits and breakers live in this process's memory.
    pub(crate) shared: Option<RawShared>,
    /// `[cache]`: absent, no response cache (unless one is given in code).
    pub(crate) cache: Option<RawCache>,
}

/// `[cache]`: the response cache. Only `url` is required; the others take
/// [`CacheBuilder`](crate::cache::CacheBuilder)'s defaults.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCache {
    /// `memory`, `sqlite:PATH` or `redis://…`; a Redis URL may carry a password: never shown,
    /// not even by `Debug`.
    pub(crate) url: String,
    pub(crate) ttl_ms: Option<i64>,
    pub(crate) max_entries: Option<i64>,
    pub(crate) redis_prefix: Option<String>,
    pub(crate) redis_timeout_ms: Option<i64>,
    pub(crate) redis_tls_ca_file: Option<String>,
    pub(crate) redis_tls_client_cert_file: Option<String>,
    pub(crate) redis_tls_client_key_file: Option<String>,
    pub(crate) redis_cluster: Option<bool>,
}

impl fmt::Debug for RawCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawCache")
            .field("url", &"(not shown: it may hold a password)")
            .field("ttl_ms", &self.ttl_ms)
            .field("max_entries", &self.max_entries)
            .field("redis_prefix", &self.redis_prefix)
            .field("redis_timeout_ms", &self.redis_timeout_ms)
            .field("redis_tls_ca_file", &self.redis_tls_ca_file)
            .field(
                "redis_tls_client_cert_file",
                &self.redis_tls_client_cert_file,
            )
            .field("redis_tls_client_key_file", &self.redis_tls_client_key_file)
            .field("redis_cluster", &self.redis_cluster)
            .finish()
    }
}

/// `[shared]`: limits and breakers shared with other processes through Redis. Only
/// `redis_url` is required; the others take [`SharedSettings`](crate::ratelimit::SharedSettings)'
/// defaults.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawShared {
    /// May carry a password (`redis://:PASSWORD@host:6379`): never shown, not even by `Debug`.
    pub(crate) redis_url: String,
    pub(crate) key_prefix: Option<String>,
    pub(crate) timeout_ms: Option<i64>,
    pub(crate) when_down: Option<String>,
    pub(crate) processes: Option<i64>,
    pub(crate) retry_interval_ms: Option<i64>,
    pub(crate) tls_ca_file: Option<String>,
    pub(crate) tls_client_cert_file: Option<String>,
    pub(crate) tls_client_key_file: Option<String>,
    pub(crate) cluster: Option<bool>,
}

impl fmt::Debug for RawShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawShared")
            .field("redis_url", &"(not shown: it may hold a password)")
            .field("key_prefix", &self.key_prefix)
            .field("timeout_ms", &self.timeout_ms)
            .field("when_down", &self.when_down)
            .field("processes", &self.processes)
            .field("retry_interval_ms", &self.retry_interval_ms)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("tls_client_cert_file", &self.tls_client_cert_file)
            .field("tls_client_key_file", &self.tls_client_key_file)
            .field("cluster", &self.cluster)
            .finish()
    }
}

/// `[policy]`: every key optional; absent keys take [`crate::config::Policy`]'s defaults.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPolicy {
    pub(crate) max_attempts: Option<i64>,
    pub(crate) deadline_ms: Option<i64>,
    pub(crate) request_timeout_ms: Option<i64>,
    pub(crate) connect_timeout_ms: Option<i64>,
    pub(crate) max_retry_after_ms: Option<i64>,
    pub(crate) quota_cooldown_ms: Option<i64>,
    pub(crate) failure_threshold: Option<i64>,
    pub(crate) breaker_cooldown_ms: Option<i64>,
    pub(crate) breaker_cooldown_max_ms: Option<i64>,
    pub(crate) backoff_base_ms: Option<i64>,
    pub(crate) backoff_cap_ms: Option<i64>,
    pub(crate) max_response_bytes: Option<i64>,
    pub(crate) retry_budget: Option<f64>,
    pub(crate) spill_after_ms: Option<i64>,
    pub(crate) latency_allowance_ms: Option<i64>,
}

/// `[environments.NAME]`: providers per capability, in failover order.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawEnvironment {
    #[serde(default)]
    pub(crate) chat: Vec<String>,
    #[serde(default)]
    pub(crate) transcription: Vec<String>,
    #[serde(default)]
    pub(crate) embedding: Vec<String>,
    /// What the environment may spend.
    pub(crate) budget: Option<crate::budget::Budget>,
    /// Tenant name → what it may spend.
    #[serde(default)]
    pub(crate) tenant_budgets: BTreeMap<String, crate::budget::Budget>,
}

/// `[providers.NAME]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawProvider {
    pub(crate) kind: String,
    pub(crate) base_url: String,
    pub(crate) model: Option<String>,
    pub(crate) transcription_model: Option<String>,
    pub(crate) embedding_model: Option<String>,
    /// Environment name → the NAME of the variable holding the key.
    pub(crate) api_key_env: Option<BTreeMap<String, String>>,
    /// Environment name → the path of the file holding the key (a service account's JSON key).
    pub(crate) key_file: Option<BTreeMap<String, String>>,
    /// Environment name → the NAMES of the variables holding its AWS credentials (Bedrock).
    pub(crate) aws_credentials_env: Option<BTreeMap<String, RawAwsEnv>>,
    pub(crate) auth: Option<String>,
    pub(crate) limits: Option<RawLimits>,
    #[serde(default)]
    pub(crate) model_limits: BTreeMap<String, RawLimits>,
    /// Model name → what it costs.
    #[serde(default)]
    pub(crate) prices: BTreeMap<String, crate::types::price::Price>,
    /// What the provider may spend.
    pub(crate) budget: Option<crate::budget::Budget>,
    pub(crate) timeout_ms: Option<i64>,
    #[serde(default)]
    pub(crate) allow_http: bool,
    pub(crate) api_version: Option<String>,
    pub(crate) header_dialect: Option<String>,
    /// The AWS region requests are signed for (Bedrock), when the host does not say.
    pub(crate) region: Option<String>,
    /// Fields merged into each chat request's JSON body, as TOML.
    #[serde(default)]
    pub(crate) extra_body: toml::Table,
    /// Written in code only ([`ConfigBuilder`](super::ConfigBuilder)): extra body fields as
    /// JSON (which can say `null`, TOML cannot), over `extra_body`.
    #[serde(skip)]
    pub(crate) extra_json: serde_json::Map<String, serde_json::Value>,
    /// Written in code only: the key is handed over with `ClientBuilder::credential`.
    #[serde(skip)]
    pub(crate) key_in_code: bool,
}

/// One environment's `aws_credentials_env` entry: the names of the variables that hold an
/// access key id, its secret access key and, for temporary credentials, a session token.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAwsEnv {
    pub(crate) access_key_id: String,
    pub(crate) secret_access_key: String,
    pub(crate) session_token: Option<String>,
}

/// `limits = { … }` and each `model_limits` entry.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLimits {
    pub(crate) rpm: Option<i64>,
    pub(crate) tpm: Option<i64>,
    pub(crate) rpd: Option<i64>,
    pub(crate) tpd: Option<i64>,
    pub(crate) audio_seconds_per_hour: Option<i64>,
}
