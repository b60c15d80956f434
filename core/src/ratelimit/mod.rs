//! Rate limits: what providers state, and how we pace ourselves to fit.
//!
//! Every provider states its limits in response headers (or, for Gemini, in the 429 body).
//! Adapters turn them into a [`LimitReport`]; the limiter keeps, per provider, model and
//! account, a request bucket and a token bucket (and input, output and day-scale buckets when
//! stated) that every report sets to what the provider says and every 429 drains where it is
//! about.
//!
//! # Buckets
//!
//! Capacity = limit per window, continuous refill = limit / window (how OpenAI and Anthropic
//! describe theirs). Limits come from `providers.toml` when given and are learned from the
//! first response that states them; an unknown limit admits freely until a header says
//! otherwise. A configured limit is a ceiling: a provider stating a lower one is believed, a
//! higher one is not (whoever configured less meant to leave the rest to someone else). A
//! window that is not a minute (a day, 10 s) is learned from the reset: a stated (limit,
//! remaining, reset) refills at (limit − remaining) / reset.
//!
//! A reservation books every bucket at once and returns its wait; waiters are served in
//! booking order. Who books when is the [admission order](crate::admission): an interactive
//! request books at once, however far ahead; a bulk one only a slot it can use at once, after
//! waiting its turn in this process's line for the key. A cost above a bucket's capacity is refused at once
//! ([`Reservation::TooLarge`]): "never" is not "not now". A stated `remaining` is the truth
//! when it was stated, both ways: the level becomes it, less what this client booked since
//! the request was sent. A 429 drains the dimension it is about (the one the same answer
//! states at 0, or the one its body names; the per-minute buckets when it names none), never
//! one the same answer says has room, and sets a gate that is only ever moved later.
//!
//! # Header precedence
//!
//! For "how long to wait": `retry-after-ms`, then `Retry-After` (seconds or HTTP-date), then
//! the provider's reset headers, then a delay stated in the body (Gemini `RetryInfo`) or the
//! error message. A value that is negative, not finite, unparseable, in the past or absurdly
//! large is ignored and the router falls back to jittered backoff.
//!
//! # Examples
//!
//! A bucket of 60 requests a minute holds 60 and refills one a second; the header
//! `retry-after-ms` beats `Retry-After`:
//!
//! ```
//! use std::time::Duration;
//! use reqwest::header::{HeaderMap, HeaderValue};
//! use llm_failover::clock::{Clock, TokioClock};
//! use llm_failover::ratelimit::{
//!     parse_limit_headers, Demand, HeaderDialect, LimitKey, LimiterStore, Limits, MemoryStore,
//!     Reservation,
//! };
//! use llm_failover::ProviderId;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> llm_failover::Result<()> {
//! let store = MemoryStore::new();
//! let key = LimitKey::new(ProviderId::new("openai"), "gpt-4o-mini");
//! let limits = Limits::none().with_rpm(60);
//! let now = tokio::time::Instant::now();
//! let max_wait = Duration::from_secs(10);
//! for _ in 0..60 {
//!     let r = store.reserve(&key, &limits, Demand::one_request(), max_wait, now).await?;
//!     assert!(matches!(r, Reservation::Granted { wait, .. } if wait.is_zero()));
//! }
//! let next = store.reserve(&key, &limits, Demand::one_request(), max_wait, now).await?;
//! assert!(matches!(next, Reservation::Granted { wait, .. }
//!     if wait > Duration::ZERO && wait <= Duration::from_secs(1)));
//!
//! let mut headers = HeaderMap::new();
//! headers.insert("retry-after-ms", HeaderValue::from_static("1500"));
//! headers.insert("retry-after", HeaderValue::from_static("30"));
//! let report = parse_limit_headers(HeaderDialect::OpenAi, &headers, TokioClock.both());
//! assert_eq!(report.retry_after, Some(Duration::from_millis(1500)));
//!
//! let mut absurd = HeaderMap::new();
//! absurd.insert("retry-after", HeaderValue::from_static("-5"));
//! let report = parse_limit_headers(HeaderDialect::OpenAi, &absurd, TokioClock.both());
//! assert_eq!(report.retry_after, None); // ignored: backoff decides
//! # Ok(()) }
//! ```

mod bucket;
mod contact;
mod duration;
mod estimate;
mod headers;
mod ietf;
mod key_state;
mod ledger;
mod limiter;
mod limits;
mod memory;
mod message;
mod named;
mod paced;
mod report;
mod retry_after;
mod shared;
mod stated;
mod store;
mod value;

#[cfg(test)]
mod random_input_tests;

pub use headers::parse_limit_headers;
pub use limits::Limits;
pub use memory::MemoryStore;
pub(crate) use named::named_drain;
pub use report::{HeaderDialect, LimitReport, Per, Window};
pub(crate) use shared::redis_limiters;
pub use shared::{REDIS_URL_VAR, RedisTls, SharedSettings, WhenDown};
/// What the Redis wing's limiter store uses of the limiter's insides, and where it adds
/// itself (`crate::wing::redis`).
pub(crate) mod wing {
    pub use super::key_state::ConfiguredLevels;
    pub use super::ledger::LedgerBook;
    pub use super::memory::MemoryStore;
    pub use super::shared::{REDIS_LIMITERS, RedisLimiters};
}

pub use store::{
    BucketSnapshot, Charge, Demand, Dimension, Drain, LimitKey, LimitSnapshot, LimiterStore,
    Reservation, Tightening, Turn,
};

// Internals, public with `test-util` for tests, benches and fuzzers.
#[cfg_attr(feature = "test-util", visibility::make(pub))]
#[cfg_attr(not(feature = "test-util"), allow(unused_imports))]
pub(crate) use bucket::{Bucket, InsufficientCapacity};
pub(crate) use contact::{ContactPlace, Entered, Heard};
#[cfg_attr(feature = "test-util", visibility::make(pub))]
#[cfg_attr(not(feature = "test-util"), allow(unused_imports))]
pub(crate) use duration::go_duration;
#[cfg_attr(feature = "test-util", visibility::make(pub))]
#[cfg_attr(not(feature = "test-util"), allow(unused_imports))]
pub(crate) use estimate::{
    DEFAULT_OUTPUT_TOKENS, Encoding, IMAGE_TOKENS, REPLY_PRIMING, TOKENS_PER_MESSAGE,
    TOKENS_PER_TOOL, chat_cost_bound, embedding_cost_bound, embedding_floor, estimate_chat,
    estimate_embedding, input_floor, preload,
};
#[cfg_attr(feature = "test-util", visibility::make(pub))]
#[cfg_attr(not(feature = "test-util"), allow(unused_imports))]
pub(crate) use headers::RATE_LIMIT_HEADERS;
pub(crate) use limiter::{Limiter, Patience, Permit};
#[cfg_attr(feature = "test-util", visibility::make(pub))]
#[cfg_attr(not(feature = "test-util"), allow(unused_imports))]
pub(crate) use message::delay_in_message;
#[cfg_attr(feature = "test-util", visibility::make(pub))]
#[cfg_attr(not(feature = "test-util"), allow(unused_imports))]
pub(crate) use retry_after::{MAX_SANE_RETRY_AFTER, retry_after, should_retry};
