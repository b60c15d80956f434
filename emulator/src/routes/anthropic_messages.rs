//! Anthropic messages: the request (text, image, `tool_use` and `tool_result` blocks;
//! `tools`, `tool_choice`, `output_config.format`), checked as Anthropic checks it, and the
//! answer, whole or as typed events.
//!
//! Shapes: docs.claude.com/en/api/messages (the message, its `content` blocks,
//! `stop_reason`), docs.claude.com/en/docs/agents-and-tools/tool-use/implement-tool-use
//! (`tools[{name, description, input_schema}]`, `tool_choice {type: auto|any|tool|none,
//! name, disable_parallel_tool_use}`, answers with `{"type": "tool_use", id, name, input}`
//! blocks and `stop_reason: "tool_use"` — with `any` or `tool` no text block before them —
//! results as `{"type": "tool_result", tool_use_id, content}` blocks of the next user
//! message; a forced tool is how the docs get JSON of a schema), docs.claude.com/en/docs/
//! build-with-claude/streaming (`content_block_start` with the `tool_use` block and `input:
//! {}`, `content_block_delta` `input_json_delta.partial_json` pieces, `content_block_stop`),
//! platform.claude.com/docs/en/build-with-claude/structured-outputs (`output_config.format
//! {type: "json_schema", schema}`: the JSON as the text), docs.claude.com/en/docs/
//! build-with-claude/vision (`{"type": "image", "source": {"type": "base64", media_type,
//! data}}` or `{"type": "url", url}`).

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiError, ChatReq, CountReq, StreamParts, Usage, json_bytes, sse_event};
use crate::text::{PromptDigest, hashed_id, new_id};
use crate::tools::{
    Answer, Asks, CallRef, Choice, Finish, Format, ResultRef, Said, ToolDef, Unpaired,
    add_to_prompt, last_turn, unpaired,
};

/// What an image costs: width × height / 750 tokens, about 1,600 for the largest image
/// sent unscaled (1092×1092 px) — docs.claude.com/en/docs/build-with-claude/vision,
/// "Evaluate image size" (the emulator does not read the image's size).
const IMAGE_TOKENS: u64 = 1_600;

const MEDIA_TYPES: [&str; 4] = ["image/jpeg", "image/png", "image/gif", "image/webp"];

#[derive(Deserialize)]
pub(super) struct MessagesBody {
    pub(super) model: Option<String>,
    pub(super) max_tokens: Option<i64>,
    messages: Option<Vec<Message>>,
    system: Option<Content>,
    pub(super) stream: Option<bool>,
    tools: Option<Vec<ToolBody>>,
    tool_choice: Option<ChoiceBody>,
    output_config: Option<OutputConfig>,
    /// The structured-outputs beta's name of `output_config.format`.
    output_format: Option<OutputFormat>,
    /// Extended thinking: `{"type": "enabled", "budget_tokens": N}` or `{"type": "disabled"}`.
    thinking: Option<ThinkingBody>,
}

#[derive(Deserialize)]
struct ThinkingBody {
    #[serde(rename = "type")]
    kind: Option<String>,
    budget_tokens: Option<i64>,
}

#[derive(Deserialize)]
struct Message {
    role: Option<String>,
    content: Option<Content>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Blocks(Vec<Block>),
}

#[derive(Deserialize)]
struct Block {
    #[serde(rename = "type")]
    kind: Option<String>,
    text: Option<String>,
    id: Option<String>,
    name: Option<String>,
    input: Option<Value>,
    tool_use_id: Option<String>,
    content: Option<Value>,
    source: Option<Source>,
    /// A `thinking` block's text and signature; a `redacted_thinking` block's data.
    thinking: Option<String>,
    signature: Option<String>,
    data: Option<String>,
}

#[derive(Deserialize)]
struct Source {
    #[serde(rename = "type")]
    kind: Option<String>,
    media_type: Option<String>,
    data: Option<String>,
    url: Option<String>,
}

#[derive(Deserialize)]
struct ToolBody {
    #[serde(rename = "type")]
    kind: Option<String>,
    name: Option<String>,
    description: Option<String>,
    input_schema: Option<Value>,
}

