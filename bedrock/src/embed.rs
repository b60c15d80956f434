//! Embeddings through Bedrock's `InvokeModel` (`POST /model/{modelId}/invoke`), whose body
//! is the model's own:
//!
//! - **Titan Text Embeddings** (…/model-parameters-titan-embed-text.html): one text per
//!   request, `{inputText, dimensions, normalize: true}` (V2, `amazon.titan-embed-text-v2:0`;
//!   V1 takes `inputText` only) → `{embedding, inputTextTokenCount}`. A request of several
//!   texts is refused before sending (`Unsupported`): the router passes over this provider for
//!   it.
//! - **Cohere Embed** (…/model-parameters-embed.html): up to 96 texts,
//!   `{texts, input_type, output_dimension}` → `{embeddings: [[…], …]}` (or, asked by type in
//!   the extra body, `{embeddings: {float: […]}}`). `input_type` is required by v3 models:
//!   the request's [`InputType`] (`search_query`, `search_document`, `classification`,
//!   `clustering`; `search_document` when none is given or for similarity).
//!
//! The usage is `inputTextTokenCount` or the `x-amzn-bedrock-input-token-count` header.
//! Another model is refused before sending, naming the two families.

use http::HeaderMap;
use llm_failover_core::{
    EmbeddingRequest, EmbeddingResponse, Error, ErrorKind, InputType, ProviderId, Result, Usage,
};
use serde::Deserialize;
use serde_json::{Value, json};

/// Texts in one Cohere request.
const COHERE_TEXTS: usize = 96;

/// The embedding model families `InvokeModel` is wired for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    /// Titan V2 (`dimensions`, `normalize`).
    TitanV2,
    /// Titan V1 (`inputText` only).
    TitanV1,
    Cohere,
}

fn family(id: &ProviderId, model: &str) -> Result<Family> {
    if model.contains("titan-embed-text-v2") {
        Ok(Family::TitanV2)
    } else if model.contains("titan-embed-text-v1") || model.contains("titan-embed-g1-text") {
        Ok(Family::TitanV1)
    } else if model.contains("cohere.embed-") {
        Ok(Family::Cohere)
    } else {
        Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "provider `{id}` embeds with Titan Text Embeddings (amazon.titan-embed-text-*) \
                 and Cohere Embed (cohere.embed-*) models, not `{model}`"
            ),
        ))
    }
}

/// Whether `model` can embed `req` in one request.
pub(crate) fn check(id: &ProviderId, req: &EmbeddingRequest, model: Option<&str>) -> Result<()> {
    let Some(model) = model else {
        return Ok(()); // no model known yet: the request names none and no default is set
    };
    let unsupported = |m: String| Err(Error::new(ErrorKind::Unsupported, m));
    match family(id, model)? {
        Family::TitanV1 | Family::TitanV2 if req.inputs.len() > 1 => unsupported(format!(
            "provider `{id}`: Titan ({model}) embeds one text per request, not {}",
            req.inputs.len()
        )),
        Family::Cohere if req.inputs.len() > COHERE_TEXTS => unsupported(format!(
            "provider `{id}`: Cohere Embed takes at most {COHERE_TEXTS} texts per request, not \
             {}; split the inputs into several requests",
            req.inputs.len()
        )),
        _ => Ok(()),
    }
}

/// The `InvokeModel` body for `model`.
pub(crate) fn request_body(id: &ProviderId, req: &EmbeddingRequest, model: &str) -> Result<Value> {
    let fam = family(id, model)?;
    check(id, req, Some(model))?;
    Ok(match fam {
        Family::TitanV2 => {
            let mut body = json!({ "inputText": req.inputs[0], "normalize": true });
            if let Some(d) = req.dimensions {
                body["dimensions"] = json!(d);
            }
            body
        }
        Family::TitanV1 => json!({ "inputText": req.inputs[0] }),
        Family::Cohere => {
            let input_type = match req.input_type {
                Some(InputType::Query) => "search_query",
                Some(InputType::Classification) => "classification",
                Some(InputType::Clustering) => "clustering",
                _ => "search_document",
            };
            let mut body = json!({ "texts": req.inputs, "input_type": input_type });
            if let Some(d) = req.dimensions {
                body["output_dimension"] = json!(d);
            }
            body
        }
    })
}

