//! Secret hygiene: a sentinel key passes through config, requests, every error path, `Debug`,
//! results and tracing at TRACE, and appears nowhere. Prompts and answers never reach logs.

use std::sync::Arc;

use crate::support::{CHAT, Capture, SENTINEL, error_body, ok_body};
use futures_util::StreamExt;
use llm_failover::clock::ManualClock;
use llm_failover::rng::FixedRng;
use llm_failover::{AudioInput, ChatRequest, Client, Config, TranscriptionRequest};
use llm_failover_emulator::scripted::{Reply, ScriptedServer};

const PROMPT: &str = "PROMPT-SENTINEL-the user's private words";
const ANSWER: &str = "ANSWER-SENTINEL-the model's private words";
const ANTHROPIC_KEY: &str = "sk-ant-SENTINEL-9876543210fedcba";
const AUDIO: &str = "AUDIO-SENTINEL-the user's recorded voice";
const TRANSCRIPT: &str = "TRANSCRIPT-SENTINEL-what the user said";

fn config(openai: &ScriptedServer, anthropic: &ScriptedServer) -> Config {
    Config::from_toml_str(&format!(
        r#"
default_environment = "test"
[policy]
max_attempts = 2
failure_threshold = 0
[environments.test]
chat = ["openai", "anthropic"]
transcription = ["openai"]
[providers.openai]
kind = "openai"
base_url = "{}/v1"
model = "gpt-4o-mini"
transcription_model = "whisper-1"
api_key_env = {{ test = "SENTINEL_OPENAI_KEY" }}
[providers.anthropic]
kind = "anthropic"
base_url = "{}"
model = "claude-3-5-haiku-latest"
api_key_env = {{ test = "SENTINEL_ANTHROPIC_KEY" }}
"#,
        openai.url(),
        anthropic.url()
    ))
    .unwrap()
}

const MESSAGES: &str = "/v1/messages";

