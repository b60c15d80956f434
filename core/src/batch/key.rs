//! [`ItemKey`]: what a result line is about — an item's id, or a bad input line's number.

use std::fmt;

/// What a result line is filed under: an item's own id, or — for an input line that has no
/// id of its own to report under — the line's number.
///
/// The two never share a namespace. A bad line without a usable id (not JSON, no `id`, an id
/// that is not a string) or repeating an earlier line's id is reported as `"line": N` in place
/// of `"id"`, so an item whose real id happens to read `line:7` is never mistaken for the
/// report of line 7: resuming, compaction and the skip of finished items keep them apart.
///
/// # Examples
///
/// ```
/// use llm_failover::batch::{InputReader, ItemKey};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> std::io::Result<()> {
/// let mut input = InputReader::new(&b"\n\n\n\n\n\nnot json\n"[..]);
/// let bad = input.next().await?.unwrap().unwrap_err();
/// assert_eq!(bad.key(), ItemKey::Line(7));
/// let real = ItemKey::from("line:7"); // an item whose id is the string "line:7"
/// assert_ne!(real, bad.key());
/// assert_eq!((real.id(), bad.key().id()), (Some("line:7"), None));
/// assert_eq!(bad.key().to_string(), "line 7");
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ItemKey {
    /// The item's id, as the input line gave it.
    Id(String),
    /// The 1-based number of an input line with no id of its own to report under.
    Line(u64),
}

impl ItemKey {
    /// The id, for a key that is one.
    pub fn id(&self) -> Option<&str> {
        match self {
            ItemKey::Id(id) => Some(id),
            ItemKey::Line(_) => None,
        }
    }

    /// The line number, for a key that is one.
    pub fn line(&self) -> Option<u64> {
        match self {
            ItemKey::Id(_) => None,
            ItemKey::Line(n) => Some(*n),
        }
    }
}

impl From<String> for ItemKey {
    fn from(id: String) -> Self {
        ItemKey::Id(id)
    }
}

impl From<&str> for ItemKey {
    fn from(id: &str) -> Self {
        ItemKey::Id(id.to_owned())
    }
}

impl fmt::Display for ItemKey {
    /// The id itself, or `line N`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ItemKey::Id(id) => f.write_str(id),
            ItemKey::Line(n) => write!(f, "line {n}"),
        }
    }
}
