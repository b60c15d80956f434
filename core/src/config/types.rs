//! The validated, runtime form of `providers.toml`.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use url::Url;

use crate::cache::{Cache, CacheBuilder};
use crate::error::{Error, Result};
use crate::id::{Capability, ProviderId};
use crate::ratelimit::{HeaderDialect, Limits, RedisTls, SharedSettings};

pub use super::kind::ProviderKind;

/// How a provider authenticates in one environment.
///
/// # Examples
///
/// ```
/// use llm_failover::config::{Config, KeySource};
///
/// let config: Config = r#"
/// #   default_environment = "dev"
/// #   [environments.dev]
/// #   chat = ["ollama", "openai"]
///     [providers.ollama]
///     kind = "openai"
///     base_url = "http://127.0.0.1:11434/v1"
///     model = "llama3.2"
///     auth = "none"
///     [providers.openai]
///     kind = "openai"
///     base_url = "https://api.openai.com/v1"
///     model = "gpt-4o-mini"
///     api_key_env = { dev = "OPENAI_API_KEY_DEV" }
/// "#.parse()?;
/// assert_eq!(config.providers["ollama"].keys["dev"], KeySource::None);
/// let var = KeySource::Env("OPENAI_API_KEY_DEV".to_owned());
/// assert_eq!(config.providers["openai"].keys["dev"], var);
/// # Ok::<(), llm_failover::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeySource {
    /// The key is read from this environment variable (the variable's name, never the key).
    Env(String),
    /// The key is the contents of this file (`key_file = { prod = "/path/key.json" }`: a
    /// service account's JSON key for Vertex AI, a secret mounted as a file), read when a
    /// credential is asked for. A relative path is relative to the working directory.
    File(std::path::PathBuf),
    /// AWS credentials (Bedrock), read from these environment variables (their names): an
    /// access key id, its secret access key and, for temporary credentials, a session token —
    /// `aws_credentials_env = { prod = { access_key_id = "AWS_ACCESS_KEY_ID",
    /// secret_access_key = "AWS_SECRET_ACCESS_KEY", session_token = "AWS_SESSION_TOKEN" } }`.
    Aws {
        /// The variable holding the access key id.
        access_key_id: String,
        /// The variable holding the secret access key.
        secret_access_key: String,
        /// The variable holding the session token, for temporary credentials.
        session_token: Option<String>,
    },
    /// No key is sent (local hosts such as Ollama or vLLM): `auth = "none"`.
    None,
    /// The key is handed over in code with
    /// [`ClientBuilder::credential`](crate::ClientBuilder::credential) (a configuration built
    /// with [`ProviderConfigBuilder::key_in_code`](super::ProviderConfigBuilder::key_in_code));
    /// the configuration holds none.
    InCode,
}

