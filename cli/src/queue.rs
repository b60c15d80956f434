//! What the command's jobs share about their durable queue.

use llm_failover::clock::{Clock, TokioClock};
use llm_failover_queue::Queue;

/// Now, in the milliseconds since the Unix epoch that every queue operation takes (0 before
/// the epoch), from the clock the client runs on.
pub(crate) fn now_ms() -> i64 {
    TokioClock
        .wall()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The queue `spec` opened, as it may be shown: an SQLite spec as given (`sqlite:PATH`), a
/// PostgreSQL database as `host:port/database` ([`Queue::location`]), never its user,
/// password or other options, in whichever form the connection string gave them.
pub(crate) fn shown<'a>(spec: &'a str, queue: &'a Queue) -> &'a str {
    match spec.starts_with("sqlite:") {
        true => spec,
        false => queue.location(),
    }
}
