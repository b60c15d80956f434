//! Anthropic's Message Batches: the requests inline in the create, the batch polled until
//! `processing_status` is `ended`, its results downloaded from `results_url` as JSON lines
//! in any order.
//!
//! - <https://docs.anthropic.com/en/api/creating-message-batches>: `POST
//!   /v1/messages/batches` with `{"requests": [{"custom_id", "params"}]}`; `custom_id`
//!   matches `^[a-zA-Z0-9_-]{1,64}$`; at most 100,000 requests or 256 MB per batch.
//! - <https://docs.anthropic.com/en/api/retrieving-message-batches>: the `message_batch`
//!   object: `processing_status` `in_progress`, `canceling` or `ended`; `request_counts`
//!   (`processing`, `succeeded`, `errored`, `canceled`, `expired`); `results_url` once ended.
//! - <https://docs.anthropic.com/en/api/retrieving-message-batch-results>: one line per
//!   request, `{"custom_id", "result": {"type": "succeeded", "message"}}`, `errored` (with
//!   the error object), `canceled` or `expired`, in any order.
//! - <https://docs.anthropic.com/en/api/canceling-message-batches>: `POST …/{id}/cancel`.

use reqwest::Method;
use serde::Deserialize;
use serde_json::{Value, json};
use url::Url;

use super::Anthropic;
use crate::error::{Error, ErrorKind, Result};
use crate::http::{HttpRequest, RawResponse};
use crate::provider::RequestContext;
use crate::provider::bulk::{
    BulkApi, BulkInput, BulkLimits, BulkReply, BulkShape, BulkState, BulkStatus, BulkStep,
    ItemAnswer,
};

impl Anthropic {
    fn batches(&self, tail: &[&str]) -> Result<Url> {
        let head = ["v1", "messages", "batches"];
        crate::provider::url_with_path(&self.id, &self.base_url, head.iter().chain(tail).copied())
    }

    fn decode<'a, T: Deserialize<'a>>(&self, what: &str, body: &'a [u8]) -> Result<T> {
        serde_json::from_slice(body).map_err(|e| {
            Error::new(
                ErrorKind::Decode,
                format!(
                    "provider `{}`: {what} is not what Anthropic's Message Batches API \
                     documents: {e}",
                    self.id
                ),
            )
            .with_provider(self.id.clone())
        })
    }

    /// The results URL a status named, if it is on the provider's own origin: the key is
    /// never sent anywhere else.
    fn results_url(&self, what: &str) -> Result<Url> {
        let url: Url = what.parse().map_err(|e| {
            Error::new(
                ErrorKind::Decode,
                format!(
                    "provider `{}`: the batch's results_url is no URL: {e}",
                    self.id
                ),
            )
            .with_provider(self.id.clone())
        })?;
        if url.origin() != self.base_url.origin() {
            return Err(Error::new(
                ErrorKind::InvalidAnswer,
                format!(
                    "provider `{}`: the batch's results_url is on another origin ({}) than \
                     the provider's base_url ({}); its key is not sent there",
                    self.id,
                    url.origin().ascii_serialization(),
                    self.base_url.origin().ascii_serialization()
                ),
            )
            .with_provider(self.id.clone()));
        }
        Ok(url)
    }
}

#[derive(Deserialize)]
struct MessageBatch {
    id: String,
    processing_status: String,
    #[serde(default)]
    request_counts: Option<Counts>,
    #[serde(default)]
    results_url: Option<String>,
}

#[derive(Deserialize)]
struct Counts {
    #[serde(default)]
    processing: u64,
    #[serde(default)]
    succeeded: u64,
    #[serde(default)]
    errored: u64,
    #[serde(default)]
    canceled: u64,
    #[serde(default)]
    expired: u64,
}

