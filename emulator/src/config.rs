//! The emulator's configuration: which providers it serves, under which prefix, with which key,
//! limits, header style and faults. Read from TOML (`emulator.toml`) or built in code.
//!
//! # Examples
//!
//! ```
//! use emulator::{EmulatorConfig, Limits, ProviderConfig};
//!
//! let cfg = EmulatorConfig::from_toml_str(r#"
//!     minute_ms = 6000
//!     [providers.openai]
//!     kind = "openai"
//!     limits = { rpm = 60, tpm = 10000 }
//! "#).unwrap();
//! assert_eq!(cfg.providers["openai"].limits, Limits { rpm: Some(60), tpm: Some(10_000), ..Limits::default() });
//!
//! // The same in code:
//! let cfg = EmulatorConfig::default()
//!     .with_minute_ms(6000)
//!     .with_provider(ProviderConfig::openai("openai").with_limits(Limits::per_minute(60, 10_000)));
//! assert_eq!(cfg.providers.len(), 1);
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::faults::FaultConfig;

/// The key every provider accepts unless its config says otherwise.
pub const DEFAULT_KEY: &str = "emulator-key";

/// The wire format a provider speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Kind {
    /// OpenAI (and OpenAI-compatible hosts): `/v1/chat/completions`, `/v1/audio/transcriptions`.
    #[serde(rename = "openai")]
    OpenAi,
    /// Azure OpenAI: `/openai/deployments/{deployment}/chat/completions?api-version=…`.
    Azure,
    /// Anthropic: `/v1/messages`.
    Anthropic,
    /// Gemini: `/v1beta/models/{model}:generateContent` and `:streamGenerateContent`.
    Gemini,
    /// Deepgram: `/v1/listen`.
    Deepgram,
}

impl Kind {
    /// The name used in TOML (`kind = "openai"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::OpenAi => "openai",
            Kind::Azure => "azure",
            Kind::Anthropic => "anthropic",
            Kind::Gemini => "gemini",
            Kind::Deepgram => "deepgram",
        }
    }

    /// The header style this provider uses unless configured otherwise.
    pub fn default_headers(self) -> HeaderStyle {
        match self {
            Kind::OpenAi => HeaderStyle::OpenAi,
            Kind::Azure => HeaderStyle::Azure,
            Kind::Anthropic => HeaderStyle::Anthropic,
            Kind::Gemini | Kind::Deepgram => HeaderStyle::None,
        }
    }

    /// Where limits are kept unless configured otherwise: per model for the chat providers
    /// (OpenAI, Anthropic and Gemini limit each model separately; an Azure deployment is one
    /// model), per project for Deepgram.
    pub fn default_scope(self) -> LimitScope {
        match self {
            Kind::Deepgram => LimitScope::Provider,
            _ => LimitScope::Model,
        }
    }

    /// The path after the prefix that the provider's official SDK appends to its base URL
    /// (see [`Emulator::base_url`](crate::Emulator::base_url)).
    pub(crate) fn base_path(self) -> &'static str {
        match self {
            Kind::OpenAi => "/v1",
            Kind::Azure | Kind::Anthropic | Kind::Gemini | Kind::Deepgram => "",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which family of rate-limit headers responses carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum HeaderStyle {
    /// `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, Go-style reset durations,
    /// per minute.
    #[serde(rename = "openai")]
    OpenAi,
    /// Groq: the OpenAI names, but the request headers count per day (RPD) and the token
    /// headers per minute (TPM).
    Groq,
    /// OpenRouter: `X-RateLimit-{Limit,Remaining,Reset}` for requests, reset in epoch
    /// milliseconds; OpenRouter's own 429 body.
    #[serde(rename = "openrouter")]
    OpenRouter,
    /// Azure OpenAI: `x-ratelimit-remaining-{requests,tokens}`, `x-rate-limit-reset-tokens`
    /// in seconds, `retry-after-ms` + `retry-after` on 429.
    Azure,
    /// `anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}`, RFC 3339 resets.
    Anthropic,
    /// No rate-limit headers (Gemini, Deepgram).
    None,
}

/// Where a provider keeps its buckets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum LimitScope {
    /// One set of buckets per model (deployment for Azure).
    Model,
    /// One set of buckets for the whole provider.
    Provider,
}

/// What the token bucket is charged once the answer is known.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ChargeMode {
    /// Admission charges prompt estimate + `max_tokens`; after the answer the unused part of
    /// `max_tokens` is given back, so the bucket ends up charged prompt + actual output.
    #[default]
    Actual,
    /// The admission charge (prompt estimate + `max_tokens`) stays.
    Estimate,
}

