//! Transport safety over loopback: plain http only where it is safe, keys never follow a
//! redirect, bodies are capped, and every call is bounded in time (connect, total, and a
//! provider that trickles bytes forever). Real time, millisecond-scale settings: every test
//! ends in well under two seconds.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use llm_failover::config::Policy;
use llm_failover::http::{HttpRequest, HttpTransport, Transport, TransportOptions};
use llm_failover::provider::openai::OpenAi;
use llm_failover::rng::FixedRng;
use llm_failover::{
    ChatRequest, Client, Config, Credential, Error, ErrorKind, ProviderId, ProviderSettings,
};
use llm_failover_emulator::scripted::{Reply, ReplyBody, ScriptedServer};
use tokio::time::Instant;

const CHAT: &str = "/v1/chat/completions";
const KEY: &str = "sk-SENTINEL-transport-0123456789";

/// The most any test here may take: the bounds are real time, so this is what they prove.
const BOUND: Duration = Duration::from_millis(1_500);

fn policy() -> Policy {
    let mut p = Policy::default();
    p.max_attempts = 1;
    p.request_timeout = Duration::from_millis(300);
    p.connect_timeout = Duration::from_millis(200);
    p.deadline = Duration::from_secs(5);
    p.failure_threshold = 0;
    p
}

/// A client with one OpenAI-format provider at `base` (`http://127.0.0.1:PORT`), the real
/// clock, and the key [`KEY`].
fn client_at(base: &str, policy: Policy) -> Client {
    Client::builder()
        .rng(Arc::new(FixedRng::new([0.5])))
        .policy(policy)
        .provider(
            Arc::new(
                OpenAi::new(ProviderId::new("p"), format!("{base}/v1").parse().unwrap())
                    .with_chat_model("gpt-4o-mini"),
            ),
            ProviderSettings::new().credential(Credential::new(KEY)),
        )
        .build()
        .unwrap()
}

fn client(server: &ScriptedServer, policy: Policy) -> Client {
    client_at(&server.url(), policy)
}

fn req() -> ChatRequest {
    ChatRequest::from_prompt("hello").max_tokens(8)
}

/// Starts a timer after loading the tokenizer the client estimates with (a one-off cost of
/// seconds in a debug build, which no bound here is about).
fn start_timer() -> Instant {
    let _ = llm_failover::ratelimit::estimate_chat(&req(), "gpt-4o-mini");
    Instant::now()
}

/// The error of the one attempt: the client's own error, or the last attempt's when it
/// reports every attempt.
fn attempt_error(err: &Error) -> &Error {
    err.attempts().last().unwrap_or(err)
}

fn assert_no_key(err: &Error) {
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(KEY), "the key leaked: {shown}");
}

fn delta_event(text: &str) -> Bytes {
    Bytes::from(format!(
        "data: {{\"id\":\"c1\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}},\"finish_reason\":null}}]}}\n\n"
    ))
}

// ---- plain http ---------------------------------------------------------------------------

fn config_with(base_url: &str, extra: &str) -> Result<Config, Error> {
    Config::from_toml_str(&format!(
        r#"
default_environment = "e"
[environments.e]
chat = ["p"]
[providers.p]
kind = "openai"
base_url = "{base_url}"
model = "gpt-4o-mini"
api_key_env = {{ e = "P_KEY" }}
{extra}
"#
    ))
}

#[test]
fn plain_http_to_a_non_loopback_host_is_refused_at_config_time() {
    for url in [
        "http://api.openai.com/v1",
        "http://10.0.0.7:8000/v1",
        "http://192.168.1.20/v1",
        "http://[fd00::1]/v1",
        "http://127.0.0.1.example.com/v1",
        "http://localhost.example/v1",
        "http://0.0.0.0:4010/v1",
    ] {
        let err = config_with(url, "").unwrap_err();
        assert!(err.is_config(), "{url}: {err}");
        let message = err.to_string();
        assert!(
            message.contains("providers.p.base_url (line 7, column 12): http:// to"),
            "{url}: {message}"
        );
        assert!(message.contains("allow_http = true"), "{url}: {message}");
    }
}

#[test]
fn plain_http_is_allowed_to_loopback_and_with_allow_http_only() {
    for url in [
        "http://127.0.0.1:4010/v1",
        "http://127.255.0.9/v1",
        "http://[::1]:8080/v1",
        "http://localhost:11434/v1",
    ] {
        config_with(url, "").unwrap_or_else(|e| panic!("{url}: {e}"));
    }
    let config = config_with("http://10.0.0.7:8000/v1", "allow_http = true").unwrap();
    assert!(config.provider("p").unwrap().allow_http);
}

