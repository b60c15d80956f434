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
    /// The provider's limit on enqueued input tokens for the model, when a refusal stated
    /// it: the batch is created only when it fits beside the batches still running.
    #[serde(default)]
    limit: Option<u64>,
    /// The requests the provider's processing queue was seen to hold, when a create was
    /// refused for it: the batch is created only when it fits beside the batches still
    /// running.
    #[serde(default)]
    queue: Option<u64>,
}

/// [`CreatePayload`], written from a borrowed submission.
#[derive(Serialize)]
struct CreateRef<'a> {
    submission: &'a Submission,
    limit: Option<u64>,
    queue: Option<u64>,
}

/// What a `bulk-poll` job holds: the remote batch and when it was created.
#[derive(Serialize, Deserialize)]
struct PollPayload {
    batch: RemoteBatch,
    created_ms: i64,
    /// Its items' input tokens as estimated (what a limit on enqueued tokens counts).
    #[serde(default)]
    tokens: u64,
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
        let request = (job.kind == crate::job::CHAT_KIND)
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
            let payload = json(
                "a remote batch",
                &CreateRef {
                    submission: sub,
                    limit: None,
                    queue: None,
                },
            )?;
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

/// Creates a remote batch (a `bulk-create` job). One at a time in a process, so that two
/// pieces cut to fit an enqueued-token limit are never both created against the same room.
pub(crate) struct Create(pub(crate) Arc<Tally>, pub(crate) tokio::sync::Mutex<()>);

impl Create {
    pub(crate) fn new(tally: Arc<Tally>) -> Self {
        Create(tally, tokio::sync::Mutex::new(()))
    }
}

/// The share of a stated limit on enqueued tokens the lane fills: estimates are estimates.
fn room(limit: u64) -> u64 {
    limit / 10 * 9
}

/// The limit an OpenAI `token_limit_exceeded` message states: "… Limit: 2,000,000
/// enqueued tokens. …" (thousands separators as OpenAI writes them). Pure.
pub(crate) fn stated_limit(message: &str) -> Option<u64> {
    let after = &message[message.find("Limit:")? + "Limit:".len()..];
    let digits: String = after
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ',' || *c == '_')
        .filter(char::is_ascii_digit)
        .collect();
    digits.parse().ok().filter(|n| *n > 0)
}

/// What `provider`'s batches still being polled hold: the estimated input tokens of those
/// of `model` (what a limit on enqueued tokens counts, per model) and the requests of all
/// (what a processing queue holds, per organization).
async fn in_flight(queue: &Queue, provider: &str, model: &str) -> Result<(u64, u64)> {
    let (mut tokens, mut requests) = (0u64, 0u64);
    for job in queue.unsettled_of_kind(POLL_KIND).await? {
        if let Ok(p) = serde_json::from_str::<PollPayload>(&job.payload)
            && p.batch.provider.as_str() == provider
        {
            requests = requests.saturating_add(p.batch.items.len() as u64);
            if p.batch.model == model {
                tokens = tokens.saturating_add(p.tokens);
            }
        }
    }
    Ok((tokens, requests))
}

/// Whether `sub` waits for room beside what is in flight (`running_tokens`,
/// `running_requests`) under a stated limit on enqueued tokens (`limit`) and what the
/// provider's processing queue was seen to hold (`held`). Nothing in flight: it goes (a
/// piece is cut to fit alone). Pure.
fn waits(
    sub: &Submission,
    limit: Option<u64>,
    held: Option<u64>,
    running_tokens: u64,
    running_requests: u64,
) -> bool {
    let tokens = limit.is_some_and(|limit| {
        running_tokens > 0 && running_tokens.saturating_add(sub.input_tokens()) > room(limit)
    });
    let requests = held.is_some_and(|held| {
        running_requests > 0 && running_requests.saturating_add(sub.items.len() as u64) > held
    });
    tokens || requests
}

