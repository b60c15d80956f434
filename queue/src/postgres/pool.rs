//! The queue's few connections to one PostgreSQL database: parsed once from the connection
//! string (its TLS options by `conninfo.rs` and `tls.rs`), opened on first use, taken in turn,
//! and replaced on the next call once found closed, so that a restarted server is used again
//! without reopening the queue.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio_postgres::config::Host;
use tokio_postgres::{Client, Config};

use super::conninfo;
use super::schema::pg_error;
use super::tls::{Connector, SslMode};
use llm_failover_core::{Error, ErrorKind, Result};

/// How long opening a connection may take when the connection string does not say
/// (`connect_timeout`): a server that is down refuses at once, an unreachable host does not.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A fixed set of connections, used round robin.
pub(super) struct Pool {
    config: Config,
    tls: Connector,
    ssl_mode: SslMode,
    /// `host:port/dbname`: never the user's password.
    name: Arc<str>,
    slots: Box<[Mutex<Option<Arc<Client>>>]>,
    next: AtomicUsize,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The config holds the password: only the name.
        f.debug_struct("Pool")
            .field("db", &self.name)
            .field("sslmode", &self.ssl_mode.as_str())
            .field("connections", &self.slots.len())
            .finish_non_exhaustive()
    }
}

/// One connection taken from the pool for one operation.
pub(super) struct Conn<'a> {
    pool: &'a Pool,
    slot: usize,
    /// The connection; statements on it are pipelined, so several operations may share it.
    pub(super) client: Arc<Client>,
}

impl Pool {
    /// Parses `url`, reads the files its TLS options name, and makes room for `connections`
    /// (at least 1), none of them open yet.
    ///
    /// # Errors
    ///
    /// `Config` when `url` is not a connection string, or its TLS options are not libpq's or
    /// name files that cannot serve.
    pub(super) fn new(url: &str, connections: usize) -> Result<Pool> {
        let (mut config, options) = parse(url)?;
        let (ssl_mode, tls) = super::tls::settings(options)?;
        config.ssl_mode(ssl_mode.for_tokio_postgres());
        // TLS checks the certificate against `host`; libpq takes `hostaddr` when it is alone.
        if config.get_hosts().is_empty() {
            for addr in config.get_hostaddrs().to_vec() {
                config.host(addr.to_string());
            }
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("llm-failover");
        }
        let name: Arc<str> = describe(&config).into();
        let slots = (0..connections.max(1)).map(|_| Mutex::new(None)).collect();
        Ok(Pool {
            config,
            tls,
            ssl_mode,
            name,
            slots,
            next: AtomicUsize::new(0),
        })
    }

    /// `host:port/dbname`, for messages.
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// How many connections the pool keeps.
    pub(super) fn size(&self) -> usize {
        self.slots.len()
    }

    /// Opens a connection of its own (not in any slot): the caller owns it, e.g. to migrate.
    pub(super) async fn open(&self, doing: &str) -> Result<Client> {
        let (client, connection) = self
            .config
            .connect(self.tls.clone())
            .await
            .map_err(|e| pg_error(&self.name, &format!("connecting ({doing})"), &e))?;
        let name = self.name.clone();
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(db = %name, error = %e, "jobs database connection ended");
            }
        });
        Ok(client)
    }

    /// Puts `client` in the first slot, for the calls that follow.
    pub(super) fn adopt(&self, client: Client) {
        *lock(&self.slots[0]) = Some(Arc::new(client));
    }

    /// The next connection in turn, opening it first when it is not open (or was closed).
    pub(super) async fn conn(&self, doing: &str) -> Result<Conn<'_>> {
        let slot = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len();
        if let Some(client) = self.open_in(slot) {
            return Ok(Conn {
                pool: self,
                slot,
                client,
            });
        }
        let fresh = Arc::new(self.open(doing).await?);
        // Another call may have opened this slot meanwhile: keep the first one.
        let client = {
            let mut held = lock(&self.slots[slot]);
            match held.as_ref().filter(|c| !c.is_closed()) {
                Some(theirs) => theirs.clone(),
                None => held.insert(fresh).clone(),
            }
        };
        Ok(Conn {
            pool: self,
            slot,
            client,
        })
    }

    /// The slot's connection, unless it has none or it is closed.
    fn open_in(&self, slot: usize) -> Option<Arc<Client>> {
        lock(&self.slots[slot])
            .as_ref()
            .filter(|c| !c.is_closed())
            .cloned()
    }
}

