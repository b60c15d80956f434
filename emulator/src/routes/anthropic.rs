//! Anthropic: `POST /v1/messages` and `POST /v1/messages/count_tokens`, with the key in
//! `x-api-key` or `Authorization: Bearer` and a required `anthropic-version`; JSON answers or
//! typed SSE events (`message_start`, `content_block_start`, `ping`, `content_block_delta`,
//! `content_block_stop`, `message_delta`, `message_stop`; `error` midway); errors as
//! `{"type": "error", "error": {"type", "message"}, "request_id"}`
//! (docs.anthropic.com/en/api/messages, …/messages-streaming, …/messages-count-tokens,
//! …/errors, …/rate-limits). Requests and answers (tools, structured outputs, images) are
//! `anthropic_messages.rs`.

use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, Method, StatusCode};
use bytes::Bytes;
use serde_json::json;

use super::anthropic_messages::{self as messages, MessagesBody};
use super::{
    ApiError, ChatReq, CountReq, Cx, Field, JSON, Op, OpKind, Rendered, Route, StreamParts, SttReq,
    Usage, Wire, auth_scheme, header, hv, json_bytes, sse_event,
};
use crate::limits::LimitName;
use crate::text::Transcript;
use crate::tools::Answer;

pub(super) struct Anthropic;

/// Anthropic's documented request size limit for the Messages API (32 MB).
const BODY_LIMIT: usize = 32 << 20;

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::bad(message)
}

impl Wire for Anthropic {
    fn route(&self, method: &Method, path: &str, _query: Option<&str>) -> Option<Route> {
        if method != Method::POST {
            return None;
        }
        match path {
            "/v1/messages" => Some(Route::new(OpKind::Chat)),
            // docs.claude.com/en/api/messages-count-tokens
            "/v1/messages/count_tokens" => Some(Route::new(OpKind::CountTokens)),
            _ => None,
        }
    }

    fn authorize(&self, parts: &Parts, key: &str) -> Result<(), ApiError> {
        // The key comes in `x-api-key` (docs.claude.com/en/api/overview#authentication) or,
        // as the official SDKs send an `auth_token` (and, in current versions, an `api_key`
        // too), in `Authorization: Bearer` (github.com/anthropics/anthropic-sdk-python,
        // `Anthropic(auth_token=…)`). `x-api-key` wins when both are present. Either way a
        // missing or wrong key is the 401 `authentication_error` of
        // docs.claude.com/en/api/errors.
        let presented = header(parts, "x-api-key").or_else(|| auth_scheme(parts, "bearer"));
        match presented {
            None => return Err(ApiError::MissingKey),
            Some(k) if k != key => return Err(ApiError::WrongKey(String::new())),
            Some(_) => {}
        }
        if header(parts, "anthropic-version").is_none_or(str::is_empty) {
            return Err(invalid("anthropic-version: header is required"));
        }
        Ok(())
    }

    fn body_limit(&self, _op: OpKind) -> usize {
        BODY_LIMIT
    }

    fn parse(
        &self,
        route: &Route,
        _parts: &Parts,
        body: &Bytes,
        _form: &[Field],
    ) -> Result<Op, ApiError> {
        let b: MessagesBody = serde_json::from_slice(body).map_err(|e| match e.classify() {
            serde_json::error::Category::Data => invalid(format!("Invalid request body: {e}")),
            _ => invalid("There was an error parsing the body of your request"),
        })?;
        let Some(model) = b.model.clone() else {
            return Err(invalid("model: Field required"));
        };
        if route.op == OpKind::CountTokens {
            // A count takes a messages request without `max_tokens` (and without `stream`).
            return messages::count_req(&b, model).map(Op::Count);
        }
        let Some(max_tokens) = b.max_tokens else {
            return Err(invalid("max_tokens: Field required"));
        };
        if max_tokens < 1 {
            return Err(invalid(
                "max_tokens: Input should be greater than or equal to 1",
            ));
        }
        messages::chat_req(&b, model, max_tokens as u64).map(Op::Chat)
    }

