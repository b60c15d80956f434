//! OpenAI's Batch API (and every host that serves its shape: Groq, Together, …): a JSON-lines
//! file uploaded to `/files` (`purpose=batch`), a batch created on it at `/batches`, polled
//! until it ends, its output and error files downloaded from `/files/{id}/content`.
//!
//! - <https://platform.openai.com/docs/guides/batch>: the input line
//!   `{"custom_id", "method": "POST", "url": "/v1/chat/completions", "body"}`; at most 50,000
//!   requests and 200 MB per input file; output lines `{"id", "custom_id", "response":
//!   {"status_code", "request_id", "body"}, "error"}` in any order; failed requests in the
//!   error file; requests not run when the window passed (`batch_expired`) or the batch was
//!   cancelled (`batch_cancelled`) there too.
//! - <https://platform.openai.com/docs/api-reference/batch/object>: `status` one of
//!   `validating`, `failed`, `in_progress`, `finalizing`, `completed`, `expired`,
//!   `cancelling`, `cancelled`; `errors.data[]` (`code`, `message`, `param`, `line`);
//!   `output_file_id`, `error_file_id`; `request_counts` (`total`, `completed`, `failed`).
//! - <https://platform.openai.com/docs/api-reference/files/create>: `purpose` and `file`.

use bytes::Bytes;
use reqwest::Method;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{OpenAi, endpoint};
use crate::error::{Error, ErrorKind, Result};
use crate::http::{Body, FormPart, HttpRequest, RawResponse};
use crate::id::ProviderId;
use crate::provider::RequestContext;
use crate::provider::bulk::{
    BulkApi, BulkInput, BulkLimits, BulkLine, BulkReply, BulkShape, BulkState, BulkStatus,
    BulkStep, ItemAnswer,
};

/// The endpoint every line and the batch name (the live lane's chat path).
const LINE_URL: &str = "/v1/chat/completions";
/// The key of the label in a batch's `metadata`.
pub(crate) const LABEL_KEY: &str = "llm_failover";

/// Builds the request of a step; `url` makes the URL of the API's path segments (`files`,
/// `batches/{id}`…) for the host: OpenAI's `{base}/…`, Azure's `{base}/openai/…?api-version=`.
/// `line_url` is each line's `url`, `endpoint_name` the create's `endpoint`.
pub(crate) fn step_request(
    id: &ProviderId,
    url: &dyn Fn(&[&str]) -> Result<url::Url>,
    step: &BulkStep,
    line_url: &str,
    endpoint_name: &str,
) -> Result<HttpRequest> {
    match step {
        BulkStep::Upload { lines } => {
            let jsonl = jsonl(lines, line_url)?;
            let mut http = HttpRequest::new(Method::POST, url(&["files"])?);
            http.body = Body::Multipart(vec![
                FormPart::text("purpose", "batch"),
                FormPart::file("file", jsonl, "batch.jsonl", "application/jsonl"),
            ]);
            Ok(http)
        }
        BulkStep::Create { input, label, .. } => {
            let BulkInput::File(file) = input else {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    format!("provider `{id}`: OpenAI's Batch API takes its input as a file"),
                ));
            };
            HttpRequest::post_json(
                url(&["batches"])?,
                &json!({
                    "input_file_id": file,
                    "endpoint": endpoint_name,
                    "completion_window": "24h",
                    "metadata": { LABEL_KEY: label },
                }),
            )
        }
        BulkStep::Poll { id: batch } => {
            Ok(HttpRequest::new(Method::GET, url(&["batches", batch])?))
        }
        BulkStep::Fetch { what } => Ok(HttpRequest::new(
            Method::GET,
            url(&["files", what, "content"])?,
        )),
        BulkStep::Cancel { id: batch } => {
            HttpRequest::post_json(url(&["batches", batch, "cancel"])?, &json!({}))
        }
        BulkStep::Find { after, .. } => {
            let mut url = url(&["batches"])?;
            url.query_pairs_mut().append_pair("limit", "100");
            if let Some(after) = after {
                url.query_pairs_mut().append_pair("after", after);
            }
            Ok(HttpRequest::new(Method::GET, url))
        }
    }
}

