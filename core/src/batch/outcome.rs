//! [`ItemOutcome`]: how one item ended, and its JSON line.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::input::InputError;
use super::key::ItemKey;
use crate::error::{Error, ErrorKind};
use crate::id::ProviderId;
use crate::types::price::Cost;
use crate::types::{ChatResponse, EmbeddingResponse, Usage};

/// How one item ended: exactly one per item that was started.
///
/// Its JSON line (see [`to_json_line`](Self::to_json_line)) is, on success,
///
/// ```json
/// {"id":"q1","ok":true,"provider":"openai","model":"gpt-4o-mini","text":"…",
///  "usage":{"input_tokens":12,"output_tokens":30},"attempts":1,"latency_ms":840,
///  "lane":"live"}
/// ```
///
/// and on failure
///
/// ```json
/// {"id":"q2","ok":false,"error":{"kind":"context_length_exceeded","status":400,
///  "provider":"openai","message":"…"},"attempts":1}
/// ```
///
/// An embedding item's line has `vectors` (one array of numbers per input, in the input's
/// order) in place of `text`, and `usage` with `output_tokens` 0:
///
/// ```json
/// {"id":"d1","ok":true,"provider":"openai","model":"text-embedding-3-small",
///  "vectors":[[0.0123,-0.0456,…]],"usage":{"input_tokens":5,"output_tokens":0},
///  "attempts":1,"latency_ms":120,"lane":"live"}
/// ```
///
/// An answer served from the response cache ([`cache`](crate::cache)) also has
/// `"cached":true` (and `"attempts":0`: nothing was sent); other lines have no `cached` field.
/// `usage` is `null` when the provider reported none; `status` and `provider` are `null`
/// when no provider answered. A bad input line adds `"line": N` to its error; one with no id
/// of its own to report under (not JSON, no usable `id`, a repeated id) has `"line": N` in
/// place of `"id"` ([`ItemKey::Line`]):
///
/// ```json
/// {"line":7,"ok":false,"error":{"kind":"invalid_input","status":null,"provider":null,
///  "message":"line 7: not valid JSON (…)","line":7},"attempts":0}
/// ```
///
/// # Examples
///
/// ```
/// use llm_failover::batch::{InputReader, ItemOutcome};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut input = InputReader::new(&b"\n{\"id\": \"q2\"}\nnot json\n"[..]);
/// let bad = input.next().await?.unwrap().unwrap_err(); // no prompt
/// let outcome = ItemOutcome::invalid_input(&bad);
/// assert!(!outcome.is_ok());
///
/// let line: serde_json::Value = serde_json::from_str(&outcome.to_json_line())?;
/// assert_eq!(line["id"], "q2");
/// assert_eq!(line["error"]["kind"], "invalid_input");
/// assert_eq!(line["error"]["line"], 2);
///
/// let no_id = ItemOutcome::invalid_input(&input.next().await?.unwrap().unwrap_err());
/// let line: serde_json::Value = serde_json::from_str(&no_id.to_json_line())?;
/// assert_eq!((line.get("id"), &line["line"]), (None, &serde_json::json!(3)));
/// # Ok(()) }
/// ```
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub struct ItemOutcome {
    /// The item's id, or the number of a bad input line that has none.
    pub key: ItemKey,
    /// The answer, or why there is none.
    pub result: Result<Answer, Failure>,
}

impl fmt::Debug for ItemOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("ItemOutcome");
        d.field("key", &self.key);
        match &self.result {
            Ok(a) => d.field("answer", a),
            Err(e) => d.field("failure", e),
        };
        d.finish()
    }
}

