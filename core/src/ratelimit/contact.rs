//! First contact: a key whose limits nobody configured and this process has not yet heard
//! stated gets one request, then more as answers come back clean, before its full
//! concurrency — a slow start, as TCP's — so the first burst does not overshoot a limit the
//! first answer would have stated.
//!
//! * **One** request in flight at first ([`FIRST_WINDOW`]).
//! * An answer that **states a limit** ends first contact: the stated buckets govern from
//!   then on (most providers: one round trip, then full speed within what they state).
//! * A **429** ends it too: the store drains and, where nothing is stated, paces from it.
//! * An answer that states **nothing** (a silent provider: Bedrock, Vertex, Gemini, a proxy)
//!   widens the window slowly: after `n` clean answers it is `1 + ⌊√n⌋` ([`window_after`]),
//!   half a request per round trip, until it reaches [`OPEN_AT`]: then nothing is held. Such a
//!   provider will never say where its limit is; the first sign is a 429, and every request
//!   in flight then is refused with it. Against a 60-request bucket and a batch's 16
//!   workers, doubling (TCP's slow start) had all 16 in flight when the bucket ran out; one
//!   more per round trip (congestion avoidance) about 11; half of that, 8 (`B1_SHAPES=
//!   bedrock`, BENCHMARKS.md). The price: 16 wide after 225 answers, about 30 round trips,
//!   where doubling took 4 — paid once per key and process, against a provider that says
//!   nothing.
//! * Any other failure (a 5xx, a timeout) gives its place back and widens nothing.
//!
//! Held requests wait for an answer, through the injected clock, as long as the router lets
//! them wait for a provider (`spill_after` in its first pass): a primary whose first answer
//! comes back within that keeps them; one that does not lets them spill over, as a busy one
//! would. A held request that a freed place wakes takes no place at once: it is told it
//! waited (`Entered::Waited`), and the router looks at the provider's breaker again before
//! it enters anew — what it had seen was from before the wait, and the provider may have been
//! closed meanwhile. The state is this process's own: with a shared store, each process's
//! first burst is one request.

use std::collections::HashMap;
use std::fmt;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;
use tokio::time::Instant;

use super::store::LimitKey;
use super::{LimitReport, Limits};
use crate::clock::Clock;

/// Requests in flight to a key before its first answer.
pub(crate) const FIRST_WINDOW: u32 = 1;
/// The window at which a key that states nothing is no longer held: full concurrency.
pub(crate) const OPEN_AT: u32 = 32;

/// The window after `clean` answers that stated nothing: `1 + ⌊√clean⌋`, so that the next
/// step (one wider) takes two windows' worth of answers — half a request per round trip.
pub(crate) fn window_after(clean: u32) -> u32 {
    FIRST_WINDOW + clean.isqrt()
}

/// What an answer to a first-contact request said about the key's limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Heard {
    /// The answer stated a limit: the store's buckets know the key now.
    Stated,
    /// Answered, nothing stated.
    Clean,
    /// Refused for a limit (a 429): the store drains and paces from it.
    Throttled,
    /// Failed otherwise (a 5xx, a timeout, a refused connection): it says nothing of limits.
    Failed,
}

impl Heard {
    /// What an answer with `report` says (`throttled`: it was a 429).
    pub(crate) fn from_answer(report: Option<&LimitReport>, throttled: bool, ok: bool) -> Heard {
        if report.is_some_and(|r| r.windows().any(|w| w.limit.is_some())) {
            Heard::Stated
        } else if throttled {
            Heard::Throttled
        } else if ok {
            Heard::Clean
        } else {
            Heard::Failed
        }
    }
}

/// The first-contact state of one key: the pure decisions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Contact {
    /// Limits unknown: at most `window` requests in flight; `in_flight` now; `clean`
    /// answers heard that stated nothing.
    Opening {
        window: u32,
        in_flight: u32,
        clean: u32,
    },
    /// Over: the limits are known, or the provider states nothing and the window is open.
    Over,
}

impl Contact {
    pub(crate) fn new() -> Self {
        Contact::Opening {
            window: FIRST_WINDOW,
            in_flight: 0,
            clean: 0,
        }
    }

    /// Whether one more request may go now (`true` also once contact is over); counts it.
    pub(crate) fn admit(&mut self) -> bool {
        match self {
            Contact::Opening {
                window, in_flight, ..
            } if *in_flight < *window => {
                *in_flight += 1;
                true
            }
            Contact::Opening { .. } => false,
            Contact::Over => true,
        }
    }

