//! The event seam: the request path tells observers what happened, at a few named points,
//! with the data as a value.
//!
//! One request goes one way through the router, and on that way it calls
//! [`Observer::observe`] when it sends an attempt, when an attempt ends, when it waited for
//! admission, when a breaker opens, when a request fails over, when a stream it handed out
//! ends, when the response cache answers or has nothing, and when the request ends. The
//! client's [`Stats`](crate::Stats) are one observer — the default one, always there — and an
//! application adds its own with [`ClientBuilder::observer`](crate::ClientBuilder::observer):
//! metrics, logs, an audit. Observing never changes a decision: an observer is told after the
//! fact, gets borrowed data it cannot change, and nothing it does is read back. It is called
//! on the request's task (a stream's end: on the task that settles it): keep it short and
//! never block (count, or send to a channel).
//!
//! No event holds a prompt, an answer, audio, a transcript or a key: providers, models,
//! accounts (names, never secrets), statuses, durations, token counts and what providers
//! stated of their limits.
//!
//! # Examples
//!
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use std::sync::Arc;
//! use llm_failover::observe::{AttemptOutcome, Event, Observer};
//!
//! /// Counts the 429s every provider answered.
//! #[derive(Debug, Default)]
//! struct Throttled(AtomicU64);
//!
//! impl Observer for Throttled {
//!     fn observe(&self, event: &Event<'_>) {
//!         if let Event::AttemptEnded(a) = event
//!             && a.outcome == AttemptOutcome::RateLimited
//!         {
//!             self.0.fetch_add(1, Ordering::Relaxed);
//!         }
//!     }
//! }
//!
//! # let local = llm_failover::provider::openai::OpenAi::new(
//! #     llm_failover::ProviderId::new("local"),
//! #     "http://127.0.0.1:9/v1".parse()?,
//! # ).with_chat_model("llama3.2");
//! let throttled = Arc::new(Throttled::default());
//! let client = llm_failover::Client::builder()
//!     .provider(Arc::new(local), llm_failover::ProviderSettings::new())
//!     .observer(throttled.clone())
//!     .build()?;
//! # let _ = client;
//! assert_eq!(throttled.0.load(Ordering::Relaxed), 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#[cfg(feature = "otel")]
pub mod otel;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::ErrorKind;
use crate::id::{Capability, ProviderId};
use crate::ratelimit::{LimitKey, LimitReport};
use crate::types::Usage;

