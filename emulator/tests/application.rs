//! What an application's own tests do: its own `providers.toml` (here the demo parts of the
//! repository's, written to a temporary directory), loaded with `Config::from_path`, the
//! `demo` environment served by an in-process emulator ([`Demo`]), and a client built with
//! `.environment("demo")` — no key in the environment, loopback only.
//!
//! No test waits on the wall clock for logic: failover to the next provider is immediate, and
//! the one test in which the client must wait for a stated `Retry-After` gives it a
//! `ManualClock` (llm-failover's `test-util` feature), which records the wait and returns at
//! once.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use llm_failover::clock::ManualClock;
use llm_failover::{AudioInput, ChatRequest, Client, Config, ErrorKind, TranscriptionRequest};
use llm_failover_emulator::demo::Demo;
use llm_failover_emulator::{Fault, RetryAfter, text};

/// The demo parts of the repository's `providers.toml`, as an application would copy them.
const PROVIDERS_TOML: &str = r#"
default_environment = "demo"

[environments.demo]
chat = ["demo-openai", "demo-anthropic"]
transcription = ["demo-openai", "demo-deepgram"]

[providers.demo-openai]
kind = "openai"
base_url = "http://127.0.0.1:4010/openai/v1"
model = "gpt-4o-mini"
transcription_model = "whisper-1"
api_key_env = { demo = "LLM_FAILOVER_DEMO_KEY" }
limits = { rpm = 180, tpm = 40000 }

[providers.demo-anthropic]
kind = "anthropic"
base_url = "http://127.0.0.1:4010/anthropic"
model = "claude-3-5-haiku-latest"
api_key_env = { demo = "LLM_FAILOVER_DEMO_KEY" }
limits = { rpm = 50, tpm = 20000 }

[providers.demo-deepgram]
kind = "deepgram"
base_url = "http://127.0.0.1:4010/deepgram"
model = "nova-2"
api_key_env = { demo = "LLM_FAILOVER_DEMO_KEY" }
limits = { rpm = 30 }
"#;

/// The application's `providers.toml`, in a directory of its own (removed on drop).
struct Project {
    _dir: tempfile::TempDir,
    providers: PathBuf,
}

fn project() -> Project {
    let dir = tempfile::tempdir().unwrap();
    let providers = dir.path().join("providers.toml");
    std::fs::write(&providers, PROVIDERS_TOML).unwrap();
    Project {
        _dir: dir,
        providers,
    }
}

/// The client an application builds, pointed at `demo`. Variables are read through an empty
/// lookup, so the test proves `LLM_FAILOVER_DEMO_KEY` is not needed whatever the shell has.
fn client(demo: &Demo, p: &Project) -> Client {
    demo.point(
        Client::builder()
            .config_path(&p.providers)
            .environment("demo")
            .env_lookup(|_| None),
    )
    .build()
    .unwrap()
}

#[tokio::test]
async fn environment_demo_answers_a_chat_and_a_transcription_from_an_applications_own_file() {
    let p = project();
    let config = Config::from_path(&p.providers).unwrap();
    let demo = Demo::start(&config, "demo").await.unwrap();
    let client = client(&demo, &p);
    assert_eq!(client.environment(), "demo");

    let ask = || ChatRequest::from_prompt("Name three prime numbers.").max_tokens(40);
    let answer = client.chat(ask()).await.unwrap();
    assert_eq!(answer.provider.as_str(), "demo-openai");
    assert_eq!(answer.model, "gpt-4o-mini");
    assert_eq!(answer.attempts, 1);
    assert!(!answer.text.trim().is_empty());
    let usage = answer.usage.expect("the emulator reports usage");
    assert!(
        usage.output_tokens >= 1 && usage.output_tokens <= 40,
        "{usage:?}"
    );
    // The emulator's answers are deterministic: the same prompt, the same text.
    assert_eq!(client.chat(ask()).await.unwrap().text, answer.text);

    let audio = text::silent_wav(2.0);
    let transcript = client
        .transcribe(TranscriptionRequest::new(
            AudioInput::from_bytes(audio.clone(), "memo.wav").unwrap(),
        ))
        .await
        .unwrap();
    assert_eq!(transcript.provider.as_str(), "demo-openai");
    assert_eq!(transcript.model, "whisper-1");
    assert_eq!(transcript.text, text::transcribe(&audio).text);

    assert_eq!(demo.counters("demo-openai").ok, 3);
    assert_eq!(demo.counters("demo-anthropic").requests, 0);
    assert_eq!(demo.counters("demo-deepgram").requests, 0);
    let paths: Vec<String> = demo.emulator().log().into_iter().map(|e| e.path).collect();
    assert_eq!(
        paths,
        [
            "/openai/v1/chat/completions",
            "/openai/v1/chat/completions",
            "/openai/v1/audio/transcriptions"
        ]
    );
}

