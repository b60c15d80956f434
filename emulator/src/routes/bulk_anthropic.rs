//! Anthropic's Message Batches: requests inline in the create call, results as JSON lines
//! from `results_url` once the batch has ended.
//!
//! Shapes: docs.anthropic.com/en/api/creating-message-batches (`POST /v1/messages/batches`
//! `{"requests": [{custom_id, params}]}`, `minItems: 1, maxItems: 100000`, `custom_id`
//! "`pattern: ^[a-zA-Z0-9_-]{1,64}$`", "Must be unique for each request within the Message
//! Batch"; the `message_batch` object `{id, type, processing_status: in_progress | canceling
//! | ended, request_counts {processing, succeeded, errored, canceled, expired}, ended_at,
//! created_at, expires_at, archived_at, cancel_initiated_at, results_url}` — "Tallies …
//! Requests start as `processing` and move to one of the other statuses only once
//! processing of the entire batch ends"), …/retrieving-message-batches,
//! …/retrieving-message-batch-results (JSONL lines `{custom_id, result: {type: succeeded,
//! message} | {type: errored, error} | {type: canceled} | {type: expired}}`, "not guaranteed
//! to be in the same order as requests"), …/canceling-message-batches, …/listing-message-batches
//! (`?limit=&before_id=&after_id=` → `{data, has_more, first_id, last_id}`, most recent
//! first), …/deleting-message-batches (`{id, type: "message_batch_deleted"}`; a batch still
//! processing must be canceled first), anthropic-sdk-python's `types/messages/*`.
//!
//! The params of each request are validated as the batch processes them: a bad one is an
//! `errored` result, not a refused create (docs.anthropic.com/en/docs/build-with-claude/batch-processing:
//! "Validation of params happens asynchronously"). The create itself refuses what its schema
//! refuses (ids, count, size) and, with a 429 `rate_limit_error`, requests beyond the
//! processing-queue limit ("Maximum batch requests in processing queue",
//! docs.anthropic.com/en/api/rate-limits#message-batches-api; the message is the emulator's).

use std::collections::HashSet;
use std::time::Duration;

use axum::http::{Method, StatusCode};
use bytes::Bytes;
use serde_json::{Value, json};

use super::ApiError;
use super::bulk::{BulkCx, BulkRoute, Reply, answer_item, body_model, query};
use crate::bulk::{Item, Job, Outcome, Phase, Progress, Timeline};
use crate::headers::rfc3339;
use crate::text::new_id;

/// "Batches expire if processing does not complete within 24 hours".
const WINDOW: Duration = Duration::from_secs(24 * 3600);
const MAX_REQUESTS: usize = 100_000;

pub(super) fn route(method: &Method, path: &str) -> Option<BulkRoute> {
    let rest = path.strip_prefix("/v1/messages/batches")?;
    let id = |s: &str| (!s.is_empty() && !s.contains('/')).then(|| s.to_owned());
    match (method, rest) {
        (&Method::POST, "") => Some(BulkRoute::AnthropicCreate),
        (&Method::GET, "") => Some(BulkRoute::AnthropicList),
        (&Method::GET, r) => {
            let r = r.strip_prefix('/')?;
            match r.strip_suffix("/results") {
                Some(b) => id(b).map(BulkRoute::AnthropicResults),
                None => id(r).map(BulkRoute::AnthropicGet),
            }
        }
        (&Method::POST, r) => {
            id(r.strip_prefix('/')?.strip_suffix("/cancel")?).map(BulkRoute::AnthropicCancel)
        }
        (&Method::DELETE, r) => id(r.strip_prefix('/')?).map(BulkRoute::AnthropicDelete),
        _ => None,
    }
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::bad(message)
}

fn not_found(id: &str) -> ApiError {
    ApiError::Raw {
        status: 404,
        body: json!({"type": "error",
                     "error": {"type": "not_found_error", "message": format!("message_batch {id} not found")}}),
    }
}

