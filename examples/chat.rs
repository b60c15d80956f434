//! One prompt through the failover order; prints which provider answered and why.
//!
//! ```sh
//! cargo run --example chat -- [--config providers.toml] [--env NAME] [--prompt TEXT] [--max-tokens N]
//! ```
//!
//! In `demo` (the default) the emulator runs in this process, and its primary provider
//! answers the first request with a 503, so you see the request fail over. Add
//! `RUST_LOG=llm_failover=debug` to see every attempt (provider, status, admission wait).
//! A request that fails is printed, with each attempt and why, and the run exits with 1.

mod common;

use std::process::ExitCode;

use llm_failover::{ChatRequest, Error};
use llm_failover_emulator::Fault;

#[derive(clap::Parser, Debug)]
#[command(about = "Send one chat prompt through llm-failover")]
struct Args {
    #[command(flatten)]
    target: common::Target,
    /// The prompt.
    #[arg(
        long,
        default_value = "In two sentences: why do API clients need to read rate-limit headers?"
    )]
    prompt: String,
    /// Longest answer, in tokens.
    #[arg(long, default_value_t = 200)]
    max_tokens: u32,
}

#[tokio::main]
async fn main() -> ExitCode {
    common::main(run).await
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let setup = args.target.setup(|_, p| p.with_latency(100, 100)).await?;
    if let Some(emu) = &setup.emulator {
        emu.script("openai", [Fault::Status { status: 503 }]);
        eprintln!("demo: the emulated primary will answer this request with a 503");
    }
    let client = setup.builder.build()?;
    common::print_order(client.environment(), &client.chat_providers());

    let request = ChatRequest::from_prompt(&args.prompt).max_tokens(args.max_tokens);
    let outcome = client.chat(request).await;
    match &outcome {
        Ok(answer) => {
            println!("{}", answer.text);
            eprintln!();
            eprintln!(
                "answered by {} ({}) after {} attempt(s){}",
                answer.provider,
                answer.model,
                answer.attempts,
                match answer.usage {
                    Some(u) => format!(
                        ", {} input + {} output tokens",
                        u.input_tokens, u.output_tokens
                    ),
                    None => String::new(),
                }
            );
        }
        Err(err) => {
            // The error itself is printed last, by common::main, as the run's failure.
            for (i, attempt) in err.attempts().iter().enumerate() {
                eprintln!("  attempt {}: {}", i + 1, describe(attempt));
            }
        }
    }
    eprintln!("why:");
    for line in common::explain(&client.stats(), &client.chat_providers()) {
        eprintln!("{line}");
    }
    // A request that failed fails the run (exit status 1), so a script running this sees it.
    outcome?;
    Ok(())
}

fn describe(err: &Error) -> String {
    let mut s = err.kind().to_string();
    if let Some(p) = err.provider() {
        s.push_str(&format!(" from {p}"));
    }
    if let Some(status) = err.status() {
        s.push_str(&format!(" (HTTP {status})"));
    }
    if let Some(wait) = err.retry_after() {
        s.push_str(&format!(", retry after {:.1} s", wait.as_secs_f64()));
    }
    format!("{s}: {}", err.message())
}
