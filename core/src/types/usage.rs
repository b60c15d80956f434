//! Token usage as reported by a provider.

use serde::{Deserialize, Serialize};

/// Tokens a provider counted for one request.
///
/// # Examples
///
/// ```
/// use llm_failover::Usage;
///
/// let usage = Usage { input_tokens: 1_200, output_tokens: 300 };
/// assert_eq!(usage.total(), 1_500);
///
/// // Its price at $0.15 and $0.60 per million input and output tokens:
/// let dollars = (usage.input_tokens as f64 * 0.15 + usage.output_tokens as f64 * 0.60) / 1e6;
/// assert!((dollars - 0.00036).abs() < 1e-12);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt (input) tokens.
    pub input_tokens: u64,
    /// Completion (output) tokens.
    pub output_tokens: u64,
}

impl Usage {
    /// Input plus output.
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}
