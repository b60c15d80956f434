//! Shared server state: per-provider buckets, faults and counters, and the request log.
//!
//! Locks are `std::sync::Mutex`es held for arithmetic only, never across an `.await`. A
//! provider without limits or faults takes no lock but the log's.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::{ConfigError, EmulatorConfig, Kind, LimitScope, Limits, ProviderConfig};
use crate::faults::{Fault, FaultState, WeightedFault};
use crate::limits::{Admission, LimitSet, Snapshot};
use crate::oauth::Identity;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A provider's prompt cache, as OpenAI describes its own
/// (<https://platform.openai.com/docs/guides/prompt-caching>): prompts of 1,024 tokens or
/// more are cached; a prompt that starts with a cached one reads that prefix from the cache,
/// the first 1,024 tokens and then in steps of 128. The emulator knows prompts by their
/// digest, not their text, so only a prompt seen before, whole, is a hit (a longer prompt
/// that starts with it is not). It forgets everything once it holds
/// [`PromptCache::CAPACITY`] prompts.
#[derive(Debug, Default)]
pub(crate) struct PromptCache {
    seen: Mutex<std::collections::HashSet<u64>>,
}

impl PromptCache {
    /// The smallest prompt cached, in tokens.
    pub(crate) const MIN_TOKENS: u64 = 1_024;
    /// The steps a cached prefix grows by past the first 1,024 tokens.
    pub(crate) const STEP: u64 = 128;
    /// Prompts remembered at most.
    pub(crate) const CAPACITY: usize = 100_000;

    /// How many of the `tokens` of the prompt `digest` are read from the cache, and the
    /// prompt remembered.
    pub(crate) fn cached(&self, digest: u64, tokens: u64) -> u64 {
        if tokens < Self::MIN_TOKENS {
            return 0;
        }
        let mut seen = lock(&self.seen);
        if seen.len() >= Self::CAPACITY {
            seen.clear();
        }
        if seen.insert(digest) {
            return 0;
        }
        Self::MIN_TOKENS + (tokens - Self::MIN_TOKENS) / Self::STEP * Self::STEP
    }
}

/// One request as the emulator saw and answered it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LogEntry {
    /// Milliseconds since the emulator started.
    pub at_ms: u64,
    /// Milliseconds since the Unix epoch.
    pub unix_ms: u64,
    /// The provider's prefix.
    pub provider: String,
    /// HTTP method.
    pub method: String,
    /// Request path (without the query).
    pub path: String,
    /// The model (deployment) the request named, when it got that far.
    pub model: Option<String>,
    /// Status sent; `None` when no response was sent (connection reset, hang).
    pub status: Option<u16>,
    /// The fault applied, if any (`Fault::name`).
    pub fault: Option<String>,
    /// Whether the answer was streamed.
    pub stream: bool,
    /// Tokens charged to the token buckets.
    pub tokens: u64,
    /// The request id sent back.
    pub request_id: Option<String>,
    /// The usage the answer reported, `[input, output]` tokens (a chat answer; an embeddings
    /// answer's `[input, 0]`; `None` for anything else, a refusal included).
    pub usage: Option<[u64; 2]>,
    /// Of the usage's input tokens, those it reported read from the prompt cache (a long
    /// prompt this provider saw before; OpenAI's and Gemini's wire formats).
    #[serde(default)]
    pub cached_input: u64,
    /// The provider's own state a chat request sent back with its earlier turns, as the
    /// emulator verified it: `[its own, verified; the placeholder for turns it did not write]`
    /// (Gemini 3's thought signatures, Claude's signed thinking blocks; `[0, 0]` otherwise).
    #[serde(default)]
    pub returned: [u32; 2],
    /// The limit headers sent (`x-ratelimit-*`, `anthropic-ratelimit-*`, `retry-after`, …),
    /// as sent, in name order.
    pub stated: Vec<(String, String)>,
}

/// Counters of one provider.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Counters {
    /// Requests received.
    pub requests: u64,
    /// 2xx answers.
    pub ok: u64,
    /// 429 answers (limits and injected).
    pub rate_limited: u64,
    /// Other 4xx answers.
    pub client_errors: u64,
    /// 5xx answers (incl. 529).
    pub server_errors: u64,
    /// Requests that got an injected fault.
    pub faults: u64,
    /// Connections dropped without an answer (reset, hang).
    pub dropped: u64,
    /// Tokens charged (prompt estimate + output, or + `max_tokens` in estimate mode).
    pub tokens: u64,
}

#[derive(Debug, Default)]
pub(crate) struct AtomicCounters {
    requests: AtomicU64,
    ok: AtomicU64,
    rate_limited: AtomicU64,
    client_errors: AtomicU64,
    server_errors: AtomicU64,
    faults: AtomicU64,
    dropped: AtomicU64,
    tokens: AtomicU64,
}

