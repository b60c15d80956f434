//! Shared by the examples: read `providers.toml`, choose the environment, and — in `demo` —
//! start the emulator in this process on a free loopback port and point the client at it.
//!
//! In `demo` nothing leaves the machine: [`llm_failover_emulator::demo::Demo`] serves every
//! provider of the environment (its prefix is the first path segment of the provider's
//! `base_url` in `providers.toml`, e.g. `/openai/v1` → `openai`), and the emulator's key is
//! handed to the client in code, so `LLM_FAILOVER_DEMO_KEY` need not be set. An application's
//! own tests do the same with that module.
#![allow(dead_code, unreachable_pub)]

use std::error::Error;
use std::future::Future;
use std::process::ExitCode;

use llm_failover::{ClientBuilder, Config};
use llm_failover_emulator::demo::Demo;
use llm_failover_emulator::{Emulator, ProviderConfig};

/// The environment that runs against the in-process emulator.
pub const DEMO: &str = "demo";

/// `--config` and `--env`, the options every example shares.
#[derive(clap::Args, Debug)]
pub struct Target {
    /// The providers file.
    #[arg(long, default_value = "providers.toml")]
    pub config: String,
    /// The environment [default: LLM_FAILOVER_ENV, else the file's default_environment].
    #[arg(long)]
    pub env: Option<String>,
}

impl Target {
    /// [`setup`] for these options.
    pub async fn setup(
        &self,
        tune: impl Fn(&str, ProviderConfig) -> ProviderConfig + Send + Sync + 'static,
    ) -> Result<Setup, Box<dyn Error>> {
        setup(&self.config, self.env.as_deref(), tune).await
    }
}

/// An example's `main`: tracing on, then `run`; an error is printed and exits with 1.
pub async fn main<A: clap::Parser, F: Future<Output = Result<(), Box<dyn Error>>>>(
    run: impl FnOnce(A) -> F,
) -> ExitCode {
    init_tracing();
    match run(A::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("\nerror: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `environment NAME: a → b → c`, the failover order an example will use.
pub fn print_order(environment: &str, order: &[llm_failover::ProviderId]) {
    let order: Vec<String> = order.iter().map(ToString::to_string).collect();
    eprintln!("environment {environment}: {}", order.join(" → "));
}

/// What an example needs to build its client.
pub struct Setup {
    /// The parsed `providers.toml`.
    pub config: Config,
    /// The environment chosen (`--env`, else `LLM_FAILOVER_ENV`, else `default_environment`).
    pub environment: String,
    /// A builder for that environment, pointed at the emulator in `demo`.
    pub builder: ClientBuilder,
    /// The emulator, in `demo` (keep it alive while the client runs).
    pub emulator: Option<Emulator>,
}

/// Reads `config_path`, selects `env`, and in `demo` starts the emulator; `tune` adjusts each
/// emulated provider (limits, latency) given its prefix.
pub async fn setup(
    config_path: &str,
    env: Option<&str>,
    tune: impl Fn(&str, ProviderConfig) -> ProviderConfig + Send + Sync + 'static,
) -> Result<Setup, Box<dyn Error>> {
    let config = Config::from_path(config_path)?;
    let environment = config.select_environment(env)?.name.clone();
    let mut builder = ClientBuilder::default()
        .config(config.clone())
        .environment(&environment);
    let mut emulator = None;
    if environment == DEMO {
        let demo = Demo::builder(&config, DEMO).tune(tune).start().await?;
        builder = demo.point(builder);
        emulator = Some(demo.into_emulator());
    }
    Ok(Setup {
        config,
        environment,
        builder,
        emulator,
    })
}

/// Logs to stderr, `warn` and above unless `RUST_LOG` says otherwise. Prompts, answers and
/// keys are never logged by the SDK.
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // Colours only on a terminal (and unless NO_COLOR is set): logs piped to a file stay text.
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .try_init();
}

/// One line per provider in `order` that was sent anything: what it answered, and why a
/// request moved on from it.
pub fn explain(stats: &llm_failover::Stats, order: &[llm_failover::ProviderId]) -> Vec<String> {
    let mut out = Vec::new();
    for id in order {
        let Some(p) = stats.provider(id.as_str()) else {
            continue;
        };
        if p.sent == 0 {
            continue;
        }
        let mut why = Vec::new();
        if p.rate_limited > 0 {
            why.push(format!("{} rate limited (429)", p.rate_limited));
        }
        if p.quota_exhausted > 0 {
            why.push(format!("{} quota exhausted", p.quota_exhausted));
        }
        if p.server_errors > 0 {
            why.push(format!("{} server error (5xx)", p.server_errors));
        }
        let other = p.transient.saturating_sub(p.server_errors);
        if other > 0 {
            why.push(format!("{other} timeout/connection/unreadable answer"));
        }
        if p.terminal > 0 {
            why.push(format!("{} refused (4xx, not retried)", p.terminal));
        }
        let mut line = format!("  {id}: sent {}, ok {}", p.sent, p.ok);
        if !why.is_empty() {
            line.push_str(&format!(", {}", why.join(", ")));
        }
        if p.failovers > 0 {
            line.push_str(&format!(" → failed over {} time(s)", p.failovers));
        }
        if p.breaker_opens > 0 {
            line.push_str(&format!(", breaker opened {}×", p.breaker_opens));
        }
        if !p.admission_wait.is_zero() {
            line.push_str(&format!(
                ", waited {:.2} s for its limits",
                p.admission_wait.as_secs_f64()
            ));
        }
        out.push(line);
    }
    out
}
