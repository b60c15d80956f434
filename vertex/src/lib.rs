//! The Google Vertex AI wing of [llm-failover](https://docs.rs/llm-failover): Gemini on
//! Vertex AI
//! (<https://cloud.google.com/vertex-ai/generative-ai/docs/reference/rest/v1/projects.locations.publishers.models/generateContent>),
//! at a regional endpoint or the global one, with OAuth 2 access tokens of a service account.
//!
//! Applications do not name this crate: they enable the `vertex` feature of `llm-failover`,
//! and `kind = "vertex"` in `providers.toml` builds a [`Vertex`] (the project and location
//! read from the base URL), its service account's JSON key file named per environment:
//!
//! ```toml
//! [providers.vertex]
//! kind = "vertex"
//! base_url = "https://us-central1-aiplatform.googleapis.com/v1/projects/my-project/locations/us-central1"
//! model = "gemini-2.5-flash"
//! key_file = { dev = "keys/vertex-dev.json", prod = "/run/secrets/vertex-prod.json" }
//! ```
//!
//! In code, the adapter is `llm_failover::vertex::Vertex`.
//!
//! - **Bodies and answers** are Gemini's: the core's Gemini adapter writes and reads them
//!   (tools, images, structured answers, streams as server-sent events with `alt=sse`), at
//!   `…/v1/projects/{project}/locations/{location}/publishers/google/models/{model}:generateContent`.
//! - **Access tokens**: the key's private key signs a JWT (RS256, with ring; `iss` the
//!   service account, `scope` cloud-platform, `aud` the key's `token_uri`, valid an hour),
//!   exchanged at `token_uri` with OAuth 2's JWT bearer grant (RFC 7523). The token is kept
//!   and sent by every request (`Authorization: Bearer`) until it is due: 5 minutes before it
//!   expires the next request fetches a new one while the others go on with the old one, and
//!   concurrent requests without a token wait for the one fetch in flight. The times are the
//!   client's clock's. The token, the key and the JWT are never in `Debug`, a log line or an
//!   error (errors are scrubbed of the token, as of any key).
//! - **Refusals**: a token endpoint refusing the JWT (`invalid_grant`: a revoked or wrong
//!   key, a clock far off) is `Auth`, terminal, and nothing reaches Vertex; a token endpoint
//!   that fails (5xx, timeout) is retryable. A key file that is missing, unreadable or no
//!   service-account key is a `Config` error naming the file when the client is built.
//! - **Errors** are Google's: a `429 RESOURCE_EXHAUSTED` (Vertex states no limits in
//!   headers, nor a delay) is `RateLimited` and the core learns the pace from its 429s; a
//!   per-day quota is `QuotaExhausted`; `UNAUTHENTICATED` is `Auth`, `PERMISSION_DENIED`
//!   (a project the service account may not use) `PermissionDenied`; a project without
//!   billing (`BILLING_DISABLED`) `QuotaExhausted`, as any kind's spent credit.
//!
//! ```
//! use std::sync::Arc;
//! use llm_failover::vertex::Vertex;
//! use llm_failover::{Client, Credential, ProviderId, ProviderSettings};
//!
//! let vertex = Vertex::new(ProviderId::new("vertex"), "my-project", "us-central1")?
//!     .with_model("gemini-2.5-flash");
//! // The JSON key file's text (`std::fs::read_to_string("key.json")?`), or an access token.
//! let key = Credential::new("ya29.an-access-token-fetched-elsewhere");
//! let client = Client::builder()
//!     .provider(Arc::new(vertex), ProviderSettings::new().credential(key))
//!     .build()?;
//! assert_eq!(client.chat_providers(), [ProviderId::new("vertex")]);
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
mod jwt;
mod key;
mod token;

pub use adapter::{PROVIDER_TYPE, Vertex};

/// The wing the core finds when this crate is linked.
struct Wing;

impl ProviderWing for Wing {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Vertex
    }

    fn build(&self, cfg: &ProviderConfig) -> Result<Arc<dyn Provider>> {
        Ok(Arc::new(Vertex::from_config(cfg)?))
    }
}

#[linkme::distributed_slice(PROVIDER_WINGS)]
#[linkme(crate = linkme)]
static VERTEX: &'static dyn ProviderWing = &Wing;
