//! The durable job queue, on both backends through `Queue`: the state machine from every
//! state, idempotent enqueue, fencing of stale workers, lanes, tenant fairness, batches of
//! claims and completions, snooze against fail, dead letters, bad input, and several handles
//! claiming from one store at once. Each test runs once per backend (`jobs::sqlite::…`,
//! `jobs::postgres::…`: a real PostgreSQL, a database per queue, tests/it/support/postgres.rs);
//! what only one backend has (files, schema versions, outages) is at the end, and in
//! `jobs_postgres`.
//!
//! Time is plain wall-clock milliseconds chosen by each test; nothing sleeps.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use llm_failover::ErrorKind;
use llm_failover::admission::Priority;
use llm_failover_queue::{FailPolicy, Failed, Fenced, JobState, NewJob, Queue, QueueStats, Reaped};

use crate::support::examples::TempDir;
use crate::support::postgres::PgServer;

/// The store a test runs on.
#[derive(Clone, Copy, Debug)]
enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// A new, empty queue.
    async fn queue(self) -> Queue {
        match self {
            Backend::Sqlite => Queue::sqlite_in_memory().unwrap(),
            Backend::Postgres => Queue::open(&PgServer::shared().fresh_url()).await.unwrap(),
        }
    }

    /// The spec of a new, empty store that several handles can open (`Queue::open`), and the
    /// directory that holds it if it is a file.
    fn store(self, name: &str) -> (String, Option<TempDir>) {
        match self {
            Backend::Sqlite => {
                let dir = TempDir::new("jobs", name);
                let spec = format!("sqlite:{}", dir.path("queue.sqlite").display());
                (spec, Some(dir))
            }
            Backend::Postgres => (PgServer::shared().fresh_url(), None),
        }
    }
}

/// Runs each named `async fn(Backend)` as a test per backend, `sqlite::NAME` and
/// `postgres::NAME`; `NAME(args)` passes `args` to `#[tokio::test]`.
macro_rules! on_both_backends {
    ($($name:ident $(($($args:tt)*))?),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test $(($($args)*))?]
                async fn $name() {
                    super::$name(super::Backend::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test $(($($args)*))?]
                async fn $name() {
                    super::$name(super::Backend::Postgres).await
                }
            )*
        }
    };
}

on_both_backends!(
    every_operation_from_every_state_follows_the_state_machine,
    enqueue_is_idempotent_on_the_callers_id,
    a_stale_workers_result_is_refused_after_its_lease_is_reaped,
    a_heartbeat_keeps_the_reaper_away,
    interactive_jobs_are_claimed_before_bulk_ones,
    a_tenant_with_1000_jobs_does_not_starve_one_with_2,
    one_job_of_a_small_tenant_is_claimed_within_one_round_past_10000_and_idle_tenants,
    claim_many_claims_as_claim_would_in_turn,
    claim_ids_takes_back_jobs_set_aside_and_only_ready_ones,
    complete_all_applies_current_claims_and_refuses_the_rest,
    snooze_counts_no_failure_and_fail_backs_off_to_its_cap,
    a_job_failing_past_its_limit_is_dead_with_a_reason_and_requeue_revives_it,
    a_lease_that_keeps_expiring_ends_in_the_dead_letters,
    stats_count_states_and_the_oldest_eligible_wait,
    a_payload_or_result_that_is_not_json_is_refused,
    handles_claiming_concurrently_from_one_store_never_share_a_claim(
        flavor = "multi_thread",
        worker_threads = 4
    ),
);

const LEASE: Duration = Duration::from_secs(10);

