//! 429 handling: stated delays honoured (asserted through the manual clock), gates never
//! moved earlier, quota exhaustion never retried, oversize requests never sent.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::*;
use async_trait::async_trait;
use llm_failover::clock::ManualClock;
use llm_failover::config::Limits;
use llm_failover::ratelimit::{
    Demand, LimitKey, LimitSnapshot, LimiterStore, MemoryStore, Reservation, Tightening,
};
use llm_failover::{ChatRequest, Client, Credential, ErrorKind, ProviderSettings, RequestOptions};
use llm_failover_emulator::scripted::{Reply, ScriptedServer};
use tokio::time::Instant;

fn req() -> ChatRequest {
    ChatRequest::from_prompt("hello").max_tokens(16)
}

const S: Duration = Duration::from_secs(1);

#[tokio::test]
async fn honours_retry_after_then_falls_back_to_jitter() {
    let a = ScriptedServer::start().await;
    a.push(CHAT, rate_limited().header("retry-after", "1"));
    a.push(CHAT, rate_limited());
    a.push(CHAT, ok("finally"));
    let h = client(&[("a", &a)], policy());
    let resp = h.client.chat(req()).await.unwrap();
    assert_eq!(resp.text, "finally");
    assert_eq!(resp.attempts, 3);
    assert_eq!(a.count(CHAT), 3);
    let sleeps = h.clock.sleeps();
    assert_eq!(sleeps.len(), 3, "{sleeps:?}");
    assert_eq!(sleeps[0], S, "Retry-After: 1 honoured");
    // No stated delay on the second 429: full jitter over [0, 2 s) (second failure), drawn
    // at 0.5 by the fixed RNG.
    assert_eq!(sleeps[1], S);
    assert!(sleeps[1] < 2 * S);
    // The provider states no limit: the pace learned from its 429s (cut to 0.8 a second at
    // the second) waits for its slot.
    assert_eq!(sleeps[2], Duration::from_millis(250));
    assert_eq!(h.client.stats().provider("a").unwrap().rate_limited, 2);
}

#[tokio::test]
async fn a_throttled_primary_is_skipped_until_its_reset_then_probed_once() {
    let (a, b) = (ScriptedServer::start().await, ScriptedServer::start().await);
    a.push(CHAT, rate_limited().header("retry-after", "30"));
    for i in 0..5 {
        b.push(CHAT, ok(&format!("b{i}")));
    }
    let h = client(&[("a", &a), ("b", &b)], policy());
    for _ in 0..5 {
        let r = h.client.chat(req()).await.unwrap();
        assert_eq!(r.provider.as_str(), "b");
    }
    assert_eq!(
        a.count(CHAT),
        1,
        "nothing sent to the primary while it cools down"
    );
    assert!(
        h.clock.sleeps().is_empty(),
        "no request slept on the throttled primary"
    );
    h.clock.advance(29 * S);
    b.push(CHAT, ok("still b"));
    assert_eq!(h.client.chat(req()).await.unwrap().provider.as_str(), "b");
    assert_eq!(a.count(CHAT), 1);
    h.clock.advance(S);
    a.push(CHAT, ok("a is back"));
    let r = h.client.chat(req()).await.unwrap();
    assert_eq!(
        r.provider.as_str(),
        "a",
        "exactly one probe after 30 s, and it closes the breaker"
    );
    assert_eq!(a.count(CHAT), 2);
    a.push(CHAT, ok("a again"));
    assert_eq!(h.client.chat(req()).await.unwrap().provider.as_str(), "a");
}

#[tokio::test]
async fn overlapping_429s_keep_the_later_reset() {
    let a = ScriptedServer::start().await;
    // Both requests are in flight before either answer arrives.
    a.push(
        CHAT,
        rate_limited()
            .header("retry-after", "20")
            .delay(Duration::from_millis(50)),
    );
    a.push(
        CHAT,
        rate_limited()
            .header("retry-after", "5")
            .delay(Duration::from_millis(100)),
    );
    // A configured limit (far from binding): the key is known, so both go at once; a key
    // whose limits are unknown would take its first requests one by one (first contact).
    let h = client_with(&[("a", &a)], policy(), Limits::none().with_rpm(1_000));
    let opts = RequestOptions::new().deadline(Duration::from_secs(10));
    let (r1, r2) = tokio::join!(
        h.client.chat_with(req(), &opts),
        h.client.chat_with(req(), &opts)
    );
    for r in [r1, r2] {
        let err = r.unwrap_err();
        // Each was throttled and nothing reopens in time: the error says rate limited.
        assert_eq!(err.kind(), ErrorKind::RateLimited, "{err}");
        assert!(err.is_retryable() && !err.is_terminal());
    }
    // A new request sees the gate at 20 s, not 5 s.
    let err = h.client.chat_with(req(), &opts).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AllProvidersUnavailable);
    assert_eq!(err.retry_after(), Some(20 * S));
    assert_eq!(a.count(CHAT), 2);
}

