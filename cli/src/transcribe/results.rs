//! The results file: an export of the queue, a line per file in the order named.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::Path;

use llm_failover_queue::{Job, JobState, Queue};
use serde::Serialize;

use super::files::Entry;
use super::handler::Transcribed;

/// A failed file's results line.
#[derive(Serialize)]
struct FailedLine<'a> {
    file: &'a str,
    ok: bool,
    error: LineError<'a>,
    attempts: u32,
}

#[derive(Serialize)]
struct LineError<'a> {
    kind: &'a str,
    message: &'a str,
}

/// A transcribed file's results line.
#[derive(Serialize)]
struct OkLine<'a> {
    file: &'a str,
    ok: bool,
    #[serde(flatten)]
    transcribed: Transcribed,
}

/// What the export wrote.
#[derive(Debug, Default)]
pub(super) struct Export {
    pub(super) ok: u64,
    pub(super) failed: u64,
    pub(super) pending: u64,
    pub(super) failed_by_kind: HashMap<String, u64>,
}

/// Writes the results file from the queue, in the order of the files, through a temporary file
/// renamed over it; lines of files this run did not name are kept after them.
pub(super) async fn export(
    queue: &Queue,
    entries: &[Entry],
    output: &Path,
) -> Result<Export, String> {
    let mut export = Export::default();
    let mut lines = Vec::new();
    for entry in entries {
        let file = entry.found.file.as_str();
        let line = match &entry.audio {
            Err(why) => Some(failed_line(file, "invalid_input", why, 0)),
            Ok(rec) => {
                let job = queue
                    .get(&rec.id)
                    .await
                    .map_err(|e| format!("the queue: {e}"))?;
                job.and_then(|job| job_line(file, &job))
            }
        };
        match line {
            Some((line, kind)) => {
                match kind {
                    None => export.ok += 1,
                    Some(kind) => {
                        export.failed += 1;
                        *export.failed_by_kind.entry(kind).or_default() += 1;
                    }
                }
                lines.push(line);
            }
            None => export.pending += 1,
        }
    }
    let named: HashSet<&str> = entries.iter().map(|e| e.found.file.as_str()).collect();
    lines.extend(previous_lines(output, &named)?);
    let output = output.to_owned();
    tokio::task::spawn_blocking(move || write_replacement(&output, &lines))
        .await
        .map_err(|e| format!("writing the results: {e}"))??;
    Ok(export)
}

/// A job's results line and, for a failure, its kind; `None` while it is still queued.
fn job_line(file: &str, job: &Job) -> Option<(String, Option<String>)> {
    match job.state {
        JobState::Done => {
            let result = job.result.as_deref().unwrap_or("");
            Some(match serde_json::from_str::<Transcribed>(result) {
                Ok(transcribed) => {
                    let line = OkLine {
                        file,
                        ok: true,
                        transcribed,
                    };
                    (serde_json::to_string(&line).unwrap_or_default(), None)
                }
                Err(e) => failed_line(file, "decode", &format!("its result: {e}"), job.attempt),
            })
        }
        JobState::Dead => {
            let reason = job.last_error.as_deref().or(job.reason.as_deref());
            let (kind, message) = split_reason(reason.unwrap_or("dead"));
            Some(failed_line(file, kind, message, job.attempt))
        }
        JobState::Review => {
            let message = job.reason.as_deref().unwrap_or("refused by its contract");
            Some(failed_line(file, "review", message, job.attempt))
        }
        _ => None,
    }
}

fn failed_line(file: &str, kind: &str, message: &str, attempts: u32) -> (String, Option<String>) {
    let line = FailedLine {
        file,
        ok: false,
        error: LineError { kind, message },
        attempts,
    };
    let text = serde_json::to_string(&line).unwrap_or_default();
    (text, Some(kind.to_owned()))
}

/// A failure as the worker records it — `kind[ status][ from provider]: message` — as its kind
/// and its message; a text of another form (a lease that expired) is all message, of kind
/// `dead`.
fn split_reason(text: &str) -> (&str, &str) {
    let Some((head, message)) = text.split_once(": ") else {
        return ("dead", text);
    };
    match head.split(' ').next() {
        Some(kind)
            if !kind.is_empty() && kind.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') =>
        {
            (kind, message)
        }
        _ => ("dead", text),
    }
}

/// The lines of `output` (an earlier run's) whose file is not in `named`.
fn previous_lines(output: &Path, named: &HashSet<&str>) -> Result<Vec<String>, String> {
    let text = match std::fs::read_to_string(output) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot read {}: {e}", output.display())),
    };
    let mut kept = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let value: serde_json::Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(_) => continue, // a torn line of a killed run, or not ours
        };
        match value["file"].as_str() {
            Some(file) if !named.contains(file) => kept.push(line.to_owned()),
            _ => {}
        }
    }
    Ok(kept)
}

/// Writes `lines` to a temporary file beside `output`, synced, then renamed over it.
fn write_replacement(output: &Path, lines: &[String]) -> Result<(), String> {
    let mut name = output.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".export-{}.tmp", std::process::id()));
    let temp = output.with_file_name(name);
    let write = || -> std::io::Result<()> {
        let mut file = std::io::BufWriter::new(std::fs::File::create(&temp)?);
        for line in lines {
            file.write_all(line.as_bytes())?;
            file.write_all(b"\n")?;
        }
        file.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&temp, output)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        format!("cannot write {}: {e}", output.display())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_reason_gives_its_kind_and_message() {
        assert_eq!(
            split_reason("invalid_request: the file changed"),
            ("invalid_request", "the file changed")
        );
        assert_eq!(
            split_reason("server 503 from demo-openai: boom"),
            ("server", "boom")
        );
        assert_eq!(split_reason("lease expired"), ("dead", "lease expired"));
        assert_eq!(split_reason("Lease: expired"), ("dead", "Lease: expired"));
    }
}
