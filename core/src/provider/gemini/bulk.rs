//! Gemini's batch mode: the requests inline in `models/{model}:batchGenerateContent`, a
//! batch (a long-running operation) polled until done, its responses inline in the
//! finished operation, in the order the requests were given.
//!
//! - <https://ai.google.dev/gemini-api/docs/batch-mode>: the inline create
//!   `{"batch": {"display_name", "input_config": {"requests": {"requests": [{"request",
//!   "metadata": {"key"}}]}}}}` (inline requests up to 20 MB in all); the batch's
//!   `metadata.state`; the finished batch's `response.inlinedResponses`.
//! - <https://ai.google.dev/api/batch-mode>: `batches.get` (`GET /v1beta/{name}`),
//!   `batches.cancel` (`POST /v1beta/{name}:cancel`); `BatchState` `BATCH_STATE_PENDING`,
//!   `_RUNNING`, `_SUCCEEDED`, `_FAILED`, `_CANCELLED`, `_EXPIRED`;
//!   `GenerateContentBatchOutput.inlinedResponses.inlinedResponses[]`, each a
//!   `GenerateContentResponse` or an `error` (`google.rpc.Status`) with its `metadata`.

use reqwest::Method;
use serde::Deserialize;
use serde_json::{Value, json};
use url::Url;

use super::Gemini;
use crate::error::{Error, ErrorKind, Result};
use crate::http::{HttpRequest, RawResponse};
use crate::provider::RequestContext;
use crate::provider::bulk::{
    BulkApi, BulkInput, BulkLimits, BulkReply, BulkShape, BulkState, BulkStatus, BulkStep,
    ItemAnswer,
};
use crate::provider::openai::bulk::plain_id;

impl Gemini {
    /// `{base}/{name}{suffix}`, the batch's resource name (`batches/…`) as path segments.
    fn batch_url(&self, name: &str, suffix: &str) -> Result<Url> {
        let name = name.strip_prefix('/').unwrap_or(name);
        let mut parts: Vec<&str> = name.split('/').collect();
        if parts.len() != 2 || parts[0] != "batches" || parts[1].is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidRequest,
                format!(
                    "provider `{}`: `{name}` is not a Gemini batch's name (`batches/…`)",
                    self.id
                ),
            ));
        }
        let last = format!("{}{suffix}", parts[1]);
        parts[1] = &last;
        crate::provider::url_with_path(&self.id, &self.base_url, parts)
    }

    fn decode<'a, T: Deserialize<'a>>(&self, what: &str, body: &'a [u8]) -> Result<T> {
        serde_json::from_slice(body).map_err(|e| {
            Error::new(
                ErrorKind::Decode,
                format!(
                    "provider `{}`: {what} is not what Gemini's batch mode documents: {e}",
                    self.id
                ),
            )
            .with_provider(self.id.clone())
        })
    }
}

#[derive(Deserialize)]
struct Batch {
    name: String,
    #[serde(default)]
    metadata: Option<Metadata>,
    #[serde(default)]
    done: bool,
    #[serde(default)]
    error: Option<Status>,
    #[serde(default)]
    response: Option<Value>,
}

/// `GET /batches`: a page of batches (long-running operations).
#[derive(Deserialize)]
struct Page {
    #[serde(default)]
    operations: Vec<Value>,
    #[serde(default, rename = "nextPageToken")]
    next: Option<String>,
}

#[derive(Deserialize)]
struct Metadata {
    #[serde(default)]
    state: Option<String>,
    #[serde(default, rename = "batchStats")]
    stats: Option<Stats>,
}

/// Counts arrive as strings (int64 in JSON).
#[derive(Deserialize)]
struct Stats {
    #[serde(default, rename = "requestCount")]
    requests: Option<Value>,
    #[serde(default, rename = "successfulRequestCount")]
    succeeded: Option<Value>,
    #[serde(default, rename = "failedRequestCount")]
    failed: Option<Value>,
}

#[derive(Deserialize)]
struct Status {
    #[serde(default)]
    code: Option<i64>,
    #[serde(default)]
    message: Option<String>,
}

fn count(v: Option<&Value>) -> u64 {
    match v {
        Some(Value::String(s)) => s.parse().unwrap_or(0),
        Some(v) => v.as_u64().unwrap_or(0),
        None => 0,
    }
}

/// A `BatchState`.
fn state(s: &str) -> Option<BulkState> {
    Some(match s {
        "BATCH_STATE_PENDING" => BulkState::Pending,
        "BATCH_STATE_RUNNING" => BulkState::Running,
        "BATCH_STATE_SUCCEEDED" => BulkState::Ended,
        "BATCH_STATE_FAILED" => BulkState::Failed,
        "BATCH_STATE_CANCELLED" => BulkState::Cancelled,
        "BATCH_STATE_EXPIRED" => BulkState::Expired,
        _ => return None,
    })
}

