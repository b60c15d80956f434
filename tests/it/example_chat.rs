//! The `chat` example binary as a script runs it: a request that fails makes the run fail —
//! it prints the error and exits non-zero, so `cargo run --example chat && …` stops there.

use std::net::TcpListener;
use std::process::Command;
use std::time::Duration;

use crate::support::examples::{TempDir, build_example, output_within};

#[test]
fn the_chat_example_exits_non_zero_and_prints_the_error_when_its_request_fails() {
    // A provider that takes the connection and never answers: every attempt times out.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let dir = TempDir::new("example-chat", "fails");
    let config = dir.path("providers.toml");
    std::fs::write(
        &config,
        format!(
            r#"
            default_environment = "local"
            [environments.local]
            chat = ["silent"]
            [policy]
            max_attempts = 1
            deadline_ms = 5000
            request_timeout_ms = 300
            [providers.silent]
            kind = "openai"
            base_url = "http://127.0.0.1:{port}/v1"
            model = "m"
            auth = "none"
            "#
        ),
    )
    .unwrap();

    let bin = build_example("chat");
    let mut command = Command::new(&bin);
    command
        .current_dir(dir.root())
        .args(["--config", config.to_str().unwrap(), "--env", "local"])
        .env_remove("LLM_FAILOVER_ENV")
        .env_remove("LLM_FAILOVER_REDIS_URL");
    let out = output_within(command, Duration::from_secs(60), "the chat example");
    drop(silent);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report = format!("--- stdout\n{stdout}--- stderr\n{stderr}");
    assert!(!out.status.success(), "{}\n{report}", out.status);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(stdout.trim().is_empty(), "no answer was printed\n{report}");
    assert!(stderr.contains("\nerror: "), "{report}");
    assert!(
        stderr.contains("silent"),
        "the error names the provider\n{report}"
    );
}
