//! The default batch as a user lives it (issue 32): patience that holds while the only
//! provider says nothing but `429 Retry-After: 1` (exit 75, everything queued, a rerun after
//! it recovers finishes), one line per input line across reruns and a kill -9, and one
//! answer per question when two inputs share ids on one queue (both backends) or a prompt is
//! edited under an old id.
//!
//! The binary runs as separate processes (as a user runs it); the emulator answers each
//! prompt with words drawn from a hash of it, so an answer tells which prompt it answers.
#![cfg(unix)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::PoisonError;
use std::time::Duration;

use llm_failover::batch::Stop;
use llm_failover::clock::{Clock, TokioClock};
use llm_failover::ratelimit::Limits;
use llm_failover::{ChatRequest, Client, Credential};
use llm_failover_emulator::{Emulator, Fault, ProviderConfig, RetryAfter};
use llm_failover_queue::{Queue, wall_ms};
use llm_failover_queue::{QueuedJob, QueuedReport};
use serde_json::json;

use crate::support::examples::{
    FLEETS, Served, TempDir, batch_bin, kill_when, output_within, real_now, results,
    write_one_provider_config,
};
use crate::support::postgres::PgServer;

const PROVIDER: &str = "openai";
const KEY_VAR: &str = "BATCH_DEFAULTS_EMU_KEY";
const KEY: &str = "sk-batch-defaults-1f2e3d";

/// A run's bound: past it the process is killed and the test fails.
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// The emulator, on a runtime of its own, serving while the test thread runs the command.
fn start_provider() -> Served {
    Served::start(Emulator::builder().provider(ProviderConfig::openai(PROVIDER).with_key(KEY)))
}

fn always_429(emu: &Emulator) {
    let fault = Fault::RateLimit {
        retry_after: RetryAfter::Seconds(1),
    };
    emu.set_fault_mix(PROVIDER, 1, [(1.0, fault)]);
}

fn prompts(ids: &[&str], prefix: &str) -> Vec<String> {
    ids.iter()
        .map(|id| {
            json!({"id": id, "prompt": format!("{prefix} question {id}"), "max_tokens": 16})
                .to_string()
        })
        .collect()
}

fn write(dir: &TempDir, name: &str, lines: &[String]) -> PathBuf {
    let path = dir.path(name);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

fn input_lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count()
}

/// One run of the binary with `args`, in `dir`; its exit code, stderr and how long it took.
fn run(dir: &TempDir, args: &[OsString]) -> (Option<i32>, String, Duration) {
    let mut command = Command::new(batch_bin());
    command
        .args(args)
        .current_dir(dir.root())
        .env_remove("RUST_LOG")
        .env_remove("LLM_FAILOVER_ENV")
        .env_remove("LLM_FAILOVER_REDIS_URL")
        .env("NO_COLOR", "1")
        .env(KEY_VAR, KEY);
    let started = real_now();
    let out = output_within(command, RUN_LIMIT, "the batch example");
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains(KEY), "the key was printed:\n{stderr}");
    (out.status.code(), stderr, took)
}

fn args(pairs: &[(&str, &dyn AsRef<std::ffi::OsStr>)]) -> Vec<OsString> {
    let mut out = Vec::new();
    for (flag, value) in pairs {
        out.push(OsString::from(flag));
        out.push(value.as_ref().to_owned());
    }
    out
}

