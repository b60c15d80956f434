//! The `llm-failover` command (crate `cli/`) as a user who installed it meets it: run with no
//! argument in an empty directory — no providers.toml, no prompts, no key — it runs the demo
//! batch on the built-in emulator; `batch` is the default command; `--help` names no path of
//! the machine that built it.
#![cfg(unix)]

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::support::examples::{batch_bin, output_within, TempDir};

fn command(dir: &TempDir) -> Command {
    let mut command = Command::new(batch_bin());
    command
        .current_dir(dir.root())
        .env_remove("RUST_LOG")
        .env_remove("LLM_FAILOVER_ENV")
        .env_remove("LLM_FAILOVER_REDIS_URL")
        .env_remove("LLM_FAILOVER_DEMO_KEY")
        .env("NO_COLOR", "1");
    command
}

#[test]
fn with_no_argument_in_an_empty_directory_it_runs_the_demo_batch_without_a_key() {
    let dir = TempDir::new("cli", "bare");
    let out = output_within(command(&dir), Duration::from_secs(120), "llm-failover");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("bundled"),
        "it says whose providers file: {stderr}"
    );
    assert!(stderr.contains("emulator on http://127.0.0.1:"), "{stderr}");
    let bundled = include_str!("../../examples/prompts.jsonl");
    let prompts = std::fs::read_to_string(dir.path("demo-prompts.jsonl")).unwrap();
    assert_eq!(prompts, bundled, "the demo's prompts, written where it ran");
    let results = std::fs::read_to_string(dir.path("results.jsonl")).unwrap();
    let lines: Vec<Value> = results
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let input_lines = bundled.lines().filter(|l| !l.trim().is_empty()).count();
    assert_eq!(lines.len(), input_lines, "one line per input line");
    let ok = lines.iter().filter(|l| l["ok"] == true).count();
    assert_eq!(
        ok,
        input_lines - 2,
        "every prompt answered but the 2 bad lines"
    );
    // `batch` is the default command: the same, said explicitly, sends nothing new.
    let mut again = command(&dir);
    again.args(["batch", "--output", "results.jsonl"]);
    let out = output_within(again, Duration::from_secs(120), "llm-failover batch");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains(&format!("ok {ok}")), "{stderr}");
}

#[test]
fn its_help_lists_the_batch_options_and_no_path_of_the_build_machine() {
    let dir = TempDir::new("cli", "help");
    for args in [&["--help"][..], &["batch", "--help"][..]] {
        let mut help = command(&dir);
        help.args(args);
        let out = output_within(help, Duration::from_secs(30), "llm-failover --help");
        assert_eq!(out.status.code(), Some(0));
        let text = String::from_utf8_lossy(&out.stdout);
        for option in [
            "--input",
            "--queue",
            "--patience-s",
            "--max-wait-s",
            "--no-queue",
        ] {
            assert!(text.contains(option), "{args:?}: {option} in\n{text}");
        }
        assert!(
            !text.contains(env!("CARGO_MANIFEST_DIR")),
            "{args:?} names this machine's checkout:\n{text}"
        );
    }
}
