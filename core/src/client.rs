//! [`Client`] and [`ClientBuilder`].

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use url::Url;

use crate::budget::Budget;
use crate::cache::Cache;
use crate::clock::{Clock, TokioClock};
use crate::config::{
    CacheSettings, Config, Limits, Policy, ProviderSettings, check_shared_settings,
};
use crate::error::{Error, Result};
use crate::http::{ClientChoice, Transport};
use crate::id::{Capability, Credential, PerCapability, ProviderId};
use crate::observe::Observer;
use crate::provider::Provider;
use crate::ratelimit::{LimitKey, LimitSnapshot, LimiterStore, REDIS_URL_VAR, SharedSettings};
use crate::rng::{Rng, SeededRng};
use crate::router::{self, BudgetParts, ChatStream, NO_OPTIONS, Parts, RequestOptions, Router};
use crate::stats::Stats;
use crate::types::{
    ChatRequest, ChatResponse, EmbeddingRequest, EmbeddingResponse, Transcript,
    TranscriptionRequest,
};

/// Sends chat, speech-to-text and embedding requests through the configured providers, pacing
/// each to its stated limits and failing over between them.
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
    about: Arc<About>,
}

/// What a client was built with, beyond its router.
struct About {
    environment: String,
    shared: Option<SharedSettings>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("environment", &self.about.environment)
            .field("providers", &self.router.providers().collect::<Vec<_>>())
            .field("shared", &self.about.shared)
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
        &self.about.environment
    }

    /// Where limits are shared with other processes: the Redis settings the limiter store was
    /// built from ([`ClientBuilder::shared`], the `LLM_FAILOVER_REDIS_URL` variable or
    /// `[shared]` in the configuration). `None` when they live in this process's memory, or in
    /// a store given with [`ClientBuilder::limiter_store`].
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
    ///     .provider(Arc::new(local), ProviderSettings::new())
    ///     .env_lookup(|_| None) // as if LLM_FAILOVER_REDIS_URL were unset
    ///     .build()?;
    /// assert!(client.shared().is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn shared(&self) -> Option<&SharedSettings> {
        self.about.shared.as_ref()
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

    /// The embedding vectors of a request's inputs through the embedding failover order: one
    /// request (one provider call) for all its inputs, one vector per input in their order.
    /// Admission books the inputs' tokens (no output tokens) in the provider's token bucket,
    /// reconciled with the usage the answer reports; a provider that cannot take the request
    /// (no embeddings, more inputs than its API takes in one call) is passed over.
    ///
    /// # Errors
    ///
    /// As [`chat`](Self::chat); `InvalidRequest` for a request without inputs or with an
    /// empty one; `Decode` (naming the provider) for an answer without one vector per input.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use llm_failover::{Client, EmbeddingRequest, InputType};
    ///
    /// # async fn run() -> llm_failover::Result<()> {
    /// let client = Client::builder().config_path("providers.toml").build()?;
    /// let req = EmbeddingRequest::many(["the weather in Paris", "a recipe for pancakes"])
    ///     .input_type(InputType::Document);
    /// let answer = client.embed(&req).await?;
    /// assert_eq!(answer.vectors.len(), 2);
    /// println!("{} answered with {:?} dimensions", answer.provider, answer.dimensions());
    /// # Ok(()) }
    /// ```
    pub fn embed(
        &self,
        req: &EmbeddingRequest,
    ) -> impl Future<Output = Result<EmbeddingResponse>> + Send + '_ {
        self.router.run(router::Embed(req.clone()), &NO_OPTIONS)
    }

    /// [`embed`](Self::embed) with per-request options.
    ///
    /// # Errors
    ///
    /// As [`embed`](Self::embed).
    pub fn embed_with<'a>(
        &'a self,
        req: &EmbeddingRequest,
        opts: &'a RequestOptions,
    ) -> impl Future<Output = Result<EmbeddingResponse>> + Send + 'a {
        self.router.run(router::Embed(req.clone()), opts)
    }

    /// The router every request of this client takes.
    pub(crate) fn router(&self) -> &Arc<Router> {
        &self.router
    }

    /// The response cache, when the client has one ([`ClientBuilder::cache`]).
    pub fn cache(&self) -> Option<&Cache> {
        self.router.cache()
    }

    /// The clock the client times its waits by (the queue wing's workers use it too).
    pub(crate) fn clock(&self) -> &Arc<dyn Clock> {
        self.router.clock()
    }

    /// Tells this client's observers (its [`Stats`] first, then those added with
    /// [`ClientBuilder::observer`]) an event that happened outside its request path: a queue
    /// wing's worker tells [`Event::JobSettled`](crate::observe::Event::JobSettled) this way.
    /// Observing changes nothing the client decides.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::observe::{Event, JobSettled, Settled};
    /// # let local = llm_failover::provider::openai::OpenAi::new(
    /// #     llm_failover::ProviderId::new("local"),
    /// #     "http://127.0.0.1:9/v1".parse()?,
    /// # ).with_chat_model("llama3.2");
    /// # let client = llm_failover::Client::builder()
    /// #     .provider(std::sync::Arc::new(local), llm_failover::ProviderSettings::new())
    /// #     .build()?;
    /// client.observe(&Event::JobSettled(JobSettled::new("chat", Settled::Completed)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn observe(&self, event: &crate::observe::Event<'_>) {
        self.router.tell(event);
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

    /// The embedding providers, in failover order.
    pub fn embedding_providers(&self) -> Vec<ProviderId> {
        self.router.order(Capability::Embedding).cloned().collect()
    }

    /// Checks, now, that the stores this client shares with other processes serve it: the
    /// shared limiter store (Redis) and a Redis response cache connect and answer. A batch
    /// calls this before it claims or sends anything ([`Runner::run`](crate::batch::Runner::run)
    /// does), so that a store refusing the credentials stops the run with every item as it
    /// was, instead of failing each item.
    ///
    /// # Errors
    ///
    /// `Config` when a store refuses this client (a wrong password, a user without the
    /// permissions). A store that cannot be reached now is not an error: while it is away,
    /// its down mode governs admission ([`WhenDown`](crate::ratelimit::WhenDown)) and the cache
    /// misses.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use llm_failover::provider::openai::OpenAi;
    /// use llm_failover::{Client, ProviderId, ProviderSettings};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> llm_failover::Result<()> {
    /// let local = OpenAi::new(ProviderId::new("local"), "http://127.0.0.1:11434/v1".parse().unwrap());
    /// let client = Client::builder().provider(Arc::new(local), ProviderSettings::new()).build()?;
    /// client.check_stores().await?; // in memory: nothing to ask
    /// # Ok(()) }
    /// ```
    pub async fn check_stores(&self) -> Result<()> {
        self.router.check_stores().await
    }

    /// Sends what the stores hold back now. A limiter store shared with other processes
    /// tells each answer's report with its next call on the same limits (one call per
    /// attempt), or within a few milliseconds; call this before the process exits, so the
    /// others hear the last answers too. The batch runners do. Nothing to send in memory.
    ///
    /// # Errors
    ///
    /// When the store fails (a Redis that refuses this client; one that cannot be reached
    /// is the store's down mode, not an error).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use llm_failover::provider::openai::OpenAi;
    /// use llm_failover::{Client, ProviderId, ProviderSettings};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> llm_failover::Result<()> {
    /// let local = OpenAi::new(ProviderId::new("local"), "http://127.0.0.1:11434/v1".parse().unwrap());
    /// let client = Client::builder().provider(Arc::new(local), ProviderSettings::new()).build()?;
    /// // ... requests ...
    /// client.flush().await?; // before exiting
    /// # Ok(()) }
    /// ```
    pub async fn flush(&self) -> Result<()> {
        self.router.flush().await
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
    shared: Option<SharedSettings>,
    cache: Option<Cache>,
    transport: Option<Arc<dyn Transport>>,
    http: ClientChoice,
    providers: Vec<(Arc<dyn Provider>, ProviderSettings)>,
    chat_order: Option<Vec<String>>,
    transcription_order: Option<Vec<String>>,
    embedding_order: Option<Vec<String>>,
    credentials: HashMap<String, Credential>,
    base_urls: HashMap<String, Url>,
    env_lookup: Option<EnvLookup>,
    observers: Vec<Arc<dyn Observer>>,
    budget: Option<Budget>,
    tenant_budgets: Vec<(String, Budget)>,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("environment", &self.environment)
            .field("providers", &self.providers.len())
            .field("credentials", &self.credentials.keys().collect::<Vec<_>>())
            .field("shared", &self.shared)
            .field("observers", &self.observers.len())
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

    /// Adds an observer: it is told what every request does ([`observe`](crate::observe)),
    /// after the client's [`Stats`](crate::Stats) and the observers added before it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use llm_failover::observe::{Event, Observer};
    ///
    /// /// Logs every failover.
    /// #[derive(Debug)]
    /// struct Failovers;
    ///
    /// impl Observer for Failovers {
    ///     fn observe(&self, event: &Event<'_>) {
    ///         if let Event::FailedOver(f) = event {
    ///             eprintln!("{} -> {}", f.from, f.to.provider());
    ///         }
    ///     }
    /// }
    /// # let local = llm_failover::provider::openai::OpenAi::new(
    /// #     llm_failover::ProviderId::new("local"),
    /// #     "http://127.0.0.1:9/v1".parse()?,
    /// # ).with_chat_model("llama3.2");
    /// let client = llm_failover::Client::builder()
    ///     .provider(Arc::new(local), llm_failover::ProviderSettings::new())
    ///     .observer(Arc::new(Failovers))
    ///     .build()?;
    /// # let _ = client;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observers.push(observer);
        self
    }

    /// Sets what the environment may spend a calendar day or month, at the providers'
    /// prices (over the configuration's `budget`): a request whose estimated cost it cannot
    /// cover is not sent and ends at once with [`ErrorKind::BudgetExhausted`](crate::ErrorKind)
    /// until the window's reset. Reserved before sending, settled with the answer's cost, in
    /// the limiter store: with shared limits, every process spends from one budget.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use llm_failover::budget::Budget;
    /// use llm_failover::price::Price;
    /// use llm_failover::{Client, ProviderSettings};
    /// # let openai = llm_failover::provider::openai::OpenAi::new(
    /// #     llm_failover::ProviderId::new("openai"),
    /// #     "http://127.0.0.1:9/v1".parse()?,
    /// # ).with_chat_model("gpt-4o-mini");
    ///
    /// let client = Client::builder()
    ///     .provider(
    ///         Arc::new(openai),
    ///         ProviderSettings::new().price("gpt-4o-mini", Price::per_million_tokens(0.15, 0.60)),
    ///     )
    ///     .budget(Budget::usd_per_day(20.0).and_usd_per_month(300.0))
    ///     .tenant_budget("acme", Budget::usd_per_month(1.0))
    ///     .build()?;
    /// # let _ = client;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn budget(mut self, budget: Budget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Sets what `tenant` may spend (over the configuration's budget for it): the tenant of
    /// a request is its [`Tenant`](crate::admission::Tenant), else its
    /// [account](crate::RequestOptions::account). Spent, its requests end at once with
    /// `BudgetExhausted` until the window's reset; the other tenants go on.
    pub fn tenant_budget(mut self, tenant: impl Into<String>, budget: Budget) -> Self {
        self.tenant_budgets.push((tenant.into(), budget));
        self
    }

    /// Replaces the in-memory limiter store. Not together with shared limits
    /// ([`shared`](Self::shared), `LLM_FAILOVER_REDIS_URL`, `[shared]`): [`build`](Self::build)
    /// says which to drop.
    pub fn limiter_store(mut self, store: Arc<dyn LimiterStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Shares limits with every other process on the same quota through Redis, so that N
    /// workers on one key together keep to its limits instead of overshooting them N times.
    ///
    /// This wins over the `LLM_FAILOVER_REDIS_URL` variable, which wins over `[shared]` in the
    /// configuration (the variable's URL then replaces the table's `redis_url` only). Any of
    /// the three needs the Redis wing (the `redis` feature of llm-failover): without it,
    /// [`build`](Self::build) is a `Config` error, never a silent fall back to this process's
    /// memory. The store connects on first use; what admission does while Redis is away is
    /// [`SharedSettings::when_down`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use llm_failover::provider::openai::OpenAi;
    /// use llm_failover::ratelimit::{Limits, SharedSettings, WhenDown};
    /// use llm_failover::{Client, ProviderId, ProviderSettings};
    ///
    /// let local = OpenAi::new(ProviderId::new("local"), "http://127.0.0.1:11434/v1".parse()?);
    /// // Four workers of one batch: while Redis is down, each keeps to a quarter of 600 rpm.
    /// let shared = SharedSettings::new("redis://127.0.0.1:6379")
    ///     .prefix("nightly-batch")
    ///     .timeout(Duration::from_millis(100))
    ///     .when_down(WhenDown::LocalShare { processes: NonZeroU32::new(4).unwrap() });
    /// let client = Client::builder()
    ///     .provider(Arc::new(local), ProviderSettings::new().limits(Limits::none().with_rpm(600)))
    ///     .shared(shared)
    ///     .build()?;
    /// assert_eq!(client.shared().map(|s| s.host()), Some("127.0.0.1:6379".to_owned()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn shared(mut self, settings: SharedSettings) -> Self {
        self.shared = Some(settings);
        self
    }

    /// Answers repeated requests from `cache` ([`cache`](crate::cache): what is kept, under
    /// which key, for how long). Without one, every request is sent. This wins over `[cache]`
    /// in the configuration.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use llm_failover::cache::Cache;
    /// use llm_failover::provider::openai::OpenAi;
    /// use llm_failover::{Client, ProviderId, ProviderSettings};
    ///
    /// let local = OpenAi::new(ProviderId::new("local"), "http://127.0.0.1:11434/v1".parse()?);
    /// let client = Client::builder()
    ///     .provider(Arc::new(local), ProviderSettings::new())
    ///     .cache(Cache::memory())
    ///     .build()?;
    /// assert!(client.cache().is_some());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cache(mut self, cache: Cache) -> Self {
        self.cache = Some(cache);
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

    /// The embedding failover order, replacing the environment's.
    pub fn embedding_order<S: Into<String>>(mut self, order: impl IntoIterator<Item = S>) -> Self {
        self.embedding_order = Some(order.into_iter().map(Into::into).collect());
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
    /// key); when shared limits are asked for ([`shared`](Self::shared),
    /// `LLM_FAILOVER_REDIS_URL`, `[shared]`) with a URL that is not a Redis URL (the message
    /// names the host at most, never the password), together with a
    /// [`limiter_store`](Self::limiter_store), or in a build without the Redis wing (`redis` feature).
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
            shared: file_shared,
            cache: file_cache,
            budget: file_budget,
            tenant_budgets: mut tenants,
        } = resolved;
        for (name, b) in std::mem::take(&mut self.tenant_budgets) {
            tenants.retain(|(t, _)| *t != name);
            tenants.push((name, b));
        }
        let budgets = BudgetParts {
            environment: environment.clone(),
            budget: self.budget.take().or(file_budget),
            tenants,
        };
        let policy = self.policy.take().or(policy).unwrap_or_default();
        let shared = self.shared_settings(file_shared)?;
        let store = match choose_store(
            self.store.is_some(),
            shared.as_ref(),
            crate::ratelimit::redis_limiters().is_some(),
        )? {
            StoreChoice::InMemory => None,
            StoreChoice::Given => self.store.take(),
            StoreChoice::Redis => shared
                .as_ref()
                .map(|(settings, origin)| redis_store(settings, *origin, &policy))
                .transpose()?,
        };
        providers.splice(0..0, std::mem::take(&mut self.providers));
        // A credential of the wrong shape (a key file that is no service-account key) fails
        // here, not at the first request.
        for (adapter, settings) in &providers {
            adapter.check_credential(settings.credential.as_ref())?;
        }
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
        if let Some(order) = self.embedding_order.take() {
            orders.set(
                Capability::Embedding,
                order.iter().map(ProviderId::new).collect(),
            );
        }
        let router = Router::new(Parts {
            providers,
            orders,
            policy,
            clock: self.clock.take().unwrap_or_else(|| Arc::new(TokioClock)),
            rng: self
                .rng
                .take()
                .unwrap_or_else(|| Arc::new(SeededRng::from_entropy())),
            store,
            transport: self.transport.take(),
            http: std::mem::take(&mut self.http),
            cache: self.cache.take().or(file_cache),
            observers: std::mem::take(&mut self.observers),
            budgets,
        })?;
        Ok(Client {
            router: Arc::new(router),
            about: Arc::new(About {
                environment,
                shared: shared.map(|(settings, _)| settings),
            }),
        })
    }

    /// The shared settings in force, and where they come from: the builder's, else
    /// `LLM_FAILOVER_REDIS_URL` (over the file's `[shared]`, whose other values it keeps),
    /// else the file's. A blank variable counts as unset.
    fn shared_settings(
        &self,
        file: Option<SharedSettings>,
    ) -> Result<Option<(SharedSettings, SharedOrigin)>> {
        if let Some(settings) = &self.shared {
            check_shared_settings(settings).map_err(|(field, message)| {
                Error::config(format!("ClientBuilder::shared: {field} {message}"))
            })?;
            return Ok(Some((settings.clone(), SharedOrigin::Code)));
        }
        let url = match &self.env_lookup {
            Some(lookup) => lookup(REDIS_URL_VAR),
            // Not `lookup()`: a value that is not UTF-8 must not read as unset.
            None => match std::env::var(REDIS_URL_VAR) {
                Ok(url) => Some(url),
                Err(std::env::VarError::NotPresent) => None,
                Err(std::env::VarError::NotUnicode(_)) => {
                    return Err(Error::config(format!(
                        "environment variable {REDIS_URL_VAR} is not valid UTF-8; write it \
                         like redis://127.0.0.1:6379, or unset it to keep limits in this process"
                    )));
                }
            },
        };
        if let Some(url) = url.filter(|u| !u.trim().is_empty()) {
            let url = url.trim();
            crate::config::check_redis_url(url).map_err(|message| {
                Error::config(format!("environment variable {REDIS_URL_VAR} {message}"))
            })?;
            let settings = match file {
                Some(file) => file.with_url(url),
                None => SharedSettings::new(url),
            };
            return Ok(Some((settings, SharedOrigin::Env)));
        }
        Ok(file.map(|settings| (settings, SharedOrigin::File)))
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
                prices: pc.prices.clone().into_iter().collect(),
                budget: pc.budget.clone(),
            };
            providers.push((crate::provider::from_config(pc)?, settings));
        }
        Ok(Resolved {
            orders: PerCapability::from_fn(|c| env.providers(c).to_vec()),
            budget: env.budget.clone(),
            tenant_budgets: env.tenant_budgets.clone(),
            environment: env.name,
            providers,
            policy: Some(config.policy),
            shared: config.shared,
            // Built only when no cache was given in code (which wins over the file's).
            cache: match &self.cache {
                Some(_) => None,
                None => config
                    .cache
                    .as_ref()
                    .map(CacheSettings::build)
                    .transpose()?,
            },
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
            shared: None,
            cache: None,
            budget: None,
            tenant_budgets: Vec::new(),
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
    /// The configuration's `[shared]`.
    shared: Option<SharedSettings>,
    /// The configuration's `[cache]` (one given in code wins over it).
    cache: Option<Cache>,
    /// The environment's budget and its tenants'.
    budget: Option<Budget>,
    tenant_budgets: Vec<(String, Budget)>,
}

/// Where the shared settings in force come from, for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SharedOrigin {
    /// [`ClientBuilder::shared`].
    Code,
    /// `LLM_FAILOVER_REDIS_URL`.
    Env,
    /// `[shared]` in the configuration.
    File,
}

