//! [`Summary`]: what a batch did, against what each provider allows.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Serialize;

use super::budget::BudgetSpent;
use super::job::JobReport;
use super::runner::RunReport;
use crate::client::Client;
use crate::config::Config;
use crate::stats::ProviderStats;
use crate::types::price::Cost;

/// The end-of-run summary: items by outcome, requests and throttling per provider, and the
/// rates achieved against each provider's limits.
///
/// `Display` is the human summary the `llm-failover` command prints, in lines of at most 80
/// characters (a field too wide for a line goes to the next one, indented); `Serialize` is
/// its `--summary-json` (durations in milliseconds).
///
/// # Examples
///
/// ```
/// use futures_util::stream;
/// use llm_failover::batch::{InputReader, ItemOutcome, Runner, Stop, Summary};
///
/// # use std::sync::Arc;
/// # use llm_failover::provider::openai::OpenAi;
/// # use llm_failover::{Client, ProviderId, ProviderSettings};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let local = OpenAi::new(ProviderId::new("local"), "http://127.0.0.1:9/v1".parse()?)
/// #     .with_chat_model("llama3.2");
/// # let client = Client::builder().provider(Arc::new(local), ProviderSettings::new()).build()?;
/// let bad = InputReader::new(&b"not json\n"[..]).next().await?.unwrap(); // no request
/// let mut outcomes: Vec<ItemOutcome> = Vec::new();
/// let items = stream::iter([bad]);
/// let report = Runner::new(client.clone()).run(items, &mut outcomes, &Stop::new()).await?;
///
/// let summary = Summary::for_run(&client, &report, None).await;
/// assert_eq!(summary.requests, 0);
/// assert!(summary.to_string().contains("invalid_input 1"));
/// let json = serde_json::to_value(&summary)?;
/// assert_eq!((&json["items"]["failed"], &json["items"]["ok"]), (&1.into(), &0.into()));
/// assert_eq!(json["providers"][0]["provider"], "local");
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Summary {
    /// The client's environment.
    pub environment: String,
    /// Items by outcome: `items` in the lines and the JSON (in code, the run's report holds
    /// the same counts).
    pub(crate) items: Items,
    /// Requests sent, all providers.
    pub requests: u64,
    /// 429s (and equivalents) received, all providers.
    pub rate_limited: u64,
    /// Times a request left a provider for another after a failure.
    pub failovers: u64,
    /// Times a provider's breaker opened.
    pub breaker_opens: u64,
    /// Time spent waiting for admission by the providers' limits: a sum over every attempt
    /// of every item (retries and failovers included; an attempt dropped by an abort while
    /// it waited is not counted). Items wait at the same time, so the sum can exceed
    /// [`wall`](Self::wall) many times over. Divided by [`requests`](Self::requests), the
    /// mean wait of a request sent.
    #[serde(rename = "admission_wait_ms", serialize_with = "ser_ms")]
    pub admission_wait: Duration,
    /// Wall time of the run.
    #[serde(rename = "wall_ms", serialize_with = "ser_ms")]
    pub wall: Duration,
    /// Per chat provider, in failover order.
    pub providers: Vec<ProviderSummary>,
    /// Lines of the results file that were not result lines, dropped by the compaction (and
    /// warned about); 0 for a run without a results file.
    pub unreadable_lines: u64,
    /// What the response cache did for this run's answers; `None` when the client has no
    /// cache (and then absent from the JSON).
    ///
    /// Counted from the run's outcomes (each [`Answer::cached`](super::Answer::cached)), not
    /// as the change in [`Client::stats`]`().cache` over the run: a [`Cache`](crate::cache::Cache)'s
    /// counters are shared by every client and clone it was given to, so another batch or a
    /// server's traffic in the same process would be counted as this run's; and a queued item
    /// retried after a 429 is looked up once per attempt, where the summary counts items. So
    /// `hits + misses` is the items that succeeded, and failed items are in neither.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheSummary>,
    /// The items each lane answered, when a provider's Batch API answered any (else absent
    /// from the JSON): the bulk lane's are billed at the provider's batch price (half, at
    /// OpenAI, Anthropic and Gemini).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lanes: Option<LaneSummary>,
    /// What the answers cost: the sum of the results lines' `cost_usd`, in dollars (absent
    /// when no answer's model has a price).
    #[serde(rename = "cost_usd", skip_serializing_if = "Option::is_none")]
    pub cost: Option<Cost>,
    /// The run stopped sending because a budget was spent: which, and until when.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_spent: Option<BudgetSpent>,
}