/// One provider, validated.
///
/// # Examples
///
/// ```
/// use llm_failover::config::{Config, ProviderKind};
///
/// let config: Config = r#"
/// #   default_environment = "prod"
/// #   [environments.prod]
/// #   chat = ["openai"]
///     [providers.openai]
///     kind = "openai"
///     base_url = "https://api.openai.com/v1"
///     model = "gpt-4o-mini"
///     api_key_env = { prod = "OPENAI_API_KEY" }
///     limits = { rpm = 500 }
///     model_limits = { "gpt-4o" = { rpm = 100 } }
/// "#.parse()?;
/// let openai = config.provider("openai")?;
/// assert_eq!(openai.kind, ProviderKind::OpenAi);
/// assert_eq!(openai.model.as_deref(), Some("gpt-4o-mini"));
/// assert_eq!(openai.limits_for("gpt-4o").rpm.map(|n| n.get()), Some(100));
/// assert_eq!(openai.limits_for("gpt-4o-mini").rpm.map(|n| n.get()), Some(500));
/// # Ok::<(), llm_failover::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ProviderConfig {
    /// The provider's name (the TOML table key).
    pub id: ProviderId,
    /// Its wire format.
    pub kind: ProviderKind,
    /// The API's base URL (`https://api.openai.com/v1`, an Azure resource endpoint, …).
    pub base_url: Url,
    /// The default chat model (for Azure: the chat deployment name).
    pub model: Option<String>,
    /// The default speech-to-text model (for Azure: the Whisper deployment name).
    pub transcription_model: Option<String>,
    /// The default embedding model (for Azure: the embedding deployment name).
    pub embedding_model: Option<String>,
    /// Per environment: where the key comes from. A provider used by an environment has an
    /// entry for it (checked at validation).
    pub keys: BTreeMap<String, KeySource>,
    /// Stated limits applying to each model of this provider.
    pub limits: Limits,
    /// Limits for specific models, replacing `limits` for those models.
    pub model_limits: BTreeMap<String, Limits>,
    /// What each model costs (`prices = { "gpt-4o-mini" = { input = 0.15, output = 0.60 } }`,
    /// dollars per million tokens; see [`Price`](crate::types::price::Price)).
    pub prices: BTreeMap<String, crate::types::price::Price>,
    /// What this provider may spend (`budget = { usd_per_day = 5 }`): a request it cannot
    /// cover fails over.
    pub budget: Option<crate::budget::Budget>,
    /// Per-attempt timeout, overriding the policy's `request_timeout`.
    pub timeout: Option<Duration>,
    /// `http://` to a non-loopback host is allowed (explicit opt-in).
    pub allow_http: bool,
    /// Azure `api-version` query value, or the `anthropic-version` header value.
    pub api_version: Option<String>,
    /// How to read this provider's rate-limit headers.
    pub header_dialect: HeaderDialect,
    /// Fields merged into each chat request's JSON body (`extra_body = { seed = 7 }`; see
    /// [`ProviderSettings::extra_body`](crate::ProviderSettings::extra_body)).
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// The region requests are signed for (AWS kinds: `region = "us-east-1"`), when the base
    /// URL's host does not say (a VPC endpoint, a proxy, a local emulator).
    pub region: Option<String>,
}

impl ProviderConfig {
    /// The limits that apply to `model`.
    pub fn limits_for(&self, model: &str) -> Limits {
        self.model_limits.get(model).copied().unwrap_or(self.limits)
    }
}

/// One named environment (`demo`, `dev`, `prod`, …): which providers serve each capability,
/// in failover order.
///
/// # Examples
///
/// ```
/// use llm_failover::config::Config;
/// use llm_failover::{Capability, ProviderId};
///
/// let config: Config = r#"
///     default_environment = "prod"
///     [environments.prod]
///     chat = ["openai", "anthropic"]
/// #   [providers.openai]
/// #   kind = "openai"
/// #   base_url = "http://127.0.0.1:8080/v1"
/// #   model = "gpt-4o-mini"
/// #   auth = "none"
/// #   [providers.anthropic]
/// #   kind = "anthropic"
/// #   base_url = "http://127.0.0.1:8081"
/// #   model = "claude-3-5-haiku-latest"
/// #   auth = "none"
/// "#.parse()?;
/// let prod = config.environment("prod")?;
/// assert_eq!(prod.chat, [ProviderId::new("openai"), ProviderId::new("anthropic")]);
/// assert!(prod.providers(Capability::Transcription).is_empty());
/// # Ok::<(), llm_failover::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Environment {
    /// Its name.
    pub name: String,
    /// Chat providers, in failover order.
    pub chat: Vec<ProviderId>,
    /// Speech-to-text providers, in failover order.
    pub transcription: Vec<ProviderId>,
    /// Embedding providers, in failover order.
    pub embedding: Vec<ProviderId>,
    /// What the environment may spend (`budget = { usd_per_day = 20 }`).
    pub budget: Option<crate::budget::Budget>,
    /// What each tenant may spend (`tenant_budgets = { acme = { usd_per_month = 1 } }`).
    pub tenant_budgets: Vec<(String, crate::budget::Budget)>,
}

impl Environment {
    /// The providers serving `capability`, in failover order.
    pub fn providers(&self, capability: Capability) -> &[ProviderId] {
        match capability {
            Capability::Chat => &self.chat,
            Capability::Transcription => &self.transcription,
            Capability::Embedding => &self.embedding,
        }
    }
}

