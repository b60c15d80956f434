//! Counters a caller can read: what each provider was sent and answered, counted from the
//! events the request path tells its observers ([`observe`](crate::observe): `Stats` is the
//! default observer, always told first).
//!
//! # Examples
//!
//! [`Client::stats`](crate::Client::stats) takes a [`Stats`] snapshot; it serializes (to
//! JSON for a metrics endpoint, with `admission_wait` in milliseconds):
//!
//! ```
//! # use std::sync::Arc;
//! # use llm_failover::provider::openai::OpenAi;
//! # use llm_failover::{Client, ProviderId, ProviderSettings};
//! # let local = OpenAi::new(ProviderId::new("local"), "http://127.0.0.1:9/v1".parse()?)
//! #     .with_chat_model("llama3.2");
//! # let client = Client::builder().provider(Arc::new(local), ProviderSettings::new()).build()?;
//! let stats = client.stats();
//! let json = serde_json::to_value(&stats)?;
//! assert_eq!(json["providers"]["local"]["sent"], 0);
//! assert_eq!(json["providers"]["local"]["admission_wait"], 0.0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use serde::Serialize;

use crate::cache::CacheStats;
use crate::error::Disposition;
use crate::id::ProviderId;
use crate::observe::{AttemptOutcome, Event, Observer, Pricing, Target};
use crate::striped::Striped;
use crate::types::price::Cost;

/// One thread stripe of a provider's counters (see [`Counters`]).
#[derive(Debug, Default)]
pub(crate) struct Tally {
    pub(crate) sent: AtomicU64,
    pub(crate) ok: AtomicU64,
    pub(crate) rate_limited: AtomicU64,
    pub(crate) quota_exhausted: AtomicU64,
    pub(crate) server_errors: AtomicU64,
    pub(crate) transient: AtomicU64,
    pub(crate) terminal: AtomicU64,
    pub(crate) invalid_answers: AtomicU64,
    pub(crate) failovers: AtomicU64,
    pub(crate) breaker_opens: AtomicU64,
    pub(crate) admission_wait_us: AtomicU64,
    pub(crate) input_tokens: AtomicU64,
    pub(crate) cached_input_tokens: AtomicU64,
    pub(crate) output_tokens: AtomicU64,
    pub(crate) priced_by_count: AtomicU64,
    pub(crate) priced_by_bound: AtomicU64,
    pub(crate) cost_nano_usd: AtomicU64,
}

impl Tally {
    pub(crate) fn add_wait(&self, wait: Duration) {
        let us = u64::try_from(wait.as_micros()).unwrap_or(u64::MAX);
        self.admission_wait_us.fetch_add(us, Relaxed);
    }
}

/// Live counters of one provider (lock-free), striped: each thread adds to its own stripe,
/// so requests finishing on two threads do not pass one cache line back and forth for every
/// count; a snapshot sums the stripes. (A snapshot taken while requests run may, as before,
/// see one counter of a request and not yet the next.)
#[derive(Debug, Default)]
pub(crate) struct Counters {
    stripes: Striped<Tally>,
}

impl Counters {
    /// The calling thread's stripe.
    pub(crate) fn here(&self) -> &Tally {
        self.stripes.here()
    }

    fn snapshot(&self) -> ProviderStats {
        let sum = |f: fn(&Tally) -> &AtomicU64| -> u64 {
            self.stripes
                .iter()
                .map(|t| f(t).load(Relaxed))
                .fold(0, u64::wrapping_add)
        };
        ProviderStats {
            sent: sum(|t| &t.sent),
            ok: sum(|t| &t.ok),
            rate_limited: sum(|t| &t.rate_limited),
            quota_exhausted: sum(|t| &t.quota_exhausted),
            server_errors: sum(|t| &t.server_errors),
            transient: sum(|t| &t.transient),
            terminal: sum(|t| &t.terminal),
            invalid_answers: sum(|t| &t.invalid_answers),
            failovers: sum(|t| &t.failovers),
            breaker_opens: sum(|t| &t.breaker_opens),
            admission_wait: Duration::from_micros(sum(|t| &t.admission_wait_us)),
            input_tokens: sum(|t| &t.input_tokens),
            cached_input_tokens: sum(|t| &t.cached_input_tokens),
            output_tokens: sum(|t| &t.output_tokens),
            priced_by_count: sum(|t| &t.priced_by_count),
            priced_by_bound: sum(|t| &t.priced_by_bound),
            cost: Cost::from_nano_usd(sum(|t| &t.cost_nano_usd)),
        }
    }
}

/// The [`Stats`] observer: each provider's [`Counters`], by its place among the client's
/// providers ([`Target`]'s slot). The default observer, always told first.
#[derive(Debug, Default)]
pub(crate) struct Tallies {
    providers: Box<[Counters]>,
}

impl Tallies {
    pub(crate) fn new(providers: usize) -> Self {
        Tallies {
            providers: (0..providers).map(|_| Counters::default()).collect(),
        }
    }

