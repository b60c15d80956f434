//! Token usage as reported by a provider.

use serde::{Deserialize, Serialize};

/// Tokens a provider counted for one request.
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
