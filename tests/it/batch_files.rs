//! The `batch` example binary against hostile paths, each run a separate process with its
//! in-process emulator on loopback (`demo`): an output that is the input by any name or link,
//! outputs that cannot be read back (a pipe, a link to the process's own stdout, a device, a
//! directory, a dangling link, a hard-linked file), a symlinked output written through, a real
//! id of the form `line:N` next to a bad line N (also across a crash), and garbage lines in the
//! results file.
//!
//! The binary is built by the same cargo that runs these tests, with this crate's features, so
//! it is never stale. A run that does not end within two minutes is killed and fails its test
//! (the bugs these cases guard against hung forever); nothing here waits on the wall clock
//! for the logic itself.
#![cfg(unix)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::examples::{TempDir, batch_bin, output_within, results};

/// A fresh directory for one test.
struct Dir(TempDir);

impl Dir {
    fn new(name: &str) -> Dir {
        Dir(TempDir::new("batch-files", name))
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.path(name)
    }

    fn write(&self, name: &str, lines: &[String]) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        path
    }
}

/// What one run of the binary did.
struct Run {
    code: Option<i32>,
    stderr: String,
}

/// Runs the example in `dir` with `--input input --output output` and `extra`, in `demo`.
fn run_batch(dir: &Dir, input: &Path, output: &Path, extra: &[&str]) -> Run {
    let mut args: Vec<OsString> = vec![
        "--config".into(),
        concat!(env!("CARGO_MANIFEST_DIR"), "/providers.toml").into(),
        "--env".into(),
        "demo".into(),
        "--input".into(),
        input.into(),
        "--output".into(),
        output.into(),
    ];
    args.extend(extra.iter().map(OsString::from));
    let mut command = Command::new(batch_bin());
    command
        .args(&args)
        .current_dir(dir.0.root())
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .env_remove("LLM_FAILOVER_ENV");
    let what = format!("the batch example {args:?}");
    let out = output_within(command, Duration::from_secs(120), &what);
    Run {
        code: out.status.code(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn prompts(ids: &[&str]) -> Vec<String> {
    ids.iter()
        .map(|id| {
            json!({"id": id, "prompt": format!("Prompt text of {id}"), "max_tokens": 16})
                .to_string()
        })
        .collect()
}

#[test]
fn an_output_that_is_the_input_by_any_name_or_link_is_refused_at_once() {
    let dir = Dir::new("same");
    let input = dir.write("prompts.jsonl", &prompts(&["q1", "q2"]));
    let before = std::fs::read(&input).unwrap();
    std::fs::create_dir(dir.path("sub")).unwrap();
    std::os::unix::fs::symlink(&input, dir.path("sym.jsonl")).unwrap();
    std::fs::hard_link(&input, dir.path("hard.jsonl")).unwrap();
    let outputs = [
        input.clone(),
        dir.path("sub/../prompts.jsonl"),
        dir.path("sym.jsonl"),
        dir.path("hard.jsonl"),
    ];
    for output in outputs {
        let run = run_batch(&dir, &input, &output, &[]);
        assert_eq!(run.code, Some(1), "{output:?}: {}", run.stderr);
        assert!(
            run.stderr.contains("is the input") && run.stderr.contains("another file"),
            "{output:?}: {}",
            run.stderr
        );
        assert_eq!(
            std::fs::read(&input).unwrap(),
            before,
            "{output:?}: input untouched"
        );
    }
    // The input the other way round: a link to the results file as the input.
    let output = dir.write("results.jsonl", &[]);
    std::os::unix::fs::symlink(&output, dir.path("in-link.jsonl")).unwrap();
    let run = run_batch(&dir, &dir.path("in-link.jsonl"), &output, &[]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(run.stderr.contains("is the input"), "{}", run.stderr);
}

#[test]
fn outputs_that_cannot_be_read_back_and_replaced_are_refused_without_hanging() {
    let dir = Dir::new("non-regular");
    let input = dir.write("prompts.jsonl", &prompts(&["q1"]));
    let fifo = dir.path("fifo");
    let made = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    std::os::unix::fs::symlink("/proc/self/fd/1", dir.path("stdout.jsonl")).unwrap();
    std::os::unix::fs::symlink(dir.path("missing"), dir.path("dangling.jsonl")).unwrap();
    std::fs::create_dir(dir.path("a-directory")).unwrap();
    let linked = dir.write("linked.jsonl", &[]);
    std::fs::hard_link(&linked, dir.path("other-name.jsonl")).unwrap();
    // (output, a phrase the refusal must contain)
    let cases = [
        (fifo, "a pipe (FIFO), not a regular file"),
        (
            dir.path("stdout.jsonl"),
            "a pipe (FIFO), not a regular file",
        ),
        (PathBuf::from("/dev/null"), "a character device"),
        (dir.path("a-directory"), "a directory, not a regular file"),
        (
            dir.path("dangling.jsonl"),
            "symbolic link to a file that does not exist",
        ),
        (linked.clone(), "has 2 hard links"),
    ];
    for (output, phrase) in cases {
        let run = run_batch(&dir, &input, &output, &[]);
        assert_eq!(run.code, Some(1), "{output:?}: {}", run.stderr);
        assert!(
            run.stderr.contains("cannot use the results file") && run.stderr.contains(phrase),
            "{output:?}: {}",
            run.stderr
        );
    }
    assert_eq!(std::fs::read_to_string(&linked).unwrap(), "\n", "untouched");
}

#[test]
fn a_symlinked_output_is_written_through_and_stays_a_link() {
    let dir = Dir::new("symlink");
    let input = dir.write("prompts.jsonl", &prompts(&["q1", "q2"]));
    std::fs::create_dir(dir.path("store")).unwrap();
    let earlier = json!({"id": "earlier", "ok": false, "error": {"kind": "server", "status": 500,
        "provider": "demo-openai", "message": "boom"}, "attempts": 1});
    let target = dir.write("store/results.jsonl", &[earlier.to_string()]);
    let link = dir.path("results.jsonl");
    std::os::unix::fs::symlink(&target, &link).unwrap();

    let run = run_batch(&dir, &input, &link, &[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let out = results(&target);
    assert_eq!(
        out.keys().map(String::as_str).collect::<Vec<_>>(),
        ["earlier", "q1", "q2"]
    );
    assert!(out["q1"]["ok"] == true && out["q2"]["ok"] == true);
    assert_eq!(results(&link), out, "the link reads the compacted target");
}

#[test]
fn a_real_id_like_line_n_and_the_bad_line_n_each_keep_their_result_also_across_a_crash() {
    let dir = Dir::new("line-ids");
    let mut lines = prompts(&["line:3", "q2"]);
    lines.push("this is not json".into()); // line 3
    lines.push(json!({"id": "q2", "prompt": "again"}).to_string()); // line 4: duplicate id
    let input = dir.write("prompts.jsonl", &lines);
    let output = dir.path("results.jsonl");
    let summary = dir.path("summary.json");
    let summary_arg = summary.to_str().unwrap();

    // The resume of a results file alone (a crash leaves it as it was): without the queue.
    let args = ["--summary-json", summary_arg, "--no-queue"];
    let run = run_batch(&dir, &input, &output, &args);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let out = results(&output);
    assert_eq!(
        out.keys().map(String::as_str).collect::<Vec<_>>(),
        ["line 3", "line 4", "line:3", "q2"]
    );
    assert_eq!(out["line:3"]["ok"], true);
    for (key, word) in [("line 3", "JSON"), ("line 4", "duplicate")] {
        let bad = &out[key];
        assert_eq!(bad["error"]["kind"], "invalid_input", "{key}");
        assert_eq!(bad["error"]["line"], bad["line"], "{key}");
        assert!(
            bad["error"]["message"].as_str().unwrap().contains(word),
            "{key}"
        );
    }

    // A run killed right after it recorded line 3's report: the item whose id is "line:3"
    // has no result, so the rerun sends it (it used to be skipped as "already failed").
    let report = serde_json::to_string(&out["line 3"]).unwrap();
    std::fs::write(&output, report + "\n").unwrap();
    let run = run_batch(&dir, &input, &output, &args);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let s: Value = serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    assert_eq!(s["items"]["ok"], 2, "line:3 and q2 sent: {s}");
    assert_eq!(
        s["items"]["skipped_failed"], 1,
        "line 3's report stands: {s}"
    );
    assert_eq!(
        s["items"]["failed_by_kind"]["invalid_input"], 1,
        "line 4: {s}"
    );
    let out = results(&output);
    assert_eq!(out.len(), 4);
    assert_eq!(out["line:3"]["ok"], true);
}

#[test]
fn garbage_lines_in_the_results_file_are_warned_about_counted_and_never_printed() {
    let dir = Dir::new("garbage");
    let input = dir.write("prompts.jsonl", &prompts(&["q1", "q2"]));
    let kept = json!({"id": "earlier", "ok": true, "provider": "demo-openai", "model": "m",
        "text": "ANSWER-SENTINEL", "usage": null, "attempts": 1, "latency_ms": 5});
    let output = dir.write(
        "results.jsonl",
        &[
            kept.to_string(),
            "GARBAGE-SENTINEL: not a result".into(),
            "{\"id\": \"q9\", \"ok\": tr".into(), // a line cut short, then more lines: garbage
            kept.to_string(),
        ],
    );
    let summary = dir.path("summary.json");
    let run = run_batch(
        &dir,
        &input,
        &output,
        &["--summary-json", summary.to_str().unwrap()],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);

    let warnings: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("not a result line"))
        .collect();
    assert_eq!(warnings.len(), 2, "{}", run.stderr);
    assert!(
        warnings[0].contains("line=2") && warnings[1].contains("line=3"),
        "{warnings:?}"
    );
    assert!(
        run.stderr
            .contains("2 lines of the results file were not result lines"),
        "{}",
        run.stderr
    );
    for secret in ["GARBAGE-SENTINEL", "ANSWER-SENTINEL", "Prompt text of"] {
        assert!(
            !run.stderr.contains(secret),
            "{secret} in the logs: {}",
            run.stderr
        );
    }
    let s: Value = serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    assert_eq!(s["unreadable_lines"], 2, "{s}");
    let out = results(&output);
    assert_eq!(
        out.keys().map(String::as_str).collect::<Vec<_>>(),
        ["earlier", "q1", "q2"]
    );
}
