//! Headers the emulator emits parse back, through the SDK's own parsers, to the state the
//! emulator holds.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::HeaderMap;
use llm_failover::clock::Now;
use llm_failover::ratelimit::{self, HeaderDialect, Per, Window, parse_limit_headers};
use llm_failover_emulator::headers::{RetryHeader, go_duration, rate_limit_headers, retry_headers};
use llm_failover_emulator::limits::{Snapshot, WindowState};
use llm_failover_emulator::{Emulator, HeaderStyle, Limits, ProviderConfig};
use tokio::time::Instant;

use crate::support::*;

fn now() -> Now {
    Now {
        instant: Instant::now(),
        wall: UNIX_EPOCH + Duration::from_secs(1_735_689_600),
    }
}

fn win(limit: u64, remaining: u64, reset_ms: u64) -> Option<WindowState> {
    Some(WindowState {
        limit,
        remaining,
        reset: Duration::from_millis(reset_ms),
    })
}

fn emitted(style: HeaderStyle, snap: &Snapshot, wall: SystemTime) -> HeaderMap {
    let mut h = HeaderMap::new();
    rate_limit_headers(style, snap, wall, &mut h);
    h
}

/// Asserts a parsed window states `limit` (when the format carries it), `remaining` and a reset
/// `reset` after now.
fn assert_window(
    got: Option<Window>,
    now: Now,
    limit: Option<u64>,
    remaining: u64,
    reset: Duration,
    what: &str,
) {
    let w = got.unwrap_or_else(|| panic!("{what}: no window parsed"));
    assert_eq!(w.limit, limit, "{what}: limit");
    assert_eq!(w.remaining, Some(remaining), "{what}: remaining");
    assert_eq!(w.reset_at, Some(now.instant + reset), "{what}: reset");
}

#[test]
fn retry_after_seconds_parse_back_to_the_delay_rounded_up() {
    let now = now();
    for (style, delay_ms, want) in [
        (HeaderStyle::OpenAi, 20_000, Duration::from_secs(20)),
        (HeaderStyle::Anthropic, 1_234, Duration::from_secs(2)),
        (HeaderStyle::Groq, 999, Duration::from_secs(1)),
        // Azure: retry-after-ms is read first, at millisecond precision.
        (HeaderStyle::Azure, 1_234, Duration::from_millis(1_234)),
    ] {
        let mut h = HeaderMap::new();
        retry_headers(
            style,
            &RetryHeader::Delay(Duration::from_millis(delay_ms)),
            &mut h,
        );
        assert_eq!(ratelimit::retry_after(&h, now), Some(want), "{style:?}");
        assert_eq!(
            parse_limit_headers(HeaderDialect::OpenAi, &h, now).retry_after,
            Some(want)
        );
    }
}

#[tokio::test]
async fn a_live_429_retry_after_parses_back_through_the_sdk() {
    let emu = Emulator::builder()
        .provider(
            ProviderConfig::anthropic("anthropic").with_limits(Limits::per_minute(2, 100_000)),
        )
        .start()
        .await
        .unwrap();
    for _ in 0..2 {
        anthropic_messages(&emu, "anthropic", &messages_body("hi", 5))
            .send()
            .await
            .unwrap();
    }
    let resp = anthropic_messages(&emu, "anthropic", &messages_body("hi", 5))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 429);
    let now = now();
    // Two per minute: one back every 30 s.
    assert_eq!(
        ratelimit::retry_after(resp.headers(), now),
        Some(Duration::from_secs(30))
    );
}

