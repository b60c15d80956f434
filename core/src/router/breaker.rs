//! A circuit breaker per provider: pure transitions over an injected `now`.
//!
//! ```text
//!            429 / quota / threshold reached
//!   Closed ─────────────────────────────────► Open { until }
//!     ▲                                          │ now ≥ until
//!     │ probe succeeds                           ▼
//!     └──────────────────────────────────── HalfOpen ── probe fails ──► Open { later }
//! ```
//!
//! * A 429 opens it until the provider's stated reset (or a jittered fallback chosen by the
//!   router); quota exhaustion until the quota's reset or the quota cooldown.
//! * `failure_threshold` consecutive transient failures open it for a cooldown that doubles
//!   with each consecutive trip, up to a cap. A threshold of 0 disables this trip (throttling
//!   and quota still open the breaker).
//! * A re-trip extends `until`, never shortens it.
//! * At `until` the breaker lets exactly one probe through; its success closes the breaker,
//!   its failure reopens it.

use std::time::Duration;

use tokio::time::Instant;

/// The breaker's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BreakerState {
    /// Requests flow; `failures` consecutive transient failures so far.
    Closed {
        /// Consecutive transient failures.
        failures: u32,
    },
    /// No request is sent before `until`.
    Open {
        /// When a probe may go.
        until: Instant,
    },
    /// One probe may go (or is in flight).
    HalfOpen {
        /// A probe has been handed out and has not reported back.
        probe_in_flight: bool,
    },
    /// The provider rejected the key (401, 403): nothing is sent with it again in this
    /// client's life — the configuration must change.
    Rejected,
}

/// What the breaker allows now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Allow {
    /// Send normally.
    Yes,
    /// Send as the single half-open probe.
    Probe,
    /// Do not send before this instant.
    No(Instant),
    /// A probe is in flight; wait for its verdict.
    ProbeBusy,
    /// Never: the key was rejected.
    Rejected,
}

/// Breaker settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BreakerSettings {
    /// Consecutive transient failures that open the breaker (0: never).
    pub(crate) failure_threshold: u32,
    /// First cooldown after the threshold trip.
    pub(crate) cooldown: Duration,
    /// Longest cooldown.
    pub(crate) cooldown_max: Duration,
}

/// A change to a breaker, as the router decides it (see `decide.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BreakerEvent {
    /// The provider answered — a success, or a terminal error it gave (it is up, whatever it
    /// thought of the request). `probe`: this request was the half-open probe.
    Answered {
        /// The request was the probe.
        probe: bool,
    },
    /// A claimed probe got no answer (never sent, or failed before the provider answered):
    /// another request may probe.
    ReleaseProbe,
    /// Throttled or out of quota: open until this instant (or later, if it already is).
    OpenUntil(Instant),
    /// A transient failure: counts toward the threshold; a failed probe re-trips.
    Transient,
    /// A transient failure that stated how long to wait (a 503 with `Retry-After`): as
    /// [`Transient`](Self::Transient), and open until then at least.
    TransientUntil(Instant),
    /// The provider rejected the key.
    Reject,
}

/// One provider's breaker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Breaker {
    state: BreakerState,
    settings: BreakerSettings,
    /// Consecutive threshold trips without a success (grows the cooldown).
    trips: u32,
    /// The latest `until` ever set, so a re-trip never shortens it.
    open_until: Option<Instant>,
}

impl Breaker {
    /// A closed breaker.
    pub(crate) fn new(settings: BreakerSettings) -> Self {
        Breaker {
            state: BreakerState::Closed { failures: 0 },
            settings,
            trips: 0,
            open_until: None,
        }
    }

    /// Closed with no failure counted: the state every request of a healthy provider finds,
    /// and which nothing but a failure changes (`acquire` answers `Yes` and `on_success` of a
    /// non-probe leaves it as it is). Independent of time.
    pub(crate) fn is_calm(&self) -> bool {
        self.state == BreakerState::Closed { failures: 0 }
    }

    /// The state at `now` (an expired Open reads as HalfOpen).
    pub(crate) fn state(&mut self, now: Instant) -> BreakerState {
        self.tick(now);
        self.state
    }

    fn tick(&mut self, now: Instant) {
        if let BreakerState::Open { until } = self.state
            && now >= until
        {
            self.state = BreakerState::HalfOpen {
                probe_in_flight: false,
            };
        }
    }

    /// Whether a request may be sent at `now`, without claiming anything.
    pub(crate) fn check(&mut self, now: Instant) -> Allow {
        self.tick(now);
        match self.state {
            BreakerState::Closed { .. } => Allow::Yes,
            BreakerState::Open { until } => Allow::No(until),
            BreakerState::HalfOpen {
                probe_in_flight: false,
            } => Allow::Probe,
            BreakerState::HalfOpen {
                probe_in_flight: true,
            } => Allow::ProbeBusy,
            BreakerState::Rejected => Allow::Rejected,
        }
    }

