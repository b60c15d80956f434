//! The response cache through the client: a repeated request is answered from the cache
//! (nothing sent, `Origin::Cache`), per account, until its TTL; only whole answers are kept;
//! a stream is kept when it ends and replayed as one; bypass and refresh; identical requests
//! in flight at once are sent once; a corrupt, locked or vanished backend is a miss and never
//! fails the request.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use llm_failover::cache::{Cache, CacheMode};
use llm_failover::clock::ManualClock;
use llm_failover::rng::FixedRng;
use llm_failover::{
    AudioInput, ChatRequest, Client, Credential, ErrorKind, Origin, ProviderSettings,
    RequestOptions, TranscriptionRequest,
};
use llm_failover_emulator::scripted::{Reply, ScriptedServer};

use crate::support::examples::TempDir;
use crate::support::redis::RedisServer;
use crate::support::*;

/// A client over OpenAI-format `servers` in failover order, each sending `key`, with `cache`.
fn cached(servers: &[(&str, &ScriptedServer)], key: &str, cache: &Cache) -> Harness {
    let clock = ManualClock::new();
    let mut b = Client::builder()
        .clock(Arc::new(clock.clone()))
        .rng(Arc::new(FixedRng::new([0.5])))
        .policy(policy())
        .cache(cache.clone());
    for (name, server) in servers {
        b = b.provider(
            openai(name, server),
            ProviderSettings::new().credential(Credential::new(key)),
        );
    }
    Harness {
        client: b.build().unwrap(),
        clock,
    }
}

fn question(n: u32) -> ChatRequest {
    ChatRequest::new()
        .system("Be brief.")
        .user(format!("Question {n}?"))
        .max_tokens(32)
}

#[tokio::test]
async fn a_repeated_request_is_answered_from_the_cache_without_sending() {
    let a = ScriptedServer::start().await;
    a.push(CHAT, ok("Because of Rayleigh scattering."));
    let cache = Cache::memory();
    let h = cached(&[("a", &a)], SENTINEL, &cache);

    let first = h.client.chat(question(1)).await.unwrap();
    assert_eq!(first.origin, Origin::Provider);
    assert_eq!(first.attempts, 1);
    let again = h.client.chat(question(1)).await.unwrap();
    assert_eq!(a.count(CHAT), 1, "the second was not sent");
    assert!(again.origin.is_cache());
    assert_eq!(again.attempts, 0);
    assert_eq!(
        (again.text.as_str(), again.provider.as_str()),
        ("Because of Rayleigh scattering.", "a")
    );
    assert_eq!(again.usage, first.usage);

    let stats = h.client.stats().cache.unwrap();
    assert_eq!((stats.hits, stats.misses, stats.stores), (1, 1, 1));
    assert_eq!(
        stats.tokens_saved, 15,
        "the usage of the answer served again"
    );
    assert_eq!(h.client.stats().provider("a").map(|p| p.sent), Some(1));
}

#[tokio::test]
async fn another_accounts_key_never_gets_the_first_accounts_answers() {
    let a = ScriptedServer::start().await;
    a.push(CHAT, ok("for account one"));
    a.push(CHAT, ok("for account two"));
    a.push(CHAT, ok("for tenant acme"));
    let cache = Cache::memory();
    let one = cached(&[("a", &a)], "sk-account-one", &cache);
    let two = cached(&[("a", &a)], "sk-account-two", &cache);

    assert_eq!(
        one.client.chat(question(1)).await.unwrap().text,
        "for account one"
    );
    let theirs = two.client.chat(question(1)).await.unwrap();
    assert_eq!(theirs.text, "for account two");
    assert_eq!(theirs.origin, Origin::Provider);
    // A tenant's own key, on the first account's client: its own entry.
    let opts = RequestOptions::new()
        .account("acme")
        .credential("a", Credential::new("sk-acme"));
    let tenant = one.client.chat_with(question(1), &opts).await.unwrap();
    assert_eq!(
        (tenant.text.as_str(), tenant.origin),
        ("for tenant acme", Origin::Provider)
    );
    assert_eq!(a.count(CHAT), 3);
    // Each is served its own from now on.
    assert_eq!(
        one.client.chat(question(1)).await.unwrap().text,
        "for account one"
    );
    assert_eq!(
        two.client.chat(question(1)).await.unwrap().text,
        "for account two"
    );
    let again = one.client.chat_with(question(1), &opts).await.unwrap();
    assert_eq!(
        (again.text.as_str(), again.origin.is_cache()),
        ("for tenant acme", true)
    );
    assert_eq!(a.count(CHAT), 3);
}

