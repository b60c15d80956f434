//! `providers.toml`: the shipped file parses; every broken variant of a known-good file gets a
//! message naming its TOML path; keys never show up anywhere.

use std::cell::RefCell;
use std::time::Duration;

use llm_failover::config::{Config, ENVIRONMENT_VAR, KeySource, Policy, ProviderKind};
use llm_failover::ratelimit::HeaderDialect;
use llm_failover::{Capability, Error, ErrorKind};

use crate::catalogue::{GOOD, OPENAI_HEAD, SENTINEL, broken_variants, in_openai, mutate};

fn parse_err(toml: &str) -> Error {
    match Config::from_toml_str(toml) {
        Ok(_) => panic!("expected an error for:\n{toml}"),
        Err(e) => e,
    }
}

fn assert_never_shows_sentinel(err: &Error) {
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(SENTINEL), "sentinel leaked: {shown}");
    assert!(
        !shown.contains("SENTINEL"),
        "part of the sentinel leaked: {shown}"
    );
}

#[test]
fn the_known_good_config_parses() {
    let config = Config::from_toml_str(GOOD).unwrap();
    assert_eq!(config.default_environment, "dev");
    assert_eq!(config.policy.max_attempts, 3);
    let dev = config.environment("dev").unwrap();
    let chat: Vec<&str> = dev.chat.iter().map(|p| p.as_str()).collect();
    assert_eq!(chat, ["openai", "anthropic"]);
    assert_eq!(dev.providers(Capability::Transcription).len(), 2);
}