impl SharedOrigin {
    /// Where, and how to drop it.
    fn describe(self) -> String {
        match self {
            SharedOrigin::Code => "ClientBuilder::shared (drop that call)".to_owned(),
            SharedOrigin::Env => format!("the {REDIS_URL_VAR} environment variable (unset it)"),
            SharedOrigin::File => {
                "the configuration's [shared] table (remove it from providers.toml)".to_owned()
            }
        }
    }
}

/// Which limiter store the client gets.
#[derive(Debug, PartialEq, Eq)]
enum StoreChoice {
    /// The router's own in-memory store.
    InMemory,
    /// The one given with [`ClientBuilder::limiter_store`].
    Given,
    /// Redis, with the shared settings.
    Redis,
}

/// Decides the store before anything is built: a store given in code, shared settings, or
/// neither (`redis_built`: whether this build links the Redis wing).
///
/// # Errors
///
/// `Config` for a given store together with shared settings (the message says which to
/// drop), and for shared settings in a build without Redis support (never a silent fall back
/// to memory).
fn choose_store(
    given: bool,
    shared: Option<&(SharedSettings, SharedOrigin)>,
    redis_built: bool,
) -> Result<StoreChoice> {
    match (given, shared) {
        (false, None) => Ok(StoreChoice::InMemory),
        (true, None) => Ok(StoreChoice::Given),
        (true, Some((settings, origin))) => Err(Error::config(format!(
            "a limiter store is given in code (ClientBuilder::limiter_store) and limits are \
             shared through Redis at {} by {}: use one of the two — drop the limiter_store \
             call, or the shared settings",
            settings.host(),
            origin.describe()
        ))),
        (false, Some((settings, origin))) if !redis_built => {
            Err(no_redis_feature(settings, *origin))
        }
        (false, Some(_)) => Ok(StoreChoice::Redis),
    }
}

