//! What a worker reports about its claim — heartbeat, complete, snooze, fail, dead_now,
//! review — each fenced by `(id, attempt)` and `state = 'running'`; and the reaper of expired
//! leases.
//!
//! Each is one statement, except `fail` and `reap`, which read the failure count, let
//! [`FailPolicy`] decide in Rust, and write the decision in a second statement fenced by the
//! same condition plus the count read: a job that changed in between is not touched (a
//! running claim's count changes only as it leaves `running`), so no lock is held across the
//! round trips and the answer is the one the fence gives.

use std::collections::HashSet;
use std::time::Duration;

use tokio_postgres::Row;
use tokio_postgres::types::{ToSql, Type};

use super::{PostgresQueue, column, no_nul};
use crate::job::{Failed, Fenced, Reaped, millis};
use crate::policy::{FailPolicy, lease_expired};
use llm_failover_core::Result;

impl PostgresQueue {
    /// [`Queue::heartbeat`](crate::Queue::heartbeat) on PostgreSQL. A text holding a NUL character, which PostgreSQL cannot
    /// store, is a `Config` error.
    pub(crate) async fn heartbeat(
        &self,
        id: &str,
        attempt: u32,
        lease: Duration,
        now_ms: i64,
    ) -> Result<Fenced> {
        let lease_until = now_ms.saturating_add(millis(lease));
        self.fenced(
            "extending a lease",
            "UPDATE jobs SET lease_until = $3
             WHERE id = $1 AND attempt = $2 AND state = 'running'",
            id,
            attempt,
            &[(&lease_until, Type::INT8)],
        )
        .await
    }

    /// [`Queue::heartbeat_all`](crate::Queue::heartbeat_all) on PostgreSQL: one
    /// statement. A claim whose id holds a NUL character (which no stored job can have) is
    /// left out.
    pub(crate) async fn heartbeat_all(
        &self,
        claims: Vec<(String, u32)>,
        lease: Duration,
        now_ms: i64,
    ) -> Result<u64> {
        let lease_until = now_ms.saturating_add(millis(lease));
        let kept = || claims.iter().filter(|(id, _)| !id.contains('\0'));
        let ids: Vec<&str> = kept().map(|(id, _)| id.as_str()).collect();
        let attempts: Vec<i64> = kept().map(|(_, a)| i64::from(*a)).collect();
        self.execute(
            "extending leases",
            "UPDATE jobs SET lease_until = $3
             FROM unnest($1::text[], $2::bigint[]) AS u(id, attempt)
             WHERE jobs.id = u.id AND jobs.attempt = u.attempt AND jobs.state = 'running'",
            &[
                (&ids, Type::TEXT_ARRAY),
                (&attempts, Type::INT8_ARRAY),
                (&lease_until, Type::INT8),
            ],
        )
        .await
    }

    /// [`Queue::complete_all`](crate::Queue::complete_all) on PostgreSQL. The same claim given twice
    /// in one call is applied once, with its first result. A text holding a NUL character, which PostgreSQL cannot
    /// store, is a `Config` error.
    pub(crate) async fn complete_all(
        &self,
        results: Vec<(String, u32, String)>,
    ) -> Result<Vec<Fenced>> {
        for (id, _, _) in &results {
            no_nul(id, || "job id".to_owned())?;
        }
        // Each claim once, with its first result: the later ones are `Lost` whatever happens.
        let mut seen = HashSet::new();
        let first: Vec<bool> = results
            .iter()
            .map(|(id, attempt, _)| seen.insert((id.as_str(), *attempt)))
            .collect();
        let sent = || results.iter().zip(&first).filter(|(_, first)| **first);
        let ids: Vec<&str> = sent().map(|((id, _, _), _)| id.as_str()).collect();
        let attempts: Vec<i64> = sent().map(|((_, a, _), _)| i64::from(*a)).collect();
        let texts: Vec<&str> = sent().map(|((_, _, r), _)| r.as_str()).collect();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self
            .query(
                "completing",
                "UPDATE jobs SET state = 'done', result = u.result, lease_until = NULL
                 FROM unnest($1::text[], $2::bigint[], $3::text[]) AS u(id, attempt, result)
                 WHERE jobs.id = u.id AND jobs.attempt = u.attempt AND jobs.state = 'running'
                 RETURNING jobs.id, jobs.attempt",
                &[
                    (&ids, Type::TEXT_ARRAY),
                    (&attempts, Type::INT8_ARRAY),
                    (&texts, Type::TEXT_ARRAY),
                ],
            )
            .await?;
        let mut applied = HashSet::new();
        for row in &rows {
            let id: String = column(&self.pool, row, 0)?;
            applied.insert((id, column::<i64>(&self.pool, row, 1)?));
        }
        Ok(results
            .iter()
            .zip(first)
            .map(|((id, attempt, _), first)| {
                match first && applied.contains(&(id.clone(), i64::from(*attempt))) {
                    true => Fenced::Applied,
                    false => Fenced::Lost,
                }
            })
            .collect())
    }