/// Rate limits of one provider (or one model). `None` = no limit.
///
/// Every limit is a continuously refilled bucket: capacity = the limit, refill = the limit
/// per window (a minute of [`EmulatorConfig::minute_ms`], a day of 1440 such minutes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Limits {
    /// Requests per minute.
    pub rpm: Option<u64>,
    /// Tokens per minute (input estimate + `max_tokens`, see [`ChargeMode`]).
    pub tpm: Option<u64>,
    /// Requests per day.
    pub rpd: Option<u64>,
    /// Tokens per day.
    pub tpd: Option<u64>,
    /// Requests in flight at once (Deepgram limits concurrency, not rate).
    pub concurrency: Option<u32>,
}

impl Limits {
    /// No limits.
    pub fn none() -> Self {
        Self::default()
    }

    /// `rpm` requests and `tpm` tokens per minute.
    pub fn per_minute(rpm: u64, tpm: u64) -> Self {
        Limits {
            rpm: Some(rpm),
            tpm: Some(tpm),
            ..Self::default()
        }
    }

    /// Sets requests per minute.
    #[must_use]
    pub fn with_rpm(mut self, rpm: u64) -> Self {
        self.rpm = Some(rpm);
        self
    }

    /// Sets tokens per minute.
    #[must_use]
    pub fn with_tpm(mut self, tpm: u64) -> Self {
        self.tpm = Some(tpm);
        self
    }

    /// Sets requests per day.
    #[must_use]
    pub fn with_rpd(mut self, rpd: u64) -> Self {
        self.rpd = Some(rpd);
        self
    }

    /// Sets tokens per day.
    #[must_use]
    pub fn with_tpd(mut self, tpd: u64) -> Self {
        self.tpd = Some(tpd);
        self
    }

    /// Sets both per-day limits.
    #[must_use]
    pub fn with_daily(mut self, rpd: Option<u64>, tpd: Option<u64>) -> Self {
        self.rpd = rpd;
        self.tpd = tpd;
        self
    }

    /// Adds a concurrency limit.
    #[must_use]
    pub fn with_concurrency(mut self, concurrency: u32) -> Self {
        self.concurrency = Some(concurrency);
        self
    }

    /// True when no rate limit is set (concurrency aside).
    pub fn is_unlimited(&self) -> bool {
        self.rpm.is_none() && self.tpm.is_none() && self.rpd.is_none() && self.tpd.is_none()
    }
}

/// Added latency: `ms` plus a uniformly drawn `0..=jitter_ms`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Latency {
    /// Fixed part, in milliseconds.
    #[serde(default)]
    pub ms: u64,
    /// Random part, up to this many milliseconds.
    #[serde(default)]
    pub jitter_ms: u64,
}

/// One provider the emulator serves.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ProviderConfig {
    /// The path prefix (`openai` serves `/openai/v1/chat/completions`). Taken from the table
    /// name in TOML.
    #[serde(skip)]
    pub prefix: String,
    /// Wire format.
    pub kind: Kind,
    /// The one key accepted.
    #[serde(default = "default_key")]
    pub key: String,
    /// Models (Azure: deployments) served; empty = any model name is accepted.
    #[serde(default)]
    pub models: Vec<String>,
    /// Limits of each model (or of the provider, see `scope`).
    #[serde(default)]
    pub limits: Limits,
    /// Limits for particular models, replacing `limits` for them.
    #[serde(default)]
    pub model_limits: BTreeMap<String, Limits>,
    /// Per model or per provider; default per [`Kind::default_scope`].
    #[serde(default)]
    pub scope: Option<LimitScope>,
    /// Rate-limit header family; default per [`Kind::default_headers`].
    #[serde(default)]
    pub headers: Option<HeaderStyle>,
    /// How tokens are charged.
    #[serde(default)]
    pub charge: ChargeMode,
    /// `max_tokens` assumed for cost when a request does not say (OpenAI, Gemini).
    #[serde(default = "default_max_tokens")]
    pub default_max_tokens: u64,
    /// A "minute" for this provider, overriding [`EmulatorConfig::minute_ms`].
    #[serde(default)]
    pub minute_ms: Option<u64>,
    /// Latency added to every answer.
    #[serde(default)]
    pub latency: Latency,
    /// Pause between streamed chunks, in milliseconds.
    #[serde(default)]
    pub stream_chunk_ms: u64,
    /// How long a `hang` fault holds the request before dropping the connection.
    #[serde(default = "default_hang_ms")]
    pub hang_ms: u64,
    /// Serve this provider on its own port too (paths then start at the root).
    #[serde(default)]
    pub port: Option<u16>,
    /// Largest request body, replacing the provider's own cap (OpenAI audio 25 MB, Anthropic
    /// 32 MB, Gemini 20 MB, …); larger bodies get the provider's 413.
    #[serde(default)]
    pub max_body_bytes: Option<usize>,
    /// Scripted faults and a random fault mix.
    #[serde(default)]
    pub faults: FaultConfig,
}

