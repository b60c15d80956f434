//! Chat requests and responses.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{Image, Origin, Tool, ToolCall, ToolChoice, TurnState, Usage};
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
    /// A tool's result, answering one of the model's [tool calls](ToolCall)
    /// ([`Message::tool_result`]).
    Tool,
}

impl Role {
    /// The lower-case name used by most wire formats.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
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
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// The text (may be empty: an assistant turn that only calls tools).
    pub content: String,
    /// Images shown with the text (user messages), in order; each format places them as
    /// its provider documents (OpenAI and Anthropic after the text, Gemini before it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<Image>,
    /// The tools the model called in this turn (assistant messages).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The call this message is the result of (tool messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// What the provider that wrote this turn asked to get back with it (assistant messages
    /// made by [`ChatResponse::to_message`]): sent back to that provider only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_state: Option<TurnState>,
}

impl Message {
    /// A message with the given role.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Message {
            role,
            content: content.into(),
            images: Vec::new(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            provider_state: None,
        }
    }

    /// The result of the tool call `call_id`, as the tool wrote it (JSON or text).
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::{Message, Role};
    ///
    /// let result = Message::tool_result("call_1", r#"{"temperature_c": 18}"#);
    /// assert_eq!(result.role, Role::Tool);
    /// assert_eq!(result.tool_call_id.as_deref(), Some("call_1"));
    /// ```
    pub fn tool_result(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        let mut m = Self::new(Role::Tool, content);
        m.tool_call_id = Some(call_id.into());
        m
    }

    /// An assistant turn: its text (may be empty) and the tools it called.
    pub fn assistant_calls(content: impl Into<String>, calls: Vec<ToolCall>) -> Self {
        let mut m = Self::assistant(content);
        m.tool_calls = calls;
        m
    }

    /// Shows `image` with this message.
    #[must_use]
    pub fn image(mut self, image: Image) -> Self {
        self.images.push(image);
        self
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
        let mut d = f.debug_struct("Message");
        d.field("role", &self.role)
            .field("content_len", &self.content.len());
        if !self.images.is_empty() {
            d.field("images", &self.images);
        }
        if !self.tool_calls.is_empty() {
            d.field("tool_calls", &self.tool_calls);
        }
        if let Some(id) = &self.tool_call_id {
            d.field("tool_call_id", id);
        }
        if let Some(state) = &self.provider_state {
            d.field("provider_state", state);
        }
        d.finish()
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
    /// Functions the model may call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Tool>,
    /// Whether, and which, tools it must call (`None`: the provider's default, `auto` when
    /// tools are given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
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

    /// Offers the model `tool`.
    #[must_use]
    pub fn tool(mut self, tool: Tool) -> Self {
        self.tools.push(tool);
        self
    }

    /// Sets the tool choice.
    #[must_use]
    pub fn tool_choice(mut self, choice: ToolChoice) -> Self {
        self.tool_choice = Some(choice);
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
    /// The tools the model called, in order (then `finish_reason` is usually
    /// [`ToolCalls`](FinishReason::ToolCalls)).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// What the provider asked to get back with this turn (Gemini's thought signatures,
    /// Claude's thinking blocks): [`to_message`](Self::to_message) keeps it on the turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_state: Option<TurnState>,
    /// What it cost, where the model has a price ([`ProviderSettings::price`](crate::ProviderSettings::price)):
    /// estimated before sending, and by the usage reported. An answer from the cache cost
    /// nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spend: Option<crate::types::price::Spend>,
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
            tool_calls: Vec::new(),
            provider_state: None,
            spend: None,
        }
    }

    /// The answer as the assistant's turn of the conversation (its text, tool calls and the
    /// state its provider asked to get back, [`TurnState`]), to send back with the tools'
    /// results.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::{ChatResponse, Message, ProviderId, Role, ToolCall};
    ///
    /// let mut answer = ChatResponse::new(ProviderId::new("openai"), "gpt-4o-mini", "");
    /// answer.tool_calls.push(ToolCall::new("call_1", "get_weather", serde_json::json!({"city": "Paris"})));
    /// let turn = answer.to_message();
    /// assert_eq!((turn.role, turn.tool_calls.len()), (Role::Assistant, 1));
    /// ```
    pub fn to_message(&self) -> Message {
        let mut m = Message::assistant_calls(self.text.clone(), self.tool_calls.clone());
        m.provider_state.clone_from(&self.provider_state);
        m
    }

    /// Whether the answer says anything: text other than whitespace, or a tool call. An
    /// answer without content (an empty 200) is returned, but never kept by the response
    /// cache, so the same question asked again is sent again.
    pub(crate) fn has_content(&self) -> bool {
        !self.text.trim().is_empty() || !self.tool_calls.is_empty()
    }

    /// The answer's text parsed as JSON (a structured answer, [`ResponseFormat`]).
    ///
    /// # Errors
    ///
    /// [`InvalidAnswer`](crate::ErrorKind::InvalidAnswer) when the text is not JSON.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::{ChatResponse, ErrorKind, ProviderId};
    ///
    /// let answer = ChatResponse::new(ProviderId::new("p"), "m", r#"{"colours": ["red"]}"#);
    /// assert_eq!(answer.json()?["colours"][0], "red");
    /// let prose = ChatResponse::new(ProviderId::new("p"), "m", "Red, I think.");
    /// assert_eq!(prose.json().unwrap_err().kind(), ErrorKind::InvalidAnswer);
    /// # Ok::<(), llm_failover::Error>(())
    /// ```
    pub fn json(&self) -> crate::Result<serde_json::Value> {
        self.parse()
    }

    /// The answer's text parsed as JSON into a `T`.
    ///
    /// # Errors
    ///
    /// [`InvalidAnswer`](crate::ErrorKind::InvalidAnswer) when the text is not JSON or not a
    /// `T`; the message names the path and the reason, never the answer's text.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::{ChatResponse, ProviderId};
    ///
    /// #[derive(serde::Deserialize)]
    /// struct Colours { colours: Vec<String> }
    ///
    /// let answer = ChatResponse::new(ProviderId::new("p"), "m", r#"{"colours": ["red", "blue"]}"#);
    /// let parsed: Colours = answer.parse()?;
    /// assert_eq!(parsed.colours, ["red", "blue"]);
    /// # Ok::<(), llm_failover::Error>(())
    /// ```
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> crate::Result<T> {
        let de = &mut serde_json::Deserializer::from_str(&self.text);
        serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            // serde_json's message may quote the text: keep its category and place only.
            let what = match inner.classify() {
                serde_json::error::Category::Data => "does not have the expected shape",
                serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
                    "is not JSON"
                }
                serde_json::error::Category::Io => "could not be read",
            };
            crate::Error::new(
                crate::ErrorKind::InvalidAnswer,
                format!(
                    "the answer of {} ({}) {what} at `{path}` (line {}, column {})",
                    self.provider,
                    self.model,
                    inner.line(),
                    inner.column()
                ),
            )
        })
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
            .field("tool_calls", &self.tool_calls)
            .field("provider_state", &self.provider_state)
            .field("spend", &self.spend)
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
    /// Tool calls completed with this chunk, whole (the adapter assembles a call's streamed
    /// pieces and hands it over once all of it arrived).
    pub tool_calls: Vec<ToolCall>,
    /// On the chunk that ends the answer: what the provider asked to get back with this turn
    /// ([`TurnState`]), whole. Set it on the turn you keep
    /// ([`Message::provider_state`]) to send it back.
    pub provider_state: Option<TurnState>,
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
            .field("tool_calls", &self.tool_calls)
            .field("provider_state", &self.provider_state)
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