#[tokio::test]
async fn retry_after_as_http_date_is_honoured() {
    let a = ScriptedServer::start().await;
    // The manual clock's wall time starts at 2026-01-01T00:00:00Z.
    a.push(
        CHAT,
        rate_limited().header("retry-after", "Thu, 01 Jan 2026 00:00:30 GMT"),
    );
    a.push(CHAT, ok("ok"));
    let h = client(&[("a", &a)], policy());
    h.client.chat(req()).await.unwrap();
    assert_eq!(h.clock.sleeps(), [30 * S]);
}

#[tokio::test]
async fn past_or_garbage_retry_after_falls_back_to_jittered_backoff() {
    for value in ["Wed, 31 Dec 2025 23:59:00 GMT", "soon", "-5", "NaN", "inf"] {
        let a = ScriptedServer::start().await;
        a.push(CHAT, rate_limited().header("retry-after", value));
        a.push(CHAT, ok("ok"));
        let h = client(&[("a", &a)], policy());
        h.client.chat(req()).await.unwrap();
        // Full jitter over [0, 1 s) for the first failure, drawn at 0.5.
        assert_eq!(
            h.clock.sleeps(),
            [Duration::from_millis(500)],
            "Retry-After: {value}"
        );
    }
}

#[tokio::test]
async fn a_wait_beyond_max_retry_after_fails_over_and_never_stalls() {
    let (a, b) = (ScriptedServer::start().await, ScriptedServer::start().await);
    a.push(CHAT, rate_limited().header("retry-after", "86400"));
    b.push(CHAT, ok("b"));
    let h = client(&[("a", &a), ("b", &b)], policy());
    assert_eq!(h.client.chat(req()).await.unwrap().provider.as_str(), "b");
    // Alone, the primary is unavailable for a day: the caller hears so at once.
    let err = h
        .client
        .chat_with(req(), &RequestOptions::new().provider("a"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AllProvidersUnavailable);
    assert_eq!(err.retry_after(), Some(86_400 * S));
    assert!(h.clock.sleeps().is_empty());
    assert_eq!(a.count(CHAT), 1);
}

#[tokio::test]
async fn insufficient_quota_is_never_retried_and_fails_over() {
    let (a, b) = (ScriptedServer::start().await, ScriptedServer::start().await);
    a.push(
        CHAT,
        Reply::json(
            429,
            error_body(
                "insufficient_quota",
                None,
                "You exceeded your current quota, please check your plan and billing details.",
            ),
        ),
    );
    b.push(CHAT, ok("b"));
    b.push(CHAT, ok("b"));
    let mut p = policy();
    p.quota_cooldown = Duration::from_secs(900);
    let h = client(&[("a", &a), ("b", &b)], p);
    assert_eq!(h.client.chat(req()).await.unwrap().provider.as_str(), "b");
    h.clock.advance(899 * S);
    assert_eq!(h.client.chat(req()).await.unwrap().provider.as_str(), "b");
    assert_eq!(
        a.count(CHAT),
        1,
        "the quota cooldown keeps the provider out"
    );
    let stats = h.client.stats();
    assert_eq!(stats.provider("a").unwrap().quota_exhausted, 1);
    assert_eq!(stats.provider("a").unwrap().breaker_opens, 1);
    // Alone, it is unavailable until the cooldown ends.
    let err = h
        .client
        .chat_with(
            req(),
            &RequestOptions::new()
                .provider("a")
                .deadline(Duration::from_millis(10)),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::AllProvidersUnavailable);
    assert_eq!(err.retry_after(), Some(S));
}

#[tokio::test]
async fn a_request_larger_than_the_token_bucket_is_never_sent() {
    let a = ScriptedServer::start().await;
    let h = client_with(&[("a", &a)], policy(), Limits::none().with_tpm(1000));
    let err = h
        .client
        .chat(ChatRequest::from_prompt("word ".repeat(2000)).max_tokens(10))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RequestTooLarge, "{err}");
    assert!(err.message().contains("tokens per minute"), "{err}");
    assert_eq!(a.count(CHAT), 0);
}

