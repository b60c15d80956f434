//! `--metrics ADDR` and `OTEL_EXPORTER_OTLP_ENDPOINT`: the run's metrics in OpenTelemetry's
//! GenAI names (the SDK's [`GenAiMetrics`] and the queue wing's [`QueueMetrics`]), scraped by
//! Prometheus from `http://ADDR/metrics`, pushed over OTLP/HTTP, or both (feature `metrics`).
//!
//! # The exporters, and why these
//!
//! The SDK records on the `opentelemetry` API only; this command installs the pieces an
//! application would, all from the OpenTelemetry project's own Rust repository, the versions
//! that go with the API the SDK uses (0.33):
//!
//! - `opentelemetry_sdk`: the meter provider that aggregates what is recorded.
//! - `opentelemetry-prometheus`, on the Prometheus project's `prometheus` crate for the text
//!   exposition format: it renders the OpenTelemetry names as OpenTelemetry's Prometheus
//!   compatibility specification says (`gen_ai.client.operation.duration` with unit `s` is
//!   `gen_ai_client_operation_duration_seconds`, a counter gets `_total`, a unit in braces is
//!   dropped), so a dashboard written against another OpenTelemetry-instrumented client reads
//!   ours. A hand-made bridge to `prometheus-client` or `metrics-exporter-prometheus` would
//!   have to re-derive those rules; this crate is their reference implementation.
//! - `opentelemetry-otlp` (`http-proto`, metrics only): OTLP/HTTP with protobuf, the protocol
//!   every collector and Prometheus's own OTLP receiver take. Its HTTP client is the one the
//!   SDK already uses (reqwest, rustls) through `opentelemetry-http`'s trait, not a second
//!   HTTP stack; gRPC (tonic) is not built.
//!
//! The endpoint serves `GET /metrics` on the address given (`127.0.0.1:9464` keeps it on this
//! host). A batch ends before a scrape interval would; so that its last counts are not lost,
//! the command keeps serving after the run until Prometheus has scraped it once more, at most
//! `--metrics-linger-s` (60 s: Prometheus's default scrape interval). The OTLP push follows
//! the standard variables (`OTEL_EXPORTER_OTLP_ENDPOINT` or `…_METRICS_ENDPOINT`,
//! `…_HEADERS`, `…_TIMEOUT`, `OTEL_METRIC_EXPORT_INTERVAL`, `OTEL_SERVICE_NAME`) and sends
//! what is left when the run ends.
//!
//! No metric holds a prompt, an answer, a key or a job id: the SDK's attributes are providers,
//! models, accounts' names, outcomes and kinds of error.
//!
//! [`GenAiMetrics`]: llm_failover::observe::otel::GenAiMetrics
//! [`QueueMetrics`]: llm_failover_queue::QueueMetrics

use std::error::Error;
use std::net::SocketAddr;

/// `--metrics` and `--metrics-linger-s`, which `batch` and `transcribe` share.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct MetricsArgs {
    /// Serve the run's metrics for Prometheus at http://ADDR/metrics (e.g. 127.0.0.1:9464).
    /// OTEL_EXPORTER_OTLP_ENDPOINT (or …_METRICS_ENDPOINT) pushes them over OTLP/HTTP too.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// After the run, how long to keep serving --metrics until Prometheus has scraped the
    /// last counts, in seconds (it ends at the first scrape after the run).
    #[arg(long, default_value_t = 60, requires = "metrics")]
    metrics_linger_s: u64,
}

/// The OTLP endpoint variables, as the specification names them.
const OTLP_ENDPOINTS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// Whether an OTLP endpoint is set (and not empty).
fn otlp_wanted() -> bool {
    OTLP_ENDPOINTS
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
}

#[cfg(not(feature = "metrics"))]
pub(crate) use off::Metrics;
#[cfg(feature = "metrics")]
pub(crate) use on::Metrics;

#[cfg(not(feature = "metrics"))]
mod off {
    use super::*;

    /// Never made: this build has no exporter.
    #[derive(Debug, Clone)]
    pub(crate) enum Metrics {}

    impl Metrics {
        /// `None` when no metric is asked for; an error saying how to get them when one is.
        pub(crate) async fn start(args: &MetricsArgs) -> Result<Option<Metrics>, Box<dyn Error>> {
            if args.metrics.is_some() || otlp_wanted() {
                let what = if args.metrics.is_some() {
                    "--metrics"
                } else {
                    "OTEL_EXPORTER_OTLP_ENDPOINT"
                };
                return Err(format!(
                    "{what}: this llm-failover was built without its metrics; install it with \
                     `cargo install --path cli --features metrics`"
                )
                .into());
            }
            Ok(None)
        }

