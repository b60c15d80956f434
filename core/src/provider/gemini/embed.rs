//! Gemini embeddings (ai.google.dev/api/embeddings): one input through `:embedContent`,
//! several through `:batchEmbedContents` — one request either way, so one admission and one
//! answer with a vector per input, in order.
//!
//! - `embedContent`: `{model, content: {parts: [{text}]}, taskType, outputDimensionality}`
//!   → `{embedding: {values}}`.
//! - `batchEmbedContents`: `{requests: [that, …]}` → `{embeddings: [{values}, …]}`, each
//!   request naming the model of the URL (`models/…`). At most [`MAX_INPUTS`] (100) requests
//!   per batch, as the API answers ("at most 100 requests can be in one batch"): a request
//!   with more inputs is refused before sending (`Unsupported`), so the router passes over
//!   this provider for it — to one that takes it, or, when none does, ends the request
//!   naming the limit. A caller with more texts splits them (the batch runner sends one line's
//!   inputs per request).
//! - [`InputType`] is `taskType`; `dimensions` is `outputDimensionality`.
//! - The Gemini API states no token usage for embeddings: the answer's `usage` is `None`
//!   (admission's booking is then settled at the inputs' characters / 4, Google's own
//!   rule of thumb).

use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::{Error, ErrorKind, Result};
use crate::id::ProviderId;
use crate::types::{EmbeddingRequest, EmbeddingResponse, InputType, Usage};

/// Requests in one `batchEmbedContents` call.
pub(super) const MAX_INPUTS: usize = 100;

/// Refuses more inputs than one batch takes.
pub(super) fn check(id: &ProviderId, req: &EmbeddingRequest) -> Result<()> {
    if req.inputs.len() > MAX_INPUTS {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "provider `{id}` (Gemini batchEmbedContents) takes at most {MAX_INPUTS} \
                 embedding inputs per request, not {}; split the inputs into several requests",
                req.inputs.len()
            ),
        )
        .with_provider(id.clone()));
    }
    Ok(())
}

/// The method to call and its body, for `model` (without the `models/` prefix).
pub(super) fn request_body(req: &EmbeddingRequest, model: &str) -> (&'static str, Value) {
    let one = |text: &str| {
        let mut r = json!({
            "model": format!("models/{model}"),
            "content": { "parts": [{ "text": text }] },
        });
        if let Some(t) = req.input_type {
            r["taskType"] = json!(task_type(t));
        }
        if let Some(d) = req.dimensions {
            r["outputDimensionality"] = json!(d);
        }
        r
    };
    match req.inputs.as_slice() {
        [single] => ("embedContent", one(single)),
        many => (
            "batchEmbedContents",
            json!({ "requests": many.iter().map(|t| one(t)).collect::<Vec<_>>() }),
        ),
    }
}

/// Gemini's `taskType` for an input type.
fn task_type(t: InputType) -> &'static str {
    match t {
        InputType::Query => "RETRIEVAL_QUERY",
        InputType::Document => "RETRIEVAL_DOCUMENT",
        InputType::Similarity => "SEMANTIC_SIMILARITY",
        InputType::Classification => "CLASSIFICATION",
        InputType::Clustering => "CLUSTERING",
    }
}

#[derive(Deserialize)]
struct Wire {
    embedding: Option<Values>,
    embeddings: Option<Vec<Values>>,
    #[serde(rename = "usageMetadata")]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct Values {
    values: Vec<f32>,
}

/// Vertex AI adds it; the Gemini API does not.
#[derive(Deserialize)]
struct WireUsage {
    #[serde(rename = "promptTokenCount")]
    prompt_tokens: Option<u64>,
}

/// Parses either answer (one `embedding` or a list of `embeddings`).
pub(super) fn parse_response(
    id: &ProviderId,
    body: &[u8],
    model: &str,
) -> Result<EmbeddingResponse> {
    let decode = |what: String| Error::decode(what).with_provider(id.clone());
    let wire: Wire = serde_json::from_slice(body)
        .map_err(|e| decode(format!("embedding answer is not Gemini's format: {e}")))?;
    let vectors = match (wire.embedding, wire.embeddings) {
        (Some(one), None) => vec![one.values],
        (None, Some(many)) => many.into_iter().map(|v| v.values).collect(),
        _ => {
            return Err(decode(
                "embedding answer has neither `embedding` nor `embeddings`".to_owned(),
            ));
        }
    };
    let mut answer = EmbeddingResponse::new(id.clone(), model, vectors);
    answer.usage = wire
        .usage
        .and_then(|u| u.prompt_tokens)
        .map(|t| Usage::new(t, 0));
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_input_is_embed_content_and_many_a_batch() {
        let (method, body) = request_body(
            &EmbeddingRequest::new("hi")
                .input_type(InputType::Query)
                .dimensions(768),
            "gemini-embedding-001",
        );
        assert_eq!(method, "embedContent");
        assert_eq!(body["content"]["parts"][0]["text"], "hi");
        assert_eq!(body["taskType"], "RETRIEVAL_QUERY");
        assert_eq!(body["outputDimensionality"], 768);
        let (method, body) =
            request_body(&EmbeddingRequest::many(["a", "b"]), "text-embedding-004");
        assert_eq!(method, "batchEmbedContents");
        assert_eq!(body["requests"][1]["content"]["parts"][0]["text"], "b");
        assert_eq!(body["requests"][0]["model"], "models/text-embedding-004");
        assert!(body["requests"][0].get("taskType").is_none());
    }

    #[test]
    fn reads_both_answers_and_refuses_a_third_shape() {
        let id = ProviderId::new("gem");
        let one = parse_response(&id, br#"{"embedding":{"values":[0.5,1]}}"#, "m").unwrap();
        assert_eq!(one.vectors, [vec![0.5, 1.0]]);
        assert_eq!(one.usage, None);
        let many = parse_response(
            &id,
            br#"{"embeddings":[{"values":[1]},{"values":[2]}],"usageMetadata":{"promptTokenCount":3}}"#,
            "m",
        )
        .unwrap();
        assert_eq!(many.vectors, [vec![1.0], vec![2.0]]);
        assert_eq!(many.usage.map(|u| u.input_tokens), Some(3));
        let err = parse_response(&id, br#"{"values":[1]}"#, "m").unwrap_err();
        assert!(err.is_decode());
        assert_eq!(err.provider(), Some(&id));
    }

    #[test]
    fn more_than_a_batch_is_refused_before_sending() {
        let id = ProviderId::new("gem");
        let ok = EmbeddingRequest::many((0..MAX_INPUTS).map(|i| i.to_string()));
        assert!(check(&id, &ok).is_ok());
        let err = check(&id, &ok.input("one more")).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        assert!(err.message().contains("at most 100"), "{err}");
    }
}