#[derive(Deserialize)]
struct ChoiceBody {
    #[serde(rename = "type")]
    kind: Option<String>,
    name: Option<String>,
    disable_parallel_tool_use: Option<bool>,
}

#[derive(Deserialize)]
struct OutputConfig {
    format: Option<OutputFormat>,
}

#[derive(Deserialize)]
struct OutputFormat {
    #[serde(rename = "type")]
    kind: Option<String>,
    schema: Option<Value>,
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::bad(message)
}

/// What a messages (or count) request holds beyond its model and limits.
pub(super) struct Parsed {
    pub(super) prompt: PromptDigest,
    pub(super) image_tokens: u64,
    pub(super) asks: Asks,
    /// Whether extended thinking is on (the answer starts with a signed `thinking` block).
    pub(super) thinking: bool,
    /// Signed thinking blocks sent back that verified.
    pub(super) returned: u32,
}

/// The emulator's secret for its thinking blocks' signatures (an HMAC of the thinking: the
/// real ones are opaque too).
const SIGNING_KEY: &[u8] = b"llm-failover emulator thinking signatures";

/// The signature of a `thinking` block's text.
fn signature(thinking: &str) -> String {
    use base64::Engine as _;
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, SIGNING_KEY);
    base64::engine::general_purpose::STANDARD.encode(ring::hmac::sign(&key, thinking.as_bytes()))
}

/// What the emulator "thinks" before it answers (extended thinking's summary text).
const THINKING: &str = "The user asked something; I read the conversation and answer it.";

/// Extended thinking asked for: `type: "enabled"` with a budget of at least 1,024 tokens
/// and below `max_tokens` (docs.claude.com/en/docs/build-with-claude/extended-thinking).
fn read_thinking(b: &MessagesBody) -> Result<bool, ApiError> {
    let Some(t) = &b.thinking else {
        return Ok(false);
    };
    match t.kind.as_deref() {
        Some("disabled") => Ok(false),
        Some("enabled") => {
            let budget = t
                .budget_tokens
                .ok_or_else(|| invalid("thinking.enabled.budget_tokens: Field required"))?;
            if budget < 1024 {
                return Err(invalid(
                    "thinking.enabled.budget_tokens: Input should be greater than or equal to \
                     1024",
                ));
            }
            if b.max_tokens.is_some_and(|m| budget >= m) {
                return Err(invalid(
                    "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult \
                     our documentation at https://docs.claude.com/en/docs/build-with-claude/\
                     extended-thinking#max-tokens-and-context-window-size",
                ));
            }
            Ok(true)
        }
        other => Err(invalid(format!(
            "thinking: Input tag '{}' found using 'type' does not match any of the expected \
             tags: 'disabled', 'enabled'",
            other.unwrap_or("")
        ))),
    }
}

