//! The `llm-failover` command's metrics as the teams that run it get them: a **real
//! Prometheus** (Debian's, started here on a free loopback port) scrapes `--metrics` while a
//! batch runs against the emulator with scripted 429s and failovers, and its HTTP API is asked
//! for the series; and an **OTLP/HTTP push** is received by a small server that decodes it
//! with the OpenTelemetry project's own protobuf definitions (`opentelemetry-proto`, in the
//! test venv). Both are checked against what the emulator saw and reported, against the GenAI
//! conventions' tables (v1.41.0, `docs/gen-ai/gen-ai-metrics.md`), and for the keys and the
//! prompts, which must appear nowhere.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use llm_failover::observe::otel::names;
use llm_failover_emulator::{Emulator, Fault, Limits, LogEntry, ProviderConfig, RetryAfter};
use serde_json::{Value, json};

use crate::support::examples::{TempDir, batch_bin, free_port, output_within};
use crate::support::prometheus::{Prometheus, until_the_server};

/// The providers' keys: they must never reach a metric.
const KEYS: [(&str, &str); 2] = [
    ("primary", "sk-metrics-primary-SECRET-9d2c"),
    ("backup", "sk-ant-metrics-backup-SECRET-41e7"),
];
/// A marker in every prompt: it must never reach a metric.
const PROMPT: &str = "MARKER-PROMPT-metrics-b3f0";
/// Items in the batch.
const ITEMS: usize = 40;
/// Each answer's latency: long enough that the batch outlasts the primary's first rest (1 s)
/// and its second 429 arrives.
const LATENCY_MS: u64 = 40;
/// The 429s scripted on the primary (each fails its request over to the backup at once).
const SCRIPTED_429S: u64 = 2;

/// An emulator with an OpenAI-format primary that answers [`SCRIPTED_429S`] × 429 among
/// its first requests and an Anthropic backup, both stating generous limits; the providers
/// file and the input in `dir`.
struct Run {
    emu: Emulator,
    _rt: tokio::runtime::Runtime,
    dir: TempDir,
}

impl Run {
    fn start(name: &str) -> Run {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let emu = rt
            .block_on(
                Emulator::builder()
                    .provider(
                        ProviderConfig::openai("primary")
                            .with_key(KEYS[0].1)
                            .with_limits(Limits::per_minute(600, 1_000_000))
                            .with_latency(LATENCY_MS, 0),
                    )
                    .provider(
                        ProviderConfig::anthropic("backup")
                            .with_key(KEYS[1].1)
                            .with_limits(Limits::per_minute(500, 1_000_000))
                            .with_latency(LATENCY_MS, 0),
                    )
                    .start(),
            )
            .expect("the emulator starts");
        let throttle = Fault::RateLimit {
            retry_after: RetryAfter::Seconds(1),
        };
        let mut script = vec![Fault::Pass; 3];
        script.push(throttle.clone());
        script.extend([Fault::Pass, Fault::Pass]);
        script.push(throttle);
        emu.script("primary", script);
        let dir = TempDir::new("metrics", name);
        let toml = format!(
            r#"default_environment = "metrics"

[environments.metrics]
chat = ["primary", "backup"]

[providers.primary]
kind = "openai"
base_url = "{}"
model = "gpt-4o-mini"
api_key_env = {{ metrics = "METRICS_PRIMARY_KEY" }}

[providers.backup]
kind = "anthropic"
base_url = "{}"
model = "claude-3-5-haiku-latest"
api_key_env = {{ metrics = "METRICS_BACKUP_KEY" }}
"#,
            emu.base_url("primary"),
            emu.base_url("backup")
        );
        std::fs::write(dir.path("providers.toml"), toml).unwrap();
        let lines: Vec<String> = (0..ITEMS)
            .map(|i| {
                json!({"id": format!("q{i:03}"), "prompt": format!("{PROMPT} question {i}"), "max_tokens": 16})
                    .to_string()
            })
            .collect();
        std::fs::write(dir.path("in.jsonl"), lines.join("\n") + "\n").unwrap();
        Run { emu, _rt: rt, dir }
    }

