//! Authentication and request validation as each provider does it.

use llm_failover_emulator::{Emulator, ProviderConfig};
use serde_json::json;

use crate::support::*;

fn all_kinds() -> llm_failover_emulator::EmulatorBuilder {
    Emulator::builder()
        .provider(
            ProviderConfig::openai("openai").with_key("sk-proj-abcdefghijklmnopqrstuvwxyz123456"),
        )
        .azure("azure")
        .anthropic("anthropic")
        .gemini("gemini")
        .deepgram("deepgram")
}

/// A request to `prefix` with `key` (None = no credential) in the provider's own header.
fn with_key(emu: &Emulator, prefix: &str, key: Option<&str>) -> reqwest::RequestBuilder {
    let c = client();
    let base = emu.base_url(prefix);
    let rb = match prefix {
        "openai" => c
            .post(format!("{base}/chat/completions"))
            .json(&chat_body("hi")),
        "azure" => c
            .post(format!(
                "{base}/openai/deployments/d/chat/completions?api-version=2024-10-21"
            ))
            .json(&chat_body("hi")),
        "anthropic" => c
            .post(format!("{base}/v1/messages"))
            .header("anthropic-version", "2023-06-01")
            .json(&messages_body("hi", 5)),
        "gemini" => c
            .post(format!(
                "{base}/v1beta/models/gemini-2.0-flash:generateContent"
            ))
            .json(&gemini_body("hi")),
        _ => c
            .post(format!("{base}/v1/listen"))
            .header("content-type", "audio/wav")
            .body(wav(0.5)),
    };
    let Some(key) = key else { return rb };
    match prefix {
        "openai" => rb.bearer_auth(key),
        "azure" => rb.header("api-key", key),
        "anthropic" => rb.header("x-api-key", key),
        "gemini" => rb.header("x-goog-api-key", key),
        _ => rb.header("authorization", format!("Token {key}")),
    }
}

// OpenAI error codes (platform.openai.com/docs/guides/error-codes), Azure 401 bodies,
// Anthropic authentication_error (docs.anthropic.com/en/api/errors), Gemini 400
// API_KEY_INVALID / 403 PERMISSION_DENIED (ai.google.dev/gemini-api/docs/troubleshooting),
// Deepgram INVALID_AUTH (developers.deepgram.com/reference/errors).
#[tokio::test]
async fn a_missing_or_wrong_key_gets_the_providers_own_refusal() {
    let emu = all_kinds().start().await.unwrap();
    let cases = [
        (
            "openai",
            None,
            401,
            "/error/message",
            "You didn't provide an API key",
        ),
        (
            "openai",
            Some("sk-wrong-key-0123456789abcdef"),
            401,
            "/error/code",
            "invalid_api_key",
        ),
        ("azure", None, 401, "/error/code", "401"),
        (
            "azure",
            Some("nope"),
            401,
            "/error/message",
            "invalid subscription key",
        ),
        (
            "anthropic",
            None,
            401,
            "/error/message",
            "x-api-key header is required",
        ),
        (
            "anthropic",
            Some("nope"),
            401,
            "/error/type",
            "authentication_error",
        ),
        ("gemini", None, 403, "/error/status", "PERMISSION_DENIED"),
        (
            "gemini",
            Some("nope"),
            400,
            "/error/details/0/reason",
            "API_KEY_INVALID",
        ),
        ("deepgram", None, 401, "/err_code", "INVALID_AUTH"),
        (
            "deepgram",
            Some("nope"),
            401,
            "/err_msg",
            "Invalid credentials.",
        ),
    ];
    for (prefix, key, status, pointer, needle) in cases {
        let (got, _, body) = parts(with_key(&emu, prefix, key).send().await.unwrap()).await;
        assert_eq!(got, status, "{prefix} {key:?}: {body}");
        let field = body
            .pointer(pointer)
            .and_then(|v| v.as_str())
            .unwrap_or_default();
        assert!(field.contains(needle), "{prefix} {key:?}: {body}");
    }
    let c = emu.counters("openai");
    assert_eq!((c.requests, c.client_errors, c.ok), (2, 2, 0));
}

