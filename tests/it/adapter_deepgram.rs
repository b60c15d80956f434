//! The Deepgram adapter over real loopback HTTP, driven by the same one-attempt function the
//! router uses (`transcribe_once`).
//!
//! Wire format references (fixtures are the docs' example bodies):
//! - Pre-recorded audio: <https://developers.deepgram.com/reference/speech-to-text-api/listen>
//!   (`POST /v1/listen?model=…`, raw audio body with its `Content-Type`,
//!   `Authorization: Token KEY`; `results.channels[0].alternatives[0].transcript`, `words`,
//!   `paragraphs`, `metadata.duration`, `metadata.request_id`, `detected_language`).
//! - Options: <https://developers.deepgram.com/docs/smart-format>,
//!   <https://developers.deepgram.com/docs/language-detection>.
//! - Errors: <https://developers.deepgram.com/reference/errors> (400 "corrupt or unsupported
//!   data", 401 `INVALID_AUTH`, 402 insufficient credits, 403, 413, 429, 503; the
//!   `err_code` / `err_msg` / `request_id` body). Which kind each status and body is, is a
//!   row of the conformance table (`conformance.rs`), every kind alike.

use std::time::Duration;

use llm_failover::provider::Provider;
use llm_failover::provider::deepgram::Deepgram;
use llm_failover::{
    AudioInput, ChatRequest, Credential, Disposition, ErrorKind, ProviderId, Result, Transcript,
    TranscriptionRequest,
};
use llm_failover_emulator::scripted::{Recorded, Reply, ScriptedServer};

use crate::support::adapter::{self, only_request};

const MODEL: &str = "nova-3";
const SENTINEL: &str = "sk-ant-SENTINEL-abc123";
const PATH: &str = "/v1/listen";

fn provider(server: &ScriptedServer) -> Deepgram {
    Deepgram::new(ProviderId::new("deepgram"), server.url().parse().unwrap()).with_model(MODEL)
}

/// A one-second, 8 kHz, 16-bit mono WAV of silence.
fn wav() -> Vec<u8> {
    llm_failover_emulator::text::silent_wav(1.0)
}

fn wav_request() -> TranscriptionRequest {
    TranscriptionRequest::new(AudioInput::from_bytes(wav(), "memo.wav").unwrap())
}

async fn transcribe_with(
    server: &ScriptedServer,
    req: &TranscriptionRequest,
    key: Option<&Credential>,
) -> Result<Transcript> {
    adapter::transcribe(&provider(server), req, MODEL, key)
        .await
        .result
}

async fn transcribe(server: &ScriptedServer, req: &TranscriptionRequest) -> Result<Transcript> {
    transcribe_with(server, req, Some(&Credential::new(SENTINEL))).await
}

fn query_pairs(got: &Recorded) -> Vec<(String, String)> {
    url::form_urlencoded::parse(got.query.as_deref().unwrap_or_default().as_bytes())
        .into_owned()
        .collect()
}

#[tokio::test]
async fn posts_the_raw_audio_with_its_content_type_model_language_and_token() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(200, include_str!("../fixtures/deepgram/listen_ok.json")),
    );
    let req = wav_request()
        .language("en")
        .prompt("names: Ada")
        .temperature(0.3);
    transcribe(&server, &req).await.unwrap();

    let got = only_request(&server);
    assert_eq!(got.method, "POST");
    assert_eq!(got.path, PATH);
    assert_eq!(
        query_pairs(&got),
        [
            ("model".to_owned(), MODEL.to_owned()),
            ("smart_format".to_owned(), "true".to_owned()),
            ("language".to_owned(), "en".to_owned()),
        ]
    );
    assert_eq!(
        got.header("authorization"),
        Some(format!("Token {SENTINEL}").as_str())
    );
    assert_eq!(got.header("content-type"), Some("audio/wav"));
    assert_eq!(
        &got.body[..],
        &wav()[..],
        "the body is the audio, byte for byte"
    );
}

#[tokio::test]
async fn asks_for_language_detection_when_no_language_is_given() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(200, include_str!("../fixtures/deepgram/listen_ok.json")),
    );
    let audio = AudioInput::from_bytes(vec![0xFF, 0xFB, 0x90, 0x44, 1, 2, 3], "clip.mp3").unwrap();
    transcribe_with(&server, &TranscriptionRequest::new(audio), None)
        .await
        .unwrap();
    let got = only_request(&server);
    let pairs = query_pairs(&got);
    assert!(
        pairs.contains(&("detect_language".to_owned(), "true".to_owned())),
        "{pairs:?}"
    );
    assert!(!pairs.iter().any(|(k, _)| k == "language"), "{pairs:?}");
    assert_eq!(got.header("content-type"), Some("audio/mpeg"));
    assert_eq!(&got.body[..], &[0xFF, 0xFB, 0x90, 0x44, 1, 2, 3]);
    assert_eq!(got.header("authorization"), None);
}

#[tokio::test]
async fn the_same_request_can_be_sent_twice() {
    let server = ScriptedServer::start().await;
    server.push(PATH, Reply::status(503));
    server.push(
        PATH,
        Reply::json(200, include_str!("../fixtures/deepgram/listen_ok.json")),
    );
    let req = wav_request();
    assert!(transcribe(&server, &req).await.is_err());
    transcribe(&server, &req).await.unwrap();
    let reqs = server.requests();
    assert_eq!(reqs[0].body, reqs[1].body);
}

