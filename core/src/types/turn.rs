//! What a provider asks to get back with its own turn of a conversation.
//!
//! Gemini 3 signs its reasoning: an answer's parts carry `thoughtSignature`s, and the next
//! request must send each back on the part it came with (the first function call of a step
//! is validated: without its signature the request is refused); see
//! <https://ai.google.dev/gemini-api/docs/thought-signatures>. Claude with extended
//! thinking answers with `thinking` blocks (their text and a `signature`, or a
//! `redacted_thinking` block's opaque `data`), and a tool-use turn sent back must start with
//! them, unchanged; see
//! <https://docs.claude.com/en/docs/build-with-claude/extended-thinking#preserving-thinking-blocks>.
//!
//! The adapters read this state into a [`TurnState`] on the answer; the answer's turn
//! ([`ChatResponse::to_message`](crate::ChatResponse::to_message)) keeps it; the request
//! that carries the turn back sends it only to the provider that gave it. Sent to another
//! provider (after a failover, or another model's history) it is dropped, and Gemini's
//! function calls get the signature Google documents for calls it did not sign.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::id::ProviderId;

/// State a provider asked to get back with its turn: opaque, kept on the
/// [`Message`](crate::Message) by [`ChatResponse::to_message`](crate::ChatResponse::to_message),
/// sent back only to the provider that gave it (the same configured provider), dropped
/// on the way to any other.
///
/// It serializes with the message, so a conversation kept on disk and read back keeps it.
/// `Debug` shows whose it is and how many pieces it holds, never thinking text.
///
/// # Examples
///
/// ```
/// use llm_failover::{ChatResponse, ProviderId};
///
/// // An answer from a provider that keeps no state: its turn carries none.
/// let answer = ChatResponse::new(ProviderId::new("openai"), "gpt-4o-mini", "Paris");
/// assert!(answer.provider_state.is_none());
/// assert!(answer.to_message().provider_state.is_none());
/// ```
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnState {
    /// The provider that gave it.
    provider: ProviderId,
    #[serde(flatten)]
    pub(crate) data: StateData,
}

/// The state of one provider format.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "format", rename_all = "snake_case")]
pub(crate) enum StateData {
    /// Gemini's thought signatures: per function call (by the call's id), and the one on the
    /// answer's text.
    Gemini {
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        calls: BTreeMap<String, String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
    },
    /// Anthropic's `thinking` and `redacted_thinking` blocks, in order, as they came.
    Anthropic { blocks: Vec<serde_json::Value> },
}

impl TurnState {
    pub(crate) fn new(provider: ProviderId, data: StateData) -> Self {
        TurnState { provider, data }
    }

    /// The provider that gave it: the only one it is sent back to.
    pub fn provider(&self) -> &ProviderId {
        &self.provider
    }

    /// The state, when `provider` gave it.
    pub(crate) fn for_provider(&self, provider: &ProviderId) -> Option<&StateData> {
        (&self.provider == provider).then_some(&self.data)
    }

    /// Gemini's signatures, when this is `provider`'s: (per call id, on the text).
    pub(crate) fn gemini<'s>(
        state: Option<&'s Self>,
        provider: &ProviderId,
    ) -> Option<(&'s BTreeMap<String, String>, Option<&'s str>)> {
        match state?.for_provider(provider)? {
            StateData::Gemini { calls, text } => Some((calls, text.as_deref())),
            StateData::Anthropic { .. } => None,
        }
    }

    /// Anthropic's thinking blocks, when this is `provider`'s.
    pub(crate) fn anthropic<'s>(
        state: Option<&'s Self>,
        provider: &ProviderId,
    ) -> &'s [serde_json::Value] {
        match state.and_then(|s| s.for_provider(provider)) {
            Some(StateData::Anthropic { blocks }) => blocks,
            _ => &[],
        }
    }
}

impl fmt::Debug for TurnState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("TurnState");
        d.field("provider", &self.provider);
        match &self.data {
            StateData::Gemini { calls, text } => d
                .field("format", &"gemini")
                .field("call_signatures", &calls.len())
                .field("text_signature", &text.is_some()),
            StateData::Anthropic { blocks } => d
                .field("format", &"anthropic")
                .field("thinking_blocks", &blocks.len()),
        };
        d.finish()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn it_is_given_back_only_to_its_provider_and_round_trips_through_json() {
        let mut calls = BTreeMap::new();
        calls.insert("call_1".to_owned(), "c2ln".to_owned());
        let g = TurnState::new(
            ProviderId::new("gemini"),
            StateData::Gemini { calls, text: None },
        );
        assert!(TurnState::gemini(Some(&g), &ProviderId::new("gemini")).is_some());
        assert!(TurnState::gemini(Some(&g), &ProviderId::new("gemini-eu")).is_none());
        assert!(TurnState::anthropic(Some(&g), &ProviderId::new("gemini")).is_empty());
        let json = serde_json::to_value(&g).unwrap();
        assert_eq!(
            json,
            json!({"provider": "gemini", "format": "gemini", "calls": {"call_1": "c2ln"}})
        );
        assert_eq!(serde_json::from_value::<TurnState>(json).unwrap(), g);
    }

    #[test]
    fn debug_shows_counts_never_thinking_text() {
        let a = TurnState::new(
            ProviderId::new("claude"),
            StateData::Anthropic {
                blocks: vec![
                    json!({"type": "thinking", "thinking": "secret plan", "signature": "s"}),
                ],
            },
        );
        let shown = format!("{a:?}");
        assert!(
            shown.contains("thinking_blocks: 1") && !shown.contains("secret"),
            "{shown}"
        );
    }
}