    /// [`Queue::snooze`](crate::Queue::snooze) on PostgreSQL. A text holding a NUL character, which PostgreSQL cannot
    /// store, is a `Config` error.
    pub(crate) async fn snooze(&self, id: &str, attempt: u32, until_ms: i64) -> Result<Fenced> {
        self.fenced(
            "snoozing",
            "UPDATE jobs SET state = 'ready', eligible_at = $3, lease_until = NULL
             WHERE id = $1 AND attempt = $2 AND state = 'running'",
            id,
            attempt,
            &[(&until_ms, Type::INT8)],
        )
        .await
    }

    /// [`Queue::fail`](crate::Queue::fail) on PostgreSQL. A text holding a NUL character, which PostgreSQL cannot
    /// store, is a `Config` error.
    pub(crate) async fn fail(
        &self,
        id: &str,
        attempt: u32,
        reason: &str,
        now_ms: i64,
        policy: &FailPolicy,
    ) -> Result<Failed> {
        no_nul(reason, || "failure reason".to_owned())?;
        let doing = "recording a failure";
        let rows = self
            .fenced_query(
                doing,
                "SELECT failures FROM jobs WHERE id = $1 AND attempt = $2 AND state = 'running'",
                id,
                attempt,
                &[],
            )
            .await?;
        let Some(row) = rows.first() else {
            return Ok(Failed::Lost);
        };
        let before: i64 = column(&self.pool, row, 0)?;
        let (failures, dead) = policy.count_failure(count(before), reason);
        let (state, eligible_at, answer) = match dead {
            Some(_) => ("dead", None, Failed::Dead),
            None => {
                let at = now_ms.saturating_add(policy.backoff_ms(failures));
                ("ready", Some(at), Failed::Retry { eligible_at_ms: at })
            }
        };
        // Fenced as the read was, and on the count read: a claim that moved on is not touched.
        let changed = self
            .fenced(
                doing,
                "UPDATE jobs SET state = $4, failures = $5, last_error = $6,
                                 reason = coalesce($7, reason),
                                 eligible_at = coalesce($8, eligible_at), lease_until = NULL
                 WHERE id = $1 AND attempt = $2 AND state = 'running' AND failures = $3",
                id,
                attempt,
                &[
                    (&before, Type::INT8),
                    (&state, Type::TEXT),
                    (&i64::from(failures), Type::INT8),
                    (&reason, Type::TEXT),
                    (&dead, Type::TEXT),
                    (&eligible_at, Type::INT8),
                ],
            )
            .await?;
        Ok(if changed.is_lost() {
            Failed::Lost
        } else {
            answer
        })
    }

    /// [`Queue::dead_now`](crate::Queue::dead_now) on PostgreSQL. A text holding a NUL character, which PostgreSQL cannot
    /// store, is a `Config` error.
    pub(crate) async fn dead_now(&self, id: &str, attempt: u32, reason: &str) -> Result<Fenced> {
        no_nul(reason, || "dead letter reason".to_owned())?;
        self.fenced(
            "dead-lettering",
            "UPDATE jobs SET state = 'dead', failures = failures + 1, last_error = $3,
                             reason = $3, lease_until = NULL
             WHERE id = $1 AND attempt = $2 AND state = 'running'",
            id,
            attempt,
            &[(&reason, Type::TEXT)],
        )
        .await
    }

    /// [`Queue::review`](crate::Queue::review) on PostgreSQL. A text holding a NUL character, which PostgreSQL cannot
    /// store, is a `Config` error.
    pub(crate) async fn review(
        &self,
        id: &str,
        attempt: u32,
        result: &str,
        reason: &str,
    ) -> Result<Fenced> {
        no_nul(result, || format!("result of job {id:?}"))?;
        no_nul(reason, || "review reason".to_owned())?;
        self.fenced(
            "sending to review",
            "UPDATE jobs SET state = 'review', result = $3, reason = $4, lease_until = NULL
             WHERE id = $1 AND attempt = $2 AND state = 'running'",
            id,
            attempt,
            &[(&result, Type::TEXT), (&reason, Type::TEXT)],
        )
        .await
    }

