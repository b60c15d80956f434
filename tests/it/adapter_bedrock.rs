//! The Bedrock wing against the emulator's Bedrock Runtime over loopback HTTP: Converse and
//! ConverseStream (docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html,
//! …/API_runtime_ConverseStream.html), each request signed with SigV4 by the adapter's
//! `finish` hook and verified by the emulator, which refuses any request whose signature,
//! scope, session token or date (5 minutes of its clock) is wrong: every answer that is not
//! a refusal is a signature checked.
//!
//! The emulator reads the client's manual clock (a shared time source), so the signing time
//! (`now.wall`) and the emulator's are the same instant.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use llm_failover::bedrock::Bedrock;
use llm_failover::clock::{Clock, ManualClock};
use llm_failover::config::{Config, Policy};
use llm_failover::provider::{Provider, from_config};
use llm_failover::rng::SeededRng;
use llm_failover::{
    ChatRequest, Client, Credential, ErrorKind, FinishReason, Image, Message, ProviderId,
    ProviderSettings, RequestOptions, ResponseFormat, Tool, ToolChoice,
};
use llm_failover_emulator::{Emulator, Fault, ProviderConfig, RetryAfter, TimeSource};
use serde_json::json;

/// A model id with a `:`, which the path carries percent-encoded (and the signature encodes
/// again).
const MODEL: &str = "anthropic.claude-3-haiku-20240307-v1:0";

/// A 1×1 PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

fn shared(clock: &ManualClock) -> TimeSource {
    let c = clock.clone();
    TimeSource::new(move || (c.now(), c.wall()))
}

async fn emulator(clock: &ManualClock, provider: ProviderConfig) -> Emulator {
    Emulator::builder()
        .provider(provider)
        .time_source(shared(clock))
        .start()
        .await
        .unwrap()
}

fn adapter(emu: &Emulator) -> Arc<dyn Provider> {
    let creds = emu.aws_credentials("bedrock");
    Arc::new(
        Bedrock::new(
            ProviderId::new("bedrock"),
            emu.base_url("bedrock").parse().unwrap(),
            &creds.region,
        )
        .with_model(MODEL),
    )
}

/// The credentials the emulator accepts.
fn aws(emu: &Emulator) -> Credential {
    let c = emu.aws_credentials("bedrock");
    Credential::aws(c.access_key_id, c.secret_access_key, c.session_token)
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
    client_with(clock, emu, aws(emu))
}