    fn error(&self, e: &ApiError, cx: &Cx<'_>) -> Rendered {
        let (status, kind, message) = match e {
            ApiError::NotFound => (404, "not_found_error", "Not found".to_owned()),
            ApiError::MissingKey => (
                401,
                "authentication_error",
                "x-api-key header is required".to_owned(),
            ),
            ApiError::WrongKey(_) => (401, "authentication_error", "invalid x-api-key".to_owned()),
            ApiError::BadRequest { message, .. } => (400, "invalid_request_error", message.clone()),
            ApiError::ModelNotFound(m) => (404, "not_found_error", format!("model: {m}")),
            ApiError::PayloadTooLarge { .. } => (
                413,
                "request_too_large",
                "Request exceeds the maximum allowed number of bytes.".to_owned(),
            ),
            ApiError::RateLimited(l) => {
                let what = match l.which {
                    LimitName::Rpm => "requests per minute",
                    LimitName::Tpm => "tokens per minute",
                    LimitName::Rpd => "requests per day",
                    LimitName::Tpd => "tokens per day",
                    LimitName::Concurrency => "concurrent requests",
                };
                let msg = if l.too_large {
                    format!(
                        "This request would exceed your organization's rate limit of {} {what} \
                         (model: {}) on its own: it asks for {}. Please reduce the prompt \
                         length or the maximum tokens requested.",
                        l.limit, l.model, l.requested
                    )
                } else {
                    format!(
                        "This request would exceed the rate limit for your organization of {} \
                         {what} (model: {}). For details, refer to: \
                         https://docs.claude.com/en/api/rate-limits. You can see the response \
                         headers for current usage. Please reduce the prompt length or the \
                         maximum tokens requested, or try again later.",
                        l.limit, l.model
                    )
                };
                (429, "rate_limit_error", msg)
            }
            ApiError::InsufficientQuota => (
                400,
                "invalid_request_error",
                "Your credit balance is too low to access the Anthropic API. Please go to Plans \
                 & Billing to upgrade or purchase credits."
                    .to_owned(),
            ),
            ApiError::Overloaded => (529, "overloaded_error", "Overloaded".to_owned()),
            ApiError::Status(529) => (529, "overloaded_error", "Overloaded".to_owned()),
            ApiError::Status(s) if *s >= 500 => {
                (*s, "api_error", "Internal server error".to_owned())
            }
            ApiError::Status(s) => (
                *s,
                "invalid_request_error",
                StatusCode::from_u16(*s)
                    .ok()
                    .and_then(|c| c.canonical_reason())
                    .unwrap_or("Error")
                    .to_owned(),
            ),
            ApiError::Raw { status, body } => {
                return (
                    StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                    JSON,
                    json_bytes(body),
                );
            }
        };
        let body = json!({
            "type": "error",
            "error": {"type": kind, "message": message},
            "request_id": cx.request_id,
        });
        (
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            JSON,
            json_bytes(&body),
        )
    }

    fn chat(&self, req: &ChatReq, a: &Answer, usage: Usage, _cx: &Cx<'_>) -> Bytes {
        messages::chat(req, a, usage)
    }

    fn chat_stream(&self, req: &ChatReq, a: &Answer, usage: Usage, _cx: &Cx<'_>) -> StreamParts {
        messages::chat_stream(req, a, usage)
    }

    fn stream_error(&self, _cx: &Cx<'_>) -> Bytes {
        sse_event(
            "error",
            &json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        )
    }

    fn transcript(&self, _req: &SttReq, _t: &Transcript, _cx: &Cx<'_>) -> (&'static str, Bytes) {
        // No Anthropic route parses into a transcription.
        (JSON, Bytes::new())
    }

    fn token_count(&self, _req: &CountReq, tokens: u64, _cx: &Cx<'_>) -> Bytes {
        // docs.claude.com/en/api/messages-count-tokens: `{"input_tokens": N}`.
        json_bytes(&json!({"input_tokens": tokens}))
    }

    fn id_headers(&self, cx: &Cx<'_>, h: &mut HeaderMap) {
        h.insert(HeaderName::from_static("request-id"), hv(&cx.request_id));
    }
}
