//! Streamed Messages API answers: typed server-sent events → chunks.
//!
//! The flow (<https://docs.claude.com/en/docs/build-with-claude/streaming>): `message_start`
//! (model, input usage), per content block `content_block_start` / `content_block_delta` /
//! `content_block_stop`, then `message_delta` (stop reason, cumulative output usage) and
//! `message_stop`. `ping` events may come anywhere, and an `error` event may replace the rest
//! of the stream. Unknown event types are skipped, as Anthropic's versioning policy asks.
//!
//! A `tool_use` block opens with its id and name, its input arrives as `input_json_delta`
//! pieces of JSON text, and `content_block_stop` closes it: the pieces are put together and
//! the whole call goes out in that chunk's `tool_calls`. The answer tool's pieces
//! ([`structured`](super::structured)) go out as they come, as text. Input pieces of blocks
//! that are not `tool_use` (a server tool's) are not the caller's calls and are skipped.

use serde::Deserialize;

use super::error;
use super::structured::is_answer_tool;
use super::wire::{ContentBlock, WireUsage, finish, thinking_block, thinking_state};
use crate::error::{Error, Result};
use crate::id::ProviderId;
use crate::provider::body::json_error;
use crate::provider::tools::parse_arguments;
use crate::provider::{SseEvent, StreamDecoder};
use crate::types::{ChatChunk, ToolCall, Usage};

#[derive(Debug, Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: Option<String>,
    index: Option<u64>,
    message: Option<StartMessage>,
    content_block: Option<ContentBlock>,
    delta: Option<Delta>,
    usage: Option<WireUsage>,
}

#[derive(Debug, Deserialize)]
struct StartMessage {
    model: Option<String>,
    usage: Option<WireUsage>,
}

/// The `delta` of `content_block_delta` (`type`, `text` or `partial_json`) and of
/// `message_delta` (`stop_reason`).
#[derive(Debug, Deserialize)]
struct Delta {
    #[serde(rename = "type")]
    kind: Option<String>,
    text: Option<String>,
    partial_json: Option<String>,
    /// A `thinking_delta`'s text and a `signature_delta`'s signature.
    thinking: Option<String>,
    signature: Option<String>,
    stop_reason: Option<String>,
}

/// A `thinking` or `redacted_thinking` block, put together from its start and deltas.
#[derive(Debug)]
struct Thinking {
    index: Option<u64>,
    kind: String,
    thinking: String,
    signature: String,
    data: Option<String>,
}

/// A `tool_use` block still open.
#[derive(Debug)]
struct OpenCall {
    index: u64,
    /// Its id and name, and the input its start carried (`{}` unless a proxy sent it whole).
    call: ToolCall,
    /// The input's pieces so far (not for the answer tool: its pieces went out as text).
    json: String,
    answer: bool,
    /// Whether any of the answer tool's pieces went out.
    said: bool,
}

impl OpenCall {
    /// What the block's end sends: the whole call, or the answer's text if none was sent.
    fn close(self) -> Result<ChatChunk> {
        if self.answer {
            let text = if self.said {
                String::new()
            } else {
                self.call.arguments.to_string()
            };
            return Ok(ChatChunk::text(text));
        }
        let mut call = self.call;
        if !self.json.trim().is_empty() {
            call.arguments = parse_arguments(&call.name, &self.json)?;
        }
        Ok(ChatChunk {
            tool_calls: vec![call],
            ..ChatChunk::default()
        })
    }
}

/// Decodes one streamed Messages API answer.
#[derive(Debug)]
pub(super) struct Decoder {
    model: String,
    /// The prompt's tokens and, of them, the cache reads, as `message_start` said them.
    input_tokens: Option<(u64, u64)>,
    open: Vec<OpenCall>,
    /// Whether the answer tool was called (then `tool_use` is a plain stop).
    answered: bool,
    /// The thinking blocks so far, handed over whole with the stop reason.
    thinking: Vec<Thinking>,
    provider: ProviderId,
    done: bool,
}

impl Decoder {
    pub(super) fn new(provider: &ProviderId, model: &str) -> Self {
        Decoder {
            model: model.to_owned(),
            input_tokens: None,
            open: Vec::new(),
            answered: false,
            thinking: Vec::new(),
            provider: provider.clone(),
            done: false,
        }
    }