#[test]
fn a_provider_that_only_says_429_ends_the_run_within_its_patience_and_a_rerun_finishes() {
    let _one = FLEETS.lock().unwrap_or_else(PoisonError::into_inner);
    let provider = start_provider();
    always_429(&provider.emu);
    let dir = TempDir::new("batch-defaults", "patience");
    let config = dir.path("providers.toml");
    let base = provider.emu.base_url(PROVIDER).to_string();
    write_one_provider_config(&config, "only", PROVIDER, &base, KEY_VAR);
    let input = write(&dir, "in.jsonl", &prompts(&["a", "b"], "Patience"));
    let output = dir.path("out.jsonl");
    let queue = dir.path("queue.sqlite");
    let spec = format!("sqlite:{}", queue.display());
    let argv = args(&[
        ("--config", &config),
        ("--input", &input),
        ("--output", &output),
        ("--queue", &spec),
        ("--patience-s", &"5"),
    ]);

    let (code, stderr, took) = run(&dir, &argv);
    assert_eq!(code, Some(75), "out of patience:\n{stderr}");
    // Patience (5 s) plus at most one in-process wait (the default 10 s), and some slack for
    // a loaded machine: never the item's hour.
    assert!(
        took < Duration::from_secs(5 + 10 + 10),
        "took {took:?}:\n{stderr}"
    );
    let sent = provider.emu.counters(PROVIDER).requests;
    assert!(sent >= 2, "each item was tried: {sent}");
    let stats = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let q = Queue::open(&spec).await.unwrap();
        q.stats(wall_ms(TokioClock.wall())).await.unwrap()
    });
    assert_eq!(
        (stats.ready, stats.running, stats.done, stats.dead),
        (2, 0, 0, 0),
        "nothing failed, everything queued: {stats:?}"
    );
    assert!(results(&output).is_empty(), "no result yet");

    provider.emu.set_fault_mix(PROVIDER, 1, []); // recovered
    let (code, stderr, rerun) = run(&dir, &argv);
    eprintln!(
        "only 429s: out of patience after {took:?} ({sent} requests); the rerun took {rerun:?}"
    );
    assert_eq!(code, Some(0), "{stderr}");
    let lines = results(&output);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines.values().all(|l| l["ok"] == true), "{lines:?}");
}

#[test]
fn reruns_and_a_kill_mid_run_leave_exactly_one_line_per_input_line() {
    let _one = FLEETS.lock().unwrap_or_else(PoisonError::into_inner);
    let dir = TempDir::new("batch-defaults", "one-line");
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/prompts.jsonl");
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/providers.toml");
    let want = input_lines(Path::new(demo));
    let demo_run = |output: &Path| {
        args(&[
            ("--config", &config),
            ("--env", &"demo"),
            ("--input", &demo),
            ("--output", &output),
        ])
    };

    // The demo, then the same command again: one line per input line both times.
    let output = dir.path("results.jsonl");
    for n in 1..=2 {
        let (code, stderr, _) = run(&dir, &demo_run(&output));
        assert_eq!(code, Some(0), "run {n}:\n{stderr}");
        assert_eq!(results(&output).len(), want, "run {n}:\n{stderr}");
    }

    // A run killed with SIGKILL once some items are done, then the same command again.
    let output = dir.path("killed.jsonl");
    let queue = dir.path("killed.jsonl.queue.sqlite");
    let child = Command::new(batch_bin())
        .args(demo_run(&output))
        .current_dir(dir.root())
        .env_remove("RUST_LOG")
        .env_remove("LLM_FAILOVER_ENV")
        .env_remove("LLM_FAILOVER_REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    kill_when(child, RUN_LIMIT, "20 items done", |rt| {
        let done = rt.block_on(async {
            let q = Queue::open(&format!("sqlite:{}", queue.display()))
                .await
                .ok()?;
            q.stats(wall_ms(TokioClock.wall()))
                .await
                .ok()
                .map(|s| s.done)
        });
        done.is_some_and(|d| d >= 20)
    });
    let (code, stderr, _) = run(&dir, &demo_run(&output));
    assert_eq!(code, Some(0), "after the kill:\n{stderr}");
    assert_eq!(results(&output).len(), want, "after the kill:\n{stderr}");
}

/// A client of our own on the emulator's OpenAI-style provider, without limits.
fn client(emu: &Emulator) -> Client {
    let openai = llm_failover::provider::openai::OpenAi::new(
        llm_failover::ProviderId::new(PROVIDER),
        emu.base_url(PROVIDER).parse().unwrap(),
    )
    .with_chat_model("gpt-4o-mini");
    Client::builder()
        .provider(
            std::sync::Arc::new(openai),
            llm_failover::ProviderSettings::new().credential(Credential::new(emu.key(PROVIDER))),
        )
        .build()
        .unwrap()
}

/// The emulator's OpenAI-style provider, in this process, and a client of our own on it.
async fn emulated() -> (Emulator, Client) {
    let emu = Emulator::builder()
        .provider(ProviderConfig::openai(PROVIDER))
        .start()
        .await
        .unwrap();
    let client = client(&emu);
    (emu, client)
}

