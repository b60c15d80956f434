//! Rate-limit headers of every dialect → [`LimitReport`].
//!
//! Each dialect reads its own headers first; any window it leaves unknown falls back to the
//! generic `X-RateLimit-{Limit,Remaining,Reset}`, then to the IETF draft fields
//! ([`ietf`](super::ietf)). Every value is read on its own: a malformed one is unknown, never
//! zero, and never fails the others.

use reqwest::header::HeaderMap;

use super::value::{
    any_reset, at_wall, count, header, per_from_window_secs, relative_reset, rfc3339,
};
use super::{HeaderDialect, LimitReport, Per, Window, ietf, retry_after, should_retry};
use crate::clock::Now;

/// Every response header the rate-limit parsers read, in every dialect (lower case): useful
/// to a proxy that must forward them, and to tests and fuzzers that aim at the parsers.
#[cfg_attr(feature = "test-util", visibility::make(pub))]
#[cfg_attr(not(feature = "test-util"), allow(dead_code))]
pub(crate) const RATE_LIMIT_HEADERS: [&str; 40] = [
    "x-ratelimit-limit-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-requests",
    "x-ratelimit-reset-tokens",
    "x-ratelimit-limit-tokens_usage_based",
    "x-ratelimit-remaining-tokens_usage_based",
    "x-ratelimit-reset-tokens_usage_based",
    "x-rate-limit-reset-tokens",
    "x-rate-limit-reset-requests",
    "x-ratelimit-limit-req-minute",
    "x-ratelimit-remaining-req-minute",
    "x-ratelimit-limit-tokens-minute",
    "x-ratelimit-remaining-tokens-minute",
    "x-trial-endpoint-call-limit",
    "x-trial-endpoint-call-remaining",
    "anthropic-ratelimit-requests-limit",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-tokens-limit",
    "anthropic-ratelimit-tokens-remaining",
    "anthropic-ratelimit-tokens-reset",
    "anthropic-ratelimit-input-tokens-limit",
    "anthropic-ratelimit-input-tokens-remaining",
    "anthropic-ratelimit-input-tokens-reset",
    "anthropic-ratelimit-output-tokens-limit",
    "anthropic-ratelimit-output-tokens-remaining",
    "anthropic-ratelimit-output-tokens-reset",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "ratelimit",
    "ratelimit-policy",
    "ratelimit-limit",
    "ratelimit-remaining",
    "ratelimit-reset",
    "retry-after",
    "retry-after-ms",
    "x-should-retry",
];

/// Reads every rate-limit header a response carries, in `dialect`, into one [`LimitReport`].
///
/// - [`HeaderDialect::OpenAi`] reads `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, per
///   minute, resets as Go-style durations (`6m0s`). When OpenAI also sends
///   `x-ratelimit-*-tokens_usage_based`, the token window is the tighter of the two (lower
///   remaining and limit, later reset).
/// - [`HeaderDialect::Groq`] reads the same names, but the request headers count per day and the
///   token headers per minute.
/// - [`HeaderDialect::Azure`] reads `x-ratelimit-{limit,remaining}-{requests,tokens}` and
///   `x-ratelimit-reset-*` / `x-rate-limit-reset-*` in bare seconds (`-1` = unknown, ignored).
///   Tokens are per minute (the deployment's TPM); the request counter is evaluated over
///   1- or 10-second intervals, so its window is [`Per::Unknown`].
/// - [`HeaderDialect::Anthropic`] reads
///   `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}`,
///   per minute, resets as RFC 3339 instants (one at or before now clamps to now).
/// - [`HeaderDialect::Generic`] reads `X-RateLimit-{Limit,Remaining,Reset}` for requests; the reset
///   is epoch milliseconds, epoch seconds or delta seconds by magnitude (or an RFC 3339 /
///   HTTP date); window [`Per::Unknown`] unless the limit carries `;window=N` / `;w=N`.
///
/// Wall-clock resets are converted to a `tokio::time::Instant` here, once, through `now`;
/// relative resets are added to `now.instant`. Also fills
/// [`retry_after`](LimitReport::retry_after) (`retry-after-ms` first, then `Retry-After` in
/// seconds or as an HTTP date; a negative, unparseable, past or absurd value is none) and
/// [`should_retry`](LimitReport::should_retry).
///
/// Never fails: an absent or malformed header leaves its field `None`.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use reqwest::header::{HeaderMap, HeaderValue};
/// use llm_failover::clock::Now;
/// use llm_failover::ratelimit::{parse_limit_headers, HeaderDialect, Per};
///
/// let now = Now { instant: tokio::time::Instant::now(), wall: SystemTime::UNIX_EPOCH };
/// let mut headers = HeaderMap::new();
/// headers.insert("x-ratelimit-limit-tokens", HeaderValue::from_static("150000"));
/// headers.insert("x-ratelimit-remaining-tokens", HeaderValue::from_static("149984"));
/// headers.insert("x-ratelimit-reset-tokens", HeaderValue::from_static("6m0s"));
///
/// let report = parse_limit_headers(HeaderDialect::OpenAi, &headers, now);
/// let tokens = report.tokens.expect("token window");
/// assert_eq!(tokens.limit, Some(150_000));
/// assert_eq!(tokens.remaining, Some(149_984));
/// assert_eq!(tokens.reset_at, Some(now.instant + Duration::from_secs(360)));
/// assert_eq!(tokens.per, Per::Minute);
/// assert_eq!(report.requests, None); // absent is unknown, never zero
/// ```
pub fn parse_limit_headers(dialect: HeaderDialect, headers: &HeaderMap, now: Now) -> LimitReport {
    match scan(headers) {
        Scan::Nothing => LimitReport::default(),
        Scan::Own => parse_own(dialect, headers, now),
        Scan::Gateway => parse_own(dialect, &with_upstream(headers), now),
    }
}

