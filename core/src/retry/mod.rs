//! Backoff and retry budgets.
//!
//! Retrying is how a client turns one provider's bad minute into an outage: every caller
//! retries at once, the load doubles, the provider stays down (a retry storm). Two limits keep
//! retries honest here:
//!
//! * **Backoff with full jitter** ([`Backoff`]): the n-th wait is uniform in
//!   `[0, min(cap, base · 2ⁿ))`, so callers that failed together do not come back together.
//!   It is used after a transient failure before the same provider is tried again, and after
//!   a 429 that stated no delay (base 1 s, cap 60 s by default).
//! * **A retry budget** ([`RetryBudget`]): re-sends after transient failures may add at most
//!   a fraction (20 % by default) of the first attempts seen over the last ten seconds, plus a
//!   small floor so a quiet client can still retry. When the budget is spent the request fails
//!   with every error so far instead of adding load. Failing over after a 429 or an exhausted
//!   quota is not a retry of a failing provider and does not spend budget.
//!
//! `max_attempts` and the request deadline bound each request on top of both.

mod backoff;
mod budget;

#[cfg_attr(feature = "test-util", visibility::make(pub))]
#[cfg_attr(not(feature = "test-util"), allow(unused_imports))]
pub(crate) use backoff::{Backoff, InvalidBackoff};
#[cfg_attr(feature = "test-util", visibility::make(pub))]
#[cfg_attr(not(feature = "test-util"), allow(unused_imports))]
pub(crate) use budget::RetryBudget;
pub(crate) use budget::SharedBudget;