/// The input file: one line per item.
fn jsonl(lines: &[BulkLine], url: &str) -> Result<Bytes> {
    let mut out = Vec::new();
    for l in lines {
        let line = json!({
            "custom_id": l.custom_id,
            "method": "POST",
            "url": url,
            "body": l.body,
        });
        serde_json::to_writer(&mut out, &line).map_err(|e| {
            Error::new(
                ErrorKind::InvalidRequest,
                format!("a batch line cannot be written: {e}"),
            )
        })?;
        out.push(b'\n');
    }
    Ok(Bytes::from(out))
}

#[derive(Deserialize)]
struct FileObject {
    id: String,
}

#[derive(Deserialize)]
struct BatchObject {
    id: String,
    status: String,
    #[serde(default)]
    errors: Option<Errors>,
    #[serde(default)]
    output_file_id: Option<String>,
    #[serde(default)]
    error_file_id: Option<String>,
    #[serde(default)]
    request_counts: Option<Counts>,
}

/// `GET /batches`: a page of batch objects
/// (<https://platform.openai.com/docs/api-reference/batch/list>).
#[derive(Deserialize)]
struct BatchList {
    #[serde(default)]
    data: Vec<Listed>,
    #[serde(default)]
    has_more: bool,
    #[serde(default)]
    last_id: Option<String>,
}

/// A batch object in a list, with its metadata.
#[derive(Deserialize)]
struct Listed {
    #[serde(default)]
    metadata: Option<serde_json::Map<String, Value>>,
    #[serde(flatten)]
    batch: BatchObject,
}

#[derive(Deserialize)]
struct Errors {
    #[serde(default)]
    data: Vec<BatchError>,
}

#[derive(Deserialize)]
struct BatchError {
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    line: Option<u64>,
}

#[derive(Deserialize)]
struct Counts {
    #[serde(default)]
    total: u64,
    #[serde(default)]
    completed: u64,
    #[serde(default)]
    failed: u64,
}

/// A batch object's `status`.
pub(crate) fn state(status: &str) -> Option<BulkState> {
    Some(match status {
        "validating" => BulkState::Pending,
        "in_progress" => BulkState::Running,
        "finalizing" => BulkState::Finalizing,
        "completed" => BulkState::Ended,
        "failed" => BulkState::Failed,
        "expired" => BulkState::Expired,
        "cancelling" => BulkState::Cancelling,
        "cancelled" => BulkState::Cancelled,
        _ => return None,
    })
}

fn decode<'a, T: Deserialize<'a>>(id: &ProviderId, what: &str, body: &'a [u8]) -> Result<T> {
    serde_json::from_slice(body).map_err(|e| {
        Error::new(
            ErrorKind::Decode,
            format!("provider `{id}`: {what} is not what OpenAI's Batch API documents: {e}"),
        )
        .with_provider(id.clone())
    })
}

/// Reads a 2xx answer to `step`.
pub(crate) fn step_reply(id: &ProviderId, step: &BulkStep, raw: RawResponse) -> Result<BulkReply> {
    match step {
        BulkStep::Upload { .. } => {
            let f: FileObject = decode(id, "the uploaded file's object", &raw.body)?;
            Ok(BulkReply::Uploaded { file: f.id })
        }
        BulkStep::Fetch { .. } => Ok(BulkReply::Fetched(raw.body.to_vec())),
        BulkStep::Find { label, .. } => {
            let page: BatchList = decode(id, "the list of batches", &raw.body)?;
            let next = if page.has_more { page.last_id } else { None };
            let found = page.data.into_iter().find(|b| {
                b.metadata
                    .as_ref()
                    .and_then(|m| m.get(LABEL_KEY))
                    .and_then(Value::as_str)
                    == Some(label.as_str())
            });
            Ok(BulkReply::Found {
                batch: found.map(|b| status(id, b.batch)).transpose()?,
                next,
            })
        }
        BulkStep::Create { .. } | BulkStep::Poll { .. } | BulkStep::Cancel { .. } => {
            let b: BatchObject = decode(id, "the batch object", &raw.body)?;
            Ok(BulkReply::Status(status(id, b)?))
        }
    }
}

