//! Workers on a durable queue (`llm_failover_queue::Worker`) sending through a real client
//! over loopback, on the manual clock: what each answer does to its job, a stale result
//! refused, an abort that gives leases back, and an outage longer than the request deadline
//! that leaves jobs waiting rather than failed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::post;
use llm_failover::batch::Stop;
use llm_failover::clock::{Clock, ManualClock};
use llm_failover::rng::FixedRng;
use llm_failover::{ChatRequest, Client, Credential, Error, ErrorKind, ProviderSettings};
use llm_failover_emulator::scripted::{Reply, ScriptedServer};
use llm_failover_queue::{
    Contract, Ended, Handler, JobContext, JobState, NewJob, Queue, Worker, wall_ms,
};
use tokio::sync::Notify;

use crate::support::*;

/// Sends the job's `prompt` and answers `{"text": …}`.
struct Chat;

#[async_trait]
impl Handler for Chat {
    async fn run(&self, ctx: &JobContext) -> Result<String, Error> {
        let payload: serde_json::Value = serde_json::from_str(&ctx.job().payload)
            .map_err(|e| Error::new(ErrorKind::InvalidRequest, format!("payload: {e}")))?;
        let prompt = payload["prompt"].as_str().unwrap_or("hello");
        let answer = ctx
            .client()
            .chat(ChatRequest::from_prompt(prompt).max_tokens(16))
            .await?;
        Ok(serde_json::json!({ "text": answer.text }).to_string())
    }
}

