//! Azure OpenAI: `POST /openai/deployments/{deployment}/chat/completions?api-version=…`,
//! `…/audio/transcriptions` and `…/embeddings` (OpenAI's bodies, the deployment naming the
//! model), key in the `api-key` header.
//!
//! Bodies are OpenAI's plus Azure's content-filter results (a first stream event with
//! `prompt_filter_results` and no choices); gateway errors (401, 404, 429) use Azure's
//! `{"error": {"code": "401", "message": …}}` shape, request errors OpenAI's (Azure OpenAI
//! REST reference, learn.microsoft.com/azure/ai-services/openai/reference; quota docs
//! …/openai/quotas-limits). A missing `api-version` is a 404 "Resource not found", an
//! unsupported one a 400, as Azure answers.

use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use bytes::Bytes;
use serde_json::json;

use super::openai::{self, AUDIO_LIMIT, JSON_LIMIT};
use super::{
    ApiError, ChatReq, Cx, EmbedReq, Field, JSON, Op, OpKind, Rendered, Route, StreamParts, SttReq,
    Usage, Wire, header, hv, json_bytes, query_param, sse_data,
};
use super::{openai_answer, openai_chat, openai_embed, transcription};
use crate::headers::ceil_secs;
use crate::text::Transcript;
use crate::tools::Answer;

pub(super) struct Azure;

/// `YYYY-MM-DD` or `YYYY-MM-DD-preview`.
fn api_version_ok(v: &str) -> bool {
    let date = v.strip_suffix("-preview").unwrap_or(v);
    let b = date.as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(i, c)| {
            if i == 4 || i == 7 {
                *c == b'-'
            } else {
                c.is_ascii_digit()
            }
        })
}

fn gateway(status: u16, code: &str, message: &str) -> ApiError {
    ApiError::Raw {
        status,
        body: json!({"error": {"code": code, "message": message}}),
    }
}

impl Wire for Azure {
    fn caches_prompts(&self) -> bool {
        true
    }

    fn route(&self, method: &Method, path: &str, _query: Option<&str>) -> Option<Route> {
        if method != Method::POST {
            return None;
        }
        let rest = path.strip_prefix("/openai/deployments/")?;
        let (deployment, op) = rest.split_once('/')?;
        if deployment.is_empty() {
            return None;
        }
        let op = match op {
            "chat/completions" => OpKind::Chat,
            "audio/transcriptions" => OpKind::Transcribe,
            "embeddings" => OpKind::Embed,
            _ => return None,
        };
        Some(Route {
            model: Some(deployment.to_owned()),
            ..Route::new(op)
        })
    }

    fn authorize(&self, parts: &Parts, key: &str) -> Result<(), ApiError> {
        match query_param(parts.uri.query(), "api-version") {
            None | Some("") => return Err(gateway(404, "404", "Resource not found")),
            Some(v) if !api_version_ok(v) => {
                return Err(gateway(400, "BadRequest", "API version not supported"));
            }
            Some(_) => {}
        }
        match header(parts, "api-key") {
            None => Err(gateway(
                401,
                "401",
                "Access denied due to missing subscription key. Make sure to include \
                 subscription key when making requests to an API.",
            )),
            Some(k) if k == key => Ok(()),
            Some(_) => Err(gateway(
                401,
                "401",
                "Access denied due to invalid subscription key or wrong API endpoint. Make \
                 sure to provide a valid key for an active subscription and use a correct \
                 regional API endpoint for your resource.",
            )),
        }
    }

    fn body_limit(&self, op: OpKind) -> usize {
        match op {
            OpKind::Chat | OpKind::CountTokens | OpKind::Embed => JSON_LIMIT,
            OpKind::Transcribe => AUDIO_LIMIT,
        }
    }

    fn parse(
        &self,
        route: &Route,
        parts: &Parts,
        body: &Bytes,
        form: &[Field],
    ) -> Result<Op, ApiError> {
        let model = route.model.as_deref();
        match route.op {
            OpKind::Chat => openai_chat::parse_chat(body, model).map(Op::Chat),
            OpKind::Transcribe => transcription::parse(parts, form, model).map(Op::Stt),
            OpKind::Embed => openai_embed::parse(body, model).map(Op::Embed),
            // No route of this format counts tokens.
            OpKind::CountTokens => Err(ApiError::NotFound),
        }
    }

