//! OpenAI's Batch API (and Azure OpenAI's global batch, the same API under `/openai` with
//! `?api-version=`): JSONL input files uploaded through the Files API, batches created from
//! them, output and error files to download.
//!
//! Shapes: platform.openai.com/docs/api-reference/files (`POST /v1/files` multipart `file` +
//! `purpose`; the File object `{id, object: "file", bytes, created_at, expires_at, filename,
//! purpose, status, status_details}`; `GET /v1/files/{id}`, `GET /v1/files/{id}/content`,
//! `DELETE /v1/files/{id}` → `{id, object: "file", deleted: true}`),
//! platform.openai.com/docs/api-reference/batch (`POST /v1/batches` `{input_file_id,
//! endpoint, completion_window: "24h", metadata}`; the Batch object with every field
//! openai-python's `types/batch.py` knows: `errors {object: "list", data: [{code, message,
//! line, param}]}`, the `*_at` times, `request_counts {total, completed, failed}`, `usage`,
//! `model`; `GET /v1/batches?after=&limit=`, `POST /v1/batches/{id}/cancel`) and
//! platform.openai.com/docs/guides/batch (input lines `{custom_id, method: "POST", url,
//! body}`; output lines `{id, custom_id, response: {status_code, request_id, body}, error}`,
//! "the output line order may not match the input line order"; a request the API refused
//! is a line of the error file with its 4xx/5xx `response` — openai/openai-openapi#302
//! shows one —, a request not run before expiry one with `response: null, error: {code:
//! "batch_expired"}`; expired and cancelled batches keep their partial results).
//! Azure: learn.microsoft.com/en-us/azure/ai-services/openai/how-to/batch (`POST
//! /openai/files?api-version=…`, `POST /openai/batches?api-version=…` with `endpoint:
//! "/chat/completions"`, each line's `model` the deployment's name).
//!
//! Validation fails a created batch (`status: "failed"`) instead of refusing the create: the
//! codes `invalid_json_line`, `duplicate_custom_id`, `url_mismatch`, `model_mismatch`,
//! `empty_file`, `too_many_tasks` (as listed in stdapi-ai/stdapi.ai#240 from OpenAI's
//! documentation). So does the enqueued-token limit: openai/openai-python#1643 ("the
//! `client.batches.create` call … didn't [throw] … I always need to check by calling
//! `client.batches.retrieve`") and #2084 show the batch created and then `failed` with
//! `errors.data[0] = {code: "token_limit_exceeded", line: null, param: null, message:
//! "Enqueued token limit reached for gpt-4o-mini in organization org-…. Limit: 2,000,000
//! enqueued tokens. Please try again once some in_progress batches have been
//! completed."}`. Enqueued tokens are the input tokens of the model's batches not yet
//! ended (the limit is on "enqueued prompt tokens per model", platform.openai.com/docs/guides/batch#rate-limits).

use std::collections::HashSet;

use axum::http::{Method, StatusCode};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};

use super::bulk::{BulkCx, Reply, answer_item, body_model, query};
use super::{ApiError, Field, field};
use crate::bulk::{Item, Job, Outcome, Phase, Progress, StoredFile, Timeline};
use crate::config::Kind;
use crate::text::{hashed_id, new_id};

/// "A single batch may include up to 50,000 requests" (platform.openai.com/docs/guides/batch).
const MAX_REQUESTS: usize = 50_000;
/// OpenAI's completion window, the only one it takes.
const WINDOW: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

pub(super) fn route(method: &Method, path: &str) -> Option<super::bulk::BulkRoute> {
    use super::bulk::BulkRoute as R;
    let id = |s: &str| (!s.is_empty() && !s.contains('/')).then(|| s.to_owned());
    if let Some(rest) = path.strip_prefix("/files") {
        return match (method, rest) {
            (&Method::POST, "") => Some(R::FileUpload),
            (&Method::GET, r) => match r.strip_prefix('/')?.strip_suffix("/content") {
                Some(f) => id(f).map(R::FileContent),
                None => id(r.strip_prefix('/')?).map(R::FileGet),
            },
            (&Method::DELETE, r) => id(r.strip_prefix('/')?).map(R::FileDelete),
            _ => None,
        };
    }
    let rest = path.strip_prefix("/batches")?;
    match (method, rest) {
        (&Method::POST, "") => Some(R::OpenAiCreate),
        (&Method::GET, "") => Some(R::OpenAiList),
        (&Method::GET, r) => id(r.strip_prefix('/')?).map(R::OpenAiGet),
        (&Method::POST, r) => {
            id(r.strip_prefix('/')?.strip_suffix("/cancel")?).map(R::OpenAiCancel)
        }
        _ => None,
    }
}

