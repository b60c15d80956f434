//! Every wire format answers a well-formed request in the provider's documented shape.

use llm_failover_emulator::{Emulator, ProviderConfig};
use serde_json::{Value, json};

use crate::support::*;

// OpenAI chat completion object: platform.openai.com/docs/api-reference/chat/object
#[tokio::test]
async fn openai_chat_answers_with_a_completion_usage_and_request_id() {
    let emu = Emulator::builder().openai("openai").start().await.unwrap();
    let prompt = "Say hello to the emulator";
    let (status, headers, body) = parts(
        openai_chat(&emu, "openai", &chat_body(prompt))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(h(&headers, "content-type"), Some("application/json"));
    assert!(h(&headers, "x-request-id").unwrap().starts_with("req_"));
    assert_eq!(body["object"], "chat.completion");
    assert!(body["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(body["model"], "gpt-4o-mini");
    let choice = &body["choices"][0];
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["finish_reason"], "stop");
    let text = choice["message"]["content"].as_str().unwrap();
    let usage = &body["usage"];
    // Prompt tokens: characters / 4, rounded up.
    assert_eq!(usage["prompt_tokens"], prompt.len().div_ceil(4) as u64);
    assert_eq!(usage["completion_tokens"], text.split(' ').count() as u64);
    assert_eq!(
        usage["total_tokens"].as_u64(),
        Some(
            usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
        )
    );
    // No limits configured: no rate-limit headers.
    assert_eq!(h(&headers, "x-ratelimit-limit-requests"), None);
    let again = parts(
        openai_chat(&emu, "openai", &chat_body(prompt))
            .send()
            .await
            .unwrap(),
    )
    .await
    .2;
    assert_eq!(
        again["choices"][0]["message"]["content"], text,
        "deterministic per prompt"
    );
}

#[tokio::test]
async fn openai_chat_stops_at_max_tokens_with_finish_reason_length() {
    let emu = Emulator::builder().openai("openai").start().await.unwrap();
    for field in ["max_tokens", "max_completion_tokens"] {
        let mut req = chat_body("Tell me everything");
        req[field] = json!(2);
        let body = parts(openai_chat(&emu, "openai", &req).send().await.unwrap())
            .await
            .2;
        assert_eq!(body["choices"][0]["finish_reason"], "length", "{field}");
        assert_eq!(body["usage"]["completion_tokens"], 2, "{field}");
    }
}

// Streaming: platform.openai.com/docs/api-reference/chat-streaming; with
// stream_options.include_usage a last chunk has empty choices and the usage.
#[tokio::test]
async fn openai_stream_sends_chunks_then_usage_then_done() {
    let emu = Emulator::builder().openai("openai").start().await.unwrap();
    let mut req = chat_body("Stream please");
    req["stream"] = json!(true);
    req["stream_options"] = json!({"include_usage": true});
    let resp = openai_chat(&emu, "openai", &req).send().await.unwrap();
    assert_eq!(h(resp.headers(), "content-type"), Some("text/event-stream"));
    let (data, _) = sse(&resp.text().await.unwrap());
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    let usage_chunk = chunks.last().unwrap();
    assert_eq!(usage_chunk["choices"], json!([]));
    assert_eq!(
        usage_chunk["usage"]["completion_tokens"],
        text.split(' ').count() as u64
    );
    assert!(
        chunks[..chunks.len() - 1]
            .iter()
            .all(|c| c["usage"].is_null())
    );
    let whole = parts(
        openai_chat(&emu, "openai", &chat_body("Stream please"))
            .send()
            .await
            .unwrap(),
    )
    .await
    .2;
    assert_eq!(whole["choices"][0]["message"]["content"], text.as_str());
}

// Transcriptions: platform.openai.com/docs/api-reference/audio/createTranscription
#[tokio::test]
async fn openai_transcription_answers_in_every_response_format() {
    let emu = Emulator::builder().openai("openai").start().await.unwrap();
    type Check = fn(&str) -> bool;
    let cases: [(&str, &str, Check); 5] = [
        ("json", "application/json", |b| {
            serde_json::from_str::<Value>(b).unwrap()["text"].is_string()
        }),
        ("verbose_json", "application/json", |b| {
            let v: Value = serde_json::from_str(b).unwrap();
            v["task"] == "transcribe"
                && v["language"] == "english"
                && v["duration"] == 2.0
                && v["segments"].is_array()
        }),
        ("text", "text/plain; charset=utf-8", |b| {
            b.ends_with('\n') && !b.starts_with('{')
        }),
        ("srt", "text/plain; charset=utf-8", |b| {
            b.starts_with("1\n00:00:00,000 --> ")
        }),
        ("vtt", "text/plain; charset=utf-8", |b| {
            b.starts_with("WEBVTT\n\n00:00:00.000 --> ")
        }),
    ];
    for (format, ct, check) in cases {
        let form = reqwest::multipart::Form::new()
            .part(
                "file",
                reqwest::multipart::Part::bytes(wav(2.0))
                    .file_name("a.wav")
                    .mime_str("audio/wav")
                    .unwrap(),
            )
            .text("model", "whisper-1")
            .text("language", "en")
            .text("prompt", "context")
            .text("response_format", format);
        let resp = client()
            .post(format!("{}/audio/transcriptions", emu.base_url("openai")))
            .bearer_auth(emu.key("openai"))
            .multipart(form)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{format}");
        assert_eq!(h(resp.headers(), "content-type"), Some(ct), "{format}");
        let body = resp.text().await.unwrap();
        assert!(check(&body), "{format}: {body}");
    }
}

// Word timestamps: `timestamp_granularities[]` (platform.openai.com/docs/api-reference/audio/
// createTranscription) gives `words` ([{"word", "start", "end"}]) and/or `segments` in the
// verbose JSON (platform.openai.com/docs/api-reference/audio/verbose-json-object).
#[tokio::test]
async fn openai_verbose_json_has_words_or_segments_as_the_granularities_ask() {
    let emu = Emulator::builder().openai("openai").start().await.unwrap();
    let g = "timestamp_granularities[]";
    let cases: [(&[&str], bool, bool); 5] = [
        (&[], false, true),
        (&["segment"], false, true),
        (&["word"], true, false),
        (&["word", "segment"], true, true),
        (&["segment", "word", "word"], true, true),
    ];
    for (asked, words, segments) in cases {
        let mut fields = vec![("response_format", "verbose_json")];
        fields.extend(asked.iter().map(|v| (g, *v)));
        let (status, _, body) = parts(
            openai_transcription(&emu, "openai", transcription_form(4.0, &fields))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200, "{asked:?}: {body}");
        assert_eq!(body["segments"].is_array(), segments, "{asked:?}: {body}");
        assert_eq!(body["words"].is_array(), words, "{asked:?}: {body}");
        if !words {
            continue;
        }
        let text = body["text"].as_str().unwrap();
        let ws = body["words"].as_array().unwrap();
        assert_eq!(
            ws.len(),
            text.split(' ').count(),
            "one entry per word: {body}"
        );
        let mut last_end = 0.0;
        for w in ws {
            let word = w["word"].as_str().unwrap();
            let (start, end) = (w["start"].as_f64().unwrap(), w["end"].as_f64().unwrap());
            assert!(!word.is_empty() && !word.ends_with('.'), "{w}");
            assert!(text.contains(word), "{word} in {text}");
            assert!(last_end <= start && start < end && end <= 4.0, "{w}");
            last_end = end;
        }
    }
    // Formats without timestamps ignore the field.
    let (status, _, body) = parts(
        openai_transcription(
            &emu,
            "openai",
            transcription_form(1.0, &[("response_format", "json"), (g, "word")]),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body["text"].is_string() && body.get("words").is_none(),
        "{body}"
    );
}

// Azure OpenAI chat completions: learn.microsoft.com/azure/ai-services/openai/reference
#[tokio::test]
async fn azure_answers_on_a_deployment_route_with_content_filter_results() {
    let emu = Emulator::builder()
        .provider(ProviderConfig::azure("azure").with_models(["gpt4o-deploy"]))
        .start()
        .await
        .unwrap();
    let (status, headers, body) = parts(
        azure_chat(&emu, "azure", "gpt4o-deploy", &chat_body("hi"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(h(&headers, "apim-request-id").map(str::len), Some(36));
    assert_eq!(body["model"], "gpt4o-deploy");
    assert_eq!(
        body["prompt_filter_results"][0]["content_filter_results"]["hate"]["filtered"],
        false
    );
    assert_eq!(
        body["choices"][0]["content_filter_results"]["violence"]["severity"],
        "safe"
    );

    let mut req = chat_body("hi");
    req["stream"] = json!(true);
    let text = azure_chat(&emu, "azure", "gpt4o-deploy", &req)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let (data, _) = sse(&text);
    let first: Value = serde_json::from_str(&data[0]).unwrap();
    assert_eq!(
        first["choices"],
        json!([]),
        "Azure's first event has no choices"
    );
    assert!(first["prompt_filter_results"].is_array());
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
}

// Messages: docs.anthropic.com/en/api/messages
#[tokio::test]
async fn anthropic_answers_a_message_with_usage_and_request_id() {
    let emu = Emulator::builder()
        .anthropic("anthropic")
        .start()
        .await
        .unwrap();
    let mut req = messages_body("Hello, Claude", 1024);
    req["system"] = json!("You are terse.");
    let (status, headers, body) = parts(
        anthropic_messages(&emu, "anthropic", &req)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(h(&headers, "request-id").unwrap().starts_with("req_"));
    assert_eq!(body["type"], "message");
    assert!(body["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(body["content"][0]["type"], "text");
    assert_eq!(body["stop_reason"], "end_turn");
    // System and message text count: 14 + 13 characters → 7 tokens.
    assert_eq!(body["usage"]["input_tokens"], 7);
    let cut = parts(
        anthropic_messages(&emu, "anthropic", &messages_body("Hello, Claude", 1))
            .send()
            .await
            .unwrap(),
    )
    .await
    .2;
    assert_eq!(cut["stop_reason"], "max_tokens");
    assert_eq!(cut["usage"]["output_tokens"], 1);
}

// Token counting: docs.claude.com/en/api/messages-count-tokens answers {"input_tokens": N};
// N is the estimate a message with the same prompt reports (and is charged) as its input.
#[tokio::test]
async fn anthropic_counts_a_prompts_tokens_as_a_message_reports_them() {
    let emu = Emulator::builder()
        .anthropic("anthropic")
        .start()
        .await
        .unwrap();
    let mut req = messages_body("Hello, Claude", 1024);
    req["system"] = json!([{"type": "text", "text": "You are terse."}]);
    let mut count = req.clone();
    if let Some(o) = count.as_object_mut() {
        o.remove("max_tokens");
    }
    let (status, headers, body) = parts(
        anthropic_count(&emu, "anthropic", &count)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(h(&headers, "content-type"), Some("application/json"));
    assert!(h(&headers, "request-id").unwrap().starts_with("req_"));
    // 14 + 13 characters → 7 tokens, and nothing else in the body.
    assert_eq!(body, json!({"input_tokens": 7}));
    let message = parts(
        anthropic_messages(&emu, "anthropic", &req)
            .send()
            .await
            .unwrap(),
    )
    .await
    .2;
    assert_eq!(message["usage"]["input_tokens"], body["input_tokens"]);
    let log = emu.log();
    assert_eq!(log[0].path, "/anthropic/v1/messages/count_tokens");
    assert_eq!(
        (log[0].status, log[0].tokens, log[0].model.as_deref()),
        (Some(200), 0, Some("claude-sonnet-4-5"))
    );
}

// Streaming events: docs.anthropic.com/en/api/messages-streaming
#[tokio::test]
async fn anthropic_stream_sends_typed_events_in_order() {
    let emu = Emulator::builder()
        .anthropic("anthropic")
        .start()
        .await
        .unwrap();
    let mut req = messages_body("Stream, Claude", 100);
    req["stream"] = json!(true);
    let text = anthropic_messages(&emu, "anthropic", &req)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let (data, events) = sse(&text);
    assert_eq!(events.len(), data.len());
    assert_eq!(
        &events[..3],
        ["message_start", "content_block_start", "ping"]
    );
    assert_eq!(
        &events[events.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"]
    );
    assert!(
        events[3..events.len() - 3]
            .iter()
            .all(|e| e == "content_block_delta")
    );
    for (e, d) in events.iter().zip(&data) {
        let v: Value = serde_json::from_str(d).unwrap();
        assert_eq!(v["type"], e.as_str(), "each event's data names its type");
    }
    let delta: Value = serde_json::from_str(&data[data.len() - 2]).unwrap();
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert!(delta["usage"]["output_tokens"].as_u64().unwrap() > 0);
}

// generateContent: ai.google.dev/api/generate-content
#[tokio::test]
async fn gemini_generates_content_with_header_or_query_key() {
    let emu = Emulator::builder().gemini("gemini").start().await.unwrap();
    let mut req = gemini_body("Hi Gemini");
    req["generationConfig"] = json!({"maxOutputTokens": 3});
    let (status, _, body) = parts(
        gemini(&emu, "gemini", "gemini-2.0-flash", "generateContent", &req)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let cand = &body["candidates"][0];
    assert_eq!(cand["content"]["role"], "model");
    assert_eq!(cand["finishReason"], "MAX_TOKENS");
    assert_eq!(body["usageMetadata"]["candidatesTokenCount"], 3);
    assert_eq!(body["usageMetadata"]["promptTokenCount"], 3);
    assert_eq!(body["modelVersion"], "gemini-2.0-flash");
    let url = format!(
        "{}/v1beta/models/gemini-2.0-flash:generateContent?key={}",
        emu.base_url("gemini"),
        emu.key("gemini")
    );
    let resp = client()
        .post(url)
        .json(&gemini_body("Hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}

// streamGenerateContent?alt=sse: each event a whole GenerateContentResponse, CRLF-framed;
// without alt=sse the stream is one JSON array.
#[tokio::test]
async fn gemini_streams_sse_events_or_a_json_array() {
    let emu = Emulator::builder().gemini("gemini").start().await.unwrap();
    let resp = gemini(
        &emu,
        "gemini",
        "gemini-2.0-flash",
        "streamGenerateContent?alt=sse",
        &gemini_body("Stream it"),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(h(resp.headers(), "content-type"), Some("text/event-stream"));
    let text = resp.text().await.unwrap();
    assert!(text.contains("\r\n\r\n"));
    let (data, _) = sse(&text);
    let chunks: Vec<Value> = data
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let last = chunks.last().unwrap();
    assert_eq!(last["candidates"][0]["finishReason"], "STOP");
    assert!(last["usageMetadata"]["totalTokenCount"].as_u64().unwrap() > 0);
    let streamed: String = chunks
        .iter()
        .filter_map(|c| c["candidates"][0]["content"]["parts"][0]["text"].as_str())
        .collect();

    let array: Value = gemini(
        &emu,
        "gemini",
        "gemini-2.0-flash",
        "streamGenerateContent",
        &gemini_body("Stream it"),
    )
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let joined: String = array
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["candidates"][0]["content"]["parts"][0]["text"].as_str())
        .collect();
    assert_eq!(joined, streamed);
}

// Pre-recorded audio: developers.deepgram.com/reference/listen-file
#[tokio::test]
async fn deepgram_transcribes_a_raw_audio_body() {
    let emu = Emulator::builder()
        .deepgram("deepgram")
        .start()
        .await
        .unwrap();
    let resp = deepgram_listen(&emu, "deepgram", "model=nova-2&smart_format=true", wav(3.0))
        .send()
        .await
        .unwrap();
    let (status, headers, body) = parts(resp).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(h(&headers, "dg-request-id").map(str::len), Some(36));
    assert_eq!(
        body["metadata"]["request_id"].as_str(),
        h(&headers, "dg-request-id")
    );
    assert_eq!(body["metadata"]["duration"], 3.0);
    // The audio's SHA-256, a required field of the SDK's ListenV1ResponseMetadata
    // (`hashlib.sha256` of the same 3 s WAV).
    assert_eq!(
        body["metadata"]["sha256"],
        "d303811b8c84619667cd0501342f84ec6cbe69f7aa3856dcf52fabda374c92b8"
    );
    let alt = &body["results"]["channels"][0]["alternatives"][0];
    let transcript = alt["transcript"].as_str().unwrap();
    assert!(
        transcript.ends_with('.'),
        "smart_format punctuates: {transcript}"
    );
    assert!(alt["words"][0]["punctuated_word"].is_string());
    let plain = parts(
        deepgram_listen(&emu, "deepgram", "model=nova-2", wav(3.0))
            .send()
            .await
            .unwrap(),
    )
    .await
    .2;
    let plain = plain["results"]["channels"][0]["alternatives"][0]["transcript"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(plain, transcript.trim_end_matches('.').to_lowercase());
}

#[tokio::test]
async fn a_provider_on_its_own_port_serves_its_routes_at_the_root() {
    let emu = Emulator::builder()
        .provider(ProviderConfig::anthropic("claude").with_port(0))
        .openai("openai")
        .start()
        .await
        .unwrap();
    let base = emu.base_url("claude");
    assert!(!base.contains("/claude"), "{base}");
    assert_ne!(base, emu.url());
    let resp = anthropic_messages(&emu, "claude", &messages_body("hi", 10))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(emu.counters("claude").ok, 1);
    // Both providers at once, each under its own prefix on the main port.
    assert_eq!(
        openai_chat(&emu, "openai", &chat_body("x"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
}
