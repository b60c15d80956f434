//! Where breaker state lives: [`BreakerStore`] hands out one [`BreakerCell`] per (provider,
//! account); [`MemoryBreakers`] keeps them in this process, the only store. Processes that
//! share a quota share its closings through the limiter store instead: a 429's or an
//! opening's gate is [`raise`](crate::ratelimit::LimiterStore::raise)d on the shared keys,
//! and one half-open probe goes for all of them.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::time::Instant;

use super::breaker::{Allow, Breaker, BreakerEvent, BreakerSettings, BreakerState};
use crate::id::ProviderId;

/// A breaker's answer to "may I send?", with the version of the state it was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub(crate) allow: Allow,
    /// Increases with every change of the breaker: a verdict read at version `v` saw every
    /// change up to `v` and none after (the trace orders sends and openings by it).
    pub(crate) version: u64,
}

impl Verdict {
    /// This send is the half-open probe.
    pub(crate) fn is_probe(self) -> bool {
        self.allow == Allow::Probe
    }
}

/// What applying an event did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Transition {
    /// A closed breaker opened.
    pub(crate) opened: bool,
    /// Open until then, after the event.
    pub(crate) open_until: Option<Instant>,
    /// The version after the event.
    pub(crate) version: u64,
}

/// The breaker of one (provider, account).
pub(crate) trait BreakerCell: Send + Sync + fmt::Debug {
    /// Claims the right to send at `now`: `Yes`, the one `Probe`, or not now.
    fn acquire(&self, now: Instant) -> Verdict;

    /// After waiting for admission, whether the send may still go: a held probe stays the
    /// probe unless the breaker re-tripped meanwhile; otherwise as [`acquire`](Self::acquire).
    /// `None`: not now.
    fn reclaim(&self, held_probe: bool, now: Instant) -> Option<Verdict>;

    /// Applies what happened.
    fn apply(&self, event: BreakerEvent, now: Instant) -> Transition;

    /// Whether a request could be sent at `now`, claiming nothing (a look for planning, such
    /// as how much of a deadline to leave to the next provider).
    fn check(&self, now: Instant) -> Allow;
}

/// Hands out breakers.
pub(crate) trait BreakerStore: Send + Sync + fmt::Debug {
    /// The breaker of `provider` for `account` (`None`: the configured key), made on first
    /// use. Called once per provider when the client is built, and once per request and
    /// provider for a customer's account.
    fn breaker(&self, provider: &ProviderId, account: Option<&Arc<str>>) -> Arc<dyn BreakerCell>;
}

fn _obj_safe(_: &dyn BreakerStore, _: &dyn BreakerCell) {}

/// The scope of one breaker: a provider, and the account (`None`: the configured key).
type Scope = (ProviderId, Option<Arc<str>>);

/// Breakers in this process's memory.
#[derive(Debug)]
pub(crate) struct MemoryBreakers {
    settings: BreakerSettings,
    cells: Mutex<HashMap<Scope, Arc<SharedBreaker>>>,
}

impl MemoryBreakers {
    pub(crate) fn new(settings: BreakerSettings) -> Self {
        MemoryBreakers {
            settings,
            cells: Mutex::new(HashMap::new()),
        }
    }
}

impl BreakerStore for MemoryBreakers {
    fn breaker(&self, provider: &ProviderId, account: Option<&Arc<str>>) -> Arc<dyn BreakerCell> {
        let mut cells = self.cells.lock().unwrap_or_else(PoisonError::into_inner);
        cells
            .entry((provider.clone(), account.cloned()))
            .or_insert_with(|| Arc::new(SharedBreaker::new(Breaker::new(self.settings))))
            .clone()
    }
}

/// A [`Breaker`] under its lock, with its version and whether it is calm
/// ([`Breaker::is_calm`]: closed, no failure counted) packed in one word readable without
/// the lock. Calm is the state every request of a healthy provider finds and leaves as it
/// is, so those requests read the word and take no lock; anything else takes the lock, and
/// every change rewrites the word under it.
#[derive(Debug)]
pub(crate) struct SharedBreaker {
    /// `version << 1 | calm`.
    word: AtomicU64,
    inner: Mutex<Breaker>,
}

