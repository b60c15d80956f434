//! An environment of a `providers.toml`, served in-process: what an application's own tests
//! need so that `environment("demo")` runs without a key, a network or a server to start.
//!
//! [`Demo::start`] reads the environment's providers from an [`llm_failover_core::Config`],
//! starts one [`Emulator`] on a free loopback port serving every one of them in its wire
//! format, and [`Demo::client_builder`] hands back a [`ClientBuilder`] pointed at it: each
//! provider's `base_url` replaced by the emulator's, and the emulator's key given in code
//! ([`Credential::new`]), so the variable `api_key_env` names (`LLM_FAILOVER_DEMO_KEY` in the
//! repository's `providers.toml`) need not be set. Everything else — failover order, limits,
//! policy — is the file's.
//!
//! # Which emulated provider serves which provider
//!
//! Each provider of the environment (chat and transcription, in failover order) is served
//! under an emulator prefix:
//!
//! * when its `base_url` points at this machine (`127.0.0.1`, `::1`, `localhost`), the first
//!   segment of its path — the layout of the emulator binary, so
//!   `http://127.0.0.1:4010/openai/v1` is served as `openai`, the prefix
//!   `cargo run -p llm-failover-emulator` serves it under too;
//! * otherwise, its name in the file, lower-cased, with any character outside `[a-z0-9_-]`
//!   replaced by `-` (`openai-whisper` is served as `openai-whisper`).
//!
//! Providers that end up with the same prefix share one emulated provider (and its buckets,
//! script and counters); they must then be of the same `kind`. [`Demo::prefix`] says which
//! prefix serves a provider, and [`Demo::script`] / [`Demo::counters`] take provider names.
//!
//! The emulated providers accept any model and have no limits, latency or faults unless a
//! [`tune`](DemoBuilder::tune) closure sets them: the client's own limits (the file's) are
//! what paces it.
//!
//! # Examples
//!
//! ```
//! use llm_failover::{ChatRequest, Config};
//! use llm_failover_emulator::demo::Demo;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let config = Config::from_toml_str(r#"
//!     default_environment = "demo"
//!     [environments.demo]
//!     chat = ["demo-openai", "demo-anthropic"]
//!     [providers.demo-openai]
//!     kind = "openai"
//!     base_url = "http://127.0.0.1:4010/openai/v1"
//!     model = "gpt-4o-mini"
//!     api_key_env = { demo = "LLM_FAILOVER_DEMO_KEY" }
//!     [providers.demo-anthropic]
//!     kind = "anthropic"
//!     base_url = "http://127.0.0.1:4010/anthropic"
//!     model = "claude-3-5-haiku-latest"
//!     api_key_env = { demo = "LLM_FAILOVER_DEMO_KEY" }
//! "#)?;
//! let demo = Demo::start(&config, "demo").await?;
//! let client = demo.client_builder().build()?;
//! let answer = client.chat(ChatRequest::from_prompt("Say hi").max_tokens(20)).await?;
//! assert_eq!(answer.provider.as_str(), "demo-openai");
//! assert_eq!(demo.counters("demo-openai").ok, 1);
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::error::Error as StdError;
use std::fmt;
use std::net::IpAddr;

use llm_failover_core::config::ProviderKind;
use llm_failover_core::{ClientBuilder, Config, Credential};
use url::{Host, Url};

use crate::config::{Kind, ProviderConfig};
use crate::faults::Fault;
use crate::server::{Emulator, EmulatorBuilder};
use crate::state::Counters;

type Tune = Box<dyn Fn(&str, ProviderConfig) -> ProviderConfig + Send + Sync>;

