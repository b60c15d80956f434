//! One error type for the whole crate.
//!
//! [`Error`] is opaque (reqwest style): a boxed inner value with a [`kind`](Error::kind) and
//! typed accessors for what the server said — HTTP status, the vendor's error code, its
//! `Retry-After`, its request id — so neither the router nor a caller ever has to look inside
//! the message text. A key never appears in an error: messages from providers are scrubbed
//! of the credential that was sent and truncated to 512 bytes.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use crate::id::ProviderId;

/// A `Result` alias where the error is [`Error`].
///
/// # Examples
///
/// ```
/// use llm_failover::{ChatRequest, Client, Config, Result};
///
/// async fn ask(client: &Client, question: &str) -> Result<String> {
///     Ok(client.chat(ChatRequest::from_prompt(question)).await?.text)
/// }
///
/// fn environments(toml: &str) -> Result<usize> {
///     Ok(Config::from_toml_str(toml)?.environments.len())
/// }
/// assert!(environments("not = [valid").is_err());
/// # let _ = ask;
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Longest provider message kept on an error, in bytes; longer ones are cut at a character
/// boundary and end with `…`.
#[cfg_attr(feature = "test-util", visibility::make(pub))]
pub(crate) const MAX_MESSAGE_LEN: usize = 512;

/// What went wrong, as a condition the caller (and the router) can act on.
///
/// Use [`ErrorKind::disposition`] to see how the router treats each kind.
///
/// # Examples
///
/// ```
/// use llm_failover::{Config, ErrorKind};
///
/// let err = Config::from_toml_str("default_environment = 1").unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::Config);
/// assert_eq!(err.kind().as_str(), "config"); // the name written in batch results
///
/// let advice = match err.kind() {
///     ErrorKind::RateLimited | ErrorKind::QuotaExhausted => "slow down",
///     ErrorKind::Auth | ErrorKind::Config => "fix the setup",
///     _ => "see the message",
/// };
/// assert_eq!(advice, "fix the setup");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The provider throttled this request (HTTP 429 with a short wait).
    RateLimited,
    /// A quota, credit balance or per-day allowance is used up; waiting seconds will not help.
    QuotaExhausted,
    /// The provider is overloaded (Anthropic 529, HTTP 503).
    Overloaded,
    /// The provider failed (other 5xx).
    Server,
    /// The provider reported a conflict (HTTP 409); a later attempt may succeed.
    Conflict,
    /// The request timed out (client-side deadline or HTTP 408).
    Timeout,
    /// The connection could not be made or was cut.
    Connect,
    /// The provider rejected the request as malformed (400, 422).
    InvalidRequest,
    /// The prompt does not fit the model's context window.
    ContextLengthExceeded,
    /// The provider's content filter refused the request or the answer.
    ContentFiltered,
    /// The key was missing, wrong or revoked (401).
    Auth,
    /// The key is valid but not allowed to do this (403).
    PermissionDenied,
    /// The model, deployment or route does not exist (404).
    NotFound,
    /// The request body is larger than the provider accepts (413).
    PayloadTooLarge,
    /// The request costs more than a limit's whole capacity: it can never be admitted.
    RequestTooLarge,
    /// A response could not be understood (malformed JSON, missing field, HTML page…).
    Decode,
    /// The provider answered, but not in the shape the request asked for: a structured
    /// answer ([`ResponseFormat`](crate::ResponseFormat)) that is not JSON or does not match
    /// its schema. Returned at once unless the request asks to fail over on it
    /// ([`RequestOptions::fail_over_on_invalid_answer`](crate::RequestOptions::fail_over_on_invalid_answer)).
    InvalidAnswer,
    /// The provider does not offer this capability (e.g. chat on a speech-to-text provider).
    Unsupported,
    /// The configuration is invalid.
    Config,
    /// A local file (such as an audio file) could not be read.
    Io,
    /// A budget cannot cover this request ([`budget`](crate::budget)): the environment's or a
    /// tenant's, until its window's reset ([`Error::retry_at`], [`Error::retry_after`]); or
    /// every provider's it could go to. Nothing was sent; not retried before the reset.
    BudgetExhausted,
    /// Every provider is cooling down until [`Error::retry_at`].
    AllProvidersUnavailable,
    /// Every attempt failed; [`Error::attempts`] lists them in order.
    AllProvidersFailed,
}

/// How the router reacts to an error of a given kind.
///
/// # Examples
///
/// ```
/// use llm_failover::{Config, Disposition, ErrorKind};
///
/// assert_eq!(ErrorKind::RateLimited.disposition(), Disposition::RateLimited);
/// assert_eq!(ErrorKind::Server.disposition(), Disposition::Transient);
/// assert_eq!(ErrorKind::ContextLengthExceeded.disposition(), Disposition::Terminal);
///
/// let err = Config::from_toml_str("").unwrap_err();
/// assert_eq!(err.disposition(), Disposition::Terminal); // sending it again cannot help
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Disposition {
    /// Throttled: drain the buckets, open the breaker until the stated reset, fail over now.
    RateLimited,
    /// Long-term: open the breaker until the quota resets (or the quota cooldown), fail over.
    QuotaExhausted,
    /// Transient fault: counts toward the breaker threshold; back off; fail over.
    Transient,
    /// Can only fail again: return at once, no retry, no failover.
    Terminal,
}

