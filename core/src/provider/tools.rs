//! What every chat adapter needs for tools and images, whatever its wire format: the checks
//! a conversation must pass before any format is written, the ids made up for calls that
//! arrive without one, and the lookups a format that names results by tool (Gemini) needs.
//!
//! A tool conversation may move from one provider to another mid-way (failover): the calls
//! and results it holds are provider-neutral ([`ToolCall`], [`Message::tool_result`]), and
//! each adapter writes them in its own form from these.

use sha2::{Digest, Sha256};

use crate::error::{Error, ErrorKind, Result};
use crate::types::{ChatRequest, Message, Role, ToolCall, ToolChoice};

/// The longest tool name every provider accepts.
pub(crate) const MAX_TOOL_NAME: usize = 64;

/// Whether `name` is a tool name every provider accepts: 1 to 64 of `a-z A-Z 0-9 _ -`.
pub(crate) fn is_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_TOOL_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The checks any format needs before it writes `req`, for a refusal naming `format`:
/// tool names valid and unique; a `required` tool choice with tools to call, a named one
/// one of the tools; tool parameters a
/// JSON object; images only in user messages; every tool result answering a call made
/// earlier in the conversation; no tool result without its id.
///
/// # Errors
///
/// `InvalidRequest`, saying which message or tool is at fault (never its text).
pub(crate) fn check_conversation(req: &ChatRequest, format: &str) -> Result<()> {
    let bad = |what: String| {
        Err(Error::new(
            ErrorKind::InvalidRequest,
            format!("{format} request: {what}"),
        ))
    };
    let mut names: Vec<&str> = Vec::new();
    for (i, t) in req.tools.iter().enumerate() {
        if !is_tool_name(&t.name) {
            return bad(format!(
                "tool {i}'s name is not 1 to {MAX_TOOL_NAME} letters, digits, `_` or `-`"
            ));
        }
        if names.contains(&t.name.as_str()) {
            return bad(format!("tool `{}` is given twice", t.name));
        }
        if !t.parameters.is_object() {
            return bad(format!(
                "tool `{}`'s parameters are not a JSON Schema object",
                t.name
            ));
        }
        names.push(&t.name);
    }
    if req.tools.is_empty() && req.tool_choice == Some(ToolChoice::Required) {
        return bad("the tool choice is `required`, but there are no tools".to_owned());
    }
    if let Some(ToolChoice::Tool(name)) = &req.tool_choice
        && !names.contains(&name.as_str())
    {
        return bad(format!(
            "the tool choice names `{name}`, which is not among the tools"
        ));
    }
    let mut calls: Vec<&str> = Vec::new();
    for (i, m) in req.messages.iter().enumerate() {
        if !m.images.is_empty() && m.role != Role::User {
            return bad(format!(
                "message {i} has images, but only user messages can"
            ));
        }
        if !m.tool_calls.is_empty() && m.role != Role::Assistant {
            return bad(format!(
                "message {i} has tool calls, but only assistant messages can"
            ));
        }
        calls.extend(m.tool_calls.iter().map(|c| c.id.as_str()));
        if m.role == Role::Tool {
            match &m.tool_call_id {
                None => {
                    return bad(format!(
                        "message {i} is a tool result without its call's id"
                    ));
                }
                Some(id) if !calls.contains(&id.as_str()) => {
                    return bad(format!(
                        "message {i} is the result of call `{id}`, which no earlier assistant \
                         message made"
                    ));
                }
                Some(_) => {}
            }
        }
    }
    Ok(())
}

/// The call `id` in the conversation before message `before`, latest first (the formats that
/// tie a result to its call by the tool's name, not an id, need the name).
pub(crate) fn call_named<'a>(
    messages: &'a [Message],
    before: usize,
    id: &str,
) -> Option<&'a ToolCall> {
    messages[..before.min(messages.len())]
        .iter()
        .rev()
        .flat_map(|m| m.tool_calls.iter())
        .find(|c| c.id == id)
}

/// An id for the `index`th call of an answer that gave it none (Gemini's calls have no id):
/// `call_<index>_<8 hex of the SHA-256 of its name and arguments>` — the same call, the same
/// id, so the conversation reads the same wherever it goes on.
pub(crate) fn made_up_call_id(index: usize, name: &str, arguments: &serde_json::Value) -> String {
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update([0]);
    h.update(arguments.to_string().as_bytes());
    let digest = h.finalize();
    let hex: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    format!("call_{index}_{hex}")
}

