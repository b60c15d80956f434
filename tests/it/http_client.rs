//! A `reqwest::Client` of the caller's (proxies, roots, default headers) and the user agent,
//! over real loopback HTTP: what reaches the server, and a redirect such a client follows
//! refused.

use std::sync::Arc;

use llm_failover::provider::openai::OpenAi;
use llm_failover::{ChatRequest, Client, Credential, ErrorKind, ProviderId, ProviderSettings};
use llm_failover_emulator::scripted::{Reply, ScriptedServer};
use reqwest::header::{HeaderMap, HeaderValue};

const ANSWER: &str = r#"{"id": "chatcmpl-1", "object": "chat.completion", "created": 1,
    "model": "gpt-4o-mini",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "4"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}}"#;

fn builder(server: &ScriptedServer) -> llm_failover::ClientBuilder {
    let adapter = OpenAi::new(
        ProviderId::new("local"),
        format!("{}/v1", server.url()).parse().unwrap(),
    )
    .with_chat_model("gpt-4o-mini");
    Client::builder().provider(
        Arc::new(adapter),
        ProviderSettings::new().credential(Credential::new("sk-provider-key")),
    )
}

#[tokio::test]
async fn a_callers_client_sends_its_default_headers_and_the_provider_s_key() {
    let server = ScriptedServer::start().await;
    server.push("/v1/chat/completions", Reply::json(200, ANSWER));
    let mut defaults = HeaderMap::new();
    defaults.insert("x-team", HeaderValue::from_static("research"));
    // A default Authorization is replaced by the provider's own key.
    defaults.insert(
        "authorization",
        HeaderValue::from_static("Bearer not-this-one"),
    );
    let http = reqwest::Client::builder()
        .default_headers(defaults)
        .user_agent("their-default/1.0")
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let client = builder(&server).http_client(http).build().unwrap();
    let answer = client.chat(ChatRequest::from_prompt("2+2?")).await.unwrap();
    assert_eq!(answer.text, "4");

    let got = &server.requests()[0];
    assert_eq!(got.header("x-team"), Some("research"));
    assert_eq!(got.header("authorization"), Some("Bearer sk-provider-key"));
    assert_eq!(
        got.header("user-agent"),
        Some("their-default/1.0"),
        "the client's own agent"
    );
}

#[tokio::test]
async fn the_user_agent_is_ours_by_default_and_configurable_with_either_client() {
    let server = ScriptedServer::start().await;
    for _ in 0..3 {
        server.push("/v1/chat/completions", Reply::json(200, ANSWER));
    }
    let ours = builder(&server).build().unwrap();
    ours.chat(ChatRequest::from_prompt("a")).await.unwrap();
    let named = builder(&server)
        .user_agent("nightly-batch/2.1 (ops@example.com)")
        .build()
        .unwrap();
    named.chat(ChatRequest::from_prompt("b")).await.unwrap();
    let theirs = builder(&server)
        .http_client(
            reqwest::Client::builder()
                .user_agent("x/1")
                .build()
                .unwrap(),
        )
        .user_agent("nightly-batch/2.1")
        .build()
        .unwrap();
    theirs.chat(ChatRequest::from_prompt("c")).await.unwrap();

    let agents: Vec<_> = server
        .requests()
        .iter()
        .map(|r| r.header("user-agent").map(str::to_owned))
        .collect();
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        agents,
        [
            Some(format!("llm-failover/{version}")),
            Some("nightly-batch/2.1 (ops@example.com)".to_owned()),
            Some("nightly-batch/2.1".to_owned()),
        ]
    );

    let e = builder(&server)
        .user_agent("bad\nagent")
        .build()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Config);
    assert!(e.to_string().contains("user agent"), "{e}");
}

#[tokio::test]
async fn an_answer_that_came_through_a_redirect_the_client_followed_is_refused() {
    let server = ScriptedServer::start().await;
    let elsewhere = format!("{}/elsewhere/chat/completions", server.url());
    server.push(
        "/v1/chat/completions",
        Reply::status(307).header("location", &elsewhere),
    );
    server.push("/elsewhere/chat/completions", Reply::json(200, ANSWER));
    // reqwest's default policy follows redirects.
    let client = builder(&server)
        .http_client(reqwest::Client::new())
        .build()
        .unwrap();
    let e = client
        .chat(ChatRequest::from_prompt("2+2?"))
        .await
        .unwrap_err();
    let config = e
        .attempts()
        .iter()
        .chain(std::iter::once(&e))
        .find(|a| a.kind() == ErrorKind::Config);
    assert!(config.is_some(), "{e:?}");
    assert!(e.to_string().contains("redirect"), "{e}");
    assert!(!e.to_string().contains("sk-provider-key"));
}