/// A running emulator serving every provider of one environment, and the way to point a
/// [`ClientBuilder`] at it. See the [module documentation](self).
///
/// Dropping it stops the emulator; keep it alive as long as the client sends.
///
/// # Examples
///
/// ```
/// use llm_failover::Config;
/// use llm_failover_emulator::demo::Demo;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let config = Config::from_toml_str(r#"
/// #     default_environment = "demo"
/// #     [environments.demo]
/// #     chat = ["demo-openai"]
/// #     [providers.demo-openai]
/// #     kind = "openai"
/// #     base_url = "http://127.0.0.1:4010/openai/v1"
/// #     model = "gpt-4o-mini"
/// #     api_key_env = { demo = "LLM_FAILOVER_DEMO_KEY" }
/// # "#)?;
/// let demo = Demo::start(&config, "demo").await?;
/// assert_eq!(demo.environment(), "demo");
/// assert_eq!(demo.prefix("demo-openai"), "openai");
/// let client = demo.client_builder().build()?;
/// # let _ = client;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Demo {
    emulator: Emulator,
    config: Config,
    environment: String,
    /// Provider name → where the client is pointed.
    routes: BTreeMap<String, Route>,
}

#[derive(Debug, Clone)]
struct Route {
    prefix: String,
    url: Url,
}

/// Builds a [`Demo`]: [`Demo::builder`].
///
/// # Examples
///
/// ```
/// use llm_failover::Config;
/// use llm_failover_emulator::demo::Demo;
/// use llm_failover_emulator::{Emulator, Limits};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let config = Config::from_toml_str(r#"
/// #     default_environment = "demo"
/// #     [environments.demo]
/// #     chat = ["demo-openai"]
/// #     [providers.demo-openai]
/// #     kind = "openai"
/// #     base_url = "http://127.0.0.1:4010/openai/v1"
/// #     model = "gpt-4o-mini"
/// #     api_key_env = { demo = "LLM_FAILOVER_DEMO_KEY" }
/// # "#)?;
/// let demo = Demo::builder(&config, "demo")
///     // Server-side limits and latency per emulated provider, by prefix.
///     .tune(|prefix, p| match prefix {
///         "openai" => p.with_limits(Limits::per_minute(60, 10_000)).with_latency(20, 10),
///         _ => p,
///     })
///     // Emulator-wide settings: a 6-second "minute", a fixed seed.
///     .emulator(Emulator::builder().minute_ms(6_000).seed(7))
///     .start()
///     .await?;
/// # let _ = demo;
/// # Ok(()) }
/// ```
#[must_use]
pub struct DemoBuilder {
    config: Config,
    environment: String,
    tune: Option<Tune>,
    emulator: EmulatorBuilder,
}

impl fmt::Debug for DemoBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DemoBuilder")
            .field("environment", &self.environment)
            .field("tune", &self.tune.is_some())
            .field("emulator", &self.emulator)
            .finish_non_exhaustive()
    }
}

impl DemoBuilder {
    /// Adjusts each emulated provider before the emulator starts: `tune(prefix, provider)`
    /// returns the provider to serve (limits, latency, models, a fault script, a header
    /// style, another key — the client is given whatever key results).
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::Config;
    /// use llm_failover_emulator::demo::Demo;
    /// use llm_failover_emulator::{Fault, FaultConfig};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let config = Config::from_toml_str(r#"
    /// #     default_environment = "demo"
    /// #     [environments.demo]
    /// #     chat = ["demo-openai"]
    /// #     [providers.demo-openai]
    /// #     kind = "openai"
    /// #     base_url = "http://127.0.0.1:4010/openai/v1"
    /// #     model = "gpt-4o-mini"
    /// #     api_key_env = { demo = "LLM_FAILOVER_DEMO_KEY" }
    /// # "#)?;
    /// let demo = Demo::builder(&config, "demo")
    ///     .tune(|_, p| p.with_faults(FaultConfig::script([Fault::Status { status: 503 }])))
    ///     .start()
    ///     .await?;
    /// assert_eq!(demo.emulator().pending_faults("openai"), 1);
    /// # Ok(()) }
    /// ```
    pub fn tune(
        mut self,
        tune: impl Fn(&str, ProviderConfig) -> ProviderConfig + Send + Sync + 'static,
    ) -> Self {
        self.tune = Some(Box::new(tune));
        self
    }