/// The prompt of a messages (or count) request — `system`, every message's text, calls and
/// results, the tools and the schema — its images' cost, and what it asks.
pub(super) fn parse(b: &MessagesBody) -> Result<Parsed, ApiError> {
    let Some(messages) = &b.messages else {
        return Err(invalid("messages: Field required"));
    };
    if messages.is_empty() {
        return Err(invalid("messages: at least one message is required"));
    }
    let mut prompt = PromptDigest::default();
    if let Some(s) = &b.system {
        for t in texts(s) {
            prompt.add(t);
        }
    }
    let thinking = read_thinking(b)?;
    let mut conv = Vec::with_capacity(messages.len());
    let mut image_tokens = 0;
    let (mut returned, mut starts_thinking) = (0, Vec::with_capacity(messages.len()));
    for (i, m) in messages.iter().enumerate() {
        let assistant = match m.role.as_deref() {
            Some("user") => false,
            Some("assistant") => true,
            Some(other) => {
                return Err(invalid(format!(
                    "messages.{i}.role: Input should be 'user' or 'assistant' (got '{other}')"
                )));
            }
            None => return Err(invalid(format!("messages.{i}.role: Field required"))),
        };
        let Some(content) = &m.content else {
            return Err(invalid(format!("messages.{i}.content: Field required")));
        };
        let (said, images) = read_message(content, i, assistant, &mut prompt)?;
        image_tokens += images;
        conv.push(said);
        let blocks = match content {
            Content::Blocks(bs) => bs.as_slice(),
            Content::Text(_) => &[],
        };
        returned += check_thinking_blocks(blocks, i)?;
        starts_thinking.push(
            blocks.first().is_some_and(|b| {
                matches!(b.kind.as_deref(), Some("thinking" | "redacted_thinking"))
            }),
        );
    }
    check_pairing(&conv)?;
    if thinking
        && matches!(conv.last(), Some(Said::Results(_)))
        && let Some(i) = conv.iter().rposition(|s| matches!(s, Said::Assistant(_)))
        && !starts_thinking[i]
    {
        return Err(invalid(format!(
            "messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found \
             `{}`. When `thinking` is enabled, a final `assistant` message must start with a \
             thinking block (preceeding the lastmost set of `tool_use` and `tool_result` \
             blocks). We recommend you include thinking blocks from previous turns. To avoid \
             this requirement, disable `thinking`. Please consult our documentation at \
             https://docs.claude.com/en/docs/build-with-claude/extended-thinking",
            first_kind(&messages[i])
        )));
    }
    let tools = read_tools(b.tools.as_deref().unwrap_or_default())?;
    let (choice, parallel) = read_choice(b.tool_choice.as_ref(), &tools)?;
    if thinking && matches!(choice, Choice::Any | Choice::Named(_)) {
        return Err(invalid(
            "Thinking may not be enabled when tool_choice forces tool use.",
        ));
    }
    let asks = Asks {
        tools,
        choice,
        parallel,
        last: last_turn(&conv),
        format: read_format(b)?,
        preamble: true,
    };
    add_to_prompt(&asks, &mut prompt);
    Ok(Parsed {
        prompt,
        image_tokens,
        asks,
        thinking,
        returned,
    })
}

/// The type of a message's first block (`text` for a plain string).
fn first_kind(m: &Message) -> &str {
    match &m.content {
        Some(Content::Blocks(bs)) => bs.first().and_then(|b| b.kind.as_deref()).unwrap_or(""),
        _ => "text",
    }
}

/// Thinking blocks sent back must be the ones given, unchanged: a `thinking` block whose
/// signature is not its text's is refused ("Invalid `signature` in `thinking` block"), and
/// thinking is only ever the assistant's. Returns how many verified.
fn check_thinking_blocks(blocks: &[Block], i: usize) -> Result<u32, ApiError> {
    let mut verified = 0;
    for (j, b) in blocks.iter().enumerate() {
        if b.kind.as_deref() == Some("redacted_thinking") && b.data.is_none() {
            return Err(invalid(format!(
                "messages.{i}.content.{j}.redacted_thinking.data: Field required"
            )));
        }
        if b.kind.as_deref() != Some("thinking") {
            continue;
        }
        let (Some(t), Some(sig)) = (&b.thinking, &b.signature) else {
            return Err(invalid(format!(
                "messages.{i}.content.{j}.thinking: `thinking` and `signature` are required"
            )));
        };
        if *sig != signature(t) {
            return Err(invalid(format!(
                "messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
            )));
        }
        verified += 1;
    }
    Ok(verified)
}

/// A content's text pieces (a string, or its text blocks).
fn texts(c: &Content) -> Vec<&str> {
    match c {
        Content::Text(t) => vec![t.as_str()],
        Content::Blocks(bs) => bs.iter().filter_map(|b| b.text.as_deref()).collect(),
    }
}

