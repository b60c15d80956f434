//! AWS Bedrock Runtime: `POST /model/{modelId}/converse` and `POST
//! /model/{modelId}/converse-stream` (docs.aws.amazon.com/bedrock/latest/APIReference/
//! API_runtime_Converse.html, …/API_runtime_ConverseStream.html; botocore's service model
//! `bedrock-runtime` 2023-09-30), and `POST /model/{modelId}/invoke` for the embedding models
//! (`bedrock_invoke.rs`, with the `X-Amzn-Bedrock-Input-Token-Count` and
//! `-Invocation-Latency` headers InvokeModel answers with), every request signed with AWS Signature Version 4 for
//! service `bedrock` and the provider's region (`sigv4.rs`), the model id percent-encoded in
//! the path. JSON answers, or `application/vnd.amazon.eventstream` frames (`eventstream.rs`)
//! for the stream; errors as `{"message": …}` with the exception's name in
//! `x-amzn-ErrorType` (`ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/`,
//! which botocore reads up to the `:`), mid-stream as exception frames. No rate-limit
//! headers and no `Retry-After`: Bedrock states none. Requests and answers (tools,
//! structured outputs, images) are `bedrock_converse.rs`.
//!
//! Statuses and names of the exceptions: the API reference's Errors sections and the service
//! model (`ValidationException` 400, `AccessDeniedException` 403, `ResourceNotFoundException`
//! 404, `ModelTimeoutException` 408, `ModelErrorException` 424, `ModelNotReadyException` and
//! `ThrottlingException` 429, `InternalServerException` 500, `ServiceUnavailableException`
//! 503, `ServiceQuotaExceededException` 400); the signing ones as AWS endpoints send them
//! (`MissingAuthenticationTokenException`, `UnrecognizedClientException`,
//! `InvalidSignatureException` 403, `IncompleteSignatureException` 400 —
//! docs.aws.amazon.com/bedrock/latest/userguide/troubleshooting-api-error-codes.html).
//! Throttling messages are Bedrock's own ("Too many requests, please wait before trying
//! again.", "Too many tokens, …", "Too many tokens per day, …").

use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, Method, StatusCode};
use bytes::Bytes;
use percent_encoding::percent_decode_str;
use serde_json::{Value, json};

use super::bedrock_converse::{self as converse, ConverseBody};
use super::{
    ApiError, ChatReq, Cx, EmbedReq, Field, JSON, Op, OpKind, Rendered, Route, StreamParts, SttReq,
    Usage, Wire, bedrock_invoke, eventstream, hv, json_bytes,
};
use crate::limits::LimitName;
use crate::sigv4::{self, Refusal};
use crate::text::Transcript;
use crate::tools::Answer;

pub(super) struct Bedrock;

/// The service name requests are signed for (the service model's `signingName`).
const SERVICE: &str = "bedrock";

/// The emulator's cap on a request body. Bedrock documents limits per image (3.75 MB) and
/// per document (4.5 MB), not one for the whole body.
const BODY_LIMIT: usize = 20 << 20;

/// Bedrock's `ConverseStream` content type.
const EVENT_STREAM: &str = "application/vnd.amazon.eventstream";

/// What a request refused for a request-per-minute limit reads.
const TOO_MANY_REQUESTS: &str = "Too many requests, please wait before trying again.";

/// An exception raised by Bedrock itself, named in `code` (the refusals of
/// `bedrock_converse.rs` without a code are `ValidationException`s).
pub(super) fn exception(name: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::BadRequest {
        message: message.into(),
        param: None,
        code: Some(name),
    }
}

/// The status of an exception, by name.
fn status_of(name: &str) -> u16 {
    match name {
        "AccessDeniedException"
        | "InvalidSignatureException"
        | "MissingAuthenticationTokenException"
        | "UnrecognizedClientException" => 403,
        "ResourceNotFoundException" | "UnknownOperationException" => 404,
        "ModelTimeoutException" => 408,
        "ModelErrorException" => 424,
        "ModelNotReadyException" | "ThrottlingException" => 429,
        "InternalServerException" => 500,
        "ServiceUnavailableException" => 503,
        _ => 400,
    }
}

