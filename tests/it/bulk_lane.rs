//! The bulk lane (issue 30): the demo batch through each provider's Batch API on the
//! emulator, on the durable queue (`QueuedJob::lane(Lane::ProviderBatch)`), against the
//! same batch through the live lane; the emulator's batches take ten minutes of a manual
//! clock shared by the client, the worker and the emulator — nothing sleeps.
//!
//! The emulator's Batch APIs are checked against the providers' SDKs in `emulator_bulk`;
//! here our side speaks them: OpenAI's files and batches (and Azure's global batch),
//! Anthropic's Message Batches, Gemini's `batchGenerateContent`, results read out of order.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use llm_failover::batch::{BatchRequest, InputReader, Stop};
use llm_failover::bulk::BulkItem;
use llm_failover::clock::{Clock, ManualClock};
use llm_failover::provider::Provider;
use llm_failover::provider::anthropic::Anthropic;
use llm_failover::provider::azure::Azure;
use llm_failover::provider::gemini::Gemini;
use llm_failover::provider::openai::OpenAi;
use llm_failover::{ChatRequest, Client, Credential, ProviderId, ProviderSettings};
use llm_failover_emulator::{BatchItemFault, BatchTiming, Emulator, TimeSource};
use llm_failover_queue::{LaneChoice, Queue, QueuedJob, QueuedReport};

use crate::support::examples::TempDir;
use serde_json::Value;

const MINUTE: Duration = Duration::from_secs(60);

/// A directory of the test's own under the system's temporary one.
fn dir(name: &str) -> TempDir {
    TempDir::new("bulk-lane", name)
}

fn demo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/prompts.jsonl")
}

/// The emulator with one provider `p` of `kind`, on `clock`; batches validate for a
/// minute, run for ten, finalize for one.
async fn emulator(kind: &str, clock: &ManualClock) -> Emulator {
    let c = clock.clone();
    let b = Emulator::builder().time_source(TimeSource::new(move || (c.now(), c.wall())));
    let b = match kind {
        "openai" => b.openai("p"),
        "anthropic" => b.anthropic("p"),
        "gemini" => b.gemini("p"),
        "azure" => b.azure("p"),
        other => panic!("{other}"),
    };
    let emu = b.start().await.unwrap();
    reset(&emu);
    emu
}

/// Forgets what `emu` saw and was set to; its batches validate for a minute, run for ten,
/// finalize for one.
fn reset(emu: &Emulator) {
    emu.reset();
    emu.set_batch_timing(
        "p",
        BatchTiming::new(10 * MINUTE)
            .with_validating(MINUTE)
            .with_finalizing(MINUTE),
    );
}

fn client(kind: &str, emu: &Emulator, clock: &ManualClock) -> Client {
    let id = ProviderId::new("p");
    let base = emu.base_url("p");
    let adapter: Arc<dyn Provider> = match kind {
        "openai" => Arc::new(OpenAi::new(id, base.parse().unwrap()).with_chat_model("gpt-4o-mini")),
        "anthropic" => Arc::new(
            Anthropic::new(id, base.parse().unwrap()).with_model("claude-3-5-haiku-latest"),
        ),
        "gemini" => Arc::new(
            Gemini::new(id, format!("{base}/v1beta").parse().unwrap())
                .with_model("gemini-2.5-flash"),
        ),
        "azure" => Arc::new(
            Azure::new(id, base.parse().unwrap(), "2024-10-21").with_chat_model("global-batch"),
        ),
        other => panic!("{other}"),
    };
    Client::builder()
        .clock(Arc::new(clock.clone()))
        .provider(
            adapter,
            ProviderSettings::new().credential(Credential::new(emu.key("p"))),
        )
        .build()
        .unwrap()
}

/// The results file, by id (or `line N`).
fn results(path: &Path) -> BTreeMap<String, Value> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = BTreeMap::new();
    for l in text.lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        let key = match v["id"].as_str() {
            Some(id) => id.to_owned(),
            None => format!("line {}", v["line"]),
        };
        assert!(out.insert(key.clone(), v).is_none(), "two lines for {key}");
    }
    out
}