fn status(id: &ProviderId, b: BatchObject) -> Result<BulkStatus> {
    let state = state(&b.status).ok_or_else(|| {
        Error::new(
            ErrorKind::Decode,
            format!(
                "provider `{id}`: batch `{}` has the status `{}`, which OpenAI's Batch API does \
                 not document",
                b.id, b.status
            ),
        )
        .with_provider(id.clone())
    })?;
    let mut s = BulkStatus::new(b.id, state);
    if let Some(c) = b.request_counts {
        (s.total, s.succeeded, s.failed) = (c.total, c.completed, c.failed);
    }
    s.fetch = [b.output_file_id, b.error_file_id]
        .into_iter()
        .flatten()
        .collect();
    if state == BulkState::Failed {
        let errors = b.errors.map(|e| e.data).unwrap_or_default();
        let code = errors
            .iter()
            .find_map(|e| e.code.clone())
            .unwrap_or_else(|| "failed".to_owned());
        let message = errors
            .iter()
            .map(|e| {
                let m = e.message.as_deref().unwrap_or("(no message)");
                match e.line {
                    Some(l) => format!("line {l}: {m}"),
                    None => m.to_owned(),
                }
            })
            .collect::<Vec<_>>()
            .join("; ");
        s.failure = Some((code, message));
    }
    Ok(s)
}

#[derive(Deserialize)]
struct OutputLine {
    custom_id: String,
    #[serde(default)]
    response: Option<LineResponse>,
    #[serde(default)]
    error: Option<LineError>,
}

#[derive(Deserialize)]
struct LineResponse {
    status_code: u16,
    #[serde(default)]
    body: Value,
}

#[derive(Deserialize)]
struct LineError {
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

/// The answers in the output and error files.
pub(crate) fn file_answers(
    id: &ProviderId,
    fetched: &[Vec<u8>],
) -> Result<Vec<(String, ItemAnswer)>> {
    let mut out = Vec::new();
    for doc in fetched {
        for (n, line) in doc.split(|b| *b == b'\n').enumerate() {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let l: OutputLine = decode(id, &format!("line {} of a batch's results", n + 1), line)?;
            out.push((l.custom_id, answer(l.response, l.error)));
        }
    }
    Ok(out)
}

fn answer(response: Option<LineResponse>, error: Option<LineError>) -> ItemAnswer {
    if let Some(r) = response {
        return ItemAnswer::Answered {
            status: r.status_code,
            body: serde_json::to_vec(&r.body).unwrap_or_default(),
        };
    }
    let e = error.unwrap_or(LineError {
        code: None,
        message: None,
    });
    match e.code.as_deref() {
        Some("batch_expired") => ItemAnswer::Expired,
        Some("batch_cancelled") => ItemAnswer::Cancelled,
        code => {
            // A line that failed without a response of its own: the provider's words as a
            // server error, so the item is asked again live rather than lost.
            let body = json!({"error": {
                "message": e.message.as_deref().unwrap_or("a batch line failed without a message"),
                "type": "server_error",
                "code": code,
            }});
            ItemAnswer::Answered {
                status: 500,
                body: serde_json::to_vec(&body).unwrap_or_default(),
            }
        }
    }
}

/// Whether `id` may be a `custom_id` as it is: printable ASCII, 1 to 64 characters (the
/// API documents no rule; these travel everywhere unchanged).
pub(crate) fn plain_id(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic())
}

impl BulkApi for OpenAi {
    fn shape(&self) -> BulkShape {
        BulkShape::File
    }

