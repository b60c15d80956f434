//! Gemini's batch mode: `models/{model}:batchGenerateContent` with inline requests answers a
//! long-running Operation named `batches/{id}`, polled until `done`.
//!
//! Shapes: ai.google.dev/api/batch-mode (`POST /v1beta/{batch.model=models/*}:batchGenerateContent`
//! with `{batch: {displayName, inputConfig: {requests: {requests: [{request:
//! GenerateContentRequest, metadata}]}}}}` — proto field names (`display_name`,
//! `input_config`) are taken too, as Google's JSON parser takes them —; `GET
//! /v1beta/batches/{id}`, `POST /v1beta/batches/{id}:cancel`, `DELETE /v1beta/batches/{id}`,
//! `GET /v1beta/batches?pageSize=&pageToken=` → `{operations, nextPageToken}`; `BatchState`
//! `BATCH_STATE_PENDING | RUNNING | SUCCEEDED | FAILED | CANCELLED | EXPIRED`;
//! `GenerateContentBatchOutput.inlinedResponses.inlinedResponses[]`, each `{response:
//! GenerateContentResponse | error: Status, metadata}`, "in the same order as the input
//! requests"), ai.google.dev/gemini-api/docs/batch-mode (inline requests under 20 MB;
//! "JOB_STATE_EXPIRED: The job has expired because it was running or pending for more than
//! 48 hours. The job will not have any results to retrieve."). The Operation's layout
//! follows a recorded exchange with the real API (`metadata` with `@type
//! …v1main.GenerateContentBatch`, `model`, `displayName`, `createTime`, `updateTime`,
//! `endTime`, `batchStats` with int64 counts as strings and zero counts left out, `state`,
//! `name`, and, once succeeded, `output`; `done: true` and `response` with `@type
//! …v1main.GenerateContentBatchOutput` at the end), which is what google-genai's
//! `_BatchJob_from_mldev` reads (`metadata.state`, `metadata.output`, …).
//!
//! A cancelled batch, like an expired one, ends with no output here: the documentation
//! promises results for a succeeded batch only.

use std::time::Duration;

use axum::http::Method;
use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::ApiError;
use super::bulk::{BulkCx, BulkRoute, Reply, answer_item, query};
use super::gemini::rpc;
use crate::bulk::{Item, Job, Outcome, Phase, Timeline};
use crate::headers::rfc3339;
use crate::text::new_id;

/// "running or pending for more than 48 hours".
const WINDOW: Duration = Duration::from_secs(48 * 3600);

const BATCH_TYPE: &str =
    "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch";
const OUTPUT_TYPE: &str =
    "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatchOutput";

pub(super) fn route(method: &Method, path: &str) -> Option<BulkRoute> {
    let id =
        |s: &str| (!s.is_empty() && !s.contains('/') && !s.contains(':')).then(|| s.to_owned());
    if let Some(rest) = path
        .strip_prefix("/v1beta/models/")
        .or_else(|| path.strip_prefix("/v1/models/"))
    {
        let model = rest.strip_suffix(":batchGenerateContent")?;
        return (method == Method::POST && id(model).is_some())
            .then(|| BulkRoute::GeminiCreate(model.to_owned()));
    }
    let rest = path
        .strip_prefix("/v1beta/batches")
        .or_else(|| path.strip_prefix("/v1/batches"))?;
    match (method, rest) {
        (&Method::GET, "") => Some(BulkRoute::GeminiList),
        (&Method::GET, r) => id(r.strip_prefix('/')?).map(BulkRoute::GeminiGet),
        (&Method::POST, r) => {
            id(r.strip_prefix('/')?.strip_suffix(":cancel")?).map(BulkRoute::GeminiCancel)
        }
        (&Method::DELETE, r) => id(r.strip_prefix('/')?).map(BulkRoute::GeminiDelete),
        _ => None,
    }
}

fn invalid(message: &str) -> ApiError {
    rpc(400, "INVALID_ARGUMENT", message, Vec::new())
}

fn not_found(id: &str) -> ApiError {
    rpc(
        404,
        "NOT_FOUND",
        &format!("Batch batches/{id} not found."),
        Vec::new(),
    )
}

/// A field by its JSON name or its proto name.
fn field<'a>(v: &'a Value, json_name: &str, proto_name: &str) -> Option<&'a Value> {
    v.get(json_name).or_else(|| v.get(proto_name))
}

