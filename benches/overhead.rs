//! B2 — the SDK's overhead per request.
//!
//! Limits off, an emulator route with no latency. `Client::chat` against a raw reqwest
//! client sending the same JSON body and parsing the same response with serde_json into a
//! small struct (both with the same connect and request timeouts). Concurrency 1 and 64.
//! Segments of fixed length are interleaved — raw, SDK, SDK, raw, … — and medians reported.
//!
//! The emulator runs on its own tokio runtime (threads `emu-w`), the clients on another
//! (`client-w`), so the clients' CPU time per request is read apart from the server's.
//!
//! ```sh
//! cargo bench --bench overhead
//! # A fixed number of requests from one client, for callgrind (instructions per request:
//! # the difference between two request counts, divided by their difference):
//! B2_ONLY=sdk B2_REQUESTS=2000 [B2_PROFILE_CONCURRENCY=64] valgrind --tool=callgrind target/release/deps/overhead-…
//! # Knobs: B2_ROUNDS, B2_SEGMENT_MS, B2_WARMUP_MS, B2_CLIENT_THREADS (client runtime workers, 2),
//! # B2_LEVELS (concurrencies, default 1,64).
//! # A/A control: a second raw client in the SDK's place, to read this method's noise floor.
//! B2_AA=1 cargo bench --bench overhead
//! B2_PRICED=1 cargo bench --bench overhead   # the model has a price: estimated and costed
//! B2_BUDGET=1 cargo bench --bench overhead   # priced, and a day's and a month's budget
//! # Where the overhead lives: a third client, the SDK's OpenAI adapter and transport called
//! # directly (build the request, send, read the limit headers, parse) without the router.
//! B2_LAYERS=1 cargo bench --bench overhead
//! # The sizes of the futures each side's caller holds (and moves) per request, then exit.
//! B2_SIZES=1 cargo bench --bench overhead
//! # The event seam with an observer subscribed (one that counts each event) on the SDK's
//! # client: with B2_ONLY=sdk under callgrind, its instructions per request against without.
//! B2_OBSERVER=1 cargo bench --bench overhead
//! # The same with OpenTelemetry's GenAI metrics recorded (observe::otel, the SDK's meter).
//! B2_METRICS=1 cargo bench --bench overhead
//! # With B2_ONLY under callgrind, B2_METRICS=collect also collects once at the end: the
//! # recordings the request path queued are then made (the SDK's work counted too).
//! ```

mod common;

use std::mem::size_of_val;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::prompts::MODEL;
use common::wire::{WireMessage, WireRequest, WireResponse};
use common::{Table, f, median};
use llm_failover::clock::{Clock, TokioClock};
use llm_failover::http::{HttpTransport, Transport, TransportOptions};
use llm_failover::provider::openai::OpenAi;
use llm_failover::provider::{Provider, RequestContext};
use llm_failover::{ChatRequest, Client, Credential, ProviderId, ProviderSettings};
use llm_failover_emulator::Emulator;
use serde_json::json;

/// Rounds of interleaved segments.
const ROUNDS: usize = 15;
/// Length of one segment (one client at one concurrency).
const SEGMENT_MS: u64 = 600;
/// Warm-up per client and concurrency before the first round.
const WARMUP_MS: u64 = 500;
/// Concurrency levels.
const LEVELS: [usize; 2] = [1, 64];

const SYSTEM: &str = "You are a terse assistant.";
const PROMPT: &str = "Say hello to the benchmark in five words.";
const MAX_TOKENS: u32 = 16;
const TIMEOUT: Duration = Duration::from_secs(60);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Raw,
    Sdk,
    /// `B2_LAYERS`: the SDK's adapter and transport without the router.
    Layers,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Raw => "raw reqwest",
            Side::Sdk => "llm-failover",
            Side::Layers => "adapter + transport, no router",
        }
    }
}

/// The request the SDK and its layers send (the raw client builds the same JSON itself).
fn request() -> ChatRequest {
    ChatRequest::new()
        .system(SYSTEM)
        .user(PROMPT)
        .max_tokens(MAX_TOKENS)
}

/// The SDK's layers below the router, called directly.
#[derive(Clone)]
struct Layers {
    adapter: Arc<OpenAi>,
    transport: HttpTransport,
    credential: Credential,
}