#[test]
fn every_broken_variant_names_its_toml_path() {
    let cases = broken_variants();
    assert!(cases.len() >= 20);
    let mut failures = Vec::new();
    for (name, toml, expected) in &cases {
        let err = parse_err(toml);
        assert_eq!(err.kind(), ErrorKind::Config, "{name}: {err}");
        assert!(err.is_config());
        let message = err.to_string();
        for part in expected {
            if !message.contains(part) {
                failures.push(format!("{name}: expected {part:?} in\n    {message}"));
            }
        }
        assert_never_shows_sentinel(&err);
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn loopback_hosts_may_use_plain_http() {
    for url in [
        "http://127.0.0.1:4010/openai/v1",
        "http://127.8.9.10/v1",
        "http://[::1]:8080/v1",
        "http://localhost:11434/v1",
        "http://LOCALHOST/v1",
    ] {
        let toml = mutate("\"https://api.openai.com/v1\"", &format!("\"{url}\""));
        let config = Config::from_toml_str(&toml).unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_eq!(config.provider("openai").unwrap().base_url.scheme(), "http");
    }
}

#[test]
fn allow_http_opts_in_to_a_non_loopback_http_host() {
    let toml = mutate(
        "\"https://api.openai.com/v1\"",
        "\"http://10.0.0.7:8000/v1\"",
    );
    let toml = toml.replacen(OPENAI_HEAD, &format!("{OPENAI_HEAD}allow_http = true\n"), 1);
    let config = Config::from_toml_str(&toml).unwrap();
    assert!(config.provider("openai").unwrap().allow_http);
}

#[test]
fn the_shipped_providers_toml_parses() {
    let config = Config::from_toml_str(include_str!("../../providers.toml")).unwrap();
    assert_eq!(config.default_environment, "demo");
    for env in ["demo", "dev", "prod"] {
        let env = config.environment(env).unwrap();
        assert!(
            !env.chat.is_empty() && !env.transcription.is_empty(),
            "{}",
            env.name
        );
    }
    let demo = config.environment("demo").unwrap();
    for id in demo.chat.iter().chain(&demo.transcription) {
        let p = config.provider(id.as_str()).unwrap();
        assert_eq!(p.base_url.host_str(), Some("127.0.0.1"), "{id}");
        assert_eq!(
            p.keys.get("demo"),
            Some(&KeySource::Env("LLM_FAILOVER_DEMO_KEY".into())),
            "{id}"
        );
    }
    let demo_openai = config.provider("demo-openai").unwrap();
    assert_eq!(
        demo_openai.base_url.as_str(),
        "http://127.0.0.1:4010/openai/v1"
    );
    assert_eq!(demo_openai.model.as_deref(), Some("gpt-4o-mini"));
    assert_eq!(
        demo_openai.transcription_model.as_deref(),
        Some("whisper-1")
    );
    assert_eq!(demo_openai.limits.rpm.map(|n| n.get()), Some(180));
    assert_eq!(demo_openai.limits.tpm.map(|n| n.get()), Some(40000));
    assert_eq!(
        config.provider("demo-anthropic").unwrap().kind,
        ProviderKind::Anthropic
    );
    assert_eq!(
        config
            .provider("demo-deepgram")
            .unwrap()
            .transcription_model
            .as_deref(),
        Some("nova-2")
    );
    for name in ["dev", "prod"] {
        let env = config.environment(name).unwrap();
        for id in env.chat.iter().chain(&env.transcription) {
            let p = config.provider(id.as_str()).unwrap();
            assert_eq!(p.base_url.scheme(), "https", "{id} in {name}");
            assert!(
                matches!(p.keys.get(name), Some(KeySource::Env(_))),
                "{id} in {name}"
            );
        }
    }
    assert_eq!(
        config.provider("groq").unwrap().header_dialect,
        HeaderDialect::Groq
    );
    assert_eq!(
        config.policy,
        Policy::default(),
        "the [policy] shown is the default one"
    );
}

#[test]
fn the_shipped_policy_states_nothing_and_shows_the_defaults_commented_out() {
    let shipped = include_str!("../../providers.toml");
    let config = Config::from_toml_str(shipped).unwrap();
    assert_eq!(config.policy, Policy::default());
    // Nothing stated: the batch's own hour per item is not overridden by the demo file.
    assert_eq!(config.stated_deadline(), None);
    // The values shown, uncommented, are the defaults: the comments cannot rot.
    let start = shipped.find("\n[policy]\n").unwrap() + 1;
    let end = start + shipped[start..].find("\n\n").unwrap();
    let uncommented: String = shipped[start..end]
        .lines()
        .map(|l| l.strip_prefix("# ").unwrap_or(l))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(uncommented.matches('=').count() >= 13, "{uncommented}");
    let shown = format!("{}{uncommented}{}", &shipped[..start], &shipped[end..]);
    let config = Config::from_toml_str(&shown).unwrap();
    assert_eq!(
        config.policy,
        Policy::default(),
        "the [policy] shown is the default one"
    );
    assert_eq!(config.stated_deadline(), Some(Duration::from_secs(120)));
}

#[test]
fn an_absent_policy_is_the_default_policy() {
    let start = GOOD.find("[policy]").unwrap();
    let end = GOOD.find("[environments.dev]").unwrap();
    let toml = format!("{}{}", &GOOD[..start], &GOOD[end..]);
    let config = Config::from_toml_str(&toml).unwrap();
    assert_eq!(config.policy, Policy::default());
    assert_eq!(config.policy.deadline, Duration::from_secs(120));
}

#[test]
fn policy_values_are_read_in_milliseconds() {
    let toml = mutate(
        "max_attempts = 3",
        "max_attempts = 2\ndeadline_ms = 30000\nconnect_timeout_ms = 250\nretry_budget = 0\n\
         failure_threshold = 0\nmax_response_bytes = 1024",
    );
    let policy = Config::from_toml_str(&toml).unwrap().policy;
    assert_eq!(policy.max_attempts, 2);
    assert_eq!(policy.deadline, Duration::from_secs(30));
    assert_eq!(policy.connect_timeout, Duration::from_millis(250));
    assert_eq!(policy.retry_budget, 0.0);
    assert_eq!(policy.failure_threshold, 0);
    assert_eq!(policy.max_response_bytes, 1024);
}

#[test]
fn provider_defaults_follow_kind_and_host() {
    let config = Config::from_toml_str(GOOD).unwrap();
    let anthropic = config.provider("anthropic").unwrap();
    assert_eq!(anthropic.api_version.as_deref(), Some("2023-06-01"));
    assert_eq!(anthropic.header_dialect, HeaderDialect::Anthropic);
    let openai = config.provider("openai").unwrap();
    assert_eq!(openai.header_dialect, HeaderDialect::OpenAi);
    assert_eq!(openai.timeout, None);
    let deepgram = config.provider("deepgram").unwrap();
    assert_eq!(deepgram.header_dialect, HeaderDialect::Generic);
    assert_eq!(
        deepgram.model, None,
        "deepgram's one model is its speech model"
    );
    assert_eq!(deepgram.transcription_model.as_deref(), Some("nova-2"));

    for (url, dialect) in [
        ("https://api.groq.com/openai/v1", HeaderDialect::Groq),
        ("https://openrouter.ai/api/v1", HeaderDialect::Generic),
        ("https://api.together.xyz/v1", HeaderDialect::OpenAi),
    ] {
        let toml = mutate("\"https://api.openai.com/v1\"", &format!("\"{url}\""));
        let config = Config::from_toml_str(&toml).unwrap();
        assert_eq!(
            config.provider("openai").unwrap().header_dialect,
            dialect,
            "{url}"
        );
    }
    let toml = in_openai("header_dialect = \"generic\"\ntimeout_ms = 1500");
    let openai = Config::from_toml_str(&toml).unwrap().providers["openai"].clone();
    assert_eq!(openai.header_dialect, HeaderDialect::Generic);
    assert_eq!(openai.timeout, Some(Duration::from_millis(1500)));
}

#[test]
fn model_limits_replace_the_provider_limits_for_that_model() {
    let toml = in_openai("model_limits = { \"gpt-4o\" = { rpm = 10000, tpm = 800000 } }");
    let config = Config::from_toml_str(&toml).unwrap();
    let openai = config.provider("openai").unwrap();
    assert_eq!(
        openai.limits_for("gpt-4o").rpm.map(|n| n.get()),
        Some(10000)
    );
    assert_eq!(
        openai.limits_for("gpt-4o-mini").rpm.map(|n| n.get()),
        Some(500)
    );
}

/// `prices`: per model, dollars per million tokens (and the Batch API's, and per audio
/// minute); a price that is not a finite amount ≥ 0, or a field no price has, is refused
/// with its TOML path.
#[test]
fn prices_are_read_per_model_and_a_bad_one_is_refused_by_its_path() {
    let toml = in_openai(
        "prices = { \"gpt-4o-mini\" = { input = 0.15, output = 0.6, batch_input = 0.075, \
         batch_output = 0.3, cached_input = 0.075, batch_cached_input = 0.0375 }, \"whisper-1\" = { audio_per_minute = 0.006 }, \"free\" = { input = 0, output = 0 } }",
    );
    let config = Config::from_toml_str(&toml).unwrap();
    let prices = &config.provider("openai").unwrap().prices;
    assert_eq!(
        prices["gpt-4o-mini"],
        llm_failover::price::Price::per_million_tokens(0.15, 0.6)
            .with_batch(0.075, 0.3)
            .with_cached_input(0.075)
            .with_batch_cached_input(0.0375)
    );
    assert_eq!(prices["whisper-1"].audio_per_minute, Some(0.006));
    assert_eq!(prices["free"].input, 0.0, "an integer is a price too");
    for (bad, says) in [
        ("{ input = -0.15 }", "providers.openai.prices.m"),
        ("{ input = nan }", "finite"),
        ("{ output = inf }", "finite"),
        ("{ cached_input = -1 }", "cached_input"),
        ("{ inptu = 0.15 }", "inptu"),
        ("{ input = \"0.15\" }", "prices"),
    ] {
        let toml = in_openai(&format!("prices = {{ \"m\" = {bad} }}"));
        let err = Config::from_toml_str(&toml).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "{bad}");
        assert!(err.to_string().contains(says), "{bad}: {err}");
        assert!(err.to_string().contains("openai"), "{bad}: {err}");
    }
}

/// `budget` on an environment and a provider, `tenant_budgets` on an environment: dollars a
/// calendar day and/or month, in a time zone; a wrong one is refused with its TOML path.
#[test]
fn budgets_are_read_and_a_bad_one_is_refused_by_its_path() {
    use llm_failover::budget::Budget;
    let toml = mutate(
        "[environments.prod]\nchat = [\"openai\"]",
        "[environments.prod]\nchat = [\"openai\"]\nbudget = { usd_per_day = 20, usd_per_month = 300.5, \
         time_zone = \"Europe/Paris\" }\ntenant_budgets = { acme = { usd_per_month = 1 } }",
    )
    .replace(OPENAI_HEAD, &format!("{OPENAI_HEAD}budget = {{ usd_per_day = 5 }}\n"));
    let config = Config::from_toml_str(&toml).unwrap();
    let prod = config.environment("prod").unwrap();
    assert_eq!(
        prod.budget,
        Some(
            Budget::usd_per_day(20.0)
                .and_usd_per_month(300.5)
                .in_time_zone("Europe/Paris")
        )
    );
    assert_eq!(
        prod.tenant_budgets,
        [("acme".to_owned(), Budget::usd_per_month(1.0))]
    );
    assert_eq!(config.environment("dev").unwrap().budget, None);
    assert_eq!(
        config.provider("openai").unwrap().budget,
        Some(Budget::usd_per_day(5.0))
    );
    for (bad, says) in [
        ("budget = { usd_per_day = -1 }", "environments.dev.budget"),
        ("budget = { usd_per_day = nan }", "finite"),
        (
            "budget = {}",
            "needs `usd_per_day`, `usd_per_month` or both",
        ),
        ("budget = { usd_per_week = 1 }", "usd_per_week"),
        (
            "budget = { usd_per_day = 1, time_zone = \"Atlantis/Capital\" }",
            "Atlantis/Capital",
        ),
        (
            "tenant_budgets = { acme = { usd_per_day = -2 } }",
            "environments.dev.tenant_budgets.acme",
        ),
        (
            "tenant_budgets = { \"\" = { usd_per_day = 2 } }",
            "tenant's name",
        ),
    ] {
        let toml = mutate(
            "[environments.dev]\n",
            &format!("[environments.dev]\n{bad}\n"),
        );
        let err = Config::from_toml_str(&toml).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "{bad}");
        assert!(err.to_string().contains(says), "{bad}: {err}");
    }
    let err =
        Config::from_toml_str(&in_openai("budget = { usd_per_month = \"lots\" }")).unwrap_err();
    assert!(err.to_string().contains("providers.openai.budget"), "{err}");
}

