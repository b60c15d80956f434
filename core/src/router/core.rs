//! The router's state — its providers as it sees them ([`Entry`]), the limiter, the breakers,
//! the transport, clock, jitter and policy — built once from resolved settings ([`Parts`]),
//! and the few operations on it that the attempt loop and a stream share.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::breaker::{BreakerEvent, BreakerSettings};
use super::breaker_store::{BreakerCell, BreakerStore, MemoryBreakers, Transition};
use super::budget::{Budgets, Charges};
use super::decide::Rules;
use crate::budget::{Budget, Ledgers, Scope};
use crate::cache::Cache;
use crate::clock::Clock;
use crate::config::{Policy, ProviderSettings};
use crate::error::{Disposition, Error, ErrorKind, Result};
use crate::http::{ClientChoice, Transport, TransportOptions};
use crate::id::{Capability, Credential, PerCapability, ProviderId};
use crate::observe::{
    BreakerOpened, ChunkReceived, Event, Observer, Observers, StreamEnded, Target,
};
use crate::provider::{Provider, check_extra_body};
use crate::ratelimit::{
    Demand, LimitKey, LimitReport, LimitSnapshot, Limiter, LimiterStore, Limits, MemoryStore,
    Tightening, preload,
};
use crate::retry::{Backoff, RetryBudget, SharedBudget};
use crate::rng::Rng;
use crate::stats::{Stats, Tallies};
use crate::types::Usage;
use crate::types::price::Price;

/// Everything the router is built from, resolved by the client's builder.
pub(crate) struct Parts {
    /// Every provider, each once.
    pub(crate) providers: Vec<(Arc<dyn Provider>, ProviderSettings)>,
    /// The failover order of each capability.
    pub(crate) orders: PerCapability<Vec<ProviderId>>,
    pub(crate) policy: Policy,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) rng: Arc<dyn Rng>,
    /// `None`: this process's memory.
    pub(crate) store: Option<Arc<dyn LimiterStore>>,
    /// `None`: reqwest, configured from the policy.
    pub(crate) transport: Option<Arc<dyn Transport>>,
    /// The caller's reqwest client and user agent, if any (ignored with `transport`).
    pub(crate) http: ClientChoice,
    /// The response cache, if any.
    pub(crate) cache: Option<Cache>,
    /// The observers the application added.
    pub(crate) observers: Vec<Arc<dyn Observer>>,
    /// The environment's budget (with the environment's name) and the tenants'.
    pub(crate) budgets: BudgetParts,
}

/// The budgets of an environment, as the builder resolved them.
#[derive(Debug, Default)]
pub(crate) struct BudgetParts {
    /// The environment's name (its ledgers and its tenants' are named in it).
    pub(crate) environment: String,
    /// The environment's budget.
    pub(crate) budget: Option<Budget>,
    /// Each tenant's, by name.
    pub(crate) tenants: Vec<(String, Budget)>,
}

/// One provider, as the router sees it.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) adapter: Arc<dyn Provider>,
    limits: Limits,
    model_limits: HashMap<String, Limits>,
    timeout: Option<Duration>,
    pub(crate) credential: Option<Credential>,
    /// Fields merged into each chat request's body (checked at build: no reserved field).
    pub(crate) extra_body: serde_json::Map<String, serde_json::Value>,
    /// What each model costs here.
    prices: HashMap<String, Price>,
    /// What this provider may spend.
    pub(crate) budget: Option<Ledgers>,
    /// Set once a response of this provider states a token window: from then on its requests
    /// are priced in tokens even where no token limit is configured.
    token_limits_seen: AtomicBool,
    /// The breaker of the configured account.
    pub(crate) breaker: Arc<dyn BreakerCell>,
    /// The limit key of the adapter's default model and the configured account, per
    /// capability: what most requests are keyed by, lent rather than built per request.
    default_keys: PerCapability<Option<LimitKey>>,
    /// The host and port the adapter reaches (`server.address`, `server.port` of events).
    server: Option<(String, u16)>,
    /// The token room the store reported after the last booking of the default chat key
    /// (`u64::MAX`: none known), so reckoning needs no store call of its own.
    room: AtomicU64,
}