/// Retry, breaker, timeout and limit policy shared by every provider.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use llm_failover::config::Policy;
/// use llm_failover::Client;
///
/// let mut policy = Policy::default();
/// assert_eq!(policy.max_attempts, 4);
/// policy.max_attempts = 2;
/// policy.deadline = Duration::from_secs(30);
/// let builder = Client::builder().policy(policy); // replaces the file's `[policy]`
/// # let _ = builder;
/// ```
///
/// # Defaults
///
/// | field | default | TOML key (`[policy]`) |
/// | --- | --- | --- |
/// | `max_attempts` | 4 | `max_attempts` |
/// | `deadline` | 120 s | `deadline_ms` |
/// | `request_timeout` | 60 s | `request_timeout_ms` |
/// | `connect_timeout` | 10 s | `connect_timeout_ms` |
/// | `max_retry_after` | 120 s | `max_retry_after_ms` |
/// | `quota_cooldown` | 15 min | `quota_cooldown_ms` |
/// | `failure_threshold` | 3 | `failure_threshold` |
/// | `breaker_cooldown` | 5 s | `breaker_cooldown_ms` |
/// | `breaker_cooldown_max` | 30 s | `breaker_cooldown_max_ms` |
/// | `backoff_base` | 1 s | `backoff_base_ms` |
/// | `backoff_cap` | 60 s | `backoff_cap_ms` |
/// | `max_response_bytes` | 8 MiB | `max_response_bytes` |
/// | `retry_budget` | 0.2 | `retry_budget` |
/// | `spill_after` | 1 s | `spill_after_ms` |
/// | `latency_allowance` | 1 s | `latency_allowance_ms` |
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Policy {
    /// Most attempts (sends) per request, across providers.
    pub max_attempts: u32,
    /// Longest total time for one request, waits included.
    pub deadline: Duration,
    /// Longest time for one attempt (connect to last byte).
    pub request_timeout: Duration,
    /// Longest time to establish a connection.
    pub connect_timeout: Duration,
    /// A provider asking to wait longer than this is skipped (breaker open for the stated
    /// time) instead of waited for.
    pub max_retry_after: Duration,
    /// How long a provider with an exhausted quota is skipped when it states no reset.
    pub quota_cooldown: Duration,
    /// Consecutive transient failures that open a provider's breaker (0: never).
    pub failure_threshold: u32,
    /// The first cooldown after the threshold is reached; doubles on each re-trip.
    pub breaker_cooldown: Duration,
    /// The longest cooldown.
    pub breaker_cooldown_max: Duration,
    /// Base of the full-jitter backoff (a 429 without a stated delay, transient retries).
    pub backoff_base: Duration,
    /// Cap of the full-jitter backoff.
    pub backoff_cap: Duration,
    /// Largest response body read.
    pub max_response_bytes: usize,
    /// Retries allowed as a fraction of first attempts (0.2 = 20 % extra load).
    pub retry_budget: f64,
    /// A provider whose admission wait is longer than this is passed over for the next one in
    /// the failover order that can start sooner (0: use the first provider that is not
    /// throttled, however long its pacing wait).
    pub spill_after: Duration,
    /// How late a request may reach the provider after we booked it (connection setup,
    /// scheduling). Each bucket keeps this much of its refill in reserve, so a burst from a
    /// full bucket never exceeds what the server, whose bucket starts refilling when the
    /// request *arrives*, will admit. Costs a burst `allowance / window` of its size (1/60
    /// for per-minute limits at 1 s) and nothing in steady state.
    pub latency_allowance: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_attempts: 4,
            deadline: Duration::from_secs(120),
            request_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
            max_retry_after: Duration::from_secs(120),
            quota_cooldown: Duration::from_secs(15 * 60),
            failure_threshold: 3,
            breaker_cooldown: Duration::from_secs(5),
            breaker_cooldown_max: Duration::from_secs(30),
            backoff_base: Duration::from_secs(1),
            backoff_cap: Duration::from_secs(60),
            max_response_bytes: 8 << 20,
            retry_budget: 0.2,
            spill_after: Duration::from_secs(1),
            latency_allowance: Duration::from_secs(1),
        }
    }
}

