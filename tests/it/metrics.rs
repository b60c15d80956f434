//! OpenTelemetry metrics from the event seam (feature `otel`), read back through the
//! OpenTelemetry SDK's own in-memory exporter: the names, units and bucket boundaries of the
//! GenAI conventions (v1.41.0, `docs/gen-ai/gen-ai-metrics.md`), counts that match what the
//! servers saw, and no key or prompt in any attribute.

use std::sync::Arc;

use crate::support::*;
use llm_failover::ChatRequest;
use llm_failover::observe::otel::{GenAiMetrics, names};
use llm_failover_emulator::scripted::ScriptedServer;
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};

/// A marker in every prompt: it must never reach a metric.
const PROMPT: &str = "MARKER-PROMPT-5e1d";

/// One data point as read back: the metric, its unit, the attributes (sorted), and the value
/// (a histogram's: count, sum, bounds).
#[derive(Debug, Clone, PartialEq)]
struct Point {
    metric: String,
    unit: String,
    attrs: Vec<(String, String)>,
    value: Value,
}

#[derive(Debug, Clone, PartialEq)]
enum Value {
    Number(f64),
    Histogram {
        count: u64,
        sum: f64,
        bounds: Vec<f64>,
    },
}

/// The OpenTelemetry SDK's meter provider, with a periodic reader into an in-memory exporter
/// (the tests read it back with [`points`]).
fn sdk() -> (SdkMeterProvider, InMemoryMetricExporter) {
    let exporter = InMemoryMetricExporter::default();
    let provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    (provider, exporter)
}

/// Everything the provider's reader exported, flattened.
fn points(provider: &SdkMeterProvider, exporter: &InMemoryMetricExporter) -> Vec<Point> {
    provider.force_flush().expect("the SDK flushes");
    let exported = exporter.get_finished_metrics().expect("metrics");
    let mut out = Vec::new();
    let last = exported.last().expect("one export at least");
    for scope in last.scope_metrics() {
        for m in scope.metrics() {
            let attrs = |kvs: &mut dyn Iterator<Item = &opentelemetry::KeyValue>| {
                let mut v: Vec<(String, String)> = kvs
                    .map(|kv| (kv.key.to_string(), kv.value.to_string()))
                    .collect();
                v.sort();
                v
            };
            let mut push = |a: Vec<(String, String)>, value: Value| {
                out.push(Point {
                    metric: m.name().to_owned(),
                    unit: m.unit().to_owned(),
                    attrs: a,
                    value,
                });
            };
            match m.data() {
                AggregatedMetrics::F64(MetricData::Histogram(h)) => {
                    for p in h.data_points() {
                        let value = Value::Histogram {
                            count: p.count(),
                            sum: p.sum(),
                            bounds: p.bounds().collect(),
                        };
                        push(attrs(&mut p.attributes()), value);
                    }
                }
                AggregatedMetrics::U64(MetricData::Histogram(h)) => {
                    for p in h.data_points() {
                        let value = Value::Histogram {
                            count: p.count(),
                            sum: p.sum() as f64,
                            bounds: p.bounds().collect(),
                        };
                        push(attrs(&mut p.attributes()), value);
                    }
                }
                AggregatedMetrics::F64(MetricData::Sum(s)) => {
                    for p in s.data_points() {
                        push(attrs(&mut p.attributes()), Value::Number(p.value()));
                    }
                }
                AggregatedMetrics::U64(MetricData::Sum(s)) => {
                    for p in s.data_points() {
                        push(attrs(&mut p.attributes()), Value::Number(p.value() as f64));
                    }
                }
                AggregatedMetrics::U64(MetricData::Gauge(g)) => {
                    for p in g.data_points() {
                        push(attrs(&mut p.attributes()), Value::Number(p.value() as f64));
                    }
                }
                other => panic!(
                    "{}: an aggregation this test does not read: {other:?}",
                    m.name()
                ),
            }
        }
    }
    out
}

