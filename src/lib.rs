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
//! [`batch`] runs prompt files that resume where they stopped.
//!
//! Errors are one opaque [`Error`] with a [`kind`](Error::kind): a request that can only
//! fail again (`400`, `401`, `403`, `404`, `413`, `422`, context too long, content
//! filtered) comes back at once, sent exactly once; throttling and transient faults fail over.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod admission;
pub mod batch;
pub mod cache;
mod client;
pub mod clock;
pub mod config;
pub mod error;
pub mod http;
mod id;
pub mod provider;
pub mod ratelimit;
#[cfg(feature = "test-util")]
pub mod retry;
#[cfg(not(feature = "test-util"))]
mod retry;
pub mod rng;
mod router;
pub mod stats;
mod stop;
mod striped;
pub mod types;
#[doc(hidden)]
pub mod wing;

pub use client::{Client, ClientBuilder};
pub use config::Config;
pub use config::ProviderSettings;
pub use error::{Disposition, Error, ErrorKind, Result};
pub use id::{Capabilities, Capability, Credential, CredentialSource, ProviderId};
pub use ratelimit::{BucketSnapshot, LimitReport, LimitSnapshot, Limits};
pub use router::{ChatStream, RequestOptions};
pub use stats::{ProviderStats, Stats};
pub use types::{
    AudioInput, ChatChunk, ChatRequest, ChatResponse, FinishReason, Image, Message, Origin,
    ResponseFormat, Role, Segment, Tool, ToolCall, ToolChoice, Transcript, TranscriptFormat,
    TranscriptionRequest, Usage,
};

/// The README's code compiles (`cargo test --doc`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
