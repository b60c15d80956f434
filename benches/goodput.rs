//! B1 — goodput under stated limits.
//!
//! The emulator enforces RPM and TPM on one OpenAI-format provider. Four clients send the same
//! mixed prompt set (several windows' worth of tokens), one after the other, each against a
//! fresh emulator, at the same fixed concurrency:
//!
//! - (a) llm-failover, limits learned from the response headers only;
//! - (b) llm-failover, limits configured;
//! - (c) a retry-only client: plain reqwest, honours `Retry-After`, keeps no buckets;
//! - (d) fixed concurrency with exponential backoff (full jitter), ignoring every header.
//!
//! Client and emulator share one `FastClock` running `B1_FACTOR` times faster than real time,
//! so a 60 s "minute" lasts 60 / factor real seconds on both sides. Every figure but the wall
//! time is in that virtual time. Real scheduling jitter is stretched by the factor, so the
//! SDK clients' `latency_allowance` is `B1_ALLOWANCE_REAL_MS` of real time × factor.
//!
//! ```sh
//! cargo bench --bench goodput                    # defaults below
//! B1_RUNS=3 cargo bench --bench goodput          # medians over three runs
//! ```

#[path = "goodput/baseline.rs"]
mod baseline;
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::prompts::{self, Item, MODEL};
use common::{Table, f, percentile};
use llm_failover::clock::{Clock, FastClock};
use llm_failover::config::{Limits, Policy};
use llm_failover::provider::openai::OpenAi;
use llm_failover::rng::SeededRng;
use llm_failover::{Client, Credential, ProviderId, ProviderSettings};
use llm_failover_emulator::{Emulator, EmulatorConfig, LogEntry, ProviderConfig, TimeSource};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use serde::Serialize;
use serde_json::json;

/// How much faster than real time both sides' clock runs.
const FACTOR: f64 = 10.0;
/// Stated requests per minute.
const RPM: u64 = 1_000;
/// Stated tokens per minute (the binding limit for this prompt mix).
const TPM: u64 = 100_000;
/// The prompt set's server-side cost, in windows of TPM (the first window is the full bucket).
const WINDOWS: f64 = 4.0;
/// Requests in flight per client.
const CONCURRENCY: usize = 32;
/// Real scheduling jitter the SDK's latency allowance covers (× FACTOR on the virtual clock).
const ALLOWANCE_REAL_MS: u64 = 200;
/// Runs (medians are reported when more than one).
const RUNS: usize = 1;
/// The prompt set's seed.
const SEED: u64 = 1;
/// Longest real time one client may take before it is stopped and reported as cut short.
const MAX_WALL_S: u64 = 60;
/// Output tokens the emulator answers on average (8 to 47 words, one token each).
const MEAN_OUTPUT: u64 = 28;

#[derive(Clone, Copy, Debug)]
struct Knobs {
    factor: f64,
    rpm: u64,
    tpm: u64,
    windows: f64,
    concurrency: usize,
    allowance_real_ms: u64,
    runs: usize,
    seed: u64,
    max_wall: Duration,
}

impl Knobs {
    fn from_env() -> Self {
        Knobs {
            factor: common::env_or("B1_FACTOR", FACTOR),
            rpm: common::env_or("B1_RPM", RPM),
            tpm: common::env_or("B1_TPM", TPM),
            windows: common::env_or("B1_WINDOWS", WINDOWS),
            concurrency: common::env_or("B1_CONCURRENCY", CONCURRENCY),
            allowance_real_ms: common::env_or("B1_ALLOWANCE_REAL_MS", ALLOWANCE_REAL_MS),
            runs: common::env_or("B1_RUNS", RUNS),
            seed: common::env_or("B1_SEED", SEED),
            max_wall: Duration::from_secs(common::env_or("B1_MAX_WALL_S", MAX_WALL_S)),
        }
    }

