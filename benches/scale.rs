//! B4 — scale: a 100,000-item batch against a fast emulator.
//!
//! Items are generated on the fly (never held) and run by the batch runner
//! (`llm_failover::batch::Runner`, concurrency 64) into a `ResultsWriter` — the same sink as
//! `llm-failover --no-queue`: one JSON line per outcome, each written and flushed before it counts,
//! to `target/bench-results/scale-outcomes.jsonl`. Resident memory is sampled from
//! `/proc/self/status` during the run.
//!
//! The CPU share of token estimation: the client's `Stats` say how many requests were priced
//! by counting tokens (`estimate_chat`, tiktoken) and how many at the tokenizer-free bound
//! (`chat_cost_bound`); each kind's CPU per item is timed on the same items in the same
//! process after the batch, and their sum is set against the client runtime's CPU during the
//! batch (the emulator runs on its own runtime, whose threads are counted apart). The line
//! "if every request were counted" gives the share the old pricing had.
//!
//! By default the emulator states limits far above what the batch reaches, in OpenAI's
//! headers, as every real provider does: the client learns them from the first answer and
//! from then on prices every request in tokens. `B4_LIMITS=off` serves no limit headers: then
//! no token limit applies and the client prices requests by count only.
//!
//! ```sh
//! cargo bench --bench scale
//! B4_ITEMS=20000 cargo bench --bench scale      # a shorter run
//! ```

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::prompts::{self, MODEL};
use common::{Table, f};
use llm_failover::batch::{BatchItem, ResultsWriter, Runner, Stop};
use llm_failover::provider::openai::OpenAi;
use llm_failover::ratelimit::{chat_cost_bound, estimate_chat};
use llm_failover::{Client, Credential, ProviderId, ProviderSettings};
use llm_failover_emulator::{Emulator, EmulatorConfig, ProviderConfig};
use serde_json::json;

const ITEMS: u64 = 100_000;
const CONCURRENCY: usize = 64;
const SEED: u64 = 4;
/// How often resident memory is sampled.
const SAMPLE_MS: u64 = 100;
/// The request log the in-process emulator keeps (bounded; small so it is not what grows).
const EMULATOR_LOG: usize = 1_000;
/// Limits the emulator states by default: far above what two cores can send.
const STATED_RPM: u64 = 100_000_000;
const STATED_TPM: u64 = 100_000_000_000;

/// One memory sample: items finished, VmRSS KiB.
type Sample = (u64, u64);