#[test]
fn auth_none_needs_no_key_in_any_environment() {
    let toml = mutate(
        "api_key_env = { dev = \"DEEPGRAM_API_KEY\" }",
        "auth = \"none\"",
    );
    let config = Config::from_toml_str(&toml).unwrap();
    assert_eq!(
        config.providers["deepgram"].keys.get("dev"),
        Some(&KeySource::None)
    );
    assert!(
        config
            .credential("deepgram", "dev", &|_| None)
            .unwrap()
            .is_none()
    );
}

#[test]
fn environment_selection_prefers_code_then_variable_then_default() {
    let config = Config::from_toml_str(GOOD).unwrap();
    let var = |value: Option<&'static str>| {
        move |name: &str| {
            assert_eq!(name, ENVIRONMENT_VAR);
            value.map(str::to_owned)
        }
    };
    let pick = |explicit, value| {
        config
            .select_environment_with(explicit, &var(value))
            .map(|e| e.name.clone())
    };
    assert_eq!(pick(Some("prod"), Some("dev")).unwrap(), "prod");
    assert_eq!(pick(None, Some("prod")).unwrap(), "prod");
    assert_eq!(pick(None, Some(" prod ")).unwrap(), "prod");
    assert_eq!(pick(None, None).unwrap(), "dev");
    assert_eq!(
        pick(None, Some("")).unwrap(),
        "dev",
        "an empty variable counts as unset"
    );

    let err = pick(None, Some("staging")).unwrap_err();
    assert!(err.is_config());
    assert!(
        err.to_string()
            .contains("`staging` (from the LLM_FAILOVER_ENV variable)"),
        "{err}"
    );
    let err = pick(Some("qa"), None).unwrap_err();
    assert!(err.to_string().contains("`qa` (named in code)"), "{err}");
    assert!(err.to_string().contains("defined: dev, prod"), "{err}");
}

