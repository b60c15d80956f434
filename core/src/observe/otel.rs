//! OpenTelemetry metrics from the event seam (feature `otel`): the client metrics of
//! OpenTelemetry's GenAI semantic conventions, and ours where no convention covers what
//! operators need.
//!
//! [`GenAiMetrics`] is an [`Observer`]: add it to a client and every attempt, wait, 429,
//! failover, breaker opening and cache look-up is recorded on a [`Meter`] the application
//! gives. This crate depends on the `opentelemetry` API only, as OpenTelemetry asks of a
//! library: the application installs the SDK, its exporter (OTLP, Prometheus) and a
//! `MeterProvider`. Without one, the global meter records nothing, at the cost of a call.
//!
//! On the request path an answer costs a look-up of its target's attribute sets (made once
//! per provider, model and account) and three sends on a lock-free queue: the histogram
//! recordings are made when the metrics are collected, in the collection's callback, before
//! the histograms are read, so what is exported is exact and the SDK's work (it hashes each
//! recording's attributes to find its series) runs on the collecting thread. What a provider
//! stated is left is read at collection too. BENCHMARKS.md (B2) has the measurements.
//!
//! Every name is in [`names`], with the version of the conventions it follows
//! ([`names::SEMCONV_VERSION`]): the GenAI conventions are in Development and their names may
//! still move. No attribute holds a prompt, an answer, a key or a job id: providers, models,
//! account names, outcomes and kinds of error only.
//!
//! | instrument | kind, unit | recorded |
//! |---|---|---|
//! | `gen_ai.client.operation.duration` | histogram, `s` | every attempt sent, from its send to its answer or failure (`error.type` on a failure) |
//! | `gen_ai.client.token.usage` | histogram, `{token}` | the input and output tokens an answer (or a stream, at its end) reports (`gen_ai.token.type`) |
//! | `gen_ai.client.operation.time_to_first_chunk` | histogram, `s` | a streamed answer's first content |
//! | `gen_ai.client.operation.time_per_output_chunk` | histogram, `s` | each chunk of a streamed answer after the first: the time since the chunk before |
//! | `llm_failover.rate_limit.remaining` | gauge | what a provider's last answer stated is left (`llm_failover.limit.unit`: `requests`, `tokens`), read when the metrics are collected |
//! | `llm_failover.admission.wait` | histogram, `s` | a request's wait for admission before its send |
//! | `llm_failover.rate_limited` | counter, `{response}` | the 429s received |
//! | `llm_failover.failovers` | counter, `{request}` | requests that left a provider for another (`llm_failover.failover.from`) |
//! | `llm_failover.breaker.openings` | counter, `{opening}` | breakers that opened |
//! | `llm_failover.cache.lookups` | counter, `{lookup}` | response-cache look-ups (`llm_failover.cache.hit`) |
//! | `llm_failover.cache.tokens_saved` | counter, `{token}` | the tokens of the answers the cache gave (not sent again) |
//! | `llm_failover.cost.usd` | counter, `{USD}` | what answers cost by their usage, in dollars, where their models have a [price](crate::price) (no convention names one) |
//! | `llm_failover.breaker.status` | gauge | 1 for the state a provider's breaker is in, 0 for the other two (`llm_failover.breaker.state`: `closed`, `open`, `half_open`), from its first move |
//! | `llm_failover.queue.settlements` | counter, `{job}` | durable jobs a worker settled (`llm_failover.job.kind`, `llm_failover.job.settled`: `completed`, `reviewed`, `snoozed`, `retried`, `dead`, `refused`) |
//! | `llm_failover.queue.jobs` | gauge, `{job}` | jobs in the queue by state (`llm_failover.job.state`), recorded by the queue wing's `QueueMetrics` |
//! | `llm_failover.queue.oldest_eligible_age` | gauge, `s` | how long the oldest eligible job has waited (0 when none), recorded by the queue wing |
//!
//! The GenAI instruments carry `gen_ai.operation.name` (`chat`, `embeddings`, or
//! `speech_to_text` for a transcription: the conventions name none), `gen_ai.provider.name` (the conventions' value
//! for the adapter: `openai`, `azure.ai.openai`, `anthropic`, `gcp.gemini`; an
//! OpenAI-compatible provider named after a host the conventions list, such as `groq`, takes
//! that host's value; `deepgram` has none and is written as is), `gen_ai.request.model` and,
//! for an answer, `gen_ai.response.model`, and `server.address` / `server.port` (the host and
//! port of the provider's base URL, where its adapter says: [`Provider::base_url`]). Ours carry `llm_failover.provider` (the
//! configured name), the model, and the account where a request brought its own.
//!
//! # Examples
//!
//! ```
//! use std::sync::Arc;
//! use llm_failover::observe::otel::GenAiMetrics;
//!
//! # let local = llm_failover::provider::openai::OpenAi::new(
//! #     llm_failover::ProviderId::new("local"),
//! #     "http://127.0.0.1:9/v1".parse()?,
//! # ).with_chat_model("llama3.2");
//! // The application's MeterProvider (opentelemetry_sdk), installed globally or passed on.
//! let meter = opentelemetry::global::meter("llm-failover");
//! let client = llm_failover::Client::builder()
//!     .provider(Arc::new(local), llm_failover::ProviderSettings::new())
//!     .observer(Arc::new(GenAiMetrics::new(&meter)))
//!     .build()?;
//! # let _ = client;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, mpsc};

