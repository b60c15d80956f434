//! Shared code of the benchmarks: knobs from the environment, the machine's description, wall
//! and CPU time, memory, small statistics, a plain-text table, one JSON line per run in
//! `target/bench-results/`, and the deterministic prompt set ([`prompts`]).
//!
//! Benchmarks measure real time, so this is the one place outside `src/clock.rs` that reads
//! the wall clock (`clippy.toml` bans it elsewhere, for good reasons that do not apply here).

#![allow(dead_code, unreachable_pub)]

pub mod prompts;
pub mod wire;

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

/// A knob: `name` from the environment, else `default` (a malformed value is a loud error,
/// not a silent default).
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => match v.trim().parse() {
            Ok(x) => x,
            Err(_) => panic!("{name}={v:?} does not parse"),
        },
        Err(_) => default,
    }
}

/// Now, on the wall clock (benchmarks measure real time).
#[expect(
    clippy::disallowed_methods,
    reason = "benchmarks measure wall-clock time"
)]
pub fn wall() -> Instant {
    Instant::now()
}

#[expect(
    clippy::disallowed_methods,
    reason = "a timestamp for the results file"
)]
fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The machine, as BENCHMARKS.md states it.
#[derive(Clone, Debug)]
pub struct Machine {
    /// Cores available to this process.
    pub nproc: usize,
    /// `uname -r`.
    pub kernel: String,
    /// `/proc/loadavg`'s first three fields, at the time of the call.
    pub loadavg: String,
}

/// Describes the machine now.
pub fn machine() -> Machine {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    Machine {
        nproc: std::thread::available_parallelism().map_or(0, usize::from),
        kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
        loadavg: read("/proc/loadavg")
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    }
}

impl Machine {
    /// Prints the header line every bench starts with.
    pub fn print(&self, bench: &str) {
        println!(
            "{bench}: nproc {}, kernel {}, load average {}",
            self.nproc, self.kernel, self.loadavg
        );
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({"nproc": self.nproc, "kernel": self.kernel, "loadavg": self.loadavg})
    }
}

/// Appends one JSON line to `target/bench-results/{bench}.jsonl` (with the machine and a
/// timestamp), so BENCHMARKS.md can quote runs exactly.
pub fn record(bench: &str, machine: &Machine, run: serde_json::Value) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-results");
    let line = serde_json::json!({
        "bench": bench,
        "unix": unix_secs(),
        "machine": machine.json(),
        "run": run,
    });
    let written = std::fs::create_dir_all(&dir).and_then(|()| {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(format!("{bench}.jsonl")))?;
        writeln!(f, "{line}")
    });
    if let Err(e) = written {
        eprintln!("could not write target/bench-results/{bench}.jsonl: {e}");
    }
}

/// The `p`-th percentile (0..=100) of `values` by nearest rank; NaN when empty.
pub fn percentile(values: &[f64], p: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// The median (mean of the two middle values for an even count); NaN when empty.
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// CPU time used so far (user + system), from `/proc/self/stat`: the whole process, or the
/// threads whose name starts with `prefix` (`/proc/self/task/*`). Clock-tick resolution
/// (10 ms on Linux), enough over runs of seconds.
pub fn cpu_time(prefix: Option<&str>) -> Duration {
    const TICKS_PER_SEC: f64 = 100.0;
    // utime and stime are fields 14 and 15; the name (field 2) may hold spaces, so count
    // from the closing parenthesis.
    let ticks = |stat: &str| -> u64 {
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            return 0;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        let n = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
        n(11) + n(12)
    };
    let total = match prefix {
        None => ticks(&std::fs::read_to_string("/proc/self/stat").unwrap_or_default()),
        Some(prefix) => std::fs::read_dir("/proc/self/task")
            .map(|dir| {
                dir.flatten()
                    .filter(|t| {
                        std::fs::read_to_string(t.path().join("comm"))
                            .is_ok_and(|c| c.trim_end().starts_with(prefix))
                    })
                    .map(|t| {
                        ticks(&std::fs::read_to_string(t.path().join("stat")).unwrap_or_default())
                    })
                    .sum()
            })
            .unwrap_or(0),
    };
    Duration::from_secs_f64(total as f64 / TICKS_PER_SEC)
}

/// Resident memory now and its high-water mark, in KiB (`VmRSS`, `VmHWM`).
pub fn rss_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// A plain-text table: the first column left-aligned, the others right-aligned.
#[derive(Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles.
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Self {
        Table {
            header: header.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row.
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    /// Renders the table.
    pub fn render(&self) -> String {
        let cols = self.header.len();
        let mut width = vec![0; cols];
        for r in std::iter::once(&self.header).chain(&self.rows) {
            for (i, c) in r.iter().enumerate().take(cols) {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        let line = |out: &mut String, r: &[String]| {
            for (i, w) in width.iter().enumerate() {
                let c = r.get(i).map_or("", String::as_str);
                let pad = w - c.chars().count().min(*w);
                if i > 0 {
                    out.push_str("  ");
                }
                if i == 0 {
                    let _ = write!(out, "{c}{}", " ".repeat(pad));
                } else {
                    let _ = write!(out, "{}{c}", " ".repeat(pad));
                }
            }
            out.push('\n');
        };
        line(&mut out, &self.header);
        let rule: Vec<String> = width.iter().map(|w| "-".repeat(*w)).collect();
        line(&mut out, &rule);
        for r in &self.rows {
            line(&mut out, r);
        }
        out
    }

    /// Prints the table.
    pub fn print(&self) {
        print!("{}", self.render());
    }
}

/// `x` with `digits` decimals.
pub fn f(x: f64, digits: usize) -> String {
    if x.is_finite() {
        format!("{x:.digits$}")
    } else {
        "-".to_owned()
    }
}

/// A tokio runtime with `threads` workers named `{name}-…` (so [`cpu_time`] can tell runtimes
/// apart).
pub fn runtime(name: &str, threads: usize) -> tokio::runtime::Runtime {
    let name = name.to_owned();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .thread_name_fn(move || format!("{name}-w"))
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// CPU time used so far by the calling thread (`/proc/thread-self/stat`), clock-tick
/// resolution.
pub fn thread_cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default();
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return Duration::ZERO;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    Duration::from_secs_f64((n(11) + n(12)) as f64 / 100.0)
}
