//! The `transcribe_queue` example binary (a short script of the library: transcription and a
//! triage step on the job queue, with a contract) on a directory of recordings, each run a
//! separate process with its in-process emulator on loopback (`demo`): every recording is one
//! job settled once — in `review`, since the emulator's chat answers are no triage records —
//! with its transcript kept; a rerun adds and sends nothing; no transcript is ever printed.
//! What the command line adds (globs, tenants, the interactive lane, a results file, dead
//! letters) is tested with `llm-failover transcribe` in `cli.rs`.
//!
//! The queue is then read through the library, from the SQLite file the example wrote. A run
//! that does not end within two minutes is killed and fails its test.
#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use llm_failover_emulator::text::{silent_wav, transcribe};
use llm_failover_queue::{JobState, Queue};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::support::examples::{TempDir, build_example, output_within};

/// The example, built once per test run.
fn example_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| build_example("transcribe_queue"))
}

/// Runs the example on `dir`, in `demo`: its exit status and everything it printed.
fn run_example(dir: &Path) -> (Option<i32>, String, String) {
    let mut command = Command::new(example_bin());
    command
        .args([
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/providers.toml"),
        ])
        .args(["--env", "demo", "--dir"])
        .arg(dir)
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .env_remove("LLM_FAILOVER_ENV");
    let out = output_within(
        command,
        Duration::from_secs(120),
        "the transcribe_queue example",
    );
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// The job id the example gives a recording: its name and 16 hex digits of its SHA-256.
fn job_id(name: &str, bytes: &[u8]) -> String {
    let hex: String = Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{name}#{}", &hex[..16])
}

#[test]
fn every_recording_is_one_job_in_review_with_its_transcript_and_a_rerun_adds_nothing() {
    let dir = TempDir::new("transcribe-queue", "runs");
    let memo = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/memo.wav")).unwrap();
    let files = [("memo.wav", memo), ("standup.wav", silent_wav(3.0))];
    for (name, bytes) in &files {
        std::fs::write(dir.path(name), bytes).unwrap();
    }
    std::fs::write(dir.path("notes.txt"), "not a recording").unwrap();
    let transcripts: Vec<String> = files.iter().map(|(_, b)| transcribe(b).text).collect();

    let (code, stdout, stderr) = run_example(dir.root());
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("2 recordings in"), "{stdout}");
    assert!(stdout.contains("2 new jobs"), "{stdout}");
    // Every answer reached review: transport and correctness are two denominators.
    assert!(stdout.contains("claimed 2 "), "{stdout}");
    assert!(stdout.contains("transport success 100.0 %"), "{stdout}");
    assert!(stdout.contains("correctness 0.0 %"), "{stdout}");
    assert!(stdout.contains("in review 2"), "{stdout}");
    for t in &transcripts {
        let start: Vec<&str> = t.split(' ').take(4).collect();
        for out in [&stdout, &stderr] {
            assert!(
                !out.contains(t.as_str()),
                "a transcript was printed:\n{out}"
            );
            assert!(
                !out.contains(&start.join(" ")),
                "a transcript was printed:\n{out}"
            );
        }
    }

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let queue = Queue::sqlite(dir.path(".transcribe-queue.sqlite"))
            .await
            .unwrap();
        for ((name, bytes), transcript) in files.iter().zip(&transcripts) {
            let id = job_id(name, bytes);
            let job = queue
                .get(&id)
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("{id}"));
            assert_eq!(job.state, JobState::Review, "{name}: {job:?}");
            assert_eq!(job.attempt, 1, "{name}: settled by its first claim");
            let reason = job.reason.as_deref().unwrap_or("");
            assert!(reason.contains("triage.category"), "{name}: {reason}");
            let result: Value = serde_json::from_str(job.result.as_deref().unwrap()).unwrap();
            assert_eq!(result["transcript"], transcript.as_str(), "{name}");
            // JSON, kept for the reviewer (not a triage: the contract refused it).
            assert!(result["triage"]["answer"].is_string(), "{result}");
        }
    });

    let (code, stdout, stderr) = run_example(dir.root());
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("0 new jobs"), "{stdout}");
    assert!(stdout.contains("claimed 0 "), "{stdout}");
    assert!(stdout.contains("requests sent 0"), "{stdout}");
}
