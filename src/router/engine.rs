//! The attempt loop: pick a provider, admit, send, classify, act.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::Instant;
use tracing::{field, Instrument};

use super::breaker::{Allow, Breaker, BreakerSettings};
use super::options::RequestOptions;
use super::stream::ChatStream;
use crate::clock::Clock;
use crate::config::{Limits, Policy};
use crate::error::{Disposition, Error, ErrorKind, Result};
use crate::http::Transport;
use crate::provider::{
    chat_once, chat_stream_once, transcribe_once, Capability, Credential, CredentialSource,
    Provider, RequestContext,
};
use crate::ratelimit::{
    estimate_chat, input_floor, Admission, Cost, LimitKey, LimitReport, Limiter, Permit,
    Reservation, Tightening,
};
use crate::retry::{Backoff, RetryBudget};
use crate::rng::Rng;
use crate::stats::{Counters, Stats};
use crate::types::{ChatChunk, ChatRequest, ChatResponse, Transcript, TranscriptionRequest};

/// How long a request that finds a half-open provider's probe in flight waits before looking
/// again.
const PROBE_POLL: Duration = Duration::from_millis(250);

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
}

impl Entry {
    fn limits_for(&self, model: &str) -> Limits {
        self.model_limits.get(model).copied().unwrap_or(self.limits)
    }

    /// Whether admission under `limits` spends tokens: a token limit is configured, or the
    /// provider stated one. When neither, no bucket would read a token count, so none is
    /// estimated (tokenizing is the costliest step of admission).
    fn counts_tokens(&self, limits: &Limits) -> bool {
        limits.tpm.is_some()
            || limits.tpd.is_some()
            || self.token_limits_seen.load(Ordering::Relaxed)
    }
}

/// The admission cost of one request, estimated at most once per model however many
/// providers, passes and attempts price it.
#[derive(Debug, Default)]
struct Costs(Vec<(String, Cost)>);

