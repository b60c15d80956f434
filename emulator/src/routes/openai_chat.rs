//! OpenAI chat completion requests, shared with Azure: messages with images, tool calls and
//! tool results; `tools`, `tool_choice`, `parallel_tool_calls`, `response_format` — checked
//! as OpenAI checks them (its messages). The answers are `openai_answer.rs`.
//!
//! Shapes: platform.openai.com/docs/api-reference/chat/create (the request),
//! platform.openai.com/docs/guides/function-calling (`tools[{type: "function", function:
//! {name, description, parameters}}]`, `tool_choice` `auto` | `none` | `required` |
//! `{type: "function", function: {name}}`, an assistant message's `tool_calls` answered by
//! one `{"role": "tool", tool_call_id, content}` message each),
//! platform.openai.com/docs/guides/structured-outputs (`response_format {type:
//! "json_schema", json_schema: {name, schema, strict}}`), platform.openai.com/docs/guides/
//! images-vision (`{"type": "image_url", "image_url": {url, detail}}` parts of user
//! messages, an http(s) or base64 `data:` URL).

use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiError, ChatReq};
use crate::text::PromptDigest;
use crate::tools::{
    Asks, CallRef, Choice, Format, ResultRef, Said, ToolDef, Unpaired, add_to_prompt, last_turn,
    unpaired,
};

/// An image at `detail: "low"`: 85 tokens; any other: 765, what a 1024×1024 image costs at
/// high detail (85 + 4 tiles × 170) — platform.openai.com/docs/guides/images-vision,
/// "Calculating costs" (the emulator does not read the image's size).
const IMAGE_TOKENS_LOW: u64 = 85;
const IMAGE_TOKENS: u64 = 765;

#[derive(Deserialize)]
struct ChatBody {
    model: Option<String>,
    messages: Option<Vec<Message>>,
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    tools: Option<Vec<ToolBody>>,
    tool_choice: Option<Value>,
    parallel_tool_calls: Option<bool>,
    response_format: Option<FormatBody>,
}

#[derive(Deserialize)]
struct Message {
    role: Option<String>,
    content: Option<Content>,
    tool_calls: Option<Vec<CallBody>>,
    tool_call_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Deserialize)]
struct Part {
    #[serde(rename = "type")]
    kind: Option<String>,
    text: Option<String>,
    image_url: Option<ImageUrl>,
}

#[derive(Deserialize)]
struct ImageUrl {
    url: Option<String>,
    detail: Option<String>,
}

#[derive(Deserialize)]
struct CallBody {
    id: Option<String>,
    function: Option<FunctionCall>,
}

#[derive(Deserialize)]
struct FunctionCall {
    name: Option<String>,
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct ToolBody {
    #[serde(rename = "type")]
    kind: Option<String>,
    function: Option<FunctionDef>,
}

#[derive(Deserialize)]
struct FunctionDef {
    name: Option<String>,
    description: Option<String>,
    parameters: Option<Value>,
}

#[derive(Deserialize)]
struct FormatBody {
    #[serde(rename = "type")]
    kind: Option<String>,
    json_schema: Option<SchemaBody>,
}

#[derive(Deserialize)]
struct SchemaBody {
    name: Option<String>,
    schema: Option<Value>,
}

#[derive(Deserialize)]
struct StreamOptions {
    include_usage: Option<bool>,
}

/// The 400 OpenAI sends for a body that is not JSON.
pub(super) fn json_syntax_error() -> ApiError {
    ApiError::bad(
        "We could not parse the JSON body of your request. (HINT: This likely means you aren't \
         using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was \
         sent was not valid JSON. If you have trouble figuring out how to fix this, please \
         contact us through our help center at help.openai.com.)",
    )
}

fn parse_json<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => ApiError::bad(format!("Invalid request body: {e}")),
        _ => json_syntax_error(),
    })
}

fn missing(what: &str, param: &'static str) -> ApiError {
    ApiError::bad_param(
        format!("Missing required parameter: '{what}'."),
        param,
        Some("missing_required_parameter"),
    )
}

fn invalid_value(got: &str, supported: &str, param: &'static str) -> ApiError {
    ApiError::bad_param(
        format!("Invalid value: '{got}'. Supported values are: {supported}."),
        param,
        Some("invalid_value"),
    )
}

