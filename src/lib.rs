//! # llm-failover
//!
//! A client for LLM chat and speech-to-text APIs from several providers that reads the
//! rate limits every provider states in its response headers, paces its own traffic to fit
//! them, skips a provider until its stated reset time, fails over to the next provider at
//! once, and never retries a request that can only fail again.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod batch;
mod client;
pub mod clock;
pub mod config;
pub mod error;
pub mod http;
pub mod provider;
pub mod ratelimit;
pub mod retry;
pub mod rng;
pub mod router;
pub mod stats;
pub mod types;

pub use client::{Client, ClientBuilder, ProviderSettings};
pub use config::Config;
pub use error::{Disposition, Error, ErrorKind, Result};
pub use provider::{Capability, Credential, ProviderId};
pub use ratelimit::LimitReport;
pub use router::{ChatStream, RequestOptions};
pub use stats::{ProviderStats, Stats};
pub use types::{
    AudioInput, ChatChunk, ChatRequest, ChatResponse, FinishReason, Message, ResponseFormat, Role,
    Segment, Transcript, TranscriptFormat, TranscriptionRequest, Usage,
};

/// The README's code compiles (`cargo test --doc`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
