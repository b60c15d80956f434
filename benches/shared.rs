//! B6 — one quota, four processes: limits shared through Redis.
//!
//! Part 1, the fleet. Four OS processes of the `llm-failover` command (crate `cli/`, built
//! here in this profile) each run a quarter of the items against one OpenAI-format provider of the
//! emulator, which enforces RPM `B6_RPM` per "minute" of `B6_MINUTE_MS` (the binding limit;
//! TPM is far away). Nothing is configured: every limit is learned from the emulator's
//! headers. Two contenders, interleaved in the same run (ABBA over runs), each against a fresh
//! emulator (full buckets):
//!
//! - **Redis**, three ways: a fresh `redis-server` on loopback; the same speaking TLS only
//!   (`--tls-port`, a certificate made for the run, the processes given its CA); a Redis
//!   Cluster of three primaries (`redis-cli --cluster create`), so that the four share one
//!   view of the quota (`[shared]` in their `providers.toml`);
//! - **memory**: without it, each process paces from its own memory (and the headers of its
//!   own answers).
//!
//! Figures come from the emulator's request log: the rate achieved as % of the binding limit
//! (whole run: successes against what the server could admit over the run, the full bucket at
//! the start included; steady: from the end of the first window to the last success), the
//! share of requests answered 429, the wall time and the items that ended ok. For Redis also
//! the script calls per request (`INFO commandstats`, summed over a cluster's nodes) and, on
//! the plain one, which operations they were (`redis-cli MONITOR`, the operation is the
//! script's first argument).
//!
//! Part 2, the cost per admission. One reservation (`LimiterStore::reserve`) plus the `raise`
//! of its answer's report with the token reconciliation (as the client tells every answer:
//! held back by a shared store, it travels with the next reservation) in a loop on one key the
//! provider's report has taught, through the in-memory store and through each of the three
//! Redis set-ups on loopback, at concurrency 1 and 64, interleaved in segments of
//! `B6_SEGMENT_MS` (the order rotating), medians reported. Admissions per second, µs per
//! admission, µs added by Redis, the script calls per admission and the µs Redis spent
//! running each (`INFO commandstats`).
//!
//! ```sh
//! cargo bench --bench shared                  # two fleet runs (ABBA) and the store costs
//! B6_RUNS=4 cargo bench --bench shared        # more fleet runs
//! B6_ONLY=store cargo bench --bench shared    # one part only (fleet | store)
//! ```
//!
//! Needs `redis-server` and `redis-cli` (Debian: `apt-get install redis-server`), built with TLS
//! (Debian's are).

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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use common::{Table, f};
use llm_failover::ProviderId;
use llm_failover::clock::{Clock, TokioClock};
use llm_failover::ratelimit::{
    Demand, LimitKey, LimitReport, LimiterStore, Limits, MemoryStore, Per, RedisTls, Reservation,
    SharedSettings, Tightening, Window,
};
use llm_failover::redis::RedisStore;
use llm_failover_emulator::{Emulator, EmulatorConfig, LogEntry, ProviderConfig};
use redis_server::{RedisCluster, RedisServer};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::time::Instant;

/// Worker processes.
const WORKERS: usize = 4;
/// The emulator's "minute".
const MINUTE_MS: u64 = 6_000;
/// Requests per "minute": the binding limit (100 a second).
const RPM: u64 = 600;
/// Tokens per "minute": far from binding (an item costs about 20).
const TPM: u64 = 100_000_000;
/// Items, in windows of RPM (the first window is the full bucket).
const WINDOWS: f64 = 4.0;
/// The emulator's answer time: this plus up to `LATENCY_JITTER_MS`.
const LATENCY_MS: u64 = 100;
const LATENCY_JITTER_MS: u64 = 100;
/// Fleet runs; each runs both contenders, the order alternating (ABBA).
const RUNS: usize = 2;
/// Longest a contender may run before its workers are killed and it is reported cut short.
const MAX_WALL_S: u64 = 180;
/// Store costs: segments per store and concurrency, and their length.
const ROUNDS: usize = 9;
const SEGMENT_MS: u64 = 700;

const PROVIDER: &str = "openai";
const KEY_VAR: &str = "B6_EMULATOR_KEY";

