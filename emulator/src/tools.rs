//! Tools, structured answers and the end of a conversation, provider-neutral: what a chat
//! request offers (tools, a tool choice, a response format), how its conversation ends (the
//! user's turn, or tool results), and the deterministic answer each wire format renders in
//! its own shape.
//!
//! # The answer
//!
//! In this order:
//!
//! 1. **Calls.** A request that offers tools gets calls when its tool choice allows them:
//!    * a *named* tool (OpenAI `{"type": "function", …}`, Anthropic `{"type": "tool"}`,
//!      Gemini `ANY` with one `allowedFunctionNames`) is called, whatever the last turn (a
//!      forced tool is forced: Anthropic's structured answers through a tool rely on it);
//!    * otherwise only when the conversation's last message is the user's (not tool
//!      results): with `required` / `any` the tools the user's text *mentions*, else the
//!      first tool; with `auto` (the default) the tools the text mentions, else no call;
//!    * `none` never calls.
//!
//!    A tool is *mentioned* when the user's last message contains its name, or a word of
//!    four letters or more of its name or description (compared without case; common words
//!    such as `current`, `given`, `return`, `tool` do not count): "What's the weather in
//!    Paris?" mentions `get_weather` ("weather"). Two tools mentioned, two calls, in the
//!    order of the request's tools (parallel calls), unless the request turns parallel calls
//!    off (OpenAI `parallel_tool_calls: false`, Anthropic `disable_parallel_tool_use`): then
//!    the first only.
//!
//!    A call's arguments are a JSON value generated from the tool's parameter schema
//!    ([`schema`]): a string property named like a place or a search (`city`, `location`,
//!    `query`, …) takes a word of the user's text — its first capitalised word that does not
//!    start a sentence, else its last word that is not a common one. Everything is drawn
//!    from a hash of the request, so the same request gets the same calls, with the same
//!    ids.
//! 2. **A structured answer.** A response schema (OpenAI/Azure `response_format`
//!    `json_schema`, Anthropic `output_config.format`, Gemini `responseMimeType:
//!    application/json` with `responseJsonSchema` or `responseSchema`) gets a JSON value
//!    generated from it as the text; a JSON mode without a schema (`json_object`, Gemini's
//!    mime type alone) gets `{"answer": <the text below>}`.
//! 3. **Tool results quoted.** When the last messages are tool results: "The tool
//!    get_weather returned: …" for each.
//! 4. Otherwise the prompt's generated text ([`crate::text::complete`]).
//!
//! Texts are cut at `max_tokens` words (one token a word), a JSON text at `max_tokens × 4`
//! characters (a model that ran out mid-answer), both with the provider's "length" reason.
//! Calls are never cut; their output tokens are their names' and arguments' JSON characters
//! / 4.

mod schema;
mod words;

use serde_json::{Value, json};

use crate::text::{Completion, PromptDigest, complete, estimate_tokens, fixed, fnv1a, mix};
use words::{mentions, subject_word};

/// A tool a request offers.
#[derive(Clone, Debug)]
pub(crate) struct ToolDef {
    pub(crate) name: String,
    pub(crate) description: String,
    /// Its parameters' schema (`{}` when the request gave none).
    pub(crate) schema: Value,
}

/// Which calls a request allows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum Choice {
    #[default]
    Auto,
    None,
    /// At least one call (OpenAI `required`, Anthropic `any`, Gemini `ANY`).
    Any,
    /// This tool.
    Named(String),
}

/// A call an assistant turn of the conversation made.
#[derive(Clone, Debug)]
pub(crate) struct CallRef {
    pub(crate) id: Option<String>,
    pub(crate) name: String,
}

/// A tool result the conversation holds.
#[derive(Clone, Debug)]
pub(crate) struct ResultRef {
    /// The call it answers (Gemini's results have none).
    pub(crate) id: Option<String>,
    /// The tool, when the format names it (Gemini); else found from the call.
    pub(crate) name: Option<String>,
    pub(crate) content: String,
}

/// One message of the conversation, reduced to what the answer depends on.
#[derive(Clone, Debug)]
pub(crate) enum Said {
    /// System or developer instructions, or anything else.
    Other,
    User(String),
    Assistant(Vec<CallRef>),
    Results(Vec<ResultRef>),
}

