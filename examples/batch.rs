//! The main job: a JSON-lines prompt file through every provider of an environment, into a
//! JSON-lines results file — paced to each provider's stated limits, failing over, resumable.
//!
//! ```sh
//! cargo run --release --example batch -- [--config providers.toml] [--env NAME] \
//!     [--input FILE] [--output FILE] [--concurrency N] [--retry-failed] [--summary-json FILE] \
//!     [--queue sqlite:PATH|postgres://…|default] [--patience-s N] [--lease-s N] [--max-wait-s N] \
//!     [--dead-letters] [--requeue ID] [--no-queue] [--cache memory|sqlite:PATH|redis://…]
//! ```
//!
//! With the default environment `demo`, the emulator runs inside this process on a free
//! loopback port: two chat providers with different wire formats (OpenAI-style and
//! Anthropic-style), low limits, some latency, one scripted 429 and one overload, so pacing,
//! throttling and failover all show within half a minute. No key, no network.
//!
//! Every item is a durable job in a queue — by default an SQLite file beside the output
//! (`<output>.queue.sqlite`; `--queue sqlite:PATH` or `--queue postgres://…` for another) — and
//! the results file is an export of the queue, in input order. Rerunning with the same
//! `--output` sends nothing already answered; `--retry-failed` also resends this input's dead
//! letters, `--dead-letters` lists them (id and reason), `--requeue ID` puts one back. Several
//! processes given the same `--input` and `--queue` share the work and each id is accepted
//! once; a killed process's items are taken by the others about one lease (30 s) after its
//! death. An item throttled or finding every provider closed for longer than `--max-wait-s`
//! (10 s) goes back to the queue until the time the provider stated, instead of waiting in
//! the process; a run in which nothing settles for `--patience-s` ends (exit status 75: run
//! again to finish). An item is its id and its question: an id whose prompt changed is asked
//! anew, and two input files sharing a queue never get each other's answers. Lines that a run without the queue
//! (`--no-queue`: the results file is the only state, one process at a time) wrote are kept
//! for the items the queue does not know.
//!
//! `--cache sqlite:answers.sqlite` (or `memory`, or `redis://host:port` for workers on several
//! hosts; `[cache]` in the providers file does the same, and `--cache` wins over it) answers
//! a question asked before from the cache: nothing sent. A rerun into a fresh `--output` then
//! sends nothing it has an answer for; the summary counts the cache's hits, misses and the
//! tokens saved, and each answer from it has `"cached":true` in its line.
//!
//! The output must be a regular file other than the input: the same file by any name or
//! link, a pipe, a terminal or a device, and a file with several hard links are refused at
//! once; a symbolic link is followed (its target is written). Ctrl-C stops admitting items
//! and lets those in flight finish; a second Ctrl-C drops them (they stay queued and run next
//! time). Exit status: 0 when every item got a result (failed items are in the results), 1
//! on an error, 75 when out of patience, 130 when stopped by Ctrl-C.

mod common;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use llm_failover::batch::{
    count_lines, eta, FileJob, InputReader, Pace, QueuedJob, QueuedReport, Runner, Stop, Summary,
    DEFAULT_CONCURRENCY,
};
use llm_failover::cache::Cache;
use llm_failover::clock::{Clock, TokioClock};
use llm_failover::jobs::{Ended, Queue};
use llm_failover::Client;
use llm_failover_emulator::{Fault, Limits, ProviderConfig, RetryAfter};

