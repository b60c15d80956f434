//! [`FileJob`]: a JSON-lines prompt file in, a JSON-lines results file out, resumable.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::stream;

use super::files::same_file;
use super::input::{InputReader, Parsed};
use super::key::ItemKey;
use super::results::{Compaction, ResultsWriter, ResumeIndex, compact};
use super::runner::{RunReport, Runner};
use crate::stop::Stop;

/// A prompt file run into a results file, the way `llm-failover --no-queue` does it.
///
/// 1. The results file is read first: ids whose latest line is a success are skipped; ids
///    whose latest line is a failure are skipped too unless
///    [`retry_failed`](Self::retry_failed) is set. A torn last line (from a killed run) is
///    cut off, so its item runs again.
/// 2. The input is streamed through the [`Runner`]; each outcome is appended to the results
///    file and flushed before it counts.
/// 3. At the end (also after a stop) the file is synced and [compacted](compact) to one line
///    per id — a retried item's new line replaces its old one. Lines of ids that are not in
///    this input are kept: results are never deleted.
///
/// When a run ends without being stopped, the results file holds exactly one line per input
/// id (and one per bad line with no id of its own, filed under its line number); a rerun
/// after any interruption, `kill -9` included, sends only what is not done.
///
/// The results file must be a regular file other than the input (compared by device and
/// inode, so a link to the input is caught): a symbolic link is followed and its target
/// written and replaced; a pipe, terminal or device, or a file with several hard links, is
/// refused before anything is read (see [`ResultsWriter::open`]).
///
/// # Examples
///
/// ```no_run
/// use llm_failover::batch::{FileJob, Runner, Stop};
///
/// # async fn run(client: llm_failover::Client) -> std::io::Result<()> {
/// let runner = Runner::new(client).concurrency(16);
/// let report = FileJob::new("prompts.jsonl", "results.jsonl")
///     .retry_failed(true)
///     .run(&runner, &Stop::new())
///     .await?;
/// println!("{} ok, {} failed, {} already done", report.run.ok, report.run.failed(), report.skipped_ok);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct FileJob {
    input: PathBuf,
    output: PathBuf,
    retry_failed: bool,
}

/// What a [`FileJob`] did.
///
/// # Examples
///
/// A rerun skips what the results file already holds:
///
/// ```
/// use llm_failover::batch::{FileJob, Runner, Stop};
///
/// # use std::sync::Arc;
/// # use llm_failover::provider::openai::OpenAi;
/// # use llm_failover::{Client, ProviderId, ProviderSettings};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let local = OpenAi::new(ProviderId::new("local"), "http://127.0.0.1:9/v1".parse()?)
/// #     .with_chat_model("llama3.2");
/// # let client = Client::builder().provider(Arc::new(local), ProviderSettings::new()).build()?;
/// # let dir = std::env::temp_dir().join(format!("job-report-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir)?;
/// let (input, output) = (dir.join("prompts.jsonl"), dir.join("results.jsonl"));
/// std::fs::write(&input, "{\"id\":\"q1\",\"prompt\":\"Hi\"}\nnot json\n")?;
/// std::fs::write(&output, "{\"id\":\"q1\",\"ok\":true}\n")?; // done by an earlier run
///
/// let report = FileJob::new(&input, &output).run(&Runner::new(client), &Stop::new()).await?;
/// assert_eq!(report.previous.ok_count(), 1);
/// assert_eq!(report.skipped_ok, 1); // q1 is not sent again
/// assert_eq!(report.run.failed_by_kind["invalid_input"], 1); // line 2
/// assert_eq!(report.compaction.kept, 2);
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobReport {
    /// The items run this time.
    pub run: RunReport,
    /// Items skipped because the results file already had them as successes.
    pub skipped_ok: u64,
    /// Items skipped because the results file had them as failures (no `retry_failed`).
    pub skipped_failed: u64,
    /// What the results file held before this run.
    pub previous: ResumeIndex,
    /// The final compaction.
    pub compaction: Compaction,
}

