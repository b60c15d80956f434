//! Where bucket state lives: [`LimiterStore`] and its in-memory implementation.
//!
//! The state of one (provider, model, account) changes through four operations only —
//! [`reserve`](LimiterStore::reserve), [`refund`](LimiterStore::refund),
//! [`raise`](LimiterStore::raise) and [`peek`](LimiterStore::peek) — so the same trait is
//! served in this process ([`MemoryStore`], the default) and by Redis for several processes
//! (the Redis wing's `RedisStore`: one atomic script per operation, timed by the server's
//! clock) with the same semantics. Its three provided methods only read: whether a key admits without booking
//! (`admits_freely`), whether the store is shared (`is_shared`), and whether a booked slot
//! was closed since (`blocked`).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::LimitReport;
use super::Limits;
use super::report::FromNow;
use crate::error::Result;
use crate::id::ProviderId;

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
/// let customer = key.clone().with_account(Some(Arc::from("acme")));
/// assert_eq!(customer.to_string(), "openai/gpt-4o-mini@acme");
/// assert_ne!(key, customer); // separate buckets
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LimitKey {
    /// The provider.
    pub provider: ProviderId,
    /// The model.
    pub model: String,
    /// The account whose limits are spent: `None` for the configured key, the
    /// [account](crate::RequestOptions::account) of a per-request credential.
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

/// What one request takes from a key's buckets: a request slot, the tokens admission counts
/// for it (its input's estimate and its `max_tokens`), the seconds of its audio. In limit
/// units, never money (a budget prices a demand separately).
///
/// # Examples
///
/// ```
/// use llm_failover::ratelimit::Demand;
///
/// let chat = Demand { input_tokens: 1_200, output_tokens: 256, ..Demand::one_request() };
/// assert_eq!((chat.requests, chat.tokens()), (1, 1_456));
///
/// let speech = Demand::audio(90);
/// assert_eq!((speech.requests, speech.audio_seconds, speech.tokens()), (1, 90, 0));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Demand {
    /// Requests (1 per attempt).
    pub requests: u64,
    /// Estimated input tokens.
    pub input_tokens: u64,
    /// Reserved output tokens (`max_tokens`).
    pub output_tokens: u64,
    /// Seconds of audio (speech-to-text providers with an audio budget).
    pub audio_seconds: u64,
}

impl Demand {
    /// One request with no tokens.
    pub fn one_request() -> Self {
        Demand {
            requests: 1,
            ..Demand::default()
        }
    }

    /// One speech-to-text request for `audio_seconds` of audio.
    pub fn audio(audio_seconds: u64) -> Self {
        Demand {
            requests: 1,
            audio_seconds,
            ..Demand::default()
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
/// use llm_failover::ratelimit::{Demand, Dimension, LimiterStore, Limits, MemoryStore, Reservation};
/// # use llm_failover::{ratelimit::LimitKey, ProviderId};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> llm_failover::Result<()> {
/// # let key = LimitKey::new(ProviderId::new("groq"), "llama3");
/// # let now = tokio::time::Instant::now();
/// let store = MemoryStore::new();
/// let limits = Limits::none().with_tpm(6_000);
/// let huge = Demand { input_tokens: 9_000, ..Demand::one_request() };
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
    /// Requests per minute (configured).
    RequestsPerMinute,
    /// Tokens per minute (configured).
    TokensPerMinute,
    /// Requests per day (configured).
    RequestsPerDay,
    /// Tokens per day (configured).
    TokensPerDay,
    /// Seconds of audio per hour (configured).
    AudioSecondsPerHour,
    /// Requests, as the provider states them (over the window learned from its resets).
    Requests,
    /// Tokens, as the provider states them.
    Tokens,
    /// Input tokens, as the provider states them.
    InputTokens,
    /// Output tokens, as the provider states them.
    OutputTokens,
}

impl fmt::Display for Dimension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dimension::RequestsPerMinute => "requests per minute",
            Dimension::TokensPerMinute => "tokens per minute",
            Dimension::RequestsPerDay => "requests per day",
            Dimension::TokensPerDay => "tokens per day",
            Dimension::AudioSecondsPerHour => "audio seconds per hour",
            Dimension::Requests => "requests (the provider's stated limit)",
            Dimension::Tokens => "tokens (the provider's stated limit)",
            Dimension::InputTokens => "input tokens (the provider's stated limit)",
            Dimension::OutputTokens => "output tokens (the provider's stated limit)",
        })
    }
}