    /// An admitted request's answer was heard (its place is given back by
    /// [`leave`](Self::leave)).
    pub(crate) fn heard(&mut self, heard: Heard) {
        let Contact::Opening { window, clean, .. } = self else {
            return;
        };
        match heard {
            Heard::Stated | Heard::Throttled => *self = Contact::Over,
            Heard::Clean if window_after(*clean + 1) >= OPEN_AT => *self = Contact::Over,
            Heard::Clean => {
                *clean += 1;
                *window = window_after(*clean);
            }
            Heard::Failed => {}
        }
    }

    /// An admitted request is no longer in flight (answered, failed, or never sent).
    pub(crate) fn leave(&mut self) {
        if let Contact::Opening { in_flight, .. } = self {
            *in_flight = in_flight.saturating_sub(1);
        }
    }

    fn is_over(&self) -> bool {
        *self == Contact::Over
    }

    /// Whether one more request may go now (without counting it).
    fn has_room(&self) -> bool {
        match self {
            Contact::Opening {
                window, in_flight, ..
            } => in_flight < window,
            Contact::Over => true,
        }
    }
}

/// One key's contact and the requests waiting on it.
#[derive(Debug)]
struct Shared {
    contact: Mutex<Contact>,
    changed: Notify,
}

impl Shared {
    fn with<T>(&self, f: impl FnOnce(&mut Contact) -> T) -> T {
        f(&mut self.contact.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The first contacts of this process's keys.
#[derive(Debug, Default)]
pub(crate) struct Contacts {
    keys: Mutex<HashMap<LimitKey, Arc<Shared>>>,
}

/// What [`Contacts::enter`] found.
#[derive(Debug)]
pub(crate) enum Entered {
    /// Nothing to hold: limits configured, or contact over.
    Known,
    /// A place among the first requests, held until its answer.
    Place(ContactPlace),
    /// No place came free before the time given.
    Held,
    /// It waited, and a place came free (or contact ended): the caller looks again at
    /// whether the provider may still be sent to — its breaker may have opened while it
    /// waited — then enters again. No place is taken.
    Waited,
}

impl Contacts {
    /// A place for one request to `key`: at once where nothing is held, else when an answer
    /// frees one, waiting (without being a cause for time to move) until `until` at most.
    pub(crate) async fn enter(
        &self,
        key: &LimitKey,
        limits: &Limits,
        clock: &dyn Clock,
        until: Instant,
    ) -> Entered {
        if *limits != Limits::none() {
            return Entered::Known;
        }
        let shared = {
            let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
            match keys.get(key) {
                Some(s) => s.clone(),
                None => {
                    let s = Arc::new(Shared {
                        contact: Mutex::new(Contact::new()),
                        changed: Notify::new(),
                    });
                    keys.insert(key.clone(), s.clone());
                    s
                }
            }
        };
        let mut waited = false;
        loop {
            // Registered before the look, so that an answer between the two is not missed.
            let mut changed = pin!(shared.changed.notified());
            changed.as_mut().enable();
            if waited {
                if shared.with(|c| c.is_over() || c.has_room()) {
                    return Entered::Waited;
                }
            } else {
                let (admitted, over) = shared.with(|c| (c.admit(), c.is_over()));
                if over {
                    return Entered::Known;
                }
                if admitted {
                    return Entered::Place(ContactPlace {
                        shared: shared.clone(),
                        heard: AtomicBool::new(false),
                    });
                }
            }
            if clock.now() >= until {
                return Entered::Held;
            }
            tokio::select! {
                biased;
                () = changed => waited = true,
                () = clock.wait_for_time(until) => return Entered::Held,
            }
        }
    }
}

/// A first-contact request's place, given back when it is dropped (answered, failed, never
/// sent, or its caller gone).
pub(crate) struct ContactPlace {
    shared: Arc<Shared>,
    heard: AtomicBool,
}

impl fmt::Debug for ContactPlace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ContactPlace")
            .field("contact", &self.shared.with(|c| *c))
            .finish()
    }
}

impl ContactPlace {
    /// The answer to this place's request: widens the window or ends first contact. Told
    /// once; the place is given back on drop.
    pub(crate) fn heard(&self, heard: Heard) {
        if !self.heard.swap(true, Ordering::Relaxed) {
            self.shared.with(|c| c.heard(heard));
        }
    }
}

impl Drop for ContactPlace {
    fn drop(&mut self) {
        self.shared.with(Contact::leave);
        self.shared.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::TokioClock;
    use crate::id::ProviderId;

    /// The decisions, as a table: (answers heard in order, the state after them), each
    /// answer to a request admitted while the state allowed it.
    #[test]
    fn the_window_opens_by_half_a_request_per_round_trip_and_ends_at_a_statement_or_a_429() {
        use Heard::*;
        let opening = |window, clean| Contact::Opening {
            window,
            in_flight: 0,
            clean,
        };
        let table: &[(&[Heard], Contact)] = &[
            (&[], opening(1, 0)),
            (&[Clean], opening(2, 1)),
            (&[Clean, Clean, Clean], opening(2, 3)),
            (&[Clean; 4], opening(3, 4)),
            (&[Failed], opening(1, 0)),
            (&[Clean, Failed, Clean], opening(2, 2)),
            (&[Stated], Contact::Over),
            (&[Clean, Throttled], Contact::Over),
            // 8 wide after 49 answers, 16 after 225 (a batch's workers).
            (&[Clean; 49], opening(8, 49)),
            (&[Clean; 225], opening(16, 225)),
            (&[Clean; 960], opening(31, 960)),
            (&[Clean; 961], Contact::Over),
        ];
        for (answers, after) in table {
            let mut c = Contact::new();
            for h in *answers {
                assert!(c.admit(), "{answers:?}: a place for each answered request");
                c.heard(*h);
                c.leave();
            }
            assert_eq!(c, *after, "{answers:?}");
        }
    }

    #[test]
    fn the_window_bounds_what_is_in_flight() {
        let mut c = Contact::new();
        assert!(c.admit());
        assert!(!c.admit(), "one at first");
        c.heard(Heard::Clean);
        assert!(c.admit(), "a clean answer widens the window to two");
        c.leave();
        assert!(c.admit() && !c.admit(), "two in flight, no third");
        for _ in 0..3 {
            c.heard(Heard::Clean);
        }
        assert!(c.admit(), "four clean answers: three wide");
        assert!(!c.admit(), "three in flight, no fourth");
        c.heard(Heard::Stated);
        assert!(c.admit() && c.admit(), "over: nothing held");
    }

    fn key() -> LimitKey {
        LimitKey::new(ProviderId::new("p"), "m")
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_request_goes_when_the_first_answer_comes_back_or_gives_up_at_its_time() {
        let contacts = Arc::new(Contacts::default());
        let now = Instant::now();
        let far = now + Duration::from_secs(60);
        let Entered::Place(first) = contacts
            .enter(&key(), &Limits::none(), &TokioClock, far)
            .await
        else {
            panic!("the first request goes");
        };
        // A second gives up at its time: nothing was answered.
        let soon = now + Duration::from_secs(1);
        let held = contacts
            .enter(&key(), &Limits::none(), &TokioClock, soon)
            .await;
        assert!(matches!(held, Entered::Held), "{held:?}");
        assert_eq!(Instant::now(), soon);
        // A third waits; the first answer states a limit: it goes, and so does anyone after.
        let waiting = tokio::spawn({
            let contacts = contacts.clone();
            async move {
                let e = contacts
                    .enter(&key(), &Limits::none(), &TokioClock, far)
                    .await;
                (e, Instant::now())
            }
        });
        tokio::task::yield_now().await;
        first.heard(Heard::Stated);
        let answered = Instant::now();
        drop(first);
        let (e, at) = waiting.await.unwrap();
        // It waited: it is told to look again (the provider's breaker may have opened
        // meanwhile) at the answer, not at a poll; then it goes.
        assert!(matches!(e, Entered::Waited), "{e:?}");
        assert_eq!(at, answered, "it went at the answer, not at a poll");
        let e = contacts
            .enter(&key(), &Limits::none(), &TokioClock, far)
            .await;
        assert!(matches!(e, Entered::Known), "{e:?}");
        // Configured limits are never held.
        let configured = Limits::none().with_rpm(5);
        let k = LimitKey::new(ProviderId::new("q"), "m");
        for _ in 0..3 {
            let e = contacts.enter(&k, &configured, &TokioClock, now).await;
            assert!(matches!(e, Entered::Known));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_place_dropped_unanswered_is_given_back() {
        let contacts = Contacts::default();
        let far = Instant::now() + Duration::from_secs(60);
        let (k, none) = (key(), Limits::none());
        let first = contacts.enter(&k, &none, &TokioClock, far).await;
        assert!(matches!(first, Entered::Place(_)));
        drop(first);
        let again = contacts.enter(&k, &none, &TokioClock, far).await;
        assert!(matches!(again, Entered::Place(_)), "{again:?}");
    }
}