use opentelemetry::metrics::{AsyncInstrument, Counter, Gauge, Histogram, Meter, ObservableGauge};
use opentelemetry::{KeyValue, StringValue};

use super::{Event, Observer, Target};
use crate::id::Capability;
use crate::observe::AttemptOutcome;
#[cfg(doc)]
use crate::provider::Provider;
use crate::ratelimit::LimitKey;

/// Every metric and attribute name, and the boundaries the conventions advise.
pub mod names {
    /// The version of OpenTelemetry's semantic conventions these names follow
    /// (`docs/gen-ai/gen-ai-metrics.md` of `open-telemetry/semantic-conventions`).
    pub const SEMCONV_VERSION: &str = "1.41.0";

    /// GenAI operation duration (histogram, seconds). Required by the conventions.
    pub const OPERATION_DURATION: &str = "gen_ai.client.operation.duration";
    /// Input and output tokens used (histogram, tokens).
    pub const TOKEN_USAGE: &str = "gen_ai.client.token.usage";
    /// Time to a streamed answer's first chunk (histogram, seconds).
    pub const TIME_TO_FIRST_CHUNK: &str = "gen_ai.client.operation.time_to_first_chunk";
    /// Time from the end of a streamed answer's previous chunk to the end of the next, for
    /// each chunk after the first (histogram, seconds).
    pub const TIME_PER_OUTPUT_CHUNK: &str = "gen_ai.client.operation.time_per_output_chunk";

    /// What a provider stated is left of a limit (gauge).
    pub const REMAINING: &str = "llm_failover.rate_limit.remaining";
    /// A request's wait for admission (histogram, seconds).
    pub const ADMISSION_WAIT: &str = "llm_failover.admission.wait";
    /// 429s received (counter).
    pub const RATE_LIMITED: &str = "llm_failover.rate_limited";
    /// Requests that left a provider for another (counter).
    pub const FAILOVERS: &str = "llm_failover.failovers";
    /// Breakers that opened (counter).
    pub const BREAKER_OPENINGS: &str = "llm_failover.breaker.openings";
    /// Response-cache look-ups (counter).
    pub const CACHE_LOOKUPS: &str = "llm_failover.cache.lookups";
    /// Tokens of the answers the cache gave (counter).
    pub const CACHE_TOKENS_SAVED: &str = "llm_failover.cache.tokens_saved";
    /// What answers cost by their usage, in dollars, where their models have a price
    /// (counter).
    pub const COST: &str = "llm_failover.cost.usd";
    /// A provider's breaker's state (gauge: 1 for the state it is in, 0 for the others; the
    /// pattern of the conventions' `hw.status` and `hw.state`).
    pub const BREAKER_STATUS: &str = "llm_failover.breaker.status";
    /// Durable jobs settled by a worker (counter).
    pub const QUEUE_SETTLEMENTS: &str = "llm_failover.queue.settlements";
    /// Jobs in a queue by state (gauge).
    pub const QUEUE_JOBS: &str = "llm_failover.queue.jobs";
    /// How long a queue's oldest eligible job has waited (gauge, seconds).
    pub const QUEUE_OLDEST_ELIGIBLE_AGE: &str = "llm_failover.queue.oldest_eligible_age";

