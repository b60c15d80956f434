//! [`Client`] and [`ClientBuilder`].

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use url::Url;

use crate::clock::{Clock, TokioClock};
use crate::config::{Config, Limits, Policy, ProviderSettings};
use crate::error::Result;
use crate::http::{ClientChoice, Transport};
use crate::id::{Capability, Credential, PerCapability, ProviderId};
use crate::provider::Provider;
use crate::ratelimit::{LimitKey, LimitSnapshot, LimiterStore};
use crate::rng::{Rng, SeededRng};
use crate::router::{self, ChatStream, Parts, RequestOptions, Router, NO_OPTIONS};
use crate::stats::Stats;
use crate::types::{ChatRequest, ChatResponse, Transcript, TranscriptionRequest};

/// Sends chat and speech-to-text requests through the configured providers, pacing each to
/// its stated limits and failing over between them.
///
/// Cheap to clone (an `Arc` inside); clones share buckets, breakers and counters. `Send +
/// Sync`: share one client across tasks.
///
/// # Examples
///
/// ```no_run
/// use llm_failover::{ChatRequest, Client};
///
/// # async fn run() -> llm_failover::Result<()> {
/// let client = Client::builder()
///     .config_path("providers.toml")
///     .environment("prod")
///     .build()?;
/// let answer = client.chat(ChatRequest::from_prompt("Say hi").max_tokens(20)).await?;
/// println!("{} answered: {}", answer.provider, answer.text);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    router: Arc<Router>,
    environment: Arc<str>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("environment", &self.environment)
            .field("providers", &self.router.providers().collect::<Vec<_>>())
            .finish()
    }
}

impl Client {
    /// A builder.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// The active environment's name.
    pub fn environment(&self) -> &str {
        &self.environment
    }