/// A remote batch sets its items aside (snoozed a day) and claims them back by id when it
/// ends: a job set aside is claimed whatever its eligible time; one running elsewhere, done,
/// dead or unknown is left as it is; each claim is a new attempt, fenced as any other.
async fn claim_ids_takes_back_jobs_set_aside_and_only_ready_ones(backend: Backend) {
    let queue = backend.queue().await;
    for id in ["aside", "ready", "running", "done", "dead"] {
        assert!(queue.enqueue(job(id), 0).await.unwrap());
    }
    let mut claimed = std::collections::HashMap::new();
    for j in queue.claim_many("w", 5, LEASE, 1_000).await.unwrap() {
        claimed.insert(j.id.clone(), j.attempt);
    }
    let day = 86_400_000;
    assert_eq!(
        queue.snooze("aside", claimed["aside"], day).await.unwrap(),
        Fenced::Applied
    );
    assert_eq!(
        queue
            .snooze("ready", claimed["ready"], 1_000)
            .await
            .unwrap(),
        Fenced::Applied
    );
    assert_eq!(
        queue.complete("done", claimed["done"], "1").await.unwrap(),
        Fenced::Applied
    );
    assert_eq!(
        queue
            .dead_now("dead", claimed["dead"], "400")
            .await
            .unwrap(),
        Fenced::Applied
    );
    let ids: Vec<String> = ["aside", "ready", "running", "done", "dead", "unknown"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    let got = queue.claim_ids(&ids, "b", LEASE, 2_000).await.unwrap();
    let mut got: Vec<(String, u32, JobState)> = got
        .into_iter()
        .map(|j| (j.id, j.attempt, j.state))
        .collect();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        got,
        [
            ("aside".to_owned(), 2, JobState::Running),
            ("ready".to_owned(), 2, JobState::Running)
        ]
    );
    // The old claims are stale; the new ones settle.
    assert_eq!(
        queue
            .complete("aside", claimed["aside"], "1")
            .await
            .unwrap(),
        Fenced::Lost
    );
    assert_eq!(
        queue.complete("aside", 2, "2").await.unwrap(),
        Fenced::Applied
    );
    assert_eq!(state_of(&queue, "running").await, JobState::Running);
    assert_eq!(state_of(&queue, "done").await, JobState::Done);
    assert_eq!(state_of(&queue, "dead").await, JobState::Dead);
    assert!(
        queue
            .claim_ids(&[], "b", LEASE, 2_000)
            .await
            .unwrap()
            .is_empty()
    );
    // What is left unsettled: "ready" (claimed back) and "running".
    assert_eq!(
        queue.unsettled_by_kind().await.unwrap(),
        [("chat".to_owned(), 2)]
    );
}

