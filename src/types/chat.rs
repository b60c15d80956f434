//! Chat requests and responses.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{Origin, Usage};
use crate::id::ProviderId;

/// Who wrote a message.
///
/// # Examples
///
/// ```
/// use llm_failover::{Message, Role};
///
/// let reply = Message::assistant("Hello!");
/// assert_eq!(reply.role, Role::Assistant);
/// assert_eq!(reply.role.as_str(), "assistant");
/// assert_eq!(Message::new(Role::User, "Hi"), Message::user("Hi"));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Role {
    /// Instructions for the model.
    System,
    /// The user's turn.
    User,
    /// The model's turn.
    Assistant,
}

impl Role {
    /// The lower-case name used by most wire formats.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// One message of a conversation.
///
/// `Debug` shows the role and the length of the content, never the text: prompts do not
/// belong in logs.
///
/// # Examples
///
/// ```
/// use llm_failover::{ChatRequest, Message};
///
/// let history = vec![Message::user("Hi"), Message::assistant("Hello! How can I help?")];
/// let mut req = ChatRequest::new().system("Be brief.");
/// for message in history {
///     req = req.message(message);
/// }
/// let req = req.user("What is 2 + 2?");
/// assert_eq!(req.messages.len(), 4);
/// assert_eq!(req.messages[0], Message::system("Be brief."));
/// assert!(!format!("{:?}", req.messages[3]).contains("2 + 2"));
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// The text.
    pub content: String,
}

impl Message {
    /// A message with the given role.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Message {
            role,
            content: content.into(),
        }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new(Role::System, content)
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new(Role::User, content)
    }

    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new(Role::Assistant, content)
    }
}

impl fmt::Debug for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Message")
            .field("role", &self.role)
            .field("content_len", &self.content.len())
            .finish()
    }
}

/// The shape the answer must take.
///
/// # Examples
///
/// ```
/// use llm_failover::{ChatRequest, ResponseFormat};
///
/// let schema = serde_json::json!({
///     "type": "object",
///     "properties": { "colours": { "type": "array", "items": { "type": "string" } } },
/// });
/// let req = ChatRequest::from_prompt("Name three colours.")
///     .response_format(ResponseFormat::JsonSchema { name: "colours".into(), schema });
/// assert!(matches!(req.response_format, ResponseFormat::JsonSchema { .. }));
/// assert_eq!(ChatRequest::new().response_format, ResponseFormat::Text);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ResponseFormat {
    /// Free text (the default).
    #[default]
    Text,
    /// Any valid JSON object.
    JsonObject,
    /// JSON matching a schema (providers that support it; others get JSON mode).
    JsonSchema {
        /// The schema's name.
        name: String,
        /// The JSON Schema.
        schema: serde_json::Value,
    },
}

/// A chat completion request, independent of any provider.
///
/// # Examples
///
/// ```
/// use llm_failover::ChatRequest;
///
/// let req = ChatRequest::new()
///     .system("Answer in one word.")
///     .user("Capital of France?")
///     .max_tokens(16)
///     .temperature(0.0);
/// assert_eq!(req.messages.len(), 2);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ChatRequest {
    /// The conversation, oldest first. System messages may appear anywhere; adapters whose
    /// wire format separates them (Anthropic, Gemini) move them out.
    pub messages: Vec<Message>,
    /// Overrides the provider's configured model.
    pub model: Option<String>,
    /// Upper bound on generated tokens. Counted in full when the request is admitted.
    pub max_tokens: Option<u32>,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Stop sequences.
    pub stop: Vec<String>,
    /// Text or JSON.
    pub response_format: ResponseFormat,
    /// Provider-specific fields merged into the JSON body the provider's adapter writes
    /// (`seed`, `top_p`, `user`, …), over the provider's own
    /// ([`ProviderSettings::extra_body`](crate::ProviderSettings::extra_body)): objects merge
    /// key by key, `null` removes a field, anything else replaces it (RFC 7396). `model` and
    /// `stream` are refused. Sent as given to whichever provider serves the request: name
    /// fields every provider in the failover order accepts, or set them per provider.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub extra_body: serde_json::Map<String, serde_json::Value>,
}

impl ChatRequest {
    /// An empty request.
    pub fn new() -> Self {
        Self::default()
    }

    /// A request with one user message.
    pub fn from_prompt(prompt: impl Into<String>) -> Self {
        Self::new().user(prompt)
    }

    /// Appends a message.
    #[must_use]
    pub fn message(mut self, message: Message) -> Self {
        self.messages.push(message);
        self
    }

    /// Appends a system message.
    #[must_use]
    pub fn system(self, content: impl Into<String>) -> Self {
        self.message(Message::system(content))
    }

    /// Appends a user message.
    #[must_use]
    pub fn user(self, content: impl Into<String>) -> Self {
        self.message(Message::user(content))
    }

    /// Appends an assistant message.
    #[must_use]
    pub fn assistant(self, content: impl Into<String>) -> Self {
        self.message(Message::assistant(content))
    }

    /// Sets the model, overriding the provider's default.
    #[must_use]
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Sets `max_tokens`.
    #[must_use]
    pub fn max_tokens(mut self, n: u32) -> Self {
        self.max_tokens = Some(n);
        self
    }

    /// Sets the temperature.
    #[must_use]
    pub fn temperature(mut self, t: f32) -> Self {
        self.temperature = Some(t);
        self
    }

    /// Adds a stop sequence.
    #[must_use]
    pub fn stop(mut self, s: impl Into<String>) -> Self {
        self.stop.push(s.into());
        self
    }

    /// Sets the response format.
    #[must_use]
    pub fn response_format(mut self, f: ResponseFormat) -> Self {
        self.response_format = f;
        self
    }

