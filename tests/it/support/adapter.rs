//! The adapter tests' shared harness: one exchange of a provider with a scripted server, as
//! the router would make it (a fresh transport, a manual clock, a per-attempt timeout), so
//! each adapter's tests say only what is theirs — the provider, its model and the key.

use std::time::Duration;

use futures_util::StreamExt;
use llm_failover::clock::{Clock, ManualClock};
use llm_failover::http::{HttpTransport, TransportOptions};
use llm_failover::provider::{
    ChunkStream, Exchange, Provider, RequestContext, chat_once, chat_stream_once, transcribe_once,
};
use llm_failover::{
    ChatChunk, ChatRequest, ChatResponse, Credential, Result, Transcript, TranscriptionRequest,
};
use llm_failover_emulator::scripted::{Recorded, ScriptedServer};

/// Each attempt's timeout.
pub const TIMEOUT: Duration = Duration::from_secs(5);

fn transport() -> HttpTransport {
    HttpTransport::new(&TransportOptions::default()).unwrap()
}

/// One chat exchange of `provider` for `model` with `key`.
pub async fn chat(
    provider: &dyn Provider,
    req: &ChatRequest,
    model: &str,
    key: Option<&Credential>,
) -> Exchange<ChatResponse> {
    let clock = ManualClock::new();
    let ctx = RequestContext::new(model, key);
    chat_once(provider, &transport(), req, ctx, TIMEOUT, || clock.both()).await
}

/// Opens one streamed chat answer.
pub async fn stream(
    provider: &dyn Provider,
    req: &ChatRequest,
    model: &str,
    key: Option<&Credential>,
) -> Exchange<ChunkStream> {
    let clock = ManualClock::new();
    let ctx = RequestContext::new(model, key);
    chat_stream_once(provider, &transport(), req, ctx, TIMEOUT, || clock.both()).await
}

/// Streams one answer to its end; every item the stream yielded.
pub async fn stream_items(
    provider: &dyn Provider,
    req: &ChatRequest,
    model: &str,
    key: Option<&Credential>,
) -> Result<Vec<Result<ChatChunk>>> {
    Ok(stream(provider, req, model, key)
        .await
        .result?
        .collect()
        .await)
}

/// One transcription exchange.
pub async fn transcribe(
    provider: &dyn Provider,
    req: &TranscriptionRequest,
    model: &str,
    key: Option<&Credential>,
) -> Exchange<Transcript> {
    let clock = ManualClock::new();
    let ctx = RequestContext::new(model, key);
    transcribe_once(provider, &transport(), req, ctx, TIMEOUT, || clock.both()).await
}

/// The one request `server` received.
///
/// # Panics
///
/// When it received none or several.
pub fn only_request(server: &ScriptedServer) -> Recorded {
    let mut all = server.requests();
    assert_eq!(all.len(), 1, "expected exactly one request");
    all.remove(0)
}
