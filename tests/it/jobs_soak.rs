//! The kill -9 soak (issue 19): four OS processes of the `batch` example share one durable
//! queue — an SQLite file, or a PostgreSQL database — against an emulator that answers some
//! requests 429, 500 or 400, while the test kills workers with SIGKILL (starting a replacement
//! with the same arguments each time) and stalls one with SIGSTOP until its lease has expired
//! and its jobs were taken by others. At the end every job is `done` or `dead` (the 400s,
//! `invalid_request`), every input id has exactly one line in the results, and the stalled
//! worker's late results were refused and counted.
//!
//! The chaos is seeded (which worker, at which count of done jobs) and driven by progress:
//! the test reads the queue between its workers' lines, at most [`POLL`] apart, and nothing
//! sleeps. The emulator runs in the test process on its own runtime; a "minute" lasts
//! [`MINUTE_MS`], so its limit paces the 600 items over 20–40 seconds. One soak runs at a
//! time; a fleet still running [`FLEET_LIMIT`] after it started is killed and fails its test.
//!
//! The stall is never inside an SQLite write transaction (the test reads `/proc/locks` and
//! lets the worker go on if it holds the lock): a worker stopped there for longer than the
//! busy timeout (5 s) ends every other worker's run with "database is locked", which is a
//! property of SQLite's single writer, not of a stale claim.
#![cfg(unix)]

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::PoisonError;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use llm_failover::batch::parse_line;
use llm_failover::clock::{Clock, TokioClock};
use llm_failover_emulator::{Emulator, EmulatorConfig, Fault, Limits, ProviderConfig, RetryAfter};
use llm_failover_queue::QueuedJob;
use llm_failover_queue::{Job, JobState, Queue, QueueStats, wall_ms};
use serde_json::{Value, json};

use crate::support::examples::{
    FLEETS, Served, TempDir, batch_bin, real_now, still_ours, write_one_provider_config,
};
use crate::support::postgres::PgServer;

/// Worker processes running at any time.
const WORKERS: usize = 4;
/// Items in the input.
const ITEMS: usize = 600;
/// Each worker's `--concurrency`.
const CONCURRENCY: usize = 8;
/// `--lease-s`: a killed or stalled worker's claims go back this long after they were made.
const LEASE_S: u64 = 4;
/// `--item-deadline-s`: shorter than the lease, as the library advises, so a worker that
/// keeps running settles every claim before its lease ends, and the refused results are the
/// stalled worker's. (With a lease shorter than the time an item waits for admission, busy
/// workers lose claims too, and their items are sent twice.)
const DEADLINE_S: u64 = 3;
/// `--patience-s`.
const PATIENCE_S: u64 = 30;
/// The emulator's "minute".
const MINUTE_MS: u64 = 2_000;
/// Requests per "minute" the emulator states and enforces: 30 a second, the binding limit.
const RPM: u64 = 60;
/// Tokens per "minute": far from binding.
const TPM: u64 = 1_000_000;
/// The emulator's answer time: this, plus up to [`JITTER_MS`].
const LATENCY_MS: u64 = 30;
const JITTER_MS: u64 = 20;
/// The seed of the emulator's fault mix and of the chaos.
const SEED: u64 = 19;
/// The share of requests answered 429 (`Retry-After: 1`), 500, and 400 (a dead letter).
const P_429: f64 = 0.03;
const P_500: f64 = 0.04;
const P_400: f64 = 0.02;
/// SIGKILLs in a soak (each followed by a replacement).
const KILLS: usize = 5;
/// The longest the test goes without reading the queue.
const POLL: Duration = Duration::from_millis(100);
/// The longest a fleet may run before it is killed and its test fails.
const FLEET_LIMIT: Duration = Duration::from_secs(150);
/// The longest the stalled worker may stay stopped before the test fails.
const STALL_LIMIT: Duration = Duration::from_secs(60);
/// The provider's name in providers.toml and its prefix in the emulator.
const PROVIDER: &str = "openai";
/// The variable the workers read the emulator's key from, and the key (checked never printed).
const KEY_VAR: &str = "JOBS_SOAK_EMU_KEY";
const KEY: &str = "sk-jobs-soak-5e4d3c2b1a09";
/// Every prompt starts with this (checked never printed).
const PROMPT: &str = "Soak prompt";

