//! The PostgreSQL queue over TLS, against a real server with `ssl = on` that takes TCP over
//! TLS only, `postgres` with a password (tests/it/support/postgres.rs; certificates from
//! tests/it/support/certs.rs): each `sslmode` does what libpq's does; a certificate the client
//! does not trust, or a name it is not for, is refused with a message naming the database and
//! why; nothing goes on in plain text; and the password, in any form of connection string,
//! appears in no error, log line, `Debug` or output of the command.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::Capture;
use llm_failover::ErrorKind;
use llm_failover_queue::{Fenced, JobState, NewJob, Queue};

use crate::support::examples::{TempDir, batch_bin, output_within};
use crate::support::postgres::{CERTIFIED, PASSWORD, PgServer};

const LEASE: Duration = Duration::from_secs(10);

/// A password that is not the server's: it must appear in no output either.
const WRONG: &str = "pw-WRONG-SENTINEL-2718";

/// Fails when `text` holds a password; names only `what` (never the text's secret).
fn assert_no_password(what: &str, text: &str) {
    for secret in [PASSWORD, WRONG] {
        assert!(
            !text.contains(secret),
            "{what} shows a password:\n{}",
            text.replace(secret, "<PASSWORD>")
        );
    }
}

fn shown(p: &Path) -> String {
    p.display().to_string()
}

/// `postgres` with the password to `db` on `server` over TCP, `query` its options.
fn url(server: &PgServer, db: &str, query: &str) -> String {
    let port = server.port();
    format!("postgres://postgres:{PASSWORD}@127.0.0.1:{port}/{db}?{query}")
}

/// Opens the queue `spec` names: its error, checked for the password, or the queue.
async fn open(spec: &str) -> Result<Queue, llm_failover::Error> {
    let opened = Queue::open(spec).await;
    match &opened {
        Ok(queue) => assert_no_password("a queue's Debug", &format!("{queue:?}")),
        Err(e) => {
            assert_no_password("an error", &e.to_string());
            assert_no_password("an error's Debug", &format!("{e:?}"));
        }
    }
    opened
}

