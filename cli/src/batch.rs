//! `llm-failover batch`: a JSON-lines prompt file through every chat provider of an
//! environment into a JSON-lines results file, on a durable queue (or, with `--no-queue`, with
//! the results file as the only state). Lines with `input` instead of `prompt`/`messages` are
//! embeddings, sent through the environment's embedding providers; their result lines carry
//! `vectors`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use llm_failover::Client;
use llm_failover::batch::{DEFAULT_CONCURRENCY, FileJob, Runner, Stop, Summary};
use llm_failover::cache::Cache;
use llm_failover_queue::{Ended, Queue};
use llm_failover_queue::{LaneChoice, QueuedJob, QueuedReport};

use crate::metrics::Metrics;
use crate::progress::{
    chat_models, count_input, count_lines, handle_ctrl_c, progress_bar, show_duration,
    show_progress, show_queue,
};
use crate::queue::{now_ms, shown};
use crate::setup;

/// The options of `llm-failover batch`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(flatten)]
    target: setup::Target,
    /// Prompts, one JSON object per line: {"id", "prompt"} or {"id", "messages"} for a chat,
    /// {"id", "input"} (a text or an array of texts) for embeddings [default: the demo's
    /// prompts].
    #[arg(long)]
    input: Option<PathBuf>,
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
    /// The durable job queue the items run through: `sqlite:PATH`, a PostgreSQL connection
    /// string (`postgres://…`, TLS as its `sslmode` says, or `host=… dbname=…`), or
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
    /// Ask the providers to cancel the remote batches the queue still polls (--lane
    /// provider-batch) and exit; what they answered is kept, and the next run answers the
    /// rest live. A second Ctrl-C during a run does the same.
    #[arg(long)]
    cancel_batches: bool,
    /// List the dead letters (id and reason) and exit.
    #[arg(long)]
    dead_letters: bool,
    /// Put the dead (or in review) job with this id back in the queue and exit.
    #[arg(long)]
    requeue: Option<String>,
    /// Which lane the chat items take: `live` requests, or `provider-batch` — the Batch API
    /// of the first provider that has one (OpenAI and compatible hosts, Anthropic, Gemini):
    /// answers within hours, at half the price, under the batch API's own limits; what its
    /// batch expires or refuses retryably is answered live in the same run — or `auto`
    /// (the provider batch where a provider has one, else live). Needs the queue.
    #[arg(long, value_enum, default_value_t = LaneArg::Live, conflicts_with = "no_queue")]
    lane: LaneArg,
    /// A response cache: `memory`, `sqlite:PATH` or `redis://host:port[/db]` (over `[cache]`
    /// in the providers file). A question it has the answer to is not sent again.
    #[arg(long, value_name = "SPEC")]
    cache: Option<String>,
    #[command(flatten)]
    metrics: crate::metrics::MetricsArgs,
}

/// `--lane`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LaneArg {
    Live,
    ProviderBatch,
    Auto,
}

impl LaneArg {
    fn choice(self) -> LaneChoice {
        match self {
            LaneArg::Live => LaneChoice::Live,
            LaneArg::ProviderBatch => LaneChoice::ProviderBatch,
            LaneArg::Auto => LaneChoice::Auto,
        }
    }
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

/// Runs the batch `args` describe; its exit status.
pub(crate) async fn run(args: Args) -> Result<ExitCode, Box<dyn std::error::Error>> {
    // The emulator (in `demo`) is kept alive until the run has ended.
    let setup::Setup {
        config,
        builder,
        emulator: _emulator,
    } = args.target.setup(setup::script_chat_demo).await?;
    let input = setup::input(args.input.clone())?;
    let mut builder = builder;
    if let Some(spec) = &args.cache {
        builder = builder.cache(Cache::open(spec).map_err(|e| format!("--cache: {e}"))?);
    }
    let metrics = Metrics::start(&args.metrics).await?;
    if let Some(m) = &metrics {
        builder = builder.observer(m.observer());
    }
    let client: Client = builder.build()?;
    let embedding = client.embedding_providers();
    let embeddings = if embedding.is_empty() {
        String::new()
    } else {
        format!(", embeddings via {}", setup::order(&embedding))
    };
    eprintln!(
        "environment {}: chat via {}{embeddings} (in failover order)",
        client.environment(),
        setup::order(&client.chat_providers())
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

    let code = if args.no_queue {
        run_file(&args, &input, &config, &client).await
    } else {
        run_queued(&args, &input, &config, &client, metrics.as_ref()).await
    };
    if let Some(m) = metrics {
        m.finish().await;
    }
    code
}

/// The batch without the queue (--no-queue): the results file is its only state.
async fn run_file(
    args: &Args,
    input: &Path,
    config: &llm_failover::Config,
    client: &Client,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    // Counted only in a regular file: counting a pipe would consume it.
    let total = if std::fs::metadata(input).is_ok_and(|m| m.is_file()) {
        count_lines(input)
            .await
            .map_err(|e| format!("cannot read {}: {e}", input.display()))?
    } else {
        0
    };
    let runner = Runner::new(client.clone())
        .concurrency(args.concurrency)
        .deadline(args.item_deadline(config));
    let job = FileJob::new(input, &args.output).retry_failed(args.retry_failed);

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
    } else if report.run.budget_spent.is_some() {
        // Its items are not done: a run after the budget's reset sends them.
        ExitCode::from(75)
    } else {
        ExitCode::SUCCESS
    })
}

/// The batch on a durable queue (--queue), and its dead-letter commands.
async fn run_queued(
    args: &Args,
    input: &Path,
    config: &llm_failover::Config,
    client: &Client,
    metrics: Option<&Metrics>,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    // Before a queue file is made beside it.
    QueuedJob::check_files(input, &args.output)?;
    let spec = match args.queue.as_str() {
        "default" => QueuedJob::default_queue(&args.output),
        other => other.to_owned(),
    };
    let queue = Queue::open(&spec).await?;
    if let Some(code) = dead_letter_command(args, &queue).await? {
        return Ok(code);
    }
    if args.cancel_batches {
        let job = QueuedJob::new(input, &args.output, queue.clone());
        let n = job.cancel_remote_batches(client).await?;
        eprintln!("{n} remote batch(es) asked to cancel; what they answered is kept");
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!("queue: {} ({})", queue.backend(), shown(&spec, &queue));
    let stop = Stop::new();
    let (total, invalid) = count_input(input).await;
    let bar = progress_bar(total);
    tokio::spawn(handle_ctrl_c(stop.clone(), bar.clone()));
    let ticker = tokio::spawn(show_queue(
        queue.clone(),
        client.clone(),
        chat_models(client, config),
        bar.clone(),
        (total, invalid),
        metrics.cloned(),
    ));
    let job = QueuedJob::new(input, &args.output, queue.clone())
        .retry_failed(args.retry_failed)
        .concurrency(args.concurrency)
        .deadline(args.item_deadline(config))
        .max_wait(Duration::from_secs(args.max_wait_s))
        .patience(Duration::from_secs(args.patience_s))
        .lane(args.lane.choice());
    let job = match args.lease_s {
        Some(s) => job.lease(Duration::from_secs(s.max(1))),
        None => job,
    };
    let report = job.run(client, &stop).await;
    ticker.abort();
    bar.finish_and_clear();
    let report = report?;
    if let (Some(m), Ok(stats)) = (metrics, queue.stats(now_ms()).await) {
        m.record_queue(&stats);
    }
    let summary = report.summary(client, Some(config)).await;
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
        Ended::BudgetSpent => {
            eprintln!(
                "budget spent: {} item(s) still queued; run again when it starts again",
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
        let now = now_ms();
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
