//! Gemini: `POST /v1beta/models/{model}:generateContent` and `:streamGenerateContent`
//! (`?alt=sse`: `data: {…}\r\n\r\n` events, each a whole `GenerateContentResponse`; without
//! it: one JSON array), key in `x-goog-api-key` or `?key=`; errors in the google.rpc shape
//! `{"error": {"code", "message", "status", "details": […]}}` with `QuotaFailure`, `Help`
//! and `RetryInfo` details on 429. No rate-limit headers
//! (ai.google.dev/api/generate-content, …/gemini-api/docs/rate-limits, …/troubleshooting).

use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, StatusCode};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{
    header, json_bytes, query_param, ApiError, ChatReq, Cx, Field, Op, OpKind, Rendered, Route,
    StreamParts, SttReq, Usage, Wire, JSON,
};
use crate::headers::ceil_secs;
use crate::limits::LimitName;
use crate::text::{deltas, new_id, Completion, PromptDigest, Transcript};

pub(super) struct Gemini;

/// Gemini's request size limit (20 MB).
const BODY_LIMIT: usize = 20 << 20;

#[derive(Deserialize)]
struct GenerateBody {
    contents: Option<Vec<GContent>>,
    #[serde(rename = "systemInstruction", alias = "system_instruction")]
    system_instruction: Option<GContent>,
    #[serde(rename = "generationConfig", alias = "generation_config")]
    generation_config: Option<GenerationConfig>,
}

#[derive(Deserialize)]
struct GContent {
    parts: Option<Vec<GPart>>,
}

#[derive(Deserialize)]
struct GPart {
    text: Option<String>,
}

#[derive(Deserialize)]
struct GenerationConfig {
    #[serde(rename = "maxOutputTokens", alias = "max_output_tokens")]
    max_output_tokens: Option<u64>,
}

impl GContent {
    fn add_to(&self, p: &mut PromptDigest) {
        for t in self
            .parts
            .iter()
            .flatten()
            .filter_map(|p| p.text.as_deref())
        {
            p.add(t);
        }
    }
}

fn rpc(code: u16, status: &str, message: &str, details: Vec<Value>) -> ApiError {
    let mut err = json!({"code": code, "message": message, "status": status});
    if !details.is_empty() {
        err["details"] = Value::Array(details);
    }
    ApiError::Raw {
        status: code,
        body: json!({ "error": err }),
    }
}

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

impl Wire for Gemini {
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
        let stream = match verb {
            "generateContent" => false,
            "streamGenerateContent" => true,
            _ => return None,
        };
        Some(Route {
            model: Some(model.to_owned()),
            stream,
            ..Route::new(OpKind::Chat)
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
        let b: GenerateBody = serde_json::from_slice(body).map_err(|e| {
            invalid(&format!(
                "Invalid JSON payload received. {}",
                match e.classify() {
                    serde_json::error::Category::Data => format!("{e}"),
                    _ => format!("Unexpected token.\n{e}"),
                }
            ))
        })?;
        let contents = b.contents.unwrap_or_default();
        if contents.is_empty() {
            return Err(invalid(
                "* GenerateContentRequest.contents: contents is not specified\n",
            ));
        }
        let mut prompt = PromptDigest::default();
        if let Some(s) = &b.system_instruction {
            s.add_to(&mut prompt);
        }
        for c in &contents {
            c.add_to(&mut prompt);
        }
        let sse = query_param(parts.uri.query(), "alt") == Some("sse");
        Ok(Op::Chat(ChatReq {
            model: route.model.clone().unwrap_or_default(),
            prompt,
            max_tokens: b.generation_config.and_then(|g| g.max_output_tokens),
            stream: route.stream,
            sse,
            include_usage: true,
        }))
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

    fn chat(&self, req: &ChatReq, c: &Completion, usage: Usage, _cx: &Cx<'_>) -> Bytes {
        json_bytes(&response(req, &c.text, Some(finish(c)), Some(usage)))
    }

    fn chat_stream(
        &self,
        req: &ChatReq,
        c: &Completion,
        usage: Usage,
        _cx: &Cx<'_>,
    ) -> StreamParts {
        let mut pieces = deltas(&c.text, 3);
        if pieces.is_empty() {
            pieces.push("");
        }
        let n = pieces.len();
        let mut chunks: Vec<Value> = pieces
            .into_iter()
            .enumerate()
            .map(|(i, d)| {
                let last = i + 1 == n;
                response(req, d, last.then(|| finish(c)), last.then_some(usage))
            })
            .collect();
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
        let mut tail = frame(&last, n - 1).to_vec();
        if !req.sse {
            tail.extend_from_slice(b"]");
        }
        StreamParts {
            head: Vec::new(),
            body,
            tail: vec![Bytes::from(tail)],
        }
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

    fn id_headers(&self, _cx: &Cx<'_>, _h: &mut HeaderMap) {}
}

fn finish(c: &Completion) -> &'static str {
    if c.truncated {
        "MAX_TOKENS"
    } else {
        "STOP"
    }
}

fn response(req: &ChatReq, text: &str, finish: Option<&str>, usage: Option<Usage>) -> Value {
    let mut candidate = json!({
        "content": {"parts": [{"text": text}], "role": "model"},
        "index": 0,
    });
    if let Some(f) = finish {
        candidate["finishReason"] = json!(f);
    }
    let mut v = json!({
        "candidates": [candidate],
        "modelVersion": req.model,
        "responseId": new_id("", 22),
    });
    if let Some(u) = usage {
        v["usageMetadata"] = json!({
            "promptTokenCount": u.input,
            "candidatesTokenCount": u.output,
            "totalTokenCount": u.input + u.output,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": u.input}],
        });
    }
    v
}