/// OpenAI's error body with a status.
fn refuse(status: u16, message: &str, param: Option<&str>) -> ApiError {
    ApiError::Raw {
        status,
        body: json!({"error": {"message": message, "type": "invalid_request_error",
                               "param": param, "code": null}}),
    }
}

fn no_such(what: &str, id: &str) -> ApiError {
    refuse(404, &format!("No such {what}: {id}"), Some("id"))
}

/// The endpoints a batch of this provider may name: chat completions only here (the
/// emulator's batches answer chat; OpenAI also takes `/v1/responses`, `/v1/embeddings`, …).
fn endpoints(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::Azure => &["/chat/completions", "/v1/chat/completions"],
        _ => &["/v1/chat/completions"],
    }
}

// ------------------------------------------------------------------------------------------
// Files.

fn file_json(f: &StoredFile) -> Value {
    json!({
        "id": f.id, "object": "file", "bytes": f.bytes.len(), "created_at": f.created,
        "expires_at": null, "filename": f.filename, "purpose": f.purpose,
        "status": "processed", "status_details": null,
    })
}

pub(super) fn upload(bx: &BulkCx<'_>, form: &[Field]) -> Result<Reply, ApiError> {
    let Some(file) = field(form, "file") else {
        return Err(refuse(
            400,
            "Missing required parameter: 'file'.",
            Some("file"),
        ));
    };
    let purpose = field(form, "purpose").and_then(Field::text).unwrap_or("");
    const PURPOSES: [&str; 6] = [
        "assistants",
        "batch",
        "fine-tune",
        "vision",
        "user_data",
        "evals",
    ];
    if purpose.is_empty() {
        return Err(refuse(
            400,
            "Missing required parameter: 'purpose'.",
            Some("purpose"),
        ));
    }
    if !PURPOSES.contains(&purpose) {
        return Err(refuse(
            400,
            &format!("'{purpose}' is not one of {PURPOSES:?} - 'purpose'"),
            Some("purpose"),
        ));
    }
    let filename = file.file_name.clone().unwrap_or_else(|| "file".to_owned());
    if purpose == "batch" && !filename.ends_with(".jsonl") {
        return Err(refuse(
            400,
            "Invalid file format for Batch API. Must be .jsonl",
            Some("file"),
        ));
    }
    let stored = StoredFile {
        id: new_id("file-", 22),
        filename,
        purpose: purpose.to_owned(),
        created: bx.cx.created(),
        bytes: file.data.clone(),
    };
    let body = file_json(&stored);
    bx.p.bulk.with(|s| s.files.push(stored));
    Ok(Reply::json(&body))
}

/// Which of a batch's result files an id names.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Output {
    Answers,
    Errors,
}

/// The output (or error) file of a batch, when it has one now: its batch and content.
fn output_file(bx: &BulkCx<'_>, id: &str) -> Option<(Value, Bytes)> {
    bx.p.bulk.with(|s| {
        s.jobs.iter().find_map(|job| {
            let which = if job.spec["output_file_id"] == id {
                Output::Answers
            } else if job.spec["error_file_id"] == id {
                Output::Errors
            } else {
                return None;
            };
            let p = job.progress(bx.now);
            let content = lines(job, &p, which)?;
            let name = match which {
                Output::Answers => "output",
                Output::Errors => "error",
            };
            let meta = json!({
                "id": id, "object": "file", "bytes": content.len(),
                "created_at": job.unix(p.ended_at.unwrap_or(bx.now)), "expires_at": null,
                "filename": format!("{}_{name}.jsonl", job.id), "purpose": "batch_output",
                "status": "processed", "status_details": null,
            });
            Some((meta, content))
        })
    })
}