/// The emulator (one OpenAI-style provider stating [`RPM`] and [`TPM`], with the seeded fault
/// mix) on its own runtime, which serves it while the test thread drives the fleet.
fn start_provider() -> Served {
    let mut cfg = EmulatorConfig::default();
    cfg.log_capacity = 1 << 16;
    let served = Served::start(
        Emulator::builder()
            .config(cfg)
            .minute_ms(MINUTE_MS)
            .seed(SEED)
            .provider(
                ProviderConfig::openai(PROVIDER)
                    .with_key(KEY)
                    .with_limits(Limits::per_minute(RPM, TPM))
                    .with_latency(LATENCY_MS, JITTER_MS),
            ),
    );
    let rate_limit = Fault::RateLimit {
        retry_after: RetryAfter::Seconds(1),
    };
    served.emu.set_fault_mix(
        PROVIDER,
        SEED,
        [
            (P_429, rate_limit),
            (P_500, Fault::Status { status: 500 }),
            (P_400, Fault::Status { status: 400 }),
        ],
    );
    served
}

/// The store a soak runs on.
#[derive(Clone, Copy, Debug)]
enum Backend {
    Sqlite,
    Postgres,
}

/// The queue the workers share, opened in the test too (to watch it), on a runtime of its own.
struct Store {
    spec: String,
    queue: Queue,
    rt: tokio::runtime::Runtime,
    /// The SQLite file and its shared-memory file (whose byte locks are the write lock).
    files: Vec<PathBuf>,
}

impl Store {
    fn open(backend: Backend, dir: &TempDir) -> Store {
        let (spec, files) = match backend {
            Backend::Sqlite => {
                let path = dir.path("queue.sqlite");
                let shm = dir.path("queue.sqlite-shm");
                (format!("sqlite:{}", path.display()), vec![path, shm])
            }
            Backend::Postgres => (PgServer::shared().fresh_url(), Vec::new()),
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let queue = rt.block_on(Queue::open(&spec)).expect("the queue opens");
        Store {
            spec,
            queue,
            rt,
            files,
        }
    }

    fn stats(&self) -> QueueStats {
        let now = wall_ms(TokioClock.wall());
        self.rt.block_on(self.queue.stats(now)).unwrap()
    }

    /// The jobs of `ids`, as the queue has them now.
    fn jobs<'a>(&self, ids: impl IntoIterator<Item = &'a String>) -> Vec<Job> {
        self.rt.block_on(async {
            let mut jobs = Vec::new();
            for id in ids {
                jobs.push(
                    self.queue
                        .get(id)
                        .await
                        .unwrap()
                        .expect("every id is queued"),
                );
            }
            jobs
        })
    }

    /// The claims `(id, attempt)` the process `pid` holds: its jobs `running` under its
    /// worker's name (`worker-<pid>-<n>`, the default).
    fn claims_of(&self, pid: u32, ids: &[String]) -> Vec<(String, u32)> {
        let prefix = format!("worker-{pid}-");
        let ours = |job: &Job| {
            job.worker
                .as_deref()
                .is_some_and(|w| w.starts_with(&prefix))
        };
        (self.jobs(ids).into_iter())
            .filter(|job| job.state == JobState::Running && ours(job))
            .map(|job| (job.id, job.attempt))
            .collect()
    }

    /// Whether every claim in `held` has been taken by another (the job claimed again, or
    /// settled for good); if so, how many of those jobs are done.
    fn taken(&self, held: &[(String, u32)]) -> Option<usize> {
        let jobs = self.jobs(held.iter().map(|(id, _)| id));
        let taken = |(job, (_, attempt)): (&Job, &(String, u32))| {
            job.attempt > *attempt || job.state.is_terminal()
        };
        (jobs.iter().zip(held).all(taken))
            .then(|| jobs.iter().filter(|j| j.state == JobState::Done).count())
    }