    /// `chat`, `embeddings`, `speech_to_text`.
    pub const OPERATION_NAME: &str = "gen_ai.operation.name";
    /// The conventions' provider value.
    pub const PROVIDER_NAME: &str = "gen_ai.provider.name";
    /// The model asked for.
    pub const REQUEST_MODEL: &str = "gen_ai.request.model";
    /// The model that answered.
    pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
    /// `input`, `output`.
    pub const TOKEN_TYPE: &str = "gen_ai.token.type";
    /// The kind of error an attempt ended with (`rate_limited`, `timeout`, …).
    pub const ERROR_TYPE: &str = "error.type";
    /// The host the provider is reached at (from its base URL).
    pub const SERVER_ADDRESS: &str = "server.address";
    /// The port the provider is reached at.
    pub const SERVER_PORT: &str = "server.port";
    /// The provider's configured name (ours: several may share a `gen_ai.provider.name`).
    pub const PROVIDER: &str = "llm_failover.provider";
    /// The account whose limits a request spent, when it brought its own key.
    pub const ACCOUNT: &str = "llm_failover.account";
    /// `requests`, `tokens` (for [`REMAINING`]).
    pub const LIMIT_UNIT: &str = "llm_failover.limit.unit";
    /// The provider a failover left.
    pub const FAILOVER_FROM: &str = "llm_failover.failover.from";
    /// Whether a cache look-up found the answer.
    pub const CACHE_HIT: &str = "llm_failover.cache.hit";
    /// `closed`, `open`, `half_open` (for [`BREAKER_STATUS`]).
    pub const BREAKER_STATE: &str = "llm_failover.breaker.state";
    /// A durable job's kind (`chat`, `transcribe`, …).
    pub const JOB_KIND: &str = "llm_failover.job.kind";
    /// How a worker settled a job (for [`QUEUE_SETTLEMENTS`]).
    pub const JOB_SETTLED: &str = "llm_failover.job.settled";
    /// A job's state in its queue: `ready`, `running`, `done`, `dead`, `review` (for
    /// [`QUEUE_JOBS`]).
    pub const JOB_STATE: &str = "llm_failover.job.state";
    /// The breaker states, in the order [`BREAKER_STATUS`] records them.
    pub const BREAKER_STATES: [&str; 3] = ["closed", "open", "half_open"];

    /// [`OPERATION_DURATION`]'s, [`TIME_TO_FIRST_CHUNK`]'s and [`TIME_PER_OUTPUT_CHUNK`]'s
    /// advised boundaries (seconds).
    pub const DURATION_BUCKETS: [f64; 14] = [
        0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
    ];
    /// [`TOKEN_USAGE`]'s advised boundaries.
    pub const TOKEN_BUCKETS: [f64; 14] = [
        1.0,
        4.0,
        16.0,
        64.0,
        256.0,
        1024.0,
        4096.0,
        16384.0,
        65536.0,
        262_144.0,
        1_048_576.0,
        4_194_304.0,
        16_777_216.0,
        67_108_864.0,
    ];
}