/// The least that `provider`'s processing queue was seen to hold, by any create still to
/// run (`own`: this one's).
async fn held(queue: &Queue, provider: &str, own: Option<u64>) -> Result<Option<u64>> {
    let mut least = own;
    for job in queue.unsettled_of_kind(CREATE_KIND).await? {
        if let Ok(p) = serde_json::from_str::<CreatePayload>(&job.payload)
            && p.submission.provider.as_str() == provider
            && let Some(q) = p.queue
        {
            least = Some(least.map_or(q, |l| l.min(q)));
        }
    }
    Ok(least)
}

/// What a create the provider refused with a 429 teaches about its processing queue
/// (`refused`: the batch's requests, `running`: ours it held then, `known`: what an earlier
/// refusal taught): it held what ran, else — nothing of ours ran — not even this batch, so
/// half of it; never more than before. `None`: a batch of one refused with nothing of ours
/// running, nothing to learn (it is tried again later). Pure.
fn queue_held(refused: u64, running: u64, known: Option<u64>) -> Option<u64> {
    let held = if running > 0 { running } else { refused / 2 };
    let held = known.map_or(held, |k| k.min(held));
    (held > 0).then_some(held)
}

/// A 429 to a create that the provider answered (not a request this process held back).
fn refused_for_a_limit(e: &Error) -> bool {
    e.kind() == ErrorKind::RateLimited
        && (e.status() == Some(429) || e.attempts().iter().any(|a| a.status() == Some(429)))
}

#[async_trait]
impl Handler for Create {
    async fn run(&self, ctx: &JobContext) -> Result<String> {
        let p: CreatePayload = parse(ctx.job())?;
        let sub = &p.submission;
        let queue = ctx.queue();
        let poll = poll_id(&sub.label);
        let _one = self.1.lock().await;
        if queue.get(&poll).await?.is_some() {
            self.0.jobs.fetch_add(1, Ordering::Relaxed);
            return Ok(serde_json::json!({"created": "before"}).to_string());
        }
        let held = held(queue, sub.provider.as_str(), p.queue).await?;
        if let Some(h) = held
            && sub.items.len() as u64 > h
        {
            // Cut to fit what another piece learned since this one was planned.
            return cut(ctx, &p, h, None, &self.0).await;
        }
        let (tokens, requests) = in_flight(queue, sub.provider.as_str(), &sub.model).await?;
        if waits(sub, p.limit, held, tokens, requests) {
            // It fits only once an earlier batch ends: asked again later.
            ctx.later(poll_after(ctx.job().attempt));
            return Ok(String::new());
        }
        // A create job run again may have created its batch before its process died: look
        // for the label first, where the provider keeps one.
        let found = if ctx.job().attempt > 1 {
            ctx.client().bulk_find(sub).await?
        } else {
            None
        };
        if let Some(b) = &found {
            tracing::info!(batch = %b.id, "found the batch an earlier create made");
        }
        let created = match found {
            Some(b) => Ok(b),
            None => ctx.client().bulk_create(sub).await,
        };
        let batch = match created {
            Ok(b) => b,
            Err(e) if refused_for_a_limit(&e) => {
                let n = sub.items.len() as u64;
                let Some(h) = queue_held(n, requests, held) else {
                    let wait =
                        poll_after(ctx.job().attempt).max(e.retry_after().unwrap_or_default());
                    tracing::info!(provider = %sub.provider, error = %e, "the batch's create was refused: asked again later");
                    ctx.later(wait);
                    return Ok(String::new());
                };
                tracing::info!(
                    provider = %sub.provider, requests = n, running = requests, held = h, error = %e,
                    "the provider refused the batch's create: it goes in pieces that fit what its queue held"
                );
                return cut(ctx, &p, h, e.retry_after(), &self.0).await;
            }
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
                tokens: sub.input_tokens(),
            },
        )?;
        let mut job = NewJob::new(poll, POLL_KIND, payload).with_priority(Priority::Interactive);
        job.eligible_at_ms = Some(now.saturating_add(millis(POLL_FIRST)));
        queue.enqueue(job, now).await?;
        self.0.jobs.fetch_add(1, Ordering::Relaxed);
        Ok(serde_json::json!({"provider": sub.provider.as_str(), "batch": remote}).to_string())
    }
}

