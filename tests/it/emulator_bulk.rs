//! The emulator's Batch APIs (issue 30), over loopback with plain HTTP: OpenAI's files and
//! batches (and Azure's global batch), Anthropic's Message Batches, Gemini's
//! `batchGenerateContent` operations — each behaviour a test can set (processing time on a
//! manual clock, results out of order, per-item failures, expiry with partial results, the
//! enqueued-token limit, the processing-queue limit, cancellation) and the batch log; then
//! the official Python SDKs' batch calls against it (`emulator/sdk/check_batch.py`).
//!
//! Every test but the last runs the emulator on a `ManualClock`: a batch's hours pass with
//! `advance`, nothing sleeps.

use std::process::Stdio;
use std::time::Duration;

use llm_failover::clock::{Clock, ManualClock};
use llm_failover_emulator::{BatchItemFault, BatchOrder, BatchTiming, Emulator, Fault, TimeSource};
use serde_json::{Value, json};

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);

fn shared(clock: &ManualClock) -> TimeSource {
    let c = clock.clone();
    TimeSource::new(move || (c.now(), c.wall()))
}

/// Every batch provider on `clock`, with batches that validate for a minute, process for ten
/// and finalize for one.
async fn emulator(clock: &ManualClock) -> Emulator {
    let emu = Emulator::builder()
        .openai("openai")
        .azure("azure")
        .anthropic("anthropic")
        .gemini("gemini")
        .time_source(shared(clock))
        .start()
        .await
        .unwrap();
    let timing = BatchTiming::new(10 * MINUTE)
        .with_validating(MINUTE)
        .with_finalizing(MINUTE);
    for p in ["openai", "azure", "anthropic", "gemini"] {
        emu.set_batch_timing(p, timing);
    }
    emu
}

fn http() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

async fn read(resp: reqwest::Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn ids(items: &[(&str, &str)]) -> Vec<String> {
    items.iter().map(|(id, _)| (*id).to_owned()).collect()
}

const ITEMS: [(&str, &str); 4] = [
    ("a", "Tell me about apples"),
    ("b", "Tell me about bananas"),
    ("c", "Tell me about cherries"),
    ("d", "Tell me about dates"),
];

// ------------------------------------------------------------------------------------------
// OpenAI: platform.openai.com/docs/api-reference/batch, …/files, …/docs/guides/batch.

struct OpenAi<'a> {
    emu: &'a Emulator,
    http: reqwest::Client,
    prefix: &'a str,
}