pub(super) fn create(bx: &BulkCx<'_>, model: &str, body: &Bytes) -> Result<Reply, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| invalid(&format!("Invalid JSON payload received. {e}")))?;
    let Some(batch) = v.get("batch").filter(|b| b.is_object()) else {
        return Err(invalid(
            "* BatchGenerateContentRequest.batch: batch is required\n",
        ));
    };
    let Some(input) = field(batch, "inputConfig", "input_config") else {
        return Err(invalid(
            "* BatchGenerateContentRequest.batch.input_config: input_config is required\n",
        ));
    };
    if field(input, "fileName", "file_name").is_some() {
        return Err(invalid(
            "The emulator's batches take inline requests only (input_config.requests), not a file.",
        ));
    }
    let requests = input
        .get("requests")
        .and_then(|r| r.get("requests"))
        .and_then(Value::as_array)
        .filter(|r| !r.is_empty())
        .ok_or_else(|| {
            invalid(
                "* BatchGenerateContentRequest.batch.input_config.requests: requests is empty\n",
            )
        })?;
    let display = field(batch, "displayName", "display_name").cloned();
    let settings = bx.p.bulk.settings();
    let mut items = Vec::with_capacity(requests.len());
    let mut tokens = 0;
    for (i, r) in requests.iter().enumerate() {
        let metadata = r.get("metadata").cloned();
        let key = metadata
            .as_ref()
            .and_then(|m| m.get("key"))
            .and_then(Value::as_str)
            .map_or_else(|| i.to_string(), str::to_owned);
        let request = r.get("request").cloned().unwrap_or(Value::Null);
        let fault = settings.item_faults.get(&key).copied();
        let bytes = serde_json::to_vec(&request).unwrap_or_default();
        let a = answer_item(bx, Some(model), &bytes, fault);
        tokens += a.input_tokens;
        items.push(Item {
            key,
            metadata,
            outcome: a.outcome,
            line_id: String::new(),
            request_id: String::new(),
        });
    }
    let seed = bx.p.bulk.seed;
    let v = bx.p.bulk.with(|s| {
        let timing = settings.timing;
        let order = s.processing_order(items.len(), seed);
        let job = Job {
            id: new_id("", 40).to_ascii_lowercase(),
            model: model.to_owned(),
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
                finish_in_flight: false,
            },
            items,
            order,
            tokens,
            errors: Vec::new(),
            spec: json!({"displayName": display}),
            polls: 0,
            cancel_wall: None,
        };
        let v = operation(&job, bx.now);
        s.jobs.push(job);
        s.creates += 1;
        v
    });
    Ok(Reply::json(&v).with_model(model))
}

/// An inline response: the GenerateContentResponse, or the error as a google.rpc.Status
/// (`{code, message, details}`: the HTTP error body's `error` without its `status` name).
fn inline_response(item: &Item) -> Value {
    let mut out = Map::new();
    match &item.outcome {
        Outcome::Answer { body, .. } => {
            out.insert("response".to_owned(), body.clone());
        }
        Outcome::Error { body, .. } => {
            let mut status = body.get("error").cloned().unwrap_or(Value::Null);
            if let Some(o) = status.as_object_mut() {
                o.remove("status");
            }
            out.insert("error".to_owned(), status);
        }
    }
    if let Some(m) = &item.metadata {
        out.insert("metadata".to_owned(), m.clone());
    }
    Value::Object(out)
}