/// `input` run into `output` on the SQLite queue `q.sqlite` of `dir`.
async fn run_queued(client: &Client, dir: &TempDir, input: &Path, output: &Path) -> QueuedReport {
    let queue = Queue::open(&format!("sqlite:{}", dir.path("q.sqlite").display()))
        .await
        .unwrap();
    QueuedJob::new(input, output, queue)
        .run(client, &Stop::new())
        .await
        .unwrap()
}

/// The text each prompt gets when asked alone.
async fn asked_alone(client: &Client, prompt: &str) -> String {
    let request = ChatRequest::from_prompt(prompt).max_tokens(16);
    client.chat(request).await.unwrap().text
}

async fn one_answer_per_question(spec: String) {
    let (_emu, client) = emulated().await;
    let dir = TempDir::new("batch-defaults", "one-answer");
    let ids = ["q1", "q2", "q3", "q4", "q5"];
    let a = write(&dir, "team-a.jsonl", &prompts(&ids, "Alpha"));
    let b = write(&dir, "team-b.jsonl", &prompts(&ids, "Beta"));
    let queue = Queue::open(&spec).await.unwrap();
    let run = |input: &Path, output: &Path| {
        let job = QueuedJob::new(input, output, queue.clone());
        let client = client.clone();
        async move { job.run(&client, &Stop::new()).await }
    };
    let (out_a, out_b) = (dir.path("a.out.jsonl"), dir.path("b.out.jsonl"));
    run(&a, &out_a).await.unwrap();
    let report = run(&b, &out_b).await.unwrap();
    assert_eq!(report.enqueued, 5, "another input's questions are new jobs");
    for (output, prefix) in [(&out_a, "Alpha"), (&out_b, "Beta")] {
        let lines = results(output);
        assert_eq!(lines.len(), 5, "{lines:?}");
        for id in ids {
            let want = asked_alone(&client, &format!("{prefix} question {id}")).await;
            assert_eq!(lines[id]["text"], want, "{prefix} {id} from its own prompt");
        }
    }

    // A prompt edited under an old id, rerun into the same results file: asked anew.
    let mut edited = prompts(&ids, "Alpha");
    edited[2] = json!({"id": "q3", "prompt": "Gamma question q3", "max_tokens": 16}).to_string();
    let a = write(&dir, "team-a.jsonl", &edited);
    let report = run(&a, &out_a).await.unwrap();
    assert_eq!((report.enqueued, report.worker.completed), (1, 1));
    let lines = results(&out_a);
    assert_eq!(lines.len(), 5);
    assert_eq!(
        lines["q3"]["text"],
        asked_alone(&client, "Gamma question q3").await
    );
    assert_eq!(
        lines["q1"]["text"],
        asked_alone(&client, "Alpha question q1").await
    );
}

#[tokio::test]
async fn two_inputs_sharing_ids_on_one_sqlite_queue_each_get_their_own_answers() {
    let dir = TempDir::new("batch-defaults", "shared-sqlite");
    one_answer_per_question(format!("sqlite:{}", dir.path("q.sqlite").display())).await;
}

#[tokio::test]
async fn two_inputs_sharing_ids_on_one_postgres_queue_each_get_their_own_answers() {
    one_answer_per_question(PgServer::shared().fresh_url()).await;
}

