//! The examples and the command as their users run them: the binary of an example or the
//! `llm-failover` command, built by the cargo that runs the tests (or a bench, in its own
//! profile), and a fresh directory per run.
//! (Shared with `benches/shared.rs` through `#[path]`.)

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

/// The `llm-failover` command (crate `cli/`), built once per test process (the tests that run
/// the batch as its users do share it).
pub fn batch_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| build_cli(None))
}

/// The `llm-failover` command, built now (in `profile`, for benches; else the tests' own),
/// with its PostgreSQL queue and Redis (the tests run it on both).
pub fn build_cli(profile: Option<&str>) -> PathBuf {
    let mut cargo = Command::new(env!("CARGO"));
    cargo.current_dir(env!("CARGO_MANIFEST_DIR")).args([
        "build",
        "--quiet",
        "-p",
        "llm-failover-cli",
        "--bin",
        "llm-failover",
        "--features",
        "postgres,redis,metrics",
        "--message-format=json",
    ]);
    if let Some(profile) = profile {
        cargo.args(["--profile", profile]);
    }
    executable(cargo, "llm-failover", "the llm-failover command")
}

/// The executable of example `name`, built now with the features of this build.
pub fn build_example(name: &str) -> PathBuf {
    let mut cargo = Command::new(env!("CARGO"));
    cargo.current_dir(env!("CARGO_MANIFEST_DIR")).args([
        "build",
        "--quiet",
        "--example",
        name,
        "--message-format=json",
    ]);
    let features: Vec<&str> = [
        (cfg!(feature = "rustls"), "rustls"),
        (cfg!(feature = "native-tls"), "native-tls"),
        (cfg!(feature = "tokenizer"), "tokenizer"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    cargo.args(["--no-default-features", "--features", &features.join(",")]);
    executable(cargo, name, &format!("the {name} example"))
}

/// Runs `cargo` (a build with `--message-format=json`) and returns the executable of target
/// `name` it built.
fn executable(mut cargo: Command, name: &str, what: &str) -> PathBuf {
    let out = cargo.stderr(Stdio::inherit()).output().expect("cargo runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        // With --message-format=json the compiler's own words are on stdout: show them.
        let said: Vec<String> = stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["reason"] == "compiler-message")
            .filter_map(|v| v["message"]["rendered"].as_str().map(str::to_owned))
            .collect();
        panic!("building {what} failed:\n{}", said.join("\n"));
    }
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["reason"] == "compiler-artifact" && v["target"]["name"] == name)
        .find_map(|v| v["executable"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| panic!("cargo names {what}'s executable"))
}

/// A fresh directory, removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    /// `<tmp>/llm-failover-<what>-<name>-<pid>`, empty.
    pub fn new(what: &str, name: &str) -> TempDir {
        let dir =
            std::env::temp_dir().join(format!("llm-failover-{what}-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    /// A path inside it.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `command` (stdin closed, stdout and stderr read) to its end and returns what it
/// printed; a run that has not ended after `limit` is killed (SIGKILL) and panics naming
/// `what` — the bugs these runs guard against hung forever.
#[allow(dead_code)] // a bench that includes this file runs no example to its end
pub fn output_within(mut command: Command, limit: Duration, what: &str) -> Output {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what} does not start: {e}"));
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.unwrap_or_else(|e| panic!("{what} could not be waited for: {e}")),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("{what} did not end within {limit:?}");
        }
    }
}

/// Whether `pid` still runs `program` as a child of this process. A child that has exited and
/// been waited for gives its pid back to the system, which may give it to any other process
/// (this test's harness among them): check this before signalling a pid kept from a spawn.
#[allow(dead_code)] // a bench that includes this file signals nothing
pub fn still_ours(pid: u32, program: &std::ffi::OsStr) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // pid (comm) state ppid …: the fields after the last ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let parent = fields.get(1).and_then(|ppid| ppid.parse::<u32>().ok());
    let running = fields
        .first()
        .is_some_and(|state| *state != "Z" && *state != "X");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let argv0 = cmdline.split(|&b| b == 0).next().unwrap_or_default();
    parent == Some(std::process::id()) && running && argv0 == program.as_encoded_bytes()
}

