//! What a provider's Batch API takes and answers: the bulk lane's wire, one adapter at a time.
//!
//! Three shapes of API, one life: items are submitted (uploaded as a JSON-lines file then
//! named in a create — OpenAI, Azure, Groq; or sent inline in the create — Anthropic's Message
//! Batches, Gemini's `batchGenerateContent`), the remote batch is polled until it ends, and
//! its answers are fetched (an output and an error file; a `results_url`; or inline in the
//! finished operation), each under the id the item was submitted with.
//!
//! An adapter that has a Batch API implements [`BulkApi`] and returns it from
//! [`Provider::bulk`](super::Provider::bulk). Its methods are pure: they build one HTTP
//! request for a [`BulkStep`] (with the credential, as the adapter's chat requests carry it)
//! and read its answer into a [`BulkReply`]; the client sends each step through the router,
//! pinned to the provider that holds the batch (its breaker, retries and request bucket, as
//! any request). A line's body is the adapter's own chat request body: what the live lane
//! would have sent.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::RequestContext;
use crate::error::Result;
use crate::http::{HttpRequest, RawResponse};

/// How a provider takes a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BulkShape {
    /// A JSON-lines file uploaded first, then named by the create (OpenAI, Azure, Groq).
    File,
    /// The requests inside the create call (Anthropic's Message Batches).
    Inline,
    /// The requests inside the create call, answered by a long-running operation whose
    /// result holds the responses in input order (Gemini's `batchGenerateContent`).
    Operation,
}

/// What one remote batch may hold: a larger input is split into several batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BulkLimits {
    /// Requests per batch.
    pub max_requests: usize,
    /// Bytes of the submitted input (the file, or the create's body) per batch.
    pub max_bytes: usize,
}

impl BulkLimits {
    /// Limits of `max_requests` requests and `max_bytes` bytes per batch.
    pub fn new(max_requests: usize, max_bytes: usize) -> Self {
        BulkLimits {
            max_requests,
            max_bytes,
        }
    }
}

/// One item as submitted: the id the provider files it under and the body of its request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BulkLine {
    /// The provider's id for the item (`custom_id`, Gemini's `metadata.key`).
    pub custom_id: String,
    /// The chat request body the adapter builds for the live lane.
    pub body: Value,
}

impl BulkLine {
    /// A line filed under `custom_id` with `body`.
    pub fn new(custom_id: impl Into<String>, body: Value) -> Self {
        BulkLine {
            custom_id: custom_id.into(),
            body,
        }
    }
}

/// One step of a remote batch's life.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum BulkStep {
    /// Uploads the lines as the provider's batch input file ([`BulkShape::File`] only).
    Upload {
        /// The items.
        lines: Vec<BulkLine>,
    },
    /// Creates the remote batch.
    Create {
        /// The model every line asks for.
        model: String,
        /// The uploaded file ([`BulkShape::File`]) or the lines themselves.
        input: BulkInput,
        /// A label the provider keeps with the batch (OpenAI's `metadata`, Gemini's
        /// `display_name`), to find it again.
        label: String,
    },
    /// Reads the remote batch's state.
    Poll {
        /// The provider's id of the batch.
        id: String,
    },
    /// Downloads one of the answers' documents ([`BulkStatus::fetch`]).
    Fetch {
        /// What [`BulkStatus::fetch`] named: a file id or a URL.
        what: String,
    },
    /// Asks the provider to cancel the batch (what already ran is kept).
    Cancel {
        /// The provider's id of the batch.
        id: String,
    },
    /// Looks for the batch created with `label` among the provider's batches, one page at a
    /// time: the create a process may have sent just before it died.
    Find {
        /// The label the create gave ([`BulkStep::Create`]).
        label: String,
        /// The page to read: `None` for the first, else the cursor the last page gave.
        after: Option<String>,
    },
}

/// What a create names as its input.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum BulkInput {
    /// An uploaded file's id.
    File(String),
    /// The lines, inline.
    Lines(Vec<BulkLine>),
}

/// The answer to one [`BulkStep`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum BulkReply {
    /// The input file's id.
    Uploaded {
        /// The file's id.
        file: String,
    },
    /// The batch's state (answer to a create, a poll, a cancel).
    Status(BulkStatus),
    /// A document's bytes.
    Fetched(Vec<u8>),
    /// One page of the provider's batches looked through for a label.
    Found {
        /// The batch with the label, if this page has it.
        batch: Option<BulkStatus>,
        /// The cursor of the next page, if there is one.
        next: Option<String>,
    },
}

