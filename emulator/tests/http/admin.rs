//! The admin endpoint, for out-of-process use, and the binary.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use llm_failover_emulator::{Emulator, Limits, ProviderConfig};
use serde_json::{Value, json};

use crate::support::*;

async fn admin_get(emu: &Emulator, path: &str) -> Value {
    client()
        .get(format!("{}/_admin/{path}", emu.url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn admin_post(emu: &Emulator, path: &str, body: &Value) -> (u16, Value) {
    let resp = client()
        .post(format!("{}/_admin/{path}", emu.url()))
        .json(body)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

#[tokio::test]
async fn counters_log_and_reset_are_served_over_http() {
    let emu = Emulator::builder()
        .openai("openai")
        .deepgram("deepgram")
        .start()
        .await
        .unwrap();
    openai_chat(&emu, "openai", &chat_body("hi"))
        .send()
        .await
        .unwrap();
    client()
        .post(format!("{}/chat/completions", emu.base_url("openai")))
        .json(&chat_body("hi"))
        .send()
        .await
        .unwrap();
    let counters = admin_get(&emu, "counters").await;
    assert_eq!(counters["openai"]["requests"], 2);
    assert_eq!(counters["openai"]["ok"], 1);
    assert_eq!(counters["openai"]["client_errors"], 1);
    assert!(counters["openai"]["tokens"].as_u64().unwrap() > 0);
    assert_eq!(counters["deepgram"]["requests"], 0);
    let log = admin_get(&emu, "log?limit=1").await;
    assert_eq!(log.as_array().unwrap().len(), 1);
    assert_eq!(log[0]["status"], 401);
    let (status, _) = admin_post(&emu, "reset", &json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(admin_get(&emu, "counters").await["openai"]["requests"], 0);
    assert!(admin_get(&emu, "log").await.as_array().unwrap().is_empty());
}

#[tokio::test]
async fn faults_can_be_scripted_and_mixed_over_http() {
    let emu = Emulator::builder().openai("openai").start().await.unwrap();
    let (status, body) = admin_post(&emu, "faults", &json!({
        "provider": "openai",
        "script": [{"kind": "status", "status": 502}, {"kind": "rate_limit", "retry_after": {"seconds": 2}}],
    })).await;
    assert_eq!((status, body["pending"].as_u64()), (200, Some(2)));
    let statuses = [
        openai_chat(&emu, "openai", &chat_body("x"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        openai_chat(&emu, "openai", &chat_body("x"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        openai_chat(&emu, "openai", &chat_body("x"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
    ];
    assert_eq!(statuses, [502, 429, 200]);
    let (status, _) = admin_post(
        &emu,
        "faults",
        &json!({"provider": "openai", "mix": [{"p": 1.0, "kind": "overloaded"}], "seed": 3}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        openai_chat(&emu, "openai", &chat_body("x"))
            .send()
            .await
            .unwrap()
            .status(),
        503
    );
    let cases = [
        (json!({"provider": "nobody", "script": []}), 404),
        (
            json!({"provider": "openai", "mix": [{"p": 2.0, "kind": "reset"}]}),
            400,
        ),
        (
            json!({"provider": "openai", "script": [{"kind": "explode"}]}),
            400,
        ),
        (json!({"provider": "openai", "bogus": 1}), 400),
    ];
    for (body, want) in cases {
        assert_eq!(admin_post(&emu, "faults", &body).await.0, want, "{body}");
    }
}

#[tokio::test]
async fn limits_can_be_changed_at_run_time() {
    let emu = Emulator::builder()
        .provider(ProviderConfig::openai("openai").with_limits(Limits::per_minute(100, 100_000)))
        .start()
        .await
        .unwrap();
    let (status, _) = admin_post(
        &emu,
        "limits",
        &json!({"provider": "openai", "limits": {"rpm": 1}}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        openai_chat(&emu, "openai", &chat_body("x"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let resp = openai_chat(&emu, "openai", &chat_body("x"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 429);
    assert_eq!(h(resp.headers(), "x-ratelimit-limit-requests"), Some("1"));
    assert_eq!(
        h(resp.headers(), "x-ratelimit-limit-tokens"),
        None,
        "tpm removed"
    );
    assert_eq!(
        admin_post(
            &emu,
            "limits",
            &json!({"provider": "openai", "limits": {"rpm": 0}})
        )
        .await
        .0,
        400
    );
    // In process too: lifting every limit.
    emu.set_limits("openai", None, Limits::none());
    assert_eq!(
        openai_chat(&emu, "openai", &chat_body("x"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
}

#[test]
fn the_binary_prints_one_base_url_per_provider() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_llm-failover-emulator"))
        .args([
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/emulator.toml"),
            "--port",
            "0",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let got: Vec<String> = (0..4).map(|_| lines.next().unwrap().unwrap()).collect();
    child.kill().unwrap();
    child.wait().unwrap();
    let names: Vec<&str> = got.iter().map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(names, ["anthropic", "deepgram", "openai", "admin"]);
    let openai = got[2].split(' ').nth(1).unwrap();
    assert!(
        openai.starts_with("http://127.0.0.1:") && openai.ends_with("/openai/v1"),
        "{openai}"
    );
    assert!(got[0].ends_with("/anthropic"), "{got:?}");
}

/// Every `curl` line of README.md, against an emulator serving the providers it names.
#[tokio::test]
async fn the_readmes_admin_examples_are_accepted() {
    let emu = Emulator::builder()
        .openai("openai")
        .anthropic("anthropic")
        .vertex("vertex")
        .start()
        .await
        .unwrap();
    let readme = include_str!("../../README.md");
    let mut sent = 0;
    for line in readme.lines().filter(|l| l.starts_with("curl ")) {
        let url = line
            .split_whitespace()
            .find(|w| {
                w.trim_matches('\'')
                    .starts_with("http://127.0.0.1:4010/_admin/")
            })
            .unwrap_or_else(|| panic!("no admin URL in {line}"))
            .trim_matches('\'');
        let url = url.replace("http://127.0.0.1:4010", &emu.url());
        let resp = match line.split_once(" -d '") {
            Some((_, rest)) => {
                let body = rest.strip_suffix('\'').unwrap();
                let body: Value = serde_json::from_str(body).unwrap();
                client().post(&url).json(&body).send().await.unwrap()
            }
            None if line.contains("-X POST") => client().post(&url).send().await.unwrap(),
            None => client().get(&url).send().await.unwrap(),
        };
        let status = resp.status().as_u16();
        assert_eq!(status, 200, "{line}: {}", resp.text().await.unwrap());
        sent += 1;
    }
    assert_eq!(sent, 11);
    // The last ones lifted openai's limits and turned anthropic's mix off; the appended reset
    // follows the three scripted steps.
    assert_eq!(emu.pending_faults("openai"), 4);
}