impl OpenAi<'_> {
    fn new<'a>(emu: &'a Emulator, prefix: &'a str) -> OpenAi<'a> {
        OpenAi {
            emu,
            http: http(),
            prefix,
        }
    }

    /// `/v1/…` for OpenAI, `/openai/…?api-version=` for Azure.
    fn url(&self, path: &str) -> String {
        match self.prefix {
            "azure" => format!(
                "{}/openai{path}?api-version=2024-10-21",
                self.emu.base_url("azure")
            ),
            p => format!("{}{path}", self.emu.base_url(p)),
        }
    }

    fn auth(&self, r: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match self.prefix {
            "azure" => r.header("api-key", self.emu.key("azure")),
            p => r.bearer_auth(self.emu.key(p)),
        }
    }

    fn endpoint(&self) -> &'static str {
        if self.prefix == "azure" {
            "/chat/completions"
        } else {
            "/v1/chat/completions"
        }
    }

    fn line(&self, id: &str, model: &str, text: &str) -> String {
        json!({"custom_id": id, "method": "POST", "url": self.endpoint(),
               "body": {"model": model, "messages": [{"role": "user", "content": text}]}})
        .to_string()
    }

    fn jsonl(&self, items: &[(&str, &str)]) -> String {
        let lines: Vec<String> = items
            .iter()
            .map(|(id, text)| self.line(id, "gpt-4o-mini", text))
            .collect();
        lines.join("\n") + "\n"
    }

    async fn upload(&self, jsonl: String) -> String {
        let form = reqwest::multipart::Form::new()
            .text("purpose", "batch")
            .part(
                "file",
                reqwest::multipart::Part::bytes(jsonl.into_bytes()).file_name("batch.jsonl"),
            );
        let (status, file) = read(
            self.auth(self.http.post(self.url("/files")))
                .multipart(form)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200, "{file}");
        assert_eq!(file["object"], "file");
        assert_eq!(file["purpose"], "batch");
        file["id"].as_str().unwrap().to_owned()
    }

    async fn create(&self, items: &[(&str, &str)]) -> Value {
        let file = self.upload(self.jsonl(items)).await;
        self.create_from(&file).await
    }

    async fn create_from(&self, file: &str) -> Value {
        let body = json!({"input_file_id": file, "endpoint": self.endpoint(),
                          "completion_window": "24h", "metadata": {"run": "test"}});
        let (status, batch) = read(
            self.auth(self.http.post(self.url("/batches")))
                .json(&body)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200, "{batch}");
        assert_eq!(batch["object"], "batch");
        batch
    }

    async fn get(&self, batch: &Value) -> Value {
        let id = batch["id"].as_str().unwrap();
        let (status, b) = read(
            self.auth(self.http.get(self.url(&format!("/batches/{id}"))))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200, "{b}");
        b
    }

    async fn cancel(&self, batch: &Value) -> Value {
        let id = batch["id"].as_str().unwrap();
        let (status, b) = read(
            self.auth(self.http.post(self.url(&format!("/batches/{id}/cancel"))))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200, "{b}");
        b
    }

    /// The lines of a result file (none when the batch has no such file).
    async fn lines(&self, file: &Value) -> Vec<Value> {
        let Some(id) = file.as_str() else {
            return Vec::new();
        };
        let resp = self
            .auth(self.http.get(self.url(&format!("/files/{id}/content"))))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        resp.text()
            .await
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

fn custom_ids(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .map(|l| l["custom_id"].as_str().unwrap().to_owned())
        .collect()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// platform.openai.com/docs/api-reference/batch/object: `validating → in_progress →
/// finalizing → completed`, `request_counts` as items finish, the output file's lines
/// `{id, custom_id, response: {status_code: 200, request_id, body}, error: null}` in an order
/// that is not the input's ("the output line order may not match the input line order",
/// …/docs/guides/batch), each body the live endpoint's own answer.
#[tokio::test]
async fn an_openai_batch_walks_its_statuses_on_the_emulators_clock() {
    let clock = ManualClock::new();
    let emu = emulator(&clock).await;
    let api = OpenAi::new(&emu, "openai");
    let batch = api.create(&ITEMS).await;
    assert_eq!(batch["status"], "validating");
    assert_eq!(batch["model"], "gpt-4o-mini");
    assert_eq!(batch["metadata"], json!({"run": "test"}));
    assert_eq!(
        batch["expires_at"].as_u64().unwrap() - batch["created_at"].as_u64().unwrap(),
        24 * 3600
    );
    for field in [
        "output_file_id",
        "error_file_id",
        "in_progress_at",
        "completed_at",
    ] {
        assert!(batch[field].is_null(), "{field}: {batch}");
    }

    clock.advance(MINUTE);
    let b = api.get(&batch).await;
    assert_eq!(b["status"], "in_progress");
    assert_eq!(
        b["request_counts"],
        json!({"total": 4, "completed": 0, "failed": 0})
    );
    clock.advance(5 * MINUTE); // half the processing time: two of four items
    let b = api.get(&batch).await;
    assert_eq!(b["request_counts"]["completed"], 2, "{b}");
    clock.advance(5 * MINUTE);
    assert_eq!(api.get(&batch).await["status"], "finalizing");
    clock.advance(MINUTE);
    let done = api.get(&batch).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["request_counts"],
        json!({"total": 4, "completed": 4, "failed": 0})
    );
    assert!(done["error_file_id"].is_null());
    assert!(done["completed_at"].as_u64() > done["in_progress_at"].as_u64());

    let lines = api.lines(&done["output_file_id"]).await;
    let got = custom_ids(&lines);
    assert_eq!(sorted(got.clone()), ids(&ITEMS));
    assert_ne!(got, ids(&ITEMS), "the output file is in input order");
    let mut input_tokens = 0;
    for l in &lines {
        assert!(l["id"].as_str().unwrap().starts_with("batch_req_"));
        assert!(l["error"].is_null());
        assert_eq!(l["response"]["status_code"], 200);
        assert_eq!(l["response"]["body"]["object"], "chat.completion");
        input_tokens += l["response"]["body"]["usage"]["prompt_tokens"]
            .as_u64()
            .unwrap();
    }
    assert_eq!(done["usage"]["input_tokens"], input_tokens);

    // The same request sent live gets the same answer.
    let (_, text) = ITEMS[0];
    let (status, live) = read(
        api.http
            .post(format!("{}/chat/completions", emu.base_url("openai")))
            .bearer_auth(emu.key("openai"))
            .json(&json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}]}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    let batched = &lines.iter().find(|l| l["custom_id"] == "a").unwrap()["response"]["body"];
    assert_eq!(batched["choices"], live["choices"]);
    assert_eq!(batched["usage"], live["usage"]);
}

