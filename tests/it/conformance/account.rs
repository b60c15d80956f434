//! The body rows of the account's refusals: a rejected key, a key without the permission,
//! throttling, a quota or credit spent. See the table in `conformance.rs`.

use llm_failover::{Disposition, ErrorKind};
use serde_json::json;

use super::{Cell, Refusal, anthropic, bedrock, deepgram, google};

/// A rejected key is terminal for that key: no provider takes it on a second try.
pub(super) fn rejected_key() -> Refusal {
    Refusal {
        what: "a rejected key",
        kind: ErrorKind::Auth,
        disposition: Disposition::Terminal,
        every_kind: true,
        cells: vec![
            // platform.openai.com/docs/guides/error-codes (401 "Incorrect API key provided");
            // the fixture is its example.
            Cell::new(
                "openai",
                401,
                include_str!("../../fixtures/openai/error_invalid_api_key.json"),
                Some("invalid_api_key"),
                "Incorrect API key provided",
            ),
            // Azure OpenAI's 401 for a wrong `api-key` header
            // (learn.microsoft.com/azure/ai-services/openai/reference).
            Cell::new(
                "azure",
                401,
                r#"{"error":{"code":"401","message":"Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource."}}"#,
                Some("401"),
                "Access denied due to invalid subscription key",
            ),
            // docs.claude.com/en/api/errors (401 authentication_error).
            anthropic(401, "authentication_error", "invalid x-api-key"),
            // ai.google.dev/gemini-api/docs/troubleshooting: a bad key is a 400 whose
            // ErrorInfo says API_KEY_INVALID (google/api/error_reason.proto in
            // github.com/googleapis/googleapis); the fixture is the API's answer.
            Cell::new(
                "gemini",
                400,
                include_str!("../../fixtures/gemini/api_key_invalid_400.json"),
                Some("API_KEY_INVALID"),
                "API key not valid",
            ),
            // cloud.google.com/apis/design/errors (401 UNAUTHENTICATED).
            google(
                "gemini",
                401,
                "UNAUTHENTICATED",
                "Request had invalid authentication credentials.",
            ),
            // developers.deepgram.com/reference/errors (401 INVALID_AUTH).
            Cell::new(
                "deepgram",
                401,
                include_str!("../../fixtures/deepgram/error_invalid_auth.json"),
                Some("INVALID_AUTH"),
                "Invalid credentials.",
            ),
            bedrock(
                403,
                "UnrecognizedClientException",
                "The security token included in the request is invalid.",
            ),
            bedrock(
                403,
                "InvalidSignatureException",
                "The request signature we calculated does not match the signature you provided.",
            ),
            // A token Vertex does not accept: Google's 401 UNAUTHENTICATED
            // (cloud.google.com/apis/design/errors) with the ErrorInfo reason of
            // google/api/error_reason.proto; the code kept is the reason.
            vertex_reason(
                401,
                "UNAUTHENTICATED",
                "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.",
                "ACCESS_TOKEN_EXPIRED",
            ),
        ],
    }
}

/// A key that is valid but may not do this (a region, a model, a scope, an entitlement):
/// terminal, the provider is up.
pub(super) fn no_permission() -> Refusal {
    Refusal {
        what: "a key without the permission",
        kind: ErrorKind::PermissionDenied,
        disposition: Disposition::Terminal,
        every_kind: false,
        cells: vec![
            // platform.openai.com/docs/guides/error-codes (403 "Country, region, or territory
            // not supported").
            Cell::new(
                "openai",
                403,
                r#"{"error":{"message":"Country, region, or territory not supported","type":"request_forbidden","param":null,"code":"unsupported_country_region_territory"}}"#,
                Some("unsupported_country_region_territory"),
                "Country, region, or territory not supported",
            ),
            // docs.claude.com/en/api/errors (403 permission_error).
            anthropic(
                403,
                "permission_error",
                "Your API key does not have permission to use the specified resource.",
            ),
            // An entitlement refused as a 429: waiting never admits it (anthropic/error.rs
            // `refine`; recorded verbatim in github.com/anthropics/claude-code/issues/41054,
            // the long-context requirement in
            // docs.claude.com/en/docs/build-with-claude/context-windows).
            Cell::new(
                "anthropic",
                429,
                include_str!("../../fixtures/anthropic/error_extra_usage_long_context.json"),
                Some("rate_limit_error"),
                "Extra usage is required for long context requests.",
            ),
            // ai.google.dev/gemini-api/docs/troubleshooting (403 PERMISSION_DENIED).
            google(
                "gemini",
                403,
                "PERMISSION_DENIED",
                "You do not have permission to access tuned model.",
            ),
            // developers.deepgram.com/reference/errors: Deepgram answers 401 for a key lacking
            // a scope too, and 403.
            deepgram(
                401,
                "INSUFFICIENT_PERMISSIONS",
                "User does not have sufficient permissions.",
            ),
            deepgram(403, "FORBIDDEN", "Insufficient permissions."),
            bedrock(
                403,
                "AccessDeniedException",
                "You don't have access to the model with the specified model ID.",
            ),
            // cloud.google.com/vertex-ai/generative-ai/docs/model-reference/api-errors (403
            // PERMISSION_DENIED: "Client doesn't have sufficient permission to call the API");
            // the message as recorded verbatim in github.com/rpurinton/gemini-php/issues/2.
            google(
                "vertex",
                403,
                "PERMISSION_DENIED",
                "Permission 'aiplatform.endpoints.predict' denied on resource '//aiplatform.googleapis.com/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-flash' (or it may not exist).",
            ),
        ],
    }
}

