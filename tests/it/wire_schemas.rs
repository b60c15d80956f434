//! Wire truth (issue 33): the request bodies the SDK sends, captured on their way to the
//! emulator, validated against the providers' own published schemas — so a body a provider
//! would refuse is found here, not in production.
//!
//! Every case of [`cases::cases`] goes through the public `Client`, once per chat format
//! (OpenAI, Azure OpenAI at api-version 2024-10-21, Anthropic, Gemini), plus Whisper
//! transcriptions (OpenAI and Azure), to the emulator through a recording proxy on loopback
//! ([`recorder`]) that keeps the exact bytes sent. `emulator/sdk/wire_schemas.py` then checks
//! each body against:
//!
//! - OpenAI: `CreateChatCompletionRequest` / `CreateTranscriptionRequest` of OpenAI's OpenAPI
//!   spec (<https://github.com/openai/openai-openapi>, vendored subset in
//!   `emulator/sdk/schemas/openai-openapi.json`, commit recorded there) with `jsonschema`, and
//!   openai-python's `CompletionCreateParams…` / `TranscriptionCreateParams…` with pydantic,
//!   unknown keys refused; plus what the spec states in prose only (function and `json_schema`
//!   names `^[a-zA-Z0-9_-]{1,64}$`, <https://platform.openai.com/docs/api-reference/chat/create>).
//! - Azure: `createChatCompletionRequest` / `createTranscriptionRequest` of the 2024-10-21
//!   inference spec (<https://github.com/Azure/azure-rest-api-specs>, vendored subset in
//!   `emulator/sdk/schemas/azure-2024-10-21.json`), and no top-level field that spec does not
//!   declare (<https://learn.microsoft.com/en-us/azure/ai-services/openai/reference>).
//! - Anthropic: anthropic-python's `MessageCreateParams…` with pydantic, unknown keys refused;
//!   the documented ranges and patterns it does not encode
//!   (<https://docs.anthropic.com/en/api/messages>), and what the API answers 400 to beyond
//!   them, in its own words as publicly reported.
//! - Gemini: google-genai's models (`Content`, `Tool`, `ToolConfig`, `GenerationConfig`) for
//!   each part of the body; the v1beta rules they do not encode (a function's description,
//!   at most 5 stop sequences: <https://ai.google.dev/api/generate-content>).
//!
//! [`controls`] feeds the validator hand-made bodies the providers refuse, so it is seen to
//! fail.
//!
//! A request the SDK refuses before sending (Unsupported / InvalidRequest) must reach no one:
//! it is reported as `refused before sending: KIND`. The report lists every case × format with
//! its verdict (`--nocapture` prints it; it is also left in `target/tmp/wire_schemas/`).
//!
//! The validator runs with `$LLM_FAILOVER_PYTHON` (else `python3`), which needs the packages
//! of `emulator/sdk/requirements.txt`; `scripts/test` installs them into `target/sdk-venv`.
//! Nothing here reaches the internet: the schemas are vendored, the SDKs installed.
//!
//! `scripts/test -p llm-failover --test it -- wire_schemas`

#[path = "wire_schemas/cases.rs"]
mod cases;
#[path = "wire_schemas/controls.rs"]
mod controls;
#[path = "wire_schemas/recorder.rs"]
mod recorder;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::FromRequest;
use futures_util::StreamExt;
use llm_failover::clock::ManualClock;
use llm_failover::config::Policy;
use llm_failover::provider::Provider;
use llm_failover::provider::anthropic::Anthropic;
use llm_failover::provider::azure::Azure;
use llm_failover::provider::gemini::Gemini;
use llm_failover::provider::openai::OpenAi;
use llm_failover::rng::SeededRng;
use llm_failover::{
    AudioInput, ChatRequest, Client, Credential, Error, ErrorKind, ProviderId, ProviderSettings,
    TranscriptFormat, TranscriptionRequest,
};
use llm_failover_emulator::Emulator;
use serde_json::{Value, json};

use cases::{Format, cases};
use recorder::{Captured, Recorder};

/// The Azure api-version the vendored spec is for.
const AZURE_API_VERSION: &str = "2024-10-21";

/// Bodies the SDK sends today that a provider's schema refuses: (case, format, the path of
/// the error the validator reports). Each must still be refused: a fixed one fails the test,
/// which then asks for its line to go.
const KNOWN: &[(&str, &str, &str)] = &[
    // None. Azure's 2024-10-21 spec requires a `type` inside `json_schema` that Microsoft's
    // own REST example for that api-version does not send (nor openai-python's AzureOpenAI):
    // the validator applies that one documented erratum (ERRATA in
    // emulator/sdk/wire_schemas.py, with its source), and a control keeps `name` required.
];

