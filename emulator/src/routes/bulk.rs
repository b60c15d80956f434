//! The providers' Batch APIs: which paths they are, and what every wire format's batches
//! share — answering one item with the live endpoint's own answer, and the reply.
//!
//! A batch request goes through the one flow of `exchange.rs` up to the key (early faults,
//! authentication, the body cap), then here instead of the live limits: the Batch APIs have
//! their own, separate pools ("Batch API rate limits are separate from existing per-model
//! rate limits", platform.openai.com/docs/guides/batch; "The Message Batches API has its
//! own set of rate limits which are shared across all models",
//! docs.anthropic.com/en/api/rate-limits#message-batches-api). The formats are
//! `bulk_openai.rs` (OpenAI and Azure: files and batches), `bulk_anthropic.rs` (Message
//! Batches) and `bulk_gemini.rs` (`batchGenerateContent` operations).

use axum::http::StatusCode;
use axum::http::request::Parts;
use bytes::Bytes;
use serde_json::Value;
use tokio::time::Instant;

use super::{ApiError, Cx, Op, OpKind, Route, Usage, Wire};
use crate::bulk::{BatchItemFault, Outcome};
use crate::state::ProviderState;
use crate::tools;

/// A Batch API request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum BulkRoute {
    /// OpenAI (Azure): `POST /v1/files` (`/openai/files`).
    FileUpload,
    FileGet(String),
    FileContent(String),
    FileDelete(String),
    /// OpenAI (Azure): `POST /v1/batches` (`/openai/batches`).
    OpenAiCreate,
    OpenAiGet(String),
    OpenAiList,
    OpenAiCancel(String),
    /// Anthropic: `POST /v1/messages/batches`.
    AnthropicCreate,
    AnthropicGet(String),
    AnthropicList,
    AnthropicResults(String),
    AnthropicCancel(String),
    AnthropicDelete(String),
    /// Gemini: `POST /v1beta/models/{model}:batchGenerateContent`.
    GeminiCreate(String),
    GeminiGet(String),
    GeminiList,
    GeminiCancel(String),
    GeminiDelete(String),
}

/// OpenAI's batch input file limit: "up to 200 MB in size" (platform.openai.com/docs/guides/batch).
const FILE_LIMIT: usize = 200 << 20;
/// Anthropic: "A Message Batch is limited to either 100,000 Message requests or 256 MB in
/// size, whichever is reached first" (docs.anthropic.com/en/docs/build-with-claude/batch-processing).
const ANTHROPIC_LIMIT: usize = 256 << 20;
/// Gemini's inline requests: "a total request size under 20MB"
/// (ai.google.dev/gemini-api/docs/batch-mode).
const GEMINI_LIMIT: usize = 20 << 20;
/// Every other Batch API request is a small JSON body, or none.
const SMALL_LIMIT: usize = 1 << 20;

impl BulkRoute {
    pub(crate) fn body_limit(&self) -> usize {
        match self {
            BulkRoute::FileUpload => FILE_LIMIT,
            BulkRoute::AnthropicCreate => ANTHROPIC_LIMIT,
            BulkRoute::GeminiCreate(_) => GEMINI_LIMIT,
            _ => SMALL_LIMIT,
        }
    }

    pub(super) fn is_create(&self) -> bool {
        matches!(
            self,
            BulkRoute::OpenAiCreate | BulkRoute::AnthropicCreate | BulkRoute::GeminiCreate(_)
        )
    }
}

/// What a Batch API request is answered with.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) content_type: &'static str,
    pub(crate) body: Bytes,
    /// The model a create named, for the request log.
    pub(crate) model: Option<String>,
}

impl Reply {
    pub(super) fn json(v: &Value) -> Self {
        Reply {
            status: StatusCode::OK,
            content_type: super::JSON,
            body: super::json_bytes(v),
            model: None,
        }
    }

    pub(super) fn with_model(mut self, model: &str) -> Self {
        self.model = Some(model.to_owned());
        self
    }
}

/// What every Batch API handler needs.
pub(super) struct BulkCx<'a> {
    pub(super) p: &'a ProviderState,
    pub(super) wire: &'static dyn Wire,
    pub(super) parts: &'a Parts,
    pub(super) cx: &'a Cx<'a>,
    pub(super) now: Instant,
    /// `http://host/{prefix}`: where the provider's routes start, as the client reached
    /// them (Anthropic's `results_url` points back here).
    pub(super) root: String,
}

/// One item answered.
pub(super) struct ItemAnswer {
    pub(super) outcome: Outcome,
    /// Its input tokens (the prompt estimate the live endpoint charges; for a request that
    /// does not parse, a quarter of its bytes).
    pub(super) input_tokens: u64,
}

/// Answers one item's request (`body`: the live endpoint's request body; `model`: the
/// model the path names, for Gemini) exactly as the live endpoint would, or fails it with
/// `fault`.
pub(super) fn answer_item(
    bx: &BulkCx<'_>,
    model: Option<&str>,
    body: &[u8],
    fault: Option<BatchItemFault>,
) -> ItemAnswer {
    let rough = crate::text::estimate_tokens(body.len() as u64);
    let refused = |e: &ApiError| {
        let (status, _, bytes) = bx.wire.error(e, bx.cx);
        ItemAnswer {
            outcome: Outcome::Error {
                status: status.as_u16(),
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            },
            input_tokens: rough,
        }
    };
    if let Some(f) = fault {
        return refused(&match f {
            BatchItemFault::ServerError => ApiError::Status(500),
            BatchItemFault::Overloaded => ApiError::Overloaded,
            BatchItemFault::InvalidRequest => ApiError::bad(
                "The emulator was told to refuse this request of the batch (an invalid request).",
            ),
        });
    }
    let route = Route {
        model: model.map(str::to_owned),
        ..Route::new(OpKind::Chat)
    };
    let req = match bx
        .wire
        .parse(&route, bx.parts, &Bytes::copy_from_slice(body), &[])
    {
        Ok(Op::Chat(req)) => req,
        Ok(_) => return refused(&ApiError::NotFound),
        Err(e) => return refused(&e),
    };
    let models = &bx.p.cfg.models;
    if !models.is_empty() && !models.contains(&req.model) {
        return refused(&ApiError::ModelNotFound(req.model.clone()));
    }
    let a = tools::answer(
        &req.asks,
        req.prompt.seed,
        req.max_tokens.unwrap_or(u64::MAX),
    );
    let usage = Usage {
        input: req.input_tokens(),
        output: a.tokens(),
        cached: 0,
    };
    let bytes = bx.wire.chat(&req, &a, usage, bx.cx);
    ItemAnswer {
        outcome: Outcome::Answer {
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            usage: [usage.input, usage.output],
        },
        input_tokens: usage.input,
    }
}

/// The model a chat request body names (`model`), if any.
pub(super) fn body_model(body: &Value) -> Option<&str> {
    body.get("model").and_then(Value::as_str)
}

/// A query parameter, percent-decoded enough for ids and numbers.
pub(super) fn query<'a>(bx: &'a BulkCx<'_>, name: &str) -> Option<&'a str> {
    super::query_param(bx.parts.uri.query(), name).filter(|v| !v.is_empty())
}
