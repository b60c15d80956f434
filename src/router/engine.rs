//! The router itself: its providers, a request from start to end (the common first attempt
//! sent at once, the rest handed to the attempt loop in `run.rs`), breakers and the limiter.

use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;
use tracing::{field, Instrument};

use super::breaker::{Allow, Breaker, BreakerSettings, BreakerState, SharedBreaker};
use super::options::RequestOptions;
use super::pick::{AtOnce, Booked, Pricing};
pub(crate) use super::pick::{Done, Job, Work};
use super::run::{Failed, Run};
use crate::clock::Clock;
use crate::config::{Limits, Policy};
use crate::error::{Disposition, ErrorKind, Result};
use crate::http::Transport;
use crate::id::{Capability, Credential};
use crate::provider::{chat_once, Exchange, Provider, RequestContext};
use crate::ratelimit::{Cost, LimitKey, LimitReport, Limiter, Tightening};
use crate::retry::{Backoff, SharedBudget};
use crate::rng::Rng;
use crate::stats::{Counters, Stats};
use crate::types::{ChatRequest, ChatResponse};

/// How long a request that finds a half-open provider's probe in flight waits before looking
/// again.
pub(super) const PROBE_POLL: Duration = Duration::from_millis(250);

/// One configured provider, as the router sees it.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) adapter: Arc<dyn Provider>,
    pub(crate) limits: Limits,
    pub(crate) model_limits: HashMap<String, Limits>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) credential: Option<Credential>,
    pub(crate) counters: Counters,
    /// Set once a response of this provider states a token window: from then on its requests
    /// are priced in tokens even where no token limit is configured.
    pub(crate) token_limits_seen: AtomicBool,
    /// The breaker of the configured account (tenants' accounts are in
    /// [`Router::tenant_breakers`]): no map lookup, and no lock while it is calm.
    pub(crate) breaker: SharedBreaker,
    /// Set before anything of this provider reaches the limiter store (a report, a 429):
    /// until then, with nothing configured, admission needs no booking.
    pub(crate) limiter_engaged: AtomicBool,
    /// The limit key of the adapter's default model for each capability (chat,
    /// transcription) and the configured account: what most requests are keyed by, lent
    /// rather than built (no allocation, no shared reference count touched) per request.
    pub(crate) default_keys: [Option<LimitKey>; 2],
}

impl Entry {
    /// The default keys of `adapter`, for the `default_keys` field.
    pub(crate) fn default_keys_of(adapter: &dyn Provider) -> [Option<LimitKey>; 2] {
        [Capability::Chat, Capability::Transcription].map(|c| {
            adapter
                .default_model(c)
                .map(|m| LimitKey::new(adapter.id().clone(), m))
        })
    }

    pub(super) fn default_key(&self, capability: Capability) -> Option<&LimitKey> {
        let i = match capability {
            Capability::Chat => 0,
            Capability::Transcription => 1,
        };
        self.default_keys[i].as_ref()
    }

    pub(super) fn limits_for(&self, model: &str) -> Limits {
        self.model_limits.get(model).copied().unwrap_or(self.limits)
    }

    /// From now on admission to this provider goes through the limiter store (see
    /// `Router::admits_freely`). Written once: later calls only read the flag, so the cache
    /// line is not written on every response.
    pub(super) fn engage_limiter(&self) {
        if !self.limiter_engaged.load(Ordering::Relaxed) {
            self.limiter_engaged.store(true, Ordering::Relaxed);
        }
    }

    /// Whether admission under `limits` spends tokens: a token limit is configured, or the
    /// provider stated one. When neither, no bucket would read a token count, so none is
    /// estimated (tokenizing is the costliest step of admission).
    pub(super) fn counts_tokens(&self, limits: &Limits) -> bool {
        limits.limits_tokens() || self.token_limits_seen.load(Ordering::Relaxed)
    }
}

/// Router settings derived from the policy.
#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) policy: Policy,
    pub(crate) backoff: Backoff,
    pub(crate) breaker: BreakerSettings,
    /// A provider whose admission wait exceeds this is passed over for the next one that can
    /// start sooner (the first provider is still used when every wait is longer).
    pub(crate) spill_after: Duration,
}

/// A tenant breaker's scope: the provider's index and the tenant's account.
pub(crate) type BreakerKey = (usize, Arc<str>);