async fn run(kind: &str, lane: LaneChoice, dir: &TempDir) -> (BTreeMap<String, Value>, Emulator) {
    let clock = ManualClock::new();
    let emu = emulator(kind, &clock).await;
    let client = client(kind, &emu, &clock);
    let name = format!("{kind}-{}", lane.as_str());
    let output = dir.path(&format!("{name}.jsonl"));
    let queue = Queue::open(&format!(
        "sqlite:{}",
        dir.path(&format!("{name}.sqlite")).display()
    ))
    .await
    .unwrap();
    let report = QueuedJob::new(demo(), &output, queue)
        .lane(lane)
        .run(&client, &Stop::new())
        .await
        .unwrap();
    assert_eq!(report.pending, 0, "{kind} {lane:?}: {report:?}");
    let got = results(&output);
    let ok = got.values().filter(|l| l["ok"] == true).count() as u64;
    // The report counts items, not the lane's own jobs; the summary splits them by lane.
    assert_eq!(report.run.ok, ok, "{kind} {lane:?}: {report:?}");
    let summary = report.summary(&client, None).await;
    let lanes = serde_json::to_value(&summary).unwrap()["lanes"].clone();
    if lane == LaneChoice::ProviderBatch {
        assert_eq!(report.run.provider_batch, ok, "{kind}");
        assert_eq!(lanes["provider_batch"], ok, "{kind}: {lanes}");
        assert_eq!(lanes["live"], 0, "{kind}: {lanes}");
        assert!(report.run.provider_batch_usage.input_tokens > 0, "{kind}");
    } else {
        assert_eq!(report.run.provider_batch, 0, "{kind}");
        assert_eq!(
            lanes,
            Value::Null,
            "{kind}: no lanes without a provider batch"
        );
    }
    (got, emu)
}

/// The demo batch through each provider's Batch API: every id the live lane answers is
/// answered, one line each, by the provider's batch (out of order in the emulator's output),
/// the same bad lines fail the same way; one remote batch created, polled until it ended.
#[tokio::test]
async fn the_demo_batch_through_each_providers_batch_api_answers_what_the_live_lane_does() {
    let dir = dir("demo");
    for kind in ["openai", "anthropic", "gemini", "azure"] {
        let (live, _) = run(kind, LaneChoice::Live, &dir).await;
        let (bulk, emu) = run(kind, LaneChoice::ProviderBatch, &dir).await;
        assert_eq!(
            live.keys().collect::<Vec<_>>(),
            bulk.keys().collect::<Vec<_>>(),
            "{kind}: the same ids"
        );
        let mut answered = 0;
        for (id, l) in &live {
            let b = &bulk[id];
            assert_eq!(b["ok"], l["ok"], "{kind} {id}: {b} vs {l}");
            if l["ok"] == true {
                answered += 1;
                assert_eq!(l["lane"], "live", "{kind} {id}");
                assert_eq!(b["lane"], "provider-batch", "{kind} {id}: {b}");
                assert_eq!(b["provider"], "p");
                assert_eq!(b["text"], l["text"], "{kind} {id}: the same answer");
                assert_eq!(b["usage"], l["usage"], "{kind} {id}: the same usage");
            } else {
                assert_eq!(b["error"]["kind"], l["error"]["kind"], "{kind} {id}");
            }
        }
        assert!(answered > 190, "{kind}: {answered} answered");
        let log = emu.batch_log("p");
        assert_eq!(log.creates, 1, "{kind}: one batch for the demo: {log:?}");
        assert_eq!(log.batches[0].custom_ids.len(), answered, "{kind}");
        assert!(log.polls >= 1, "{kind}: {log:?}");
    }
}