#[test]
fn credentials_come_from_the_named_variable_and_never_show() {
    let config = Config::from_toml_str(GOOD).unwrap();
    let asked = RefCell::new(Vec::new());
    let lookup = |var: &str| {
        asked.borrow_mut().push(var.to_owned());
        Some(SENTINEL.to_owned())
    };
    let key = config
        .credential("openai", "prod", &lookup)
        .unwrap()
        .unwrap();
    assert_eq!(key.expose(), SENTINEL);
    assert_eq!(*asked.borrow(), ["OPENAI_API_KEY"]);
    let dev_key = config
        .credential("openai", "dev", &lookup)
        .unwrap()
        .unwrap();
    assert_eq!(asked.borrow().last().unwrap(), "OPENAI_API_KEY_DEV");

    let shown = format!(
        "{key:?} {dev_key:?} {} {config:?} {:?} {:#?}",
        key.source(),
        config.provider("openai").unwrap(),
        config
    );
    assert!(!shown.contains("SENTINEL"), "{shown}");
    assert!(
        shown.contains("OPENAI_API_KEY"),
        "Debug shows variable names: {shown}"
    );
}

#[test]
fn a_missing_variable_is_named_with_its_toml_path() {
    let config = Config::from_toml_str(GOOD).unwrap();
    let err = config.credential("openai", "prod", &|_| None).unwrap_err();
    assert!(err.is_config());
    assert!(
        err.to_string().contains(
            "environment variable `OPENAI_API_KEY` (providers.openai.api_key_env.prod) is not set"
        ),
        "{err}"
    );
    assert_eq!(err.provider().map(|p| p.as_str()), Some("openai"));
}

