//! Budgets (issue 31): money is one more bucket. A request's estimated cost is reserved
//! before it is sent, in every budget it falls under, and settled with its answer's cost;
//! a provider's spent budget fails over, an environment's or a tenant's ends the request at
//! once with `BudgetExhausted` until the window's reset. One process, the in-memory store,
//! the emulator on loopback and a manual clock (the calendar is the clock's wall time).
//! The many-process race through Redis is in `budget_shared`.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use llm_failover::admission::Tenant;
use llm_failover::batch::Stop;
use llm_failover::budget::Budget;
use llm_failover::clock::{Clock, ManualClock};
use llm_failover::price::{Cost, Price};
use llm_failover::provider::openai::OpenAi;
use llm_failover::ratelimit::SharedSettings;
use llm_failover::{
    ChatRequest, Client, ClientBuilder, Credential, ErrorKind, ProviderId, ProviderSettings,
    RequestOptions,
};
use llm_failover_emulator::{Emulator, Fault, TimeSource};
use llm_failover_queue::{Ended, Queue, QueuedJob, QueuedReport};

use crate::support::examples::TempDir;

const MODEL: &str = "gpt-4o-mini";
/// $1 per million tokens, in and out: a token costs 1,000 nano-dollars.
const PER_TOKEN: u64 = 1_000;
/// 2026-12-03T23:00:00Z: an hour before the day's budget starts again (UTC).
const LATE_EVENING: u64 = 1_796_338_800;

fn price() -> Price {
    Price::per_million_tokens(1.0, 1.0)
}

fn clock() -> ManualClock {
    ManualClock::with_wall(SystemTime::UNIX_EPOCH + Duration::from_secs(LATE_EVENING))
}

async fn emulator(clock: &ManualClock, providers: &[&str]) -> Emulator {
    let c = clock.clone();
    let mut b = Emulator::builder().time_source(TimeSource::new(move || (c.now(), c.wall())));
    for p in providers {
        b = b.openai(p);
    }
    b.start().await.unwrap()
}

fn provider(emu: &Emulator, name: &str) -> (Arc<OpenAi>, ProviderSettings) {
    let adapter = OpenAi::new(ProviderId::new(name), emu.base_url(name).parse().unwrap())
        .with_chat_model(MODEL);
    let settings = ProviderSettings::new()
        .credential(Credential::new(emu.key(name)))
        .price(MODEL, price());
    (Arc::new(adapter), settings)
}

fn builder(clock: &ManualClock) -> ClientBuilder {
    Client::builder().clock(Arc::new(clock.clone()))
}

/// A short prompt that reserves `max_tokens` of output: its estimate is far above what the
/// emulator answers (8 to 47 words).
fn ask(n: usize, max_tokens: u32) -> ChatRequest {
    ChatRequest::from_prompt(format!("Question {n:04}: name a colour.")).max_tokens(max_tokens)
}