/// `input` through `kind`'s Batch API on a queue of its own in `dir`: the report (nothing
/// left pending) and the results file.
async fn through_batch(
    kind: &str,
    dir: &TempDir,
    client: &Client,
    input: &Path,
) -> (QueuedReport, BTreeMap<String, Value>) {
    let spec = format!("sqlite:{}", dir.path(&format!("{kind}.sqlite")).display());
    let output = dir.path(&format!("{kind}-out.jsonl"));
    let report = QueuedJob::new(input, &output, Queue::open(&spec).await.unwrap())
        .lane(LaneChoice::ProviderBatch)
        .run(client, &Stop::new())
        .await
        .unwrap();
    assert_eq!(report.pending, 0, "{kind}: {report:?}");
    (report, results(&output))
}

/// The id the provider files item `id` of `input` under: its queue job id (the id and a
/// hash of its request), mapped where the provider's rule refuses it (Anthropic: no `#`).
async fn custom_id(client: &Client, input: &Path, id: &str) -> String {
    let text = std::fs::read(input).unwrap();
    let mut reader = InputReader::new(&text[..]);
    while let Some(parsed) = reader.next().await.unwrap() {
        let Ok(item) = parsed else { continue };
        if item.id != id {
            continue;
        }
        let payload = serde_json::to_string(&item.request).unwrap();
        let job = QueuedJob::job_id(id, &payload);
        let BatchRequest::Chat(req) = item.request else {
            panic!("{id}: not a chat")
        };
        let plan = client
            .bulk_plan("p", &[BulkItem::new(job, req)], "probe")
            .unwrap();
        return plan.submissions[0].items[0].custom_id.clone();
    }
    panic!("no item {id}")
}

/// Per-item failures inside a finished batch: a retryable one (a 500 line) is answered live
/// in the same run; a terminal one (a 400 line) ends failed with the provider's words, never
/// sent again.
#[tokio::test]
async fn a_retryable_line_goes_live_in_the_same_run_and_a_terminal_one_fails() {
    let dir = dir("lines");
    for kind in ["openai", "anthropic", "gemini", "azure"] {
        let clock = ManualClock::new();
        let emu = emulator(kind, &clock).await;
        let client = client(kind, &emu, &clock);
        let input = dir.path(&format!("{kind}-in.jsonl"));
        std::fs::write(
            &input,
            "{\"id\": \"a\", \"prompt\": \"one\"}\n{\"id\": \"b\", \"prompt\": \"two\"}\n\
             {\"id\": \"c\", \"prompt\": \"three\"}\n",
        )
        .unwrap();
        let b = custom_id(&client, &input, "b").await;
        let c = custom_id(&client, &input, "c").await;
        emu.fail_batch_item("p", &b, BatchItemFault::ServerError);
        emu.fail_batch_item("p", &c, BatchItemFault::InvalidRequest);
        let (_, got) = through_batch(kind, &dir, &client, &input).await;
        assert_eq!(got["a"]["lane"], "provider-batch", "{kind}: {}", got["a"]);
        assert_eq!(got["b"]["ok"], true, "{kind}: {}", got["b"]);
        assert_eq!(got["b"]["lane"], "live", "{kind}: the 500 line went live");
        assert_eq!(got["c"]["ok"], false, "{kind}: {}", got["c"]);
        assert_eq!(
            got["c"]["error"]["kind"], "invalid_request",
            "{kind}: {}",
            got["c"]
        );
        let log = emu.batch_log("p");
        assert_eq!(log.creates, 1, "{kind}: {log:?}");
    }
}