#[tokio::test]
async fn configured_limits_pace_requests_through_the_clock() {
    let a = ScriptedServer::start().await;
    for _ in 0..4 {
        a.push(CHAT, ok("ok"));
    }
    let h = client_with(&[("a", &a)], policy(), Limits::none().with_rpm(2));
    for _ in 0..4 {
        h.client.chat(req()).await.unwrap();
    }
    // Two per minute, less the default one-second latency allowance held back from the
    // burst: the second request waits 1 s, then one every 30 s.
    assert_eq!(h.clock.sleeps(), [S, 30 * S, 30 * S]);
    assert_eq!(
        h.client.stats().provider("a").unwrap().admission_wait,
        61 * S
    );
}

#[tokio::test]
async fn all_providers_open_returns_the_earliest_retry_at_or_waits_within_the_deadline() {
    let (a, b) = (ScriptedServer::start().await, ScriptedServer::start().await);
    a.push(CHAT, rate_limited().header("retry-after", "40"));
    b.push(CHAT, rate_limited().header("retry-after", "25"));
    let h = client(&[("a", &a), ("b", &b)], policy());
    let short = RequestOptions::new().deadline(Duration::from_secs(10));
    let err = h.client.chat_with(req(), &short).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RateLimited, "{err}");
    assert_eq!(err.retry_after(), Some(25 * S), "the earliest reopen");
    assert_eq!(err.attempts().len(), 2);
    // With a longer deadline it waits for the earliest reopen and succeeds there.
    b.push(CHAT, ok("b after 25 s"));
    let r = h
        .client
        .chat_with(
            req(),
            &RequestOptions::new().deadline(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    assert_eq!(r.provider.as_str(), "b");
    assert_eq!(h.clock.sleeps(), [25 * S]);
}

#[tokio::test]
async fn limits_are_learned_from_the_first_response_headers() {
    let a = ScriptedServer::start().await;
    // https://platform.openai.com/docs/guides/rate-limits#rate-limits-in-headers
    a.push(
        CHAT,
        ok("first")
            .header("x-ratelimit-limit-requests", "2")
            .header("x-ratelimit-remaining-requests", "0")
            .header("x-ratelimit-reset-requests", "1m0s")
            .header("x-ratelimit-limit-tokens", "150000")
            .header("x-ratelimit-remaining-tokens", "149984")
            .header("x-ratelimit-reset-tokens", "6ms"),
    );
    a.push(CHAT, ok("second"));
    let h = client(&[("a", &a)], policy());
    h.client.chat(req()).await.unwrap();
    let snap = h.client.limits("a", "gpt-4o-mini").await.unwrap().unwrap();
    assert_eq!(snap.requests.map(|b| b.capacity), Some(2));
    assert_eq!(snap.tokens.map(|b| b.capacity), Some(150_000));
    // None left, two per minute: the next slot is 30 s away, and the client waits for it
    // instead of spending a request on a certain 429.
    h.client.chat(req()).await.unwrap();
    assert_eq!(h.clock.sleeps(), [30 * S]);
}

/// Until a provider states a token limit (and none is configured), requests are not tokenized
/// — no bucket would read the count; once one is stated, every request is priced in tokens.
#[tokio::test]
async fn a_token_limit_stated_by_the_provider_prices_later_requests_in_tokens() {
    let a = ScriptedServer::start().await;
    // https://platform.openai.com/docs/guides/rate-limits#rate-limits-in-headers
    a.push(
        CHAT,
        ok("first")
            .header("x-ratelimit-limit-tokens", "1000")
            .header("x-ratelimit-remaining-tokens", "1000")
            .header("x-ratelimit-reset-tokens", "0s"),
    );
    let h = client(&[("a", &a)], policy());
    let big = || ChatRequest::from_prompt("word ".repeat(2000)).max_tokens(10);
    h.client.chat(big()).await.unwrap();
    let err = h.client.chat(big()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RequestTooLarge, "{err}");
    assert_eq!(a.count(CHAT), 1, "the second request is never sent");
}

/// The router books a tokenizer-free upper bound (a token per byte) only where it fits in the
/// upper half of the token bucket; a request whose bound is larger than the whole bucket is
/// counted exactly and admitted on its real size, never refused for its bound.
#[tokio::test]
async fn a_request_is_judged_on_its_counted_size_not_on_the_cheap_bound() {
    let a = ScriptedServer::start().await;
    for _ in 0..2 {
        a.push(CHAT, ok("ok"));
    }
    let h = client_with(&[("a", &a)], policy(), Limits::none().with_tpm(1000));
    // 1,500 bytes: the bound (> 1,500 tokens) exceeds the bucket; the count (≈ 400) fits.
    let prompt = || ChatRequest::from_prompt("word ".repeat(300)).max_tokens(10);
    h.client.chat(prompt()).await.unwrap();
    // Now the key exists and the bucket is below its upper half for this size: counted again.
    h.client.chat(prompt()).await.unwrap();
    assert_eq!(a.count(CHAT), 2);
    assert!(h.clock.sleeps().is_empty(), "{:?}", h.clock.sleeps());
    let stats = h.client.stats().total();
    assert_eq!((stats.priced_by_count, stats.priced_by_bound), (2, 0));
}

/// Where the request fits in the upper half of every token bucket, no tokenizer runs: the
/// byte bound is booked, and the answer's usage gives the excess back.
#[tokio::test]
async fn a_request_with_room_to_spare_is_booked_at_its_bound_and_reconciled() {
    let a = ScriptedServer::start().await;
    for _ in 0..3 {
        a.push(CHAT, ok("ok"));
    }
    let mut p = policy();
    p.latency_allowance = Duration::ZERO;
    let h = client_with(&[("a", &a)], p, Limits::none().with_tpm(1_000_000));
    for _ in 0..3 {
        h.client.chat(req()).await.unwrap();
    }
    let stats = h.client.stats().total();
    // The first request creates the key (nothing known yet: counted); the others fit.
    assert_eq!((stats.priced_by_count, stats.priced_by_bound), (1, 2));
    // Reconciled to the reported usage whichever way it was priced: the manual clock has not
    // moved, so the bucket is down by exactly what the answers used — for each, the reported
    // 5 output tokens plus its input (10 reported) or its character floor, whichever is more.
    let tokens = h
        .client
        .limits("a", "gpt-4o-mini")
        .await
        .unwrap()
        .and_then(|l| l.tokens)
        .unwrap();
    let (level, cap) = (tokens.level, tokens.capacity);
    let per = 10u64.max(llm_failover::ratelimit::input_floor(&req())) + 5;
    assert_eq!(cap, 1_000_000);
    assert!(
        (level - (1_000_000 - 3 * per) as f64).abs() < 1e-6,
        "level {level}"
    );
}

#[tokio::test]
async fn without_a_latency_allowance_the_whole_burst_goes_at_once() {
    let a = ScriptedServer::start().await;
    for _ in 0..3 {
        a.push(CHAT, ok("ok"));
    }
    let mut p = policy();
    p.latency_allowance = Duration::ZERO;
    let h = client_with(&[("a", &a)], p, Limits::none().with_rpm(2));
    for _ in 0..3 {
        h.client.chat(req()).await.unwrap();
    }
    assert_eq!(h.clock.sleeps(), [30 * S]);
}

#[tokio::test]
async fn an_audio_budget_paces_transcriptions_by_their_length() {
    use llm_failover::{AudioInput, TranscriptionRequest};
    let a = ScriptedServer::start().await;
    for _ in 0..2 {
        a.push(
            "/v1/audio/transcriptions",
            Reply::json(200, r#"{"text":"hi"}"#),
        );
    }
    let mut p = policy();
    p.latency_allowance = Duration::ZERO;
    p.deadline = Duration::from_secs(2 * 3600);
    let clock = llm_failover::clock::ManualClock::new();
    let client = llm_failover::Client::builder()
        .clock(std::sync::Arc::new(clock.clone()))
        .policy(p)
        .provider(
            std::sync::Arc::new(
                llm_failover::provider::openai::OpenAi::new(
                    llm_failover::ProviderId::new("whisper"),
                    format!("{}/v1", a.url()).parse().unwrap(),
                )
                .with_transcription_model("whisper-1"),
            ),
            llm_failover::ProviderSettings::new()
                .limits(Limits::none().with_audio_seconds_per_hour(3600)),
        )
        .build()
        .unwrap();
    // 40 minutes of silence (8 kHz, 8-bit mono) against one hour of audio per hour: the second
    // file waits until 40 minutes have refilled on top of the 20 left.
    let seconds = 40 * 60;
    let mut wav = Vec::new();
    let data = vec![0u8; seconds * 8000];
    wav.extend_from_slice(b"RIFF");
    wav.extend_from_slice(&(36 + data.len() as u32).to_le_bytes());
    wav.extend_from_slice(b"WAVEfmt ");
    for v in [
        16u32.to_le_bytes(),
        [1, 0, 1, 0],
        8000u32.to_le_bytes(),
        8000u32.to_le_bytes(),
        [1, 0, 8, 0],
    ] {
        wav.extend_from_slice(&v);
    }
    wav.extend_from_slice(b"data");
    wav.extend_from_slice(&(data.len() as u32).to_le_bytes());
    wav.extend_from_slice(&data);
    let audio = AudioInput::from_bytes(wav, "long.wav").unwrap();
    assert_eq!(audio.duration(), Some(Duration::from_secs(seconds as u64)));
    for _ in 0..2 {
        client
            .transcribe(TranscriptionRequest::new(audio.clone()))
            .await
            .unwrap();
    }
    assert_eq!(clock.sleeps(), [20 * 60 * S]);
}

/// Books in memory, and records the key of every booking.
#[derive(Debug, Default)]
struct KeySpy {
    inner: MemoryStore,
    keys: Mutex<Vec<LimitKey>>,
}

#[async_trait]
impl LimiterStore for KeySpy {
    async fn reserve(
        &self,
        key: &LimitKey,
        limits: &Limits,
        cost: Demand,
        max_wait: Duration,
        now: Instant,
    ) -> llm_failover::Result<Reservation> {
        self.keys.lock().unwrap().push(key.clone());
        self.inner.reserve(key, limits, cost, max_wait, now).await
    }

    async fn refund(
        &self,
        key: &LimitKey,
        requests: u64,
        tokens: i64,
        now: Instant,
    ) -> llm_failover::Result<()> {
        self.inner.refund(key, requests, tokens, now).await
    }

    async fn raise(
        &self,
        key: &LimitKey,
        tightening: Tightening,
        now: Instant,
    ) -> llm_failover::Result<()> {
        self.inner.raise(key, tightening, now).await
    }

    async fn peek(
        &self,
        key: &LimitKey,
        cost: Demand,
        now: Instant,
    ) -> llm_failover::Result<LimitSnapshot> {
        self.inner.peek(key, cost, now).await
    }
}

#[tokio::test]
async fn each_booking_is_keyed_by_the_model_and_account_its_request_uses() {
    let a = ScriptedServer::start().await;
    for i in 0..3 {
        a.push(CHAT, ok(&format!("r{i}")));
    }
    let spy = Arc::new(KeySpy::default());
    let client = Client::builder()
        .clock(Arc::new(ManualClock::new()))
        .policy(policy())
        .limiter_store(spy.clone())
        .provider(
            openai("a", &a),
            ProviderSettings::new()
                .limits(Limits::none().with_rpm(1_000))
                .credential(Credential::new(SENTINEL)),
        )
        .build()
        .unwrap();
    client.chat(req()).await.unwrap();
    client.chat(req().model("gpt-4o")).await.unwrap();
    let tenant = RequestOptions::new()
        .credential("a", Credential::new("tenant-key"))
        .account("acme");
    client.chat_with(req(), &tenant).await.unwrap();
    let keys = spy.keys.lock().unwrap().clone();
    let seen: Vec<(&str, &str, Option<&str>)> = keys
        .iter()
        .map(|k| (k.provider.as_str(), k.model.as_str(), k.account.as_deref()))
        .collect();
    assert_eq!(
        seen,
        [
            ("a", "gpt-4o-mini", None),
            ("a", "gpt-4o", None),
            ("a", "gpt-4o-mini", Some("acme")),
        ]
    );
}
