//! Speech to text on the durable job queue: every recording in a directory becomes one job; a
//! worker transcribes it and asks the chat model for a triage record; reruns add nothing.
//!
//! ```sh
//! cargo run --example transcribe_queue -- [--dir RECORDINGS] [--queue sqlite:PATH|postgres://…] \
//!     [--interactive GLOB|PREFIX] [--tenant-from-subdir] [--concurrency N] [--patience-s S] \
//!     [--config providers.toml] [--env NAME]
//! cargo run --example transcribe_queue -- --dir RECORDINGS --dead-letters   # id<TAB>reason, then exit
//! cargo run --example transcribe_queue -- --dir RECORDINGS --requeue ID     # a dead (or review) job back
//! ```
//!
//! The queue defaults to `sqlite:RECORDINGS/.transcribe-queue.sqlite`. Without `--dir` the
//! example writes a demo directory of four WAV recordings in two tenant subdirectories (copies
//! of `examples/memo.wav` and silences, under the system's temp directory, kept for reruns) and
//! reads tenants from the subdirectories and `urgent*` files as interactive.
//!
//! **Jobs.** Every audio file (`wav`, `mp3`, `m4a`, `flac`, `ogg`, `webm`; hidden names are
//! skipped) is one job of kind `transcribe` whose id is its path relative to the directory, a
//! `:` and the SHA-256 of its content. Its payload references the audio by absolute path and
//! hash (`{"path", "sha256", "bytes"}`) and never holds the audio itself. Enqueueing is
//! idempotent, so a rerun adds nothing and sends nothing; a file whose content changed is a new
//! job (a new hash) and its old job keeps its result. The tenant is the first subdirectory with
//! `--tenant-from-subdir` (else `default`); a file whose path or name matches `--interactive` (a
//! glob: `*` any run of characters, `?` one; without either, a prefix of the name or path)
//! is an interactive job, claimed before any bulk one.
//!
//! **One kind, two steps.** The handler reads the file and checks its hash (a file changed
//! since it was queued can only fail again: `InvalidRequest`, so it is dead-lettered at once
//! with the reason), heartbeats, transcribes, heartbeats, then asks the chat model for a triage
//! record `{"category", "urgency", "summary"}` in JSON mode and answers `{"transcript_chars",
//! "transcript", "triage"}`. The triage needs the transcript, and a second job kind would have
//! to carry the transcript in its payload, which the queue lists (dead letters) and which holds
//! references, not user data. The price: a job whose triage fails transiently transcribes
//! again on its next attempt.
//!
//! **Two denominators.** A `Contract` checks the triage (a category from a fixed list,
//! urgency `low`, `normal` or `high`, a summary of 1 to 300 characters); the answer is parsed
//! leniently (from its first `{` to its last `}`). A refused triage sends the job to `review`
//! with its result kept. The report separates *transport success* (jobs answered at all) from
//! *correctness* (answers that passed the contract). The emulator is not a model: in JSON mode it
//! answers `{"answer": <sentences of fixed vocabulary>}`, never a triage, so under `demo` every
//! job goes to review — transport success 100 %, correctness 0 % — and its transcripts are placeholder text
//! derived from the audio. Real models in JSON mode mostly pass.
//!
//! **Nothing of what was said is printed.** Transcripts and the model's answers go into the
//! results in the queue (the user's data); the output shows only ids, counts and reasons.
//!
//! Ctrl-C stops claiming and lets the jobs in flight finish; a second one drops them (their
//! leases are released, no failure counted). Exit status: 0 when the queue drained, 2 when the
//! patience ran out with jobs left (a later run finishes them), 130 when stopped, 1 on an error.

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use clap::Parser;
use llm_failover::admission::Priority;
use llm_failover::batch::Stop;
use llm_failover::clock::{Clock, TokioClock};
use llm_failover::jobs::{
    wall_ms, Ended, Handler, Job, JobContext, NewJob, Queue, QueueStats, Worker, WorkerReport,
};
use llm_failover::{
    AudioInput, ChatRequest, Client, Error, ErrorKind, ResponseFormat, TranscriptionRequest,
};
use llm_failover_emulator::{Fault, ProviderConfig};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

