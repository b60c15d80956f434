//! Fault soak: thousands of requests through two providers on the emulator with about 15 %
//! mixed faults — 5xx, 529, resets, hangs past the timeout, truncated and malformed bodies,
//! invalid headers, 429s with every Retry-After form but one years ahead (which closes a
//! provider, as it should). Checks:
//!
//! * every request ends in exactly one outcome, and no task panics;
//! * nothing is ever sent to a provider whose breaker is open (from the SDK's own `sending`
//!   and `breaker open` trace events, ordered by the breaker's version and timed on its
//!   clock);
//! * every request ends within its attempts' timeouts on the wall clock (at most
//!   `max_attempts × request_timeout`, plus slack), and the whole soak within the sum of them.
//!
//! `SOAK_REQUESTS` sets the count (default 2,000 so the suite stays fast; RELIABILITY.md
//! reports a 10,000-request run).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use llm_failover::clock::{Clock, ManualClock, TokioClock};
use llm_failover::config::Policy;
use llm_failover::provider::anthropic::Anthropic;
use llm_failover::provider::openai::OpenAi;
use llm_failover::rng::SeededRng;
use llm_failover::{ChatRequest, Client, Credential, ProviderId, ProviderSettings};
use llm_failover_emulator::{Emulator, Fault, ProviderConfig, RetryAfter};
use tracing::field::{Field, Visit};
use tracing::instrument::WithSubscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};

/// One `sending` or `breaker open` event.
#[derive(Clone, Debug, Default)]
struct Seen {
    kind: &'static str,
    version: u64,
    provider: String,
    wall_ms: u64,
    until_wall_ms: u64,
    probe: bool,
}

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Seen>>>);

struct Fields<'a>(&'a mut Seen);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "provider" {
            self.0.provider = format!("{value:?}");
        }
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "provider" {
            self.0.provider = value.to_owned();
        }
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "version" => self.0.version = value,
            "wall_ms" => self.0.wall_ms = value,
            "until_wall_ms" => self.0.until_wall_ms = value,
            _ => {}
        }
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        if field.name() == "probe" {
            self.0.probe = value;
        }
    }
}

impl<S: tracing::Subscriber> Layer<S> for Recorder {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let kind = match event.metadata().target() {
            "llm_failover::send" => "send",
            "llm_failover::breaker" => "open",
            _ => return,
        };
        let mut seen = Seen {
            kind,
            ..Seen::default()
        };
        event.record(&mut Fields(&mut seen));
        self.0.lock().unwrap().push(seen);
    }
}

