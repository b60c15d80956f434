//! The attempt loop — the one way every request goes: pick, wait for the booked slot, send,
//! then settle a success or apply what [`decide`] says about a failure.

use std::future::Future;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{Instrument, field};

use super::breaker::BreakerEvent;
use super::breaker_store::Verdict;
use super::choose::{Pick, Ticket};
use super::core::{Booking, Entry, Router};
use super::decide::{Action, Count, FailedAttempt, Next, attempt_timeout, billed_nothing, decide};
use super::job::{Admissible, Attempt, Job};
use super::options::RequestOptions;
use super::request::{BreakerRef, Run};
use crate::cache::{Fill, Lookup};
use crate::clock;
use crate::error::{Error, ErrorKind, Result};
use crate::id::{Capability, Credential, CredentialSource, ProviderId};
use crate::observe::{
    AdmissionWaited, AttemptEnded, AttemptOutcome, CacheLooked, Event, FailedOver, RequestEnded,
    Sent, operation_name,
};
use crate::provider::{Authorizing, Exchange, Provider, RequestContext};
use crate::ratelimit::{Heard, LimitReport, Permit, Tightening};
use crate::types::Usage;
use crate::types::price::Cost;

/// The loop goes on, or the request ends with this.
type Step<T> = ControlFlow<Result<T>>;