/// The HTTP status and name of a line's error code: a `google.rpc.Code` (1 to 16, what the
/// `Status` message holds: <https://cloud.google.com/apis/design/errors#handling_errors>),
/// or the HTTP status Google's JSON error bodies put in `code` (400, 429, …) — both are
/// read, since a batch's inline `error` has been seen in either form.
fn http_of(code: i64) -> (u16, &'static str) {
    let code = match code {
        400 => 3,
        401 => 16,
        403 => 7,
        404 => 5,
        429 => 8,
        499 => 1,
        503 => 14,
        504 => 4,
        c if c >= 100 => 13,
        c => c,
    };
    match code {
        1 => (499, "CANCELLED"),
        3 => (400, "INVALID_ARGUMENT"),
        4 => (504, "DEADLINE_EXCEEDED"),
        5 => (404, "NOT_FOUND"),
        7 => (403, "PERMISSION_DENIED"),
        8 => (429, "RESOURCE_EXHAUSTED"),
        9 => (400, "FAILED_PRECONDITION"),
        14 => (503, "UNAVAILABLE"),
        16 => (401, "UNAUTHENTICATED"),
        _ => (500, "INTERNAL"),
    }
}

impl BulkApi for Gemini {
    fn shape(&self) -> BulkShape {
        BulkShape::Operation
    }

    /// Inline requests up to 20 MB in all; no count is documented.
    fn limits(&self) -> BulkLimits {
        BulkLimits::new(usize::MAX, 20 * 1024 * 1024)
    }

    fn fits_id(&self, id: &str) -> bool {
        plain_id(id)
    }

