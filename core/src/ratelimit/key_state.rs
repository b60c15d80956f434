//! The buckets of one key — configured ceilings and what the provider states — and the rules
//! that move them: pure arithmetic over an injected `now`, under the store's lock.
//!
//! * A configured limit (`providers.toml` or code) is its own bucket over its own window: a
//!   ceiling whatever the provider states (a lower stated limit binds, a higher one does not).
//! * Each dimension the provider states (requests, tokens, input and output tokens) is a
//!   [`Stated`] bucket: its window learned from the resets, its level the stated remaining
//!   less what this client has booked and not yet had answered — the requests the provider
//!   may not have counted yet. Bookings are kept in a short log once something is stated,
//!   each until its own answer arrives (or it is [`MAX_AGE`] old: an answer that stated
//!   nothing, a request never sent). A request booked before the answered one but sent
//!   after it (woken a little late) is then still counted; one the provider did count is
//!   counted twice until its own answer arrives — a short, safe underestimate.
//! * A 429 drains the buckets of the limit it is about ([`Drain`]); a gate is only ever moved
//!   later.
//! * A limit stated without a reset that is spent before anything showed how it refills
//!   ([`Stated::empty_and_unproven`]) lets one request go — the probe, whether it waited for
//!   a slot ([`KeyState::blocked`]) or was admitted at once ([`KeyState::take_probe`]) — and
//!   holds the others a refill slot at a time until its answer ([`KeyState::settle`]), or
//!   [`PROBE_GIVEN_UP`].
//! * A key about which nothing is configured or stated learns a pace from its 429s alone
//!   ([`Paced`]); the first stated limit ends it.

use std::collections::VecDeque;
use std::num::NonZeroU64;
use std::time::Duration;

use tokio::time::Instant;

use super::bucket::{Bucket, InsufficientCapacity};
use super::paced::Paced;
use super::stated::Stated;
use super::store::{BucketSnapshot, Demand, Dimension, Drain, Reservation};
use super::{LimitReport, Limits};

const MINUTE: Duration = Duration::from_secs(60);
const DAY: Duration = Duration::from_secs(86_400);
const HOUR: Duration = Duration::from_secs(3_600);

/// A window longer than this is day-scale: a 429 drains it only when it names a day limit.
const SHORT: Duration = Duration::from_secs(600);

/// The most bookings remembered as not yet answered: beyond it the oldest are forgotten.
const MAX_LOG: usize = 8_192;

/// A booking not answered within this is forgotten (its answer stated nothing, or it was
/// never sent).
const MAX_AGE: Duration = Duration::from_secs(120);

/// The stated dimensions' [`Dimension`]s, in [`LimitReport`] order.
const STATED: [Dimension; 4] = [
    Dimension::Requests,
    Dimension::Tokens,
    Dimension::InputTokens,
    Dimension::OutputTokens,
];

/// The stated dimensions, in [`LimitReport`] order.
const REQUESTS: usize = 0;
const TOKENS: usize = 1;
const INPUT: usize = 2;
const OUTPUT: usize = 3;

/// What `cost` spends of stated dimension `i`.
fn part(cost: &Demand, i: usize) -> u64 {
    match i {
        REQUESTS => cost.requests,
        TOKENS => cost.tokens(),
        INPUT => cost.input_tokens,
        OUTPUT => cost.output_tokens,
        _ => 0,
    }
}

/// Levels for a key's configured buckets, each named one a ceiling set by
/// [`MemoryStore::follow`](super::MemoryStore::follow): for a shared store's wing, whose local share follows its part of
/// the shared levels.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ConfiguredLevels {
    pub rpm: Option<f64>,
    pub tpm: Option<f64>,
    pub rpd: Option<f64>,
    pub tpd: Option<f64>,
    pub audio_seconds_per_hour: Option<f64>,
}

