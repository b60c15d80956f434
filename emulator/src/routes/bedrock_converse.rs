//! Bedrock Converse: the request (`messages` of `text`, `image`, `toolUse` and `toolResult`
//! blocks, `system`, `inferenceConfig`, `toolConfig`, `outputConfig.textFormat`), checked as
//! Bedrock checks it, and the answer, whole or as stream events.
//!
//! Shapes: docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html (the
//! request and `{output: {message: {role, content}}, stopReason, usage: {inputTokens,
//! outputTokens, totalTokens}, metrics: {latencyMs}}`), …/API_runtime_ContentBlock.html
//! (a content block is a union: exactly one member), …/API_runtime_ImageBlock.html
//! (`{format: png|jpeg|gif|webp, source: {bytes}}`, bytes base64 in JSON),
//! …/API_runtime_ToolUseBlock.html, …/API_runtime_ToolResultBlock.html (`content` of `text`
//! and `json` blocks, `status`), …/API_runtime_ToolConfiguration.html and
//! …/API_runtime_ToolChoice.html (`{auto: {}}`, `{any: {}}`, `{tool: {name}}`),
//! …/API_runtime_OutputConfig.html (`textFormat: {type: "json_schema", structure:
//! {jsonSchema: {schema: "<JSON text>", name, description}}}`),
//! …/API_runtime_InferenceConfiguration.html (`maxTokens` ≥ 1, `temperature` and `topP` in
//! 0..=1), …/API_runtime_ConverseStream.html and …/API_runtime_ConverseStreamOutput.html
//! (`messageStart {role}`, `contentBlockStart {contentBlockIndex, start: {toolUse: {toolUseId,
//! name}}}` for a tool block only, `contentBlockDelta {contentBlockIndex, delta: {text} |
//! {toolUse: {input: "<JSON piece>"}}}`, `contentBlockStop`, `messageStop {stopReason}`,
//! `metadata {usage, metrics}`), and the user guide's tool-use page
//! (docs.aws.amazon.com/bedrock/latest/userguide/tool-use-inference-call.html: tool ids
//! `tooluse_…`, results in the next user message). Validation messages are the service's
//! ("1 validation error detected: Value … at '…' failed to satisfy constraint: …", "A
//! conversation must alternate between user and assistant roles…", "Expected toolResult
//! blocks at messages.2.content for the following Ids: …").

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{ApiError, ChatReq, Usage};
use crate::headers::ceil_ms;
use crate::text::{PromptDigest, hashed_id};
use crate::tools::{
    Answer, Asks, CallRef, Choice, Finish, Format, ResultRef, Said, ToolDef, Unpaired,
    add_to_prompt, last_turn, unpaired,
};

/// What an image costs: Claude's on Bedrock, width × height / 750 tokens, about 1,600 for the
/// largest image sent unscaled (the emulator does not read the image's size).
const IMAGE_TOKENS: u64 = 1_600;

const IMAGE_FORMATS: [&str; 4] = ["png", "jpeg", "gif", "webp"];

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ConverseBody {
    messages: Option<Vec<Message>>,
    system: Option<Vec<Map<String, Value>>>,
    inference_config: Option<InferenceConfig>,
    tool_config: Option<ToolConfig>,
    output_config: Option<OutputConfig>,
}

