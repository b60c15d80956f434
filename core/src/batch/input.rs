//! Input lines: one JSON object per line, read as a stream with line numbers.
//!
//! ```text
//! {"id": "q1", "prompt": "Name three prime numbers.", "max_tokens": 64}
//! {"id": "q2", "messages": [{"role": "user", "content": "Hi"}], "system": "Be brief."}
//! {"id": "d1", "input": "The quick brown fox"}
//! {"id": "d2", "input": ["first text", "second text"], "dimensions": 256}
//! ```
//!
//! A line is a chat or an embedding by its fields: `prompt` or `messages` make a chat
//! ([`ChatRequest`]), `input` an embedding ([`EmbeddingRequest`]); a line with both is an
//! [`InputError`], and one file may hold both kinds. An embedding line takes `input` (a
//! non-empty string, or an array of them, answered in one request with a vector each, in
//! order), and optionally `model`, `dimensions` (a positive integer) and `input_type`
//! (`query`, `document`, `similarity`, `classification`, `clustering`); the chat fields
//! `system`, `max_tokens` and `temperature` are refused on it.
//!
//! Chat fields: `id` (a non-empty string, unique in the file, without a NUL character), then either `prompt` (a non-empty
//! string, sent as one user message) or `messages` (`[{"role": "system" | "user" |
//! "assistant", "content": "…"}]`), and optionally `system` (prepended as a system message),
//! `max_tokens` (a positive integer), `model` (overrides the provider's model) and
//! `temperature` (0 to 2). Other fields are ignored, so lines may carry your own metadata.
//! Blank lines are skipped; a UTF-8 byte-order mark and Windows line ends are accepted.
//!
//! A line that breaks these rules is not dropped: it becomes an [`InputError`] naming its
//! line number, which the runner records as a failed item of kind `invalid_input`. A line
//! without a usable id (not JSON, no `id`, an id that is not a string or holds a NUL) and a
//! line repeating an earlier id are reported by their 1-based line number instead
//! ([`ItemKey::Line`]), never under an id, so a real item's id can never collide with a bad
//! line's report.

use std::collections::HashMap;
use std::fmt;
use std::io;

use serde_json::{Map, Value};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

use super::key::ItemKey;
use crate::types::{ChatRequest, EmbeddingRequest, InputType, Message, Role};

/// Longest input line read, in bytes (8 MiB); a longer line is an [`InputError`] (and is
/// skipped without being held in memory).
const MAX_LINE_BYTES: usize = 8 << 20;

/// One valid input line: its id, its line number and the request to send.
///
/// `Debug` shows no prompt text (see [`Message`]).
///
/// # Examples
///
/// ```
/// use llm_failover::batch::{BatchItem, InputReader};
/// use llm_failover::ChatRequest;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> std::io::Result<()> {
/// let item = BatchItem::new("q1", ChatRequest::from_prompt("Name three primes."));
/// assert_eq!(item.line, 0); // built in code, not read from a file
///
/// let mut input = InputReader::new(&b"\n{\"id\": \"q1\", \"prompt\": \"Name three primes.\"}\n"[..]);
/// let read = input.next().await?.unwrap().unwrap();
/// assert_eq!((read.id.as_str(), read.line), ("q1", 2));
/// assert_eq!(read.request, item.request);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct BatchItem {
    /// The caller's id, unique in the input.
    pub id: String,
    /// 1-based line number in the input.
    pub line: u64,
    /// The request: a chat or an embedding.
    pub request: BatchRequest,
}

impl BatchItem {
    /// An item built in code (line 0: not from a file), of a [`ChatRequest`] or an
    /// [`EmbeddingRequest`].
    pub fn new(id: impl Into<String>, request: impl Into<BatchRequest>) -> Self {
        BatchItem {
            id: id.into(),
            line: 0,
            request: request.into(),
        }
    }
}