#[derive(Parser, Debug)]
#[command(about = "Transcribe and triage a directory of recordings on a durable job queue")]
struct Args {
    #[command(flatten)]
    target: common::Target,
    /// The recordings [default: a demo directory under the temp directory].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The job queue: sqlite:PATH or postgres://… [default: sqlite:DIR/.transcribe-queue.sqlite].
    #[arg(long)]
    queue: Option<String>,
    /// Recordings for the interactive lane: a glob over the relative path or file name, or a
    /// prefix of either.
    #[arg(long, value_name = "GLOB-or-prefix")]
    interactive: Option<String>,
    /// The tenant of a recording is its first subdirectory (else `default`).
    #[arg(long)]
    tenant_from_subdir: bool,
    /// Jobs in flight at most (pacing is the providers' limits, not this).
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Ends the run when no job was settled for this long (the jobs left stay queued).
    #[arg(long, default_value_t = 300)]
    patience_s: u64,
    /// Lists the dead jobs (id, reason) and exits.
    #[arg(long, conflicts_with = "requeue")]
    dead_letters: bool,
    /// Puts one dead or review job back in the queue and exits.
    #[arg(long, value_name = "ID")]
    requeue: Option<String>,
}

/// The job kind.
const KIND: &str = "transcribe";
/// The audio files scanned, by extension.
const AUDIO_EXTENSIONS: &[&str] = &["wav", "mp3", "m4a", "flac", "ogg", "webm"];
/// The categories a triage may name.
const CATEGORIES: &[&str] = &[
    "billing",
    "technical",
    "sales",
    "complaint",
    "scheduling",
    "other",
];
/// The urgencies a triage may name.
const URGENCIES: &[&str] = &["low", "normal", "high"];
/// The longest summary a triage may give, in characters.
const SUMMARY_MAX_CHARS: usize = 300;
/// The queue file in the recordings directory, unless `--queue` names another.
const QUEUE_FILE: &str = ".transcribe-queue.sqlite";
/// How often the status line is printed while the worker runs.
const STATUS_EVERY: Duration = Duration::from_secs(2);