/// Requests whose estimate (1,000 tokens of `max_tokens`) is over ten times their cost give the
/// difference back: a budget of three estimates admits as many requests as it really pays
/// for — their costs sum to at most the budget, and one more estimate would not have fitted.
/// The refused request is not sent and says when the budget starts again (midnight UTC); at
/// midnight it does.
#[tokio::test]
async fn a_budget_admits_as_many_requests_as_it_really_pays_for() {
    let clock = clock();
    let emu = emulator(&clock, &["p"]).await;
    let (adapter, settings) = provider(&emu, "p");
    let cap = Cost::from_nano_usd(3_200_000); // $0.0032: three estimates of ~1,010 tokens
    let client = builder(&clock)
        .provider(adapter, settings)
        .budget(Budget::usd_per_day(cap.usd()))
        .build()
        .unwrap();

    let mut spent = 0;
    let mut answered = 0;
    // Every prompt is as long as the others: every estimate is the same.
    let mut estimate = 0;
    let refused = loop {
        let req = ask(answered, 1_000);
        match client.chat(req).await {
            Ok(r) => {
                let spend = r.spend.expect("priced");
                let (estimated, actual) = (spend.estimated.unwrap(), spend.actual.unwrap());
                assert!(estimated.nano_usd() > 10 * actual.nano_usd(), "{spend:?}");
                estimate = estimated.nano_usd();
                spent += actual.nano_usd();
                answered += 1;
                assert!(answered < 1_000, "the budget never ran out");
            }
            Err(e) => break e,
        }
    };
    assert_eq!(refused.kind(), ErrorKind::BudgetExhausted, "{refused}");
    assert!(!refused.is_retryable());
    assert!(spent <= cap.nano_usd(), "{spent} spent of {cap}");
    assert!(
        spent + estimate > cap.nano_usd(),
        "{spent} spent: another estimate of {estimate} would have fitted in {cap}"
    );
    // Three estimates would have been all without giving back.
    assert!(answered > 30, "{answered} answered");
    assert!(estimate > 1_000 * PER_TOKEN, "{estimate}");
    let c = emu.counters("p");
    assert_eq!(
        c.requests, answered as u64,
        "the refused request was not sent: {c:?}"
    );
    // The day's window ends at midnight UTC, an hour away.
    assert_eq!(refused.retry_after(), Some(Duration::from_secs(3_600)));
    assert_eq!(
        refused.retry_at(),
        Some(clock.now() + Duration::from_secs(3_600))
    );
    let text = refused.to_string();
    for says in [
        "environment `code`",
        "day 2026-12-03",
        "$0.003200000",
        "starts again in 3600s",
    ] {
        assert!(text.contains(says), "{says:?} not in {text}");
    }

    // Midnight: a new day, a new budget.
    clock.advance(Duration::from_secs(3_600));
    client
        .chat(ask(0, 1_000))
        .await
        .expect("a new day's budget");
}

/// The primary's budget cannot cover the request: it goes to the secondary in the same call,
/// nothing sent to the primary. The environment's budget spent: `BudgetExhausted` at once,
/// nothing sent anywhere, no time passed. A tenant's: its requests end, another tenant's go.
#[tokio::test]
async fn a_providers_spent_budget_fails_over_and_the_environments_ends_the_request() {
    let clock = clock();
    let emu = emulator(&clock, &["primary", "secondary"]).await;
    let (a, s) = provider(&emu, "primary");
    let (b, t) = provider(&emu, "secondary");
    // A tenth of a cent a day for the primary: less than one request's estimate.
    let client = builder(&clock)
        .provider(a.clone(), s.clone().budget(Budget::usd_per_day(0.001)))
        .provider(b.clone(), t.clone())
        .tenant_budget("acme", Budget::usd_per_month(0.0))
        .build()
        .unwrap();
    let r = client.chat(ask(1, 1_000)).await.unwrap();
    assert_eq!(r.provider.as_str(), "secondary");
    assert_eq!(emu.counters("primary").requests, 0);
    assert_eq!(emu.counters("secondary").requests, 1);
    // A small request fits the primary's budget: the order is kept where it can be.
    let r = client.chat(ask(2, 16)).await.unwrap();
    assert_eq!(r.provider.as_str(), "primary");

    // A tenant without money: its request ends at once; another tenant's goes.
    let acme = RequestOptions::new().tenant(Tenant::new("acme"));
    let before = clock.now();
    let e = client.chat_with(ask(3, 16), &acme).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BudgetExhausted, "{e}");
    assert!(e.to_string().contains("tenant `acme`"), "{e}");
    // December's budget starts again on January 1st, 28 days and an hour away.
    assert_eq!(
        e.retry_after(),
        Some(Duration::from_secs(28 * 86_400 + 3_600))
    );
    let other = RequestOptions::new().tenant(Tenant::new("globex"));
    client.chat_with(ask(4, 16), &other).await.unwrap();
    // The same tenant named as the account of its own key.
    let by_account = RequestOptions::new().account("acme");
    let e = client.chat_with(ask(5, 16), &by_account).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BudgetExhausted, "{e}");

    // The environment's budget: spent, the request ends at once and nothing is sent.
    let sent = emu.counters("primary").requests + emu.counters("secondary").requests;
    let broke = builder(&clock)
        .provider(a, s)
        .provider(b, t)
        .budget(Budget::usd_per_month(0.000_01))
        .build()
        .unwrap();
    let e = broke.chat(ask(6, 16)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BudgetExhausted, "{e}");
    assert!(
        e.attempts().is_empty(),
        "nothing was sent: {:?}",
        e.attempts()
    );
    assert_eq!(
        emu.counters("primary").requests + emu.counters("secondary").requests,
        sent,
        "nothing was sent"
    );
    assert_eq!(clock.now(), before, "at once: no time passed");
}

