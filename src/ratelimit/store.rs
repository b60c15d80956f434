//! Where bucket state lives: [`LimiterStore`] and its in-memory implementation.
//!
//! The state of one (provider, model) changes through four operations only —
//! [`reserve`](LimiterStore::reserve), [`refund`](LimiterStore::refund),
//! [`raise`](LimiterStore::raise) and [`peek`](LimiterStore::peek) — so the same trait can
//! later be served by Redis for several processes (one atomic script per operation, timed by
//! the server's clock) with the same semantics. [`MemoryStore`] is the default.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::bucket::{Bucket, InsufficientCapacity};
use super::Limits;
use super::{LimitReport, Per, Window};
use crate::error::Result;
use crate::id::ProviderId;

const MINUTE: Duration = Duration::from_secs(60);
const DAY: Duration = Duration::from_secs(86_400);
const HOUR: Duration = Duration::from_secs(3_600);

/// The scope of one set of buckets: providers limit each model separately.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use llm_failover::ratelimit::LimitKey;
/// use llm_failover::ProviderId;
///
/// let key = LimitKey::new(ProviderId::new("openai"), "gpt-4o-mini");
/// assert_eq!(key.to_string(), "openai/gpt-4o-mini");
///
/// let tenant = key.clone().with_account(Some(Arc::from("acme")));
/// assert_eq!(tenant.to_string(), "openai/gpt-4o-mini@acme");
/// assert_ne!(key, tenant); // separate buckets
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LimitKey {
    /// The provider.
    pub provider: ProviderId,
    /// The model.
    pub model: String,
    /// The account whose limits are spent: `None` for the configured key, a tenant's name
    /// for a per-request credential.
    pub account: Option<Arc<str>>,
}

impl LimitKey {
    /// A key for the configured account.
    pub fn new(provider: ProviderId, model: impl Into<String>) -> Self {
        LimitKey {
            provider,
            model: model.into(),
            account: None,
        }
    }

    /// The same key for another account.
    #[must_use]
    pub fn with_account(mut self, account: Option<Arc<str>>) -> Self {
        self.account = account;
        self
    }
}

impl fmt::Display for LimitKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.provider, self.model)?;
        if let Some(a) = &self.account {
            write!(f, "@{a}")?;
        }
        Ok(())
    }
}

/// What one request costs.
///
/// # Examples
///
/// ```
/// use llm_failover::ratelimit::Cost;
///
/// let chat = Cost { input_tokens: 1_200, output_tokens: 256, ..Cost::one_request() };
/// assert_eq!((chat.requests, chat.tokens()), (1, 1_456));
///
/// let speech = Cost::audio(90);
/// assert_eq!((speech.requests, speech.audio_seconds, speech.tokens()), (1, 90, 0));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cost {
    /// Requests (1 per attempt).
    pub requests: u64,
    /// Estimated input tokens.
    pub input_tokens: u64,
    /// Reserved output tokens (`max_tokens`).
    pub output_tokens: u64,
    /// Seconds of audio (speech-to-text providers with an audio budget).
    pub audio_seconds: u64,
}

impl Cost {
    /// One request with no tokens.
    pub fn one_request() -> Self {
        Cost {
            requests: 1,
            ..Cost::default()
        }
    }

    /// One speech-to-text request for `audio_seconds` of audio.
    pub fn audio(audio_seconds: u64) -> Self {
        Cost {
            requests: 1,
            audio_seconds,
            ..Cost::default()
        }
    }

    /// Input plus output tokens.
    pub fn tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

/// Which limit a request is too large for.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use llm_failover::ratelimit::{Cost, Dimension, LimiterStore, Limits, MemoryStore, Reservation};
/// # use llm_failover::{ratelimit::LimitKey, ProviderId};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> llm_failover::Result<()> {
/// # let key = LimitKey::new(ProviderId::new("groq"), "llama3");
/// # let now = tokio::time::Instant::now();
/// let store = MemoryStore::new();
/// let limits = Limits::none().with_tpm(6_000);
/// let huge = Cost { input_tokens: 9_000, ..Cost::one_request() };
/// match store.reserve(&key, &limits, huge, Duration::from_secs(60), now).await? {
///     Reservation::TooLarge { dimension, cost, capacity } => {
///         assert_eq!(dimension, Dimension::TokensPerMinute);
///         assert_eq!((cost, capacity), (9_000, 6_000));
///         assert_eq!(dimension.to_string(), "tokens per minute");
///     }
///     other => panic!("{other:?}"),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Dimension {
    /// Requests per minute.
    RequestsPerMinute,
    /// Tokens per minute.
    TokensPerMinute,
    /// Input tokens per minute.
    InputTokensPerMinute,
    /// Output tokens per minute.
    OutputTokensPerMinute,
    /// Requests per day.
    RequestsPerDay,
    /// Tokens per day.
    TokensPerDay,
    /// Seconds of audio per hour.
    AudioSecondsPerHour,
}