        pub(crate) fn observer(&self) -> std::sync::Arc<dyn llm_failover::observe::Observer> {
            match *self {}
        }

        pub(crate) fn record_queue(&self, _: &llm_failover_queue::QueueStats) {
            match *self {}
        }

        pub(crate) async fn finish(self) {
            match self {}
        }
    }
}

#[cfg(feature = "metrics")]
mod on {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use llm_failover::observe::Observer;
    use llm_failover::observe::otel::GenAiMetrics;
    use llm_failover_queue::{QueueMetrics, QueueStats};
    use opentelemetry::metrics::MeterProvider as _;
    use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
    use tokio::sync::Notify;

    use super::*;

    /// The meter provider, its instruments, and the endpoint when there is one.
    #[derive(Debug, Clone)]
    pub(crate) struct Metrics {
        provider: SdkMeterProvider,
        requests: Arc<GenAiMetrics>,
        queue: QueueMetrics,
        endpoint: Option<Arc<Endpoint>>,
        linger: Duration,
    }

    /// The `/metrics` endpoint: its address, and its scrapes: each takes a number as it starts
    /// reading the metrics, and `answered` is one more than the highest number answered.
    #[derive(Debug)]
    struct Endpoint {
        addr: SocketAddr,
        registry: prometheus::Registry,
        started: AtomicU64,
        answered: AtomicU64,
        scraped: Notify,
    }

    impl Metrics {
        /// The metrics `args` and the OTLP variables ask for; `None` when neither does.
        pub(crate) async fn start(args: &MetricsArgs) -> Result<Option<Metrics>, Box<dyn Error>> {
            let otlp = otlp_wanted();
            if args.metrics.is_none() && !otlp {
                return Ok(None);
            }
            let mut provider = SdkMeterProvider::builder().with_resource(resource());
            let mut endpoint = None;
            if let Some(addr) = args.metrics {
                let registry = prometheus::Registry::new();
                let exporter = opentelemetry_prometheus::exporter()
                    .with_registry(registry.clone())
                    .build()
                    .map_err(|e| format!("--metrics: {e}"))?;
                provider = provider.with_reader(exporter);
                endpoint = Some(Endpoint::serve(addr, registry).await?);
            }
            if otlp {
                provider = provider.with_reader(PeriodicReader::builder(otlp_exporter()?).build());
            }
            let provider = provider.build();
            let meter = provider.meter("llm-failover");
            if let Some(e) = &endpoint {
                eprintln!("metrics: http://{}/metrics", e.addr);
            }
            if otlp {
                eprintln!("metrics: pushed over OTLP/HTTP to {}", otlp_shown());
            }
            Ok(Some(Metrics {
                requests: Arc::new(GenAiMetrics::new(&meter)),
                queue: QueueMetrics::new(&meter),
                provider,
                endpoint,
                linger: Duration::from_secs(args.metrics_linger_s),
            }))
        }

        /// The observer the client is built with.
        pub(crate) fn observer(&self) -> Arc<dyn Observer> {
            self.requests.clone()
        }

        /// Records what the queue holds.
        pub(crate) fn record_queue(&self, stats: &QueueStats) {
            self.queue.record(stats);
        }

        /// After the run: waits for the endpoint's last scrape (at most the linger), then
        /// pushes what is left over OTLP and stops.
        pub(crate) async fn finish(self) {
            if let Some(e) = &self.endpoint {
                // A scrape that read the metrics before now may have missed the last counts:
                // wait for one numbered from now on.
                let first = e.started.load(Ordering::Acquire);
                eprintln!(
                    "metrics: waiting for a last scrape of http://{}/metrics (at most {} s)",
                    e.addr,
                    self.linger.as_secs()
                );
                let scraped = async {
                    loop {
                        let notified = e.scraped.notified();
                        if e.answered.load(Ordering::Acquire) > first {
                            break;
                        }
                        notified.await;
                    }
                };
                if tokio::time::timeout(self.linger, scraped).await.is_err() {
                    eprintln!("metrics: not scraped since the run ended; its last counts are lost");
                }
            }
            // Shutting down exports what the periodic reader holds: a blocking call (its
            // exporter's requests run on this runtime's other threads).
            let provider = self.provider;
            let shut = tokio::task::spawn_blocking(move || provider.shutdown()).await;
            if let Ok(Err(e)) = shut {
                eprintln!("metrics: the last OTLP export failed: {e}");
            }
        }
    }

