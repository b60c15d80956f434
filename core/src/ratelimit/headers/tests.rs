use std::time::{Duration, SystemTime};

use reqwest::header::HeaderValue;
use tokio::time::Instant;

use super::super::value::test_support::{ALL_DIALECTS, Pairs, fixed_now, headers};
use super::*;

fn win(
    limit: Option<u64>,
    remaining: Option<u64>,
    reset_at: Option<Instant>,
    per: Per,
) -> Option<Window> {
    Some(Window {
        limit,
        remaining,
        reset_at,
        per,
    })
}

fn parse(dialect: HeaderDialect, pairs: &[(&str, &str)], now: Now) -> LimitReport {
    parse_limit_headers(dialect, &headers(pairs), now)
}

#[test]
fn openai_headers_from_the_docs_give_minute_windows() {
    let now = fixed_now();
    // https://platform.openai.com/docs/guides/rate-limits#rate-limits-in-headers
    let report = parse(
        HeaderDialect::OpenAi,
        &[
            ("x-ratelimit-limit-requests", "60"),
            ("x-ratelimit-limit-tokens", "150000"),
            ("x-ratelimit-remaining-requests", "59"),
            ("x-ratelimit-remaining-tokens", "149984"),
            ("x-ratelimit-reset-requests", "1s"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ],
        now,
    );
    let at = |s| Some(now.instant + Duration::from_secs(s));
    assert_eq!(report.requests, win(Some(60), Some(59), at(1), Per::Minute));
    assert_eq!(
        report.tokens,
        win(Some(150_000), Some(149_984), at(360), Per::Minute)
    );
    assert_eq!(report.input_tokens, None);
    assert_eq!(report.output_tokens, None);
    assert_eq!(report.retry_after, None);
    assert_eq!(report.should_retry, None);
}

/// A window that resets more than an hour away is the day's, not a minute's: OpenAI's
/// headers state the binding limit, and a daily one resets like `23h59m` (the window was
/// labelled `Minute`). Within the hour it stays a minute (the guide's own `6m0s` above).
#[test]
fn an_openai_window_resetting_beyond_an_hour_is_a_day() {
    let now = fixed_now();
    let table = [
        ("1s", Per::Minute),
        ("6m0s", Per::Minute),
        ("59m59s", Per::Minute),
        ("1h0m1s", Per::Day),
        ("23h0m0s", Per::Day),
    ];
    for (reset, want) in table {
        let report = parse(
            HeaderDialect::OpenAi,
            &[
                ("x-ratelimit-limit-tokens", "2000000"),
                ("x-ratelimit-remaining-tokens", "10"),
                ("x-ratelimit-reset-tokens", reset),
                ("x-ratelimit-limit-requests", "10000"),
                ("x-ratelimit-remaining-requests", "9"),
                ("x-ratelimit-reset-requests", reset),
            ],
            now,
        );
        assert_eq!(report.tokens.unwrap().per, want, "{reset}");
        assert_eq!(report.requests.unwrap().per, want, "{reset}");
    }
    // Groq's request window is the day already.
    let groq = parse(
        HeaderDialect::Groq,
        &[
            ("x-ratelimit-limit-requests", "14400"),
            ("x-ratelimit-reset-requests", "2m59.56s"),
        ],
        now,
    );
    assert_eq!(groq.requests.unwrap().per, Per::Day);
}

#[test]
fn openai_usage_based_token_headers_tighten_the_token_window() {
    let now = fixed_now();
    let ms = |n| Some(now.instant + Duration::from_millis(n));
    let cases: &[(Pairs, Option<Window>)] = &[
        // https://community.openai.com/t/how-to-get-rate-limit-reset-time-for-response-api/1268905
        (
            &[
                ("x-ratelimit-limit-tokens", "160000"),
                ("x-ratelimit-limit-tokens_usage_based", "160000"),
                ("x-ratelimit-remaining-tokens", "159976"),
                ("x-ratelimit-remaining-tokens_usage_based", "159976"),
                ("x-ratelimit-reset-tokens", "9ms"),
                ("x-ratelimit-reset-tokens_usage_based", "9ms"),
            ],
            win(Some(160_000), Some(159_976), ms(9), Per::Minute),
        ),
        // When the two views differ: lower remaining, later reset.
        (
            &[
                ("x-ratelimit-limit-tokens", "160000"),
                ("x-ratelimit-remaining-tokens", "150000"),
                ("x-ratelimit-reset-tokens", "9ms"),
                ("x-ratelimit-remaining-tokens_usage_based", "1200"),
                ("x-ratelimit-reset-tokens_usage_based", "2m59.56s"),
            ],
            win(Some(160_000), Some(1_200), ms(179_560), Per::Minute),
        ),
        // Only the usage-based view present.
        (
            &[("x-ratelimit-remaining-tokens_usage_based", "7")],
            win(None, Some(7), None, Per::Minute),
        ),
    ];
    for (pairs, want) in cases {
        assert_eq!(
            parse(HeaderDialect::OpenAi, pairs, now).tokens,
            *want,
            "headers {pairs:?}"
        );
    }
}

#[test]
fn groq_request_headers_count_per_day_and_token_headers_per_minute() {
    let now = fixed_now();
    // https://console.groq.com/docs/rate-limits#rate-limit-headers (the documented example)
    let report = parse(
        HeaderDialect::Groq,
        &[
            ("retry-after", "2"),
            ("x-ratelimit-limit-requests", "14400"),
            ("x-ratelimit-limit-tokens", "18000"),
            ("x-ratelimit-remaining-requests", "14370"),
            ("x-ratelimit-remaining-tokens", "17997"),
            ("x-ratelimit-reset-requests", "2m59.56s"),
            ("x-ratelimit-reset-tokens", "7.66s"),
        ],
        now,
    );
    let ms = |n| Some(now.instant + Duration::from_millis(n));
    assert_eq!(
        report.requests,
        win(Some(14_400), Some(14_370), ms(179_560), Per::Day)
    );
    assert_eq!(
        report.tokens,
        win(Some(18_000), Some(17_997), ms(7_660), Per::Minute)
    );
    assert_eq!(report.retry_after, Some(Duration::from_secs(2)));
}

/// Headers, then the expected request window, token window and retry-after.
type AzureRow<'a> = (Pairs<'a>, Option<Window>, Option<Window>, Option<Duration>);