/// A batch larger than, or refused for, what the provider's processing queue holds (a 429
/// to its create: Anthropic's processing queue, a limit on the batch endpoints): it goes
/// again in pieces of at most `held` requests, each created once the batches before it leave
/// room ([`waits`]), none before `not_before` — never the same create again at once.
async fn cut(
    ctx: &JobContext,
    p: &CreatePayload,
    held: u64,
    not_before: Option<Duration>,
    tally: &Tally,
) -> Result<String> {
    let sub = &p.submission;
    let clock = llm_failover_core::wing::client_clock(ctx.client()).clone();
    let now = wall_ms(clock.wall());
    let queue = ctx.queue();
    let mut pieces = 0u64;
    for piece in sub.pieces(usize::try_from(held).unwrap_or(usize::MAX), u64::MAX) {
        let payload = json(
            "a remote batch",
            &CreateRef {
                submission: &piece,
                limit: p.limit,
                queue: Some(held),
            },
        )?;
        let mut job = NewJob::new(
            format!("{CREATE_KIND}:{}", piece.label),
            CREATE_KIND,
            payload,
        )
        .with_priority(Priority::Interactive);
        job.eligible_at_ms = Some(now.saturating_add(millis(not_before.unwrap_or_default())));
        queue.enqueue(job, now).await?;
        pieces += 1;
    }
    tally.jobs.fetch_add(1, Ordering::Relaxed);
    Ok(serde_json::json!({"held": held, "pieces": pieces}).to_string())
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
        if let Some((code, message)) = &status.failure
            && code == "token_limit_exceeded"
            && let Some(limit) = stated_limit(message)
        {
            return in_pieces(ctx, &p, limit, &self.0).await;
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
                    let line = ItemOutcome::ok(crate::job::item_id(id), answer)
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

/// A batch the provider refused for its limit on enqueued tokens, planned again in pieces
/// that fit the limit it stated, each created once the batches before it leave room (its
/// items stay aside, for another window).
async fn in_pieces(ctx: &JobContext, p: &PollPayload, limit: u64, tally: &Tally) -> Result<String> {
    let queue = ctx.queue();
    let client = ctx.client();
    let clock = llm_failover_core::wing::client_clock(client).clone();
    let now = wall_ms(clock.wall());
    let mut items = Vec::new();
    let mut back = Vec::new();
    for f in &p.batch.items {
        let Some(job) = queue.get(&f.id).await? else {
            continue;
        };
        match serde_json::from_str::<BatchRequest>(&job.payload) {
            Ok(BatchRequest::Chat(req)) => items.push(BulkItem::new(f.id.clone(), req)),
            _ => back.push(f.id.clone()),
        }
    }
    let plan = client.bulk_plan(p.batch.provider.as_str(), &items, &p.batch.label)?;
    back.extend(plan.refused.iter().map(|(id, _)| id.clone()));
    let mut pieces = 0u64;
    for sub in &plan.submissions {
        for piece in sub.pieces(usize::MAX, room(limit)) {
            let payload = json(
                "a remote batch",
                &CreateRef {
                    submission: &piece,
                    limit: Some(limit),
                    queue: None,
                },
            )?;
            let job = NewJob::new(
                format!("{CREATE_KIND}:{}", piece.label),
                CREATE_KIND,
                payload,
            )
            .with_priority(Priority::Interactive);
            queue.enqueue(job, now).await?;
            pieces += 1;
        }
    }
    // Another window aside for the items, from now.
    let ids: Vec<String> = p.batch.items.iter().map(|f| f.id.clone()).collect();
    for job in queue.claim_ids(&ids, WORKER, ctx.lease(), now).await? {
        let until = if back.contains(&job.id) {
            now
        } else {
            now.saturating_add(millis(ASIDE))
        };
        let _ = queue.snooze(&job.id, job.attempt, until).await?; // lost: another worker has it
    }
    tracing::info!(
        batch = %p.batch.id, limit, pieces,
        "the provider's enqueued-token limit refused the batch: it goes in pieces"
    );
    tally.jobs.fetch_add(1, Ordering::Relaxed);
    Ok(serde_json::json!({"batch": p.batch.id, "limit": limit, "pieces": pieces}).to_string())
}

/// Asks the provider to cancel every remote batch `queue` still polls; returns how many it
/// accepted. What they already answered is kept: their poll jobs stay, and settle the items
/// when the batches end (what was not run then goes live, on the next run).
pub(crate) async fn cancel_all(queue: &Queue, client: &Client) -> Result<u64> {
    let mut cancelled = 0;
    for job in queue.unsettled_of_kind(POLL_KIND).await? {
        let p: PollPayload = parse(&job)?;
        match client.bulk_cancel(&p.batch).await {
            Ok(status) => {
                tracing::info!(batch = %p.batch.id, state = ?status.state, "cancel asked");
                cancelled += 1;
            }
            // An ended batch refuses a cancel: nothing to stop.
            Err(e) => tracing::warn!(batch = %p.batch.id, error = %e, "the cancel was refused"),
        }
    }
    Ok(cancelled)
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
    fn the_limit_a_refusal_states_is_read_as_openai_writes_it() {
        let table = [
            (
                "Enqueued token limit reached for gpt-4o-mini in organization org-x. Limit: \
                 2,000,000 enqueued tokens. Please try again once some in_progress batches have \
                 been completed.",
                Some(2_000_000),
            ),
            ("Limit: 90000 enqueued tokens.", Some(90_000)),
            ("Limit: 0 enqueued tokens.", None),
            ("Enqueued token limit reached.", None),
            ("Limit: lots", None),
        ];
        for (message, want) in table {
            assert_eq!(stated_limit(message), want, "{message}");
        }
        assert_eq!(room(2_000_000), 1_800_000);
    }

    #[test]
    fn a_refused_create_teaches_what_the_queue_held_and_never_more_than_before() {
        // (refused requests, ours running, known) → held
        let table = [
            (100, 60, None, Some(60)),     // it held what ran
            (100, 0, None, Some(50)),      // nothing of ours ran: not even this batch
            (100, 60, Some(40), Some(40)), // never more than an earlier refusal taught
            (50, 0, Some(80), Some(25)),
            (1, 0, None, None), // a batch of one, nothing of ours: nothing to learn
            (0, 0, None, None),
        ];
        for (refused, running, known, want) in table {
            assert_eq!(
                queue_held(refused, running, known),
                want,
                "{refused} {running} {known:?}"
            );
        }
    }

    #[test]
    fn a_batch_waits_for_room_only_beside_batches_in_flight() {
        let sub = |n: usize, tokens: u64| {
            let text = format!(
                r#"{{"provider":"p","model":"m","label":"l","items":[],"lines":[],"tokens":[{}]}}"#,
                vec![(tokens / n as u64).to_string(); n].join(",")
            );
            let mut s: Submission = serde_json::from_str(&text).unwrap();
            s.items = (0..n)
                .map(|i| {
                    serde_json::from_value(
                        serde_json::json!({"id": i.to_string(), "custom_id": i.to_string()}),
                    )
                    .unwrap()
                })
                .collect();
            s
        };
        // (batch, limit, held, running tokens, running requests) → waits
        let table = [
            (sub(10, 100), None, None, 1_000_000, 1_000_000, false),
            (sub(10, 100), Some(1_000), None, 0, 0, false), // alone: goes
            (sub(10, 100), Some(1_000), None, 800, 5, false), // 900 ≤ 900
            (sub(10, 100), Some(1_000), None, 801, 5, true),
            (sub(10, 100), None, Some(30), 0, 20, false), // 30 ≤ 30
            (sub(10, 100), None, Some(30), 0, 21, true),
            (sub(40, 100), None, Some(30), 0, 0, false), // alone: goes
        ];
        for (i, (s, limit, held, tokens, requests, want)) in table.iter().enumerate() {
            assert_eq!(
                waits(s, *limit, *held, *tokens, *requests),
                *want,
                "row {i}"
            );
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
