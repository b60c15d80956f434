//! A budget shared by many processes through Redis (issue 31's race): eight OS processes of
//! the `llm-failover` command, each sending its own prompts as fast as it can against the
//! emulator (which reports usage), spend from one environment budget of $1.00. The
//! reservation is booked in the same Redis script call as the limits: reserve-then-settle,
//! never check-then-increment, so together they never spend more than the budget (plus at
//! most one estimate per request in flight), and they stop within a second of its running
//! out: each ends with its items snoozed to the budget's reset, not failed, and its summary
//! says why.
#![cfg(unix)]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::PoisonError;
use std::time::Duration;

use llm_failover_emulator::{Emulator, EmulatorConfig, Limits, ProviderConfig};
use serde_json::{Value, json};

use crate::support::examples::{FLEETS, Served, TempDir, batch_bin, still_ours};
use crate::support::redis::RedisServer;

/// Processes sharing the budget.
const PROCESSES: usize = 8;
/// Items per process: together about twice what the budget pays for.
const ITEMS: usize = 500;
/// The budget, in nano-dollars ($1.00).
const BUDGET: u64 = 1_000_000_000;
/// $5 and $10 per million tokens: nano-dollars per input and output token.
const PER_TOKEN: (u64, u64) = (5_000, 10_000);
/// Each prompt's reserved output (the emulator answers 8 to 47 words).
const MAX_TOKENS: u64 = 64;
/// Requests each process has in flight at most (the command's default concurrency).
const IN_FLIGHT: u64 = 16;
const PROVIDER: &str = "openai";
const KEY_VAR: &str = "BUDGET_SHARED_EMU_KEY";
const KEY: &str = "sk-budget-shared-7a6b5c4d3e2f";
/// The longest the processes may run before they are killed and the test fails.
const CHILD_LIMIT: Duration = Duration::from_secs(120);

fn config(dir: &TempDir, base_url: &str) -> PathBuf {
    let path = dir.path("providers.toml");
    let toml = format!(
        r#"default_environment = "race"

[environments.race]
chat = ["{PROVIDER}"]
budget = {{ usd_per_day = 1.0 }}

[providers.{PROVIDER}]
kind = "openai"
base_url = "{base_url}"
model = "gpt-4o-mini"
api_key_env = {{ race = "{KEY_VAR}" }}
prices = {{ "gpt-4o-mini" = {{ input = 5.0, output = 10.0 }} }}
"#
    );
    std::fs::write(&path, toml).unwrap();
    path
}

/// Characters between two processes' prompts: the emulator counts a token per four, so its
/// log tells the processes apart by their input tokens.
const APART: usize = 40;

fn prompt(p: usize, i: usize) -> String {
    format!(
        "Budget race p{p}-{i:04}: name a colour.{}",
        " ".repeat(APART * p)
    )
}

fn input(dir: &TempDir, p: usize) -> PathBuf {
    let lines: Vec<String> = (0..ITEMS)
        .map(|i| {
            json!({
                "id": format!("p{p}-{i:04}"),
                "prompt": prompt(p, i),
                "max_tokens": MAX_TOKENS,
            })
            .to_string()
        })
        .collect();
    let path = dir.path(&format!("in-{p}.jsonl"));
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

/// Now, to bound how long the children may run (no logic waits on it).
#[expect(
    clippy::disallowed_methods,
    reason = "a bound on child processes' run time"
)]
fn started_now() -> std::time::Instant {
    std::time::Instant::now()
}

