//! The Converse request and answer bodies
//! (<https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html>).
//!
//! Request: `messages` of `{role: user|assistant, content: [ContentBlock]}` (blocks `text`,
//! `image: {format, source: {bytes}}`, `toolUse: {toolUseId, name, input}`,
//! `toolResult: {toolUseId, content: [{text}]}`), `system: [{text}]`,
//! `inferenceConfig: {maxTokens, temperature, stopSequences}`,
//! `toolConfig: {tools: [{toolSpec: {name, description, inputSchema: {json}}}], toolChoice:
//! {auto: {}} | {any: {}} | {tool: {name}}}` and, for a structured answer,
//! `outputConfig: {textFormat: {type: "json_schema", structure: {jsonSchema: {schema: "<JSON
//! text>", name}}}}` (…/API_runtime_OutputConfig.html). Answer:
//! `{output: {message: {role, content}}, stopReason, usage: {inputTokens, outputTokens,
//! totalTokens}, metrics: {latencyMs}}`.

use llm_failover_core::types::{Image, ResponseFormat, Role, ToolChoice};
use llm_failover_core::{
    ChatRequest, ChatResponse, Error, ErrorKind, FinishReason, ProviderId, Result, ToolCall, Usage,
};
use serde_json::{Map, Value, json};

/// The image formats Converse takes (`ImageBlock.format`), by MIME type.
const IMAGE_FORMATS: [(&str, &str); 4] = [
    ("image/png", "png"),
    ("image/jpeg", "jpeg"),
    ("image/gif", "gif"),
    ("image/webp", "webp"),
];

fn unsupported(what: String) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!("bedrock cannot carry {what}"),
    )
}

/// What Converse cannot carry, refused before anything is sent (the router asks another
/// provider).
pub(crate) fn check(req: &ChatRequest) -> Result<()> {
    for (i, m) in req.messages.iter().enumerate() {
        for image in &m.images {
            if m.role != Role::User {
                return Err(unsupported(format!(
                    "messages[{i}].images: Converse takes images in user messages only"
                )));
            }
            image_block(image)
                .map_err(|why| unsupported(format!("messages[{i}].images: {why}")))?;
        }
        if m.role == Role::Tool && m.tool_call_id.is_none() {
            return Err(Error::new(
                ErrorKind::InvalidRequest,
                format!("messages[{i}]: a tool result without tool_call_id"),
            ));
        }
    }
    check_results_follow_calls(req)?;
    if let Some(t) = req
        .temperature
        .filter(|t| t.is_finite() && !(0.0..=1.0).contains(t))
    {
        return Err(unsupported(format!(
            "temperature {t}: inferenceConfig.temperature takes 0.0 to 1.0"
        )));
    }
    let has_tool_blocks = req
        .messages
        .iter()
        .any(|m| m.role == Role::Tool || !m.tool_calls.is_empty());
    if has_tool_blocks && req.tools.is_empty() {
        return Err(unsupported(
            "tool calls or results in the conversation without tools: Converse needs a \
             toolConfig with them (pass the tools along)"
                .to_owned(),
        ));
    }
    match &req.tool_choice {
        Some(ToolChoice::None) if has_tool_blocks => Err(unsupported(
            "tool_choice `none` in a conversation with tool calls: toolConfig.toolChoice has \
             no `none`, and the tools must be sent with the calls"
                .to_owned(),
        )),
        Some(ToolChoice::Tool(name)) if !req.tools.iter().any(|t| &t.name == name) => {
            Err(Error::new(
                ErrorKind::InvalidRequest,
                format!("tool_choice names `{name}`, which is not one of the request's tools"),
            ))
        }
        _ => Ok(()),
    }
}

