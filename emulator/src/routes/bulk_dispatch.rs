//! Which Batch API a request is, and the provider's format that answers it: the dispatch
//! over `bulk_openai.rs`, `bulk_anthropic.rs` and `bulk_gemini.rs`, apart from what they
//! share (`bulk.rs`), so that the formats import the shared part and only this names them.

use axum::http::Method;
use axum::http::request::Parts;
use bytes::Bytes;
use tokio::time::Instant;

use super::bulk::{BulkCx, BulkRoute, Reply};
use super::{ApiError, Cx, Wire, header};
use crate::config::Kind;
use crate::state::ProviderState;

/// The Batch API route a method and path (after the provider's prefix) name, for `kind`.
pub(crate) fn route(kind: Kind, method: &Method, path: &str) -> Option<BulkRoute> {
    match kind {
        // OpenAI-compatible hosts (Groq's `/openai/v1/batches` is this under its prefix).
        Kind::OpenAi => super::bulk_openai::route(method, path.strip_prefix("/v1")?),
        // Azure's global batch: the same API under `/openai` with `?api-version=`
        // (learn.microsoft.com/en-us/azure/ai-services/openai/how-to/batch).
        Kind::Azure => super::bulk_openai::route(method, path.strip_prefix("/openai")?),
        Kind::Anthropic => super::bulk_anthropic::route(method, path),
        Kind::Gemini => super::bulk_gemini::route(method, path),
        Kind::Bedrock | Kind::Vertex | Kind::Deepgram => None,
    }
}

/// Answers a Batch API request of `p`; a refused create is counted in the batch log.
pub(crate) async fn answer(
    p: &ProviderState,
    wire: &'static dyn Wire,
    parts: &Parts,
    cx: &Cx<'_>,
    now: Instant,
    route: BulkRoute,
    body: Bytes,
) -> Result<Reply, ApiError> {
    let full = parts.uri.path();
    let prefix = &full[..full.len().saturating_sub(cx.path.len())];
    let host = header(parts, "host").unwrap_or("127.0.0.1");
    let bx = BulkCx {
        p,
        wire,
        parts,
        cx,
        now,
        root: format!("http://{host}{prefix}"),
    };
    let create = route.is_create();
    let out = match route {
        BulkRoute::FileUpload => {
            let form = super::body::parse_form(parts, body).await?;
            super::bulk_openai::upload(&bx, &form)
        }
        BulkRoute::FileGet(id) => super::bulk_openai::file(&bx, &id),
        BulkRoute::FileContent(id) => super::bulk_openai::content(&bx, &id),
        BulkRoute::FileDelete(id) => super::bulk_openai::delete_file(&bx, &id),
        BulkRoute::OpenAiCreate => super::bulk_openai::create(&bx, &body),
        BulkRoute::OpenAiGet(id) => super::bulk_openai::get(&bx, &id),
        BulkRoute::OpenAiList => super::bulk_openai::list(&bx),
        BulkRoute::OpenAiCancel(id) => super::bulk_openai::cancel(&bx, &id),
        BulkRoute::AnthropicCreate => super::bulk_anthropic::create(&bx, &body),
        BulkRoute::AnthropicGet(id) => super::bulk_anthropic::get(&bx, &id),
        BulkRoute::AnthropicList => super::bulk_anthropic::list(&bx),
        BulkRoute::AnthropicResults(id) => super::bulk_anthropic::results(&bx, &id),
        BulkRoute::AnthropicCancel(id) => super::bulk_anthropic::cancel(&bx, &id),
        BulkRoute::AnthropicDelete(id) => super::bulk_anthropic::delete(&bx, &id),
        BulkRoute::GeminiCreate(model) => super::bulk_gemini::create(&bx, &model, &body),
        BulkRoute::GeminiGet(id) => super::bulk_gemini::get(&bx, &id),
        BulkRoute::GeminiList => super::bulk_gemini::list(&bx),
        BulkRoute::GeminiCancel(id) => super::bulk_gemini::cancel(&bx, &id),
        BulkRoute::GeminiDelete(id) => super::bulk_gemini::delete(&bx, &id),
    };
    if create && out.is_err() {
        p.bulk.with(|s| s.refused += 1);
    }
    out
}