#[tokio::test]
async fn a_scripted_429_fails_over_to_the_next_provider_at_once_and_the_next_step_passes() {
    let p = project();
    let config = Config::from_path(&p.providers).unwrap();
    let demo = Demo::start(&config, "demo").await.unwrap();
    // A 429 asking for 1 s, then a normal answer.
    demo.script(
        "demo-openai",
        [
            Fault::RateLimit {
                retry_after: RetryAfter::Seconds(1),
            },
            Fault::Pass,
        ],
    );
    let client = client(&demo, &p);

    let answer = client
        .chat(ChatRequest::from_prompt("hi").max_tokens(10))
        .await
        .unwrap();
    assert_eq!(answer.provider.as_str(), "demo-anthropic");
    assert_eq!(answer.attempts, 2);
    let openai = demo.counters("demo-openai");
    assert_eq!(
        (openai.requests, openai.rate_limited, openai.faults),
        (1, 1, 1)
    );
    assert_eq!(demo.counters("demo-anthropic").ok, 1);
    let stats = client.stats();
    let primary = stats.provider("demo-openai").unwrap();
    assert_eq!((primary.rate_limited, primary.failovers), (1, 1));
    let log = demo.emulator().log();
    assert_eq!(log[0].status, Some(429));
    assert_eq!(log[0].fault.as_deref(), Some("rate_limit"));

    // The `pass` step is still queued for the primary, which the client skips for the
    // second it was asked to wait: the next request is served by the secondary.
    assert_eq!(demo.emulator().pending_faults("openai"), 1);
    let again = client
        .chat(ChatRequest::from_prompt("hi again").max_tokens(10))
        .await
        .unwrap();
    assert_eq!(again.provider.as_str(), "demo-anthropic");
    assert_eq!(demo.counters("demo-openai").requests, 1);
}

#[tokio::test]
async fn when_every_provider_throttles_the_client_waits_the_stated_retry_after_then_passes() {
    let p = project();
    let config = Config::from_path(&p.providers).unwrap();
    let demo = Demo::start(&config, "demo").await.unwrap();
    let throttled = || {
        [
            Fault::RateLimit {
                retry_after: RetryAfter::Seconds(2),
            },
            Fault::Pass,
        ]
    };
    demo.script("demo-openai", throttled());
    demo.script("demo-anthropic", throttled());
    // The client waits through its clock: a manual one records the 2 s and returns at once.
    let clock = ManualClock::new();
    let client = demo
        .point(
            Client::builder()
                .config_path(&p.providers)
                .environment("demo")
                .env_lookup(|_| None)
                .clock(Arc::new(clock.clone())),
        )
        .build()
        .unwrap();

    let answer = client
        .chat(ChatRequest::from_prompt("hi").max_tokens(10))
        .await
        .unwrap();
    assert_eq!(answer.provider.as_str(), "demo-openai");
    assert_eq!(answer.attempts, 3);
    assert_eq!(clock.sleeps(), [Duration::from_secs(2)]);
    for name in ["demo-openai", "demo-anthropic"] {
        assert_eq!(demo.counters(name).rate_limited, 1, "{name}");
    }
    assert_eq!(demo.counters("demo-openai").ok, 1);
    assert_eq!(demo.emulator().pending_faults("anthropic"), 1);
}

