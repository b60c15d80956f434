//! The `openai` adapter over real loopback HTTP, driven exactly as the router drives it
//! (`chat_once`, `chat_stream_once`, `transcribe_once`).
//!
//! Wire formats follow OpenAI's API reference:
//! - Chat Completions: https://platform.openai.com/docs/api-reference/chat/create (request
//!   fields, the `chat.completion` object; the fixture is its example response),
//! - streaming: https://platform.openai.com/docs/api-reference/chat-streaming (the
//!   `chat.completion.chunk` object, `data: [DONE]`) and `stream_options.include_usage` ("an
//!   additional chunk will be streamed before the `data: [DONE]` message … the `choices` field
//!   will always be an empty array"),
//! - audio: https://platform.openai.com/docs/api-reference/audio/createTranscription (multipart
//!   `file`, `model`, `language`, `prompt`, `response_format`, `temperature`; the `json` and
//!   `verbose_json` example bodies),
//! - errors: https://platform.openai.com/docs/guides/error-codes (401, 403, 429 "Rate limit
//!   reached" vs "You exceeded your current quota", 500, 503 "engine overloaded") and the
//!   rate-limits guide https://platform.openai.com/docs/guides/rate-limits,
//! - Groq: https://console.groq.com/docs/openai (base URL `https://api.groq.com/openai/v1`),
//! - tools, images and structured answers: see `adapter_openai/tools.rs`.

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use llm_failover::provider::openai::OpenAi;
use llm_failover::provider::{ChunkStream, Exchange, Provider};
use llm_failover::ratelimit::delay_in_message;
use llm_failover::{
    AudioInput, ChatChunk, ChatRequest, ChatResponse, Credential, Error, ErrorKind, FinishReason,
    ProviderId, ResponseFormat, Transcript, TranscriptFormat, TranscriptionRequest, Usage,
};
use llm_failover_emulator::scripted::{Recorded, Reply, ReplyBody, ScriptedServer};

use crate::support::adapter;

const CHAT: &str = "/v1/chat/completions";
const AUDIO: &str = "/v1/audio/transcriptions";
const SENTINEL: &str = "sk-SENTINEL-abc123";

struct Harness {
    server: ScriptedServer,
    provider: OpenAi,
}

impl Harness {
    async fn new() -> Self {
        Self::at("/v1").await
    }

    async fn at(base_path: &str) -> Self {
        let server = ScriptedServer::start().await;
        let base = format!("{}{base_path}", server.url()).parse().unwrap();
        Harness {
            provider: OpenAi::new(ProviderId::new("openai"), base)
                .with_chat_model("gpt-4o-mini")
                .with_transcription_model("whisper-1"),
            server,
        }
    }

    async fn chat_with(
        &self,
        req: &ChatRequest,
        key: Option<&Credential>,
    ) -> Exchange<ChatResponse> {
        adapter::chat(&self.provider, req, "gpt-4o-mini", key).await
    }

    async fn chat(&self, req: &ChatRequest) -> Exchange<ChatResponse> {
        let key = Credential::new(SENTINEL);
        self.chat_with(req, Some(&key)).await
    }

    async fn stream(&self, req: &ChatRequest) -> Exchange<ChunkStream> {
        let key = Credential::new(SENTINEL);
        adapter::stream(&self.provider, req, "gpt-4o-mini", Some(&key)).await
    }

    async fn transcribe(&self, req: &TranscriptionRequest) -> Exchange<Transcript> {
        let key = Credential::new(SENTINEL);
        adapter::transcribe(&self.provider, req, "whisper-1", Some(&key)).await
    }

    fn only_request(&self) -> Recorded {
        adapter::only_request(&self.server)
    }
}

async fn collect(stream: ChunkStream) -> Vec<Result<ChatChunk, Error>> {
    stream.collect().await
}

/// Splits `text` into pieces of `size` bytes (cutting lines, JSON and UTF-8 characters).
fn pieces(text: &str, size: usize) -> Vec<Bytes> {
    text.as_bytes()
        .chunks(size)
        .map(Bytes::copy_from_slice)
        .collect()
}

fn sse_reply(text: &str, size: usize) -> Reply {
    let chunks = pieces(text, size)
        .into_iter()
        .map(|b| (Duration::ZERO, b))
        .collect();
    Reply::status(200)
        .header("content-type", "text/event-stream")
        .with_body(ReplyBody::Chunks(chunks))
}

fn prompt() -> ChatRequest {
    ChatRequest::new()
        .system("You are terse.")
        .user("Say hello.")
        .assistant("Hello.")
        .system("Now in French.")
        .user("Again.")
        .max_tokens(32)
        .temperature(0.2)
        .stop("\n\n")
}

/// A valid WAV header, then patterned samples (not silence): an upload that reorders, drops
/// or zeroes bytes does not compare equal.
fn wav() -> Vec<u8> {
    let mut v = llm_failover_emulator::text::silent_wav(0.1);
    for (i, b) in v[44..].iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    v
}

#[path = "adapter_openai/audio.rs"]
mod audio;
#[path = "adapter_openai/chat.rs"]
mod chat;
#[path = "adapter_openai/documented.rs"]
mod documented;
#[path = "adapter_openai/errors.rs"]
mod errors;
#[path = "adapter_openai/secrets.rs"]
mod secrets;
#[path = "adapter_openai/stream.rs"]
mod stream;
#[path = "adapter_openai/tools.rs"]
mod tools;
