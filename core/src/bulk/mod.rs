//! The bulk lane: chat requests sent through a provider's Batch API — hours instead of
//! seconds, at half the price, under the batch API's own (larger) limits — and answered as
//! the live lane answers them.
//!
//! A remote batch lives in four steps, each a method of [`Client`], each step one request
//! through the router pinned to the provider that holds the batch (its breaker, retries and
//! request bucket, as any request):
//!
//! 1. [`Client::bulk_plan`] (no I/O): each item's request body as the provider's adapter
//!    builds it for the live lane, its id mapped where the provider's id rule refuses it,
//!    grouped by model and split by the provider's per-batch limits into [`Submission`]s.
//!    Store a submission before you create it: it is what is needed to find the batch again.
//! 2. [`Client::bulk_create`]: uploads the input (file-based APIs) and creates the batch: a
//!    [`RemoteBatch`] (serializable: keep it, a restart polls it again instead of
//!    submitting twice).
//! 3. [`Client::bulk_poll`] until [`BulkState::is_final`]; [`Client::bulk_cancel`] asks
//!    the provider to stop (what ran is kept).
//! 4. [`Client::bulk_answers`]: each item's [`BulkOutcome`] under its own id — an answer
//!    read by the adapter's own `chat_response`, an error classified by its own `error`
//!    (so a terminal 400 is terminal and an overloaded line retryable, as live), or not run
//!    (expired, cancelled, missing from the results).
//!
//! Providers with a Batch API: OpenAI and every host of its shape (`kind = "openai"`), Azure
//! OpenAI (global batch), Anthropic, Gemini ([`Provider::bulk`]).

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::cache::CacheMode;
use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::id::{Capability, ProviderId};
use crate::provider::bulk::{BulkApi, BulkInput, BulkLine, BulkReply, BulkShape, BulkStep};
use crate::provider::{Provider, RequestContext};
use crate::ratelimit::{estimate_chat, input_floor};
use crate::router::{BulkCall, RequestOptions};
use crate::types::{ChatRequest, ChatResponse};

/// The account scope of every step of a remote batch: a provider's Batch API has limits of
/// its own (OpenAI's and Anthropic's batch endpoints, Anthropic's processing queue), so its
/// 429s drain its own buckets and close its own breaker, never the live lane's.
pub(crate) const BATCH_SCOPE: &str = "(batch api)";

pub use crate::provider::bulk::{BulkState, BulkStatus};

#[cfg(test)]
mod tests;

/// One item for the bulk lane: its id (unique in the run) and its request.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct BulkItem {
    /// The item's id, as the results file names it.
    pub id: String,
    /// What it asks.
    pub request: ChatRequest,
}

impl BulkItem {
    /// An item `id` asking `request`.
    pub fn new(id: impl Into<String>, request: ChatRequest) -> Self {
        BulkItem {
            id: id.into(),
            request,
        }
    }
}

/// An item of a batch: its id and the id the provider files it under.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Filed {
    /// The item's own id.
    pub id: String,
    /// The provider's (`custom_id`, Gemini's `metadata.key`): the same id where the
    /// provider's rule accepts it.
    pub custom_id: String,
}

/// One remote batch to create: its items and their request bodies.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Submission {
    /// The provider it goes to.
    pub provider: ProviderId,
    /// The model every item asks for.
    pub model: String,
    /// The label the provider keeps with it (OpenAI's `metadata`, Gemini's `display_name`).
    pub label: String,
    /// Its items, in the order submitted.
    pub items: Vec<Filed>,
    /// Each item's request body, in the same order.
    lines: Vec<BulkLine>,
    /// Each item's input tokens as estimated (the larger of the model's tokenizer count and
    /// `ceil(characters / 4)`), in the same order.
    #[serde(default)]
    tokens: Vec<u64>,
}

impl Submission {
    /// The bytes of the items' request bodies (what the provider's byte limit counts,
    /// roughly).
    pub fn bytes(&self) -> usize {
        self.lines.iter().map(|l| l.body.to_string().len()).sum()
    }

    /// The items' input tokens as estimated: what a limit on enqueued tokens (OpenAI's, per
    /// model) counts of this batch.
    pub fn input_tokens(&self) -> u64 {
        self.tokens.iter().sum()
    }