fn job(id: &str) -> NewJob {
    NewJob::new(id, "chat", r#"{"prompt":"hi"}"#)
}

async fn state_of(queue: &Queue, id: &str) -> JobState {
    queue.get(id).await.unwrap().unwrap().state
}

/// A queue holding job `j` in `state`, with its attempt (1 once claimed, 0 before).
async fn queue_with_job_in(backend: Backend, state: JobState) -> (Queue, u32) {
    let queue = backend.queue().await;
    assert!(queue.enqueue(job("j"), 0).await.unwrap());
    if state == JobState::Ready {
        return (queue, 0);
    }
    let claimed = queue.claim("w", LEASE, 1_000).await.unwrap().unwrap();
    let a = claimed.attempt;
    let outcome = match state {
        JobState::Running => Fenced::Applied,
        JobState::Done => queue.complete("j", a, "1").await.unwrap(),
        JobState::Dead => queue.dead_now("j", a, "400").await.unwrap(),
        JobState::Review => queue.review("j", a, r#""bad""#, "no").await.unwrap(),
        JobState::Ready => unreachable!(),
    };
    assert_eq!(outcome, Fenced::Applied);
    assert_eq!(state_of(&queue, "j").await, state);
    (queue, a)
}

/// Runs `op` on job `j` (at attempt `a`) and says what it answered.
async fn apply(queue: &Queue, op: &str, a: u32) -> String {
    let policy = FailPolicy::default();
    let lost = |o: Fenced| if o.is_lost() { "lost" } else { "applied" }.to_owned();
    match op {
        "claim" => match queue.claim("w2", LEASE, 2_000).await.unwrap() {
            Some(job) => format!("claimed {}", job.attempt),
            None => "none".to_owned(),
        },
        "heartbeat" => lost(queue.heartbeat("j", a, LEASE, 2_000).await.unwrap()),
        "complete" => lost(queue.complete("j", a, "2").await.unwrap()),
        "snooze" => lost(queue.snooze("j", a, 5_000).await.unwrap()),
        "fail" => match queue.fail("j", a, "503", 2_000, &policy).await.unwrap() {
            Failed::Retry { eligible_at_ms } => format!("retry at {eligible_at_ms}"),
            Failed::Dead => "dead".to_owned(),
            Failed::Lost => "lost".to_owned(),
        },
        "dead_now" => lost(queue.dead_now("j", a, "401").await.unwrap()),
        "review" => lost(queue.review("j", a, "0", "why").await.unwrap()),
        "reap" => {
            let r = queue.reap(20_000, &policy).await.unwrap();
            format!("reaped {} dead {}", r.requeued, r.dead)
        }
        "requeue" => queue.requeue("j", 2_000).await.unwrap().to_string(),
        other => panic!("no operation {other}"),
    }
}

async fn every_operation_from_every_state_follows_the_state_machine(backend: Backend) {
    use JobState::{Dead, Done, Ready, Review, Running};
    const FROM: [JobState; 5] = [Ready, Running, Done, Dead, Review];
    // Per operation, per starting state (in FROM's order): the answer and the state after.
    #[rustfmt::skip]
    let table: &[(&str, [(&str, JobState); 5])] = &[
        ("claim",     [("claimed 1", Running), ("none", Running), ("none", Done), ("none", Dead), ("none", Review)]),
        ("heartbeat", [("lost", Ready), ("applied", Running), ("lost", Done), ("lost", Dead), ("lost", Review)]),
        ("complete",  [("lost", Ready), ("applied", Done), ("lost", Done), ("lost", Dead), ("lost", Review)]),
        ("snooze",    [("lost", Ready), ("applied", Ready), ("lost", Done), ("lost", Dead), ("lost", Review)]),
        ("fail",      [("lost", Ready), ("retry at 3000", Ready), ("lost", Done), ("lost", Dead), ("lost", Review)]),
        ("dead_now",  [("lost", Ready), ("applied", Dead), ("lost", Done), ("lost", Dead), ("lost", Review)]),
        ("review",    [("lost", Ready), ("applied", Review), ("lost", Done), ("lost", Dead), ("lost", Review)]),
        ("reap",      [("reaped 0 dead 0", Ready), ("reaped 1 dead 0", Ready), ("reaped 0 dead 0", Done), ("reaped 0 dead 0", Dead), ("reaped 0 dead 0", Review)]),
        ("requeue",   [("false", Ready), ("false", Running), ("false", Done), ("true", Ready), ("true", Ready)]),
    ];
    for (op, expected) in table {
        for (from, (answer, after)) in FROM.iter().zip(expected) {
            let (queue, a) = queue_with_job_in(backend, *from).await;
            let got = apply(&queue, op, a).await;
            let now = state_of(&queue, "j").await;
            assert_eq!(
                (got.as_str(), now),
                (*answer, *after),
                "{op} from {from}: answered {got:?}, left {now}"
            );
            // The same call under another attempt never applies.
            if *from == Running && !matches!(*op, "claim" | "reap" | "requeue") {
                let (queue, a) = queue_with_job_in(backend, Running).await;
                for stale in [a - 1, a + 1] {
                    let got = apply(&queue, op, stale).await;
                    assert_eq!(got, "lost", "{op} with attempt {stale} (current {a})");
                }
                assert_eq!(state_of(&queue, "j").await, Running);
            }
        }
    }
}

async fn enqueue_is_idempotent_on_the_callers_id(backend: Backend) {
    let queue = backend.queue().await;
    assert!(queue.enqueue(job("a"), 10).await.unwrap());
    let again = NewJob::new("a", "transcribe", r#"{"other":true}"#).with_tenant("t2");
    assert!(!queue.enqueue(again, 20).await.unwrap());
    let stored = queue.get("a").await.unwrap().unwrap();
    assert_eq!(
        (
            stored.kind.as_str(),
            stored.tenant.as_str(),
            stored.created_at_ms
        ),
        ("chat", "default", 10)
    );
    assert_eq!(stored.payload, r#"{"prompt":"hi"}"#);

    // Also after the job ran: a re-enqueue of a done job does not revive it.
    let claimed = queue.claim("w", LEASE, 30).await.unwrap().unwrap();
    assert_eq!(
        queue.complete("a", claimed.attempt, "{}").await.unwrap(),
        Fenced::Applied
    );
    assert!(!queue.enqueue(job("a"), 40).await.unwrap());
    assert_eq!(state_of(&queue, "a").await, JobState::Done);

    let batch = vec![job("a"), job("b"), job("c"), job("b")];
    assert_eq!(queue.enqueue_all(batch, 50).await.unwrap(), 2);
    let stats = queue.stats(50).await.unwrap();
    assert_eq!((stats.ready, stats.done), (2, 1));
}

async fn a_stale_workers_result_is_refused_after_its_lease_is_reaped(backend: Backend) {
    let queue = backend.queue().await;
    let policy = FailPolicy::default();
    queue.enqueue(job("a"), 0).await.unwrap();
    let first = queue.claim("slow", LEASE, 0).await.unwrap().unwrap();
    assert_eq!(first.attempt, 1);

    // The lease runs out while the slow worker is still busy.
    assert_eq!(queue.reap(9_999, &policy).await.unwrap(), Reaped::default());
    let reaped = queue.reap(10_000, &policy).await.unwrap();
    assert_eq!((reaped.requeued, reaped.dead), (1, 0));
    let requeued = queue.get("a").await.unwrap().unwrap();
    assert_eq!((requeued.state, requeued.failures), (JobState::Ready, 1));
    assert_eq!(
        requeued.last_error.as_deref(),
        Some("lease expired (worker slow)")
    );

    let second = queue.claim("fast", LEASE, 10_000).await.unwrap().unwrap();
    assert_eq!(second.attempt, 2);

    // Everything the slow worker says about its claim is refused, before and after.
    assert_eq!(
        queue.heartbeat("a", 1, LEASE, 11_000).await.unwrap(),
        Fenced::Lost
    );
    assert_eq!(
        queue.complete("a", 1, r#""slow""#).await.unwrap(),
        Fenced::Lost
    );
    assert_eq!(
        queue.fail("a", 1, "x", 11_000, &policy).await.unwrap(),
        Failed::Lost
    );
    assert_eq!(
        queue.complete("a", 2, r#""fast""#).await.unwrap(),
        Fenced::Applied
    );
    assert_eq!(
        queue.complete("a", 1, r#""slow""#).await.unwrap(),
        Fenced::Lost
    );
    assert_eq!(
        queue.complete("a", 2, r#""twice""#).await.unwrap(),
        Fenced::Lost
    );

    let done = queue.get("a").await.unwrap().unwrap();
    assert_eq!(done.state, JobState::Done);
    assert_eq!(done.result.as_deref(), Some(r#""fast""#));
}

async fn a_heartbeat_keeps_the_reaper_away(backend: Backend) {
    let queue = backend.queue().await;
    let policy = FailPolicy::default();
    queue.enqueue(job("a"), 0).await.unwrap();
    let claimed = queue.claim("w", LEASE, 0).await.unwrap().unwrap();
    for now in [8_000, 16_000, 24_000] {
        assert_eq!(
            queue
                .heartbeat("a", claimed.attempt, LEASE, now)
                .await
                .unwrap(),
            Fenced::Applied
        );
        assert_eq!(queue.reap(now + 9_999, &policy).await.unwrap().requeued, 0);
    }
    assert_eq!(queue.reap(34_000, &policy).await.unwrap().requeued, 1);
}

async fn interactive_jobs_are_claimed_before_bulk_ones(backend: Backend) {
    let queue = backend.queue().await;
    for i in 0..3 {
        queue.enqueue(job(&format!("bulk-{i}")), 0).await.unwrap();
    }
    for i in 0..2 {
        let j = job(&format!("live-{i}"))
            .with_priority(Priority::Interactive)
            .with_tenant(format!("t{i}"));
        queue.enqueue(j, 1).await.unwrap();
    }
    // An interactive job not yet eligible does not hold bulk work back.
    let later = job("live-later")
        .with_priority(Priority::Interactive)
        .with_eligible_at(60_000);
    queue.enqueue(later, 1).await.unwrap();

    let mut order = Vec::new();
    while let Some(claimed) = queue.claim("w", LEASE, 1_000).await.unwrap() {
        order.push((claimed.id, claimed.priority));
    }
    let ids: Vec<&str> = order.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["live-0", "live-1", "bulk-0", "bulk-1", "bulk-2"]);
    let later = queue.claim("w", LEASE, 60_000).await.unwrap().unwrap();
    assert_eq!(
        (later.id.as_str(), later.priority),
        ("live-later", Priority::Interactive)
    );
}

async fn a_tenant_with_1000_jobs_does_not_starve_one_with_2(backend: Backend) {
    let queue = backend.queue().await;
    let big: Vec<NewJob> = (0..1000)
        .map(|i| job(&format!("big-{i}")).with_tenant("big"))
        .collect();
    assert_eq!(queue.enqueue_all(big, 0).await.unwrap(), 1000);
    // Idle tenants sorting between the two: work, but none of it eligible yet.
    let idle: Vec<NewJob> = (0..50)
        .map(|i| {
            job(&format!("idle-{i}"))
                .with_tenant(format!("idle-{i:02}"))
                .with_eligible_at(1_000_000)
        })
        .collect();
    queue.enqueue_all(idle, 0).await.unwrap();
    for i in 0..2 {
        queue
            .enqueue(job(&format!("small-{i}")).with_tenant("small"), 5)
            .await
            .unwrap();
    }

    let mut tenants = Vec::new();
    for _ in 0..6 {
        let claimed = queue.claim("w", LEASE, 100).await.unwrap().unwrap();
        tenants.push(claimed.tenant);
    }
    assert_eq!(tenants, ["big", "small", "big", "small", "big", "big"]);

    // Within a tenant, oldest first.
    let next = queue.claim("w", LEASE, 100).await.unwrap().unwrap();
    assert_eq!(next.id, "big-4");
}

async fn one_job_of_a_small_tenant_is_claimed_within_one_round_past_10000_and_idle_tenants(
    backend: Backend,
) {
    let queue = backend.queue().await;
    // Idle tenants sort on both sides of the two with work; theirs is all snoozed far ahead.
    let idle: Vec<NewJob> = (0..200)
        .map(|i| {
            job(&format!("idle-{i}"))
                .with_tenant(format!("{}-{i:03}", if i % 2 == 0 { "a" } else { "z" }))
                .with_eligible_at(i64::MAX)
        })
        .collect();
    queue.enqueue_all(idle, 0).await.unwrap();
    let big: Vec<NewJob> = (0..10_000)
        .map(|i| job(&format!("big-{i}")).with_tenant("m-big"))
        .collect();
    queue.enqueue_all(big, 0).await.unwrap();
    // The cursor stands on the big tenant when the small one's job arrives.
    for _ in 0..3 {
        assert_eq!(
            queue.claim("w", LEASE, 10).await.unwrap().unwrap().tenant,
            "m-big"
        );
    }
    queue
        .enqueue(job("small-0").with_tenant("m-small"), 10)
        .await
        .unwrap();
    let next = queue.claim("w", LEASE, 10).await.unwrap().unwrap();
    assert_eq!(next.id, "small-0");
}

async fn claim_many_claims_as_claim_would_in_turn(backend: Backend) {
    use JobState::Running;
    let jobs = vec![
        job("i-b1")
            .with_priority(Priority::Interactive)
            .with_tenant("b"),
        job("i-a1")
            .with_priority(Priority::Interactive)
            .with_tenant("a"),
        job("a1").with_tenant("a"),
        job("a2").with_tenant("a"),
        job("a3").with_tenant("a"),
        job("b1").with_tenant("b"),
        job("c1").with_tenant("c"),
        job("c2").with_tenant("c"),
        job("b-later").with_tenant("b").with_eligible_at(60_000),
    ];
    let (one_by_one, batched) = (backend.queue().await, backend.queue().await);
    one_by_one.enqueue_all(jobs.clone(), 0).await.unwrap();
    batched.enqueue_all(jobs, 0).await.unwrap();
    assert!(
        batched
            .claim_many("w", 0, LEASE, 1_000)
            .await
            .unwrap()
            .is_empty()
    );

    let mut singles = Vec::new();
    while let Some(claimed) = one_by_one.claim("w", LEASE, 1_000).await.unwrap() {
        singles.push(claimed.id);
    }
    // Two batches: the second goes on from the lane's cursor where the first left it.
    let first = batched.claim_many("w", 3, LEASE, 1_000).await.unwrap();
    let rest = batched.claim_many("w", 100, LEASE, 1_000).await.unwrap();
    assert_eq!(first.len(), 3);
    let ids: Vec<&str> = first.iter().chain(&rest).map(|j| j.id.as_str()).collect();
    // Interactive first, then bulk; tenants in turn (a, b, c, a, c, a), oldest first.
    let expected = ["i-a1", "i-b1", "a1", "b1", "c1", "a2", "c2", "a3"];
    assert_eq!(ids, expected);
    assert_eq!(singles, expected);
    for claimed in first.iter().chain(&rest) {
        assert_eq!(
            (
                claimed.state,
                claimed.attempt,
                claimed.lease_until_ms,
                claimed.worker.as_deref()
            ),
            (Running, 1, Some(11_000), Some("w")),
            "{}",
            claimed.id
        );
    }
    assert!(
        batched
            .claim_many("w", 10, LEASE, 1_000)
            .await
            .unwrap()
            .is_empty()
    );
    let later = batched.claim_many("w", 10, LEASE, 60_000).await.unwrap();
    let later: Vec<&str> = later.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(later, ["b-later"]);
}

async fn complete_all_applies_current_claims_and_refuses_the_rest(backend: Backend) {
    let queue = backend.queue().await;
    queue
        .enqueue_all(["a", "b", "c", "d"].map(job).to_vec(), 0)
        .await
        .unwrap();
    assert_eq!(queue.claim_many("w", 4, LEASE, 0).await.unwrap().len(), 4);
    // b's first claim goes stale (snoozed and claimed again); c is done already.
    assert_eq!(queue.snooze("b", 1, 0).await.unwrap(), Fenced::Applied);
    assert_eq!(
        queue.claim("w", LEASE, 0).await.unwrap().unwrap().attempt,
        2
    );
    assert_eq!(
        queue.complete("c", 1, r#""c""#).await.unwrap(),
        Fenced::Applied
    );

    let results = [
        ("a", 1, r#""a""#),      // current
        ("b", 1, r#""stale""#),  // b's first claim
        ("c", 1, r#""again""#),  // done
        ("b", 2, r#""b""#),      // current
        ("a", 1, r#""twice""#),  // a's claim a second time in the batch
        ("nobody", 1, r#""x""#), // no such job
    ];
    let results = results
        .iter()
        .map(|(id, a, r)| (id.to_string(), *a, r.to_string()))
        .collect();
    use Fenced::{Applied, Lost};
    assert_eq!(
        queue.complete_all(results).await.unwrap(),
        [Applied, Lost, Lost, Applied, Lost, Lost]
    );
    for (id, result) in [("a", r#""a""#), ("b", r#""b""#), ("c", r#""c""#)] {
        let stored = queue.get(id).await.unwrap().unwrap();
        assert_eq!(
            (stored.state, stored.result.as_deref()),
            (JobState::Done, Some(result))
        );
    }

    // One result that is not JSON refuses the batch before anything is written.
    let bad = vec![
        ("d".to_owned(), 1, r#""d""#.to_owned()),
        ("d".to_owned(), 1, "{oops".to_owned()),
    ];
    let err = queue.complete_all(bad).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config);
    assert_eq!(state_of(&queue, "d").await, JobState::Running);
    assert!(queue.complete_all(Vec::new()).await.unwrap().is_empty());
}

async fn snooze_counts_no_failure_and_fail_backs_off_to_its_cap(backend: Backend) {
    let queue = backend.queue().await;
    let policy = FailPolicy::default()
        .with_max_failures(10)
        .with_backoff(Duration::from_secs(1), Duration::from_secs(5));
    queue.enqueue(job("a"), 0).await.unwrap();

    let mut now = 0;
    for _ in 0..3 {
        let claimed = queue.claim("w", LEASE, now).await.unwrap().unwrap();
        now += 500;
        assert_eq!(
            queue
                .snooze("a", claimed.attempt, now + 60_000)
                .await
                .unwrap(),
            Fenced::Applied
        );
        assert!(
            queue
                .claim("w", LEASE, now + 59_999)
                .await
                .unwrap()
                .is_none()
        );
        now += 60_000;
    }
    let snoozed = queue.get("a").await.unwrap().unwrap();
    assert_eq!((snoozed.attempt, snoozed.failures), (3, 0));

    // Backoffs after failures 1, 2, 3, 4: 1 s, 2 s, 4 s, then the 5 s cap.
    for (failures, wait_ms) in [(1, 1_000), (2, 2_000), (3, 4_000), (4, 5_000)] {
        let claimed = queue.claim("w", LEASE, now).await.unwrap().unwrap();
        let outcome = queue
            .fail("a", claimed.attempt, "503", now, &policy)
            .await
            .unwrap();
        assert_eq!(
            outcome,
            Failed::Retry {
                eligible_at_ms: now + wait_ms
            }
        );
        let stored = queue.get("a").await.unwrap().unwrap();
        assert_eq!(stored.failures, failures);
        assert_eq!(stored.last_error.as_deref(), Some("503"));
        assert!(
            queue
                .claim("w", LEASE, now + wait_ms - 1)
                .await
                .unwrap()
                .is_none()
        );
        now += wait_ms;
    }
}

async fn a_job_failing_past_its_limit_is_dead_with_a_reason_and_requeue_revives_it(
    backend: Backend,
) {
    let queue = backend.queue().await;
    let policy = FailPolicy::default()
        .with_max_failures(3)
        .with_backoff(Duration::ZERO, Duration::ZERO);
    queue.enqueue(job("a"), 0).await.unwrap();
    queue
        .enqueue(job("b").with_eligible_at(1_000_000), 0)
        .await
        .unwrap();

    let mut answers = Vec::new();
    for _ in 0..3 {
        let claimed = queue.claim("w", LEASE, 0).await.unwrap().unwrap();
        assert_eq!(claimed.id, "a");
        answers.push(
            queue
                .fail("a", claimed.attempt, "502 bad gateway", 0, &policy)
                .await
                .unwrap(),
        );
    }
    assert_eq!(
        answers,
        [
            Failed::Retry { eligible_at_ms: 0 },
            Failed::Retry { eligible_at_ms: 0 },
            Failed::Dead
        ]
    );
    let dead = queue.dead_letters().await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].id, "a");
    assert_eq!(dead[0].failures, 3);
    assert_eq!(
        dead[0].reason.as_deref(),
        Some("3 failures, the last: 502 bad gateway")
    );
    let stats = queue.stats(0).await.unwrap();
    assert_eq!((stats.ready, stats.dead), (1, 1));
    assert!(queue.claim("w", LEASE, 0).await.unwrap().is_none());

    assert!(queue.requeue("a", 100).await.unwrap());
    assert!(queue.dead_letters().await.unwrap().is_empty());
    let revived = queue.claim("w", LEASE, 100).await.unwrap().unwrap();
    assert_eq!(
        (revived.id.as_str(), revived.attempt, revived.failures),
        ("a", 4, 0)
    );
    assert_eq!(revived.reason, None);
    assert_eq!(queue.complete("a", 4, "{}").await.unwrap(), Fenced::Applied);

    // A terminal 4xx goes straight to the dead letters.
    let b = queue.claim("w", LEASE, 1_000_000).await.unwrap().unwrap();
    assert_eq!(
        queue
            .dead_now("b", b.attempt, "401 invalid key")
            .await
            .unwrap(),
        Fenced::Applied
    );
    let dead = queue.dead_letters().await.unwrap();
    assert_eq!(
        (dead[0].id.as_str(), dead[0].reason.as_deref()),
        ("b", Some("401 invalid key"))
    );
}

async fn a_lease_that_keeps_expiring_ends_in_the_dead_letters(backend: Backend) {
    let queue = backend.queue().await;
    let policy = FailPolicy::default().with_max_failures(2);
    queue.enqueue(job("a"), 0).await.unwrap();
    queue.claim("w1", LEASE, 0).await.unwrap().unwrap();
    assert_eq!(queue.reap(10_000, &policy).await.unwrap().requeued, 1);
    queue.claim("w2", LEASE, 10_000).await.unwrap().unwrap();
    let reaped = queue.reap(20_000, &policy).await.unwrap();
    assert_eq!((reaped.requeued, reaped.dead), (0, 1));
    let dead = queue.get("a").await.unwrap().unwrap();
    assert_eq!(dead.state, JobState::Dead);
    assert_eq!(
        dead.reason.as_deref(),
        Some("2 failures, the last: lease expired (worker w2)")
    );
}

async fn stats_count_states_and_the_oldest_eligible_wait(backend: Backend) {
    let queue = backend.queue().await;
    assert_eq!(queue.stats(0).await.unwrap(), QueueStats::default());
    queue
        .enqueue(job("a").with_eligible_at(1_000), 0)
        .await
        .unwrap();
    queue
        .enqueue(job("b").with_eligible_at(3_000), 0)
        .await
        .unwrap();
    queue
        .enqueue(job("c").with_eligible_at(9_000), 0)
        .await
        .unwrap();
    let stats = queue.stats(5_000).await.unwrap();
    assert_eq!(stats.ready, 3);
    assert_eq!(stats.oldest_eligible_age, Some(Duration::from_secs(4)));
    let claimed = queue.claim("w", LEASE, 5_000).await.unwrap().unwrap();
    assert_eq!(claimed.id, "a");
    let stats = queue.stats(5_000).await.unwrap();
    assert_eq!((stats.ready, stats.running), (2, 1));
    assert_eq!(stats.oldest_eligible_age, Some(Duration::from_secs(2)));
    assert_eq!(queue.stats(500).await.unwrap().oldest_eligible_age, None);
    assert_eq!(stats.next_eligible_at_ms, Some(3_000));

    // The two denominators: a claim snoozed (a 429), then answered; one answer refused by
    // its contract.
    let _ = queue.snooze("a", claimed.attempt, 5_000).await.unwrap();
    let again = queue.claim("w", LEASE, 5_000).await.unwrap().unwrap();
    let _ = queue.complete(&again.id, again.attempt, "1").await.unwrap();
    let b = queue.claim("w", LEASE, 5_000).await.unwrap().unwrap();
    let _ = queue.review(&b.id, b.attempt, "2", "no").await.unwrap();
    let stats = queue.stats(5_000).await.unwrap();
    assert_eq!((stats.claims, stats.done, stats.review), (3, 1, 1));
    assert_eq!(stats.transport_success(), Some(2.0 / 3.0));
    assert_eq!(stats.correctness(), Some(0.5));
}

async fn a_payload_or_result_that_is_not_json_is_refused(backend: Backend) {
    let queue = backend.queue().await;
    let err = queue
        .enqueue(NewJob::new("a", "chat", "prompt: hi"), 0)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config);
    assert!(
        err.to_string().contains("payload of job \"a\" is not JSON"),
        "{err}"
    );
    let err = queue
        .enqueue(NewJob::new("", "chat", "{}"), 0)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config);
    // One bad job in a batch adds none.
    let batch = vec![job("b"), NewJob::new("c", "chat", "{")];
    assert!(queue.enqueue_all(batch, 0).await.is_err());
    assert_eq!(queue.stats(0).await.unwrap().ready, 0);

    queue.enqueue(job("d"), 0).await.unwrap();
    let claimed = queue.claim("w", LEASE, 0).await.unwrap().unwrap();
    let err = queue
        .complete("d", claimed.attempt, "{oops")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config);
    assert_eq!(state_of(&queue, "d").await, JobState::Running);
}

async fn handles_claiming_concurrently_from_one_store_never_share_a_claim(backend: Backend) {
    const JOBS: usize = 300;
    const CONNECTIONS: usize = 4;
    const TASKS_PER_CONNECTION: usize = 3;
    let (spec, _dir) = backend.store("concurrent-claims");
    let mut queues = Vec::new();
    for _ in 0..CONNECTIONS {
        queues.push(Queue::open(&spec).await.unwrap());
    }
    let jobs: Vec<NewJob> = (0..JOBS)
        .map(|i| job(&format!("job-{i}")).with_tenant(format!("t{}", i % 7)))
        .collect();
    assert_eq!(queues[0].enqueue_all(jobs, 0).await.unwrap(), JOBS as u64);

    let claims: Arc<Mutex<HashMap<(String, u32), u32>>> = Arc::default();
    let mut tasks = Vec::new();
    for (c, queue) in queues.iter().enumerate() {
        for t in 0..TASKS_PER_CONNECTION {
            let (queue, claims) = (queue.clone(), claims.clone());
            let worker = format!("c{c}-t{t}");
            tasks.push(tokio::spawn(async move {
                let mut applied = 0;
                while let Some(claimed) = queue.claim(&worker, LEASE, 1_000).await.unwrap() {
                    *claims
                        .lock()
                        .unwrap()
                        .entry((claimed.id.clone(), claimed.attempt))
                        .or_insert(0) += 1;
                    // Every third job is snoozed once (to now), so it is claimed twice.
                    let n: usize = claimed.id["job-".len()..].parse().unwrap();
                    let outcome = if n.is_multiple_of(3) && claimed.attempt == 1 {
                        queue
                            .snooze(&claimed.id, claimed.attempt, 1_000)
                            .await
                            .unwrap()
                    } else {
                        applied += 1;
                        let result = format!(r#"{{"by":"{worker}"}}"#);
                        queue
                            .complete(&claimed.id, claimed.attempt, &result)
                            .await
                            .unwrap()
                    };
                    assert_eq!(outcome, Fenced::Applied, "{worker} on {}", claimed.id);
                }
                applied
            }));
        }
    }
    let mut completed = 0;
    for task in tasks {
        completed += task.await.unwrap();
    }

    let claims = std::mem::take(&mut *claims.lock().unwrap());
    let twice: Vec<_> = claims.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "claimed more than once: {twice:?}");
    assert_eq!(claims.len(), JOBS + JOBS.div_ceil(3));
    assert_eq!(completed, JOBS);
    let stats = queues[1].stats(1_000).await.unwrap();
    assert_eq!(
        (stats.done, stats.ready, stats.running),
        (JOBS as u64, 0, 0)
    );
}

// SQLite only: the file, its schema version, a file that is not a database.

#[tokio::test]
async fn a_file_keeps_its_jobs_across_opens() {
    let dir = TempDir::new("jobs", "reopen");
    let path = dir.path("queue.sqlite");
    {
        let queue = Queue::sqlite(&path).await.unwrap();
        queue.enqueue(job("a"), 0).await.unwrap();
        queue.claim("w", LEASE, 0).await.unwrap().unwrap();
    }
    let queue = Queue::sqlite(&path).await.unwrap();
    let stored = queue.get("a").await.unwrap().unwrap();
    assert_eq!((stored.state, stored.attempt), (JobState::Running, 1));
    assert!(
        dir.path("queue.sqlite-wal").exists(),
        "the file is in WAL mode"
    );
}

#[tokio::test]
async fn a_database_with_a_newer_schema_is_refused() {
    let dir = TempDir::new("jobs", "newer-schema");
    let path = dir.path("queue.sqlite");
    drop(Queue::sqlite(&path).await.unwrap());
    let version: i64 = {
        let conn = rusqlite::Connection::open(&path).unwrap();
        let v = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        conn.pragma_update(None, "user_version", v + 1).unwrap();
        v
    };
    assert!(version >= 1);
    let err = Queue::sqlite(&path).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config);
    let message = err.to_string();
    assert!(
        message.contains(&format!("schema version {}", version + 1))
            && message.contains("newer than this build")
            && message.contains("queue.sqlite"),
        "{message}"
    );
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_an_io_error() {
    let dir = TempDir::new("jobs", "not-a-database");
    let path = dir.path("queue.sqlite");
    std::fs::write(&path, vec![b'x'; 4096]).unwrap();
    let err = Queue::sqlite(&path).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io);
    assert!(err.to_string().contains("not an SQLite database"), "{err}");

    let missing_dir = dir.path("no/such/dir/queue.sqlite");
    let err = Queue::sqlite(&missing_dir).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io);
    assert!(err.to_string().contains("no/such/dir"), "{err}");
}
