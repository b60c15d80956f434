//! A streamed answer, printed as it arrives.
//!
//! ```sh
//! cargo run --example stream -- [--config providers.toml] [--env NAME] [--prompt TEXT] [--max-tokens N]
//! ```
//!
//! The router fails over until the first content arrives; after that, an error comes out of
//! the stream. In `demo` (the default) the emulator runs in this process and streams its
//! answer in small chunks.

mod common;

use std::io::Write;
use std::process::ExitCode;

use futures_util::StreamExt;
use llm_failover::ChatRequest;

#[derive(clap::Parser, Debug)]
#[command(about = "Stream one chat answer through llm-failover")]
struct Args {
    #[command(flatten)]
    target: common::Target,
    /// The prompt.
    #[arg(
        long,
        default_value = "Tell a short story about a token bucket that learned patience."
    )]
    prompt: String,
    /// Longest answer, in tokens.
    #[arg(long, default_value_t = 300)]
    max_tokens: u32,
}

#[tokio::main]
async fn main() -> ExitCode {
    common::main(run).await
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let setup = args
        .target
        .setup(|_, p| p.with_latency(150, 50).with_stream_chunk_ms(60))
        .await?;
    let client = setup.builder.build()?;
    let request = ChatRequest::from_prompt(&args.prompt).max_tokens(args.max_tokens);
    let mut stream = client.chat_stream(request).await?;
    eprintln!(
        "streaming from {} ({}) after {} attempt(s):",
        stream.provider(),
        stream.model(),
        stream.attempts()
    );
    let mut usage = None;
    let mut stdout = std::io::stdout();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        print!("{}", chunk.delta);
        stdout.flush()?;
        if chunk.usage.is_some() {
            usage = chunk.usage;
        }
    }
    println!();
    if let Some(u) = usage {
        eprintln!(
            "{} input + {} output tokens",
            u.input_tokens, u.output_tokens
        );
    }
    Ok(())
}