    /// This batch cut into consecutive pieces of at most `max_items` items and `max_tokens`
    /// estimated input tokens each (an item larger alone is a piece of its own), labelled
    /// `LABEL-p1`, `LABEL-p2`, …: what fits under a limit on enqueued tokens or on requests
    /// in the provider's processing queue. Pure.
    pub fn pieces(&self, max_items: usize, max_tokens: u64) -> Vec<Submission> {
        let sizes: Vec<usize> = self
            .tokens
            .iter()
            .map(|t| usize::try_from(*t).unwrap_or(usize::MAX))
            .collect();
        let max = usize::try_from(max_tokens).unwrap_or(usize::MAX);
        split(&sizes, max_items.max(1), max)
            .into_iter()
            .enumerate()
            .map(|(n, (start, end))| Submission {
                provider: self.provider.clone(),
                model: self.model.clone(),
                label: format!("{}-p{}", self.label, n + 1),
                items: self.items[start..end].to_vec(),
                lines: self.lines[start..end].to_vec(),
                tokens: self.tokens[start..end].to_vec(),
            })
            .collect()
    }
}

/// What [`Client::bulk_plan`] made of the items.
#[derive(Debug)]
#[non_exhaustive]
pub struct BulkPlan {
    /// The batches to create.
    pub submissions: Vec<Submission>,
    /// Items the provider's format cannot carry (its adapter's `check_chat`): not sent.
    pub refused: Vec<(String, Error)>,
}

/// A remote batch a client created: keep it (it serializes) to poll it after a restart.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RemoteBatch {
    /// The provider that holds it.
    pub provider: ProviderId,
    /// The provider's id of it.
    pub id: String,
    /// The model its items ask for.
    pub model: String,
    /// Its label.
    pub label: String,
    /// Its items, in the order submitted.
    pub items: Vec<Filed>,
}

/// How one item of a remote batch ended.
#[derive(Debug)]
#[non_exhaustive]
pub enum BulkOutcome {
    /// Answered, as the live lane would have answered.
    Answered(Box<ChatResponse>),
    /// Refused, as the live lane would have been: the error's disposition says whether
    /// asking again (live) can help.
    Failed(Error),
    /// Not run.
    NotRun(NotRun),
}

/// Why an item of a remote batch was not run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotRun {
    /// The batch's window passed first.
    Expired,
    /// The batch was cancelled first.
    Cancelled,
    /// The batch ended without a word about it (or failed as a whole).
    Missing,
}

/// Maps item ids to ids the provider accepts: an id that fits stays; one that does not
/// becomes `x` and 20 hex digits of its SHA-256 (and a counter if that is taken). Pure.
pub(crate) fn custom_ids(ids: &[String], fits: impl Fn(&str) -> bool) -> Vec<String> {
    let mut taken: HashSet<String> = ids.iter().filter(|i| fits(i)).cloned().collect();
    ids.iter()
        .map(|id| {
            if fits(id) {
                return id.clone();
            }
            let digest = Sha256::digest(id.as_bytes());
            let hex: String = digest[..10].iter().map(|b| format!("{b:02x}")).collect();
            let mut candidate = format!("x{hex}");
            let mut n = 1;
            while taken.contains(&candidate) {
                n += 1;
                candidate = format!("x{hex}-{n}");
            }
            taken.insert(candidate.clone());
            candidate
        })
        .collect()
}

/// Splits items of `sizes` bytes into consecutive runs of at most `max_requests` and
/// `max_bytes` (an item larger than `max_bytes` alone is a run of its own). Pure.
pub(crate) fn split(sizes: &[usize], max_requests: usize, max_bytes: usize) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let (mut start, mut bytes) = (0, 0usize);
    for (i, &size) in sizes.iter().enumerate() {
        let count = i - start;
        if count > 0 && (count >= max_requests.max(1) || bytes.saturating_add(size) > max_bytes) {
            runs.push((start, i));
            (start, bytes) = (i, 0);
        }
        bytes = bytes.saturating_add(size);
    }
    if start < sizes.len() {
        runs.push((start, sizes.len()));
    }
    runs
}

impl Client {
    /// The providers of this client that have a Batch API, in the chat order.
    pub fn bulk_providers(&self) -> Vec<ProviderId> {
        let router = self.router();
        router
            .order(Capability::Chat)
            .filter(|id| router.adapter(id).is_some_and(|a| a.bulk().is_some()))
            .cloned()
            .collect()
    }