/// A successful answer.
///
/// `Debug` shows the length of the text, never the text.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use llm_failover::batch::{Answer, ItemOutcome};
/// use llm_failover::{ChatResponse, ProviderId};
///
/// let response = ChatResponse::new(ProviderId::new("openai"), "gpt-4o-mini", "Paris");
/// let answer = Answer::from_response(response, Duration::from_millis(840));
/// assert_eq!((answer.text.as_str(), answer.attempts), ("Paris", 1));
///
/// let line = ItemOutcome::ok("q1", answer).to_json_line();
/// assert!(line.contains(r#""latency_ms":840"#));
/// ```
#[derive(Clone, PartialEq)]
#[non_exhaustive]
pub struct Answer {
    /// The provider that answered.
    pub provider: ProviderId,
    /// The model, as the provider named it.
    pub model: String,
    /// The generated text (empty for an embedding).
    pub text: String,
    /// An embedding item's vectors, one per input in order (`None` for a chat).
    pub vectors: Option<Vec<Vec<f32>>>,
    /// Tokens, when the provider reported them.
    pub usage: Option<Usage>,
    /// Attempts the router made (1 = first try; 0 for an answer from the cache).
    pub attempts: u32,
    /// From the start of the item (admission waits included) to its answer.
    pub latency: Duration,
    /// Served from the response cache ([`Origin::Cache`](crate::Origin::Cache)): the
    /// provider's earlier answer to the same request, nothing sent. `usage` is then what that
    /// answer used when it was first asked.
    pub cached: bool,
    /// Which lane answered: a live request, or the provider's Batch API
    /// ([`bulk`](crate::bulk)).
    pub lane: Lane,
    /// What it cost by its usage, where its model has a price (nothing, from the cache).
    pub cost: Option<Cost>,
}

/// Which way an item went to its provider.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Lane {
    /// A live request through the router.
    #[default]
    Live,
    /// The provider's Batch API: hours, half price ([`bulk`](crate::bulk)).
    ProviderBatch,
}

impl Lane {
    /// Its name in a results line and on the command line: `live`, `provider-batch`.
    pub fn as_str(self) -> &'static str {
        match self {
            Lane::Live => "live",
            Lane::ProviderBatch => "provider-batch",
        }
    }
}

impl fmt::Debug for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Answer")
            .field("provider", &self.provider)
            .field("model", &self.model)
            .field("text_len", &self.text.len())
            .field("vectors", &self.vectors.as_ref().map(Vec::len))
            .field("usage", &self.usage)
            .field("attempts", &self.attempts)
            .field("latency", &self.latency)
            .field("cached", &self.cached)
            .field("lane", &self.lane)
            .field("cost", &self.cost)
            .finish()
    }
}

impl Answer {
    /// The answer in `response`, which took `latency`.
    pub fn from_response(response: ChatResponse, latency: Duration) -> Self {
        Answer {
            cached: response.origin.is_cache(),
            provider: response.provider,
            model: response.model,
            text: response.text,
            vectors: None,
            usage: response.usage,
            attempts: response.attempts,
            latency,
            lane: Lane::Live,
            cost: response.spend.and_then(|s| s.actual),
        }
    }

    /// The vectors in `response`, which took `latency`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use llm_failover::batch::{Answer, ItemOutcome};
    /// use llm_failover::{EmbeddingResponse, ProviderId};
    ///
    /// let response = EmbeddingResponse::new(ProviderId::new("openai"), "text-embedding-3-small",
    ///     vec![vec![0.5, -0.25]]);
    /// let answer = Answer::from_embedding(response, Duration::from_millis(120));
    /// let line: serde_json::Value =
    ///     serde_json::from_str(&ItemOutcome::ok("d1", answer).to_json_line()).unwrap();
    /// assert_eq!(line["vectors"], serde_json::json!([[0.5, -0.25]]));
    /// assert_eq!(line.get("text"), None);
    /// ```
    pub fn from_embedding(response: EmbeddingResponse, latency: Duration) -> Self {
        Answer {
            cached: response.origin.is_cache(),
            provider: response.provider,
            model: response.model,
            text: String::new(),
            vectors: Some(response.vectors),
            usage: response.usage,
            attempts: response.attempts,
            latency,
            lane: Lane::Live,
            cost: response.spend.and_then(|s| s.actual),
        }
    }
}