/// The buckets of one key.
#[derive(Debug, Default)]
pub(crate) struct KeyState {
    rpm: Option<Bucket>,
    tpm: Option<Bucket>,
    rpd: Option<Bucket>,
    tpd: Option<Bucket>,
    audio_hour: Option<Bucket>,
    stated: [Option<Stated>; 4],
    /// A pace learned from 429s, while nothing is configured or stated.
    paced: Option<Paced>,
    gate: Option<Instant>,
    /// Bookings not yet known to be answered: (number, cost, when booked).
    log: VecDeque<(u64, Demand, Instant)>,
    /// A limit stated without a reset is spent and how it refills is not known: one request
    /// at a time goes, to find out ([`Stated::empty_and_unproven`]).
    probe: Option<Probe>,
    next_booking: u64,
    allowance: Duration,
}

/// One request at a time to a key whose resetless limit is spent and unproven.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Probe {
    /// The booking sent to find out, and when (`None`: none yet).
    out: Option<(u64, Instant)>,
}

/// A probe whose answer never came (a timeout, a dropped request) is given up after this: the
/// next request probes instead.
const PROBE_GIVEN_UP: Duration = Duration::from_secs(30);

impl KeyState {
    /// The buckets of `limits`, full.
    pub(crate) fn from_limits(limits: &Limits, allowance: Duration, now: Instant) -> Self {
        let b = |v: Option<NonZeroU64>, w| {
            v.map(|n| Bucket::new(n.get(), w, now).with_allowance(allowance))
        };
        KeyState {
            rpm: b(limits.rpm, MINUTE),
            tpm: b(limits.tpm, MINUTE),
            rpd: b(limits.rpd, DAY),
            tpd: b(limits.tpd, DAY),
            audio_hour: b(limits.audio_seconds_per_hour, HOUR),
            allowance,
            ..KeyState::default()
        }
    }

    /// A key first seen in a report (no configured limits).
    pub(crate) fn unconfigured(allowance: Duration) -> Self {
        KeyState {
            allowance,
            ..KeyState::default()
        }
    }

    /// The configured buckets and the learned pace, with what `cost` spends of each.
    fn buckets(&mut self, cost: Demand) -> [(Option<&mut Bucket>, u64, Dimension); 6] {
        [
            (
                self.paced.as_mut().map(|p| &mut p.bucket),
                cost.requests,
                Dimension::Requests,
            ),
            (
                self.rpm.as_mut(),
                cost.requests,
                Dimension::RequestsPerMinute,
            ),
            (self.tpm.as_mut(), cost.tokens(), Dimension::TokensPerMinute),
            (self.rpd.as_mut(), cost.requests, Dimension::RequestsPerDay),
            (self.tpd.as_mut(), cost.tokens(), Dimension::TokensPerDay),
            (
                self.audio_hour.as_mut(),
                cost.audio_seconds,
                Dimension::AudioSecondsPerHour,
            ),
        ]
    }

    /// The wait for `cost` now, or the first limit it can never fit.
    pub(crate) fn wait(&mut self, cost: Demand, now: Instant) -> Result<Duration, Reservation> {
        let too_large = |dimension, e: InsufficientCapacity| Reservation::TooLarge {
            dimension,
            cost: e.cost,
            capacity: e.capacity,
        };
        let mut wait = self
            .gate
            .filter(|g| *g > now)
            .map_or(Duration::ZERO, |g| g - now);
        if let Some(d) = self.probe_out(now) {
            wait = wait.max(d);
        }
        for (bucket, n, dimension) in self.buckets(cost) {
            if let Some(b) = bucket {
                wait = wait.max(b.peek(n, now).map_err(|e| too_large(dimension, e))?);
            }
        }
        for (i, s) in self.stated.iter_mut().enumerate() {
            if let Some(s) = s {
                let w = s
                    .wait(part(&cost, i), now)
                    .map_err(|e| too_large(STATED[i], e))?;
                wait = wait.max(w);
            }
        }
        Ok(wait)
    }

    /// Books `cost` in every bucket (after [`wait`](Self::wait) said it fits); returns the
    /// booking's number.
    pub(crate) fn book(&mut self, cost: Demand, now: Instant) -> u64 {
        for (bucket, n, _) in self.buckets(cost) {
            if let Some(b) = bucket {
                b.charge(n, now);
            }
        }
        for (i, s) in self.stated.iter_mut().enumerate() {
            if let Some(s) = s {
                s.charge(part(&cost, i), now);
            }
        }
        let booking = self.next_booking;
        self.next_booking += 1;
        if let Some(p) = self.paced.as_mut() {
            p.booked(now);
        }
        if self.stated.iter().any(Option::is_some) {
            if self.log.len() >= MAX_LOG {
                self.log.pop_front();
            }
            self.log.push_back((booking, cost, now));
        }
        booking
    }