/// Each assistant turn's calls answered by tool results right after it, and every result
/// right after the call it answers: Converse refuses "Expected toolResult blocks at
/// messages.2.content for the following Ids: …" otherwise. Refused before sending, so a
/// conversation begun at a provider that allows it goes to another.
fn check_results_follow_calls(req: &ChatRequest) -> Result<()> {
    let turns: Vec<(usize, &llm_failover_core::Message)> = req
        .messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role != Role::System)
        .collect();
    let mut k = 0;
    while k < turns.len() {
        let (i, m) = turns[k];
        k += 1;
        if m.role == Role::Tool {
            return Err(unsupported(format!(
                "messages[{i}]: a tool result that does not follow the assistant turn with its \
                 call (Converse wants the toolResult in the message right after the toolUse)"
            )));
        }
        if m.role != Role::Assistant || m.tool_calls.is_empty() {
            continue;
        }
        let mut answered = Vec::new();
        while let Some((_, r)) = turns.get(k).filter(|(_, r)| r.role == Role::Tool) {
            answered.push(tool_use_id(r.tool_call_id.as_deref().unwrap_or_default()));
            k += 1;
        }
        if let Some(call) = m
            .tool_calls
            .iter()
            .find(|c| !answered.contains(&tool_use_id(&c.id)))
        {
            return Err(unsupported(format!(
                "messages[{i}]: the call `{}` without its tool result in the message right \
                 after it (Converse wants a toolResult for each toolUse there)",
                call.name
            )));
        }
        if let Some(extra) = answered
            .iter()
            .find(|id| !m.tool_calls.iter().any(|c| tool_use_id(&c.id) == **id))
        {
            return Err(unsupported(format!(
                "messages[{i}]: a tool result for `{extra}`, which that turn did not call"
            )));
        }
    }
    Ok(())
}

/// An image as a Converse `image` block, or why it cannot be one.
fn image_block(image: &Image) -> std::result::Result<Value, String> {
    match image {
        Image::Base64 { media_type, data } => {
            let format = IMAGE_FORMATS
                .iter()
                .find(|(mime, _)| mime.eq_ignore_ascii_case(media_type))
                .map(|(_, f)| *f)
                .ok_or_else(|| {
                    format!("an image of type `{media_type}` (png, jpeg, gif, webp only)")
                })?;
            Ok(json!({ "image": { "format": format, "source": { "bytes": data } } }))
        }
        Image::Url { .. } => {
            Err("an image by URL: Converse takes the image's bytes (or an S3 location)".to_owned())
        }
        _ => Err("an image of a kind it does not know".to_owned()),
    }
}

/// A call id in Converse's pattern (`[a-zA-Z0-9_-]+`, 1 to 64 characters): others become `_`,
/// the same on the call and its result, so a conversation begun elsewhere goes on here.
fn tool_use_id(id: &str) -> String {
    let mut out: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if out.is_empty() {
        out.push('_');
    }
    out
}