#[tokio::test]
async fn the_key_prompt_and_answer_never_appear_in_output() {
    let (capture, _guard) = Capture::start();

    let (openai, anthropic) = (ScriptedServer::start().await, ScriptedServer::start().await);
    // Each provider echoes its own key back, in the message and in the code.
    let echo = format!("Incorrect API key provided: {SENTINEL}.");
    let echo_ant = format!("Key {ANTHROPIC_KEY} is over its rate limit.");
    openai.push(
        CHAT,
        Reply::json(
            401,
            error_body("invalid_request_error", Some(SENTINEL), &echo),
        ),
    );
    openai.push(
        CHAT,
        Reply::json(500, error_body(SENTINEL, None, &echo)).header("x-request-id", SENTINEL),
    );
    anthropic.push(
        MESSAGES,
        Reply::json(
            429,
            format!(
                r#"{{"type":"error","error":{{"type":"rate_limit_error","message":"{echo_ant}"}}}}"#
            ),
        ),
    );
    // A 429 is a wait, not a failed attempt: the request ends (max_attempts = 2) at openai's
    // second 500.
    openai.push(
        CHAT,
        Reply::json(500, error_body(SENTINEL, None, &echo)).header("x-request-id", SENTINEL),
    );
    openai.push(CHAT, Reply::json(200, ok_body(ANSWER)));
    openai.push(
        CHAT,
        Reply::sse([
            format!(
                "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{ANSWER}\"}}}}]}}\n\n"
            ),
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
                .to_owned(),
            "data: [DONE]\n\n".to_owned(),
        ]),
    );
    openai.push(
        "/v1/audio/transcriptions",
        Reply::json(400, error_body("invalid_request_error", None, &echo)),
    );
    openai.push(
        "/v1/audio/transcriptions",
        Reply::json(200, format!(r#"{{"text":"{TRANSCRIPT}"}}"#)),
    );
    // An undecodable 200 is transient: retried once (max_attempts = 2).
    for _ in 0..2 {
        openai.push(
            CHAT,
            Reply::json(200, "{not json").header("x-request-id", "req_1"),
        );
    }

    let build = || {
        Client::builder()
            .config(config(&openai, &anthropic))
            .environment("test")
            .env_lookup(|var| match var {
                "SENTINEL_OPENAI_KEY" => Some(SENTINEL.to_owned()),
                "SENTINEL_ANTHROPIC_KEY" => Some(ANTHROPIC_KEY.to_owned()),
                _ => None,
            })
            .clock(Arc::new(ManualClock::new()))
            .rng(Arc::new(FixedRng::new([0.5])))
            .build()
            .unwrap()
    };
    // A rejected key closes its provider for the client's life: the 401 has a client of its
    // own, the rest of the script another.
    let rejected = build();
    let client = build();

    let mut shown = Vec::new();
    shown.push(format!("{client:?}"));
    shown.push(format!("{:?}", config(&openai, &anthropic)));
    let req = ChatRequest::from_prompt(PROMPT).max_tokens(20);
    shown.push(format!("{req:?}"));

    // 401: terminal, returned at once; the next request on that client fails at once too.
    let e = rejected.chat(req.clone()).await.unwrap_err();
    shown.push(format!("{e} {e:?}"));
    let e = rejected
        .chat_with(
            req.clone(),
            &llm_failover::RequestOptions::new().provider("openai"),
        )
        .await
        .unwrap_err();
    assert!(e.is_auth(), "{e}");
    assert_eq!(e.sends(), Some(0));
    shown.push(format!("{e} {e:?}"));
    // 500, 429 (failover to anthropic), 500: AllProvidersFailed carrying all three.
    let e = client.chat(req.clone()).await.unwrap_err();
    for a in e.attempts() {
        shown.push(format!("{a} {a:?} {:?} {:?}", a.code(), a.request_id()));
    }
    shown.push(format!("{e} {e:?}"));
    // Success and a stream.
    let ok = client
        .chat_with(
            req.clone(),
            &llm_failover::RequestOptions::new().provider("openai"),
        )
        .await
        .unwrap();
    assert_eq!(ok.text, ANSWER);
    shown.push(format!("{ok:?}"));
    let mut stream = client
        .chat_stream_with(
            req.clone(),
            &llm_failover::RequestOptions::new().provider("openai"),
        )
        .await
        .unwrap();
    while let Some(chunk) = stream.next().await {
        shown.push(format!("{:?}", chunk.unwrap()));
    }
    // Transcription error, a transcript, then an undecodable 200.
    let audio =
        AudioInput::from_bytes(format!("ID3 {AUDIO} {AUDIO}").into_bytes(), "memo.mp3").unwrap();
    shown.push(format!("{audio:?}"));
    let e = client
        .transcribe(TranscriptionRequest::new(audio.clone()).prompt(PROMPT))
        .await
        .unwrap_err();
    shown.push(format!("{e} {e:?}"));
    let t = client
        .transcribe(TranscriptionRequest::new(audio))
        .await
        .unwrap();
    assert_eq!(t.text, TRANSCRIPT);
    shown.push(format!("{t:?}"));
    let e = client
        .chat_with(req, &llm_failover::RequestOptions::new().provider("openai"))
        .await
        .unwrap_err();
    shown.push(format!("{e} {e:?}"));
    shown.push(format!("{:?}", client.stats()));
    shown.push(serde_json::to_string(&client.stats()).unwrap());

    drop(_guard);
    let log = capture.text();
    assert!(
        log.contains("attempt"),
        "tracing captured the attempts: {log}"
    );
    assert!(log.contains("TRACE"), "the capture runs at TRACE: {log}");
    shown.push(log);
    for text in &shown {
        for secret in [SENTINEL, ANTHROPIC_KEY] {
            assert!(!text.contains(secret), "a key leaked into: {text}");
        }
    }
    let log = shown.last().unwrap();
    assert!(
        !log.contains("PROMPT-SENTINEL"),
        "the prompt leaked into the log"
    );
    assert!(
        !log.contains("ANSWER-SENTINEL"),
        "the answer leaked into the log"
    );
    // The keys did reach the providers, so the test exercised them.
    assert_eq!(
        openai.requests()[0].header("authorization"),
        Some(format!("Bearer {SENTINEL}").as_str())
    );
    assert_eq!(
        anthropic.requests()[0].header("x-api-key"),
        Some(ANTHROPIC_KEY)
    );
}
