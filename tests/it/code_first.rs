//! Setup in code: a [`Config`] written with its builder means what the same `providers.toml`
//! means and is refused for what the file would be; keys handed over in code; and
//! `examples/code_first.rs` (no TOML, no environment variable) runs.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use llm_failover::config::{Config, KeySource, Policy, ProviderConfig, ProviderKind};
use llm_failover::http::{Script, ScriptedTransport};
use llm_failover::{ChatRequest, Client, Credential, ErrorKind, Limits};

const FILE: &str = r#"
    default_environment = "prod"

    [environments.prod]
    chat = ["openai", "local"]
    transcription = ["openai"]

    [environments.dev]
    chat = ["local"]

    [policy]
    deadline_ms = 20000
    max_attempts = 4

    [providers.openai]
    kind = "openai"
    base_url = "https://api.openai.com/v1"
    model = "gpt-4o-mini"
    transcription_model = "whisper-1"
    api_key_env = { prod = "OPENAI_API_KEY" }
    limits = { rpm = 500, tpm = 200000 }
    model_limits = { "gpt-4o" = { rpm = 100 } }
    timeout_ms = 15000
    extra_body = { seed = 7 }

    [providers.local]
    kind = "openai"
    base_url = "http://127.0.0.1:11434/v1"
    model = "llama3.2"
    auth = "none"
"#;

fn built() -> llm_failover::config::ConfigBuilder {
    let mut policy = Policy::default();
    policy.deadline = Duration::from_secs(20);
    policy.max_attempts = 4;
    Config::builder("prod")
        .provider(
            "openai",
            ProviderConfig::builder(ProviderKind::OpenAi, "https://api.openai.com/v1")
                .model("gpt-4o-mini")
                .transcription_model("whisper-1")
                .key_env("prod", "OPENAI_API_KEY")
                .limits(Limits::none().with_rpm(500).with_tpm(200_000))
                .model_limits("gpt-4o", Limits::none().with_rpm(100))
                .timeout(Duration::from_secs(15))
                .extra_body("seed", 7),
        )
        .provider(
            "local",
            ProviderConfig::builder(ProviderKind::OpenAi, "http://127.0.0.1:11434/v1")
                .model("llama3.2")
                .no_key(),
        )
        .chat("prod", ["openai", "local"])
        .transcription("prod", ["openai"])
        .chat("dev", ["local"])
        .policy(policy)
}

#[test]
fn a_config_built_in_code_is_the_same_as_the_file() {
    let from_file: Config = FILE.parse().unwrap();
    assert_eq!(built().build().unwrap(), from_file);
}

#[test]
fn a_config_built_in_code_is_refused_for_what_a_file_would_be() {
    let local = || {
        ProviderConfig::builder(ProviderKind::OpenAi, "http://127.0.0.1:11434/v1")
            .model("llama3.2")
            .no_key()
    };
    let cases: Vec<(&str, llm_failover::config::ConfigBuilder, &str)> = vec![
        (
            "an environment naming an unknown provider",
            Config::builder("prod").chat("prod", ["nope"]),
            "environments.prod.chat",
        ),
        (
            "a default environment that is not defined",
            Config::builder("prod")
                .provider("local", local())
                .chat("dev", ["local"]),
            "default_environment",
        ),
        (
            "plain http to a host that is not loopback",
            Config::builder("prod")
                .provider(
                    "remote",
                    ProviderConfig::builder(ProviderKind::OpenAi, "http://example.com/v1")
                        .model("m")
                        .no_key(),
                )
                .chat("prod", ["remote"]),
            "providers.remote.base_url",
        ),
        (
            "a key where a variable name belongs",
            Config::builder("prod")
                .provider(
                    "openai",
                    ProviderConfig::builder(ProviderKind::OpenAi, "https://api.openai.com/v1")
                        .model("m")
                        .key_env("prod", "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"),
                )
                .chat("prod", ["openai"]),
            "providers.openai.api_key_env.prod",
        ),
        (
            "a chat provider without a model",
            Config::builder("prod")
                .provider(
                    "local",
                    ProviderConfig::builder(ProviderKind::OpenAi, "http://127.0.0.1:1/v1").no_key(),
                )
                .chat("prod", ["local"]),
            "providers.local.model",
        ),
        (
            "a policy of zero attempts",
            Config::builder("prod")
                .provider("local", local())
                .chat("prod", ["local"])
                .policy({
                    let mut p = Policy::default();
                    p.max_attempts = 0;
                    p
                }),
            "policy.max_attempts",
        ),
        (
            "an extra body field the SDK sets",
            Config::builder("prod")
                .provider("local", local().extra_body("stream", true))
                .chat("prod", ["local"]),
            "providers.local.extra_body.stream",
        ),
    ];
    for (what, builder, path) in cases {
        let e = builder.build().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config, "{what}");
        assert!(e.message().starts_with(path), "{what}: {e}");
        assert!(!e.to_string().contains("sk-proj"), "{what}: {e}");
    }
}

