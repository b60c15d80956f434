//! End to end: the SDK against the emulator over real loopback HTTP — failover across wire
//! formats, Retry-After honoured, terminal errors sent once, streaming, transcription, pacing
//! that keeps a server enforcing the same limits from ever answering 429, and a seeded soak.
//!
//! Where limits are involved, the emulator reads the SDK's manual clock (a shared time
//! source), so both sides' buckets see the same instants and the test runs in milliseconds.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use llm_failover::clock::{Clock, FastClock, ManualClock};
use llm_failover::config::{Limits, Policy};
use llm_failover::provider::Provider;
use llm_failover::provider::anthropic::Anthropic;
use llm_failover::provider::deepgram::Deepgram;
use llm_failover::provider::openai::OpenAi;
use llm_failover::rng::SeededRng;
use llm_failover::{
    AudioInput, ChatRequest, Client, Credential, ErrorKind, ProviderId, ProviderSettings,
    RequestOptions, TranscriptionRequest,
};
use llm_failover_emulator::{Emulator, Fault, ProviderConfig, RetryAfter, TimeSource};

fn shared(clock: &ManualClock) -> TimeSource {
    let c = clock.clone();
    TimeSource::new(move || (c.now(), c.wall()))
}

fn openai(emu: &Emulator, prefix: &str) -> Arc<dyn Provider> {
    Arc::new(
        OpenAi::new(
            ProviderId::new(prefix),
            emu.base_url(prefix).parse().unwrap(),
        )
        .with_chat_model("gpt-4o-mini")
        .with_transcription_model("whisper-1"),
    )
}

fn anthropic(emu: &Emulator, prefix: &str) -> Arc<dyn Provider> {
    Arc::new(
        Anthropic::new(
            ProviderId::new(prefix),
            emu.base_url(prefix).parse().unwrap(),
        )
        .with_model("claude-3-5-haiku-latest"),
    )
}

fn deepgram(emu: &Emulator, prefix: &str) -> Arc<dyn Provider> {
    Arc::new(
        Deepgram::new(
            ProviderId::new(prefix),
            emu.base_url(prefix).parse().unwrap(),
        )
        .with_model("nova-2"),
    )
}

fn policy() -> Policy {
    let mut p = Policy::default();
    p.request_timeout = Duration::from_secs(5);
    p.deadline = Duration::from_secs(3600);
    p
}

fn key(emu: &Emulator, prefix: &str) -> ProviderSettings {
    ProviderSettings::new().credential(Credential::new(emu.key(prefix)))
}

/// The emulated provider named `prefix` (`openai`, `anthropic` or `deepgram`, its wire
/// format) with the emulator's key.
fn keyed(emu: &Emulator, prefix: &str) -> (Arc<dyn Provider>, ProviderSettings) {
    let adapter = match prefix {
        "openai" => openai(emu, prefix),
        "anthropic" => anthropic(emu, prefix),
        "deepgram" => deepgram(emu, prefix),
        other => panic!("no emulated provider `{other}` in these tests"),
    };
    (adapter, key(emu, prefix))
}

fn client(
    clock: &ManualClock,
    policy: Policy,
    providers: Vec<(Arc<dyn Provider>, ProviderSettings)>,
) -> Client {
    let mut b = Client::builder()
        .clock(Arc::new(clock.clone()))
        .rng(Arc::new(SeededRng::new(7)))
        .policy(policy);
    for (p, s) in providers {
        b = b.provider(p, s);
    }
    b.build().unwrap()
}

#[tokio::test]
async fn fails_over_from_openai_format_to_anthropic_format() {
    let emu = Emulator::builder()
        .openai("openai")
        .anthropic("anthropic")
        .start()
        .await
        .unwrap();
    emu.script("openai", [Fault::Status { status: 503 }]);
    let clock = ManualClock::new();
    let c = client(
        &clock,
        policy(),
        vec![keyed(&emu, "openai"), keyed(&emu, "anthropic")],
    );
    let r = c
        .chat(ChatRequest::from_prompt("Say hello").max_tokens(20))
        .await
        .unwrap();
    assert_eq!(r.provider.as_str(), "anthropic");
    assert!(!r.text.is_empty());
    assert!(r.usage.is_some());
    assert_eq!(r.attempts, 2);
    assert_eq!(emu.counters("openai").server_errors, 1);
    assert_eq!(emu.counters("anthropic").ok, 1);
    assert!(clock.sleeps().is_empty());
}

#[tokio::test]
async fn honours_the_retry_after_the_emulator_sends() {
    let clock = ManualClock::new();
    let emu = Emulator::builder()
        .openai("openai")
        .time_source(shared(&clock))
        .start()
        .await
        .unwrap();
    emu.script(
        "openai",
        [Fault::RateLimit {
            retry_after: RetryAfter::Seconds(3),
        }],
    );
    let c = client(&clock, policy(), vec![keyed(&emu, "openai")]);
    c.chat(ChatRequest::from_prompt("hi").max_tokens(10))
        .await
        .unwrap();
    assert_eq!(clock.sleeps(), [Duration::from_secs(3)]);
    assert_eq!(emu.counters("openai").rate_limited, 1);
    assert_eq!(emu.counters("openai").ok, 1);
}

