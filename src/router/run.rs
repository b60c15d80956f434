//! The general attempt loop: pick, admit, send, classify, act — for every attempt after a
//! failure, and for first attempts that need a booking, a wait or a probe.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::Instant;
use tracing::Instrument;

use super::breaker::Breaker;
use super::engine::Router;
use super::options::RequestOptions;
use super::pick::{Costs, Done, Go, Job, Pick, Pricing, Tried, Work};
use super::stream::ChatStream;
use crate::error::{Disposition, Error, ErrorKind, Result};
use crate::id::{Credential, CredentialSource};
use crate::provider::{chat_once, chat_stream_once, transcribe_once, ChunkStream};
use crate::ratelimit::{LimitKey, LimitReport, Permit, Tightening};
use crate::stats::Counters;
use crate::types::ChatChunk;

/// What a request carries from one attempt to the next.
pub(super) struct Run<'r> {
    pub(super) started: Instant,
    pub(super) deadline: Instant,
    /// The providers that may serve it, in failover order.
    pub(super) order: Cow<'r, [usize]>,
    /// One entry per slot of `order`, made at the first failure: a request answered at once
    /// never needs it.
    tried: Vec<Tried>,
    errors: Vec<Error>,
    /// The provider of the last send (a send to another one after it is a failover).
    previous: Option<usize>,
    /// Requests sent so far.
    pub(super) attempts: u32,
}

impl<'r> Run<'r> {
    pub(super) fn new(started: Instant, deadline: Instant, order: Cow<'r, [usize]>) -> Self {
        Run {
            started,
            deadline,
            order,
            tried: Vec::new(),
            errors: Vec::new(),
            previous: None,
            attempts: 0,
        }
    }

    /// `err` ends the request: alone, or after the failures before it.
    fn ends_with(&mut self, err: Error) -> Error {
        if self.errors.is_empty() {
            err
        } else {
            self.errors.push(err);
            self.all_failed()
        }
    }

    fn all_failed(&mut self) -> Error {
        Error::all_failed(std::mem::take(&mut self.errors))
    }
}

/// An attempt that was sent (or could not be built) and failed, as the loop handles it.
pub(super) struct Failed<'r> {
    pub(super) slot: usize,
    pub(super) entry: usize,
    pub(super) key: Cow<'r, LimitKey>,
    /// It was the breaker's half-open probe.
    pub(super) probe: bool,
    pub(super) err: Error,
    /// What the response stated, if one arrived and stated anything.
    pub(super) report: Option<Box<LimitReport>>,
    pub(super) span: tracing::Span,
}

impl Router {
    /// Counts a request sent to `idx` as attempt `attempt_no` of `run`.
    pub(super) fn record_send(
        &self,
        run: &mut Run<'_>,
        idx: usize,
        attempt_no: u32,
        pricing: Pricing,
    ) {
        run.attempts = attempt_no;
        if let Some(prev) = run.previous.filter(|p| *p != idx) {
            Counters::add(&self.entries[prev].counters.here().failovers, 1);
        }
        run.previous = Some(idx);
        let entry = &self.entries[idx];
        Counters::add(&entry.counters.here().sent, 1);
        pricing.record(entry);
    }

