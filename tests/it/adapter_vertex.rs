//! The Vertex wing against the emulator's Vertex AI over loopback HTTP: Gemini on Vertex at
//! `/v1/projects/{project}/locations/{location}/publishers/google/models/{model}:generateContent`
//! (cloud.google.com/vertex-ai/generative-ai/docs/reference/rest/v1/projects.locations.publishers.models/generateContent),
//! each request with an OAuth 2 access token the adapter fetched from the emulator's token
//! endpoint with a service account's JWT (RFC 7523; the emulator verifies its RS256 signature,
//! issuer, audience, scope and times, and refuses any request whose token it did not issue
//! or that expired).
//!
//! The emulator reads the client's manual clock (a shared time source): the JWT's `iat`, the
//! token's expiry and the refresh all happen on one clock the tests move.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use llm_failover::clock::{Clock, ManualClock};
use llm_failover::config::{Config, Policy};
use llm_failover::provider::{Provider, from_config};
use llm_failover::rng::SeededRng;
use llm_failover::vertex::Vertex;
use llm_failover::{
    ChatRequest, Client, Credential, ErrorKind, FinishReason, Image, Message, ProviderId,
    ProviderSettings, RequestOptions, ResponseFormat, Tool, ToolChoice,
};
use llm_failover_emulator::{Emulator, Fault, ProviderConfig, RetryAfter, TimeSource};
use serde_json::json;

use crate::support::examples::TempDir;

const MODEL: &str = "gemini-2.5-flash";
const LOCATION: &str = "us-central1";

/// A 1×1 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

fn shared(clock: &ManualClock) -> TimeSource {
    let c = clock.clone();
    TimeSource::new(move || (c.now(), c.wall()))
}

async fn emulator(clock: &ManualClock) -> Emulator {
    Emulator::builder()
        .provider(ProviderConfig::vertex("vertex"))
        .time_source(shared(clock))
        .start()
        .await
        .unwrap()
}

/// The regional base URL of the emulator's project.
fn base_url(emu: &Emulator) -> String {
    let project = emu.service_account_key("vertex").project_id;
    format!(
        "{}/v1/projects/{project}/locations/{LOCATION}",
        emu.base_url("vertex")
    )
}

fn adapter(emu: &Emulator) -> Arc<dyn Provider> {
    let vertex = Vertex::from_base_url(ProviderId::new("vertex"), base_url(emu).parse().unwrap())
        .unwrap()
        .with_model(MODEL);
    Arc::new(vertex)
}

/// The service account's JSON key file, as its text.
fn key(emu: &Emulator) -> Credential {
    Credential::new(emu.service_account_key("vertex").to_json())
}

fn client_with(clock: &ManualClock, emu: &Emulator, credential: Credential) -> Client {
    let mut policy = Policy::default();
    policy.request_timeout = Duration::from_secs(5);
    Client::builder()
        .clock(Arc::new(clock.clone()))
        .rng(Arc::new(SeededRng::new(7)))
        .policy(policy)
        .provider(adapter(emu), ProviderSettings::new().credential(credential))
        .build()
        .unwrap()
}

fn client(clock: &ManualClock, emu: &Emulator) -> Client {
    client_with(clock, emu, key(emu))
}

/// How many tokens were asked for, and how many were granted.
fn token_requests(emu: &Emulator) -> (usize, usize) {
    let log = emu.log();
    let tokens: Vec<_> = log.iter().filter(|e| e.path.ends_with("/token")).collect();
    let granted = tokens.iter().filter(|e| e.status == Some(200)).count();
    (tokens.len(), granted)
}

/// Every API request (not the token's) was answered 2xx: its token was one the emulator
/// issued, still valid.
fn all_authorised(emu: &Emulator, requests: u64) {
    let c = emu.counters("vertex");
    assert_eq!((c.requests, c.ok), (requests, requests), "{c:?}");
}

fn weather() -> Tool {
    Tool::new(
        "get_weather",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    )
    .description("The current weather of a city")
}

#[tokio::test]
async fn chats_with_a_fetched_access_token() {
    let clock = ManualClock::new();
    let emu = emulator(&clock).await;
    let c = client(&clock, &emu);
    let r = c
        .chat(
            ChatRequest::new()
                .system("Be brief.")
                .user("Say hello")
                .max_tokens(20),
        )
        .await
        .unwrap();
    assert_eq!(r.provider.as_str(), "vertex");
    assert!(!r.text.is_empty());
    assert_eq!(r.finish_reason, Some(FinishReason::Stop));
    assert!(
        r.usage
            .is_some_and(|u| u.input_tokens > 0 && u.output_tokens > 0)
    );
    let log = emu.log();
    assert!(log[0].path.ends_with("/vertex/token"), "{:?}", log[0].path);
    assert_eq!(
        log[1].path,
        "/vertex/v1/projects/emulator-project/locations/us-central1/publishers/google/models/gemini-2.5-flash:generateContent"
    );
    assert_eq!(token_requests(&emu), (1, 1));
    all_authorised(&emu, 1);
}