#[derive(Parser, Debug)]
#[command(about = "Run a JSON-lines prompt batch through llm-failover, resumably")]
struct Args {
    /// The providers file.
    #[arg(long, default_value = "providers.toml")]
    config: PathBuf,
    /// The environment [default: LLM_FAILOVER_ENV, else the file's default_environment, `demo`].
    #[arg(long)]
    env: Option<String>,
    /// Prompts, one JSON object per line: {"id", "prompt"} or {"id", "messages"}.
    #[arg(long, default_value = "examples/prompts.jsonl")]
    input: PathBuf,
    /// Results, one JSON object per input id (appended, then compacted).
    #[arg(long, default_value = "results.jsonl")]
    output: PathBuf,
    /// Items in flight at most (pacing is the providers' limits, not this).
    #[arg(long, default_value_t = DEFAULT_CONCURRENCY)]
    concurrency: usize,
    /// Also resend items whose previous result is a failure.
    #[arg(long)]
    retry_failed: bool,
    /// Also write the summary as JSON to this file.
    #[arg(long)]
    summary_json: Option<PathBuf>,
    /// Longest time one item's request may take, waits included, in seconds [default: the
    /// providers file's `deadline_ms` when it sets one, else an hour].
    #[arg(long)]
    item_deadline_s: Option<u64>,
    /// Longest an item waits inside this process for a throttled or closed provider (or its
    /// slot) before it goes back to the queue until the provider's stated time, in seconds.
    #[arg(long, default_value_t = 10)]
    max_wait_s: u64,
    /// The durable job queue the items run through: `sqlite:PATH`, `postgres://…`, or
    /// `default` (an SQLite file beside the output, `<output>.queue.sqlite`). Several
    /// processes given the same --input and --queue share the work; the results file is an
    /// export of it.
    #[arg(long, default_value = "default")]
    queue: String,
    /// Run without the queue: the results file is the only state (one process at a time).
    #[arg(long, conflicts_with_all = ["dead_letters", "requeue", "lease_s", "max_wait_s"])]
    no_queue: bool,
    /// How long to wait while nothing settles (a provider down) before ending
    /// the run and leaving the rest queued, in seconds.
    #[arg(long, default_value_t = 1_800)]
    patience_s: u64,
    /// How long after a worker's death its items may be taken by another, in seconds (a live
    /// worker renews its leases every third of it) [default: 30].
    #[arg(long)]
    lease_s: Option<u64>,
    /// List the dead letters (id and reason) and exit.
    #[arg(long)]
    dead_letters: bool,
    /// Put the dead (or in review) job with this id back in the queue and exit.
    #[arg(long)]
    requeue: Option<String>,
    /// A response cache: `memory`, `sqlite:PATH` or `redis://host:port[/db]` (over `[cache]`
    /// in the providers file). A question it has the answer to is not sent again.
    #[arg(long, value_name = "SPEC")]
    cache: Option<String>,
}

/// A batch item's deadline when neither `--item-deadline-s` nor the providers file sets one:
/// an hour.
const DEFAULT_ITEM_DEADLINE: Duration = Duration::from_secs(3_600);

impl Args {
    /// The item deadline: the flag when given, else the file's stated deadline, else an hour.
    fn item_deadline(&self, config: &llm_failover::Config) -> Duration {
        match self.item_deadline_s {
            Some(s) => Duration::from_secs(s.max(1)),
            None => config.stated_deadline().unwrap_or(DEFAULT_ITEM_DEADLINE),
        }
    }
}