    /// The attempt loop, from the first attempt or after `handed` (a first attempt that
    /// failed). Returns the request's result and the number of requests sent.
    ///
    /// Called boxed by [`Router::execute`]: its state (every suspension point of every kind
    /// of job) is large, and the common request never needs it.
    pub(super) async fn attempt_loop<'a>(
        self: &'a Arc<Self>,
        work: Work,
        opts: &'a RequestOptions,
        mut run: Run<'a>,
        handed: Option<Failed<'a>>,
    ) -> (Result<Done>, u32) {
        let job = work.job();
        let policy = &self.settings.policy;
        let mut costs = Costs::default();
        // A first pass that follows no failure reads no clock: `started` is its now.
        let mut first_now = handed.is_none().then_some(run.started);
        let result: Result<Done> = 'run: {
            if let Some(f) = handed {
                if let Some(end) = self.failed(&mut run, f, opts).await {
                    break 'run end;
                }
            }
            loop {
                let now = first_now.take().unwrap_or_else(|| self.clock.now());
                if now >= run.deadline {
                    let waited = run.deadline.saturating_duration_since(run.started);
                    break 'run Err(run.ends_with(Error::new(
                        ErrorKind::Timeout,
                        format!(
                            "the request's deadline of {:.3}s has passed",
                            waited.as_secs_f64()
                        ),
                    )));
                }
                let go = match self
                    .pick(
                        &run.order,
                        &run.tried,
                        &job,
                        &mut costs,
                        opts,
                        now,
                        run.deadline,
                    )
                    .await
                {
                    Err(e) => break 'run Err(e),
                    Ok(Pick::Go(go)) => go,
                    Ok(Pick::Never(e)) => break 'run Err(run.ends_with(e)),
                    Ok(Pick::Wait(at)) => {
                        let now = self.clock.now();
                        let wait = at.saturating_duration_since(now);
                        if at > run.deadline || wait > policy.max_retry_after {
                            break 'run Err(Error::all_unavailable(
                                at,
                                wait,
                                std::mem::take(&mut run.errors),
                            ));
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
                let admission_wait = permit.as_deref().map_or(Duration::ZERO, Permit::wait);
                if let Some(p) = &permit {
                    p.ready().await;
                }
                if !admission_wait.is_zero() {
                    entry.counters.here().add_wait(admission_wait);
                }
                let attempt_no = run.attempts + 1;

                // The provider may have said "not now" to another request while this one
                // waited for its slot: never send into an open breaker, and if it has become
                // half-open, send only as its one probe. Otherwise the slot goes back and we
                // pick again.
                let Some(stamp) = self.claim(idx, &key.account, probe) else {
                    drop(permit);
                    continue;
                };
                tracing::debug!(
                    target: "llm_failover::send",
                    provider = %entry.adapter.id(),
                    seq = stamp.seq,
                    wall_ms = stamp.wall_ms,
                    probe = stamp.probe,
                    "sending"
                );
                let (ctx, timeout, span) = self.prepare(
                    idx,
                    &key,
                    opts,
                    run.deadline,
                    stamp.at,
                    attempt_no,
                    admission_wait,
                    cost,
                );
                let clock = &self.clock;
                let now_fn = move || clock.both();
                let adapter = entry.adapter.as_ref();
                // Each kind awaited here directly (instrumented), not through one more
                // future around all three.
                let (result, report, sent) = match job {
                    Job::Chat(r) => {
                        let x = chat_once(adapter, &self.transport, r, ctx, timeout, now_fn)
                            .instrument(span.clone())
                            .await;
                        (x.result.map(Done::Chat), x.report, x.sent)
                    }
                    Job::Transcribe(r) => {
                        let x = transcribe_once(adapter, &self.transport, r, ctx, timeout, now_fn)
                            .instrument(span.clone())
                            .await;
                        (x.result.map(Done::Transcript), x.report, x.sent)
                    }
                    Job::Stream(r) => {
                        let x = chat_stream_once(adapter, &self.transport, r, ctx, timeout, now_fn)
                            .instrument(span.clone())
                            .await;
                        let result = match x.result {
                            Ok(stream) => first_content(stream).instrument(span.clone()).await,
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
                    self.record_send(&mut run, idx, attempt_no, pricing);
                } else {
                    // Could not even be built: nothing went out, the slot goes back.
                    drop(permit);
                }

                // The answer is settled before anything is awaited: no result is kept in the
                // loop's state across a store call (a cold copy to write and read back).
                match result {
                    Ok(done) => {
                        let booked = job.booked(cost);
                        let (done, used) = self.succeeded(
                            done,
                            run.attempts,
                            idx,
                            &key,
                            stamp.probe,
                            booked,
                            &span,
                        );
                        if report.is_none() && used.is_none() {
                            break 'run Ok(done);
                        }
                        break 'run self
                            .settle(done, report.as_deref(), used, entry, &key, booked)
                            .await;
                    }
                    Err(err) => {
                        let f = Failed {
                            slot,
                            entry: idx,
                            key,
                            probe: stamp.probe,
                            err,
                            report,
                            span,
                        };
                        if let Some(end) = self.failed(&mut run, f, opts).await {
                            break 'run end;
                        }
                    }
                }
            }
        };
        (result, run.attempts)
    }

    /// Acts on a failed attempt as its [`Disposition`] says: the limiter learns what the
    /// response stated; a 429 drains the buckets and opens the breaker until the stated delay
    /// (or a backoff); an exhausted quota opens it until its reset; a transient fault counts
    /// toward the breaker and backs this provider off for the request, spending retry budget.
    /// Returns the request's end when it ends here (a terminal error, the attempts or the
    /// retry budget spent, a store error), `None` to try again.
    async fn failed(
        &self,
        run: &mut Run<'_>,
        f: Failed<'_>,
        opts: &RequestOptions,
    ) -> Option<Result<Done>> {
        let Failed {
            slot,
            entry: idx,
            key,
            probe,
            err,
            report,
            span,
        } = f;
        let policy = &self.settings.policy;
        let entry = &self.entries[idx];
        let provider = entry.adapter.id();
        if let Some(report) = report.as_deref() {
            if let Err(e) = self.learn(entry, &key, report).await {
                return Some(Err(e));
            }
        }
        let now = self.clock.now();
        if let Some(s) = err.status() {
            span.record("status", s);
        }
        if let Some(r) = err.retry_after() {
            span.record("retry_after_ms", r.as_millis() as u64);
        }
        tracing::debug!(parent: &span, kind = err.kind().as_str(), "attempt failed");
        if run.tried.is_empty() {
            run.tried = vec![Tried::default(); run.order.len()];
        }
        let failures = run.tried[slot].failures;
        run.tried[slot].failures += 1;
        match err.disposition() {
            Disposition::Terminal => {
                Counters::add(&entry.counters.here().terminal, 1);
                if err.status().is_some() {
                    // The provider answered: it is up, whatever it thought of the request.
                    self.on_success(idx, &key.account, probe);
                } else {
                    self.with_breaker(idx, &key.account, Breaker::release_probe);
                }
                let credential = opts.credential_for(provider).or(entry.credential.as_ref());
                return Some(Err(explain_auth(err, credential)));
            }
            Disposition::RateLimited => {
                Counters::add(&entry.counters.here().rate_limited, 1);
                let delay = stated_delay(&err, report.as_deref(), now)
                    .unwrap_or_else(|| self.settings.backoff.delay(failures, self.rng.as_ref()));
                let until = now + delay;
                let drain = Tightening {
                    gate_until: Some(until),
                    drain: true,
                    report: None,
                };
                if let Err(e) = self.tighten(entry, &key, drain).await {
                    return Some(Err(e));
                }
                if self.transition(idx, &key.account, |b, now| b.open_until(until, now)) {
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
                if self.transition(idx, &key.account, |b, now| b.open_until(until, now)) {
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
                run.tried[slot].ready_at =
                    Some(now + self.settings.backoff.delay(failures, self.rng.as_ref()));
                run.errors.push(err);
                if run.attempts >= policy.max_attempts || !self.budget.withdraw(now) {
                    return Some(Err(run.all_failed()));
                }
                return None;
            }
        }
        run.errors.push(err);
        if run.attempts >= policy.max_attempts {
            return Some(Err(run.all_failed()));
        }
        None
    }
}

/// The delay the provider stated: `retry-after-ms`/`Retry-After` or a body/message delay (on
/// the error), else the reset of an exhausted window.
fn stated_delay(err: &Error, report: Option<&LimitReport>, now: Instant) -> Option<Duration> {
    err.retry_after().or_else(|| {
        report
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
async fn first_content(mut stream: ChunkStream) -> Result<(Vec<ChatChunk>, ChunkStream)> {
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
