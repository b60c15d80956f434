//! Failover order, terminal errors, deadlines and attempt bookkeeping, over real loopback
//! HTTP with a manual clock.

use std::time::Duration;

use crate::support::*;
use llm_failover::{ChatRequest, ErrorKind, RequestOptions};
use llm_failover_emulator::scripted::{Reply, ScriptedServer};

fn req() -> ChatRequest {
    ChatRequest::from_prompt("hello").max_tokens(16)
}

#[tokio::test]
async fn falls_back_when_primary_returns_500() {
    let (a, b) = (ScriptedServer::start().await, ScriptedServer::start().await);
    a.push(
        CHAT,
        Reply::json(500, error_body("server_error", None, "boom")),
    );
    b.push(CHAT, ok("from b"));
    let h = client(&[("a", &a), ("b", &b)], policy());
    let resp = h.client.chat(req()).await.unwrap();
    assert_eq!(resp.text, "from b");
    assert_eq!(resp.provider.as_str(), "b");
    assert_eq!(resp.attempts, 2);
    assert_eq!((a.count(CHAT), b.count(CHAT)), (1, 1));
    let stats = h.client.stats();
    assert_eq!(stats.provider("a").unwrap().failovers, 1);
    assert_eq!(stats.provider("a").unwrap().server_errors, 1);
    assert_eq!(stats.provider("b").unwrap().ok, 1);
    assert!(
        h.clock.sleeps().is_empty(),
        "failover does not wait: {:?}",
        h.clock.sleeps()
    );
}

#[tokio::test]
async fn all_failing_returns_every_error_in_order() {
    let (a, b) = (ScriptedServer::start().await, ScriptedServer::start().await);
    let mut p = policy();
    p.max_attempts = 4;
    for _ in 0..2 {
        a.push(
            CHAT,
            Reply::json(502, error_body("server_error", None, "bad gateway")),
        );
        b.push(
            CHAT,
            Reply::json(503, error_body("server_error", None, "overloaded")),
        );
    }
    let h = client(&[("a", &a), ("b", &b)], p);
    let err = h.client.chat(req()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AllProvidersFailed, "{err}");
    let seen: Vec<_> = err
        .attempts()
        .iter()
        .map(|e| (e.provider().unwrap().to_string(), e.status().unwrap()))
        .collect();
    assert_eq!(
        seen,
        [
            ("a".into(), 502),
            ("b".into(), 503),
            ("a".into(), 502),
            ("b".into(), 503)
        ]
    );
    // Going back to a provider that already failed waits a jittered backoff (0.5 × ceiling).
    assert_eq!(h.clock.sleeps(), [Duration::from_millis(500)]);
}

/// Each terminal status is sent exactly once, with no failover, and keeps the provider's
/// message.
#[tokio::test]
async fn terminal_errors_are_sent_once_without_failover() {
    let cases = [
        (
            400,
            "invalid_request_error",
            None,
            ErrorKind::InvalidRequest,
        ),
        (
            401,
            "invalid_request_error",
            Some("invalid_api_key"),
            ErrorKind::Auth,
        ),
        (
            403,
            "invalid_request_error",
            None,
            ErrorKind::PermissionDenied,
        ),
        (
            404,
            "invalid_request_error",
            Some("model_not_found"),
            ErrorKind::NotFound,
        ),
        (
            413,
            "invalid_request_error",
            None,
            ErrorKind::PayloadTooLarge,
        ),
        (
            422,
            "invalid_request_error",
            None,
            ErrorKind::InvalidRequest,
        ),
        (
            400,
            "invalid_request_error",
            Some("context_length_exceeded"),
            ErrorKind::ContextLengthExceeded,
        ),
    ];
    for (status, kind, code, expected) in cases {
        let (a, b) = (ScriptedServer::start().await, ScriptedServer::start().await);
        a.push(
            CHAT,
            Reply::json(status, error_body(kind, code, "the provider's own words")),
        );
        let h = client(&[("a", &a), ("b", &b)], policy());
        let err = h.client.chat(req()).await.unwrap_err();
        assert_eq!(err.kind(), expected, "status {status}: {err}");
        assert_eq!(err.status(), Some(status));
        assert!(err.message().contains("the provider's own words"), "{err}");
        assert!(err.is_terminal());
        assert_eq!((a.count(CHAT), b.count(CHAT)), (1, 0), "status {status}");
        assert!(h.clock.sleeps().is_empty());
        assert_eq!(h.client.stats().provider("a").unwrap().terminal, 1);
    }
}