#[derive(Debug, Default)]
struct Shared {
    skipped_ok: u64,
    skipped_failed: u64,
    error: Option<io::Error>,
}

impl FileJob {
    /// Reads prompts from `input`, writes results to `output`.
    pub fn new(input: impl Into<PathBuf>, output: impl Into<PathBuf>) -> Self {
        FileJob {
            input: input.into(),
            output: output.into(),
            retry_failed: false,
        }
    }

    /// Also runs items whose latest result is a failure (default: they are skipped).
    #[must_use]
    pub fn retry_failed(mut self, yes: bool) -> Self {
        self.retry_failed = yes;
        self
    }

    /// The input path.
    pub fn input(&self) -> &Path {
        &self.input
    }

    /// The results path.
    pub fn output(&self) -> &Path {
        &self.output
    }

    /// Runs the job to its end or until `stop` fires.
    ///
    /// # Errors
    ///
    /// When the input cannot be opened or read, or the results file cannot be read, written,
    /// synced or compacted. Outcomes recorded before the error stay in the results file (it
    /// is synced and compacted first when it can be), so a rerun resumes.
    ///
    /// At once, with [`io::ErrorKind::InvalidInput`] and nothing read or written, when the
    /// results file is the input (the same file by any name or link), or is not a file that
    /// can be read back and replaced.
    pub async fn run(&self, runner: &Runner, stop: &Stop) -> io::Result<JobReport> {
        if same_file(&self.input, &self.output) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "the results file {} is the input {} (the same file): the run would read \
                     its own results back as prompts; write the results to another file",
                    self.output.display(),
                    self.input.display()
                ),
            ));
        }
        let input = tokio::fs::File::open(&self.input)
            .await
            .map_err(|e| with_path(e, "cannot open the input", &self.input))?;
        let (mut writer, previous) = ResultsWriter::open(&self.output)
            .await
            .map_err(|e| with_path(e, "cannot use the results file", &self.output))?;
        let output = writer.path().to_owned();

        let shared = Arc::new(Mutex::new(Shared::default()));
        let reader = InputReader::new(tokio::io::BufReader::with_capacity(64 * 1024, input));
        let items = stream::unfold(reader, |mut reader| {
            let shared = shared.clone();
            let previous = &previous;
            let retry_failed = self.retry_failed;
            let progress = runner.progress().clone();
            async move {
                loop {
                    let parsed: Parsed = match reader.next().await {
                        Ok(Some(p)) => p,
                        Ok(None) => return None,
                        Err(e) => {
                            lock(&shared).error = Some(e);
                            return None;
                        }
                    };
                    let key = match &parsed {
                        Ok(item) => ItemKey::Id(item.id.clone()),
                        Err(bad) => bad.key(),
                    };
                    match previous.recorded(&key) {
                        Some(true) => lock(&shared).skipped_ok += 1,
                        Some(false) if !retry_failed => lock(&shared).skipped_failed += 1,
                        _ => return Some((parsed, reader)),
                    }
                    progress.add_skipped();
                }
            }
        });

        let run = runner.run(items, &mut writer, stop).await;
        let finished = writer.finish().await;
        let compaction = compact(&output).await;
        let run = run.map_err(|e| with_path(e, "cannot write results to", &self.output))?;
        finished.map_err(|e| with_path(e, "cannot sync", &self.output))?;
        let compaction = compaction.map_err(|e| with_path(e, "cannot compact", &self.output))?;

        let mut shared = lock(&shared);
        if let Some(e) = shared.error.take() {
            return Err(with_path(e, "cannot read the input", &self.input));
        }
        Ok(JobReport {
            run,
            skipped_ok: shared.skipped_ok,
            skipped_failed: shared.skipped_failed,
            previous,
            compaction,
        })
    }
}

fn lock(m: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn with_path(e: io::Error, what: &str, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}
