//! The results file: JSON lines appended one whole line at a time, read back to resume, and
//! compacted to one line per item at the end.
//!
//! Durability rules:
//!
//! * Each outcome is one `write_all` of a complete line (ending in `\n`) followed by a
//!   flush, before the runner counts the item as done. A `kill -9` can therefore only leave
//!   a *torn last line* (no `\n`), never lose a line that was counted.
//! * Only lines ending in `\n` count. On opening, a torn tail is cut off (its item was not
//!   counted and runs again); a complete line that does not parse is ignored, and dropped at
//!   compaction with a warning (its number and length, never its text) and a count
//!   ([`Compaction::unreadable`]).
//! * [`compact`] keeps the last line of each item (a retried item's new line replaces its old
//!   failure), writes them to a temporary file in the same directory (with the original's
//!   permissions from its creation), `fsync`s it and renames it over the original: the file
//!   is always either the old one or the new one.
//! * Lines are filed under their [`ItemKey`]: an item's `id`, or the `line` number of a bad
//!   input line that has no id of its own. The two never match each other.
//!
//! Which files: the results file must be a regular file (a pipe, terminal or device is
//! refused before anything is read); a symbolic link is followed, and its target is the file
//! appended to and replaced; a file with more than one hard link is refused, since the
//! compaction's rename would cut it off from its other names.
//!
//! Memory stays flat: resuming keeps only keys, compaction two passes over the file with a
//! map from key to the number of its last line.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use tokio::io::AsyncWriteExt;

use super::files::{Access, create_replacement, results_file};
use super::key::ItemKey;
use super::outcome::{ItemOutcome, LineHead};
use super::sink::OutcomeSink;

/// What an existing results file says is done: keys only.
///
/// # Examples
///
/// ```
/// use llm_failover::batch::ResumeIndex;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// # let path = std::env::temp_dir().join(format!("resume-index-{}.jsonl", std::process::id()));
/// std::fs::write(&path, concat!(
///     "{\"id\":\"q1\",\"ok\":false}\n",
///     "{\"id\":\"q1\",\"ok\":true}\n", // q1 was retried and succeeded
///     "{\"id\":\"q2\",\"ok\":false}\n",
/// ))?;
/// let done = ResumeIndex::load(&path).await?;
/// assert!(done.is_ok("q1") && done.is_failed("q2"));
/// assert_eq!((done.ok_count(), done.failed_count(), done.lines), (1, 1, 3));
/// assert_eq!(ResumeIndex::load("no-such-results.jsonl").await?.lines, 0);
/// # std::fs::remove_file(&path)?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResumeIndex {
    ok: HashSet<ItemKey>,
    failed: HashSet<ItemKey>,
    /// Complete lines read.
    pub lines: u64,
    /// Complete lines that were not results lines (ignored).
    pub unreadable: u64,
    /// Bytes of a torn last line (cut off when the file is opened for writing).
    pub torn_bytes: u64,
}

impl ResumeIndex {
    /// Whether the item `id`'s latest line is a success.
    pub fn is_ok(&self, id: &str) -> bool {
        self.recorded(&ItemKey::from(id)) == Some(true)
    }

    /// Whether the item `id`'s latest line is a failure.
    pub fn is_failed(&self, id: &str) -> bool {
        self.recorded(&ItemKey::from(id)) == Some(false)
    }

    /// What the latest line of `key` says: `Some(true)` a success, `Some(false)` a failure,
    /// `None` no line.
    pub fn recorded(&self, key: &ItemKey) -> Option<bool> {
        if self.ok.contains(key) {
            Some(true)
        } else if self.failed.contains(key) {
            Some(false)
        } else {
            None
        }
    }

    /// Items (and bad lines) whose latest line is a success.
    pub fn ok_count(&self) -> usize {
        self.ok.len()
    }

    /// Items (and bad lines) whose latest line is a failure.
    pub fn failed_count(&self) -> usize {
        self.failed.len()
    }