/// What kind of failure ended an item.
///
/// # Examples
///
/// ```
/// use llm_failover::batch::FailureKind;
/// use llm_failover::{Disposition, ErrorKind};
///
/// /// Whether rerunning the item as it is could succeed.
/// fn worth_rerunning(kind: FailureKind) -> bool {
///     match kind {
///         FailureKind::Request(k) => k.disposition() != Disposition::Terminal,
///         FailureKind::InvalidInput => false, // fix the input line first
///         _ => true,
///     }
/// }
/// assert!(worth_rerunning(FailureKind::Request(ErrorKind::RateLimited)));
/// assert!(!worth_rerunning(FailureKind::Request(ErrorKind::ContextLengthExceeded)));
/// assert_eq!(FailureKind::Request(ErrorKind::RateLimited).as_str(), "rate_limited");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureKind {
    /// The request failed with this error kind.
    Request(ErrorKind),
    /// The input line could not be turned into a request.
    InvalidInput,
    /// The task running the item panicked (a bug: please report it).
    Panicked,
}

impl FailureKind {
    /// The stable name written in results: an [`ErrorKind::as_str`] name, `invalid_input` or
    /// `panicked`.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Request(k) => k.as_str(),
            FailureKind::InvalidInput => "invalid_input",
            FailureKind::Panicked => "panicked",
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A labelled failure.
///
/// # Examples
///
/// ```
/// use reqwest::header::HeaderMap;
/// use llm_failover::batch::{Failure, FailureKind};
/// use llm_failover::clock::{Clock, TokioClock};
/// use llm_failover::http::RawResponse;
/// use llm_failover::provider::{openai::OpenAi, Provider};
/// use llm_failover::{ErrorKind, ProviderId};
///
/// let openai = OpenAi::new(ProviderId::new("openai"), "http://127.0.0.1:8080/v1".parse()?);
/// let raw = RawResponse::new(429, HeaderMap::new(), r#"{"error":{"message":"Slow down"}}"#);
/// let failure = Failure::from_error(&openai.error(&raw, TokioClock.both()));
/// assert_eq!(failure.kind, FailureKind::Request(ErrorKind::RateLimited));
/// assert_eq!(failure.status, Some(429));
/// assert_eq!(failure.provider, Some(ProviderId::new("openai")));
/// # Ok::<(), url::ParseError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Failure {
    /// What kind.
    pub kind: FailureKind,
    /// The HTTP status of the (last) provider answer, when there was one.
    pub status: Option<u16>,
    /// The provider of the (last) failed attempt, when one was tried.
    pub provider: Option<ProviderId>,
    /// The message (a provider's is truncated and never contains the key).
    pub message: String,
    /// Requests sent for this item.
    pub attempts: u32,
    /// For [`FailureKind::InvalidInput`]: the input line.
    pub line: Option<u64>,
    /// How long until the request may succeed, when the error said
    /// ([`Error::retry_after`]): a throttle's stated wait, a budget's reset.
    pub retry_after: Option<Duration>,
}

impl Failure {
    /// The failure a request error stands for.
    ///
    /// For `AllProvidersFailed` and `AllProvidersUnavailable`, `status` and `provider` are
    /// the last attempt's, and the message lists every attempt. `attempts` counts the
    /// requests sent ([`Error::sends`]; for errors not from a client, the attempts that
    /// reached a provider).
    pub fn from_error(err: &Error) -> Self {
        let last = err
            .attempts()
            .iter()
            .rev()
            .find(|a| a.provider().is_some() || a.status().is_some());
        let status = err.status().or_else(|| last.and_then(Error::status));
        let provider = err
            .provider()
            .or_else(|| last.and_then(Error::provider))
            .cloned();
        let attempts = err.sends().unwrap_or_else(|| {
            if err.attempts().is_empty() {
                u32::from(was_sent(err))
            } else {
                let n = err.attempts().iter().filter(|a| was_sent(a)).count();
                u32::try_from(n).unwrap_or(u32::MAX)
            }
        });
        Failure {
            kind: FailureKind::Request(err.kind()),
            status,
            provider,
            message: err.message().to_owned(),
            retry_after: err.retry_after(),
            attempts,
            line: None,
        }
    }

