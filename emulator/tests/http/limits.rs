//! Limits enforced like the providers': buckets, headers, 429 bodies, refills.

use std::time::Duration;

use llm_failover_emulator::{ChargeMode, Emulator, HeaderStyle, Limits, ProviderConfig};
use serde_json::json;

use crate::support::*;

fn openai_with(limits: Limits) -> ProviderConfig {
    ProviderConfig::openai("openai").with_limits(limits)
}

// OpenAI rate limits (platform.openai.com/docs/guides/rate-limits): headers
// x-ratelimit-{limit,remaining,reset}-{requests,tokens}; 429 rate_limit_exceeded with
// "Please try again in …".
#[tokio::test]
async fn a_burst_past_rpm_gets_openai_429_with_headers_and_retry_after() {
    let emu = Emulator::builder()
        .provider(openai_with(Limits::per_minute(3, 100_000)))
        .start()
        .await
        .unwrap();
    for i in 0..3u64 {
        let (status, headers, _) = parts(
            openai_chat(&emu, "openai", &chat_body("hi"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(h(&headers, "x-ratelimit-limit-requests"), Some("3"));
        assert_eq!(
            h(&headers, "x-ratelimit-remaining-requests"),
            Some((2 - i).to_string().as_str())
        );
        assert_eq!(h(&headers, "x-ratelimit-limit-tokens"), Some("100000"));
    }
    let (status, headers, body) = parts(
        openai_chat(&emu, "openai", &chat_body("hi"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 429);
    assert_eq!(h(&headers, "x-ratelimit-remaining-requests"), Some("0"));
    // 3 per minute refill one request every 20 s; the bucket is full again in 60 s.
    assert_eq!(h(&headers, "retry-after"), Some("20"));
    let reset = h(&headers, "x-ratelimit-reset-requests").unwrap();
    assert!(reset.starts_with("59.") || reset == "1m0s", "{reset}");
    assert_eq!(body["error"]["code"], "rate_limit_exceeded");
    assert_eq!(body["error"]["type"], "requests");
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("on requests per min (RPM): Limit 3, Used 3, Requested 1."),
        "{msg}"
    );
    let wait: f64 = msg
        .split("Please try again in ")
        .nth(1)
        .and_then(|rest| rest.split("s.").next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!((19.0..=20.0).contains(&wait), "{msg}");
    let c = emu.counters("openai");
    assert_eq!((c.requests, c.ok, c.rate_limited), (4, 3, 1));
}

#[tokio::test]
async fn the_bucket_refills_within_a_scaled_minute() {
    use llm_failover::clock::{Clock, ManualClock};
    let clock = ManualClock::new();
    let time = clock.clone();
    let emu = Emulator::builder()
        .provider(openai_with(Limits::none().with_rpm(2)))
        .minute_ms(100) // one request back every 50 ms
        .time_source(llm_failover_emulator::TimeSource::new(move || {
            (time.now(), time.wall())
        }))
        .start()
        .await
        .unwrap();
    let send = || async {
        openai_chat(&emu, "openai", &chat_body("hi"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!((send().await, send().await, send().await), (200, 200, 429));
    clock.advance(Duration::from_millis(40));
    assert_eq!(
        send().await,
        429,
        "not yet: one request comes back every 50 ms"
    );
    clock.advance(Duration::from_millis(20));
    assert_eq!(send().await, 200);
}

// Tokens charged the way OpenAI documents: ceil(characters / 4) + max_tokens.
#[tokio::test]
async fn tokens_are_charged_as_characters_over_four_plus_max_tokens() {
    let emu = Emulator::builder()
        .provider(openai_with(Limits::none().with_tpm(100)).with_charge(ChargeMode::Estimate))
        .provider(ProviderConfig::openai("actual").with_limits(Limits::none().with_tpm(100)))
        .start()
        .await
        .unwrap();
    let mut req = chat_body(&"a".repeat(40)); // 10 tokens
    req["max_tokens"] = json!(50);
    let (_, headers, _) = parts(openai_chat(&emu, "openai", &req).send().await.unwrap()).await;
    assert_eq!(h(&headers, "x-ratelimit-remaining-tokens"), Some("40"));
    let (status, headers, body) =
        parts(openai_chat(&emu, "openai", &req).send().await.unwrap()).await;
    assert_eq!(status, 429);
    assert_eq!(body["error"]["type"], "tokens");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tokens per min (TPM): Limit 100, Used 60, Requested 60.")
    );
    // 20 missing at 100 per minute: 12 s.
    assert_eq!(h(&headers, "retry-after"), Some("12"));
    assert_eq!(emu.counters("openai").tokens, 60);

    // Charging actual output: the unused part of max_tokens comes back.
    let (_, headers, body) = parts(openai_chat(&emu, "actual", &req).send().await.unwrap()).await;
    let used = body["usage"]["total_tokens"].as_u64().unwrap();
    let remaining: u64 = h(&headers, "x-ratelimit-remaining-tokens")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(remaining, 100 - used);
    assert_eq!(emu.counters("actual").tokens, used);
}

#[tokio::test]
async fn a_request_larger_than_tpm_gets_a_429_that_can_never_pass() {
    let emu = Emulator::builder()
        .provider(openai_with(Limits::none().with_tpm(100)))
        .start()
        .await
        .unwrap();
    let mut req = chat_body("hi");
    req["max_tokens"] = json!(500);
    let (status, headers, body) =
        parts(openai_chat(&emu, "openai", &req).send().await.unwrap()).await;
    assert_eq!(status, 429);
    assert_eq!(h(&headers, "retry-after"), None);
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("Request too large for gpt-4o-mini"),
        "{msg}"
    );
    assert!(msg.contains("Limit 100, Requested 501."), "{msg}");
}

#[tokio::test]
async fn limits_are_kept_per_model_where_the_provider_scopes_so() {
    let emu = Emulator::builder()
        .provider(
            openai_with(Limits::none().with_rpm(1))
                .with_model_limits("big", Limits::none().with_rpm(2)),
        )
        .provider(ProviderConfig::deepgram("deepgram").with_limits(Limits::none().with_rpm(1)))
        .start()
        .await
        .unwrap();
    let chat = |model: &str| {
        let mut b = chat_body("hi");
        b["model"] = json!(model);
        openai_chat(&emu, "openai", &b)
    };
    let status = |rb: reqwest::RequestBuilder| async { rb.send().await.unwrap().status().as_u16() };
    assert_eq!(status(chat("a")).await, 200);
    assert_eq!(status(chat("a")).await, 429);
    assert_eq!(
        status(chat("b")).await,
        200,
        "another model has its own bucket"
    );
    assert_eq!(status(chat("big")).await, 200);
    assert_eq!(status(chat("big")).await, 200, "model_limits give it two");
    // Deepgram limits the whole project, whatever the model.
    assert_eq!(
        status(deepgram_listen(&emu, "deepgram", "model=nova-2", wav(0.5))).await,
        200
    );
    let (code, headers, body) = parts(
        deepgram_listen(&emu, "deepgram", "model=nova-3", wav(0.5))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(code, 429);
    assert_eq!(body["err_code"], "TOO_MANY_REQUESTS");
    assert_eq!(h(&headers, "retry-after"), None, "Deepgram states no delay");
}

// Anthropic rate limits (docs.anthropic.com/en/api/rate-limits): anthropic-ratelimit-*
// with RFC 3339 resets, retry-after on 429, rate_limit_error.
#[tokio::test]
async fn anthropic_states_rfc3339_resets_and_a_rate_limit_error() {
    let emu = Emulator::builder()
        .provider(ProviderConfig::anthropic("anthropic").with_limits(Limits::per_minute(1, 10_000)))
        .start()
        .await
        .unwrap();
    let (_, headers, _) = parts(
        anthropic_messages(&emu, "anthropic", &messages_body("hi", 10))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(h(&headers, "anthropic-ratelimit-requests-limit"), Some("1"));
    assert_eq!(
        h(&headers, "anthropic-ratelimit-requests-remaining"),
        Some("0")
    );
    let reset = h(&headers, "anthropic-ratelimit-requests-reset").unwrap();
    assert!(
        reset.len() == 20 && reset.ends_with('Z') && reset.as_bytes()[10] == b'T',
        "{reset}"
    );
    assert!(h(&headers, "anthropic-ratelimit-tokens-remaining").is_some());
    let (status, headers, body) = parts(
        anthropic_messages(&emu, "anthropic", &messages_body("hi", 10))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 429);
    assert_eq!(h(&headers, "retry-after"), Some("60"));
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "rate_limit_error");
    assert_eq!(body["request_id"].as_str(), h(&headers, "request-id"));
}

// Azure quotas (learn.microsoft.com/azure/ai-services/openai/quotas-limits): remaining
// headers, retry-after-ms + retry-after, "Please retry after N seconds".
#[tokio::test]
async fn azure_429_carries_retry_after_ms_and_the_delay_in_its_message() {
    let emu = Emulator::builder()
        .provider(ProviderConfig::azure("azure").with_limits(Limits::per_minute(2, 100_000)))
        .start()
        .await
        .unwrap();
    let (_, headers, _) = parts(
        azure_chat(&emu, "azure", "d", &chat_body("hi"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(h(&headers, "x-ratelimit-remaining-requests"), Some("1"));
    assert!(h(&headers, "x-ratelimit-remaining-tokens").is_some());
    azure_chat(&emu, "azure", "d", &chat_body("hi"))
        .send()
        .await
        .unwrap();
    let (status, headers, body) = parts(
        azure_chat(&emu, "azure", "d", &chat_body("hi"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 429);
    let ms: u64 = h(&headers, "retry-after-ms").unwrap().parse().unwrap();
    assert!((29_000..=30_000).contains(&ms), "{ms}");
    assert_eq!(h(&headers, "retry-after"), Some("30"));
    assert_eq!(body["error"]["code"], "429");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Please retry after 30 seconds.")
    );
}

// Gemini (ai.google.dev/gemini-api/docs/rate-limits): no headers; 429 RESOURCE_EXHAUSTED with
// QuotaFailure (a per-minute quota id) and RetryInfo.retryDelay.
#[tokio::test]
async fn gemini_429_states_retry_info_and_a_per_minute_quota_failure() {
    let emu = Emulator::builder()
        .provider(ProviderConfig::gemini("gemini").with_limits(Limits::none().with_rpm(1)))
        .start()
        .await
        .unwrap();
    let ok = gemini(
        &emu,
        "gemini",
        "gemini-2.0-flash",
        "generateContent",
        &gemini_body("hi"),
    )
    .send()
    .await
    .unwrap();
    assert!(
        ok.headers()
            .keys()
            .all(|k| !k.as_str().contains("ratelimit"))
    );
    let (status, headers, body) = parts(
        gemini(
            &emu,
            "gemini",
            "gemini-2.0-flash",
            "generateContent",
            &gemini_body("hi"),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 429);
    assert_eq!(h(&headers, "retry-after"), None);
    assert_eq!(body["error"]["status"], "RESOURCE_EXHAUSTED");
    let details = body["error"]["details"].as_array().unwrap();
    let find = |t: &str| {
        details
            .iter()
            .find(|d| d["@type"].as_str().unwrap().ends_with(t))
            .unwrap()
    };
    let v = &find("QuotaFailure")["violations"][0];
    assert_eq!(v["quotaId"], "GenerateRequestsPerMinutePerProjectPerModel");
    assert_eq!(v["quotaValue"], "1");
    assert_eq!(v["quotaDimensions"]["model"], "gemini-2.0-flash");
    assert_eq!(find("RetryInfo")["retryDelay"], "60s");
}

// Groq (console.groq.com/docs/rate-limits): request headers count per day, tokens per minute.
#[tokio::test]
async fn groq_style_headers_count_requests_per_day() {
    let emu = Emulator::builder()
        .provider(
            openai_with(Limits::per_minute(30, 6000).with_daily(Some(14_400), None))
                .with_headers(HeaderStyle::Groq),
        )
        .start()
        .await
        .unwrap();
    let (_, headers, _) = parts(
        openai_chat(&emu, "openai", &chat_body("hi"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(h(&headers, "x-ratelimit-limit-requests"), Some("14400"));
    assert_eq!(h(&headers, "x-ratelimit-remaining-requests"), Some("14399"));
    assert_eq!(
        h(&headers, "x-ratelimit-reset-requests"),
        Some("6s"),
        "a day / 14400"
    );
    assert_eq!(h(&headers, "x-ratelimit-limit-tokens"), Some("6000"));
}

// A LiteLLM proxy (docs.litellm.ai/docs/proxy/users, `rpm` per deployment with
// `enable_pre_call_checks`), as recorded from LiteLLM 1.108.7's proxy: its answers state the
// limit and what is left (no reset); its refusal states nothing — no rate-limit header, no
// `Retry-After` — and says no deployment is left.
#[tokio::test]
async fn litellm_style_states_limits_on_answers_and_nothing_on_its_429() {
    let emu = Emulator::builder()
        .provider(
            openai_with(Limits::none().with_rpm(2))
                .with_headers(HeaderStyle::LiteLlm)
                .with_fixed_windows(),
        )
        .start()
        .await
        .unwrap();
    for left in ["1", "0"] {
        let (status, headers, _) = parts(
            openai_chat(&emu, "openai", &chat_body("hi"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(h(&headers, "x-ratelimit-limit-requests"), Some("2"));
        assert_eq!(h(&headers, "x-ratelimit-remaining-requests"), Some(left));
        assert_eq!(h(&headers, "x-ratelimit-reset-requests"), None);
    }
    let (status, headers, body) = parts(
        openai_chat(&emu, "openai", &chat_body("hi"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 429);
    let stated: Vec<&str> = headers
        .keys()
        .map(|k| k.as_str())
        .filter(|k| k.starts_with("x-ratelimit") || *k == "retry-after")
        .collect();
    assert!(stated.is_empty(), "{stated:?}");
    assert_eq!(
        body["error"],
        json!({"message": "No deployments available for selected model.",
               "type": "rate_limit_error", "param": null, "code": "429"})
    );
}

// OpenRouter (openrouter.ai/docs/api-reference/limits): X-RateLimit-* with epoch-ms reset.
#[tokio::test]
async fn openrouter_style_states_epoch_ms_resets_and_its_own_429() {
    let emu = Emulator::builder()
        .provider(openai_with(Limits::none().with_rpm(1)).with_headers(HeaderStyle::OpenRouter))
        .start()
        .await
        .unwrap();
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    openai_chat(&emu, "openai", &chat_body("hi"))
        .send()
        .await
        .unwrap();
    let (status, headers, body) = parts(
        openai_chat(&emu, "openai", &chat_body("hi"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 429);
    assert_eq!(h(&headers, "x-ratelimit-limit"), Some("1"));
    assert_eq!(h(&headers, "x-ratelimit-remaining"), Some("0"));
    let reset: u64 = h(&headers, "x-ratelimit-reset").unwrap().parse().unwrap();
    assert!(
        (before + 58_000..before + 62_000).contains(&reset),
        "{reset} vs {before}"
    );
    assert_eq!(body["error"]["code"], 429);
    assert_eq!(
        body["error"]["metadata"]["headers"]["X-RateLimit-Remaining"],
        "0"
    );
}

#[tokio::test]
async fn a_daily_limit_names_requests_per_day() {
    let emu = Emulator::builder()
        .provider(openai_with(Limits::none().with_rpd(1)))
        .start()
        .await
        .unwrap();
    openai_chat(&emu, "openai", &chat_body("hi"))
        .send()
        .await
        .unwrap();
    let (status, headers, body) = parts(
        openai_chat(&emu, "openai", &chat_body("hi"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 429);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("requests per day (RPD)")
    );
    assert_eq!(h(&headers, "retry-after"), Some("86400"));
}

#[tokio::test]
async fn a_concurrency_limit_refuses_requests_in_flight() {
    let emu = Emulator::builder()
        .provider(
            ProviderConfig::deepgram("deepgram")
                .with_limits(Limits::none().with_concurrency(1))
                .with_latency(300, 0),
        )
        .start()
        .await
        .unwrap();
    let (a, b) = tokio::join!(
        deepgram_listen(&emu, "deepgram", "", wav(0.5)).send(),
        async {
            // Sent once the first one holds the provider's only slot (bounded: a first
            // request that never takes it fails the test instead of hanging it).
            let mut turns = 0u32;
            while emu.in_flight("deepgram") == 0 {
                turns += 1;
                assert!(turns < 1_000_000, "the first request never took the slot");
                tokio::task::yield_now().await;
            }
            deepgram_listen(&emu, "deepgram", "", wav(0.5)).send().await
        }
    );
    assert_eq!(a.unwrap().status(), 200);
    let (status, _, body) = parts(b.unwrap()).await;
    assert_eq!(status, 429);
    assert_eq!(body["err_code"], "TOO_MANY_REQUESTS");
    // The slot is free again once the first answer is out.
    assert_eq!(
        deepgram_listen(&emu, "deepgram", "", wav(0.5))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
}

#[tokio::test]
async fn transcriptions_count_requests_only() {
    let emu = Emulator::builder()
        .provider(openai_with(Limits::per_minute(50, 10)))
        .start()
        .await
        .unwrap();
    let form = || {
        reqwest::multipart::Form::new()
            .text("model", "whisper-1")
            .part(
                "file",
                reqwest::multipart::Part::bytes(wav(1.0)).file_name("a.wav"),
            )
    };
    let resp = client()
        .post(format!("{}/audio/transcriptions", emu.base_url("openai")))
        .bearer_auth(emu.key("openai"))
        .multipart(form())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        h(resp.headers(), "x-ratelimit-remaining-requests"),
        Some("49")
    );
    assert_eq!(
        h(resp.headers(), "x-ratelimit-remaining-tokens"),
        Some("10")
    );
}

// docs.claude.com/en/api/messages-count-tokens: a count is free and limited apart from
// messages; the emulator books nothing for it, so it passes where a message would not.
#[tokio::test]
async fn a_token_count_books_nothing_in_the_message_limits() {
    let emu = Emulator::builder()
        .provider(
            ProviderConfig::anthropic("anthropic")
                .with_limits(Limits::none().with_rpm(1).with_tpm(100)),
        )
        .start()
        .await
        .unwrap();
    let big = json!({"model": "claude-sonnet-4-5",
                     "messages": [{"role": "user", "content": "a".repeat(2_000)}]});
    for _ in 0..3 {
        let (status, headers, body) = parts(
            anthropic_count(&emu, "anthropic", &big)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!((status, &body), (200, &json!({"input_tokens": 500})));
        assert_eq!(
            h(&headers, "anthropic-ratelimit-requests-remaining"),
            None,
            "a count states no message limits"
        );
    }
    assert_eq!(emu.counters("anthropic").tokens, 0);
    // The one message a minute is still there.
    let (status, headers, body) = parts(
        anthropic_messages(&emu, "anthropic", &messages_body("hi", 5))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        h(&headers, "anthropic-ratelimit-requests-remaining"),
        Some("0")
    );
    // A count still needs the key.
    let (status, _, body) = parts(
        client()
            .post(format!(
                "{}/v1/messages/count_tokens",
                emu.base_url("anthropic")
            ))
            .header("x-api-key", "nope")
            .header("anthropic-version", "2023-06-01")
            .json(&big)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, &body["error"]["type"]),
        (401, &json!("authentication_error"))
    );
}