/// Bounds a hung interpreter; the check itself takes a few seconds.
const PYTHON_TIMEOUT: Duration = Duration::from_secs(120);

const SETUP: &str = "run scripts/test (it installs emulator/sdk/requirements.txt into \
                     target/sdk-venv and points $LLM_FAILOVER_PYTHON at it), e.g. \
                     `scripts/test -p llm-failover --test it -- wire_schemas`";

// ---- the SDK against the emulator, through the recorder --------------------------------------

fn adapter(format: Format, base: &str) -> Arc<dyn Provider> {
    let id = ProviderId::new(format.name());
    let url = |s: String| s.parse().unwrap();
    match format {
        Format::OpenAi => Arc::new(
            OpenAi::new(id, url(base.to_owned()))
                .with_chat_model("gpt-4o-mini")
                .with_transcription_model("whisper-1"),
        ),
        Format::Azure => Arc::new(
            Azure::new(id, url(base.to_owned()), AZURE_API_VERSION)
                .with_chat_model("chat")
                .with_transcription_model("whisper"),
        ),
        Format::Anthropic => {
            Arc::new(Anthropic::new(id, url(base.to_owned())).with_model("claude-3-5-haiku-latest"))
        }
        // Gemini's API version is part of the base URL the adapter is given.
        Format::Gemini => {
            Arc::new(Gemini::new(id, url(format!("{base}/v1beta"))).with_model("gemini-2.5-flash"))
        }
    }
}

/// A client of `format` alone, sending through `rec` to `emu`.
fn client(emu: &Emulator, rec: &Recorder, format: Format) -> Client {
    let base = emu
        .base_url(format.name())
        .replacen(&emu.url(), &rec.url(), 1);
    let mut policy = Policy::default();
    policy.request_timeout = Duration::from_secs(10);
    policy.deadline = Duration::from_secs(3600);
    Client::builder()
        .clock(Arc::new(ManualClock::new()))
        .rng(Arc::new(SeededRng::new(7)))
        .policy(policy)
        .provider(
            adapter(format, &base),
            ProviderSettings::new().credential(Credential::new(emu.key(format.name()))),
        )
        .build()
        .unwrap()
}

async fn chat(client: &Client, req: ChatRequest, stream: bool) -> Result<(), Error> {
    if !stream {
        return client.chat(req).await.map(drop);
    }
    let mut s = client.chat_stream(req).await?;
    while let Some(item) = s.next().await {
        item?;
    }
    Ok(())
}

/// `kind: message` of the error a request ended with.
fn said(e: &Error) -> String {
    format!("{:?}: {}", e.kind(), e.message())
}

/// One case × format as the validator reads it: what was sent, or that nothing was.
async fn entry(
    (case, format, kind, stream): (&str, Format, &str, bool),
    answer: Result<(), Error>,
    mut sent: Vec<Captured>,
) -> Value {
    let mut e = json!({"case": case, "format": format.name(), "kind": kind, "stream": stream});
    match (sent.len(), &answer) {
        (0, Err(err)) => {
            e["outcome"] = json!("refused");
            e["refused"] = json!(said(err));
            e["refused_kind"] = json!(format!("{:?}", err.kind()));
            return e;
        }
        (1, _) => {}
        (n, _) => panic!(
            "{case} × {}: {n} requests went out for one call (a retry? a refusal that was \
             sent?); answer: {:?}",
            format.name(),
            answer.as_ref().err().map(said)
        ),
    }
    let c = sent.remove(0);
    e["outcome"] = json!("sent");
    e["method"] = json!(c.method);
    e["path"] = json!(c.path);
    e["query"] = json!(c.query);
    e["status"] = json!(c.status);
    e["answer"] = json!(answer.as_ref().err().map_or_else(|| "ok".to_owned(), said));
    if kind == "transcription" {
        e["form"] = Value::Array(form(c.content_type.as_deref().unwrap_or(""), c.body).await);
    } else {
        e["body"] = serde_json::from_slice(&c.body).unwrap_or_else(|err| {
            panic!(
                "{case} × {}: the body sent is not JSON: {err}",
                format.name()
            )
        });
    }
    e
}

