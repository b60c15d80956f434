//! [`ConfigBuilder`] and [`ProviderConfigBuilder`]: a [`Config`] written in code.
//!
//! The builders write what a `providers.toml` would hold and [`ConfigBuilder::build`] runs the
//! very checks a file goes through, so a configuration means the same whichever way it was
//! written, and an error names the same path (`providers.openai.base_url: …`, without a line
//! and column). Keys are never part of it: a provider names the variable its key is read from
//! in each environment ([`key_env`](ProviderConfigBuilder::key_env)), takes none
//! ([`no_key`](ProviderConfigBuilder::no_key)), or has it handed over in code with
//! [`ClientBuilder::credential`](crate::ClientBuilder::credential)
//! ([`key_in_code`](ProviderConfigBuilder::key_in_code)).

use std::collections::BTreeMap;
use std::time::Duration;

use super::raw::{RawConfig, RawEnvironment, RawLimits, RawPolicy, RawProvider, RawShared};
use super::source::TomlPath;
use super::types::{Config, Policy, ProviderKind};
use super::validate::validate;
use crate::error::{Error, Result};
use crate::ratelimit::{HeaderDialect, Limits, SharedSettings, WhenDown};

/// Builds a [`Config`] in code: providers, environments (failover orders) and the policy.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use llm_failover::config::{Config, Policy, ProviderConfig, ProviderKind};
/// use llm_failover::{Client, Credential, Limits};
///
/// let mut policy = Policy::default();
/// policy.deadline = Duration::from_secs(20);
/// let config = Config::builder("prod")
///     .provider(
///         "openai",
///         ProviderConfig::builder(ProviderKind::OpenAi, "https://api.openai.com/v1")
///             .model("gpt-4o-mini")
///             .limits(Limits::none().with_rpm(500).with_tpm(200_000))
///             .key_in_code(),
///     )
///     .provider(
///         "anthropic",
///         ProviderConfig::builder(ProviderKind::Anthropic, "https://api.anthropic.com/v1")
///             .model("claude-3-5-haiku-latest")
///             .key_env("prod", "ANTHROPIC_API_KEY"),
///     )
///     .chat("prod", ["openai", "anthropic"])
///     .policy(policy)
///     .build()?;
///
/// // Inspected like a parsed file.
/// assert_eq!(config.environment("prod")?.chat.len(), 2);
/// assert_eq!(config.provider("openai")?.limits.rpm.map(|n| n.get()), Some(500));
/// assert_eq!(config.policy.deadline, Duration::from_secs(20));
///
/// let client = Client::builder()
///     .config(config)
///     .credential("openai", Credential::new("sk-from-your-secret-store"))
///     .credential("anthropic", Credential::new("sk-ant-from-your-secret-store"))
///     .build()?;
/// assert_eq!(client.environment(), "prod");
/// # Ok::<(), llm_failover::Error>(())
/// ```
#[derive(Debug)]
#[must_use]
pub struct ConfigBuilder {
    default_environment: String,
    environments: BTreeMap<String, RawEnvironment>,
    providers: BTreeMap<String, RawProvider>,
    policy: Option<Policy>,
    shared: Option<RawShared>,
}

impl Config {
    /// A configuration written in code, whose default environment is `default_environment`.
    pub fn builder(default_environment: impl Into<String>) -> ConfigBuilder {
        ConfigBuilder {
            default_environment: default_environment.into(),
            environments: BTreeMap::new(),
            providers: BTreeMap::new(),
            policy: None,
            shared: None,
        }
    }
}

impl ConfigBuilder {
    /// Adds (or replaces) the provider called `name`.
    pub fn provider(mut self, name: impl Into<String>, provider: ProviderConfigBuilder) -> Self {
        self.providers.insert(name.into(), provider.raw);
        self
    }

    /// Sets `environment`'s chat providers, in failover order (defining the environment).
    pub fn chat<S: Into<String>>(
        mut self,
        environment: impl Into<String>,
        order: impl IntoIterator<Item = S>,
    ) -> Self {
        self.env(environment).chat = order.into_iter().map(Into::into).collect();
        self
    }

