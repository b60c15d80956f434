//! A client built entirely in code: two providers, their order, limits, the policy and the
//! keys as secret values — no `providers.toml`, no environment variable.
//!
//! ```sh
//! cargo run --example code_first
//! ```
//!
//! The two providers (an OpenAI-format host and Anthropic) are served by the emulator in this
//! process, on a free loopback port, with its own keys; in an application the base URLs are
//! the providers' and the keys come from wherever it keeps secrets (a vault, a KMS, a
//! config service), handed over as [`Credential`]s. The primary answers the first request
//! with a 503, so you see it fail over.

use std::error::Error;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use llm_failover::config::Policy;
use llm_failover::provider::anthropic::Anthropic;
use llm_failover::provider::openai::OpenAi;
use llm_failover::{ChatRequest, Client, Credential, Limits, ProviderId, ProviderSettings};
use llm_failover_emulator::{Emulator, Fault, ProviderConfig};

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The error's own words, not `main`'s `Error: <Debug>` of it.
            eprintln!("\nerror: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn Error>> {
    // Stand-ins for the providers (in an application: their real base URLs).
    let emu = Emulator::builder()
        .provider(ProviderConfig::openai("openai"))
        .anthropic("anthropic")
        .start()
        .await?;
    emu.script("openai", [Fault::Status { status: 503 }]);

    // Keys as secret values, from wherever the application keeps them: a Credential never
    // shows its key in Debug, logs or errors.
    let openai_key = Credential::new(emu.key("openai"));
    let anthropic_key = Credential::new(emu.key("anthropic"));

    let openai = OpenAi::new(ProviderId::new("openai"), emu.base_url("openai").parse()?)
        .with_chat_model("gpt-4o-mini");
    let anthropic = Anthropic::new(
        ProviderId::new("anthropic"),
        emu.base_url("anthropic").parse()?,
    )
    .with_model("claude-3-5-haiku-latest");

    let mut policy = Policy::default();
    policy.deadline = Duration::from_secs(30);
    policy.max_attempts = 4;

    let client = Client::builder()
        .policy(policy)
        .provider(
            Arc::new(openai),
            ProviderSettings::new()
                .credential(openai_key)
                .limits(Limits::none().with_rpm(500).with_tpm(200_000))
                .timeout(Duration::from_secs(20)),
        )
        .provider(
            Arc::new(anthropic),
            ProviderSettings::new()
                .credential(anthropic_key)
                .limits(Limits::none().with_rpm(50)),
        )
        .chat_order(["openai", "anthropic"])
        .build()?;

    let order: Vec<String> = client
        .chat_providers()
        .iter()
        .map(ToString::to_string)
        .collect();
    eprintln!("chat order: {}", order.join(" → "));

    let answer = client
        .chat(ChatRequest::from_prompt("Say hello in five words.").max_tokens(32))
        .await?;
    println!("{}", answer.text);
    eprintln!(
        "answered by {} ({}) after {} attempt(s)",
        answer.provider, answer.model, answer.attempts
    );
    if let Some(requests) = client
        .limits("anthropic", "claude-3-5-haiku-latest")
        .await?
        .and_then(|l| l.requests)
    {
        eprintln!(
            "anthropic: {:.0} of {} requests left per {:?}",
            requests.level, requests.capacity, requests.window
        );
    }
    Ok(())
}
