//! `llm-failover`: the SDK's command line.
//!
//! ```sh
//! cargo install --path cli          # from a checkout of the repository
//! llm-failover                      # the demo: the bundled prompts on the built-in emulator, no keys
//! llm-failover batch --env prod --input prompts.jsonl --output results.jsonl
//! llm-failover batch --help
//! ```
//!
//! `batch` is the default command: `llm-failover --input …` is `llm-failover batch --input …`.
//! It runs a JSON-lines prompt file through every chat provider of an environment into a
//! JSON-lines results file — paced to each provider's stated limits, failing over, on a
//! durable queue that a crash, a rerun or several processes share.

mod batch;
mod eta;
mod progress;
mod queue;
mod setup;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "llm-failover",
    version,
    about = "LLM batches through every provider of an environment: paced to their stated \
             limits, failing over, durable and resumable",
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
}

#[tokio::main]
async fn main() -> ExitCode {
    setup::init_tracing();
    let cli = Cli::parse();
    let args = match cli.command {
        Some(Command::Batch(args)) => args,
        None => cli.batch,
    };
    match batch::run(args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
