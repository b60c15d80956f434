//! Serde shapes of the OpenAI Chat Completions and Audio APIs (private to the adapter).
//!
//! Requests are written exactly; responses are read leniently: unknown fields are ignored
//! (Azure adds `prompt_filter_results`, Groq adds `x_groq`), and every field that a host may
//! omit or send as `null` is an `Option`, so the adapter can say which one was missing.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::types::Image;

/// `POST /chat/completions` body.
#[derive(Debug, Serialize)]
pub(super) struct ChatBody<'a> {
    pub(super) model: &'a str,
    pub(super) messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) temperature: Option<f64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub(super) stop: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) response_format: Option<WireResponseFormat<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(super) tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) tool_choice: Option<WireToolChoice<'a>>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(super) stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) stream_options: Option<StreamOptions>,
}

#[derive(Debug, Serialize)]
pub(super) struct WireMessage<'a> {
    pub(super) role: &'static str,
    pub(super) content: WireContent<'a>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(super) tool_calls: Vec<WireToolCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) tool_call_id: Option<&'a str>,
}

/// A message's `content`: a string, an array of parts (text and images), or `null` (an
/// assistant turn that only calls tools).
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(super) enum WireContent<'a> {
    Text(&'a str),
    Parts(Vec<WirePart<'a>>),
    Null,
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum WirePart<'a> {
    Text { text: &'a str },
    ImageUrl { image_url: WireImageUrl<'a> },
}

/// An image's `url`: an `https` URL, or a `data:<mime>;base64,<data>` URL (written from the
/// image as it is serialized: a base64 payload is not copied per attempt).
#[derive(Debug, Serialize)]
pub(super) struct WireImageUrl<'a> {
    #[serde(serialize_with = "image_url")]
    pub(super) url: &'a Image,
}

fn image_url<S: serde::Serializer>(image: &&Image, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&image.as_url())
}

/// `{"type": "function", "function": {"name", "description", "parameters"}}`.
#[derive(Debug, Serialize)]
pub(super) struct WireTool<'a> {
    #[serde(rename = "type")]
    pub(super) kind: &'static str,
    pub(super) function: WireFunction<'a>,
}

#[derive(Debug, Serialize)]
pub(super) struct WireFunction<'a> {
    pub(super) name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) description: Option<&'a str>,
    pub(super) parameters: &'a Value,
}

/// `"auto"`, `"none"`, `"required"`, or `{"type": "function", "function": {"name"}}`.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(super) enum WireToolChoice<'a> {
    Mode(&'static str),
    Function {
        #[serde(rename = "type")]
        kind: &'static str,
        function: WireName<'a>,
    },
}

#[derive(Debug, Serialize)]
pub(super) struct WireName<'a> {
    pub(super) name: &'a str,
}

/// A call in an assistant turn of the history: its arguments as a JSON string.
#[derive(Debug, Serialize)]
pub(super) struct WireToolCall<'a> {
    pub(super) id: &'a str,
    #[serde(rename = "type")]
    pub(super) kind: &'static str,
    pub(super) function: WireCallFunction<'a>,
}

#[derive(Debug, Serialize)]
pub(super) struct WireCallFunction<'a> {
    pub(super) name: &'a str,
    pub(super) arguments: String,
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum WireResponseFormat<'a> {
    JsonObject,
    JsonSchema { json_schema: JsonSchema<'a> },
}

#[derive(Debug, Serialize)]
pub(super) struct JsonSchema<'a> {
    pub(super) name: Cow<'a, str>,
    pub(super) schema: &'a Value,
}

#[derive(Debug, Serialize)]
pub(super) struct StreamOptions {
    pub(super) include_usage: bool,
}

/// A `chat.completion` object (and the `{"error": …}` some proxies send with a 200). The
/// `id` (kept only when no request-id header came) and each choice's `finish_reason` (mapped
/// to an enum) are borrowed from the body, not allocated.
#[derive(Debug, Deserialize)]
pub(super) struct ChatCompletion<'a> {
    #[serde(borrow)]
    pub(super) id: Option<Cow<'a, str>>,
    pub(super) model: Option<String>,
    #[serde(borrow)]
    pub(super) choices: Option<Vec<Choice<'a>>>,
    pub(super) usage: Option<WireUsage>,
    pub(super) error: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Choice<'a> {
    pub(super) index: Option<u64>,
    pub(super) message: Option<ResponseMessage>,
    #[serde(borrow)]
    pub(super) finish_reason: Option<Cow<'a, str>>,
}