    /// Sets `environment`'s speech-to-text providers, in failover order (defining the
    /// environment).
    pub fn transcription<S: Into<String>>(
        mut self,
        environment: impl Into<String>,
        order: impl IntoIterator<Item = S>,
    ) -> Self {
        self.env(environment).transcription = order.into_iter().map(Into::into).collect();
        self
    }

    /// Sets `environment`'s embedding providers, in failover order (defining the
    /// environment).
    pub fn embedding<S: Into<String>>(
        mut self,
        environment: impl Into<String>,
        order: impl IntoIterator<Item = S>,
    ) -> Self {
        self.env(environment).embedding = order.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the policy (default: [`Policy::default`]). It is checked as a `[policy]` table
    /// is, to the millisecond.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Shares limits and breakers with other processes through Redis, as a `[shared]` table
    /// does (checked by its rules, durations to the millisecond; errors name `shared.…` and
    /// never the URL).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use llm_failover::config::{Config, ProviderConfig, ProviderKind};
    /// use llm_failover::ratelimit::SharedSettings;
    ///
    /// let config = Config::builder("local")
    ///     .provider(
    ///         "ollama",
    ///         ProviderConfig::builder(ProviderKind::OpenAi, "http://127.0.0.1:11434/v1")
    ///             .model("llama3.2")
    ///             .no_key(),
    ///     )
    ///     .chat("local", ["ollama"])
    ///     .shared(SharedSettings::new("redis://127.0.0.1:6379").prefix("nightly"))
    ///     .build()?;
    /// let shared = config.shared.as_ref().expect("shared");
    /// assert_eq!((shared.host().as_str(), shared.key_prefix.as_str()), ("127.0.0.1:6379", "nightly"));
    ///
    /// let err = Config::builder("local")
    /// #   .provider("ollama", ProviderConfig::builder(ProviderKind::OpenAi, "http://127.0.0.1:11434/v1").model("m").no_key())
    /// #   .chat("local", ["ollama"])
    ///     .shared(SharedSettings::new("redis://:hunter2@127.0.0.1:6379").timeout(Duration::ZERO))
    ///     .build()
    ///     .unwrap_err();
    /// assert!(err.message().starts_with("shared.timeout_ms: "));
    /// assert!(!err.message().contains("hunter2"));
    /// # Ok::<(), llm_failover::Error>(())
    /// ```
    pub fn shared(mut self, shared: SharedSettings) -> Self {
        self.shared = Some(raw_shared(&shared));
        self
    }

    fn env(&mut self, name: impl Into<String>) -> &mut RawEnvironment {
        self.environments
            .entry(name.into())
            .or_insert_with(|| RawEnvironment {
                chat: Vec::new(),
                transcription: Vec::new(),
                embedding: Vec::new(),
                budget: None,
                tenant_budgets: BTreeMap::new(),
            })
    }

    /// Checks everything a `providers.toml` is checked for and returns the configuration.
    ///
    /// # Errors
    ///
    /// [`Config`](crate::ErrorKind::Config), naming the path at fault as for a file
    /// (`providers.openai.base_url: …`): an unknown environment or provider, a provider that
    /// cannot serve what it is listed for, a missing model or key source, a bad URL, limit or
    /// policy value.
    pub fn build(self) -> Result<Config> {
        let raw = RawConfig {
            default_environment: self.default_environment,
            policy: self.policy.as_ref().map(raw_policy).unwrap_or_default(),
            environments: self.environments,
            providers: self.providers,
            shared: self.shared,
            cache: None,
        };
        validate(&raw).map_err(|issue| {
            let message = if issue.path == TomlPath::root() {
                issue.message
            } else {
                format!("{}: {}", issue.path, issue.message)
            };
            Error::config(message)
        })
    }
}

/// One provider of a [`ConfigBuilder`]: the fields of a `[providers.NAME]` table.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use llm_failover::config::{ProviderConfig, ProviderKind};
/// use llm_failover::Limits;
///
/// // A local model server: plain http to loopback, no key.
/// let ollama = ProviderConfig::builder(ProviderKind::OpenAi, "http://127.0.0.1:11434/v1")
///     .model("llama3.2")
///     .no_key()
///     .timeout(Duration::from_secs(120))
///     .extra_body("options", serde_json::json!({ "num_ctx": 8192 }));
/// # let _ = ollama;
/// ```
#[derive(Debug)]
#[must_use]
pub struct ProviderConfigBuilder {
    raw: RawProvider,
}

impl super::types::ProviderConfig {
    /// A provider of `kind` at `base_url` (checked at [`ConfigBuilder::build`]).
    pub fn builder(kind: ProviderKind, base_url: impl Into<String>) -> ProviderConfigBuilder {
        ProviderConfigBuilder {
            raw: RawProvider {
                kind: kind.as_str().to_owned(),
                base_url: base_url.into(),
                model: None,
                transcription_model: None,
                embedding_model: None,
                api_key_env: None,
                key_file: None,
                aws_credentials_env: None,
                region: None,
                auth: None,
                key_in_code: false,
                limits: None,
                model_limits: BTreeMap::new(),
                prices: BTreeMap::new(),
                budget: None,
                timeout_ms: None,
                allow_http: false,
                api_version: None,
                header_dialect: None,
                extra_body: toml::Table::new(),
                extra_json: serde_json::Map::new(),
            },
        }
    }
}

impl ProviderConfigBuilder {
    /// The default chat model (for Azure, the deployment; for Deepgram, the speech model).
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.raw.model = Some(model.into());
        self
    }