/// The items each lane answered ([`Summary::lanes`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct LaneSummary {
    /// Items answered live (the cache's hits included).
    pub live: u64,
    /// Items a provider's Batch API answered.
    pub provider_batch: u64,
    /// Input tokens of the Batch API's answers.
    pub provider_batch_input_tokens: u64,
    /// Output tokens of the Batch API's answers.
    pub provider_batch_output_tokens: u64,
    /// What the Batch API's answers cost, at the batch prices (absent without prices).
    #[serde(
        rename = "provider_batch_cost_usd",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_batch_cost: Option<Cost>,
}

impl LaneSummary {
    /// The lanes of `run`; `None` when no item went by a provider's batch.
    pub fn of(run: &RunReport) -> Option<Self> {
        (run.provider_batch > 0).then(|| LaneSummary {
            live: run.ok.saturating_sub(run.provider_batch),
            provider_batch: run.provider_batch,
            provider_batch_input_tokens: run.provider_batch_usage.input_tokens,
            provider_batch_output_tokens: run.provider_batch_usage.output_tokens,
            provider_batch_cost: run.provider_batch_cost,
        })
    }
}

/// What the response cache did for a run's answers ([`Summary::cache`]).
///
/// # Examples
///
/// ```
/// use llm_failover::batch::{RunReport, Summary};
/// use llm_failover::cache::Cache;
///
/// # use std::sync::Arc;
/// # use llm_failover::provider::openai::OpenAi;
/// # use llm_failover::{Client, ProviderId, ProviderSettings};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let local = OpenAi::new(ProviderId::new("local"), "http://127.0.0.1:9/v1".parse()?)
/// #     .with_chat_model("llama3.2");
/// # let settings = ProviderSettings::new();
/// let client = Client::builder()
///     .provider(Arc::new(local), settings)
///     .cache(Cache::memory())
///     .build()?;
/// let mut run = RunReport::default(); // as a run reported it:
/// (run.ok, run.cached, run.tokens_saved) = (100, 50, 7_500);
/// let summary = Summary::for_run(&client, &run, None).await;
/// let cache = summary.cache.expect("the client has a cache");
/// assert_eq!((cache.hits, cache.misses, cache.tokens_saved), (50, 50, 7_500));
/// assert_eq!(cache.hit_ratio(), Some(0.5));
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct CacheSummary {
    /// Items answered from the cache: nothing sent for them.
    pub hits: u64,
    /// Items answered by a provider (looked up, not found, then asked).
    pub misses: u64,
    /// Tokens (input and output) the hits' answers had used when first asked: what the run
    /// did not spend again.
    pub tokens_saved: u64,
}

impl CacheSummary {
    /// The cache's share of `run`'s answers.
    pub(crate) fn of(run: &RunReport) -> Self {
        let hits = run.cached.min(run.ok);
        CacheSummary {
            hits,
            misses: run.ok - hits,
            tokens_saved: run.tokens_saved,
        }
    }

    /// Hits over answers (`None` when there were none).
    pub fn hit_ratio(&self) -> Option<f64> {
        let answered = self.hits + self.misses;
        (answered > 0).then(|| self.hits as f64 / answered as f64)
    }
}

/// Items by outcome: the summary's `items` (the counts a run's report holds, in one place for
/// its lines and its JSON).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Items {
    /// Succeeded in this run.
    pub(crate) ok: u64,
    /// Failed in this run.
    pub(crate) failed: u64,
    /// Failed in this run, by kind (`invalid_input`, `rate_limited`, …).
    pub(crate) failed_by_kind: BTreeMap<String, u64>,
    /// Skipped: already done by an earlier run.
    pub(crate) skipped_ok: u64,
    /// Skipped: failed in an earlier run (rerun with retry-failed to send them again).
    pub(crate) skipped_failed: u64,
    /// In flight when the run was aborted: no result; a rerun sends them.
    pub(crate) not_done: u64,
    /// The run was stopped before the input ended.
    pub(crate) stopped: bool,
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
        s.unreadable_lines = report.compaction.unreadable;
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
            if let Some(model) = model
                && let Ok(Some(snap)) = client.limits(name, &model).await
            {
                rpm_now = snap.requests.map(|b| b.capacity);
                tpm_now = snap.tokens.map(|b| b.capacity);
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
            unreadable_lines: 0,
            cache: client.cache().map(|_| CacheSummary::of(run)),
            lanes: LaneSummary::of(run),
            cost: run.cost,
            budget_spent: run.budget_spent.clone(),
        }
    }
}

