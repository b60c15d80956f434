//! B1 shapes — pacing to what providers actually do: limits that are not "per minute as the
//! headers say".
//!
//! Each shape is one OpenAI-format provider on a fresh emulator, the limits not configured in
//! the client. Two clients send the same items at the same concurrency, one after the other,
//! each against its own emulator, on one `FastClock` shared with it:
//!
//! - llm-failover, limits learned from what the provider says (or, when it says nothing,
//!   from its 429s);
//! - retry-only: plain reqwest, honours `Retry-After`, else full-jitter backoff (B1's (c)).
//!
//! Shapes:
//!
//! - `window-6s`: 60 requests per 6 s window, OpenAI headers counting down from 6 s (requests
//!   bind);
//! - `groq-day`: Groq's headers — requests per day (14,400), tokens per minute (tokens bind) —
//!   and one 429 early on (`retry-after: 2`) that leaves 14,370 requests for the day;
//! - `fixed-minute`: LiteLLM's proxy — 60 requests per fixed minute (a counter that starts
//!   again at each boundary), limit and remaining stated, no reset, no `Retry-After`;
//! - `silent`: 120 requests per minute and nothing stated: no limit headers, no
//!   `Retry-After`, no delay in the 429's text;
//! - `three`: three providers at once in failover order, 60, 30 and 30 requests per 6 s
//!   window, stated in OpenAI's headers, at concurrency 32: the first contact with each (the
//!   limits are not configured) is where a burst overshoots;
//! - `bedrock` (with `--features bedrock`): AWS Bedrock's Converse API, signed, throttling at
//!   60 requests per minute with `ThrottlingException`s and no limit headers at all, as the
//!   real service does: learned from its 429s alone. Only llm-failover runs it (the
//!   retry-only client does not sign).
//!
//! The figure that matters is the share of the binding limit used once the first window's
//! burst is spent, the share of requests answered 429, and that no item fails that was only
//! throttled.
//!
//! ```sh
//! cargo bench --bench shapes                  # every shape
//! B1_SHAPES=silent cargo bench --bench shapes # one
//! B1_SHAPES=bedrock cargo bench --bench shapes --features bedrock
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
use llm_failover::{ChatRequest, Client, Credential, ProviderId, ProviderSettings};
use llm_failover_emulator::{
    ChargeMode, Emulator, Fault, HeaderStyle, LogEntry, ProviderConfig, RetryAfter, TimeSource,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

/// How much faster than real time both sides' clock runs.
const FACTOR: f64 = 10.0;
/// Requests in flight per client.
const CONCURRENCY: usize = 16;
/// Longest real time one client may take.
const MAX_WALL_S: u64 = 120;
const MODEL: &str = "gpt-4o-mini";

/// The wire format of a shape's providers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    OpenAi,
    #[cfg(feature = "bedrock")]
    Bedrock,
}

/// One provider shape.
struct Shape {
    name: &'static str,
    format: Format,
    /// The providers, in the client's failover order (the first one's scripted).
    providers: fn() -> Vec<ProviderConfig>,
    /// Requests in flight per client.
    concurrency: usize,
    /// Faults scripted at the start.
    script: fn() -> Vec<Fault>,
    /// Items sent.
    items: usize,
    /// `max_tokens` of each item (the prompt is a few tokens).
    max_tokens: u32,
    /// The binding limit, summed over the providers: (units per window, the window, counts
    /// tokens).
    binding: (u64, Duration, bool),
}

