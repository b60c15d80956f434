//! Chat Completions: the request body and the `chat.completion` response, tool calls
//! included.

use std::borrow::Cow;

use serde_json::Value;
use url::Url;

use super::error::{ApiError, from_api_error, snippet};
use super::message::{check, wire_message, wire_tool, wire_tool_choice};
use super::wire::{
    ChatBody, ChatCompletion, Choice, Content, JsonSchema, StreamOptions, ToolCallWire,
    WireResponseFormat, WireUsage,
};
use crate::error::{Error, ErrorKind, Result};
use crate::http::{HttpRequest, RawResponse};
use crate::id::ProviderId;
use crate::provider::RequestContext;
use crate::provider::body::json_f32;
use crate::provider::tools::{made_up_call_id, parse_arguments, portable_id};
use crate::types::{ChatRequest, ChatResponse, FinishReason, ResponseFormat, ToolCall, Usage};

/// Builds `POST url` with the Chat Completions body (no credential header: the caller adds
/// the one its host expects); `kind` (`openai`, `azure`) names the format in a refusal.
/// `stream_usage`: a stream asks for its usage (`stream_options.include_usage`), which an
/// Azure api-version before 2024-09-01-preview refuses.
///
/// A `json_schema` answer's `name` is sent in the characters the API accepts
/// (`^[a-zA-Z0-9_-]{1,64}$`, OpenAI's API reference for `response_format.json_schema.name`):
/// others become `_`, and it is cut to 64 (an empty one is `response`). It is a label the
/// model sees, not a key the answer is matched by.
///
/// System messages stay where they are. `max_tokens` is sent, not `max_completion_tokens`:
/// every OpenAI-compatible host (Groq, Together, vLLM, Ollama, Azure api-versions before
/// 2024-09-01) accepts it, while `max_completion_tokens` is newer and unknown to several of
/// them. OpenAI's reasoning models reject `max_tokens`; configure them without a `max_tokens`
/// on the request.
///
/// # Errors
///
/// `Config` without a model; `InvalidRequest` without messages; what [`check`] refuses (the
/// router asks before it sends, through `check_chat`; a direct caller is refused here).
pub(crate) fn build_request(
    id: &ProviderId,
    kind: &str,
    url: Url,
    req: &ChatRequest,
    ctx: &RequestContext<'_>,
    stream_usage: bool,
) -> Result<HttpRequest> {
    if ctx.model.trim().is_empty() {
        return Err(Error::config(format!(
            "no model for provider `{id}`: set `providers.{id}.model` or the request's model"
        )));
    }
    if req.messages.is_empty() {
        return Err(Error::new(
            ErrorKind::InvalidRequest,
            "the chat request has no messages",
        ));
    }
    check(id, req, kind)?;
    let response_format = match &req.response_format {
        ResponseFormat::Text => None,
        ResponseFormat::JsonObject => Some(WireResponseFormat::JsonObject),
        ResponseFormat::JsonSchema { name, schema } => Some(WireResponseFormat::JsonSchema {
            json_schema: JsonSchema {
                name: schema_name(name),
                schema,
            },
        }),
    };
    let body = ChatBody {
        model: ctx.model,
        messages: req.messages.iter().map(wire_message).collect(),
        max_tokens: req.max_tokens,
        temperature: req
            .temperature
            .map(|t| json_f32(t, "temperature"))
            .transpose()?,
        stop: &req.stop,
        response_format,
        tools: req.tools.iter().map(wire_tool).collect(),
        tool_choice: wire_tool_choice(req),
        stream: ctx.stream,
        stream_options: (ctx.stream && stream_usage).then_some(StreamOptions {
            include_usage: true,
        }),
    };
    HttpRequest::post_json(url, &body)
}

/// The most characters OpenAI takes in a `json_schema` name.
const MAX_SCHEMA_NAME: usize = 64;

/// `name` as OpenAI accepts a `json_schema` name (see [`build_request`]).
fn schema_name(name: &str) -> Cow<'_, str> {
    let fits = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if !name.is_empty() && name.len() <= MAX_SCHEMA_NAME && name.chars().all(fits) {
        return Cow::Borrowed(name);
    }
    if name.is_empty() {
        return Cow::Borrowed("response");
    }
    let mut mended = portable_id(name);
    mended.truncate(MAX_SCHEMA_NAME); // ASCII after `portable_id`: a char boundary
    Cow::Owned(mended)
}

