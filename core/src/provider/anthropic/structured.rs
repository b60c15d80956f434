//! Structured answers: Anthropic has no `response_format`; its documented way to a JSON
//! answer is a tool the model is made to call ("JSON mode" in
//! <https://docs.claude.com/en/docs/agents-and-tools/tool-use/overview>: a single tool,
//! `tool_choice` forcing it, the tool's `input` as the answer).
//!
//! - [`ResponseFormat::JsonSchema`] with an object schema → the only tool is the *answer
//!   tool*, `input_schema` = the schema, forced with `{"type":"tool","name",
//!   "disable_parallel_tool_use":true}` (exactly one call).
//! - [`ResponseFormat::JsonObject`] → the same with `{"type":"object"}`: a tool's input is
//!   always a JSON object, which is what `JsonObject` promises — an instruction in the system
//!   prompt only asks for one (and a model may still wrap it in prose or Markdown fences).
//! - The answer tool's `input` becomes [`ChatResponse::text`](crate::ChatResponse::text)
//!   (serialised JSON; streamed: its `partial_json` pieces as the text), with finish reason
//!   `Stop`: it is not a call of the caller's.
//!
//! Forcing a tool is not possible, so the format falls back to a system-prompt instruction
//! (the schema spelled out), when the request has tools of its own (their `tool_choice`
//! stands), when extended thinking is on in the extra body (Anthropic refuses forced tool use
//! with thinking), or when the schema's root is not an object (a tool's `input_schema` must
//! be).
//!
//! The answer tool is told apart from the caller's by its name, `json_answer` or
//! `json_answer-<schema name>` (a response does not carry its request): a caller's tool of
//! such a name is refused before sending.
//!
//! [`ResponseFormat::JsonSchema`]: crate::types::ResponseFormat::JsonSchema
//! [`ResponseFormat::JsonObject`]: crate::types::ResponseFormat::JsonObject

use std::borrow::Cow;

use serde::Serialize;
use serde_json::Value;

use crate::error::{Error, ErrorKind, Result};
use crate::provider::RequestContext;
use crate::provider::tools::{MAX_TOOL_NAME, portable_id};
use crate::types::{ChatRequest, ResponseFormat, Tool};

/// A tool definition: `{"name", "description", "input_schema"}`.
#[derive(Debug, Serialize)]
pub(super) struct WireTool<'a> {
    pub(super) name: Cow<'a, str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) description: Option<Cow<'a, str>>,
    pub(super) input_schema: Cow<'a, serde_json::Value>,
}

impl<'a> From<&'a Tool> for WireTool<'a> {
    fn from(t: &'a Tool) -> Self {
        WireTool {
            name: Cow::Borrowed(&t.name),
            description: t.description.as_deref().map(Cow::Borrowed),
            input_schema: Cow::Borrowed(&t.parameters),
        }
    }
}

/// The answer tool's name (for a schema named `x`: `json_answer-x`).
pub(super) const ANSWER_TOOL: &str = "json_answer";

/// Whether `name` is the answer tool's.
pub(super) fn is_answer_tool(name: &str) -> bool {
    name.strip_prefix(ANSWER_TOOL)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
}

/// How the request asks for JSON.
#[derive(Debug)]
pub(super) enum Answer<'a> {
    /// Appended to the system prompt.
    Instruction(String),
    /// Offered as the only tool, and forced.
    Tool(WireTool<'a>),
}

/// How `req`'s response format is written, if it asks for JSON.
///
/// # Errors
///
/// `InvalidRequest` when the schema cannot be serialised for an instruction.
pub(super) fn answer<'a>(
    req: &'a ChatRequest,
    ctx: &RequestContext<'_>,
) -> Result<Option<Answer<'a>>> {
    let (name, schema) = match &req.response_format {
        ResponseFormat::Text => return Ok(None),
        ResponseFormat::JsonObject => (None, Cow::Owned(serde_json::json!({"type": "object"}))),
        ResponseFormat::JsonSchema { name, schema } => (Some(name.as_str()), Cow::Borrowed(schema)),
    };
    let object_root = schema.get("type").and_then(Value::as_str) == Some("object");
    if !req.tools.is_empty() || thinking(req, ctx) || !object_root {
        return instruction(&req.response_format).map(|i| Some(Answer::Instruction(i)));
    }
    let description = match name {
        Some(n) => format!(
            "Give your answer by calling this tool once: its input is your whole answer, \
             following the JSON schema `{n}`. Write no text besides."
        ),
        None => "Give your answer by calling this tool once: its input is your whole answer, \
                 as one JSON object. Write no text besides."
            .to_owned(),
    };
    Ok(Some(Answer::Tool(WireTool {
        name: Cow::Owned(tool_name(name)),
        description: Some(Cow::Owned(description)),
        input_schema: schema,
    })))
}