fn attr<'a>(p: &'a Point, key: &str) -> Option<&'a str> {
    p.attrs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

fn histogram(p: &Point) -> (u64, f64, &[f64]) {
    match &p.value {
        Value::Histogram { count, sum, bounds } => (*count, *sum, bounds),
        Value::Number(n) => panic!("{}: a number ({n}), not a histogram", p.metric),
    }
}

fn number(p: &Point) -> f64 {
    match &p.value {
        Value::Number(n) => *n,
        Value::Histogram { .. } => panic!("{}: a histogram, not a number", p.metric),
    }
}

/// What answers cost, where their model has a price: `llm_failover.cost.usd`, in dollars,
/// on the provider's series — the sum of the answers' own costs (each answer reports 10
/// input and 5 output tokens: at $0.15 / $0.60 per million, 4,500 nano-dollars); an unpriced
/// provider's answers record none.
#[tokio::test]
async fn the_cost_of_priced_answers_is_counted_in_dollars() {
    let (provider, exporter) = sdk();
    let meter = provider.meter("llm-failover-test");
    let (a, b) = (ScriptedServer::start().await, ScriptedServer::start().await);
    for _ in 0..3 {
        a.push(CHAT, ok("priced"));
    }
    b.push(CHAT, ok("free"));
    let clock = llm_failover::clock::ManualClock::new();
    let price = llm_failover::price::Price::per_million_tokens(0.15, 0.60);
    let client = llm_failover::Client::builder()
        .clock(Arc::new(clock))
        .provider(
            openai("a", &a),
            llm_failover::ProviderSettings::new()
                .credential(llm_failover::Credential::new(SENTINEL))
                .price("gpt-4o-mini", price),
        )
        .provider(
            openai("b", &b),
            llm_failover::ProviderSettings::new()
                .credential(llm_failover::Credential::new(SENTINEL)),
        )
        .observer(Arc::new(GenAiMetrics::new(&meter)))
        .build()
        .unwrap();
    let mut nano = 0;
    for _ in 0..3 {
        let answer = client.chat(ChatRequest::from_prompt(PROMPT)).await.unwrap();
        nano += answer.spend.unwrap().actual.unwrap().nano_usd();
    }
    assert_eq!(nano, 3 * (10 * 150 + 5 * 600));
    let opts = llm_failover::RequestOptions::new().provider("b");
    let unpriced = client
        .chat_with(ChatRequest::from_prompt(PROMPT), &opts)
        .await
        .unwrap();
    assert_eq!(unpriced.spend, None);
    let points = points(&provider, &exporter);
    let cost: Vec<&Point> = points.iter().filter(|p| p.metric == names::COST).collect();
    assert_eq!(
        cost.len(),
        1,
        "one series, the priced provider's: {cost:#?}"
    );
    assert_eq!(cost[0].unit, "{USD}");
    assert_eq!(attr(cost[0], names::PROVIDER), Some("a"), "{:?}", cost[0]);
    assert!(
        (number(cost[0]) - nano as f64 / 1e9).abs() < 1e-12,
        "{} dollars, the answers' {nano} nano-dollars",
        number(cost[0])
    );
}

