//! Messages API request and response bodies.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::messages::{Conversation, WireMessage, conversation};
use super::structured::{self, ANSWER_TOOL, Answer, WireTool, is_answer_tool};
use super::{DEFAULT_MAX_TOKENS, PROVIDER_TYPE, error};
use crate::error::{Error, ErrorKind, Result};
use crate::http::RawResponse;
use crate::id::ProviderId;
use crate::provider::RequestContext;
use crate::provider::body::{decode_json, json_f32};
use crate::provider::tools::check_conversation;
use crate::types::{
    ChatRequest, ChatResponse, FinishReason, StateData, ToolCall, ToolChoice, TurnState, Usage,
};

/// The body of `POST /v1/messages`.
#[derive(Debug, Serialize)]
pub(super) struct RequestBody<'a> {
    model: String,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<String>,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<WireToolChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
}

/// `tool_choice`: `{"type": "auto" | "any" | "none"}` or `{"type": "tool", "name"}`.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireToolChoice<'a> {
    Auto,
    Any,
    None,
    Tool {
        name: Cow<'a, str>,
        /// With a forced tool, "exactly one" call of it (set for the answer tool only).
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        disable_parallel_tool_use: bool,
    },
}

/// What Anthropic refuses in a request beyond [`check_conversation`]: a caller's tool named
/// like the answer tool, and whatever the conversation's
/// translation refuses ([`conversation`]).
///
/// # Errors
///
/// `Unsupported` or `InvalidRequest`, naming the part.
pub(super) fn check(req: &ChatRequest) -> Result<()> {
    check_tools(req)?;
    check_temperature(req)?;
    check_stops(req)?;
    conversation(req, None).map(drop)
}

/// Extended thinking with a forced tool: "Thinking may not be enabled when tool_choice forces
/// tool use" (the Messages API's 400; the extended thinking guide: "tool_choice: {type: any}
/// or {type: tool} … are not supported"). Refused before sending, so another provider may
/// take it.
fn check_forced_tool(req: &ChatRequest, ctx: &RequestContext<'_>) -> Result<()> {
    let forced = matches!(
        req.tool_choice,
        Some(ToolChoice::Required | ToolChoice::Tool(_))
    );
    if forced && !req.tools.is_empty() && structured::thinking(req, ctx) {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "{PROVIDER_TYPE} cannot carry tool_choice {} with extended thinking on: \
                 thinking takes `auto` or `none` only",
                match &req.tool_choice {
                    Some(ToolChoice::Required) => "required".to_owned(),
                    Some(ToolChoice::Tool(name)) => format!("`{name}`"),
                    _ => String::new(),
                }
            ),
        ));
    }
    Ok(())
}

/// A stop sequence with no visible character (`"\n\n"`, `" "`, `""`): the Messages API
/// answers 400 "stop_sequences: each stop sequence must contain non-whitespace" (OpenAI,
/// Azure and Gemini take it). Refused before sending, so the router asks one that does.
fn check_stops(req: &ChatRequest) -> Result<()> {
    match req.stop.iter().position(|s| s.trim().is_empty()) {
        Some(i) => Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "{PROVIDER_TYPE} cannot carry stop sequence {i} ({:?}): each stop sequence \
                 must contain non-whitespace",
                req.stop[i]
            ),
        )),
        None => Ok(()),
    }
}

/// A temperature in Anthropic's range: "Ranges from 0.0 to 1.0" (the Messages API
/// reference, `temperature`; OpenAI's and Gemini's go to 2). Outside it the API answers 400:
/// refused before sending, so the router asks another provider.
fn check_temperature(req: &ChatRequest) -> Result<()> {
    match req.temperature {
        // A temperature that is no number is the body builder's to refuse (`InvalidRequest`).
        Some(t) if t.is_finite() && !(0.0..=1.0).contains(&t) => Err(Error::new(
            ErrorKind::Unsupported,
            format!("{PROVIDER_TYPE} cannot carry temperature {t}: it takes 0.0 to 1.0"),
        )),
        _ => Ok(()),
    }
}

