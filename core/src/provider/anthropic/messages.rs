//! A neutral conversation as Messages API turns: system messages lifted out, runs of one role
//! merged, tool results as `tool_result` blocks of the user turn right after the calls, images
//! as `image` blocks, call ids in Anthropic's pattern and unique.
//!
//! Anthropic's rules for tool turns (<https://docs.claude.com/en/docs/agents-and-tools/tool-use/implement-tool-use>,
//! "Handling results from client tools"): the results come in the user message right after
//! the assistant's `tool_use` turn, one `tool_result` per `tool_use`, and before any text of
//! that message. A conversation that breaks them is refused before it is sent.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use serde::Serialize;

use super::PROVIDER_TYPE;
use crate::error::{Error, ErrorKind, Result};
use crate::id::ProviderId;
use crate::provider::tools::portable_id;
use crate::types::{ChatRequest, Image, Message, Role, TurnState};

/// The image types Anthropic reads (<https://docs.claude.com/en/docs/build-with-claude/vision>).
const MEDIA_TYPES: [&str; 4] = ["image/jpeg", "image/png", "image/gif", "image/webp"];

/// One turn of `messages`.
#[derive(Debug, Serialize)]
pub(super) struct WireMessage<'a> {
    pub(super) role: &'static str,
    pub(super) content: Content<'a>,
}

/// A turn's content: a plain string while it is only text, else content blocks.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(super) enum Content<'a> {
    Text(Cow<'a, str>),
    Blocks(Vec<Block<'a>>),
}

/// A content block of a request.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum Block<'a> {
    Text {
        text: Cow<'a, str>,
    },
    Image {
        source: Source<'a>,
    },
    ToolUse {
        id: String,
        name: &'a str,
        input: &'a serde_json::Value,
    },
    ToolResult {
        tool_use_id: String,
        /// Left out for an empty result (the field is optional).
        #[serde(skip_serializing_if = "Option::is_none")]
        content: Option<&'a str>,
    },
    /// Claude's own thinking, sent back unchanged before its calls.
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    RedactedThinking {
        data: &'a str,
    },
}

impl<'a> Block<'a> {
    /// A kept `thinking` or `redacted_thinking` block ([`TurnState`]); `None` for anything
    /// else (kept state is only ever these).
    fn thinking(kept: &'a serde_json::Value) -> Option<Self> {
        let field = |f: &str| kept.get(f).and_then(serde_json::Value::as_str);
        match field("type")? {
            "thinking" => Some(Block::Thinking {
                thinking: field("thinking")?,
                signature: field("signature")?,
            }),
            "redacted_thinking" => Some(Block::RedactedThinking {
                data: field("data")?,
            }),
            _ => None,
        }
    }
}

/// Where an image block's bytes are.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum Source<'a> {
    Base64 { media_type: &'a str, data: &'a str },
    Url { url: &'a str },
}

/// The request's conversation in Messages API form.
#[derive(Debug)]
pub(super) struct Conversation<'a> {
    /// The system messages' texts, in order (for the top-level `system` field).
    pub(super) system: Vec<&'a str>,
    /// The turns, user and assistant alternating.
    pub(super) messages: Vec<WireMessage<'a>>,
}

