//! `[cache]`: where the response cache keeps its answers, how long and how many.
//!
//! `url` may be a Redis URL with a password. No message built here repeats it: a URL that
//! cannot be read is described by what is wrong with it (the rules of `[shared] redis_url`).

use std::time::Duration;

use super::Check;
use super::shared::{MAX_TIMEOUT_MS, bounded_ms, check_prefix, check_tls, check_url, raw_tls};
use crate::config::raw::RawCache;
use crate::config::source::{Issue, TomlPath};
use crate::config::types::CacheSettings;

/// The longest `ttl_ms`: a year (a cache is the one place a value longer than the file's
/// usual 30 days means something).
const MAX_TTL_MS: i64 = 365 * 24 * 60 * 60 * 1000;

/// How a `url` is written.
const FORM: &str = "write \"memory\", \"sqlite:PATH\" (a file; a relative path is relative to \
                    the working directory) or \"redis://host:port[/db]\"";

pub(super) fn cache(path: &TomlPath, raw: &RawCache) -> Check<CacheSettings> {
    let url = raw.url.trim();
    let redis = check_backend(url).map_err(|m| Issue::new(path.key("url"), m))?;
    let mut settings = CacheSettings::new(url);
    settings.ttl = bounded_ms(path, "ttl_ms", raw.ttl_ms, settings.ttl, MAX_TTL_MS)?;
    if let Some(n) = raw.max_entries {
        settings.max_entries = u64::try_from(n).ok().filter(|n| *n > 0).ok_or_else(|| {
            Issue::new(
                path.key("max_entries"),
                format!("must be a whole number of answers of at least 1, not {n}"),
            )
        })?;
    }
    for (key, given) in [
        ("redis_prefix", raw.redis_prefix.is_some()),
        ("redis_timeout_ms", raw.redis_timeout_ms.is_some()),
        ("redis_tls_ca_file", raw.redis_tls_ca_file.is_some()),
        (
            "redis_tls_client_cert_file",
            raw.redis_tls_client_cert_file.is_some(),
        ),
        (
            "redis_tls_client_key_file",
            raw.redis_tls_client_key_file.is_some(),
        ),
        ("redis_cluster", raw.redis_cluster.is_some()),
    ] {
        if given && !redis {
            return Err(Issue::new(
                path.key(key),
                "applies only to a Redis cache (url = \"redis://…\"); leave it out, or give \
                 url a redis:// URL",
            ));
        }
    }
    if let Some(prefix) = &raw.redis_prefix {
        check_prefix(prefix).map_err(|m| Issue::new(path.key("redis_prefix"), m))?;
        settings.redis_prefix = Some(prefix.clone());
    }
    if let Some(ms) = raw.redis_timeout_ms {
        let timeout = bounded_ms(
            path,
            "redis_timeout_ms",
            Some(ms),
            Duration::ZERO,
            MAX_TIMEOUT_MS,
        )?;
        settings.redis_timeout = Some(timeout);
    }
    let tls = raw_tls(
        &raw.redis_tls_ca_file,
        &raw.redis_tls_client_cert_file,
        &raw.redis_tls_client_key_file,
    );
    check_tls(url, &tls).map_err(|(field, m)| {
        Issue::new(
            path.key(&format!("redis_tls_{}", field.trim_start_matches("tls."))),
            m,
        )
    })?;
    settings.redis_tls = tls;
    settings.redis_cluster = raw.redis_cluster.unwrap_or(false);
    Ok(settings)
}

/// Whether `url` names a Redis cache; `Err` says what is wrong with it, never repeating it.
fn check_backend(url: &str) -> Result<bool, String> {
    if url == "memory" {
        return Ok(false);
    }
    if let Some(file) = url.strip_prefix("sqlite:") {
        if file.trim().is_empty() {
            return Err(format!("has no path after sqlite:; {FORM}"));
        }
        if !cfg!(feature = "sqlite") {
            return Err(missing_feature("an SQLite", "sqlite"));
        }
        return Ok(false);
    }
    if url.starts_with("redis://") || url.starts_with("rediss://") {
        // Whether the build links the Redis wing is the builder's to say (`Cache::builder`):
        // this check is of the file alone.
        check_url(url)?;
        return Ok(true);
    }
    if url.is_empty() {
        return Err(format!("is empty; {FORM}"));
    }
    Err(format!(
        "is not a cache backend (the value is not shown: it could hold a password); {FORM}"
    ))
}

