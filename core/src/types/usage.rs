//! Token usage as reported by a provider.

use serde::{Deserialize, Serialize};

/// Tokens a provider counted for one request.
///
/// # Examples
///
/// ```
/// use llm_failover::Usage;
///
/// let usage = Usage::new(1_200, 300);
/// assert_eq!(usage.total(), 1_500);
///
/// // Its price at $0.15 and $0.60 per million input and output tokens:
/// let dollars = (usage.input_tokens as f64 * 0.15 + usage.output_tokens as f64 * 0.60) / 1e6;
/// assert!((dollars - 0.00036).abs() < 1e-12);
///
/// // 1,024 of its input tokens were read from the provider's prompt cache:
/// let usage = usage.with_cached_input(1_024);
/// assert_eq!((usage.input_tokens, usage.uncached_input()), (1_200, 176));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Usage {
    /// Prompt (input) tokens: the whole prompt, cached or not.
    pub input_tokens: u64,
    /// Completion (output) tokens.
    pub output_tokens: u64,
    /// Of [`input_tokens`](Self::input_tokens), those the provider read from its prompt cache
    /// (OpenAI's `prompt_tokens_details.cached_tokens`, Anthropic's and Bedrock's cache reads,
    /// Gemini's `cachedContentTokenCount`), billed at the cached-input price where one is set
    /// ([`Price::cached_input`](crate::price::Price::cached_input)). Never more than
    /// `input_tokens`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_input_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    /// `input_tokens` in and `output_tokens` out, none of them from a cache.
    pub const fn new(input_tokens: u64, output_tokens: u64) -> Self {
        Usage {
            input_tokens,
            output_tokens,
            cached_input_tokens: 0,
        }
    }

    /// The same, `cached` of whose input tokens were read from the provider's prompt cache
    /// (at most all of them: a provider that says more is believed up to its input).
    #[must_use]
    pub const fn with_cached_input(mut self, cached: u64) -> Self {
        self.cached_input_tokens = if cached < self.input_tokens {
            cached
        } else {
            self.input_tokens
        };
        self
    }

    /// Input plus output.
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    /// The input tokens not read from a cache.
    pub fn uncached_input(&self) -> u64 {
        self.input_tokens.saturating_sub(self.cached_input_tokens)
    }
}
