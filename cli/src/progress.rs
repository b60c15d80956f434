//! What a run shows while it runs: a bar on a terminal (a plain line every 2 s otherwise)
//! with an ETA, and what Ctrl-C does.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use llm_failover::Client;
use llm_failover::batch::{InputReader, Stop};
use llm_failover::clock::{Clock, TokioClock};
use llm_failover_queue::Queue;

use crate::eta::{Pace, eta};
use crate::metrics::Metrics;
use crate::queue::now_ms;

/// The model each chat provider is paced for, to read its limits.
pub(crate) fn chat_models(client: &Client, config: &llm_failover::Config) -> Vec<(String, String)> {
    client
        .chat_providers()
        .iter()
        .filter_map(|id| {
            let model = config.providers.get(id.as_str())?.model.clone()?;
            Some((id.to_string(), model))
        })
        .collect()
}

/// Counts the non-blank lines of `path` without parsing them (the bar's total without the
/// queue).
///
/// # Errors
///
/// When the file cannot be read.
pub(crate) async fn count_lines(path: &std::path::Path) -> std::io::Result<u64> {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let mut reader = std::io::BufReader::with_capacity(64 * 1024, std::fs::File::open(path)?);
        let mut buf = Vec::new();
        let mut n = 0u64;
        loop {
            buf.clear();
            if reader.read_until(b'\n', &mut buf)? == 0 {
                return Ok(n);
            }
            if !buf.iter().all(u8::is_ascii_whitespace) {
                n += 1;
            }
        }
    })
    .await
    .map_err(|e| std::io::Error::other(format!("line count task failed: {e}")))?
}

/// The input's lines and, of those, the bad ones (each a failed item from the start); zero
/// for an input that is not a regular file (reading a pipe would consume it).
pub(crate) async fn count_input(path: &std::path::Path) -> (u64, u64) {
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return (0, 0);
    }
    let Ok(file) = tokio::fs::File::open(path).await else {
        return (0, 0);
    };
    let mut reader = InputReader::new(tokio::io::BufReader::new(file));
    let (mut lines, mut invalid) = (0, 0);
    while let Ok(Some(parsed)) = reader.next().await {
        lines += 1;
        invalid += u64::from(parsed.is_err());
    }
    (lines, invalid)
}

/// The limits' pace of each chat provider, for the ETA.
async fn paces(client: &Client, models: &[(String, String)]) -> Vec<Option<Pace>> {
    let stats = client.stats();
    let now = TokioClock.now();
    let mut paces = Vec::with_capacity(models.len());
    for (provider, model) in models {
        let tokens_per_item = stats
            .provider(provider)
            .filter(|s| s.ok > 0)
            .map(|s| (s.input_tokens + s.output_tokens) as f64 / s.ok as f64);
        let limits = client.limits(provider, model).await.ok().flatten();
        paces.push(limits.and_then(|l| Pace::from_limits(&l, tokens_per_item, now)));
    }
    paces
}

/// Items settled a second over the last `window` of readings: the rate the queue is being
/// worked at now, not since the start (a run that waited through an outage, or resumed
/// half-done, would otherwise be mis-timed).
#[derive(Default)]
struct SettledRate {
    readings: std::collections::VecDeque<(tokio::time::Instant, u64)>,
}

impl SettledRate {
    const WINDOW: Duration = Duration::from_secs(30);

    fn add(&mut self, at: tokio::time::Instant, settled: u64) -> Option<f64> {
        self.readings.push_back((at, settled));
        while self
            .readings
            .front()
            .is_some_and(|(t, _)| at.saturating_duration_since(*t) > Self::WINDOW)
        {
            self.readings.pop_front();
        }
        let (t0, n0) = *self.readings.front()?;
        let secs = at.saturating_duration_since(t0).as_secs_f64();
        (secs > 0.0 && settled > n0).then(|| (settled - n0) as f64 / secs)
    }
}

