//! A real PostgreSQL for the tests: [`PgServer`] runs the Debian package's server (`initdb`
//! and `postgres` of the newest `/usr/lib/postgresql/*/bin`, else of `PATH`) in a temporary
//! directory of its own, on a free loopback port, with `fsync` off; it can be killed (SIGKILL,
//! as a crash: the server and every backend, nothing flushed) and restarted on the same port
//! with the same data, and is killed on drop. [`PgServer::shared`] is one server for the whole
//! test process, a database per test ([`PgServer::create_database`]); a watchdog stops it
//! and removes its directory when the test process exits, however it exits.
//!
//! [`PgServer::start_tls`] starts one with TLS on (`ssl = on`, the certificate and key of
//! [`Certs`], client certificates checked against its CA) that takes TCP connections over TLS
//! only (`hostssl` lines in `pg_hba.conf`, no `host` line), with a password for `postgres`
//! ([`PASSWORD`], SCRAM); its unix socket takes `postgres` without one (`createdb` uses it).
//! Its database [`CERTIFIED`] takes a client only with a certificate the CA signed.
//!
//! `initdb` and `postgres` refuse to run as root: as root (CI), they run as the `postgres`
//! system user the package creates (`setpriv`, which execs, so the server is our child), in a
//! directory given to that user. No mock: the queue's tests talk to this server. Without the
//! binaries the helper panics with the command that installs them (a skipped test would pass
//! without testing anything).

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::certs::Certs;
pub use super::examples::free_port;

/// The password of `postgres` on a TLS server: it must appear in no output.
pub const PASSWORD: &str = "pw-TLS-SENTINEL-5150";

/// The database of a TLS server that takes only clients with a certificate of its CA.
pub const CERTIFIED: &str = "certified";

/// `pg_hba.conf` of a TLS server: over TCP, TLS only, with the password (and a client
/// certificate for [`CERTIFIED`]); the unix socket trusted.
const TLS_HBA: &str = "local   all        all                 trust
hostssl certified  all  127.0.0.1/32   scram-sha-256 clientcert=verify-ca
hostssl all        all  127.0.0.1/32   scram-sha-256
";

const INSTALL: &str = "sudo apt-get install -y postgresql";

/// What a line of the server's log says once it takes connections.
const READY: &str = "database system is ready to accept connections";

/// A PostgreSQL server of our own on `127.0.0.1:port`, superuser `postgres`: trust auth, or
/// for a TLS server TLS and [`PASSWORD`] over TCP.
#[derive(Debug)]
pub struct PgServer {
    bin: PathBuf,
    /// Ours (or the `postgres` user's): the data directory `data/`, the unix socket, the log.
    dir: PathBuf,
    port: u16,
    /// Running as root: every server program runs as the `postgres` user.
    as_postgres: bool,
    /// TLS on, with these certificates (see [`PgServer::start_tls`]).
    certs: Option<Certs>,
    /// The postmaster.
    child: Option<Child>,
    /// `sh` waiting for its stdin (ours) to close, then killing the postmaster: a test
    /// process that exits without dropping the server (a static) leaves nothing running.
    watchdog: Option<Child>,
}

impl PgServer {
    /// Initialises a cluster in a new temporary directory and starts it on a free loopback
    /// port; returns once the server says it accepts connections (its log, read as it comes).
    ///
    /// # Panics
    ///
    /// When PostgreSQL is not installed (the message has the apt command), or `initdb` or the
    /// server fails (their output is in the message).
    pub fn start() -> PgServer {
        PgServer::start_with(false)
    }

    /// As [`start`](Self::start), with TLS on: certificates made by [`Certs::make`] in its
    /// directory ([`certs`](Self::certs)), TCP over TLS only, `postgres` with [`PASSWORD`].
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_tls() -> PgServer {
        PgServer::start_with(true)
    }