/// A request the API refused is a line of the error file with its status and the API's
/// error body (openai/openai-openapi#302 shows one); the batch still completes.
#[tokio::test]
async fn openai_items_fail_retryably_or_terminally_in_the_error_file() {
    let clock = ManualClock::new();
    let emu = emulator(&clock).await;
    emu.fail_batch_item("openai", "b", BatchItemFault::ServerError);
    emu.fail_batch_item("openai", "c", BatchItemFault::InvalidRequest);
    let api = OpenAi::new(&emu, "openai");
    let batch = api.create(&ITEMS).await;
    clock.advance(HOUR);
    let done = api.get(&batch).await;
    assert_eq!(done["status"], "completed");
    assert_eq!(
        done["request_counts"],
        json!({"total": 4, "completed": 2, "failed": 2})
    );
    assert_eq!(
        sorted(custom_ids(&api.lines(&done["output_file_id"]).await)),
        ["a", "d"]
    );
    let errors = api.lines(&done["error_file_id"]).await;
    let by_id = |id: &str| {
        errors
            .iter()
            .find(|l| l["custom_id"] == id)
            .unwrap()
            .clone()
    };
    let b = by_id("b");
    assert_eq!(b["response"]["status_code"], 500);
    assert_eq!(b["response"]["body"]["error"]["type"], "server_error");
    assert!(b["error"].is_null());
    let c = by_id("c");
    assert_eq!(c["response"]["status_code"], 400);
    assert_eq!(
        c["response"]["body"]["error"]["type"],
        "invalid_request_error"
    );
}

/// platform.openai.com/docs/guides/batch, "Batch expiration": a batch not done in its
/// window expires; what was done is in the output file, the rest in the error file with
/// `batch_expired`.
#[tokio::test]
async fn an_expired_openai_batch_keeps_its_partial_output() {
    let clock = ManualClock::new();
    let emu = emulator(&clock).await;
    emu.set_batch_timing("openai", BatchTiming::new(48 * HOUR));
    let api = OpenAi::new(&emu, "openai");
    let batch = api.create(&ITEMS).await;
    clock.advance(24 * HOUR);
    let b = api.get(&batch).await;
    assert_eq!(b["status"], "expired", "{b}");
    assert_eq!(b["expired_at"], b["expires_at"]);
    assert_eq!(
        b["request_counts"],
        json!({"total": 4, "completed": 2, "failed": 2})
    );
    let kept = custom_ids(&api.lines(&b["output_file_id"]).await);
    let expired = api.lines(&b["error_file_id"]).await;
    assert_eq!(kept.len(), 2);
    assert_eq!(
        sorted(kept.into_iter().chain(custom_ids(&expired)).collect()),
        ids(&ITEMS)
    );
    for l in &expired {
        assert!(l["response"].is_null());
        assert_eq!(l["error"]["code"], "batch_expired");
    }
}

/// platform.openai.com/docs/api-reference/batch/cancel: `cancelling`, then `cancelled` "where
/// it will have partial results (if any) available in the output file"; the item in flight
/// when the cancel came is finished and kept.
#[tokio::test]
async fn an_openai_cancel_finishes_what_was_in_flight_and_keeps_it() {
    let clock = ManualClock::new();
    let emu = emulator(&clock).await;
    let api = OpenAi::new(&emu, "openai");
    let batch = api.create(&ITEMS).await;
    // Items are done at 3.5, 6, 8.5 and 11 minutes: at 5 the second is in flight.
    clock.advance(5 * MINUTE);
    let c = api.cancel(&batch).await;
    assert_eq!(c["status"], "cancelling");
    assert!(c["cancelling_at"].is_u64());
    assert_eq!(c["request_counts"]["completed"], 1);
    clock.advance(MINUTE);
    let b = api.get(&batch).await;
    assert_eq!(b["status"], "cancelled", "{b}");
    assert_eq!(b["request_counts"]["completed"], 2);
    assert_eq!(api.lines(&b["output_file_id"]).await.len(), 2);
    assert!(b["error_file_id"].is_null());
    // An ended batch cannot be cancelled again.
    let id = batch["id"].as_str().unwrap();
    let resp = api
        .auth(api.http.post(api.url(&format!("/batches/{id}/cancel"))))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
}