/// What a response's header names hold, read in one pass.
enum Scan {
    /// No header the parsers read.
    Nothing,
    /// Limit headers of the host's own.
    Own,
    /// Headers a LiteLLM gateway forwarded from the provider behind it.
    Gateway,
}

/// The prefix under which a LiteLLM proxy forwards the upstream provider's own response
/// headers (`llm_provider-x-ratelimit-remaining-requests`, `llm_provider-retry-after`; the
/// "Response headers from LLM providers" section of docs.litellm.ai/docs/proxy/response_headers).
/// A proxy enforcing its own rpm states only its limit and remaining on its 200s, and on its
/// 429s only `llm_provider-retry-after`.
const UPSTREAM: &str = "llm_provider-";

fn scan(headers: &HeaderMap) -> Scan {
    let mut found = Scan::Nothing;
    for name in headers.keys() {
        let n = name.as_str();
        if n.starts_with(UPSTREAM) {
            return Scan::Gateway;
        }
        if is_limit_header(n) {
            found = Scan::Own;
        }
    }
    found
}

/// `headers` with the upstream's forwarded headers under their own names where the gateway
/// stated none of its own: the gateway's limits bind first (they are the ones its 200s state),
/// and what it left out — the delay on its 429, a window it does not state — is the
/// upstream's.
fn with_upstream(headers: &HeaderMap) -> HeaderMap {
    let mut merged = headers.clone();
    for (name, value) in headers {
        let Some(own) = name.as_str().strip_prefix(UPSTREAM) else {
            continue;
        };
        if let Ok(own) = reqwest::header::HeaderName::from_bytes(own.as_bytes())
            && !headers.contains_key(&own)
        {
            merged.append(own, value.clone());
        }
    }
    merged
}

/// The headers a host states of its own limits, parsed as `dialect` reads them.
fn parse_own(dialect: HeaderDialect, headers: &HeaderMap, now: Now) -> LimitReport {
    if !any_limit_header(headers) {
        return LimitReport::default();
    }
    let mut report = match dialect {
        HeaderDialect::OpenAi => openai(headers, now, Per::Minute),
        HeaderDialect::Groq => openai(headers, now, Per::Day),
        HeaderDialect::Azure => azure(headers, now),
        HeaderDialect::Anthropic => anthropic(headers, now),
        HeaderDialect::Generic => LimitReport::default(),
    };
    if report.requests.is_none() {
        report.requests = mistral(headers, MISTRAL_REQUESTS)
            .or_else(|| mistral(headers, COHERE_TRIAL))
            .or_else(|| generic_requests(headers, now))
            .or_else(|| ietf::requests_window(headers, now));
    }
    if report.tokens.is_none() {
        report.tokens = mistral(headers, MISTRAL_TOKENS);
    }
    report.retry_after = retry_after(headers, now);
    report.should_retry = should_retry(headers);
    report
}

/// Whether any header is one the parsers here read (names are lowercase in a `HeaderMap`):
/// one pass over the names, so a response without rate-limit headers (a local host, a
/// provider with limits off) skips the two dozen lookups below.
fn any_limit_header(headers: &HeaderMap) -> bool {
    headers.keys().any(|name| is_limit_header(name.as_str()))
}

/// Whether `n` (lowercase) is a header the parsers here read.
fn is_limit_header(n: &str) -> bool {
    n.starts_with("x-ratelimit-")
        || n.starts_with("x-rate-limit-")
        || n.starts_with("anthropic-ratelimit-")
        || n.starts_with("ratelimit")
        || n.starts_with("retry-after")
        || n == "x-should-retry"
        || n.starts_with("x-trial-endpoint-call-")
}