    /// Lowers each configured bucket named in `levels` to at most that level (a share of
    /// what a shared store holds; negative: booked ahead). Never raises one: a share follows
    /// its own use too, and keeps the lower of the two.
    pub(crate) fn follow(&mut self, levels: &ConfiguredLevels, now: Instant) {
        for (bucket, level) in [
            (self.rpm.as_mut(), levels.rpm),
            (self.tpm.as_mut(), levels.tpm),
            (self.rpd.as_mut(), levels.rpd),
            (self.tpd.as_mut(), levels.tpd),
            (self.audio_hour.as_mut(), levels.audio_seconds_per_hour),
        ] {
            if let (Some(b), Some(level)) = (bucket, level) {
                let own = b.level(now);
                b.set_level(level.min(own), now);
            }
        }
    }

    /// Gives back `requests` request slots and gives back (`tokens > 0`) or charges (`< 0`)
    /// tokens, in the configured buckets: the stated ones follow the provider's answers, which
    /// already count what was used (a refund there would count it twice).
    pub(crate) fn refund(&mut self, requests: u64, tokens: i64, now: Instant) {
        let give = |b: Option<&mut Bucket>, n: i64| {
            if let Some(b) = b {
                if n >= 0 {
                    b.refund(n.unsigned_abs(), now)
                } else {
                    b.charge(n.unsigned_abs(), now)
                }
            }
        };
        let requests = i64::try_from(requests).unwrap_or(i64::MAX);
        give(self.rpm.as_mut(), requests);
        give(self.rpd.as_mut(), requests);
        give(self.tpm.as_mut(), tokens);
        give(self.tpd.as_mut(), tokens);
    }

    /// Applies what a response stated, the answer to `booking`.
    pub(crate) fn apply(&mut self, report: &LimitReport, booking: Option<u64>, now: Instant) {
        // Bookings too old to be still in flight are forgotten before they are counted
        // (found by tests/it/limiter_props.rs: a stale booking lowered one more answer).
        while self
            .log
            .front()
            .is_some_and(|(_, _, at)| now.saturating_duration_since(*at) > MAX_AGE)
        {
            self.log.pop_front();
        }
        let windows = [
            &report.requests,
            &report.tokens,
            &report.input_tokens,
            &report.output_tokens,
        ];
        for (i, w) in windows.into_iter().enumerate() {
            let Some(w) = w else { continue };
            if self.stated[i].is_none() {
                let Some(limit) = w.limit.filter(|l| *l > 0) else {
                    // A window without a limit cannot be a bucket; "none left" still gates
                    // until its reset.
                    if w.remaining == Some(0)
                        && let Some(reset) = w.reset_at
                    {
                        self.raise_gate(reset);
                    }
                    continue;
                };
                self.stated[i] = Some(Stated::new(limit, w.per.duration(), self.allowance, now));
            }
            // The provider states limits: no pace of our own is needed any more.
            self.paced = None;
            let inflight = booking.map_or(0.0, |b| self.unanswered(b, i));
            if let Some(s) = self.stated[i].as_mut() {
                s.observe(w, booking, inflight, now);
            }
        }
        if let Some(b) = booking {
            self.log.retain(|(n, _, _)| *n != b);
        }
    }

    /// What is booked of stated dimension `i` and not yet answered, but for `booking`.
    fn unanswered(&self, booking: u64, i: usize) -> f64 {
        self.log
            .iter()
            .filter(|(n, _, _)| *n != booking)
            .map(|(_, c, _)| part(c, i) as f64)
            .sum()
    }

