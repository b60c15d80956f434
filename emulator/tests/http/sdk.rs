//! The providers' official Python SDKs parse the emulator's answers: `emulator/sdk/check.py`
//! drives openai (OpenAI and Azure), anthropic, google-genai (the Gemini API, and Vertex AI
//! with service-account credentials from the key file written here, the token fetched from
//! the emulator), boto3 (Bedrock, signing with temporary credentials) and deepgram-sdk
//! against an emulator started here, on a free loopback port, and validates every answer
//! against the SDK's own types — chat, streams, transcriptions, embeddings, errors, and tools
//! (calls, round trips, streamed calls), structured answers and images in every chat format.
//!
//! It runs the interpreter named by `$LLM_FAILOVER_PYTHON`, else `python3`, and needs the
//! pinned SDKs of `emulator/sdk/requirements.txt` there. `scripts/test` (the README's test
//! command, which `.ci/run` calls) installs them into a virtual environment under `target/`
//! and sets the variable to its interpreter. Without them the test fails and says so; it
//! never skips.

use std::process::Stdio;
use std::time::Duration;

use llm_failover_emulator::{Emulator, ProviderConfig};
use tokio::io::AsyncReadExt;
use tokio::process::Command;

/// The check takes a few seconds; this only bounds a hung interpreter.
const TIMEOUT: Duration = Duration::from_secs(120);

/// Proxies could send the SDKs anywhere but the loopback address (the script also clears
/// them, with the SDKs' own variables, and refuses any other host).
const PROXY_VARS: [&str; 8] = [
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
];

const PROVIDERS: [&str; 7] = [
    "openai",
    "azure",
    "anthropic",
    "gemini",
    "vertex",
    "bedrock",
    "deepgram",
];

/// Names the interpreter with the SDKs; `scripts/test` sets it to its venv's.
const PYTHON_VAR: &str = "LLM_FAILOVER_PYTHON";

/// What to do when the SDKs are missing.
const SETUP: &str = "run scripts/test (it installs emulator/sdk/requirements.txt into a venv \
                     under target/ and runs the tests with its interpreter), e.g. \
                     `scripts/test -p llm-failover-emulator sdk`";

async fn read_all(pipe: Option<impl AsyncReadExt + Unpin>) -> String {
    let mut buf = Vec::new();
    if let Some(mut p) = pipe {
        let _ = p.read_to_end(&mut buf).await;
    }
    String::from_utf8_lossy(&buf).into_owned()
}

#[tokio::test]
async fn the_official_python_sdks_parse_every_answer() {
    let emu = Emulator::builder()
        .provider(ProviderConfig::openai("openai").with_models([
            "gpt-4o-mini",
            "whisper-1",
            "text-embedding-3-small",
        ]))
        .azure("azure")
        .anthropic("anthropic")
        .gemini("gemini")
        .vertex("vertex")
        .provider(ProviderConfig::bedrock("bedrock").with_session_token("emulator-session-token"))
        .deepgram("deepgram")
        .start()
        .await
        .unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/sdk/check.py");
    let python = std::env::var_os(PYTHON_VAR)
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "python3".into());
    let python = python.to_string_lossy().into_owned();
    let mut cmd = Command::new(&python);
    cmd.arg(script).arg(emu.url());
    // Vertex's credential is its service-account key file, as Google issues it.
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("vertex-service-account.json");
    std::fs::write(&key_file, emu.service_account_key("vertex").to_json()).unwrap();
    for p in PROVIDERS {
        let key = match p {
            "bedrock" => {
                let aws = emu.aws_credentials(p);
                let token = aws.session_token.unwrap_or_default();
                format!("{}:{}:{token}", aws.access_key_id, aws.secret_access_key)
            }
            "vertex" => key_file.display().to_string(),
            _ => emu.key(p).to_owned(),
        };
        cmd.arg("--key-for").arg(format!("{p}={key}"));
    }
    cmd.arg("--aws-region")
        .arg(emu.aws_credentials("bedrock").region);
    for var in PROXY_VARS {
        cmd.env_remove(var);
    }
    cmd.env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().unwrap_or_else(|e| {
        panic!(
            "cannot run {python} ({e}): the SDK check needs Python 3 with the SDKs of \
             emulator/sdk/requirements.txt: {SETUP}"
        )
    });
    let stdout = tokio::spawn(read_all(child.stdout.take()));
    let stderr = tokio::spawn(read_all(child.stderr.take()));
    let status = tokio::time::timeout(TIMEOUT, child.wait()).await;
    if status.is_err() {
        let _ = child.kill().await;
    }
    let (out, err) = (
        stdout.await.unwrap_or_default(),
        stderr.await.unwrap_or_default(),
    );
    let report = format!("--- interpreter: {python}\n--- stdout\n{out}\n--- stderr\n{err}");
    let status = match status {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => panic!("waiting for {script}: {e}\n{report}"),
        Err(_) => panic!("{script} did not finish within {TIMEOUT:?}\n{report}"),
    };
    assert!(
        status.success(),
        "{script} failed ({status}; exit 2 = an SDK is missing: {SETUP})\n{report}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("sdk: ") && l.ends_with(" passed, 0 failed")),
        "no summary line from {script}\n{report}"
    );
    // The SDKs talked to this emulator, and it answered every request.
    for p in PROVIDERS {
        let c = emu.counters(p);
        assert!(
            c.ok > 0,
            "{p}: no answer served to the SDK: {c:?}\n{report}"
        );
        assert_eq!((c.server_errors, c.dropped), (0, 0), "{p}: {c:?}\n{report}");
    }
}