/// The conventions' `gen_ai.provider.name` for a provider of adapter `kind` named `id`.
///
/// An OpenAI-format provider takes the value of the host the conventions list when its name
/// is one (`groq`, `deepseek`, …), else `openai`; a kind the conventions do not list is
/// written as is.
pub fn provider_name(kind: &str, id: &str) -> &'static str {
    const HOSTS: [(&str, &str); 8] = [
        ("groq", "groq"),
        ("deepseek", "deepseek"),
        ("perplexity", "perplexity"),
        ("mistral", "mistral_ai"),
        ("mistral_ai", "mistral_ai"),
        ("xai", "x_ai"),
        ("x_ai", "x_ai"),
        ("cohere", "cohere"),
    ];
    match kind {
        "azure" => "azure.ai.openai",
        "anthropic" => "anthropic",
        "gemini" => "gcp.gemini",
        "deepgram" => "deepgram",
        "openai" => HOSTS
            .iter()
            .find(|(name, _)| id.eq_ignore_ascii_case(name))
            .map_or("openai", |(_, value)| value),
        _ => "unknown",
    }
}

/// The conventions' `gen_ai.operation.name` for `capability` (`chat`, `embeddings`;
/// `speech_to_text` for a transcription, which the conventions do not name).
pub fn operation_name(capability: Capability) -> &'static str {
    super::operation_name(capability)
}

/// The GenAI client metrics and ours, recorded from the events a client tells
/// ([module docs](self)).
///
/// Each target's attribute sets are made once, at its first event, and kept: an answer
/// records on sets it finds with one look-up, allocating nothing, and what a provider stated
/// is left is read when the metrics are collected, not recorded per answer.
#[derive(Debug, Clone)]
pub struct GenAiMetrics {
    histograms: Arc<Deferred>,
    rate_limited: Counter<u64>,
    failovers: Counter<u64>,
    breaker_openings: Counter<u64>,
    breaker_state: Gauge<u64>,
    cache_lookups: Counter<u64>,
    cache_tokens_saved: Counter<u64>,
    cost: Counter<f64>,
    settlements: Counter<u64>,
    targets: Arc<Targets>,
    /// Kept so that the remaining-quota gauge's callback lives as long as this.
    _remaining: ObservableGauge<u64>,
}

impl GenAiMetrics {
    /// The instruments, made on `meter`.
    pub fn new(meter: &Meter) -> Self {
        let counter = |name, unit, description| {
            meter
                .u64_counter(name)
                .with_unit(unit)
                .with_description(description)
                .build()
        };
        let targets = Arc::new(Targets::default());
        let histograms = Arc::new(Deferred::new(meter));
        let (read, apply) = (targets.clone(), histograms.clone());
        GenAiMetrics {
            histograms,
            _remaining: meter
                .u64_observable_gauge(names::REMAINING)
                .with_description("What a provider's last answer stated is left of a limit.")
                .with_callback(move |observer| {
                    // Collection: first the recordings the request path left, then the
                    // stated quotas.
                    apply.apply(true);
                    read.observe_remaining(observer);
                })
                .build(),
            rate_limited: counter(
                names::RATE_LIMITED,
                "{response}",
                "Responses 429 (rate limited) received.",
            ),
            failovers: counter(
                names::FAILOVERS,
                "{request}",
                "Requests that left a provider for another.",
            ),
            breaker_openings: counter(
                names::BREAKER_OPENINGS,
                "{opening}",
                "Breakers that opened.",
            ),
            breaker_state: meter
                .u64_gauge(names::BREAKER_STATUS)
                .with_description(
                    "1 for the state a provider's breaker is in (closed, open, half_open), 0 for \
                     the others.",
                )
                .build(),
            cache_lookups: counter(names::CACHE_LOOKUPS, "{lookup}", "Response-cache look-ups."),
            cache_tokens_saved: counter(
                names::CACHE_TOKENS_SAVED,
                "{token}",
                "Tokens of the answers the response cache gave instead of a provider.",
            ),
            cost: meter
                .f64_counter(names::COST)
                .with_unit("{USD}")
                .with_description(
                    "What answers cost by their usage, in dollars, at the configured prices.",
                )
                .build(),
            settlements: counter(
                names::QUEUE_SETTLEMENTS,
                "{job}",
                "Durable jobs settled by a worker, by how.",
            ),
            targets,
        }
    }
}

