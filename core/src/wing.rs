//! What the workspace's wings use of the core's insides: the queue wing
//! (`llm-failover-queue`: its workers time waits by the client's clock, settle with the batch's
//! result lines and speak SQLite's errors as the cache does) and the Redis wing
//! (`llm-failover-redis`: it adds itself to `redis::REDIS_LIMITERS` and `redis::REDIS_CACHES`,
//! which the builders read when `[shared]` or a `redis://` cache asks for Redis).
//!
//! Not a public API: hidden from the documentation and from `public-api.txt`, it changes with
//! the wings in the same commit. An application never needs it.

use std::sync::Arc;
use std::time::SystemTime;

use crate::Client;
use crate::clock::Clock;

/// Wall-clock milliseconds since the Unix epoch, as every timestamp of the queue.
pub fn wall_ms(at: SystemTime) -> i64 {
    crate::clock::wall_ms(at)
}

/// The clock `client` times its waits by: a worker's leases and snoozes use the same one.
pub fn client_clock(client: &Client) -> &Arc<dyn Clock> {
    client.clock()
}

/// An SQLite error as the core words it: what was being done, on which file, and whether
/// another connection held the lock (`busy`: how long the wait was).
#[cfg(feature = "sqlite")]
pub fn sqlite_error(subject: &str, busy: &str, doing: &str, e: rusqlite::Error) -> crate::Error {
    crate::Error::sqlite(subject, busy, doing, e)
}

/// Where and how `value` fails `validator` (`/urgency: enum, /id: type (and 2 more)`), as a
/// structured answer's check words it; `None` when it is valid.
#[cfg(feature = "jsonschema")]
pub fn schema_failures(
    validator: &jsonschema::Validator,
    value: &serde_json::Value,
) -> Option<String> {
    crate::types::schema_failures(validator, value)
}

/// The errors the router ends a request with, for the queue's tables of what a worker does
/// with each.
pub mod errors {
    use std::time::Duration;

    use tokio::time::Instant;

    use crate::Error;

    /// Every provider closed until `retry_at` (`wait` from now), after `attempts`.
    pub fn all_unavailable(retry_at: Instant, wait: Duration, attempts: Vec<Error>) -> Error {
        Error::all_unavailable(retry_at, wait, attempts)
    }

    /// A budget that cannot cover a request until `retry_at`, `wait` from now.
    pub fn budget_exhausted(retry_at: Instant, wait: Duration) -> Error {
        Error::budget_exhausted("the budget is spent".to_owned(), retry_at, wait)
    }

    /// Every attempt failed.
    pub fn all_failed(attempts: Vec<Error>) -> Error {
        Error::all_failed(attempts)
    }

    /// `e`, after `sends` requests were sent.
    pub fn with_sends(e: Error, sends: u32) -> Error {
        e.with_sends(sends)
    }
}

/// The order a limiter's line serves waiters of these priorities and tenants in, when all wait
/// at once and no tenant was served yet (indexes into `waiting`): the rule's table, for the
/// queue's claim to be checked against.
pub fn serve_order(
    waiting: &[(crate::admission::Priority, crate::admission::Tenant)],
) -> Vec<usize> {
    let places: Vec<crate::admission::Place> = waiting
        .iter()
        .map(|(priority, tenant)| crate::admission::Place {
            priority: *priority,
            tenant: tenant.clone(),
        })
        .collect();
    crate::admission::serve_order(&places)
}

/// The batch's result files, input lines and outcomes, as the batch on the queue writes and
/// reads them.
pub mod batch {
    pub use crate::batch::wing::*;
}

/// Where a provider wing's adapter goes: a wing that brings a provider kind (the Bedrock wing,
/// `llm-failover-bedrock`) adds a `ProviderWing` to `PROVIDER_WINGS` when the build links it;
/// `provider::from_config` finds it there and, without it, says which feature is missing.
pub mod providers {
    /// What a status means when the body names nothing an adapter knows: one reading for
    /// every kind (`tests/it/conformance.rs` holds every adapter to it).
    pub use crate::provider::body::kind_for_status;
    pub use crate::provider::{PROVIDER_WINGS, ProviderWing};
    /// For the wing's `#[distributed_slice(…)]` (`#[linkme(crate = …)]`).
    pub use linkme;
}

/// Where the Redis wing's stores come from. The wing (`llm-failover-redis`) adds a
/// `redis::RedisLimiters` to `redis::REDIS_LIMITERS` and a `redis::RedisCaches` to
/// `redis::REDIS_CACHES` when the build links it (the facade's `redis` feature); the client
/// builder and the cache builder read them and, without them, say which feature is missing.
/// The core never names the wing: cargo keeps it below.
pub mod redis {
    use crate::ratelimit::SharedSettings;

    pub use crate::cache::wing::{Key, REDIS_CACHES, RedisCaches, Store, Stored};
    pub use crate::ratelimit::wing::{
        ConfiguredLevels, LedgerBook, MemoryStore, REDIS_LIMITERS, RedisLimiters,
    };
    /// For the wing's `#[distributed_slice(…)]` (`#[linkme(crate = …)]`).
    pub use linkme;

    /// `err` with every occurrence of `secret` in its message replaced.
    pub fn scrub(err: crate::Error, secret: &str) -> crate::Error {
        err.scrub(secret)
    }

    /// The Redis URL of `settings`, password included: for connecting, never for a message.
    pub fn url(settings: &SharedSettings) -> &str {
        settings.url()
    }
}