/// A kill -9 after the remote batch was created and before it ended: the rerun polls the
/// same batch — the emulator saw one create for those items — and every item is answered
/// once. The command runs as a user runs it, against the emulator on real time (the batch
/// takes 4 s); the test waits for the queue to record the batch, never for a fixed time.
#[cfg(unix)]
#[test]
fn a_kill_after_the_create_resumes_polling_the_same_batch_and_answers_each_item_once() {
    use std::process::{Command, Stdio};
    use std::sync::PoisonError;

    use crate::support::examples::{
        FLEETS, Served, batch_bin, kill_when, output_within, write_one_provider_config,
    };

    const KEY_VAR: &str = "BULK_LANE_EMU_KEY";
    const KEY: &str = "sk-bulk-lane-5a6b7c";
    const LIMIT: Duration = Duration::from_secs(120);

    let _one = FLEETS.lock().unwrap_or_else(PoisonError::into_inner);
    let served = Served::start(
        Emulator::builder()
            .provider(llm_failover_emulator::ProviderConfig::openai("openai").with_key(KEY)),
    );
    let emu = &served.emu;
    emu.set_batch_timing("openai", BatchTiming::new(Duration::from_secs(4)));
    let dir = dir("kill");
    let config = dir.path("providers.toml");
    write_one_provider_config(&config, "only", "openai", &emu.base_url("openai"), KEY_VAR);
    let input = dir.path("in.jsonl");
    let lines: Vec<String> = (0..30)
        .map(|i| format!("{{\"id\": \"k{i}\", \"prompt\": \"question {i}\", \"max_tokens\": 16}}"))
        .collect();
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let output = dir.path("out.jsonl");
    let queue_file = dir.path("out.jsonl.queue.sqlite");
    let argv: Vec<std::ffi::OsString> = [
        "--config".into(),
        config.clone().into_os_string(),
        "--input".into(),
        input.clone().into_os_string(),
        "--output".into(),
        output.clone().into_os_string(),
        "--lane".into(),
        "provider-batch".into(),
    ]
    .to_vec();
    let command = || {
        let mut c = Command::new(batch_bin());
        c.args(&argv)
            .current_dir(dir.root())
            .env_remove("RUST_LOG")
            .env_remove("LLM_FAILOVER_ENV")
            .env_remove("LLM_FAILOVER_REDIS_URL")
            .env("NO_COLOR", "1")
            .env(KEY_VAR, KEY);
        c
    };

    let child = command()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The batch is recorded once its poll job is in the queue; it has not ended then.
    kill_when(child, LIMIT, "the batch recorded", |rt| {
        let recorded = rt.block_on(async {
            let q = Queue::open(&format!("sqlite:{}", queue_file.display()))
                .await
                .ok()?;
            let kinds = q.unsettled_by_kind().await.ok()?;
            Some(kinds.iter().any(|(k, n)| k == "bulk-poll" && *n > 0))
        });
        if recorded != Some(true) {
            return false;
        }
        let log = emu.batch_log("openai");
        assert_eq!(log.creates, 1, "{log:?}");
        assert!(
            !log.batches[0].status.contains("completed"),
            "the batch ended before the kill: {log:?}"
        );
        true
    });

    let out = output_within(command(), LIMIT, "the rerun");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains(KEY), "the key was printed:\n{stderr}");
    let got = results(&output);
    assert_eq!(got.len(), 30, "{stderr}");
    for (id, l) in &got {
        assert_eq!(l["ok"], true, "{id}: {l}");
        assert_eq!(l["lane"], "provider-batch", "{id}: {l}");
    }
    let log = emu.batch_log("openai");
    assert_eq!(log.creates, 1, "one create for those items: {log:?}");
    assert_eq!(log.batches[0].custom_ids.len(), 30);
}