#[tokio::test]
async fn a_tool_round_trip() {
    let clock = ManualClock::new();
    let emu = emulator(&clock).await;
    let c = client(&clock, &emu);
    let ask = ChatRequest::from_prompt("What's the weather in Paris?").tool(weather());
    let r = c.chat(ask.clone()).await.unwrap();
    assert_eq!(r.finish_reason, Some(FinishReason::ToolCalls));
    let call = &r.tool_calls[0];
    assert_eq!(call.name, "get_weather");
    assert_eq!(call.arguments["city"], "Paris");

    let follow_up = ask
        .message(r.to_message())
        .message(Message::tool_result(call.id.clone(), "18 C and sunny"));
    let r = c.chat(follow_up).await.unwrap();
    assert!(r.text.contains("18 C and sunny"), "{}", r.text);
    assert_eq!(r.finish_reason, Some(FinishReason::Stop));
    all_authorised(&emu, 2);
}

#[tokio::test]
async fn an_image_and_a_structured_answer() {
    let clock = ManualClock::new();
    let emu = emulator(&clock).await;
    let c = client(&clock, &emu);
    let r = c
        .chat(ChatRequest::new().message(
            Message::user("What is in this picture?").image(Image::base64("image/png", PNG)),
        ))
        .await
        .unwrap();
    assert!(!r.text.is_empty());

    let schema = json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
        "required": ["city", "population"],
    });
    let r = c
        .chat(
            ChatRequest::from_prompt("The largest city of France?").response_format(
                ResponseFormat::JsonSchema {
                    name: "city".into(),
                    schema,
                },
            ),
        )
        .await
        .unwrap();
    let answer = r.json().unwrap();
    assert!(
        answer["city"].is_string() && answer["population"].is_i64(),
        "{answer}"
    );
    all_authorised(&emu, 2);
    assert_eq!(token_requests(&emu), (1, 1), "one token for both");
}

#[tokio::test]
async fn streams_text_and_a_tool_call() {
    let clock = ManualClock::new();
    let emu = emulator(&clock).await;
    let c = client(&clock, &emu);
    let mut s = c
        .chat_stream(ChatRequest::from_prompt("Tell me a short story").max_tokens(40))
        .await
        .unwrap();
    let (mut text, mut chunks, mut usage, mut finish) = (String::new(), 0, None, None);
    while let Some(chunk) = s.next().await {
        let chunk = chunk.unwrap();
        text.push_str(&chunk.delta);
        chunks += 1;
        usage = chunk.usage.or(usage);
        finish = chunk.finish_reason.or(finish);
    }
    assert!(chunks > 2, "{chunks} chunks");
    assert!(!text.is_empty());
    assert!(usage.is_some());
    assert_eq!(finish, Some(FinishReason::Stop));

    let mut s = c
        .chat_stream(
            ChatRequest::from_prompt("What's the weather in Paris?")
                .tool(weather())
                .tool_choice(ToolChoice::named("get_weather")),
        )
        .await
        .unwrap();
    let (mut calls, mut finish) = (Vec::new(), None);
    while let Some(chunk) = s.next().await {
        let chunk = chunk.unwrap();
        calls.extend(chunk.tool_calls);
        finish = chunk.finish_reason.or(finish);
    }
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].arguments["city"], "Paris");
    assert_eq!(finish, Some(FinishReason::ToolCalls));
    let log = emu.log();
    let api: Vec<_> = log.iter().filter(|e| !e.path.ends_with("/token")).collect();
    assert!(
        api.iter()
            .all(|e| e.stream && e.path.ends_with(":streamGenerateContent")),
        "{api:?}"
    );
    all_authorised(&emu, 2);
}

/// Many requests, one token: fetched by the first, used by the others — concurrent ones wait
/// for the one fetch rather than each fetching its own.
#[tokio::test]
async fn one_token_serves_many_concurrent_requests() {
    let clock = ManualClock::new();
    let emu = emulator(&clock).await;
    let c = client(&clock, &emu);
    let asks = (0..8).map(|i| c.chat(ChatRequest::from_prompt(format!("Say {i}")).max_tokens(10)));
    for r in futures_util::future::join_all(asks).await {
        r.unwrap();
    }
    for i in 0..4 {
        c.chat(ChatRequest::from_prompt(format!("Again {i}")).max_tokens(10))
            .await
            .unwrap();
    }
    assert_eq!(token_requests(&emu), (1, 1));
    all_authorised(&emu, 12);
}