#[derive(Clone)]
struct Clients {
    sdk: Client,
    http: reqwest::Client,
    /// `B2_AA`: a second raw client (its own pool) in the SDK's place — an A/A control whose
    /// ratio shows how far this method reads from 1 for two identical clients.
    control: Option<reqwest::Client>,
    url: Arc<str>,
    key: Arc<str>,
    layers: Layers,
}

impl Clients {
    /// One request; true when it came back as a parsed answer.
    async fn one(&self, side: Side) -> bool {
        match (side, &self.control) {
            (Side::Raw, _) => self.raw(&self.http).await,
            (Side::Sdk, Some(second)) => self.raw(second).await,
            (Side::Sdk, None) => self
                .sdk
                .chat(request())
                .await
                .is_ok_and(|r| !r.text.is_empty()),
            (Side::Layers, _) => self.layers().await,
        }
    }

    /// What one successful attempt does below the router: the adapter builds the request,
    /// the transport sends it and reads the answer, the adapter reads the limit headers and
    /// parses the body. No order, breaker, admission, retry budget, counters or spans.
    async fn layers(&self) -> bool {
        let Layers {
            adapter,
            transport,
            credential,
        } = &self.layers;
        let req = request();
        let ctx = RequestContext::new(MODEL, Some(credential));
        let Ok(http) = adapter.chat_request(&req, &ctx) else {
            return false;
        };
        let Ok(raw) = transport.send(http, TIMEOUT).await else {
            return false;
        };
        std::hint::black_box(adapter.limit_report(&raw.headers, TokioClock.both()));
        adapter
            .chat_response(raw, MODEL)
            .is_ok_and(|r| !r.text.is_empty())
    }

    /// One request from a raw reqwest client.
    async fn raw(&self, http: &reqwest::Client) -> bool {
        let body = serde_json::to_vec(&WireRequest {
            model: MODEL,
            messages: &[
                WireMessage {
                    role: "system",
                    content: SYSTEM,
                },
                WireMessage {
                    role: "user",
                    content: PROMPT,
                },
            ],
            max_tokens: Some(MAX_TOKENS),
        })
        .expect("JSON");
        let Ok(resp) = http
            .post(&*self.url)
            .bearer_auth(&*self.key)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
        else {
            return false;
        };
        if resp.status() != 200 {
            return false;
        }
        let Ok(bytes) = resp.bytes().await else {
            return false;
        };
        serde_json::from_slice::<WireResponse>(&bytes).is_ok_and(|r| {
            r.text().is_some_and(|t| !t.is_empty())
                && r.usage
                    .is_some_and(|u| u.prompt_tokens + u.completion_tokens > 0)
        })
    }
}

/// What one segment measured.
struct Measured {
    ok: u64,
    failed: u64,
    wall: Duration,
    /// CPU time of the client runtime's threads.
    client_cpu: Duration,
    /// CPU time of the whole process (client, emulator, everything).
    process_cpu: Duration,
}