/// Parses a 2xx `chat.completion` body: the first choice's text and tool calls.
///
/// `request_id` is the one read from the headers (`x-request-id`); the completion's own
/// `id` is used when the headers carry none. An answer with calls finishes with
/// [`FinishReason::ToolCalls`] even when the host says `stop` (OpenAI does, when the tool
/// choice names a function).
pub(crate) fn parse_response(
    id: &ProviderId,
    raw: &RawResponse,
    model: &str,
    request_id: Option<String>,
) -> Result<ChatResponse> {
    let decode = |what: String| {
        Error::decode(what)
            .with_provider(id.clone())
            .with_status(raw.status)
    };
    let wire: ChatCompletion = serde_json::from_slice(&raw.body).map_err(|e| {
        decode(if looks_like_json(&raw.body) {
            format!("malformed chat.completion: {e}")
        } else {
            format!(
                "expected a chat.completion JSON object, got: {}",
                if raw.body.is_empty() {
                    "an empty body".to_owned()
                } else {
                    snippet(&raw.body)
                }
            )
        })
    })?;
    if let Some(err) = wire.error.as_ref().and_then(ApiError::from_value) {
        return Err(from_api_error(id, &err).with_status(raw.status));
    }
    let choice = first_choice(wire.choices).map_err(|what| decode(what.to_owned()))?;
    let message = choice
        .message
        .ok_or_else(|| decode("`choices[0]` has no `message`".to_owned()))?;
    let text = content_text(message.content)
        .map_err(|what| decode(format!("`choices[0].message.content` {what}")))?;
    let tool_calls = answer_calls(message.tool_calls.unwrap_or_default()).map_err(decode)?;
    let finish_reason = choice.finish_reason.as_deref().map(finish_reason);
    if finish_reason == Some(FinishReason::Other("error".to_owned())) {
        return Err(ended_with_error(id).with_status(raw.status));
    }
    let mut resp = ChatResponse::new(
        id.clone(),
        wire.model.unwrap_or_else(|| model.to_owned()),
        text,
    );
    resp.finish_reason = calls_finish(finish_reason, !tool_calls.is_empty());
    resp.tool_calls = tool_calls;
    resp.usage = wire.usage.as_ref().and_then(usage);
    resp.request_id = request_id.or_else(|| wire.id.map(Cow::into_owned));
    Ok(resp)
}

/// The choice with index 0 (or the first one).
fn first_choice(choices: Option<Vec<Choice<'_>>>) -> std::result::Result<Choice<'_>, &'static str> {
    let mut choices = choices.ok_or("chat.completion has no `choices`")?;
    if choices.is_empty() {
        return Err("chat.completion has an empty `choices` array");
    }
    let first = choices
        .iter()
        .position(|c| c.index.unwrap_or(0) == 0)
        .unwrap_or(0);
    Ok(choices.swap_remove(first))
}

/// The answer's calls, in order. A call without an id (some compatible hosts) gets one made
/// up from its position, name and arguments, so its result can still name it.
///
/// # Errors
///
/// A description naming the call (its index, and its tool when known) that is not a function
/// call, has no name, or whose arguments are not a JSON object.
fn answer_calls(wire: Vec<ToolCallWire>) -> std::result::Result<Vec<ToolCall>, String> {
    let mut calls = Vec::with_capacity(wire.len());
    for (i, c) in wire.into_iter().enumerate() {
        let at = format!("`choices[0].message.tool_calls[{i}]`");
        if let Some(kind) = c.kind.as_deref().filter(|k| *k != "function") {
            return Err(format!("{at} is a `{kind}` call, not a function call"));
        }
        let function = c
            .function
            .ok_or_else(|| format!("{at} has no `function`"))?;
        let name = function
            .name
            .filter(|n| !n.is_empty())
            .ok_or_else(|| format!("{at} has no `function.name`"))?;
        let arguments = match function.arguments {
            None | Some(Value::Null) => Value::Object(serde_json::Map::new()),
            Some(Value::String(text)) => {
                parse_arguments(&name, &text).map_err(|e| format!("{at}: {}", e.message()))?
            }
            Some(object @ Value::Object(_)) => object,
            Some(_) => {
                return Err(format!(
                    "{at}: the arguments of the call of `{name}` are neither a JSON string nor \
                     an object"
                ));
            }
        };
        let id =
            c.id.filter(|id| !id.is_empty())
                .unwrap_or_else(|| made_up_call_id(i, &name, &arguments));
        calls.push(ToolCall::new(id, name, arguments));
    }
    Ok(calls)
}