    /// Starts from this emulator builder (its minute length, seed, port, time source, and
    /// any providers of its own); the environment's providers are added to it, replacing
    /// any of the same prefix.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::Config;
    /// use llm_failover_emulator::demo::Demo;
    /// use llm_failover_emulator::Emulator;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let config = Config::from_toml_str(r#"
    /// #     default_environment = "demo"
    /// #     [environments.demo]
    /// #     chat = ["demo-openai"]
    /// #     [providers.demo-openai]
    /// #     kind = "openai"
    /// #     base_url = "http://127.0.0.1:4010/openai/v1"
    /// #     model = "gpt-4o-mini"
    /// #     api_key_env = { demo = "LLM_FAILOVER_DEMO_KEY" }
    /// # "#)?;
    /// let demo = Demo::builder(&config, "demo")
    ///     .emulator(Emulator::builder().minute_ms(6_000).anthropic("spare"))
    ///     .start()
    ///     .await?;
    /// assert_eq!(demo.emulator().providers().len(), 2); // openai, and the spare
    /// # Ok(()) }
    /// ```
    pub fn emulator(mut self, builder: EmulatorBuilder) -> Self {
        self.emulator = builder;
        self
    }

    /// Starts the emulator on `127.0.0.1` and works out where each provider is served.
    ///
    /// # Errors
    ///
    /// The environment is not defined in the configuration; one of its providers is of a
    /// kind the emulator does not speak; two providers of different kinds map to the same
    /// prefix; a tuned provider is invalid (a zero limit, an empty key, …); the port cannot
    /// be bound.
    pub async fn start(self) -> Result<Demo, DemoError> {
        let DemoBuilder {
            config,
            environment,
            tune,
            mut emulator,
        } = self;
        let env = config
            .environment(&environment)
            .map_err(|e| DemoError::with_source(format!("environment `{environment}`"), e))?;
        // Provider name -> (prefix, kind), for every provider the environment uses.
        let mut served: BTreeMap<String, (String, Kind)> = BTreeMap::new();
        let mut kinds: BTreeMap<String, (Kind, String)> = BTreeMap::new();
        for id in env.chat.iter().chain(&env.transcription) {
            let name = id.as_str();
            if served.contains_key(name) {
                continue;
            }
            let pc = config
                .provider(name)
                .map_err(|e| DemoError::with_source(format!("provider `{name}`"), e))?;
            let kind = emulated_kind(pc.kind).ok_or_else(|| {
                DemoError::new(format!(
                    "provider `{name}`: the emulator does not speak kind `{}`",
                    pc.kind
                ))
            })?;
            let prefix = prefix_for(name, &pc.base_url);
            match kinds.get(&prefix) {
                Some((k, other)) if *k != kind => {
                    return Err(DemoError::new(format!(
                        "providers `{other}` ({k}) and `{name}` ({kind}) would both be served \
                         under the prefix `{prefix}`; give one a base_url with another first \
                         path segment"
                    )));
                }
                Some(_) => {}
                None => {
                    kinds.insert(prefix.clone(), (kind, name.to_owned()));
                }
            }
            served.insert(name.to_owned(), (prefix, kind));
        }
        for (prefix, (kind, _)) in &kinds {
            let p = ProviderConfig::new(prefix.clone(), *kind);
            let p = match &tune {
                Some(tune) => tune(prefix, p),
                None => p,
            };
            if p.prefix != *prefix || p.kind != *kind {
                return Err(DemoError::new(format!(
                    "the tune closure changed the prefix or kind of `{prefix}`; change its \
                     other settings only"
                )));
            }
            emulator = emulator.provider(p);
        }
        let emulator = emulator
            .start()
            .await
            .map_err(|e| DemoError::with_source("starting the emulator", e))?;
        let mut routes = BTreeMap::new();
        for (name, (prefix, kind)) in served {
            let mut url = emulator.base_url(&prefix);
            // The SDK's Gemini base URL carries the API version (…/v1beta), as Google's does.
            if kind == Kind::Gemini {
                url.push_str("/v1beta");
            }
            let url = Url::parse(&url)
                .map_err(|e| DemoError::with_source(format!("the emulator's URL {url}"), e))?;
            routes.insert(name, Route { prefix, url });
        }
        Ok(Demo {
            emulator,
            config,
            environment,
            routes,
        })
    }
}

