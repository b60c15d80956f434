//! What a worker reports about its claim — heartbeat, complete, snooze, fail, dead_now,
//! review — each fenced by `(id, attempt)` and `state = 'running'`; and the reaper of expired
//! leases.

use std::time::Duration;

use rusqlite::{OptionalExtension, Transaction, params};

use super::SqliteQueue;
use crate::job::{Failed, Fenced, Reaped, millis};
use crate::policy::{FailPolicy, lease_expired};
use llm_failover_core::Result;

impl SqliteQueue {
    /// [`Queue::heartbeat`](crate::Queue::heartbeat) on SQLite.
    pub(crate) async fn heartbeat(
        &self,
        id: &str,
        attempt: u32,
        lease: Duration,
        now_ms: i64,
    ) -> Result<Fenced> {
        let lease_until = now_ms.saturating_add(millis(lease));
        self.fenced("extending a lease", id, attempt, move |tx, id, attempt| {
            tx.execute(
                "UPDATE jobs SET lease_until = ?3
                 WHERE id = ?1 AND attempt = ?2 AND state = 'running'",
                params![id, attempt, lease_until],
            )
        })
        .await
    }

    /// [`Queue::heartbeat_all`](crate::Queue::heartbeat_all) on SQLite.
    pub(crate) async fn heartbeat_all(
        &self,
        claims: Vec<(String, u32)>,
        lease: Duration,
        now_ms: i64,
    ) -> Result<u64> {
        let lease_until = now_ms.saturating_add(millis(lease));
        self.write("extending leases", move |tx| {
            let mut extend = tx.prepare_cached(
                "UPDATE jobs SET lease_until = ?3
                 WHERE id = ?1 AND attempt = ?2 AND state = 'running'",
            )?;
            let mut extended = 0;
            for (id, attempt) in &claims {
                extended += extend.execute(params![id, attempt, lease_until])? as u64;
            }
            Ok(extended)
        })
        .await
    }

    /// [`Queue::complete_all`](crate::Queue::complete_all) on SQLite.
    pub(crate) async fn complete_all(
        &self,
        results: Vec<(String, u32, String)>,
    ) -> Result<Vec<Fenced>> {
        self.write("completing", move |tx| {
            let mut complete = tx.prepare_cached(
                "UPDATE jobs SET state = 'done', result = ?3, lease_until = NULL
                 WHERE id = ?1 AND attempt = ?2 AND state = 'running'",
            )?;
            results
                .iter()
                .map(|(id, attempt, result)| {
                    Ok(match complete.execute(params![id, attempt, result])? {
                        0 => Fenced::Lost,
                        _ => Fenced::Applied,
                    })
                })
                .collect()
        })
        .await
    }

    /// [`Queue::snooze`](crate::Queue::snooze) on SQLite.
    pub(crate) async fn snooze(&self, id: &str, attempt: u32, until_ms: i64) -> Result<Fenced> {
        self.fenced("snoozing", id, attempt, move |tx, id, attempt| {
            tx.execute(
                "UPDATE jobs SET state = 'ready', eligible_at = ?3, lease_until = NULL
                 WHERE id = ?1 AND attempt = ?2 AND state = 'running'",
                params![id, attempt, until_ms],
            )
        })
        .await
    }

    /// [`Queue::fail`](crate::Queue::fail) on SQLite.
    pub(crate) async fn fail(
        &self,
        id: &str,
        attempt: u32,
        reason: &str,
        now_ms: i64,
        policy: &FailPolicy,
    ) -> Result<Failed> {
        let (id, reason, policy) = (id.to_owned(), reason.to_owned(), *policy);
        self.write("recording a failure", move |tx| {
            let failures: Option<u32> = tx
                .query_row(
                    "SELECT failures FROM jobs
                     WHERE id = ?1 AND attempt = ?2 AND state = 'running'",
                    params![id, attempt],
                    |r| r.get(0),
                )
                .optional()?;
            let Some(failures) = failures else {
                return Ok(Failed::Lost);
            };
            let (failures, dead) = policy.count_failure(failures, &reason);
            if let Some(why) = dead {
                make_dead(tx, &id, failures, &reason, &why)?;
                return Ok(Failed::Dead);
            }
            let eligible_at_ms = now_ms.saturating_add(policy.backoff_ms(failures));
            tx.execute(
                "UPDATE jobs SET state = 'ready', failures = ?2, last_error = ?3,
                                 eligible_at = ?4, lease_until = NULL
                 WHERE id = ?1",
                params![id, failures, reason, eligible_at_ms],
            )?;
            Ok(Failed::Retry { eligible_at_ms })
        })
        .await
    }

    /// [`Queue::dead_now`](crate::Queue::dead_now) on SQLite.
    pub(crate) async fn dead_now(&self, id: &str, attempt: u32, reason: &str) -> Result<Fenced> {
        let reason = reason.to_owned();
        self.fenced("dead-lettering", id, attempt, move |tx, id, attempt| {
            tx.execute(
                "UPDATE jobs SET state = 'dead', failures = failures + 1, last_error = ?3,
                                 reason = ?3, lease_until = NULL
                 WHERE id = ?1 AND attempt = ?2 AND state = 'running'",
                params![id, attempt, reason],
            )
        })
        .await
    }

    /// [`Queue::review`](crate::Queue::review) on SQLite.
    pub(crate) async fn review(
        &self,
        id: &str,
        attempt: u32,
        result: &str,
        reason: &str,
    ) -> Result<Fenced> {
        let (result, reason) = (result.to_owned(), reason.to_owned());
        self.fenced("sending to review", id, attempt, move |tx, id, attempt| {
            tx.execute(
                "UPDATE jobs SET state = 'review', result = ?3, reason = ?4, lease_until = NULL
                 WHERE id = ?1 AND attempt = ?2 AND state = 'running'",
                params![id, attempt, result, reason],
            )
        })
        .await
    }

    /// [`Queue::reap`](crate::Queue::reap) on SQLite.
    pub(crate) async fn reap(&self, now_ms: i64, policy: &FailPolicy) -> Result<Reaped> {
        let policy = *policy;
        self.write("reaping expired leases", move |tx| {
            let expired: Vec<(String, u32, Option<String>)> = tx
                .prepare_cached(
                    "SELECT id, failures, worker FROM jobs
                     WHERE state = 'running' AND lease_until <= ?1",
                )?
                .query_map(params![now_ms], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect::<rusqlite::Result<_>>()?;
            let mut reaped = Reaped::default();
            for (id, failures, worker) in expired {
                let error = lease_expired(worker.as_deref());
                let (failures, dead) = policy.count_failure(failures, &error);
                if let Some(why) = dead {
                    make_dead(tx, &id, failures, &error, &why)?;
                    reaped.dead += 1;
                } else {
                    tx.execute(
                        "UPDATE jobs SET state = 'ready', failures = ?2, last_error = ?3,
                                         eligible_at = min(eligible_at, ?4), lease_until = NULL
                         WHERE id = ?1",
                        params![id, failures, error, now_ms],
                    )?;
                    reaped.requeued += 1;
                }
            }
            Ok(reaped)
        })
        .await
    }
}

/// Marks job `id` dead with `failures` counted, `error` as its last error and `why` as reason.
fn make_dead(
    tx: &Transaction<'_>,
    id: &str,
    failures: u32,
    error: &str,
    why: &str,
) -> rusqlite::Result<usize> {
    tx.execute(
        "UPDATE jobs SET state = 'dead', failures = ?2, last_error = ?3, reason = ?4,
                         lease_until = NULL
         WHERE id = ?1",
        params![id, failures, error, why],
    )
}
