//! ConverseStream: AWS's event-stream frames cut into events, and the events into chunks
//! (<https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ConverseStream.html>,
//! the framing: <https://docs.aws.amazon.com/transcribe/latest/dg/event-stream.html>).
//!
//! A frame is a prelude (total length, headers length, the prelude's CRC32), headers, the
//! payload and the message's CRC32, all big-endian. aws-smithy-eventstream reads a frame and
//! checks both CRCs; this parser only waits for a frame's bytes. Each frame becomes one
//! [`SseEvent`]: its `:event-type` (an exception frame's `:exception-type`, an error frame's
//! `:error-code`) in `event`, its JSON payload in `data`.
//!
//! The events, in order: `messageStart` (`{role}`), per content block an optional
//! `contentBlockStart` (`{contentBlockIndex, start: {toolUse: {toolUseId, name}}}` for a
//! call), `contentBlockDelta`s (`{contentBlockIndex, delta: {text} | {toolUse: {input}}}`, a
//! call's input JSON in pieces), `contentBlockStop`, then `messageStop` (`{stopReason}`) and
//! last `metadata` (`{usage, metrics}`), which ends the answer.

use std::collections::BTreeMap;

use aws_smithy_eventstream::frame::read_message_from;
use bytes::{Buf, Bytes, BytesMut};
use llm_failover_core::provider::{FrameParser, SseEvent, StreamDecoder};
use llm_failover_core::{ChatChunk, Error, ErrorKind, Result, ToolCall};
use serde_json::Value;

use crate::error::stream_exception;
use crate::wire::{finish_reason, usage};

/// The prelude: total length, headers length, prelude CRC (4 bytes each); the message CRC
/// ends the frame.
const PRELUDE_LEN: usize = 12;
const MIN_FRAME_LEN: usize = PRELUDE_LEN + 4;
/// The largest frame AWS sends (16 MiB): a longer stated length is a broken stream, not a
/// frame to wait for.
const MAX_FRAME_LEN: usize = 16 * 1024 * 1024;

fn decode_error(what: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::Decode,
        format!("bedrock: malformed event-stream frame: {what}"),
    )
}

/// Cuts an `application/vnd.amazon.eventstream` body into events.
#[derive(Debug, Default)]
pub(crate) struct EventStream {
    buf: BytesMut,
}

impl EventStream {
    /// The length the next frame states, once its prelude arrived.
    fn next_len(&self) -> Result<Option<usize>> {
        if self.buf.len() < 4 {
            return Ok(None);
        }
        let len = (&self.buf[..4]).get_u32() as usize;
        if !(MIN_FRAME_LEN..=MAX_FRAME_LEN).contains(&len) {
            return Err(decode_error(format!("a frame of {len} bytes")));
        }
        Ok(Some(len))
    }
}