/// One estimate of ~1,010 tokens ($0.00101) and half of another: the budget the next two
/// tests give the environment.
const ONE_AND_A_HALF: f64 = 0.0015;

/// The first answer came back unreadable — a 200 the provider billed — so its estimate stays
/// charged, and the budget cannot cover the retry: the request ends with `BudgetExhausted`
/// (not "every attempt failed", which a queue would back off and retry), the unreadable
/// answer kept as its attempt, and the retry is not sent. (A timeout or a connection cut once
/// the request was out keeps its estimate the same way: `decide`'s table.)
#[tokio::test]
async fn a_retry_the_budget_cannot_cover_ends_with_budget_exhausted_after_its_attempts() {
    let clock = clock();
    let emu = emulator(&clock, &["p"]).await;
    emu.script("p", [Fault::MalformedJson]);
    let (adapter, settings) = provider(&emu, "p");
    let client = builder(&clock)
        .provider(adapter, settings)
        .budget(Budget::usd_per_day(ONE_AND_A_HALF))
        .build()
        .unwrap();
    let e = client.chat(ask(1, 1_000)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BudgetExhausted, "{e}");
    assert!(!e.is_retryable(), "{e}");
    assert_eq!(e.code(), Some("environment_budget"), "{e}");
    let kinds: Vec<ErrorKind> = e.attempts().iter().map(|a| a.kind()).collect();
    assert_eq!(kinds, [ErrorKind::Decode], "{e}");
    assert!(e.to_string().contains("1 attempt(s)"), "{e}");
    // The day's window ends at midnight, less the backoff before the retry.
    let wait = e.retry_after().unwrap();
    assert!(
        wait <= Duration::from_secs(3_600) && wait > Duration::from_secs(3_500),
        "{wait:?}"
    );
    assert_eq!(emu.counters("p").requests, 1, "the retry was not sent");
}

/// Where the provider can have billed nothing, the reservation comes back at once and the
/// same request goes on within the budget: an error status (a 500, retried), and a
/// provider the request never reached (nothing listens on its port: it fails over).
#[tokio::test]
async fn a_refusal_or_a_request_that_never_arrived_gives_its_budget_back() {
    let clock = clock();
    let emu = emulator(&clock, &["p"]).await;
    emu.script("p", [Fault::Status { status: 500 }]);
    let (adapter, settings) = provider(&emu, "p");
    let client = builder(&clock)
        .provider(adapter.clone(), settings.clone())
        .budget(Budget::usd_per_day(ONE_AND_A_HALF))
        .build()
        .unwrap();
    let r = client
        .chat(ask(1, 1_000))
        .await
        .expect("the 500 gave it back");
    assert_eq!(r.attempts, 2, "the 500, then the answer");

    // A port nothing listens on: the connection is refused, nothing was delivered.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let nowhere = OpenAi::new(
        ProviderId::new("nowhere"),
        format!("http://127.0.0.1:{closed}/v1").parse().unwrap(),
    )
    .with_chat_model(MODEL);
    let nowhere_settings = ProviderSettings::new()
        .credential(Credential::new("sk-unused"))
        .price(MODEL, price());
    let client = builder(&clock)
        .provider(Arc::new(nowhere), nowhere_settings)
        .provider(adapter, settings)
        .budget(Budget::usd_per_day(ONE_AND_A_HALF))
        .build()
        .unwrap();
    let r = client
        .chat(ask(2, 1_000))
        .await
        .expect("the refused connection gave it back");
    assert_eq!(r.provider.as_str(), "p");
}

