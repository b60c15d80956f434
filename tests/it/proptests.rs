//! Property tests of every parser that reads the outside world: rate-limit headers of every
//! dialect, `Retry-After`, Go durations, delays in messages, the SSE parser, each adapter's
//! response, error and stream parsers, and `providers.toml`. None may panic on any input, and
//! each keeps its real invariants.
//!
//! CI runs them with a fixed seed in seconds. For a long run: `PROPTEST_CASES=100000
//! PROPTEST_RNG_SEED=7 cargo test --release --test proptests` (see RELIABILITY.md).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use llm_failover::clock::Now;
use llm_failover::config::Config;
use llm_failover::error::MAX_MESSAGE_LEN;
use llm_failover::http::RawResponse;
use llm_failover::provider::anthropic::Anthropic;
use llm_failover::provider::azure::Azure;
use llm_failover::provider::deepgram::Deepgram;
use llm_failover::provider::gemini::Gemini;
use llm_failover::provider::openai::OpenAi;
use llm_failover::provider::{Provider, SseEvent, SseParser};
use llm_failover::ratelimit::{
    HeaderDialect, LimitReport, MAX_SANE_RETRY_AFTER, delay_in_message, go_duration,
    parse_limit_headers, retry_after, should_retry,
};
use llm_failover::{Error, ErrorKind, ProviderId};
use proptest::prelude::*;
use proptest::sample::{Index, select};
use proptest::test_runner::RngSeed;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

/// Cases per property unless `PROPTEST_CASES` says otherwise; the seed is fixed unless
/// `PROPTEST_RNG_SEED` says otherwise, so CI sees the same inputs on every run.
fn config(cases: u32) -> ProptestConfig {
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    ProptestConfig {
        cases: env("PROPTEST_CASES").map_or(cases, |n| n as u32),
        rng_seed: RngSeed::Fixed(env("PROPTEST_RNG_SEED").unwrap_or(0x5eed_f022)),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// 2024-06-01T12:00:00Z, a Saturday.
const WALL_SECS: u64 = 1_717_243_200;

fn now() -> Now {
    Now {
        instant: tokio::time::Instant::now(),
        wall: SystemTime::UNIX_EPOCH + Duration::from_secs(WALL_SECS),
    }
}

const MAX_SECS: u64 = MAX_SANE_RETRY_AFTER.as_secs();

// ---- strategies ---------------------------------------------------------------------------

/// Every header name a parser reads: the rate-limit headers and a request id.
static HEADER_NAMES: std::sync::LazyLock<Vec<&'static str>> = std::sync::LazyLock::new(|| {
    let mut names = llm_failover::ratelimit::RATE_LIMIT_HEADERS.to_vec();
    names.push("x-request-id");
    names
});

const DIALECTS: [HeaderDialect; 5] = [
    HeaderDialect::OpenAi,
    HeaderDialect::Groq,
    HeaderDialect::Azure,
    HeaderDialect::Anthropic,
    HeaderDialect::Generic,
];

/// An HTTP date `offset` seconds from the fixed now (IMF-fixdate).
fn http_date(offset: i64) -> String {
    let wall = if offset >= 0 {
        SystemTime::UNIX_EPOCH + Duration::from_secs(WALL_SECS + offset.unsigned_abs())
    } else {
        SystemTime::UNIX_EPOCH
            + Duration::from_secs(WALL_SECS.saturating_sub(offset.unsigned_abs()))
    };
    httpdate::fmt_http_date(wall)
}

/// An RFC 3339 instant `offset` seconds from the fixed now.
fn rfc3339(offset: i64) -> String {
    let at =
        time::OffsetDateTime::from_unix_timestamp(WALL_SECS as i64 + offset).expect("in range");
    at.format(&time::format_description::well_known::Rfc3339)
        .expect("formats")
}

