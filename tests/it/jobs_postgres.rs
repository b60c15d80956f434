//! What only the PostgreSQL queue has (the state machine itself runs on both backends in
//! `jobs`): its schema versions and concurrent migrations, claims that skip what another
//! transaction holds without waiting, concurrent reapers, a server killed and restarted under
//! a queue, connection strings it refuses, and text PostgreSQL cannot store (TLS is in
//! `jobs_postgres_tls`). Every test runs
//! against a real server (tests/it/support/postgres.rs), a database of its own.

use std::time::Duration;

use llm_failover::ErrorKind;
use llm_failover_queue::{FailPolicy, NewJob, Queue};

use crate::support::postgres::PgServer;

const LEASE: Duration = Duration::from_secs(10);

/// In URLs that carry a password: it must appear in no message and no `Debug`.
const SECRET: &str = "pw-SENTINEL-4711";

fn job(id: &str) -> NewJob {
    NewJob::new(id, "chat", r#"{"prompt":"hi"}"#)
}

/// A plain client of the test's own, beside the queue.
async fn raw(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// `(url, host:port/db)` of a new database on the shared server.
fn fresh() -> (String, String) {
    let server = PgServer::shared();
    let db = server.create_database();
    (server.url(&db), format!("127.0.0.1:{}/{db}", server.port()))
}

#[tokio::test]
async fn a_database_with_a_newer_schema_is_refused() {
    let (url, name) = fresh();
    drop(Queue::postgres(&url).await.unwrap());
    let client = raw(&url).await;
    let version: i64 = client
        .query_one("SELECT version FROM llm_failover_schema", &[])
        .await
        .unwrap()
        .get(0);
    assert!(version >= 1);
    client
        .execute("UPDATE llm_failover_schema SET version = version + 1", &[])
        .await
        .unwrap();
    let err = Queue::postgres(&url).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config);
    let message = err.to_string();
    assert!(
        message.contains(&format!("schema version {}", version + 1))
            && message.contains("newer than this build")
            && message.contains(&name),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_connecting_to_a_new_database_at_once_migrate_it_once() {
    let (url, _) = fresh();
    let connecting: Vec<_> = (0..6)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { Queue::postgres(&url).await })
        })
        .collect();
    let mut queues = Vec::new();
    for task in connecting {
        queues.push(task.await.unwrap().unwrap());
    }
    let row = raw(&url)
        .await
        .query_one(
            "SELECT count(*), min(version), max(version) FROM llm_failover_schema",
            &[],
        )
        .await
        .unwrap();
    let (rows, low, high): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(rows, 1);
    assert_eq!(low, high);
    // Every queue works on the one schema.
    for (i, queue) in queues.iter().enumerate() {
        assert!(queue.enqueue(job(&format!("j{i}")), 0).await.unwrap());
    }
    assert_eq!(queues[0].stats(0).await.unwrap().ready, 6);
}