fn check_tools(req: &ChatRequest) -> Result<()> {
    if let Some(t) = req.tools.iter().find(|t| is_answer_tool(&t.name)) {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "{PROVIDER_TYPE} request: tool `{}`: names `{ANSWER_TOOL}` and \
                 `{ANSWER_TOOL}-…` are the Anthropic adapter's own (structured answers)",
                t.name
            ),
        ));
    }
    Ok(())
}

/// Translates a neutral request: system messages out, same-role runs merged, tool turns as
/// blocks, `max_tokens` always present, JSON through the answer tool (or an instruction).
pub(super) fn request_body<'a>(
    req: &'a ChatRequest,
    ctx: &RequestContext<'_>,
    provider: &ProviderId,
) -> Result<RequestBody<'a>> {
    check_conversation(req, PROVIDER_TYPE)?;
    check_tools(req)?;
    check_temperature(req)?;
    check_stops(req)?;
    check_forced_tool(req, ctx)?;
    let Conversation { system, messages } = conversation(req, Some(provider))?;
    if messages.is_empty() {
        return Err(Error::new(
            ErrorKind::InvalidRequest,
            "an Anthropic request needs at least one user or assistant message (system \
             messages alone are not a conversation)",
        ));
    }
    let mut system: Vec<Cow<'_, str>> = system.into_iter().map(Cow::Borrowed).collect();
    let mut tools: Vec<WireTool<'a>> = req.tools.iter().map(WireTool::from).collect();
    let mut tool_choice = (!req.tools.is_empty())
        .then_some(req.tool_choice.as_ref())
        .flatten()
        .map(|c| match c {
            ToolChoice::Auto => WireToolChoice::Auto,
            ToolChoice::None => WireToolChoice::None,
            ToolChoice::Required => WireToolChoice::Any,
            ToolChoice::Tool(name) => WireToolChoice::Tool {
                name: Cow::Borrowed(name),
                disable_parallel_tool_use: false,
            },
        });
    match structured::answer(req, ctx)? {
        None => {}
        Some(Answer::Instruction(instruction)) => system.push(Cow::Owned(instruction)),
        Some(Answer::Tool(tool)) => {
            // One call, one answer ("exactly one tool" with `any` or `tool`: the
            // implementing guide's "Parallel tool use").
            tool_choice = Some(WireToolChoice::Tool {
                name: tool.name.clone(),
                disable_parallel_tool_use: true,
            });
            tools.push(tool);
        }
    }
    Ok(RequestBody {
        model: ctx.model.to_owned(),
        max_tokens: req.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        system: (!system.is_empty()).then(|| system.join("\n\n")),
        messages,
        tools,
        tool_choice,
        temperature: req
            .temperature
            .map(|t| json_f32(t, "temperature"))
            .transpose()?,
        stop_sequences: &req.stop,
        stream: ctx.stream,
    })
}

#[derive(Debug, Deserialize)]
struct ResponseBody {
    #[serde(rename = "type")]
    kind: Option<String>,
    model: Option<String>,
    content: Option<Vec<ContentBlock>>,
    stop_reason: Option<String>,
    usage: Option<WireUsage>,
}

/// A content block of an answer (and of a stream's `content_block_start`). `text` and
/// `tool_use` blocks are the answer; `thinking` and `redacted_thinking` blocks are kept to be
/// sent back ([`TurnState`]); server tools' blocks and types added later are not the answer's
/// text or the caller's calls.
#[derive(Deserialize)]
pub(super) struct ContentBlock {
    #[serde(rename = "type")]
    pub(super) kind: String,
    pub(super) text: Option<String>,
    id: Option<String>,
    name: Option<String>,
    input: Option<serde_json::Value>,
    /// A `thinking` block's text and signature.
    pub(super) thinking: Option<String>,
    pub(super) signature: Option<String>,
    /// A `redacted_thinking` block's encrypted reasoning.
    pub(super) data: Option<String>,
}

impl std::fmt::Debug for ContentBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContentBlock")
            .field("kind", &self.kind)
            .field("id", &self.id)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// A `thinking` or `redacted_thinking` block as it is sent back: unchanged, "including the
