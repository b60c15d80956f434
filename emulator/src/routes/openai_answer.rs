//! OpenAI chat completion answers, shared with Azure: whole, or as chunks ending in
//! `data: [DONE]`; text, JSON, or tool calls.
//!
//! Shapes: platform.openai.com/docs/api-reference/chat/object (the completion),
//! platform.openai.com/docs/api-reference/chat-streaming/streaming (its chunks),
//! platform.openai.com/docs/guides/function-calling (an assistant message with `content:
//! null` and `tool_calls[{id, type: "function", function: {name, arguments}}]`,
//! `finish_reason: "tool_calls"`; streamed as `delta.tool_calls[{index, id, type, function:
//! {name, arguments: ""}}]`, then `{index, function: {arguments: piece}}` deltas),
//! platform.openai.com/docs/guides/structured-outputs (the JSON as `content`).

use bytes::Bytes;
use serde::Serialize;
use serde_json::{Value, json};

use super::{ChatReq, Cx, StreamParts, Usage, json_bytes, sse_data};
use crate::text::{hashed_id, new_id};
use crate::tools::{Answer, Finish};

#[derive(Serialize)]
struct ChatCompletion<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [ChoiceBody<'a>; 1],
    usage: UsageBody,
    service_tier: &'static str,
    system_fingerprint: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_filter_results: Option<Value>,
}

#[derive(Serialize)]
struct ChoiceBody<'a> {
    index: u32,
    message: AssistantMessage<'a>,
    logprobs: Option<()>,
    finish_reason: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    content_filter_results: Option<Value>,
}

#[derive(Serialize)]
struct AssistantMessage<'a> {
    role: &'static str,
    /// `null` when the answer calls tools.
    content: Option<&'a str>,
    refusal: Option<()>,
    annotations: [(); 0],
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<Value>,
}

#[derive(Serialize)]
struct UsageBody {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
    prompt_tokens_details: PromptDetails,
    completion_tokens_details: CompletionDetails,
}

#[derive(Serialize)]
struct PromptDetails {
    cached_tokens: u64,
    audio_tokens: u64,
}

#[derive(Serialize)]
struct CompletionDetails {
    reasoning_tokens: u64,
    audio_tokens: u64,
    accepted_prediction_tokens: u64,
    rejected_prediction_tokens: u64,
}

fn usage_body(u: Usage) -> UsageBody {
    UsageBody {
        prompt_tokens: u.input,
        completion_tokens: u.output,
        total_tokens: u.input + u.output,
        prompt_tokens_details: PromptDetails {
            cached_tokens: u.cached,
            audio_tokens: 0,
        },
        completion_tokens_details: CompletionDetails {
            reasoning_tokens: 0,
            audio_tokens: 0,
            accepted_prediction_tokens: 0,
            rejected_prediction_tokens: 0,
        },
    }
}

fn finish_reason(a: &Answer) -> &'static str {
    match a.finish() {
        Finish::Stop => "stop",
        Finish::Length => "length",
        Finish::ToolCalls => "tool_calls",
    }
}

fn completion_id() -> String {
    new_id("chatcmpl-", 29)
}

/// A call's id: `call_` and 24 characters, from the call's hash.
fn call_id(key: u64) -> String {
    hashed_id("call_", 24, key)
}

pub(super) fn chat_body(
    req: &ChatReq,
    a: &Answer,
    usage: Usage,
    cx: &Cx<'_>,
    azure: bool,
) -> Bytes {
    let id = completion_id();
    let tool_calls = a
        .calls
        .iter()
        .map(|c| {
            json!({"id": call_id(c.key), "type": "function",
                   "function": {"name": c.name, "arguments": c.arguments_text()}})
        })
        .collect();
    let body = ChatCompletion {
        id: &id,
        object: "chat.completion",
        created: cx.created(),
        model: &req.model,
        choices: [ChoiceBody {
            index: 0,
            message: AssistantMessage {
                role: "assistant",
                content: a.calls.is_empty().then_some(a.text.text.as_str()),
                refusal: None,
                annotations: [],
                tool_calls,
            },
            logprobs: None,
            finish_reason: finish_reason(a),
            content_filter_results: azure.then(azure_filters),
        }],
        usage: usage_body(usage),
        service_tier: "default",
        system_fingerprint: "fp_emulator",
        prompt_filter_results: azure
            .then(|| json!([{"prompt_index": 0, "content_filter_results": azure_filters()}])),
    };
    json_bytes(&body)
}

/// The deltas of the calls: per call, one with its index, id, type and name (arguments
/// `""`), then its arguments in two or more pieces.
fn call_deltas(a: &Answer) -> Vec<Value> {
    let mut out = Vec::new();
    for (index, c) in a.calls.iter().enumerate() {
        out.push(
            json!({"tool_calls": [{"index": index, "id": call_id(c.key), "type": "function",
                                         "function": {"name": c.name, "arguments": ""}}]}),
        );
        let args = c.arguments_text();
        let size = args.chars().count().div_ceil(2).clamp(1, 10);
        for piece in crate::text::pieces(&args, size) {
            out.push(json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}));
        }
    }
    out
}

pub(super) fn chat_stream(
    req: &ChatReq,
    a: &Answer,
    usage: Usage,
    cx: &Cx<'_>,
    azure: bool,
) -> StreamParts {
    let id = completion_id();
    let created = cx.created();
    let usage_null = req.include_usage.then_some(Value::Null);
    let chunk = |choices: Value, usage: Option<Value>| {
        let mut v = json!({
            "id": id, "object": "chat.completion.chunk", "created": created,
            "model": req.model, "system_fingerprint": "fp_emulator", "choices": choices,
        });
        if let (Some(u), Some(obj)) = (usage, v.as_object_mut()) {
            obj.insert("usage".to_owned(), u);
        }
        sse_data(&v)
    };
    let mut head = Vec::new();
    if azure {
        // Azure's first event carries only the prompt's filter results, with no choices.
        head.push(sse_data(&json!({
            "choices": [], "created": 0, "id": "", "model": "", "object": "",
            "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": azure_filters()}],
        })));
    }
    let first = if a.calls.is_empty() {
        json!({"role": "assistant", "content": "", "refusal": null})
    } else {
        json!({"role": "assistant", "content": null, "refusal": null})
    };
    head.push(chunk(
        json!([{"index": 0, "delta": first, "logprobs": null, "finish_reason": null}]),
        usage_null.clone(),
    ));
    let deltas: Vec<Value> = if a.calls.is_empty() {
        a.deltas()
            .into_iter()
            .map(|d| json!({"content": d}))
            .collect()
    } else {
        call_deltas(a)
    };
    let body = deltas
        .into_iter()
        .map(|delta| {
            let mut choice =
                json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": null});
            if azure {
                choice["content_filter_results"] = azure_filters();
            }
            chunk(json!([choice]), usage_null.clone())
        })
        .collect();
    let mut tail = vec![chunk(
        json!([{"index": 0, "delta": {}, "logprobs": null, "finish_reason": finish_reason(a)}]),
        usage_null,
    )];
    if req.include_usage {
        let u = serde_json::to_value(usage_body(usage)).unwrap_or(Value::Null);
        tail.push(chunk(json!([]), Some(u)));
    }
    tail.push(Bytes::from_static(b"data: [DONE]\n\n"));
    StreamParts { head, body, tail }
}

/// Azure's content-filter verdicts (all "safe").
fn azure_filters() -> Value {
    let safe = json!({"filtered": false, "severity": "safe"});
    json!({
        "hate": safe, "self_harm": safe, "sexual": safe, "violence": safe,
    })
}