    /// Claims the right to send at `now`: `Yes`, or the one `Probe` (after which others see
    /// `ProbeBusy` until it reports).
    pub(crate) fn acquire(&mut self, now: Instant) -> Allow {
        let allow = self.check(now);
        if allow == Allow::Probe {
            self.state = BreakerState::HalfOpen {
                probe_in_flight: true,
            };
        }
        allow
    }

    /// A claimed probe was not sent after all (cancelled, or admission refused): let another
    /// request probe.
    pub(crate) fn release_probe(&mut self) {
        if let BreakerState::HalfOpen {
            probe_in_flight: true,
        } = self.state
        {
            self.state = BreakerState::HalfOpen {
                probe_in_flight: false,
            };
        }
    }

    /// A request succeeded. The half-open probe's success closes the breaker; a success while
    /// closed resets the failure count. A success while open — an answer to a request sent
    /// before the breaker opened — changes nothing: the provider's stated reset (or the
    /// cooldown) still stands. `probe` says whether this request was the probe.
    pub(crate) fn on_success(&mut self, probe: bool) {
        match self.state {
            BreakerState::Closed { .. } => self.state = BreakerState::Closed { failures: 0 },
            BreakerState::HalfOpen { .. } if probe => {
                self.state = BreakerState::Closed { failures: 0 };
                self.trips = 0;
            }
            BreakerState::HalfOpen { .. } | BreakerState::Open { .. } | BreakerState::Rejected => {}
        }
    }

    /// The provider throttled us or exhausted a quota: open until `until` (or later, if it
    /// already is). Returns true when this opened a closed breaker.
    pub(crate) fn open_until(&mut self, until: Instant, now: Instant) -> bool {
        self.tick(now);
        if self.state == BreakerState::Rejected {
            return false;
        }
        let was_closed = matches!(self.state, BreakerState::Closed { .. });
        let until = self.open_until.map_or(until, |u| u.max(until));
        self.open_until = Some(until);
        if until > now {
            self.state = BreakerState::Open { until };
        } else if matches!(self.state, BreakerState::HalfOpen { .. }) {
            self.state = BreakerState::HalfOpen {
                probe_in_flight: false,
            };
        }
        was_closed && until > now
    }

    /// A transient failure (5xx, 529, timeout, connection). Returns true when it opened the
    /// breaker.
    pub(crate) fn on_transient(&mut self, now: Instant) -> bool {
        self.tick(now);
        match self.state {
            BreakerState::Closed { failures } => {
                let failures = failures.saturating_add(1);
                if self.settings.failure_threshold > 0
                    && failures >= self.settings.failure_threshold
                {
                    self.trip(now);
                    true
                } else {
                    self.state = BreakerState::Closed { failures };
                    false
                }
            }
            // The probe failed: reopen with a longer cooldown.
            BreakerState::HalfOpen { .. } => {
                self.trip(now);
                false
            }
            // Responses from requests sent before it opened: nothing new.
            BreakerState::Open { .. } | BreakerState::Rejected => false,
        }
    }

    /// Applies `event`; returns true when it opened a closed breaker.
    pub(crate) fn apply(&mut self, event: BreakerEvent, now: Instant) -> bool {
        match event {
            BreakerEvent::Answered { probe } => {
                self.on_success(probe);
                false
            }
            BreakerEvent::ReleaseProbe => {
                self.release_probe();
                false
            }
            BreakerEvent::OpenUntil(until) => self.open_until(until, now),
            BreakerEvent::Transient => self.on_transient(now),
            BreakerEvent::TransientUntil(until) => {
                let tripped = self.on_transient(now);
                self.open_until(until, now) || tripped
            }
            BreakerEvent::Reject => {
                let was_closed = matches!(self.state, BreakerState::Closed { .. });
                self.state = BreakerState::Rejected;
                was_closed
            }
        }
    }

