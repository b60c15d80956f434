//! A real Redis for the tests: [`RedisServer`] runs the `redis-server` of the Debian package
//! on a free loopback port, in a directory of its own, with nothing persisted; it can be
//! killed (SIGKILL, as a crash) and restarted on the same port, and is killed on drop.
//!
//! No mock: the tests of the shared store talk to this server. Without `redis-server` on the
//! machine the helper panics with the command that installs it (a skipped test would pass
//! without testing anything).

use std::fs::File;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::examples::free_port;

/// What to run, and how to get it.
const PROGRAM: &str = "redis-server";
const INSTALL: &str = "sudo apt-get install -y redis-server";

/// A `redis-server` of our own on `127.0.0.1:port`.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
    /// `requirepass`, when the server wants a password.
    password: Option<String>,
    /// TLS only (the port is its TLS port): the certificates, and whether a client must
    /// present one signed by their CA.
    tls: Option<(super::certs::Certs, bool)>,
    /// More arguments for `redis-server` (a cluster node's).
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts a server on a free loopback port and returns once it answers PING.
    ///
    /// # Panics
    ///
    /// When `redis-server` is not installed (the message has the apt command), or the server
    /// does not come up (its output is in the message).
    pub fn start() -> RedisServer {
        RedisServer::start_with(None, None, Vec::new())
    }

    /// Starts a server that wants `password` (`requirepass`): a client without it, or with
    /// another, is refused. [`url`](Self::url) carries it.
    pub fn with_password(password: &str) -> RedisServer {
        RedisServer::start_with(Some(password.to_owned()), None, Vec::new())
    }

    /// Starts a server that speaks TLS only (`--port 0 --tls-port PORT`), with the server
    /// certificate of `certs`; when `client_certs`, a client must present a certificate
    /// signed by their CA. [`url`](Self::url) is `rediss://`.
    pub fn with_tls(certs: &super::certs::Certs, client_certs: bool) -> RedisServer {
        RedisServer::start_with(None, Some((certs.clone(), client_certs)), Vec::new())
    }

    fn start_with(
        password: Option<String>,
        tls: Option<(super::certs::Certs, bool)>,
        extra: Vec<String>,
    ) -> RedisServer {
        static SERVERS: AtomicUsize = AtomicUsize::new(0);
        let n = SERVERS.fetch_add(1, Ordering::Relaxed);
        // Another process may take the free port between our probe and the server's bind:
        // then try another one.
        let mut last = String::new();
        for _ in 0..5 {
            let port = free_port();
            let dir = std::env::temp_dir().join(format!(
                "llm-failover-redis-{}-{n}-{port}",
                std::process::id()
            ));
            std::fs::create_dir_all(&dir)
                .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
            let mut server = RedisServer {
                port,
                dir,
                child: None,
                password: password.clone(),
                tls: tls.clone(),
                extra: extra.clone(),
            };
            match server.launch() {
                Ok(()) => return server,
                Err(output) if output.contains("Address already in use") => last = output,
                Err(output) => panic!("{PROGRAM} on port {port} did not start:\n{output}"),
            }
        }
        panic!("{PROGRAM} found no free port in 5 tries; the last said:\n{last}");
    }

    /// `redis://127.0.0.1:PORT` (`redis://:PASSWORD@127.0.0.1:PORT` when it wants one).
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        match &self.password {
            Some(pw) => format!("{scheme}://:{pw}@127.0.0.1:{}", self.port),
            None => format!("{scheme}://127.0.0.1:{}", self.port),
        }
    }

    /// The port it listens on (the same after [`restart`](Self::restart)).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The script calls it has run (`EVALSHA` and `EVAL`) since it started or the last
    /// `CONFIG RESETSTAT`, from `redis-cli INFO commandstats` (a plain server).
    pub fn script_calls(&self) -> u64 {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "INFO", "commandstats"])
            .output()
            .expect("redis-cli (apt-get install redis-server)");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
            .filter_map(|l| {
                l.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// Kills the server with SIGKILL (a crash: nothing flushed, connections dropped) and waits
    /// for it to be gone. Nothing happens if it is not running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // `Child::kill` is SIGKILL on Unix; an error means it has exited already.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port with the same settings (killing it first
    /// if it still runs) and returns once it answers PING. Its data is gone: nothing was
    /// persisted.
    ///
    /// # Panics
    ///
    /// When it does not come up (its output is in the message).
    pub fn restart(&mut self) {
        self.kill();
        if let Err(output) = self.launch() {
            panic!("{PROGRAM} did not restart on port {}:\n{output}", self.port);
        }
    }

    /// Whether a PING is answered with PONG now.
    pub fn ping(&self) -> bool {
        ping(self.addr()).is_ok()
    }

    /// Spawns the server on `self.port` and returns once it says it is ready (a line of its
    /// own output, read as it comes: no polling) and answers PING; `Err` has its output.
    fn launch(&mut self) -> Result<(), String> {
        // Its log goes to a file; its standard output is read until it is ready, then copied
        // to that file by a thread, so that a full pipe never stalls it.
        let log = self.dir.join("redis.log");
        let err =
            File::create(&log).unwrap_or_else(|e| panic!("cannot create {}: {e}", log.display()));
        let mut command = Command::new(PROGRAM);
        command.args(["--bind", "127.0.0.1"]);
        match &self.tls {
            None => command.arg("--port").arg(self.port.to_string()),
            Some((certs, client_certs)) => command
                .args(["--port", "0", "--tls-port"])
                .arg(self.port.to_string())
                .arg("--tls-cert-file")
                .arg(&certs.server_cert)
                .arg("--tls-key-file")
                .arg(&certs.server_key)
                .arg("--tls-ca-cert-file")
                .arg(&certs.ca)
                .args([
                    "--tls-auth-clients",
                    if *client_certs { "yes" } else { "no" },
                ]),
        };
        let mut child = command
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(&self.dir)
            .args(&self.extra)
            .args(
                self.password
                    .iter()
                    .flat_map(|pw| ["--requirepass", pw.as_str()]),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| match e.kind() {
                ErrorKind::NotFound => panic!(
                    "{PROGRAM} is not installed, and the tests of shared limits need a real \
                     Redis: install the Debian package with `{INSTALL}` (.ci/run does)"
                ),
                _ => panic!("cannot run {PROGRAM}: {e}"),
            });
        let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        let mut printed = String::new();
        let ready = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    printed.push_str(&line);
                    printed.push('\n');
                    if line.contains("Ready to accept connections") {
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
        let mut rest = std::fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", log.display()));
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let _ = writeln!(rest, "{line}");
            }
        });
        self.child = Some(child);
        // A TLS port does not answer a plain PING: its readiness line is the proof.
        if self.tls.is_some() {
            return Ok(());
        }
        // A server that wants a password answers NOAUTH: it is up all the same.
        match ping(self.addr()) {
            Err(e) if self.password.is_some() && e.to_string().contains("-NOAUTH") => Ok(()),
            answer => answer.map_err(|e| format!("ready, but PING failed ({e}):\n{printed}")),
        }
    }
}