/// The Operation at `now`.
fn operation(job: &Job, now: tokio::time::Instant) -> Value {
    let p = job.progress(now);
    let name = format!("batches/{}", job.id);
    let state = match p.phase {
        Phase::Validating => "BATCH_STATE_PENDING",
        Phase::InProgress | Phase::Finalizing | Phase::Cancelling => "BATCH_STATE_RUNNING",
        Phase::Completed => "BATCH_STATE_SUCCEEDED",
        Phase::Failed => "BATCH_STATE_FAILED",
        Phase::Expired => "BATCH_STATE_EXPIRED",
        Phase::Cancelled => "BATCH_STATE_CANCELLED",
    };
    let (mut ok, mut failed) = (0u64, 0u64);
    for item in job.done(&p) {
        match item.outcome {
            Outcome::Answer { .. } => ok += 1,
            Outcome::Error { .. } => failed += 1,
        }
    }
    let n = job.items.len() as u64;
    let mut stats = Map::new();
    // proto3 JSON: int64 as a string, zero values left out.
    for (k, v) in [
        ("requestCount", n),
        ("successfulRequestCount", ok),
        ("failedRequestCount", failed),
        (
            "pendingRequestCount",
            if p.phase.is_ended() {
                0
            } else {
                n - ok - failed
            },
        ),
    ] {
        if v > 0 {
            stats.insert(k.to_owned(), Value::String(v.to_string()));
        }
    }
    let at = |i| rfc3339(job.wall(i));
    let updated = p.ended_at.unwrap_or_else(|| {
        let t = &job.timeline;
        [
            Some(t.created),
            Some(t.start()).filter(|s| *s <= now),
            t.cancel_at,
        ]
        .into_iter()
        .flatten()
        .filter(|i| *i <= now)
        .max()
        .unwrap_or(t.created)
    });
    let mut meta = json!({
        "@type": BATCH_TYPE,
        "model": format!("models/{}", job.model),
        "createTime": at(job.timeline.created),
        "updateTime": at(updated),
        "batchStats": stats,
        "state": state,
        "name": name,
    });
    if let Some(d) = job.spec.get("displayName").filter(|d| !d.is_null()) {
        meta["displayName"] = d.clone();
    }
    if let Some(end) = p.ended_at {
        meta["endTime"] = json!(at(end));
    }
    let mut op = json!({"name": name, "metadata": meta});
    if p.phase.is_ended() {
        op["done"] = json!(true);
    }
    if p.phase == Phase::Completed {
        let responses: Vec<Value> = job.items.iter().map(inline_response).collect();
        let output = json!({"inlinedResponses": {"inlinedResponses": responses}});
        op["metadata"]["output"] = output.clone();
        let mut response = json!({"@type": OUTPUT_TYPE});
        response["inlinedResponses"] = output["inlinedResponses"].clone();
        op["response"] = response;
    }
    op
}

pub(super) fn get(bx: &BulkCx<'_>, id: &str) -> Result<Reply, ApiError> {
    bx.p.bulk
        .with(|s| {
            s.polls += 1;
            let job = s.job_mut(id)?;
            job.polls += 1;
            Some(operation(job, bx.now))
        })
        .map(|v| Reply::json(&v))
        .ok_or_else(|| not_found(id))
}

pub(super) fn cancel(bx: &BulkCx<'_>, id: &str) -> Result<Reply, ApiError> {
    bx.p.bulk.with(|s| {
        let Some(job) = s.job_mut(id) else {
            return Err(not_found(id));
        };
        let phase = job.progress(bx.now).phase;
        if phase.is_ended() || phase == Phase::Cancelling {
            return Err(rpc(
                400,
                "FAILED_PRECONDITION",
                &format!("Batch batches/{id} is not pending or running."),
                Vec::new(),
            ));
        }
        // Ends the batch at once (`finish_in_flight: false`), with no output.
        job.timeline.cancel_at = Some(bx.now);
        job.cancel_wall = Some(bx.cx.wall);
        // google.protobuf.Empty.
        Ok(Reply::json(&json!({})))
    })
}

pub(super) fn delete(bx: &BulkCx<'_>, id: &str) -> Result<Reply, ApiError> {
    bx.p.bulk.with(|s| {
        let before = s.jobs.len();
        s.jobs.retain(|j| j.id != id);
        if before == s.jobs.len() {
            return Err(not_found(id));
        }
        Ok(Reply::json(&json!({})))
    })
}

pub(super) fn list(bx: &BulkCx<'_>) -> Result<Reply, ApiError> {
    let size = query(bx, "pageSize")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(50)
        .clamp(1, 1000);
    let token = query(bx, "pageToken");
    let page = bx.p.bulk.with(|s| {
        let newest: Vec<&Job> = s.jobs.iter().rev().collect();
        let from = token
            .and_then(|t| newest.iter().position(|j| j.id == t))
            .unwrap_or(0);
        let rest = &newest[from..];
        let ops: Vec<Value> = rest
            .iter()
            .take(size)
            .map(|j| operation(j, bx.now))
            .collect();
        let mut page = json!({"operations": ops});
        if let Some(next) = rest.get(size) {
            page["nextPageToken"] = json!(next.id);
        }
        page
    });
    Ok(Reply::json(&page))
}
