//! The router: failover order, breakers, admission and the attempt loop.
//!
//! For every attempt (at most `max_attempts`, within the request's deadline):
//!
//! 1. **Pick.** Providers of the active environment that serve the capability, in the
//!    configured order — except that a provider which already failed in this request ranks
//!    behind those that have not. A provider whose breaker is open, or which is backing off
//!    after a transient failure in this request, is skipped.
//! 2. **Admit.** The first provider whose buckets can admit the request within `spill_after`
//!    is booked; if every wait is longer, the one that can start soonest is booked (within
//!    the deadline). A request larger than a bucket's capacity is never sent there; if it fits
//!    nowhere it fails at once with `RequestTooLarge`. When nothing is available, the router
//!    waits for the earliest reopen if that is within both the deadline and `max_retry_after`,
//!    else returns `AllProvidersUnavailable { retry_at }`.
//!
//!    **What a request costs.** One request slot always. Tokens only where a token limit
//!    applies (configured, or stated by the provider in any response); otherwise nothing is
//!    estimated. Where one applies and the request fits in the upper half of every token
//!    bucket of that provider and model, the booking is [`chat_cost_bound`] (a token per UTF-8
//!    byte, never below the tiktoken estimate): it is admitted at once either way, and the
//!    excess is held only until the answer's usage gives it back. Below that, or for a
//!    request whose bound does not fit, it is the tiktoken estimate ([`estimate_chat`]),
//!    counted once per model per request. The cost of this shortcut: while bounds are in
//!    flight the buckets reach their lower half a little sooner, from where every request is
//!    counted exactly (B1 in `BENCHMARKS.md`: goodput and 429s unchanged). A provider that has nothing configured and has
//!    never stated a limit or throttled is admitted without a booking at all (unknown admits
//!    freely); with a caller-supplied [`LimiterStore`](crate::ratelimit::LimiterStore), which
//!    another process may share, the store is always asked.
//!
//!    [`chat_cost_bound`]: crate::ratelimit::chat_cost_bound
//!    [`estimate_chat`]: crate::ratelimit::estimate_chat
//! 3. **Send and classify** (see [`Disposition`](crate::Disposition)):
//!    * success closes the breaker and reconciles reserved tokens with reported usage;
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
//! **The common request takes a shortcut.** A chat request whose first provider is calm
//! (breaker closed, no failure counted), for the configured key and the adapter's default
//! model, with nothing configured or ever stated about that provider's limits (so nothing would
//! be booked) and the send trace off, is sent at once: the choice above made without its
//! machinery, in a compact future. Its answer, or its failure handed to the attempt loop,
//! ends and counts exactly as it would through the loop (checked answer by answer in
//! `tests/failover.rs`). Everything else runs the general loop, boxed.

mod breaker;
pub(crate) mod engine;
pub(crate) mod options;
mod pick;
mod run;
mod stream;

pub(crate) use breaker::SharedBreaker;
pub use breaker::{Allow, Breaker, BreakerSettings, BreakerState};
pub use options::RequestOptions;
pub use stream::ChatStream;