/// A 429 at `a` (its headers stating 0 of 100 left), a failover to `b`, and two answers from
/// `b` (stating 41, then 40 left): every series the issue names, as the conventions name it.
#[tokio::test]
async fn a_429_a_failover_and_two_answers_are_recorded_as_the_conventions_name_them() {
    let (provider, exporter) = sdk();
    let meter = provider.meter("llm-failover-test");
    let (a, b) = (ScriptedServer::start().await, ScriptedServer::start().await);
    a.push(
        CHAT,
        rate_limited()
            .header("retry-after", "30")
            .header("x-ratelimit-limit-requests", "100")
            .header("x-ratelimit-remaining-requests", "0"),
    );
    for left in ["41", "40"] {
        b.push(
            CHAT,
            ok("fine")
                .header("x-ratelimit-limit-requests", "50")
                .header("x-ratelimit-remaining-requests", left),
        );
    }
    let (builder, _clock) = builder_with(&[("a", &a), ("groq", &b)], policy(), Default::default());
    let client = builder
        .observer(Arc::new(GenAiMetrics::new(&meter)))
        .build()
        .unwrap();
    for _ in 0..2 {
        let req = ChatRequest::from_prompt(PROMPT).max_tokens(16);
        assert_eq!(client.chat(req).await.unwrap().provider.as_str(), "groq");
    }
    let points = points(&provider, &exporter);
    let of = |name: &str| -> Vec<&Point> { points.iter().filter(|p| p.metric == name).collect() };

    // Duration: one point per (provider, outcome), counts equal to what each server saw.
    let duration = of(names::OPERATION_DURATION);
    let count_at = |provider: &str| -> u64 {
        duration
            .iter()
            .filter(|p| attr(p, names::PROVIDER_NAME) == Some(provider))
            .map(|p| histogram(p).0)
            .sum()
    };
    assert_eq!(
        (count_at("openai"), count_at("groq")),
        (a.count(CHAT) as u64, b.count(CHAT) as u64),
        "{duration:#?}"
    );
    for p in &duration {
        assert_eq!(p.unit, "s");
        assert_eq!(histogram(p).2, names::DURATION_BUCKETS);
        assert_eq!(attr(p, names::OPERATION_NAME), Some("chat"));
        assert_eq!(attr(p, names::REQUEST_MODEL), Some("gpt-4o-mini"));
        // Where the provider is reached: its base URL's host and port.
        let server = if attr(p, names::PROVIDER_NAME) == Some("openai") {
            &a
        } else {
            &b
        };
        let url: url::Url = server.url().parse().unwrap();
        let port = url.port().unwrap().to_string();
        assert_eq!(
            (attr(p, names::SERVER_ADDRESS), attr(p, names::SERVER_PORT)),
            (url.host_str(), Some(port.as_str())),
            "{p:?}"
        );
        let failed = attr(p, names::PROVIDER_NAME) == Some("openai");
        assert_eq!(
            attr(p, names::ERROR_TYPE),
            failed.then_some("rate_limited"),
            "{p:?}"
        );
        assert_eq!(
            attr(p, names::RESPONSE_MODEL),
            (!failed).then_some("gpt-4o-mini"),
            "{p:?}"
        );
    }

    // Tokens: the usage each answer reported (10 in, 5 out), per type, billable.
    let tokens = of(names::TOKEN_USAGE);
    let sum_of = |kind: &str| -> (u64, f64) {
        let p = tokens
            .iter()
            .find(|p| attr(p, names::TOKEN_TYPE) == Some(kind))
            .unwrap_or_else(|| panic!("no {kind} tokens: {tokens:#?}"));
        assert_eq!(p.unit, "{token}");
        assert_eq!(histogram(p).2, names::TOKEN_BUCKETS);
        let (count, sum, _) = histogram(p);
        (count, sum)
    };
    assert_eq!((sum_of("input"), sum_of("output")), ((2, 20.0), (2, 10.0)));

    // Ours: the 429, the failover, the breaker it opened, what each provider stated is left.
    let one = |name: &str| -> f64 { of(name).iter().map(|p| number(p)).sum() };
    assert_eq!(one(names::RATE_LIMITED), 1.0);
    assert_eq!(one(names::FAILOVERS), 1.0);
    assert_eq!(one(names::BREAKER_OPENINGS), 1.0);
    let failover = of(names::FAILOVERS)[0];
    assert_eq!(
        (
            attr(failover, names::FAILOVER_FROM),
            attr(failover, names::PROVIDER)
        ),
        (Some("a"), Some("groq"))
    );
    let remaining = |provider: &str| {
        of(names::REMAINING)
            .into_iter()
            .find(|p| {
                attr(p, names::PROVIDER) == Some(provider)
                    && attr(p, names::LIMIT_UNIT) == Some("requests")
            })
            .map(number)
    };
    assert_eq!((remaining("a"), remaining("groq")), (Some(0.0), Some(40.0)));

    // Nothing secret or personal in any of it.
    let all = format!("{points:?}");
    assert!(!all.contains(SENTINEL), "a key in the metrics");
    assert!(!all.contains(PROMPT), "a prompt in the metrics");
}