/// One fleet of example processes at a time, across every test file that runs several
/// (`shared_processes`, `jobs_soak`): on a two-core machine two fleets at once starve each
/// other past their time limits.
#[allow(dead_code)] // a bench that includes this file runs no fleet
pub static FLEETS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Writes a providers.toml at `path` with one environment `env` naming one OpenAI-style
/// provider `provider` at `base_url`, its key read from the variable `key_var`, no limits
/// (learned from the headers).
#[allow(dead_code)] // a bench that includes this file writes its own
pub fn write_one_provider_config(
    path: &Path,
    env: &str,
    provider: &str,
    base_url: &str,
    key_var: &str,
) {
    let toml = format!(
        r#"default_environment = "{env}"

[environments.{env}]
chat = ["{provider}"]

[providers.{provider}]
kind = "openai"
base_url = "{base_url}"
model = "gpt-4o-mini"
api_key_env = {{ {env} = "{key_var}" }}
"#
    );
    std::fs::write(path, toml).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

/// A loopback port nobody listens on right now.
#[allow(dead_code)] // not every includer starts a server
pub fn free_port() -> u16 {
    std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free loopback port: {e}"))
}

/// Result lines of a results file by `id`, or `line N` for a bad line's report; fails on a
/// repeated key or a line with both or neither (a missing file has none).
#[allow(dead_code)] // a bench that includes this file reads its own
pub fn results(path: &Path) -> std::collections::BTreeMap<String, Value> {
    let mut out = std::collections::BTreeMap::new();
    let text = std::fs::read_to_string(path).unwrap_or_default();
    for l in text.lines() {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        let key = match (&v["id"], &v["line"]) {
            (Value::String(id), Value::Null) => id.clone(),
            (Value::Null, Value::Number(n)) => format!("line {n}"),
            _ => panic!("a result line has exactly one of id and line: {l}"),
        };
        assert!(out.insert(key.clone(), v).is_none(), "{key} twice");
    }
    out
}

/// The real time, to bound and measure child processes; no logic waits on it.
#[allow(dead_code)] // not every includer times a process
#[expect(
    clippy::disallowed_methods,
    reason = "bounds and measures child processes; no logic waits on it"
)]
pub fn real_now() -> std::time::Instant {
    std::time::Instant::now()
}

/// Kills `child` (SIGKILL, a crash) once `ready` says the state the test waits for is
/// reached: looked at every 20 ms while the child still runs, for at most `limit` (the wait
/// is for another process, not for logic). `what` names the state in a failure.
#[allow(dead_code)] // not every includer kills a process
pub fn kill_when(
    mut child: std::process::Child,
    limit: Duration,
    what: &str,
    mut ready: impl FnMut(&tokio::runtime::Runtime) -> bool,
) {
    use llm_failover::clock::{Clock, TokioClock};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let started = real_now();
    while !ready(&rt) {
        assert!(started.elapsed() < limit, "{what}: not in time");
        assert!(
            child.try_wait().unwrap().is_none(),
            "it ended before {what}"
        );
        rt.block_on(TokioClock.sleep_until(TokioClock.now() + Duration::from_millis(20)));
    }
    assert!(still_ours(child.id(), batch_bin().as_os_str()));
    child.kill().unwrap();
    child.wait().unwrap();
}

/// An emulator on a runtime of its own, serving while the test thread drives processes.
#[allow(dead_code)] // a bench that includes this file starts its own
pub struct Served {
    pub emu: llm_failover_emulator::Emulator,
    _rt: tokio::runtime::Runtime,
}

#[allow(dead_code)]
impl Served {
    /// Starts `builder`'s emulator on a runtime of one worker thread.
    pub fn start(builder: llm_failover_emulator::EmulatorBuilder) -> Served {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let emu = rt.block_on(builder.start()).expect("the emulator starts");
        Served { emu, _rt: rt }
    }
}