    /// The failure of a bad input line.
    pub fn invalid_input(err: &InputError) -> Self {
        Failure {
            kind: FailureKind::InvalidInput,
            status: None,
            provider: None,
            message: err.to_string(),
            attempts: 0,
            line: Some(err.line),
            retry_after: None,
        }
    }

    pub(crate) fn panicked(message: String) -> Self {
        Failure {
            kind: FailureKind::Panicked,
            status: None,
            provider: None,
            message,
            attempts: 0,
            line: None,
            retry_after: None,
        }
    }
}

/// Whether an attempt's error came from a request that was sent.
fn was_sent(err: &Error) -> bool {
    err.status().is_some()
        || matches!(
            err.kind(),
            ErrorKind::Timeout | ErrorKind::Connect | ErrorKind::Decode
        )
}

#[derive(Serialize, Deserialize)]
struct WireUsage {
    input_tokens: u64,
    output_tokens: u64,
    /// Of `input_tokens`, those read from the provider's prompt cache (absent: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    cached_input_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Serialize, Deserialize)]
struct WireError<'a> {
    kind: &'a str,
    status: Option<u16>,
    provider: Option<&'a str>,
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<u64>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum WireLine<'a> {
    Ok {
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        line: Option<u64>,
        ok: bool,
        provider: &'a str,
        model: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        text: Option<&'a str>,
        /// Only on an embedding's line.
        #[serde(skip_serializing_if = "Option::is_none")]
        vectors: Option<&'a [Vec<f32>]>,
        usage: Option<WireUsage>,
        attempts: u32,
        latency_ms: u64,
        /// Only on an answer from the cache: other lines stay as they were.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        cached: bool,
        /// Which lane answered.
        lane: &'static str,
        /// What it cost, in dollars, where its model has a price.
        #[serde(skip_serializing_if = "Option::is_none")]
        cost_usd: Option<Cost>,
    },
    Failed {
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        line: Option<u64>,
        ok: bool,
        error: WireError<'a>,
        attempts: u32,
    },
}

impl ItemOutcome {
    /// The failure, when a budget held the request back ([`ErrorKind::BudgetExhausted`]):
    /// nothing was sent.
    pub(crate) fn budget_refusal(&self) -> Option<&Failure> {
        self.result
            .as_ref()
            .err()
            .filter(|f| f.kind == FailureKind::Request(ErrorKind::BudgetExhausted))
    }

    /// A success.
    pub fn ok(id: impl Into<String>, answer: Answer) -> Self {
        ItemOutcome {
            key: ItemKey::Id(id.into()),
            result: Ok(answer),
        }
    }

    /// A failure of the item `key` (an id, or [`ItemKey::Line`]).
    pub fn failed(key: impl Into<ItemKey>, failure: Failure) -> Self {
        ItemOutcome {
            key: key.into(),
            result: Err(failure),
        }
    }

    /// The failure of a bad input line, under its [`key`](InputError::key).
    pub fn invalid_input(err: &InputError) -> Self {
        ItemOutcome::failed(err.key(), Failure::invalid_input(err))
    }

    /// The item's id (`None` for a bad input line reported by its number).
    pub fn id(&self) -> Option<&str> {
        self.key.id()
    }

    /// Whether the item succeeded.
    pub fn is_ok(&self) -> bool {
        self.result.is_ok()
    }

    /// The JSON line for this outcome, ending in `\n` (see the type's docs for the shape).
    pub fn to_json_line(&self) -> String {
        let wire = match &self.result {
            Ok(a) => WireLine::Ok {
                id: self.key.id(),
                line: self.key.line(),
                ok: true,
                provider: a.provider.as_str(),
                model: &a.model,
                text: a.vectors.is_none().then_some(a.text.as_str()),
                vectors: a.vectors.as_deref(),
                usage: a.usage.map(|u| WireUsage {
                    input_tokens: u.input_tokens,
                    output_tokens: u.output_tokens,
                    cached_input_tokens: u.cached_input_tokens,
                }),
                attempts: a.attempts,
                latency_ms: u64::try_from(a.latency.as_millis()).unwrap_or(u64::MAX),
                cached: a.cached,
                lane: a.lane.as_str(),
                cost_usd: a.cost,
            },
            Err(f) => WireLine::Failed {
                id: self.key.id(),
                line: self.key.line(),
                ok: false,
                error: WireError {
                    kind: f.kind.as_str(),
                    status: f.status,
                    provider: f.provider.as_ref().map(ProviderId::as_str),
                    message: &f.message,
                    line: f.line,
                },
                attempts: f.attempts,
            },
        };
        // Serialising strings, numbers and options cannot fail.
        let mut line = serde_json::to_string(&wire).unwrap_or_default();
        line.push('\n');
        line
    }
}