/// How the conversation ends.
#[derive(Clone, Debug, Default)]
pub(crate) enum Turn {
    /// The user's message, its text.
    User(String),
    /// Tool results: (tool, content), in order.
    Results(Vec<(String, String)>),
    /// An assistant turn (a prefill) or nothing.
    #[default]
    Other,
}

/// The answer's form a request asks for.
#[derive(Clone, Debug, Default)]
pub(crate) enum Format {
    #[default]
    Text,
    /// JSON, no schema.
    JsonObject,
    /// JSON of this schema.
    Schema(Value),
    /// One value of this schema's `enum`, as plain text (Gemini `text/x.enum`).
    Enum(Value),
}

/// What a chat request asks beyond a text answer.
#[derive(Clone, Debug, Default)]
pub(crate) struct Asks {
    pub(crate) tools: Vec<ToolDef>,
    pub(crate) choice: Choice,
    /// More than one call at once allowed.
    pub(crate) parallel: bool,
    pub(crate) last: Turn,
    pub(crate) format: Format,
    /// A short text before calls the model chose to make (Anthropic, `auto`).
    pub(crate) preamble: bool,
}

/// A call the answer makes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Call {
    /// A hash of the request and the call: each format makes its id from it.
    pub(crate) key: u64,
    pub(crate) name: String,
    pub(crate) arguments: Value,
}

impl Call {
    /// The arguments as JSON text (OpenAI's `arguments` string).
    pub(crate) fn arguments_text(&self) -> String {
        self.arguments.to_string()
    }
}

/// Why an answer ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Finish {
    Stop,
    Length,
    ToolCalls,
}

/// The answer to a chat request.
#[derive(Clone, Debug)]
pub(crate) struct Answer {
    /// The text (empty, or a preamble, when there are calls).
    pub(crate) text: Completion,
    pub(crate) calls: Vec<Call>,
    /// The text is JSON (streamed in character pieces, not words).
    pub(crate) json: bool,
}

impl Answer {
    /// A text answer.
    pub(crate) fn text(text: Completion) -> Self {
        Answer {
            text,
            calls: Vec::new(),
            json: false,
        }
    }

    pub(crate) fn finish(&self) -> Finish {
        if !self.calls.is_empty() {
            Finish::ToolCalls
        } else if self.text.truncated {
            Finish::Length
        } else {
            Finish::Stop
        }
    }

    /// Output tokens: the text's, plus each call's name and arguments (characters / 4).
    pub(crate) fn tokens(&self) -> u64 {
        let calls: u64 = self
            .calls
            .iter()
            .map(|c| estimate_tokens((c.name.len() + c.arguments_text().len()) as u64))
            .sum();
        self.text.tokens + calls
    }

    /// The text in stream deltas: words for prose, character pieces for JSON.
    pub(crate) fn deltas(&self) -> Vec<&str> {
        if self.json {
            crate::text::pieces(&self.text.text, 12)
        } else {
            crate::text::deltas(&self.text.text, 3)
        }
    }
}

/// A conversation whose calls and results do not pair up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Unpaired {
    /// Message `at`, an assistant turn, made calls no result right after it answers.
    Unanswered { at: usize, ids: Vec<String> },
    /// Message `at` holds results but the message before the results is no turn that made
    /// calls.
    NoCalls { at: usize },
    /// Message `at` holds the result of call `id`, which the turn before did not make.
    Orphan { at: usize, id: String },
}