/// Widest a summary line may be, in characters: a terminal of 80 columns.
const WIDTH: usize = 80;

/// The widest provider name kept in the name column; a longer one gets a line of its own.
const NAME_COLUMN: usize = 18;

fn limit(configured: Option<u64>, now: Option<u64>) -> String {
    match (configured, now) {
        (Some(c), Some(n)) if c == n => format!("limit {c}"),
        (Some(c), Some(n)) => format!("limit {c}→{n}"),
        (None, Some(n)) => format!("limit {n} learned"),
        (Some(c), None) => format!("limit {c}"),
        (None, None) => "no limit known".to_owned(),
    }
}

/// Lays `fields` out on lines of at most `width` characters, separated by ` · `: the first
/// line starts with `first`, the next ones with `indent` spaces (a field too long for any line
/// is cut short with `…`).
fn wrap(first: &str, indent: usize, fields: &[String], width: usize) -> Vec<String> {
    const SEP: &str = " · ";
    let mut lines = Vec::new();
    let mut line = first.to_owned();
    let mut empty = true; // no field on `line` yet
    for field in fields {
        let len = |s: &str| s.chars().count();
        let room = if empty {
            width.saturating_sub(len(&line))
        } else {
            width.saturating_sub(len(&line) + len(SEP))
        };
        if !empty && len(field) > room {
            lines.push(std::mem::replace(&mut line, " ".repeat(indent)));
            empty = true;
        }
        if !empty {
            line.push_str(SEP);
        }
        let room = width.saturating_sub(len(&line));
        line.push_str(&shortened(field, room));
        empty = false;
    }
    lines.push(line);
    lines
}

/// `s` cut to `max` characters, the last one `…` when it was cut.
fn shortened(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    if max > 0 {
        out.push('…');
    }
    out
}

impl Summary {
    /// The lines of the human summary, each at most [`WIDTH`] characters.
    fn lines(&self) -> Vec<String> {
        let mut out = self.item_lines();
        let per_request = self.admission_wait.as_secs_f64() / self.requests.max(1) as f64;
        let totals = [
            format!("requests {}", self.requests),
            format!("429s received {}", self.rate_limited),
            format!("failovers {}", self.failovers),
            format!("breaker opens {}", self.breaker_opens),
            // A sum over items that wait at the same time: it can exceed the run's wall time,
            // so the line says what it is.
            format!(
                "waited for admission {:.1} s (summed over items)",
                self.admission_wait.as_secs_f64()
            ),
            format!("{per_request:.1} s per request sent"),
        ];
        out.extend(wrap("", 2, &totals, WIDTH));
        if let Some(c) = self.cost {
            out.push(format!("cost {c}"));
        }
        if let Some(c) = &self.cache {
            let fields = [
                format!("cache {} hits", c.hits),
                format!("{} misses", c.misses),
                format!("{} tokens saved", c.tokens_saved),
            ];
            out.extend(wrap("", 2, &fields, WIDTH));
        }
        if let Some(l) = &self.lanes {
            let fields = [
                format!("lanes: live {}", l.live),
                format!(
                    "provider batch {} ({} tokens in, {} out, at the batch price{})",
                    l.provider_batch,
                    l.provider_batch_input_tokens,
                    l.provider_batch_output_tokens,
                    l.provider_batch_cost
                        .map(|c| format!(": {c}"))
                        .unwrap_or_default()
                ),
            ];
            out.extend(wrap("", 2, &fields, WIDTH));
        }
        out.extend(self.provider_lines());
        if self.wall < Duration::from_secs(60) && self.requests > 0 {
            out.push(
                "(a run shorter than a minute can exceed a per-minute limit: buckets start full)"
                    .to_owned(),
            );
        }
        out
    }

