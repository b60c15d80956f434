//! Shared limits on a Redis Cluster of three primaries, as managed Redis at scale runs: each
//! (provider, model, account) has one hash tag, so its state and probe live on one primary and
//! one script call is atomic there; the targets spread over the primaries. A single-node
//! connection to the same cluster gets `MOVED` for every key another node owns.

use std::time::Duration;

use llm_failover::ProviderId;
use llm_failover::ratelimit::{
    Demand, LimitKey, LimiterStore, Limits, Reservation, SharedSettings, Tightening,
};
use llm_failover::redis::RedisStore;
use tokio::time::Instant;

use crate::support::redis::RedisCluster;

#[tokio::test]
async fn two_clients_on_a_three_primary_cluster_keep_every_targets_limit_and_spread_over_the_primaries()
 {
    let cluster = RedisCluster::start();
    let settings = SharedSettings::new(cluster.url())
        .cluster(true)
        .timeout(Duration::from_secs(2));
    let stores = [
        RedisStore::new(settings.clone()).unwrap(),
        RedisStore::new(settings).unwrap(),
    ];
    stores[0].check().await.unwrap();
    let limits = Limits::none().with_rpm(5);
    let one = Demand::one_request();
    let now = Instant::now();
    for p in 0..30 {
        let key = LimitKey::new(ProviderId::new(format!("provider-{p}")), "m");
        let mut granted = 0;
        for i in 0..8 {
            let r = stores[i % 2]
                .reserve(&key, &limits, one, Duration::ZERO, now)
                .await
                .unwrap();
            if matches!(r, Reservation::Granted { .. }) {
                granted += 1;
            }
        }
        assert_eq!(
            granted, 5,
            "provider-{p}: the two clients keep to one limit"
        );
    }
    let per_node = cluster.keys_per_node();
    assert!(
        per_node.iter().all(|n| *n > 0),
        "30 targets spread over the three primaries: {per_node:?}"
    );

    // The same cluster through a single-node connection: the keys another primary owns
    // answer MOVED, an error (never a silent grant).
    let single =
        RedisStore::new(SharedSettings::new(cluster.url()).timeout(Duration::from_secs(2)))
            .unwrap();
    let mut moved = 0;
    for p in 0..30 {
        let key = LimitKey::new(ProviderId::new(format!("provider-{p}")), "m");
        if let Err(e) = single
            .reserve(&key, &limits, one, Duration::ZERO, now)
            .await
        {
            assert!(e.to_string().to_ascii_uppercase().contains("MOVED"), "{e}");
            moved += 1;
        }
    }
    assert!(moved > 0, "a single-node connection meets MOVED");
}

/// A primary killed mid-run (no replica takes over its slots): the targets it owned are in
/// the documented Redis-down mode (fail closed: nothing admitted, a wait until the next try),
/// the others go on at their limits; no error, no panic.
#[tokio::test]
async fn a_killed_primary_puts_its_targets_in_the_down_mode_and_the_others_go_on() {
    let mut cluster = RedisCluster::start();
    let store = RedisStore::new(
        SharedSettings::new(cluster.url())
            .cluster(true)
            .timeout(Duration::from_millis(500)),
    )
    .unwrap();
    let limits = Limits::none().with_rpm(5);
    let one = Demand::one_request();
    let now = Instant::now();
    let keys: Vec<LimitKey> = (0..30)
        .map(|p| LimitKey::new(ProviderId::new(format!("provider-{p}")), "m"))
        .collect();
    for key in &keys {
        let r = store
            .reserve(key, &limits, one, Duration::ZERO, now)
            .await
            .unwrap();
        assert!(matches!(r, Reservation::Granted { .. }), "{r:?}");
    }
    let before = cluster.keys_per_node();
    cluster.nodes[2].kill();
    let (mut granted, mut waiting) = (0, 0);
    for key in &keys {
        match store
            .reserve(key, &limits, one, Duration::ZERO, now)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
        {
            Reservation::Granted { .. } => granted += 1,
            Reservation::NotUntil { .. } => waiting += 1,
            other => panic!("{other:?}"),
        }
    }
    assert!(granted > 0, "the live primaries' targets go on: {before:?}");
    assert!(waiting > 0, "the dead primary's targets wait: {before:?}");
}

/// Gates on a cluster: the script's PUBLISH on the primary that owns a target reaches every
/// node, so a store listening on the seed node hears a gate raised for any target, whichever
/// primary owns it.
#[tokio::test]
async fn a_gate_raised_on_any_primary_is_heard_through_the_seed_node() {
    let cluster = RedisCluster::start();
    let t0 = Instant::now();
    let store = || {
        RedisStore::new(
            SharedSettings::new(cluster.url())
                .cluster(true)
                .timeout(Duration::from_secs(2)),
        )
        .unwrap()
        .on_virtual_clock(t0)
    };
    let (a, b) = (store(), store());
    let limits = Limits::none().with_rpm(60);
    let one = Demand::one_request();
    let keys: Vec<LimitKey> = (0..12)
        .map(|p| LimitKey::new(ProviderId::new(format!("provider-{p}")), "m"))
        .collect();
    for k in &keys {
        b.reserve(k, &limits, one, Duration::ZERO, t0)
            .await
            .unwrap();
    }
    tokio::time::timeout(Duration::from_secs(10), b.until(RedisStore::is_listening))
        .await
        .expect("never subscribed");
    for k in &keys {
        let mut gate = Tightening::default();
        gate.gate_until = Some(t0 + Duration::from_secs(5));
        a.raise(k, gate, t0).await.unwrap();
    }
    let heard = b.until(|b| keys.iter().all(|k| b.announcements(k) > 0));
    tokio::time::timeout(Duration::from_secs(10), heard)
        .await
        .expect("a gate on another primary was never heard");
    assert!(cluster.keys_per_node().iter().all(|n| *n > 0));
}
