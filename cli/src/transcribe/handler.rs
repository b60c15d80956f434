//! The job's handler: the queued file read and checked, then transcribed.

use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use llm_failover::{
    AudioInput, Error, ErrorKind, RequestOptions, Transcript, TranscriptionRequest,
};
use llm_failover_queue::{Handler, JobContext};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::files::{file_of, hex};

/// Reads a queued file, checks it is what was queued, transcribes it.
pub(super) struct Transcribe {
    pub(super) language: Option<String>,
    pub(super) model: Option<String>,
    pub(super) deadline: Duration,
    pub(super) max_wait: Duration,
}

/// What a job's payload holds.
#[derive(Deserialize)]
struct Payload {
    path: PathBuf,
    sha256: String,
}

/// What a job's result holds (and its results line, after the file and `ok`).
#[derive(Serialize, Deserialize)]
pub(super) struct Transcribed {
    text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    language: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    duration_s: Option<f64>,
    provider: String,
    model: String,
    attempts: u32,
}

impl From<Transcript> for Transcribed {
    fn from(t: Transcript) -> Self {
        Transcribed {
            text: t.text,
            language: t.language,
            duration_s: t.duration.map(|d| d.as_secs_f64()),
            provider: t.provider.to_string(),
            model: t.model,
            attempts: t.attempts,
        }
    }
}

#[async_trait]
impl Handler for Transcribe {
    async fn run(&self, ctx: &JobContext) -> llm_failover::Result<String> {
        let job = ctx.job();
        let audio = read_queued(&job.payload, file_of(&job.id)).await?;
        let mut request = TranscriptionRequest::new(audio);
        if let Some(language) = &self.language {
            request = request.language(language);
        }
        if let Some(model) = &self.model {
            request = request.model(model);
        }
        // The job's place in the admission order is its request's.
        let options = RequestOptions::new()
            .deadline(self.deadline)
            .max_wait(self.max_wait)
            .priority(job.priority)
            .tenant(job.tenant.clone());
        let transcript = ctx.client().transcribe_with(request, &options).await?;
        serde_json::to_string(&Transcribed::from(transcript))
            .map_err(|e| Error::new(ErrorKind::Decode, format!("the transcript: {e}")))
    }
}

/// The audio a payload references, read and checked against its hash: a bad payload or a
/// changed file can only fail again (`InvalidRequest`: dead-lettered at once), and so can a
/// file gone (`Io`, the same).
async fn read_queued(payload: &str, file: &str) -> llm_failover::Result<AudioInput> {
    let Payload { path, sha256: want } = serde_json::from_str(payload)
        .map_err(|e| Error::new(ErrorKind::InvalidRequest, format!("payload: {e}")))?;
    let read = tokio::task::spawn_blocking({
        let path = path.clone();
        move || std::fs::read(&path).map(|bytes| (hex(&Sha256::digest(&bytes)), bytes))
    })
    .await
    .map_err(|e| Error::new(ErrorKind::Io, format!("reading {file}: {e}")))?;
    let (got, bytes) = read.map_err(|e| {
        Error::new(
            ErrorKind::Io,
            format!("cannot read {}: {e}", path.display()),
        )
    })?;
    if got != want {
        return Err(Error::new(
            ErrorKind::InvalidRequest,
            format!(
                "the file changed since it was queued (sha256 {}…, now {}…): its new content is \
                 a new job when it is named again",
                &want[..want.len().min(12)],
                &got[..12]
            ),
        ));
    }
    let name = file.rsplit('/').next().unwrap_or(file);
    AudioInput::from_bytes(bytes, name)
}
