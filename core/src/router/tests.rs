//! The router through a scripted transport: no sockets, so time is tokio's paused clock and
//! every wait is exact. Each test is one behaviour of the attempt loop.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::clock::{Clock, TokioClock};
use crate::config::{Policy, ProviderSettings};
use crate::error::ErrorKind;
use crate::http::{Script, ScriptedTransport};
use crate::id::{Credential, ProviderId};
use crate::observe::{Event, Observer};
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
    let (b, transport) = builder(hosts, policy, limits);
    (b.build().unwrap(), transport)
}

/// [`client`]'s builder.
fn builder(
    hosts: &[&str],
    policy: Policy,
    limits: Limits,
) -> (crate::ClientBuilder, ScriptedTransport) {
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
    (b, transport)
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
    // Throttled everywhere: the error says so, and that it will pass.
    assert_eq!(err.kind(), ErrorKind::RateLimited, "{err}");
    assert!(err.is_rate_limited() && err.is_retryable() && !err.is_terminal());
    assert_eq!(err.retry_after(), Some(30 * S));
    assert_eq!(err.retry_at(), Some(t0 + 30 * S));
    assert_eq!(err.attempts().len(), 1);
    assert_eq!(err.attempts()[0].status(), Some(429));
    assert_eq!(Instant::now(), t0);
    assert_eq!(t.count("a"), 1);
    // A later request finds the provider closed by the earlier one: nothing was tried, so it
    // cannot say why — every provider unavailable, and retryable.
    let err = c.chat_with(req(), &opts).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AllProvidersUnavailable, "{err}");
    assert!(err.is_retryable() && !err.is_terminal());
    assert!(err.attempts().is_empty());
    assert_eq!(t.count("a"), 1);
}

#[tokio::test(start_paused = true)]
async fn an_aggregate_error_takes_the_disposition_of_what_happened() {
    // A fault and a throttle: not "rate limited" (one provider failed), but retryable.
    let (c, t) = client(&["a", "b"], policy(), Limits::none());
    t.push("a", error(500, "server_error"))
        .push("b", error(429, "requests").header("retry-after", "60"))
        .push("a", error(500, "server_error"));
    let opts = RequestOptions::new().deadline(10 * S);
    let err = c.chat_with(req(), &opts).await.unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::AllProvidersFailed | ErrorKind::AllProvidersUnavailable
        ),
        "{err}"
    );
    assert!(err.is_retryable() && !err.is_terminal(), "{err}");
    assert!(err.attempts().len() >= 2, "{err:?}");
    // Every key rejected: resending anywhere is pointless, and the error says so.
    let (c, t) = client(&["a", "b"], policy(), Limits::none());
    t.push("a", error(401, "invalid_api_key"))
        .push("b", error(403, "permission_denied"));
    assert_eq!(c.chat(req()).await.unwrap_err().kind(), ErrorKind::Auth);
    let err = c
        .chat_with(req(), &RequestOptions::new().provider("b"))
        .await;
    assert_eq!(err.unwrap_err().kind(), ErrorKind::PermissionDenied);
    let err = c.chat(req()).await.unwrap_err();
    assert!(err.is_terminal(), "{err:?}");
    assert_eq!(err.sends(), Some(0), "{err:?}");
    assert_eq!((t.count("a"), t.count("b")), (1, 1), "nothing sent again");
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
    let snap = c.limits("a", "m").await.unwrap().unwrap();
    assert_eq!(
        snap.requests.map(|b| (b.level, b.capacity)),
        Some((1.0, 1)),
        "the slot came back"
    );
}