impl Demo {
    /// A builder serving `environment` of `config` (a clone of it is kept for
    /// [`client_builder`](Self::client_builder)).
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::Config;
    /// use llm_failover_emulator::demo::Demo;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let config = Config::from_toml_str(r#"
    /// #     default_environment = "demo"
    /// #     [environments.demo]
    /// #     chat = ["demo-openai"]
    /// #     [providers.demo-openai]
    /// #     kind = "openai"
    /// #     base_url = "http://127.0.0.1:4010/openai/v1"
    /// #     model = "gpt-4o-mini"
    /// #     api_key_env = { demo = "LLM_FAILOVER_DEMO_KEY" }
    /// # "#)?;
    /// let demo = Demo::builder(&config, "demo").start().await?;
    /// # let _ = demo;
    /// // An environment the file does not define is an error at start:
    /// assert!(Demo::builder(&config, "staging").start().await.is_err());
    /// # Ok(()) }
    /// ```
    pub fn builder(config: &Config, environment: impl Into<String>) -> DemoBuilder {
        DemoBuilder {
            config: config.clone(),
            environment: environment.into(),
            tune: None,
            emulator: Emulator::builder(),
        }
    }

    /// Starts an emulator serving `environment` of `config` with defaults: any model, no
    /// limits, no faults, a real-time minute. [`builder`](Self::builder) tunes it.
    ///
    /// # Errors
    ///
    /// As [`DemoBuilder::start`].
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::Config;
    /// use llm_failover_emulator::demo::Demo;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let config = Config::from_toml_str(r#"
    /// #     default_environment = "demo"
    /// #     [environments.demo]
    /// #     chat = ["demo-openai"]
    /// #     [providers.demo-openai]
    /// #     kind = "openai"
    /// #     base_url = "http://127.0.0.1:4010/openai/v1"
    /// #     model = "gpt-4o-mini"
    /// #     api_key_env = { demo = "LLM_FAILOVER_DEMO_KEY" }
    /// # "#)?;
    /// let demo = Demo::start(&config, "demo").await?;
    /// assert!(demo.emulator().url().starts_with("http://127.0.0.1:"));
    /// # Ok(()) }
    /// ```
    pub async fn start(config: &Config, environment: &str) -> Result<Demo, DemoError> {
        Self::builder(config, environment).start().await
    }

    /// A client builder for the environment, pointed at the emulator: the configuration,
    /// `.environment(name)`, and [`point`](Self::point). Call it once per client; more
    /// settings (a clock, a policy) can follow before `build`.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::{ChatRequest, Config};
    /// use llm_failover_emulator::demo::Demo;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let config = Config::from_toml_str(r#"
    /// #     default_environment = "demo"
    /// #     [environments.demo]
    /// #     chat = ["demo-openai"]
    /// #     [providers.demo-openai]
    /// #     kind = "openai"
    /// #     base_url = "http://127.0.0.1:4010/openai/v1"
    /// #     model = "gpt-4o-mini"
    /// #     api_key_env = { demo = "LLM_FAILOVER_DEMO_KEY" }
    /// # "#)?;
    /// let demo = Demo::start(&config, "demo").await?;
    /// let client = demo.client_builder().build()?;
    /// assert_eq!(client.environment(), "demo");
    /// let answer = client.chat(ChatRequest::from_prompt("hello").max_tokens(5)).await?;
    /// assert!(!answer.text.is_empty());
    /// # Ok(()) }
    /// ```
    pub fn client_builder(&self) -> ClientBuilder {
        self.point(
            ClientBuilder::default()
                .config(self.config.clone())
                .environment(&self.environment),
        )
    }

