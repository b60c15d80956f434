//! Speech-to-text through the client, configured from the repository's `providers.toml`:
//! Whisper-style multipart upload, failover to Deepgram's raw-body format, the same audio
//! re-sent intact.

use std::sync::Arc;

use crate::support::error_body;
use llm_failover::clock::ManualClock;
use llm_failover::rng::FixedRng;
use llm_failover::{AudioInput, Client, Config, Credential, ErrorKind, TranscriptionRequest};
use llm_failover_emulator::scripted::{Reply, ScriptedServer};

const WHISPER: &str = "/openai/v1/audio/transcriptions";
const LISTEN: &str = "/deepgram/v1/listen";

fn wav() -> Vec<u8> {
    llm_failover_emulator::text::silent_wav(0.1)
}

/// A client for the `demo` environment of the real `providers.toml`, every provider pointed
/// at one scripted server (under the same path prefixes the emulator uses).
fn demo_client(server: &ScriptedServer) -> Client {
    let config = Config::from_path(concat!(env!("CARGO_MANIFEST_DIR"), "/providers.toml")).unwrap();
    let mut b = Client::builder()
        .config(config)
        .environment("demo")
        .clock(Arc::new(ManualClock::new()))
        .rng(Arc::new(FixedRng::new([0.5])));
    for (name, prefix) in [
        ("demo-openai", "openai/v1"),
        ("demo-anthropic", "anthropic"),
        ("demo-deepgram", "deepgram"),
    ] {
        b = b
            .base_url(name, format!("{}/{prefix}", server.url()).parse().unwrap())
            .credential(name, Credential::new("emulator-key"));
    }
    b.build().unwrap()
}

#[tokio::test]
async fn whisper_failure_fails_over_to_deepgram_with_the_same_audio() {
    let server = ScriptedServer::start().await;
    server.push(
        WHISPER,
        Reply::json(503, error_body("server_error", None, "overloaded")),
    );
    server.push(
        LISTEN,
        Reply::json(
            200,
            r#"{"metadata":{"request_id":"dg-1","duration":0.1,"channels":1},
                "results":{"channels":[{"alternatives":[{"transcript":"hello world","confidence":0.9,
                "words":[{"word":"hello","start":0.0,"end":0.04},{"word":"world","start":0.05,"end":0.1}]}]}]}}"#,
        ),
    );
    let client = demo_client(&server);
    assert_eq!(client.environment(), "demo");
    let audio = AudioInput::from_bytes(wav(), "memo.wav").unwrap();
    let t = client
        .transcribe(TranscriptionRequest::new(audio.clone()).language("en"))
        .await
        .unwrap();
    assert_eq!(t.text, "hello world");
    assert_eq!(t.provider.as_str(), "demo-deepgram");
    assert_eq!(t.attempts, 2);

    let reqs = server.requests();
    let whisper = &reqs[0];
    assert_eq!(whisper.path, WHISPER);
    assert_eq!(whisper.header("authorization"), Some("Bearer emulator-key"));
    assert_eq!(whisper.field_text("model").as_deref(), Some("whisper-1"));
    assert_eq!(whisper.field_text("language").as_deref(), Some("en"));
    let file = whisper.field("file").unwrap();
    assert_eq!(file.file_name.as_deref(), Some("memo.wav"));
    assert_eq!(&file.data[..], &audio.bytes()[..]);

    let deepgram = &reqs[1];
    assert_eq!(deepgram.path, LISTEN);
    assert_eq!(deepgram.header("authorization"), Some("Token emulator-key"));
    assert_eq!(deepgram.header("content-type"), Some("audio/wav"));
    assert_eq!(
        &deepgram.body[..],
        &audio.bytes()[..],
        "the same bytes, re-sent"
    );
    assert!(
        deepgram
            .query
            .as_deref()
            .unwrap_or("")
            .contains("model=nova-2")
    );
}

#[tokio::test]
async fn a_rejected_audio_file_is_terminal() {
    let server = ScriptedServer::start().await;
    server.push(
        WHISPER,
        Reply::json(
            400,
            error_body("invalid_request_error", None, "Invalid file format."),
        ),
    );
    let client = demo_client(&server);
    let audio = AudioInput::from_bytes(wav(), "memo.wav").unwrap();
    let err = client
        .transcribe(TranscriptionRequest::new(audio))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidRequest);
    assert_eq!(server.requests().len(), 1, "sent once, no failover");
}

#[tokio::test]
async fn chat_through_the_demo_environment_uses_both_wire_formats() {
    let server = ScriptedServer::start().await;
    server.push(
        "/openai/v1/chat/completions",
        Reply::json(500, error_body("server_error", None, "x")),
    );
    server.push(
        "/anthropic/v1/messages",
        Reply::json(200, r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-3-5-haiku-latest",
            "content":[{"type":"text","text":"Salut"}],"stop_reason":"end_turn","stop_sequence":null,
            "usage":{"input_tokens":12,"output_tokens":3}}"#).header("request-id", "req_ant_1"),
    );
    let client = demo_client(&server);
    let r = client
        .chat(
            llm_failover::ChatRequest::new()
                .system("Be short.")
                .user("Hello")
                .max_tokens(10),
        )
        .await
        .unwrap();
    assert_eq!(
        (r.provider.as_str(), r.text.as_str()),
        ("demo-anthropic", "Salut")
    );
    assert_eq!(r.request_id.as_deref(), Some("req_ant_1"));
    let body = server.requests()[1].json();
    assert_eq!(body["system"], "Be short.");
    assert_eq!(body["max_tokens"], 10);
    assert_eq!(
        server.requests()[1].header("x-api-key"),
        Some("emulator-key")
    );
}

#[tokio::test]
async fn a_missing_key_variable_is_a_config_error_naming_it() {
    let config = Config::from_path(concat!(env!("CARGO_MANIFEST_DIR"), "/providers.toml")).unwrap();
    let err = Client::builder()
        .config(config)
        .environment("prod")
        .env_lookup(|_| None)
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config);
    assert!(err.message().contains("OPENAI_API_KEY"), "{err}");
}