#[derive(Clone, Debug)]
struct Knobs {
    minute_ms: u64,
    rpm: u64,
    tpm: u64,
    windows: f64,
    runs: usize,
    max_wall: Duration,
    rounds: usize,
    segment: Duration,
    only: String,
}

impl Knobs {
    fn from_env() -> Self {
        Knobs {
            minute_ms: common::env_or("B6_MINUTE_MS", MINUTE_MS),
            rpm: common::env_or("B6_RPM", RPM),
            tpm: common::env_or("B6_TPM", TPM),
            windows: common::env_or("B6_WINDOWS", WINDOWS),
            runs: common::env_or("B6_RUNS", RUNS),
            max_wall: Duration::from_secs(common::env_or("B6_MAX_WALL_S", MAX_WALL_S)),
            rounds: common::env_or("B6_ROUNDS", ROUNDS),
            segment: Duration::from_millis(common::env_or("B6_SEGMENT_MS", SEGMENT_MS)),
            only: std::env::var("B6_ONLY").unwrap_or_default(),
        }
    }

    fn items(&self) -> usize {
        (self.windows * self.rpm as f64).round() as usize
    }
}

fn main() {
    let knobs = Knobs::from_env();
    let machine = common::machine();
    machine.print("shared (B6)");
    if knobs.only.is_empty() || knobs.only == "fleet" {
        fleet_part(&knobs, &machine);
    }
    if knobs.only.is_empty() || knobs.only == "store" {
        store_part(&knobs, &machine);
    }
}

// ------------------------------------------------------------------------------ the fleet

/// Where the shared limits live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
enum Redis {
    /// One `redis-server`.
    Plain,
    /// One `redis-server` speaking TLS only.
    Tls,
    /// A Redis Cluster of three primaries.
    Cluster,
}

impl Redis {
    const ALL: [Redis; 3] = [Redis::Plain, Redis::Tls, Redis::Cluster];

    fn name(self) -> &'static str {
        match self {
            Redis::Plain => "Redis",
            Redis::Tls => "Redis over TLS",
            Redis::Cluster => "Redis Cluster (3 primaries)",
        }
    }
}

/// A running Redis of one kind, with what a client and `redis-cli` need to reach it.
struct Backend {
    kind: Redis,
    /// The one server, or the cluster's nodes (the first is the seed).
    nodes: Vec<RedisServer>,
    /// The certificates of the TLS one.
    certs: Option<certs::Certs>,
}

impl Backend {
    fn start(kind: Redis, dir: &Path) -> Backend {
        let (nodes, certs) = match kind {
            Redis::Plain => (vec![RedisServer::start()], None),
            Redis::Tls => {
                let certs = certs::Certs::make(&dir.join("certs"));
                (vec![RedisServer::with_tls(&certs, false)], Some(certs))
            }
            Redis::Cluster => (RedisCluster::start().nodes, None),
        };
        Backend { kind, nodes, certs }
    }

    fn url(&self) -> String {
        self.nodes[0].url()
    }

    /// The store's settings in code.
    fn settings(&self, prefix: String) -> SharedSettings {
        // A generous timeout: the loop measures the calls, not the down mode (a first connect
        // on a loaded machine, a TLS handshake or a cluster's slots under 64 tasks, can take
        // longer than the default 250 ms, and the store would then rest for a second).
        let mut s = SharedSettings::new(self.url())
            .prefix(prefix)
            .cluster(self.kind == Redis::Cluster)
            .timeout(Duration::from_secs(2));
        if let Some(c) = &self.certs {
            s = s.tls(RedisTls::new().ca_file(&c.ca));
        }
        s
    }

    /// The same as `providers.toml`'s `[shared]`.
    fn toml(&self) -> String {
        let mut t = format!("\n[shared]\nredis_url = \"{}\"\n", self.url());
        if self.kind == Redis::Cluster {
            t.push_str("cluster = true\n");
        }
        if let Some(c) = &self.certs {
            t.push_str(&format!("tls_ca_file = \"{}\"\n", c.ca.display()));
        }
        t
    }

    /// `redis-cli`'s arguments for each node.
    fn cli(&self) -> Vec<Vec<String>> {
        self.nodes
            .iter()
            .map(|n| {
                let mut args = vec!["-p".to_owned(), n.port().to_string()];
                if let Some(c) = &self.certs {
                    args.extend(["--tls".to_owned(), "--cacert".to_owned()]);
                    args.push(c.ca.display().to_string());
                }
                args
            })
            .collect()
    }