/// Header values shaped like every dialect's, and plain garbage.
fn header_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..40),
        "[0-9]{1,14}(\\.[0-9]{1,4})?".prop_map(String::into_bytes),
        "-?[0-9]{1,3}".prop_map(String::into_bytes),
        "([0-9]{1,5}(\\.[0-9]{1,3})?(h|m|s|ms|us|µs|ns)){1,3}".prop_map(String::into_bytes),
        (-1_000_000i64..100_000_000).prop_map(|o| http_date(o).into_bytes()),
        (-1_000_000i64..100_000_000).prop_map(|o| rfc3339(o).into_bytes()),
        "(\"[a-z]{1,5}\";(q|r|t|w)=[0-9]{1,6}(;(q|r|t|w)=[0-9]{1,6}){0,3},?){1,3}"
            .prop_map(String::into_bytes),
        "(limit|remaining|reset)=[0-9]{1,5}(, (limit|remaining|reset)=[0-9]{1,5}){0,2}"
            .prop_map(String::into_bytes),
        "[0-9]{1,6}(;(w|window)=[0-9]{1,6})?(, [0-9]{1,6};w=[0-9]{1,6})?"
            .prop_map(String::into_bytes),
        select(vec![
            "true", "false", " TRUE ", "NaN", "inf", "1e400", "", "  "
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        ".{0,24}".prop_map(String::into_bytes),
    ]
}

fn header_map() -> impl Strategy<Value = HeaderMap> {
    proptest::collection::vec((0..HEADER_NAMES.len(), header_value()), 0..12).prop_map(|pairs| {
        let mut map = HeaderMap::new();
        for (i, value) in pairs {
            if let Ok(value) = HeaderValue::from_bytes(&value) {
                map.append(HeaderName::from_static(HEADER_NAMES[i]), value);
            }
        }
        map
    })
}

fn check_delay(d: Duration) -> Result<(), TestCaseError> {
    prop_assert!(!d.is_zero(), "a zero delay");
    prop_assert!(d <= MAX_SANE_RETRY_AFTER, "an absurd delay: {:?}", d);
    Ok(())
}

fn check_report(report: &LimitReport, now: Now) -> Result<(), TestCaseError> {
    if let Some(broken) = report.invariant_violation(now.instant) {
        prop_assert!(false, "{}: {:?}", broken, report);
    }
    Ok(())
}

/// A Go `time.Duration.String()` of `d`: `0s`, `1.5ms`, `250µs`, `72h3m0.5s`.
fn go_format(d: Duration) -> String {
    fn fraction(n: u128, unit: u128) -> String {
        let (int, rem) = (n / unit, n % unit);
        if rem == 0 {
            return int.to_string();
        }
        let width = unit.ilog10() as usize;
        let digits = format!("{rem:0width$}");
        format!("{int}.{}", digits.trim_end_matches('0'))
    }
    const SEC: u128 = 1_000_000_000;
    let n = d.as_nanos();
    match n {
        0 => "0s".to_owned(),
        1..=999 => format!("{n}ns"),
        1_000..=999_999 => format!("{}µs", fraction(n, 1_000)),
        1_000_000..=999_999_999 => format!("{}ms", fraction(n, 1_000_000)),
        _ => {
            let (h, m) = (n / (3_600 * SEC), n / (60 * SEC) % 60);
            let mut out = String::new();
            if h > 0 {
                out.push_str(&format!("{h}h"));
            }
            if h > 0 || m > 0 {
                out.push_str(&format!("{m}m"));
            }
            out.push_str(&format!("{}s", fraction(n % (60 * SEC), SEC)));
            out
        }
    }
}

/// Text built from pieces that steer toward the delay parsers' interesting paths.
fn delay_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        select(vec![
            "0",
            "1",
            "9",
            "60",
            "86400",
            "2592001",
            ".",
            "-",
            "+",
            "e",
            "e400",
            "s",
            "m",
            "h",
            "ms",
            "us",
            "µ",
            "μ",
            " ",
            "\t",
            "NaN",
            "inf",
            "try again in ",
            "retry after ",
            "Retry in ",
            "TRY AGAIN AFTER ",
            " seconds",
            " minutes",
            " days",
            "sec",
            "é",
            "日",
        ])
        .prop_map(str::to_owned),
        any::<char>().prop_map(String::from),
        "[0-9]{1,25}".prop_map(|s| s),
    ];
    proptest::collection::vec(piece, 0..12).prop_map(|v| v.concat())
}