/// The histograms, and the recordings the request path made on them since the metrics were
/// last collected.
///
/// A histogram recording costs the OpenTelemetry SDK about 3,000 instructions (it hashes
/// the recording's attributes to find its series, under a lock): three per answer would add
/// about 3 µs to every request. So the request path only queues them (a send on a lock-free
/// channel: a value and a shared attribute set), and they are recorded when the metrics are
/// collected, in the collection's callback, before the histograms are read: what is exported
/// is exact, and the SDK's work moves to the reader's thread. When nothing collects (no
/// reader, or the global no-op meter), the queue is applied on the request path every
/// [`MAX_PENDING`] recordings, so it stays bounded.
#[derive(Debug)]
struct Deferred {
    /// By [`Seconds`].
    seconds: [Histogram<f64>; 4],
    tokens: Histogram<u64>,
    send: mpsc::Sender<Recording>,
    receive: Mutex<mpsc::Receiver<Recording>>,
    /// Recordings queued and not yet applied.
    pending: AtomicUsize,
}

/// The most recordings queued before the request path applies them itself.
const MAX_PENDING: usize = 1 << 14;

/// The histograms in seconds.
#[derive(Debug, Clone, Copy)]
enum Seconds {
    Duration = 0,
    FirstChunk = 1,
    PerChunk = 2,
    AdmissionWait = 3,
}

/// A histogram recording, queued.
#[derive(Debug)]
enum Recording {
    Seconds(Seconds, f64, Attrs),
    Tokens(u64, Attrs),
}

impl Deferred {
    /// The histograms, made on `meter`, and an empty queue.
    fn new(meter: &Meter) -> Deferred {
        let seconds = |name, description| {
            meter
                .f64_histogram(name)
                .with_unit("s")
                .with_description(description)
                .with_boundaries(names::DURATION_BUCKETS.to_vec())
                .build()
        };
        let (send, receive) = mpsc::channel();
        Deferred {
            seconds: [
                seconds(names::OPERATION_DURATION, "GenAI operation duration."),
                seconds(
                    names::TIME_TO_FIRST_CHUNK,
                    "Time to receive the first chunk of a streamed answer.",
                ),
                seconds(
                    names::TIME_PER_OUTPUT_CHUNK,
                    "Time from the end of the previous chunk of a streamed answer to the end of \
                     this one.",
                ),
                seconds(
                    names::ADMISSION_WAIT,
                    "How long a request waited for admission before its send.",
                ),
            ],
            tokens: meter
                .u64_histogram(names::TOKEN_USAGE)
                .with_unit("{token}")
                .with_description("Number of input and output tokens used.")
                .with_boundaries(names::TOKEN_BUCKETS.to_vec())
                .build(),
            send,
            receive: Mutex::new(receive),
            pending: AtomicUsize::new(0),
        }
    }

    /// Queues `r`; past [`MAX_PENDING`] queued, applies the queue.
    fn push(&self, r: Recording) {
        if self.send.send(r).is_ok() && self.pending.fetch_add(1, Ordering::Relaxed) >= MAX_PENDING
        {
            self.apply(false);
        }
    }

    /// Records what is queued. `wait`: for the lock if another thread is applying (a
    /// collection must see everything queued before it); else leaves it to that thread.
    fn apply(&self, wait: bool) {
        let receive = if wait {
            self.receive.lock().unwrap_or_else(PoisonError::into_inner)
        } else {
            match self.receive.try_lock() {
                Ok(r) => r,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => return,
            }
        };
        while let Ok(r) = receive.try_recv() {
            self.pending.fetch_sub(1, Ordering::Relaxed);
            match r {
                Recording::Seconds(which, value, attrs) => {
                    self.seconds[which as usize].record(value, &attrs);
                }
                Recording::Tokens(n, attrs) => self.tokens.record(n, &attrs),
            }
        }
    }
}

/// The attribute sets of every target seen, per capability, made once each.
#[derive(Debug, Default)]
struct Targets {
    by_capability: [RwLock<HashMap<LimitKey, Arc<Sets>>>; 2],
}