impl FrameParser for EventStream {
    fn feed(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>> {
        self.buf.extend_from_slice(bytes);
        let mut events = Vec::new();
        while let Some(len) = self.next_len()? {
            if self.buf.len() < len {
                break;
            }
            let frame: Bytes = self.buf.split_to(len).freeze();
            let message = read_message_from(frame).map_err(decode_error)?;
            events.push(to_event(&message)?);
        }
        Ok(events)
    }

    fn end(&mut self) -> Result<Vec<SseEvent>> {
        if self.buf.is_empty() {
            Ok(Vec::new())
        } else {
            Err(decode_error(format!(
                "the stream ended {} bytes into a frame",
                self.buf.len()
            )))
        }
    }
}

/// One frame as an event.
fn to_event(message: &aws_smithy_types::event_stream::Message) -> Result<SseEvent> {
    let header = |name: &str| {
        message
            .headers()
            .iter()
            .find(|h| h.name().as_str() == name)
            .and_then(|h| h.value().as_string().ok())
            .map(|s| s.as_str().to_owned())
    };
    let payload = std::str::from_utf8(message.payload())
        .map_err(|_| decode_error("a payload that is not UTF-8"))?
        .to_owned();
    let (event, data) = match header(":message-type").as_deref() {
        Some("event") | None => (header(":event-type").unwrap_or_default(), payload),
        Some("exception") => (header(":exception-type").unwrap_or_default(), payload),
        Some("error") => {
            let code = header(":error-code").unwrap_or_else(|| "error".to_owned());
            let message = header(":error-message").unwrap_or_default();
            // Named as an exception, so the decoder refuses it as one.
            let name = if code.ends_with("Exception") {
                code
            } else {
                format!("{code}Exception")
            };
            (name, serde_json::json!({ "message": message }).to_string())
        }
        Some(other) => return Err(decode_error(format!("message type `{other}`"))),
    };
    Ok(SseEvent {
        event,
        data,
        id: None,
    })
}

/// A tool call being streamed: its id, name and the input's pieces so far.
#[derive(Debug)]
struct PendingCall {
    id: String,
    name: String,
    input: String,
}

/// ConverseStream's events → chunks; a call is delivered whole at its `contentBlockStop`.
#[derive(Debug)]
pub(crate) struct Decoder {
    model: String,
    calls: BTreeMap<u64, PendingCall>,
    done: bool,
}

impl Decoder {
    pub(crate) fn new(model: &str) -> Self {
        Decoder {
            model: model.to_owned(),
            calls: BTreeMap::new(),
            done: false,
        }
    }
}

impl StreamDecoder for Decoder {
    fn decode(&mut self, event: &SseEvent) -> Result<Option<ChatChunk>> {
        if event.event.to_ascii_lowercase().ends_with("exception") {
            return Err(stream_exception(&event.event, &event.data));
        }
        let v: Value = serde_json::from_str(&event.data).map_err(|e| {
            Error::new(
                ErrorKind::Decode,
                format!("bedrock: `{}` event is not JSON: {e}", event.event),
            )
        })?;
        let index = v.get("contentBlockIndex").and_then(Value::as_u64);
        match event.event.as_str() {
            "contentBlockStart" => {
                if let (Some(i), Some(call)) = (index, v.pointer("/start/toolUse")) {
                    let field = |k: &str| call.get(k).and_then(Value::as_str).map(str::to_owned);
                    let (Some(id), Some(name)) = (field("toolUseId"), field("name")) else {
                        return Err(Error::new(
                            ErrorKind::Decode,
                            "bedrock: a toolUse start without toolUseId or name",
                        ));
                    };
                    self.calls.insert(
                        i,
                        PendingCall {
                            id,
                            name,
                            input: String::new(),
                        },
                    );
                }
                Ok(None)
            }
            "contentBlockDelta" => {
                if let Some(text) = v.pointer("/delta/text").and_then(Value::as_str) {
                    let mut chunk = ChatChunk::text(text);
                    chunk.model = Some(self.model.clone());
                    return Ok(Some(chunk));
                }
                if let Some(piece) = v.pointer("/delta/toolUse/input").and_then(Value::as_str) {
                    match index.and_then(|i| self.calls.get_mut(&i)) {
                        Some(call) => call.input.push_str(piece),
                        None => {
                            return Err(Error::new(
                                ErrorKind::Decode,
                                "bedrock: toolUse input for a block that started no call",
                            ));
                        }
                    }
                }
                Ok(None)
            }
            "contentBlockStop" => {
                let Some(call) = index.and_then(|i| self.calls.remove(&i)) else {
                    return Ok(None);
                };
                let input = if call.input.trim().is_empty() {
                    Value::Object(Default::default())
                } else {
                    serde_json::from_str(&call.input).map_err(|e| {
                        Error::new(
                            ErrorKind::Decode,
                            format!(
                                "bedrock: the input of call `{}` is not JSON: {e}",
                                call.name
                            ),
                        )
                    })?
                };
                let mut chunk = ChatChunk::text("");
                chunk.tool_calls = vec![ToolCall::new(call.id, call.name, input)];
                Ok(Some(chunk))
            }
            "messageStop" => {
                let mut chunk = ChatChunk::text("");
                chunk.finish_reason = v
                    .get("stopReason")
                    .and_then(Value::as_str)
                    .map(finish_reason);
                Ok(Some(chunk))
            }
            "metadata" => {
                self.done = true;
                let mut chunk = ChatChunk::text("");
                chunk.usage = v.get("usage").and_then(usage);
                Ok(Some(chunk))
            }
            // messageStart, and events this decoder does not read.
            _ => Ok(None),
        }
    }

    fn is_done(&self) -> bool {
        self.done
    }
}

#[cfg(test)]
mod tests {
    use aws_smithy_eventstream::frame::write_message_to;
    use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
    use llm_failover_core::FinishReason;

    use super::*;

    fn frame(kind: &str, name: &str, payload: &str) -> Vec<u8> {
        let type_header = if kind == "event" {
            ":event-type"
        } else {
            ":exception-type"
        };
        let message = Message::new(Bytes::from(payload.to_owned()))
            .add_header(Header::new(
                ":message-type",
                HeaderValue::String(kind.to_owned().into()),
            ))
            .add_header(Header::new(
                type_header,
                HeaderValue::String(name.to_owned().into()),
            ))
            .add_header(Header::new(
                ":content-type",
                HeaderValue::String("application/json".into()),
            ));
        let mut out = Vec::new();
        write_message_to(&message, &mut out).unwrap();
        out
    }