// ---- rate-limit headers, Retry-After, durations, delays -----------------------------------

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn rate_limit_headers_of_any_dialect_keep_their_invariants(
        dialect in 0..DIALECTS.len(),
        headers in header_map(),
    ) {
        let now = now();
        let report = parse_limit_headers(DIALECTS[dialect], &headers, now);
        check_report(&report, now)?;
        prop_assert_eq!(report.retry_after, retry_after(&headers, now));
        prop_assert_eq!(report.should_retry, should_retry(&headers));
    }
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn retry_after_is_never_zero_past_or_absurd(
        ms in any::<bool>(),
        value in header_value(),
    ) {
        let Ok(value) = HeaderValue::from_bytes(&value) else { return Ok(()) };
        let mut headers = HeaderMap::new();
        headers.insert(if ms { "retry-after-ms" } else { "retry-after" }, value);
        if let Some(d) = retry_after(&headers, now()) {
            check_delay(d)?;
        }
    }

    #[test]
    fn retry_after_reads_delay_seconds_and_dates_exactly(
        secs in 0..=MAX_SECS + 1,
        offset in -100_000_000i64..=MAX_SECS as i64 + 1,
    ) {
        let read = |name: &'static str, value: String| {
            let mut headers = HeaderMap::new();
            headers.insert(name, HeaderValue::from_str(&value).unwrap());
            retry_after(&headers, now())
        };
        let sane = |s: u64| (s > 0 && s <= MAX_SECS).then(|| Duration::from_secs(s));
        prop_assert_eq!(read("retry-after", secs.to_string()), sane(secs));
        prop_assert_eq!(
            read("retry-after-ms", (secs * 1000).to_string()),
            sane(secs)
        );
        // A date at or before now is no delay; one after now is exactly its distance.
        let want = u64::try_from(offset).ok().and_then(sane);
        prop_assert_eq!(read("retry-after", http_date(offset)), want);
    }

    #[test]
    fn a_go_duration_formatted_from_a_duration_parses_back_to_it(
        nanos in 0..=i64::MAX as u64,
        scale in 0u32..4,
    ) {
        // Go durations are int64 nanoseconds; `scale` also gives short ones their share.
        let d = Duration::from_nanos(nanos / 1_000u64.pow(scale * 2).max(1));
        let text = go_format(d);
        prop_assert_eq!(go_duration(&text), Some(d), "{}", text);
        prop_assert_eq!(go_duration(&format!("\"{text}\"")), Some(d));
    }

    #[test]
    fn go_durations_and_message_delays_never_panic_nor_state_absurd_delays(text in delay_text()) {
        if let Some(d) = go_duration(&text) {
            let plain = format!("{}.{:09}s", d.as_secs(), d.subsec_nanos());
            prop_assert_eq!(go_duration(&plain), Some(d));
        }
        if let Some(d) = delay_in_message(&text) {
            check_delay(d)?;
        }
    }

    #[test]
    fn a_delay_stated_in_a_message_is_found_exactly(
        millis in 1..=MAX_SECS * 1000 + 1000,
        template in select(vec![
            "Rate limit reached for gpt-4o on tokens per min (TPM). Please try again in {}. Visit https://platform.openai.com/account/rate-limits to learn more.",
            "You exceeded your current quota. Please retry in {}.",
            "retry after {}",
        ]),
        words in any::<bool>(),
    ) {
        let d = Duration::from_millis(millis);
        let stated = if words && millis % 1000 == 0 {
            format!("{} seconds", millis / 1000)
        } else {
            go_format(d)
        };
        let text = template.replace("{}", &stated);
        let want = (d <= MAX_SANE_RETRY_AFTER).then_some(d);
        prop_assert_eq!(delay_in_message(&text), want, "{}", text);
    }
}

// ---- server-sent events -------------------------------------------------------------------

#[derive(Clone, Debug)]
struct GenEvent {
    comment: Option<String>,
    event: Option<String>,
    id: Option<String>,
    data: Vec<String>,
}

fn gen_event() -> impl Strategy<Value = GenEvent> {
    (
        proptest::option::of("[^\r\n]{0,12}"),
        proptest::option::of("[a-z_]{1,16}"),
        proptest::option::of("[a-z0-9]{1,8}"),
        proptest::collection::vec("[^\r\n]{0,40}", 1..4),
    )
        .prop_map(|(comment, event, id, data)| GenEvent {
            comment,
            event,
            id,
            data,
        })
}

