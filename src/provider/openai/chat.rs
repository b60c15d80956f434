//! Chat Completions: the request body and the `chat.completion` response.

use std::borrow::Cow;

use serde_json::Value;
use url::Url;

use super::error::{from_api_error, snippet, ApiError};
use super::wire::{
    ChatBody, ChatCompletion, Content, JsonSchema, StreamOptions, WireMessage, WireResponseFormat,
    WireUsage,
};
use crate::error::{Error, ErrorKind, Result};
use crate::http::{HttpRequest, RawResponse};
use crate::id::ProviderId;
use crate::provider::body::json_f32;
use crate::provider::RequestContext;
use crate::types::{ChatRequest, ChatResponse, FinishReason, ResponseFormat, Usage};

/// Builds `POST url` with the Chat Completions body (no credential header: the caller adds
/// the one its host expects).
///
/// System messages stay where they are. `max_tokens` is sent, not `max_completion_tokens`:
/// every OpenAI-compatible host (Groq, Together, vLLM, Ollama, Azure api-versions before
/// 2024-09-01) accepts it, while `max_completion_tokens` is newer and unknown to several of
/// them. OpenAI's reasoning models reject `max_tokens`; configure them without a `max_tokens`
/// on the request.
pub(crate) fn build_request(
    id: &ProviderId,
    url: Url,
    req: &ChatRequest,
    ctx: &RequestContext<'_>,
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
    let response_format = match &req.response_format {
        ResponseFormat::Text => None,
        ResponseFormat::JsonObject => Some(WireResponseFormat::JsonObject),
        ResponseFormat::JsonSchema { name, schema } => Some(WireResponseFormat::JsonSchema {
            json_schema: JsonSchema { name, schema },
        }),
    };
    let body = ChatBody {
        model: ctx.model,
        messages: req
            .messages
            .iter()
            .map(|m| WireMessage {
                role: m.role.as_str(),
                content: &m.content,
            })
            .collect(),
        max_tokens: req.max_tokens,
        temperature: req
            .temperature
            .map(|t| json_f32(t, "temperature"))
            .transpose()?,
        stop: &req.stop,
        response_format,
        stream: ctx.stream,
        stream_options: ctx.stream.then_some(StreamOptions {
            include_usage: true,
        }),
    };
    HttpRequest::post_json(url, &body)
}

/// Parses a 2xx `chat.completion` body.
///
/// `request_id` is the one read from the headers (`x-request-id`); the completion's own
/// `id` is used when the headers carry none.
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
    let mut choices = wire
        .choices
        .ok_or_else(|| decode("chat.completion has no `choices`".to_owned()))?;
    if choices.is_empty() {
        return Err(decode(
            "chat.completion has an empty `choices` array".to_owned(),
        ));
    }
    let first = choices
        .iter()
        .position(|c| c.index.unwrap_or(0) == 0)
        .unwrap_or(0);
    let choice = choices.swap_remove(first);
    let message = choice
        .message
        .ok_or_else(|| decode("`choices[0]` has no `message`".to_owned()))?;
    let text = content_text(message.content)
        .map_err(|what| decode(format!("`choices[0].message.content` {what}")))?;
    let finish_reason = choice.finish_reason.as_deref().map(finish_reason);
    if finish_reason == Some(FinishReason::Other("error".to_owned())) {
        return Err(ended_with_error(id).with_status(raw.status));
    }
    let mut resp = ChatResponse::new(
        id.clone(),
        wire.model.unwrap_or_else(|| model.to_owned()),
        text,
    );
    resp.finish_reason = finish_reason;
    resp.usage = wire.usage.as_ref().and_then(usage);
    resp.request_id = request_id.or_else(|| wire.id.map(Cow::into_owned));
    Ok(resp)
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

/// Usage when both counts are present (an absent count is unknown, never zero).
pub(crate) fn usage(u: &WireUsage) -> Option<Usage> {
    Some(Usage {
        input_tokens: u.prompt_tokens?,
        output_tokens: u.completion_tokens?,
    })
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
        let http = build_request(&id(), url, req, ctx).unwrap();
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
            let err = build_request(&id(), url.clone(), &req, &ctx).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidRequest);
            assert!(err.message().contains("temperature"), "{err}");
        }
    }

    #[test]
    fn refuses_requests_without_messages_or_model() {
        let url: Url = "http://127.0.0.1:1/".parse().unwrap();
        let err = build_request(
            &id(),
            url.clone(),
            &ChatRequest::new(),
            &RequestContext::new("m", None),
        )
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidRequest);
        let err = build_request(
            &id(),
            url,
            &ChatRequest::from_prompt("x"),
            &RequestContext::new(" ", None),
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
}