    /// Whether process `pid` holds a write lock on the SQLite files (`/proc/locks`): stopped
    /// then, it would stall every writer, which is a stall of SQLite, not of a worker.
    fn locked_by(&self, pid: u32) -> bool {
        use std::os::unix::fs::MetadataExt;
        let inodes: Vec<String> = (self.files.iter())
            .filter_map(|f| std::fs::metadata(f).ok())
            .map(|m| m.ino().to_string())
            .collect();
        if inodes.is_empty() {
            return false;
        }
        let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
        let pid = pid.to_string();
        locks.lines().any(|line| {
            // `1: POSIX  ADVISORY  WRITE 1234 fe:00:5308730 120 120`; `->` marks a waiter.
            let words: Vec<&str> = line.split_whitespace().collect();
            words.len() >= 6
                && words[1] != "->"
                && words[3] == "WRITE"
                && words[4] == pid
                && inodes
                    .iter()
                    .any(|i| words[5].rsplit(':').next() == Some(i))
        })
    }
}

/// A fresh directory for one soak: providers.toml and the input (`items` lines); the ids of
/// the items' jobs in the queue (an item's id and a hash of its request).
fn write_files(dir: &TempDir, emu: &Emulator, items: usize) -> (PathBuf, PathBuf, Vec<String>) {
    let config = dir.path("providers.toml");
    let base = emu.base_url(PROVIDER).to_string();
    write_one_provider_config(&config, "soak", PROVIDER, &base, KEY_VAR);
    let ids: Vec<String> = (0..items).map(|i| format!("s-{i:04}")).collect();
    let lines: Vec<String> = (ids.iter())
        .map(|id| {
            json!({"id": id, "prompt": format!("{PROMPT} {id}"), "max_tokens": 8}).to_string()
        })
        .collect();
    let input = dir.path("in.jsonl");
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let jobs = (lines.iter().enumerate())
        .map(|(n, line)| {
            let item = parse_line(line.as_bytes(), n as u64 + 1).unwrap();
            QueuedJob::job_id(&item.id, &serde_json::to_string(&item.request).unwrap())
        })
        .collect();
    (config, input, jobs)
}

/// What a worker process says while it runs (by its index in [`Fleet::procs`]).
enum Event {
    Line(usize, String),
    Exit(usize, Option<i32>),
}

/// One worker process, alive or not.
struct Proc {
    slot: usize,
    pid: u32,
    stderr: String,
    /// `Some` once it has exited (`None` inside: by a signal).
    code: Option<Option<i32>>,
    killed: bool,
}

/// [`WORKERS`] slots, each running a worker process; a killed one is replaced in its slot.
struct Fleet {
    args: Vec<std::ffi::OsString>,
    root: PathBuf,
    outputs: Vec<PathBuf>,
    procs: Vec<Proc>,
    /// The process running in each slot (an index in `procs`).
    slots: Vec<usize>,
    tx: Sender<Event>,
    events: Receiver<Event>,
    /// The order the processes exited in.
    exited: Vec<usize>,
    started: Instant,
}

impl Fleet {
    /// [`WORKERS`] workers with `flags`.
    fn start(dir: &TempDir, config: &Path, input: &Path, spec: &str) -> Fleet {
        let flags = [
            ("--lease-s", LEASE_S),
            ("--item-deadline-s", DEADLINE_S),
            ("--patience-s", PATIENCE_S),
            ("--concurrency", CONCURRENCY as u64),
        ];
        Fleet::start_with(dir, config, input, spec, WORKERS, &flags)
    }

    /// `workers` workers with `flags` (the defaults for the others).
    fn start_with(
        dir: &TempDir,
        config: &Path,
        input: &Path,
        spec: &str,
        workers: usize,
        flags: &[(&str, u64)],
    ) -> Fleet {
        let bin = batch_bin(); // built before the clock starts
        let mut args: Vec<std::ffi::OsString> = vec![bin.into()];
        args.extend(["--config".into(), config.into()]);
        args.extend(["--env".into(), "soak".into()]);
        args.extend(["--input".into(), input.into()]);
        args.extend(["--queue".into(), spec.into()]);
        for (flag, value) in flags {
            args.extend([flag.into(), value.to_string().into()]);
        }
        let (tx, events) = mpsc::channel();
        let mut fleet = Fleet {
            args,
            root: dir.root().to_owned(),
            outputs: (0..workers)
                .map(|w| dir.path(&format!("out-{w}.jsonl")))
                .collect(),
            procs: Vec::new(),
            slots: Vec::new(),
            tx,
            events,
            exited: Vec::new(),
            started: real_now(),
        };
        for slot in 0..workers {
            let p = fleet.spawn(slot);
            fleet.slots.push(p);
        }
        fleet
    }

