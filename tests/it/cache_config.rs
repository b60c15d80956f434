//! Turning the response cache on from `providers.toml`: `[cache]` becomes the settings and the
//! client's cache (a cache given in code wins over it), every bad value and unknown key is a
//! `Config` error naming `cache.<key>` (and the file, when read from one) and never the Redis
//! password, and the commented table in the shipped `providers.toml` parses.

use std::path::PathBuf;
use std::time::Duration;

use llm_failover::cache::{Cache, DEFAULT_MAX_ENTRIES, DEFAULT_TTL};
use llm_failover::config::{CacheSettings, Config};
use llm_failover::{ChatRequest, Client, Error};
use llm_failover_emulator::scripted::ScriptedServer;

use crate::support::examples::TempDir;
use crate::support::{CHAT, ok};

/// A Redis password: it must never appear in any output.
const PASSWORD: &str = "pw-SENTINEL-c4c4e";

/// One provider on loopback (`base`), then `extra` (a `[cache]` table, say).
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
         {extra}"
    )
}

fn toml(extra: &str) -> String {
    toml_at("http://127.0.0.1:9", extra)
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

#[test]
fn a_cache_table_becomes_the_settings() {
    let config = Config::from_toml_str(&toml(&format!(
        "[cache]\n\
         url = \"redis://:{PASSWORD}@127.0.0.1:6390/3\"\n\
         ttl_ms = 3600000\n\
         max_entries = 5000\n\
         redis_prefix = \"answers-7\"\n\
         redis_timeout_ms = 80\n"
    )))
    .unwrap();
    let mut want = CacheSettings::new(format!("redis://:{PASSWORD}@127.0.0.1:6390/3"));
    want.ttl = Duration::from_secs(3600);
    want.max_entries = 5000;
    want.redis_prefix = Some("answers-7".into());
    want.redis_timeout = Some(Duration::from_millis(80));
    assert_eq!(config.cache, Some(want));
    let settings = config.cache.as_ref().unwrap();
    assert_eq!(settings.describe(), "redis://127.0.0.1:6390");
    assert_no_password(&format!("{config:?}"));

    // Only the URL is required; the rest are the cache's defaults. No table, no cache.
    let config = Config::from_toml_str(&toml("[cache]\nurl = \"memory\"\n")).unwrap();
    let settings = config.cache.unwrap();
    assert_eq!(
        (settings.ttl, settings.max_entries, settings.redis_prefix),
        (DEFAULT_TTL, DEFAULT_MAX_ENTRIES, None)
    );
    assert_eq!(Config::from_toml_str(&toml("")).unwrap().cache, None);
}

#[test]
fn a_client_built_from_the_file_has_its_cache_and_one_given_in_code_wins() {
    let text = toml("[cache]\nurl = \"sqlite:answers.sqlite\"\nttl_ms = 60000\n");
    let config = Config::from_toml_str(&text).unwrap();
    let client = Client::builder().config(config.clone()).build().unwrap();
    let cache = client.cache().expect("the file's [cache]");
    // A relative path stays relative: to the working directory, not the file's.
    assert_eq!(cache.describe(), "sqlite:answers.sqlite");
    assert_eq!(cache.ttl(), Duration::from_secs(60));

    let client = Client::builder()
        .config(config)
        .cache(Cache::memory())
        .build()
        .unwrap();
    assert_eq!(client.cache().map(Cache::describe), Some("memory"));

    let none = Client::builder()
        .config(Config::from_toml_str(&toml("")).unwrap())
        .build()
        .unwrap();
    assert!(none.cache().is_none() && none.stats().cache.is_none());

    // A Redis cache's password shows nowhere in the client either.
    let text = toml(&format!(
        "[cache]\nurl = \"redis://:{PASSWORD}@127.0.0.1:6391\"\n"
    ));
    let client = Client::builder()
        .config(Config::from_toml_str(&text).unwrap())
        .build()
        .unwrap();
    assert_no_password(&format!("{client:?} {:?}", client.cache()));
}

#[tokio::test]
async fn two_clients_built_from_one_file_with_an_sqlite_cache_ask_once() {
    let dir = TempDir::new("cache-config", "two-clients");
    let server = ScriptedServer::start().await;
    server.push(CHAT, ok("Two, three, five."));
    let file = dir.path("answers.sqlite");
    let text = toml_at(
        &server.url(),
        &format!("[cache]\nurl = \"sqlite:{}\"\n", file.display()),
    );
    let ask = || ChatRequest::from_prompt("Name three prime numbers.").max_tokens(16);
    let first = Client::builder()
        .config(Config::from_toml_str(&text).unwrap())
        .build()
        .unwrap();
    assert!(!first.chat(ask()).await.unwrap().origin.is_cache());
    drop(first);

    let second = Client::builder()
        .config(Config::from_toml_str(&text).unwrap())
        .build()
        .unwrap();
    let again = second.chat(ask()).await.unwrap();
    assert!(again.origin.is_cache(), "{again:?}");
    assert_eq!(again.text, "Two, three, five.");
    assert_eq!(server.count(CHAT), 1, "asked once");
    assert_eq!(second.stats().cache.map(|c| c.hits), Some(1));
}

/// `[cache]` bodies that must be refused: (body, the path named, words of the message).
fn bad_cache_tables() -> Vec<(String, &'static str, &'static str)> {
    let url = format!("redis://:{PASSWORD}@127.0.0.1:6379");
    vec![
        ("ttl_ms = 1".into(), "cache.url", "is required"),
        ("url = \"\"".into(), "cache.url", "is empty"),
        ("url = 6379".into(), "cache.url", "expected a string"),
        (
            "url = \"sqlite:\"".into(),
            "cache.url",
            "no path after sqlite:",
        ),
        (
            format!("url = \"ftp://:{PASSWORD}@127.0.0.1\""),
            "cache.url",
            "not a cache backend",
        ),
        (
            format!("url = \"redis://:{PASSWORD}@127.0.0.1:99999\""),
            "cache.url",
            "is not a valid URL",
        ),
        (
            format!(
                "url = \"redis://:{PASSWORD}@cache.internal:6380\"\nredis_tls_ca_file = \"ca.pem\""
            ),
            "cache.redis_tls_ca_file",
            "only to TLS",
        ),
        (
            "url = \"memory\"\nttl_ms = 0".into(),
            "cache.ttl_ms",
            "from 1 to 31536000000",
        ),
        (
            "url = \"memory\"\nttl_ms = \"7d\"".into(),
            "cache.ttl_ms",
            "expected an integer",
        ),
        (
            "url = \"memory\"\nmax_entries = 0".into(),
            "cache.max_entries",
            "at least 1",
        ),
        (
            "url = \"memory\"\nredis_prefix = \"x\"".into(),
            "cache.redis_prefix",
            "applies only to a Redis cache",
        ),
        (
            format!("url = \"{url}\"\nredis_prefix = \"a b\""),
            "cache.redis_prefix",
            "no spaces",
        ),
        (
            format!("url = \"{url}\"\nredis_timeout_ms = 60001"),
            "cache.redis_timeout_ms",
            "not 60001",
        ),
        (
            "url = \"memory\"\nttl = \"7d\"".into(),
            "cache.ttl",
            "unknown field; valid fields here: `url`, `ttl_ms`",
        ),
        (
            format!("url = \"redis://127.0.0.1\"\npassword = \"{PASSWORD}\""),
            "cache.password",
            "a Redis password goes inside url",
        ),
    ]
}

#[test]
fn every_bad_cache_value_names_its_path_and_never_the_password() {
    for (body, path, part) in bad_cache_tables() {
        let err = parse_err(&toml(&format!("[cache]\n{body}\n")));
        let message = err.to_string();
        assert!(err.is_config(), "{body}: {message}");
        assert!(
            err.message().starts_with(&format!("{path} (line ")),
            "{body}: {message}"
        );
        assert!(message.contains(part), "{body}: want {part:?} in {message}");
        assert_no_password(&format!("{message} {err:?}"));
    }
    let err = parse_err(&format!("cache = \"memory\"\n{}", toml("")));
    assert!(err.message().starts_with("cache (line "), "{err}");
}

#[test]
fn a_bad_cache_value_in_a_file_names_the_file() {
    let dir = TempDir::new("cache-config", "file");
    let path = dir.path("providers.toml");
    std::fs::write(&path, toml("[cache]\nurl = \"memory\"\nmax_entries = -3\n")).unwrap();
    let err = Config::from_path(&path).unwrap_err();
    assert!(err.is_config());
    let message = err.message();
    assert!(
        message.starts_with(&format!("{}: cache.max_entries (line ", path.display())),
        "{message}"
    );
    assert!(message.contains("not -3"), "{message}");
}

#[test]
fn the_commented_cache_table_of_the_shipped_providers_toml_parses() {
    let shipped = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("providers.toml");
    let text = std::fs::read_to_string(shipped).unwrap();
    // The `# [cache]` block, uncommented: every key it documents, with its comments.
    let block: Vec<String> = text
        .lines()
        .skip_while(|l| l.trim() != "# [cache]")
        .take_while(|l| l.starts_with("# "))
        .map(|l| l[2..].to_owned())
        .collect();
    assert!(block.len() >= 6, "the [cache] block: {block:?}");
    let config = Config::from_toml_str(&format!("{text}\n{}\n", block.join("\n")))
        .unwrap_or_else(|e| panic!("{e}\n{}", block.join("\n")));
    let settings = config.cache.expect("[cache]");
    assert_eq!(settings.describe(), "sqlite:answers.sqlite");
    assert_eq!(settings.ttl, DEFAULT_TTL);
    assert_eq!(settings.max_entries, DEFAULT_MAX_ENTRIES);
}
