//! One worker run: claim while there is room, settle what finished, renew the leases of what
//! runs, sleep only when nothing runs. While jobs are in flight the loop wakes when one
//! finishes, and when the heartbeat is due — waited for with [`Clock::wait_for_time`], which
//! never moves an injected manual clock itself: such a clock only moves when the worker is
//! truly idle (or a job's own logic sleeps), and the leases follow it.
//!
//! [`Clock::wait_for_time`]: llm_failover_core::clock::Clock::wait_for_time

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use tokio::task::{Id, JoinError};

use super::decide::{self, At, Settle};
use super::report::{Ended, WorkerReport};
use super::{Answered, Inner, Running, run_job};
use crate::job::{Failed, Fenced, Job, wall_ms};
use llm_failover_core::batch::BudgetSpent;
use llm_failover_core::batch::Stop;
use llm_failover_core::observe::{Event, JobSettled, Settled};
use llm_failover_core::{Error, ErrorKind, Result};

type Finished = (Id, std::result::Result<(Job, Answered), JoinError>);

pub(super) struct Run<'a> {
    inner: &'a Arc<Inner>,
    running: Running,
    /// The claim each task runs, to release it on abort.
    claims: HashMap<Id, (String, u32)>,
    finished: Vec<Finished>,
    report: WorkerReport,
    /// When a job last reached `done`, `review` or `dead` (the patience counts from here).
    last_progress: Instant,
    next_reap: Instant,
    /// When to renew the leases of the jobs in flight next (every third of the lease).
    next_beat: Instant,
    /// A budget every job spends is spent (the environment's, every provider's; not one
    /// tenant's): nothing more is claimed, the run ends once what runs has settled.
    budget_stop: bool,
}

impl<'a> Run<'a> {
    pub(super) fn new(inner: &'a Arc<Inner>) -> Self {
        let now = inner.clock.now();
        Run {
            next_beat: now + heartbeat_every(inner.lease),
            inner,
            running: Running::new(),
            claims: HashMap::new(),
            finished: Vec::new(),
            report: WorkerReport::default(),
            last_progress: now,
            next_reap: now,
            budget_stop: false,
        }
    }

    pub(super) async fn go(mut self, stop: &Stop) -> Result<WorkerReport> {
        match self.turns(stop).await {
            Ok(ended) => {
                self.report.ended = ended;
                let stats = self.inner.queue.stats(self.wall_ms()).await?;
                self.report.left = stats.ready + stats.running;
                Ok(self.report)
            }
            Err(e) => {
                // The queue failed: what runs cannot be settled. Its leases expire and the
                // reaper (of this or another worker, later) gives the jobs back.
                self.running.abort_all();
                Err(e)
            }
        }
    }

    async fn turns(&mut self, stop: &Stop) -> Result<Ended> {
        loop {
            self.settle_finished().await?;
            if stop.is_aborted() {
                self.release().await?;
                return Ok(Ended::Stopped);
            }
            if stop.is_stopped() || self.budget_stop {
                if self.running.is_empty() {
                    return Ok(if self.budget_stop && !stop.is_stopped() {
                        Ended::BudgetSpent
                    } else {
                        Ended::Stopped
                    });
                }
                self.wait_for_one(stop).await?;
                continue;
            }
            self.reap_if_due().await?;
            if self.claim().await? > 0 {
                continue;
            }
            if !self.running.is_empty() {
                self.wait_for_one(stop).await?;
                continue;
            }
            if let Some(ended) = self.idle(stop).await? {
                return Ok(ended);
            }
        }
    }

    fn wall_ms(&self) -> i64 {
        wall_ms(self.inner.clock.wall())
    }