/// A budget's configuration is checked where it is written, and a budget on a model without
/// a price holds nothing back (said once as a warning).
#[tokio::test]
async fn a_budget_on_an_unpriced_model_holds_nothing_back() {
    let clock = clock();
    let emu = emulator(&clock, &["p"]).await;
    let adapter = OpenAi::new(ProviderId::new("p"), emu.base_url("p").parse().unwrap())
        .with_chat_model(MODEL);
    let settings = ProviderSettings::new().credential(Credential::new(emu.key("p")));
    let client = builder(&clock)
        .provider(Arc::new(adapter), settings)
        .budget(Budget::usd_per_day(0.0))
        .build()
        .unwrap();
    let r = client.chat(ask(1, 16)).await.unwrap();
    assert_eq!(r.spend, None);

    let e = builder(&clock)
        .provider(
            Arc::new(OpenAi::new(
                ProviderId::new("q"),
                emu.base_url("p").parse().unwrap(),
            )),
            ProviderSettings::new(),
        )
        .budget(Budget::usd_per_day(1.0).in_time_zone("Mars/Olympus_Mons"))
        .build()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Config);
    assert!(e.to_string().contains("Mars/Olympus_Mons"), "{e}");
}

fn demo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/prompts.jsonl")
}

/// The demo batch on a queue in `dir` (its file `name`), through `client`.
async fn run_demo(client: &Client, dir: &TempDir, name: &str) -> QueuedReport {
    let queue = Queue::open(&format!(
        "sqlite:{}",
        dir.path(&format!("{name}.sqlite")).display()
    ))
    .await
    .unwrap();
    QueuedJob::new(demo(), dir.path(&format!("{name}.jsonl")), queue)
        .run(client, &Stop::new())
        .await
        .unwrap()
}

/// A batch's day: 22:00 UTC (two hours of the day left, whatever a run waits for its
/// limits), the emulator, a directory, and its provider.
struct Evening {
    clock: ManualClock,
    emu: Emulator,
    dir: TempDir,
    provider: (Arc<OpenAi>, ProviderSettings),
}

impl Evening {
    async fn start(name: &str) -> Evening {
        let clock = ManualClock::with_wall(
            SystemTime::UNIX_EPOCH + Duration::from_secs(LATE_EVENING - 3_600),
        );
        let emu = emulator(&clock, &["p"]).await;
        let provider = provider(&emu, "p");
        Evening {
            clock,
            emu,
            dir: TempDir::new("budget", name),
            provider,
        }
    }

    /// A client of the provider, with a day's budget of `budget` if any.
    fn client(&self, budget: Option<Cost>) -> Client {
        let (a, s) = self.provider.clone();
        let b = builder(&self.clock).provider(a, s);
        match budget {
            Some(cap) => b.budget(Budget::usd_per_day(cap.usd())),
            None => b,
        }
        .build()
        .unwrap()
    }

    /// A minute past the next midnight (UTC).
    fn next_day(&self) {
        let s = clock_wall_s(&self.clock);
        self.clock
            .advance(Duration::from_secs(86_400 - s % 86_400 + 60));
    }
}

