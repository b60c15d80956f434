//! Streamed Chat Completions: `data: {chat.completion.chunk}` events ending in `data: [DONE]`.
//!
//! With `stream_options.include_usage`, the last chunk before `[DONE]` has an empty `choices`
//! array and the whole request's `usage`. Azure may send a first chunk with empty `choices`
//! and only `prompt_filter_results`; it carries nothing and yields no chunk.

use super::chat::{ended_with_error, finish_reason, usage};
use super::error::{from_api_error, ApiError};
use super::wire::ChunkWire;
use crate::error::{Error, Result};
use crate::id::ProviderId;
use crate::provider::{SseEvent, StreamDecoder};
use crate::types::ChatChunk;

/// Decodes one OpenAI-style stream.
#[derive(Debug)]
pub(crate) struct ChunkDecoder {
    provider: ProviderId,
    done: bool,
}

impl ChunkDecoder {
    pub(crate) fn new(provider: ProviderId) -> Self {
        ChunkDecoder {
            provider,
            done: false,
        }
    }

    fn decode_error(&self, what: String) -> Error {
        Error::decode(what).with_provider(self.provider.clone())
    }
}

impl StreamDecoder for ChunkDecoder {
    fn decode(&mut self, event: &SseEvent) -> Result<Option<ChatChunk>> {
        let data = event.data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(None);
        }
        if data.is_empty() {
            return Ok(None);
        }
        if event.event == "error" {
            let api = ApiError::from_body(data.as_bytes()).unwrap_or_else(|| ApiError {
                message: Some(format!(
                    "error event: {}",
                    super::error::snippet(data.as_bytes())
                )),
                ..ApiError::default()
            });
            return Err(from_api_error(&self.provider, &api));
        }
        let wire: ChunkWire = serde_json::from_str(data).map_err(|e| {
            self.decode_error(format!(
                "malformed chat.completion.chunk from `{}`: {e}",
                self.provider
            ))
        })?;
        if let Some(api) = wire.error.as_ref().and_then(ApiError::from_value) {
            return Err(from_api_error(&self.provider, &api));
        }
        let mut chunk = ChatChunk::default();
        let choices = wire.choices.unwrap_or_default();
        let choice = choices
            .iter()
            .find(|c| c.index.unwrap_or(0) == 0)
            .or(choices.first());
        if let Some(choice) = choice {
            if let Some(text) = choice.delta.as_ref().and_then(|d| d.content.as_deref()) {
                chunk.delta.push_str(text);
            }
            if let Some(reason) = choice.finish_reason.as_deref() {
                if reason == "error" {
                    return Err(ended_with_error(&self.provider));
                }
                chunk.finish_reason = Some(finish_reason(reason));
            }
        }
        chunk.usage = wire.usage.as_ref().and_then(usage);
        if chunk.delta.is_empty() && chunk.finish_reason.is_none() && chunk.usage.is_none() {
            return Ok(None);
        }
        chunk.model = wire.model.filter(|m| !m.is_empty());
        Ok(Some(chunk))
    }

    fn is_done(&self) -> bool {
        self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::types::{FinishReason, Usage};

    fn data(s: &str) -> SseEvent {
        SseEvent {
            data: s.to_owned(),
            ..SseEvent::default()
        }
    }

    fn decoder() -> ChunkDecoder {
        ChunkDecoder::new(ProviderId::new("openai"))
    }

    #[test]
    fn decodes_deltas_finish_usage_and_done() {
        let mut d = decoder();
        let role_only = r#"{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":null}"#;
        assert_eq!(d.decode(&data(role_only)).unwrap(), None);
        let hello = r#"{"model":"m","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}"#;
        let c = d.decode(&data(hello)).unwrap().unwrap();
        assert_eq!(c.delta, "Hel");
        assert_eq!(c.model.as_deref(), Some("m"));
        let stop = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
        let c = d.decode(&data(stop)).unwrap().unwrap();
        assert_eq!(c.finish_reason, Some(FinishReason::Stop));
        let usage =
            r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}"#;
        let c = d.decode(&data(usage)).unwrap().unwrap();
        assert_eq!(
            c.usage,
            Some(Usage {
                input_tokens: 9,
                output_tokens: 2
            })
        );
        assert!(!d.is_done());
        assert_eq!(d.decode(&data("[DONE]")).unwrap(), None);
        assert!(d.is_done());
    }

    #[test]
    fn in_band_errors_are_classified() {
        let mut d = decoder();
        let err = d
            .decode(&data(
                r#"{"error":{"message":"boom","type":"server_error"}}"#,
            ))
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Server);
        assert_eq!(err.code(), Some("server_error"));
        let err = d
            .decode(&data(
                r#"{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"error"}]}"#,
            ))
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Server);
        let mut ev = data("not json");
        ev.event = "error".into();
        assert_eq!(d.decode(&ev).unwrap_err().kind(), ErrorKind::Server);
    }

    #[test]
    fn malformed_json_is_a_decode_error_naming_the_provider() {
        let err = decoder().decode(&data("{\"choices\": [")).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Decode);
        assert_eq!(err.provider().map(ProviderId::as_str), Some("openai"));
        assert!(err.message().contains("`openai`"), "{err}");
    }

    #[test]
    fn ignores_keep_alives_and_azure_filter_only_chunks() {
        let mut d = decoder();
        assert_eq!(d.decode(&data("")).unwrap(), None);
        let azure_first = r#"{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{}}]}"#;
        assert_eq!(d.decode(&data(azure_first)).unwrap(), None);
    }
}
