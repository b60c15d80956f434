//! Choosing the provider for the next attempt and booking its admission.

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::breaker::{Allow, Breaker};
use super::engine::{Entry, Router, PROBE_POLL};
use super::options::RequestOptions;
use super::run::Run;
use super::stream::ChatStream;
use crate::config::Limits;
use crate::error::{Error, ErrorKind, Result};
use crate::id::Capability;
use crate::ratelimit::{
    chat_cost_bound, estimate_chat, input_floor, Admission, Cost, LimitKey, Permit, Reservation,
};
use crate::stats::Counters;
use crate::types::{ChatRequest, ChatResponse, Transcript, TranscriptionRequest, Usage};

/// What one request asks for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Job<'a> {
    Chat(&'a ChatRequest),
    Stream(&'a ChatRequest),
    Transcribe(&'a TranscriptionRequest),
}

/// A request, owned by the router for the length of its attempts: the caller's future is
/// then the request's own (see [`Router::execute`]), with no layer around it holding the
/// request.
#[derive(Debug)]
pub(crate) enum Work {
    Chat(ChatRequest),
    Stream(ChatRequest),
    Transcribe(TranscriptionRequest),
}

impl Work {
    pub(super) fn job(&self) -> Job<'_> {
        match self {
            Work::Chat(r) => Job::Chat(r),
            Work::Stream(r) => Job::Stream(r),
            Work::Transcribe(r) => Job::Transcribe(r),
        }
    }
}

impl Job<'_> {
    pub(super) fn capability(&self) -> Capability {
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

    pub(super) fn cost(&self, model: &str) -> Cost {
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
    pub(super) fn request_cost(&self, model: &str) -> Cost {
        match self {
            Job::Chat(_) | Job::Stream(_) => Cost::one_request(),
            Job::Transcribe(_) => self.cost(model),
        }
    }

    /// What an attempt that booked `cost` has to reconcile: the [`input_floor`] is read only
    /// where tokens were booked (it walks the prompt).
    pub(super) fn booked(&self, cost: Cost) -> Booked {
        let floor = match self {
            Job::Chat(r) | Job::Stream(r) if cost.tokens() > 0 => input_floor(r),
            _ => 0,
        };
        Booked { cost, floor }
    }
}

/// What an attempt booked, reconciled with the usage its answer reports.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Booked {
    cost: Cost,
    /// See [`input_floor`].
    floor: u64,
}

impl Booked {
    /// Counts `usage` on `entry`'s counters and returns the tokens to reconcile the booking
    /// with: `None` where no tokens were booked (nothing reserved, nothing to reconcile — the
    /// response's own headers, if any, already set the level).
    pub(super) fn spend(self, entry: &Entry, usage: Usage) -> Option<u64> {
        Counters::add(&entry.counters.here().input_tokens, usage.input_tokens);
        Counters::add(&entry.counters.here().output_tokens, usage.output_tokens);
        (self.cost.tokens() > 0).then(|| usage.input_tokens.max(self.floor) + usage.output_tokens)
    }

    /// The tokens booked.
    pub(super) fn tokens(self) -> u64 {
        self.cost.tokens()
    }
}

/// The admission cost of one request, estimated at most once per model however many
/// providers, passes and attempts price it.
#[derive(Debug, Default)]
pub(super) struct Costs(Vec<(String, Cost)>);

impl Costs {
    fn known(&self, model: &str) -> Option<Cost> {
        self.0.iter().find(|(m, _)| m == model).map(|(_, c)| *c)
    }

    /// The estimated cost of `job` for `model`, counted once.
    fn exact(&mut self, job: &Job<'_>, model: &str) -> Cost {
        if let Some(c) = self.known(model) {
            return c;
        }
        let c = job.cost(model);
        self.0.push((model.to_owned(), c));
        c
    }
}

/// What one request produced.
#[derive(Debug)]
pub(crate) enum Done {
    Chat(ChatResponse),
    Stream(Box<ChatStream>),
    Transcript(Transcript),
}

impl Done {
    /// A chat job's answer. The router answers each job with its own kind; anything else is
    /// an internal error, reported rather than panicking.
    pub(crate) fn into_chat(self) -> Result<ChatResponse> {
        match self {
            Done::Chat(r) => Ok(r),
            other => Err(other.mismatch()),
        }
    }

    /// A streamed chat job's answer (see [`into_chat`](Self::into_chat)).
    pub(crate) fn into_stream(self) -> Result<ChatStream> {
        match self {
            Done::Stream(s) => Ok(*s),
            other => Err(other.mismatch()),
        }
    }

    /// A transcription job's answer (see [`into_chat`](Self::into_chat)).
    pub(crate) fn into_transcript(self) -> Result<Transcript> {
        match self {
            Done::Transcript(t) => Ok(t),
            other => Err(other.mismatch()),
        }
    }

    fn mismatch(&self) -> Error {
        Error::decode(format!(
            "internal: the router returned {self:?} for another job"
        ))
    }
}

/// Per-request memory of one candidate provider.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Tried {
    pub(super) failures: u32,
    pub(super) ready_at: Option<Instant>,
}

