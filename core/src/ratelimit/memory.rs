//! [`MemoryStore`]: the default [`LimiterStore`], the buckets of every key in this process's
//! memory. One short-lived lock per key guards arithmetic only; nobody waits holding it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::Limits;
use super::key_state::{ConfiguredLevels, KeyState};
use super::ledger::LedgerBook;
use super::store::{
    Charge, Demand, LimitKey, LimitSnapshot, LimiterStore, Reservation, Tightening,
};
use crate::error::Result;

/// The default store: buckets in this process's memory.
///
/// A key with nothing configured that no response has ever described is unknown, and unknown
/// admits freely. Pass one to [`ClientBuilder::limiter_store`](crate::ClientBuilder::limiter_store)
/// only to share it between clients of this process; a client makes its own otherwise.
///
/// # Examples
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use llm_failover::ratelimit::{Demand, LimitKey, LimiterStore, Limits, MemoryStore, Reservation};
/// use llm_failover::{Client, ProviderId};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> llm_failover::Result<()> {
/// let store = Arc::new(MemoryStore::new());
/// let key = LimitKey::new(ProviderId::new("openai"), "gpt-4o-mini");
/// let (limits, now) = (Limits::none().with_rpm(1), tokio::time::Instant::now());
/// let first = store.reserve(&key, &limits, Demand::one_request(), Duration::ZERO, now).await?;
/// assert!(matches!(first, Reservation::Granted { wait, .. } if wait.is_zero()));
/// let second = store.reserve(&key, &limits, Demand::one_request(), Duration::ZERO, now).await?;
/// assert!(matches!(second, Reservation::NotUntil { .. })); // the minute's one request is spent
///
/// # let local = std::sync::Arc::new(llm_failover::provider::openai::OpenAi::new(
/// #     llm_failover::ProviderId::new("local"),
/// #     "http://127.0.0.1:11434/v1".parse().unwrap(),
/// # ).with_chat_model("llama3.2"));
/// let client = Client::builder()
///     .provider(local, llm_failover::ProviderSettings::new())
///     .limiter_store(store)
///     .build()?;
/// # let _ = client;
/// # Ok(()) }
/// ```
#[derive(Debug, Default)]
pub struct MemoryStore {
    keys: RwLock<HashMap<LimitKey, Arc<Mutex<KeyState>>>>,
    /// Some key exists (set once, before the first is inserted).
    any: AtomicBool,
    allowance: Duration,
    /// Budgets' ledgers: what each holds (spent and reserved, nano-dollars) and until when it
    /// is kept. Locked around a charged reservation's whole booking, its key's included.
    ledgers: Mutex<LedgerBook>,
}

impl MemoryStore {
    /// An empty store whose buckets hold nothing in reserve.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store whose buckets keep `allowance` of refill in reserve (see
    /// [`Policy::latency_allowance`](crate::config::Policy)).
    pub fn with_latency_allowance(allowance: Duration) -> Self {
        MemoryStore {
            allowance,
            ..Self::default()
        }
    }

    fn existing(&self, key: &LimitKey) -> Option<Arc<Mutex<KeyState>>> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        let keys = self.keys.read().unwrap_or_else(PoisonError::into_inner);
        keys.get(key).cloned()
    }

    fn state(&self, key: &LimitKey, limits: Option<&Limits>, now: Instant) -> Arc<Mutex<KeyState>> {
        if let Some(s) = self.existing(key) {
            return s;
        }
        let mut keys = self.keys.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = keys.get(key) {
            return s.clone();
        }
        let state = Arc::new(Mutex::new(limits.map_or_else(
            || KeyState::unconfigured(self.allowance),
            |l| KeyState::from_limits(l, self.allowance, now),
        )));
        self.any.store(true, Ordering::Release);
        keys.insert(key.clone(), state.clone());
        state
    }

    fn with<T>(
        &self,
        key: &LimitKey,
        limits: Option<&Limits>,
        now: Instant,
        f: impl FnOnce(&mut KeyState) -> T,
    ) -> T {
        let state = self.state(key, limits, now);
        let mut guard = state.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut guard)
    }
}