#[derive(Deserialize)]
struct ResultLine {
    custom_id: String,
    result: LineResult,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum LineResult {
    Succeeded { message: Value },
    Errored { error: Value },
    Canceled,
    Expired,
}

/// The HTTP status the live API answers each error type with
/// (<https://docs.anthropic.com/en/api/errors>): an errored result carries the type only.
fn status_of(error_type: &str) -> u16 {
    match error_type {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "billing_error" => 402,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "timeout_error" => 504,
        "overloaded_error" => 529,
        _ => 500,
    }
}

/// Whether `id` may be a `custom_id` as it is: `^[a-zA-Z0-9_-]{1,64}$`.
pub(crate) fn fits(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl BulkApi for Anthropic {
    fn shape(&self) -> BulkShape {
        BulkShape::Inline
    }

    /// 100,000 requests or 256 MB per batch.
    fn limits(&self) -> BulkLimits {
        BulkLimits::new(100_000, 256 * 1024 * 1024)
    }

    fn fits_id(&self, id: &str) -> bool {
        fits(id)
    }

    fn request(&self, step: &BulkStep, ctx: &RequestContext<'_>) -> Result<HttpRequest> {
        let http = match step {
            BulkStep::Create {
                input: BulkInput::Lines(lines),
                ..
            } => {
                let requests: Vec<Value> = lines
                    .iter()
                    .map(|l| json!({"custom_id": l.custom_id, "params": l.body}))
                    .collect();
                HttpRequest::post_json(self.batches(&[])?, &json!({ "requests": requests }))?
            }
            BulkStep::Poll { id } => HttpRequest::new(Method::GET, self.batches(&[id])?),
            BulkStep::Fetch { what } => HttpRequest::new(Method::GET, self.results_url(what)?),
            BulkStep::Cancel { id } => {
                HttpRequest::post_json(self.batches(&[id, "cancel"])?, &json!({}))?
            }
            BulkStep::Upload { .. } | BulkStep::Create { .. } | BulkStep::Find { .. } => {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    format!(
                        "provider `{}`: Anthropic's Message Batches take their requests inline",
                        self.id
                    ),
                ));
            }
        };
        let mut http = http.header("anthropic-version", &self.version)?;
        if let Some(key) = ctx.credential {
            http = http.secret_header("x-api-key", key.expose())?;
        }
        Ok(http)
    }

    fn reply(&self, step: &BulkStep, raw: RawResponse) -> Result<BulkReply> {
        if let BulkStep::Fetch { .. } = step {
            return Ok(BulkReply::Fetched(raw.body.to_vec()));
        }
        let b: MessageBatch = self.decode("the message batch", &raw.body)?;
        let state = match b.processing_status.as_str() {
            "in_progress" => BulkState::Running,
            "canceling" => BulkState::Cancelling,
            // An ended batch that was cancelled still has its results, as a completed one.
            "ended" => BulkState::Ended,
            other => {
                return Err(Error::new(
                    ErrorKind::Decode,
                    format!(
                        "provider `{}`: batch `{}` has the processing_status `{other}`, which \
                         Anthropic does not document",
                        self.id, b.id
                    ),
                )
                .with_provider(self.id.clone()));
            }
        };
        let mut s = BulkStatus::new(b.id, state);
        if let Some(c) = b.request_counts {
            s.succeeded = c.succeeded;
            s.failed = c.errored + c.canceled + c.expired;
            s.total = c.processing + s.succeeded + s.failed;
        }
        if state == BulkState::Ended {
            s.fetch = b.results_url.into_iter().collect();
        }
        Ok(BulkReply::Status(s))
    }