/// Throttling is waited out (the stated delay, else backoff), never given up for good.
pub(super) fn throttled() -> Refusal {
    Refusal {
        what: "throttled",
        kind: ErrorKind::RateLimited,
        disposition: Disposition::RateLimited,
        every_kind: true,
        cells: vec![
            // platform.openai.com/docs/guides/error-codes (429 "Rate limit reached") and the
            // rate-limits guide (platform.openai.com/docs/guides/rate-limits).
            Cell::new(
                "openai",
                429,
                include_str!("../../fixtures/openai/error_rate_limit_tokens.json"),
                Some("rate_limit_exceeded"),
                "Rate limit reached for gpt-4o",
            ),
            // learn.microsoft.com/azure/ai-services/openai/quotas-limits (429 "… Please retry
            // after N seconds", `code: "429"`).
            Cell::new(
                "azure",
                429,
                include_str!("../../fixtures/azure/error_429.json"),
                Some("429"),
                "have exceeded token rate limit",
            ),
            // docs.claude.com/en/api/errors (429 rate_limit_error),
            // docs.claude.com/en/api/rate-limits.
            anthropic(
                429,
                "rate_limit_error",
                "Number of requests has exceeded your rate limit",
            ),
            // ai.google.dev/gemini-api/docs/rate-limits (a per-minute quota); the body with
            // its QuotaFailure and RetryInfo as reported in google-gemini/gemini-cli#8437.
            Cell::new(
                "gemini",
                429,
                include_str!("../../fixtures/gemini/quota_per_minute_429.json"),
                Some("RESOURCE_EXHAUSTED"),
                "You exceeded your current quota",
            ),
            // developers.deepgram.com/reference/errors (429).
            deepgram(
                429,
                "TOO_MANY_REQUESTS",
                "Too many requests. Please try again later",
            ),
            bedrock(
                429,
                "ThrottlingException",
                "Too many requests, please wait before trying again.",
            ),
            // Without the header: the exception named by the body's `__type`.
            Cell::new(
                "bedrock",
                429,
                r#"{"__type":"ThrottlingException","message":"Too many tokens, please wait before trying again."}"#,
                Some("ThrottlingException"),
                "Too many tokens, please wait before trying again.",
            ),
            // cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 (shared capacity:
            // "Resource exhausted. Please try again later.").
            google(
                "vertex",
                429,
                "RESOURCE_EXHAUSTED",
                "Resource exhausted. Please try again later. Please refer to https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more details.",
            ),
        ],
    }
}