#[test]
fn eight_processes_never_spend_more_than_the_budget_they_share_through_redis() {
    let _one = FLEETS.lock().unwrap_or_else(PoisonError::into_inner);
    let redis = RedisServer::start();
    let mut cfg = EmulatorConfig::default();
    cfg.log_capacity = 1 << 16;
    let served = Served::start(
        Emulator::builder().config(cfg).provider(
            ProviderConfig::openai(PROVIDER)
                .with_key(KEY)
                .with_limits(Limits::per_minute(1_000_000, 1_000_000_000))
                .with_latency(50, 0),
        ),
    );
    let emu = &served.emu;
    let dir = TempDir::new("budget-shared", "race");
    let config = config(&dir, &emu.base_url(PROVIDER));

    let bin = batch_bin();
    let started = started_now();
    let mut children = Vec::new();
    for p in 0..PROCESSES {
        let child = Command::new(bin)
            .arg("--config")
            .arg(&config)
            .args(["--env", "race", "--input"])
            .arg(input(&dir, p))
            .arg("--output")
            .arg(dir.path(&format!("out-{p}.jsonl")))
            .arg("--summary-json")
            .arg(dir.path(&format!("summary-{p}.json")))
            .current_dir(dir.root())
            .env("LLM_FAILOVER_REDIS_URL", redis.url())
            .env(KEY_VAR, KEY)
            .env_remove("RUST_LOG")
            .env_remove("LLM_FAILOVER_ENV")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the llm-failover command starts");
        children.push(child);
    }
    // Each child is waited for on a thread of its own; the test waits for their exits, and
    // kills those still running at the limit (then fails).
    let (tx, rx) = std::sync::mpsc::channel();
    let pids: Vec<u32> = children.iter().map(std::process::Child::id).collect();
    for (p, child) in children.into_iter().enumerate() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let _ = tx.send((p, child.wait_with_output()));
        });
    }
    let mut exited = vec![false; PROCESSES];
    for _ in 0..PROCESSES {
        let left = CHILD_LIMIT.saturating_sub(started.elapsed());
        let Ok((p, out)) = rx.recv_timeout(left) else {
            for (pid, done) in pids.iter().zip(&exited) {
                if !done && still_ours(*pid, bin.as_os_str()) {
                    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
                }
            }
            panic!("the processes did not all end within {CHILD_LIMIT:?}");
        };
        exited[p] = true;
        let out = out.unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!stderr.contains(KEY), "the key was printed: {stderr}");
        assert!(!stderr.contains("panicked"), "process {p}: {stderr}");
        assert_eq!(
            out.status.code(),
            Some(75),
            "process {p} ends 75, its items left for the budget's reset: {stderr}"
        );
        assert!(stderr.contains("budget spent"), "process {p}: {stderr}");
    }

    // What the provider answered, at the prices: the money really spent.
    let log: Vec<_> = emu
        .log()
        .into_iter()
        .filter(|e| e.provider == PROVIDER)
        .collect();
    let answered: Vec<_> = log.iter().filter(|e| e.status == Some(200)).collect();
    let spent: u64 = answered
        .iter()
        .map(|e| {
            let [i, o] = e.usage.expect("usage reported");
            i * PER_TOKEN.0 + o * PER_TOKEN.1
        })
        .sum();
    assert_eq!(
        answered.len(),
        log.len(),
        "every request answered: nothing but ok"
    );

    // Every process's results: answers only, none twice, their costs the provider's.
    let mut ids = BTreeSet::new();
    let mut lines_cost = 0;
    let mut spent_at = Vec::new();
    for p in 0..PROCESSES {
        let text = std::fs::read_to_string(dir.path(&format!("out-{p}.jsonl"))).unwrap_or_default();
        for l in text.lines() {
            let v: Value = serde_json::from_str(l).unwrap();
            assert_eq!(v["ok"], true, "no item failed for the budget: {l}");
            assert!(
                ids.insert(v["id"].as_str().unwrap().to_owned()),
                "twice: {l}"
            );
            lines_cost += (v["cost_usd"].as_f64().unwrap() * 1e9).round() as u64;
        }
        let summary: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path(&format!("summary-{p}.json"))).unwrap(),
        )
        .unwrap();
        let b = &summary["budget_spent"];
        assert!(
            b["message"]
                .as_str()
                .unwrap()
                .contains("environment `race`"),
            "{summary}"
        );
        assert!(b["items"].as_u64().unwrap() > 0, "{summary}");
        spent_at.push(b["at_unix_ms"].as_u64().unwrap());
    }
    assert_eq!(ids.len(), answered.len(), "each answer in one results line");
    assert_eq!(
        lines_cost, spent,
        "the results lines cost what the provider's usage did"
    );

    // The largest estimate: the longest prompt's tokenizer-free bound (a token per byte,
    // and a few for the message) and its reserved output.
    let longest = prompt(PROCESSES - 1, ITEMS - 1).len() as u64 + 16;
    let estimate = longest * PER_TOKEN.0 + MAX_TOKENS * PER_TOKEN.1;
    let allowed = BUDGET + PROCESSES as u64 * IN_FLIGHT * estimate;
    eprintln!(
        "{} requests answered, ${:.6} spent of the $1.00 budget (at most ${:.6} allowed), \
         the largest estimate ${:.6}",
        answered.len(),
        spent as f64 / 1e9,
        allowed as f64 / 1e9,
        estimate as f64 / 1e9
    );
    assert!(
        spent <= allowed,
        "{spent} nano-dollars spent, over {allowed}"
    );
    // Reserve-then-settle with an upper-bound estimate: not a nano-dollar over.
    assert!(spent <= BUDGET, "{spent} nano-dollars spent of {BUDGET}");
    // And the budget was used, not starved: what is left is what estimates held back.
    assert!(spent >= BUDGET / 2, "only {spent} of {BUDGET} spent");
    assert!(
        answered.len() < PROCESSES * ITEMS,
        "the budget stopped them"
    );

    // They stopped within a second of the budget's running out. A process learns it has
    // run out when a reservation is refused: each sent nothing that reached the provider
    // more than a second after its first refusal (the emulator's log tells them apart by
    // their prompts' input tokens). Until a process is refused, the others' answers costing
    // less than their estimates give money back that it may spend: the run as a whole ends
    // a little after the first refusal anywhere (measured, printed).
    let last = log.iter().map(|e| e.unix_ms).max().unwrap();
    let first_refusal = spent_at.iter().min().copied().unwrap();
    eprintln!(
        "the last request came {} ms after the first refusal anywhere",
        last as i64 - first_refusal as i64
    );
    let base = answered.iter().map(|e| e.usage.unwrap()[0]).min().unwrap();
    let mut stops = Vec::new();
    for (p, at) in spent_at.iter().enumerate() {
        let own = |e: &llm_failover_emulator::LogEntry| {
            let tokens = e.usage.unwrap()[0] - base;
            (tokens + 5) / (APART as u64 / 4) == p as u64
        };
        if let Some(last) = answered.iter().filter(|e| own(e)).map(|e| e.unix_ms).max() {
            assert!(
                last <= at + 1_000,
                "process {p} sent {} ms after it found the budget spent",
                last - at
            );
            stops.push(last as i64 - *at as i64);
        }
    }
    eprintln!("each process's last request after its first refusal (ms): {stops:?}");
    // The budget's ledger is in Redis, beside the limits.
    let keys = Command::new("redis-cli")
        .args([
            "-p",
            &redis.port().to_string(),
            "--scan",
            "--pattern",
            "llm-failover:budget:*",
        ])
        .output()
        .unwrap();
    let keys = String::from_utf8_lossy(&keys.stdout);
    assert!(keys.contains("environment/race/day/"), "{keys}");
}