#[async_trait]
impl LimiterStore for MemoryStore {
    /// A slot booked before a gate was raised (a 429's, a closed fixed window's) does not go
    /// during it; nor, while a resetless limit is spent and its refill unknown, any but one
    /// probe at a time.
    async fn blocked(
        &self,
        key: &LimitKey,
        booking: u64,
        now: Instant,
    ) -> Result<Option<Duration>> {
        let Some(state) = self.existing(key) else {
            return Ok(None);
        };
        let mut s = state.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(s.blocked(booking, now))
    }

    async fn reserve(
        &self,
        key: &LimitKey,
        limits: &Limits,
        cost: Demand,
        max_wait: Duration,
        now: Instant,
    ) -> Result<Reservation> {
        Ok(self.book(key, limits, cost, max_wait, now))
    }

    /// Books `charges` with `cost`: the ledgers stay locked from the check to the booking,
    /// and nothing is booked unless every charge fits and the buckets grant.
    async fn reserve_charged(
        &self,
        key: &LimitKey,
        limits: &Limits,
        cost: Demand,
        charges: &[Charge],
        max_wait: Duration,
        now: Instant,
    ) -> Result<Reservation> {
        if charges.is_empty() {
            return Ok(self.book(key, limits, cost, max_wait, now));
        }
        let mut ledgers = self.ledgers.lock().unwrap_or_else(PoisonError::into_inner);
        ledgers.sweep(now);
        for (i, c) in charges.iter().enumerate() {
            let held = ledgers.held(&c.ledger);
            if held.saturating_add(c.amount) > c.cap {
                return Ok(Reservation::OverBudget {
                    charge: i,
                    spent: held,
                });
            }
        }
        let answer = self.book(key, limits, cost, max_wait, now);
        if matches!(answer, Reservation::Granted { .. }) {
            for c in charges {
                ledgers.book(&c.ledger, c.amount, now + c.keep);
            }
        }
        Ok(answer)
    }

    async fn settle(&self, ledgers: &[(Arc<str>, i64)], _now: Instant) -> Result<()> {
        let mut book = self.ledgers.lock().unwrap_or_else(PoisonError::into_inner);
        for (name, back) in ledgers {
            book.settle(name, *back);
        }
        Ok(())
    }

    fn keeps_budgets(&self) -> Result<()> {
        Ok(())
    }

    async fn refund(&self, key: &LimitKey, requests: u64, tokens: i64, now: Instant) -> Result<()> {
        // An unknown key has no bucket to give back to.
        let Some(state) = self.existing(key) else {
            return Ok(());
        };
        state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .refund(requests, tokens, now);
        Ok(())
    }

    async fn raise(&self, key: &LimitKey, t: Tightening, now: Instant) -> Result<()> {
        self.with(key, None, now, |s| {
            if let Some(report) = &t.report {
                s.apply(report, t.booking, now);
            }
            if t.drain.any() {
                s.throttled(t.booking, now);
                s.drain(t.drain, now);
            }
            if let Some(until) = t.gate_until {
                s.raise_gate(until);
            }
            s.settle(t.booking, t.drain.any());
            if t.drain.any() {
                tracing::debug!(
                    key = %key,
                    drain = ?t.drain,
                    gate_ms = s.gate(now).map(|g| (g - now).as_millis() as u64),
                    requests = ?s.binding(now)[0],
                    "a refusal drained the key"
                );
            }
            if t.tokens_back != 0 {
                s.refund(0, t.tokens_back, now);
            }
        });
        Ok(())
    }

    /// A key with nothing configured that no response has described is unknown, and unknown
    /// admits freely.
    fn admits_freely(&self, key: &LimitKey, limits: &Limits) -> bool {
        *limits == Limits::none() && self.existing(key).is_none()
    }

