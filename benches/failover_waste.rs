//! B3 — failover waste.
//!
//! The primary (OpenAI format) answers every request with 429 `Retry-After: 30`; the
//! secondary (Anthropic format) is healthy. 1,000 items at concurrency 16, real time, a fresh
//! client and emulator per run. Reported: how many requests reach the primary (at most the
//! ones in flight before the first 429 came back, none after), and what the first items
//! served by the secondary paid for the detour.
//!
//! The latency baseline is a control run interleaved with each measured run: the same items
//! and client set-up with a healthy primary. Its first `concurrency` items also open fresh
//! connections, so "added latency" compares like with like: the first items of a failover run
//! against the first items of a run without one.
//!
//! ```sh
//! cargo bench --bench failover_waste
//! ```

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use common::prompts::{self, Item};
use common::{Table, f, median, percentile};
use llm_failover::provider::anthropic::Anthropic;
use llm_failover::provider::openai::OpenAi;
use llm_failover::{Client, Credential, ProviderId, ProviderSettings};
use llm_failover_emulator::{Emulator, Fault, RetryAfter};
use serde_json::json;

const ITEMS: usize = 1_000;
const CONCURRENCY: usize = 16;
const RUNS: usize = 5;
const RETRY_AFTER_S: u64 = 30;
const SEED: u64 = 3;

#[derive(Clone, Copy, Debug)]
struct Outcome {
    start: Instant,
    end: Instant,
    attempts: u32,
    provider: &'static str,
}

/// One failover run and its control.
#[derive(Clone, Debug, serde::Serialize)]
struct Figures {
    ok: usize,
    primary_requests: u64,
    primary_429: u64,
    /// Items started after a 429 had come back that still went to the primary.
    primary_after_first_429: usize,
    secondary_requests: u64,
    failed_over: usize,
    /// Latency of the items that went primary → secondary.
    failed_over_p50_us: f64,
    failed_over_max_us: f64,
    /// Control (healthy primary): the first `concurrency` items, fresh connections too.
    control_first_p50_us: f64,
    /// The failover run's items after the first `concurrency`, straight to the secondary.
    direct_p50_us: f64,
    direct_p99_us: f64,
    added_p50_us: f64,
    wall_s: f64,
}

fn main() {
    let machine = common::machine();
    machine.print("failover_waste (B3)");
    let items_n = common::env_or("B3_ITEMS", ITEMS);
    let concurrency = common::env_or("B3_CONCURRENCY", CONCURRENCY);
    let runs = common::env_or("B3_RUNS", RUNS);
    let items: Arc<Vec<Item>> = Arc::new(
        prompts::set(SEED, items_n)
            .into_iter()
            .map(|mut i| {
                // Each provider's own default model.
                i.request.model = None;
                i
            })
            .collect(),
    );
    let rt = common::runtime("bench", 2);
    let mut all = Vec::new();
    for r in 0..runs {
        // Alternate which goes first, so drift on the machine does not favour either.
        let (fo, control) = if r % 2 == 0 {
            let fo = rt.block_on(run(items.clone(), concurrency, true));
            (fo, rt.block_on(run(items.clone(), concurrency, false)))
        } else {
            let control = rt.block_on(run(items.clone(), concurrency, false));
            (rt.block_on(run(items.clone(), concurrency, true)), control)
        };
        all.push(figures(&fo, &control, concurrency));
    }
    println!(
        "{items_n} items at concurrency {concurrency}; primary answers 429 Retry-After: {RETRY_AFTER_S} to everything; {runs} runs, each with a control run (healthy primary)"
    );
    let mut t = Table::new([
        "run",
        "ok",
        "primary reqs",
        "after 1st 429",
        "secondary reqs",
        "failed over",
        "failed-over p50 µs",
        "failed-over max µs",
        "control first p50 µs",
        "added p50 µs",
        "direct p50 µs",
        "direct p99 µs",
        "wall s",
    ]);
    let row = |t: &mut Table, name: String, x: &Figures| {
        t.row([
            name,
            x.ok.to_string(),
            x.primary_requests.to_string(),
            x.primary_after_first_429.to_string(),
            x.secondary_requests.to_string(),
            x.failed_over.to_string(),
            f(x.failed_over_p50_us, 0),
            f(x.failed_over_max_us, 0),
            f(x.control_first_p50_us, 0),
            f(x.added_p50_us, 0),
            f(x.direct_p50_us, 0),
            f(x.direct_p99_us, 0),
            f(x.wall_s, 2),
        ]);
    };
    for (i, x) in all.iter().enumerate() {
        row(&mut t, format!("{}", i + 1), x);
    }
    let m = |g: fn(&Figures) -> f64| median(&all.iter().map(g).collect::<Vec<_>>());
    let med = Figures {
        ok: m(|x| x.ok as f64) as usize,
        primary_requests: m(|x| x.primary_requests as f64) as u64,
        primary_429: m(|x| x.primary_429 as f64) as u64,
        primary_after_first_429: m(|x| x.primary_after_first_429 as f64) as usize,
        secondary_requests: m(|x| x.secondary_requests as f64) as u64,
        failed_over: m(|x| x.failed_over as f64) as usize,
        failed_over_p50_us: m(|x| x.failed_over_p50_us),
        failed_over_max_us: m(|x| x.failed_over_max_us),
        control_first_p50_us: m(|x| x.control_first_p50_us),
        direct_p50_us: m(|x| x.direct_p50_us),
        direct_p99_us: m(|x| x.direct_p99_us),
        added_p50_us: m(|x| x.added_p50_us),
        wall_s: m(|x| x.wall_s),
    };
    row(&mut t, "median".to_owned(), &med);
    t.print();
    let worst = all.iter().map(|x| x.primary_requests).max().unwrap_or(0);
    let late = all
        .iter()
        .map(|x| x.primary_after_first_429)
        .max()
        .unwrap_or(0);
    println!(
        "worst run: {worst} requests reached the primary (bound: {concurrency} in flight), {late} after a 429 had come back"
    );
    common::record(
        "failover_waste",
        &machine,
        json!({"items": items_n, "concurrency": concurrency, "runs": all, "median": med}),
    );
}