impl Entry {
    fn new(
        adapter: Arc<dyn Provider>,
        s: ProviderSettings,
        budget: Option<Ledgers>,
        breakers: &dyn BreakerStore,
    ) -> Self {
        let default_keys = PerCapability::from_fn(|c| {
            adapter
                .default_model(c)
                .map(|m| LimitKey::new(adapter.id().clone(), m))
        });
        let server = adapter
            .base_url()
            .and_then(|u| Some((u.host_str()?.to_owned(), u.port_or_known_default()?)));
        Entry {
            server,
            breaker: breakers.breaker(adapter.id(), None),
            default_keys,
            adapter,
            limits: s.limits,
            model_limits: s.model_limits,
            timeout: s.timeout,
            credential: s.credential,
            extra_body: s.extra_body,
            prices: s.prices,
            budget,
            token_limits_seen: AtomicBool::new(false),
            room: AtomicU64::new(u64::MAX),
        }
    }

    pub(crate) fn id(&self) -> &ProviderId {
        self.adapter.id()
    }

    /// The key of `capability`'s default model for the configured account.
    pub(crate) fn default_key(&self, capability: Capability) -> Option<&LimitKey> {
        self.default_keys.get(capability).as_ref()
    }

    /// What `model` costs here, if a price is configured.
    pub(crate) fn price(&self, model: &str) -> Option<&Price> {
        self.prices.get(model)
    }

    /// The configured limits of `model`.
    pub(crate) fn limits_for(&self, model: &str) -> Limits {
        if self.model_limits.is_empty() {
            return self.limits;
        }
        self.model_limits.get(model).copied().unwrap_or(self.limits)
    }

    pub(crate) fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Whether admission under `limits` counts tokens: a token limit is configured, or the
    /// provider stated one. When neither, no bucket would read a count, so none is made
    /// (tokenizing is the costliest step of admission).
    pub(crate) fn counts_tokens(&self, limits: &Limits) -> bool {
        limits.limits_tokens() || self.token_limits_seen.load(Ordering::Relaxed)
    }

    /// The token room last reported for `key`, when it is the default chat key.
    pub(crate) fn room_for(&self, key: &LimitKey) -> Option<u64> {
        let own = self.default_key(Capability::Chat).is_some_and(|k| k == key);
        let room = self.room.load(Ordering::Relaxed);
        (own && room != u64::MAX).then_some(room)
    }

    /// Keeps the room a booking of `key` left (see [`room_for`](Self::room_for)).
    pub(crate) fn note_room(&self, key: &LimitKey, room: Option<u64>) {
        if self.default_key(Capability::Chat).is_some_and(|k| k == key) {
            let room = room.unwrap_or(u64::MAX);
            if self.room.load(Ordering::Relaxed) != room {
                self.room.store(room, Ordering::Relaxed);
            }
        }
    }

    /// A response's `report` was read: from the first token window it states, this
    /// provider's requests are priced in tokens.
    pub(super) fn learned(&self, model: &str, report: &LimitReport) {
        if report.tokens.is_some()
            || report.input_tokens.is_some()
            || report.output_tokens.is_some()
        {
            self.saw_token_limits(model);
        }
    }

    /// A response stated a token window: price in tokens from now on (and load the
    /// encoder, off the request path).
    fn saw_token_limits(&self, model: &str) {
        if !self.token_limits_seen.load(Ordering::Relaxed)
            && !self.token_limits_seen.swap(true, Ordering::Relaxed)
        {
            preload(model);
        }
    }
}

/// What an attempt booked, reconciled with the usage its answer reports.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Booking {
    pub(crate) cost: Demand,
    /// See [`input_floor`](crate::ratelimit::input_floor).
    pub(crate) floor: u64,
}

