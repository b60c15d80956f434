//! First contact, lived: a client whose limits are not configured meets providers that state
//! theirs only in the answers. Each provider gets one request, then what its first answer
//! says it may take — not the whole concurrency at once, which would overshoot a small limit
//! before a single header had come back.
//!
//! Where limits bind, the emulator and the client read one clock running 25× faster than real
//! time (a shared time source; a `ManualClock` jumps on every sleep, which would let later
//! requests overtake earlier ones), with the client's latency allowance stretched to match.

use std::sync::Arc;
use std::time::Duration;

use llm_failover::clock::{Clock, FastClock, ManualClock};
use llm_failover::config::Policy;
use llm_failover::provider::openai::OpenAi;
use llm_failover::rng::SeededRng;
use llm_failover::{ChatRequest, Client, Credential, ProviderId, ProviderSettings};
use llm_failover_emulator::{Emulator, Limits, ProviderConfig, TimeSource};

/// The emulator's "minute".
const WINDOW_MS: u64 = 6_000;
const CONCURRENCY: usize = 32;

async fn emulator(clock: FastClock, providers: &[(&str, u64)]) -> Emulator {
    let c = clock;
    let mut b = Emulator::builder()
        .minute_ms(WINDOW_MS)
        .time_source(TimeSource::new(move || (c.now(), c.wall())));
    for (name, rpm) in providers {
        b = b.provider(
            ProviderConfig::openai(*name).with_limits(Limits::per_minute(*rpm, 100_000_000)),
        );
    }
    b.start().await.expect("the emulator starts")
}

fn client(emu: &Emulator, clock: Arc<dyn Clock>, names: &[&str]) -> Client {
    let mut p = Policy::default();
    p.deadline = Duration::from_secs(3_600);
    p.request_timeout = Duration::from_secs(30);
    // 80 ms of real scheduling jitter on the 25× clock.
    p.latency_allowance = Duration::from_secs(2);
    let mut b = Client::builder()
        .clock(clock)
        .rng(Arc::new(SeededRng::new(3)))
        .policy(p);
    for name in names {
        let adapter = OpenAi::new(ProviderId::new(*name), emu.base_url(name).parse().unwrap())
            .with_chat_model("gpt-4o-mini");
        b = b.provider(
            Arc::new(adapter),
            ProviderSettings::new().credential(Credential::new(emu.key(name))),
        );
    }
    b.build().unwrap()
}

/// Sends `items` chats at [`CONCURRENCY`], all at once from the start.
async fn burst(client: &Client, items: usize) -> usize {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENCY {
        let (client, next) = (client.clone(), next.clone());
        workers.spawn(async move {
            let mut ok = 0;
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < items {
                let req = ChatRequest::from_prompt("Say hello.").max_tokens(8);
                ok += usize::from(client.chat(req).await.is_ok());
            }
            ok
        });
    }
    let mut ok = 0;
    while let Some(n) = workers.join_next().await {
        ok += n.unwrap();
    }
    ok
}

/// Three providers in failover order, 12, 6 and 6 requests per window, stated in headers and
/// configured nowhere; 32 requests at once. The first provider's first answer says 12; the
/// requests beyond what it has room for spill to the second and third, each contacted with
/// one request first. Before first contact was slow, the 32 went out before any answer: 20
/// answered 429 on the first provider alone.
#[tokio::test]
async fn three_providers_met_at_once_are_each_sent_one_request_before_their_limit_is_known() {
    let clock = FastClock::new(25.0);
    let emu = emulator(clock, &[("p", 12), ("q", 6), ("r", 6)]).await;
    let client = client(&emu, Arc::new(clock), &["p", "q", "r"]);
    let ok = burst(&client, 60).await;
    assert_eq!(ok, 60);
    let log = emu.log();
    let limited = log.iter().filter(|e| e.status == Some(429)).count();
    assert!(limited <= 1, "{limited} of {} answered 429", log.len());
    for name in ["p", "q", "r"] {
        let seen = log.iter().filter(|e| e.provider == name).count();
        assert!(seen > 0, "{name} was used: the limits spread the load");
    }
}

/// A provider that states nothing, answering each request after 5 ms: its first request
/// goes alone, the next ones only as clean answers come back — never more in flight than
/// 1 + ⌊√answers⌋, half a request more per round trip — and it opens past a batch's 16.
#[tokio::test]
async fn a_provider_that_states_nothing_is_opened_by_its_clean_answers() {
    let server = Silent::start().await;
    let adapter = OpenAi::new(ProviderId::new("p"), server.url.parse().unwrap())
        .with_chat_model("gpt-4o-mini");
    let client = Client::builder()
        .clock(Arc::new(ManualClock::new()))
        .rng(Arc::new(SeededRng::new(3)))
        .provider(
            Arc::new(adapter),
            ProviderSettings::new().credential(Credential::new("sk-test")),
        )
        .build()
        .unwrap();
    assert_eq!(burst(&client, 400).await, 400);
    let seen = server.in_flight_at_arrival();
    assert_eq!(seen.len(), 400, "nothing refused, nothing sent twice");
    assert_eq!(
        seen[..2],
        [1, 1],
        "the second request went after the first answer"
    );
    // Request `i` (from 0) arrives after at most `i` answers: the window then is at most
    // 1 + ⌊√i⌋, and the server sees no more in flight than the client let go.
    for (i, n) in seen.iter().enumerate() {
        assert!(
            *n <= 1 + i.isqrt(),
            "request {i}: {n} in flight, more than 1 + √{i}: {:?}",
            &seen[..=i]
        );
    }
    let most = seen.iter().max().copied().unwrap_or(0);
    assert!(most >= 16, "opened up: at most {most} in flight");
}

/// A provider that states no limit and answers each chat after 5 ms, recording how many
/// requests were in flight at each arrival (this one included).
#[derive(Clone)]
struct Silent {
    url: String,
    state: Arc<SilentState>,
}

#[derive(Default)]
struct SilentState {
    in_flight: std::sync::atomic::AtomicUsize,
    arrivals: std::sync::Mutex<Vec<usize>>,
}

impl Silent {
    async fn start() -> Self {
        use axum::routing::post;
        let state = Arc::new(SilentState::default());
        let app = axum::Router::new()
            .route("/v1/chat/completions", post(silent_chat))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Silent { url, state }
    }

    fn in_flight_at_arrival(&self) -> Vec<usize> {
        self.state.arrivals.lock().unwrap().clone()
    }
}

#[expect(
    clippy::disallowed_methods,
    reason = "the provider's own latency (its answer takes 5 ms), not a wait for logic"
)]
async fn silent_chat(
    axum::extract::State(s): axum::extract::State<Arc<SilentState>>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    use std::sync::atomic::Ordering;
    let n = s.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    s.arrivals.lock().unwrap().push(n);
    tokio::time::sleep(Duration::from_millis(5)).await;
    s.in_flight.fetch_sub(1, Ordering::SeqCst);
    (
        [("content-type", "application/json")],
        crate::support::ok_body("hello"),
    )
        .into_response()
}