    /// What became of the items: the head line, then what was skipped, left undone or
    /// dropped from the results file.
    fn item_lines(&self) -> Vec<String> {
        let i = &self.items;
        let mut head = vec![
            format!(
                "{} in {:.1} s",
                if i.stopped { "stopped" } else { "finished" },
                self.wall.as_secs_f64()
            ),
            format!("environment {}", self.environment),
            format!("{} ok", i.ok),
            format!("{} failed", i.failed),
        ];
        head.extend(i.failed_by_kind.iter().map(|(k, n)| format!("{k} {n}")));
        let mut out = wrap("", 2, &head, WIDTH);
        if i.skipped_ok + i.skipped_failed > 0 {
            let skipped = [
                format!("skipped {} done earlier", i.skipped_ok),
                format!(
                    "{} failed earlier (retry them with --retry-failed)",
                    i.skipped_failed
                ),
            ];
            out.extend(wrap("", 2, &skipped, WIDTH));
        }
        let mut note = |text: String| out.extend(wrap("", 2, &[text], WIDTH));
        if i.not_done > 0 {
            note(format!(
                "{} in flight when aborted: not done, a rerun sends them",
                i.not_done
            ));
        }
        if let Some(b) = &self.budget_spent {
            let back = b.until_unix_ms.saturating_sub(b.at_unix_ms) / 1_000;
            note(format!(
                "budget spent: {} item(s) not sent, not failed; run again when it starts \
                 again (in {back} s): {}",
                b.items, b.message
            ));
        }
        match self.unreadable_lines {
            0 => {}
            1 => note(
                "1 line of the results file was not a result line: dropped (see the warning)"
                    .to_owned(),
            ),
            n => note(format!(
                "{n} lines of the results file were not result lines: dropped (see the \
                 warnings)"
            )),
        }
        out
    }

    /// Each provider's counts and rates, its name in a column (a name too long for it on a
    /// line of its own).
    fn provider_lines(&self) -> Vec<String> {
        let names = self
            .providers
            .iter()
            .map(|p| p.provider.chars().count())
            .filter(|n| *n <= NAME_COLUMN)
            .max()
            .unwrap_or(0);
        let mut out = Vec::new();
        for p in &self.providers {
            let s = &p.stats;
            let fields = [
                format!("sent {}", s.sent),
                format!("ok {}", s.ok),
                format!("429 {}", s.rate_limited),
                format!("5xx {}", s.server_errors),
                format!("failovers {}", s.failovers),
                format!("waited {:.1} s", s.admission_wait.as_secs_f64()),
                format!(
                    "{:.0} req/min ({})",
                    p.requests_per_minute,
                    limit(p.rpm_configured, p.rpm_now)
                ),
                format!(
                    "{:.0} tokens/min ({})",
                    p.tokens_per_minute,
                    limit(p.tpm_configured, p.tpm_now)
                ),
            ];
            let name = p.provider.as_str();
            let first = if name.chars().count() <= NAME_COLUMN {
                format!("{name:<names$}  ")
            } else {
                out.push(shortened(name, WIDTH));
                " ".repeat(names + 2)
            };
            out.extend(wrap(&first, names + 2, &fields, WIDTH));
        }
        out
    }
}

impl fmt::Display for Summary {
    /// The human summary: lines of at most 80 characters.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for line in self.lines() {
            writeln!(f, "{line}")?;
        }
        Ok(())
    }
}

