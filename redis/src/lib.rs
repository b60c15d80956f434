//! The Redis wing of [llm-failover](https://docs.rs/llm-failover): what several processes
//! share through one Redis.
//!
//! - [`RedisStore`]: the limiter's buckets, gates and breakers, shared by every process on
//!   one quota (one Lua script call per operation, timed by Redis's clock).
//! - The response cache on Redis (`[cache] url = "redis://…"`), shared by replicas.
//!
//! Applications do not name this crate: they enable the `redis` feature of `llm-failover`,
//! and `Client::builder()` builds these stores from `providers.toml` (`[shared]`,
//! `[cache]`) or from `ClientBuilder::shared` — the wing adds itself to the core's list of
//! wings when the build links it. Name [`RedisStore`] (re-exported as
//! `llm_failover::redis::RedisStore`) only to hand a store of your own to
//! `ClientBuilder::limiter_store`.
//!
//! ```no_run
//! use llm_failover::ratelimit::SharedSettings;
//! use llm_failover::{Client, ProviderSettings};
//!
//! // Every process that runs this shares the limits the providers state, through Redis.
//! let client = Client::builder()
//!     .config_path("providers.toml")
//!     .shared(SharedSettings::new("redis://127.0.0.1:6379").prefix("nightly"))
//!     .build()?;
//! # Ok::<(), llm_failover::Error>(())
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

use std::sync::Arc;
use std::time::Duration;

use llm_failover_core::Result;
use llm_failover_core::ratelimit::{LimiterStore, RedisTls, SharedSettings};
use llm_failover_core::wing::redis::{
    REDIS_CACHES, REDIS_LIMITERS, RedisCaches, RedisLimiters, Store, linkme,
};

mod cache;
mod connect;
mod limiter;

pub use limiter::RedisStore;

/// The wing the core finds when this crate is linked.
struct Redis;

impl RedisLimiters for Redis {
    fn limiter_store(
        &self,
        settings: &SharedSettings,
        latency_allowance: Duration,
    ) -> Result<Arc<dyn LimiterStore>> {
        let store = RedisStore::new(settings.clone())?.with_latency_allowance(latency_allowance);
        Ok(Arc::new(store))
    }
}

impl RedisCaches for Redis {
    fn cache_store(
        &self,
        url: &str,
        prefix: &str,
        timeout: Duration,
        max_entries: u64,
        tls: &RedisTls,
        cluster: bool,
    ) -> Result<Box<dyn Store>> {
        let store = cache::RedisCacheStore::new(url, prefix, timeout, max_entries, tls, cluster)?;
        Ok(Box::new(store))
    }
}

#[linkme::distributed_slice(REDIS_LIMITERS)]
#[linkme(crate = linkme)]
static LIMITERS: &'static dyn RedisLimiters = &Redis;

#[linkme::distributed_slice(REDIS_CACHES)]
#[linkme(crate = linkme)]
static CACHES: &'static dyn RedisCaches = &Redis;
