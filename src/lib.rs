//! # llm-failover
//!
//! A client for LLM chat and speech-to-text APIs from several providers that reads the
//! rate limits every provider states in its response headers, paces its own traffic to fit
//! them, skips a provider until its stated reset time, fails over to the next provider at
//! once, and never retries a request that can only fail again.
//!
//! ```no_run
//! use llm_failover::{ChatRequest, Client};
//!
//! # async fn run() -> llm_failover::Result<()> {
//! // providers.toml names environments and, per provider, the variable holding its key.
//! let client = Client::builder()
//!     .config_path("providers.toml")
//!     .environment("prod")
//!     .build()?;
//! let answer = client
//!     .chat(ChatRequest::new().system("Answer briefly.").user("Why is the sky blue?").max_tokens(100))
//!     .await?;
//! println!("{} ({} attempts): {}", answer.provider, answer.attempts, answer.text);
//! for (provider, stats) in &client.stats().providers {
//!     println!("{provider}: {} sent, {} throttled", stats.sent, stats.rate_limited);
//! }
//! # Ok(()) }
//! ```
//!
//! Where things are: [`Client`] sends every request through the providers' failover order;
//! [`ratelimit`] reads the limits providers state and holds the buckets (a
//! [`LimiterStore`](ratelimit::LimiterStore) of your own can hold them elsewhere);
//! [`provider`] has one adapter per wire format (and the [`Provider`](provider::Provider)
//! trait for your own); [`config`] reads `providers.toml` or takes settings in code;
//! [`batch`] runs prompt files that resume where they stopped; [`observe`] tells observers
//! (the client's [`Stats`], your metrics: OpenTelemetry's with the `otel` feature) what every
//! request does.
//!
//! Errors are one opaque [`Error`] with a [`kind`](Error::kind): a request that can only
//! fail again (`400`, `401`, `403`, `404`, `413`, `422`, context too long, content
//! filtered) comes back at once, sent exactly once; throttling and transient faults fail over.

//!
//! # Wings
//!
//! This crate is a facade: the core (`llm-failover-core`) re-exported, with the wings its
//! features link. `providers.toml` and [`Client::builder`] are the same whichever are on;
//! a file that names a wing the build lacks is refused with an error that names the feature.
//!
//! - `redis`: the Redis wing (`llm-failover-redis`). Limits and breakers shared by every
//!   process on one quota (`[shared]`, [`ClientBuilder::shared`], the module `redis`) and
//!   the response cache on Redis (`[cache] url = "redis://…"`).
//! - `bedrock`: the AWS Bedrock wing (`llm-failover-bedrock`). `kind = "bedrock"` in
//!   `providers.toml`, and the adapter `bedrock::Bedrock`: the Converse API, each request
//!   signed with AWS Signature Version 4 ([`Credential::aws`]).
//! - `vertex`: the Google Vertex AI wing (`llm-failover-vertex`). `kind = "vertex"` in
//!   `providers.toml`, and the adapter `vertex::Vertex`: Gemini on Vertex at a regional
//!   endpoint, with OAuth 2 access tokens of a service account's key file (`key_file`).
//! - Durable jobs and the batch on a queue (SQLite, PostgreSQL) are the queue wing's: the
//!   `llm-failover-queue` crate. The `llm-failover` command is `llm-failover-cli`.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub use llm_failover_core::*;

/// The Redis wing (`llm-failover-redis`, feature `redis`): [`RedisStore`](redis::RedisStore)
/// shares limits and breakers with every process on one quota. `Client::builder()` builds it
/// from `[shared]` (or [`ClientBuilder::shared`]) and a Redis response cache from
/// `[cache] url = "redis://…"` by itself: name it only to build a store of your own.
#[cfg(feature = "redis")]
#[doc(inline)]
pub use llm_failover_redis as redis;

/// The AWS Bedrock wing (`llm-failover-bedrock`, feature `bedrock`): the
/// [`Bedrock`](bedrock::Bedrock) adapter (Converse and ConverseStream, SigV4-signed).
/// `kind = "bedrock"` in `providers.toml` builds it by itself: name it to build one in code.
#[cfg(feature = "bedrock")]
#[doc(inline)]
pub use llm_failover_bedrock as bedrock;

/// The Google Vertex AI wing (`llm-failover-vertex`, feature `vertex`): the
/// [`Vertex`](vertex::Vertex) adapter (Gemini on Vertex, OAuth 2 access tokens of a service
/// account). `kind = "vertex"` in `providers.toml` builds it by itself: name it to build one
/// in code.
#[cfg(feature = "vertex")]
#[doc(inline)]
pub use llm_failover_vertex as vertex;

/// The README's code compiles (`cargo test --doc`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