impl Router {
    /// Runs one request to its end, inside the request's span.
    pub(crate) fn run<'a, J: Job + Send + 'a>(
        self: &'a Arc<Self>,
        job: J,
        opts: &'a RequestOptions,
    ) -> impl Future<Output = Result<J::Output>> + Send + 'a {
        // Not an `async fn`: its arguments would be kept twice in the request's future.
        let span = tracing::info_span!(
            "llm_failover.request",
            request = self.next_request_id(),
            capability = %job.request().capability(),
            attempts = field::Empty,
            outcome = field::Empty,
        );
        async move {
            let started = self.clock.now();
            let (result, sends) = self.attempts(&job, opts).instrument(span.clone()).await;
            self.tell(&Event::RequestEnded(RequestEnded {
                capability: job.request().capability(),
                provider: result.as_ref().ok().map(J::answered_by),
                error: result.as_ref().err().map(Error::kind),
                sends,
                latency: self.clock.now().saturating_duration_since(started),
            }));
            span.record("attempts", sends);
            match &result {
                Ok(_) => span.record("outcome", "ok"),
                Err(e) => span.record("outcome", e.kind().as_str()),
            };
            result.map_err(|e| e.with_sends(sends))
        }
    }

    /// Every attempt of one request; returns its result and the requests sent.
    async fn attempts<J: Job>(
        self: &Arc<Self>,
        job: &J,
        opts: &RequestOptions,
    ) -> (Result<J::Output>, u32) {
        let started = self.clock.now();
        let mut run = match Run::start(self, job.request(), opts, started) {
            Ok(run) => run,
            Err(e) => return (Err(e), 0),
        };
        run.streams = J::STREAMS;
        let fill = match self.look_up(job, &run, opts).await {
            ControlFlow::Break(kept) => return (Ok(kept), 0),
            ControlFlow::Continue(fill) => fill,
        };
        self.budget.deposit(started);
        let result = loop {
            if let ControlFlow::Break(result) = self.step(job, &mut run).await {
                break result;
            }
        };
        match (result, fill) {
            (Ok(mut out), Some(fill)) => {
                let now_ms = clock::wall_ms(self.clock.wall());
                if let Some((fill, value)) = J::keep(&mut out, fill, now_ms) {
                    fill.keep(value, now_ms).await;
                }
                (Ok(out), run.sends)
            }
            (result, _) => (result, run.sends),
        }
    }

    /// The request's answer when the cache keeps it (nothing is sent then); else the fill
    /// that keeps the answer it gets (`None`: no cache, or the request bypasses it).
    async fn look_up<J: Job>(
        &self,
        job: &J,
        run: &Run<'_>,
        opts: &RequestOptions,
    ) -> ControlFlow<J::Output, Option<Fill>> {
        let Some(cache) = &self.cache else {
            return ControlFlow::Continue(None);
        };
        let req = job.request();
        let key = job.cache_key(&run.answerers(req.model(), req.capability()));
        let now_ms = clock::wall_ms(self.clock.wall());
        match cache.lookup::<J::Kept>(key, opts.cache, now_ms).await {
            Lookup::Hit {
                answer,
                stored_at_ms,
            } => {
                let (out, tokens) = J::replay(answer, stored_at_ms);
                cache.hit(tokens);
                self.tell(&Event::Cache(CacheLooked { hit: true, tokens }));
                tracing::debug!(?key, "served from the response cache");
                ControlFlow::Break(out)
            }
            Lookup::Miss(fill) => {
                self.tell(&Event::Cache(CacheLooked {
                    hit: false,
                    tokens: 0,
                }));
                ControlFlow::Continue(fill)
            }
        }
    }

    /// One pass of the loop: pick, then send or wait.
    async fn step<'r, J: Job>(self: &'r Arc<Self>, job: &J, run: &mut Run<'r>) -> Step<J::Output> {
        let now = self.clock.now();
        if now >= run.deadline {
            return ControlFlow::Break(Err(run.timed_out()));
        }
        let ticket = match self.pick(job, run, now).await {
            Ok(Pick::Go(ticket)) => ticket,
            Ok(Pick::Wait(at)) => return Box::pin(self.wait_for_reopen(run, at)).await,
            Ok(Pick::Never(e)) => return ControlFlow::Break(Err(run.ends_with(e))),
            Err(e) => return ControlFlow::Break(Err(e)),
        };
        self.attempt(job, run, &ticket).await
    }

    /// Every provider is closed until `at`: waits for it if that is within what the request
    /// may wait (its deadline, its `max_wait`) and `max_retry_after`, else ends the request.
    async fn wait_for_reopen<T>(&self, run: &mut Run<'_>, at: Instant) -> Step<T> {
        let wait = at.saturating_duration_since(self.clock.now());
        // A reopen at the deadline is too late: nothing would be left to send in.
        if at >= run.wait_until || wait > self.policy.max_retry_after {
            return ControlFlow::Break(Err(run.unavailable(at, wait)));
        }
        tracing::debug!(
            wait_ms = wait.as_millis() as u64,
            "every provider is cooling down; waiting"
        );
        self.clock.sleep_until(at).await;
        ControlFlow::Continue(())
    }

    /// One attempt: waits for the ticket's slot, asks the breaker again if it waited (the
    /// provider may have said "not now" to another request meanwhile: never send into an
    /// open breaker), sends, and settles the answer — a success ends the request, a failure
    /// is decided on.
    async fn attempt<'r, J: Job>(
        self: &'r Arc<Self>,
        job: &J,
        run: &mut Run<'r>,
        ticket: &Ticket<'r>,
    ) -> Step<J::Output> {
        let c = &run.candidates[ticket.slot];
        let (entry, breaker, credential) = (c.entry, c.breaker.clone(), c.credential);
        let index = c.index;
        let permit = Permit::new(&self.limiter, &ticket.key, ticket.cost)
            .charging(ticket.charges.settled(Cost::ZERO));
        let Some(verdict) = self.claim(index, run.capability, &breaker, ticket).await else {
            // The slot goes back with the permit; pick again.
            return ControlFlow::Continue(());
        };
        self.trace_send(entry, verdict);
        let span = self.attempt_span(run, ticket);
        let on_end = || {
            let booked = Booking::new(ticket.cost, || job.request().floor());
            let key = ticket.key.clone().into_owned();
            self.stream_end(
                run.candidates[ticket.slot].index,
                key,
                booked,
                breaker.to_arc(),
                ticket.charges.clone(),
            )
        };
        run.attempt_at = self.clock.now();
        let timeout = self.timeout::<J>(entry, run, ticket.slot);
        // The credential the provider fetches first (an access token), else the configured one.
        let adapter = entry.adapter.as_ref();
        let fetched = match adapter.authorize(Authorizing::new(
            credential,
            self.clock.both(),
            self.transport.as_ref(),
            timeout,
        )) {
            None => Ok(None),
            Some(fetching) => fetching.instrument(span.clone()).await.map(Some),
        };
        let exchange = match fetched {
            // Nothing went to the provider.
            Err(e) => Exchange {
                result: Err(unauthorized(e, adapter, &ticket.key.model, credential)),
                report: None,
                sent: false,
            },
            Ok(token) => {
                job.send(Attempt {
                    adapter,
                    transport: self.transport.as_ref(),
                    ctx: RequestContext::new(&ticket.key.model, token.as_ref().or(credential))
                        .with_extra_body(&entry.extra_body),
                    timeout,
                    clock: self.clock.as_ref(),
                    span: &span,
                    on_end: &on_end,
                })
                .instrument(span.clone())
                .await
            }
        };
        if exchange.sent {
            permit.commit();
            self.sent(run, ticket, index, verdict.is_probe());
        } else {
            // Could not even be built: nothing went out, the slot goes back.
            drop(permit);
        }
        let (report, probe, sent) = (exchange.report, verdict.is_probe(), exchange.sent);
        if let Some(place) = &ticket.contact {
            let throttled = exchange.result.as_ref().is_err_and(|e| {
                matches!(e.kind(), ErrorKind::RateLimited | ErrorKind::QuotaExhausted)
            });
            let ok = exchange.result.is_ok();
            place.heard(Heard::from_answer(report.as_deref(), throttled, ok));
        }
        match exchange.result {
            Ok(out) => {
                let (out, usage, cost) =
                    self.succeeded::<J>(job.request(), run, ticket, probe, out, &span);
                // The budgets keep what the answer cost (a stream's, at its end; an answer
                // without its usage keeps its estimate: the safe side).
                if let (Some(actual), false) = (cost, J::STREAMS) {
                    self.limiter.settle(&ticket.charges.settled(actual)).await;
                }
                self.tell(&Event::AttemptEnded(AttemptEnded {
                    target: self.target(index, &ticket.key, run.capability),
                    outcome: AttemptOutcome::Answered,
                    error: None,
                    status: None,
                    latency: self.clock.now().saturating_duration_since(run.attempt_at),
                    streamed: J::STREAMS,
                    usage,
                    cost,
                    response_model: Some(J::answered_model(&out)),
                    report: report.as_deref(),
                }));
                let booked = Booking::new(ticket.cost, || job.request().floor());
                let used = usage.and_then(|u| booked.spend(u));
                if report.is_some() || used.is_some() {
                    let settled = self.settle_limits(job, run, ticket, report.as_deref(), used);
                    if let Err(e) = Box::pin(settled).await {
                        return ControlFlow::Break(Err(e));
                    }
                }
                match job.check(&out) {
                    Ok(()) => ControlFlow::Break(Ok(out)),
                    Err(e) => {
                        let target = self.target(index, &ticket.key, run.capability);
                        self.tell(&Event::InvalidAnswer(target));
                        invalid_answer(run, ticket.slot, e)
                    }
                }
            }
            // Rare, and its state is large: boxed.
            Err(err) => {
                // The budgets get their reservation back only where the provider can have
                // billed nothing (`billed_nothing`). (Not sent: the permit gave it back.)
                if sent && !ticket.charges.is_empty() && billed_nothing(&err) {
                    let all = ticket.charges.settled(Cost::ZERO);
                    self.limiter.settle(&all).await;
                }
                Box::pin(self.failed(run, ticket, probe, err, report.as_deref(), &span)).await
            }
        }
    }

    /// After a success that stated limits or booked tokens: the limiter learns the former
    /// and reconciles the latter (a store error, from a caller's store, ends the request).
    async fn settle_limits<J: Job>(
        &self,
        job: &J,
        run: &Run<'_>,
        ticket: &Ticket<'_>,
        report: Option<&LimitReport>,
        used: Option<u64>,
    ) -> Result<()> {
        let entry = run.candidates[ticket.slot].entry;
        // What the answer used against what was booked, told with its report in one call.
        let tokens_back = used.map_or(0, |used| ticket.cost.tokens() as i64 - used as i64);
        match (report, ticket.booking) {
            (Some(report), booking) => {
                self.learn(entry, &ticket.key, report, booking, tokens_back)
                    .await?
            }
            // Every answer to a booking is told, stated limits or not: the booking is no
            // longer in flight, and a half-open probe a shared store handed out to it is
            // released for the other processes at once.
            (None, Some(booking)) => {
                let nothing = LimitReport::default();
                self.learn(entry, &ticket.key, &nothing, Some(booking), tokens_back)
                    .await?
            }
            (None, None) if tokens_back != 0 => {
                let booked = Booking::new(ticket.cost, || job.request().floor());
                self.reconcile(&ticket.key, booked, used.unwrap_or_default())
                    .await;
            }
            (None, None) => {}
        }
        Ok(())
    }

    /// Waits for the ticket's slot, then asks the breaker again if it waited (for the slot,
    /// or in its line before it was booked): `None` when it may no longer send (the slot
    /// goes back when the caller drops its permit).
    async fn claim(
        &self,
        index: usize,
        capability: Capability,
        breaker: &BreakerRef<'_>,
        ticket: &Ticket<'_>,
    ) -> Option<Verdict> {
        let waited = |wait, in_line| {
            self.tell(&Event::AdmissionWaited(AdmissionWaited {
                target: self.target(index, &ticket.key, capability),
                wait,
                in_line,
            }));
        };
        if !ticket.lined.is_zero() {
            waited(ticket.lined, true);
        } else if ticket.wait.is_zero() {
            return Some(ticket.verdict);
        }
        if !ticket.wait.is_zero() {
            self.clock.sleep_until(ticket.ready_at).await;
            waited(ticket.wait, false);
        }
        if let (false, Some(booking)) = (ticket.wait.is_zero(), ticket.booking) {
            // The key may have been told "not now" while this request slept (a 429 here or,
            // with a shared store, in another process; a fixed window a refusal closed): a
            // gate or a probe out there stops this send too (the slot goes back; pick
            // again). A store error here only skips the check: the slot was booked.
            if let Ok(Some(_)) = self.limiter.blocked(&ticket.key, booking).await {
                if ticket.verdict.is_probe() {
                    breaker
                        .get()
                        .apply(BreakerEvent::ReleaseProbe, self.clock.now());
                }
                return None;
            }
        }
        breaker
            .get()
            .reclaim(ticket.verdict.is_probe(), self.clock.now())
    }

    /// An attempt's timeout ([`attempt_timeout`]): the provider's or the policy's, within the
    /// share of what is left of the deadline that leaves every provider this request has not
    /// tried yet, and that could serve it in time, as much.
    fn timeout<J: Job>(&self, entry: &Entry, run: &Run<'_>, slot: usize) -> Duration {
        let now = self.clock.now();
        let left = run.deadline.saturating_duration_since(now);
        let others = if J::SHARES_DEADLINE && run.failed + 1 < self.policy.max_attempts {
            run.untried_open_before_deadline(slot, now)
        } else {
            0
        };
        attempt_timeout(
            entry.timeout().unwrap_or(self.policy.request_timeout),
            left,
            others,
        )
    }

    /// Records a send with the breaker version it was allowed at (the soak test orders sends
    /// and openings by it).
    fn trace_send(&self, entry: &Entry, verdict: Verdict) {
        tracing::debug!(
            target: "llm_failover::send",
            provider = %entry.id(),
            version = verdict.version,
            wall_ms = wall_ms(self.clock.wall()),
            probe = verdict.is_probe(),
            "sending"
        );
    }

    /// The span of the attempt `ticket` is about to send.
    fn attempt_span(&self, run: &Run<'_>, ticket: &Ticket<'_>) -> tracing::Span {
        tracing::info_span!(
            "attempt",
            provider = %ticket.key.provider,
            model = %ticket.key.model,
            attempt = run.sends + 1,
            admission_wait_ms = ticket.wait.as_millis() as u64,
            estimated_tokens = ticket.cost.tokens(),
            status = field::Empty,
            retry_after_ms = field::Empty,
            actual_tokens = field::Empty,
            // OpenTelemetry's GenAI span attributes (semantic conventions v1.41.0), which
            // tracing-opentelemetry carries over as they are: no prompt, no answer.
            gen_ai.operation.name = operation_name(run.capability),
            gen_ai.request.model = %ticket.key.model,
            gen_ai.request.stream = run.streams,
            gen_ai.response.model = field::Empty,
            gen_ai.usage.input_tokens = field::Empty,
            gen_ai.usage.output_tokens = field::Empty,
        )
    }

    /// A success: the breaker hears of it, the answer is stamped (its attempts, and its cost
    /// where its model has a price). Returns it with the usage it reports and what that
    /// cost.
    fn succeeded<T: Job>(
        &self,
        request: &T::Request,
        run: &Run<'_>,
        ticket: &Ticket<'_>,
        probe: bool,
        mut out: T::Output,
        span: &tracing::Span,
    ) -> (T::Output, Option<Usage>, Option<Cost>) {
        span.record("status", "ok");
        let c = &run.candidates[ticket.slot];
        c.breaker
            .get()
            .apply(BreakerEvent::Answered { probe }, self.clock.now());
        if probe {
            let target = self.target(c.index, &ticket.key, run.capability);
            self.tell(&Event::BreakerClosed(target));
        }
        let usage = T::finish(&mut out, run.sends);
        if let Some(u) = usage {
            span.record("actual_tokens", u.total());
            span.record("gen_ai.usage.input_tokens", u.input_tokens);
            span.record("gen_ai.usage.output_tokens", u.output_tokens);
        }
        span.record("gen_ai.response.model", T::answered_model(&out));
        let cost = c.entry.price(&ticket.key.model).and_then(|price| {
            // The estimate the budgets were charged, where one was; else made now.
            let estimated = ticket.charges.amount().unwrap_or_else(|| {
                let demand = super::job::priced_demand(
                    request,
                    &ticket.key.model,
                    ticket.cost,
                    ticket.reckoning,
                );
                super::job::estimate(price, &demand)
            });
            T::priced(&mut out, price, estimated)
        });
        (out, usage, cost)
    }

    /// Notes a send of `ticket` to the provider at `index`: a failover when the send before
    /// it went elsewhere.
    fn sent(&self, run: &mut Run<'_>, ticket: &Ticket<'_>, index: usize, probe: bool) {
        let to = self.target(index, &ticket.key, run.capability);
        if let Some(from_slot) = run.record_send(ticket.slot) {
            self.tell(&Event::FailedOver(FailedOver {
                from: self.entries[from_slot].id(),
                to,
                from_slot,
            }));
        }
        self.tell(&Event::Sent(Sent {
            target: to,
            pricing: ticket.reckoning.pricing(),
            send: run.sends,
            probe,
        }));
    }

    /// A failure: the limiter learns what the response stated, then the decision is applied.
    async fn failed<T>(
        &self,
        run: &mut Run<'_>,
        ticket: &Ticket<'_>,
        probe: bool,
        err: Error,
        report: Option<&LimitReport>,
        span: &tracing::Span,
    ) -> Step<T> {
        if let Some(s) = err.status() {
            span.record("status", s);
        }
        if let Some(r) = err.retry_after() {
            span.record("retry_after_ms", r.as_millis() as u64);
        }
        tracing::debug!(parent: span, kind = err.kind().as_str(), "attempt failed");
        let now = self.clock.now();
        let failed = run.failed;
        let tried = run.tried_mut(ticket.slot);
        let outcome = FailedAttempt {
            error: &err,
            report,
            probe,
            failures: tried.failures,
            failed,
        };
        tried.failures += 1;
        let action = decide(&outcome, &self.rules, now, self.rng.as_ref());
        self.apply(run, ticket, err, report, action, now).await
    }

    /// Does what the decision says: counts, tells the limiter and the breaker, backs the
    /// provider off for this request, and ends the request or lets it go on. The limiter hears
    /// the failure in one update: the response's report, the 429's drain and gate, and the
    /// gate of a breaker it opened.
    async fn apply<T>(
        &self,
        run: &mut Run<'_>,
        ticket: &Ticket<'_>,
        err: Error,
        report: Option<&LimitReport>,
        action: Action,
        now: Instant,
    ) -> Step<T> {
        let c = &run.candidates[ticket.slot];
        let (entry, breaker, credential) = (c.entry, c.breaker.clone(), c.credential);
        let target = self.target(c.index, &ticket.key, run.capability);
        self.tell(&Event::AttemptEnded(AttemptEnded {
            target,
            outcome: action.count.outcome(),
            error: Some(err.kind()),
            status: err.status(),
            latency: now.saturating_duration_since(run.attempt_at),
            streamed: run.streams,
            usage: None,
            cost: None,
            response_model: None,
            report,
        }));
        if matches!(action.count, Count::Transient { .. }) {
            run.failed += 1;
        }
        let moved = breaker.get().apply(action.breaker, self.clock.now());
        self.tell_opened(target, moved, now);
        if let Some(until) = moved.open_until {
            self.log_open(entry.id(), until, moved.version);
        }
        let told = failure_update(action.tighten, report, moved.open_until, ticket.booking);
        if let Some(report) = report {
            entry.learned(&ticket.key.model, report);
        }
        if let Some(t) = told
            && let Err(e) = self.limiter.raise(&ticket.key, t).await
        {
            return ControlFlow::Break(Err(e));
        }
        if let Some(until) = action.back_off_until {
            run.tried_mut(ticket.slot).ready_at = Some(until);
        }
        match action.next {
            Next::Return => ControlFlow::Break(Err(explain_auth(err, credential))),
            Next::GiveUp => {
                run.push_error(err);
                ControlFlow::Break(Err(run.all_failed()))
            }
            Next::Retry if !self.budget.withdraw(now) => {
                run.push_error(err);
                ControlFlow::Break(Err(run.all_failed()))
            }
            Next::Retry | Next::FailOver => {
                run.push_error(err);
                ControlFlow::Continue(())
            }
        }
    }

    /// Reports where an open breaker stands (for operators, and for the soak test that checks
    /// nothing is ever sent into an open breaker).
    fn log_open(&self, provider: &ProviderId, until: Instant, version: u64) {
        let now = self.clock.both();
        let wait = until.saturating_duration_since(now.instant);
        // The instant it was opened until, on the wall clock — earlier than now when this
        // report comes after it (a loaded machine): never clamped to now, which would report
        // the breaker open for longer than it was.
        let until_wall = match now.instant.checked_duration_since(until) {
            Some(ago) => now.wall.checked_sub(ago).unwrap_or(now.wall),
            None => now.wall + wait,
        };
        tracing::info!(
            target: "llm_failover::breaker",
            provider = %provider,
            version,
            wall_ms = wall_ms(now.wall),
            until_wall_ms = wall_ms(until_wall),
            "breaker open"
        );
        if wait > self.policy.max_retry_after {
            tracing::info!(
                provider = %provider,
                wait_s = wait.as_secs(),
                "provider asks to wait longer than max_retry_after; skipping it until then"
            );
        }
    }
}