/// Shared limits asked for in a build without the Redis wing.
fn no_redis_feature(settings: &SharedSettings, origin: SharedOrigin) -> Error {
    Error::config(format!(
        "limits are to be shared through Redis at {} (asked for by {}), but this build of \
         llm-failover has no Redis support: enable the crate's `redis` feature (llm-failover = \
         {{ version = \"…\", features = [\"redis\"] }}), or drop the shared settings to keep \
         limits in this process",
        settings.host(),
        origin.describe()
    ))
}

/// The Redis limiter store for `settings`, keeping the policy's latency allowance as the
/// in-memory store does: the Redis wing's, when the build links it.
fn redis_store(
    settings: &SharedSettings,
    origin: SharedOrigin,
    policy: &Policy,
) -> Result<Arc<dyn LimiterStore>> {
    match crate::ratelimit::redis_limiters() {
        Some(wing) => wing.limiter_store(settings, policy.latency_allowance),
        None => Err(no_redis_feature(settings, origin)),
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
    fn the_store_is_chosen_before_anything_is_built() {
        let url = "redis://:pw-SENTINEL@10.1.2.3:6380";
        for redis_built in [true, false] {
            assert_eq!(
                choose_store(false, None, redis_built).unwrap(),
                StoreChoice::InMemory
            );
            assert_eq!(
                choose_store(true, None, redis_built).unwrap(),
                StoreChoice::Given
            );
        }
        for origin in [SharedOrigin::Code, SharedOrigin::Env, SharedOrigin::File] {
            let shared = (SharedSettings::new(url), origin);
            assert_eq!(
                choose_store(false, Some(&shared), true).unwrap(),
                StoreChoice::Redis
            );
            let where_from = match origin {
                SharedOrigin::Code => "ClientBuilder::shared",
                SharedOrigin::Env => REDIS_URL_VAR,
                SharedOrigin::File => "[shared]",
            };
            for redis_built in [true, false] {
                let both = choose_store(true, Some(&shared), redis_built).unwrap_err();
                let message = both.to_string();
                assert!(both.is_config(), "{message}");
                for part in [
                    "limiter_store",
                    where_from,
                    "10.1.2.3:6380",
                    "use one of the two",
                ] {
                    assert!(message.contains(part), "{part}: {message}");
                }
                assert!(
                    !format!("{both:?}{message}").contains("SENTINEL"),
                    "{message}"
                );
            }
            let absent = choose_store(false, Some(&shared), false).unwrap_err();
            let message = absent.to_string();
            assert!(absent.is_config(), "{message}");
            for part in ["`redis` feature", where_from, "10.1.2.3:6380"] {
                assert!(message.contains(part), "{part}: {message}");
            }
            assert!(
                !format!("{absent:?}{message}").contains("SENTINEL"),
                "{message}"
            );
        }
    }

    #[test]
    fn client_is_cheap_to_clone_and_thread_safe() {
        fn assert_send_sync<T: Send + Sync + Clone>() {}
        assert_send_sync::<Client>();
        assert_eq!(
            std::mem::size_of::<Client>(),
            2 * std::mem::size_of::<usize>()
        );
    }
}
