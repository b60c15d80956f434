//! B7 — durable queue throughput, on SQLite (a file in a temporary directory) and PostgreSQL
//! (a server this bench starts on loopback, as `tests/it/support/postgres.rs` does, but on the
//! server's default durability settings; see [`PgServer`]).
//!
//! 1. **Enqueue**: `enqueue_all` in batches of 1,000 into an empty queue, jobs/s. Every fill of
//!    a `B7_JOBS` row below is such an enqueue, timed; their median is reported.
//! 2. **Claim and complete, no provider in the way**: worker processes (this bench re-executed
//!    with `B7_WORKER` set) each loop `claim_many(worker, batch, lease, now)` + `complete_all`
//!    of the claimed jobs (the result is the payload) until a claim comes back empty; one and
//!    four processes, batches of 1 and 64. Jobs/s is the jobs done over the time from the
//!    parent's "go" to the last worker's report; the queue's `stats` must then say every job
//!    is `done`. One more row runs the real `Worker` (a handler answering the payload,
//!    concurrency 64) in one process, to show the worker's own overhead. A row whose workers
//!    are still claiming after `B7_ROW_MAX_S` is stopped there and reported cut short, at the
//!    rate it had. CPU per job: the worker processes' (for SQLite that is the whole queue) and
//!    the PostgreSQL server's (postmaster, backends, WAL writer: `/proc`), and both over the
//!    wall time ("cores busy": the machine has two).
//! 3. **Added latency per job**, one job at a time in this process: `claim_many(…, 1, …)` and
//!    `complete_all` of that one job, against the same-run baseline of the file-based batch
//!    runner, which appends and flushes one JSON line per item (`batch::ResultsWriter::write`,
//!    no fsync) — and, for reference, the same line with an `fdatasync` after it, which is what
//!    it takes for a line to be as durable as a committed transaction. The three are
//!    interleaved job by job; p50 and p99 and the ratios to the file line.
//! 4. **Memory**: the lone worker process's `VmRSS` after opening the queue and at 10 k, 50 k
//!    and 100 k jobs done (batch 64; and the `Worker` row), its `VmHWM`, and its rate between
//!    those marks (flat memory and a flat rate: nothing grows with the jobs done).
//!
//! Both backends run on their defaults (SQLite: WAL, `synchronous` as compiled in, printed;
//! PostgreSQL: `fsync`, `synchronous_commit`, `wal_sync_method`, `full_page_writes` printed
//! from the server).
//!
//! ```sh
//! cargo bench --bench queue                       # both backends, about 2 minutes
//! B7_BACKENDS=sqlite cargo bench --bench queue    # one backend (sqlite | postgres)
//! ```
//!
//! Knobs: `B7_JOBS` (jobs per batch-64 and `Worker` row, and the enqueue; 100,000),
//! `B7_SINGLE_JOBS` (jobs per batch-1 row; 5,000: a commit per claim and per completion makes
//! them 10–20× slower), `B7_LATENCY_JOBS` (2,000), `B7_PROCESSES` (4), `B7_BATCH` (64),
//! `B7_ROW_MAX_S` (12), `B7_LATENCY_MAX_S` (5), `B7_BACKENDS` (`sqlite,postgres`). Without
//! PostgreSQL's binaries the PostgreSQL rows are skipped with a line saying so.

mod common;
// The tests' PostgreSQL helpers: who runs the server, a free port (the bench starts a server
// of its own on the defaults, not the tests' `fsync=off` one).
// The certificates the tests' TLS servers use (their helpers name the module).
#[path = "../tests/it/support/certs.rs"]
#[allow(dead_code, unreachable_pub)]
mod certs;
#[path = "../tests/it/support/postgres.rs"]
#[allow(dead_code, unreachable_pub, unused_imports)]
mod pg_support;
// The tests' temporary directory.
#[path = "../tests/it/support/examples.rs"]
#[allow(dead_code, unreachable_pub)]
mod examples;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use common::{Table, f, median, percentile};
use examples::TempDir;
use llm_failover::batch::{Answer, ItemOutcome as LineOutcome, ResultsWriter, Stop};
use llm_failover::clock::{Clock, TokioClock};
use llm_failover::provider::openai::OpenAi;
use llm_failover::{ChatResponse, Client, Credential, ProviderId, ProviderSettings};
use llm_failover_queue::{Ended, Handler, JobContext, NewJob, Queue, Worker, wall_ms};
use pg_support::{effective_uid, free_port, give_to_postgres};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Jobs in the batched rows, the `Worker` row and the enqueue.
const JOBS: u64 = 100_000;
/// Jobs in the one-at-a-time rows.
const SINGLE_JOBS: u64 = 5_000;
/// Jobs timed one at a time for the added latency.
const LATENCY_JOBS: u64 = 2_000;
/// Jobs per `enqueue_all`.
const ENQUEUE_BATCH: u64 = 1_000;
/// Worker processes in the multi-process rows.
const PROCESSES: usize = 4;
/// The larger claim batch (the smaller is 1).
const BATCH: usize = 64;
/// The longest a row's workers claim before they stop and the row is reported cut short.
const ROW_MAX_S: f64 = 12.0;
/// The longest each latency measurement runs (it is then reported cut short).
const LATENCY_MAX_S: f64 = 5.0;
/// The `Worker`'s concurrency.
const WORKER_CONCURRENCY: usize = 64;
/// Jobs done at which a lone worker process reads its RSS.
const MARKS: [u64; 3] = [10_000, 50_000, 100_000];
/// Every claim's lease: far longer than any row, so nothing is reaped.
const LEASE: Duration = Duration::from_secs(600);
/// The variable that makes this binary a worker process; its value is the task, as JSON.
const WORKER_VAR: &str = "B7_WORKER";
const KIND: &str = "echo";

