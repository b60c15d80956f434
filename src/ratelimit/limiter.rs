//! Async admission over a [`LimiterStore`]: book a slot, wait for it through the injected
//! [`Clock`] with no lock held, and give the slot back if the caller goes away first.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::store::{Cost, LimitKey, LimiterStore, Reservation, Tightening};
use super::Limits;
use crate::clock::Clock;
use crate::error::Result;

/// Admission control for every (provider, model): a thin async layer over a store.
#[derive(Clone)]
pub struct Limiter {
    store: Arc<dyn LimiterStore>,
    clock: Arc<dyn Clock>,
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

/// The outcome of [`Limiter::try_admit`].
#[derive(Debug)]
#[non_exhaustive]
pub enum Admission {
    /// A slot is booked; wait for it with [`Permit::ready`].
    Granted(Permit),
    /// The wait would exceed the allowed one; nothing was booked.
    NotUntil(Duration),
    /// Can never be admitted.
    TooLarge(Reservation),
}

impl Limiter {
    /// A limiter over `store`, waiting through `clock`.
    pub fn new(store: Arc<dyn LimiterStore>, clock: Arc<dyn Clock>) -> Self {
        Limiter { store, clock }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn LimiterStore> {
        &self.store
    }

    /// Books `cost` for `key` if it can start within `max_wait`.
    ///
    /// # Errors
    ///
    /// When the store fails (never for the in-memory store).
    pub async fn try_admit(
        &self,
        key: &LimitKey,
        limits: &Limits,
        cost: Cost,
        max_wait: Duration,
    ) -> Result<Admission> {
        let now = self.clock.now();
        Ok(
            match self.store.reserve(key, limits, cost, max_wait, now).await? {
                Reservation::Granted { wait } => Admission::Granted(Permit {
                    key: key.clone(),
                    cost,
                    ready_at: now + wait,
                    wait,
                    armed: true,
                    store: self.store.clone(),
                    clock: self.clock.clone(),
                }),
                Reservation::NotUntil { wait } => Admission::NotUntil(wait),
                other => Admission::TooLarge(other),
            },
        )
    }

    /// See [`LimitSnapshot::token_room`](super::LimitSnapshot::token_room).
    ///
    /// # Errors
    ///
    /// When the store fails.
    pub async fn token_room(&self, key: &LimitKey) -> Result<Option<u64>> {
        let now = self.clock.now();
        Ok(self.store.peek(key, Cost::default(), now).await?.token_room)
    }

    /// Tightens the view of `key` (a report, a 429).
    ///
    /// # Errors
    ///
    /// When the store fails.
    ///
    /// Not an `async fn`: the store's own (boxed) future is returned, so an awaiting caller
    /// holds a pointer rather than one more state machine around it.
    pub fn raise<'a>(
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
    ///
    /// Not an `async fn`, for the reason given at [`raise`](Self::raise).
    pub fn reconcile<'a>(
        &'a self,
        key: &'a LimitKey,
        reserved: u64,
        used: u64,
    ) -> impl Future<Output = Result<()>> + Send + 'a {
        let delta = reserved as i64 - used as i64;
        let refund = (delta != 0).then(|| self.store.refund(key, 0, delta, self.clock.now()));
        async move {
            match refund {
                Some(refund) => refund.await,
                None => Ok(()),
            }
        }
    }
}

/// A booked slot. Dropping it before [`commit`](Permit::commit) gives the slot back.
pub struct Permit {
    key: LimitKey,
    cost: Cost,
    ready_at: Instant,
    wait: Duration,
    armed: bool,
    store: Arc<dyn LimiterStore>,
    clock: Arc<dyn Clock>,
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("key", &self.key)
            .field("cost", &self.cost)
            .field("wait", &self.wait)
            .field("armed", &self.armed)
            .finish()
    }
}

impl Permit {
    /// How long this slot had to wait when booked.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// The cost booked.
    pub fn cost(&self) -> Cost {
        self.cost
    }

    /// Waits until the slot's time (no lock held).
    pub async fn ready(&self) {
        if !self.wait.is_zero() {
            self.clock.sleep_until(self.ready_at).await;
        }
    }

