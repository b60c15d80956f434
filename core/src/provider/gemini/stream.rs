//! Streamed Gemini answers (`streamGenerateContent?alt=sse`): each event's data is a
//! `GenerateContentResponse` holding the next piece of text, or whole `functionCall` parts
//! (Gemini does not split a call across events: each is handed over on the chunk that
//! carries it); the answer is complete when a candidate carries a `finishReason`. There is
//! no `[DONE]` marker.

use super::wire::{ResponseBody, Signatures, UsageMetadata, finish_reason};
use crate::error::Result;
use crate::id::ProviderId;
use crate::provider::body::json_error;
use crate::provider::{SseEvent, StreamDecoder};
use crate::types::{ChatChunk, Usage};

/// Decodes one streamed Gemini answer.
#[derive(Debug)]
pub(super) struct Decoder {
    model: String,
    model_sent: bool,
    usage: Option<Usage>,
    /// The function calls handed over so far (the next one's index, for made-up ids).
    calls: usize,
    /// The thought signatures so far, handed over whole on the last chunk.
    signatures: Signatures,
    provider: ProviderId,
    done: bool,
}

impl Decoder {
    pub(super) fn new(provider: &ProviderId, model: &str) -> Self {
        Decoder {
            model: model.to_owned(),
            model_sent: false,
            usage: None,
            calls: 0,
            signatures: Signatures::default(),
            provider: provider.clone(),
            done: false,
        }
    }
}

impl StreamDecoder for Decoder {
    fn decode(&mut self, event: &SseEvent) -> Result<Option<ChatChunk>> {
        if self.done || event.data.trim().is_empty() {
            return Ok(None);
        }
        let body: ResponseBody = serde_json::from_str(&event.data)
            .map_err(|e| json_error(&e, "a streamed generateContent response"))?;
        if let Some(err) = body.failure() {
            return Err(err);
        }
        if let Some(u) = body.usage_metadata.as_ref().map(UsageMetadata::usage) {
            self.usage = Some(u); // cumulative: the latest report is the total so far
        }
        let mut chunk = ChatChunk::default();
        if !self.model_sent {
            if let Some(v) = body.model_version {
                self.model = v;
            }
            chunk.model = Some(self.model.clone());
            self.model_sent = true;
        }
        if let Some(candidate) = body.candidates.as_ref().and_then(|c| c.first()) {
            chunk.delta = candidate.text().unwrap_or_default();
            chunk.tool_calls = candidate.tool_calls(self.calls)?;
            self.calls += chunk.tool_calls.len();
            self.signatures.add(candidate, &chunk.tool_calls);
            if let Some(reason) = candidate.finish_reason.as_deref() {
                chunk.finish_reason = Some(finish_reason(reason, self.calls > 0));
                chunk.usage = self.usage;
                chunk.provider_state =
                    std::mem::take(&mut self.signatures).into_state(&self.provider);
                self.done = true;
            }
        }
        let carries_something = !chunk.delta.is_empty()
            || !chunk.tool_calls.is_empty()
            || chunk.finish_reason.is_some()
            || chunk.model.is_some();
        Ok(carries_something.then_some(chunk))
    }

    fn is_done(&self) -> bool {
        self.done
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::ErrorKind;
    use crate::provider::tools::made_up_call_id;
    use crate::types::FinishReason;

    fn data(d: &str) -> SseEvent {
        SseEvent {
            data: d.to_owned(),
            ..SseEvent::default()
        }
    }

    #[test]
    fn the_finishing_chunk_carries_reason_and_latest_usage() {
        let mut d = Decoder::new(&ProviderId::new("g"), "requested");
        let first = d
            .decode(&data(
                r#"{"candidates":[{"content":{"parts":[{"text":"Hel"}],"role":"model"}}],"modelVersion":"gemini-2.5-flash"}"#,
            ))
            .unwrap()
            .unwrap();
        assert_eq!(first.delta, "Hel");
        assert_eq!(first.model.as_deref(), Some("gemini-2.5-flash"));
        assert!(!d.is_done());
        let last = d
            .decode(&data(
                r#"{"candidates":[{"content":{"parts":[{"text":"lo"}],"role":"model"},"finishReason":"STOP"}],
                    "usageMetadata":{"promptTokenCount":4,"candidatesTokenCount":2}}"#,
            ))
            .unwrap()
            .unwrap();
        assert_eq!(last.delta, "lo");
        assert_eq!(last.model, None);
        assert_eq!(last.finish_reason, Some(FinishReason::Stop));
        assert_eq!(last.usage, Some(Usage::new(4, 2)));
        assert!(d.is_done());
    }

    #[test]
    fn function_calls_are_handed_over_whole_and_a_stop_after_them_is_tool_calls() {
        let mut d = Decoder::new(&ProviderId::new("g"), "m");
        let first = d
            .decode(&data(
                r#"{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"a","args":{"x":1}}}]}}]}"#,
            ))
            .unwrap()
            .unwrap();
        assert_eq!(first.tool_calls.len(), 1);
        assert_eq!(
            first.tool_calls[0].id,
            made_up_call_id(0, "a", &json!({"x": 1}))
        );
        let last = d
            .decode(&data(
                r#"{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"b","args":{}}}]},"finishReason":"STOP"}]}"#,
            ))
            .unwrap()
            .unwrap();
        assert_eq!(
            last.tool_calls[0].id,
            made_up_call_id(1, "b", &json!({})),
            "indexed across the whole answer"
        );
        assert_eq!(last.finish_reason, Some(FinishReason::ToolCalls));
    }

    /// A stream's signatures arrive on the parts they sign (the text's maybe on an empty text
    /// part of its own); the last chunk hands them over whole.
    #[test]
    fn thought_signatures_come_whole_on_the_last_chunk() {
        let mut d = Decoder::new(&ProviderId::new("g"), "m");
        let first = d
            .decode(&data(
                r#"{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"id":"c1","name":"a","args":{}},"thoughtSignature":"U0lH"}]}}]}"#,
            ))
            .unwrap()
            .unwrap();
        assert!(first.provider_state.is_none());
        let last = d
            .decode(&data(
                r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"","thoughtSignature":"VFhU"}]},"finishReason":"STOP"}]}"#,
            ))
            .unwrap()
            .unwrap();
        let state = last.provider_state.unwrap();
        let (calls, text) =
            crate::types::TurnState::gemini(Some(&state), &ProviderId::new("g")).unwrap();
        assert_eq!((calls["c1"].as_str(), text), ("U0lH", Some("VFhU")));
    }

    #[test]
    fn errors_and_blocked_prompts_inside_the_stream_are_classified() {
        let mut d = Decoder::new(&ProviderId::new("g"), "m");
        let err = d
            .decode(&data(
                r#"{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}"#,
            ))
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Overloaded);
        let mut d = Decoder::new(&ProviderId::new("g"), "m");
        let err = d
            .decode(&data(r#"{"promptFeedback":{"blockReason":"SAFETY"}}"#))
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ContentFiltered);
        let err = Decoder::new(&ProviderId::new("g"), "m")
            .decode(&data("{\"cand"))
            .unwrap_err();
        assert!(err.is_decode());
    }
}
