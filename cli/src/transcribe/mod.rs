//! `llm-failover transcribe`: audio files through every speech-to-text provider of an
//! environment into a JSON-lines results file, each file a durable job.
//!
//! The files are named as files, directories (searched for audio, hidden names skipped) or
//! globs. Each audio file is one job of kind `transcribe` whose id is its path as named, `#`
//! and 16 hex digits of the SHA-256 of its content: a rerun adds nothing and sends nothing, and
//! a file whose content changed is a new job. The job's payload references the audio by
//! absolute path and hash and never holds the audio. A worker reads the file, checks its hash
//! (a file changed since it was queued can only fail again: dead-lettered at once), and
//! transcribes it through the failover order. The results file is an export of the queue, in
//! the order the files were named: a line per file with its transcript or its failure, and one
//! per named file that is not audio. Transcripts go to the results file only: the command
//! prints ids, counts and reasons.

mod files;
mod handler;
mod results;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use llm_failover::Client;
use llm_failover::admission::Priority;
use llm_failover::batch::Stop;
use llm_failover_emulator::{Emulator, Fault};
use llm_failover_queue::{Ended, NewJob, Queue, Worker, WorkerReport};

use self::files::{
    Entry, check_output, file_of, find_files, matches_interactive, read_files,
    write_demo_recordings,
};
use self::handler::Transcribe;
use self::results::{Export, export};
use crate::metrics::Metrics;
use crate::progress::{handle_ctrl_c, progress_bar, show_queue};
use crate::queue::{now_ms, shown};
use crate::setup;

/// The options of `llm-failover transcribe`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Audio files, directories (searched for audio files, hidden names skipped) or globs
    /// (`calls/*.wav`, `calls/**/*.mp3`: quote them) [default: the demo's recordings].
    #[arg(value_name = "AUDIO")]
    paths: Vec<PathBuf>,
    #[command(flatten)]
    target: setup::Target,
    /// Results, one JSON object per file (an export of the queue, written at the end).
    #[arg(long, default_value = "transcripts.jsonl")]
    output: PathBuf,
    /// The durable job queue: `sqlite:PATH`, a PostgreSQL connection string (`postgres://…`,
    /// TLS as its `sslmode` says, or `host=… dbname=…`), or `default` (an SQLite file beside
    /// the output, `<output>.queue.sqlite`). Several processes given the same files and
    /// --queue share the work.
    #[arg(long, default_value = "default")]
    queue: String,
    /// Files in flight at most (pacing is the providers' limits, not this).
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// The spoken language (ISO 639-1, e.g. `en`), when known.
    #[arg(long)]
    language: Option<String>,
    /// The transcription model, over each provider's own.
    #[arg(long)]
    model: Option<String>,
    /// Files of interactive priority, claimed before the others (bulk): a glob over the path
    /// or the file name, or a prefix of either.
    #[arg(long, value_name = "GLOB-or-prefix")]
    interactive: Option<String>,
    /// The tenant of a file is its first directory (under the directory named; else
    /// `default`): tenants take turns.
    #[arg(long)]
    tenant_from_subdir: bool,
    /// Also put back the dead jobs of these files before running.
    #[arg(long)]
    retry_failed: bool,
    /// Longest time one file's request may take, waits included, in seconds [default: the
    /// providers file's `deadline_ms` when it sets one, else an hour].
    #[arg(long)]
    item_deadline_s: Option<u64>,
    /// Longest a file waits inside this process for a throttled or closed provider before it
    /// goes back to the queue until the provider's stated time, in seconds.
    #[arg(long, default_value_t = 10)]
    max_wait_s: u64,
    /// How long to wait while nothing settles before ending the run and leaving the rest
    /// queued, in seconds.
    #[arg(long, default_value_t = 1_800)]
    patience_s: u64,
    /// List the dead letters (file and reason) and exit.
    #[arg(long, conflicts_with = "requeue")]
    dead_letters: bool,
    /// Put the dead job of this file back in the queue and exit.
    #[arg(long, value_name = "FILE")]
    requeue: Option<String>,
    #[command(flatten)]
    metrics: crate::metrics::MetricsArgs,
}

/// The job kind.
const KIND: &str = "transcribe";

