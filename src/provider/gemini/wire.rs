//! `generateContent` request and response bodies (the stream's events share the response
//! shape).

use serde::{Deserialize, Serialize};

use super::error;
use crate::error::{Error, ErrorKind, Result};
use crate::id::ProviderId;
use crate::provider::body::{decode_json, json_f32};
use crate::types::{ChatRequest, ChatResponse, FinishReason, ResponseFormat, Role, Usage};

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RequestBody<'a> {
    contents: Vec<Content<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system_instruction: Option<SystemInstruction<'a>>,
    #[serde(skip_serializing_if = "GenerationConfig::is_empty")]
    generation_config: GenerationConfig<'a>,
}

#[derive(Debug, Serialize)]
struct Content<'a> {
    role: &'static str,
    parts: Vec<TextPart<'a>>,
}

#[derive(Debug, Serialize)]
struct SystemInstruction<'a> {
    parts: Vec<TextPart<'a>>,
}

#[derive(Debug, Serialize)]
struct TextPart<'a> {
    text: &'a str,
}

#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct GenerationConfig<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    response_mime_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_schema: Option<&'a serde_json::Value>,
}

impl GenerationConfig<'_> {
    fn is_empty(&self) -> bool {
        self.max_output_tokens.is_none()
            && self.temperature.is_none()
            && self.stop_sequences.is_empty()
            && self.response_mime_type.is_none()
    }
}

/// Translates a neutral request into a `GenerateContentRequest`.
pub(super) fn request_body(req: &ChatRequest) -> Result<RequestBody<'_>> {
    let mut system = Vec::new();
    let mut contents: Vec<Content<'_>> = Vec::new();
    for m in &req.messages {
        let role = match m.role {
            Role::System => {
                system.push(TextPart { text: &m.content });
                continue;
            }
            Role::User => "user",
            Role::Assistant => "model",
            // Until the Gemini adapter writes tool results (issue 21): refused, never dropped.
            Role::Tool => {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    "tool results are not written by the Gemini adapter yet",
                ))
            }
        };
        let part = TextPart { text: &m.content };
        match contents.last_mut() {
            Some(last) if last.role == role => last.parts.push(part),
            _ => contents.push(Content {
                role,
                parts: vec![part],
            }),
        }
    }
    if contents.is_empty() {
        return Err(Error::new(
            ErrorKind::InvalidRequest,
            "a Gemini request needs at least one user or assistant message (system messages \
             alone are not a conversation)",
        ));
    }
    let (response_mime_type, response_schema) = match &req.response_format {
        ResponseFormat::Text => (None, None),
        ResponseFormat::JsonObject => (Some("application/json"), None),
        ResponseFormat::JsonSchema { schema, .. } => (Some("application/json"), Some(schema)),
    };
    Ok(RequestBody {
        contents,
        system_instruction: (!system.is_empty()).then_some(SystemInstruction { parts: system }),
        generation_config: GenerationConfig {
            max_output_tokens: req.max_tokens,
            temperature: req
                .temperature
                .map(|t| json_f32(t, "temperature"))
                .transpose()?,
            stop_sequences: &req.stop,
            response_mime_type,
            response_schema,
        },
    })
}

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
struct Part {
    text: Option<String>,
    #[serde(default)]
    thought: bool,
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
}

impl UsageMetadata {
    pub(super) fn usage(&self) -> Usage {
        Usage {
            input_tokens: self.prompt_token_count.unwrap_or(0),
            output_tokens: self
                .candidates_token_count
                .unwrap_or(0)
                .saturating_add(self.thoughts_token_count.unwrap_or(0)),
        }
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
    let finish = candidate.finish_reason.as_deref().map(finish_reason);
    let text = match candidate.text() {
        Some(text) => text,
        // A candidate cut by a limit or a filter may carry no text; one that "stopped"
        // normally with nothing is not an answer.
        None if matches!(
            finish,
            Some(FinishReason::Length | FinishReason::ContentFilter)
        ) =>
        {
            String::new()
        }
        None => {
            return Err(Error::decode(format!(
                "generateContent candidate has no text part (finishReason: {})",
                candidate.finish_reason.as_deref().unwrap_or("none")
            )))
        }
    };
    let mut resp = ChatResponse::new(
        id.clone(),
        body.model_version.as_deref().unwrap_or(model),
        text,
    );
    resp.finish_reason = finish;
    resp.usage = body.usage_metadata.as_ref().map(UsageMetadata::usage);
    resp.request_id = body.response_id;
    Ok(resp)
}

/// `finishReason` → neutral reason.
pub(super) fn finish_reason(reason: &str) -> FinishReason {
    match reason {
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
    fn roles_become_user_and_model_with_same_role_runs_as_parts() {
        let req = ChatRequest::new()
            .system("Be brief.")
            .user("a")
            .user("b")
            .assistant("c")
            .system("Use French.");
        let v = serde_json::to_value(request_body(&req).unwrap()).unwrap();
        assert_eq!(
            v,
            json!({
                "contents": [
                    {"role": "user", "parts": [{"text": "a"}, {"text": "b"}]},
                    {"role": "model", "parts": [{"text": "c"}]}
                ],
                "systemInstruction": {"parts": [{"text": "Be brief."}, {"text": "Use French."}]}
            })
        );
    }

    #[test]
    fn json_schema_sets_mime_type_and_schema() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        let req = ChatRequest::from_prompt("x").response_format(ResponseFormat::JsonSchema {
            name: "thing".into(),
            schema: schema.clone(),
        });
        let v = serde_json::to_value(request_body(&req).unwrap()).unwrap();
        assert_eq!(
            v["generationConfig"]["responseMimeType"],
            "application/json"
        );
        assert_eq!(v["generationConfig"]["responseSchema"], schema);
    }

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
            assert_eq!(finish_reason(wire), neutral, "{wire}");
        }
    }

    #[test]
    fn thought_parts_are_not_answer_text_but_their_tokens_are_output() {
        let body = br#"{"candidates":[{"content":{"parts":[{"text":"plan","thought":true},{"text":"Hi"}]},"finishReason":"STOP"}],
            "usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":2,"thoughtsTokenCount":40}}"#;
        let r = parse_response(&ProviderId::new("g"), body, "m").unwrap();
        assert_eq!(r.text, "Hi");
        assert_eq!(
            r.usage,
            Some(Usage {
                input_tokens: 3,
                output_tokens: 42
            })
        );
    }

    #[test]
    fn a_candidate_cut_by_max_tokens_may_be_empty() {
        let body = br#"{"candidates":[{"content":{"role":"model"},"finishReason":"MAX_TOKENS"}]}"#;
        let r = parse_response(&ProviderId::new("g"), body, "m").unwrap();
        assert_eq!(r.text, "");
        assert_eq!(r.finish_reason, Some(FinishReason::Length));
        let body = br#"{"candidates":[{"content":{"role":"model"},"finishReason":"STOP"}]}"#;
        assert!(parse_response(&ProviderId::new("g"), body, "m")
            .unwrap_err()
            .is_decode());
    }
}