/// signature" (extended thinking guide, "Preserving thinking blocks").
pub(super) fn thinking_block(
    kind: &str,
    thinking: Option<&str>,
    signature: Option<&str>,
    data: Option<&str>,
) -> Option<serde_json::Value> {
    match kind {
        "thinking" => Some(serde_json::json!({
            "type": "thinking",
            "thinking": thinking.unwrap_or_default(),
            "signature": signature.unwrap_or_default(),
        })),
        "redacted_thinking" => Some(serde_json::json!({
            "type": "redacted_thinking",
            "data": data.unwrap_or_default(),
        })),
        _ => None,
    }
}

/// The turn's state: its thinking blocks, when it had any.
pub(super) fn thinking_state(id: &ProviderId, blocks: Vec<serde_json::Value>) -> Option<TurnState> {
    (!blocks.is_empty()).then(|| TurnState::new(id.clone(), StateData::Anthropic { blocks }))
}

impl ContentBlock {
    /// A `tool_use` block as a call (its input `{}` when absent). `at` names the block for
    /// an error.
    ///
    /// # Errors
    ///
    /// `Decode` when the id or name is missing or empty, or the input is not an object.
    pub(super) fn to_call(&self, at: &str) -> Result<ToolCall> {
        let field = |v: &Option<String>, f: &str| {
            v.clone()
                .filter(|s| !s.is_empty())
                .ok_or_else(|| Error::decode(format!("{at} is a `tool_use` without `{f}`")))
        };
        let (id, name) = (field(&self.id, "id")?, field(&self.name, "name")?);
        let arguments = match &self.input {
            None => serde_json::Value::Object(serde_json::Map::new()),
            Some(v @ serde_json::Value::Object(_)) => v.clone(),
            Some(_) => {
                return Err(Error::decode(format!(
                    "{at} is a `tool_use` of `{name}` whose `input` is not an object"
                )));
            }
        };
        Ok(ToolCall::new(id, name, arguments))
    }
}

/// `usage` of a message (`message_start` and `message_delta` events carry the same fields).
#[derive(Debug, Default, Deserialize)]
pub(super) struct WireUsage {
    pub(super) input_tokens: Option<u64>,
    pub(super) output_tokens: Option<u64>,
    pub(super) cache_creation_input_tokens: Option<u64>,
    pub(super) cache_read_input_tokens: Option<u64>,
}

impl WireUsage {
    /// The usage: the prompt's full size as input, the cache reads as its cached part
    /// (<https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching>: `input_tokens`
    /// counts only the tokens after the last cache breakpoint; cache writes are billed above
    /// the input price, cache reads below it).
    pub(super) fn usage(&self) -> Usage {
        Usage::new(self.input().unwrap_or(0), self.output_tokens.unwrap_or(0))
            .with_cached_input(self.cache_read_input_tokens.unwrap_or(0))
    }

    /// Input tokens as the prompt's full size: uncached + cache writes + cache reads.
    pub(super) fn input(&self) -> Option<u64> {
        let parts = [
            self.input_tokens,
            self.cache_creation_input_tokens,
            self.cache_read_input_tokens,
        ];
        parts.iter().any(Option::is_some).then(|| {
            parts
                .iter()
                .flatten()
                .fold(0u64, |a, b| a.saturating_add(*b))
        })
    }
}

/// Parses a `200` Messages API body: the text blocks joined, the `tool_use` blocks as calls
/// — but the answer tool's input as the text ([`structured`]). An error object inside a 200
/// is classified like the matching status.
pub(super) fn parse_response(
    id: &ProviderId,
    raw: &RawResponse,
    model: &str,
) -> Result<ChatResponse> {
    let body: ResponseBody = decode_json(&raw.body, "a Messages API response")?;
    if body.kind.as_deref() == Some("error") {
        return Err(error::classify(None, &raw.body));
    }
    let content = body
        .content
        .ok_or_else(|| Error::decode("Messages API response has no `content` array"))?;
    let stop_reason = body.stop_reason;
    let (mut text, mut has_text) = (String::new(), false);
    let (mut calls, mut answer) = (Vec::new(), None);
    let mut thinking = Vec::new();
    for (i, block) in content.iter().enumerate() {
        match block.kind.as_str() {
            kind @ ("thinking" | "redacted_thinking") => thinking.extend(thinking_block(
                kind,
                block.thinking.as_deref(),
                block.signature.as_deref(),
                block.data.as_deref(),
            )),
            "text" => {
                has_text = true;
                text.extend(block.text.as_deref());
            }
            "tool_use" => {
                let call = block.to_call(&format!("Messages API response content[{i}]"))?;
                if answer.is_none() && is_answer_tool(&call.name) {
                    answer = Some(call.arguments.to_string());
                } else {
                    calls.push(call);
                }
            }
            _ => {}
        }
    }
    let explained = matches!(stop_reason.as_deref(), Some("max_tokens" | "refusal"));
    if !has_text && calls.is_empty() && answer.is_none() && !explained {
        return Err(Error::decode(format!(
            "Messages API response has no text or tool_use content block (stop_reason: {})",
            stop_reason.as_deref().unwrap_or("none")
        )));
    }
    let answered = answer.is_some();
    let text = answer.unwrap_or(text); // the answer tool's input is the whole answer
    let mut resp = ChatResponse::new(id.clone(), body.model.as_deref().unwrap_or(model), text);
    resp.finish_reason = stop_reason.as_deref().map(|s| finish(s, answered));
    resp.tool_calls = calls;
    resp.usage = body.usage.as_ref().map(WireUsage::usage);
    resp.provider_state = thinking_state(id, thinking);
    Ok(resp)
}

