//! A conversation in the Chat Completions format — messages with images, assistant turns
//! that call tools, tool results, tool definitions and the tool choice — and what the format
//! cannot carry, refused before anything is sent.
//!
//! Shapes (<https://platform.openai.com/docs/api-reference/chat/create> and the function-calling
//! guide <https://platform.openai.com/docs/guides/function-calling>):
//! - a user message with images: `content: [{"type": "text", "text"}, {"type": "image_url",
//!   "image_url": {"url"}}…]`, the text part first and only when there is text; a carried
//!   image as a `data:<mime>;base64,<data>` URL;
//! - an assistant turn with calls: `content` its text or `null`, `tool_calls: [{"id", "type":
//!   "function", "function": {"name", "arguments": <JSON string>}}]`;
//! - a tool's result: `{"role": "tool", "tool_call_id", "content"}`, one message per result;
//! - tools: `[{"type": "function", "function": {"name", "description", "parameters"}}]`;
//!   the choice `"auto" | "none" | "required" | {"type": "function", "function": {"name"}}`.

use super::wire::{
    WireCallFunction, WireContent, WireFunction, WireImageUrl, WireMessage, WireName, WirePart,
    WireTool, WireToolCall, WireToolChoice,
};
use crate::error::{Error, ErrorKind, Result};
use crate::id::ProviderId;
use crate::provider::tools::check_conversation;
use crate::types::{ChatRequest, Image, Message, Role, Tool, ToolCall, ToolChoice};

/// The image types the format takes (<https://platform.openai.com/docs/guides/images-vision>:
/// PNG, JPEG, WEBP, non-animated GIF).
const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/webp", "image/gif"];

/// Whether the Chat Completions format can carry `req`, for a refusal from provider `id` of
/// kind `kind` (`openai`, `azure`): the shared checks every format makes, then the format's
/// own rules —
/// - images are PNG, JPEG, WEBP or GIF;
/// - a tool result comes right after the assistant turn that made its call (among that turn's
///   other results), and every call of a turn is answered before the conversation goes on:
///   the API answers 400 otherwise ("Messages with role 'tool' must be a response to a
///   preceding message with 'tool_calls'"; "An assistant message with 'tool_calls' must be
///   followed by tool messages responding to each 'tool_call_id'");
/// - a `required` tool choice comes with tools;
/// - at most 4 stop sequences (`stop`: "Up to 4 sequences", `maxItems: 4` in OpenAI's
///   OpenAPI spec and Azure's 2024-10-21 `inference.json`).
///
/// # Errors
///
/// `InvalidRequest` from the shared checks (a `required` choice without tools among them);
/// `Unsupported` naming the image or the message the format cannot carry.
pub(crate) fn check(id: &ProviderId, req: &ChatRequest, kind: &str) -> Result<()> {
    check_conversation(req, kind).map_err(|e| e.with_provider(id.clone()))?;
    let refuse = |what: String| {
        Err(Error::new(
            ErrorKind::Unsupported,
            format!("{kind} cannot carry {what}"),
        )
        .with_provider(id.clone()))
    };
    for (i, m) in req.messages.iter().enumerate() {
        for (j, image) in m.images.iter().enumerate() {
            if let Image::Base64 { media_type, .. } = image
                && !IMAGE_TYPES
                    .iter()
                    .any(|t| t.eq_ignore_ascii_case(media_type))
            {
                return refuse(format!(
                    "image {j} of message {i}: its type `{media_type}` is not PNG, JPEG, \
                         WEBP or GIF"
                ));
            }
        }
    }
    if let Some(what) = misplaced_result(&req.messages) {
        return refuse(what);
    }
    if req.stop.len() > MAX_STOP {
        return refuse(format!(
            "{} stop sequences: `stop` takes at most {MAX_STOP}",
            req.stop.len()
        ));
    }
    Ok(())
}

/// The most stop sequences the Chat Completions API takes.
const MAX_STOP: usize = 4;

