//! Rate limits: what providers state, and how we pace ourselves to fit.
//!
//! Every provider states its limits in response headers (or, for Gemini, in the 429 body).
//! Adapters turn them into a [`LimitReport`]; the limiter keeps, per provider and model,
//! a request bucket and a token bucket (and per-day buckets when stated) that every report
//! tightens and every 429 drains.
//!
//! # Buckets
//!
//! Capacity = limit per window, continuous refill = limit / window (how OpenAI and Anthropic
//! describe theirs). Limits come from `providers.toml` when given and are learned from the
//! first response that states them; an unknown limit admits freely until a header says
//! otherwise. A configured limit is a ceiling: a provider stating a lower one is believed, a
//! higher one is not (whoever configured less meant to leave the rest to someone else). A reservation books both buckets at once and returns its wait; waiters are served
//! in booking order. A cost above a bucket's capacity is refused at once
//! ([`Reservation::TooLarge`]): "never" is not "not now". A report lowers a level to the
//! provider's `remaining` and never raises it; a 429 drains every bucket and sets a gate that
//! is only ever moved later.
//!
//! # Header precedence
//!
//! For "how long to wait": `retry-after-ms`, then `Retry-After` (seconds or HTTP-date), then
//! the provider's reset headers, then a delay stated in the body (Gemini `RetryInfo`) or the
//! error message. A value that is negative, not finite, unparseable, in the past or absurdly
//! large is ignored and the router falls back to jittered backoff.

mod bucket;
mod duration;
mod estimate;
mod headers;
mod ietf;
mod key_state;
mod limiter;
mod limits;
mod memory;
mod message;
mod named;
mod paced;
mod report;
mod retry_after;
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
pub use store::{
    BucketSnapshot, Cost, Dimension, Drain, LimitKey, LimitSnapshot, LimiterStore, Reservation,
    Tightening,
};

// Internals, public with `test-util` for tests, benches and fuzzers.
#[cfg_attr(feature = "test-util", visibility::make(pub))]
#[cfg_attr(not(feature = "test-util"), allow(unused_imports))]
pub(crate) use bucket::{Bucket, InsufficientCapacity};
#[cfg_attr(feature = "test-util", visibility::make(pub))]
#[cfg_attr(not(feature = "test-util"), allow(unused_imports))]
pub(crate) use duration::go_duration;
#[cfg_attr(feature = "test-util", visibility::make(pub))]
#[cfg_attr(not(feature = "test-util"), allow(unused_imports))]
pub(crate) use estimate::{
    chat_cost_bound, estimate_chat, input_floor, preload, Encoding, DEFAULT_OUTPUT_TOKENS,
    REPLY_PRIMING, TOKENS_PER_MESSAGE,
};
#[cfg_attr(feature = "test-util", visibility::make(pub))]
#[cfg_attr(not(feature = "test-util"), allow(unused_imports))]
pub(crate) use headers::RATE_LIMIT_HEADERS;
pub(crate) use limiter::{Limiter, Permit};
#[cfg_attr(feature = "test-util", visibility::make(pub))]
#[cfg_attr(not(feature = "test-util"), allow(unused_imports))]
pub(crate) use message::delay_in_message;
#[cfg_attr(feature = "test-util", visibility::make(pub))]
#[cfg_attr(not(feature = "test-util"), allow(unused_imports))]
pub(crate) use retry_after::{retry_after, should_retry, MAX_SANE_RETRY_AFTER};