impl AtomicCounters {
    pub(crate) fn request(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn answer(&self, status: Option<u16>, fault: bool, tokens: u64) {
        let c = match status {
            None => &self.dropped,
            Some(200..=299) => &self.ok,
            Some(429) => &self.rate_limited,
            Some(500..) => &self.server_errors,
            Some(_) => &self.client_errors,
        };
        c.fetch_add(1, Ordering::Relaxed);
        if fault {
            self.faults.fetch_add(1, Ordering::Relaxed);
        }
        if tokens > 0 {
            self.tokens.fetch_add(tokens, Ordering::Relaxed);
        }
    }

    pub(crate) fn read(&self) -> Counters {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Counters {
            requests: r(&self.requests),
            ok: r(&self.ok),
            rate_limited: r(&self.rate_limited),
            client_errors: r(&self.client_errors),
            server_errors: r(&self.server_errors),
            faults: r(&self.faults),
            dropped: r(&self.dropped),
            tokens: r(&self.tokens),
        }
    }

    fn reset(&self) {
        for a in [
            &self.requests,
            &self.ok,
            &self.rate_limited,
            &self.client_errors,
            &self.server_errors,
            &self.faults,
            &self.dropped,
            &self.tokens,
        ] {
            a.store(0, Ordering::Relaxed);
        }
    }
}

/// The limit configuration and buckets of one provider.
#[derive(Debug)]
pub(crate) struct LimitTable {
    default: Limits,
    per_model: BTreeMap<String, Limits>,
    minute: Duration,
    /// Fixed-window counters instead of continuous buckets.
    fixed: bool,
    scope: LimitScope,
    sets: HashMap<String, LimitSet>,
}

/// The result of charging a request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Charge {
    pub(crate) admission: Admission,
    pub(crate) snapshot: Snapshot,
}

impl LimitTable {
    fn new(cfg: &ProviderConfig, minute: Duration) -> Self {
        LimitTable {
            default: cfg.limits,
            per_model: cfg.model_limits.clone(),
            minute,
            fixed: cfg.fixed_windows,
            scope: cfg.limit_scope(),
            sets: HashMap::new(),
        }
    }

    fn is_unlimited(&self) -> bool {
        self.default.is_unlimited() && self.per_model.values().all(Limits::is_unlimited)
    }

    fn limits_for(&self, model: &str) -> Limits {
        match self.scope {
            LimitScope::Model => self.per_model.get(model).copied().unwrap_or(self.default),
            LimitScope::Provider => self.default,
        }
    }

    fn key<'a>(&self, model: &'a str) -> &'a str {
        match self.scope {
            LimitScope::Model => model,
            LimitScope::Provider => "",
        }
    }

    fn set(&mut self, model: &str, now: Instant) -> (&mut LimitSet, Limits) {
        let limits = self.limits_for(model);
        let (minute, fixed) = (self.minute, self.fixed);
        let key = self.key(model).to_owned();
        let set = self
            .sets
            .entry(key)
            .or_insert_with(|| LimitSet::with_windows(&limits, minute, fixed, now));
        (set, limits)
    }
}

/// Everything the server keeps about one provider.
#[derive(Debug)]
pub(crate) struct ProviderState {
    pub(crate) cfg: ProviderConfig,
    limits: Mutex<LimitTable>,
    limited: AtomicBool,
    faults: Mutex<FaultState>,
    faulty: AtomicBool,
    pub(crate) counters: AtomicCounters,
    pub(crate) inflight: AtomicU32,
    concurrency: AtomicU32,
    default_seed: u64,
    /// Vertex: the service account whose JWTs the token endpoint takes, and its tokens.
    pub(crate) google: Option<Identity>,
    /// Its Batch API's batches, files, settings and log (`crate::bulk`).
    pub(crate) bulk: crate::bulk::Store,
    /// The long prompts it has seen (where its wire format caches prompts).
    pub(crate) prompt_cache: PromptCache,
}

