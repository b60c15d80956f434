//! What one response said about the provider's limits.

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

/// The window a limit counts over.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use llm_failover::ratelimit::Per;
///
/// assert_eq!(Per::Minute.duration(), Some(Duration::from_secs(60)));
/// assert_eq!(Per::Day.duration(), Some(Duration::from_secs(86_400)));
/// assert_eq!(Per::Unknown.duration(), None);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Per {
    /// Per minute (RPM, TPM).
    Minute,
    /// Per day (RPD, TPD).
    Day,
    /// The provider did not say; the limiter uses only `remaining` and `reset_at`.
    #[default]
    Unknown,
}

impl Per {
    /// The window's length, when known.
    pub fn duration(self) -> Option<Duration> {
        match self {
            Per::Minute => Some(Duration::from_secs(60)),
            Per::Day => Some(Duration::from_secs(86_400)),
            Per::Unknown => None,
        }
    }
}

/// One limit as a response stated it. Every field is optional: an absent header is unknown,
/// never zero.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use llm_failover::ratelimit::{Per, Window};
/// use llm_failover::LimitReport;
///
/// let reset_at = tokio::time::Instant::now() + Duration::from_secs(20);
/// let requests = Window {
///     limit: Some(500),
///     remaining: Some(0),
///     reset_at: Some(reset_at),
///     per: Per::Minute,
/// };
/// assert!(!requests.is_empty() && Window::default().is_empty());
///
/// let mut report = LimitReport::default();
/// report.requests = Some(requests);
/// assert_eq!(report.exhausted_until(), Some(reset_at));
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    /// The limit per window (capacity).
    pub limit: Option<u64>,
    /// What is left now.
    pub remaining: Option<u64>,
    /// When the window is full again (converted from the header's form once, when parsed).
    pub reset_at: Option<Instant>,
    /// The window the limit counts over.
    pub per: Per,
}

impl fmt::Debug for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Window")
            .field("limit", &self.limit)
            .field("remaining", &self.remaining)
            .field("reset_at", &self.reset_at.map(FromNow))
            .field("per", &self.per)
            .finish()
    }
}

/// An instant shown as where it stands from now on the runtime's clock
/// (`tokio::time::Instant::now`, paused time included): `in 42.0 s`, `now`, `3.0 s ago`.
/// An `Instant`'s own `Debug` is the monotonic clock's raw reading (`Instant { tv_sec: …,
/// tv_nsec: … }`), which tells a reader nothing. For display only: no decision reads it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct FromNow(pub(crate) Instant);

impl fmt::Debug for FromNow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let now = Instant::now();
        if self.0 > now {
            write!(f, "in {:.1} s", (self.0 - now).as_secs_f64())
        } else if self.0 < now {
            write!(f, "{:.1} s ago", (now - self.0).as_secs_f64())
        } else {
            f.write_str("now")
        }
    }
}

impl Window {
    /// True when no field carries information.
    pub fn is_empty(&self) -> bool {
        self.limit.is_none() && self.remaining.is_none() && self.reset_at.is_none()
    }
}

/// The rate-limit state stated by one response's headers (and, for some providers, its error
/// body).
///
/// Produced by each adapter's [`limit_report`](crate::provider::Provider::limit_report) (and
/// [`error_limit_report`](crate::provider::Provider::error_limit_report) for an error) and
/// consumed by the limiter: a stated `remaining` is the truth at the moment it was stated, so
/// it may raise a level as well as lower it (less what was booked after that request was
/// sent); a stated `limit` above a configured one is not believed.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use reqwest::header::{HeaderMap, HeaderValue};
/// use llm_failover::clock::{Clock, TokioClock};
/// use llm_failover::ratelimit::{parse_limit_headers, HeaderDialect};
///
/// let mut headers = HeaderMap::new();
/// headers.insert("x-ratelimit-remaining-requests", HeaderValue::from_static("0"));
/// headers.insert("x-ratelimit-reset-requests", HeaderValue::from_static("2s"));
/// headers.insert("retry-after", HeaderValue::from_static("2"));
///
/// let now = TokioClock.both();
/// let report = parse_limit_headers(HeaderDialect::OpenAi, &headers, now);
/// assert_eq!(report.retry_after, Some(Duration::from_secs(2)));
/// assert_eq!(report.exhausted_until(), Some(now.instant + Duration::from_secs(2)));
/// assert!(!report.is_empty());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimitReport {
    /// Requests (per minute, or per day for Groq).
    pub requests: Option<Window>,
    /// Tokens, input and output together.
    pub tokens: Option<Window>,
    /// Input tokens (Anthropic).
    pub input_tokens: Option<Window>,
    /// Output tokens (Anthropic).
    pub output_tokens: Option<Window>,
    /// How long the provider asked us to wait (`retry-after-ms`, `Retry-After`, RetryInfo,
    /// a delay in the message), already validated: never negative, past or absurd.
    pub retry_after: Option<Duration>,
    /// `x-should-retry`, when sent.
    pub should_retry: Option<bool>,
}

impl LimitReport {
    /// True when the report says nothing.
    pub fn is_empty(&self) -> bool {
        let empty = |w: &Option<Window>| w.as_ref().is_none_or(Window::is_empty);
        empty(&self.requests)
            && empty(&self.tokens)
            && empty(&self.input_tokens)
            && empty(&self.output_tokens)
            && self.retry_after.is_none()
            && self.should_retry.is_none()
    }

