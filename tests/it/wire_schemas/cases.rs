//! The chat cases every format is asked to send: what `ChatRequest` can hold, and the edges
//! where the providers' schemas draw a line (temperature, stop sequences, tool and schema
//! names, tool choices, images, streaming). Each names where its feature is documented for
//! each format.
//!
//! References, once:
//! - OpenAI: <https://platform.openai.com/docs/api-reference/chat/create>
//! - Azure OpenAI (api-version 2024-10-21):
//!   <https://learn.microsoft.com/en-us/azure/ai-services/openai/reference#chat-completions>
//! - Anthropic: <https://docs.anthropic.com/en/api/messages>
//! - Gemini: <https://ai.google.dev/api/generate-content>

use llm_failover::{ChatRequest, Image, Message, ResponseFormat, Tool, ToolCall, ToolChoice};
use serde_json::{Value, json};

/// A chat wire format (its adapter, and the emulator's prefix for it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Format {
    OpenAi,
    Azure,
    Anthropic,
    Gemini,
}

impl Format {
    pub(super) const ALL: [Format; 4] = [
        Format::OpenAi,
        Format::Azure,
        Format::Anthropic,
        Format::Gemini,
    ];

    /// The emulator's prefix and the validator's name for it.
    pub(super) fn name(self) -> &'static str {
        match self {
            Format::OpenAi => "openai",
            Format::Azure => "azure",
            Format::Anthropic => "anthropic",
            Format::Gemini => "gemini",
        }
    }
}

/// One case: a name, whether it streams, and the request (the same for every format except
/// where a field only exists in one: the extra body).
pub(super) struct Case {
    pub(super) name: &'static str,
    pub(super) stream: bool,
    pub(super) request: fn(Format) -> ChatRequest,
}

const fn case(name: &'static str, request: fn(Format) -> ChatRequest) -> Case {
    Case {
        name,
        stream: false,
        request,
    }
}

const fn streamed(name: &'static str, request: fn(Format) -> ChatRequest) -> Case {
    Case {
        name,
        stream: true,
        request,
    }
}

/// A 1×1 PNG (the image understanding guides take PNG in every format:
/// <https://platform.openai.com/docs/guides/images-vision>,
/// <https://docs.anthropic.com/en/docs/build-with-claude/vision>,
/// <https://ai.google.dev/gemini-api/docs/image-understanding>).
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

/// A described tool (function calling: <https://platform.openai.com/docs/guides/function-calling>,
/// <https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use>,
/// <https://ai.google.dev/gemini-api/docs/function-calling>).
fn weather() -> Tool {
    Tool::new(
        "get_weather",
        json!({
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"]
        }),
    )
    .description("The current weather in a city.")
}

fn clock() -> Tool {
    Tool::new(
        "get_time",
        json!({"type": "object", "properties": {"timezone": {"type": "string"}}}),
    )
    .description("The local time in a timezone.")
}

/// The same tool with no description: optional for OpenAI, Azure and Anthropic, required by
/// Gemini's `FunctionDeclaration` (<https://ai.google.dev/api/caching#FunctionDeclaration>).
fn bare_weather() -> Tool {
    Tool::new(
        "get_weather",
        json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    )
}

fn ask() -> ChatRequest {
    ChatRequest::new()
        .system("Use the tools you are given.")
        .user("What is the weather in Paris?")
}

fn stops(n: usize) -> ChatRequest {
    ["END", "STOP", "###", "</answer>", "Q:", "A:"]
        .iter()
        .take(n)
        .fold(ChatRequest::from_prompt("Count to ten."), |r, s| r.stop(*s))
}

fn palette() -> Value {
    json!({
        "type": "object",
        "properties": {"colors": {"type": "array", "items": {"type": "string"}}},
        "required": ["colors"],
        "additionalProperties": false
    })
}

fn schema(name: &str, schema: Value) -> ChatRequest {
    ChatRequest::from_prompt("Three colours of autumn, as JSON.").response_format(
        ResponseFormat::JsonSchema {
            name: name.into(),
            schema,
        },
    )
}