impl fmt::Display for Dimension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dimension::RequestsPerMinute => "requests per minute",
            Dimension::TokensPerMinute => "tokens per minute",
            Dimension::InputTokensPerMinute => "input tokens per minute",
            Dimension::OutputTokensPerMinute => "output tokens per minute",
            Dimension::RequestsPerDay => "requests per day",
            Dimension::TokensPerDay => "tokens per day",
            Dimension::AudioSecondsPerHour => "audio seconds per hour",
        })
    }
}

/// The answer to a reservation.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use llm_failover::ratelimit::{Cost, LimitKey, LimiterStore, Limits, MemoryStore, Reservation};
/// use llm_failover::ProviderId;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> llm_failover::Result<()> {
/// let store = MemoryStore::new();
/// let key = LimitKey::new(ProviderId::new("openai"), "gpt-4o-mini");
/// let (limits, max_wait) = (Limits::none().with_rpm(60), Duration::from_secs(5));
/// let now = tokio::time::Instant::now();
/// match store.reserve(&key, &limits, Cost::one_request(), max_wait, now).await? {
///     Reservation::Granted { wait, .. } => assert!(wait.is_zero()), // wait, then send
///     Reservation::NotUntil { wait } => println!("busy for {wait:?}: try the next provider"),
///     Reservation::TooLarge { dimension, .. } => println!("never fits {dimension}"),
///     _ => {}
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reservation {
    /// Booked: send after waiting this long.
    Granted {
        /// The wait before sending (zero: now).
        wait: Duration,
        /// [`LimitSnapshot::token_room`] after this booking: the caller prices its next
        /// request from it without asking again.
        token_room: Option<u64>,
    },
    /// Not booked: the wait would exceed the caller's `max_wait`.
    NotUntil {
        /// The wait a reservation would have had.
        wait: Duration,
    },
    /// Never: the cost exceeds a limit's whole capacity.
    TooLarge {
        /// The limit.
        dimension: Dimension,
        /// What was asked.
        cost: u64,
        /// The capacity.
        capacity: u64,
    },
}

/// Ways to tighten the local view; none can loosen it.
///
/// # Examples
///
/// What a 429 with `retry-after: 5` does to a key:
///
/// ```
/// use std::time::Duration;
/// use llm_failover::ratelimit::{Cost, LimitKey, LimiterStore, Limits, MemoryStore, Tightening};
/// use llm_failover::ProviderId;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> llm_failover::Result<()> {
/// let store = MemoryStore::new();
/// let key = LimitKey::new(ProviderId::new("openai"), "gpt-4o-mini");
/// let (limits, now) = (Limits::none().with_rpm(60), tokio::time::Instant::now());
/// store.reserve(&key, &limits, Cost::one_request(), Duration::ZERO, now).await?;
///
/// let mut after_429 = Tightening::default();
/// after_429.drain = true;
/// after_429.gate_until = Some(now + Duration::from_secs(5));
/// store.raise(&key, after_429, now).await?;
/// let snapshot = store.peek(&key, Cost::one_request(), now).await?;
/// assert_eq!(snapshot.gate_until, Some(now + Duration::from_secs(5)));
/// assert!(snapshot.wait.unwrap() >= Duration::from_secs(5));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Tightening {
    /// Nothing passes before this instant (a 429's stated delay). Never moved earlier.
    pub gate_until: Option<Instant>,
    /// Drain every bucket to zero (a 429).
    pub drain: bool,
    /// A response's report: lowers levels to `remaining`, adopts stated limits.
    pub report: Option<LimitReport>,
}

