//! `providers.toml`: environments, providers, limits and policy.
//!
//! # Two stages
//!
//! 1. **Raw**: serde reads the file into plain types that mirror it exactly. Every
//!    table denies unknown fields, and only keys whose absence means something have a default
//!    (`[policy]`, the capability lists, `allow_http`). A typo, a wrong type or a missing field
//!    is reported with its full TOML path (`providers.openai.limits.rpm`) and the line and
//!    column of the file.
//! 2. **Validated**: the raw values become a [`Config`] only after every rule
//!    serde cannot express holds: known `kind`s, absolute `https://` URLs (`http://` only to
//!    loopback or with `allow_http = true`), positive limits and timeouts, a `default_environment`
//!    that exists, environments that name defined providers able to serve the capability they
//!    are listed under, each once, with a key source and a model for each use. Each error names
//!    the TOML path at fault, plus the line and column when the file has them.
//!
//! Every error reads `path (line L, column C): what is wrong`.
//!
//! # Keys
//!
//! The file holds the NAMES of environment variables, never keys, one per provider per
//! environment: `api_key_env = { dev = "OPENAI_API_KEY_DEV", prod = "OPENAI_API_KEY" }`.
//! A key is read from the environment only when a credential is asked for
//! ([`Config::credential`]), and it lives in a [`Credential`], whose `Debug` hides it.
//! A key kept in a file (a service account's JSON key for Vertex AI, a secret mounted as a
//! file) is named by its path instead, per environment: `key_file = { prod =
//! "/run/secrets/vertex.json" }`; the file is read when the credential is asked for, and a
//! missing, unreadable, empty or oversized one is an error naming the file, never its
//! contents. Before serde runs, a scan of the file refuses:
//!
//! * a literal key: a field such as `api_key`, `key`, `token` or `secret`, or an
//!   `api_key_env` value that is not a variable name or looks like a key (`sk-…`, `gsk_…`,
//!   `AIza…`, long random strings);
//! * a pool of keys: `api_keys`, `keys`, or a list under `api_key_env`. One legitimate key
//!   per provider per environment; rotating several keys to multiply a quota breaks
//!   providers' terms of service.
//!
//! No error built here ever contains a value that could be a key: messages name the TOML path
//! or the variable, and serde messages are rewritten so that they never repeat a string.
//!
//! # Shared limits
//!
//! An optional `[shared]` table shares limits and breakers with every other process on the
//! same quota through Redis ([`SharedSettings`](crate::ratelimit::SharedSettings), on
//! [`Config::shared`]); the `LLM_FAILOVER_REDIS_URL` variable turns the same on without a
//! file, its URL over the table's:
//!
//! ```toml
//! [shared]
//! redis_url = "redis://127.0.0.1:6379"  # required; may hold a password: redis://:PASSWORD@host:port
//! key_prefix = "llm-failover"           # every key starts with it
//! timeout_ms = 250                      # the longest one Redis call may take (1 to 60000)
//! when_down = "wait"                    # or "local_share": limit ÷ processes meanwhile
//! # processes = 4                       # required with local_share, not allowed otherwise
//! retry_interval_ms = 1000              # how often a Redis that was down is tried again
//! # cluster = true                      # redis_url names a node of a Redis Cluster
//! # tls_ca_file = "ca.pem"              # rediss:// only: the CA to trust (else the platform's)
//! # tls_client_cert_file = "client.pem" # rediss:// only, with tls_client_key_file
//! ```
//!
//! The URL is the user's own Redis, like a database URL, so a password inside it passes the
//! key scan; it is never shown (errors and `Debug` name the host and port only), and a field
//! of its own for a secret (`password`, `token`, …) is refused.
//!
//! # Response cache
//!
//! An optional `[cache]` table gives a client built from the file a response
//! [cache](crate::cache) ([`CacheSettings`], on [`Config::cache`]); a cache given in code
//! ([`ClientBuilder::cache`](crate::ClientBuilder::cache)) wins over it:
//!
//! ```toml
//! [cache]
//! url = "sqlite:answers.sqlite"   # required: "memory", "sqlite:PATH" or "redis://host:port[/db]"
//! ttl_ms = 604800000              # how long an answer is kept: 7 days (1 ms to 365 days)
//! max_entries = 100000            # the most kept; past it the oldest go
//! # redis_prefix = "llm-failover" # Redis only: every key starts with it
//! # redis_timeout_ms = 250        # Redis only: a slower call is a miss (1 to 60000)
//! # redis_cluster = true          # Redis only: the URL names a node of a Redis Cluster
//! # redis_tls_ca_file = "ca.pem"  # rediss:// only; and redis_tls_client_cert_file / _key_file
//! ```
//!
//! Durations are milliseconds, as everywhere in the file. A relative `sqlite:` path or TLS
//! file is relative to the working directory of the process, and a Redis URL's password is
//! never shown, as for `[shared]`.
//!
//! # Choosing the environment
//!
//! The environment named in code wins, then the [`ENVIRONMENT_VAR`] variable
//! (`LLM_FAILOVER_ENV`), then the file's `default_environment`
//! ([`Config::select_environment`]).
//!
//! # Examples
//!
//! ```
//! use llm_failover::config::Config;
//!
//! let config: Config = r#"
//!     default_environment = "local"
//!
//!     [environments.local]
//!     chat = ["ollama"]
//!
//!     [providers.ollama]
//!     kind = "openai"
//!     base_url = "http://127.0.0.1:11434/v1"
//!     model = "llama3.2"
//!     auth = "none"          # a local host takes no key
//! "#
//! .parse()?;
//!
//! let env = config.select_environment_with(None, &|_| None)?;
//! assert_eq!(env.name, "local");
//! assert!(config.credential("ollama", "local", &|_| None)?.is_none());
//! # Ok::<(), llm_failover::Error>(())
//! ```