/// Translates `req`'s messages.
///
/// # Errors
///
/// `Unsupported` for what Anthropic cannot carry: an image of another type or URL scheme, a
/// call with an empty id or arguments that are not an object, results that do not follow
/// their calls as Anthropic requires. `InvalidRequest` for a tool result without its id.
/// `provider` is the one the request goes to: a turn it wrote gets its thinking blocks back
/// (`None` when only checking).
pub(super) fn conversation<'a>(
    req: &'a ChatRequest,
    provider: Option<&ProviderId>,
) -> Result<Conversation<'a>> {
    let mut system = Vec::new();
    let mut turns: Vec<WireMessage<'_>> = Vec::new();
    let mut ids = CallIds::default();
    for (i, m) in req.messages.iter().enumerate() {
        let (role, content) = match m.role {
            Role::System => {
                system.push(m.content.as_str());
                continue;
            }
            Role::User => ("user", user_content(i, m)?),
            Role::Assistant => {
                let kept = provider.map_or(&[][..], |p| {
                    TurnState::anthropic(m.provider_state.as_ref(), p)
                });
                ("assistant", assistant_content(i, m, kept, &mut ids)?)
            }
            Role::Tool => ("user", result_content(i, m, &ids)?),
        };
        match turns.last_mut() {
            Some(last) if last.role == role => last.content.append(content),
            _ => turns.push(WireMessage { role, content }),
        }
    }
    for turn in &mut turns {
        if let Content::Blocks(blocks) = &mut turn.content {
            // Results first, the rest in order (a stable sort).
            blocks.sort_by_key(|b| !matches!(b, Block::ToolResult { .. }));
        }
    }
    check_pairs(&turns)?;
    check_nonempty(&turns)?;
    Ok(Conversation {
        system,
        messages: turns,
    })
}

/// "All messages must have non-empty content except for the optional final assistant
/// message" (the Messages API's 400 for a turn with no content, or only blank text —
/// `messages.N: …`): such a turn is refused before sending, naming it, so the router asks
/// a provider that takes it.
fn check_nonempty(turns: &[WireMessage<'_>]) -> Result<()> {
    let last = turns.len().saturating_sub(1);
    for (n, turn) in turns.iter().enumerate() {
        if n == last && turn.role == "assistant" {
            continue;
        }
        let blank = match &turn.content {
            Content::Text(text) => text.trim().is_empty(),
            Content::Blocks(blocks) => blocks.is_empty(),
        };
        if blank {
            return Err(unsupported(format!(
                "turn {n} ({}) is empty, and Anthropic takes an empty turn only as the final                  assistant message (messages.{n}: all messages must have non-empty content)",
                turn.role
            )));
        }
    }
    Ok(())
}

impl<'a> Content<'a> {
    /// Adds a later message of the same role: texts joined by a blank line while both are
    /// plain, else the blocks one after the other.
    fn append(&mut self, later: Content<'a>) {
        if let (Content::Text(text), Content::Text(more)) = (&mut *self, &later) {
            let text = text.to_mut();
            text.push_str("\n\n");
            text.push_str(more);
            return;
        }
        let mut blocks = std::mem::replace(self, Content::Blocks(Vec::new())).into_blocks();
        blocks.extend(later.into_blocks());
        *self = Content::Blocks(blocks);
    }

    fn into_blocks(self) -> Vec<Block<'a>> {
        match self {
            Content::Blocks(blocks) => blocks,
            Content::Text(text) => text_block(text).into_iter().collect(),
        }
    }
}

/// A text block, unless the text is blank (Anthropic refuses empty text blocks).
fn text_block(text: Cow<'_, str>) -> Option<Block<'_>> {
    (!text.trim().is_empty()).then_some(Block::Text { text })
}

/// A user message: its text, or its images then its text (the vision guide: "Claude works
/// best when images come before text").
fn user_content(i: usize, m: &Message) -> Result<Content<'_>> {
    if m.images.is_empty() {
        return Ok(Content::Text(Cow::Borrowed(&m.content)));
    }
    let mut blocks = m
        .images
        .iter()
        .map(|img| image_block(i, img))
        .collect::<Result<Vec<_>>>()?;
    blocks.extend(text_block(Cow::Borrowed(&m.content)));
    Ok(Content::Blocks(blocks))
}