/// What the limiter hears of a failure, in one update (`None`: nothing): the response's
/// `report`, the decision's `tighten` (a 429's drain and gate), and the gate of a breaker the
/// failure opened until `open_until` — an open breaker is a gate in the store until it
/// reopens, so the other processes on a shared store stop too; a gate only ever moves later,
/// so a 429's own longer gate is kept.
fn failure_update(
    tighten: Option<Tightening>,
    report: Option<&LimitReport>,
    open_until: Option<Instant>,
    booking: Option<u64>,
) -> Option<Tightening> {
    if tighten.is_none() && report.is_none() && open_until.is_none() {
        return None;
    }
    let mut t = tighten.unwrap_or_default();
    t.report = report.cloned();
    t.booking = booking;
    if let Some(until) = open_until
        && t.gate_until.is_none_or(|g| g < until)
    {
        t.gate_until = Some(until);
    }
    Some(t)
}

/// A credential the provider could not fetch (`Provider::authorize`): the error names the
/// provider and the model, and holds no secret of the configured credential.
fn unauthorized(
    mut err: Error,
    adapter: &dyn Provider,
    model: &str,
    credential: Option<&Credential>,
) -> Error {
    if err.provider().is_none() {
        err = err.with_provider(adapter.id().clone());
    }
    if err.model().is_none() {
        err = err.with_model(model);
    }
    for secret in credential.into_iter().flat_map(Credential::secrets) {
        err = err.scrub(secret);
    }
    err
}