    /// [`Queue::reap`](crate::Queue::reap) on PostgreSQL. A job whose lease was extended, or that
    /// was settled, while the reaper decided is left alone; two reapers at once count each
    /// expired lease once. A text holding a NUL character, which PostgreSQL cannot
    /// store, is a `Config` error.
    pub(crate) async fn reap(&self, now_ms: i64, policy: &FailPolicy) -> Result<Reaped> {
        let doing = "reaping expired leases";
        let expired = self
            .query(
                doing,
                "SELECT id, attempt, failures, worker FROM jobs
                 WHERE state = 'running' AND lease_until <= $1",
                &[(&now_ms, Type::INT8)],
            )
            .await?;
        if expired.is_empty() {
            return Ok(Reaped::default());
        }
        let mut plan = ReapPlan::default();
        for row in &expired {
            let worker: Option<String> = column(&self.pool, row, 3)?;
            let error = lease_expired(worker.as_deref());
            let before: i64 = column(&self.pool, row, 2)?;
            let (failures, dead) = policy.count_failure(count(before), &error);
            plan.ids.push(column(&self.pool, row, 0)?);
            plan.attempts.push(column(&self.pool, row, 1)?);
            plan.before.push(before);
            plan.failures.push(i64::from(failures));
            plan.states
                .push(if dead.is_some() { "dead" } else { "ready" });
            plan.errors.push(error);
            plan.reasons.push(dead);
        }
        self.apply_reap(now_ms, &plan).await
    }

    /// Writes the reaper's decisions, each fenced by the claim, its count and its expiry.
    async fn apply_reap(&self, now_ms: i64, plan: &ReapPlan) -> Result<Reaped> {
        let rows = self
            .query(
                "reaping expired leases",
                "UPDATE jobs SET state = u.state, failures = u.failures, last_error = u.error,
                                 reason = coalesce(u.reason, jobs.reason),
                                 eligible_at = LEAST(jobs.eligible_at, $1),
                                 lease_until = NULL
                 FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::text[],
                             $7::text[], $8::text[])
                      AS u(id, attempt, before, failures, state, error, reason)
                 WHERE jobs.id = u.id AND jobs.attempt = u.attempt AND jobs.failures = u.before
                   AND jobs.state = 'running' AND jobs.lease_until <= $1
                 RETURNING jobs.state",
                &[
                    (&now_ms, Type::INT8),
                    (&plan.ids, Type::TEXT_ARRAY),
                    (&plan.attempts, Type::INT8_ARRAY),
                    (&plan.before, Type::INT8_ARRAY),
                    (&plan.failures, Type::INT8_ARRAY),
                    (&plan.states, Type::TEXT_ARRAY),
                    (&plan.errors, Type::TEXT_ARRAY),
                    (&plan.reasons, Type::TEXT_ARRAY),
                ],
            )
            .await?;
        let mut reaped = Reaped::default();
        for row in &rows {
            match column::<String>(&self.pool, row, 0)?.as_str() {
                "dead" => reaped.dead += 1,
                _ => reaped.requeued += 1,
            }
        }
        Ok(reaped)
    }

    /// A fenced update of claim `(id, attempt)` (`$1`, `$2`; `extra` from `$3`): `Applied`
    /// when it changed the row, `Lost` when not.
    async fn fenced(
        &self,
        doing: &str,
        sql: &str,
        id: &str,
        attempt: u32,
        extra: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Fenced> {
        no_nul(id, || "job id".to_owned())?;
        let attempt = i64::from(attempt);
        let mut params: Vec<(&(dyn ToSql + Sync), Type)> =
            vec![(&id, Type::TEXT), (&attempt, Type::INT8)];
        params.extend(extra.iter().cloned());
        Ok(match self.execute(doing, sql, &params).await? {
            0 => Fenced::Lost,
            _ => Fenced::Applied,
        })
    }

    /// As [`fenced`](Self::fenced), for a read: the rows of claim `(id, attempt)`.
    async fn fenced_query(
        &self,
        doing: &str,
        sql: &str,
        id: &str,
        attempt: u32,
        extra: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>> {
        no_nul(id, || "job id".to_owned())?;
        let attempt = i64::from(attempt);
        let mut params: Vec<(&(dyn ToSql + Sync), Type)> =
            vec![(&id, Type::TEXT), (&attempt, Type::INT8)];
        params.extend(extra.iter().cloned());
        self.query(doing, sql, &params).await
    }
}

/// The reaper's decisions, column by column, for one `unnest`.
#[derive(Default)]
struct ReapPlan {
    ids: Vec<String>,
    attempts: Vec<i64>,
    before: Vec<i64>,
    failures: Vec<i64>,
    states: Vec<&'static str>,
    errors: Vec<String>,
    reasons: Vec<Option<String>>,
}

/// A stored failure count as the policy counts it.
fn count(stored: i64) -> u32 {
    u32::try_from(stored.max(0)).unwrap_or(u32::MAX)
}