mod builder;
mod keys;
mod kind;
mod raw;
mod settings;
mod source;
mod types;
mod validate;

pub use crate::ratelimit::Limits;
pub use builder::{ConfigBuilder, ProviderConfigBuilder};
pub use settings::ProviderSettings;
pub use types::{
    CacheSettings, Config, Environment, KeySource, Policy, ProviderConfig, ProviderKind,
};
pub(crate) use validate::{check_redis_url, check_shared_settings};

use std::path::Path;
use std::str::FromStr;

use url::Url;

use crate::error::{Error, Result};
use crate::id::{Credential, ProviderId};
use keys::{check_key_value, shown};
use source::{Document, TomlPath};

/// For a provider on this machine, how to run against the emulator without a key (host and
/// port only: a URL could carry more).
/// The value of the variable `var` (named at `at`): a Config error when it is unset (how to
/// give `provider`'s credential in code instead, `made` by, and `hint`) or holds what no key
/// holds, naming the variable and its TOML path, never the value.
fn read_variable(
    lookup: &dyn Fn(&str) -> Option<String>,
    var: &str,
    at: &TomlPath,
    (provider, made): (&str, &str),
    hint: &str,
) -> Result<String> {
    let value = lookup(var).ok_or_else(|| {
        Error::config(format!(
            "environment variable `{var}` ({at}) is not set; set it, or give the key in code \
             with ClientBuilder::credential(\"{provider}\", {made}){hint}"
        ))
    })?;
    match check_key_value(&value) {
        Some(problem) => Err(Error::config(format!(
            "environment variable `{var}` ({at}) {problem}"
        ))),
        None => Ok(value),
    }
}

fn emulator_hint(base_url: &Url, environment: &str, var: &str) -> String {
    let loopback = match base_url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        None => false,
    };
    if !loopback {
        return String::new();
    }
    let at = match (base_url.host_str(), base_url.port_or_known_default()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        _ => "this machine".to_owned(),
    };
    format!(
        " — this provider is on this machine ({at}): to run against the emulator without a key, \
         start it in the process with llm_failover_emulator::demo::Demo::start(&config, \
         \"{environment}\") and build the client from demo.client_builder(), or run `cargo run \
         -p llm-failover-emulator -- --config emulator/emulator.toml` and set \
         {var}=emulator-key"
    )
}

/// The environment variable naming the environment to use when code names none.
pub const ENVIRONMENT_VAR: &str = "LLM_FAILOVER_ENV";

impl Config {
    /// Parses and validates the text of a `providers.toml`.
    ///
    /// # Errors
    ///
    /// An error of kind [`Config`](crate::ErrorKind::Config) naming the TOML path at fault
    /// (and the line and column when the file has them): TOML syntax, an unknown field, a
    /// wrong type, a missing field, or any rule of the [module documentation](self).
    pub fn from_toml_str(text: &str) -> Result<Config> {
        let document = Document::parse(text)?;
        document.check_key_policy()?;
        let raw = document.raw()?;
        validate::validate(&raw).map_err(|issue| document.error(issue))
    }