#[tokio::main]
async fn main() -> ExitCode {
    common::init_tracing();
    match run(Args::parse()).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(mut args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let dir = match args.dir.clone() {
        Some(dir) => dir,
        None => {
            let dir = write_demo_dir()?;
            args.tenant_from_subdir = true;
            args.interactive.get_or_insert_with(|| "urgent*".to_owned());
            eprintln!(
                "demo: recordings in {} (tenants from subdirectories, urgent* interactive)",
                dir.display()
            );
            dir
        }
    };
    let spec = match &args.queue {
        Some(spec) => spec.clone(),
        None => format!("sqlite:{}", dir.join(QUEUE_FILE).display()),
    };
    let queue = Queue::open(&spec).await?;
    if let Some(code) = dead_letters_or_requeue(&args, &queue).await? {
        return Ok(code);
    }

    let setup = args.target.setup(tune_demo).await?;
    if let Some(emu) = &setup.emulator {
        emu.script("openai", [Fault::Status { status: 503 }]);
        eprintln!(
            "demo: emulator on {}; its Whisper-style provider answers the first transcription \
             with a 503 (the Deepgram-style one serves it); its chat answers are not JSON, so \
             expect every triage in review",
            emu.url()
        );
    }
    let client = setup.builder.build()?;
    let order = |ids: &[llm_failover::ProviderId]| {
        let ids: Vec<&str> = ids.iter().map(|p| p.as_str()).collect();
        ids.join(" → ")
    };
    eprintln!(
        "environment {}: transcription {}; triage {}",
        client.environment(),
        order(&client.transcription_providers()),
        order(&client.chat_providers())
    );
    enqueue_recordings(&queue, &dir, &args, shown_spec(&spec)).await?;

    let worker = Worker::builder(queue.clone(), client.clone())
        .handler(KIND, Arc::new(Transcribe))
        .contract(KIND, Arc::new(|_: &Job, result: &str| check_triage(result)))
        .concurrency(args.concurrency)
        .until_drained(Duration::from_secs(args.patience_s.max(1)))
        .build()?;
    let stop = Stop::new();
    tokio::spawn(handle_ctrl_c(stop.clone()));
    let ticker = tokio::spawn(show_status(queue.clone(), client.clone()));
    let report = worker.run(&stop).await;
    ticker.abort();
    let report = report?;

    let stats = queue.stats(now_ms()).await?;
    println!("queue: {}", queue_line(&stats));
    let sent = client.stats().total().sent;
    println!(
        "run ({}): {}",
        ended(report.ended),
        report_line(&report, sent)
    );
    drop(setup.emulator);
    Ok(match report.ended {
        Ended::Drained => ExitCode::SUCCESS,
        Ended::Stopped => ExitCode::from(130),
        _ => ExitCode::from(2),
    })
}

/// `--dead-letters` and `--requeue`: done, with the exit status, or `None` to run.
async fn dead_letters_or_requeue(
    args: &Args,
    queue: &Queue,
) -> llm_failover::Result<Option<ExitCode>> {
    if args.dead_letters {
        for job in queue.dead_letters().await? {
            println!("{}\t{}", job.id, job.reason.as_deref().unwrap_or("-"));
        }
        return Ok(Some(ExitCode::SUCCESS));
    }
    let Some(id) = &args.requeue else {
        return Ok(None);
    };
    Ok(Some(if queue.requeue(id, now_ms()).await? {
        println!("requeued {id}");
        ExitCode::SUCCESS
    } else {
        eprintln!("error: no dead or review job {id:?} in the queue");
        ExitCode::FAILURE
    }))
}

/// Scans `dir` and enqueues a job per recording (those already queued are left as they are).
async fn enqueue_recordings(
    queue: &Queue,
    dir: &Path,
    args: &Args,
    shown_queue: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let root = std::fs::canonicalize(dir)
        .map_err(|e| format!("cannot read the directory {}: {e}", dir.display()))?;
    let found = tokio::task::spawn_blocking({
        let root = root.clone();
        move || scan(&root)
    })
    .await??;
    let jobs: Vec<NewJob> = found.iter().map(|r| r.job(args)).collect();
    let interactive = jobs.iter().filter(|j| j.priority == Priority::Interactive).count();
    let added = queue.enqueue_all(jobs, now_ms()).await?;
    eprintln!(
        "scanned {}: {} recordings ({interactive} interactive), {added} new jobs ({} already \
         queued); queue: {shown_queue}",
        root.display(),
        found.len(),
        found.len() as u64 - added,
    );
    Ok(())
}

/// Wall-clock ms for the queue, from the clock the client runs on (the default, tokio's).
fn now_ms() -> i64 {
    wall_ms(TokioClock.wall())
}

/// The demo's emulated providers: 100–250 ms per answer.
fn tune_demo(_prefix: &str, p: ProviderConfig) -> ProviderConfig {
    p.with_latency(100, 150)
}

/// A spec as it may be shown: a PostgreSQL URL may carry a password, so only its scheme.
fn shown_spec(spec: &str) -> &str {
    if spec.starts_with("sqlite:") {
        spec
    } else {
        "postgres"
    }
}

// ---------------------------------------------------------------------------------------------
// The recordings and their jobs
// ---------------------------------------------------------------------------------------------

/// An audio file found in the directory.
struct Recording {
    /// The path relative to the directory, `/`-separated.
    rel: String,
    /// The absolute path.
    path: PathBuf,
    /// SHA-256 of the content, lower-case hex.
    sha256: String,
    /// The content's length.
    bytes: u64,
}

impl Recording {
    /// Its job: id `rel:sha256`, the audio referenced by path and hash.
    fn job(&self, args: &Args) -> NewJob {
        let payload = json!({
            "path": self.path.to_string_lossy(),
            "sha256": self.sha256,
            "bytes": self.bytes,
        });
        let tenant = match self.rel.split_once('/') {
            Some((first, _)) if args.tenant_from_subdir => first,
            _ => "default",
        };
        let lane = match &args.interactive {
            Some(pattern) if matches_recording(pattern, &self.rel) => Priority::Interactive,
            _ => Priority::Bulk,
        };
        NewJob::new(
            format!("{}:{}", self.rel, self.sha256),
            KIND,
            payload.to_string(),
        )
        .with_tenant(tenant)
        .with_priority(lane)
    }
}

/// Every audio file under `root` (hidden names skipped, symbolic links to directories not
/// followed), in path order, hashed.
fn scan(root: &Path) -> std::io::Result<Vec<Recording>> {
    let mut files = Vec::new();
    let mut dirs = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, rel)) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let rel = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            let kind = entry.file_type()?;
            if kind.is_dir() {
                dirs.push((entry.path(), rel));
            } else if is_audio(&name) && entry.path().is_file() {
                files.push((rel, entry.path()));
            }
        }
    }
    files.sort();
    files
        .into_iter()
        .map(|(rel, path)| {
            let (sha256, bytes) = sha256_of_file(&path)?;
            Ok(Recording {
                rel,
                path,
                sha256,
                bytes,
            })
        })
        .collect()
}

