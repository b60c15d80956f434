//! The `redis` crate's client for a URL: plain TCP for `redis://`, TLS (rustls) for
//! `rediss://` — the server's certificate checked against the CA a [`RedisTls`] names, else
//! the platform's roots, and its name against the URL's host; a client certificate sent when
//! one is given. Certificate checks are never turned off: a URL with a fragment (`#insecure`)
//! is refused by the configuration's rules before it gets here, and again here.

use std::path::Path;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use llm_failover_core::Result;
use llm_failover_core::ratelimit::RedisTls;
use llm_failover_core::{Error, ErrorKind};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{ClientTlsConfig, TlsCertificates};
use redis::{Cmd, Pipeline, RedisFuture, Value};

/// A configuration error worded by the wing (`ErrorKind::Config`).
pub(crate) fn config_error(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Config, message)
}

/// Where the connections come from: one Redis, or a Redis Cluster found from its seed node
/// (the URL), whose connection routes each script call to the primary that owns its keys'
/// hash tag and follows `MOVED` when slots move.
#[derive(Clone)]
#[expect(
    clippy::large_enum_variant,
    reason = "made once per store and kept there, never moved on the request path"
)]
pub(crate) enum Source {
    Single(redis::Client),
    Cluster(ClusterClient),
}

/// A connection of either kind: every call goes through it alike.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// The connection held in `slot`, or a new one from `source` (kept there) when there is
/// none: first use, or a call failed since and dropped it. Each call is bounded by `timeout`
/// anyway; the connection's own reconnecting only covers one dropped between two calls.
pub(crate) async fn held_or_new(
    slot: &Mutex<Option<Conn>>,
    source: &Source,
    timeout: Duration,
) -> redis::RedisResult<Conn> {
    let held = slot.lock().unwrap_or_else(PoisonError::into_inner).clone();
    if let Some(conn) = held {
        return Ok(conn);
    }
    let conn = match source {
        Source::Single(client) => {
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(Some(timeout))
                .set_number_of_retries(0);
            Conn::Single(ConnectionManager::new_with_config(client.clone(), config).await?)
        }
        Source::Cluster(cluster) => Conn::Cluster(cluster.get_async_connection().await?),
    };
    *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(conn.clone());
    Ok(conn)
}

/// The source for `url`, whose client `single` is (made by [`client`]): a cluster from it as
/// the seed node when `cluster`, else that one Redis.
///
/// # Errors
///
/// As [`client`] (the TLS files are read again for the cluster's connections).
pub(crate) fn source(
    single: &redis::Client,
    url: &str,
    tls: &RedisTls,
    cluster: bool,
    timeout: Duration,
    what: &str,
    host: &str,
) -> Result<Source> {
    if !cluster {
        return Ok(Source::Single(single.clone()));
    }
    let mut builder = ClusterClient::builder([single.get_connection_info().clone()])
        .connection_timeout(timeout)
        .response_timeout(timeout);
    if url.trim_start().starts_with("rediss://") {
        builder = builder.certs(certificates(tls, what, host)?);
    }
    builder
        .build()
        .map(Source::Cluster)
        .map_err(|e| unusable(what, host, &e))
}

/// The client for `url`, made without connecting. `what` and `host` name it in messages
/// (never the URL: it may hold a password).
///
/// # Errors
///
/// `Config` when the URL is not one the client can use, a TLS file cannot be read or is not
/// PEM, or TLS settings come with a `redis://` URL.
pub(crate) fn client(url: &str, tls: &RedisTls, what: &str, host: &str) -> Result<redis::Client> {
    let secure = url.trim_start().starts_with("rediss://");
    if url.contains('#') {
        return Err(config_error(format!(
            "{what}: the Redis URL for `{host}` has a fragment (`#…`); `#insecure` would turn \
             the certificate checks off, which this client never does"
        )));
    }
    if !secure {
        if tls.is_set() {
            return Err(config_error(format!(
                "{what}: TLS files are given for `{host}`, but its URL is redis:// (plain TCP); \
                 write rediss:// for TLS"
            )));
        }
        return redis::Client::open(url).map_err(|e| unusable(what, host, &e));
    }
    redis::Client::build_with_tls(url, certificates(tls, what, host)?)
        .map_err(|e| unusable(what, host, &e))
}

