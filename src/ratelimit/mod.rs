//! Rate limits: what providers state, and how we pace ourselves to fit.
//!
//! Every provider states its limits in response headers (or, for Gemini, in the 429 body).
//! Adapters turn them into a [`LimitReport`]; the limiter keeps, per provider and model, a
//! request bucket and a token bucket that every report tightens and every 429 drains.
//!
//! Header precedence for "how long to wait": `retry-after-ms`, then `Retry-After` (seconds or
//! HTTP-date), then the provider's reset headers, then a delay in the error message. A value
//! that is negative, not finite, unparseable, in the past or absurdly large is ignored and the
//! router falls back to jittered backoff.

mod duration;
mod headers;
mod ietf;
mod message;
mod report;
mod retry_after;
mod value;

#[cfg(test)]
mod random_input_tests;

pub use duration::go_duration;
pub use headers::parse_limit_headers;
pub use message::delay_in_message;
pub use report::{HeaderDialect, LimitReport, Per, Window};
pub use retry_after::{retry_after, should_retry, MAX_SANE_RETRY_AFTER};