fn is_audio(name: &str) -> bool {
    Path::new(name)
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| AUDIO_EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()))
}

/// Whether `pattern` picks the recording at `rel`: a glob over the relative path or the file
/// name, or — without `*` or `?` — a prefix of either.
fn matches_recording(pattern: &str, rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    if pattern.contains(['*', '?']) {
        glob(pattern, rel) || glob(pattern, name)
    } else {
        rel.starts_with(pattern) || name.starts_with(pattern)
    }
}

/// `*` matches any run of characters (`/` too), `?` one character.
fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    // The last `*` seen and the text position it was tried at, to backtrack to.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            star = Some((sp, st + 1));
            pi = sp + 1;
            ti = st + 1;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// SHA-256 (hex) and length of a file, read in 64 KiB pieces.
fn sha256_of_file(path: &Path) -> std::io::Result<(String, u64)> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0; 64 * 1024];
    let mut len = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        len += n as u64;
    }
    Ok((hex(&hasher.finalize()), len))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The demo's recordings, written where missing: two tenants, one urgent call.
fn write_demo_dir() -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join("llm-failover-transcribe-queue-demo");
    let memo = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/memo.wav"))?;
    let silence = llm_failover_emulator::text::silent_wav;
    let files = [
        ("acme/memo.wav", memo.clone()),
        ("acme/urgent-outage.wav", silence(2.0)),
        ("globex/voicemail.wav", memo),
        ("globex/standup.wav", silence(3.5)),
    ];
    for (rel, bytes) in files {
        let path = dir.join(rel);
        if !path.exists() {
            std::fs::create_dir_all(path.parent().unwrap_or(&dir))?;
            std::fs::write(&path, bytes)?;
        }
    }
    Ok(dir)
}

// ---------------------------------------------------------------------------------------------
// The handler and the contract
// ---------------------------------------------------------------------------------------------

/// Transcribes a recording, then triages the transcript.
struct Transcribe;

#[async_trait]
impl Handler for Transcribe {
    async fn run(&self, ctx: &JobContext) -> llm_failover::Result<String> {
        let audio = read_recording(&ctx.job().payload).await?;
        keep_claim(ctx).await?;
        let transcript = ctx
            .client()
            .transcribe(TranscriptionRequest::new(audio))
            .await?;
        keep_claim(ctx).await?;
        let request = ChatRequest::new()
            .system(triage_prompt())
            .user(transcript.text.clone())
            .max_tokens(300)
            .response_format(ResponseFormat::JsonObject);
        let answer = ctx.client().chat(request).await?;

        let mut result = json!({
            "transcript_chars": transcript.text.chars().count(),
            "transcript": transcript.text,
            "transcribed_by": transcript.provider.as_str(),
            "triaged_by": answer.provider.as_str(),
            "triage": parse_triage(&answer.text),
        });
        if result["triage"].is_null() {
            // For the person who reviews it: what the model said instead.
            result["triage_answer"] = Value::String(answer.text);
        }
        Ok(result.to_string())
    }
}

