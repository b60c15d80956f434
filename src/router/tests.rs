//! The router through a scripted transport: no sockets, so time is tokio's paused clock and
//! every wait is exact. Each test is one behaviour of the attempt loop.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::clock::TokioClock;
use crate::config::{Policy, ProviderSettings};
use crate::error::ErrorKind;
use crate::http::{Script, ScriptedTransport};
use crate::id::{Credential, ProviderId};
use crate::provider::openai::OpenAi;
use crate::ratelimit::Limits;
use crate::rng::FixedRng;
use crate::{ChatRequest, Client, RequestOptions};

const S: Duration = Duration::from_secs(1);

fn ok(text: &str) -> Script {
    Script::json(
        200,
        serde_json::json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        })
        .to_string(),
    )
}

fn error(status: u16, kind: &str) -> Script {
    Script::json(
        status,
        serde_json::json!({"error": {"message": kind, "type": kind, "code": null}}).to_string(),
    )
}

fn policy() -> Policy {
    Policy {
        latency_allowance: Duration::ZERO,
        ..Policy::default()
    }
}

/// A client over OpenAI-format providers named by `hosts` (each answering at
/// `http://{host}/v1`), in that failover order, on tokio's clock.
fn client(hosts: &[&str], policy: Policy, limits: Limits) -> (Client, ScriptedTransport) {
    let transport = ScriptedTransport::new();
    let mut b = Client::builder()
        .clock(Arc::new(TokioClock))
        .rng(Arc::new(FixedRng::new([0.5])))
        .policy(policy)
        .transport(Arc::new(transport.clone()));
    for host in hosts {
        let adapter = OpenAi::new(
            ProviderId::new(host),
            format!("http://{host}/v1").parse().unwrap(),
        )
        .with_chat_model("m");
        b = b.provider(
            Arc::new(adapter),
            ProviderSettings::new()
                .limits(limits)
                .credential(Credential::new("sk-test")),
        );
    }
    (b.build().unwrap(), transport)
}

fn req() -> ChatRequest {
    ChatRequest::from_prompt("hi").max_tokens(8)
}

#[tokio::test(start_paused = true)]
async fn a_500_fails_over_at_once_to_the_next_provider() {
    let (c, t) = client(&["a", "b"], policy(), Limits::none());
    t.push("a", error(500, "server_error"))
        .push("b", ok("from b"));
    let t0 = Instant::now();
    let r = c.chat(req()).await.unwrap();
    assert_eq!((r.provider.as_str(), r.attempts), ("b", 2));
    assert_eq!(t.hosts(), ["a", "b"]);
    assert_eq!(Instant::now(), t0, "no wait before failing over");
    let stats = c.stats();
    assert_eq!(stats.provider("a").unwrap().failovers, 1);
    assert_eq!(stats.provider("a").unwrap().server_errors, 1);
}

#[tokio::test(start_paused = true)]
async fn a_429_closes_its_provider_until_the_stated_reset_then_one_probe_goes() {
    let (c, t) = client(&["a", "b"], policy(), Limits::none());
    t.push("a", error(429, "requests").header("retry-after", "30"))
        .push("b", ok("b1"))
        .push("b", ok("b2"))
        .push("a", ok("a again"));
    assert_eq!(c.chat(req()).await.unwrap().text, "b1");
    // Closed: the next request goes straight to b.
    assert_eq!(c.chat(req()).await.unwrap().text, "b2");
    assert_eq!(t.count("a"), 1);
    tokio::time::advance(30 * S).await;
    assert_eq!(c.chat(req()).await.unwrap().text, "a again");
    assert_eq!(t.hosts(), ["a", "b", "b", "a"]);
}

#[tokio::test(start_paused = true)]
async fn a_terminal_error_is_sent_once_and_never_failed_over() {
    let (c, t) = client(&["a", "b"], policy(), Limits::none());
    t.push("a", error(400, "invalid_request_error"));
    let err = c.chat(req()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidRequest);
    assert_eq!(err.sends(), Some(1));
    assert_eq!(t.hosts(), ["a"]);
}

