//! Gemini: `POST /v1beta/models/{model}:generateContent` and `:streamGenerateContent`
//! (`?alt=sse`: `data: {…}\r\n\r\n` events, each a whole `GenerateContentResponse`; without
//! it: one JSON array), `:embedContent` and `:batchEmbedContents` (`gemini_embed.rs`), key in
//! `x-goog-api-key` or `?key=`; errors in the google.rpc shape
//! `{"error": {"code", "message", "status", "details": […]}}` with `QuotaFailure`, `Help`
//! and `RetryInfo` details on 429. No rate-limit headers
//! (ai.google.dev/api/generate-content, …/gemini-api/docs/rate-limits, …/troubleshooting).
//! Requests and answers (tools, structured outputs, images) are `gemini_generate.rs`.

use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, StatusCode};
use bytes::Bytes;
use serde_json::{Value, json};

use super::gemini_embed::{self, Api};
use super::gemini_generate::{self as generate, GenerateBody};
use super::{
    ApiError, ChatReq, Cx, EmbedReq, Field, JSON, Op, OpKind, Rendered, Route, StreamParts, SttReq,
    Usage, Wire, header, json_bytes, query_param,
};
use crate::headers::ceil_secs;
use crate::limits::LimitName;
use crate::text::Transcript;
use crate::tools::Answer;

pub(super) struct Gemini;

/// Gemini's request size limit (20 MB).
const BODY_LIMIT: usize = 20 << 20;

/// An error in the google.rpc shape (Vertex AI answers in it too).
pub(super) fn rpc(code: u16, status: &str, message: &str, details: Vec<Value>) -> ApiError {
    let mut err = json!({"code": code, "message": message, "status": status});
    if !details.is_empty() {
        err["details"] = Value::Array(details);
    }
    ApiError::Raw {
        status: code,
        body: json!({ "error": err }),
    }
}

/// Gemini's 400 for a request it refuses (the refusals of `gemini_generate.rs` are
/// [`ApiError::BadRequest`], rendered here).
fn invalid(message: &str) -> ApiError {
    rpc(400, "INVALID_ARGUMENT", message, Vec::new())
}

fn help() -> Value {
    json!({"@type": "type.googleapis.com/google.rpc.Help", "links": [{
        "description": "Learn more about Gemini API quotas",
        "url": "https://ai.google.dev/gemini-api/docs/rate-limits",
    }]})
}

fn quota_ids(which: LimitName) -> (&'static str, &'static str) {
    match which {
        LimitName::Tpm => (
            "generativelanguage.googleapis.com/generate_content_input_token_count",
            "GenerateContentInputTokensPerModelPerMinute",
        ),
        LimitName::Tpd => (
            "generativelanguage.googleapis.com/generate_content_input_token_count",
            "GenerateContentInputTokensPerModelPerDay",
        ),
        LimitName::Rpd => (
            "generativelanguage.googleapis.com/generate_content_requests",
            "GenerateRequestsPerDayPerProjectPerModel",
        ),
        LimitName::Rpm | LimitName::Concurrency => (
            "generativelanguage.googleapis.com/generate_content_requests",
            "GenerateRequestsPerMinutePerProjectPerModel",
        ),
    }
}

fn resource_exhausted(which: LimitName, limit: u64, model: &str, delay: Option<u64>) -> ApiError {
    let (metric, id) = quota_ids(which);
    let retry = delay
        .map(|s| format!("\nPlease retry in {s}s."))
        .unwrap_or_default();
    let message = format!(
        "You exceeded your current quota, please check your plan and billing details. For more \
         information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits. \
         To monitor your current usage, head to: https://ai.dev/usage?tab=rate-limit. \n* \
         Quota exceeded for metric: {metric}, limit: {limit}, model: {model}{retry}"
    );
    let mut details = vec![
        json!({"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{
            "quotaMetric": metric,
            "quotaId": id,
            "quotaDimensions": {"location": "global", "model": model},
            "quotaValue": limit.to_string(),
        }]}),
        help(),
    ];
    if let Some(s) = delay {
        details.push(json!({
            "@type": "type.googleapis.com/google.rpc.RetryInfo",
            "retryDelay": format!("{s}s"),
        }));
    }
    rpc(429, "RESOURCE_EXHAUSTED", &message, details)
}

