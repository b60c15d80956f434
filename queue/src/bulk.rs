//! The bulk lane on the queue: a batch's chat items sent through a provider's Batch API
//! ([`llm_failover_core::bulk`]), durably.
//!
//! 1. **Set aside** ([`set_aside`], before the worker starts): the eligible chat items are
//!    claimed, planned into remote batches, and for each batch one `bulk-create` job is
//!    enqueued naming its items — *then* the items are snoozed past the providers' 24-hour
//!    window, so no worker sends them live while their batch runs. A crash before the
//!    create job is enqueued leaves the items to come back when their claims expire, as any
//!    claim; one after leaves the create job to run.
//! 2. **Create** (a `bulk-create` job): creates the remote batch and enqueues its
//!    `bulk-poll` job with the provider's id of it — the record that it exists. A create job
//!    run again (a crash in between) finds the poll job and does nothing: a batch is
//!    created once for its items (but for the instant between the provider's answer and
//!    the enqueue).
//! 3. **Poll** (a `bulk-poll` job): asks the provider where the batch is and, until it is
//!    final, asks to be run again later ([`JobContext::later`]: snoozed, no worker waits).
//!    A killed process's rerun polls the same batch.
//! 4. **Settle**: when it is final, its items are claimed back by id
//!    ([`Queue::claim_ids`]) and each settled by what the batch said: an answer completes it
//!    (its line says `"lane":"provider-batch"`); a terminal error (a 400) ends it dead with
//!    the provider's message; a retryable error, an item the batch expired, cancelled or
//!    never answered, goes back to the queue now, and the live lane answers it in the same
//!    run.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::job::{Fenced, Job, NewJob, millis, wall_ms};
use crate::worker::decide::reason;
use crate::{Handler, JobContext, Queue};
use llm_failover_core::admission::Priority;
use llm_failover_core::batch::{Answer, BatchRequest, ItemOutcome, Lane};
use llm_failover_core::bulk::{BulkItem, BulkOutcome, RemoteBatch, Submission};
use llm_failover_core::{Client, Disposition, Error, ErrorKind, Result};

/// The kind of the job that creates a remote batch.
pub(crate) const CREATE_KIND: &str = "bulk-create";
/// The kind of the job that polls a remote batch and settles its items.
pub(crate) const POLL_KIND: &str = "bulk-poll";
/// How long items are set aside while their batch runs: past the providers' 24-hour
/// window, with a day to spare for a process that is not running when it ends.
pub(crate) const ASIDE: Duration = Duration::from_secs(48 * 3_600);
/// The first poll comes this long after the create; each next one twice as late, up to
/// [`POLL_MAX`].
pub(crate) const POLL_FIRST: Duration = Duration::from_secs(10);
/// The longest between two polls.
pub(crate) const POLL_MAX: Duration = Duration::from_secs(300);
/// Items claimed at once to be set aside.
const CLAIM_AT_ONCE: usize = 100_000;
/// The worker name of the lane's claims.
const WORKER: &str = "bulk-lane";

/// What a `bulk-create` job holds: the batch to create and its items' job ids (in the
/// submission's order).
#[derive(Serialize, Deserialize)]
struct CreatePayload {
    submission: Submission,
}

/// [`CreatePayload`], written from a borrowed submission.
#[derive(Serialize)]
struct CreateRef<'a> {
    submission: &'a Submission,
}

/// What a `bulk-poll` job holds: the remote batch and when it was created.
#[derive(Serialize, Deserialize)]
struct PollPayload {
    batch: RemoteBatch,
    created_ms: i64,
}

/// What [`set_aside`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SetAside {
    /// Remote batches planned (one `bulk-create` job each).
    pub(crate) batches: u64,
    /// Items set aside in them.
    pub(crate) items: u64,
    /// Items left to the live lane (the provider's format cannot carry them, or not chat).
    pub(crate) live: u64,
}

/// The poll job's id for the create job of `label`.
fn poll_id(label: &str) -> String {
    format!("{POLL_KIND}:{label}")
}

/// The wait before poll number `n` (1 = the first): [`POLL_FIRST`] doubling to
/// [`POLL_MAX`]. Pure.
pub(crate) fn poll_after(n: u32) -> Duration {
    let doublings = n.saturating_sub(1).min(16);
    POLL_FIRST.saturating_mul(1 << doublings).min(POLL_MAX)
}

/// A label the provider keeps with the batch: `llmf-` and 16 hex digits of its items' job
/// ids, so the same items make the same label.
fn label(job_ids: &[&str]) -> String {
    let mut h = Sha256::new();
    for id in job_ids {
        h.update(id.as_bytes());
        h.update([0]);
    }
    let digest = h.finalize();
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("llmf-{hex}")
}