    /// 50,000 requests and 200 MB per input file.
    fn limits(&self) -> BulkLimits {
        BulkLimits::new(50_000, 200 * 1024 * 1024)
    }

    fn fits_id(&self, id: &str) -> bool {
        plain_id(id)
    }

    fn finds_by_label(&self) -> bool {
        true
    }

    fn request(&self, step: &BulkStep, ctx: &RequestContext<'_>) -> Result<HttpRequest> {
        let url = |segments: &[&str]| endpoint(&self.id, &self.base_url, segments);
        let http = step_request(&self.id, &url, step, LINE_URL, LINE_URL)?;
        self.bearer(http, ctx)
    }

    fn reply(&self, step: &BulkStep, raw: RawResponse) -> Result<BulkReply> {
        step_reply(&self.id, step, raw)
    }

    fn answers(
        &self,
        _status: &BulkStatus,
        fetched: &[Vec<u8>],
        _submitted: &[String],
    ) -> Result<Vec<(String, ItemAnswer)>> {
        file_answers(&self.id, fetched)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderMap;

    fn base() -> url::Url {
        "https://api.openai.com/v1".parse().unwrap()
    }

    fn id() -> ProviderId {
        ProviderId::new("openai")
    }

    fn raw(body: Value) -> RawResponse {
        RawResponse::new(200, HeaderMap::new(), Bytes::from(body.to_string()))
    }

    #[test]
    fn the_input_file_has_one_documented_line_per_item() {
        let lines = vec![
            BulkLine::new("q1", json!({"model": "gpt-4o-mini", "messages": []})),
            BulkLine::new("q2", json!({"model": "gpt-4o-mini", "messages": []})),
        ];
        let url = |segments: &[&str]| endpoint(&id(), &base(), segments);
        let http =
            step_request(&id(), &url, &BulkStep::Upload { lines }, LINE_URL, LINE_URL).unwrap();
        assert_eq!(http.url.as_str(), "https://api.openai.com/v1/files");
        let Body::Multipart(parts) = &http.body else {
            panic!("{:?}", http.body)
        };
        let FormPart::File { bytes, .. } = &parts[1] else {
            panic!("{parts:?}")
        };
        let text = std::str::from_utf8(bytes).unwrap();
        let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(
            first,
            json!({"custom_id": "q1", "method": "POST", "url": "/v1/chat/completions",
                   "body": {"model": "gpt-4o-mini", "messages": []}})
        );
        assert_eq!(text.lines().count(), 2);
    }

    /// Every status the batch object documents, and one it does not.
    #[test]
    fn each_documented_status_reads_as_its_state() {
        let table = [
            ("validating", Some(BulkState::Pending)),
            ("in_progress", Some(BulkState::Running)),
            ("finalizing", Some(BulkState::Finalizing)),
            ("completed", Some(BulkState::Ended)),
            ("failed", Some(BulkState::Failed)),
            ("expired", Some(BulkState::Expired)),
            ("cancelling", Some(BulkState::Cancelling)),
            ("cancelled", Some(BulkState::Cancelled)),
            ("paused", None),
        ];
        for (s, want) in table {
            assert_eq!(state(s), want, "{s}");
        }
        let poll = BulkStep::Poll {
            id: "batch_1".into(),
        };
        let err = step_reply(
            &id(),
            &poll,
            raw(json!({"id": "batch_1", "status": "paused"})),
        )
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Decode);
        assert!(err.message().contains("paused"), "{err}");
    }