#[test]
fn azure_headers_read_bare_seconds_and_ignore_minus_one() {
    let now = fixed_now();
    let at = |s| Some(now.instant + Duration::from_secs(s));
    let cases: &[AzureRow] = &[
        // https://learn.microsoft.com/en-gb/answers/questions/2156987/rate-limiting-inconsistent-with-x-ratelimit-remain
        // (a 50k-TPM deployment: remaining-requests counts a 10-second window)
        (
            &[
                ("x-ratelimit-remaining-requests", "50"),
                ("x-ratelimit-remaining-tokens", "50000"),
            ],
            win(None, Some(50), None, Per::Unknown),
            win(None, Some(50_000), None, Per::Minute),
            None,
        ),
        // https://learn.microsoft.com/en-us/azure/ai-foundry/openai/how-to/quota
        // (429s carry retry-after-ms and retry-after; retry-after-ms wins)
        (
            &[
                ("x-ratelimit-remaining-requests", "12"),
                ("x-ratelimit-remaining-tokens", "0"),
                ("x-ratelimit-reset-tokens", "6"),
                ("retry-after-ms", "5800"),
                ("retry-after", "6"),
            ],
            win(None, Some(12), None, Per::Unknown),
            win(None, Some(0), at(6), Per::Minute),
            Some(Duration::from_millis(5_800)),
        ),
        // The `x-rate-limit-reset-tokens` spelling, with limits.
        (
            &[
                ("x-ratelimit-limit-requests", "20"),
                ("x-ratelimit-limit-tokens", "20000"),
                ("x-ratelimit-remaining-tokens", "0"),
                ("x-rate-limit-reset-tokens", "37"),
                ("retry-after", "37"),
            ],
            win(Some(20), None, None, Per::Unknown),
            win(Some(20_000), Some(0), at(37), Per::Minute),
            Some(Duration::from_secs(37)),
        ),
        // https://learn.microsoft.com/en-us/answers/questions/5625878/azure-openai-responses-api-x-ratelimit-headers-val
        // (-1 means unknown; a zero reset says nothing either: it is not "full again now")
        (
            &[
                ("x-ratelimit-limit-tokens", "-1"),
                ("x-ratelimit-remaining-tokens", "-1"),
                ("x-ratelimit-reset-tokens", "-1"),
            ],
            None,
            None,
            None,
        ),
        (
            &[
                ("x-ratelimit-limit-tokens", "-1"),
                ("x-ratelimit-remaining-tokens", "-1"),
                ("x-ratelimit-reset-tokens", "0"),
            ],
            None,
            None,
            None,
        ),
        // A zero reset on an answer that leaves tokens: the remaining count, no reset.
        (
            &[
                ("x-ratelimit-limit-tokens", "30000"),
                ("x-ratelimit-remaining-tokens", "29000"),
                ("x-ratelimit-reset-tokens", "0"),
            ],
            None,
            win(Some(30_000), Some(29_000), None, Per::Minute),
            None,
        ),
    ];
    for (pairs, requests, tokens, retry) in cases {
        let report = parse(HeaderDialect::Azure, pairs, now);
        assert_eq!(report.requests, *requests, "requests of {pairs:?}");
        assert_eq!(report.tokens, *tokens, "tokens of {pairs:?}");
        assert_eq!(report.retry_after, *retry, "retry_after of {pairs:?}");
    }
}

