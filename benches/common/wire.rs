//! The baselines' own view of the OpenAI Chat Completions format: plain serde structs, as a
//! hand-written reqwest client would have them (deliberately not the SDK's types).

use serde::{Deserialize, Serialize};

/// `POST /chat/completions` body.
#[derive(Serialize)]
pub struct WireRequest<'a> {
    pub model: &'a str,
    pub messages: &'a [WireMessage<'a>],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
}

#[derive(Serialize)]
pub struct WireMessage<'a> {
    pub role: &'a str,
    pub content: &'a str,
}

/// A `chat.completion`, the fields a caller reads.
#[derive(Deserialize)]
pub struct WireResponse {
    pub id: Option<String>,
    pub model: Option<String>,
    pub choices: Vec<WireChoice>,
    pub usage: Option<WireUsage>,
}

#[derive(Deserialize)]
pub struct WireChoice {
    pub message: WireAnswer,
    pub finish_reason: Option<String>,
}

#[derive(Deserialize)]
pub struct WireAnswer {
    pub content: Option<String>,
}

#[derive(Deserialize)]
pub struct WireUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

impl WireResponse {
    /// The first choice's text, when there is one.
    pub fn text(&self) -> Option<&str> {
        self.choices.first()?.message.content.as_deref()
    }
}
