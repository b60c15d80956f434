//! The `transcribe_queue` example binary on a directory of recordings in two tenant
//! subdirectories, each run a separate process with its in-process emulator on loopback
//! (`demo`): every recording is one job settled once (`review`, since the emulator's chat
//! answers are no triage records), a rerun adds and sends nothing, a changed file is a new job
//! beside its old one, a file changed while queued is dead-lettered with the reason, listed and
//! requeued — and no transcript is ever printed.
//!
//! The queue is then read through the library, from the SQLite file the example wrote. A run
//! that does not end within two minutes is killed and fails its test.
#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use llm_failover::admission::Priority;
use llm_failover::jobs::{Job, JobState, NewJob, Queue};
use llm_failover_emulator::text::{silent_wav, transcribe};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::support::examples::{build_example, output_within, TempDir};

/// The example, built once per test run.
fn example_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| build_example("transcribe_queue"))
}

/// What one run of the binary did.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Everything it printed.
    fn output(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }

    /// The line of stdout starting with `prefix`.
    fn line(&self, prefix: &str) -> &str {
        self.stdout
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line in stdout:\n{}", self.output()))
    }

    /// `N` in `label N` on the stdout line starting with `prefix`.
    fn count(&self, prefix: &str, label: &str) -> u64 {
        let line = self.line(prefix);
        let words = words(line);
        let n = label.split(' ').count();
        (0..words.len())
            .find(|&i| words[i..].iter().take(n).copied().eq(label.split(' ')))
            .and_then(|i| words.get(i + n)?.parse().ok())
            .unwrap_or_else(|| panic!("no {label:?} count in {line:?}"))
    }

    /// `N` in `N label` on the scan line (stderr).
    fn scanned(&self, label: &str) -> u64 {
        let line = (self.stderr.lines())
            .find(|l| l.starts_with("scanned "))
            .unwrap_or_else(|| panic!("no scan line:\n{}", self.output()));
        let words = words(line);
        let n = label.split(' ').count();
        (1..words.len())
            .find(|&i| words[i..].iter().take(n).copied().eq(label.split(' ')))
            .and_then(|i| words[i - 1].parse().ok())
            .unwrap_or_else(|| panic!("no {label:?} count in {line:?}"))
    }
}

/// The words of a status line, its punctuation dropped.
fn words(line: &str) -> Vec<&str> {
    line.split(|c: char| c.is_whitespace() || "(),;".contains(c))
        .filter(|w| !w.is_empty())
        .collect()
}