    impl Endpoint {
        /// Binds `addr` and serves `GET /metrics` from `registry` until the process ends.
        async fn serve(
            addr: SocketAddr,
            registry: prometheus::Registry,
        ) -> Result<Arc<Endpoint>, Box<dyn Error>> {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| format!("--metrics {addr}: cannot listen there: {e}"))?;
            let endpoint = Arc::new(Endpoint {
                addr: listener.local_addr()?,
                registry,
                started: AtomicU64::new(0),
                answered: AtomicU64::new(0),
                scraped: Notify::new(),
            });
            let app = axum::Router::new()
                .route("/metrics", axum::routing::get(scrape))
                .with_state(endpoint.clone());
            tokio::spawn(async move {
                if let Err(e) = axum::serve(listener, app).await {
                    eprintln!("metrics: the endpoint stopped: {e}");
                }
            });
            Ok(endpoint)
        }
    }

    /// `GET /metrics`: the registry in Prometheus's text format.
    async fn scrape(
        axum::extract::State(e): axum::extract::State<Arc<Endpoint>>,
    ) -> axum::response::Response {
        use axum::response::IntoResponse;
        use prometheus::Encoder;
        let number = e.started.fetch_add(1, Ordering::AcqRel);
        let encoder = prometheus::TextEncoder::new();
        let mut body = Vec::new();
        let answer = match encoder.encode(&e.registry.gather(), &mut body) {
            Ok(()) => (
                [(axum::http::header::CONTENT_TYPE, encoder.format_type())],
                body,
            )
                .into_response(),
            Err(err) => (
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot encode the metrics: {err}\n"),
            )
                .into_response(),
        };
        e.answered.fetch_max(number + 1, Ordering::AcqRel);
        e.scraped.notify_waiters();
        answer
    }

    /// `service.name` `llm-failover` unless `OTEL_SERVICE_NAME` (or
    /// `OTEL_RESOURCE_ATTRIBUTES`) says otherwise.
    fn resource() -> opentelemetry_sdk::Resource {
        let named = std::env::var_os("OTEL_SERVICE_NAME").is_some()
            || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|a| a.contains("service.name"));
        let builder = opentelemetry_sdk::Resource::builder();
        if named {
            builder.build()
        } else {
            builder.with_service_name("llm-failover").build()
        }
    }

    /// The OTLP/HTTP exporter the standard variables describe, sending with [`Push`].
    fn otlp_exporter() -> Result<opentelemetry_otlp::MetricExporter, Box<dyn Error>> {
        use opentelemetry_otlp::WithHttpConfig as _;
        if let Ok(protocol) = std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL")
            && !protocol.is_empty()
            && protocol != "http/protobuf"
        {
            return Err(format!(
                "OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: this command pushes OTLP over HTTP \
                 with protobuf only (http/protobuf)"
            )
            .into());
        }
        let push = Push {
            client: reqwest::Client::builder()
                .build()
                .map_err(|e| format!("OTLP: cannot make an HTTP client: {e}"))?,
            runtime: tokio::runtime::Handle::current(),
        };
        opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_http_client(push)
            .build()
            .map_err(|e| format!("{}: {e}", OTLP_ENDPOINTS[1]).into())
    }

    /// The endpoint as the variables give it, for the log (its userinfo and query, where a
    /// token could be, left out).
    fn otlp_shown() -> String {
        let raw = OTLP_ENDPOINTS
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
            .unwrap_or_default();
        match reqwest::Url::parse(&raw) {
            Ok(url) => format!(
                "{}://{}{}",
                url.scheme(),
                url.host_str().unwrap_or(""),
                url.port().map(|p| format!(":{p}")).unwrap_or_default()
            ),
            Err(_) => "the endpoint set (not a URL?)".to_owned(),
        }
    }

    /// The OTLP exporter's HTTP client: the SDK's (reqwest, rustls), its requests run on the
    /// command's runtime (the periodic reader exports from a thread of its own).
    #[derive(Debug)]
    struct Push {
        client: reqwest::Client,
        runtime: tokio::runtime::Handle,
    }

    #[async_trait::async_trait]
    impl opentelemetry_http::HttpClient for Push {
        async fn send_bytes(
            &self,
            request: http::Request<bytes::Bytes>,
        ) -> Result<http::Response<bytes::Bytes>, opentelemetry_http::HttpError> {
            let client = self.client.clone();
            let request = reqwest::Request::try_from(request)?;
            self.runtime
                .spawn(async move {
                    let answer = client.execute(request).await?;
                    let mut response = http::Response::builder().status(answer.status());
                    if let Some(headers) = response.headers_mut() {
                        *headers = answer.headers().clone();
                    }
                    let body = answer.bytes().await?;
                    Ok(response.body(body)?)
                })
                .await?
        }
    }
}
