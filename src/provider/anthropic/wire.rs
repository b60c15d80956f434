//! Messages API request and response bodies.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::{error, DEFAULT_MAX_TOKENS};
use crate::error::{Error, ErrorKind, Result};
use crate::http::RawResponse;
use crate::id::ProviderId;
use crate::provider::body::{decode_json, json_f32};
use crate::provider::RequestContext;
use crate::types::{ChatRequest, ChatResponse, FinishReason, ResponseFormat, Role, Usage};

/// The body of `POST /v1/messages`.
#[derive(Debug, Serialize)]
pub(super) struct RequestBody<'a> {
    model: String,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<String>,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
}

#[derive(Debug, Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Cow<'a, str>,
}

/// Translates a neutral request: system messages out, same-role runs merged, `max_tokens`
/// always present, JSON mode as a system instruction.
pub(super) fn request_body<'a>(
    req: &'a ChatRequest,
    ctx: &RequestContext<'_>,
) -> Result<RequestBody<'a>> {
    let mut system: Vec<Cow<'_, str>> = Vec::new();
    let mut messages: Vec<WireMessage<'a>> = Vec::new();
    for m in &req.messages {
        let role = match m.role {
            Role::System => {
                system.push(Cow::Borrowed(&m.content));
                continue;
            }
            Role::User => "user",
            Role::Assistant => "assistant",
            // Until the Anthropic adapter writes tool results (issue 21): refused, never dropped.
            Role::Tool => {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    "tool results are not written by the Anthropic adapter yet",
                ))
            }
        };
        match messages.last_mut() {
            Some(last) if last.role == role => {
                let merged = last.content.to_mut();
                merged.push_str("\n\n");
                merged.push_str(&m.content);
            }
            _ => messages.push(WireMessage {
                role,
                content: Cow::Borrowed(&m.content),
            }),
        }
    }
    if messages.is_empty() {
        return Err(Error::new(
            ErrorKind::InvalidRequest,
            "an Anthropic request needs at least one user or assistant message (system \
             messages alone are not a conversation)",
        ));
    }
    if let Some(instruction) = json_instruction(&req.response_format)? {
        system.push(Cow::Owned(instruction));
    }
    Ok(RequestBody {
        model: ctx.model.to_owned(),
        max_tokens: req.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        system: (!system.is_empty()).then(|| system.join("\n\n")),
        messages,
        temperature: req
            .temperature
            .map(|t| json_f32(t, "temperature"))
            .transpose()?,
        stop_sequences: &req.stop,
        stream: ctx.stream,
    })
}

/// The system-prompt instruction standing in for a `response_format` Anthropic lacks.
fn json_instruction(format: &ResponseFormat) -> Result<Option<String>> {
    const PLAIN: &str = "no prose before or after it and no Markdown code fences";
    Ok(match format {
        ResponseFormat::Text => None,
        ResponseFormat::JsonObject => Some(format!(
            "Respond with a single valid JSON object and nothing else: {PLAIN}."
        )),
        ResponseFormat::JsonSchema { name, schema } => {
            let schema = serde_json::to_string(schema).map_err(|e| {
                Error::new(
                    ErrorKind::InvalidRequest,
                    format!("JSON schema `{name}` cannot be serialised: {e}"),
                )
            })?;
            Some(format!(
                "Respond with a single valid JSON value that conforms to the JSON Schema \
                 `{name}` below, and nothing else: {PLAIN}.\n{schema}"
            ))
        }
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

#[derive(Debug, Deserialize)]
pub(super) struct ContentBlock {
    #[serde(rename = "type")]
    pub(super) kind: String,
    pub(super) text: Option<String>,
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

/// Parses a `200` Messages API body. An error object inside a 200 is classified like the
/// matching status.
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
    let text: String = content
        .iter()
        .filter(|b| b.kind == "text")
        .filter_map(|b| b.text.as_deref())
        .collect();
    let has_text = content.iter().any(|b| b.kind == "text");
    let explained = matches!(stop_reason.as_deref(), Some("max_tokens" | "refusal"));
    if !has_text && !explained {
        return Err(Error::decode(format!(
            "Messages API response has no text content block (stop_reason: {})",
            stop_reason.as_deref().unwrap_or("none")
        )));
    }
    let mut resp = ChatResponse::new(id.clone(), body.model.as_deref().unwrap_or(model), text);
    resp.finish_reason = stop_reason.as_deref().map(finish_reason);
    resp.usage = body.usage.map(|u| Usage {
        input_tokens: u.input().unwrap_or(0),
        output_tokens: u.output_tokens.unwrap_or(0),
    });
    Ok(resp)
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
    use super::*;
    use crate::types::Message;

    fn body(req: &ChatRequest) -> serde_json::Value {
        let ctx = RequestContext::new("claude-x", None);
        serde_json::to_value(request_body(req, &ctx).unwrap()).unwrap()
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
    fn a_conversation_of_only_system_messages_is_rejected() {
        let req = ChatRequest::new().system("hi");
        let ctx = RequestContext::new("m", None);
        let err = request_body(&req, &ctx).unwrap_err();
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
