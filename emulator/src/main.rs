//! `llm-failover-emulator --config emulator.toml`: serves the configured providers on
//! 127.0.0.1 and prints one line per provider, `PREFIX BASE_URL`, then one line per Bedrock
//! provider with the AWS credentials it accepts (`aws PREFIX access_key_id=… …`), one line
//! per Vertex provider with its project and where its service-account key file is served
//! (`vertex PREFIX project=… key_file=URL`; the key itself is not printed) and the admin URL,
//! until Ctrl-C.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use llm_failover_emulator::{Emulator, EmulatorConfig, Kind};

/// The port when neither the config nor `--port` gives one.
const DEFAULT_PORT: u16 = 4010;

/// A loopback emulator of LLM provider APIs (OpenAI, Azure, Anthropic, Gemini, AWS Bedrock,
/// Google Vertex AI, Deepgram).
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// TOML configuration (see emulator/emulator.toml).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Port on 127.0.0.1 (overrides the config; 0 = any free port).
    #[arg(long, short)]
    port: Option<u16>,
    /// Length of a rate-limit minute in milliseconds (overrides the config).
    #[arg(long)]
    minute_ms: Option<u64>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let mut cfg = match &args.config {
        Some(path) => match EmulatorConfig::from_path(path) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
        },
        None => default_config(),
    };
    cfg.port = Some(args.port.or(cfg.port).unwrap_or(DEFAULT_PORT));
    if let Some(ms) = args.minute_ms {
        cfg.minute_ms = ms;
    }
    let emu = match Emulator::start(cfg).await {
        Ok(e) => e,
        Err(e) => {
            eprintln!("emulator: {e}");
            return ExitCode::from(1);
        }
    };
    let providers = emu.providers();
    for (prefix, _kind, url) in &providers {
        println!("{prefix} {url}");
    }
    for (prefix, _, _) in providers.iter().filter(|(_, k, _)| *k == Kind::Bedrock) {
        let aws = emu.aws_credentials(prefix);
        let token = aws
            .session_token
            .map(|t| format!(" session_token={t}"))
            .unwrap_or_default();
        println!(
            "aws {prefix} access_key_id={} secret_access_key={} region={}{token}",
            aws.access_key_id, aws.secret_access_key, aws.region
        );
    }
    for (prefix, _, _) in providers.iter().filter(|(_, k, _)| *k == Kind::Vertex) {
        let key = emu.service_account_key(prefix);
        println!(
            "vertex {prefix} project={} key_file={}/_admin/service_account?provider={prefix}",
            key.project_id,
            emu.url()
        );
    }
    println!("admin {}/_admin/counters", emu.url());
    let _ = tokio::signal::ctrl_c().await;
    emu.shutdown().await;
    ExitCode::SUCCESS
}

/// The demo providers, when no config is given.
fn default_config() -> EmulatorConfig {
    use llm_failover_emulator::ProviderConfig;
    EmulatorConfig::default()
        .with_provider(ProviderConfig::openai("openai").with_models(["gpt-4o-mini", "whisper-1"]))
        .with_provider(ProviderConfig::anthropic("anthropic"))
        .with_provider(ProviderConfig::deepgram("deepgram"))
}
