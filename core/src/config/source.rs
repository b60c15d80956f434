//! Reading the text: the file (bounded, UTF-8), TOML syntax, the key policy scan, serde into
//! the raw types, and turning every problem into an [`Error`] that names its TOML path and,
//! where the file has it, the line and column.

use std::fmt;
use std::io::Read;
use std::ops::Range;
use std::path::Path;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::keys::{
    KEY_POOL_FIELDS, LITERAL_KEY_FIELDS, ONE_KEY_PER_ENVIRONMENT, WRITE_THE_NAME,
    check_variable_name, shown,
};
use super::raw::RawConfig;
use crate::error::{Error, Result};
use crate::ratelimit::REDIS_URL_VAR;

/// The largest providers file read: 1 MiB, far above any real one (the bundled file with
/// every provider documented is under 10 KiB). The read stops there, so an endless file
/// (`/dev/zero`, a pipe that never closes its end) ends in an error, not in exhausted memory.
pub(crate) const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Reads the providers file at `path`: at most [`MAX_CONFIG_BYTES`] (a bounded read, for
/// regular files, pipes and devices alike), as UTF-8.
///
/// # Errors
///
/// A [`Config`](crate::ErrorKind::Config) error naming `path`: it cannot be opened or read;
/// it is larger than the cap (named); it is not UTF-8 (the line and column of the first
/// invalid byte).
pub(crate) fn read_config_file(path: &Path) -> Result<String> {
    let cannot = |e: std::io::Error| {
        Error::config(format!("cannot read {}: {e}", path.display())).with_source(e)
    };
    let file = std::fs::File::open(path).map_err(cannot)?;
    read_capped(file, path, MAX_CONFIG_BYTES)
}

/// [`read_config_file`] over any reader, with the cap given.
fn read_capped(reader: impl Read, path: &Path, cap: u64) -> Result<String> {
    let mut bytes = Vec::new();
    reader
        .take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| {
            Error::config(format!("cannot read {}: {e}", path.display())).with_source(e)
        })?;
    if bytes.len() as u64 > cap {
        return Err(Error::config(format!(
            "{}: larger than {}, the most a providers file may be (is it the right file?)",
            path.display(),
            shown_bytes(cap)
        )));
    }
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        // Everything before `at` is valid UTF-8.
        let before = std::str::from_utf8(&bytes[..at]).unwrap_or_default();
        let (line, column) = Document::position(before, at);
        let what = match e.utf8_error().error_len() {
            Some(_) => format!("byte 0x{:02X}", bytes[at]),
            None => "an incomplete character at the end".to_owned(),
        };
        Error::config(format!(
            "{}: not UTF-8 text: {what} at line {line}, column {column}",
            path.display()
        ))
    })
}

/// `1 MiB`, `64 KiB`, `10 bytes`.
fn shown_bytes(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}

/// A path inside the document: `providers.openai.limits.rpm`, `environments.prod.chat[1]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TomlPath(Vec<Segment>);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment {
    Key(String),
    Index(usize),
}

impl TomlPath {
    /// The document itself.
    pub(crate) fn root() -> Self {
        TomlPath(Vec::new())
    }

    /// This path followed by a key.
    pub(crate) fn key(&self, key: &str) -> Self {
        let mut segments = self.0.clone();
        segments.push(Segment::Key(key.to_owned()));
        TomlPath(segments)
    }

    /// This path followed by an array index.
    pub(crate) fn index(&self, index: usize) -> Self {
        let mut segments = self.0.clone();
        segments.push(Segment::Index(index));
        TomlPath(segments)
    }

