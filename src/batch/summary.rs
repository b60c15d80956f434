//! [`Summary`]: what a batch did, against what each provider allows.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Serialize;

use super::job::JobReport;
use super::runner::RunReport;
use crate::client::Client;
use crate::config::Config;
use crate::stats::ProviderStats;

/// The end-of-run summary: items by outcome, requests and throttling per provider, and the
/// rates achieved against each provider's limits.
///
/// `Display` is the human table printed by `examples/batch.rs`; `Serialize` is its
/// `--summary-json` (durations in milliseconds).
///
/// # Examples
///
/// ```
/// use futures_util::stream;
/// use llm_failover::batch::{parse_line, Outcome, Runner, Stop, Summary};
///
/// # use std::sync::Arc;
/// # use llm_failover::provider::openai::OpenAi;
/// # use llm_failover::{Client, ProviderId, ProviderSettings};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let local = OpenAi::new(ProviderId::new("local"), "http://127.0.0.1:9/v1".parse()?)
/// #     .with_chat_model("llama3.2");
/// # let client = Client::builder().provider(Arc::new(local), ProviderSettings::new()).build()?;
/// let items = stream::iter([parse_line(b"not json", 1)]); // fails without a request
/// let mut outcomes: Vec<Outcome> = Vec::new();
/// let report = Runner::new(client.clone()).run(items, &mut outcomes, &Stop::new()).await?;
///
/// let summary = Summary::for_run(&client, &report, None).await;
/// assert_eq!((summary.items.failed, summary.requests), (1, 0));
/// assert!(summary.to_string().contains("invalid_input 1"));
/// let json = serde_json::to_value(&summary)?;
/// assert_eq!(json["providers"][0]["provider"], "local");
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Summary {
    /// The client's environment.
    pub environment: String,
    /// Items by outcome.
    pub items: Items,
    /// Requests sent, all providers.
    pub requests: u64,
    /// 429s (and equivalents) received, all providers.
    pub rate_limited: u64,
    /// Times a request left a provider for another after a failure.
    pub failovers: u64,
    /// Times a provider's breaker opened.
    pub breaker_opens: u64,
    /// Time requests spent waiting for admission, summed over requests.
    #[serde(rename = "admission_wait_ms", serialize_with = "ser_ms")]
    pub admission_wait: Duration,
    /// Wall time of the run.
    #[serde(rename = "wall_ms", serialize_with = "ser_ms")]
    pub wall: Duration,
    /// Per chat provider, in failover order.
    pub providers: Vec<ProviderSummary>,
}

/// Items by outcome.
///
/// # Examples
///
/// ```
/// use futures_util::stream;
/// use llm_failover::batch::{parse_line, Items, Outcome, Runner, Stop, Summary};
///
/// /// The exit code of a batch command.
/// fn exit_code(items: &Items) -> i32 {
///     if items.stopped || items.not_done > 0 { 130 } else if items.failed > 0 { 1 } else { 0 }
/// }
/// # use std::sync::Arc;
/// # use llm_failover::provider::openai::OpenAi;
/// # use llm_failover::{Client, ProviderId, ProviderSettings};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let local = OpenAi::new(ProviderId::new("local"), "http://127.0.0.1:9/v1".parse()?)
/// #     .with_chat_model("llama3.2");
/// # let client = Client::builder().provider(Arc::new(local), ProviderSettings::new()).build()?;
/// # let mut outcomes: Vec<Outcome> = Vec::new();
/// # let items = stream::iter([parse_line(b"not json", 1)]);
/// # let report = Runner::new(client.clone()).run(items, &mut outcomes, &Stop::new()).await?;
/// let summary = Summary::for_run(&client, &report, None).await;
/// assert_eq!(summary.items.failed_by_kind["invalid_input"], 1);
/// assert_eq!(exit_code(&summary.items), 1);
/// assert_eq!(exit_code(&Items::default()), 0);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Items {
    /// Succeeded in this run.
    pub ok: u64,
    /// Failed in this run.
    pub failed: u64,
    /// Failed in this run, by kind (`invalid_input`, `rate_limited`, …).
    pub failed_by_kind: BTreeMap<String, u64>,
    /// Skipped: already done by an earlier run.
    pub skipped_ok: u64,
    /// Skipped: failed in an earlier run (rerun with retry-failed to send them again).
    pub skipped_failed: u64,
    /// In flight when the run was aborted: no result; a rerun sends them.
    pub not_done: u64,
    /// The run was stopped before the input ended.
    pub stopped: bool,
}