/// An `Auth` error names where the key came from (never the key).
fn explain_auth(err: Error, credential: Option<&Credential>) -> Error {
    if err.kind() != ErrorKind::Auth {
        return err;
    }
    match credential.map(Credential::source) {
        Some(src @ (CredentialSource::Env(_) | CredentialSource::File(_))) => {
            err.note(&format!("the key comes from {src}"))
        }
        Some(src) => err.note(&format!("the key is a {src}")),
        None => err.note("no key was sent"),
    }
}

/// Milliseconds since the Unix epoch, for log fields.
/// An answer that arrived in the wrong shape (told apart): the request ends with it, or
/// (when it asked to) goes on at a provider it has not asked yet — this one is not asked
/// again, and its breaker heard a success.
fn invalid_answer<T>(run: &mut Run<'_>, slot: usize, err: Error) -> Step<T> {
    let untried = (0..run.candidates.len()).any(|i| i != slot && run.tried(i).failures == 0);
    if !(run.fail_over_invalid && untried) {
        return ControlFlow::Break(Err(run.ends_with(err)));
    }
    run.failed += 1;
    let deadline = run.deadline;
    let tried = run.tried_mut(slot);
    tried.failures += 1;
    tried.ready_at = Some(deadline);
    run.push_error(err);
    ControlFlow::Continue(())
}

