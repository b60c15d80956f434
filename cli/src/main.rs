//! `llm-failover`: the SDK's command line.
//!
//! ```sh
//! cargo install --path cli          # from a checkout of the repository
//! llm-failover                      # the demo: the bundled prompts on the built-in emulator, no keys
//! llm-failover batch --env prod --input prompts.jsonl --output results.jsonl
//! llm-failover transcribe calls/ --output transcripts.jsonl
//! llm-failover batch --help
//! ```
//!
//! `batch` is the default command: `llm-failover --input …` is `llm-failover batch --input …`.
//! It runs a JSON-lines prompt file through every chat provider of an environment into a
//! JSON-lines results file — paced to each provider's stated limits, failing over, on a
//! durable queue that a crash, a rerun or several processes share. `transcribe` does the same
//! for audio files through the speech-to-text providers.

mod batch;
mod eta;
mod metrics;
mod progress;
mod queue;
mod setup;
mod transcribe;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "llm-failover",
    version,
    about = "LLM batches and transcriptions through every provider of an environment: paced \
             to their stated limits, failing over, durable and resumable",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// With no command: `batch`, with these options.
    #[command(flatten)]
    batch: batch::Args,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a JSON-lines prompt batch, resumably (the default command).
    Batch(batch::Args),
    /// Transcribe audio files (or directories, or globs) into a JSON-lines results file, each
    /// file a durable job.
    Transcribe(transcribe::Args),
}

#[tokio::main]
async fn main() -> ExitCode {
    setup::init_tracing();
    let cli = Cli::parse();
    let run = match cli.command {
        Some(Command::Batch(args)) => batch::run(args).await,
        Some(Command::Transcribe(args)) => transcribe::run(args).await,
        None => batch::run(cli.batch).await,
    };
    match run {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