/// The enqueued-token limit: openai/openai-python#1643 (the create does not fail: "I always
/// need to check by calling client.batches.retrieve") and #2084 (`BatchError(code=
/// 'token_limit_exceeded', line=None, message='Enqueued token limit reached for gpt-4o-mini
/// in organization org-…. Limit: 2,000,000 enqueued tokens. Please try again once some
/// in_progress batches have been completed.', param=None)`). Tokens are released when a batch
/// ends ("Once your batch request is completed … your input tokens are cleared", OpenAI's
/// Batch API FAQ).
#[tokio::test]
async fn the_enqueued_token_limit_fails_a_created_batch_until_earlier_ones_end() {
    let clock = ManualClock::new();
    let emu = emulator(&clock).await;
    let api = OpenAi::new(&emu, "openai");
    let first = api.create(&ITEMS).await;
    let tokens = emu.batch_log("openai").batches[0].tokens;
    assert!(tokens > 0);
    emu.set_enqueued_token_limit("openai", Some("gpt-4o-mini"), Some(tokens + tokens / 2));

    let second = api.create(&ITEMS).await;
    assert_eq!(
        second["status"], "validating",
        "the create itself is accepted"
    );
    clock.advance(MINUTE);
    let failed = api.get(&second).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert!(failed["failed_at"].is_u64());
    assert_eq!(failed["request_counts"]["total"], 0);
    let err = &failed["errors"]["data"][0];
    assert_eq!(failed["errors"]["object"], "list");
    assert_eq!(err["code"], "token_limit_exceeded");
    assert!(err["line"].is_null() && err["param"].is_null());
    let limit = tokens + tokens / 2;
    assert!(limit < 1000, "OpenAI writes 1,000 and more with separators");
    assert_eq!(
        err["message"],
        format!(
            "Enqueued token limit reached for gpt-4o-mini in organization org-emulator. Limit: \
             {limit} enqueued tokens. Please try again once some in_progress batches have been \
             completed."
        )
    );

    // Another model has its own limit (none here).
    let other = api
        .create_from(&api.upload(api.line("x", "gpt-4.1", "Hello") + "\n").await)
        .await;
    clock.advance(MINUTE);
    assert_eq!(api.get(&other).await["status"], "in_progress");

    // Once the first batch has ended, its tokens are free again.
    clock.advance(HOUR);
    assert_eq!(api.get(&first).await["status"], "completed");
    let third = api.create(&ITEMS).await;
    clock.advance(HOUR);
    assert_eq!(api.get(&third).await["status"], "completed");
    let log = emu.batch_log("openai");
    let codes: Vec<Option<&str>> = log
        .batches
        .iter()
        .map(|b| b.error_code.as_deref())
        .collect();
    assert_eq!(codes, [None, Some("token_limit_exceeded"), None, None]);
    assert_eq!((log.creates, log.refused), (4, 0));
}