// Anthropic takes the key in `x-api-key` (docs.claude.com/en/api/overview#authentication) or
// as the SDKs' `auth_token` in `Authorization: Bearer` (github.com/anthropics/
// anthropic-sdk-python); a missing or wrong one is the 401 authentication_error of
// docs.claude.com/en/api/errors, on messages and count_tokens alike.
#[tokio::test]
async fn anthropic_takes_the_key_as_x_api_key_or_a_bearer_token() {
    let emu = all_kinds().start().await.unwrap();
    let key = emu.key("anthropic").to_owned();
    let base = emu.base_url("anthropic");
    for path in ["/v1/messages", "/v1/messages/count_tokens"] {
        let send = |auth: Option<(&str, String)>| {
            let rb = client()
                .post(format!("{base}{path}"))
                .header("anthropic-version", "2023-06-01")
                .json(&messages_body("hi", 5));
            match auth {
                Some((name, value)) => rb.header(name, value),
                None => rb,
            }
        };
        let cases = [
            (Some(("x-api-key", key.clone())), 200, ""),
            (Some(("authorization", format!("Bearer {key}"))), 200, ""),
            (Some(("authorization", format!("bearer {key}"))), 200, ""),
            (
                Some(("authorization", "Bearer nope".to_owned())),
                401,
                "authentication_error",
            ),
            (
                Some(("authorization", format!("Basic {key}"))),
                401,
                "authentication_error",
            ),
            (None, 401, "authentication_error"),
        ];
        for (auth, status, kind) in cases {
            let what = format!("{path} {auth:?}");
            let (got, _, body) = parts(send(auth).send().await.unwrap()).await;
            assert_eq!(got, status, "{what}: {body}");
            if status == 401 {
                assert_eq!(body["type"], "error", "{what}: {body}");
                assert_eq!(body["error"]["type"], kind, "{what}: {body}");
                assert!(body["request_id"].is_string(), "{what}: {body}");
            }
        }
    }
    // A wrong x-api-key is refused even beside a right bearer token: x-api-key wins.
    let (got, _, body) = parts(
        client()
            .post(format!("{base}/v1/messages"))
            .header("anthropic-version", "2023-06-01")
            .header("x-api-key", "nope")
            .bearer_auth(&key)
            .json(&messages_body("hi", 5))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (got, &body["error"]["type"]),
        (401, &json!("authentication_error"))
    );
}

#[tokio::test]
async fn openai_echoes_a_wrong_key_masked_never_whole() {
    let emu = all_kinds().start().await.unwrap();
    let key = "sk-proj-WRONGabcdefghijklmnopqrstuvwxyzWXYZ";
    let (_, _, body) = parts(with_key(&emu, "openai", Some(key)).send().await.unwrap()).await;
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("Incorrect API key provided: sk-proj-*"),
        "{msg}"
    );
    assert!(msg.contains("*WXYZ."), "{msg}");
    assert!(!msg.contains(key));
    assert!(!msg.contains("abcdefghijklmnop"));
}