/// Exceptions of AWS's front door (authentication, routing) rather than of Bedrock: their
/// `x-amzn-ErrorType` names coral's service namespace.
fn front_door(name: &str) -> bool {
    matches!(
        name,
        "IncompleteSignatureException"
            | "InvalidSignatureException"
            | "MissingAuthenticationTokenException"
            | "UnrecognizedClientException"
            | "UnknownOperationException"
    )
}

/// (status, exception, message) of an error.
fn describe(e: &ApiError, cx: &Cx<'_>) -> (u16, &'static str, String) {
    let named = |name: &'static str, message: &str| (status_of(name), name, message.to_owned());
    match e {
        ApiError::NotFound => named(
            "UnknownOperationException",
            &format!("Unknown operation: {} {}", cx.method, cx.path),
        ),
        ApiError::MissingKey => named(
            "MissingAuthenticationTokenException",
            "Missing Authentication Token",
        ),
        ApiError::WrongKey(_) => named(
            "UnrecognizedClientException",
            "The security token included in the request is invalid.",
        ),
        ApiError::BadRequest {
            message,
            code: Some(name),
            ..
        } => named(name, message),
        ApiError::BadRequest { message, .. } => named("ValidationException", message),
        ApiError::ModelNotFound(_) => named(
            "ValidationException",
            "The provided model identifier is invalid.",
        ),
        ApiError::PayloadTooLarge { limit, .. } => named(
            "ValidationException",
            &format!("The request body is larger than the {limit} bytes accepted."),
        ),
        ApiError::RateLimited(l) => {
            let message = match l.which {
                LimitName::Tpm => "Too many tokens, please wait before trying again.",
                // Bedrock's daily quotas count tokens.
                LimitName::Tpd | LimitName::Rpd => {
                    "Too many tokens per day, please wait before trying again."
                }
                LimitName::Rpm | LimitName::Concurrency => TOO_MANY_REQUESTS,
            };
            named("ThrottlingException", message)
        }
        ApiError::InsufficientQuota => named(
            "ServiceQuotaExceededException",
            "Your request exceeds the service quota for your account. You can view your quotas \
             at Viewing service quotas. You can resubmit your request later.",
        ),
        ApiError::Overloaded | ApiError::Status(503) => named(
            "ServiceUnavailableException",
            "Bedrock is unable to process your request.",
        ),
        ApiError::Status(s) => status_exception(*s),
        ApiError::Raw { status, body } => (
            *status,
            if *status >= 500 {
                "InternalServerException"
            } else {
                "ValidationException"
            },
            body.get("message")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        ),
    }
}

/// An injected status as the exception Bedrock answers it with.
fn status_exception(status: u16) -> (u16, &'static str, String) {
    let (name, message) = match status {
        400 => (
            "ValidationException",
            "The input fails to satisfy the constraints specified by Amazon Bedrock.",
        ),
        403 => (
            "AccessDeniedException",
            "You don't have access to the model with the specified model ID.",
        ),
        404 => (
            "ResourceNotFoundException",
            "The specified resource ARN was not found. Check the ARN and try your request again.",
        ),
        408 => (
            "ModelTimeoutException",
            "The request took too long to process. Processing time exceeded the model timeout \
             length.",
        ),
        424 => (
            "ModelErrorException",
            "The request failed due to an error while processing the model.",
        ),
        429 => (
            "ModelNotReadyException",
            "The model specified in the request is not ready to serve inference requests. The \
             AWS SDK will automatically retry the operation up to 5 times.",
        ),
        s if s >= 500 => (
            "InternalServerException",
            "An internal server error occurred.",
        ),
        _ => (
            "ValidationException",
            StatusCode::from_u16(status)
                .ok()
                .and_then(|c| c.canonical_reason())
                .unwrap_or("Error"),
        ),
    };
    (status, name, message.to_owned())
}