#[tokio::test]
async fn a_rejected_key_is_sent_once_and_never_failed_over() {
    let emu = Emulator::builder()
        .openai("openai")
        .anthropic("anthropic")
        .start()
        .await
        .unwrap();
    let clock = ManualClock::new();
    let c = client(
        &clock,
        policy(),
        vec![
            (
                openai(&emu, "openai"),
                ProviderSettings::new().credential(Credential::new("sk-wrong-key-000000")),
            ),
            keyed(&emu, "anthropic"),
        ],
    );
    let err = c
        .chat(ChatRequest::from_prompt("hi").max_tokens(10))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Auth, "{err}");
    assert!(!err.to_string().contains("sk-wrong-key-000000"), "{err}");
    assert_eq!(emu.counters("openai").requests, 1);
    assert_eq!(emu.counters("anthropic").requests, 0);
}

#[tokio::test]
async fn a_request_anthropic_rejects_is_terminal() {
    let emu = Emulator::builder()
        .provider(ProviderConfig::anthropic("anthropic").with_models(["claude-3-5-haiku-latest"]))
        .start()
        .await
        .unwrap();
    let clock = ManualClock::new();
    let c = client(&clock, policy(), vec![keyed(&emu, "anthropic")]);
    // Anthropic rejects an unknown model with 404 not_found_error.
    let err = c
        .chat(ChatRequest::from_prompt("hi").model("claude-does-not-exist"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert_eq!(err.status(), Some(404));
    assert_eq!(emu.counters("anthropic").requests, 1);
}

#[tokio::test]
async fn streams_in_both_formats() {
    let emu = Emulator::builder()
        .openai("openai")
        .anthropic("anthropic")
        .start()
        .await
        .unwrap();
    let clock = ManualClock::new();
    let c = client(
        &clock,
        policy(),
        vec![keyed(&emu, "openai"), keyed(&emu, "anthropic")],
    );
    for provider in ["openai", "anthropic"] {
        let mut s = c
            .chat_stream_with(
                ChatRequest::from_prompt("Tell me a short story").max_tokens(40),
                &RequestOptions::new().provider(provider),
            )
            .await
            .unwrap();
        let (mut text, mut chunks, mut usage) = (String::new(), 0, None);
        while let Some(chunk) = s.next().await {
            let chunk = chunk.unwrap();
            text.push_str(&chunk.delta);
            chunks += 1;
            usage = chunk.usage.or(usage);
        }
        assert!(chunks > 2, "{provider}: {chunks} chunks");
        assert!(!text.is_empty(), "{provider}");
        assert!(usage.is_some(), "{provider} reports usage in the stream");
    }
}

#[tokio::test]
async fn an_error_in_the_middle_of_a_stream_surfaces_on_it() {
    let emu = Emulator::builder()
        .anthropic("anthropic")
        .start()
        .await
        .unwrap();
    emu.script("anthropic", [Fault::StreamError]);
    let clock = ManualClock::new();
    let c = client(&clock, policy(), vec![keyed(&emu, "anthropic")]);
    let mut s = c
        .chat_stream(ChatRequest::from_prompt("Tell me a story").max_tokens(40))
        .await
        .unwrap();
    let mut failed = None;
    while let Some(chunk) = s.next().await {
        if let Err(e) = chunk {
            failed = Some(e);
        }
    }
    let e = failed.expect("the mid-stream error event surfaces");
    assert!(e.is_retryable(), "{e}");
    assert_eq!(emu.counters("anthropic").requests, 1);
}

#[tokio::test]
async fn transcribes_through_whisper_then_deepgram() {
    let emu = Emulator::builder()
        .openai("openai")
        .deepgram("deepgram")
        .start()
        .await
        .unwrap();
    let clock = ManualClock::new();
    let c = client(
        &clock,
        policy(),
        vec![keyed(&emu, "openai"), keyed(&emu, "deepgram")],
    );
    let audio =
        AudioInput::from_bytes(llm_failover_emulator::text::silent_wav(1.0), "memo.wav").unwrap();
    let t = c
        .transcribe(TranscriptionRequest::new(audio.clone()))
        .await
        .unwrap();
    assert_eq!(t.provider.as_str(), "openai");
    assert!(!t.text.is_empty());
    emu.script("openai", [Fault::Status { status: 500 }]);
    let t = c
        .transcribe(TranscriptionRequest::new(audio).language("en"))
        .await
        .unwrap();
    assert_eq!(t.provider.as_str(), "deepgram");
    assert!(!t.text.is_empty());
    assert_eq!(emu.counters("deepgram").ok, 1);
}

/// Issue 3: configured limits binding on tokens — a burst of large prompts produces zero 429s
/// from a server enforcing the same limits.
///
/// Both sides read one clock running 25× faster than real time (a [`ManualClock`] jumps on
/// every sleep, which would let later requests overtake earlier ones): about 50 s of
/// simulated pacing take two seconds. Real scheduling delays are stretched 25× on that
/// timeline, so the client's latency allowance is set to 2 s (80 ms of real time).
#[tokio::test]
async fn a_burst_of_large_prompts_paced_to_configured_limits_sees_no_429() {
    let clock = FastClock::new(25.0);
    let emu = Emulator::builder()
        .provider(
            ProviderConfig::openai("openai")
                .with_limits(llm_failover_emulator::Limits::per_minute(1000, 20_000)),
        )
        .time_source(TimeSource::new(move || (clock.now(), clock.wall())))
        .start()
        .await
        .unwrap();
    let mut p = policy();
    p.latency_allowance = Duration::from_secs(2);
    let c = Client::builder()
        .clock(Arc::new(clock))
        .rng(Arc::new(SeededRng::new(7)))
        .policy(p)
        .provider(
            openai(&emu, "openai"),
            key(&emu, "openai").limits(Limits::none().with_rpm(1000).with_tpm(20_000)),
        )
        .build()
        .unwrap();
    let t0 = clock.now();
    let prompt = "Summarise the following paragraph about rivers and their deltas. ".repeat(90);
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let (c, p) = (c.clone(), prompt.clone());
            tokio::spawn(async move { c.chat(ChatRequest::from_prompt(p).max_tokens(300)).await })
        })
        .collect();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let counters = emu.counters("openai");
    assert_eq!(counters.rate_limited, 0, "{counters:?}");
    assert_eq!(counters.ok, 20);
    // The burst (20 × ~1,790 tokens) was far larger than one minute's budget (20,000), so the
    // client had to wait for most of it.
    assert!(
        clock.now() - t0 > Duration::from_secs(30),
        "{:?}",
        clock.now() - t0
    );
    let stats = c.stats().provider("openai").unwrap().clone();
    assert!(stats.admission_wait > Duration::ZERO);
    // Both pricings were used: the byte bound while the bucket was more than half full, the
    // tiktoken count below that — and neither let a request through that the server refused.
    assert!(
        stats.priced_by_bound > 0 && stats.priced_by_count > 0,
        "{stats:?}"
    );
    assert_eq!(stats.priced_by_bound + stats.priced_by_count, 20);
}

