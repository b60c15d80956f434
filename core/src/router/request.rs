//! One request's state across its attempts: its candidates in failover order (each with its
//! breaker and credential, resolved once), what each has cost it, the errors so far.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::breaker::Allow;
use super::breaker_store::BreakerCell;
use super::core::{Entry, Router};
use super::job::{Admissible, TokenCounts};
use super::options::RequestOptions;
use crate::admission::Place;
use crate::cache::Answerer;
use crate::error::{Error, ErrorKind, Result};
use crate::id::{Capability, Credential};

/// A breaker lent by the router (the configured account's) or owned (a tenant's).
#[derive(Clone, Debug)]
pub(crate) enum BreakerRef<'r> {
    Lent(&'r Arc<dyn BreakerCell>),
    Own(Arc<dyn BreakerCell>),
}

impl BreakerRef<'_> {
    pub(crate) fn get(&self) -> &dyn BreakerCell {
        match self {
            BreakerRef::Lent(b) => b.as_ref(),
            BreakerRef::Own(b) => b.as_ref(),
        }
    }

    /// A handle that outlives the request (a stream's).
    pub(crate) fn to_arc(&self) -> Arc<dyn BreakerCell> {
        match self {
            BreakerRef::Lent(b) => Arc::clone(b),
            BreakerRef::Own(b) => b.clone(),
        }
    }
}

/// A provider that may serve this request.
#[derive(Debug)]
pub(crate) struct Candidate<'r> {
    /// Its index among the router's providers.
    pub(crate) index: usize,
    pub(crate) entry: &'r Entry,
    /// The breaker of the account this request spends there.
    pub(crate) breaker: BreakerRef<'r>,
    /// That account: `None` for the configured key, a tenant's for its own key.
    pub(crate) account: Option<Arc<str>>,
    /// The key sent: the request's own, else the configured one.
    pub(crate) credential: Option<&'r Credential>,
}

/// What this request has learned of one candidate.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Tried {
    pub(crate) failures: u32,
    /// Not tried again before then (a transient failure's backoff).
    pub(crate) ready_at: Option<Instant>,
}

/// One request, from its first attempt to its last.
#[derive(Debug)]
pub(crate) struct Run<'r> {
    pub(crate) started: Instant,
    pub(crate) deadline: Instant,
    /// The latest instant this request waits for in this process (a reopen, a booked slot):
    /// the deadline, or sooner with [`RequestOptions::max_wait`].
    pub(crate) wait_until: Instant,
    pub(crate) candidates: Vec<Candidate<'r>>,
    /// One per candidate, made at the first failure (a request answered at once needs none).
    tried: Vec<Tried>,
    errors: Vec<Error>,
    /// The candidate of the last send (a send to another one after it is a failover).
    previous: Option<usize>,
    /// When the current attempt went to its provider (its latency is counted from then).
    pub(crate) attempt_at: Instant,
    /// The request asks for a stream (its events say so).
    pub(crate) streams: bool,
    /// Chat or transcription (its events say so).
    pub(crate) capability: Capability,
    /// Requests sent so far.
    pub(crate) sends: u32,
    /// Sends that failed for reasons other than throttling (what `max_attempts` bounds).
    pub(crate) failed: u32,
    pub(crate) costs: TokenCounts,
    /// An answer in the wrong shape fails over instead of ending the request.
    pub(crate) fail_over_invalid: bool,
    /// Its place in the admission order.
    pub(crate) place: Place,
    /// The tenant whose budget it spends, if any.
    pub(crate) tenant: Option<Arc<str>>,
}