    /// The turn's state: the thinking blocks, as they came (a block whose deltas were cut
    /// short is sent back as far as it came: Anthropic then refuses its signature, which
    /// is what it is).
    fn state(&mut self) -> Option<crate::types::TurnState> {
        let blocks = std::mem::take(&mut self.thinking)
            .into_iter()
            .filter_map(|t| {
                thinking_block(
                    &t.kind,
                    Some(&t.thinking),
                    Some(&t.signature),
                    t.data.as_deref(),
                )
            })
            .collect();
        thinking_state(&self.provider, blocks)
    }

    fn block_start(&mut self, ev: Event) -> Result<Option<ChatChunk>> {
        let Some(block) = ev.content_block else {
            return Ok(None);
        };
        match block.kind.as_str() {
            "text" => Ok(block.text.filter(|t| !t.is_empty()).map(ChatChunk::text)),
            "tool_use" => {
                let at = "stream event `content_block_start`";
                let index = ev.index.ok_or_else(|| {
                    Error::decode(format!("{at} has a `tool_use` without `index`"))
                })?;
                let call = block.to_call(at)?;
                let answer = is_answer_tool(&call.name);
                self.answered |= answer;
                self.open.push(OpenCall {
                    index,
                    call,
                    json: String::new(),
                    answer,
                    said: false,
                });
                Ok(None)
            }
            "thinking" | "redacted_thinking" => {
                self.thinking.push(Thinking {
                    index: ev.index,
                    kind: block.kind,
                    thinking: block.thinking.unwrap_or_default(),
                    signature: block.signature.unwrap_or_default(),
                    data: block.data,
                });
                Ok(None)
            }
            _ => Ok(None), // server tools, and block types added later
        }
    }

    fn block_delta(&mut self, ev: Event) -> Result<Option<ChatChunk>> {
        let delta = ev
            .delta
            .ok_or_else(|| Error::decode("stream event `content_block_delta` has no `delta`"))?;
        match delta.kind.as_deref() {
            Some("text_delta") => {
                let text = delta.text.ok_or_else(|| {
                    Error::decode(
                        "stream event `content_block_delta` has a text_delta without `text`",
                    )
                })?;
                Ok(Some(ChatChunk::text(text)))
            }
            Some("input_json_delta") => {
                let index = ev.index;
                let Some(open) = self.open.iter_mut().find(|c| Some(c.index) == index) else {
                    return Ok(None); // a server tool's input: not a call of the caller's
                };
                let piece = delta.partial_json.ok_or_else(|| {
                    Error::decode(
                        "stream event `content_block_delta` has an input_json_delta without \
                         `partial_json`",
                    )
                })?;
                if !open.answer {
                    open.json.push_str(&piece);
                    return Ok(None);
                }
                open.said |= !piece.is_empty();
                Ok((!piece.is_empty()).then(|| ChatChunk::text(piece)))
            }
            Some(kind @ ("thinking_delta" | "signature_delta")) => {
                let index = ev.index;
                if let Some(t) = self.thinking.iter_mut().find(|t| t.index == index) {
                    if kind == "thinking_delta" {
                        t.thinking.extend(delta.thinking.as_deref());
                    } else {
                        t.signature.extend(delta.signature.as_deref());
                    }
                }
                Ok(None) // kept to be sent back, never the answer's text
            }
            _ => Ok(None), // citations, and delta types added later
        }
    }

    fn block_stop(&mut self, index: Option<u64>) -> Result<Option<ChatChunk>> {
        match self.open.iter().position(|c| Some(c.index) == index) {
            Some(at) => self.open.remove(at).close().map(Some),
            None => Ok(None),
        }
    }

    /// The calls of blocks a stream never closed, in one chunk (a stream that ends without
    /// `content_block_stop` still delivers them whole, or fails on them).
    fn close_all(&mut self) -> Result<ChatChunk> {
        let mut chunk = ChatChunk::default();
        for open in std::mem::take(&mut self.open) {
            let closed = open.close()?;
            chunk.delta.push_str(&closed.delta);
            chunk.tool_calls.extend(closed.tool_calls);
        }
        Ok(chunk)
    }
}