/// The first tool result that does not follow its call's turn, or the first call left
/// unanswered before the conversation goes on, described.
fn misplaced_result(messages: &[Message]) -> Option<String> {
    // The calls of the latest assistant turn still waiting for their results.
    let mut open: Vec<&str> = Vec::new();
    let mut turn = 0;
    for (i, m) in messages.iter().enumerate() {
        if m.role == Role::Tool {
            let id = m.tool_call_id.as_deref().unwrap_or_default();
            match open.iter().position(|c| *c == id) {
                Some(at) => {
                    open.swap_remove(at);
                }
                None => {
                    return Some(format!(
                        "message {i}: the result of call `{id}` is not right after the \
                         assistant turn that made it"
                    ));
                }
            }
            continue;
        }
        if let Some(id) = open.first() {
            return Some(format!(
                "message {turn}: its call `{id}` has no result before message {i}"
            ));
        }
        open = m.tool_calls.iter().map(|c| c.id.as_str()).collect();
        turn = i;
    }
    open.first()
        .map(|id| format!("message {turn}: its call `{id}` has no result"))
}

/// One message in the format.
pub(super) fn wire_message(m: &Message) -> WireMessage<'_> {
    let content = if !m.images.is_empty() {
        let mut parts = Vec::with_capacity(m.images.len() + 1);
        if !m.content.is_empty() {
            parts.push(WirePart::Text { text: &m.content });
        }
        parts.extend(m.images.iter().map(|image| WirePart::ImageUrl {
            image_url: WireImageUrl { url: image },
        }));
        WireContent::Parts(parts)
    } else if m.content.is_empty() && !m.tool_calls.is_empty() {
        WireContent::Null
    } else {
        WireContent::Text(&m.content)
    };
    WireMessage {
        role: m.role.as_str(),
        content,
        tool_calls: m.tool_calls.iter().map(wire_call).collect(),
        tool_call_id: if m.role == Role::Tool {
            m.tool_call_id.as_deref()
        } else {
            None
        },
    }
}

fn wire_call(c: &ToolCall) -> WireToolCall<'_> {
    WireToolCall {
        id: &c.id,
        kind: "function",
        function: WireCallFunction {
            name: &c.name,
            arguments: c.arguments.to_string(),
        },
    }
}

/// A tool definition in the format.
pub(super) fn wire_tool(t: &Tool) -> WireTool<'_> {
    WireTool {
        kind: "function",
        function: WireFunction {
            name: &t.name,
            description: t.description.as_deref(),
            parameters: &t.parameters,
        },
    }
}