/// Parses a chat completion request; `model` comes from the path for Azure.
pub(super) fn parse_chat(body: &[u8], model: Option<&str>) -> Result<ChatReq, ApiError> {
    let b: ChatBody = parse_json(body)?;
    let model = match (model, b.model) {
        (Some(m), _) => m.to_owned(),
        (None, Some(m)) => m,
        (None, None) => return Err(ApiError::bad("you must provide a model parameter")),
    };
    let Some(messages) = b.messages else {
        return Err(missing("messages", "messages"));
    };
    if messages.is_empty() {
        return Err(ApiError::bad_param(
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but got \
             an empty array instead.",
            "messages",
            Some("empty_array"),
        ));
    }
    let mut prompt = PromptDigest::default();
    let (conv, image_tokens) = read_messages(&messages, &mut prompt)?;
    check_pairing(&conv)?;
    let stream = b.stream.unwrap_or(false);
    if b.stream_options.is_some() && !stream {
        return Err(ApiError::bad_param(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            "stream_options",
            Some("invalid_value"),
        ));
    }
    let tools = read_tools(b.tools.unwrap_or_default())?;
    let only_with_tools = |name: &str| {
        ApiError::bad_param(
            format!(
                "Invalid value for '{name}': '{name}' is only allowed when 'tools' are specified."
            ),
            if name == "tool_choice" {
                "tool_choice"
            } else {
                "parallel_tool_calls"
            },
            None,
        )
    };
    if tools.is_empty() && b.tool_choice.is_some() {
        return Err(only_with_tools("tool_choice"));
    }
    if tools.is_empty() && b.parallel_tool_calls.is_some() {
        return Err(only_with_tools("parallel_tool_calls"));
    }
    let asks = Asks {
        choice: read_choice(b.tool_choice.as_ref(), &tools)?,
        tools,
        parallel: b.parallel_tool_calls.unwrap_or(true),
        last: last_turn(&conv),
        format: read_format(b.response_format)?,
        preamble: false,
    };
    add_to_prompt(&asks, &mut prompt);
    Ok(ChatReq {
        model,
        prompt,
        max_tokens: b.max_completion_tokens.or(b.max_tokens),
        stream,
        sse: true,
        include_usage: b
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false),
        asks,
        image_tokens,
        returned: [0, 0],
        thinking: false,
    })
}

/// The conversation (its text into `prompt`) and what its images cost.
fn read_messages(
    messages: &[Message],
    prompt: &mut PromptDigest,
) -> Result<(Vec<Said>, u64), ApiError> {
    let mut conv = Vec::with_capacity(messages.len());
    let mut image_tokens = 0;
    for (i, m) in messages.iter().enumerate() {
        let Some(role) = m.role.as_deref() else {
            return Err(missing(&format!("messages[{i}].role"), "messages"));
        };
        let (texts, images) = read_content(m.content.as_ref(), i, role)?;
        for t in &texts {
            prompt.add(t);
        }
        let text = texts.join("\n");
        image_tokens += images;
        conv.push(match role {
            "user" => Said::User(text),
            "assistant" => Said::Assistant(read_calls(m, i, prompt)?),
            "tool" => {
                let Some(id) = &m.tool_call_id else {
                    return Err(missing(&format!("messages[{i}].tool_call_id"), "messages"));
                };
                Said::Results(vec![ResultRef {
                    id: Some(id.clone()),
                    name: None,
                    content: text,
                }])
            }
            "system" | "developer" | "function" => Said::Other,
            other => {
                return Err(invalid_value(
                    other,
                    "'system', 'assistant', 'user', 'function', 'tool', and 'developer'",
                    "messages",
                ));
            }
        });
    }
    Ok((conv, image_tokens))
}

/// A message's text (its text parts) and what its images cost; images only in user
/// messages.
fn read_content<'a>(
    c: Option<&'a Content>,
    i: usize,
    role: &str,
) -> Result<(Vec<&'a str>, u64), ApiError> {
    let parts = match c {
        None => return Ok((Vec::new(), 0)),
        Some(Content::Text(t)) => return Ok((vec![t.as_str()], 0)),
        Some(Content::Parts(ps)) => ps,
    };
    let mut texts = Vec::new();
    let mut tokens = 0;
    for (j, p) in parts.iter().enumerate() {
        if let Some(t) = &p.text {
            texts.push(t.as_str());
        }
        if p.kind.as_deref() != Some("image_url") {
            continue;
        }
        if role != "user" {
            return Err(ApiError::bad_param(
                format!(
                    "Invalid 'messages[{i}]'. Image URLs are only allowed for messages with role \
                     'user', but this message with role '{role}' contains an image URL."
                ),
                "messages",
                Some("invalid_value"),
            ));
        }
        let img = p.image_url.as_ref();
        let Some(url) = img.and_then(|u| u.url.as_deref()) else {
            return Err(missing(
                &format!("messages[{i}].content[{j}].image_url.url"),
                "messages",
            ));
        };
        if !is_image_url(url) {
            return Err(ApiError::bad_param(
                format!(
                    "Invalid 'messages[{i}].content[{j}].image_url.url'. Expected a valid URL or \
                     a base64-encoded data URL with an image MIME type (e.g. \
                     'data:image/png;base64,aW1nIGJ5dGVzIGhlcmU=')."
                ),
                "messages",
                Some("invalid_value"),
            ));
        }
        tokens += match img.and_then(|u| u.detail.as_deref()) {
            Some("low") => IMAGE_TOKENS_LOW,
            _ => IMAGE_TOKENS,
        };
    }
    Ok((texts, tokens))
}

/// An `https://` (or `http://`) URL, or a `data:image/…;base64,…` one.
fn is_image_url(url: &str) -> bool {
    if let Some(rest) = url.strip_prefix("data:") {
        return rest.starts_with("image/")
            && rest
                .split_once(";base64,")
                .is_some_and(|(_, data)| !data.is_empty());
    }
    url.starts_with("https://") || url.starts_with("http://")
}

