//! The queue's few connections to one PostgreSQL database: parsed once from the connection
//! string (which must not demand TLS), opened on first use, taken in turn, and replaced on the
//! next call once found closed, so that a restarted server is used again without reopening the
//! queue.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::{Client, Config, NoTls};

use super::schema::pg_error;
use llm_failover_core::{Error, ErrorKind, Result};

/// How long opening a connection may take when the connection string does not say
/// (`connect_timeout`): a server that is down refuses at once, an unreachable host does not.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A fixed set of connections, used round robin.
pub(super) struct Pool {
    config: Config,
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
    /// Parses `url` and makes room for `connections` (at least 1), none of them open yet.
    ///
    /// # Errors
    ///
    /// `Config` when `url` is not a connection string, or demands TLS.
    pub(super) fn new(url: &str, connections: usize) -> Result<Pool> {
        let mut config = parse(url)?;
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
            .connect(NoTls)
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

/// The connection string as tokio-postgres reads it, refusing TLS: this build has none.
fn parse(url: &str) -> Result<Config> {
    match url.parse::<Config>() {
        Ok(config) if matches!(config.get_ssl_mode(), SslMode::Require) => {
            Err(tls_refused("require"))
        }
        Ok(config) => Ok(config),
        // tokio-postgres knows no verify-ca / verify-full: say why rather than "invalid value".
        Err(e) => match demanded_ssl_mode(url) {
            Some(mode) => Err(tls_refused(mode)),
            // Its parse errors name an option or a position, never the string's text.
            None => Err(Error::new(
                ErrorKind::Config,
                format!(
                    "jobs database connection string: {}",
                    super::schema::describe_error(&e)
                ),
            )
            .with_source(e)),
        },
    }
}

fn tls_refused(mode: &str) -> Error {
    Error::new(
        ErrorKind::Config,
        format!(
            "jobs database connection string asks for sslmode={mode}, but this build of \
             llm-failover speaks to PostgreSQL over plain TCP or a unix socket only (no TLS): \
             use sslmode=disable or prefer on a trusted network or a local socket, or a \
             TLS-terminating proxy"
        ),
    )
}

/// The `sslmode` a connection string demands TLS with (`require`, `verify-ca`,
/// `verify-full`), in either form (`?sslmode=…` or `sslmode = '…'`).
fn demanded_ssl_mode(url: &str) -> Option<&'static str> {
    let lower = url.to_ascii_lowercase();
    let mut rest = lower.as_str();
    while let Some(at) = rest.find("sslmode") {
        rest = &rest[at + "sslmode".len()..];
        let value = rest.trim_start();
        let Some(value) = value.strip_prefix('=') else {
            continue;
        };
        let value = value.trim_start().trim_start_matches('\'');
        for mode in ["require", "verify-ca", "verify-full"] {
            let after = value.strip_prefix(mode);
            if after.is_some_and(|a| !a.starts_with(|c: char| c.is_ascii_alphanumeric())) {
                return Some(mode);
            }
        }
    }
    None
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
    fn tls_demanding_strings_are_refused_in_either_form() {
        for url in [
            "postgres://u:pw@db.example:5432/jobs?sslmode=require",
            "postgres://u@db.example/jobs?sslmode=verify-full",
            "host=db.example user=u sslmode = 'verify-ca' dbname=jobs",
            "host=db.example user=u SSLMODE=require",
        ] {
            let err = parse(url).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Config, "{url}");
            let message = err.to_string();
            assert!(message.contains("plain TCP"), "{message}");
            assert!(!message.contains("pw"), "{message}");
        }
        for url in [
            "postgres://u@h/jobs",
            "postgres://u@h/jobs?sslmode=disable",
            "postgres://u@h/jobs?sslmode=prefer",
            "host=h user=u sslmode=disable application_name=requirements",
        ] {
            assert!(parse(url).is_ok(), "{url}");
        }
        assert_eq!(demanded_ssl_mode("sslmode=required"), None);
    }

    #[test]
    fn the_name_is_host_port_and_database_never_the_password() {
        let pool = Pool::new("postgres://jobs:s3cret@db.example:6543/queue", 2).unwrap();
        assert_eq!(pool.name(), "db.example:6543/queue");
        assert_eq!(pool.size(), 2);
        let pool = Pool::new("host=/run/postgresql user=jobs password=s3cret", 0).unwrap();
        assert_eq!(pool.name(), "/run/postgresql:5432/jobs");
        assert_eq!(pool.size(), 1);
    }

    #[test]
    fn a_string_that_does_not_parse_is_a_config_error_without_its_text() {
        let err = Pool::new("postgres://u:s3cret@h:notaport/db", 4).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config);
        assert!(!err.to_string().contains("s3cret"), "{err}");
    }
}
