//! The body rows of the request's refusals: a prompt too long, a request the provider cannot
//! take, a model that does not exist, content filtered, a body too large, a request larger
//! than a window, a conflict. See the table in `conformance.rs`.

use llm_failover::{Disposition, ErrorKind};

use super::{Cell, Refusal, anthropic, bedrock, deepgram, google, openai};

/// A prompt longer than the model's context: terminal (shorten it; no provider takes it as
/// it is on this model).
pub(super) fn too_long() -> Refusal {
    Refusal {
        what: "a prompt longer than the context",
        kind: ErrorKind::ContextLengthExceeded,
        disposition: Disposition::Terminal,
        every_kind: false,
        cells: vec![
            // platform.openai.com/docs/guides/error-codes; the fixture is the API's answer.
            Cell::new(
                "openai",
                400,
                include_str!("../../fixtures/openai/error_context_length.json"),
                Some("context_length_exceeded"),
                "maximum context length is 8192 tokens",
            ),
            // docs.claude.com/en/api/errors (400 invalid_request_error), its "prompt is too
            // long" wording.
            anthropic(
                400,
                "invalid_request_error",
                "prompt is too long: 208310 tokens > 200000 maximum",
            ),
            // ai.google.dev/gemini-api/docs/troubleshooting (400 INVALID_ARGUMENT).
            google(
                "gemini",
                400,
                "INVALID_ARGUMENT",
                "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
            ),
            bedrock(
                400,
                "ValidationException",
                "Input is too long for requested model.",
            ),
            // Claude's own wording, through Bedrock.
            bedrock(
                400,
                "ValidationException",
                "prompt is too long: 210000 tokens > 200000 maximum",
            ),
            // cloud.google.com/vertex-ai/generative-ai/docs/model-reference/api-errors (400
            // INVALID_ARGUMENT: "Request exceeds the model's input token limit"), in Gemini's
            // words.
            google(
                "vertex",
                400,
                "INVALID_ARGUMENT",
                "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
            ),
        ],
    }
}

/// A request the provider cannot take (a bad field, a bad file): terminal.
pub(super) fn invalid_request() -> Refusal {
    Refusal {
        what: "a request the provider cannot take",
        kind: ErrorKind::InvalidRequest,
        disposition: Disposition::Terminal,
        every_kind: false,
        cells: vec![
            // platform.openai.com/docs/guides/error-codes: 400 and 422, and any other 4xx.
            openai(400, "invalid_request_error", None),
            openai(422, "invalid_request_error", None),
            openai(418, "teapot", None),
            // docs.claude.com/en/api/errors (400 invalid_request_error).
            anthropic(
                400,
                "invalid_request_error",
                "messages: roles must alternate",
            ),
            // ai.google.dev/gemini-api/docs/troubleshooting (400 INVALID_ARGUMENT,
            // FAILED_PRECONDITION).
            google(
                "gemini",
                400,
                "INVALID_ARGUMENT",
                "Invalid JSON payload received. Unknown name \"foo\"",
            ),
            google(
                "gemini",
                400,
                "FAILED_PRECONDITION",
                "User location is not supported for the API use without a billing account linked.",
            ),
            // developers.deepgram.com/reference/errors (400 "corrupt or unsupported data").
            Cell::new(
                "deepgram",
                400,
                include_str!("../../fixtures/deepgram/error_corrupt_audio.json"),
                Some("Bad Request"),
                "corrupt or unsupported data",
            ),
            bedrock(
                400,
                "ValidationException",
                "1 validation error detected: Value '0' at 'inferenceConfig.maxTokens' failed to satisfy constraint",
            ),
            // cloud.google.com/vertex-ai/generative-ai/docs/model-reference/api-errors (400
            // INVALID_ARGUMENT: the request fails API validation).
            google(
                "vertex",
                400,
                "INVALID_ARGUMENT",
                "Unable to submit request because it has an empty text parameter. Add a value to the parameter and try again.",
            ),
        ],
    }
}

