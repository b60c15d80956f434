//! An incremental parser for server-sent events (the WHATWG `text/event-stream` format).
//!
//! Bytes arrive in arbitrary pieces; [`SseParser::feed`] buffers an incomplete line and
//! yields each complete event. Lines end in `\n`, `\r\n` or `\r`; comments (`:`) are skipped;
//! several `data:` lines join with `\n`. A line longer than the parser's cap, or one that is
//! not UTF-8, is an error rather than unbounded memory or a panic.

// Internal: reachable from outside only with the `test-util` feature (tests, benches and
// fuzzers); without it every `pub` here is crate-private.
#![cfg_attr(not(feature = "test-util"), allow(unreachable_pub, dead_code))]

use super::FrameParser;
use crate::error::{Error, Result};

/// One event of a server-sent event stream.
///
/// # Examples
///
/// ```
/// use llm_failover::provider::{openai::OpenAi, Provider, SseEvent};
/// use llm_failover::ProviderId;
///
/// let openai = OpenAi::new(ProviderId::new("openai"), "http://127.0.0.1:8080/v1".parse()?);
/// let mut decoder = openai.stream_decoder("gpt-4o-mini");
/// let delta = r#"{"choices":[{"index":0,"delta":{"content":"Hel"}}]}"#;
/// let event = SseEvent { data: delta.to_owned(), ..SseEvent::default() };
/// assert_eq!(decoder.decode(&event)?.map(|c| c.delta), Some("Hel".to_owned()));
///
/// decoder.decode(&SseEvent { data: "[DONE]".to_owned(), ..SseEvent::default() })?;
/// assert!(decoder.is_done());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; empty for the default `message` type.
    pub event: String,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
    /// The `id:` field, if any.
    pub id: Option<String>,
}

/// Incremental SSE parser.
///
/// # Examples
///
/// ```
/// use llm_failover::provider::SseParser;
///
/// let mut p = SseParser::new();
/// assert!(p.feed(b"event: ping\nda").unwrap().is_empty());
/// let events = p.feed(b"ta: {}\n\n").unwrap();
/// assert_eq!(events[0].event, "ping");
/// assert_eq!(events[0].data, "{}");
/// ```
#[derive(Debug)]
pub struct SseParser {
    line: Vec<u8>,
    pending: SseEvent,
    has_data: bool,
    saw_cr: bool,
    max_line: usize,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::new()
    }
}

impl SseParser {
    /// A parser with a 1 MiB line cap.
    pub fn new() -> Self {
        Self::with_max_line(1 << 20)
    }

    /// A parser rejecting lines longer than `max_line` bytes.
    pub fn with_max_line(max_line: usize) -> Self {
        SseParser {
            line: Vec::new(),
            pending: SseEvent::default(),
            has_data: false,
            saw_cr: false,
            max_line,
        }
    }

    /// Feeds bytes; returns the events completed by them.
    ///
    /// # Errors
    ///
    /// `Decode` when a line is not UTF-8 or exceeds the cap.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>> {
        let mut out = Vec::new();
        for &b in bytes {
            if self.saw_cr {
                self.saw_cr = false;
                if b == b'\n' {
                    continue;
                }
            }
            match b {
                b'\n' | b'\r' => {
                    self.saw_cr = b == b'\r';
                    let line = std::mem::take(&mut self.line);
                    if let Some(ev) = self.line_done(&line)? {
                        out.push(ev);
                    }
                }
                _ => {
                    if self.line.len() >= self.max_line {
                        return Err(Error::decode(format!(
                            "event-stream line longer than {} bytes",
                            self.max_line
                        )));
                    }
                    self.line.push(b);
                }
            }
        }
        Ok(out)
    }

    /// True when bytes of an unfinished event are buffered (a stream cut mid-event).
    pub fn has_partial(&self) -> bool {
        !self.line.is_empty() || self.has_data
    }

    fn line_done(&mut self, line: &[u8]) -> Result<Option<SseEvent>> {
        if line.is_empty() {
            if !self.has_data {
                self.pending.event.clear();
                return Ok(None);
            }
            self.has_data = false;
            return Ok(Some(std::mem::take(&mut self.pending)));
        }
        let line = std::str::from_utf8(line)
            .map_err(|_| Error::decode("event-stream line is not valid UTF-8"))?;
        if line.starts_with(':') {
            return Ok(None);
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.pending.event = value.to_owned(),
            "data" => {
                if self.has_data {
                    self.pending.data.push('\n');
                }
                self.pending.data.push_str(value);
                self.has_data = true;
            }
            "id" => self.pending.id = Some(value.to_owned()),
            _ => {} // `retry` and unknown fields are ignored, as the spec says.
        }
        Ok(None)
    }
}

