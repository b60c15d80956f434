//! Measures the emulator's own throughput on loopback: small non-streaming OpenAI chat
//! completions, limits off, over keep-alive HTTP/1.1 connections.
//!
//! ```sh
//! cargo run --release -p llm-failover-emulator --example throughput               # in-process emulator
//! cargo run --release -p llm-failover-emulator --example throughput -- 64 5        # connections, seconds
//! cargo run --release -p llm-failover-emulator --example throughput -- 64 5 127.0.0.1:4010  # a running one
//! ```
//!
//! The load generator is deliberately thin (pre-built request bytes, a Content-Length reader)
//! so that the figure is the server's, not the client's; both share this machine's cores.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use llm_failover_emulator::Emulator;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const BODY: &str =
    r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello"}],"max_tokens":16}"#;

fn request(host: &str, prefix: &str) -> Vec<u8> {
    format!(
        "POST /{prefix}/v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer \
         emulator-key\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{BODY}",
        BODY.len()
    )
    .into_bytes()
}

/// Reads one response; true when it was a 200.
async fn read_response(s: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<bool> {
    buf.clear();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let ok = head.starts_with("http/1.1 200");
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(ok)
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let conns: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(64);
    let secs: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    let (_emu, addr) = match args.get(2) {
        Some(a) => (None, a.clone()),
        None => {
            let emu = Emulator::builder().openai("openai").start().await?;
            let addr = emu.addr().to_string();
            (Some(emu), addr)
        }
    };
    let req = Arc::new(request(&addr, "openai"));
    let ok = Arc::new(AtomicU64::new(0));
    let bad = Arc::new(AtomicU64::new(0));
    let warmup = Duration::from_millis(500);
    let started = Instant::now();
    let measure_from = started + warmup;
    let deadline = measure_from + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let (req, ok, bad, addr) = (req.clone(), ok.clone(), bad.clone(), addr.clone());
        tasks.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(&addr).await?;
            s.set_nodelay(true)?;
            let mut buf = Vec::with_capacity(4096);
            loop {
                let now = Instant::now();
                if now >= deadline {
                    return Ok::<_, std::io::Error>(());
                }
                s.write_all(&req).await?;
                let good = read_response(&mut s, &mut buf).await?;
                if now >= measure_from {
                    if good { &ok } else { &bad }.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        if let Ok(Err(e)) = t.await {
            eprintln!("connection failed: {e}");
        }
    }
    let (ok, bad) = (ok.load(Ordering::Relaxed), bad.load(Ordering::Relaxed));
    println!(
        "{ok} OK + {bad} non-200 in {secs} s over {conns} connections: {:.0} requests/s",
        (ok + bad) as f64 / secs as f64
    );
    Ok(())
}