#[tokio::test]
async fn a_claim_skips_what_another_transaction_holds_without_waiting() {
    let (url, _) = fresh();
    let queue = Queue::postgres(&url).await.unwrap();
    for (id, tenant, at) in [("a", "t1", 0), ("b", "t1", 1), ("c", "t2", 0)] {
        let new = job(id).with_tenant(tenant).with_eligible_at(at);
        queue.enqueue(new, 0).await.unwrap();
    }
    // Another transaction holds job a and the bulk lane's tenant cursor.
    let mut other = raw(&url).await;
    let tx = other.transaction().await.unwrap();
    tx.batch_execute(
        "SELECT 1 FROM jobs WHERE id = 'a' FOR UPDATE;
         SELECT 1 FROM tenant_cursor WHERE lane = 'bulk' FOR UPDATE;",
    )
    .await
    .unwrap();
    let claim = || async {
        tokio::time::timeout(Duration::from_secs(10), queue.claim("w", LEASE, 100))
            .await
            .expect("a claim waited for another transaction's locks")
            .unwrap()
            .map(|j| j.id)
    };
    // t1's oldest job is held: its next one. The cursor is held: it does not move, so t1
    // comes first again, where only a (held) is left: t2's job.
    assert_eq!(claim().await.as_deref(), Some("b"));
    assert_eq!(claim().await.as_deref(), Some("c"));
    assert_eq!(claim().await, None);
    tx.rollback().await.unwrap();
    assert_eq!(claim().await.as_deref(), Some("a"));
    let cursor: String = other
        .query_one("SELECT tenant FROM tenant_cursor WHERE lane = 'bulk'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(cursor, "t1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_reapers_at_once_count_each_expired_lease_once() {
    const JOBS: usize = 40;
    let (url, _) = fresh();
    let (one, two) = (
        Queue::postgres(&url).await.unwrap(),
        Queue::postgres(&url).await.unwrap(),
    );
    let jobs = (0..JOBS).map(|i| job(&format!("j{i}"))).collect();
    one.enqueue_all(jobs, 0).await.unwrap();
    assert_eq!(
        one.claim_many("w", JOBS, LEASE, 0).await.unwrap().len(),
        JOBS
    );
    let policy = FailPolicy::default();
    let reapers = [one.clone(), two.clone()]
        .map(|q| tokio::spawn(async move { q.reap(20_000, &policy).await.unwrap() }));
    let mut requeued = 0;
    for reaper in reapers {
        let reaped = reaper.await.unwrap();
        assert_eq!(reaped.dead, 0);
        requeued += reaped.requeued;
    }
    assert_eq!(requeued, JOBS as u64);
    for i in 0..JOBS {
        let stored = two.get(&format!("j{i}")).await.unwrap().unwrap();
        assert_eq!(stored.failures, 1, "j{i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_outlives_a_restart_of_its_server() {
    const CONNECTIONS: usize = 3;
    let mut server = PgServer::start();
    let db = server.create_database();
    let name = format!("127.0.0.1:{}/{db}", server.port());
    // Trust authentication: the password is accepted unread, so it can be checked for.
    let url = format!("postgres://postgres:{SECRET}@{name}");
    let queue = Queue::postgres_with(&url, CONNECTIONS).await.unwrap();
    let debug = format!("{queue:?}");
    assert!(debug.contains(&name) && !debug.contains(SECRET), "{debug}");
    assert!(queue.enqueue(job("before"), 0).await.unwrap());
    for _ in 0..CONNECTIONS {
        queue.stats(0).await.unwrap(); // every connection open
    }

    server.kill();
    // Every call in the outage (one per connection) is an Io error naming the database and
    // what it was doing.
    for i in 0..CONNECTIONS {
        let err = queue
            .enqueue(job(&format!("lost-{i}")), 0)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Io);
        let message = err.to_string();
        assert!(
            message.contains(&format!("jobs database {name}")) && message.contains("enqueueing"),
            "{message}"
        );
        assert!(!message.contains(SECRET), "{message}");
    }

    server.restart();
    // The same queue, from the first call on, on every connection.
    for i in 0..2 * CONNECTIONS {
        assert!(queue.enqueue(job(&format!("after-{i}")), 0).await.unwrap());
    }
    let stats = queue.stats(0).await.unwrap();
    assert_eq!(stats.ready, 1 + 2 * CONNECTIONS as u64, "{stats:?}");
    assert!(queue.get("before").await.unwrap().is_some());
}

#[tokio::test]
async fn a_server_that_is_not_there_is_an_io_error_naming_it() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let url = format!("postgres://postgres:{SECRET}@127.0.0.1:{port}/nowhere");
    let err = Queue::postgres(&url).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io);
    let message = err.to_string();
    assert!(
        message.contains(&format!(
            "jobs database 127.0.0.1:{port}/nowhere: connecting"
        )),
        "{message}"
    );
    assert!(!message.contains(SECRET), "{message}");
}

#[tokio::test]
async fn text_postgresql_cannot_store_is_refused_before_it_is_sent() {
    let (url, _) = fresh();
    let queue = Queue::postgres(&url).await.unwrap();
    for bad in [job("a\0b"), job("a").with_tenant("t\0")] {
        let err = queue.enqueue(bad, 0).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config);
        assert!(err.to_string().contains("NUL"), "{err}");
    }
    queue.enqueue(job("a"), 0).await.unwrap();
    let err = queue.claim("w\0", LEASE, 0).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config);
    let claimed = queue.claim("w", LEASE, 0).await.unwrap().unwrap();
    let err = queue
        .fail("a", claimed.attempt, "5\x0003", 0, &FailPolicy::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Config);
    assert_eq!(queue.stats(0).await.unwrap().running, 1);
}

/// What one call of the schema's claim function read, counted by the server in a transaction
/// of a connection of its own (its per-transaction counters then hold that call only).
#[derive(Debug)]
struct ClaimReads {
    /// The ids claimed, in order.
    ids: Vec<String>,
    /// Entries of the `jobs_claim` index its scans returned.
    claim_entries: i64,
    /// Rows sequential scans of `jobs` returned.
    scanned_rows: i64,
    /// Buffers of `jobs` and of all its indexes it read.
    buffers: i64,
}