    /// Points `builder` at the emulator: for every provider of the environment, its base URL
    /// (`ClientBuilder::base_url`) and the emulator's key (`ClientBuilder::credential` with
    /// [`Credential::new`]). The builder's configuration and environment are left as they
    /// are: give it the same file (`config_path`) and `.environment(…)`.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::{Client, Config};
    /// use llm_failover_emulator::demo::Demo;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let text = r#"
    /// #     default_environment = "demo"
    /// #     [environments.demo]
    /// #     chat = ["demo-openai"]
    /// #     [providers.demo-openai]
    /// #     kind = "openai"
    /// #     base_url = "http://127.0.0.1:4010/openai/v1"
    /// #     model = "gpt-4o-mini"
    /// #     api_key_env = { demo = "LLM_FAILOVER_DEMO_KEY" }
    /// # "#;
    /// # let dir = std::env::temp_dir().join(format!("demo-point-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir)?;
    /// # let path = dir.join("providers.toml");
    /// # std::fs::write(&path, text)?;
    /// let config = Config::from_path(&path)?;
    /// let demo = Demo::start(&config, "demo").await?;
    /// let client = demo
    ///     .point(Client::builder().config_path(&path).environment("demo"))
    ///     .build()?;
    /// # let _ = client;
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok(()) }
    /// ```
    pub fn point(&self, mut builder: ClientBuilder) -> ClientBuilder {
        for (name, route) in &self.routes {
            builder = builder
                .base_url(name, route.url.clone())
                .credential(name, Credential::new(self.emulator.key(&route.prefix)));
        }
        builder
    }

    /// The emulator: its URL, admin endpoint, log, limits and fault mixes, by prefix.
    ///
    /// # Examples
    ///
    /// ```
    /// # use llm_failover::Config;
    /// # use llm_failover_emulator::demo::Demo;
    /// use llm_failover_emulator::Fault;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let config = Config::from_toml_str(r#"
    /// #     default_environment = "demo"
    /// #     [environments.demo]
    /// #     chat = ["demo-openai"]
    /// #     [providers.demo-openai]
    /// #     kind = "openai"
    /// #     base_url = "http://127.0.0.1:4010/openai/v1"
    /// #     model = "gpt-4o-mini"
    /// #     api_key_env = { demo = "LLM_FAILOVER_DEMO_KEY" }
    /// # "#)?;
    /// let demo = Demo::start(&config, "demo").await?;
    /// let emu = demo.emulator();
    /// emu.set_fault_mix("openai", 7, [(0.05, Fault::Reset)]);
    /// assert!(emu.log().is_empty());
    /// # Ok(()) }
    /// ```
    pub fn emulator(&self) -> &Emulator {
        &self.emulator
    }

    /// The emulator, outliving this handle (the routes are forgotten).
    ///
    /// # Examples
    ///
    /// ```
    /// # use llm_failover::Config;
    /// # use llm_failover_emulator::demo::Demo;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let config = Config::from_toml_str(r#"
    /// #     default_environment = "demo"
    /// #     [environments.demo]
    /// #     chat = ["demo-openai"]
    /// #     [providers.demo-openai]
    /// #     kind = "openai"
    /// #     base_url = "http://127.0.0.1:4010/openai/v1"
    /// #     model = "gpt-4o-mini"
    /// #     api_key_env = { demo = "LLM_FAILOVER_DEMO_KEY" }
    /// # "#)?;
    /// let demo = Demo::start(&config, "demo").await?;
    /// let builder = demo.client_builder();
    /// let emulator = demo.into_emulator(); // still serving
    /// let client = builder.build()?;
    /// # let _ = client;
    /// emulator.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn into_emulator(self) -> Emulator {
        self.emulator
    }

    /// The environment served.
    ///
    /// # Examples
    ///
    /// ```
    /// # use llm_failover::Config;
    /// # use llm_failover_emulator::demo::Demo;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let config = Config::from_toml_str(r#"
    /// #     default_environment = "demo"
    /// #     [environments.demo]
    /// #     chat = ["demo-openai"]
    /// #     [providers.demo-openai]
    /// #     kind = "openai"
    /// #     base_url = "http://127.0.0.1:4010/openai/v1"
    /// #     model = "gpt-4o-mini"
    /// #     api_key_env = { demo = "LLM_FAILOVER_DEMO_KEY" }
    /// # "#)?;
    /// let demo = Demo::start(&config, "demo").await?;
    /// assert_eq!(demo.environment(), "demo");
    /// # Ok(()) }
    /// ```
    pub fn environment(&self) -> &str {
        &self.environment
    }

    /// The configuration the environment was read from.
    ///
    /// # Examples
    ///
    /// ```
    /// # use llm_failover::Config;
    /// # use llm_failover_emulator::demo::Demo;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let config = Config::from_toml_str(r#"
    /// #     default_environment = "demo"
    /// #     [environments.demo]
    /// #     chat = ["demo-openai"]
    /// #     [providers.demo-openai]
    /// #     kind = "openai"
    /// #     base_url = "http://127.0.0.1:4010/openai/v1"
    /// #     model = "gpt-4o-mini"
    /// #     api_key_env = { demo = "LLM_FAILOVER_DEMO_KEY" }
    /// # "#)?;
    /// let demo = Demo::start(&config, "demo").await?;
    /// assert!(demo.config().provider("demo-openai").is_ok());
    /// # Ok(()) }
    /// ```
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The emulator prefix serving `provider` (a provider name of the environment).
    ///
    /// # Panics
    ///
    /// If the environment does not use `provider` (a test bug).
    ///
    /// # Examples
    ///
    /// ```
    /// # use llm_failover::Config;
    /// # use llm_failover_emulator::demo::Demo;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let config = Config::from_toml_str(r#"
    ///     default_environment = "test"
    ///     [environments.test]
    ///     chat = ["demo-openai", "anthropic"]
    ///     [providers.demo-openai]
    ///     kind = "openai"
    ///     base_url = "http://127.0.0.1:4010/openai/v1"   # this machine: the path's first segment
    ///     model = "gpt-4o-mini"
    ///     api_key_env = { test = "UNUSED_KEY" }
    ///     [providers.anthropic]
    ///     kind = "anthropic"
    ///     base_url = "https://api.anthropic.com"         # elsewhere: the provider's name
    ///     model = "claude-3-5-haiku-latest"
    ///     api_key_env = { test = "UNUSED_KEY" }
    /// "#)?;
    /// let demo = Demo::start(&config, "test").await?;
    /// assert_eq!(demo.prefix("demo-openai"), "openai");
    /// assert_eq!(demo.prefix("anthropic"), "anthropic");
    /// # Ok(()) }
    /// ```
    pub fn prefix(&self, provider: &str) -> &str {
        &self.route(provider).prefix
    }

    /// The base URL the client is given for `provider`.
    ///
    /// # Panics
    ///
    /// If the environment does not use `provider` (a test bug).
    ///
    /// # Examples
    ///
    /// ```
    /// # use llm_failover::Config;
    /// # use llm_failover_emulator::demo::Demo;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let config = Config::from_toml_str(r#"
    /// #     default_environment = "demo"
    /// #     [environments.demo]
    /// #     chat = ["demo-openai"]
    /// #     [providers.demo-openai]
    /// #     kind = "openai"
    /// #     base_url = "http://127.0.0.1:4010/openai/v1"
    /// #     model = "gpt-4o-mini"
    /// #     api_key_env = { demo = "LLM_FAILOVER_DEMO_KEY" }
    /// # "#)?;
    /// let demo = Demo::start(&config, "demo").await?;
    /// let url = demo.base_url("demo-openai");
    /// assert_eq!(url.as_str(), demo.emulator().base_url("openai"));
    /// assert!(url.path().ends_with("/openai/v1"));
    /// # Ok(()) }
    /// ```
    pub fn base_url(&self, provider: &str) -> &Url {
        &self.route(provider).url
    }

    /// Appends fault steps for the next requests to `provider` (a provider name of the
    /// environment): [`Emulator::script`] on its prefix.
    ///
    /// # Panics
    ///
    /// If the environment does not use `provider` (a test bug).
    ///
    /// # Examples
    ///
    /// ```
    /// # use llm_failover::{ChatRequest, Config};
    /// # use llm_failover_emulator::demo::Demo;
    /// use llm_failover_emulator::{Fault, RetryAfter};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let config = Config::from_toml_str(r#"
    /// #     default_environment = "demo"
    /// #     [environments.demo]
    /// #     chat = ["demo-openai", "demo-anthropic"]
    /// #     [providers.demo-openai]
    /// #     kind = "openai"
    /// #     base_url = "http://127.0.0.1:4010/openai/v1"
    /// #     model = "gpt-4o-mini"
    /// #     api_key_env = { demo = "LLM_FAILOVER_DEMO_KEY" }
    /// #     [providers.demo-anthropic]
    /// #     kind = "anthropic"
    /// #     base_url = "http://127.0.0.1:4010/anthropic"
    /// #     model = "claude-3-5-haiku-latest"
    /// #     api_key_env = { demo = "LLM_FAILOVER_DEMO_KEY" }
    /// # "#)?;
    /// let demo = Demo::start(&config, "demo").await?;
    /// demo.script("demo-openai", [Fault::RateLimit { retry_after: RetryAfter::Seconds(1) }]);
    /// let client = demo.client_builder().build()?;
    /// let answer = client.chat(ChatRequest::from_prompt("hi").max_tokens(5)).await?;
    /// assert_eq!(answer.provider.as_str(), "demo-anthropic"); // failed over at once
    /// # Ok(()) }
    /// ```
    pub fn script(&self, provider: &str, steps: impl IntoIterator<Item = Fault>) {
        self.emulator.script(self.prefix(provider), steps);
    }

    /// The emulator's counters for `provider` (a provider name of the environment):
    /// [`Emulator::counters`] on its prefix.
    ///
    /// # Panics
    ///
    /// If the environment does not use `provider` (a test bug).
    ///
    /// # Examples
    ///
    /// ```
    /// # use llm_failover::Config;
    /// # use llm_failover_emulator::demo::Demo;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let config = Config::from_toml_str(r#"
    /// #     default_environment = "demo"
    /// #     [environments.demo]
    /// #     chat = ["demo-openai"]
    /// #     [providers.demo-openai]
    /// #     kind = "openai"
    /// #     base_url = "http://127.0.0.1:4010/openai/v1"
    /// #     model = "gpt-4o-mini"
    /// #     api_key_env = { demo = "LLM_FAILOVER_DEMO_KEY" }
    /// # "#)?;
    /// let demo = Demo::start(&config, "demo").await?;
    /// assert_eq!(demo.counters("demo-openai").requests, 0);
    /// # Ok(()) }
    /// ```
    pub fn counters(&self, provider: &str) -> Counters {
        self.emulator.counters(self.prefix(provider))
    }

    /// Stops the emulator and waits for its listeners to finish.
    ///
    /// # Examples
    ///
    /// ```
    /// # use llm_failover::Config;
    /// # use llm_failover_emulator::demo::Demo;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let config = Config::from_toml_str(r#"
    /// #     default_environment = "demo"
    /// #     [environments.demo]
    /// #     chat = ["demo-openai"]
    /// #     [providers.demo-openai]
    /// #     kind = "openai"
    /// #     base_url = "http://127.0.0.1:4010/openai/v1"
    /// #     model = "gpt-4o-mini"
    /// #     api_key_env = { demo = "LLM_FAILOVER_DEMO_KEY" }
    /// # "#)?;
    /// let demo = Demo::start(&config, "demo").await?;
    /// demo.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(self) {
        self.emulator.shutdown().await;
    }

    fn route(&self, provider: &str) -> &Route {
        match self.routes.get(provider) {
            Some(r) => r,
            None => panic!(
                "environment `{}` uses no provider {provider:?} (it uses: {})",
                self.environment,
                self.routes.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        }
    }
}