#[test]
fn every_header_style_parses_back_to_the_bucket_state() {
    let now = now();
    let snap = Snapshot {
        rpm: win(500, 497, 360),
        tpm: win(200_000, 150_000, 15_000),
        rpd: win(14_400, 14_000, 2_400_000),
        tpd: None,
    };
    let ms = Duration::from_millis;

    let r = parse_limit_headers(
        HeaderDialect::OpenAi,
        &emitted(HeaderStyle::OpenAi, &snap, now.wall),
        now,
    );
    assert_window(r.requests, now, Some(500), 497, ms(360), "openai requests");
    assert_window(
        r.tokens,
        now,
        Some(200_000),
        150_000,
        ms(15_000),
        "openai tokens",
    );
    assert_eq!(
        (r.requests.unwrap().per, r.tokens.unwrap().per),
        (Per::Minute, Per::Minute)
    );

    let r = parse_limit_headers(
        HeaderDialect::Groq,
        &emitted(HeaderStyle::Groq, &snap, now.wall),
        now,
    );
    assert_window(
        r.requests,
        now,
        Some(14_400),
        14_000,
        ms(2_400_000),
        "groq requests",
    );
    assert_window(
        r.tokens,
        now,
        Some(200_000),
        150_000,
        ms(15_000),
        "groq tokens",
    );
    assert_eq!(
        (r.requests.unwrap().per, r.tokens.unwrap().per),
        (Per::Day, Per::Minute)
    );

    // Anthropic resets are RFC 3339 at whole seconds, rounded up.
    let r = parse_limit_headers(
        HeaderDialect::Anthropic,
        &emitted(HeaderStyle::Anthropic, &snap, now.wall),
        now,
    );
    assert_window(
        r.requests,
        now,
        Some(500),
        497,
        ms(1000),
        "anthropic requests",
    );
    assert_window(
        r.tokens,
        now,
        Some(200_000),
        150_000,
        ms(15_000),
        "anthropic tokens",
    );

    // Azure states remaining counts and the token reset in whole seconds.
    let r = parse_limit_headers(
        HeaderDialect::Azure,
        &emitted(HeaderStyle::Azure, &snap, now.wall),
        now,
    );
    assert_eq!(r.requests.and_then(|w| w.remaining), Some(497));
    assert_window(r.tokens, now, None, 150_000, ms(15_000), "azure tokens");

    // OpenRouter: the tighter request window, reset in epoch milliseconds.
    let r = parse_limit_headers(
        HeaderDialect::Generic,
        &emitted(HeaderStyle::OpenRouter, &snap, now.wall),
        now,
    );
    assert_window(
        r.requests,
        now,
        Some(500),
        497,
        ms(360),
        "openrouter requests",
    );
}

#[test]
fn go_durations_and_message_delays_parse_back() {
    for ms in [1, 12, 999, 1000, 1500, 59_472, 360_000, 179_560, 83_909_144] {
        let d = Duration::from_millis(ms);
        assert_eq!(ratelimit::go_duration(&go_duration(d)), Some(d), "{ms} ms");
    }
    let msg = format!(
        "Rate limit reached ... Please try again in {}. Visit …",
        go_duration(Duration::from_millis(18_642))
    );
    assert_eq!(
        ratelimit::delay_in_message(&msg),
        Some(Duration::from_millis(18_642))
    );
    assert_eq!(
        ratelimit::delay_in_message("Please retry after 9 seconds."),
        Some(Duration::from_secs(9))
    );
}

#[test]
fn an_http_date_retry_after_parses_back() {
    let now = now();
    let mut h = HeaderMap::new();
    let at = now.wall + Duration::from_secs(30);
    h.insert("retry-after", httpdate::fmt_http_date(at).parse().unwrap());
    assert_eq!(
        ratelimit::retry_after(&h, now),
        Some(Duration::from_secs(30))
    );
}

#[tokio::test]
async fn a_live_response_parses_back_to_the_emulators_buckets() {
    let emu = Emulator::builder()
        .provider(ProviderConfig::openai("openai").with_limits(Limits::per_minute(10, 10_000)))
        .start()
        .await
        .unwrap();
    openai_chat(&emu, "openai", &chat_body("hi"))
        .send()
        .await
        .unwrap();
    let resp = openai_chat(&emu, "openai", &chat_body("hi"))
        .send()
        .await
        .unwrap();
    let now = Now {
        instant: Instant::now(),
        wall: SystemTime::now(),
    };
    let r = parse_limit_headers(HeaderDialect::OpenAi, resp.headers(), now);
    let req = r.requests.unwrap();
    assert_eq!(
        (req.limit, req.remaining, req.per),
        (Some(10), Some(8), Per::Minute)
    );
    // Two requests out of ten per minute: full again in 12 s (less the time since).
    let reset = req.reset_at.unwrap() - now.instant;
    assert!(
        reset <= Duration::from_secs(12) && reset > Duration::from_secs(11),
        "{reset:?}"
    );
    let tokens = r.tokens.unwrap();
    assert_eq!(tokens.limit, Some(10_000));
    assert!(tokens.remaining.unwrap() < 10_000);
}
