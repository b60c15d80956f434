//! Tools (function calling) and images: what a request offers the model, what the model
//! asks for, and what a user shows it — provider-neutral; each adapter writes its own wire
//! form (OpenAI and Azure `tools` / `tool_calls` / `image_url`, Anthropic `tool_use` /
//! `tool_result` / `image` blocks, Gemini `functionDeclarations` / `functionCall` /
//! `functionResponse` / `inlineData`).

use std::fmt;

use serde::{Deserialize, Serialize};

/// A function the model may call.
///
/// # Examples
///
/// ```
/// use llm_failover::{ChatRequest, Tool};
/// use serde_json::json;
///
/// let weather = Tool::new("get_weather", json!({
///     "type": "object",
///     "properties": { "city": { "type": "string" } },
///     "required": ["city"],
/// }))
/// .description("The current weather in a city.");
/// let req = ChatRequest::from_prompt("Weather in Paris?").tool(weather);
/// assert_eq!(req.tools[0].name, "get_weather");
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Tool {
    /// Its name: letters, digits, `_` and `-`, at most 64 (what every provider accepts).
    pub name: String,
    /// What it does, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its arguments, as a JSON Schema object.
    pub parameters: serde_json::Value,
}

impl Tool {
    /// A tool named `name` taking arguments described by the JSON Schema `parameters`.
    pub fn new(name: impl Into<String>, parameters: serde_json::Value) -> Self {
        Tool {
            name: name.into(),
            description: None,
            parameters,
        }
    }

    /// Sets the description.
    #[must_use]
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }
}

/// Whether, and which, tools the model must call.
///
/// # Examples
///
/// ```
/// use llm_failover::{ChatRequest, ToolChoice};
///
/// let req = ChatRequest::from_prompt("Weather in Paris?").tool_choice(ToolChoice::Required);
/// assert_eq!(req.tool_choice, Some(ToolChoice::Required));
/// assert_eq!(ToolChoice::named("get_weather"), ToolChoice::Tool("get_weather".into()));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolChoice {
    /// The model decides (the providers' default when tools are given).
    Auto,
    /// No tool call.
    None,
    /// At least one tool call, of any tool.
    Required,
    /// A call of this tool.
    Tool(String),
}

impl ToolChoice {
    /// A call of the tool named `name`.
    pub fn named(name: impl Into<String>) -> Self {
        ToolChoice::Tool(name.into())
    }
}

/// A call the model asks for. Its `id` ties the tool's result to it
/// ([`Message::tool_result`](crate::Message::tool_result)); answers from providers that give
/// calls no id (Gemini) get one made up (`call_<n>`), so the conversation can go on at any
/// provider.
///
/// `Debug` shows the id and the name, never the arguments.
///
/// # Examples
///
/// ```
/// use llm_failover::ToolCall;
/// use serde_json::json;
///
/// let call = ToolCall::new("call_1", "get_weather", json!({"city": "Paris"}));
/// assert_eq!(call.arguments["city"], "Paris");
/// assert!(!format!("{call:?}").contains("Paris"));
/// ```
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolCall {
    /// The call's id.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// Its arguments (a JSON object, as the model wrote them).
    pub arguments: serde_json::Value,
}

impl ToolCall {
    /// A call of `name` with `arguments`.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: serde_json::Value,
    ) -> Self {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments,
        }
    }
}

impl fmt::Debug for ToolCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolCall")
            .field("id", &self.id)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// An image shown to the model in a user message.
///
/// `Debug` shows the kind and the size, never the URL or the bytes.
///
/// # Examples
///
/// ```
/// use llm_failover::{ChatRequest, Image, Message};
///
/// let photo = Image::base64("image/png", "iVBORw0KGgo=");
/// let req = ChatRequest::new().message(Message::user("What is in this picture?").image(photo));
/// assert_eq!(req.messages[0].images.len(), 1);
/// assert!(Image::url("https://example.com/cat.jpg").is_url());
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type")]
#[non_exhaustive]
pub enum Image {
    /// An image the provider fetches (OpenAI, Azure and Anthropic accept `https` URLs;
    /// Gemini only `https` URLs of the types it lists — PNG, JPEG, WEBP, HEIC, HEIF, by the
    /// path's extension — and refuses others before anything is sent).
    Url {
        /// The URL.
        url: String,
    },
    /// An image carried in the request.
    Base64 {
        /// Its MIME type (`image/png`, `image/jpeg`, `image/webp`, `image/gif`).
        media_type: String,
        /// Its bytes, base64-encoded (standard alphabet, with padding).
        data: String,
    },
}

impl Image {
    /// An image at `url`.
    pub fn url(url: impl Into<String>) -> Self {
        Image::Url { url: url.into() }
    }

    /// An image of type `media_type` whose bytes are `data`, base64-encoded.
    pub fn base64(media_type: impl Into<String>, data: impl Into<String>) -> Self {
        Image::Base64 {
            media_type: media_type.into(),
            data: data.into(),
        }
    }

    /// Whether the provider has to fetch it.
    pub fn is_url(&self) -> bool {
        matches!(self, Image::Url { .. })
    }

    /// The image as a `data:` URL when it is carried, else its URL (OpenAI's form), written
    /// where it is displayed (a serializer's output), never copied into a string first.
    pub(crate) fn as_url(&self) -> impl fmt::Display + '_ {
        struct AsUrl<'a>(&'a Image);
        impl fmt::Display for AsUrl<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self.0 {
                    Image::Url { url } => f.write_str(url),
                    Image::Base64 { media_type, data } => {
                        write!(f, "data:{media_type};base64,{data}")
                    }
                }
            }
        }
        AsUrl(self)
    }
}

impl fmt::Debug for Image {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Image::Url { url } => f
                .debug_struct("Image::Url")
                .field("url_len", &url.len())
                .finish(),
            Image::Base64 { media_type, data } => f
                .debug_struct("Image::Base64")
                .field("media_type", media_type)
                .field("data_len", &data.len())
                .finish(),
        }
    }
}
