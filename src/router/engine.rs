//! The attempt loop: pick a provider, admit, send, classify, act.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::Instant;
use tracing::{field, Instrument};

use super::breaker::{Allow, Breaker, BreakerSettings, BreakerState, SharedBreaker};
use super::options::RequestOptions;
use super::pick::{Booked, Costs, Go, Pick, Tried};
pub(crate) use super::pick::{Done, Job, Work};
use super::stream::ChatStream;
use crate::clock::Clock;
use crate::config::{Limits, Policy};
use crate::error::{Disposition, Error, ErrorKind, Result};
use crate::http::Transport;
use crate::provider::{
    chat_once, chat_stream_once, transcribe_once, Capability, Credential, CredentialSource,
    Provider, RequestContext,
};
use crate::ratelimit::{LimitKey, LimitReport, Limiter, Permit, Tightening};
use crate::retry::{Backoff, SharedBudget};
use crate::rng::Rng;
use crate::stats::{Counters, Stats};
use crate::types::ChatChunk;

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
struct Stamp {
    /// Order among breaker decisions (0 when the send trace is off).
    seq: u64,
    /// When the send was decided, for the trace (0 when it is off).
    wall_ms: u64,
    probe: bool,
    /// When the send was decided.
    at: Instant,
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

    /// Runs one request to completion: the attempt loop, inside the request's span.
    ///
    /// Not an `async fn`: the loop's own future is returned (instrumented), so a request is
    /// one state machine, not one more layer around it.
    pub(crate) fn execute<'a>(
        self: &'a Arc<Self>,
        work: Work,
        opts: &'a RequestOptions,
    ) -> impl Future<Output = Result<Done>> + Send + 'a {
        // The id is taken only when the span is enabled (tracing evaluates fields then): a
        // counter shared by every request is not touched for nothing.
        let span = tracing::info_span!(
            "llm_failover.request",
            request = self.request_ids.fetch_add(1, Ordering::Relaxed),
            capability = %work.job().capability(),
            attempts = field::Empty,
            outcome = field::Empty,
        );
        self.attempt_loop(work, opts, span.clone()).instrument(span)
    }

    /// The loop itself. Records on `span` how many requests were sent and the outcome, and
    /// puts the number of sends on the error.
    ///
    /// An `async` block rather than an `async fn`: the block uses its captures in place,
    /// where an `async fn` would keep a second copy of its arguments (the request among them)
    /// in its state.
    #[allow(clippy::manual_async_fn)] // deliberate: see above
    fn attempt_loop<'a>(
        self: &'a Arc<Self>,
        work: Work,
        opts: &'a RequestOptions,
        span: tracing::Span,
    ) -> impl Future<Output = Result<Done>> + Send + 'a {
        async move {
            let job = work.job();
            let mut attempts: u32 = 0;
            let result: Result<Done> = 'run: {
                let policy = &self.settings.policy;
                let started = self.clock.now();
                let deadline = started + opts.deadline.unwrap_or(policy.deadline);
                let order = match self.order(job.capability(), opts) {
                    Ok(order) => order,
                    Err(e) => break 'run Err(e),
                };
                // One entry per slot of `order`, allocated at the first failure: a request answered
                // at once never needs it.
                let mut tried: Vec<Tried> = Vec::new();
                let mut errors: Vec<Error> = Vec::new();
                let mut previous: Option<usize> = None;
                let mut costs = Costs::default();
                self.budget.deposit(started);
                // The first pass reads no clock again: `started` is its now.
                let mut first_now = Some(started);

                loop {
                    let now = first_now.take().unwrap_or_else(|| self.clock.now());
                    if now >= deadline {
                        let waited = deadline.saturating_duration_since(started);
                        let err = Error::new(
                            ErrorKind::Timeout,
                            format!(
                                "the request's deadline of {:.3}s has passed",
                                waited.as_secs_f64()
                            ),
                        );
                        break 'run Err(if errors.is_empty() {
                            err
                        } else {
                            errors.push(err);
                            Error::all_failed(errors)
                        });
                    }
                    let go = match self
                        .pick(&order, &tried, &job, &mut costs, opts, now, deadline)
                        .await
                    {
                        Err(e) => break 'run Err(e),
                        Ok(Pick::Go(go)) => go,
                        Ok(Pick::Never(e)) => {
                            break 'run Err(if errors.is_empty() {
                                e
                            } else {
                                errors.push(e);
                                Error::all_failed(errors)
                            })
                        }
                        Ok(Pick::Wait(at)) => {
                            let now = self.clock.now();
                            let wait = at.saturating_duration_since(now);
                            if at > deadline || wait > policy.max_retry_after {
                                break 'run Err(Error::all_unavailable(at, wait, errors));
                            }
                            tracing::debug!(
                                wait_ms = wait.as_millis() as u64,
                                "every provider is cooling down; waiting"
                            );
                            self.clock.sleep_until(at).await;
                            continue;
                        }
                    };
                    let Go {
                        slot,
                        entry: idx,
                        key,
                        cost,
                        pricing,
                        permit,
                        probe,
                    } = *go;
                    let entry = &self.entries[idx];
                    let provider = entry.adapter.id();
                    let admission_wait = permit.as_deref().map_or(Duration::ZERO, Permit::wait);
                    if let Some(p) = &permit {
                        p.ready().await;
                    }
                    if !admission_wait.is_zero() {
                        entry.counters.here().add_wait(admission_wait);
                    }
                    let attempt_no = attempts + 1;

                    // The provider may have said "not now" to another request while this one waited
                    // for its slot: never send into an open breaker, and if it has become half-open,
                    // send only as its one probe. Otherwise the slot goes back and we pick again.
                    let Some(stamp) = self.claim(idx, &key.account, probe) else {
                        drop(permit);
                        continue;
                    };
                    tracing::debug!(
                        target: "llm_failover::send",
                        provider = %provider,
                        seq = stamp.seq,
                        wall_ms = stamp.wall_ms,
                        probe = stamp.probe,
                        "sending"
                    );
                    let timeout = entry
                        .timeout
                        .unwrap_or(policy.request_timeout)
                        .min(deadline.saturating_duration_since(stamp.at))
                        .max(Duration::from_millis(1));
                    let credential = opts.credential_for(provider).or(entry.credential.as_ref());
                    let model = key.model.as_str();
                    let ctx = RequestContext::new(model, credential);
                    let attempt_span = tracing::info_span!(
                        "attempt",
                        provider = %provider,
                        model = %model,
                        attempt = attempt_no,
                        admission_wait_ms = admission_wait.as_millis() as u64,
                        estimated_tokens = cost.tokens(),
                        status = field::Empty,
                        retry_after_ms = field::Empty,
                        actual_tokens = field::Empty,
                    );
                    let clock = &self.clock;
                    let now_fn = move || clock.both();
                    let adapter = entry.adapter.as_ref();
                    // Each kind awaited here directly (instrumented), not through one more
                    // future around all three.
                    let (result, report, sent) = match job {
                        Job::Chat(r) => {
                            let x = chat_once(adapter, &self.transport, r, ctx, timeout, now_fn)
                                .instrument(attempt_span.clone())
                                .await;
                            (x.result.map(Done::Chat), x.report, x.sent)
                        }
                        Job::Transcribe(r) => {
                            let x =
                                transcribe_once(adapter, &self.transport, r, ctx, timeout, now_fn)
                                    .instrument(attempt_span.clone())
                                    .await;
                            (x.result.map(Done::Transcript), x.report, x.sent)
                        }
                        Job::Stream(r) => {
                            let x =
                                chat_stream_once(adapter, &self.transport, r, ctx, timeout, now_fn)
                                    .instrument(attempt_span.clone())
                                    .await;
                            let result = match x.result {
                                Ok(stream) => {
                                    first_content(stream).instrument(attempt_span.clone()).await
                                }
                                Err(e) => Err(e),
                            };
                            (
                                result.map(|(buffered, rest)| {
                                    Done::Stream(Box::new(ChatStream::new(
                                        buffered,
                                        rest,
                                        self.clone(),
                                        idx,
                                        key.clone().into_owned(),
                                        job.booked(cost),
                                    )))
                                }),
                                x.report,
                                x.sent,
                            )
                        }
                    };

                    if sent {
                        if let Some(p) = permit {
                            p.commit();
                        }
                        attempts = attempt_no;
                        if let Some(prev) = previous.filter(|p| *p != idx) {
                            Counters::add(&self.entries[prev].counters.here().failovers, 1);
                        }
                        previous = Some(idx);
                        Counters::add(&entry.counters.here().sent, 1);
                        pricing.record(entry);
                    } else {
                        // Could not even be built: nothing went out, the slot goes back.
                        drop(permit);
                    }

                    // The answer is settled before anything is awaited: no result is kept in the
                    // loop's state across a store call (a cold copy to write and read back).
                    let err = match result {
                        Ok(done) => {
                            attempt_span.record("status", "ok");
                            self.on_success(idx, &key.account, stamp.probe);
                            Counters::add(&entry.counters.here().ok, 1);
                            let booked = job.booked(cost);
                            let (done, used) =
                                self.finish(done, attempts, entry, booked, &attempt_span);
                            if report.is_none() && used.is_none() {
                                break 'run Ok(done);
                            }
                            break 'run self
                                .settle(done, report.as_deref(), used, entry, &key, booked)
                                .await;
                        }
                        Err(e) => e,
                    };
                    if let Some(report) = report.as_deref() {
                        if let Err(e) = self.learn(entry, &key, report).await {
                            break 'run Err(e);
                        }
                    }
                    let now = self.clock.now();
                    if let Some(s) = err.status() {
                        attempt_span.record("status", s);
                    }
                    if let Some(r) = err.retry_after() {
                        attempt_span.record("retry_after_ms", r.as_millis() as u64);
                    }
                    tracing::debug!(parent: &attempt_span, kind = err.kind().as_str(), "attempt failed");
                    if tried.is_empty() {
                        tried = vec![Tried::default(); order.len()];
                    }
                    let failures = tried[slot].failures;
                    tried[slot].failures += 1;
                    match err.disposition() {
                        Disposition::Terminal => {
                            Counters::add(&entry.counters.here().terminal, 1);
                            if err.status().is_some() {
                                // The provider answered: it is up, whatever it thought of the request.
                                self.on_success(idx, &key.account, stamp.probe);
                            } else {
                                self.with_breaker(idx, &key.account, Breaker::release_probe);
                            }
                            break 'run Err(explain_auth(err, credential));
                        }
                        Disposition::RateLimited => {
                            Counters::add(&entry.counters.here().rate_limited, 1);
                            let delay =
                                stated_delay(&err, report.as_deref(), now).unwrap_or_else(|| {
                                    self.settings.backoff.delay(failures, self.rng.as_ref())
                                });
                            let until = now + delay;
                            let drain = Tightening {
                                gate_until: Some(until),
                                drain: true,
                                report: None,
                            };
                            if let Err(e) = self.tighten(entry, &key, drain).await {
                                break 'run Err(e);
                            }
                            if self.transition(idx, &key.account, |b, now| b.open_until(until, now))
                            {
                                Counters::add(&entry.counters.here().breaker_opens, 1);
                            }
                            if delay > policy.max_retry_after {
                                tracing::info!(
                                    provider = %provider,
                                    wait_s = delay.as_secs(),
                                    "provider asks to wait longer than max_retry_after; skipping it until then"
                                );
                            }
                        }
                        Disposition::QuotaExhausted => {
                            Counters::add(&entry.counters.here().quota_exhausted, 1);
                            let until = now + err.retry_after().unwrap_or(policy.quota_cooldown);
                            if self.transition(idx, &key.account, |b, now| b.open_until(until, now))
                            {
                                Counters::add(&entry.counters.here().breaker_opens, 1);
                            }
                        }
                        Disposition::Transient => {
                            Counters::add(&entry.counters.here().transient, 1);
                            if err.status().is_some_and(|s| s >= 500) {
                                Counters::add(&entry.counters.here().server_errors, 1);
                            }
                            if self.transition(idx, &key.account, |b, now| b.on_transient(now)) {
                                Counters::add(&entry.counters.here().breaker_opens, 1);
                            }
                            tried[slot].ready_at = Some(
                                now + self.settings.backoff.delay(failures, self.rng.as_ref()),
                            );
                            errors.push(err);
                            if attempts >= policy.max_attempts || !self.budget.withdraw(now) {
                                break 'run Err(Error::all_failed(errors));
                            }
                            continue;
                        }
                    }
                    errors.push(err);
                    if attempts >= policy.max_attempts {
                        break 'run Err(Error::all_failed(errors));
                    }
                }
            };
            let result = result.map_err(|e| e.with_sends(attempts));
            span.record("attempts", attempts);
            match &result {
                Ok(_) => span.record("outcome", "ok"),
                Err(e) => span.record("outcome", e.kind().as_str()),
            };
            result
        }
    }

    /// Claims the right to send to `idx` now: `None` when its breaker is open (or its probe is
    /// out); a held probe stays the probe. The verdict is taken under the breakers' lock with a
    /// sequence number, so the trace of sends and openings shows their real order (the number
    /// and the wall-clock time are taken only when that trace is enabled).
    fn claim(&self, idx: usize, account: &Option<Arc<str>>, probe: bool) -> Option<Stamp> {
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
    fn on_success(&self, idx: usize, account: &Option<Arc<str>>, probe: bool) {
        match account {
            None => self.entries[idx].breaker.on_success(probe),
            Some(_) => self.with_breaker(idx, account, |b| b.on_success(probe)),
        }
    }

    /// Applies `f` to a breaker under its lock, then reports where the breaker stands if it is
    /// open (for operators, and for the soak test that checks nothing is ever sent into an
    /// open breaker). Returns `f`'s answer: whether this opened a closed breaker.
    fn transition(
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
    fn finish(
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
    fn learn<'a>(
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
    fn tighten<'a>(
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
    async fn settle(
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

    /// Called by a [`ChatStream`] when it ends: reconcile usage, or record a mid-stream error.
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

/// The delay the provider stated: `retry-after-ms`/`Retry-After` or a body/message delay (on
/// the error), else the reset of an exhausted window.
fn stated_delay(err: &Error, report: Option<&LimitReport>, now: Instant) -> Option<Duration> {
    err.retry_after().or_else(|| {
        report
            .or(err.limits())
            .and_then(LimitReport::exhausted_until)
            .map(|t| t.saturating_duration_since(now))
            .filter(|d| !d.is_zero())
    })
}

/// An `Auth` error names where the key came from (never the key).
fn explain_auth(err: Error, credential: Option<&Credential>) -> Error {
    if err.kind() != ErrorKind::Auth {
        return err;
    }
    match credential.map(Credential::source) {
        Some(src @ CredentialSource::Env(_)) => err.note(&format!("the key comes from {src}")),
        Some(src) => err.note(&format!("the key is a {src}")),
        None => err.note("no key was sent"),
    }
}

/// Reads a stream until its first content (text or a finish), so a failure before any
/// content can still fail over. Returns what was read and the rest.
async fn first_content(
    mut stream: crate::provider::ChunkStream,
) -> Result<(Vec<ChatChunk>, crate::provider::ChunkStream)> {
    let mut buffered = Vec::new();
    loop {
        match stream.next().await {
            Some(Ok(chunk)) => {
                let content = !chunk.delta.is_empty() || chunk.finish_reason.is_some();
                buffered.push(chunk);
                if content {
                    return Ok((buffered, stream));
                }
            }
            Some(Err(e)) => return Err(e),
            None => return Ok((buffered, stream)),
        }
    }
}
