//! Four OS processes of the `batch` example on one provider quota, shared through a real Redis
//! (`LLM_FAILOVER_REDIS_URL`): together they keep to the quota the emulator states (nothing is
//! configured, every limit is learned from its headers), a 429 seen by one stops all four until
//! the stated reset and then lets exactly one half-open probe through, and Redis killed and
//! restarted mid-run loses no item (fail closed: admission waits for Redis).
//!
//! The emulator and Redis run in the test process; the four workers are children, each on a
//! quarter of the input, with the emulator's key in its environment. A "minute" lasts
//! [`MINUTE_MS`], so a run is a few windows and about ten seconds. A child that runs past
//! [`CHILD_LIMIT`] is killed and fails its test; nothing here sleeps to wait for the logic
//! (the tests wait for the children's exits and for lines they print). One fleet runs at a
//! time (four processes each, on a shared two-core machine).
#![cfg(unix)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::PoisonError;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

use llm_failover_emulator::{
    Counters, Emulator, EmulatorConfig, Fault, Limits, LogEntry, ProviderConfig, RetryAfter,
};
use serde_json::{Value, json};

use crate::support::examples::{
    FLEETS, Served, TempDir, batch_bin, still_ours, write_one_provider_config,
};
use crate::support::redis::RedisServer;

/// Worker processes per fleet.
const WORKERS: usize = 4;
/// The emulator's "minute": a window lasts this long.
const MINUTE_MS: u64 = 2_000;
/// Requests per "minute" the emulator states and enforces: the binding limit (100/s).
const RPM: u64 = 200;
/// Tokens per "minute": far from binding (an item costs about 25).
const TPM: u64 = 1_000_000;
/// The emulator's answer time: fixed, so a probe's answer is at its arrival + this.
const LATENCY_MS: u64 = 40;
/// Items per worker in a full run: 4 × 200 = 800, a window's burst then three windows paced.
const ITEMS: usize = 200;
/// The longest a worker may run before it is killed and its test fails.
const CHILD_LIMIT: Duration = Duration::from_secs(120);
/// The provider's name in providers.toml and its prefix in the emulator.
const PROVIDER: &str = "openai";
/// The variable the workers read the emulator's key from, and the key (checked never printed).
const KEY_VAR: &str = "SHARED_PROCESSES_EMU_KEY";
const KEY: &str = "sk-shared-processes-0f9e8d7c6b5a";
/// A password in the Redis URL (Redis's default user has none, so any password works for it;
/// checked never printed).
const PASSWORD: &str = "pw-shared-processes-4b3a";
/// Every prompt starts with this (checked never printed).
const PROMPT: &str = "Shared-quota prompt";

/// A fresh directory for one fleet.
struct Dir(TempDir);

impl Dir {
    fn new(name: &str) -> Dir {
        Dir(TempDir::new("shared-processes", name))
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.path(name)
    }
}

/// The emulator (one OpenAI-style provider stating [`RPM`] and [`TPM`]) on its own runtime,
/// which serves it while the test thread waits for the workers.
struct Provider {
    served: Served,
}

impl Provider {
    fn start(script: Vec<Fault>) -> Provider {
        Provider::start_with(script, MINUTE_MS, RPM)
    }

    /// The provider stating `rpm` per "minute" of `minute_ms`.
    fn start_with(script: Vec<Fault>, minute_ms: u64, rpm: u64) -> Provider {
        let mut cfg = EmulatorConfig::default();
        cfg.log_capacity = 1 << 16;
        let served = Served::start(
            Emulator::builder()
                .config(cfg)
                .minute_ms(minute_ms)
                .provider(
                    ProviderConfig::openai(PROVIDER)
                        .with_key(KEY)
                        .with_limits(Limits::per_minute(rpm, TPM))
                        .with_latency(LATENCY_MS, 0),
                ),
        );
        if !script.is_empty() {
            served.emu.script(PROVIDER, script);
        }
        Provider { served }
    }

    fn counters(&self) -> Counters {
        self.served.emu.counters(PROVIDER)
    }

    /// The provider's counters, after checking it answered each of `items` once: none sent
    /// again after a success, none lost.
    fn answered_once(&self, items: usize) -> Counters {
        let c = self.counters();
        assert_eq!(c.ok, items as u64, "every item answered once: {c:?}");
        c
    }

