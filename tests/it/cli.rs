//! The `llm-failover` command (crate `cli/`) as a user who installed it meets it: run with no
//! argument in an empty directory — no providers.toml, no prompts, no key — it runs the demo
//! batch on the built-in emulator; `batch` is the default command; `--help` names no path of
//! the machine that built it. `transcribe` runs audio files (named, in directories, by globs)
//! through the emulator's speech-to-text providers into a results file, each file a job on the
//! queue (SQLite, or PostgreSQL); a missing file is an error before anything is queued, a file
//! that is not audio a failed line; a file changed while queued is a dead letter, listed and
//! requeued; no transcript is ever printed.
#![cfg(unix)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use llm_failover::admission::Priority;
use llm_failover_emulator::text::{silent_wav, transcribe};
use llm_failover_queue::{Job, JobState, NewJob, Queue};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::support::examples::{TempDir, batch_bin, output_within};
use crate::support::postgres::PgServer;

fn command(dir: &TempDir) -> Command {
    let mut command = Command::new(batch_bin());
    command
        .current_dir(dir.root())
        .env_remove("RUST_LOG")
        .env_remove("LLM_FAILOVER_ENV")
        .env_remove("LLM_FAILOVER_REDIS_URL")
        .env_remove("LLM_FAILOVER_DEMO_KEY")
        .env("NO_COLOR", "1");
    command
}

#[test]
fn with_no_argument_in_an_empty_directory_it_runs_the_demo_batch_without_a_key() {
    let dir = TempDir::new("cli", "bare");
    let out = output_within(command(&dir), Duration::from_secs(120), "llm-failover");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("bundled"),
        "it says whose providers file: {stderr}"
    );
    assert!(stderr.contains("emulator on http://127.0.0.1:"), "{stderr}");
    let bundled = include_str!("../../examples/prompts.jsonl");
    let prompts = std::fs::read_to_string(dir.path("demo-prompts.jsonl")).unwrap();
    assert_eq!(prompts, bundled, "the demo's prompts, written where it ran");
    let results = std::fs::read_to_string(dir.path("results.jsonl")).unwrap();
    let lines: Vec<Value> = results
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let input_lines = bundled.lines().filter(|l| !l.trim().is_empty()).count();
    assert_eq!(lines.len(), input_lines, "one line per input line");
    let ok = lines.iter().filter(|l| l["ok"] == true).count();
    assert_eq!(
        ok,
        input_lines - 2,
        "every prompt answered but the 2 bad lines"
    );
    // `batch` is the default command: the same, said explicitly, sends nothing new.
    let mut again = command(&dir);
    again.args(["batch", "--output", "results.jsonl"]);
    let out = output_within(again, Duration::from_secs(120), "llm-failover batch");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains(&format!("ok {ok}")), "{stderr}");
}

#[test]
fn its_help_lists_the_batch_and_transcribe_options_and_no_path_of_the_build_machine() {
    let dir = TempDir::new("cli", "help");
    for args in [&["--help"][..], &["batch", "--help"][..]] {
        let mut help = command(&dir);
        help.args(args);
        let out = output_within(help, Duration::from_secs(30), "llm-failover --help");
        assert_eq!(out.status.code(), Some(0));
        let text = String::from_utf8_lossy(&out.stdout);
        for option in [
            "--input",
            "--queue",
            "--patience-s",
            "--max-wait-s",
            "--no-queue",
        ] {
            assert!(text.contains(option), "{args:?}: {option} in\n{text}");
        }
        assert!(
            !text.contains(env!("CARGO_MANIFEST_DIR")),
            "{args:?} names this machine's checkout:\n{text}"
        );
        if args == ["--help"] {
            assert!(
                text.contains("transcribe"),
                "the commands are listed:\n{text}"
            );
        }
    }
    let mut help = command(&dir);
    help.args(["transcribe", "--help"]);
    let out = output_within(
        help,
        Duration::from_secs(30),
        "llm-failover transcribe --help",
    );
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    for option in [
        "[AUDIO]...",
        "--output",
        "--queue",
        "--language",
        "--interactive",
        "--env",
    ] {
        assert!(text.contains(option), "transcribe: {option} in\n{text}");
    }
    assert!(!text.contains(env!("CARGO_MANIFEST_DIR")), "{text}");
}