/// Enqueues, claims and completes a new job on `queue` (which has no other job ready).
async fn round_trip(queue: &Queue) {
    static JOBS: AtomicUsize = AtomicUsize::new(0);
    let id = format!("job-{}", JOBS.fetch_add(1, Ordering::Relaxed));
    let job = NewJob::new(&id, "chat", r#"{"prompt":"hi"}"#);
    assert!(queue.enqueue(job, 0).await.unwrap());
    let job = queue.claim("w", LEASE, 0).await.unwrap().unwrap();
    assert_eq!(job.id, id);
    let completed = queue.complete(&id, job.attempt, r#""hello""#).await;
    assert_eq!(completed.unwrap(), Fenced::Applied);
    let job = queue.get(&id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Done);
}

/// A case's outcome: the queue opens, or its error is of `kind` and says each of `words`.
enum Outcome {
    Opens,
    Refused(ErrorKind, Vec<String>),
}

fn refused(kind: ErrorKind, words: &[&str]) -> Outcome {
    Outcome::Refused(kind, words.iter().map(|w| (*w).to_owned()).collect())
}

/// Opens each case's spec and checks its outcome; labels name the cases (specs hold the
/// password).
async fn check<L: std::fmt::Display>(cases: Vec<(L, String, Outcome)>) {
    for (label, spec, outcome) in cases {
        match (open(&spec).await, outcome) {
            (Ok(queue), Outcome::Opens) => round_trip(&queue).await,
            (Err(e), Outcome::Refused(kind, words)) => {
                assert_eq!(e.kind(), kind, "{label}: {e}");
                let message = e.to_string();
                for word in words {
                    assert!(message.contains(&word), "{label}: {word:?} in {message}");
                }
            }
            (Ok(_), Outcome::Refused(..)) => panic!("{label}: the queue opened"),
            (Err(e), Outcome::Opens) => panic!("{label}: {e}"),
        }
    }
}

#[tokio::test]
async fn the_queue_runs_over_verify_full_in_either_form() {
    let (capture, _guard) = Capture::start();
    let server = PgServer::shared_tls();
    let ca = shown(&server.certs().unwrap().ca);
    let port = server.port();
    let (a, b) = (server.create_database(), server.create_database());
    let url = url(server, &a, &format!("sslmode=verify-full&sslrootcert={ca}"));
    let keywords = format!(
        "host=127.0.0.1 port={port} user=postgres password='{PASSWORD}' dbname={b} \
         sslmode=verify-full sslrootcert='{ca}'"
    );
    for (spec, db) in [(url, a), (keywords, b)] {
        let queue = open(&spec).await.unwrap();
        assert_eq!(queue.location(), format!("127.0.0.1:{port}/{db}"));
        round_trip(&queue).await;
    }
    assert_no_password("the log", &capture.text());
}

#[tokio::test]
async fn a_certificate_the_client_does_not_trust_is_refused_saying_where_and_why() {
    let (capture, _guard) = Capture::start();
    let server = PgServer::shared_tls();
    let (db, port) = (server.create_database(), server.port());
    let certs = server.certs().unwrap();
    let (ca, other) = (shown(&certs.ca), shown(&certs.other_ca));
    let here = format!("jobs database 127.0.0.1:{port}/{db}: connecting");
    let untrusted = |mode: &str| {
        let spec = url(server, &db, &format!("sslmode={mode}&sslrootcert={other}"));
        let words = [here.as_str(), "certificate", "not signed by a CA"];
        (mode.to_owned(), spec, refused(ErrorKind::Io, &words))
    };
    // Connected by address, checked against a name the certificate is not for.
    let by_name = |mode: &str| {
        format!(
            "host=wrong.example hostaddr=127.0.0.1 port={port} user=postgres \
             password={PASSWORD} dbname={db} sslmode={mode} sslrootcert={ca}"
        )
    };
    let wrong_name = [
        &format!("jobs database wrong.example:{port}/{db}")[..],
        "certificate",
        "not for the host",
    ];
    let cases = vec![
        untrusted("verify-full"),
        untrusted("verify-ca"),
        // A CA file makes require and prefer check the chain (libpq's rule): no plain text.
        untrusted("require"),
        untrusted("prefer"),
        (
            "wrong name, verify-full".to_owned(),
            by_name("verify-full"),
            refused(ErrorKind::Io, &wrong_name),
        ),
        (
            "wrong name, verify-ca".to_owned(),
            by_name("verify-ca"),
            Outcome::Opens,
        ),
    ];
    check(cases).await;
    assert_no_password("the log", &capture.text());
}

#[tokio::test]
async fn each_sslmode_against_a_server_that_takes_tls_only() {
    let (capture, _guard) = Capture::start();
    let server = PgServer::shared_tls();
    let ca = shown(&server.certs().unwrap().ca);
    let db = |s: &PgServer| s.create_database();
    let cases = vec![
        (
            "prefer, the default",
            url(server, &db(server), ""),
            Outcome::Opens,
        ),
        (
            "require",
            url(server, &db(server), "sslmode=require"),
            Outcome::Opens,
        ),
        (
            "require with the CA",
            url(
                server,
                &db(server),
                &format!("sslmode=require&sslrootcert={ca}"),
            ),
            Outcome::Opens,
        ),
        (
            "verify-ca",
            url(
                server,
                &db(server),
                &format!("sslmode=verify-ca&sslrootcert={ca}"),
            ),
            Outcome::Opens,
        ),
        // Plain TCP: the server refuses it, and says why.
        (
            "disable",
            url(server, &db(server), "sslmode=disable"),
            refused(ErrorKind::Io, &["no pg_hba.conf entry", "no encryption"]),
        ),
        (
            "a wrong password",
            url(server, &db(server), "sslmode=require").replace(PASSWORD, WRONG),
            refused(ErrorKind::Io, &["password authentication failed"]),
        ),
    ];
    check(cases).await;
    assert_no_password("the log", &capture.text());
}

#[tokio::test]
async fn tls_is_never_given_up_for_plain_text_where_it_is_required() {
    let plain = PgServer::shared();
    let db = plain.create_database();
    let port = plain.port();
    let ca = shown(&PgServer::shared_tls().certs().unwrap().ca);
    let url = |query: &str| format!("{}?{query}", plain.url(&db));
    let no_tls = [
        &format!("jobs database 127.0.0.1:{port}/{db}")[..],
        "server does not support TLS",
        "never given up",
    ];
    let cases = vec![
        (
            "require",
            url("sslmode=require"),
            refused(ErrorKind::Io, &no_tls),
        ),
        (
            "verify-full",
            url(&format!("sslmode=verify-full&sslrootcert={ca}")),
            refused(ErrorKind::Io, &no_tls),
        ),
        (
            "require, key=value",
            format!("host=127.0.0.1 port={port} user=postgres dbname={db} sslmode=require"),
            refused(ErrorKind::Io, &no_tls),
        ),
        // prefer takes plain text from a server without TLS, as libpq does.
        ("prefer", url("sslmode=prefer"), Outcome::Opens),
    ];
    check(cases).await;
}

#[tokio::test]
async fn a_client_certificate_is_sent_when_named() {
    let server = PgServer::shared_tls();
    server.create_database_named(CERTIFIED);
    let certs = server.certs().unwrap();
    let (ca, cert, key) = (
        shown(&certs.ca),
        shown(&certs.client_cert),
        shown(&certs.client_key),
    );
    let base = format!("sslmode=verify-full&sslrootcert={ca}");
    let cases = vec![
        (
            "without a certificate",
            url(server, CERTIFIED, &base),
            refused(ErrorKind::Io, &["certificate"]),
        ),
        (
            "with one",
            url(
                server,
                CERTIFIED,
                &format!("{base}&sslcert={cert}&sslkey={key}"),
            ),
            Outcome::Opens,
        ),
    ];
    check(cases).await;
}

#[tokio::test]
async fn a_unix_socket_goes_on_without_tls_only_where_the_mode_allows() {
    let server = PgServer::shared_tls();
    let db = server.create_database();
    let socket = |mode: &str| {
        format!(
            "host={} port={} user=postgres dbname={db} sslmode={mode}",
            shown(server.socket_dir()),
            server.port()
        )
    };
    let cases = vec![
        ("prefer", socket("prefer"), Outcome::Opens),
        ("disable", socket("disable"), Outcome::Opens),
        (
            "require",
            socket("require"),
            refused(ErrorKind::Io, &["server does not support TLS"]),
        ),
    ];
    check(cases).await;
}

#[tokio::test]
async fn tls_files_that_cannot_serve_are_config_errors_naming_the_option() {
    let server = PgServer::shared_tls();
    let certs = server.certs().unwrap();
    let (ca, key) = (shown(&certs.ca), shown(&certs.client_key));
    let missing = format!("{ca}.missing");
    let port = server.port();
    let keywords = |options: &str| {
        format!("host=127.0.0.1 port={port} user=postgres password={PASSWORD} dbname=x {options}")
    };
    let config = |words: &[&str]| refused(ErrorKind::Config, words);
    let cases = vec![
        (
            "a CA file that is not there",
            url(
                server,
                "x",
                &format!("sslmode=verify-full&sslrootcert={missing}"),
            ),
            config(&[&format!("sslrootcert={missing}: cannot read it")]),
        ),
        (
            "a key for a CA file",
            keywords(&format!("sslmode=verify-full sslrootcert={key}")),
            config(&["sslrootcert=", "holds no PEM certificate"]),
        ),
        (
            "a certificate without its key",
            keywords(&format!(
                "sslrootcert={ca} sslmode=verify-full sslcert={ca}"
            )),
            config(&["sslcert and sslkey go together"]),
        ),
        (
            "verify-full without a CA",
            url(server, "x", "sslmode=verify-full"),
            config(&["give sslrootcert"]),
        ),
        (
            "sslrootcert=system with require",
            keywords("sslmode=require sslrootcert=system"),
            config(&["use sslmode=verify-full"]),
        ),
        // Strings that do not parse: named by what is wrong, never quoted.
        (
            "a port that is not one",
            keywords("port=notaport"),
            config(&["connection string"]),
        ),
        (
            "an unterminated quote",
            format!("host=127.0.0.1 password='{PASSWORD}"),
            config(&["connection string"]),
        ),
        (
            "a URL with a bad parameter",
            format!("{}&port", url(server, "x", "sslmode=require")),
            config(&["connection string"]),
        ),
    ];
    check(cases).await;
}

/// `llm-failover batch --queue SPEC` on two prompts, in a directory of its own, at TRACE.
fn batch_with_queue(name: &str, spec: &str) -> (Option<i32>, String) {
    let dir = TempDir::new("pg-tls", name);
    std::fs::write(
        dir.path("prompts.jsonl"),
        "{\"id\": \"a\", \"prompt\": \"Hi?\"}\n{\"id\": \"b\", \"prompt\": \"Bye?\"}\n",
    )
    .unwrap();
    let mut command = Command::new(batch_bin());
    command
        .current_dir(dir.root())
        .env("RUST_LOG", "trace")
        .env("NO_COLOR", "1")
        .env_remove("LLM_FAILOVER_ENV")
        .env_remove("LLM_FAILOVER_REDIS_URL")
        .env_remove("LLM_FAILOVER_DEMO_KEY")
        .args(["batch", "--input", "prompts.jsonl", "--queue", spec]);
    let out = output_within(command, Duration::from_secs(120), "llm-failover batch");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

#[test]
fn the_command_shows_no_password_in_any_form_of_connection_string() {
    let server = PgServer::shared_tls();
    let ca = shown(&server.certs().unwrap().ca);
    let port = server.port();
    let tls = format!("sslmode=verify-full&sslrootcert={ca}");
    // (form, spec for the database) → it runs and shows `host:port/db` only.
    type Form<'a> = (&'a str, &'a dyn Fn(&str) -> String);
    let forms: [Form<'_>; 3] = [
        ("user-info", &|db| url(server, db, &tls)),
        ("query", &|db| {
            format!("postgres://postgres@127.0.0.1:{port}/{db}?password={PASSWORD}&{tls}")
        }),
        ("key-value", &|db| {
            format!(
                "host=127.0.0.1 port={port} dbname={db} user=postgres password={PASSWORD} \
                 sslmode=verify-full sslrootcert={ca}"
            )
        }),
    ];
    for (form, spec) in forms {
        let db = server.create_database();
        let (code, output) = batch_with_queue(form, &spec(&db));
        assert_no_password(&format!("the command ({form})"), &output);
        assert_eq!(code, Some(0), "{form}: {output}");
        let shown = format!("queue: postgres (127.0.0.1:{port}/{db})");
        assert!(output.contains(&shown), "{form}: {shown} in {output}");
        // The same forms with a wrong password: refused, and neither password shown.
        let (code, output) = batch_with_queue(form, &spec(&db).replace(PASSWORD, WRONG));
        assert_no_password(&format!("the command ({form}, refused)"), &output);
        assert_ne!(code, Some(0), "{form}: {output}");
        assert!(
            output.contains("password authentication failed"),
            "{output}"
        );
    }
    // A key=value string that does not parse is not echoed.
    let (code, output) = batch_with_queue(
        "unparsed",
        &format!("host=127.0.0.1 password={PASSWORD} port=notaport"),
    );
    assert_no_password("the command (unparsed)", &output);
    assert_ne!(code, Some(0), "{output}");
}
