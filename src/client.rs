//! [`Client`] and [`ClientBuilder`].

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use url::Url;

use crate::clock::{Clock, TokioClock};
use crate::config::{Config, Limits, Policy};
use crate::error::{Error, Result};
use crate::http::{Transport, TransportOptions};
use crate::id::{Capability, Credential, ProviderId};
use crate::provider::Provider;
use crate::ratelimit::{Cost, LimitKey, LimitSnapshot, Limiter, LimiterStore, MemoryStore};
use crate::retry::{Backoff, RetryBudget, SharedBudget};
use crate::rng::{Rng, SeededRng};
use crate::router::engine::{Done, Entry, Router, Settings, Work};
use crate::router::options::NO_OPTIONS;
use crate::router::{Breaker, BreakerSettings, ChatStream, RequestOptions, SharedBreaker};
use crate::stats::{Counters, Stats};
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
            .field(
                "providers",
                &self
                    .router
                    .entries
                    .iter()
                    .map(|e| e.adapter.id())
                    .collect::<Vec<_>>(),
            )
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
    ///
    /// (Not an `async fn`: it returns [`chat_with`](Self::chat_with)'s future itself
    /// rather than one more layer around it.)
    pub fn chat(&self, req: ChatRequest) -> impl Future<Output = Result<ChatResponse>> + Send + '_ {
        self.chat_with(req, &NO_OPTIONS)
    }

    /// [`chat`](Self::chat) with per-request options.
    ///
    /// # Errors
    ///
    /// As [`chat`](Self::chat).
    ///
    /// (Not an `async fn`: the returned future is the request's attempt loop itself, which
    /// owns `req`, rather than one more layer around it.)
    pub fn chat_with<'a>(
        &'a self,
        req: ChatRequest,
        opts: &'a RequestOptions,
    ) -> impl Future<Output = Result<ChatResponse>> + Send + 'a {
        self.router.execute(Work::Chat(req), opts, Done::into_chat)
    }

    /// A streamed chat completion. Fails over until the first content arrives.
    ///
    /// # Errors
    ///
    /// As [`chat`](Self::chat) for failures before the first content; later errors come out
    /// of the stream.
    ///
    /// (Not an `async fn`: it returns [`chat_stream_with`](Self::chat_stream_with)'s future itself
    /// rather than one more layer around it.)
    pub fn chat_stream(
        &self,
        req: ChatRequest,
    ) -> impl Future<Output = Result<ChatStream>> + Send + '_ {
        self.chat_stream_with(req, &NO_OPTIONS)
    }

    /// [`chat_stream`](Self::chat_stream) with per-request options.
    ///
    /// # Errors
    ///
    /// As [`chat_stream`](Self::chat_stream).
    ///
    /// (Not an `async fn`, as [`chat_with`](Self::chat_with).)
    pub fn chat_stream_with<'a>(
        &'a self,
        req: ChatRequest,
        opts: &'a RequestOptions,
    ) -> impl Future<Output = Result<ChatStream>> + Send + 'a {
        self.router
            .execute(Work::Stream(req), opts, Done::into_stream)
    }

    /// A transcription through the speech-to-text failover order.
    ///
    /// # Errors
    ///
    /// As [`chat`](Self::chat).
    ///
    /// (Not an `async fn`: it returns [`transcribe_with`](Self::transcribe_with)'s future itself
    /// rather than one more layer around it.)
    pub fn transcribe(
        &self,
        req: TranscriptionRequest,
    ) -> impl Future<Output = Result<Transcript>> + Send + '_ {
        self.transcribe_with(req, &NO_OPTIONS)
    }

    /// [`transcribe`](Self::transcribe) with per-request options.
    ///
    /// # Errors
    ///
    /// As [`chat`](Self::chat).
    ///
    /// (Not an `async fn`, as [`chat_with`](Self::chat_with).)
    pub fn transcribe_with<'a>(
        &'a self,
        req: TranscriptionRequest,
        opts: &'a RequestOptions,
    ) -> impl Future<Output = Result<Transcript>> + Send + 'a {
        self.router
            .execute(Work::Transcribe(req), opts, Done::into_transcript)
    }

    /// Per-provider counters since the client was built.
    pub fn stats(&self) -> Stats {
        self.router.stats()
    }

    /// The chat providers, in failover order.
    pub fn chat_providers(&self) -> Vec<ProviderId> {
        self.router
            .chat
            .iter()
            .map(|&i| self.router.entries[i].adapter.id().clone())
            .collect()
    }

    /// The speech-to-text providers, in failover order.
    pub fn transcription_providers(&self) -> Vec<ProviderId> {
        self.router
            .transcription
            .iter()
            .map(|&i| self.router.entries[i].adapter.id().clone())
            .collect()
    }

    /// What the limiter knows now about `provider`'s limits for `model` (configured or
    /// learned from headers): bucket levels and capacities, and any gate.
    ///
    /// # Errors
    ///
    /// When the limiter store fails (never for the in-memory store).
    pub async fn limits(&self, provider: &str, model: &str) -> Result<LimitSnapshot> {
        let key = LimitKey::new(ProviderId::new(provider), model);
        let now = self.router.clock.now();
        self.router
            .limiter
            .store()
            .peek(&key, Cost::default(), now)
            .await
    }

    /// The limits configured for `provider` (not what was learned from headers).
    pub fn configured_limits(&self, provider: &str) -> Option<Limits> {
        self.router
            .entries
            .iter()
            .find(|e| e.adapter.id().as_str() == provider)
            .map(|e| e.limits)
    }
}

