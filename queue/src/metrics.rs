//! The queue's gauges on an OpenTelemetry meter (feature `otel`).

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Gauge, Meter};

use llm_failover_core::observe::otel::names;

use crate::job::QueueStats;

/// A queue's depth as gauges: `llm_failover.queue.jobs` by `llm_failover.job.state`
/// (`ready`, `running`, `done`, `dead`, `review`) and `llm_failover.queue.oldest_eligible_age`
/// in seconds (0 when no job is eligible). The job settlements a worker makes are counted by
/// the client's [`GenAiMetrics`](llm_failover_core::observe::otel::GenAiMetrics) from the
/// worker's events; these are what the queue holds, recorded from [`Queue::stats`] whenever
/// the application reads them (the `llm-failover` command: every progress tick).
///
/// [`Queue::stats`]: crate::Queue::stats
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
/// use llm_failover_queue::{NewJob, Queue, QueueMetrics};
///
/// let metrics = QueueMetrics::new(&opentelemetry::global::meter("llm-failover"));
/// let queue = Queue::sqlite_in_memory()?;
/// queue.enqueue(NewJob::new("a", "chat", "{}"), 0).await?;
/// metrics.record(&queue.stats(1_000).await?);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct QueueMetrics {
    jobs: Gauge<u64>,
    oldest: Gauge<f64>,
}

impl QueueMetrics {
    /// The gauges, made on `meter`.
    pub fn new(meter: &Meter) -> Self {
        QueueMetrics {
            jobs: meter
                .u64_gauge(names::QUEUE_JOBS)
                .with_unit("{job}")
                .with_description("Jobs in the queue, by state.")
                .build(),
            oldest: meter
                .f64_gauge(names::QUEUE_OLDEST_ELIGIBLE_AGE)
                .with_unit("s")
                .with_description(
                    "How long the oldest eligible ready job has waited (0 when none is).",
                )
                .build(),
        }
    }

    /// Records `stats`.
    pub fn record(&self, stats: &QueueStats) {
        for (state, n) in [
            ("ready", stats.ready),
            ("running", stats.running),
            ("done", stats.done),
            ("dead", stats.dead),
            ("review", stats.review),
        ] {
            self.jobs
                .record(n, &[KeyValue::new(names::JOB_STATE, state)]);
        }
        let age = stats.oldest_eligible_age.unwrap_or_default();
        self.oldest.record(age.as_secs_f64(), &[]);
    }
}
