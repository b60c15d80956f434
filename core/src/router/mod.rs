//! The router: failover order, breakers, admission and the attempt loop.
//!
//! Every request takes the same way (`attempt.rs`), at most `max_attempts` sends that failed
//! for reasons other than throttling, within the request's deadline:
//!
//! 1. **Pick** (`choose.rs`). The providers of the active environment that serve the
//!    capability, in the configured order — except that a provider which already failed in
//!    this request ranks behind those that have not. Each is looked at without a store call:
//!    skipped while it backs off after a transient failure in this request, or while its
//!    breaker is open; otherwise its limit key and price are settled (below).
//! 2. **Admit.** The first provider whose buckets can admit the request within
//!    `spill_after` is booked (one store call); if every wait is longer, the one that can
//!    start soonest is booked, within the deadline. A request larger than a bucket's capacity
//!    is never sent there; if it fits nowhere it fails at once with `RequestTooLarge`. When
//!    nothing is available, the router waits for the earliest reopen if that is within both
//!    the deadline and `max_retry_after`, else returns `AllProvidersUnavailable`.
//!
//!    **What a request costs.** One request slot always. Tokens only where a token limit
//!    applies (configured, or stated by the provider in any response); otherwise nothing is
//!    estimated. Where one applies and the request fits in the room the last booking left in
//!    the upper half of every token bucket, the booking is the tokenizer-free bound (a token
//!    per UTF-8 byte, never below the tiktoken estimate): admitted at once either way, the
//!    excess held only until the answer's usage gives it back. Otherwise it is the tiktoken
//!    estimate, counted once per model per request.
//! 3. **Send and classify.** The slot's wait, then the breaker is asked again if there was
//!    one (never send into a breaker another request opened meanwhile), then the adapter
//!    builds the request and the transport sends it. A failure is decided by a pure function
//!    (`decide.rs`: what happened, the policy, `now`, the jitter source → an action) and the
//!    action applied, by [`Disposition`](crate::Disposition):
//!    * success closes a half-open breaker and reconciles reserved tokens with reported usage;
//!    * `RateLimited` drains the buckets, gates them and opens the breaker until the stated
//!      delay (`retry-after-ms`, `Retry-After`, `RetryInfo`, an exhausted window's reset, a
//!      delay in the message) or, when none is stated, a full-jitter backoff; the request
//!      fails over at once — it never sleeps on a throttled provider while another is free;
//!    * `QuotaExhausted` opens the breaker until the stated reset or `quota_cooldown`;
//!    * a transient fault counts toward the breaker's threshold and backs that provider off
//!      with full jitter for this request, spending retry budget; the next attempt goes to
//!      another provider when one is free;
//!    * a terminal error is returned at once: no retry, no failover, the provider's message
//!      kept.
//!
//! Breakers and buckets are scoped per provider for the configured key and separately per
//! tenant for per-request credentials. A 429 opens the provider's breaker for every model of
//! that provider (the buckets themselves are per model).
//!
//! Streaming fails over only until the first content arrives; after that an error surfaces on
//! the stream.
//!
//! Layers inside: `options`, `breaker` (pure) and `breaker_store` at the bottom; `decide`
//! (pure); `core` (the router's state); `stream`, `job`; `request` (one request's state);
//! `choose`; `attempt` on top.

mod attempt;
mod breaker;
mod breaker_store;
mod budget;
mod choose;
mod core;
mod decide;
mod job;
mod options;
mod request;
mod stream;

pub(crate) use self::core::{BudgetParts, Parts, Router};
pub(crate) use job::{BulkCall, Chat, Embed, Stream, Transcribe};
pub(crate) use options::NO_OPTIONS;
pub use options::RequestOptions;
pub use stream::ChatStream;

#[cfg(test)]
mod tests;