impl Targets {
    /// `target`'s sets, made at its first event.
    fn of(&self, target: &Target<'_>) -> Arc<Sets> {
        let map = &self.by_capability[target.capability.index()];
        if let Some(sets) = map
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(target.key)
        {
            return sets.clone();
        }
        map.write()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(target.key.clone())
            .or_insert_with(|| Arc::new(Sets::new(target)))
            .clone()
    }

    /// The remaining-quota gauge's callback: what each target's last answer stated.
    fn observe_remaining(&self, observer: &dyn AsyncInstrument<u64>) {
        for map in &self.by_capability {
            for sets in map.read().unwrap_or_else(PoisonError::into_inner).values() {
                for (i, left) in sets.remaining.iter().enumerate() {
                    let left = left.load(Ordering::Relaxed);
                    if left != NOT_STATED {
                        observer.observe(left, &sets.remaining_attrs[i]);
                    }
                }
            }
        }
    }
}

/// A remaining count no answer has stated yet.
const NOT_STATED: u64 = u64::MAX;

/// One target's attribute sets, and what its provider last stated is left.
#[derive(Debug)]
struct Sets {
    /// The GenAI attributes: operation, provider, request model, server.
    gen_ai: Attrs,
    /// Those with each `gen_ai.token.type`: input, output.
    tokens: [Attrs; 2],
    /// Ours: configured provider, model, account.
    ours: Attrs,
    /// Ours with each `llm_failover.limit.unit`: requests, tokens.
    remaining_attrs: [Attrs; 2],
    /// The requests and tokens left as last stated ([`NOT_STATED`] before).
    remaining: [AtomicU64; 2],
    /// The sets of an answer, per model that answered (usually one).
    answered: RwLock<Vec<(Box<str>, Arc<Answered>)>>,
}

/// The sets an answer by one model records on.
#[derive(Debug)]
struct Answered {
    /// The GenAI attributes with `gen_ai.response.model`.
    duration: Attrs,
    /// Those with each `gen_ai.token.type`.
    tokens: [Attrs; 2],
}

/// An attribute set, shared by the recordings made on it.
type Attrs = Arc<[KeyValue]>;

/// `attrs` with `more` after them.
fn with(attrs: &[KeyValue], more: KeyValue) -> Attrs {
    attrs.iter().cloned().chain([more]).collect()
}

/// `attrs` with each `gen_ai.token.type`.
fn token_sets(attrs: &[KeyValue]) -> [Attrs; 2] {
    ["input", "output"].map(|t| with(attrs, KeyValue::new(names::TOKEN_TYPE, t)))
}

impl Sets {
    fn new(target: &Target<'_>) -> Sets {
        let model: StringValue = Arc::<str>::from(target.key.model.as_str()).into();
        let mut gen_ai = vec![
            KeyValue::new(names::OPERATION_NAME, operation_name(target.capability)),
            KeyValue::new(
                names::PROVIDER_NAME,
                provider_name(target.kind, target.key.provider.as_str()),
            ),
            KeyValue::new(names::REQUEST_MODEL, model.clone()),
        ];
        if let Some((host, port)) = target.server {
            gen_ai.push(KeyValue::new(names::SERVER_ADDRESS, host.to_owned()));
            gen_ai.push(KeyValue::new(names::SERVER_PORT, i64::from(port)));
        }
        let mut ours = vec![
            KeyValue::new(names::PROVIDER, target.key.provider.as_str().to_owned()),
            KeyValue::new(names::REQUEST_MODEL, model),
        ];
        if let Some(account) = &target.key.account {
            ours.push(KeyValue::new(names::ACCOUNT, account.to_string()));
        }
        Sets {
            tokens: token_sets(&gen_ai),
            remaining_attrs: ["requests", "tokens"]
                .map(|unit| with(&ours, KeyValue::new(names::LIMIT_UNIT, unit))),
            gen_ai: gen_ai.into(),
            ours: ours.into(),
            remaining: [AtomicU64::new(NOT_STATED), AtomicU64::new(NOT_STATED)],
            answered: RwLock::new(Vec::new()),
        }
    }