impl Booking {
    /// A booking of `cost`; the floor is read (it walks the prompt) only where tokens were
    /// booked.
    pub(crate) fn new(cost: Demand, floor: impl FnOnce() -> u64) -> Self {
        let floor = if cost.tokens() > 0 { floor() } else { 0 };
        Booking { cost, floor }
    }

    /// The tokens to reconcile the booking with after `usage`: `None` where no tokens were
    /// booked (the response's own headers, if any, already set the level).
    pub(crate) fn spend(self, usage: Usage) -> Option<u64> {
        (self.cost.tokens() > 0).then(|| usage.input_tokens.max(self.floor) + usage.output_tokens)
    }
}

/// The engine behind [`Client`](crate::Client).
#[derive(Debug)]
pub(crate) struct Router {
    pub(super) entries: Vec<Entry>,
    pub(super) orders: PerCapability<Vec<usize>>,
    pub(super) limiter: Limiter,
    pub(super) breakers: Arc<dyn BreakerStore>,
    pub(super) transport: Arc<dyn Transport>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) rng: Arc<dyn Rng>,
    pub(super) policy: Policy,
    pub(super) rules: Rules,
    pub(super) budget: SharedBudget,
    /// The environment's and the tenants' budgets (a provider's is on its entry).
    pub(super) budgets: Budgets,
    pub(super) cache: Option<Cache>,
    /// The [`Stats`] observer, told first.
    tallies: Tallies,
    /// The application's observers.
    observers: Observers,
    request_ids: AtomicU64,
}

impl Router {
    /// The clock every wait of this router is timed by.
    pub(crate) fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// A router over `parts`.
    ///
    /// # Errors
    ///
    /// `Config` when there is no provider, a provider is added twice, an order names an unknown provider or one
    /// that cannot serve its capability, the backoff is invalid, or the HTTP client cannot
    /// be built.
    pub(crate) fn new(parts: Parts) -> Result<Self> {
        let Parts {
            providers,
            orders,
            policy,
            clock,
            rng,
            store,
            transport,
            http,
            cache,
            observers,
            budgets,
        } = parts;
        if providers.is_empty() {
            return Err(Error::config(
                "no provider is configured: name a providers.toml environment, or add providers \
                 with ClientBuilder::provider",
            ));
        }
        let mut seen = HashSet::new();
        if let Some((a, _)) = providers.iter().find(|(a, _)| !seen.insert(a.id().clone())) {
            return Err(Error::config(format!("provider `{}` added twice", a.id())));
        }
        let indices = resolve_orders(&providers, &orders)?;
        let backoff = Backoff::try_new(policy.backoff_base, policy.backoff_cap)
            .map_err(|e| Error::config(format!("policy: {e}")))?;
        let transport = match transport {
            Some(t) => t,
            None => Arc::new(http.transport(transport_options(&policy))?),
        };
        let store = store.unwrap_or_else(|| {
            Arc::new(MemoryStore::with_latency_allowance(
                policy.latency_allowance,
            ))
        });
        let breakers = Arc::new(MemoryBreakers::new(BreakerSettings {
            failure_threshold: policy.failure_threshold,
            cooldown: policy.breaker_cooldown,
            cooldown_max: policy.breaker_cooldown_max,
        }));
        preload_configured(&providers);
        for (adapter, s) in &providers {
            let whose = format!("provider {}'s extra_body", adapter.id());
            check_extra_body(&s.extra_body, &whose)
                .map_err(|e| Error::config(e.message().to_owned()))?;
            for (model, price) in &s.prices {
                price.check(&format!("provider `{}`'s price of `{model}`", adapter.id()))?;
            }
        }
        let mut entries = Vec::with_capacity(providers.len());
        for (adapter, s) in providers {
            let budget = match &s.budget {
                Some(b) => Some(b.resolve(
                    Scope::Provider(Arc::from(adapter.id().as_str())),
                    &format!("provider `{}`'s budget", adapter.id()),
                )?),
                None => None,
            };
            entries.push(Entry::new(adapter, s, budget, breakers.as_ref()));
        }
        let budgets = resolve_budgets(budgets)?;
        if budgets.any() || entries.iter().any(|e| e.budget.is_some()) {
            store.keeps_budgets()?;
        }
        Ok(Router {
            orders: indices,
            limiter: Limiter::new(store, clock.clone()),
            breakers,
            transport,
            budget: SharedBudget::new(RetryBudget::new(policy.retry_budget, 10), clock.now()),
            budgets,
            clock,
            rng,
            rules: Rules {
                max_attempts: policy.max_attempts,
                quota_cooldown: policy.quota_cooldown,
                backoff,
            },
            policy,
            cache,
            tallies: Tallies::new(entries.len()),
            observers: Observers::new(observers),
            entries,
            request_ids: AtomicU64::new(0),
        })
    }