fn faults() -> Vec<(f64, Fault)> {
    vec![
        (0.025, Fault::Status { status: 500 }),
        (0.010, Fault::Status { status: 502 }),
        (0.010, Fault::Status { status: 503 }),
        (0.015, Fault::Overloaded),
        (0.010, Fault::Reset),
        (0.004, Fault::Hang { ms: None }),
        (0.010, Fault::Truncated),
        (0.010, Fault::MalformedJson),
        (0.005, Fault::Html { status: 502 }),
        (0.010, Fault::MalformedHeaders),
        (
            0.010,
            Fault::RateLimit {
                retry_after: RetryAfter::Bucket,
            },
        ),
        (
            0.005,
            Fault::RateLimit {
                retry_after: RetryAfter::Absent,
            },
        ),
        (
            0.005,
            Fault::RateLimit {
                retry_after: RetryAfter::Seconds(2),
            },
        ),
        (
            0.003,
            Fault::RateLimit {
                retry_after: RetryAfter::HttpDate(3),
            },
        ),
        // A `Retry-After` years ahead is not in the mix: it is a provider saying "not for a long
        // while", which closes it for the bounded maximum (router tests), not a fault to
        // survive. Its share goes to the unparseable form.
        (
            0.005,
            Fault::RateLimit {
                retry_after: RetryAfter::Invalid,
            },
        ),
        (
            0.003,
            Fault::RateLimit {
                retry_after: RetryAfter::Past,
            },
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_requests_through_mixed_faults_each_end_once_and_never_hit_an_open_breaker() {
    let n: usize = std::env::var("SOAK_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let recorder = Recorder::default();
    // The recorder sees this test's requests only (the other tests of the binary run
    // alongside): it is the subscriber of each request's task, wherever it is polled.
    let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(recorder.clone()));

    // The emulator dates its HTTP-date `Retry-After`s by the real wall clock: the manual clock
    // starts there too, or "3 s ahead" would read as months ahead.
    let clock = ManualClock::with_wall(TokioClock.wall());
    let emu = Emulator::builder()
        .provider(ProviderConfig::openai("openai").with_hang_ms(1_000))
        .provider(ProviderConfig::anthropic("anthropic").with_hang_ms(1_000))
        .seed(7)
        .start()
        .await
        .unwrap();
    let total_p: f64 = faults().iter().map(|(p, _)| p).sum();
    assert!(
        (0.14..=0.16).contains(&total_p),
        "about 15 % faults: {total_p}"
    );
    emu.set_fault_mix("openai", 11, faults());
    emu.set_fault_mix("anthropic", 12, faults());

    let mut policy = Policy::default();
    policy.request_timeout = Duration::from_millis(250);
    // Generous: on the manual clock, other tasks' waits move time for everyone.
    policy.deadline = Duration::from_secs(3600);
    policy.max_attempts = 4;
    let client = Client::builder()
        .clock(Arc::new(clock.clone()))
        .rng(Arc::new(SeededRng::new(5)))
        .policy(policy.clone())
        .provider(
            Arc::new(
                OpenAi::new(
                    ProviderId::new("openai"),
                    emu.base_url("openai").parse().unwrap(),
                )
                .with_chat_model("gpt-4o-mini"),
            ),
            ProviderSettings::new().credential(Credential::new(emu.key("openai"))),
        )
        .provider(
            Arc::new(
                Anthropic::new(
                    ProviderId::new("anthropic"),
                    emu.base_url("anthropic").parse().unwrap(),
                )
                .with_model("claude-3-5-haiku-latest"),
            ),
            ProviderSettings::new().credential(Credential::new(emu.key("anthropic"))),
        )
        .build()
        .unwrap();

    let sem = Arc::new(tokio::sync::Semaphore::new(32));
    let soak_start = tokio::time::Instant::now();
    let wall_budget = policy.request_timeout * policy.max_attempts + Duration::from_secs(2);
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let (client, sem, clock) = (client.clone(), sem.clone(), clock.clone());
            tokio::spawn(
                async move {
                    let _slot = sem.acquire_owned().await.unwrap();
                    let (t0, real0) = (clock.now(), tokio::time::Instant::now());
                    let r = client
                        .chat(ChatRequest::from_prompt(format!("soak item {i}")).max_tokens(16))
                        .await;
                    (r, clock.now() - t0, real0.elapsed())
                }
                .with_subscriber(dispatch.clone()),
            )
        })
        .collect();

    let mut outcomes: HashMap<&'static str, usize> = HashMap::new();
    for t in tasks {
        let (r, simulated, real) = t.await.expect("no task panicked");
        *outcomes
            .entry(match &r {
                Ok(_) => "ok",
                Err(e) => e.kind().as_str(),
            })
            .or_default() += 1;
        // On the manual clock, other tasks' waits move time while a request is on the wire,
        // so its simulated duration can exceed the deadline without the router ever starting
        // an attempt or a wait past it; only the wall-clock bound below is meaningful here.
        let _ = simulated;
        assert!(real <= wall_budget, "{real:?} of wall time: {r:?}");
    }
    let soak_real = soak_start.elapsed();
    let total: usize = outcomes.values().sum();
    assert_eq!(
        total, n,
        "every request ended in exactly one outcome: {outcomes:?}"
    );
    let ok = outcomes.get("ok").copied().unwrap_or(0);
    assert!(ok * 100 >= n * 95, "{outcomes:?}");

    // Nothing sent into an open breaker. Events carry the version of the breaker's state
    // they saw (a send) or made (an opening): a send that saw an opening's state or a later
    // one must come at or after that opening's end (then it is the half-open probe, or the
    // breaker has closed since). At equal versions the opening comes first: the send saw it.
    let mut events = recorder.0.lock().unwrap().clone();
    events.sort_by_key(|e| (e.provider.clone(), e.version, e.kind != "open"));
    let opens = events.iter().filter(|e| e.kind == "open").count();
    let sends = events.iter().filter(|e| e.kind == "send").count();
    let mut open_until: HashMap<String, u64> = HashMap::new();
    let mut violations = Vec::new();
    for e in &events {
        match e.kind {
            "open" => {
                let u = open_until.entry(e.provider.clone()).or_default();
                *u = (*u).max(e.until_wall_ms);
            }
            _ => {
                if e.wall_ms < open_until.get(&e.provider).copied().unwrap_or(0) {
                    violations.push(e.clone());
                }
            }
        }
    }
    let faults: u64 = emu.all_counters().values().map(|c| c.faults).sum();
    println!(
        "soak: {n} requests in {soak_real:.1?}, outcomes {outcomes:?}, {sends} sends, {opens} breaker openings, {faults} \
         faults injected, {} sends into an open breaker",
        violations.len()
    );
    assert!(opens > 0, "the mix opened breakers");
    assert!(sends >= n);
    if let Some(first) = violations.first() {
        let context: Vec<_> = events
            .iter()
            .filter(|e| e.provider == first.provider && e.version <= first.version)
            .rev()
            .take(8)
            .collect();
        panic!("sent into an open breaker: {first:?}; just before: {context:#?}");
    }
    assert!(faults as f64 >= n as f64 * 0.10, "{faults} faults");
}
