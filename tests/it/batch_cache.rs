//! The batch with a response cache: repeated questions are sent once (asked side by side, the
//! second may find the first in flight or kept: either way it is not sent; the held, exact case
//! of one in flight is `cache::identical_requests_in_flight_at_once_are_sent_once`), a rerun on the same SQLite cache file sends nothing — in code, and through the
//! example binary's `--cache` — and two replicas sharing a Redis cache ask once between them.
//! Every answer from the cache is marked in its results line, and the summary counts the run's
//! hits, misses and tokens saved.
//!
//! Against the in-process emulator; assertions are on counts — requests the emulator received,
//! lines, hits — never on timings.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use llm_failover::batch::{CacheSummary, FileJob, Runner, Stop, Summary};
use llm_failover::cache::Cache;
use llm_failover::config::Limits;
use llm_failover::{Client, Config, Credential};
use llm_failover_emulator::{Emulator, ProviderConfig};
use llm_failover_queue::Queue;
use llm_failover_queue::QueuedJob;
use serde_json::{Value, json};

use crate::support::examples::{TempDir, batch_bin, output_within};
use crate::support::redis::RedisServer;

/// The emulator, the repository's `demo` providers pointed at it (no limits), and a
/// directory.
struct Setup {
    emu: Arc<Emulator>,
    config: Config,
    dir: TempDir,
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
        // These tests are about what is sent, not pacing.
        for p in config.providers.values_mut() {
            p.limits = Limits::none();
        }
        Setup {
            emu: Arc::new(emu),
            config,
            dir: TempDir::new("batch-cache", name),
        }
    }

    /// A new client (a new process, as far as the cache knows) answering from `cache`.
    fn client(&self, cache: Cache) -> Client {
        let mut builder = Client::builder()
            .config(self.config.clone())
            .environment("demo")
            .cache(cache);
        for (provider, prefix) in [
            ("demo-openai", "openai"),
            ("demo-anthropic", "anthropic"),
            ("demo-deepgram", "deepgram"),
        ] {
            builder = builder
                .base_url(provider, self.emu.base_url(prefix).parse().unwrap())
                .credential(provider, Credential::new(self.emu.key(prefix)));
        }
        builder.build().unwrap()
    }

    /// Requests the emulator received, both providers.
    fn requests(&self) -> u64 {
        self.emu.counters("openai").requests + self.emu.counters("anthropic").requests
    }

    /// `questions` distinct prompts, each asked twice in a row under two ids (`q7a`, `q7b`).
    fn input(&self, questions: usize) -> PathBuf {
        let mut text = String::new();
        for i in 0..questions {
            for copy in ["a", "b"] {
                let line = json!({"id": format!("q{i}{copy}"),
                    "prompt": format!("Question {i}: why is the sky blue?"), "max_tokens": 24});
                text.push_str(&format!("{line}\n"));
            }
        }
        let path = self.dir.path("prompts.jsonl");
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Runs `input` through `client` into `output` (the results file alone), 4 in flight.
    async fn run(&self, client: &Client, input: &Path, output: &str) -> Summary {
        let runner = Runner::new(client.clone()).concurrency(4);
        let report = FileJob::new(input, self.dir.path(output))
            .run(&runner, &Stop::new())
            .await
            .unwrap();
        Summary::collect(client, &report, Some(&self.config)).await
    }
}

/// Result lines by id.
fn by_id(path: &Path) -> BTreeMap<String, Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .map(|v| (v["id"].as_str().unwrap().to_owned(), v))
        .collect()
}

/// The text of every line, by id.
fn texts(lines: &BTreeMap<String, Value>) -> BTreeMap<String, String> {
    lines
        .iter()
        .map(|(id, l)| (id.clone(), l["text"].as_str().unwrap().to_owned()))
        .collect()
}

/// Tokens the lines marked `cached` had used.
fn cached_tokens(lines: &BTreeMap<String, Value>) -> u64 {
    lines
        .values()
        .filter(|l| l["cached"] == true)
        .map(|l| {
            let u = &l["usage"];
            u["input_tokens"].as_u64().unwrap() + u["output_tokens"].as_u64().unwrap()
        })
        .sum()
}

fn cache_of(summary: &Summary) -> CacheSummary {
    summary
        .cache
        .expect("a client with a cache has a cache summary")
}