/// The token (3599 s on the emulator's clock) is refreshed 5 minutes before it expires:
/// one fetch, whatever the number of requests then; after its expiry, one fetch again.
#[tokio::test]
async fn the_token_is_refreshed_before_it_expires_once() {
    let clock = ManualClock::new();
    let emu = emulator(&clock).await;
    let c = client(&clock, &emu);
    let ask = |i: usize| ChatRequest::from_prompt(format!("Say {i}")).max_tokens(10);
    c.chat(ask(0)).await.unwrap();
    assert_eq!(token_requests(&emu), (1, 1));

    // Not yet due: the same token.
    clock.advance(Duration::from_secs(3000));
    c.chat(ask(1)).await.unwrap();
    assert_eq!(token_requests(&emu), (1, 1));

    // Due (less than 5 minutes left), still valid: one request fetches, the others send the
    // token they have.
    clock.advance(Duration::from_secs(400));
    let many = (0..6).map(|i| c.chat(ask(10 + i)));
    for r in futures_util::future::join_all(many).await {
        r.unwrap();
    }
    assert_eq!(token_requests(&emu), (2, 2));

    // The second token expires in turn: concurrent requests wait for one fetch.
    clock.advance(Duration::from_secs(3600));
    let many = (0..6).map(|i| c.chat(ask(20 + i)));
    for r in futures_util::future::join_all(many).await {
        r.unwrap();
    }
    assert_eq!(token_requests(&emu), (3, 3));
    all_authorised(&emu, 14);
}

/// A key the emulator does not know (another key id: "Invalid JWT Signature."): the token
/// endpoint refuses it with `invalid_grant`, which is `Auth`, terminal; nothing reaches
/// Vertex, and the JWT is asked for once.
#[tokio::test]
async fn a_refused_key_is_auth_asked_once() {
    let clock = ManualClock::new();
    let emu = emulator(&clock).await;
    let mut wrong: serde_json::Value =
        serde_json::from_str(&emu.service_account_key("vertex").to_json()).unwrap();
    wrong["private_key_id"] = json!("0000000000000000000000000000000000000000");
    let c = client_with(&clock, &emu, Credential::new(wrong.to_string()));
    let err = c
        .chat(ChatRequest::from_prompt("hi").max_tokens(10))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Auth, "{err}");
    assert!(err.is_terminal());
    assert_eq!(err.code(), Some("invalid_grant"));
    assert!(err.to_string().contains("Invalid JWT Signature."), "{err}");
    let shown = format!("{err} {err:?}");
    assert!(
        !shown.contains("PRIVATE KEY") && !shown.contains("MIIE"),
        "{shown}"
    );
    assert_eq!(token_requests(&emu), (1, 0), "asked once, not retried");
    assert_eq!(emu.counters("vertex").requests, 0, "nothing reached Vertex");
}

/// Vertex's 429 RESOURCE_EXHAUSTED, without a header or a RetryInfo: `RateLimited`.
#[tokio::test]
async fn resource_exhausted_without_headers_is_rate_limited() {
    let clock = ManualClock::new();
    let emu = emulator(&clock).await;
    emu.script(
        "vertex",
        vec![
            Fault::RateLimit {
                retry_after: RetryAfter::Absent,
            };
            5
        ],
    );
    let c = client(&clock, &emu);
    let opts = RequestOptions::new().max_wait(Duration::from_millis(1));
    let err = c
        .chat_with(ChatRequest::from_prompt("hi").max_tokens(10), &opts)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RateLimited, "{err}");
    assert!(err.is_retryable() && !err.is_terminal());
    let log = emu.log();
    let api: Vec<_> = log.iter().filter(|e| !e.path.ends_with("/token")).collect();
    assert_eq!(api[0].status, Some(429));
}