    fn is_root(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for TomlPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                Segment::Index(n) => write!(f, "[{n}]")?,
                Segment::Key(k) => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    let bare = !k.is_empty()
                        && k.chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
                    if super::keys::looks_like_key(k) {
                        f.write_str("\"(redacted)\"")?;
                    } else if bare {
                        f.write_str(k)?;
                    } else {
                        write!(f, "{k:?}")?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// One problem found in the document: where, and what (a message that does not repeat the
/// path; [`Document::error`] puts them together).
#[derive(Debug)]
pub(crate) struct Issue {
    pub(crate) path: TomlPath,
    pub(crate) message: String,
}

impl Issue {
    pub(crate) fn new(path: TomlPath, message: impl Into<String>) -> Self {
        Issue {
            path,
            message: message.into(),
        }
    }
}

/// The parsed document, kept for its spans.
pub(crate) struct Document<'a> {
    text: &'a str,
    root: Spanned<DeTable<'a>>,
}

impl<'a> Document<'a> {
    /// Parses TOML syntax (duplicate keys and tables included).
    pub(crate) fn parse(text: &'a str) -> Result<Self> {
        let root = DeTable::parse(text).map_err(|e| {
            let at = e
                .span()
                .map(|s| Self::position(text, s.start))
                .map(|(l, c)| format!(" at line {l}, column {c}"))
                .unwrap_or_default();
            let hint = if e.message().contains("duplicate") {
                let name = e
                    .span()
                    .and_then(|s| text.get(s))
                    .map(str::trim)
                    .filter(|name| name.len() <= 64 && !name.contains('\n'))
                    .map(|name| format!(" {}", shown(name)))
                    .unwrap_or_default();
                format!(
                    "{name}: each key, and each table such as [providers.NAME], may be defined \
                     only once"
                )
            } else {
                String::new()
            };
            Error::config(format!("TOML syntax error{at}: {}{hint}", e.message()))
        })?;
        Ok(Document { text, root })
    }

    /// Runs serde over the document into the raw types; errors name the full TOML path.
    pub(crate) fn raw(&self) -> Result<RawConfig> {
        let de = toml::Deserializer::from(self.root.clone());
        serde_path_to_error::deserialize::<_, RawConfig>(de).map_err(|err| {
            let mut path = TomlPath::root();
            for segment in err.path().iter() {
                path = match segment {
                    serde_path_to_error::Segment::Seq { index } => path.index(*index),
                    serde_path_to_error::Segment::Map { key } => path.key(key),
                    serde_path_to_error::Segment::Enum { variant } => path.key(variant),
                    _ => path,
                };
            }
            let inner = err.inner();
            let (path, message) = describe_serde_error(path, inner.message());
            self.render(&path, inner.span(), &message)
        })
    }

    /// The key policy, checked on the syntax tree before serde so that a key written into the
    /// file is reported as such, not as an unknown field or a type mismatch.
    pub(crate) fn check_key_policy(&self) -> Result<()> {
        let root = TomlPath::root();
        self.forbidden_fields(&root, self.root.get_ref())?;
        for section in ["policy", "shared", "cache", "environments", "providers"] {
            let Some(DeValue::Table(table)) = field(self.root.get_ref(), section) else {
                continue;
            };
            let path = root.key(section);
            if section == "policy" {
                self.forbidden_fields(&path, table)?;
                continue;
            }
            if section == "shared" || section == "cache" {
                self.redis_table_fields(&path, section, table)?;
                continue;
            }
            for (name, value) in table.iter() {
                let DeValue::Table(entry) = value.get_ref() else {
                    continue;
                };
                let entry_path = path.key(name.get_ref());
                self.forbidden_fields(&entry_path, entry)?;
                if section == "providers" {
                    self.api_key_env_shape(&entry_path, entry)?;
                }
            }
        }
        Ok(())
    }

    fn forbidden_fields(&self, path: &TomlPath, table: &DeTable<'_>) -> Result<()> {
        for (name, _) in table.iter() {
            let lower = name.get_ref().to_ascii_lowercase();
            let field_path = path.key(name.get_ref());
            if LITERAL_KEY_FIELDS.contains(&lower.as_str()) {
                return Err(self.error(Issue::new(
                    field_path,
                    format!(
                        "keys never go in this file; this field {WRITE_THE_NAME}, in \
                         api_key_env = {{ ENVIRONMENT = \"VARIABLE_NAME\" }}"
                    ),
                )));
            }
            if KEY_POOL_FIELDS.contains(&lower.as_str()) {
                return Err(self.error(Issue::new(
                    field_path,
                    format!(
                        "lists several keys, and keys never go in the file: \
                         {ONE_KEY_PER_ENVIRONMENT}"
                    ),
                )));
            }
        }
        Ok(())
    }

    /// `[shared]` and `[cache]` hold no provider key, and a Redis password only inside their
    /// URL (`redis_url`, `url`: the user's own Redis, like a database URL); a field of its own
    /// for one is refused.
    fn redis_table_fields(
        &self,
        path: &TomlPath,
        section: &str,
        table: &DeTable<'_>,
    ) -> Result<()> {
        for (name, _) in table.iter() {
            let lower = name.get_ref().to_ascii_lowercase();
            let secret = LITERAL_KEY_FIELDS.contains(&lower.as_str())
                || KEY_POOL_FIELDS.contains(&lower.as_str())
                || ["password", "secret", "token"]
                    .iter()
                    .any(|w| lower.contains(w));
            if !secret {
                continue;
            }
            let message = if section == "shared" {
                format!(
                    "[shared] takes no secret of its own: a Redis password goes inside \
                     redis_url (redis://:PASSWORD@host:6379), or keep the whole URL out of \
                     the file in the {REDIS_URL_VAR} environment variable; provider keys \
                     go in api_key_env"
                )
            } else {
                "[cache] takes no secret of its own: a Redis password goes inside url \
                 (redis://:PASSWORD@host:6379); provider keys go in api_key_env"
                    .to_owned()
            };
            return Err(self.error(Issue::new(path.key(name.get_ref()), message)));
        }
        Ok(())
    }

    fn api_key_env_shape(&self, provider: &TomlPath, table: &DeTable<'_>) -> Result<()> {
        let path = provider.key("api_key_env");
        let Some(value) = field(table, "api_key_env") else {
            return Ok(());
        };
        match value {
            DeValue::Array(_) => Err(self.error(Issue::new(
                path,
                format!("lists several keys: {ONE_KEY_PER_ENVIRONMENT}"),
            ))),
            DeValue::String(s) => {
                let message = check_variable_name(s).unwrap_or_else(|| {
                    format!(
                        "must be a table of environment = variable name, e.g. {{ prod = {} }}",
                        shown(s).replace('`', "\"")
                    )
                });
                Err(self.error(Issue::new(path, message)))
            }
            DeValue::Table(entries) => {
                for (env, var) in entries.iter() {
                    let entry = path.key(env.get_ref());
                    match var.get_ref() {
                        DeValue::Array(_) => {
                            return Err(self.error(Issue::new(
                                entry,
                                format!("lists several keys: {ONE_KEY_PER_ENVIRONMENT}"),
                            )));
                        }
                        DeValue::String(s) => {
                            if let Some(message) = check_variable_name(s) {
                                return Err(self.error(Issue::new(entry, message)));
                            }
                        }
                        // Other types are serde's to report ("expected a string").
                        _ => {}
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// An [`Error`] for `issue`: `path (line L, column C): message`.
    pub(crate) fn error(&self, issue: Issue) -> Error {
        self.render(&issue.path, self.span_of(&issue.path), &issue.message)
    }

    /// `path (line L, column C): message`; the position first, so that truncating a long
    /// message never loses it.
    fn render(&self, path: &TomlPath, span: Option<Range<usize>>, message: &str) -> Error {
        let at = span.map(|s| Self::position(self.text, s.start));
        // A path of absurdly long names is shortened, so that the position after it survives
        // the message cap (found by fuzz/fuzz_targets/config_toml.rs).
        let shown = shortened(&path.to_string(), MAX_PATH_SHOWN);
        Error::config(match (path.is_root(), at) {
            (false, Some((l, c))) => format!("{shown} (line {l}, column {c}): {message}"),
            (false, None) => format!("{shown}: {message}"),
            (true, Some((l, c))) => format!("line {l}, column {c}: {message}"),
            (true, None) => message.to_owned(),
        })
    }

    /// The span of the value at `path`, or of its nearest ancestor that exists.
    fn span_of(&self, path: &TomlPath) -> Option<Range<usize>> {
        let mut value: Option<&Spanned<DeValue<'_>>> = None;
        let mut best: Option<Range<usize>> = None;
        for segment in &path.0 {
            let next = match (segment, value.map(Spanned::get_ref)) {
                (Segment::Key(k), None) => entry(self.root.get_ref(), k),
                (Segment::Key(k), Some(DeValue::Table(t))) => entry(t, k),
                (Segment::Index(i), Some(DeValue::Array(a))) => a.get(*i).map(|v| (v, v.span())),
                _ => None,
            };
            let Some((v, span)) = next else { break };
            best = Some(span);
            value = Some(v);
        }
        best
    }

    /// 1-based line and column (in characters) of byte offset `at`.
    fn position(text: &str, at: usize) -> (usize, usize) {
        let at = at.min(text.len());
        let before = text.get(..at).unwrap_or(text);
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let line = before.matches('\n').count() + 1;
        let column = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
        (line, column)
    }
}

/// The value of `key` in `table`.
fn field<'t, 'i>(table: &'t DeTable<'i>, key: &str) -> Option<&'t DeValue<'i>> {
    table
        .iter()
        .find(|(k, _)| k.get_ref() == key)
        .map(|(_, v)| v.get_ref())
}

/// The longest TOML path shown in a message, in bytes; the cap on a whole message is
/// [`MAX_MESSAGE_LEN`](crate::error::MAX_MESSAGE_LEN).
const MAX_PATH_SHOWN: usize = 160;

/// `text` cut to at most `max` bytes at a character boundary, with `…` when cut.
fn shortened(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The value of `key` in `table`, with the span to point at: the value's, or the key's when
/// the value has none of its own (a `[table]` header).
fn entry<'t, 'i>(
    table: &'t DeTable<'i>,
    key: &str,
) -> Option<(&'t Spanned<DeValue<'i>>, Range<usize>)> {
    table
        .iter()
        .find(|(k, _)| k.get_ref() == key)
        .map(|(k, v)| {
            let span = if v.span().is_empty() {
                k.span()
            } else {
                v.span()
            };
            (v, span)
        })
}

/// Rewrites a serde message for a reader of the TOML file, never repeating a string value.
fn describe_serde_error(path: TomlPath, message: &str) -> (TomlPath, String) {
    if let Some(rest) = message.strip_prefix("missing field `")
        && let Some(name) = rest.strip_suffix('`')
    {
        return (path.key(name), "is required but missing".to_owned());
    }
    if let Some(rest) = message.strip_prefix("unknown field `") {
        if let Some((_, expected)) = rest.split_once("`, ") {
            return (
                path,
                format!(
                    "unknown field; valid fields here: {}",
                    expected
                        .strip_prefix("expected one of ")
                        .or_else(|| expected.strip_prefix("expected "))
                        .unwrap_or(expected)
                ),
            );
        }
        return (path, "unknown field".to_owned());
    }
    if let Some(rest) = message.strip_prefix("invalid type: ")
        && let Some((found, expected)) = rest.rsplit_once(", expected ")
    {
        // An integer beyond 64 bits arrives as an i128 (found while auditing the
        // catalogue: it read "expected an integer, found an integer").
        if found.starts_with("integer ") && found.ends_with(" as i128") {
            return (
                path,
                format!("is out of range: integers here are at most {}", i64::MAX),
            );
        }
        return (
            path,
            format!(
                "expected {}, found {}",
                friendly_types(expected),
                found_kind(found)
            ),
        );
    }
    (path, friendly_types(&redact_strings(message)))
}

/// The kind of value serde found, without the value.
fn found_kind(found: &str) -> &'static str {
    match found.split_whitespace().next().unwrap_or("") {
        "string" => "a string",
        "integer" => "an integer",
        "floating" => "a float",
        "boolean" => "a boolean",
        "map" => "a table",
        "sequence" => "an array",
        _ => "another type",
    }
}

/// Serde's and Rust's type names, in TOML's words.
fn friendly_types(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("struct ") {
        out.push_str(&rest[..i]);
        out.push_str("a table");
        let tail = &rest[i + "struct ".len()..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        rest = &tail[end..];
    }
    out.push_str(rest);
    out.replace("i64", "an integer")
        .replace("f64", "a number")
        .replace("a sequence", "an array")
        .replace("a map", "a table")
}

/// Replaces every `string "…"` in a serde message by `a string`.
fn redact_strings(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(start) = rest.find("string \"") {
        out.push_str(&rest[..start]);
        out.push_str("a string");
        let tail = &rest[start + "string \"".len()..];
        let mut escaped = false;
        let mut end = tail.len();
        for (i, c) in tail.char_indices() {
            match c {
                '\\' if !escaped => escaped = true,
                '"' if !escaped => {
                    end = i + 1;
                    break;
                }
                _ => escaped = false,
            }
        }
        rest = &tail[end.min(tail.len())..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_quote_keys_that_are_not_bare() {
        let p = TomlPath::root()
            .key("providers")
            .key("openai")
            .key("model_limits")
            .key("gpt-4.1")
            .key("rpm");
        assert_eq!(
            p.to_string(),
            "providers.openai.model_limits.\"gpt-4.1\".rpm"
        );
        let p = TomlPath::root()
            .key("environments")
            .key("prod")
            .key("chat")
            .index(2);
        assert_eq!(p.to_string(), "environments.prod.chat[2]");
    }

    #[test]
    fn positions_are_one_based_lines_and_character_columns() {
        let text = "a = 1\nbé = 2\n";
        assert_eq!(Document::position(text, 0), (1, 1));
        assert_eq!(Document::position(text, 6), (2, 1));
        assert_eq!(Document::position(text, 10), (2, 4));
        assert_eq!(Document::position(text, 999), (3, 1));
    }

    #[test]
    fn a_file_is_read_up_to_the_cap_and_no_further() {
        let path = Path::new("providers.toml");
        assert_eq!(read_capped(&b"a = 1\n"[..], path, 6).unwrap(), "a = 1\n");
        let err = read_capped(&b"a = 10\n"[..], path, 6).unwrap_err();
        assert_eq!(
            err.message(),
            "providers.toml: larger than 6 bytes, the most a providers file may be (is it the \
             right file?)"
        );
        // An endless reader ends at the cap plus one byte.
        let err = read_capped(std::io::repeat(b'#'), path, MAX_CONFIG_BYTES).unwrap_err();
        assert!(
            err.message().contains("larger than 1 MiB"),
            "{}",
            err.message()
        );
        assert_eq!(shown_bytes(64 << 10), "64 KiB");
    }

    #[cfg(unix)]
    #[test]
    fn an_endless_device_is_refused_at_the_cap() {
        let err = read_config_file(Path::new("/dev/zero")).unwrap_err();
        assert_eq!(
            err.message(),
            "/dev/zero: larger than 1 MiB, the most a providers file may be (is it the right \
             file?)"
        );
        let err = read_config_file(Path::new("/no/such/providers.toml")).unwrap_err();
        assert!(
            err.message()
                .starts_with("cannot read /no/such/providers.toml: "),
            "{}",
            err.message()
        );
    }

    #[test]
    fn a_byte_that_is_not_utf8_is_reported_with_its_line_and_column() {
        let path = Path::new("providers.toml");
        // (bytes, expected message after the path)
        let cases: [(&[u8], &str); 4] = [
            (b"\xff", "byte 0xFF at line 1, column 1"),
            (b"a = 1\n# caf\xe9\n", "byte 0xE9 at line 2, column 6"),
            // Columns count characters: the `é` before the bad byte is one.
            (
                b"[p]\nk = \"\xc3\xa9\xff\"\n",
                "byte 0xFF at line 2, column 7",
            ),
            (
                b"[p]\nk = \"\xc3\xa9\xc3",
                "an incomplete character at the end at line 2, column 7",
            ),
        ];
        for (bytes, want) in cases {
            let err = read_capped(bytes, path, MAX_CONFIG_BYTES).unwrap_err();
            assert_eq!(
                err.message(),
                format!("providers.toml: not UTF-8 text: {want}"),
                "{bytes:?}"
            );
        }
    }

    #[test]
    fn serde_messages_never_repeat_string_values() {
        let (_, msg) = describe_serde_error(
            TomlPath::root(),
            "invalid type: string \"sk-SENTINEL\", expected i64",
        );
        assert_eq!(msg, "expected an integer, found a string");
        assert_eq!(
            redact_strings("invalid value: string \"a\\\"b\", expected x"),
            "invalid value: a string, expected x"
        );
    }

    #[test]
    fn a_path_of_absurdly_long_names_keeps_the_position_in_the_message() {
        // Found by fuzz/fuzz_targets/config_toml.rs: a 600-byte key pushed the line and
        // column past the message cap.
        let long = "k".repeat(600);
        let text = format!("[providers.local]\n{long} = 1\n");
        let doc = Document::parse(&text).unwrap();
        let path = TomlPath::root().key("providers").key("local").key(&long);
        let err = doc.render(&path, Some(18..19), "unknown field");
        let message = err.message();
        assert!(
            message.contains("… (line 2, column 1): unknown field"),
            "{message}"
        );
        assert!(message.starts_with("providers.local.kkk"), "{message}");
        assert!(message.len() < 300, "{message}");
        assert_eq!(shortened("abc", 3), "abc");
        assert_eq!(shortened("abcd", 3), "abc…");
        assert_eq!(shortened("ééé", 3), "é…");
    }

    #[test]
    fn an_integer_beyond_64_bits_is_out_of_range_not_a_wrong_type() {
        for value in ["18446744073709551616", "-18446744073709551616"] {
            let (_, msg) = describe_serde_error(
                TomlPath::root(),
                &format!("invalid type: integer `{value}` as i128, expected i64"),
            );
            assert_eq!(
                msg,
                "is out of range: integers here are at most 9223372036854775807"
            );
        }
    }

    #[test]
    fn unknown_field_messages_list_the_valid_fields() {
        let (_, msg) = describe_serde_error(
            TomlPath::root(),
            "unknown field `rpmx`, expected one of `rpm`, `tpm`",
        );
        assert_eq!(msg, "unknown field; valid fields here: `rpm`, `tpm`");
        let (_, msg) = describe_serde_error(
            TomlPath::root(),
            "invalid type: integer `5`, expected struct RawLimits",
        );
        assert_eq!(msg, "expected a table, found an integer");
    }
}