    /// Runs the queue operation `op` (given the wall time of each try) as
    /// [`patiently`](crate::patiently) does, for the worker's database patience,
    /// counting each failed try.
    async fn retrying<T, F, Fut>(&mut self, op: F) -> Result<T>
    where
        F: Fn(i64) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let name = &self.inner.name;
        let errors = &mut self.report.queue_errors;
        crate::patiently(
            self.inner.clock.as_ref(),
            self.inner.db_patience,
            op,
            |err, wait| {
                *errors += 1;
                tracing::warn!(
                    worker = %name,
                    error = %err,
                    retry_in_ms = wait.as_millis() as u64,
                    "the job queue failed; trying again"
                );
            },
        )
        .await
    }

    /// Claims as many jobs as there is room for and starts them; how many.
    async fn claim(&mut self) -> Result<usize> {
        let free = self.inner.concurrency.saturating_sub(self.running.len());
        if free == 0 {
            return Ok(0);
        }
        let inner = self.inner;
        let jobs = self
            .retrying(|now| inner.queue.claim_many(&inner.name, free, inner.lease, now))
            .await?;
        let n = jobs.len();
        for job in jobs {
            let claim = (job.id.clone(), job.attempt);
            let handle = self.running.spawn(run_job(inner.clone(), job));
            self.claims.insert(handle.id(), claim);
        }
        self.report.claimed += n as u64;
        Ok(n)
    }

    /// Waits until a job finishes, or the run is aborted; renews the leases of every job in
    /// flight whenever the heartbeat is due meanwhile.
    async fn wait_for_one(&mut self, stop: &Stop) -> Result<()> {
        let clock = self.inner.clock.clone();
        tokio::select! {
            Some(done) = self.running.join_next_with_id() => self.finished.push(flatten(done)),
            () = stop.aborted() => {}
            () = clock.wait_for_time(self.next_beat) => self.renew().await?,
        }
        Ok(())
    }

    /// Extends the lease of every job this worker holds, in one write.
    async fn renew(&mut self) -> Result<()> {
        self.next_beat = self.inner.clock.now() + heartbeat_every(self.inner.lease);
        if self.claims.is_empty() {
            return Ok(());
        }
        let claims: Vec<(String, u32)> = self.claims.values().cloned().collect();
        let (queue, lease) = (&self.inner.queue, self.inner.lease);
        let extended = self
            .retrying(|now| queue.heartbeat_all(claims.clone(), lease, now))
            .await?;
        // A claim not extended was reaped (this worker stalled past its lease): its result
        // will be refused when it comes.
        let stale = claims.len() as u64 - extended.min(claims.len() as u64);
        if stale > 0 {
            tracing::warn!(worker = %self.inner.name, stale, "claims lost before their heartbeat");
        }
        self.report.heartbeats += 1;
        Ok(())
    }

    /// Nothing runs and nothing could be claimed: ends the run if it is drained or out of
    /// patience, else sleeps until the next job is eligible (at most the idle poll).
    async fn idle(&mut self, stop: &Stop) -> Result<Option<Ended>> {
        let now_ms = self.wall_ms();
        let queue = &self.inner.queue;
        let stats = self.retrying(|now| queue.stats(now)).await?;
        let mut wait = self.inner.idle_poll;
        if let Some(patience) = self.inner.patience {
            if stats.ready + stats.running == 0 {
                return Ok(Some(Ended::Drained));
            }
            // A budget is spent and nothing may run before it starts again (a second's
            // leeway: its jobs' snoozes were reckoned a moment apart): the run ends now, its
            // jobs snoozed for a run after the reset, not after the patience.
            if let Some(b) = &self.report.budget_spent
                && stats.next_eligible_at_ms.is_none_or(|next| {
                    next.saturating_add(1_000) >= i64::try_from(b.until_unix_ms).unwrap_or(i64::MAX)
                })
            {
                return Ok(Some(Ended::BudgetSpent));
            }
            let waited = self
                .inner
                .clock
                .now()
                .saturating_duration_since(self.last_progress);
            if waited >= patience {
                return Ok(Some(Ended::OutOfPatience));
            }
            wait = wait.min(patience - waited);
        }
        if let Some(next) = stats.next_eligible_at_ms {
            let until = Duration::from_millis(next.saturating_sub(now_ms).max(1) as u64);
            wait = wait.min(until);
        }
        let reap_in = self
            .next_reap
            .saturating_duration_since(self.inner.clock.now());
        wait = wait.min(reap_in.max(Duration::from_millis(1)));
        tokio::select! {
            () = self.inner.clock.sleep_until(self.inner.clock.now() + wait) => {}
            () = stop.stopped() => {}
        }
        Ok(None)
    }

    /// Every so often (a tenth of the lease, between 1 s and 1 min: 3 s by default), expired
    /// leases back — so a dead worker's jobs are claimed again at most that long after their
    /// lease ends, itself at most a lease after the worker's last renewal.
    async fn reap_if_due(&mut self) -> Result<()> {
        let now = self.inner.clock.now();
        if now < self.next_reap {
            return Ok(());
        }
        let every = reap_every(self.inner.lease);
        self.next_reap = now + every;
        // Its own jobs first: a job whose lease ran out while its logic jumped a test clock
        // (or this process was paused) is still this worker's.
        self.renew().await?;
        let (queue, policy) = (&self.inner.queue, &self.inner.policy);
        let reaped = self.retrying(|now| queue.reap(now, policy)).await?;
        self.report.reaped += reaped.requeued + reaped.dead;
        if reaped.dead > 0 {
            self.last_progress = now;
        }
        Ok(())
    }

    /// Settles every job that has finished: the accepted results in one write.
    async fn settle_finished(&mut self) -> Result<()> {
        while let Some(done) = self.running.try_join_next_with_id() {
            self.finished.push(flatten(done));
        }
        if self.finished.is_empty() {
            return Ok(());
        }
        let at = At {
            instant: self.inner.clock.now(),
            wall_ms: self.wall_ms(),
        };
        let (mut completions, mut kinds) = (Vec::new(), Vec::new());
        for (id, done) in std::mem::take(&mut self.finished) {
            self.claims.remove(&id);
            let Ok((job, answer)) = done else {
                continue; // cancelled: only on abort, whose release settles it
            };
            let contract = self
                .inner
                .kinds
                .get(&job.kind)
                .and_then(|k| k.contract.as_ref());
            let settle = match answer {
                Answered::Later { until_ms } => Settle::Snooze { until_ms },
                Answered::Now(answer) => {
                    if let Err(e) = &answer
                        && e.kind() == ErrorKind::BudgetExhausted
                    {
                        self.budget_spent(e, at);
                    }
                    decide::settle(answer.as_ref().map(String::clone), contract, &job, at)
                }
            };
            match settle {
                Settle::Complete(result) => {
                    kinds.push(job.kind);
                    completions.push((job.id, job.attempt, result));
                }
                other => self.apply(&job, other).await?,
            }
        }
        if !completions.is_empty() {
            let queue = &self.inner.queue;
            let outcomes = self
                .retrying(|_| queue.complete_all(completions.clone()))
                .await?;
            for (outcome, kind) in outcomes.into_iter().zip(&kinds) {
                self.count(outcome, kind, Settled::Completed);
            }
        }
        Ok(())
    }

    /// Notes a job held back by a budget (snoozed to its reset by its settlement). Unless
    /// it is one tenant's, every job would be held back: nothing more is claimed.
    fn budget_spent(&mut self, err: &Error, at: At) {
        if err.code() != Some("tenant_budget") {
            self.budget_stop = true;
        }
        let b = self.report.budget_spent.get_or_insert_with(|| {
            let until = err
                .retry_at()
                .map(|t| t.saturating_duration_since(at.instant))
                .or_else(|| err.retry_after())
                .unwrap_or_default();
            tracing::warn!(
                worker = %self.inner.name,
                error = %err,
                "a budget is spent: its jobs wait for its reset"
            );
            let wall = std::time::UNIX_EPOCH
                + Duration::from_millis(u64::try_from(at.wall_ms).unwrap_or_default());
            BudgetSpent::new(err.message(), wall, until)
        });
        b.items += 1;
    }

    /// Applies one settlement other than a completion.
    async fn apply(&mut self, job: &Job, settle: Settle) -> Result<()> {
        let queue = &self.inner.queue.clone();
        let (id, attempt) = (job.id.as_str(), job.attempt);
        match settle {
            Settle::Complete(result) => {
                let outcome = self
                    .retrying(|_| queue.complete(id, attempt, &result))
                    .await?;
                self.count(outcome, &job.kind, Settled::Completed);
            }
            Settle::Review { result, reason } => {
                let outcome = self
                    .retrying(|_| queue.review(id, attempt, &result, &reason))
                    .await?;
                self.count(outcome, &job.kind, Settled::Reviewed);
            }
            Settle::Snooze { until_ms } => {
                let outcome = self
                    .retrying(|_| queue.snooze(id, attempt, until_ms))
                    .await?;
                self.count(outcome, &job.kind, Settled::Snoozed);
            }
            Settle::Dead(reason) => {
                let outcome = self
                    .retrying(|_| queue.dead_now(id, attempt, &reason))
                    .await?;
                self.count(outcome, &job.kind, Settled::Dead);
            }
            Settle::Fail(reason) => {
                let policy = self.inner.policy;
                let failed = self
                    .retrying(|now| queue.fail(id, attempt, &reason, now, &policy))
                    .await?;
                let (outcome, settled) = match failed {
                    Failed::Lost => (Fenced::Lost, Settled::Retried),
                    Failed::Retry { .. } => (Fenced::Applied, Settled::Retried),
                    Failed::Dead => (Fenced::Applied, Settled::Dead),
                };
                self.count(outcome, &job.kind, settled);
            }
        }
        Ok(())
    }

    /// Counts a settlement of a job of `kind` (`settled` when applied, refused when `outcome`
    /// says the claim was stale) and tells the client's observers. A job that ended (done,
    /// review, dead) is progress; a snooze or a retry is not.
    fn count(&mut self, outcome: Fenced, kind: &str, settled: Settled) {
        let settled = if outcome.is_lost() {
            Settled::Refused
        } else {
            settled
        };
        let r = &mut self.report;
        let field = match settled {
            Settled::Completed => &mut r.completed,
            Settled::Reviewed => &mut r.reviewed,
            Settled::Snoozed => &mut r.snoozed,
            Settled::Retried => &mut r.failed,
            Settled::Dead => &mut r.dead,
            _ => &mut r.lost,
        };
        *field += 1;
        if matches!(
            settled,
            Settled::Completed | Settled::Reviewed | Settled::Dead
        ) {
            self.last_progress = self.inner.clock.now();
        }
        self.inner
            .client
            .observe(&Event::JobSettled(JobSettled::new(kind, settled)));
    }

    /// On abort: drops what runs and gives its leases back (no failure counted).
    async fn release(&mut self) -> Result<()> {
        self.running.abort_all();
        while self.running.join_next().await.is_some() {}
        let now_ms = self.wall_ms();
        for (_, (id, attempt)) in std::mem::take(&mut self.claims) {
            if self.inner.queue.snooze(&id, attempt, now_ms).await? == Fenced::Applied {
                self.report.released += 1;
            }
        }
        Ok(())
    }
}

/// How often a worker reaps expired leases (of any worker).
fn reap_every(lease: Duration) -> Duration {
    (lease / 10).clamp(Duration::from_secs(1), Duration::from_secs(60))
}

/// How often the leases of jobs in flight are renewed: a third of the lease (at least 10 ms),
/// so two renewals can be late before another worker may take a job.
fn heartbeat_every(lease: Duration) -> Duration {
    (lease / 3).max(Duration::from_millis(10))
}

fn flatten(done: std::result::Result<(Id, (Job, Answered)), JoinError>) -> Finished {
    match done {
        Ok((id, value)) => (id, Ok(value)),
        Err(e) => (e.id(), Err(e)),
    }
}