impl Costs {
    /// The cost of `job` for `model`; without its tokens when `tokens` is false (nothing
    /// would read them).
    fn of(&mut self, job: &Job<'_>, model: &str, tokens: bool) -> Cost {
        if !tokens {
            return job.request_cost(model);
        }
        if let Some((_, c)) = self.0.iter().find(|(m, _)| m == model) {
            return *c;
        }
        let c = job.cost(model);
        self.0.push((model.to_owned(), c));
        c
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

/// A breaker's scope: the provider's index and the account (`None`: the configured key).
pub(crate) type BreakerKey = (usize, Option<Arc<str>>);

/// The engine behind [`Client`](crate::Client).
#[derive(Debug)]
pub(crate) struct Router {
    pub(crate) entries: Vec<Entry>,
    pub(crate) chat: Vec<usize>,
    pub(crate) transcription: Vec<usize>,
    pub(crate) limiter: Limiter,
    pub(crate) transport: Transport,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) rng: Arc<dyn Rng>,
    pub(crate) settings: Settings,
    pub(crate) budget: Mutex<RetryBudget>,
    pub(crate) breakers: Mutex<HashMap<BreakerKey, Breaker>>,
    pub(crate) request_ids: AtomicU64,
}

/// What one request asks for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Job<'a> {
    Chat(&'a ChatRequest),
    Stream(&'a ChatRequest),
    Transcribe(&'a TranscriptionRequest),
}

impl Job<'_> {
    fn capability(&self) -> Capability {
        match self {
            Job::Chat(_) | Job::Stream(_) => Capability::Chat,
            Job::Transcribe(_) => Capability::Transcription,
        }
    }

    fn model_override(&self) -> Option<&str> {
        match self {
            Job::Chat(r) | Job::Stream(r) => r.model.as_deref(),
            Job::Transcribe(r) => r.model.as_deref(),
        }
    }

    fn cost(&self, model: &str) -> Cost {
        match self {
            Job::Chat(r) | Job::Stream(r) => estimate_chat(r, model),
            // Audio whose length cannot be read (not WAV) costs its request only.
            Job::Transcribe(r) => Cost::audio(
                r.audio
                    .duration()
                    .map_or(0, |d| d.as_secs_f64().ceil() as u64),
            ),
        }
    }

    /// The cost when no token limit applies: one request (a transcription's audio seconds
    /// are cheap to read and have their own bucket).
    fn request_cost(&self, model: &str) -> Cost {
        match self {
            Job::Chat(_) | Job::Stream(_) => Cost::one_request(),
            Job::Transcribe(_) => self.cost(model),
        }
    }

    /// See [`input_floor`].
    fn input_floor(&self) -> u64 {
        match self {
            Job::Chat(r) | Job::Stream(r) => input_floor(r),
            Job::Transcribe(_) => 0,
        }
    }
}

/// What one request produced.
#[derive(Debug)]
pub(crate) enum Done {
    Chat(ChatResponse),
    Stream(Box<ChatStream>),
    Transcript(Transcript),
}

/// What an attempt booked: reconciled with reported usage after the answer.
#[derive(Clone, Copy)]
struct Booked<'a> {
    key: &'a LimitKey,
    cost: Cost,
    job: &'a Job<'a>,
}

/// Per-request memory of one candidate provider.
#[derive(Clone, Copy, Debug, Default)]
struct Tried {
    failures: u32,
    ready_at: Option<Instant>,
}

/// A provider chosen and admitted for the next attempt.
struct Go {
    slot: usize,
    entry: usize,
    model: String,
    key: LimitKey,
    cost: Cost,
    permit: Permit,
}

enum Pick {
    Go(Box<Go>),
    /// Nothing can start now; something might at this instant.
    Wait(Instant),
    /// Nothing can ever serve this request.
    Never(Error),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Router {
    pub(crate) fn stats(&self) -> Stats {
        Stats::collect(self.entries.iter().map(|e| (e.adapter.id(), &e.counters)))
    }

    fn with_breaker<T>(
        &self,
        entry: usize,
        account: &Option<Arc<str>>,
        f: impl FnOnce(&mut Breaker) -> T,
    ) -> T {
        let mut map = lock(&self.breakers);
        let b = map
            .entry((entry, account.clone()))
            .or_insert_with(|| Breaker::new(self.settings.breaker));
        f(b)
    }

    fn order(&self, cap: Capability, opts: &RequestOptions) -> Result<Cow<'_, [usize]>> {
        let order = match cap {
            Capability::Chat => &self.chat,
            Capability::Transcription => &self.transcription,
        };
        let Some(pin) = &opts.provider else {
            if order.is_empty() {
                return Err(Error::config(format!(
                    "no provider is configured for {cap} in this environment"
                )));
            }
            return Ok(Cow::Borrowed(order));
        };
        let Some(idx) = self.entries.iter().position(|e| e.adapter.id() == pin) else {
            return Err(Error::config(format!("unknown provider `{pin}`")));
        };
        if !self.entries[idx].adapter.capabilities().supports(cap) {
            return Err(Error::unsupported(pin, &cap.to_string()));
        }
        Ok(Cow::Owned(vec![idx]))
    }

    fn model_for(&self, entry: &Entry, job: &Job<'_>) -> Result<String> {
        job.model_override()
            .or_else(|| entry.adapter.default_model(job.capability()))
            .map(str::to_owned)
            .ok_or_else(|| {
                Error::config(format!(
                    "provider `{}` has no default {} model: set `model` in providers.toml or on \
                     the request",
                    entry.adapter.id(),
                    job.capability()
                ))
            })
    }

    fn too_large(&self, entry: &Entry, model: &str, r: Reservation) -> Error {
        let msg = match r {
            Reservation::TooLarge {
                dimension,
                cost,
                capacity,
            } => format!(
                "this request needs {cost} against a limit of {capacity} {dimension}; it can \
                 never be admitted"
            ),
            _ => "this request can never be admitted".to_owned(),
        };
        Error::new(ErrorKind::RequestTooLarge, msg)
            .with_provider(entry.adapter.id().clone())
            .with_model(model)
    }

