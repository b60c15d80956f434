//! Bedrock's refusals → classified [`Error`]s.
//!
//! AWS's JSON protocols name the exception in the `x-amzn-ErrorType` header
//! (`ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/`: the name is
//! what comes before the `:`, as botocore reads it) or in the body's `__type`, and say why in
//! the body's `message` (`Message` in some services). The exceptions and their statuses are
//! the Converse reference's "Errors" section
//! (<https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html#API_runtime_Converse_Errors>)
//! and the common errors
//! (<https://docs.aws.amazon.com/bedrock/latest/APIReference/CommonErrors.html>). Inside a
//! ConverseStream the same exceptions arrive as exception frames, named in lower camel case
//! (`throttlingException`,
//! <https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ConverseStream.html>).

use llm_failover_core::{Error, ErrorKind};
use serde_json::Value;

/// The kind of an exception named `name` (either case of its first letter), `None` for one
/// this table does not know.
pub(crate) fn kind_of(name: &str, message: &str) -> Option<ErrorKind> {
    let mut chars = name.chars();
    let first = chars.next()?.to_ascii_uppercase();
    let name = format!("{first}{}", chars.as_str());
    Some(match name.as_str() {
        "ThrottlingException" => ErrorKind::RateLimited,
        "ServiceQuotaExceededException" => ErrorKind::QuotaExhausted,
        // "The model specified in the request is not ready to serve inference requests. The
        // AWS SDK will automatically retry": a wait mends it.
        "ModelNotReadyException" | "ServiceUnavailableException" => ErrorKind::Overloaded,
        "InternalServerException" | "ModelErrorException" | "ModelStreamErrorException" => {
            ErrorKind::Server
        }
        "ModelTimeoutException" => ErrorKind::Timeout,
        "ValidationException" if says_too_long(message) => ErrorKind::ContextLengthExceeded,
        "ValidationException" | "SerializationException" => ErrorKind::InvalidRequest,
        "AccessDeniedException" => ErrorKind::PermissionDenied,
        "UnrecognizedClientException"
        | "InvalidSignatureException"
        | "MissingAuthenticationTokenException"
        | "IncompleteSignatureException"
        | "ExpiredTokenException" => ErrorKind::Auth,
        "ResourceNotFoundException" => ErrorKind::NotFound,
        _ => return None,
    })
}

/// Whether a `ValidationException`'s message says the prompt does not fit the model ("Input
/// is too long for requested model.", "prompt is too long: 210000 tokens > 200000 maximum",
/// "too many input tokens", "model's maximum context length").
fn says_too_long(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "too long",
        "too many input tokens",
        "context length",
        "context window",
        "maximum context",
    ]
    .iter()
    .any(|w| m.contains(w))
}

/// The kind of a status with no exception this table knows: the core's reading, the same for
/// every kind.
use llm_failover_core::wing::providers::kind_for_status;

/// The exception's name from an `x-amzn-ErrorType` value or a `__type`
/// (`com.amazon.coral.service#ThrottlingException` too).
pub(crate) fn exception_name(value: &str) -> &str {
    let name = value.split(':').next().unwrap_or(value);
    name.rsplit('#').next().unwrap_or(name).trim()
}

/// Classifies a refusal: the exception named by `error_type` (the header) or the body's
/// `__type`, its `message`; the status when neither names one this table knows.
pub(crate) fn classify(status: u16, error_type: Option<&str>, body: &[u8]) -> Error {
    let json: Option<Value> = serde_json::from_slice(body).ok();
    let field = |name: &str| {
        json.as_ref()
            .and_then(|v| v.get(name))
            .and_then(Value::as_str)
    };
    let message = field("message")
        .or_else(|| field("Message"))
        .map(str::to_owned)
        .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_owned());
    let name = error_type
        .map(exception_name)
        .or_else(|| field("__type").map(exception_name))
        .filter(|n| !n.is_empty());
    let kind = name
        .and_then(|n| kind_of(n, &message))
        .unwrap_or_else(|| kind_for_status(status));
    let text = match name {
        Some(n) => format!("HTTP {status} {n}: {message}"),
        None => format!("HTTP {status}: {message}"),
    };
    let err = Error::new(kind, text).with_status(status);
    match name {
        Some(n) => err.with_code(n),
        None => err,
    }
}