    /// A chat completion, failing over as needed.
    ///
    /// # Errors
    ///
    /// The terminal error of a request that can only fail again (sent once), or
    /// `AllProvidersFailed` with every attempt's error, or `AllProvidersUnavailable` when
    /// every provider is cooling down past the deadline, or `RequestTooLarge`.
    pub fn chat(&self, req: ChatRequest) -> impl Future<Output = Result<ChatResponse>> + Send + '_ {
        // The router's future itself, not one more state machine around it.
        self.router.run(router::Chat(req), &NO_OPTIONS)
    }

    /// [`chat`](Self::chat) with per-request options.
    ///
    /// # Errors
    ///
    /// As [`chat`](Self::chat).
    pub fn chat_with<'a>(
        &'a self,
        req: ChatRequest,
        opts: &'a RequestOptions,
    ) -> impl Future<Output = Result<ChatResponse>> + Send + 'a {
        self.router.run(router::Chat(req), opts)
    }

    /// A streamed chat completion. Fails over until the first content arrives.
    ///
    /// # Errors
    ///
    /// As [`chat`](Self::chat) for failures before the first content; later errors come out
    /// of the stream.
    pub fn chat_stream(
        &self,
        req: ChatRequest,
    ) -> impl Future<Output = Result<ChatStream>> + Send + '_ {
        self.router.run(router::Stream(req), &NO_OPTIONS)
    }

    /// [`chat_stream`](Self::chat_stream) with per-request options.
    ///
    /// # Errors
    ///
    /// As [`chat_stream`](Self::chat_stream).
    pub fn chat_stream_with<'a>(
        &'a self,
        req: ChatRequest,
        opts: &'a RequestOptions,
    ) -> impl Future<Output = Result<ChatStream>> + Send + 'a {
        self.router.run(router::Stream(req), opts)
    }

    /// A transcription through the speech-to-text failover order.
    ///
    /// # Errors
    ///
    /// As [`chat`](Self::chat).
    pub fn transcribe(
        &self,
        req: TranscriptionRequest,
    ) -> impl Future<Output = Result<Transcript>> + Send + '_ {
        self.router.run(router::Transcribe(req), &NO_OPTIONS)
    }

    /// [`transcribe`](Self::transcribe) with per-request options.
    ///
    /// # Errors
    ///
    /// As [`chat`](Self::chat).
    pub fn transcribe_with<'a>(
        &'a self,
        req: TranscriptionRequest,
        opts: &'a RequestOptions,
    ) -> impl Future<Output = Result<Transcript>> + Send + 'a {
        self.router.run(router::Transcribe(req), opts)
    }

    /// Per-provider counters since the client was built.
    pub fn stats(&self) -> Stats {
        self.router.stats()
    }

    /// The chat providers, in failover order.
    pub fn chat_providers(&self) -> Vec<ProviderId> {
        self.router.order(Capability::Chat).cloned().collect()
    }

    /// The speech-to-text providers, in failover order.
    pub fn transcription_providers(&self) -> Vec<ProviderId> {
        self.router
            .order(Capability::Transcription)
            .cloned()
            .collect()
    }

    /// What the limiter knows now about `provider`'s limits for `model`, configured or
    /// learned from its answers: the binding request and token buckets (level, capacity,
    /// window, when full again), a pace learned from 429s, a gate. `None` when nothing is
    /// configured and nothing was learned yet (or `provider` is not one of the client's).
    ///
    /// # Errors
    ///
    /// When the limiter store fails (never for the in-memory store).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use llm_failover::provider::openai::OpenAi;
    /// use llm_failover::ratelimit::Limits;
    /// use llm_failover::{Client, ProviderId, ProviderSettings};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let base = "http://127.0.0.1:11434/v1".parse()?;
    /// let client = Client::builder()
    ///     .provider(
    ///         Arc::new(OpenAi::new(ProviderId::new("paced"), base)),
    ///         ProviderSettings::new().limits(Limits::none().with_rpm(60).with_tpm(90_000)),
    ///     )
    ///     .provider(
    ///         Arc::new(OpenAi::new(ProviderId::new("learned"), "http://127.0.0.1:8080/v1".parse()?)),
    ///         ProviderSettings::new(),
    ///     )
    ///     .build()?;
    ///
    /// let limits = client.limits("paced", "gpt-4o-mini").await?.expect("configured");
    /// let requests = limits.requests.expect("an rpm is configured");
    /// assert_eq!((requests.level, requests.capacity), (60.0, 60));
    /// assert_eq!(requests.window, Duration::from_secs(60));
    /// assert_eq!(limits.tokens.map(|t| t.capacity), Some(90_000));
    ///
    /// // Nothing configured, nothing sent yet: nothing known.
    /// assert_eq!(client.limits("learned", "gpt-4o-mini").await?, None);
    /// # Ok(()) }
    /// ```
    pub async fn limits(&self, provider: &str, model: &str) -> Result<Option<LimitSnapshot>> {
        self.router
            .limits(&LimitKey::new(ProviderId::new(provider), model))
            .await
    }

    /// The limits configured for `provider` (not what was learned from headers).
    pub fn configured_limits(&self, provider: &str) -> Option<Limits> {
        self.router.configured_limits(provider)
    }
}