    /// Chooses the next provider and books its admission. See the module docs for the order.
    async fn pick(
        &self,
        order: &[usize],
        tried: &[Tried],
        job: &Job<'_>,
        costs: &mut Costs,
        opts: &RequestOptions,
        deadline: Instant,
    ) -> Result<Pick> {
        let now = self.clock.now();
        let remaining = deadline.saturating_duration_since(now);
        let mut ranked: Vec<usize> = (0..order.len()).collect();
        ranked.sort_by_key(|&i| tried[i].failures);

        let mut soonest: Option<Instant> = None;
        let mut sooner = |t: Instant| soonest = Some(soonest.map_or(t, |s: Instant| s.min(t)));
        let mut paced: Option<(usize, Duration)> = None;
        let mut never: Option<Error> = None;

        for pass in 0..2 {
            let single: [usize; 1];
            let slots: &[usize] = if pass == 0 {
                &ranked
            } else {
                match paced {
                    Some((slot, wait)) if wait <= remaining => {
                        single = [slot];
                        &single
                    }
                    _ => break,
                }
            };
            for &slot in slots {
                let idx = order[slot];
                let entry = &self.entries[idx];
                let id = entry.adapter.id();
                if let Some(ready) = tried[slot].ready_at.filter(|r| *r > now) {
                    sooner(ready);
                    continue;
                }
                let account = opts.account_for(id);
                let allow = self.with_breaker(idx, &account, |b| b.acquire(now));
                match allow {
                    Allow::No(until) => {
                        sooner(until);
                        continue;
                    }
                    Allow::ProbeBusy => {
                        sooner(now + PROBE_POLL);
                        continue;
                    }
                    Allow::Yes | Allow::Probe => {}
                }
                let release = || {
                    if allow == Allow::Probe {
                        self.with_breaker(idx, &account, Breaker::release_probe);
                    }
                };
                let model = match self.model_for(entry, job) {
                    Ok(m) => m,
                    Err(e) => {
                        release();
                        never.get_or_insert(e);
                        continue;
                    }
                };
                let limits = entry.limits_for(&model);
                let cost = costs.of(job, &model, entry.counts_tokens(&limits));
                let key = LimitKey::new(id.clone(), model.clone()).with_account(account.clone());
                let max_wait = if pass == 0 {
                    remaining.min(self.settings.spill_after)
                } else {
                    remaining
                };
                match self.limiter.try_admit(&key, &limits, cost, max_wait).await {
                    Ok(Admission::Granted(permit)) => {
                        return Ok(Pick::Go(Box::new(Go {
                            slot,
                            entry: idx,
                            model,
                            key,
                            cost,
                            permit,
                        })))
                    }
                    Ok(Admission::NotUntil(wait)) => {
                        release();
                        sooner(now + wait);
                        if pass == 0 && paced.is_none_or(|(_, w)| wait < w) {
                            paced = Some((slot, wait));
                        }
                    }
                    Ok(Admission::TooLarge(r)) => {
                        release();
                        never.get_or_insert(self.too_large(entry, &model, r));
                    }
                    Err(e) => {
                        release();
                        return Err(e);
                    }
                }
            }
        }
        Ok(match soonest {
            Some(t) => Pick::Wait(t),
            None => Pick::Never(
                never.unwrap_or_else(|| Error::config("no provider can serve this request")),
            ),
        })
    }

    /// Runs one request to completion: the attempt loop.
    pub(crate) async fn execute(
        self: &Arc<Self>,
        job: Job<'_>,
        opts: &RequestOptions,
    ) -> Result<Done> {
        let id = self.request_ids.fetch_add(1, Ordering::Relaxed);
        let span = tracing::info_span!(
            "llm_failover.request",
            request = id,
            capability = %job.capability(),
            attempts = field::Empty,
            outcome = field::Empty,
        );
        let result = self.attempt_loop(job, opts).instrument(span.clone()).await;
        match &result {
            Ok(_) => span.record("outcome", "ok"),
            Err(e) => span.record("outcome", e.kind().as_str()),
        };
        result
    }