#[derive(Deserialize)]
struct Wire {
    /// Titan.
    embedding: Option<Vec<f32>>,
    #[serde(rename = "inputTextTokenCount")]
    tokens: Option<u64>,
    /// Cohere: a list of vectors, or vectors by type.
    embeddings: Option<Value>,
}

/// Parses either family's answer.
pub(crate) fn parse_response(
    id: &ProviderId,
    body: &[u8],
    headers: &HeaderMap,
    model: &str,
) -> Result<EmbeddingResponse> {
    // The exchange adds the provider to the error; the message names it too.
    let decode = |what: String| Error::new(ErrorKind::Decode, format!("provider `{id}`: {what}"));
    let wire: Wire = serde_json::from_slice(body)
        .map_err(|e| decode(format!("embedding answer is not Bedrock's format: {e}")))?;
    let vectors = match (wire.embedding, wire.embeddings) {
        (Some(v), _) => vec![v],
        (None, Some(Value::Object(by_type))) => {
            let floats = by_type.get("float").cloned().ok_or_else(|| {
                decode("Cohere's answer by type has no `float` vectors".to_owned())
            })?;
            serde_json::from_value(floats).map_err(|e| decode(format!("`float`: {e}")))?
        }
        (None, Some(list)) => {
            serde_json::from_value(list).map_err(|e| decode(format!("`embeddings`: {e}")))?
        }
        (None, None) => {
            return Err(decode(
                "embedding answer has neither `embedding` nor `embeddings`".to_owned(),
            ));
        }
    };
    let mut answer = EmbeddingResponse::new(id.clone(), model, vectors);
    let header = headers
        .get("x-amzn-bedrock-input-token-count")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok());
    answer.usage = wire.tokens.or(header).map(|t| Usage::new(t, 0));
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> ProviderId {
        ProviderId::new("bedrock")
    }

    #[test]
    fn titan_takes_one_text_and_cohere_many() {
        let one = EmbeddingRequest::new("hi").dimensions(256);
        let titan = request_body(&id(), &one, "amazon.titan-embed-text-v2:0").unwrap();
        assert_eq!(
            titan,
            json!({"inputText": "hi", "normalize": true, "dimensions": 256})
        );
        let two = EmbeddingRequest::many(["a", "b"]).input_type(InputType::Query);
        let err = check(&id(), &two, Some("amazon.titan-embed-text-v2:0")).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        let cohere = request_body(&id(), &two, "cohere.embed-english-v3").unwrap();
        assert_eq!(
            cohere,
            json!({"texts": ["a", "b"], "input_type": "search_query"})
        );
        let many = EmbeddingRequest::many((0..97).map(|i| i.to_string()));
        assert!(check(&id(), &many, Some("cohere.embed-english-v3")).is_err());
        let other = check(&id(), &one, Some("amazon.nova-lite-v1:0")).unwrap_err();
        assert!(other.message().contains("Titan"), "{other}");
    }

    #[test]
    fn reads_both_answers_with_their_usage() {
        let titan = parse_response(
            &id(),
            br#"{"embedding":[0.5,0.5],"inputTextTokenCount":3}"#,
            &HeaderMap::new(),
            "m",
        )
        .unwrap();
        assert_eq!(
            (titan.vectors, titan.usage.map(|u| u.input_tokens)),
            (vec![vec![0.5, 0.5]], Some(3))
        );
        let mut h = HeaderMap::new();
        h.insert("x-amzn-bedrock-input-token-count", "7".parse().unwrap());
        let cohere = parse_response(
            &id(),
            br#"{"embeddings":[[1],[2]],"id":"x","response_type":"embeddings_floats"}"#,
            &h,
            "m",
        )
        .unwrap();
        assert_eq!(cohere.vectors, [vec![1.0], vec![2.0]]);
        assert_eq!(cohere.usage.map(|u| u.input_tokens), Some(7));
        let typed = parse_response(&id(), br#"{"embeddings":{"float":[[3]]}}"#, &h, "m").unwrap();
        assert_eq!(typed.vectors, [vec![3.0]]);
        assert!(
            parse_response(&id(), br#"{}"#, &h, "m")
                .unwrap_err()
                .is_decode()
        );
    }
}