    /// The events of the ConverseStream reference's response syntax, in its order
    /// (https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ConverseStream.html#API_runtime_ConverseStream_ResponseSyntax).
    fn answer() -> Vec<u8> {
        [
            frame("event", "messageStart", r#"{"role":"assistant","p":"abc"}"#),
            frame("event", "contentBlockDelta", r#"{"contentBlockIndex":0,"delta":{"text":"Hel"}}"#),
            frame("event", "contentBlockDelta", r#"{"contentBlockIndex":0,"delta":{"text":"lo"}}"#),
            frame("event", "contentBlockStop", r#"{"contentBlockIndex":0}"#),
            frame("event", "contentBlockStart", r#"{"contentBlockIndex":1,"start":{"toolUse":{"toolUseId":"tooluse_1","name":"get_weather"}}}"#),
            frame("event", "contentBlockDelta", r#"{"contentBlockIndex":1,"delta":{"toolUse":{"input":"{\"city\":"}}}"#),
            frame("event", "contentBlockDelta", r#"{"contentBlockIndex":1,"delta":{"toolUse":{"input":"\"Paris\"}"}}}"#),
            frame("event", "contentBlockStop", r#"{"contentBlockIndex":1}"#),
            frame("event", "messageStop", r#"{"stopReason":"tool_use"}"#),
            frame("event", "metadata", r#"{"usage":{"inputTokens":5,"outputTokens":7,"totalTokens":12},"metrics":{"latencyMs":1}}"#),
        ]
        .concat()
    }

    /// Fed a byte at a time, the frames come out whole, and the chunks carry the text, the
    /// call, the finish reason and the usage.
    #[test]
    fn decodes_a_stream_fed_in_pieces() {
        let bytes = answer();
        let mut parser = EventStream::default();
        let mut events = Vec::new();
        for b in &bytes {
            events.extend(parser.feed(std::slice::from_ref(b)).unwrap());
        }
        assert!(parser.end().unwrap().is_empty());
        assert_eq!(events.len(), 10);
        assert_eq!(events[1].event, "contentBlockDelta");
        let mut decoder = Decoder::new("m");
        let chunks: Vec<ChatChunk> = events
            .iter()
            .filter_map(|e| decoder.decode(e).unwrap())
            .collect();
        assert!(decoder.is_done());
        let text: String = chunks.iter().map(|c| c.delta.as_str()).collect();
        assert_eq!(text, "Hello");
        let calls: Vec<&ToolCall> = chunks.iter().flat_map(|c| &c.tool_calls).collect();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].id, "tooluse_1");
        assert_eq!(calls[0].arguments, serde_json::json!({"city": "Paris"}));
        let finish = chunks.iter().find_map(|c| c.finish_reason.clone());
        assert_eq!(finish, Some(FinishReason::ToolCalls));
        assert_eq!(
            chunks.iter().find_map(|c| c.usage).map(|u| u.total()),
            Some(12)
        );
    }

    /// A frame whose bytes were changed fails its CRC; a length no frame has, and a body cut
    /// in a frame, are `Decode` errors too.
    #[test]
    fn refuses_malformed_frames() {
        let mut bytes = frame("event", "messageStart", r#"{"role":"assistant"}"#);
        let last = bytes.len() - 6;
        bytes[last] ^= 0xff;
        let err = EventStream::default().feed(&bytes).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Decode, "{err}");

        let err = EventStream::default()
            .feed(&[0, 0, 0, 3, 0, 0, 0, 0])
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Decode);

        let whole = frame("event", "messageStart", "{}");
        let mut parser = EventStream::default();
        assert!(parser.feed(&whole[..whole.len() - 1]).unwrap().is_empty());
        assert_eq!(parser.end().unwrap_err().kind(), ErrorKind::Decode);
    }

    /// An exception frame after half the answer: the matching error kind.
    #[test]
    fn an_exception_frame_is_the_matching_error() {
        let bytes = frame(
            "exception",
            "throttlingException",
            r#"{"message":"Too many tokens, please wait before trying again."}"#,
        );
        let events = EventStream::default().feed(&bytes).unwrap();
        assert_eq!(events[0].event, "throttlingException");
        let err = Decoder::new("m").decode(&events[0]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::RateLimited);
        assert!(err.message().contains("Too many tokens"));
    }
}