/// What a run of the command printed, and its status.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn of(out: Output) -> Run {
        Run {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    fn output(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }

    /// Fails when the run printed any of `transcripts`, or their first words.
    fn assert_no_transcript(&self, transcripts: &[String]) {
        let out = self.output();
        for t in transcripts {
            let start: Vec<&str> = t.split(' ').take(4).collect();
            assert!(
                !out.contains(t.as_str()),
                "a transcript was printed:\n{out}"
            );
            assert!(
                start.len() < 4 || !out.contains(&start.join(" ")),
                "a transcript's start was printed:\n{out}"
            );
        }
    }
}

/// `llm-failover transcribe ARGS` in `dir`.
fn transcribe_in(dir: &TempDir, args: &[&str]) -> Run {
    let mut command = command(dir);
    command.arg("transcribe").args(args);
    let what = format!("llm-failover transcribe {args:?}");
    Run::of(output_within(command, Duration::from_secs(120), &what))
}

/// Writes `bytes` to `rel` under `dir`.
fn write(dir: &TempDir, rel: &str, bytes: &[u8]) {
    let path = dir.path(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The job id the command gives the file named `file` holding `bytes`.
fn job_id(file: &str, bytes: &[u8]) -> String {
    format!("{file}#{}", &sha256_hex(bytes)[..16])
}

/// The results file's lines, by file, in order.
fn transcripts(path: &Path) -> Vec<(String, Value)> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("no results file {}: {e}", path.display()));
    text.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (v["file"].as_str().unwrap().to_owned(), v)
        })
        .collect()
}

/// Runs `f` on the queue at `spec`.
fn with_queue<T>(spec: &str, f: impl AsyncFnOnce(Queue) -> T) -> T {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async { f(Queue::open(spec).await.unwrap()).await })
}

/// The jobs with these ids in the queue at `spec`, each present.
fn jobs(spec: &str, ids: &[String]) -> Vec<Job> {
    with_queue(spec, async |queue| {
        let mut out = Vec::new();
        for id in ids {
            let job = queue.get(id).await.unwrap();
            out.push(job.unwrap_or_else(|| panic!("no job {id}")));
        }
        out
    })
}

#[test]
fn transcribe_writes_a_line_per_file_in_order_and_a_rerun_sends_nothing() {
    let dir = TempDir::new("cli", "transcribe");
    let files = [
        ("calls/acme/first.wav", silent_wav(2.0)),
        ("calls/globex/second.wav", silent_wav(3.0)),
        ("urgent.wav", silent_wav(2.5)),
    ];
    for (rel, bytes) in &files {
        write(&dir, rel, bytes);
    }
    let said: Vec<String> = files.iter().map(|(_, b)| transcribe(b).text).collect();
    let args = [
        "calls",
        "./urgent.wav",
        "--tenant-from-subdir",
        "--interactive",
        "urg*",
    ];

    let first = transcribe_in(&dir, &args);
    assert_eq!(first.code, Some(0), "{}", first.output());
    assert!(first.stderr.contains("bundled"), "{}", first.stderr);
    assert!(
        first
            .stderr
            .contains("3 audio (1 interactive) · 3 new jobs"),
        "{}",
        first.stderr
    );
    first.assert_no_transcript(&said);
    let lines = transcripts(&dir.path("transcripts.jsonl"));
    let names: Vec<&str> = lines.iter().map(|(f, _)| f.as_str()).collect();
    // In the order named; `./urgent.wav` is `urgent.wav`.
    assert_eq!(
        names,
        [
            "calls/acme/first.wav",
            "calls/globex/second.wav",
            "urgent.wav"
        ]
    );
    for ((_, line), text) in lines.iter().zip(&said) {
        assert_eq!(line["ok"], true, "{line}");
        assert_eq!(
            line["text"],
            text.as_str(),
            "the emulator's transcript: {line}"
        );
        let provider = line["provider"].as_str().unwrap();
        assert!(
            ["demo-openai", "demo-deepgram"].contains(&provider),
            "{line}"
        );
    }
    // The demo's Whisper-style provider answers the first request with a 503: that file was
    // sent twice, once to each.
    let attempts: u64 = lines
        .iter()
        .map(|(_, l)| l["attempts"].as_u64().unwrap())
        .sum();
    assert_eq!(attempts, 4, "{lines:?}");

    // Each file is a job: its tenant its first directory under the one named, the urgent one
    // interactive, the audio referenced by path and hash.
    let spec = format!(
        "sqlite:{}",
        dir.path("transcripts.jsonl.queue.sqlite").display()
    );
    let ids: Vec<String> = [
        "calls/acme/first.wav",
        "calls/globex/second.wav",
        "urgent.wav",
    ]
    .iter()
    .zip(&files)
    .map(|(file, (_, bytes))| job_id(file, bytes))
    .collect();
    let queued = jobs(&spec, &ids);
    let tenants: Vec<&str> = queued.iter().map(|j| j.tenant.as_str()).collect();
    assert_eq!(tenants, ["acme", "globex", "default"]);
    let priorities: Vec<Priority> = queued.iter().map(|j| j.priority).collect();
    assert_eq!(
        priorities,
        [Priority::Bulk, Priority::Bulk, Priority::Interactive]
    );
    for (job, (rel, bytes)) in queued.iter().zip(&files) {
        assert_eq!(job.state, JobState::Done, "{rel}");
        let payload: Value = serde_json::from_str(&job.payload).unwrap();
        let path = std::fs::canonicalize(dir.path(rel)).unwrap();
        let want = json!({"path": path, "sha256": sha256_hex(bytes), "bytes": bytes.len()});
        assert_eq!(payload, want, "{rel}");
    }

    // The same again: every file is queued and done, nothing is sent, the results are the same.
    let again = transcribe_in(&dir, &args);
    assert_eq!(again.code, Some(0), "{}", again.output());
    assert!(
        again.stderr.contains("0 new jobs (3 already queued)"),
        "{}",
        again.stderr
    );
    assert!(again.stderr.contains("requests 0 "), "{}", again.stderr);
    assert_eq!(transcripts(&dir.path("transcripts.jsonl")), lines);
    again.assert_no_transcript(&said);
}