/// What a job's payload holds.
#[derive(serde::Deserialize)]
struct Payload {
    path: PathBuf,
    sha256: String,
}

/// The recording a payload references, read and checked against its hash: a bad payload or a
/// changed file is an `InvalidRequest` (dead-lettered at once), a missing one `Io` (the same).
async fn read_recording(payload: &str) -> llm_failover::Result<AudioInput> {
    let Payload { path, sha256: want } =
        serde_json::from_str(payload).map_err(|e| bad(format!("payload: {e}")))?;
    let read = tokio::task::spawn_blocking({
        let path = path.clone();
        move || std::fs::read(&path).map(|bytes| (sha256_hex(&bytes), bytes))
    })
    .await
    .map_err(|e| Error::new(ErrorKind::Io, format!("reading a recording: {e}")))?;
    let (got, bytes) = read.map_err(|e| {
        let why = format!("cannot read the recording {}: {e}", path.display());
        Error::new(ErrorKind::Io, why)
    })?;
    if got != want {
        let short = |h: &str| h.chars().take(12).collect::<String>();
        return Err(bad(format!(
            "the recording changed since it was queued (sha256 {}…, now {}…): its new content \
             is a new job at the next scan",
            short(&want),
            short(&got)
        )));
    }
    let name = path
        .file_name()
        .map_or_else(|| "audio".to_owned(), |n| n.to_string_lossy().into_owned());
    AudioInput::from_bytes(bytes, name)
}

/// Extends the lease before a long call; an error when the claim is already lost (whatever
/// this attempt computed would be refused).
async fn keep_claim(ctx: &JobContext) -> llm_failover::Result<()> {
    if ctx.heartbeat().await? {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::Conflict,
            "the claim was lost (reaped and claimed again): stopping this attempt",
        ))
    }
}