    /// The default speech-to-text model (for Azure, the Whisper deployment).
    pub fn transcription_model(mut self, model: impl Into<String>) -> Self {
        self.raw.transcription_model = Some(model.into());
        self
    }

    /// The default embedding model (for Azure, the embedding deployment).
    pub fn embedding_model(mut self, model: impl Into<String>) -> Self {
        self.raw.embedding_model = Some(model.into());
        self
    }

    /// In `environment`, the key is read from the variable called `variable` (its name, never
    /// a key: a value that looks like one is refused).
    pub fn key_env(mut self, environment: impl Into<String>, variable: impl Into<String>) -> Self {
        self.raw
            .api_key_env
            .get_or_insert_with(BTreeMap::new)
            .insert(environment.into(), variable.into());
        self
    }

    /// In `environment`, AWS credentials (Bedrock) are read from the variables named
    /// `access_key_id` and `secret_access_key`, and `session_token` for temporary ones (their
    /// names, never the values: `aws_credentials_env` in `providers.toml`).
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::config::{ProviderConfig, ProviderKind};
    ///
    /// let aws = ProviderConfig::builder(
    ///     ProviderKind::Bedrock,
    ///     "https://bedrock-runtime.us-east-1.amazonaws.com",
    /// )
    /// .model("amazon.nova-lite-v1:0")
    /// .aws_credentials_env("prod", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", Some("AWS_SESSION_TOKEN"));
    /// # let _ = aws;
    /// ```
    pub fn aws_credentials_env(
        mut self,
        environment: impl Into<String>,
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
        session_token: Option<&str>,
    ) -> Self {
        self.raw
            .aws_credentials_env
            .get_or_insert_with(BTreeMap::new)
            .insert(
                environment.into(),
                super::raw::RawAwsEnv {
                    access_key_id: access_key_id.into(),
                    secret_access_key: secret_access_key.into(),
                    session_token: session_token.map(str::to_owned),
                },
            );
        self
    }