/// The CA and client certificate of `tls`, read and checked as PEM.
fn certificates(tls: &RedisTls, what: &str, host: &str) -> Result<TlsCertificates> {
    let root_cert = tls
        .ca_file
        .as_deref()
        .map(|p| pem(what, "CA file (tls ca_file)", p, "CERTIFICATE"))
        .transpose()?;
    let client_tls = match (&tls.client_cert_file, &tls.client_key_file) {
        (Some(cert), Some(key)) => Some(ClientTlsConfig {
            client_cert: pem(what, "client certificate", cert, "CERTIFICATE")?,
            client_key: pem(what, "client key", key, "PRIVATE KEY")?,
        }),
        (None, None) => None,
        _ => {
            return Err(config_error(format!(
                "{what}: a client certificate for `{host}` needs both its certificate and its \
                 key file"
            )));
        }
    };
    Ok(TlsCertificates {
        client_tls,
        root_cert,
    })
}

/// The bytes of the PEM file at `path`, which must hold a `-----BEGIN …{label}-----` block.
fn pem(what: &str, name: &str, path: &Path, label: &str) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path).map_err(|e| {
        config_error(format!(
            "{what}: the TLS {name} {} cannot be read: {e}",
            path.display()
        ))
    })?;
    let text = String::from_utf8_lossy(&bytes);
    let marked = text
        .lines()
        .any(|l| l.starts_with("-----BEGIN ") && l.trim_end().ends_with(&format!("{label}-----")));
    if !marked {
        return Err(config_error(format!(
            "{what}: the TLS {name} {} is not PEM (no `-----BEGIN …{label}-----` line)",
            path.display()
        )));
    }
    Ok(bytes)
}

/// A URL the `redis` crate refuses: its error kind and detail, never the URL.
fn unusable(what: &str, host: &str, e: &redis::RedisError) -> llm_failover_core::Error {
    config_error(format!(
        "{what}: the Redis URL for `{host}` cannot be used ({:?}{}); write \
         redis://host:port[/db] or rediss://host:port[/db]",
        e.kind(),
        e.detail().map(|d| format!(": {d}")).unwrap_or_default()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_files_are_read_and_checked_before_anything_connects() {
        let dir = std::env::temp_dir().join(format!("llm-failover-connect-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let not_pem = dir.join("not.pem");
        std::fs::write(&not_pem, "hello").unwrap();
        let missing = dir.join("missing.pem");
        let url = "rediss://:s3cret@127.0.0.1:6380";
        // (url, tls, what the Config error says)
        let table: Vec<(&str, RedisTls, &str)> = vec![
            (url, RedisTls::new().ca_file(&missing), "cannot be read"),
            (url, RedisTls::new().ca_file(&not_pem), "is not PEM"),
            (
                url,
                RedisTls::new().client_cert(&not_pem, &missing),
                "is not PEM",
            ),
            (
                "redis://:s3cret@127.0.0.1:6379",
                RedisTls::new().ca_file(&not_pem),
                "write rediss://",
            ),
            (
                "rediss://:s3cret@127.0.0.1:6380/#insecure",
                RedisTls::new(),
                "never does",
            ),
        ];
        for (url, tls, says) in table {
            let e = client(url, &tls, "shared limits", "127.0.0.1:6380").unwrap_err();
            let text = e.to_string();
            assert!(text.contains(says), "{tls:?}: {text}");
            assert!(!text.contains("s3cret"), "{text}");
        }
        assert!(client(url, &RedisTls::new(), "shared limits", "h").is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