#[tokio::test]
async fn auth_errors_name_the_key_source_never_the_key() {
    let a = ScriptedServer::start().await;
    // The provider echoes the key, as OpenAI does with a masked one.
    a.push(
        CHAT,
        Reply::json(
            401,
            error_body(
                "invalid_request_error",
                Some("invalid_api_key"),
                &format!("Incorrect API key provided: {SENTINEL}"),
            ),
        ),
    );
    let h = client(&[("a", &a)], policy());
    let err = h.client.chat(req()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Auth);
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(SENTINEL), "{shown}");
    assert!(shown.contains("credential passed in code"), "{shown}");
}

#[tokio::test]
async fn a_pinned_provider_gets_no_failover() {
    let (a, b) = (ScriptedServer::start().await, ScriptedServer::start().await);
    b.push(
        CHAT,
        Reply::json(500, error_body("server_error", None, "x")),
    );
    b.push(CHAT, ok("second try"));
    let h = client(&[("a", &a), ("b", &b)], policy());
    let resp = h
        .client
        .chat_with(req(), &RequestOptions::new().provider("b"))
        .await
        .unwrap();
    assert_eq!(resp.provider.as_str(), "b");
    assert_eq!(resp.attempts, 2);
    assert_eq!(a.count(CHAT), 0);
}

#[tokio::test]
async fn a_per_request_credential_replaces_the_configured_key() {
    let a = ScriptedServer::start().await;
    a.push(CHAT, ok("hi"));
    let h = client(&[("a", &a)], policy());
    let opts = RequestOptions::new()
        .account("acme")
        .credential("a", llm_failover::Credential::new("sk-tenant-key"));
    h.client.chat_with(req(), &opts).await.unwrap();
    assert_eq!(
        a.requests()[0].header("authorization"),
        Some("Bearer sk-tenant-key")
    );
}

#[tokio::test]
async fn max_attempts_bounds_the_sends() {
    let a = ScriptedServer::start().await;
    for _ in 0..3 {
        a.push(
            CHAT,
            Reply::json(500, error_body("server_error", None, "x")),
        );
    }
    let mut p = policy();
    p.max_attempts = 3;
    p.failure_threshold = 0;
    let h = client(&[("a", &a)], p);
    let err = h.client.chat(req()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AllProvidersFailed);
    assert_eq!(err.attempts().len(), 3);
    assert_eq!(a.count(CHAT), 3);
    // Backoff ceilings 1 s then 2 s, drawn at 0.5.
    assert_eq!(
        h.clock.sleeps(),
        [Duration::from_millis(500), Duration::from_secs(1)]
    );
}

#[tokio::test]
async fn a_backoff_past_the_deadline_ends_the_request_without_another_send() {
    let a = ScriptedServer::start().await;
    a.push(
        CHAT,
        Reply::json(500, error_body("server_error", None, "x")),
    );
    let mut p = policy();
    p.failure_threshold = 0;
    let h = client(&[("a", &a)], p);
    // The first attempt fails; the jittered backoff (0.5 s) outlasts the 400 ms deadline
    // (not shorter: the attempt's HTTP timeout is a share of it, on the wall clock).
    let err = h
        .client
        .chat_with(
            req(),
            &RequestOptions::new().deadline(Duration::from_millis(400)),
        )
        .await
        .unwrap_err();
    assert_eq!(a.count(CHAT), 1, "{err}");
    assert!(matches!(
        err.kind(),
        ErrorKind::AllProvidersUnavailable | ErrorKind::AllProvidersFailed
    ));
    assert_eq!(err.attempts()[0].status(), Some(500));
}