    /// Per-provider counters, and the cache's.
    pub(crate) fn stats(&self) -> Stats {
        let mut stats = Stats::collect(self.tallies.snapshots(self.entries.iter().map(Entry::id)));
        stats.cache = self.cache.as_ref().map(Cache::stats);
        stats
    }

    /// Tells the observers `event`: the [`Stats`] tallies, then the application's.
    pub(crate) fn tell(&self, event: &Event<'_>) {
        self.tallies.observe(event);
        self.observers.tell(event);
    }

    /// Tells the observers that `target`'s breaker opened, if `moved` says it did (at `now`).
    pub(super) fn tell_opened(&self, target: Target<'_>, moved: Transition, now: Instant) {
        if moved.opened {
            self.tell(&Event::BreakerOpened(BreakerOpened {
                target,
                open_for: moved
                    .open_until
                    .map_or(Duration::ZERO, |u| u.saturating_duration_since(now)),
            }));
        }
    }

    /// `entry`'s target for `key`, for an event.
    pub(super) fn target<'a>(
        &'a self,
        entry: usize,
        key: &'a LimitKey,
        capability: Capability,
    ) -> Target<'a> {
        Target {
            key,
            capability,
            server: self.entries[entry]
                .server
                .as_ref()
                .map(|(host, port)| (host.as_str(), *port)),
            kind: self.entries[entry].adapter.kind(),
            slot: entry,
        }
    }

    /// The response cache, if any.
    pub(crate) fn cache(&self) -> Option<&Cache> {
        self.cache.as_ref()
    }

    /// The providers serving `capability`, in failover order.
    pub(crate) fn order(&self, capability: Capability) -> impl Iterator<Item = &ProviderId> {
        self.orders
            .get(capability)
            .iter()
            .map(|&i| self.entries[i].id())
    }

    /// The adapter of `provider`.
    pub(crate) fn adapter(&self, provider: &ProviderId) -> Option<&dyn Provider> {
        self.entries
            .iter()
            .find(|e| e.id() == provider)
            .map(|e| &*e.adapter)
    }

    /// What `model` costs at `provider`, if a price is configured.
    pub(crate) fn price(&self, provider: &ProviderId, model: &str) -> Option<Price> {
        self.entries
            .iter()
            .find(|e| e.id() == provider)
            .and_then(|e| e.price(model).copied())
    }

    /// The extra body fields configured for `provider`'s chat requests, if any.
    pub(crate) fn extra_body(
        &self,
        provider: &ProviderId,
    ) -> Option<&serde_json::Map<String, serde_json::Value>> {
        self.entries
            .iter()
            .find(|e| e.id() == provider)
            .map(|e| &e.extra_body)
            .filter(|m| !m.is_empty())
    }

    /// Every provider.
    pub(crate) fn providers(&self) -> impl Iterator<Item = &ProviderId> {
        self.entries.iter().map(Entry::id)
    }

    /// The limits configured for `provider`.
    pub(crate) fn configured_limits(&self, provider: &str) -> Option<Limits> {
        let entry = self.entries.iter().find(|e| e.id().as_str() == provider)?;
        Some(entry.limits)
    }

    /// What the limiter knows of `key` now; before anything was booked for it, what its
    /// provider's configured limits allow; `None` when nothing is known at all.
    /// Whether the stores shared with other processes serve this client: the limiter's,
    /// then the cache's.
    pub(crate) async fn check_stores(&self) -> Result<()> {
        self.limiter.check().await?;
        match &self.cache {
            Some(cache) => cache.check().await,
            None => Ok(()),
        }
    }

    pub(crate) async fn flush(&self) -> Result<()> {
        self.limiter.flush().await
    }

    pub(crate) async fn limits(&self, key: &LimitKey) -> Result<Option<LimitSnapshot>> {
        let snapshot = self.limiter.peek(key).await?;
        if !snapshot.is_empty() {
            return Ok(Some(snapshot));
        }
        Ok(self
            .configured_limits(key.provider.as_str())
            .and_then(|l| LimitSnapshot::unused(&l)))
    }

    /// The next request's number, for its span.
    pub(super) fn next_request_id(&self) -> u64 {
        self.request_ids.fetch_add(1, Ordering::Relaxed)
    }

    /// Teaches the limiter what a response stated, the answer to `booking`; from the first
    /// token window on, this provider's requests are priced in tokens.
    pub(super) async fn learn(
        &self,
        entry: &Entry,
        key: &LimitKey,
        report: &LimitReport,
        booking: Option<u64>,
        tokens_back: i64,
    ) -> Result<()> {
        entry.learned(&key.model, report);
        let learned = Tightening {
            report: Some(report.clone()),
            booking,
            tokens_back,
            ..Tightening::default()
        };
        self.limiter.raise(key, learned).await
    }

    /// Gives back what a booking reserved beyond `used` tokens, or charges the excess. A
    /// store error is logged, not returned: the answer is already in hand.
    pub(super) async fn reconcile(&self, key: &LimitKey, booked: Booking, used: u64) {
        if let Err(e) = self
            .limiter
            .reconcile(key, booked.cost.tokens(), used)
            .await
        {
            tracing::warn!(error = %e, "could not reconcile token usage");
        }
    }

    /// What a stream of `entry` calls as its chunks arrive and when it ends (reconcile its
    /// usage; a transient error mid-stream counts toward the breaker).
    pub(super) fn stream_end(
        self: &Arc<Self>,
        entry: usize,
        key: LimitKey,
        booked: Booking,
        breaker: Arc<dyn BreakerCell>,
        charges: Charges,
    ) -> StreamWatch {
        StreamWatch {
            last: self.clock.now(),
            router: self.clone(),
            entry,
            key,
            booked,
            breaker,
            charges,
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn stream_ended(
        &self,
        entry: usize,
        key: LimitKey,
        booked: Booking,
        breaker: Arc<dyn BreakerCell>,
        charges: Charges,
        usage: Option<Usage>,
        error: Option<ErrorKind>,
    ) {
        let target = self.target(entry, &key, Capability::Chat);
        let cost = self.entries[entry]
            .price(&key.model)
            .and_then(|p| usage.map(|u| p.of_usage(u)));
        self.tell(&Event::StreamEnded(StreamEnded {
            target,
            usage,
            cost,
            error,
        }));
        if error.is_some_and(|k| k.disposition() == Disposition::Transient) {
            let now = self.clock.now();
            let moved = breaker.apply(BreakerEvent::Transient, now);
            self.tell_opened(target, moved, now);
        }
        if let Some(used) = usage.and_then(|u| booked.spend(u)) {
            self.reconcile(&key, booked, used).await;
        }
        // A stream that ended without its usage keeps its estimate charged: the safe side.
        if let Some(actual) = cost {
            self.limiter.settle(&charges.settled(actual)).await;
        }
    }
}

/// Each capability's order as indices into `providers`.
fn resolve_orders(
    providers: &[(Arc<dyn Provider>, ProviderSettings)],
    orders: &PerCapability<Vec<ProviderId>>,
) -> Result<PerCapability<Vec<usize>>> {
    let mut resolved = PerCapability::from_fn(|_| Vec::new());
    for cap in Capability::ALL {
        let mut indices = Vec::new();
        for name in orders.get(cap) {
            let i = providers
                .iter()
                .position(|(a, _)| a.id() == name)
                .ok_or_else(|| {
                    Error::config(format!("unknown provider `{name}` in the {cap} order"))
                })?;
            if !providers[i].0.capabilities().supports(cap) {
                return Err(Error::config(format!(
                    "provider `{name}` cannot serve {cap}"
                )));
            }
            indices.push(i);
        }
        resolved.set(cap, indices);
    }
    Ok(resolved)
}

/// The HTTP client's settings from the policy.
fn transport_options(policy: &Policy) -> TransportOptions {
    TransportOptions {
        connect_timeout: policy.connect_timeout,
        // The request timeout bounds every send as a whole (a stream's body included): a
        // silence limit of the same length could never fire first.
        read_timeout: None,
        // Set once on the HTTP client: most attempts use exactly this timeout.
        usual_timeout: Some(policy.request_timeout),
        max_response_bytes: policy.max_response_bytes,
        user_agent: None,
    }
}

/// A configured token limit means counts will be needed: load the encoder now, off the
/// request path.
fn preload_configured(providers: &[(Arc<dyn Provider>, ProviderSettings)]) {
    for (adapter, s) in providers {
        if s.limits.limits_tokens()
            && let Some(m) = adapter.default_model(Capability::Chat)
        {
            preload(m);
        }
        for (m, l) in &s.model_limits {
            if l.limits_tokens() {
                preload(m);
            }
        }
    }
}

/// A stream's link back to the router: each chunk after the first is told with the time since
/// the one before ([`Event::ChunkReceived`]); its end reconciles the booking and tells the
/// breaker.
pub(crate) struct StreamWatch {
    router: Arc<Router>,
    entry: usize,
    key: LimitKey,
    booked: Booking,
    breaker: Arc<dyn BreakerCell>,
    /// The budgets' charges it reserved, settled at its end.
    charges: Charges,
    /// When the chunk before arrived (at first: when the stream was handed out, with its
    /// first content).
    last: Instant,
}

impl fmt::Debug for StreamWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamWatch")
            .field("entry", &self.entry)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl StreamWatch {
    /// A chunk arrived from the provider.
    pub(crate) fn chunk(&mut self) {
        let now = self.router.clock.now();
        let since_previous = now.saturating_duration_since(self.last);
        self.last = now;
        let target = self.router.target(self.entry, &self.key, Capability::Chat);
        self.router.tell(&Event::ChunkReceived(ChunkReceived {
            target,
            since_previous,
        }));
    }

    /// The stream ended (or was dropped), with the usage it reported and the kind of the
    /// error that ended it, if one did.
    pub(crate) fn end(self, usage: Option<Usage>, error: Option<ErrorKind>) {
        let StreamWatch {
            router,
            entry,
            key,
            booked,
            breaker,
            charges,
            ..
        } = self;
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            h.spawn(async move {
                router
                    .stream_ended(entry, key, booked, breaker, charges, usage, error)
                    .await
            });
        }
    }
}

/// The environment's and the tenants' budgets, checked.
fn resolve_budgets(parts: BudgetParts) -> Result<Budgets> {
    let name = &parts.environment;
    let environment = match parts.budget {
        Some(b) => Some(b.resolve(
            Scope::Environment(Arc::from(name.as_str())),
            &format!("environment `{name}`'s budget"),
        )?),
        None => None,
    };
    let mut tenants = HashMap::new();
    for (tenant, b) in parts.tenants {
        let ledgers = b.resolve(
            Scope::Tenant(Arc::from(name.as_str()), Arc::from(tenant.as_str())),
            &format!("tenant `{tenant}`'s budget"),
        )?;
        tenants.insert(tenant, ledgers);
    }
    Ok(Budgets::new(environment, tenants))
}