fn default_key() -> String {
    DEFAULT_KEY.to_owned()
}

fn default_max_tokens() -> u64 {
    1024
}

fn default_hang_ms() -> u64 {
    30_000
}

impl ProviderConfig {
    /// A provider of `kind` under `prefix`, key [`DEFAULT_KEY`], no limits, no faults.
    pub fn new(prefix: impl Into<String>, kind: Kind) -> Self {
        ProviderConfig {
            prefix: prefix.into(),
            kind,
            key: default_key(),
            models: Vec::new(),
            limits: Limits::default(),
            model_limits: BTreeMap::new(),
            scope: None,
            headers: None,
            charge: ChargeMode::default(),
            default_max_tokens: default_max_tokens(),
            minute_ms: None,
            latency: Latency::default(),
            stream_chunk_ms: 0,
            hang_ms: default_hang_ms(),
            port: None,
            max_body_bytes: None,
            faults: FaultConfig::default(),
        }
    }

    /// An OpenAI provider under `prefix`.
    pub fn openai(prefix: impl Into<String>) -> Self {
        Self::new(prefix, Kind::OpenAi)
    }

    /// An Azure OpenAI resource under `prefix`.
    pub fn azure(prefix: impl Into<String>) -> Self {
        Self::new(prefix, Kind::Azure)
    }

    /// An Anthropic provider under `prefix`.
    pub fn anthropic(prefix: impl Into<String>) -> Self {
        Self::new(prefix, Kind::Anthropic)
    }

    /// A Gemini provider under `prefix`.
    pub fn gemini(prefix: impl Into<String>) -> Self {
        Self::new(prefix, Kind::Gemini)
    }

    /// A Deepgram provider under `prefix`.
    pub fn deepgram(prefix: impl Into<String>) -> Self {
        Self::new(prefix, Kind::Deepgram)
    }

    /// Accepts `key` instead of [`DEFAULT_KEY`].
    #[must_use]
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.key = key.into();
        self
    }

    /// Serves only these models (deployments for Azure).
    #[must_use]
    pub fn with_models<S: Into<String>>(mut self, models: impl IntoIterator<Item = S>) -> Self {
        self.models = models.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the limits.
    #[must_use]
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets the limits of one model.
    #[must_use]
    pub fn with_model_limits(mut self, model: impl Into<String>, limits: Limits) -> Self {
        self.model_limits.insert(model.into(), limits);
        self
    }

    /// Keeps buckets per model or per provider.
    #[must_use]
    pub fn with_scope(mut self, scope: LimitScope) -> Self {
        self.scope = Some(scope);
        self
    }

    /// Sends this header family.
    #[must_use]
    pub fn with_headers(mut self, style: HeaderStyle) -> Self {
        self.headers = Some(style);
        self
    }

    /// Sets the charge mode.
    #[must_use]
    pub fn with_charge(mut self, charge: ChargeMode) -> Self {
        self.charge = charge;
        self
    }

    /// Sets this provider's minute length.
    #[must_use]
    pub fn with_minute_ms(mut self, minute_ms: u64) -> Self {
        self.minute_ms = Some(minute_ms);
        self
    }

    /// Adds latency to every answer.
    #[must_use]
    pub fn with_latency(mut self, ms: u64, jitter_ms: u64) -> Self {
        self.latency = Latency { ms, jitter_ms };
        self
    }

    /// Pauses between streamed chunks.
    #[must_use]
    pub fn with_stream_chunk_ms(mut self, ms: u64) -> Self {
        self.stream_chunk_ms = ms;
        self
    }

    /// How long a `hang` fault lasts.
    #[must_use]
    pub fn with_hang_ms(mut self, ms: u64) -> Self {
        self.hang_ms = ms;
        self
    }

    /// Serves this provider on its own port too.
    #[must_use]
    pub fn with_port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Caps request bodies at `bytes`.
    #[must_use]
    pub fn with_max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = Some(bytes);
        self
    }

    /// Sets the faults.
    #[must_use]
    pub fn with_faults(mut self, faults: FaultConfig) -> Self {
        self.faults = faults;
        self
    }

    /// The header style in effect.
    pub fn header_style(&self) -> HeaderStyle {
        self.headers.unwrap_or_else(|| self.kind.default_headers())
    }

    /// The limit scope in effect.
    pub fn limit_scope(&self) -> LimitScope {
        self.scope.unwrap_or_else(|| self.kind.default_scope())
    }

    /// The limits that apply to `model`.
    pub fn limits_for(&self, model: &str) -> Limits {
        self.model_limits.get(model).copied().unwrap_or(self.limits)
    }
}