    /// The script calls run and the µs spent in them, summed over the nodes.
    fn script_stats(&self) -> (u64, u64) {
        self.cli()
            .iter()
            .map(|args| script_stats(args))
            .fold((0, 0), |(c, u), (c2, u2)| (c + c2, u + u2))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Contender {
    Shared(Redis),
    Memory,
}

impl Contender {
    const ALL: [Contender; 4] = [
        Contender::Shared(Redis::Plain),
        Contender::Shared(Redis::Tls),
        Contender::Shared(Redis::Cluster),
        Contender::Memory,
    ];

    fn name(self) -> &'static str {
        match self {
            Contender::Shared(Redis::Plain) => "4 processes, Redis",
            Contender::Shared(Redis::Tls) => "4 processes, Redis over TLS",
            Contender::Shared(Redis::Cluster) => "4 processes, Redis Cluster (3 primaries)",
            Contender::Memory => "4 processes, each its own memory",
        }
    }
}

#[derive(Clone, Debug, Serialize)]
struct Fleet {
    contender: &'static str,
    items: usize,
    ok: usize,
    cut_short: bool,
    requests: u64,
    rate_limited: u64,
    rate_limited_pct: f64,
    /// Successes as % of what the server could admit from the first request to the last
    /// success (the full bucket plus the refill).
    whole_pct: f64,
    /// Successes per second after the first window, % of the binding rate.
    steady_pct: f64,
    /// From the first request to the last success.
    span_s: f64,
    wall_s: f64,
    /// Script calls per request (Redis only).
    calls_per_request: f64,
    /// Redis commands seen by MONITOR, by command (and script operation).
    commands: BTreeMap<String, u64>,
}

fn fleet_part(k: &Knobs, machine: &common::Machine) {
    let items = k.items();
    println!(
        "\nfleet: {WORKERS} processes of the llm-failover command, {items} items in all; RPM {} per {} ms \
         \"minute\" (binding: {:.0}/s), TPM {}; latency {LATENCY_MS}-{} ms; limits learned from \
         headers; {} runs (ABBA)",
        k.rpm,
        k.minute_ms,
        k.rpm as f64 * 1000.0 / k.minute_ms as f64,
        k.tpm,
        LATENCY_MS + LATENCY_JITTER_MS,
        k.runs
    );
    let bin = batch_bin();
    let rt = common::runtime("emu", 1);
    let mut all: Vec<(Contender, Fleet)> = Vec::new();
    for run in 0..k.runs {
        // ABBA over the four: forward, then backward.
        let mut order = Contender::ALL;
        if run % 2 == 1 {
            order.reverse();
        }
        let mut figures = Vec::new();
        for c in order {
            let fig = run_fleet(c, k, &bin, &rt);
            figures.push((c, fig));
        }
        figures.sort_by_key(|(c, _)| *c);
        println!("\nrun {}/{}:", run + 1, k.runs);
        print_fleets(&figures, k);
        common::record(
            "shared",
            machine,
            json!({"part": "fleet", "run": run + 1, "knobs": format!("{k:?}"),
                   "figures": figures.iter().map(|(_, f)| f).collect::<Vec<_>>()}),
        );
        all.extend(figures);
    }
}

fn print_fleets(figs: &[(Contender, Fleet)], k: &Knobs) {
    let mut t = Table::new([
        "contender",
        "ok/items",
        "rate, whole run, % of limit",
        "steady % of limit",
        "requests",
        "429s",
        "429 %",
        "first request to last ok, s",
        "wall s",
        "script calls/request",
    ]);
    for (c, x) in figs {
        t.row([
            c.name().to_owned(),
            format!(
                "{}/{}{}",
                x.ok,
                x.items,
                if x.cut_short { " CUT" } else { "" }
            ),
            f(x.whole_pct, 1),
            f(x.steady_pct, 1),
            x.requests.to_string(),
            x.rate_limited.to_string(),
            f(x.rate_limited_pct, 2),
            f(x.span_s, 1),
            f(x.wall_s, 1),
            f(x.calls_per_request, 2),
        ]);
    }
    t.print();
    for (c, x) in figs {
        if !x.commands.is_empty() {
            let per: Vec<String> = x
                .commands
                .iter()
                .map(|(cmd, n)| format!("{cmd} {n} ({:.2}/request)", *n as f64 / x.requests as f64))
                .collect();
            println!("{}: Redis commands (MONITOR): {}", c.name(), per.join(", "));
        }
    }
    let _ = k;
}

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

fn run_fleet(c: Contender, k: &Knobs, bin: &Path, rt: &tokio::runtime::Runtime) -> Fleet {
    let mut cfg = EmulatorConfig::default();
    cfg.log_capacity = 1 << 20;
    let emu = rt
        .block_on(
            Emulator::builder()
                .config(cfg)
                .minute_ms(k.minute_ms)
                .provider(
                    ProviderConfig::openai(PROVIDER)
                        .with_limits(llm_failover_emulator::Limits::per_minute(k.rpm, k.tpm))
                        .with_latency(LATENCY_MS, LATENCY_JITTER_MS),
                )
                .start(),
        )
        .expect("the emulator starts");
    let dir = std::env::temp_dir().join(format!("llm-failover-b6-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let redis = match c {
        Contender::Shared(kind) => Some(Backend::start(kind, &dir)),
        Contender::Memory => None,
    };
    let config = dir.join("providers.toml");
    std::fs::write(
        &config,
        format!(
            "default_environment = \"b6\"\n\n[environments.b6]\nchat = [\"{PROVIDER}\"]\n\n\
             [providers.{PROVIDER}]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"gpt-4o-mini\"\n\
             api_key_env = {{ b6 = \"{KEY_VAR}\" }}\n{}",
            emu.base_url(PROVIDER),
            redis.as_ref().map(Backend::toml).unwrap_or_default()
        ),
    )
    .expect("providers.toml written");
    let items = k.items();
    let per = items.div_ceil(WORKERS);
    let mut outputs = Vec::new();
    for w in 0..WORKERS {
        let lines: Vec<String> = (w * per..((w + 1) * per).min(items))
            .map(|i| {
                json!({"id": format!("i{i:06}"), "prompt": format!("Item {i}: say something short."),
                       "max_tokens": 8})
                .to_string()
            })
            .collect();
        std::fs::write(dir.join(format!("in-{w}.jsonl")), lines.join("\n") + "\n")
            .expect("input written");
        outputs.push(dir.join(format!("out-{w}.jsonl")));
    }
    // Which operations: MONITOR on the plain one (the others run the same script).
    let monitor = redis
        .as_ref()
        .filter(|r| r.kind == Redis::Plain)
        .map(|r| Monitor::start(&r.cli()[0]));
    let before = redis.as_ref().map_or(0, |r| r.script_stats().0);
    let wall0 = common::wall();
    let (tx, rx) = mpsc::channel();
    let mut pids = Vec::new();
    for (w, output) in outputs.iter().enumerate() {
        let mut cmd = Command::new(bin);
        cmd.arg("--config")
            .arg(&config)
            .args(["--env", "b6", "--input"])
            .arg(dir.join(format!("in-{w}.jsonl")))
            .arg("--output")
            .arg(output)
            .current_dir(&dir)
            .env_remove("RUST_LOG")
            .env_remove("LLM_FAILOVER_ENV")
            .env("NO_COLOR", "1")
            .env(KEY_VAR, emu.key(PROVIDER))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                std::fs::File::create(dir.join(format!("err-{w}.txt"))).expect("a stderr file"),
            );
        cmd.env_remove("LLM_FAILOVER_REDIS_URL");
        let mut child: Child = cmd.spawn().expect("the llm-failover command starts");
        pids.push(child.id());
        let tx = tx.clone();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait().ok().and_then(|s| s.code()));
        });
    }
    drop(tx);
    let mut cut_short = false;
    for _ in 0..WORKERS {
        let left = k.max_wall.saturating_sub(wall0.elapsed());
        match rx.recv_timeout(left) {
            Ok(Some(0)) => {}
            Ok(code) => {
                eprintln!("{}: a worker exited with {code:?}", c.name());
            }
            Err(_) => {
                cut_short = true;
                for pid in &pids {
                    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
                }
                break;
            }
        }
    }
    let wall = wall0.elapsed();
    let calls = redis.as_ref().map_or(0, |r| r.script_stats().0) - before;
    let commands = monitor.map(Monitor::stop).unwrap_or_default();
    let mut ok = 0;
    for (w, output) in outputs.iter().enumerate() {
        let text = std::fs::read_to_string(output).unwrap_or_default();
        ok += text
            .lines()
            .filter(|l| serde_json::from_str::<Value>(l).is_ok_and(|v| v["ok"] == true))
            .count();
        let err = std::fs::read_to_string(dir.join(format!("err-{w}.txt"))).unwrap_or_default();
        if err.contains("panicked") || err.contains("error:") {
            eprintln!("{} worker {w}:\n{err}", c.name());
        }
    }
    let counters = emu.counters(PROVIDER);
    let log = emu.log();
    rt.block_on(emu.shutdown());
    let _ = std::fs::remove_dir_all(&dir);
    fleet_figures(
        c, k, items, ok, cut_short, &log, wall, calls, commands, counters,
    )
}