#[tokio::test]
async fn a_key_handed_over_in_code_is_sent_and_its_absence_is_an_error() {
    let config = Config::builder("prod")
        .provider(
            "a",
            ProviderConfig::builder(ProviderKind::OpenAi, "http://127.0.0.1:9/v1")
                .model("m")
                .key_in_code(),
        )
        .chat("prod", ["a"])
        .build()
        .unwrap();
    assert_eq!(
        config.provider("a").unwrap().keys["prod"],
        KeySource::InCode
    );

    let e = Client::builder()
        .config(config.clone())
        .build()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Config);
    assert!(
        e.to_string().contains("ClientBuilder::credential(\"a\""),
        "{e}"
    );

    let t = ScriptedTransport::new();
    t.push(
        "127.0.0.1",
        Script::json(400, r#"{"error": {"message": "no"}}"#),
    );
    let client = Client::builder()
        .config(config)
        .credential("a", Credential::new("sk-handed-over"))
        .transport(Arc::new(t.clone()))
        .build()
        .unwrap();
    let _ = client.chat(ChatRequest::from_prompt("hi")).await;
    let sent = t.requests("127.0.0.1");
    assert_eq!(
        sent[0].headers["authorization"].to_str().unwrap(),
        "Bearer sk-handed-over"
    );
}

/// `target/debug/examples/NAME`, built by `cargo test` along with this test binary.
fn example(name: &str) -> std::path::PathBuf {
    let mut dir = std::env::current_exe().unwrap();
    dir.pop(); // the test binary
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir.join("examples").join(name)
}

#[test]
fn the_code_first_example_builds_its_client_without_toml_or_variables() {
    let exe = example("code_first");
    if !exe.exists() {
        // `cargo test` builds the examples; `cargo test --test it` does not.
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let built = Command::new(cargo)
            .args(["build", "--example", "code_first"])
            .status()
            .unwrap();
        assert!(built.success() && exe.exists(), "{}", exe.display());
    }
    let dir = std::env::temp_dir().join(format!("code-first-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // An empty directory (no providers.toml to find) and an empty environment.
    let out = Command::new(&exe)
        .current_dir(&dir)
        .env_clear()
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("chat order: openai → anthropic"),
        "{stderr}"
    );
    assert!(
        stderr.contains("answered by anthropic (claude-3-5-haiku-latest) after 2 attempt(s)"),
        "{stderr}"
    );
    assert!(!stdout.trim().is_empty());
}

#[test]
fn a_missing_key_says_how_to_give_one_and_on_this_machine_how_to_run_without() {
    let file = |url: &str| {
        format!(
            r#"
            default_environment = "demo"
            [environments.demo]
            chat = ["p"]
            [providers.p]
            kind = "openai"
            base_url = "{url}"
            model = "m"
            api_key_env = {{ demo = "DEMO_KEY" }}
            "#
        )
    };
    let local: Config = file("http://127.0.0.1:4010/openai/v1").parse().unwrap();
    let e = local.credential("p", "demo", &|_| None).unwrap_err();
    let text = e.to_string();
    assert!(text.contains("`DEMO_KEY`"), "{text}");
    assert!(text.contains("ClientBuilder::credential(\"p\""), "{text}");
    assert!(text.contains("(127.0.0.1:4010)"), "{text}");
    assert!(text.contains("Demo::start(&config, \"demo\")"), "{text}");

    let remote: Config = file("https://api.openai.com/v1").parse().unwrap();
    let text = remote
        .credential("p", "demo", &|_| None)
        .unwrap_err()
        .to_string();
    assert!(text.contains("ClientBuilder::credential"), "{text}");
    assert!(!text.contains("emulator"), "{text}");
}