/// One provider's share of the run.
///
/// # Examples
///
/// ```
/// use llm_failover::batch::{ProviderSummary, RunReport, Summary};
///
/// /// The share of the request limit left unused.
/// fn headroom(p: &ProviderSummary) -> Option<f64> {
///     let limit = p.rpm_now.or(p.rpm_configured)? as f64;
///     Some(1.0 - p.requests_per_minute / limit)
/// }
/// # use std::sync::Arc;
/// # use llm_failover::provider::openai::OpenAi;
/// # use llm_failover::{Client, ProviderId, ProviderSettings};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let local = OpenAi::new(ProviderId::new("local"), "http://127.0.0.1:9/v1".parse()?)
/// #     .with_chat_model("llama3.2");
/// # let limits = llm_failover::ratelimit::Limits::none().with_rpm(60);
/// # let settings = ProviderSettings::new().limits(limits);
/// # let client = Client::builder().provider(Arc::new(local), settings).build()?;
/// let summary = Summary::for_run(&client, &RunReport::default(), None).await;
/// let local = &summary.providers[0];
/// assert_eq!((local.provider.as_str(), local.rpm_configured), ("local", Some(60)));
/// assert_eq!(headroom(local), Some(1.0));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ProviderSummary {
    /// The provider's name.
    pub provider: String,
    /// Its counters.
    pub stats: ProviderStats,
    /// Requests sent per minute of wall time.
    pub requests_per_minute: f64,
    /// Tokens (input + output, as reported) per minute of wall time.
    pub tokens_per_minute: f64,
    /// Requests per minute configured in `providers.toml`.
    pub rpm_configured: Option<u64>,
    /// Tokens per minute configured in `providers.toml`.
    pub tpm_configured: Option<u64>,
    /// The limiter's request capacity at the end (configured, or stated by the provider's
    /// headers, which replace the configured value).
    pub rpm_now: Option<u64>,
    /// The limiter's token capacity at the end.
    pub tpm_now: Option<u64>,
}

fn ser_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64((d.as_secs_f64() * 1000.0).round())
}

impl Summary {
    /// The summary of a [`FileJob`](super::FileJob) run through `client`. `config`, when
    /// given, names each provider's model, whose limiter state is read; without it, the
    /// model that last answered is used.
    pub async fn collect(client: &Client, report: &JobReport, config: Option<&Config>) -> Self {
        let mut s = Self::for_run(client, &report.run, config).await;
        s.items.skipped_ok = report.skipped_ok;
        s.items.skipped_failed = report.skipped_failed;
        s
    }