/// A validated `providers.toml`.
///
/// # Examples
///
/// ```
/// use llm_failover::Config;
///
/// let config = Config::from_toml_str(r#"
///     default_environment = "local"
///     [environments.local]
///     chat = ["ollama"]
///     [providers.ollama]
///     kind = "openai"
///     base_url = "http://127.0.0.1:11434/v1"
///     model = "llama3.2"
///     auth = "none"
///     [policy]
///     deadline_ms = 30000
/// "#)?;
/// assert_eq!(config.default_environment, "local");
/// assert_eq!(config.policy.deadline.as_secs(), 30);
/// assert!(Config::from_toml_str("default_environment = 1").unwrap_err().is_config());
/// # Ok::<(), llm_failover::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Config {
    /// The environment used when neither the builder nor `LLM_FAILOVER_ENV` names one.
    pub default_environment: String,
    /// Environments by name.
    pub environments: BTreeMap<String, Environment>,
    /// Providers by name.
    pub providers: BTreeMap<String, ProviderConfig>,
    /// Shared policy.
    pub policy: Policy,
    /// `[shared]`: limits and breakers shared with other processes through Redis; `None`
    /// (no `[shared]` table), this process's own memory. The URL inside is kept secret:
    /// `Debug` shows only its host and port.
    pub shared: Option<SharedSettings>,
    /// `[cache]`: the response cache of a client built from this configuration; `None` (no
    /// `[cache]` table), none — unless one is given in code
    /// ([`ClientBuilder::cache`](crate::ClientBuilder::cache), which wins over this).
    pub cache: Option<CacheSettings>,
    /// Whether `[policy]` states `deadline_ms` (or the policy was given in code).
    pub(crate) deadline_stated: bool,
}

impl Config {
    /// The request deadline the configuration states — `deadline_ms` in `[policy]`, or a
    /// policy given in code — and `None` when it leaves it to the default. A tool with a
    /// default of its own (the batch's hour per item) uses the stated one over its default,
    /// and only a value its user gives explicitly over both.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use llm_failover::Config;
    ///
    /// let file = |policy: &str| format!(r#"
    ///     default_environment = "local"
    ///     [environments.local]
    ///     chat = ["ollama"]
    ///     [providers.ollama]
    ///     kind = "openai"
    ///     base_url = "http://127.0.0.1:11434/v1"
    ///     model = "llama3.2"
    ///     auth = "none"
    ///     {policy}
    /// "#);
    /// let stated = Config::from_toml_str(&file("[policy]\ndeadline_ms = 10000"))?;
    /// assert_eq!(stated.stated_deadline(), Some(Duration::from_secs(10)));
    /// let unstated = Config::from_toml_str(&file("[policy]\nmax_attempts = 2"))?;
    /// assert_eq!(unstated.stated_deadline(), None);
    /// assert_eq!(unstated.policy.deadline, Duration::from_secs(120)); // the default
    /// # Ok::<(), llm_failover::Error>(())
    /// ```
    pub fn stated_deadline(&self) -> Option<Duration> {
        self.deadline_stated.then_some(self.policy.deadline)
    }
}

/// `[cache]`: where a client built from the configuration keeps its answers, how long and how
/// many ([`cache`](crate::cache): what is kept, where, for how long).
///
/// ```toml
/// [cache]
/// url = "sqlite:answers.sqlite"   # or "memory", or "redis://127.0.0.1:6379/0"
/// ttl_ms = 604800000              # 7 days (the default; at most 365 days)
/// max_entries = 100000            # the default; past it the oldest go
/// # redis_prefix = "llm-failover" # Redis only: every key starts with it
/// # redis_timeout_ms = 250        # Redis only: the longest one call may take (at most 60000)
/// # redis_cluster = true          # Redis only: the URL names a node of a Redis Cluster
/// # redis_tls_ca_file = "ca.pem"  # rediss:// only: the CA to trust (else the platform's roots)
/// # redis_tls_client_cert_file = "client.pem"  # rediss:// only, with redis_tls_client_key_file
/// ```
///
/// A relative `sqlite:PATH` is relative to the working directory of the process that builds
/// the client — as [`Cache::open`] and the `llm-failover` command's `--cache` read it — not
/// to the file's directory (so are the TLS files). A Redis URL
/// may hold a password (`redis://:PASSWORD@host:6379`): `Debug` and every message show the
/// host and port only.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use llm_failover::Config;
///
/// let config = Config::from_toml_str(r#"
///     default_environment = "local"
///     [environments.local]
///     chat = ["ollama"]
///     [providers.ollama]
///     kind = "openai"
///     base_url = "http://127.0.0.1:11434/v1"
///     model = "llama3.2"
///     auth = "none"
///     [cache]
///     url = "memory"
///     ttl_ms = 3600000
/// "#)?;
/// let settings = config.cache.as_ref().expect("a [cache] table");
/// assert_eq!((settings.describe(), settings.ttl), ("memory".to_owned(), Duration::from_secs(3600)));
/// let cache = settings.build()?; // what a client built from `config` answers from
/// assert_eq!(cache.ttl(), Duration::from_secs(3600));
/// # Ok::<(), llm_failover::Error>(())
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct CacheSettings {
    url: SecretString,
    /// How long an answer is kept ([`DEFAULT_TTL`](crate::cache::DEFAULT_TTL) unless set).
    pub ttl: Duration,
    /// The most answers kept ([`DEFAULT_MAX_ENTRIES`](crate::cache::DEFAULT_MAX_ENTRIES)
    /// unless set).
    pub max_entries: u64,
    /// Redis only: every key starts with this (`None`: the cache's default, `llm-failover`).
    pub redis_prefix: Option<String>,
    /// Redis only: the longest one call may take before it counts as a miss (`None`: the
    /// cache's default, 250 ms).
    pub redis_timeout: Option<Duration>,
    /// Redis over TLS (`rediss://`) only: the CA and client certificate.
    pub redis_tls: RedisTls,
    /// Redis only: the URL names a node of a Redis Cluster
    /// ([`CacheBuilder::redis_cluster`]).
    pub redis_cluster: bool,
}