/// The request body (without `modelId`: it is in the path).
pub(crate) fn request_body(req: &ChatRequest) -> Result<Value> {
    check(req)?;
    let mut body = Map::new();
    let system: Vec<Value> = req
        .messages
        .iter()
        .filter(|m| m.role == Role::System && !m.content.is_empty())
        .map(|m| json!({ "text": m.content }))
        .collect();
    let mut messages: Vec<(&str, Vec<Value>)> = Vec::new();
    for m in req.messages.iter().filter(|m| m.role != Role::System) {
        let mut blocks = Vec::new();
        let role = match m.role {
            Role::Assistant => {
                if !m.content.trim().is_empty() {
                    blocks.push(json!({ "text": m.content }));
                }
                for call in &m.tool_calls {
                    blocks.push(json!({ "toolUse": {
                        "toolUseId": tool_use_id(&call.id),
                        "name": call.name,
                        "input": call.arguments,
                    }}));
                }
                "assistant"
            }
            Role::Tool => {
                let id = m.tool_call_id.as_deref().unwrap_or_default();
                blocks.push(json!({ "toolResult": {
                    "toolUseId": tool_use_id(id),
                    "content": [{ "text": m.content }],
                }}));
                "user"
            }
            _ => {
                for image in &m.images {
                    blocks.push(image_block(image).map_err(unsupported)?);
                }
                if !m.content.trim().is_empty() {
                    blocks.push(json!({ "text": m.content }));
                }
                "user"
            }
        };
        // Converse wants the roles to alternate: a role repeated joins the message before.
        match messages.last_mut() {
            Some((last, content)) if *last == role => content.extend(blocks),
            _ => messages.push((role, blocks)),
        }
    }
    // "The content field in the Message object at messages.N is empty" and "The text field
    // in the ContentBlock object … is blank" are Converse's ValidationExceptions: a turn with
    // no text (or only whitespace), image or call is left out of a text block and refused
    // here, naming it, so the router asks a provider that takes it.
    if let Some(n) = messages.iter().position(|(_, content)| content.is_empty()) {
        return Err(unsupported(format!(
            "messages.{n} (after system messages are lifted and runs of one role joined) has \
             no content: Converse refuses an empty or blank turn"
        )));
    }
    body.insert(
        "messages".into(),
        messages
            .into_iter()
            .map(|(role, content)| json!({ "role": role, "content": content }))
            .collect(),
    );
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }
    let mut inference = Map::new();
    if let Some(n) = req.max_tokens {
        inference.insert("maxTokens".into(), n.into());
    }
    if let Some(t) = req.temperature {
        let t = serde_json::Number::from_f64(f64::from(t)).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidRequest,
                format!("temperature {t} is not a number"),
            )
        })?;
        inference.insert("temperature".into(), Value::Number(t));
    }
    if !req.stop.is_empty() {
        inference.insert("stopSequences".into(), json!(req.stop));
    }
    if !inference.is_empty() {
        body.insert("inferenceConfig".into(), Value::Object(inference));
    }
    let choice = match &req.tool_choice {
        None | Some(ToolChoice::Auto) => Some(json!({ "auto": {} })),
        Some(ToolChoice::Required) => Some(json!({ "any": {} })),
        Some(ToolChoice::Tool(name)) => Some(json!({ "tool": { "name": name } })),
        Some(ToolChoice::None) => None,
        Some(_) => Some(json!({ "auto": {} })),
    };
    if !req.tools.is_empty() && (choice.is_some() || req.tool_choice.is_none()) {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                let mut spec = json!({ "name": t.name, "inputSchema": { "json": t.parameters } });
                if let Some(d) = &t.description {
                    spec["description"] = json!(d);
                }
                json!({ "toolSpec": spec })
            })
            .collect();
        let mut config = json!({ "tools": tools });
        if let (Some(choice), Some(_)) = (choice, &req.tool_choice) {
            config["toolChoice"] = choice;
        }
        body.insert("toolConfig".into(), config);
    }
    let schema = match &req.response_format {
        ResponseFormat::JsonSchema { name, schema } => Some((name.as_str(), schema.clone())),
        ResponseFormat::JsonObject => Some(("json_object", json!({ "type": "object" }))),
        _ => None,
    };
    if let Some((name, schema)) = schema {
        body.insert(
            "outputConfig".into(),
            json!({ "textFormat": { "type": "json_schema", "structure": { "jsonSchema": {
                "schema": schema.to_string(),
                "name": name,
            }}}}),
        );
    }
    Ok(Value::Object(body))
}

