//! B1 embeddings — an embedding batch of 10,000 inputs against a stated token limit.
//!
//! One OpenAI-format provider on the emulator enforcing TPM 150,000 (RPM 10,000, which does
//! not bind), stated in OpenAI's headers; the emulator charges each input `ceil(chars / 4)`
//! tokens and states them as the answer's usage, as OpenAI does. The emulator and the client
//! share one `FastClock` running 10× faster than real time.
//!
//! The inputs: 10,000 deterministic English-like texts of 8 to 80 words (about 60 tokens
//! each, some 600,000 tokens in all: four windows of the limit). Workers (16) take the next
//! `B1_EMBED_PER_REQUEST` inputs (default 16; 1 sends one request per input) and embed them
//! in one request through `Client::embed` — the same router, admission, limits and failover
//! as chat.
//!
//! Clients, one after the other, each against a fresh emulator and clock:
//!
//! - (a) llm-failover, no limits configured: learned from the response headers;
//! - (b) llm-failover, TPM and RPM configured.
//!
//! Measures: *steady TPM %*, tokens the server charged for answered requests per minute from
//! the end of the first minute (whose full bucket any client gets) to the last answer, as % of
//! TPM; *whole run, % of admissible*, every token served ÷ (the bucket's capacity + TPM × the
//! run's length); the 429s the emulator answered, and their share of the requests.
//!
//! ```sh
//! cargo bench --bench embeddings
//! B1_EMBED_PER_REQUEST=1 cargo bench --bench embeddings   # one request per input
//! ```

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Table, f};
use llm_failover::clock::{Clock, FastClock};
use llm_failover::config::Policy;
use llm_failover::provider::openai::OpenAi;
use llm_failover::rng::SeededRng;
use llm_failover::{Client, Credential, EmbeddingRequest, Limits, ProviderId, ProviderSettings};
use llm_failover_emulator::{Emulator, LogEntry, ProviderConfig, TimeSource};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

/// How much faster than real time both sides' clock runs.
const FACTOR: f64 = 10.0;
/// The stated token limit per minute.
const TPM: u64 = 150_000;
/// Requests per minute: stated, not binding.
const RPM: u64 = 10_000;
const INPUTS: usize = 10_000;
const CONCURRENCY: usize = 16;
/// Longest real time one client may take.
const MAX_WALL_S: u64 = 180;
const MODEL: &str = "text-embedding-3-small";
const WINDOW: Duration = Duration::from_secs(60);

const WORDS: [&str; 24] = [
    "the",
    "quarterly",
    "report",
    "shows",
    "revenue",
    "growth",
    "in",
    "every",
    "region",
    "customer",
    "support",
    "tickets",
    "about",
    "billing",
    "were",
    "resolved",
    "within",
    "two",
    "days",
    "while",
    "shipping",
    "delays",
    "affected",
    "orders",
];

/// The deterministic inputs.
fn inputs() -> Vec<String> {
    let mut rng = SmallRng::seed_from_u64(0xe3bed);
    (0..INPUTS)
        .map(|i| {
            let n = rng.random_range(8..=80);
            let mut text = format!("Document {i}:");
            for _ in 0..n {
                text.push(' ');
                text.push_str(WORDS[rng.random_range(0..WORDS.len())]);
            }
            text
        })
        .collect()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Learned,
    Configured,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Learned => "(a) llm-failover, limits from headers",
            Side::Configured => "(b) llm-failover, limits configured",
        }
    }
}

struct Figures {
    ok: usize,
    failed: usize,
    requests: usize,
    limited: usize,
    steady_pct: f64,
    whole_pct: f64,
    virtual_s: f64,
    cut_short: bool,
}

fn main() {
    let machine = common::machine();
    machine.print("embeddings");
    let per_request: usize = common::env_or("B1_EMBED_PER_REQUEST", 16);
    let rt = common::runtime("embeddings", 2);
    let texts = Arc::new(inputs());
    let chars: usize = texts.iter().map(|t| t.chars().count()).sum();
    println!(
        "{INPUTS} inputs, {per_request} per request, {} tokens as the server counts them \
         (characters / 4); TPM {TPM}, RPM {RPM}, concurrency {CONCURRENCY}, clock ×{FACTOR}",
        chars.div_ceil(4)
    );
    let mut table = Table::new([
        "client",
        "inputs ok/items",
        "failed",
        "steady TPM %",
        "whole run, % of admissible",
        "requests",
        "429s",
        "429 %",
        "virtual s",
    ]);
    let mut runs = Vec::new();
    for side in [Side::Learned, Side::Configured] {
        let fig = rt.block_on(run(side, &texts, per_request));
        let pct = 100.0 * fig.limited as f64 / fig.requests.max(1) as f64;
        table.row([
            side.name().to_owned(),
            format!(
                "{}/{INPUTS}{}",
                fig.ok,
                if fig.cut_short { " (cut)" } else { "" }
            ),
            fig.failed.to_string(),
            f(fig.steady_pct, 1),
            f(fig.whole_pct, 1),
            fig.requests.to_string(),
            fig.limited.to_string(),
            f(pct, 2),
            f(fig.virtual_s, 0),
        ]);
        runs.push(json!({
            "client": side.name(), "per_request": per_request, "ok": fig.ok,
            "failed": fig.failed, "steady_pct": fig.steady_pct, "whole_pct": fig.whole_pct,
            "requests": fig.requests, "limited": fig.limited, "limited_pct": pct,
            "virtual_s": fig.virtual_s, "cut_short": fig.cut_short,
        }));
    }
    table.print();
    common::record("embeddings", &machine, json!({ "runs": runs }));
}