#[test]
fn anthropic_resets_are_rfc3339_instants_and_past_ones_clamp_to_now() {
    // A recorded api.anthropic.com response (`date: Thu, 21 Aug 2025 12:41:00 GMT`), in the
    // format of https://docs.anthropic.com/en/api/rate-limits#response-headers; three resets
    // are one second before the response date.
    let now = Now {
        instant: Instant::now(),
        wall: SystemTime::UNIX_EPOCH + Duration::from_secs(1_755_780_060),
    };
    let report = parse(
        HeaderDialect::Anthropic,
        &[
            ("anthropic-ratelimit-input-tokens-limit", "80000"),
            ("anthropic-ratelimit-input-tokens-remaining", "80000"),
            (
                "anthropic-ratelimit-input-tokens-reset",
                "2025-08-21T12:40:59Z",
            ),
            ("anthropic-ratelimit-output-tokens-limit", "16000"),
            ("anthropic-ratelimit-output-tokens-remaining", "16000"),
            (
                "anthropic-ratelimit-output-tokens-reset",
                "2025-08-21T12:41:00Z",
            ),
            ("anthropic-ratelimit-requests-limit", "1000"),
            ("anthropic-ratelimit-requests-remaining", "999"),
            ("anthropic-ratelimit-requests-reset", "2025-08-21T12:40:59Z"),
            ("anthropic-ratelimit-tokens-limit", "96000"),
            ("anthropic-ratelimit-tokens-remaining", "96000"),
            (
                "anthropic-ratelimit-tokens-reset",
                "2025-08-21T12:41:30.5+00:00",
            ),
        ],
        now,
    );
    let clamped = Some(now.instant);
    assert_eq!(
        report.requests,
        win(Some(1_000), Some(999), clamped, Per::Minute)
    );
    assert_eq!(
        report.input_tokens,
        win(Some(80_000), Some(80_000), clamped, Per::Minute)
    );
    assert_eq!(
        report.output_tokens,
        win(Some(16_000), Some(16_000), clamped, Per::Minute)
    );
    assert_eq!(
        report.tokens,
        win(
            Some(96_000),
            Some(96_000),
            Some(now.instant + Duration::from_millis(30_500)),
            Per::Minute
        )
    );
}

#[test]
fn anthropic_exhausted_window_with_retry_after() {
    let now = fixed_now();
    // https://docs.anthropic.com/en/api/rate-limits#response-headers: a 429 carries
    // `retry-after` seconds next to the reset instants (fixed now: 2024-06-01T12:00:00Z).
    let report = parse(
        HeaderDialect::Anthropic,
        &[
            ("anthropic-ratelimit-requests-limit", "50"),
            ("anthropic-ratelimit-requests-remaining", "0"),
            ("anthropic-ratelimit-requests-reset", "2024-06-01T12:00:20Z"),
            (
                "anthropic-ratelimit-output-tokens-reset",
                "2024-06-01T14:00:20+02:00",
            ),
            ("retry-after", "20"),
            ("x-should-retry", "true"),
        ],
        now,
    );
    let in_20s = Some(now.instant + Duration::from_secs(20));
    assert_eq!(report.requests, win(Some(50), Some(0), in_20s, Per::Minute));
    assert_eq!(report.output_tokens, win(None, None, in_20s, Per::Minute));
    assert_eq!(report.exhausted_until(), in_20s);
    assert_eq!(report.retry_after, Some(Duration::from_secs(20)));
    assert_eq!(report.should_retry, Some(true));
}