/// The whole emulator: listen port, time scale, providers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct EmulatorConfig {
    /// Port on 127.0.0.1; 0 = any free port (the library default; the binary uses 4010).
    #[serde(default)]
    pub port: Option<u16>,
    /// The length of a rate-limit "minute" in milliseconds (60000 = real time). A day is 1440
    /// such minutes. Reset headers state real time.
    #[serde(default = "default_minute_ms")]
    pub minute_ms: u64,
    /// Seed for random fault mixes and latency jitter (a provider's own `faults.seed` wins).
    #[serde(default)]
    pub seed: u64,
    /// How many request-log entries are kept (oldest dropped first).
    #[serde(default = "default_log_capacity")]
    pub log_capacity: usize,
    /// Providers by prefix.
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderConfig>,
}

fn default_minute_ms() -> u64 {
    60_000
}

fn default_log_capacity() -> usize {
    10_000
}

impl Default for EmulatorConfig {
    fn default() -> Self {
        EmulatorConfig {
            port: None,
            minute_ms: default_minute_ms(),
            seed: 0,
            log_capacity: default_log_capacity(),
            providers: BTreeMap::new(),
        }
    }
}

/// A configuration that cannot be served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "emulator config: {}", self.0)
    }
}

impl std::error::Error for ConfigError {}