    /// Reads, parses and validates a `providers.toml` file.
    ///
    /// # Errors
    ///
    /// As [`from_toml_str`](Self::from_toml_str), with the file's path in front of the
    /// message; also when the file cannot be read, is larger than 1 MiB (it is read through a
    /// bounded reader, so `/dev/zero` or an endless pipe ends in this error, not in memory
    /// exhaustion), or is not UTF-8 (the line and column of the first invalid byte).
    pub fn from_path(path: impl AsRef<Path>) -> Result<Config> {
        let path = path.as_ref();
        let text = source::read_config_file(path)?;
        Self::from_toml_str(&text)
            .map_err(|e| Error::config(format!("{}: {}", path.display(), e.message())))
    }

    /// The environment called `name`.
    ///
    /// # Errors
    ///
    /// When the file defines no such environment.
    pub fn environment(&self, name: &str) -> Result<&Environment> {
        self.environments.get(name).ok_or_else(|| {
            Error::config(format!(
                "environment {} is not defined under [environments]; defined: {}",
                shown(name),
                self.environment_names()
            ))
        })
    }

    /// The environment to use: `explicit` if given, else the one named by the
    /// `LLM_FAILOVER_ENV` variable of this process, else `default_environment`.
    ///
    /// # Errors
    ///
    /// When the chosen name is not defined; the message says where the name came from.
    pub fn select_environment(&self, explicit: Option<&str>) -> Result<&Environment> {
        self.select_environment_with(explicit, &|var| std::env::var(var).ok())
    }