/// The answer to a reservation.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use llm_failover::ratelimit::{Demand, LimitKey, LimiterStore, Limits, MemoryStore, Reservation};
/// use llm_failover::ProviderId;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> llm_failover::Result<()> {
/// let store = MemoryStore::new();
/// let key = LimitKey::new(ProviderId::new("openai"), "gpt-4o-mini");
/// let (limits, max_wait) = (Limits::none().with_rpm(60), Duration::from_secs(5));
/// let now = tokio::time::Instant::now();
/// match store.reserve(&key, &limits, Demand::one_request(), max_wait, now).await? {
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
        /// This booking's number, increasing per key: hand it back with the report of the
        /// answer ([`Tightening::booking`]), so what was booked after it is told apart.
        booking: u64,
    },
    /// Not booked: the wait would exceed the caller's `max_wait`.
    NotUntil {
        /// The wait a reservation would have had.
        wait: Duration,
    },
    /// Not booked: the budget of [`Charge`] number `charge` (of those asked with it,
    /// [`LimiterStore::reserve_charged`]) cannot cover its amount until its window ends.
    OverBudget {
        /// The index of the charge that does not fit.
        charge: usize,
        /// What its ledger holds already (spent and reserved), in nano-dollars.
        spent: u64,
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

/// What one request reserves of one budget: an amount of money in the ledger of a scope's
/// calendar window, which may hold at most `cap`. Reserved with the request's buckets in one
/// store call ([`LimiterStore::reserve_charged`]), settled after its answer
/// ([`LimiterStore::settle`]).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use llm_failover::ratelimit::{Charge, Demand, LimitKey, LimiterStore, Limits, MemoryStore, Reservation};
/// use llm_failover::ProviderId;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> llm_failover::Result<()> {
/// let store = MemoryStore::new();
/// let key = LimitKey::new(ProviderId::new("openai"), "gpt-4o-mini");
/// let now = tokio::time::Instant::now();
/// // $1.00 a day; each request reserves an estimate of 40 cents.
/// let day = Charge::new("environment/prod/day/2026-12-03", 1_000_000_000, 400_000_000, Duration::from_secs(3_600));
/// for _ in 0..2 {
///     let r = store.reserve_charged(&key, &Limits::none(), Demand::one_request(), &[day.clone()], Duration::ZERO, now).await?;
///     assert!(matches!(r, Reservation::Granted { .. }));
/// }
/// let third = store.reserve_charged(&key, &Limits::none(), Demand::one_request(), &[day.clone()], Duration::ZERO, now).await?;
/// assert_eq!(third, Reservation::OverBudget { charge: 0, spent: 800_000_000 });
/// // The first answer cost 10 cents: 30 come back, and a third request fits.
/// store.settle(&[(day.ledger.clone(), 300_000_000)], now).await?;
/// let fourth = store.reserve_charged(&key, &Limits::none(), Demand::one_request(), &[day], Duration::ZERO, now).await?;
/// assert!(matches!(fourth, Reservation::Granted { .. }));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Charge {
    /// The ledger: whose budget and which window (`environment/prod/day/2026-12-03`), the
    /// same name in every process.
    pub ledger: Arc<str>,
    /// What the window allows, in nano-dollars.
    pub cap: u64,
    /// What this request reserves (its estimated cost), in nano-dollars.
    pub amount: u64,
    /// How long the ledger must be kept: until its window ends, at least.
    pub keep: Duration,
}

