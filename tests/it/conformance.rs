//! One conformance table of refusals and stated limits, run against every adapter: what a
//! refusal means and what a response's rate-limit headers state are the same whichever wire
//! format the provider speaks. The router decides on the error's kind and the limiter on the
//! stated reading, never on the format. Three parts, each pure (an adapter's reading of a
//! [`RawResponse`] or a [`HeaderMap`]: no network, no clock but one fixed `now`):
//!
//! - **Statuses** ([`STATUSES`]): a status whose body names nothing (a proxy's HTML page, an
//!   empty body, text, bytes that are not UTF-8) reads the same for every kind — a 429 is
//!   throttling, a 401 a rejected key (terminal), a 5xx a server fault (retried).
//! - **Bodies** ([`refusals`]; the rows in `conformance/`: the account's, the request's, the
//!   provider's): for each refusal (a rejected key, throttling, a spent quota, a prompt too
//!   long, a model that does not exist, …), each kind's own documented body for it, and the
//!   kind and disposition every kind must agree on; each cell also names the vendor code and
//!   the provider's words the error keeps. A refusal a kind does not have (Deepgram has no
//!   context length) is no cell of it. Each body cites where its provider documents it (or,
//!   where no document shows one, where it was recorded).
//! - **Headers** ([`statements`]): one stated limit — requests: 60, none left, full again in
//!   20 s; tokens: 1,000, 250 left, full again in 1.5 s — reads the same in every dialect that
//!   states limits in headers (OpenAI's, Azure's, Anthropic's); the kinds that state none
//!   (Gemini, Vertex, Deepgram, Bedrock) read no limit from any dialect's headers; for every
//!   kind a `Retry-After: 7` is 7 s and no header at all states nothing.
//!
//! A new kind is added to [`adapters`] and gets every row: the status rows and the header
//! checks at once; a body row marked `every_kind` (every provider rejects keys, throttles,
//! fails) fails until the kind's own body is a cell of it; and [`statements`] must say how
//! the kind states limits in headers, or that it states none. What a format reads beyond these
//! (delays in a message or a `RetryInfo`, errors inside streams, request ids, an exchange's
//! report) stays in its adapter's tests. No cell reads otherwise: the two disagreements the
//! table found were mended in the adapters (Bedrock ignoring every header, a proxy's
//! `Retry-After` too; Vertex reading a project without billing as a rejected key).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use llm_failover::clock::Now;
use llm_failover::http::RawResponse;
use llm_failover::provider::Provider;
use llm_failover::provider::anthropic::Anthropic;
use llm_failover::provider::azure::Azure;
use llm_failover::provider::deepgram::Deepgram;
use llm_failover::provider::gemini::Gemini;
use llm_failover::provider::openai::OpenAi;
use llm_failover::ratelimit::{Per, Window};
use llm_failover::{Disposition, ErrorKind, LimitReport, ProviderId};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::json;

mod account;
mod provider;
mod request;

/// Every kind's adapter, as a client would build it (the wings' through the facade).
fn adapters() -> Vec<Arc<dyn Provider>> {
    let url = |u: &str| u.parse().unwrap();
    vec![
        Arc::new(OpenAi::new(
            ProviderId::new("openai"),
            url("https://api.openai.com/v1"),
        )),
        Arc::new(Azure::new(
            ProviderId::new("azure"),
            url("https://example.openai.azure.com/openai"),
            "2024-10-21",
        )),
        Arc::new(Anthropic::new(
            ProviderId::new("anthropic"),
            url("https://api.anthropic.com"),
        )),
        Arc::new(Gemini::new(
            ProviderId::new("gemini"),
            url("https://generativelanguage.googleapis.com/v1beta"),
        )),
        Arc::new(Deepgram::new(
            ProviderId::new("deepgram"),
            url("https://api.deepgram.com"),
        )),
        Arc::new(llm_failover::bedrock::Bedrock::new(
            ProviderId::new("bedrock"),
            url("https://bedrock-runtime.us-east-1.amazonaws.com"),
            "us-east-1",
        )),
        Arc::new(
            llm_failover::vertex::Vertex::new(ProviderId::new("vertex"), "p", "us-central1")
                .unwrap(),
        ),
    ]
}

