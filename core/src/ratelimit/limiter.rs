//! Admission over a [`LimiterStore`]: book a slot (one store call), wait for it through the
//! injected [`Clock`] with no lock held, and give the slot back if the caller goes away
//! before sending. Who books first is the [admission order](crate::admission): an interactive
//! request books at once, a bulk one waits in its key's line until it can send at once.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Limits;
use super::contact::{Contacts, Entered};
use super::store::{
    Charge, Demand, LimitKey, LimitSnapshot, LimiterStore, Reservation, Tightening,
};
use crate::admission::{Lines, Place, Priority};
use crate::clock::Clock;
use crate::error::Result;

/// Admission control for every (provider, model, account): a thin layer over a store.
#[derive(Clone)]
pub(crate) struct Limiter {
    store: Arc<dyn LimiterStore>,
    clock: Arc<dyn Clock>,
    /// The bulk requests of this process waiting for a slot, a line per key.
    lines: Arc<Lines<LimitKey>>,
    /// Keys whose limits are not yet known: a slow start ([`contact`](super::contact)).
    contacts: Arc<Contacts>,
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl Limiter {
    /// A limiter over `store`, timed by `clock`.
    pub(crate) fn new(store: Arc<dyn LimiterStore>, clock: Arc<dyn Clock>) -> Self {
        Limiter {
            store,
            clock,
            lines: Arc::default(),
            contacts: Arc::default(),
        }
    }

    /// A place among the first requests to `key` while its limits are not known (nothing
    /// configured, nothing stated yet): at once, or when an answer frees one before `until`
    /// ([`contact`](super::contact)).
    pub(crate) async fn enter(&self, key: &LimitKey, limits: &Limits, until: Instant) -> Entered {
        self.contacts
            .enter(key, limits, self.clock.as_ref(), until)
            .await
    }

    /// Books `cost` for `key` in `place`'s turn, if it can start within `patience.max_wait`
    /// of `now`.
    ///
    /// An interactive request books at once ([`reserve`](Self::reserve)), however far ahead
    /// its slot is. A bulk request books only a slot it can use at once: it waits in the
    /// key's line until its turn comes and the store has a free slot, at most `max_wait`
    /// (then a `NotUntil`). Without `queue`, it waits only where nobody else does (the caller
    /// is looking for a provider that can start soon, and will come back to queue): with
    /// others waiting it gets a `NotUntil` at once, its turn as the line expects it. So no bulk
    /// request holds a slot ahead of an interactive one, in this process or in another sharing
    /// the store, and a place in a line is kept until it is served.
    ///
    /// # Errors
    ///
    /// When the store fails.
    #[allow(clippy::too_many_arguments)] // a booking's parts, each one of its own kind
    pub(crate) async fn reserve_in_turn(
        &self,
        key: &LimitKey,
        limits: &Limits,
        cost: Demand,
        charges: &[Charge],
        patience: Patience,
        now: Instant,
        place: &Place,
    ) -> Result<Reservation> {
        let Patience { max_wait, queue } = patience;
        if place.priority == Priority::Interactive {
            return self
                .store
                .reserve_charged(key, limits, cost, charges, max_wait, now)
                .await;
        }
        let line = self.lines.of(key);
        let until = now + max_wait;
        if let Some(turn) = line.expected_turn(now).filter(|t| *t > until || !queue) {
            return Ok(Reservation::NotUntil {
                wait: turn.saturating_duration_since(now),
            });
        }
        let waiter = line.join(place);
        loop {
            tokio::select! {
                biased;
                () = waiter.turn() => {}
                () = self.clock.wait_for_time(until) => {
                    let turn = line.expected_turn(self.clock.now()).unwrap_or(until);
                    return Ok(Reservation::NotUntil { wait: turn.max(until) - now });
                }
            }
            // Its turn: wait for the instant the store last named, then ask.
            if let Some(free) = line.free_at().filter(|f| *f > self.clock.now()) {
                if free > until {
                    return Ok(Reservation::NotUntil { wait: free - now });
                }
                self.clock.sleep_until(free).await;
            }
            let at = self.clock.now();
            let held = line.take_promise();
            let (answer, turn) = self
                .store
                .take_turn_charged(key, limits, cost, charges, held, at)
                .await?;
            // A promised turn is counted from the answer: from the ask, the line would come
            // back as early as the answer took, and find the key not yet free.
            let answered = self.clock.now();
            match answer {
                Reservation::NotUntil { wait } => {
                    match turn {
                        Some(t) => line.promised(t.number, answered + t.wait),
                        None => line.set_free_at(at + wait),
                    }
                    if at + wait > until {
                        return Ok(Reservation::NotUntil {
                            wait: at + wait - now,
                        });
                    }
                }
                granted @ Reservation::Granted { .. } => {
                    line.granted(at);
                    if let Some(t) = turn {
                        line.promised(t.number, answered + t.wait);
                    }
                    return Ok(granted);
                }
                too_large => return Ok(too_large),
            }
        }
    }

    /// Books `cost` for `key` if it can start within `max_wait` of `now`. A grant must be
    /// held in a [`Permit`] at once, so that it goes back if the request is not sent.
    ///
    /// # Errors
    ///
    /// When the store fails (never for the in-memory store).
    #[cfg(test)]
    pub(crate) async fn reserve(
        &self,
        key: &LimitKey,
        limits: &Limits,
        cost: Demand,
        max_wait: Duration,
        now: Instant,
    ) -> Result<Reservation> {
        self.store.reserve(key, limits, cost, max_wait, now).await
    }

    /// Gives back (> 0) or charges (< 0) nano-dollars in budgets' ledgers; a store error is
    /// logged (the ledger keeps the estimate: the safe side).
    pub(crate) async fn settle(&self, ledgers: &[(Arc<str>, i64)]) {
        if ledgers.is_empty() {
            return;
        }
        if let Err(e) = self.store.settle(ledgers, self.clock.now()).await {
            tracing::warn!(error = %e, "could not settle a budget with an answer's cost");
        }
    }

    /// Whether the store can serve this client ([`LimiterStore::check`]).
    pub(crate) async fn check(&self) -> Result<()> {
        self.store.check().await
    }

    /// Sends what the store holds back ([`LimiterStore::flush`]).
    pub(crate) async fn flush(&self) -> Result<()> {
        self.store.flush().await
    }

    /// Whether a slot booked earlier may still be used now ([`LimiterStore::blocked`]).
    pub(crate) async fn blocked(&self, key: &LimitKey, booking: u64) -> Result<Option<Duration>> {
        self.store.blocked(key, booking, self.clock.now()).await
    }

    /// Whether a reservation of `key` under `limits` would book nothing (the store says so
    /// without a call): then there is nothing to admit.
    pub(crate) fn admits_freely(&self, key: &LimitKey, limits: &Limits) -> bool {
        self.store.admits_freely(key, limits)
    }

    /// What the store knows of `key` now, without booking.
    ///
    /// # Errors
    ///
    /// When the store fails.
    pub(crate) async fn peek(&self, key: &LimitKey) -> Result<LimitSnapshot> {
        self.store
            .peek(key, Demand::default(), self.clock.now())
            .await
    }

    /// Tightens the view of `key` (a report, a 429).
    ///
    /// # Errors
    ///
    /// When the store fails.
    pub(crate) fn raise<'a>(
        &'a self,
        key: &'a LimitKey,
        tightening: Tightening,
    ) -> impl Future<Output = Result<()>> + Send + 'a {
        self.store.raise(key, tightening, self.clock.now())
    }

    /// Reconciles a reservation with the usage the provider reported: gives back unused
    /// tokens or charges the excess.
    ///
    /// # Errors
    ///
    /// When the store fails.
    pub(crate) async fn reconcile(&self, key: &LimitKey, reserved: u64, used: u64) -> Result<()> {
        let delta = reserved as i64 - used as i64;
        if delta == 0 {
            return Ok(());
        }
        self.store.refund(key, 0, delta, self.clock.now()).await
    }
}