fn json<T: Serialize>(what: &str, value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|e| {
        Error::new(ErrorKind::Config, format!("{what} cannot be written: {e}")).with_source(e)
    })
}

/// Sets the eligible chat items of `queue` aside in remote batches of `provider` (see the
/// module's documentation); what cannot go goes back to the queue at once, for the live
/// lane.
pub(crate) async fn set_aside(
    queue: &Queue,
    client: &Client,
    provider: &str,
    lease: Duration,
) -> Result<SetAside> {
    let clock = llm_failover_core::wing::client_clock(client).clone();
    let now = wall_ms(clock.wall());
    let claimed = queue.claim_many(WORKER, CLAIM_AT_ONCE, lease, now).await?;
    let mut done = SetAside::default();
    let mut attempts: HashMap<String, u32> = HashMap::new();
    let mut items = Vec::new();
    let mut back = Vec::new();
    for job in claimed {
        let request = (job.kind == crate::batch::CHAT_KIND)
            .then(|| serde_json::from_str::<BatchRequest>(&job.payload).ok())
            .flatten();
        match request {
            Some(BatchRequest::Chat(req)) => {
                attempts.insert(job.id.clone(), job.attempt);
                items.push(BulkItem::new(job.id, req));
            }
            _ => back.push((job.id, job.attempt)),
        }
    }
    if !items.is_empty() {
        let mut ids: Vec<&str> = items.iter().map(|i| i.id.as_str()).collect();
        ids.sort_unstable();
        let plan = client.bulk_plan(provider, &items, &label(&ids))?;
        for (id, err) in &plan.refused {
            tracing::info!(job = %id, error = %err, "the provider's batch cannot carry it: live");
            back.push((id.clone(), attempts[id]));
        }
        for sub in &plan.submissions {
            let payload = json("a remote batch", &CreateRef { submission: sub })?;
            let create = NewJob::new(format!("{CREATE_KIND}:{}", sub.label), CREATE_KIND, payload)
                .with_priority(Priority::Interactive);
            queue.enqueue(create, now).await?;
            done.batches += 1;
            for f in &sub.items {
                let aside = now.saturating_add(millis(ASIDE));
                if queue.snooze(&f.id, attempts[&f.id], aside).await? == Fenced::Lost {
                    // Its claim expired meanwhile: a worker may ask it live too; the queue
                    // accepts one answer.
                    tracing::warn!(job = %f.id, "set aside after its claim was lost");
                }
                done.items += 1;
            }
        }
    }
    for (id, attempt) in back {
        let _ = queue.snooze(&id, attempt, now).await?; // lost: another worker has it
        done.live += 1;
    }
    Ok(done)
}

/// What this process's bulk jobs did, for the run's report.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// `bulk-create` and `bulk-poll` jobs this process completed (not items).
    pub(crate) jobs: AtomicU64,
    /// Items a remote batch answered, completed by this process.
    pub(crate) answered: AtomicU64,
    pub(crate) input_tokens: AtomicU64,
    pub(crate) output_tokens: AtomicU64,
}

/// Creates a remote batch (a `bulk-create` job).
pub(crate) struct Create(pub(crate) Arc<Tally>);

#[async_trait]
impl Handler for Create {
    async fn run(&self, ctx: &JobContext) -> Result<String> {
        let p: CreatePayload = parse(ctx.job())?;
        let sub = &p.submission;
        let queue = ctx.queue();
        let poll = poll_id(&sub.label);
        if queue.get(&poll).await?.is_some() {
            self.0.jobs.fetch_add(1, Ordering::Relaxed);
            return Ok(serde_json::json!({"created": "before"}).to_string());
        }
        let batch = match ctx.client().bulk_create(sub).await {
            Ok(b) => b,
            Err(e) => {
                if e.disposition() == Disposition::Terminal {
                    // It can only be refused again: its items go live now rather than wait
                    // out their time aside.
                    release(ctx, sub.items.iter().map(|f| f.id.clone()).collect()).await?;
                }
                return Err(e);
            }
        };
        let clock = llm_failover_core::wing::client_clock(ctx.client()).clone();
        let now = wall_ms(clock.wall());
        let remote = batch.id.clone();
        let payload = json(
            "a remote batch",
            &PollPayload {
                batch,
                created_ms: now,
            },
        )?;
        let mut job = NewJob::new(poll, POLL_KIND, payload).with_priority(Priority::Interactive);
        job.eligible_at_ms = Some(now.saturating_add(millis(POLL_FIRST)));
        queue.enqueue(job, now).await?;
        self.0.jobs.fetch_add(1, Ordering::Relaxed);
        Ok(serde_json::json!({"provider": sub.provider.as_str(), "batch": remote}).to_string())
    }
}