/// Counts `n` items as answered before this run (the batch on the queue's summary).
pub(crate) fn set_skipped_ok(summary: &mut Summary, n: u64) {
    summary.items.skipped_ok = n;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider(name: &str, n: u64) -> ProviderSummary {
        ProviderSummary {
            provider: name.to_owned(),
            stats: ProviderStats {
                sent: n,
                ok: n - 1,
                rate_limited: n / 3,
                server_errors: n / 7,
                failovers: n / 11,
                admission_wait: Duration::from_secs(n / 2),
                ..ProviderStats::default()
            },
            requests_per_minute: n as f64 * 1.5,
            tokens_per_minute: n as f64 * 150.0,
            rpm_configured: Some(n),
            tpm_configured: Some(n * 100),
            rpm_now: Some(n / 2),
            tpm_now: None,
        }
    }

    fn summary(environment: &str, n: u64, providers: Vec<ProviderSummary>) -> Summary {
        Summary {
            environment: environment.to_owned(),
            items: Items {
                ok: n,
                failed: n,
                failed_by_kind: ["rate_limited", "invalid_input", "context_length_exceeded"]
                    .iter()
                    .map(|k| (k.to_string(), n / 3))
                    .collect(),
                skipped_ok: n,
                skipped_failed: n,
                not_done: n,
                stopped: true,
            },
            requests: n,
            rate_limited: n,
            failovers: n,
            breaker_opens: n,
            admission_wait: Duration::from_secs(n),
            wall: Duration::from_secs(30),
            providers,
            unreadable_lines: n,
            cache: Some(CacheSummary {
                hits: n,
                misses: n,
                tokens_saved: n * 150,
            }),
            lanes: Some(LaneSummary {
                live: n,
                provider_batch: n,
                provider_batch_input_tokens: n * 1_000,
                provider_batch_output_tokens: n * 1_000,
                provider_batch_cost: None,
            }),
            cost: None,
            budget_spent: Some(BudgetSpent {
                message: "the budget of environment `production-eu-west` for the day \
                          2026-12-03 ($20.000000000) cannot cover this request's estimated \
                          $0.001036000"
                    .to_owned(),
                at_unix_ms: 1_796_338_800_000,
                until_unix_ms: 1_796_342_400_000,
                items: n,
            }),
        }
    }

    #[test]
    fn every_line_fits_80_columns_with_long_names_and_large_counts() {
        let big = 98_765_432_101_234;
        let cases = [
            summary(
                "demo",
                213,
                vec![provider("demo-openai", 154), provider("demo-anthropic", 59)],
            ),
            summary(
                "production-eu-west-1-with-a-very-long-environment-name-indeed-that-goes-on",
                big,
                vec![
                    provider("openrouter-meta-llama-3.1-405b-instruct-fallback-eu", big),
                    provider("azure-openai-swedencentral", big),
                    provider("x".repeat(200).as_str(), big),
                    provider("groq", big),
                ],
            ),
        ];
        for s in cases {
            let text = s.to_string();
            for line in text.lines() {
                assert!(
                    line.chars().count() <= 80,
                    "{} columns: {line}\n{text}",
                    line.chars().count()
                );
            }
            // Nothing is lost: every count and every provider that fits is there.
            assert!(text.contains(&format!("requests {}", s.requests)), "{text}");
            if let Some(c) = &s.cache {
                assert!(text.contains(&format!("cache {} hits", c.hits)), "{text}");
            }
            assert!(
                text.contains(&format!("{} lines of the results file", s.unreadable_lines)),
                "{text}"
            );
            for p in &s.providers {
                assert!(text.contains(&format!("sent {}", p.stats.sent)), "{text}");
                if p.provider.len() <= WIDTH {
                    assert!(text.contains(&p.provider), "{text}");
                }
            }
        }
    }

    #[test]
    fn the_admission_wait_is_labelled_as_a_sum_over_items() {
        let mut s = summary("demo", 213, vec![provider("demo-openai", 213)]);
        // 213 requests of 16 items at a time in a 223 s run: 3181.1 s of waiting in all.
        s.admission_wait = Duration::from_millis(3_181_100);
        s.wall = Duration::from_secs(223);
        let text = s.to_string();
        let line = text
            .lines()
            .find(|l| l.contains("waited for admission"))
            .unwrap_or_else(|| panic!("no admission line\n{text}"));
        assert_eq!(
            line,
            "  waited for admission 3181.1 s (summed over items) · 14.9 s per request sent"
        );
    }

    #[test]
    fn the_cache_line_shows_the_runs_hits_misses_and_tokens_saved_and_only_with_a_cache() {
        let mut run = RunReport {
            ok: 100,
            cached: 50,
            tokens_saved: 7_500,
            ..RunReport::default()
        };
        let mut s = summary("demo", 100, vec![provider("demo-openai", 50)]);
        s.cache = Some(CacheSummary::of(&run));
        let text = s.to_string();
        assert!(
            text.contains("cache 50 hits · 50 misses · 7500 tokens saved"),
            "{text}"
        );
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(
            json["cache"],
            serde_json::json!({"hits": 50, "misses": 50, "tokens_saved": 7500})
        );

        s.cache = None;
        assert!(!s.to_string().contains("cache"), "{s}");
        assert_eq!(serde_json::to_value(&s).unwrap().get("cache"), None);

        // A queued run's handler may count an answer whose completion was then refused: the
        // hits never exceed the items answered.
        run.cached = 120;
        let c = CacheSummary::of(&run);
        assert_eq!((c.hits, c.misses), (100, 0));
        assert_eq!(CacheSummary::default().hit_ratio(), None);
    }

    #[test]
    fn fields_wrap_onto_indented_lines_and_an_overlong_field_is_cut() {
        let f = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(wrap("p  ", 3, &f(&["a", "b"]), 80), ["p  a · b"]);
        assert_eq!(
            wrap("p  ", 3, &f(&["aaaa", "bbbb"]), 10),
            ["p  aaaa", "   bbbb"]
        );
        assert_eq!(wrap("", 2, &f(&["abcdefghijkl"]), 8), ["abcdefg…"]);
        assert_eq!(
            wrap("", 2, &f(&["ab", "abcdefghijkl"]), 8),
            ["ab", "  abcde…"]
        );
        assert_eq!(wrap("", 2, &f(&[]), 8), [""]);
    }
}