#[test]
fn a_base_url_given_in_code_is_held_to_the_same_rule() {
    let build = |extra: &str, url: &str| {
        Client::builder()
            .config(config_with("https://api.openai.com/v1", extra).unwrap())
            .env_lookup(|var| (var == "P_KEY").then(|| KEY.to_owned()))
            .base_url("p", url.parse().unwrap())
            .build()
    };
    let err = build("", "http://api.openai.com/v1").unwrap_err();
    assert!(err.is_config(), "{err}");
    assert!(
        err.to_string()
            .contains("providers.p.base_url (override given in code): http:// to"),
        "{err}"
    );
    assert_no_key(&err);
    build("", "http://127.0.0.1:9/v1").unwrap();
    build("allow_http = true", "http://10.0.0.7:8000/v1").unwrap();
}

// ---- redirects ----------------------------------------------------------------------------

#[tokio::test]
async fn a_redirect_to_another_host_never_carries_the_key_there() {
    for status in [301, 302, 303, 307, 308] {
        let (provider, elsewhere) = (ScriptedServer::start().await, ScriptedServer::start().await);
        let location = format!("{}/steal", elsewhere.url());
        provider.push(CHAT, Reply::status(status).header("location", &location));
        provider.push(CHAT, Reply::status(status).header("location", &location));
        // Attempts to spare: a redirect must still be sent once only.
        let mut p = policy();
        p.max_attempts = 3;
        let client = client(&provider, p);

        let err = client.chat(req()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "{status}: {err}");
        assert!(
            err.message().contains("redirects are not followed"),
            "{err}"
        );
        assert_eq!(err.status(), Some(status));
        assert_no_key(&err);

        let err = client.chat_stream(req()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config, "{status} streamed: {err}");

        // The key went to the configured host only, and nothing reached the other one.
        let sent = provider.requests();
        assert_eq!(sent.len(), 2, "{status}: a redirect is never retried");
        for r in &sent {
            assert_eq!(r.header("authorization"), Some(&*format!("Bearer {KEY}")));
        }
        assert!(
            elsewhere.requests().is_empty(),
            "{status}: the redirect target was contacted"
        );
    }
}

// ---- body caps ----------------------------------------------------------------------------

/// A body of `chunks` pieces of 1 MiB, one shared buffer: "endless" for a 64 KiB cap without
/// costing the server any memory.
fn endless_body(piece: &'static [u8]) -> ReplyBody {
    let mib = Bytes::from(piece.repeat((1 << 20) / piece.len()));
    ReplyBody::Chunks((0..4_096).map(|_| (Duration::ZERO, mib.clone())).collect())
}

fn capped_policy() -> Policy {
    let mut p = policy();
    p.max_response_bytes = 64 << 10;
    p.request_timeout = Duration::from_secs(5);
    p
}

#[tokio::test]
async fn a_huge_body_is_a_decode_error_read_no_further_than_the_cap() {
    let server = ScriptedServer::start().await;
    // With a Content-Length above the cap: refused before reading.
    server.push(
        CHAT,
        Reply::json(200, "x".repeat(4 << 20)).header("x-request-id", "big-1"),
    );
    // Without one (chunked), 4 GiB long: refused once the cap is passed.
    server.push(
        CHAT,
        Reply::status(200)
            .header("content-type", "application/json")
            .with_body(endless_body(b"[0,")),
    );
    // An error status with an endless body is no different.
    server.push(CHAT, Reply::status(500).with_body(endless_body(b"oops ")));
    let client = client(&server, capped_policy());
    for what in ["content-length", "chunked", "error status"] {
        let started = start_timer();
        let err = client.chat(req()).await.unwrap_err();
        let err = attempt_error(&err);
        assert_eq!(err.kind(), ErrorKind::Decode, "{what}: {err}");
        assert!(
            err.message()
                .contains("response body larger than the 65536-byte cap"),
            "{what}: {err}"
        );
        assert!(started.elapsed() < BOUND, "{what}: {:?}", started.elapsed());
    }
}

#[tokio::test]
async fn an_endless_event_stream_line_is_a_decode_error() {
    let server = ScriptedServer::start().await;
    server.push(
        CHAT,
        Reply::status(200)
            .header("content-type", "text/event-stream")
            .with_body(endless_body(b"data: aaaaaaa")),
    );
    let started = start_timer();
    let err = client(&server, capped_policy())
        .chat_stream(req())
        .await
        .unwrap_err();
    let err = attempt_error(&err);
    assert_eq!(err.kind(), ErrorKind::Decode, "{err}");
    assert!(
        err.message().contains("event-stream line longer than"),
        "{err}"
    );
    assert!(started.elapsed() < BOUND, "{:?}", started.elapsed());
}

// ---- time bounds --------------------------------------------------------------------------

fn assert_timeout(err: &Error) {
    assert_eq!(attempt_error(err).kind(), ErrorKind::Timeout, "{err}");
    assert_no_key(err);
}

