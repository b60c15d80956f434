//! The AWS Bedrock wing of [llm-failover](https://docs.rs/llm-failover): the adapter for
//! Bedrock's Converse API
//! (<https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html>) and
//! ConverseStream
//! (<https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ConverseStream.html>).
//!
//! Applications do not name this crate: they enable the `bedrock` feature of `llm-failover`,
//! and `kind = "bedrock"` in `providers.toml` builds a [`Bedrock`] (the region read from the
//! base URL's host, `bedrock-runtime.<region>.amazonaws.com`). In code, the adapter is
//! `llm_failover::bedrock::Bedrock`.
//!
//! Translation choices:
//!
//! - **System messages** go to `system: [{text}]`; a repeated role joins the message before
//!   it, as Converse wants the roles to alternate; tool results are `toolResult` blocks of a
//!   user message, an assistant's calls `toolUse` blocks after its text (call ids in
//!   Converse's pattern: other characters become `_`).
//! - **Images**: `{image: {format, source: {bytes}}}` before the text, PNG, JPEG, GIF and
//!   WebP carried as base64; an image by URL is refused before sending (`Unsupported`).
//! - **Tools**: `toolConfig` with `toolSpec`s and `toolChoice` `auto`, `any`
//!   ([`ToolChoice::Required`](llm_failover_core::ToolChoice::Required)) or `tool`;
//!   [`ToolChoice::None`](llm_failover_core::ToolChoice::None) sends no tools (refused when
//!   the conversation holds calls: Converse has no `none`).
//! - **Sampling**: `inferenceConfig` `maxTokens`, `temperature` (0 to 1; another is refused
//!   before sending) and `stopSequences`; `topP` and a model's own fields
//!   (`additionalModelRequestFields`) go in the extra body, which merges into the body before
//!   it is signed.
//! - **Structured answers**: `outputConfig.textFormat` of type `json_schema`, the schema as
//!   JSON text (…/API_runtime_OutputConfig.html); JSON mode is the schema `{"type":
//!   "object"}`.
//! - **Signing**: the `finish` hook signs the request as sent (AWS Signature Version 4,
//!   service `bedrock`, the adapter's region, the clock's wall time) with the credential's
//!   AWS parts ([`Credential::aws`](llm_failover_core::Credential::aws)); a credential without
//!   them is an `Auth` error and nothing is sent.
//! - **Streams** are AWS event-stream frames (CRC-checked), read by the `frames` hook; calls
//!   are assembled from their input pieces and delivered whole.
//! - **Embeddings** through `InvokeModel` (`/model/{modelId}/invoke`, the model's own body):
//!   Titan Text Embeddings (one text per request) and Cohere Embed (up to 96); a request the
//!   model cannot take in one call is refused before sending, so the router passes it over.
//! - **Errors** by the exception in `x-amzn-ErrorType` (`ThrottlingException` →
//!   `RateLimited`, `ServiceQuotaExceededException` → `QuotaExhausted`, signature and token
//!   refusals → `Auth`, …), the same for exception frames inside a stream. Bedrock states no
//!   limits in headers: the core learns its throttling from its 429s.
//!
//! ```
//! use std::sync::Arc;
//! use llm_failover::bedrock::Bedrock;
//! use llm_failover::{Client, Credential, ProviderId, ProviderSettings};
//!
//! let bedrock = Bedrock::new(
//!     ProviderId::new("bedrock"),
//!     "https://bedrock-runtime.us-east-1.amazonaws.com".parse()?,
//!     "us-east-1",
//! )
//! .with_model("amazon.nova-lite-v1:0");
//! let aws = Credential::aws("AKIAEXAMPLE", "wJalrEXAMPLEKEY", None);
//! let client = Client::builder()
//!     .provider(Arc::new(bedrock), ProviderSettings::new().credential(aws))
//!     .build()?;
//! assert_eq!(client.chat_providers(), [ProviderId::new("bedrock")]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

use std::sync::Arc;

use llm_failover_core::Result;
use llm_failover_core::config::{ProviderConfig, ProviderKind};
use llm_failover_core::provider::Provider;
use llm_failover_core::wing::providers::{PROVIDER_WINGS, ProviderWing, linkme};

mod adapter;
mod embed;
mod error;
mod sign;
mod stream;
mod wire;

pub use adapter::{Bedrock, PROVIDER_TYPE};

/// The wing the core finds when this crate is linked.
struct Wing;

impl ProviderWing for Wing {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Bedrock
    }

    fn build(&self, cfg: &ProviderConfig) -> Result<Arc<dyn Provider>> {
        Ok(Arc::new(Bedrock::from_config(cfg)?))
    }
}

#[linkme::distributed_slice(PROVIDER_WINGS)]
#[linkme(crate = linkme)]
static BEDROCK: &'static dyn ProviderWing = &Wing;