#[derive(Deserialize)]
struct Message {
    role: Option<String>,
    content: Option<Vec<Value>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InferenceConfig {
    max_tokens: Option<i64>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    stop_sequences: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolConfig {
    tools: Option<Vec<Map<String, Value>>>,
    tool_choice: Option<Map<String, Value>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OutputConfig {
    text_format: Option<TextFormat>,
}

#[derive(Deserialize)]
struct TextFormat {
    #[serde(rename = "type")]
    kind: Option<String>,
    structure: Option<Value>,
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::bad(message)
}

/// The service's message for one field that fails a constraint (`at` as the service writes
/// it: `inferenceConfig.maxTokens`, `messages.1.member.role`, 1-based).
fn constraint(value: impl std::fmt::Display, at: &str, what: &str) -> ApiError {
    invalid(format!(
        "1 validation error detected: Value '{value}' at '{at}' failed to satisfy constraint: \
         {what}"
    ))
}

/// A Converse request as the neutral one.
pub(super) fn chat_req(b: &ConverseBody, model: String, stream: bool) -> Result<ChatReq, ApiError> {
    let mut prompt = PromptDigest::default();
    for block in b.system.iter().flatten() {
        if let Some(t) = block.get("text").and_then(Value::as_str) {
            prompt.add(t);
        }
    }
    let max_tokens = read_inference(b.inference_config.as_ref())?;
    let (conv, image_tokens, uses_tools) = read_messages(b.messages.as_deref(), &mut prompt)?;
    let (tools, choice) = match &b.tool_config {
        Some(tc) => read_tools(tc)?,
        None if uses_tools => {
            return Err(invalid(
                "The toolConfig field must be defined when using toolUse and toolResult content \
                 blocks.",
            ));
        }
        None => (Vec::new(), Choice::Auto),
    };
    check_pairing(&conv)?;
    let asks = Asks {
        tools,
        choice,
        parallel: true,
        last: last_turn(&conv),
        format: read_format(b.output_config.as_ref())?,
        preamble: true,
    };
    add_to_prompt(&asks, &mut prompt);
    Ok(ChatReq {
        model,
        prompt,
        max_tokens,
        stream,
        sse: false,
        include_usage: true,
        asks,
        image_tokens,
        returned: [0, 0],
        thinking: false,
    })
}

fn read_inference(c: Option<&InferenceConfig>) -> Result<Option<u64>, ApiError> {
    let Some(c) = c else { return Ok(None) };
    if let Some(n) = c.max_tokens
        && n < 1
    {
        return Err(constraint(
            n,
            "inferenceConfig.maxTokens",
            "Member must have value greater than or equal to 1",
        ));
    }
    for (value, at) in [
        (c.temperature, "inferenceConfig.temperature"),
        (c.top_p, "inferenceConfig.topP"),
    ] {
        match value {
            Some(v) if v < 0.0 => {
                return Err(constraint(
                    v,
                    at,
                    "Member must have value greater than or equal to 0",
                ));
            }
            Some(v) if v > 1.0 => {
                return Err(constraint(
                    v,
                    at,
                    "Member must have value less than or equal to 1",
                ));
            }
            _ => {}
        }
    }
    if let Some(i) = c.stop_sequences.iter().flatten().position(String::is_empty) {
        return Err(constraint(
            "",
            &format!("inferenceConfig.stopSequences.{}.member", i + 1),
            "Member must have length greater than or equal to 1",
        ));
    }
    Ok(c.max_tokens.map(|n| n as u64))
}

/// The conversation as the answer reads it (text, calls and results into `prompt`), what its
/// images cost, and whether it holds tool blocks.
fn read_messages(
    messages: Option<&[Message]>,
    prompt: &mut PromptDigest,
) -> Result<(Vec<Said>, u64, bool), ApiError> {
    let messages = messages.unwrap_or_default();
    let starts_with_user = messages.first().and_then(|m| m.role.as_deref()) == Some("user");
    if !starts_with_user {
        // (An unknown role is named below, once the first message's role is one.)
        if let Some(role) = messages.first().and_then(|m| m.role.as_deref())
            && role != "assistant"
        {
            return Err(bad_role(role, 0));
        }
        return Err(invalid(
            "A conversation must start with a user message. Try again with a conversation that \
             starts with a user message.",
        ));
    }
    let (mut conv, mut images, mut uses_tools) = (Vec::with_capacity(messages.len()), 0, false);
    let mut previous: Option<&str> = None;
    for (i, m) in messages.iter().enumerate() {
        let role = match m.role.as_deref() {
            Some(r @ ("user" | "assistant")) => r,
            Some(other) => return Err(bad_role(other, i)),
            None => {
                return Err(constraint(
                    "null",
                    &format!("messages.{}.member.role", i + 1),
                    "Member must not be null",
                ));
            }
        };
        if previous == Some(role) {
            return Err(invalid(
                "A conversation must alternate between user and assistant roles. Make sure the \
                 conversation alternates between user and assistant roles and try again.",
            ));
        }
        previous = Some(role);
        let Some(content) = &m.content else {
            return Err(constraint(
                "null",
                &format!("messages.{}.member.content", i + 1),
                "Member must not be null",
            ));
        };
        let read = read_content(content, i, role == "assistant", prompt)?;
        images += read.images;
        uses_tools |= read.tools;
        conv.push(read.said);
    }
    Ok((conv, images, uses_tools))
}

fn bad_role(role: &str, i: usize) -> ApiError {
    constraint(
        role,
        &format!("messages.{}.member.role", i + 1),
        "Member must satisfy enum value set: [user, assistant]",
    )
}

/// One message read.
struct Read {
    said: Said,
    images: u64,
    tools: bool,
}

fn read_content(
    content: &[Value],
    i: usize,
    assistant: bool,
    prompt: &mut PromptDigest,
) -> Result<Read, ApiError> {
    let (mut text, mut calls, mut results, mut images) = (Vec::new(), Vec::new(), Vec::new(), 0);
    for (j, block) in content.iter().enumerate() {
        let at = format!("messages.{}.member.content.{}.member", i + 1, j + 1);
        let members: Vec<(&String, &Value)> = block
            .as_object()
            .map(|o| o.iter().filter(|(_, v)| !v.is_null()).collect())
            .unwrap_or_default();
        let &[(name, value)] = members.as_slice() else {
            return Err(invalid(format!(
                "1 validation error detected: Value at '{at}' failed to satisfy constraint: \
                 Member must have exactly one field set (a ContentBlock is a union)"
            )));
        };
        match name.as_str() {
            "text" => {
                let t = value.as_str().unwrap_or_default();
                prompt.add(t);
                text.push(t.to_owned());
            }
            "image" => {
                check_image(value, &at)?;
                images += IMAGE_TOKENS;
            }
            "toolUse" if !assistant => {
                return Err(invalid(format!(
                    "messages.{i}.content.{j}: toolUse blocks are only allowed in assistant \
                     messages."
                )));
            }
            "toolUse" => calls.push(read_call(value, &at, prompt)?),
            "toolResult" if assistant => {
                return Err(invalid(format!(
                    "messages.{i}.content.{j}: toolResult blocks are only allowed in user \
                     messages."
                )));
            }
            "toolResult" => {
                let Some(id) = value.get("toolUseId").and_then(Value::as_str) else {
                    return Err(constraint(
                        "null",
                        &format!("{at}.toolResult.toolUseId"),
                        "Member must not be null",
                    ));
                };
                let content = result_text(value.get("content"));
                prompt.add(&content);
                results.push(ResultRef {
                    id: Some(id.to_owned()),
                    name: None,
                    content,
                });
            }
            // Documents, video, audio, cache points, reasoning and the like: nothing the
            // answer reads.
            _ => {}
        }
    }
    let tools = !calls.is_empty() || !results.is_empty();
    let said = if assistant {
        Said::Assistant(calls)
    } else if !results.is_empty() {
        Said::Results(results)
    } else {
        Said::User(text.join("\n"))
    };
    Ok(Read {
        said,
        images,
        tools,
    })
}

fn check_image(image: &Value, at: &str) -> Result<(), ApiError> {
    let format = image
        .get("format")
        .and_then(Value::as_str)
        .unwrap_or("null");
    if !IMAGE_FORMATS.contains(&format) {
        return Err(constraint(
            format,
            &format!("{at}.image.format"),
            "Member must satisfy enum value set: [png, jpeg, gif, webp]",
        ));
    }
    let source = image.get("source");
    let bytes = source.and_then(|s| s.get("bytes")).and_then(Value::as_str);
    let s3 = source.and_then(|s| s.get("s3Location")).is_some();
    match bytes {
        Some(b) if !b.is_empty() => Ok(()),
        None if s3 => Ok(()),
        _ => Err(constraint(
            "",
            &format!("{at}.image.source.bytes"),
            "Member must have length greater than or equal to 1",
        )),
    }
}

fn read_call(v: &Value, at: &str, prompt: &mut PromptDigest) -> Result<CallRef, ApiError> {
    let field = |f: &str| {
        constraint(
            "null",
            &format!("{at}.toolUse.{f}"),
            "Member must not be null",
        )
    };
    let id = v
        .get("toolUseId")
        .and_then(Value::as_str)
        .ok_or_else(|| field("toolUseId"))?;
    let name = v
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| field("name"))?;
    let input = v.get("input").ok_or_else(|| field("input"))?;
    prompt.add(name);
    prompt.add(&input.to_string());
    Ok(CallRef {
        id: Some(id.to_owned()),
        name: name.to_owned(),
    })
}

/// A `toolResult`'s content as text: its `text` blocks, and its `json` blocks as JSON text.
fn result_text(content: Option<&Value>) -> String {
    content
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|b| match (b.get("text"), b.get("json")) {
            (Some(Value::String(t)), _) => Some(t.clone()),
            (_, Some(j)) => Some(j.to_string()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Calls and results pair up as Bedrock requires (its own messages, 0-based indices).
fn check_pairing(conv: &[Said]) -> Result<(), ApiError> {
    match unpaired(conv) {
        None => Ok(()),
        Some(Unpaired::Unanswered { at, ids }) => Err(invalid(format!(
            "Expected toolResult blocks at messages.{}.content for the following Ids: {}",
            at + 1,
            ids.join(", ")
        ))),
        Some(Unpaired::NoCalls { at }) => Err(invalid(format!(
            "The number of toolResult blocks at messages.{at}.content exceeds the number of \
             toolUse blocks of previous turn."
        ))),
        Some(Unpaired::Orphan { at, id }) => Err(invalid(format!(
            "The toolResult blocks at messages.{at}.content contain the Id {id}, which is not \
             one of the toolUse blocks of previous turn."
        ))),
    }
}

/// The tools with a `toolSpec` (cache points and system tools are nothing to call here) and
/// the tool choice.
fn read_tools(tc: &ToolConfig) -> Result<(Vec<ToolDef>, Choice), ApiError> {
    let tools = tc.tools.as_deref().unwrap_or_default();
    if tools.is_empty() {
        return Err(constraint(
            "[]",
            "toolConfig.tools",
            "Member must have length greater than or equal to 1",
        ));
    }
    let mut out = Vec::new();
    for (i, t) in tools.iter().enumerate() {
        let Some(spec) = t.get("toolSpec") else {
            continue;
        };
        let at = format!("toolConfig.tools.{}.member.toolSpec", i + 1);
        let Some(name) = spec.get("name").and_then(Value::as_str) else {
            return Err(constraint(
                "null",
                &format!("{at}.name"),
                "Member must not be null",
            ));
        };
        let name_ok = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !name_ok {
            return Err(constraint(
                name,
                &format!("{at}.name"),
                "Member must satisfy regular expression pattern: [a-zA-Z0-9_-]+",
            ));
        }
        let Some(schema) = spec.get("inputSchema").and_then(|s| s.get("json")) else {
            return Err(constraint(
                "null",
                &format!("{at}.inputSchema"),
                "Member must not be null",
            ));
        };
        out.push(ToolDef {
            name: name.to_owned(),
            description: spec
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            schema: schema.clone(),
        });
    }
    let choice = match &tc.tool_choice {
        None => Choice::Auto,
        Some(c) if c.contains_key("auto") => Choice::Auto,
        Some(c) if c.contains_key("any") => Choice::Any,
        Some(c) => match c
            .get("tool")
            .and_then(|t| t.get("name"))
            .and_then(Value::as_str)
        {
            Some(name) if out.iter().any(|t| t.name == name) => Choice::Named(name.to_owned()),
            Some(name) => {
                return Err(invalid(format!(
                    "The tool {name} in toolConfig.toolChoice is not one of the tools in \
                     toolConfig.tools."
                )));
            }
            None => {
                return Err(invalid(
                    "toolConfig.toolChoice must set exactly one of auto, any or tool (with a \
                     name).",
                ));
            }
        },
    };
    Ok((out, choice))
}

fn read_format(c: Option<&OutputConfig>) -> Result<Format, ApiError> {
    let Some(f) = c.and_then(|c| c.text_format.as_ref()) else {
        return Ok(Format::Text);
    };
    if f.kind.as_deref() != Some("json_schema") {
        return Err(constraint(
            f.kind.as_deref().unwrap_or("null"),
            "outputConfig.textFormat.type",
            "Member must satisfy enum value set: [json_schema]",
        ));
    }
    let schema = f
        .structure
        .as_ref()
        .and_then(|s| s.get("jsonSchema"))
        .and_then(|j| j.get("schema"))
        .and_then(Value::as_str);
    let Some(schema) = schema else {
        return Err(constraint(
            "null",
            "outputConfig.textFormat.structure.jsonSchema.schema",
            "Member must not be null",
        ));
    };
    serde_json::from_str(schema)
        .map(Format::Schema)
        .map_err(|e| {
            invalid(format!(
                "outputConfig.textFormat.structure.jsonSchema.schema is not valid JSON: {e}"
            ))
        })
}

fn stop_reason(a: &Answer) -> &'static str {
    match a.finish() {
        Finish::Stop => "end_turn",
        Finish::Length => "max_tokens",
        Finish::ToolCalls => "tool_use",
    }
}

/// A call's id: `tooluse_` and 22 characters, from the call's hash.
fn call_id(key: u64) -> String {
    hashed_id("tooluse_", 22, key)
}

/// Whether the answer has a text block: always without calls; with them, only a preamble.
fn has_text(a: &Answer) -> bool {
    a.calls.is_empty() || !a.text.text.is_empty()
}

fn usage_body(usage: Usage) -> Value {
    json!({
        "inputTokens": usage.input,
        "outputTokens": usage.output,
        "totalTokens": usage.input + usage.output,
    })
}

/// The whole answer.
pub(super) fn response(a: &Answer, usage: Usage, latency: Duration) -> Value {
    let mut content = Vec::new();
    if has_text(a) {
        content.push(json!({"text": a.text.text}));
    }
    for c in &a.calls {
        content.push(json!({"toolUse": {
            "toolUseId": call_id(c.key), "name": c.name, "input": c.arguments,
        }}));
    }
    json!({
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop_reason(a),
        "usage": usage_body(usage),
        "metrics": {"latencyMs": ceil_ms(latency)},
    })
}

/// The stream's events, in order, as (`:event-type`, payload).
pub(super) fn stream_events(
    a: &Answer,
    usage: Usage,
    latency: Duration,
) -> Vec<(&'static str, Value)> {
    let delta = |index: usize, delta: Value| {
        (
            "contentBlockDelta",
            json!({"contentBlockIndex": index, "delta": delta}),
        )
    };
    let stop = |index: usize| ("contentBlockStop", json!({"contentBlockIndex": index}));
    let mut events = vec![("messageStart", json!({"role": "assistant"}))];
    let mut index = 0;
    if has_text(a) {
        let deltas = a.deltas();
        if deltas.is_empty() {
            events.push(delta(0, json!({"text": ""})));
        }
        for d in deltas {
            events.push(delta(0, json!({"text": d})));
        }
        events.push(stop(0));
        index = 1;
    }
    for c in &a.calls {
        events.push((
            "contentBlockStart",
            json!({"contentBlockIndex": index,
                   "start": {"toolUse": {"toolUseId": call_id(c.key), "name": c.name}}}),
        ));
        let args = c.arguments_text();
        let size = args.chars().count().div_ceil(2).clamp(1, 10);
        for piece in crate::text::pieces(&args, size) {
            events.push(delta(index, json!({"toolUse": {"input": piece}})));
        }
        events.push(stop(index));
        index += 1;
    }
    events.push(("messageStop", json!({"stopReason": stop_reason(a)})));
    events.push((
        "metadata",
        json!({"usage": usage_body(usage), "metrics": {"latencyMs": ceil_ms(latency)}}),
    ));
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::answer;

    fn body(v: Value) -> ConverseBody {
        serde_json::from_value(v).unwrap()
    }

    fn req(v: Value) -> Result<ChatReq, ApiError> {
        chat_req(&body(v), "m".into(), false)
    }

    fn message(e: ApiError) -> String {
        match e {
            ApiError::BadRequest { message, .. } => message,
            other => panic!("{other:?}"),
        }
    }

    const WEATHER_TOOL: &str = r#"{"toolSpec": {"name": "get_weather",
        "description": "The current weather in a city.",
        "inputSchema": {"json": {"type": "object", "properties": {"city": {"type": "string"}},
                                 "required": ["city"]}}}}"#;

    fn weather_tool() -> Value {
        serde_json::from_str(WEATHER_TOOL).unwrap()
    }

    #[test]
    fn a_text_conversation_is_answered_with_its_usage() {
        let r = req(json!({
            "system": [{"text": "Be brief."}],
            "messages": [{"role": "user", "content": [{"text": "Say hello"}]}],
            "inferenceConfig": {"maxTokens": 50, "temperature": 0.5},
        }))
        .unwrap();
        assert_eq!(r.max_tokens, Some(50));
        let a = answer(&r.asks, r.prompt.seed, 50);
        let usage = Usage {
            input: r.input_tokens(),
            output: a.tokens(),
            cached: 0,
        };
        let v = response(&a, usage, Duration::from_millis(12));
        assert_eq!(v["output"]["message"]["role"], "assistant");
        assert_eq!(v["stopReason"], "end_turn");
        assert_eq!(v["metrics"]["latencyMs"], 12);
        assert_eq!(
            v["usage"]["totalTokens"].as_u64(),
            Some(usage.input + usage.output)
        );
        assert!(v["output"]["message"]["content"][0]["text"].is_string());
    }

    #[test]
    fn tools_are_called_and_their_results_quoted() {
        let ask = json!({
            "messages": [{"role": "user", "content": [{"text": "What's the weather in Paris?"}]}],
            "toolConfig": {"tools": [weather_tool()], "toolChoice": {"any": {}}},
        });
        let r = req(ask.clone()).unwrap();
        let a = answer(&r.asks, r.prompt.seed, 100);
        let v = response(
            &a,
            Usage {
                input: 1,
                output: 1,
                cached: 0,
            },
            Duration::ZERO,
        );
        let call = &v["output"]["message"]["content"][0]["toolUse"];
        assert_eq!(call["name"], "get_weather");
        assert_eq!(call["input"], json!({"city": "Paris"}));
        assert!(call["toolUseId"].as_str().unwrap().starts_with("tooluse_"));
        assert_eq!(v["stopReason"], "tool_use");

        let mut round = ask;
        round["messages"].as_array_mut().unwrap().extend([
            json!({"role": "assistant", "content": [{"toolUse": call}]}),
            json!({"role": "user", "content": [{"toolResult": {
                "toolUseId": call["toolUseId"], "content": [{"text": "18 C"}], "status": "success",
            }}]}),
        ]);
        let r = req(round).unwrap();
        let a = answer(&r.asks, r.prompt.seed, 100);
        assert_eq!(a.text.text, "The tool get_weather returned: 18 C");
    }

    #[test]
    fn a_json_schema_text_format_gets_json_of_the_schema() {
        let r = req(json!({
            "messages": [{"role": "user", "content": [{"text": "Describe Paris"}]}],
            "outputConfig": {"textFormat": {"type": "json_schema", "structure": {"jsonSchema": {
                "name": "report",
                "schema": r#"{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}"#,
            }}}},
        }))
        .unwrap();
        let a = answer(&r.asks, r.prompt.seed, 100);
        let v: Value = serde_json::from_str(&a.text.text).unwrap();
        assert_eq!(v["city"], "Paris");
    }

    #[test]
    fn images_count_and_bad_ones_are_refused() {
        let with = |format: &str, bytes: &str| {
            json!({"messages": [{"role": "user", "content": [
                {"image": {"format": format, "source": {"bytes": bytes}}}, {"text": "What is it?"},
            ]}]})
        };
        let r = req(with("png", "iVBORw0KGgo=")).unwrap();
        assert_eq!(r.image_tokens, IMAGE_TOKENS);
        assert!(message(req(with("bmp", "AA==")).unwrap_err()).contains("[png, jpeg, gif, webp]"));
        assert!(message(req(with("png", "")).unwrap_err()).contains("image.source.bytes"));
    }

    #[test]
    fn refuses_conversations_bedrock_refuses() {
        let cases = [
            (json!({"messages": []}), "must start with a user message"),
            (
                json!({"messages": [{"role": "assistant", "content": [{"text": "x"}]}]}),
                "must start with a user message",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"text": "a"}]},
                                    {"role": "user", "content": [{"text": "b"}]}]}),
                "must alternate between user and assistant",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"text": "a", "image": {}}]}]}),
                "exactly one field set",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"text": "a"}]},
                    {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t1",
                        "name": "get_weather", "input": {}}}]}],
                       "toolConfig": {"tools": [weather_tool()]}}),
                "Expected toolResult blocks at messages.2.content for the following Ids: t1",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"text": "a"}]},
                    {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t1",
                        "name": "get_weather", "input": {}}}]}]}),
                "The toolConfig field must be defined",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"text": "a"}]}],
                       "inferenceConfig": {"maxTokens": 0}}),
                "Value '0' at 'inferenceConfig.maxTokens' failed to satisfy constraint",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"text": "a"}]}],
                       "inferenceConfig": {"temperature": 1.5}}),
                "less than or equal to 1",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"text": "a"}]}],
                       "toolConfig": {"tools": []}}),
                "at 'toolConfig.tools'",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"text": "a"}]}],
                       "toolConfig": {"tools": [weather_tool()],
                                      "toolChoice": {"tool": {"name": "nope"}}}}),
                "The tool nope",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"text": "a"}]}],
                       "outputConfig": {"textFormat": {"type": "json_schema",
                           "structure": {"jsonSchema": {"schema": "{nope"}}}}}),
                "is not valid JSON",
            ),
        ];
        for (v, want) in cases {
            let got = message(req(v.clone()).unwrap_err());
            assert!(got.contains(want), "{v} → {got}");
        }
    }

    #[test]
    fn a_stream_has_the_documented_events_in_order() {
        let r = req(json!({
            "messages": [{"role": "user", "content": [{"text": "What's the weather in Paris?"}]}],
            "toolConfig": {"tools": [weather_tool()]},
        }))
        .unwrap();
        let a = answer(&r.asks, r.prompt.seed, 100);
        let events = stream_events(
            &a,
            Usage {
                input: 3,
                output: 4,
                cached: 0,
            },
            Duration::ZERO,
        );
        let kinds: Vec<&str> = events.iter().map(|(k, _)| *k).collect();
        assert_eq!(kinds[0], "messageStart");
        assert_eq!(&kinds[kinds.len() - 2..], ["messageStop", "metadata"]);
        // The preamble text block (index 0, no start event), then the call (index 1).
        let start = kinds
            .iter()
            .position(|k| *k == "contentBlockStart")
            .unwrap();
        assert_eq!(events[start].1["contentBlockIndex"], 1);
        assert_eq!(events[start].1["start"]["toolUse"]["name"], "get_weather");
        let input: String = events
            .iter()
            .filter_map(|(_, v)| v["delta"]["toolUse"]["input"].as_str())
            .collect();
        assert_eq!(
            serde_json::from_str::<Value>(&input).unwrap(),
            json!({"city": "Paris"})
        );
        assert_eq!(events[events.len() - 1].1["usage"]["totalTokens"], 7);
        assert_eq!(events[events.len() - 2].1["stopReason"], "tool_use");
    }
}
