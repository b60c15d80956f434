//! The batch on a durable queue (`llm_failover_queue::QueuedJob`): enqueue once, results
//! exported in input order, reruns that send nothing, dead letters retried on request, and two
//! runs on one queue that share the work.

use std::path::{Path, PathBuf};
use std::time::Duration;

use llm_failover::batch::Stop;
use llm_failover::{Client, Credential, ProviderSettings};
use llm_failover_emulator::scripted::{Reply, ScriptedServer};
use llm_failover_queue::Queue;
use llm_failover_queue::QueuedJob;
use serde_json::Value;

use crate::support::*;

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!(
            "llm-failover-batch-queue-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn input(dir: &Dir, n: usize) -> PathBuf {
    let mut text = String::new();
    for i in 0..n {
        text.push_str(&format!(
            "{{\"id\": \"q{i}\", \"prompt\": \"question {i}\"}}\n"
        ));
        if i == 1 {
            text.push_str("not json\n");
        }
    }
    let path = dir.path("prompts.jsonl");
    std::fs::write(&path, text).unwrap();
    path
}

async fn queue(dir: &Dir) -> Queue {
    Queue::open(&format!("sqlite:{}", dir.path("jobs.sqlite").display()))
        .await
        .unwrap()
}

#[tokio::test]
async fn the_results_are_an_export_of_the_queue_in_input_order_and_a_rerun_sends_nothing() {
    let dir = Dir::new("export");
    let (input, output) = (input(&dir, 4), dir.path("results.jsonl"));
    let server = ScriptedServer::start().await;
    for i in 0..4 {
        server.push(CHAT, ok(&format!("answer {i}")));
    }
    let h = client(&[("a", &server)], policy());
    let job = QueuedJob::new(&input, &output, queue(&dir).await).concurrency(1);

    let report = job.run(&h.client, &Stop::new()).await.unwrap();
    assert_eq!(
        (
            report.items,
            report.enqueued,
            report.invalid,
            report.ok,
            report.failed,
            report.pending
        ),
        (4, 4, 1, 4, 1, 0),
        "{report:?}"
    );
    let got = lines(&output);
    let keys: Vec<String> = got
        .iter()
        .map(|l| match l["id"].as_str() {
            Some(id) => id.to_owned(),
            None => format!("line {}", l["line"]),
        })
        .collect();
    assert_eq!(keys, ["q0", "q1", "line 3", "q2", "q3"]);
    assert_eq!(got[2]["error"]["kind"], "invalid_input");
    assert_eq!(got[0]["ok"], true);
    assert_eq!(got[0]["provider"], "a");

    let again = QueuedJob::new(&input, &output, queue(&dir).await)
        .run(&h.client, &Stop::new())
        .await
        .unwrap();
    assert_eq!((again.enqueued, again.worker.claimed, again.ok), (0, 0, 4));
    assert_eq!(server.count(CHAT), 4, "a rerun sends nothing");
    assert_eq!(lines(&output), got);
}

#[tokio::test]
async fn a_terminal_failure_is_a_dead_letter_in_the_results_and_retry_failed_sends_it_again() {
    let dir = Dir::new("dead");
    let (input, output) = (input(&dir, 2), dir.path("results.jsonl"));
    let server = ScriptedServer::start().await;
    server.push(CHAT, ok("fine"));
    server.push(
        CHAT,
        Reply::json(400, error_body("invalid_request_error", None, "bad prompt")),
    );
    let h = client(&[("a", &server)], policy());
    let q = queue(&dir).await;
    let report = QueuedJob::new(&input, &output, q.clone())
        .concurrency(1)
        .run(&h.client, &Stop::new())
        .await
        .unwrap();
    assert_eq!((report.ok, report.failed, report.worker.dead), (1, 2, 1));
    let failed = &lines(&output)[1];
    assert_eq!(failed["id"], "q1");
    assert_eq!(failed["ok"], false);
    assert_eq!(failed["error"]["kind"], "invalid_request");
    assert_eq!(failed["error"]["status"], 400);
    assert_eq!(failed["error"]["provider"], "a");
    assert_eq!(failed["error"]["message"], "bad prompt");
    assert_eq!(q.dead_letters().await.unwrap().len(), 1);

    server.push(CHAT, ok("fine now"));
    let retried = QueuedJob::new(&input, &output, q.clone())
        .retry_failed(true)
        .run(&h.client, &Stop::new())
        .await
        .unwrap();
    assert_eq!((retried.requeued, retried.ok, retried.failed), (1, 2, 1));
    assert_eq!(lines(&output)[1]["text"], "fine now");
    assert!(q.dead_letters().await.unwrap().is_empty());
}

#[tokio::test]
async fn two_runs_on_one_queue_share_the_work_and_each_item_is_answered_once() {
    let dir = Dir::new("shared");
    let (input, output) = (input(&dir, 40), dir.path("results.jsonl"));
    let server = ScriptedServer::start().await;
    for i in 0..40 {
        server.push(
            CHAT,
            ok(&format!("answer {i}")).delay(Duration::from_millis(2)),
        );
    }
    // Two workers in one process share its clock: real time here, since a manual clock's
    // sleep in one worker's idle wait would jump the other's leases past their end while its
    // requests are on the wire (reaped, sent twice). The run takes about one idle poll.
    let client = Client::builder()
        .provider(
            openai("a", &server),
            ProviderSettings::new().credential(Credential::new(SENTINEL)),
        )
        .policy(policy())
        .build()
        .unwrap();
    let (q1, q2) = (queue(&dir).await, queue(&dir).await);
    let one = QueuedJob::new(&input, &output, q1).concurrency(4);
    let two = QueuedJob::new(&input, dir.path("results-2.jsonl"), q2).concurrency(4);
    let stop = Stop::new();
    let (a, b) = tokio::join!(one.run(&client, &stop), two.run(&client, &stop));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.enqueued + b.enqueued, 40, "each item enqueued once");
    assert_eq!(a.worker.completed + b.worker.completed, 40, "{a:?} {b:?}");
    assert_eq!(server.count(CHAT), 40, "each item sent once");
    // Whichever export ran last has every answer; each has no item twice.
    let exported = [lines(&output), lines(&dir.path("results-2.jsonl"))];
    assert!(
        exported
            .iter()
            .any(|e| e.iter().filter(|l| l["ok"] == true).count() == 40)
    );
}