/// One message as the answer reads it (its text, calls and results into `prompt`), and what
/// its images cost.
fn read_message(
    content: &Content,
    i: usize,
    assistant: bool,
    prompt: &mut PromptDigest,
) -> Result<(Said, u64), ApiError> {
    let blocks = match content {
        Content::Text(t) => {
            prompt.add(t);
            let said = if assistant {
                Said::Assistant(Vec::new())
            } else {
                Said::User(t.clone())
            };
            return Ok((said, 0));
        }
        Content::Blocks(bs) => bs,
    };
    let (mut text, mut calls, mut results, mut images) = (Vec::new(), Vec::new(), Vec::new(), 0);
    for (j, b) in blocks.iter().enumerate() {
        let at = format!("messages.{i}.content.{j}");
        let only = |role: &str| {
            invalid(format!(
                "{at}: `{}` blocks can only be in {role} messages",
                b.kind.as_deref().unwrap_or("")
            ))
        };
        match b.kind.as_deref() {
            Some("text") => text.push(b.text.clone().unwrap_or_default()),
            Some("image") if assistant => return Err(only("user")),
            Some("image") => {
                check_image(b.source.as_ref(), &at)?;
                images += IMAGE_TOKENS;
            }
            Some("tool_use") if !assistant => return Err(only("assistant")),
            Some("tool_use") => calls.push(read_call(b, &at, prompt)?),
            Some("tool_result") if assistant => return Err(only("user")),
            Some("thinking" | "redacted_thinking") if !assistant => return Err(only("assistant")),
            Some("tool_result") => {
                let Some(id) = &b.tool_use_id else {
                    return Err(invalid(format!(
                        "{at}.tool_result.tool_use_id: Field required"
                    )));
                };
                let content = result_text(b.content.as_ref());
                prompt.add(&content);
                results.push(ResultRef {
                    id: Some(id.clone()),
                    name: None,
                    content,
                });
            }
            Some(_) => {}
            None => return Err(invalid(format!("{at}.type: Field required"))),
        }
    }
    for t in &text {
        prompt.add(t);
    }
    let said = if assistant {
        Said::Assistant(calls)
    } else if !results.is_empty() {
        Said::Results(results)
    } else {
        Said::User(text.join("\n"))
    };
    Ok((said, images))
}

fn read_call(b: &Block, at: &str, prompt: &mut PromptDigest) -> Result<CallRef, ApiError> {
    let field = |f: &str| invalid(format!("{at}.tool_use.{f}: Field required"));
    let id = b.id.clone().ok_or_else(|| field("id"))?;
    let name = b.name.clone().ok_or_else(|| field("name"))?;
    let input = b.input.as_ref().ok_or_else(|| field("input"))?;
    prompt.add(&name);
    prompt.add(&input.to_string());
    Ok(CallRef { id: Some(id), name })
}

/// A `tool_result`'s content as text: a string, or its text blocks joined.
fn result_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn check_image(source: Option<&Source>, at: &str) -> Result<(), ApiError> {
    let Some(s) = source else {
        return Err(invalid(format!("{at}.image.source: Field required")));
    };
    match s.kind.as_deref() {
        Some("base64") => {
            let media = s.media_type.as_deref().unwrap_or("");
            if !MEDIA_TYPES.contains(&media) {
                return Err(invalid(format!(
                    "{at}.image.source.base64.media_type: Input should be 'image/jpeg', \
                     'image/png', 'image/gif' or 'image/webp'"
                )));
            }
            if s.data.as_deref().is_none_or(str::is_empty) {
                return Err(invalid(format!(
                    "{at}.image.source.base64.data: Field required"
                )));
            }
            Ok(())
        }
        Some("url") if s.url.as_deref().is_some_and(|u| u.starts_with("http")) => Ok(()),
        Some("url") => Err(invalid(format!(
            "{at}.image.source.url.url: Field required"
        ))),
        _ => Err(invalid(format!(
            "{at}.image.source: Input tag '{}' found using 'type' does not match any of the \
             expected tags: 'base64', 'url', 'file'",
            s.kind.as_deref().unwrap_or("")
        ))),
    }
}

/// Calls and results pair up as Anthropic requires (its own messages).
fn check_pairing(conv: &[Said]) -> Result<(), ApiError> {
    match unpaired(conv) {
        None => Ok(()),
        Some(Unpaired::Unanswered { at, ids }) => Err(invalid(format!(
            "messages.{}: `tool_use` ids were found without `tool_result` blocks immediately \
             after: {}. Each `tool_use` block must have a corresponding `tool_result` block in \
             the next message.",
            at + 1,
            ids.join(", ")
        ))),
        Some(Unpaired::NoCalls { at }) => Err(invalid(format!(
            "messages.{at}.content.0: unexpected `tool_use_id` found in `tool_result` blocks. \
             Each `tool_result` block must have a corresponding `tool_use` block in the \
             previous message."
        ))),
        Some(Unpaired::Orphan { at, id }) => Err(invalid(format!(
            "messages.{at}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each \
             `tool_result` block must have a corresponding `tool_use` block in the previous \
             message."
        ))),
    }
}