impl Wire for Bedrock {
    fn route(&self, method: &Method, path: &str, _query: Option<&str>) -> Option<Route> {
        if method != Method::POST {
            return None;
        }
        let (model, op) = path.strip_prefix("/model/")?.rsplit_once('/')?;
        let (op, stream) = match op {
            "converse" => (OpKind::Chat, false),
            "converse-stream" => (OpKind::Chat, true),
            "invoke" => (OpKind::Embed, false),
            _ => return None,
        };
        if model.is_empty() || model.contains('/') {
            return None;
        }
        // botocore sends the id percent-encoded (`anthropic.claude-3-haiku-20240307-v1%3A0`).
        let model = percent_decode_str(model).decode_utf8_lossy().into_owned();
        Some(Route {
            model: Some(model),
            stream,
            ..Route::new(op)
        })
    }

    fn authorize(&self, parts: &Parts, _key: &str) -> Result<(), ApiError> {
        // The signature covers the body: `verify` checks it once the body is read.
        if parts.headers.contains_key("authorization") {
            Ok(())
        } else {
            Err(ApiError::MissingKey)
        }
    }

    fn verify(&self, parts: &Parts, body: &Bytes, cx: &Cx<'_>) -> Result<(), ApiError> {
        let req = sigv4::Request {
            method: parts.method.as_str(),
            path: parts.uri.path(),
            query: parts.uri.query(),
            headers: &parts.headers,
            body,
        };
        let creds = cx.provider.cfg.aws_credentials();
        sigv4::verify(&req, &creds, SERVICE, cx.wall).map_err(|r| match r {
            Refusal::Missing => ApiError::MissingKey,
            Refusal::Unrecognized => ApiError::WrongKey(String::new()),
            Refusal::Incomplete(m) => exception("IncompleteSignatureException", m),
            Refusal::Invalid(m) => exception("InvalidSignatureException", m),
        })
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
        if route.op == OpKind::Embed {
            let model = route.model.as_deref().unwrap_or_default();
            return bedrock_invoke::parse(model, body).map(Op::Embed);
        }
        let b: ConverseBody = serde_json::from_slice(body).map_err(|e| {
            ApiError::bad(format!(
                "Malformed input request: {e}, please reformat your input and try again."
            ))
        })?;
        let model = route.model.clone().unwrap_or_default();
        converse::chat_req(&b, model, route.stream).map(Op::Chat)
    }

    fn error(&self, e: &ApiError, cx: &Cx<'_>) -> Rendered {
        let (status, _, message) = describe(e, cx);
        let body = match e {
            ApiError::Raw { body, .. } => body.clone(),
            _ => json!({ "message": message }),
        };
        (
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            JSON,
            json_bytes(&body),
        )
    }

    fn error_headers(&self, e: &ApiError, h: &mut HeaderMap) {
        // `describe` needs a context only for the NotFound message, which no header shows.
        let name = match e {
            ApiError::NotFound => "UnknownOperationException",
            ApiError::MissingKey => "MissingAuthenticationTokenException",
            ApiError::WrongKey(_) => "UnrecognizedClientException",
            ApiError::BadRequest {
                code: Some(name), ..
            } => name,
            ApiError::BadRequest { .. }
            | ApiError::ModelNotFound(_)
            | ApiError::PayloadTooLarge { .. } => "ValidationException",
            ApiError::RateLimited(_) => "ThrottlingException",
            ApiError::InsufficientQuota => "ServiceQuotaExceededException",
            ApiError::Overloaded => "ServiceUnavailableException",
            ApiError::Status(s) if *s == 503 => "ServiceUnavailableException",
            ApiError::Status(s) => status_exception(*s).1,
            ApiError::Raw { status, .. } if *status >= 500 => "InternalServerException",
            ApiError::Raw { .. } => "ValidationException",
        };
        let namespace = if front_door(name) {
            "com.amazon.coral.service"
        } else {
            "com.amazon.bedrock"
        };
        h.insert(
            HeaderName::from_static("x-amzn-errortype"),
            hv(&format!(
                "{name}:http://internal.amazon.com/coral/{namespace}/"
            )),
        );
    }