    /// Empties the buckets `d` names: short-window ones, and long ones too when `d.day`.
    pub(crate) fn drain(&mut self, d: Drain, now: Instant) {
        let drains = |window: Duration, named: bool| named && (d.day || window <= SHORT);
        for (b, named) in [
            (self.rpm.as_mut(), d.requests),
            (self.rpd.as_mut(), d.requests),
            (self.tpm.as_mut(), d.tokens),
            (self.tpd.as_mut(), d.tokens),
        ] {
            if let Some(b) = b
                && drains(b.window(), named)
            {
                b.drain(now);
            }
        }
        let named = [d.requests, d.tokens, d.input_tokens, d.output_tokens];
        let mut closed = None;
        for (s, named) in self.stated.iter_mut().zip(named) {
            if let Some(s) = s
                && drains(s.window(), named)
            {
                s.drain(now);
                closed = closed.max(s.closed_until(now));
            }
        }
        // A fixed window the refusal closed: nothing goes before its boundary, slots booked
        // ahead of the refusal (at a bucket's refill slots) included.
        if let Some(until) = closed {
            self.raise_gate(until);
        }
    }

    /// A 429 to `booking`: where nothing is configured or stated about requests, the learned
    /// pace starts, or is cut.
    pub(crate) fn throttled(&mut self, booking: Option<u64>, now: Instant) {
        let known =
            self.rpm.is_some() || self.rpd.is_some() || self.stated.iter().any(Option::is_some);
        if known {
            return;
        }
        match self.paced.as_mut() {
            None => self.paced = Some(Paced::start(self.next_booking, now)),
            Some(p) => p.throttled(booking, self.next_booking, now),
        }
    }

    /// The learned pace, in requests per second, when there is one.
    pub(crate) fn paced_rate(&self) -> Option<f64> {
        self.paced.as_ref().map(Paced::rate)
    }

    /// Nothing passes before `until` (or later, if a gate already says so).
    pub(crate) fn raise_gate(&mut self, until: Instant) {
        self.gate = Some(self.gate.map_or(until, |g| g.max(until)));
    }

    /// The gate, while it is ahead of `now`.
    pub(crate) fn gate(&self, now: Instant) -> Option<Instant> {
        self.gate.filter(|g| *g > now)
    }

    /// Whether `booking`, its slot come, must not be sent (how long to look again): the gate,
    /// or a probe out for a spent, unproven resetless limit — the first booking to come
    /// after it was armed is the probe, the others wait for its answer (a refill slot at a
    /// time).
    pub(crate) fn blocked(&mut self, booking: u64, now: Instant) -> Option<Duration> {
        if let Some(g) = self.gate(now) {
            return Some(g - now);
        }
        if let Some((b, _)) = self.probe.and_then(|p| p.out)
            && b == booking
        {
            return None;
        }
        if let Some(d) = self.probe_out(now) {
            return Some(d);
        }
        self.take_probe(booking, now);
        None
    }

    /// While a probe is out (and not given up): how long until looking again, a refill slot.
    fn probe_out(&self, now: Instant) -> Option<Duration> {
        let (_, at) = self.probe?.out?;
        if now.saturating_duration_since(at) >= PROBE_GIVEN_UP {
            return None;
        }
        let slot = self.stated[REQUESTS]
            .as_ref()
            .map_or(Duration::from_secs(1), |s| {
                s.window() / u32::try_from(s.bucket.capacity().max(1)).unwrap_or(u32::MAX)
            });
        Some(slot.max(Duration::from_millis(10)))
    }

    /// `booking` goes now: while a probe is armed and none is out, it is the probe.
    pub(crate) fn take_probe(&mut self, booking: u64, now: Instant) {
        if let Some(p) = self.probe.as_mut()
            && p.out
                .is_none_or(|(_, at)| now.saturating_duration_since(at) >= PROBE_GIVEN_UP)
        {
            tracing::debug!(booking, "sent as the probe of a spent resetless limit");
            p.out = Some((booking, now));
        }
    }