/// Writes `events` with line ending `eol`; returns the bytes and the events a parser must
/// see.
fn write_stream(events: &[GenEvent], eol: &str) -> (Vec<u8>, Vec<SseEvent>) {
    let mut text = String::new();
    let mut want = Vec::new();
    for e in events {
        if let Some(c) = &e.comment {
            text.push_str(&format!(":{c}{eol}"));
        }
        if let Some(name) = &e.event {
            text.push_str(&format!("event: {name}{eol}"));
        }
        if let Some(id) = &e.id {
            text.push_str(&format!("id: {id}{eol}"));
        }
        for line in &e.data {
            text.push_str(&format!("data: {line}{eol}"));
        }
        text.push_str(eol);
        want.push(SseEvent {
            event: e.event.clone().unwrap_or_default(),
            data: e.data.join("\n"),
            id: e.id.clone(),
        });
    }
    (text.into_bytes(), want)
}

/// Feeds `bytes` cut at `cuts` (indexes into it); `Err` at the first error.
fn feed_split(bytes: &[u8], cuts: &[Index], cap: usize) -> Result<Vec<SseEvent>, String> {
    let mut at: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
    at.push(0);
    at.push(bytes.len());
    at.sort_unstable();
    let mut parser = SseParser::with_max_line(cap);
    let mut out = Vec::new();
    for w in at.windows(2) {
        out.extend(parser.feed(&bytes[w[0]..w[1]]).map_err(|e| e.to_string())?);
    }
    Ok(out)
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn sse_parsing_yields_the_events_written_however_the_bytes_are_split(
        events in proptest::collection::vec(gen_event(), 0..8),
        eol in select(vec!["\n", "\r\n", "\r"]),
        cuts in proptest::collection::vec(any::<Index>(), 0..24),
    ) {
        let (bytes, want) = write_stream(&events, eol);
        prop_assert_eq!(feed_split(&bytes, &[], 1 << 20), Ok(want.clone()));
        prop_assert_eq!(feed_split(&bytes, &cuts, 1 << 20), Ok(want));
    }

    #[test]
    fn sse_parsing_of_any_bytes_is_split_invariant(
        bytes in proptest::collection::vec(any::<u8>(), 0..200).prop_map(|mut v| {
            // Line ends and colons where the random bytes are 0..=2: their share up to 1 in 85.
            for b in &mut v {
                if let Some(&c) = b"\n\r:".get(usize::from(*b)) {
                    *b = c;
                }
            }
            v
        }),
        cuts in proptest::collection::vec(any::<Index>(), 0..24),
        cap in 1usize..64,
    ) {
        let whole = feed_split(&bytes, &[], cap);
        let split = feed_split(&bytes, &cuts, cap);
        prop_assert_eq!(whole.is_ok(), split.is_ok());
        if whole.is_ok() {
            prop_assert_eq!(whole, split);
        }
    }
}

// ---- adapters -----------------------------------------------------------------------------

fn adapters() -> [Arc<dyn Provider>; 5] {
    let url = |s: &str| s.parse().unwrap();
    [
        Arc::new(
            OpenAi::new(ProviderId::new("openai"), url("http://127.0.0.1:9/v1"))
                .with_chat_model("gpt-4o-mini")
                .with_transcription_model("whisper-1"),
        ),
        Arc::new(
            Azure::new(
                ProviderId::new("azure"),
                url("http://127.0.0.1:9"),
                "2024-10-21",
            )
            .with_chat_model("chat"),
        ),
        Arc::new(Anthropic::new(
            ProviderId::new("anthropic"),
            url("http://127.0.0.1:9"),
        )),
        Arc::new(Gemini::new(
            ProviderId::new("gemini"),
            url("http://127.0.0.1:9"),
        )),
        Arc::new(Deepgram::new(
            ProviderId::new("deepgram"),
            url("http://127.0.0.1:9"),
        )),
    ]
}

