//! Which limit a 429 is about, when its code or message names one: the buckets it drains.

use super::store::Drain;

/// The limit `code` and `message` name, as the buckets to drain; `None` when they name none.
///
/// Read (case-insensitively) from the forms providers document:
///
/// * OpenAI: the error `type` `tokens` / `requests`, and messages "Rate limit reached for
///   gpt-4o in organization org-… on tokens per min (TPM): Limit 30000, Used …" / "… on
///   requests per day (RPD) …" (platform.openai.com/docs/guides/rate-limits, "Error
///   mitigation");
/// * Anthropic: "This request would exceed the rate limit for your organization … of 50,000
///   input tokens per minute" (docs.anthropic.com/en/api/rate-limits);
/// * Gemini: the quota ids of `QuotaFailure` (`GenerateRequestsPerMinutePerProjectPerModel`,
///   `GenerateContentInputTokensPerModelPerMinute`, `…PerDay…`), which the adapter appends to
///   the message (ai.google.dev/gemini-api/docs/rate-limits);
/// * Azure OpenAI: "… have exceeded token rate limit of your current OpenAI S0 pricing tier"
///   / "… exceeded call rate limit …" (learn.microsoft.com/azure/ai-services/openai/how-to/quota);
/// * OpenRouter: "Rate limit exceeded: free-models-per-min" / "free-models-per-day", request
///   counts (openrouter.ai/docs/api-reference/limits).
pub(crate) fn named_drain(code: Option<&str>, message: &str) -> Option<Drain> {
    let text = message.to_ascii_lowercase();
    let code = code.map(str::to_ascii_lowercase);
    let has = |needles: &[&str]| needles.iter().any(|n| text.contains(n));
    let input = has(&["input tokens", "input_token", "inputtokens"]);
    let output = has(&["output tokens", "output_token", "outputtokens"]);
    let tokens = !input
        && !output
        && (code.as_deref() == Some("tokens")
            || has(&[
                "tokens per",
                "(tpm)",
                "(tpd)",
                "tokensper",
                "tokens_per",
                "token_count",
                "token rate limit",
            ]));
    let requests = code.as_deref() == Some("requests")
        || has(&[
            "requests per",
            "(rpm)",
            "(rpd)",
            "requestsper",
            "requests_per",
            "request_count",
            "call rate limit",
            "free-models-per-",
        ]);
    if !(input || output || tokens || requests) {
        return None;
    }
    Some(Drain {
        requests,
        tokens,
        input_tokens: input,
        output_tokens: output,
        day: has(&[
            "per day", "(rpd)", "(tpd)", "perday", "per_day", "per-day", "daily",
        ]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(requests: bool, tokens: bool, input: bool, output: bool, day: bool) -> Option<Drain> {
        Some(Drain {
            requests,
            tokens,
            input_tokens: input,
            output_tokens: output,
            day,
        })
    }

    #[test]
    fn reads_the_limit_a_429_names() {
        let cases: [(Option<&str>, &str, Option<Drain>); 13] = [
            (
                Some("rate_limit_exceeded"),
                "Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000.",
                d(false, true, false, false, false),
            ),
            (
                Some("rate_limit_exceeded"),
                "Rate limit reached for gpt-4o-mini in organization org-x on requests per day (RPD): Limit 10000, Used 10000, Requested 1.",
                d(true, false, false, false, true),
            ),
            (
                Some("tokens"),
                "Rate limit reached.",
                d(false, true, false, false, false),
            ),
            (
                Some("requests"),
                "Rate limit reached.",
                d(true, false, false, false, false),
            ),
            (
                Some("rate_limit_error"),
                "This request would exceed the rate limit for your organization (org) of 50,000 input tokens per minute.",
                d(false, false, true, false, false),
            ),
            (
                Some("rate_limit_error"),
                "This request would exceed your organization's rate limit of 8,000 output tokens per minute.",
                d(false, false, false, true, false),
            ),
            (
                Some("RESOURCE_EXHAUSTED"),
                "You exceeded your current quota. [quota: GenerateRequestsPerMinutePerProjectPerModel]",
                d(true, false, false, false, false),
            ),
            (
                Some("RESOURCE_EXHAUSTED"),
                "Quota exceeded. [quota: GenerateContentInputTokensPerModelPerDay]",
                d(false, false, true, false, true),
            ),
            (
                Some("429"),
                "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 9 seconds.",
                d(false, true, false, false, false),
            ),
            (
                Some("429"),
                "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have exceeded call rate limit of your current OpenAI S0 pricing tier. Please retry after 1 second.",
                d(true, false, false, false, false),
            ),
            (
                Some("429"),
                "Rate limit exceeded: free-models-per-min. ",
                d(true, false, false, false, false),
            ),
            (
                Some("429"),
                "Rate limit exceeded: free-models-per-day. Add 10 credits to unlock 1000 free model requests per day",
                d(true, false, false, false, true),
            ),
            (
                Some("rate_limit_exceeded"),
                "Too many requests, slow down.",
                None,
            ),
        ];
        for (code, message, want) in cases {
            assert_eq!(named_drain(code, message), want, "{message}");
        }
    }
}