    /// Sets one extra body field ([`extra_body`](Self::extra_body)).
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::ChatRequest;
    /// use serde_json::json;
    ///
    /// let req = ChatRequest::from_prompt("Pick a number.")
    ///     .extra_body("seed", 42)
    ///     .extra_body("top_p", 0.9)
    ///     .extra_body("user", "customer-1234");
    /// assert_eq!(req.extra_body["seed"], json!(42));
    /// ```
    #[must_use]
    pub fn extra_body(
        mut self,
        field: impl Into<String>,
        value: impl Into<serde_json::Value>,
    ) -> Self {
        self.extra_body.insert(field.into(), value.into());
        self
    }
}

/// Why generation stopped.
///
/// # Examples
///
/// ```
/// use llm_failover::FinishReason;
///
/// /// Whether the answer is whole (not cut by `max_tokens` or the content filter).
/// fn is_whole(reason: Option<&FinishReason>) -> bool {
///     matches!(reason, None | Some(FinishReason::Stop))
/// }
/// assert!(is_whole(Some(&FinishReason::Stop)));
/// assert!(!is_whole(Some(&FinishReason::Length)));
/// assert_eq!(serde_json::to_string(&FinishReason::ContentFilter)?, r#""content_filter""#);
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FinishReason {
    /// Natural end or a stop sequence.
    Stop,
    /// `max_tokens` reached.
    Length,
    /// The content filter cut the answer.
    ContentFilter,
    /// The model asked to call a tool.
    ToolCalls,
    /// Something else, as the provider named it.
    Other(String),
}

/// A complete chat answer.
///
/// `Debug` shows the length of the text, never the text.
///
/// # Examples
///
/// ```
/// use llm_failover::{ChatResponse, FinishReason, ProviderId};
///
/// fn describe(answer: &ChatResponse) -> String {
///     let cut = if answer.finish_reason == Some(FinishReason::Length) { " (cut)" } else { "" };
///     let (by, n) = (&answer.provider, answer.attempts);
///     format!("{}{cut} from {by} after {n} attempt(s)", answer.text)
/// }
///
/// // `Client::chat` returns one; `new` builds one, e.g. for a test.
/// let answer = ChatResponse::new(ProviderId::new("openai"), "gpt-4o-mini", "Paris");
/// assert_eq!(describe(&answer), "Paris from openai after 1 attempt(s)");
/// ```
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ChatResponse {
    /// The generated text.
    pub text: String,
    /// Why generation stopped, when the provider said.
    pub finish_reason: Option<FinishReason>,
    /// Tokens counted by the provider, when it reported them.
    pub usage: Option<Usage>,
    /// The provider that answered.
    pub provider: ProviderId,
    /// The model that answered, as the provider named it.
    pub model: String,
    /// The provider's request id, for support tickets.
    pub request_id: Option<String>,
    /// How many attempts the router made for this answer (1 = first try; 0 = served from the
    /// cache).
    pub attempts: u32,
    /// Where the answer came from: the provider, or the response cache.
    #[serde(default)]
    pub origin: Origin,
}

impl ChatResponse {
    /// A response from `provider` with the given text; the other fields empty.
    pub fn new(provider: ProviderId, model: impl Into<String>, text: impl Into<String>) -> Self {
        ChatResponse {
            text: text.into(),
            finish_reason: None,
            usage: None,
            provider,
            model: model.into(),
            request_id: None,
            attempts: 1,
            origin: Origin::Provider,
        }
    }
}

impl fmt::Debug for ChatResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatResponse")
            .field("text_len", &self.text.len())
            .field("finish_reason", &self.finish_reason)
            .field("usage", &self.usage)
            .field("provider", &self.provider)
            .field("model", &self.model)
            .field("request_id", &self.request_id)
            .field("attempts", &self.attempts)
            .field("origin", &self.origin)
            .finish()
    }
}

/// One increment of a streamed answer.
///
/// `Debug` shows the length of the delta, never the text.
///
/// # Examples
///
/// ```
/// use llm_failover::{ChatChunk, FinishReason};
///
/// // Chunks as a `ChatStream` yields them:
/// let mut last = ChatChunk::text("");
/// last.finish_reason = Some(FinishReason::Stop);
/// let chunks = [ChatChunk::text("Hel"), ChatChunk::text("lo"), last];
///
/// let text: String = chunks.iter().map(|c| c.delta.as_str()).collect();
/// assert_eq!(text, "Hello");
/// assert_eq!(chunks.iter().find_map(|c| c.finish_reason.clone()), Some(FinishReason::Stop));
/// ```
#[derive(Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ChatChunk {
    /// New text (may be empty, e.g. on the final chunk).
    pub delta: String,
    /// Set on the chunk that ends the answer.
    pub finish_reason: Option<FinishReason>,
    /// Set when the provider reports usage in the stream (usually the last chunk).
    pub usage: Option<Usage>,
    /// The model, when the provider names it in the stream.
    pub model: Option<String>,
}

impl ChatChunk {
    /// A chunk carrying text.
    pub fn text(delta: impl Into<String>) -> Self {
        ChatChunk {
            delta: delta.into(),
            ..Self::default()
        }
    }
}

impl fmt::Debug for ChatChunk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatChunk")
            .field("delta_len", &self.delta.len())
            .field("finish_reason", &self.finish_reason)
            .field("usage", &self.usage)
            .field("model", &self.model)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_prompt_or_answer_text() {
        let req = ChatRequest::from_prompt("my secret prompt");
        assert!(!format!("{req:?}").contains("secret prompt"));
        let resp = ChatResponse::new(ProviderId::new("p"), "m", "secret answer");
        assert!(!format!("{resp:?}").contains("secret answer"));
        assert!(!format!("{:?}", ChatChunk::text("secret delta")).contains("secret delta"));
    }
}