/// Field names and string values of the five providers' formats.
const JSON_WORDS: [&str; 72] = [
    "id",
    "object",
    "model",
    "choices",
    "index",
    "message",
    "role",
    "assistant",
    "content",
    "delta",
    "tool_calls",
    "finish_reason",
    "stop",
    "length",
    "content_filter",
    "usage",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "error",
    "type",
    "code",
    "param",
    "insufficient_quota",
    "rate_limit_exceeded",
    "context_length_exceeded",
    "message_start",
    "content_block_delta",
    "text_delta",
    "message_delta",
    "message_stop",
    "stop_reason",
    "input_tokens",
    "output_tokens",
    "overloaded_error",
    "candidates",
    "parts",
    "text",
    "finishReason",
    "STOP",
    "SAFETY",
    "promptFeedback",
    "blockReason",
    "usageMetadata",
    "status",
    "RESOURCE_EXHAUSTED",
    "details",
    "@type",
    "type.googleapis.com/google.rpc.RetryInfo",
    "retryDelay",
    "metadata",
    "headers",
    "X-RateLimit-Limit",
    "X-RateLimit-Remaining",
    "X-RateLimit-Reset",
    "Retry-After",
    "retry-after-ms",
    "capacity_exceeded",
    "Rate limit exceeded: free-models-per-day. ",
    "results",
    "channels",
    "alternatives",
    "transcript",
    "words",
    "start",
    "end",
    "duration",
    "segments",
    "language",
    "err_code",
    "err_msg",
    "request_id",
];

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        select(JSON_WORDS.to_vec()).prop_map(Value::from),
        "[0-9]{1,4}(\\.[0-9]{1,3})?s".prop_map(Value::from),
        ".{0,16}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::vec((select(JSON_WORDS.to_vec()), inner), 0..6).prop_map(|kv| {
                Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
            }),
        ]
    })
}

/// A JSON body, sometimes cut short or replaced by a non-JSON page.
fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => json().prop_map(|v| v.to_string().into_bytes()),
        2 => (json(), any::<Index>()).prop_map(|(v, cut)| {
            let s = v.to_string().into_bytes();
            s[..cut.index(s.len() + 1)].to_vec()
        }),
        1 => proptest::collection::vec(any::<u8>(), 0..64),
        1 => Just(b"<html><body>502 Bad Gateway</body></html>".to_vec()),
    ]
}

fn check_error(err: &Error) -> Result<(), TestCaseError> {
    let cap = MAX_MESSAGE_LEN + '…'.len_utf8();
    prop_assert!(
        !err.message().trim().is_empty(),
        "an empty message: {:?}",
        err
    );
    prop_assert!(err.message().len() <= cap, "a message over the cap");
    if let Some(d) = err.retry_after() {
        check_delay(d)?;
    }
    let shown = format!("{err} {err:?}");
    prop_assert!(!shown.is_empty());
    Ok(())
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn adapter_response_and_error_parsers_never_panic_and_say_what_went_wrong(
        adapter in 0..5usize,
        status in prop_oneof![Just(200u16), 200u16..300, 400u16..600, 100u16..600],
        transcription in any::<bool>(),
        content_type in select(vec!["application/json", "text/plain", "text/html", ""]),
        body in body(),
    ) {
        let adapter = adapters()[adapter].clone();
        let mut headers = HeaderMap::new();
        if !content_type.is_empty() {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        }
        let raw = RawResponse::new(status, headers, body);
        if !raw.is_success() {
            // The limits an error body carries keep the invariants of header-stated ones.
            check_report(&adapter.error_limit_report(&raw, now()), now())?;
        }
        let result = match (raw.is_success(), transcription) {
            (true, true) => adapter.transcription_response(raw, "m").map(drop),
            (true, false) => adapter.chat_response(raw, "m").map(drop),
            (false, _) => Err(adapter.error(&raw, now())),
        };
        if let Err(e) = result {
            check_error(&e)?;
        }
    }

}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn stream_decoders_never_panic_on_any_event(
        adapter in 0..5usize,
        events in proptest::collection::vec(
            (
                select(vec!["", "message_start", "content_block_delta", "message_delta",
                            "message_stop", "error", "ping"]),
                prop_oneof![
                    8 => json().prop_map(|v| v.to_string()),
                    1 => Just("[DONE]".to_owned()),
                    1 => ".{0,16}",
                ],
            ),
            0..6,
        ),
    ) {
        let mut decoder = adapters()[adapter].stream_decoder("m");
        for (event, data) in events {
            if decoder.is_done() {
                break;
            }
            let ev = SseEvent { event: event.to_owned(), data, id: None };
            if let Err(e) = decoder.decode(&ev) {
                check_error(&e)?;
                break;
            }
        }
    }
}

