//! The `tools` example binary as its users run it: against its in-process emulator, every chat
//! wire format (OpenAI, Azure, Anthropic, Gemini) makes a `get_weather` call, takes the tool's
//! result back to a text answer, and gives a structured answer that parses into the example's
//! type — each answered by that format's provider; the run exits 0. A run that does not end
//! within two minutes is killed and fails the test.

use std::process::Command;
use std::time::Duration;

use crate::support::examples::{build_example, output_within};

#[test]
fn the_tools_example_round_trips_a_tool_and_parses_a_structured_answer_in_every_format() {
    let bin = build_example("tools");
    let out = output_within(
        Command::new(&bin),
        Duration::from_secs(120),
        "the tools example",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report = format!("--- stdout\n{stdout}--- stderr\n{stderr}");
    assert!(out.status.success(), "{}\n{report}", out.status);
    assert!(!stdout.contains("FAILED"), "{report}");
    for format in ["openai", "azure", "anthropic", "gemini"] {
        let line = |what: &str| {
            stdout
                .lines()
                .find(|l| l.starts_with(&format!("{format}: {what}: ")))
                .unwrap_or_else(|| panic!("no {format} {what} line\n{report}"))
        };
        let round_trip = line("tool round trip");
        assert!(
            round_trip.contains(&format!(
                "{format} called get_weather({{\"city\":\"Paris\"}})"
            )),
            "{round_trip}"
        );
        // The emulator quotes the tool's result: it reached the provider and came back.
        assert!(
            round_trip.contains(&format!("answered via {format}: "))
                && round_trip.contains("\"temperature_c\":18"),
            "{round_trip}"
        );
        let structured = line("structured answer");
        assert!(
            structured.contains(&format!("{format} → Report {{ city: \"Paris\""),),
            "{structured}"
        );
    }
}