#[derive(Clone, Debug)]
struct Knobs {
    jobs: u64,
    single_jobs: u64,
    latency_jobs: u64,
    processes: usize,
    batch: usize,
    backends: Vec<String>,
    row_max_s: f64,
    latency_max_s: f64,
}

impl Knobs {
    fn from_env() -> Self {
        Knobs {
            jobs: common::env_or("B7_JOBS", JOBS),
            single_jobs: common::env_or("B7_SINGLE_JOBS", SINGLE_JOBS),
            latency_jobs: common::env_or("B7_LATENCY_JOBS", LATENCY_JOBS),
            processes: common::env_or("B7_PROCESSES", PROCESSES),
            batch: common::env_or("B7_BATCH", BATCH),
            row_max_s: common::env_or("B7_ROW_MAX_S", ROW_MAX_S),
            latency_max_s: common::env_or("B7_LATENCY_MAX_S", LATENCY_MAX_S),
            backends: common::env_or("B7_BACKENDS", "sqlite,postgres".to_owned())
                .split(',')
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect(),
        }
    }
}

fn main() {
    if let Ok(task) = std::env::var(WORKER_VAR) {
        let task: Task = serde_json::from_str(&task).expect("the worker's task parses");
        worker_process(&task);
        return;
    }
    let knobs = Knobs::from_env();
    let machine = common::machine();
    machine.print("queue (B7)");
    let t0 = TokioClock.now();
    let mut results = Vec::new();
    for name in &knobs.backends {
        let Some(mut backend) = Backend::start(name) else {
            continue;
        };
        println!("\n{}: {}", backend.name(), backend.settings());
        let result = run_backend(&mut backend, &knobs);
        print_backend(&backend, &result, &knobs);
        results.push(json!({
            "backend": backend.name(),
            "settings": backend.settings(),
            "result": result,
        }));
    }
    println!(
        "\nwall time {:.1} s, load average now {}",
        (TokioClock.now() - t0).as_secs_f64(),
        common::machine().loadavg
    );
    common::record(
        "queue",
        &machine,
        json!({"knobs": format!("{knobs:?}"), "backends": results}),
    );
}

// ---------------------------------------------------------------------------- backends

/// Where fresh, empty queues come from.
enum Backend {
    Sqlite {
        dir: TempDir,
        settings: String,
        made: usize,
    },
    Postgres {
        server: PgServer,
        settings: String,
        made: usize,
    },
}

impl Backend {
    /// The backend `name`, ready to make queues; `None` (with a line saying why) when it
    /// cannot run here.
    fn start(name: &str) -> Option<Backend> {
        match name {
            "sqlite" => {
                let dir = TempDir::new("b7", "sqlite");
                let settings = sqlite_settings(&dir);
                Some(Backend::Sqlite {
                    dir,
                    settings,
                    made: 0,
                })
            }
            "postgres" => {
                let Some(bin) = pg_bin_dir() else {
                    println!(
                        "\npostgres: no PostgreSQL binaries (initdb and postgres in \
                         /usr/lib/postgresql/*/bin or PATH): the PostgreSQL rows are skipped"
                    );
                    return None;
                };
                let server = PgServer::start(&bin);
                let settings = rt().block_on(postgres_settings(&server));
                Some(Backend::Postgres {
                    server,
                    settings,
                    made: 0,
                })
            }
            other => panic!("B7_BACKENDS: unknown backend {other:?} (sqlite | postgres)"),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Backend::Sqlite { .. } => "sqlite",
            Backend::Postgres { .. } => "postgres",
        }
    }

    fn settings(&self) -> &str {
        match self {
            Backend::Sqlite { settings, .. } | Backend::Postgres { settings, .. } => settings,
        }
    }

    /// The spec of a new, empty queue.
    fn fresh(&mut self) -> String {
        match self {
            Backend::Sqlite { dir, made, .. } => {
                *made += 1;
                format!("sqlite:{}", dir.path(&format!("q{made}.sqlite")).display())
            }
            Backend::Postgres { server, made, .. } => {
                *made += 1;
                let db = format!("b7_q{made}");
                rt().block_on(server.execute("postgres", &format!("CREATE DATABASE {db}")));
                server.url(&db)
            }
        }
    }
}

