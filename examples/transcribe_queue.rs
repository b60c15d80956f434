//! Speech to text on the durable job queue, as a short script of the library: every audio file
//! of a directory becomes a job; a worker transcribes it and asks the chat model for a triage
//! record, which a contract checks; reruns add nothing.
//!
//! ```sh
//! cargo run --example transcribe_queue -- [--dir RECORDINGS] [--config providers.toml] [--env NAME]
//! ```
//!
//! The command line transcribes on the queue with every option — files, directories and globs,
//! a results file, tenants, the interactive lane, dead letters:
//! `llm-failover transcribe RECORDINGS`. This script shows what it is made of, plus a second step
//! and a contract.
//!
//! **Jobs.** Each audio file is one job of kind `transcribe` in an SQLite file in the directory
//! (`.transcribe-queue.sqlite`), named by its file name and a hash of its content: a rerun
//! adds nothing and sends nothing, a changed file is a new job. The payload references the
//! audio by path; it never holds the audio. Without `--dir` the script writes a demo directory
//! (a copy of `examples/memo.wav` and a silence) under the system's temp directory.
//!
//! **Two steps, two denominators.** The handler transcribes, then asks the chat model for
//! `{"category", "urgency", "summary"}` in JSON mode; the `Contract` checks that record, and a
//! refused one sends the job to `review` with its result kept. The report separates transport
//! success (jobs answered at all) from correctness (answers that passed the contract). The
//! emulator is not a model: in JSON mode it answers `{"answer": …}`, never a triage, so under
//! `demo` every job goes to review. Transcripts and answers stay in the queue: the script
//! prints counts only.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use async_trait::async_trait;
use llm_failover::batch::Stop;
use llm_failover::clock::{Clock, TokioClock};
use llm_failover::{AudioInput, ChatRequest, ResponseFormat, TranscriptionRequest};
use llm_failover_emulator::Fault;
use llm_failover_queue::{Handler, JobContext, NewJob, Queue, Worker};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