/// An assistant message: its text, or its text (unless blank) then a `tool_use` per call —
/// after the thinking blocks `kept` from Claude's answer, first and unchanged ("a final
/// assistant message must start with a thinking block" when thinking is on: the extended
/// thinking guide, "Preserving thinking blocks").
fn assistant_content<'a>(
    i: usize,
    m: &'a Message,
    kept: &'a [serde_json::Value],
    ids: &mut CallIds,
) -> Result<Content<'a>> {
    let mut blocks: Vec<Block<'a>> = kept.iter().filter_map(Block::thinking).collect();
    if m.tool_calls.is_empty() && blocks.is_empty() {
        return Ok(Content::Text(Cow::Borrowed(&m.content)));
    }
    blocks.extend(text_block(Cow::Borrowed(&m.content)));
    for (j, call) in m.tool_calls.iter().enumerate() {
        if call.id.is_empty() {
            return Err(unsupported(format!(
                "message {i}'s call {j} has an empty id"
            )));
        }
        if !call.arguments.is_object() {
            return Err(unsupported(format!(
                "the arguments of call `{}` (message {i}) are not a JSON object, and a \
                 `tool_use` input must be one",
                call.id
            )));
        }
        blocks.push(Block::ToolUse {
            id: ids.write(&call.id),
            name: &call.name,
            input: &call.arguments,
        });
    }
    Ok(Content::Blocks(blocks))
}

/// A tool message: one `tool_result` block (of a user turn).
fn result_content<'a>(i: usize, m: &'a Message, ids: &CallIds) -> Result<Content<'a>> {
    let id = m.tool_call_id.as_deref().ok_or_else(|| {
        Error::new(
            ErrorKind::InvalidRequest,
            format!("{PROVIDER_TYPE} request: message {i} is a tool result without its call's id"),
        )
    })?;
    Ok(Content::Blocks(vec![Block::ToolResult {
        tool_use_id: ids.read(id),
        content: (!m.content.is_empty()).then_some(m.content.as_str()),
    }]))
}

/// An image block: base64 as it is (a `data:` URL too), an `http(s)` URL as a URL source.
fn image_block(i: usize, img: &Image) -> Result<Block<'_>> {
    let source = match img {
        Image::Base64 { media_type, data } => Source::Base64 { media_type, data },
        Image::Url { url } => match url::Url::parse(url).as_ref().map(url::Url::scheme) {
            Ok("http" | "https") => Source::Url { url },
            Ok("data") => {
                let (media_type, data) = data_url(url).ok_or_else(|| {
                    unsupported(format!(
                        "message {i} has a `data:` image URL that is not base64; Anthropic \
                         takes base64 data or an http(s) URL"
                    ))
                })?;
                Source::Base64 { media_type, data }
            }
            _ => {
                return Err(unsupported(format!(
                    "message {i} has an image URL that is not http(s) or a `data:` URL"
                )));
            }
        },
    };
    if let Source::Base64 { media_type, .. } = source
        && !MEDIA_TYPES.contains(&media_type)
    {
        return Err(unsupported(format!(
            "message {i} has an image of type `{media_type}`; Anthropic takes {}",
            MEDIA_TYPES.join(", ")
        )));
    }
    Ok(Block::Image { source })
}

/// `(media type, data)` of a `data:<type>;base64,<data>` URL.
fn data_url(url: &str) -> Option<(&str, &str)> {
    let (meta, data) = url.strip_prefix("data:")?.split_once(',')?;
    Some((meta.strip_suffix(";base64")?, data))
}

/// The ids written for calls: each call's id in Anthropic's pattern ([`portable_id`]), made
/// unique when an earlier turn already used it (ids made up from a call's content repeat
/// when a model makes the same call twice; two ids may also become one in the pattern), and
/// a result written with the id of the latest call it names.
#[derive(Debug, Default)]
struct CallIds {
    written: HashSet<String>,
    latest: HashMap<String, String>,
}

impl CallIds {
    fn write(&mut self, original: &str) -> String {
        let base = portable_id(original);
        let mut id = base.clone();
        let mut n = 1;
        while self.written.contains(&id) {
            n += 1;
            id = format!("{base}_{n}");
        }
        self.written.insert(id.clone());
        self.latest.insert(original.to_owned(), id.clone());
        id
    }