#[test]
fn transcribe_refuses_a_missing_file_and_writes_a_failed_line_for_one_that_is_not_audio() {
    let dir = TempDir::new("cli", "transcribe-bad");
    let good = silent_wav(2.0);
    write(&dir, "good.wav", &good);
    write(&dir, "notes.txt", b"not audio\n");
    write(&dir, "broken.wav", b"not a RIFF header at all");

    // A name that is not there: an error naming it, nothing queued, nothing written.
    for (args, says) in [
        (
            &["good.wav", "missing.wav"][..],
            "no such file or directory: missing.wav",
        ),
        (&["calls/*.wav"][..], "calls/*.wav matches no file"),
    ] {
        let run = transcribe_in(&dir, args);
        assert_eq!(run.code, Some(1), "{args:?}: {}", run.output());
        assert!(run.stderr.contains(says), "{args:?}: {}", run.stderr);
        assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
        assert!(!dir.path("transcripts.jsonl.queue.sqlite").exists());
        assert!(!dir.path("transcripts.jsonl").exists());
    }

    // Files that are not audio: a failed line each, saying why, nothing sent for them.
    let run = transcribe_in(&dir, &["notes.txt", "broken.wav", "good.wav"]);
    assert_eq!(run.code, Some(0), "{}", run.output());
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    let lines: BTreeMap<String, Value> = transcripts(&dir.path("transcripts.jsonl"))
        .into_iter()
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    for (file, why) in [
        ("notes.txt", "not an audio file"),
        ("broken.wav", "not a valid WAV"),
    ] {
        let line = &lines[file];
        assert_eq!(line["ok"], false, "{line}");
        assert_eq!(line["error"]["kind"], "invalid_input", "{line}");
        let message = line["error"]["message"].as_str().unwrap();
        assert!(message.contains(why), "{file}: {message}");
        assert!(run.stderr.contains(&format!("{file}: ")), "{}", run.stderr);
    }
    assert_eq!(lines["good.wav"]["text"], transcribe(&good).text.as_str());
    // Every request sent was the audio file's: its own attempts (the demo fails its first
    // provider over; on a loaded machine a timeout may add one), none for the others.
    for file in ["notes.txt", "broken.wav"] {
        assert_eq!(lines[file]["attempts"], 0, "{file}: {}", lines[file]);
    }
    let attempts = lines["good.wav"]["attempts"].as_u64().unwrap();
    assert!(
        run.stderr.contains(&format!("requests {attempts} ")),
        "{attempts} attempts: {}",
        run.stderr
    );
}

