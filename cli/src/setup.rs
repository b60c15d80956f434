//! The providers file, the environment and — in `demo` — the emulator in this process on a
//! free loopback port, the client pointed at it; and the log.

use std::error::Error;
use std::path::{Path, PathBuf};

use llm_failover::{ClientBuilder, Config};
use llm_failover_emulator::demo::Demo;
use llm_failover_emulator::{Emulator, Fault, Limits, ProviderConfig, RetryAfter};

/// The environment that runs against the in-process emulator.
const DEMO: &str = "demo";

/// The repository's providers file, for a command run where there is none.
const BUNDLED_CONFIG: &str = include_str!("../../providers.toml");

/// The repository's demo prompts, for a command run without `--input` where they are not.
const BUNDLED_PROMPTS: &str = include_str!("../../examples/prompts.jsonl");

/// `--config` and `--env`, the options every command shares.
#[derive(clap::Args, Debug)]
pub(crate) struct Target {
    /// The providers file [default: providers.toml here, else the bundled one].
    #[arg(long)]
    config: Option<PathBuf>,
    /// The environment [default: LLM_FAILOVER_ENV, else the file's default_environment, `demo`].
    #[arg(long)]
    env: Option<String>,
}

impl Target {
    /// [`setup`] for these options; in `demo`, `script` adds the command's faults.
    pub(crate) async fn setup(&self, script: fn(&Emulator)) -> Result<Setup, Box<dyn Error>> {
        setup(self.config.as_deref(), self.env.as_deref(), script).await
    }
}

/// `a → b → c`: a failover order as the command shows it.
pub(crate) fn order(ids: &[llm_failover::ProviderId]) -> String {
    ids.iter()
        .map(|p| p.as_str())
        .collect::<Vec<_>>()
        .join(" → ")
}

/// What the command needs to build its client.
pub(crate) struct Setup {
    /// The parsed providers file.
    pub(crate) config: Config,
    /// A builder for the chosen environment, pointed at the emulator in `demo`.
    pub(crate) builder: ClientBuilder,
    /// The emulator, in `demo` (kept alive while the client runs).
    pub(crate) emulator: Option<Emulator>,
}

/// Reads the providers file (`config`; without it `providers.toml` here, else the bundled
/// one), selects `env`, and in `demo` starts the emulator with the demo's limits and latency,
/// and the faults `script` adds.
async fn setup(
    config: Option<&Path>,
    env: Option<&str>,
    script: fn(&Emulator),
) -> Result<Setup, Box<dyn Error>> {
    let config = match config {
        Some(path) => Config::from_path(path)?,
        None if Path::new("providers.toml").is_file() => Config::from_path("providers.toml")?,
        None => {
            eprintln!("no providers.toml here: using the bundled one (its `demo` needs no key)");
            Config::from_toml_str(BUNDLED_CONFIG)?
        }
    };
    let environment = config.select_environment(env)?.name.clone();
    let mut builder = ClientBuilder::default()
        .config(config.clone())
        .environment(&environment);
    let mut emulator = None;
    if environment == DEMO {
        let demo = Demo::builder(&config, DEMO).tune(tune_demo).start().await?;
        builder = demo.point(builder);
        let emu = demo.into_emulator();
        script(&emu);
        show_demo(&emu);
        emulator = Some(emu);
    }
    Ok(Setup {
        config,
        builder,
        emulator,
    })
}

/// The input: `input` when given; else the repository's demo prompts when run from a
/// checkout, else those prompts written to `demo-prompts.jsonl` here (once).
pub(crate) fn input(input: Option<PathBuf>) -> Result<PathBuf, Box<dyn Error>> {
    if let Some(path) = input {
        return Ok(path);
    }
    let checkout = PathBuf::from("examples/prompts.jsonl");
    if checkout.is_file() {
        return Ok(checkout);
    }
    let here = PathBuf::from("demo-prompts.jsonl");
    if !here.exists() {
        std::fs::write(&here, BUNDLED_PROMPTS)
            .map_err(|e| format!("cannot write the demo prompts to {}: {e}", here.display()))?;
        eprintln!("no --input: the demo prompts are in {}", here.display());
    }
    Ok(here)
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

/// The batch demo's faults: ten seconds or so in, the primary throttles once (Retry-After:
/// 3 s) and the secondary is overloaded once (Anthropic's 529): each request fails over at
/// once. The secondary's own limit is a little below the configured one, so its own 429 shows
/// too; the primary states a higher limit than configured, which the client learns from its
/// headers.
pub(crate) fn script_chat_demo(emu: &Emulator) {
    let mut script = vec![Fault::Pass; 90];
    script.push(Fault::RateLimit {
        retry_after: RetryAfter::Seconds(3),
    });
    emu.script("openai", script);
    let mut script = vec![Fault::Pass; 30];
    script.push(Fault::Overloaded);
    emu.script("anthropic", script);
}

/// Where the demo's emulator is and what it serves.
fn show_demo(emu: &Emulator) {
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

/// Logs to stderr, `warn` and above unless `RUST_LOG` says otherwise. Prompts, answers and
/// keys are never logged by the SDK.
pub(crate) fn init_tracing() {
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
