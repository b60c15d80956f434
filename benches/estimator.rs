//! B5 — the token estimator.
//!
//! - Encoder load time (once per process): measured in fresh child processes of this bench,
//!   median of several.
//! - Throughput of `estimate_chat` over the mixed prompt set: items/s, estimated tokens/s,
//!   characters/s (median of several passes).
//! - The estimate's error against the emulator's server-side count (`ceil(chars / 4)` of the
//!   messages plus `max_tokens`, `llm_failover_emulator::text::estimate_tokens`), per kind of prompt; and,
//!   for reference, how far that server count is from the real `o200k_base` token count.
//!
//! ```sh
//! cargo bench --bench estimator
//! ```

mod common;

use std::collections::BTreeMap;

use common::prompts::{self, Item, Kind, MODEL};
use common::{Table, f, median, percentile};
use llm_failover::ratelimit::{Encoding, estimate_chat};
use serde_json::json;

const ITEMS: usize = 5_000;
const PASSES: usize = 5;
const LOAD_SAMPLES: usize = 5;
const SEED: u64 = 5;

fn main() {
    if std::env::var_os("B5_LOAD_ONLY").is_some() {
        // Child mode: load both encoders, print the times in microseconds.
        let t = common::wall();
        Encoding::O200k.count("warm up");
        let o200k = t.elapsed();
        let t = common::wall();
        Encoding::Cl100k.count("warm up");
        let cl100k = t.elapsed();
        println!("{} {}", o200k.as_micros(), cl100k.as_micros());
        return;
    }
    let machine = common::machine();
    machine.print("estimator (B5)");
    let n = common::env_or("B5_ITEMS", ITEMS);
    let passes = common::env_or("B5_PASSES", PASSES);

    // Load time, in fresh processes.
    let exe = std::env::current_exe().expect("this bench's path");
    let mut loads: (Vec<f64>, Vec<f64>) = (Vec::new(), Vec::new());
    for _ in 0..common::env_or("B5_LOAD_SAMPLES", LOAD_SAMPLES) {
        let out = std::process::Command::new(&exe)
            .env("B5_LOAD_ONLY", "1")
            .output()
            .expect("run the bench as a child");
        let text = String::from_utf8_lossy(&out.stdout);
        let v: Vec<f64> = text
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if let [a, b] = v[..] {
            loads.0.push(a / 1000.0);
            loads.1.push(b / 1000.0);
        }
    }
    // Load here too, outside the timed passes.
    Encoding::O200k.count("warm up");

    let items = prompts::set(SEED, n);
    let chars: u64 = items.iter().map(Item::chars).sum();
    let mut secs = Vec::new();
    let mut tokens = 0;
    for _ in 0..passes {
        let t = common::wall();
        let mut total = 0u64;
        for it in &items {
            total += std::hint::black_box(estimate_chat(&it.request, MODEL)).input_tokens;
        }
        secs.push(t.elapsed().as_secs_f64());
        tokens = total;
    }
    let s = median(&secs);

    println!(
        "encoder load (fresh process, median of {}): o200k_base {} ms, cl100k_base {} ms",
        loads.0.len(),
        f(median(&loads.0), 1),
        f(median(&loads.1), 1)
    );
    let mut t = Table::new([
        "items",
        "median s/pass",
        "items/s",
        "est. tokens/s",
        "chars/s",
        "µs/item",
    ]);
    t.row([
        n.to_string(),
        f(s, 4),
        f(n as f64 / s, 0),
        f(tokens as f64 / s, 0),
        f(chars as f64 / s, 0),
        f(s * 1e6 / n as f64, 2),
    ]);
    t.print();

    // Error against the server's count, per kind.
    #[derive(Default)]
    struct Acc {
        total_err: Vec<f64>,
        input_err: Vec<f64>,
        true_vs_server: Vec<f64>,
        chars: Vec<f64>,
    }
    let mut by: BTreeMap<Option<Kind>, Acc> = BTreeMap::new();
    for it in &items {
        let est = estimate_chat(&it.request, MODEL);
        let server_input = llm_failover_emulator::text::estimate_tokens(it.chars());
        let server = it.server_cost();
        let real: u64 = it
            .request
            .messages
            .iter()
            .map(|m| {
                tiktoken_rs::o200k_base_singleton()
                    .encode_ordinary(&m.content)
                    .len() as u64
            })
            .sum();
        for key in [Some(it.kind), None] {
            let a = by.entry(key).or_default();
            a.total_err
                .push(100.0 * (est.tokens() as f64 - server as f64) / server as f64);
            a.input_err.push(
                100.0 * (est.input_tokens as f64 - server_input as f64) / server_input as f64,
            );
            a.true_vs_server
                .push(100.0 * (real as f64 - server_input as f64) / server_input as f64);
            a.chars.push(it.chars() as f64);
        }
    }
    println!(
        "estimate vs the emulator's server-side count, % (positive: the client reserves more):"
    );
    let mut t = Table::new([
        "prompts",
        "n",
        "median chars",
        "total p50",
        "total p99",
        "total min",
        "total max",
        "input p50",
        "input max",
        "o200k vs chars/4 p50",
    ]);
    let mut rows = Vec::new();
    for (k, a) in &by {
        let name = k.map_or("all", Kind::name);
        let min = a.total_err.iter().copied().fold(f64::INFINITY, f64::min);
        let max = a
            .total_err
            .iter()
            .copied()
            .fold(f64::NEG_INFINITY, f64::max);
        let imax = a
            .input_err
            .iter()
            .copied()
            .fold(f64::NEG_INFINITY, f64::max);
        t.row([
            name.to_owned(),
            a.total_err.len().to_string(),
            f(median(&a.chars), 0),
            f(median(&a.total_err), 1),
            f(percentile(&a.total_err, 99.0), 1),
            f(min, 1),
            f(max, 1),
            f(median(&a.input_err), 1),
            f(imax, 1),
            f(median(&a.true_vs_server), 1),
        ]);
        rows.push(json!({
            "kind": name, "n": a.total_err.len(), "total_p50": median(&a.total_err),
            "total_p99": percentile(&a.total_err, 99.0), "total_min": min, "total_max": max,
            "input_p50": median(&a.input_err), "input_max": imax,
            "o200k_vs_chars4_p50": median(&a.true_vs_server),
        }));
    }
    t.print();
    common::record(
        "estimator",
        &machine,
        json!({
            "items": n, "passes": passes, "load_ms_o200k": loads.0, "load_ms_cl100k": loads.1,
            "pass_s": secs, "estimated_tokens": tokens, "chars": chars, "error": rows,
        }),
    );
}
