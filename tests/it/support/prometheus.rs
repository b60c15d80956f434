//! A real Prometheus for the tests: [`Prometheus`] runs the `prometheus` of the Debian package
//! (scripts/test installs it) on a free loopback port, in a directory of its own, scraping one
//! target every second, and is killed on drop. [`Prometheus::query`] asks its HTTP API.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::examples::{TempDir, free_port};

/// A running `prometheus`, scraping one target.
pub struct Prometheus {
    child: Child,
    port: u16,
    dir: TempDir,
}

impl Prometheus {
    /// Starts Prometheus scraping `http://{target}/metrics` every second; returns once its
    /// API answers ready.
    pub fn start(name: &str, target: &str) -> Prometheus {
        let dir = TempDir::new("prometheus", name);
        let config = dir.path("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
                 scrape_configs:\n  - job_name: llm-failover\n    static_configs:\n      \
                 - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.path("prometheus.log")).unwrap();
        let child = Command::new(binary())
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start prometheus (scripts/test installs Debian's): {e}")
            });
        let p = Prometheus { child, port, dir };
        p.wait_ready();
        p
    }

    /// The server's log, for a failure's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path("prometheus.log")).unwrap_or_default()
    }

    /// Polls `/-/ready` (Prometheus starts in a second or two).
    fn wait_ready(&self) {
        let ready = || get(self.port, "/-/ready").is_some_and(|(status, _)| status == 200);
        if !until_the_server(Duration::from_secs(30), ready) {
            panic!("prometheus not ready within 30 s:\n{}", self.log());
        }
    }

    /// `GET path` on the API, as JSON; panics unless it answers `status: success`.
    pub fn api(&self, path: &str) -> Value {
        let (status, body) =
            get(self.port, path).unwrap_or_else(|| panic!("prometheus does not answer {path}"));
        let v: Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("{path}: {status} not JSON ({e}): {body}"));
        assert_eq!(v["status"], "success", "{path}: {v}");
        v["data"].clone()
    }

    /// The instant vector `promql` evaluates to now: each series' labels and value.
    pub fn query(&self, promql: &str) -> Vec<(serde_json::Map<String, Value>, f64)> {
        let path = format!("/api/v1/query?query={}", encode(promql));
        let data = self.api(&path);
        data["result"]
            .as_array()
            .unwrap_or_else(|| panic!("{promql}: no result: {data}"))
            .iter()
            .map(|s| {
                let labels = s["metric"].as_object().cloned().unwrap_or_default();
                let value = s["value"][1].as_str().unwrap_or("NaN").parse().unwrap();
                (labels, value)
            })
            .collect()
    }

    /// The one value `promql` evaluates to (a sum, say); 0 when there is no series.
    pub fn scalar(&self, promql: &str) -> f64 {
        let r = self.query(promql);
        assert!(r.len() <= 1, "{promql}: {r:?}");
        r.first().map_or(0.0, |(_, v)| *v)
    }

    /// The scrapes of the target so far that succeeded (`up` 1).
    pub fn successful_scrapes(&self) -> f64 {
        self.scalar("sum_over_time(up[10m])")
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Asks `done` every 100 ms until it says yes (true) or `limit` has passed (false): a wait
/// on a real server (its start, its storing a scrape), which no test logic is timed by.
#[expect(
    clippy::disallowed_methods,
    reason = "a bound on waiting for a real server; no logic is timed by it"
)]
pub fn until_the_server(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Debian's `prometheus`, in PATH or where the package puts it.
fn binary() -> PathBuf {
    ["/usr/bin/prometheus", "/usr/local/bin/prometheus"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("prometheus"))
}

/// A query string's value, percent-encoded.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `GET http://127.0.0.1:{port}{path}`: the status and body, `None` when nothing answers.
pub fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let r = reqwest::Client::new()
            .get(format!("http://127.0.0.1:{port}{path}"))
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .ok()?;
        let status = r.status().as_u16();
        Some((status, r.text().await.ok()?))
    })
}