    /// Plans `items` as remote batches of `provider` (no I/O): each item's body as the live
    /// lane would send it, ids mapped to the provider's rule, grouped by model, split by
    /// the per-batch limits; labelled `label` (with `-1`, `-2`… when split).
    ///
    /// # Errors
    ///
    /// `Config` for a provider this client does not have, or one without a Batch API, or
    /// an item without a model where the provider has no default; `InvalidRequest` for two
    /// items with one id.
    pub fn bulk_plan(&self, provider: &str, items: &[BulkItem], label: &str) -> Result<BulkPlan> {
        let router = self.router();
        let id = ProviderId::new(provider);
        let adapter = router
            .adapter(&id)
            .ok_or_else(|| Error::config(format!("the client has no provider `{provider}`")))?;
        let api = adapter
            .bulk()
            .ok_or_else(|| crate::provider::no_bulk(&id))?;
        let extra = router.extra_body(&id);
        let mut seen = HashSet::new();
        let mut refused = Vec::new();
        let mut by_model: BTreeMap<String, Vec<(String, BulkLine, u64)>> = BTreeMap::new();
        for item in items {
            if !seen.insert(item.id.as_str()) {
                return Err(Error::new(
                    ErrorKind::InvalidRequest,
                    format!("two bulk items have the id `{}`", item.id),
                ));
            }
            if let Err(e) = adapter.check_chat(&item.request) {
                refused.push((item.id.clone(), e));
                continue;
            }
            let model = match item
                .request
                .model
                .as_deref()
                .or_else(|| adapter.default_model(Capability::Chat))
            {
                Some(m) => m.to_owned(),
                None => {
                    return Err(Error::config(format!(
                        "no model for provider `{id}`: set `providers.{id}.model` or the \
                         item's model"
                    )));
                }
            };
            match line_body(adapter, &item.request, &model, extra) {
                Ok(body) => {
                    let tokens = estimate_chat(&item.request, &model)
                        .input_tokens
                        .max(input_floor(&item.request));
                    by_model.entry(model).or_default().push((
                        item.id.clone(),
                        BulkLine::new(String::new(), body),
                        tokens,
                    ));
                }
                Err(e) => refused.push((item.id.clone(), e)),
            }
        }
        let limits = api.limits();
        let mut submissions = Vec::new();
        for (model, mut group) in by_model {
            let ids: Vec<String> = group.iter().map(|(i, _, _)| i.clone()).collect();
            for ((_, line, _), custom) in group.iter_mut().zip(custom_ids(&ids, |i| api.fits_id(i)))
            {
                line.custom_id = custom;
            }
            let sizes: Vec<usize> = group
                .iter()
                .map(|(_, l, _)| l.body.to_string().len() + l.custom_id.len() + 64)
                .collect();
            for (start, end) in split(&sizes, limits.max_requests, limits.max_bytes) {
                submissions.push((model.clone(), group[start..end].to_vec()));
            }
        }
        let many = submissions.len() > 1;
        let submissions = submissions
            .into_iter()
            .enumerate()
            .map(|(n, (model, group))| Submission {
                provider: id.clone(),
                model,
                label: if many {
                    format!("{label}-{}", n + 1)
                } else {
                    label.to_owned()
                },
                items: group
                    .iter()
                    .map(|(i, l, _)| Filed {
                        id: i.clone(),
                        custom_id: l.custom_id.clone(),
                    })
                    .collect(),
                tokens: group.iter().map(|(_, _, t)| *t).collect(),
                lines: group.into_iter().map(|(_, l, _)| l).collect(),
            })
            .collect();
        Ok(BulkPlan {
            submissions,
            refused,
        })
    }

    /// Creates the remote batch of `submission` (uploading its input first where the API
    /// takes a file).
    ///
    /// # Errors
    ///
    /// The provider's refusal, classified as any request's (a 429 is `RateLimited`, a bad
    /// key `Auth`); `Unsupported` for a provider without a Batch API.
    ///
    /// A create the provider refuses with a 429 is not sent again here: it ends at once,
    /// `RateLimited`, the provider's refusal in its [`attempts`](Error::attempts) and when to
    /// come back in its `retry_after`. A limit on what a provider's batches hold at once
    /// (Anthropic's processing queue) is the caller's to pace: it knows what it has in
    /// flight (the queue's bulk lane learns the limit from it). Every step spends the
    /// provider's batch limits, apart from its live ones.
    pub async fn bulk_create(&self, submission: &Submission) -> Result<RemoteBatch> {
        let api_shape = self
            .router()
            .adapter(&submission.provider)
            .and_then(|a| a.bulk())
            .map(BulkApi::shape)
            .ok_or_else(|| crate::provider::no_bulk(&submission.provider))?;
        let input = if api_shape == BulkShape::File {
            let reply = self
                .bulk_step(
                    &submission.provider,
                    &submission.model,
                    BulkStep::Upload {
                        lines: submission.lines.clone(),
                    },
                )
                .await?;
            let BulkReply::Uploaded { file } = reply else {
                return Err(unexpected(&submission.provider, "an upload"));
            };
            BulkInput::File(file)
        } else {
            BulkInput::Lines(submission.lines.clone())
        };
        let reply = self
            .bulk_step(
                &submission.provider,
                &submission.model,
                BulkStep::Create {
                    model: submission.model.clone(),
                    input,
                    label: submission.label.clone(),
                },
            )
            .await?;
        let BulkReply::Status(status) = reply else {
            return Err(unexpected(&submission.provider, "a create"));
        };
        Ok(RemoteBatch {
            provider: submission.provider.clone(),
            id: status.id,
            model: submission.model.clone(),
            label: submission.label.clone(),
            items: submission.items.clone(),
        })
    }