impl CacheSettings {
    /// A cache at `url` (`memory`, `sqlite:PATH` or `redis://…`) with the default TTL and
    /// bound.
    pub fn new(url: impl Into<String>) -> Self {
        CacheSettings {
            url: SecretString::from(url.into()),
            ttl: crate::cache::DEFAULT_TTL,
            max_entries: crate::cache::DEFAULT_MAX_ENTRIES,
            redis_prefix: None,
            redis_timeout: None,
            redis_tls: RedisTls::default(),
            redis_cluster: false,
        }
    }

    /// `memory`, `sqlite:PATH`, or `redis://host:port` (never a password).
    pub fn describe(&self) -> String {
        let url = self.url.expose_secret();
        if !url.starts_with("redis") {
            return url.to_owned();
        }
        format!("redis://{}", SharedSettings::new(url).host())
    }

    /// A [`CacheBuilder`] with these settings.
    pub fn to_builder(&self) -> CacheBuilder {
        let mut b = Cache::builder(self.url.expose_secret())
            .ttl(self.ttl)
            .max_entries(self.max_entries);
        if let Some(prefix) = &self.redis_prefix {
            b = b.redis_prefix(prefix.clone());
        }
        if let Some(timeout) = self.redis_timeout {
            b = b.redis_timeout(timeout);
        }
        b.redis_tls(self.redis_tls.clone())
            .redis_cluster(self.redis_cluster)
    }

    /// The cache (an SQLite file is opened, a Redis server connected to, on first use).
    ///
    /// # Errors
    ///
    /// `Config`, naming `[cache]`, as [`CacheBuilder::build`] (settings read from a file were
    /// checked when it was parsed; these can fail only if changed since).
    pub fn build(&self) -> Result<Cache> {
        self.to_builder()
            .build()
            .map_err(|e| Error::config(format!("[cache] ({}): {}", self.describe(), e.message())))
    }
}

impl fmt::Debug for CacheSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheSettings")
            .field("url", &self.describe())
            .field("ttl", &self.ttl)
            .field("max_entries", &self.max_entries)
            .field("redis_prefix", &self.redis_prefix)
            .field("redis_timeout", &self.redis_timeout)
            .field("redis_tls", &self.redis_tls)
            .field("redis_cluster", &self.redis_cluster)
            .finish()
    }
}

impl PartialEq for CacheSettings {
    fn eq(&self, other: &Self) -> bool {
        self.url.expose_secret() == other.url.expose_secret()
            && self.ttl == other.ttl
            && self.max_entries == other.max_entries
            && self.redis_prefix == other.redis_prefix
            && self.redis_timeout == other.redis_timeout
            && self.redis_tls == other.redis_tls
            && self.redis_cluster == other.redis_cluster
    }
}