/// Told what the request path does, at the points [`Event`] names.
///
/// `Send + Sync`: one observer is told from every request's task at once. Implement it with
/// atomics or a channel, not a lock held long: it runs on the request's way.
pub trait Observer: Send + Sync + fmt::Debug {
    /// One event. Called after the fact; nothing it does changes the request.
    fn observe(&self, event: &Event<'_>);
}

/// What happened.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Event<'a> {
    /// An attempt went out to a provider (it reached the network).
    Sent(Sent<'a>),
    /// An attempt that was sent ended: answered, or failed.
    AttemptEnded(AttemptEnded<'a>),
    /// An answer arrived in the wrong shape (not the requested JSON, a schema it breaks): its
    /// attempt answered (and was told so), and this is counted apart.
    InvalidAnswer(Target<'a>),
    /// A request waited for admission at a provider before it was sent: for its booked slot,
    /// or in the provider's line for bulk requests.
    AdmissionWaited(AdmissionWaited<'a>),
    /// A request left a provider for another after a failure there (told before its send
    /// there).
    FailedOver(FailedOver<'a>),
    /// A provider's breaker opened: nothing goes to it until `until`.
    BreakerOpened(BreakerOpened<'a>),
    /// A provider's breaker closed: its probe was answered.
    BreakerClosed(Target<'a>),
    /// A chunk of a stream handed to the caller arrived from its provider (each after the
    /// first content; told on the task reading the stream).
    ChunkReceived(ChunkReceived<'a>),
    /// A stream handed to the caller ended (or was dropped).
    StreamEnded(StreamEnded<'a>),
    /// The response cache was asked for a request's answer.
    Cache(CacheLooked),
    /// A request ended.
    RequestEnded(RequestEnded<'a>),
    /// A durable job was settled by a worker of a queue (told by the queue's worker through
    /// [`Client::observe`](crate::Client::observe), not by the request path).
    JobSettled(JobSettled<'a>),
}

/// A worker settled a durable job ([`Event::JobSettled`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobSettled<'a> {
    /// The job's kind (`chat`, `transcribe`, …): a name the application chose, never its id.
    pub kind: &'a str,
    /// How.
    pub settled: Settled,
}

impl<'a> JobSettled<'a> {
    /// A job of `kind` settled `settled`.
    pub fn new(kind: &'a str, settled: Settled) -> Self {
        JobSettled { kind, settled }
    }
}

/// How a worker settled a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Settled {
    /// Its result was accepted (`done`).
    Completed,
    /// Its result failed its contract and waits for a person (`review`).
    Reviewed,
    /// Put back until a provider's stated reset, no failure counted.
    Snoozed,
    /// Failed, and will be tried again after a backoff.
    Retried,
    /// Dead-lettered: a terminal error, or the policy's last failure.
    Dead,
    /// Its result was refused: the claim was stale (reaped and claimed again meanwhile).
    Refused,
}

impl Settled {
    /// The name metrics use: `completed`, `reviewed`, `snoozed`, `retried`, `dead`,
    /// `refused`.
    pub fn as_str(self) -> &'static str {
        match self {
            Settled::Completed => "completed",
            Settled::Reviewed => "reviewed",
            Settled::Snoozed => "snoozed",
            Settled::Retried => "retried",
            Settled::Dead => "dead",
            Settled::Refused => "refused",
        }
    }
}

/// Where an attempt goes: the provider, model and account whose limits it spends.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Target<'a> {
    /// The provider, model and account (the account's name, never its key).
    pub key: &'a LimitKey,
    /// Chat (streamed or not) or transcription.
    pub capability: Capability,
    /// The host and port the provider is reached at, where its adapter says.
    pub server: Option<(&'a str, u16)>,
    /// The adapter's kind (`openai`, `azure`, `anthropic`, `gemini`, `deepgram`, …).
    pub kind: &'static str,
    /// The provider's place among the client's providers (the [`Stats`](crate::Stats)
    /// observer counts by it).
    pub(crate) slot: usize,
}

impl Target<'_> {
    /// The provider.
    pub fn provider(&self) -> &ProviderId {
        &self.key.provider
    }

    /// The model.
    pub fn model(&self) -> &str {
        &self.key.model
    }
}

/// A request moved to another provider ([`Event::FailedOver`]).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct FailedOver<'a> {
    /// The provider it left.
    pub from: &'a ProviderId,
    /// Where it goes now.
    pub to: Target<'a>,
    /// The place of `from` among the client's providers.
    pub(crate) from_slot: usize,
}

/// How admission priced a request in tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Pricing {
    /// No token limit applies: one request.
    Requests,
    /// The tokenizer-free bound of its prompt.
    Bound,
    /// The tokenizer's count of its prompt.
    Counted,
}

/// An attempt went out ([`Event::Sent`]).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Sent<'a> {
    /// Where.
    pub target: Target<'a>,
    /// How admission priced it.
    pub pricing: Pricing,
    /// The request's sends so far, this one included (1 for its first).
    pub send: u32,
    /// Whether it is its provider's breaker's probe: the one request let through a breaker
    /// whose open time has passed (half-open), whose answer closes it.
    pub probe: bool,
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AttemptOutcome {
    /// The provider answered (for a stream: it started answering).
    Answered,
    /// 429: a rate limit.
    RateLimited,
    /// The account's quota or credit is spent (`insufficient_quota` and the like).
    QuotaExhausted,
    /// A fault that may pass (a 5xx, a timeout, a connection that failed).
    Transient {
        /// The provider answered with a 5xx.
        server_error: bool,
    },
    /// A failure no retry mends (a 4xx other than 429, a refused key).
    Terminal,
}

/// An attempt that was sent ended ([`Event::AttemptEnded`]).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct AttemptEnded<'a> {
    /// Where it went.
    pub target: Target<'a>,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// The error's kind, for a failure.
    pub error: Option<ErrorKind>,
    /// The HTTP status of a failure, where one came back (`None` for an answer).
    pub status: Option<u16>,
    /// From the send to the answer (for a stream: to its first content) or the failure, on
    /// the client's clock.
    pub latency: Duration,
    /// The request asked for a stream: an answer's `latency` is its time to first content,
    /// and [`Event::StreamEnded`] follows when the caller has read it.
    pub streamed: bool,
    /// The tokens the answer reports (a stream reports them when it ends:
    /// [`StreamEnded::usage`]).
    pub usage: Option<Usage>,
    /// What the answer cost by its usage, where its model has a price.
    pub cost: Option<crate::types::price::Cost>,
    /// The model the answer names, where it names one.
    pub response_model: Option<&'a str>,
    /// What the response stated of the provider's limits (remaining, resets).
    pub report: Option<&'a LimitReport>,
}

/// A request waited for admission ([`Event::AdmissionWaited`]).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct AdmissionWaited<'a> {
    /// Where it waits to go.
    pub target: Target<'a>,
    /// How long.
    pub wait: Duration,
    /// It waited in the provider's line of bulk requests (else: for the slot it booked).
    pub in_line: bool,
}

/// A breaker opened ([`Event::BreakerOpened`]).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct BreakerOpened<'a> {
    /// The provider (and the model and account of the attempt that opened it).
    pub target: Target<'a>,
    /// How long it stays open (then one probe goes).
    pub open_for: Duration,
}

/// A stream ended ([`Event::StreamEnded`]).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct StreamEnded<'a> {
    /// Where it came from.
    pub target: Target<'a>,
    /// The tokens it reported, if it reported them.
    pub usage: Option<Usage>,
    /// What they cost, where its model has a price.
    pub cost: Option<crate::types::price::Cost>,
    /// The kind of the error that ended it, if one did.
    pub error: Option<ErrorKind>,
}

/// A stream's chunk arrived ([`Event::ChunkReceived`]).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ChunkReceived<'a> {
    /// Where the stream comes from.
    pub target: Target<'a>,
    /// The time since the chunk before (the first: since the stream, with its first content,
    /// was handed out).
    pub since_previous: Duration,
}

