//! Extra body fields (`seed`, `top_p`, `user`, …): per provider and per request, merged into
//! the JSON body every chat adapter writes, the request over its provider; `model` and
//! `stream` refused; and accepted by the emulator like the providers' APIs accept them.

use std::sync::Arc;

use llm_failover::config::Config;
use llm_failover::http::{Body, Script, ScriptedTransport};
use llm_failover::provider::Provider;
use llm_failover::provider::anthropic::Anthropic;
use llm_failover::provider::gemini::Gemini;
use llm_failover::provider::openai::OpenAi;
use llm_failover::{
    ChatRequest, Client, Credential, ErrorKind, ProviderId, ProviderSettings, RequestOptions,
};
use llm_failover_emulator::{Emulator, ProviderConfig};
use serde_json::{Value, json};

fn body(t: &ScriptedTransport, host: &str) -> Value {
    let sent = t.requests(host);
    let Body::Json(bytes) = &sent.last().expect("a request was sent").body else {
        panic!("not a JSON body")
    };
    serde_json::from_slice(bytes).unwrap()
}

fn url(host: &str, path: &str) -> url::Url {
    format!("http://{host}{path}").parse().unwrap()
}

/// A client over `providers` (each answering 400, so each is sent once), with `extra` per
/// provider.
fn client(providers: Vec<(Arc<dyn Provider>, ProviderSettings)>) -> (Client, ScriptedTransport) {
    let t = ScriptedTransport::new();
    let mut b = Client::builder().transport(Arc::new(t.clone()));
    for (p, s) in providers {
        b = b.provider(p, s.credential(Credential::new("sk-test")));
    }
    (b.build().unwrap(), t)
}

fn refused() -> Script {
    Script::json(
        400,
        r#"{"error": {"message": "no", "type": "invalid_request_error"}}"#,
    )
}

#[tokio::test]
async fn each_adapter_s_body_carries_its_provider_s_and_the_request_s_fields() {
    let openai =
        OpenAi::new(ProviderId::new("openai"), url("openai", "/v1")).with_chat_model("gpt-4o-mini");
    let anthropic = Anthropic::new(ProviderId::new("anthropic"), url("anthropic", "/v1"))
        .with_model("claude-3-5-haiku-latest");
    let gemini = Gemini::new(ProviderId::new("gemini"), url("gemini", "/v1beta"))
        .with_model("gemini-2.0-flash");
    let (c, t) = client(vec![
        (
            Arc::new(openai),
            ProviderSettings::new()
                .extra_body("seed", 1)
                .extra_body("user", "team-a"),
        ),
        (
            Arc::new(anthropic),
            ProviderSettings::new().extra_body("metadata", json!({"user_id": "team-a"})),
        ),
        (
            Arc::new(gemini),
            ProviderSettings::new().extra_body("generationConfig", json!({"seed": 7})),
        ),
    ]);
    for host in ["openai", "anthropic", "gemini"] {
        t.push(host, refused());
    }
    // Sent to each provider in turn (a 400 from each is terminal: one provider per call).
    let req = ChatRequest::from_prompt("Pick a number.")
        .temperature(0.2)
        .extra_body("seed", 42)
        .extra_body("top_p", 0.9);
    for host in ["openai", "anthropic", "gemini"] {
        let only = RequestOptions::new().provider(host);
        let _ = c.chat_with(req.clone(), &only).await;
    }

    let openai = body(&t, "openai");
    assert_eq!(openai["seed"], 42, "the request overrides its provider");
    assert_eq!(openai["user"], "team-a");
    assert_eq!(openai["top_p"], 0.9);
    assert_eq!(openai["model"], "gpt-4o-mini", "the adapter's fields stay");
    assert_eq!(openai["temperature"], 0.2);

    let anthropic = body(&t, "anthropic");
    assert_eq!(anthropic["metadata"], json!({"user_id": "team-a"}));
    assert_eq!(
        (anthropic["seed"].clone(), anthropic["top_p"].clone()),
        (json!(42), json!(0.9))
    );
    assert!(anthropic["max_tokens"].is_u64(), "{anthropic}");

    let gemini = body(&t, "gemini");
    // Merged into the adapter's generationConfig, not replacing it.
    assert_eq!(gemini["generationConfig"]["seed"], 7);
    assert_eq!(gemini["generationConfig"]["temperature"], 0.2);
    assert!(gemini["contents"].is_array(), "{gemini}");
}