impl StreamDecoder for Decoder {
    fn decode(&mut self, event: &SseEvent) -> Result<Option<ChatChunk>> {
        if self.done {
            return Ok(None);
        }
        if event.event == "error" {
            return Err(error::classify(None, event.data.as_bytes()));
        }
        if event.event == "ping" && event.data.trim().is_empty() {
            return Ok(None);
        }
        let ev: Event = serde_json::from_str(&event.data)
            .map_err(|e| json_error(&e, &format!("stream event `{}`", event_name(event))))?;
        let kind = ev.kind.clone();
        match kind.as_deref().unwrap_or(event.event.as_str()) {
            "error" => Err(error::classify(None, event.data.as_bytes())),
            "message_start" => {
                let msg = ev.message.ok_or_else(|| {
                    Error::decode("stream event `message_start` has no `message`")
                })?;
                self.input_tokens = msg
                    .usage
                    .as_ref()
                    .and_then(|u| Some((u.input()?, u.cache_read_input_tokens.unwrap_or(0))));
                if let Some(model) = msg.model {
                    self.model = model;
                }
                Ok(Some(ChatChunk {
                    model: Some(self.model.clone()),
                    ..ChatChunk::default()
                }))
            }
            "content_block_start" => self.block_start(ev),
            "content_block_delta" => self.block_delta(ev),
            "content_block_stop" => self.block_stop(ev.index),
            "message_delta" => {
                let stop = ev.delta.and_then(|d| d.stop_reason);
                // `message_delta`'s usage is cumulative; where it leaves the input out, the
                // input is `message_start`'s.
                let usage = ev.usage.map(|u| {
                    let (input, cached) = match u.input() {
                        Some(n) => (n, u.cache_read_input_tokens.unwrap_or(0)),
                        None => self.input_tokens.unwrap_or((0, 0)),
                    };
                    Usage::new(input, u.output_tokens.unwrap_or(0)).with_cached_input(cached)
                });
                Ok(Some(ChatChunk {
                    finish_reason: stop.as_deref().map(|s| finish(s, self.answered)),
                    usage,
                    model: Some(self.model.clone()),
                    provider_state: self.state(),
                    ..self.close_all()?
                }))
            }
            "message_stop" => {
                self.done = true;
                let rest = self.close_all()?;
                Ok((!rest.delta.is_empty() || !rest.tool_calls.is_empty()).then_some(rest))
            }
            _ => Ok(None), // ping, and event types added later
        }
    }

    fn is_done(&self) -> bool {
        self.done
    }
}