/// The first place where `conv`'s calls and results do not pair up: every call with an id
/// answered by the results right after its turn, every result after a turn that made calls
/// and (when it has an id) answering one of them.
pub(crate) fn unpaired(conv: &[Said]) -> Option<Unpaired> {
    for (i, said) in conv.iter().enumerate() {
        match said {
            Said::Assistant(calls) if !calls.is_empty() => {
                let answered: Vec<&str> = conv[i + 1..]
                    .iter()
                    .map_while(|s| match s {
                        Said::Results(rs) => Some(rs),
                        _ => None,
                    })
                    .flatten()
                    .filter_map(|r| r.id.as_deref())
                    .collect();
                let ids: Vec<String> = calls
                    .iter()
                    .filter_map(|c| c.id.clone())
                    .filter(|id| !answered.contains(&id.as_str()))
                    .collect();
                if !ids.is_empty() {
                    return Some(Unpaired::Unanswered { at: i, ids });
                }
            }
            Said::Results(results) => {
                let turn = conv[..i]
                    .iter()
                    .rev()
                    .find(|s| !matches!(s, Said::Results(_)));
                let calls = match turn {
                    Some(Said::Assistant(calls)) if !calls.is_empty() => calls,
                    _ => return Some(Unpaired::NoCalls { at: i }),
                };
                let orphan = results
                    .iter()
                    .filter_map(|r| r.id.as_deref())
                    .find(|id| !calls.iter().any(|c| c.id.as_deref() == Some(*id)));
                if let Some(id) = orphan {
                    return Some(Unpaired::Orphan {
                        at: i,
                        id: id.to_owned(),
                    });
                }
            }
            _ => {}
        }
    }
    None
}

/// How `conv` ends: the trailing results (each named by its call when the format does not
/// name it), else the user's last message.
pub(crate) fn last_turn(conv: &[Said]) -> Turn {
    let trailing = conv
        .iter()
        .rev()
        .take_while(|s| matches!(s, Said::Results(_)))
        .count();
    if trailing > 0 {
        let start = conv.len() - trailing;
        let results = conv[start..]
            .iter()
            .flat_map(|s| match s {
                Said::Results(rs) => rs.as_slice(),
                _ => &[],
            })
            .map(|r| (result_name(&conv[..start], r), r.content.clone()))
            .collect();
        return Turn::Results(results);
    }
    match conv.last() {
        Some(Said::User(text)) => Turn::User(text.clone()),
        _ => Turn::Other,
    }
}

fn result_name(before: &[Said], r: &ResultRef) -> String {
    if let Some(n) = &r.name {
        return n.clone();
    }
    before
        .iter()
        .rev()
        .filter_map(|s| match s {
            Said::Assistant(calls) => Some(calls),
            _ => None,
        })
        .flatten()
        .find(|c| c.id.is_some() && c.id == r.id)
        .map_or_else(|| "tool".to_owned(), |c| c.name.clone())
}

/// Adds what the tools and the response schema cost to a prompt (providers count both as
/// input).
pub(crate) fn add_to_prompt(asks: &Asks, prompt: &mut PromptDigest) {
    for t in &asks.tools {
        prompt.add(&t.name);
        prompt.add(&t.description);
        prompt.add(&t.schema.to_string());
    }
    if let Format::Schema(s) | Format::Enum(s) = &asks.format {
        prompt.add(&s.to_string());
    }
}

/// The answer to a request whose prompt hashes to `seed` (see the module's documentation).
pub(crate) fn answer(asks: &Asks, seed: u64, max_tokens: u64) -> Answer {
    let subject = match &asks.last {
        Turn::User(text) => subject_word(text),
        _ => None,
    };
    let calls = calls(asks, seed, subject.as_deref());
    if !calls.is_empty() {
        let text = if asks.preamble && asks.choice == Choice::Auto {
            let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
            fixed(&format!("I will call {}.", names.join(" and ")), u64::MAX)
        } else {
            fixed("", 0)
        };
        return Answer {
            text,
            calls,
            json: false,
        };
    }
    let prose = || match &asks.last {
        Turn::Results(results) => fixed(&quote(results), max_tokens),
        _ => complete(seed, max_tokens),
    };
    match &asks.format {
        Format::Text => Answer::text(prose()),
        Format::JsonObject => {
            let text = prose().text;
            json_answer(&json!({ "answer": text }), max_tokens)
        }
        Format::Schema(s) => {
            let generator = schema::Gen::new(s, subject.as_deref());
            json_answer(&generator.value(s, seed), max_tokens)
        }
        Format::Enum(s) => {
            let generator = schema::Gen::new(s, None);
            let v = generator.value(s, seed);
            let text = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
            Answer::text(fixed(&text, max_tokens))
        }
    }
}

