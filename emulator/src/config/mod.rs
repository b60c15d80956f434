//! The emulator's configuration: which providers it serves, under which prefix, with which key,
//! limits, header style and faults. Read from TOML (`emulator.toml`) or built in code.
//!
//! # Examples
//!
//! ```
//! use llm_failover_emulator::{EmulatorConfig, Limits, ProviderConfig};
//!
//! let cfg = EmulatorConfig::from_toml_str(r#"
//!     minute_ms = 6000
//!     [providers.openai]
//!     kind = "openai"
//!     limits = { rpm = 60, tpm = 10000 }
//! "#).unwrap();
//! assert_eq!(cfg.providers["openai"].limits, Limits::per_minute(60, 10_000));
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

mod aws;
pub(crate) mod google;
mod provider;

pub use aws::{AwsCredentials, DEFAULT_REGION};
pub use google::{CLOUD_PLATFORM_SCOPE, DEFAULT_PROJECT, GOOGLE_TOKEN_URI, ServiceAccountKey};
pub use provider::{
    ChargeMode, DEFAULT_KEY, HeaderStyle, Kind, Latency, LimitScope, Limits, ProviderConfig,
};

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
    /// prefix that differs from its table name, an empty key, AWS credentials on a provider
    /// that is not Bedrock (or one that cannot be signed with: empty, a region that is no
    /// region name), a key id without its secret, a project or service-account file on a
    /// provider that is not Vertex (or a project that is no Google project id), a zero limit
    /// or minute, a fault probability outside 0..=1 or summing above 1. (A service-account
    /// file is read when the emulator starts.)
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
            let aws_parts = [
                ("region", &p.region),
                ("access_key_id", &p.access_key_id),
                ("secret_access_key", &p.secret_access_key),
                ("session_token", &p.session_token),
            ];
            for (field, value) in aws_parts {
                let Some(value) = value else { continue };
                if p.kind != Kind::Bedrock {
                    return err(
                        format!("{at}.{field}"),
                        "only a bedrock provider is signed with AWS credentials",
                    );
                }
                if let Err(msg) = aws::check_part(field, value) {
                    return err(format!("{at}.{field}"), &msg);
                }
            }
            if p.kind != Kind::Vertex {
                if p.project.is_some() {
                    return err(
                        format!("{at}.project"),
                        "only a vertex provider has a project",
                    );
                }
                if p.service_account_file.is_some() {
                    return err(
                        format!("{at}.service_account_file"),
                        "only a vertex provider takes OAuth tokens of a service account",
                    );
                }
            }
            if let Some(project) = &p.project
                && let Err(msg) = google::check_project(project)
            {
                return err(format!("{at}.project"), &msg);
            }
            if p.access_key_id.is_some() != p.secret_access_key.is_some() {
                return err(
                    at,
                    "access_key_id and secret_access_key are set together (or neither, for \
                     credentials derived from the prefix)",
                );
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
            (
                "[providers.x]\nkind = \"openai\"\nregion = \"us-east-1\"",
                "providers.x.region",
            ),
            (
                "[providers.x]\nkind = \"bedrock\"\nregion = \"US East\"",
                "providers.x.region",
            ),
            (
                "[providers.x]\nkind = \"bedrock\"\naccess_key_id = \"AKIA1\"",
                "secret_access_key",
            ),
            (
                "[providers.x]\nkind = \"gemini\"\nproject = \"my-project\"",
                "providers.x.project",
            ),
            (
                "[providers.x]\nkind = \"vertex\"\nproject = \"My Project\"",
                "providers.x.project",
            ),
            (
                "[providers.x]\nkind = \"openai\"\nservice_account_file = \"k.json\"",
                "providers.x.service_account_file",
            ),
        ];
        for (text, needle) in cases {
            let e = EmulatorConfig::from_toml_str(text).unwrap_err();
            assert!(e.0.contains(needle), "{text:?} → {e}");
        }
    }

    #[test]
    fn the_shipped_emulator_toml_parses_with_the_demo_providers() {
        let cfg = EmulatorConfig::from_toml_str(include_str!("../../emulator.toml")).unwrap();
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
        let text = include_str!("../../emulator.toml");
        let (head, examples) = text.split_at(text.find("More kinds").unwrap());
        let uncommented: String = examples
            .lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(code) if !l.starts_with("# ---") => code,
                _ => l,
            })
            .fold(head.to_owned(), |acc, l| acc + l + "\n");
        let cfg = EmulatorConfig::from_toml_str(&uncommented).unwrap();
        assert_eq!(cfg.providers.len(), 7);
        assert_eq!(cfg.providers["vertex"].kind, Kind::Vertex);
        assert_eq!(cfg.providers["openai"].faults.script.len(), 3);
        assert_eq!(cfg.providers["groq"].header_style(), HeaderStyle::Groq);
    }

    #[test]
    fn a_bedrock_provider_takes_its_credentials_from_toml_or_derives_them() {
        let cfg = EmulatorConfig::from_toml_str(
            r#"
            [providers.bedrock]
            kind = "bedrock"
            region = "eu-west-1"
            access_key_id = "ASIAEXAMPLE"
            secret_access_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
            session_token = "token"
            [providers.bedrock-2]
            kind = "bedrock"
            "#,
        )
        .unwrap();
        let given = cfg.providers["bedrock"].aws_credentials();
        assert_eq!(given.access_key_id, "ASIAEXAMPLE");
        assert_eq!(given.session_token.as_deref(), Some("token"));
        assert_eq!(given.region, "eu-west-1");
        let derived = cfg.providers["bedrock-2"].aws_credentials();
        assert_eq!(derived.region, DEFAULT_REGION);
        assert_eq!(
            derived,
            ProviderConfig::bedrock("bedrock-2").aws_credentials()
        );
        assert_eq!(cfg.providers["bedrock-2"].header_style(), HeaderStyle::None);
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
