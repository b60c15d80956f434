//! The body rows of the provider's failures: overloaded, a server fault, timed out. See the
//! table in `conformance.rs`.

use llm_failover::{Disposition, ErrorKind};

use super::{Cell, Refusal, anthropic, bedrock, deepgram, google, openai};

/// A provider at capacity: transient (retried with backoff, or failed over), the request is
/// not at fault.
pub(super) fn overloaded() -> Refusal {
    Refusal {
        what: "overloaded",
        kind: ErrorKind::Overloaded,
        disposition: Disposition::Transient,
        every_kind: true,
        cells: vec![
            // platform.openai.com/docs/guides/error-codes (503 "The engine is currently
            // overloaded"); the code kept is its type.
            Cell::new(
                "openai",
                503,
                include_str!("../../fixtures/openai/error_overloaded.json"),
                Some("server_error"),
                "The engine is currently overloaded",
            ),
            // Azure OpenAI's 503 (learn.microsoft.com/azure/ai-services/openai/reference).
            Cell::new(
                "azure",
                503,
                r#"{"error":{"code":"ServiceUnavailable","message":"The service is temporarily unable to process your request."}}"#,
                Some("ServiceUnavailable"),
                "temporarily unable to process your request",
            ),
            // docs.claude.com/en/api/errors (529 overloaded_error); the docs' body.
            Cell::new(
                "anthropic",
                529,
                include_str!("../../fixtures/anthropic/error_overloaded.json"),
                Some("overloaded_error"),
                "Overloaded",
            ),
            // ai.google.dev/gemini-api/docs/troubleshooting (503 UNAVAILABLE).
            google(
                "gemini",
                503,
                "UNAVAILABLE",
                "The model is overloaded. Please try again later.",
            ),
            // developers.deepgram.com/reference/errors (503).
            deepgram(503, "SERVICE_UNAVAILABLE", "Service unavailable."),
            // "The model specified in the request is not ready to serve inference requests.
            // The AWS SDK will automatically retry the operation."
            bedrock(
                429,
                "ModelNotReadyException",
                "Model is not ready to serve inference requests.",
            ),
            bedrock(
                503,
                "ServiceUnavailableException",
                "Bedrock is unable to process your request.",
            ),
            // cloud.google.com/vertex-ai/generative-ai/docs/model-reference/api-errors (503
            // UNAVAILABLE: "The service is temporarily unavailable").
            google(
                "vertex",
                503,
                "UNAVAILABLE",
                "The service is currently unavailable.",
            ),
        ],
    }
}

/// A fault of the provider's: transient (retried with backoff, counted by the breaker).
pub(super) fn server_fault() -> Refusal {
    Refusal {
        what: "a server fault",
        kind: ErrorKind::Server,
        disposition: Disposition::Transient,
        every_kind: true,
        cells: vec![
            // platform.openai.com/docs/guides/error-codes (500 "The server had an error while
            // processing your request"), also behind a gateway's 502 and Cloudflare's 520.
            Cell::new(
                "openai",
                500,
                include_str!("../../fixtures/openai/error_server.json"),
                Some("server_error"),
                "The server had an error",
            ),
            Cell::new(
                "openai",
                502,
                include_str!("../../fixtures/openai/error_server.json"),
                Some("server_error"),
                "The server had an error",
            ),
            Cell::new(
                "openai",
                520,
                include_str!("../../fixtures/openai/error_server.json"),
                Some("server_error"),
                "The server had an error",
            ),
            // Azure OpenAI's 500 (learn.microsoft.com/azure/ai-services/openai/reference).
            Cell::new(
                "azure",
                500,
                r#"{"error":{"code":"InternalServerError","message":"The service is temporarily unable to process your request. Please try again later."}}"#,
                Some("InternalServerError"),
                "temporarily unable to process your request",
            ),
            // docs.claude.com/en/api/errors (500 api_error).
            anthropic(500, "api_error", "Internal server error"),
            // ai.google.dev/gemini-api/docs/troubleshooting (500 INTERNAL).
            google("gemini", 500, "INTERNAL", "An internal error has occurred."),
            // developers.deepgram.com/reference/errors (500).
            deepgram(500, "INTERNAL_SERVER_ERROR", "Internal server error."),
            bedrock(500, "InternalServerException", "Internal server error"),
            bedrock(
                424,
                "ModelErrorException",
                "The model failed to process the request.",
            ),
            // cloud.google.com/vertex-ai/generative-ai/docs/model-reference/api-errors (500
            // INTERNAL).
            google("vertex", 500, "INTERNAL", "Internal error encountered."),
        ],
    }
}

/// A request that ran out of time at the provider or a gateway: transient.
pub(super) fn timed_out() -> Refusal {
    Refusal {
        what: "timed out",
        kind: ErrorKind::Timeout,
        disposition: Disposition::Transient,
        every_kind: false,
        cells: vec![
            // A gateway timeout with OpenAI's body, and its 408.
            Cell::new(
                "openai",
                504,
                include_str!("../../fixtures/openai/error_server.json"),
                Some("server_error"),
                "The server had an error",
            ),
            openai(408, "timeout", None),
            // docs.claude.com/en/api/errors (504 timeout_error); the docs give the status and
            // type, the message is ours.
            anthropic(504, "timeout_error", "The request timed out."),
            // ai.google.dev/gemini-api/docs/troubleshooting (504 DEADLINE_EXCEEDED).
            google(
                "gemini",
                504,
                "DEADLINE_EXCEEDED",
                "Deadline expired before operation could complete.",
            ),
            bedrock(
                408,
                "ModelTimeoutException",
                "Model has timed out in processing the request.",
            ),
            // cloud.google.com/vertex-ai/generative-ai/docs/model-reference/api-errors (504
            // DEADLINE_EXCEEDED).
            google(
                "vertex",
                504,
                "DEADLINE_EXCEEDED",
                "Deadline expired before operation could complete.",
            ),
        ],
    }
}
