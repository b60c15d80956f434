//! What requests cost (issue 31): prices configured per model, each answer's cost in its
//! results line, the summary's total, and the provider's Batch API at its own prices — all
//! checked against the usage the emulator itself logged, at prices the test applies by hand
//! (whole nano-dollars: gpt-4o-mini's $0.15 / $0.60 per million tokens are 150 / 600
//! nano-dollars a token, the batch's half 75 / 300).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use llm_failover::batch::Stop;
use llm_failover::clock::{Clock, ManualClock};
use llm_failover::price::Price;
use llm_failover::provider::gemini::Gemini;
use llm_failover::provider::openai::OpenAi;
use llm_failover::{ChatRequest, Client, Credential, ProviderId, ProviderSettings, RequestOptions};
use llm_failover_emulator::{BatchTiming, Emulator, TimeSource};
use llm_failover_queue::{LaneChoice, Queue, QueuedJob};
use serde_json::Value;

use crate::support::examples::TempDir;

const MODEL: &str = "gpt-4o-mini";
/// Nano-dollars per token: live input, live output, batch input, batch output.
const LIVE: (u64, u64) = (150, 600);
const BATCH: (u64, u64) = (75, 300);

fn price() -> Price {
    Price::per_million_tokens(0.15, 0.60).with_batch(0.075, 0.30)
}

async fn emulator(clock: &ManualClock) -> Emulator {
    let c = clock.clone();
    let emu = Emulator::builder()
        .time_source(TimeSource::new(move || (c.now(), c.wall())))
        .openai("p")
        .start()
        .await
        .unwrap();
    emu.set_batch_timing("p", BatchTiming::new(Duration::from_secs(600)));
    emu
}

fn client(emu: &Emulator, clock: &ManualClock, priced: bool) -> Client {
    let adapter = OpenAi::new(ProviderId::new("p"), emu.base_url("p").parse().unwrap())
        .with_chat_model(MODEL);
    let mut settings = ProviderSettings::new().credential(Credential::new(emu.key("p")));
    if priced {
        settings = settings.price(MODEL, price());
    }
    Client::builder()
        .clock(Arc::new(clock.clone()))
        .provider(Arc::new(adapter), settings)
        .build()
        .unwrap()
}

fn demo() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/prompts.jsonl")
}

/// Dollars as the JSON says them, in nano-dollars (at most nine decimals are written).
fn nano(v: &Value) -> u64 {
    let usd = v.as_f64().unwrap_or_else(|| panic!("not dollars: {v}"));
    (usd * 1e9).round() as u64
}

/// `(input, output)` tokens at `per_token` nano-dollars.
fn at(usage: (u64, u64), per_token: (u64, u64)) -> u64 {
    usage.0 * per_token.0 + usage.1 * per_token.1
}

fn usage_of(line: &Value) -> (u64, u64) {
    (
        line["usage"]["input_tokens"].as_u64().unwrap(),
        line["usage"]["output_tokens"].as_u64().unwrap(),
    )
}

/// The demo batch on the queue through `lane`: its results lines by id and its summary.
async fn run(client: &Client, lane: LaneChoice, dir: &TempDir) -> (BTreeMap<String, Value>, Value) {
    let name = lane.as_str();
    let output = dir.path(&format!("{name}.jsonl"));
    let queue = Queue::open(&format!(
        "sqlite:{}",
        dir.path(&format!("{name}.sqlite")).display()
    ))
    .await
    .unwrap();
    let report = QueuedJob::new(demo(), &output, queue)
        .lane(lane)
        .run(client, &Stop::new())
        .await
        .unwrap();
    assert_eq!(report.pending, 0, "{report:?}");
    let summary = serde_json::to_value(report.summary(client, None).await).unwrap();
    let mut lines = BTreeMap::new();
    for l in std::fs::read_to_string(&output).unwrap().lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        let key = v["id"]
            .as_str()
            .map_or_else(|| format!("line {}", v["line"]), str::to_owned);
        lines.insert(key, v);
    }
    (lines, summary)
}