    /// The provider's requests by arrival.
    fn log(&self) -> Vec<LogEntry> {
        let mut log: Vec<LogEntry> = self
            .served
            .emu
            .log()
            .into_iter()
            .filter(|e| e.provider == PROVIDER)
            .collect();
        log.sort_by_key(|e| e.at_ms);
        log
    }
}

/// providers.toml: one environment naming only the emulator's provider, no limits.
fn write_config(dir: &Dir, emu: &Emulator) -> PathBuf {
    let path = dir.path("providers.toml");
    let base = emu.base_url(PROVIDER).to_string();
    write_one_provider_config(&path, "shared", PROVIDER, &base, KEY_VAR);
    path
}

/// Tokens between two workers' prompts: the emulator's log tells the workers apart by the
/// tokens it charged (the prompt's estimate, plus up to `max_tokens` = 8 of output).
const TOKENS_APART: u64 = 25;

/// Worker `w`'s input: `items` prompts with ids `w{w}-{i}`, each [`TOKENS_APART`] × `w`
/// tokens longer than worker 0's.
fn write_input(dir: &Dir, w: usize, items: usize) -> (PathBuf, Vec<String>) {
    let ids: Vec<String> = (0..items).map(|i| format!("w{w}-{i:04}")).collect();
    let pad = "x".repeat(4 * TOKENS_APART as usize * w);
    let lines: Vec<String> = ids
        .iter()
        .map(|id| {
            let prompt = format!("{PROMPT} {id} {pad}");
            json!({"id": id, "prompt": prompt, "max_tokens": 8}).to_string()
        })
        .collect();
    let path = dir.path(&format!("in-{w}.jsonl"));
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    (path, ids)
}

/// What a worker says while it runs.
enum Event {
    Line(usize, String),
    Exit(usize, Option<i32>),
}

/// Four workers running.
struct Fleet {
    pids: Vec<u32>,
    events: Receiver<Event>,
    outputs: Vec<PathBuf>,
    summaries: Vec<PathBuf>,
    ids: Vec<Vec<String>>,
    stderr: Vec<String>,
    codes: Vec<Option<Option<i32>>>,
    /// When the workers were started: they are killed [`CHILD_LIMIT`] after it.
    started: std::time::Instant,
}

/// Now, to bound how long the workers may run (a worker printing progress forever must not
/// keep a test waiting).
#[expect(
    clippy::disallowed_methods,
    reason = "a bound on child processes' run time; no logic waits on it"
)]
fn started_now() -> std::time::Instant {
    std::time::Instant::now()
}

impl Fleet {
    fn start(dir: &Dir, emu: &Emulator, redis_url: &str, items: usize) -> Fleet {
        let config = write_config(dir, emu);
        Fleet::start_with(dir, &config, Some(redis_url), WORKERS, items)
    }

