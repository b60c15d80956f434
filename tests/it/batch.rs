//! The batch job (`llm_failover::batch`, the code path of `examples/batch.rs`) against the
//! in-process emulator, configured from the repository's `providers.toml` `demo` environment:
//! one result line per input id, bad lines reported, resume after a stop, an abort and a
//! `kill -9` (torn last line), `--retry-failed`, and a 429 that fails over.
//!
//! The emulator runs on real time with no limits and no latency, so each test takes
//! milliseconds; assertions are on counts (lines, ids, requests the emulator received), never
//! on timings.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use llm_failover::batch::{
    BatchItem, FileJob, InputError, ItemOutcome, JobReport, OutcomeSink, ResultsWriter, Runner,
    Stop, Summary,
};
use llm_failover::config::Limits;
use llm_failover::{Client, Config, Credential};
use llm_failover_emulator::{Emulator, Fault, ProviderConfig, RetryAfter};
use serde_json::{Value, json};

struct Setup {
    emu: Arc<Emulator>,
    client: Client,
    config: Config,
    dir: PathBuf,
}

impl Setup {
    async fn new(name: &str) -> Setup {
        let emu = Emulator::builder()
            .provider(ProviderConfig::openai("openai"))
            .provider(ProviderConfig::anthropic("anthropic"))
            .provider(ProviderConfig::deepgram("deepgram"))
            .start()
            .await
            .unwrap();
        let mut config =
            Config::from_path(concat!(env!("CARGO_MANIFEST_DIR"), "/providers.toml")).unwrap();
        // Generous limits: these tests are about records, not pacing.
        for p in config.providers.values_mut() {
            p.limits = Limits::none();
        }
        let mut builder = Client::builder().config(config.clone()).environment("demo");
        for (provider, prefix) in [
            ("demo-openai", "openai"),
            ("demo-anthropic", "anthropic"),
            ("demo-deepgram", "deepgram"),
        ] {
            builder = builder
                .base_url(provider, emu.base_url(prefix).parse().unwrap())
                .credential(provider, Credential::new(emu.key(prefix)));
        }
        let client = builder.build().unwrap();
        let dir =
            std::env::temp_dir().join(format!("llm-failover-batch-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Setup {
            emu: Arc::new(emu),
            client,
            config,
            dir,
        }
    }

    fn input(&self, lines: &[String]) -> PathBuf {
        let path = self.dir.join("prompts.jsonl");
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        path
    }

    fn output(&self) -> PathBuf {
        self.dir.join("results.jsonl")
    }

    fn runner(&self, concurrency: usize) -> Runner {
        Runner::new(self.client.clone()).concurrency(concurrency)
    }

    async fn run(&self, input: &Path, concurrency: usize, retry_failed: bool) -> JobReport {
        FileJob::new(input, self.output())
            .retry_failed(retry_failed)
            .run(&self.runner(concurrency), &Stop::new())
            .await
            .unwrap()
    }

    /// Requests the emulator received, both providers.
    fn requests(&self) -> u64 {
        self.emu.counters("openai").requests + self.emu.counters("anthropic").requests
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn prompts(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            json!({"id": format!("q{i}"), "prompt": format!("Question number {i}: why is the sky blue?"), "max_tokens": 32})
                .to_string()
        })
        .collect()
}

fn read_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Output lines by id, and `line N` for a bad line's report (which has `"line"` in place of
/// `"id"`); fails if a key appears twice or a line has both or neither.
fn by_id(path: &Path) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for line in read_lines(path) {
        let id = match (&line["id"], &line["line"]) {
            (Value::String(id), Value::Null) => id.clone(),
            (Value::Null, Value::Number(n)) => format!("line {n}"),
            _ => panic!("a result line has one of id and line: {line}"),
        };
        assert!(out.insert(id.clone(), line).is_none(), "id {id} twice");
    }
    out
}

fn ids(expected: impl IntoIterator<Item = impl Into<String>>) -> BTreeSet<String> {
    expected.into_iter().map(Into::into).collect()
}