/// `id` in the characters every format accepts in an id (`a-z A-Z 0-9 _ -`; Anthropic's
/// `tool_use.id` pattern): others become `_`. Applied to a call's id and to its result's
/// alike, the pair still matches.
pub(crate) fn portable_id(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A tool's result as a JSON object, for the formats whose results must be objects
/// (Gemini's `functionResponse.response`): a result that is a JSON object as it is; any other
/// JSON value, or text, as `{"result": …}`.
pub(crate) fn result_object(content: &str) -> serde_json::Value {
    match serde_json::from_str::<serde_json::Value>(content) {
        Ok(v @ serde_json::Value::Object(_)) => v,
        Ok(other) => serde_json::json!({ "result": other }),
        Err(_) => serde_json::json!({ "result": content }),
    }
}

/// A call's arguments from the JSON text a format carries them in (OpenAI's `arguments`
/// string, streamed pieces put together): an object; empty text is `{}`.
///
/// # Errors
///
/// `Decode` when the text is not a JSON object (the message names the call, not the text).
pub(crate) fn parse_arguments(name: &str, text: &str) -> Result<serde_json::Value> {
    if text.trim().is_empty() {
        return Ok(serde_json::Value::Object(serde_json::Map::new()));
    }
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(v @ serde_json::Value::Object(_)) => Ok(v),
        Ok(_) => Err(Error::decode(format!(
            "the arguments of the call of `{name}` are JSON but not an object"
        ))),
        Err(e) => Err(Error::decode(format!(
            "the arguments of the call of `{name}` are not JSON (line {}, column {})",
            e.line(),
            e.column()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::types::{Image, Tool};

    fn weather() -> Tool {
        Tool::new("get_weather", json!({"type": "object"}))
    }

    #[test]
    fn a_conversation_is_checked_before_any_format_is_written() {
        let call = ToolCall::new("call_1", "get_weather", json!({"city": "Paris"}));
        let good = ChatRequest::from_prompt("Weather?")
            .tool(weather())
            .message(Message::assistant_calls("", vec![call.clone()]))
            .message(Message::tool_result("call_1", "18 C"));
        assert!(check_conversation(&good, "openai").is_ok());
        let mut no_id = Message::tool_result("x", "18 C");
        no_id.tool_call_id = None;
        let cases: Vec<(ChatRequest, &str)> = vec![
            (
                ChatRequest::from_prompt("x").tool(Tool::new("get weather", json!({}))),
                "name is not",
            ),
            (
                ChatRequest::from_prompt("x")
                    .tool(weather())
                    .tool(weather()),
                "given twice",
            ),
            (
                ChatRequest::from_prompt("x").tool(Tool::new("t", json!("string"))),
                "not a JSON Schema object",
            ),
            (
                ChatRequest::from_prompt("x").tool_choice(ToolChoice::Required),
                "there are no tools",
            ),
            (
                ChatRequest::from_prompt("x")
                    .tool(weather())
                    .tool_choice(ToolChoice::named("other")),
                "not among the tools",
            ),
            (
                ChatRequest::new()
                    .message(Message::assistant("hi").image(Image::url("https://x/y.png"))),
                "only user messages",
            ),
            (
                ChatRequest::new().message(Message::tool_result("call_9", "18 C")),
                "no earlier assistant",
            ),
            (ChatRequest::new().message(no_id), "without its call's id"),
        ];
        for (req, want) in cases {
            let err = check_conversation(&req, "openai").unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidRequest);
            assert!(err.message().contains(want), "{want}: {}", err.message());
        }
    }

    #[test]
    fn made_up_ids_are_stable_and_portable() {
        let a = made_up_call_id(0, "get_weather", &json!({"city": "Paris"}));
        // SHA-256 of `get_weather\0{"city":"Paris"}` begins b99d9c83: the id is pinned, so a
        // conversation written by another build of this crate still pairs its calls.
        assert_eq!(a, "call_0_b99d9c83");
        assert_ne!(
            a,
            made_up_call_id(1, "get_weather", &json!({"city": "Paris"}))
        );
        assert_ne!(
            a,
            made_up_call_id(0, "get_weather", &json!({"city": "Rome"}))
        );
        assert!(a.starts_with("call_0_") && a.len() == "call_0_".len() + 8);
        assert_eq!(portable_id(&a), a);
        assert_eq!(portable_id("call.1:x"), "call_1_x");
    }

    #[test]
    fn results_become_objects_and_arguments_must_be_objects() {
        assert_eq!(result_object(r#"{"t": 18}"#), json!({"t": 18}));
        assert_eq!(result_object("18"), json!({"result": 18}));
        assert_eq!(result_object("sunny"), json!({"result": "sunny"}));
        assert_eq!(parse_arguments("f", "").unwrap(), json!({}));
        assert_eq!(parse_arguments("f", r#"{"a":1}"#).unwrap(), json!({"a": 1}));
        assert!(parse_arguments("f", "[1]").unwrap_err().is_decode());
        let e = parse_arguments("f", r#"{"secret": "#).unwrap_err();
        assert!(!e.message().contains("secret"));
    }

    #[test]
    fn the_call_a_result_answers_is_found_by_id() {
        let messages = vec![
            Message::assistant_calls("", vec![ToolCall::new("a", "one", json!({}))]),
            Message::tool_result("a", "x"),
            Message::assistant_calls("", vec![ToolCall::new("b", "two", json!({}))]),
        ];
        assert_eq!(
            call_named(&messages, 1, "a").map(|c| c.name.as_str()),
            Some("one")
        );
        assert_eq!(call_named(&messages, 1, "b"), None, "only earlier messages");
        assert_eq!(
            call_named(&messages, 3, "b").map(|c| c.name.as_str()),
            Some("two")
        );
    }
}