/// SQLite's journal mode and `synchronous` on a connection like the queue's (the queue sets
/// WAL and leaves `synchronous` at the compiled-in default).
fn sqlite_settings(dir: &TempDir) -> String {
    let path = dir.path("settings.sqlite");
    let spec = format!("sqlite:{}", path.display());
    rt().block_on(async { Queue::open(&spec).await.map(drop) })
        .expect("an SQLite queue opens");
    let conn = rusqlite::Connection::open(&path).expect("the file opens");
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .expect("journal_mode");
    let sync: i64 = conn
        .query_row("PRAGMA synchronous", [], |r| r.get(0))
        .expect("synchronous");
    let sync = match sync {
        0 => "OFF",
        1 => "NORMAL (WAL synced at checkpoints only)",
        2 => "FULL (the WAL synced at every commit)",
        3 => "EXTRA",
        _ => "?",
    };
    format!(
        "SQLite {} (bundled), journal_mode {mode}, synchronous {sync}; file on {}",
        rusqlite::version(),
        filesystem_of(dir)
    )
}

fn filesystem_of(dir: &TempDir) -> String {
    let dir = dir.root();
    let out = Command::new("df")
        .args(["--output=fstype,source"])
        .arg(dir)
        .output();
    out.ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .nth(1)
                .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        })
        .unwrap_or_else(|| "?".to_owned())
}

async fn postgres_settings(server: &PgServer) -> String {
    let show = |what: &'static str| async move {
        let client = server.connect("postgres").await;
        let row = client
            .query_one(&format!("SHOW {what}"), &[])
            .await
            .unwrap_or_else(|e| panic!("SHOW {what}: {e}"));
        row.get::<_, String>(0)
    };
    let sync_commit = show("synchronous_commit").await;
    let meaning = if sync_commit == "on" {
        " (a commit returns once its WAL is flushed)"
    } else {
        ""
    };
    format!(
        "PostgreSQL {} on 127.0.0.1 (TCP), the server's defaults: fsync {}, synchronous_commit \
         {sync_commit}{meaning}, wal_sync_method {}, full_page_writes {}; data on {}",
        show("server_version").await,
        show("fsync").await,
        show("wal_sync_method").await,
        show("full_page_writes").await,
        filesystem_of(&server.dir),
    )
}

// ------------------------------------------------------------------------ PostgreSQL

/// A PostgreSQL server of our own on `127.0.0.1`, started as `tests/it/support/postgres.rs`
/// starts the tests' (`initdb` into a temporary directory, the `postgres` user through
/// `setpriv` when we are root, ready when its log says so) but on the server's default
/// durability settings: the tests' runs with `fsync`, `full_page_writes` and
/// `synchronous_commit` off, which would measure a queue that loses commits on a crash.
struct PgServer {
    dir: TempDir,
    port: u16,
    child: Child,
    /// `sh` stopping the server and removing its directory when its stdin (ours) closes: when
    /// this process ends without dropping the server (killed), nothing is left behind.
    watchdog: Child,
}

/// The directory holding `initdb` and `postgres`: the newest `/usr/lib/postgresql/N/bin`,
/// else one in `PATH`.
fn pg_bin_dir() -> Option<PathBuf> {
    let has_all = |dir: &Path| ["initdb", "postgres"].iter().all(|p| dir.join(p).is_file());
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version: u32 = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| has_all(bin))
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Some(bin);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).find(|dir| has_all(dir))
}

impl PgServer {
    fn start(bin: &Path) -> PgServer {
        let dir = TempDir::new("b7", "pg");
        let as_postgres = effective_uid() == 0;
        if as_postgres {
            give_to_postgres(dir.root());
        }
        let command = |program: &str| {
            let program = bin.join(program);
            let mut c = if as_postgres {
                let mut c = Command::new("setpriv");
                c.args([
                    "--reuid=postgres",
                    "--regid=postgres",
                    "--init-groups",
                    "--",
                ]);
                c.arg(program);
                c
            } else {
                Command::new(program)
            };
            c.current_dir(dir.root()).stdin(Stdio::null());
            c
        };
        let data = dir.path("data");
        let out = command("initdb")
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C"])
            .output()
            .expect("initdb runs");
        assert!(
            out.status.success(),
            "initdb failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let mut last = String::new();
        for _ in 0..5 {
            let port = free_port();
            let mut child = command("postgres")
                .arg("-D")
                .arg(&data)
                .args(["-p", &port.to_string(), "-k"])
                .arg(dir.root())
                .args(["-c", "listen_addresses=127.0.0.1"])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("postgres runs");
            let mut lines = BufReader::new(child.stderr.take().expect("piped")).lines();
            let mut said = String::new();
            let ready = loop {
                match lines.next() {
                    Some(Ok(line)) => {
                        said.push_str(&line);
                        said.push('\n');
                        if line.contains("database system is ready to accept connections") {
                            break true;
                        }
                    }
                    _ => break false,
                }
            };
            if ready {
                // The rest of its log is read (and dropped) so a full pipe never stalls it.
                std::thread::spawn(move || lines.map_while(Result::ok).for_each(drop));
                let watchdog = Command::new("sh")
                    .arg("-c")
                    .arg(
                        r#"read _ignored; kill -s INT "$0" 2>/dev/null
                           while kill -0 "$0" 2>/dev/null; do sleep 0.1; done; rm -rf "$1""#,
                    )
                    .arg(child.id().to_string())
                    .arg(dir.root())
                    .stdin(Stdio::piped())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("sh runs");
                return PgServer {
                    dir,
                    port,
                    child,
                    watchdog,
                };
            }
            let _ = child.wait();
            assert!(
                said.contains("could not bind") || said.contains("in use"),
                "postgres did not start:\n{said}"
            );
            last = said;
        }
        panic!("postgres found no free port in 5 tries; the last said:\n{last}");
    }

    fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// CPU time (user + system) of the postmaster, every process it has now (backends, WAL
    /// writer, checkpointer, …) and every one it has reaped.
    fn cpu_time(&self) -> Duration {
        let postmaster = self.child.id();
        let mut ticks = proc_ticks(postmaster, true).map_or(0, |(_, t)| t);
        if let Ok(entries) = std::fs::read_dir("/proc") {
            for entry in entries.flatten() {
                let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse().ok()) else {
                    continue;
                };
                if let Some((ppid, t)) = proc_ticks(pid, false)
                    && ppid == postmaster
                {
                    ticks += t;
                }
            }
        }
        Duration::from_secs_f64(ticks as f64 / 100.0)
    }

