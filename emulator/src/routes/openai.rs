//! OpenAI: `POST /v1/chat/completions` (JSON, or SSE chunks ending in `data: [DONE]`),
//! `POST /v1/audio/transcriptions` (multipart) and `POST /v1/embeddings`, `Authorization:
//! Bearer` keys, errors as `{"error": {"message", "type", "param", "code"}}`.
//!
//! Formats follow the API reference (platform.openai.com/docs/api-reference/chat,
//! …/audio/createTranscription) and the error-codes guide (…/docs/guides/error-codes).
//! Chat requests (tools, structured outputs, images) are `openai_chat.rs`, their answers
//! `openai_answer.rs`; embeddings `openai_embed.rs`;
//! Azure OpenAI reuses these bodies (see `azure.rs`).

use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use bytes::Bytes;
use serde_json::{Value, json};

use super::{
    ApiError, ChatReq, Cx, EmbedReq, Field, JSON, Limited, Op, OpKind, Rendered, Route,
    StreamParts, SttReq, Usage, Wire, auth_scheme, hv, json_bytes, mask_key, sse_data,
};
use super::{openai_answer, openai_chat, openai_embed, transcription};
use crate::config::HeaderStyle;
use crate::headers::{epoch_ms, go_duration};
use crate::limits::LimitName;
use crate::text::Transcript;
use crate::tools::Answer;

pub(super) struct OpenAi;

/// JSON bodies are capped here (a chat request of this size is far beyond any context).
pub(super) const JSON_LIMIT: usize = 16 << 20;
/// OpenAI's documented audio upload limit (25 MB).
pub(super) const AUDIO_LIMIT: usize = 25 << 20;

impl Wire for OpenAi {
    fn caches_prompts(&self) -> bool {
        true
    }

    fn route(&self, method: &Method, path: &str, _query: Option<&str>) -> Option<Route> {
        if method != Method::POST {
            return None;
        }
        match path {
            "/v1/chat/completions" => Some(Route::new(OpKind::Chat)),
            "/v1/audio/transcriptions" => Some(Route::new(OpKind::Transcribe)),
            "/v1/embeddings" => Some(Route::new(OpKind::Embed)),
            _ => None,
        }
    }

    fn authorize(&self, parts: &Parts, key: &str) -> Result<(), ApiError> {
        match auth_scheme(parts, "bearer") {
            None => Err(ApiError::MissingKey),
            Some(k) if k == key => Ok(()),
            Some(k) => Err(ApiError::WrongKey(k.to_owned())),
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
        match route.op {
            OpKind::Chat => openai_chat::parse_chat(body, None).map(Op::Chat),
            OpKind::Transcribe => transcription::parse(parts, form, None).map(Op::Stt),
            OpKind::Embed => openai_embed::parse(body, None).map(Op::Embed),
            // No route of this format counts tokens.
            OpKind::CountTokens => Err(ApiError::NotFound),
        }
    }

    fn error(&self, e: &ApiError, cx: &Cx<'_>) -> Rendered {
        error(e, cx)
    }

    fn chat(&self, req: &ChatReq, a: &Answer, usage: Usage, cx: &Cx<'_>) -> Bytes {
        openai_answer::chat_body(req, a, usage, cx, false)
    }

    fn chat_stream(&self, req: &ChatReq, a: &Answer, usage: Usage, cx: &Cx<'_>) -> StreamParts {
        openai_answer::chat_stream(req, a, usage, cx, false)
    }

    fn stream_error(&self, _cx: &Cx<'_>) -> Bytes {
        sse_data(&json!({"error": server_error_body(500)}))
    }

    fn transcript(&self, req: &SttReq, t: &Transcript, _cx: &Cx<'_>) -> (&'static str, Bytes) {
        transcription::render(req, t)
    }

    fn embeddings(&self, req: &EmbedReq, _cx: &Cx<'_>) -> Bytes {
        openai_embed::render(req)
    }

    fn id_headers(&self, cx: &Cx<'_>, h: &mut HeaderMap) {
        h.insert(HeaderName::from_static("x-request-id"), hv(&cx.request_id));
        h.insert(
            HeaderName::from_static("openai-version"),
            HeaderValue::from_static("2020-10-01"),
        );
        h.insert(
            HeaderName::from_static("openai-organization"),
            HeaderValue::from_static("org-emulator"),
        );
        let ms = cx.started.elapsed().as_millis() as u64;
        h.insert(
            HeaderName::from_static("openai-processing-ms"),
            HeaderValue::from(ms),
        );
    }
}

fn err_body(message: &str, kind: &str, param: Option<&str>, code: Option<&str>) -> Value {
    json!({"error": {"message": message, "type": kind, "param": param, "code": code}})
}

fn server_error_body(status: u16) -> Value {
    let msg = match status {
        502 => "Bad gateway.",
        503 => "The server is overloaded or not ready yet.",
        504 => "Gateway timeout.",
        _ => "The server had an error while processing your request. Sorry about that!",
    };
    json!({"message": msg, "type": "server_error", "param": null, "code": null})
}

fn limit_name(which: LimitName) -> &'static str {
    match which {
        LimitName::Rpm => "requests per min (RPM)",
        LimitName::Tpm => "tokens per min (TPM)",
        LimitName::Rpd => "requests per day (RPD)",
        LimitName::Tpd => "tokens per day (TPD)",
        LimitName::Concurrency => "concurrent requests",
    }
}