impl EmulatorConfig {
    /// Parses and validates TOML.
    ///
    /// # Errors
    ///
    /// TOML syntax, unknown fields, or a value that cannot be served (see
    /// [`validate`](Self::validate)).
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        let mut cfg: EmulatorConfig =
            toml::from_str(text).map_err(|e| ConfigError(e.to_string()))?;
        for (prefix, p) in &mut cfg.providers {
            p.prefix.clone_from(prefix);
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads and parses a TOML file.
    ///
    /// # Errors
    ///
    /// The file cannot be read, or [`from_toml_str`](Self::from_toml_str) fails.
    pub fn from_path(path: impl AsRef<std::path::Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("{}: {e}", path.display())))?;
        Self::from_toml_str(&text).map_err(|e| ConfigError(format!("{}: {}", path.display(), e.0)))
    }

    /// Adds (or replaces) a provider, keyed by its prefix.
    #[must_use]
    pub fn with_provider(mut self, provider: ProviderConfig) -> Self {
        self.providers.insert(provider.prefix.clone(), provider);
        self
    }

    /// Sets the minute length.
    #[must_use]
    pub fn with_minute_ms(mut self, minute_ms: u64) -> Self {
        self.minute_ms = minute_ms;
        self
    }

    /// Sets the port.
    #[must_use]
    pub fn with_port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Sets the seed.
    #[must_use]
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Checks that every provider can be served.
    ///
    /// # Errors
    ///
    /// A prefix that is not `[a-z0-9_-]+` or starts with `_` (reserved for `/_admin`), a
    /// prefix that differs from its table name, an empty key, a zero limit or minute, a fault
    /// probability outside 0..=1 or summing above 1.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |path: String, msg: &str| Err(ConfigError(format!("{path}: {msg}")));
        if self.minute_ms == 0 {
            return err("minute_ms".into(), "must be at least 1");
        }
        for (name, p) in &self.providers {
            let at = format!("providers.{name}");
            let ok_char =
                |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-';
            if name.is_empty() || name.starts_with('_') || !name.chars().all(ok_char) {
                return err(
                    at,
                    "a prefix is [a-z0-9_-]+ and does not start with '_' (reserved for /_admin)",
                );
            }
            if *name != p.prefix {
                return err(at, "the prefix differs from the table name");
            }
            if p.key.is_empty() {
                return err(format!("{at}.key"), "must not be empty");
            }
            if p.minute_ms == Some(0) {
                return err(format!("{at}.minute_ms"), "must be at least 1");
            }
            let limit_sets = std::iter::once((format!("{at}.limits"), &p.limits)).chain(
                p.model_limits
                    .iter()
                    .map(|(m, l)| (format!("{at}.model_limits.{m}"), l)),
            );
            for (path, l) in limit_sets {
                let zero =
                    [l.rpm, l.tpm, l.rpd, l.tpd].contains(&Some(0)) || l.concurrency == Some(0);
                if zero {
                    return err(
                        path,
                        "a limit of 0 can never admit a request; omit it for none",
                    );
                }
            }
            p.faults
                .validate()
                .map_err(|m| ConfigError(format!("{at}.faults: {m}")))?;
        }
        Ok(())
    }

    /// The minute length of `provider`.
    pub(crate) fn minute_of(&self, provider: &ProviderConfig) -> Duration {
        Duration::from_millis(provider.minute_ms.unwrap_or(self.minute_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_provider_with_defaults_from_its_table_name() {
        let cfg = EmulatorConfig::from_toml_str(
            r#"
            [providers.anthropic]
            kind = "anthropic"
            "#,
        )
        .unwrap();
        let p = &cfg.providers["anthropic"];
        assert_eq!(p.prefix, "anthropic");
        assert_eq!(p.key, DEFAULT_KEY);
        assert_eq!(p.header_style(), HeaderStyle::Anthropic);
        assert_eq!(p.limit_scope(), LimitScope::Model);
        assert_eq!(cfg.minute_ms, 60_000);
    }

    #[test]
    fn rejects_unknown_fields_and_bad_values_naming_the_path() {
        let cases = [
            ("[providers.x]\nkind = \"openai\"\nbogus = 1", "bogus"),
            ("[providers.x]\nkind = \"nope\"", "nope"),
            ("[providers._admin]\nkind = \"openai\"", "providers._admin"),
            ("[providers.X]\nkind = \"openai\"", "providers.X"),
            (
                "[providers.x]\nkind = \"openai\"\nlimits = { rpm = 0 }",
                "providers.x.limits",
            ),
            ("minute_ms = 0", "minute_ms"),
            (
                "[providers.x]\nkind = \"openai\"\nkey = \"\"",
                "providers.x.key",
            ),
        ];
        for (text, needle) in cases {
            let e = EmulatorConfig::from_toml_str(text).unwrap_err();
            assert!(e.0.contains(needle), "{text:?} → {e}");
        }
    }

    #[test]
    fn the_shipped_emulator_toml_parses_with_the_demo_providers() {
        let cfg = EmulatorConfig::from_toml_str(include_str!("../emulator.toml")).unwrap();
        assert_eq!(cfg.port, Some(4010));
        let kinds: Vec<(&str, Kind)> = cfg
            .providers
            .iter()
            .map(|(k, p)| (k.as_str(), p.kind))
            .collect();
        assert_eq!(
            kinds,
            [
                ("anthropic", Kind::Anthropic),
                ("deepgram", Kind::Deepgram),
                ("openai", Kind::OpenAi)
            ]
        );
        assert_eq!(cfg.providers["openai"].models, ["gpt-4o-mini", "whisper-1"]);
        assert!(cfg.providers.values().all(|p| p.key == DEFAULT_KEY));
    }

    #[test]
    fn the_commented_examples_of_emulator_toml_parse_too() {
        // In the examples section, prose starts with "## " and examples with "# ".
        let text = include_str!("../emulator.toml");
        let (head, examples) = text.split_at(text.find("More kinds").unwrap());
        let uncommented: String = examples
            .lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(code) if !l.starts_with("# ---") => code,
                _ => l,
            })
            .fold(head.to_owned(), |acc, l| acc + l + "\n");
        let cfg = EmulatorConfig::from_toml_str(&uncommented).unwrap();
        assert_eq!(cfg.providers.len(), 6);
        assert_eq!(cfg.providers["openai"].faults.script.len(), 3);
        assert_eq!(cfg.providers["groq"].header_style(), HeaderStyle::Groq);
    }

    #[test]
    fn model_limits_replace_provider_limits_for_that_model() {
        let p = ProviderConfig::openai("o")
            .with_limits(Limits::per_minute(10, 100))
            .with_model_limits("big", Limits::per_minute(1, 10));
        assert_eq!(p.limits_for("big").rpm, Some(1));
        assert_eq!(p.limits_for("other").rpm, Some(10));
    }
}