/// What one batch item asks for: a chat answer or embedding vectors.
///
/// Serialized as the request itself (no tag): a chat item's JSON is its [`ChatRequest`]'s, as
/// before embeddings were batched, and an embedding's is told by its `inputs`.
///
/// # Examples
///
/// ```
/// use llm_failover::batch::{BatchItem, BatchRequest};
/// use llm_failover::{ChatRequest, EmbeddingRequest};
///
/// let chat = BatchItem::new("q1", ChatRequest::from_prompt("Hi"));
/// assert!(matches!(chat.request, BatchRequest::Chat(_)));
/// let embed = BatchItem::new("d1", EmbeddingRequest::many(["a", "b"]));
/// assert_eq!(embed.request.as_embedding().map(|r| r.inputs.len()), Some(2));
///
/// let json = serde_json::to_string(&embed.request).unwrap();
/// let back: BatchRequest = serde_json::from_str(&json).unwrap();
/// assert_eq!(back, embed.request);
/// ```
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
#[non_exhaustive]
pub enum BatchRequest {
    /// Embedding vectors (tried first when read back: a chat request has no `inputs`).
    Embed(EmbeddingRequest),
    /// A chat completion.
    Chat(ChatRequest),
}

impl BatchRequest {
    /// The chat request, if it is one.
    pub fn as_chat(&self) -> Option<&ChatRequest> {
        match self {
            BatchRequest::Chat(r) => Some(r),
            BatchRequest::Embed(_) => None,
        }
    }

    /// The embedding request, if it is one.
    pub fn as_embedding(&self) -> Option<&EmbeddingRequest> {
        match self {
            BatchRequest::Embed(r) => Some(r),
            BatchRequest::Chat(_) => None,
        }
    }
}

impl From<ChatRequest> for BatchRequest {
    fn from(r: ChatRequest) -> Self {
        BatchRequest::Chat(r)
    }
}

impl From<EmbeddingRequest> for BatchRequest {
    fn from(r: EmbeddingRequest) -> Self {
        BatchRequest::Embed(r)
    }
}

/// An input line that cannot be sent, and why.
///
/// # Examples
///
/// ```
/// use llm_failover::batch::{InputReader, ItemKey};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> std::io::Result<()> {
/// let lines = b"{\"id\": \"q1\", \"prompt\": \"Hi\", \"max_tokens\": 0}\nnot json\n";
/// let mut input = InputReader::new(&lines[..]);
/// let err = input.next().await?.unwrap().unwrap_err();
/// assert_eq!((err.id.as_deref(), err.line), (Some("q1"), 1));
/// assert!(err.message.contains("max_tokens"));
/// assert!(err.to_string().starts_with("line 1: "));
///
/// let no_id = input.next().await?.unwrap().unwrap_err();
/// assert_eq!((no_id.id.as_deref(), no_id.key()), (None, ItemKey::Line(2)));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InputError {
    /// The line's id; `None` when it has no usable id or repeats an earlier line's (it is
    /// then reported by its line number).
    pub id: Option<String>,
    /// 1-based line number.
    pub line: u64,
    /// What is wrong, naming the field.
    pub message: String,
}

impl InputError {
    fn new(id: Option<String>, line: u64, message: impl Into<String>) -> Self {
        InputError {
            id,
            line,
            message: message.into(),
        }
    }

