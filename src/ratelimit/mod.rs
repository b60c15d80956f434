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

mod headers;
mod report;

pub use headers::{delay_in_message, go_duration, parse_limit_headers, retry_after, should_retry};
pub use report::{HeaderDialect, LimitReport, Per, Window};