/// The finish reason of an answer that made calls: [`FinishReason::ToolCalls`] where the host
/// said `stop` or nothing; a cut (`length`) or a filter stays what it is.
pub(crate) fn calls_finish(reason: Option<FinishReason>, made_calls: bool) -> Option<FinishReason> {
    match reason {
        None | Some(FinishReason::Stop) if made_calls => Some(FinishReason::ToolCalls),
        other => other,
    }
}

/// The error for a choice that finished with `finish_reason: "error"` (OpenRouter and
/// others, when the upstream model failed mid-answer).
pub(crate) fn ended_with_error(id: &ProviderId) -> Error {
    Error::new(
        ErrorKind::Server,
        "the provider ended the answer with finish_reason \"error\"",
    )
    .with_provider(id.clone())
    .with_code("error")
}

fn looks_like_json(body: &[u8]) -> bool {
    matches!(
        body.iter().find(|b| !b.is_ascii_whitespace()),
        Some(b'{' | b'[')
    )
}

/// The text of a message's `content`: a string, `null` (tool calls, refusals: empty text),
/// or an array of text parts.
fn content_text(content: Content) -> std::result::Result<String, &'static str> {
    match content {
        Content::Absent => Ok(String::new()),
        Content::Text(s) => Ok(s),
        Content::Parts(parts) => parts
            .iter()
            .map(|p| match p.get("text") {
                Some(Value::String(s)) => Ok(s.as_str()),
                _ => Err("has a part without `text`"),
            })
            .collect::<std::result::Result<String, _>>(),
        Content::Other => Err("is neither a string, null nor an array of text parts"),
    }
}

/// OpenAI's finish reasons.
pub(crate) fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "stop" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "content_filter" => FinishReason::ContentFilter,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        other => FinishReason::Other(other.to_owned()),
    }
}