    /// The calling thread's stripe of `target`'s counters.
    fn of(&self, target: &Target<'_>) -> Option<&Tally> {
        self.providers.get(target.slot).map(Counters::here)
    }

    /// Each provider's snapshot, with its id.
    pub(crate) fn snapshots<'a>(
        &'a self,
        ids: impl Iterator<Item = &'a ProviderId> + 'a,
    ) -> impl Iterator<Item = (&'a ProviderId, &'a Counters)> + 'a {
        ids.zip(self.providers.iter())
    }
}

impl Observer for Tallies {
    fn observe(&self, event: &Event<'_>) {
        let add = |counter: &AtomicU64, n: u64| {
            counter.fetch_add(n, Relaxed);
        };
        match event {
            Event::Sent(s) => {
                let Some(t) = self.of(&s.target) else { return };
                add(&t.sent, 1);
                match s.pricing {
                    Pricing::Bound => add(&t.priced_by_bound, 1),
                    Pricing::Counted => add(&t.priced_by_count, 1),
                    _ => {}
                }
            }
            Event::AttemptEnded(a) => {
                let Some(t) = self.of(&a.target) else { return };
                match a.outcome {
                    AttemptOutcome::Answered => add(&t.ok, 1),
                    AttemptOutcome::RateLimited => add(&t.rate_limited, 1),
                    AttemptOutcome::QuotaExhausted => add(&t.quota_exhausted, 1),
                    AttemptOutcome::Transient { server_error } => {
                        add(&t.transient, 1);
                        if server_error {
                            add(&t.server_errors, 1);
                        }
                    }
                    _ => add(&t.terminal, 1),
                }
                if let Some(u) = a.usage {
                    add(&t.input_tokens, u.input_tokens);
                    add(&t.cached_input_tokens, u.cached_input_tokens);
                    add(&t.output_tokens, u.output_tokens);
                }
                if let Some(c) = a.cost {
                    add(&t.cost_nano_usd, c.nano_usd());
                }
            }
            Event::InvalidAnswer(target) => {
                if let Some(t) = self.of(target) {
                    add(&t.invalid_answers, 1);
                }
            }
            Event::AdmissionWaited(w) => {
                if let Some(t) = self.of(&w.target) {
                    t.add_wait(w.wait);
                }
            }
            Event::FailedOver(f) => {
                if let Some(t) = self.providers.get(f.from_slot).map(Counters::here) {
                    add(&t.failovers, 1);
                }
            }
            Event::BreakerOpened(b) => {
                if let Some(t) = self.of(&b.target) {
                    add(&t.breaker_opens, 1);
                }
            }
            Event::StreamEnded(s) => {
                let Some(t) = self.of(&s.target) else { return };
                if let Some(u) = s.usage {
                    add(&t.input_tokens, u.input_tokens);
                    add(&t.cached_input_tokens, u.cached_input_tokens);
                    add(&t.output_tokens, u.output_tokens);
                }
                if let Some(c) = s.cost {
                    add(&t.cost_nano_usd, c.nano_usd());
                }
                if s.error
                    .is_some_and(|k| k.disposition() == Disposition::Transient)
                {
                    add(&t.transient, 1);
                }
            }
            _ => {}
        }
    }
}

/// A snapshot of one provider's counters.
///
/// # Examples
///
/// ```
/// use llm_failover::ProviderStats;
///
/// /// The share of sent requests that were throttled.
/// fn throttled(s: &ProviderStats) -> f64 {
///     s.rate_limited as f64 / s.sent.max(1) as f64
/// }
/// # use std::sync::Arc;
/// # use llm_failover::provider::openai::OpenAi;
/// # use llm_failover::{Client, ProviderId, ProviderSettings};
/// # let local = OpenAi::new(ProviderId::new("local"), "http://127.0.0.1:9/v1".parse()?)
/// #     .with_chat_model("llama3.2");
/// # let client = Client::builder().provider(Arc::new(local), ProviderSettings::new()).build()?;
/// let stats = client.stats();
/// let local: &ProviderStats = stats.provider("local").unwrap();
/// assert_eq!((local.sent, local.ok, throttled(local)), (0, 0, 0.0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ProviderStats {
    /// Requests sent (attempts that reached the network).
    pub sent: u64,
    /// Successful answers.
    pub ok: u64,
    /// Answers that throttled us (429 or equivalent).
    pub rate_limited: u64,
    /// Answers saying a quota or credit is exhausted.
    pub quota_exhausted: u64,
    /// 5xx answers (including 529).
    pub server_errors: u64,
    /// All transient failures: 5xx, timeouts, connection errors, undecodable answers.
    pub transient: u64,
    /// Answers that can only fail again (4xx other than 429).
    pub terminal: u64,
    /// Answers that arrived (and count in `ok`) but broke the requested structure: not JSON,
    /// or not matching the schema ([`ErrorKind::InvalidAnswer`](crate::ErrorKind::InvalidAnswer)).
    /// Counted apart from transport failures.
    pub invalid_answers: u64,
    /// Times a request left this provider for another after a failure.
    pub failovers: u64,
    /// Times this provider's breaker went from closed to open.
    pub breaker_opens: u64,
    /// Time requests waited for admission to this provider: a sum over requests, which wait
    /// at the same time, so it can exceed the time that passed.
    #[serde(serialize_with = "ser_ms")]
    pub admission_wait: Duration,
    /// Input tokens reported by successful answers.
    pub input_tokens: u64,
    /// Of those, the ones the provider read from its prompt cache.
    pub cached_input_tokens: u64,
    /// Output tokens reported by successful answers.
    pub output_tokens: u64,
    /// Chat requests sent whose admission cost was counted with the tokenizer (a token limit
    /// applied and the buckets were at least half spent).
    pub priced_by_count: u64,
    /// Chat requests sent whose admission cost was the tokenizer-free bound (a token limit
    /// applied and the request fit in the buckets' upper half). Requests without any token
    /// limit are in neither count.
    pub priced_by_bound: u64,
    /// What the answers cost by their usage, where their models have prices (dollars, in
    /// JSON).
    pub cost: Cost,
}