#[tokio::test]
async fn reads_transcript_sentences_duration_language_and_request_id() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(200, include_str!("../fixtures/deepgram/listen_ok.json"))
            .header("dg-request-id", "dg-header-id"),
    );
    let t = transcribe(&server, &wav_request()).await.unwrap();
    assert_eq!(t.text, "Yeah. As much as it's worth celebrating,");
    assert_eq!(t.language.as_deref(), Some("en"));
    assert_eq!(t.duration, Some(Duration::from_secs_f64(25.933313)));
    assert_eq!(t.model, MODEL);
    assert_eq!(t.provider.as_str(), "deepgram");
    assert_eq!(t.request_id.as_deref(), Some("dg-header-id"));
    let texts: Vec<_> = t.segments.iter().map(|s| s.text.as_str()).collect();
    assert_eq!(texts, ["Yeah.", "As much as it's worth celebrating,"]);
    assert_eq!(t.segments[1].start, Duration::from_millis(320));
    assert_eq!(t.segments[1].end, Duration::from_millis(2340));
}

#[tokio::test]
async fn falls_back_to_one_segment_per_word_and_the_body_request_id() {
    let server = ScriptedServer::start().await;
    let mut body: serde_json::Value =
        serde_json::from_str(include_str!("../fixtures/deepgram/listen_ok.json")).unwrap();
    body["results"]["channels"][0]["alternatives"][0]
        .as_object_mut()
        .unwrap()
        .remove("paragraphs");
    server.push(PATH, Reply::json(200, body.to_string()));
    let t = transcribe(&server, &wav_request()).await.unwrap();
    assert_eq!(t.segments.len(), 7);
    assert_eq!(t.segments[0].text, "Yeah.");
    assert_eq!(t.segments[6].text, "celebrating,");
    assert_eq!(
        t.request_id.as_deref(),
        Some("4b1d9f0e-53c2-4d3e-9f3b-6c3c1b8e2a10")
    );
}

#[tokio::test]
async fn a_429_carries_its_retry_after_and_a_402_is_a_long_term_quota() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(
            429,
            r#"{"err_code":"TOO_MANY_REQUESTS","err_msg":"Too many requests.","request_id":"r"}"#,
        )
        .header("retry-after", "4")
        .header("dg-request-id", "dg-429"),
    );
    server.push(
        PATH,
        Reply::json(402, r#"{"err_code":"ASR_PAYMENT_REQUIRED","err_msg":"Project does not have enough credits.","request_id":"r"}"#),
    );
    let err = transcribe(&server, &wav_request()).await.unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(4)));
    assert_eq!(err.request_id(), Some("dg-429"));
    assert_eq!(err.disposition(), Disposition::RateLimited);
    let err = transcribe(&server, &wav_request()).await.unwrap_err();
    assert_eq!(err.disposition(), Disposition::QuotaExhausted);
    assert!(!err.is_retryable());
}

#[tokio::test]
async fn bad_success_bodies_are_decode_errors_naming_provider_and_status() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("malformed JSON", b"{\"results\": {".to_vec()),
        ("no results", br#"{"metadata":{"duration":1.0}}"#.to_vec()),
        ("no channels", br#"{"results":{"channels":[]}}"#.to_vec()),
        ("no alternatives", br#"{"results":{"channels":[{"alternatives":[]}]}}"#.to_vec()),
        ("no transcript", br#"{"results":{"channels":[{"alternatives":[{"words":[]}]}]}}"#.to_vec()),
        ("negative duration", br#"{"metadata":{"duration":-3.0},"results":{"channels":[{"alternatives":[{"transcript":"a"}]}]}}"#.to_vec()),
        ("word without times", br#"{"results":{"channels":[{"alternatives":[{"transcript":"a","words":[{"word":"a"}]}]}]}}"#.to_vec()),
        ("HTML page", b"<html><body>Bad Gateway</body></html>".to_vec()),
        ("empty body", Vec::new()),
        ("invalid UTF-8", b"{\"results\":{\"channels\":[{\"alternatives\":[{\"transcript\":\"\xff\"}]}]}}".to_vec()),
    ];
    let server = ScriptedServer::start().await;
    for (_, body) in &cases {
        server.push(
            PATH,
            Reply::status(200)
                .header("content-type", "application/json")
                .body(body.clone()),
        );
    }
    for (what, _) in cases {
        let err = transcribe(&server, &wav_request()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Decode, "{what}: {err}");
        assert!(
            err.to_string()
                .starts_with("deepgram: could not decode response (HTTP 200)"),
            "{what}: {err}"
        );
    }
}

#[tokio::test]
async fn chat_is_unsupported_and_sends_nothing() {
    let server = ScriptedServer::start().await;
    let p = provider(&server);
    assert!(!p.capabilities().chat);
    assert!(p.capabilities().transcription);
    let err = adapter::chat(&p, &ChatRequest::from_prompt("hi"), MODEL, None)
        .await
        .result
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn the_key_never_appears_in_an_error_even_when_the_server_echoes_it() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(
            401,
            serde_json::json!({"err_code": SENTINEL, "err_msg": format!("Invalid credentials: Token {SENTINEL}"), "request_id": SENTINEL}).to_string(),
        ),
    );
    server.push(
        PATH,
        Reply::status(500).body(format!("upstream rejected Token {SENTINEL}")),
    );
    for _ in 0..2 {
        let err = transcribe(&server, &wav_request()).await.unwrap_err();
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains(SENTINEL), "key leaked: {shown}");
    }
}