impl Charge {
    /// `amount` of the `cap` that `ledger` allows, kept for `keep` (nano-dollars).
    pub fn new(ledger: impl Into<Arc<str>>, cap: u64, amount: u64, keep: Duration) -> Self {
        Charge {
            ledger: ledger.into(),
            cap,
            amount,
            keep,
        }
    }
}

/// A turn a shared store promised a bulk line ([`LimiterStore::take_turn`]): its number, to
/// hand back when asking at it, and the wait until it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Turn {
    /// The promise's number.
    pub number: u64,
    /// The wait from the answer until the turn.
    pub wait: Duration,
}

/// What the limiter is told about an answer: a 429's gate and drain, which only tighten, and
/// the response's report, which states the truth and may loosen as well as tighten.
///
/// # Examples
///
/// What a 429 with `retry-after: 5` does to a key:
///
/// ```
/// use std::time::Duration;
/// use llm_failover::ratelimit::{Demand, Drain, LimitKey, LimiterStore, Limits, MemoryStore, Tightening};
/// use llm_failover::ProviderId;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> llm_failover::Result<()> {
/// let store = MemoryStore::new();
/// let key = LimitKey::new(ProviderId::new("openai"), "gpt-4o-mini");
/// let (limits, now) = (Limits::none().with_rpm(60), tokio::time::Instant::now());
/// store.reserve(&key, &limits, Demand::one_request(), Duration::ZERO, now).await?;
///
/// let mut after_429 = Tightening::default();
/// after_429.drain = Drain::every_minute();
/// after_429.gate_until = Some(now + Duration::from_secs(5));
/// store.raise(&key, after_429, now).await?;
/// let snapshot = store.peek(&key, Demand::one_request(), now).await?;
/// assert_eq!(snapshot.gate_until, Some(now + Duration::from_secs(5)));
/// assert!(snapshot.wait.unwrap() >= Duration::from_secs(5));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Tightening {
    /// Nothing passes before this instant (a 429's stated delay). Never moved earlier.
    pub gate_until: Option<Instant>,
    /// The buckets a 429 empties: those of the limit it is about.
    pub drain: Drain,
    /// A response's report: the limits it states are adopted, its windows learned from the
    /// resets, and the levels set to what it says remains, less what was booked after
    /// [`booking`](Self::booking).
    pub report: Option<LimitReport>,
    /// The booking whose answer `report` is ([`Reservation::Granted::booking`]); `None` for
    /// a request admitted without one.
    pub booking: Option<u64>,
    /// Tokens given back (> 0) or charged (< 0) in the configured token buckets with this
    /// answer: what it used against what was booked, as [`LimiterStore::refund`] would —
    /// told together with the report, so a shared store hears an answer in one call.
    pub tokens_back: i64,
}

/// Which buckets a 429 empties: those of the dimensions it is about, with windows up to a few
/// minutes, and also the day-scale ones when `day`.
///
/// # Examples
///
/// ```
/// use llm_failover::ratelimit::Drain;
///
/// // A 429 that names nothing: the per-minute buckets of every dimension.
/// let any = Drain::every_minute();
/// assert!(any.requests && any.tokens && !any.day);
/// assert_eq!(Drain::default(), Drain::none());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Drain {
    /// The request buckets.
    pub requests: bool,
    /// The token buckets (input and output together).
    pub tokens: bool,
    /// The input-token buckets.
    pub input_tokens: bool,
    /// The output-token buckets.
    pub output_tokens: bool,
    /// Also the buckets of those dimensions whose window is longer than a few minutes.
    pub day: bool,
}

impl Drain {
    /// Drains nothing.
    pub const fn none() -> Self {
        Drain {
            requests: false,
            tokens: false,
            input_tokens: false,
            output_tokens: false,
            day: false,
        }
    }