fn event_name(event: &SseEvent) -> &str {
    if event.event.is_empty() {
        "message"
    } else {
        &event.event
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;
    use crate::types::FinishReason;

    fn ev(name: &str, data: &str) -> SseEvent {
        SseEvent {
            event: name.to_owned(),
            data: data.to_owned(),
            id: None,
        }
    }

    /// Decodes `events` (name, data) and returns every chunk.
    fn run(d: &mut Decoder, events: &[(&str, &str)]) -> Result<Vec<ChatChunk>> {
        let mut out = Vec::new();
        for (name, data) in events {
            out.extend(d.decode(&ev(name, data))?);
        }
        Ok(out)
    }

    const START_CALL: &str = r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}}"#;

    fn piece(index: u8, json: &str) -> String {
        serde_json::json!({"type": "content_block_delta", "index": index,
            "delta": {"type": "input_json_delta", "partial_json": json}})
        .to_string()
    }

    #[test]
    fn a_calls_pieces_become_one_whole_call_when_its_block_stops() {
        let mut d = Decoder::new(&ProviderId::new("a"), "m");
        let (a, b) = (piece(1, r#"{"city": "Pa"#), piece(1, r#"ris"}"#));
        let chunks = run(
            &mut d,
            &[
                ("content_block_start", START_CALL),
                ("content_block_delta", &a),
                ("content_block_delta", &b),
            ],
        )
        .unwrap();
        assert!(chunks.is_empty(), "nothing before the call is whole");
        let done = run(
            &mut d,
            &[(
                "content_block_stop",
                r#"{"type":"content_block_stop","index":1}"#,
            )],
        )
        .unwrap();
        assert_eq!(done.len(), 1);
        let call = &done[0].tool_calls[0];
        assert_eq!(
            (call.id.as_str(), call.name.as_str()),
            ("toolu_1", "get_weather")
        );
        assert_eq!(call.arguments, serde_json::json!({"city": "Paris"}));
        assert_eq!(done[0].delta, "");
    }

    #[test]
    fn a_call_without_pieces_has_empty_arguments_and_an_unclosed_one_ends_with_the_message() {
        let mut d = Decoder::new(&ProviderId::new("a"), "m");
        let chunks = run(
            &mut d,
            &[
                ("content_block_start", START_CALL),
                (
                    "message_delta",
                    r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":3}}"#,
                ),
            ],
        )
        .unwrap();
        assert_eq!(chunks.len(), 1);
        assert_eq!(chunks[0].finish_reason, Some(FinishReason::ToolCalls));
        assert_eq!(chunks[0].tool_calls[0].arguments, serde_json::json!({}));
    }

    #[test]
    fn the_answer_tools_pieces_are_text_and_its_stop_is_a_plain_stop() {
        let mut d = Decoder::new(&ProviderId::new("a"), "m");
        let start = r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"json_answer-palette","input":{}}}"#;
        let (a, b, empty) = (
            piece(0, r#"{"colours": ["#),
            piece(0, r#""red"]}"#),
            piece(0, ""),
        );
        let chunks = run(
            &mut d,
            &[
                ("content_block_start", start),
                ("content_block_delta", &empty),
                ("content_block_delta", &a),
                ("content_block_delta", &b),
                ("content_block_stop", r#"{"type":"content_block_stop","index":0}"#),
                (
                    "message_delta",
                    r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":3}}"#,
                ),
            ],
        )
        .unwrap();
        let text: String = chunks.iter().map(|c| c.delta.as_str()).collect();
        assert_eq!(text, r#"{"colours": ["red"]}"#);
        assert!(chunks.iter().all(|c| c.tool_calls.is_empty()));
        assert_eq!(
            chunks.last().unwrap().finish_reason,
            Some(FinishReason::Stop)
        );

        // An answer whose input arrived only in its start is still its text.
        let mut d = Decoder::new(&ProviderId::new("a"), "m");
        let whole = r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"json_answer","input":{"a":1}}}"#;
        let chunks = run(
            &mut d,
            &[
                ("content_block_start", whole),
                (
                    "content_block_stop",
                    r#"{"type":"content_block_stop","index":0}"#,
                ),
            ],
        )
        .unwrap();
        assert_eq!(chunks[0].delta, r#"{"a":1}"#);
    }

    #[test]
    fn a_server_tools_input_is_not_a_call() {
        let mut d = Decoder::new(&ProviderId::new("a"), "m");
        let start = r#"{"type":"content_block_start","index":1,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}}"#;
        let query = piece(1, r#"{"query": "weather"}"#);
        let chunks = run(
            &mut d,
            &[
                ("content_block_start", start),
                ("content_block_delta", &query),
                (
                    "content_block_stop",
                    r#"{"type":"content_block_stop","index":1}"#,
                ),
            ],
        )
        .unwrap();
        assert!(chunks.is_empty());
    }

    #[test]
    fn broken_calls_are_decode_errors_naming_the_call_not_its_arguments() {
        let mut d = Decoder::new(&ProviderId::new("a"), "m");
        let bad = piece(1, r#"{"secret": "#);
        let err = run(
            &mut d,
            &[
                ("content_block_start", START_CALL),
                ("content_block_delta", &bad),
                (
                    "content_block_stop",
                    r#"{"type":"content_block_stop","index":1}"#,
                ),
            ],
        )
        .unwrap_err();
        assert!(err.is_decode());
        assert!(err.message().contains("get_weather"), "{err}");
        assert!(!err.message().contains("secret"), "{err}");

        for (data, want) in [
            (
                r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","name":"f","input":{}}}"#,
                "without `id`",
            ),
            (
                r#"{"type":"content_block_start","content_block":{"type":"tool_use","id":"t","name":"f","input":{}}}"#,
                "without `index`",
            ),
            (
                r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t","name":"f","input":[1]}}"#,
                "not an object",
            ),
        ] {
            let err = Decoder::new(&ProviderId::new("a"), "m")
                .decode(&ev("content_block_start", data))
                .unwrap_err();
            assert!(err.is_decode());
            assert!(err.message().contains(want), "{want}: {err}");
        }
        let mut d = Decoder::new(&ProviderId::new("a"), "m");
        d.decode(&ev("content_block_start", START_CALL)).unwrap();
        let err = d
            .decode(&ev(
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta"}}"#,
            ))
            .unwrap_err();
        assert!(err.message().contains("partial_json"), "{err}");
    }

    #[test]
    fn cache_reads_in_message_start_are_the_inputs_cached_part() {
        // message_start's usage with prompt caching
        // (https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching): input_tokens
        // is what follows the last breakpoint, the cache reads and writes come apart.
        let mut d = Decoder::new(&ProviderId::new("a"), "m");
        d.decode(&ev(
            "message_start",
            r#"{"type":"message_start","message":{"model":"claude-x","usage":{"input_tokens":12,
                "cache_creation_input_tokens":0,"cache_read_input_tokens":2048,"output_tokens":1}}}"#,
        ))
        .unwrap();
        let end = d
            .decode(&ev(
                "message_delta",
                r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}"#,
            ))
            .unwrap()
            .unwrap();
        assert_eq!(end.usage, Some(Usage::new(2060, 9).with_cached_input(2048)));
        // A message_delta that restates the input (cumulative usage) is read as it says.
        let mut d = Decoder::new(&ProviderId::new("a"), "m");
        let end = d
            .decode(&ev(
                "message_delta",
                r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":3,
                    "cache_read_input_tokens":1024,"output_tokens":9}}"#,
            ))
            .unwrap()
            .unwrap();
        assert_eq!(end.usage, Some(Usage::new(1027, 9).with_cached_input(1024)));
    }

    #[test]
    fn usage_combines_message_start_input_with_message_delta_output() {
        let mut d = Decoder::new(&ProviderId::new("a"), "requested");
        let start = d
            .decode(&ev(
                "message_start",
                r#"{"type":"message_start","message":{"model":"claude-x","usage":{"input_tokens":25,"output_tokens":1}}}"#,
            ))
            .unwrap()
            .unwrap();
        assert_eq!(start.model.as_deref(), Some("claude-x"));
        let end = d
            .decode(&ev(
                "message_delta",
                r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":15}}"#,
            ))
            .unwrap()
            .unwrap();
        assert_eq!(end.finish_reason, Some(FinishReason::Length));
        assert_eq!(end.usage, Some(Usage::new(25, 15)));
        assert!(!d.is_done());
        assert!(
            d.decode(&ev("message_stop", r#"{"type":"message_stop"}"#))
                .unwrap()
                .is_none()
        );
        assert!(d.is_done());
    }

    /// The streaming guide's thinking block: `thinking_delta`s, then a `signature_delta`; the
    /// whole block comes with the stop reason, never as text.
    #[test]
    fn a_thinking_block_is_put_together_and_handed_over_with_the_stop() {
        let mut d = Decoder::new(&ProviderId::new("a"), "m");
        let chunks = run(
            &mut d,
            &[
                ("content_block_start", r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#),
                ("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me "}}"#),
                ("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"check."}}"#),
                ("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"c2ln"}}"#),
                ("content_block_stop", r#"{"type":"content_block_stop","index":0}"#),
                ("content_block_start", r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#),
                ("content_block_delta", r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi"}}"#),
                ("message_delta", r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}"#),
            ],
        )
        .unwrap();
        let text: String = chunks.iter().map(|c| c.delta.as_str()).collect();
        assert_eq!(text, "Hi");
        let last = chunks.last().unwrap();
        let state = last.provider_state.as_ref().unwrap();
        assert_eq!(
            crate::types::TurnState::anthropic(Some(state), &ProviderId::new("a")),
            [
                serde_json::json!({"type": "thinking", "thinking": "Let me check.", "signature": "c2ln"})
            ]
        );
        assert!(
            chunks[..chunks.len() - 1]
                .iter()
                .all(|c| c.provider_state.is_none())
        );
    }

    #[test]
    fn non_text_deltas_and_unknown_events_are_skipped() {
        let mut d = Decoder::new(&ProviderId::new("a"), "m");
        for (name, data) in [
            ("ping", r#"{"type":"ping"}"#),
            ("ping", ""),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{"}}"#,
            ),
            (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":0}"#,
            ),
            ("brand_new_event", r#"{"type":"brand_new_event"}"#),
        ] {
            assert!(d.decode(&ev(name, data)).unwrap().is_none(), "{name}");
        }
    }

    #[test]
    fn an_error_event_is_classified_and_malformed_data_is_a_decode_error() {
        let mut d = Decoder::new(&ProviderId::new("a"), "m");
        let err = d
            .decode(&ev(
                "error",
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            ))
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Overloaded);
        let err = d
            .decode(&ev(
                "content_block_delta",
                r#"{"type":"content_block_delta","delta":"#,
            ))
            .unwrap_err();
        assert!(err.is_decode());
        assert!(err.message().contains("content_block_delta"), "{err}");
    }
}