    /// Reads the results at `path` (a missing file is empty). Returns the index and the
    /// length of the file up to its last complete line.
    fn scan(path: &Path) -> io::Result<(ResumeIndex, u64)> {
        let mut index = ResumeIndex::default();
        let file = match fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((index, 0)),
            Err(e) => return Err(e),
        };
        let mut valid_len = 0u64;
        for_each_line(file, |line, complete| {
            if !complete {
                index.torn_bytes = line.len() as u64;
                return;
            }
            valid_len += line.len() as u64 + 1;
            index.lines += 1;
            match LineHead::parse(line) {
                Some(head) if head.ok => {
                    index.failed.remove(&head.key);
                    index.ok.insert(head.key);
                }
                Some(head) => {
                    index.ok.remove(&head.key);
                    index.failed.insert(head.key);
                }
                None => index.unreadable += 1,
            }
        })?;
        Ok((index, valid_len))
    }

    /// Reads the results at `path` without changing it (a missing file is empty; a
    /// symbolic link is followed).
    ///
    /// # Errors
    ///
    /// When the file exists but cannot be read, or is not a regular file
    /// ([`io::ErrorKind::InvalidInput`]: a pipe or terminal would never end).
    pub async fn load(path: impl AsRef<Path>) -> io::Result<ResumeIndex> {
        let path = path.as_ref().to_owned();
        blocking(move || {
            let path = results_file(&path, Access::Read)?;
            Self::scan(&path).map(|(index, _)| index)
        })
        .await
    }
}

/// Calls `f(line, complete)` for each line of `file` without its `\n`; `complete` is false
/// only for a last line that has no `\n`.
fn for_each_line(file: fs::File, mut f: impl FnMut(&[u8], bool)) -> io::Result<()> {
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        if reader.read_until(b'\n', &mut buf)? == 0 {
            return Ok(());
        }
        match buf.strip_suffix(b"\n") {
            Some(line) => f(line, true),
            None => f(&buf, false),
        }
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| io::Error::other(format!("results file task failed: {e}")))?
}

/// Appends outcomes to a results file, one flushed line each.
///
/// # Examples
///
/// ```no_run
/// use llm_failover::batch::ResultsWriter;
///
/// # async fn run() -> std::io::Result<()> {
/// let (mut writer, done) = ResultsWriter::open("results.jsonl").await?;
/// println!("{} ids already done", done.ok_count());
/// // ... runner.run(items, &mut writer, &stop).await? ...
/// writer.finish().await?;
/// llm_failover::batch::compact("results.jsonl").await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct ResultsWriter {
    file: tokio::fs::File,
    path: PathBuf,
    written: u64,
}

impl ResultsWriter {
    /// Opens (or creates) the results file at `path` for appending, after reading what it
    /// already holds and cutting off a torn last line.
    ///
    /// A symbolic link at `path` is followed: the writer appends to its target (see
    /// [`path`](Self::path)), which [`compact`] replaces, leaving the link in place.
    ///
    /// # Errors
    ///
    /// When the file cannot be read, truncated or opened; [`io::ErrorKind::InvalidInput`]
    /// when it is not a regular file (a pipe, a terminal, a device, a directory), is a
    /// symbolic link to nothing, or has more than one hard link (compaction would cut it off
    /// from its other names). Nothing is read or changed then.
    pub async fn open(path: impl AsRef<Path>) -> io::Result<(ResultsWriter, ResumeIndex)> {
        let path = path.as_ref().to_owned();
        let (path, (index, valid_len)) = blocking(move || {
            let path = results_file(&path, Access::Replace)?;
            let scanned = ResumeIndex::scan(&path)?;
            Ok((path, scanned))
        })
        .await?;
        if index.torn_bytes > 0 {
            let f = tokio::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .await?;
            f.set_len(valid_len).await?;
            f.sync_data().await?;
        }
        let file = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .await?;
        Ok((
            ResultsWriter {
                file,
                path,
                written: 0,
            },
            index,
        ))
    }

    /// Appends one outcome's line and flushes it.
    ///
    /// # Errors
    ///
    /// When writing fails.
    pub async fn write(&mut self, outcome: &ItemOutcome) -> io::Result<()> {
        let line = outcome.to_json_line();
        self.file.write_all(line.as_bytes()).await?;
        self.file.flush().await?;
        self.written += 1;
        Ok(())
    }

    /// Lines written by this writer.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The file's path: the one given to [`open`](Self::open), or the target of the
    /// symbolic link it named.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Flushes and syncs the file to disk, and closes it.
    ///
    /// # Errors
    ///
    /// When syncing fails.
    pub async fn finish(mut self) -> io::Result<()> {
        self.file.flush().await?;
        self.file.sync_data().await
    }
}

#[async_trait]
impl OutcomeSink for ResultsWriter {
    async fn record(&mut self, outcome: &ItemOutcome) -> io::Result<()> {
        self.write(outcome).await
    }
}