/// A stream's chunks: one time to the first, and one time per output chunk for each chunk
/// after it (the spec's `time_per_output_chunk`), each the clock's time since the one before.
#[tokio::test]
async fn a_stream_records_its_first_chunk_and_the_time_per_output_chunk() {
    use futures_util::StreamExt;
    let (provider, exporter) = sdk();
    let a = ScriptedServer::start().await;
    let delta = |t: &str| {
        format!(
            "data: {{\"id\":\"c1\",\"model\":\"gpt-4o-mini\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{t}\"}},\"finish_reason\":null}}]}}\n\n"
        )
    };
    let mut events: Vec<String> = ["Hel", "lo", " the", "re"].map(delta).into();
    events.push("data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n".into());
    events.push("data: [DONE]\n\n".into());
    a.push(CHAT, llm_failover_emulator::scripted::Reply::sse(events));
    let (builder, clock) = builder_with(&[("a", &a)], policy(), Default::default());
    let client = builder
        .observer(Arc::new(GenAiMetrics::new(&provider.meter("t"))))
        .build()
        .unwrap();
    let mut stream = client
        .chat_stream(ChatRequest::from_prompt(PROMPT).max_tokens(16))
        .await
        .unwrap();
    let gap = std::time::Duration::from_millis(40);
    let mut chunks = 0u64;
    while let Some(chunk) = stream.next().await {
        chunk.unwrap();
        chunks += 1;
        clock.advance(gap);
    }
    drop(stream);
    let points = points(&provider, &exporter);
    let of = |name: &str| -> Vec<&Point> { points.iter().filter(|p| p.metric == name).collect() };
    let first = of(names::TIME_TO_FIRST_CHUNK);
    assert_eq!(first.len(), 1, "{points:#?}");
    assert_eq!(histogram(first[0]).0, 1);
    let per = of(names::TIME_PER_OUTPUT_CHUNK);
    assert_eq!(per.len(), 1, "{points:#?}");
    let (count, sum, bounds) = histogram(per[0]);
    assert_eq!(bounds, names::DURATION_BUCKETS);
    assert_eq!(per[0].unit, "s");
    assert_eq!(attr(per[0], names::OPERATION_NAME), Some("chat"));
    // Every chunk but the first came from the provider after the stream was handed out (the
    // router reads up to the first content before it hands it out).
    assert!(chunks >= 3, "{chunks} chunks");
    assert_eq!(count, chunks - 1, "one per chunk after the first");
    assert!(
        (sum - gap.as_secs_f64() * count as f64).abs() < 1e-9,
        "{sum}"
    );
}

