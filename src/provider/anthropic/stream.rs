//! Streamed Messages API answers: typed server-sent events → chunks.
//!
//! The flow (<https://docs.claude.com/en/docs/build-with-claude/streaming>): `message_start`
//! (model, input usage), per content block `content_block_start` / `content_block_delta` /
//! `content_block_stop`, then `message_delta` (stop reason, cumulative output usage) and
//! `message_stop`. `ping` events may come anywhere, and an `error` event may replace the rest
//! of the stream. Unknown event types are skipped, as Anthropic's versioning policy asks.

use serde::Deserialize;

use super::error;
use super::wire::{finish_reason, ContentBlock, WireUsage};
use crate::error::{Error, Result};
use crate::provider::body::json_error;
use crate::provider::{SseEvent, StreamDecoder};
use crate::types::{ChatChunk, Usage};

#[derive(Debug, Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: Option<String>,
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

/// The `delta` of `content_block_delta` (`type`, `text`) and of `message_delta`
/// (`stop_reason`).
#[derive(Debug, Deserialize)]
struct Delta {
    #[serde(rename = "type")]
    kind: Option<String>,
    text: Option<String>,
    stop_reason: Option<String>,
}

/// Decodes one streamed Messages API answer.
#[derive(Debug)]
pub(super) struct Decoder {
    model: String,
    input_tokens: Option<u64>,
    done: bool,
}

impl Decoder {
    pub(super) fn new(model: &str) -> Self {
        Decoder {
            model: model.to_owned(),
            input_tokens: None,
            done: false,
        }
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
        let kind = ev.kind.as_deref().unwrap_or(event.event.as_str());
        match kind {
            "error" => Err(error::classify(None, event.data.as_bytes())),
            "message_start" => {
                let msg = ev.message.ok_or_else(|| {
                    Error::decode("stream event `message_start` has no `message`")
                })?;
                self.input_tokens = msg.usage.as_ref().and_then(WireUsage::input);
                if let Some(model) = msg.model {
                    self.model = model;
                }
                Ok(Some(ChatChunk {
                    model: Some(self.model.clone()),
                    ..ChatChunk::default()
                }))
            }
            "content_block_start" => Ok(ev
                .content_block
                .filter(|b| b.kind == "text")
                .and_then(|b| b.text)
                .filter(|t| !t.is_empty())
                .map(ChatChunk::text)),
            "content_block_delta" => {
                let delta = ev.delta.ok_or_else(|| {
                    Error::decode("stream event `content_block_delta` has no `delta`")
                })?;
                if delta.kind.as_deref() != Some("text_delta") {
                    return Ok(None); // tool input, thinking, signatures: not text
                }
                let text = delta.text.ok_or_else(|| {
                    Error::decode(
                        "stream event `content_block_delta` has a text_delta without `text`",
                    )
                })?;
                Ok(Some(ChatChunk::text(text)))
            }
            "message_delta" => {
                let stop = ev.delta.and_then(|d| d.stop_reason);
                let usage = ev.usage.map(|u| Usage {
                    input_tokens: u.input().or(self.input_tokens).unwrap_or(0),
                    output_tokens: u.output_tokens.unwrap_or(0),
                });
                Ok(Some(ChatChunk {
                    finish_reason: stop.as_deref().map(finish_reason),
                    usage,
                    model: Some(self.model.clone()),
                    ..ChatChunk::default()
                }))
            }
            "message_stop" => {
                self.done = true;
                Ok(None)
            }
            _ => Ok(None), // ping, content_block_stop, and event types added later
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
    use crate::types::FinishReason;
    use crate::ErrorKind;

    fn ev(name: &str, data: &str) -> SseEvent {
        SseEvent {
            event: name.to_owned(),
            data: data.to_owned(),
            id: None,
        }
    }

    #[test]
    fn usage_combines_message_start_input_with_message_delta_output() {
        let mut d = Decoder::new("requested");
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
        assert_eq!(
            end.usage,
            Some(Usage {
                input_tokens: 25,
                output_tokens: 15
            })
        );
        assert!(!d.is_done());
        assert!(d
            .decode(&ev("message_stop", r#"{"type":"message_stop"}"#))
            .unwrap()
            .is_none());
        assert!(d.is_done());
    }

    #[test]
    fn non_text_deltas_and_unknown_events_are_skipped() {
        let mut d = Decoder::new("m");
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
        let mut d = Decoder::new("m");
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