#[test]
fn generic_headers_tell_epoch_millis_epoch_seconds_and_deltas_apart() {
    let now = fixed_now();
    let in_30s = Some(now.instant + Duration::from_secs(30));
    let epoch_s = "1717243230"; // fixed now + 30 s
    let epoch_ms = "1717243230000";
    let cases: &[(Pairs, Option<Window>)] = &[
        // https://openrouter.ai/docs/api-reference/limits (free-model 429s carry
        // X-RateLimit-Limit / -Remaining / -Reset, the reset in epoch milliseconds)
        (
            &[
                ("X-RateLimit-Limit", "20"),
                ("X-RateLimit-Remaining", "0"),
                ("X-RateLimit-Reset", epoch_ms),
            ],
            win(Some(20), Some(0), in_30s, Per::Unknown),
        ),
        // https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api
        // (x-ratelimit-reset in UTC epoch seconds)
        (
            &[
                ("x-ratelimit-limit", "60"),
                ("x-ratelimit-remaining", "56"),
                ("x-ratelimit-reset", epoch_s),
            ],
            win(Some(60), Some(56), in_30s, Per::Unknown),
        ),
        // Delta seconds.
        (
            &[("x-ratelimit-remaining", "3"), ("x-ratelimit-reset", "30")],
            win(None, Some(3), in_30s, Per::Unknown),
        ),
        // https://developer.whoop.com/docs/developing/rate-limiting (windowed limit list)
        (
            &[
                (
                    "X-RateLimit-Limit",
                    "100, 100;window=60, 10000;window=86400",
                ),
                ("X-RateLimit-Remaining", "98"),
                ("X-RateLimit-Reset", "3"),
            ],
            win(
                Some(100),
                Some(98),
                Some(now.instant + Duration::from_secs(3)),
                Per::Unknown,
            ),
        ),
        (
            &[
                ("X-RateLimit-Limit", "100;window=60"),
                ("X-RateLimit-Remaining", "98"),
            ],
            win(Some(100), Some(98), None, Per::Minute),
        ),
        // Malformed fields are dropped one by one.
        (
            &[
                ("X-RateLimit-Limit", "-20"),
                ("X-RateLimit-Remaining", "NaN"),
                ("X-RateLimit-Reset", epoch_ms),
            ],
            win(None, None, in_30s, Per::Unknown),
        ),
        (
            &[
                ("X-RateLimit-Limit", "1e400"),
                ("X-RateLimit-Remaining", "99999999999999999999999"),
                ("X-RateLimit-Reset", "inf"),
            ],
            None,
        ),
    ];
    for (pairs, want) in cases {
        let report = parse(HeaderDialect::Generic, pairs, now);
        assert_eq!(report.requests, *want, "headers {pairs:?}");
        assert_eq!(report.tokens, None);
    }
}

#[test]
fn mistral_counters_are_read_per_minute_in_every_dialect() {
    let now = fixed_now();
    // Recorded from api.mistral.ai (github.com/mistralai/client-ts/issues/169): per-minute
    // counters named by their window, no reset, a per-request token cost beside them.
    let mistral: &[(&str, &str)] = &[
        ("x-ratelimit-limit-tokens-minute", "5000000"),
        ("x-ratelimit-remaining-tokens-minute", "4999911"),
        ("x-ratelimit-tokens-query-cost", "52"),
        ("x-ratelimit-limit-req-minute", "720"),
        ("x-ratelimit-remaining-req-minute", "717"),
    ];
    for dialect in ALL_DIALECTS {
        let report = parse(dialect, mistral, now);
        assert_eq!(
            report.requests,
            win(Some(720), Some(717), None, Per::Minute),
            "{dialect:?}"
        );
        assert_eq!(
            report.tokens,
            win(Some(5_000_000), Some(4_999_911), None, Per::Minute),
            "{dialect:?}"
        );
        assert_eq!(report.retry_after, None, "{dialect:?}");
    }
    // A dialect's own headers win: OpenAI's names beside Mistral's.
    let both: Vec<(&str, &str)> = mistral
        .iter()
        .copied()
        .chain([("x-ratelimit-remaining-requests", "3")])
        .collect();
    let report = parse(HeaderDialect::OpenAi, &both, now);
    assert_eq!(report.requests, win(None, Some(3), None, Per::Minute));
    for name in [
        "x-ratelimit-limit-req-minute",
        "x-ratelimit-remaining-tokens-minute",
    ] {
        assert!(RATE_LIMIT_HEADERS.contains(&name), "{name}");
    }
}