/// The three header names of one window: limit, remaining, reset.
type Names = [&'static str; 3];

const OPENAI_REQUESTS: Names = [
    "x-ratelimit-limit-requests",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
];
const OPENAI_TOKENS: Names = [
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
];
const OPENAI_TOKENS_USAGE_BASED: Names = [
    "x-ratelimit-limit-tokens_usage_based",
    "x-ratelimit-remaining-tokens_usage_based",
    "x-ratelimit-reset-tokens_usage_based",
];
/// Azure also spells its reset headers `x-rate-limit-reset-*`.
const AZURE_RESET_REQUESTS: &str = "x-rate-limit-reset-requests";
const AZURE_RESET_TOKENS: &str = "x-rate-limit-reset-tokens";
const ANTHROPIC_REQUESTS: Names = [
    "anthropic-ratelimit-requests-limit",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-requests-reset",
];
const ANTHROPIC_TOKENS: Names = [
    "anthropic-ratelimit-tokens-limit",
    "anthropic-ratelimit-tokens-remaining",
    "anthropic-ratelimit-tokens-reset",
];
const ANTHROPIC_INPUT_TOKENS: Names = [
    "anthropic-ratelimit-input-tokens-limit",
    "anthropic-ratelimit-input-tokens-remaining",
    "anthropic-ratelimit-input-tokens-reset",
];
const ANTHROPIC_OUTPUT_TOKENS: Names = [
    "anthropic-ratelimit-output-tokens-limit",
    "anthropic-ratelimit-output-tokens-remaining",
    "anthropic-ratelimit-output-tokens-reset",
];

/// Reads one window whose reset is relative (a Go duration or bare seconds);
/// `reset_alias` is a second spelling of the reset header.
fn relative_window(
    headers: &HeaderMap,
    [limit, remaining, reset]: Names,
    reset_alias: Option<&str>,
    per: Per,
    now: Now,
) -> Option<Window> {
    window(Window {
        limit: header(headers, limit).and_then(count),
        remaining: header(headers, remaining).and_then(count),
        reset_at: header(headers, reset)
            .or_else(|| header(headers, reset_alias?))
            .and_then(|v| relative_reset(v, now)),
        per,
    })
}

/// OpenAI and Groq: `requests_per` is the request window (minute for OpenAI, day for Groq);
/// tokens are always per minute.
fn openai(headers: &HeaderMap, now: Now, requests_per: Per) -> LimitReport {
    let tokens = relative_window(headers, OPENAI_TOKENS, None, Per::Minute, now);
    let usage_based = relative_window(headers, OPENAI_TOKENS_USAGE_BASED, None, Per::Minute, now);
    let daily = |w: Option<Window>| w.map(|w| daily_if_reset_beyond_an_hour(w, now));
    LimitReport {
        requests: daily(relative_window(
            headers,
            OPENAI_REQUESTS,
            None,
            requests_per,
            now,
        )),
        tokens: daily(match (tokens, usage_based) {
            (Some(a), Some(b)) => Some(tighter(a, b)),
            (a, b) => a.or(b),
        }),
        ..LimitReport::default()
    }
}

/// A window whose reset is more than an hour away is not the minute the headers usually
/// state but the day (OpenAI's only other window: "RPD", "TPD" in its rate-limit guide, which
/// the headers report when they bind, e.g. `x-ratelimit-reset-tokens: 23h59m`). Within the
/// hour the window stays a minute: the guide's own example states a per-minute token limit
/// resetting in `6m0s`.
fn daily_if_reset_beyond_an_hour(mut w: Window, now: Now) -> Window {
    const HOUR: std::time::Duration = std::time::Duration::from_secs(3_600);
    if w.per == Per::Minute
        && w.reset_at
            .is_some_and(|at| at.saturating_duration_since(now.instant) > HOUR)
    {
        w.per = Per::Day;
    }
    w
}

/// Azure: like OpenAI's, but a reset of `0` says nothing. Azure sends it with `-1` limits
/// (the Responses API: learn.microsoft.com/en-us/answers/questions/5625878) and on answers
/// that leave tokens: read as "full again now", it handed out a bucket the deployment did not
/// have. Only a reset in the future is a reset.
fn azure(headers: &HeaderMap, now: Now) -> LimitReport {
    let future = |w: Option<Window>| {
        w.and_then(|mut w| {
            w.reset_at = w.reset_at.filter(|at| *at > now.instant);
            window(w)
        })
    };
    LimitReport {
        requests: future(relative_window(
            headers,
            OPENAI_REQUESTS,
            Some(AZURE_RESET_REQUESTS),
            Per::Unknown,
            now,
        )),
        tokens: future(relative_window(
            headers,
            OPENAI_TOKENS,
            Some(AZURE_RESET_TOKENS),
            Per::Minute,
            now,
        )),
        ..LimitReport::default()
    }
}

fn anthropic(headers: &HeaderMap, now: Now) -> LimitReport {
    let read = |[limit, remaining, reset]: Names| {
        window(Window {
            limit: header(headers, limit).and_then(count),
            remaining: header(headers, remaining).and_then(count),
            reset_at: header(headers, reset)
                .and_then(rfc3339)
                .and_then(|wall| at_wall(now, wall)),
            per: Per::Minute,
        })
    };
    LimitReport {
        requests: read(ANTHROPIC_REQUESTS),
        tokens: read(ANTHROPIC_TOKENS),
        input_tokens: read(ANTHROPIC_INPUT_TOKENS),
        output_tokens: read(ANTHROPIC_OUTPUT_TOKENS),
        ..LimitReport::default()
    }
}

/// Mistral's per-minute counters, named by their window and sent without a reset:
/// `x-ratelimit-{limit,remaining}-req-minute` and `x-ratelimit-{limit,remaining}-tokens-minute`
/// (recorded from api.mistral.ai in github.com/mistralai/client-ts/issues/169; docs.mistral.ai
/// "Rate limits & usage tiers" sets limits per minute and per month). The monthly token
/// allowance (`-tokens-month`) is not read: no window here counts a month, and a month's
/// allowance used up answers as an exhausted quota.
const MISTRAL_REQUESTS: [&str; 2] = [
    "x-ratelimit-limit-req-minute",
    "x-ratelimit-remaining-req-minute",
];
const MISTRAL_TOKENS: [&str; 2] = [
    "x-ratelimit-limit-tokens-minute",
    "x-ratelimit-remaining-tokens-minute",
];

/// Cohere's trial keys: `x-trial-endpoint-call-{limit,remaining}`, the endpoint's calls per
/// minute and what is left of them (recorded from api.cohere.com: `limit: 20`, `remaining:
/// 19` on a chat call, beside `x-endpoint-monthly-call-limit: 1000`; docs.cohere.com/v2/docs/
/// rate-limits: trial Chat "20 req / min", trial keys "limited to 1,000 API calls a month").
/// No reset is stated, and none of them on a 429. The monthly allowance is not read: it states
/// no remaining, and a month used up answers as an exhausted quota.
const COHERE_TRIAL: [&str; 2] = [
    "x-trial-endpoint-call-limit",
    "x-trial-endpoint-call-remaining",
];

/// Per-minute counters named by their window (Mistral's, Cohere's trial keys'): limit and
/// remaining, no reset.
fn mistral(headers: &HeaderMap, [limit, remaining]: [&str; 2]) -> Option<Window> {
    window(Window {
        limit: header(headers, limit).and_then(count),
        remaining: header(headers, remaining).and_then(count),
        reset_at: None,
        per: Per::Minute,
    })
}

/// `X-RateLimit-{Limit,Remaining,Reset}` (OpenRouter, GitHub and many others).
fn generic_requests(headers: &HeaderMap, now: Now) -> Option<Window> {
    // The limit may carry its window, as in `100, 100;window=60, 10000;window=86400`: the
    // first member is the limit that applies now.
    let limit_field = header(headers, "x-ratelimit-limit");
    let first = limit_field.and_then(|v| v.split(',').next());
    let mut parts = first.into_iter().flat_map(|m| m.split(';'));
    let limit = parts.next().and_then(count);
    let per = parts
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| matches!(k.trim().to_ascii_lowercase().as_str(), "window" | "w"))
        .and_then(|(_, v)| count(v))
        .map_or(Per::Unknown, per_from_window_secs);
    window(Window {
        limit,
        remaining: header(headers, "x-ratelimit-remaining").and_then(count),
        reset_at: header(headers, "x-ratelimit-reset").and_then(|v| any_reset(v, now)),
        per,
    })
}

/// The tighter of two views of one window: lower limit and remaining, later reset.
fn tighter(a: Window, b: Window) -> Window {
    let min = |x: Option<u64>, y: Option<u64>| match (x, y) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    };
    Window {
        limit: min(a.limit, b.limit),
        remaining: min(a.remaining, b.remaining),
        reset_at: a.reset_at.max(b.reset_at),
        per: a.per,
    }
}

/// `Some(w)` unless no field carries information.
fn window(w: Window) -> Option<Window> {
    (!w.is_empty()).then_some(w)
}

#[cfg(test)]
mod tests;