    /// As [`select_environment`](Self::select_environment), reading variables through
    /// `lookup` (for tests, or an application's own settings). An empty or blank
    /// `LLM_FAILOVER_ENV` counts as unset; surrounding spaces are ignored.
    ///
    /// # Errors
    ///
    /// When the chosen name is not defined; the message says where the name came from.
    pub fn select_environment_with(
        &self,
        explicit: Option<&str>,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<&Environment> {
        let (name, origin) = match explicit {
            Some(name) => (name.to_owned(), "named in code".to_owned()),
            None => match lookup(ENVIRONMENT_VAR).filter(|v| !v.trim().is_empty()) {
                Some(name) => (
                    name.trim().to_owned(),
                    format!("from the {ENVIRONMENT_VAR} variable"),
                ),
                None => (
                    self.default_environment.clone(),
                    "default_environment".to_owned(),
                ),
            },
        };
        self.environments.get(&name).ok_or_else(|| {
            Error::config(format!(
                "environment {} ({origin}) is not defined under [environments]; defined: {}",
                shown(&name),
                self.environment_names()
            ))
        })
    }

    /// The provider called `id`.
    ///
    /// # Errors
    ///
    /// When the file defines no such provider.
    pub fn provider(&self, id: &str) -> Result<&ProviderConfig> {
        self.providers.get(id).ok_or_else(|| {
            let defined: Vec<&str> = self.providers.keys().map(String::as_str).collect();
            Error::config(format!(
                "provider {} is not defined under [providers]; defined: {}",
                shown(id),
                defined.join(", ")
            ))
        })
    }

    /// The key `provider` uses in `environment`, read through `lookup` from the variable that
    /// `api_key_env` names. `None` only for `auth = "none"`.
    ///
    /// # Errors
    ///
    /// When the provider or environment is not defined, the provider has no key source for
    /// the environment, or the variable is unset, empty or holds whitespace or control
    /// characters. The message names the variable and its TOML path, never the key.
    ///
    /// # Examples
    ///
    /// ```
    /// # use llm_failover::config::Config;
    /// let config = Config::from_toml_str(r#"
    ///     default_environment = "prod"
    ///     [environments.prod]
    ///     chat = ["openai"]
    ///     [providers.openai]
    ///     kind = "openai"
    ///     base_url = "https://api.openai.com/v1"
    ///     model = "gpt-4o-mini"
    ///     api_key_env = { prod = "OPENAI_API_KEY" }
    /// "#)?;
    /// let lookup = |var: &str| (var == "OPENAI_API_KEY").then(|| "sk-test".to_owned());
    /// let key = config.credential("openai", "prod", &lookup)?.expect("a key");
    /// assert_eq!(key.expose(), "sk-test");
    ///
    /// let err = config.credential("openai", "prod", &|_| None).unwrap_err();
    /// assert!(err.to_string().contains("`OPENAI_API_KEY`"));
    /// # Ok::<(), llm_failover::Error>(())
    /// ```
    pub fn credential(
        &self,
        provider: &str,
        environment: &str,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Credential>> {
        let config = self.provider(provider)?;
        self.environment(environment)?;
        let at = TomlPath::root()
            .key("providers")
            .key(provider)
            .key("api_key_env");
        let id = || ProviderId::new(provider);
        let var = match config.keys.get(environment) {
            Some(KeySource::None) => return Ok(None),
            Some(KeySource::InCode) => {
                return Err(Error::config(format!(
                    "provider `{provider}`'s key is handed over in code (key_in_code): pass it \
                     with ClientBuilder::credential(\"{provider}\", Credential::new(…))"
                ))
                .with_provider(id()));
            }
            Some(KeySource::Env(var)) => var,
            Some(KeySource::Aws {
                access_key_id,
                secret_access_key,
                session_token,
            }) => {
                let at = TomlPath::root()
                    .key("providers")
                    .key(provider)
                    .key("aws_credentials_env")
                    .key(environment);
                let read = |field: &str, var: &str| {
                    read_variable(
                        lookup,
                        var,
                        &at.key(field),
                        (provider, "Credential::aws(…)"),
                        "",
                    )
                    .map_err(|e| e.with_provider(id()))
                };
                let key_id = read("access_key_id", access_key_id)?;
                let secret = read("secret_access_key", secret_access_key)?;
                let token = session_token
                    .as_deref()
                    .map(|var| read("session_token", var))
                    .transpose()?;
                return Ok(Some(Credential::aws_from_env(
                    key_id,
                    secret,
                    token,
                    secret_access_key.clone(),
                )));
            }
            Some(KeySource::File(file)) => {
                let at = TomlPath::root()
                    .key("providers")
                    .key(provider)
                    .key("key_file")
                    .key(environment);
                return read_key_file(file, &at)
                    .map(Some)
                    .map_err(|e| e.with_provider(id()));
            }
            None => {
                return Err(Error::config(format!(
                    "{at} has no entry for environment `{environment}`; add {environment} = \
                     \"VARIABLE_NAME\""
                ))
                .with_provider(id()));
            }
        };
        let hint = emulator_hint(&config.base_url, environment, var);
        read_variable(
            lookup,
            var,
            &at.key(environment),
            (provider, "Credential::new(…)"),
            &hint,
        )
        .map(|key| Some(Credential::from_env(key, var.clone())))
        .map_err(|e| e.with_provider(id()))
    }

    /// As [`credential`](Self::credential), reading this process's environment. A variable
    /// that is not valid UTF-8 is refused like one holding non-ASCII characters.
    ///
    /// # Errors
    ///
    /// As [`credential`](Self::credential).
    pub fn credential_from_env(
        &self,
        provider: &str,
        environment: &str,
    ) -> Result<Option<Credential>> {
        self.credential(provider, environment, &|var| {
            std::env::var_os(var).map(|v| v.to_string_lossy().into_owned())
        })
    }

    /// Points provider `id` at `url` (a base URL given in code, e.g. through
    /// `ClientBuilder::base_url`), by the same rules as the file's `base_url`: plain
    /// `http://` only to a loopback host or with the provider's `allow_http = true`.
    ///
    /// # Errors
    ///
    /// `Config` when the provider is not defined or the URL breaks a rule.
    pub(crate) fn set_base_url(&mut self, id: &str, url: &Url) -> Result<()> {
        let provider = self.providers.get_mut(id).ok_or_else(|| {
            Error::config(format!(
                "base_url override for unknown provider {}",
                shown(id)
            ))
        })?;
        validate::check_base_url_override(id, url, provider.allow_http).map_err(|issue| {
            Error::config(format!(
                "{} (override given in code): {}",
                issue.path, issue.message
            ))
            .with_provider(ProviderId::new(id))
        })?;
        provider.base_url = url.clone();
        Ok(())
    }

    fn environment_names(&self) -> String {
        let names: Vec<&str> = self.environments.keys().map(String::as_str).collect();
        names.join(", ")
    }
}

/// The largest key file read: a service account's JSON key is about 2.3 KB.
const KEY_FILE_MAX: u64 = 64 << 10;

/// The credential in the key file at `file` (`at` its TOML path): its contents, surrounding
/// whitespace trimmed. Errors name the file and what was wrong, never what it holds.
fn read_key_file(file: &Path, at: &TomlPath) -> Result<Credential> {
    use std::io::Read as _;
    let shown = file.display();
    let problem = |what: String| Error::config(format!("key file `{shown}` ({at}) {what}"));
    let opened = std::fs::File::open(file).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => problem("does not exist".to_owned()),
        _ => problem(format!("cannot be read: {e}")),
    })?;
    let mut bytes = Vec::new();
    opened
        .take(KEY_FILE_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| problem(format!("cannot be read: {e}")))?;
    if bytes.len() as u64 > KEY_FILE_MAX {
        return Err(problem(format!(
            "is larger than {} KiB: no key file is",
            KEY_FILE_MAX >> 10
        )));
    }
    let Ok(text) = String::from_utf8(bytes) else {
        return Err(problem("is not UTF-8 text".to_owned()));
    };
    let key = text.trim();
    if key.is_empty() {
        return Err(problem("is empty".to_owned()));
    }
    Ok(Credential::from_file(key.to_owned(), file))
}

