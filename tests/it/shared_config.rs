//! Turning shared limits on: `[shared]` in `providers.toml` (every bad value named by its
//! path, the Redis password never shown), `Config::builder().shared(..)`, and the client's
//! choice between the builder's settings, the `LLM_FAILOVER_REDIS_URL` variable and the
//! file's table — against a real `redis-server` where a store must answer.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use llm_failover::config::{Config, ProviderConfig, ProviderKind};
use llm_failover::ratelimit::{Limits, MemoryStore, REDIS_URL_VAR, SharedSettings, WhenDown};
use llm_failover::{ChatRequest, Client, ClientBuilder, Error};
use llm_failover_emulator::scripted::ScriptedServer;

use crate::support::redis::RedisServer;
use crate::support::{CHAT, ok};

/// A Redis password: it must never appear in any output.
const PASSWORD: &str = "pw-SENTINEL-7f3a";

/// One provider on loopback (`base`), then `extra` (a `[shared]` table, say).
fn toml_at(base: &str, extra: &str) -> String {
    format!(
        "default_environment = \"e\"\n\
         [environments.e]\n\
         chat = [\"p\"]\n\
         [providers.p]\n\
         kind = \"openai\"\n\
         base_url = \"{base}/v1\"\n\
         model = \"gpt-4o-mini\"\n\
         auth = \"none\"\n\
         limits = {{ rpm = 60 }}\n\
         {extra}"
    )
}

fn toml(extra: &str) -> String {
    toml_at("http://127.0.0.1:9", extra)
}

fn with_password(port: u16) -> String {
    format!("redis://:{PASSWORD}@127.0.0.1:{port}")
}

fn parse_err(text: &str) -> Error {
    match Config::from_toml_str(text) {
        Ok(config) => panic!("expected an error, got {config:?} for:\n{text}"),
        Err(e) => e,
    }
}

fn assert_no_password(shown: &str) {
    assert!(!shown.contains("SENTINEL"), "the password leaked: {shown}");
}

/// A client builder reading `LLM_FAILOVER_REDIS_URL` as `url` (and no other variable).
fn builder_with_var(config: Config, url: Option<String>) -> ClientBuilder {
    Client::builder().config(config).env_lookup(move |var| {
        if var == REDIS_URL_VAR {
            url.clone()
        } else {
            None
        }
    })
}

#[test]
fn a_shared_table_becomes_the_settings() {
    let config = Config::from_toml_str(&toml(&format!(
        "[shared]\n\
         redis_url = \"{}\"\n\
         key_prefix = \"batch-7\"\n\
         timeout_ms = 80\n\
         when_down = \"local_share\"\n\
         processes = 4\n\
         retry_interval_ms = 500\n",
        with_password(6380)
    )))
    .unwrap();
    let want = SharedSettings::new(with_password(6380))
        .prefix("batch-7")
        .timeout(Duration::from_millis(80))
        .when_down(WhenDown::LocalShare {
            processes: NonZeroU32::new(4).unwrap(),
        })
        .retry_interval(Duration::from_millis(500));
    assert_eq!(config.shared, Some(want));
    let shared = config.shared.as_ref().unwrap();
    assert_eq!(shared.host(), "127.0.0.1:6380");
    assert_no_password(&format!("{config:?}"));

    // Only the URL is required; the rest are the defaults.
    let config = Config::from_toml_str(&toml(
        "[shared]\nredis_url = \"redis://127.0.0.1:6379\"\nwhen_down = \"wait\"\n",
    ))
    .unwrap();
    assert_eq!(
        config.shared,
        Some(SharedSettings::new("redis://127.0.0.1:6379"))
    );
    assert_eq!(Config::from_toml_str(&toml("")).unwrap().shared, None);
}