/// A batch whose window passes halfway: what it answered keeps its answer (lane
/// provider-batch), what it expired is answered live in the same run (Gemini keeps nothing
/// of an expired batch: all of it goes live).
#[tokio::test]
async fn items_a_batch_expired_are_answered_live_in_the_same_run() {
    let dir = dir("expiry");
    let input = dir.path("in.jsonl");
    let lines: Vec<String> = (0..20)
        .map(|i| format!("{{\"id\": \"e{i}\", \"prompt\": \"question {i}\"}}"))
        .collect();
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    for kind in ["openai", "anthropic", "gemini"] {
        let clock = ManualClock::new();
        let emu = emulator(kind, &clock).await;
        emu.set_batch_timing(
            "p",
            BatchTiming::new(10 * MINUTE)
                .with_validating(MINUTE)
                .with_finalizing(MINUTE)
                .with_window(6 * MINUTE),
        );
        let client = client(kind, &emu, &clock);
        let (report, got) = through_batch(kind, &dir, &client, &input).await;
        assert_eq!(got.len(), 20, "{kind}");
        assert!(got.values().all(|l| l["ok"] == true), "{kind}: {got:?}");
        let by_lane = |lane: &str| got.values().filter(|l| l["lane"] == lane).count();
        let (batch, live) = (by_lane("provider-batch"), by_lane("live"));
        assert_eq!(batch + live, 20, "{kind}");
        assert!(live > 0, "{kind}: nothing expired: {got:?}");
        if kind == "gemini" {
            assert_eq!(batch, 0, "gemini keeps nothing of an expired batch");
        } else {
            assert!(
                batch > 0,
                "{kind}: the answers before the window passed are kept"
            );
        }
        assert_eq!(report.run.provider_batch, batch as u64, "{kind}");
        assert_eq!(emu.batch_log("p").creates, 1, "{kind}");
    }
}

/// OpenAI's limit on enqueued tokens: a 2,000-item batch against a limit of a quarter of its
/// tokens is refused once (`token_limit_exceeded`, stated after the create, as OpenAI does);
/// then it goes in pieces that fit the limit it stated, each created as the one before it
/// ends — no create refused twice — and every item is answered by the provider's batch.
#[tokio::test]
async fn a_batch_over_the_enqueued_token_limit_goes_in_pieces_as_earlier_ones_end() {
    let dir = dir("enqueued");
    let input = dir.path("in.jsonl");
    let lines: Vec<String> = (0..2_000)
        .map(|i| {
            format!(
                "{{\"id\": \"t{i}\", \"prompt\": \"Question number {i}: what is a token bucket, \
                 in a sentence?\", \"max_tokens\": 16}}"
            )
        })
        .collect();
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let clock = ManualClock::new();
    let emu = emulator("openai", &clock).await;
    let client = client("openai", &emu, &clock);
    // The limit: a quarter of the batch's tokens as the emulator counts them (a probe batch
    // of the same items, refused by a limit of one token, records its count).
    emu.set_enqueued_token_limit("p", None, Some(1));
    let items = {
        let text = std::fs::read(&input).unwrap();
        let mut reader = InputReader::new(&text[..]);
        let mut out = Vec::new();
        while let Some(parsed) = reader.next().await.unwrap() {
            if let Ok(item) = parsed
                && let BatchRequest::Chat(req) = item.request
            {
                out.push(BulkItem::new(item.id, req));
            }
        }
        out
    };
    let plan = client.bulk_plan("p", &items, "probe").unwrap();
    let remote = client.bulk_create(&plan.submissions[0]).await.unwrap();
    clock.advance(2 * MINUTE);
    let status = client.bulk_poll(&remote).await.unwrap();
    assert_eq!(
        status.failure.as_ref().map(|f| f.0.as_str()),
        Some("token_limit_exceeded")
    );
    let counted = emu.batch_log("p").batches[0].tokens;
    let limit = counted / 4;
    reset(&emu);
    emu.set_enqueued_token_limit("p", None, Some(limit));

    let (_, got) = through_batch("openai", &dir, &client, &input).await;
    assert_eq!(got.len(), 2_000);
    assert!(
        got.values()
            .all(|l| l["ok"] == true && l["lane"] == "provider-batch"),
        "every item answered by the provider's batch"
    );
    let log = emu.batch_log("p");
    let refused: Vec<_> = log
        .batches
        .iter()
        .filter(|b| b.error_code.as_deref() == Some("token_limit_exceeded"))
        .collect();
    assert_eq!(refused.len(), 1, "refused once, never twice: {log:?}");
    let pieces = log.batches.len() - 1;
    assert!(
        pieces >= 4,
        "in pieces: {pieces} ({counted} tokens, limit {limit})"
    );
    for b in log.batches.iter().skip(1) {
        assert!(
            b.tokens <= limit,
            "a piece fits the limit: {} > {limit}",
            b.tokens
        );
    }
    let answered: usize = log.batches.iter().skip(1).map(|b| b.custom_ids.len()).sum();
    assert_eq!(answered, 2_000, "each item in one piece");
}