/// Every request the emulator received was answered 2xx: its signature verified (a request
/// signed wrong is refused 400 or 403).
fn all_verified(emu: &Emulator, requests: u64) {
    let c = emu.counters("bedrock");
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
async fn chats_through_converse_signed() {
    let clock = ManualClock::new();
    let emu = emulator(&clock, ProviderConfig::bedrock("bedrock")).await;
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
    assert_eq!(r.provider.as_str(), "bedrock");
    assert!(!r.text.is_empty());
    assert_eq!(r.finish_reason, Some(FinishReason::Stop));
    assert!(
        r.usage
            .is_some_and(|u| u.input_tokens > 0 && u.output_tokens > 0)
    );
    assert!(r.request_id.is_some(), "x-amzn-RequestId");
    let log = emu.log();
    assert_eq!(
        log[0].path,
        "/bedrock/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse"
    );
    all_verified(&emu, 1);
}

#[tokio::test]
async fn a_tool_round_trip() {
    let clock = ManualClock::new();
    let emu = emulator(&clock, ProviderConfig::bedrock("bedrock")).await;
    let c = client(&clock, &emu);
    let ask = ChatRequest::from_prompt("What's the weather in Paris?").tool(weather());
    let r = c.chat(ask.clone()).await.unwrap();
    assert_eq!(r.finish_reason, Some(FinishReason::ToolCalls));
    let call = &r.tool_calls[0];
    assert_eq!(call.name, "get_weather");
    assert!(call.id.starts_with("tooluse_"), "{}", call.id);
    assert_eq!(call.arguments["city"], "Paris");

    let follow_up = ask
        .message(r.to_message())
        .message(Message::tool_result(call.id.clone(), "18 C and sunny"));
    let r = c.chat(follow_up).await.unwrap();
    assert!(r.text.contains("18 C and sunny"), "{}", r.text);
    assert_eq!(r.finish_reason, Some(FinishReason::Stop));
    all_verified(&emu, 2);
}

#[tokio::test]
async fn an_image_and_a_structured_answer() {
    let clock = ManualClock::new();
    let emu = emulator(&clock, ProviderConfig::bedrock("bedrock")).await;
    let c = client(&clock, &emu);
    let r = c
        .chat(ChatRequest::new().message(
            Message::user("What is in this picture?").image(Image::base64("image/png", PNG)),
        ))
        .await
        .unwrap();
    assert!(!r.text.is_empty());
    // Bedrock counts about 1,600 tokens an image (as Anthropic does).
    assert!(
        r.usage.is_some_and(|u| u.input_tokens >= 1600),
        "{:?}",
        r.usage
    );

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
    all_verified(&emu, 2);
}

#[tokio::test]
async fn streams_text_and_a_tool_call() {
    let clock = ManualClock::new();
    let emu = emulator(&clock, ProviderConfig::bedrock("bedrock")).await;
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
    assert!(usage.is_some(), "metadata's usage");
    assert!(finish.is_some());

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
    assert_eq!(calls[0].name, "get_weather");
    assert_eq!(calls[0].arguments["city"], "Paris");
    assert_eq!(finish, Some(FinishReason::ToolCalls));
    let log = emu.log();
    assert!(
        log.iter()
            .all(|e| e.stream && e.path.ends_with("/converse-stream"))
    );
    all_verified(&emu, 2);
}

#[tokio::test]
async fn an_exception_frame_mid_stream_is_its_error() {
    let clock = ManualClock::new();
    let emu = emulator(&clock, ProviderConfig::bedrock("bedrock")).await;
    emu.script("bedrock", [Fault::StreamError]);
    let c = client(&clock, &emu);
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
    let e = failed.expect("the exception frame surfaces");
    assert_eq!(e.kind(), ErrorKind::RateLimited, "{e}");
    assert_eq!(e.code(), Some("throttlingException"));
}

#[tokio::test]
async fn a_frame_with_a_bad_crc_is_a_decode_error() {
    let clock = ManualClock::new();
    let emu = emulator(&clock, ProviderConfig::bedrock("bedrock")).await;
    emu.script("bedrock", [Fault::MalformedJson]);
    let c = client(&clock, &emu);
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
    let e = failed.expect("the broken frame surfaces");
    assert_eq!(e.kind(), ErrorKind::Decode, "{e}");
}

#[tokio::test]
async fn a_wrong_secret_is_auth_sent_once() {
    let clock = ManualClock::new();
    let emu = emulator(&clock, ProviderConfig::bedrock("bedrock")).await;
    let creds = emu.aws_credentials("bedrock");
    let wrong = Credential::aws(
        creds.access_key_id.clone(),
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYWRONGSECRET",
        None,
    );
    let c = client_with(&clock, &emu, wrong);
    let err = c
        .chat(ChatRequest::from_prompt("hi").max_tokens(10))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Auth, "{err}");
    assert!(err.is_terminal());
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains("WRONGSECRET"), "{shown}");
    let c = emu.counters("bedrock");
    assert_eq!((c.requests, c.ok), (1, 0), "sent once, not retried: {c:?}");
}

#[tokio::test]
async fn a_plain_key_is_refused_before_sending() {
    let clock = ManualClock::new();
    let emu = emulator(&clock, ProviderConfig::bedrock("bedrock")).await;
    let c = client_with(&clock, &emu, Credential::new("not-aws"));
    let err = c
        .chat(ChatRequest::from_prompt("hi").max_tokens(10))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Auth, "{err}");
    assert!(err.to_string().contains("access key id"), "{err}");
    assert_eq!(emu.counters("bedrock").requests, 0);
}

#[tokio::test]
async fn temporary_credentials_carry_their_session_token() {
    let clock = ManualClock::new();
    let emu = emulator(
        &clock,
        ProviderConfig::bedrock("bedrock").with_session_token("FwoGZXIvYXdzEXAMPLETOKEN"),
    )
    .await;
    let c = client(&clock, &emu);
    c.chat(ChatRequest::from_prompt("hi").max_tokens(10))
        .await
        .unwrap();
    all_verified(&emu, 1);

    // The same keys without the token: the emulator does not recognise them.
    let creds = emu.aws_credentials("bedrock");
    let tokenless = Credential::aws(creds.access_key_id, creds.secret_access_key, None);
    let err = client_with(&clock, &emu, tokenless)
        .chat(ChatRequest::from_prompt("hi").max_tokens(10))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Auth, "{err}");
    assert!(!format!("{err:?}").contains("EXAMPLETOKEN"));
    assert_eq!(emu.counters("bedrock").requests, 2);
}