/// The only provider answers 503 from 5 s into a 600-item batch for 240 s (issue 32's
/// outage), on a clock 25 times faster than real time shared with the emulator (a manual
/// clock that jumps on every sleep would let the items overtake each other): all 600 answered
/// in one run, few requests while the provider was down (the breaker's probes, its cooldown
/// doubling to the default cap of 30 s), and the run over soon after the provider's return.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_four_minute_outage_is_ridden_out_in_one_run_with_few_probes_and_a_prompt_recovery() {
    use llm_failover::clock::FastClock;
    use llm_failover::rng::SeededRng;
    use llm_failover_emulator::TimeSource;
    use std::sync::Arc;

    const ITEMS: usize = 600;
    const RPM: u64 = 1_200;
    let (outage_from, outage_for) = (Duration::from_secs(5), Duration::from_secs(240));
    let clock = FastClock::new(25.0);
    let emu = Arc::new(
        Emulator::builder()
            .provider(
                ProviderConfig::openai(PROVIDER)
                    .with_limits(llm_failover_emulator::Limits::per_minute(RPM, 10_000_000)),
            )
            .time_source(TimeSource::new(move || (clock.now(), clock.wall())))
            .start()
            .await
            .unwrap(),
    );
    let openai = llm_failover::provider::openai::OpenAi::new(
        llm_failover::ProviderId::new(PROVIDER),
        emu.base_url(PROVIDER).parse().unwrap(),
    )
    .with_chat_model("gpt-4o-mini");
    let mut policy = llm_failover::config::Policy::default();
    // Real scheduling delays are stretched 25× on this timeline (see e2e.rs).
    policy.latency_allowance = Duration::from_secs(2);
    let client = Client::builder()
        .clock(Arc::new(clock))
        .rng(Arc::new(SeededRng::new(32)))
        .policy(policy)
        .provider(
            Arc::new(openai),
            llm_failover::ProviderSettings::new()
                .credential(Credential::new(emu.key(PROVIDER)))
                .limits(Limits::none().with_rpm(RPM)),
        )
        .build()
        .unwrap();
    let dir = TempDir::new("batch-defaults", "outage");
    let ids: Vec<String> = (0..ITEMS).map(|i| format!("o{i}")).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let input = write(&dir, "in.jsonl", &prompts(&ids, "Outage"));
    let output = dir.path("out.jsonl");
    let queue = Queue::open(&format!("sqlite:{}", dir.path("q.sqlite").display()))
        .await
        .unwrap();

    let t0 = clock.now();
    let outage = {
        let emu_log = emu.clone();
        tokio::spawn(async move {
            clock.sleep_until(t0 + outage_from).await;
            emu_log.set_fault_mix(PROVIDER, 1, [(1.0, Fault::Status { status: 503 })]);
            let before = emu_log.counters(PROVIDER).requests;
            clock.sleep_until(t0 + outage_from + outage_for).await;
            emu_log.set_fault_mix(PROVIDER, 1, []);
            emu_log.counters(PROVIDER).requests - before
        })
    };
    let report = QueuedJob::new(&input, &output, queue)
        .run(&client, &Stop::new())
        .await
        .unwrap();
    let ended = clock.now() - t0;
    let during = outage.await.unwrap();
    assert_eq!(
        (report.ok, report.failed, report.pending),
        (600, 0, 0),
        "{report:?}"
    );
    let back = outage_from + outage_for;
    // The first answer after the return, from the emulator's log (its time is this clock's).
    let log = emu.log();
    let start_ms = log.first().map_or(0, |e| e.at_ms);
    let first_ok_after = log
        .iter()
        .filter(|e| e.status == Some(200))
        .map(|e| Duration::from_millis(e.at_ms - start_ms))
        .find(|at| *at >= back)
        .expect("answers after the return");
    // What the items left at the return take at the provider's limit, once it answers.
    let left_at_return = log
        .iter()
        .filter(|e| e.status == Some(200))
        .filter(|e| Duration::from_millis(e.at_ms - start_ms) >= back)
        .count() as u64;
    let own_time = Duration::from_secs(left_at_return * 60 / RPM);
    eprintln!(
        "outage: {during} requests in {outage_for:?} down; first answer {:.1} s after the \
         return; {left_at_return} items left then; ended {:.1} s after the return",
        (first_ok_after - back).as_secs_f64(),
        (ended - back).as_secs_f64()
    );
    assert!(during <= 30, "{during} requests during the outage");
    assert!(
        first_ok_after <= back + Duration::from_secs(31),
        "noticed the return {:?} late",
        first_ok_after - back
    );
    assert!(
        ended <= back + Duration::from_secs(30) + own_time + own_time / 2,
        "ended {:?} after the return (own time {own_time:?})",
        ended - back
    );
}