/// Why a [`Demo`] could not start: the message says which environment, provider or setting.
///
/// # Examples
///
/// ```
/// use llm_failover::Config;
/// use llm_failover_emulator::demo::Demo;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let config = Config::from_toml_str(r#"
/// #     default_environment = "demo"
/// #     [environments.demo]
/// #     chat = ["demo-openai"]
/// #     [providers.demo-openai]
/// #     kind = "openai"
/// #     base_url = "http://127.0.0.1:4010/openai/v1"
/// #     model = "gpt-4o-mini"
/// #     api_key_env = { demo = "LLM_FAILOVER_DEMO_KEY" }
/// # "#)?;
/// let err = Demo::start(&config, "staging").await.unwrap_err();
/// assert!(err.to_string().starts_with("environment `staging`"), "{err}");
/// assert!(std::error::Error::source(&err).is_some()); // the configuration's own error
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct DemoError {
    message: String,
    source: Option<Box<dyn StdError + Send + Sync>>,
}

impl DemoError {
    fn new(message: impl Into<String>) -> Self {
        DemoError {
            message: message.into(),
            source: None,
        }
    }

    fn with_source(
        context: impl Into<String>,
        source: impl StdError + Send + Sync + 'static,
    ) -> Self {
        DemoError {
            message: format!("{}: {source}", context.into()),
            source: Some(Box::new(source)),
        }
    }
}