    async fn peek(&self, key: &LimitKey, cost: Demand, now: Instant) -> Result<LimitSnapshot> {
        // A key never booked is not created by a look at it: its configured limits are only
        // known to `reserve`, which must be the one to create it.
        let Some(state) = self.existing(key) else {
            return Ok(LimitSnapshot {
                wait: Some(Duration::ZERO),
                ..LimitSnapshot::default()
            });
        };
        let mut guard = state.lock().unwrap_or_else(PoisonError::into_inner);
        let s = &mut *guard;
        let [requests, tokens] = s.binding(now);
        Ok(LimitSnapshot {
            wait: s.wait(cost, now).ok(),
            requests,
            tokens,
            learned_rate: s.paced_rate(),
            gate_until: s.gate(now),
            token_room: s.token_room(now),
        })
    }
}

impl MemoryStore {
    /// A reservation's booking in the buckets of `key`.
    fn book(
        &self,
        key: &LimitKey,
        limits: &Limits,
        cost: Demand,
        max_wait: Duration,
        now: Instant,
    ) -> Reservation {
        if self.admits_freely(key, limits) {
            // Unknown: nothing would be booked, so nothing is created.
            return Reservation::Granted {
                wait: Duration::ZERO,
                token_room: None,
                booking: 0,
            };
        }
        self.with(key, Some(limits), now, |s| match s.wait(cost, now) {
            Err(too_large) => too_large,
            Ok(wait) if wait > max_wait => Reservation::NotUntil { wait },
            Ok(wait) => {
                let booking = s.book(cost, now);
                if wait.is_zero() {
                    // Sent at once, never asked again: the probe, if one is due.
                    s.take_probe(booking, now);
                }
                Reservation::Granted {
                    wait,
                    token_room: s.token_room(now),
                    booking,
                }
            }
        })
    }
}

impl MemoryStore {
    /// Lowers the configured buckets of `key` (made with `limits` if new) to `levels`, where
    /// named and lower: a shared store's local share following its part of what the shared
    /// store holds as well as its own use, so that an outage starts the share from the lower
    /// of the two.
    #[doc(hidden)]
    pub fn follow(&self, key: &LimitKey, limits: &Limits, levels: &ConfiguredLevels, now: Instant) {
        if *limits == Limits::none() {
            return;
        }
        self.with(key, Some(limits), now, |s| s.follow(levels, now));
    }
}

#[cfg(test)]
mod ledger_tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;
    use crate::id::ProviderId;

    /// A ledger holds its window's spending until it is kept no longer, then it is swept and
    /// its name starts from nothing; a ledger still kept is not swept with it.
    #[tokio::test(start_paused = true)]
    async fn a_ledger_is_swept_once_it_is_kept_no_longer_and_not_before() {
        let store = MemoryStore::new();
        let key = LimitKey::new(ProviderId::new("p"), "m");
        let t0 = Instant::now();
        let ask = |c: &Charge, at: Instant| {
            let c = c.clone();
            let (store, key) = (&store, &key);
            async move {
                store
                    .reserve_charged(
                        key,
                        &Limits::none(),
                        Demand::one_request(),
                        &[c],
                        Duration::ZERO,
                        at,
                    )
                    .await
                    .unwrap()
            }
        };
        let short = Charge::new("environment/e/day/1", 10, 10, Duration::from_secs(60));
        let long = Charge::new("environment/e/month/1", 10, 10, Duration::from_secs(600));
        assert!(matches!(ask(&short, t0).await, Reservation::Granted { .. }));
        assert!(matches!(ask(&long, t0).await, Reservation::Granted { .. }));
        // (instant, charge) → granted
        let table = [
            (t0 + Duration::from_secs(59), &short, false),
            (t0 + Duration::from_secs(61), &short, true), // swept: a new start
            (t0 + Duration::from_secs(61), &long, false), // still kept
            (t0 + Duration::from_secs(601), &long, true),
        ];
        for (at, c, granted) in table {
            let r = ask(c, at).await;
            assert_eq!(
                matches!(r, Reservation::Granted { .. }),
                granted,
                "{} at +{:?}: {r:?}",
                c.ledger,
                at - t0
            );
        }
        // The short one re-booked at +61 s was kept until +121 s: swept with the long one at
        // +601 s, before the long one's new booking.
        let kept = store.ledgers.lock().unwrap().names();
        assert_eq!(kept, std::slice::from_ref(&long.ledger));
    }
}