/// `stop_reason` → neutral reason; `tool_use` is `Stop` when the call was the answer tool's.
pub(super) fn finish(stop_reason: &str, answered: bool) -> FinishReason {
    match finish_reason(stop_reason) {
        FinishReason::ToolCalls if answered => FinishReason::Stop,
        other => other,
    }
}

/// `stop_reason` → neutral reason.
pub(super) fn finish_reason(stop_reason: &str) -> FinishReason {
    match stop_reason {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "max_tokens" => FinishReason::Length,
        "refusal" => FinishReason::ContentFilter,
        "tool_use" => FinishReason::ToolCalls,
        other => FinishReason::Other(other.to_owned()),
    }
}

#[cfg(test)]
mod tests {

    /// A temperature of 1.5 went out where Anthropic takes 0.0 to 1.0: refused before
    /// sending (the router asks another provider), by the check and by the body's builder.
    #[test]
    fn a_temperature_over_one_is_refused() {
        for ok in [0.0, 0.7, 1.0] {
            assert!(
                check(&ChatRequest::from_prompt("x").temperature(ok)).is_ok(),
                "{ok}"
            );
        }
        for bad in [1.5, 2.0, -0.1] {
            let req = ChatRequest::from_prompt("x").temperature(bad);
            let err = check(&req).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Unsupported, "{bad}");
            assert!(err.message().contains("it takes 0.0 to 1.0"), "{err}");
            let ctx = RequestContext::new("claude", None);
            assert_eq!(
                request_body(&req, &ctx, &ProviderId::new("a"))
                    .unwrap_err()
                    .kind(),
                ErrorKind::Unsupported
            );
        }
    }

    /// A stop sequence with no visible character went out where Anthropic answers 400:
    /// refused before sending, naming it; visible ones (with whitespace around) go.
    #[test]
    fn a_blank_stop_sequence_is_refused() {
        let ok = ChatRequest::from_prompt("x")
            .stop("\n\nHuman:")
            .stop(" end ");
        assert!(check(&ok).is_ok());
        for bad in ["\n\n", " ", ""] {
            let req = ChatRequest::from_prompt("x").stop("END").stop(bad);
            let err = check(&req).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Unsupported, "{bad:?}");
            assert!(err.message().contains("stop sequence 1"), "{err}");
            let ctx = RequestContext::new("claude", None);
            assert!(
                request_body(&req, &ctx, &ProviderId::new("a")).is_err(),
                "{bad:?}"
            );
        }
    }

    use super::*;
    use crate::types::{Message, Tool};

    fn body(req: &ChatRequest) -> serde_json::Value {
        let ctx = RequestContext::new("claude-x", None);
        serde_json::to_value(request_body(req, &ctx, &ProviderId::new("a")).unwrap()).unwrap()
    }

    #[test]
    fn merges_runs_of_one_role_and_lifts_every_system_message() {
        let req = ChatRequest::new()
            .system("Be brief.")
            .user("a")
            .user("b")
            .message(Message::system("Use French."))
            .assistant("c");
        let v = body(&req);
        assert_eq!(v["system"], "Be brief.\n\nUse French.");
        assert_eq!(
            v["messages"],
            serde_json::json!([
                {"role": "user", "content": "a\n\nb"},
                {"role": "assistant", "content": "c"}
            ])
        );
        assert_eq!(v["max_tokens"], DEFAULT_MAX_TOKENS);
        assert!(v.get("stream").is_none());
        assert!(v.get("temperature").is_none());
        assert!(v.get("stop_sequences").is_none());
    }

    #[test]
    fn tool_choices_map_to_anthropics_and_need_tools() {
        let weather = Tool::new("get_weather", serde_json::json!({"type": "object"}));
        let with = |c: ToolChoice| {
            body(
                &ChatRequest::from_prompt("x")
                    .tool(weather.clone())
                    .tool_choice(c),
            )
        };
        assert_eq!(
            with(ToolChoice::Auto)["tool_choice"],
            serde_json::json!({"type": "auto"})
        );
        assert_eq!(
            with(ToolChoice::None)["tool_choice"],
            serde_json::json!({"type": "none"})
        );
        assert_eq!(
            with(ToolChoice::Required)["tool_choice"],
            serde_json::json!({"type": "any"})
        );
        assert_eq!(
            with(ToolChoice::named("get_weather"))["tool_choice"],
            serde_json::json!({"type": "tool", "name": "get_weather"})
        );
        let v = body(&ChatRequest::from_prompt("x").tool(weather.clone()));
        assert!(
            v.get("tool_choice").is_none(),
            "Anthropic's default when unset"
        );
        assert_eq!(
            v["tools"],
            serde_json::json!([{"name": "get_weather", "input_schema": {"type": "object"}}])
        );
        let v = body(&ChatRequest::from_prompt("x").tool_choice(ToolChoice::None));
        assert!(v.get("tool_choice").is_none() && v.get("tools").is_none());

        let ctx = RequestContext::new("m", None);
        let req = ChatRequest::from_prompt("x").tool_choice(ToolChoice::Required);
        let err = request_body(&req, &ctx, &ProviderId::new("a")).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidRequest);
        let own = ChatRequest::from_prompt("x").tool(Tool::new(
            "json_answer-x",
            serde_json::json!({"type": "object"}),
        ));
        let err = check(&own).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        assert!(err.message().contains("`json_answer-x`"), "{err}");
    }

    fn parse(body: serde_json::Value) -> Result<ChatResponse> {
        let raw = RawResponse::new(200, Default::default(), body.to_string());
        parse_response(&ProviderId::new("claude"), &raw, "m")
    }

    #[test]
    fn the_answer_tools_input_is_the_text_and_other_calls_are_calls() {
        let resp = parse(serde_json::json!({
            "type": "message", "stop_reason": "tool_use",
            "content": [{"type": "tool_use", "id": "t1", "name": "json_answer-p", "input": {"a": [1, 2]}}]
        }))
        .unwrap();
        assert_eq!(resp.text, r#"{"a":[1,2]}"#);
        assert!(resp.tool_calls.is_empty());
        assert_eq!(resp.finish_reason, Some(FinishReason::Stop));

        let resp = parse(serde_json::json!({
            "type": "message", "stop_reason": "tool_use",
            "content": [{"type": "tool_use", "id": "t1", "name": "f"}]
        }))
        .unwrap();
        assert_eq!(
            resp.tool_calls,
            vec![ToolCall::new("t1", "f", serde_json::json!({}))]
        );
        assert_eq!(resp.finish_reason, Some(FinishReason::ToolCalls));

        for (content, want) in [
            (
                serde_json::json!([{"type": "tool_use", "name": "f", "input": {}}]),
                "content[0] is a `tool_use` without `id`",
            ),
            (
                serde_json::json!([{"type": "text", "text": "a"}, {"type": "tool_use", "id": "t", "input": {}}]),
                "content[1] is a `tool_use` without `name`",
            ),
            (
                serde_json::json!([{"type": "tool_use", "id": "t", "name": "f", "input": "x"}]),
                "not an object",
            ),
            (
                serde_json::json!([{"type": "thinking", "thinking": "…"}]),
                "no text or tool_use",
            ),
        ] {
            let err = parse(serde_json::json!({"type": "message", "content": content, "stop_reason": "tool_use"})).unwrap_err();
            assert!(err.is_decode(), "{want}");
            assert!(err.message().contains(want), "{want}: {err}");
        }
    }

    /// The extended thinking guide's answer with tool use: a `thinking` block (and a
    /// `redacted_thinking` one) before the call; kept on the turn, sent back first and
    /// unchanged to the provider that gave them, and to no other.
    #[test]
    fn thinking_blocks_are_kept_and_sent_back_first_only_to_their_provider() {
        let resp = parse(serde_json::json!({"type": "message", "stop_reason": "tool_use", "content": [
            {"type": "thinking", "thinking": "Let me check.", "signature": "c2ln"},
            {"type": "redacted_thinking", "data": "ZW5j"},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
        ]}))
        .unwrap();
        assert_eq!(resp.text, "");
        let state = resp.provider_state.clone().unwrap();
        assert_eq!(state.provider(), &ProviderId::new("claude"));
        let req = ChatRequest::new()
            .user("Weather in Paris?")
            .message(resp.to_message())
            .message(crate::types::Message::tool_result("toolu_1", "18 C"));
        let ctx = RequestContext::new("claude", None);
        let sent = |to: &str| {
            serde_json::to_value(request_body(&req, &ctx, &ProviderId::new(to)).unwrap()).unwrap()
        };
        assert_eq!(
            sent("claude")["messages"][1]["content"],
            serde_json::json!([
                {"type": "thinking", "thinking": "Let me check.", "signature": "c2ln"},
                {"type": "redacted_thinking", "data": "ZW5j"},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
            ])
        );
        assert_eq!(
            sent("other")["messages"][1]["content"],
            serde_json::json!([
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
            ])
        );
    }

    #[test]
    fn a_forced_tool_with_thinking_on_is_refused_before_sending() {
        let tool = crate::types::Tool::new("f", serde_json::json!({"type": "object"}));
        let on = serde_json::json!({"type": "enabled", "budget_tokens": 1024});
        let ctx = RequestContext::new("claude", None);
        let id = ProviderId::new("a");
        for (choice, thinking, refused) in [
            (ToolChoice::Required, Some(on.clone()), true),
            (ToolChoice::named("f"), Some(on.clone()), true),
            (ToolChoice::Auto, Some(on.clone()), false),
            (ToolChoice::Required, None, false),
            (
                ToolChoice::Required,
                Some(serde_json::json!({"type": "disabled"})),
                false,
            ),
        ] {
            let mut req = ChatRequest::from_prompt("x")
                .tool(tool.clone())
                .tool_choice(choice.clone());
            if let Some(t) = &thinking {
                req = req.extra_body("thinking", t.clone());
            }
            let got = request_body(&req, &ctx, &id).err().map(|e| e.kind());
            let want = refused.then_some(ErrorKind::Unsupported);
            assert_eq!(got, want, "{choice:?} {thinking:?}");
        }
    }

    #[test]
    fn a_conversation_of_only_system_messages_is_rejected() {
        let req = ChatRequest::new().system("hi");
        let ctx = RequestContext::new("m", None);
        let err = request_body(&req, &ctx, &ProviderId::new("a")).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidRequest);
    }

    #[test]
    fn usage_input_counts_cache_reads_and_writes() {
        let u = WireUsage {
            input_tokens: Some(10),
            cache_creation_input_tokens: Some(5),
            cache_read_input_tokens: Some(100),
            output_tokens: Some(1),
        };
        assert_eq!(u.input(), Some(115));
        assert_eq!(u.usage(), Usage::new(115, 1).with_cached_input(100));
        assert_eq!(WireUsage::default().input(), None);
    }

    #[test]
    fn stop_reasons_map_to_neutral_ones() {
        for (wire, neutral) in [
            ("end_turn", FinishReason::Stop),
            ("stop_sequence", FinishReason::Stop),
            ("max_tokens", FinishReason::Length),
            ("refusal", FinishReason::ContentFilter),
            ("tool_use", FinishReason::ToolCalls),
            ("pause_turn", FinishReason::Other("pause_turn".into())),
        ] {
            assert_eq!(finish_reason(wire), neutral, "{wire}");
        }
    }
}
