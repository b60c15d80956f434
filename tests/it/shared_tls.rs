//! Redis over TLS, as managed Redis runs it (ElastiCache in-transit encryption, Upstash,
//! Azure Cache, Memorystore): a real `redis-server` speaking TLS only on loopback, with
//! certificates this test makes. The shared limiter store and the Redis cache work through
//! it with the CA given; a server whose certificate the client does not trust, or that wants
//! a client certificate the client lacks, is a `Config` error that names the host and why —
//! never a silent fall back to plain text, never a Redis-down mode that would wait forever.

use std::sync::Arc;
use std::time::Duration;

use llm_failover::cache::Cache;
use llm_failover::provider::openai::OpenAi;
use llm_failover::ratelimit::{
    Demand, LimitKey, LimiterStore, Limits, RedisTls, Reservation, SharedSettings,
};
use llm_failover::redis::RedisStore;
use llm_failover::{Client, ErrorKind, ProviderId, ProviderSettings};
use tokio::time::Instant;

use crate::support::certs::Certs;
use crate::support::redis::RedisServer;

fn certs(name: &str) -> Certs {
    Certs::make(&std::env::temp_dir().join(format!(
        "llm-failover-redis-tls-{}-{name}",
        std::process::id()
    )))
}

fn client_with(shared: Option<SharedSettings>, cache: Option<Cache>) -> Client {
    let local = OpenAi::new(
        ProviderId::new("local"),
        "http://127.0.0.1:9/v1".parse().unwrap(),
    );
    let mut b = Client::builder().provider(Arc::new(local), ProviderSettings::new());
    if let Some(s) = shared {
        b = b.shared(s);
    }
    if let Some(c) = cache {
        b = b.cache(c);
    }
    b.build().unwrap()
}

#[tokio::test]
async fn the_shared_store_books_over_tls_with_the_ca_given() {
    let certs = certs("books");
    let redis = RedisServer::with_tls(&certs, false);
    assert!(redis.url().starts_with("rediss://"));
    let settings = SharedSettings::new(redis.url())
        .timeout(Duration::from_secs(2))
        .tls(RedisTls::new().ca_file(&certs.ca));
    client_with(Some(settings.clone()), None)
        .check_stores()
        .await
        .unwrap();
    let store = RedisStore::new(settings).unwrap();
    let key = LimitKey::new(ProviderId::new("p"), "m");
    let limits = Limits::none().with_rpm(10);
    let now = Instant::now();
    for _ in 0..10 {
        let r = store
            .reserve(&key, &limits, Demand::one_request(), Duration::ZERO, now)
            .await
            .unwrap();
        assert!(matches!(r, Reservation::Granted { .. }), "{r:?}");
    }
    let r = store
        .reserve(&key, &limits, Demand::one_request(), Duration::ZERO, now)
        .await
        .unwrap();
    assert!(
        matches!(r, Reservation::NotUntil { .. }),
        "the 11th waits: {r:?}"
    );
}

#[tokio::test]
async fn an_untrusted_server_and_a_missing_client_certificate_are_config_errors() {
    let certs = certs("refused");
    let redis = RedisServer::with_tls(&certs, false);
    let host = format!("127.0.0.1:{}", redis.port());
    let localhost = redis.url().replace("127.0.0.1", "localhost");
    // (url, tls, what the error says)
    let table: Vec<(String, RedisTls, &str)> = vec![
        (
            redis.url(),
            RedisTls::new().ca_file(&certs.other_ca),
            "certificate",
        ),
        // The platform's roots do not know the test's CA.
        (redis.url(), RedisTls::new(), "certificate"),
    ];
    for (url, tls, says) in &table {
        let settings = SharedSettings::new(url)
            .timeout(Duration::from_secs(2))
            .tls(tls.clone());
        let e = client_with(Some(settings), None)
            .check_stores()
            .await
            .expect_err(says);
        assert_eq!(e.kind(), ErrorKind::Config, "{tls:?}: {e}");
        let text = e.to_string();
        assert!(
            text.contains(says) && text.contains(&host),
            "{tls:?}: {text}"
        );
    }
    // `localhost` is a name the certificate holds too: the CA given, it is trusted.
    let settings = SharedSettings::new(localhost).tls(RedisTls::new().ca_file(&certs.ca));
    client_with(Some(settings), None)
        .check_stores()
        .await
        .unwrap();

    // A server that wants a client certificate.
    let strict = RedisServer::with_tls(&certs, true);
    let without = SharedSettings::new(strict.url())
        .timeout(Duration::from_secs(2))
        .tls(RedisTls::new().ca_file(&certs.ca));
    let e = client_with(Some(without), None).check_stores().await;
    assert_eq!(e.map_err(|e| e.kind()), Err(ErrorKind::Config));
    let with = SharedSettings::new(strict.url()).tls(
        RedisTls::new()
            .ca_file(&certs.ca)
            .client_cert(&certs.client_cert, &certs.client_key),
    );
    client_with(Some(with), None).check_stores().await.unwrap();
}

#[tokio::test]
async fn the_redis_cache_speaks_tls_with_the_ca_given_and_refuses_another() {
    let certs = certs("cache");
    let redis = RedisServer::with_tls(&certs, false);
    let good = Cache::builder(redis.url())
        .redis_tls(RedisTls::new().ca_file(&certs.ca))
        .build()
        .unwrap();
    client_with(None, Some(good)).check_stores().await.unwrap();
    let bad = Cache::builder(redis.url())
        .redis_tls(RedisTls::new().ca_file(&certs.other_ca))
        .build()
        .unwrap();
    let e = client_with(None, Some(bad))
        .check_stores()
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Config, "{e}");
}

#[tokio::test]
async fn providers_toml_names_tls_for_shared_limits() {
    let certs = certs("toml");
    let redis = RedisServer::with_tls(&certs, true);
    let toml = format!(
        r#"default_environment = "e"
[environments.e]
chat = ["p"]
[providers.p]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
model = "m"
auth = "none"
[shared]
redis_url = "{}"
tls_ca_file = "{}"
tls_client_cert_file = "{}"
tls_client_key_file = "{}"
"#,
        redis.url(),
        certs.ca.display(),
        certs.client_cert.display(),
        certs.client_key.display()
    );
    let config = llm_failover::Config::from_toml_str(&toml).unwrap();
    let client = Client::builder().config(config).build().unwrap();
    assert_eq!(
        client.shared().map(|s| s.tls.ca_file.clone()),
        Some(Some(certs.ca.clone()))
    );
    client.check_stores().await.unwrap();
}