    /// The summary of a [`Runner`](super::Runner) run through `client`.
    pub async fn for_run(client: &Client, run: &RunReport, config: Option<&Config>) -> Self {
        let stats = client.stats();
        let minutes = run.elapsed.as_secs_f64() / 60.0;
        let per_minute = |n: u64| {
            if minutes > 0.0 {
                n as f64 / minutes
            } else {
                0.0
            }
        };
        let mut providers = Vec::new();
        for id in client.chat_providers() {
            let name = id.as_str();
            let p = stats.provider(name).cloned().unwrap_or_default();
            let configured = client.configured_limits(name).unwrap_or_default();
            let model = config
                .and_then(|c| c.providers.get(name))
                .and_then(|pc| pc.model.clone())
                .or_else(|| run.models.get(&id).cloned());
            let (mut rpm_now, mut tpm_now) = (None, None);
            if let Some(model) = model {
                if let Ok(snap) = client.limits(name, &model).await {
                    rpm_now = snap.requests.map(|(_, cap)| cap);
                    tpm_now = snap.tokens.map(|(_, cap)| cap);
                }
            }
            providers.push(ProviderSummary {
                provider: name.to_owned(),
                requests_per_minute: per_minute(p.sent),
                tokens_per_minute: per_minute(p.input_tokens + p.output_tokens),
                rpm_configured: configured.rpm.map(|n| n.get()),
                tpm_configured: configured.tpm.map(|n| n.get()),
                rpm_now,
                tpm_now,
                stats: p,
            });
        }
        let total = stats.total();
        Summary {
            environment: client.environment().to_owned(),
            items: Items {
                ok: run.ok,
                failed: run.failed(),
                failed_by_kind: run.failed_by_kind.clone(),
                skipped_ok: 0,
                skipped_failed: 0,
                not_done: run.not_done,
                stopped: run.stopped,
            },
            requests: total.sent,
            rate_limited: total.rate_limited,
            failovers: total.failovers,
            breaker_opens: total.breaker_opens,
            admission_wait: total.admission_wait,
            wall: run.elapsed,
            providers,
        }
    }
}

fn limit(configured: Option<u64>, now: Option<u64>) -> String {
    match (configured, now) {
        (Some(c), Some(n)) if c == n => c.to_string(),
        (Some(c), Some(n)) => format!("{c}→{n}"),
        (None, Some(n)) => format!("{n} learned"),
        (Some(c), None) => c.to_string(),
        (None, None) => "?".to_owned(),
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.items;
        write!(
            f,
            "{} in {:.1} s ({}): {} ok, {} failed",
            if i.stopped { "stopped" } else { "finished" },
            self.wall.as_secs_f64(),
            self.environment,
            i.ok,
            i.failed
        )?;
        if !i.failed_by_kind.is_empty() {
            let kinds: Vec<String> = i
                .failed_by_kind
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            write!(f, " ({})", kinds.join(", "))?;
        }
        writeln!(f)?;
        if i.skipped_ok + i.skipped_failed > 0 {
            writeln!(
                f,
                "skipped {} done earlier and {} failed earlier (retry them with --retry-failed)",
                i.skipped_ok, i.skipped_failed
            )?;
        }
        if i.not_done > 0 {
            writeln!(
                f,
                "{} in flight when aborted: not done, a rerun sends them",
                i.not_done
            )?;
        }
        writeln!(
            f,
            "requests {} · 429s received {} · failovers {} · breaker opens {} · waited for admission {:.1} s (summed over requests)",
            self.requests,
            self.rate_limited,
            self.failovers,
            self.breaker_opens,
            self.admission_wait.as_secs_f64()
        )?;
        writeln!(
            f,
            "{:<16} {:>6} {:>6} {:>5} {:>5} {:>9} {:>8} {:>16} {:>22}",
            "provider",
            "sent",
            "ok",
            "429",
            "5xx",
            "failovers",
            "wait s",
            "req/min (limit)",
            "tokens/min (limit)"
        )?;
        for p in &self.providers {
            let s = &p.stats;
            writeln!(
                f,
                "{:<16} {:>6} {:>6} {:>5} {:>5} {:>9} {:>8.1} {:>16} {:>22}",
                p.provider,
                s.sent,
                s.ok,
                s.rate_limited,
                s.server_errors,
                s.failovers,
                s.admission_wait.as_secs_f64(),
                format!(
                    "{:.0} ({})",
                    p.requests_per_minute,
                    limit(p.rpm_configured, p.rpm_now)
                ),
                format!(
                    "{:.0} ({})",
                    p.tokens_per_minute,
                    limit(p.tpm_configured, p.tpm_now)
                ),
            )?;
        }
        if self.wall < Duration::from_secs(60) && self.requests > 0 {
            writeln!(
                f,
                "(a run shorter than a minute can exceed a per-minute limit: buckets start full)"
            )?;
        }
        Ok(())
    }
}