impl SharedBreaker {
    pub(crate) fn new(breaker: Breaker) -> Self {
        SharedBreaker {
            word: AtomicU64::new(u64::from(breaker.is_calm())),
            inner: Mutex::new(breaker),
        }
    }

    /// The calm bit and the version, as of the last change. A change made after this read
    /// is ordered after the request that read it, exactly as if that request had locked first.
    fn read(&self) -> (bool, u64) {
        let w = self.word.load(Ordering::Acquire);
        (w & 1 == 1, w >> 1)
    }

    /// Applies `f` under the lock; a change of the breaker gets the next version.
    fn update<T>(&self, f: impl FnOnce(&mut Breaker) -> T) -> (T, u64) {
        let mut b = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let before = b.clone();
        let out = f(&mut b);
        let mut version = self.word.load(Ordering::Relaxed) >> 1;
        if *b != before {
            version += 1;
            self.word
                .store(version << 1 | u64::from(b.is_calm()), Ordering::Release);
        }
        (out, version)
    }
}

impl BreakerCell for SharedBreaker {
    fn acquire(&self, now: Instant) -> Verdict {
        match self.read() {
            (true, version) => Verdict {
                allow: Allow::Yes,
                version,
            },
            _ => {
                let (allow, version) = self.update(|b| b.acquire(now));
                Verdict { allow, version }
            }
        }
    }

    fn reclaim(&self, held_probe: bool, now: Instant) -> Option<Verdict> {
        if !held_probe {
            let v = self.acquire(now);
            return matches!(v.allow, Allow::Yes | Allow::Probe).then_some(v);
        }
        let (allow, version) = self.update(|b| match b.state(now) {
            // Still ours to send.
            BreakerState::HalfOpen {
                probe_in_flight: true,
            } => Some(Allow::Probe),
            // Re-tripped while we waited (a late failure): not now.
            BreakerState::Open { .. } => None,
            BreakerState::Rejected => None,
            _ => Some(b.acquire(now)).filter(|a| matches!(a, Allow::Yes | Allow::Probe)),
        });
        allow.map(|allow| Verdict { allow, version })
    }

    fn check(&self, now: Instant) -> Allow {
        match self.read() {
            (true, _) => Allow::Yes,
            _ => self.update(|b| b.check(now)).0,
        }
    }