impl FrameParser for SseParser {
    fn feed(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>> {
        SseParser::feed(self, bytes)
    }

    /// Some servers omit the blank line after the last event: the body's end completes it.
    fn end(&mut self) -> Result<Vec<SseEvent>> {
        SseParser::feed(self, b"\n\n")
    }
}

/// JSON lines (`application/x-ndjson`, `application/jsonl`): each non-empty line is one
/// event, its text in `data` (Ollama's native API streams so). Lines end in `\n` or `\r\n`;
/// a last line without its newline ends with the body; a line that is not UTF-8 or longer
/// than the cap is an error.
///
/// # Examples
///
/// ```
/// use llm_failover::provider::{FrameParser, JsonLines};
///
/// let mut p = JsonLines::new();
/// assert!(p.feed(b"{\"a\":").unwrap().is_empty());
/// let events = p.feed(b"1}\r\n\n{\"b\":2}").unwrap();
/// assert_eq!(events.len(), 1);
/// assert_eq!(events[0].data, r#"{"a":1}"#);
/// assert_eq!(p.end().unwrap()[0].data, r#"{"b":2}"#);
/// ```
#[derive(Debug)]
pub struct JsonLines {
    line: Vec<u8>,
    max_line: usize,
}

impl Default for JsonLines {
    fn default() -> Self {
        Self::new()
    }
}

impl JsonLines {
    /// A parser with a 1 MiB line cap.
    pub fn new() -> Self {
        JsonLines {
            line: Vec::new(),
            max_line: 1 << 20,
        }
    }

    fn line_done(&mut self, out: &mut Vec<SseEvent>) -> Result<()> {
        let mut line = std::mem::take(&mut self.line);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        let data = String::from_utf8(line)
            .map_err(|_| Error::decode("a JSON line of the stream is not valid UTF-8"))?;
        out.push(SseEvent {
            data,
            ..SseEvent::default()
        });
        Ok(())
    }
}

impl FrameParser for JsonLines {
    fn feed(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>> {
        let mut out = Vec::new();
        for &b in bytes {
            if b == b'\n' {
                self.line_done(&mut out)?;
                continue;
            }
            if self.line.len() >= self.max_line {
                return Err(Error::decode(format!(
                    "a JSON line of the stream is longer than {} bytes",
                    self.max_line
                )));
            }
            self.line.push(b);
        }
        Ok(out)
    }

    fn end(&mut self) -> Result<Vec<SseEvent>> {
        let mut out = Vec::new();
        self.line_done(&mut out)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_are_cut_anywhere_and_bounded() {
        let text = b"{\"a\":1}\n\n{\"b\":2}\r\n{\"c\":3}";
        for split in 0..text.len() {
            let mut p = JsonLines::new();
            let mut got = p.feed(&text[..split]).unwrap();
            got.extend(p.feed(&text[split..]).unwrap());
            got.extend(p.end().unwrap());
            let data: Vec<&str> = got.iter().map(|e| e.data.as_str()).collect();
            assert_eq!(
                data,
                [r#"{"a":1}"#, r#"{"b":2}"#, r#"{"c":3}"#],
                "split {split}"
            );
        }
        let mut p = JsonLines::new();
        assert!(p.feed(b"\xff\n").unwrap_err().is_decode());
        let mut p = JsonLines {
            line: Vec::new(),
            max_line: 4,
        };
        assert!(p.feed(b"123456").unwrap_err().is_decode());
    }

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        chunks.iter().flat_map(|c| p.feed(c).unwrap()).collect()
    }

    #[test]
    fn parses_openai_style_data_lines() {
        let evs = parse_all(&[b"data: {\"a\":1}\n\ndata: [DONE]\n\n"]);
        assert_eq!(evs.len(), 2);
        assert_eq!(evs[0].data, "{\"a\":1}");
        assert_eq!(evs[1].data, "[DONE]");
    }

    #[test]
    fn parses_anthropic_typed_events_split_anywhere() {
        let text = b"event: message_start\r\ndata: {\"x\":1}\r\n\r\n: keep-alive\r\nevent: ping\r\ndata: {}\r\n\r\n";
        for split in 0..text.len() {
            let evs = parse_all(&[&text[..split], &text[split..]]);
            assert_eq!(evs.len(), 2, "split at {split}");
            assert_eq!(evs[0].event, "message_start");
            assert_eq!(evs[1].event, "ping");
        }
    }

    #[test]
    fn joins_multiple_data_lines() {
        let evs = parse_all(&[b"data: a\ndata: b\n\n"]);
        assert_eq!(evs[0].data, "a\nb");
    }

    #[test]
    fn reports_a_partial_event() {
        let mut p = SseParser::new();
        p.feed(b"data: {\"cut").unwrap();
        assert!(p.has_partial());
    }

    #[test]
    fn rejects_invalid_utf8_and_overlong_lines() {
        let mut p = SseParser::new();
        assert!(p.feed(b"data: \xff\xfe\n").unwrap_err().is_decode());
        let mut p = SseParser::with_max_line(8);
        assert!(p.feed(b"data: 0123456789").is_err());
    }
}
