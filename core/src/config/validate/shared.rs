//! `[shared]`: where Redis is, how its keys are named, how long a call may take, and what
//! admission does while it is away.
//!
//! `redis_url` may carry a password. No message built here contains the URL or any part of
//! it but the host and port ([`SharedSettings::host`]): a URL that cannot be read is described
//! by what is wrong with it, never quoted.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::Duration;

use url::Url;

use super::Check;
use crate::config::keys::shown;
use crate::config::raw::RawShared;
use crate::config::source::{Issue, TomlPath};
use crate::ratelimit::{RedisTls, SharedSettings, WhenDown};

/// The longest `timeout_ms`: a call to Redis is bounded by far less than a request's deadline.
pub(super) const MAX_TIMEOUT_MS: i64 = 60_000;

/// The longest `retry_interval_ms`: an hour.
const MAX_RETRY_INTERVAL_MS: i64 = 60 * 60 * 1000;

/// The longest `key_prefix`, in bytes.
const MAX_PREFIX_LEN: usize = 64;

pub(super) fn shared(path: &TomlPath, raw: &RawShared) -> Check<SharedSettings> {
    check_url(&raw.redis_url).map_err(|m| Issue::new(path.key("redis_url"), m))?;
    let d = SharedSettings::new("");
    let key_prefix = match &raw.key_prefix {
        None => d.key_prefix.clone(),
        Some(p) => {
            check_prefix(p).map_err(|m| Issue::new(path.key("key_prefix"), m))?;
            p.clone()
        }
    };
    let timeout = bounded_ms(
        path,
        "timeout_ms",
        raw.timeout_ms,
        d.timeout,
        MAX_TIMEOUT_MS,
    )?;
    let retry_interval = bounded_ms(
        path,
        "retry_interval_ms",
        raw.retry_interval_ms,
        d.retry_interval,
        MAX_RETRY_INTERVAL_MS,
    )?;
    let when_down = when_down(path, raw)?;
    let tls = raw_tls(
        &raw.tls_ca_file,
        &raw.tls_client_cert_file,
        &raw.tls_client_key_file,
    );
    check_tls(raw.redis_url.trim(), &tls).map_err(|(field, m)| {
        Issue::new(
            path.key(&format!("tls_{}", field.trim_start_matches("tls."))),
            m,
        )
    })?;
    Ok(SharedSettings::new(raw.redis_url.trim())
        .prefix(key_prefix)
        .timeout(timeout)
        .retry_interval(retry_interval)
        .when_down(when_down)
        .tls(tls)
        .cluster(raw.cluster.unwrap_or(false)))
}

/// `when_down` (with `processes` for a local share): what admission does while Redis is away.
fn when_down(path: &TomlPath, raw: &RawShared) -> Check<WhenDown> {
    Ok(match raw.when_down.as_deref() {
        None | Some("wait") => {
            if raw.processes.is_some() {
                return Err(Issue::new(
                    path.key("processes"),
                    "applies only with when_down = \"local_share\" (each process keeps to its \
                     share of the limits while Redis is down); leave it out, or set when_down = \"local_share\"",
                ));
            }
            WhenDown::Wait
        }
        Some("local_share") => {
            let processes = match raw.processes {
                None => {
                    return Err(Issue::new(
                        path.key("processes"),
                        "is required with when_down = \"local_share\": how many processes \
                         share the quota (each keeps to limit ÷ processes while Redis is down)",
                    ));
                }
                Some(n) => u32::try_from(n)
                    .ok()
                    .and_then(NonZeroU32::new)
                    .ok_or_else(|| {
                        Issue::new(
                            path.key("processes"),
                            format!(
                                "must be a whole number of processes from 1 to {}, not {n}",
                                u32::MAX
                            ),
                        )
                    })?,
            };
            WhenDown::LocalShare { processes }
        }
        Some(other) => {
            return Err(Issue::new(
                path.key("when_down"),
                format!(
                    "unknown mode {}; valid: \"wait\" (fail closed: nothing is admitted until \
                     Redis answers again) or \"local_share\" (each process keeps to limit ÷ \
                     processes meanwhile)",
                    shown(other)
                ),
            ));
        }
    })
}

/// The TLS files a table names (its `…ca_file`, `…client_cert_file`, `…client_key_file`).
pub(super) fn raw_tls(
    ca: &Option<String>,
    cert: &Option<String>,
    key: &Option<String>,
) -> RedisTls {
    let path = |v: &Option<String>| v.as_deref().map(|s| PathBuf::from(s.trim()));
    let mut tls = RedisTls::new();
    tls.ca_file = path(ca);
    tls.client_cert_file = path(cert);
    tls.client_key_file = path(key);
    tls
}

