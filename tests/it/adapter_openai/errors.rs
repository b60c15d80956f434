//! Error classification by status and body; bodies that are not what they promise.

use super::*;

#[tokio::test]
async fn error_statuses_and_bodies_are_classified() {
    use ErrorKind::*;
    let f = |name: &str| -> String {
        std::fs::read_to_string(format!(
            "{}/tests/fixtures/openai/{name}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    };
    let inline = |code: &str| {
        format!(
            r#"{{"error":{{"message":"m","type":"invalid_request_error","param":null,"code":"{code}"}}}}"#
        )
    };
    let plain = |ty: &str| {
        format!(r#"{{"error":{{"message":"m","type":"{ty}","param":null,"code":null}}}}"#)
    };
    let cases: Vec<(u16, String, ErrorKind, Option<&str>)> = vec![
        (400, plain("invalid_request_error"), InvalidRequest, Some("invalid_request_error")),
        (400, f("error_context_length.json"), ContextLengthExceeded, Some("context_length_exceeded")),
        (400, f("error_content_policy.json"), ContentFiltered, Some("content_policy_violation")),
        (400, inline("content_filter"), ContentFiltered, Some("content_filter")),
        (401, f("error_invalid_api_key.json"), Auth, Some("invalid_api_key")),
        (402, r#"{"error":{"message":"Insufficient credits","code":402}}"#.into(), QuotaExhausted, Some("402")),
        (403, r#"{"error":{"message":"Country, region, or territory not supported","type":"request_forbidden","param":null,"code":"unsupported_country_region_territory"}}"#.into(), PermissionDenied, Some("unsupported_country_region_territory")),
        (404, f("error_model_not_found.json"), NotFound, Some("model_not_found")),
        (408, plain("timeout"), Timeout, Some("timeout")),
        (409, plain("conflict"), Conflict, Some("conflict")),
        (413, plain("invalid_request_error"), PayloadTooLarge, Some("invalid_request_error")),
        (422, plain("invalid_request_error"), InvalidRequest, Some("invalid_request_error")),
        (418, plain("teapot"), InvalidRequest, Some("teapot")),
        (429, f("error_rate_limit_tokens.json"), RateLimited, Some("rate_limit_exceeded")),
        (429, f("error_insufficient_quota.json"), QuotaExhausted, Some("insufficient_quota")),
        (429, f("error_insufficient_quota_code_null.json"), QuotaExhausted, Some("insufficient_quota")),
        (429, r#"{"error":{"message":"You have used all available credits for this month.","type":"requests","code":null}}"#.into(), QuotaExhausted, Some("requests")),
        (429, r#"{"error":{"message":"Your credit balance is too low to access the API."}}"#.into(), QuotaExhausted, None),
        (429, f("error_request_too_large.json"), RequestTooLarge, Some("rate_limit_exceeded")),
        (500, f("error_server.json"), Server, Some("server_error")),
        (502, f("error_server.json"), Server, Some("server_error")),
        (503, f("error_overloaded.json"), Overloaded, Some("server_error")),
        // A gateway timeout is a timeout (transient either way), as in every adapter.
        (504, f("error_server.json"), Timeout, Some("server_error")),
        (520, f("error_server.json"), Server, Some("server_error")),
    ];
    for (status, body, kind, code) in cases {
        let h = Harness::new().await;
        h.server.push(
            CHAT,
            Reply::json(status, body.clone()).header("x-request-id", "req_e"),
        );
        let ex = h.chat(&prompt()).await;
        let err = ex.result.unwrap_err();
        assert_eq!(err.kind(), kind, "{status} {body}");
        assert_eq!(err.code(), code, "{status} {body}");
        assert_eq!(err.status(), Some(status));
        assert_eq!(err.provider().map(ProviderId::as_str), Some("openai"));
        assert_eq!(err.model(), Some("gpt-4o-mini"));
        assert_eq!(err.request_id(), Some("req_e"));
        let message = serde_json::from_str::<serde_json::Value>(&body).unwrap()["error"]["message"]
            .as_str()
            .map(str::to_owned);
        if let Some(m) = message {
            assert_eq!(err.message(), m, "the provider's message is kept");
        }
    }
}

#[tokio::test]
async fn quota_and_oversized_requests_are_not_retried_like_throttling() {
    let h = Harness::new().await;
    h.server.push(
        CHAT,
        Reply::json(
            429,
            include_str!("../../fixtures/openai/error_insufficient_quota.json"),
        ),
    );
    h.server.push(
        CHAT,
        Reply::json(
            429,
            include_str!("../../fixtures/openai/error_request_too_large.json"),
        ),
    );
    let quota = h.chat(&prompt()).await.result.unwrap_err();
    assert!(!quota.is_retryable() && !quota.is_rate_limited());
    let too_large = h.chat(&prompt()).await.result.unwrap_err();
    assert!(too_large.is_terminal(), "{too_large}");
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
