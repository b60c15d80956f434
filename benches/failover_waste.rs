//! B3 — failover waste.
//!
//! The primary (OpenAI format) answers every request with 429 `Retry-After: 30`; the
//! secondary (Anthropic format) is healthy. 1,000 items at concurrency 16, real time. How many
//! requests reach the primary (at most the ones in flight before the first 429 came back,
//! none after), and what the first items served by the secondary paid for the detour,
//! against the items that went to the secondary directly in the same run.
//!
//! ```sh
//! cargo bench --bench failover_waste
//! ```

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use common::prompts::{self, Item};
use common::{f, median, percentile, Table};
use emulator::{Emulator, Fault, RetryAfter};
use llm_failover::provider::anthropic::Anthropic;
use llm_failover::provider::openai::OpenAi;
use llm_failover::{Client, Credential, ProviderId, ProviderSettings};
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
    secondary: bool,
}

#[derive(Clone, Debug, serde::Serialize)]
struct Figures {
    ok: usize,
    served_by_secondary: usize,
    primary_requests: u64,
    primary_429: u64,
    /// Items started after a 429 had come back that still went to the primary.
    primary_after_first_429: usize,
    secondary_requests: u64,
    failed_over: usize,
    failed_over_p50_us: f64,
    failed_over_max_us: f64,
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
    for _ in 0..runs {
        all.push(rt.block_on(run(items.clone(), concurrency)));
    }
    println!(
        "{items_n} items at concurrency {concurrency}; primary answers 429 Retry-After: {RETRY_AFTER_S} to everything; {runs} runs"
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
        "direct p50 µs",
        "direct p99 µs",
        "added p50 µs",
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
            f(x.direct_p50_us, 0),
            f(x.direct_p99_us, 0),
            f(x.added_p50_us, 0),
            f(x.wall_s, 2),
        ]);
    };
    for (i, x) in all.iter().enumerate() {
        row(&mut t, format!("{}", i + 1), x);
    }
    let m = |g: fn(&Figures) -> f64| median(&all.iter().map(g).collect::<Vec<_>>());
    let med = Figures {
        ok: m(|x| x.ok as f64) as usize,
        served_by_secondary: m(|x| x.served_by_secondary as f64) as usize,
        primary_requests: m(|x| x.primary_requests as f64) as u64,
        primary_429: m(|x| x.primary_429 as f64) as u64,
        primary_after_first_429: m(|x| x.primary_after_first_429 as f64) as usize,
        secondary_requests: m(|x| x.secondary_requests as f64) as u64,
        failed_over: m(|x| x.failed_over as f64) as usize,
        failed_over_p50_us: m(|x| x.failed_over_p50_us),
        failed_over_max_us: m(|x| x.failed_over_max_us),
        direct_p50_us: m(|x| x.direct_p50_us),
        direct_p99_us: m(|x| x.direct_p99_us),
        added_p50_us: m(|x| x.added_p50_us),
        wall_s: m(|x| x.wall_s),
    };
    row(&mut t, "median".to_owned(), &med);
    t.print();
    common::record(
        "failover_waste",
        &machine,
        json!({"items": items_n, "concurrency": concurrency, "runs": all, "median": med}),
    );
}

async fn run(items: Arc<Vec<Item>>, concurrency: usize) -> Figures {
    let emu = Emulator::builder()
        .openai("primary")
        .anthropic("secondary")
        .start()
        .await
        .expect("the emulator starts");
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
        let (client, items, next, outcomes) =
            (client.clone(), items.clone(), next.clone(), outcomes.clone());
        set.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { return };
                let start = common::wall();
                let r = client.chat(item.request.clone()).await;
                let end = common::wall();
                let (attempts, secondary) = match &r {
                    Ok(r) => (r.attempts, r.provider.as_str() == "secondary"),
                    Err(e) => panic!("item {i} failed: {e}"),
                };
                outcomes.lock().expect("outcomes").push(Outcome {
                    start,
                    end,
                    attempts,
                    secondary,
                });
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r.expect("a worker panicked");
    }
    let wall = t0.elapsed();
    let outcomes = outcomes.lock().expect("outcomes").clone();
    let (p, s) = (emu.counters("primary"), emu.counters("secondary"));
    emu.shutdown().await;

    let us = |o: &Outcome| (o.end - o.start).as_secs_f64() * 1e6;
    let failed_over: Vec<&Outcome> = outcomes.iter().filter(|o| o.attempts > 1).collect();
    let direct: Vec<f64> = outcomes
        .iter()
        .filter(|o| o.attempts == 1)
        .map(us)
        .collect();
    // The first 429 came back before the first failed-over item finished.
    let first_back = failed_over.iter().map(|o| o.end).min();
    let after = first_back.map_or(0, |t| failed_over.iter().filter(|o| o.start > t).count());
    let fo: Vec<f64> = failed_over.iter().map(|o| us(o)).collect();
    let direct_p50 = median(&direct);
    Figures {
        ok: outcomes.len(),
        served_by_secondary: outcomes.iter().filter(|o| o.secondary).count(),
        primary_requests: p.requests,
        primary_429: p.rate_limited,
        primary_after_first_429: after,
        secondary_requests: s.requests,
        failed_over: fo.len(),
        failed_over_p50_us: median(&fo),
        failed_over_max_us: fo.iter().copied().fold(f64::NAN, f64::max),
        direct_p50_us: direct_p50,
        direct_p99_us: percentile(&direct, 99.0),
        added_p50_us: median(&fo) - direct_p50,
        wall_s: wall.as_secs_f64(),
    }
}