/// Anthropic's processing queue (docs.anthropic.com/en/api/rate-limits#message-batches-api:
/// "Maximum batch requests in processing queue", refused with a 429 that states no size):
/// 300 items against a queue of 100. The lane learns what the queue held from its own
/// refusals — half a batch refused with nothing of ours running, then what ran — and sends
/// the rest as earlier batches end: each create refused is smaller than the one before, every
/// item answered by the provider's batch once. The refusals close the Batch API's own
/// breaker and buckets, never the live lane's: a live request right after one goes at once.
#[tokio::test]
async fn a_batch_over_anthropics_processing_queue_is_learned_and_paced() {
    let dir = dir("processing-queue");
    let input = dir.path("in.jsonl");
    let lines: Vec<String> = (0..300)
        .map(|i| format!("{{\"id\": \"a{i}\", \"prompt\": \"question {i}\"}}"))
        .collect();
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let clock = ManualClock::new();
    let emu = emulator("anthropic", &clock).await;
    emu.set_batch_queue_limit("p", Some(100));
    let client = client("anthropic", &emu, &clock);

    // A refused create ends at once, and the live lane does not notice it.
    let items: Vec<BulkItem> = (0..101)
        .map(|i| BulkItem::new(format!("x{i}"), ChatRequest::from_prompt("q")))
        .collect();
    let plan = client.bulk_plan("p", &items, "too-many").unwrap();
    let e = client.bulk_create(&plan.submissions[0]).await.unwrap_err();
    assert_eq!(e.kind(), llm_failover::ErrorKind::RateLimited, "{e}");
    assert_eq!(emu.batch_log("p").refused, 1, "sent once, not again");
    let before = clock.sleeps().len();
    client.chat(ChatRequest::from_prompt("live")).await.unwrap();
    assert_eq!(
        clock.sleeps().len(),
        before,
        "the live lane waited for nothing"
    );
    reset(&emu);
    emu.set_batch_queue_limit("p", Some(100));

    let (_, got) = through_batch("anthropic", &dir, &client, &input).await;
    assert_eq!(got.len(), 300);
    assert!(
        got.values()
            .all(|l| l["ok"] == true && l["lane"] == "provider-batch"),
        "every item answered by the provider's batch"
    );
    let log = emu.batch_log("p");
    // 300 refused with nothing running (half: 150), then 150 (half: 75); then pieces of 75,
    // each created when the one before has ended.
    assert_eq!(
        log.refused, 2,
        "two refusals, each of a smaller batch: {log:?}"
    );
    let sizes: Vec<usize> = log.batches.iter().map(|b| b.custom_ids.len()).collect();
    assert_eq!(sizes, [75, 75, 75, 75], "{log:?}");
    let answered: std::collections::BTreeSet<&String> =
        log.batches.iter().flat_map(|b| &b.custom_ids).collect();
    assert_eq!(answered.len(), 300, "each item in one batch");
}