fn shapes() -> Vec<Shape> {
    vec![
        Shape {
            format: Format::OpenAi,
            name: "window-6s",
            providers: || {
                vec![
                    ProviderConfig::openai("p")
                        .with_limits(llm_failover_emulator::Limits::default().with_rpm(60))
                        .with_minute_ms(6_000),
                ]
            },
            concurrency: CONCURRENCY,
            script: Vec::new,
            items: 1_200,
            max_tokens: 8,
            binding: (60, Duration::from_secs(6), false),
        },
        Shape {
            format: Format::OpenAi,
            name: "groq-day",
            providers: || {
                vec![
                    ProviderConfig::openai("p")
                        .with_limits(
                            llm_failover_emulator::Limits::default()
                                .with_rpd(14_400)
                                .with_tpm(6_000),
                        )
                        .with_headers(HeaderStyle::Groq)
                        // The admission charge stays (Groq counts what was asked for): tokens
                        // bind.
                        .with_charge(ChargeMode::Estimate),
                ]
            },
            concurrency: CONCURRENCY,
            script: || {
                let mut s = vec![Fault::Pass; 30];
                s.push(Fault::RateLimit {
                    retry_after: RetryAfter::Seconds(2),
                });
                s
            },
            items: 240,
            max_tokens: 200,
            binding: (6_000, Duration::from_secs(60), true),
        },
        Shape {
            format: Format::OpenAi,
            name: "fixed-minute",
            providers: || {
                vec![
                    ProviderConfig::openai("p")
                        .with_limits(llm_failover_emulator::Limits::default().with_rpm(60))
                        .with_headers(HeaderStyle::LiteLlm)
                        .with_fixed_windows(),
                ]
            },
            concurrency: CONCURRENCY,
            script: Vec::new,
            items: 600,
            max_tokens: 8,
            binding: (60, Duration::from_secs(60), false),
        },
        Shape {
            format: Format::OpenAi,
            name: "silent",
            providers: || {
                vec![
                    ProviderConfig::openai("p")
                        .with_limits(llm_failover_emulator::Limits::default().with_rpm(120))
                        .with_headers(HeaderStyle::None),
                ]
            },
            concurrency: CONCURRENCY,
            script: Vec::new,
            items: 1_200,
            max_tokens: 8,
            binding: (120, Duration::from_secs(60), false),
        },
        Shape {
            format: Format::OpenAi,
            name: "three",
            providers: || {
                [("p", 60), ("q", 30), ("r", 30)]
                    .into_iter()
                    .map(|(name, rpm)| {
                        ProviderConfig::openai(name)
                            .with_limits(llm_failover_emulator::Limits::default().with_rpm(rpm))
                            .with_minute_ms(6_000)
                    })
                    .collect()
            },
            concurrency: 32,
            script: Vec::new,
            items: 600,
            max_tokens: 8,
            binding: (120, Duration::from_secs(6), false),
        },
        #[cfg(feature = "bedrock")]
        Shape {
            format: Format::Bedrock,
            name: "bedrock",
            providers: || {
                vec![
                    ProviderConfig::bedrock("p")
                        .with_limits(llm_failover_emulator::Limits::default().with_rpm(60)),
                ]
            },
            concurrency: CONCURRENCY,
            script: Vec::new,
            items: 600,
            max_tokens: 8,
            binding: (60, Duration::from_secs(60), false),
        },
    ]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Sdk,
    RetryOnly,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Sdk => "llm-failover",
            Side::RetryOnly => "retry-only",
        }
    }
}

struct Figures {
    ok: usize,
    failed: usize,
    requests: usize,
    limited: usize,
    steady_pct: f64,
    virtual_s: f64,
    cut_short: bool,
}

fn main() {
    let machine = common::machine();
    machine.print("shapes");
    let only = std::env::var("B1_SHAPES").ok();
    let rt = common::runtime("shapes", 2);
    let mut table = Table::new([
        "shape",
        "client",
        "ok/items",
        "failed",
        "binding limit used, steady %",
        "requests",
        "429s",
        "429 %",
        "virtual s",
    ]);
    let mut runs = Vec::new();
    for shape in shapes() {
        if only
            .as_deref()
            .is_some_and(|o| !o.split(',').any(|s| s == shape.name))
        {
            continue;
        }
        for side in [Side::Sdk, Side::RetryOnly] {
            if side == Side::RetryOnly && shape.format != Format::OpenAi {
                continue; // it speaks OpenAI's format only (no signing)
            }
            let fig = rt.block_on(run(&shape, side));
            let pct = 100.0 * fig.limited as f64 / fig.requests.max(1) as f64;
            table.row([
                shape.name.to_owned(),
                side.name().to_owned(),
                format!(
                    "{}/{}{}",
                    fig.ok,
                    shape.items,
                    if fig.cut_short { " (cut)" } else { "" }
                ),
                fig.failed.to_string(),
                f(fig.steady_pct, 1),
                fig.requests.to_string(),
                fig.limited.to_string(),
                f(pct, 2),
                f(fig.virtual_s, 0),
            ]);
            runs.push(json!({
                "shape": shape.name, "client": side.name(), "ok": fig.ok, "failed": fig.failed,
                "steady_pct": fig.steady_pct, "requests": fig.requests, "limited": fig.limited,
                "limited_pct": pct, "virtual_s": fig.virtual_s, "cut_short": fig.cut_short,
            }));
        }
    }
    table.print();
    common::record("shapes", &machine, json!({ "runs": runs }));
}

