//! Shared helpers for the integration tests: clients over loopback scripted servers with an
//! injected manual clock and a fixed jitter source; [`adapter`] for the adapters' tests;
//! [`redis`] for a real `redis-server` on loopback; [`postgres`] for a real PostgreSQL on
//! loopback.
#![allow(dead_code, unreachable_pub)]

pub mod adapter;
pub mod certs;
pub mod examples;
pub mod postgres;
pub mod prometheus;
pub mod redis;

use std::sync::Arc;
use std::time::Duration;

use llm_failover::clock::ManualClock;
use llm_failover::config::{Limits, Policy};
use llm_failover::provider::openai::OpenAi;
use llm_failover::rng::FixedRng;
use llm_failover::{Client, Credential, ProviderId, ProviderSettings};
use llm_failover_emulator::scripted::{Reply, ScriptedServer};

/// The path an OpenAI-format provider rooted at `/v1` answers chat on.
pub const CHAT: &str = "/v1/chat/completions";

/// A sentinel key: it must never appear in any output.
pub const SENTINEL: &str = "sk-SENTINEL-0123456789abcdef";

/// An OpenAI chat completion body.
pub fn ok_body(text: &str) -> String {
    serde_json::json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    })
    .to_string()
}

pub fn ok(text: &str) -> Reply {
    Reply::json(200, ok_body(text))
}

/// An OpenAI error body.
pub fn error_body(kind: &str, code: Option<&str>, message: &str) -> String {
    serde_json::json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
        .to_string()
}

pub fn rate_limited() -> Reply {
    Reply::json(
        429,
        error_body(
            "requests",
            Some("rate_limit_exceeded"),
            "Rate limit reached for requests",
        ),
    )
}

/// An OpenAI adapter pointed at `server`.
pub fn openai(name: &str, server: &ScriptedServer) -> Arc<OpenAi> {
    Arc::new(
        OpenAi::new(
            ProviderId::new(name),
            format!("{}/v1", server.url()).parse().unwrap(),
        )
        .with_chat_model("gpt-4o-mini"),
    )
}

/// A policy for tests: short per-attempt timeouts, generous deadline.
pub fn policy() -> Policy {
    let mut p = Policy::default();
    p.request_timeout = Duration::from_secs(5);
    p.deadline = Duration::from_secs(300);
    p.max_retry_after = Duration::from_secs(120);
    p
}

pub struct Harness {
    pub client: Client,
    pub clock: ManualClock,
}

/// A client over OpenAI-format providers `(name, server)` in failover order.
pub fn client(providers: &[(&str, &ScriptedServer)], policy: Policy) -> Harness {
    client_with(providers, policy, Limits::none())
}

pub fn client_with(
    providers: &[(&str, &ScriptedServer)],
    policy: Policy,
    limits: Limits,
) -> Harness {
    let (b, clock) = builder_with(providers, policy, limits);
    Harness {
        client: b.build().unwrap(),
        clock,
    }
}

/// [`client_with`]'s builder, and its clock.
pub fn builder_with(
    providers: &[(&str, &ScriptedServer)],
    policy: Policy,
    limits: Limits,
) -> (llm_failover::ClientBuilder, ManualClock) {
    let clock = ManualClock::new();
    let mut b = Client::builder()
        .clock(Arc::new(clock.clone()))
        .rng(Arc::new(FixedRng::new([0.5])))
        .policy(policy);
    for (name, server) in providers {
        b = b.provider(
            openai(name, server),
            ProviderSettings::new()
                .limits(limits)
                .credential(Credential::new(SENTINEL)),
        );
    }
    (b, clock)
}

/// What tracing wrote while a test ran (at TRACE, `log` records included).
#[derive(Clone, Default)]
pub struct Capture(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Capture {
    /// Captures this thread's tracing until the guard drops.
    pub fn start() -> (Capture, tracing::subscriber::DefaultGuard) {
        Self::start_with(tracing_subscriber::fmt::format::FmtSpan::NONE)
    }

    /// The same, with a line for each span that closes, every field it recorded on it.
    pub fn start_with_span_closes() -> (Capture, tracing::subscriber::DefaultGuard) {
        Self::start_with(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
    }

    fn start_with(
        spans: tracing_subscriber::fmt::format::FmtSpan,
    ) -> (Capture, tracing::subscriber::DefaultGuard) {
        let capture = Capture::default();
        let writer = capture.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_span_events(spans)
            .finish();
        // `set_default` from SubscriberInitExt also routes `log` records (reqwest's) here.
        let guard = tracing_subscriber::util::SubscriberInitExt::set_default(subscriber);
        (capture, guard)
    }

    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}