/// Cohere's trial key headers, as recorded from api.cohere.com on a chat call (the OpenAI
/// compatibility API sends them too): the trial's calls per minute (docs.cohere.com/v2/docs/
/// rate-limits: trial Chat "20 req / min") and what is left; the monthly cap beside them is
/// not a window here.
#[test]
fn cohere_trial_counters_are_the_requests_per_minute_in_every_dialect() {
    let now = fixed_now();
    let cohere: &[(&str, &str)] = &[
        ("x-endpoint-monthly-call-limit", "1000"),
        ("x-trial-endpoint-call-limit", "20"),
        ("x-trial-endpoint-call-remaining", "19"),
    ];
    for dialect in ALL_DIALECTS {
        let report = parse(dialect, cohere, now);
        assert_eq!(
            report.requests,
            win(Some(20), Some(19), None, Per::Minute),
            "{dialect:?}"
        );
        assert_eq!(report.tokens, None, "{dialect:?}");
    }
    for name in [
        "x-trial-endpoint-call-limit",
        "x-trial-endpoint-call-remaining",
    ] {
        assert!(RATE_LIMIT_HEADERS.contains(&name), "{name}");
    }
}

#[test]
fn every_dialect_falls_back_to_generic_then_ietf_fields() {
    let now = fixed_now();
    let in_30s = Some(now.instant + Duration::from_secs(30));
    let ietf: &[(&str, &str)] = &[
        ("RateLimit-Policy", "\"default\";q=100;w=60"),
        ("RateLimit", "\"default\";r=50;t=30"),
    ];
    let generic: &[(&str, &str)] = &[("X-RateLimit-Limit", "20"), ("X-RateLimit-Remaining", "7")];
    for dialect in ALL_DIALECTS {
        assert_eq!(
            parse(dialect, ietf, now).requests,
            win(Some(100), Some(50), in_30s, Per::Minute),
            "{dialect:?} with IETF fields"
        );
        assert_eq!(
            parse(dialect, generic, now).requests,
            win(Some(20), Some(7), None, Per::Unknown),
            "{dialect:?} with X-RateLimit-*"
        );
        // Generic forms win over the IETF fields when both are present.
        let both: Vec<(&str, &str)> = generic.iter().chain(ietf).copied().collect();
        assert_eq!(
            parse(dialect, &both, now).requests,
            win(Some(20), Some(7), None, Per::Unknown),
            "{dialect:?} with both"
        );
    }
}

#[test]
fn a_dialects_own_headers_win_over_the_fallbacks() {
    let now = fixed_now();
    let fallbacks = [
        ("X-RateLimit-Limit", "20"),
        ("X-RateLimit-Remaining", "7"),
        ("RateLimit", "\"default\";r=50;t=30"),
    ];
    let own: &[(HeaderDialect, (&str, &str))] = &[
        (
            HeaderDialect::OpenAi,
            ("x-ratelimit-remaining-requests", "1"),
        ),
        (HeaderDialect::Groq, ("x-ratelimit-remaining-requests", "1")),
        (
            HeaderDialect::Azure,
            ("x-ratelimit-remaining-requests", "1"),
        ),
        (
            HeaderDialect::Anthropic,
            ("anthropic-ratelimit-requests-remaining", "1"),
        ),
    ];
    for (dialect, pair) in own {
        let mut pairs = fallbacks.to_vec();
        pairs.push(*pair);
        let requests = parse(*dialect, &pairs, now).requests;
        assert_eq!(requests.and_then(|w| w.remaining), Some(1), "{dialect:?}");
    }
}