/// The demo's emulated providers: limits a little off the ones in `providers.toml` (the
/// client learns the stated ones from the headers), 150–450 ms per answer.
fn tune_demo(prefix: &str, p: ProviderConfig) -> ProviderConfig {
    let p = p.with_latency(150, 300);
    match prefix {
        "openai" => p.with_limits(Limits::per_minute(180, 40_000)),
        "anthropic" => p.with_limits(Limits::per_minute(45, 30_000)),
        _ => p,
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    common::init_tracing();
    let args = Args::parse();
    match run(args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let config_path = args.config.to_string_lossy().into_owned();
    let setup = common::setup(&config_path, args.env.as_deref(), tune_demo).await?;
    if let Some(emu) = &setup.emulator {
        script_demo(emu);
    }
    let mut builder = setup.builder;
    if let Some(spec) = &args.cache {
        builder = builder.cache(Cache::open(spec).map_err(|e| format!("--cache: {e}"))?);
    }
    let client: Client = builder.build()?;
    eprintln!(
        "environment {}: chat via {} (in failover order)",
        client.environment(),
        client
            .chat_providers()
            .iter()
            .map(|p| p.as_str())
            .collect::<Vec<_>>()
            .join(" → ")
    );
    // LLM_FAILOVER_REDIS_URL (or [shared] in the file) shares the limits with other workers.
    if let Some(shared) = client.shared() {
        eprintln!(
            "limits shared through Redis at {} (keys under {})",
            shared.host(),
            shared.key_prefix
        );
    }

    if let Some(cache) = client.cache() {
        eprintln!(
            "cache: {} (answers kept {})",
            cache.describe(),
            show_duration(cache.ttl())
        );
    }

    if !args.no_queue {
        let code = run_queued(&args, &setup.config, &client).await?;
        drop(setup.emulator);
        return Ok(code);
    }

    let code = run_file(&args, &setup.config, &client).await?;
    drop(setup.emulator);
    Ok(code)
}

/// The batch without the queue (--no-queue): the results file is its only state.
async fn run_file(
    args: &Args,
    config: &llm_failover::Config,
    client: &Client,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    // Counted only in a regular file: counting a pipe would consume it.
    let total = if std::fs::metadata(&args.input).is_ok_and(|m| m.is_file()) {
        count_lines(&args.input)
            .await
            .map_err(|e| format!("cannot read {}: {e}", args.input.display()))?
    } else {
        0
    };
    let runner = Runner::new(client.clone())
        .concurrency(args.concurrency)
        .deadline(args.item_deadline(config));
    let job = FileJob::new(&args.input, &args.output).retry_failed(args.retry_failed);

    let stop = Stop::new();
    let bar = progress_bar(total);
    tokio::spawn(handle_ctrl_c(stop.clone(), bar.clone()));
    let ticker = tokio::spawn(show_progress(
        runner.progress().clone(),
        client.clone(),
        chat_models(client, config),
        bar.clone(),
        total,
    ));

    let report = job.run(&runner, &stop).await;
    ticker.abort();
    bar.finish_and_clear();
    let report = report?;

    let summary = Summary::collect(client, &report, Some(config)).await;
    eprint!("{summary}");
    eprintln!(
        "results: {} ({} lines)",
        args.output.display(),
        report.compaction.kept
    );
    if let Some(path) = &args.summary_json {
        let json = serde_json::to_string_pretty(&summary)?;
        std::fs::write(path, json + "\n")
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(if report.run.stopped {
        ExitCode::from(130)
    } else {
        ExitCode::SUCCESS
    })
}

/// The demo's faults: ten seconds or so in, the primary throttles once (Retry-After: 3 s)
/// and the secondary is overloaded once (Anthropic's 529): each request fails over at once.
fn script_demo(emu: &llm_failover_emulator::Emulator) {
    // Ten seconds or so in, the primary throttles once (Retry-After: 3 s) and the
    // secondary is overloaded once (Anthropic's 529): each request fails over at once.
    // The secondary's own limit is a little below the configured one, so its own 429
    // shows too; the primary states a higher limit than configured, which the client
    // learns from its headers.
    let mut script = vec![Fault::Pass; 90];
    script.push(Fault::RateLimit {
        retry_after: RetryAfter::Seconds(3),
    });
    emu.script("openai", script);
    let mut script = vec![Fault::Pass; 30];
    script.push(Fault::Overloaded);
    emu.script("anthropic", script);
    eprintln!(
        "demo: emulator on {} ({}); no key, no network",
        emu.url(),
        emu.providers()
            .iter()
            .map(|(prefix, kind, _)| format!("{prefix}: {}", kind.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// The batch on a durable queue (--queue), and its dead-letter commands.
async fn run_queued(
    args: &Args,
    config: &llm_failover::Config,
    client: &Client,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    // Before a queue file is made beside it.
    QueuedJob::check_files(&args.input, &args.output)?;
    let spec = match args.queue.as_str() {
        "default" => QueuedJob::default_queue(&args.output),
        other => other.to_owned(),
    };
    let queue = Queue::open(&spec).await?;
    let shown = spec.split('@').next_back().unwrap_or(&spec);
    if let Some(code) = dead_letter_command(args, &queue).await? {
        return Ok(code);
    }
    eprintln!("queue: {} ({shown})", queue.backend());
    let stop = Stop::new();
    let (total, invalid) = count_input(&args.input).await;
    let bar = progress_bar(total);
    tokio::spawn(handle_ctrl_c(stop.clone(), bar.clone()));
    let ticker = tokio::spawn(show_queue(
        queue.clone(),
        client.clone(),
        chat_models(client, config),
        bar.clone(),
        (total, invalid),
    ));
    let job = QueuedJob::new(&args.input, &args.output, queue)
        .retry_failed(args.retry_failed)
        .concurrency(args.concurrency)
        .deadline(args.item_deadline(config))
        .max_wait(Duration::from_secs(args.max_wait_s))
        .patience(Duration::from_secs(args.patience_s));
    let job = match args.lease_s {
        Some(s) => job.lease(Duration::from_secs(s.max(1))),
        None => job,
    };
    let report = job.run(client, &stop).await;
    ticker.abort();
    bar.finish_and_clear();
    let report = report?;
    let summary = Summary::for_queued(client, &report, Some(config)).await;
    eprint!("{summary}");
    print_queued(args, &report);
    if let Some(path) = &args.summary_json {
        let json = serde_json::to_string_pretty(&summary)?;
        std::fs::write(path, json + "\n")
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(match report.worker.ended {
        Ended::Stopped => ExitCode::from(130),
        Ended::OutOfPatience => {
            eprintln!(
                "out of patience: {} item(s) still queued; run again to finish them",
                report.pending
            );
            ExitCode::from(75)
        }
        _ => ExitCode::SUCCESS,
    })
}

/// --dead-letters and --requeue: the queue's one-command maintenance (then exit).
async fn dead_letter_command(
    args: &Args,
    queue: &Queue,
) -> Result<Option<ExitCode>, Box<dyn std::error::Error>> {
    if args.dead_letters {
        for job in queue.dead_letters().await? {
            let id = QueuedJob::item_id(&job.id);
            println!("{id}\t{}", job.reason.as_deref().unwrap_or(""));
        }
        return Ok(Some(ExitCode::SUCCESS));
    }
    if let Some(id) = &args.requeue {
        let now = llm_failover::jobs::wall_ms(TokioClock.wall());
        let mut requeued = 0;
        for job in queue.dead_letters().await? {
            if QueuedJob::item_id(&job.id) == id && queue.requeue(&job.id, now).await? {
                requeued += 1;
            }
        }
        if requeued > 0 {
            eprintln!("{id}: back in the queue");
            return Ok(Some(ExitCode::SUCCESS));
        }
        eprintln!("{id}: no such dead job (or in review) in the queue");
        return Ok(Some(ExitCode::FAILURE));
    }
    Ok(None)
}

/// What the queue and this process did, after the summary.
fn print_queued(args: &Args, report: &QueuedReport) {
    let w = &report.worker;
    eprintln!(
        "queue: {} items · {} new · {} requeued · {} carried from the results file",
        report.items, report.enqueued, report.requeued, report.carried
    );
    eprintln!(
        "  this process: {} claimed · {} retried later · {} snoozed",
        w.claimed, w.failed, w.snoozed
    );
    eprintln!(
        "  stale results refused {} · expired leases reaped {}",
        w.lost, w.reaped
    );
    eprintln!(
        "results: {} — ok {} · failed {} · still queued {}",
        args.output.display(),
        report.ok,
        report.failed,
        report.pending
    );
}

/// The model each chat provider is paced for, to read its limits.
fn chat_models(client: &Client, config: &llm_failover::Config) -> Vec<(String, String)> {
    client
        .chat_providers()
        .iter()
        .filter_map(|id| {
            let model = config.providers.get(id.as_str())?.model.clone()?;
            Some((id.to_string(), model))
        })
        .collect()
}

/// The input's lines and, of those, the bad ones (each a failed item from the start); zero
/// for an input that is not a regular file (reading a pipe would consume it).
async fn count_input(path: &std::path::Path) -> (u64, u64) {
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return (0, 0);
    }
    let Ok(file) = tokio::fs::File::open(path).await else {
        return (0, 0);
    };
    let mut reader = InputReader::new(tokio::io::BufReader::new(file));
    let (mut lines, mut invalid) = (0, 0);
    while let Ok(Some(parsed)) = reader.next().await {
        lines += 1;
        invalid += u64::from(parsed.is_err());
    }
    (lines, invalid)
}

/// The limits' pace of each chat provider, for the ETA.
async fn paces(client: &Client, models: &[(String, String)]) -> Vec<Option<Pace>> {
    let stats = client.stats();
    let now = TokioClock.now();
    let mut paces = Vec::with_capacity(models.len());
    for (provider, model) in models {
        let tokens_per_item = stats
            .provider(provider)
            .filter(|s| s.ok > 0)
            .map(|s| (s.input_tokens + s.output_tokens) as f64 / s.ok as f64);
        let limits = client.limits(provider, model).await.ok().flatten();
        paces.push(limits.and_then(|l| Pace::from_limits(&l, tokens_per_item, now)));
    }
    paces
}

/// Items settled a second over the last `window` of readings: the rate the queue is being
/// worked at now, not since the start (a run that waited through an outage, or resumed
/// half-done, would otherwise be mis-timed).
#[derive(Default)]
struct SettledRate {
    readings: std::collections::VecDeque<(tokio::time::Instant, u64)>,
}

impl SettledRate {
    const WINDOW: Duration = Duration::from_secs(30);

    fn add(&mut self, at: tokio::time::Instant, settled: u64) -> Option<f64> {
        self.readings.push_back((at, settled));
        while self
            .readings
            .front()
            .is_some_and(|(t, _)| at.saturating_duration_since(*t) > Self::WINDOW)
        {
            self.readings.pop_front();
        }
        let (t0, n0) = *self.readings.front()?;
        let secs = at.saturating_duration_since(t0).as_secs_f64();
        (secs > 0.0 && settled > n0).then(|| (settled - n0) as f64 / secs)
    }
}

/// The queue's progress: a bar on a terminal (a plain line every 2 s otherwise) with what is
/// settled, failed (bad input lines from the start), queued and running, and an ETA from
/// the rate items settle at now and the providers' limits.
async fn show_queue(
    queue: Queue,
    client: Client,
    models: Vec<(String, String)>,
    bar: ProgressBar,
    (total, invalid): (u64, u64),
) {
    let tty = !bar.is_hidden();
    let period = Duration::from_millis(if tty { 500 } else { 2_000 });
    let mut tick = tokio::time::interval(period);
    let mut rate = SettledRate::default();
    tick.tick().await;
    loop {
        tick.tick().await;
        let now = llm_failover::jobs::wall_ms(TokioClock.wall());
        let Ok(s) = queue.stats(now).await else {
            continue;
        };
        let settled = s.done + s.dead + s.review;
        let observed = rate.add(TokioClock.now(), settled);
        let left = s.ready + s.running;
        let eta = eta(left, s.running, &paces(&client, &models).await, observed)
            .map_or_else(|| "?".to_owned(), show_duration);
        let t = client.stats().total();
        let msg = format!(
            "ok {} · failed {} · queued {} · running {} · 429s {} · failovers {} · ETA {eta}",
            s.done,
            s.dead + s.review + invalid,
            s.ready,
            s.running,
            t.rate_limited,
            t.failovers
        );
        let position = (settled + invalid).min(total.max(settled + invalid));
        if tty {
            bar.set_position(position);
            bar.set_message(msg);
        } else {
            eprintln!("[{position}/{total}] {msg}");
        }
    }
}

fn progress_bar(total: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    let style =
        ProgressStyle::with_template("{bar:30.cyan/blue} {pos}/{len} {msg} · {elapsed_precise}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("█▉▊▋▌▍▎▏ ");
    bar.set_style(style);
    bar
}

/// Updates the bar every 200 ms on a terminal; otherwise prints a plain line every 2 s.
async fn show_progress(
    progress: llm_failover::batch::Progress,
    client: Client,
    models: Vec<(String, String)>,
    bar: ProgressBar,
    total: u64,
) {
    let tty = !bar.is_hidden();
    let period = if tty {
        Duration::from_millis(200)
    } else {
        Duration::from_secs(2)
    };
    let started = TokioClock.now();
    let mut tick = tokio::time::interval(period);
    tick.tick().await;
    loop {
        tick.tick().await;
        let p = progress.snapshot();
        let t = client.stats().total();
        let left = total.saturating_sub(p.finished());
        let paces = paces(&client, &models).await;
        let elapsed = TokioClock
            .now()
            .saturating_duration_since(started)
            .as_secs_f64();
        let ran = p.ok + p.failed;
        let observed = (ran > 0 && elapsed > 0.0).then(|| ran as f64 / elapsed);
        let eta = if total == 0 {
            "?".to_owned()
        } else {
            eta(left, p.in_flight, &paces, observed).map_or_else(|| "?".to_owned(), show_duration)
        };
        let msg = format!(
            "ok {} · failed {} · in flight {} · skipped {} · waited on limits {:.1} s (summed over items) · 429s {} · failovers {} · ETA {eta}",
            p.ok,
            p.failed,
            p.in_flight,
            p.skipped,
            t.admission_wait.as_secs_f64(),
            t.rate_limited,
            t.failovers
        );
        if tty {
            bar.set_position(p.finished());
            bar.set_message(msg);
        } else {
            eprintln!("[{}/{total}] {msg}", p.finished());
        }
    }
}

/// `42 s`, `3 min 05 s`, `2 h 10 min`, `7 days`.
fn show_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {:02} s", s / 60, s % 60),
        3600..86_400 => format!("{} h {:02} min", s / 3600, s % 3600 / 60),
        _ => format!("{:.1} days", s as f64 / 86_400.0),
    }
}

/// First Ctrl-C: no new items, let those in flight finish. Second: drop them too.
async fn handle_ctrl_c(stop: Stop, bar: ProgressBar) {
    if tokio::signal::ctrl_c().await.is_err() {
        return;
    }
    stop.stop();
    bar.suspend(|| {
        eprintln!("stopping: no new items; waiting for those in flight (Ctrl-C again to drop them)")
    });
    if tokio::signal::ctrl_c().await.is_ok() {
        stop.abort();
        bar.suspend(|| eprintln!("aborting: items in flight are left for the next run"));
    }
}