    /// The sets of an answer by `model`, made at its first.
    fn answered(&self, model: &str) -> Arc<Answered> {
        let find = |v: &[(Box<str>, Arc<Answered>)]| {
            v.iter()
                .find(|(m, _)| &**m == model)
                .map(|(_, a)| a.clone())
        };
        if let Some(a) = find(&self.answered.read().unwrap_or_else(PoisonError::into_inner)) {
            return a;
        }
        let mut all = self
            .answered
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(a) = find(&all) {
            return a;
        }
        let duration = with(
            &self.gen_ai,
            KeyValue::new(names::RESPONSE_MODEL, model.to_owned()),
        );
        let a = Arc::new(Answered {
            tokens: token_sets(&duration),
            duration,
        });
        // A provider that names a new model in every answer would grow this without end:
        // past a few, the answers share the sets of the first.
        if all.len() < MAX_RESPONSE_MODELS {
            all.push((model.into(), a.clone()));
            a
        } else {
            all[0].1.clone()
        }
    }
}

/// The response models kept per target ([`Sets::answered`]).
const MAX_RESPONSE_MODELS: usize = 8;

impl GenAiMetrics {
    fn tokens(&self, sets: &[Attrs; 2], usage: crate::types::Usage) {
        let h = &self.histograms;
        h.push(Recording::Tokens(usage.input_tokens, sets[0].clone()));
        h.push(Recording::Tokens(usage.output_tokens, sets[1].clone()));
    }

    fn attempt_ended(&self, a: &super::AttemptEnded<'_>) {
        let sets = self.targets.of(&a.target);
        let seconds = a.latency.as_secs_f64();
        match (a.error, a.response_model.filter(|m| !m.is_empty())) {
            (Some(kind), _) => {
                let attrs = with(
                    &sets.gen_ai,
                    KeyValue::new(names::ERROR_TYPE, kind.as_str()),
                );
                self.histograms
                    .push(Recording::Seconds(Seconds::Duration, seconds, attrs));
            }
            (None, model) => {
                let answered;
                let (duration, tokens) = match model {
                    Some(m) => {
                        answered = sets.answered(m);
                        (&answered.duration, &answered.tokens)
                    }
                    None => (&sets.gen_ai, &sets.tokens),
                };
                if let Some(usage) = a.usage {
                    self.tokens(tokens, usage);
                }
                if a.streamed && a.outcome == AttemptOutcome::Answered {
                    self.histograms.push(Recording::Seconds(
                        Seconds::FirstChunk,
                        seconds,
                        duration.clone(),
                    ));
                }
                self.histograms.push(Recording::Seconds(
                    Seconds::Duration,
                    seconds,
                    duration.clone(),
                ));
            }
        }
        if a.outcome == AttemptOutcome::RateLimited {
            self.rate_limited.add(1, &sets.ours);
        }
        if let Some(cost) = a.cost {
            self.cost.add(cost.usd(), &sets.ours);
        }
        if let Some(report) = a.report {
            for (i, window) in [report.requests, report.tokens].into_iter().enumerate() {
                if let Some(left) = window.and_then(|w| w.remaining) {
                    sets.remaining[i].store(left.min(NOT_STATED - 1), Ordering::Relaxed);
                }
            }
        }
    }

    /// Records `target`'s breaker in `state`: 1 for it, 0 for the two others.
    fn breaker_state(&self, target: &Target<'_>, state: &str) {
        let ours = &self.targets.of(target).ours;
        for s in names::BREAKER_STATES {
            let attrs = with(&ours[..1], KeyValue::new(names::BREAKER_STATE, s));
            self.breaker_state.record(u64::from(s == state), &attrs);
        }
    }
}