#[allow(clippy::too_many_arguments)]
fn fleet_figures(
    c: Contender,
    k: &Knobs,
    items: usize,
    ok: usize,
    cut_short: bool,
    log: &[LogEntry],
    wall: Duration,
    calls: u64,
    commands: BTreeMap<String, u64>,
    counters: llm_failover_emulator::Counters,
) -> Fleet {
    let first = log.iter().map(|e| e.at_ms).min().unwrap_or(0);
    let mut oks: Vec<u64> = log
        .iter()
        .filter(|e| e.status == Some(200))
        .map(|e| e.at_ms - first)
        .collect();
    oks.sort_unstable();
    let last = oks.last().copied().unwrap_or(0);
    let per_ms = k.rpm as f64 / k.minute_ms as f64;
    let admissible = k.rpm as f64 + per_ms * last as f64;
    let steady_n = oks.iter().filter(|&&t| t > k.minute_ms).count() as f64;
    let steady_ms = last.saturating_sub(k.minute_ms) as f64;
    let steady_pct = if steady_ms >= k.minute_ms as f64 / 2.0 {
        100.0 * steady_n / (per_ms * steady_ms)
    } else {
        f64::NAN
    };
    Fleet {
        contender: c.name(),
        items,
        ok,
        cut_short,
        requests: counters.requests,
        rate_limited: counters.rate_limited,
        rate_limited_pct: 100.0 * counters.rate_limited as f64 / counters.requests.max(1) as f64,
        whole_pct: 100.0 * oks.len() as f64 / admissible,
        steady_pct,
        span_s: last as f64 / 1000.0,
        wall_s: wall.as_secs_f64(),
        calls_per_request: if c != Contender::Memory {
            calls as f64 / counters.requests.max(1) as f64
        } else {
            f64::NAN
        },
        commands,
    }
}