/// One segment: `concurrency` loops for `length`.
async fn segment(c: &Clients, side: Side, concurrency: usize, length: Duration) -> Measured {
    let ok = Arc::new(AtomicU64::new(0));
    let bad = Arc::new(AtomicU64::new(0));
    let cpu0 = common::cpu_time(Some("client-"));
    let all0 = common::cpu_time(None);
    let t0 = common::wall();
    let deadline = t0 + length;
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (c, ok, bad) = (c.clone(), ok.clone(), bad.clone());
        set.spawn(async move {
            while common::wall() < deadline {
                let counter = if c.one(side).await { &ok } else { &bad };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    while set.join_next().await.is_some() {}
    Measured {
        ok: ok.load(Ordering::Relaxed),
        failed: bad.load(Ordering::Relaxed),
        wall: t0.elapsed(),
        client_cpu: common::cpu_time(Some("client-")).saturating_sub(cpu0),
        process_cpu: common::cpu_time(None).saturating_sub(all0),
    }
}

fn main() {
    let machine = common::machine();
    machine.print("overhead (B2)");
    let rounds = common::env_or("B2_ROUNDS", ROUNDS);
    let segment_len = Duration::from_millis(common::env_or("B2_SEGMENT_MS", SEGMENT_MS));
    let warmup = Duration::from_millis(common::env_or("B2_WARMUP_MS", WARMUP_MS));
    let emu_rt = common::runtime("emu", 2);
    let client_rt = common::runtime("client", common::env_or("B2_CLIENT_THREADS", 2));
    let emu = emu_rt
        .block_on(Emulator::builder().openai("openai").start())
        .expect("the emulator starts");
    let base = emu.base_url("openai");
    let clients = client_rt.block_on(async {
        let adapter = OpenAi::new(ProviderId::new("openai"), base.parse().expect("a URL"))
            .with_chat_model(MODEL);
        let mut settings = ProviderSettings::new().credential(Credential::new(emu.key("openai")));
        let budget = std::env::var_os("B2_BUDGET").is_some();
        if budget || std::env::var_os("B2_PRICED").is_some() {
            // The model priced: each request estimated (its bound) and costed.
            settings = settings.price(
                MODEL,
                llm_failover::price::Price::per_million_tokens(0.15, 0.60),
            );
        }
        let mut sdk = Client::builder().provider(Arc::new(adapter), settings);
        if budget {
            // A day's and a month's budget no request reaches: each request's estimate is
            // reserved with its buckets and settled with its cost (two ledgers).
            sdk = sdk.budget(llm_failover::budget::Budget::usd_per_day(1e6).and_usd_per_month(1e7));
        }
        if std::env::var_os("B2_OBSERVER").is_some() {
            // An observer that counts every event, as a metrics subscriber does at least.
            sdk = sdk.observer(Arc::new(Counting::default()));
        }
        if std::env::var_os("B2_METRICS").is_some() {
            // OpenTelemetry's metrics on, as an application installs them: the SDK's meter
            // provider, its periodic reader into an in-memory exporter (every 60 s: the
            // recording on the request path is what is measured).
            use opentelemetry::metrics::MeterProvider as _;
            use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader};
            let provider = opentelemetry_sdk::metrics::SdkMeterProvider::builder()
                .with_reader(PeriodicReader::builder(InMemoryMetricExporter::default()).build())
                .build();
            let meter = provider.meter("b2");
            sdk = sdk.observer(Arc::new(llm_failover::observe::otel::GenAiMetrics::new(
                &meter,
            )));
            // Kept, so that the profiling run can collect once at its end
            // (`B2_METRICS=collect`): the SDK's recording work is then counted too.
            let _ = METRICS.set(provider);
        }
        let sdk = sdk.build().expect("the client builds");
        let raw = || {
            reqwest::Client::builder()
                .connect_timeout(CONNECT_TIMEOUT)
                .timeout(TIMEOUT)
                .build()
                .expect("reqwest builds")
        };
        Clients {
            sdk,
            http: raw(),
            control: std::env::var_os("B2_AA").map(|_| raw()),
            url: format!("{base}/chat/completions").into(),
            key: emu.key("openai").into(),
            layers: {
                // The transport as the client builds it: the usual timeout on the client.
                let mut opts = TransportOptions::default();
                opts.connect_timeout = CONNECT_TIMEOUT;
                opts.usual_timeout = Some(TIMEOUT);
                Layers {
                    adapter: Arc::new(
                        OpenAi::new(ProviderId::new("openai"), base.parse().expect("a URL"))
                            .with_chat_model(MODEL),
                    ),
                    transport: HttpTransport::new(&opts).expect("the transport builds"),
                    credential: Credential::new(emu.key("openai")),
                }
            },
        }
    });

    if std::env::var_os("B2_SIZES").is_some() {
        let _runtime = client_rt.enter();
        print_sizes(&clients);
        return;
    }
    // Profiling mode: a fixed number of requests from one client (`B2_PROFILE_CONCURRENCY`
    // loops, default 1), no table.
    if let Ok(only) = std::env::var("B2_ONLY") {
        let side = match only.as_str() {
            "raw" => Side::Raw,
            "layers" => Side::Layers,
            _ => Side::Sdk,
        };
        let n: u64 = common::env_or("B2_REQUESTS", 2_000);
        let loops: u64 = common::env_or("B2_PROFILE_CONCURRENCY", 1);
        let ok = client_rt.block_on(async {
            let mut set = tokio::task::JoinSet::new();
            for _ in 0..loops {
                let c = clients.clone();
                set.spawn(async move {
                    let mut ok = 0;
                    for _ in 0..n / loops {
                        ok += u64::from(c.one(side).await);
                    }
                    ok
                });
            }
            let mut ok = 0;
            while let Some(r) = set.join_next().await {
                ok += r.expect("a loop");
            }
            ok
        });
        println!("{}: {ok}/{n} answered", side.name());
        if std::env::var("B2_METRICS").as_deref() == Ok("collect")
            && let Some(provider) = METRICS.get()
        {
            provider.force_flush().expect("the metrics are collected");
        }
        return;
    }

    let layers = std::env::var_os("B2_LAYERS").is_some();
    let sides: &[Side] = if layers {
        &[Side::Raw, Side::Sdk, Side::Layers]
    } else {
        &[Side::Raw, Side::Sdk]
    };
    // `B2_LEVELS=64`: one level only (more rounds in the same time).
    let levels: Vec<usize> = std::env::var("B2_LEVELS")
        .map(|v| {
            v.split(',')
                .map(|l| {
                    l.trim()
                        .parse()
                        .expect("B2_LEVELS: comma-separated concurrencies")
                })
                .collect()
        })
        .unwrap_or_else(|_| LEVELS.to_vec());
    for &level in &levels {
        for &side in sides {
            client_rt.block_on(segment(&clients, side, level, warmup));
        }
    }
    // (level, side) → per segment: requests/s, client CPU µs and process CPU µs per request.
    let mut runs: Vec<Vec<Runs>> = vec![vec![Runs::default(); 3]; levels.len()];
    let mut failures = 0;
    for round in 0..rounds {
        for (li, &level) in levels.iter().enumerate() {
            // Every side first in turn, and the order reversed every other round (ABBA for
            // two sides).
            let mut order = sides.to_vec();
            order.rotate_left(round / 2 % sides.len());
            if round % 2 == 1 {
                order.reverse();
            }
            for side in order {
                let m = client_rt.block_on(segment(&clients, side, level, segment_len));
                failures += m.failed;
                let per = |d: Duration| d.as_secs_f64() * 1e6 / m.ok.max(1) as f64;
                let r = &mut runs[li][side as usize];
                r.rps.push(m.ok as f64 / m.wall.as_secs_f64());
                r.cpu_us.push(per(m.client_cpu));
                r.all_us.push(per(m.process_cpu));
            }
        }
    }
    let aa = clients.control.is_some();
    drop(clients);
    emu_rt.block_on(emu.shutdown());

    println!(
        "{rounds} rounds of {} ms segments per client and level, interleaved; medians; {failures} failed requests",
        segment_len.as_millis()
    );
    if aa {
        println!("A/A CONTROL (B2_AA): the \"SDK\" columns are a second raw reqwest client");
    }
    let (table, rows) = compare(&levels, &runs, Side::Raw, Side::Sdk, "raw", "SDK");
    table.print();
    let mut record = json!({"rounds": rounds, "segment_ms": segment_len.as_millis() as u64, "failures": failures, "aa_control": aa, "levels": rows});
    if layers {
        println!(
            "\nthe SDK's adapter and transport without the router (\"layers\"), against raw reqwest:"
        );
        let (table, below) = compare(&levels, &runs, Side::Raw, Side::Layers, "raw", "layers");
        table.print();
        println!("\nthe whole SDK against its layers without the router (what the router costs):");
        let (table, router) = compare(&levels, &runs, Side::Layers, Side::Sdk, "layers", "SDK");
        table.print();
        record["layers_vs_raw"] = json!(below);
        record["sdk_vs_layers"] = json!(router);
    }
    common::record("overhead", &machine, record);
}

/// `B2_SIZES`: how many bytes each side's request future is as its caller holds it — what a
/// caller writes into its own state (and copies, each time the future is moved) per request.
/// Nothing is polled.
fn print_sizes(c: &Clients) {
    let req = request();
    let ctx = RequestContext::new(MODEL, Some(&c.layers.credential));
    let http = c
        .layers
        .adapter
        .chat_request(&req, &ctx)
        .expect("the request builds");
    let exchange = llm_failover::provider::chat_once(
        &*c.layers.adapter,
        &c.layers.transport,
        &req,
        ctx,
        TIMEOUT,
        || TokioClock.both(),
    );
    let mut t = Table::new(["future", "bytes"]);
    for (what, bytes) in [
        (
            "Client::chat (the SDK)",
            size_of_val(&c.sdk.chat(request())),
        ),
        (
            "raw reqwest request (the baseline)",
            size_of_val(&c.raw(&c.http)),
        ),
        ("adapter + transport (B2_LAYERS)", size_of_val(&c.layers())),
        ("provider::chat_once (one attempt)", size_of_val(&exchange)),
        (
            "http::Transport::send",
            size_of_val(&c.layers.transport.send(http, TIMEOUT)),
        ),
        (
            "reqwest RequestBuilder::send",
            size_of_val(&c.http.post(&*c.url).send()),
        ),
    ] {
        t.row([what.to_owned(), bytes.to_string()]);
    }
    t.print();
}

/// What the segments of one side at one level measured.
#[derive(Clone, Default)]
struct Runs {
    rps: Vec<f64>,
    cpu_us: Vec<f64>,
    all_us: Vec<f64>,
}

/// `other` against `base` at each level: a table and its JSON rows.
fn compare(
    levels: &[usize],
    runs: &[Vec<Runs>],
    base: Side,
    other: Side,
    b: &str,
    o: &str,
) -> (Table, Vec<serde_json::Value>) {
    let mut t = Table::new([
        "concurrency".to_owned(),
        format!("{b} req/s"),
        format!("{o} req/s"),
        format!("ratio {o}/{b}"),
        "added µs/req (wall)".to_owned(),
        format!("{b} client CPU µs/req"),
        format!("{o} client CPU µs/req"),
        "added CPU µs/req".to_owned(),
        format!("process CPU µs/req {b}/{o}"),
        "CPU ratio".to_owned(),
        "ratio range".to_owned(),
    ]);
    let mut rows = Vec::new();
    for (li, &level) in levels.iter().enumerate() {
        let (x, y) = (&runs[li][base as usize], &runs[li][other as usize]);
        let (raw, sdk) = (median(&x.rps), median(&y.rps));
        let ratios: Vec<f64> = x.rps.iter().zip(&y.rps).map(|(r, s)| s / r).collect();
        let ratio = median(&ratios);
        // At concurrency 1 this is the latency added to each request; at 64, the machine time
        // added per request (the run is CPU-bound on two cores).
        let added_wall = (1.0 / sdk - 1.0 / raw) * 1e6;
        let (raw_cpu, sdk_cpu) = (median(&x.cpu_us), median(&y.cpu_us));
        // Requests per CPU-second of the whole process, other over base: the throughput ratio
        // a CPU-bound run would show, and much less sensitive to other processes than wall time.
        let (raw_all, sdk_all) = (median(&x.all_us), median(&y.all_us));
        let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        t.row([
            level.to_string(),
            f(raw, 0),
            f(sdk, 0),
            f(ratio, 3),
            f(added_wall, 1),
            f(raw_cpu, 1),
            f(sdk_cpu, 1),
            f(sdk_cpu - raw_cpu, 1),
            format!("{}/{}", f(raw_all, 1), f(sdk_all, 1)),
            f(raw_all / sdk_all, 3),
            format!("{}–{}", f(lo, 3), f(hi, 3)),
        ]);
        rows.push(json!({
            "concurrency": level, "raw_rps": raw, "sdk_rps": sdk, "ratio": ratio,
            "ratios": ratios, "added_us_wall": added_wall, "raw_cpu_us": raw_cpu,
            "sdk_cpu_us": sdk_cpu, "raw_process_cpu_us": raw_all,
            "sdk_process_cpu_us": sdk_all, "cpu_ratio": raw_all / sdk_all, "raw_rps_runs": x.rps, "sdk_rps_runs": y.rps,
        }));
    }
    (t, rows)
}

/// The meter provider of `B2_METRICS`.
static METRICS: std::sync::OnceLock<opentelemetry_sdk::metrics::SdkMeterProvider> =
    std::sync::OnceLock::new();

/// `B2_OBSERVER`: an observer added to the SDK's client that counts each event it is told
/// (one relaxed atomic add per event, by its kind): the event seam's cost to an application
/// that subscribes.
#[derive(Debug, Default)]
struct Counting([AtomicU64; 4]);

impl llm_failover::observe::Observer for Counting {
    fn observe(&self, event: &llm_failover::observe::Event<'_>) {
        use llm_failover::observe::Event;
        let i = match event {
            Event::Sent(_) => 0,
            Event::AttemptEnded(_) => 1,
            Event::RequestEnded(_) => 2,
            _ => 3,
        };
        self.0[i].fetch_add(1, Ordering::Relaxed);
    }
}