pub(super) fn file(bx: &BulkCx<'_>, id: &str) -> Result<Reply, ApiError> {
    if let Some(f) = bx.p.bulk.with(|s| s.file(id).map(file_json)) {
        return Ok(Reply::json(&f));
    }
    match output_file(bx, id) {
        Some((meta, _)) => Ok(Reply::json(&meta)),
        None => Err(no_such("File object", id)),
    }
}

pub(super) fn content(bx: &BulkCx<'_>, id: &str) -> Result<Reply, ApiError> {
    let body = match bx.p.bulk.with(|s| s.file(id).map(|f| f.bytes.clone())) {
        Some(b) => b,
        None => match output_file(bx, id) {
            Some((_, b)) => b,
            None => return Err(no_such("File object", id)),
        },
    };
    bx.p.bulk.with(|s| s.downloads += 1);
    Ok(Reply {
        status: StatusCode::OK,
        content_type: "application/octet-stream",
        body,
        model: None,
    })
}

pub(super) fn delete_file(bx: &BulkCx<'_>, id: &str) -> Result<Reply, ApiError> {
    let gone = bx.p.bulk.with(|s| {
        let before = s.files.len();
        s.files.retain(|f| f.id != id);
        before != s.files.len()
    });
    if !gone {
        return Err(no_such("File object", id));
    }
    Ok(Reply::json(
        &json!({"id": id, "object": "file", "deleted": true}),
    ))
}

// ------------------------------------------------------------------------------------------
// Batches.

#[derive(Deserialize)]
struct CreateBody {
    input_file_id: Option<String>,
    endpoint: Option<String>,
    completion_window: Option<String>,
    metadata: Option<Value>,
}

/// One entry of `errors.data`.
fn line_error(code: &str, message: &str, line: Option<usize>, param: Option<&str>) -> Value {
    json!({"code": code, "message": message, "line": line, "param": param})
}

/// A line that passed validation: its custom id and chat body.
struct Line {
    custom_id: String,
    body: Value,
}

/// Reads an input file as OpenAI validates it: the lines, and what fails the batch.
fn read_lines(text: &str, endpoint: &str) -> (Vec<Line>, Vec<Value>, Option<String>) {
    let mut out = Vec::new();
    let mut errors = Vec::new();
    let mut model: Option<String> = None;
    let mut seen = HashSet::new();
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let v: Value = match serde_json::from_str(raw) {
            Ok(v @ Value::Object(_)) => v,
            _ => {
                errors.push(line_error(
                    "invalid_json_line",
                    "This line is not parseable as valid JSON.",
                    Some(n),
                    None,
                ));
                continue;
            }
        };
        let missing = |param: &str| {
            line_error(
                "missing_required_parameter",
                &format!("Missing required parameter: '{param}'."),
                Some(n),
                Some(param),
            )
        };
        let Some(custom_id) = v.get("custom_id").and_then(Value::as_str) else {
            errors.push(missing("custom_id"));
            continue;
        };
        match v.get("method").and_then(Value::as_str) {
            Some("POST") => {}
            Some(_) => {
                errors.push(line_error(
                    "invalid_method",
                    "The method of a batch request must be 'POST'.",
                    Some(n),
                    Some("method"),
                ));
                continue;
            }
            None => {
                errors.push(missing("method"));
                continue;
            }
        }
        if v.get("url").and_then(Value::as_str) != Some(endpoint) {
            errors.push(line_error(
                "url_mismatch",
                &format!(
                    "The URL provided for this request does not match the batch endpoint \
                     '{endpoint}'."
                ),
                Some(n),
                Some("url"),
            ));
            continue;
        }
        let Some(body) = v.get("body").filter(|b| b.is_object()) else {
            errors.push(missing("body"));
            continue;
        };
        let this = body_model(body).unwrap_or_default().to_owned();
        match &model {
            None => model = Some(this),
            Some(m) if *m != this => {
                errors.push(line_error(
                    "model_mismatch",
                    &format!(
                        "The model '{this}' of this request does not match the model '{m}' \
                         of the batch's other requests: a batch takes one model."
                    ),
                    Some(n),
                    Some("body.model"),
                ));
                continue;
            }
            Some(_) => {}
        }
        if !seen.insert(custom_id.to_owned()) {
            errors.push(line_error(
                "duplicate_custom_id",
                "The custom_id for this request is a duplicate of another request. The \
                 custom_id parameter must be unique for each individual request in a batch.",
                Some(n),
                Some("custom_id"),
            ));
            continue;
        }
        out.push(Line {
            custom_id: custom_id.to_owned(),
            body: body.clone(),
        });
    }
    if out.is_empty() && errors.is_empty() {
        errors.push(line_error(
            "empty_file",
            "The batch input file is empty.",
            None,
            None,
        ));
    }
    if out.len() > MAX_REQUESTS {
        errors.push(line_error(
            "too_many_tasks",
            &format!(
                "The batch input file has {} requests; a batch takes at most {MAX_REQUESTS}.",
                out.len()
            ),
            None,
            None,
        ));
    }
    (out, errors, model)
}