impl ProviderState {
    /// The state of `cfg`.
    ///
    /// # Errors
    ///
    /// A Vertex provider's service-account key file cannot be read or holds no RSA key.
    pub(crate) fn new(cfg: ProviderConfig, emu: &EmulatorConfig) -> Result<Self, ConfigError> {
        let table = LimitTable::new(&cfg, emu.minute_of(&cfg));
        let faults = FaultState::new(&cfg.faults, emu.seed);
        let google = if cfg.kind == Kind::Vertex {
            let key = crate::config::google::service_account(
                &cfg.prefix,
                cfg.project.as_deref(),
                cfg.service_account_file.as_deref(),
            )
            .and_then(Identity::new)
            .map_err(|e| {
                ConfigError(format!(
                    "providers.{}.service_account_file: {e}",
                    cfg.prefix
                ))
            })?;
            Some(key)
        } else {
            None
        };
        Ok(ProviderState {
            limited: AtomicBool::new(!table.is_unlimited()),
            limits: Mutex::new(table),
            faulty: AtomicBool::new(faults.is_active()),
            faults: Mutex::new(faults),
            counters: AtomicCounters::default(),
            inflight: AtomicU32::new(0),
            concurrency: AtomicU32::new(cfg.limits.concurrency.unwrap_or(0)),
            default_seed: emu.seed,
            google,
            bulk: crate::bulk::Store::new(emu.seed),
            prompt_cache: PromptCache::default(),
            cfg,
        })
    }

    /// The concurrency limit (0 = none).
    pub(crate) fn concurrency_limit(&self) -> u32 {
        self.concurrency.load(Ordering::Relaxed)
    }

    /// The minute of this provider.
    pub(crate) fn minute(&self) -> Duration {
        lock(&self.limits).minute
    }

    /// The fault for the next request, if any.
    pub(crate) fn next_fault(&self) -> Option<Fault> {
        if !self.faulty.load(Ordering::Acquire) {
            return None;
        }
        let mut f = lock(&self.faults);
        let next = f.next();
        self.faulty.store(f.is_active(), Ordering::Release);
        next
    }

    /// Latency jitter from the provider's seeded generator.
    pub(crate) fn jitter(&self, max_ms: u64) -> Duration {
        if max_ms == 0 {
            return Duration::ZERO;
        }
        lock(&self.faults).jitter(max_ms)
    }

    pub(crate) fn push_script(&self, steps: impl IntoIterator<Item = Fault>) {
        let mut f = lock(&self.faults);
        f.push_script(steps);
        self.faulty.store(f.is_active(), Ordering::Release);
    }

    pub(crate) fn set_mix(&self, mix: Vec<WeightedFault>, seed: Option<u64>) {
        let mut f = lock(&self.faults);
        f.set_mix(mix, seed.unwrap_or(self.default_seed));
        self.faulty.store(f.is_active(), Ordering::Release);
    }

    pub(crate) fn clear_script(&self) {
        let mut f = lock(&self.faults);
        f.clear_script();
        self.faulty.store(f.is_active(), Ordering::Release);
    }

    pub(crate) fn pending_script(&self) -> usize {
        lock(&self.faults).pending()
    }

    /// Charges one request of `tokens` to the buckets of `model`; on admission, gives back
    /// `refund` at once (the unused part of `max_tokens`, when charging actual output).
    /// `None` when the provider has no limits.
    pub(crate) fn charge(
        &self,
        model: &str,
        tokens: u64,
        refund: u64,
        now: Instant,
    ) -> Option<Charge> {
        if !self.limited.load(Ordering::Acquire) {
            return None;
        }
        let mut t = lock(&self.limits);
        let (set, _) = t.set(model, now);
        let admission = set.admit(tokens, now);
        if admission == Admission::Admitted && refund > 0 {
            set.refund(refund, now);
        }
        Some(Charge {
            admission,
            snapshot: set.snapshot(now),
        })
    }

    /// The buckets of `model` without charging (for injected 429s).
    pub(crate) fn peek(&self, model: &str, now: Instant) -> (Snapshot, Limits) {
        if !self.limited.load(Ordering::Acquire) {
            return (Snapshot::default(), Limits::default());
        }
        let mut t = lock(&self.limits);
        let (set, limits) = t.set(model, now);
        (set.snapshot(now), limits)
    }

    /// Replaces the limits of the provider (`model: None`) or of one model; existing buckets
    /// keep their level, clamped to the new capacity.
    pub(crate) fn set_limits(
        &self,
        model: Option<&str>,
        limits: Limits,
        minute: Option<Duration>,
        now: Instant,
    ) {
        let mut t = lock(&self.limits);
        match model {
            None => {
                t.default = limits;
                self.concurrency
                    .store(limits.concurrency.unwrap_or(0), Ordering::Relaxed);
            }
            Some(m) => {
                t.per_model.insert(m.to_owned(), limits);
            }
        }
        if let Some(minute) = minute {
            t.minute = minute;
        }
        let minute = t.minute;
        let keys: Vec<String> = t.sets.keys().cloned().collect();
        for k in keys {
            let l = t.limits_for(&k);
            if let Some(set) = t.sets.get_mut(&k) {
                set.reconfigure(&l, minute, now);
            }
        }
        self.limited.store(!t.is_unlimited(), Ordering::Release);
    }