#[tokio::test]
async fn an_answer_expires_after_its_ttl_by_the_clients_clock() {
    let a = ScriptedServer::start().await;
    a.push(CHAT, ok("old"));
    a.push(CHAT, ok("new"));
    let cache = Cache::builder("memory")
        .ttl(Duration::from_secs(60))
        .build()
        .unwrap();
    let h = cached(&[("a", &a)], SENTINEL, &cache);
    assert_eq!(h.client.chat(question(1)).await.unwrap().text, "old");
    h.clock.advance(Duration::from_millis(59_999));
    assert!(h.client.chat(question(1)).await.unwrap().origin.is_cache());
    h.clock.advance(Duration::from_millis(1));
    let fresh = h.client.chat(question(1)).await.unwrap();
    assert_eq!(
        (fresh.text.as_str(), fresh.origin),
        ("new", Origin::Provider)
    );
    assert_eq!(a.count(CHAT), 2);
}

#[tokio::test]
async fn errors_and_answers_the_filter_cut_are_never_kept() {
    let a = ScriptedServer::start().await;
    a.push(
        CHAT,
        Reply::json(
            400,
            error_body("invalid_request_error", None, "bad request"),
        ),
    );
    let filtered = ok_body("half an ans").replace("\"stop\"", "\"content_filter\"");
    a.push(CHAT, Reply::json(200, filtered));
    a.push(CHAT, ok("whole"));
    let cache = Cache::memory();
    let h = cached(&[("a", &a)], SENTINEL, &cache);

    let err = h.client.chat(question(1)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidRequest);
    let cut = h.client.chat(question(1)).await.unwrap();
    assert_eq!(cut.origin, Origin::Provider, "the error was not kept");
    let whole = h.client.chat(question(1)).await.unwrap();
    assert_eq!(
        (whole.text.as_str(), whole.origin),
        ("whole", Origin::Provider)
    );
    assert!(h.client.chat(question(1)).await.unwrap().origin.is_cache());
    assert_eq!(a.count(CHAT), 3);
    assert_eq!(cache.stats().stores, 1);
}

#[tokio::test]
async fn an_empty_answer_is_returned_but_not_kept_so_the_next_ask_is_sent() {
    let a = ScriptedServer::start().await;
    a.push(CHAT, ok(""));
    a.push(CHAT, ok("Because of Rayleigh scattering."));
    let cache = Cache::memory();
    let h = cached(&[("a", &a)], SENTINEL, &cache);

    let empty = h.client.chat(question(1)).await.unwrap();
    assert_eq!((empty.text.as_str(), empty.origin), ("", Origin::Provider));
    let real = h.client.chat(question(1)).await.unwrap();
    assert_eq!(
        (real.text.as_str(), real.origin),
        ("Because of Rayleigh scattering.", Origin::Provider),
        "the empty answer was not served from the cache"
    );
    assert_eq!(a.count(CHAT), 2);
    assert!(h.client.chat(question(1)).await.unwrap().origin.is_cache());
    assert_eq!(a.count(CHAT), 2);
    assert_eq!(cache.stats().stores, 1);
}

