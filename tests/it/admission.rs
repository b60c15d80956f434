//! One admission order, lived: a bulk batch saturates a stated limit of 60 requests per 6 s
//! window (one slot every 100 ms), and an interactive request sent mid-run is admitted at the
//! next free slot, not behind the bulk requests already waiting — in one client (in-memory
//! limits), and with the batch in another process sharing the quota through Redis.
//!
//! Nothing is configured: the limit is learned from the emulator's headers. The measure is a
//! count, never a time: the requests the emulator received between the moment the
//! interactive request was asked and its arrival (its log, in arrival order). Controls in the
//! same run: a bulk request of the batch's tenant asked at the same moment arrives behind the
//! bulk requests that were waiting (which shows they were), and one of another tenant right
//! after the interactive one (tenants take turns).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;

use futures_util::stream;
use llm_failover::admission::{Priority, Tenant};
use llm_failover::batch::{BatchItem, InputError, ItemOutcome, OutcomeSink, Runner, Stop};
use llm_failover::ratelimit::SharedSettings;
use llm_failover::redis::RedisStore;
use llm_failover::{ChatRequest, Client, Config, Credential, RequestOptions};
use llm_failover_emulator::{Emulator, Limits, LogEntry, ProviderConfig};
use serde_json::json;
use tokio::sync::Notify;

use crate::support::examples::{TempDir, batch_bin, write_one_provider_config};
use crate::support::redis::RedisServer;

/// The emulator's "minute": the stated window.
const WINDOW_MS: u64 = 6_000;
/// Requests per window: one slot every 100 ms.
const LIMIT: u64 = 60;
/// The bulk batch.
const ITEMS: usize = 200;
const CONCURRENCY: usize = 32;
/// Bulk answers recorded before the interactive request is sent: past the first window's
/// burst, well into the paced part.
const MID_RUN: usize = 100;
/// Bulk requests that may arrive between the interactive request's asking and its arrival:
/// one granted its slot just before the asking and still on its way, and one more for the
/// moment the log is read.
const IN_FLIGHT: usize = 2;
const PROVIDER: &str = "openai";
const KEY_VAR: &str = "ADMISSION_EMU_KEY";

async fn emulator() -> Emulator {
    Emulator::builder()
        .minute_ms(WINDOW_MS)
        .provider(
            ProviderConfig::openai(PROVIDER).with_limits(Limits::per_minute(LIMIT, 100_000_000)),
        )
        .start()
        .await
        .expect("the emulator starts")
}

fn config(dir: &TempDir, emu: &Emulator) -> PathBuf {
    let path = dir.path("providers.toml");
    write_one_provider_config(
        &path,
        "admission",
        PROVIDER,
        &emu.base_url(PROVIDER),
        KEY_VAR,
    );
    path
}

fn client(config: &PathBuf, emu: &Emulator, store: Option<RedisStore>) -> Client {
    let mut b = Client::builder()
        .config(Config::from_path(config).unwrap())
        .environment("admission")
        .credential(PROVIDER, Credential::new(emu.key(PROVIDER)));
    if let Some(store) = store {
        b = b.limiter_store(Arc::new(store));
    }
    b.build().unwrap()
}

fn question(i: usize) -> ChatRequest {
    ChatRequest::new()
        .user(format!("Bulk question {i}"))
        .max_tokens(8)
}

/// Where `request_id` arrived in the emulator's log (arrival order).
fn arrival(log: &[LogEntry], request_id: Option<&str>) -> usize {
    let id = request_id.expect("the emulator names every answer");
    log.iter()
        .position(|e| e.request_id.as_deref() == Some(id))
        .expect("the answer's request is in the log")
}

/// Counts outcomes and wakes the test at the [`MID_RUN`]th.
struct MidRun {
    seen: usize,
    mid: Arc<Notify>,
}

#[async_trait::async_trait]
impl OutcomeSink for MidRun {
    async fn record(&mut self, outcome: &ItemOutcome) -> std::io::Result<()> {
        assert!(outcome.result.is_ok(), "{outcome:?}");
        self.seen += 1;
        if self.seen == MID_RUN {
            self.mid.notify_one();
        }
        Ok(())
    }
}