fn custom_id_ok(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

pub(super) fn create(bx: &BulkCx<'_>, body: &Bytes) -> Result<Reply, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|_| invalid("There was an error parsing the body of your request"))?;
    let Some(requests) = v.get("requests") else {
        return Err(invalid("requests: Field required"));
    };
    let Some(requests) = requests.as_array() else {
        return Err(invalid("requests: Input should be a valid list"));
    };
    if requests.is_empty() {
        return Err(invalid(
            "requests: List should have at least 1 item after validation, not 0",
        ));
    }
    if requests.len() > MAX_REQUESTS {
        return Err(invalid(format!(
            "requests: List should have at most {MAX_REQUESTS} items after validation, not {}",
            requests.len()
        )));
    }
    let mut seen = HashSet::new();
    let mut parsed = Vec::with_capacity(requests.len());
    for (i, r) in requests.iter().enumerate() {
        let Some(id) = r.get("custom_id").and_then(Value::as_str) else {
            return Err(invalid(format!("requests.{i}.custom_id: Field required")));
        };
        if !custom_id_ok(id) {
            return Err(invalid(format!(
                "requests.{i}.custom_id: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
            )));
        }
        if !seen.insert(id) {
            return Err(invalid(format!(
                "requests.{i}.custom_id: Duplicate custom_id '{id}': custom_id must be unique \
                 for each request within the Message Batch."
            )));
        }
        let Some(params) = r.get("params").filter(|p| p.is_object()) else {
            return Err(invalid(format!(
                "requests.{i}.params: Input should be a valid dictionary"
            )));
        };
        parsed.push((id, params));
    }
    let settings = bx.p.bulk.settings();
    if let Some(limit) = settings.queue_limit {
        let queued = bx.p.bulk.with(|s| s.queued_requests(bx.now));
        if queued + parsed.len() as u64 > limit {
            return Err(ApiError::Raw {
                status: 429,
                body: json!({"type": "error", "error": {"type": "rate_limit_error", "message": format!(
                    "Number of batch requests in the processing queue ({queued} + {}) would \
                     exceed your organization's limit of {limit}. Please wait for batches in \
                     progress to end, or submit fewer requests. For details, refer to: \
                     https://docs.claude.com/en/api/rate-limits.", parsed.len())},
                             "request_id": bx.cx.request_id}),
            });
        }
    }
    let model = parsed
        .first()
        .and_then(|(_, p)| body_model(p))
        .unwrap_or_default()
        .to_owned();
    let mut items = Vec::with_capacity(parsed.len());
    let mut tokens = 0;
    for (id, params) in parsed {
        let fault = settings.item_faults.get(id).copied();
        let bytes = serde_json::to_vec(params).unwrap_or_default();
        let a = answer_item(bx, None, &bytes, fault);
        tokens += a.input_tokens;
        items.push(Item {
            key: id.to_owned(),
            metadata: None,
            outcome: a.outcome,
            line_id: String::new(),
            request_id: String::new(),
        });
    }
    let seed = bx.p.bulk.seed;
    let root = bx.root.clone();
    let v = bx.p.bulk.with(|s| {
        let timing = settings.timing;
        let order = s.processing_order(items.len(), seed);
        let job = Job {
            id: new_id("msgbatch_01", 24),
            model: model.clone(),
            created_wall: bx.cx.wall,
            timeline: Timeline {
                created: bx.now,
                validating: timing.validating,
                processing: timing.processing,
                finalizing: timing.finalizing,
                window: timing.window.unwrap_or(WINDOW),
                items: items.len(),
                fails: false,
                cancel_at: None,
                finish_in_flight: true,
            },
            items,
            order,
            tokens,
            errors: Vec::new(),
            spec: Value::Null,
            polls: 0,
            cancel_wall: None,
        };
        let v = batch_json(&job, bx.now, &root);
        s.jobs.push(job);
        s.creates += 1;
        v
    });
    Ok(Reply::json(&v).with_model(&model))
}

/// The `message_batch` object at `now`.
fn batch_json(job: &Job, now: tokio::time::Instant, root: &str) -> Value {
    let p = job.progress(now);
    let ended = p.phase.is_ended();
    let status = match p.phase {
        Phase::Cancelling => "canceling",
        _ if ended => "ended",
        _ => "in_progress",
    };
    let (mut succeeded, mut errored, mut canceled, mut expired) = (0, 0, 0, 0);
    if ended {
        for item in job.done(&p) {
            match item.outcome {
                Outcome::Answer { .. } => succeeded += 1,
                Outcome::Error { .. } => errored += 1,
            }
        }
        let rest = job.undone(&p).count();
        match p.phase {
            Phase::Expired => expired = rest,
            _ => canceled = rest,
        }
    }
    let processing = if ended { 0 } else { job.items.len() };
    let at = |i| rfc3339(job.wall(i));
    json!({
        "id": job.id,
        "type": "message_batch",
        "processing_status": status,
        "request_counts": {"processing": processing, "succeeded": succeeded, "errored": errored,
                           "canceled": canceled, "expired": expired},
        "ended_at": p.ended_at.map(at),
        "created_at": at(job.timeline.created),
        "expires_at": at(job.timeline.expires_at()),
        "archived_at": null,
        "cancel_initiated_at": job.timeline.cancel_at.map(at),
        "results_url": ended.then(|| format!("{root}/v1/messages/batches/{}/results", job.id)),
    })
}

fn result_line(item: &Item, done: bool, p: &Progress) -> Value {
    let result = match (&item.outcome, done) {
        (Outcome::Answer { body, .. }, true) => json!({"type": "succeeded", "message": body}),
        (Outcome::Error { body, .. }, true) => json!({"type": "errored", "error": body}),
        (_, false) if p.phase == Phase::Expired => json!({"type": "expired"}),
        (_, false) => json!({"type": "canceled"}),
    };
    json!({"custom_id": item.key, "result": result})
}

pub(super) fn get(bx: &BulkCx<'_>, id: &str) -> Result<Reply, ApiError> {
    bx.p.bulk
        .with(|s| {
            s.polls += 1;
            let job = s.job_mut(id)?;
            job.polls += 1;
            Some(batch_json(job, bx.now, &bx.root))
        })
        .map(|v| Reply::json(&v))
        .ok_or_else(|| not_found(id))
}

pub(super) fn results(bx: &BulkCx<'_>, id: &str) -> Result<Reply, ApiError> {
    let out = bx.p.bulk.with(|s| {
        let job = s.job(id)?;
        let p = job.progress(bx.now);
        if !p.phase.is_ended() {
            return Some(Err(invalid(format!(
                "Message Batch {id} has not yet ended; its results are not available."
            ))));
        }
        let mut out = Vec::new();
        for (done, item) in job
            .done(&p)
            .map(|i| (true, i))
            .chain(job.undone(&p).map(|i| (false, i)))
        {
            let _ = serde_json::to_writer(&mut out, &result_line(item, done, &p));
            out.push(b'\n');
        }
        s.downloads += 1;
        Some(Ok(out))
    });
    match out {
        None => Err(not_found(id)),
        Some(Err(e)) => Err(e),
        Some(Ok(body)) => Ok(Reply {
            status: StatusCode::OK,
            content_type: "application/x-jsonl",
            body: Bytes::from(body),
            model: None,
        }),
    }
}

pub(super) fn cancel(bx: &BulkCx<'_>, id: &str) -> Result<Reply, ApiError> {
    bx.p.bulk.with(|s| {
        let Some(job) = s.job_mut(id) else {
            return Err(not_found(id));
        };
        let phase = job.progress(bx.now).phase;
        if phase.is_ended() || phase == Phase::Cancelling {
            return Err(invalid(format!(
                "Message Batch {id} cannot be canceled: it is {}.",
                if phase.is_ended() {
                    "ended"
                } else {
                    "already canceling"
                }
            )));
        }
        job.timeline.cancel_at = Some(bx.now);
        job.cancel_wall = Some(bx.cx.wall);
        Ok(Reply::json(&batch_json(job, bx.now, &bx.root)))
    })
}

pub(super) fn delete(bx: &BulkCx<'_>, id: &str) -> Result<Reply, ApiError> {
    bx.p.bulk.with(|s| {
        let Some(i) = s.jobs.iter().position(|j| j.id == id) else {
            return Err(not_found(id));
        };
        if !s.jobs[i].progress(bx.now).phase.is_ended() {
            return Err(invalid(format!(
                "Message Batch {id} is still processing; cancel it before deleting it."
            )));
        }
        s.jobs.remove(i);
        Ok(Reply::json(
            &json!({"id": id, "type": "message_batch_deleted"}),
        ))
    })
}

pub(super) fn list(bx: &BulkCx<'_>) -> Result<Reply, ApiError> {
    let limit = query(bx, "limit")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(20)
        .clamp(1, 1000);
    let (after, before) = (query(bx, "after_id"), query(bx, "before_id"));
    let page = bx.p.bulk.with(|s| {
        let newest: Vec<&Job> = s.jobs.iter().rev().collect();
        let pos = |id: &str| newest.iter().position(|j| j.id == id);
        let (from, to) = match (after, before) {
            (Some(a), _) => (pos(a).map_or(newest.len(), |i| i + 1), newest.len()),
            (None, Some(b)) => {
                let end = pos(b).unwrap_or(0);
                (end.saturating_sub(limit), end)
            }
            (None, None) => (0, newest.len()),
        };
        let window = &newest[from.min(to)..to];
        let data: Vec<Value> = window
            .iter()
            .take(limit)
            .map(|j| batch_json(j, bx.now, &bx.root))
            .collect();
        json!({
            "has_more": window.len() > limit || (before.is_some() && from > 0),
            "first_id": data.first().map(|v| v["id"].clone()),
            "last_id": data.last().map(|v| v["id"].clone()),
            "data": data,
        })
    });
    Ok(Reply::json(&page))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_ids_follow_the_documented_pattern() {
        for ok in ["a", "A-b_9", &"x".repeat(64)] {
            assert!(custom_id_ok(ok), "{ok}");
        }
        for bad in ["", "a b", "a.b", "é", &"x".repeat(65)] {
            assert!(!custom_id_ok(bad), "{bad}");
        }
    }
}