    /// `llm-failover batch` on this run's files, one item at a time (so the last answer each
    /// provider gave is the last the client heard), with `args` and `env` added.
    fn command(&self, args: &[&str], env: &[(&str, String)]) -> Command {
        let mut c = Command::new(batch_bin());
        c.current_dir(self.dir.root())
            .args(["batch", "--config", "providers.toml", "--env", "metrics"])
            .args([
                "--input",
                "in.jsonl",
                "--output",
                "out.jsonl",
                "--concurrency",
                "1",
            ])
            .args(args)
            .env("METRICS_PRIMARY_KEY", KEYS[0].1)
            .env("METRICS_BACKUP_KEY", KEYS[1].1)
            .env_remove("LLM_FAILOVER_REDIS_URL")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT");
        for (k, v) in env {
            c.env(k, v);
        }
        c
    }

    /// Every request the emulator answered, by provider, in order of arrival.
    fn log(&self) -> BTreeMap<String, Vec<LogEntry>> {
        let mut out: BTreeMap<String, Vec<LogEntry>> = BTreeMap::new();
        let mut log = self.emu.log();
        log.sort_by_key(|e| e.at_ms);
        for e in log {
            out.entry(e.provider.clone()).or_default().push(e);
        }
        out
    }

    /// What the emulator saw: requests, 429s, and the usage its answers reported
    /// (`[input, output]`).
    fn truth(&self) -> Truth {
        let log = self.log();
        let all = || log.values().flatten();
        Truth {
            requests: all().count() as u64,
            rate_limited: all().filter(|e| e.status == Some(429)).count() as u64,
            usage: all()
                .filter_map(|e| e.usage)
                .fold([0, 0], |a, u| [a[0] + u[0], a[1] + u[1]]),
            last_remaining: [
                ("primary", "x-ratelimit-remaining-requests"),
                ("backup", "anthropic-ratelimit-requests-remaining"),
            ]
            .into_iter()
            .map(|(p, header)| {
                let last = log[p]
                    .iter()
                    .rev()
                    .find_map(|e| e.stated.iter().find(|(n, _)| n == header))
                    .unwrap_or_else(|| panic!("{p} stated no {header}"));
                (p.to_owned(), last.1.parse().unwrap())
            })
            .collect(),
        }
    }

    /// Checks the run's output: every item answered, and no key printed.
    fn check_output(&self, out: &Output) -> String {
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "the batch failed: {stderr}");
        let results = std::fs::read_to_string(self.dir.path("out.jsonl")).unwrap();
        assert_eq!(results.lines().count(), ITEMS, "{results}");
        assert!(!results.contains("\"error\""), "{results}");
        for (_, key) in KEYS {
            assert!(!stderr.contains(key), "a key in the output: {stderr}");
        }
        stderr
    }
}

#[derive(Debug)]
struct Truth {
    requests: u64,
    rate_limited: u64,
    usage: [u64; 2],
    last_remaining: BTreeMap<String, f64>,
}