/// A read-only view of one key's state.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use llm_failover::ratelimit::{Cost, LimitKey, LimiterStore, Limits, MemoryStore};
/// use llm_failover::ProviderId;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> llm_failover::Result<()> {
/// let store = MemoryStore::new();
/// let key = LimitKey::new(ProviderId::new("openai"), "gpt-4o-mini");
/// let (limits, now) = (Limits::none().with_rpm(60), tokio::time::Instant::now());
/// store.reserve(&key, &limits, Cost::one_request(), Duration::ZERO, now).await?;
///
/// let snapshot = store.peek(&key, Cost::one_request(), now).await?;
/// let (level, capacity) = snapshot.requests.unwrap();
/// assert_eq!(capacity, 60);
/// assert!(level < 60.0); // one request booked
/// assert_eq!(snapshot.wait, Some(Duration::ZERO));
/// assert_eq!(snapshot.gate_until, None);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct LimitSnapshot {
    /// Request bucket level and capacity (per minute), when known.
    pub requests: Option<(f64, u64)>,
    /// Token bucket level and capacity (per minute), when known.
    pub tokens: Option<(f64, u64)>,
    /// The gate, when one is set in the future.
    pub gate_until: Option<Instant>,
    /// How long a reservation of the peeked cost would wait now (`None`: too large).
    pub wait: Option<Duration>,
    /// Tokens that could be booked now while every token bucket (per minute, input per
    /// minute, per day) stays at least half full; `None` when no token bucket is known.
    /// Where a request fits in this room, a generous tokenizer-free estimate admits it as an
    /// exact count would.
    pub token_room: Option<u64>,
}

/// The storage behind the limiter. See the module docs.
///
/// # Examples
///
/// A store that admits everything, for limits enforced by a gateway in front:
///
/// ```
/// use async_trait::async_trait;
/// use tokio::time::Instant;
/// # use std::{sync::Arc, time::Duration};
/// # use llm_failover::ratelimit::{Cost, LimitKey, LimitSnapshot, LimiterStore, Limits};
/// # use llm_failover::ratelimit::{Reservation, Tightening};
/// # use llm_failover::{Client, Result};
///
/// #[derive(Debug)]
/// struct Unlimited;
///
/// #[async_trait]
/// impl LimiterStore for Unlimited {
///     async fn reserve(
///         &self, _: &LimitKey, _: &Limits, _: Cost, _: Duration, _: Instant,
///     ) -> Result<Reservation> {
///         Ok(Reservation::Granted { wait: Duration::ZERO, token_room: None })
///     }
///     async fn refund(&self, _: &LimitKey, _: u64, _: i64, _: Instant) -> Result<()> { Ok(()) }
///     async fn raise(&self, _: &LimitKey, _: Tightening, _: Instant) -> Result<()> { Ok(()) }
///     async fn peek(&self, _: &LimitKey, _: Cost, _: Instant) -> Result<LimitSnapshot> {
///         let mut free = LimitSnapshot::default(); // no bucket, no gate
///         free.wait = Some(Duration::ZERO);
///         Ok(free)
///     }
/// }
///
/// # let local = std::sync::Arc::new(llm_failover::provider::openai::OpenAi::new(
/// #     llm_failover::ProviderId::new("local"),
/// #     "http://127.0.0.1:11434/v1".parse().unwrap(),
/// # ).with_chat_model("llama3.2"));
/// let client = Client::builder()
///     .provider(local, llm_failover::ProviderSettings::new())
///     .limiter_store(Arc::new(Unlimited))
///     .build()?;
/// # let _ = client;
/// # Ok::<(), llm_failover::Error>(())
/// ```
#[async_trait]
pub trait LimiterStore: Send + Sync + fmt::Debug {
    /// Books `cost` for `key` if it can start within `max_wait`. `limits` are the configured
    /// limits, used when the key is first seen.
    async fn reserve(
        &self,
        key: &LimitKey,
        limits: &Limits,
        cost: Cost,
        max_wait: Duration,
        now: Instant,
    ) -> Result<Reservation>;

    /// Gives back (`tokens > 0`) or charges (`tokens < 0`) tokens, and gives back
    /// `requests` request slots (a reservation dropped before sending).
    async fn refund(&self, key: &LimitKey, requests: u64, tokens: i64, now: Instant) -> Result<()>;

    /// Tightens the view of `key`.
    async fn raise(&self, key: &LimitKey, tightening: Tightening, now: Instant) -> Result<()>;

    /// Reads the state of `key` and the wait `cost` would have, without booking.
    async fn peek(&self, key: &LimitKey, cost: Cost, now: Instant) -> Result<LimitSnapshot>;

    /// Whether a reservation for `key` under `limits` would book nothing and be granted at
    /// once, known without a call: the caller may then skip [`reserve`](Self::reserve).
    /// `false` (the default) whenever in doubt — a store shared with other processes must
    /// always be asked.
    fn admits_freely(&self, key: &LimitKey, limits: &Limits) -> bool {
        let _ = (key, limits);
        false
    }
}