/// A wrong secret with a session token: AWS's refusal echoes the canonical request, which
/// holds the token; the error shows neither the token nor the secret.
#[tokio::test]
async fn a_refusal_echoing_the_session_token_is_scrubbed() {
    let clock = ManualClock::new();
    let emu = emulator(
        &clock,
        ProviderConfig::bedrock("bedrock").with_session_token("FwoGZXIvYXdzEXAMPLETOKEN"),
    )
    .await;
    let creds = emu.aws_credentials("bedrock");
    let wrong = Credential::aws(
        creds.access_key_id,
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYWRONGSECRET",
        creds.session_token,
    );
    let err = client_with(&clock, &emu, wrong)
        .chat(ChatRequest::from_prompt("hi").max_tokens(10))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Auth, "{err}");
    assert_eq!(err.code(), Some("InvalidSignatureException"));
    let shown = format!("{err} {err:?} {}", err.message());
    assert!(!shown.contains("EXAMPLETOKEN"), "{shown}");
    assert!(!shown.contains("WRONGSECRET"), "{shown}");
    assert_eq!(emu.counters("bedrock").requests, 1);
}

#[tokio::test]
async fn throttling_without_headers_is_rate_limited() {
    let clock = ManualClock::new();
    let emu = emulator(&clock, ProviderConfig::bedrock("bedrock")).await;
    emu.script(
        "bedrock",
        vec![
            Fault::RateLimit {
                retry_after: RetryAfter::Bucket,
            };
            5
        ],
    );
    let c = client(&clock, &emu);
    // A wait shorter than the waits header-less 429s earn (a backoff of tens of
    // milliseconds, growing): the request ends throttled. (Not a 1 ms deadline: the
    // attempt's HTTP timeout is a share of the deadline, on the wall clock, and a loaded
    // machine takes longer than 1 ms to answer over loopback.)
    let opts = RequestOptions::new().max_wait(Duration::from_millis(1));
    let err = c
        .chat_with(ChatRequest::from_prompt("hi").max_tokens(10), &opts)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RateLimited, "{err}");
    assert!(err.is_retryable() && !err.is_terminal());
    let c = emu.counters("bedrock");
    assert!(c.requests >= 1 && c.rate_limited == c.requests, "{c:?}");
    let log = emu.log();
    assert_eq!(log[0].status, Some(429));
}

#[tokio::test]
async fn a_later_request_after_throttling_is_answered() {
    let clock = ManualClock::new();
    let emu = emulator(&clock, ProviderConfig::bedrock("bedrock")).await;
    emu.script(
        "bedrock",
        [Fault::RateLimit {
            retry_after: RetryAfter::Bucket,
        }],
    );
    let c = client(&clock, &emu);
    c.chat(ChatRequest::from_prompt("hi").max_tokens(10))
        .await
        .unwrap();
    // No header said how long: the core chose the wait, on its clock.
    assert!(!clock.sleeps().is_empty());
    let c = emu.counters("bedrock");
    assert_eq!((c.rate_limited, c.ok), (1, 1), "{c:?}");
}

/// `kind = "bedrock"` in providers.toml builds the wing's adapter (the facade links it), the
/// region read from the host; a host without one is a configuration error. Its credentials
/// are AWS's, read per environment from the variables `aws_credentials_env` names.
#[test]
fn providers_toml_builds_the_bedrock_adapter() {
    let config = |base_url: &str| {
        Config::from_toml_str(&format!(
            r#"
            default_environment = "prod"
            [providers.aws]
            kind = "bedrock"
            base_url = "{base_url}"
            model = "amazon.nova-lite-v1:0"
            aws_credentials_env = {{ prod = {{ access_key_id = "AWS_ACCESS_KEY_ID", secret_access_key = "AWS_SECRET_ACCESS_KEY" }} }}
            [environments.prod]
            chat = ["aws"]
            "#
        ))
        .unwrap()
    };
    let cfg = config("https://bedrock-runtime.eu-central-1.amazonaws.com");
    let adapter = from_config(cfg.provider("aws").unwrap()).unwrap();
    assert_eq!(adapter.kind(), "bedrock");
    assert_eq!(adapter.id().as_str(), "aws");
    assert_eq!(
        adapter.default_model(llm_failover::Capability::Chat),
        Some("amazon.nova-lite-v1:0")
    );

    let cfg = config("https://proxy.example.com/bedrock");
    let err = from_config(cfg.provider("aws").unwrap()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config);
    assert!(
        err.to_string().contains("cannot read the AWS region"),
        "{err}"
    );
}