    /// The virtual latency allowance.
    fn allowance(&self) -> Duration {
        Duration::from_millis(self.allowance_real_ms).mul_f64(self.factor)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Contender {
    Learned,
    Configured,
    RetryAfter,
    Backoff,
}

impl Contender {
    const ALL: [Contender; 4] = [
        Contender::Learned,
        Contender::Configured,
        Contender::RetryAfter,
        Contender::Backoff,
    ];

    fn name(self) -> &'static str {
        match self {
            Contender::Learned => "(a) llm-failover, limits from headers",
            Contender::Configured => "(b) llm-failover, limits configured",
            Contender::RetryAfter => "(c) retry-only, honours Retry-After",
            Contender::Backoff => "(d) exp. backoff, ignores headers",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Contender::Learned => "a",
            Contender::Configured => "b",
            Contender::RetryAfter => "c",
            Contender::Backoff => "d",
        }
    }
}

/// One item's fate, in virtual time since the run started.
#[derive(Clone, Copy, Debug)]
struct Outcome {
    latency: Duration,
    ok: bool,
}

/// One contender's figures in one run.
#[derive(Clone, Debug, Serialize)]
struct Figures {
    client: &'static str,
    items: usize,
    ok: usize,
    failed: usize,
    cut_short: bool,
    requests: u64,
    rate_limited: u64,
    rate_limited_first_minute: u64,
    rate_limited_pct: f64,
    /// Virtual seconds from the start to the last item's end.
    duration_s: f64,
    tokens: u64,
    /// Whole run: tokens per minute as % of TPM (the full bucket at the start included).
    whole_tpm_pct: f64,
    whole_rpm_pct: f64,
    /// Whole run: tokens as % of what the server could admit over the run (capacity +
    /// refill × duration): the initial burst counted honestly.
    whole_of_admissible_pct: f64,
    /// From the end of the first minute to the last success: % of TPM / RPM.
    steady_tpm_pct: f64,
    steady_rpm_pct: f64,
    /// Tokens served per virtual minute, % of TPM.
    per_minute_pct: Vec<f64>,
    /// The server's token bucket replayed from its log: its mean level from the end of the
    /// first minute to the last success, % of TPM (capacity the client left unused).
    headroom_pct: f64,
    mean_s: f64,
    p50_s: f64,
    p99_s: f64,
    wall_s: f64,
}

fn main() {
    let knobs = Knobs::from_env();
    let machine = common::machine();
    machine.print("goodput (B1)");
    let items = Arc::new(prompt_set(&knobs));
    let cost: u64 = items.iter().map(Item::server_cost).sum();
    println!(
        "{} items, {} tokens of server-side reservation (ceil(chars/4) + max_tokens), about {:.1} windows of TPM {} in answered tokens; RPM {}, concurrency {}, clock {}x, latency allowance {:.1} s virtual",
        items.len(),
        cost,
        knobs.windows,
        knobs.tpm,
        knobs.rpm,
        knobs.concurrency,
        knobs.factor,
        knobs.allowance().as_secs_f64()
    );
    let rt = common::runtime("bench", 2);
    let mut all: Vec<Vec<Figures>> = Vec::new();
    for run in 1..=knobs.runs {
        let mut figures = Vec::new();
        for c in Contender::ALL {
            let fig = rt.block_on(run_one(c, &knobs, items.clone()));
            figures.push(fig);
        }
        println!("\nrun {run}/{}:", knobs.runs);
        print_tables(&figures, &knobs);
        common::record(
            "goodput",
            &machine,
            json!({"run": run, "knobs": format!("{knobs:?}"), "figures": figures}),
        );
        all.push(figures);
    }
    if knobs.runs > 1 {
        println!("\nmedians over {} runs:", knobs.runs);
        let med: Vec<Figures> = (0..Contender::ALL.len())
            .map(|i| median_figures(&all.iter().map(|r| r[i].clone()).collect::<Vec<_>>()))
            .collect();
        print_tables(&med, &knobs);
    }
}

/// Items whose expected answered tokens add up to `windows` × TPM.
fn prompt_set(k: &Knobs) -> Vec<Item> {
    let target = (k.windows * k.tpm as f64) as u64;
    let mut out = Vec::new();
    let mut total = 0;
    let mut i = 0;
    while total < target {
        let item = prompts::item(k.seed, i);
        total += llm_failover_emulator::text::estimate_tokens(item.chars()) + MEAN_OUTPUT;
        out.push(item);
        i += 1;
    }
    out
}

async fn run_one(c: Contender, k: &Knobs, items: Arc<Vec<Item>>) -> Figures {
    let clock = FastClock::new(k.factor);
    let mut cfg = EmulatorConfig::default();
    cfg.log_capacity = 1 << 21;
    let emu = Emulator::builder()
        .config(cfg)
        .provider(
            ProviderConfig::openai("openai")
                .with_limits(llm_failover_emulator::Limits::per_minute(k.rpm, k.tpm)),
        )
        .time_source(TimeSource::new(move || (clock.now(), clock.wall())))
        .start()
        .await
        .expect("the emulator starts");
    let start = clock.now();
    let wall0 = common::wall();
    let next = Arc::new(AtomicUsize::new(0));
    let outcomes = Arc::new(Mutex::new(Vec::with_capacity(items.len())));
    let mut workers = tokio::task::JoinSet::new();
    let sdk = match c {
        Contender::Learned => Some(sdk_client(&emu, clock, k, Limits::none())),
        Contender::Configured => Some(sdk_client(
            &emu,
            clock,
            k,
            Limits::none().with_rpm(k.rpm).with_tpm(k.tpm),
        )),
        _ => None,
    };
    let http = reqwest::Client::new();
    let url = format!("{}/chat/completions", emu.base_url("openai"));
    let key = emu.key("openai").to_owned();
    for w in 0..k.concurrency {
        let (items, next, outcomes) = (items.clone(), next.clone(), outcomes.clone());
        let (sdk, http, url, key) = (sdk.clone(), http.clone(), url.clone(), key.clone());
        let mut rng = SmallRng::seed_from_u64(k.seed ^ (w as u64 + 1));
        workers.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { return };
                let t = clock.now();
                let ok = match &sdk {
                    Some(client) => client.chat(item.request.clone()).await.is_ok(),
                    None => baseline::raw_item(&http, &url, &key, item, &clock, c, &mut rng).await,
                };
                let o = Outcome {
                    latency: clock.now() - t,
                    ok,
                };
                outcomes.lock().expect("outcomes").push(o);
            }
        });
    }
    let tracer = match (sdk.clone(), std::env::var("B1_TRACE")) {
        // Diagnostics: the client's view of its token bucket, every 5 virtual seconds.
        (Some(client), Ok(_)) => Some(tokio::spawn(async move {
            loop {
                if let Ok(Some(s)) = client.limits("openai", MODEL).await {
                    eprintln!(
                        "trace t={:.1}s tokens={:?} requests={:?} wait={:?}",
                        (clock.now() - start).as_secs_f64(),
                        s.tokens,
                        s.requests,
                        s.wait
                    );
                }
                clock
                    .sleep_until(clock.now() + Duration::from_secs(5))
                    .await;
            }
        })),
        _ => None,
    };
    let done = tokio::time::timeout(k.max_wall, async {
        while workers.join_next().await.is_some() {}
    })
    .await;
    let cut_short = done.is_err();
    workers.abort_all();
    if let Some(t) = tracer {
        t.abort();
    }
    let end = clock.now() - start;
    let wall = wall0.elapsed();
    let outcomes = outcomes.lock().expect("outcomes").clone();
    let log = emu.log();
    emu.shutdown().await;
    if let Ok(dir) = std::env::var("B1_DUMP") {
        // The emulator's request log of this contender, for offline analysis.
        let lines: Vec<String> = log
            .iter()
            .map(|e| serde_json::to_string(e).expect("JSON"))
            .collect();
        let path = std::path::Path::new(&dir).join(format!("goodput-log-{}.jsonl", c.tag()));
        if let Err(e) = std::fs::write(&path, lines.join("\n")) {
            eprintln!("could not write {}: {e}", path.display());
        }
    }
    figures(c, k, items.len(), &outcomes, &log, end, wall, cut_short)
}