#[tokio::test(start_paused = true)]
async fn a_customer_accounts_throttling_does_not_close_the_configured_key() {
    let (c, t) = client(&["a", "b"], policy(), Limits::none());
    t.push("a", error(429, "requests").header("retry-after", "30"))
        .push("b", ok("account on b"))
        .push("a", ok("ours on a"));
    let customer = RequestOptions::new()
        .account("acme")
        .credential("a", Credential::new("sk-acme"));
    assert_eq!(
        c.chat_with(req(), &customer).await.unwrap().text,
        "account on b"
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

/// A 200 stating `limit`, `remaining` and a reset, in the OpenAI request headers.
fn ok_stating(text: &str, limit: u64, remaining: u64, reset: &str) -> Script {
    ok(text)
        .header("x-ratelimit-limit-requests", &limit.to_string())
        .header("x-ratelimit-remaining-requests", &remaining.to_string())
        .header("x-ratelimit-reset-requests", reset)
}

#[tokio::test(start_paused = true)]
async fn a_window_is_learned_from_the_reset_and_paces_at_its_rate() {
    let (c, t) = client(&["a"], policy(), Limits::none());
    // 60 a window, 30 left, full again in 3 s: a 6 s window, ten requests a second.
    t.push("a", ok_stating("1", 60, 30, "3s"));
    c.chat(req()).await.unwrap();
    let snap = c.limits("a", "m").await.unwrap().unwrap();
    assert_eq!(snap.requests.map(|b| b.window), Some(6 * S));
    assert_eq!(
        snap.requests.map(|b| (b.level, b.capacity)),
        Some((30.0, 60))
    );
}

#[tokio::test(start_paused = true)]
async fn a_drained_bucket_comes_back_as_soon_as_the_provider_says_so() {
    let (c, t) = client(&["a"], policy(), Limits::none());
    // None left, full in 30 s: one request every 3 s from here.
    t.push("a", ok_stating("1", 10, 0, "30s"))
        .push("a", ok_stating("2", 10, 9, "3s"))
        .push("a", ok("3"));
    let t0 = Instant::now();
    c.chat(req()).await.unwrap();
    c.chat(req()).await.unwrap();
    assert_eq!(Instant::now() - t0, 3 * S, "paced by the stated window");
    // The provider now says 9 are left: the next goes at once.
    c.chat(req()).await.unwrap();
    assert_eq!(Instant::now() - t0, 3 * S);
}

#[tokio::test(start_paused = true)]
async fn a_429_about_tokens_leaves_the_per_day_requests_alone() {
    let mut p = policy();
    p.max_retry_after = 60 * S;
    let (c, t) = client(&["a"], p, Limits::none());
    // Groq's shapes: requests per day (14,400, 14,370 left), tokens per minute (none left).
    let groq = |s: Script| {
        s.header("x-ratelimit-limit-requests", "14400")
            .header("x-ratelimit-remaining-requests", "14370")
            .header("x-ratelimit-reset-requests", "2m59.56s")
            .header("x-ratelimit-limit-tokens", "6000")
            .header("x-ratelimit-remaining-tokens", "0")
            .header("x-ratelimit-reset-tokens", "2s")
    };
    t.push("a", groq(error(429, "tokens").header("retry-after", "2")))
        .push("a", ok("after the 429"))
        .push("a", ok("no wait"));
    let t0 = Instant::now();
    c.chat(req()).await.unwrap();
    assert_eq!(Instant::now() - t0, 2 * S, "waited the stated 2 s only");
    c.chat(req()).await.unwrap();
    assert_eq!(
        Instant::now() - t0,
        2 * S,
        "the day's requests were not drained"
    );
}

#[tokio::test(start_paused = true)]
async fn a_429_stating_its_window_refills_in_a_second_waits_a_second() {
    let (c, t) = client(&["a"], policy(), Limits::none());
    t.push(
        "a",
        error(429, "requests")
            .header("x-ratelimit-limit-requests", "50")
            .header("x-ratelimit-remaining-requests", "0")
            .header("x-ratelimit-reset-requests", "1s"),
    )
    .push("a", ok("later"));
    let t0 = Instant::now();
    c.chat(req()).await.unwrap();
    assert_eq!(Instant::now() - t0, S);
}

#[tokio::test(start_paused = true)]
async fn a_503_with_retry_after_is_not_probed_before_it_ends() {
    let (c, t) = client(&["a"], policy(), Limits::none());
    t.push("a", error(503, "overloaded").header("retry-after", "20"))
        .push("a", ok("back"));
    let t0 = Instant::now();
    assert_eq!(c.chat(req()).await.unwrap().text, "back");
    assert_eq!(Instant::now() - t0, 20 * S);
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_years_ahead_closes_the_provider_for_the_bounded_maximum() {
    let (c, t) = client(&["a", "b"], policy(), Limits::none());
    t.push(
        "a",
        error(429, "requests").header("retry-after", "999999999"),
    )
    .push("b", ok("b1"))
    .push("b", ok("b2"));
    assert_eq!(c.chat(req()).await.unwrap().text, "b1");
    // A day later a is still closed (a month is the most a provider is believed).
    tokio::time::advance(86_400 * S).await;
    assert_eq!(c.chat(req()).await.unwrap().text, "b2");
    assert_eq!(t.count("a"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_stated_delay_ending_at_the_deadline_fails_at_once() {
    let (c, t) = client(&["a"], policy(), Limits::none());
    t.push("a", error(429, "requests").header("retry-after", "30"));
    let t0 = Instant::now();
    let err = c
        .chat_with(req(), &RequestOptions::new().deadline(30 * S))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RateLimited, "{err}");
    assert_eq!(err.retry_at(), Some(t0 + 30 * S));
    assert_eq!(Instant::now(), t0, "no sleep before failing");
}

#[tokio::test(start_paused = true)]
async fn a_rejected_key_is_never_sent_again_and_the_next_provider_serves() {
    let (c, t) = client(&["a", "b"], policy(), Limits::none());
    t.push("a", error(401, "invalid_api_key"))
        .push("b", ok("b"));
    assert_eq!(c.chat(req()).await.unwrap_err().kind(), ErrorKind::Auth);
    assert_eq!(c.chat(req()).await.unwrap().text, "b");
    // Pinned to the provider that rejected it: fails at once, nothing sent.
    let pinned = RequestOptions::new().provider("a");
    let err = c.chat_with(req(), &pinned).await.unwrap_err();
    assert_eq!((err.kind(), err.sends()), (ErrorKind::Auth, Some(0)));
    assert_eq!(t.count("a"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_hanging_provider_leaves_the_next_its_share_of_the_deadline() {
    // The policy's attempt timeout is a minute; the request's deadline 10 s. The first provider
    // never answers: it is given up after half of what is left, and the second answers.
    let (c, t) = client(&["a", "b"], policy(), Limits::none());
    t.push("a", Script::Hang).push("b", ok("b"));
    let t0 = Instant::now();
    let opts = RequestOptions::new().deadline(10 * S);
    assert_eq!(c.chat_with(req(), &opts).await.unwrap().text, "b");
    assert_eq!(t.timeouts("a"), [5 * S]);
    assert_eq!(
        t.timeouts("b"),
        [5 * S],
        "the last provider gets all that is left"
    );
    assert_eq!(Instant::now() - t0, 5 * S);
    // Three providers: a third each.
    let (c, t) = client(&["a", "b", "c"], policy(), Limits::none());
    t.push("a", Script::Hang)
        .push("b", Script::Hang)
        .push("c", ok("c"));
    let opts = RequestOptions::new().deadline(9 * S);
    assert_eq!(c.chat_with(req(), &opts).await.unwrap().text, "c");
    assert_eq!(
        (t.timeouts("a"), t.timeouts("b"), t.timeouts("c")),
        (vec![3 * S], vec![3 * S], vec![3 * S])
    );
}

#[tokio::test(start_paused = true)]
async fn a_provider_that_cannot_serve_in_time_leaves_no_share_to_keep() {
    // b is closed for a minute by an earlier 429: a has the whole deadline.
    let (c, t) = client(&["a", "b"], policy(), Limits::none());
    t.push("b", error(429, "requests").header("retry-after", "60"))
        .push("a", ok("a"));
    let pinned = RequestOptions::new().provider("b").deadline(10 * S);
    let err = c.chat_with(req(), &pinned).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RateLimited, "{err}");
    let opts = RequestOptions::new().deadline(10 * S);
    assert_eq!(c.chat_with(req(), &opts).await.unwrap().text, "a");
    assert_eq!(t.timeouts("a"), [10 * S]);
    // With the policy's timeout below the share, the policy's timeout holds.
    let (c, t) = client(&["a", "b"], policy(), Limits::none());
    t.push("a", ok("a"));
    assert_eq!(c.chat(req()).await.unwrap().text, "a");
    assert_eq!(t.timeouts("a"), [Policy::default().request_timeout]);
}

#[tokio::test(start_paused = true)]
async fn groqs_498_is_retried_after_a_backoff() {
    // console.groq.com/docs/flex-processing: "status 498 and error capacity_exceeded. Add
    // jittered backoff and retries".
    let (c, t) = client(&["a"], policy(), Limits::none());
    t.push("a", error(498, "capacity_exceeded"))
        .push("a", ok("served"));
    let t0 = Instant::now();
    assert_eq!(c.chat(req()).await.unwrap().text, "served");
    assert_eq!(t.count("a"), 2);
    assert!(Instant::now() > t0, "backed off before the retry");
}

#[tokio::test(start_paused = true)]
async fn a_daily_allowance_used_up_closes_its_provider_until_the_stated_reset() {
    // OpenRouter's free-models-per-day 429 states its limit only in the body
    // (`error.metadata.headers`), reset three hours from now, no delay anywhere else.
    let reset_ms = (TokioClock.wall() + 3 * 3600 * S)
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let body = serde_json::json!({"error": {
        "message": "Rate limit exceeded: free-models-per-day. ",
        "code": 429,
        "metadata": {"headers": {
            "X-RateLimit-Limit": "50",
            "X-RateLimit-Remaining": "0",
            "X-RateLimit-Reset": reset_ms.to_string(),
        }},
    }});
    let (c, t) = client(&["a", "b"], policy(), Limits::none());
    t.push("a", Script::json(429, body.to_string()))
        .push("b", ok("b1"))
        .push("b", ok("b2"))
        .push("a", ok("a back"));
    assert_eq!(c.chat(req()).await.unwrap().text, "b1");
    tokio::time::advance(3 * 3600 * S - 10 * S).await;
    assert_eq!(c.chat(req()).await.unwrap().text, "b2", "still closed");
    tokio::time::advance(20 * S).await;
    assert_eq!(c.chat(req()).await.unwrap().text, "a back");
    assert_eq!((t.count("a"), t.count("b")), (2, 2));
}

#[tokio::test(start_paused = true)]
async fn a_request_only_ever_throttled_does_not_fail_while_its_deadline_allows() {
    let mut p = policy();
    p.max_attempts = 1;
    let (c, t) = client(&["a"], p, Limits::none());
    for _ in 0..3 {
        t.push("a", error(429, "requests").header("retry-after", "1"));
    }
    t.push("a", ok("finally"));
    let t0 = Instant::now();
    let r = c.chat(req()).await.unwrap();
    assert_eq!((r.text.as_str(), r.attempts), ("finally", 4));
    // Each stated second honoured; the pace learned from the 429s (the provider states no
    // limit) adds a little.
    let took = Instant::now() - t0;
    assert!(took >= 3 * S && took < 5 * S, "{took:?}");
}

#[tokio::test(start_paused = true)]
async fn a_provider_that_states_nothing_is_paced_by_what_its_429s_teach() {
    let (c, t) = client(&["a"], policy(), Limits::none());
    // Bare 429s: no headers, no delay. The first starts a pace of one request a second.
    t.push("a", error(429, "requests"));
    for i in 0..4 {
        t.push("a", ok(&i.to_string()));
    }
    c.chat(req()).await.unwrap();
    let snapshot = c.limits("a", "m").await.unwrap().unwrap();
    assert_eq!(snapshot.learned_rate, Some(1.0));
    // The pace is learned, not a limit configured or stated: not the request bucket.
    assert!(snapshot.requests.is_none(), "{snapshot:?}");
    let t0 = Instant::now();
    for _ in 0..3 {
        c.chat(req()).await.unwrap();
    }
    assert_eq!(Instant::now() - t0, 3 * S, "one a second");
    assert_eq!(t.count("a"), 5, "one 429, then no more");
}

#[tokio::test(start_paused = true)]
async fn a_primary_back_sooner_than_the_secondary_s_slot_is_waited_for() {
    // b has one request a minute, already spent; a says "retry after 3 s".
    let transport = ScriptedTransport::new();
    let provider = |host: &str| {
        Arc::new(
            OpenAi::new(
                ProviderId::new(host),
                format!("http://{host}/v1").parse().unwrap(),
            )
            .with_chat_model("m"),
        )
    };
    let key = || ProviderSettings::new().credential(Credential::new("sk-test"));
    let c = Client::builder()
        .clock(Arc::new(TokioClock))
        .rng(Arc::new(FixedRng::new([0.5])))
        .policy(policy())
        .transport(Arc::new(transport.clone()))
        .provider(provider("a"), key())
        .provider(provider("b"), key().limits(Limits::none().with_rpm(1)))
        .build()
        .unwrap();
    transport
        .push("b", ok("b's one"))
        .push("a", error(429, "requests").header("retry-after", "3"))
        .push("a", ok("a again"));
    let only_b = RequestOptions::new().provider("b");
    assert_eq!(c.chat_with(req(), &only_b).await.unwrap().text, "b's one");

    let t0 = Instant::now();
    let r = c.chat(req()).await.unwrap();
    // Not booked on b, whose next slot is a minute away: the request waited for a's reset.
    assert_eq!((r.text.as_str(), r.provider.as_str()), ("a again", "a"));
    assert_eq!(transport.count("b"), 1, "nothing more was sent to b");
    let waited = Instant::now() - t0;
    assert!(waited >= 3 * S && waited < 4 * S, "{waited:?}");
}

#[tokio::test(start_paused = true)]
async fn a_request_waits_in_process_no_longer_than_its_max_wait() {
    // A 3 s Retry-After is waited for within a 10 s max_wait, and the answer comes.
    let (c, t) = client(&["a"], policy(), Limits::none());
    t.push("a", error(429, "requests").header("retry-after", "3"))
        .push("a", ok("later"));
    let opts = RequestOptions::new().deadline(3_600 * S).max_wait(10 * S);
    let t0 = Instant::now();
    assert_eq!(c.chat_with(req(), &opts).await.unwrap().text, "later");
    assert_eq!(Instant::now() - t0, 3 * S);
    // A 30 s one, past the max_wait but well inside the hour's deadline: the request ends at
    // once, saying when to come back — a queue snoozes it there instead of a worker waiting.
    let (c, t) = client(&["a"], policy(), Limits::none());
    t.push("a", error(429, "requests").header("retry-after", "30"));
    let t0 = Instant::now();
    let err = c.chat_with(req(), &opts).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RateLimited, "{err}");
    assert_eq!(err.retry_at(), Some(t0 + 30 * S));
    assert_eq!((Instant::now(), t.count("a")), (t0, 1));
    // Without max_wait, the hour's deadline is what bounds the wait: it waits and is answered.
    t.push("a", ok("patient"));
    let patient = RequestOptions::new().deadline(3_600 * S);
    assert_eq!(c.chat_with(req(), &patient).await.unwrap().text, "patient");
    assert_eq!(Instant::now() - t0, 30 * S);
}

#[tokio::test(start_paused = true)]
async fn a_deadline_passed_while_every_provider_hung_is_a_timeout_with_each_attempt() {
    let (c, t) = client(&["a", "b"], policy(), Limits::none());
    t.push("a", Script::Hang).push("b", Script::Hang);
    let opts = RequestOptions::new().deadline(10 * S);
    let err = c.chat_with(req(), &opts).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(err.is_timeout() && err.is_retryable(), "{err}");
    let tried: Vec<_> = err.attempts().iter().map(|e| e.kind()).collect();
    assert_eq!(tried, [ErrorKind::Timeout, ErrorKind::Timeout], "{err:?}");
    assert!(err.to_string().contains("deadline of 10.000s"), "{err}");
}

/// Writes down what it is told, one line per event.
#[derive(Debug, Default)]
struct Recorder(std::sync::Mutex<Vec<String>>);

impl Observer for Recorder {
    fn observe(&self, event: &Event<'_>) {
        let line = match event {
            Event::Sent(s) => format!("sent {} #{} {:?}", s.target.provider(), s.send, s.pricing),
            Event::AttemptEnded(a) => format!(
                "ended {} {:?} {:?} {:?} in {:?}, tokens {:?}, model {:?}, stated {:?}",
                a.target.provider(),
                a.outcome,
                a.error,
                a.status,
                a.latency,
                a.usage.map(|u| (u.input_tokens, u.output_tokens)),
                a.response_model,
                a.report.and_then(|r| r.requests).and_then(|w| w.remaining),
            ),
            Event::FailedOver(f) => format!("failover {} -> {}", f.from, f.to.provider()),
            Event::AdmissionWaited(w) => {
                format!(
                    "waited {} {:?} in line {}",
                    w.target.provider(),
                    w.wait,
                    w.in_line
                )
            }
            Event::BreakerOpened(b) => {
                format!("breaker {} open for {:?}", b.target.provider(), b.open_for)
            }
            Event::RequestEnded(r) => format!(
                "request {:?} by {:?}: {:?}, {} sends in {:?}",
                r.capability,
                r.provider.map(ProviderId::as_str),
                r.error,
                r.sends,
                r.latency
            ),
            other => format!("{other:?}"),
        };
        self.0.lock().unwrap().push(line);
    }
}

/// The event seam: a 429 (its breaker opens until the stated reset) and a failover, then an
/// answer, told in the order they happened,
/// and the client's `Stats` (the default observer) count the same.
#[tokio::test(start_paused = true)]
async fn an_observer_is_told_each_send_answer_failure_and_failover_in_order() {
    let recorder = Arc::new(Recorder::default());
    let (b, t) = builder(&["a", "b"], policy(), Limits::none());
    let c = b.observer(recorder.clone()).build().unwrap();
    t.push(
        "a",
        error(429, "requests")
            .header("retry-after", "30")
            .header("x-ratelimit-limit-requests", "100")
            .header("x-ratelimit-remaining-requests", "0"),
    )
    .push("b", ok("b1"));
    assert_eq!(c.chat(req()).await.unwrap().text, "b1");
    let z = Duration::ZERO;
    assert_eq!(
        *recorder.0.lock().unwrap(),
        [
            "sent a #1 Requests".to_owned(),
            format!(
                "ended a RateLimited Some(RateLimited) Some(429) in {z:?}, tokens None, \
                 model None, stated Some(0)"
            ),
            "breaker a open for 30s".to_owned(),
            "failover a -> b".to_owned(),
            "sent b #2 Requests".to_owned(),
            format!(
                "ended b Answered None None in {z:?}, tokens Some((10, 5)), model Some(\"m\"), \
                 stated None"
            ),
            format!("request Chat by Some(\"b\"): None, 2 sends in {z:?}"),
        ]
    );
    let stats = c.stats();
    let (a, b) = (stats.provider("a").unwrap(), stats.provider("b").unwrap());
    assert_eq!(
        (a.sent, a.rate_limited, a.breaker_opens, a.failovers, a.ok),
        (1, 1, 1, 1, 0),
        "{a:?}"
    );
    assert_eq!(
        (b.sent, b.ok, b.input_tokens, b.output_tokens, b.failovers),
        (1, 1, 10, 5, 0),
        "{b:?}"
    );
}

/// A wait for admission is told with its length, and the request's latency includes it.
#[tokio::test(start_paused = true)]
async fn an_observer_is_told_how_long_a_request_waited_for_admission() {
    let recorder = Arc::new(Recorder::default());
    let (b, t) = builder(&["a"], policy(), Limits::none().with_rpm(1));
    let c = b.observer(recorder.clone()).build().unwrap();
    t.push("a", ok("first")).push("a", ok("second"));
    c.chat(req()).await.unwrap();
    recorder.0.lock().unwrap().clear();
    c.chat(req()).await.unwrap();
    let told = recorder.0.lock().unwrap().clone();
    assert_eq!(
        told.first().map(String::as_str),
        Some("waited a 60s in line false")
    );
    assert_eq!(
        told.last().map(String::as_str),
        Some("request Chat by Some(\"a\"): None, 1 sends in 60s")
    );
    assert_eq!(c.stats().provider("a").unwrap().admission_wait, 60 * S);
}