    fn answers(
        &self,
        _status: &BulkStatus,
        fetched: &[Vec<u8>],
        _submitted: &[String],
    ) -> Result<Vec<(String, ItemAnswer)>> {
        let mut out = Vec::new();
        for doc in fetched {
            for (n, line) in doc.split(|b| *b == b'\n').enumerate() {
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let l: ResultLine =
                    self.decode(&format!("line {} of a batch's results", n + 1), line)?;
                let answer = match l.result {
                    LineResult::Succeeded { message } => ItemAnswer::Answered {
                        status: 200,
                        body: serde_json::to_vec(&message).unwrap_or_default(),
                    },
                    LineResult::Errored { error } => {
                        let ty = error["error"]["type"].as_str().unwrap_or_default();
                        ItemAnswer::Answered {
                            status: status_of(ty),
                            body: serde_json::to_vec(&error).unwrap_or_default(),
                        }
                    }
                    LineResult::Canceled => ItemAnswer::Cancelled,
                    LineResult::Expired => ItemAnswer::Expired,
                };
                out.push((l.custom_id, answer));
            }
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

    fn adapter() -> Anthropic {
        Anthropic::new(
            ProviderId::new("anthropic"),
            "https://api.anthropic.com".parse().unwrap(),
        )
    }

    fn raw(body: Value) -> RawResponse {
        RawResponse::new(200, HeaderMap::new(), Bytes::from(body.to_string()))
    }

    #[test]
    fn the_create_carries_the_requests_inline_with_the_key_and_version() {
        let key = Credential::new("sk-ant-test");
        let ctx = RequestContext::new("claude-3-5-haiku-latest", Some(&key));
        let step = BulkStep::Create {
            model: "claude-3-5-haiku-latest".into(),
            input: BulkInput::Lines(vec![BulkLine::new(
                "q1",
                json!({"model": "claude-3-5-haiku-latest", "max_tokens": 8, "messages": []}),
            )]),
            label: "run".into(),
        };
        let http = adapter().request(&step, &ctx).unwrap();
        assert_eq!(
            http.url.as_str(),
            "https://api.anthropic.com/v1/messages/batches"
        );
        assert!(http.headers["x-api-key"].is_sensitive());
        assert_eq!(http.headers["anthropic-version"], "2023-06-01");
        let body: Value = serde_json::from_slice(http.json_body().unwrap()).unwrap();
        assert_eq!(body["requests"][0]["custom_id"], "q1");
        assert_eq!(body["requests"][0]["params"]["max_tokens"], 8);
        let upload = BulkStep::Upload { lines: Vec::new() };
        assert_eq!(
            adapter().request(&upload, &ctx).unwrap_err().kind(),
            ErrorKind::Unsupported
        );
    }

    #[test]
    fn each_processing_status_reads_as_its_state_and_an_ended_one_names_its_results() {
        let poll = BulkStep::Poll {
            id: "msgbatch_1".into(),
        };
        for (status, want) in [
            ("in_progress", BulkState::Running),
            ("canceling", BulkState::Cancelling),
            ("ended", BulkState::Ended),
        ] {
            let body = json!({
                "id": "msgbatch_1", "type": "message_batch", "processing_status": status,
                "request_counts": {"processing": 1, "succeeded": 2, "errored": 1, "canceled": 0, "expired": 1},
                "results_url": "https://api.anthropic.com/v1/messages/batches/msgbatch_1/results"
            });
            let BulkReply::Status(s) = adapter().reply(&poll, raw(body)).unwrap() else {
                panic!()
            };
            assert_eq!(s.state, want, "{status}");
            assert_eq!((s.total, s.succeeded, s.failed), (5, 2, 2));
            assert_eq!(s.fetch.len(), usize::from(want == BulkState::Ended));
        }
        let odd = json!({"id": "msgbatch_1", "processing_status": "paused"});
        assert_eq!(
            adapter().reply(&poll, raw(odd)).unwrap_err().kind(),
            ErrorKind::Decode
        );
    }

    #[test]
    fn results_are_fetched_only_from_the_providers_own_origin() {
        let ctx = RequestContext::new("m", None);
        let here = BulkStep::Fetch {
            what: "https://api.anthropic.com/v1/messages/batches/msgbatch_1/results".into(),
        };
        assert!(adapter().request(&here, &ctx).is_ok());
        let elsewhere = BulkStep::Fetch {
            what: "https://evil.example/results".into(),
        };
        let err = adapter().request(&elsewhere, &ctx).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidAnswer);
        assert!(err.message().contains("another origin"), "{err}");
    }

    /// The four result types as the results page shows them, in any order.
    #[test]
    fn result_lines_become_answers_by_custom_id() {
        let doc = br#"{"custom_id":"b","result":{"type":"errored","error":{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}}}
{"custom_id":"a","result":{"type":"succeeded","message":{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"Hi"}]}}}
{"custom_id":"c","result":{"type":"canceled"}}
{"custom_id":"d","result":{"type":"expired"}}
{"custom_id":"e","result":{"type":"errored","error":{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}}}
"#;
        let got = adapter()
            .answers(
                &BulkStatus::new("x", BulkState::Ended),
                &[doc.to_vec()],
                &[],
            )
            .unwrap();
        let ids: Vec<&str> = got.iter().map(|(i, _)| i.as_str()).collect();
        assert_eq!(ids, ["b", "a", "c", "d", "e"]);
        assert!(matches!(got[0].1, ItemAnswer::Answered { status: 400, .. }));
        assert!(matches!(got[1].1, ItemAnswer::Answered { status: 200, .. }));
        assert_eq!(got[2].1, ItemAnswer::Cancelled);
        assert_eq!(got[3].1, ItemAnswer::Expired);
        assert!(matches!(got[4].1, ItemAnswer::Answered { status: 529, .. }));
    }

    #[test]
    fn custom_ids_follow_the_documented_pattern() {
        for (id, ok) in [
            ("q1", true),
            ("a-b_C9", true),
            ("", false),
            ("a.b", false),
            ("a b", false),
            (&"x".repeat(64), true),
            (&"x".repeat(65), false),
        ] {
            assert_eq!(fits(id), ok, "{id:?}");
        }
    }
}