/// The engine behind [`Client`](crate::Client).
#[derive(Debug)]
pub(crate) struct Router {
    pub(crate) entries: Vec<Entry>,
    pub(crate) chat: Vec<usize>,
    pub(crate) transcription: Vec<usize>,
    pub(crate) limiter: Limiter,
    /// The limiter's store is this process's memory (not one shared with other processes,
    /// whose bookings this one cannot see coming).
    pub(crate) local_store: bool,
    pub(crate) transport: Transport,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) rng: Arc<dyn Rng>,
    pub(crate) settings: Settings,
    pub(crate) budget: SharedBudget,
    /// Breakers of per-request accounts (a tenant's own key), created on first use.
    pub(crate) tenant_breakers: Mutex<HashMap<BreakerKey, Breaker>>,
    /// Orders breaker verdicts and transitions in the trace.
    pub(crate) breaker_seq: AtomicU64,
    pub(crate) request_ids: AtomicU64,
}

/// When and how a send was allowed (see [`Router::claim`]).
pub(super) struct Stamp {
    /// Order among breaker decisions (0 when the send trace is off).
    pub(super) seq: u64,
    /// When the send was decided, for the trace (0 when it is off).
    pub(super) wall_ms: u64,
    pub(super) probe: bool,
    /// When the send was decided.
    pub(super) at: Instant,
}