#[tokio::test(start_paused = true)]
async fn when_every_provider_is_throttled_the_request_waits_for_the_earliest_reopen() {
    let (c, t) = client(&["a"], policy(), Limits::none());
    t.push("a", error(429, "requests").header("retry-after", "2"))
        .push("a", ok("later"));
    let t0 = Instant::now();
    assert_eq!(c.chat(req()).await.unwrap().text, "later");
    assert_eq!(Instant::now() - t0, 2 * S);
}

#[tokio::test(start_paused = true)]
async fn a_reopen_past_the_deadline_ends_the_request_at_once_without_sleeping() {
    let (c, t) = client(&["a"], policy(), Limits::none());
    t.push("a", error(429, "requests").header("retry-after", "30"));
    let opts = RequestOptions::new().deadline(5 * S);
    let t0 = Instant::now();
    let err = c.chat_with(req(), &opts).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AllProvidersUnavailable);
    assert_eq!(err.retry_after(), Some(30 * S));
    assert_eq!(Instant::now(), t0);
    assert_eq!(t.count("a"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_configured_rate_paces_requests_through_the_clock() {
    let (c, t) = client(&["a"], policy(), Limits::none().with_rpm(1));
    t.push("a", ok("1")).push("a", ok("2"));
    let t0 = Instant::now();
    c.chat(req()).await.unwrap();
    assert_eq!(Instant::now(), t0);
    c.chat(req()).await.unwrap();
    assert_eq!(
        Instant::now() - t0,
        60 * S,
        "the second waited for its slot"
    );
    assert_eq!(c.stats().provider("a").unwrap().admission_wait, 60 * S);
}

#[tokio::test(start_paused = true)]
async fn a_request_that_cannot_be_built_sends_nothing_and_gives_its_slot_back() {
    let (c, t) = client(&["a"], policy(), Limits::none().with_rpm(1));
    let err = c.chat(req().temperature(f32::INFINITY)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidRequest, "{err:?}");
    assert_eq!(err.sends(), Some(0));
    assert_eq!(t.count("a"), 0);
    tokio::task::yield_now().await;
    let snap = c.limits("a", "m").await.unwrap();
    assert_eq!(snap.requests, Some((1.0, 1)), "the slot came back");
}

#[tokio::test(start_paused = true)]
async fn a_tenants_throttling_does_not_close_the_configured_key() {
    let (c, t) = client(&["a", "b"], policy(), Limits::none());
    t.push("a", error(429, "requests").header("retry-after", "30"))
        .push("b", ok("tenant on b"))
        .push("a", ok("ours on a"));
    let tenant = RequestOptions::new()
        .tenant("acme")
        .credential("a", Credential::new("sk-acme"));
    assert_eq!(
        c.chat_with(req(), &tenant).await.unwrap().text,
        "tenant on b"
    );
    assert_eq!(c.chat(req()).await.unwrap().text, "ours on a");
}

#[tokio::test(start_paused = true)]
async fn transient_failures_open_the_breaker_at_the_threshold_and_one_probe_closes_it() {
    let mut p = policy();
    p.failure_threshold = 2;
    p.max_attempts = 2;
    p.breaker_cooldown = 5 * S;
    let (c, t) = client(&["a"], p, Limits::none());
    t.push("a", error(503, "overloaded"))
        .push("a", error(503, "overloaded"));
    let err = c.chat(req()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AllProvidersFailed);
    assert_eq!(c.stats().provider("a").unwrap().breaker_opens, 1);
    t.push("a", ok("recovered"));
    let t0 = Instant::now();
    assert_eq!(c.chat(req()).await.unwrap().text, "recovered");
    assert!(Instant::now() - t0 <= 5 * S, "waited only for the cooldown");
    assert_eq!(t.count("a"), 3);
}

#[tokio::test(start_paused = true)]
async fn a_stream_fails_over_until_its_first_content() {
    use futures_util::StreamExt;
    let (c, t) = client(&["a", "b"], policy(), Limits::none());
    let sse = "data: {\"id\":\"1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\
               \"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\n\
               data: [DONE]\n\n";
    let stream_ok = Script::json(200, sse).header("content-type", "text/event-stream");
    t.push("a", error(500, "server_error")).push("b", stream_ok);
    let mut s = c.chat_stream(req()).await.unwrap();
    assert_eq!((s.provider().as_str(), s.attempts()), ("b", 2));
    let first = s.next().await.unwrap().unwrap();
    assert_eq!(first.delta, "hi");
}