    /// What its result line is filed under: its id, else its line number.
    pub fn key(&self) -> ItemKey {
        match &self.id {
            Some(id) => ItemKey::Id(id.clone()),
            None => ItemKey::Line(self.line),
        }
    }
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for InputError {}

/// One parsed input line: an item, or why it cannot be sent.
pub type Parsed = std::result::Result<BatchItem, InputError>;

/// Parses one input line (without its line end). Does not check that the id is unique:
/// [`InputReader`] does.
///
/// # Errors
///
/// An [`InputError`] naming the field at fault.
// Public with `test-util`, for tests that compute a line's job id.
#[cfg_attr(feature = "test-util", visibility::make(pub))]
pub(crate) fn parse_line(text: &[u8], line: u64) -> Result<BatchItem, InputError> {
    let value: Value = serde_json::from_slice(text).map_err(|e| {
        let what = if e.is_eof() || e.is_syntax() {
            format!("not valid JSON ({e})")
        } else {
            format!("unreadable line ({e})")
        };
        InputError::new(None, line, what)
    })?;
    let Value::Object(obj) = value else {
        return Err(InputError::new(
            None,
            line,
            format!("expected a JSON object, found {}", json_type(&value)),
        ));
    };
    let id = match obj.get("id") {
        Some(Value::String(s)) if s.contains('\0') => {
            // PostgreSQL's text cannot hold it: refused on every backend alike.
            return Err(InputError::new(
                None,
                line,
                "`id` holds a NUL character (\\u0000), which no job queue can store",
            ));
        }
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        Some(Value::String(_)) => {
            return Err(InputError::new(None, line, "`id` is empty"));
        }
        Some(other) => {
            return Err(InputError::new(
                None,
                line,
                format!("`id` must be a string, found {}", json_type(other)),
            ));
        }
        None => return Err(InputError::new(None, line, "no `id` field")),
    };
    let request = if obj.contains_key("input") {
        embedding(&obj).map(BatchRequest::Embed)
    } else {
        request(&obj).map(BatchRequest::Chat)
    };
    match request {
        Ok(request) => Ok(BatchItem { id, line, request }),
        Err(message) => Err(InputError::new(Some(id), line, message)),
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn text_field(obj: &Map<String, Value>, name: &str) -> Result<Option<String>, String> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Err(format!("`{name}` is empty")),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(format!(
            "`{name}` must be a string, found {}",
            json_type(other)
        )),
    }
}

fn request(obj: &Map<String, Value>) -> Result<ChatRequest, String> {
    let mut req = ChatRequest::new();
    if let Some(system) = text_field(obj, "system")? {
        req = req.system(system);
    }
    let prompt = text_field(obj, "prompt")?;
    let messages = match obj.get("messages") {
        None | Some(Value::Null) => None,
        Some(Value::Array(list)) => Some(list),
        Some(other) => {
            return Err(format!(
                "`messages` must be an array, found {}",
                json_type(other)
            ));
        }
    };
    match (prompt, messages) {
        (Some(_), Some(_)) => return Err("give `prompt` or `messages`, not both".into()),
        (None, None) => {
            return Err("no `prompt`, no `messages` (a chat) and no `input` (an embedding)".into());
        }
        (Some(p), None) => req = req.user(p),
        (None, Some(list)) => {
            if list.is_empty() {
                return Err("`messages` is empty".into());
            }
            for (i, m) in list.iter().enumerate() {
                req = req.message(message(m).map_err(|e| format!("messages[{i}]: {e}"))?);
            }
            if req.messages.iter().all(|m| m.role == Role::System) {
                return Err("`messages` has no user or assistant message".into());
            }
        }
    }
    match obj.get("max_tokens") {
        None | Some(Value::Null) => {}
        Some(v) => match v.as_u64().filter(|n| *n > 0).map(u32::try_from) {
            Some(Ok(n)) => req = req.max_tokens(n),
            _ => return Err(format!("`max_tokens` must be a positive integer, not {v}")),
        },
    }
    if let Some(model) = text_field(obj, "model")? {
        req = req.model(model);
    }
    match obj.get("temperature") {
        None | Some(Value::Null) => {}
        Some(v) => match v.as_f64().filter(|t| (0.0..=2.0).contains(t)) {
            #[allow(clippy::cast_possible_truncation)]
            Some(t) => req = req.temperature(t as f32),
            None => {
                return Err(format!(
                    "`temperature` must be a number from 0 to 2, not {v}"
                ));
            }
        },
    }
    Ok(req)
}

/// An embedding line: `input` (a string or an array of strings), `model`, `dimensions`,
/// `input_type`.
fn embedding(obj: &Map<String, Value>) -> Result<EmbeddingRequest, String> {
    for chat in ["prompt", "messages"] {
        if obj.contains_key(chat) {
            return Err(format!(
                "give `input` (an embedding) or `{chat}` (a chat), not both"
            ));
        }
    }
    for chat in ["system", "max_tokens", "temperature"] {
        if obj.get(chat).is_some_and(|v| !v.is_null()) {
            return Err(format!(
                "`{chat}` is for chat lines; an embedding line (`input`) takes `model`, \
                 `dimensions` and `input_type`"
            ));
        }
    }
    let text = |i: Option<usize>, v: &Value| -> Result<String, String> {
        let at = i.map_or_else(|| "`input`".to_owned(), |i| format!("`input[{i}]`"));
        match v {
            Value::String(s) if s.trim().is_empty() => Err(format!("{at} is empty")),
            Value::String(s) => Ok(s.clone()),
            other => Err(format!("{at} must be a string, found {}", json_type(other))),
        }
    };
    let inputs = match &obj["input"] {
        Value::Array(list) if list.is_empty() => return Err("`input` is empty".into()),
        Value::Array(list) => list
            .iter()
            .enumerate()
            .map(|(i, v)| text(Some(i), v))
            .collect::<Result<Vec<_>, _>>()?,
        v => vec![text(None, v)?],
    };
    let mut req = EmbeddingRequest::many(inputs);
    if let Some(model) = text_field(obj, "model")? {
        req = req.model(model);
    }
    match obj.get("dimensions") {
        None | Some(Value::Null) => {}
        Some(v) => match v.as_u64().filter(|n| *n > 0).map(u32::try_from) {
            Some(Ok(n)) => req = req.dimensions(n),
            _ => return Err(format!("`dimensions` must be a positive integer, not {v}")),
        },
    }
    if let Some(t) = text_field(obj, "input_type")? {
        let all = [
            InputType::Query,
            InputType::Document,
            InputType::Similarity,
            InputType::Classification,
            InputType::Clustering,
        ];
        let Some(t) = all.into_iter().find(|k| k.as_str() == t) else {
            return Err(format!(
                "unknown `input_type` {t:?} (expected query, document, similarity, \
                 classification or clustering)"
            ));
        };
        req = req.input_type(t);
    }
    Ok(req)
}

fn message(v: &Value) -> Result<Message, String> {
    let Value::Object(m) = v else {
        return Err(format!("expected an object, found {}", json_type(v)));
    };
    let role = match m.get("role") {
        Some(Value::String(r)) => match r.as_str() {
            "system" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            other => {
                return Err(format!(
                    "unknown role {other:?} (expected system, user or assistant)"
                ));
            }
        },
        Some(other) => {
            return Err(format!(
                "`role` must be a string, found {}",
                json_type(other)
            ));
        }
        None => return Err("no `role`".into()),
    };
    let content = match m.get("content") {
        Some(Value::String(c)) if c.trim().is_empty() => return Err("`content` is empty".into()),
        Some(Value::String(c)) => c.clone(),
        Some(other) => {
            return Err(format!(
                "`content` must be a string, found {}",
                json_type(other)
            ));
        }
        None => return Err("no `content`".into()),
    };
    Ok(Message::new(role, content))
}

/// Reads input lines one at a time, numbering them and catching repeated ids.
///
/// Memory stays flat however long the input: one line at a time (a line longer than 8 MiB
/// is an [`InputError`], skipped without being held), plus the ids seen so far (to report a
/// repeated id).
///
/// # Examples
///
/// ```
/// use llm_failover::batch::InputReader;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> std::io::Result<()> {
/// let input = b"{\"id\":\"a\",\"prompt\":\"Hi\"}\n\n{\"id\":\"a\",\"prompt\":\"Again\"}\n";
/// let mut reader = InputReader::new(&input[..]);
/// assert_eq!(reader.next().await?.unwrap().unwrap().id, "a");
/// let dup = reader.next().await?.unwrap().unwrap_err(); // the blank line 2 is skipped
/// assert_eq!((dup.id, dup.line), (None, 3));
/// assert!(reader.next().await?.is_none());
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct InputReader<R> {
    reader: R,
    line: u64,
    first_seen: HashMap<String, u64>,
    buf: Vec<u8>,
}

impl<R: AsyncBufRead + Unpin> InputReader<R> {
    /// Reads from `reader` (e.g. a `tokio::io::BufReader` over a file).
    pub fn new(reader: R) -> Self {
        InputReader {
            reader,
            line: 0,
            first_seen: HashMap::new(),
            buf: Vec::new(),
        }
    }