    /// The request is being sent: the slot is used and will not be given back.
    pub fn commit(mut self) {
        self.armed = false;
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let store = self.store.clone();
        let key = self.key.clone();
        let cost = self.cost;
        let now = self.clock.now();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
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
    use crate::ratelimit::store::MemoryStore;
    use crate::ratelimit::{LimitReport, Per, Window};

    fn limiter() -> Limiter {
        Limiter::new(Arc::new(MemoryStore::new()), Arc::new(TokioClock))
    }

    fn key() -> LimitKey {
        LimitKey::new(ProviderId::new("p"), "m")
    }

    fn cost(tokens: u64) -> Cost {
        Cost {
            requests: 1,
            input_tokens: tokens,
            output_tokens: 0,
            audio_seconds: 0,
        }
    }

    const FOREVER: Duration = Duration::from_secs(3600);

    async fn snapshot(l: &Limiter) -> crate::ratelimit::LimitSnapshot {
        l.store()
            .peek(&key(), cost(0), Instant::now())
            .await
            .unwrap()
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

    async fn grant(l: &Limiter, limits: &Limits, c: Cost) -> Permit {
        match l.try_admit(&key(), limits, c, FOREVER).await.unwrap() {
            Admission::Granted(p) => p,
            other => panic!("expected a grant, got {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn unknown_limits_admit_freely() {
        let l = limiter();
        for _ in 0..10_000 {
            let p = grant(&l, &Limits::none(), cost(1_000_000)).await;
            assert_eq!(p.wait(), Duration::ZERO);
            p.commit();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn waits_for_the_token_bucket_and_sleeps_through_the_clock() {
        let l = limiter();
        let limits = Limits::none().with_tpm(6000);
        grant(&l, &limits, cost(6000)).await.commit();
        let p = grant(&l, &limits, cost(3000)).await;
        assert_eq!(p.wait(), Duration::from_secs(30));
        let t0 = Instant::now();
        p.ready().await;
        assert_eq!(Instant::now() - t0, Duration::from_secs(30));
        p.commit();
    }

    #[tokio::test(start_paused = true)]
    async fn too_large_is_never_admitted_and_books_nothing() {
        let l = limiter();
        let limits = Limits::none().with_tpm(1000);
        let a = l
            .try_admit(&key(), &limits, cost(1001), FOREVER)
            .await
            .unwrap();
        assert!(
            matches!(
                a,
                Admission::TooLarge(Reservation::TooLarge {
                    cost: 1001,
                    capacity: 1000,
                    ..
                })
            ),
            "{a:?}"
        );
        let snap = snapshot(&l).await;
        assert_eq!(snap.tokens, Some((1000.0, 1000)));
    }

    #[tokio::test(start_paused = true)]
    async fn token_room_is_what_keeps_every_token_bucket_half_full() {
        let l = limiter();
        // Unknown key: no room known, and looking does not create it.
        assert_eq!(l.token_room(&key()).await.unwrap(), None);
        let limits = Limits::none().with_tpm(1000).with_tpd(10_000);
        grant(&l, &limits, cost(100)).await.commit();
        // Minute: 900 - 500; day: 9900 - 5000.
        assert_eq!(l.token_room(&key()).await.unwrap(), Some(400));
        grant(&l, &limits, cost(600)).await.commit();
        assert_eq!(l.token_room(&key()).await.unwrap(), Some(0));
        // A requests-only key has no token room.
        let k = LimitKey::new(ProviderId::new("p"), "rpm-only");
        match l
            .try_admit(&k, &Limits::none().with_rpm(5), cost(1), FOREVER)
            .await
            .unwrap()
        {
            Admission::Granted(p) => p.commit(),
            other => panic!("{other:?}"),
        }
        assert_eq!(l.token_room(&k).await.unwrap(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_look_before_the_first_booking_keeps_the_configured_limits() {
        let l = limiter();
        let snap = snapshot(&l).await;
        assert_eq!(snap.tokens, None);
        grant(&l, &Limits::none().with_tpm(1000), cost(10))
            .await
            .commit();
        let snap = snapshot(&l).await;
        assert_eq!(snap.tokens, Some((990.0, 1000)));
    }

    #[tokio::test(start_paused = true)]
    async fn not_until_books_nothing() {
        let l = limiter();
        let limits = Limits::none().with_rpm(1);
        grant(&l, &limits, cost(0)).await.commit();
        let a = l
            .try_admit(&key(), &limits, cost(0), Duration::from_secs(1))
            .await
            .unwrap();
        assert!(
            matches!(a, Admission::NotUntil(w) if w == Duration::from_secs(60)),
            "{a:?}"
        );
        // A second refusal sees the same wait: nothing was booked by the first.
        let a = l
            .try_admit(&key(), &limits, cost(0), Duration::from_secs(1))
            .await
            .unwrap();
        assert!(matches!(a, Admission::NotUntil(w) if w == Duration::from_secs(60)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_permit_gives_its_reservation_back() {
        let l = limiter();
        let limits = Limits::none().with_rpm(2).with_tpm(1000);
        let p = grant(&l, &limits, cost(800)).await;
        drop(p);
        tokio::task::yield_now().await;
        let snap = snapshot(&l).await;
        assert_eq!(snap.tokens, Some((1000.0, 1000)));
        assert_eq!(snap.requests, Some((2.0, 2)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_cancelled_while_waiting_gives_its_slot_back() {
        let l = limiter();
        let limits = Limits::none().with_rpm(1);
        grant(&l, &limits, cost(0)).await.commit();
        let l2 = l.clone();
        let waiting = tokio::spawn(async move {
            let p = grant(&l2, &limits, cost(0)).await;
            p.ready().await;
            p.commit();
        });
        tokio::task::yield_now().await;
        waiting.abort();
        let _ = waiting.await;
        tokio::task::yield_now().await;
        let snap = snapshot(&l).await;
        // Level back to 0 (the first request's debt only), not -1.
        let (level, _) = snap.requests.unwrap();
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
        let p = grant(&l, &Limits::none(), cost(0)).await;
        assert_eq!(p.wait(), Duration::from_millis(600));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stated_limit_lowers_a_configured_one_but_never_raises_it() {
        let l = limiter();
        let limits = Limits::none().with_rpm(60);
        grant(&l, &limits, cost(0)).await.commit();
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
                snap.requests.map(|(_, cap)| cap),
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
                    drain: true,
                    ..Tightening::default()
                },
            )
            .await
            .unwrap();
        }
        let p = grant(&l, &Limits::none(), cost(0)).await;
        assert_eq!(p.wait(), Duration::from_secs(20));
    }

    #[tokio::test(start_paused = true)]
    async fn reconcile_returns_unused_tokens_and_charges_excess() {
        let l = limiter();
        let limits = Limits::none().with_tpm(1000);
        grant(&l, &limits, cost(600)).await.commit();
        l.reconcile(&key(), 600, 100).await.unwrap();
        let snap = snapshot(&l).await;
        assert_eq!(snap.tokens.unwrap().0, 900.0);
        l.reconcile(&key(), 100, 400).await.unwrap();
        let snap = snapshot(&l).await;
        assert_eq!(snap.tokens.unwrap().0, 600.0);
    }
}