/// The answer tool's name for a schema named `name`: `json_answer-<name>`, the name in
/// tool-name characters, cut to 64.
fn tool_name(name: Option<&str>) -> String {
    let Some(name) = name.filter(|n| !n.is_empty()) else {
        return ANSWER_TOOL.to_owned();
    };
    let mut full = format!("{ANSWER_TOOL}-{}", portable_id(name));
    full.truncate(MAX_TOOL_NAME); // ASCII after `portable_id`: a char boundary
    full
}

/// Whether extended thinking is on in the body the request will have: the request's extra
/// `thinking` over the provider's, merged as the extra body is (RFC 7396).
pub(super) fn thinking(req: &ChatRequest, ctx: &RequestContext<'_>) -> bool {
    let provider = ctx.extra_body.and_then(|m| m.get("thinking"));
    let kind = match req.extra_body.get("thinking") {
        Some(Value::Object(own)) if own.contains_key("type") => own.get("type"),
        Some(Value::Object(_)) | None => provider.and_then(|p| p.get("type")),
        Some(_) => None, // `null` removes the provider's; anything else is not an object
    };
    kind.and_then(Value::as_str)
        .is_some_and(|k| k != "disabled")
}

/// The system-prompt instruction standing in for a format no tool can force.
fn instruction(format: &ResponseFormat) -> Result<String> {
    const PLAIN: &str = "no prose before or after it and no Markdown code fences";
    Ok(match format {
        ResponseFormat::JsonSchema { name, schema } => {
            let schema = serde_json::to_string(schema).map_err(|e| {
                Error::new(
                    ErrorKind::InvalidRequest,
                    format!("JSON schema `{name}` cannot be serialised: {e}"),
                )
            })?;
            format!(
                "Respond with a single valid JSON value that conforms to the JSON Schema \
                 `{name}` below, and nothing else: {PLAIN}.\n{schema}"
            )
        }
        _ => format!("Respond with a single valid JSON object and nothing else: {PLAIN}."),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema_format(name: &str, schema: Value) -> ChatRequest {
        ChatRequest::from_prompt("x").response_format(ResponseFormat::JsonSchema {
            name: name.into(),
            schema,
        })
    }

    fn forced_name(req: &ChatRequest) -> Option<String> {
        match answer(req, &RequestContext::new("m", None)).unwrap() {
            Some(Answer::Tool(t)) => Some(t.name.into_owned()),
            _ => None,
        }
    }

    #[test]
    fn answer_tool_names_are_valid_and_recognised() {
        let object = json!({"type": "object"});
        for (schema_name, want) in [
            ("palette", "json_answer-palette"),
            ("my schema.v2", "json_answer-my_schema_v2"),
            ("", "json_answer"),
        ] {
            let name = forced_name(&schema_format(schema_name, object.clone())).unwrap();
            assert_eq!(name, want);
            assert!(is_answer_tool(&name));
            assert!(crate::provider::tools::is_tool_name(&name));
        }
        let long = forced_name(&schema_format(&"n".repeat(100), object)).unwrap();
        assert_eq!(long.len(), MAX_TOOL_NAME);
        let plain = ChatRequest::from_prompt("x").response_format(ResponseFormat::JsonObject);
        assert_eq!(forced_name(&plain).as_deref(), Some("json_answer"));
        for other in ["json_answers", "get_weather", "json_answe"] {
            assert!(!is_answer_tool(other), "{other}");
        }
    }

    #[test]
    fn falls_back_to_an_instruction_when_no_tool_can_be_forced() {
        let object = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        let with_tools =
            schema_format("s", object.clone()).tool(Tool::new("t", json!({"type": "object"})));
        let array_root = schema_format("s", json!({"type": "array"}));
        let thinking = schema_format("s", object.clone()).extra_body(
            "thinking",
            json!({"type": "enabled", "budget_tokens": 2048}),
        );
        for req in [&with_tools, &array_root, &thinking] {
            match answer(req, &RequestContext::new("m", None)).unwrap() {
                Some(Answer::Instruction(i)) => assert!(i.contains("`s`"), "{i}"),
                other => panic!("expected an instruction, got {other:?}"),
            }
        }
        // Thinking switched on by the provider, and off again by the request.
        let on: serde_json::Map<String, Value> =
            serde_json::from_value(json!({"thinking": {"type": "enabled", "budget_tokens": 1024}}))
                .unwrap();
        let ctx = RequestContext::new("m", None).with_extra_body(&on);
        let req = schema_format("s", object.clone());
        assert!(matches!(
            answer(&req, &ctx).unwrap(),
            Some(Answer::Instruction(_))
        ));
        let off = req.clone().extra_body("thinking", Value::Null);
        assert!(matches!(answer(&off, &ctx).unwrap(), Some(Answer::Tool(_))));
        let budget_only = req.extra_body("thinking", json!({"budget_tokens": 4096}));
        assert!(matches!(
            answer(&budget_only, &ctx).unwrap(),
            Some(Answer::Instruction(_))
        ));
        let disabled =
            schema_format("s", object).extra_body("thinking", json!({"type": "disabled"}));
        assert!(matches!(
            answer(&disabled, &ctx).unwrap(),
            Some(Answer::Tool(_))
        ));
    }
}