/// The demo batch on the queue with a day's budget of 60 % of what it costs: the run stops
/// sending when the budget is spent — its items held back snoozed to midnight, none failed —
/// and its summary says so; runs after midnight finish it, each item answered once.
#[tokio::test]
async fn a_batch_stops_when_its_budget_is_spent_and_a_run_after_the_reset_finishes_it() {
    let day = Evening::start("batch").await;
    let (emu, dir) = (&day.emu, &day.dir);
    // What the whole demo costs (the emulator answers a prompt alike every time).
    let whole = run_demo(&day.client(None), dir, "whole").await;
    let total = whole.run.cost.unwrap();
    let cap = Cost::from_nano_usd(total.nano_usd() * 6 / 10);
    let client = day.client(Some(cap));

    let first = run_demo(&client, dir, "budget").await;
    assert_eq!(first.worker.ended, Ended::BudgetSpent, "{:?}", first.worker);
    // A budget fails nothing: the only failures are the demo's own (bad lines).
    assert!(first.failed <= whole.failed, "{first:?}");
    assert!(
        !first.run.failed_by_kind.contains_key("budget_exhausted"),
        "{:?}",
        first.run.failed_by_kind
    );
    assert!(first.pending > 0, "{first:?}");
    assert!(
        first.ok + first.pending + first.failed >= whole.ok,
        "{first:?}"
    );
    let spent = first.run.cost.unwrap();
    assert!(spent <= cap, "{spent} spent of {cap}");
    let summary = first.summary(&client, None).await;
    let b = summary
        .budget_spent
        .as_ref()
        .expect("the summary says why it stopped");
    assert!(b.message.contains("environment `code`"), "{}", b.message);
    assert_eq!(
        b.until_unix_ms,
        (LATE_EVENING + 3_600) * 1_000,
        "midnight UTC"
    );
    let human = summary.to_string();
    assert!(human.contains("budget spent"), "{human}");
    let json = serde_json::to_value(&summary).unwrap();
    assert_eq!(
        json["budget_spent"]["until_unix_ms"],
        (LATE_EVENING + 3_600) * 1_000
    );

    // Day after day, the rest goes: each day's runs spend at most that day's budget (what
    // was in flight when it ran out is given back but not spent again that day).
    let (mut report, mut before, mut days) = (first, spent, 1);
    while report.pending > 0 {
        day.next_day();
        report = run_demo(&client, dir, "budget").await;
        let total = report.run.cost.unwrap();
        let today = Cost::from_nano_usd(total.nano_usd() - before.nano_usd());
        assert!(today <= cap, "{today} spent on day {days} of {cap}");
        before = total;
        days += 1;
        assert!(days <= 5, "{report:?}");
    }
    assert_eq!(report.worker.ended, Ended::Drained, "{:?}", report.worker);
    assert_eq!(report.ok, whole.ok, "every item answered, over {days} days");
    let text = std::fs::read_to_string(dir.path("budget.jsonl")).unwrap();
    let mut ids = std::collections::BTreeSet::new();
    for l in text.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        if let Some(id) = v["id"].as_str() {
            assert!(ids.insert(id.to_owned()), "twice: {l}");
        }
    }
    let sent = emu.counters("p").ok;
    assert_eq!(sent, 2 * whole.ok, "each item sent once per batch: {sent}");
}