/// How long a reservation may wait, and whether a bulk one queues in its key's line for that
/// long ([`Limiter::reserve_in_turn`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Patience {
    pub(crate) max_wait: Duration,
    pub(crate) queue: bool,
}

/// A granted reservation, until its request is sent. Dropping it before
/// [`commit`](Permit::commit) — the request was never sent, or its future was dropped —
/// gives the slot back.
pub(crate) struct Permit<'a> {
    limiter: &'a Limiter,
    key: &'a LimitKey,
    cost: Demand,
    /// The budgets' charges booked with it, given back with it.
    charges: Vec<(Arc<str>, i64)>,
    armed: bool,
}

impl fmt::Debug for Permit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("key", self.key)
            .field("cost", &self.cost)
            .field("armed", &self.armed)
            .finish()
    }
}

impl<'a> Permit<'a> {
    /// Holds a grant of `cost` for `key`.
    pub(crate) fn new(limiter: &'a Limiter, key: &'a LimitKey, cost: Demand) -> Self {
        Permit {
            limiter,
            key,
            cost,
            charges: Vec::new(),
            armed: true,
        }
    }

    /// Also gives `charges` back to the budgets' ledgers (what each reserved) if it is
    /// dropped unsent.
    pub(crate) fn charging(mut self, charges: Vec<(Arc<str>, i64)>) -> Self {
        self.charges = charges;
        self
    }

