//! Property: however many callers race for a bucket, admissions never exceed what the bucket
//! allows — over any interval, admitted cost ≤ capacity + refill × interval length.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use llm_failover::clock::{Clock, TokioClock};
use llm_failover::config::Limits;
use llm_failover::ratelimit::{Cost, LimitKey, LimiterStore, MemoryStore, Reservation};
use llm_failover::ProviderId;
use proptest::prelude::*;
use proptest::test_runner::{Config as PropConfig, RngAlgorithm, TestRng, TestRunner};

fn check(tpm: u64, rpm: u64, costs: Vec<u64>) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async move {
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
                let c = Cost {
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
