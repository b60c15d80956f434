//! Whether a structured answer has the shape its request asked for: JSON for
//! [`ResponseFormat::JsonObject`], JSON valid against the schema for
//! [`ResponseFormat::JsonSchema`] (with the `jsonschema` feature; without it, JSON only).
//! Failures name where and which keyword failed, never a value.

use super::{ChatRequest, ChatResponse, ResponseFormat};
use crate::error::{Error, ErrorKind, Result};

/// Schema errors named in a message, at most; the rest are counted.
#[cfg(feature = "jsonschema")]
const NAMED: usize = 3;

/// Where and how `value` fails `validator` (`/urgency: enum, /id: type (and 2 more)`);
/// `None` when it is valid.
#[cfg(feature = "jsonschema")]
pub(crate) fn schema_failures(
    validator: &jsonschema::Validator,
    value: &serde_json::Value,
) -> Option<String> {
    let mut errors = validator.iter_errors(value).map(|e| {
        let at = e.instance_path().as_str();
        let at = if at.is_empty() { "/" } else { at };
        format!("{at}: {}", e.kind().keyword())
    });
    let named: Vec<String> = errors.by_ref().take(NAMED).collect();
    if named.is_empty() {
        return None;
    }
    let more = errors.count();
    let mut s = named.join(", ");
    if more > 0 {
        s.push_str(&format!(" (and {more} more)"));
    }
    Some(s)
}

/// `Ok` when `answer` has the shape `req` asked for; else `InvalidAnswer`.
pub(crate) fn check_answer(req: &ChatRequest, answer: &ChatResponse) -> Result<()> {
    let schema = match &req.response_format {
        ResponseFormat::Text => return Ok(()),
        ResponseFormat::JsonObject => None,
        ResponseFormat::JsonSchema { schema, .. } => Some(schema),
    };
    // An answer that only calls tools has no text to check.
    if answer.text.is_empty() && !answer.tool_calls.is_empty() {
        return Ok(());
    }
    let value = answer.json()?;
    if schema.is_none() && !value.is_object() {
        return Err(invalid(answer, "is JSON but not an object"));
    }
    #[cfg(feature = "jsonschema")]
    if let Some(schema) = schema {
        let validator = jsonschema::validator_for(schema).map_err(|e| {
            Error::new(
                ErrorKind::InvalidRequest,
                format!("the response format's JSON Schema is not valid: {e}"),
            )
        })?;
        if let Some(failures) = schema_failures(&validator, &value) {
            return Err(invalid(answer, &format!("fails its schema at {failures}")));
        }
    }
    Ok(())
}

fn invalid(answer: &ChatResponse, what: &str) -> Error {
    Error::new(
        ErrorKind::InvalidAnswer,
        format!(
            "the answer of {} ({}) {what}",
            answer.provider, answer.model
        ),
    )
    .with_provider(answer.provider.clone())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::id::ProviderId;

    fn answer(text: &str) -> ChatResponse {
        ChatResponse::new(ProviderId::new("p"), "m", text)
    }

    #[test]
    fn each_format_checks_what_it_promises() {
        let schema = json!({
            "type": "object",
            "required": ["urgency"],
            "properties": { "urgency": { "enum": ["low", "high"] } }
        });
        let text = ChatRequest::from_prompt("x");
        let object = ChatRequest::from_prompt("x").response_format(ResponseFormat::JsonObject);
        let schema = ChatRequest::from_prompt("x").response_format(ResponseFormat::JsonSchema {
            name: "triage".into(),
            schema,
        });
        let cases: &[(&ChatRequest, &str, Option<&str>)] = &[
            (&text, "plain prose", None),
            (&object, r#"{"a": 1}"#, None),
            (&object, "prose, not JSON", Some("is not JSON")),
            (&object, "[1, 2]", Some("not an object")),
            (&schema, r#"{"urgency": "high"}"#, None),
            (&schema, "not json", Some("is not JSON")),
            #[cfg(feature = "jsonschema")]
            (
                &schema,
                r#"{"urgency": "banana"}"#,
                Some("fails its schema at /urgency: enum"),
            ),
            #[cfg(feature = "jsonschema")]
            (&schema, r#"{}"#, Some("fails its schema at /: required")),
        ];
        for (req, text, want) in cases {
            let got = check_answer(req, &answer(text));
            match (want, got) {
                (None, Ok(())) => {}
                (Some(w), Err(e)) => {
                    assert_eq!(e.kind(), ErrorKind::InvalidAnswer, "{text}");
                    assert!(e.message().contains(w), "{text}: {}", e.message());
                    assert!(!e.message().contains("banana"), "never the value");
                }
                (w, g) => panic!("{text}: wanted {w:?}, got {g:?}"),
            }
        }
    }
}
