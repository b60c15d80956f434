//! `generateContent` response bodies (the stream's events share their shape): text, function
//! calls, usage, and the errors an answer can carry.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::error;
use crate::error::{Error, ErrorKind, Result};
use crate::id::ProviderId;
use crate::provider::body::decode_json;
use crate::provider::tools::made_up_call_id;
use crate::types::{ChatResponse, FinishReason, StateData, ToolCall, TurnState, Usage};

/// A `GenerateContentResponse` (one per stream event too).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ResponseBody {
    pub(super) candidates: Option<Vec<Candidate>>,
    pub(super) prompt_feedback: Option<PromptFeedback>,
    pub(super) usage_metadata: Option<UsageMetadata>,
    pub(super) model_version: Option<String>,
    pub(super) response_id: Option<String>,
    /// An error object where a response was expected (mid-stream).
    pub(super) error: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Candidate {
    pub(super) content: Option<CandidateContent>,
    pub(super) finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct CandidateContent {
    #[serde(default)]
    parts: Vec<Part>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part {
    text: Option<String>,
    #[serde(default)]
    thought: bool,
    function_call: Option<FunctionCall>,
    /// Gemini's signature of its reasoning, to be sent back on this part.
    thought_signature: Option<String>,
}

/// A `functionCall` part: the name, the arguments (an object), and an id when Gemini gives
/// one. `Debug` shows the name, never the arguments.
#[derive(Deserialize)]
struct FunctionCall {
    id: Option<String>,
    name: Option<String>,
    args: Option<Value>,
}

impl std::fmt::Debug for FunctionCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FunctionCall")
            .field("id", &self.id)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl FunctionCall {
    /// The call as the answer's `index`th: Gemini's id when it gave one, else one made up
    /// from the index, the name and the arguments (the same call, the same id).
    fn to_call(&self, index: usize) -> Result<ToolCall> {
        let name = match self.name.as_deref() {
            Some(name) if !name.is_empty() => name,
            _ => {
                return Err(Error::decode(
                    "a functionCall part has no functionCall.name",
                ));
            }
        };
        let args = match &self.args {
            None | Some(Value::Null) => Value::Object(serde_json::Map::new()),
            Some(v @ Value::Object(_)) => v.clone(),
            Some(_) => {
                return Err(Error::decode(format!(
                    "functionCall.args of the call of `{name}` is not an object"
                )));
            }
        };
        let id = match self.id.as_deref() {
            Some(id) if !id.is_empty() => id.to_owned(),
            _ => made_up_call_id(index, name, &args),
        };
        Ok(ToolCall::new(id, name, args))
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct PromptFeedback {
    block_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct UsageMetadata {
    prompt_token_count: Option<u64>,
    candidates_token_count: Option<u64>,
    thoughts_token_count: Option<u64>,
    /// Of the prompt's tokens, those in the cached content — implicit or explicit caching
    /// (<https://ai.google.dev/api/generate-content#UsageMetadata>: "Number of tokens in the
    /// cached part of the prompt", part of `promptTokenCount`).
    cached_content_token_count: Option<u64>,
}

impl UsageMetadata {
    pub(super) fn usage(&self) -> Usage {
        let output = self
            .candidates_token_count
            .unwrap_or(0)
            .saturating_add(self.thoughts_token_count.unwrap_or(0));
        Usage::new(self.prompt_token_count.unwrap_or(0), output)
            .with_cached_input(self.cached_content_token_count.unwrap_or(0))
    }
}

impl Candidate {
    /// The answer's text: every non-thought text part, in order. `None` when the candidate
    /// carries no text part at all.
    pub(super) fn text(&self) -> Option<String> {
        let parts = &self.content.as_ref()?.parts;
        let mut texts = parts
            .iter()
            .filter(|p| !p.thought)
            .filter_map(|p| p.text.as_deref())
            .peekable();
        texts.peek()?;
        Some(texts.collect())
    }

    /// The candidate's function calls, in order; `first` is the index of the first of them in
    /// the whole answer (a stream's earlier events may have carried some).
    pub(super) fn tool_calls(&self, first: usize) -> Result<Vec<ToolCall>> {
        let Some(content) = &self.content else {
            return Ok(Vec::new());
        };
        content
            .parts
            .iter()
            .filter_map(|p| p.function_call.as_ref())
            .enumerate()
            .map(|(k, call)| call.to_call(first + k))
            .collect()
    }
}

/// The thought signatures of an answer (or of a stream so far): per call id, and the last one
/// on a part that is not a call (the text's; Gemini puts it on the last part, in a stream
/// maybe on an empty text part).
#[derive(Debug, Default)]
pub(super) struct Signatures {
    calls: BTreeMap<String, String>,
    text: Option<String>,
}

impl Signatures {
    /// Adds those of `candidate`, whose calls were read as `calls` (in the order of its
    /// `functionCall` parts).
    pub(super) fn add(&mut self, candidate: &Candidate, calls: &[ToolCall]) {
        let Some(content) = &candidate.content else {
            return;
        };
        let mut call = calls.iter();
        for part in &content.parts {
            let this = if part.function_call.is_some() {
                call.next()
            } else {
                None
            };
            let Some(sig) = part.thought_signature.as_ref().filter(|s| !s.is_empty()) else {
                continue;
            };
            match this {
                Some(c) => {
                    self.calls.insert(c.id.clone(), sig.clone());
                }
                None if part.function_call.is_none() => self.text = Some(sig.clone()),
                None => {}
            }
        }
    }

    /// The turn's state, when Gemini signed anything.
    pub(super) fn into_state(self, id: &ProviderId) -> Option<TurnState> {
        (!self.calls.is_empty() || self.text.is_some()).then(|| {
            TurnState::new(
                id.clone(),
                StateData::Gemini {
                    calls: self.calls,
                    text: self.text,
                },
            )
        })
    }
}

impl ResponseBody {
    /// The errors a response can carry instead of an answer: an error object, or a prompt
    /// blocked before any candidate was generated.
    pub(super) fn failure(&self) -> Option<Error> {
        if let Some(err) = &self.error {
            return Some(error::from_value(None, err));
        }
        let no_candidates = self.candidates.as_ref().is_none_or(Vec::is_empty);
        let reason = self.prompt_feedback.as_ref()?.block_reason.as_deref()?;
        no_candidates.then(|| {
            Error::new(
                ErrorKind::ContentFiltered,
                format!("Gemini blocked the prompt (promptFeedback.blockReason: {reason})"),
            )
            .with_code(reason)
        })
    }
}

/// Parses a `200` `generateContent` body.
pub(super) fn parse_response(id: &ProviderId, body: &[u8], model: &str) -> Result<ChatResponse> {
    let body: ResponseBody = decode_json(body, "a generateContent response")?;
    if let Some(err) = body.failure() {
        return Err(err);
    }
    let candidate = body
        .candidates
        .as_ref()
        .and_then(|c| c.first())
        .ok_or_else(|| Error::decode("generateContent response has no candidates"))?;
    let calls = candidate.tool_calls(0)?;
    let finish = candidate
        .finish_reason
        .as_deref()
        .map(|r| finish_reason(r, !calls.is_empty()));
    let text = match candidate.text() {
        Some(text) => text,
        // A candidate that only calls tools, or one cut by a limit or a filter, may carry no
        // text; one that "stopped" normally with nothing is not an answer.
        None if !calls.is_empty()
            || matches!(
                finish,
                Some(FinishReason::Length | FinishReason::ContentFilter)
            ) =>
        {
            String::new()
        }
        None => {
            return Err(Error::decode(format!(
                "generateContent candidate has no text or functionCall part (finishReason: {})",
                candidate.finish_reason.as_deref().unwrap_or("none")
            )));
        }
    };
    let mut resp = ChatResponse::new(
        id.clone(),
        body.model_version.as_deref().unwrap_or(model),
        text,
    );
    resp.finish_reason = finish;
    resp.tool_calls = calls;
    resp.usage = body.usage_metadata.as_ref().map(UsageMetadata::usage);
    resp.request_id = body.response_id;
    let mut signatures = Signatures::default();
    signatures.add(candidate, &resp.tool_calls);
    resp.provider_state = signatures.into_state(id);
    Ok(resp)
}

/// `finishReason` → neutral reason; `STOP` with function calls in the answer is
/// [`FinishReason::ToolCalls`] (Gemini has no reason of its own for it).
pub(super) fn finish_reason(reason: &str, calls: bool) -> FinishReason {
    match reason {
        "STOP" if calls => FinishReason::ToolCalls,
        "STOP" => FinishReason::Stop,
        "MAX_TOKENS" => FinishReason::Length,
        "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" | "IMAGE_SAFETY" => {
            FinishReason::ContentFilter
        }
        other => FinishReason::Other(other.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finish_reasons_map_to_neutral_ones() {
        for (wire, neutral) in [
            ("STOP", FinishReason::Stop),
            ("MAX_TOKENS", FinishReason::Length),
            ("SAFETY", FinishReason::ContentFilter),
            ("RECITATION", FinishReason::ContentFilter),
            ("BLOCKLIST", FinishReason::ContentFilter),
            ("PROHIBITED_CONTENT", FinishReason::ContentFilter),
            ("OTHER", FinishReason::Other("OTHER".into())),
        ] {
            assert_eq!(finish_reason(wire, false), neutral, "{wire}");
        }
        assert_eq!(finish_reason("STOP", true), FinishReason::ToolCalls);
        assert_eq!(finish_reason("MAX_TOKENS", true), FinishReason::Length);
    }

    fn parse(body: serde_json::Value) -> Result<ChatResponse> {
        parse_response(&ProviderId::new("g"), body.to_string().as_bytes(), "m")
    }

    #[test]
    fn function_calls_keep_gemini_ids_and_get_stable_made_up_ones_otherwise() {
        let body = json!({"candidates": [{"content": {"role": "model", "parts": [
            {"text": "Checking."},
            {"functionCall": {"name": "a", "args": {"x": 1}}},
            {"functionCall": {"id": "gem-7", "name": "b", "args": {}}},
            {"functionCall": {"name": "c"}}
        ]}, "finishReason": "STOP"}]});
        let r = parse(body).unwrap();
        assert_eq!(r.text, "Checking.");
        assert_eq!(r.finish_reason, Some(FinishReason::ToolCalls));
        let ids: Vec<&str> = r.tool_calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                made_up_call_id(0, "a", &json!({"x": 1})).as_str(),
                "gem-7",
                made_up_call_id(2, "c", &json!({})).as_str()
            ]
        );
        assert_eq!(r.tool_calls[2].arguments, json!({}));
    }

    /// <https://ai.google.dev/gemini-api/docs/thought-signatures>: the signature rides on the
    /// first `functionCall` part of a step (not on its parallel siblings), and on the last
    /// part of an answer without calls.
    #[test]
    fn thought_signatures_are_kept_per_call_and_on_the_text() {
        let body = json!({"candidates": [{"content": {"role": "model", "parts": [
            {"text": "Checking."},
            {"functionCall": {"id": "c1", "name": "a", "args": {}}, "thoughtSignature": "U0lHMQ=="},
            {"functionCall": {"id": "c2", "name": "b", "args": {}}}
        ]}, "finishReason": "STOP"}]});
        let r = parse(body).unwrap();
        let state = r.provider_state.as_ref().unwrap();
        assert_eq!(state.provider(), &ProviderId::new("g"));
        let (calls, text) = TurnState::gemini(Some(state), &ProviderId::new("g")).unwrap();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls["c1"], "U0lHMQ==");
        assert_eq!(text, None);
        assert_eq!(r.to_message().provider_state.as_ref(), Some(state));

        let body = json!({"candidates": [{"content": {"parts": [
            {"text": "Hi"}, {"text": "", "thoughtSignature": "VFhU"}
        ]}, "finishReason": "STOP"}]});
        let r = parse(body).unwrap();
        let state = r.provider_state.unwrap();
        let (calls, text) = TurnState::gemini(Some(&state), &ProviderId::new("g")).unwrap();
        assert!(calls.is_empty());
        assert_eq!(text, Some("VFhU"));

        let plain = json!({"candidates": [{"content": {"parts": [{"text": "Hi"}]}, "finishReason": "STOP"}]});
        assert!(parse(plain).unwrap().provider_state.is_none());
    }

    #[test]
    fn malformed_function_calls_are_decode_errors_naming_the_field() {
        for (part, want) in [
            (
                json!({"functionCall": {"name": "f", "args": [1]}}),
                "functionCall.args",
            ),
            (
                json!({"functionCall": {"name": "", "args": {}}}),
                "functionCall.name",
            ),
            (json!({"functionCall": {"args": {}}}), "functionCall.name"),
        ] {
            let body =
                json!({"candidates": [{"content": {"parts": [part]}, "finishReason": "STOP"}]});
            let err = parse(body).unwrap_err();
            assert!(err.is_decode(), "{want}: {err}");
            assert!(err.to_string().contains(want), "{want}: {err}");
        }
    }

    #[test]
    fn thought_parts_are_not_answer_text_but_their_tokens_are_output() {
        let body = br#"{"candidates":[{"content":{"parts":[{"text":"plan","thought":true},{"text":"Hi"}]},"finishReason":"STOP"}],
            "usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":2,"thoughtsTokenCount":40}}"#;
        let r = parse_response(&ProviderId::new("g"), body, "m").unwrap();
        assert_eq!(r.text, "Hi");
        assert_eq!(r.usage, Some(Usage::new(3, 42)));
    }

    #[test]
    fn the_cached_part_of_the_prompt_is_counted_within_it() {
        // UsageMetadata with implicit caching
        // (https://ai.google.dev/gemini-api/docs/caching#implicit-caching):
        // `cachedContentTokenCount` is part of `promptTokenCount`.
        let body = br#"{"candidates":[{"content":{"parts":[{"text":"Hi"}]},"finishReason":"STOP"}],
            "usageMetadata":{"promptTokenCount":2100,"candidatesTokenCount":5,"totalTokenCount":2105,
            "cachedContentTokenCount":2048,"promptTokensDetails":[{"modality":"TEXT","tokenCount":2100}],
            "cacheTokensDetails":[{"modality":"TEXT","tokenCount":2048}]}}"#;
        let r = parse_response(&ProviderId::new("g"), body, "m").unwrap();
        assert_eq!(r.usage, Some(Usage::new(2100, 5).with_cached_input(2048)));
    }

    #[test]
    fn a_candidate_cut_by_max_tokens_may_be_empty() {
        let body = br#"{"candidates":[{"content":{"role":"model"},"finishReason":"MAX_TOKENS"}]}"#;
        let r = parse_response(&ProviderId::new("g"), body, "m").unwrap();
        assert_eq!(r.text, "");
        assert_eq!(r.finish_reason, Some(FinishReason::Length));
        let body = br#"{"candidates":[{"content":{"role":"model"},"finishReason":"STOP"}]}"#;
        assert!(
            parse_response(&ProviderId::new("g"), body, "m")
                .unwrap_err()
                .is_decode()
        );
    }
}