    fn trip(&mut self, now: Instant) {
        let factor = 2u32.saturating_pow(self.trips.min(30));
        let cooldown = self
            .settings
            .cooldown
            .saturating_mul(factor)
            .min(self.settings.cooldown_max);
        self.trips = self.trips.saturating_add(1);
        self.open_until(now + cooldown, now);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Settings with `threshold`, a 5 s cooldown and a 60 s cap (the breaker tests' own).
    pub(crate) fn settings(threshold: u32) -> BreakerSettings {
        BreakerSettings {
            failure_threshold: threshold,
            cooldown: Duration::from_secs(5),
            cooldown_max: Duration::from_secs(60),
        }
    }

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn opens_after_threshold_consecutive_failures() {
        let t0 = Instant::now();
        let mut b = Breaker::new(settings(3));
        assert!(!b.on_transient(t0));
        assert!(!b.on_transient(t0));
        assert!(b.on_transient(t0));
        assert_eq!(b.check(t0), Allow::No(t0 + 5 * S));
    }

    #[test]
    fn a_success_resets_the_count() {
        let t0 = Instant::now();
        let mut b = Breaker::new(settings(2));
        b.on_transient(t0);
        b.on_success(false);
        assert!(!b.on_transient(t0));
        assert_eq!(b.check(t0), Allow::Yes);
    }

    #[test]
    fn half_open_lets_exactly_one_probe_through() {
        let t0 = Instant::now();
        let mut b = Breaker::new(settings(1));
        b.on_transient(t0);
        let t1 = t0 + 5 * S;
        assert_eq!(b.acquire(t1), Allow::Probe);
        assert_eq!(b.acquire(t1), Allow::ProbeBusy);
        // An answer to a request sent before the breaker opened does not close it.
        b.on_success(false);
        assert_eq!(b.acquire(t1), Allow::ProbeBusy);
        b.on_success(true);
        assert_eq!(b.acquire(t1), Allow::Yes);
    }

    #[test]
    fn a_success_from_before_the_trip_does_not_reopen_traffic() {
        let t0 = Instant::now();
        let mut b = Breaker::new(settings(3));
        b.open_until(t0 + 30 * S, t0);
        b.on_success(false);
        assert_eq!(b.check(t0 + S), Allow::No(t0 + 30 * S));
    }

    #[test]
    fn a_failed_probe_reopens_with_a_longer_cooldown_up_to_the_cap() {
        let t0 = Instant::now();
        let mut b = Breaker::new(settings(1));
        b.on_transient(t0); // 5 s
        let mut now = t0 + 5 * S;
        for expected in [10, 20, 40, 60, 60] {
            assert_eq!(b.acquire(now), Allow::Probe);
            b.on_transient(now);
            assert_eq!(b.check(now), Allow::No(now + expected * S));
            now += expected * S;
        }
    }

    #[test]
    fn a_retrip_extends_but_never_shortens() {
        let t0 = Instant::now();
        let mut b = Breaker::new(settings(3));
        assert!(b.open_until(t0 + 20 * S, t0));
        assert!(!b.open_until(t0 + 5 * S, t0));
        assert_eq!(b.check(t0 + 6 * S), Allow::No(t0 + 20 * S));
        b.open_until(t0 + 30 * S, t0);
        assert_eq!(b.check(t0), Allow::No(t0 + 30 * S));
    }

    #[test]
    fn threshold_zero_never_trips_on_transient_failures() {
        let t0 = Instant::now();
        let mut b = Breaker::new(settings(0));
        for _ in 0..100 {
            assert!(!b.on_transient(t0));
        }
        assert_eq!(b.check(t0), Allow::Yes);
        // Throttling still opens it.
        assert!(b.open_until(t0 + S, t0));
    }

    #[test]
    fn a_rejected_key_never_reopens() {
        let t0 = Instant::now();
        let mut b = Breaker::new(settings(3));
        assert!(b.apply(BreakerEvent::Reject, t0));
        let much_later = t0 + Duration::from_secs(86_400 * 365);
        assert_eq!(b.acquire(much_later), Allow::Rejected);
        // Nothing moves it: an answer, an opening, a failure.
        b.on_success(true);
        b.open_until(t0 + S, t0);
        b.on_transient(t0);
        assert_eq!(b.state(much_later), BreakerState::Rejected);
    }

    #[test]
    fn a_stated_delay_on_a_transient_failure_keeps_the_breaker_open_that_long() {
        let t0 = Instant::now();
        let mut b = Breaker::new(settings(3));
        assert!(b.apply(BreakerEvent::TransientUntil(t0 + 20 * S), t0));
        assert_eq!(b.check(t0 + 19 * S), Allow::No(t0 + 20 * S));
        assert_eq!(b.check(t0 + 20 * S), Allow::Probe);
    }

    #[test]
    fn a_released_probe_can_be_claimed_again() {
        let t0 = Instant::now();
        let mut b = Breaker::new(settings(1));
        b.on_transient(t0);
        let t1 = t0 + 5 * S;
        assert_eq!(b.acquire(t1), Allow::Probe);
        b.release_probe();
        assert_eq!(b.acquire(t1), Allow::Probe);
    }
}