#[tokio::test]
async fn a_terminal_error_after_a_failover_counts_every_send() {
    let (a, b) = (ScriptedServer::start().await, ScriptedServer::start().await);
    a.push(
        CHAT,
        Reply::json(500, error_body("server_error", None, "x")),
    );
    b.push(
        CHAT,
        Reply::json(400, error_body("invalid_request_error", None, "bad")),
    );
    let h = client(&[("a", &a), ("b", &b)], policy());
    let err = h.client.chat(req()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidRequest);
    assert_eq!(err.provider().map(|p| p.as_str()), Some("b"));
    assert_eq!(err.sends(), Some(2));
    // Nothing sent at all: zero.
    let err = h
        .client
        .chat(ChatRequest::new().max_tokens(1))
        .await
        .unwrap_err();
    assert_eq!(err.sends(), Some(0), "{err}");
}

/// Observability never changes behaviour: with the send trace on or off, the same first
/// answers end the request the same way, send the same requests, count the same and leave
/// the limiter knowing the same. (It once chose between two paths and two locks.)
#[tokio::test]
async fn observability_never_changes_what_is_sent() {
    /// A name and the first answer of provider `a`.
    type Case = (&'static str, fn() -> Reply);
    let first_answers: [Case; 8] = [
        ("500", || {
            Reply::json(500, error_body("server_error", None, "boom"))
        }),
        ("429", || rate_limited().header("retry-after", "30")),
        ("429 without a delay", rate_limited),
        ("429 stating its window", || {
            rate_limited()
                .header("x-ratelimit-limit-requests", "100")
                .header("x-ratelimit-remaining-requests", "0")
                .header("x-ratelimit-reset-requests", "20s")
        }),
        ("quota", || {
            Reply::json(
                429,
                error_body(
                    "insufficient_quota",
                    Some("insufficient_quota"),
                    "You exceeded your current quota",
                ),
            )
        }),
        ("400", || {
            Reply::json(400, error_body("invalid_request_error", None, "bad"))
        }),
        ("200", || ok("from a")),
        ("200 stating its windows", || {
            ok("from a")
                .header("x-ratelimit-limit-requests", "100")
                .header("x-ratelimit-remaining-requests", "40")
                .header("x-ratelimit-reset-requests", "36s")
                .header("x-ratelimit-limit-tokens", "10000")
                .header("x-ratelimit-remaining-tokens", "9000")
                .header("x-ratelimit-reset-tokens", "6s")
        }),
    ];
    for (name, first) in first_answers {
        let mut runs = Vec::new();
        for traced in [false, true] {
            let (a, b) = (ScriptedServer::start().await, ScriptedServer::start().await);
            a.push(CHAT, first());
            b.push(CHAT, ok("from b"));
            let h = client(&[("a", &a), ("b", &b)], policy());
            let _trace = traced.then(|| {
                tracing::subscriber::set_default(
                    tracing_subscriber::fmt()
                        .with_env_filter("llm_failover::send=debug")
                        .with_writer(std::io::sink)
                        .finish(),
                )
            });
            let answer = h
                .client
                .chat(req())
                .await
                .map(|r| (r.text, r.provider.as_str().to_owned(), r.attempts))
                .map_err(|e| (e.kind(), e.status(), e.attempts().len()));
            let stats = h.client.stats();
            runs.push((
                answer,
                (a.count(CHAT), b.count(CHAT)),
                stats.provider("a").cloned(),
                stats.provider("b").cloned(),
                // What the limiter learned, in durations (each harness has its own clock).
                h.client
                    .limits("a", "gpt-4o-mini")
                    .await
                    .map(|l| {
                        let now = llm_failover::clock::Clock::now(&h.clock);
                        let relative = |b: Option<llm_failover::BucketSnapshot>| {
                            b.map(|b| {
                                let reset = b.reset.map(|r| r.saturating_duration_since(now));
                                (b.level, b.capacity, b.window, reset)
                            })
                        };
                        l.map(|l| {
                            let (r, t) = (relative(l.requests), relative(l.tokens));
                            format!("{:?}", (r, t, l.wait, l.token_room))
                        })
                    })
                    .unwrap(),
                h.clock.sleeps(),
            ));
        }
        assert_eq!(runs[0], runs[1], "first answer {name}: untraced vs traced");
    }
}