/// Usage when both counts are present (an absent count is unknown, never zero), with the
/// prompt's cached tokens where stated.
pub(crate) fn usage(u: &WireUsage) -> Option<Usage> {
    let cached = u
        .prompt_tokens_details
        .as_ref()
        .and_then(|d| d.cached_tokens)
        .unwrap_or(0);
    Some(Usage::new(u.prompt_tokens?, u.completion_tokens?).with_cached_input(cached))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Message;
    use reqwest::header::HeaderMap;

    fn id() -> ProviderId {
        ProviderId::new("openai")
    }

    fn body_of(req: &ChatRequest, ctx: &RequestContext<'_>) -> Value {
        let url: Url = "http://127.0.0.1:1/v1/chat/completions".parse().unwrap();
        let http = build_request(&id(), "openai", url, req, ctx, true).unwrap();
        serde_json::from_slice(http.json_body().unwrap()).unwrap()
    }

    #[test]
    fn writes_every_request_field_and_omits_unset_ones() {
        let req = ChatRequest::new()
            .system("be brief")
            .user("hi")
            .message(Message::assistant("hello"))
            .max_tokens(5)
            .temperature(0.5)
            .stop("END");
        let ctx = RequestContext::new("gpt-4o-mini", None);
        let body = body_of(&req, &ctx);
        assert_eq!(
            body,
            serde_json::json!({
                "model": "gpt-4o-mini",
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "hello"},
                ],
                "max_tokens": 5,
                "temperature": 0.5,
                "stop": ["END"],
            })
        );
        let bare = body_of(&ChatRequest::from_prompt("x"), &ctx);
        assert_eq!(bare.as_object().unwrap().len(), 2, "{bare}");
    }

    #[test]
    fn json_modes_and_streaming_options() {
        let ctx = RequestContext::new("m", None).streaming();
        let req = ChatRequest::from_prompt("x").response_format(ResponseFormat::JsonSchema {
            name: "answer".into(),
            schema: serde_json::json!({"type": "object"}),
        });
        let body = body_of(&req, &ctx);
        assert_eq!(
            body["response_format"],
            serde_json::json!({"type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": "object"}}})
        );
        assert_eq!(body["stream"], true);
        assert_eq!(
            body["stream_options"],
            serde_json::json!({"include_usage": true})
        );
        let req = ChatRequest::from_prompt("x").response_format(ResponseFormat::JsonObject);
        let body = body_of(&req, &RequestContext::new("m", None));
        assert_eq!(
            body["response_format"],
            serde_json::json!({"type": "json_object"})
        );
        assert!(body.get("stream").is_none());
    }

    /// A `json_schema` name outside `^[a-zA-Z0-9_-]{1,64}$` (OpenAI's API reference) was sent
    /// as written, and refused 400: it is sent in those characters, cut to 64.
    #[test]
    fn a_schema_name_is_sent_in_the_characters_openai_takes() {
        let long = "n".repeat(70);
        let table = [
            ("answer", "answer".to_owned()),
            ("Calendar-Event_2", "Calendar-Event_2".to_owned()),
            ("my schema!", "my_schema_".to_owned()),
            ("día", "d_a".to_owned()),
            ("", "response".to_owned()),
            (long.as_str(), "n".repeat(64)),
        ];
        for (name, want) in table {
            let req = ChatRequest::from_prompt("x").response_format(ResponseFormat::JsonSchema {
                name: name.into(),
                schema: serde_json::json!({"type": "object"}),
            });
            let body = body_of(&req, &RequestContext::new("m", None));
            assert_eq!(
                body["response_format"]["json_schema"]["name"], want,
                "{name}"
            );
        }
    }

    /// Five stop sequences went out, where the API takes four (`maxItems: 4`): refused
    /// before sending, naming the field and the rule.
    #[test]
    fn more_than_four_stop_sequences_are_refused_before_sending() {
        let url: Url = "http://127.0.0.1:1/".parse().unwrap();
        let ctx = RequestContext::new("m", None);
        let four = ["a", "b", "c", "d"]
            .into_iter()
            .fold(ChatRequest::from_prompt("x"), |r, s| r.stop(s));
        assert_eq!(body_of(&four, &ctx)["stop"].as_array().unwrap().len(), 4);
        let five = four.stop("e");
        let err = build_request(&id(), "openai", url, &five, &ctx, true).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        assert!(
            err.message()
                .contains("5 stop sequences: `stop` takes at most 4"),
            "{err}"
        );
    }

    /// Found by the router's scripted tests: an infinite temperature went out as `null` (a
    /// silent default), and `0.7` as `0.699999988079071`.
    #[test]
    fn a_temperature_is_sent_as_written_and_a_non_finite_one_is_refused() {
        let ctx = RequestContext::new("m", None);
        let body = body_of(&ChatRequest::from_prompt("x").temperature(0.7), &ctx);
        assert_eq!(body["temperature"].to_string(), "0.7");
        let url: Url = "http://127.0.0.1:1/".parse().unwrap();
        for bad in [f32::INFINITY, f32::NAN] {
            let req = ChatRequest::from_prompt("x").temperature(bad);
            let err = build_request(&id(), "openai", url.clone(), &req, &ctx, true).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidRequest);
            assert!(err.message().contains("temperature"), "{err}");
        }
    }

    #[test]
    fn refuses_requests_without_messages_or_model() {
        let url: Url = "http://127.0.0.1:1/".parse().unwrap();
        let err = build_request(
            &id(),
            "openai",
            url.clone(),
            &ChatRequest::new(),
            &RequestContext::new("m", None),
            true,
        )
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidRequest);
        let err = build_request(
            &id(),
            "openai",
            url,
            &ChatRequest::from_prompt("x"),
            &RequestContext::new(" ", None),
            true,
        )
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config);
        assert!(err.message().contains("providers.openai.model"), "{err}");
    }

    #[test]
    fn content_forms() {
        let read = |json: &str| {
            let m: super::super::wire::ResponseMessage = serde_json::from_str(json).unwrap();
            content_text(m.content)
        };
        assert_eq!(
            read(r#"{"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}"#).unwrap(),
            "ab"
        );
        assert_eq!(read(r#"{"content":"hi \u00e9"}"#).unwrap(), "hi é");
        assert_eq!(read(r#"{"content":null}"#).unwrap(), "");
        assert_eq!(read(r#"{"refusal":"no"}"#).unwrap(), "");
        assert!(read(r#"{"content":[{"type":"image_url"}]}"#).is_err());
        assert!(read(r#"{"content":[3]}"#).is_err());
        for other in ["3", "true", "-1.5", r#"{"text":"x"}"#] {
            let err = read(&format!(r#"{{"content":{other}}}"#)).unwrap_err();
            assert!(err.contains("neither"), "{other}: {err}");
        }
    }

    #[test]
    fn falls_back_to_the_completion_id_and_requested_model() {
        let raw = RawResponse::new(
            200,
            HeaderMap::new(),
            r#"{"id":"chatcmpl-1","choices":[{"message":{"content":"ok"},"finish_reason":"length"}]}"#,
        );
        let resp = parse_response(&id(), &raw, "asked-for", None).unwrap();
        assert_eq!(resp.request_id.as_deref(), Some("chatcmpl-1"));
        assert_eq!(resp.model, "asked-for");
        assert_eq!(resp.finish_reason, Some(FinishReason::Length));
        assert_eq!(resp.usage, None);
    }

    #[test]
    fn reads_the_prompts_cached_tokens_where_stated() {
        // The chat completion object's `usage.prompt_tokens_details.cached_tokens`
        // (https://platform.openai.com/docs/api-reference/chat/object,
        // https://platform.openai.com/docs/guides/prompt-caching); null or absent on
        // compatible hosts that do not cache.
        let read = |usage: &str| {
            let body = format!(
                r#"{{"id":"c","choices":[{{"message":{{"content":"ok"}},"finish_reason":"stop"}}],"usage":{usage}}}"#
            );
            let raw = RawResponse::new(200, HeaderMap::new(), body);
            parse_response(&id(), &raw, "m", None).unwrap().usage
        };
        let cached = r#"{"prompt_tokens":2006,"completion_tokens":300,"total_tokens":2306,
            "prompt_tokens_details":{"cached_tokens":1920,"audio_tokens":0},
            "completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,
            "accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}"#;
        assert_eq!(
            read(cached),
            Some(Usage::new(2006, 300).with_cached_input(1920))
        );
        for none in [
            r#"{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}"#,
            r#"{"prompt_tokens":9,"completion_tokens":2,"prompt_tokens_details":null}"#,
            r#"{"prompt_tokens":9,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":null}}"#,
        ] {
            assert_eq!(read(none), Some(Usage::new(9, 2)), "{none}");
        }
        // A host that says more were cached than were sent is believed up to the prompt.
        let over = r#"{"prompt_tokens":9,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":50}}"#;
        assert_eq!(read(over).map(|u| u.cached_input_tokens), Some(9));
    }

    fn answer(message: &str, finish: &str) -> Result<ChatResponse> {
        let body = format!(
            r#"{{"id":"c","choices":[{{"index":0,"message":{message},"finish_reason":{finish}}}]}}"#
        );
        parse_response(
            &id(),
            &RawResponse::new(200, HeaderMap::new(), body),
            "m",
            None,
        )
    }

    #[test]
    fn reads_tool_calls_in_order_with_their_arguments_as_json() {
        let resp = answer(
            r#"{"role":"assistant","content":"Checking.","tool_calls":[
                {"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},
                {"id":"call_b","type":"function","function":{"name":"get_time","arguments":"{}"}}]}"#,
            r#""tool_calls""#,
        )
        .unwrap();
        assert_eq!(resp.text, "Checking.");
        assert_eq!(resp.finish_reason, Some(FinishReason::ToolCalls));
        assert_eq!(
            resp.tool_calls,
            vec![
                ToolCall::new(
                    "call_a",
                    "get_weather",
                    serde_json::json!({"city": "Paris"})
                ),
                ToolCall::new("call_b", "get_time", serde_json::json!({})),
            ]
        );
        // A forced call finishes with "stop" on OpenAI; an empty list is no call.
        let forced = answer(
            r#"{"content":null,"tool_calls":[{"id":"x","type":"function","function":{"name":"f","arguments":""}}]}"#,
            r#""stop""#,
        )
        .unwrap();
        assert_eq!(forced.finish_reason, Some(FinishReason::ToolCalls));
        assert_eq!(forced.tool_calls[0].arguments, serde_json::json!({}));
        let none = answer(r#"{"content":"hi","tool_calls":[]}"#, r#""stop""#).unwrap();
        assert_eq!(none.finish_reason, Some(FinishReason::Stop));
        assert!(none.tool_calls.is_empty());
    }

    #[test]
    fn lenient_hosts_calls_get_ids_and_object_arguments() {
        let resp = answer(
            r#"{"tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]}"#,
            "null",
        )
        .unwrap();
        let call = &resp.tool_calls[0];
        assert_eq!(call.arguments, serde_json::json!({"a": 1}));
        assert_eq!(
            call.id,
            crate::provider::tools::made_up_call_id(0, "f", &call.arguments)
        );
        assert_eq!(resp.finish_reason, Some(FinishReason::ToolCalls));
        // A cut answer stays cut.
        assert_eq!(
            calls_finish(Some(FinishReason::Length), true),
            Some(FinishReason::Length)
        );
    }

    #[test]
    fn a_call_that_cannot_be_read_is_a_decode_error_naming_it() {
        let cases = [
            (
                r#"{"tool_calls":[{"id":"a","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Par"}}]}"#,
                "`choices[0].message.tool_calls[0]`: the arguments of the call of `get_weather` are not JSON",
            ),
            (
                r#"{"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"[1]"}}]}"#,
                "not an object",
            ),
            (
                r#"{"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":7}}]}"#,
                "neither a JSON string nor an object",
            ),
            (
                r#"{"tool_calls":[{"id":"a","type":"function","function":{"arguments":"{}"}}]}"#,
                "`choices[0].message.tool_calls[0]` has no `function.name`",
            ),
            (
                r#"{"tool_calls":[{"id":"a","type":"function"},{"id":"b"}]}"#,
                "tool_calls[0]` has no `function`",
            ),
            (
                r#"{"tool_calls":[{"id":"a","type":"custom","custom":{"name":"f","input":"x"}}]}"#,
                "is a `custom` call, not a function call",
            ),
        ];
        for (message, want) in cases {
            let err = answer(message, r#""tool_calls""#).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Decode, "{want}");
            assert!(err.message().contains(want), "{want}: {}", err.message());
            assert_eq!(err.provider(), Some(&id()));
            assert_eq!(err.status(), Some(200));
            assert!(!err.message().contains("Par"), "{err}");
        }
    }

    #[test]
    fn writes_tools_choices_and_a_tool_conversation() {
        let weather = crate::types::Tool::new("get_weather", serde_json::json!({"type": "object"}))
            .description("Weather in a city.");
        let req = ChatRequest::from_prompt("Weather in Paris and Rome?")
            .tool(weather)
            .tool(crate::types::Tool::new(
                "get_time",
                serde_json::json!({"type": "object"}),
            ))
            .tool_choice(crate::types::ToolChoice::named("get_weather"))
            .message(Message::assistant_calls(
                "",
                vec![
                    ToolCall::new(
                        "call_1",
                        "get_weather",
                        serde_json::json!({"city": "Paris"}),
                    ),
                    ToolCall::new("call_2", "get_weather", serde_json::json!({"city": "Rome"})),
                ],
            ))
            .message(Message::tool_result("call_1", "18 C"))
            .message(Message::tool_result("call_2", "21 C"));
        let body = body_of(&req, &RequestContext::new("m", None));
        assert_eq!(
            body["tools"],
            serde_json::json!([
                {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.", "parameters": {"type": "object"}}},
                {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
            ])
        );
        assert_eq!(
            body["tool_choice"],
            serde_json::json!({"type": "function", "function": {"name": "get_weather"}})
        );
        assert_eq!(body["messages"][1]["content"], Value::Null);
        assert_eq!(body["messages"][1]["tool_calls"][1]["id"], "call_2");
        assert_eq!(
            body["messages"][1]["tool_calls"][1]["function"]["arguments"],
            r#"{"city":"Rome"}"#
        );
        assert_eq!(
            body["messages"][3],
            serde_json::json!({"role": "tool", "content": "21 C", "tool_call_id": "call_2"})
        );
        // A conversation the format cannot carry is refused before it is written.
        let url: Url = "http://127.0.0.1:1/".parse().unwrap();
        let cut = ChatRequest::from_prompt("x").message(Message::assistant_calls(
            "",
            vec![ToolCall::new(
                "call_1",
                "get_weather",
                serde_json::json!({}),
            )],
        ));
        let err = build_request(
            &id(),
            "openai",
            url,
            &cut,
            &RequestContext::new("m", None),
            true,
        )
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
    }
}
