//! Streamed Chat Completions: `data: {chat.completion.chunk}` events ending in `data: [DONE]`.
//!
//! With `stream_options.include_usage`, the last chunk before `[DONE]` has an empty `choices`
//! array and the whole request's `usage`. Azure may send a first chunk with empty `choices`
//! and only `prompt_filter_results`; it carries nothing and yields no chunk.
//!
//! Tool calls arrive in pieces (`delta.tool_calls[{index, id?, function: {name?,
//! arguments}}]`, <https://platform.openai.com/docs/guides/function-calling>, "Streaming"): the
//! first piece of a call has its id and name, the later ones pieces of its arguments' JSON
//! text. The pieces are put together per `index` (as OpenAI's SDKs do: name and arguments
//! concatenated) and every call is handed over whole, its arguments parsed, on the chunk with
//! the finish reason (or at `[DONE]` when no finish reason came).

use super::chat::{calls_finish, ended_with_error, finish_reason, usage};
use super::error::{ApiError, from_api_error};
use super::wire::{ChunkWire, DeltaToolCall};
use crate::error::{Error, Result};
use crate::id::ProviderId;
use crate::provider::tools::{made_up_call_id, parse_arguments};
use crate::provider::{SseEvent, StreamDecoder};
use crate::types::{ChatChunk, ToolCall};

/// Decodes one OpenAI-style stream.
#[derive(Debug)]
pub(crate) struct ChunkDecoder {
    provider: ProviderId,
    done: bool,
    /// Calls still arriving, in the order they started.
    calls: Vec<PendingCall>,
}

/// A streamed call's pieces so far. `Debug` shows no arguments.
struct PendingCall {
    index: Option<u64>,
    id: String,
    name: String,
    arguments: String,
}

impl std::fmt::Debug for PendingCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingCall")
            .field("index", &self.index)
            .field("id", &self.id)
            .field("name", &self.name)
            .field("arguments_len", &self.arguments.len())
            .finish()
    }
}

impl ChunkDecoder {
    pub(crate) fn new(provider: ProviderId) -> Self {
        ChunkDecoder {
            provider,
            done: false,
            calls: Vec::new(),
        }
    }

    fn decode_error(&self, what: String) -> Error {
        Error::decode(what).with_provider(self.provider.clone())
    }

    /// Adds one chunk's call pieces. A piece names its call by `index`; a host that sends no
    /// index starts a call with each new id and continues the latest one otherwise.
    fn absorb(&mut self, pieces: Vec<DeltaToolCall>) {
        for piece in pieces {
            let id = piece.id.filter(|id| !id.is_empty());
            let at = match piece.index {
                Some(index) => self.calls.iter().position(|c| c.index == Some(index)),
                None => match (&id, self.calls.last()) {
                    (Some(id), Some(last)) if last.id != *id => None,
                    (_, Some(_)) => Some(self.calls.len() - 1),
                    (_, None) => None,
                },
            };
            let at = at.unwrap_or_else(|| {
                self.calls.push(PendingCall {
                    index: piece.index,
                    id: String::new(),
                    name: String::new(),
                    arguments: String::new(),
                });
                self.calls.len() - 1
            });
            let call = &mut self.calls[at];
            if let Some(id) = id
                && call.id.is_empty()
            {
                call.id = id;
            }
            if let Some(function) = piece.function {
                if let Some(name) = function.name {
                    call.name.push_str(&name);
                }
                if let Some(arguments) = function.arguments {
                    call.arguments.push_str(&arguments);
                }
            }
        }
    }

    /// The calls put together so far, whole, in the order they started.
    ///
    /// # Errors
    ///
    /// `Decode` naming the call that has no name or whose arguments are not a JSON object.
    fn take_calls(&mut self) -> Result<Vec<ToolCall>> {
        let pending = std::mem::take(&mut self.calls);
        let mut calls = Vec::with_capacity(pending.len());
        for (i, c) in pending.into_iter().enumerate() {
            let index = c.index.unwrap_or(i as u64);
            if c.name.is_empty() {
                return Err(self.decode_error(format!(
                    "streamed tool call {index} from `{}` has no function name",
                    self.provider
                )));
            }
            let arguments = parse_arguments(&c.name, &c.arguments).map_err(|e| {
                self.decode_error(format!(
                    "streamed tool call {index} from `{}`: {}",
                    self.provider,
                    e.message()
                ))
            })?;
            let id = if c.id.is_empty() {
                made_up_call_id(i, &c.name, &arguments)
            } else {
                c.id
            };
            calls.push(ToolCall::new(id, c.name, arguments));
        }
        Ok(calls)
    }
}

