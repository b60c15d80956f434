//! Choosing the next attempt's provider: a synchronous look at each candidate — its backoff
//! in this request, its breaker, its limit key and price — then admission, one store call,
//! for the first that can start soon enough.

use std::borrow::Cow;
use std::time::Duration;

use tokio::time::Instant;

use super::breaker::{Allow, BreakerEvent};
use super::breaker_store::Verdict;
use super::budget::Charges;
use super::core::{Entry, Router};
use super::job::{Admissible, Job, Reckoning, TokenCounting};
use super::request::Run;
use crate::error::{Error, ErrorKind, Result};
use crate::ratelimit::{ContactPlace, Demand, Entered, LimitKey, Limits, Patience, Reservation};

/// How long a request that finds a half-open provider's probe in flight waits before looking
/// again.
pub(crate) const PROBE_POLL: Duration = Duration::from_millis(250);

/// The least time a booked slot must leave before the deadline to send in.
const SEND_ROOM: Duration = Duration::from_millis(1);

/// A candidate chosen and admitted for the next attempt.
#[derive(Debug)]
pub(crate) struct Ticket<'r> {
    pub(crate) slot: usize,
    /// The provider, model (`key.model`) and account.
    pub(crate) key: Cow<'r, LimitKey>,
    pub(crate) cost: Demand,
    pub(crate) reckoning: Reckoning,
    /// How long to wait for the booked slot before sending, and until when.
    pub(crate) wait: Duration,
    pub(crate) ready_at: Instant,
    /// How long it waited in its key's line before it was booked (a bulk request).
    pub(crate) lined: Duration,
    /// The breaker's verdict (the probe, or not) when it was chosen.
    pub(crate) verdict: Verdict,
    /// The store's number for the booking (`None`: admitted without one), handed back with
    /// the answer's report.
    pub(crate) booking: Option<u64>,
    /// A place among the first requests to a key whose limits are not yet known, told the
    /// answer and given back when the ticket goes.
    pub(crate) contact: Option<ContactPlace>,
    /// What it reserved of the budgets it falls under, settled with its answer.
    pub(crate) charges: Charges,
}

/// The choice for the next attempt.
#[derive(Debug)]
pub(crate) enum Pick<'r> {
    Go(Ticket<'r>),
    /// Nothing can start now; something might at this instant.
    Wait(Instant),
    /// Nothing can ever serve this request.
    Never(Error),
}

/// A candidate that may be sent to, not yet admitted.
struct Chosen<'r> {
    slot: usize,
    entry: &'r Entry,
    key: Cow<'r, LimitKey>,
    limits: Limits,
    cost: Demand,
    reckoning: Reckoning,
    verdict: Verdict,
    charges: Charges,
}

impl<'r> Chosen<'r> {
    /// Admitted, to send after `wait` from `now`.
    fn into_ticket(
        self,
        wait: Duration,
        now: Instant,
        booking: Option<u64>,
        contact: Option<ContactPlace>,
    ) -> Ticket<'r> {
        Ticket {
            booking,
            contact,
            slot: self.slot,
            key: self.key,
            cost: self.cost,
            reckoning: self.reckoning,
            wait,
            ready_at: now + wait,
            lined: Duration::ZERO,
            verdict: self.verdict,
            charges: self.charges,
        }
    }
}

/// What a look at one candidate found.
enum Look<'r> {
    Ready(Chosen<'r>),
    /// Not before this instant (backing off, breaker open, probe out).
    Skip(Instant),
    Never(Error),
}

/// What the passes over the candidates learned, for when none can go now.
#[derive(Default)]
struct Survey {
    soonest: Option<Instant>,
    /// The soonest instant a candidate that may not be sent to now (backing off, breaker
    /// open, probe out) may be again.
    reopens: Option<Instant>,
    /// The candidate whose admission wait is shortest, and that wait.
    paced: Option<(usize, Duration)>,
    never: Option<Error>,
    /// A budget that ends the request (the environment's, the tenant's) is spent.
    end: Option<Error>,
}

impl Survey {
    fn sooner(&mut self, t: Instant) {
        self.soonest = Some(self.soonest.map_or(t, |s| s.min(t)));
    }

    fn into_pick<'r>(self) -> Pick<'r> {
        match self.soonest {
            Some(t) => Pick::Wait(t),
            None => Pick::Never(
                self.never
                    .unwrap_or_else(|| Error::config("no provider can serve this request")),
            ),
        }
    }
}