/// A `stopReason` as a finish reason (`StopReason` in the API reference).
pub(crate) fn finish_reason(stop: &str) -> FinishReason {
    match stop {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "tool_use" => FinishReason::ToolCalls,
        "guardrail_intervened" | "content_filtered" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}

/// `usage` (`TokenUsage`) as a [`Usage`]: the prompt's full size as input — `inputTokens`
/// counts the tokens read from and written to the prompt cache apart, in
/// `cacheReadInputTokens` and `cacheWriteInputTokens`
/// (<https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_TokenUsage.html>,
/// <https://docs.aws.amazon.com/bedrock/latest/userguide/prompt-caching.html>) — and the cache
/// reads as its cached part.
pub(crate) fn usage(v: &Value) -> Option<Usage> {
    let n = |k: &str| v.get(k).and_then(Value::as_u64);
    let (read, write) = (
        n("cacheReadInputTokens").unwrap_or(0),
        n("cacheWriteInputTokens").unwrap_or(0),
    );
    let input = n("inputTokens")?.saturating_add(read).saturating_add(write);
    Some(Usage::new(input, n("outputTokens")?).with_cached_input(read))
}

fn decode_error(what: &str) -> Error {
    Error::new(
        ErrorKind::Decode,
        format!("bedrock: the Converse answer {what}"),
    )
}

/// A Converse answer.
pub(crate) fn parse_response(id: &ProviderId, body: &[u8], model: &str) -> Result<ChatResponse> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| decode_error(&format!("is not JSON: {e}")))?;
    let content = v
        .pointer("/output/message/content")
        .and_then(Value::as_array)
        .ok_or_else(|| decode_error("has no output.message.content"))?;
    let mut text = String::new();
    let mut calls = Vec::new();
    for block in content {
        if let Some(t) = block.get("text").and_then(Value::as_str) {
            text.push_str(t);
        } else if let Some(call) = block.get("toolUse") {
            let field = |k: &str| call.get(k).and_then(Value::as_str);
            let (Some(call_id), Some(name)) = (field("toolUseId"), field("name")) else {
                return Err(decode_error("has a toolUse without toolUseId or name"));
            };
            let input = call.get("input").cloned().unwrap_or_else(|| json!({}));
            calls.push(ToolCall::new(call_id, name, input));
        }
    }
    let mut resp = ChatResponse::new(id.clone(), model, text);
    resp.finish_reason = v
        .get("stopReason")
        .and_then(Value::as_str)
        .map(finish_reason);
    resp.usage = v.get("usage").and_then(usage);
    resp.tool_calls = calls;
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use llm_failover_core::types::{Message, Tool};

    use super::*;

    /// The request of the Converse reference's shape: system, roles, images, tools, results
    /// (https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html#API_runtime_Converse_RequestSyntax,
    /// …/API_runtime_ImageBlock.html, …/API_runtime_ToolUseBlock.html, …/API_runtime_ToolResultBlock.html).
    #[test]
    fn builds_the_converse_body() {
        let weather = Tool::new(
            "get_weather",
            json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        )
        .description("Weather of a city");
        let req = ChatRequest::new()
            .system("Be brief.")
            .message(
                Message::user("What is this?").image(Image::base64("image/png", "iVBORw0KGgo=")),
            )
            .message(Message::assistant_calls(
                "Let me look.",
                vec![ToolCall::new(
                    "call.1",
                    "get_weather",
                    json!({"city": "Paris"}),
                )],
            ))
            .message(Message::tool_result("call.1", "18 C"))
            .user("And tomorrow?")
            .max_tokens(100)
            .temperature(0.5)
            .stop("END")
            .tool(weather)
            .tool_choice(ToolChoice::Required);
        let body = request_body(&req).unwrap();
        assert_eq!(
            body,
            json!({
                "system": [{"text": "Be brief."}],
                "messages": [
                    {"role": "user", "content": [
                        {"image": {"format": "png", "source": {"bytes": "iVBORw0KGgo="}}},
                        {"text": "What is this?"},
                    ]},
                    {"role": "assistant", "content": [
                        {"text": "Let me look."},
                        {"toolUse": {"toolUseId": "call_1", "name": "get_weather", "input": {"city": "Paris"}}},
                    ]},
                    {"role": "user", "content": [
                        {"toolResult": {"toolUseId": "call_1", "content": [{"text": "18 C"}]}},
                        {"text": "And tomorrow?"},
                    ]},
                ],
                "inferenceConfig": {"maxTokens": 100, "temperature": 0.5, "stopSequences": ["END"]},
                "toolConfig": {
                    "tools": [{"toolSpec": {
                        "name": "get_weather",
                        "description": "Weather of a city",
                        "inputSchema": {"json": {"type": "object", "properties": {"city": {"type": "string"}}}},
                    }}],
                    "toolChoice": {"any": {}},
                },
            })
        );
    }

    /// Tool choices and structured answers.
    #[test]
    fn tool_choices_and_output_config() {
        let tool = || Tool::new("f", json!({"type": "object"}));
        let table = [
            (None, Some(None)),
            (Some(ToolChoice::Auto), Some(Some(json!({"auto": {}})))),
            (Some(ToolChoice::Required), Some(Some(json!({"any": {}})))),
            (
                Some(ToolChoice::named("f")),
                Some(Some(json!({"tool": {"name": "f"}}))),
            ),
            (Some(ToolChoice::None), None),
        ];
        for (choice, expected) in table {
            let mut req = ChatRequest::from_prompt("Hi").tool(tool());
            req.tool_choice = choice.clone();
            let body = request_body(&req).unwrap();
            let got = body.get("toolConfig").map(|c| c.get("toolChoice").cloned());
            assert_eq!(got, expected, "{choice:?}");
        }
        let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        let req = ChatRequest::from_prompt("Hi").response_format(ResponseFormat::JsonSchema {
            name: "answer".into(),
            schema: schema.clone(),
        });
        let body = request_body(&req).unwrap();
        let def = &body["outputConfig"]["textFormat"];
        assert_eq!(def["type"], "json_schema");
        assert_eq!(def["structure"]["jsonSchema"]["name"], "answer");
        let text = def["structure"]["jsonSchema"]["schema"].as_str().unwrap();
        assert_eq!(serde_json::from_str::<Value>(text).unwrap(), schema);
    }

    /// What Converse cannot carry is refused, naming the field.
    #[test]
    fn refuses_what_converse_cannot_carry() {
        let calls = Message::assistant_calls("", vec![ToolCall::new("c", "f", json!({}))]);
        let table: [(ChatRequest, ErrorKind, &str); 9] = [
            (
                ChatRequest::from_prompt("x")
                    .message(calls.clone())
                    .user("never mind")
                    .tool(Tool::new("f", json!({}))),
                ErrorKind::Unsupported,
                "without its tool result",
            ),
            (
                ChatRequest::from_prompt("x")
                    .message(Message::tool_result("c", "r"))
                    .tool(Tool::new("f", json!({}))),
                ErrorKind::Unsupported,
                "does not follow",
            ),
            (
                ChatRequest::from_prompt("x")
                    .message(calls.clone())
                    .message(Message::tool_result("c", "r"))
                    .message(Message::tool_result("d", "r"))
                    .tool(Tool::new("f", json!({}))),
                ErrorKind::Unsupported,
                "did not call",
            ),
            (
                ChatRequest::new().message(Message::user("x").image(Image::url("https://x/y.png"))),
                ErrorKind::Unsupported,
                "messages[0].images",
            ),
            (
                ChatRequest::new()
                    .message(Message::user("x").image(Image::base64("image/bmp", "AA=="))),
                ErrorKind::Unsupported,
                "image/bmp",
            ),
            (
                ChatRequest::from_prompt("x").temperature(1.5),
                ErrorKind::Unsupported,
                "temperature",
            ),
            (
                ChatRequest::from_prompt("x")
                    .message(calls.clone())
                    .message(Message::tool_result("c", "r")),
                ErrorKind::Unsupported,
                "toolConfig",
            ),
            (
                ChatRequest::from_prompt("x")
                    .message(calls)
                    .message(Message::tool_result("c", "r"))
                    .tool(Tool::new("f", json!({})))
                    .tool_choice(ToolChoice::None),
                ErrorKind::Unsupported,
                "tool_choice",
            ),
            (
                ChatRequest::from_prompt("x")
                    .tool(Tool::new("f", json!({})))
                    .tool_choice(ToolChoice::named("g")),
                ErrorKind::InvalidRequest,
                "tool_choice",
            ),
        ];
        for (req, kind, says) in table {
            let err = check(&req).unwrap_err();
            assert_eq!(err.kind(), kind, "{err}");
            assert!(err.message().contains(says), "{err}");
        }
    }

    /// An answer with text and a call, and each stop reason.
    #[test]
    fn an_empty_or_blank_turn_is_refused_naming_it() {
        for req in [
            ChatRequest::new().user("hi").assistant("").user("again"),
            ChatRequest::new().user("  \n"),
        ] {
            let err = request_body(&req).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
            assert!(err.to_string().contains("no content"), "{err}");
        }
        // A blank text beside a call is left out, the call kept.
        let call = llm_failover_core::ToolCall::new("c1", "f", json!({}));
        let req = ChatRequest::new()
            .user("hi")
            .tool(Tool::new("f", json!({"type": "object"})))
            .message(Message::assistant_calls(" ", vec![call]))
            .message(Message::tool_result("c1", "ok"));
        let body = request_body(&req).unwrap();
        assert_eq!(body["messages"][1]["content"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn parses_answers_and_stop_reasons() {
        // The Converse reference's response syntax:
        // https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html#API_runtime_Converse_ResponseSyntax
        let body = br#"{"output":{"message":{"role":"assistant","content":[
            {"text":"I will call get_weather."},
            {"toolUse":{"toolUseId":"tooluse_abc","name":"get_weather","input":{"city":"Paris"}}}]}},
            "stopReason":"tool_use","usage":{"inputTokens":30,"outputTokens":12,"totalTokens":42},
            "metrics":{"latencyMs":0}}"#;
        let r = parse_response(&ProviderId::new("b"), body, "m").unwrap();
        assert_eq!(r.text, "I will call get_weather.");
        assert_eq!(r.finish_reason, Some(FinishReason::ToolCalls));
        assert_eq!(r.usage.map(|u| u.total()), Some(42));
        assert_eq!(r.tool_calls[0].id, "tooluse_abc");
        assert_eq!(r.tool_calls[0].arguments, json!({"city": "Paris"}));
        let table = [
            ("end_turn", FinishReason::Stop),
            ("stop_sequence", FinishReason::Stop),
            ("max_tokens", FinishReason::Length),
            ("tool_use", FinishReason::ToolCalls),
            ("guardrail_intervened", FinishReason::ContentFilter),
            ("content_filtered", FinishReason::ContentFilter),
            (
                "malformed_tool_use",
                FinishReason::Other("malformed_tool_use".into()),
            ),
        ];
        for (stop, reason) in table {
            assert_eq!(finish_reason(stop), reason);
        }
        let err = parse_response(&ProviderId::new("b"), b"{}", "m").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Decode);
    }

    #[test]
    fn cache_reads_and_writes_are_part_of_the_input_and_reads_its_cached_part() {
        // TokenUsage with prompt caching: `inputTokens` leaves the cache reads and writes out
        // (https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_TokenUsage.html).
        let v = json!({"inputTokens": 20, "outputTokens": 7, "totalTokens": 1_327,
            "cacheReadInputTokens": 1_200, "cacheWriteInputTokens": 100});
        let u = usage(&v).unwrap();
        assert_eq!((u.input_tokens, u.output_tokens), (1_320, 7));
        assert_eq!((u.cached_input_tokens, u.uncached_input()), (1_200, 120));
        assert_eq!(u.total(), 1_327, "the total the provider states");
        let plain = usage(&json!({"inputTokens": 5, "outputTokens": 1})).unwrap();
        assert_eq!(plain, Usage::new(5, 1));
    }
}