    fn request(&self, step: &BulkStep, ctx: &RequestContext<'_>) -> Result<HttpRequest> {
        let mut http = match step {
            BulkStep::Create {
                model,
                input: BulkInput::Lines(lines),
                label,
            } => {
                let requests: Vec<Value> = lines
                    .iter()
                    .map(|l| json!({"request": l.body, "metadata": {"key": l.custom_id}}))
                    .collect();
                let body = json!({"batch": {
                    "display_name": label,
                    "input_config": {"requests": {"requests": requests}},
                }});
                HttpRequest::post_json(self.endpoint(model, "batchGenerateContent")?, &body)?
            }
            BulkStep::Poll { id } => HttpRequest::new(Method::GET, self.batch_url(id, "")?),
            BulkStep::Find { after, .. } => {
                let mut url =
                    crate::provider::url_with_path(&self.id, &self.base_url, ["batches"])?;
                url.query_pairs_mut().append_pair("pageSize", "100");
                if let Some(after) = after {
                    url.query_pairs_mut().append_pair("pageToken", after);
                }
                HttpRequest::new(Method::GET, url)
            }
            BulkStep::Cancel { id } => {
                HttpRequest::post_json(self.batch_url(id, ":cancel")?, &json!({}))?
            }
            BulkStep::Upload { .. } | BulkStep::Create { .. } | BulkStep::Fetch { .. } => {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    format!(
                        "provider `{}`: Gemini's batch mode takes its requests inline and \
                         answers inline",
                        self.id
                    ),
                ));
            }
        };
        if let Some(key) = ctx.credential {
            http = http.secret_header("x-goog-api-key", key.expose())?;
        }
        Ok(http)
    }

    fn finds_by_label(&self) -> bool {
        true
    }

    fn reply(&self, step: &BulkStep, raw: RawResponse) -> Result<BulkReply> {
        if let BulkStep::Find { label, .. } = step {
            let page: Page = self.decode("the list of batches", &raw.body)?;
            let next = page.next.filter(|n| !n.is_empty());
            let Some(op) = page.operations.into_iter().find(|op| {
                let m = &op["metadata"];
                m["displayName"].as_str() == Some(label.as_str())
                    || m["display_name"].as_str() == Some(label.as_str())
            }) else {
                return Ok(BulkReply::Found { batch: None, next });
            };
            let raw = RawResponse::new(200, raw.headers, bytes::Bytes::from(op.to_string()));
            let BulkReply::Status(found) =
                self.reply(&BulkStep::Poll { id: String::new() }, raw)?
            else {
                return Ok(BulkReply::Found { batch: None, next });
            };
            return Ok(BulkReply::Found {
                batch: Some(found),
                next,
            });
        }
        let b: Batch = self.decode("the batch", &raw.body)?;
        let named = b.metadata.as_ref().and_then(|m| m.state.as_deref());
        let mut st = match named.map(|s| (s, state(s))) {
            Some((_, Some(s))) => s,
            Some((other, None)) => {
                return Err(Error::new(
                    ErrorKind::Decode,
                    format!(
                        "provider `{}`: batch `{}` is in the state `{other}`, which Gemini does \
                         not document",
                        self.id, b.name
                    ),
                )
                .with_provider(self.id.clone()));
            }
            None if b.done => BulkState::Ended,
            None => BulkState::Pending,
        };
        if b.error.is_some() && st == BulkState::Ended {
            st = BulkState::Failed;
        }
        let mut s = BulkStatus::new(b.name, st);
        if let Some(stats) = b.metadata.and_then(|m| m.stats) {
            s.total = count(stats.requests.as_ref());
            s.succeeded = count(stats.succeeded.as_ref());
            s.failed = count(stats.failed.as_ref());
        }
        if let Some(e) = b.error {
            let (_, name) = http_of(e.code.unwrap_or(13));
            s.failure = Some((
                name.to_owned(),
                e.message.unwrap_or_else(|| "(no message)".to_owned()),
            ));
        }
        s.inline = b.response;
        Ok(BulkReply::Status(s))
    }

    fn answers(
        &self,
        status: &BulkStatus,
        _fetched: &[Vec<u8>],
        submitted: &[String],
    ) -> Result<Vec<(String, ItemAnswer)>> {
        let Some(output) = &status.inline else {
            return Ok(Vec::new());
        };
        // `inlinedResponses` holds `inlinedResponses` (the REST message); a bare list is
        // read too.
        let list = match &output["inlinedResponses"] {
            Value::Array(a) => a,
            v => match &v["inlinedResponses"] {
                Value::Array(a) => a,
                Value::Null => return Ok(Vec::new()),
                _ => {
                    return Err(Error::new(
                        ErrorKind::Decode,
                        format!(
                            "provider `{}`: batch `{}`'s inlinedResponses is not a list",
                            self.id, status.id
                        ),
                    )
                    .with_provider(self.id.clone()));
                }
            },
        };
        let mut out = Vec::with_capacity(list.len());
        for (i, r) in list.iter().enumerate() {
            let key = match r["metadata"]["key"].as_str() {
                Some(k) => k.to_owned(),
                None => submitted.get(i).cloned().ok_or_else(|| {
                    Error::new(
                        ErrorKind::Decode,
                        format!(
                            "provider `{}`: response {} of batch `{}` has no key, and only {} \
                             requests were submitted",
                            self.id,
                            i + 1,
                            status.id,
                            submitted.len()
                        ),
                    )
                    .with_provider(self.id.clone())
                })?,
            };
            let answer = if let Some(resp) = r.get("response").filter(|v| !v.is_null()) {
                ItemAnswer::Answered {
                    status: 200,
                    body: serde_json::to_vec(resp).unwrap_or_default(),
                }
            } else {
                let e = &r["error"];
                let (http, name) = http_of(e["code"].as_i64().unwrap_or(13));
                let body = json!({"error": {
                    "code": http,
                    "message": e["message"].as_str().unwrap_or("a batch request failed without a message"),
                    "status": name,
                }});
                ItemAnswer::Answered {
                    status: http,
                    body: serde_json::to_vec(&body).unwrap_or_default(),
                }
            };
            out.push((key, answer));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::Credential;
    use crate::id::ProviderId;
    use crate::provider::bulk::BulkLine;
    use bytes::Bytes;
    use reqwest::header::HeaderMap;

    fn adapter() -> Gemini {
        Gemini::new(
            ProviderId::new("gemini"),
            "https://generativelanguage.googleapis.com/v1beta"
                .parse()
                .unwrap(),
        )
    }

    fn raw(body: Value) -> RawResponse {
        RawResponse::new(200, HeaderMap::new(), Bytes::from(body.to_string()))
    }

    fn status(body: Value) -> BulkStatus {
        let poll = BulkStep::Poll {
            id: "batches/b1".into(),
        };
        let BulkReply::Status(s) = adapter().reply(&poll, raw(body)).unwrap() else {
            panic!()
        };
        s
    }

    #[test]
    fn the_create_names_the_model_and_carries_each_request_with_its_key() {
        let key = Credential::new("AIza-test");
        let ctx = RequestContext::new("gemini-2.5-flash", Some(&key));
        let step = BulkStep::Create {
            model: "gemini-2.5-flash".into(),
            input: BulkInput::Lines(vec![BulkLine::new("q1", json!({"contents": []}))]),
            label: "run-1".into(),
        };
        let http = adapter().request(&step, &ctx).unwrap();
        assert_eq!(
            http.url.as_str(),
            "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:batchGenerateContent"
        );
        assert!(http.headers["x-goog-api-key"].is_sensitive());
        let body: Value = serde_json::from_slice(http.json_body().unwrap()).unwrap();
        assert_eq!(body["batch"]["display_name"], "run-1");
        let r = &body["batch"]["input_config"]["requests"]["requests"][0];
        assert_eq!(r["metadata"]["key"], "q1");
        assert_eq!(r["request"], json!({"contents": []}));
        let poll = BulkStep::Poll {
            id: "batches/b1".into(),
        };
        assert_eq!(
            adapter().request(&poll, &ctx).unwrap().url.as_str(),
            "https://generativelanguage.googleapis.com/v1beta/batches/b1"
        );
        let cancel = BulkStep::Cancel {
            id: "batches/b1".into(),
        };
        assert_eq!(
            adapter().request(&cancel, &ctx).unwrap().url.as_str(),
            "https://generativelanguage.googleapis.com/v1beta/batches/b1:cancel"
        );
        let odd = BulkStep::Poll {
            id: "../models/x".into(),
        };
        assert_eq!(
            adapter().request(&odd, &ctx).unwrap_err().kind(),
            ErrorKind::InvalidRequest
        );
    }

    #[test]
    fn each_batch_state_reads_as_its_state() {
        for (name, want) in [
            ("BATCH_STATE_PENDING", BulkState::Pending),
            ("BATCH_STATE_RUNNING", BulkState::Running),
            ("BATCH_STATE_SUCCEEDED", BulkState::Ended),
            ("BATCH_STATE_FAILED", BulkState::Failed),
            ("BATCH_STATE_CANCELLED", BulkState::Cancelled),
            ("BATCH_STATE_EXPIRED", BulkState::Expired),
        ] {
            let s = status(json!({"name": "batches/b1", "metadata": {"state": name}}));
            assert_eq!(s.state, want, "{name}");
        }
        let poll = BulkStep::Poll {
            id: "batches/b1".into(),
        };
        let odd = json!({"name": "batches/b1", "metadata": {"state": "BATCH_STATE_PAUSED"}});
        assert_eq!(
            adapter().reply(&poll, raw(odd)).unwrap_err().kind(),
            ErrorKind::Decode
        );
    }

    /// A finished batch's inlined responses, in input order, one of them an error.
    #[test]
    fn inlined_responses_become_answers_by_key_or_position() {
        let s = status(json!({
            "name": "batches/b1",
            "done": true,
            "metadata": {"state": "BATCH_STATE_SUCCEEDED",
                         "batchStats": {"requestCount": "3", "successfulRequestCount": "2", "failedRequestCount": "1"}},
            "response": {"@type": "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatchOutput",
                "inlinedResponses": {"inlinedResponses": [
                    {"response": {"candidates": [{"content": {"parts": [{"text": "a"}]}}]}, "metadata": {"key": "q1"}},
                    {"error": {"code": 3, "message": "bad request"}, "metadata": {"key": "q2"}},
                    {"response": {"candidates": []}}
                ]}}
        }));
        assert_eq!((s.total, s.succeeded, s.failed), (3, 2, 1));
        let got = adapter()
            .answers(&s, &[], &["q1".into(), "q2".into(), "q3".into()])
            .unwrap();
        let ids: Vec<&str> = got.iter().map(|(i, _)| i.as_str()).collect();
        assert_eq!(ids, ["q1", "q2", "q3"]);
        assert!(matches!(got[0].1, ItemAnswer::Answered { status: 200, .. }));
        let ItemAnswer::Answered { status: 400, body } = &got[1].1 else {
            panic!("{:?}", got[1])
        };
        assert!(String::from_utf8_lossy(body).contains("INVALID_ARGUMENT"));
        let short = adapter().answers(&s, &[], &["q1".into()]).unwrap_err();
        assert_eq!(short.kind(), ErrorKind::Decode);
    }

    #[test]
    fn a_failed_operation_keeps_its_message() {
        for (code, http, name) in [
            (3, 400, "INVALID_ARGUMENT"),
            (400, 400, "INVALID_ARGUMENT"),
            (8, 429, "RESOURCE_EXHAUSTED"),
            (429, 429, "RESOURCE_EXHAUSTED"),
            (13, 500, "INTERNAL"),
            (502, 500, "INTERNAL"),
            (14, 503, "UNAVAILABLE"),
            (503, 503, "UNAVAILABLE"),
        ] {
            assert_eq!(http_of(code), (http, name), "{code}");
        }
        let s = status(json!({"name": "batches/b1", "done": true,
            "error": {"code": 8, "message": "quota"}}));
        assert_eq!(s.state, BulkState::Failed);
        assert_eq!(
            s.failure,
            Some(("RESOURCE_EXHAUSTED".to_owned(), "quota".to_owned()))
        );
    }
}