/// Issue 4: a seeded soak, bounded in count and time: every request ends in exactly one
/// outcome, whatever the faults.
#[tokio::test]
async fn a_seeded_fault_soak_ends_every_request_in_exactly_one_outcome() {
    let emu = Emulator::builder()
        .provider(ProviderConfig::openai("openai").with_hang_ms(2_000))
        .provider(ProviderConfig::anthropic("anthropic").with_hang_ms(2_000))
        .seed(42)
        .start()
        .await
        .unwrap();
    let mix = [
        (0.03, Fault::Status { status: 500 }),
        (0.02, Fault::Overloaded),
        (
            0.02,
            Fault::RateLimit {
                retry_after: RetryAfter::Seconds(1),
            },
        ),
        (
            0.01,
            Fault::RateLimit {
                retry_after: RetryAfter::Invalid,
            },
        ),
        (0.01, Fault::Reset),
        (0.01, Fault::Truncated),
        (0.01, Fault::MalformedJson),
        (0.01, Fault::Html { status: 502 }),
        (0.01, Fault::MalformedHeaders),
        (0.01, Fault::Hang { ms: None }),
    ];
    emu.set_fault_mix("openai", 1, mix.clone());
    emu.set_fault_mix("anthropic", 2, mix);
    let clock = ManualClock::new();
    let mut p = policy();
    p.request_timeout = Duration::from_millis(300);
    let c = client(
        &clock,
        p,
        vec![keyed(&emu, "openai"), keyed(&emu, "anthropic")],
    );
    let n = 300;
    let sem = Arc::new(tokio::sync::Semaphore::new(16));
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let (c, sem) = (c.clone(), sem.clone());
            tokio::spawn(async move {
                let _permit = sem.acquire_owned().await.unwrap();
                c.chat(ChatRequest::from_prompt(format!("item {i}")).max_tokens(20))
                    .await
            })
        })
        .collect();
    let (mut ok, mut failed) = (0, 0);
    for t in tasks {
        match t.await.expect("no task panicked") {
            Ok(_) => ok += 1,
            Err(e) => {
                assert!(
                    e.attempts().len() <= 4 || e.kind() == ErrorKind::AllProvidersUnavailable,
                    "{e}"
                );
                failed += 1;
            }
        }
    }
    assert_eq!(ok + failed, n, "every request ended in exactly one outcome");
    assert!(ok > n * 9 / 10, "{ok} of {n} succeeded");
    let faults: u64 = emu.all_counters().values().map(|c| c.faults).sum();
    assert!(faults > 0, "the mix injected faults");
}