/// `2000000` → `2,000,000` (OpenAI's way of writing its limits).
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub(super) fn create(bx: &BulkCx<'_>, body: &Bytes) -> Result<Reply, ApiError> {
    let b: CreateBody = serde_json::from_slice(body).map_err(|_| {
        refuse(
            400,
            "We could not parse the JSON body of your request.",
            None,
        )
    })?;
    let Some(file_id) = b.input_file_id else {
        return Err(refuse(
            400,
            "Missing required parameter: 'input_file_id'.",
            Some("input_file_id"),
        ));
    };
    let kind = bx.p.cfg.kind;
    let Some(endpoint) = b.endpoint else {
        return Err(refuse(
            400,
            "Missing required parameter: 'endpoint'.",
            Some("endpoint"),
        ));
    };
    if !endpoints(kind).contains(&endpoint.as_str()) {
        return Err(refuse(
            400,
            &format!(
                "Invalid value: '{endpoint}'. The emulator's batches answer {:?}.",
                endpoints(kind)
            ),
            Some("endpoint"),
        ));
    }
    let window = b.completion_window.unwrap_or_default();
    if window != "24h" {
        return Err(refuse(
            400,
            &format!("Invalid value: '{window}'. Supported values are: '24h'."),
            Some("completion_window"),
        ));
    }
    let Some((text, purpose)) = bx.p.bulk.with(|s| {
        s.file(&file_id).map(|f| {
            (
                String::from_utf8_lossy(&f.bytes).into_owned(),
                f.purpose.clone(),
            )
        })
    }) else {
        return Err(no_such("File object", &file_id));
    };
    if purpose != "batch" {
        return Err(refuse(
            400,
            &format!("The input file {file_id} was not uploaded with purpose 'batch'."),
            Some("input_file_id"),
        ));
    }
    let (lines, mut errors, model) = read_lines(&text, &endpoint);
    let model = model.unwrap_or_default();
    let settings = bx.p.bulk.settings();
    let mut items = Vec::with_capacity(lines.len());
    let mut tokens = 0;
    let seed = bx.p.bulk.seed;
    for (i, l) in lines.iter().enumerate() {
        let fault = settings.item_faults.get(&l.custom_id).copied();
        let bytes = serde_json::to_vec(&l.body).unwrap_or_default();
        let a = answer_item(bx, None, &bytes, fault);
        tokens += a.input_tokens;
        items.push(Item {
            key: l.custom_id.clone(),
            metadata: None,
            outcome: a.outcome,
            line_id: hashed_id(
                "batch_req_",
                32,
                seed ^ crate::text::fnv1a(l.custom_id.as_bytes()) ^ i as u64,
            ),
            request_id: new_id("req_", 32),
        });
    }
    let id = new_id("batch_", 32);
    let job_json = bx.p.bulk.with(|s| {
        if errors.is_empty()
            && let Some(limit) = settings.token_limit_for(&model)
            && s.enqueued_tokens(&model, bx.now) + tokens > limit
        {
            errors.push(line_error(
                "token_limit_exceeded",
                &format!(
                    "Enqueued token limit reached for {model} in organization org-emulator. \
                     Limit: {} enqueued tokens. Please try again once some in_progress \
                     batches have been completed.",
                    thousands(limit)
                ),
                None,
                None,
            ));
        }
        let timing = settings.timing;
        let order = s.processing_order(items.len(), seed);
        let job = Job {
            id: id.clone(),
            model: model.clone(),
            created_wall: bx.cx.wall,
            timeline: Timeline {
                created: bx.now,
                validating: timing.validating,
                processing: timing.processing,
                finalizing: timing.finalizing,
                window: timing.window.unwrap_or(WINDOW),
                items: items.len(),
                fails: !errors.is_empty(),
                cancel_at: None,
                finish_in_flight: true,
            },
            items,
            order,
            tokens,
            errors,
            spec: json!({
                "input_file_id": file_id, "endpoint": endpoint, "completion_window": "24h",
                "metadata": b.metadata, "output_file_id": new_id("file-", 22),
                "error_file_id": new_id("file-", 22),
            }),
            polls: 0,
            cancel_wall: None,
        };
        let v = batch_json(&job, bx.now);
        s.jobs.push(job);
        s.creates += 1;
        v
    });
    Ok(Reply::json(&job_json).with_model(&model))
}