/// A Redis Cluster of three primaries (no replicas) on loopback: three `redis-server`s with
/// `--cluster-enabled yes`, joined by `redis-cli --cluster create`, which returns once every
/// slot is covered and the nodes agree.
#[derive(Debug)]
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts the three nodes and creates the cluster.
    ///
    /// # Panics
    ///
    /// When a node does not start or `redis-cli --cluster create` fails (its output is in
    /// the message).
    pub fn start() -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| {
                RedisServer::start_with(
                    None,
                    None,
                    ["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"]
                        .map(str::to_owned)
                        .to_vec(),
                )
            })
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)))
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli (apt-get install redis-server)");
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && printed.contains("All 16384 slots covered"),
            "redis-cli --cluster create failed:\n{printed}"
        );
        let cluster = RedisCluster { nodes };
        cluster.until_every_node_says_ok();
        cluster
    }

    /// Returns once every node's `CLUSTER INFO` says `cluster_state:ok`: the create command
    /// returns when the slots are assigned, a moment before every node has heard so. (A
    /// server's readiness, asked every 20 ms for at most 10 s; no test logic waits on it.)
    #[expect(
        clippy::disallowed_methods,
        reason = "a bound on waiting for servers to agree; no logic is timed by it"
    )]
    fn until_every_node_says_ok(&self) {
        let started = std::time::Instant::now();
        loop {
            let states: Vec<String> = self
                .nodes
                .iter()
                .map(|n| {
                    let out = Command::new("redis-cli")
                        .args(["-p", &n.port.to_string(), "CLUSTER", "INFO"])
                        .output()
                        .expect("redis-cli");
                    String::from_utf8_lossy(&out.stdout)
                        .lines()
                        .find(|l| l.starts_with("cluster_state:"))
                        .unwrap_or("cluster_state:?")
                        .trim()
                        .to_owned()
                })
                .collect();
            if states.iter().all(|s| s == "cluster_state:ok") {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the cluster's nodes did not agree within 10 s: {states:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `redis://127.0.0.1:PORT` of the first node: the seed a client finds the others from.
    pub fn url(&self) -> String {
        self.nodes[0].url()
    }

    /// How many keys each node holds now.
    pub fn keys_per_node(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .map(|n| {
                let out = Command::new("redis-cli")
                    .args(["-p", &n.port.to_string(), "DBSIZE"])
                    .output()
                    .expect("redis-cli");
                String::from_utf8_lossy(&out.stdout)
                    .trim()
                    .parse()
                    .unwrap_or(0)
            })
            .collect()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One PING over a fresh connection; `Ok` only for `+PONG`.
pub fn ping(addr: SocketAddr) -> std::io::Result<()> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(b"*1\r\n$4\r\nPING\r\n")?;
    let mut reply = [0u8; 7];
    stream.read_exact(&mut reply)?;
    if &reply == b"+PONG\r\n" {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "PING answered {:?}",
            String::from_utf8_lossy(&reply)
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_started_server_answers_ping_on_loopback() {
        let server = RedisServer::start();
        assert!(server.ping());
        assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
        ping(server.addr()).unwrap();
    }

    #[test]
    fn a_killed_server_refuses_connections_and_a_restarted_one_answers_on_the_same_port() {
        let mut server = RedisServer::start();
        let port = server.port();
        server.kill();
        let err = ping(server.addr()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ConnectionRefused, "{err}");
        server.kill(); // killing a dead server is nothing
        server.restart();
        assert_eq!(server.port(), port);
        assert!(server.ping());
        // Restarting a running one kills it first.
        server.restart();
        assert!(server.ping());
    }

    #[test]
    fn a_dropped_server_is_gone() {
        let server = RedisServer::start();
        let addr = server.addr();
        drop(server);
        assert_eq!(ping(addr).unwrap_err().kind(), ErrorKind::ConnectionRefused);
    }
}