    /// The remote batch `submission` was created as, if the provider has one with its label
    /// (OpenAI's `metadata`, Gemini's display name): what a process that died between
    /// sending a create and recording its answer looks for before creating again. `None`
    /// when there is none — or when the provider keeps no label (Anthropic): then nothing
    /// can tell.
    ///
    /// # Errors
    ///
    /// As any request to its provider.
    pub async fn bulk_find(&self, submission: &Submission) -> Result<Option<RemoteBatch>> {
        let finds = self
            .router()
            .adapter(&submission.provider)
            .and_then(|a| a.bulk())
            .is_some_and(BulkApi::finds_by_label);
        if !finds {
            return Ok(None);
        }
        let mut after = None;
        // A page is 100 batches: the newest few hundred hold a batch created moments ago.
        for _ in 0..10 {
            let step = BulkStep::Find {
                label: submission.label.clone(),
                after: after.take(),
            };
            match self
                .bulk_step(&submission.provider, &submission.model, step)
                .await?
            {
                BulkReply::Found {
                    batch: Some(status),
                    ..
                } => {
                    return Ok(Some(RemoteBatch {
                        provider: submission.provider.clone(),
                        id: status.id,
                        model: submission.model.clone(),
                        label: submission.label.clone(),
                        items: submission.items.clone(),
                    }));
                }
                BulkReply::Found { next: Some(n), .. } => after = Some(n),
                BulkReply::Found { next: None, .. } => return Ok(None),
                _ => return Err(unexpected(&submission.provider, "a look for a batch")),
            }
        }
        Ok(None)
    }

    /// The remote batch's state now.
    ///
    /// # Errors
    ///
    /// As any request to its provider.
    pub async fn bulk_poll(&self, batch: &RemoteBatch) -> Result<BulkStatus> {
        let step = BulkStep::Poll {
            id: batch.id.clone(),
        };
        match self.bulk_step(&batch.provider, &batch.model, step).await? {
            BulkReply::Status(s) => Ok(s),
            _ => Err(unexpected(&batch.provider, "a poll")),
        }
    }

    /// Asks the provider to cancel the batch; what already ran is kept (poll until final,
    /// then read [`bulk_answers`](Self::bulk_answers)).
    ///
    /// # Errors
    ///
    /// As any request to its provider.
    pub async fn bulk_cancel(&self, batch: &RemoteBatch) -> Result<BulkStatus> {
        let step = BulkStep::Cancel {
            id: batch.id.clone(),
        };
        match self.bulk_step(&batch.provider, &batch.model, step).await? {
            BulkReply::Status(s) => Ok(s),
            _ => Err(unexpected(&batch.provider, "a cancel")),
        }
    }

    /// Every item's outcome once the batch is final (`status` from
    /// [`bulk_poll`](Self::bulk_poll)): fetched and read by the provider's adapter, each
    /// under the item's own id, in the order submitted.
    ///
    /// # Errors
    ///
    /// As any request to its provider; `Decode` for results that are not what the API
    /// documents; `InvalidAnswer` for results naming an id the batch did not hold.
    pub async fn bulk_answers(
        &self,
        batch: &RemoteBatch,
        status: &BulkStatus,
    ) -> Result<Vec<(String, BulkOutcome)>> {
        let adapter = self.router().adapter(&batch.provider).ok_or_else(|| {
            Error::config(format!("the client has no provider `{}`", batch.provider))
        })?;
        let api = adapter
            .bulk()
            .ok_or_else(|| crate::provider::no_bulk(&batch.provider))?;
        let mut fetched = Vec::with_capacity(status.fetch.len());
        for what in &status.fetch {
            let step = BulkStep::Fetch { what: what.clone() };
            match self.bulk_step(&batch.provider, &batch.model, step).await? {
                BulkReply::Fetched(bytes) => fetched.push(bytes),
                _ => return Err(unexpected(&batch.provider, "a fetch")),
            }
        }
        let submitted: Vec<String> = batch.items.iter().map(|f| f.custom_id.clone()).collect();
        let answers = api.answers(status, &fetched, &submitted)?;
        let now = self.router().clock().both();
        let price = self.router().price(&batch.provider, &batch.model);
        outcomes(adapter, batch, answers, price.as_ref(), now)
    }