/// The content of a batch's output (or error) file at `p`, when the batch has ended with
/// lines for it.
fn lines(job: &Job, p: &Progress, which: Output) -> Option<Bytes> {
    if !p.phase.is_ended() || p.phase == Phase::Failed {
        return None;
    }
    let mut out = Vec::new();
    for item in job.done(p) {
        let (status, body) = match (&item.outcome, which) {
            (Outcome::Answer { body, .. }, Output::Answers) => (200, body),
            (Outcome::Error { status, body }, Output::Errors) => (*status, body),
            _ => continue,
        };
        let line = json!({
            "id": item.line_id, "custom_id": item.key,
            "response": {"status_code": status, "request_id": item.request_id, "body": body},
            "error": null,
        });
        push_line(&mut out, &line);
    }
    if which == Output::Errors && p.phase == Phase::Expired {
        for item in job.undone(p) {
            let line = json!({
                "id": item.line_id, "custom_id": item.key, "response": null,
                "error": {"code": "batch_expired",
                          "message": "This request could not be executed before the completion window expired."},
            });
            push_line(&mut out, &line);
        }
    }
    (!out.is_empty()).then(|| Bytes::from(out))
}

fn push_line(out: &mut Vec<u8>, v: &Value) {
    let _ = serde_json::to_writer(&mut *out, v);
    out.push(b'\n');
}

/// The Batch object at `now`.
fn batch_json(job: &Job, now: tokio::time::Instant) -> Value {
    let p = job.progress(now);
    let t = &job.timeline;
    let ts = |i| Some(job.unix(i));
    let failed = p.phase == Phase::Failed;
    let started = !failed && now >= t.start() && t.cancel_at.is_none_or(|c| c >= t.start());
    let (mut completed, mut errored, mut input, mut output) = (0u64, 0u64, 0u64, 0u64);
    for item in job.done(&p) {
        match &item.outcome {
            Outcome::Answer { usage, .. } => {
                completed += 1;
                input += usage[0];
                output += usage[1];
            }
            Outcome::Error { .. } => errored += 1,
        }
    }
    if p.phase == Phase::Expired {
        errored += job.undone(&p).count() as u64;
    }
    let total = if failed { 0 } else { job.items.len() };
    let ended = |phase| {
        (p.phase == phase)
            .then(|| p.ended_at.and_then(ts))
            .flatten()
    };
    let has = |which| lines(job, &p, which).is_some();
    json!({
        "id": job.id,
        "object": "batch",
        "endpoint": job.spec["endpoint"],
        "model": job.model,
        "errors": if failed { json!({"object": "list", "data": job.errors}) } else { Value::Null },
        "input_file_id": job.spec["input_file_id"],
        "completion_window": job.spec["completion_window"],
        "status": p.phase.as_str(),
        "output_file_id": if has(Output::Answers) { job.spec["output_file_id"].clone() } else { Value::Null },
        "error_file_id": if has(Output::Errors) { job.spec["error_file_id"].clone() } else { Value::Null },
        "created_at": job.unix(t.created),
        "in_progress_at": if started { ts(t.start()) } else { None },
        "expires_at": job.unix(t.expires_at()),
        "finalizing_at": matches!(p.phase, Phase::Finalizing | Phase::Completed).then(|| job.unix(t.processing_end())),
        "completed_at": ended(Phase::Completed),
        "failed_at": ended(Phase::Failed),
        "expired_at": ended(Phase::Expired),
        "cancelling_at": t.cancel_at.map(|c| job.unix(c)),
        "cancelled_at": ended(Phase::Cancelled),
        "request_counts": {"total": total, "completed": completed, "failed": errored},
        "usage": {
            "input_tokens": input,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input + output,
        },
        "metadata": job.spec["metadata"],
    })
}