/// The results line of item `id` whose job ended without an accepted answer (dead-lettered,
/// or refused by its contract), from what the queue kept of its failure.
pub fn failure_line(
    id: &str,
    kind: &str,
    status: Option<u16>,
    provider: Option<&str>,
    message: &str,
    attempts: u32,
) -> String {
    let wire = WireLine::Failed {
        id: Some(id),
        line: None,
        ok: false,
        error: WireError {
            kind,
            status,
            provider,
            message,
            line: None,
        },
        attempts,
    };
    let mut line = serde_json::to_string(&wire).unwrap_or_default();
    line.push('\n');
    line
}

/// The part of a results line that resuming needs.
#[derive(Debug, PartialEq, Eq)]
pub struct LineHead {
    /// The item the line is about.
    pub key: ItemKey,
    /// Whether it holds an answer.
    pub ok: bool,
}

#[derive(Deserialize)]
struct WireHead {
    id: Option<String>,
    line: Option<u64>,
    ok: bool,
}

impl LineHead {
    /// Parses a results line; `None` for anything that is not one (a torn or foreign line,
    /// or one with both or neither of `id` and `line`).
    pub fn parse(line: &[u8]) -> Option<LineHead> {
        let head: WireHead = serde_json::from_slice(line).ok()?;
        let key = match (head.id, head.line) {
            (Some(id), None) => ItemKey::Id(id),
            (None, Some(line)) => ItemKey::Line(line),
            _ => return None,
        };
        Some(LineHead { key, ok: head.ok })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer() -> Answer {
        Answer {
            provider: ProviderId::new("openai"),
            model: "gpt-4o-mini".into(),
            text: "Hello \"there\"\nfriend".into(),
            vectors: None,
            usage: Some(Usage::new(12, 3)),
            attempts: 2,
            latency: Duration::from_millis(1234),
            cached: false,
            lane: Lane::Live,
            cost: None,
        }
    }

    #[test]
    fn success_line_has_the_documented_shape() {
        let line = ItemOutcome::ok("q1", answer()).to_json_line();
        assert!(line.ends_with('\n') && !line[..line.len() - 1].contains('\n'));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            v,
            json!({"id": "q1", "ok": true, "provider": "openai", "model": "gpt-4o-mini",
                   "text": "Hello \"there\"\nfriend",
                   "usage": {"input_tokens": 12, "output_tokens": 3},
                   "attempts": 2, "latency_ms": 1234, "lane": "live"})
        );
        let bulk = Answer {
            lane: Lane::ProviderBatch,
            ..answer()
        };
        let v: serde_json::Value =
            serde_json::from_str(&ItemOutcome::ok("q1", bulk).to_json_line()).unwrap();
        assert_eq!(v["lane"], "provider-batch");
        // Input read from the provider's prompt cache is said where there was some.
        let cached = Answer {
            usage: Some(Usage::new(2_000, 3).with_cached_input(1_920)),
            ..answer()
        };
        let v: serde_json::Value =
            serde_json::from_str(&ItemOutcome::ok("q1", cached).to_json_line()).unwrap();
        assert_eq!(
            v["usage"],
            json!({"input_tokens": 2000, "output_tokens": 3, "cached_input_tokens": 1920})
        );
    }