/// What one run observed.
struct Observed {
    outcomes: Vec<Outcome>,
    primary: llm_failover_emulator::Counters,
    secondary: llm_failover_emulator::Counters,
    wall: std::time::Duration,
}

async fn run(items: Arc<Vec<Item>>, concurrency: usize, broken: bool) -> Observed {
    let emu = Emulator::builder()
        .openai("primary")
        .anthropic("secondary")
        .start()
        .await
        .expect("the emulator starts");
    if broken {
        emu.set_fault_mix(
            "primary",
            1,
            [(
                1.0,
                Fault::RateLimit {
                    retry_after: RetryAfter::Seconds(RETRY_AFTER_S),
                },
            )],
        );
    }
    let primary = OpenAi::new(
        ProviderId::new("primary"),
        emu.base_url("primary").parse().expect("a URL"),
    )
    .with_chat_model(prompts::MODEL);
    let secondary = Anthropic::new(
        ProviderId::new("secondary"),
        emu.base_url("secondary").parse().expect("a URL"),
    )
    .with_model("claude-3-5-haiku-latest");
    let key = |p: &str| ProviderSettings::new().credential(Credential::new(emu.key(p)));
    let client = Client::builder()
        .provider(Arc::new(primary), key("primary"))
        .provider(Arc::new(secondary), key("secondary"))
        .build()
        .expect("the client builds");

    let next = Arc::new(AtomicUsize::new(0));
    let outcomes = Arc::new(Mutex::new(Vec::with_capacity(items.len())));
    let t0 = common::wall();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (client, items, next, outcomes) = (
            client.clone(),
            items.clone(),
            next.clone(),
            outcomes.clone(),
        );
        set.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { return };
                let start = common::wall();
                let r = client.chat(item.request.clone()).await;
                let end = common::wall();
                let (attempts, provider) = match &r {
                    Ok(r) if r.provider.as_str() == "primary" => (r.attempts, "primary"),
                    Ok(r) => (r.attempts, "secondary"),
                    Err(e) => panic!("item {i} failed: {e}"),
                };
                outcomes.lock().expect("outcomes").push(Outcome {
                    start,
                    end,
                    attempts,
                    provider,
                });
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r.expect("a worker panicked");
    }
    let wall = t0.elapsed();
    let outcomes = outcomes.lock().expect("outcomes").clone();
    let (primary, secondary) = (emu.counters("primary"), emu.counters("secondary"));
    emu.shutdown().await;
    Observed {
        outcomes,
        primary,
        secondary,
        wall,
    }
}

fn figures(fo: &Observed, control: &Observed, concurrency: usize) -> Figures {
    let us = |o: &Outcome| (o.end - o.start).as_secs_f64() * 1e6;
    let failed_over: Vec<&Outcome> = fo.outcomes.iter().filter(|o| o.attempts > 1).collect();
    // The first 429 came back before the first failed-over item finished.
    let first_back = failed_over.iter().map(|o| o.end).min();
    let after = first_back.map_or(0, |t| failed_over.iter().filter(|o| o.start > t).count());
    let fo_us: Vec<f64> = failed_over.iter().map(|o| us(o)).collect();
    let mut by_start: Vec<&Outcome> = fo.outcomes.iter().collect();
    by_start.sort_by_key(|o| o.start);
    let direct: Vec<f64> = by_start
        .iter()
        .skip(concurrency)
        .filter(|o| o.attempts == 1)
        .map(|o| us(o))
        .collect();
    let mut control_by_start: Vec<&Outcome> = control.outcomes.iter().collect();
    control_by_start.sort_by_key(|o| o.start);
    let control_first: Vec<f64> = control_by_start
        .iter()
        .take(concurrency)
        .map(|o| us(o))
        .collect();
    debug_assert!(control.outcomes.iter().all(|o| o.provider == "primary"));
    Figures {
        ok: fo.outcomes.len(),
        primary_requests: fo.primary.requests,
        primary_429: fo.primary.rate_limited,
        primary_after_first_429: after,
        secondary_requests: fo.secondary.requests,
        failed_over: fo_us.len(),
        failed_over_p50_us: median(&fo_us),
        failed_over_max_us: fo_us.iter().copied().fold(f64::NAN, f64::max),
        control_first_p50_us: median(&control_first),
        direct_p50_us: median(&direct),
        direct_p99_us: percentile(&direct, 99.0),
        added_p50_us: median(&fo_us) - median(&control_first),
        wall_s: fo.wall.as_secs_f64(),
    }
}