    /// One TLS server for the whole test process, started by the first caller.
    pub fn shared_tls() -> &'static PgServer {
        static SHARED: OnceLock<PgServer> = OnceLock::new();
        SHARED.get_or_init(PgServer::start_tls)
    }

    /// The certificates of a TLS server (`None` for a plain one).
    pub fn certs(&self) -> Option<&Certs> {
        self.certs.as_ref()
    }

    fn start_with(tls: bool) -> PgServer {
        static SERVERS: AtomicUsize = AtomicUsize::new(0);
        let n = SERVERS.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("llm-failover-pg-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        let as_postgres = effective_uid() == 0;
        if as_postgres {
            give_to_postgres(&dir);
        }
        let certs = tls.then(|| {
            let certs = Certs::make(&dir.join("certs"));
            // The server reads its certificate, key and CA: as root, as the `postgres` user.
            if as_postgres {
                for file in [&certs.server_cert, &certs.server_key, &certs.ca] {
                    give_to_postgres(file);
                }
            }
            certs
        });
        let mut server = PgServer {
            bin: bin_dir(),
            dir,
            port: 0,
            as_postgres,
            certs,
            child: None,
            watchdog: None,
        };
        server.initdb();
        // Another process may take the free port between our probe and the server's bind:
        // then try another one.
        let mut last = String::new();
        for _ in 0..5 {
            server.port = free_port();
            match server.launch() {
                Ok(()) => return server,
                Err(log) if log.contains("could not bind") || log.contains("in use") => last = log,
                Err(log) => panic!("postgres on port {} did not start:\n{log}", server.port),
            }
        }
        panic!("postgres found no free port in 5 tries; the last said:\n{last}");
    }

    /// One server for the whole test process, started by the first caller.
    pub fn shared() -> &'static PgServer {
        static SHARED: OnceLock<PgServer> = OnceLock::new();
        SHARED.get_or_init(PgServer::start)
    }

    /// The port it listens on (the same after [`restart`](Self::restart)).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The directory of its unix socket (`host=` this, with [`port`](Self::port)).
    pub fn socket_dir(&self) -> &Path {
        &self.dir
    }

    /// `postgres://postgres@127.0.0.1:PORT/DB`.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// A new, empty database with a name no other test has; returns its name.
    ///
    /// # Panics
    ///
    /// When `createdb` fails (its output is in the message).
    pub fn create_database(&self) -> String {
        static DATABASES: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "t{}_{}",
            std::process::id(),
            DATABASES.fetch_add(1, Ordering::Relaxed)
        );
        self.create_database_named(&name);
        name
    }

    /// A new, empty database named `name` (over the unix socket for a TLS server, whose TCP
    /// wants TLS and a password).
    ///
    /// # Panics
    ///
    /// When `createdb` fails (it exists already, say; its output is in the message).
    pub fn create_database_named(&self, name: &str) {
        let host = match self.certs {
            Some(_) => self.dir.clone(),
            None => PathBuf::from("127.0.0.1"),
        };
        let output = Command::new(self.bin.join("createdb"))
            .arg("-h")
            .arg(host)
            .args(["-U", "postgres", "-p"])
            .arg(self.port.to_string())
            .arg(name)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run createdb: {e}"));
        assert!(
            output.status.success(),
            "createdb {name} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// The URL of a new, empty database.
    pub fn fresh_url(&self) -> String {
        self.url(&self.create_database())
    }

    /// Kills the server with SIGKILL, as a crash: the postmaster is stopped (so it starts no
    /// new backend), then it and every backend it had are killed; returns once the postmaster
    /// is gone. Nothing happens if it is not running.
    pub fn kill(&mut self) {
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
        if let Some(mut child) = self.child.take() {
            let postmaster = child.id();
            signal("STOP", &[postmaster]);
            let mut all = children_of(postmaster);
            all.push(postmaster);
            signal("KILL", &all);
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port with the same data (killing it first if it
    /// still runs; it recovers from its WAL as after a crash) and returns once it accepts
    /// connections.
    ///
    /// # Panics
    ///
    /// When it does not come up (its output is in the message).
    pub fn restart(&mut self) {
        self.kill();
        // A killed backend may hold the old shared memory for a moment after the kill:
        // the new server then refuses to start, and is started again.
        let mut last = String::new();
        for _ in 0..200 {
            match self.launch() {
                Ok(()) => return,
                Err(log) if log.contains("in use") || log.contains("already exists") => last = log,
                Err(log) => panic!("postgres did not restart on port {}:\n{log}", self.port),
            }
        }
        panic!("postgres did not restart on port {}:\n{last}", self.port);
    }

    /// A program of the server's bin directory, as the `postgres` user when we are root.
    fn command(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        let mut command = if self.as_postgres {
            let mut c = Command::new("setpriv");
            c.args([
                "--reuid=postgres",
                "--regid=postgres",
                "--init-groups",
                "--",
            ]);
            c.arg(program);
            c
        } else {
            Command::new(program)
        };
        command.current_dir(&self.dir).stdin(Stdio::null());
        command
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn initdb(&self) {
        let mut initdb = self.command("initdb");
        initdb.arg("-D").arg(self.data()).args([
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ]);
        let pwfile = self.dir.join("pwfile");
        if self.certs.is_some() {
            std::fs::write(&pwfile, PASSWORD).unwrap_or_else(|e| panic!("pwfile: {e}"));
            initdb.arg(format!("--pwfile={}", pwfile.display()));
        }
        let output = initdb
            .output()
            .unwrap_or_else(|e| panic!("cannot run initdb: {e}"));
        let _ = std::fs::remove_file(&pwfile);
        assert!(
            output.status.success(),
            "initdb failed:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        if self.certs.is_some() {
            // Overwritten in place: the file stays the server's.
            let hba = self.data().join("pg_hba.conf");
            std::fs::write(&hba, TLS_HBA)
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", hba.display()));
        }
    }

    /// Spawns the server on `self.port` and returns once its log says it is ready and its
    /// port takes a connection; `Err` has its log.
    fn launch(&mut self) -> Result<(), String> {
        let mut postgres = self.command("postgres");
        if let Some(certs) = &self.certs {
            let file = |name: &str, path: &Path| format!("{name}={}", path.display());
            postgres.args(["-c", "ssl=on", "-c"]);
            postgres.arg(file("ssl_cert_file", &certs.server_cert));
            postgres
                .arg("-c")
                .arg(file("ssl_key_file", &certs.server_key));
            postgres.arg("-c").arg(file("ssl_ca_file", &certs.ca));
        }
        let mut child = postgres
            .arg("-D")
            .arg(self.data())
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-k")
            .arg(&self.dir)
            // No fsync (the machine does not crash, only the server: the OS keeps what it
            // wrote), but commits stay synchronous, so a kill loses nothing committed.
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .args(["-c", "full_page_writes=off"])
            .args(["-c", "max_connections=200"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run postgres: {e}"));
        let mut lines = BufReader::new(child.stderr.take().expect("piped")).lines();
        let mut printed = String::new();
        let ready = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    printed.push_str(&line);
                    printed.push('\n');
                    if line.contains(READY) {
                        break true;
                    }
                }
                // The end of its output: it exited.
                _ => break false,
            }
        };
        if !ready {
            let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
            return Err(format!("exited ({status}):\n{printed}"));
        }
        // The rest of its log goes to a file, copied by a thread so a full pipe never stalls it.
        let log = self.dir.join("postgres.log");
        let mut rest = File::options()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", log.display()));
        let _ = rest.write_all(printed.as_bytes());
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let _ = writeln!(rest, "{line}");
            }
        });
        self.watchdog = Some(watchdog(child.id(), &self.dir));
        self.child = Some(child);
        TcpStream::connect((Ipv4Addr::LOCALHOST, self.port))
            .map(drop)
            .map_err(|e| format!("ready, but port {} refused ({e}):\n{printed}", self.port))
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `sh` that kills the server and removes `dir` once its standard input closes: when the test
/// process exits, however it exits (the kernel closes our end). In a process group of its
/// own, deaf to SIGHUP, so that what ends the test process's group does not end it first.
fn watchdog(postmaster: u32, dir: &Path) -> Child {
    // No SIGSTOP here, unlike `kill`: a group left with a stopped member when its last outside
    // parent exits is sent SIGHUP and SIGCONT. A backend forked after `pgrep` exits by itself
    // once the postmaster is gone; a second `rm` takes the files one wrote during the first.
    let script = r#"trap '' HUP
        read _ignored
        kill -s KILL "$0" $(pgrep -P "$0") 2>/dev/null
        rm -rf "$1" 2>/dev/null || rm -rf "$1""#;
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(postmaster.to_string())
        .arg(dir)
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run sh: {e}"))
}

/// Sends `signal` to `pids` (with procps' `kill`).
fn signal(signal: &str, pids: &[u32]) {
    let _ = Command::new("kill")
        .args(["-s", signal, "--"])
        .args(pids.iter().map(u32::to_string))
        .stderr(Stdio::null())
        .status();
}

/// The processes whose parent is `parent` (from `/proc/*/stat`).
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // `pid (comm) state ppid …`; comm may hold spaces and parentheses.
            let after = &stat[stat.rfind(')')? + 1..];
            let ppid: u32 = after.split_whitespace().nth(1)?.parse().ok()?;
            (ppid == parent).then_some(pid)
        })
        .collect()
}