impl StreamDecoder for ChunkDecoder {
    fn decode(&mut self, event: &SseEvent) -> Result<Option<ChatChunk>> {
        let data = event.data.trim();
        if data == "[DONE]" {
            self.done = true;
            // Calls with no finish reason after them are still handed over.
            let tool_calls = self.take_calls()?;
            return Ok((!tool_calls.is_empty()).then(|| ChatChunk {
                tool_calls,
                ..ChatChunk::default()
            }));
        }
        if data.is_empty() {
            return Ok(None);
        }
        if event.event == "error" {
            let api = ApiError::from_body(data.as_bytes()).unwrap_or_else(|| ApiError {
                message: Some(format!(
                    "error event: {}",
                    super::error::snippet(data.as_bytes())
                )),
                ..ApiError::default()
            });
            return Err(from_api_error(&self.provider, &api));
        }
        let wire: ChunkWire = serde_json::from_str(data).map_err(|e| {
            self.decode_error(format!(
                "malformed chat.completion.chunk from `{}`: {e}",
                self.provider
            ))
        })?;
        if let Some(api) = wire.error.as_ref().and_then(ApiError::from_value) {
            return Err(from_api_error(&self.provider, &api));
        }
        let mut chunk = ChatChunk::default();
        let mut choices = wire.choices.unwrap_or_default();
        let first = choices
            .iter()
            .position(|c| c.index.unwrap_or(0) == 0)
            .or((!choices.is_empty()).then_some(0));
        if let Some(choice) = first.map(|at| choices.swap_remove(at)) {
            if let Some(delta) = choice.delta {
                if let Some(text) = delta.content {
                    chunk.delta = text;
                }
                self.absorb(delta.tool_calls.unwrap_or_default());
            }
            if let Some(reason) = choice.finish_reason.as_deref() {
                if reason == "error" {
                    return Err(ended_with_error(&self.provider));
                }
                chunk.tool_calls = self.take_calls()?;
                chunk.finish_reason =
                    calls_finish(Some(finish_reason(reason)), !chunk.tool_calls.is_empty());
            }
        }
        chunk.usage = wire.usage.as_ref().and_then(usage);
        if chunk.delta.is_empty()
            && chunk.finish_reason.is_none()
            && chunk.usage.is_none()
            && chunk.tool_calls.is_empty()
        {
            return Ok(None);
        }
        chunk.model = wire.model.filter(|m| !m.is_empty());
        Ok(Some(chunk))
    }

    fn is_done(&self) -> bool {
        self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::types::{FinishReason, ToolCall, Usage};

    fn data(s: &str) -> SseEvent {
        SseEvent {
            data: s.to_owned(),
            ..SseEvent::default()
        }
    }

    fn decoder() -> ChunkDecoder {
        ChunkDecoder::new(ProviderId::new("openai"))
    }

    #[test]
    fn decodes_deltas_finish_usage_and_done() {
        let mut d = decoder();
        let role_only = r#"{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":null}"#;
        assert_eq!(d.decode(&data(role_only)).unwrap(), None);
        let hello = r#"{"model":"m","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}"#;
        let c = d.decode(&data(hello)).unwrap().unwrap();
        assert_eq!(c.delta, "Hel");
        assert_eq!(c.model.as_deref(), Some("m"));
        let stop = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
        let c = d.decode(&data(stop)).unwrap().unwrap();
        assert_eq!(c.finish_reason, Some(FinishReason::Stop));
        let usage =
            r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}"#;
        let c = d.decode(&data(usage)).unwrap().unwrap();
        assert_eq!(c.usage, Some(Usage::new(9, 2)));
        assert!(!d.is_done());
        assert_eq!(d.decode(&data("[DONE]")).unwrap(), None);
        assert!(d.is_done());
    }