fn _obj_safe(_: &dyn LimiterStore) {}

/// The buckets of one key.
#[derive(Debug, Default)]
struct KeyState {
    requests: Option<Bucket>,
    tokens: Option<Bucket>,
    input_tokens: Option<Bucket>,
    output_tokens: Option<Bucket>,
    requests_day: Option<Bucket>,
    tokens_day: Option<Bucket>,
    audio_hour: Option<Bucket>,
    gate: Option<Instant>,
    /// The configured limits: a stated limit may lower a bucket below them, never raise it
    /// above (a user who configures less than the provider allows keeps the rest free).
    configured: Limits,
}

impl KeyState {
    fn from_limits(limits: &Limits, allowance: Duration, now: Instant) -> Self {
        let b = |v: Option<std::num::NonZeroU64>, w| {
            v.map(|n| Bucket::new(n.get(), w, now).with_allowance(allowance))
        };
        KeyState {
            requests: b(limits.rpm, MINUTE),
            tokens: b(limits.tpm, MINUTE),
            requests_day: b(limits.rpd, DAY),
            tokens_day: b(limits.tpd, DAY),
            audio_hour: b(limits.audio_seconds_per_hour, HOUR),
            configured: *limits,
            ..KeyState::default()
        }
    }

    fn buckets(&mut self, cost: Cost) -> [(Option<&mut Bucket>, u64, Dimension); 7] {
        [
            (
                self.requests.as_mut(),
                cost.requests,
                Dimension::RequestsPerMinute,
            ),
            (
                self.tokens.as_mut(),
                cost.tokens(),
                Dimension::TokensPerMinute,
            ),
            (
                self.input_tokens.as_mut(),
                cost.input_tokens,
                Dimension::InputTokensPerMinute,
            ),
            (
                self.output_tokens.as_mut(),
                cost.output_tokens,
                Dimension::OutputTokensPerMinute,
            ),
            (
                self.requests_day.as_mut(),
                cost.requests,
                Dimension::RequestsPerDay,
            ),
            (
                self.tokens_day.as_mut(),
                cost.tokens(),
                Dimension::TokensPerDay,
            ),
            (
                self.audio_hour.as_mut(),
                cost.audio_seconds,
                Dimension::AudioSecondsPerHour,
            ),
        ]
    }

    /// The wait for `cost` now, or the first limit it can never fit.
    fn wait(&mut self, cost: Cost, now: Instant) -> std::result::Result<Duration, Reservation> {
        let mut wait = self
            .gate
            .filter(|g| *g > now)
            .map_or(Duration::ZERO, |g| g - now);
        for (bucket, n, dim) in self.buckets(cost) {
            if let Some(b) = bucket {
                match b.peek(n, now) {
                    Ok(w) => wait = wait.max(w),
                    Err(InsufficientCapacity { cost, capacity }) => {
                        return Err(Reservation::TooLarge {
                            dimension: dim,
                            cost,
                            capacity,
                        })
                    }
                }
            }
        }
        Ok(wait)
    }

    fn book(&mut self, cost: Cost, now: Instant) {
        for (bucket, n, _) in self.buckets(cost) {
            if let Some(b) = bucket {
                // Cannot fail: `wait` checked every capacity under the same lock.
                b.charge(n, now);
            }
        }
    }

