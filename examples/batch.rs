//! A prompt batch as a short script of the library: a JSON-lines prompt file through every
//! chat provider of an environment, each item a durable job, into a JSON-lines results file.
//!
//! ```sh
//! cargo run --example batch -- [--config providers.toml] [--env NAME] [--input FILE] [--output FILE]
//! ```
//!
//! The command line does the same job with every option, a progress bar and an ETA:
//! `cargo run --release -p llm-failover-cli` (or `cargo install --path cli`, then
//! `llm-failover`). In `demo` (the default environment) the emulator runs in this process:
//! no key, no network.

mod common;

use std::path::PathBuf;

use llm_failover::batch::Stop;
use llm_failover_queue::Queue;
use llm_failover_queue::QueuedJob;

#[derive(clap::Parser, Debug)]
struct Args {
    #[command(flatten)]
    target: common::Target,
    /// Prompts, one JSON object per line: {"id", "prompt"} or {"id", "messages"}.
    #[arg(long, default_value = "examples/prompts.jsonl")]
    input: PathBuf,
    /// Results, one JSON object per input line.
    #[arg(long, default_value = "results.jsonl")]
    output: PathBuf,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    common::main(|args: Args| async move {
        let setup = args.target.setup(|_, p| p).await?;
        let client = setup.builder.build()?;
        common::print_order(client.environment(), &client.chat_providers());
        // An SQLite file beside the results: a rerun sends nothing already answered.
        let queue = Queue::open(&QueuedJob::default_queue(&args.output)).await?;
        let report = QueuedJob::new(&args.input, &args.output, queue)
            .run(&client, &Stop::new())
            .await?;
        eprint!("{}", report.summary(&client, Some(&setup.config)).await);
        if report.pending > 0 {
            return Err(format!("{} item(s) still queued: run again", report.pending).into());
        }
        Ok(())
    })
    .await
}