impl FromStr for Config {
    type Err = Error;

    /// Same as [`Config::from_toml_str`].
    fn from_str(text: &str) -> Result<Config> {
        Config::from_toml_str(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::CredentialSource;

    fn with_keys(keys: &str) -> Result<Config> {
        Config::from_toml_str(&format!(
            r#"
            default_environment = "prod"
            [environments.dev]
            chat = ["p"]
            [environments.prod]
            chat = ["p"]
            [providers.p]
            kind = "openai"
            base_url = "https://api.openai.com/v1"
            model = "gpt-4o-mini"
            {keys}
            "#
        ))
    }

    /// `key_file` names a file per environment, beside or instead of `api_key_env`; each
    /// environment's key comes from one place.
    #[test]
    fn a_key_file_per_environment_and_its_rules() {
        let config = with_keys(
            r#"api_key_env = { dev = "OPENAI_API_KEY_DEV" }
               key_file = { prod = "/run/secrets/openai" }"#,
        )
        .unwrap();
        let p = config.provider("p").unwrap();
        assert_eq!(p.keys["dev"], KeySource::Env("OPENAI_API_KEY_DEV".into()));
        assert_eq!(
            p.keys["prod"],
            KeySource::File("/run/secrets/openai".into())
        );

        let table = [
            (
                r#"api_key_env = { prod = "K" }
                   key_file = { prod = "/k" }"#,
                "providers.p.key_file.prod",
            ),
            (
                r#"key_file = { staging = "/k" }"#,
                "no environment `staging`",
            ),
            (
                r#"key_file = { prod = "sk-proj-abcdef" }"#,
                "the path of the file",
            ),
            (
                r#"auth = "none"
                   key_file = { prod = "/k" }"#,
                "must not have api_key_env or key_file",
            ),
            (r#"key_file = { prod = "/k" }"#, "providers.p.api_key_env"),
        ];
        for (keys, needle) in table {
            let err = with_keys(keys).unwrap_err();
            assert!(err.to_string().contains(needle), "{keys}: {err}");
            assert!(!err.to_string().contains("abcdef"), "{err}");
        }
    }

    /// The key is the file's contents, trimmed; a missing, empty or oversized file is a
    /// `Config` error naming the file and the TOML path, never its contents.
    #[test]
    fn reads_the_key_file_and_names_it_when_it_cannot() {
        let dir =
            std::env::temp_dir().join(format!("llm-failover-key-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("key");
        std::fs::write(&file, "  sk-from-a-file\n").unwrap();
        let keys = |path: &Path| {
            format!(
                r#"api_key_env = {{ dev = "K" }}
                   key_file = {{ prod = "{}" }}"#,
                path.display()
            )
        };
        let config = with_keys(&keys(&file)).unwrap();
        let key = config.credential("p", "prod", &|_| None).unwrap().unwrap();
        assert_eq!(key.expose(), "sk-from-a-file");
        assert_eq!(key.source(), &CredentialSource::File(file.clone()));
        assert!(key.source().to_string().contains("key file"));

        let empty = dir.join("empty");
        std::fs::write(&empty, "\n").unwrap();
        let large = dir.join("large");
        std::fs::write(&large, "x".repeat(70_000)).unwrap();
        let missing = dir.join("missing");
        for (path, needle) in [
            (&empty, "is empty"),
            (&large, "is larger than 64 KiB"),
            (&missing, "does not exist"),
        ] {
            let config = with_keys(&keys(path)).unwrap();
            let err = config.credential("p", "prod", &|_| None).unwrap_err();
            let msg = err.to_string();
            assert!(err.is_config(), "{msg}");
            assert!(msg.contains(&path.display().to_string()), "{msg}");
            assert!(msg.contains("providers.p.key_file.prod"), "{msg}");
            assert!(msg.contains(needle), "{msg}");
            assert!(!msg.contains("xxxx"), "{msg}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
