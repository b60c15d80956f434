//! The key never shows in an error, whatever the server echoes.

use super::*;

#[tokio::test]
async fn the_key_never_appears_in_errors_even_when_the_server_echoes_it() {
    let echo = format!(
        r#"{{"error":{{"message":"Incorrect API key provided: {SENTINEL}. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}}}"#
    );
    // The key straddles the 512-byte message cap: it must not survive half-cut.
    let long = format!(
        r#"{{"error":{{"message":"{} {SENTINEL} trailing words","type":"invalid_request_error"}}}}"#,
        "x".repeat(500)
    );
    let html = format!("<html><body>bad key {SENTINEL}</body></html>");
    let stream_echo = format!(
        "data: {{\"error\":{{\"message\":\"key {SENTINEL} revoked\",\"type\":\"authentication_error\"}}}}\n\n"
    );

    let h = Harness::new().await;
    for body in [echo, long, html] {
        h.server.push(CHAT, Reply::json(401, body));
    }
    h.server.push(CHAT, sse_reply(&stream_echo, 9));
    let mut errors = Vec::new();
    for _ in 0..3 {
        errors.push(h.chat(&prompt()).await.result.unwrap_err());
    }
    let items = collect(h.stream(&prompt()).await.result.unwrap()).await;
    errors.push(items.into_iter().next().unwrap().unwrap_err());
    for err in &errors {
        assert_eq!(err.kind(), ErrorKind::Auth, "{err}");
        let shown = format!("{err} {err:?} {}", err.message());
        assert!(!shown.contains(SENTINEL), "{shown}");
        assert!(!shown.contains("sk-S"), "not even part of the key: {shown}");
    }
    assert!(errors[0].message().contains("[redacted]"), "{}", errors[0]);
}