/// The conversation after a call of `get_weather` with id `id`, and its result.
fn round_trip(id: &str) -> ChatRequest {
    ask()
        .tool(weather())
        .message(Message::assistant_calls(
            "",
            vec![ToolCall::new(id, "get_weather", json!({"city": "Paris"}))],
        ))
        .message(Message::tool_result(id, r#"{"temperature_c": 18}"#))
}

/// Every case, in report order.
pub(super) fn cases() -> Vec<Case> {
    vec![
        case("plain prompt", |_| ChatRequest::from_prompt("Say hi.")),
        case("system prompt", |_| {
            ChatRequest::new().system("Be brief.").user("Say hi.")
        }),
        case("multi-turn", |_| {
            ChatRequest::new()
                .system("Be brief.")
                .user("My name is Ada.")
                .assistant("Hello, Ada.")
                .user("What is my name?")
        }),
        // An assistant turn that said nothing (an empty answer kept in the history); Anthropic
        // takes empty content only in a final assistant turn.
        case("empty assistant turn", |_| {
            ChatRequest::new()
                .user("Hi.")
                .assistant("")
                .user("Are you there?")
        }),
        // System messages later in the conversation (lifted into `system` /
        // `systemInstruction` by Anthropic and Gemini).
        case("system messages between turns", |_| {
            ChatRequest::new()
                .system("Be brief.")
                .user("Hi.")
                .assistant("Hello.")
                .system("Answer in French.")
                .user("How are you?")
        }),
        case("max_tokens", |_| {
            ChatRequest::from_prompt("Say hi.").max_tokens(16)
        }),
        case("temperature 0", |_| {
            ChatRequest::from_prompt("Say hi.").temperature(0.0)
        }),
        // Anthropic's upper bound (0.0 to 1.0).
        case("temperature 1", |_| {
            ChatRequest::from_prompt("Say hi.").temperature(1.0)
        }),
        // Over Anthropic's 1.0, within OpenAI's and Gemini's 2.0.
        case("temperature 1.5", |_| {
            ChatRequest::from_prompt("Say hi.").temperature(1.5)
        }),
        case("temperature 2", |_| {
            ChatRequest::from_prompt("Say hi.").temperature(2.0)
        }),
        // Fields only the extra body carries, each in its format's own name: OpenAI/Azure
        // `top_p` and `seed`; Anthropic `top_p` and `top_k`; Gemini
        // `generationConfig.topP` and `.seed`
        // (<https://ai.google.dev/api/generate-content#generationconfig>).
        case("top_p and seed (extra body)", |f| {
            let r = ChatRequest::from_prompt("Say hi.");
            match f {
                Format::OpenAi | Format::Azure => r.extra_body("top_p", 0.9).extra_body("seed", 7),
                Format::Anthropic => r.extra_body("top_p", 0.9).extra_body("top_k", 40),
                Format::Gemini => r.extra_body("generationConfig", json!({"topP": 0.9, "seed": 7})),
            }
        }),
        // OpenAI and Azure take up to 4 stop sequences (`stop`, maxItems 4), Gemini up to 5
        // (`stopSequences`), Anthropic states no limit (`stop_sequences`).
        case("stop: 1 sequence", |_| stops(1)),
        case("stop: 4 sequences", |_| stops(4)),
        case("stop: 5 sequences", |_| stops(5)),
        case("stop: 6 sequences", |_| stops(6)),
        // A whitespace-only sequence, which Anthropic's API refuses ("each stop sequence must
        // contain non-whitespace"; its `stop_sequences` field in the Messages reference).
        case("stop: a blank line", |_| {
            ChatRequest::from_prompt("Write two paragraphs.").stop("\n\n")
        }),
        case("tool with a description", |_| ask().tool(weather())),
        case("tool without a description", |_| ask().tool(bare_weather())),
        case("two tools", |_| ask().tool(weather()).tool(clock())),
        case("tool choice auto", |_| {
            ask().tool(weather()).tool_choice(ToolChoice::Auto)
        }),
        case("tool choice none", |_| {
            ask().tool(weather()).tool_choice(ToolChoice::None)
        }),
        case("tool choice required", |_| {
            ask()
                .tool(weather())
                .tool(clock())
                .tool_choice(ToolChoice::Required)
        }),
        case("tool choice named", |_| {
            ask()
                .tool(weather())
                .tool(clock())
                .tool_choice(ToolChoice::named("get_time"))
        }),
        case("tool result", |_| round_trip("call_abc123")),
        // An id in characters Anthropic's `tool_use.id` refuses (`^[a-zA-Z0-9_-]+$`), as
        // some OpenAI-compatible hosts write them.
        case("tool result, foreign call id", |_| {
            round_trip("functions.get_weather:0")
        }),
        case("parallel calls and results", |_| {
            ask()
                .tool(weather())
                .tool(clock())
                .message(Message::assistant_calls(
                    "Checking both.",
                    vec![
                        ToolCall::new("call_1", "get_weather", json!({"city": "Paris"})),
                        ToolCall::new("call_2", "get_time", json!({"timezone": "Europe/Paris"})),
                    ],
                ))
                .message(Message::tool_result("call_1", r#"{"temperature_c": 18}"#))
                .message(Message::tool_result("call_2", "14:05"))
        }),
        case("image by https URL", |_| {
            ChatRequest::new().message(
                Message::user("What is in this image?")
                    .image(Image::url("https://example.com/images/cat.png")),
            )
        }),
        case("image as base64", |_| {
            ChatRequest::new().message(
                Message::user("What is in this image?").image(Image::base64("image/png", PNG)),
            )
        }),
        case("image as a data URL", |_| {
            ChatRequest::new().message(
                Message::user("What is in this image?")
                    .image(Image::url(format!("data:image/png;base64,{PNG}"))),
            )
        }),
        case("json_object answer", |_| {
            ChatRequest::from_prompt("Three colours of autumn, as a JSON object.")
                .response_format(ResponseFormat::JsonObject)
        }),
        case("json_schema answer", |_| schema("palette", palette())),
        // A `json_schema` name outside OpenAI's `^[a-zA-Z0-9_-]{1,64}$`.
        case("json_schema, odd name", |_| {
            schema("my palette v2.1 (final)", palette())
        }),
        case("json_schema, 80-character name", |_| {
            schema(&"palette_".repeat(10), palette())
        }),
        // With tools of its own (Anthropic then asks in the system prompt).
        case("json_schema with tools", |_| {
            schema("palette", palette()).tool(weather())
        }),
        case("json_schema, array root", |_| {
            schema(
                "colors",
                json!({"type": "array", "items": {"type": "string"}}),
            )
        }),
        streamed("streamed", |_| {
            ChatRequest::new()
                .system("Be brief.")
                .user("Say hi.")
                .max_tokens(32)
        }),
        streamed("streamed with tools", |_| {
            ask().tool(weather()).tool_choice(ToolChoice::Required)
        }),
        streamed("streamed json_schema", |_| schema("palette", palette())),
    ]
}