impl Router {
    /// Chooses and admits the next attempt's provider: the first candidate (fewer failures
    /// first) that can start within `spill_after`; if every wait is longer, the one that can
    /// start soonest, before the deadline or the request's `max_wait` (a slot at the deadline
    /// is no slot: nothing would be left to send in). `now` is the loop's reading of the
    /// clock.
    pub(crate) async fn pick<'r, J: Job>(
        &'r self,
        job: &J,
        run: &mut Run<'r>,
        now: Instant,
    ) -> Result<Pick<'r>> {
        let remaining = run
            .wait_until
            .saturating_duration_since(now)
            .saturating_sub(SEND_ROOM);
        let mut survey = Survey::default();
        let first_wait = remaining.min(self.policy.spill_after);
        for &slot in run.ranked().iter() {
            if let Some(t) = self
                .try_slot(
                    job,
                    run,
                    slot,
                    now,
                    Patience {
                        max_wait: first_wait,
                        queue: false,
                    },
                    &mut survey,
                )
                .await?
            {
                return Ok(Pick::Go(t));
            }
            if let Some(e) = survey.end.take() {
                return Ok(Pick::Never(e));
            }
        }
        // The candidate that can start soonest is booked — unless a provider that cannot be
        // sent to now reopens before that slot: then the request waits for the reopening and
        // chooses again (a primary back in 3 s beats a secondary's slot in 16 s).
        let reopens = survey.reopens;
        if let Some((slot, _)) = survey
            .paced
            .take()
            .filter(|(_, w)| *w <= remaining && reopens.is_none_or(|r| now + *w <= r))
            && let Some(t) = self
                .try_slot(
                    job,
                    run,
                    slot,
                    now,
                    Patience {
                        max_wait: remaining,
                        queue: true,
                    },
                    &mut survey,
                )
                .await?
        {
            return Ok(Pick::Go(t));
        }
        if let Some(e) = survey.end.take() {
            return Ok(Pick::Never(e));
        }
        Ok(survey.into_pick())
    }

    /// Looks at `slot` and, if it may be sent to, admits it: at once where the store says a
    /// reservation would book nothing, else by booking it within `patience` (a store call,
    /// boxed: a request that books nothing carries none of its state).
    async fn try_slot<'r, J: Job>(
        &'r self,
        job: &J,
        run: &mut Run<'r>,
        slot: usize,
        now: Instant,
        patience: Patience,
        survey: &mut Survey,
    ) -> Result<Option<Ticket<'r>>> {
        let until = now + patience.max_wait;
        let mut now = now;
        loop {
            match self.look(job, run, slot, now) {
                Look::Ready(c) => {
                    // A key whose limits are not yet known takes its first requests one by one.
                    let (contact, now) = match self.limiter.enter(&c.key, &c.limits, until).await {
                        Entered::Known => (None, now),
                        Entered::Place(p) => (Some(p), self.clock.now().max(now)),
                        Entered::Held => {
                            let at = self.clock.now();
                            self.release(run, c.slot, c.verdict, at);
                            survey.sooner(at);
                            return Ok(None);
                        }
                        // It waited for a place, and one came free: the breaker's verdict it
                        // holds is from before the wait (the provider may have been closed
                        // since: a request held at an outage's start must not go as a second
                        // probe), so it is given back and this provider looked at again.
                        Entered::Waited => {
                            let at = self.clock.now().max(now);
                            self.release(run, c.slot, c.verdict, at);
                            now = at;
                            continue;
                        }
                    };
                    if c.charges.is_empty() && self.limiter.admits_freely(&c.key, &c.limits) {
                        return Ok(Some(c.into_ticket(Duration::ZERO, now, None, contact)));
                    }
                    return Box::pin(self.admit(run, c, now, patience, survey, contact)).await;
                }
                Look::Skip(until) => {
                    survey.sooner(until);
                    survey.reopens = Some(survey.reopens.map_or(until, |r| r.min(until)));
                    return Ok(None);
                }
                Look::Never(e) => {
                    survey.never.get_or_insert(e);
                    return Ok(None);
                }
            }
        }
    }

    /// Whether `slot` may be sent to now, and for what key and price (no store call).
    fn look<'r, J: Job>(
        &'r self,
        job: &J,
        run: &mut Run<'r>,
        slot: usize,
        now: Instant,
    ) -> Look<'r> {
        if let Some(ready) = run.tried(slot).ready_at.filter(|r| *r > now) {
            return Look::Skip(ready);
        }
        let c = &run.candidates[slot];
        let verdict = c.breaker.get().acquire(now);
        match verdict.allow {
            Allow::No(until) => return Look::Skip(until),
            Allow::ProbeBusy => return Look::Skip(now + PROBE_POLL),
            Allow::Rejected => {
                return Look::Never(
                    Error::new(
                        ErrorKind::Auth,
                        format!(
                            "provider `{}` rejected this key earlier; nothing is sent with it \
                             again until the key is fixed and the client built anew",
                            c.entry.id()
                        ),
                    )
                    .with_provider(c.entry.id().clone()),
                );
            }
            Allow::Yes | Allow::Probe => {}
        }
        let entry = c.entry;
        let key = match key_for(entry, job, c.account.as_ref()) {
            Ok(k) => k,
            Err(e) => {
                self.release(run, slot, verdict, now);
                return Look::Never(e);
            }
        };
        let limits = entry.limits_for(&key.model);
        let tokens = if entry.counts_tokens(&limits) {
            TokenCounting::On {
                room: entry.room_for(&key),
            }
        } else {
            TokenCounting::Off
        };
        let (cost, reckoning) = job.request().demand(&key.model, tokens, &mut run.costs);
        let charges = match self.charges(
            job.request(),
            entry,
            &key.model,
            &cost,
            reckoning,
            run.tenant.as_deref(),
        ) {
            Ok(c) => c,
            Err(e) => {
                self.release(run, slot, verdict, now);
                return Look::Never(e);
            }
        };
        Look::Ready(Chosen {
            charges,
            slot,
            entry,
            key,
            limits,
            cost,
            reckoning,
            verdict,
        })
    }

    /// Books `c` if it can start within `patience`; otherwise notes why not in `survey`.
    async fn admit<'r>(
        &'r self,
        run: &Run<'r>,
        c: Chosen<'r>,
        now: Instant,
        patience: Patience,
        survey: &mut Survey,
        contact: Option<ContactPlace>,
    ) -> Result<Option<Ticket<'r>>> {
        let reserved = self
            .limiter
            .reserve_in_turn(
                &c.key,
                &c.limits,
                c.cost,
                c.charges.list(),
                patience,
                now,
                &run.place,
            )
            .await;
        // A bulk request may have waited in its line for its turn.
        let turn = self.clock.now().max(now);
        let (wait, booking) = match reserved {
            Ok(Reservation::Granted {
                wait,
                token_room,
                booking,
            }) => {
                c.entry.note_room(&c.key, token_room);
                (wait, booking)
            }
            other => {
                self.release(run, c.slot, c.verdict, turn);
                match other? {
                    Reservation::NotUntil { wait } => {
                        survey.sooner(now + wait);
                        if survey.paced.is_none_or(|(_, w)| wait < w) {
                            survey.paced = Some((c.slot, wait));
                        }
                    }
                    Reservation::OverBudget { charge, spent } => {
                        let e = c
                            .charges
                            .spent(charge, spent, turn)
                            .with_provider(c.entry.id().clone())
                            .with_model(c.key.model.clone());
                        tracing::debug!(error = %e, "a budget holds this request back");
                        if c.charges.ends_request(charge) {
                            survey.end = Some(e);
                        } else {
                            // A provider's budget: the next provider may fit.
                            survey.never.get_or_insert(e);
                        }
                    }
                    r => {
                        survey
                            .never
                            .get_or_insert(too_large(c.entry, &c.key.model, r));
                    }
                }
                return Ok(None);
            }
        };
        let mut ticket = c.into_ticket(wait, turn, Some(booking), contact);
        ticket.lined = turn - now;
        Ok(Some(ticket))
    }

    /// A claimed probe that will not be sent goes back.
    pub(crate) fn release(&self, run: &Run<'_>, slot: usize, verdict: Verdict, now: Instant) {
        if verdict.is_probe() {
            run.candidates[slot]
                .breaker
                .get()
                .apply(BreakerEvent::ReleaseProbe, now);
        }
    }
}