#[tokio::test]
async fn model_and_stream_are_the_sdk_s_to_set() {
    let adapter = || {
        Arc::new(OpenAi::new(ProviderId::new("a"), url("a", "/v1")).with_chat_model("m"))
            as Arc<dyn Provider>
    };
    // Per provider: refused when the client is built.
    let e = Client::builder()
        .provider(
            adapter(),
            ProviderSettings::new().extra_body("model", "gpt-4o"),
        )
        .build()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Config);
    assert!(
        e.to_string()
            .contains("provider a's extra_body sets `model`"),
        "{e}"
    );

    // Per request: refused before anything is sent, and not failed over.
    let (c, t) = client(vec![(adapter(), ProviderSettings::new())]);
    let e = c
        .chat(ChatRequest::from_prompt("hi").extra_body("stream", true))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidRequest, "{e}");
    assert!(e.is_terminal());
    assert!(e.to_string().contains("`stream`"), "{e}");
    assert_eq!(t.count("a"), 0);
}

#[test]
fn providers_toml_takes_extra_body_as_json() {
    let file = |extra: &str| {
        format!(
            r#"
            default_environment = "dev"
            [environments.dev]
            chat = ["local"]
            [providers.local]
            kind = "openai"
            base_url = "http://127.0.0.1:11434/v1"
            model = "llama3.2"
            auth = "none"
            {extra}
            "#
        )
    };
    let config: Config = file(
        r#"extra_body = { seed = 7, top_p = 0.9, options = { num_ctx = 8192 }, stop = ["END"] }"#,
    )
    .parse()
    .unwrap();
    let extra = &config.provider("local").unwrap().extra_body;
    assert_eq!(
        Value::Object(extra.clone()),
        json!({"seed": 7, "top_p": 0.9, "options": {"num_ctx": 8192}, "stop": ["END"]})
    );

    for (extra, path, says) in [
        (
            "extra_body = { model = \"x\" }",
            "providers.local.extra_body.model",
            "the SDK's to set",
        ),
        (
            "extra_body = { when = 1979-05-27T07:32:00Z }",
            "providers.local.extra_body.when",
            "date-time",
        ),
        (
            "extra_body = { a = [1, nan] }",
            "providers.local.extra_body.a[1]",
            "not a finite number",
        ),
    ] {
        let e = file(extra).parse::<Config>().unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains(path) && text.contains(says),
            "{extra}: {text}"
        );
    }
}

#[tokio::test]
async fn the_emulator_accepts_extra_fields_as_openai_does() {
    let emu = Emulator::builder()
        .provider(ProviderConfig::openai("openai"))
        .start()
        .await
        .unwrap();
    let adapter = OpenAi::new(
        ProviderId::new("openai"),
        emu.base_url("openai").parse().unwrap(),
    )
    .with_chat_model("gpt-4o-mini");
    let client = Client::builder()
        .provider(
            Arc::new(adapter),
            ProviderSettings::new()
                .credential(Credential::new(emu.key("openai")))
                .extra_body("user", "team-a"),
        )
        .build()
        .unwrap();
    let answer = client
        .chat(
            ChatRequest::from_prompt("Pick a number.")
                .extra_body("seed", 42)
                .extra_body("top_p", 0.9)
                .extra_body("logit_bias", json!({"1234": -100})),
        )
        .await
        .unwrap();
    assert!(!answer.text.is_empty());
}