/// The one `now` of a check: its wall clock is 2026-01-01T00:00:00Z (the headers' instants
/// count from it).
fn now() -> Now {
    Now {
        instant: tokio::time::Instant::now(),
        wall: SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600),
    }
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    map
}

// --- Statuses -------------------------------------------------------------------------------

/// (status, a body that names nothing, the kind every adapter reads, its disposition).
type StatusRow = (u16, &'static [u8], ErrorKind, Disposition);

const HTML_502: &[u8] =
    b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>nginx</body></html>";

const STATUSES: &[StatusRow] = {
    use Disposition::{RateLimited as Wait, Terminal, Transient};
    use ErrorKind::*;
    &[
        // Throttling, however it is worded, is waited out, never given up for good.
        (429, b"Too Many Requests", RateLimited, Wait),
        (429, b"", RateLimited, Wait),
        // A key refused is terminal for that key: asking again cannot help. JSON that is no
        // provider's error object (a web framework's default 401) names nothing either.
        (401, b"Unauthorized", Auth, Terminal),
        (401, b"", Auth, Terminal),
        (401, br#"{"detail": "Unauthorized"}"#, Auth, Terminal),
        // A request the provider cannot take is terminal: the same request fails again. So
        // is any other 4xx, and a body too large for a proxy in front.
        (400, b"Bad Request", InvalidRequest, Terminal),
        (418, b"I'm a teapot", InvalidRequest, Terminal),
        (
            413,
            b"<html>413 Request Entity Too Large</html>",
            PayloadTooLarge,
            Terminal,
        ),
        // Server faults are retried (text, bytes that are not text or begin with a byte-order
        // mark, a proxy's HTML page, an empty body).
        (500, b"Internal Server Error", Server, Transient),
        (500, b"\xff\xfe\x00oops", Server, Transient),
        (500, b"\xef\xbb\xbfnot json at all", Server, Transient),
        (502, HTML_502, Server, Transient),
        (502, b"", Server, Transient),
        // A service that is unavailable is overloaded: retried, the request not at fault.
        (503, b"", Overloaded, Transient),
        // A gateway's timeout is a timeout (retried), whichever provider is behind it.
        (504, b"", Timeout, Transient),
        (
            504,
            b"<html><body>Gateway Timeout</body></html>",
            Timeout,
            Transient,
        ),
    ]
};

#[tokio::test]
async fn every_adapter_reads_a_status_the_same_when_the_body_says_nothing() {
    let mut disagreements = Vec::new();
    for adapter in adapters() {
        for (status, body, kind, disposition) in STATUSES {
            let raw = RawResponse::new(
                *status,
                headers(&[("content-type", "text/html")]),
                body.to_vec(),
            );
            let err = adapter.error(&raw, now());
            // (The status is the exchange's to attach, for every kind alike.)
            let got = (err.kind(), err.disposition());
            let want = (*kind, *disposition);
            if got != want {
                disagreements.push(format!(
                    "{} on {status} {:?}: got {got:?}, want {want:?} ({err})",
                    adapter.kind(),
                    String::from_utf8_lossy(body)
                ));
            }
            // Whatever the body held, the error is no panic and keeps the message short.
            assert!(err.to_string().len() < 2_000, "{}: {err}", adapter.kind());
        }
    }
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n"));
}

// --- Bodies ---------------------------------------------------------------------------------

/// A refusal every kind must read alike: the kind and disposition its error has, and each
/// kind's own bodies for it.
struct Refusal {
    what: &'static str,
    kind: ErrorKind,
    disposition: Disposition,
    /// Every kind in [`adapters`] has a cell: a new kind fails the row until it has one.
    every_kind: bool,
    cells: Vec<Cell>,
}

/// One kind's own answer for a refusal, and what its error keeps of it.
struct Cell {
    /// The adapter's kind (`Provider::kind`).
    kind: &'static str,
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: String,
    /// The vendor code the error keeps (`Error::code`).
    code: Option<&'static str>,
    /// Words of the provider's message the error keeps.
    says: &'static str,
}

impl Cell {
    fn new(
        kind: &'static str,
        status: u16,
        body: impl Into<String>,
        code: Option<&'static str>,
        says: &'static str,
    ) -> Self {
        Cell {
            kind,
            status,
            headers: Vec::new(),
            body: body.into(),
            code,
            says,
        }
    }

    fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }
}

/// An OpenAI error object with nothing but its type (and code), `{"error": {"message", "type",
/// "param", "code"}}` (platform.openai.com/docs/guides/error-codes); the code kept is `code`,
/// else the type.
fn openai(status: u16, ty: &'static str, code: Option<&'static str>) -> Cell {
    let body = json!({"error": {"message": "m", "type": ty, "param": null, "code": code}});
    Cell::new("openai", status, body.to_string(), code.or(Some(ty)), "m")
}

/// Anthropic's error object (docs.claude.com/en/api/errors).
fn anthropic(status: u16, ty: &'static str, message: &'static str) -> Cell {
    let body = json!({"type": "error", "error": {"type": ty, "message": message}});
    Cell::new("anthropic", status, body.to_string(), Some(ty), message)
}

/// A Google API error, `{"error": {"code", "message", "status"}}` (cloud.google.com/apis/design/
/// errors), as Gemini and Vertex AI answer it; the code kept is the canonical status.
fn google(kind: &'static str, status: u16, grpc: &'static str, message: &'static str) -> Cell {
    let body = json!({"error": {"code": status, "message": message, "status": grpc}});
    Cell::new(kind, status, body.to_string(), Some(grpc), message)
}

/// Deepgram's error object, `{"err_code", "err_msg", "request_id"}`
/// (developers.deepgram.com/reference/errors).
fn deepgram(status: u16, code: &'static str, message: &'static str) -> Cell {
    let body = json!({"err_code": code, "err_msg": message, "request_id": "uuid"});
    Cell::new("deepgram", status, body.to_string(), Some(code), message)
}

/// A Bedrock exception: its name in `x-amzn-ErrorType` (as AWS's JSON protocols send it,
/// read up to the `:`) and `{"message"}` in the body. The exceptions and their statuses are
/// the Converse reference's Errors section
/// (docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html#API_runtime_Converse_Errors),
/// the common errors (…/APIReference/CommonErrors.html) and the signing ones AWS endpoints
/// send (docs.aws.amazon.com/bedrock/latest/userguide/troubleshooting-api-error-codes.html).
fn bedrock(status: u16, exception: &'static str, message: &'static str) -> Cell {
    let body = json!({ "message": message });
    Cell::new(
        "bedrock",
        status,
        body.to_string(),
        Some(exception),
        message,
    )
    .header(
        "x-amzn-errortype",
        format!("{exception}:http://internal.amazon.com/coral/com.amazon.bedrock/"),
    )
}

/// Every refusal: the account's (its key, its limits), the request's, the provider's.
fn refusals() -> Vec<Refusal> {
    vec![
        account::rejected_key(),
        account::no_permission(),
        account::throttled(),
        account::quota_spent(),
        request::too_long(),
        request::invalid_request(),
        request::not_found(),
        request::content_filtered(),
        request::payload_too_large(),
        request::never_fits(),
        request::conflict(),
        provider::overloaded(),
        provider::server_fault(),
        provider::timed_out(),
    ]
}

#[tokio::test]
async fn every_adapter_reads_its_own_body_for_a_refusal_as_every_other_does() {
    let adapters = adapters();
    let mut disagreements = Vec::new();
    for row in refusals() {
        assert_eq!(
            row.kind.disposition(),
            row.disposition,
            "{}: the row's kind and disposition",
            row.what
        );
        for cell in &row.cells {
            let adapter = adapters
                .iter()
                .find(|a| a.kind() == cell.kind)
                .unwrap_or_else(|| panic!("{}: no adapter of kind {:?}", row.what, cell.kind));
            let pairs: Vec<(&str, &str)> =
                cell.headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            let raw = RawResponse::new(cell.status, headers(&pairs), cell.body.clone());
            let err = adapter.error(&raw, now());
            let kind = row.kind;
            let got = (err.kind(), err.disposition(), err.code());
            let want = (kind, kind.disposition(), cell.code);
            let keeps_words = err.message().contains(cell.says);
            if got != want || !keeps_words {
                disagreements.push(format!(
                    "{} / {} on {}: got {got:?}, want {want:?}{} ({err})",
                    row.what,
                    cell.kind,
                    cell.status,
                    if keeps_words {
                        String::new()
                    } else {
                        format!(", the message keeping {:?}", cell.says)
                    },
                ));
            }
        }
        if row.every_kind {
            for adapter in &adapters {
                if !row.cells.iter().any(|c| c.kind == adapter.kind()) {
                    disagreements.push(format!(
                        "{}: {} has no cell (every kind throttles, rejects keys and fails: add \
                         its own documented body)",
                        row.what,
                        adapter.kind()
                    ));
                }
            }
        }
    }
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n"));
}

// --- Headers --------------------------------------------------------------------------------

/// The request window every dialect states: 60, none left, full again in 20 s.
const REQUESTS: (u64, u64, Duration) = (60, 0, Duration::from_secs(20));
/// The token window every dialect states: 1,000, 250 left, full again in 1.5 s.
const TOKENS: (u64, u64, Duration) = (1_000, 250, Duration::from_millis(1_500));

/// A kind's own statement of [`REQUESTS`] and [`TOKENS`] in its headers, and the windows its
/// dialect counts them over (requests, tokens).
struct Statement {
    headers: &'static [(&'static str, &'static str)],
    per: (Per, Per),
}

/// How each kind states limits in headers: its statement of the one limit, or `None` when it
/// states none (it still reads what a proxy in front may add: `Retry-After`, the generic
/// forms).
fn statements() -> Vec<(&'static str, Option<Statement>)> {
    vec![
        // platform.openai.com/docs/guides/rate-limits#rate-limits-in-headers:
        // `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, resets as durations (`1s`,
        // `6m0s`), per minute.
        (
            "openai",
            Some(Statement {
                headers: &[
                    ("x-ratelimit-limit-requests", "60"),
                    ("x-ratelimit-remaining-requests", "0"),
                    ("x-ratelimit-reset-requests", "20s"),
                    ("x-ratelimit-limit-tokens", "1000"),
                    ("x-ratelimit-remaining-tokens", "250"),
                    ("x-ratelimit-reset-tokens", "1.5s"),
                ],
                per: (Per::Minute, Per::Minute),
            }),
        ),
        // learn.microsoft.com/azure/ai-foundry/openai/how-to/quota: the same limit and
        // remaining names, resets in bare seconds under `x-rate-limit-reset-*` (quoted in
        // github.com/openai/openai-python/issues/937); tokens per minute (the deployment's
        // TPM), requests counted over 1- or 10-second intervals, so no stated window.
        (
            "azure",
            Some(Statement {
                headers: &[
                    ("x-ratelimit-limit-requests", "60"),
                    ("x-ratelimit-remaining-requests", "0"),
                    ("x-rate-limit-reset-requests", "20"),
                    ("x-ratelimit-limit-tokens", "1000"),
                    ("x-ratelimit-remaining-tokens", "250"),
                    ("x-rate-limit-reset-tokens", "1.5"),
                ],
                per: (Per::Unknown, Per::Minute),
            }),
        ),
        // docs.claude.com/en/api/rate-limits#response-headers:
        // `anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}`, resets as RFC 3339
        // instants, per minute.
        (
            "anthropic",
            Some(Statement {
                headers: &[
                    ("anthropic-ratelimit-requests-limit", "60"),
                    ("anthropic-ratelimit-requests-remaining", "0"),
                    ("anthropic-ratelimit-requests-reset", "2026-01-01T00:00:20Z"),
                    ("anthropic-ratelimit-tokens-limit", "1000"),
                    ("anthropic-ratelimit-tokens-remaining", "250"),
                    ("anthropic-ratelimit-tokens-reset", "2026-01-01T00:00:01.5Z"),
                ],
                per: (Per::Minute, Per::Minute),
            }),
        ),
        // ai.google.dev/gemini-api/docs/rate-limits: limits per project, stated in no header
        // (a 429's body names the quota: the body rows).
        ("gemini", None),
        // Deepgram states no limits in headers (a 429 `TOO_MANY_REQUESTS` alone).
        ("deepgram", None),
        // Bedrock states none: its throttling is learned from its 429s
        // (docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html).
        ("bedrock", None),
        // Vertex AI states none either (a 429 RESOURCE_EXHAUSTED alone,
        // cloud.google.com/vertex-ai/generative-ai/docs/error-code-429).
        ("vertex", None),
    ]
}

/// What `adapter` reads from `pairs`, on an answer (`limit_report`) and on a refusal
/// (`error_limit_report` of a 429 with no body): the two must agree.
fn reports(adapter: &dyn Provider, pairs: &[(&str, &str)], now: Now) -> [LimitReport; 2] {
    let answered = adapter.limit_report(&headers(pairs), now);
    let refused = adapter.error_limit_report(&RawResponse::new(429, headers(pairs), ""), now);
    [answered, refused]
}

#[tokio::test]
async fn every_adapter_reads_one_stated_limit_the_same_and_none_where_its_kind_states_none() {
    let now = now();
    let statements = statements();
    let window = |(limit, remaining, resets_in): (u64, u64, Duration), per| Window {
        limit: Some(limit),
        remaining: Some(remaining),
        reset_at: Some(now.instant + resets_in),
        per,
    };
    let mut disagreements = Vec::new();
    for adapter in adapters() {
        let kind = adapter.kind();
        let (_, own) = statements
            .iter()
            .find(|(k, _)| *k == kind)
            .unwrap_or_else(|| panic!("statements() says nothing of {kind}: add its row"));
        // No header at all states nothing.
        for report in reports(adapter.as_ref(), &[], now) {
            if !report.is_empty() {
                disagreements.push(format!("{kind}, no headers: read {report:?}"));
            }
        }
        match own {
            // Its own statement is the one reading.
            Some(statement) => {
                let (requests_per, tokens_per) = statement.per;
                let mut want = LimitReport::default();
                want.requests = Some(window(REQUESTS, requests_per));
                want.tokens = Some(window(TOKENS, tokens_per));
                for report in reports(adapter.as_ref(), statement.headers, now) {
                    if report != want {
                        disagreements.push(format!(
                            "{kind}, its own headers: read {report:?}, want {want:?}"
                        ));
                    }
                }
            }
            // A kind that states none reads no limit from any dialect's statement.
            None => {
                for (dialect, statement) in &statements {
                    let Some(statement) = statement else { continue };
                    for report in reports(adapter.as_ref(), statement.headers, now) {
                        if report.windows().next().is_some() {
                            disagreements.push(format!(
                                "{kind}, {dialect}'s headers: read a limit, {report:?}"
                            ));
                        }
                    }
                }
            }
        }
        // RFC 9110's `Retry-After` in seconds is a delay for every kind, and no limit.
        for report in reports(adapter.as_ref(), &[("retry-after", "7")], now) {
            if report.retry_after != Some(Duration::from_secs(7)) || report.windows().count() > 0 {
                disagreements.push(format!("{kind}, retry-after: 7: read {report:?}"));
            }
        }
    }
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n"));
}