/// Prometheus scrapes the batch; its API answers with what the emulator saw.
#[test]
fn a_real_prometheus_scrapes_what_the_emulator_saw() {
    batch_bin(); // built before anything starts
    let run = Run::start("prometheus");
    let target = format!("127.0.0.1:{}", free_port());
    let prom = Prometheus::start("batch", &target);
    let out = output_within(
        run.command(&["--metrics", &target, "--metrics-linger-s", "60"], &[]),
        Duration::from_secs(180),
        "llm-failover batch --metrics",
    );
    let stderr = run.check_output(&out);
    assert!(
        stderr.contains(&format!("metrics: http://{target}/metrics")),
        "{stderr}"
    );
    assert!(stderr.contains("waiting for a last scrape"), "{stderr}");
    assert!(
        !stderr.contains("not scraped since the run ended"),
        "{stderr}"
    );
    let truth = run.truth();
    assert_eq!(truth.rate_limited, SCRIPTED_429S, "{truth:?}");

    // The last scrape answered before the command ended; Prometheus stores it a moment
    // later. Wait (on the real server) until the queue's last count is there.
    let last = |m: &str| format!("last_over_time({m}[10m])");
    let done = format!(
        "sum({})",
        last(&format!(
            "llm_failover_queue_jobs{{{}=\"done\"}}",
            label(names::JOB_STATE)
        ))
    );
    let stored = until_the_server(Duration::from_secs(15), || {
        prom.scalar(&done) == ITEMS as f64
    });
    assert!(
        stored,
        "Prometheus never stored done = {ITEMS}: {:?}\n{}",
        prom.query(&done),
        prom.log()
    );

    let sum = |m: &str| prom.scalar(&format!("sum({})", last(m)));
    assert_eq!(
        sum("gen_ai_client_operation_duration_seconds_count"),
        truth.requests as f64,
        "one duration per request the emulator saw: {truth:?}"
    );
    let rate_limited_durations = prom.scalar(&format!(
        "sum({})",
        last("gen_ai_client_operation_duration_seconds_count{error_type=\"rate_limited\"}")
    ));
    assert_eq!(rate_limited_durations, SCRIPTED_429S as f64);
    for (kind, want) in [("input", truth.usage[0]), ("output", truth.usage[1])] {
        let got = sum(&format!(
            "gen_ai_client_token_usage_sum{{gen_ai_token_type=\"{kind}\"}}"
        ));
        assert_eq!(got, want as f64, "{kind} tokens: {truth:?}");
    }
    assert_eq!(sum("llm_failover_rate_limited_total"), SCRIPTED_429S as f64);
    assert_eq!(sum("llm_failover_failovers_total"), SCRIPTED_429S as f64);
    for (provider, want) in &truth.last_remaining {
        let got = prom.scalar(&last(&format!(
            "llm_failover_rate_limit_remaining{{llm_failover_provider=\"{provider}\",llm_failover_limit_unit=\"requests\"}}"
        )));
        assert_eq!(got, *want, "{provider}'s last stated remaining requests");
    }
    assert_eq!(
        sum(&format!(
            "llm_failover_queue_settlements_total{{{}=\"completed\"}}",
            label(names::JOB_SETTLED)
        )),
        ITEMS as f64
    );
    // The README's query for the requests waiting for admission per provider runs (the
    // generous limits here make no request wait: it evaluates to nothing, or 0).
    let readme = include_str!("../../README.md");
    assert!(
        readme.contains(WAITING_QUERY),
        "the README shows {WAITING_QUERY}"
    );
    for (_, waiting) in prom.query(WAITING_QUERY) {
        assert_eq!(waiting, 0.0);
    }

    // Every series Prometheus holds: no key, no prompt.
    let series = prom.api("/api/v1/series?match%5B%5D=%7B__name__%3D~%22.%2B%22%7D");
    let text = series.to_string();
    assert!(
        text.contains("gen_ai_client_operation_duration_seconds_bucket"),
        "{text}"
    );
    for (_, key) in KEYS {
        assert!(!text.contains(key), "a key in a series");
    }
    assert!(!text.contains(PROMPT), "a prompt in a series");
    assert!(prom.successful_scrapes() >= 1.0);
}

/// The README's PromQL for "requests waiting for admission, per provider": the seconds
/// waited per second of time is the mean number of requests waiting (Little's law).
const WAITING_QUERY: &str =
    "sum by (llm_failover_provider) (rate(llm_failover_admission_wait_seconds_sum[5m]))";

/// A Prometheus label's name for an OpenTelemetry attribute (dots become underscores).
fn label(attribute: &str) -> String {
    attribute.replace('.', "_")
}

/// The OTLP receiver (tests/it/support/otlp_receiver.py) on a free port, writing to `dir`.
struct Receiver {
    child: Child,
    port: u16,
}