/// A multipart body's fields: text fields with their text, file parts with their name, type
/// and size.
async fn form(content_type: &str, body: bytes::Bytes) -> Vec<Value> {
    let req = axum::http::Request::builder()
        .header(axum::http::header::CONTENT_TYPE, content_type)
        .body(axum::body::Body::from(body))
        .unwrap();
    let mut parts = axum::extract::Multipart::from_request(req, &())
        .await
        .expect("a multipart/form-data body");
    let mut out = Vec::new();
    while let Some(field) = parts.next_field().await.expect("a well-formed part") {
        let name = field.name().unwrap_or_default().to_owned();
        let file_name = field.file_name().map(str::to_owned);
        let content_type = field.content_type().map(str::to_owned);
        let data = field.bytes().await.expect("the part's bytes");
        out.push(match file_name {
            Some(_) => json!({"name": name, "file_name": file_name,
                              "content_type": content_type, "size": data.len()}),
            None => json!({"name": name, "text": String::from_utf8_lossy(&data)}),
        });
    }
    out
}

/// The transcriptions: Whisper with every option the request has, and with none.
fn transcriptions() -> Vec<(&'static str, TranscriptionRequest)> {
    let audio = || {
        AudioInput::from_bytes(llm_failover_emulator::text::silent_wav(0.2), "memo.wav").unwrap()
    };
    vec![
        (
            "transcription, defaults",
            TranscriptionRequest::new(audio()),
        ),
        (
            "transcription, every option",
            TranscriptionRequest::new(audio())
                .language("en")
                .prompt("Names: Ada, Grace.")
                .response_format(TranscriptFormat::VerboseJson)
                .temperature(0.2),
        ),
    ]
}

/// Runs every case in every format and every transcription; the validator's input.
async fn capture() -> Vec<Value> {
    let emu = Emulator::builder()
        .openai("openai")
        .azure("azure")
        .anthropic("anthropic")
        .gemini("gemini")
        .start()
        .await
        .unwrap();
    let rec = Recorder::start(emu.url()).await;
    let mut entries = Vec::new();
    for format in Format::ALL {
        let client = client(&emu, &rec, format);
        for case in cases() {
            let answer = chat(&client, (case.request)(format), case.stream).await;
            let what = (case.name, format, "chat", case.stream);
            entries.push(entry(what, answer, rec.take()).await);
        }
        if matches!(format, Format::OpenAi | Format::Azure) {
            for (name, req) in transcriptions() {
                let answer = client.transcribe(req).await.map(drop);
                let what = (name, format, "transcription", false);
                entries.push(entry(what, answer, rec.take()).await);
            }
        }
    }
    entries
}

// ---- the validator --------------------------------------------------------------------------

fn workdir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("wire_schemas");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `emulator/sdk/wire_schemas.py` over `entries` (saved as `<name>.captures.json`);
/// its results, in order.
async fn validate(name: &str, entries: &[Value]) -> Vec<Value> {
    let captures = workdir().join(format!("{name}.captures.json"));
    let text = serde_json::to_string_pretty(&json!({"entries": entries})).unwrap();
    std::fs::write(&captures, text).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/emulator/sdk/wire_schemas.py");
    let python = std::env::var("LLM_FAILOVER_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "python3".into());
    let child = std::process::Command::new(&python)
        .arg(script)
        .arg(&captures)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {python} ({e}): {SETUP}"));
    let pid = child.id();
    let waited = tokio::time::timeout(
        PYTHON_TIMEOUT,
        tokio::task::spawn_blocking(move || child.wait_with_output()),
    )
    .await;
    let Ok(out) = waited else {
        // Ends the interpreter this test started, by its id.
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
        panic!("{script} did not finish within {PYTHON_TIMEOUT:?}");
    };
    let out = out.unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{script} failed ({}; exit 2 = a package is missing: {SETUP})\n{stderr}",
        out.status
    );
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{script} printed no JSON report ({e})\n{stderr}"));
    let results = report["results"].as_array().cloned().unwrap_or_default();
    assert_eq!(results.len(), entries.len(), "one result per entry");
    std::fs::write(
        workdir().join(format!("{name}.report.txt")),
        table(&results),
    )
    .unwrap();
    results
}

/// The errors of one result, as `check: path rule: message` lines.
fn errors(r: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for c in r["checks"].as_array().into_iter().flatten() {
        for e in c["errors"].as_array().into_iter().flatten() {
            let path = e["path"].as_str().unwrap_or("?").to_owned();
            let line = format!(
                "{}: {} {}: {}",
                c["check"].as_str().unwrap_or("?"),
                path,
                e["rule"].as_str().unwrap_or("?"),
                e["message"].as_str().unwrap_or("?")
            );
            out.push((path, line));
        }
    }
    out
}