    /// The per-minute buckets of every dimension: a 429 that names no limit.
    pub const fn every_minute() -> Self {
        Drain {
            requests: true,
            tokens: true,
            input_tokens: true,
            output_tokens: true,
            day: false,
        }
    }

    /// Drains something.
    pub fn any(&self) -> bool {
        self.requests || self.tokens || self.input_tokens || self.output_tokens
    }
}

/// One bucket as the limiter sees it now: a part of a [`LimitSnapshot`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use llm_failover::ratelimit::BucketSnapshot;
///
/// let now = tokio::time::Instant::now();
/// // 45 of 60 requests a minute left: full again in 15 s at one a second.
/// let b = BucketSnapshot::new(45.0, 60, Duration::from_secs(60), Some(now + Duration::from_secs(15)));
/// assert_eq!(b.capacity, 60);
/// assert!(b.level < f64::from(b.capacity as u32));
/// ```
#[derive(Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct BucketSnapshot {
    /// What could be sent now: requests, or tokens. Fractional (the bucket refills
    /// continuously), and negative when slots are booked ahead of time.
    pub level: f64,
    /// The limit per window.
    pub capacity: u64,
    /// The window the capacity refills over: the configured limit's period, or the one
    /// learned for what the provider states.
    pub window: Duration,
    /// When the bucket is full again at its refill rate — for a fixed window (a counter that
    /// starts again at each boundary) the boundary that fills it; `None` when it is full now.
    pub reset: Option<Instant>,
}

/// Its reset as where it stands from now (`reset: Some(in 15.0 s)`), not as a raw `Instant`.
impl fmt::Debug for BucketSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BucketSnapshot")
            .field("level", &self.level)
            .field("capacity", &self.capacity)
            .field("window", &self.window)
            .field("reset", &self.reset.map(FromNow))
            .finish()
    }
}

impl BucketSnapshot {
    /// A view of a bucket (for a [`LimiterStore`] of your own).
    pub fn new(level: f64, capacity: u64, window: Duration, reset: Option<Instant>) -> Self {
        BucketSnapshot {
            level,
            capacity,
            window,
            reset,
        }
    }
}

/// A read-only view of one key's state ([`Client::limits`](crate::Client::limits)).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use llm_failover::ratelimit::{Demand, LimitKey, LimiterStore, Limits, MemoryStore};
/// use llm_failover::ProviderId;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> llm_failover::Result<()> {
/// let store = MemoryStore::new();
/// let key = LimitKey::new(ProviderId::new("openai"), "gpt-4o-mini");
/// let (limits, now) = (Limits::none().with_rpm(60), tokio::time::Instant::now());
/// store.reserve(&key, &limits, Demand::one_request(), Duration::ZERO, now).await?;
///
/// let snapshot = store.peek(&key, Demand::one_request(), now).await?;
/// let requests = snapshot.requests.unwrap();
/// assert_eq!(requests.capacity, 60);
/// assert_eq!(requests.window, Duration::from_secs(60));
/// assert_eq!(requests.level, 59.0); // one request booked
/// assert_eq!(requests.reset, Some(now + Duration::from_secs(1))); // refilled in a second
/// assert_eq!(snapshot.wait, Some(Duration::ZERO));
/// assert_eq!(snapshot.gate_until, None);
/// # Ok(()) }
/// ```
#[derive(Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct LimitSnapshot {
    /// The request bucket that binds now (the lowest level, configured or stated), when any
    /// is known.
    pub requests: Option<BucketSnapshot>,
    /// The token bucket that binds now, likewise.
    pub tokens: Option<BucketSnapshot>,
    /// The pace learned from 429s alone, in requests per second, for a provider that states
    /// no limit and has none configured.
    pub learned_rate: Option<f64>,
    /// The gate, when one is set in the future: nothing is sent before it (a stated reset,
    /// a `Retry-After`).
    pub gate_until: Option<Instant>,
    /// How long a reservation of the peeked cost would wait now (`None`: too large).
    pub wait: Option<Duration>,
    /// Tokens that could be booked now while every token bucket (per minute, input per
    /// minute, per day) stays at least half full; `None` when no token bucket is known.
    /// Where a request fits in this room, a generous tokenizer-free estimate admits it as an
    /// exact count would.
    pub token_room: Option<u64>,
}