    /// After an answer to `booking` was applied (`refused`: a 429): the probe it was is over
    /// — answered, it showed the limit gives back after it was spent (a bucket's refill, or a
    /// fixed window's boundary, which the level's jump tells); refused, the drain made the
    /// window fixed — and one is armed while a resetless limit is spent and unproven.
    pub(crate) fn settle(&mut self, booking: Option<u64>, refused: bool) {
        if let (Some(p), Some(b)) = (self.probe, booking)
            && p.out.is_some_and(|(out, _)| out == b)
        {
            self.probe = None;
            if !refused {
                for s in self.stated.iter_mut().flatten() {
                    s.prove();
                }
            }
        }
        let unproven = self.stated.iter().flatten().any(Stated::empty_and_unproven);
        if !unproven {
            self.probe = None;
        } else if self.probe.is_none() {
            tracing::debug!(
                after = ?booking,
                "a limit stated without a reset is spent, its refill unknown: one probe at a time"
            );
            self.probe = Some(Probe::default());
        }
    }

    /// Tokens that could be booked now while every token bucket stays at least half full
    /// (`None`: no token bucket is known).
    pub(crate) fn token_room(&mut self, now: Instant) -> Option<u64> {
        let room = |level: f64, capacity: u64| (level - capacity as f64 / 2.0).max(0.0) as u64;
        let configured = [self.tpm.as_mut(), self.tpd.as_mut()]
            .into_iter()
            .flatten()
            .map(|b| room(b.level(now), b.capacity()));
        let [_, t, i, _] = &mut self.stated;
        let stated = [t.as_mut(), i.as_mut()]
            .into_iter()
            .flatten()
            .map(|s| room(s.level(now), s.bucket.capacity()));
        // Saturating float-to-int above: negative is none, huge is u64::MAX.
        configured
            .chain(stated)
            .collect::<Vec<_>>()
            .into_iter()
            .min()
    }