#[tokio::test]
async fn requests_that_break_the_providers_rules_get_its_400s() {
    let emu = all_kinds()
        .provider(ProviderConfig::openai("strict").with_models(["gpt-4o-mini"]))
        .provider(ProviderConfig::azure("az").with_models(["prod"]))
        .start()
        .await
        .unwrap();
    let c = client();
    let openai = |body: serde_json::Value| {
        c.post(format!("{}/chat/completions", emu.base_url("openai")))
            .bearer_auth(emu.key("openai"))
            .json(&body)
    };
    let anthropic = |body: serde_json::Value| {
        c.post(format!("{}/v1/messages", emu.base_url("anthropic")))
            .header("x-api-key", emu.key("anthropic"))
            .header("anthropic-version", "2023-06-01")
            .json(&body)
    };
    let cases: Vec<(&str, reqwest::RequestBuilder, u16, &str, &str)> = vec![
        (
            "openai without messages",
            openai(json!({"model": "gpt-4o-mini"})),
            400,
            "/error/code",
            "missing_required_parameter",
        ),
        (
            "openai without model",
            openai(json!({"messages": [{"role": "user", "content": "x"}]})),
            400,
            "/error/message",
            "you must provide a model parameter",
        ),
        (
            "openai empty messages",
            openai(json!({"model": "m", "messages": []})),
            400,
            "/error/code",
            "empty_array",
        ),
        (
            "openai stream_options without stream",
            openai(
                json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": true}}),
            ),
            400,
            "/error/param",
            "stream_options",
        ),
        (
            "openai malformed JSON",
            c.post(format!("{}/chat/completions", emu.base_url("openai")))
                .bearer_auth(emu.key("openai"))
                .body("{\"model\": "),
            400,
            "/error/message",
            "We could not parse the JSON body",
        ),
        (
            "openai wrong type",
            openai(json!({"model": "m", "messages": "hi"})),
            400,
            "/error/type",
            "invalid_request_error",
        ),
        (
            "openai unknown model",
            c.post(format!("{}/chat/completions", emu.base_url("strict")))
                .bearer_auth(emu.key("strict"))
                .json(&json!({"model": "gpt-5", "messages": [{"role": "user", "content": "x"}]})),
            404,
            "/error/code",
            "model_not_found",
        ),
        (
            "openai unknown route",
            c.post(format!("{}/chat/completion", emu.base_url("openai")))
                .bearer_auth(emu.key("openai"))
                .json(&chat_body("x")),
            404,
            "/error/message",
            "Invalid URL (POST /v1/chat/completion)",
        ),
        (
            "anthropic without max_tokens",
            anthropic(json!({"model": "claude", "messages": [{"role": "user", "content": "x"}]})),
            400,
            "/error/message",
            "max_tokens: Field required",
        ),
        (
            "anthropic without version",
            c.post(format!("{}/v1/messages", emu.base_url("anthropic")))
                .header("x-api-key", emu.key("anthropic"))
                .json(&messages_body("x", 5)),
            400,
            "/error/message",
            "anthropic-version: header is required",
        ),
        (
            "anthropic bad role",
            anthropic(
                json!({"model": "c", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}),
            ),
            400,
            "/error/type",
            "invalid_request_error",
        ),
        // docs.claude.com/en/api/messages-count-tokens takes a messages body; its errors
        // are the invalid_request_error of docs.claude.com/en/api/errors.
        (
            "count_tokens malformed JSON",
            c.post(format!(
                "{}/v1/messages/count_tokens",
                emu.base_url("anthropic")
            ))
            .header("x-api-key", emu.key("anthropic"))
            .header("anthropic-version", "2023-06-01")
            .body("{\"model\": "),
            400,
            "/error/type",
            "invalid_request_error",
        ),
        (
            "count_tokens without messages",
            anthropic_count(&emu, "anthropic", &json!({"model": "claude"})),
            400,
            "/error/message",
            "messages: Field required",
        ),
        (
            "count_tokens without model",
            anthropic_count(
                &emu,
                "anthropic",
                &json!({"messages": [{"role": "user", "content": "x"}]}),
            ),
            400,
            "/error/message",
            "model: Field required",
        ),
        (
            "count_tokens wrong type",
            anthropic_count(&emu, "anthropic", &json!({"model": "c", "messages": "hi"})),
            400,
            "/error/type",
            "invalid_request_error",
        ),
        (
            "count_tokens bad role",
            anthropic_count(
                &emu,
                "anthropic",
                &json!({"model": "c", "messages": [{"role": "system", "content": "x"}]}),
            ),
            400,
            "/error/message",
            "messages.0.role",
        ),
        (
            "count_tokens without version",
            c.post(format!(
                "{}/v1/messages/count_tokens",
                emu.base_url("anthropic")
            ))
            .header("x-api-key", emu.key("anthropic"))
            .json(&messages_body("x", 5)),
            400,
            "/error/message",
            "anthropic-version: header is required",
        ),
        (
            "count_tokens GET",
            client()
                .get(format!(
                    "{}/v1/messages/count_tokens",
                    emu.base_url("anthropic")
                ))
                .header("x-api-key", emu.key("anthropic"))
                .header("anthropic-version", "2023-06-01"),
            404,
            "/error/type",
            "not_found_error",
        ),
        (
            "gemini without contents",
            gemini(
                &emu,
                "gemini",
                "gemini-2.0-flash",
                "generateContent",
                &json!({}),
            ),
            400,
            "/error/status",
            "INVALID_ARGUMENT",
        ),
        (
            "gemini malformed JSON",
            c.post(format!(
                "{}/v1beta/models/g:generateContent",
                emu.base_url("gemini")
            ))
            .header("x-goog-api-key", emu.key("gemini"))
            .body("nope"),
            400,
            "/error/message",
            "Invalid JSON payload received",
        ),
        (
            "azure without api-version",
            c.post(format!(
                "{}/openai/deployments/prod/chat/completions",
                emu.base_url("az")
            ))
            .header("api-key", emu.key("az"))
            .json(&chat_body("x")),
            404,
            "/error/message",
            "Resource not found",
        ),
        (
            "azure bad api-version",
            c.post(format!(
                "{}/openai/deployments/prod/chat/completions?api-version=latest",
                emu.base_url("az")
            ))
            .header("api-key", emu.key("az"))
            .json(&chat_body("x")),
            400,
            "/error/message",
            "API version not supported",
        ),
        (
            "azure unknown deployment",
            azure_chat(&emu, "az", "staging", &chat_body("x")),
            404,
            "/error/code",
            "DeploymentNotFound",
        ),
        (
            "deepgram empty audio",
            deepgram_listen(&emu, "deepgram", "", Vec::new()),
            400,
            "/err_msg",
            "corrupt or unsupported data",
        ),
        (
            "deepgram url body",
            c.post(format!("{}/v1/listen", emu.base_url("deepgram")))
                .header("authorization", "Token emulator-key")
                .json(&json!({"url": "https://example.com/a.wav"})),
            400,
            "/err_code",
            "REMOTE_CONTENT_ERROR",
        ),
        (
            "transcription not multipart",
            c.post(format!("{}/audio/transcriptions", emu.base_url("openai")))
                .bearer_auth(emu.key("openai"))
                .json(&json!({"model": "whisper-1"})),
            400,
            "/error/message",
            "expected multipart/form-data",
        ),
        (
            "transcription without file",
            c.post(format!("{}/audio/transcriptions", emu.base_url("openai")))
                .bearer_auth(emu.key("openai"))
                .multipart(reqwest::multipart::Form::new().text("model", "whisper-1")),
            400,
            "/error/param",
            "file",
        ),
        (
            "transcription too short",
            c.post(format!("{}/audio/transcriptions", emu.base_url("openai")))
                .bearer_auth(emu.key("openai"))
                .multipart(
                    reqwest::multipart::Form::new()
                        .text("model", "whisper-1")
                        .part(
                            "file",
                            reqwest::multipart::Part::bytes(wav(0.05)).file_name("a.wav"),
                        ),
                ),
            400,
            "/error/code",
            "audio_too_short",
        ),
        (
            "transcription unknown timestamp granularity",
            openai_transcription(
                &emu,
                "openai",
                transcription_form(
                    1.0,
                    &[
                        ("response_format", "verbose_json"),
                        ("timestamp_granularities[]", "word"),
                        ("timestamp_granularities[]", "char"),
                    ],
                ),
            ),
            400,
            "/error/param",
            "timestamp_granularities",
        ),
        (
            "unknown prefix",
            c.post(format!("{}/nobody/v1/chat/completions", emu.url()))
                .json(&chat_body("x")),
            404,
            "/error/message",
            "no provider under /nobody",
        ),
    ];
    for (name, rb, status, pointer, needle) in cases {
        let (got, _, body) = parts(rb.send().await.unwrap()).await;
        assert_eq!(got, status, "{name}: {body}");
        let field = body
            .pointer(pointer)
            .and_then(|v| v.as_str())
            .unwrap_or_default();
        assert!(field.contains(needle), "{name}: {body}");
    }
}