fn sdk_client(emu: &Emulator, clock: FastClock, k: &Knobs, limits: Limits) -> Client {
    let mut p = Policy::default();
    p.deadline = Duration::from_secs(3600);
    p.request_timeout = Duration::from_secs(30);
    p.latency_allowance = k.allowance();
    let adapter = OpenAi::new(
        ProviderId::new("openai"),
        emu.base_url("openai").parse().expect("a URL"),
    )
    .with_chat_model(MODEL);
    Client::builder()
        .clock(Arc::new(clock))
        .rng(Arc::new(SeededRng::new(k.seed)))
        .policy(p)
        .provider(
            Arc::new(adapter),
            ProviderSettings::new()
                .credential(Credential::new(emu.key("openai")))
                .limits(limits),
        )
        .build()
        .expect("the client builds")
}

#[allow(clippy::too_many_arguments)]
fn figures(
    c: Contender,
    k: &Knobs,
    items: usize,
    outcomes: &[Outcome],
    log: &[LogEntry],
    end: Duration,
    wall: Duration,
    cut_short: bool,
) -> Figures {
    let ok_entries: Vec<&LogEntry> = log.iter().filter(|e| e.status == Some(200)).collect();
    let limited = log.iter().filter(|e| e.status == Some(429)).count() as u64;
    let limited_first = log
        .iter()
        .filter(|e| e.status == Some(429) && e.at_ms < 60_000)
        .count() as u64;
    let requests = log.len() as u64;
    let tokens: u64 = ok_entries.iter().map(|e| e.tokens).sum();
    let minutes = end.as_secs_f64() / 60.0;
    let (tpm, rpm) = (k.tpm as f64, k.rpm as f64);
    let last_ok = ok_entries.iter().map(|e| e.at_ms).max().unwrap_or(0);
    let steady: Vec<&&LogEntry> = ok_entries.iter().filter(|e| e.at_ms > 60_000).collect();
    let steady_minutes = (last_ok.saturating_sub(60_000)) as f64 / 60_000.0;
    let (steady_tpm_pct, steady_rpm_pct) = if steady_minutes >= 0.5 {
        (
            100.0 * steady.iter().map(|e| e.tokens).sum::<u64>() as f64 / (tpm * steady_minutes),
            100.0 * steady.len() as f64 / (rpm * steady_minutes),
        )
    } else {
        (f64::NAN, f64::NAN)
    };
    let full_minutes = (last_ok / 60_000 + 1) as usize;
    let mut per_minute = vec![0u64; full_minutes];
    for e in &ok_entries {
        per_minute[(e.at_ms / 60_000) as usize] += e.tokens;
    }
    let lat: Vec<f64> = outcomes.iter().map(|o| o.latency.as_secs_f64()).collect();
    let ok = outcomes.iter().filter(|o| o.ok).count();
    let headroom = server_headroom(&ok_entries, tpm, 60_000, last_ok);
    Figures {
        client: c.tag(),
        items,
        ok,
        failed: outcomes.len() - ok,
        cut_short,
        requests,
        rate_limited: limited,
        rate_limited_first_minute: limited_first,
        rate_limited_pct: 100.0 * limited as f64 / requests.max(1) as f64,
        duration_s: end.as_secs_f64(),
        tokens,
        whole_tpm_pct: 100.0 * tokens as f64 / (tpm * minutes),
        whole_rpm_pct: 100.0 * ok_entries.len() as f64 / (rpm * minutes),
        whole_of_admissible_pct: 100.0 * tokens as f64 / (tpm + tpm * minutes),
        steady_tpm_pct,
        steady_rpm_pct,
        per_minute_pct: per_minute.iter().map(|t| 100.0 * *t as f64 / tpm).collect(),
        headroom_pct: 100.0 * headroom / tpm,
        mean_s: lat.iter().sum::<f64>() / lat.len().max(1) as f64,
        p50_s: percentile(&lat, 50.0),
        p99_s: percentile(&lat, 99.0),
        wall_s: wall.as_secs_f64(),
    }
}