    async fn connect(&self, db: &str) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(&self.url(db), tokio_postgres::NoTls)
            .await
            .expect("a connection to the server");
        tokio::spawn(conn);
        client
    }

    async fn execute(&self, db: &str, sql: &str) {
        let client = self.connect(db).await;
        client
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let _ = self.watchdog.kill();
        let _ = self.watchdog.wait();
        // SIGINT: a fast shutdown (backends end, nothing left running), then its exit.
        let _ = Command::new("kill")
            .args(["-s", "INT", "--", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// A process's parent and its CPU ticks (utime + stime, and its reaped children's with
/// `with_children`), from `/proc/PID/stat`.
fn proc_ticks(pid: u32, with_children: bool) -> Option<(u32, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid …`; comm may hold spaces and parentheses.
    let f: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    let n = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    let ppid = n(1) as u32;
    let own = n(11) + n(12);
    Some((
        ppid,
        if with_children {
            own + n(13) + n(14)
        } else {
            own
        },
    ))
}

// ------------------------------------------------------------------------- the parent

#[derive(Debug, Default, Serialize)]
struct BackendResult {
    /// Jobs/s of each timed fill of `jobs` jobs.
    enqueue_per_s: Vec<f64>,
    rows: Vec<Row>,
    /// At a small backlog and at a full one.
    latency: Vec<Latency>,
}

#[derive(Debug, Serialize)]
struct Row {
    name: String,
    processes: usize,
    batch: usize,
    jobs: u64,
    wall_s: f64,
    jobs_per_s: f64,
    /// CPU per job done: the worker processes (the whole queue for SQLite), the server.
    cpu_us_per_job: f64,
    server_cpu_us_per_job: f64,
    /// Workers' and server's CPU over the wall time.
    cores_busy: f64,
    /// A worker stopped at the time limit.
    cut: bool,
    done: u64,
    lost: u64,
    /// Per worker process.
    workers: Vec<Report>,
}

fn run_backend(backend: &mut Backend, k: &Knobs) -> BackendResult {
    let mut out = BackendResult::default();
    let batched = [
        (1, k.batch, k.jobs, Mode::Loop),
        (k.processes, k.batch, k.jobs, Mode::Loop),
        (1, 1, k.single_jobs, Mode::Loop),
        (k.processes, 1, k.single_jobs, Mode::Loop),
        (1, WORKER_CONCURRENCY, k.jobs, Mode::Worker),
    ];
    for (processes, batch, jobs, mode) in batched {
        let spec = backend.fresh();
        let rate = fill(&spec, jobs);
        if jobs == k.jobs {
            out.enqueue_per_s.push(rate);
        }
        let server = match backend {
            Backend::Postgres { server, .. } => Some(&*server),
            Backend::Sqlite { .. } => None,
        };
        let row = run_row(&spec, processes, batch, jobs, mode, k.row_max_s, server);
        println!(
            "  {}: {:.0} jobs/s ({} of {} done in {:.2} s{})",
            row.name,
            row.jobs_per_s,
            row.done,
            row.jobs,
            row.wall_s,
            if row.cut { ", CUT SHORT" } else { "" }
        );
        out.rows.push(row);
    }
    // The same number of jobs timed with nothing else queued, and at the front of a backlog
    // of `jobs` ready jobs (a claim must not cost more the more is queued).
    for backlog in [k.latency_jobs, k.jobs] {
        let spec = backend.fresh();
        fill(&spec, backlog);
        let l = latency(&spec, backlog, k.latency_jobs, k.latency_max_s);
        println!(
            "  one job at a time, {} ready: claim + complete p50 {:.0} µs ({} timed)",
            backlog,
            median(&l.queue_us),
            l.jobs
        );
        out.latency.push(l);
    }
    out
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

fn new_job(i: u64) -> NewJob {
    NewJob::new(
        format!("job-{i:07}"),
        KIND,
        json!({"n": i, "prompt": format!("Item {i}: say something short.")}).to_string(),
    )
}

/// Enqueues `jobs` jobs into the queue at `spec` in batches of [`ENQUEUE_BATCH`]; jobs/s.
fn fill(spec: &str, jobs: u64) -> f64 {
    rt().block_on(async {
        let queue = Queue::open(spec).await.expect("the queue opens");
        let t0 = TokioClock.now();
        let mut added = 0;
        let mut next = 0;
        while next < jobs {
            let end = (next + ENQUEUE_BATCH).min(jobs);
            let batch: Vec<NewJob> = (next..end).map(new_job).collect();
            added += queue
                .enqueue_all(batch, wall_ms(TokioClock.wall()))
                .await
                .expect("enqueue_all");
            next = end;
        }
        let secs = (TokioClock.now() - t0).as_secs_f64();
        assert_eq!(added, jobs, "every job is new");
        jobs as f64 / secs
    })
}

/// A worker process of this bench, started and waiting for its "go".
struct WorkerChild {
    child: Child,
    /// Closed once every report is read: the worker then exits.
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

fn spawn_worker(task: &Task) -> WorkerChild {
    let exe = std::env::current_exe().expect("this bench's path");
    let mut child = Command::new(exe)
        .env(
            WORKER_VAR,
            serde_json::to_string(task).expect("the task as JSON"),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("a worker process starts");
    let stdin = child.stdin.take();
    let stdout = BufReader::new(child.stdout.take().expect("its stdout"));
    WorkerChild {
        child,
        stdin,
        stdout,
    }
}

fn read_line(c: &mut WorkerChild) -> String {
    let mut line = String::new();
    c.stdout.read_line(&mut line).expect("a worker's output");
    assert!(!line.is_empty(), "a worker process ended without reporting");
    line
}

fn run_row(
    spec: &str,
    processes: usize,
    batch: usize,
    jobs: u64,
    mode: Mode,
    max_s: f64,
    server: Option<&PgServer>,
) -> Row {
    let name = match mode {
        Mode::Loop => format!(
            "{processes} process{}, claim_many({batch}) + complete_all",
            if processes == 1 { "" } else { "es" }
        ),
        Mode::Worker => format!("1 process, Worker, concurrency {batch}"),
    };
    let mut children: Vec<WorkerChild> = (0..processes)
        .map(|w| {
            spawn_worker(&Task {
                spec: spec.to_owned(),
                name: format!("w{w}"),
                batch,
                mode,
                max_s,
            })
        })
        .collect();
    for c in &mut children {
        assert_eq!(read_line(c).trim(), "ready", "a worker says it is ready");
    }
    let t0 = TokioClock.now();
    let server_cpu0 = server.map(PgServer::cpu_time);
    for c in &mut children {
        let stdin = c.stdin.as_mut().expect("a worker's stdin");
        writeln!(stdin, "go")
            .and_then(|()| stdin.flush())
            .expect("a worker's stdin");
    }
    let mut workers = Vec::new();
    for c in &mut children {
        let report: Report = serde_json::from_str(&read_line(c)).expect("a worker's report");
        workers.push(report);
    }
    let wall_s = (TokioClock.now() - t0).as_secs_f64();
    // Every worker's backend is still connected: its CPU time counts.
    let server_cpu_s = server
        .map(PgServer::cpu_time)
        .zip(server_cpu0)
        .map_or(0.0, |(after, before)| {
            after.saturating_sub(before).as_secs_f64()
        });
    for c in &mut children {
        drop(c.stdin.take());
    }
    for c in &mut children {
        let status = c.child.wait().expect("a worker exits");
        assert!(status.success(), "a worker process failed: {status}");
    }
    let stats = rt().block_on(async {
        let queue = Queue::open(spec).await.expect("the queue opens");
        queue
            .stats(wall_ms(TokioClock.wall()))
            .await
            .expect("stats")
    });
    let cut = workers.iter().any(|w| w.cut);
    let done: u64 = workers.iter().map(|w| w.completed).sum();
    assert_eq!(
        done, stats.done,
        "{name}: the workers' completions are the done jobs"
    );
    assert_eq!(stats.running, 0, "{name}: no claim is left running");
    if !cut {
        assert_eq!(
            (stats.done, stats.ready),
            (jobs, 0),
            "{name}: every job is done"
        );
    }
    Row {
        name,
        processes,
        batch,
        jobs,
        wall_s,
        jobs_per_s: done as f64 / wall_s,
        cpu_us_per_job: 1e6 * workers.iter().map(|w| w.cpu_s).sum::<f64>() / done.max(1) as f64,
        server_cpu_us_per_job: 1e6 * server_cpu_s / done.max(1) as f64,
        cores_busy: (workers.iter().map(|w| w.cpu_s).sum::<f64>() + server_cpu_s) / wall_s,
        cut,
        done,
        lost: workers.iter().map(|w| w.lost).sum(),
        workers,
    }
}

// ------------------------------------------------------------------- the added latency

#[derive(Debug, Serialize)]
struct Latency {
    /// Ready jobs when the timing started.
    backlog: u64,
    /// Jobs timed.
    jobs: u64,
    /// Stopped at the time limit before `jobs` reached the number asked for.
    cut: bool,
    /// Microseconds per job: claim, complete, both; the file line; the line synced.
    claim_us: Vec<f64>,
    complete_us: Vec<f64>,
    queue_us: Vec<f64>,
    file_us: Vec<f64>,
    file_synced_us: Vec<f64>,
}

/// One job at a time: claim it, complete it; then write its line as the file-based runner
/// does; then write it again and `fdatasync` the file. Interleaved job by job.
fn latency(spec: &str, backlog: u64, jobs: u64, max_s: f64) -> Latency {
    let dir = TempDir::new("b7", "lines");
    let lines = dir.path("results.jsonl");
    let synced = dir.path("synced.jsonl");
    rt().block_on(async {
        let queue = Queue::open(spec).await.expect("the queue opens");
        let (mut writer, _) = ResultsWriter::open(&lines).await.expect("the results file");
        let mut sync_file = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&synced)
            .await
            .expect("the synced file");
        let mut l = Latency {
            backlog,
            jobs: 0,
            cut: false,
            claim_us: Vec::new(),
            complete_us: Vec::new(),
            queue_us: Vec::new(),
            file_us: Vec::new(),
            file_synced_us: Vec::new(),
        };
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let deadline = TokioClock.now() + Duration::from_secs_f64(max_s);
        for _ in 0..jobs.min(backlog) {
            if TokioClock.now() >= deadline {
                l.cut = true;
                break;
            }
            l.jobs += 1;
            let t0 = TokioClock.now();
            let mut claimed = queue
                .claim_many("latency", 1, LEASE, wall_ms(TokioClock.wall()))
                .await
                .expect("a claim");
            let t1 = TokioClock.now();
            let job = claimed.pop().expect("a job is eligible");
            let outcomes = queue
                .complete_all(vec![(job.id.clone(), job.attempt, job.payload.clone())])
                .await
                .expect("a completion");
            let t2 = TokioClock.now();
            assert!(
                outcomes.iter().all(|o| !o.is_lost()),
                "the completion applies"
            );
            l.claim_us.push(us(t1 - t0));
            l.complete_us.push(us(t2 - t1));
            l.queue_us.push(us(t2 - t0));

            let outcome = line_outcome(&job.id, &job.payload);
            let t0 = TokioClock.now();
            writer.write(&outcome).await.expect("a line");
            l.file_us.push(us(TokioClock.now() - t0));

            let line = outcome.to_json_line();
            let t0 = TokioClock.now();
            {
                use tokio::io::AsyncWriteExt;
                sync_file.write_all(line.as_bytes()).await.expect("a line");
                sync_file.flush().await.expect("a flush");
                sync_file.sync_data().await.expect("an fdatasync");
            }
            l.file_synced_us.push(us(TokioClock.now() - t0));
        }
        writer.finish().await.expect("the results file syncs");
        l
    })
}

/// The line the batch runner writes for an answered item.
fn line_outcome(id: &str, text: &str) -> LineOutcome {
    let response = ChatResponse::new(ProviderId::new("openai"), "gpt-4o-mini", text);
    LineOutcome::ok(
        id,
        Answer::from_response(response, Duration::from_millis(840)),
    )
}

// ------------------------------------------------------------------- the worker process

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Mode {
    /// `claim_many` + `complete_all` in a loop.
    Loop,
    /// The real `Worker`.
    Worker,
}

#[derive(Debug, Serialize, Deserialize)]
struct Task {
    spec: String,
    name: String,
    /// The claim batch (`Loop`) or the concurrency (`Worker`).
    batch: usize,
    mode: Mode,
    /// Stop claiming after this long (the row is then reported cut short).
    max_s: f64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Report {
    claimed: u64,
    completed: u64,
    lost: u64,
    /// `claim_many` calls (`Loop`), including the last, empty one.
    claims: u64,
    /// Stopped by the row's time limit, not by an empty queue.
    cut: bool,
    /// From "go" to the last completion, in the worker.
    busy_s: f64,
    /// CPU time (user + system, every thread) from "go" to the last completion.
    cpu_s: f64,
    /// `VmRSS` in KiB after opening the queue, before "go".
    rss_start_kib: u64,
    /// At each of [`MARKS`] reached.
    marks: Vec<Mark>,
    rss_end_kib: u64,
    hwm_kib: u64,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct Mark {
    done: u64,
    rss_kib: u64,
    /// Seconds since "go".
    at_s: f64,
}

/// Reads `VmRSS` and the time at each mark `done` has reached since the last call.
#[derive(Debug)]
struct Marks {
    go: tokio::time::Instant,
    next: usize,
    taken: Vec<Mark>,
}

impl Marks {
    fn new(go: tokio::time::Instant) -> Marks {
        Marks {
            go,
            next: 0,
            taken: Vec::new(),
        }
    }

    fn check(&mut self, done: u64) {
        while self.next < MARKS.len() && done >= MARKS[self.next] {
            self.taken.push(Mark {
                done: MARKS[self.next],
                rss_kib: common::rss_kib().0,
                at_s: (TokioClock.now() - self.go).as_secs_f64(),
            });
            self.next += 1;
        }
    }
}

fn worker_process(task: &Task) {
    let rt = rt();
    rt.block_on(async {
        let queue = Queue::open(&task.spec).await.expect("the queue opens");
        let rss_start_kib = common::rss_kib().0;
        let mut stdout = std::io::stdout();
        writeln!(stdout, "ready")
            .and_then(|()| stdout.flush())
            .expect("stdout");
        let mut go = String::new();
        std::io::stdin()
            .read_line(&mut go)
            .expect("the parent's go");
        if go.trim() != "go" {
            return; // the parent is gone
        }
        let t0 = TokioClock.now();
        let deadline = t0 + Duration::from_secs_f64(task.max_s);
        let cpu0 = common::cpu_time(None);
        let mut report = match task.mode {
            Mode::Loop => claim_loop(&queue, task, t0, deadline).await,
            Mode::Worker => run_worker(&queue, task, t0, deadline).await,
        };
        report.busy_s = (TokioClock.now() - t0).as_secs_f64();
        report.cpu_s = common::cpu_time(None).saturating_sub(cpu0).as_secs_f64();
        report.rss_start_kib = rss_start_kib;
        (report.rss_end_kib, report.hwm_kib) = common::rss_kib();
        let line = serde_json::to_string(&report).expect("the report as JSON");
        writeln!(stdout, "{line}")
            .and_then(|()| stdout.flush())
            .expect("stdout");
        // The connections stay open (a server's backends alive, their CPU time readable)
        // until the parent has read every report and closes our stdin.
        let _ = std::io::stdin().read_line(&mut go);
        drop(queue);
    });
    drop(rt);
}

async fn claim_loop(
    queue: &Queue,
    task: &Task,
    go: tokio::time::Instant,
    deadline: tokio::time::Instant,
) -> Report {
    let mut r = Report::default();
    let mut marks = Marks::new(go);
    loop {
        if TokioClock.now() >= deadline {
            r.cut = true;
            break;
        }
        let jobs = queue
            .claim_many(&task.name, task.batch, LEASE, wall_ms(TokioClock.wall()))
            .await
            .expect("a claim");
        r.claims += 1;
        if jobs.is_empty() {
            break;
        }
        r.claimed += jobs.len() as u64;
        let results = jobs
            .into_iter()
            .map(|j| (j.id, j.attempt, j.payload))
            .collect();
        for outcome in queue.complete_all(results).await.expect("completions") {
            if outcome.is_lost() {
                r.lost += 1;
            } else {
                r.completed += 1;
            }
        }
        marks.check(r.completed);
    }
    r.marks = marks.taken;
    r
}

/// The real `Worker` (an [`Echo`] handler), until the queue is drained or the deadline.
async fn run_worker(
    queue: &Queue,
    task: &Task,
    go: tokio::time::Instant,
    deadline: tokio::time::Instant,
) -> Report {
    let (worker, echo) = echo_worker(queue, task, go);
    let stop = Stop::new();
    let timer = {
        let stop = stop.clone();
        tokio::spawn(async move {
            TokioClock.sleep_until(deadline).await;
            stop.stop();
        })
    };
    let r = worker.run(&stop).await.expect("the worker runs");
    timer.abort();
    let marks = std::mem::replace(&mut *echo.marks.lock().expect("marks"), Marks::new(go));
    Report {
        claimed: r.claimed,
        completed: r.completed,
        lost: r.lost,
        cut: r.ended != Ended::Drained,
        marks: marks.taken,
        ..Report::default()
    }
}

/// Answers the payload; reads the RSS at the marks of jobs handled.
struct Echo {
    handled: AtomicU64,
    marks: Mutex<Marks>,
}

#[async_trait]
impl Handler for Echo {
    async fn run(&self, ctx: &JobContext) -> llm_failover::Result<String> {
        let n = self.handled.fetch_add(1, Ordering::Relaxed) + 1;
        if MARKS.contains(&n) {
            self.marks.lock().expect("marks").check(n);
        }
        Ok(ctx.job().payload.clone())
    }
}

fn echo_worker(queue: &Queue, task: &Task, go: tokio::time::Instant) -> (Worker, Arc<Echo>) {
    // A provider the handler never calls (the discard port on loopback): the client is only
    // what a worker is built with.
    let adapter = OpenAi::new(
        ProviderId::new("unused"),
        "http://127.0.0.1:9/v1".parse().expect("a URL"),
    );
    let client = Client::builder()
        .provider(
            Arc::new(adapter),
            ProviderSettings::new().credential(Credential::new("unused")),
        )
        .build()
        .expect("the client builds");
    let echo = Arc::new(Echo {
        handled: AtomicU64::new(0),
        marks: Mutex::new(Marks::new(go)),
    });
    let worker = Worker::builder(queue.clone(), client)
        .name(task.name.clone())
        .handler(KIND, echo.clone())
        .concurrency(task.batch)
        .lease(LEASE)
        .until_drained(Duration::from_secs(60))
        .build()
        .expect("the worker builds");
    (worker, echo)
}

// ----------------------------------------------------------------------------- output

fn print_backend(backend: &Backend, r: &BackendResult, k: &Knobs) {
    let name = backend.name();
    let server_side = matches!(backend, Backend::Postgres { .. });
    println!(
        "\n{name}: enqueue_all in batches of {ENQUEUE_BATCH}, {} jobs into an empty queue: \
         {:.0} jobs/s (median of {}: {})",
        k.jobs,
        median(&r.enqueue_per_s),
        r.enqueue_per_s.len(),
        r.enqueue_per_s
            .iter()
            .map(|x| format!("{x:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut t = Table::new([
        format!("{name}: claimed and completed"),
        "jobs done".to_owned(),
        "wall s".to_owned(),
        "jobs/s".to_owned(),
        "claim calls per process".to_owned(),
        "lost".to_owned(),
        "CPU µs/job: workers".to_owned(),
        "server".to_owned(),
        "cores busy".to_owned(),
    ]);
    for row in &r.rows {
        let claims: Vec<String> = row
            .workers
            .iter()
            .map(|w| match w.claims {
                0 => "-".to_owned(),
                n => n.to_string(),
            })
            .collect();
        t.row([
            row.name.clone(),
            if row.cut {
                format!("{}/{} CUT", row.done, row.jobs)
            } else {
                row.done.to_string()
            },
            f(row.wall_s, 2),
            f(row.jobs_per_s, 0),
            claims.join(" "),
            row.lost.to_string(),
            f(row.cpu_us_per_job, 0),
            if server_side {
                f(row.server_cpu_us_per_job, 0)
            } else {
                "-".to_owned()
            },
            f(row.cores_busy, 2),
        ]);
    }
    t.print();

    let mib = |k: u64| k as f64 / 1024.0;
    let mut t = Table::new([
        format!("{name}: the lone worker process"),
        "RSS MiB: after open".to_owned(),
        "10k done".to_owned(),
        "50k done".to_owned(),
        "100k done".to_owned(),
        "VmHWM".to_owned(),
        "jobs/s: 0-10k".to_owned(),
        "10k-50k".to_owned(),
        "50k-100k".to_owned(),
    ]);
    for row in r
        .rows
        .iter()
        .filter(|row| row.processes == 1 && row.batch > 1)
    {
        let w = &row.workers[0];
        let mark = |done: u64| w.marks.iter().find(|m| m.done == done).copied();
        let rss = |done: u64| mark(done).map_or("-".to_owned(), |m| f(mib(m.rss_kib), 1));
        let rate = |from: u64, to: u64| {
            let t0 = if from == 0 {
                Some(0.0)
            } else {
                mark(from).map(|m| m.at_s)
            };
            match (t0, mark(to)) {
                (Some(t0), Some(m)) => f((to - from) as f64 / (m.at_s - t0), 0),
                _ => "-".to_owned(),
            }
        };
        t.row([
            row.name.clone(),
            f(mib(w.rss_start_kib), 1),
            rss(MARKS[0]),
            rss(MARKS[1]),
            rss(MARKS[2]),
            f(mib(w.hwm_kib), 1),
            rate(0, MARKS[0]),
            rate(MARKS[0], MARKS[1]),
            rate(MARKS[1], MARKS[2]),
        ]);
    }
    t.print();

    for l in &r.latency {
        let file50 = median(&l.file_us);
        let file99 = percentile(&l.file_us, 99.0);
        let mut t = Table::new([
            format!(
                "{name}: one job at a time, {} ready, {} timed{}, µs",
                l.backlog,
                l.jobs,
                if l.cut { " (CUT)" } else { "" }
            ),
            "p50".to_owned(),
            "p99".to_owned(),
            "mean".to_owned(),
            "p50 ÷ file p50".to_owned(),
            "p99 ÷ file p99".to_owned(),
        ]);
        let rows: [(&str, &Vec<f64>); 5] = [
            ("claim_many(1)", &l.claim_us),
            ("complete_all(1)", &l.complete_us),
            ("queue: claim + complete", &l.queue_us),
            ("baseline: ResultsWriter::write (file line)", &l.file_us),
            ("file line + fdatasync", &l.file_synced_us),
        ];
        for (label, v) in rows {
            let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
            t.row([
                label.to_owned(),
                f(median(v), 0),
                f(percentile(v, 99.0), 0),
                f(mean, 0),
                f(median(v) / file50, 1),
                f(percentile(v, 99.0) / file99, 1),
            ]);
        }
        t.print();
    }
}