    /// The enqueued-token refusal, as OpenAI reports it on the batch object
    /// (<https://platform.openai.com/docs/guides/rate-limits#batch-api>: "the total number of
    /// input tokens in your queue").
    #[test]
    fn a_failed_batch_keeps_its_code_and_messages() {
        let body = json!({
            "id": "batch_1", "object": "batch", "status": "failed",
            "errors": {"object": "list", "data": [{
                "code": "token_limit_exceeded",
                "message": "Enqueued token limit reached for gpt-4o-mini in organization org-x. Limit: 2,000,000 enqueued tokens. Please try again once some in_progress batches have been completed.",
                "param": null, "line": null}]},
            "request_counts": {"total": 0, "completed": 0, "failed": 0},
            "output_file_id": null, "error_file_id": null
        });
        let poll = BulkStep::Poll {
            id: "batch_1".into(),
        };
        let BulkReply::Status(s) = step_reply(&id(), &poll, raw(body)).unwrap() else {
            panic!()
        };
        assert_eq!(s.state, BulkState::Failed);
        let (code, message) = s.failure.unwrap();
        assert_eq!(code, "token_limit_exceeded");
        assert!(
            message.contains("Enqueued token limit reached"),
            "{message}"
        );
    }

    #[test]
    fn a_completed_batch_names_its_files_and_counts() {
        let body = json!({
            "id": "batch_1", "object": "batch", "status": "completed",
            "output_file_id": "file-out", "error_file_id": "file-err",
            "request_counts": {"total": 3, "completed": 2, "failed": 1}
        });
        let poll = BulkStep::Poll {
            id: "batch_1".into(),
        };
        let BulkReply::Status(s) = step_reply(&id(), &poll, raw(body)).unwrap() else {
            panic!()
        };
        assert_eq!(s.fetch, ["file-out", "file-err"]);
        assert_eq!((s.total, s.succeeded, s.failed), (3, 2, 1));
    }

    /// Output and error lines as the guide shows them, in any order.
    #[test]
    fn output_and_error_lines_become_answers_by_custom_id() {
        let out = br#"{"id": "batch_req_2", "custom_id": "q2", "response": {"status_code": 200, "request_id": "r2", "body": {"id": "chatcmpl-2"}}, "error": null}
{"id": "batch_req_1", "custom_id": "q1", "response": {"status_code": 400, "request_id": "r1", "body": {"error": {"message": "bad", "type": "invalid_request_error"}}}, "error": null}
"#;
        let err = br#"{"id": "batch_req_3", "custom_id": "q3", "response": null, "error": {"code": "batch_expired", "message": "This request could not be executed before the completion window expired."}}
{"id": "batch_req_4", "custom_id": "q4", "response": null, "error": {"code": "batch_cancelled", "message": "cancelled"}}
{"id": "batch_req_5", "custom_id": "q5", "response": null, "error": {"code": "something_new", "message": "odd"}}"#;
        let got = file_answers(&id(), &[out.to_vec(), err.to_vec()]).unwrap();
        let ids: Vec<&str> = got.iter().map(|(i, _)| i.as_str()).collect();
        assert_eq!(ids, ["q2", "q1", "q3", "q4", "q5"]);
        assert!(matches!(got[0].1, ItemAnswer::Answered { status: 200, .. }));
        assert!(matches!(got[1].1, ItemAnswer::Answered { status: 400, .. }));
        assert_eq!(got[2].1, ItemAnswer::Expired);
        assert_eq!(got[3].1, ItemAnswer::Cancelled);
        let ItemAnswer::Answered { status: 500, body } = &got[4].1 else {
            panic!("{:?}", got[4])
        };
        assert!(String::from_utf8_lossy(body).contains("odd"));
        let bad = file_answers(&id(), &[b"{\"custom_id\": 3}".to_vec()]).unwrap_err();
        assert_eq!(bad.kind(), ErrorKind::Decode);
        assert!(bad.message().contains("line 1"), "{bad}");
    }

    #[test]
    fn ids_that_travel_unchanged_are_short_printable_ascii() {
        for (id, fits) in [
            ("q1", true),
            ("a-b_c.d:e/f", true),
            ("", false),
            ("with space", false),
            ("é", false),
            (&"x".repeat(65), false),
        ] {
            assert_eq!(plain_id(id), fits, "{id:?}");
        }
    }
}