    #[test]
    fn only_an_answer_from_the_cache_says_cached_and_both_read_back() {
        let cached = Answer {
            attempts: 0,
            cached: true,
            ..answer()
        };
        let line = ItemOutcome::ok("q1", cached).to_json_line();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!((&v["cached"], &v["attempts"]), (&json!(true), &json!(0)));
        let plain: serde_json::Value =
            serde_json::from_str(&ItemOutcome::ok("q2", answer()).to_json_line()).unwrap();
        assert_eq!(plain.get("cached"), None, "{plain}");

        for (line, id) in [
            (line, "q1"),
            (ItemOutcome::ok("q2", answer()).to_json_line(), "q2"),
        ] {
            let head = LineHead::parse(line.trim_end().as_bytes()).unwrap();
            assert_eq!((head.key, head.ok), (id.into(), true));
        }
    }

    #[test]
    fn an_answer_from_the_cache_is_recorded_as_cached() {
        let mut response = ChatResponse::new(ProviderId::new("openai"), "m", "Paris");
        assert!(!Answer::from_response(response.clone(), Duration::ZERO).cached);
        response.origin = crate::Origin::Cache { stored_at_ms: 7 };
        assert!(Answer::from_response(response, Duration::ZERO).cached);
    }

    #[test]
    fn failure_lines_have_the_documented_shape() {
        let f = Failure {
            kind: FailureKind::Request(ErrorKind::ContextLengthExceeded),
            status: Some(400),
            provider: Some(ProviderId::new("openai")),
            message: "too long".into(),
            attempts: 1,
            line: None,
            retry_after: None,
        };
        let v: serde_json::Value =
            serde_json::from_str(&ItemOutcome::failed("q2", f).to_json_line()).unwrap();
        assert_eq!(
            v,
            json!({"id": "q2", "ok": false, "error": {"kind": "context_length_exceeded",
                   "status": 400, "provider": "openai", "message": "too long"}, "attempts": 1})
        );

        let bad = InputError {
            id: None,
            line: 4,
            message: "no `id` field".into(),
        };
        let v: serde_json::Value =
            serde_json::from_str(&ItemOutcome::invalid_input(&bad).to_json_line()).unwrap();
        assert_eq!(
            v,
            json!({"line": 4, "ok": false, "error": {"kind": "invalid_input",
                   "status": null, "provider": null, "message": "line 4: no `id` field",
                   "line": 4}, "attempts": 0})
        );
    }

    #[test]
    fn a_written_line_reads_back_as_its_id_and_status() {
        let line = ItemOutcome::ok("q1", answer()).to_json_line();
        let head = LineHead::parse(line.trim_end().as_bytes()).unwrap();
        assert_eq!((head.key, head.ok), ("q1".into(), true));
        assert!(LineHead::parse(&line.as_bytes()[..20]).is_none(), "torn");
    }

    #[test]
    fn a_bad_line_and_an_item_whose_id_reads_like_it_have_different_keys() {
        let bad = InputError {
            id: None,
            line: 5,
            message: "not valid JSON".into(),
        };
        let report = ItemOutcome::invalid_input(&bad).to_json_line();
        let real = ItemOutcome::ok("line:5", answer()).to_json_line();
        let heads = [report, real].map(|l| LineHead::parse(l.trim_end().as_bytes()).unwrap());
        assert_eq!(heads[0].key, ItemKey::Line(5));
        assert_eq!(heads[1].key, ItemKey::from("line:5"));
        // (text, what it reads as)
        let cases: [(&str, Option<ItemKey>); 6] = [
            (r#"{"id":"a","ok":true}"#, Some("a".into())),
            (r#"{"line":3,"ok":false}"#, Some(ItemKey::Line(3))),
            (r#"{"id":null,"line":3,"ok":false}"#, Some(ItemKey::Line(3))),
            (r#"{"id":"a","line":3,"ok":false}"#, None),
            (r#"{"ok":false}"#, None),
            (r#"{"line":"3","ok":false}"#, None),
        ];
        for (text, want) in cases {
            assert_eq!(
                LineHead::parse(text.as_bytes()).map(|h| h.key),
                want,
                "{text}"
            );
        }
    }

    #[test]
    fn debug_never_shows_the_answer_text() {
        let o = ItemOutcome::ok("q1", answer());
        assert!(!format!("{o:?}").contains("there"));
    }
}