/// A job that can only fail again: dead-lettered with `why`.
fn bad(why: String) -> Error {
    Error::new(ErrorKind::InvalidRequest, why)
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn triage_prompt() -> String {
    format!(
        "You triage transcribed voice messages. Answer with one JSON object and nothing else: \
         {{\"category\": one of {}, \"urgency\": one of {}, \"summary\": at most {} characters}}.",
        CATEGORIES.join(", "),
        URGENCIES.join(", "),
        SUMMARY_MAX_CHARS
    )
}

/// The JSON object in a model's answer, read from its first `{` to its last `}` (models wrap
/// JSON in prose or code fences); `Null` when there is none.
fn parse_triage(answer: &str) -> Value {
    let (Some(start), Some(end)) = (answer.find('{'), answer.rfind('}')) else {
        return Value::Null;
    };
    match serde_json::from_str::<Value>(answer.get(start..=end).unwrap_or("")) {
        Ok(v) if v.is_object() => v,
        _ => Value::Null,
    }
}

/// The triage record's contract, over a handler's result. Its reasons name what is wrong,
/// never the model's words.
fn check_triage(result: &str) -> Result<(), String> {
    let result: Value = serde_json::from_str(result).map_err(|e| format!("result: {e}"))?;
    let triage = &result["triage"];
    if !triage.is_object() {
        return Err("triage: the model's answer held no JSON object".to_owned());
    }
    let one_of = |field: &str, allowed: &[&str]| match triage[field].as_str() {
        Some(v) if allowed.contains(&v) => Ok(()),
        _ => Err(format!(
            "triage.{field} is not one of {}",
            allowed.join(", ")
        )),
    };
    one_of("category", CATEGORIES)?;
    one_of("urgency", URGENCIES)?;
    match triage["summary"].as_str().map(|s| s.trim().chars().count()) {
        Some(n) if (1..=SUMMARY_MAX_CHARS).contains(&n) => Ok(()),
        Some(0) | None => Err("triage.summary is missing or empty".to_owned()),
        Some(n) => Err(format!(
            "triage.summary has {n} characters (at most {SUMMARY_MAX_CHARS})"
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// What the run shows
// ---------------------------------------------------------------------------------------------

/// A status line every few seconds while the worker runs (the queue's counts: the run's own
/// come at the end).
async fn show_status(queue: Queue, client: Client) {
    let mut tick = tokio::time::interval(STATUS_EVERY);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Ok(stats) = queue.stats(now_ms()).await else {
            continue;
        };
        eprintln!(
            "queue: {} · requests sent {}",
            queue_line(&stats),
            client.stats().total().sent
        );
    }
}

fn queue_line(s: &QueueStats) -> String {
    let oldest = s.oldest_eligible_age.map_or_else(
        || "none".to_owned(),
        |d| format!("{:.1} s", d.as_secs_f64()),
    );
    format!(
        "done {} · review {} · dead {} · ready {} · running {} · oldest eligible {oldest}",
        s.done, s.review, s.dead, s.ready, s.running
    )
}

fn report_line(r: &WorkerReport, sent: u64) -> String {
    let answered = r.completed + r.reviewed;
    let ran = answered + r.failed + r.dead;
    format!(
        "claimed {} · transport success {} · correctness {} · snoozed {} · failed {} · \
         dead {} · lost {} · requests sent {sent}",
        r.claimed,
        ratio(r.transport_success(), answered, ran),
        ratio(r.correctness(), r.completed, answered),
        r.snoozed,
        r.failed,
        r.dead,
        r.lost,
    )
}

/// `75.0 % (3/4)`, or `- (0/0)` before any.
fn ratio(value: Option<f64>, part: u64, whole: u64) -> String {
    match value {
        Some(v) => format!("{:.1} % ({part}/{whole})", v * 100.0),
        None => format!("- ({part}/{whole})"),
    }
}

fn ended(e: Ended) -> &'static str {
    match e {
        Ended::Drained => "drained",
        Ended::Stopped => "stopped",
        Ended::OutOfPatience => "out of patience: jobs left for a later run",
        _ => "ended",
    }
}

/// First Ctrl-C: no new jobs, let those in flight finish. Second: drop them too.
async fn handle_ctrl_c(stop: Stop) {
    if tokio::signal::ctrl_c().await.is_err() {
        return;
    }
    stop.stop();
    eprintln!("stopping: no new jobs; waiting for those in flight (Ctrl-C again to drop them)");
    if tokio::signal::ctrl_c().await.is_ok() {
        stop.abort();
        eprintln!("aborting: jobs in flight go back to the queue for the next run");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interactive_patterns_are_globs_or_prefixes() {
        assert!(matches_recording("urgent*", "acme/urgent-outage.wav"));
        assert!(matches_recording("acme/*", "acme/memo.wav"));
        assert!(matches_recording("*.mp3", "a/b/c.mp3"));
        assert!(matches_recording("c?ll.wav", "call.wav"));
        assert!(!matches_recording("*.mp3", "a/b/c.wav"));
        assert!(matches_recording("urgent", "acme/urgent-outage.wav"));
        assert!(matches_recording("acme/", "acme/memo.wav"));
        assert!(!matches_recording("memo", "acme/urgent-outage.wav"));
    }

    #[test]
    fn triage_is_read_from_the_first_brace_to_the_last() {
        let answer = "Here it is:\n```json\n{\"category\": \"billing\", \"urgency\": \"low\", \
                      \"summary\": \"a {nested} brace\"}\n```";
        assert_eq!(parse_triage(answer)["category"], "billing");
        assert!(parse_triage("no json here").is_null());
        assert!(parse_triage("} backwards {").is_null());
        assert!(parse_triage("[1, 2]").is_null());
    }

    #[test]
    fn the_contract_names_what_is_wrong() {
        let result = |triage: Value| json!({ "transcript_chars": 3, "triage": triage }).to_string();
        let ok = json!({"category": "billing", "urgency": "high", "summary": "Refund asked."});
        assert_eq!(check_triage(&result(ok)), Ok(()));
        let cases = [
            (Value::Null, "no JSON object"),
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
                "empty",
            ),
            (
                json!({"category": "other", "urgency": "low", "summary": "x".repeat(301)}),
                "301",
            ),
        ];
        for (triage, want) in cases {
            let why = check_triage(&result(triage.clone())).unwrap_err();
            assert!(why.contains(want), "{triage}: {why}");
        }
    }
}