/// What [`compact`] did.
///
/// # Examples
///
/// ```
/// use llm_failover::batch::compact;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// # let path = std::env::temp_dir().join(format!("compaction-{}.jsonl", std::process::id()));
/// std::fs::write(&path, concat!(
///     "{\"id\":\"q1\",\"ok\":false}\n",
///     "{\"id\":\"q1\",\"ok\":true}\n",
///     "{\"id\":\"q2\",\"ok\":true}\n",
///     "{\"id\":\"q3\",\"ok\"", // torn by a killed run
/// ))?;
/// let done = compact(&path).await?;
/// assert_eq!((done.kept, done.replaced, done.dropped, done.unreadable), (2, 1, 1, 0));
/// assert_eq!(std::fs::read_to_string(&path)?.lines().count(), 2);
/// # std::fs::remove_file(&path)?;
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Compaction {
    /// Lines kept: one per item (id, or bad line's number).
    pub kept: u64,
    /// Older lines of an item that has a later one (e.g. a retried failure).
    pub replaced: u64,
    /// Complete lines that were not results lines, and a torn last line.
    pub dropped: u64,
    /// Of the dropped lines, the complete ones that were not results lines (garbage in the
    /// file, not a torn tail): each is warned about (`tracing::warn!`, its number and
    /// length, never its text).
    pub unreadable: u64,
}

/// Complete non-result lines warned about one by one; beyond these, one warning counts the
/// rest.
const UNREADABLE_WARNINGS: u64 = 10;

/// Warns about line `line` (`bytes` long, never its text) of the results file at `path`, the
/// `nth` that is not a result line — one by one up to a bound, then only counted.
pub fn warn_unreadable(path: &Path, line: u64, bytes: usize, nth: u64) {
    if nth <= UNREADABLE_WARNINGS {
        tracing::warn!(
            path = %path.display(),
            line,
            bytes,
            "results file: a line that is not a result line is dropped"
        );
    }
}

/// After a read of the results file at `path` that found `total` lines that are not result
/// lines: one warning for those beyond the ones warned about one by one.
pub fn warn_unreadable_rest(path: &Path, total: u64) {
    if total > UNREADABLE_WARNINGS {
        tracing::warn!(
            path = %path.display(),
            unreadable = total,
            "results file: {} more lines that are not result lines are dropped",
            total - UNREADABLE_WARNINGS
        );
    }
}

/// Rewrites the results file at `path` to hold exactly one line per item — the last one —
/// atomically (temporary file, `fsync`, rename). A missing file is left missing. A symbolic
/// link is followed: its target is replaced and the link kept. The new file has the old
/// one's permissions (a read-only file stays read-only).
///
/// Complete lines that are not results lines are dropped, each with a `tracing` warning
/// naming its line number (never its text), and counted in [`Compaction::unreadable`].
///
/// # Errors
///
/// When the file cannot be read, or the new one written or renamed (the old file is then
/// untouched); [`io::ErrorKind::InvalidInput`] when it is not a regular file or has more than
/// one hard link (as [`ResultsWriter::open`]).
pub async fn compact(path: impl AsRef<Path>) -> io::Result<Compaction> {
    let path = path.as_ref().to_owned();
    blocking(move || {
        let path = results_file(&path, Access::Replace)?;
        compact_blocking(&path)
    })
    .await
}

fn compact_blocking(path: &Path) -> io::Result<Compaction> {
    let mut report = Compaction::default();
    // Pass 1: the number of each key's last line.
    let mut last: HashMap<ItemKey, u64> = HashMap::new();
    let file = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(report),
        Err(e) => return Err(e),
    };
    let mut n = 0u64;
    for_each_line(file, |line, complete| {
        n += 1;
        if complete && let Some(head) = LineHead::parse(line) {
            last.insert(head.key, n);
        }
    })?;

    // Pass 2: copy the last line of each key.
    let tmp = temp_path(path);
    let result = (|| {
        // With the file's permissions from the start (a read-only file stays read-only).
        let mut out = BufWriter::new(create_replacement(path, &tmp)?);
        let mut n = 0u64;
        let mut failed: io::Result<()> = Ok(());
        for_each_line(fs::File::open(path)?, |line, complete| {
            n += 1;
            if failed.is_err() {
                return;
            }
            let head = if complete {
                LineHead::parse(line)
            } else {
                None
            };
            match head {
                Some(head) if last.get(&head.key) == Some(&n) => {
                    report.kept += 1;
                    failed = out.write_all(line).and_then(|()| out.write_all(b"\n"));
                }
                Some(_) => report.replaced += 1,
                None => {
                    report.dropped += 1;
                    if complete {
                        report.unreadable += 1;
                        warn_unreadable(path, n, line.len(), report.unreadable);
                    }
                }
            }
        })?;
        failed?;
        warn_unreadable_rest(path, report.unreadable);
        let file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, path)?;
        sync_dir(path);
        Ok(report)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

fn temp_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".compacting");
    path.with_file_name(name)
}