fn missing_feature(what: &str, feature: &str) -> String {
    format!(
        "names {what} cache, but this build of llm-failover lacks its `{feature}` feature: \
         enable it (llm-failover = {{ version = \"…\", features = [\"{feature}\"] }}), or \
         use url = \"memory\""
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "pa55-SENTINEL";

    fn raw(url: &str) -> RawCache {
        RawCache {
            url: url.to_owned(),
            ..RawCache::default()
        }
    }

    fn path() -> TomlPath {
        TomlPath::root().key("cache")
    }

    #[test]
    fn only_the_url_is_required_and_the_rest_are_the_caches_defaults() {
        let s = cache(&path(), &raw(" sqlite:answers.sqlite ")).unwrap();
        assert_eq!(s, CacheSettings::new("sqlite:answers.sqlite"));
        assert_eq!(s.ttl, crate::cache::DEFAULT_TTL);
        assert_eq!(s.max_entries, crate::cache::DEFAULT_MAX_ENTRIES);
        assert_eq!(cache(&path(), &raw("memory")).unwrap().describe(), "memory");
    }

    #[test]
    fn every_value_is_read_and_redis_settings_apply_only_to_redis() {
        let full = RawCache {
            url: format!("redis://:{SECRET}@127.0.0.1:6390/2"),
            ttl_ms: Some(60_000),
            max_entries: Some(500),
            redis_prefix: Some("answers".into()),
            redis_timeout_ms: Some(80),
            ..RawCache::default()
        };
        let s = cache(&path(), &full).unwrap();
        let tls = cache(
            &path(),
            &RawCache {
                redis_tls_ca_file: Some(" ca.pem ".into()),
                redis_tls_client_cert_file: Some("client.pem".into()),
                redis_tls_client_key_file: Some("client.key".into()),
                ..raw(&format!("rediss://:{SECRET}@127.0.0.1:6390/2"))
            },
        )
        .unwrap();
        assert_eq!(
            tls.redis_tls,
            crate::ratelimit::RedisTls::new()
                .ca_file("ca.pem")
                .client_cert("client.pem", "client.key")
        );
        assert_eq!(s.ttl, Duration::from_secs(60));
        assert_eq!(s.max_entries, 500);
        assert_eq!(s.redis_prefix.as_deref(), Some("answers"));
        assert_eq!(s.redis_timeout, Some(Duration::from_millis(80)));
        assert_eq!(s.describe(), "redis://127.0.0.1:6390");
        assert!(!format!("{s:?}").contains("SENTINEL"), "{s:?}");

        for (key, mut r) in [
            (
                "redis_prefix",
                RawCache {
                    redis_prefix: Some("p".into()),
                    ..raw("memory")
                },
            ),
            (
                "redis_timeout_ms",
                RawCache {
                    redis_timeout_ms: Some(10),
                    ..raw("sqlite:a.sqlite")
                },
            ),
        ] {
            let issue = cache(&path(), &r).unwrap_err();
            assert_eq!(issue.path, path().key(key));
            assert!(
                issue.message.contains("only to a Redis cache"),
                "{}",
                issue.message
            );
            r.url = "redis://127.0.0.1:6379".into();
            assert!(cache(&path(), &r).is_ok());
        }
    }

    #[test]
    fn bad_values_name_their_key_and_never_repeat_the_url() {
        let cases: Vec<(RawCache, &str, &str)> = vec![
            (raw(""), "url", "is empty"),
            (raw("sqlite:"), "url", "no path after sqlite:"),
            (
                raw(&format!("ftp://{SECRET}")),
                "url",
                "not a cache backend",
            ),
            (raw(SECRET), "url", "not a cache backend"),
            (
                raw(&format!("redis://:{SECRET}@127.0.0.1:99999")),
                "url",
                "redis://",
            ),
            (
                raw(&format!("rediss://:{SECRET}@h:6380/#insecure")),
                "url",
                "certificate checks off",
            ),
            (
                RawCache {
                    redis_tls_ca_file: Some("ca.pem".into()),
                    ..raw("redis://h:6379")
                },
                "redis_tls_ca_file",
                "only to TLS",
            ),
            (
                RawCache {
                    redis_tls_client_cert_file: Some("client.pem".into()),
                    ..raw("rediss://h:6380")
                },
                "redis_tls_client_key_file",
                "is required with a client certificate",
            ),
            (
                RawCache {
                    ttl_ms: Some(0),
                    ..raw("memory")
                },
                "ttl_ms",
                "from 1 to",
            ),
            (
                RawCache {
                    ttl_ms: Some(MAX_TTL_MS + 1),
                    ..raw("memory")
                },
                "ttl_ms",
                "from 1 to",
            ),
            (
                RawCache {
                    max_entries: Some(0),
                    ..raw("memory")
                },
                "max_entries",
                "at least 1",
            ),
            (
                RawCache {
                    max_entries: Some(-5),
                    ..raw("memory")
                },
                "max_entries",
                "not -5",
            ),
            (
                RawCache {
                    redis_prefix: Some("a b".into()),
                    ..raw("redis://h:1")
                },
                "redis_prefix",
                "printable",
            ),
            (
                RawCache {
                    redis_timeout_ms: Some(60_001),
                    ..raw("redis://h:1")
                },
                "redis_timeout_ms",
                "from 1 to 60000",
            ),
        ];
        for (r, key, words) in cases {
            let issue = cache(&path(), &r).expect_err(key);
            assert_eq!(issue.path, path().key(key), "{}", issue.message);
            assert!(issue.message.contains(words), "{key}: {}", issue.message);
            assert!(!issue.message.contains("SENTINEL"), "{}", issue.message);
        }
    }
}