#[tokio::test]
async fn an_empty_stream_or_transcript_is_not_kept_either() {
    let a = ScriptedServer::start().await;
    a.push(CHAT, stream_of(""));
    a.push(CHAT, stream_of("Hello there"));
    let path = "/v1/audio/transcriptions";
    a.push(path, Reply::json(200, r#"{"text":""}"#));
    a.push(path, Reply::json(200, r#"{"text":"hello world"}"#));
    let cache = Cache::memory();
    let h = cached(&[("a", &a)], SENTINEL, &cache);

    let s = h.client.chat_stream(question(1)).await.unwrap();
    assert_eq!(text_of(s).await, "");
    let s = h.client.chat_stream(question(1)).await.unwrap();
    assert_eq!(
        s.origin(),
        Origin::Provider,
        "the empty stream was not kept"
    );
    assert_eq!(text_of(s).await, "Hello there");
    assert_eq!(a.count(CHAT), 2);

    let req = || {
        let audio = AudioInput::from_bytes(b"abc".to_vec(), "memo.mp3").unwrap();
        TranscriptionRequest::new(audio).model("whisper-1")
    };
    let silent = h.client.transcribe(req()).await.unwrap();
    assert_eq!(
        (silent.text.as_str(), silent.origin),
        ("", Origin::Provider)
    );
    let heard = h.client.transcribe(req()).await.unwrap();
    assert_eq!(
        (heard.text.as_str(), heard.origin),
        ("hello world", Origin::Provider),
        "the empty transcript was not kept"
    );
    assert_eq!(a.count(path), 2);
}

#[tokio::test]
async fn bypass_neither_reads_nor_keeps_and_refresh_replaces() {
    let a = ScriptedServer::start().await;
    for text in ["first", "bypassed", "refreshed"] {
        a.push(CHAT, ok(text));
    }
    let cache = Cache::memory();
    let h = cached(&[("a", &a)], SENTINEL, &cache);
    h.client.chat(question(1)).await.unwrap();
    let bypass = RequestOptions::new().cache(CacheMode::Bypass);
    let b = h.client.chat_with(question(1), &bypass).await.unwrap();
    assert_eq!((b.text.as_str(), b.origin), ("bypassed", Origin::Provider));
    assert_eq!(h.client.chat(question(1)).await.unwrap().text, "first");
    let refresh = RequestOptions::new().cache(CacheMode::Refresh);
    let r = h.client.chat_with(question(1), &refresh).await.unwrap();
    assert_eq!((r.text.as_str(), r.origin), ("refreshed", Origin::Provider));
    let after = h.client.chat(question(1)).await.unwrap();
    assert_eq!(
        (after.text.as_str(), after.origin.is_cache()),
        ("refreshed", true)
    );
    assert_eq!(a.count(CHAT), 3);
}

#[tokio::test]
async fn what_decides_the_answer_is_in_the_key() {
    let a = ScriptedServer::start().await;
    for i in 0..4 {
        a.push(CHAT, ok(&format!("answer {i}")));
    }
    let cache = Cache::memory();
    let h = cached(&[("a", &a)], SENTINEL, &cache);
    for req in [
        question(1),
        question(1).max_tokens(33),
        question(1).temperature(0.0),
        question(1).extra_body("seed", 7),
    ] {
        assert_eq!(h.client.chat(req).await.unwrap().origin, Origin::Provider);
    }
    assert!(
        h.client
            .chat(question(1).extra_body("seed", 7))
            .await
            .unwrap()
            .origin
            .is_cache()
    );
    assert_eq!(a.count(CHAT), 4);
}

/// OpenAI-format stream events for `text` in two pieces, a stop and usage.
fn stream_of(text: &str) -> Reply {
    let (head, tail) = text.split_at(text.len() / 2);
    let delta = |t: &str| {
        format!(
            "data: {{\"id\":\"c1\",\"model\":\"gpt-4o-mini\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{t}\"}},\"finish_reason\":null}}]}}\n\n"
        )
    };
    Reply::sse([
        delta(head),
        delta(tail),
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n".into(),
        "data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2,\"total_tokens\":11}}\n\n".into(),
        "data: [DONE]\n\n".into(),
    ])
}

async fn text_of(mut s: llm_failover::ChatStream) -> String {
    let mut text = String::new();
    while let Some(chunk) = s.next().await {
        text.push_str(&chunk.unwrap().delta);
    }
    text
}

#[tokio::test]
async fn a_whole_stream_is_kept_and_replayed_as_a_stream_and_a_cut_one_is_not() {
    let a = ScriptedServer::start().await;
    a.push(CHAT, stream_of("Hello there"));
    a.push(CHAT, stream_of("Dropped early"));
    a.push(CHAT, stream_of("Second try"));
    let cache = Cache::memory();
    let h = cached(&[("a", &a)], SENTINEL, &cache);

    let s = h.client.chat_stream(question(1)).await.unwrap();
    assert_eq!(s.origin(), Origin::Provider);
    assert_eq!(text_of(s).await, "Hello there");
    // Replayed as a stream, and as a whole answer: one key for both.
    let replay = h.client.chat_stream(question(1)).await.unwrap();
    assert!(replay.origin().is_cache());
    assert_eq!((replay.attempts(), replay.provider().as_str()), (0, "a"));
    let chunks: Vec<_> = replay.collect().await;
    let text: String = chunks
        .iter()
        .map(|c| c.as_ref().unwrap().delta.clone())
        .collect();
    assert_eq!(text, "Hello there");
    let last = chunks.last().unwrap().as_ref().unwrap();
    assert_eq!(last.usage.map(|u| u.total()), Some(11));
    let whole = h.client.chat(question(1)).await.unwrap();
    assert_eq!(
        (whole.text.as_str(), whole.origin.is_cache()),
        ("Hello there", true)
    );

    // A stream dropped after its first piece is not kept: the next one is sent.
    let mut s = h.client.chat_stream(question(2)).await.unwrap();
    s.next().await.unwrap().unwrap();
    drop(s);
    let s = h.client.chat_stream(question(2)).await.unwrap();
    assert_eq!(s.origin(), Origin::Provider);
    assert_eq!(text_of(s).await, "Second try");
    // Kept as it ended (the next identical request waits for the keeping, then hits).
    let kept = h.client.chat(question(2)).await.unwrap();
    assert_eq!(
        (kept.text.as_str(), kept.origin.is_cache()),
        ("Second try", true)
    );
    assert_eq!(a.count(CHAT), 3);
    assert_eq!(cache.stats().stores, 2);
}

#[tokio::test]
async fn a_transcription_is_kept_by_its_audios_hash() {
    let a = ScriptedServer::start().await;
    let path = "/v1/audio/transcriptions";
    a.push(path, Reply::json(200, r#"{"text":"hello world"}"#));
    a.push(path, Reply::json(200, r#"{"text":"other audio"}"#));
    let cache = Cache::memory();
    let h = cached(&[("a", &a)], SENTINEL, &cache);
    let audio = |b: &[u8]| AudioInput::from_bytes(b.to_vec(), "memo.mp3").unwrap();
    let req = |a: AudioInput| TranscriptionRequest::new(a).model("whisper-1");
    let first = h.client.transcribe(req(audio(b"abc"))).await.unwrap();
    assert_eq!(first.origin, Origin::Provider);
    // The same bytes under another name: the same audio.
    let same = AudioInput::from_bytes(b"abc".to_vec(), "copy.mp3").unwrap();
    let again = h.client.transcribe(req(same)).await.unwrap();
    assert_eq!(
        (again.text.as_str(), again.origin.is_cache()),
        ("hello world", true)
    );
    let other = h.client.transcribe(req(audio(b"abd"))).await.unwrap();
    assert_eq!(
        (other.text.as_str(), other.origin),
        ("other audio", Origin::Provider)
    );
    assert_eq!(a.count(path), 2);
}

#[tokio::test]
async fn a_failed_over_answer_is_kept_for_the_whole_order() {
    let (a, b) = (ScriptedServer::start().await, ScriptedServer::start().await);
    a.push(CHAT, Reply::status(503));
    b.push(CHAT, ok("from b"));
    let cache = Cache::memory();
    let h = cached(&[("a", &a), ("b", &b)], SENTINEL, &cache);
    assert_eq!(h.client.chat(question(1)).await.unwrap().text, "from b");
    let again = h.client.chat(question(1)).await.unwrap();
    assert_eq!(
        (again.provider.as_str(), again.origin.is_cache()),
        ("b", true)
    );
    assert_eq!((a.count(CHAT), b.count(CHAT)), (1, 1));
}

/// A server that counts the requests it receives and answers each only once released.
struct HeldServer {
    url: String,
    arrived: tokio::sync::watch::Receiver<usize>,
    release: tokio::sync::watch::Sender<bool>,
}

impl HeldServer {
    async fn start(body: String) -> HeldServer {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (count_tx, arrived) = tokio::sync::watch::channel(0usize);
        let (release, released) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let (count_tx, mut released, body) =
                    (count_tx.clone(), released.clone(), body.clone());
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 << 10];
                    let mut got = Vec::new();
                    // The request's head, then its body by its length.
                    loop {
                        let n = conn.read(&mut buf).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        got.extend_from_slice(&buf[..n]);
                        let text = String::from_utf8_lossy(&got);
                        if let Some(end) = text.find("\r\n\r\n") {
                            let len = text[..end]
                                .lines()
                                .find_map(|l| {
                                    l.to_ascii_lowercase()
                                        .strip_prefix("content-length:")
                                        .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                                })
                                .unwrap_or(0);
                            if got.len() >= end + 4 + len {
                                break;
                            }
                        }
                    }
                    count_tx.send_modify(|n| *n += 1);
                    let _ = released.wait_for(|r| *r).await;
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = conn.write_all(reply.as_bytes()).await;
                });
            }
        });
        HeldServer {
            url,
            arrived,
            release,
        }
    }
}

#[tokio::test]
async fn identical_requests_in_flight_at_once_are_sent_once() {
    let server = HeldServer::start(ok_body("coalesced")).await;
    let adapter = llm_failover::provider::openai::OpenAi::new(
        llm_failover::ProviderId::new("held"),
        format!("{}/v1", server.url).parse().unwrap(),
    )
    .with_chat_model("gpt-4o-mini");
    let cache = Cache::memory();
    // The tokio clock: a manual one would time the held request out at once.
    let client = Client::builder()
        .provider(
            Arc::new(adapter),
            ProviderSettings::new().credential(Credential::new(SENTINEL)),
        )
        .policy(policy())
        .cache(cache.clone())
        .build()
        .unwrap();
    let first = tokio::spawn({
        let c = client.clone();
        async move { c.chat(question(1)).await }
    });
    let mut arrived = server.arrived.clone();
    arrived.wait_for(|n| *n == 1).await.unwrap();
    let others: Vec<_> = (0..3)
        .map(|_| {
            let c = client.clone();
            tokio::spawn(async move { c.chat(question(1)).await })
        })
        .collect();
    // All three wait in the cache for the first one's answer before it is let through.
    for _ in 0..10_000 {
        if cache.waiting() == 3 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(
        cache.waiting(),
        3,
        "the identical requests wait for the first one"
    );
    server.release.send(true).unwrap();
    assert_eq!(first.await.unwrap().unwrap().origin, Origin::Provider);
    for other in others {
        let answer = other.await.unwrap().unwrap();
        assert_eq!(
            (answer.text.as_str(), answer.origin.is_cache()),
            ("coalesced", true)
        );
    }
    assert_eq!(
        *server.arrived.borrow(),
        1,
        "one request for four identical ones"
    );
    assert_eq!((cache.stats().hits, cache.stats().misses), (3, 1));
}

#[tokio::test]
async fn an_sqlite_cache_is_kept_across_clients_and_never_holds_the_key() {
    let dir = TempDir::new("cache", "sqlite");
    let file = dir.path("answers.sqlite");
    let a = ScriptedServer::start().await;
    a.push(CHAT, ok("kept on disk"));
    {
        let h = cached(&[("a", &a)], SENTINEL, &Cache::sqlite(&file));
        h.client.chat(question(1)).await.unwrap();
    }
    // A new client, a new cache on the same file: a rerun of the script.
    let cache = Cache::sqlite(&file);
    let h = cached(&[("a", &a)], SENTINEL, &cache);
    let again = h.client.chat(question(1)).await.unwrap();
    assert_eq!(
        (again.text.as_str(), again.origin.is_cache()),
        ("kept on disk", true)
    );
    assert_eq!(a.count(CHAT), 1);
    assert_eq!(cache.len().await.unwrap(), 1);
    // Neither the key nor the prompt is in the file (keys are hashes).
    let mut bytes = std::fs::read(&file).unwrap();
    for side in ["-wal", "-shm"] {
        bytes.extend(std::fs::read(format!("{}{side}", file.display())).unwrap_or_default());
    }
    let text = String::from_utf8_lossy(&bytes);
    assert!(!text.contains(SENTINEL));
    assert!(!text.contains("Question 1?"));
}

#[tokio::test]
async fn a_corrupt_cache_file_is_a_miss_with_a_warning_never_an_error() {
    let dir = TempDir::new("cache", "corrupt");
    let file = dir.path("answers.sqlite");
    std::fs::write(&file, vec![0x5a; 8192]).unwrap();
    let a = ScriptedServer::start().await;
    a.push(CHAT, ok("one"));
    a.push(CHAT, ok("two"));
    let cache = Cache::sqlite(&file);
    let h = cached(&[("a", &a)], SENTINEL, &cache);
    assert_eq!(h.client.chat(question(1)).await.unwrap().text, "one");
    let second = h.client.chat(question(1)).await.unwrap();
    assert_eq!(
        (second.text.as_str(), second.origin),
        ("two", Origin::Provider)
    );
    let stats = cache.stats();
    assert_eq!((stats.hits, stats.stores), (0, 0));
    assert!(stats.errors >= 2, "each failure counted: {stats:?}");
}

#[tokio::test]
async fn a_locked_cache_file_is_a_miss_never_an_error() {
    let dir = TempDir::new("cache", "locked");
    let file = dir.path("answers.sqlite");
    let a = ScriptedServer::start().await;
    a.push(CHAT, ok("before the lock"));
    a.push(CHAT, ok("while locked"));
    let cache = Cache::sqlite(&file);
    let h = cached(&[("a", &a)], SENTINEL, &cache);
    h.client.chat(question(1)).await.unwrap();
    // Another process holds the file's write lock (an exclusive transaction).
    let other = rusqlite::Connection::open(&file).unwrap();
    other.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let locked = h.client.chat(question(2)).await.unwrap();
    assert_eq!(
        (locked.text.as_str(), locked.origin),
        ("while locked", Origin::Provider)
    );
    assert!(cache.stats().errors >= 1, "{:?}", cache.stats());
    other.execute_batch("COMMIT").unwrap();
    drop(other);
    // Works again once released.
    assert!(h.client.chat(question(1)).await.unwrap().origin.is_cache());
}

#[tokio::test]
async fn a_redis_cache_is_shared_by_replicas_and_a_redis_gone_is_a_miss() {
    let mut redis = RedisServer::start();
    let a = ScriptedServer::start().await;
    a.push(CHAT, ok("shared"));
    a.push(CHAT, ok("redis down"));
    let replica = || {
        let cache = Cache::builder(redis.url())
            .redis_prefix(format!("t{}", std::process::id()))
            .build()
            .unwrap();
        cached(&[("a", &a)], SENTINEL, &cache)
    };
    let (one, two) = (replica(), replica());
    assert_eq!(
        one.client.chat(question(1)).await.unwrap().origin,
        Origin::Provider
    );
    let theirs = two.client.chat(question(1)).await.unwrap();
    assert_eq!(
        (theirs.text.as_str(), theirs.origin.is_cache()),
        ("shared", true)
    );
    assert_eq!(a.count(CHAT), 1);

    redis.kill();
    let down = two.client.chat(question(2)).await.unwrap();
    assert_eq!(
        (down.text.as_str(), down.origin),
        ("redis down", Origin::Provider)
    );
    assert!(two.client.cache().unwrap().stats().errors >= 1);
}

/// On a Redis Cluster of three primaries the cache spreads its entries over 16 hash tags (so
/// over every primary), a replica is served what another stored, and each shard keeps its
/// part of the bound.
#[tokio::test]
async fn a_redis_cache_on_a_cluster_spreads_its_entries_and_keeps_its_bound() {
    let cluster = crate::support::redis::RedisCluster::start();
    let a = ScriptedServer::start().await;
    for i in 0..40 {
        a.push(CHAT, ok(&format!("answer {i}")));
    }
    let cache = |max: u64| {
        Cache::builder(cluster.url())
            .redis_cluster(true)
            .redis_timeout(Duration::from_secs(2))
            .max_entries(max)
            .build()
            .unwrap()
    };
    let one = cached(&[("a", &a)], SENTINEL, &cache(1_000));
    one.client.check_stores().await.unwrap();
    for i in 0..40 {
        let answer = one.client.chat(question(i)).await.unwrap();
        assert_eq!(answer.origin, Origin::Provider, "{i}");
    }
    assert_eq!(one.client.cache().unwrap().len().await.unwrap(), 40);
    let per_node = cluster.keys_per_node();
    assert!(
        per_node.iter().all(|n| *n > 0),
        "spread over the primaries: {per_node:?}"
    );
    let two = cached(&[("a", &a)], SENTINEL, &cache(1_000));
    for i in 0..40 {
        assert!(
            two.client
                .chat(question(i))
                .await
                .unwrap()
                .origin
                .is_cache(),
            "{i}"
        );
    }
    assert_eq!(a.count(CHAT), 40, "the replica sent nothing");
    assert_eq!(one.client.cache().unwrap().stats().errors, 0);

    // A bound of 16 is one entry per shard: at most 16 are kept.
    let small = cache(16);
    small.clear().await.unwrap();
    assert!(small.is_empty().await.unwrap());
    let three = cached(&[("a", &a)], SENTINEL, &small);
    for i in 0..40 {
        a.push(CHAT, ok(&format!("again {i}")));
    }
    for i in 0..40 {
        three.client.chat(question(i)).await.unwrap();
    }
    let kept = small.len().await.unwrap();
    assert!((1..=16).contains(&kept), "{kept}");
}