    async fn attempt_loop(self: &Arc<Self>, job: Job<'_>, opts: &RequestOptions) -> Result<Done> {
        let policy = &self.settings.policy;
        let started = self.clock.now();
        let deadline = started + opts.deadline.unwrap_or(policy.deadline);
        let order = self.order(job.capability(), opts)?;
        let mut tried = vec![Tried::default(); order.len()];
        let mut errors: Vec<Error> = Vec::new();
        let mut attempts: u32 = 0;
        let mut previous: Option<usize> = None;
        let mut costs = Costs::default();
        lock(&self.budget).deposit(started);

        loop {
            let go = match self
                .pick(&order, &tried, &job, &mut costs, opts, deadline)
                .await?
            {
                Pick::Go(go) => go,
                Pick::Never(e) => {
                    return Err(if errors.is_empty() {
                        e
                    } else {
                        errors.push(e);
                        Error::all_failed(errors)
                    })
                }
                Pick::Wait(at) => {
                    let now = self.clock.now();
                    let wait = at.saturating_duration_since(now);
                    if at > deadline || wait > policy.max_retry_after {
                        return Err(Error::all_unavailable(at, wait, errors));
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
                model,
                key,
                cost,
                permit,
            } = *go;
            let entry = &self.entries[idx];
            let provider = entry.adapter.id().clone();
            let account = key.account.clone();
            let admission_wait = permit.wait();
            permit.ready().await;
            entry.counters.add_wait(admission_wait);
            permit.commit();

            attempts += 1;
            if let Some(prev) = previous.filter(|p| *p != idx) {
                Counters::add(&self.entries[prev].counters.failovers, 1);
            }
            previous = Some(idx);
            Counters::add(&entry.counters.sent, 1);

            let now = self.clock.now();
            let timeout = entry
                .timeout
                .unwrap_or(policy.request_timeout)
                .min(deadline.saturating_duration_since(now))
                .max(Duration::from_millis(1));
            let credential = opts.credential_for(&provider).or(entry.credential.as_ref());
            let ctx = RequestContext::new(&model, credential);
            let attempt_span = tracing::info_span!(
                "attempt",
                provider = %provider,
                model = %model,
                attempt = attempts,
                admission_wait_ms = admission_wait.as_millis() as u64,
                estimated_tokens = cost.tokens(),
                status = field::Empty,
                retry_after_ms = field::Empty,
                actual_tokens = field::Empty,
            );
            let clock = self.clock.clone();
            let now_fn = move || clock.both();
            let adapter = entry.adapter.as_ref();
            let (result, report) = async {
                match job {
                    Job::Chat(r) => {
                        let x = chat_once(adapter, &self.transport, r, ctx, timeout, now_fn).await;
                        (x.result.map(Done::Chat), x.report)
                    }
                    Job::Transcribe(r) => {
                        let x = transcribe_once(adapter, &self.transport, r, ctx, timeout, now_fn)
                            .await;
                        (x.result.map(Done::Transcript), x.report)
                    }
                    Job::Stream(r) => {
                        let x = chat_stream_once(adapter, &self.transport, r, ctx, timeout, now_fn)
                            .await;
                        let result = match x.result {
                            Ok(stream) => first_content(stream).await,
                            Err(e) => Err(e),
                        };
                        (
                            result.map(|(buffered, rest)| {
                                Done::Stream(Box::new(ChatStream::new(
                                    buffered,
                                    rest,
                                    self.clone(),
                                    idx,
                                    key.clone(),
                                    cost,
                                    job.input_floor(),
                                )))
                            }),
                            x.report,
                        )
                    }
                }
            }
            .instrument(attempt_span.clone())
            .await;

            if let Some(report) = report.as_ref().filter(|r| !r.is_empty()) {
                if report.tokens.is_some()
                    || report.input_tokens.is_some()
                    || report.output_tokens.is_some()
                {
                    entry.token_limits_seen.store(true, Ordering::Relaxed);
                }
                self.limiter
                    .raise(
                        &key,
                        Tightening {
                            report: Some(report.clone()),
                            ..Tightening::default()
                        },
                    )
                    .await?;
            }

            let err = match result {
                Ok(done) => {
                    attempt_span.record("status", "ok");
                    self.with_breaker(idx, &account, Breaker::on_success);
                    Counters::add(&entry.counters.ok, 1);
                    let booked = Booked {
                        key: &key,
                        cost,
                        job: &job,
                    };
                    return Ok(self
                        .finish(done, attempts, entry, booked, &attempt_span)
                        .await);
                }
                Err(e) => e,
            };
            let now = self.clock.now();
            if let Some(s) = err.status() {
                attempt_span.record("status", s);
            }
            if let Some(r) = err.retry_after() {
                attempt_span.record("retry_after_ms", r.as_millis() as u64);
            }
            tracing::debug!(parent: &attempt_span, kind = err.kind().as_str(), "attempt failed");
            let failures = tried[slot].failures;
            tried[slot].failures += 1;
            match err.disposition() {
                Disposition::Terminal => {
                    Counters::add(&entry.counters.terminal, 1);
                    if err.status().is_some() {
                        // The provider answered: it is up, whatever it thought of the request.
                        self.with_breaker(idx, &account, Breaker::on_success);
                    } else {
                        self.with_breaker(idx, &account, Breaker::release_probe);
                    }
                    return Err(explain_auth(err, credential));
                }
                Disposition::RateLimited => {
                    Counters::add(&entry.counters.rate_limited, 1);
                    let delay = stated_delay(&err, report.as_ref(), now).unwrap_or_else(|| {
                        self.settings.backoff.delay(failures, self.rng.as_ref())
                    });
                    let until = now + delay;
                    self.limiter
                        .raise(
                            &key,
                            Tightening {
                                gate_until: Some(until),
                                drain: true,
                                report: None,
                            },
                        )
                        .await?;
                    if self.with_breaker(idx, &account, |b| b.open_until(until, now)) {
                        Counters::add(&entry.counters.breaker_opens, 1);
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
                    Counters::add(&entry.counters.quota_exhausted, 1);
                    let until = now + err.retry_after().unwrap_or(policy.quota_cooldown);
                    if self.with_breaker(idx, &account, |b| b.open_until(until, now)) {
                        Counters::add(&entry.counters.breaker_opens, 1);
                    }
                }
                Disposition::Transient => {
                    Counters::add(&entry.counters.transient, 1);
                    if err.status().is_some_and(|s| s >= 500) {
                        Counters::add(&entry.counters.server_errors, 1);
                    }
                    if self.with_breaker(idx, &account, |b| b.on_transient(now)) {
                        Counters::add(&entry.counters.breaker_opens, 1);
                    }
                    tried[slot].ready_at =
                        Some(now + self.settings.backoff.delay(failures, self.rng.as_ref()));
                    errors.push(err);
                    if attempts >= policy.max_attempts || !lock(&self.budget).withdraw(now) {
                        return Err(Error::all_failed(errors));
                    }
                    continue;
                }
            }
            errors.push(err);
            if attempts >= policy.max_attempts {
                return Err(Error::all_failed(errors));
            }
        }
    }

    async fn finish(
        &self,
        done: Done,
        attempts: u32,
        entry: &Entry,
        booked: Booked<'_>,
        span: &tracing::Span,
    ) -> Done {
        let Booked { key, cost, job } = booked;
        match done {
            Done::Chat(mut r) => {
                r.attempts = attempts;
                if let Some(u) = r.usage {
                    span.record("actual_tokens", u.total());
                    Counters::add(&entry.counters.input_tokens, u.input_tokens);
                    Counters::add(&entry.counters.output_tokens, u.output_tokens);
                    // Nothing reserved, nothing to reconcile: the response's own headers
                    // (if any) already set the level.
                    if cost.tokens() > 0 {
                        let used = u.input_tokens.max(job.input_floor()) + u.output_tokens;
                        if let Err(e) = self.limiter.reconcile(key, cost.tokens(), used).await {
                            tracing::warn!(error = %e, "could not reconcile token usage");
                        }
                    }
                }
                Done::Chat(r)
            }
            Done::Transcript(mut t) => {
                t.attempts = attempts;
                Done::Transcript(t)
            }
            Done::Stream(mut s) => {
                s.set_attempts(attempts);
                Done::Stream(s)
            }
        }
    }

    /// Called by a [`ChatStream`] when it ends: reconcile usage, or record a mid-stream error.
    pub(crate) async fn stream_ended(
        &self,
        entry: usize,
        key: &LimitKey,
        cost: Cost,
        floor: u64,
        usage: Option<crate::types::Usage>,
        error: Option<ErrorKind>,
    ) {
        let e = &self.entries[entry];
        if let Some(u) = usage {
            Counters::add(&e.counters.input_tokens, u.input_tokens);
            Counters::add(&e.counters.output_tokens, u.output_tokens);
            if cost.tokens() > 0 {
                let used = u.input_tokens.max(floor) + u.output_tokens;
                if let Err(err) = self.limiter.reconcile(key, cost.tokens(), used).await {
                    tracing::warn!(error = %err, "could not reconcile token usage");
                }
            }
        }
        if let Some(kind) = error {
            if kind.disposition() == Disposition::Transient {
                Counters::add(&e.counters.transient, 1);
                let now = self.clock.now();
                if self.with_breaker(entry, &key.account, |b| b.on_transient(now)) {
                    Counters::add(&e.counters.breaker_opens, 1);
                }
            }
        }
    }
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