    fn read(&self, original: &str) -> String {
        self.latest
            .get(original)
            .cloned()
            .unwrap_or_else(|| portable_id(original))
    }
}

impl WireMessage<'_> {
    fn call_ids(&self) -> Vec<&str> {
        self.blocks(|b| match b {
            Block::ToolUse { id, .. } => Some(id),
            _ => None,
        })
    }

    fn result_ids(&self) -> Vec<&str> {
        self.blocks(|b| match b {
            Block::ToolResult { tool_use_id, .. } => Some(tool_use_id),
            _ => None,
        })
    }

    fn blocks<'s>(&'s self, pick: impl Fn(&'s Block<'_>) -> Option<&'s String>) -> Vec<&'s str> {
        match &self.content {
            Content::Blocks(blocks) => blocks.iter().filter_map(pick).map(String::as_str).collect(),
            Content::Text(_) => Vec::new(),
        }
    }
}

/// Every call answered in the turn right after it, every result answering a call of the turn
/// right before it.
fn check_pairs(turns: &[WireMessage<'_>]) -> Result<()> {
    for (i, turn) in turns.iter().enumerate() {
        let answered = turns
            .get(i + 1)
            .map(WireMessage::result_ids)
            .unwrap_or_default();
        if let Some(id) = turn.call_ids().into_iter().find(|c| !answered.contains(c)) {
            return Err(unsupported(format!(
                "call `{id}` has no result in the message right after it, as Anthropic requires"
            )));
        }
        let asked = i
            .checked_sub(1)
            .map(|p| turns[p].call_ids())
            .unwrap_or_default();
        if let Some(id) = turn.result_ids().into_iter().find(|r| !asked.contains(r)) {
            return Err(unsupported(format!(
                "the result of call `{id}` is not in the message right after the call, as \
                 Anthropic requires"
            )));
        }
    }
    Ok(())
}

fn unsupported(what: String) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!("{PROVIDER_TYPE} request: {what}"),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::types::ToolCall;

    fn turns(req: &ChatRequest) -> serde_json::Value {
        serde_json::to_value(conversation(req, None).unwrap().messages).unwrap()
    }

    fn call(id: &str) -> ToolCall {
        ToolCall::new(id, "get_weather", json!({"city": "Paris"}))
    }

    #[test]
    fn plain_turns_stay_strings_and_blocks_appear_only_when_needed() {
        let req = ChatRequest::new()
            .user("a")
            .user("b")
            .message(Message::assistant_calls(" ", vec![call("c1")]))
            .message(Message::tool_result("c1", ""))
            .user("thanks");
        assert_eq!(
            turns(&req),
            json!([
                {"role": "user", "content": "a\n\nb"},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "c1", "name": "get_weather", "input": {"city": "Paris"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "c1"},
                    {"type": "text", "text": "thanks"}
                ]}
            ])
        );
    }

    #[test]
    fn results_move_before_text_of_the_same_turn() {
        let req = ChatRequest::new()
            .user("go")
            .message(Message::assistant_calls("", vec![call("a"), call("b")]))
            .message(Message::tool_result("a", "1"))
            .user("and")
            .message(Message::tool_result("b", "2"));
        assert_eq!(
            turns(&req)[2]["content"],
            json!([
                {"type": "tool_result", "tool_use_id": "a", "content": "1"},
                {"type": "tool_result", "tool_use_id": "b", "content": "2"},
                {"type": "text", "text": "and"}
            ])
        );
    }

    #[test]
    fn repeated_and_colliding_ids_become_unique_and_results_follow_the_latest_call() {
        let req = ChatRequest::new()
            .user("go")
            .message(Message::assistant_calls("", vec![call("call_0_ab")]))
            .message(Message::tool_result("call_0_ab", "1"))
            .message(Message::assistant_calls(
                "",
                vec![call("call_0_ab"), call("x.y")],
            ))
            .message(Message::tool_result("call_0_ab", "2"))
            .message(Message::tool_result("x.y", "3"))
            .message(Message::assistant_calls("", vec![call("x:y")]))
            .message(Message::tool_result("x:y", "4"));
        let v = turns(&req);
        assert_eq!(v[1]["content"][0]["id"], "call_0_ab");
        assert_eq!(v[2]["content"][0]["tool_use_id"], "call_0_ab");
        assert_eq!(v[3]["content"][0]["id"], "call_0_ab_2");
        assert_eq!(v[3]["content"][1]["id"], "x_y");
        assert_eq!(v[4]["content"][0]["tool_use_id"], "call_0_ab_2");
        assert_eq!(v[4]["content"][1]["tool_use_id"], "x_y");
        assert_eq!(v[5]["content"][0]["id"], "x_y_2");
        assert_eq!(v[6]["content"][0]["tool_use_id"], "x_y_2");
    }

    #[test]
    fn images_come_before_the_text_and_data_urls_become_base64() {
        let req = ChatRequest::new().message(
            Message::user("What is this?")
                .image(Image::url("data:image/png;base64,iVBORw0KGgo="))
                .image(Image::url("https://example.com/a.jpg")),
        );
        assert_eq!(
            turns(&req)[0]["content"],
            json!([
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/a.jpg"}},
                {"type": "text", "text": "What is this?"}
            ])
        );
    }

    #[test]
    fn what_anthropic_cannot_carry_is_refused() {
        let cases: Vec<(ChatRequest, &str)> = vec![
            (
                ChatRequest::new()
                    .message(Message::user("x").image(Image::base64("image/bmp", "AA=="))),
                "`image/bmp`",
            ),
            (
                ChatRequest::new().message(Message::user("x").image(Image::url("ftp://h/a.png"))),
                "not http(s)",
            ),
            (
                ChatRequest::new()
                    .message(Message::user("x").image(Image::url("data:image/png,abc"))),
                "not base64",
            ),
            (
                ChatRequest::new()
                    .user("go")
                    .message(Message::assistant_calls("", vec![call("a"), call("b")]))
                    .message(Message::tool_result("a", "1")),
                "call `b` has no result",
            ),
            (
                ChatRequest::new()
                    .user("go")
                    .message(Message::assistant_calls("", vec![call("a")]))
                    .user("never mind"),
                "call `a` has no result",
            ),
            (
                ChatRequest::new()
                    .user("go")
                    .message(Message::assistant_calls("", vec![call("a")]))
                    .message(Message::tool_result("a", "1"))
                    .assistant("done")
                    .message(Message::tool_result("a", "again")),
                "result of call `a` is not in the message right after",
            ),
            (
                ChatRequest::new()
                    .user("go")
                    .message(Message::assistant_calls("", vec![call("")])),
                "empty id",
            ),
            (
                ChatRequest::new()
                    .user("go")
                    .message(Message::assistant_calls(
                        "",
                        vec![ToolCall::new("a", "f", json!([1]))],
                    )),
                "not a JSON object",
            ),
            // messages.1: "all messages must have non-empty content except for the
            // optional final assistant message" (the API's 400).
            (
                ChatRequest::new().user("a").assistant("").user("b"),
                "turn 1 (assistant) is empty",
            ),
            (
                ChatRequest::new().user(" \n").assistant("x"),
                "turn 0 (user) is empty",
            ),
        ];
        // The final assistant turn may be empty (a prefill of nothing).
        assert!(conversation(&ChatRequest::new().user("a").assistant(""), None).is_ok());
        for (req, want) in cases {
            let err = conversation(&req, None).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Unsupported, "{want}");
            assert!(err.message().contains(want), "{want}: {}", err.message());
            assert!(err.message().starts_with("anthropic request: "), "{err}");
        }
    }
}