impl Conn<'_> {
    /// The operation's answer, its failure an `Io` error naming the database and `doing`. A
    /// failure that is not the server's answer to a statement (a cut connection, a protocol
    /// error) drops the connection, so the next call on its slot opens a new one.
    pub(super) fn done<T>(&self, doing: &str, r: Result<T, tokio_postgres::Error>) -> Result<T> {
        r.map_err(|e| {
            if e.as_db_error().is_none() {
                let mut held = lock(&self.pool.slots[self.slot]);
                if held.as_ref().is_some_and(|c| Arc::ptr_eq(c, &self.client)) {
                    *held = None;
                }
            }
            pg_error(&self.pool.name, doing, &e)
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The guarded value is an `Option` swapped whole: a panic cannot leave it half-written.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The connection string as tokio-postgres reads it, and the TLS options it leaves to us.
fn parse(url: &str) -> Result<(Config, conninfo::TlsOptions)> {
    let parse_error = |e: tokio_postgres::Error| {
        // Its parse errors name an option or a position, never the string's text.
        Error::new(
            ErrorKind::Config,
            format!(
                "jobs database connection string: {}",
                super::schema::describe_error(&e)
            ),
        )
        .with_source(e)
    };
    let Some((rest, options)) = conninfo::split(url) else {
        return Err(match url.parse::<Config>() {
            Err(e) => parse_error(e),
            // What tokio-postgres reads but we cannot must not be used without its TLS options.
            Ok(_) => Error::new(
                ErrorKind::Config,
                "jobs database connection string: its parameters do not read as libpq's \
                 (key=value pairs, or a URL whose query is key=value joined by &)",
            ),
        });
    };
    let config = rest.parse::<Config>().map_err(parse_error)?;
    Ok((config, options))
}

/// `host:port/dbname` of the first host: what messages and `Debug` name.
fn describe(config: &Config) -> String {
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(host)) => host.clone(),
        Some(Host::Unix(path)) => path.display().to_string(),
        None => match config.get_hostaddrs().first() {
            Some(addr) => addr.to_string(),
            None => "localhost".to_owned(),
        },
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config
        .get_dbname()
        .or(config.get_user())
        .unwrap_or("(the user's database)");
    format!("{host}:{port}/{db}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tls_options_of_either_form_set_the_mode() {
        // (connection string, the mode tokio-postgres is told)
        let cases = [
            ("postgres://u:pw@h:5432/jobs", "prefer"),
            ("postgres://u@h/jobs?sslmode=disable", "disable"),
            ("postgres://u@h/jobs?sslmode=require", "require"),
            ("host=h user=u SSLMODE=disable", "error"),
            ("host=h user=u sslmode = 'require' dbname=jobs", "require"),
            ("host=h user=u sslmode=verify-full", "error"),
            ("postgres://u:pw@h/jobs?sslmode=verify-ca", "error"),
        ];
        for (url, mode) in cases {
            match Pool::new(url, 1) {
                Ok(pool) => assert_eq!(pool.ssl_mode.as_str(), mode, "{url}"),
                Err(e) => {
                    assert_eq!(mode, "error", "{url}: {e}");
                    assert_eq!(e.kind(), ErrorKind::Config);
                    assert!(!e.to_string().contains("pw"), "{e}");
                }
            }
        }
        let pool = Pool::new("postgres://u@h/jobs?sslmode=require", 1).unwrap();
        assert!(
            format!("{pool:?}").contains("sslmode: \"require\""),
            "{pool:?}"
        );
        // An address alone is the name TLS checks.
        let pool = Pool::new("hostaddr=127.0.0.1 user=u sslmode=require", 1).unwrap();
        assert_eq!(pool.config.get_hosts(), [Host::Tcp("127.0.0.1".to_owned())]);
    }

    #[test]
    fn the_name_is_host_port_and_database_never_the_password() {
        let pool = Pool::new("postgres://jobs:s3cret@db.example:6543/queue", 2).unwrap();
        assert_eq!(pool.name(), "db.example:6543/queue");
        assert_eq!(pool.size(), 2);
        let pool = Pool::new("host=/run/postgresql user=jobs password=s3cret", 0).unwrap();
        assert_eq!(pool.name(), "/run/postgresql:5432/jobs");
        assert_eq!(pool.size(), 1);
        assert!(!format!("{pool:?}").contains("s3cret"));
    }

    #[test]
    fn a_string_that_does_not_parse_is_a_config_error_without_its_text() {
        for url in [
            "postgres://u:s3cret@h:notaport/db",
            "postgres://u@h/db?password=s3cret&port=x",
            "postgres://u@h/db?password=s3cret&sslmode",
            "host=h password=s3cret port=notaport",
            "host=h password='s3cret",
            "host=h password=s3cret nonsense",
        ] {
            let err = Pool::new(url, 4).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config, "{url}");
            assert!(!err.to_string().contains("s3cret"), "{url}: {err}");
            assert!(!format!("{err:?}").contains("s3cret"), "{url}: {err:?}");
        }
    }
}