#[test]
fn every_bad_shared_value_names_its_path_and_never_the_password() {
    let url = with_password(6379);
    let cases: Vec<(String, &str, &str)> = vec![
        (
            "key_prefix = \"x\"".into(),
            "shared.redis_url",
            "is required",
        ),
        ("redis_url = \"\"".into(), "shared.redis_url", "is empty"),
        (
            "redis_url = 6379".into(),
            "shared.redis_url",
            "expected a string",
        ),
        (
            format!("redis_url = \"http://:{PASSWORD}@127.0.0.1:6379\""),
            "shared.redis_url",
            "must be a redis:// URL",
        ),
        (
            format!("redis_url = \"redis://:{PASSWORD}@127.0.0.1:99999\""),
            "shared.redis_url",
            "is not a valid URL",
        ),
        (
            format!("redis_url = \"redis://:{PASSWORD}@127.0.0.1:6379/{PASSWORD}\""),
            "shared.redis_url",
            "database number",
        ),
        (
            format!("redis_url = \"{PASSWORD}@127.0.0.1\""),
            "shared.redis_url",
            "is not a valid URL",
        ),
        (
            format!("redis_url = \"{url}\"\nkey_prefix = \"\""),
            "shared.key_prefix",
            "1 to 64",
        ),
        (
            format!("redis_url = \"{url}\"\nkey_prefix = \"a{{b}}\""),
            "shared.key_prefix",
            "`{` and `}`",
        ),
        (
            format!("redis_url = \"{url}\"\ntimeout_ms = 0"),
            "shared.timeout_ms",
            "from 1 to 60000",
        ),
        (
            format!("redis_url = \"{url}\"\ntimeout_ms = 60001"),
            "shared.timeout_ms",
            "not 60001",
        ),
        (
            format!("redis_url = \"{url}\"\ntimeout_ms = \"{url}\""),
            "shared.timeout_ms",
            "expected an integer, found a string",
        ),
        (
            format!("redis_url = \"{url}\"\nretry_interval_ms = -5"),
            "shared.retry_interval_ms",
            "not -5",
        ),
        (
            format!("redis_url = \"{url}\"\nwhen_down = \"fail_open\""),
            "shared.when_down",
            "\"wait\"",
        ),
        (
            format!("redis_url = \"{url}\"\nwhen_down = \"local_share\""),
            "shared.processes",
            "is required with when_down = \"local_share\"",
        ),
        (
            format!("redis_url = \"{url}\"\nwhen_down = \"local_share\"\nprocesses = 0"),
            "shared.processes",
            "not 0",
        ),
        (
            format!("redis_url = \"{url}\"\nprocesses = 4"),
            "shared.processes",
            "applies only with when_down = \"local_share\"",
        ),
        (
            format!("redis_url = \"{url}\"\nredis_uri = \"{url}\""),
            "shared.redis_uri",
            "unknown field; valid fields here: `redis_url`",
        ),
        (
            format!("redis_url = \"redis://127.0.0.1\"\npassword = \"{PASSWORD}\""),
            "shared.password",
            "a Redis password goes inside redis_url",
        ),
        (
            format!("redis_url = \"redis://127.0.0.1\"\nredis_password = \"{PASSWORD}\""),
            "shared.redis_password",
            REDIS_URL_VAR,
        ),
    ];
    for (body, path, part) in cases {
        let text = toml(&format!("[shared]\n{body}\n"));
        let err = parse_err(&text);
        let message = err.to_string();
        assert!(err.is_config(), "{body}: {message}");
        assert!(
            err.message().starts_with(&format!("{path} (line ")),
            "{body}: {message}"
        );
        assert!(message.contains(part), "{body}: want {part:?} in {message}");
        assert_no_password(&format!("{message} {err:?}"));
    }

    // Not a table at all.
    let err = parse_err(&format!("shared = \"{url}\"\n{}", toml("")));
    assert!(err.message().starts_with("shared (line "), "{err}");
    assert_no_password(&format!("{err} {err:?}"));
}

#[test]
fn a_password_in_redis_url_passes_the_key_policy_and_is_never_shown() {
    let text = toml(&format!(
        "[shared]\nredis_url = \"{}\"\n",
        with_password(6379)
    ));
    let config = Config::from_toml_str(&text).unwrap();
    assert_no_password(&format!("{config:?}"));
    let builder = builder_with_var(config, None);
    assert_no_password(&format!(
        "{:?}",
        builder.shared(SharedSettings::new(with_password(1)))
    ));
    let client = builder_with_var(Config::from_toml_str(&text).unwrap(), None)
        .build()
        .unwrap();
    assert_no_password(&format!("{client:?}"));
    assert_eq!(client.shared().unwrap().host(), "127.0.0.1:6379");

    // A TOML syntax error next to it, or a second one, does not quote it.
    let url = with_password(6379);
    for broken in [
        format!("[shared]\nredis_url = \"{url}\n"),
        format!("[shared]\nredis_url = \"{url}\"\nredis_url = \"{url}\"\n"),
        format!("[shared]\nredis_url = \"{url}\"\n[shared]\nredis_url = \"{url}\"\n"),
        format!("[shared]\nredis_url = '''{url}\n"),
    ] {
        let err = parse_err(&toml(&broken));
        assert!(err.message().contains("line "), "{err}");
        assert_no_password(&format!("{err} {err:?}"));
    }
}