/// How an attempt's admission cost was reckoned (see [`Router::price`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pricing {
    /// No token limit applies: one request.
    Requests,
    /// The tokenizer-free bound.
    Bound,
    /// The tiktoken count.
    Count,
}

impl Pricing {
    /// Counts a request sent with this pricing.
    pub(super) fn record(self, entry: &Entry) {
        match self {
            Pricing::Requests => {}
            Pricing::Bound => Counters::add(&entry.counters.here().priced_by_bound, 1),
            Pricing::Count => Counters::add(&entry.counters.here().priced_by_count, 1),
        }
    }
}

/// A provider chosen and admitted for the next attempt.
pub(super) struct Go<'a> {
    pub(super) slot: usize,
    pub(super) entry: usize,
    /// The provider, model (`key.model`) and account.
    pub(super) key: Cow<'a, LimitKey>,
    pub(super) cost: Cost,
    pub(super) pricing: Pricing,
    /// `None`: admitted without a booking (see [`Router::admits_freely`]).
    /// Boxed: it lives in the request's state across the send, and is usually `None`.
    pub(super) permit: Option<Box<Permit>>,
    /// This attempt is the breaker's half-open probe.
    pub(super) probe: bool,
}

/// A chat request's first attempt that goes at once (see [`Router::first_pick`]): to the
/// first provider of the order, for its default model, priced as one request, slot 0.
pub(super) struct AtOnce<'a> {
    pub(super) entry: usize,
    pub(super) key: &'a LimitKey,
}

pub(super) enum Pick<'a> {
    Go(Box<Go<'a>>),
    /// Nothing can start now; something might at this instant.
    Wait(Instant),
    /// Nothing can ever serve this request.
    Never(Error),
}

impl Router {
    pub(super) fn order(&self, cap: Capability, opts: &RequestOptions) -> Result<Cow<'_, [usize]>> {
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