/// What is wrong with the TLS files for Redis at `url`, if anything: `Err` names the field
/// (`tls.ca_file`, `tls.client_cert_file`, `tls.client_key_file`). The files are read when
/// the client connects; here only what can be told without them.
pub(crate) fn check_tls(url: &str, tls: &RedisTls) -> Result<(), (&'static str, String)> {
    let fields = [
        ("tls.ca_file", &tls.ca_file),
        ("tls.client_cert_file", &tls.client_cert_file),
        ("tls.client_key_file", &tls.client_key_file),
    ];
    for (field, value) in fields {
        let Some(path) = value else { continue };
        if !url.trim_start().starts_with("rediss://") {
            return Err((
                field,
                "applies only to TLS (a rediss:// URL); leave it out, or write the URL \
                 rediss://host:port"
                    .to_owned(),
            ));
        }
        if path.as_os_str().is_empty() {
            return Err((field, "is empty: name a PEM file".to_owned()));
        }
    }
    match (&tls.client_cert_file, &tls.client_key_file) {
        (Some(_), None) => Err((
            "tls.client_key_file",
            "is required with a client certificate: the certificate's private key (PEM)".to_owned(),
        )),
        (None, Some(_)) => Err((
            "tls.client_cert_file",
            "is required with a client key: the certificate the key belongs to (PEM)".to_owned(),
        )),
        _ => Ok(()),
    }
}

/// Checks settings given in code ([`ClientBuilder::shared`](crate::ClientBuilder::shared),
/// `LLM_FAILOVER_REDIS_URL`) by the rules of a `[shared]` table: `Err` names the field
/// (`redis_url`, `key_prefix`, `timeout`, `retry_interval`) and what is wrong.
pub(crate) fn check_settings(settings: &SharedSettings) -> Result<(), (&'static str, String)> {
    check_url(settings.url()).map_err(|m| ("redis_url", m))?;
    check_tls(settings.url(), &settings.tls)?;
    check_prefix(&settings.key_prefix).map_err(|m| ("key_prefix", m))?;
    for (field, value, max_ms) in [
        ("timeout", settings.timeout, MAX_TIMEOUT_MS),
        (
            "retry_interval",
            settings.retry_interval,
            MAX_RETRY_INTERVAL_MS,
        ),
    ] {
        let max = Duration::from_millis(max_ms.unsigned_abs());
        if value < Duration::from_millis(1) || value > max {
            return Err((
                field,
                format!("must be from 1 ms to {max_ms} ms, not {value:?}"),
            ));
        }
    }
    Ok(())
}

/// What is wrong with a Redis URL, if anything; the message never repeats any of it.
pub(crate) fn check_url(raw: &str) -> Result<(), String> {
    const FORM: &str = "write it like redis://127.0.0.1:6379 (redis://:PASSWORD@host:port with a \
                        password; rediss:// for TLS)";
    let raw = raw.trim();
    if raw.is_empty() {
        return Err(format!("is empty; {FORM}"));
    }
    // url's messages ("invalid port number", "empty host", …) never quote the input.
    let url = Url::parse(raw).map_err(|e| format!("is not a valid URL ({e}); {FORM}"))?;
    match url.scheme() {
        "redis" | "rediss" => {}
        _ => {
            return Err(format!(
                "must be a redis:// URL (its scheme is not shown: it could be part of a \
                 password); {FORM}"
            ));
        }
    }
    // redis:// is not a special scheme to `url`, so an IPv4 address arrives as a domain.
    let wildcard = match url.host() {
        None | Some(url::Host::Domain("")) => return Err(format!("has no host; {FORM}")),
        Some(url::Host::Domain(d)) => d.parse::<IpAddr>().is_ok_and(|ip| ip.is_unspecified()),
        Some(url::Host::Ipv4(ip)) => ip.is_unspecified(),
        Some(url::Host::Ipv6(ip)) => ip.is_unspecified(),
    };
    if wildcard {
        return Err(format!(
            "names a wildcard address (0.0.0.0 or [::]), which cannot be connected to: name \
             the host Redis runs on; {FORM}"
        ));
    }
    let db = url.path().trim_start_matches('/');
    if !db.is_empty() && db.parse::<u16>().is_err() {
        return Err(format!(
            "has a path that is not a database number (after host:port only /0, /1, … may \
             follow); {FORM}"
        ));
    }
    if url.fragment().is_some() {
        return Err(format!(
            "must not have a fragment (`#…`: `#insecure` would turn the certificate checks \
             off, which this client never does); {FORM}"
        ));
    }
    Ok(())
}

/// What is wrong with a key prefix, if anything.
pub(crate) fn check_prefix(prefix: &str) -> Result<(), String> {
    if prefix.is_empty() || prefix.len() > MAX_PREFIX_LEN {
        return Err(format!(
            "must be 1 to {MAX_PREFIX_LEN} characters (every key starts with it), not {}",
            prefix.len()
        ));
    }
    if !prefix.chars().all(|c| c.is_ascii_graphic()) || prefix.contains(['{', '}']) {
        return Err(
            "may hold only printable ASCII characters other than `{` and `}` (the braces mark \
             the hash tag Redis Cluster routes each provider's keys by), and no spaces"
                .to_owned(),
        );
    }
    Ok(())
}