/// One key for Bedrock, or AWS credentials for another kind, is refused naming the field
/// and what to write instead; a variable that is not set is named with its TOML path.
#[test]
fn aws_credentials_are_bedrocks_and_bedrock_takes_nothing_else() {
    let parse = |provider: &str| {
        Config::from_toml_str(&format!(
            r#"
            default_environment = "prod"
            [environments.prod]
            chat = ["p"]
            [providers.p]
            model = "m"
            {provider}
            "#
        ))
    };
    let err = parse(
        r#"kind = "bedrock"
        base_url = "https://bedrock-runtime.us-east-1.amazonaws.com"
        api_key_env = { prod = "AWS_SECRET_ACCESS_KEY" }"#,
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("providers.p.api_key_env")
            && err.to_string().contains("aws_credentials_env"),
        "{err}"
    );
    let err = parse(
        r#"kind = "openai"
        base_url = "https://api.openai.com/v1"
        aws_credentials_env = { prod = { access_key_id = "A", secret_access_key = "B" } }"#,
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("providers.p.aws_credentials_env"),
        "{err}"
    );
    let err = parse(
        r#"kind = "bedrock"
        base_url = "https://bedrock-runtime.us-east-1.amazonaws.com"
        aws_credentials_env = { prod = { access_key_id = "AKIAIOSFODNN7EXAMPLE", secret_access_key = "AWS_SECRET_ACCESS_KEY" } }"#,
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("providers.p.aws_credentials_env.prod.access_key_id")
            && !err.to_string().contains("AKIAIOSFODNN7EXAMPLE"),
        "{err}"
    );
    let cfg = parse(
        r#"kind = "bedrock"
        base_url = "https://bedrock-runtime.us-east-1.amazonaws.com"
        aws_credentials_env = { prod = { access_key_id = "KEY_ID", secret_access_key = "SECRET", session_token = "TOKEN" } }"#,
    )
    .unwrap();
    let err = cfg
        .credential("p", "prod", &|var| (var != "TOKEN").then(|| "x".to_owned()))
        .unwrap_err();
    assert!(
        err.to_string().contains("`TOKEN`")
            && err
                .to_string()
                .contains("providers.p.aws_credentials_env.prod.session_token"),
        "{err}"
    );
}

/// End to end from providers.toml: the client reads the environment's variables (temporary
/// credentials: a session token too), signs for the region named, and the emulator verifies
/// every signature.
#[tokio::test]
async fn a_client_from_providers_toml_signs_with_the_environments_aws_credentials() {
    let clock = ManualClock::new();
    let emu = emulator(
        &clock,
        ProviderConfig::bedrock("bedrock").with_session_token("FwoGZXIvYXdzEXAMPLETOKEN"),
    )
    .await;
    let creds = emu.aws_credentials("bedrock");
    let config = Config::from_toml_str(&format!(
        r#"
        default_environment = "prod"
        [environments.prod]
        chat = ["aws"]
        [providers.aws]
        kind = "bedrock"
        base_url = "{}"
        region = "{}"
        allow_http = true
        model = "{MODEL}"
        aws_credentials_env = {{ prod = {{ access_key_id = "AWS_ACCESS_KEY_ID", secret_access_key = "AWS_SECRET_ACCESS_KEY", session_token = "AWS_SESSION_TOKEN" }} }}
        "#,
        emu.base_url("bedrock"),
        creds.region
    ))
    .unwrap();
    let c = creds.clone();
    let client = Client::builder()
        .config(config)
        .clock(Arc::new(clock.clone()))
        .env_lookup(move |var| match var {
            "AWS_ACCESS_KEY_ID" => Some(c.access_key_id.clone()),
            "AWS_SECRET_ACCESS_KEY" => Some(c.secret_access_key.clone()),
            "AWS_SESSION_TOKEN" => c.session_token.clone(),
            _ => None,
        })
        .build()
        .unwrap();
    client
        .chat(ChatRequest::from_prompt("hi").max_tokens(10))
        .await
        .unwrap();
    all_verified(&emu, 1);
    // The secrets never show in the client's Debug.
    let shown = format!("{client:?}");
    assert!(!shown.contains(&creds.secret_access_key), "{shown}");
}

/// The provider's extra body is merged before `finish` signs: the signature covers the body
/// as sent (a body changed after signing fails the emulator's check).
#[tokio::test]
async fn the_signature_covers_the_extra_body() {
    let clock = ManualClock::new();
    let emu = emulator(&clock, ProviderConfig::bedrock("bedrock")).await;
    let settings = ProviderSettings::new()
        .credential(aws(&emu))
        .extra_body("additionalModelRequestFields", json!({"top_k": 50}))
        // Merged into the adapter's inferenceConfig (maxTokens stays).
        .extra_body("inferenceConfig", json!({"topP": 0.9}));
    let c = Client::builder()
        .clock(Arc::new(clock.clone()))
        .rng(Arc::new(SeededRng::new(7)))
        .provider(adapter(&emu), settings)
        .build()
        .unwrap();
    c.chat(ChatRequest::from_prompt("hi").max_tokens(10))
        .await
        .unwrap();
    all_verified(&emu, 1);
}