#[tokio::test]
async fn a_provider_that_never_answers_is_cut_off_by_the_request_timeout() {
    let server = ScriptedServer::start().await;
    server.push(
        CHAT,
        Reply::status(200).with_body(ReplyBody::Hang(Duration::from_secs(30))),
    );
    let started = start_timer();
    let err = client(&server, policy()).chat(req()).await.unwrap_err();
    assert_timeout(&err);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < BOUND,
        "{took:?}"
    );
}

/// Trickles `first` and then one byte of `filler` every 50 ms for 30 s: never finishing
/// within any test's patience, yet never silent long enough for a read timeout.
fn trickle(first: Bytes, filler: &'static [u8]) -> ReplyBody {
    let mut chunks = vec![(Duration::ZERO, first)];
    chunks.extend(
        filler
            .iter()
            .cycle()
            .take(600)
            .map(|b| (Duration::from_millis(50), Bytes::copy_from_slice(&[*b]))),
    );
    ReplyBody::Chunks(chunks)
}

#[tokio::test]
async fn a_stream_that_trickles_bytes_forever_is_cut_off_by_the_request_timeout() {
    let server = ScriptedServer::start().await;
    // One real event, then a comment line that never ends, a byte every 50 ms.
    server.push(
        CHAT,
        Reply::status(200)
            .header("content-type", "text/event-stream")
            .with_body(trickle(delta_event("Hel"), b": still here")),
    );
    let started = start_timer();
    let mut stream = client(&server, policy()).chat_stream(req()).await.unwrap();
    let first = stream.next().await.unwrap().unwrap();
    assert_eq!(first.delta, "Hel");
    let err = loop {
        match stream.next().await {
            Some(Ok(_)) => continue,
            Some(Err(e)) => break e,
            None => panic!("the trickling stream ended without an error"),
        }
    };
    assert_timeout(&err);
    assert!(stream.next().await.is_none(), "nothing after the error");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < BOUND,
        "{took:?}"
    );
}

#[tokio::test]
async fn a_body_that_trickles_forever_is_cut_off_by_the_deadline() {
    let server = ScriptedServer::start().await;
    server.push(
        CHAT,
        Reply::status(200)
            .header("content-type", "application/json")
            .with_body(trickle(Bytes::from_static(b"{\"id\":"), b" ")),
    );
    // The per-attempt timeout is long; the request's deadline is what cuts it.
    let mut p = policy();
    p.request_timeout = Duration::from_secs(10);
    p.deadline = Duration::from_millis(400);
    let started = start_timer();
    let err = client(&server, p).chat(req()).await.unwrap_err();
    assert_timeout(&err);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(400) && took < BOUND,
        "{took:?}"
    );
}

/// A listener that never accepts, with its accept queue already full: the kernel drops
/// further SYNs, so a connection attempt neither succeeds nor is refused.
async fn unanswered_listener() -> (tokio::net::TcpListener, Vec<std::net::TcpStream>) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut filled = Vec::new();
    for _ in 0..16 {
        match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(50)) {
            Ok(s) => filled.push(s),
            Err(_) => return (listener, filled),
        }
    }
    panic!("the accept queue never filled");
}

#[tokio::test]
async fn a_connection_that_is_never_accepted_is_cut_off_by_the_connect_timeout() {
    let (listener, _held) = unanswered_listener().await;
    let base = format!("http://{}", listener.local_addr().unwrap());
    let mut p = policy();
    p.request_timeout = Duration::from_secs(10);
    p.connect_timeout = Duration::from_millis(150);
    let started = start_timer();
    let err = client_at(&base, p).chat(req()).await.unwrap_err();
    assert_timeout(&err);
    assert!(attempt_error(&err).message().contains("timed out"), "{err}");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(150) && took < BOUND,
        "{took:?}"
    );
}

#[tokio::test]
async fn every_transport_call_is_bounded_by_its_timeout() {
    // The transport alone, as adapters' exchanges use it: send and send_streaming.
    let server = ScriptedServer::start().await;
    server.push(
        "/a",
        Reply::status(200).with_body(trickle(Bytes::new(), b"x")),
    );
    server.push(
        "/b",
        Reply::status(200).with_body(trickle(Bytes::new(), b"x")),
    );
    let transport = HttpTransport::new(&TransportOptions::default()).unwrap();
    let get = |path: &str| {
        HttpRequest::new(
            reqwest::Method::GET,
            format!("{}{path}", server.url()).parse().unwrap(),
        )
    };
    let started = start_timer();
    let err = transport
        .send(get("/a"), Duration::from_millis(200))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    let streamed = transport
        .send_streaming(get("/b"), Duration::from_millis(200))
        .await
        .unwrap();
    let llm_failover::http::Streamed::Ok(mut resp) = streamed else {
        panic!("a 200 streams")
    };
    let err = loop {
        match resp.body.next().await {
            Some(Ok(_)) => continue,
            Some(Err(e)) => break e,
            None => panic!("the trickle ended"),
        }
    };
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(started.elapsed() < BOUND, "{:?}", started.elapsed());
}
