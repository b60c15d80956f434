//! Properties of the limiter: however many callers race for a bucket, admissions never exceed
//! what the bucket allows — over any interval, admitted cost ≤ capacity + refill × interval
//! length; and whatever a provider stated before, its latest statement is believed both ways.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use llm_failover::ProviderId;
use llm_failover::clock::{Clock, TokioClock};
use llm_failover::config::Limits;
use llm_failover::ratelimit::{
    BucketSnapshot, Demand, Drain, LimitKey, LimitReport, LimiterStore, MemoryStore, Per,
    Reservation, Tightening, Window,
};
use proptest::prelude::*;
use proptest::test_runner::{Config as PropConfig, RngAlgorithm, TestRng, TestRunner};

/// A runtime on paused time: sleeps advance the clock at once.
fn paused() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

fn check(tpm: u64, rpm: u64, costs: Vec<u64>) -> Result<(), TestCaseError> {
    paused().block_on(async move {
        let clock: Arc<dyn Clock> = Arc::new(TokioClock);
        let store: Arc<dyn LimiterStore> = Arc::new(MemoryStore::new());
        let limits = Limits::none().with_tpm(tpm).with_rpm(rpm);
        let key = LimitKey::new(ProviderId::new("p"), "m");
        let start = clock.now();
        let admitted = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for cost in costs {
            let (store, key, admitted, clock) =
                (store.clone(), key.clone(), admitted.clone(), clock.clone());
            tasks.push(tokio::spawn(async move {
                let c = Demand {
                    requests: 1,
                    input_tokens: cost,
                    output_tokens: 0,
                    audio_seconds: 0,
                };
                let booked = clock.now();
                match store
                    .reserve(&key, &limits, c, Duration::from_secs(86_400), booked)
                    .await
                    .unwrap()
                {
                    Reservation::Granted { wait, .. } => {
                        clock.sleep_until(booked + wait).await;
                        admitted.lock().unwrap().push((clock.now() - start, cost));
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let mut events = admitted.lock().unwrap().clone();
        events.sort();
        let per_sec_t = tpm as f64 / 60.0;
        let per_sec_r = rpm as f64 / 60.0;
        for i in 0..events.len() {
            let (mut tokens, mut requests) = (0.0, 0.0);
            for j in i..events.len() {
                tokens += events[j].1 as f64;
                requests += 1.0;
                let span = (events[j].0 - events[i].0).as_secs_f64();
                prop_assert!(
                    tokens <= tpm as f64 + per_sec_t * span + 1e-6,
                    "{tokens} tokens admitted in {span}s with tpm {tpm}"
                );
                prop_assert!(
                    requests <= rpm as f64 + per_sec_r * span + 1e-6,
                    "{requests} requests admitted in {span}s with rpm {rpm}"
                );
            }
        }
        Ok(())
    })
}

#[test]
fn a_thousand_concurrent_callers_never_over_admit() {
    let mut runner = TestRunner::new_with_rng(
        PropConfig {
            cases: 12,
            ..PropConfig::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]),
    );
    let strategy = (1_000u64..50_000, 10u64..500).prop_flat_map(|(tpm, rpm)| {
        (
            Just(tpm),
            Just(rpm),
            proptest::collection::vec(1u64..=tpm, 1000),
        )
    });
    runner
        .run(&strategy, |(tpm, rpm, costs)| check(tpm, rpm, costs))
        .unwrap();
}

/// One step of a history the limiter may see from a provider that states its request limit.
#[derive(Clone, Debug)]
enum Step {
    /// A request is booked.
    Book,
    /// The answer to the `n`-th booking so far (modulo their number) states `remaining` of the
    /// limit, full again in `reset_ms`.
    Answer {
        n: usize,
        remaining: u64,
        reset_ms: u64,
    },
    /// A 429 about requests, with a stated delay.
    Throttled { delay_ms: u64 },
    /// Time passes.
    Advance { ms: u64 },
}

fn step(limit: u64) -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => Just(Step::Book),
        4 => (any::<usize>(), 0..=limit, 1u64..120_000)
            .prop_map(|(n, remaining, reset_ms)| Step::Answer { n, remaining, reset_ms }),
        1 => (1u64..30_000).prop_map(|delay_ms| Step::Throttled { delay_ms }),
        3 => (0u64..20_000).prop_map(|ms| Step::Advance { ms }),
    ]
}

fn stated(limit: u64, remaining: u64, reset_at: tokio::time::Instant) -> LimitReport {
    let mut report = LimitReport::default();
    report.requests = Some(Window {
        limit: Some(limit),
        remaining: Some(remaining),
        reset_at: Some(reset_at),
        per: Per::Unknown,
    });
    report
}

/// Whatever came before, the levels stay within the stated limit, the gate never moves
/// earlier, and the provider's latest word is believed both ways: a stated room beyond what
/// is in flight admits at once, a stated 0 waits no longer than its reset says.
fn believes_the_latest_statement(
    limit: u64,
    steps: Vec<Step>,
    last_remaining: u64,
    last_reset_ms: u64,
) -> Result<(), TestCaseError> {
    paused().block_on(async move {
        let store = MemoryStore::new();
        let key = LimitKey::new(ProviderId::new("p"), "m");
        let limits = Limits::none();
        let day = Duration::from_secs(86_400);
        let mut bookings = Vec::new();
        // Bookings the limiter logs (made once something was stated) and not yet answered:
        // it counts them as in flight, against what the provider says remains.
        let mut unanswered: Vec<(u64, tokio::time::Instant)> = Vec::new();
        let mut stating = false;
        let mut gate: Option<tokio::time::Instant> = None;
        let book = |now| store.reserve(&key, &limits, Demand::one_request(), day, now);
        for s in steps {
            let now = tokio::time::Instant::now();
            match s {
                Step::Book => {
                    if let Reservation::Granted { booking, .. } = book(now).await.unwrap() {
                        bookings.push(booking);
                        if stating {
                            unanswered.push((booking, now));
                        }
                    }
                }
                Step::Answer {
                    n,
                    remaining,
                    reset_ms,
                } if !bookings.is_empty() => {
                    let mut t = Tightening::default();
                    t.report = Some(stated(
                        limit,
                        remaining,
                        now + Duration::from_millis(reset_ms),
                    ));
                    let answered = bookings[n % bookings.len()];
                    t.booking = Some(answered);
                    store.raise(&key, t, now).await.unwrap();
                    unanswered.retain(|(b, _)| *b != answered);
                    stating = true;
                }
                Step::Answer { .. } => {}
                Step::Throttled { delay_ms } => {
                    let mut t = Tightening::default();
                    t.gate_until = Some(now + Duration::from_millis(delay_ms));
                    t.drain = Drain::none();
                    t.drain.requests = true;
                    store.raise(&key, t, now).await.unwrap();
                }
                Step::Advance { ms } => {
                    tokio::time::advance(Duration::from_millis(ms)).await;
                }
            }
            let now = tokio::time::Instant::now();
            let snap = store.peek(&key, Demand::one_request(), now).await.unwrap();
            if let Some(BucketSnapshot {
                level, capacity, ..
            }) = snap.requests
            {
                prop_assert!(level.is_finite(), "a level that is not a number: {snap:?}");
                prop_assert!(
                    level <= capacity as f64 + 1e-9,
                    "a level above capacity: {snap:?}"
                );
                // Before any statement the pace learned from 429s has its own capacity.
                prop_assert!(
                    !stating || capacity <= limit,
                    "a capacity above the stated limit {limit}: {snap:?}"
                );
            }
            if let Some(g) = gate.filter(|g| *g > now) {
                prop_assert!(
                    snap.gate_until.is_some_and(|at| at >= g),
                    "the gate moved earlier: {:?} after {:?}",
                    snap.gate_until,
                    g
                );
            }
            gate = snap.gate_until.or(gate);
        }
        // Past every gate, one more request, and its answer: the provider's latest word.
        if let Some(g) = gate {
            tokio::time::advance(g.saturating_duration_since(tokio::time::Instant::now())).await;
        }
        let now = tokio::time::Instant::now();
        let Reservation::Granted { booking, .. } = book(now).await.unwrap() else {
            // Booked within a day whatever came before: a stated limit refills within its reset.
            prop_assert!(false, "a request not admitted within a day");
            unreachable!()
        };
        // In flight by the limiter's count: logged, unanswered, at most two minutes old.
        let in_flight = unanswered
            .iter()
            .filter(|(_, at)| now.saturating_duration_since(*at) <= Duration::from_secs(120))
            .count() as u64;
        let reset = Duration::from_millis(last_reset_ms);
        let mut t = Tightening::default();
        t.report = Some(stated(limit, last_remaining, now + reset));
        t.booking = Some(booking);
        store.raise(&key, t, now).await.unwrap();
        let wait = store
            .peek(&key, Demand::one_request(), now)
            .await
            .unwrap()
            .wait
            .expect("one request always fits a limit of one or more");
        if last_remaining > in_flight {
            prop_assert_eq!(
                wait,
                Duration::ZERO,
                "stated room of {} ({} in flight) not believed",
                last_remaining,
                in_flight
            );
        } else if last_remaining == 0 {
            // "None left, full again in `reset`" says the window outright (the deepest
            // observation there is): one more request and those in flight fit within that
            // many windows. (A shallower statement teaches the window only when no deeper
            // one came before, so it bounds nothing here.)
            let windows = (1 + in_flight).div_ceil(limit) as u32;
            prop_assert!(
                wait <= reset * windows + Duration::from_millis(1),
                "{} left of {}, {} in flight, full again in {:?}: waited {:?}",
                last_remaining,
                limit,
                in_flight,
                reset,
                wait
            );
        }
        Ok(())
    })
}

#[test]
fn the_latest_statement_is_believed_whatever_came_before() {
    let mut runner = TestRunner::new_with_rng(
        PropConfig {
            cases: std::env::var("PROPTEST_CASES")
                .ok()
                .and_then(|c| c.parse().ok())
                .unwrap_or(256),
            ..PropConfig::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &[16; 32]),
    );
    let strategy = (1u64..200).prop_flat_map(|limit| {
        (
            Just(limit),
            proptest::collection::vec(step(limit), 0..60),
            prop_oneof![Just(0), 0..=limit],
            1u64..120_000,
        )
    });
    runner
        .run(&strategy, |(limit, steps, remaining, reset_ms)| {
            believes_the_latest_statement(limit, steps, remaining, reset_ms)
        })
        .unwrap();
}