#[derive(Debug, Deserialize)]
pub(super) struct ResponseMessage {
    #[serde(default)]
    pub(super) content: Content,
    pub(super) tool_calls: Option<Vec<ToolCallWire>>,
}

/// A call in an answer. Every field is optional so the adapter can name the one missing;
/// `arguments` is a JSON string on OpenAI (a few compatible hosts send the object itself).
#[derive(Debug, Deserialize)]
pub(super) struct ToolCallWire {
    pub(super) id: Option<String>,
    #[serde(rename = "type")]
    pub(super) kind: Option<String>,
    pub(super) function: Option<FunctionWire>,
}

#[derive(Debug, Deserialize)]
pub(super) struct FunctionWire {
    pub(super) name: Option<String>,
    pub(super) arguments: Option<Value>,
}

/// A message's `content`: a string, `null` (tool calls, refusals), or — on a few compatible
/// hosts — an array of `{"type": "text", "text": …}` parts. Read without an intermediate
/// `Value` for the common string; anything else is kept for the adapter to name.
#[derive(Debug, Default, PartialEq)]
pub(super) enum Content {
    /// Missing or `null`.
    #[default]
    Absent,
    /// A string.
    Text(String),
    /// An array (of parts, to be checked).
    Parts(Vec<Value>),
    /// A number, a boolean or an object.
    Other,
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Content;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string, null or an array of text parts")
            }
            fn visit_str<E>(self, v: &str) -> Result<Content, E> {
                Ok(Content::Text(v.to_owned()))
            }
            fn visit_string<E>(self, v: String) -> Result<Content, E> {
                Ok(Content::Text(v))
            }
            fn visit_unit<E>(self) -> Result<Content, E> {
                Ok(Content::Absent)
            }
            fn visit_none<E>(self) -> Result<Content, E> {
                Ok(Content::Absent)
            }
            fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Content, D::Error> {
                d.deserialize_any(self)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Content, A::Error> {
                let mut parts = Vec::new();
                while let Some(p) = seq.next_element::<Value>()? {
                    parts.push(p);
                }
                Ok(Content::Parts(parts))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Content, A::Error> {
                while map
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(Content::Other)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Content, E> {
                Ok(Content::Other)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Content, E> {
                Ok(Content::Other)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Content, E> {
                Ok(Content::Other)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Content, E> {
                Ok(Content::Other)
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct WireUsage {
    pub(super) prompt_tokens: Option<u64>,
    pub(super) completion_tokens: Option<u64>,
    /// `prompt_tokens_details.cached_tokens`: of the prompt's tokens, those read from the
    /// prompt cache (<https://platform.openai.com/docs/guides/prompt-caching>; Azure OpenAI
    /// reports the same field). Absent or `null` on hosts that do not cache.
    pub(super) prompt_tokens_details: Option<PromptTokensDetails>,
}

#[derive(Debug, Deserialize)]
pub(super) struct PromptTokensDetails {
    pub(super) cached_tokens: Option<u64>,
}

/// A `chat.completion.chunk` (or an in-band `{"error": …}`).
#[derive(Debug, Deserialize)]
pub(super) struct ChunkWire {
    pub(super) model: Option<String>,
    pub(super) choices: Option<Vec<ChunkChoice>>,
    pub(super) usage: Option<WireUsage>,
    pub(super) error: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub(super) struct ChunkChoice {
    pub(super) index: Option<u64>,
    pub(super) delta: Option<Delta>,
    pub(super) finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Delta {
    pub(super) content: Option<String>,
    pub(super) tool_calls: Option<Vec<DeltaToolCall>>,
}

/// A piece of a streamed call: the first piece of a call carries its `index`, `id`, `type`
/// and `function.name`; the later ones its `index` and a piece of `function.arguments` (the
/// others `null` or absent).
#[derive(Debug, Deserialize)]
pub(super) struct DeltaToolCall {
    pub(super) index: Option<u64>,
    pub(super) id: Option<String>,
    pub(super) function: Option<DeltaFunction>,
}

#[derive(Debug, Deserialize)]
pub(super) struct DeltaFunction {
    pub(super) name: Option<String>,
    pub(super) arguments: Option<String>,
}

/// `json` and `verbose_json` transcription bodies.
#[derive(Debug, Deserialize)]
pub(super) struct TranscriptionWire {
    pub(super) text: Option<String>,
    pub(super) language: Option<String>,
    pub(super) duration: Option<f64>,
    pub(super) segments: Option<Vec<SegmentWire>>,
    pub(super) error: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub(super) struct SegmentWire {
    pub(super) start: Option<f64>,
    pub(super) end: Option<f64>,
    pub(super) text: Option<String>,
}