/// An assistant message's calls (their names and arguments into `prompt`).
fn read_calls(m: &Message, i: usize, prompt: &mut PromptDigest) -> Result<Vec<CallRef>, ApiError> {
    let mut calls = Vec::new();
    for (j, c) in m.tool_calls.iter().flatten().enumerate() {
        let Some(id) = &c.id else {
            return Err(missing(
                &format!("messages[{i}].tool_calls[{j}].id"),
                "messages",
            ));
        };
        let Some(name) = c.function.as_ref().and_then(|f| f.name.clone()) else {
            return Err(missing(
                &format!("messages[{i}].tool_calls[{j}].function.name"),
                "messages",
            ));
        };
        prompt.add(&name);
        if let Some(args) = c.function.as_ref().and_then(|f| f.arguments.as_deref()) {
            prompt.add(args);
        }
        calls.push(CallRef {
            id: Some(id.clone()),
            name,
        });
    }
    Ok(calls)
}

/// Calls and results pair up as OpenAI requires (its own messages).
fn check_pairing(conv: &[Said]) -> Result<(), ApiError> {
    match unpaired(conv) {
        None => Ok(()),
        Some(Unpaired::Unanswered { ids, .. }) => Err(ApiError::bad_param(
            format!(
                "An assistant message with 'tool_calls' must be followed by tool messages \
                 responding to each 'tool_call_id'. The following tool_call_ids did not have \
                 response messages: {}",
                ids.join(", ")
            ),
            "messages",
            None,
        )),
        Some(Unpaired::NoCalls { at }) => Err(ApiError::bad_param(
            format!(
                "Invalid parameter: messages with role 'tool' must be a response to a preceeding \
                 message with 'tool_calls'. (messages.[{at}].role)"
            ),
            "messages",
            None,
        )),
        Some(Unpaired::Orphan { id, .. }) => Err(ApiError::bad_param(
            format!(
                "Invalid parameter: 'tool_call_id' of '{id}' not found in 'tool_calls' of previous message."
            ),
            "messages",
            None,
        )),
    }
}

fn read_tools(tools: Vec<ToolBody>) -> Result<Vec<ToolDef>, ApiError> {
    let mut out = Vec::new();
    for (i, t) in tools.into_iter().enumerate() {
        match t.kind.as_deref() {
            Some("function") => {}
            // A free-form tool: nothing the emulator calls.
            Some("custom") => continue,
            Some(other) => return Err(invalid_value(other, "'function' and 'custom'", "tools")),
            None => return Err(missing(&format!("tools[{i}].type"), "tools")),
        }
        let Some(f) = t.function else {
            return Err(missing(&format!("tools[{i}].function"), "tools"));
        };
        let Some(name) = f.name else {
            return Err(missing(&format!("tools[{i}].function.name"), "tools"));
        };
        out.push(ToolDef {
            name,
            description: f.description.unwrap_or_default(),
            schema: f.parameters.unwrap_or_else(|| json!({})),
        });
    }
    Ok(out)
}

fn read_choice(choice: Option<&Value>, tools: &[ToolDef]) -> Result<Choice, ApiError> {
    let supported = "'none', 'auto', and 'required'";
    match choice {
        None => Ok(Choice::Auto),
        Some(Value::String(s)) => match s.as_str() {
            "auto" => Ok(Choice::Auto),
            "none" => Ok(Choice::None),
            "required" => Ok(Choice::Any),
            other => Err(invalid_value(other, supported, "tool_choice")),
        },
        Some(v) => {
            let Some(name) = v.pointer("/function/name").and_then(Value::as_str) else {
                return Err(missing("tool_choice.function.name", "tool_choice"));
            };
            if !tools.iter().any(|t| t.name == name) {
                return Err(ApiError::bad_param(
                    format!(
                        "Invalid value for 'tool_choice': no function named '{name}' was \
                         specified in the 'tools' parameter."
                    ),
                    "tool_choice",
                    None,
                ));
            }
            Ok(Choice::Named(name.to_owned()))
        }
    }
}

fn read_format(f: Option<FormatBody>) -> Result<Format, ApiError> {
    let Some(f) = f else {
        return Ok(Format::Text);
    };
    match f.kind.as_deref() {
        None => Err(missing("response_format.type", "response_format")),
        Some("text") => Ok(Format::Text),
        Some("json_object") => Ok(Format::JsonObject),
        Some("json_schema") => {
            let Some(s) = f.json_schema else {
                return Err(missing("response_format.json_schema", "response_format"));
            };
            if s.name.is_none() {
                return Err(missing(
                    "response_format.json_schema.name",
                    "response_format",
                ));
            }
            Ok(Format::Schema(
                s.schema.unwrap_or_else(|| json!({"type": "object"})),
            ))
        }
        Some(other) => Err(invalid_value(
            other,
            "'json_object', 'json_schema', and 'text'",
            "response_format",
        )),
    }
}