/// A `_ms` value from 1 to `max` (`default` when absent).
pub(super) fn bounded_ms(
    path: &TomlPath,
    key: &str,
    value: Option<i64>,
    default: Duration,
    max: i64,
) -> Check<Duration> {
    match value {
        None => Ok(default),
        Some(n) if (1..=max).contains(&n) => Ok(Duration::from_millis(n.unsigned_abs())),
        Some(n) => Err(Issue::new(
            path.key(key),
            format!("must be from 1 to {max} milliseconds, not {n}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "pa55-SENTINEL";

    fn raw(url: &str) -> RawShared {
        RawShared {
            redis_url: url.to_owned(),
            ..RawShared::default()
        }
    }

    #[test]
    fn only_the_url_is_required() {
        let p = TomlPath::root().key("shared");
        let s = shared(&p, &raw("redis://127.0.0.1:6379")).unwrap();
        assert_eq!(s, SharedSettings::new("redis://127.0.0.1:6379"));
    }

    #[test]
    fn urls_that_are_not_redis_urls_are_refused_without_being_repeated() {
        let bad = [
            String::new(),
            "  ".to_owned(),
            format!("127.0.0.1:{SECRET}"),
            format!("http://:{SECRET}@127.0.0.1:6379"),
            format!("redis://:{SECRET}@127.0.0.1:99999"),
            format!("redis://:{SECRET}@127.0.0.1:6379/{SECRET}"),
            format!("redis://:{SECRET}@127.0.0.1:6379/0#{SECRET}"),
            format!("{SECRET}:x@127.0.0.1"),
            format!("redis://:{SECRET}@/0"),
            format!("rediss://:{SECRET}@cache.internal:6380/#insecure"),
            format!("redis://:{SECRET}@0.0.0.0:6379"),
            format!("redis://:{SECRET}@[::]:6379"),
        ];
        for bad in &bad {
            let message = check_url(bad).expect_err(bad);
            assert!(!message.contains("SENTINEL"), "{bad:?}: {message}");
            assert!(message.contains("redis://"), "{bad:?}: {message}");
        }
        for good in [
            "redis://127.0.0.1:6379",
            "redis://localhost",
            "redis://cache.internal:6380/2",
            "redis://:pw@10.0.0.5:6379/0",
            "redis://user:pw@[::1]:6379/",
            "redis://127.0.0.1:6379?protocol=resp3",
            "rediss://:pw@cache.internal:6380",
        ] {
            assert_eq!(check_url(good), Ok(()), "{good}");
        }
    }

    /// TLS files go with a rediss:// URL only, a certificate with its key; each issue names
    /// its `[shared]` key.
    #[test]
    fn tls_files_apply_to_rediss_only_and_a_certificate_comes_with_its_key() {
        let p = TomlPath::root().key("shared");
        let with = |url: &str, ca: Option<&str>, cert: Option<&str>, key: Option<&str>| RawShared {
            tls_ca_file: ca.map(str::to_owned),
            tls_client_cert_file: cert.map(str::to_owned),
            tls_client_key_file: key.map(str::to_owned),
            ..raw(url)
        };
        let s = shared(
            &p,
            &with(
                "rediss://h:6380",
                Some("ca.pem"),
                Some("c.pem"),
                Some("c.key"),
            ),
        )
        .unwrap();
        assert_eq!(
            s.tls,
            RedisTls::new()
                .ca_file("ca.pem")
                .client_cert("c.pem", "c.key")
        );
        let table = [
            (
                with("redis://h:6379", Some("ca.pem"), None, None),
                "tls_ca_file",
                "only to TLS",
            ),
            (
                with("rediss://h:6380", None, Some("c.pem"), None),
                "tls_client_key_file",
                "required",
            ),
            (
                with("rediss://h:6380", None, None, Some("c.key")),
                "tls_client_cert_file",
                "required",
            ),
            (
                with("rediss://h:6380", Some(" "), None, None),
                "tls_ca_file",
                "is empty",
            ),
        ];
        for (r, key, says) in table {
            let issue = shared(&p, &r).unwrap_err();
            assert_eq!(issue.path, p.key(key), "{}", issue.message);
            assert!(issue.message.contains(says), "{}", issue.message);
        }
    }

    #[test]
    fn a_prefix_is_printable_short_and_free_of_braces() {
        assert_eq!(check_prefix("llm-failover:batch-7"), Ok(()));
        for bad in ["", "a b", "x{y}", "tab\t", &"p".repeat(65), "é"] {
            assert!(check_prefix(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn settings_given_in_code_follow_the_same_rules() {
        let ok = SharedSettings::new("redis://127.0.0.1:6379");
        assert_eq!(check_settings(&ok), Ok(()));
        let cases = [
            (ok.clone().timeout(Duration::ZERO), "timeout"),
            (ok.clone().timeout(Duration::from_secs(61)), "timeout"),
            (
                ok.clone().retry_interval(Duration::from_micros(10)),
                "retry_interval",
            ),
            (ok.clone().prefix(""), "key_prefix"),
            (SharedSettings::new(format!("redis:/{SECRET}")), "redis_url"),
        ];
        for (settings, field) in cases {
            let (got, message) = check_settings(&settings).unwrap_err();
            assert_eq!(got, field, "{message}");
            assert!(!message.contains("SENTINEL"), "{message}");
        }
    }
}