/// Its gate as where it stands from now (`gate_until: Some(in 3.0 s)`), not as a raw `Instant`.
impl fmt::Debug for LimitSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitSnapshot")
            .field("requests", &self.requests)
            .field("tokens", &self.tokens)
            .field("learned_rate", &self.learned_rate)
            .field("gate_until", &self.gate_until.map(FromNow))
            .field("wait", &self.wait)
            .field("token_room", &self.token_room)
            .finish()
    }
}

impl LimitSnapshot {
    /// Whether it knows nothing: no bucket, no learned pace, no gate.
    pub fn is_empty(&self) -> bool {
        self.requests.is_none()
            && self.tokens.is_none()
            && self.learned_rate.is_none()
            && self.gate_until.is_none()
    }

    /// What `limits` allow before anything was sent: the binding (smallest) request and token
    /// limits, full (`None` when nothing is configured).
    pub(crate) fn unused(limits: &Limits) -> Option<LimitSnapshot> {
        const MINUTE: Duration = Duration::from_secs(60);
        const DAY: Duration = Duration::from_secs(86_400);
        let full = |buckets: [(Option<std::num::NonZeroU64>, Duration); 2]| {
            buckets
                .into_iter()
                .filter_map(|(limit, window)| Some((limit?.get(), window)))
                .min_by_key(|&(limit, _)| limit)
                .map(|(limit, window)| BucketSnapshot::new(limit as f64, limit, window, None))
        };
        let snapshot = LimitSnapshot {
            requests: full([(limits.rpm, MINUTE), (limits.rpd, DAY)]),
            tokens: full([(limits.tpm, MINUTE), (limits.tpd, DAY)]),
            wait: Some(Duration::ZERO),
            ..LimitSnapshot::default()
        };
        (!snapshot.is_empty()).then_some(snapshot)
    }
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
/// # use llm_failover::ratelimit::{Demand, LimitKey, LimitSnapshot, LimiterStore, Limits};
/// # use llm_failover::ratelimit::{Reservation, Tightening};
/// # use llm_failover::{Client, Result};
///
/// #[derive(Debug)]
/// struct Unlimited;
///
/// #[async_trait]
/// impl LimiterStore for Unlimited {
///     async fn reserve(
///         &self, _: &LimitKey, _: &Limits, _: Demand, _: Duration, _: Instant,
///     ) -> Result<Reservation> {
///         Ok(Reservation::Granted { wait: Duration::ZERO, token_room: None, booking: 0 })
///     }
///     async fn refund(&self, _: &LimitKey, _: u64, _: i64, _: Instant) -> Result<()> { Ok(()) }
///     async fn raise(&self, _: &LimitKey, _: Tightening, _: Instant) -> Result<()> { Ok(()) }
///     async fn peek(&self, _: &LimitKey, _: Demand, _: Instant) -> Result<LimitSnapshot> {
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
        cost: Demand,
        max_wait: Duration,
        now: Instant,
    ) -> Result<Reservation>;

    /// Books `cost` for `key` as [`reserve`](Self::reserve) does, and each of `charges`
    /// with it, atomically: if one does not fit its ledger ([`Reservation::OverBudget`]) or
    /// the buckets refuse, nothing is booked anywhere. A reserve-then-settle, never a
    /// check-then-increment: processes sharing the store never overspend a ledger together.
    ///
    /// The default, for a store that keeps no ledgers: `reserve` when there is nothing to
    /// charge, else a `Config` error (see [`keeps_budgets`](Self::keeps_budgets)).
    async fn reserve_charged(
        &self,
        key: &LimitKey,
        limits: &Limits,
        cost: Demand,
        charges: &[Charge],
        max_wait: Duration,
        now: Instant,
    ) -> Result<Reservation> {
        if charges.is_empty() {
            return self.reserve(key, limits, cost, max_wait, now).await;
        }
        Err(self.keeps_budgets().err().unwrap_or_else(|| {
            crate::error::Error::config("this limiter store does not reserve budgets")
        }))
    }

    /// A bulk line's ask ([`take_turn`](Self::take_turn)) with `charges` booked as
    /// [`reserve_charged`](Self::reserve_charged) books them. The default: `take_turn`
    /// when there is nothing to charge, else `reserve_charged` with no wait and no turn.
    async fn take_turn_charged(
        &self,
        key: &LimitKey,
        limits: &Limits,
        cost: Demand,
        charges: &[Charge],
        held: Option<u64>,
        now: Instant,
    ) -> Result<(Reservation, Option<Turn>)> {
        if charges.is_empty() {
            return self.take_turn(key, limits, cost, held, now).await;
        }
        let reservation = self
            .reserve_charged(key, limits, cost, charges, Duration::ZERO, now)
            .await?;
        Ok((reservation, None))
    }

    /// Gives back (`> 0`) or charges (`< 0`) nano-dollars in each named ledger: what an
    /// answer cost against what was reserved for it, or a reservation not sent.
    async fn settle(&self, ledgers: &[(Arc<str>, i64)], now: Instant) -> Result<()> {
        let _ = now;
        if ledgers.is_empty() {
            return Ok(());
        }
        Err(self.keeps_budgets().err().unwrap_or_else(|| {
            crate::error::Error::config("this limiter store does not keep budgets")
        }))
    }

    /// Whether this store keeps budgets' ledgers, checked when a client with a budget is
    /// built: `Config` saying why not (the default: a store of your own keeps none until it
    /// implements [`reserve_charged`](Self::reserve_charged) and [`settle`](Self::settle)).
    fn keeps_budgets(&self) -> Result<()> {
        Err(crate::error::Error::config(
            "this limiter store keeps no budgets: a budget needs the in-memory store or \
             shared limits through Redis",
        ))
    }

    /// Gives back (`tokens > 0`) or charges (`tokens < 0`) tokens, and gives back
    /// `requests` request slots (a reservation dropped before sending).
    async fn refund(&self, key: &LimitKey, requests: u64, tokens: i64, now: Instant) -> Result<()>;

    /// Tightens the view of `key`.
    async fn raise(&self, key: &LimitKey, tightening: Tightening, now: Instant) -> Result<()>;

    /// Reads the state of `key` and the wait `cost` would have, without booking.
    async fn peek(&self, key: &LimitKey, cost: Demand, now: Instant) -> Result<LimitSnapshot>;

    /// Whether a reservation for `key` under `limits` would book nothing and be granted at
    /// once, known without a call: the caller may then skip [`reserve`](Self::reserve).
    /// `false` (the default) whenever in doubt — a store shared with other processes must
    /// always be asked.
    fn admits_freely(&self, key: &LimitKey, limits: &Limits) -> bool {
        let _ = (key, limits);
        false
    }

    /// Whether other processes share this store (Redis). The client then also tells it
    /// what only this process saw — a breaker that opened (as a gate until it reopens), the
    /// answer to every booking even when it stated nothing — so that the others stop too, and
    /// a half-open probe the store handed out is released as soon as it is answered.
    /// `false` (the default): a store of this process alone, told only what it needs.
    fn is_shared(&self) -> bool {
        false
    }

    /// Whether the slot `booking` booked for `key` may still be used at `now`, or how long
    /// it must wait — a gate raised since it was booked (a 429, a fixed window a refusal
    /// closed; with a shared store, one another process raised or an opened breaker), or
    /// another process's half-open probe out. The client asks after waiting for a booked
    /// slot, before sending. `None` (the default): go ahead.
    async fn blocked(
        &self,
        key: &LimitKey,
        booking: u64,
        now: Instant,
    ) -> Result<Option<Duration>> {
        let _ = (key, booking, now);
        Ok(None)
    }

    /// A bulk request's ask for a slot it can use at once (the
    /// [admission order](crate::admission): interactive requests book ahead, bulk ones wait in
    /// their key's line and never hold a slot ahead of them), as the head of its process's line
    /// for `key`: `held` is the turn the line was promised by an earlier answer.
    ///
    /// A store shared by several processes answers with a promised [`Turn`] as well, so that
    /// their lines do not all ask at the instant the key frees up (one would win, the others
    /// ask again): with `NotUntil`, the asker's own turn (the wait is until it); with a grant,
    /// the turn of the next request of its line. The default (a store of one process, whose
    /// one line per key already takes turns): [`reserve`](Self::reserve) with no wait, and no
    /// turn.
    async fn take_turn(
        &self,
        key: &LimitKey,
        limits: &Limits,
        cost: Demand,
        held: Option<u64>,
        now: Instant,
    ) -> Result<(Reservation, Option<Turn>)> {
        let _ = held;
        let reservation = self.reserve(key, limits, cost, Duration::ZERO, now).await?;
        Ok((reservation, None))
    }

    /// Sends what the store holds back now: a shared store tells each answer's report with
    /// its next call on the key, or within a few milliseconds; a client about to stop
    /// flushes. `Ok` (the default) for a store that holds nothing back.
    async fn flush(&self) -> Result<()> {
        Ok(())
    }

    /// Whether the store can serve this client, asked once before work starts (a batch
    /// checks before it claims or sends anything): a shared store connects and asks its
    /// server now.
    ///
    /// # Errors
    ///
    /// `Config` when the store refuses this client (a wrong password, a user without the
    /// permissions): no request could be admitted, and no item should be spent or settled
    /// for it. A store that cannot be reached now is not an error here: its down mode
    /// governs every request, as it would later. `Ok` (the default) for a store of this
    /// process alone.
    async fn check(&self) -> Result<()> {
        Ok(())
    }
}

