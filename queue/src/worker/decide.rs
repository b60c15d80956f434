//! What becomes of a claim once its handler has answered: a pure function of the answer, the
//! kind's contract and the time, tested by a table.

use std::time::Duration;

use tokio::time::Instant;

use crate::job::Job;
#[cfg(test)]
use llm_failover_core::ErrorKind;
use llm_failover_core::{Disposition, Error};

use super::Contract;

/// The queue operation that settles one claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Settle {
    /// The result passed its contract (or the kind has none): `complete`.
    Complete(String),
    /// The result failed its contract: `review`, with why.
    Review { result: String, reason: String },
    /// Not sent, or throttled, with a stated time: `snooze` until then; no failure counted.
    Snooze { until_ms: i64 },
    /// A fault that may pass: `fail` (backoff, or dead at the policy's limit).
    Fail(String),
    /// Can only fail again: `dead_now`.
    Dead(String),
}

/// The clock's readings at the moment of settling: the instant (the domain of
/// [`Error::retry_at`]) and the wall time in ms (the queue's).
#[derive(Clone, Copy, Debug)]
pub(crate) struct At {
    pub(crate) instant: Instant,
    pub(crate) wall_ms: i64,
}

/// Settles `answer` for `job`.
///
/// - `Ok(result)`: `Complete`, unless the contract refuses it (`Review`); a result that is
///   not JSON is a handler's bug that would repeat: `Dead`.
/// - A throttle (429, quota), or a request that ended because every provider is closed until
///   a stated time (an open breaker, a cooldown, a reopen past the request's `max_wait`):
///   `Snooze` until then — the job waits in the queue, no worker holds it and no failure is
///   counted, even when this request's own sends failed first: a provider that is down is
///   the provider's trouble, told by its breaker, and a job that happens to be the probe of a
///   long outage must not die of it. Without a stated time it is a `Fail`. (A request whose
///   sends keep failing ends with every attempt used, which names no time: a `Fail`.)
/// - A terminal error (a 4xx that can only repeat, bad payload, missing file): `Dead`.
/// - Anything else (5xx, timeouts, connection faults that outlasted the retries): `Fail`.
pub(crate) fn settle(
    answer: Result<String, &Error>,
    contract: Option<&Contract>,
    job: &Job,
    at: At,
) -> Settle {
    let err = match answer {
        Ok(result) => {
            if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(&result) {
                return Settle::Dead(format!("the handler's result is not JSON: {e}"));
            }
            return match contract.map(|check| check(job, &result)) {
                Some(Err(reason)) => Settle::Review { result, reason },
                _ => Settle::Complete(result),
            };
        }
        Err(err) => err,
    };
    let reason = reason(err);
    // Throttled, or ended because every provider is closed until a stated time.
    let waits = matches!(
        err.disposition(),
        Disposition::RateLimited | Disposition::QuotaExhausted
    ) || err.retry_at().is_some();
    match err.disposition() {
        _ if waits => match until_ms(err, at) {
            Some(until_ms) => Settle::Snooze { until_ms },
            None => Settle::Fail(reason),
        },
        Disposition::Terminal => Settle::Dead(reason),
        _ => Settle::Fail(reason),
    }
}

/// When the error says to come back, in wall ms: its `retry_at`, else now + `retry_after` —
/// rounded up to the next millisecond, never down to now: a job snoozed until the same
/// millisecond would be claimed again before the time it names (on a clock that only moves
/// when waited on, for ever).
fn until_ms(err: &Error, at: At) -> Option<i64> {
    let wait = match err.retry_at() {
        Some(when) => when.saturating_duration_since(at.instant),
        None => err.retry_after()?,
    };
    let ms = crate::job::millis(wait);
    let ms = if Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX)) < wait {
        ms.saturating_add(1)
    } else {
        ms
    };
    Some(at.wall_ms.saturating_add(ms))
}