/// `kind = "vertex"` in providers.toml, the key file named per environment: the client reads
/// it and talks to the emulator.
#[tokio::test]
async fn providers_toml_builds_the_adapter_with_a_key_file() {
    let clock = ManualClock::new();
    let emu = emulator(&clock).await;
    let dir = TempDir::new("vertex", "key-file");
    let file = dir.path("vertex-prod.json");
    std::fs::write(&file, emu.service_account_key("vertex").to_json()).unwrap();
    let toml = |key_file: &str| {
        format!(
            r#"
            default_environment = "prod"
            [providers.vertex]
            kind = "vertex"
            base_url = "{}"
            model = "{MODEL}"
            key_file = {{ prod = "{key_file}" }}
            [environments.prod]
            chat = ["vertex"]
            "#,
            base_url(&emu)
        )
    };
    let config: Config = toml(&file.display().to_string()).parse().unwrap();
    let adapter = from_config(config.provider("vertex").unwrap()).unwrap();
    assert_eq!(adapter.kind(), "vertex");
    let c = Client::builder()
        .clock(Arc::new(clock.clone()))
        .config(config)
        .build()
        .unwrap();
    c.chat(ChatRequest::from_prompt("hi").max_tokens(10))
        .await
        .unwrap();
    assert_eq!(token_requests(&emu), (1, 1));

    // A missing file, and one that is no service-account key: each a Config error naming it.
    let missing = dir.path("nowhere.json");
    let config: Config = toml(&missing.display().to_string()).parse().unwrap();
    let err = Client::builder().config(config).build().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    let msg = err.to_string();
    assert!(msg.contains(&missing.display().to_string()), "{msg}");
    assert!(msg.contains("providers.vertex.key_file.prod"), "{msg}");
    assert!(msg.contains("does not exist"), "{msg}");

    let other = dir.path("user.json");
    std::fs::write(
        &other,
        r#"{"type": "authorized_user", "refresh_token": "1//SECRET"}"#,
    )
    .unwrap();
    let config: Config = toml(&other.display().to_string()).parse().unwrap();
    let err = Client::builder().config(config).build().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config, "{err}");
    let msg = format!("{err} {err:?}");
    assert!(msg.contains(&other.display().to_string()), "{msg}");
    assert!(msg.contains("is not a service-account key"), "{msg}");
    assert!(!msg.contains("SECRET"), "{msg}");

    // A base URL without the project: the field is named.
    let no_project = toml(&file.display().to_string()).replace("/v1/projects/emulator-project", "");
    let config: Config = no_project.parse().unwrap();
    let err = from_config(config.provider("vertex").unwrap()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config);
    assert!(
        err.to_string().contains("providers.vertex.base_url"),
        "{err}"
    );
}

/// The access token is nowhere to be seen: not in the client's or the adapter's `Debug`,
/// nor in an error of a request that carried it.
#[tokio::test]
async fn the_token_never_shows() {
    let clock = ManualClock::new();
    let emu = emulator(&clock).await;
    let c = client(&clock, &emu);
    c.chat(ChatRequest::from_prompt("hi").max_tokens(10))
        .await
        .unwrap();
    let adapter = adapter(&emu);
    let shown = format!("{c:?} {adapter:?}");
    assert!(!shown.contains("ya29."), "{shown}");
    assert!(!shown.contains("PRIVATE KEY"), "{shown}");

    // A token the emulator issued, given as the credential: sent as it is, and an error
    // (another project: 403 PERMISSION_DENIED) never shows it.
    let token = emu.access_token("vertex");
    let url = format!(
        "{}/v1/projects/another-project/locations/{LOCATION}",
        emu.base_url("vertex")
    );
    let elsewhere = Vertex::from_base_url(ProviderId::new("vertex"), url.parse().unwrap())
        .unwrap()
        .with_model(MODEL);
    let c = Client::builder()
        .clock(Arc::new(clock.clone()))
        .provider(
            Arc::new(elsewhere),
            ProviderSettings::new().credential(Credential::new(token.clone())),
        )
        .build()
        .unwrap();
    let err = c
        .chat(ChatRequest::from_prompt("hi").max_tokens(10))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{err}");
    let shown = format!("{err} {err:?} {c:?}");
    assert!(!shown.contains(&token), "{shown}");
    assert_eq!(
        token_requests(&emu),
        (1, 1),
        "a given token is not exchanged"
    );
}

/// A token endpoint that cannot be reached: a retryable error (the request may go elsewhere
/// or be tried again), never a Vertex request without a token.
#[tokio::test]
async fn an_unreachable_token_endpoint_is_retryable_and_nothing_is_sent() {
    let clock = ManualClock::new();
    let emu = emulator(&clock).await;
    let mut key: serde_json::Value =
        serde_json::from_str(&emu.service_account_key("vertex").to_json()).unwrap();
    // A loopback port nothing listens on (the emulator's own, once it has stopped).
    let closed = {
        let other = emulator(&clock).await;
        let url = format!("{}/vertex/token", other.url());
        other.shutdown().await;
        url
    };
    key["token_uri"] = json!(closed);
    let c = client_with(&clock, &emu, Credential::new(key.to_string()));
    let err = c
        .chat(ChatRequest::from_prompt("hi").max_tokens(10))
        .await
        .unwrap_err();
    assert!(err.is_retryable() && !err.is_terminal(), "{err}");
    assert_eq!(emu.counters("vertex").requests, 0, "nothing reached Vertex");
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains("PRIVATE KEY"), "{shown}");
}