    fn apply(&mut self, report: &LimitReport, allowance: Duration, now: Instant) {
        let c = self.configured;
        let learn = |slot: &mut Option<Bucket>,
                     w: &Window,
                     window: Duration,
                     ceiling: Option<std::num::NonZeroU64>| {
            let stated = w.limit.filter(|l| *l > 0);
            if let Some(limit) = stated.map(|l| ceiling.map_or(l, |c| l.min(c.get()))) {
                match slot {
                    Some(b) => {
                        if b.capacity() != limit {
                            b.set_limit(limit, window, now)
                        }
                    }
                    None => *slot = Some(Bucket::new(limit, window, now).with_allowance(allowance)),
                }
            }
            if let (Some(b), Some(rem)) = (slot.as_mut(), w.remaining) {
                b.tighten(rem, now);
            }
        };
        if let Some(w) = &report.requests {
            match w.per {
                Per::Minute => learn(&mut self.requests, w, MINUTE, c.rpm),
                Per::Day => learn(&mut self.requests_day, w, DAY, c.rpd),
                Per::Unknown => {}
            }
        }
        if let Some(w) = &report.tokens {
            match w.per {
                Per::Minute => learn(&mut self.tokens, w, MINUTE, c.tpm),
                Per::Day => learn(&mut self.tokens_day, w, DAY, c.tpd),
                Per::Unknown => {}
            }
        }
        if let Some(w) = report
            .input_tokens
            .as_ref()
            .filter(|w| w.per == Per::Minute)
        {
            learn(&mut self.input_tokens, w, MINUTE, None);
        }
        if let Some(w) = report
            .output_tokens
            .as_ref()
            .filter(|w| w.per == Per::Minute)
        {
            learn(&mut self.output_tokens, w, MINUTE, None);
        }
        // A window we cannot model as a bucket (unknown length) that says "none left" gates
        // until its reset; modelled windows refill on their own (their reset is the time
        // until *full*, not until the next slot).
        for w in report.windows() {
            if w.per == Per::Unknown && w.remaining == Some(0) {
                if let Some(reset) = w.reset_at {
                    self.raise_gate(reset);
                }
            }
        }
    }

    /// See [`LimitSnapshot::token_room`].
    fn token_room(&mut self, now: Instant) -> Option<u64> {
        [
            &mut self.tokens,
            &mut self.input_tokens,
            &mut self.tokens_day,
        ]
        .into_iter()
        .flatten()
        .map(|b| {
            let room = b.level(now) - b.capacity() as f64 / 2.0;
            // Saturating float-to-int: negative is none, huge is u64::MAX.
            room.max(0.0) as u64
        })
        .min()
    }

    fn raise_gate(&mut self, until: Instant) {
        self.gate = Some(self.gate.map_or(until, |g| g.max(until)));
    }

    fn each_bucket(&mut self, mut f: impl FnMut(&mut Bucket)) {
        for b in [
            &mut self.requests,
            &mut self.tokens,
            &mut self.input_tokens,
            &mut self.output_tokens,
            &mut self.requests_day,
            &mut self.tokens_day,
            &mut self.audio_hour,
        ]
        .into_iter()
        .flatten()
        {
            f(b);
        }
    }
}

/// The default store: buckets in this process's memory.
///
/// A key with nothing configured that no response has ever described is unknown, and unknown
/// admits freely. Pass one to [`ClientBuilder::limiter_store`](crate::ClientBuilder::limiter_store)
/// only to share it between clients of this process; a client makes its own otherwise.
///
/// # Examples
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use llm_failover::ratelimit::{Cost, LimitKey, LimiterStore, Limits, MemoryStore, Reservation};
/// use llm_failover::{Client, ProviderId};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> llm_failover::Result<()> {
/// let store = Arc::new(MemoryStore::new());
/// let key = LimitKey::new(ProviderId::new("openai"), "gpt-4o-mini");
/// let (limits, now) = (Limits::none().with_rpm(1), tokio::time::Instant::now());
/// let first = store.reserve(&key, &limits, Cost::one_request(), Duration::ZERO, now).await?;
/// assert!(matches!(first, Reservation::Granted { wait, .. } if wait.is_zero()));
/// let second = store.reserve(&key, &limits, Cost::one_request(), Duration::ZERO, now).await?;
/// assert!(matches!(second, Reservation::NotUntil { .. })); // the minute's one request is spent
///
/// # let local = std::sync::Arc::new(llm_failover::provider::openai::OpenAi::new(
/// #     llm_failover::ProviderId::new("local"),
/// #     "http://127.0.0.1:11434/v1".parse().unwrap(),
/// # ).with_chat_model("llama3.2"));
/// let client = Client::builder()
///     .provider(local, llm_failover::ProviderSettings::new())
///     .limiter_store(store)
///     .build()?;
/// # let _ = client;
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
pub struct MemoryStore {
    keys: RwLock<HashMap<LimitKey, Arc<Mutex<KeyState>>>>,
    /// Some key exists (set once, before the first is inserted).
    any: AtomicBool,
    allowance: Duration,
}

impl MemoryStore {
    /// An empty store whose buckets hold nothing in reserve.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store whose buckets keep `allowance` of refill in reserve (see
    /// [`Policy::latency_allowance`](crate::config::Policy)).
    pub fn with_latency_allowance(allowance: Duration) -> Self {
        MemoryStore {
            allowance,
            ..Self::default()
        }
    }