/// The reason recorded with a failure: the error's kind code first (what a dead-letter
/// listing groups by), then its HTTP status and provider, then its message.
pub(crate) fn reason(err: &Error) -> String {
    let mut reason = err.kind().as_str().to_owned();
    if let Some(status) = err.status() {
        reason.push_str(&format!(" {status}"));
    }
    if let Some(provider) = err.provider() {
        reason.push_str(&format!(" from {provider}"));
    }
    reason.push_str(": ");
    reason.push_str(err.message());
    reason
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::JobState;
    use llm_failover_core::admission::Priority;
    use llm_failover_core::wing::errors;

    fn job() -> Job {
        Job {
            id: "a".into(),
            kind: "chat".into(),
            tenant: "t".into(),
            priority: Priority::Bulk,
            payload: "{}".into(),
            state: JobState::Running,
            attempt: 1,
            failures: 0,
            eligible_at_ms: 0,
            lease_until_ms: Some(60_000),
            worker: Some("w".into()),
            last_error: None,
            reason: None,
            result: None,
            created_at_ms: 0,
        }
    }

    const NOW_MS: i64 = 1_000_000;

    fn at(now: Instant) -> At {
        At {
            instant: now,
            wall_ms: NOW_MS,
        }
    }

    #[test]
    fn an_answer_is_complete_unless_its_contract_refuses_it_or_it_is_not_json() {
        let contract: Contract = Arc::new(|_: &Job, result: &str| {
            if result.contains("category") {
                Ok(())
            } else {
                Err("no category".to_owned())
            }
        });
        let not_json = "the handler's result is not JSON: expected value at line 1 column 1";
        let table = [
            (
                "not JSON",
                "plain text",
                None,
                Settle::Dead(not_json.into()),
            ),
            (
                "no contract",
                "\"x\"",
                None,
                Settle::Complete("\"x\"".into()),
            ),
            (
                "contract holds",
                r#"{"category":"x"}"#,
                Some(&contract),
                Settle::Complete(r#"{"category":"x"}"#.into()),
            ),
            (
                "contract refuses",
                "{}",
                Some(&contract),
                Settle::Review {
                    result: "{}".into(),
                    reason: "no category".into(),
                },
            ),
        ];
        for (case, result, contract, want) in table {
            let got = settle(Ok(result.to_owned()), contract, &job(), at(Instant::now()));
            assert_eq!(got, want, "{case}");
        }
    }

    #[test]
    fn an_error_snoozes_to_a_stated_time_dies_when_terminal_and_fails_otherwise() {
        let now = Instant::now();
        let secs = Duration::from_secs;
        let closed = errors::all_unavailable(now + secs(75), secs(75), vec![]);
        let boom = || Error::new(ErrorKind::Server, "boom").with_status(500);
        let sent_then_closed = || {
            errors::with_sends(
                errors::all_unavailable(now + secs(75), secs(75), vec![boom()]),
                1,
            )
        };
        let every_attempt_used = || errors::with_sends(errors::all_failed(vec![boom(), boom()]), 2);
        let table = [
            (
                "429 with Retry-After",
                Error::new(ErrorKind::RateLimited, "slow down").with_retry_after(Some(secs(30))),
                Settle::Snooze {
                    until_ms: NOW_MS + 30_000,
                },
            ),
            (
                "a reopen less than a millisecond away: the next millisecond, never now",
                errors::all_unavailable(
                    now + Duration::from_micros(400),
                    Duration::from_micros(400),
                    vec![],
                ),
                Settle::Snooze {
                    until_ms: NOW_MS + 1,
                },
            ),
            (
                "a stated 1.2 ms: rounded up",
                Error::new(ErrorKind::RateLimited, "soon")
                    .with_retry_after(Some(Duration::from_micros(1_200))),
                Settle::Snooze {
                    until_ms: NOW_MS + 2,
                },
            ),
            (
                "every provider closed",
                closed,
                Settle::Snooze {
                    until_ms: NOW_MS + 75_000,
                },
            ),
            (
                "sent, failed, then every provider closed (the probe of an outage)",
                sent_then_closed(),
                Settle::Snooze {
                    until_ms: NOW_MS + 75_000,
                },
            ),
            (
                "every attempt used",
                every_attempt_used(),
                Settle::Fail(reason(&every_attempt_used())),
            ),
            (
                "a budget spent until its window's reset: snoozed, never failed",
                errors::budget_exhausted(now + secs(7_200), secs(7_200)),
                Settle::Snooze {
                    until_ms: NOW_MS + 7_200_000,
                },
            ),
            (
                "quota until its reset",
                Error::new(ErrorKind::QuotaExhausted, "out of credit")
                    .with_retry_after(Some(secs(3_600))),
                Settle::Snooze {
                    until_ms: NOW_MS + 3_600_000,
                },
            ),
            (
                "429 with no time",
                Error::new(ErrorKind::RateLimited, "429 without a time"),
                Settle::Fail("rate_limited: 429 without a time".into()),
            ),
            (
                "terminal 4xx",
                Error::new(ErrorKind::InvalidRequest, "bad model").with_status(400),
                Settle::Dead("invalid_request 400: bad model".into()),
            ),
            ("5xx", boom(), Settle::Fail("server 500: boom".into())),
        ];
        for (case, err, want) in table {
            assert_eq!(settle(Err(&err), None, &job(), at(now)), want, "{case}");
        }
    }
}
