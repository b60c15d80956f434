//! A Redis that refuses this client's credentials is a configuration error, found before any
//! work: no item is claimed, sent or settled, the command exits non-zero, and the rerun with
//! the right password sends every item (issue 28's attack: 1,000 of 1,000 items were
//! dead-lettered as `config` with exit 0, and the rerun sent nothing without
//! `--retry-failed`). The password is never printed.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use llm_failover::cache::Cache;
use llm_failover::provider::openai::OpenAi;
use llm_failover::ratelimit::SharedSettings;
use llm_failover::{Client, ErrorKind, ProviderId, ProviderSettings};
use llm_failover_emulator::{Emulator, ProviderConfig};

use crate::support::examples::{TempDir, batch_bin, output_within, write_one_provider_config};
use crate::support::redis::RedisServer;

const PASSWORD: &str = "hunter2-REDIS-PW";
const WRONG: &str = "wrong-REDIS-PW";

fn local() -> Arc<OpenAi> {
    Arc::new(OpenAi::new(
        ProviderId::new("local"),
        "http://127.0.0.1:9/v1".parse().unwrap(),
    ))
}

/// `redis://[:password@]127.0.0.1:PORT`.
fn url(redis: &RedisServer, password: Option<&str>) -> String {
    match password {
        Some(pw) => format!("redis://:{pw}@127.0.0.1:{}", redis.port()),
        None => format!("redis://127.0.0.1:{}", redis.port()),
    }
}

#[tokio::test]
async fn check_stores_refuses_a_wrong_or_missing_password_and_names_only_the_host() {
    let redis = RedisServer::with_password(PASSWORD);
    // (password in the URL, what the shared limiter store's check says)
    let table: &[(Option<&str>, Option<&str>)] = &[
        (Some(PASSWORD), None),
        (Some(WRONG), Some("refused this client")),
        (None, Some("refused this client")),
    ];
    for (password, refused) in table {
        let client = Client::builder()
            .provider(local(), ProviderSettings::new())
            .shared(SharedSettings::new(url(&redis, *password)))
            .build()
            .unwrap();
        let got = client.check_stores().await;
        match refused {
            None => got.unwrap(),
            Some(words) => {
                let e = got.unwrap_err();
                assert_eq!(e.kind(), ErrorKind::Config, "{password:?}: {e}");
                let text = format!("{e} {e:?}");
                assert!(text.contains(words), "{password:?}: {text}");
                assert!(
                    text.contains(&format!("127.0.0.1:{}", redis.port())),
                    "{text}"
                );
                assert!(!text.contains(PASSWORD) && !text.contains(WRONG), "{text}");
            }
        }
    }
    // The Redis response cache, likewise.
    let cache = Cache::open(&url(&redis, Some(WRONG))).unwrap();
    let client = Client::builder()
        .provider(local(), ProviderSettings::new())
        .cache(cache)
        .build()
        .unwrap();
    let e = client.check_stores().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Config, "{e}");
    assert!(!format!("{e} {e:?}").contains(WRONG), "{e:?}");
    // A Redis that is not there is not a refusal: the down mode governs requests.
    let gone = Client::builder()
        .provider(local(), ProviderSettings::new())
        .shared(
            SharedSettings::new(format!(
                "redis://127.0.0.1:{}",
                crate::support::examples::free_port()
            ))
            .timeout(Duration::from_millis(200)),
        )
        .build()
        .unwrap();
    gone.check_stores().await.unwrap();
}

/// The command run on `dir`'s input with the shared limits at `redis_url`.
fn run(dir: &TempDir, config: &Path, redis_url: &str) -> std::process::Output {
    let mut cmd = Command::new(batch_bin());
    cmd.arg("--config")
        .arg(config)
        .args(["--env", "auth", "--input"])
        .arg(dir.path("in.jsonl"))
        .arg("--output")
        .arg(dir.path("out.jsonl"))
        .current_dir(dir.root())
        .env("RUST_LOG", "trace")
        .env_remove("LLM_FAILOVER_ENV")
        .env("NO_COLOR", "1")
        .env("AUTH_KEY", "sk-auth-test")
        .env("LLM_FAILOVER_REDIS_URL", redis_url);
    output_within(cmd, Duration::from_secs(120), "the llm-failover command")
}

#[test]
fn a_wrong_redis_password_stops_the_command_before_any_item_and_the_rerun_sends_them_all() {
    let redis = RedisServer::with_password(PASSWORD);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let emu = rt
        .block_on(
            Emulator::builder()
                .provider(ProviderConfig::openai("p").with_key("sk-auth-test"))
                .start(),
        )
        .unwrap();
    let dir = TempDir::new("shared-auth", "wrong-password");
    let config = dir.path("providers.toml");
    write_one_provider_config(&config, "auth", "p", emu.base_url("p").as_str(), "AUTH_KEY");
    let lines: Vec<String> = (0..20)
        .map(|i| format!(r#"{{"id":"item-{i:02}","prompt":"say {i}","max_tokens":8}}"#))
        .collect();
    std::fs::write(dir.path("in.jsonl"), lines.join("\n") + "\n").unwrap();

    let out = run(&dir, &config, &url(&redis, Some(WRONG)));
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_ne!(out.status.code(), Some(0), "{printed}");
    assert!(printed.contains("refused this client"), "{printed}");
    assert!(
        !printed.contains(WRONG) && !printed.contains(PASSWORD),
        "{printed}"
    );
    assert_eq!(emu.counters("p").requests, 0, "nothing is sent");
    let settled = std::fs::read_to_string(dir.path("out.jsonl")).unwrap_or_default();
    assert_eq!(settled.lines().count(), 0, "nothing is settled: {settled}");

    // The right password: every item goes, without --retry-failed.
    let out = run(&dir, &config, &url(&redis, Some(PASSWORD)));
    let printed = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{printed}");
    assert!(!printed.contains(PASSWORD), "the password is never printed");
    let results = std::fs::read_to_string(dir.path("out.jsonl")).unwrap();
    let ok = results
        .lines()
        .filter(|l| l.contains(r#""ok":true"#))
        .count();
    assert_eq!(ok, 20, "{results}");
}