    fn existing(&self, key: &LimitKey) -> Option<Arc<Mutex<KeyState>>> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        let keys = self.keys.read().unwrap_or_else(PoisonError::into_inner);
        keys.get(key).cloned()
    }

    fn state(&self, key: &LimitKey, limits: Option<&Limits>, now: Instant) -> Arc<Mutex<KeyState>> {
        if let Some(s) = self.existing(key) {
            return s;
        }
        let mut keys = self.keys.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = keys.get(key) {
            return s.clone();
        }
        let state = Arc::new(Mutex::new(limits.map_or_else(KeyState::default, |l| {
            KeyState::from_limits(l, self.allowance, now)
        })));
        self.any.store(true, Ordering::Release);
        keys.insert(key.clone(), state.clone());
        state
    }

    fn with<T>(
        &self,
        key: &LimitKey,
        limits: Option<&Limits>,
        now: Instant,
        f: impl FnOnce(&mut KeyState) -> T,
    ) -> T {
        let state = self.state(key, limits, now);
        let mut guard = state.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut guard)
    }
}

#[async_trait]
impl LimiterStore for MemoryStore {
    async fn reserve(
        &self,
        key: &LimitKey,
        limits: &Limits,
        cost: Cost,
        max_wait: Duration,
        now: Instant,
    ) -> Result<Reservation> {
        if self.admits_freely(key, limits) {
            // Unknown: nothing would be booked, so nothing is created.
            return Ok(Reservation::Granted {
                wait: Duration::ZERO,
                token_room: None,
            });
        }
        Ok(
            self.with(key, Some(limits), now, |s| match s.wait(cost, now) {
                Err(too_large) => too_large,
                Ok(wait) if wait > max_wait => Reservation::NotUntil { wait },
                Ok(wait) => {
                    s.book(cost, now);
                    Reservation::Granted {
                        wait,
                        token_room: s.token_room(now),
                    }
                }
            }),
        )
    }

    async fn refund(&self, key: &LimitKey, requests: u64, tokens: i64, now: Instant) -> Result<()> {
        // An unknown key has no bucket to give back to.
        let Some(state) = self.existing(key) else {
            return Ok(());
        };
        let mut guard = state.lock().unwrap_or_else(PoisonError::into_inner);
        {
            let s = &mut *guard;
            let give = |b: &mut Option<Bucket>, n: i64| {
                if let Some(b) = b {
                    if n >= 0 {
                        b.refund(n.unsigned_abs(), now)
                    } else {
                        b.charge(n.unsigned_abs(), now)
                    }
                }
            };
            give(&mut s.requests, requests as i64);
            give(&mut s.requests_day, requests as i64);
            give(&mut s.tokens, tokens);
            give(&mut s.tokens_day, tokens);
            // What was reserved beyond use is output (`max_tokens`) in the common case.
            give(&mut s.output_tokens, tokens);
        }
        Ok(())
    }

    async fn raise(&self, key: &LimitKey, t: Tightening, now: Instant) -> Result<()> {
        let allowance = self.allowance;
        self.with(key, None, now, |s| {
            if let Some(report) = &t.report {
                s.apply(report, allowance, now);
            }
            if t.drain {
                s.each_bucket(|b| b.drain(now));
            }
            if let Some(until) = t.gate_until {
                s.raise_gate(until);
            }
        });
        Ok(())
    }

    /// A key with nothing configured that no response has described is unknown, and unknown
    /// admits freely.
    fn admits_freely(&self, key: &LimitKey, limits: &Limits) -> bool {
        *limits == Limits::none() && self.existing(key).is_none()
    }

    async fn peek(&self, key: &LimitKey, cost: Cost, now: Instant) -> Result<LimitSnapshot> {
        // A key never booked is not created by a look at it: its configured limits are only
        // known to `reserve`, which must be the one to create it.
        let Some(state) = self.existing(key) else {
            return Ok(LimitSnapshot {
                wait: Some(Duration::ZERO),
                ..LimitSnapshot::default()
            });
        };
        let mut guard = state.lock().unwrap_or_else(PoisonError::into_inner);
        let s = &mut *guard;
        let view = |b: &mut Option<Bucket>| b.as_mut().map(|b| (b.level(now), b.capacity()));
        Ok(LimitSnapshot {
            wait: s.wait(cost, now).ok(),
            requests: view(&mut s.requests),
            tokens: view(&mut s.tokens),
            gate_until: s.gate.filter(|g| *g > now),
            token_room: s.token_room(now),
        })
    }
}