    /// One step, pinned to `provider`, never cached.
    async fn bulk_step(
        &self,
        provider: &ProviderId,
        model: &str,
        step: BulkStep,
    ) -> Result<BulkReply> {
        let mut opts = RequestOptions::new()
            .provider(provider.as_str())
            .cache(CacheMode::Bypass);
        opts.scope = Some(BATCH_SCOPE);
        if matches!(step, BulkStep::Create { .. }) {
            // A create the provider refuses for a limit of its batches is the caller's to
            // pace (it knows what it has in flight): never sent again blindly here.
            opts = opts.max_wait(Duration::ZERO);
        }
        let job = BulkCall {
            model: model.to_owned(),
            step,
        };
        Ok(self.router().run(job, &opts).await?.reply)
    }
}

/// The body the live lane would send for `req` to `adapter` as `model` (the provider's and
/// the request's extra body merged), as JSON.
fn line_body(
    adapter: &dyn Provider,
    req: &ChatRequest,
    model: &str,
    extra: Option<&serde_json::Map<String, serde_json::Value>>,
) -> Result<serde_json::Value> {
    let mut ctx = RequestContext::new(model, None);
    if let Some(extra) = extra {
        ctx = ctx.with_extra_body(extra);
    }
    let http = adapter.chat_request(req, &ctx)?;
    let http = crate::provider::apply_extra(http, ctx.extra_body, &req.extra_body)?;
    let body = http.json_body().ok_or_else(|| {
        Error::new(
            ErrorKind::Unsupported,
            format!(
                "provider `{}`: its chat request has no JSON body to put in a batch",
                adapter.id()
            ),
        )
    })?;
    serde_json::from_slice(body).map_err(|e| {
        Error::new(
            ErrorKind::InvalidRequest,
            format!("a chat request body is not JSON: {e}"),
        )
    })
}

/// The answers by custom id, as outcomes by item id in the order submitted: an item the
/// results do not name is [`NotRun::Missing`]. An answer costs its usage at `price`'s batch
/// prices.
fn outcomes(
    adapter: &dyn Provider,
    batch: &RemoteBatch,
    answers: Vec<(String, crate::provider::bulk::ItemAnswer)>,
    price: Option<&crate::types::price::Price>,
    now: crate::clock::Now,
) -> Result<Vec<(String, BulkOutcome)>> {
    use crate::provider::bulk::ItemAnswer;
    let mut by_custom: BTreeMap<String, ItemAnswer> = BTreeMap::new();
    for (custom, answer) in answers {
        if !batch.items.iter().any(|f| f.custom_id == custom) {
            return Err(Error::new(
                ErrorKind::InvalidAnswer,
                format!(
                    "provider `{}`: batch `{}` answered an item `{custom}` it was not given",
                    batch.provider, batch.id
                ),
            )
            .with_provider(batch.provider.clone()));
        }
        by_custom.insert(custom, answer);
    }
    Ok(batch
        .items
        .iter()
        .map(|f| {
            let outcome = match by_custom.remove(&f.custom_id) {
                Some(ItemAnswer::Answered { status, body }) => {
                    let raw = crate::http::RawResponse::new(
                        status,
                        reqwest::header::HeaderMap::new(),
                        bytes::Bytes::from(body),
                    );
                    if (200..300).contains(&status) {
                        match adapter.chat_response(raw, &batch.model) {
                            Ok(mut r) => {
                                r.attempts = 1;
                                r.spend = price.map(|p| crate::types::price::Spend {
                                    estimated: None,
                                    actual: r.usage.map(|u| p.of_batch_usage(u)),
                                });
                                BulkOutcome::Answered(Box::new(r))
                            }
                            Err(e) => BulkOutcome::Failed(e),
                        }
                    } else {
                        BulkOutcome::Failed(adapter.error(&raw, now))
                    }
                }
                Some(ItemAnswer::Expired) => BulkOutcome::NotRun(NotRun::Expired),
                Some(ItemAnswer::Cancelled) => BulkOutcome::NotRun(NotRun::Cancelled),
                None => BulkOutcome::NotRun(NotRun::Missing),
            };
            (f.id.clone(), outcome)
        })
        .collect())
}

fn unexpected(provider: &ProviderId, what: &str) -> Error {
    Error::new(
        ErrorKind::Decode,
        format!("provider `{provider}`: {what} was answered with something else"),
    )
    .with_provider(provider.clone())
}