impl Observer for GenAiMetrics {
    fn observe(&self, event: &Event<'_>) {
        match event {
            Event::AttemptEnded(a) => self.attempt_ended(a),
            Event::ChunkReceived(c) => {
                let sets = self.targets.of(&c.target);
                self.histograms.push(Recording::Seconds(
                    Seconds::PerChunk,
                    c.since_previous.as_secs_f64(),
                    sets.gen_ai.clone(),
                ));
            }
            Event::StreamEnded(s) => {
                let sets = self.targets.of(&s.target);
                if let Some(usage) = s.usage {
                    self.tokens(&sets.tokens, usage);
                }
                if let Some(cost) = s.cost {
                    self.cost.add(cost.usd(), &sets.ours);
                }
            }
            Event::AdmissionWaited(w) => {
                let sets = self.targets.of(&w.target);
                self.histograms.push(Recording::Seconds(
                    Seconds::AdmissionWait,
                    w.wait.as_secs_f64(),
                    sets.ours.clone(),
                ));
            }
            Event::FailedOver(f) => {
                let sets = self.targets.of(&f.to);
                let attrs = with(
                    &sets.ours,
                    KeyValue::new(names::FAILOVER_FROM, f.from.as_str().to_owned()),
                );
                self.failovers.add(1, &attrs);
            }
            Event::BreakerOpened(b) => {
                self.breaker_openings
                    .add(1, &self.targets.of(&b.target).ours);
                self.breaker_state(&b.target, "open");
            }
            Event::Sent(s) if s.probe => self.breaker_state(&s.target, "half_open"),
            Event::BreakerClosed(target) => self.breaker_state(target, "closed"),
            Event::Cache(c) => {
                self.cache_lookups
                    .add(1, &[KeyValue::new(names::CACHE_HIT, c.hit)]);
                if c.hit {
                    self.cache_tokens_saved.add(c.tokens, &[]);
                }
            }
            Event::JobSettled(j) => self.settlements.add(
                1,
                &[
                    KeyValue::new(names::JOB_KIND, j.kind.to_owned()),
                    KeyValue::new(names::JOB_SETTLED, j.settled.as_str()),
                ],
            ),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With nothing collecting (here the global no-op meter), the request path applies the
    /// queue itself: it never holds more than [`MAX_PENDING`] recordings.
    #[test]
    fn with_nothing_collecting_the_queue_stays_bounded() {
        let m = GenAiMetrics::new(&opentelemetry::global::meter("test"));
        let attrs: Attrs = Arc::from(vec![KeyValue::new("k", "v")]);
        let mut most = 0;
        for _ in 0..3 * MAX_PENDING {
            m.histograms.push(Recording::Tokens(1, attrs.clone()));
            most = most.max(m.histograms.pending.load(Ordering::Relaxed));
        }
        assert!(most <= MAX_PENDING + 1, "{most}");
        assert!(Arc::strong_count(&attrs) <= MAX_PENDING + 2);
        m.histograms.apply(true);
        assert_eq!(m.histograms.pending.load(Ordering::Relaxed), 0);
        assert_eq!(
            Arc::strong_count(&attrs),
            1,
            "every recording applied and dropped"
        );
    }

    /// The conventions' provider values, by adapter kind and name.
    #[test]
    fn provider_names_follow_the_conventions_list() {
        let table = [
            (("openai", "openai"), "openai"),
            (("openai", "my-local-llama"), "openai"),
            (("openai", "groq"), "groq"),
            (("openai", "Mistral"), "mistral_ai"),
            (("openai", "xai"), "x_ai"),
            (("azure", "azure-east"), "azure.ai.openai"),
            (("anthropic", "claude"), "anthropic"),
            (("gemini", "google"), "gcp.gemini"),
            (("deepgram", "dg"), "deepgram"),
        ];
        for ((kind, id), want) in table {
            assert_eq!(provider_name(kind, id), want, "{kind} {id}");
        }
        assert_eq!(operation_name(Capability::Chat), "chat");
        assert_eq!(operation_name(Capability::Transcription), "speech_to_text");
        assert_eq!(operation_name(Capability::Embedding), "embeddings");
    }
}