    /// The AWS region requests are signed for (Bedrock), when the base URL's host does not
    /// name it: `region` in `providers.toml`.
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.raw.region = Some(region.into());
        self
    }

    /// The provider takes no key (a local model server): `auth = "none"`.
    pub fn no_key(mut self) -> Self {
        self.raw.auth = Some("none".to_owned());
        self
    }

    /// The key is handed over in code, in every environment, with
    /// [`ClientBuilder::credential`](crate::ClientBuilder::credential): the configuration
    /// holds no key and names no variable. Building a client without it is an error.
    pub fn key_in_code(mut self) -> Self {
        self.raw.key_in_code = true;
        self
    }

    /// Limits applying to each of its models.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.raw.limits = Some(raw_limits(&limits));
        self
    }

    /// Limits of `model`, replacing [`limits`](Self::limits) for it.
    pub fn model_limits(mut self, model: impl Into<String>, limits: Limits) -> Self {
        self.raw
            .model_limits
            .insert(model.into(), raw_limits(&limits));
        self
    }

    /// What `model` costs at this provider (`prices` in `providers.toml`).
    pub fn price(mut self, model: impl Into<String>, price: crate::types::price::Price) -> Self {
        self.raw.prices.insert(model.into(), price);
        self
    }

    /// The per-attempt timeout, overriding the policy's (to the millisecond).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.raw.timeout_ms = Some(millis(timeout));
        self
    }

    /// Allows `http://` to a host that is not loopback.
    pub fn allow_http(mut self) -> Self {
        self.raw.allow_http = true;
        self
    }

    /// Azure's `api-version`, or the `anthropic-version` header.
    pub fn api_version(mut self, version: impl Into<String>) -> Self {
        self.raw.api_version = Some(version.into());
        self
    }

    /// How to read its rate-limit headers (default: its kind's).
    pub fn header_dialect(mut self, dialect: HeaderDialect) -> Self {
        self.raw.header_dialect = Some(dialect.as_str().to_owned());
        self
    }

    /// One field merged into each chat request's JSON body
    /// ([`ProviderSettings::extra_body`](crate::ProviderSettings::extra_body)).
    pub fn extra_body(
        mut self,
        field: impl Into<String>,
        value: impl Into<serde_json::Value>,
    ) -> Self {
        self.raw.extra_json.insert(field.into(), value.into());
        self
    }
}

fn raw_limits(l: &Limits) -> RawLimits {
    let n = |v: Option<std::num::NonZeroU64>| v.map(|n| i64::try_from(n.get()).unwrap_or(i64::MAX));
    RawLimits {
        rpm: n(l.rpm),
        tpm: n(l.tpm),
        rpd: n(l.rpd),
        tpd: n(l.tpd),
        audio_seconds_per_hour: n(l.audio_seconds_per_hour),
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn raw_shared(s: &SharedSettings) -> RawShared {
    let (when_down, processes) = match s.when_down {
        WhenDown::Wait => ("wait", None),
        WhenDown::LocalShare { processes } => ("local_share", Some(i64::from(processes.get()))),
    };
    RawShared {
        redis_url: s.url().to_owned(),
        key_prefix: Some(s.key_prefix.clone()),
        timeout_ms: Some(millis(s.timeout)),
        when_down: Some(when_down.to_owned()),
        processes,
        retry_interval_ms: Some(millis(s.retry_interval)),
        // A path that is not UTF-8 is checked as written here (its file is then not found,
        // and the message names it).
        tls_ca_file: s
            .tls
            .ca_file
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned()),
        tls_client_cert_file: s
            .tls
            .client_cert_file
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned()),
        tls_client_key_file: s
            .tls
            .client_key_file
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned()),
        cluster: Some(s.cluster),
    }
}

fn raw_policy(p: &Policy) -> RawPolicy {
    let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    RawPolicy {
        max_attempts: Some(i64::from(p.max_attempts)),
        deadline_ms: Some(millis(p.deadline)),
        request_timeout_ms: Some(millis(p.request_timeout)),
        connect_timeout_ms: Some(millis(p.connect_timeout)),
        max_retry_after_ms: Some(millis(p.max_retry_after)),
        quota_cooldown_ms: Some(millis(p.quota_cooldown)),
        failure_threshold: Some(i64::from(p.failure_threshold)),
        breaker_cooldown_ms: Some(millis(p.breaker_cooldown)),
        breaker_cooldown_max_ms: Some(millis(p.breaker_cooldown_max)),
        backoff_base_ms: Some(millis(p.backoff_base)),
        backoff_cap_ms: Some(millis(p.backoff_cap)),
        max_response_bytes: Some(int(p.max_response_bytes as u64)),
        retry_budget: Some(p.retry_budget),
        spill_after_ms: Some(millis(p.spill_after)),
        latency_allowance_ms: Some(millis(p.latency_allowance)),
    }
}