/// The client tools (server tools, with a `type` of their own, are nothing to call here).
fn read_tools(tools: &[ToolBody]) -> Result<Vec<ToolDef>, ApiError> {
    let mut out = Vec::new();
    for (i, t) in tools.iter().enumerate() {
        if !matches!(t.kind.as_deref(), None | Some("custom")) {
            continue;
        }
        let Some(name) = &t.name else {
            return Err(invalid(format!("tools.{i}.custom.name: Field required")));
        };
        let Some(schema) = &t.input_schema else {
            return Err(invalid(format!(
                "tools.{i}.custom.input_schema: Field required"
            )));
        };
        out.push(ToolDef {
            name: name.clone(),
            description: t.description.clone().unwrap_or_default(),
            schema: schema.clone(),
        });
    }
    Ok(out)
}

fn read_choice(c: Option<&ChoiceBody>, tools: &[ToolDef]) -> Result<(Choice, bool), ApiError> {
    let Some(c) = c else {
        return Ok((Choice::Auto, true));
    };
    if tools.is_empty() {
        return Err(invalid(
            "tool_choice may only be specified while providing tools",
        ));
    }
    let parallel = !c.disable_parallel_tool_use.unwrap_or(false);
    let choice = match c.kind.as_deref() {
        Some("auto") => Choice::Auto,
        Some("any") => Choice::Any,
        Some("none") => Choice::None,
        Some("tool") => {
            let Some(name) = &c.name else {
                return Err(invalid("tool_choice.tool.name: Field required"));
            };
            if !tools.iter().any(|t| &t.name == name) {
                return Err(invalid(format!(
                    "tool_choice.tool.name: tool '{name}' is not one of the tools given"
                )));
            }
            Choice::Named(name.clone())
        }
        other => {
            return Err(invalid(format!(
                "tool_choice: Input tag '{}' found using 'type' does not match any of the \
                 expected tags: 'auto', 'any', 'tool', 'none'",
                other.unwrap_or("")
            )));
        }
    };
    Ok((choice, parallel))
}

fn read_format(b: &MessagesBody) -> Result<Format, ApiError> {
    let format = b
        .output_config
        .as_ref()
        .and_then(|c| c.format.as_ref())
        .or(b.output_format.as_ref());
    let Some(f) = format else {
        return Ok(Format::Text);
    };
    match (f.kind.as_deref(), &f.schema) {
        (Some("json_schema"), Some(schema)) => Ok(Format::Schema(schema.clone())),
        (Some("json_schema"), None) => Err(invalid("output_config.format.schema: Field required")),
        (other, _) => Err(invalid(format!(
            "output_config.format.type: Input should be 'json_schema' (got '{}')",
            other.unwrap_or("")
        ))),
    }
}

/// A messages request as the neutral one.
pub(super) fn chat_req(
    b: &MessagesBody,
    model: String,
    max_tokens: u64,
) -> Result<ChatReq, ApiError> {
    let p = parse(b)?;
    Ok(ChatReq {
        model,
        prompt: p.prompt,
        max_tokens: Some(max_tokens),
        stream: b.stream.unwrap_or(false),
        sse: true,
        include_usage: true,
        asks: p.asks,
        image_tokens: p.image_tokens,
        returned: [p.returned, 0],
        thinking: p.thinking,
    })
}

/// A count request as the neutral one.
pub(super) fn count_req(b: &MessagesBody, model: String) -> Result<CountReq, ApiError> {
    let p = parse(b)?;
    Ok(CountReq {
        model,
        prompt: p.prompt,
        image_tokens: p.image_tokens,
    })
}

fn stop_reason(a: &Answer) -> &'static str {
    match a.finish() {
        Finish::Stop => "end_turn",
        Finish::Length => "max_tokens",
        Finish::ToolCalls => "tool_use",
    }
}