#[test]
fn the_config_builder_writes_what_a_shared_table_holds() {
    let shared = SharedSettings::new(with_password(6381))
        .prefix("nightly")
        .timeout(Duration::from_millis(120))
        .when_down(WhenDown::LocalShare {
            processes: NonZeroU32::new(3).unwrap(),
        });
    let built = Config::builder("e")
        .provider(
            "p",
            ProviderConfig::builder(ProviderKind::OpenAi, "http://127.0.0.1:9/v1")
                .model("gpt-4o-mini")
                .no_key()
                .limits(Limits::none().with_rpm(60)),
        )
        .chat("e", ["p"])
        .shared(shared)
        .build()
        .unwrap();
    let parsed = Config::from_toml_str(&toml(&format!(
        "[shared]\nredis_url = \"{}\"\nkey_prefix = \"nightly\"\ntimeout_ms = 120\n\
         when_down = \"local_share\"\nprocesses = 3\n",
        with_password(6381)
    )))
    .unwrap();
    assert_eq!(built, parsed);

    let err = Config::builder("e")
        .provider(
            "p",
            ProviderConfig::builder(ProviderKind::OpenAi, "http://127.0.0.1:9/v1")
                .model("m")
                .no_key(),
        )
        .chat("e", ["p"])
        .shared(SharedSettings::new(format!("http://:{PASSWORD}@h:1")))
        .build()
        .unwrap_err();
    assert!(err.message().starts_with("shared.redis_url: "), "{err}");
    assert_no_password(&format!("{err} {err:?}"));
}

#[test]
fn the_variable_turns_sharing_on_keeping_the_files_other_values() {
    // Variable only.
    let config = Config::from_toml_str(&toml("")).unwrap();
    let client = builder_with_var(config.clone(), Some(with_password(6390)))
        .build()
        .unwrap();
    let shared = client.shared().expect("the variable turns sharing on");
    assert_eq!(shared, &SharedSettings::new(with_password(6390)));
    assert_no_password(&format!("{client:?}"));

    // Over the file's table: its URL replaced, its other values kept.
    let file = Config::from_toml_str(&toml(
        "[shared]\nredis_url = \"redis://10.0.0.1:6379\"\nkey_prefix = \"team-a\"\n\
         timeout_ms = 90\n",
    ))
    .unwrap();
    let client = builder_with_var(file.clone(), Some(format!(" {} ", with_password(6391))))
        .build()
        .unwrap();
    let shared = client.shared().unwrap();
    assert_eq!(shared.host(), "127.0.0.1:6391");
    assert_eq!(shared.key_prefix, "team-a");
    assert_eq!(shared.timeout, Duration::from_millis(90));

    // Blank counts as unset: the file's own table.
    let client = builder_with_var(file.clone(), Some("  ".to_owned()))
        .build()
        .unwrap();
    assert_eq!(client.shared().unwrap().host(), "10.0.0.1:6379");
    // Neither: this process's memory.
    let client = builder_with_var(config, None).build().unwrap();
    assert_eq!(client.shared(), None);

    // The builder's own settings win over both.
    let client = builder_with_var(file, Some(with_password(6391)))
        .shared(SharedSettings::new("redis://127.0.0.1:6392").prefix("code"))
        .build()
        .unwrap();
    assert_eq!(client.shared().unwrap().host(), "127.0.0.1:6392");
    assert_eq!(client.shared().unwrap().key_prefix, "code");
}

#[test]
fn the_variable_applies_to_providers_added_in_code_too() {
    let local = llm_failover::provider::openai::OpenAi::new(
        llm_failover::ProviderId::new("local"),
        "http://127.0.0.1:9/v1".parse().unwrap(),
    );
    let url = with_password(6393);
    let client = Client::builder()
        .provider(Arc::new(local), llm_failover::ProviderSettings::new())
        .env_lookup(move |var| (var == REDIS_URL_VAR).then(|| url.clone()))
        .build()
        .unwrap();
    assert_eq!(client.shared().unwrap().host(), "127.0.0.1:6393");
}