fn main() {
    let machine = common::machine();
    machine.print("scale (B4)");
    let n: u64 = common::env_or("B4_ITEMS", ITEMS);
    let concurrency: usize = common::env_or("B4_CONCURRENCY", CONCURRENCY);
    let limits_on = std::env::var("B4_LIMITS").map_or(true, |v| v != "off");
    let emu_rt = common::runtime("emu", 2);
    let client_rt = common::runtime("client", 2);
    let mut cfg = EmulatorConfig::default();
    cfg.log_capacity = EMULATOR_LOG;
    let emu = emu_rt
        .block_on(
            Emulator::builder()
                .config(cfg)
                .provider(if limits_on {
                    ProviderConfig::openai("openai").with_limits(
                        llm_failover_emulator::Limits::per_minute(STATED_RPM, STATED_TPM),
                    )
                } else {
                    ProviderConfig::openai("openai")
                })
                .start(),
        )
        .expect("the emulator starts");
    let adapter = OpenAi::new(
        ProviderId::new("openai"),
        emu.base_url("openai").parse().expect("a URL"),
    )
    .with_chat_model(MODEL);
    let client = Client::builder()
        .provider(
            Arc::new(adapter),
            ProviderSettings::new().credential(Credential::new(emu.key("openai"))),
        )
        .build()
        .expect("the client builds");

    // Warm up: load the encoder, open connections, so the baseline RSS includes them.
    client_rt.block_on(async {
        let warm: Vec<_> = (0..concurrency as u64)
            .map(|i| client.chat(prompts::item(SEED ^ 0xffff, i).request))
            .collect();
        for r in futures_util::future::join_all(warm).await {
            r.expect("warm-up request");
        }
    });

    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target/bench-results/scale-outcomes.jsonl");
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("the results directory");
    // A fresh file: a leftover one would make the runner's sink resume into it.
    let _ = std::fs::remove_file(&path);
    let runner = Runner::new(client.clone()).concurrency(concurrency);
    let progress = runner.progress().clone();
    let samples: Arc<Mutex<Vec<Sample>>> = Arc::new(Mutex::new(Vec::new()));
    let stats0 = client.stats().total();
    let (rss0, _) = common::rss_kib();
    let client_cpu0 = common::cpu_time(Some("client-"));
    let emu_cpu0 = common::cpu_time(Some("emu-"));
    let t0 = common::wall();

    let sampler = {
        let samples = samples.clone();
        client_rt.spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(SAMPLE_MS));
            loop {
                tick.tick().await;
                let (rss, _) = common::rss_kib();
                let done = progress.snapshot().finished();
                samples.lock().expect("samples").push((done, rss));
            }
        })
    };
    let report = {
        let path = path.clone();
        client_rt.block_on(async move {
            let (mut writer, _) = ResultsWriter::open(&path).await.expect("the outcomes file");
            let items = futures_util::stream::iter((0..n).map(|i| {
                Ok(BatchItem::new(
                    format!("item-{i}"),
                    prompts::item(SEED, i).request,
                ))
            }));
            let report = runner
                .run(items, &mut writer, &Stop::new())
                .await
                .expect("the batch runs");
            writer.finish().await.expect("the outcomes are synced");
            report
        })
    };
    let failed = report.failed();
    let wall = t0.elapsed();
    let client_cpu = common::cpu_time(Some("client-")).saturating_sub(client_cpu0);
    let emu_cpu = common::cpu_time(Some("emu-")).saturating_sub(emu_cpu0);
    sampler.abort();
    let (rss_end, hwm) = common::rss_kib();
    let samples = samples.lock().expect("samples").clone();
    let stats = client.stats().total();
    let counted = stats.priced_by_count - stats0.priced_by_count;
    let bounded = stats.priced_by_bound - stats0.priced_by_bound;
    drop(client);
    emu_rt.block_on(emu.shutdown());

    // Pricing over the same items, same process, on this thread: CPU time of the calls only
    // (items are generated in chunks outside the measured part).
    let mut est_cpu = Duration::ZERO;
    let mut bound_cpu = Duration::ZERO;
    let mut est_tokens = 0u64;
    let chunk = 10_000u64;
    let mut start = 0;
    while start < n {
        let items: Vec<_> = (start..(start + chunk).min(n))
            .map(|i| prompts::item(SEED, i).request)
            .collect();
        let c0 = common::thread_cpu_time();
        for r in &items {
            est_tokens += estimate_chat(r, MODEL).input_tokens;
        }
        est_cpu += common::thread_cpu_time().saturating_sub(c0);
        let c0 = common::thread_cpu_time();
        for r in &items {
            est_tokens += chat_cost_bound(r, MODEL).input_tokens & 1;
        }
        bound_cpu += common::thread_cpu_time().saturating_sub(c0);
        start += chunk;
    }
    let per = |d: Duration| d.as_secs_f64() / n as f64;
    let pricing_cpu = counted as f64 * per(est_cpu) + bounded as f64 * per(bound_cpu);

    // Growth: from the sample at 10 % of the items (connections, buffers and encoder warm)
    // to the highest later sample; and from before the batch to the high-water mark.
    let at10 = samples
        .iter()
        .find(|(d, _)| *d >= n / 10)
        .map_or(rss0, |s| s.1);
    let later_max = samples
        .iter()
        .filter(|(d, _)| *d >= n / 10)
        .map(|s| s.1)
        .max()
        .unwrap_or(rss_end);
    let mib = |k: u64| k as f64 / 1024.0;
    let growth = later_max.saturating_sub(at10);
    let share_client = 100.0 * pricing_cpu / client_cpu.as_secs_f64().max(1e-9);
    let share_all = 100.0 * pricing_cpu / (client_cpu + emu_cpu).as_secs_f64().max(1e-9);
    let share_if_counted = 100.0 * est_cpu.as_secs_f64() / client_cpu.as_secs_f64().max(1e-9);
    let rate = n as f64 / wall.as_secs_f64();

    println!(
        "{n} items through llm_failover::batch::Runner, concurrency {concurrency}, {} ok, \
         {failed} failed, limits {}; outcomes in {}",
        report.ok,
        if limits_on {
            "stated in headers (learned: every request is priced in tokens)"
        } else {
            "off (no token limit: requests are priced by count only)"
        },
        path.display()
    );
    let mut t = Table::new(["measure", "value"]);
    t.row(["throughput (items/s)".to_owned(), f(rate, 0)]);
    t.row(["wall time (s)".to_owned(), f(wall.as_secs_f64(), 1)]);
    t.row(["RSS before the batch (MiB)".to_owned(), f(mib(rss0), 1)]);
    t.row(["RSS at 10 % of items (MiB)".to_owned(), f(mib(at10), 1)]);
    t.row(["RSS max after 10 % (MiB)".to_owned(), f(mib(later_max), 1)]);
    t.row(["RSS at the end (MiB)".to_owned(), f(mib(rss_end), 1)]);
    t.row(["peak RSS, VmHWM (MiB)".to_owned(), f(mib(hwm), 1)]);
    t.row(["growth after 10 % (MiB)".to_owned(), f(mib(growth), 1)]);
    t.row([
        "growth before batch → peak (MiB)".to_owned(),
        f(mib(hwm.saturating_sub(rss0)), 1),
    ]);
    t.row([
        "client runtime CPU (s)".to_owned(),
        f(client_cpu.as_secs_f64(), 2),
    ]);
    t.row([
        "emulator runtime CPU (s)".to_owned(),
        f(emu_cpu.as_secs_f64(), 2),
    ]);
    t.row([
        "client CPU per item (µs)".to_owned(),
        f(client_cpu.as_secs_f64() * 1e6 / n as f64, 1),
    ]);
    t.row([
        "priced by counting (tiktoken) / by bound".to_owned(),
        format!("{counted} / {bounded}"),
    ]);
    t.row([
        "estimate_chat per item (µs)".to_owned(),
        f(per(est_cpu) * 1e6, 1),
    ]);
    t.row([
        "chat_cost_bound per item (µs)".to_owned(),
        f(per(bound_cpu) * 1e6, 3),
    ]);
    t.row(["pricing CPU in the batch (s)".to_owned(), f(pricing_cpu, 3)]);
    t.row([
        "estimation share of client CPU (%)".to_owned(),
        f(share_client, 2),
    ]);
    t.row([
        "estimation share of all CPU (%)".to_owned(),
        f(share_all, 2),
    ]);
    t.row([
        "… if every request were counted (%)".to_owned(),
        f(share_if_counted, 1),
    ]);
    t.print();
    let curve: Vec<String> = samples
        .iter()
        .step_by((samples.len() / 10).max(1))
        .map(|(d, r)| format!("{}k:{:.0}", d / 1000, mib(*r)))
        .collect();
    println!("RSS MiB by items done: {}", curve.join(" "));
    common::record(
        "scale",
        &machine,
        json!({
            "items": n, "concurrency": concurrency, "failed": failed, "limits": limits_on,
            "wall_s": wall.as_secs_f64(),
            "items_per_s": rate, "rss0_kib": rss0, "rss_at10_kib": at10, "rss_later_max_kib": later_max,
            "rss_end_kib": rss_end, "hwm_kib": hwm, "growth_kib": growth,
            "client_cpu_s": client_cpu.as_secs_f64(), "emu_cpu_s": emu_cpu.as_secs_f64(),
            "estimate_cpu_s": est_cpu.as_secs_f64(), "bound_cpu_s": bound_cpu.as_secs_f64(),
            "priced_by_count": counted, "priced_by_bound": bounded, "pricing_cpu_s": pricing_cpu,
            "checksum": est_tokens,
            "share_client_pct": share_client, "share_all_pct": share_all,
            "share_if_counted_pct": share_if_counted,
            "samples": samples,
        }),
    );
}