/// Validation fails the batch (it is created, then `failed` with `errors.data[]` naming each
/// bad line): a line that is not JSON, a duplicate `custom_id`, another model.
#[tokio::test]
async fn openai_validation_fails_a_batch_naming_its_bad_lines() {
    let clock = ManualClock::new();
    let emu = emulator(&clock).await;
    let api = OpenAi::new(&emu, "openai");
    let jsonl = [
        api.line("a", "gpt-4o-mini", "one"),
        "{oops".to_owned(),
        api.line("a", "gpt-4o-mini", "two"),
        api.line("b", "gpt-4.1", "three"),
    ]
    .join("\n");
    let batch = api.create_from(&api.upload(jsonl).await).await;
    clock.advance(MINUTE);
    let b = api.get(&batch).await;
    assert_eq!(b["status"], "failed");
    let errors: Vec<(String, u64)> = b["errors"]["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["code"].as_str().unwrap().to_owned(),
                e["line"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        errors,
        [
            ("invalid_json_line".to_owned(), 2),
            ("duplicate_custom_id".to_owned(), 3),
            ("model_mismatch".to_owned(), 4)
        ]
    );
    // What the create itself refuses: an unknown file, another window.
    let (status, e) = read(
        api.auth(api.http.post(api.url("/batches")))
            .json(
                &json!({"input_file_id": "file-nope", "endpoint": "/v1/chat/completions",
                          "completion_window": "24h"}),
            )
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, e["error"]["type"].as_str()),
        (404, Some("invalid_request_error"))
    );
    let file = api.upload(api.jsonl(&ITEMS)).await;
    let (status, _) = read(
        api.auth(api.http.post(api.url("/batches")))
            .json(
                &json!({"input_file_id": file, "endpoint": "/v1/chat/completions",
                          "completion_window": "48h"}),
            )
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(emu.batch_log("openai").refused, 2);
}

/// Azure's global batch (learn.microsoft.com/en-us/azure/ai-services/openai/how-to/batch):
/// the same API under `/openai/…?api-version=`, the `api-key` header, `endpoint:
/// "/chat/completions"` and the deployment's name as each line's model.
#[tokio::test]
async fn azure_global_batch_is_the_same_api_under_openai() {
    let clock = ManualClock::new();
    let emu = emulator(&clock).await;
    let api = OpenAi::new(&emu, "azure");
    let jsonl = ITEMS
        .iter()
        .map(|(id, text)| api.line(id, "gpt-4o-batch", text))
        .collect::<Vec<_>>()
        .join("\n");
    let batch = api.create_from(&api.upload(jsonl).await).await;
    assert_eq!(batch["endpoint"], "/chat/completions");
    clock.advance(HOUR);
    let done = api.get(&batch).await;
    assert_eq!(done["status"], "completed");
    let lines = api.lines(&done["output_file_id"]).await;
    assert_eq!(lines.len(), 4);
    assert!(
        lines
            .iter()
            .all(|l| l["response"]["body"]["model"] == "gpt-4o-batch")
    );
    // Without the api-version, Azure answers 404.
    let resp = http()
        .get(format!("{}/openai/batches", emu.base_url("azure")))
        .header("api-key", emu.key("azure"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
}

/// Scripted faults reach the Batch API too (the client's retry of a create is testable):
/// a 503 on the create, then the create passes.
#[tokio::test]
async fn scripted_faults_apply_to_batch_requests() {
    let clock = ManualClock::new();
    let emu = emulator(&clock).await;
    let api = OpenAi::new(&emu, "openai");
    let file = api.upload(api.jsonl(&ITEMS)).await;
    emu.script("openai", [Fault::Status { status: 503 }]);
    let resp = api
        .auth(api.http.post(api.url("/batches")))
        .json(
            &json!({"input_file_id": file, "endpoint": "/v1/chat/completions",
                      "completion_window": "24h"}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    api.create_from(&file).await;
    let log = emu.batch_log("openai");
    assert_eq!(log.creates, 1);
}

// ------------------------------------------------------------------------------------------
// Anthropic: docs.anthropic.com/en/api/creating-message-batches and its siblings.

struct Anthropic<'a> {
    emu: &'a Emulator,
    http: reqwest::Client,
}

impl Anthropic<'_> {
    fn req(&self, r: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        r.header("x-api-key", self.emu.key("anthropic"))
            .header("anthropic-version", "2023-06-01")
    }

    fn url(&self, path: &str) -> String {
        format!(
            "{}/v1/messages/batches{path}",
            self.emu.base_url("anthropic")
        )
    }

    fn requests(items: &[(&str, &str)]) -> Value {
        let reqs: Vec<Value> = items
            .iter()
            .map(|(id, text)| {
                json!({"custom_id": id, "params": {
                "model": "claude-sonnet-4-5", "max_tokens": 100,
                "messages": [{"role": "user", "content": text}]}})
            })
            .collect();
        json!({"requests": reqs})
    }

    async fn create_raw(&self, body: &Value) -> (u16, Value) {
        read(
            self.req(self.http.post(self.url("")))
                .json(body)
                .send()
                .await
                .unwrap(),
        )
        .await
    }

    async fn create(&self, items: &[(&str, &str)]) -> Value {
        let (status, b) = self.create_raw(&Self::requests(items)).await;
        assert_eq!(status, 200, "{b}");
        assert_eq!(b["type"], "message_batch");
        b
    }

    async fn get(&self, batch: &Value) -> Value {
        let id = batch["id"].as_str().unwrap();
        let (status, b) = read(
            self.req(self.http.get(self.url(&format!("/{id}"))))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200, "{b}");
        b
    }

    /// The results, from the batch's own `results_url`.
    async fn results(&self, batch: &Value) -> Vec<Value> {
        let url = batch["results_url"].as_str().expect("results_url");
        let resp = self.req(self.http.get(url)).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        resp.text()
            .await
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

fn result_of<'a>(results: &'a [Value], id: &str) -> &'a Value {
    &results.iter().find(|r| r["custom_id"] == id).unwrap()["result"]
}

/// `processing_status: in_progress → ended`; `request_counts` "move to one of the other
/// statuses only once processing of the entire batch ends"; results as JSON lines, "not
/// guaranteed to be in the same order as requests": `succeeded` with the message, `errored`
/// with the error (a retryable `api_error`, a terminal `invalid_request_error`).
#[tokio::test]
async fn an_anthropic_batch_ends_with_results_out_of_order() {
    let clock = ManualClock::new();
    let emu = emulator(&clock).await;
    emu.fail_batch_item("anthropic", "b", BatchItemFault::ServerError);
    emu.fail_batch_item("anthropic", "c", BatchItemFault::InvalidRequest);
    let api = Anthropic {
        emu: &emu,
        http: http(),
    };
    let batch = api.create(&ITEMS).await;
    assert!(batch["id"].as_str().unwrap().starts_with("msgbatch_"));
    assert_eq!(batch["processing_status"], "in_progress");
    assert!(batch["results_url"].is_null() && batch["ended_at"].is_null());
    clock.advance(6 * MINUTE);
    let b = api.get(&batch).await;
    assert_eq!(
        b["request_counts"],
        json!({"processing": 4, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}),
        "counts move only at the end"
    );
    clock.advance(10 * MINUTE);
    let done = api.get(&batch).await;
    assert_eq!(done["processing_status"], "ended");
    assert_eq!(
        done["request_counts"],
        json!({"processing": 0, "succeeded": 2, "errored": 2, "canceled": 0, "expired": 0})
    );
    let results = api.results(&done).await;
    let got = custom_ids(&results);
    assert_eq!(sorted(got.clone()), ids(&ITEMS));
    assert_ne!(got, ids(&ITEMS), "the results are in input order");
    let a = result_of(&results, "a");
    assert_eq!(a["type"], "succeeded");
    assert_eq!(a["message"]["type"], "message");
    assert!(a["message"]["usage"]["input_tokens"].as_u64().unwrap() > 0);
    let b = result_of(&results, "b");
    assert_eq!(
        (b["type"].as_str(), b["error"]["error"]["type"].as_str()),
        (Some("errored"), Some("api_error"))
    );
    let c = result_of(&results, "c");
    assert_eq!(c["error"]["type"], "error");
    assert_eq!(c["error"]["error"]["type"], "invalid_request_error");
}

/// The create validates what the API's schema does (custom_id `^[a-zA-Z0-9_-]{1,64}$`,
/// unique) with Anthropic's error body, and refuses requests beyond the processing-queue
/// limit with a 429 `rate_limit_error` (docs.anthropic.com/en/api/rate-limits#message-batches-api);
/// the queue frees when a batch ends.
#[tokio::test]
async fn anthropic_creates_are_validated_and_held_to_the_processing_queue() {
    let clock = ManualClock::new();
    let emu = emulator(&clock).await;
    let api = Anthropic {
        emu: &emu,
        http: http(),
    };
    for bad in [
        Anthropic::requests(&[("not valid!", "x")]),
        Anthropic::requests(&[("same", "x"), ("same", "y")]),
        json!({"requests": []}),
    ] {
        let (status, e) = api.create_raw(&bad).await;
        assert_eq!(status, 400, "{bad}");
        assert_eq!(e["type"], "error");
        assert_eq!(e["error"]["type"], "invalid_request_error");
    }
    emu.set_batch_queue_limit("anthropic", Some(6));
    let first = api.create(&ITEMS).await;
    let (status, e) = api.create_raw(&Anthropic::requests(&ITEMS)).await;
    assert_eq!(status, 429, "{e}");
    assert_eq!(e["error"]["type"], "rate_limit_error");
    clock.advance(HOUR);
    assert_eq!(api.get(&first).await["processing_status"], "ended");
    api.create(&ITEMS).await;
    let log = emu.batch_log("anthropic");
    assert_eq!((log.creates, log.refused), (2, 4));
}

/// Cancelling: `canceling`, then `ended` "and may contain results"
/// (docs.anthropic.com/en/api/canceling-message-batches): the item in flight is finished;
/// the rest are `canceled`. Expiry after 24 h: the rest are `expired`.
#[tokio::test]
async fn anthropic_cancel_and_expiry_keep_what_was_done() {
    let clock = ManualClock::new();
    let emu = emulator(&clock).await;
    let api = Anthropic {
        emu: &emu,
        http: http(),
    };
    let batch = api.create(&ITEMS).await;
    clock.advance(5 * MINUTE);
    let id = batch["id"].as_str().unwrap();
    let (status, c) = read(
        api.req(api.http.post(api.url(&format!("/{id}/cancel"))))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(c["processing_status"], "canceling");
    assert!(c["cancel_initiated_at"].is_string());
    clock.advance(MINUTE);
    let done = api.get(&batch).await;
    assert_eq!(done["processing_status"], "ended");
    assert_eq!(done["request_counts"]["succeeded"], 2);
    assert_eq!(done["request_counts"]["canceled"], 2);
    let results = api.results(&done).await;
    assert_eq!(results.len(), 4);

    emu.set_batch_timing("anthropic", BatchTiming::new(48 * HOUR));
    let slow = api.create(&ITEMS).await;
    clock.advance(24 * HOUR);
    let expired = api.get(&slow).await;
    assert_eq!(expired["processing_status"], "ended");
    assert_eq!(expired["request_counts"]["expired"], 2);
    assert_eq!(expired["ended_at"], expired["expires_at"]);
    let results = api.results(&expired).await;
    let kinds: Vec<&str> = results
        .iter()
        .map(|r| r["result"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.iter().filter(|k| **k == "expired").count(), 2);
    assert_eq!(kinds.iter().filter(|k| **k == "succeeded").count(), 2);
}

// ------------------------------------------------------------------------------------------
// Gemini: ai.google.dev/api/batch-mode, ai.google.dev/gemini-api/docs/batch-mode.

async fn gemini(
    emu: &Emulator,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut r = http()
        .request(method, format!("{}/v1beta/{path}", emu.base_url("gemini")))
        .header("x-goog-api-key", emu.key("gemini"));
    if let Some(b) = body {
        r = r.json(&b);
    }
    read(r.send().await.unwrap()).await
}

fn inline(items: &[(&str, &str)]) -> Value {
    let reqs: Vec<Value> = items
        .iter()
        .map(|(id, text)| {
            json!({"request": {"contents": [{"role": "user", "parts": [{"text": text}]}]},
                                 "metadata": {"key": id}})
        })
        .collect();
    json!({"batch": {"display_name": "test", "input_config": {"requests": {"requests": reqs}}}})
}

/// An Operation `batches/…` with `metadata.state` `BATCH_STATE_PENDING → RUNNING →
/// SUCCEEDED`, `done` at the end and the inlined responses "in the same order as the input
/// requests" with their metadata; a failed item is an `error` Status in its place.
#[tokio::test]
async fn a_gemini_batch_is_an_operation_answering_in_input_order() {
    let clock = ManualClock::new();
    let emu = emulator(&clock).await;
    emu.fail_batch_item("gemini", "c", BatchItemFault::ServerError);
    let (status, op) = gemini(
        &emu,
        reqwest::Method::POST,
        "models/gemini-2.0-flash:batchGenerateContent",
        Some(inline(&ITEMS)),
    )
    .await;
    assert_eq!(status, 200, "{op}");
    let name = op["name"].as_str().unwrap().to_owned();
    assert!(name.starts_with("batches/"));
    assert_eq!(op["metadata"]["state"], "BATCH_STATE_PENDING");
    assert_eq!(op["metadata"]["model"], "models/gemini-2.0-flash");
    assert_eq!(op["metadata"]["displayName"], "test");
    assert_eq!(op["metadata"]["batchStats"]["requestCount"], "4");
    assert!(op.get("done").is_none());
    clock.advance(2 * MINUTE);
    let (_, op) = gemini(&emu, reqwest::Method::GET, &name, None).await;
    assert_eq!(op["metadata"]["state"], "BATCH_STATE_RUNNING");
    clock.advance(HOUR);
    let (_, op) = gemini(&emu, reqwest::Method::GET, &name, None).await;
    assert_eq!(op["metadata"]["state"], "BATCH_STATE_SUCCEEDED", "{op}");
    assert_eq!(op["done"], true);
    assert_eq!(op["metadata"]["batchStats"]["successfulRequestCount"], "3");
    assert_eq!(op["metadata"]["batchStats"]["failedRequestCount"], "1");
    let responses = op["response"]["inlinedResponses"]["inlinedResponses"]
        .as_array()
        .unwrap();
    assert_eq!(
        op["metadata"]["output"]["inlinedResponses"]["inlinedResponses"],
        op["response"]["inlinedResponses"]["inlinedResponses"]
    );
    let keys: Vec<&str> = responses
        .iter()
        .map(|r| r["metadata"]["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["a", "b", "c", "d"]);
    assert!(responses[0]["response"]["candidates"][0]["content"]["parts"][0]["text"].is_string());
    assert!(responses[0]["response"]["usageMetadata"]["promptTokenCount"].is_u64());
    assert_eq!(responses[2]["error"]["code"], 500);
    assert!(responses[2].get("response").is_none());
}

/// "JOB_STATE_EXPIRED: … running or pending for more than 48 hours. The job will not have
/// any results to retrieve"; a cancelled batch ends at once, without output here.
#[tokio::test]
async fn gemini_expired_and_cancelled_batches_end_without_output() {
    let clock = ManualClock::new();
    let emu = emulator(&clock).await;
    emu.set_batch_timing("gemini", BatchTiming::new(96 * HOUR));
    let create = || {
        gemini(
            &emu,
            reqwest::Method::POST,
            "models/gemini-2.0-flash:batchGenerateContent",
            Some(inline(&ITEMS)),
        )
    };
    let (_, slow) = create().await;
    let (_, cancelled) = create().await;
    clock.advance(HOUR);
    let name = cancelled["name"].as_str().unwrap();
    let (status, empty) = gemini(
        &emu,
        reqwest::Method::POST,
        &format!("{name}:cancel"),
        Some(json!({})),
    )
    .await;
    assert_eq!((status, empty), (200, json!({})));
    let (_, op) = gemini(&emu, reqwest::Method::GET, name, None).await;
    assert_eq!(op["metadata"]["state"], "BATCH_STATE_CANCELLED");
    assert_eq!(op["done"], true);
    assert!(op["metadata"].get("output").is_none() && op.get("response").is_none());
    clock.advance(48 * HOUR);
    let (_, op) = gemini(
        &emu,
        reqwest::Method::GET,
        slow["name"].as_str().unwrap(),
        None,
    )
    .await;
    assert_eq!(op["metadata"]["state"], "BATCH_STATE_EXPIRED");
    assert!(op["metadata"].get("output").is_none());
    let (_, list) = gemini(&emu, reqwest::Method::GET, "batches", None).await;
    assert_eq!(list["operations"].as_array().unwrap().len(), 2);
}

// ------------------------------------------------------------------------------------------
// The log.

/// What a test proves "exactly one create for those items" with: creates, each batch's ids
/// in input order, polls.
#[tokio::test]
async fn the_batch_log_counts_creates_custom_ids_and_polls() {
    let clock = ManualClock::new();
    let emu = emulator(&clock).await;
    emu.set_batch_order("openai", BatchOrder::Input);
    let api = OpenAi::new(&emu, "openai");
    let batch = api.create(&ITEMS).await;
    for _ in 0..3 {
        clock.advance(5 * MINUTE);
        api.get(&batch).await;
    }
    let done = api.get(&batch).await;
    // BatchOrder::Input: the output file in input order.
    assert_eq!(
        custom_ids(&api.lines(&done["output_file_id"]).await),
        ids(&ITEMS)
    );
    let log = emu.batch_log("openai");
    assert_eq!(
        (log.creates, log.refused, log.polls, log.downloads),
        (1, 0, 4, 1)
    );
    let b = &log.batches[0];
    assert_eq!(b.id, batch["id"].as_str().unwrap());
    assert_eq!(b.custom_ids, ids(&ITEMS));
    assert_eq!(
        (b.model.as_str(), b.status.as_str(), b.polls),
        ("gpt-4o-mini", "completed", 4)
    );
    // The request log has the batch requests too.
    assert!(
        emu.log()
            .iter()
            .any(|e| e.path.ends_with("/v1/batches") && e.model.as_deref() == Some("gpt-4o-mini"))
    );
    emu.reset();
    assert!(emu.batch_log("openai").batches.is_empty());
}

// ------------------------------------------------------------------------------------------
// The official SDKs.

/// Proxies could send the SDKs anywhere but the loopback address.
const PROXY_VARS: [&str; 8] = [
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
];

/// `emulator/sdk/check_batch.py`: openai-python's `files` and `batches` (OpenAI and Azure),
/// anthropic-python's `messages.batches`, google-genai's `batches` against an emulator on
/// real time, every answer parsed into the SDK's types. Needs the pinned SDKs of
/// `emulator/sdk/requirements.txt` in `$LLM_FAILOVER_PYTHON` (scripts/test sets it up); it
/// never skips.
#[tokio::test]
async fn the_official_python_sdks_parse_every_batch_answer() {
    let emu = Emulator::builder()
        .openai("openai")
        .azure("azure")
        .anthropic("anthropic")
        .gemini("gemini")
        .start()
        .await
        .unwrap();
    // Real time: a cancel sent right after a create lands in validating.
    let timing =
        BatchTiming::new(Duration::from_millis(500)).with_validating(Duration::from_secs(1));
    for p in ["openai", "azure", "anthropic", "gemini"] {
        emu.set_batch_timing(p, timing);
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/emulator/sdk/check_batch.py");
    let python = std::env::var("LLM_FAILOVER_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "python3".into());
    let mut cmd = std::process::Command::new(&python);
    cmd.arg(script)
        .arg(emu.url())
        .arg("--key")
        .arg(emu.key("openai"));
    for var in PROXY_VARS {
        cmd.env_remove(var);
    }
    let child = cmd
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {python} ({e}): run scripts/test, which installs emulator/sdk/requirements.txt into target/sdk-venv"));
    let pid = child.id();
    let waited = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::task::spawn_blocking(move || child.wait_with_output()),
    )
    .await;
    let Ok(out) = waited else {
        // Ends the interpreter this test started, by its id.
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
        panic!("{script} did not finish within 120 s");
    };
    let out = out.unwrap().unwrap();
    let report = format!(
        "--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{script} failed ({}; exit 2 = an SDK is missing)\n{report}",
        out.status
    );
    assert!(report.contains("sdk: 8 passed, 0 failed"), "{report}");
    for p in ["openai", "azure", "anthropic", "gemini"] {
        assert!(emu.batch_log(p).creates >= 2, "{p}: {:?}", emu.batch_log(p));
    }
}