fn ser_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1000.0)
}

/// Counters of every provider, by name. Returned by [`Client::stats`](crate::Client::stats).
///
/// # Examples
///
/// ```
/// # use std::sync::Arc;
/// # use llm_failover::provider::openai::OpenAi;
/// # use llm_failover::{Client, ProviderId, ProviderSettings};
/// # let local = OpenAi::new(ProviderId::new("local"), "http://127.0.0.1:9/v1".parse()?)
/// #     .with_chat_model("llama3.2");
/// # let client = Client::builder().provider(Arc::new(local), ProviderSettings::new()).build()?;
/// let stats = client.stats();
/// for (provider, s) in &stats.providers {
///     println!("{provider}: {} sent, {} throttled", s.sent, s.rate_limited);
/// }
/// assert_eq!(stats.total().sent, 0);
/// assert!(stats.provider("local").is_some());
/// assert!(stats.provider("other").is_none());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Stats {
    /// Per provider.
    pub providers: BTreeMap<ProviderId, ProviderStats>,
    /// The response cache's counters, when the client has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheStats>,
}

impl Stats {
    pub(crate) fn collect<'a>(
        counters: impl Iterator<Item = (&'a ProviderId, &'a Counters)>,
    ) -> Self {
        Stats {
            providers: counters.map(|(id, c)| (id.clone(), c.snapshot())).collect(),
            cache: None,
        }
    }

    /// The counters of one provider.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::{ProviderId, ProviderStats, Stats};
    ///
    /// let mut groq = ProviderStats::default();
    /// groq.sent = 10;
    /// groq.rate_limited = 3;
    /// let mut stats = Stats::default();
    /// stats.providers.insert(ProviderId::new("groq"), groq);
    ///
    /// assert_eq!(stats.provider("groq").map(|s| s.rate_limited), Some(3));
    /// assert!(stats.provider("openai").is_none()); // not configured
    /// ```
    pub fn provider(&self, id: &str) -> Option<&ProviderStats> {
        self.providers
            .iter()
            .find(|(k, _)| k.as_str() == id)
            .map(|(_, v)| v)
    }

    /// Sums over every provider.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use llm_failover::{ProviderId, ProviderStats, Stats};
    ///
    /// let mut stats = Stats::default();
    /// for (name, sent, wait_ms) in [("openai", 7, 250), ("anthropic", 5, 100)] {
    ///     let mut s = ProviderStats::default();
    ///     s.sent = sent;
    ///     s.ok = sent - 1;
    ///     s.admission_wait = Duration::from_millis(wait_ms);
    ///     stats.providers.insert(ProviderId::new(name), s);
    /// }
    /// let total = stats.total();
    /// assert_eq!((total.sent, total.ok), (12, 10));
    /// assert_eq!(total.admission_wait, Duration::from_millis(350));
    /// assert_eq!(Stats::default().total(), ProviderStats::default());
    /// ```
    pub fn total(&self) -> ProviderStats {
        self.providers
            .values()
            .fold(ProviderStats::default(), |mut t, p| {
                t.sent += p.sent;
                t.ok += p.ok;
                t.rate_limited += p.rate_limited;
                t.quota_exhausted += p.quota_exhausted;
                t.server_errors += p.server_errors;
                t.transient += p.transient;
                t.terminal += p.terminal;
                t.invalid_answers += p.invalid_answers;
                t.failovers += p.failovers;
                t.breaker_opens += p.breaker_opens;
                t.admission_wait += p.admission_wait;
                t.input_tokens += p.input_tokens;
                t.cached_input_tokens += p.cached_input_tokens;
                t.output_tokens += p.output_tokens;
                t.priced_by_count += p.priced_by_count;
                t.priced_by_bound += p.priced_by_bound;
                t.cost += p.cost;
                t
            })
    }
}