impl ErrorKind {
    /// How the router treats this kind of error when the server gave no `x-should-retry`.
    pub fn disposition(self) -> Disposition {
        use ErrorKind::*;
        match self {
            RateLimited => Disposition::RateLimited,
            QuotaExhausted => Disposition::QuotaExhausted,
            Overloaded | Server | Conflict | Timeout | Connect | Decode => Disposition::Transient,
            InvalidRequest
            | ContextLengthExceeded
            | ContentFiltered
            | Auth
            | PermissionDenied
            | NotFound
            | PayloadTooLarge
            | RequestTooLarge
            | InvalidAnswer
            | Unsupported
            | Config
            | BudgetExhausted
            | Io => Disposition::Terminal,
            // The same request may succeed later: a provider reopens, a fault passes. An error
            // of these kinds is terminal only when every attempt in it was
            // ([`Error::disposition`]).
            AllProvidersUnavailable | AllProvidersFailed => Disposition::Transient,
        }
    }

    /// A short, stable, lower-case name (`"rate_limited"`), used in batch results and logs.
    pub fn as_str(self) -> &'static str {
        use ErrorKind::*;
        match self {
            RateLimited => "rate_limited",
            QuotaExhausted => "quota_exhausted",
            Overloaded => "overloaded",
            Server => "server",
            Conflict => "conflict",
            Timeout => "timeout",
            Connect => "connect",
            InvalidRequest => "invalid_request",
            ContextLengthExceeded => "context_length_exceeded",
            ContentFiltered => "content_filtered",
            Auth => "auth",
            PermissionDenied => "permission_denied",
            NotFound => "not_found",
            PayloadTooLarge => "payload_too_large",
            RequestTooLarge => "request_too_large",
            Decode => "decode",
            InvalidAnswer => "invalid_answer",
            Unsupported => "unsupported",
            Config => "config",
            Io => "io",
            BudgetExhausted => "budget_exhausted",
            AllProvidersUnavailable => "all_providers_unavailable",
            AllProvidersFailed => "all_providers_failed",
        }
    }

    fn describe(self) -> &'static str {
        use ErrorKind::*;
        match self {
            RateLimited => "rate limited",
            QuotaExhausted => "quota exhausted",
            Overloaded => "overloaded",
            Server => "server error",
            Conflict => "conflict",
            Timeout => "timed out",
            Connect => "connection failed",
            InvalidRequest => "invalid request",
            ContextLengthExceeded => "context length exceeded",
            ContentFiltered => "content filtered",
            Auth => "authentication failed",
            PermissionDenied => "permission denied",
            NotFound => "not found",
            PayloadTooLarge => "payload too large",
            RequestTooLarge => "request too large",
            Decode => "could not decode response",
            InvalidAnswer => "answer does not match the requested format",
            Unsupported => "unsupported",
            Config => "configuration error",
            Io => "I/O error",
            BudgetExhausted => "budget exhausted",
            AllProvidersUnavailable => "all providers unavailable",
            AllProvidersFailed => "all providers failed",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of every fallible operation in this crate.
///
/// Opaque on purpose: match on [`kind`](Error::kind) or use the predicates
/// ([`is_retryable`](Error::is_retryable), [`is_rate_limited`](Error::is_rate_limited), …).
///
/// # Examples
///
/// ```
/// use llm_failover::{Error, ErrorKind};
///
/// fn explain(err: &Error) -> String {
///     match err.kind() {
///         ErrorKind::RateLimited => format!("throttled, retry in {:?}", err.retry_after()),
///         ErrorKind::AllProvidersFailed => format!("{} attempts failed", err.attempts().len()),
///         _ if err.is_retryable() => "transient, try again".to_string(),
///         _ => format!("will fail again: {err}"),
///     }
/// }
/// # let _ = explain;
/// ```
pub struct Error {
    inner: Box<Inner>,
}

struct Inner {
    kind: ErrorKind,
    provider: Option<ProviderId>,
    model: Option<String>,
    status: Option<u16>,
    code: Option<String>,
    message: String,
    retry_after: Option<Duration>,
    retry_at: Option<Instant>,
    request_id: Option<String>,
    should_retry: Option<bool>,
    sends: Option<u32>,
    /// The request never reached the provider: no connection was made.
    undelivered: bool,
    attempts: Vec<Error>,
    source: Option<Box<dyn StdError + Send + Sync>>,
}

impl Error {
    /// An error of `kind` with `message` (truncated to 512 bytes): what an adapter of your
    /// own returns from [`Provider::error`](crate::provider::Provider::error), or a
    /// [`LimiterStore`](crate::ratelimit::LimiterStore) of your own when it fails. The router
    /// treats it by its kind's [`Disposition`]; the provider and model are added for you.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use llm_failover::{Disposition, Error, ErrorKind};
    ///
    /// let err = Error::new(ErrorKind::RateLimited, "slow down")
    ///     .with_status(429)
    ///     .with_code("rate_limit_exceeded")
    ///     .with_retry_after(Some(Duration::from_secs(2)));
    /// assert_eq!(err.disposition(), Disposition::RateLimited);
    /// assert_eq!(err.retry_after(), Some(Duration::from_secs(2)));
    /// assert_eq!(err.status(), Some(429));
    /// ```
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            inner: Box::new(Inner {
                kind,
                provider: None,
                model: None,
                status: None,
                code: None,
                message: truncate(message.into()),
                retry_after: None,
                retry_at: None,
                request_id: None,
                should_retry: None,
                sends: None,
                undelivered: false,
                attempts: Vec::new(),
                source: None,
            }),
        }
    }

    /// A configuration error; `message` names the TOML path or variable at fault.
    pub(crate) fn config(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Config, message)
    }

    /// An SQLite failure as an `Io` error: `{subject}: {doing}: {e}` and a hint for the
    /// common causes (`busy`: what held the lock too long). Never a statement's parameters.
    #[cfg(feature = "sqlite")]
    pub(crate) fn sqlite(subject: &str, busy: &str, doing: &str, e: rusqlite::Error) -> Self {
        let hint = match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
                format!(" (another connection held the lock longer than {busy})")
            }
            Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt) => {
                " (not an SQLite database, or a corrupt one)".to_owned()
            }
            Some(rusqlite::ErrorCode::CannotOpen | rusqlite::ErrorCode::PermissionDenied) => {
                " (check the path and its permissions)".to_owned()
            }
            _ => String::new(),
        };
        Self::new(ErrorKind::Io, format!("{subject}: {doing}: {e}{hint}")).with_source(e)
    }

    /// A response that could not be understood.
    pub(crate) fn decode(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Decode, message)
    }

    /// The provider does not offer `what`.
    pub(crate) fn unsupported(provider: &ProviderId, what: &str) -> Self {
        Self::new(
            ErrorKind::Unsupported,
            format!("provider `{provider}` does not support {what}"),
        )
        .with_provider(provider.clone())
    }

    /// Every attempt failed; `attempts` in the order they were made. Its kind is what they
    /// amount to ([`aggregate_kind`]): throttled everywhere is [`ErrorKind::RateLimited`],
    /// with the shortest wait a provider stated.
    pub(crate) fn all_failed(attempts: Vec<Error>) -> Self {
        let kind = aggregate_kind(&attempts, ErrorKind::AllProvidersFailed);
        let what = match kind {
            ErrorKind::RateLimited | ErrorKind::QuotaExhausted => "throttled by every provider",
            _ => "failed",
        };
        let mut err = Self::new(
            kind,
            format!(
                "{} attempt(s) {what}: [{}]",
                attempts.len(),
                summary(&attempts)
            ),
        );
        err.inner.retry_after = attempts.iter().filter_map(Error::retry_after).min();
        err.inner.attempts = attempts;
        err
    }

    /// The request's deadline of `waited` passed, after `attempts` (kept, in order): a
    /// [`ErrorKind::Timeout`] whatever they were — two providers that hang past the deadline
    /// are a timeout, not "every provider failed".
    pub(crate) fn deadline_passed(waited: Duration, attempts: Vec<Error>) -> Self {
        let mut message = format!(
            "the request's deadline of {:.3}s has passed",
            waited.as_secs_f64()
        );
        note_attempts(&mut message, &attempts);
        let mut err = Self::new(ErrorKind::Timeout, message);
        err.inner.retry_after = attempts.iter().filter_map(Error::retry_after).min();
        err.inner.attempts = attempts;
        err
    }

    /// No provider can be tried before `retry_at`, `wait` from now: past the deadline. Its
    /// kind is what the attempts amount to ([`aggregate_kind`]); with none, or mixed ones,
    /// [`ErrorKind::AllProvidersUnavailable`].
    pub(crate) fn all_unavailable(retry_at: Instant, wait: Duration, attempts: Vec<Error>) -> Self {
        let kind = aggregate_kind(&attempts, ErrorKind::AllProvidersUnavailable);
        let mut message = format!(
            "every provider is closed; the earliest reopens in {:.3}s, past what this request \
             may wait",
            wait.as_secs_f64()
        );
        note_attempts(&mut message, &attempts);
        let mut err = Self::new(kind, message);
        err.inner.retry_at = Some(retry_at);
        err.inner.retry_after = Some(wait);
        err.inner.attempts = attempts;
        err
    }

    /// A budget cannot cover a request until its window ends, `wait` from now (at
    /// `retry_at`).
    pub(crate) fn budget_exhausted(message: String, retry_at: Instant, wait: Duration) -> Self {
        let mut err = Self::new(ErrorKind::BudgetExhausted, message);
        err.inner.retry_at = Some(retry_at);
        err.inner.retry_after = Some(wait);
        err
    }

    /// This error ends a request after `attempts` failed (kept, in order, and noted in the
    /// message): its kind, wait and code stay its own.
    pub(crate) fn after_attempts(mut self, attempts: Vec<Error>) -> Self {
        if !attempts.is_empty() {
            let mut message = std::mem::take(&mut self.inner.message);
            note_attempts(&mut message, &attempts);
            self.inner.message = truncate(message);
            self.inner.attempts = attempts;
        }
        self
    }

    pub(crate) fn with_provider(mut self, provider: ProviderId) -> Self {
        self.inner.provider = Some(provider);
        self
    }

    pub(crate) fn with_model(mut self, model: impl Into<String>) -> Self {
        self.inner.model = Some(model.into());
        self
    }

    /// The HTTP status the provider answered with.
    #[must_use]
    pub fn with_status(mut self, status: u16) -> Self {
        self.inner.status = Some(status);
        self
    }

    /// The provider's own error code or type (`insufficient_quota`, `overloaded_error`, …),
    /// truncated to 512 bytes.
    #[must_use]
    pub fn with_code(mut self, code: impl Into<String>) -> Self {
        self.inner.code = Some(truncate(code.into()));
        self
    }

    /// How long the provider asked to wait, when it said so (`None` leaves it as it is).
    #[must_use]
    pub fn with_retry_after(mut self, after: Option<Duration>) -> Self {
        if after.is_some() {
            self.inner.retry_after = after;
        }
        self
    }

    /// The same error, of another kind: what a classification learns after the body was read
    /// (a 429 whose stated wait is a day is an exhausted quota).
    pub(crate) fn with_kind(mut self, kind: ErrorKind) -> Self {
        self.inner.kind = kind;
        self
    }

    pub(crate) fn with_request_id(mut self, id: Option<String>) -> Self {
        if id.is_some() {
            self.inner.request_id = id.map(truncate);
        }
        self
    }

    pub(crate) fn with_should_retry(mut self, should_retry: Option<bool>) -> Self {
        self.inner.should_retry = should_retry;
        self
    }

    /// Marks a transport error whose request never reached the provider (no connection
    /// was made): nothing can have been done or billed.
    pub(crate) fn undelivered(mut self) -> Self {
        self.inner.undelivered = true;
        self
    }

    /// Whether the request never reached the provider ([`undelivered`](Self::undelivered)).
    pub(crate) fn is_undelivered(&self) -> bool {
        self.inner.undelivered
    }

    pub(crate) fn with_sends(mut self, sends: u32) -> Self {
        self.inner.sends = Some(sends);
        self
    }

    /// The underlying error (an I/O or client error of your store or adapter).
    #[must_use]
    pub fn with_source(mut self, source: impl StdError + Send + Sync + 'static) -> Self {
        self.inner.source = Some(Box::new(source));
        self
    }

    /// Appends a note to the message (`…; key from environment variable X`).
    pub(crate) fn note(mut self, note: &str) -> Self {
        if self.inner.message.is_empty() {
            self.inner.message = note.to_owned();
        } else {
            self.inner.message = format!("{}; {note}", self.inner.message);
        }
        self
    }

    /// Removes every occurrence of `secret` from the message, the vendor code and the request
    /// id (a provider may echo the key in any of them).
    pub(crate) fn scrub(mut self, secret: &str) -> Self {
        if secret.len() >= 4 {
            let clean = |s: &mut String| {
                if s.contains(secret) {
                    *s = s.replace(secret, "[redacted]");
                }
            };
            clean(&mut self.inner.message);
            if let Some(code) = self.inner.code.as_mut() {
                clean(code);
            }
            if let Some(id) = self.inner.request_id.as_mut() {
                clean(id);
            }
        }
        self
    }

    /// What went wrong.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::{Error, ErrorKind};
    /// let e = Error::new(ErrorKind::RateLimited, "slow down").with_status(429);
    /// assert_eq!(e.kind(), ErrorKind::RateLimited);
    /// assert_eq!(e.kind().as_str(), "rate_limited");
    /// ```
    pub fn kind(&self) -> ErrorKind {
        self.inner.kind
    }

    /// How the router treats this error: the kind's [`Disposition`], unless the provider said
    /// otherwise with `x-should-retry`.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::{Error, ErrorKind};
    /// use llm_failover::Disposition;
    ///
    /// let e = Error::new(ErrorKind::Server, "bad gateway").with_status(502);
    /// assert_eq!(e.disposition(), Disposition::Transient);
    /// let e = Error::new(ErrorKind::InvalidRequest, "bad field").with_status(400);
    /// assert_eq!(e.disposition(), Disposition::Terminal);
    /// ```
    pub fn disposition(&self) -> Disposition {
        if matches!(
            self.inner.kind,
            ErrorKind::AllProvidersFailed | ErrorKind::AllProvidersUnavailable
        ) {
            // Terminal only when resending anywhere is pointless: every attempt was.
            let attempts = &self.inner.attempts;
            return if !attempts.is_empty() && attempts.iter().all(Error::is_terminal) {
                Disposition::Terminal
            } else {
                Disposition::Transient
            };
        }
        let by_kind = self.inner.kind.disposition();
        match (self.inner.should_retry, by_kind) {
            (Some(false), Disposition::Transient | Disposition::RateLimited) => {
                Disposition::Terminal
            }
            (Some(true), Disposition::Terminal)
                if self.inner.status.is_some() && !self.is_local() =>
            {
                Disposition::Transient
            }
            _ => by_kind,
        }
    }

    fn is_local(&self) -> bool {
        matches!(
            self.inner.kind,
            ErrorKind::Config
                | ErrorKind::Io
                | ErrorKind::Unsupported
                | ErrorKind::RequestTooLarge
                | ErrorKind::AllProvidersFailed
                | ErrorKind::AllProvidersUnavailable
        )
    }

    /// The same request may succeed if sent again later (to this or another provider):
    /// throttling and transient faults. Quota exhaustion is not retryable on the same provider.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::{Error, ErrorKind};
    /// assert!(Error::new(ErrorKind::Timeout, "no answer").is_retryable());
    /// assert!(!Error::new(ErrorKind::ContextLengthExceeded, "too long").is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.disposition(),
            Disposition::RateLimited | Disposition::Transient
        )
    }

    /// The request can only fail again: resending it anywhere is pointless.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::{Error, ErrorKind};
    /// let e = Error::new(ErrorKind::ContextLengthExceeded, "too long").with_status(400);
    /// assert!(e.is_terminal()); // shorten the prompt: no provider will take it as it is
    /// assert!(!Error::new(ErrorKind::RateLimited, "not now").is_terminal());
    /// ```
    pub fn is_terminal(&self) -> bool {
        self.disposition() == Disposition::Terminal
    }

    /// The provider throttled the request (HTTP 429 or equivalent).
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::{Error, ErrorKind};
    /// assert!(Error::new(ErrorKind::RateLimited, "429").is_rate_limited());
    /// ```
    pub fn is_rate_limited(&self) -> bool {
        self.inner.kind == ErrorKind::RateLimited
    }

    /// A quota, credit or per-day allowance is used up.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::{Error, ErrorKind};
    /// assert!(Error::new(ErrorKind::QuotaExhausted, "out of credits").is_quota_exhausted());
    /// ```
    pub fn is_quota_exhausted(&self) -> bool {
        self.inner.kind == ErrorKind::QuotaExhausted
    }

    /// The request timed out.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::{Error, ErrorKind};
    /// assert!(Error::new(ErrorKind::Timeout, "no answer in 60 s").is_timeout());
    /// ```
    pub fn is_timeout(&self) -> bool {
        self.inner.kind == ErrorKind::Timeout
    }

    /// The connection failed.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::{Error, ErrorKind};
    /// assert!(Error::new(ErrorKind::Connect, "connection refused").is_connect());
    /// ```
    pub fn is_connect(&self) -> bool {
        self.inner.kind == ErrorKind::Connect
    }

    /// The key was missing, wrong or revoked.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::{Error, ErrorKind};
    /// assert!(Error::new(ErrorKind::Auth, "invalid key").with_status(401).is_auth());
    /// ```
    pub fn is_auth(&self) -> bool {
        self.inner.kind == ErrorKind::Auth
    }

    /// The configuration is invalid.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::{Error, ErrorKind};
    /// use llm_failover::config::Config;
    ///
    /// let e = "default_environment = 3".parse::<Config>().unwrap_err();
    /// assert!(e.is_config());
    /// ```
    pub fn is_config(&self) -> bool {
        self.inner.kind == ErrorKind::Config
    }

    /// A response could not be decoded.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::{Error, ErrorKind};
    /// assert!(Error::new(ErrorKind::Decode, "not JSON").is_decode());
    /// ```
    pub fn is_decode(&self) -> bool {
        self.inner.kind == ErrorKind::Decode
    }

    /// The provider that produced this error, if one did.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::{Error, ErrorKind};
    /// use llm_failover::config::Config;
    ///
    /// let config: Config = r#"
    ///     default_environment = "prod"
    ///     [environments.prod]
    ///     chat = ["openai"]
    ///     [providers.openai]
    ///     kind = "openai"
    ///     base_url = "https://api.openai.com/v1"
    ///     model = "gpt-4o-mini"
    ///     api_key_env = { prod = "OPENAI_API_KEY" }
    /// "#.parse()?;
    /// let e = config.credential("openai", "prod", &|_| None).unwrap_err();
    /// assert_eq!(e.provider().map(|p| p.as_str()), Some("openai"));
    /// # Ok::<(), Error>(())
    /// ```
    pub fn provider(&self) -> Option<&ProviderId> {
        self.inner.provider.as_ref()
    }

    /// The model the failed request was for, if known.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::{Error, ErrorKind};
    /// let e = Error::new(ErrorKind::NotFound, "no such model");
    /// assert_eq!(e.model(), None); // set by the client for a provider's answer
    /// ```
    pub fn model(&self) -> Option<&str> {
        self.inner.model.as_deref()
    }

    /// The HTTP status the provider answered with, if it answered.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::{Error, ErrorKind};
    /// let e = Error::new(ErrorKind::Server, "unavailable").with_status(503);
    /// assert_eq!(e.status(), Some(503));
    /// ```
    pub fn status(&self) -> Option<u16> {
        self.inner.status
    }

    /// The vendor's own error code or type (`insufficient_quota`, `overloaded_error`, …);
    /// for [`ErrorKind::BudgetExhausted`], whose budget: `environment_budget`,
    /// `tenant_budget` or `provider_budget`.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::{Error, ErrorKind};
    /// let e = Error::new(ErrorKind::QuotaExhausted, "no credit").with_code("insufficient_quota");
    /// assert_eq!(e.code(), Some("insufficient_quota"));
    /// ```
    pub fn code(&self) -> Option<&str> {
        self.inner.code.as_deref()
    }

    /// The message: the provider's (truncated, key scrubbed) or ours.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::{Error, ErrorKind};
    /// let e = Error::new(ErrorKind::InvalidRequest, "max_tokens must be positive");
    /// assert_eq!(e.message(), "max_tokens must be positive");
    /// ```
    pub fn message(&self) -> &str {
        &self.inner.message
    }

    /// How long the provider asked us to wait, when it said so.
    ///
    /// For [`ErrorKind::AllProvidersUnavailable`], the wait until the earliest reopen.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::{Error, ErrorKind};
    /// use std::time::Duration;
    ///
    /// let e = Error::new(ErrorKind::RateLimited, "slow down")
    ///     .with_status(429)
    ///     .with_retry_after(Some(Duration::from_secs(20)));
    /// assert_eq!(e.retry_after(), Some(Duration::from_secs(20)));
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        self.inner.retry_after
    }

    /// For an error that ended a request because every provider is closed past its deadline
    /// ([`ErrorKind::AllProvidersUnavailable`], or [`ErrorKind::RateLimited`] when they are
    /// all throttled): when the earliest provider reopens.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::{Error, ErrorKind};
    /// // Set by the client on an error that ended a request because every provider is closed.
    /// assert_eq!(Error::new(ErrorKind::RateLimited, "429").retry_at(), None);
    /// ```
    pub fn retry_at(&self) -> Option<Instant> {
        self.inner.retry_at
    }

    /// The provider's request id (`x-request-id`, `request-id`, …), for support tickets.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::{Error, ErrorKind};
    /// // Set from the provider's answer (`x-request-id`, `request-id`, …) by its adapter.
    /// assert_eq!(Error::new(ErrorKind::Server, "oops").request_id(), None);
    /// ```
    pub fn request_id(&self) -> Option<&str> {
        self.inner.request_id.as_deref()
    }

    /// The `x-should-retry` header, when the provider sent one.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::{Error, ErrorKind};
    /// // Set from an `x-should-retry` header by the adapter that read the answer.
    /// assert_eq!(Error::new(ErrorKind::Server, "oops").should_retry(), None);
    /// ```
    pub fn should_retry(&self) -> Option<bool> {
        self.inner.should_retry
    }

    /// How many requests the client sent for the call that returned this error (0 when it
    /// failed before sending anything), for errors returned by
    /// [`Client`](crate::Client); `None` for errors of a single exchange.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::{Error, ErrorKind};
    /// // Set by the client: how many requests went out for the call.
    /// assert_eq!(Error::new(ErrorKind::Timeout, "slow").sends(), None);
    /// ```
    pub fn sends(&self) -> Option<u32> {
        self.inner.sends
    }

    /// For an error that ended a request after attempts at several providers (or several at
    /// one): every attempt's error, in the order the attempts were made. Such an error is
    /// [`ErrorKind::RateLimited`] (or [`ErrorKind::QuotaExhausted`]) when every provider
    /// throttled the request, else [`ErrorKind::AllProvidersFailed`] or
    /// [`ErrorKind::AllProvidersUnavailable`]. Empty for the error of a single attempt.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::{Error, ErrorKind};
    /// // What a client returns after trying two providers (see the crate README's
    /// // "Handling errors" for one seen through a real client).
    /// # fn handle(e: &Error) {
    /// for attempt in e.attempts() {
    ///     let provider = attempt.provider().map_or("-", |p| p.as_str());
    ///     eprintln!("{provider}: {} ({:?})", attempt.kind(), attempt.status());
    /// }
    /// # }
    /// assert!(Error::new(ErrorKind::Timeout, "one attempt").attempts().is_empty());
    /// ```
    pub fn attempts(&self) -> &[Error] {
        &self.inner.attempts
    }
}