type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Builds a [`Client`] from `providers.toml` or from providers added in code.
///
/// Errors are deferred to [`build`](Self::build).
///
/// # Examples
///
/// Providers added in code serve in the order they were added:
///
/// ```
/// use std::sync::Arc;
/// use llm_failover::provider::openai::OpenAi;
/// use llm_failover::ratelimit::Limits;
/// use llm_failover::{Client, ProviderId, ProviderSettings};
///
/// let local = OpenAi::new(ProviderId::new("local"), "http://127.0.0.1:11434/v1".parse()?)
///     .with_chat_model("llama3.2");
/// let client = Client::builder()
///     .provider(Arc::new(local), ProviderSettings::new().limits(Limits::none().with_rpm(60)))
///     .environment("dev")
///     .build()?;
/// assert_eq!(client.chat_providers(), [ProviderId::new("local")]);
/// assert_eq!(client.environment(), "dev");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use]
#[derive(Default)]
pub struct ClientBuilder {
    config: Option<Result<Config>>,
    environment: Option<String>,
    policy: Option<Policy>,
    clock: Option<Arc<dyn Clock>>,
    rng: Option<Arc<dyn Rng>>,
    store: Option<Arc<dyn LimiterStore>>,
    transport: Option<Arc<dyn Transport>>,
    http: ClientChoice,
    providers: Vec<(Arc<dyn Provider>, ProviderSettings)>,
    chat_order: Option<Vec<String>>,
    transcription_order: Option<Vec<String>>,
    credentials: HashMap<String, Credential>,
    base_urls: HashMap<String, Url>,
    env_lookup: Option<EnvLookup>,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("environment", &self.environment)
            .field("providers", &self.providers.len())
            .field("credentials", &self.credentials.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl ClientBuilder {
    /// Uses a parsed configuration.
    pub fn config(mut self, config: Config) -> Self {
        self.config = Some(Ok(config));
        self
    }

    /// Loads `providers.toml` from `path` (errors surface in [`build`](Self::build)).
    pub fn config_path(mut self, path: impl AsRef<Path>) -> Self {
        self.config = Some(Config::from_path(path));
        self
    }

    /// Selects the environment (overrides `LLM_FAILOVER_ENV` and `default_environment`).
    pub fn environment(mut self, name: impl Into<String>) -> Self {
        self.environment = Some(name.into());
        self
    }

    /// Replaces the policy (otherwise the config's, or the defaults).
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Injects the clock that times every wait (default [`TokioClock`](crate::clock::TokioClock)).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Injects the jitter source (tests: a seeded or fixed one).
    pub fn rng(mut self, rng: Arc<dyn Rng>) -> Self {
        self.rng = Some(rng);
        self
    }

    /// Replaces the in-memory limiter store.
    pub fn limiter_store(mut self, store: Arc<dyn LimiterStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Sends through `transport` instead of reqwest (tests: a scripted transport).
    #[cfg(any(test, feature = "test-util"))]
    #[cfg_attr(feature = "test-util", visibility::make(pub))]
    pub(crate) fn transport(mut self, transport: Arc<dyn Transport>) -> Self {
        self.transport = Some(transport);
        self
    }

    /// Sends with the caller's `reqwest::Client` (its proxies, root certificates, default
    /// headers, connection pool) instead of one built from the policy.
    ///
    /// Each attempt is still bounded by the policy's `request_timeout` (set on every
    /// request); the connect and read timeouts are the client's own, and the policy's
    /// `connect_timeout` does not apply. Headers a provider needs (its key, the content type,
    /// a version) replace the client's defaults of the same name; its other default headers,
    /// and its user agent unless [`user_agent`](Self::user_agent) is set, are sent as they are.
    ///
    /// Build it with `redirect(reqwest::redirect::Policy::none())`: reqwest follows
    /// redirects by default and drops only `Authorization` on the way, so a key sent in
    /// another header (Anthropic's, Azure's, Gemini's) would reach the redirect's host. An
    /// answer that arrived through a redirect is refused (a `Config` error), but only after
    /// the request went there.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use llm_failover::provider::openai::OpenAi;
    /// use llm_failover::{Client, ProviderId, ProviderSettings};
    /// use reqwest::header::{HeaderMap, HeaderValue};
    ///
    /// let mut headers = HeaderMap::new();
    /// headers.insert("x-team", HeaderValue::from_static("research"));
    /// let http = reqwest::Client::builder()
    ///     .default_headers(headers)
    ///     .redirect(reqwest::redirect::Policy::none())
    ///     .build()?;
    /// let local = OpenAi::new(ProviderId::new("local"), "http://127.0.0.1:11434/v1".parse()?);
    /// let client = Client::builder()
    ///     .http_client(http)
    ///     .provider(Arc::new(local), ProviderSettings::new())
    ///     .build()?;
    /// # let _ = client;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn http_client(mut self, client: reqwest::Client) -> Self {
        self.http.client = Some(client);
        self
    }

    /// Sends `agent` as every request's `User-Agent` (default `llm-failover/<version>`; with
    /// an [`http_client`](Self::http_client) of your own, that client's unless set here).
    /// An agent that is not a valid header value is a `Config` error at [`build`](Self::build).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use llm_failover::provider::openai::OpenAi;
    /// use llm_failover::{Client, ProviderId, ProviderSettings};
    ///
    /// let local = OpenAi::new(ProviderId::new("local"), "http://127.0.0.1:11434/v1".parse()?);
    /// let client = Client::builder()
    ///     .user_agent("nightly-batch/2.1 (ops@example.com)")
    ///     .provider(Arc::new(local), ProviderSettings::new())
    ///     .build()?;
    /// # let _ = client;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn user_agent(mut self, agent: impl Into<String>) -> Self {
        self.http.user_agent = Some(agent.into());
        self
    }

    /// Adds a provider built in code. Unless an order is set, providers serve their
    /// capabilities in the order they were added.
    pub fn provider(mut self, adapter: Arc<dyn Provider>, settings: ProviderSettings) -> Self {
        self.providers.push((adapter, settings));
        self
    }

    /// The chat failover order (provider names), replacing the environment's.
    pub fn chat_order<S: Into<String>>(mut self, order: impl IntoIterator<Item = S>) -> Self {
        self.chat_order = Some(order.into_iter().map(Into::into).collect());
        self
    }

    /// The speech-to-text failover order, replacing the environment's.
    pub fn transcription_order<S: Into<String>>(
        mut self,
        order: impl IntoIterator<Item = S>,
    ) -> Self {
        self.transcription_order = Some(order.into_iter().map(Into::into).collect());
        self
    }

    /// Supplies `provider`'s key in code instead of its environment variable.
    pub fn credential(mut self, provider: impl Into<String>, credential: Credential) -> Self {
        self.credentials.insert(provider.into(), credential);
        self
    }

    /// Points `provider` at another base URL (a local emulator, a proxy).
    pub fn base_url(mut self, provider: impl Into<String>, url: Url) -> Self {
        self.base_urls.insert(provider.into(), url);
        self
    }

    /// Reads environment variables through `lookup` instead of the process environment.
    pub fn env_lookup(
        mut self,
        lookup: impl Fn(&str) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.env_lookup = Some(Arc::new(lookup));
        self
    }

    /// Builds the client.
    ///
    /// # Errors
    ///
    /// `Config` when the configuration is invalid, names an unknown provider or environment,
    /// or a key's environment variable is missing (the message names the variable, never a
    /// key).
    pub fn build(mut self) -> Result<Client> {
        let resolved = match self.config.take() {
            Some(config) => self.resolve_config(config?)?,
            None => self.resolve_code(),
        };
        let Resolved {
            environment,
            mut providers,
            mut orders,
            policy,
        } = resolved;
        providers.splice(0..0, std::mem::take(&mut self.providers));
        if let Some(order) = self.chat_order.take() {
            orders.set(
                Capability::Chat,
                order.iter().map(ProviderId::new).collect(),
            );
        }
        if let Some(order) = self.transcription_order.take() {
            orders.set(
                Capability::Transcription,
                order.iter().map(ProviderId::new).collect(),
            );
        }
        let router = Router::new(Parts {
            providers,
            orders,
            policy: self.policy.take().or(policy).unwrap_or_default(),
            clock: self.clock.take().unwrap_or_else(|| Arc::new(TokioClock)),
            rng: self
                .rng
                .take()
                .unwrap_or_else(|| Arc::new(SeededRng::from_entropy())),
            store: self.store.take(),
            transport: self.transport.take(),
            http: std::mem::take(&mut self.http),
        })?;
        Ok(Client {
            router: Arc::new(router),
            environment: Arc::from(environment),
        })
    }

    /// The environment, providers, orders and policy `config` names (the builder's base URLs,
    /// keys and environment applied).
    fn resolve_config(&self, mut config: Config) -> Result<Resolved> {
        let lookup = self.lookup();
        for (name, url) in &self.base_urls {
            config.set_base_url(name, url)?;
        }
        let env = config
            .select_environment_with(self.environment.as_deref(), &*lookup)?
            .clone();
        // In failover order, so the first problem reported is the first provider's.
        let mut used: Vec<&ProviderId> = Vec::new();
        for id in env.chat.iter().chain(&env.transcription) {
            if !used.contains(&id) {
                used.push(id);
            }
        }
        let mut providers = Vec::new();
        for id in used {
            let pc = config.provider(id.as_str())?;
            let credential = match self.credentials.get(id.as_str()) {
                Some(c) => Some(c.clone()),
                None => config.credential(id.as_str(), &env.name, &*lookup)?,
            };
            let settings = ProviderSettings {
                limits: pc.limits,
                model_limits: pc.model_limits.clone().into_iter().collect(),
                timeout: pc.timeout,
                credential,
                extra_body: pc.extra_body.clone(),
            };
            providers.push((crate::provider::from_config(pc)?, settings));
        }
        Ok(Resolved {
            orders: PerCapability::from_fn(|c| env.providers(c).to_vec()),
            environment: env.name,
            providers,
            policy: Some(config.policy),
        })
    }

    /// The providers added in code serve their capabilities in the order they were added;
    /// keys given with [`credential`](Self::credential) apply.
    fn resolve_code(&mut self) -> Resolved {
        for (adapter, settings) in &mut self.providers {
            if let Some(c) = self.credentials.get(adapter.id().as_str()) {
                settings.credential = Some(c.clone());
            }
        }
        let orders = PerCapability::from_fn(|cap| {
            self.providers
                .iter()
                .filter(|(a, _)| a.capabilities().supports(cap))
                .map(|(a, _)| a.id().clone())
                .collect()
        });
        Resolved {
            environment: self
                .environment
                .clone()
                .unwrap_or_else(|| "code".to_owned()),
            providers: Vec::new(),
            orders,
            policy: None,
        }
    }

    fn lookup(&self) -> EnvLookup {
        self.env_lookup
            .clone()
            .unwrap_or_else(|| Arc::new(|name: &str| std::env::var(name).ok()))
    }
}

/// What the builder's configuration resolves to.
struct Resolved {
    environment: String,
    /// The configuration's providers (the ones added in code come first).
    providers: Vec<(Arc<dyn Provider>, ProviderSettings)>,
    orders: PerCapability<Vec<ProviderId>>,
    policy: Option<Policy>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found while testing transport safety: a base URL given in code skipped the file's
    /// rule, so a key could go over plain http to a remote host.
    #[test]
    fn a_base_url_override_follows_the_files_http_rule() {
        let toml = |allow: &str| {
            format!(
                "default_environment = \"e\"\n[environments.e]\nchat = [\"p\"]\n\
                 [providers.p]\nkind = \"openai\"\nbase_url = \"https://api.openai.com/v1\"\n\
                 model = \"m\"\nauth = \"none\"\n{allow}"
            )
        };
        let build = |allow: &str, url: &str| {
            Client::builder()
                .config(toml(allow).parse::<Config>().unwrap())
                .base_url("p", url.parse().unwrap())
                .build()
        };
        for url in [
            "http://api.openai.com/v1",
            "http://10.0.0.7:8000/v1",
            "ftp://h/x",
        ] {
            let err = build("", url).unwrap_err();
            assert!(err.is_config(), "{url}: {err}");
            assert!(
                err.message()
                    .contains("providers.p.base_url (override given in code)"),
                "{url}: {err}"
            );
        }
        let err = build("", "https://user:pw@api.openai.com/v1").unwrap_err();
        assert!(!err.to_string().contains("pw"), "{err}");
        assert!(build("", "http://127.0.0.1:9/v1").is_ok());
        assert!(build("", "https://proxy.example/v1").is_ok());
        assert!(build("allow_http = true", "http://10.0.0.7:8000/v1").is_ok());
        let err = Client::builder()
            .config(toml("").parse::<Config>().unwrap())
            .base_url("nope", "https://x.example".parse().unwrap())
            .build()
            .unwrap_err();
        assert!(err.message().contains("unknown provider `nope`"), "{err}");
    }

    #[test]
    fn client_is_cheap_to_clone_and_thread_safe() {
        fn assert_send_sync<T: Send + Sync + Clone>() {}
        assert_send_sync::<Client>();
        assert_eq!(
            std::mem::size_of::<Client>(),
            2 * std::mem::size_of::<usize>() + std::mem::size_of::<usize>()
        );
    }
}