#[derive(clap::Parser, Debug)]
#[command(about = "Transcribe and triage a directory of recordings on a durable job queue")]
struct Args {
    #[command(flatten)]
    target: common::Target,
    /// The recordings [default: a demo directory under the temp directory].
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// The job kind.
const KIND: &str = "transcribe";
/// The categories and urgencies a triage may name.
const CATEGORIES: &[&str] = &["billing", "technical", "sales", "complaint", "other"];
const URGENCIES: &[&str] = &["low", "normal", "high"];

#[tokio::main]
async fn main() -> std::process::ExitCode {
    common::main(run).await
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let dir = match args.dir {
        Some(dir) => dir,
        None => write_demo_dir()?,
    };
    let setup = args.target.setup(|_, p| p.with_latency(100, 150)).await?;
    if let Some(emu) = &setup.emulator {
        // The Whisper-style provider fails the first transcription: the Deepgram-style one
        // serves it.
        emu.script("openai", [Fault::Status { status: 503 }]);
    }
    let client = setup.builder.build()?;
    common::print_order(client.environment(), &client.transcription_providers());

    let queue = Queue::open(&format!(
        "sqlite:{}",
        dir.join(".transcribe-queue.sqlite").display()
    ))
    .await?;
    let mut jobs = Vec::new();
    for path in audio_files(&dir)? {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let hash = hex(&Sha256::digest(std::fs::read(&path)?))[..16].to_owned();
        let payload = json!({ "path": std::fs::canonicalize(&path)? });
        jobs.push(NewJob::new(
            format!("{name}#{hash}"),
            KIND,
            payload.to_string(),
        ));
    }
    let found = jobs.len();
    let added = queue.enqueue_all(jobs, now_ms()).await?;
    println!("{found} recordings in {}: {added} new jobs", dir.display());

    let report = Worker::builder(queue, client.clone())
        .handler(KIND, Arc::new(TranscribeAndTriage))
        .contract(KIND, Arc::new(|_, result: &str| check_triage(result)))
        .until_drained(Duration::from_secs(60))
        .build()?
        .run(&Stop::new())
        .await?;
    let percent = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{:.1} %", v * 100.0));
    println!(
        "claimed {} · transport success {} · correctness {} · in review {} · requests sent {}",
        report.claimed,
        percent(report.transport_success()),
        percent(report.correctness()),
        report.reviewed,
        client.stats().total().sent
    );
    Ok(())
}

/// Transcribes a recording, then asks for its triage record.
struct TranscribeAndTriage;

#[async_trait]
impl Handler for TranscribeAndTriage {
    async fn run(&self, ctx: &JobContext) -> llm_failover::Result<String> {
        let payload: Value = serde_json::from_str(&ctx.job().payload).unwrap_or_default();
        let audio = AudioInput::from_path(payload["path"].as_str().unwrap_or_default()).await?;
        let transcript = ctx
            .client()
            .transcribe(TranscriptionRequest::new(audio))
            .await?;
        let prompt = format!(
            "Triage this voice message. Answer with one JSON object: {{\"category\": one of {}, \
             \"urgency\": one of {}, \"summary\": at most 300 characters}}.",
            CATEGORIES.join(", "),
            URGENCIES.join(", ")
        );
        let request = ChatRequest::new()
            .system(prompt)
            .user(transcript.text.clone())
            .max_tokens(300)
            .response_format(ResponseFormat::JsonObject);
        let answer = ctx.client().chat(request).await?;
        let triage: Value = serde_json::from_str(&answer.text).unwrap_or(Value::Null);
        Ok(json!({ "transcript": transcript.text, "triage": triage }).to_string())
    }
}

/// The contract: a triage record with a known category and urgency and a summary. Its reasons
/// name what is wrong, never the model's words.
fn check_triage(result: &str) -> Result<(), String> {
    let result: Value = serde_json::from_str(result).map_err(|e| format!("result: {e}"))?;
    let triage = &result["triage"];
    for (field, allowed) in [("category", CATEGORIES), ("urgency", URGENCIES)] {
        if !triage[field].as_str().is_some_and(|v| allowed.contains(&v)) {
            return Err(format!(
                "triage.{field} is not one of {}",
                allowed.join(", ")
            ));
        }
    }
    match triage["summary"].as_str().map(|s| s.trim().chars().count()) {
        Some(1..=300) => Ok(()),
        _ => Err("triage.summary is missing, empty or longer than 300 characters".to_owned()),
    }
}

/// The directory's audio files (the extensions the SDK takes), in name order.
fn audio_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        if path.is_file() && ["wav", "mp3", "m4a", "flac", "ogg", "webm"].contains(&ext) {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Wall-clock milliseconds, the queue's time, from the clock the client runs on.
fn now_ms() -> i64 {
    let since = TokioClock
        .wall()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The demo's recordings, written where missing.
fn write_demo_dir() -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join("llm-failover-transcribe-queue-demo");
    std::fs::create_dir_all(&dir)?;
    let memo = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/memo.wav"))?;
    let files = [
        ("memo.wav", memo),
        ("silence.wav", llm_failover_emulator::text::silent_wav(2.0)),
    ];
    for (name, bytes) in files {
        if !dir.join(name).exists() {
            std::fs::write(dir.join(name), bytes)?;
        }
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_contract_names_what_is_wrong() {
        let result = |triage: Value| json!({ "transcript": "…", "triage": triage }).to_string();
        let ok = json!({"category": "billing", "urgency": "high", "summary": "Refund asked."});
        assert_eq!(check_triage(&result(ok)), Ok(()));
        let cases = [
            (Value::Null, "category"),
            (
                json!({"category": "x", "urgency": "high", "summary": "s"}),
                "category",
            ),
            (
                json!({"category": "other", "urgency": "now", "summary": "s"}),
                "urgency",
            ),
            (
                json!({"category": "other", "urgency": "low", "summary": " "}),
                "summary",
            ),
            (
                json!({"category": "other", "urgency": "low", "summary": "x".repeat(301)}),
                "summary",
            ),
        ];
        for (triage, want) in cases {
            let why = check_triage(&result(triage.clone())).unwrap_err();
            assert!(why.contains(want), "{triage}: {why}");
        }
    }
}