#[test]
fn unusable_key_values_are_refused_without_showing_them() {
    let config = Config::from_toml_str(GOOD).unwrap();
    for (value, expected) in [
        (String::new(), "is set but empty"),
        ("   ".to_owned(), "is set but empty"),
        (format!("{SENTINEL}\n"), "whitespace"),
        (format!("\"{SENTINEL} \""), "whitespace"),
        (format!("{SENTINEL}\u{fffd}"), "non-ASCII"),
    ] {
        let err = config
            .credential("anthropic", "dev", &|_| Some(value.clone()))
            .unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("`ANTHROPIC_API_KEY` (providers.anthropic.api_key_env.dev)"),
            "{message}"
        );
        assert!(message.contains(expected), "{message}");
        assert_never_shows_sentinel(&err);
    }
}

#[test]
fn credentials_for_unknown_names_or_unkeyed_environments_are_errors() {
    let config = Config::from_toml_str(GOOD).unwrap();
    let key = |_: &str| Some(SENTINEL.to_owned());
    for (provider, env, expected) in [
        ("nope", "dev", "provider `nope` is not defined"),
        ("openai", "staging", "environment `staging` is not defined"),
        (
            "anthropic",
            "prod",
            "providers.anthropic.api_key_env has no entry for environment `prod`",
        ),
    ] {
        let err = config.credential(provider, env, &key).unwrap_err();
        assert!(err.is_config());
        assert!(err.to_string().contains(expected), "{err}");
        assert_never_shows_sentinel(&err);
    }
}