#[test]
fn a_bad_url_is_an_error_naming_where_it_came_from_never_the_password() {
    let config = Config::from_toml_str(&toml("")).unwrap();
    for bad in [
        format!("http://:{PASSWORD}@127.0.0.1:6379"),
        format!("redis://:{PASSWORD}@127.0.0.1:99999"),
        PASSWORD.to_owned(),
    ] {
        let err = builder_with_var(config.clone(), Some(bad.clone()))
            .build()
            .unwrap_err();
        assert!(err.is_config(), "{err}");
        assert!(
            err.message()
                .starts_with(&format!("environment variable {REDIS_URL_VAR} ")),
            "{err}"
        );
        assert_no_password(&format!("{err} {err:?}"));

        let err = builder_with_var(config.clone(), None)
            .shared(SharedSettings::new(bad))
            .build()
            .unwrap_err();
        assert!(
            err.message()
                .starts_with("ClientBuilder::shared: redis_url "),
            "{err}"
        );
        assert_no_password(&format!("{err} {err:?}"));
    }
    let err = builder_with_var(config, None)
        .shared(SharedSettings::new("redis://127.0.0.1:6379").timeout(Duration::ZERO))
        .build()
        .unwrap_err();
    assert!(
        err.message()
            .starts_with("ClientBuilder::shared: timeout must be"),
        "{err}"
    );
}

#[test]
fn a_limiter_store_together_with_shared_settings_is_refused_saying_which_to_drop() {
    let plain = Config::from_toml_str(&toml("")).unwrap();
    let file = Config::from_toml_str(&toml(&format!(
        "[shared]\nredis_url = \"{}\"\n",
        with_password(6394)
    )))
    .unwrap();
    let store = || Arc::new(MemoryStore::new());
    let cases = [
        (
            builder_with_var(plain.clone(), Some(with_password(6394))),
            REDIS_URL_VAR,
        ),
        (builder_with_var(file, None), "[shared]"),
        (
            builder_with_var(plain.clone(), None).shared(SharedSettings::new(with_password(6394))),
            "ClientBuilder::shared",
        ),
    ];
    for (builder, origin) in cases {
        let err = builder.limiter_store(store()).build().unwrap_err();
        let message = err.to_string();
        assert!(err.is_config(), "{message}");
        for part in [
            "ClientBuilder::limiter_store",
            origin,
            "127.0.0.1:6394",
            "drop",
        ] {
            assert!(message.contains(part), "want {part:?} in {message}");
        }
        assert_no_password(&format!("{message} {err:?}"));
    }
    // A store of one's own without shared settings is fine.
    let client = builder_with_var(plain, None)
        .limiter_store(store())
        .build()
        .unwrap();
    assert_eq!(client.shared(), None);
}

/// The level of `client`'s request bucket for provider `p`.
async fn request_level(client: &Client) -> f64 {
    let limits = client.limits("p", "gpt-4o-mini").await.unwrap().unwrap();
    limits.requests.expect("rpm is configured").level
}

#[tokio::test]
async fn clients_on_the_variable_book_in_one_redis() {
    let redis = RedisServer::start();
    let server = ScriptedServer::start().await;
    server.push(CHAT, ok("hi"));
    let config = Config::from_toml_str(&toml_at(&server.url(), "")).unwrap();
    let shared = |config: &Config| {
        builder_with_var(config.clone(), Some(redis.url()))
            .build()
            .unwrap()
    };
    let (a, b) = (shared(&config), shared(&config));
    let alone = builder_with_var(config, None).build().unwrap();
    assert_eq!(
        a.shared().unwrap().host(),
        format!("127.0.0.1:{}", redis.port())
    );

    a.chat(ChatRequest::from_prompt("hello").max_tokens(8))
        .await
        .unwrap();
    assert_eq!(server.count(CHAT), 1);
    // `b` sees the slot `a` booked; a client of its own memory does not.
    let seen_by_b = request_level(&b).await;
    assert!(seen_by_b < 59.5, "b sees {seen_by_b}");
    assert_eq!(request_level(&alone).await, 60.0);
}

#[test]
fn the_commented_shared_example_in_providers_toml_parses_to_the_defaults() {
    let file = include_str!("../../providers.toml");
    let shipped = Config::from_toml_str(file).unwrap();
    assert_eq!(shipped.shared, None, "the shipped file shares nothing");
    let example: Vec<&str> = file
        .lines()
        .skip_while(|l| *l != "# [shared]")
        .take_while(|l| l.starts_with("# "))
        .map(|l| &l[2..])
        .collect();
    assert!(example.len() >= 6, "{example:?}");
    let uncommented = format!("{file}\n{}\n", example.join("\n"));
    let config = Config::from_toml_str(&uncommented).unwrap();
    assert_eq!(
        config.shared,
        Some(SharedSettings::new("redis://127.0.0.1:6379"))
    );
}