pub(super) fn get(bx: &BulkCx<'_>, id: &str) -> Result<Reply, ApiError> {
    let found = bx.p.bulk.with(|s| {
        s.polls += 1;
        let job = s.job_mut(id)?;
        job.polls += 1;
        Some(batch_json(job, bx.now))
    });
    found
        .map(|v| Reply::json(&v))
        .ok_or_else(|| no_such("batch", id))
}

pub(super) fn list(bx: &BulkCx<'_>) -> Result<Reply, ApiError> {
    let limit = query(bx, "limit")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(20)
        .clamp(1, 100);
    let after = query(bx, "after");
    let page = bx.p.bulk.with(|s| {
        let newest: Vec<&Job> = s.jobs.iter().rev().collect();
        let from = match after {
            Some(a) => newest
                .iter()
                .position(|j| j.id == a)
                .map_or(newest.len(), |i| i + 1),
            None => 0,
        };
        let rest = &newest[from.min(newest.len())..];
        let data: Vec<Value> = rest
            .iter()
            .take(limit)
            .map(|j| batch_json(j, bx.now))
            .collect();
        json!({
            "object": "list",
            "first_id": data.first().map(|v| v["id"].clone()),
            "last_id": data.last().map(|v| v["id"].clone()),
            "has_more": rest.len() > limit,
            "data": data,
        })
    });
    Ok(Reply::json(&page))
}

pub(super) fn cancel(bx: &BulkCx<'_>, id: &str) -> Result<Reply, ApiError> {
    bx.p.bulk.with(|s| {
        let Some(job) = s.job_mut(id) else {
            return Err(no_such("batch", id));
        };
        let phase = job.progress(bx.now).phase;
        if !matches!(
            phase,
            Phase::Validating | Phase::InProgress | Phase::Finalizing
        ) {
            return Err(refuse(
                400,
                &format!("Cannot cancel a batch with status '{}'.", phase.as_str()),
                None,
            ));
        }
        job.timeline.cancel_at = Some(bx.now);
        job.cancel_wall = Some(bx.cx.wall);
        Ok(Reply::json(&batch_json(job, bx.now)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_fails_bad_lines_with_their_line_numbers() {
        let url = "/v1/chat/completions";
        let ok = |id: &str, model: &str| {
            format!(
                r#"{{"custom_id":"{id}","method":"POST","url":"{url}","body":{{"model":"{model}","messages":[]}}}}"#
            )
        };
        let text = [
            ok("a", "m1"),
            "{not json".to_owned(),
            ok("a", "m1"),
            ok("b", "m2"),
            ok("c", "m1").replace(url, "/v1/embeddings"),
            String::new(),
            ok("d", "m1"),
        ]
        .join("\n");
        let (lines, errors, model) = read_lines(&text, url);
        assert_eq!(model.as_deref(), Some("m1"));
        assert_eq!(
            lines
                .iter()
                .map(|l| l.custom_id.as_str())
                .collect::<Vec<_>>(),
            ["a", "d"]
        );
        let codes: Vec<(&str, u64)> = errors
            .iter()
            .map(|e| (e["code"].as_str().unwrap(), e["line"].as_u64().unwrap()))
            .collect();
        assert_eq!(
            codes,
            [
                ("invalid_json_line", 2),
                ("duplicate_custom_id", 3),
                ("model_mismatch", 4),
                ("url_mismatch", 5)
            ]
        );
        let (_, errors, _) = read_lines("\n", url);
        assert_eq!(errors[0]["code"], "empty_file");
    }

    #[test]
    fn writes_limits_with_thousands_separators() {
        assert_eq!(thousands(2_000_000), "2,000,000");
        assert_eq!(thousands(90_000), "90,000");
        assert_eq!(thousands(999), "999");
    }
}
