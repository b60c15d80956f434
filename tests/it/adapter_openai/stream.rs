//! Streamed chat: chunks across TCP writes, `[DONE]`, usage, in-stream errors, cut streams.

use super::*;

#[tokio::test]
async fn streams_chunks_split_across_writes_until_done() {
    let sse = include_str!("../../fixtures/openai/chat_stream.sse");
    // 1 byte per write cuts every line, every JSON value and the two-byte `ö`.
    for size in [1, 7, 64, sse.len()] {
        let h = Harness::new().await;
        h.server
            .push(CHAT, sse_reply(sse, size).header("x-request-id", "req_s"));
        let ex = h.stream(&prompt()).await;
        let chunks: Vec<ChatChunk> = collect(ex.result.unwrap())
            .await
            .into_iter()
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("split {size}: {e}"));
        let text: String = chunks.iter().map(|c| c.delta.as_str()).collect();
        assert_eq!(text, "Hello, wörld", "split {size}");
        let finish: Vec<_> = chunks
            .iter()
            .filter_map(|c| c.finish_reason.clone())
            .collect();
        assert_eq!(finish, [FinishReason::Stop]);
        let usage: Vec<_> = chunks.iter().filter_map(|c| c.usage).collect();
        assert_eq!(usage, [Usage::new(9, 3)]);
        assert_eq!(chunks[0].model.as_deref(), Some("gpt-4o-mini"));

        let got = h.only_request();
        let body = got.json();
        assert_eq!(body["stream"], true);
        assert_eq!(
            body["stream_options"],
            serde_json::json!({"include_usage": true})
        );
    }
}

#[tokio::test]
async fn nothing_after_done_is_read() {
    let h = Harness::new().await;
    let sse = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\ndata: {garbage\n\n";
    h.server.push(CHAT, sse_reply(sse, sse.len()));
    let items = collect(h.stream(&prompt()).await.result.unwrap()).await;
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].as_ref().unwrap().delta, "a");
}

#[tokio::test]
async fn a_stream_that_ends_before_done_is_an_error() {
    let h = Harness::new().await;
    // The body ends cleanly in the middle of an event: a decode error.
    let cut = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choi";
    h.server.push(CHAT, sse_reply(cut, 10));
    let items = collect(h.stream(&prompt()).await.result.unwrap()).await;
    let err = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Decode, "{err}");
    assert_eq!(err.provider().map(ProviderId::as_str), Some("openai"));
    assert_eq!(err.status(), Some(200));

    // The connection is reset mid-event: a connection error, retryable.
    h.server.push(
        CHAT,
        Reply::status(200)
            .header("content-type", "text/event-stream")
            .with_body(ReplyBody::Truncated(Bytes::from_static(
                b"data: {\"choices\":[{\"ind",
            ))),
    );
    // Depending on when the reset lands, the error surfaces when the stream opens or from it.
    let err = match h.stream(&prompt()).await.result {
        Ok(stream) => collect(stream).await.pop().unwrap().unwrap_err(),
        Err(e) => e,
    };
    assert_eq!(err.kind(), ErrorKind::Connect, "{err}");
    assert!(err.is_retryable(), "{err}");
    assert_eq!(err.provider().map(ProviderId::as_str), Some("openai"));
}

#[tokio::test]
async fn errors_inside_a_stream_are_classified() {
    let cases = [
        (
            r#"{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}"#,
            ErrorKind::Server,
            Some("server_error"),
        ),
        (
            r#"{"error":{"message":"Rate limit reached for requests","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#,
            ErrorKind::RateLimited,
            Some("rate_limit_exceeded"),
        ),
        (
            r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":null}}"#,
            ErrorKind::QuotaExhausted,
            Some("insufficient_quota"),
        ),
        // OpenRouter ends a failed upstream generation with finish_reason "error".
        (
            r#"{"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}]}"#,
            ErrorKind::Server,
            Some("error"),
        ),
    ];
    for (event, kind, code) in cases {
        let h = Harness::new().await;
        let sse = format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"par\"}}}}]}}\n\ndata: {event}\n\n"
        );
        h.server.push(CHAT, sse_reply(&sse, 5));
        let items = collect(h.stream(&prompt()).await.result.unwrap()).await;
        assert_eq!(items.len(), 2, "{event}");
        assert_eq!(items[0].as_ref().unwrap().delta, "par");
        let err = items[1].as_ref().unwrap_err();
        assert_eq!(err.kind(), kind, "{event}");
        assert_eq!(err.code(), code, "{event}");
        assert_eq!(err.provider().map(ProviderId::as_str), Some("openai"));
    }
}

#[tokio::test]
async fn malformed_stream_json_is_a_decode_error_naming_the_provider() {
    let h = Harness::new().await;
    h.server
        .push(CHAT, sse_reply("data: {\"choices\": [tru\n\n", 4));
    let items = collect(h.stream(&prompt()).await.result.unwrap()).await;
    let err = items[0].as_ref().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Decode);
    assert!(err.to_string().starts_with("openai: "), "{err}");
    assert!(err.message().contains("chat.completion.chunk"), "{err}");
}

#[tokio::test]
async fn a_streamed_request_that_fails_before_the_first_event_is_classified() {
    let h = Harness::new().await;
    h.server.push(
        CHAT,
        Reply::json(
            429,
            include_str!("../../fixtures/openai/error_rate_limit_tokens.json"),
        )
        .header("retry-after", "1"),
    );
    let ex = h.stream(&prompt()).await;
    let err = ex.result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RateLimited);
    assert_eq!(err.retry_after(), Some(Duration::from_secs(1)));
    assert!(ex.report.is_some());
}