async fn run(shape: &Shape, side: Side) -> Figures {
    let clock = FastClock::new(FACTOR);
    let providers = (shape.providers)();
    let names: Vec<String> = providers.iter().map(|p| p.prefix.clone()).collect();
    let mut builder = Emulator::builder();
    for p in providers {
        builder = builder.provider(p);
    }
    let emu = builder
        .time_source(TimeSource::new(move || (clock.now(), clock.wall())))
        .start()
        .await
        .expect("the emulator starts");
    emu.script(&names[0], (shape.script)());
    let sdk = (side == Side::Sdk).then(|| sdk_client(&emu, &names, shape.format, clock));
    let http = reqwest::Client::new();
    // The retry-only client has no failover: its workers are spread over the providers.
    let targets: Vec<(String, String)> = names
        .iter()
        .map(|n| {
            let url = format!("{}/chat/completions", emu.base_url(n));
            (url, emu.key(n).to_owned())
        })
        .collect();
    let next = Arc::new(AtomicUsize::new(0));
    let results = Arc::new(Mutex::new((0usize, 0usize)));
    let start = clock.now();
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..shape.concurrency {
        let (next, results, sdk) = (next.clone(), results.clone(), sdk.clone());
        let (url, key) = targets[w % targets.len()].clone();
        let http = http.clone();
        let (items, max_tokens) = (shape.items, shape.max_tokens);
        let mut rng = SmallRng::seed_from_u64(w as u64 + 1);
        workers.spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < items {
                let req = ChatRequest::from_prompt("Say hello.").max_tokens(max_tokens);
                let ok = match &sdk {
                    Some(c) => c.chat(req).await.is_ok(),
                    None => retry_only(&http, &url, &key, max_tokens, &clock, &mut rng).await,
                };
                let mut r = results.lock().expect("results");
                if ok {
                    r.0 += 1;
                } else {
                    r.1 += 1;
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
    if std::env::var("B1_SHAPES_TRACE").is_ok() {
        // Diagnostics: when each 429 was answered, in virtual seconds.
        let at: Vec<String> = log
            .iter()
            .filter(|e| e.status == Some(429))
            .map(|e| format!("{}@{:.1}", e.provider, e.at_ms as f64 / 1000.0))
            .collect();
        eprintln!("{} {}: 429s at {}", shape.name, side.name(), at.join(" "));
    }
    let (ok, failed) = *results.lock().expect("results");
    Figures {
        ok,
        failed,
        requests: log.len(),
        limited: log.iter().filter(|e| e.status == Some(429)).count(),
        steady_pct: steady(&log, shape.binding),
        virtual_s: end.as_secs_f64(),
        cut_short: done.is_err(),
    }
}

/// The share of the binding limit the answered requests used after the first window (whose
/// full bucket any client gets), up to the last answer.
fn steady(log: &[LogEntry], (limit, window, tokens): (u64, Duration, bool)) -> f64 {
    let from = window.as_millis() as u64;
    let ok: Vec<&LogEntry> = log
        .iter()
        .filter(|e| e.status == Some(200) && e.at_ms > from)
        .collect();
    let last = ok.iter().map(|e| e.at_ms).max().unwrap_or(from);
    let windows = (last - from) as f64 / from as f64;
    if windows < 0.5 {
        return f64::NAN;
    }
    let used: u64 = ok.iter().map(|e| if tokens { e.tokens } else { 1 }).sum();
    100.0 * used as f64 / (limit as f64 * windows)
}

fn sdk_client(emu: &Emulator, names: &[String], format: Format, clock: FastClock) -> Client {
    let mut p = Policy::default();
    // A batch's deadline: an item waits as long as the provider makes it.
    p.deadline = Duration::from_secs(3_600);
    p.request_timeout = Duration::from_secs(30);
    p.latency_allowance = Duration::from_millis(200).mul_f64(FACTOR);
    let mut builder = Client::builder()
        .clock(Arc::new(clock))
        .rng(Arc::new(SeededRng::new(1)))
        .policy(p);
    for name in names {
        let (adapter, credential): (Arc<dyn llm_failover::provider::Provider>, Credential) =
            match format {
                Format::OpenAi => (
                    Arc::new(
                        OpenAi::new(
                            ProviderId::new(name),
                            emu.base_url(name).parse().expect("a URL"),
                        )
                        .with_chat_model(MODEL),
                    ),
                    Credential::new(emu.key(name)),
                ),
                #[cfg(feature = "bedrock")]
                Format::Bedrock => {
                    let aws = emu.aws_credentials(name);
                    (
                        Arc::new(
                            llm_failover::bedrock::Bedrock::new(
                                ProviderId::new(name),
                                emu.base_url(name).parse().expect("a URL"),
                                &aws.region,
                            )
                            .with_model("amazon.nova-lite-v1:0"),
                        ),
                        Credential::aws(
                            aws.access_key_id,
                            aws.secret_access_key,
                            aws.session_token,
                        ),
                    )
                }
            };
        builder = builder.provider(adapter, ProviderSettings::new().credential(credential));
    }
    builder.build().expect("the client builds")
}

/// One item through a retry-only client: send until a 200 (at most 200 times), sleeping the
/// `Retry-After` when stated, else a full-jitter backoff (base 1 s, cap 60 s).
async fn retry_only(
    http: &reqwest::Client,
    url: &str,
    key: &str,
    max_tokens: u32,
    clock: &FastClock,
    rng: &mut SmallRng,
) -> bool {
    let body = json!({"model": MODEL, "max_tokens": max_tokens,
                      "messages": [{"role": "user", "content": "Say hello."}]});
    for attempt in 0..200u32 {
        let sent = http.post(url).bearer_auth(key).json(&body).send().await;
        let mut retry_after = None;
        if let Ok(resp) = sent {
            if resp.status().as_u16() == 200 {
                return resp.bytes().await.is_ok();
            }
            retry_after = resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(Duration::from_secs_f64);
            let _ = resp.bytes().await;
        }
        let wait = retry_after.unwrap_or_else(|| {
            let ceiling = Duration::from_secs(1)
                .saturating_mul(1 << attempt.min(16))
                .min(Duration::from_secs(60));
            ceiling.mul_f64(rng.random::<f64>())
        });
        clock.sleep_until(clock.now() + wait).await;
    }
    false
}