impl fmt::Display for DemoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl StdError for DemoError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static))
    }
}

/// The emulator's wire format for an SDK provider kind.
fn emulated_kind(kind: ProviderKind) -> Option<Kind> {
    Some(match kind {
        ProviderKind::OpenAi => Kind::OpenAi,
        ProviderKind::Azure => Kind::Azure,
        ProviderKind::Anthropic => Kind::Anthropic,
        ProviderKind::Gemini => Kind::Gemini,
        ProviderKind::Deepgram => Kind::Deepgram,
        _ => return None,
    })
}

/// Where `name`, configured at `base_url`, is served (see the module documentation).
fn prefix_for(name: &str, base_url: &Url) -> String {
    let local = match base_url.host() {
        Some(Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(Host::Ipv4(ip)) => IpAddr::V4(ip).is_loopback(),
        Some(Host::Ipv6(ip)) => IpAddr::V6(ip).is_loopback(),
        None => false,
    };
    let segment = base_url
        .path_segments()
        .and_then(|mut s| s.next())
        .filter(|s| is_prefix(s));
    match segment {
        Some(s) if local => s.to_owned(),
        _ => sanitize(name),
    }
}

/// What the emulator accepts as a prefix: `[a-z0-9_-]+`, not starting with `_`.
fn is_prefix(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('_')
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '_' | '-') => c,
            _ => '-',
        })
        .collect();
    if is_prefix(&s) { s } else { format!("p{s}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn a_local_base_url_is_served_under_its_first_path_segment() {
        for (u, want) in [
            ("http://127.0.0.1:4010/openai/v1", "openai"),
            ("http://localhost:4010/anthropic", "anthropic"),
            ("http://[::1]:4010/deepgram", "deepgram"),
            ("http://127.0.0.1:4010/", "demo-x"),
            ("http://127.0.0.1:4010/_admin", "demo-x"),
            ("http://127.0.0.1:4010/OpenAI/v1", "demo-x"),
        ] {
            assert_eq!(prefix_for("demo-x", &url(u)), want, "{u}");
        }
    }

    #[test]
    fn a_remote_base_url_is_served_under_the_provider_name() {
        assert_eq!(
            prefix_for("openai-whisper", &url("https://api.openai.com/v1")),
            "openai-whisper"
        );
        assert_eq!(
            prefix_for("groq", &url("https://api.groq.com/openai/v1")),
            "groq"
        );
        assert_eq!(
            prefix_for("My.Azure", &url("https://x.openai.azure.com")),
            "my-azure"
        );
        assert_eq!(prefix_for("_hidden", &url("https://h")), "p_hidden");
    }
}