#[tokio::test]
async fn fifty_questions_asked_twice_side_by_side_are_sent_fifty_times() {
    let s = Setup::new("fifty").await;
    let input = s.input(50);
    let client = s.client(Cache::sqlite(s.dir.path("answers.sqlite")));

    let summary = s.run(&client, &input, "results.jsonl").await;
    assert_eq!(s.requests(), 50, "each question sent once");
    let lines = by_id(&s.dir.path("results.jsonl"));
    assert_eq!(lines.len(), 100);
    assert!(lines.values().all(|l| l["ok"] == true), "{lines:?}");
    let cached: Vec<&Value> = lines.values().filter(|l| l["cached"] == true).collect();
    assert_eq!(cached.len(), 50);
    assert!(cached.iter().all(|l| l["attempts"] == 0));
    // An uncached line is as it always was: no `cached` field at all.
    let asked = lines.values().filter(|l| l.get("cached").is_none()).count();
    assert_eq!(asked, 50);
    for i in 0..50 {
        let (a, b) = (&lines[&format!("q{i}a")], &lines[&format!("q{i}b")]);
        assert_eq!(a["text"], b["text"], "q{i}");
        assert_ne!(
            a["cached"], b["cached"],
            "one of q{i}'s two is from the cache"
        );
    }

    let cache = cache_of(&summary);
    assert_eq!((cache.hits, cache.misses), (50, 50), "{summary}");
    assert_eq!(cache.tokens_saved, cached_tokens(&lines));
    assert!(cache.tokens_saved > 0);
    let items = &serde_json::to_value(&summary).unwrap()["items"];
    assert_eq!((&items["ok"], summary.requests), (&100.into(), 50));
    let shown = summary.to_string();
    let line = format!(
        "cache 50 hits · 50 misses · {} tokens saved",
        cache.tokens_saved
    );
    assert!(shown.contains(&line), "{shown}");
    let json = serde_json::to_value(&summary).unwrap();
    assert_eq!(json["cache"]["hits"], 50);
    assert_eq!(json["cache"]["misses"], 50);
    // The cache's own counters agree for this one run.
    let stats = client.stats().cache.unwrap();
    assert_eq!((stats.hits, stats.misses, stats.stores), (50, 50, 50));
}

#[tokio::test]
async fn a_rerun_with_a_new_client_on_the_same_sqlite_file_sends_nothing() {
    let s = Setup::new("rerun").await;
    let input = s.input(30);
    let file = s.dir.path("answers.sqlite");
    let first = s.client(Cache::sqlite(&file));
    let summary = s.run(&first, &input, "first.jsonl").await;
    assert_eq!((s.requests(), cache_of(&summary).misses), (30, 30));
    drop(first);

    let second = s.client(Cache::sqlite(&file));
    let again = s.run(&second, &input, "second.jsonl").await;
    assert_eq!(s.requests(), 30, "the rerun sent nothing");
    assert_eq!(again.requests, 0);
    let cache = cache_of(&again);
    assert_eq!((cache.hits, cache.misses), (60, 0), "{again}");
    let (one, two) = (
        by_id(&s.dir.path("first.jsonl")),
        by_id(&s.dir.path("second.jsonl")),
    );
    assert_eq!(texts(&one), texts(&two), "the same answer for every id");
    assert!(two.values().all(|l| l["cached"] == true && l["ok"] == true));
    assert_eq!(cache.tokens_saved, cached_tokens(&two));
}

#[tokio::test]
async fn two_replicas_sharing_a_redis_cache_ask_once_between_them() {
    let redis = RedisServer::start();
    let s = Setup::new("redis").await;
    let input = s.input(20);
    let replica = |name: &str| {
        let cache = Cache::builder(redis.url())
            .redis_prefix(format!("batch-cache-{}", std::process::id()))
            .redis_timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        (s.client(cache), s.dir.path(name))
    };

    // Each replica runs the batch on a queue of its own, as two hosts would.
    let mut summaries = Vec::new();
    for name in ["one", "two"] {
        let (client, dir) = replica(name);
        std::fs::create_dir_all(&dir).unwrap();
        let queue = Queue::open(&format!("sqlite:{}", dir.join("queue.sqlite").display()))
            .await
            .unwrap();
        let report = QueuedJob::new(&input, dir.join("results.jsonl"), queue)
            .concurrency(4)
            .run(&client, &Stop::new())
            .await
            .unwrap();
        assert_eq!((report.ok, report.failed), (40, 0), "{name}: {report:?}");
        summaries.push(report.summary(&client, Some(&s.config)).await);
        if name == "one" {
            assert_eq!(
                s.requests(),
                20,
                "the first replica asks each question once"
            );
        }
    }
    assert_eq!(s.requests(), 20, "the second replica sent nothing");
    let (one, two) = (cache_of(&summaries[0]), cache_of(&summaries[1]));
    assert_eq!((one.hits, one.misses), (20, 20), "{}", summaries[0]);
    assert_eq!((two.hits, two.misses), (40, 0), "{}", summaries[1]);
    assert_eq!(summaries[1].requests, 0);
    let lines = by_id(&s.dir.path("two").join("results.jsonl"));
    assert_eq!(two.tokens_saved, cached_tokens(&lines));
    assert_eq!(
        texts(&lines),
        texts(&by_id(&s.dir.path("one").join("results.jsonl")))
    );
}

