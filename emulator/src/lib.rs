//! A loopback emulator of LLM provider APIs, for tests, benchmarks and the no-key demo.
//!
//! It speaks the providers' own wire formats — OpenAI chat completions (JSON and SSE), audio
//! transcriptions and embeddings, Azure OpenAI deployments, Anthropic messages (JSON and typed
//! SSE), Gemini `generateContent`/`streamGenerateContent` and embeddings, AWS Bedrock
//! `Converse`/`ConverseStream` (SigV4-signed; the stream in AWS event-stream frames) and
//! `InvokeModel` for Titan and Cohere embeddings, Google Vertex AI (Gemini on Vertex and its
//! embeddings, with OAuth 2 access tokens from a token endpoint that takes a service account's
//! signed JWT), Deepgram `/v1/listen`; in every
//! chat format tools (deterministic calls generated from the tools' schemas, results quoted back),
//! structured answers and images — checks keys and requests the way each provider does, enforces RPM/TPM (and RPD/TPD, concurrency) as
//! continuously refilled buckets, states them in each provider's own rate-limit headers and
//! 429 bodies, and injects faults on request (scripted for tests, a seeded mix for soaks).
//! It serves the providers' Batch APIs too — OpenAI's files and batches (Azure's global
//! batch), Anthropic's Message Batches, Gemini's `batchGenerateContent` — on the same time
//! source, with their own limits, per-item failures, expiry and cancellation set through
//! [`Emulator::set_batch_timing`] and its siblings, and read back with
//! [`Emulator::batch_log`].
//!
//! Several providers run at once, each under its own path prefix
//! (`http://127.0.0.1:PORT/{prefix}/…`) or on its own port. It binds 127.0.0.1 only.
//!
//! In an application's own tests, [`demo::Demo`] serves an environment of its
//! `providers.toml` (`environment("demo")`, or any other) and points an
//! [`llm_failover_core::ClientBuilder`] at it, no key needed. The crate's README documents fault
//! scripting completely — every [`Fault`], [`RetryAfter`] form, seeded mixes, the admin
//! endpoints, counters and the request log — with limits, header styles and every
//! configuration field.
//!
//! # Examples
//!
//! ```
//! use llm_failover_emulator::{Emulator, Fault, Limits, ProviderConfig, RetryAfter};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> std::io::Result<()> {
//! let emu = Emulator::builder()
//!     .provider(ProviderConfig::openai("openai").with_limits(Limits::per_minute(60, 10_000)))
//!     .anthropic("anthropic")
//!     .minute_ms(6_000) // a 6-second "minute"
//!     .start()
//!     .await?;
//! let openai = emu.base_url("openai"); // http://127.0.0.1:PORT/openai/v1
//! # let _ = openai;
//!
//! // The next three requests to `openai`: a 503, a 429 with Retry-After: 1, a normal answer.
//! emu.script("openai", [
//!     Fault::Status { status: 503 },
//!     Fault::RateLimit { retry_after: RetryAfter::Seconds(1) },
//!     Fault::Pass,
//! ]);
//! // ... send requests, then:
//! assert_eq!(emu.counters("openai").requests, 0);
//! # Ok(()) }
//! ```
//!
//! The binary serves a TOML file (`emulator/emulator.toml` documents every field):
//!
//! ```sh
//! cargo run -p llm-failover-emulator -- --config emulator/emulator.toml
//! ```

#![forbid(unsafe_code)]

mod bulk;
mod config;
pub mod demo;
pub mod embedding;
mod faults;
pub mod headers;
pub mod limits;
mod oauth;
#[cfg(test)]
mod readme;
mod routes;
pub mod scripted;
mod server;
mod sigv4;
mod state;
pub mod text;
mod tools;

pub use bulk::{BatchItemFault, BatchLog, BatchOrder, BatchRecord, BatchTiming};
pub use config::{
    AwsCredentials, CLOUD_PLATFORM_SCOPE, ChargeMode, ConfigError, DEFAULT_KEY, DEFAULT_PROJECT,
    DEFAULT_REGION, EmulatorConfig, GOOGLE_TOKEN_URI, HeaderStyle, Kind, Latency, LimitScope,
    Limits, ProviderConfig, ServiceAccountKey,
};
pub use faults::{Fault, FaultConfig, RetryAfter, WeightedFault};
pub use server::{Emulator, EmulatorBuilder};
pub use state::{Counters, LogEntry, TimeSource};

/// The README's Rust examples, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