fn _obj_safe(_: &dyn LimiterStore) {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ratelimit::{Per, Window};

    /// A reset prints as where it stands from now, never as the clock's raw reading.
    #[tokio::test(start_paused = true)]
    async fn a_reset_prints_as_a_time_from_now_not_a_raw_instant() {
        let now = Instant::now();
        let learned = BucketSnapshot::new(
            45.0,
            60,
            Duration::from_secs(60),
            Some(now + Duration::from_secs(42)),
        );
        let snapshot = LimitSnapshot {
            requests: Some(learned),
            gate_until: Some(now + Duration::from_millis(2_500)),
            ..LimitSnapshot::default()
        };
        let shown = format!("{snapshot:?}");
        assert!(shown.contains("reset: Some(in 42.0 s)"), "{shown}");
        assert!(shown.contains("gate_until: Some(in 2.5 s)"), "{shown}");
        assert!(shown.contains("capacity: 60"), "{shown}");
        assert!(
            !shown.contains("tv_sec") && !shown.contains("Instant"),
            "{shown}"
        );

        let window = Window {
            limit: Some(500),
            remaining: Some(0),
            reset_at: Some(now),
            per: Per::Minute,
        };
        assert_eq!(
            format!("{window:?}"),
            "Window { limit: Some(500), remaining: Some(0), reset_at: Some(now), per: Minute }"
        );
        tokio::time::advance(Duration::from_secs(50)).await;
        let shown = format!("{learned:?}");
        assert!(shown.contains("reset: Some(8.0 s ago)"), "{shown}");
    }
}