    #[test]
    fn in_band_errors_are_classified() {
        let mut d = decoder();
        let err = d
            .decode(&data(
                r#"{"error":{"message":"boom","type":"server_error"}}"#,
            ))
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Server);
        assert_eq!(err.code(), Some("server_error"));
        let err = d
            .decode(&data(
                r#"{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"error"}]}"#,
            ))
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Server);
        let mut ev = data("not json");
        ev.event = "error".into();
        assert_eq!(d.decode(&ev).unwrap_err().kind(), ErrorKind::Server);
    }

    #[test]
    fn malformed_json_is_a_decode_error_naming_the_provider() {
        let err = decoder().decode(&data("{\"choices\": [")).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Decode);
        assert_eq!(err.provider().map(ProviderId::as_str), Some("openai"));
        assert!(err.message().contains("`openai`"), "{err}");
    }

    #[test]
    fn ignores_keep_alives_and_azure_filter_only_chunks() {
        let mut d = decoder();
        assert_eq!(d.decode(&data("")).unwrap(), None);
        let azure_first = r#"{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{}}]}"#;
        assert_eq!(d.decode(&data(azure_first)).unwrap(), None);
    }

    fn piece(index: u64, rest: &str) -> String {
        format!(
            r#"{{"choices":[{{"index":0,"delta":{{"tool_calls":[{{"index":{index}{rest}}}]}},"finish_reason":null}}]}}"#
        )
    }

    #[test]
    fn puts_streamed_calls_together_and_hands_them_over_with_the_finish() {
        let mut d = decoder();
        let events = [
            piece(
                0,
                r#","id":"call_a","type":"function","function":{"name":"get_weather","arguments":""}"#,
            ),
            piece(
                0,
                r#","id":null,"function":{"name":null,"arguments":"{\"city\":"}"#,
            ),
            piece(
                1,
                r#","id":"call_b","type":"function","function":{"name":"get_time","arguments":"{}"}"#,
            ),
            piece(0, r#","function":{"arguments":"\"Paris\"}"}"#),
        ];
        for e in &events {
            assert_eq!(d.decode(&data(e)).unwrap(), None, "{e}");
        }
        let finish = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#;
        let c = d.decode(&data(finish)).unwrap().unwrap();
        assert_eq!(c.finish_reason, Some(FinishReason::ToolCalls));
        assert_eq!(
            c.tool_calls,
            vec![
                ToolCall::new(
                    "call_a",
                    "get_weather",
                    serde_json::json!({"city": "Paris"})
                ),
                ToolCall::new("call_b", "get_time", serde_json::json!({})),
            ]
        );
        // Handed over once.
        assert_eq!(d.decode(&data("[DONE]")).unwrap(), None);
    }

    #[test]
    fn calls_without_a_finish_reason_come_at_done_and_hosts_without_indexes_are_read() {
        let mut d = decoder();
        let whole = r#"{"choices":[{"delta":{"tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{\"a\""}}]}}]}"#;
        let more = r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":":1}"}}]}}]}"#;
        let next = r#"{"choices":[{"delta":{"tool_calls":[{"id":"c2","function":{"name":"g","arguments":"{}"}}]}}]}"#;
        for e in [whole, more, next] {
            assert_eq!(d.decode(&data(e)).unwrap(), None);
        }
        let c = d.decode(&data("[DONE]")).unwrap().unwrap();
        assert!(d.is_done());
        assert_eq!(c.finish_reason, None);
        let names: Vec<_> = c
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str()))
            .collect();
        assert_eq!(names, [("c1", "f"), ("c2", "g")]);
        assert_eq!(c.tool_calls[0].arguments, serde_json::json!({"a": 1}));
    }

    #[test]
    fn a_forced_call_that_stops_is_a_tool_call_and_text_comes_alongside() {
        let mut d = decoder();
        let both = r#"{"choices":[{"index":0,"delta":{"content":"Sure.","tool_calls":[{"index":0,"id":"x","function":{"name":"f","arguments":"{}"}}]},"finish_reason":null}]}"#;
        assert_eq!(d.decode(&data(both)).unwrap().unwrap().delta, "Sure.");
        let stop = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
        let c = d.decode(&data(stop)).unwrap().unwrap();
        assert_eq!(c.finish_reason, Some(FinishReason::ToolCalls));
        assert_eq!(c.tool_calls.len(), 1);
    }

    #[test]
    fn streamed_arguments_that_are_not_json_are_a_decode_error_naming_the_tool() {
        let mut d = decoder();
        d.decode(&data(&piece(
            0,
            r#","id":"a","function":{"name":"get_weather","arguments":"{\"city\": \"Par"}"#,
        )))
        .unwrap();
        let finish = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#;
        let err = d.decode(&data(finish)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Decode);
        assert!(err.message().contains("`get_weather`"), "{err}");
        assert!(err.message().contains("tool call 0"), "{err}");
        assert!(!err.message().contains("Par"), "{err}");
        assert_eq!(err.provider().map(ProviderId::as_str), Some("openai"));

        let mut d = decoder();
        d.decode(&data(&piece(0, r#","function":{"arguments":"{}"}"#)))
            .unwrap();
        let err = d.decode(&data(finish)).unwrap_err();
        assert!(err.message().contains("has no function name"), "{err}");
    }
}