/// A model (or deployment) that does not exist: terminal for this provider's model.
pub(super) fn not_found() -> Refusal {
    Refusal {
        what: "a model that does not exist",
        kind: ErrorKind::NotFound,
        disposition: Disposition::Terminal,
        every_kind: false,
        cells: vec![
            // platform.openai.com/docs/guides/error-codes (404); the API's answer.
            Cell::new(
                "openai",
                404,
                include_str!("../../fixtures/openai/error_model_not_found.json"),
                Some("model_not_found"),
                "The model `gpt-9` does not exist",
            ),
            // An unknown deployment, reported verbatim in MicrosoftDocs/azure-docs#114013.
            Cell::new(
                "azure",
                404,
                include_str!("../../fixtures/azure/error_deployment_not_found.json"),
                Some("DeploymentNotFound"),
                "The API deployment for this resource does not exist.",
            ),
            // docs.claude.com/en/api/errors (404 not_found_error); the docs' example.
            Cell::new(
                "anthropic",
                404,
                include_str!("../../fixtures/anthropic/error_not_found.json"),
                Some("not_found_error"),
                "The requested resource could not be found.",
            ),
            // ai.google.dev/gemini-api/docs/troubleshooting (404 NOT_FOUND).
            google(
                "gemini",
                404,
                "NOT_FOUND",
                "models/gemini-9 is not found for API version v1beta",
            ),
            bedrock(
                404,
                "ResourceNotFoundException",
                "Could not resolve the foundation model from the provided model identifier.",
            ),
            // cloud.google.com/vertex-ai/generative-ai/docs/model-reference/api-errors (404
            // NOT_FOUND) and …/docs/learn/model-versions, which the message points to.
            google(
                "vertex",
                404,
                "NOT_FOUND",
                "Publisher Model `projects/p/locations/us-central1/publishers/google/models/gemini-9` was not found or your project does not have access to it. Please ensure you are using a valid model version. For more information, see: https://cloud.google.com/vertex-ai/generative-ai/docs/learn/model-versions",
            ),
        ],
    }
}

/// Content a provider's filter refused: terminal (the same content is refused again).
pub(super) fn content_filtered() -> Refusal {
    Refusal {
        what: "content filtered",
        kind: ErrorKind::ContentFiltered,
        disposition: Disposition::Terminal,
        every_kind: false,
        cells: vec![
            // platform.openai.com/docs/guides/error-codes; the API's answer.
            Cell::new(
                "openai",
                400,
                include_str!("../../fixtures/openai/error_content_policy.json"),
                Some("content_policy_violation"),
                "rejected as a result of our safety system",
            ),
            openai(400, "invalid_request_error", Some("content_filter")),
            // learn.microsoft.com/azure/ai-services/openai/concepts/content-filter (400
            // `code: content_filter`, `innererror.code = ResponsibleAIPolicyViolation`), and
            // the same violation signalled only by the inner code.
            Cell::new(
                "azure",
                400,
                include_str!("../../fixtures/azure/error_content_filter.json"),
                Some("content_filter"),
                "The response was filtered",
            ),
            Cell::new(
                "azure",
                400,
                r#"{"error":{"message":"filtered","type":null,"param":"prompt","code":null,"status":400,"innererror":{"code":"ResponsibleAIPolicyViolation"}}}"#,
                None,
                "filtered",
            ),
        ],
    }
}

/// A body larger than the provider takes: terminal.
pub(super) fn payload_too_large() -> Refusal {
    Refusal {
        what: "a body too large to send",
        kind: ErrorKind::PayloadTooLarge,
        disposition: Disposition::Terminal,
        every_kind: false,
        cells: vec![
            openai(413, "invalid_request_error", None),
            // docs.claude.com/en/api/errors (413 request_too_large).
            anthropic(
                413,
                "request_too_large",
                "Request exceeds the maximum allowed number of bytes.",
            ),
            // developers.deepgram.com/reference/errors (413).
            deepgram(413, "PAYLOAD_TOO_LARGE", "Payload too large."),
        ],
    }
}

/// A request larger than a whole rate-limit window: it can never fit, so it is not waited
/// for (terminal).
pub(super) fn never_fits() -> Refusal {
    Refusal {
        what: "a request larger than the window",
        kind: ErrorKind::RequestTooLarge,
        disposition: Disposition::Terminal,
        every_kind: false,
        cells: vec![
            // platform.openai.com/docs/guides/rate-limits ("Request too large … Requested >
            // Limit"); the API's answer.
            Cell::new(
                "openai",
                429,
                include_str!("../../fixtures/openai/error_request_too_large.json"),
                Some("rate_limit_exceeded"),
                "Request too large for gpt-4o",
            ),
        ],
    }
}

/// A conflict (409): transient, the same request may pass a moment later.
pub(super) fn conflict() -> Refusal {
    Refusal {
        what: "a conflict",
        kind: ErrorKind::Conflict,
        disposition: Disposition::Transient,
        every_kind: false,
        cells: vec![openai(409, "conflict", None)],
    }
}
