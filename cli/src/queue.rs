//! What the command's jobs share about their durable queue.

use llm_failover::clock::{Clock, TokioClock};

/// Now, in the milliseconds since the Unix epoch that every queue operation takes (0 before
/// the epoch), from the clock the client runs on.
pub(crate) fn now_ms() -> i64 {
    TokioClock
        .wall()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A queue's spec as it may be shown: the host and database of a PostgreSQL URL, not the user
/// and password before its `@`.
pub(crate) fn shown(spec: &str) -> &str {
    spec.split('@').next_back().unwrap_or(spec)
}