/// OpenAI's 429 body for a limit.
pub(super) fn rate_limit_body(l: &Limited, cx: &Cx<'_>) -> Value {
    if cx.provider.cfg.header_style() == HeaderStyle::OpenRouter {
        return openrouter_rate_limit_body(l, cx);
    }
    if cx.provider.cfg.header_style() == HeaderStyle::LiteLlm && !l.too_large {
        // A LiteLLM proxy's own refusal (its router's `rpm` with `enable_pre_call_checks`):
        // the deployment is left out of the pick, and none is left. Recorded from LiteLLM
        // 1.108.7's proxy: `429`, this body, no rate-limit headers, no `Retry-After`.
        return json!({"error": {
            "message": "No deployments available for selected model.",
            "type": "rate_limit_error",
            "param": null,
            "code": "429",
        }});
    }
    let kind = if l.which.is_tokens() {
        "tokens"
    } else {
        "requests"
    };
    let msg = if l.too_large {
        format!(
            "Request too large for {} in organization org-emulator on {}: Limit {}, Requested \
             {}. The input or output tokens must be reduced in order to run successfully. \
             Visit https://platform.openai.com/account/rate-limits to learn more.",
            l.model,
            limit_name(l.which),
            l.limit,
            l.requested
        )
    } else {
        // A provider that states nothing says no delay in its text either.
        let silent = matches!(
            cx.provider.cfg.header_style(),
            HeaderStyle::None | HeaderStyle::LiteLlm
        );
        let wait = l
            .delay
            .filter(|_| !silent)
            .map(|d| format!(" Please try again in {}.", go_duration(d)))
            .unwrap_or_default();
        format!(
            "Rate limit reached for {} in organization org-emulator on {}: Limit {}, Used {}, \
             Requested {}.{wait} Visit https://platform.openai.com/account/rate-limits to learn \
             more.",
            l.model,
            limit_name(l.which),
            l.limit,
            l.used,
            l.requested
        )
    };
    err_body(&msg, kind, None, Some("rate_limit_exceeded"))
}

/// OpenRouter's 429: `{"error": {"message", "code": 429, "metadata": {"headers": …}}}`.
fn openrouter_rate_limit_body(l: &Limited, cx: &Cx<'_>) -> Value {
    let window = if l.which.is_daily() {
        "per-day"
    } else {
        "per-min"
    };
    let reset = epoch_ms(cx.wall, l.delay.unwrap_or_default());
    json!({"error": {
        "message": format!("Rate limit exceeded: free-models-{window}. "),
        "code": 429,
        "metadata": {"headers": {
            "X-RateLimit-Limit": l.limit.to_string(),
            "X-RateLimit-Remaining": "0",
            "X-RateLimit-Reset": reset.to_string(),
        }},
    }})
}

pub(super) fn error(e: &ApiError, cx: &Cx<'_>) -> Rendered {
    let (status, body) = match e {
        ApiError::NotFound => (
            404,
            err_body(
                &format!("Invalid URL ({} {})", cx.method, cx.path),
                "invalid_request_error",
                None,
                None,
            ),
        ),
        ApiError::MissingKey => (
            401,
            err_body(
                "You didn't provide an API key. You need to provide your API key in an \
                 Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), \
                 or as the password field (with blank username) if you're accessing the API \
                 from your browser and are prompted for a username and password. You can \
                 obtain an API key from https://platform.openai.com/account/api-keys.",
                "invalid_request_error",
                None,
                None,
            ),
        ),
        ApiError::WrongKey(k) => (
            401,
            err_body(
                &format!(
                    "Incorrect API key provided: {}. You can find your API key at \
                     https://platform.openai.com/account/api-keys.",
                    mask_key(k)
                ),
                "invalid_request_error",
                None,
                Some("invalid_api_key"),
            ),
        ),
        ApiError::BadRequest {
            message,
            param,
            code,
        } => (
            400,
            err_body(message, "invalid_request_error", *param, *code),
        ),
        ApiError::ModelNotFound(m) => (
            404,
            err_body(
                &format!("The model `{m}` does not exist or you do not have access to it."),
                "invalid_request_error",
                None,
                Some("model_not_found"),
            ),
        ),
        ApiError::PayloadTooLarge { limit, got } => (
            413,
            err_body(
                &format!(
                    "Maximum content size limit ({limit}) exceeded ({} bytes read)",
                    got.map_or_else(|| "more".to_owned(), |g| g.to_string())
                ),
                "server_error",
                None,
                None,
            ),
        ),
        ApiError::RateLimited(l) => (429, rate_limit_body(l, cx)),
        // openrouter.ai/docs/api-reference/errors: 402 when the credits run out.
        ApiError::InsufficientQuota
            if cx.provider.cfg.header_style() == HeaderStyle::OpenRouter =>
        {
            (
                402,
                json!({"error": {
                    "code": 402,
                    "message": "Insufficient credits. Add more using \
                                https://openrouter.ai/settings/credits",
                }}),
            )
        }
        // platform.openai.com/docs/guides/error-codes#api-errors: 429 `insufficient_quota`.
        ApiError::InsufficientQuota => (
            429,
            err_body(
                "You exceeded your current quota, please check your plan and billing details. \
                 For more information on this error, read the docs: \
                 https://platform.openai.com/docs/guides/error-codes/api-errors.",
                "insufficient_quota",
                None,
                Some("insufficient_quota"),
            ),
        ),
        ApiError::Status(s) if *s >= 500 => (*s, json!({"error": server_error_body(*s)})),
        ApiError::Status(s) => (
            *s,
            err_body(
                StatusCode::from_u16(*s)
                    .ok()
                    .and_then(|c| c.canonical_reason())
                    .unwrap_or("Error"),
                "invalid_request_error",
                None,
                None,
            ),
        ),
        ApiError::Overloaded => (
            503,
            err_body(
                "The engine is currently overloaded, please try again later",
                "server_error",
                None,
                None,
            ),
        ),
        ApiError::Raw { status, body } => (*status, body.clone()),
    };
    (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        JSON,
        json_bytes(&body),
    )
}
