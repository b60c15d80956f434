//! What to do after a failed attempt: a pure function of what happened, the policy, `now`
//! and the jitter source, returning an [`Action`] value that the attempt loop applies.
//!
//! A throttled request is rescheduled, not failed: a 429 or an exhausted quota closes its
//! provider until the stated reset and the request goes on elsewhere, or waits, within its
//! deadline; `max_attempts` bounds only the sends that failed for other reasons.

use std::time::Duration;

use tokio::time::Instant;

use super::breaker::BreakerEvent;
use crate::error::{Disposition, Error, ErrorKind};
use crate::ratelimit::{Drain, LimitReport, Tightening, Window, named_drain};
use crate::retry::Backoff;
use crate::rng::Rng;

/// What happened to one attempt.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FailedAttempt<'a> {
    pub(crate) error: &'a Error,
    /// What the response stated about limits, if a response arrived and stated anything.
    pub(crate) report: Option<&'a LimitReport>,
    /// The attempt was the breaker's half-open probe.
    pub(crate) probe: bool,
    /// This request's earlier failures at this provider (the backoff's exponent).
    pub(crate) failures: u32,
    /// This request's earlier sends that failed for reasons other than throttling.
    pub(crate) failed: u32,
}

/// Whether a failed attempt's reservation in the budgets goes back: only where the provider
/// can have billed nothing — it answered with an error status (it refused the work), or the
/// request never reached it (no connection was made). An answer cut off or unreadable, a
/// timeout, a connection lost once the request was out: the provider may have done and
/// billed the work, and the budgets keep the estimate (the safe side: never overspent).
pub(crate) fn billed_nothing(err: &Error) -> bool {
    err.status().is_some_and(|s| s >= 400) || err.is_undelivered()
}

/// The policy the decision follows.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rules {
    pub(crate) max_attempts: u32,
    pub(crate) quota_cooldown: Duration,
    pub(crate) backoff: Backoff,
}

/// Which counter the failure adds to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Count {
    Terminal,
    RateLimited,
    QuotaExhausted,
    /// A transient fault; `server_error` when the provider answered 5xx.
    Transient {
        server_error: bool,
    },
}

impl Count {
    /// As an event tells it.
    pub(crate) fn outcome(self) -> crate::observe::AttemptOutcome {
        use crate::observe::AttemptOutcome;
        match self {
            Count::Terminal => AttemptOutcome::Terminal,
            Count::RateLimited => AttemptOutcome::RateLimited,
            Count::QuotaExhausted => AttemptOutcome::QuotaExhausted,
            Count::Transient { server_error } => AttemptOutcome::Transient { server_error },
        }
    }
}

/// How the request goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// It ends with this error: sending it again anywhere is pointless.
    Return,
    /// It ends with every error so far: the attempts are spent.
    GiveUp,
    /// Fail over (or wait for a reopen) at once; throttling spends no retry budget.
    FailOver,
    /// Try again, if the retry budget allows one more retry; else give up.
    Retry,
}

/// What the attempt loop does about a failed attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Action {
    pub(crate) count: Count,
    pub(crate) breaker: BreakerEvent,
    /// What the limiter is told (a 429's drain and gate).
    pub(crate) tighten: Option<Tightening>,
    /// This provider is not tried again by this request before then.
    pub(crate) back_off_until: Option<Instant>,
    pub(crate) next: Next,
}