impl<'r> Run<'r> {
    /// A request for `capability` with `opts`, starting now.
    ///
    /// # Errors
    ///
    /// `Config` when no provider serves `capability`, or the pinned one is unknown;
    /// `Unsupported` when the pinned one cannot serve it.
    ///
    /// A provider whose adapter cannot carry the request (an image, a tool result it has no
    /// form for) is left out; when every one is, the request ends with `Unsupported` naming
    /// what each refused, before anything is sent.
    pub(crate) fn start(
        router: &'r Router,
        req: &impl Admissible,
        opts: &'r RequestOptions,
        started: Instant,
    ) -> Result<Self> {
        let order = candidates_order(router, req.capability(), opts)?;
        let mut refusals = Vec::new();
        let carried: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&i| match req.refusal(router.entries[i].adapter.as_ref()) {
                None => true,
                Some(e) => {
                    refusals.push(e);
                    false
                }
            })
            .collect();
        if carried.is_empty() {
            return Err(refused_everywhere(refusals));
        }
        let candidates = carried
            .into_iter()
            .map(|index| {
                let entry = &router.entries[index];
                let account = opts.account_for(entry.id());
                let breaker = match &account {
                    None => BreakerRef::Lent(&entry.breaker),
                    Some(a) => BreakerRef::Own(router.breakers.breaker(entry.id(), Some(a))),
                };
                let credential = opts
                    .credential_for(entry.id())
                    .or(entry.credential.as_ref());
                Candidate {
                    index,
                    entry,
                    breaker,
                    account,
                    credential,
                }
            })
            .collect();
        let deadline = started + opts.deadline.unwrap_or(router.policy.deadline);
        Ok(Run {
            started,
            deadline,
            wait_until: opts
                .max_wait
                .map_or(deadline, |w| deadline.min(started + w)),
            candidates,
            tried: Vec::new(),
            errors: Vec::new(),
            previous: None,
            attempt_at: started,
            streams: false,
            capability: req.capability(),
            sends: 0,
            failed: 0,
            costs: TokenCounts::default(),
            fail_over_invalid: opts.fail_over_invalid,
            place: opts.place(),
            tenant: opts.budget_tenant(),
        })
    }

    /// Every candidate as the cache key sees it: who answers, with which model and key.
    pub(crate) fn answerers<'a>(
        &'a self,
        model: Option<&'a str>,
        capability: Capability,
    ) -> Vec<Answerer<'a>> {
        self.candidates
            .iter()
            .map(|c| Answerer {
                provider: c.entry.id().as_str(),
                model: model
                    .or_else(|| c.entry.adapter.default_model(capability))
                    .unwrap_or_default(),
                extra_body: &c.entry.extra_body,
                account: c.account.as_deref(),
                credential: c.credential.map(Credential::expose),
            })
            .collect()
    }

    /// The candidates to consider, fewer failures first (on a first attempt: the order).
    pub(crate) fn ranked(&self) -> Cow<'static, [usize]> {
        const IDENTITY: [usize; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];
        let n = self.candidates.len();
        if n <= IDENTITY.len() && self.tried.iter().all(|t| t.failures == 0) {
            return Cow::Borrowed(&IDENTITY[..n]);
        }
        let mut r: Vec<usize> = (0..n).collect();
        r.sort_by_key(|&i| self.tried(i).failures);
        Cow::Owned(r)
    }

    /// How many candidates other than `slot` this request has not tried yet and could still
    /// send to before the deadline: not rejected, breaker not open until past it. (Once every
    /// provider has had its chance, a retry may take all that is left.)
    pub(crate) fn untried_open_before_deadline(&self, slot: usize, now: Instant) -> usize {
        (0..self.candidates.len())
            .filter(|&i| i != slot && self.tried(i).failures == 0)
            .filter(|&i| match self.candidates[i].breaker.get().check(now) {
                Allow::Yes | Allow::Probe | Allow::ProbeBusy => true,
                Allow::No(until) => until < self.deadline,
                Allow::Rejected => false,
            })
            .count()
    }

    pub(crate) fn tried(&self, slot: usize) -> Tried {
        self.tried.get(slot).copied().unwrap_or_default()
    }

    pub(crate) fn tried_mut(&mut self, slot: usize) -> &mut Tried {
        if self.tried.is_empty() {
            self.tried = vec![Tried::default(); self.candidates.len()];
        }
        &mut self.tried[slot]
    }

    /// Notes a request sent to candidate `slot`: the candidate of the send before it when
    /// that was another one (a failover), as the router's index of its provider.
    pub(crate) fn record_send(&mut self, slot: usize) -> Option<usize> {
        self.sends += 1;
        let from = self.previous.filter(|p| *p != slot);
        self.previous = Some(slot);
        from.map(|p| self.candidates[p].index)
    }

    /// Keeps a failure for the final error.
    pub(crate) fn push_error(&mut self, err: Error) {
        self.errors.push(err);
    }

    /// `err` ends the request: alone, or after the failures before it. A spent budget ends it
    /// whatever failed before: it stays `BudgetExhausted` (a caller snoozes it to the
    /// window's reset), the failures before it kept as its attempts.
    pub(crate) fn ends_with(&mut self, err: Error) -> Error {
        if self.errors.is_empty() {
            err
        } else if err.kind() == ErrorKind::BudgetExhausted {
            err.after_attempts(std::mem::take(&mut self.errors))
        } else {
            self.errors.push(err);
            self.all_failed()
        }
    }

    /// Every failure so far ends the request.
    pub(crate) fn all_failed(&mut self) -> Error {
        Error::all_failed(std::mem::take(&mut self.errors))
    }

    /// The deadline has passed: a timeout, with the failures before it.
    pub(crate) fn timed_out(&mut self) -> Error {
        let waited = self.deadline.saturating_duration_since(self.started);
        Error::deadline_passed(waited, std::mem::take(&mut self.errors))
    }

    /// Nothing reopens before `at`, `wait` from now: too late to wait for.
    pub(crate) fn unavailable(&mut self, at: Instant, wait: Duration) -> Error {
        Error::all_unavailable(at, wait, std::mem::take(&mut self.errors))
    }
}

/// The providers that may serve a request, as indices: the environment's order for the
/// capability, or the one pinned provider.
/// Every provider refused the request (`refusals`, in failover order).
fn refused_everywhere(mut refusals: Vec<Error>) -> Error {
    if refusals.len() == 1 {
        return refusals.remove(0);
    }
    let reasons: Vec<String> = refusals.iter().map(|e| e.message().to_owned()).collect();
    // A conversation every format finds malformed is invalid; else no one can carry it.
    let kind = match refusals.first().map(Error::kind) {
        Some(k) if refusals.iter().all(|e| e.kind() == k) => k,
        _ => ErrorKind::Unsupported,
    };
    Error::new(
        kind,
        format!(
            "no provider in the failover order can carry this request: {}",
            reasons.join("; ")
        ),
    )
}

fn candidates_order<'r>(
    router: &'r Router,
    cap: Capability,
    opts: &RequestOptions,
) -> Result<Cow<'r, [usize]>> {
    let order = router.orders.get(cap);
    let Some(pin) = &opts.provider else {
        if order.is_empty() {
            return Err(Error::config(format!(
                "no provider is configured for {cap} in this environment"
            )));
        }
        return Ok(Cow::Borrowed(order));
    };
    let Some(idx) = router.entries.iter().position(|e| e.id() == pin) else {
        return Err(Error::config(format!("unknown provider `{pin}`")));
    };
    if !router.entries[idx].adapter.capabilities().supports(cap) {
        return Err(Error::unsupported(pin, &cap.to_string()));
    }
    Ok(Cow::Owned(vec![idx]))
}