/// Where a remote batch is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum BulkState {
    /// Accepted, not started (OpenAI `validating`, Gemini `BATCH_STATE_PENDING`).
    Pending,
    /// Running (OpenAI `in_progress`, Anthropic `in_progress`, Gemini `BATCH_STATE_RUNNING`).
    Running,
    /// Writing its results (OpenAI `finalizing`).
    Finalizing,
    /// Being cancelled (OpenAI `cancelling`, Anthropic `canceling`).
    Cancelling,
    /// Ended with its answers (OpenAI `completed`, Anthropic `ended`, Gemini
    /// `BATCH_STATE_SUCCEEDED`); some items may have failed, expired or been cancelled.
    Ended,
    /// Refused as a whole (OpenAI `failed`: validation errors, the enqueued-token limit;
    /// Gemini `BATCH_STATE_FAILED`): no item ran.
    Failed,
    /// Its window passed (OpenAI `expired`, Gemini `BATCH_STATE_EXPIRED`): the answers of
    /// what ran are kept.
    Expired,
    /// Cancelled (OpenAI `cancelled`, Gemini `BATCH_STATE_CANCELLED`): the answers of what
    /// ran are kept.
    Cancelled,
}

impl BulkState {
    /// Whether the batch will not change any more.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            BulkState::Ended | BulkState::Failed | BulkState::Expired | BulkState::Cancelled
        )
    }
}

/// A remote batch as the provider last described it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BulkStatus {
    /// The provider's id of the batch.
    pub id: String,
    /// Where it is.
    pub state: BulkState,
    /// Items in it, as the provider counts them (0 when it does not say).
    pub total: u64,
    /// Items answered so far.
    pub succeeded: u64,
    /// Items that failed, expired or were cancelled so far.
    pub failed: u64,
    /// What to download for the answers once it has ended: file ids or URLs, for
    /// [`BulkStep::Fetch`]. Empty where the answers come inline ([`inline`](Self::inline)).
    pub fetch: Vec<String>,
    /// The answers the provider put in the status itself (Gemini's inlined responses).
    pub inline: Option<Value>,
    /// Why the batch failed as a whole: the provider's code and message (OpenAI's
    /// `errors.data`, e.g. `token_limit_exceeded`).
    pub failure: Option<(String, String)>,
}

impl BulkStatus {
    /// A batch `id` in `state`, with nothing counted yet.
    pub fn new(id: impl Into<String>, state: BulkState) -> Self {
        BulkStatus {
            id: id.into(),
            state,
            total: 0,
            succeeded: 0,
            failed: 0,
            fetch: Vec::new(),
            inline: None,
            failure: None,
        }
    }
}

/// What a remote batch said of one item.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ItemAnswer {
    /// An answer as the live API would have given it: its status and body, read by the
    /// adapter's own `chat_response` (2xx) or `error`.
    Answered {
        /// The HTTP status the item's request got.
        status: u16,
        /// Its body.
        body: Vec<u8>,
    },
    /// The batch's window passed before the item ran.
    Expired,
    /// The batch was cancelled before the item ran.
    Cancelled,
}

/// A provider's Batch API.
pub trait BulkApi: Send + Sync + fmt::Debug {
    /// How it takes a batch.
    fn shape(&self) -> BulkShape;

    /// What one batch may hold.
    fn limits(&self) -> BulkLimits;

    /// Whether the provider keeps a label with a batch that [`BulkStep::Find`] can look
    /// for (OpenAI's `metadata`, Gemini's display name; Anthropic keeps none).
    fn finds_by_label(&self) -> bool {
        false
    }

    /// Whether `id` may be sent as an item's id as it is (else it is mapped: an id is never
    /// refused for its characters).
    fn fits_id(&self, id: &str) -> bool;

    /// The request for `step`, with the credential `ctx` carries.
    ///
    /// # Errors
    ///
    /// `Unsupported` for a step this shape has not (an upload to an inline API);
    /// `InvalidRequest` for lines that cannot be serialised.
    fn request(&self, step: &BulkStep, ctx: &RequestContext<'_>) -> Result<HttpRequest>;

    /// Reads a 2xx answer to `step`.
    ///
    /// # Errors
    ///
    /// `Decode` when the answer is not what the API documents.
    fn reply(&self, step: &BulkStep, raw: RawResponse) -> Result<BulkReply>;

    /// The answers of an ended batch, by the id each item was submitted under: read from
    /// the documents fetched (in [`BulkStatus::fetch`]'s order) or from the status itself.
    /// `submitted`: the ids in the order they were submitted (Gemini answers in that order).
    ///
    /// # Errors
    ///
    /// `Decode` when a document is not what the API documents.
    fn answers(
        &self,
        status: &BulkStatus,
        fetched: &[Vec<u8>],
        submitted: &[String],
    ) -> Result<Vec<(String, ItemAnswer)>>;
}