/// Polls a remote batch and, once it is final, settles its items (a `bulk-poll` job).
pub(crate) struct Poll(pub(crate) Arc<Tally>);

#[async_trait]
impl Handler for Poll {
    async fn run(&self, ctx: &JobContext) -> Result<String> {
        let p: PollPayload = parse(ctx.job())?;
        let client = ctx.client();
        let status = client.bulk_poll(&p.batch).await?;
        if !status.state.is_final() {
            ctx.later(poll_after(ctx.job().attempt));
            return Ok(String::new());
        }
        let answers = if status.fetch.is_empty() && status.inline.is_none() {
            Vec::new() // failed as a whole, or nothing ran: every item is missing
        } else {
            client.bulk_answers(&p.batch, &status).await?
        };
        if let Some((code, message)) = &status.failure {
            tracing::warn!(batch = %p.batch.id, %code, %message, "the provider's batch failed: its items go live");
        }
        let clock = llm_failover_core::wing::client_clock(client).clone();
        let now = wall_ms(clock.wall());
        let latency = Duration::from_millis(u64::try_from(now - p.created_ms).unwrap_or(0));
        let queue = ctx.queue();
        let ids: Vec<String> = p.batch.items.iter().map(|f| f.id.clone()).collect();
        let claimed: HashMap<String, u32> = queue
            .claim_ids(&ids, WORKER, ctx.lease(), now)
            .await?
            .into_iter()
            .map(|j| (j.id, j.attempt))
            .collect();
        let mut said: HashMap<String, BulkOutcome> = answers.into_iter().collect();
        let (mut ok, mut dead, mut live) = (0u64, 0u64, 0u64);
        for id in &ids {
            let Some(&attempt) = claimed.get(id) else {
                continue; // not set aside any more (settled, or running elsewhere)
            };
            match said.remove(id) {
                Some(BulkOutcome::Answered(response)) => {
                    let usage = response.usage.unwrap_or_default();
                    let mut answer = Answer::from_response(*response, latency);
                    answer.lane = Lane::ProviderBatch;
                    let line = ItemOutcome::ok(crate::QueuedJob::item_id(id), answer)
                        .to_json_line()
                        .trim_end()
                        .to_owned();
                    if queue.complete(id, attempt, &line).await? == Fenced::Applied {
                        ok += 1;
                        self.0.answered.fetch_add(1, Ordering::Relaxed);
                        let t = &self.0;
                        t.input_tokens
                            .fetch_add(usage.input_tokens, Ordering::Relaxed);
                        t.output_tokens
                            .fetch_add(usage.output_tokens, Ordering::Relaxed);
                    }
                }
                Some(BulkOutcome::Failed(e)) if e.disposition() == Disposition::Terminal => {
                    dead += u64::from(
                        queue.dead_now(id, attempt, &reason(&e)).await? == Fenced::Applied,
                    );
                }
                _ => {
                    live += u64::from(queue.snooze(id, attempt, now).await? == Fenced::Applied);
                }
            }
        }
        self.0.jobs.fetch_add(1, Ordering::Relaxed);
        Ok(serde_json::json!({
            "batch": p.batch.id, "state": format!("{:?}", status.state),
            "answered": ok, "failed": dead, "live": live
        })
        .to_string())
    }
}

/// Claims `ids` back and puts them in the queue now, for the live lane.
async fn release(ctx: &JobContext, ids: Vec<String>) -> Result<()> {
    let clock = llm_failover_core::wing::client_clock(ctx.client()).clone();
    let now = wall_ms(clock.wall());
    let queue = ctx.queue();
    for job in queue.claim_ids(&ids, WORKER, ctx.lease(), now).await? {
        let _ = queue.snooze(&job.id, job.attempt, now).await?; // lost: another worker has it
    }
    Ok(())
}

fn parse<'a, T: Deserialize<'a>>(job: &'a Job) -> Result<T> {
    serde_json::from_str(&job.payload).map_err(|e| {
        Error::new(
            ErrorKind::InvalidRequest,
            format!("job {:?}: not a remote batch's payload: {e}", job.id),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_come_later_and_later_up_to_five_minutes() {
        let table = [(1, 10), (2, 20), (3, 40), (5, 160), (6, 300), (40, 300)];
        for (n, secs) in table {
            assert_eq!(poll_after(n), Duration::from_secs(secs), "poll {n}");
        }
    }

    #[test]
    fn the_same_items_make_the_same_label_in_any_order_of_reading() {
        let a = label(&["q1#aa", "q2#bb"]);
        assert_eq!(a, label(&["q1#aa", "q2#bb"]));
        assert_ne!(a, label(&["q1#aa", "q3#cc"]));
        assert!(a.starts_with("llmf-") && a.len() == 5 + 16, "{a}");
    }
}