fn job(id: &str) -> NewJob {
    NewJob::new(id, "chat", r#"{"prompt":"hello"}"#)
}

async fn state(queue: &Queue, id: &str) -> llm_failover_queue::Job {
    queue.get(id).await.unwrap().unwrap()
}

/// In the order a one-at-a-time worker sends them: a terminal 400, an answer its contract
/// refuses, a good one, a 429 (30 s), a good one after it, a 500, a good one after that.
fn script_one_of_each(server: &ScriptedServer) {
    server.push(
        CHAT,
        Reply::json(400, error_body("invalid_request_error", None, "bad model")),
    );
    server.push(CHAT, ok("a bad answer"));
    server.push(CHAT, ok("a good answer"));
    server.push(CHAT, rate_limited().header("retry-after", "30"));
    server.push(CHAT, ok("good after the reset"));
    server.push(
        CHAT,
        Reply::json(500, error_body("server_error", None, "boom")),
    );
    server.push(CHAT, ok("good after a failure"));
}

#[tokio::test]
async fn each_answer_settles_its_job_a_429_snoozes_and_a_terminal_4xx_is_dead_at_once() {
    let server = ScriptedServer::start().await;
    script_one_of_each(&server);
    let mut p = policy();
    p.max_attempts = 1;
    p.deadline = Duration::from_secs(10); // shorter than the 30 s reset: the job must wait
    let h = client(&[("a", &server)], p);
    let queue = Queue::sqlite_in_memory().unwrap();
    let now = wall_ms(h.clock.wall());
    let ids = ["dead", "review", "done", "throttled", "flaky"];
    queue
        .enqueue_all(ids.iter().map(|id| job(id)).collect(), now)
        .await
        .unwrap();
    let contract: Contract = Arc::new(|_, result: &str| {
        if result.contains("good") {
            Ok(())
        } else {
            Err("the answer is not good".to_owned())
        }
    });
    let worker = Worker::builder(queue.clone(), h.client.clone())
        .handler("chat", Arc::new(Chat))
        .contract("chat", contract)
        .concurrency(1)
        .until_drained(Duration::from_secs(600))
        .build()
        .unwrap();

    let report = worker.run(&Stop::new()).await.unwrap();

    assert_eq!(report.ended, Ended::Drained);
    assert_eq!(
        (
            report.completed,
            report.reviewed,
            report.dead,
            report.failed,
            report.lost
        ),
        (3, 1, 1, 1, 0),
        "{report:?}"
    );
    // The 429's job, and the one turned away while the breaker it opened was open.
    assert_eq!(report.snoozed, 2, "{report:?}");
    let dead = state(&queue, "dead").await;
    assert_eq!(dead.state, JobState::Dead);
    let reason = dead.reason.unwrap();
    assert!(
        reason.starts_with("invalid_request 400 from a: "),
        "{reason}"
    );
    assert_eq!(dead.attempt, 1, "a terminal 4xx is not tried again");
    let review = state(&queue, "review").await;
    assert_eq!(review.state, JobState::Review);
    assert_eq!(review.reason.as_deref(), Some("the answer is not good"));
    let throttled = state(&queue, "throttled").await;
    assert_eq!(throttled.state, JobState::Done);
    assert_eq!(throttled.failures, 0, "a 429 counts no failure");
    assert!(throttled.result.unwrap().contains("good after the reset"));
    let flaky = state(&queue, "flaky").await;
    assert_eq!((flaky.state, flaky.failures), (JobState::Done, 1));
    // The worker waited for the stated reset (idle, nothing in flight) instead of failing.
    let waited: Duration = h.clock.sleeps().iter().sum();
    assert!(waited >= Duration::from_secs(30), "{:?}", h.clock.sleeps());
    assert_eq!(report.transport_success(), Some(4.0 / 6.0));
    assert_eq!(report.correctness(), Some(0.75));
    assert_eq!(server.pending(), 0);
}

/// Answers when told to; counts how many times it was asked.
struct Held {
    release: Notify,
    started: Notify,
    runs: AtomicUsize,
}

#[async_trait]
impl Handler for Held {
    async fn run(&self, ctx: &JobContext) -> Result<String, Error> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        self.started.notify_one();
        self.release.notified().await;
        Ok(format!(r#"{{"attempt":{}}}"#, ctx.job().attempt))
    }
}

fn held() -> Arc<Held> {
    Arc::new(Held {
        release: Notify::new(),
        started: Notify::new(),
        runs: AtomicUsize::new(0),
    })
}

#[tokio::test]
async fn a_result_that_comes_after_the_job_was_reaped_and_claimed_again_is_refused_and_counted() {
    let server = ScriptedServer::start().await;
    let h = client(&[("a", &server)], policy());
    let queue = Queue::sqlite_in_memory().unwrap();
    let now = wall_ms(h.clock.wall());
    queue.enqueue(job("slow"), now).await.unwrap();
    let handler = held();
    let lease = Duration::from_secs(60);
    let worker = Worker::builder(queue.clone(), h.client.clone())
        .handler("chat", handler.clone())
        .lease(lease)
        .until_drained(Duration::from_secs(600))
        .build()
        .unwrap();
    let run = tokio::spawn({
        let worker = worker.clone();
        async move { worker.run(&Stop::new()).await }
    });
    handler.started.notified().await;

    // The worker stalls past its lease: the reaper gives the job back and another claims and
    // completes it.
    let later = now + 61_000;
    let policy = llm_failover_queue::FailPolicy::default();
    assert_eq!(queue.reap(later, &policy).await.unwrap().requeued, 1);
    let again = queue.claim("other", lease, later).await.unwrap().unwrap();
    assert_eq!(again.attempt, 2);
    let by_other = queue.complete("slow", again.attempt, r#"{"by":"other"}"#);
    assert_eq!(by_other.await.unwrap(), llm_failover_queue::Fenced::Applied);

    handler.release.notify_one();
    let report = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the worker ends once the job is done")
        .unwrap()
        .unwrap();
    assert_eq!((report.lost, report.completed), (1, 0), "{report:?}");
    let job = state(&queue, "slow").await;
    assert_eq!(job.result.as_deref(), Some(r#"{"by":"other"}"#));
}

#[tokio::test]
async fn an_abort_gives_the_leases_of_running_jobs_back_without_a_failure() {
    let server = ScriptedServer::start().await;
    let h = client(&[("a", &server)], policy());
    let queue = Queue::sqlite_in_memory().unwrap();
    let now = wall_ms(h.clock.wall());
    queue
        .enqueue_all(vec![job("a"), job("b"), job("c")], now)
        .await
        .unwrap();
    let handler = held();
    let worker = Worker::builder(queue.clone(), h.client.clone())
        .handler("chat", handler.clone())
        .concurrency(2)
        .build()
        .unwrap();
    let stop = Stop::new();
    let run = tokio::spawn({
        let (worker, stop) = (worker.clone(), stop.clone());
        async move { worker.run(&stop).await }
    });
    handler.started.notified().await;
    stop.abort();
    let report = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("an abort ends the run")
        .unwrap()
        .unwrap();
    assert_eq!(report.ended, Ended::Stopped);
    assert_eq!((report.claimed, report.released), (2, 2), "{report:?}");
    let stats = queue.stats(now).await.unwrap();
    assert_eq!((stats.ready, stats.running), (3, 0));
    for id in ["a", "b", "c"] {
        assert_eq!(state(&queue, id).await.failures, 0);
    }
}

#[tokio::test]
async fn a_worker_needs_a_handler_and_contracts_only_for_kinds_it_handles() {
    let server = ScriptedServer::start().await;
    let h = client(&[("a", &server)], policy());
    let queue = Queue::sqlite_in_memory().unwrap();
    let none = Worker::builder(queue.clone(), h.client.clone()).build();
    assert_eq!(none.unwrap_err().kind(), ErrorKind::Config);
    let contract: Contract = Arc::new(|_, _: &str| Ok(()));
    let stray = Worker::builder(queue, h.client.clone())
        .handler("chat", Arc::new(Chat))
        .contract("transcribe", contract)
        .build()
        .unwrap_err();
    assert!(stray.to_string().contains("\"transcribe\""), "{stray}");
}

/// A provider that is down (503) for `outage` from its `down_at`th request on, by the
/// manual clock the client runs on; it records the clock's reading at each request.
#[derive(Clone)]
struct Outage {
    clock: ManualClock,
    down_at: usize,
    outage: Duration,
    seen: Arc<Mutex<Vec<(Duration, u16)>>>,
    window: Arc<Mutex<Option<(Duration, Duration)>>>,
}

async fn outage_chat(State(o): State<Outage>) -> impl IntoResponse {
    let now = o.clock.elapsed();
    let mut seen = o.seen.lock().unwrap();
    let mut window = o.window.lock().unwrap();
    if window.is_none() && seen.len() + 1 >= o.down_at {
        *window = Some((now, now + o.outage));
    }
    let down = window.is_some_and(|(from, to)| now >= from && now < to);
    let status = if down { 503 } else { 200 };
    seen.push((now, status));
    if down {
        let body = error_body("server_error", None, "the service is down");
        return (StatusCode::SERVICE_UNAVAILABLE, body).into_response();
    }
    (StatusCode::OK, ok_body("fine")).into_response()
}

#[tokio::test]
async fn an_outage_longer_than_the_deadline_leaves_jobs_waiting_and_the_same_run_finishes_them() {
    let clock = ManualClock::new();
    let outage = Outage {
        clock: clock.clone(),
        down_at: 100,
        outage: Duration::from_secs(240),
        seen: Arc::default(),
        window: Arc::default(),
    };
    let app = axum::Router::new()
        .route("/v1/chat/completions", post(outage_chat))
        .with_state(outage.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let mut p = policy();
    p.deadline = Duration::from_secs(30); // an eighth of the outage
    let provider = Arc::new(
        llm_failover::provider::openai::OpenAi::new(
            llm_failover::ProviderId::new("only"),
            url.parse().unwrap(),
        )
        .with_chat_model("gpt-4o-mini"),
    );
    let client = Client::builder()
        .clock(Arc::new(clock.clone()))
        .rng(Arc::new(FixedRng::new([0.5])))
        .policy(p)
        .provider(
            provider,
            ProviderSettings::new().credential(Credential::new(SENTINEL)),
        )
        .build()
        .unwrap();
    // The client's own record of each send (its clock's wall time, and whether it was the
    // breaker's probe): the server sees a request when it arrives, and on a loaded machine
    // one sent before the breaker opened can arrive after the manual clock has moved on.
    let sends = crate::support::Capture::default();
    let writer = sends.clone();
    let _traced = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_env_filter("llm_failover::send=debug")
            .with_ansi(false)
            .without_time()
            .with_writer(move || writer.clone())
            .finish(),
    );
    let wall0 = wall_ms(clock.wall());
    let queue = Queue::sqlite_in_memory().unwrap();
    let jobs: Vec<NewJob> = (0..600).map(|i| job(&format!("item-{i:03}"))).collect();
    queue
        .enqueue_all(jobs, wall_ms(clock.wall()))
        .await
        .unwrap();
    let worker = Worker::builder(queue.clone(), client)
        .handler("chat", Arc::new(Chat))
        .concurrency(16)
        .until_drained(Duration::from_secs(15 * 60))
        .build()
        .unwrap();

    let report = worker.run(&Stop::new()).await.unwrap();

    let stats = queue.stats(wall_ms(clock.wall())).await.unwrap();
    assert_eq!(report.ended, Ended::Drained, "{report:?}");
    assert_eq!(
        (stats.done, stats.dead, stats.review),
        (600, 0, 0),
        "{stats:?}"
    );
    let (from, to) = outage.window.lock().unwrap().expect("the outage happened");
    let seen = outage.seen.lock().unwrap().clone();
    let down: Vec<_> = seen.iter().filter(|(_, status)| *status == 503).collect();
    assert!(down.iter().all(|(t, _)| *t >= from && *t < to));
    // At most the concurrency (16) before the breaker has settled into its rhythm — the
    // requests in flight when it went down, their first retries, and those first contact
    // held (the provider states no limit) — plus one probe per breaker cooldown (5 s doubling
    // to the default cap of 30 s: 5, 15, 35, 65, 95, …, 215 — at most 9 in 240 s).
    assert!(
        down.len() <= 16 + 9,
        "{} requests during the outage: {down:?}",
        down.len()
    );
    // The rhythm, by the client's record of its sends (its clock, and whether each was the
    // breaker's probe): from the first probe to the outage's end, probes only, never two
    // within a cooldown, at most 9.
    let sent: Vec<(Duration, bool)> = sends
        .text()
        .lines()
        .filter_map(|l| {
            let field = |name: &str| {
                let at = l.find(&format!(" {name}="))? + name.len() + 2;
                l[at..].split_whitespace().next()
            };
            let wall: i64 = field("wall_ms")?.parse().ok()?;
            let probe = field("probe")? == "true";
            Some((
                Duration::from_millis(u64::try_from(wall - wall0).ok()?),
                probe,
            ))
        })
        .collect();
    let first = sent
        .iter()
        .position(|(_, probe)| *probe)
        .expect("the breaker opened and probed");
    let rhythm: Vec<(Duration, bool)> = sent[first..]
        .iter()
        .copied()
        .filter(|(t, _)| *t < to)
        .collect();
    assert!(
        rhythm.iter().all(|(_, probe)| *probe),
        "only probes while it is down: {rhythm:?}"
    );
    assert!(rhythm.len() <= 9, "{rhythm:?}");
    for pair in rhythm.windows(2) {
        assert!(
            pair[1].0 - pair[0].0 >= Duration::from_secs(5),
            "two probes within a cooldown: {rhythm:?}"
        );
    }
    assert!(
        seen.iter().any(|(t, s)| *t >= to && *s == 200),
        "served after it"
    );
    assert!(clock.elapsed() >= to, "the run lasted past the outage");
}

/// The manual clock, and a PostgreSQL that a job kills: the first time the worker waits after
/// that (it is trying the queue again), the server is started again — a database that is
/// away for one retry's wait.
#[derive(Debug, Clone)]
struct RestartsOnWait {
    clock: ManualClock,
    server: Arc<Mutex<crate::support::postgres::PgServer>>,
    down: Arc<std::sync::atomic::AtomicBool>,
}

#[async_trait]
impl Clock for RestartsOnWait {
    fn now(&self) -> tokio::time::Instant {
        self.clock.now()
    }

    fn wall(&self) -> std::time::SystemTime {
        self.clock.wall()
    }

    async fn sleep_until(&self, deadline: tokio::time::Instant) {
        if self.down.swap(false, Ordering::SeqCst) {
            self.server.lock().unwrap().restart();
        }
        self.clock.sleep_until(deadline).await;
    }
}

/// Answers its payload; the job `kill` first kills the queue's PostgreSQL.
struct KillsTheDatabase(RestartsOnWait);

#[async_trait]
impl Handler for KillsTheDatabase {
    async fn run(&self, ctx: &JobContext) -> Result<String, Error> {
        if ctx.job().id == "kill" {
            self.0.server.lock().unwrap().kill();
            self.0.down.store(true, Ordering::SeqCst);
        }
        Ok(ctx.job().payload.clone())
    }
}

#[tokio::test]
async fn a_queue_database_that_goes_away_and_comes_back_loses_no_result() {
    let pg = crate::support::postgres::PgServer::start();
    let url = pg.fresh_url();
    let clock = RestartsOnWait {
        clock: ManualClock::new(),
        server: Arc::new(Mutex::new(pg)),
        down: Arc::default(),
    };
    let server = ScriptedServer::start().await;
    let client = Client::builder()
        .clock(Arc::new(clock.clone()))
        .provider(
            openai("a", &server),
            ProviderSettings::new().credential(Credential::new(SENTINEL)),
        )
        .build()
        .unwrap();
    let queue = Queue::open(&url).await.unwrap();
    let now = wall_ms(clock.wall());
    let ids = ["a", "b", "kill", "c", "d"];
    queue
        .enqueue_all(ids.iter().map(|id| job(id)).collect(), now)
        .await
        .unwrap();
    let worker = Worker::builder(queue.clone(), client)
        .handler("chat", Arc::new(KillsTheDatabase(clock.clone())))
        .concurrency(1)
        .until_drained(Duration::from_secs(600))
        .build()
        .unwrap();

    let report = worker.run(&Stop::new()).await.unwrap();

    assert_eq!(
        (report.ended, report.completed),
        (Ended::Drained, 5),
        "{report:?}"
    );
    assert!(report.queue_errors >= 1, "{report:?}");
    let stats = queue.stats(wall_ms(clock.wall())).await.unwrap();
    assert_eq!((stats.done, stats.ready, stats.running), (5, 0, 0));
    assert_eq!(
        state(&queue, "kill").await.result.as_deref(),
        Some(r#"{"prompt":"hello"}"#),
        "the result in hand when the database went away was kept"
    );
}