/// The report: every case × format with its verdict, the errors under it.
fn table(results: &[Value]) -> String {
    let mut lines = Vec::new();
    for r in results {
        let stream = if r["stream"] == json!(true) {
            " (stream)"
        } else {
            ""
        };
        let status = match r["status"].as_u64() {
            Some(s) => format!(" [emulator {s}]"),
            None => String::new(),
        };
        lines.push(format!(
            "{} × {}{stream}: {}{status}",
            r["case"].as_str().unwrap_or("?"),
            r["format"].as_str().unwrap_or("?"),
            r["verdict"].as_str().unwrap_or("?"),
        ));
        lines.extend(errors(r).into_iter().map(|(_, l)| format!("    {l}")));
    }
    lines.join("\n")
}

fn key(r: &Value) -> (String, String) {
    (
        r["case"].as_str().unwrap_or("?").to_owned(),
        r["format"].as_str().unwrap_or("?").to_owned(),
    )
}

// ---- the tests ------------------------------------------------------------------------------

/// Every body the SDK sends, in every chat format and for Whisper, is one the provider's
/// published schema accepts; what the SDK cannot send validly it refuses before sending.
#[tokio::test]
async fn every_body_the_sdk_sends_is_valid_under_the_providers_schemas() {
    let entries = capture().await;
    let chats = cases().len() * Format::ALL.len();
    assert_eq!(entries.len(), chats + 2 * transcriptions().len());
    let results = validate("sdk", &entries).await;
    let report = table(&results);
    println!("{report}");

    let by_key: BTreeMap<_, _> = entries.iter().map(|e| (key(e), e)).collect();
    assert_eq!(
        by_key.len(),
        entries.len(),
        "case names are unique per format"
    );
    let mut wrong = Vec::new();
    for r in &results {
        let (case, format) = key(r);
        let entry = by_key[&(case.clone(), format.clone())];
        let verdict = r["verdict"].as_str().unwrap_or("?");
        let known = KNOWN.iter().find(|(c, f, _)| *c == case && *f == format);
        if verdict.starts_with("refused before sending") {
            // Refused as the router refuses what a format cannot carry, and nothing went out
            // (`entry` panics when a refused call sent anything).
            let kind = entry["refused_kind"].as_str().unwrap_or("?");
            if kind != format!("{:?}", ErrorKind::Unsupported)
                && kind != format!("{:?}", ErrorKind::InvalidRequest)
            {
                wrong.push(format!(
                    "{case} × {format}: refused as {kind}, not Unsupported/InvalidRequest"
                ));
            }
            continue;
        }
        let found = errors(r);
        match known {
            None if verdict != "valid" => wrong.push(format!("{case} × {format}: {verdict}")),
            None => {}
            Some((_, _, path)) if verdict == "valid" || !found.iter().any(|(p, _)| p == path) => {
                wrong.push(format!(
                    "{case} × {format}: the known refusal at {path} is gone (verdict \
                     {verdict}): take its line out of KNOWN"
                ));
            }
            // Known at that path, and nothing else refused.
            Some((_, _, path)) => wrong.extend(
                found
                    .iter()
                    .filter(|(p, _)| p != path)
                    .map(|(_, line)| format!("{case} × {format}: {line}")),
            ),
        }
        // The emulator, which checks requests as each provider does, took it too.
        let status = entry["status"].as_u64().unwrap_or(0);
        if known.is_none() && !(200..300).contains(&status) {
            wrong.push(format!(
                "{case} × {format}: valid, but the emulator answered {status}: {}",
                entry["answer"]
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} case × format:\n  {}\n\nreport:\n{report}",
        wrong.len(),
        results.len(),
        wrong.join("\n  ")
    );

    // The edges issue 33 found are exercised, each either mended into a valid body or refused
    // before sending (never sent as it was): checked above for every entry; here, that they
    // are among the entries at all.
    for (case, format) in [
        ("stop: 5 sequences", "openai"),
        ("stop: 5 sequences", "azure"),
        ("json_schema, odd name", "openai"),
        ("json_schema, 80-character name", "azure"),
        ("temperature 1.5", "anthropic"),
        ("tool without a description", "gemini"),
    ] {
        assert!(
            by_key.contains_key(&(case.to_owned(), format.to_owned())),
            "{case} × {format}"
        );
    }

    // Whisper's multipart fields, as the options set them.
    let every = by_key[&(
        "transcription, every option".to_owned(),
        "openai".to_owned(),
    )];
    let field = |name: &str| {
        every["form"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no `{name}` field in {every}"))
    };
    assert_eq!(field("model")["text"], "whisper-1");
    assert_eq!(field("language")["text"], "en");
    assert_eq!(field("prompt")["text"], "Names: Ada, Grace.");
    assert_eq!(field("response_format")["text"], "verbose_json");
    assert_eq!(field("temperature")["text"], "0.2");
    assert_eq!(field("file")["file_name"], "memo.wav");
}