    /// The windows the report states: requests, tokens, input tokens, output tokens.
    pub fn windows(&self) -> impl Iterator<Item = &Window> {
        [
            &self.requests,
            &self.tokens,
            &self.input_tokens,
            &self.output_tokens,
        ]
        .into_iter()
        .flatten()
    }

    /// Fills what this report leaves unknown from `other` (a second source of the same
    /// response: limits an error body carries beside its headers). What this one states is kept.
    pub(crate) fn fill_from(&mut self, other: LimitReport) {
        self.requests = self.requests.or(other.requests);
        self.tokens = self.tokens.or(other.tokens);
        self.input_tokens = self.input_tokens.or(other.input_tokens);
        self.output_tokens = self.output_tokens.or(other.output_tokens);
        self.retry_after = self.retry_after.or(other.retry_after);
        self.should_retry = self.should_retry.or(other.should_retry);
    }

    /// The latest `reset_at` among windows that are exhausted (`remaining == 0`): the earliest
    /// moment the provider says a request could pass again.
    pub fn exhausted_until(&self) -> Option<Instant> {
        self.windows()
            .filter(|w| w.remaining == Some(0))
            .filter_map(|w| w.reset_at)
            .max()
    }

    /// What this report breaks of the rules every parser keeps, whatever the headers said
    /// (`None`: nothing): no empty window, no reset before `now`, a `retry_after` that is
    /// positive and at most [`MAX_SANE_RETRY_AFTER`](super::MAX_SANE_RETRY_AFTER). The
    /// property tests and fuzzers check every report against it.
    #[cfg_attr(feature = "test-util", visibility::make(pub))]
    #[cfg_attr(not(feature = "test-util"), allow(dead_code))]
    pub(crate) fn invariant_violation(&self, now: Instant) -> Option<String> {
        for w in self.windows() {
            if w.is_empty() {
                return Some(format!("an empty window was kept: {w:?}"));
            }
            if w.reset_at.is_some_and(|at| at < now) {
                return Some(format!("a reset in the past: {w:?}"));
            }
        }
        match self.retry_after {
            Some(d) if d.is_zero() => Some("a zero delay".to_owned()),
            Some(d) if d > super::MAX_SANE_RETRY_AFTER => Some(format!("an absurd delay: {d:?}")),
            _ => None,
        }
    }
}

/// Which family of rate-limit headers a provider sends, and how to read them.
///
/// Every dialect also falls back to the generic forms (IETF draft `RateLimit` /
/// `RateLimit-Policy`, `X-RateLimit-{Limit,Remaining,Reset}`) when its own headers are absent.
///
/// # Examples
///
/// The same header means a different window for Groq:
///
/// ```
/// use reqwest::header::{HeaderMap, HeaderValue};
/// use llm_failover::clock::{Clock, TokioClock};
/// use llm_failover::ratelimit::{parse_limit_headers, HeaderDialect, Per};
///
/// let mut headers = HeaderMap::new();
/// headers.insert("x-ratelimit-limit-requests", HeaderValue::from_static("14400"));
/// let window = |dialect| parse_limit_headers(dialect, &headers, TokioClock.both()).requests;
/// assert_eq!(window(HeaderDialect::OpenAi).unwrap().per, Per::Minute);
/// assert_eq!(window(HeaderDialect::Groq).unwrap().per, Per::Day);
///
/// // `header_dialect = "groq"` in providers.toml:
/// assert_eq!(HeaderDialect::from_name("groq"), Some(HeaderDialect::Groq));
/// assert_eq!(HeaderDialect::Groq.as_str(), "groq");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HeaderDialect {
    /// OpenAI and most OpenAI-compatible hosts (Together, xAI, DeepSeek, …):
    /// `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, Go-style reset durations,
    /// per minute.
    #[default]
    OpenAi,
    /// Groq: the OpenAI names, but the request headers count per day and the token headers
    /// per minute.
    Groq,
    /// Azure OpenAI: `x-ratelimit-remaining-{requests,tokens}`, `x-rate-limit-reset-tokens`
    /// in bare seconds (`-1` = unknown), `retry-after-ms`.
    Azure,
    /// Anthropic: `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-*`,
    /// RFC 3339 resets.
    Anthropic,
    /// OpenRouter and others: `X-RateLimit-{Limit,Remaining,Reset}` with epoch seconds or
    /// epoch milliseconds, plus the IETF draft fields.
    Generic,
}

impl HeaderDialect {
    /// The name used in `providers.toml` (`header_dialect = "groq"`).
    pub fn as_str(self) -> &'static str {
        match self {
            HeaderDialect::OpenAi => "openai",
            HeaderDialect::Groq => "groq",
            HeaderDialect::Azure => "azure",
            HeaderDialect::Anthropic => "anthropic",
            HeaderDialect::Generic => "generic",
        }
    }

    /// Parses a name as written in `providers.toml`.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "openai" => HeaderDialect::OpenAi,
            "groq" => HeaderDialect::Groq,
            "azure" => HeaderDialect::Azure,
            "anthropic" => HeaderDialect::Anthropic,
            "generic" => HeaderDialect::Generic,
            _ => return None,
        })
    }
}