/// [`clock::wall_ms`] as the traces' unsigned field (never negative).
fn wall_ms(t: std::time::SystemTime) -> u64 {
    clock::wall_ms(t).unsigned_abs()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ratelimit::{Drain, Window};

    /// A failure is one update: the report, the 429's drain and gate, the breaker's gate —
    /// the later of the two gates kept.
    #[test]
    fn a_failure_is_told_in_one_update() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let report = LimitReport {
            requests: Some(Window {
                limit: Some(60),
                remaining: Some(0),
                ..Window::default()
            }),
            ..LimitReport::default()
        };
        let throttled = |gate: Instant| Tightening {
            gate_until: Some(gate),
            drain: Drain::every_minute(),
            ..Tightening::default()
        };
        let told = |gate: Option<Instant>, drain: Drain, report: Option<&LimitReport>| {
            Some(Tightening {
                gate_until: gate,
                drain,
                report: report.cloned(),
                booking: Some(7),
                ..Tightening::default()
            })
        };
        let every = Drain::every_minute();
        #[rustfmt::skip]
        type Row<'a> = (Option<Tightening>, Option<&'a LimitReport>, Option<Instant>, Option<Tightening>);
        let table: [Row<'_>; 7] = [
            // A failure that says nothing and opens nothing: no call.
            (None, None, None, None),
            // A 5xx with a report: the report alone.
            (
                None,
                Some(&report),
                None,
                told(None, Drain::none(), Some(&report)),
            ),
            // A 5xx that opened the breaker: its gate.
            (
                None,
                None,
                Some(t0 + 30 * s),
                told(Some(t0 + 30 * s), Drain::none(), None),
            ),
            // A 429 with its report: both in one.
            (
                Some(throttled(t0 + 5 * s)),
                Some(&report),
                None,
                told(Some(t0 + 5 * s), every, Some(&report)),
            ),
            // A 429 that opened the breaker for longer: the breaker's gate.
            (
                Some(throttled(t0 + 5 * s)),
                None,
                Some(t0 + 9 * s),
                told(Some(t0 + 9 * s), every, None),
            ),
            // ... for shorter: the 429's own gate is kept.
            (
                Some(throttled(t0 + 5 * s)),
                None,
                Some(t0 + 2 * s),
                told(Some(t0 + 5 * s), every, None),
            ),
            // A drain without a gate, and a breaker: the breaker's gate with the drain.
            (
                Some(Tightening {
                    drain: every,
                    ..Tightening::default()
                }),
                Some(&report),
                Some(t0 + s),
                told(Some(t0 + s), every, Some(&report)),
            ),
        ];
        for (i, (tighten, report, open_until, want)) in table.into_iter().enumerate() {
            assert_eq!(
                failure_update(tighten, report, open_until, Some(7)),
                want,
                "row {i}"
            );
        }
    }
}