impl Router {
    /// What an attempt of `request` at `entry`'s `model` charges to the budgets it falls
    /// under: its estimated cost (admission's demand, or the tokenizer-free bound where no
    /// tokens were counted) in each of their windows. None where no budget applies, or the
    /// model has no price (said once).
    fn charges<R: Admissible>(
        &self,
        request: &R,
        entry: &Entry,
        model: &str,
        cost: &Demand,
        reckoning: Reckoning,
        tenant: Option<&str>,
    ) -> Result<Charges> {
        let mut applying = self
            .budgets
            .applying(entry.budget.as_ref(), tenant)
            .peekable();
        if applying.peek().is_none() {
            return Ok(Charges::default());
        }
        let Some(price) = entry.price(model) else {
            self.budgets.warn_unpriced(entry.id(), model);
            return Ok(Charges::default());
        };
        let demand = super::job::priced_demand(request, model, *cost, reckoning);
        let amount = super::job::estimate(price, &demand);
        Charges::of(applying, amount, self.clock.wall())
    }
}

/// The limit key of `job` on `entry` for `account`: the entry's own for its default model
/// and the configured account (lent: nothing allocated), otherwise a new one.
fn key_for<'e, J: Job>(
    entry: &'e Entry,
    job: &J,
    account: Option<&std::sync::Arc<str>>,
) -> Result<Cow<'e, LimitKey>> {
    let cap = job.request().capability();
    if account.is_none()
        && let Some(k) = entry.default_key(cap)
        && job.request().model().is_none_or(|m| m == k.model)
    {
        return Ok(Cow::Borrowed(k));
    }
    let model = job
        .request()
        .model()
        .or_else(|| entry.adapter.default_model(cap))
        .ok_or_else(|| {
            Error::config(format!(
                "provider `{}` has no default {cap} model: set `model` in providers.toml or on \
                 the request",
                entry.id(),
            ))
        })?;
    Ok(Cow::Owned(
        LimitKey::new(entry.id().clone(), model).with_account(account.cloned()),
    ))
}

fn too_large(entry: &Entry, model: &str, r: Reservation) -> Error {
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
        .with_provider(entry.id().clone())
        .with_model(model)
}