impl Receiver {
    fn start(dir: &TempDir) -> Receiver {
        let python = std::env::var("LLM_FAILOVER_PYTHON").unwrap_or_else(|_| "python3".into());
        let script =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/it/support/otlp_receiver.py");
        let mut child = Command::new(&python)
            .arg(&script)
            .arg(dir.root())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {python} (scripts/test sets up its venv): {e}"));
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        let port = first.trim().parse().unwrap_or_else(|_| {
            panic!("the OTLP receiver did not start (is opentelemetry-proto installed in {python}'s environment? scripts/test installs it): {first:?}")
        });
        Receiver { child, port }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One decoded data point: its metric, unit, attributes and the point itself.
#[derive(Debug)]
struct Point {
    metric: String,
    unit: String,
    kind: &'static str,
    attrs: BTreeMap<String, Value>,
    point: Value,
}

/// The points of the last request the receiver decoded (the exports are cumulative), and its
/// resource's attributes.
fn decoded(dir: &TempDir) -> (Vec<Point>, BTreeMap<String, Value>) {
    let text = std::fs::read_to_string(dir.path("requests.jsonl")).unwrap_or_default();
    let last = text
        .lines()
        .last()
        .expect("the receiver decoded one export at least");
    let request: Value = serde_json::from_str(last).unwrap();
    let mut points = Vec::new();
    let mut resource = BTreeMap::new();
    let attrs = |v: &Value| -> BTreeMap<String, Value> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|kv| {
                let value = kv["value"]
                    .as_object()
                    .and_then(|o| o.values().next().cloned());
                (
                    kv["key"].as_str().unwrap().to_owned(),
                    value.unwrap_or(Value::Null),
                )
            })
            .collect()
    };
    for rm in request["resourceMetrics"].as_array().unwrap() {
        resource.extend(attrs(&rm["resource"]["attributes"]));
        for sm in rm["scopeMetrics"].as_array().unwrap() {
            for m in sm["metrics"].as_array().unwrap() {
                for kind in ["histogram", "sum", "gauge"] {
                    for p in m[kind]["dataPoints"].as_array().into_iter().flatten() {
                        points.push(Point {
                            metric: m["name"].as_str().unwrap().to_owned(),
                            unit: m["unit"].as_str().unwrap_or("").to_owned(),
                            kind,
                            attrs: attrs(&p["attributes"]),
                            point: p.clone(),
                        });
                    }
                }
            }
        }
    }
    (points, resource)
}

/// A histogram point's explicit bucket boundaries.
fn bounds(p: &Point) -> Vec<f64> {
    p.point["explicitBounds"]
        .as_array()
        .unwrap_or_else(|| panic!("{}: no explicitBounds", p.metric))
        .iter()
        .map(number)
        .collect()
}

/// A point's count or value as a number (protobuf's JSON writes 64-bit integers as strings).
fn number(v: &Value) -> f64 {
    match v {
        Value::String(s) => s.parse().unwrap(),
        Value::Number(n) => n.as_f64().unwrap(),
        _ => 0.0,
    }
}

