//! The core of [llm-failover](https://docs.rs/llm-failover): the client, the router, the
//! limiter, the provider adapters, the configuration, the types and the in-memory stores.
//!
//! Applications use the `llm-failover` crate, which re-exports this one with the wings its
//! features enable (the Redis wing's shared limits and cache): its documentation is the
//! SDK's. The wings build on this crate (`llm-failover-redis`, `llm-failover-queue`).

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod admission;
pub mod batch;
pub mod bulk;
pub mod cache;
mod client;
pub mod clock;
pub mod config;
pub mod error;
pub mod http;
mod id;
pub mod observe;
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
pub use id::{Capabilities, Capability, Credential, CredentialParts, CredentialSource, ProviderId};
pub use ratelimit::{BucketSnapshot, LimitReport, LimitSnapshot, Limits};
pub use router::{ChatStream, RequestOptions};
pub use stats::{ProviderStats, Stats};
pub use types::budget;
pub use types::price;
pub use types::{
    AudioInput, ChatChunk, ChatRequest, ChatResponse, EmbeddingRequest, EmbeddingResponse,
    FinishReason, Image, InputType, Message, Origin, ResponseFormat, Role, Segment, Tool, ToolCall,
    ToolChoice, Transcript, TranscriptFormat, TranscriptionRequest, TurnState, Usage,
};
