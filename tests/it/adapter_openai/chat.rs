//! Chat completions: request fields, JSON modes, auth, response parsing.

use super::*;

#[tokio::test]
async fn sends_a_chat_completion_and_reads_text_usage_model_and_request_id() {
    let h = Harness::new().await;
    h.server.push(
        CHAT,
        Reply::json(
            200,
            include_str!("../../fixtures/openai/chat_completion.json"),
        )
        .header("x-request-id", "req_abc"),
    );
    let ex = h.chat(&prompt()).await;
    let resp = ex.result.unwrap();
    assert_eq!(resp.text, "Hello! How can I assist you today?");
    assert_eq!(resp.finish_reason, Some(FinishReason::Stop));
    assert_eq!(resp.usage, Some(Usage::new(19, 10)));
    assert_eq!(resp.model, "gpt-4.1-2025-04-14");
    assert_eq!(resp.request_id.as_deref(), Some("req_abc"));
    assert_eq!(resp.provider.as_str(), "openai");
    // No limit header in this reply: there is nothing to report.
    assert!(ex.report.is_none());

    let got = h.only_request();
    assert_eq!(got.method, "POST");
    assert_eq!(got.path, CHAT);
    assert_eq!(got.query, None);
    assert_eq!(
        got.header("authorization"),
        Some(&*format!("Bearer {SENTINEL}"))
    );
    assert_eq!(got.header("content-type"), Some("application/json"));
    // System messages stay where they were, in order.
    assert_eq!(
        got.json(),
        serde_json::json!({
            "model": "gpt-4o-mini",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Say hello."},
                {"role": "assistant", "content": "Hello."},
                {"role": "system", "content": "Now in French."},
                {"role": "user", "content": "Again."},
            ],
            "max_tokens": 32,
            "temperature": 0.2,
            "stop": ["\n\n"],
        })
    );
}

#[tokio::test]
async fn json_modes_send_response_format() {
    let h = Harness::new().await;
    let answer = r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"{\"city\":\"Paris\"}"},"finish_reason":"stop"}]}"#;
    h.server.push(CHAT, Reply::json(200, answer));
    h.server.push(CHAT, Reply::json(200, answer));
    let object = ChatRequest::from_prompt("Capital of France as JSON")
        .response_format(ResponseFormat::JsonObject);
    let schema = ChatRequest::from_prompt("Capital of France as JSON").response_format(
        ResponseFormat::JsonSchema {
            name: "capital".into(),
            schema: serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        },
    );
    let a = h.chat(&object).await.result.unwrap();
    let b = h.chat(&schema).await.result.unwrap();
    assert_eq!(a.text, r#"{"city":"Paris"}"#);
    assert_eq!(b.text, a.text);
    let sent = h.server.requests();
    assert_eq!(
        sent[0].json()["response_format"],
        serde_json::json!({"type": "json_object"})
    );
    assert_eq!(
        sent[1].json()["response_format"],
        serde_json::json!({
            "type": "json_schema",
            "json_schema": {"name": "capital", "schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
        })
    );
}

#[tokio::test]
async fn sends_no_authorization_header_without_a_credential() {
    // Ollama and vLLM run without keys: https://github.com/ollama/ollama/blob/main/docs/openai.md
    let h = Harness::new().await;
    h.server.push(
        CHAT,
        Reply::json(
            200,
            include_str!("../../fixtures/openai/chat_completion.json"),
        ),
    );
    h.chat_with(&ChatRequest::from_prompt("hi"), None)
        .await
        .result
        .unwrap();
    let got = h.only_request();
    assert!(got.headers.get("authorization").is_none());
}

#[tokio::test]
async fn null_content_is_empty_text_not_a_panic() {
    // A tool call answers with `content: null` (Chat Completions reference, function calling).
    let h = Harness::new().await;
    h.server.push(
        CHAT,
        Reply::json(
            200,
            include_str!("../../fixtures/openai/chat_completion_tool_call.json"),
        ),
    );
    let resp = h.chat(&prompt()).await.result.unwrap();
    assert_eq!(resp.text, "");
    assert_eq!(resp.finish_reason, Some(FinishReason::ToolCalls));
}

#[tokio::test]
async fn keeps_the_version_path_of_compatible_hosts() {
    // Groq: base_url https://api.groq.com/openai/v1 (https://console.groq.com/docs/openai).
    let h = Harness::at("/openai/v1/").await;
    h.server.push(
        "/openai/v1/chat/completions",
        Reply::json(
            200,
            include_str!("../../fixtures/openai/chat_completion.json"),
        ),
    );
    h.chat(&prompt()).await.result.unwrap();
    assert_eq!(h.only_request().path, "/openai/v1/chat/completions");
}

#[tokio::test]
async fn a_reply_that_states_limits_comes_with_its_report() {
    let h = Harness::new().await;
    h.server.push(
        CHAT,
        Reply::json(
            200,
            include_str!("../../fixtures/openai/chat_completion.json"),
        )
        .header("x-ratelimit-limit-requests", "500")
        .header("x-ratelimit-remaining-requests", "499")
        .header("x-ratelimit-reset-requests", "120ms"),
    );
    let ex = h.chat(&prompt()).await;
    assert!(ex.result.is_ok());
    let report = ex.report.expect("the reply states a request window");
    let requests = report.requests.as_ref().expect("the request window");
    assert_eq!(requests.limit, Some(500));
    assert_eq!(requests.remaining, Some(499));
}

#[tokio::test]
async fn an_invalid_request_never_reaches_the_server() {
    let h = Harness::new().await;
    let ex = h.chat(&ChatRequest::new()).await;
    let err = ex.result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidRequest);
    assert_eq!(err.provider().map(ProviderId::as_str), Some("openai"));
    assert!(ex.report.is_none());
    assert!(h.server.requests().is_empty());
}

#[test]
fn the_adapter_reports_its_kind_and_capabilities() {
    let p = OpenAi::new(
        ProviderId::new("x"),
        "http://127.0.0.1:1/v1".parse().unwrap(),
    );
    assert_eq!(p.kind(), "openai"); // as written in providers.toml
    assert!(p.capabilities().chat && p.capabilities().transcription);
}
