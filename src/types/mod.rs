//! Provider-neutral request and response types.
//!
//! Adapters translate these to and from each provider's wire format; nothing here knows a
//! vendor.

mod chat;
mod transcription;
mod usage;

pub use chat::{ChatChunk, ChatRequest, ChatResponse, FinishReason, Message, ResponseFormat, Role};
pub use transcription::{AudioInput, Segment, Transcript, TranscriptFormat, TranscriptionRequest};
pub use usage::Usage;