/// Settings of one provider added in code with [`ClientBuilder::provider`].
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ProviderSettings {
    /// Stated limits (unknown ones are learned from headers).
    pub limits: Limits,
    /// Limits of specific models.
    pub model_limits: HashMap<String, Limits>,
    /// Per-attempt timeout, overriding the policy's.
    pub timeout: Option<Duration>,
    /// The key to send (none for local hosts).
    pub credential: Option<Credential>,
}

impl ProviderSettings {
    /// No limits, no key.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the limits.
    #[must_use]
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets the key.
    #[must_use]
    pub fn credential(mut self, credential: Credential) -> Self {
        self.credential = Some(credential);
        self
    }

    /// Sets the per-attempt timeout.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Builds a [`Client`] from `providers.toml` or from providers added in code.
///
/// Errors are deferred to [`build`](Self::build).
#[must_use]
#[derive(Default)]
pub struct ClientBuilder {
    config: Option<Result<Config>>,
    environment: Option<String>,
    policy: Option<Policy>,
    clock: Option<Arc<dyn Clock>>,
    rng: Option<Arc<dyn Rng>>,
    store: Option<Arc<dyn LimiterStore>>,
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

    /// Injects the clock (tests: [`ManualClock`](crate::clock) behind `test-util`).
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
    pub fn build(self) -> Result<Client> {
        let lookup: EnvLookup = self
            .env_lookup
            .clone()
            .unwrap_or_else(|| Arc::new(|name: &str| std::env::var(name).ok()));
        let mut providers = self.providers;
        let mut chat: Vec<String> = Vec::new();
        let mut transcription: Vec<String> = Vec::new();
        let mut policy = None;
        let mut environment = self
            .environment
            .clone()
            .unwrap_or_else(|| "code".to_owned());

        if let Some(config) = self.config {
            let mut config = config?;
            for (name, url) in &self.base_urls {
                config.set_base_url(name, url)?;
            }
            let env = config
                .select_environment_with(self.environment.as_deref(), &*lookup)?
                .clone();
            environment = env.name.clone();
            chat = env.chat.iter().map(|p| p.to_string()).collect();
            transcription = env.transcription.iter().map(|p| p.to_string()).collect();
            // In failover order, so the first problem reported is the first provider's.
            let mut used: Vec<&ProviderId> = Vec::new();
            for id in env.chat.iter().chain(&env.transcription) {
                if !used.contains(&id) {
                    used.push(id);
                }
            }
            for id in used {
                let name = id.as_str();
                let pc = config.provider(name)?;
                let credential = match self.credentials.get(name) {
                    Some(c) => Some(c.clone()),
                    None => config.credential(name, &env.name, &*lookup)?,
                };
                let adapter = crate::provider::from_config(pc)?;
                let settings = ProviderSettings {
                    limits: pc.limits,
                    model_limits: pc.model_limits.clone().into_iter().collect(),
                    timeout: pc.timeout,
                    credential,
                };
                providers.push((adapter, settings));
            }
            policy = Some(config.policy.clone());
        } else {
            for (adapter, settings) in &mut providers {
                if let Some(c) = self.credentials.get(adapter.id().as_str()) {
                    settings.credential = Some(c.clone());
                }
                let caps = adapter.capabilities();
                if caps.chat {
                    chat.push(adapter.id().to_string());
                }
                if caps.transcription {
                    transcription.push(adapter.id().to_string());
                }
            }
        }
        if let Some(order) = self.chat_order {
            chat = order;
        }
        if let Some(order) = self.transcription_order {
            transcription = order;
        }
        let policy = self.policy.or(policy).unwrap_or_default();

        let mut seen = std::collections::HashSet::new();
        for (a, _) in &providers {
            if !seen.insert(a.id().clone()) {
                return Err(Error::config(format!("provider `{}` added twice", a.id())));
            }
        }
        let index = |names: &[String], cap: crate::id::Capability| -> Result<Vec<usize>> {
            names
                .iter()
                .map(|n| {
                    let i = providers
                        .iter()
                        .position(|(a, _)| a.id().as_str() == n)
                        .ok_or_else(|| {
                            Error::config(format!("unknown provider `{n}` in the {cap} order"))
                        })?;
                    if !providers[i].0.capabilities().supports(cap) {
                        return Err(Error::config(format!("provider `{n}` cannot serve {cap}")));
                    }
                    Ok(i)
                })
                .collect()
        };
        let chat = index(&chat, crate::id::Capability::Chat)?;
        let transcription = index(&transcription, crate::id::Capability::Transcription)?;

        let backoff = Backoff::try_new(policy.backoff_base, policy.backoff_cap)
            .map_err(|e| Error::config(format!("policy: {e}")))?;
        let transport = Transport::new(&TransportOptions {
            connect_timeout: policy.connect_timeout,
            // The request timeout bounds every send as a whole (a stream's body included):
            // a silence limit of the same length could never fire first.
            read_timeout: None,
            // Set once on the HTTP client: most attempts use exactly this timeout.
            usual_timeout: Some(policy.request_timeout),
            max_response_bytes: policy.max_response_bytes,
        })?;
        let clock = self.clock.unwrap_or_else(|| Arc::new(TokioClock));
        let rng = self
            .rng
            .unwrap_or_else(|| Arc::new(SeededRng::from_entropy()));
        // A store given by the caller may be shared with other processes: always consulted.
        let local_store = self.store.is_none();
        let store = self.store.unwrap_or_else(|| {
            Arc::new(MemoryStore::with_latency_allowance(
                policy.latency_allowance,
            ))
        });
        let settings = Settings {
            breaker: BreakerSettings {
                failure_threshold: policy.failure_threshold,
                cooldown: policy.breaker_cooldown,
                cooldown_max: policy.breaker_cooldown_max,
            },
            backoff,
            spill_after: policy.spill_after,
            policy: policy.clone(),
        };
        for (adapter, s) in &providers {
            // A configured token limit means counts will be needed: load the encoder now, off
            // the request path.
            if s.limits.limits_tokens() {
                if let Some(m) = adapter.default_model(Capability::Chat) {
                    crate::ratelimit::preload(m);
                }
            }
            for (m, l) in &s.model_limits {
                if l.limits_tokens() {
                    crate::ratelimit::preload(m);
                }
            }
        }
        let entries = providers
            .into_iter()
            .map(|(adapter, s)| Entry {
                default_keys: Entry::default_keys_of(adapter.as_ref()),
                adapter,
                limits: s.limits,
                model_limits: s.model_limits,
                timeout: s.timeout,
                credential: s.credential,
                counters: Counters::default(),
                token_limits_seen: std::sync::atomic::AtomicBool::new(false),
                breaker: SharedBreaker::new(Breaker::new(settings.breaker)),
                limiter_engaged: std::sync::atomic::AtomicBool::new(false),
            })
            .collect();
        let budget = SharedBudget::new(RetryBudget::new(policy.retry_budget, 10), clock.now());
        let router = Router {
            entries,
            chat,
            transcription,
            limiter: Limiter::new(store, clock.clone()),
            local_store,
            transport,
            clock,
            rng,
            budget,
            tenant_breakers: Mutex::new(HashMap::new()),
            breaker_seq: AtomicU64::new(0),
            request_ids: AtomicU64::new(0),
            settings,
        };
        Ok(Client {
            router: Arc::new(router),
            environment: Arc::from(environment),
        })
    }
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