/// The OTLP/HTTP push, decoded with the OpenTelemetry project's protobuf definitions, has the
/// conventions' names, units, boundaries and attributes, and what the emulator saw.
#[test]
fn the_otlp_push_decodes_with_opentelemetry_proto_and_follows_the_conventions() {
    batch_bin(); // built before anything starts
    let run = Run::start("otlp");
    let received = TempDir::new("metrics", "otlp-received");
    let receiver = Receiver::start(&received);
    let endpoint = format!("http://127.0.0.1:{}", receiver.port);
    let out = output_within(
        run.command(
            &[],
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.clone()),
                // Only the export at the end: the run is shorter than this.
                ("OTEL_METRIC_EXPORT_INTERVAL", "600000".to_owned()),
            ],
        ),
        Duration::from_secs(180),
        "llm-failover batch with OTEL_EXPORTER_OTLP_ENDPOINT",
    );
    let stderr = run.check_output(&out);
    assert!(stderr.contains("pushed over OTLP/HTTP"), "{stderr}");
    assert!(!stderr.contains("export failed"), "{stderr}");
    let errors = std::fs::read_to_string(received.path("errors.txt")).unwrap_or_default();
    assert!(
        errors.is_empty(),
        "bodies the receiver could not decode: {errors}"
    );
    let truth = run.truth();
    let (points, resource) = decoded(&received);
    assert_eq!(
        resource.get("service.name"),
        Some(&json!("llm-failover")),
        "{resource:?}"
    );

    let of = |name: &str| -> Vec<&Point> { points.iter().filter(|p| p.metric == name).collect() };
    // gen_ai.client.operation.duration: histogram, s, the advised boundaries; required
    // gen_ai.operation.name and gen_ai.provider.name, error.type on a failure; nothing else
    // than the table's attributes.
    let spec_attrs: BTreeSet<&str> = [
        names::OPERATION_NAME,
        names::PROVIDER_NAME,
        names::REQUEST_MODEL,
        names::RESPONSE_MODEL,
        names::SERVER_ADDRESS,
        names::SERVER_PORT,
        names::ERROR_TYPE,
    ]
    .into();
    let durations = of(names::OPERATION_DURATION);
    assert!(!durations.is_empty(), "{points:?}");
    let mut count = 0.0;
    for p in &durations {
        assert_eq!((p.kind, p.unit.as_str()), ("histogram", "s"));
        assert_eq!(bounds(p), names::DURATION_BUCKETS, "{}", p.metric);
        for a in p.attrs.keys() {
            assert!(spec_attrs.contains(a.as_str()), "{a} is not in the table");
        }
        assert_eq!(p.attrs[names::OPERATION_NAME], "chat");
        let provider = p.attrs[names::PROVIDER_NAME].as_str().unwrap();
        assert!(["openai", "anthropic"].contains(&provider), "{provider}");
        assert_eq!(p.attrs[names::SERVER_ADDRESS], "127.0.0.1");
        assert!(
            number(&p.attrs[names::SERVER_PORT]) > 0.0,
            "server.port is an int"
        );
        if p.attrs.contains_key(names::ERROR_TYPE) {
            assert_eq!(p.attrs[names::ERROR_TYPE], "rate_limited");
            assert!(!p.attrs.contains_key(names::RESPONSE_MODEL));
        } else {
            assert!(p.attrs.contains_key(names::RESPONSE_MODEL));
        }
        count += number(&p.point["count"]);
    }
    assert_eq!(count, truth.requests as f64, "{truth:?}");

    // gen_ai.client.token.usage: histogram, {token}, the advised boundaries, per
    // gen_ai.token.type; the sums are what the emulator's answers reported.
    let mut tokens = [0.0, 0.0];
    for p in of(names::TOKEN_USAGE) {
        assert_eq!((p.kind, p.unit.as_str()), ("histogram", "{token}"));
        assert_eq!(bounds(p), names::TOKEN_BUCKETS);
        let i = match p.attrs[names::TOKEN_TYPE].as_str().unwrap() {
            "input" => 0,
            "output" => 1,
            other => panic!("gen_ai.token.type {other}"),
        };
        tokens[i] += number(&p.point["sum"]);
    }
    assert_eq!(
        tokens,
        [truth.usage[0] as f64, truth.usage[1] as f64],
        "{truth:?}"
    );

    // Ours: the 429s, the failovers, the stated remaining requests, the settlements.
    let total = |name: &str| -> f64 {
        of(name)
            .iter()
            .map(|p| {
                assert_eq!(p.kind, "sum", "{name} is a counter");
                number(&p.point["asInt"])
            })
            .sum()
    };
    assert_eq!(total(names::RATE_LIMITED), SCRIPTED_429S as f64);
    assert_eq!(total(names::FAILOVERS), SCRIPTED_429S as f64);
    assert_eq!(total(names::QUEUE_SETTLEMENTS), ITEMS as f64);
    for (provider, want) in &truth.last_remaining {
        let p = of(names::REMAINING)
            .into_iter()
            .find(|p| {
                p.attrs[names::PROVIDER] == provider.as_str()
                    && p.attrs[names::LIMIT_UNIT] == "requests"
            })
            .unwrap_or_else(|| panic!("no remaining requests for {provider}"));
        assert_eq!(p.kind, "gauge");
        assert_eq!(number(&p.point["asInt"]), *want, "{provider}");
    }

    // The raw bodies: no key, no prompt.
    let raw = std::fs::read(received.path("raw.bin")).unwrap();
    let raw = String::from_utf8_lossy(&raw);
    for (_, key) in KEYS {
        assert!(!raw.contains(key), "a key in an OTLP body");
    }
    assert!(!raw.contains(PROMPT), "a prompt in an OTLP body");
}

/// Nobody scrapes (no Prometheus started): the command waits for a last scrape at most
/// `--metrics-linger-s`, says the last counts were not scraped, and ends with the batch's
/// status — the results are all there. (The linger is the command's own timer in a child
/// process; 1 s here, 60 s by default.)
#[test]
fn with_nobody_scraping_the_command_ends_after_its_linger_and_says_so() {
    batch_bin(); // built before anything starts
    let run = Run::start("unscraped");
    let target = format!("127.0.0.1:{}", free_port());
    let out = output_within(
        run.command(&["--metrics", &target, "--metrics-linger-s", "1"], &[]),
        Duration::from_secs(180),
        "llm-failover batch --metrics, unscraped",
    );
    let stderr = run.check_output(&out);
    assert!(stderr.contains("waiting for a last scrape"), "{stderr}");
    assert!(
        stderr.contains("not scraped since the run ended; its last counts are lost"),
        "{stderr}"
    );
}