    /// Starts a worker in `slot` (the same arguments as every other, its slot's output);
    /// returns its index.
    fn spawn(&mut self, slot: usize) -> usize {
        let p = self.procs.len();
        let mut child = Command::new(&self.args[0])
            .args(&self.args[1..])
            .arg("--output")
            .arg(&self.outputs[slot])
            .current_dir(&self.root)
            .env_remove("RUST_LOG")
            .env_remove("LLM_FAILOVER_ENV")
            .env_remove("LLM_FAILOVER_REDIS_URL")
            .env("NO_COLOR", "1")
            .env(KEY_VAR, KEY)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the batch example starts");
        let pid = child.id();
        let stderr = child.stderr.take().expect("piped");
        let lines = self.tx.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if lines.send(Event::Line(p, line)).is_err() {
                    break;
                }
            }
            // Its stderr is closed: it has exited (or closed it, then exits).
            let code = child.wait().ok().and_then(|s| s.code());
            let _ = lines.send(Event::Exit(p, code));
        });
        self.procs.push(Proc {
            slot,
            pid,
            stderr: String::new(),
            code: None,
            killed: false,
        });
        p
    }

    fn all_exited(&self) -> bool {
        self.procs.iter().all(|p| p.code.is_some())
    }

    /// Takes what the workers said within [`POLL`]. Panics (killing them) when the fleet has
    /// run [`FLEET_LIMIT`].
    fn poll(&mut self) {
        let left = FLEET_LIMIT.saturating_sub(self.started.elapsed());
        if left.is_zero() {
            self.fail(&format!("the workers did not end within {FLEET_LIMIT:?}"));
        }
        match self.events.recv_timeout(POLL.min(left)) {
            Ok(Event::Line(p, line)) => {
                self.procs[p].stderr.push_str(&line);
                self.procs[p].stderr.push('\n');
            }
            Ok(Event::Exit(p, code)) => {
                self.procs[p].code = Some(code);
                self.exited.push(p);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => unreachable!("the fleet holds a sender"),
        }
    }

    /// Whether process `p` still runs as our worker (see [`still_ours`]).
    fn still_ours(&self, p: usize) -> bool {
        still_ours(self.procs[p].pid, &self.args[0])
    }

    /// Sends `signal` (`KILL`, `STOP`, `CONT`) to process `p`.
    fn signal(&self, p: usize, signal: &str) {
        assert!(
            self.still_ours(p),
            "worker pid {} is no longer ours to signal",
            self.procs[p].pid
        );
        let status = Command::new("kill")
            .args(["-s", signal, &self.procs[p].pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -s {signal} {}", self.procs[p].pid);
    }

    /// SIGKILLs the worker in `slot` and starts a replacement there.
    fn kill_and_replace(&mut self, slot: usize) {
        let p = self.slots[slot];
        self.signal(p, "KILL");
        self.procs[p].killed = true;
        self.slots[slot] = self.spawn(slot);
    }

    fn kill_all(&self) {
        for (i, p) in self.procs.iter().enumerate() {
            if p.code.is_none() && self.still_ours(i) {
                let _ = Command::new("kill")
                    .args(["-9", &p.pid.to_string()])
                    .status();
            }
        }
    }

    /// Kills every worker and fails the test with `why` and what they said.
    fn fail(&self, why: &str) -> ! {
        self.kill_all();
        let said: Vec<String> = (self.procs.iter())
            .map(|p| format!("pid {} (slot {}):\n{}", p.pid, p.slot, p.stderr))
            .collect();
        panic!("{why}; the workers' stderr:\n{}", said.join("\n---\n"));
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// A seeded sequence (splitmix64): the chaos's choices, the same every run.
struct Seeded(u64);

impl Seeded {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One planned event, due once this many jobs are done.
#[derive(Clone, Copy, Debug)]
enum Step {
    Kill { at_done: u64 },
    Stall { at_done: u64, slot: usize },
}

/// The plan: [`KILLS`] kills at about 8, 20, 35, 50 and 62 % of the items done, then the stall
/// at about 72 %, each a seeded 0–2 % later; a seeded slot for each. The stall comes last,
/// so no kill takes the stalled worker's last lines (its refusals), and because a reaped job
/// is eligible from its reaping, behind every job eligible before it: the stalled worker's
/// jobs are claimed again once the older ones have been, and this late in the run that is
/// soon.
fn plan(rng: &mut Seeded) -> VecDeque<Step> {
    let mut at = |percent: u64| ITEMS as u64 * percent / 100 + rng.below(ITEMS as u64 / 50);
    let mut steps: VecDeque<Step> = [8, 20, 35, 50, 62]
        .map(|p| Step::Kill { at_done: at(p) })
        .into();
    assert_eq!(steps.len(), KILLS);
    let at_done = at(72);
    let slot = rng.below(WORKERS as u64) as usize;
    steps.push_back(Step::Stall { at_done, slot });
    steps
}

/// The stalled worker, while it is stopped.
struct Stopped {
    p: usize,
    held: Vec<(String, u32)>,
    at: Instant,
    done_at: u64,
}

/// What the stall did, for the checks and the summary.
struct Stalled {
    p: usize,
    held: usize,
    /// Of the jobs it held, those another worker had finished when it went on.
    done_by_others: usize,
    for_s: f64,
}

/// The plan being carried out.
struct Chaos {
    rng: Seeded,
    steps: VecDeque<Step>,
    /// The count of done jobs at each kill.
    killed_at: Vec<u64>,
    stopped: Option<Stopped>,
    stalled: Option<Stalled>,
}

impl Chaos {
    fn new() -> Chaos {
        let mut rng = Seeded(SEED);
        let steps = plan(&mut rng);
        Chaos {
            rng,
            steps,
            killed_at: Vec::new(),
            stopped: None,
            stalled: None,
        }
    }

    /// Does what is due now that `stats.done` jobs are done: goes on with the stalled worker
    /// once its lease has expired, more jobs were done and its claims were taken; else the
    /// next step once its count is reached.
    fn step(&mut self, fleet: &mut Fleet, store: &Store, ids: &[String], stats: &QueueStats) {
        if let Some(s) = &self.stopped {
            let waited = s.at.elapsed();
            if waited > STALL_LIMIT {
                fleet.fail(&format!(
                    "the stalled worker's {} claims were not taken by others in {waited:?}",
                    s.held.len()
                ));
            }
            let expired = waited >= Duration::from_secs(LEASE_S + 1);
            if !expired || stats.done <= s.done_at {
                return;
            }
            if let Some(done_by_others) = store.taken(&s.held) {
                fleet.signal(s.p, "CONT");
                self.stalled = Some(Stalled {
                    p: s.p,
                    held: s.held.len(),
                    done_by_others,
                    for_s: waited.as_secs_f64(),
                });
                self.stopped = None;
            }
            return;
        }
        match self.steps.front().copied() {
            Some(Step::Kill { at_done }) if stats.done >= at_done => {
                fleet.kill_and_replace(self.rng.below(WORKERS as u64) as usize);
                self.killed_at.push(stats.done);
                self.steps.pop_front();
            }
            Some(Step::Stall { at_done, slot }) if stats.done >= at_done => {
                let p = fleet.slots[slot];
                let pid = fleet.procs[p].pid;
                if store.claims_of(pid, ids).is_empty() {
                    return; // between claims: look again at the next poll
                }
                fleet.signal(p, "STOP");
                let held = store.claims_of(pid, ids);
                if held.is_empty() || store.locked_by(pid) {
                    // Settled its claims just before, or stopped inside a write transaction
                    // (every other writer would wait on it): let it go on, try again.
                    fleet.signal(p, "CONT");
                    return;
                }
                self.stopped = Some(Stopped {
                    p,
                    held,
                    at: real_now(),
                    done_at: stats.done,
                });
                self.steps.pop_front();
            }
            _ => {}
        }
    }
}

fn soak(backend: Backend) {
    let _one = FLEETS.lock().unwrap_or_else(PoisonError::into_inner);
    let provider = start_provider();
    let dir = TempDir::new("jobs-soak", &format!("{backend:?}").to_lowercase());
    let (config, input, ids) = write_files(&dir, &provider.emu, ITEMS);
    let store = Store::open(backend, &dir);
    let mut fleet = Fleet::start(&dir, &config, &input, &store.spec);
    let mut chaos = Chaos::new();
    let mut stats = store.stats();
    while !fleet.all_exited() {
        fleet.poll();
        stats = store.stats();
        chaos.step(&mut fleet, &store, &ids, &stats);
    }
    let run_s = fleet.started.elapsed().as_secs_f64();
    let Some(stalled) = &chaos.stalled else {
        fleet.fail(&format!(
            "the run ended before the stall: {:?} left",
            chaos.steps
        ));
    };
    assert!(
        chaos.steps.is_empty(),
        "the run ended before {:?}",
        chaos.steps
    );
    check(&fleet, &store, &ids, &stats, stalled);
    let c = provider.emu.counters(PROVIDER);
    let injected_429 = (provider.emu.log().iter())
        .filter(|e| e.provider == PROVIDER && e.fault.as_deref() == Some("rate_limit"))
        .count();
    let refused: u64 = fleet.procs.iter().filter_map(refused_by).sum();
    eprintln!(
        "soak on {}: {ITEMS} items, {} worker processes; {} SIGKILLed (at {:?} done) and \
         replaced; 1 SIGSTOPped for {:.1} s (lease {LEASE_S} s) holding {} claims, {} of them \
         finished by others meanwhile; the emulator answered {} requests: {} 429s \
         ({injected_429} injected), {} 5xx, {} 4xx; done {}, dead {}; stale results refused: \
         {} by the stalled worker, {refused} in all; {run_s:.1} s",
        store.queue.backend(),
        fleet.procs.len(),
        chaos.killed_at.len(),
        chaos.killed_at,
        stalled.for_s,
        stalled.held,
        stalled.done_by_others,
        c.requests,
        c.rate_limited,
        c.server_errors,
        c.client_errors,
        stats.done,
        stats.dead,
        refused_by(&fleet.procs[stalled.p]).unwrap_or(0),
    );
    assert!(injected_429 > 0 && c.server_errors > 0, "{c:?}");
    assert!(
        (1..=c.client_errors).contains(&stats.dead),
        "dead jobs come from the 400s: {stats:?}, {c:?}"
    );
}

/// N of a worker's "stale results refused N" (or "N stale results refused"), from the lines
/// it prints at the end (`None`: it printed none, having been killed).
fn refused_by(p: &Proc) -> Option<u64> {
    const WORDS: &str = "stale results refused";
    let line = p.stderr.lines().find(|l| l.contains(WORDS))?;
    let (before, after) = line.split_once(WORDS)?;
    let after = after.trim_start().split([' ', '\u{b7}']).next();
    let before = before.trim_end().rsplit([' ', '\u{b7}']).next();
    (after.and_then(|n| n.parse().ok())).or_else(|| before?.parse().ok())
}

/// The end of a soak: every worker not killed exited 0 having printed no secret; the queue
/// holds every job done or dead (the 400s); every results file has each id once, as the
/// queue has it; the stalled worker's late results were refused and counted.
fn check(fleet: &Fleet, store: &Store, ids: &[String], stats: &QueueStats, stalled: &Stalled) {
    for p in &fleet.procs {
        let want = if p.killed { None } else { Some(0) };
        assert_eq!(
            p.code,
            Some(want),
            "pid {} (killed: {}) exited so; its stderr:\n{}",
            p.pid,
            p.killed,
            p.stderr
        );
        for secret in [KEY, PROMPT] {
            assert!(
                !p.stderr.contains(secret),
                "pid {} printed {secret:?}:\n{}",
                p.pid,
                p.stderr
            );
        }
    }
    assert_eq!((stats.ready, stats.running), (0, 0), "{stats:?}");
    assert_eq!(
        stats.done + stats.dead + stats.review,
        ITEMS as u64,
        "every job is done, dead or in review: {stats:?}"
    );
    let jobs: BTreeMap<String, Job> = (store.jobs(ids).into_iter())
        .map(|job| (QueuedJob::item_id(&job.id).to_owned(), job))
        .collect();
    for job in jobs.values().filter(|j| j.state == JobState::Dead) {
        let error = job.last_error.as_deref().unwrap_or("");
        assert!(
            error.starts_with("invalid_request 400"),
            "{} is dead from a 400 only: {job:?}",
            job.id
        );
    }
    // The last to finish, and every other slot's last worker (each exported after the
    // queue was drained): the same file, one line per id, ok as the queue has it.
    let last = &fleet.procs[*fleet.exited.last().expect("they exited")];
    let text = std::fs::read_to_string(&fleet.outputs[last.slot]).unwrap();
    let mut seen: BTreeMap<String, Value> = BTreeMap::new();
    for l in text.lines() {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        let id = (v["id"].as_str())
            .unwrap_or_else(|| panic!("no id: {l}"))
            .to_owned();
        let job = jobs
            .get(&id)
            .unwrap_or_else(|| panic!("{id} is no input id: {l}"));
        match job.state {
            JobState::Done => {
                let accepted: Value = serde_json::from_str(job.result.as_deref().unwrap()).unwrap();
                assert_eq!(
                    (&v["ok"], &v),
                    (&json!(true), &accepted),
                    "{id}: the accepted result"
                );
            }
            JobState::Dead => {
                assert_eq!(
                    (&v["ok"], &v["error"]["kind"]),
                    (&json!(false), &json!("invalid_request")),
                    "{l}"
                )
            }
            _ => assert_eq!(
                (&v["ok"], &v["error"]["kind"]),
                (&json!(false), &json!("review")),
                "{l}"
            ),
        }
        assert!(seen.insert(id.clone(), v).is_none(), "{id} twice");
    }
    assert_eq!(seen.len(), ITEMS, "every input id has a line");
    for (slot, output) in fleet.outputs.iter().enumerate() {
        let other = std::fs::read_to_string(output).unwrap();
        assert!(
            other == text,
            "slot {slot}'s results differ from slot {}'s",
            last.slot
        );
    }
    // The stalled worker answered its claims after others had taken them: refused, counted.
    let p = &fleet.procs[stalled.p];
    let refused = refused_by(p).unwrap_or_else(|| panic!("no refusals line:\n{}", p.stderr));
    assert!(
        refused >= 1 && refused >= stalled.held as u64,
        "the stalled worker held {} claims and had {refused} results refused:\n{}",
        stalled.held,
        p.stderr
    );
}

#[test]
fn workers_killed_and_stalled_on_an_sqlite_queue_lose_no_item_and_accept_none_twice() {
    soak(Backend::Sqlite);
}

#[test]
fn workers_killed_and_stalled_on_a_postgres_queue_lose_no_item_and_accept_none_twice() {
    soak(Backend::Postgres);
}

/// Worker processes of the default-lease soak.
const DEFAULT_LEASE_WORKERS: usize = 3;
/// The library's default lease, and how often a worker reaps expired leases with it (a
/// tenth of the lease): a dead worker's jobs are claimed again within about that sum of its
/// death — its lease ends at most a lease after its last renewal.
const DEFAULT_LEASE: Duration = Duration::from_secs(30);
const DEFAULT_REAP_EVERY: Duration = Duration::from_secs(3);
/// The kills, at these percentages of the items done (every few seconds at the emulator's
/// pace of 30 items a second).
const DEFAULT_LEASE_KILLS: [u64; 5] = [10, 25, 40, 55, 70];

/// A killed worker's claims, watched until each is claimed again.
struct Death {
    pid: u32,
    at: Instant,
    /// Each claim it held, and how long after its death it was claimed again.
    held: Vec<((String, u32), Option<Duration>)>,
}

/// Three batch processes on one queue with the library's defaults (lease, patience, item
/// deadline), one SIGKILLed every few seconds and replaced: the run finishes, every id is
/// accepted once, and each killed worker's jobs were claimed again within about one lease of
/// its death (read from the queue: the attempt of each job it held, as it moves on).
fn killed_with_the_default_lease(backend: Backend) {
    let _one = FLEETS.lock().unwrap_or_else(PoisonError::into_inner);
    let provider = start_provider();
    let dir = TempDir::new(
        "jobs-soak-default-lease",
        &format!("{backend:?}").to_lowercase(),
    );
    let (config, input, ids) = write_files(&dir, &provider.emu, ITEMS);
    let store = Store::open(backend, &dir);
    let flags = [("--concurrency", CONCURRENCY as u64)];
    let mut fleet = Fleet::start_with(
        &dir,
        &config,
        &input,
        &store.spec,
        DEFAULT_LEASE_WORKERS,
        &flags,
    );
    let mut rng = Seeded(SEED + 1);
    let mut kills: VecDeque<u64> = DEFAULT_LEASE_KILLS.map(|p| ITEMS as u64 * p / 100).into();
    let mut deaths: Vec<Death> = Vec::new();
    let mut stats = store.stats();
    while !fleet.all_exited() {
        fleet.poll();
        stats = store.stats();
        if kills.front().is_some_and(|at| stats.done >= *at) {
            let slot = rng.below(DEFAULT_LEASE_WORKERS as u64) as usize;
            let pid = fleet.procs[fleet.slots[slot]].pid;
            fleet.kill_and_replace(slot);
            let at = real_now();
            // Dead: what it holds can no longer change but by another's claim.
            let held = store.claims_of(pid, &ids);
            deaths.push(Death {
                pid,
                at,
                held: held.into_iter().map(|c| (c, None)).collect(),
            });
            kills.pop_front();
        }
        for death in &mut deaths {
            let waiting: Vec<String> = (death.held.iter())
                .filter(|(_, again)| again.is_none())
                .map(|((id, _), _)| id.clone())
                .collect();
            if waiting.is_empty() {
                continue;
            }
            let now = store.jobs(&waiting);
            for ((id, attempt), again) in &mut death.held {
                if again.is_some() {
                    continue;
                }
                let job = now.iter().find(|j| &j.id == id).expect("a watched job");
                if job.attempt > *attempt {
                    *again = Some(death.at.elapsed());
                }
            }
        }
    }
    let run_s = fleet.started.elapsed().as_secs_f64();
    assert!(
        kills.is_empty(),
        "the run ended before the kills at {kills:?}"
    );
    for p in fleet.procs.iter().filter(|p| !p.killed) {
        assert_eq!(p.code, Some(Some(0)), "pid {}:\n{}", p.pid, p.stderr);
    }
    assert_eq!((stats.ready, stats.running), (0, 0), "{stats:?}");
    assert_eq!(
        stats.done + stats.dead + stats.review,
        ITEMS as u64,
        "{stats:?}"
    );
    // Every id once, in the last export.
    let last = &fleet.procs[*fleet.exited.last().expect("they exited")];
    let text = std::fs::read_to_string(&fleet.outputs[last.slot]).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for l in text.lines() {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        let id = v["id"].as_str().unwrap_or_else(|| panic!("no id: {l}"));
        assert!(seen.insert(id.to_owned()), "{id} twice");
    }
    assert_eq!(seen.len(), ITEMS, "every input id has a line");
    let bound = DEFAULT_LEASE + DEFAULT_REAP_EVERY + Duration::from_secs(2);
    let mut delays = Vec::new();
    for death in &deaths {
        for ((id, attempt), again) in &death.held {
            let again = again.unwrap_or_else(|| {
                panic!(
                    "{id} (attempt {attempt}) held by killed pid {} was never claimed again",
                    death.pid
                )
            });
            assert!(
                again <= bound,
                "{id} held by killed pid {} was claimed again {again:?} after its death \
                 (bound {bound:?})",
                death.pid
            );
            delays.push(again.as_secs_f64());
        }
    }
    assert!(!delays.is_empty(), "the killed workers held claims");
    delays.sort_by(f64::total_cmp);
    eprintln!(
        "default-lease soak on {}: {ITEMS} items, {} processes, {} killed holding {} claims; \
         claimed again {:.1}–{:.1} s after the death (median {:.1} s, lease {DEFAULT_LEASE:?}); \
         done {}, dead {}; {run_s:.1} s",
        store.queue.backend(),
        fleet.procs.len(),
        deaths.len(),
        delays.len(),
        delays[0],
        delays[delays.len() - 1],
        delays[delays.len() / 2],
        stats.done,
        stats.dead,
    );
}

#[test]
fn workers_killed_every_few_seconds_with_the_default_lease_on_sqlite_finish_the_run() {
    killed_with_the_default_lease(Backend::Sqlite);
}

#[test]
fn workers_killed_every_few_seconds_with_the_default_lease_on_postgres_finish_the_run() {
    killed_with_the_default_lease(Backend::Postgres);
}