/// Runs the example on `dir` with `extra`, in `demo`.
fn run_example(dir: &Path, extra: &[&str]) -> Run {
    let mut args: Vec<String> = vec![
        "--config".into(),
        concat!(env!("CARGO_MANIFEST_DIR"), "/providers.toml").into(),
        "--env".into(),
        "demo".into(),
        "--dir".into(),
        dir.display().to_string(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    let mut command = Command::new(example_bin());
    command
        .args(&args)
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .env_remove("LLM_FAILOVER_ENV");
    let what = format!("the transcribe_queue example {args:?}");
    let out = output_within(command, Duration::from_secs(120), &what);
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The job id the example gives a recording.
fn job_id(rel: &str, bytes: &[u8]) -> String {
    format!("{rel}:{}", sha256_hex(bytes))
}

/// Writes `rel` under `dir`.
fn write(dir: &Path, rel: &str, bytes: &[u8]) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// Four recordings, two tenants; `acme/urgent-outage.wav` is the interactive one. (Seconds
/// long, so each transcript has several words to look for in the output.)
fn recordings() -> Vec<(&'static str, Vec<u8>)> {
    let memo = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/memo.wav")).unwrap();
    vec![
        ("acme/memo.wav", memo),
        ("acme/urgent-outage.wav", silent_wav(3.0)),
        ("globex/voicemail.wav", silent_wav(4.0)),
        ("globex/standup.wav", silent_wav(2.5)),
    ]
}

/// Runs `f` on the queue the example keeps in `dir`.
fn with_queue<T>(dir: &Path, f: impl AsyncFnOnce(Queue) -> T) -> T {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let queue = Queue::sqlite(dir.join(".transcribe-queue.sqlite"))
            .await
            .unwrap();
        f(queue).await
    })
}

/// The jobs with these ids, each present.
fn jobs(dir: &Path, ids: &[String]) -> Vec<Job> {
    with_queue(dir, async |queue| {
        let mut out = Vec::new();
        for id in ids {
            out.push(
                queue
                    .get(id)
                    .await
                    .unwrap()
                    .unwrap_or_else(|| panic!("no job {id}")),
            );
        }
        out
    })
}

/// Fails when `run` printed any of `transcripts`, or their first words.
fn assert_no_transcript(run: &Run, transcripts: &[String]) {
    let out = run.output();
    for t in transcripts {
        let start: Vec<&str> = t.split(' ').take(4).collect();
        assert!(
            !out.contains(t.as_str()),
            "a transcript was printed:\n{out}"
        );
        if start.len() == 4 {
            let start = start.join(" ");
            assert!(
                !out.contains(&start),
                "a transcript's start {start:?} was printed:\n{out}"
            );
        }
    }
}

#[test]
fn every_recording_is_one_job_and_reruns_add_nothing_but_changed_files() {
    let dir = TempDir::new("transcribe-queue", "runs");
    let files = recordings();
    for (rel, bytes) in &files {
        write(dir.root(), rel, bytes);
    }
    let mut transcripts: Vec<String> = files.iter().map(|(_, b)| transcribe(b).text).collect();
    let flags = ["--tenant-from-subdir", "--interactive", "urgent*"];

    let first = run_example(dir.root(), &flags);
    assert_eq!(first.code, Some(0), "{}", first.output());
    assert_eq!(first.scanned("recordings"), 4);
    assert_eq!(first.scanned("new jobs"), 4);
    let queue_line = first.line("queue: ");
    assert_eq!(
        first.count("queue: ", "done") + first.count("queue: ", "review"),
        4,
        "{queue_line}"
    );
    for state in ["dead", "ready", "running"] {
        assert_eq!(first.count("queue: ", state), 0, "{queue_line}");
    }
    // The emulator's chat answers are sentences, not triage records: every answer reached
    // review. Transport and correctness are two denominators.
    let run_line = first.line("run (drained): ");
    assert!(
        run_line.contains("transport success 100.0 % (4/4)"),
        "{run_line}"
    );
    assert!(run_line.contains("correctness 0.0 % (0/4)"), "{run_line}");
    assert!(run_line.contains("lost 0"), "{run_line}");
    assert!(first.count("run ", "requests sent") >= 8, "{run_line}");
    assert_no_transcript(&first, &transcripts);

    let ids: Vec<String> = files.iter().map(|(rel, b)| job_id(rel, b)).collect();
    for ((job, (rel, bytes)), transcript) in
        jobs(dir.root(), &ids).iter().zip(&files).zip(&transcripts)
    {
        assert_eq!(job.state, JobState::Review, "{rel}: {job:?}");
        assert_eq!(job.attempt, 1, "{rel}: settled by its first claim");
        assert_eq!(job.tenant, rel.split('/').next().unwrap());
        let want_lane = if rel.contains("urgent") {
            Priority::Interactive
        } else {
            Priority::Bulk
        };
        assert_eq!(job.priority, want_lane, "{rel}");
        // The audio is referenced by path and hash, never copied in.
        let payload: Value = serde_json::from_str(&job.payload).unwrap();
        let path = std::fs::canonicalize(dir.path(rel)).unwrap();
        assert_eq!(
            payload,
            json!({"path": path.to_str().unwrap(), "sha256": sha256_hex(bytes), "bytes": bytes.len()})
        );
        let reason = job.reason.as_deref().unwrap_or("");
        // The emulator answers JSON mode with `{"answer": …}`: JSON, but not a triage.
        assert!(reason.contains("triage.category"), "{rel}: {reason}");
        let result: Value = serde_json::from_str(job.result.as_deref().unwrap()).unwrap();
        assert_eq!(
            result["transcript"],
            transcript.as_str(),
            "{rel}: the emulator's transcript"
        );
        assert_eq!(result["transcript_chars"], transcript.chars().count());
        // JSON, kept for the reviewer as parsed (not a triage: the contract refused it).
        assert!(result["triage"]["answer"].is_string(), "{result}");
    }

    // A rerun finds every recording queued: nothing new, nothing sent.
    let again = run_example(dir.root(), &flags);
    assert_eq!(again.code, Some(0), "{}", again.output());
    assert_eq!(again.scanned("new jobs"), 0, "{}", again.stderr);
    assert_eq!(again.scanned("already queued"), 4, "{}", again.stderr);
    assert_eq!(again.count("run ", "claimed"), 0);
    assert_eq!(again.count("run ", "requests sent"), 0);
    assert_eq!(again.count("queue: ", "review"), 4);

    // A recording whose bytes change is a new job; its old job keeps its result.
    let (rel, old) = &files[2];
    let mut changed = old.clone();
    *changed.last_mut().unwrap() ^= 0x5a;
    write(dir.root(), rel, &changed);
    transcripts.push(transcribe(&changed).text);
    let third = run_example(dir.root(), &flags);
    assert_eq!(third.code, Some(0), "{}", third.output());
    assert_eq!(third.scanned("new jobs"), 1, "{}", third.stderr);
    assert_eq!(third.count("run ", "claimed"), 1);
    assert_eq!(
        third.count("queue: ", "review") + third.count("queue: ", "done"),
        5
    );
    assert_eq!(third.count("queue: ", "dead"), 0);
    let both = jobs(dir.root(), &[job_id(rel, old), job_id(rel, &changed)]);
    assert_ne!(both[0].id, both[1].id);
    assert!(both.iter().all(|j| j.state == JobState::Review), "{both:?}");
    assert!(both[0].result.is_some() && both[1].result.is_some());
    for run in [&first, &again, &third] {
        assert_no_transcript(run, &transcripts);
    }
}

#[test]
fn a_recording_changed_while_queued_is_dead_lettered_listed_and_requeued() {
    let dir = TempDir::new("transcribe-queue", "changed");
    let rel = "acme/call.wav";
    let queued = silent_wav(3.0);
    write(dir.root(), rel, &queued);
    let path = std::fs::canonicalize(dir.path(rel)).unwrap();
    // Queued as the example queues it, then the file changes before a worker reads it.
    let stale = job_id(rel, &queued);
    with_queue(dir.root(), async |queue| {
        let payload = json!({"path": path, "sha256": sha256_hex(&queued), "bytes": queued.len()});
        let job = NewJob::new(&stale, "transcribe", payload.to_string()).with_tenant("acme");
        assert!(queue.enqueue(job, 0).await.unwrap());
    });
    let now = silent_wav(3.5);
    write(dir.root(), rel, &now);

    let run = run_example(dir.root(), &["--tenant-from-subdir"]);
    assert_eq!(run.code, Some(0), "{}", run.output());
    assert_eq!(run.scanned("new jobs"), 1, "the new content is a new job");
    assert_eq!(run.count("queue: ", "dead"), 1);
    assert_eq!(run.count("queue: ", "review"), 1);
    assert_eq!(run.count("run ", "dead"), 1);
    let run_line = run.line("run (drained): ");
    assert!(
        run_line.contains("transport success 50.0 % (1/2)"),
        "{run_line}"
    );
    assert_no_transcript(&run, &[transcribe(&now).text]);

    let listed = run_example(dir.root(), &["--dead-letters"]);
    assert_eq!(listed.code, Some(0), "{}", listed.output());
    let line = listed
        .stdout
        .lines()
        .find(|l| l.starts_with(&format!("{stale}\t")))
        .unwrap_or_else(|| panic!("{stale} is not listed:\n{}", listed.output()));
    assert!(
        line.contains("invalid_request") && line.contains("changed since it was queued"),
        "{line}"
    );
    assert_eq!(listed.stdout.lines().count(), 1, "{}", listed.stdout);

    let requeued = run_example(dir.root(), &["--requeue", &stale]);
    assert_eq!(requeued.code, Some(0), "{}", requeued.output());
    assert!(requeued.stdout.contains(&format!("requeued {stale}")));
    let job = &jobs(dir.root(), std::slice::from_ref(&stale))[0];
    assert_eq!(job.state, JobState::Ready);
    let unknown = run_example(dir.root(), &["--requeue", "no/such.wav:00"]);
    assert_eq!(unknown.code, Some(1), "{}", unknown.output());
}
