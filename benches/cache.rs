//! B8 — the response cache: what a hit costs, and a rerun of the demo batch on a warm cache.
//!
//! Part 1, latency. One client per backend (memory, an SQLite file, a `redis-server` on
//! loopback) over the emulator's OpenAI-format provider (no latency, no limits), at
//! concurrency 1. Three paths through the same `Client::chat`, interleaved in segments of
//! `B8_SEGMENT` requests, the order turned round every round (ABC, CBA, …):
//!
//! - **hit**: the same request every time, answered from the cache (nothing sent);
//! - **miss**: a new prompt every time: looked up, not found, sent to the emulator, kept;
//! - **bypass**: the same request with `CacheMode::Bypass`: sent, the cache not touched (the
//!   provider path alone, for scale).
//!
//! Per request: p50, p99 and mean in µs, and the hit's p50 as a fraction of the miss's. The
//! emulator's request count is checked against the misses and bypasses sent.
//!
//! Part 2, the demo rerun. The README's main job, the `llm-failover` command on its bundled
//! `examples/prompts.jsonl` (213 lines) in `demo` (the emulator in its process, 150–450 ms per
//! answer, the demo's limits and faults), built here in this profile, with
//! `--cache sqlite:answers.sqlite`: a cold run into one output, then a rerun into a fresh
//! output (queue mode, the default), and one more with `--no-queue`. Wall time of each process,
//! and requests sent and cache hits from its `--summary-json`. `B8_RUNS` fresh cache files.
//!
//! ```sh
//! cargo bench --bench cache                 # both parts (30 s after the build)
//! B8_ONLY=latency cargo bench --bench cache # one part only (latency | rerun)
//! # Knobs: B8_ROUNDS (10), B8_SEGMENT (300 requests), B8_RUNS (3).
//! ```
//!
//! Needs `redis-server` (Debian: `apt-get install redis-server`).

mod common;
// The tests' real redis-server on a free loopback port (its own tests compile away here).
// The certificates the tests' TLS servers use (their helpers name the module).
#[path = "../tests/it/support/certs.rs"]
#[allow(dead_code, unreachable_pub)]
mod certs;
#[path = "../tests/it/support/redis.rs"]
#[allow(dead_code, unreachable_pub, unused_imports)]
mod redis_server;
// The tests' way of building an example.
#[path = "../tests/it/support/examples.rs"]
#[allow(dead_code, unreachable_pub)]
mod examples;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::prompts::MODEL;
use common::{Table, f, median, percentile};
use llm_failover::cache::{Cache, CacheMode};
use llm_failover::provider::openai::OpenAi;
use llm_failover::{ChatRequest, Client, Credential, ProviderId, ProviderSettings, RequestOptions};
use llm_failover_emulator::Emulator;
use redis_server::RedisServer;
use serde_json::{Value, json};

/// Rounds of interleaved segments.
const ROUNDS: usize = 10;
/// Requests per path per round.
const SEGMENT: usize = 300;
/// Cold-and-warm pairs of the demo batch.
const RUNS: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path3 {
    Hit,
    Miss,
    Bypass,
}

impl Path3 {
    const ALL: [Path3; 3] = [Path3::Hit, Path3::Miss, Path3::Bypass];

    fn name(self) -> &'static str {
        match self {
            Path3::Hit => "hit",
            Path3::Miss => "miss (sent, kept)",
            Path3::Bypass => "bypass (sent)",
        }
    }
}

fn main() {
    let machine = common::machine();
    machine.print("cache (B8)");
    let only = std::env::var("B8_ONLY").unwrap_or_default();
    if only.is_empty() || only == "latency" {
        latency_part(&machine);
    }
    if only.is_empty() || only == "rerun" {
        rerun_part(&machine);
    }
}

// ------------------------------------------------------------------------------ latency

/// The request a hit and a bypass repeat.
fn repeated() -> ChatRequest {
    ChatRequest::new()
        .system("You are a terse assistant.")
        .user("Say hello to the benchmark in five words.")
        .max_tokens(16)
}

/// A request no one asked before (`n` unique in the run).
fn fresh(backend: &str, n: usize) -> ChatRequest {
    ChatRequest::new()
        .system("You are a terse assistant.")
        .user(format!(
            "Say hello to {backend} benchmark request {n} in five words."
        ))
        .max_tokens(16)
}