#[test]
fn transcribe_dead_letters_a_file_changed_while_queued_lists_and_requeues_it() {
    let dir = TempDir::new("cli", "transcribe-changed");
    let queued = silent_wav(3.0);
    write(&dir, "acme/call.wav", &queued);
    let path = std::fs::canonicalize(dir.path("acme/call.wav")).unwrap();
    // Queued as the command queues it, then the file changes before a worker reads it.
    let spec = format!(
        "sqlite:{}",
        dir.path("transcripts.jsonl.queue.sqlite").display()
    );
    let stale = job_id("acme/call.wav", &queued);
    with_queue(&spec, async |queue| {
        let payload = json!({"path": path, "sha256": sha256_hex(&queued), "bytes": queued.len()});
        let job = NewJob::new(&stale, "transcribe", payload.to_string());
        assert!(queue.enqueue(job, 0).await.unwrap());
    });
    let now = silent_wav(3.5);
    write(&dir, "acme/call.wav", &now);

    let run = transcribe_in(&dir, &["acme"]);
    assert_eq!(run.code, Some(0), "{}", run.output());
    assert!(
        run.stderr.contains("1 new jobs"),
        "the new content is a new job: {}",
        run.stderr
    );
    assert!(run.stderr.contains("1 dead"), "{}", run.stderr);
    run.assert_no_transcript(&[transcribe(&now).text]);
    // The results file has the file's current content.
    let lines = transcripts(&dir.path("transcripts.jsonl"));
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0].1["text"], transcribe(&now).text.as_str());

    let listed = transcribe_in(&dir, &["--dead-letters"]);
    assert_eq!(listed.code, Some(0), "{}", listed.output());
    assert_eq!(listed.stdout.lines().count(), 1, "{}", listed.stdout);
    let line = listed.stdout.lines().next().unwrap();
    assert!(line.starts_with("acme/call.wav\t"), "{line}");
    assert!(
        line.contains("invalid_request") && line.contains("changed since it was queued"),
        "{line}"
    );

    let requeued = transcribe_in(&dir, &["--requeue", "acme/call.wav"]);
    assert_eq!(requeued.code, Some(0), "{}", requeued.output());
    assert_eq!(
        jobs(&spec, std::slice::from_ref(&stale))[0].state,
        JobState::Ready
    );
    let unknown = transcribe_in(&dir, &["--requeue", "no/such.wav"]);
    assert_eq!(unknown.code, Some(1), "{}", unknown.output());
}

#[test]
fn transcribe_with_no_file_in_an_empty_directory_runs_the_demo_recordings() {
    let dir = TempDir::new("cli", "transcribe-demo");
    let run = transcribe_in(&dir, &[]);
    assert_eq!(run.code, Some(0), "{}", run.output());
    assert!(run.stderr.contains("demo-recordings"), "{}", run.stderr);
    let lines = transcripts(&dir.path("transcripts.jsonl"));
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert!(lines.iter().all(|(_, l)| l["ok"] == true), "{lines:?}");
    assert!(lines.iter().all(|(f, _)| f.starts_with("demo-recordings/")));
}

#[test]
fn transcribe_runs_on_a_postgresql_queue() {
    let dir = TempDir::new("cli", "transcribe-pg");
    let audio = silent_wav(2.0);
    write(&dir, "one.wav", &audio);
    let url = PgServer::shared().fresh_url();
    let run = transcribe_in(&dir, &["one.wav", "--queue", &url]);
    assert_eq!(run.code, Some(0), "{}", run.output());
    assert!(run.stderr.contains("queue: postgres"), "{}", run.stderr);
    assert!(
        !run.output().contains("postgres@"),
        "the URL's user is not shown"
    );
    let lines = transcripts(&dir.path("transcripts.jsonl"));
    assert_eq!(lines[0].1["text"], transcribe(&audio).text.as_str());
    assert!(!dir.path("transcripts.jsonl.queue.sqlite").exists());
    let job = &jobs(&url, &[job_id("one.wav", &audio)])[0];
    assert_eq!(job.state, JobState::Done);
}