#[test]
fn a_deadline_set_in_the_providers_file_wins_over_the_batchs_own_default() {
    let _one = FLEETS.lock().unwrap_or_else(PoisonError::into_inner);
    let served = Served::start(
        Emulator::builder()
            .provider(ProviderConfig::openai("slow").with_key(KEY))
            .provider(ProviderConfig::openai("fast").with_key(KEY)),
    );
    let emu = &served.emu;
    // The primary never answers.
    emu.set_fault_mix("slow", 1, [(1.0, Fault::Hang { ms: None })]);
    let dir = TempDir::new("batch-defaults", "file-deadline");
    let config = dir.path("providers.toml");
    let provider = |name: &str| {
        format!(
            "[providers.{name}]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"gpt-4o-mini\"\n\
             api_key_env = {{ local = \"{KEY_VAR}\" }}\n",
            emu.base_url(name)
        )
    };
    let toml = format!(
        "default_environment = \"local\"\n[policy]\ndeadline_ms = 4000\n\
         [environments.local]\nchat = [\"slow\", \"fast\"]\n{}{}",
        provider("slow"),
        provider("fast")
    );
    std::fs::write(&config, toml).unwrap();
    let ids: Vec<String> = (0..8).map(|i| format!("d{i}")).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let input = write(&dir, "in.jsonl", &prompts(&ids, "Deadline"));
    let output = dir.path("out.jsonl");
    let argv = args(&[
        ("--config", &config),
        ("--input", &input),
        ("--output", &output),
        ("--concurrency", &"4"),
    ]);
    let (code, stderr, took) = run(&dir, &argv);
    assert_eq!(code, Some(0), "{stderr}");
    let lines = results(&output);
    assert_eq!(lines.len(), 8);
    assert!(lines.values().all(|l| l["provider"] == "fast"), "{lines:?}");
    // Each of the first items gives the hanging primary its share of the file's 4 s deadline,
    // not the policy's minute-long attempt timeout under the batch's hour.
    assert!(took < Duration::from_secs(30), "took {took:?}:\n{stderr}");
    eprintln!("a hanging primary under the file's 4 s deadline: 8 items in {took:?}");
}

#[tokio::test]
async fn a_rerun_removes_the_export_temp_files_of_killed_runs_and_keeps_a_live_ones() {
    let (_emu, client) = emulated().await;
    let dir = TempDir::new("batch-defaults", "temps");
    let input = write(&dir, "in.jsonl", &prompts(&["t1", "t2"], "Temp"));
    let output = dir.path("out.jsonl");
    // A pid no process can have (above the kernel's largest, 2^22).
    let dead = dir.path("out.jsonl.export-4194305.tmp");
    let other = dir.path("other.jsonl.export-4194305.tmp");
    for f in [&dead, &other] {
        std::fs::write(f, "half an export\n").unwrap();
    }
    let report = run_queued(&client, &dir, &input, &output).await;
    assert_eq!(report.ok, 2);
    assert!(!dead.exists(), "a killed run's temp file is removed");
    assert!(other.exists(), "another output's is not touched");
    // What a live process holds (another worker exporting now) is kept.
    let child = Command::new("sleep").arg("30").spawn().unwrap();
    let held = dir.path(&format!("out.jsonl.export-{}.tmp", child.id()));
    std::fs::write(&held, "another worker exporting now\n").unwrap();
    run_queued(&client, &dir, &input, &output).await;
    let mut child = child;
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(held.exists(), "a live process's temp file is kept");
    assert_eq!(results(&output).len(), 2);
}

#[tokio::test]
async fn an_export_keeps_the_results_files_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let (_emu, client) = emulated().await;
    let dir = TempDir::new("batch-defaults", "permissions");
    let input = write(&dir, "in.jsonl", &prompts(&["p1", "p2"], "Permissions"));
    for mode in [0o444, 0o600, 0o640] {
        let output = dir.path(&format!("out-{mode:o}.jsonl"));
        std::fs::write(&output, "").unwrap();
        std::fs::set_permissions(&output, std::fs::Permissions::from_mode(mode)).unwrap();
        run_queued(&client, &dir, &input, &output).await;
        assert_eq!(results(&output).len(), 2);
        let got = std::fs::metadata(&output).unwrap().permissions().mode() & 0o777;
        assert_eq!(got, mode, "{mode:o} kept, not {got:o}");
    }
}