/// The queue's progress: a bar on a terminal (a plain line every 2 s otherwise) with what is
/// settled, failed (bad input lines from the start), queued and running, and an ETA from
/// the rate items settle at now and the providers' limits.
pub(crate) async fn show_queue(
    queue: Queue,
    client: Client,
    models: Vec<(String, String)>,
    bar: ProgressBar,
    (total, invalid): (u64, u64),
    metrics: Option<Metrics>,
) {
    let tty = !bar.is_hidden();
    let period = Duration::from_millis(if tty { 500 } else { 2_000 });
    let mut tick = tokio::time::interval(period);
    let mut rate = SettledRate::default();
    tick.tick().await;
    loop {
        tick.tick().await;
        let now = now_ms();
        let Ok(s) = queue.stats(now).await else {
            continue;
        };
        if let Some(m) = &metrics {
            m.record_queue(&s);
        }
        let settled = s.done + s.dead + s.review;
        let observed = rate.add(TokioClock.now(), settled);
        let left = s.ready + s.running;
        let eta = eta(left, s.running, &paces(&client, &models).await, observed)
            .map_or_else(|| "?".to_owned(), show_duration);
        let t = client.stats().total();
        let msg = format!(
            "ok {} · failed {} · queued {} · running {} · 429s {} · failovers {} · ETA {eta}",
            s.done,
            s.dead + s.review + invalid,
            s.ready,
            s.running,
            t.rate_limited,
            t.failovers
        );
        let position = (settled + invalid).min(total.max(settled + invalid));
        if tty {
            bar.set_position(position);
            bar.set_message(msg);
        } else {
            eprintln!("[{position}/{total}] {msg}");
        }
    }
}

pub(crate) fn progress_bar(total: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    let style =
        ProgressStyle::with_template("{bar:30.cyan/blue} {pos}/{len} {msg} · {elapsed_precise}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("█▉▊▋▌▍▎▏ ");
    bar.set_style(style);
    bar
}

/// Updates the bar every 200 ms on a terminal; otherwise prints a plain line every 2 s.
pub(crate) async fn show_progress(
    progress: llm_failover::batch::Progress,
    client: Client,
    models: Vec<(String, String)>,
    bar: ProgressBar,
    total: u64,
) {
    let tty = !bar.is_hidden();
    let period = if tty {
        Duration::from_millis(200)
    } else {
        Duration::from_secs(2)
    };
    let started = TokioClock.now();
    let mut tick = tokio::time::interval(period);
    tick.tick().await;
    loop {
        tick.tick().await;
        let p = progress.snapshot();
        let t = client.stats().total();
        let left = total.saturating_sub(p.finished());
        let paces = paces(&client, &models).await;
        let elapsed = TokioClock
            .now()
            .saturating_duration_since(started)
            .as_secs_f64();
        let ran = p.ok + p.failed;
        let observed = (ran > 0 && elapsed > 0.0).then(|| ran as f64 / elapsed);
        let eta = if total == 0 {
            "?".to_owned()
        } else {
            eta(left, p.in_flight, &paces, observed).map_or_else(|| "?".to_owned(), show_duration)
        };
        let msg = format!(
            "ok {} · failed {} · in flight {} · skipped {} · waited on limits {:.1} s (summed over items) · 429s {} · failovers {} · ETA {eta}",
            p.ok,
            p.failed,
            p.in_flight,
            p.skipped,
            t.admission_wait.as_secs_f64(),
            t.rate_limited,
            t.failovers
        );
        if tty {
            bar.set_position(p.finished());
            bar.set_message(msg);
        } else {
            eprintln!("[{}/{total}] {msg}", p.finished());
        }
    }
}

/// `42 s`, `3 min 05 s`, `2 h 10 min`, `7 days`.
pub(crate) fn show_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {:02} s", s / 60, s % 60),
        3600..86_400 => format!("{} h {:02} min", s / 3600, s % 3600 / 60),
        _ => format!("{:.1} days", s as f64 / 86_400.0),
    }
}

/// First Ctrl-C: no new items, let those in flight finish. Second: drop them too.
pub(crate) async fn handle_ctrl_c(stop: Stop, bar: ProgressBar) {
    if tokio::signal::ctrl_c().await.is_err() {
        return;
    }
    stop.stop();
    bar.suspend(|| {
        eprintln!("stopping: no new items; waiting for those in flight (Ctrl-C again to drop them)")
    });
    if tokio::signal::ctrl_c().await.is_ok() {
        stop.abort();
        bar.suspend(|| eprintln!("aborting: items in flight are left for the next run"));
    }
}