/// Makes a rename durable (best effort: not every platform can open a directory).
fn sync_dir(path: &Path) {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::batch::outcome::{Answer, Failure, FailureKind};
    use crate::error::ErrorKind;
    use crate::id::ProviderId;

    fn ok(id: &str) -> ItemOutcome {
        ItemOutcome::ok(
            id,
            Answer {
                provider: ProviderId::new("p"),
                model: "m".into(),
                text: format!("answer {id}"),
                vectors: None,
                usage: None,
                attempts: 1,
                latency: Duration::from_millis(5),
                cached: false,
                lane: crate::batch::outcome::Lane::Live,
                cost: None,
            },
        )
    }

    fn failed(id: &str) -> ItemOutcome {
        ItemOutcome::failed(
            id,
            Failure {
                kind: FailureKind::Request(ErrorKind::Server),
                status: Some(500),
                provider: Some(ProviderId::new("p")),
                message: "boom".into(),
                attempts: 1,
                line: None,
                retry_after: None,
            },
        )
    }

    fn ids(path: &Path) -> Vec<(ItemKey, bool)> {
        fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| {
                let h = LineHead::parse(l.as_bytes()).unwrap();
                (h.key, h.ok)
            })
            .collect()
    }

    #[tokio::test]
    async fn a_torn_last_line_is_ignored_cut_off_and_the_next_line_starts_clean() {
        let dir = tempdir();
        let path = dir.join("r.jsonl");
        let mut text = ok("a").to_json_line() + &failed("b").to_json_line();
        text.push_str(&ok("c").to_json_line()[..25]);
        fs::write(&path, &text).unwrap();

        let (mut w, index) = ResultsWriter::open(&path).await.unwrap();
        assert!(index.is_ok("a") && index.is_failed("b") && !index.is_ok("c"));
        assert_eq!((index.lines, index.torn_bytes), (2, 25));
        w.write(&ok("c")).await.unwrap();
        w.finish().await.unwrap();
        assert_eq!(
            ids(&path),
            [("a".into(), true), ("b".into(), false), ("c".into(), true)]
        );
    }

    #[tokio::test]
    async fn compaction_keeps_the_last_line_of_each_id_and_drops_garbage() {
        let dir = tempdir();
        let path = dir.join("r.jsonl");
        let text = [
            failed("a").to_json_line(),
            ok("b").to_json_line(),
            "not a result\n".to_string(),
            ok("a").to_json_line(),
            failed("c").to_json_line(),
            r#"{"id": "d", "ok": tr"#.to_string(),
        ]
        .concat();
        fs::write(&path, text).unwrap();
        let report = compact(&path).await.unwrap();
        assert_eq!(
            report,
            Compaction {
                kept: 3,
                replaced: 1,
                dropped: 2,
                unreadable: 1,
            }
        );
        assert_eq!(
            ids(&path),
            [("b".into(), true), ("a".into(), true), ("c".into(), false)]
        );
        assert!(!temp_path(&path).exists());
        let index = ResumeIndex::load(&path).await.unwrap();
        assert_eq!((index.ok_count(), index.failed_count()), (2, 1));
    }

    #[tokio::test]
    async fn answers_from_the_cache_and_from_a_provider_both_resume_and_compact_as_done() {
        let dir = tempdir();
        let path = dir.join("r.jsonl");
        let mut from_cache = ok("a");
        if let Ok(answer) = &mut from_cache.result {
            answer.cached = true;
            answer.attempts = 0;
        }
        let cached_line = from_cache.to_json_line();
        assert!(cached_line.contains(r#""cached":true"#), "{cached_line}");
        let text = [
            cached_line.clone(),
            ok("b").to_json_line(),
            failed("c").to_json_line(),
        ]
        .concat();
        fs::write(&path, &text).unwrap();

        let index = ResumeIndex::load(&path).await.unwrap();
        assert!(index.is_ok("a") && index.is_ok("b") && index.is_failed("c"));
        assert_eq!((index.lines, index.unreadable), (3, 0));
        let report = compact(&path).await.unwrap();
        assert_eq!((report.kept, report.unreadable), (3, 0));
        assert_eq!(fs::read_to_string(&path).unwrap(), text, "kept as written");
    }

    #[tokio::test]
    async fn a_bad_lines_report_and_an_item_with_an_id_like_line_n_are_kept_apart() {
        let dir = tempdir();
        let path = dir.join("r.jsonl");
        let bad = crate::batch::parse_line(b"not json", 3).unwrap_err();
        let text = [
            ok("line:3").to_json_line(),
            ItemOutcome::invalid_input(&bad).to_json_line(),
        ]
        .concat();
        fs::write(&path, text).unwrap();
        let index = ResumeIndex::load(&path).await.unwrap();
        assert!(index.is_ok("line:3"));
        assert_eq!(index.recorded(&ItemKey::Line(3)), Some(false));
        assert_eq!(index.recorded(&ItemKey::Line(4)), None);
        let report = compact(&path).await.unwrap();
        assert_eq!((report.kept, report.replaced), (2, 0));
        assert_eq!(
            ids(&path),
            [("line:3".into(), true), (ItemKey::Line(3), false)]
        );
    }

    #[tokio::test]
    async fn garbage_lines_are_counted_however_many() {
        let dir = tempdir();
        let path = dir.join("r.jsonl");
        let mut text = ok("a").to_json_line();
        for i in 0..25 {
            text.push_str(&format!("garbage {i}\n"));
        }
        fs::write(&path, text).unwrap();
        let report = compact(&path).await.unwrap();
        assert_eq!(
            (report.kept, report.dropped, report.unreadable),
            (1, 25, 25)
        );
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn a_symlinked_results_file_is_written_and_compacted_through_the_link() {
        let dir = tempdir();
        let target = dir.join("real.jsonl");
        let link = dir.join("link.jsonl");
        fs::write(&target, failed("a").to_json_line()).unwrap();
        std::os::unix::fs::symlink(&target, &link).unwrap();

        let (mut w, index) = ResultsWriter::open(&link).await.unwrap();
        assert!(index.is_failed("a"));
        assert_eq!(w.path(), fs::canonicalize(&target).unwrap());
        w.write(&ok("a")).await.unwrap();
        w.finish().await.unwrap();
        compact(&link).await.unwrap();

        assert!(
            fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(ids(&target), [("a".into(), true)]);
        assert_eq!(ids(&link), [("a".into(), true)]);
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn a_hard_linked_results_file_is_refused_before_anything_changes() {
        let dir = tempdir();
        let path = dir.join("r.jsonl");
        let text = ok("a").to_json_line() + &ok("a").to_json_line() + "{\"torn";
        fs::write(&path, &text).unwrap();
        fs::hard_link(&path, dir.join("other-name.jsonl")).unwrap();
        let err = ResultsWriter::open(&path).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("hard links"), "{err}");
        let err = compact(&path).await.unwrap_err();
        assert!(err.to_string().contains("hard links"), "{err}");
        assert_eq!(fs::read_to_string(&path).unwrap(), text, "untouched");
        assert_eq!(ResumeIndex::load(&path).await.unwrap().lines, 2);
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn compaction_keeps_the_files_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempdir();
        for mode in [0o444, 0o600, 0o640] {
            let path = dir.join(format!("r-{mode:o}.jsonl"));
            fs::write(&path, failed("a").to_json_line() + &ok("a").to_json_line()).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
            let report = compact(&path).await.unwrap();
            assert_eq!((report.kept, report.replaced), (1, 1));
            assert_eq!(ids(&path), [("a".into(), true)]);
            let now = fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
            assert_eq!(now, mode, "{now:o} after compacting a {mode:o} file");
        }
    }

    #[tokio::test]
    async fn a_missing_file_is_an_empty_index_and_compacts_to_nothing() {
        let dir = tempdir();
        let path = dir.join("none.jsonl");
        assert_eq!(
            ResumeIndex::load(&path).await.unwrap(),
            ResumeIndex::default()
        );
        assert_eq!(compact(&path).await.unwrap(), Compaction::default());
        assert!(!path.exists());
    }

    /// A fresh directory under the target dir (no tempfile crate).
    fn tempdir() -> PathBuf {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "llm-failover-results-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }
}