    fn apply(&self, event: BreakerEvent, now: Instant) -> Transition {
        // A non-probe's answer leaves a calm breaker as it is: no lock.
        if let (BreakerEvent::Answered { probe: false }, (true, version)) = (event, self.read()) {
            return Transition {
                opened: false,
                open_until: None,
                version,
            };
        }
        let ((opened, state), version) = self.update(|b| {
            let opened = b.apply(event, now);
            (opened, b.state(now))
        });
        let open_until = match state {
            BreakerState::Open { until } => Some(until),
            _ => None,
        };
        Transition {
            opened,
            open_until,
            version,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::router::breaker::tests::settings;

    fn calm(b: &SharedBreaker) -> bool {
        b.read().0
    }

    #[test]
    fn a_shared_breaker_is_calm_exactly_while_closed_with_no_failure() {
        let t0 = Instant::now();
        let b = SharedBreaker::new(Breaker::new(settings(2)));
        assert!(calm(&b));
        // One transient failure: still closed, but no longer calm (the count must be reset).
        assert!(!b.apply(BreakerEvent::Transient, t0).opened);
        assert!(!calm(&b));
        b.apply(BreakerEvent::Answered { probe: false }, t0);
        assert!(calm(&b));
        // Opened by a 429: not calm while open, nor while half-open.
        let until = t0 + Duration::from_secs(30);
        assert!(b.apply(BreakerEvent::OpenUntil(until), t0).opened);
        assert!(!calm(&b));
        let later = t0 + Duration::from_secs(31);
        assert_eq!(b.acquire(later).allow, Allow::Probe);
        assert!(!calm(&b));
        // The probe's success closes it: calm again.
        b.apply(BreakerEvent::Answered { probe: true }, later);
        assert!(calm(&b));
        assert_eq!(b.acquire(later).allow, Allow::Yes);
    }

    #[test]
    fn a_shared_breaker_answers_as_its_breaker_does_calm_or_not() {
        let t0 = Instant::now();
        let b = SharedBreaker::new(Breaker::new(settings(1)));
        assert_eq!(b.acquire(t0).allow, Allow::Yes);
        b.apply(BreakerEvent::Answered { probe: false }, t0);
        assert!(calm(&b));
        // Tripped (threshold 1): the lock-free answer must not be used.
        assert!(b.apply(BreakerEvent::Transient, t0).opened);
        assert!(matches!(b.acquire(t0).allow, Allow::No(_)));
        // A late success of a request sent before the trip changes nothing.
        b.apply(BreakerEvent::Answered { probe: false }, t0);
        assert!(matches!(b.acquire(t0).allow, Allow::No(_)));
        let later = t0 + Duration::from_secs(3600);
        assert_eq!(b.acquire(later).allow, Allow::Probe);
        assert_eq!(b.acquire(later).allow, Allow::ProbeBusy);
        b.apply(BreakerEvent::Answered { probe: true }, later);
        assert_eq!(b.acquire(later).allow, Allow::Yes);
        assert!(calm(&b));
    }

    #[test]
    fn every_change_and_only_a_change_gets_a_new_version() {
        let t0 = Instant::now();
        let b = SharedBreaker::new(Breaker::new(settings(3)));
        let v0 = b.acquire(t0).version;
        // Calm reads and answers change nothing.
        b.apply(BreakerEvent::Answered { probe: false }, t0);
        assert_eq!(b.acquire(t0).version, v0);
        let open = b.apply(BreakerEvent::OpenUntil(t0 + Duration::from_secs(9)), t0);
        assert_eq!(open.version, v0 + 1);
        assert_eq!(open.open_until, Some(t0 + Duration::from_secs(9)));
        // A refusal read under the lock changes nothing either.
        let refused = b.acquire(t0);
        assert!(matches!(refused.allow, Allow::No(_)));
        assert_eq!(refused.version, v0 + 1);
        // A shorter opening does not shorten it: no change, same version.
        let again = b.apply(BreakerEvent::OpenUntil(t0 + Duration::from_secs(2)), t0);
        assert_eq!((again.version, again.opened), (v0 + 1, false));
    }

    #[test]
    fn a_held_probe_is_kept_across_the_wait_unless_the_breaker_re_tripped() {
        let t0 = Instant::now();
        let b = SharedBreaker::new(Breaker::new(settings(1)));
        b.apply(BreakerEvent::Transient, t0);
        let t1 = t0 + Duration::from_secs(5);
        assert!(b.acquire(t1).is_probe());
        assert!(b.reclaim(true, t1).is_some_and(Verdict::is_probe));
        // Someone else's late 429 re-opens it while we wait: our probe may not go.
        b.apply(BreakerEvent::OpenUntil(t1 + Duration::from_secs(30)), t1);
        assert_eq!(b.reclaim(true, t1 + Duration::from_secs(1)), None);
        assert_eq!(b.reclaim(false, t1 + Duration::from_secs(1)), None);
    }

    #[test]
    fn the_memory_store_keeps_one_breaker_per_provider_and_account() {
        let store = MemoryBreakers::new(settings(1));
        let (p, q) = (ProviderId::new("p"), ProviderId::new("q"));
        let acme: Arc<str> = Arc::from("acme");
        let t0 = Instant::now();
        store.breaker(&p, None).apply(BreakerEvent::Transient, t0);
        assert!(matches!(
            store.breaker(&p, None).acquire(t0).allow,
            Allow::No(_)
        ));
        assert_eq!(store.breaker(&p, Some(&acme)).acquire(t0).allow, Allow::Yes);
        assert_eq!(store.breaker(&q, None).acquire(t0).allow, Allow::Yes);
    }
}