/// A `generateContent` body for the route's model (Vertex AI's is the same).
pub(super) fn parse_generate(
    route: &Route,
    parts: &Parts,
    body: &Bytes,
) -> Result<ChatReq, ApiError> {
    let b: GenerateBody = serde_json::from_slice(body).map_err(|e| {
        invalid(&format!(
            "Invalid JSON payload received. {}",
            match e.classify() {
                serde_json::error::Category::Data => format!("{e}"),
                _ => format!("Unexpected token.\n{e}"),
            }
        ))
    })?;
    let sse = query_param(parts.uri.query(), "alt") == Some("sse");
    let model = route.model.clone().unwrap_or_default();
    generate::parse(b, model, route.stream, sse)
}

/// A streamed answer's chunks framed: `data: {…}\r\n\r\n` events with `alt=sse`, else the
/// pieces of one JSON array (`[{…}`, `,\r\n{…}`, …, `]`).
pub(super) fn frame_stream(req: &ChatReq, mut chunks: Vec<Value>) -> StreamParts {
    let n = chunks.len();
    let last = chunks.pop().unwrap_or(Value::Null);
    let frame = |v: &Value, i: usize| -> Bytes {
        let json = serde_json::to_string(v).unwrap_or_default();
        Bytes::from(if req.sse {
            format!("data: {json}\r\n\r\n")
        } else if i == 0 {
            format!("[{json}")
        } else {
            format!(",\r\n{json}")
        })
    };
    let body: Vec<Bytes> = chunks
        .iter()
        .enumerate()
        .map(|(i, v)| frame(v, i))
        .collect();
    let mut tail = frame(&last, n.saturating_sub(1)).to_vec();
    if !req.sse {
        tail.extend_from_slice(b"]");
    }
    StreamParts {
        head: Vec::new(),
        body,
        tail: vec![Bytes::from(tail)],
    }
}

impl Wire for Gemini {
    fn caches_prompts(&self) -> bool {
        true
    }

    fn route(&self, method: &Method, path: &str, _query: Option<&str>) -> Option<Route> {
        if method != Method::POST {
            return None;
        }
        let rest = path
            .strip_prefix("/v1beta/models/")
            .or_else(|| path.strip_prefix("/v1/models/"))?;
        let (model, verb) = rest.rsplit_once(':')?;
        if model.is_empty() || model.contains('/') {
            return None;
        }
        let (op, stream) = match verb {
            "generateContent" => (OpKind::Chat, false),
            "streamGenerateContent" => (OpKind::Chat, true),
            "embedContent" | "batchEmbedContents" => (OpKind::Embed, false),
            _ => return None,
        };
        Some(Route {
            model: Some(model.to_owned()),
            stream,
            ..Route::new(op)
        })
    }

    fn authorize(&self, parts: &Parts, key: &str) -> Result<(), ApiError> {
        let given =
            header(parts, "x-goog-api-key").or_else(|| query_param(parts.uri.query(), "key"));
        match given {
            None | Some("") => Err(rpc(
                403,
                "PERMISSION_DENIED",
                "Method doesn't allow unregistered callers (callers without established \
                 identity). Please use API Key or other form of API consumer identity to call \
                 this API.",
                Vec::new(),
            )),
            Some(k) if k == key => Ok(()),
            Some(_) => Err(rpc(
                400,
                "INVALID_ARGUMENT",
                "API key not valid. Please pass a valid API key.",
                vec![json!({
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "API_KEY_INVALID",
                    "domain": "googleapis.com",
                    "metadata": {"service": "generativelanguage.googleapis.com"},
                })],
            )),
        }
    }

    fn body_limit(&self, _op: OpKind) -> usize {
        BODY_LIMIT
    }