#[test]
fn no_headers_report_nothing_in_every_dialect() {
    for dialect in ALL_DIALECTS {
        let report = parse(dialect, &[], fixed_now());
        assert!(report.is_empty(), "{dialect:?}: {report:?}");
    }
}

#[test]
fn malformed_values_are_ignored_field_by_field_in_every_dialect() {
    let now = fixed_now();
    let bad = [
        "-1",
        "NaN",
        "inf",
        "1e400",
        "garbage",
        "",
        "99999999999999999999999",
        "1.5",
    ];
    let names = [
        "x-ratelimit-limit-requests",
        "x-ratelimit-remaining-tokens",
        "anthropic-ratelimit-tokens-limit",
        "anthropic-ratelimit-requests-remaining",
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
    ];
    for dialect in ALL_DIALECTS {
        for value in bad {
            let pairs: Vec<(&str, &str)> = names.iter().map(|n| (*n, value)).collect();
            let report = parse(dialect, &pairs, now);
            assert!(report.is_empty(), "{dialect:?} with {value:?}: {report:?}");
        }
    }
    // One bad field does not spoil its neighbours.
    let report = parse(
        HeaderDialect::OpenAi,
        &[
            ("x-ratelimit-limit-requests", "abc"),
            ("x-ratelimit-remaining-requests", "59"),
            ("x-ratelimit-reset-requests", "-1s"),
        ],
        now,
    );
    assert_eq!(report.requests, win(None, Some(59), None, Per::Minute));
}

#[test]
fn non_utf8_header_values_are_ignored() {
    let now = fixed_now();
    let mut map = HeaderMap::new();
    map.insert(
        "x-ratelimit-remaining-requests",
        HeaderValue::from_bytes(b"5\xff").expect("opaque bytes"),
    );
    map.insert("x-ratelimit-limit-requests", HeaderValue::from_static("60"));
    let report = parse_limit_headers(HeaderDialect::OpenAi, &map, now);
    assert_eq!(report.requests, win(Some(60), None, None, Per::Minute));
}

/// Behind a LiteLLM proxy: its own headers bind, and what it leaves out is read from the
/// upstream's, which it forwards under `llm_provider-` (the proxy's 429 carries only
/// `llm_provider-retry-after`; its 200s state its own limit and remaining).
#[test]
fn a_litellm_gateway_s_forwarded_upstream_headers_fill_what_it_leaves_out() {
    let now = fixed_now();
    let refused = parse(
        HeaderDialect::OpenAi,
        &[
            ("llm_provider-retry-after", "17"),
            ("x-litellm-version", "1.80.0"),
        ],
        now,
    );
    assert_eq!(refused.retry_after, Some(Duration::from_secs(17)));
    let answered = parse(
        HeaderDialect::OpenAi,
        &[
            ("x-ratelimit-limit-requests", "60"),
            ("x-ratelimit-remaining-requests", "41"),
            ("llm_provider-x-ratelimit-limit-requests", "10000"),
            ("llm_provider-x-ratelimit-remaining-requests", "9999"),
            ("llm_provider-x-ratelimit-limit-tokens", "2000000"),
            ("llm_provider-x-ratelimit-remaining-tokens", "1999000"),
            ("llm_provider-x-ratelimit-reset-tokens", "30ms"),
        ],
        now,
    );
    // The gateway's request window, not the upstream's.
    assert_eq!(
        answered.requests,
        win(Some(60), Some(41), None, Per::Minute)
    );
    // The token window it does not state: the upstream's.
    let tokens = answered.tokens.unwrap();
    assert_eq!(
        (tokens.limit, tokens.remaining),
        (Some(2_000_000), Some(1_999_000))
    );
    // Without the gateway's prefix nothing changes.
    let plain = parse(HeaderDialect::OpenAi, &[("retry-after", "3")], now);
    assert_eq!(plain.retry_after, Some(Duration::from_secs(3)));
    assert_eq!(
        parse(HeaderDialect::OpenAi, &[("x-other", "1")], now),
        LimitReport::default()
    );
}