/// The demo batch with prices: each answer's line costs its usage at the prices, the
/// summary's total is the sum of the lines', and both are the emulator's logged usage at the
/// prices; the client's stats say the same. Through the provider's Batch API, the lines cost
/// the batch prices and the summary says what that lane cost.
#[tokio::test]
async fn the_demo_batch_costs_the_emulators_usage_at_the_prices_in_each_line_and_in_total() {
    let dir = TempDir::new("cost", "demo");
    let clock = ManualClock::new();
    let emu = emulator(&clock).await;
    let client = client(&emu, &clock, true);

    let (lines, summary) = run(&client, LaneChoice::Live, &dir).await;
    let mut sum = 0;
    let mut ok = 0;
    for (id, l) in &lines {
        if l["ok"] != true {
            assert_eq!(
                l.get("cost_usd"),
                None,
                "{id}: a failure costs nothing here"
            );
            continue;
        }
        ok += 1;
        let cost = nano(&l["cost_usd"]);
        assert_eq!(cost, at(usage_of(l), LIVE), "{id}: {l}");
        sum += cost;
    }
    assert!(ok > 190, "{ok} answered");
    let logged: u64 = emu
        .log()
        .iter()
        .filter(|e| e.status == Some(200))
        .filter_map(|e| e.usage)
        .map(|[i, o]| at((i, o), LIVE))
        .sum();
    assert_eq!(
        nano(&summary["cost_usd"]),
        sum,
        "the summary is the sum of its lines"
    );
    assert_eq!(sum, logged, "and the emulator's usage at the prices");
    assert_eq!(
        client.stats().total().cost.nano_usd(),
        logged,
        "the stats agree"
    );

    // The same items through the Batch API, at its prices.
    let (lines, summary) = run(&client, LaneChoice::ProviderBatch, &dir).await;
    let mut sum = 0;
    for (id, l) in lines.iter().filter(|(_, l)| l["ok"] == true) {
        assert_eq!(l["lane"], "provider-batch", "{id}");
        let cost = nano(&l["cost_usd"]);
        assert_eq!(cost, at(usage_of(l), BATCH), "{id}: the batch price: {l}");
        sum += cost;
    }
    assert!(sum > 0);
    assert_eq!(nano(&summary["cost_usd"]), sum, "{summary}");
    assert_eq!(
        nano(&summary["lanes"]["provider_batch_cost_usd"]),
        sum,
        "{summary}"
    );
}

/// A long prompt asked again is read in part from the provider's prompt cache: OpenAI's
/// `prompt_tokens_details.cached_tokens` and Gemini's `cachedContentTokenCount`, as the
/// emulator reports them, become `Usage::cached_input_tokens`, which cost the cached-input
/// price — in the answer and the client's stats, equal to the
/// emulator's logged usage at the prices. A short prompt is never cached.
#[tokio::test]
async fn input_read_from_the_prompt_cache_costs_the_cached_input_price() {
    const GEMINI: &str = "gemini-2.5-flash";
    /// Nano-dollars per cached input token ($0.075 per million, half the input price).
    const CACHED: u64 = 75;
    let clock = ManualClock::new();
    let c = clock.clone();
    let emu = Emulator::builder()
        .time_source(TimeSource::new(move || (c.now(), c.wall())))
        .openai("p")
        .gemini("g")
        .start()
        .await
        .unwrap();
    let price = Price::per_million_tokens(0.15, 0.60).with_cached_input(0.075);
    let openai = OpenAi::new(ProviderId::new("p"), emu.base_url("p").parse().unwrap())
        .with_chat_model(MODEL);
    let gemini = Gemini::new(
        ProviderId::new("g"),
        format!("{}/v1beta", emu.base_url("g")).parse().unwrap(),
    )
    .with_model(GEMINI);
    let settings = |name: &str, model: &str| {
        ProviderSettings::new()
            .credential(Credential::new(emu.key(name)))
            .price(model, price)
    };
    let client = Client::builder()
        .clock(Arc::new(clock.clone()))
        .provider(Arc::new(openai), settings("p", MODEL))
        .provider(Arc::new(gemini), settings("g", GEMINI))
        .build()
        .unwrap();

    // Some 2,000 tokens of context (the emulator counts a token per four characters).
    let context = "The bucket holds what the provider said it may. ".repeat(170);
    let long = ChatRequest::from_prompt(format!("{context}\nQuestion: what does it hold?"));
    let mut expected = 0;
    for name in ["p", "g"] {
        let on = RequestOptions::new().provider(name);
        let first = client.chat_with(long.clone(), &on).await.unwrap();
        let again = client.chat_with(long.clone(), &on).await.unwrap();
        let short = client
            .chat_with(ChatRequest::from_prompt("a short one"), &on)
            .await
            .unwrap();
        let short_again = client
            .chat_with(ChatRequest::from_prompt("a short one"), &on)
            .await
            .unwrap();
        for r in [&first, &again, &short, &short_again] {
            assert_eq!(r.provider.as_str(), name);
        }
        let (u1, u2) = (first.usage.unwrap(), again.usage.unwrap());
        assert!(u1.input_tokens > 1_024, "{name}: {u1:?}");
        assert_eq!(u1.cached_input_tokens, 0, "{name}: first seen: {u1:?}");
        assert_eq!(u2.input_tokens, u1.input_tokens, "{name}");
        // The first 1,024 tokens, then steps of 128.
        let cached = 1_024 + (u2.input_tokens - 1_024) / 128 * 128;
        assert_eq!(u2.cached_input_tokens, cached, "{name}: {u2:?}");
        assert_eq!(short_again.usage.unwrap().cached_input_tokens, 0, "{name}");

        let cost = |r: &llm_failover::ChatResponse| r.spend.unwrap().actual.unwrap().nano_usd();
        let by_hand = |u: llm_failover::Usage| {
            u.uncached_input() * LIVE.0 + u.cached_input_tokens * CACHED + u.output_tokens * LIVE.1
        };
        assert_eq!(cost(&first), by_hand(u1), "{name}");
        assert_eq!(cost(&again), by_hand(u2), "{name}");
        assert_eq!(
            u2.output_tokens, u1.output_tokens,
            "{name}: the same answer"
        );
        assert_eq!(
            cost(&first) - cost(&again),
            cached * (LIVE.0 - CACHED),
            "{name}: the cached tokens cost half"
        );
        expected += [&first, &again, &short, &short_again]
            .iter()
            .map(|r| cost(r))
            .sum::<u64>();
    }
    // The emulator's own log, at the prices.
    let log = emu.log();
    let hits = log.iter().filter(|e| e.cached_input > 0).count();
    assert_eq!(hits, 2, "one hit at each provider");
    let logged: u64 = log
        .iter()
        .filter(|e| e.status == Some(200))
        .filter_map(|e| e.usage.map(|[i, o]| (i, o, e.cached_input)))
        .map(|(i, o, c)| (i - c) * LIVE.0 + c * CACHED + o * LIVE.1)
        .sum();
    assert_eq!(expected, logged);
    assert_eq!(
        client.stats().total().cost.nano_usd(),
        logged,
        "the stats agree"
    );
}