/// How many requests arrived between the asking and the arrival of each of three sent at
/// the same moment through `client`: an interactive one, a bulk one of the batch's tenant and
/// a bulk one of another tenant.
async fn ask_three(client: &Client, emu: &Emulator) -> [usize; 3] {
    let asked = emu.log().len();
    let bulk = |tenant: &str| {
        RequestOptions::new()
            .priority(Priority::Bulk)
            .tenant(Tenant::new(tenant))
    };
    let (same, other) = (bulk("default"), bulk("another"));
    let ask = |text: &str| ChatRequest::new().user(text).max_tokens(8);
    let (interactive, same, other) = tokio::join!(
        client.chat(ask("Interactive question")),
        client.chat_with(ask("A late bulk question"), &same),
        client.chat_with(ask("Another tenant's bulk question"), &other),
    );
    let log = emu.log();
    [interactive, same, other]
        .map(|answer| arrival(&log, answer.unwrap().request_id.as_deref()) - asked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interactive_request_is_admitted_at_the_next_free_slot_before_the_bulk_batch() {
    let emu = emulator().await;
    let dir = TempDir::new("admission", "memory");
    let client = client(&config(&dir, &emu), &emu, None);
    let mid = Arc::new(Notify::new());
    let stop = Stop::new();
    let batch = tokio::spawn({
        let (client, mid, stop) = (client.clone(), mid.clone(), stop.clone());
        async move {
            let items = (0..ITEMS)
                .map(|i| Ok::<_, InputError>(BatchItem::new(format!("b{i}"), question(i))));
            let mut sink = MidRun { seen: 0, mid };
            Runner::new(client)
                .concurrency(CONCURRENCY)
                .run(stream::iter(items), &mut sink, &stop)
                .await
                .unwrap()
        }
    });
    mid.notified().await;
    let [interactive, same_tenant, other_tenant] = ask_three(&client, &emu).await;
    stop.stop();
    let report = batch.await.unwrap();
    assert_eq!(report.failed(), 0, "{report:?}");
    eprintln!(
        "requests arrived between the asking and the arrival of: the interactive one \
         {interactive}, a bulk one of the batch's tenant {same_tenant}, a bulk one of another \
         tenant {other_tenant}"
    );
    assert!(
        interactive <= IN_FLIGHT,
        "the interactive request came after {interactive} requests asked before it"
    );
    // The control: the bulk requests were waiting (a bulk request of their tenant asked
    // with the interactive one went behind them)...
    assert!(
        same_tenant >= CONCURRENCY / 2,
        "a bulk request asked mid-run came after only {same_tenant}: nothing was waiting"
    );
    // ... and tenants take turns: another tenant's went after the interactive one and the
    // batch's tenant's next.
    assert!(
        other_tenant <= IN_FLIGHT + 2,
        "another tenant's bulk request came after {other_tenant}: tenants did not take turns"
    );
}

#[test]
fn the_same_with_the_batch_in_another_process_sharing_the_quota_through_redis() {
    let redis = RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let emu = rt.block_on(emulator());
    let dir = TempDir::new("admission", "redis");
    let config = config(&dir, &emu);
    let input = dir.path("in.jsonl");
    let lines: Vec<String> = (0..ITEMS)
        .map(|i| {
            json!({"id": format!("b{i}"), "prompt": format!("Bulk question {i}"), "max_tokens": 8})
                .to_string()
        })
        .collect();
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let mut child = Command::new(batch_bin())
        .arg("--config")
        .arg(&config)
        .args([
            "--env",
            "admission",
            "--concurrency",
            &CONCURRENCY.to_string(),
            "--input",
        ])
        .arg(&input)
        .arg("--output")
        .arg(dir.path("out.jsonl"))
        .current_dir(dir.root())
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .env(KEY_VAR, emu.key(PROVIDER))
        .env("LLM_FAILOVER_REDIS_URL", redis.url())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the batch starts");
    // The batch prints "[done/total] …" every 2 s: wait for a line past the first burst.
    let stderr = child.stderr.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stderr));
    let mut seen = Vec::new();
    loop {
        let Some(Ok(line)) = lines.next() else {
            let _ = child.kill();
            panic!("the batch ended before mid-run: {seen:#?}");
        };
        let done = line
            .strip_prefix('[')
            .and_then(|l| l.split('/').next())
            .and_then(|n| n.parse::<usize>().ok());
        seen.push(line);
        if done.is_some_and(|n| n >= MID_RUN) {
            break;
        }
    }
    // The bulk requests of the other process wait in its line, booking nothing ahead.
    let store = RedisStore::new(SharedSettings::new(redis.url())).unwrap();
    let client = client(&config, &emu, Some(store));
    let asked = emu.log().len();
    let answer = rt
        .block_on(
            client.chat(
                ChatRequest::new()
                    .user("Interactive question")
                    .max_tokens(8),
            ),
        )
        .unwrap();
    let log = emu.log();
    let interactive = arrival(&log, answer.request_id.as_deref()) - asked;
    let _ = child.kill();
    let _ = child.wait();
    let bulk_before: usize = log[..asked].len();
    eprintln!(
        "the other process's bulk requests: {bulk_before} before the asking, {interactive} \
         between it and the interactive request's arrival"
    );
    assert!(
        bulk_before >= MID_RUN,
        "the batch was not mid-run: {bulk_before}"
    );
    assert!(
        interactive <= IN_FLIGHT,
        "the interactive request came after {interactive} bulk requests asked before it"
    );
}
