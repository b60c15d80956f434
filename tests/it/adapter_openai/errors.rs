//! Errors over HTTP: what an error keeps, bodies that are not what they promise, delays.
//! What each status and body means (the classification) is the conformance table's
//! (`conformance.rs`), every kind alike.

use super::*;

/// Over HTTP, an error keeps the provider's message, its code and status, and names the
/// provider, the model and the request's id.
#[tokio::test]
async fn an_error_keeps_the_message_code_status_provider_model_and_request_id() {
    let h = Harness::new().await;
    let body = include_str!("../../fixtures/openai/error_model_not_found.json");
    h.server
        .push(CHAT, Reply::json(404, body).header("x-request-id", "req_e"));
    let err = h.chat(&prompt()).await.result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(err.code(), Some("model_not_found"));
    assert_eq!(err.status(), Some(404));
    assert_eq!(err.provider().map(ProviderId::as_str), Some("openai"));
    assert_eq!(err.model(), Some("gpt-4o-mini"));
    assert_eq!(err.request_id(), Some("req_e"));
    assert_eq!(
        err.message(),
        "The model `gpt-9` does not exist or you do not have access to it.",
        "the provider's message is kept"
    );
}

#[tokio::test]
async fn non_json_error_bodies_are_classified_by_status() {
    let cases: Vec<(u16, Vec<u8>, ErrorKind, &str)> = vec![
        (
            502,
            b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>cloudflare</body></html>".to_vec(),
            ErrorKind::Server,
            "502 Bad Gateway",
        ),
        (503, Vec::new(), ErrorKind::Overloaded, "empty response body"),
        (429, b"Too Many Requests".to_vec(), ErrorKind::RateLimited, "Too Many Requests"),
        (500, b"\xff\xfe\x00oops".to_vec(), ErrorKind::Server, "not valid UTF-8"),
        (401, b"{\"detail\": \"Unauthorized\"}".to_vec(), ErrorKind::Auth, "Unauthorized"),
    ];
    for (status, body, kind, needle) in cases {
        let h = Harness::new().await;
        h.server.push(
            CHAT,
            Reply::status(status)
                .header("content-type", "text/html")
                .body(body),
        );
        let err = h.chat(&prompt()).await.result.unwrap_err();
        assert_eq!(err.kind(), kind, "{status}");
        assert_eq!(err.status(), Some(status));
        assert_eq!(err.code(), None);
        assert!(err.message().contains(needle), "{status}: {err}");
    }
}

#[tokio::test]
async fn bad_success_bodies_are_decode_errors() {
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "malformed JSON",
            b"{\"choices\": [".to_vec(),
            "malformed chat.completion",
        ),
        (
            "missing choices",
            b"{\"id\":\"x\",\"object\":\"chat.completion\"}".to_vec(),
            "no `choices`",
        ),
        (
            "empty choices",
            b"{\"choices\":[]}".to_vec(),
            "empty `choices`",
        ),
        (
            "choice without message",
            b"{\"choices\":[{\"index\":0}]}".to_vec(),
            "no `message`",
        ),
        (
            "HTML page",
            b"<!DOCTYPE html><html><body>Welcome to nginx!</body></html>".to_vec(),
            "Welcome to nginx!",
        ),
        ("empty 200", Vec::new(), "an empty body"),
        (
            "invalid UTF-8",
            b"\xff\xfe\xfd".to_vec(),
            "expected a chat.completion",
        ),
        (
            "content is a number",
            b"{\"choices\":[{\"message\":{\"content\":7}}]}".to_vec(),
            "content",
        ),
    ];
    for (what, body, needle) in cases {
        let h = Harness::new().await;
        h.server.push(
            CHAT,
            Reply::status(200)
                .header("content-type", "application/json")
                .body(body),
        );
        let err = h.chat(&prompt()).await.result.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Decode, "{what}: {err}");
        assert_eq!(err.status(), Some(200), "{what}");
        assert_eq!(
            err.provider().map(ProviderId::as_str),
            Some("openai"),
            "{what}"
        );
        assert!(err.message().contains(needle), "{what}: {err}");
        assert!(err.is_retryable(), "{what}");
    }
}

#[tokio::test]
async fn an_error_object_in_a_200_is_classified() {
    let h = Harness::new().await;
    h.server.push(
        CHAT,
        Reply::json(
            200,
            include_str!("../../fixtures/openai/error_overloaded.json"),
        ),
    );
    let err = h.chat(&prompt()).await.result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Server);
    assert_eq!(
        err.message(),
        "The engine is currently overloaded, please try again later."
    );
}

#[tokio::test]
async fn the_header_delay_wins_over_the_message_delay() {
    let h = Harness::new().await;
    let body = r#"{"error":{"message":"Rate limit reached for gpt-4o on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 20s.","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#;
    h.server
        .push(CHAT, Reply::json(429, body).header("retry-after", "2"));
    let err = h.chat(&prompt()).await.result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RateLimited);
    assert_eq!(err.retry_after(), Some(Duration::from_secs(2)));
}

#[tokio::test]
async fn the_message_delay_is_used_when_headers_state_none() {
    let h = Harness::new().await;
    h.server.push(
        CHAT,
        Reply::json(
            429,
            include_str!("../../fixtures/openai/error_rate_limit_tokens.json"),
        ),
    );
    let err = h.chat(&prompt()).await.result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RateLimited);
    // "Please try again in 644ms." The message parser is `ratelimit::delay_in_message`; the
    // adapter must hand its answer on unchanged.
    assert_eq!(err.retry_after(), delay_in_message(err.message()));
    if delay_in_message("Please try again in 1s.").is_some() {
        assert_eq!(err.retry_after(), Some(Duration::from_millis(644)));
    }
}