/// An allowance that does not come back within a rate-limit window (credit, a day's quota,
/// an account's quota) and is no fault of the key: fail over, the provider closed until its
/// reset or the quota cooldown; never retried like throttling.
pub(super) fn quota_spent() -> Refusal {
    Refusal {
        what: "a quota or credit spent",
        kind: ErrorKind::QuotaExhausted,
        disposition: Disposition::QuotaExhausted,
        every_kind: false,
        cells: vec![
            // platform.openai.com/docs/guides/error-codes (429 "You exceeded your current
            // quota"), with its code and with `code: null`.
            Cell::new(
                "openai",
                429,
                include_str!("../../fixtures/openai/error_insufficient_quota.json"),
                Some("insufficient_quota"),
                "You exceeded your current quota",
            ),
            Cell::new(
                "openai",
                429,
                include_str!("../../fixtures/openai/error_insufficient_quota_code_null.json"),
                Some("insufficient_quota"),
                "You exceeded your current quota",
            ),
            // Credits used up, in the words openai/error.rs `is_quota` names (xAI's "used all
            // available credits", Anthropic's "credit balance is too low" as proxies relay
            // it); these two bodies are ours.
            Cell::new(
                "openai",
                429,
                r#"{"error":{"message":"You have used all available credits for this month.","type":"requests","code":null}}"#,
                Some("requests"),
                "used all available credits",
            ),
            Cell::new(
                "openai",
                429,
                r#"{"error":{"message":"Your credit balance is too low to access the API."}}"#,
                None,
                "Your credit balance is too low",
            ),
            // openrouter.ai/docs/api-reference/errors (402 when the credits run out).
            Cell::new(
                "openai",
                402,
                r#"{"error":{"message":"Insufficient credits","code":402}}"#,
                Some("402"),
                "Insufficient credits",
            ),
            // A 401 whose code says the quota is spent is not a rejected key (openai/error.rs
            // `is_quota`: hosts answer 401 with it; no provider document found).
            Cell::new(
                "openai",
                401,
                r#"{"error":{"message":"You have exceeded your quota.","type":"invalid_request_error","code":"quota_exceeded"}}"#,
                Some("quota_exceeded"),
                "You have exceeded your quota.",
            ),
            // Anthropic's 400 for a prepaid balance used up (recorded verbatim in
            // github.com/anthropics/claude-quickstarts/issues/229).
            anthropic(
                400,
                "invalid_request_error",
                "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.",
            ),
            // docs.claude.com/en/api/errors (402 billing_error: a problem with billing or
            // payment); the docs give the status and type, the message is ours.
            anthropic(
                402,
                "billing_error",
                "There is an issue with your billing details.",
            ),
            // ai.google.dev/gemini-api/docs/rate-limits: a per-day quota reopens at midnight
            // Pacific time, whatever its RetryInfo says (the body as the API answers it).
            Cell::new(
                "gemini",
                429,
                include_str!("../../fixtures/gemini/quota_per_day_429.json"),
                Some("RESOURCE_EXHAUSTED"),
                "GenerateRequestsPerDayPerProjectPerModel-FreeTier",
            ),
            // A model not offered on the key's tier at all, "limit: 0" (as the free tier
            // answers it, ai.google.dev/gemini-api/docs/rate-limits).
            google(
                "gemini",
                429,
                "RESOURCE_EXHAUSTED",
                "You exceeded your current quota.\n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 0, model: gemini-2.5-pro\nPlease retry in 20.04466179s.",
            ),
            // developers.deepgram.com/reference/errors (402: the project's credits are used
            // up).
            deepgram(
                402,
                "ASR_PAYMENT_REQUIRED",
                "Project does not have enough credits for an ASR request and does not have an overage agreement.",
            ),
            bedrock(
                400,
                "ServiceQuotaExceededException",
                "Your request exceeds the service quota for your account.",
            ),
            // A Vertex project without billing: Google answers 403 PERMISSION_DENIED with the
            // ErrorInfo reason BILLING_DISABLED (google/api/error_reason.proto in
            // github.com/googleapis/googleapis: "the billing account associated has been
            // disabled"; the emulator answers its `insufficient_quota` fault so). Read by the
            // reason, not the status: spent credit, as every other kind's (it read as a
            // rejected key, PermissionDenied, until this table found it).
            vertex_reason(
                403,
                "PERMISSION_DENIED",
                "This API method requires billing to be enabled. Please enable billing on project #p by visiting https://console.developers.google.com/billing/enable?project=p then retry. If you enabled billing for this project recently, wait a few minutes for the action to propagate to our systems and retry.",
                "BILLING_DISABLED",
            ),
        ],
    }
}

/// A Vertex AI error whose `google.rpc.ErrorInfo` names its reason (the reasons of
/// google/api/error_reason.proto in github.com/googleapis/googleapis): the code kept is the
/// reason.
fn vertex_reason(status: u16, grpc: &str, message: &'static str, reason: &'static str) -> Cell {
    let body = json!({"error": {"code": status, "status": grpc, "message": message,
        "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason,
            "domain": "googleapis.com", "metadata": {"service": "aiplatform.googleapis.com"}}]}});
    Cell::new("vertex", status, body.to_string(), Some(reason), message)
}