/// Decides what a failed attempt leads to (see the module docs of [`router`](super)).
pub(crate) fn decide(o: &FailedAttempt<'_>, rules: &Rules, now: Instant, rng: &dyn Rng) -> Action {
    match o.error.disposition() {
        Disposition::Terminal => Action {
            count: Count::Terminal,
            breaker: terminal_breaker(o),
            tighten: None,
            back_off_until: None,
            next: Next::Return,
        },
        Disposition::RateLimited => {
            let delay = stated_delay(o.error, o.report, now)
                .unwrap_or_else(|| rules.backoff.delay(o.failures, rng));
            let until = now + delay;
            Action {
                count: Count::RateLimited,
                breaker: BreakerEvent::OpenUntil(until),
                tighten: Some(Tightening {
                    gate_until: Some(until),
                    drain: drain_for(o.error, o.report),
                    ..Tightening::default()
                }),
                back_off_until: None,
                next: Next::FailOver,
            }
        }
        Disposition::QuotaExhausted => Action {
            count: Count::QuotaExhausted,
            breaker: BreakerEvent::OpenUntil(
                now + stated_delay(o.error, o.report, now).unwrap_or(rules.quota_cooldown),
            ),
            tighten: None,
            back_off_until: None,
            next: Next::FailOver,
        },
        Disposition::Transient => {
            // A stated delay (a 503's `Retry-After`) means what it means on a 429.
            let (breaker, until) = match o.error.retry_after() {
                Some(d) => (BreakerEvent::TransientUntil(now + d), now + d),
                None => (
                    BreakerEvent::Transient,
                    now + rules.backoff.delay(o.failures, rng),
                ),
            };
            Action {
                count: Count::Transient {
                    server_error: o.error.status().is_some_and(|s| s >= 500),
                },
                breaker,
                tighten: None,
                back_off_until: Some(until),
                next: if o.failed + 1 >= rules.max_attempts {
                    Next::GiveUp
                } else {
                    Next::Retry
                },
            }
        }
    }
}

/// An attempt's timeout (pure): `configured` (the provider's, else the policy's), but no more
/// than the share of `left` (what remains of the deadline) that leaves each of `others` (the
/// providers this request has not tried yet and that could serve it before the deadline) as
/// much:
/// `left / (others + 1)`; at least a millisecond. A hanging first provider under a 10 s
/// deadline, with one other provider, is given up after 5 s, and the other has 5 s to answer.
/// The last provider (or the last attempt `max_attempts` allows) gets all that is left.
pub(crate) fn attempt_timeout(configured: Duration, left: Duration, others: usize) -> Duration {
    let share = left / u32::try_from(others.saturating_add(1)).unwrap_or(u32::MAX);
    configured.min(share).max(Duration::from_millis(1))
}

/// A terminal error's effect on the breaker: a rejected key (a 401 or 403 saying so) closes
/// the provider for that account for good; any other answer shows the provider is up (an
/// entitlement one request lacks, such as Anthropic's 429 "Extra usage is required for long
/// context requests", refuses that request, not the key); no answer at all only gives back a
/// claimed probe.
fn terminal_breaker(o: &FailedAttempt<'_>) -> BreakerEvent {
    match (o.error.status(), o.error.kind()) {
        (Some(401 | 403), ErrorKind::Auth | ErrorKind::PermissionDenied) => BreakerEvent::Reject,
        (Some(_), _) => BreakerEvent::Answered { probe: o.probe },
        (None, _) => BreakerEvent::ReleaseProbe,
    }
}

/// What a 429 drains: the dimensions the same response states at 0, else the limit its code
/// or message names, else the per-minute buckets — never a dimension the response states has
/// room in.
pub(crate) fn drain_for(err: &Error, report: Option<&LimitReport>) -> Drain {
    let left = |w: &Option<Window>| w.as_ref().and_then(|w| w.remaining);
    let stated = report.map_or([None; 4], |r| {
        [
            left(&r.requests),
            left(&r.tokens),
            left(&r.input_tokens),
            left(&r.output_tokens),
        ]
    });
    let zero = stated.map(|r| r == Some(0));
    let mut d = if zero.iter().any(|z| *z) {
        Drain {
            requests: zero[0],
            tokens: zero[1],
            input_tokens: zero[2],
            output_tokens: zero[3],
            day: false,
        }
    } else {
        named_drain(err.code(), err.message()).unwrap_or(Drain::every_minute())
    };
    let room = stated.map(|r| r.is_some_and(|r| r > 0));
    d.requests &= !room[0];
    d.tokens &= !room[1];
    d.input_tokens &= !room[2];
    d.output_tokens &= !room[3];
    d
}