async fn run(side: Side, texts: &Arc<Vec<String>>, per_request: usize) -> Figures {
    let clock = FastClock::new(FACTOR);
    let emu = Emulator::builder()
        .provider(
            ProviderConfig::openai("openai")
                .with_limits(llm_failover_emulator::Limits::per_minute(RPM, TPM)),
        )
        .time_source(TimeSource::new(move || (clock.now(), clock.wall())))
        .start()
        .await
        .expect("the emulator starts");
    let client = client(&emu, side, clock);
    let next = Arc::new(AtomicUsize::new(0));
    let results = Arc::new(Mutex::new((0usize, 0usize)));
    let start = clock.now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENCY {
        let (next, results, client, texts) =
            (next.clone(), results.clone(), client.clone(), texts.clone());
        workers.spawn(async move {
            loop {
                let from = next.fetch_add(per_request, Ordering::Relaxed);
                if from >= texts.len() {
                    break;
                }
                let chunk = &texts[from..(from + per_request).min(texts.len())];
                let req = EmbeddingRequest::many(chunk.iter().cloned()).model(MODEL);
                let ok = client
                    .embed(&req)
                    .await
                    .is_ok_and(|a| a.vectors.len() == chunk.len());
                let mut r = results.lock().expect("results");
                if ok {
                    r.0 += chunk.len();
                } else {
                    r.1 += chunk.len();
                }
            }
        });
    }
    let done = tokio::time::timeout(Duration::from_secs(MAX_WALL_S), async {
        while workers.join_next().await.is_some() {}
    })
    .await;
    workers.abort_all();
    let end = clock.now() - start;
    let log = emu.log();
    emu.shutdown().await;
    let (ok, failed) = *results.lock().expect("results");
    let served: u64 = log
        .iter()
        .filter(|e| e.status == Some(200))
        .map(|e| e.tokens)
        .sum();
    let admissible = TPM as f64 * (1.0 + end.as_secs_f64() / WINDOW.as_secs_f64());
    Figures {
        ok,
        failed,
        requests: log.len(),
        limited: log.iter().filter(|e| e.status == Some(429)).count(),
        steady_pct: steady(&log),
        whole_pct: 100.0 * served as f64 / admissible,
        virtual_s: end.as_secs_f64(),
        cut_short: done.is_err(),
    }
}

/// Tokens charged for answered requests per window after the first, as % of TPM.
fn steady(log: &[LogEntry]) -> f64 {
    let from = WINDOW.as_millis() as u64;
    let ok: Vec<&LogEntry> = log
        .iter()
        .filter(|e| e.status == Some(200) && e.at_ms > from)
        .collect();
    let last = ok.iter().map(|e| e.at_ms).max().unwrap_or(from);
    let windows = (last - from) as f64 / from as f64;
    if windows < 0.5 {
        return f64::NAN;
    }
    let used: u64 = ok.iter().map(|e| e.tokens).sum();
    100.0 * used as f64 / (TPM as f64 * windows)
}

fn client(emu: &Emulator, side: Side, clock: FastClock) -> Client {
    let mut p = Policy::default();
    // A batch's deadline: an item waits as long as the provider makes it.
    p.deadline = Duration::from_secs(3_600);
    p.request_timeout = Duration::from_secs(30);
    p.latency_allowance = Duration::from_millis(200).mul_f64(FACTOR);
    let adapter = OpenAi::new(
        ProviderId::new("openai"),
        emu.base_url("openai").parse().expect("a URL"),
    )
    .with_embedding_model(MODEL);
    let mut settings = ProviderSettings::new().credential(Credential::new(emu.key("openai")));
    if side == Side::Configured {
        settings = settings.limits(Limits::none().with_rpm(RPM).with_tpm(TPM));
    }
    Client::builder()
        .clock(Arc::new(clock))
        .rng(Arc::new(SeededRng::new(1)))
        .policy(p)
        .provider(Arc::new(adapter), settings)
        .build()
        .expect("the client builds")
}
