//! README.md is checked against the code: every TOML example parses, every fault kind,
//! `retry_after` form and header style has its row (the TOML spelling parsing to the Rust
//! value shown next to it), and every config, counter and log field is named. The matches
//! below have no wildcard arm, so a new variant does not compile until it is documented.
//! (The README's Rust examples run as doctests, see `lib.rs`; its admin `curl` bodies are
//! sent to an emulator in `tests/http/admin.rs`.)

use crate::config::{EmulatorConfig, HeaderStyle, ProviderConfig};
use crate::faults::{Fault, RetryAfter};
use crate::state::{Counters, LogEntry};

const README: &str = include_str!("../README.md");

/// The README's fenced blocks of `lang`.
fn blocks(lang: &str) -> Vec<String> {
    let fence = format!("```{lang}");
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in README.lines() {
        match &mut current {
            None if line.trim_end() == fence => current = Some(String::new()),
            None => {}
            Some(_) if line.trim_end() == "```" => out.extend(current.take()),
            Some(text) => {
                text.push_str(line);
                text.push('\n');
            }
        }
    }
    out
}

fn squeeze(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

/// True when a table row of the README starts with these two cells (whitespace ignored).
fn has_row(first: &str, second: &str) -> bool {
    let want = squeeze(&format!("| `{first}` | `{second}` |"));
    README.lines().any(|l| squeeze(l).starts_with(&want))
}

/// Every emulator configuration shown (the Cargo snippet aside).
fn toml_configs() -> Vec<EmulatorConfig> {
    blocks("toml")
        .iter()
        .filter(|b| !b.contains("[dev-dependencies]"))
        .map(|b| EmulatorConfig::from_toml_str(b).unwrap_or_else(|e| panic!("{e}\n{b}")))
        .collect()
}

fn fault_index(f: &Fault) -> usize {
    match f {
        Fault::Pass => 0,
        Fault::RateLimit { .. } => 1,
        Fault::InsufficientQuota => 2,
        Fault::DailyQuota => 3,
        Fault::Status { .. } => 4,
        Fault::Overloaded => 5,
        Fault::Hang { .. } => 6,
        Fault::Reset => 7,
        Fault::Truncated => 8,
        Fault::MalformedJson => 9,
        Fault::Html { .. } => 10,
        Fault::Latency { .. } => 11,
        Fault::StreamError => 12,
        Fault::MalformedHeaders => 13,
    }
}
const FAULTS: usize = 14;

fn retry_index(r: RetryAfter) -> usize {
    match r {
        RetryAfter::Bucket => 0,
        RetryAfter::Absent => 1,
        RetryAfter::Seconds(_) => 2,
        RetryAfter::HttpDate(_) => 3,
        RetryAfter::Invalid => 4,
        RetryAfter::Past => 5,
        RetryAfter::Huge => 6,
    }
}
const RETRY_FORMS: usize = 7;

fn style_name(s: HeaderStyle) -> (&'static str, &'static str) {
    match s {
        HeaderStyle::OpenAi => ("openai", "OpenAi"),
        HeaderStyle::Groq => ("groq", "Groq"),
        HeaderStyle::OpenRouter => ("openrouter", "OpenRouter"),
        HeaderStyle::Azure => ("azure", "Azure"),
        HeaderStyle::Anthropic => ("anthropic", "Anthropic"),
        HeaderStyle::LiteLlm => ("litellm", "LiteLlm"),
        HeaderStyle::None => ("none", "None"),
    }
}

/// (TOML, the Rust value, how the README writes the Rust value).
macro_rules! rows {
    ($($toml:literal => $rust:expr),* $(,)?) => {
        vec![$(($toml, $rust, stringify!($rust))),*]
    };
}

#[test]
fn every_toml_example_parses_as_an_emulator_config() {
    assert!(toml_configs().len() >= 4);
}

#[test]
fn every_fault_kind_has_a_row_whose_toml_is_its_rust_value() {
    let rows: Vec<(&str, Fault, &str)> = rows![
        r#"{ kind = "pass" }"# => Fault::Pass,
        r#"{ kind = "rate_limit", retry_after = "bucket" }"# =>
            Fault::RateLimit { retry_after: RetryAfter::Bucket },
        r#"{ kind = "insufficient_quota" }"# => Fault::InsufficientQuota,
        r#"{ kind = "daily_quota" }"# => Fault::DailyQuota,
        r#"{ kind = "status", status = 503 }"# => Fault::Status { status: 503 },
        r#"{ kind = "overloaded" }"# => Fault::Overloaded,
        r#"{ kind = "hang", ms = 2000 }"# => Fault::Hang { ms: Some(2000) },
        r#"{ kind = "reset" }"# => Fault::Reset,
        r#"{ kind = "html", status = 502 }"# => Fault::Html { status: 502 },
        r#"{ kind = "latency", ms = 200, jitter_ms = 50 }"# =>
            Fault::Latency { ms: 200, jitter_ms: 50 },
        r#"{ kind = "truncated" }"# => Fault::Truncated,
        r#"{ kind = "malformed_json" }"# => Fault::MalformedJson,
        r#"{ kind = "stream_error" }"# => Fault::StreamError,
        r#"{ kind = "malformed_headers" }"# => Fault::MalformedHeaders,
    ];
    let mut seen = [false; FAULTS];
    for (toml_text, value, rust_text) in rows {
        let parsed: Fault = toml::from_str::<toml::Table>(&format!("f = {toml_text}"))
            .and_then(|t| t["f"].clone().try_into())
            .unwrap_or_else(|e| panic!("{toml_text}: {e}"));
        assert_eq!(parsed, value, "{toml_text}");
        assert!(
            has_row(toml_text, rust_text),
            "no row `{toml_text}` | `{rust_text}`"
        );
        assert!(toml_text.contains(&format!("\"{}\"", value.name())));
        seen[fault_index(&value)] = true;
    }
    assert!(seen.iter().all(|s| *s), "a fault kind has no row: {seen:?}");
}

#[test]
fn every_retry_after_form_has_a_row_whose_toml_is_its_rust_value() {
    let rows: Vec<(&str, RetryAfter, &str)> = rows![
        r#""bucket""# => RetryAfter::Bucket,
        r#""absent""# => RetryAfter::Absent,
        "{ seconds = 1 }" => RetryAfter::Seconds(1),
        "{ http_date = 30 }" => RetryAfter::HttpDate(30),
        r#""invalid""# => RetryAfter::Invalid,
        r#""past""# => RetryAfter::Past,
        r#""huge""# => RetryAfter::Huge,
    ];
    let mut seen = [false; RETRY_FORMS];
    for (toml_text, value, rust_text) in rows {
        let parsed: RetryAfter = toml::from_str::<toml::Table>(&format!("r = {toml_text}"))
            .and_then(|t| t["r"].clone().try_into())
            .unwrap_or_else(|e| panic!("{toml_text}: {e}"));
        assert_eq!(parsed, value, "{toml_text}");
        let first = README
            .lines()
            .any(|l| squeeze(l).starts_with(&squeeze(&format!("| `{toml_text}`"))));
        assert!(
            first && README.contains(&format!("`{rust_text}`")),
            "{toml_text}"
        );
        seen[retry_index(value)] = true;
    }
    assert!(seen.iter().all(|s| *s));
}

#[test]
fn the_toml_examples_use_every_fault_kind_and_retry_after_form() {
    let mut kinds = [false; FAULTS];
    let mut forms = [false; RETRY_FORMS];
    for cfg in toml_configs() {
        for p in cfg.providers.values() {
            let faults = p
                .faults
                .script
                .iter()
                .chain(p.faults.mix.iter().map(|w| &w.fault));
            for f in faults {
                kinds[fault_index(f)] = true;
                if let Fault::RateLimit { retry_after } = f {
                    forms[retry_index(*retry_after)] = true;
                }
            }
        }
    }
    assert!(kinds.iter().all(|k| *k), "{kinds:?}");
    assert!(forms.iter().all(|f| *f), "{forms:?}");
}

#[test]
fn every_header_style_has_a_row() {
    for style in [
        HeaderStyle::OpenAi,
        HeaderStyle::Groq,
        HeaderStyle::OpenRouter,
        HeaderStyle::Azure,
        HeaderStyle::Anthropic,
        HeaderStyle::LiteLlm,
        HeaderStyle::None,
    ] {
        let (toml_name, rust) = style_name(style);
        let parsed: HeaderStyle = toml::Value::String(toml_name.to_owned())
            .try_into()
            .unwrap();
        assert_eq!(parsed, style);
        let row = squeeze(&format!("| `\"{toml_name}\"`"));
        let rust = format!("`HeaderStyle::{rust}`");
        assert!(
            README
                .lines()
                .any(|l| squeeze(l).starts_with(&row) && l.contains(&rust)),
            "{toml_name}"
        );
    }
}

/// The field names of `value` serialised (a JSON object).
fn fields(value: impl serde::Serialize) -> Vec<String> {
    match serde_json::to_value(value).unwrap() {
        serde_json::Value::Object(m) => m.keys().cloned().collect(),
        other => panic!("not an object: {other}"),
    }
}

#[test]
fn every_config_field_has_a_row() {
    for f in fields(EmulatorConfig::default()) {
        assert!(has_field_row(&f), "top-level field `{f}`");
    }
    let provider = ProviderConfig::openai("x");
    for f in fields(&provider) {
        assert!(has_field_row(&f), "provider field `{f}`");
    }
    for f in fields(provider.limits) {
        assert!(README.contains(&format!("`{f}`")), "limits field `{f}`");
    }
}

fn has_field_row(name: &str) -> bool {
    let want = squeeze(&format!("| `{name}` |"));
    README.lines().any(|l| squeeze(l).starts_with(&want))
}

#[test]
fn every_counter_and_log_field_is_named() {
    for f in fields(Counters::default()) {
        assert!(has_field_row(&f), "counter `{f}`");
    }
    let entry = LogEntry {
        at_ms: 0,
        unix_ms: 0,
        provider: String::new(),
        method: String::new(),
        path: String::new(),
        model: None,
        status: None,
        fault: None,
        stream: false,
        tokens: 0,
        request_id: None,
        usage: None,
        cached_input: 0,
        returned: [0, 0],
        stated: Vec::new(),
    };
    for f in fields(entry) {
        assert!(
            README.contains(&format!("| `{f}`")) || README.contains(&format!(", `{f}` |")),
            "log field `{f}`"
        );
    }
}