/// A model without a price has no cost — absent, never zero — in the answer, the line and
/// the summary; with one, the answer's estimate (its prompt's token-per-byte bound and its `max_tokens`)
/// is never below what it cost.
#[tokio::test]
async fn without_a_price_there_is_no_cost_and_with_one_the_estimate_bounds_it() {
    let dir = TempDir::new("cost", "unpriced");
    let clock = ManualClock::new();
    let emu = emulator(&clock).await;
    let unpriced = client(&emu, &clock, false);
    let answer = unpriced
        .chat(ChatRequest::from_prompt("what is a bucket?"))
        .await
        .unwrap();
    assert_eq!(answer.spend, None);
    let (lines, summary) = run(&unpriced, LaneChoice::Live, &dir).await;
    assert!(lines.values().all(|l| l.get("cost_usd").is_none()));
    assert_eq!(summary.get("cost_usd"), None, "{summary}");

    let priced = client(&emu, &clock, true);
    let req = ChatRequest::from_prompt("what is a bucket?").max_tokens(100);
    let answer = priced.chat(req).await.unwrap();
    let spend = answer.spend.expect("a priced model's answer has a cost");
    let usage = answer.usage.unwrap();
    assert_eq!(
        spend.actual.map(|c| c.nano_usd()),
        Some(at((usage.input_tokens, usage.output_tokens), LIVE))
    );
    // The estimate: the prompt's bound (no token limit here) and the 100 tokens reserved, never
    // below what the answer cost.
    let estimated = spend.estimated.unwrap().nano_usd();
    assert!(estimated >= 100 * LIVE.1, "{estimated}");
    assert!(estimated >= spend.actual.unwrap().nano_usd(), "{spend:?}");
}

/// A streamed answer's cost is known when the stream ends, from the usage its last chunk
/// reports: the stream says it (`ChatStream::spend`), and the client's stats count it.
#[tokio::test]
async fn a_streamed_answer_is_counted_at_its_end() {
    use futures_util::StreamExt;
    let clock = ManualClock::new();
    let emu = emulator(&clock).await;
    let client = client(&emu, &clock, true);
    let mut stream = client
        .chat_stream(ChatRequest::from_prompt("stream a sentence"))
        .await
        .unwrap();
    let mut usage = None;
    while let Some(chunk) = stream.next().await {
        if let Some(u) = chunk.unwrap().usage {
            usage = Some(u);
        }
    }
    let usage = usage.expect("the stream reports its usage");
    let spend = stream.spend().expect("a priced model's stream has a cost");
    assert_eq!(
        spend.actual.map(|c| c.nano_usd()),
        Some(at((usage.input_tokens, usage.output_tokens), LIVE)),
        "the stream says what it cost"
    );
    assert!(
        spend.estimated.unwrap() >= spend.actual.unwrap(),
        "{spend:?}"
    );
    drop(stream);
    // The end is told from a task of its own: let it run.
    for _ in 0..100 {
        if client.stats().total().cost.nano_usd() > 0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(
        client.stats().total().cost.nano_usd(),
        at((usage.input_tokens, usage.output_tokens), LIVE)
    );
}