    /// The limit key of `job` on `entry` for `account`: the entry's own for its default
    /// model and the configured account (lent: no allocation, no shared count touched),
    /// otherwise a new one.
    fn key_for<'e>(
        &self,
        entry: &'e Entry,
        job: &Job<'_>,
        account: &Option<Arc<str>>,
    ) -> Result<Cow<'e, LimitKey>> {
        if account.is_none() {
            if let Some(k) = entry.default_key(job.capability()) {
                if job.model_override().is_none_or(|m| m == k.model) {
                    return Ok(Cow::Borrowed(k));
                }
            }
        }
        let model = self.model_for(entry, job)?;
        Ok(Cow::Owned(
            LimitKey::new(entry.adapter.id().clone(), model).with_account(account.clone()),
        ))
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

    /// Whether admission to `entry` under `limits` can skip the store: it is this process's
    /// own memory, nothing is configured, and the provider has never stated a limit nor been
    /// throttled — so every bucket of it is unknown, and unknown admits freely (a booking would
    /// change nothing). The first report or 429 ends this for good.
    fn admits_freely(&self, entry: &Entry, limits: &Limits) -> bool {
        self.local_store
            && *limits == Limits::none()
            && !entry.limiter_engaged.load(Ordering::Relaxed)
    }

    /// What admission books for `job` under `key`. Without a token limit, one request (nothing
    /// would read a token count). With one, the tokenizer-free upper bound where the request
    /// fits in the buckets' upper half (it is admitted at once either way; the excess is held
    /// only until the answer's usage gives it back), else the counted estimate.
    async fn price(
        &self,
        job: &Job<'_>,
        entry: &Entry,
        limits: &Limits,
        key: &LimitKey,
        costs: &mut Costs,
    ) -> Result<(Cost, Pricing)> {
        let request = match job {
            Job::Chat(r) | Job::Stream(r) if entry.counts_tokens(limits) => r,
            _ => return Ok((job.request_cost(&key.model), Pricing::Requests)),
        };
        if let Some(c) = costs.known(&key.model) {
            return Ok((c, Pricing::Count));
        }
        let bound = chat_cost_bound(request, &key.model);
        Ok(match self.limiter.token_room(key).await? {
            Some(room) if bound.tokens() <= room => (bound, Pricing::Bound),
            _ => (costs.exact(job, &key.model), Pricing::Count),
        })
    }

    /// The provider of a chat request's first attempt when it can be sent at once, with
    /// nothing to book, wait for or claim: the first of the order, whose breaker is calm
    /// (closed with no failure counted: its verdict is `Yes` and needs no lock), for the
    /// configured account and the adapter's default model, admitted freely (see
    /// [`admits_freely`](Self::admits_freely)) and so priced as one request, within the
    /// deadline, with the send trace off (a traced send takes the breaker's lock for its
    /// sequence number). `None`: [`pick`](Self::pick) decides.
    ///
    /// Exactly the choice `pick` would make for such a request, without its future.
    pub(super) fn first_pick(
        &self,
        run: &Run<'_>,
        req: &ChatRequest,
        opts: &RequestOptions,
    ) -> Option<AtOnce<'_>> {
        if run.started >= run.deadline
            || tracing::enabled!(target: "llm_failover::send", tracing::Level::DEBUG)
        {
            return None;
        }
        let &idx = run.order.first()?;
        let entry = &self.entries[idx];
        if !entry.breaker.is_calm() || opts.account_for(entry.adapter.id()).is_some() {
            return None;
        }
        // The entry's own key (default model, configured account), as `pick` would lend it.
        let Ok(Cow::Borrowed(key)) = self.key_for(entry, &Job::Chat(req), &None) else {
            return None;
        };
        let limits = entry.limits_for(&key.model);
        if !self.admits_freely(entry, &limits) || entry.counts_tokens(&limits) {
            return None;
        }
        Some(AtOnce { entry: idx, key })
    }

    /// Chooses the next provider and books its admission. See the module docs for the order.
    /// `tried` holds one entry per slot of `order`, or none before the first failure; `now`
    /// is the attempt loop's own reading of the clock (one read per pass, not two).
    #[allow(clippy::too_many_arguments)] // the loop's state, borrowed piece by piece
    pub(super) async fn pick(
        &self,
        order: &[usize],
        tried: &[Tried],
        job: &Job<'_>,
        costs: &mut Costs,
        opts: &RequestOptions,
        now: Instant,
        deadline: Instant,
    ) -> Result<Pick<'_>> {
        let remaining = deadline.saturating_duration_since(now);
        // Candidates with fewer failures first; on a first attempt that is the order itself,
        // borrowed rather than allocated.
        const IDENTITY: [usize; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];
        let ranked: Cow<'_, [usize]> =
            if order.len() <= IDENTITY.len() && tried.iter().all(|t| t.failures == 0) {
                Cow::Borrowed(&IDENTITY[..order.len()])
            } else {
                let mut r: Vec<usize> = (0..order.len()).collect();
                r.sort_by_key(|&i| tried.get(i).map_or(0, |t| t.failures));
                Cow::Owned(r)
            };

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
                if let Some(ready) = tried
                    .get(slot)
                    .and_then(|t| t.ready_at)
                    .filter(|r| *r > now)
                {
                    sooner(ready);
                    continue;
                }
                let account = opts.account_for(id);
                let allow = self.acquire(idx, &account, now);
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
                let key = match self.key_for(entry, job, &account) {
                    Ok(k) => k,
                    Err(e) => {
                        release();
                        never.get_or_insert(e);
                        continue;
                    }
                };
                let limits = entry.limits_for(&key.model);
                let (cost, pricing) = match self.price(job, entry, &limits, &key, costs).await {
                    Ok(c) => c,
                    Err(e) => {
                        release();
                        return Err(e);
                    }
                };
                let max_wait = if pass == 0 {
                    remaining.min(self.settings.spill_after)
                } else {
                    remaining
                };
                // `Some(permit)`: admitted (`None` inside: without a booking).
                let admitted = if self.admits_freely(entry, &limits) {
                    Some(None)
                } else {
                    match self.limiter.try_admit(&key, &limits, cost, max_wait).await {
                        Ok(Admission::Granted(permit)) => Some(Some(Box::new(permit))),
                        Ok(Admission::NotUntil(wait)) => {
                            release();
                            sooner(now + wait);
                            if pass == 0 && paced.is_none_or(|(_, w)| wait < w) {
                                paced = Some((slot, wait));
                            }
                            None
                        }
                        Ok(Admission::TooLarge(r)) => {
                            release();
                            never.get_or_insert(self.too_large(entry, &key.model, r));
                            None
                        }
                        Err(e) => {
                            release();
                            return Err(e);
                        }
                    }
                };
                if let Some(permit) = admitted {
                    return Ok(Pick::Go(Box::new(Go {
                        slot,
                        entry: idx,
                        key,
                        cost,
                        pricing,
                        permit,
                        probe: allow == Allow::Probe,
                    })));
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::ProviderId;

    #[test]
    fn an_answer_of_another_kind_is_an_internal_error_not_a_panic() {
        let chat = || Done::Chat(ChatResponse::new(ProviderId::new("p"), "m", "secret text"));
        let transcript = || Done::Transcript(Transcript::new(ProviderId::new("p"), "m", "words"));
        assert_eq!(chat().into_chat().unwrap().text, "secret text");
        assert_eq!(transcript().into_transcript().unwrap().text, "words");
        let err = transcript().into_chat().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Decode);
        assert!(err.to_string().contains("internal"), "{err}");
        let err = chat().into_stream().unwrap_err();
        assert!(err.to_string().contains("internal"), "{err}");
        // The answer's text is not in the message (Debug shows lengths only).
        assert!(!err.to_string().contains("secret text"), "{err}");
        assert!(chat().into_transcript().is_err());
    }
}
