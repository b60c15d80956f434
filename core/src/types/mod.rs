//! Provider-neutral request and response types.
//!
//! Adapters translate these to and from each provider's wire format; nothing here knows a
//! vendor.
//!
//! # Examples
//!
//! One [`ChatRequest`], two wire formats:
//!
//! ```
//! use llm_failover::provider::{anthropic::Anthropic, openai::OpenAi, Provider, RequestContext};
//! use llm_failover::{ChatRequest, ProviderId};
//!
//! let req = ChatRequest::new().system("Answer in one word.").user("Capital of France?");
//! let ctx = RequestContext::new("some-model", None);
//! let body = |p: &dyn Provider| -> Result<serde_json::Value, Box<dyn std::error::Error>> {
//!     let http = p.chat_request(&req, &ctx)?;
//!     Ok(serde_json::from_slice(http.json_body().unwrap())?)
//! };
//!
//! let openai = OpenAi::new(ProviderId::new("openai"), "http://127.0.0.1:8080/v1".parse()?);
//! let json = body(&openai)?;
//! assert_eq!(json["messages"][0]["role"], "system"); // a message like any other
//!
//! let claude = Anthropic::new(ProviderId::new("claude"), "http://127.0.0.1:8081".parse()?);
//! let json = body(&claude)?;
//! assert_eq!(json["system"], "Answer in one word."); // a top-level field
//! assert_eq!(json["messages"][0]["role"], "user");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod budget;
mod chat;
mod embedding;
pub mod price;
mod structured;
mod tools;
mod transcription;
mod turn;
mod usage;

pub use chat::{ChatChunk, ChatRequest, ChatResponse, FinishReason, Message, ResponseFormat, Role};
pub(crate) use embedding::count_mismatch;
pub use embedding::{EmbeddingRequest, EmbeddingResponse, InputType};
pub(crate) use structured::check_answer;
#[cfg(feature = "jsonschema")]
pub(crate) use structured::schema_failures;
pub use tools::{Image, Tool, ToolCall, ToolChoice};
pub use transcription::{AudioInput, Segment, Transcript, TranscriptFormat, TranscriptionRequest};
pub(crate) use turn::StateData;
pub use turn::TurnState;
pub use usage::Usage;

/// Where an answer came from.
///
/// # Examples
///
/// ```
/// use llm_failover::{ChatResponse, Origin, ProviderId};
///
/// let answer = ChatResponse::new(ProviderId::new("openai"), "gpt-4o-mini", "Paris");
/// assert_eq!(answer.origin, Origin::Provider);
/// assert!(!answer.origin.is_cache());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Origin {
    /// Asked of the provider just now.
    #[default]
    Provider,
    /// Served from the response cache ([`cache`](crate::cache)): the provider's answer to
    /// the same request, kept since `stored_at_ms` (wall-clock milliseconds since the Unix
    /// epoch). Nothing was sent and nothing spent.
    Cache {
        /// When the answer was kept.
        stored_at_ms: i64,
    },
}

impl Origin {
    /// Whether the answer came from the cache.
    pub fn is_cache(&self) -> bool {
        matches!(self, Origin::Cache { .. })
    }
}
