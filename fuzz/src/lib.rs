//! Shared pieces of the fuzz targets: a cursor over the fuzz bytes, header maps built from
//! them, the five adapters, and the invariants every parser must keep. A broken invariant
//! panics, which libFuzzer reports as a crash like any other.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use llm_failover::clock::Now;
use llm_failover::error::MAX_MESSAGE_LEN;
use llm_failover::provider::anthropic::Anthropic;
use llm_failover::provider::azure::Azure;
use llm_failover::provider::deepgram::Deepgram;
use llm_failover::provider::gemini::Gemini;
use llm_failover::provider::openai::OpenAi;
use llm_failover::provider::Provider;
use llm_failover::ratelimit::{HeaderDialect, LimitReport, MAX_SANE_RETRY_AFTER};
use llm_failover::{Error, ProviderId};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

/// Every header name a parser reads: each dialect's rate-limit headers, the IETF draft fields,
/// `Retry-After` and friends, the request-id headers and `content-type`.
pub static HEADER_NAMES: std::sync::LazyLock<Vec<&'static str>> = std::sync::LazyLock::new(|| {
    let mut names = llm_failover::ratelimit::RATE_LIMIT_HEADERS.to_vec();
    names.extend([
        "content-type",
        "x-request-id",
        "request-id",
        "apim-request-id",
        "dg-request-id",
        "x-goog-request-id",
        "x-ms-error-code",
        "anthropic-organization-id",
    ]);
    names
});

/// Every header dialect.
pub const DIALECTS: [HeaderDialect; 5] = [
    HeaderDialect::OpenAi,
    HeaderDialect::Groq,
    HeaderDialect::Azure,
    HeaderDialect::Anthropic,
    HeaderDialect::Generic,
];

/// A cursor over the fuzz input. Every read past the end yields zeros / empty slices, so a
/// target never has to reject an input for being short.
#[derive(Debug)]
pub struct Bytes<'a> {
    data: &'a [u8],
}

impl<'a> Bytes<'a> {
    /// A cursor at the start of `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Bytes { data }
    }

    /// One byte (0 when exhausted).
    pub fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((b, rest)) => {
                self.data = rest;
                *b
            }
            None => 0,
        }
    }

    /// Two bytes, little-endian.
    pub fn u16(&mut self) -> u16 {
        u16::from(self.byte()) | (u16::from(self.byte()) << 8)
    }

    /// Up to `n` bytes.
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        head
    }

    /// Everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }

    /// True when nothing is left.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

/// The fixed "now": the wall clock at 2024-06-01T12:00:00Z (so HTTP dates and RFC 3339
/// resets near it are in the future or past as written), the instant as the process sees it.
pub fn now() -> Now {
    Now {
        instant: tokio::time::Instant::now(),
        wall: SystemTime::UNIX_EPOCH + Duration::from_secs(1_717_243_200),
    }
}

/// Reads header records until `max` are read or the input runs out: a name byte (an index
/// into [`HEADER_NAMES`]; 255 takes the name's bytes from the input instead), a length byte
/// and that many value bytes. Names and values a header cannot carry are skipped; repeated
/// names are appended, as a server may send them.
pub fn header_map(input: &mut Bytes<'_>, max: usize) -> HeaderMap {
    let mut map = HeaderMap::new();
    for _ in 0..max {
        if input.is_empty() {
            break;
        }
        let which = input.byte();
        let name = if which == 255 {
            let len = usize::from(input.byte() % 32);
            HeaderName::from_bytes(input.take(len)).ok()
        } else {
            let i = usize::from(which) % HEADER_NAMES.len();
            Some(HeaderName::from_static(HEADER_NAMES[i]))
        };
        let len = usize::from(input.byte());
        let value = HeaderValue::from_bytes(input.take(len)).ok();
        if let (Some(name), Some(value)) = (name, value) {
            map.append(name, value);
        }
    }
    map
}

/// Asserts what every [`LimitReport`] must hold, whatever the headers said: no empty
/// window, no reset before now, a `retry_after` that is positive and sane.
pub fn check_report(report: &LimitReport, now: Now) {
    if let Some(broken) = report.invariant_violation(now.instant) {
        panic!("{broken}: {report:?}");
    }
}

/// Asserts that a stated delay is one worth honouring: positive and at most
/// [`MAX_SANE_RETRY_AFTER`].
pub fn check_delay(d: Duration) {
    assert!(!d.is_zero(), "a zero delay was returned");
    assert!(
        d <= MAX_SANE_RETRY_AFTER,
        "an absurd delay was returned: {d:?}"
    );
}

/// Asserts what every classified error must hold: a non-empty message and code no longer
/// than the cap (plus its ellipsis), a sane delay, and `Display`/`Debug` that render.
pub fn check_error(err: &Error) {
    let cap = MAX_MESSAGE_LEN + '…'.len_utf8();
    assert!(!err.message().is_empty(), "an empty error message: {err:?}");
    assert!(err.message().len() <= cap, "message over the cap: {err:?}");
    if let Some(code) = err.code() {
        assert!(code.len() <= cap, "code over the cap: {err:?}");
    }
    if let Some(d) = err.retry_after() {
        check_delay(d);
    }
    let shown = format!("{err} {err:?}");
    assert!(!shown.is_empty());
}

/// The five adapters, in `kind` order (OpenAI, Azure, Anthropic, Gemini, Deepgram), each
/// reading its headers in `dialect` where the adapter lets the dialect be chosen.
pub fn adapters(dialect: HeaderDialect) -> [Arc<dyn Provider>; 5] {
    let url = |s: &str| s.parse().expect("a valid URL");
    [
        Arc::new(
            OpenAi::new(ProviderId::new("openai"), url("http://127.0.0.1:9/v1"))
                .with_chat_model("gpt-4o-mini")
                .with_transcription_model("whisper-1")
                .with_dialect(dialect),
        ),
        Arc::new(
            Azure::new(
                ProviderId::new("azure"),
                url("http://127.0.0.1:9"),
                "2024-10-21",
            )
            .with_chat_model("chat")
            .with_transcription_model("whisper")
            .with_dialect(dialect),
        ),
        Arc::new(
            Anthropic::new(ProviderId::new("anthropic"), url("http://127.0.0.1:9"))
                .with_model("claude-3-5-haiku-latest"),
        ),
        Arc::new(
            Gemini::new(ProviderId::new("gemini"), url("http://127.0.0.1:9"))
                .with_model("gemini-2.0-flash"),
        ),
        Arc::new(
            Deepgram::new(ProviderId::new("deepgram"), url("http://127.0.0.1:9"))
                .with_model("nova-2"),
        ),
    ]
}

/// The catalogue of `providers.toml` variants the SDK's tests use (for [`says_where`]).
#[path = "../../tests/fixtures/config/catalogue.rs"]
#[allow(dead_code)]
mod catalogue;

/// True when a config error says where: a TOML path and/or a line and column.
pub fn says_where(message: &str) -> bool {
    catalogue::says_where(message)
}