/// Per-request latencies of one backend, by path (µs).
struct Samples {
    backend: &'static str,
    by_path: [Vec<f64>; 3],
    sent: u64,
}

fn latency_part(machine: &common::Machine) {
    let rounds = common::env_or("B8_ROUNDS", ROUNDS);
    let segment = common::env_or("B8_SEGMENT", SEGMENT);
    let emu_rt = common::runtime("emu", 1);
    let client_rt = common::runtime("client", 1);
    let emu = emu_rt
        .block_on(Emulator::builder().openai("openai").start())
        .expect("the emulator starts");
    let redis = RedisServer::start();
    let dir = std::env::temp_dir().join(format!("llm-failover-b8-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let backends: [(&'static str, String); 3] = [
        ("memory", "memory".to_owned()),
        (
            "sqlite",
            format!("sqlite:{}", dir.join("b8.sqlite").display()),
        ),
        ("redis", redis.url()),
    ];
    let mut all = Vec::new();
    for (name, spec) in backends {
        let cache = Cache::builder(spec.clone())
            .redis_prefix(format!("b8-{}", std::process::id()))
            .build()
            .expect("the cache builds");
        let client = client_for(&emu, cache);
        let before = emu.counters("openai").requests;
        let mut s = client_rt.block_on(measure(name, &client, rounds, segment));
        s.sent = emu.counters("openai").requests - before;
        let want = (rounds * segment * 2 + 1) as u64;
        assert_eq!(s.sent, want, "{name}: every miss and bypass sent, no hit");
        assert_eq!(
            client.stats().cache.map(|c| c.hits),
            Some((rounds * segment) as u64),
            "{name}: every hit from the cache"
        );
        all.push(s);
    }
    let _ = std::fs::remove_dir_all(&dir);
    print_latency(&all, machine, rounds, segment);
}

fn client_for(emu: &Emulator, cache: Cache) -> Client {
    let base = emu.base_url("openai");
    let adapter =
        OpenAi::new(ProviderId::new("openai"), base.parse().expect("a URL")).with_chat_model(MODEL);
    Client::builder()
        .provider(
            Arc::new(adapter),
            ProviderSettings::new().credential(Credential::new(emu.key("openai"))),
        )
        .cache(cache)
        .build()
        .expect("the client builds")
}

async fn measure(name: &'static str, client: &Client, rounds: usize, segment: usize) -> Samples {
    // The answer the hits are served: asked (and kept) once; plus a warm-up of each path.
    let first = client.chat(repeated()).await.expect("the first answer");
    assert!(!first.origin.is_cache());
    let bypass = RequestOptions::new().cache(CacheMode::Bypass);
    let mut by_path: [Vec<f64>; 3] = Default::default();
    let mut n = 0;
    for round in 0..rounds {
        let mut order = Path3::ALL;
        if round % 2 == 1 {
            order.reverse();
        }
        for path in order {
            for _ in 0..segment {
                let started = common::wall();
                let answer = match path {
                    Path3::Hit => client.chat(repeated()).await,
                    Path3::Miss => {
                        n += 1;
                        client.chat(fresh(name, n)).await
                    }
                    Path3::Bypass => client.chat_with(repeated(), &bypass).await,
                }
                .expect("an answer");
                let us = started.elapsed().as_secs_f64() * 1e6;
                assert_eq!(
                    answer.origin.is_cache(),
                    path == Path3::Hit,
                    "{name} {path:?}"
                );
                by_path[path as usize].push(us);
            }
        }
    }
    Samples {
        backend: name,
        by_path,
        sent: 0,
    }
}

fn print_latency(all: &[Samples], machine: &common::Machine, rounds: usize, segment: usize) {
    println!(
        "\nlatency through Client::chat, concurrency 1, {rounds} rounds × {segment} requests per path"
    );
    let mut table = Table::new([
        "backend",
        "path",
        "requests",
        "p50 µs",
        "p99 µs",
        "mean µs",
        "p50 / miss p50",
    ]);
    let mut rows = Vec::new();
    for s in all {
        let miss_p50 = median(&s.by_path[Path3::Miss as usize]);
        for path in Path3::ALL {
            let v = &s.by_path[path as usize];
            let (p50, p99) = (median(v), percentile(v, 99.0));
            let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
            table.row([
                s.backend.to_owned(),
                path.name().to_owned(),
                v.len().to_string(),
                f(p50, 1),
                f(p99, 1),
                f(mean, 1),
                f(p50 / miss_p50, 3),
            ]);
            rows.push(
                json!({"backend": s.backend, "path": path.name(), "requests": v.len(),
                "p50_us": p50, "p99_us": p99, "mean_us": mean, "p50_over_miss": p50 / miss_p50}),
            );
        }
        println!("{}: {} requests reached the emulator", s.backend, s.sent);
    }
    table.print();
    common::record(
        "cache",
        machine,
        json!({"part": "latency", "rounds": rounds, "segment": segment, "rows": rows}),
    );
}

// ------------------------------------------------------------------------------ rerun

/// The `llm-failover` command, built in this bench's profile by the cargo that built the
/// bench.
fn batch_bin() -> PathBuf {
    let profile = if cfg!(debug_assertions) {
        "dev"
    } else {
        "bench"
    };
    examples::build_cli(Some(profile))
}

/// One process of the demo batch: its wall time, and its summary.
struct Batch {
    wall: Duration,
    summary: Value,
}

fn run_batch(bin: &Path, dir: &Path, output: &str, extra: &[&str]) -> Batch {
    let summary = dir.join(format!("{output}.summary.json"));
    let mut command = Command::new(bin);
    command
        .current_dir(dir)
        .args([
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/providers.toml"),
        ])
        .args([
            "--env",
            "demo",
            "--cache",
            "sqlite:answers.sqlite",
            "--output",
            output,
        ])
        .arg("--summary-json")
        .arg(&summary)
        .args(extra)
        .env_remove("RUST_LOG")
        .env_remove("LLM_FAILOVER_REDIS_URL")
        .env("NO_COLOR", "1");
    let started = common::wall();
    let out = examples::output_within(command, Duration::from_secs(300), "the demo batch");
    let wall = started.elapsed();
    assert!(
        out.status.success(),
        "the demo batch failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&summary).expect("the summary JSON");
    Batch {
        wall,
        summary: serde_json::from_str(&text).expect("the summary parses"),
    }
}

fn rerun_part(machine: &common::Machine) {
    let runs = common::env_or("B8_RUNS", RUNS);
    let bin = batch_bin();
    let labels = ["cold", "warm (queue)", "warm (--no-queue)"];
    let mut walls: [Vec<f64>; 3] = Default::default();
    let mut table = Table::new([
        "run",
        "wall s",
        "requests",
        "ok",
        "cache hits",
        "tokens saved",
    ]);
    let mut rows = Vec::new();
    for run in 0..runs {
        let dir =
            std::env::temp_dir().join(format!("llm-failover-b8-rerun-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let batches = [
            run_batch(&bin, &dir, "cold.jsonl", &[]),
            run_batch(&bin, &dir, "warm.jsonl", &[]),
            run_batch(&bin, &dir, "warm-file.jsonl", &["--no-queue"]),
        ];
        for (i, b) in batches.iter().enumerate() {
            let s = &b.summary;
            let cache = &s["cache"];
            if i > 0 {
                assert_eq!(
                    s["requests"], 0,
                    "{}: a warm rerun sends nothing: {s}",
                    labels[i]
                );
            }
            walls[i].push(b.wall.as_secs_f64());
            table.row([
                format!("{} {}", labels[i], run + 1),
                f(b.wall.as_secs_f64(), 2),
                s["requests"].to_string(),
                s["items"]["ok"].to_string(),
                cache["hits"].to_string(),
                cache["tokens_saved"].to_string(),
            ]);
            rows.push(
                json!({"run": run, "label": labels[i], "wall_s": b.wall.as_secs_f64(),
                "requests": s["requests"], "ok": s["items"]["ok"], "cache": cache}),
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    println!(
        "\nthe demo batch (examples/prompts.jsonl, 213 lines), cold then rerun on the warm cache"
    );
    table.print();
    let cold = median(&walls[0]);
    for (label, w) in labels.iter().zip(&walls).skip(1) {
        let m = median(w);
        println!(
            "{label}: median {} s, {} of the cold run's {} s",
            f(m, 2),
            f(m / cold, 3),
            f(cold, 2)
        );
    }
    common::record("cache", machine, json!({"part": "rerun", "runs": rows}));
}
