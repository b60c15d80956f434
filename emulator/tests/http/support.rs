//! Helpers shared by the HTTP tests.

use std::time::Duration;

use llm_failover_emulator::Emulator;
use reqwest::{RequestBuilder, Response};
use serde_json::{Value, json};

pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// `POST {base}/chat/completions` with the provider's key.
pub(crate) fn openai_chat(emu: &Emulator, prefix: &str, body: &Value) -> RequestBuilder {
    client()
        .post(format!("{}/chat/completions", emu.base_url(prefix)))
        .bearer_auth(emu.key(prefix))
        .json(body)
}

/// `POST {base}/v1/messages` with the provider's key and version.
pub(crate) fn anthropic_messages(emu: &Emulator, prefix: &str, body: &Value) -> RequestBuilder {
    client()
        .post(format!("{}/v1/messages", emu.base_url(prefix)))
        .header("x-api-key", emu.key(prefix))
        .header("anthropic-version", "2023-06-01")
        .json(body)
}

/// `POST {base}/v1/messages/count_tokens` with the provider's key and version.
pub(crate) fn anthropic_count(emu: &Emulator, prefix: &str, body: &Value) -> RequestBuilder {
    client()
        .post(format!("{}/v1/messages/count_tokens", emu.base_url(prefix)))
        .header("x-api-key", emu.key(prefix))
        .header("anthropic-version", "2023-06-01")
        .json(body)
}

/// A transcription form: `secs` of WAV, whisper-1, and the given text fields in order.
pub(crate) fn transcription_form(secs: f64, fields: &[(&str, &str)]) -> reqwest::multipart::Form {
    let file = reqwest::multipart::Part::bytes(wav(secs))
        .file_name("a.wav")
        .mime_str("audio/wav")
        .unwrap();
    fields.iter().fold(
        reqwest::multipart::Form::new()
            .part("file", file)
            .text("model", "whisper-1"),
        |form, (name, value)| form.text(name.to_string(), value.to_string()),
    )
}

/// `POST {base}/audio/transcriptions` with the provider's key.
pub(crate) fn openai_transcription(
    emu: &Emulator,
    prefix: &str,
    form: reqwest::multipart::Form,
) -> RequestBuilder {
    client()
        .post(format!("{}/audio/transcriptions", emu.base_url(prefix)))
        .bearer_auth(emu.key(prefix))
        .multipart(form)
}

/// `POST {base}/v1beta/models/{model}:{verb}` with the provider's key.
pub(crate) fn gemini(
    emu: &Emulator,
    prefix: &str,
    model: &str,
    verb: &str,
    body: &Value,
) -> RequestBuilder {
    client()
        .post(format!(
            "{}/v1beta/models/{model}:{verb}",
            emu.base_url(prefix)
        ))
        .header("x-goog-api-key", emu.key(prefix))
        .json(body)
}

/// `POST {base}/openai/deployments/{deployment}/chat/completions?api-version=2024-10-21`.
pub(crate) fn azure_chat(
    emu: &Emulator,
    prefix: &str,
    deployment: &str,
    body: &Value,
) -> RequestBuilder {
    client()
        .post(format!(
            "{}/openai/deployments/{deployment}/chat/completions?api-version=2024-10-21",
            emu.base_url(prefix)
        ))
        .header("api-key", emu.key(prefix))
        .json(body)
}

/// `POST {base}/v1/listen` with raw audio.
pub(crate) fn deepgram_listen(
    emu: &Emulator,
    prefix: &str,
    query: &str,
    audio: Vec<u8>,
) -> RequestBuilder {
    client()
        .post(format!("{}/v1/listen?{query}", emu.base_url(prefix)))
        .header("authorization", format!("Token {}", emu.key(prefix)))
        .header("content-type", "audio/wav")
        .body(audio)
}

/// A small chat request.
pub(crate) fn chat_body(prompt: &str) -> Value {
    json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": prompt}]})
}

/// A small Anthropic request.
pub(crate) fn messages_body(prompt: &str, max_tokens: u64) -> Value {
    json!({"model": "claude-sonnet-4-5", "max_tokens": max_tokens,
           "messages": [{"role": "user", "content": prompt}]})
}

/// A small Gemini request.
pub(crate) fn gemini_body(prompt: &str) -> Value {
    json!({"contents": [{"role": "user", "parts": [{"text": prompt}]}]})
}

/// A WAV file of `secs` seconds of silence, 16 kHz mono 16-bit.
pub(crate) use llm_failover_emulator::text::silent_wav as wav;

/// Status, headers and the body as JSON (Null if not JSON).
pub(crate) async fn parts(resp: Response) -> (u16, reqwest::header::HeaderMap, Value) {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await.unwrap();
    (
        status,
        headers,
        serde_json::from_str(&text).unwrap_or(Value::Null),
    )
}

pub(crate) fn h<'a>(headers: &'a reqwest::header::HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The `data:` payloads of an SSE body, and the `event:` names in order.
pub(crate) fn sse(text: &str) -> (Vec<String>, Vec<String>) {
    let mut data = Vec::new();
    let mut events = Vec::new();
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if let Some(d) = line.strip_prefix("data: ") {
            data.push(d.to_owned());
        } else if let Some(e) = line.strip_prefix("event: ") {
            events.push(e.to_owned());
        }
    }
    (data, events)
}