fn usage_body(input: u64, output: u64) -> Value {
    json!({
        "input_tokens": input,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output,
    })
}

/// A call's id: `toolu_01` and 22 characters, from the call's hash.
fn call_id(key: u64) -> String {
    hashed_id("toolu_01", 22, key)
}

/// Whether the answer has a text block: always without calls; with them, only a preamble.
fn has_text(a: &Answer) -> bool {
    a.calls.is_empty() || !a.text.text.is_empty()
}

pub(super) fn chat(req: &ChatReq, a: &Answer, usage: Usage) -> Bytes {
    let mut content = Vec::new();
    if req.thinking {
        content.push(
            json!({"type": "thinking", "thinking": THINKING, "signature": signature(THINKING)}),
        );
    }
    if has_text(a) {
        content.push(json!({"type": "text", "text": a.text.text}));
    }
    for c in &a.calls {
        content.push(
            json!({"type": "tool_use", "id": call_id(c.key), "name": c.name,
                            "input": c.arguments}),
        );
    }
    json_bytes(&json!({
        "id": new_id("msg_01", 22),
        "type": "message",
        "role": "assistant",
        "model": req.model,
        "content": content,
        "stop_reason": stop_reason(a),
        "stop_sequence": null,
        "usage": usage_body(usage.input, usage.output),
    }))
}

/// The content blocks as events: per block a start, its deltas, a stop (a thinking block's
/// deltas are `thinking_delta`s then one `signature_delta`).
fn block_events(req: &ChatReq, a: &Answer) -> Vec<Bytes> {
    let start = |index: usize, block: Value| {
        sse_event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": block}),
        )
    };
    let delta = |index: usize, delta: Value| {
        sse_event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index, "delta": delta}),
        )
    };
    let stop = |index: usize| {
        sse_event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        )
    };
    let mut events = Vec::new();
    let mut index = 0;
    if req.thinking {
        events.push(start(index, json!({"type": "thinking", "thinking": ""})));
        for piece in crate::text::pieces(THINKING, 24) {
            events.push(delta(
                index,
                json!({"type": "thinking_delta", "thinking": piece}),
            ));
        }
        events.push(delta(
            index,
            json!({"type": "signature_delta", "signature": signature(THINKING)}),
        ));
        events.push(stop(index));
        index += 1;
    }
    if has_text(a) {
        events.push(start(index, json!({"type": "text", "text": ""})));
        for d in a.deltas() {
            events.push(delta(index, json!({"type": "text_delta", "text": d})));
        }
        events.push(stop(index));
        index += 1;
    }
    for c in &a.calls {
        events.push(start(
            index,
            json!({"type": "tool_use", "id": call_id(c.key), "name": c.name, "input": {}}),
        ));
        let args = c.arguments_text();
        let size = args.chars().count().div_ceil(2).clamp(1, 10);
        for piece in crate::text::pieces(&args, size) {
            events.push(delta(
                index,
                json!({"type": "input_json_delta", "partial_json": piece}),
            ));
        }
        events.push(stop(index));
        index += 1;
    }
    events
}

pub(super) fn chat_stream(req: &ChatReq, a: &Answer, usage: Usage) -> StreamParts {
    let start = json!({
        "type": "message_start",
        "message": {
            "id": new_id("msg_01", 22), "type": "message", "role": "assistant",
            "model": req.model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": usage_body(usage.input, 1),
        },
    });
    let mut events = block_events(req, a).into_iter();
    let mut head = vec![sse_event("message_start", &start)];
    head.extend(events.next());
    head.push(sse_event("ping", &json!({"type": "ping"})));
    let mut body: Vec<Bytes> = events.collect();
    let mut tail: Vec<Bytes> = body.pop().into_iter().collect();
    tail.push(sse_event(
        "message_delta",
        &json!({"type": "message_delta",
                "delta": {"stop_reason": stop_reason(a), "stop_sequence": null},
                "usage": {"output_tokens": usage.output}}),
    ));
    tail.push(sse_event("message_stop", &json!({"type": "message_stop"})));
    StreamParts { head, body, tail }
}