    fn chat(&self, _req: &ChatReq, a: &Answer, usage: Usage, cx: &Cx<'_>) -> Bytes {
        json_bytes(&converse::response(a, usage, cx.latency))
    }

    fn chat_stream(&self, _req: &ChatReq, a: &Answer, usage: Usage, cx: &Cx<'_>) -> StreamParts {
        let frame = |(kind, payload): (&str, Value)| eventstream::event(kind, &payload);
        let mut events = converse::stream_events(a, usage, cx.latency)
            .into_iter()
            .map(frame);
        // Head: messageStart and the first content event; tail: the last content event,
        // messageStop and metadata.
        let head: Vec<Bytes> = events.by_ref().take(2).collect();
        let mut body: Vec<Bytes> = events.collect();
        let tail = body.split_off(body.len().saturating_sub(3));
        StreamParts { head, body, tail }
    }

    fn stream_content_type(&self, _req: &ChatReq) -> &'static str {
        EVENT_STREAM
    }

    fn stream_error(&self, _cx: &Cx<'_>) -> Bytes {
        // A stream throttled midway, as Bedrock words it there.
        eventstream::exception(
            "throttlingException",
            "Too many requests, please wait before trying again. You have sent too many \
             requests.  Wait before trying again.",
        )
    }

    fn transcript(&self, _req: &SttReq, _t: &Transcript, _cx: &Cx<'_>) -> (&'static str, Bytes) {
        // No Bedrock route parses into a transcription.
        (JSON, Bytes::new())
    }

    fn embeddings(&self, req: &EmbedReq, _cx: &Cx<'_>) -> Bytes {
        bedrock_invoke::render(req)
    }

    fn embed_headers(&self, req: &EmbedReq, cx: &Cx<'_>, h: &mut HeaderMap) {
        h.insert(
            HeaderName::from_static("x-amzn-bedrock-input-token-count"),
            hv(&req.input_tokens().to_string()),
        );
        h.insert(
            HeaderName::from_static("x-amzn-bedrock-invocation-latency"),
            hv(&cx.latency.as_millis().to_string()),
        );
    }

    fn id_headers(&self, cx: &Cx<'_>, h: &mut HeaderMap) {
        h.insert(
            HeaderName::from_static("x-amzn-requestid"),
            hv(&cx.request_id),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_converse_and_its_stream_with_the_model_id_decoded() {
        let r = Bedrock
            .route(
                &Method::POST,
                "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse",
                None,
            )
            .unwrap();
        assert_eq!(
            (r.model.as_deref(), r.stream),
            (Some("anthropic.claude-3-haiku-20240307-v1:0"), false)
        );
        let s = Bedrock
            .route(&Method::POST, "/model/m/converse-stream", None)
            .unwrap();
        assert!(s.stream);
        for (m, p) in [
            (Method::GET, "/model/m/converse"),
            (Method::POST, "/model//converse"),
            (Method::POST, "/model/m/invoke-with-response-stream"),
            (Method::POST, "/v1/messages"),
        ] {
            assert!(Bedrock.route(&m, p, None).is_none(), "{m} {p}");
        }
    }

    #[test]
    fn every_exception_has_its_documented_status() {
        for (name, status) in [
            ("ValidationException", 400),
            ("ServiceQuotaExceededException", 400),
            ("IncompleteSignatureException", 400),
            ("AccessDeniedException", 403),
            ("InvalidSignatureException", 403),
            ("ResourceNotFoundException", 404),
            ("ModelTimeoutException", 408),
            ("ModelErrorException", 424),
            ("ModelNotReadyException", 429),
            ("ThrottlingException", 429),
            ("InternalServerException", 500),
            ("ServiceUnavailableException", 503),
        ] {
            assert_eq!(status_of(name), status, "{name}");
        }
        for s in [400, 403, 404, 408, 424, 429, 500, 502] {
            let (status, name, _) = status_exception(s);
            assert_eq!(status, s);
            if s != 502 {
                assert_eq!(status_of(name), s, "{name}");
            }
        }
    }
}