/// The mean level of the server's token bucket over `[from_ms, to_ms]`, sampled every virtual
/// second, replaying its log: full at the start, refilled continuously, charged the tokens
/// each success was charged (charge mode "actual": reservation less the unused part, at
/// arrival).
fn server_headroom(ok: &[&LogEntry], tpm: f64, from_ms: u64, to_ms: u64) -> f64 {
    let per_ms = tpm / 60_000.0;
    let (mut level, mut at) = (tpm, 0u64);
    let mut samples = Vec::new();
    let mut next = from_ms;
    let mut entries: Vec<&&LogEntry> = ok.iter().collect();
    entries.sort_by_key(|e| e.at_ms);
    for e in entries {
        while next <= e.at_ms && next <= to_ms {
            samples.push((level + (next - at) as f64 * per_ms).min(tpm));
            next += 1_000;
        }
        level = (level + (e.at_ms - at) as f64 * per_ms).min(tpm) - e.tokens as f64;
        at = e.at_ms;
    }
    if samples.is_empty() {
        f64::NAN
    } else {
        samples.iter().sum::<f64>() / samples.len() as f64
    }
}

fn median_figures(runs: &[Figures]) -> Figures {
    let m = |g: fn(&Figures) -> f64| common::median(&runs.iter().map(g).collect::<Vec<_>>());
    let mut out = runs[0].clone();
    out.ok = m(|x| x.ok as f64) as usize;
    out.failed = m(|x| x.failed as f64) as usize;
    out.cut_short = runs.iter().any(|x| x.cut_short);
    out.requests = m(|x| x.requests as f64) as u64;
    out.rate_limited = m(|x| x.rate_limited as f64) as u64;
    out.rate_limited_first_minute = m(|x| x.rate_limited_first_minute as f64) as u64;
    out.rate_limited_pct = m(|x| x.rate_limited_pct);
    out.duration_s = m(|x| x.duration_s);
    out.tokens = m(|x| x.tokens as f64) as u64;
    out.whole_tpm_pct = m(|x| x.whole_tpm_pct);
    out.whole_rpm_pct = m(|x| x.whole_rpm_pct);
    out.whole_of_admissible_pct = m(|x| x.whole_of_admissible_pct);
    out.steady_tpm_pct = m(|x| x.steady_tpm_pct);
    out.steady_rpm_pct = m(|x| x.steady_rpm_pct);
    let longest = runs
        .iter()
        .map(|x| x.per_minute_pct.len())
        .min()
        .unwrap_or(0);
    out.per_minute_pct = (0..longest)
        .map(|i| common::median(&runs.iter().map(|x| x.per_minute_pct[i]).collect::<Vec<_>>()))
        .collect();
    out.headroom_pct = m(|x| x.headroom_pct);
    out.mean_s = m(|x| x.mean_s);
    out.p50_s = m(|x| x.p50_s);
    out.p99_s = m(|x| x.p99_s);
    out.wall_s = m(|x| x.wall_s);
    out
}