#[tokio::test]
async fn a_body_over_the_cap_gets_the_providers_413() {
    let emu = Emulator::builder()
        .provider(ProviderConfig::openai("openai").with_max_body_bytes(1024))
        .provider(ProviderConfig::anthropic("anthropic").with_max_body_bytes(1024))
        .start()
        .await
        .unwrap();
    let big = "x".repeat(4096);
    let (status, _, body) = parts(
        openai_chat(&emu, "openai", &chat_body(&big))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 413, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Maximum content size limit (1024)")
    );
    let (status, _, body) = parts(
        anthropic_messages(&emu, "anthropic", &messages_body(&big, 5))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["type"], "request_too_large");
}

#[tokio::test]
async fn garbage_bodies_get_a_4xx_on_every_route_never_a_crash() {
    let emu = all_kinds().start().await.unwrap();
    let routes = [
        (
            "openai",
            "/chat/completions",
            "authorization",
            "Bearer sk-proj-abcdefghijklmnopqrstuvwxyz123456",
        ),
        (
            "openai",
            "/audio/transcriptions",
            "authorization",
            "Bearer sk-proj-abcdefghijklmnopqrstuvwxyz123456",
        ),
        (
            "azure",
            "/openai/deployments/d/chat/completions?api-version=2024-10-21",
            "api-key",
            "emulator-key",
        ),
        (
            "azure",
            "/openai/deployments/d/audio/transcriptions?api-version=2024-10-21",
            "api-key",
            "emulator-key",
        ),
        ("anthropic", "/v1/messages", "x-api-key", "emulator-key"),
        (
            "anthropic",
            "/v1/messages/count_tokens",
            "x-api-key",
            "emulator-key",
        ),
        (
            "gemini",
            "/v1beta/models/g:streamGenerateContent?alt=sse",
            "x-goog-api-key",
            "emulator-key",
        ),
        (
            "deepgram",
            "/v1/listen",
            "authorization",
            "Token emulator-key",
        ),
    ];
    let bodies: [(&str, &[u8]); 7] = [
        ("application/json", b"\xff\xfe\x00garbage"),
        ("application/json", b"[1, 2, 3]"),
        (
            "application/json",
            b"{\"messages\": [{\"role\": 5}], \"model\": {}}",
        ),
        ("multipart/form-data; boundary=xyz", b"--xyz\r\nnot a part"),
        ("multipart/form-data", b"no boundary"),
        ("text/plain", b""),
        ("audio/wav", b"RIFF\x00\x00\x00\x00WAVE"),
    ];
    for (prefix, path, name, value) in routes {
        for (ct, body) in bodies {
            let resp = client()
                .post(format!("{}{path}", emu.base_url(prefix)))
                .header(name, value)
                .header("anthropic-version", "2023-06-01")
                .header("content-type", ct)
                .body(body.to_vec())
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            // Deepgram takes a raw audio body (it is not decoded here); the rest must refuse.
            let audio = prefix == "deepgram" && ct == "audio/wav";
            if audio {
                assert_eq!(status, 200, "{prefix}{path} {ct}");
            } else {
                assert!(
                    (400..500).contains(&status),
                    "{prefix}{path} {ct} {body:?}: {status}"
                );
            }
        }
    }
}

#[tokio::test]
async fn absurd_admin_values_never_crash_the_server() {
    let emu = all_kinds().start().await.unwrap();
    let c = client();
    let admin = |path: &str, body: serde_json::Value| {
        c.post(format!("{}/_admin/{path}", emu.url()))
            .json(&body)
            .send()
    };
    let r = admin("limits", json!({"provider": "azure", "limits": {"rpm": u64::MAX, "tpm": u64::MAX, "rpd": u64::MAX}, "minute_ms": u64::MAX})).await.unwrap();
    assert_eq!(r.status(), 200);
    let r = admin(
        "faults",
        json!({"provider": "azure", "script": [
            {"kind": "rate_limit", "retry_after": {"http_date": u64::MAX}},
            {"kind": "rate_limit"},
            {"kind": "daily_quota"},
            {"kind": "status", "status": 999},
            {"kind": "html", "status": 42},
        ]}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    for want in [429, 429, 429, 999, 502] {
        let resp = azure_chat(&emu, "azure", "d", &chat_body("x"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), want);
    }
    assert_eq!(
        azure_chat(&emu, "azure", "d", &chat_body("x"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
}
