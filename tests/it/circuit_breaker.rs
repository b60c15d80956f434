//! The breaker over real HTTP: consecutive transient failures open it, requests skip it, a
//! single probe closes it.

use std::time::Duration;

use crate::support::*;
use llm_failover::{ChatRequest, ErrorKind};
use llm_failover_emulator::scripted::{Reply, ScriptedServer};

fn req() -> ChatRequest {
    ChatRequest::from_prompt("hello").max_tokens(16)
}

fn unavailable() -> Reply {
    Reply::json(
        503,
        error_body("server_error", None, "The server is overloaded"),
    )
}

#[tokio::test]
async fn three_consecutive_503s_open_the_breaker_then_one_probe_recovers() {
    let a = ScriptedServer::start().await;
    for _ in 0..3 {
        a.push(CHAT, unavailable());
    }
    let mut p = policy();
    p.failure_threshold = 3;
    p.max_attempts = 3;
    p.breaker_cooldown = Duration::from_secs(5);
    let h = client(&[("a", &a)], p);
    let err = h.client.chat(req()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AllProvidersFailed);
    assert_eq!(a.count(CHAT), 3);
    assert_eq!(h.client.stats().provider("a").unwrap().breaker_opens, 1);

    // Open: a request with a short deadline is refused without sending.
    let err = h
        .client
        .chat_with(
            req(),
            &llm_failover::RequestOptions::new().deadline(Duration::from_secs(1)),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AllProvidersUnavailable);
    assert_eq!(a.count(CHAT), 3);

    // After the cooldown, exactly one probe goes; its success closes the breaker.
    a.push(CHAT, ok("recovered"));
    let before = h.clock.sleeps().len();
    let r = h.client.chat(req()).await.unwrap();
    assert_eq!(r.text, "recovered");
    assert_eq!(a.count(CHAT), 4);
    let waited: Duration = h.clock.sleeps()[before..].iter().sum();
    assert!(
        waited <= Duration::from_secs(5),
        "waited {waited:?} for the reopen"
    );
    a.push(CHAT, ok("closed"));
    h.client.chat(req()).await.unwrap();
    assert_eq!(
        h.clock.sleeps().len(),
        before + 1,
        "closed again: no more waiting"
    );
}

#[tokio::test]
async fn an_open_breaker_sends_traffic_to_the_next_provider() {
    let (a, b) = (ScriptedServer::start().await, ScriptedServer::start().await);
    a.push(CHAT, unavailable());
    b.push(CHAT, unavailable());
    a.push(CHAT, unavailable());
    for _ in 0..4 {
        b.push(CHAT, ok("b"));
    }
    let mut p = policy();
    p.failure_threshold = 2;
    p.breaker_cooldown = Duration::from_secs(60);
    let h = client(&[("a", &a), ("b", &b)], p);
    // a fails, b fails, a fails (a's breaker opens at 2), b answers.
    assert_eq!(h.client.chat(req()).await.unwrap().provider.as_str(), "b");
    for _ in 0..3 {
        assert_eq!(h.client.chat(req()).await.unwrap().provider.as_str(), "b");
    }
    assert_eq!(a.count(CHAT), 2, "nothing goes to an open breaker");
}

#[tokio::test]
async fn a_failed_probe_reopens_for_longer() {
    let a = ScriptedServer::start().await;
    let mut p = policy();
    p.failure_threshold = 1;
    p.max_attempts = 1;
    p.breaker_cooldown = Duration::from_secs(5);
    p.breaker_cooldown_max = Duration::from_secs(60);
    let h = client(&[("a", &a)], p);
    a.push(CHAT, unavailable());
    h.client.chat(req()).await.unwrap_err();
    // The probe after 5 s fails: the next cooldown is 10 s.
    a.push(CHAT, unavailable());
    h.client.chat(req()).await.unwrap_err();
    let short = llm_failover::RequestOptions::new().deadline(Duration::from_millis(1));
    let err = h.client.chat_with(req(), &short).await.unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(10)));
}