fn print_tables(figs: &[Figures], k: &Knobs) {
    let mut t = Table::new([
        "client",
        "ok/items",
        "steady TPM%",
        "steady RPM%",
        "whole run, % of admissible",
        "requests",
        "429s",
        "429%",
        "429s in min 1",
        "mean s",
        "p50 s",
        "p99 s",
        "virtual s",
        "wall s",
    ]);
    for (c, x) in Contender::ALL.iter().zip(figs) {
        t.row([
            c.name().to_owned(),
            format!(
                "{}/{}{}",
                x.ok,
                x.items,
                if x.cut_short { " CUT" } else { "" }
            ),
            f(x.steady_tpm_pct, 1),
            f(x.steady_rpm_pct, 1),
            f(x.whole_of_admissible_pct, 1),
            x.requests.to_string(),
            x.rate_limited.to_string(),
            f(x.rate_limited_pct, 2),
            x.rate_limited_first_minute.to_string(),
            f(x.mean_s, 1),
            f(x.p50_s, 1),
            f(x.p99_s, 1),
            f(x.duration_s, 0),
            f(x.wall_s, 1),
        ]);
    }
    t.print();
    println!(
        "tokens served per virtual minute, % of TPM {} (the first minute includes the full bucket):",
        k.tpm
    );
    let width = figs
        .iter()
        .map(|x| x.per_minute_pct.len())
        .max()
        .unwrap_or(0);
    let mut t = Table::new(
        std::iter::once("client".to_owned())
            .chain((1..=width).map(|m| format!("min {m}")))
            .chain(["server headroom, steady".to_owned()]),
    );
    for (c, x) in Contender::ALL.iter().zip(figs) {
        t.row(
            std::iter::once(c.name().to_owned())
                .chain((0..width).map(|i| x.per_minute_pct.get(i).map_or("".into(), |p| f(*p, 0))))
                .chain([format!("{} %", f(x.headroom_pct, 1))]),
        );
    }
    t.print();
}