/// How a request's first attempt, sent at once, ended (see [`Router::first_answer`]).
enum First<'r> {
    /// The request's result.
    Done(Result<Done>),
    /// An answer the limiter learns from (or reconciles) before it is returned.
    Settle(Pin<Box<dyn Future<Output = Result<Done>> + Send + 'r>>),
    /// A failure for the attempt loop to act on (boxed: rare, and large).
    Failed(Box<Failed<'r>>),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Router {
    pub(crate) fn stats(&self) -> Stats {
        Stats::collect(self.entries.iter().map(|e| (e.adapter.id(), &e.counters)))
    }

    pub(super) fn with_breaker<T>(
        &self,
        entry: usize,
        account: &Option<Arc<str>>,
        f: impl FnOnce(&mut Breaker) -> T,
    ) -> T {
        match account {
            None => self.entries[entry].breaker.update(f),
            Some(account) => {
                let mut map = lock(&self.tenant_breakers);
                let b = map
                    .entry((entry, account.clone()))
                    .or_insert_with(|| Breaker::new(self.settings.breaker));
                f(b)
            }
        }
    }

    /// Runs one request to completion, inside the request's span.
    ///
    /// The common chat request is sent at once by a compact future: its first provider in
    /// the order is calm (closed, no failure counted), nothing is configured or has been
    /// stated about its limits (so nothing is booked), it is for the configured account and
    /// the adapter's default model, and the send trace is off (see
    /// [`first_pick`](Self::first_pick)). Anything else — a booking, a wait, a half-open
    /// probe, a tenant's breaker, a stream, a transcription — and every attempt after a
    /// failure goes through the general attempt loop, boxed: its state is large (every
    /// suspension point of every kind of job), and moving it and reading it back cost the
    /// common request more than its work.
    ///
    /// Not an `async fn`: the returned future is the request itself, not one more layer
    /// around it.
    ///
    /// `answer` takes the job's answer out of [`Done`] (in here, so that no combinator around
    /// this future is one more copy of it for the caller to make).
    pub(crate) fn execute<'a, T: 'a>(
        self: &'a Arc<Self>,
        work: Work,
        opts: &'a RequestOptions,
        answer: fn(Done) -> Result<T>,
    ) -> impl Future<Output = Result<T>> + Send + 'a {
        // The id is taken only when the span is enabled (tracing evaluates fields then): a
        // counter shared by every request is not touched for nothing.
        let span = tracing::info_span!(
            "llm_failover.request",
            request = self.request_ids.fetch_add(1, Ordering::Relaxed),
            capability = %work.job().capability(),
            attempts = field::Empty,
            outcome = field::Empty,
        );
        let recorded = span.clone();
        async move {
            let (result, attempts) = 'run: {
                let policy = &self.settings.policy;
                let started = self.clock.now();
                let deadline = started + opts.deadline.unwrap_or(policy.deadline);
                let order = match self.order(work.job().capability(), opts) {
                    Ok(order) => order,
                    Err(e) => break 'run (Err(e), 0),
                };
                self.budget.deposit(started);
                let mut run = Run::new(started, deadline, order);
                let handed = 'first: {
                    let Job::Chat(r) = work.job() else {
                        break 'first None;
                    };
                    let Some(go) = self.first_pick(&run, r, opts) else {
                        break 'first None;
                    };
                    // Sent from here, the exchange awaited in this future's own state.
                    let adapter = self.entries[go.entry].adapter.as_ref();
                    let cost = Cost::one_request();
                    let (ctx, timeout, span) = self.prepare(
                        go.entry,
                        go.key,
                        opts,
                        deadline,
                        started,
                        1,
                        Duration::ZERO,
                        cost,
                    );
                    let clock = &self.clock;
                    let x = chat_once(adapter, &self.transport, r, ctx, timeout, move || {
                        clock.both()
                    })
                    .instrument(span.clone())
                    .await;
                    match self.first_answer(&mut run, r, go, x, span) {
                        First::Done(result) => break 'run (result, run.attempts),
                        First::Settle(settled) => break 'run (settled.await, run.attempts),
                        First::Failed(f) => Some(*f),
                    }
                };
                Box::pin(self.attempt_loop(work, opts, run, handed)).await
            };
            let result = result.and_then(answer).map_err(|e| e.with_sends(attempts));
            recorded.record("attempts", attempts);
            match &result {
                Ok(_) => recorded.record("outcome", "ok"),
                Err(e) => recorded.record("outcome", e.kind().as_str()),
            };
            result
        }
        .instrument(span)
    }

    /// The answer to a first attempt sent at once (see [`first_pick`](Self::first_pick)):
    /// counted, and returned, or to be settled with the limiter first, or handed to the
    /// attempt loop as a failure.
    fn first_answer<'a>(
        &'a self,
        run: &mut Run<'a>,
        req: &ChatRequest,
        go: AtOnce<'a>,
        x: Exchange<ChatResponse>,
        span: tracing::Span,
    ) -> First<'a> {
        let AtOnce { entry: idx, key } = go;
        if x.sent {
            self.record_send(run, idx, 1, Pricing::Requests);
        }
        let err = match x.result {
            Ok(answer) => {
                let booked = Job::Chat(req).booked(Cost::one_request());
                let (done, used) = self.succeeded(
                    Done::Chat(answer),
                    run.attempts,
                    idx,
                    key,
                    false,
                    booked,
                    &span,
                );
                if x.report.is_none() && used.is_none() {
                    return First::Done(Ok(done));
                }
                // Rare here: the first answer that states limits engages the limiter, and
                // from then on requests take the attempt loop.
                let entry = &self.entries[idx];
                return First::Settle(Box::pin(async move {
                    self.settle(done, x.report.as_deref(), used, entry, key, booked)
                        .await
                }));
            }
            Err(err) => err,
        };
        First::Failed(Box::new(Failed {
            slot: 0,
            entry: idx,
            key: Cow::Borrowed(key),
            probe: false,
            err,
            report: x.report,
            span,
        }))
    }

    /// What an attempt to `idx` sends with: the request context (model and credential), its
    /// timeout (the provider's or the policy's, within the deadline) and its span.
    #[allow(clippy::too_many_arguments)] // the attempt's facts, each recorded on its span
    pub(super) fn prepare<'k>(
        &'k self,
        idx: usize,
        key: &'k LimitKey,
        opts: &'k RequestOptions,
        deadline: Instant,
        at: Instant,
        attempt_no: u32,
        admission_wait: Duration,
        cost: Cost,
    ) -> (RequestContext<'k>, Duration, tracing::Span) {
        let entry = &self.entries[idx];
        let provider = entry.adapter.id();
        let timeout = entry
            .timeout
            .unwrap_or(self.settings.policy.request_timeout)
            .min(deadline.saturating_duration_since(at))
            .max(Duration::from_millis(1));
        let credential = opts.credential_for(provider).or(entry.credential.as_ref());
        let span = tracing::info_span!(
            "attempt",
            provider = %provider,
            model = %key.model,
            attempt = attempt_no,
            admission_wait_ms = admission_wait.as_millis() as u64,
            estimated_tokens = cost.tokens(),
            status = field::Empty,
            retry_after_ms = field::Empty,
            actual_tokens = field::Empty,
        );
        (RequestContext::new(&key.model, credential), timeout, span)
    }

    /// A successful attempt: the breaker hears of it, the answer is counted and stamped.
    /// Returns it with the tokens to reconcile its booking with (see [`finish`](Self::finish)).
    #[allow(clippy::too_many_arguments)] // the attempt's facts
    pub(super) fn succeeded(
        &self,
        done: Done,
        attempts: u32,
        idx: usize,
        key: &LimitKey,
        probe: bool,
        booked: Booked,
        span: &tracing::Span,
    ) -> (Done, Option<u64>) {
        span.record("status", "ok");
        self.on_success(idx, &key.account, probe);
        let entry = &self.entries[idx];
        Counters::add(&entry.counters.here().ok, 1);
        self.finish(done, attempts, entry, booked, span)
    }

    /// Claims the right to send to `idx` now: `None` when its breaker is open (or its probe is
    /// out); a held probe stays the probe. The verdict is taken under the breakers' lock with a
    /// sequence number, so the trace of sends and openings shows their real order (the number
    /// and the wall-clock time are taken only when that trace is enabled).
    pub(super) fn claim(
        &self,
        idx: usize,
        account: &Option<Arc<str>>,
        probe: bool,
    ) -> Option<Stamp> {
        let traced = tracing::enabled!(target: "llm_failover::send", tracing::Level::DEBUG);
        if !probe && !traced {
            // The breaker's verdict alone (a calm breaker gives it without its lock).
            let at = self.clock.now();
            let probe = self.acquire(idx, account, at).sends()?;
            return Some(Stamp {
                seq: 0,
                wall_ms: 0,
                probe,
                at,
            });
        }
        self.with_breaker(idx, account, |b| {
            let at = self.clock.now();
            let probe = if probe {
                match b.state(at) {
                    // Still ours to send.
                    BreakerState::HalfOpen {
                        probe_in_flight: true,
                    } => true,
                    // Re-tripped while we waited (a late failure): not now.
                    BreakerState::Open { .. } => return None,
                    _ => b.acquire(at).sends()?,
                }
            } else {
                b.acquire(at).sends()?
            };
            let (seq, wall) = if traced {
                let seq = self.breaker_seq.fetch_add(1, Ordering::Relaxed);
                (seq, wall_ms(self.clock.wall()))
            } else {
                (0, 0)
            };
            Some(Stamp {
                seq,
                wall_ms: wall,
                probe,
                at,
            })
        })
    }

    /// [`Breaker::acquire`] on the breaker of `idx` for `account` (the configured account's
    /// answers without a lock while calm: see [`SharedBreaker`]).
    pub(super) fn acquire(&self, idx: usize, account: &Option<Arc<str>>, now: Instant) -> Allow {
        match account {
            None => self.entries[idx].breaker.acquire(now),
            Some(_) => self.with_breaker(idx, account, |b| b.acquire(now)),
        }
    }

    /// A request to `idx` was answered ([`Breaker::on_success`], as [`acquire`](Self::acquire)).
    pub(super) fn on_success(&self, idx: usize, account: &Option<Arc<str>>, probe: bool) {
        match account {
            None => self.entries[idx].breaker.on_success(probe),
            Some(_) => self.with_breaker(idx, account, |b| b.on_success(probe)),
        }
    }

    /// Applies `f` to a breaker under its lock, then reports where the breaker stands if it is
    /// open (for operators, and for the soak test that checks nothing is ever sent into an
    /// open breaker). Returns `f`'s answer: whether this opened a closed breaker.
    pub(super) fn transition(
        &self,
        idx: usize,
        account: &Option<Arc<str>>,
        f: impl FnOnce(&mut Breaker, Instant) -> bool,
    ) -> bool {
        let (opened, open) = self.with_breaker(idx, account, |b| {
            let now = self.clock.both();
            let opened = f(b, now.instant);
            let open = match b.state(now.instant) {
                BreakerState::Open { until } => Some((
                    self.breaker_seq.fetch_add(1, Ordering::Relaxed),
                    wall_ms(now.wall),
                    wall_ms(now.wall + (until - now.instant)),
                )),
                _ => None,
            };
            (opened, open)
        });
        if let Some((seq, at, until)) = open {
            tracing::info!(
                target: "llm_failover::breaker",
                provider = %self.entries[idx].adapter.id(),
                seq,
                wall_ms = at,
                until_wall_ms = until,
                "breaker open"
            );
        }
        opened
    }

    /// Stamps the answer with its attempt count and counts its tokens. Returns the tokens
    /// to reconcile the booking with: `Some` only where tokens were booked and the answer
    /// reports its usage. Not `async`: most answers have nothing to reconcile, and the
    /// caller awaits the store only for those that do.
    pub(super) fn finish(
        &self,
        done: Done,
        attempts: u32,
        entry: &Entry,
        booked: Booked,
        span: &tracing::Span,
    ) -> (Done, Option<u64>) {
        match done {
            Done::Chat(mut r) => {
                r.attempts = attempts;
                let used = r.usage.and_then(|u| {
                    span.record("actual_tokens", u.total());
                    booked.spend(entry, u)
                });
                (Done::Chat(r), used)
            }
            Done::Transcript(mut t) => {
                t.attempts = attempts;
                (Done::Transcript(t), None)
            }
            Done::Stream(mut s) => {
                s.set_attempts(attempts);
                (Done::Stream(s), None)
            }
        }
    }

    /// Teaches the limiter what a response stated; from the first token window on, this
    /// provider's requests are priced in tokens.
    ///
    /// Not an `async fn` (nor is [`tighten`](Self::tighten)): what is awaited is the store's
    /// own boxed future, so the attempt loop holds a pointer, not two more state machines
    /// carrying a copy of the report.
    pub(super) fn learn<'a>(
        &'a self,
        entry: &Entry,
        key: &'a LimitKey,
        report: &LimitReport,
    ) -> impl Future<Output = Result<()>> + Send + 'a {
        let states_tokens = report.tokens.is_some()
            || report.input_tokens.is_some()
            || report.output_tokens.is_some();
        if states_tokens
            && !entry.token_limits_seen.load(Ordering::Relaxed)
            && !entry.token_limits_seen.swap(true, Ordering::Relaxed)
        {
            crate::ratelimit::preload(&key.model);
        }
        let learned = Tightening {
            report: Some(report.clone()),
            ..Tightening::default()
        };
        self.tighten(entry, key, learned)
    }

    /// The one way the router tightens the limiter: the provider's admission goes through
    /// the store from now on (see [`Router::admits_freely`]), then the store learns.
    pub(super) fn tighten<'a>(
        &'a self,
        entry: &Entry,
        key: &'a LimitKey,
        t: Tightening,
    ) -> impl Future<Output = Result<()>> + Send + 'a {
        entry.engage_limiter();
        self.limiter.raise(key, t)
    }

    /// A successful answer that stated limits or booked tokens: the limiter learns the
    /// former and reconciles the latter before the answer is returned (a store error, from a
    /// caller's store, ends the request).
    pub(super) async fn settle(
        &self,
        done: Done,
        report: Option<&LimitReport>,
        used: Option<u64>,
        entry: &Entry,
        key: &LimitKey,
        booked: Booked,
    ) -> Result<Done> {
        if let Some(report) = report {
            self.learn(entry, key, report).await?;
        }
        if let Some(used) = used {
            self.reconcile(key, booked, used).await;
        }
        Ok(done)
    }

    /// Gives back what a booking reserved beyond `used` tokens, or charges the excess. A
    /// store error is logged, not returned: the answer is already in hand.
    async fn reconcile(&self, key: &LimitKey, booked: Booked, used: u64) {
        if let Err(e) = self.limiter.reconcile(key, booked.tokens(), used).await {
            tracing::warn!(error = %e, "could not reconcile token usage");
        }
    }

    /// Called by a [`ChatStream`](super::stream::ChatStream) when it ends: reconcile usage, or record a mid-stream error.
    pub(crate) async fn stream_ended(
        &self,
        entry: usize,
        key: &LimitKey,
        booked: Booked,
        usage: Option<crate::types::Usage>,
        error: Option<ErrorKind>,
    ) {
        let e = &self.entries[entry];
        if let Some(used) = usage.and_then(|u| booked.spend(e, u)) {
            self.reconcile(key, booked, used).await;
        }
        if let Some(kind) = error {
            if kind.disposition() == Disposition::Transient {
                Counters::add(&e.counters.here().transient, 1);
                if self.transition(entry, &key.account, |b, now| b.on_transient(now)) {
                    Counters::add(&e.counters.here().breaker_opens, 1);
                }
            }
        }
    }
}

/// Milliseconds since the Unix epoch, for log fields.
fn wall_ms(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
