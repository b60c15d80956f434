//! Faults on request: scripted sequences, every fault kind, seeded mixes, the request log.

use std::time::{Duration, Instant};

use llm_failover_emulator::{
    Emulator, Fault, FaultConfig, HeaderStyle, Limits, ProviderConfig, RetryAfter,
};
use serde_json::{Value, json};

use crate::support::*;

async fn start() -> Emulator {
    Emulator::builder()
        .provider(ProviderConfig::openai("openai").with_hang_ms(2_000))
        .anthropic("anthropic")
        .gemini("gemini")
        .azure("azure")
        .deepgram("deepgram")
        .start()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_script_answers_the_next_requests_in_order_and_the_log_shows_each_fault() {
    let emu = start().await;
    emu.script(
        "openai",
        [
            Fault::Status { status: 503 },
            Fault::RateLimit {
                retry_after: RetryAfter::Seconds(1),
            },
            Fault::Pass,
        ],
    );
    assert_eq!(emu.pending_faults("openai"), 3);
    let mut got = Vec::new();
    for _ in 0..4 {
        let (status, headers, body) = parts(
            openai_chat(&emu, "openai", &chat_body("hi"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        got.push((status, h(&headers, "retry-after").map(str::to_owned), body));
    }
    assert_eq!(got[0].0, 503);
    assert_eq!(got[0].2["error"]["type"], "server_error");
    assert_eq!((got[1].0, got[1].1.as_deref()), (429, Some("1")));
    assert_eq!(got[1].2["error"]["code"], "rate_limit_exceeded");
    assert!(
        got[1].2["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Please try again in 1s.")
    );
    assert_eq!(got[2].0, 200);
    assert_eq!(got[3].0, 200, "the script is used up");
    let log = emu.log();
    let faults: Vec<Option<&str>> = log.iter().map(|e| e.fault.as_deref()).collect();
    assert_eq!(faults, [Some("status"), Some("rate_limit"), None, None]);
    let statuses: Vec<Option<u16>> = log.iter().map(|e| e.status).collect();
    assert_eq!(statuses, [Some(503), Some(429), Some(200), Some(200)]);
    assert!(
        log.iter()
            .all(|e| e.provider == "openai" && e.path == "/openai/v1/chat/completions")
    );
    assert_eq!(log[2].model.as_deref(), Some("gpt-4o-mini"));
    let c = emu.counters("openai");
    assert_eq!(
        (c.requests, c.ok, c.rate_limited, c.server_errors, c.faults),
        (4, 2, 1, 1, 2)
    );
}

#[tokio::test]
async fn injected_errors_come_in_each_providers_own_body() {
    let emu = start().await;
    type Send = fn(&Emulator) -> reqwest::RequestBuilder;
    let openai: Send = |e| openai_chat(e, "openai", &chat_body("hi"));
    let anthropic: Send = |e| anthropic_messages(e, "anthropic", &messages_body("hi", 5));
    let gem: Send = |e| {
        gemini(
            e,
            "gemini",
            "gemini-2.0-flash",
            "generateContent",
            &gemini_body("hi"),
        )
    };
    let azure: Send = |e| azure_chat(e, "azure", "d", &chat_body("hi"));
    let deepgram: Send = |e| deepgram_listen(e, "deepgram", "", wav(0.5));
    let cases: Vec<(&str, Send, Fault, u16, &str, &str)> = vec![
        (
            "openai",
            openai,
            Fault::InsufficientQuota,
            429,
            "/error/code",
            "insufficient_quota",
        ),
        (
            "openai",
            openai,
            Fault::Status { status: 500 },
            500,
            "/error/type",
            "server_error",
        ),
        (
            "openai",
            openai,
            Fault::Overloaded,
            503,
            "/error/type",
            "server_error",
        ),
        (
            "openai",
            openai,
            Fault::DailyQuota,
            429,
            "/error/message",
            "requests per day (RPD)",
        ),
        (
            "anthropic",
            anthropic,
            Fault::Overloaded,
            529,
            "/error/type",
            "overloaded_error",
        ),
        (
            "anthropic",
            anthropic,
            Fault::Status { status: 500 },
            500,
            "/error/type",
            "api_error",
        ),
        (
            "anthropic",
            anthropic,
            Fault::RateLimit {
                retry_after: RetryAfter::Bucket,
            },
            429,
            "/error/type",
            "rate_limit_error",
        ),
        (
            "anthropic",
            anthropic,
            Fault::InsufficientQuota,
            400,
            "/error/message",
            "credit balance is too low",
        ),
        (
            "gemini",
            gem,
            Fault::Overloaded,
            503,
            "/error/status",
            "UNAVAILABLE",
        ),
        (
            "gemini",
            gem,
            Fault::Status { status: 500 },
            500,
            "/error/status",
            "INTERNAL",
        ),
        (
            "gemini",
            gem,
            Fault::DailyQuota,
            429,
            "/error/details/0/violations/0/quotaId",
            "GenerateRequestsPerDayPerProjectPerModel",
        ),
        (
            "gemini",
            gem,
            Fault::InsufficientQuota,
            429,
            "/error/details/0/violations/0/quotaValue",
            "0",
        ),
        (
            "azure",
            azure,
            Fault::RateLimit {
                retry_after: RetryAfter::Seconds(7),
            },
            429,
            "/error/message",
            "Please retry after 7 seconds.",
        ),
        (
            "azure",
            azure,
            Fault::Status { status: 500 },
            500,
            "/error/code",
            "InternalServerError",
        ),
        (
            "deepgram",
            deepgram,
            Fault::Status { status: 503 },
            503,
            "/err_code",
            "INTERNAL_SERVER_ERROR",
        ),
        (
            "deepgram",
            deepgram,
            Fault::InsufficientQuota,
            402,
            "/err_code",
            "ASR_PAYMENT_REQUIRED",
        ),
    ];
    for (prefix, send, fault, status, pointer, needle) in cases {
        let name = format!("{prefix} {fault:?}");
        emu.script(prefix, [fault]);
        let (got, _, body) = parts(send(&emu).send().await.unwrap()).await;
        assert_eq!(got, status, "{name}: {body}");
        let field = body
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default();
        assert!(field.contains(needle), "{name}: {body}");
    }
}

// Out of credit is final: the official SDKs obey `x-should-retry` before the status
// (openai-python `_base_client.py` `_should_retry`), so every quota/credit error says false —
// OpenAI 429 insufficient_quota (platform.openai.com/docs/guides/error-codes#api-errors),
// Azure's, Anthropic's credit balance (docs.claude.com/en/api/errors), Gemini's zero quota,
// Deepgram's 402 (developers.deepgram.com/reference/errors), OpenRouter's 402
// (openrouter.ai/docs/api-reference/errors) — and a plain rate limit does not.
#[tokio::test]
async fn quota_errors_say_do_not_retry_and_rate_limits_do_not() {
    let emu = Emulator::builder()
        .openai("openai")
        .provider(ProviderConfig::openai("openrouter").with_headers(HeaderStyle::OpenRouter))
        .anthropic("anthropic")
        .gemini("gemini")
        .azure("azure")
        .deepgram("deepgram")
        .start()
        .await
        .unwrap();
    type Send = fn(&Emulator) -> reqwest::RequestBuilder;
    let openai: Send = |e| openai_chat(e, "openai", &chat_body("hi"));
    let openrouter: Send = |e| openai_chat(e, "openrouter", &chat_body("hi"));
    let anthropic: Send = |e| anthropic_messages(e, "anthropic", &messages_body("hi", 5));
    let count: Send = |e| anthropic_count(e, "anthropic", &messages_body("hi", 5));
    let gem: Send = |e| gemini(e, "gemini", "g", "generateContent", &gemini_body("hi"));
    let azure: Send = |e| azure_chat(e, "azure", "d", &chat_body("hi"));
    let deepgram: Send = |e| deepgram_listen(e, "deepgram", "", wav(0.5));
    let rate_limit = || Fault::RateLimit {
        retry_after: RetryAfter::Seconds(1),
    };
    let cases: Vec<(&str, Send, Fault, u16, Option<&str>)> = vec![
        (
            "openai",
            openai,
            Fault::InsufficientQuota,
            429,
            Some("false"),
        ),
        ("openai", openai, rate_limit(), 429, None),
        ("openai", openai, Fault::DailyQuota, 429, None),
        ("openai", openai, Fault::Status { status: 500 }, 500, None),
        (
            "openrouter",
            openrouter,
            Fault::InsufficientQuota,
            402,
            Some("false"),
        ),
        ("openrouter", openrouter, rate_limit(), 429, None),
        (
            "anthropic",
            anthropic,
            Fault::InsufficientQuota,
            400,
            Some("false"),
        ),
        (
            "anthropic",
            count,
            Fault::InsufficientQuota,
            400,
            Some("false"),
        ),
        ("anthropic", anthropic, rate_limit(), 429, None),
        ("gemini", gem, Fault::InsufficientQuota, 429, Some("false")),
        ("gemini", gem, rate_limit(), 429, None),
        ("azure", azure, Fault::InsufficientQuota, 429, Some("false")),
        ("azure", azure, rate_limit(), 429, None),
        (
            "deepgram",
            deepgram,
            Fault::InsufficientQuota,
            402,
            Some("false"),
        ),
    ];
    for (prefix, send, fault, status, should_retry) in cases {
        let name = format!("{prefix} {fault:?}");
        emu.script(prefix, [fault]);
        let (got, headers, body) = parts(send(&emu).send().await.unwrap()).await;
        assert_eq!(got, status, "{name}: {body}");
        assert_eq!(h(&headers, "x-should-retry"), should_retry, "{name}");
    }
    // OpenRouter's 402: {"error": {"code": 402, "message"}}.
    emu.script("openrouter", [Fault::InsufficientQuota]);
    let body = parts(openrouter(&emu).send().await.unwrap()).await.2;
    assert_eq!(body["error"]["code"], 402, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("Insufficient credits")
    );
}

// Retry-After forms a client must survive (RFC 9110 §10.2.3 allows delay-seconds or an
// HTTP-date; the rest are what broken proxies send).
#[tokio::test]
async fn retry_after_comes_in_every_form_asked_for() {
    let emu = start().await;
    type Check = fn(Option<&str>) -> bool;
    let cases: [(RetryAfter, Check); 6] = [
        (RetryAfter::Absent, |v| v.is_none()),
        (RetryAfter::Seconds(3), |v| v == Some("3")),
        (RetryAfter::HttpDate(30), |v| {
            v.and_then(|d| httpdate::parse_http_date(d).ok())
                .is_some_and(|t| t > std::time::SystemTime::now())
        }),
        (RetryAfter::Past, |v| {
            v.and_then(|d| httpdate::parse_http_date(d).ok())
                .is_some_and(|t| t < std::time::SystemTime::now())
        }),
        (RetryAfter::Invalid, |v| v == Some("soon")),
        (RetryAfter::Huge, |v| v == Some("999999999")),
    ];
    for (form, check) in cases {
        emu.script("openai", [Fault::RateLimit { retry_after: form }]);
        let (status, headers, body) = parts(
            openai_chat(&emu, "openai", &chat_body("hi"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 429);
        assert!(check(h(&headers, "retry-after")), "{form:?}: {headers:?}");
        let msg = body["error"]["message"].as_str().unwrap();
        assert_eq!(
            msg.contains("Please try again in"),
            matches!(
                form,
                RetryAfter::Seconds(_) | RetryAfter::HttpDate(_) | RetryAfter::Huge
            ),
            "{form:?}: {msg}"
        );
    }
    emu.script(
        "gemini",
        [Fault::RateLimit {
            retry_after: RetryAfter::Absent,
        }],
    );
    let body = parts(
        gemini(&emu, "gemini", "g", "generateContent", &gemini_body("x"))
            .send()
            .await
            .unwrap(),
    )
    .await
    .2;
    assert!(!body.to_string().contains("RetryInfo"), "{body}");
}

#[tokio::test]
async fn a_reset_drops_the_connection_without_a_response() {
    let emu = start().await;
    emu.script("openai", [Fault::Reset]);
    let err = openai_chat(&emu, "openai", &chat_body("hi"))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_request() || err.is_connect(), "{err:?}");
    assert!(err.status().is_none());
    // The next request on a fresh connection is answered.
    assert_eq!(
        openai_chat(&emu, "openai", &chat_body("hi"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let log = emu.log();
    assert_eq!(
        (log[0].status, log[0].fault.as_deref()),
        (None, Some("reset"))
    );
    assert_eq!(emu.counters("openai").dropped, 1);
}

#[tokio::test]
async fn a_hang_outlasts_the_clients_timeout() {
    let emu = start().await;
    emu.script("openai", [Fault::Hang { ms: None }]);
    let started = Instant::now();
    let err = openai_chat(&emu, "openai", &chat_body("hi"))
        .timeout(Duration::from_millis(150))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    assert!(started.elapsed() < Duration::from_millis(1500));
    // Logged when the hang began, not when it ends.
    assert_eq!(emu.log()[0].fault.as_deref(), Some("hang"));
}

#[tokio::test]
async fn a_truncated_body_fails_to_read_and_malformed_json_fails_to_parse() {
    let emu = start().await;
    emu.script("openai", [Fault::Truncated, Fault::MalformedJson]);
    let resp = openai_chat(&emu, "openai", &chat_body("hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        resp.bytes().await.is_err(),
        "the body stops short of its Content-Length"
    );
    let resp = openai_chat(&emu, "openai", &chat_body("hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    assert!(text.starts_with('{'));
    assert!(serde_json::from_str::<Value>(&text).is_err(), "{text}");
}

#[tokio::test]
async fn an_html_error_page_comes_as_a_proxy_sends_it() {
    let emu = start().await;
    emu.script("anthropic", [Fault::Html { status: 502 }]);
    let resp = anthropic_messages(&emu, "anthropic", &messages_body("hi", 5))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 502);
    assert_eq!(
        h(resp.headers(), "content-type"),
        Some("text/html; charset=utf-8")
    );
    assert!(
        resp.text()
            .await
            .unwrap()
            .contains("<title>502 Bad Gateway</title>")
    );
}

#[tokio::test]
async fn latency_delays_a_normal_answer() {
    let emu = start().await;
    emu.script(
        "openai",
        [Fault::Latency {
            ms: 120,
            jitter_ms: 30,
        }],
    );
    let started = Instant::now();
    let resp = openai_chat(&emu, "openai", &chat_body("hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(120) && took < Duration::from_millis(1000),
        "{took:?}"
    );
}

// Errors inside a 200 stream: Anthropic `event: error` (docs.anthropic.com/en/api/messages-streaming
// "Error events"), OpenAI a `data:` object with `error`.
#[tokio::test]
async fn a_stream_error_arrives_after_some_content() {
    let emu = start().await;
    emu.script("anthropic", [Fault::StreamError]);
    let mut req = messages_body("A long enough answer please", 200);
    req["stream"] = json!(true);
    let resp = anthropic_messages(&emu, "anthropic", &req)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let (data, events) = sse(&resp.text().await.unwrap());
    assert!(
        events.iter().any(|e| e == "content_block_delta"),
        "{events:?}"
    );
    assert_eq!(events.last().map(String::as_str), Some("error"));
    assert!(!events.iter().any(|e| e == "message_stop"));
    assert!(data.last().unwrap().contains("overloaded_error"));

    emu.script("openai", [Fault::StreamError]);
    let mut req = chat_body("A long enough answer please");
    req["stream"] = json!(true);
    let text = openai_chat(&emu, "openai", &req)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let (data, _) = sse(&text);
    assert!(data.iter().any(|d| d.contains("\"content\":\"")));
    let last: Value = serde_json::from_str(data.last().unwrap()).unwrap();
    assert_eq!(last["error"]["type"], "server_error");
    assert!(!data.iter().any(|d| d == "[DONE]"));
}

#[tokio::test]
async fn malformed_headers_replace_the_rate_limit_headers() {
    let emu = Emulator::builder()
        .provider(ProviderConfig::openai("openai").with_limits(Limits::per_minute(10, 100_000)))
        .start()
        .await
        .unwrap();
    emu.script("openai", [Fault::MalformedHeaders]);
    let (status, headers, _) = parts(
        openai_chat(&emu, "openai", &chat_body("hi"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(h(&headers, "x-ratelimit-reset-requests"), Some("soon"));
    assert_eq!(h(&headers, "x-ratelimit-remaining-requests"), Some("-3"));
    assert_eq!(h(&headers, "retry-after"), Some("later"));
}

#[tokio::test]
async fn a_seeded_mix_gives_the_same_faults_for_the_same_seed() {
    async fn run(seed: u64) -> Vec<u16> {
        let mix = FaultConfig::mix(
            seed,
            [
                (0.3, Fault::Status { status: 500 }),
                (
                    0.3,
                    Fault::RateLimit {
                        retry_after: RetryAfter::Absent,
                    },
                ),
            ],
        );
        let emu = Emulator::builder()
            .provider(ProviderConfig::openai("openai").with_faults(mix))
            .start()
            .await
            .unwrap();
        let mut out = Vec::new();
        for _ in 0..30 {
            out.push(
                openai_chat(&emu, "openai", &chat_body("hi"))
                    .send()
                    .await
                    .unwrap()
                    .status()
                    .as_u16(),
            );
        }
        out
    }
    let a = run(7).await;
    assert_eq!(a, run(7).await);
    assert!(
        a.contains(&500) && a.contains(&429) && a.contains(&200),
        "{a:?}"
    );
    assert_ne!(a, run(8).await);
}

#[tokio::test]
async fn a_runtime_mix_can_be_set_and_turned_off() {
    let emu = start().await;
    emu.set_fault_mix("deepgram", 1, [(1.0, Fault::Status { status: 502 })]);
    assert_eq!(
        deepgram_listen(&emu, "deepgram", "", wav(0.5))
            .send()
            .await
            .unwrap()
            .status(),
        502
    );
    emu.set_fault_mix("deepgram", 1, []);
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
async fn a_late_step_taken_by_a_refused_request_is_used_up_and_not_applied() {
    let emu = Emulator::builder()
        .provider(ProviderConfig::openai("openai").with_limits(Limits::none().with_rpm(1)))
        .start()
        .await
        .unwrap();
    let send = |key: &'static str| {
        client()
            .post(format!("{}/chat/completions", emu.base_url("openai")))
            .bearer_auth(key)
            .json(&chat_body("hi"))
            .send()
    };
    // The first request uses the only request of the minute; the next two are refused — one by
    // the key check, one by the limit — each taking a late step that is never applied.
    assert_eq!(send("emulator-key").await.unwrap().status(), 200);
    emu.script(
        "openai",
        [
            Fault::Latency {
                ms: 10,
                jitter_ms: 0,
            },
            Fault::MalformedJson,
        ],
    );
    assert_eq!(send("sk-wrong-000000000000").await.unwrap().status(), 401);
    assert_eq!(send("emulator-key").await.unwrap().status(), 429);
    assert_eq!(emu.pending_faults("openai"), 0);
    let log = emu.log();
    let faults: Vec<Option<&str>> = log.iter().map(|e| e.fault.as_deref()).collect();
    assert_eq!(faults, [None, None, None]);
    assert_eq!(emu.counters("openai").faults, 0);
}