/// The response cache was asked ([`Event::Cache`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheLooked {
    /// It had the answer: nothing is sent.
    pub hit: bool,
    /// The tokens the answer it had reported (what a hit saved).
    pub tokens: u64,
}

/// A request ended ([`Event::RequestEnded`]).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct RequestEnded<'a> {
    /// Chat or transcription.
    pub capability: Capability,
    /// Who answered (`None`: it failed). An answer the cache kept names the provider that
    /// first gave it, with no send ([`sends`](Self::sends) 0).
    pub provider: Option<&'a ProviderId>,
    /// `None` for an answer, else the kind of the error it ended with.
    pub error: Option<ErrorKind>,
    /// The requests it sent.
    pub sends: u32,
    /// From its start to its end, on the client's clock (admission waits included).
    pub latency: Duration,
}

/// The client's observers: the [`Stats`](crate::Stats) tallies first, then the
/// application's, in the order they were added. Fixed when the client is built: telling
/// them takes no lock.
#[derive(Debug, Default)]
pub(crate) struct Observers {
    added: Box<[Arc<dyn Observer>]>,
}

impl Observers {
    pub(crate) fn new(added: Vec<Arc<dyn Observer>>) -> Self {
        Observers {
            added: added.into_boxed_slice(),
        }
    }

    /// Tells every observer the application added (the tallies are told by the caller).
    pub(crate) fn tell(&self, event: &Event<'_>) {
        for o in self.added.iter() {
            o.observe(event);
        }
    }
}

/// The GenAI conventions' `gen_ai.operation.name` of a request for `capability` (`chat`,
/// `embeddings`; `speech_to_text` for a transcription, which the conventions do not name):
/// the attempt span's attribute and the metrics'.
pub(crate) fn operation_name(capability: Capability) -> &'static str {
    match capability {
        Capability::Transcription => "speech_to_text",
        Capability::Embedding => "embeddings",
        _ => "chat",
    }
}