/// An exception frame inside a stream that began with `200 OK`: `name` from its
/// `:exception-type` (`throttlingException`), its payload `{"message": …}`.
pub(crate) fn stream_exception(name: &str, payload: &str) -> Error {
    let message = serde_json::from_str::<Value>(payload)
        .ok()
        .and_then(|v| {
            v.get("message")
                .or_else(|| v.get("Message"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| payload.to_owned());
    let kind = kind_of(name, &message).unwrap_or(ErrorKind::Server);
    Error::new(kind, format!("{name} in the stream: {message}")).with_code(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each exception the Converse reference lists, as the header names it, with its status
    /// (https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html#API_runtime_Converse_Errors,
    /// https://docs.aws.amazon.com/bedrock/latest/APIReference/CommonErrors.html).
    #[test]
    fn classifies_each_exception_by_its_header() {
        let table = [
            (
                429,
                "ThrottlingException",
                "Too many requests, please wait before trying again.",
                ErrorKind::RateLimited,
            ),
            (
                400,
                "ServiceQuotaExceededException",
                "Your request exceeds the service quota for your account.",
                ErrorKind::QuotaExhausted,
            ),
            (
                429,
                "ModelNotReadyException",
                "Model is not ready to serve inference requests.",
                ErrorKind::Overloaded,
            ),
            (
                503,
                "ServiceUnavailableException",
                "Bedrock is unable to process your request.",
                ErrorKind::Overloaded,
            ),
            (
                500,
                "InternalServerException",
                "Internal server error",
                ErrorKind::Server,
            ),
            (
                424,
                "ModelErrorException",
                "The model failed to process the request.",
                ErrorKind::Server,
            ),
            (
                408,
                "ModelTimeoutException",
                "Model has timed out in processing the request.",
                ErrorKind::Timeout,
            ),
            (
                400,
                "ValidationException",
                "1 validation error detected: Value '0' at 'inferenceConfig.maxTokens' failed to satisfy constraint",
                ErrorKind::InvalidRequest,
            ),
            (
                400,
                "ValidationException",
                "Input is too long for requested model.",
                ErrorKind::ContextLengthExceeded,
            ),
            (
                400,
                "ValidationException",
                "prompt is too long: 210000 tokens > 200000 maximum",
                ErrorKind::ContextLengthExceeded,
            ),
            (
                403,
                "AccessDeniedException",
                "You don't have access to the model with the specified model ID.",
                ErrorKind::PermissionDenied,
            ),
            (
                403,
                "UnrecognizedClientException",
                "The security token included in the request is invalid.",
                ErrorKind::Auth,
            ),
            (
                403,
                "InvalidSignatureException",
                "The request signature we calculated does not match the signature you provided.",
                ErrorKind::Auth,
            ),
            (
                403,
                "MissingAuthenticationTokenException",
                "Missing Authentication Token",
                ErrorKind::Auth,
            ),
            (
                400,
                "IncompleteSignatureException",
                "Authorization header requires 'Credential' parameter.",
                ErrorKind::Auth,
            ),
            (
                404,
                "ResourceNotFoundException",
                "Could not resolve the foundation model from the provided model identifier.",
                ErrorKind::NotFound,
            ),
        ];
        for (status, name, message, kind) in table {
            let header = format!("{name}:http://internal.amazon.com/coral/com.amazon.bedrock/");
            let body = serde_json::json!({ "message": message }).to_string();
            let err = classify(status, Some(&header), body.as_bytes());
            assert_eq!(err.kind(), kind, "{name}: {message}");
            assert_eq!(err.code(), Some(name));
            assert_eq!(err.status(), Some(status));
            assert!(err.message().contains(message), "{err}");
        }
    }

    /// Throttling and a model not ready are waited out; a bad signature is never sent again.
    #[test]
    fn auth_is_terminal_and_throttling_is_not() {
        let auth = classify(403, Some("InvalidSignatureException"), b"{}");
        assert!(auth.is_terminal() && auth.is_auth());
        let throttled = classify(429, Some("ThrottlingException"), b"{\"message\":\"slow\"}");
        assert!(throttled.is_rate_limited() && !throttled.is_terminal());
        let not_ready = classify(429, Some("ModelNotReadyException"), b"{}");
        assert!(not_ready.is_retryable());
    }

    /// Without the header: the body's `__type` (either form), `Message`, then the status.
    #[test]
    fn falls_back_to_the_body_then_the_status() {
        let table: [(u16, &str, ErrorKind, Option<&str>); 5] = [
            (
                400,
                r#"{"__type":"com.amazon.coral.validate#ValidationException","Message":"bad"}"#,
                ErrorKind::InvalidRequest,
                Some("ValidationException"),
            ),
            (
                429,
                r#"{"__type":"ThrottlingException","message":"slow"}"#,
                ErrorKind::RateLimited,
                Some("ThrottlingException"),
            ),
            (
                503,
                "<html>Service Unavailable</html>",
                ErrorKind::Overloaded,
                None,
            ),
            (502, "", ErrorKind::Server, None),
            (
                418,
                r#"{"__type":"TeapotException","message":"?"}"#,
                ErrorKind::InvalidRequest,
                Some("TeapotException"),
            ),
        ];
        for (status, body, kind, code) in table {
            let err = classify(status, None, body.as_bytes());
            assert_eq!((err.kind(), err.code()), (kind, code), "{body}");
        }
        assert!(
            classify(400, None, br#"{"Message":"bad"}"#)
                .message()
                .contains("bad")
        );
    }

    /// The stream's exception frames, named in lower camel case.
    #[test]
    fn classifies_stream_exceptions() {
        let table = [
            ("throttlingException", ErrorKind::RateLimited),
            ("internalServerException", ErrorKind::Server),
            ("modelStreamErrorException", ErrorKind::Server),
            ("validationException", ErrorKind::InvalidRequest),
            ("serviceUnavailableException", ErrorKind::Overloaded),
            ("somethingNewException", ErrorKind::Server),
        ];
        for (name, kind) in table {
            let err = stream_exception(name, r#"{"message":"why"}"#);
            assert_eq!(err.kind(), kind, "{name}");
            assert!(err.message().contains("why"));
        }
    }
}