/// The script calls a Redis node has run and the microseconds it spent in them, from
/// `redis-cli ARGS INFO commandstats` (`calls=…,usec=…`).
fn script_stats(args: &[String]) -> (u64, u64) {
    let out = Command::new("redis-cli")
        .args(args)
        .args(["INFO", "commandstats"])
        .output()
        .expect("redis-cli (apt-get install redis-server)");
    let field = |l: &str, name: &str| -> u64 {
        l.split(name)
            .nth(1)
            .and_then(|v| v.split(',').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .fold((0, 0), |(c, u), l| {
            (c + field(l, "calls="), u + field(l, "usec="))
        })
}

/// `redis-cli MONITOR` in a child, its lines tallied by command (and, for scripts, by the
/// operation, the script's first argument).
struct Monitor {
    child: Child,
    tally: std::thread::JoinHandle<BTreeMap<String, u64>>,
}

impl Monitor {
    fn start(args: &[String]) -> Monitor {
        let mut child = Command::new("redis-cli")
            .args(args)
            .arg("MONITOR")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-cli MONITOR");
        let out = child.stdout.take().expect("piped");
        // MONITOR answers OK once it is on: read that line before anything is measured.
        let (ready_tx, ready_rx) = mpsc::channel();
        let tally = std::thread::spawn(move || {
            use std::io::BufRead;
            let mut tally = BTreeMap::new();
            let mut lines = std::io::BufReader::new(out).lines();
            let _ = lines.next();
            let _ = ready_tx.send(());
            for line in lines.map_while(Result::ok) {
                // 1700000000.123456 [0 127.0.0.1:5555] "EVALSHA" "sha" "2" "k1" "k2" "reserve" …
                let quoted: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
                let Some(cmd) = quoted.first() else { continue };
                let cmd = cmd.to_ascii_uppercase();
                // Commands a script runs are shown as from `[0 lua]`: not round trips.
                let inside = line.contains(" lua]");
                let name = match cmd.as_str() {
                    "EVALSHA" | "EVAL" => {
                        let op = quoted.get(5).unwrap_or(&"?");
                        // A turn asked with a promise held, or fresh; reports carried along.
                        let held = if *op == "turn" && line.contains("\\\"turn\\\":") {
                            " (holding a promise)"
                        } else if *op == "turn" {
                            " (fresh)"
                        } else {
                            ""
                        };
                        format!("{cmd} {op}{held}")
                    }
                    _ if inside => format!("({cmd} in the script)"),
                    _ => cmd,
                };
                *tally.entry(name).or_insert(0) += 1;
            }
            tally
        });
        let _ = ready_rx.recv_timeout(Duration::from_secs(10));
        Monitor { child, tally }
    }

    fn stop(mut self) -> BTreeMap<String, u64> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.tally.join().unwrap_or_default()
    }
}

// -------------------------------------------------------------------- the cost per admission

#[derive(Clone, Debug, Serialize)]
struct StoreFigures {
    store: &'static str,
    concurrency: usize,
    per_s: f64,
    spread: (f64, f64),
    us: f64,
    /// Against the in-memory store in the same rounds.
    added_us: f64,
    ratio: f64,
    commands_per_admission: f64,
    /// Microseconds Redis spent running the script, per call (`INFO commandstats`).
    server_us_per_call: f64,
}

fn store_part(k: &Knobs, machine: &common::Machine) {
    println!(
        "\ncost per admission: reserve + the raise of its answer's report and token \
         reconciliation, one key, {} rounds of a {} ms segment per store and row (the order \
         rotating), medians (min-max)",
        k.rounds,
        k.segment.as_millis()
    );
    let dir = std::env::temp_dir().join(format!("llm-failover-b6s-{}", std::process::id()));
    let backends: Vec<Backend> = Redis::ALL
        .iter()
        .map(|&r| Backend::start(r, &dir))
        .collect();
    let rt = common::runtime("store", 2);
    // Every store in every round, so that each sees the same moments of the machine's load.
    let shapes = [1, 64];
    // Per shape, per store (memory first, then the backends): admissions/s of each round.
    let stores = 1 + backends.len();
    let mut per_s = vec![vec![Vec::new(); stores]; shapes.len()];
    let mut calls = vec![vec![0u64; stores]; shapes.len()];
    let mut admissions = vec![vec![0u64; stores]; shapes.len()];
    let mut server_us = vec![vec![0u64; stores]; shapes.len()];
    for round in 0..k.rounds {
        for (row, &concurrency) in shapes.iter().enumerate() {
            for turn in 0..stores {
                let i = (turn + round + row) % stores;
                let backend = i.checked_sub(1).map(|b| &backends[b]);
                let store: Arc<dyn LimiterStore> = match backend {
                    None => Arc::new(MemoryStore::new()),
                    Some(b) => Arc::new(
                        RedisStore::new(b.settings(format!("b6-{round}-{row}")))
                            .expect("a Redis URL"),
                    ),
                };
                let before = backend.map_or((0, 0), Backend::script_stats);
                let (n, secs) = rt.block_on(admissions_for(store, concurrency, k.segment));
                per_s[row][i].push(n as f64 / secs);
                if let Some(b) = backend {
                    let after = b.script_stats();
                    calls[row][i] += after.0 - before.0;
                    server_us[row][i] += after.1 - before.1;
                    admissions[row][i] += n;
                }
            }
        }
    }
    drop(backends);
    let _ = std::fs::remove_dir_all(&dir);
    let spread = |v: &[f64]| {
        (
            v.iter().copied().fold(f64::INFINITY, f64::min),
            v.iter().copied().fold(0.0, f64::max),
        )
    };
    let mut rows: Vec<StoreFigures> = Vec::new();
    for (row, &concurrency) in shapes.iter().enumerate() {
        let memory = common::median(&per_s[row][0]);
        for i in 0..stores {
            let m = common::median(&per_s[row][i]);
            rows.push(StoreFigures {
                store: if i == 0 {
                    "memory"
                } else {
                    Redis::ALL[i - 1].name()
                },
                concurrency,
                per_s: m,
                spread: spread(&per_s[row][i]),
                us: 1e6 / m,
                added_us: 1e6 / m - 1e6 / memory,
                ratio: m / memory,
                // The report that teaches the key travels with the first reservation.
                commands_per_admission: calls[row][i] as f64 / admissions[row][i].max(1) as f64,
                server_us_per_call: server_us[row][i] as f64 / calls[row][i].max(1) as f64,
            });
        }
    }
    let mut t = Table::new([
        "store",
        "concurrency",
        "admissions/s",
        "/ memory",
        "µs per admission",
        "µs added",
        "script calls per admission",
        "µs in Redis per call",
    ]);
    for x in &rows {
        let redis = x.store != "memory";
        t.row([
            x.store.to_owned(),
            x.concurrency.to_string(),
            format!(
                "{} ({}-{})",
                f(x.per_s, 0),
                f(x.spread.0, 0),
                f(x.spread.1, 0)
            ),
            f(x.ratio, 4),
            f(x.us, 2),
            if redis {
                f(x.added_us, 1)
            } else {
                "-".to_owned()
            },
            if redis {
                f(x.commands_per_admission, 2)
            } else {
                "-".to_owned()
            },
            if redis {
                f(x.server_us_per_call, 1)
            } else {
                "-".to_owned()
            },
        ]);
    }
    t.print();
    common::record(
        "shared",
        machine,
        json!({"part": "store", "knobs": format!("{k:?}"), "figures": rows}),
    );
}

/// What the provider's answer states: limits far above what the loop reaches.
fn report(now: Instant) -> LimitReport {
    let window = |limit: u64| Window {
        limit: Some(limit),
        remaining: Some(limit - 1),
        reset_at: Some(now + Duration::from_millis(1)),
        per: Per::Minute,
    };
    let mut r = LimitReport::default();
    r.requests = Some(window(1_000_000_000));
    r.tokens = Some(window(1_000_000_000_000));
    r
}

/// `concurrency` tasks admitting on one key for `segment`: admissions made, seconds taken.
async fn admissions_for(
    store: Arc<dyn LimiterStore>,
    concurrency: usize,
    segment: Duration,
) -> (u64, f64) {
    let key = LimitKey::new(ProviderId::new("openai"), "gpt-4o-mini");
    let limits = Limits::none();
    let cost = Demand {
        input_tokens: 30,
        output_tokens: 8,
        ..Demand::one_request()
    };
    // The key as the client knows it after a first answer.
    let mut first = Tightening::default();
    first.report = Some(report(Instant::now()));
    store
        .raise(&key, first, Instant::now())
        .await
        .expect("the store answers");
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let start = common::wall();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (store, key, stop, done, errors) = (
            store.clone(),
            key.clone(),
            stop.clone(),
            done.clone(),
            errors.clone(),
        );
        tasks.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let now = Instant::now();
                let booking = match store
                    .reserve(&key, &limits, cost, Duration::from_secs(60), now)
                    .await
                {
                    Ok(Reservation::Granted { booking, wait, .. }) if wait.is_zero() => booking,
                    other => {
                        errors.lock().expect("errors").push(format!("{other:?}"));
                        return;
                    }
                };
                // The answer's report, and its usage: 5 of the 8 output tokens booked, 3 go
                // back (told together, as the client does).
                let mut answer = Tightening::default();
                answer.report = Some(report(now));
                answer.booking = Some(booking);
                answer.tokens_back = 3;
                if let Err(e) = store.raise(&key, answer, Instant::now()).await {
                    errors.lock().expect("errors").push(e.to_string());
                    return;
                }
                done.fetch_add(1, Ordering::Relaxed);
                // The in-memory store never waits: without this its tasks would keep both
                // worker threads and the segment's timer would never fire.
                tokio::task::yield_now().await;
            }
        });
    }
    TokioClock.sleep_until(TokioClock.now() + segment).await;
    stop.store(true, Ordering::Relaxed);
    while tasks.join_next().await.is_some() {}
    let secs = start.elapsed().as_secs_f64();
    let errors = errors.lock().expect("errors");
    assert!(errors.is_empty(), "admissions failed: {:?}", &errors[..]);
    (done.load(Ordering::Relaxed), secs)
}