/// ` (N attempt(s): [provider: kind, …])` after `message`, when there were attempts.
fn note_attempts(message: &mut String, attempts: &[Error]) {
    if !attempts.is_empty() {
        message.push_str(&format!(
            " ({} attempt(s): [{}])",
            attempts.len(),
            summary(attempts)
        ));
    }
}

/// `provider: kind` for each attempt, in order.
fn summary(attempts: &[Error]) -> String {
    attempts
        .iter()
        .map(|e| match e.provider() {
            Some(p) => format!("{p}: {}", e.kind()),
            None => e.kind().to_string(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a request that ended after several attempts amounts to (a pure rule): throttled by
/// every provider that answered (429s, exhausted quotas) is [`ErrorKind::RateLimited`] — or
/// [`ErrorKind::QuotaExhausted`] when every one was an exhausted quota — so that code matching
/// on the kind, or dropping terminal work, sees what happened; anything else keeps `base`
/// ([`ErrorKind::AllProvidersFailed`] or [`ErrorKind::AllProvidersUnavailable`]). The router's
/// own deadline marker (an error without a provider) says nothing about the providers and is
/// left out.
pub(crate) fn aggregate_kind(attempts: &[Error], base: ErrorKind) -> ErrorKind {
    let answered: Vec<Disposition> = attempts
        .iter()
        .filter(|e| e.provider().is_some())
        .map(Error::disposition)
        .collect();
    let all = |f: fn(&Disposition) -> bool| !answered.is_empty() && answered.iter().all(f);
    // Every provider answered, each in the wrong shape: the answers are the trouble.
    if !attempts.is_empty()
        && attempts
            .iter()
            .all(|e| e.kind() == ErrorKind::InvalidAnswer)
    {
        return ErrorKind::InvalidAnswer;
    }
    if all(|d| *d == Disposition::QuotaExhausted) {
        ErrorKind::QuotaExhausted
    } else if all(|d| matches!(d, Disposition::RateLimited | Disposition::QuotaExhausted)) {
        ErrorKind::RateLimited
    } else {
        base
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.inner;
        let mut d = f.debug_struct("Error");
        d.field("kind", &i.kind);
        if let Some(p) = &i.provider {
            d.field("provider", p);
        }
        if let Some(m) = &i.model {
            d.field("model", m);
        }
        if let Some(s) = i.status {
            d.field("status", &s);
        }
        if let Some(c) = &i.code {
            d.field("code", c);
        }
        d.field("message", &i.message);
        if let Some(r) = i.retry_after {
            d.field("retry_after", &r);
        }
        if let Some(r) = &i.request_id {
            d.field("request_id", r);
        }
        if let Some(s) = i.should_retry {
            d.field("should_retry", &s);
        }
        if let Some(n) = i.sends {
            d.field("sends", &n);
        }
        if !i.attempts.is_empty() {
            d.field("attempts", &i.attempts);
        }
        if let Some(s) = &i.source {
            d.field("source", s);
        }
        d.finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.inner;
        if let Some(p) = &i.provider {
            write!(f, "{p}: ")?;
        }
        f.write_str(i.kind.describe())?;
        if let Some(s) = i.status {
            write!(f, " (HTTP {s})")?;
        }
        if !i.message.is_empty() {
            write!(f, ": {}", i.message)?;
        }
        if let Some(r) = i.retry_after {
            // An aggregate's message already says when the earliest provider reopens.
            if i.retry_at.is_none() {
                write!(f, "; retry after {:.3}s", r.as_secs_f64())?;
            }
        }
        if let Some(id) = &i.request_id {
            write!(f, " [request id {id}]")?;
        }
        Ok(())
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.inner
            .source
            .as_deref()
            .map(|s| s as &(dyn StdError + 'static))
    }
}

/// Cuts `s` to [`MAX_MESSAGE_LEN`] bytes at a character boundary.
pub(crate) fn truncate(mut s: String) -> String {
    if s.len() > MAX_MESSAGE_LEN {
        let mut end = MAX_MESSAGE_LEN;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An attempt's error: `kind` from provider `p`, or the router's own marker (no provider).
    fn at(kind: ErrorKind, p: Option<&str>) -> Error {
        let e = Error::new(kind, "x");
        match p {
            Some(p) => e.with_provider(ProviderId::new(p)),
            None => e,
        }
    }

    #[test]
    fn an_aggregate_is_what_its_attempts_amount_to() {
        use ErrorKind::*;
        let (a, b) = (Some("a"), Some("b"));
        let cases: Vec<(&str, Vec<Error>, ErrorKind, Disposition)> = vec![
            (
                "throttled everywhere",
                vec![at(RateLimited, a), at(RateLimited, b)],
                RateLimited,
                Disposition::RateLimited,
            ),
            (
                "throttled, then the deadline",
                vec![at(RateLimited, a), at(Timeout, None)],
                RateLimited,
                Disposition::RateLimited,
            ),
            (
                "quota everywhere",
                vec![at(QuotaExhausted, a), at(QuotaExhausted, b)],
                QuotaExhausted,
                Disposition::QuotaExhausted,
            ),
            (
                "quota and throttled",
                vec![at(QuotaExhausted, a), at(RateLimited, b)],
                RateLimited,
                Disposition::RateLimited,
            ),
            (
                "a fault among them",
                vec![at(Server, a), at(RateLimited, b)],
                AllProvidersFailed,
                Disposition::Transient,
            ),
            (
                "faults only",
                vec![at(Server, a), at(Timeout, b)],
                AllProvidersFailed,
                Disposition::Transient,
            ),
            (
                "every key rejected",
                vec![at(Auth, a), at(PermissionDenied, b)],
                AllProvidersFailed,
                Disposition::Terminal,
            ),
            (
                "a rejected key and a fault",
                vec![at(Auth, a), at(Server, b)],
                AllProvidersFailed,
                Disposition::Transient,
            ),
            (
                "only the deadline",
                vec![at(Timeout, None)],
                AllProvidersFailed,
                Disposition::Transient,
            ),
            (
                "nothing",
                vec![],
                AllProvidersFailed,
                Disposition::Transient,
            ),
        ];
        for (name, attempts, kind, disposition) in cases {
            let n = attempts.len();
            let err = Error::all_failed(attempts);
            assert_eq!(
                (err.kind(), err.disposition()),
                (kind, disposition),
                "{name}"
            );
            assert_eq!(err.attempts().len(), n, "{name}: every attempt kept");
            assert_eq!(
                err.is_terminal(),
                disposition == Disposition::Terminal,
                "{name}"
            );
        }
        // Unavailable: the same rule; with no attempt, unavailable and retryable.
        let now = Instant::now();
        let err = Error::all_unavailable(now, Duration::from_secs(9), vec![at(RateLimited, a)]);
        assert_eq!(err.kind(), RateLimited);
        assert_eq!(
            (err.retry_after(), err.retry_at()),
            (Some(Duration::from_secs(9)), Some(now))
        );
        let err = Error::all_unavailable(now, Duration::from_secs(9), vec![]);
        assert_eq!(err.kind(), AllProvidersUnavailable);
        assert!(err.is_retryable() && !err.is_terminal());
        // The shortest stated wait is the aggregate's.
        let err = Error::all_failed(vec![
            at(RateLimited, a).with_retry_after(Some(Duration::from_secs(30))),
            at(RateLimited, b).with_retry_after(Some(Duration::from_secs(4))),
        ]);
        assert_eq!(err.retry_after(), Some(Duration::from_secs(4)));
        assert!(
            err.to_string().contains("throttled by every provider"),
            "{err}"
        );
    }

    #[test]
    fn error_is_one_pointer_and_thread_safe() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<Error>();
        assert_eq!(std::mem::size_of::<Error>(), std::mem::size_of::<usize>());
    }

    #[test]
    fn long_messages_are_truncated_at_a_char_boundary() {
        let long = "é".repeat(MAX_MESSAGE_LEN);
        let err = Error::new(ErrorKind::Server, long);
        assert!(err.message().len() <= MAX_MESSAGE_LEN + '…'.len_utf8());
        assert!(err.message().ends_with('…'));
    }

    #[test]
    fn should_retry_false_makes_a_transient_error_terminal() {
        let err = Error::new(ErrorKind::Server, "boom")
            .with_status(500)
            .with_should_retry(Some(false));
        assert_eq!(err.disposition(), Disposition::Terminal);
        assert!(!err.is_retryable());
    }

    #[test]
    fn should_retry_true_makes_a_provider_4xx_transient() {
        let err = Error::new(ErrorKind::InvalidRequest, "lock timeout")
            .with_status(400)
            .with_should_retry(Some(true));
        assert_eq!(err.disposition(), Disposition::Transient);
    }

    #[test]
    fn should_retry_true_never_retries_local_errors() {
        let err = Error::new(ErrorKind::RequestTooLarge, "too big")
            .with_status(429)
            .with_should_retry(Some(true));
        assert_eq!(err.disposition(), Disposition::Terminal);
    }

    #[test]
    fn scrub_removes_the_secret_from_the_message() {
        let err = Error::new(ErrorKind::Auth, "Incorrect API key provided: sk-secret-123")
            .scrub("sk-secret-123");
        assert!(!err.message().contains("sk-secret-123"));
        assert!(!format!("{err:?} {err}").contains("sk-secret-123"));
    }

    #[test]
    fn scrub_removes_the_secret_from_code_and_request_id() {
        let err = Error::new(ErrorKind::Auth, "bad key")
            .with_code("invalid key sk-secret-123")
            .with_request_id(Some("req-sk-secret-123".to_owned()))
            .scrub("sk-secret-123");
        assert!(!format!("{err:?} {err}").contains("sk-secret-123"));
        assert_eq!(err.code(), Some("invalid key [redacted]"));
    }

    #[test]
    fn all_failed_keeps_attempts_in_order() {
        let a = Error::new(ErrorKind::Server, "a").with_provider(ProviderId::new("one"));
        let b = Error::new(ErrorKind::RateLimited, "b").with_provider(ProviderId::new("two"));
        let err = Error::all_failed(vec![a, b]);
        let order: Vec<_> = err
            .attempts()
            .iter()
            .map(|e| e.provider().unwrap().as_str().to_owned())
            .collect();
        assert_eq!(order, ["one", "two"]);
        assert!(err.to_string().contains("one: server, two: rate_limited"));
    }
}