/// Calls `llm_failover_claim` as `claim_many(w, max, …, now)` calls it (interactive, then
/// bulk) and reads what it read.
async fn claim_reading(url: &str, max: i32, now: i64) -> ClaimReads {
    let mut client = raw(url).await;
    let tx = client.transaction().await.unwrap();
    let lanes = vec!["interactive", "bulk"];
    let rows = tx
        .query(
            "SELECT id FROM llm_failover_claim($1::text[], 'probe', $2::bigint, $3::bigint,
                                               $4::integer) WITH ORDINALITY AS c
             ORDER BY c.ordinality",
            &[&lanes, &(now + 60_000), &now, &max],
        )
        .await
        .unwrap();
    let read = tx
        .query_one(
            "SELECT pg_stat_get_xact_tuples_returned('jobs_claim'::regclass),
                    pg_stat_get_xact_tuples_returned('jobs'::regclass),
                    (SELECT sum(pg_stat_get_xact_blocks_fetched(r))::bigint
                     FROM (SELECT 'jobs'::regclass::oid AS r
                           UNION ALL
                           SELECT indexrelid FROM pg_index
                           WHERE indrelid = 'jobs'::regclass) AS rels)",
            &[],
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();
    ClaimReads {
        ids: rows.iter().map(|r| r.get(0)).collect(),
        claim_entries: read.get(0),
        scanned_rows: read.get(1),
        buffers: read.get(2),
    }
}

#[tokio::test]
async fn a_claim_reads_a_few_index_entries_not_every_ready_job() {
    const TENANTS: usize = 200;
    const PER_TENANT: usize = 100;
    let (url, _) = fresh();
    let queue = Queue::open(&url).await.unwrap();
    let bulk: Vec<NewJob> = (0..TENANTS * PER_TENANT)
        .map(|i| job(&format!("b{i:05}")).with_tenant(format!("t{:03}", i % TENANTS)))
        .collect();
    assert_eq!(
        queue.enqueue_all(bulk, 0).await.unwrap(),
        (TENANTS * PER_TENANT) as u64
    );
    let interactive: Vec<NewJob> = (0..3)
        .map(|i| {
            job(&format!("i{i}"))
                .with_priority(llm_failover::admission::Priority::Interactive)
                .with_tenant(format!("t{i:03}"))
        })
        .collect();
    queue.enqueue_all(interactive, 0).await.unwrap();
    raw(&url).await.batch_execute("ANALYZE jobs").await.unwrap();

    // One job among 20,003 ready. Migration 1's claim compared the lane in the tenant
    // cursor's collation, not the index's: every claim read all 20,003 entries (or every row).
    let one = claim_reading(&url, 1, 1_000).await;
    assert_eq!(one.ids, ["i0"]);
    assert!(one.claim_entries <= 4, "{one:?}");
    assert_eq!(one.scanned_rows, 0, "{one:?}");
    assert!(one.buffers <= 40, "{one:?}");

    // Across both lanes and 62 tenants: about one entry per job claimed.
    let many = claim_reading(&url, 64, 1_000).await;
    assert_eq!(many.ids.len(), 64);
    assert_eq!(many.ids[..2], ["i1", "i2"]);
    assert!(many.claim_entries <= 2 * 64, "{many:?}");
    assert_eq!(many.scanned_rows, 0, "{many:?}");
    assert!(many.buffers <= 30 * 64, "{many:?}");
}

#[tokio::test]
async fn a_claim_of_many_from_one_tenant_steps_over_none_it_just_claimed() {
    let (url, _) = fresh();
    let queue = Queue::open(&url).await.unwrap();
    let jobs: Vec<NewJob> = (0..1_000).map(|i| job(&format!("j{i:04}"))).collect();
    queue.enqueue_all(jobs, 0).await.unwrap();
    raw(&url).await.batch_execute("ANALYZE jobs").await.unwrap();
    // Each job claimed leaves its entry in the index, dead to everyone but the claim's own
    // transaction, at the front of the tenant: a claim scanning from there for each job would
    // return 1 + 2 + … + 64 = 2,080 entries.
    let claim = claim_reading(&url, 64, 1_000).await;
    let expected: Vec<String> = (0..64).map(|i| format!("j{i:04}")).collect();
    assert_eq!(claim.ids, expected);
    assert!(claim.claim_entries <= 2 * 64, "{claim:?}");
    assert_eq!(claim.scanned_rows, 0, "{claim:?}");
    assert!(claim.buffers <= 30 * 64, "{claim:?}");
}