// ---- providers.toml -----------------------------------------------------------------------

/// `GOOD` with one edit: a line deleted, duplicated or replaced, or a token spliced in.
fn mangled_config() -> impl Strategy<Value = String> {
    let token = select(vec![
        "\"",
        "=",
        "[",
        "]",
        "{",
        "}",
        ",",
        "\n",
        "-1",
        "0",
        "1e400",
        "nan",
        "true",
        "\"\"",
        "[providers.x]",
        "kind = \"gpt\"",
        "api_key = \"sk-abc\"",
        "base_url = \"http://h\"",
        "rpm = 0",
        "chat = []",
        "timeout_ms = -5",
        "allow_http = 1",
        "x = 1",
    ]);
    let lines: Vec<&'static str> = crate::catalogue::GOOD.lines().collect();
    let n = lines.len();
    (0..n, 0u8..4, token, any::<Index>()).prop_map(move |(line, op, token, at)| {
        let mut l: Vec<String> = lines.iter().map(|s| (*s).to_owned()).collect();
        match op {
            0 => {
                l.remove(line);
            }
            1 => l.insert(line, l[line].clone()),
            2 => l[line] = token.to_owned(),
            _ => {
                let s = &l[line];
                let mut cut = at.index(s.len() + 1);
                while !s.is_char_boundary(cut) {
                    cut -= 1;
                }
                l[line] = format!("{}{token}{}", &s[..cut], &s[cut..]);
            }
        }
        l.join("\n")
    })
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn config_errors_from_mangled_files_say_where(text in mangled_config()) {
        if let Err(err) = Config::from_toml_str(&text) {
            prop_assert_eq!(err.kind(), ErrorKind::Config);
            let message = err.message();
            prop_assert!(crate::catalogue::says_where(message), "no path or position in: {}", message);
            prop_assert!(!message.contains("sk-abc"), "a key was repeated: {}", message);
        }
    }

    #[test]
    fn config_parsing_never_panics_on_any_text(
        text in proptest::collection::vec(
            prop_oneof![
                select(vec![
                    "[providers.p]\n", "[environments.e]\n", "[policy]\n", "kind = \"openai\"\n",
                    "default_environment = \"e\"\n", "chat = [\"p\"]\n", "model = \"m\"\n",
                    "base_url = \"https://h\"\n", "=", "\"", "[", "]", "{", "}", "\n", "#",
                ]).prop_map(str::to_owned),
                any::<char>().prop_map(String::from),
            ],
            0..40,
        ).prop_map(|v| v.concat()),
    ) {
        if let Err(err) = Config::from_toml_str(&text) {
            prop_assert_eq!(err.kind(), ErrorKind::Config);
            prop_assert!(crate::catalogue::says_where(err.message()), "no path or position in: {}", err.message());
        }
    }
}

// ---- token estimates ------------------------------------------------------------------------

proptest! {
    #![proptest_config(config(128))]

    /// The tokenizer-free bound the router books where a bucket has room is never below the
    /// counted estimate, for any text and model family.
    #[test]
    fn the_cost_bound_is_never_below_the_estimate(
        system in any::<String>(),
        user in proptest::collection::vec(any::<char>(), 0..400).prop_map(String::from_iter),
        max_tokens in 1u32..4096,
        model in select(vec!["gpt-4o-mini", "gpt-4-turbo", "claude-sonnet-4", "llama-3.3-70b"]),
    ) {
        let req = llm_failover::ChatRequest::new().system(system).user(user).max_tokens(max_tokens);
        let bound = llm_failover::ratelimit::chat_cost_bound(&req, model);
        let exact = llm_failover::ratelimit::estimate_chat(&req, model);
        prop_assert!(bound.input_tokens >= exact.input_tokens, "{:?} < {:?}", bound, exact);
        prop_assert_eq!(bound.output_tokens, exact.output_tokens);
    }
}