    /// Lines read so far, blank ones included.
    pub fn lines_read(&self) -> u64 {
        self.line
    }

    /// The next non-blank line, parsed; `None` at the end of the input.
    ///
    /// # Errors
    ///
    /// Only when reading fails; a bad line is an `Ok(Some(Err(InputError)))`.
    pub async fn next(&mut self) -> io::Result<Option<Result<BatchItem, InputError>>> {
        loop {
            let Some(too_long) = self.read_raw_line().await? else {
                return Ok(None);
            };
            self.line += 1;
            let line = self.line;
            if too_long {
                return Ok(Some(Err(InputError::new(
                    None,
                    line,
                    format!("line longer than {MAX_LINE_BYTES} bytes"),
                ))));
            }
            let mut text: &[u8] = &self.buf;
            if line == 1 {
                text = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
            }
            text = text.strip_suffix(b"\r").unwrap_or(text);
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let parsed = parse_line(text, line);
            return Ok(Some(self.check_unique(parsed)));
        }
    }

    fn check_unique(&mut self, parsed: Parsed) -> Parsed {
        let (id, line) = match &parsed {
            Ok(item) => (&item.id, item.line),
            Err(InputError {
                id: Some(id), line, ..
            }) => (id, *line),
            Err(_) => return parsed,
        };
        if let Some(first) = self.first_seen.get(id.as_str()) {
            return Err(InputError::new(
                None,
                line,
                format!("duplicate id {id:?} (first on line {first})"),
            ));
        }
        self.first_seen.insert(id.clone(), line);
        parsed
    }