    /// `workers` workers on `config`, with `LLM_FAILOVER_REDIS_URL` set to `redis_url` (or
    /// unset: `config` has a `[shared]` table).
    fn start_with(
        dir: &Dir,
        config: &std::path::Path,
        redis_url: Option<&str>,
        workers: usize,
        items: usize,
    ) -> Fleet {
        let bin = batch_bin(); // built before the clock starts
        let (tx, events) = mpsc::channel();
        let mut fleet = Fleet {
            pids: Vec::new(),
            events,
            outputs: Vec::new(),
            summaries: Vec::new(),
            ids: Vec::new(),
            stderr: vec![String::new(); workers],
            codes: vec![None; workers],
            started: started_now(),
        };
        for w in 0..workers {
            let (input, ids) = write_input(dir, w, items);
            let output = dir.path(&format!("out-{w}.jsonl"));
            let summary = dir.path(&format!("summary-{w}.json"));
            let mut cmd = Command::new(bin);
            match redis_url {
                Some(url) => cmd.env("LLM_FAILOVER_REDIS_URL", url),
                None => cmd.env_remove("LLM_FAILOVER_REDIS_URL"),
            };
            let mut child = cmd
                .arg("--config")
                .arg(config)
                .args(["--env", "shared", "--input"])
                .arg(&input)
                .arg("--output")
                .arg(&output)
                .arg("--summary-json")
                .arg(&summary)
                .current_dir(dir.0.root())
                .env_remove("RUST_LOG")
                .env_remove("LLM_FAILOVER_ENV")
                .env("NO_COLOR", "1")
                .env(KEY_VAR, KEY)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("the batch example starts");
            fleet.pids.push(child.id());
            let stderr = child.stderr.take().expect("piped");
            let lines: Sender<Event> = tx.clone();
            std::thread::spawn(move || {
                use std::io::BufRead;
                for line in std::io::BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if lines.send(Event::Line(w, line)).is_err() {
                        break;
                    }
                }
                // Its stderr is closed: it has exited (or closed it, then exits).
                let code = child.wait().ok().and_then(|s| s.code());
                let _ = lines.send(Event::Exit(w, code));
            });
            fleet.outputs.push(output);
            fleet.summaries.push(summary);
            fleet.ids.push(ids);
        }
        fleet
    }

    /// The next event, or `None` once every worker has exited. Panics (killing the workers)
    /// when they have not all exited [`CHILD_LIMIT`] after they started.
    fn next(&mut self) -> Option<Event> {
        if self.codes.iter().all(Option::is_some) {
            return None;
        }
        let left = CHILD_LIMIT.saturating_sub(self.started.elapsed());
        match self.events.recv_timeout(left) {
            Ok(event) => Some(self.note(event)),
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                self.kill();
                panic!(
                    "the workers did not end within {CHILD_LIMIT:?}; their stderr:\n{}",
                    self.stderr.join("\n---\n")
                );
            }
        }
    }

    /// Keeps what `event` says (a line of stderr, an exit code).
    fn note(&mut self, event: Event) -> Event {
        match &event {
            Event::Line(w, line) => {
                self.stderr[*w].push_str(line);
                self.stderr[*w].push('\n');
            }
            Event::Exit(w, code) => self.codes[*w] = Some(*code),
        }
        event
    }

    /// Waits for every worker to exit.
    fn wait(&mut self) {
        while self.next().is_some() {}
    }

    fn kill(&self) {
        for (pid, code) in self.pids.iter().zip(&self.codes) {
            if code.is_none() && still_ours(*pid, batch_bin().as_os_str()) {
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            }
        }
    }

    /// After [`wait`](Self::wait): every worker exited 0, and each answered every item of its
    /// input once, ok. Returns the summaries (requests and 429s each worker counted).
    fn check_every_item_ok_once(&self) -> Vec<Value> {
        for w in 0..self.outputs.len() {
            assert_eq!(
                self.codes[w],
                Some(Some(0)),
                "worker {w} failed; its stderr:\n{}",
                self.stderr[w]
            );
            let text = std::fs::read_to_string(&self.outputs[w]).unwrap();
            let mut seen: BTreeMap<String, Value> = BTreeMap::new();
            for l in text.lines() {
                let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
                let id = v["id"].as_str().unwrap_or_else(|| panic!("no id: {l}"));
                assert_eq!(v["ok"], true, "worker {w}: {l}");
                assert!(
                    seen.insert(id.to_owned(), v.clone()).is_none(),
                    "worker {w}: {id} twice"
                );
            }
            let want: BTreeSet<&str> = self.ids[w].iter().map(String::as_str).collect();
            let got: BTreeSet<&str> = seen.keys().map(String::as_str).collect();
            assert_eq!(got, want, "worker {w}: results are not its input's ids");
        }
        self.summaries
            .iter()
            .map(|p| serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
            .collect()
    }

    /// No worker panicked.
    /// What every run through an outage must show: each item answered once, no secret
    /// printed, no worker panicked.
    fn check_survived(&self) {
        self.check_every_item_ok_once();
        self.check_no_secret_printed();
        self.check_no_panic();
    }

    fn check_no_panic(&self) {
        for (w, err) in self.stderr.iter().enumerate() {
            assert!(!err.contains("panicked"), "worker {w}:\n{err}");
        }
    }

    /// No worker printed a secret or a prompt.
    fn check_no_secret_printed(&self) {
        for (w, err) in self.stderr.iter().enumerate() {
            for secret in [KEY, PASSWORD, PROMPT] {
                assert!(
                    !err.contains(secret),
                    "worker {w} printed {secret:?}:\n{err}"
                );
            }
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `redis-cli` (from the Debian package, with the server) against `redis`: what it prints.
fn cli(redis: &RedisServer, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &redis.port().to_string()])
        .args(args)
        .output()
        .expect("redis-cli (apt-get install redis-server)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The share of requests the emulator answered 429.
fn rate_limited_share(c: &Counters) -> f64 {
    c.rate_limited as f64 / c.requests.max(1) as f64
}

#[test]
fn four_processes_keep_together_to_the_quota_they_share_through_redis() {
    let _one = FLEETS.lock().unwrap_or_else(PoisonError::into_inner);
    let redis = RedisServer::start();
    let provider = Provider::start(Vec::new());
    let dir = Dir::new("quota");
    let mut fleet = Fleet::start(&dir, &provider.served.emu, &redis.url(), ITEMS);
    fleet.wait();
    let summaries = fleet.check_every_item_ok_once();
    fleet.check_no_secret_printed();
    let items = WORKERS * ITEMS;
    let c = provider.answered_once(items);
    let counted: u64 = summaries
        .iter()
        .map(|s| s["rate_limited"].as_u64().unwrap())
        .sum();
    assert_eq!(
        counted, c.rate_limited,
        "the workers count the 429s the emulator sent"
    );
    assert!(
        rate_limited_share(&c) <= 0.005,
        "{} of {} requests answered 429 (over 0.5 %): {c:?}",
        c.rate_limited,
        c.requests
    );
    // Shared: the limits are in Redis, and every request went through it.
    let keys = cli(&redis, &["--scan", "--pattern", "llm-failover:*"]);
    assert!(
        keys.contains(":limits"),
        "the limiter's state is in Redis: {keys:?}"
    );
    let calls = redis.script_calls();
    assert!(
        calls >= c.requests,
        "{calls} script calls for {} requests",
        c.requests
    );
    let log = provider.log();
    let last = log.last().map_or(0, |e| e.at_ms);
    let first = log.first().map_or(0, |e| e.at_ms);
    eprintln!(
        "{} items, {} requests, {} 429s, {:.1} s from first to last request, {calls} script \
         calls",
        items,
        c.requests,
        c.rate_limited,
        (last - first) as f64 / 1000.0
    );
}

/// The request log from `from_ms` - 100 to `to_ms` + 100, a line per request with the worker
/// that sent it, for a failure message.
fn around(log: &[LogEntry], from_ms: u64, to_ms: u64) -> String {
    let base = log
        .iter()
        .filter(|e| e.status == Some(200))
        .map(|e| e.tokens)
        .min()
        .unwrap_or(0);
    log.iter()
        .filter(|e| e.at_ms + 100 >= from_ms && e.at_ms <= to_ms.saturating_add(100))
        .map(|e| {
            format!(
                "  at_ms {:>6}  worker {}  status {}{}",
                e.at_ms,
                match e.tokens.checked_sub(base) {
                    Some(t) if e.status == Some(200) => (t / TOKENS_APART).to_string(),
                    _ => "?".to_owned(),
                },
                e.status.map_or("-".to_owned(), |s| s.to_string()),
                e.fault
                    .as_deref()
                    .map_or(String::new(), |f| format!("  fault {f}"))
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_429_seen_by_one_process_stops_all_four_until_its_reset_then_one_probe_goes_first() {
    let _one = FLEETS.lock().unwrap_or_else(PoisonError::into_inner);
    let redis = RedisServer::start();
    // Mid-run: after the first window's burst, while the workers are paced and have booked
    // slots ahead.
    const BEFORE: usize = 320;
    const RETRY_AFTER_S: u64 = 2;
    let mut script = vec![Fault::Pass; BEFORE];
    script.push(Fault::RateLimit {
        retry_after: RetryAfter::Seconds(RETRY_AFTER_S),
    });
    let provider = Provider::start(script);
    let dir = Dir::new("gate");
    let items = 125; // 500 in all: the 429 comes well before the end
    let mut fleet = Fleet::start(&dir, &provider.served.emu, &redis.url(), items);
    fleet.wait();
    let summaries = fleet.check_every_item_ok_once();
    fleet.check_no_secret_printed();
    let got_it: Vec<usize> = (0..WORKERS)
        .filter(|&w| summaries[w]["rate_limited"].as_u64() != Some(0))
        .collect();
    eprintln!("the 429 went to worker {got_it:?}");
    let log = provider.log();
    let limited: Vec<&LogEntry> = log.iter().filter(|e| e.status == Some(429)).collect();
    assert_eq!(
        limited.len(),
        1,
        "only the scripted 429:\n{}",
        around(&log, 0, u64::MAX)
    );
    let t429 = limited[0].at_ms;
    // The 429 is answered at once (an early fault). A request arriving more than this after
    // it was sent by a worker that could have known: the worker that got it has had time to
    // read it and write its gate to Redis.
    const GRACE_MS: u64 = 50;
    let reset = t429 + RETRY_AFTER_S * 1_000;
    let during = log
        .iter()
        .filter(|e| e.at_ms > t429 + GRACE_MS && e.at_ms < reset)
        .count();
    let after: Vec<&LogEntry> = log.iter().filter(|e| e.at_ms >= reset).collect();
    let probe_ms = after.first().map_or(reset, |e| e.at_ms);
    assert!(
        during == 0,
        "{during} requests arrived between the 429 (at_ms {t429}, Retry-After {RETRY_AFTER_S} \
         s) + {GRACE_MS} ms and its reset (at_ms {reset}):\n{}",
        around(&log, t429, probe_ms + LATENCY_MS)
    );
    // After the reset: one request (the half-open probe), and nothing else until its answer.
    assert!(after.len() >= 2, "the run went on after the reset");
    let before_gap = log
        .iter()
        .filter(|e| e.at_ms < reset && e.at_ms != t429)
        .map(|e| e.at_ms)
        .max();
    eprintln!(
        "429 at at_ms {t429}; the last request before its reset at {before_gap:?}; after it: \
         the probe at {}, the next request at {}",
        after[0].at_ms, after[1].at_ms
    );
    assert!(
        after[1].at_ms >= after[0].at_ms + LATENCY_MS,
        "a second request arrived before the probe's answer (at_ms {} + {LATENCY_MS}):\n{}",
        after[0].at_ms,
        around(&log, reset, probe_ms + LATENCY_MS)
    );
}

/// Now, in milliseconds since the Unix epoch: the emulator's log is stamped so too.
#[expect(
    clippy::disallowed_methods,
    reason = "when Redis went down and came back, to read the emulator's log by; no logic \
              waits on it"
)]
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Brings Redis back (and notes when) once every worker still running has printed progress
/// since it said Redis is unreachable, or has finished.
fn back_up_once_all_heard(
    outage: &mut Option<(u64, Option<u64>)>,
    redis: &mut RedisServer,
    alive_since: &[bool; WORKERS],
    exited: &[bool; WORKERS],
) {
    if let Some((down, None)) = *outage
        && alive_since.iter().zip(exited).all(|(a, e)| *a || *e)
    {
        *outage = Some((down, Some(unix_ms())));
        redis.restart();
    }
}

#[test]
fn redis_killed_and_restarted_mid_run_loses_no_item() {
    let _one = FLEETS.lock().unwrap_or_else(PoisonError::into_inner);
    let mut redis = RedisServer::start();
    let url = format!("redis://default:{PASSWORD}@127.0.0.1:{}", redis.port());
    let provider = Provider::start(Vec::new());
    let dir = Dir::new("outage");
    let mut fleet = Fleet::start(&dir, &provider.served.emu, &url, ITEMS);
    // Redis goes down at the first progress line (every worker prints one every 2 s), and
    // comes back once every worker still running has said it is unreachable and printed
    // progress since (one that took the shared burst may have finished before).
    let mut outage: Option<(u64, Option<u64>)> = None;
    let mut warned = [false; WORKERS];
    let mut alive_since = [false; WORKERS];
    // A worker may finish its share before Redis goes down: it has nothing to wait for.
    let mut exited = [false; WORKERS];
    while let Some(event) = fleet.next() {
        match (outage, event) {
            (_, Event::Exit(w, _)) if outage.is_none_or(|(_, up)| up.is_some()) => {
                exited[w] = true;
            }
            (None, Event::Line(_, line)) if line.starts_with('[') => {
                redis.kill();
                outage = Some((unix_ms(), None));
            }
            (Some((_, None)), Event::Line(w, line)) => {
                if line.contains("Redis is unreachable") {
                    warned[w] = true;
                } else if warned[w] && line.starts_with('[') {
                    alive_since[w] = true;
                }
                back_up_once_all_heard(&mut outage, &mut redis, &alive_since, &exited);
            }
            // Done with its share on slots booked before the outage: nothing left to wait for
            // (every item is checked below, once each).
            (Some((_, None)), Event::Exit(w, Some(0))) => {
                exited[w] = true;
                back_up_once_all_heard(&mut outage, &mut redis, &alive_since, &exited);
            }
            (Some((_, None)), Event::Exit(w, code)) => {
                panic!(
                    "worker {w} exited ({code:?}) while Redis was down; its stderr:\n{}",
                    fleet.stderr[w]
                );
            }
            _ => {}
        }
    }
    let Some((down, Some(up))) = outage else {
        panic!("Redis was not killed and restarted mid-run: {outage:?}");
    };
    fleet.check_survived();
    let through = warned.iter().filter(|w| **w).count();
    assert!(
        through >= 2,
        "{through} worker(s) were running when Redis went down"
    );
    for (w, err) in fleet.stderr.iter().enumerate() {
        assert!(
            exited[w] && !warned[w]
                || err.contains("Redis is unreachable")
                    && err.contains(&format!("127.0.0.1:{}", redis.port())),
            "worker {w} said which Redis is unreachable:\n{err}"
        );
    }
    provider.answered_once(WORKERS * ITEMS);
    // Fail closed: while Redis is down nothing is admitted. What arrives meanwhile was booked
    // before the kill: at most every worker's items in flight, at the binding rate.
    let log = provider.log();
    let sent: Vec<u64> = log
        .iter()
        .filter(|e| e.unix_ms >= down && e.unix_ms < up)
        .map(|e| e.unix_ms - down)
        .collect();
    let booked_ahead_ms = (WORKERS * 16) as u64 * MINUTE_MS / RPM;
    eprintln!(
        "Redis down for {} ms: {} requests arrived meanwhile, the last {} ms after the kill",
        up - down,
        sent.len(),
        sent.last().copied().unwrap_or(0)
    );
    assert!(
        sent.iter().all(|&ms| ms <= booked_ahead_ms + 500),
        "requests arrived while Redis was down ({} ms), at these ms after the kill: {sent:?}",
        up - down
    );
}

/// The 429s each of `workers` workers got from `from_ms` (Unix ms) on.
fn rate_limited_from(log: &[LogEntry], from_ms: u64, workers: usize) -> Vec<u32> {
    let base = log
        .iter()
        .filter(|e| e.status == Some(200))
        .map(|e| e.tokens)
        .min()
        .unwrap_or(0);
    let mut per = vec![0u32; workers];
    for e in log
        .iter()
        .filter(|e| e.unix_ms >= from_ms && e.status == Some(429))
    {
        per[worker_of(e, base).unwrap_or(0).min(workers - 1)] += 1;
    }
    per
}

/// The worker that sent a request, told by the tokens the emulator charged it
/// ([`write_input`]): `None` for an entry no worker's prompt explains.
fn worker_of(entry: &LogEntry, base: u64) -> Option<usize> {
    let extra = entry.tokens.checked_sub(base)?;
    let w = (extra + TOKENS_APART / 2) / TOKENS_APART;
    Some(w as usize)
}

/// Requests per minute in the outage tests (a real minute, as configured limits count),
/// configured and stated alike.
const OUTAGE_RPM: u64 = 600;
/// How long Redis stays down.
const OUTAGE: Duration = Duration::from_secs(8);
/// Workers in the outage tests.
const OUTAGE_WORKERS: usize = 3;

/// Redis killed for 8 s under three processes, then back (restarted, without its data): in
/// `mode` while it is down — `wait` admits nothing, `local_share` a third of the configured
/// limits each, from what each had left — and after it returns no bucket starts full: at most
/// one 429 per process from its return on, nothing lost, no panic. (The attack that found
/// the overshoot: 16 × 429 in the outage from full local shares, 12 in the 5 s after a
/// restart that handed out a full shared bucket.)
fn redis_down_for_8_s_under_three_processes(mode: &str) {
    let _one = FLEETS.lock().unwrap_or_else(PoisonError::into_inner);
    let mut redis = RedisServer::start();
    // A real minute: the configured limit counts the same minute as the emulator.
    let provider = Provider::start_with(Vec::new(), 60_000, OUTAGE_RPM);
    let emu = &provider.served.emu;
    let dir = Dir::new(&format!("outage-8s-{mode}"));
    let config = dir.path("providers.toml");
    write_one_provider_config(
        &config,
        "shared",
        PROVIDER,
        emu.base_url(PROVIDER).as_ref(),
        KEY_VAR,
    );
    let processes = if mode == "local_share" {
        format!("processes = {OUTAGE_WORKERS}\n")
    } else {
        String::new()
    };
    let extra = format!(
        "\n[providers.{PROVIDER}.limits]\nrpm = {OUTAGE_RPM}\n\n[shared]\nredis_url = \"{}\"\n\
         when_down = \"{mode}\"\n{processes}timeout_ms = 200\nretry_interval_ms = 500\n",
        redis.url()
    );
    let mut toml = std::fs::read_to_string(&config).unwrap();
    toml.push_str(&extra);
    std::fs::write(&config, toml).unwrap();
    // The minute's burst (600), then 10 a second: Redis goes down once the burst is spent
    // (the second progress line, about 4 s in) and the run goes on well past its return.
    let items = 300;
    let mut fleet = Fleet::start_with(&dir, &config, None, OUTAGE_WORKERS, items);
    let mut lines = 0;
    let mut down: Option<(u64, std::time::Instant)> = None;
    let mut up: Option<u64> = None;
    loop {
        if let Some((_, at)) = down
            && up.is_none()
            && at.elapsed() >= OUTAGE
        {
            redis.restart();
            up = Some(unix_ms());
        }
        // While Redis is down, look up at least every 100 ms (a bound on the outage's
        // length, not a wait for logic).
        let event = if down.is_some() && up.is_none() {
            match fleet.events.recv_timeout(Duration::from_millis(100)) {
                Ok(e) => Some(fleet.note(e)),
                Err(_) => continue,
            }
        } else {
            fleet.next()
        };
        let Some(event) = event else { break };
        if let (None, Event::Line(0, line)) = (down, &event)
            && line.starts_with('[')
        {
            lines += 1;
            if lines == 2 {
                redis.kill();
                down = Some((unix_ms(), now_wall()));
            }
        }
    }
    let (Some((down, _)), Some(up)) = (down, up) else {
        panic!("Redis was not killed and brought back mid-run");
    };
    fleet.check_survived();
    let log = provider.log();
    let after = rate_limited_from(&log, up, OUTAGE_WORKERS);
    let mut during = 0;
    let mut sent_during = 0;
    for e in log.iter().filter(|e| e.unix_ms >= down && e.unix_ms < up) {
        sent_during += 1;
        during += u32::from(e.status == Some(429));
    }
    eprintln!(
        "{mode}: Redis down {} ms; {sent_during} requests sent meanwhile ({during} × 429); \
         429s after its return per process {after:?}",
        up - down
    );
    assert!(
        after.iter().all(|n| *n <= 1),
        "{mode}: more than one 429 per process after Redis returned: {after:?}"
    );
    if mode == "wait" {
        // Fail closed: what went out meanwhile was booked before the kill (16 in flight per
        // process at most).
        assert!(
            sent_during <= 16 * OUTAGE_WORKERS,
            "{sent_during} sent while down"
        );
    } else {
        // A third of the limit each, from its third of what the shared buckets held at its
        // last grant (below zero: booked ahead): at most the limit's rate over the outage,
        // plus the slots booked before it.
        let allowed = OUTAGE_RPM * (up - down) / 60_000 + 16 * OUTAGE_WORKERS as u64;
        assert!(
            sent_during as u64 <= allowed,
            "{sent_during} sent while down, over {allowed}"
        );
        // Shares that followed each process's own use instead saw 2 to 15 × 429 here (what
        // one process took beyond its third, the others' shares did not count); full shares,
        // the attack's 16.
        assert!(
            during <= OUTAGE_WORKERS as u32,
            "{during} × 429 while Redis was down: the shares overshot the quota"
        );
    }
}

/// Now on the wall clock, to time the outage by (the scenario's length, not the logic's).
#[expect(
    clippy::disallowed_methods,
    reason = "how long Redis stays down in the scenario; no logic waits on it"
)]
fn now_wall() -> std::time::Instant {
    std::time::Instant::now()
}

#[test]
fn redis_down_for_8_s_under_three_processes_fail_closed() {
    redis_down_for_8_s_under_three_processes("wait");
}

#[test]
fn redis_down_for_8_s_under_three_processes_in_local_shares() {
    redis_down_for_8_s_under_three_processes("local_share");
}

/// A primary of a three-primary Redis Cluster killed mid-run under four processes, then
/// started again (its slots' data gone): while it is down the documented mode holds (fail
/// closed: with every slot required, the cluster refuses every call, so nothing is admitted),
/// and after it returns each process starts the lost state from the report it last heard —
/// at most one 429 per process, nothing lost, no panic.
#[test]
fn a_cluster_primary_killed_mid_run_under_four_processes_loses_nothing() {
    let _one = FLEETS.lock().unwrap_or_else(PoisonError::into_inner);
    let mut cluster = crate::support::redis::RedisCluster::start();
    let provider = Provider::start(Vec::new());
    let dir = Dir::new("cluster-kill");
    let config = write_config(&dir, &provider.served.emu);
    let mut toml = std::fs::read_to_string(&config).unwrap();
    toml.push_str(&format!(
        "\n[shared]\nredis_url = \"{}\"\ncluster = true\ntimeout_ms = 200\nretry_interval_ms = 500\n",
        cluster.url()
    ));
    std::fs::write(&config, toml).unwrap();
    let mut fleet = Fleet::start_with(&dir, &config, None, WORKERS, ITEMS);
    let mut killed: Option<(usize, u64)> = None;
    let mut up: Option<u64> = None;
    let mut warned = [false; WORKERS];
    let mut alive_since = [false; WORKERS];
    let mut exited = [false; WORKERS];
    while let Some(event) = fleet.next() {
        match (killed, up, event) {
            (_, _, Event::Exit(w, _)) if killed.is_none() || up.is_some() => exited[w] = true,
            (None, _, Event::Line(_, line)) if line.starts_with('[') => {
                // The primary that holds the target's state.
                let node = cluster
                    .keys_per_node()
                    .iter()
                    .position(|n| *n > 0)
                    .expect("the limiter's state is on a node");
                cluster.nodes[node].kill();
                killed = Some((node, unix_ms()));
            }
            (Some((node, _)), None, event) => {
                match event {
                    Event::Line(w, line) if line.contains("Redis is unreachable") => {
                        warned[w] = true;
                    }
                    Event::Line(w, line) if warned[w] && line.starts_with('[') => {
                        alive_since[w] = true;
                    }
                    Event::Exit(w, Some(0)) => exited[w] = true,
                    Event::Exit(w, code) => panic!(
                        "worker {w} exited ({code:?}) while a primary was down; its stderr:\n{}",
                        fleet.stderr[w]
                    ),
                    Event::Line(..) => {}
                }
                if alive_since.iter().zip(&exited).all(|(a, e)| *a || *e) {
                    cluster.nodes[node].restart();
                    up = Some(unix_ms());
                }
            }
            _ => {}
        }
    }
    let (Some((_, down)), Some(up)) = (killed, up) else {
        panic!("no primary was killed and started again mid-run");
    };
    fleet.check_survived();
    let c = provider.answered_once(WORKERS * ITEMS);
    let log = provider.log();
    let after = rate_limited_from(&log, up, WORKERS);
    let during = log
        .iter()
        .filter(|e| e.unix_ms >= down && e.unix_ms < up)
        .count();
    eprintln!(
        "primary down {} ms: {during} requests arrived meanwhile; 429s after it returned per \
         process {after:?}; {} × 429 in all of {} requests",
        up - down,
        c.rate_limited,
        c.requests
    );
    assert!(
        after.iter().all(|n| *n <= 1),
        "more than one 429 per process after the primary returned: {after:?}"
    );
}