    /// Full buckets, zero counters, no pending script (limits and mix stay).
    pub(crate) fn reset(&self) {
        lock(&self.limits).sets.clear();
        self.clear_script();
        self.counters.reset();
        self.bulk.reset();
    }
}

/// The whole server's state.
#[derive(Debug)]
pub(crate) struct App {
    pub(crate) providers: HashMap<String, Arc<ProviderState>>,
    log: Mutex<VecDeque<LogEntry>>,
    log_capacity: usize,
    started: Instant,
    started_wall: SystemTime,
    time: Option<TimeSource>,
    pub(crate) shutdown: watch::Receiver<bool>,
}

/// Where the emulator reads time: the monotonic instant that drives its buckets and the wall
/// time its reset headers are written in. Real time unless a test shares its own clock.
#[derive(Clone)]
pub struct TimeSource(Arc<dyn Fn() -> (Instant, SystemTime) + Send + Sync>);

impl TimeSource {
    /// A time source reading `now`.
    pub fn new(now: impl Fn() -> (Instant, SystemTime) + Send + Sync + 'static) -> Self {
        TimeSource(Arc::new(now))
    }

    fn now(&self) -> (Instant, SystemTime) {
        (self.0)()
    }
}

impl std::fmt::Debug for TimeSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TimeSource")
    }
}

impl App {
    /// The state of `cfg`.
    ///
    /// # Errors
    ///
    /// A provider's state cannot be made (see [`ProviderState::new`]).
    pub(crate) fn new(
        cfg: &EmulatorConfig,
        shutdown: watch::Receiver<bool>,
        time: Option<TimeSource>,
    ) -> Result<Self, ConfigError> {
        let (started, started_wall) = match &time {
            Some(t) => t.now(),
            None => (Instant::now(), wall_now()),
        };
        let providers = cfg
            .providers
            .values()
            .map(|p| {
                Ok((
                    p.prefix.clone(),
                    Arc::new(ProviderState::new(p.clone(), cfg)?),
                ))
            })
            .collect::<Result<_, ConfigError>>()?;
        Ok(App {
            providers,
            log: Mutex::new(VecDeque::with_capacity(cfg.log_capacity.min(1 << 16))),
            log_capacity: cfg.log_capacity,
            started,
            started_wall,
            time,
            shutdown,
        })
    }

    /// Now, on the emulator's time source.
    pub(crate) fn now(&self) -> (Instant, SystemTime) {
        match &self.time {
            Some(t) => t.now(),
            None => (Instant::now(), wall_now()),
        }
    }

    pub(crate) fn provider(&self, prefix: &str) -> Option<&Arc<ProviderState>> {
        self.providers.get(prefix)
    }

    /// The log entry skeleton for a request arriving now.
    pub(crate) fn stamp(&self, now: Instant) -> (u64, u64) {
        let since = now.saturating_duration_since(self.started);
        let unix = self
            .started_wall
            .checked_add(since)
            .unwrap_or(self.started_wall)
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        (
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX),
            u64::try_from(unix.as_millis()).unwrap_or(u64::MAX),
        )
    }

    pub(crate) fn record(&self, entry: LogEntry) {
        if self.log_capacity == 0 {
            return;
        }
        let mut log = lock(&self.log);
        if log.len() >= self.log_capacity {
            log.pop_front();
        }
        log.push_back(entry);
    }

    pub(crate) fn log(&self) -> Vec<LogEntry> {
        lock(&self.log).iter().cloned().collect()
    }

    pub(crate) fn counters(&self) -> BTreeMap<String, Counters> {
        self.providers
            .iter()
            .map(|(k, p)| (k.clone(), p.counters.read()))
            .collect()
    }

    pub(crate) fn reset(&self) {
        lock(&self.log).clear();
        for p in self.providers.values() {
            p.reset();
        }
    }
}

/// The wall clock (the emulator runs on real time by design).
pub(crate) fn wall_now() -> SystemTime {
    SystemTime::now()
}

#[cfg(test)]
mod tests {
    use super::PromptCache;

    #[test]
    fn a_long_prompt_seen_before_is_read_from_the_cache_in_steps() {
        let cache = PromptCache::default();
        // (digest, tokens) → cached tokens, in order
        let table = [
            (1, 1_023, 0), // too short to cache
            (1, 1_023, 0), // still too short
            (2, 1_024, 0), // first seen
            (2, 1_024, 1_024),
            (3, 2_000, 0),
            (3, 2_000, 1_920), // 1,024 + 7 × 128
            (3, 2_000, 1_920),
            (4, 1_151, 0),
            (4, 1_151, 1_024),
        ];
        for (digest, tokens, cached) in table {
            assert_eq!(cache.cached(digest, tokens), cached, "{digest} {tokens}");
        }
    }
}