    fn error(&self, e: &ApiError, cx: &Cx<'_>) -> Rendered {
        let version = cx.api_version.as_deref().unwrap_or("2024-10-21");
        let e = match e {
            ApiError::NotFound => gateway(404, "404", "Resource not found"),
            ApiError::ModelNotFound(_) => gateway(
                404,
                "DeploymentNotFound",
                "The API deployment for this resource does not exist. If you created the \
                 deployment within the last 5 minutes, please wait a moment and try again.",
            ),
            ApiError::RateLimited(l) => {
                let what = if l.which.is_tokens() {
                    "token rate limit"
                } else {
                    "call rate limit"
                };
                let wait = l
                    .delay
                    .map(|d| format!(" Please retry after {} seconds.", ceil_secs(d).max(1)))
                    .unwrap_or_default();
                let operation = if cx.path.ends_with("/embeddings") {
                    "Embeddings_Create"
                } else if cx.path.ends_with("/audio/transcriptions") {
                    "Transcriptions_Create"
                } else {
                    "ChatCompletions_Create"
                };
                gateway(
                    429,
                    "429",
                    &format!(
                        "Requests to the {operation} Operation under Azure OpenAI \
                         API version {version} have exceeded {what} of your current OpenAI S0 \
                         pricing tier.{wait} Please go here: https://aka.ms/oai/quotaincrease \
                         if you would like to further increase the default rate limit."
                    ),
                )
            }
            ApiError::InsufficientQuota => gateway(
                429,
                "insufficient_quota",
                "The quota of this Azure OpenAI resource is exhausted for the current billing \
                 period.",
            ),
            ApiError::Status(s) if *s >= 500 => gateway(
                *s,
                "InternalServerError",
                "The service encountered an internal error. Please retry.",
            ),
            ApiError::Overloaded => gateway(
                503,
                "ServiceUnavailable",
                "The service is temporarily unable to process your request. Please try again \
                 later.",
            ),
            other => other.clone(),
        };
        match &e {
            ApiError::Raw { status, body } => (
                StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                JSON,
                json_bytes(body),
            ),
            other => openai::error(other, cx),
        }
    }

    fn chat(&self, req: &ChatReq, a: &Answer, usage: Usage, cx: &Cx<'_>) -> Bytes {
        openai_answer::chat_body(req, a, usage, cx, true)
    }

    fn chat_stream(&self, req: &ChatReq, a: &Answer, usage: Usage, cx: &Cx<'_>) -> StreamParts {
        openai_answer::chat_stream(req, a, usage, cx, true)
    }

    fn stream_error(&self, _cx: &Cx<'_>) -> Bytes {
        sse_data(&json!({"error": {
            "code": "InternalServerError",
            "message": "The service encountered an internal error. Please retry.",
        }}))
    }

    fn transcript(&self, req: &SttReq, t: &Transcript, _cx: &Cx<'_>) -> (&'static str, Bytes) {
        transcription::render(req, t)
    }

    fn embeddings(&self, req: &EmbedReq, _cx: &Cx<'_>) -> Bytes {
        openai_embed::render(req)
    }

    fn id_headers(&self, cx: &Cx<'_>, h: &mut HeaderMap) {
        let id = hv(&cx.request_id);
        h.insert(HeaderName::from_static("apim-request-id"), id.clone());
        h.insert(HeaderName::from_static("x-request-id"), id);
        h.insert(
            HeaderName::from_static("x-ms-region"),
            HeaderValue::from_static("Emulator Region"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_dated_api_versions_only() {
        for ok in ["2024-10-21", "2025-04-01-preview"] {
            assert!(api_version_ok(ok), "{ok}");
        }
        for bad in ["", "latest", "2024-1-21", "2024-10-21-beta", "v1"] {
            assert!(!api_version_ok(bad), "{bad}");
        }
    }
}