/// A file's request deadline when neither the flag nor the providers file sets one.
const DEFAULT_ITEM_DEADLINE: Duration = Duration::from_secs(3_600);

/// Runs `llm-failover transcribe`; its exit status.
pub(crate) async fn run(mut args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let spec = match args.queue.as_str() {
        "default" => format!("sqlite:{}.queue.sqlite", args.output.display()),
        other => other.to_owned(),
    };
    if args.dead_letters || args.requeue.is_some() {
        let queue = Queue::open(&spec).await?;
        return dead_letter_command(&args, &queue).await;
    }
    if args.paths.is_empty() {
        args.paths = vec![write_demo_recordings()?];
        args.tenant_from_subdir = true;
        args.interactive.get_or_insert_with(|| "urgent*".to_owned());
    }
    // Every name is checked before a queue file is made: a typo makes nothing.
    let files = tokio::task::spawn_blocking({
        let (paths, tenants) = (args.paths.clone(), args.tenant_from_subdir);
        move || find_files(&paths, tenants)
    })
    .await??;
    check_output(&args.output)?;

    let setup::Setup {
        config,
        builder,
        emulator: _emulator,
    } = args.target.setup(script_demo).await?;
    let metrics = Metrics::start(&args.metrics).await?;
    let builder = match &metrics {
        Some(m) => builder.observer(m.observer()),
        None => builder,
    };
    let client = builder.build()?;
    eprintln!(
        "environment {}: transcription via {} (in failover order)",
        client.environment(),
        setup::order(&client.transcription_providers())
    );
    let queue = Queue::open(&spec).await?;
    eprintln!("queue: {} ({})", queue.backend(), shown(&spec, &queue));

    let entries = tokio::task::spawn_blocking(move || read_files(files)).await?;
    let ids = enqueue(&queue, &entries, &args).await?;
    if args.retry_failed {
        requeue_dead(&queue, &ids).await?;
    }
    let report = work(&args, &config, &client, &queue, &entries, metrics.as_ref()).await?;

    let export = export(&queue, &entries, &args.output).await?;
    print_report(&client, &report, &export, &args.output);
    if let Some(m) = metrics {
        if let Ok(stats) = queue.stats(crate::queue::now_ms()).await {
            m.record_queue(&stats);
        }
        m.finish().await;
    }
    Ok(match report.ended {
        Ended::Stopped => ExitCode::from(130),
        Ended::OutOfPatience => {
            eprintln!(
                "out of patience: {} file(s) still queued; run again to finish them",
                export.pending
            );
            ExitCode::from(75)
        }
        _ => ExitCode::SUCCESS,
    })
}

/// Runs the queue's `transcribe` jobs in this process until it is drained (or out of
/// patience, or stopped), showing the progress of `entries`.
async fn work(
    args: &Args,
    config: &llm_failover::Config,
    client: &Client,
    queue: &Queue,
    entries: &[Entry],
    metrics: Option<&Metrics>,
) -> llm_failover::Result<WorkerReport> {
    let handler = Transcribe {
        language: args.language.clone(),
        model: args.model.clone(),
        deadline: match args.item_deadline_s {
            Some(s) => Duration::from_secs(s.max(1)),
            None => config.stated_deadline().unwrap_or(DEFAULT_ITEM_DEADLINE),
        },
        max_wait: Duration::from_secs(args.max_wait_s),
    };
    let worker = Worker::builder(queue.clone(), client.clone())
        .handler(KIND, Arc::new(handler))
        .concurrency(args.concurrency)
        .until_drained(Duration::from_secs(args.patience_s.max(1)))
        .build()?;
    let stop = Stop::new();
    let invalid = entries.iter().filter(|e| e.audio.is_err()).count() as u64;
    let bar = progress_bar(entries.len() as u64);
    tokio::spawn(handle_ctrl_c(stop.clone(), bar.clone()));
    let ticker = tokio::spawn(show_queue(
        queue.clone(),
        client.clone(),
        Vec::new(),
        bar.clone(),
        (entries.len() as u64, invalid),
        metrics.cloned(),
    ));
    let report = worker.run(&stop).await;
    ticker.abort();
    bar.finish_and_clear();
    report
}

/// The demo's faults: the Whisper-style provider answers the first transcription with a 503,
/// so it fails over to the Deepgram-style one.
fn script_demo(emu: &Emulator) {
    emu.script("openai", [Fault::Status { status: 503 }]);
}