#[tokio::test]
async fn every_input_id_gets_exactly_one_line_and_bad_lines_are_labelled_failures() {
    let s = Setup::new("one-line-per-id").await;
    let mut lines = prompts(20);
    // (line text, the id it is reported under — `line N` for `"line": N` in place of an id —,
    // a word its message must contain)
    let bad: [(&str, &str, &str); 6] = [
        ("this is not json", "line 21", "JSON"),
        (r#"{"prompt": "no id here"}"#, "line 22", "id"),
        (
            r#"{"id": "q3", "prompt": "the same id again"}"#,
            "line 23",
            "duplicate",
        ),
        (r#"{"id": "empty", "prompt": ""}"#, "empty", "prompt"),
        (
            r#"{"id": "role", "messages": [{"role": "wizard", "content": "hi"}]}"#,
            "role",
            "unknown role",
        ),
        (
            r#"{"id": "tokens", "prompt": "x", "max_tokens": 0}"#,
            "tokens",
            "max_tokens",
        ),
    ];
    lines.extend(bad.iter().map(|(l, _, _)| l.to_string()));
    lines.push(
        json!({"id": "chat", "system": "Be brief.", "messages": [
            {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
            {"role": "user", "content": "How are buckets refilled?"}]})
        .to_string(),
    );
    let input = s.input(&lines);

    let report = s.run(&input, 4, false).await;

    let out = by_id(&s.output());
    let mut expected = ids((0..20).map(|i| format!("q{i}")));
    expected.extend(bad.iter().map(|(_, id, _)| id.to_string()));
    expected.insert("chat".into());
    assert_eq!(out.keys().cloned().collect::<BTreeSet<_>>(), expected);
    assert_eq!(report.run.ok, 21);
    assert_eq!(
        report.run.failed_by_kind,
        BTreeMap::from([("invalid_input".to_string(), 6)])
    );
    assert!(!report.run.stopped && report.run.input_exhausted);
    assert_eq!(s.requests(), 21, "no request for a bad line");

    for (n, (_, id, word)) in bad.iter().enumerate() {
        let line_no = 21 + n as u64;
        let l = &out[*id];
        assert_eq!(l["ok"], false, "{id}");
        assert_eq!(l["error"]["kind"], "invalid_input", "{id}");
        assert_eq!(l["error"]["line"], line_no, "{id}");
        assert_eq!(l["attempts"], 0, "{id}");
        let msg = l["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains(&format!("line {line_no}")) && msg.contains(word),
            "{id}: {msg}"
        );
    }
    let ok = &out["q0"];
    assert_eq!(ok["ok"], true);
    assert_eq!(ok["provider"], "demo-openai");
    assert_eq!(ok["model"], "gpt-4o-mini");
    assert!(!ok["text"].as_str().unwrap().is_empty());
    assert!(ok["usage"]["input_tokens"].as_u64().unwrap() > 0);
    assert!(ok["usage"]["output_tokens"].as_u64().unwrap() > 0);
    assert_eq!(ok["attempts"], 1);
    assert!(ok["latency_ms"].is_u64());
}

/// Stops the batch once `after` outcomes are recorded, like a Ctrl-C at that moment.
struct StopAfter {
    inner: ResultsWriter,
    after: usize,
    seen: usize,
    stop: Stop,
    abort: bool,
    /// Waits (yielding, never sleeping) until this holds before stopping.
    ready: Option<Box<dyn Fn() -> bool + Send + Sync>>,
}

#[async_trait::async_trait]
impl OutcomeSink for StopAfter {
    async fn record(&mut self, outcome: &ItemOutcome) -> std::io::Result<()> {
        self.inner.record(outcome).await?;
        self.seen += 1;
        if self.seen == self.after {
            if let Some(ready) = &self.ready {
                let mut spins = 0u32;
                while !ready() {
                    spins += 1;
                    assert!(
                        spins < 1_000_000,
                        "the emulator never got the expected requests"
                    );
                    tokio::task::yield_now().await;
                }
            }
            if self.abort {
                self.stop.abort();
            } else {
                self.stop.stop();
            }
        }
        Ok(())
    }
}

/// Runs the items of `input` until `after` outcomes are written, then stops (or aborts) —
/// and, like a killed process, neither syncs nor compacts.
async fn interrupted_run(
    s: &Setup,
    input: &Path,
    after: usize,
    abort: bool,
    ready: Option<Box<dyn Fn() -> bool + Send + Sync>>,
) -> llm_failover::batch::RunReport {
    let (writer, previous) = ResultsWriter::open(s.output()).await.unwrap();
    assert_eq!(previous.lines, 0);
    let stop = Stop::new();
    let mut sink = StopAfter {
        inner: writer,
        after,
        seen: 0,
        stop: stop.clone(),
        abort,
        ready,
    };
    let file = tokio::fs::File::open(input).await.unwrap();
    let mut reader = llm_failover::batch::InputReader::new(tokio::io::BufReader::new(file));
    let items = async_stream(&mut reader);
    s.runner(4).run(items, &mut sink, &stop).await.unwrap()
}

fn async_stream<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut llm_failover::batch::InputReader<R>,
) -> impl futures_util::Stream<Item = Result<BatchItem, InputError>> + '_ {
    futures_util::stream::unfold(reader, |r| async move {
        r.next().await.unwrap().map(|p| (p, r))
    })
}

#[tokio::test]
async fn a_stopped_run_resumes_without_sending_finished_items_again() {
    let s = Setup::new("stop-resume").await;
    let input = s.input(&prompts(30));

    let first = interrupted_run(&s, &input, 10, false, None).await;
    assert!(first.stopped);
    assert_eq!(first.not_done, 0, "a stop lets the items in flight finish");
    let written = read_lines(&s.output()).len() as u64;
    assert!((10..30).contains(&written), "{written}");
    assert_eq!(s.requests(), written, "every request sent was recorded");

    let second = s.run(&input, 4, false).await;
    assert_eq!(second.skipped_ok, written);
    assert_eq!(second.run.ok, 30 - written);
    assert_eq!(s.requests(), 30, "finished items are never sent again");
    let out = by_id(&s.output());
    assert_eq!(
        out.keys().cloned().collect::<BTreeSet<_>>(),
        ids((0..30).map(|i| format!("q{i}")))
    );
    assert!(out.values().all(|l| l["ok"] == true));
}

#[tokio::test]
async fn an_aborted_run_records_items_in_flight_as_not_done_and_a_rerun_sends_them_once() {
    let s = Setup::new("abort-resume").await;
    let input = s.input(&prompts(24));
    // Two answer, two hang until the abort drops them, and a third item waits for a place
    // that never comes: the demo provider states no limits, so first contact sends one, then
    // two at once after its answer (1 + ⌊√answers⌋ in flight), and holds the rest.
    let hang = || Fault::Hang { ms: Some(30_000) };
    s.emu
        .script("openai", [Fault::Pass, Fault::Pass, hang(), hang()]);

    let emu = s.emu.clone();
    let all_sent = Box::new(move || emu.pending_faults("openai") == 0);
    let first = interrupted_run(&s, &input, 2, true, Some(all_sent)).await;
    assert!(first.stopped);
    assert_eq!((first.ok, first.not_done), (2, 3), "two sent and one held");
    assert_eq!(
        read_lines(&s.output()).len(),
        2,
        "no line for an item not done"
    );
    assert_eq!(s.requests(), 4);

    let second = s.run(&input, 4, false).await;
    assert_eq!((second.skipped_ok, second.run.ok), (2, 22));
    assert_eq!(s.requests(), 4 + 22, "only the missing items are sent");
    let out = by_id(&s.output());
    assert_eq!(out.len(), 24);
    assert!(out.values().all(|l| l["ok"] == true));
}

#[tokio::test]
async fn a_torn_last_line_from_a_kill_is_dropped_and_its_item_runs_again() {
    let s = Setup::new("torn").await;
    let input = s.input(&prompts(10));
    s.run(&input, 4, false).await;
    assert_eq!(s.requests(), 10);

    // A kill -9 in the middle of writing the last line.
    let text = std::fs::read_to_string(s.output()).unwrap();
    let last_start = text.trim_end().rfind('\n').unwrap() + 1;
    let torn_id = serde_json::from_str::<Value>(&text[last_start..]).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    std::fs::write(s.output(), &text[..text.len() - 15]).unwrap();

    let again = s.run(&input, 4, false).await;
    assert_eq!(
        again.previous.torn_bytes,
        (text.len() - last_start - 15) as u64
    );
    assert_eq!(again.skipped_ok, 9);
    assert_eq!(again.run.ok, 1);
    assert_eq!(s.requests(), 11, "only the torn item is sent again");
    let out = by_id(&s.output());
    assert_eq!(out.len(), 10);
    assert_eq!(out[&torn_id]["ok"], true);
}

#[tokio::test]
async fn failed_items_are_retried_only_with_retry_failed() {
    let s = Setup::new("retry-failed").await;
    let input = s.input(&prompts(6));
    // One at a time, so the second item meets the scripted 400 (terminal: no failover).
    s.emu
        .script("openai", [Fault::Pass, Fault::Status { status: 400 }]);

    let first = s.run(&input, 1, false).await;
    assert_eq!(first.run.ok, 5);
    assert_eq!(
        first.run.failed_by_kind,
        BTreeMap::from([("invalid_request".to_string(), 1)])
    );
    let failed = &by_id(&s.output())["q1"];
    assert_eq!(failed["ok"], false);
    assert_eq!(failed["error"]["status"], 400);
    assert_eq!(failed["error"]["provider"], "demo-openai");
    assert_eq!(failed["attempts"], 1);
    assert_eq!(s.requests(), 6);

    let without = s.run(&input, 1, false).await;
    assert_eq!((without.skipped_ok, without.skipped_failed), (5, 1));
    assert_eq!(without.run.ok + without.run.failed(), 0);
    assert_eq!(
        s.requests(),
        6,
        "a failed item is not retried without --retry-failed"
    );
    assert_eq!(by_id(&s.output())["q1"]["ok"], false);

    let with = s.run(&input, 1, true).await;
    assert_eq!(
        (with.skipped_ok, with.skipped_failed, with.run.ok),
        (5, 0, 1)
    );
    assert_eq!(s.requests(), 7, "only the failed item is sent again");
    assert_eq!(
        with.compaction.replaced, 1,
        "its old failure line is replaced"
    );
    let out = by_id(&s.output());
    assert_eq!(out.len(), 6);
    assert!(out.values().all(|l| l["ok"] == true));
}

#[tokio::test]
async fn a_429_on_the_primary_fails_over_and_is_counted_in_the_summary() {
    let s = Setup::new("summary").await;
    let input = s.input(&prompts(5));
    s.emu.script(
        "openai",
        [Fault::RateLimit {
            retry_after: RetryAfter::Seconds(30),
        }],
    );

    let report = s.run(&input, 1, false).await;
    assert_eq!(report.run.ok, 5);
    let out = by_id(&s.output());
    assert_eq!(out["q0"]["provider"], "demo-anthropic");
    assert_eq!(out["q0"]["attempts"], 2);
    assert_eq!(
        s.emu.counters("openai").requests,
        1,
        "the primary is skipped while its breaker is open"
    );

    let summary = Summary::collect(&s.client, &report, Some(&s.config)).await;
    assert_eq!(serde_json::to_value(&summary).unwrap()["items"]["ok"], 5);
    assert_eq!(
        (
            summary.rate_limited,
            summary.failovers,
            summary.breaker_opens
        ),
        (1, 1, 1)
    );
    assert_eq!(summary.requests, 6);
    let names: Vec<&str> = summary
        .providers
        .iter()
        .map(|p| p.provider.as_str())
        .collect();
    assert_eq!(names, ["demo-openai", "demo-anthropic"]);
    assert_eq!(summary.providers[1].stats.ok, 5);
    assert!(summary.to_string().contains("429s received 1"), "{summary}");
    let v = serde_json::to_value(&summary).unwrap();
    assert_eq!(v["items"]["ok"], 5);
    assert_eq!(v["providers"][0]["stats"]["rate_limited"], 1);
    assert!(v["wall_ms"].is_number());
}

#[tokio::test]
async fn an_item_only_ever_throttled_reads_rate_limited_in_its_result_line() {
    let s = Setup::new("rate-limited").await;
    let input = s.input(&prompts(1));
    // Both providers throttle for longer than the item's deadline: the router ends the item
    // at once (it never sleeps past a deadline) with what happened — throttled everywhere.
    for prefix in ["openai", "anthropic"] {
        s.emu.script(
            prefix,
            [Fault::RateLimit {
                retry_after: RetryAfter::Seconds(60),
            }],
        );
    }
    let runner = s.runner(1).deadline(std::time::Duration::from_secs(10));
    let report = FileJob::new(&input, s.output())
        .run(&runner, &Stop::new())
        .await
        .unwrap();

    assert_eq!(
        report.run.failed_by_kind,
        BTreeMap::from([("rate_limited".to_string(), 1)])
    );
    let line = &by_id(&s.output())["q0"];
    assert_eq!(line["ok"], false);
    assert_eq!(line["error"]["kind"], "rate_limited", "{line}");
    assert_eq!(line["error"]["status"], 429);
    assert_eq!(
        line["error"]["provider"], "demo-anthropic",
        "the last attempt's"
    );
    assert_eq!(line["attempts"], 2, "one 429 from each provider");
    assert_eq!(s.requests(), 2);
}