/// A JSON value as the answer's text, cut at `max_tokens × 4` characters.
fn json_answer(v: &Value, max_tokens: u64) -> Answer {
    let full = v.to_string();
    let budget = max_tokens.saturating_mul(4);
    let chars = full.chars().count() as u64;
    let (text, truncated) = if chars > budget {
        (full.chars().take(budget as usize).collect(), true)
    } else {
        (full, false)
    };
    let tokens = estimate_tokens(text.chars().count() as u64);
    Answer {
        text: Completion {
            text,
            tokens,
            truncated,
        },
        calls: Vec::new(),
        json: true,
    }
}

fn quote(results: &[(String, String)]) -> String {
    results
        .iter()
        .map(|(name, content)| {
            let content = if content.trim().is_empty() {
                "nothing"
            } else {
                content.trim()
            };
            format!("The tool {name} returned: {content}")
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The tools `text` mentions, in the request's order.
fn mentioned<'a>(tools: &'a [ToolDef], text: &str) -> Vec<&'a ToolDef> {
    tools
        .iter()
        .filter(|t| mentions(text, &t.name, &t.description))
        .collect()
}

/// The calls the answer makes (empty: none).
fn calls(asks: &Asks, seed: u64, subject: Option<&str>) -> Vec<Call> {
    let user = match &asks.last {
        Turn::User(text) => Some(text.as_str()),
        _ => None,
    };
    let mut chosen: Vec<&ToolDef> = match (&asks.choice, user) {
        (Choice::None, _) => Vec::new(),
        (Choice::Named(name), _) => asks.tools.iter().filter(|t| &t.name == name).collect(),
        (_, None) => Vec::new(),
        (Choice::Any, Some(text)) => {
            let m = mentioned(&asks.tools, text);
            if m.is_empty() {
                asks.tools.iter().take(1).collect()
            } else {
                m
            }
        }
        (Choice::Auto, Some(text)) => mentioned(&asks.tools, text),
    };
    if !asks.parallel {
        chosen.truncate(1);
    }
    chosen
        .into_iter()
        .enumerate()
        .map(|(i, tool)| {
            let key = mix(seed ^ fnv1a(tool.name.as_bytes()) ^ (i as u64).rotate_left(32));
            let generator = schema::Gen::new(&tool.schema, subject);
            let mut arguments = generator.value(&tool.schema, key);
            if !arguments.is_object() {
                // Arguments are an object, whatever the schema says.
                arguments = json!({ "value": arguments });
            }
            Call {
                key,
                name: tool.name.clone(),
                arguments,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weather() -> ToolDef {
        ToolDef {
            name: "get_weather".into(),
            description: "The current weather in a city.".into(),
            schema: json!({"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}),
        }
    }

    fn time() -> ToolDef {
        ToolDef {
            name: "get_time".into(),
            description: "The local time in a timezone.".into(),
            schema: json!({"type": "object", "properties": {"timezone": {"type": "string"}}}),
        }
    }

    fn asks(choice: Choice, text: &str) -> Asks {
        Asks {
            tools: vec![weather(), time()],
            choice,
            parallel: true,
            last: Turn::User(text.into()),
            ..Asks::default()
        }
    }

    #[test]
    fn auto_calls_the_tools_the_user_mentions_with_a_word_of_the_text() {
        let a = answer(&asks(Choice::Auto, "What's the weather in Paris?"), 1, 100);
        assert_eq!(a.finish(), Finish::ToolCalls);
        assert_eq!(a.calls.len(), 1);
        assert_eq!(a.calls[0].name, "get_weather");
        assert_eq!(a.calls[0].arguments, json!({"city": "Paris"}));
        assert_eq!(a.text.text, "");
        let again = answer(&asks(Choice::Auto, "What's the weather in Paris?"), 1, 100);
        assert_eq!(a.calls, again.calls, "the same request, the same calls");
        let none = answer(&asks(Choice::Auto, "Say hello"), 1, 100);
        assert!(none.calls.is_empty() && !none.text.text.is_empty());
        assert_eq!(none.finish(), Finish::Stop);
    }

    #[test]
    fn two_mentioned_tools_are_two_parallel_calls_unless_parallel_is_off() {
        let mut a = asks(
            Choice::Auto,
            "What is the weather in Tokyo and the local time?",
        );
        let both = answer(&a, 1, 100);
        let names: Vec<&str> = both.calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["get_weather", "get_time"]);
        assert_eq!(both.calls[0].arguments["city"], "Tokyo");
        assert_ne!(both.calls[0].key, both.calls[1].key);
        a.parallel = false;
        assert_eq!(answer(&a, 1, 100).calls.len(), 1);
    }

    #[test]
    fn required_calls_the_first_tool_and_named_the_named_one_after_results_too() {
        let a = answer(&asks(Choice::Any, "Say hello"), 1, 100);
        assert_eq!(a.calls[0].name, "get_weather");
        let mut named = asks(Choice::Named("get_time".into()), "weather?");
        assert_eq!(answer(&named, 1, 100).calls[0].name, "get_time");
        named.last = Turn::Results(vec![("get_time".into(), "noon".into())]);
        assert_eq!(answer(&named, 1, 100).calls[0].name, "get_time");
        let mut any = asks(Choice::Any, "x");
        any.last = Turn::Results(vec![("get_weather".into(), "18 C".into())]);
        let quoted = answer(&any, 1, 100);
        assert!(quoted.calls.is_empty());
        assert_eq!(quoted.text.text, "The tool get_weather returned: 18 C");
        assert!(
            answer(&asks(Choice::None, "weather in Paris"), 1, 100)
                .calls
                .is_empty()
        );
    }

    #[test]
    fn structured_answers_are_json_of_the_schema_and_cut_at_max_tokens() {
        let mut a = asks(Choice::None, "Describe Paris");
        a.format = Format::Schema(json!({"type": "object", "properties": {
            "city": {"type": "string"}, "population": {"type": "integer"}},
            "required": ["city", "population"]}));
        let done = answer(&a, 3, 100);
        assert!(done.json);
        let v: Value = serde_json::from_str(&done.text.text).unwrap();
        assert_eq!(v["city"], "Paris");
        assert!(v["population"].is_i64());
        assert_eq!(done.finish(), Finish::Stop);
        let cut = answer(&a, 3, 2);
        assert_eq!((cut.text.text.len(), cut.finish()), (8, Finish::Length));
        a.format = Format::JsonObject;
        let obj: Value = serde_json::from_str(&answer(&a, 3, 100).text.text).unwrap();
        assert!(obj["answer"].is_string());
        a.format = Format::Enum(json!({"type": "STRING", "enum": ["yes", "no"]}));
        assert!(["yes", "no"].contains(&answer(&a, 3, 100).text.text.as_str()));
    }

    #[test]
    fn results_are_named_by_their_calls_and_pairing_is_checked() {
        let call = |id: &str| CallRef {
            id: Some(id.into()),
            name: "get_weather".into(),
        };
        let result = |id: &str| ResultRef {
            id: Some(id.into()),
            name: None,
            content: "18 C".into(),
        };
        let conv = vec![
            Said::User("weather?".into()),
            Said::Assistant(vec![call("c1"), call("c2")]),
            Said::Results(vec![result("c1")]),
            Said::Results(vec![result("c2")]),
        ];
        assert_eq!(unpaired(&conv), None);
        match last_turn(&conv) {
            Turn::Results(rs) => assert_eq!(rs[1], ("get_weather".into(), "18 C".into())),
            other => panic!("{other:?}"),
        }
        let short = &conv[..3];
        assert_eq!(
            unpaired(short),
            Some(Unpaired::Unanswered {
                at: 1,
                ids: vec!["c2".into()]
            })
        );
        let orphan = vec![
            Said::Assistant(vec![call("c1")]),
            Said::Results(vec![result("c1"), result("zz")]),
        ];
        assert_eq!(
            unpaired(&orphan),
            Some(Unpaired::Orphan {
                at: 1,
                id: "zz".into()
            })
        );
        let no_calls = vec![Said::User("x".into()), Said::Results(vec![result("c1")])];
        assert_eq!(unpaired(&no_calls), Some(Unpaired::NoCalls { at: 1 }));
    }
}