/// The tool choice, sent only with tools (the API refuses a `tool_choice` without `tools`;
/// without tools, `auto` and `none` mean the same as no choice).
pub(super) fn wire_tool_choice(req: &ChatRequest) -> Option<WireToolChoice<'_>> {
    if req.tools.is_empty() {
        return None;
    }
    Some(match req.tool_choice.as_ref()? {
        ToolChoice::Auto => WireToolChoice::Mode("auto"),
        ToolChoice::None => WireToolChoice::Mode("none"),
        ToolChoice::Required => WireToolChoice::Mode("required"),
        ToolChoice::Tool(name) => WireToolChoice::Function {
            kind: "function",
            function: WireName { name },
        },
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn id() -> ProviderId {
        ProviderId::new("openai")
    }

    fn call(id: &str) -> ToolCall {
        ToolCall::new(id, "get_weather", json!({"city": "Paris"}))
    }

    fn to_json<T: serde::Serialize>(v: &T) -> Value {
        serde_json::to_value(v).unwrap()
    }

    #[test]
    fn writes_images_after_the_text_and_calls_with_null_content() {
        let m = Message::user("What is this?")
            .image(Image::url("https://example.com/a.png"))
            .image(Image::base64("image/png", "iVBORw0KGgo="));
        assert_eq!(
            to_json(&wire_message(&m)),
            json!({"role": "user", "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            ]})
        );
        let only_image = Message::user("").image(Image::url("https://example.com/a.png"));
        assert_eq!(
            to_json(&wire_message(&only_image))["content"],
            json!([{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}])
        );
        let calls = Message::assistant_calls("", vec![call("call_1")]);
        assert_eq!(
            to_json(&wire_message(&calls)),
            json!({"role": "assistant", "content": null, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
            }]})
        );
        let result = Message::tool_result("call_1", "18 C");
        assert_eq!(
            to_json(&wire_message(&result)),
            json!({"role": "tool", "content": "18 C", "tool_call_id": "call_1"})
        );
    }

    #[test]
    fn tool_choice_is_sent_only_with_tools() {
        let bare = ChatRequest::from_prompt("x").tool_choice(ToolChoice::None);
        assert!(wire_tool_choice(&bare).is_none());
        let with = bare.tool(Tool::new("t", json!({"type": "object"})));
        assert_eq!(to_json(&wire_tool_choice(&with).unwrap()), json!("none"));
        assert!(
            wire_tool_choice(&ChatRequest::from_prompt("x").tool(Tool::new("t", json!({}))))
                .is_none()
        );
    }

    #[test]
    fn results_must_follow_the_turn_that_made_their_calls() {
        let turn = Message::assistant_calls("", vec![call("a"), call("b")]);
        let ok = ChatRequest::from_prompt("x")
            .message(turn.clone())
            .message(Message::tool_result("b", "1"))
            .message(Message::tool_result("a", "2"))
            .user("thanks");
        assert!(check(&id(), &ok, "openai").is_ok());
        let cases = [
            (
                ChatRequest::from_prompt("x")
                    .message(turn.clone())
                    .message(Message::tool_result("a", "2"))
                    .user("and b?"),
                "message 1: its call `b` has no result before message 3",
            ),
            (
                ChatRequest::from_prompt("x")
                    .message(turn.clone())
                    .user("wait")
                    .message(Message::tool_result("a", "2")),
                "message 1: its call `a` has no result before message 2",
            ),
            (
                ChatRequest::from_prompt("x").message(turn.clone()),
                "message 1: its call `a` has no result",
            ),
            (
                ChatRequest::from_prompt("x")
                    .message(turn)
                    .message(Message::tool_result("a", "1"))
                    .message(Message::tool_result("b", "1"))
                    .message(Message::tool_result("a", "again")),
                "message 4: the result of call `a` is not right after",
            ),
        ];
        for (req, want) in cases {
            let err = check(&id(), &req, "openai").unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Unsupported, "{want}");
            assert!(err.message().contains(want), "{want}: {}", err.message());
            assert_eq!(err.provider(), Some(&id()));
        }
    }

    #[test]
    fn refuses_image_types_the_format_does_not_take() {
        for ok in ["image/png", "image/JPEG", "image/webp", "image/gif"] {
            let req =
                ChatRequest::new().message(Message::user("x").image(Image::base64(ok, "AA==")));
            assert!(check(&id(), &req, "openai").is_ok(), "{ok}");
        }
        let req = ChatRequest::new().message(
            Message::user("x")
                .image(Image::url("https://example.com/a.tiff"))
                .image(Image::base64("image/tiff", "AA==")),
        );
        let err = check(&id(), &req, "openai").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        assert!(err.message().contains("image 1 of message 0"), "{err}");
        assert!(!err.message().contains("AA=="), "{err}");
    }

    #[test]
    fn the_shared_checks_come_first_and_name_the_provider() {
        let req = ChatRequest::new().message(Message::tool_result("call_9", "18 C"));
        let err = check(&id(), &req, "azure").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidRequest);
        assert!(err.message().starts_with("azure request:"), "{err}");
        assert_eq!(err.provider(), Some(&id()));
        let req = ChatRequest::from_prompt("x").tool_choice(ToolChoice::Required);
        let err = check(&id(), &req, "openai").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidRequest);
        assert!(err.message().contains("no tools"), "{err}");
    }
}