    /// The request and token buckets that bind now (lowest level), configured or stated.
    pub(crate) fn binding(&mut self, now: Instant) -> [Option<BucketSnapshot>; 2] {
        let view = |b: &mut Bucket| {
            BucketSnapshot::new(b.level(now), b.capacity(), b.window(), b.full_at(now))
        };
        let stated = |s: &mut Stated| {
            BucketSnapshot::new(
                s.level(now),
                s.bucket.capacity(),
                s.window(),
                s.full_at(now),
            )
        };
        let lowest =
            |v: Vec<BucketSnapshot>| v.into_iter().min_by(|a, b| a.level.total_cmp(&b.level));
        let [r, t, _, _] = &mut self.stated;
        // Configured or stated only: a pace learned from 429s is `learned_rate`, not a limit
        // anyone stated.
        let requests = [self.rpm.as_mut(), self.rpd.as_mut()]
            .into_iter()
            .flatten()
            .map(view)
            .chain(r.as_mut().map(stated))
            .collect();
        let tokens = [self.tpm.as_mut(), self.tpd.as_mut()]
            .into_iter()
            .flatten()
            .map(view)
            .chain(t.as_mut().map(stated))
            .collect();
        [lowest(requests), lowest(tokens)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ratelimit::{Per, Window};

    const S: Duration = Duration::from_secs(1);

    /// A bucket's (level, capacity).
    fn lc(b: Option<BucketSnapshot>) -> Option<(f64, u64)> {
        b.map(|b| (b.level, b.capacity))
    }

    #[tokio::test(start_paused = true)]
    async fn a_snapshot_names_each_bucket_s_window_and_when_it_is_full_again() {
        let now = Instant::now();
        let limits = Limits::none().with_rpm(60).with_tpm(6_000);
        let mut s = KeyState::from_limits(&limits, Duration::ZERO, now);
        let [r, t] = s.binding(now);
        let full = |capacity: u64| BucketSnapshot::new(capacity as f64, capacity, 60 * S, None);
        assert_eq!(
            (r, t),
            (Some(full(60)), Some(full(6_000))),
            "untouched: full, no reset"
        );
        // 30 requests and 3,000 tokens used: half a minute to refill either.
        let cost = Demand {
            input_tokens: 100,
            ..Demand::one_request()
        };
        for _ in 0..30 {
            s.book(cost, now);
        }
        let [r, t] = s.binding(now);
        assert_eq!(r.map(|b| b.reset), Some(Some(now + 30 * S)));
        assert_eq!(
            t.map(|b| (b.level, b.reset)),
            Some((3_000.0, Some(now + 30 * S)))
        );
        // Stated: 40 of 100 left, full in 20 s. The window is what that statement teaches
        // (60 back in 20 s: 100 per 33 s), and the bucket is full again at the stated reset.
        let mut s = KeyState::unconfigured(Duration::ZERO);
        let report = |remaining, reset| LimitReport {
            requests: window(100, remaining, Some(reset), Per::Minute, now),
            ..LimitReport::default()
        };
        s.apply(&report(40, 20 * S), None, now);
        let [r, _] = s.binding(now);
        let r = r.unwrap();
        assert_eq!((r.level, r.capacity), (40.0, 100));
        assert!(r.window > 30 * S && r.window < 34 * S, "{r:?}");
        let off = r.reset.map(|at| (at - now).as_secs_f64() - 20.0);
        assert!(off.is_some_and(|off| off.abs() < 1e-6), "{r:?}");
    }

    /// A local share following a shared store's levels: each named configured bucket is
    /// lowered to the level it is given — below zero for slots booked ahead — never raised,
    /// and the others keep theirs.
    #[tokio::test(start_paused = true)]
    async fn a_share_follows_the_levels_it_is_given() {
        let now = Instant::now();
        let limits = Limits::none().with_rpm(200).with_tpm(10_000);
        // (rpm level, tpm level given) → (requests level, tokens level) after.
        let table = [
            ((Some(50.0), None), (50.0, 10_000.0)),
            ((Some(-6.5), Some(2_500.0)), (-6.5, 2_500.0)),
            ((Some(900.0), Some(0.0)), (200.0, 0.0)),
            ((None, None), (200.0, 10_000.0)),
        ];
        for ((rpm, tpm), (r, t)) in table {
            let mut s = KeyState::from_limits(&limits, Duration::ZERO, now);
            let levels = ConfiguredLevels {
                rpm,
                tpm,
                ..ConfiguredLevels::default()
            };
            s.follow(&levels, now);
            let [req, tok] = s.binding(now);
            let got = (req.map(|b| b.level), tok.map(|b| b.level));
            assert_eq!(got, (Some(r), Some(t)), "given {rpm:?}, {tpm:?}");
        }
        // A share below zero admits nothing until it has refilled past the cost: 6.5
        // requests at 200 a minute is 1.95 s, then one more is 0.3 s.
        let mut s = KeyState::from_limits(&limits, Duration::ZERO, now);
        s.follow(
            &ConfiguredLevels {
                rpm: Some(-6.5),
                ..ConfiguredLevels::default()
            },
            now,
        );
        let wait = s.wait(Demand::one_request(), now).ok();
        assert_eq!(wait.map(|w| w.as_millis()), Some(2_250));
        // Lower already (its own use): a higher shared level does not raise it.
        let mut s = KeyState::from_limits(&limits, Duration::ZERO, now);
        for _ in 0..150 {
            s.book(Demand::one_request(), now);
        }
        s.follow(
            &ConfiguredLevels {
                rpm: Some(120.0),
                ..ConfiguredLevels::default()
            },
            now,
        );
        assert_eq!(s.binding(now)[0].map(|b| b.level), Some(50.0));
    }

    fn window(
        limit: u64,
        remaining: u64,
        reset_in: Option<Duration>,
        per: Per,
        now: Instant,
    ) -> Option<Window> {
        Some(Window {
            limit: Some(limit),
            remaining: Some(remaining),
            reset_at: reset_in.map(|d| now + d),
            per,
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_configured_limit_is_a_ceiling_a_lower_stated_one_binds() {
        let now = Instant::now();
        let mut s = KeyState::from_limits(&Limits::none().with_rpm(60), Duration::ZERO, now);
        let stated = |limit| LimitReport {
            requests: window(limit, limit, None, Per::Minute, now),
            ..LimitReport::default()
        };
        s.apply(&stated(600), None, now);
        assert_eq!(lc(s.binding(now)[0]), Some((60.0, 60)), "the ceiling binds");
        s.apply(&stated(30), None, now);
        assert_eq!(
            lc(s.binding(now)[0]),
            Some((30.0, 30)),
            "the lower stated limit binds"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn what_is_booked_and_unanswered_is_taken_off_the_stated_remaining() {
        let now = Instant::now();
        let mut s = KeyState::unconfigured(Duration::ZERO);
        let one = Demand::one_request();
        s.apply(
            &LimitReport {
                requests: window(100, 100, None, Per::Minute, now),
                ..LimitReport::default()
            },
            None,
            now,
        );
        let first = s.book(one, now);
        let second = s.book(one, now);
        for _ in 0..3 {
            s.book(one, now);
        }
        let said = |remaining| LimitReport {
            requests: window(100, remaining, Some(S), Per::Minute, now),
            ..LimitReport::default()
        };
        // The answer to the second booking says 99 left: the first may have been sent after
        // it (woken late), and three more are on their way — all four are taken off.
        s.apply(&said(99), Some(second), now);
        assert_eq!(lc(s.binding(now)[0]), Some((95.0, 100)));
        assert_eq!(s.log.len(), 4, "the answered booking is forgotten");
        // The first's answer: 98 left, three still unanswered.
        s.apply(&said(98), Some(first), now);
        assert_eq!(lc(s.binding(now)[0]), Some((95.0, 100)));
        // Bookings whose answers never report are forgotten after a while.
        let later = now + MAX_AGE + S;
        s.apply(&said(97), None, later);
        assert!(s.log.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_429_drains_what_it_is_about_and_nothing_with_room() {
        let now = Instant::now();
        let limits = Limits::none().with_rpm(60).with_tpm(10_000).with_rpd(1_000);
        let mut s = KeyState::from_limits(&limits, Duration::ZERO, now);
        let tokens_only = Drain {
            tokens: true,
            ..Drain::none()
        };
        s.drain(tokens_only, now);
        let [requests, tokens] = s.binding(now);
        assert_eq!(
            lc(requests),
            Some((60.0, 60)),
            "requests had room: untouched"
        );
        assert_eq!(lc(tokens), Some((0.0, 10_000)));
        // A per-minute drain leaves the day's bucket alone; a named day limit drains it too.
        s.drain(Drain::every_minute(), now);
        assert_eq!(s.rpd.as_mut().unwrap().level(now), 1_000.0);
        s.drain(
            Drain {
                requests: true,
                day: true,
                ..Drain::none()
            },
            now,
        );
        assert_eq!(s.rpd.as_mut().unwrap().level(now), 0.0);
    }

    /// LiteLLM's per-minute counter refusing a slot a bucket would have had: the window is
    /// fixed and closed, and the key's gate holds everything until its boundary — slots
    /// booked ahead at the bucket's refill rate included (they ask before they go).
    #[tokio::test(start_paused = true)]
    async fn a_refusal_that_closes_a_fixed_window_gates_the_key_until_its_boundary() {
        let now = Instant::now();
        let mut s = KeyState::unconfigured(Duration::ZERO);
        let litellm = |remaining| LimitReport {
            requests: window(60, remaining, None, Per::Minute, now),
            ..LimitReport::default()
        };
        let b = s.book(Demand::one_request(), now);
        s.apply(&litellm(0), Some(b), now);
        assert_eq!(s.gate(now), None, "a bucket, as far as is known");
        let t = now + S;
        s.drain(Drain::every_minute(), t);
        assert_eq!(s.gate(t), Some(now + 60 * S), "closed until the boundary");
        // A bucket's refusal raises no gate of its own (the 429's gate is the router's).
        let mut b = KeyState::from_limits(&Limits::none().with_rpm(60), Duration::ZERO, now);
        b.drain(Drain::every_minute(), t);
        assert_eq!(b.gate(t), None);
    }

    /// A resetless limit spent before anything showed how it refills (LiteLLM's proxy: a
    /// limit and what is left, no reset): of the slots booked ahead at the refill rate, one
    /// goes and the others wait for its answer — a refusal closes the window to its
    /// boundary; an answer shows it gives back, and nothing is held after it.
    #[tokio::test(start_paused = true)]
    async fn a_spent_resetless_limit_sends_one_probe_at_a_time_until_an_answer_tells() {
        let now = Instant::now();
        let said = |remaining, at| LimitReport {
            requests: window(60, remaining, None, Per::Minute, at),
            ..LimitReport::default()
        };
        let spent = |s: &mut KeyState| {
            let b = s.book(Demand::one_request(), now);
            s.apply(&said(0, now), Some(b), now);
            s.settle(Some(b), false);
            // Three slots booked ahead at the refill rate (a second apart).
            [1u32, 2, 3].map(|k| {
                let wait = s.wait(Demand::one_request(), now).unwrap();
                assert!(wait > Duration::ZERO, "slot {k} waits for the refill");
                s.book(Demand::one_request(), now)
            })
        };
        // A fixed window: the probe is refused, the window closes to its boundary.
        let mut s = KeyState::unconfigured(Duration::ZERO);
        let [a, b, c] = spent(&mut s);
        let t = now + S;
        assert_eq!(s.blocked(a, t), None, "the first slot to come is the probe");
        assert!(
            s.blocked(b, t + S).is_some(),
            "the next waits for its answer"
        );
        assert_eq!(s.blocked(a, t + S), None, "the probe itself may go");
        let r = t + 2 * S;
        s.throttled(Some(a), r);
        s.drain(Drain::every_minute(), r);
        s.settle(Some(a), true);
        assert_eq!(
            s.blocked(c, r),
            Some(now + 60 * S - r),
            "closed to the boundary"
        );

        // A bucket: the probe is answered (it used the unit the refill gave back), and the
        // limit is known to give back: nothing is held any more.
        let mut s = KeyState::unconfigured(Duration::ZERO);
        let [a, b, c] = spent(&mut s);
        assert_eq!(s.blocked(a, t), None);
        assert!(s.blocked(b, t).is_some());
        s.apply(&said(0, t + S), Some(a), t + S);
        s.settle(Some(a), false);
        assert_eq!(s.blocked(b, t + S), None);
        assert_eq!(s.blocked(c, t + S), None);

        // A request admitted at once when the refill gave a unit back is the probe too; the
        // next one waits for its answer.
        let mut s = KeyState::unconfigured(Duration::ZERO);
        let b = s.book(Demand::one_request(), now);
        s.apply(&said(0, now), Some(b), now);
        s.settle(Some(b), false);
        let later = now + 2 * S;
        assert_eq!(
            s.wait(Demand::one_request(), later).unwrap(),
            Duration::ZERO
        );
        let probe = s.book(Demand::one_request(), later);
        s.take_probe(probe, later);
        assert!(s.wait(Demand::one_request(), later + 2 * S).unwrap() > Duration::ZERO);

        // A probe whose answer never comes is given up: the next slot probes.
        let mut s = KeyState::unconfigured(Duration::ZERO);
        let [a, b, _] = spent(&mut s);
        assert_eq!(s.blocked(a, t), None);
        assert!(s.blocked(b, t + S).is_some());
        assert_eq!(s.blocked(b, t + PROBE_GIVEN_UP), None);
    }

    #[tokio::test(start_paused = true)]
    async fn groqs_per_day_requests_stay_a_day_and_come_back_as_stated() {
        let now = Instant::now();
        let mut s = KeyState::unconfigured(Duration::ZERO);
        let groq = |remaining, reset| LimitReport {
            requests: window(14_400, remaining, Some(reset), Per::Day, now),
            tokens: window(6_000, 5_000, Some(10 * S), Per::Minute, now),
            ..LimitReport::default()
        };
        s.apply(&groq(14_370, 180 * S), None, now);
        let [r, t] = s.binding(now);
        assert_eq!(r.map(|b| b.window), Some(86_400 * S));
        assert_eq!(t.map(|b| b.window), Some(60 * S));
        // A 429 about tokens (`retry-after: 2`): the per-day request bucket is not drained.
        s.drain(
            Drain {
                tokens: true,
                ..Drain::none()
            },
            now,
        );
        assert_eq!(lc(s.binding(now)[0]), Some((14_370.0, 14_400)));
        assert_eq!(
            s.wait(Demand::one_request(), now + 2 * S),
            Ok(Duration::ZERO)
        );
    }
}