/// An abort (a second Ctrl-C) while the remote batch runs asks the provider to cancel it;
/// the next run keeps what the batch answered before it stopped and answers the rest live —
/// one create, every item answered once.
#[tokio::test]
async fn an_abort_cancels_the_remote_batch_and_the_rerun_keeps_what_it_answered() {
    let dir = dir("cancel");
    let input = dir.path("in.jsonl");
    let lines: Vec<String> = (0..40)
        .map(|i| format!("{{\"id\": \"c{i}\", \"prompt\": \"question {i}\"}}"))
        .collect();
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    for kind in ["openai", "anthropic"] {
        let clock = ManualClock::new();
        let emu = emulator(kind, &clock).await;
        // Ten hours of processing: the worker polls (every 5 minutes at most) many times
        // before it would end, and the test aborts in between.
        emu.set_batch_timing("p", BatchTiming::new(10 * 60 * MINUTE));
        let client = client(kind, &emu, &clock);
        let spec = format!("sqlite:{}", dir.path(&format!("{kind}.sqlite")).display());
        let output = dir.path(&format!("{kind}-out.jsonl"));
        let stop = Stop::new();
        let run = {
            let (input, output, client, stop) =
                (input.clone(), output.clone(), client.clone(), stop.clone());
            let queue = Queue::open(&spec).await.unwrap();
            tokio::spawn(async move {
                QueuedJob::new(&input, &output, queue)
                    .lane(LaneChoice::ProviderBatch)
                    .run(&client, &stop)
                    .await
            })
        };
        loop {
            let polled = emu.batch_log("p").polls;
            if polled >= 3 {
                break;
            }
            assert!(!run.is_finished(), "{kind}: the run ended before the abort");
            tokio::task::yield_now().await;
        }
        stop.abort();
        let first = run.await.unwrap().unwrap();
        assert!(first.pending > 0, "{kind}: {first:?}");
        let log = emu.batch_log("p");
        assert_eq!(log.creates, 1, "{kind}");
        assert!(
            ["cancelling", "cancelled", "canceling", "ended"]
                .iter()
                .any(|s| log.batches[0].status.contains(s)),
            "{kind}: the batch was asked to cancel: {log:?}"
        );

        // The rerun: the batch ends cancelled, what it answered is kept, the rest go live.
        let queue = Queue::open(&spec).await.unwrap();
        let report = QueuedJob::new(&input, &output, queue)
            .lane(LaneChoice::ProviderBatch)
            .run(&client, &Stop::new())
            .await
            .unwrap();
        assert_eq!(report.pending, 0, "{kind}: {report:?}");
        let got = results(&output);
        assert_eq!(got.len(), 40, "{kind}");
        assert!(got.values().all(|l| l["ok"] == true), "{kind}");
        let live = got.values().filter(|l| l["lane"] == "live").count();
        assert!(live > 0, "{kind}: the cancelled items went live");
        assert_eq!(emu.batch_log("p").creates, 1, "{kind}: never created again");
    }
}

/// A process that died between sending a create and recording its answer looks for the
/// batch by its label before creating again: found at OpenAI (the batch's `metadata`) and
/// Gemini (its display name), among other batches; none before it exists; Anthropic keeps no
/// label, so nothing is found there.
#[tokio::test]
async fn a_created_batch_is_found_again_by_its_label_where_the_provider_keeps_one() {
    for kind in ["openai", "gemini", "anthropic"] {
        let clock = ManualClock::new();
        let emu = emulator(kind, &clock).await;
        let client = client(kind, &emu, &clock);
        let items: Vec<BulkItem> = (0..3)
            .map(|i| BulkItem::new(format!("f{i}"), ChatRequest::from_prompt(format!("q {i}"))))
            .collect();
        let other = client.bulk_plan("p", &items[..1], "someone-else").unwrap();
        client.bulk_create(&other.submissions[0]).await.unwrap();
        let plan = client.bulk_plan("p", &items, "llmf-find-me").unwrap();
        let sub = &plan.submissions[0];
        assert_eq!(
            client.bulk_find(sub).await.unwrap(),
            None,
            "{kind}: not yet"
        );
        let made = client.bulk_create(sub).await.unwrap();
        let found = client.bulk_find(sub).await.unwrap();
        if kind == "anthropic" {
            assert_eq!(found, None, "anthropic keeps no label");
        } else {
            assert_eq!(found.as_ref().map(|b| &b.id), Some(&made.id), "{kind}");
            assert_eq!(found.unwrap().items, made.items, "{kind}");
        }
    }
}