/// The delay the provider stated: `retry-after-ms`/`Retry-After` or a body/message delay (on
/// the error), else the reset of an exhausted window.
fn stated_delay(err: &Error, report: Option<&LimitReport>, now: Instant) -> Option<Duration> {
    err.retry_after().or_else(|| {
        report
            .and_then(LimitReport::exhausted_until)
            .map(|t| t.saturating_duration_since(now))
            .filter(|d| !d.is_zero())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::ratelimit::{Per, Window};
    use crate::rng::FixedRng;
    use crate::router::breaker::{Breaker, BreakerSettings, BreakerState};

    const S: Duration = Duration::from_secs(1);

    fn rules() -> Rules {
        Rules {
            max_attempts: 4,
            quota_cooldown: 900 * S,
            backoff: Backoff::try_new(S, 60 * S).unwrap(),
        }
    }

    fn err(kind: ErrorKind, status: Option<u16>) -> Error {
        let e = Error::new(kind, "x");
        match status {
            Some(s) => e.with_status(s),
            None => e,
        }
    }

    /// One row: what happened, and what must follow.
    struct Row {
        name: &'static str,
        error: Error,
        report: Option<LimitReport>,
        probe: bool,
        failures: u32,
        failed: u32,
        expect: fn(Instant) -> Action,
    }

    /// A 429's tightening: gated until `until`, draining `what`.
    fn gate(until: Instant, what: Drain) -> Option<Tightening> {
        Some(Tightening {
            gate_until: Some(until),
            drain: what,
            ..Tightening::default()
        })
    }

    fn drain(until: Instant) -> Option<Tightening> {
        gate(until, Drain::every_minute())
    }

    const REQUESTS: Drain = Drain {
        requests: true,
        ..Drain::none()
    };

    fn rows(t0: Instant) -> Vec<Row> {
        let exhausted = LimitReport {
            requests: Some(Window {
                limit: Some(100),
                remaining: Some(0),
                reset_at: Some(t0 + 20 * S),
                per: Per::Minute,
            }),
            ..LimitReport::default()
        };
        vec![
            Row {
                name: "a 400 ends the request; the provider answered, so the probe closes it",
                error: err(ErrorKind::InvalidRequest, Some(400)),
                report: None,
                probe: true,
                failures: 0,
                failed: 0,
                expect: |_| Action {
                    count: Count::Terminal,
                    breaker: BreakerEvent::Answered { probe: true },
                    tighten: None,
                    back_off_until: None,
                    next: Next::Return,
                },
            },
            Row {
                name: "a local terminal error (no status) releases a claimed probe",
                error: err(ErrorKind::Config, None),
                report: None,
                probe: true,
                failures: 0,
                failed: 0,
                expect: |_| Action {
                    count: Count::Terminal,
                    breaker: BreakerEvent::ReleaseProbe,
                    tighten: None,
                    back_off_until: None,
                    next: Next::Return,
                },
            },
            Row {
                name: "a 429 with Retry-After: 30 drains, gates and opens for 30 s; fail over",
                error: err(ErrorKind::RateLimited, Some(429)).with_retry_after(Some(30 * S)),
                report: None,
                probe: false,
                failures: 0,
                failed: 0,
                expect: |t0| Action {
                    count: Count::RateLimited,
                    breaker: BreakerEvent::OpenUntil(t0 + 30 * S),
                    tighten: drain(t0 + 30 * S),
                    back_off_until: None,
                    next: Next::FailOver,
                },
            },
            Row {
                name: "a 429 without a delay waits for its exhausted window's reset, draining it",
                error: err(ErrorKind::RateLimited, Some(429)),
                report: Some(exhausted.clone()),
                probe: false,
                failures: 0,
                failed: 0,
                expect: |t0| Action {
                    count: Count::RateLimited,
                    breaker: BreakerEvent::OpenUntil(t0 + 20 * S),
                    tighten: gate(t0 + 20 * S, REQUESTS),
                    back_off_until: None,
                    next: Next::FailOver,
                },
            },
            Row {
                name: "a bare 429 backs off with full jitter (third failure: half of 4 s)",
                error: err(ErrorKind::RateLimited, Some(429)),
                report: None,
                probe: false,
                failures: 2,
                failed: 2,
                expect: |t0| Action {
                    count: Count::RateLimited,
                    breaker: BreakerEvent::OpenUntil(t0 + 2 * S),
                    tighten: drain(t0 + 2 * S),
                    back_off_until: None,
                    next: Next::FailOver,
                },
            },
            Row {
                name: "a 429 after three failed sends still fails over: throttling is a wait",
                error: err(ErrorKind::RateLimited, Some(429)).with_retry_after(Some(S)),
                report: None,
                probe: false,
                failures: 0,
                failed: 3,
                expect: |t0| Action {
                    count: Count::RateLimited,
                    breaker: BreakerEvent::OpenUntil(t0 + S),
                    tighten: drain(t0 + S),
                    back_off_until: None,
                    next: Next::FailOver,
                },
            },
            Row {
                name: "a 429 about tokens that states requests have room drains tokens only",
                error: err(ErrorKind::RateLimited, Some(429)).with_retry_after(Some(2 * S)),
                report: Some(LimitReport {
                    requests: Some(Window {
                        limit: Some(14_400),
                        remaining: Some(14_370),
                        reset_at: None,
                        per: Per::Day,
                    }),
                    tokens: Some(Window {
                        limit: Some(6_000),
                        remaining: Some(0),
                        reset_at: None,
                        per: Per::Minute,
                    }),
                    ..LimitReport::default()
                }),
                probe: false,
                failures: 0,
                failed: 0,
                expect: |t0| Action {
                    count: Count::RateLimited,
                    breaker: BreakerEvent::OpenUntil(t0 + 2 * S),
                    tighten: gate(
                        t0 + 2 * S,
                        Drain {
                            tokens: true,
                            ..Drain::none()
                        },
                    ),
                    back_off_until: None,
                    next: Next::FailOver,
                },
            },
            Row {
                name: "a 429 whose message names requests per day drains the day's requests",
                error: Error::new(
                    ErrorKind::RateLimited,
                    "Rate limit reached for gpt-4o-mini on requests per day (RPD): Limit 10000",
                )
                .with_status(429)
                .with_retry_after(Some(60 * S)),
                report: None,
                probe: false,
                failures: 0,
                failed: 0,
                expect: |t0| Action {
                    count: Count::RateLimited,
                    breaker: BreakerEvent::OpenUntil(t0 + 60 * S),
                    tighten: gate(
                        t0 + 60 * S,
                        Drain {
                            day: true,
                            ..REQUESTS
                        },
                    ),
                    back_off_until: None,
                    next: Next::FailOver,
                },
            },
            Row {
                name: "a 401 rejects the key: the provider closes for this account",
                error: err(ErrorKind::Auth, Some(401)),
                report: None,
                probe: false,
                failures: 0,
                failed: 0,
                expect: |_| Action {
                    count: Count::Terminal,
                    breaker: BreakerEvent::Reject,
                    tighten: None,
                    back_off_until: None,
                    next: Next::Return,
                },
            },
            Row {
                name: "an entitlement refused with a 429 ends the request but keeps the key",
                error: err(ErrorKind::PermissionDenied, Some(429)),
                report: None,
                probe: false,
                failures: 0,
                failed: 0,
                expect: |_| Action {
                    count: Count::Terminal,
                    breaker: BreakerEvent::Answered { probe: false },
                    tighten: None,
                    back_off_until: None,
                    next: Next::Return,
                },
            },
            Row {
                name: "a 403 rejects the key too",
                error: err(ErrorKind::PermissionDenied, Some(403)),
                report: None,
                probe: false,
                failures: 0,
                failed: 0,
                expect: |_| Action {
                    count: Count::Terminal,
                    breaker: BreakerEvent::Reject,
                    tighten: None,
                    back_off_until: None,
                    next: Next::Return,
                },
            },
            Row {
                name: "Groq's 498 (flex capacity) is transient: backed off and retried",
                error: err(ErrorKind::Overloaded, Some(498)),
                report: None,
                probe: false,
                failures: 0,
                failed: 0,
                expect: |t0| Action {
                    count: Count::Transient {
                        server_error: false,
                    },
                    breaker: BreakerEvent::Transient,
                    tighten: None,
                    back_off_until: Some(t0 + S / 2),
                    next: Next::Retry,
                },
            },
            Row {
                name: "a 503 with Retry-After: 20 keeps the provider closed 20 s",
                error: err(ErrorKind::Overloaded, Some(503)).with_retry_after(Some(20 * S)),
                report: None,
                probe: false,
                failures: 0,
                failed: 0,
                expect: |t0| Action {
                    count: Count::Transient { server_error: true },
                    breaker: BreakerEvent::TransientUntil(t0 + 20 * S),
                    tighten: None,
                    back_off_until: Some(t0 + 20 * S),
                    next: Next::Retry,
                },
            },
            Row {
                name: "x-should-retry: false makes a 429 terminal",
                error: err(ErrorKind::RateLimited, Some(429)).with_should_retry(Some(false)),
                report: None,
                probe: false,
                failures: 0,
                failed: 0,
                expect: |_| Action {
                    count: Count::Terminal,
                    breaker: BreakerEvent::Answered { probe: false },
                    tighten: None,
                    back_off_until: None,
                    next: Next::Return,
                },
            },
            Row {
                name: "an exhausted quota opens until its stated reset; no drain",
                error: err(ErrorKind::QuotaExhausted, Some(429)).with_retry_after(Some(3600 * S)),
                report: None,
                probe: false,
                failures: 0,
                failed: 0,
                expect: |t0| Action {
                    count: Count::QuotaExhausted,
                    breaker: BreakerEvent::OpenUntil(t0 + 3600 * S),
                    tighten: None,
                    back_off_until: None,
                    next: Next::FailOver,
                },
            },
            Row {
                name: "an exhausted quota without a delay opens until its window's stated reset",
                error: err(ErrorKind::QuotaExhausted, Some(429)),
                report: Some(exhausted.clone()),
                probe: false,
                failures: 0,
                failed: 0,
                expect: |t0| Action {
                    count: Count::QuotaExhausted,
                    breaker: BreakerEvent::OpenUntil(t0 + 20 * S),
                    tighten: None,
                    back_off_until: None,
                    next: Next::FailOver,
                },
            },
            Row {
                name: "an exhausted quota with no reset opens for the quota cooldown",
                error: err(ErrorKind::QuotaExhausted, Some(429)),
                report: None,
                probe: false,
                failures: 0,
                failed: 0,
                expect: |t0| Action {
                    count: Count::QuotaExhausted,
                    breaker: BreakerEvent::OpenUntil(t0 + 900 * S),
                    tighten: None,
                    back_off_until: None,
                    next: Next::FailOver,
                },
            },
            Row {
                name: "a 500 counts toward the breaker, backs this provider off, retries on budget",
                error: err(ErrorKind::Server, Some(500)),
                report: None,
                probe: false,
                failures: 1,
                failed: 1,
                expect: |t0| Action {
                    count: Count::Transient { server_error: true },
                    breaker: BreakerEvent::Transient,
                    tighten: None,
                    back_off_until: Some(t0 + S),
                    next: Next::Retry,
                },
            },
            Row {
                name: "a timeout is transient but not a server error",
                error: err(ErrorKind::Timeout, None),
                report: None,
                probe: false,
                failures: 0,
                failed: 0,
                expect: |t0| Action {
                    count: Count::Transient {
                        server_error: false,
                    },
                    breaker: BreakerEvent::Transient,
                    tighten: None,
                    back_off_until: Some(t0 + S / 2),
                    next: Next::Retry,
                },
            },
            Row {
                name: "a transient failure on the last attempt gives up",
                error: err(ErrorKind::Overloaded, Some(529)),
                report: None,
                probe: false,
                failures: 0,
                failed: 3,
                expect: |t0| Action {
                    count: Count::Transient { server_error: true },
                    breaker: BreakerEvent::Transient,
                    tighten: None,
                    back_off_until: Some(t0 + S / 2),
                    next: Next::GiveUp,
                },
            },
            Row {
                name: "x-should-retry: true makes a 400 transient",
                error: err(ErrorKind::InvalidRequest, Some(400)).with_should_retry(Some(true)),
                report: None,
                probe: false,
                failures: 0,
                failed: 0,
                expect: |t0| Action {
                    count: Count::Transient {
                        server_error: false,
                    },
                    breaker: BreakerEvent::Transient,
                    tighten: None,
                    back_off_until: Some(t0 + S / 2),
                    next: Next::Retry,
                },
            },
        ]
    }

    #[test]
    fn only_a_refusal_or_a_request_that_never_arrived_gives_its_budget_back() {
        let e = |kind, status: Option<u16>| match status {
            Some(s) => Error::new(kind, "x").with_status(s),
            None => Error::new(kind, "x"),
        };
        let cases = [
            // (error, billed nothing)
            (e(ErrorKind::Server, Some(500)), true),
            (e(ErrorKind::RateLimited, Some(429)), true),
            (e(ErrorKind::InvalidRequest, Some(400)), true),
            (e(ErrorKind::Overloaded, Some(529)), true),
            (e(ErrorKind::Timeout, Some(408)), true),
            (e(ErrorKind::Connect, None).undelivered(), true),
            // The provider may have done the work: the estimate stays.
            (e(ErrorKind::Timeout, None), false),
            (e(ErrorKind::Connect, None), false), // cut once the request was out
            (e(ErrorKind::Decode, Some(200)), false), // a 200 too large or unreadable
            (e(ErrorKind::Decode, None), false),
            (e(ErrorKind::InvalidAnswer, None), false),
        ];
        for (err, want) in cases {
            assert_eq!(billed_nothing(&err), want, "{err:?}");
        }
    }

    #[test]
    fn an_attempt_leaves_the_other_providers_their_share_of_the_deadline() {
        let ms = Duration::from_millis;
        let cases = [
            // (configured, left, others) → timeout
            (60 * S, 10 * S, 1, 5 * S),
            (60 * S, 10 * S, 0, 10 * S),
            (60 * S, 9 * S, 2, 3 * S),
            (2 * S, 10 * S, 1, 2 * S),
            (60 * S, 120 * S, 1, 60 * S),
            (60 * S, Duration::ZERO, 3, ms(1)),
            (60 * S, 10 * S, usize::MAX, ms(1)),
        ];
        for (configured, left, others, want) in cases {
            assert_eq!(
                attempt_timeout(configured, left, others),
                want,
                "{configured:?} {left:?} {others}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn each_disposition_leads_to_its_action() {
        let t0 = Instant::now();
        let rng = FixedRng::new([0.5]);
        for row in rows(t0) {
            let o = FailedAttempt {
                error: &row.error,
                report: row.report.as_ref(),
                probe: row.probe,
                failures: row.failures,
                failed: row.failed,
            };
            assert_eq!(
                decide(&o, &rules(), t0, &rng),
                (row.expect)(t0),
                "{}",
                row.name
            );
        }
    }

    /// The breaker's re-trip rule, through the actions the decision makes: an opening
    /// extends, never shortens; a failed probe reopens for longer; a late answer from before
    /// the opening changes nothing; the probe's answer closes.
    #[tokio::test(start_paused = true)]
    async fn actions_move_the_breaker_by_its_re_trip_rule() {
        let t0 = Instant::now();
        let rng = FixedRng::new([0.5]);
        let settings = BreakerSettings {
            failure_threshold: 1,
            cooldown: 5 * S,
            cooldown_max: 60 * S,
        };
        let after = |b: &mut Breaker, e: Error, probe: bool, now: Instant| {
            let o = FailedAttempt {
                error: &e,
                report: None,
                probe,
                failures: 0,
                failed: 0,
            };
            b.apply(decide(&o, &rules(), now, &rng).breaker, now);
            b.state(now)
        };
        let throttled =
            |secs| err(ErrorKind::RateLimited, Some(429)).with_retry_after(Some(secs * S));
        let mut b = Breaker::new(settings);
        let open = |until| BreakerState::Open { until };
        assert_eq!(after(&mut b, throttled(20), false, t0), open(t0 + 20 * S));
        // An older, shorter answer does not move the reopening earlier.
        assert_eq!(after(&mut b, throttled(5), false, t0), open(t0 + 20 * S));
        // A longer one extends it.
        assert_eq!(after(&mut b, throttled(30), false, t0), open(t0 + 30 * S));
        // A late success of a request sent before the opening changes nothing.
        let ok = |b: &mut Breaker, probe| {
            b.apply(BreakerEvent::Answered { probe }, t0);
        };
        ok(&mut b, false);
        assert_eq!(b.state(t0), open(t0 + 30 * S));
        // At the reopening one probe goes; a transient failure of it re-trips for the
        // cooldown (5 s), the next failed probe for twice that.
        let t1 = t0 + 30 * S;
        assert!(b.acquire(t1) == crate::router::breaker::Allow::Probe);
        assert_eq!(
            after(&mut b, err(ErrorKind::Server, Some(503)), true, t1),
            open(t1 + 5 * S)
        );
        let t2 = t1 + 5 * S;
        b.acquire(t2);
        assert_eq!(
            after(&mut b, err(ErrorKind::Server, Some(503)), true, t2),
            open(t2 + 10 * S)
        );
        // The probe's answer, even a terminal one, closes it.
        let t3 = t2 + 10 * S;
        b.acquire(t3);
        assert_eq!(
            after(&mut b, err(ErrorKind::InvalidRequest, Some(400)), true, t3),
            BreakerState::Closed { failures: 0 }
        );
    }
}