/// The directory holding `initdb`, `postgres` and `createdb`: the newest
/// `/usr/lib/postgresql/N/bin`, else the directory of the `initdb` in `PATH`.
fn bin_dir() -> PathBuf {
    let has_all = |dir: &Path| {
        ["initdb", "postgres", "createdb"]
            .iter()
            .all(|p| dir.join(p).is_file())
    };
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version: u32 = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| has_all(bin))
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return bin;
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .find(|dir| has_all(dir))
        .unwrap_or_else(|| {
            panic!(
                "PostgreSQL is not installed (no initdb, postgres and createdb in \
                 /usr/lib/postgresql/*/bin or PATH), and the tests of the PostgreSQL queue \
                 need a real server: install the Debian package with `{INSTALL}` (.ci/run does)"
            )
        })
}

/// Our effective user id (from `/proc/self/status`).
pub fn effective_uid() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(u32::MAX)
}

/// Makes `dir` the `postgres` user's (its uid and gid from `/etc/passwd`).
pub fn give_to_postgres(dir: &Path) {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let ids = passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.first() == Some(&"postgres") && fields.len() > 3)
            .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))
            .flatten()
    });
    let Some((uid, gid)) = ids else {
        panic!(
            "running as root, PostgreSQL must run as the `postgres` user, and there is none: \
             `{INSTALL}` creates it"
        );
    };
    std::os::unix::fs::chown(dir, Some(uid), Some(gid))
        .unwrap_or_else(|e| panic!("cannot give {} to postgres: {e}", dir.display()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_started_server_takes_connections_and_makes_databases() {
        let server = PgServer::start();
        TcpStream::connect((Ipv4Addr::LOCALHOST, server.port())).unwrap();
        let (a, b) = (server.create_database(), server.create_database());
        assert_ne!(a, b);
        assert_eq!(
            server.url(&a),
            format!("postgres://postgres@127.0.0.1:{}/{a}", server.port())
        );
    }

    #[test]
    fn a_killed_server_refuses_connections_and_a_restarted_one_has_its_data() {
        let mut server = PgServer::start();
        let db = server.create_database();
        let port = server.port();
        server.kill();
        let err = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused, "{err}");
        server.kill(); // killing a dead server is nothing
        server.restart();
        assert_eq!(server.port(), port);
        // The database made before the crash is there: creating it again fails.
        let again = Command::new(server.bin.join("createdb"))
            .args(["-h", "127.0.0.1", "-U", "postgres", "-p"])
            .arg(port.to_string())
            .arg(&db)
            .output()
            .unwrap();
        assert!(!again.status.success());
        assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));
    }

    #[test]
    fn a_dropped_server_is_gone_with_its_directory() {
        let server = PgServer::start();
        let (port, dir) = (server.port(), server.dir.clone());
        drop(server);
        let err = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
        assert!(!dir.exists());
    }
}