    fn parse(
        &self,
        route: &Route,
        parts: &Parts,
        body: &Bytes,
        _form: &[Field],
    ) -> Result<Op, ApiError> {
        let model = route.model.clone().unwrap_or_default();
        if route.op == OpKind::Embed {
            let batch = parts.uri.path().ends_with(":batchEmbedContents");
            return gemini_embed::parse(Api::Gemini, &model, batch, body).map(Op::Embed);
        }
        parse_generate(route, parts, body).map(Op::Chat)
    }

    fn error(&self, e: &ApiError, cx: &Cx<'_>) -> Rendered {
        let e = match e {
            ApiError::NotFound => rpc(
                404,
                "NOT_FOUND",
                &format!(
                    "The requested URL {} was not found on this server.",
                    cx.path
                ),
                Vec::new(),
            ),
            ApiError::MissingKey | ApiError::WrongKey(_) => invalid("API key not valid."),
            ApiError::BadRequest { message, .. } => invalid(message),
            ApiError::ModelNotFound(m) => rpc(
                404,
                "NOT_FOUND",
                &format!(
                    "models/{m} is not found for API version v1beta, or is not supported for \
                     generateContent. Call ListModels to see the list of available models and \
                     their supported methods."
                ),
                Vec::new(),
            ),
            ApiError::PayloadTooLarge { limit, .. } => invalid(&format!(
                "Request payload size exceeds the limit: {limit} bytes."
            )),
            ApiError::RateLimited(l) => {
                let delay = l.delay.map(|d| ceil_secs(d).max(1));
                resource_exhausted(l.which, l.limit, &l.model, delay)
            }
            ApiError::InsufficientQuota => {
                resource_exhausted(LimitName::Rpd, 0, "gemini-2.5-pro", None)
            }
            ApiError::Overloaded | ApiError::Status(503) => rpc(
                503,
                "UNAVAILABLE",
                "The model is overloaded. Please try again later.",
                Vec::new(),
            ),
            ApiError::Status(504) => rpc(
                504,
                "DEADLINE_EXCEEDED",
                "Deadline expired before operation could complete.",
                Vec::new(),
            ),
            ApiError::Status(s) if *s >= 500 => rpc(
                *s,
                "INTERNAL",
                "An internal error has occurred. Please retry or report in \
                 https://developers.generativeai.google/guide/troubleshooting",
                Vec::new(),
            ),
            ApiError::Status(s) => rpc(
                *s,
                "FAILED_PRECONDITION",
                StatusCode::from_u16(*s)
                    .ok()
                    .and_then(|c| c.canonical_reason())
                    .unwrap_or("Error"),
                Vec::new(),
            ),
            ApiError::Raw { .. } => e.clone(),
        };
        match e {
            ApiError::Raw { status, body } => (
                StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                JSON,
                json_bytes(&body),
            ),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, JSON, Bytes::new()),
        }
    }

    fn chat(&self, req: &ChatReq, a: &Answer, usage: Usage, _cx: &Cx<'_>) -> Bytes {
        json_bytes(&generate::response(
            req,
            generate::answer_parts(req, a),
            Some((a, usage)),
        ))
    }

    fn chat_stream(&self, req: &ChatReq, a: &Answer, usage: Usage, _cx: &Cx<'_>) -> StreamParts {
        frame_stream(req, generate::stream_chunks(req, a, usage))
    }

    fn stream_error(&self, _cx: &Cx<'_>) -> Bytes {
        let err = json!({"error": {"code": 500, "status": "INTERNAL",
            "message": "An internal error has occurred. Please retry or report in \
                        https://developers.generativeai.google/guide/troubleshooting"}});
        Bytes::from(format!("data: {err}\r\n\r\n"))
    }

    fn transcript(&self, _req: &SttReq, _t: &Transcript, _cx: &Cx<'_>) -> (&'static str, Bytes) {
        // No Gemini route parses into a transcription.
        (JSON, Bytes::new())
    }

    fn embeddings(&self, req: &EmbedReq, _cx: &Cx<'_>) -> Bytes {
        gemini_embed::render(req)
    }

    fn id_headers(&self, _cx: &Cx<'_>, _h: &mut HeaderMap) {}
}