/// A breaker's state: `open` at its 429, `half_open` while its probe is out, `closed` when
/// the probe is answered — 1 for the state, 0 for the two others.
#[tokio::test]
async fn the_breaker_state_gauge_follows_open_half_open_and_closed() {
    let (provider, exporter) = sdk();
    let (a, b) = (ScriptedServer::start().await, ScriptedServer::start().await);
    a.push(CHAT, rate_limited().header("retry-after", "30"));
    a.push(CHAT, ok("back"));
    b.push(CHAT, ok("fine"));
    let (builder, clock) = builder_with(&[("a", &a), ("b", &b)], policy(), Default::default());
    let client = builder
        .observer(Arc::new(GenAiMetrics::new(&provider.meter("t"))))
        .build()
        .unwrap();
    let state = |points: &[Point]| -> Vec<(String, f64)> {
        let mut v: Vec<(String, f64)> = points
            .iter()
            .filter(|p| p.metric == names::BREAKER_STATUS && attr(p, names::PROVIDER) == Some("a"))
            .map(|p| (attr(p, names::BREAKER_STATE).unwrap().to_owned(), number(p)))
            .collect();
        v.sort_by(|x, y| x.0.cmp(&y.0));
        v
    };
    let req = || ChatRequest::from_prompt(PROMPT).max_tokens(16);
    assert_eq!(client.chat(req()).await.unwrap().provider.as_str(), "b");
    let open = [
        ("closed".into(), 0.0),
        ("half_open".into(), 0.0),
        ("open".into(), 1.0),
    ];
    assert_eq!(state(&points(&provider, &exporter)), open);
    clock.advance(std::time::Duration::from_secs(31));
    assert_eq!(client.chat(req()).await.unwrap().provider.as_str(), "a");
    let closed = [
        ("closed".into(), 1.0),
        ("half_open".into(), 0.0),
        ("open".into(), 0.0),
    ];
    assert_eq!(state(&points(&provider, &exporter)), closed);
}

/// The attempt's span carries the GenAI span attributes (what `tracing-opentelemetry` turns
/// into span attributes as they are): the operation, the models, the stream flag and the
/// usage — and neither the prompt nor the key.
///
/// Read through a process-wide subscriber that keeps only the closing of `attempt` spans: a
/// thread's own (`set_default`) is not enough here, as tracing caches whether a span is
/// wanted per callsite, and a test on another thread without a subscriber can settle that for
/// every thread first. The other tests are not changed by it: theirs wins on their thread.
#[tokio::test]
async fn the_attempt_span_carries_the_gen_ai_attributes_and_no_prompt() {
    let capture = spans();
    let a = ScriptedServer::start().await;
    a.push(CHAT, ok("fine"));
    let h = client(&[("a", &a)], policy());
    let req = ChatRequest::from_prompt(PROMPT).max_tokens(16);
    h.client.chat(req).await.unwrap();
    drop(h);
    // Every test's attempts are here: this one's is the line with all its fields.
    let text = capture.text();
    let fields = [
        "gen_ai.operation.name=\"chat\"",
        "gen_ai.request.model=gpt-4o-mini",
        "gen_ai.request.stream=false",
        "gen_ai.response.model=\"gpt-4o-mini\"",
        "gen_ai.usage.input_tokens=10",
        "gen_ai.usage.output_tokens=5",
    ];
    assert!(
        text.lines()
            .any(|l| l.contains("attempt{") && fields.iter().all(|f| l.contains(f))),
        "no attempt span closed with {fields:?}:\n{text}"
    );
    assert!(!text.contains(PROMPT), "a prompt in the trace");
    assert!(!text.contains(SENTINEL), "a key in the trace");
}

/// The process-wide capture of `attempt` spans closing (made once per test binary).
fn spans() -> Capture {
    static CAPTURE: std::sync::OnceLock<Capture> = std::sync::OnceLock::new();
    CAPTURE
        .get_or_init(|| {
            use tracing_subscriber::Layer as _;
            use tracing_subscriber::layer::SubscriberExt as _;
            let capture = Capture::default();
            let writer = capture.clone();
            let layer = tracing_subscriber::fmt::layer()
                .with_writer(move || writer.clone())
                .with_ansi(false)
                .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
                .with_filter(tracing_subscriber::filter::filter_fn(|m| {
                    m.is_span() && m.name() == "attempt"
                }));
            let subscriber = tracing_subscriber::registry().with(layer);
            tracing::subscriber::set_global_default(subscriber)
                .expect("no other test sets a global subscriber");
            capture
        })
        .clone()
}