#[test]
fn from_path_reads_a_file_and_names_it_in_errors() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/config");
    let config = Config::from_path(format!("{dir}/good.toml")).unwrap();
    assert_eq!(config.default_environment, "local");

    let err = Config::from_path(format!("{dir}/unknown_field.toml")).unwrap_err();
    let message = err.to_string();
    assert!(message.contains("unknown_field.toml: "), "{message}");
    assert!(
        message.contains("providers.local.modle (line 9, column 1): unknown field"),
        "{message}"
    );

    let err = Config::from_path(format!("{dir}/does_not_exist.toml")).unwrap_err();
    assert!(err.is_config());
    assert!(err.to_string().contains("does_not_exist.toml"), "{err}");
}

#[test]
fn config_parses_through_from_str() {
    let config: Config = GOOD.parse().unwrap();
    assert_eq!(config, Config::from_toml_str(GOOD).unwrap());
}

mod mangled {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Cutting a piece out of a good file and splicing in a few bytes gives a config or a
        /// `Config` error, never a panic.
        #[test]
        fn mangled_files_never_panic(
            at in 0..GOOD.len(),
            cut in 0usize..24,
            splice in proptest::collection::vec(
                prop_oneof![Just(b'"'), Just(b'='), Just(b'['), Just(b']'), Just(b'\n'),
                            Just(b'-'), Just(b'0'), Just(b'x'), Just(b'{'), Just(b'.')],
                0..4,
            ),
        ) {
            let end = (at + cut).min(GOOD.len());
            let mut text = GOOD[..at].to_owned();
            text.push_str(std::str::from_utf8(&splice).unwrap());
            text.push_str(&GOOD[end..]);
            if let Err(err) = Config::from_toml_str(&text) {
                prop_assert_eq!(err.kind(), ErrorKind::Config);
                prop_assert!(!err.message().is_empty());
            }
        }

        /// Arbitrary text is refused with a `Config` error, never a panic.
        #[test]
        fn arbitrary_text_never_panics(text in proptest::collection::vec(any::<char>(), 0..200)) {
            let text: String = text.into_iter().collect();
            if let Err(err) = Config::from_toml_str(&text) {
                prop_assert_eq!(err.kind(), ErrorKind::Config);
            }
        }
    }
}

/// A fresh file under the temp dir holding `bytes`.
fn temp_config(name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!(
        "llm-failover-config-{name}-{}.toml",
        std::process::id()
    ));
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn from_path_refuses_a_file_larger_than_the_cap_naming_path_and_cap() {
    // Valid TOML (comments), just too much of it.
    let mut text = GOOD.to_owned();
    while text.len() <= 1 << 20 {
        text.push_str("# padding padding padding padding padding padding padding padding\n");
    }
    let path = temp_config("large", text.as_bytes());
    let err = Config::from_path(&path).unwrap_err();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(err.kind(), ErrorKind::Config);
    assert_eq!(
        err.message(),
        format!(
            "{}: larger than 1 MiB, the most a providers file may be (is it the right file?)",
            path.display()
        )
    );
}

#[cfg(unix)]
#[test]
fn from_path_on_an_endless_pipe_stops_at_the_cap() {
    // A pipe that never ends, as `--config <(yes)` would give; bounded by the cap, not memory.
    let mut child = std::process::Command::new("yes")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("yes runs");
    let stdout = child.stdout.take().unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&stdout);
    let err = Config::from_path(format!("/proc/self/fd/{fd}")).unwrap_err();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        err.message().contains("larger than 1 MiB"),
        "{}",
        err.message()
    );
}

#[test]
fn from_path_reports_a_byte_that_is_not_utf8_with_its_line_and_column() {
    let mut bytes = GOOD.as_bytes().to_vec();
    let line = GOOD.lines().count() + 1;
    bytes.extend_from_slice(b"# a Latin-1 caf\xe9\n");
    let path = temp_config("latin1", &bytes);
    let err = Config::from_path(&path).unwrap_err();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(err.kind(), ErrorKind::Config);
    assert_eq!(
        err.message(),
        format!(
            "{}: not UTF-8 text: byte 0xE9 at line {line}, column 16",
            path.display()
        )
    );
}