/// Queues a job per audio file (one already queued is left as it is); the ids of this run's
/// jobs.
async fn enqueue(
    queue: &Queue,
    entries: &[Entry],
    args: &Args,
) -> llm_failover::Result<HashSet<String>> {
    let mut jobs = Vec::new();
    let mut interactive = 0;
    for entry in entries {
        let Ok(rec) = &entry.audio else { continue };
        let payload = serde_json::json!({
            "path": rec.path.to_string_lossy(),
            "sha256": rec.sha256,
            "bytes": rec.bytes,
        });
        let priority = match &args.interactive {
            Some(pattern) if matches_interactive(pattern, &entry.found.rel) => {
                interactive += 1;
                Priority::Interactive
            }
            _ => Priority::Bulk,
        };
        jobs.push(
            NewJob::new(&rec.id, KIND, payload.to_string())
                .with_tenant(entry.found.tenant.as_str())
                .with_priority(priority),
        );
    }
    let ids: HashSet<String> = jobs.iter().map(|j| j.id.clone()).collect();
    let audio = jobs.len();
    let added = queue.enqueue_all(jobs, now_ms()).await?;
    let invalid = entries.len() - audio;
    eprintln!(
        "files: {} · {audio} audio ({interactive} interactive) · {added} new jobs ({} already \
         queued) · {invalid} not audio",
        entries.len(),
        audio as u64 - added
    );
    for entry in entries {
        if let Err(why) = &entry.audio {
            eprintln!("  {}: {why}", entry.found.file);
        }
    }
    Ok(ids)
}

/// `--retry-failed`: this run's dead jobs back in the queue.
async fn requeue_dead(queue: &Queue, ids: &HashSet<String>) -> llm_failover::Result<()> {
    let mut requeued = 0;
    for job in queue.dead_letters().await? {
        if ids.contains(&job.id) && queue.requeue(&job.id, now_ms()).await? {
            requeued += 1;
        }
    }
    if requeued > 0 {
        eprintln!("{requeued} dead job(s) back in the queue");
    }
    Ok(())
}

/// `--dead-letters` and `--requeue`: the queue's one-command maintenance.
async fn dead_letter_command(
    args: &Args,
    queue: &Queue,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let dead = queue.dead_letters().await?;
    let ours = dead.iter().filter(|job| job.kind == KIND);
    if args.dead_letters {
        for job in ours {
            println!(
                "{}\t{}",
                file_of(&job.id),
                job.reason.as_deref().unwrap_or("")
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let file = args.requeue.as_deref().unwrap_or_default();
    let mut requeued = 0;
    for job in ours.filter(|job| file_of(&job.id) == file) {
        if queue.requeue(&job.id, now_ms()).await? {
            requeued += 1;
        }
    }
    if requeued > 0 {
        eprintln!("{file}: back in the queue");
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("{file}: no such dead job (or in review) in the queue");
        Ok(ExitCode::FAILURE)
    }
}

/// What the run did, after it: files by outcome, the requests, the worker.
fn print_report(client: &Client, report: &WorkerReport, export: &Export, output: &Path) {
    let mut kinds: Vec<_> = export.failed_by_kind.iter().collect();
    kinds.sort();
    let kinds: String = kinds.iter().map(|(k, n)| format!(" · {k} {n}")).collect();
    eprintln!(
        "results: {} — ok {} · failed {}{kinds} · still queued {}",
        output.display(),
        export.ok,
        export.failed,
        export.pending
    );
    let stats = client.stats();
    let total = stats.total();
    let per_provider: Vec<String> = client
        .transcription_providers()
        .iter()
        .map(|id| {
            let p = stats.provider(id.as_str()).cloned().unwrap_or_default();
            format!("{id} sent {} ok {}", p.sent, p.ok)
        })
        .collect();
    eprintln!(
        "requests {} · 429s {} · failovers {} · {}",
        total.sent,
        total.rate_limited,
        total.failovers,
        per_provider.join(" · ")
    );
    eprintln!(
        "this process: {} claimed · {} retried later · {} snoozed · {} dead",
        report.claimed, report.failed, report.snoozed, report.dead
    );
}