    /// Reads one line into `buf` (without its `\n`). `Some(true)`: the line was longer than
    /// [`MAX_LINE_BYTES`] and was skipped.
    async fn read_raw_line(&mut self) -> io::Result<Option<bool>> {
        self.buf.clear();
        let mut too_long = false;
        let mut any = false;
        loop {
            let available = self.reader.fill_buf().await?;
            if available.is_empty() {
                return Ok(any.then_some(too_long));
            }
            any = true;
            let (chunk, used, done) = match available.iter().position(|b| *b == b'\n') {
                Some(i) => (&available[..i], i + 1, true),
                None => (available, available.len(), false),
            };
            if !too_long {
                if self.buf.len() + chunk.len() > MAX_LINE_BYTES {
                    too_long = true;
                    self.buf = Vec::new();
                } else {
                    self.buf.extend_from_slice(chunk);
                }
            }
            self.reader.consume(used);
            if done {
                return Ok(Some(too_long));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_input_line_is_an_embedding_and_a_mixed_line_is_refused() {
        let item = parse_line(
            br#"{"id": "d", "input": ["a", "b"], "model": "m", "dimensions": 8, "input_type": "document"}"#,
            2,
        )
        .unwrap();
        let expected = EmbeddingRequest::many(["a", "b"])
            .model("m")
            .dimensions(8)
            .input_type(InputType::Document);
        assert_eq!(item.request, BatchRequest::Embed(expected));
        let one = parse_line(br#"{"id": "e", "input": "just one"}"#, 3).unwrap();
        assert_eq!(
            one.request,
            BatchRequest::Embed(EmbeddingRequest::new("just one"))
        );
        for (line, word) in [
            (r#"{"id": "m", "input": "x", "prompt": "y"}"#, "not both"),
            (r#"{"id": "m", "input": "x", "messages": []}"#, "not both"),
            (
                r#"{"id": "m", "input": "x", "max_tokens": 5}"#,
                "chat lines",
            ),
            (r#"{"id": "m", "input": []}"#, "empty"),
            (r#"{"id": "m", "input": ["a", 3]}"#, "input[1]"),
            (r#"{"id": "m", "input": ["a", " "]}"#, "input[1]"),
            (r#"{"id": "m", "input": 7}"#, "string"),
            (
                r#"{"id": "m", "input": "x", "dimensions": 0}"#,
                "dimensions",
            ),
            (
                r#"{"id": "m", "input": "x", "input_type": "poem"}"#,
                "input_type",
            ),
        ] {
            let err = parse_line(line.as_bytes(), 1).unwrap_err();
            assert_eq!(err.id.as_deref(), Some("m"), "{line}");
            assert!(err.message.contains(word), "{line}: {err}");
        }
        // A chat's JSON, as the queue stores it, is read back as a chat.
        let chat = BatchRequest::Chat(ChatRequest::from_prompt("Hi"));
        let json = serde_json::to_string(&chat).unwrap();
        assert_eq!(
            json,
            serde_json::to_string(chat.as_chat().unwrap()).unwrap()
        );
        assert_eq!(serde_json::from_str::<BatchRequest>(&json).unwrap(), chat);
    }

    #[test]
    fn bad_lines_are_reported_with_a_reason_and_the_best_id_known() {
        // (line, expected id ("" for none: reported by line number), a word the message must
        // contain)
        let cases: &[(&str, &str, &str)] = &[
            ("not json", "", "JSON"),
            (r#"{"id": "a", "prompt": "x""#, "", "JSON"),
            ("[1, 2]", "", "object"),
            (r#"{"prompt": "hi"}"#, "", "id"),
            (r#"{"id": "", "prompt": "hi"}"#, "", "empty"),
            (r#"{"id": 5, "prompt": "hi"}"#, "", "string"),
            (r#"{"id": "a\u0000b", "prompt": "hi"}"#, "", "NUL"),
            (r#"{"id": "a", "prompt": ""}"#, "a", "prompt"),
            (r#"{"id": "a", "prompt": "   "}"#, "a", "prompt"),
            (r#"{"id": "a"}"#, "a", "prompt"),
            (
                r#"{"id": "a", "prompt": "x", "messages": []}"#,
                "a",
                "not both",
            ),
            (r#"{"id": "a", "messages": []}"#, "a", "empty"),
            (r#"{"id": "a", "messages": "hi"}"#, "a", "array"),
            (
                r#"{"id": "a", "messages": [{"role": "tool", "content": "x"}]}"#,
                "a",
                "unknown role",
            ),
            (
                r#"{"id": "a", "messages": [{"role": "user"}]}"#,
                "a",
                "content",
            ),
            (
                r#"{"id": "a", "messages": [{"role": "user", "content": ""}]}"#,
                "a",
                "messages[0]",
            ),
            (
                r#"{"id": "a", "messages": [{"role": "system", "content": "x"}]}"#,
                "a",
                "no user",
            ),
            (
                r#"{"id": "a", "prompt": "x", "max_tokens": 0}"#,
                "a",
                "max_tokens",
            ),
            (
                r#"{"id": "a", "prompt": "x", "max_tokens": -3}"#,
                "a",
                "max_tokens",
            ),
            (
                r#"{"id": "a", "prompt": "x", "max_tokens": "10"}"#,
                "a",
                "max_tokens",
            ),
            (r#"{"id": "a", "prompt": "x", "model": 4}"#, "a", "model"),
            (r#"{"id": "a", "prompt": "x", "system": ""}"#, "a", "system"),
            (
                r#"{"id": "a", "prompt": "x", "temperature": 9}"#,
                "a",
                "temperature",
            ),
        ];
        for (text, id, word) in cases {
            let err = parse_line(text.as_bytes(), 7).expect_err(text);
            let want = if id.is_empty() {
                ItemKey::Line(7)
            } else {
                ItemKey::from(*id)
            };
            assert_eq!(err.key(), want, "{text}");
            assert_eq!(err.line, 7);
            assert!(
                err.message.contains(word),
                "{text}: {:?} lacks {word:?}",
                err.message
            );
        }
    }

    #[test]
    fn good_lines_become_requests() {
        let item = parse_line(
            br#"{"id": "x", "system": "Be brief.", "prompt": "Hi", "max_tokens": 12, "model": "m", "temperature": 0.5, "tag": "kept out"}"#,
            3,
        )
        .unwrap();
        assert_eq!(item.id, "x");
        assert_eq!(item.line, 3);
        let expected = ChatRequest::new()
            .system("Be brief.")
            .user("Hi")
            .max_tokens(12)
            .model("m")
            .temperature(0.5);
        assert_eq!(item.request, BatchRequest::Chat(expected));

        let item = parse_line(
            br#"{"id": "y", "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}, {"role": "assistant", "content": "A"}, {"role": "user", "content": "U2"}]}"#,
            1,
        )
        .unwrap();
        let chat = item.request.as_chat().unwrap();
        let roles: Vec<Role> = chat.messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [Role::System, Role::User, Role::Assistant, Role::User]
        );
    }

    async fn read_all(input: &[u8]) -> Vec<Parsed> {
        let mut reader = InputReader::new(input);
        let mut out = Vec::new();
        while let Some(p) = reader.next().await.unwrap() {
            out.push(p);
        }
        out
    }

    #[tokio::test]
    async fn reader_numbers_lines_skips_blanks_and_catches_duplicates() {
        let input = "\u{feff}{\"id\":\"a\",\"prompt\":\"1\"}\r\n\n   \n{\"id\":\"b\",\"prompt\":\"\"}\n{\"id\":\"b\",\"prompt\":\"2\"}\n{\"id\":\"a\",\"prompt\":\"3\"}\n{\"id\":\"c\",\"prompt\":\"4\"}";
        let got = read_all(input.as_bytes()).await;
        let summary: Vec<(ItemKey, u64, bool)> = got
            .iter()
            .map(|p| match p {
                Ok(i) => (ItemKey::from(i.id.as_str()), i.line, true),
                Err(e) => (e.key(), e.line, false),
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("a".into(), 1, true),
                ("b".into(), 4, false),
                (ItemKey::Line(5), 5, false),
                (ItemKey::Line(6), 6, false),
                ("c".into(), 7, true),
            ]
        );
        let Err(dup) = &got[3] else { panic!() };
        assert!(dup.message.contains("first on line 1"), "{}", dup.message);
    }

    #[tokio::test]
    async fn an_overlong_line_is_an_error_and_the_next_line_still_reads() {
        let mut input = vec![b'x'; MAX_LINE_BYTES + 10];
        input.extend_from_slice(b"\n{\"id\":\"ok\",\"prompt\":\"fine\"}\n");
        let reader = tokio::io::BufReader::with_capacity(4096, &input[..]);
        let mut reader = InputReader::new(reader);
        let first = reader.next().await.unwrap().unwrap().unwrap_err();
        assert_eq!(first.key(), ItemKey::Line(1));
        assert!(first.message.contains("longer than"));
        assert_eq!(reader.next().await.unwrap().unwrap().unwrap().id, "ok");
    }

    #[tokio::test]
    async fn invalid_utf8_is_a_bad_line_not_an_io_error() {
        let got = read_all(b"{\"id\":\"a\",\"prompt\":\"\xff\xfe\"}\n").await;
        assert_eq!(got.len(), 1);
        assert!(got[0].is_err());
    }
}