#[tokio::test]
async fn a_503_from_the_whisper_provider_fails_over_to_deepgram() {
    let p = project();
    let config = Config::from_path(&p.providers).unwrap();
    let demo = Demo::start(&config, "demo").await.unwrap();
    demo.script("demo-openai", [Fault::Status { status: 503 }]);
    let client = client(&demo, &p);
    let audio = AudioInput::from_bytes(text::silent_wav(1.0), "memo.wav").unwrap();
    let transcript = client
        .transcribe(TranscriptionRequest::new(audio))
        .await
        .unwrap();
    assert_eq!(transcript.provider.as_str(), "demo-deepgram");
    assert_eq!(transcript.attempts, 2);
    assert_eq!(demo.counters("demo-openai").server_errors, 1);
    assert_eq!(demo.counters("demo-deepgram").ok, 1);
}

#[tokio::test]
async fn without_the_emulator_the_missing_key_is_a_config_error_naming_its_variable() {
    let p = project();
    let err = Client::builder()
        .config_path(&p.providers)
        .environment("demo")
        .env_lookup(|_| None)
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    assert!(err.to_string().contains("LLM_FAILOVER_DEMO_KEY"), "{err}");
}

#[tokio::test]
async fn every_kind_is_served_and_a_remote_base_url_under_the_providers_own_name() {
    // An application's production-like environment, served by the emulator in a test.
    let config = Config::from_toml_str(
        r#"
        default_environment = "staging"
        [environments.staging]
        chat = ["openai", "azure", "anthropic", "gemini"]
        transcription = ["openai-whisper", "deepgram"]
        [providers.openai]
        kind = "openai"
        base_url = "https://api.openai.com/v1"
        model = "gpt-4o-mini"
        api_key_env = { staging = "OPENAI_API_KEY" }
        [providers.openai-whisper]
        kind = "openai"
        base_url = "https://api.openai.com/v1"
        transcription_model = "whisper-1"
        api_key_env = { staging = "OPENAI_API_KEY" }
        [providers.azure]
        kind = "azure"
        base_url = "https://my-resource.openai.azure.com"
        model = "gpt-4o-mini"
        api_version = "2024-10-21"
        api_key_env = { staging = "AZURE_OPENAI_API_KEY" }
        [providers.anthropic]
        kind = "anthropic"
        base_url = "https://api.anthropic.com"
        model = "claude-3-5-haiku-latest"
        api_key_env = { staging = "ANTHROPIC_API_KEY" }
        [providers.gemini]
        kind = "gemini"
        base_url = "https://generativelanguage.googleapis.com/v1beta"
        model = "gemini-2.0-flash"
        api_key_env = { staging = "GEMINI_API_KEY" }
        [providers.deepgram]
        kind = "deepgram"
        base_url = "https://api.deepgram.com"
        model = "nova-2"
        api_key_env = { staging = "DEEPGRAM_API_KEY" }
        "#,
    )
    .unwrap();
    let demo = Demo::start(&config, "staging").await.unwrap();
    for name in ["openai", "azure", "anthropic", "gemini"] {
        assert_eq!(demo.prefix(name), name);
        let client = demo
            .point(
                Client::builder()
                    .config(config.clone())
                    .environment("staging")
                    .env_lookup(|_| None)
                    .chat_order([name]),
            )
            .build()
            .unwrap();
        let answer = client
            .chat(ChatRequest::from_prompt("hi").max_tokens(10))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(answer.provider.as_str(), name);
        assert_eq!(demo.counters(name).ok, 1, "{name}");
    }
    let client = demo.client_builder().env_lookup(|_| None).build().unwrap();
    demo.script("openai-whisper", [Fault::Overloaded]);
    let audio = AudioInput::from_bytes(text::silent_wav(1.0), "a.wav").unwrap();
    let transcript = client
        .transcribe(TranscriptionRequest::new(audio))
        .await
        .unwrap();
    assert_eq!(transcript.provider.as_str(), "deepgram");
    assert_eq!(demo.counters("openai-whisper").server_errors, 1);
}