    /// The request is being sent: the slot is used and will not be given back.
    pub(crate) fn commit(mut self) {
        self.armed = false;
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let store = self.limiter.store.clone();
        let key = self.key.clone();
        let cost = self.cost;
        let charges = std::mem::take(&mut self.charges);
        let now = self.limiter.clock.now();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                if !charges.is_empty()
                    && let Err(e) = store.settle(&charges, now).await
                {
                    tracing::warn!(key = %key, error = %e, "could not give back a cancelled reservation's budget");
                }
                let tokens = i64::try_from(cost.tokens()).unwrap_or(i64::MAX);
                if let Err(e) = store.refund(&key, cost.requests, tokens, now).await {
                    tracing::warn!(key = %key, error = %e, "could not return a cancelled reservation");
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::TokioClock;
    use crate::id::ProviderId;
    use crate::ratelimit::MemoryStore;
    use crate::ratelimit::{LimitReport, Per, Window};

    fn limiter() -> Limiter {
        Limiter::new(Arc::new(MemoryStore::new()), Arc::new(TokioClock))
    }

    fn key() -> LimitKey {
        LimitKey::new(ProviderId::new("p"), "m")
    }

    fn cost(tokens: u64) -> Demand {
        Demand {
            requests: 1,
            input_tokens: tokens,
            output_tokens: 0,
            audio_seconds: 0,
        }
    }

    const FOREVER: Duration = Duration::from_secs(3600);

    async fn snapshot(l: &Limiter) -> crate::ratelimit::LimitSnapshot {
        l.peek(&key()).await.unwrap()
    }

    /// Applies a report stating `requests` for `key()`.
    async fn teach(l: &Limiter, requests: Window) {
        let report = LimitReport {
            requests: Some(requests),
            ..LimitReport::default()
        };
        l.raise(
            &key(),
            Tightening {
                report: Some(report),
                ..Tightening::default()
            },
        )
        .await
        .unwrap();
    }

    /// Books `c` for `key()` and returns its wait; the slot is used (committed).
    async fn grant(l: &Limiter, limits: &Limits, c: Demand) -> Duration {
        grant_for(l, &key(), limits, c).await
    }

    async fn grant_for(l: &Limiter, k: &LimitKey, limits: &Limits, c: Demand) -> Duration {
        match l
            .reserve(k, limits, c, FOREVER, Instant::now())
            .await
            .unwrap()
        {
            Reservation::Granted { wait, .. } => wait,
            other => panic!("expected a grant, got {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn unknown_limits_admit_freely() {
        let l = limiter();
        for _ in 0..10_000 {
            let wait = grant(&l, &Limits::none(), cost(1_000_000)).await;
            assert_eq!(wait, Duration::ZERO);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn waits_for_the_token_bucket() {
        let l = limiter();
        let limits = Limits::none().with_tpm(6000);
        grant(&l, &limits, cost(6000)).await;
        assert_eq!(
            grant(&l, &limits, cost(3000)).await,
            Duration::from_secs(30)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn too_large_is_never_admitted_and_books_nothing() {
        let l = limiter();
        let limits = Limits::none().with_tpm(1000);
        let a = l
            .reserve(&key(), &limits, cost(1001), FOREVER, Instant::now())
            .await
            .unwrap();
        assert!(
            matches!(
                a,
                Reservation::TooLarge {
                    cost: 1001,
                    capacity: 1000,
                    ..
                }
            ),
            "{a:?}"
        );
        let snap = snapshot(&l).await;
        assert_eq!(
            snap.tokens.map(|b| (b.level, b.capacity)),
            Some((1000.0, 1000))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn token_room_is_what_keeps_every_token_bucket_half_full() {
        let l = limiter();
        let room = |k: LimitKey| {
            let l = l.clone();
            async move { l.peek(&k).await.unwrap().token_room }
        };
        // Unknown key: no room known, and looking does not create it.
        assert_eq!(room(key()).await, None);
        let limits = Limits::none().with_tpm(1000).with_tpd(10_000);
        let booked = |c: Demand| {
            let (l, limits) = (l.clone(), limits);
            async move {
                match l
                    .reserve(&key(), &limits, c, FOREVER, Instant::now())
                    .await
                    .unwrap()
                {
                    Reservation::Granted { token_room, .. } => token_room,
                    other => panic!("{other:?}"),
                }
            }
        };
        // Minute: 900 - 500; day: 9900 - 5000. The grant reports the room it leaves.
        assert_eq!(booked(cost(100)).await, Some(400));
        assert_eq!(room(key()).await, Some(400));
        assert_eq!(booked(cost(600)).await, Some(0));
        assert_eq!(room(key()).await, Some(0));
        // A requests-only key has no token room.
        let k = LimitKey::new(ProviderId::new("p"), "rpm-only");
        grant_for(&l, &k, &Limits::none().with_rpm(5), cost(1)).await;
        assert_eq!(room(k).await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_look_before_the_first_booking_keeps_the_configured_limits() {
        let l = limiter();
        let snap = snapshot(&l).await;
        assert_eq!(snap.tokens, None);
        grant(&l, &Limits::none().with_tpm(1000), cost(10)).await;
        let snap = snapshot(&l).await;
        assert_eq!(
            snap.tokens.map(|b| (b.level, b.capacity)),
            Some((990.0, 1000))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn not_until_books_nothing() {
        let l = limiter();
        let limits = Limits::none().with_rpm(1);
        grant(&l, &limits, cost(0)).await;
        let refused = || {
            let (l, limits) = (l.clone(), limits);
            async move {
                l.reserve(
                    &key(),
                    &limits,
                    cost(0),
                    Duration::from_secs(1),
                    Instant::now(),
                )
                .await
                .unwrap()
            }
        };
        let a = refused().await;
        assert!(
            matches!(a, Reservation::NotUntil { wait } if wait == Duration::from_secs(60)),
            "{a:?}"
        );
        // A second refusal sees the same wait: nothing was booked by the first.
        let a = refused().await;
        assert!(matches!(a, Reservation::NotUntil { wait } if wait == Duration::from_secs(60)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_permit_gives_its_reservation_back() {
        let l = limiter();
        let limits = Limits::none().with_rpm(2).with_tpm(1000);
        grant(&l, &limits, cost(800)).await;
        let k = key();
        drop(Permit::new(&l, &k, cost(800)));
        tokio::task::yield_now().await;
        let snap = snapshot(&l).await;
        assert_eq!(
            snap.tokens.map(|b| (b.level, b.capacity)),
            Some((1000.0, 1000))
        );
        assert_eq!(snap.requests.map(|b| (b.level, b.capacity)), Some((2.0, 2)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_cancelled_while_waiting_gives_its_slot_back() {
        let l = limiter();
        let limits = Limits::none().with_rpm(1);
        grant(&l, &limits, cost(0)).await;
        let l2 = l.clone();
        let waiting = tokio::spawn(async move {
            let k = key();
            let wait = grant(&l2, &limits, cost(0)).await;
            let p = Permit::new(&l2, &k, cost(0));
            TokioClock.sleep_until(Instant::now() + wait).await;
            p.commit();
        });
        tokio::task::yield_now().await;
        waiting.abort();
        let _ = waiting.await;
        tokio::task::yield_now().await;
        let snap = snapshot(&l).await;
        // Level back to 0 (the first request's debt only), not -1.
        let level = snap.requests.unwrap().level;
        assert!((level - 0.0).abs() < 1e-9, "level {level}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_report_teaches_limits_and_tightens_levels() {
        let l = limiter();
        teach(
            &l,
            Window {
                limit: Some(100),
                remaining: Some(0),
                reset_at: None,
                per: Per::Minute,
            },
        )
        .await;
        assert_eq!(
            grant(&l, &Limits::none(), cost(0)).await,
            Duration::from_millis(600)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stated_limit_lowers_a_configured_one_but_never_raises_it() {
        let l = limiter();
        let limits = Limits::none().with_rpm(60);
        grant(&l, &limits, cost(0)).await;
        for (stated, expected) in [(600, 60), (30, 30)] {
            teach(
                &l,
                Window {
                    limit: Some(stated),
                    remaining: None,
                    reset_at: None,
                    per: Per::Minute,
                },
            )
            .await;
            let snap = snapshot(&l).await;
            assert_eq!(
                snap.requests.map(|b| b.capacity),
                Some(expected),
                "stated {stated}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_gate_is_never_moved_earlier() {
        let l = limiter();
        let now = Instant::now();
        for secs in [20, 5] {
            l.raise(
                &key(),
                Tightening {
                    gate_until: Some(now + Duration::from_secs(secs)),
                    drain: crate::ratelimit::Drain::every_minute(),
                    ..Tightening::default()
                },
            )
            .await
            .unwrap();
        }
        assert_eq!(
            grant(&l, &Limits::none(), cost(0)).await,
            Duration::from_secs(20)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn reconcile_returns_unused_tokens_and_charges_excess() {
        let l = limiter();
        let limits = Limits::none().with_tpm(1000);
        grant(&l, &limits, cost(600)).await;
        l.reconcile(&key(), 600, 100).await.unwrap();
        let snap = snapshot(&l).await;
        assert_eq!(snap.tokens.unwrap().level, 900.0);
        l.reconcile(&key(), 100, 400).await.unwrap();
        let snap = snapshot(&l).await;
        assert_eq!(snap.tokens.unwrap().level, 600.0);
    }
}