/// The batch without the queue (`--no-queue`, the results file its only state): at a spent
/// budget it starts nothing more, writes no line for what the budget held back (neither
/// answered nor failed), and says so; the rerun after midnight sends the rest, none twice.
#[tokio::test]
async fn a_batch_without_the_queue_stops_at_its_budget_and_its_rerun_goes_on() {
    use llm_failover::batch::{FileJob, Runner};
    let day = Evening::start("file").await;
    let (emu, dir) = (&day.emu, &day.dir);
    let whole = FileJob::new(demo(), dir.path("whole.jsonl"))
        .run(&Runner::new(day.client(None)), &Stop::new())
        .await
        .unwrap();
    let total = whole.run.cost.unwrap();
    let cap = Cost::from_nano_usd(total.nano_usd() / 2);
    let client = day.client(Some(cap));
    let output = dir.path("budget.jsonl");
    let lines = || std::fs::read_to_string(&output).unwrap().lines().count() as u64;
    let first = FileJob::new(demo(), &output)
        .run(&Runner::new(client.clone()), &Stop::new())
        .await
        .unwrap();
    let b = first
        .run
        .budget_spent
        .as_ref()
        .expect("the budget stopped it");
    assert!(
        b.items > 0 && b.message.contains("environment `code`"),
        "{b:?}"
    );
    assert!(
        !first.run.failed_by_kind.contains_key("budget_exhausted"),
        "{:?}",
        first.run
    );
    assert!(first.run.cost.unwrap() <= cap);
    let written = lines();
    assert!(
        written < whole.run.ok + whole.run.failed(),
        "{written} lines"
    );
    assert_eq!(
        written,
        first.run.ok + first.run.failed(),
        "no line for what was held back"
    );

    // The next days: the rerun skips what is done and sends the rest.
    let mut days = 1;
    let mut report = first;
    while report.run.budget_spent.is_some() {
        day.next_day();
        report = FileJob::new(demo(), &output)
            .run(&Runner::new(client.clone()), &Stop::new())
            .await
            .unwrap();
        days += 1;
        assert!(days <= 5, "{report:?}");
    }
    assert_eq!(
        lines(),
        whole.run.ok + whole.run.failed(),
        "every item once, over {days} days"
    );
    assert_eq!(
        emu.counters("p").ok,
        2 * whole.run.ok,
        "each item sent once per batch"
    );
}

/// A Redis Cluster cannot keep a budget in the limits' script call: a client with a budget
/// and shared limits on a Cluster is refused when it is built, saying why.
#[tokio::test]
async fn a_budget_on_a_redis_cluster_is_refused_at_build() {
    let clock = clock();
    let emu = emulator(&clock, &["p"]).await;
    let (a, s) = provider(&emu, "p");
    let e = builder(&clock)
        .provider(a, s)
        .shared(SharedSettings::new("redis://127.0.0.1:7000").cluster(true))
        .budget(Budget::usd_per_day(1.0))
        .build()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Config);
    assert!(e.to_string().contains("Redis Cluster"), "{e}");
}

/// The clock's wall time, in whole seconds since the Unix epoch.
fn clock_wall_s(clock: &ManualClock) -> u64 {
    clock
        .wall()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A streamed answer's estimate is settled when the stream ends, with the cost of the usage
/// its last chunk reports: a budget of one and a half estimates admits a second request
/// after the first stream, which it could not if the estimate were kept.
#[tokio::test]
async fn a_streams_estimate_is_settled_at_its_end() {
    use futures_util::StreamExt;
    let clock = clock();
    let emu = emulator(&clock, &["p"]).await;
    let (a, s) = provider(&emu, "p");
    // What one request is estimated at, then a budget of one and a half of it.
    let probe = builder(&clock)
        .provider(a.clone(), s.clone())
        .build()
        .unwrap();
    let estimate = probe
        .chat(ask(1, 1_000))
        .await
        .unwrap()
        .spend
        .unwrap()
        .estimated
        .unwrap();
    let client = builder(&clock)
        .provider(a, s)
        .budget(Budget::usd_per_day(estimate.usd() * 1.5))
        .build()
        .unwrap();
    let mut stream = client.chat_stream(ask(2, 1_000)).await.unwrap();
    while let Some(chunk) = stream.next().await {
        chunk.unwrap();
    }
    let spend = stream.spend().unwrap();
    assert!(
        spend.actual.unwrap() < spend.estimated.unwrap(),
        "{spend:?}"
    );
    drop(stream);
    // The end is settled from a task of its own: let it run, then ask.
    let mut second = client.chat(ask(3, 1_000)).await;
    for _ in 0..100 {
        if second.is_ok() {
            break;
        }
        tokio::task::yield_now().await;
        second = client.chat(ask(3, 1_000)).await;
    }
    // Kept, the stream's estimate and this one's would be two estimates: over the budget.
    second.expect("the stream's estimate was given back at its end");
}