/// Runs the example in `dir`, in `demo`, with `args`; returns its summary (`--summary-json`)
/// and its standard error.
fn run_example(dir: &TempDir, args: &[&str], summary: &str) -> (Value, String) {
    let summary = dir.path(summary);
    let mut all: Vec<OsString> = vec![
        "--config".into(),
        concat!(env!("CARGO_MANIFEST_DIR"), "/providers.toml").into(),
        "--env".into(),
        "demo".into(),
        "--summary-json".into(),
        summary.clone().into(),
    ];
    all.extend(args.iter().map(OsString::from));
    let mut command = Command::new(batch_bin());
    command
        .args(&all)
        .current_dir(dir.root())
        .env_remove("RUST_LOG")
        .env_remove("LLM_FAILOVER_ENV")
        .env_remove("LLM_FAILOVER_REDIS_URL")
        .env("NO_COLOR", "1");
    let out = output_within(command, Duration::from_secs(120), "the batch example");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{all:?}\n{stderr}");
    let json = std::fs::read_to_string(&summary).unwrap();
    (serde_json::from_str(&json).unwrap(), stderr)
}

#[test]
fn the_examples_rerun_on_its_sqlite_cache_sends_no_request_with_or_without_the_queue() {
    let dir = TempDir::new("batch-cache", "example");
    let mut text = String::new();
    for i in 0..10 {
        for copy in ["a", "b"] {
            let line = json!({"id": format!("p{i}{copy}"), "prompt": format!("Prompt {i}"),
                "max_tokens": 16});
            text.push_str(&format!("{line}\n"));
        }
    }
    std::fs::write(dir.path("prompts.jsonl"), text).unwrap();
    // A relative path: the working directory's (the example runs in `dir`).
    let cache = [
        "--cache",
        "sqlite:answers.sqlite",
        "--input",
        "prompts.jsonl",
    ];

    let (first, stderr) = run_example(
        &dir,
        &[&cache[..], &["--output", "one.jsonl"]].concat(),
        "s1.json",
    );
    assert!(stderr.contains("cache: sqlite:answers.sqlite"), "{stderr}");
    assert_eq!(first["items"]["ok"], 20, "{first}");
    assert_eq!(first["requests"], 10, "{first}");
    assert_eq!(
        (&first["cache"]["hits"], &first["cache"]["misses"]),
        (&json!(10), &json!(10))
    );
    assert!(first["cache"]["tokens_saved"].as_u64() > Some(0), "{first}");
    assert!(dir.path("answers.sqlite").exists());

    for (args, name) in [
        (vec!["--output", "two.jsonl"], "s2.json"),
        (vec!["--output", "three.jsonl", "--no-queue"], "s3.json"),
    ] {
        let (again, stderr) = run_example(&dir, &[&cache[..], &args].concat(), name);
        assert_eq!(again["requests"], 0, "{args:?}: {again}\n{stderr}");
        assert_eq!(again["items"]["ok"], 20, "{args:?}: {again}");
        assert_eq!(again["cache"]["hits"], 20, "{args:?}: {again}");
        assert_eq!(again["cache"]["misses"], 0, "{args:?}: {again}");
        assert!(stderr.contains("cache 20 hits · 0 misses"), "{stderr}");
        let lines = by_id(&dir.path(args[1]));
        assert!(lines.values().all(|l| l["cached"] == true), "{args:?}");
        assert_eq!(texts(&lines), texts(&by_id(&dir.path("one.jsonl"))));
    }
}
