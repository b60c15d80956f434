//! Vertex AI text embeddings through `:predict`
//! (cloud.google.com/vertex-ai/generative-ai/docs/model-reference/text-embeddings-api;
//! …/reference/rest/Shared.Types/TextEmbeddingPredictionParams): `{instances: [{content,
//! task_type, title}], parameters: {autoTruncate, outputDimensionality}}` →
//! `{predictions: [{embeddings: {values, statistics: {token_count, truncated}}}], metadata:
//! {billableCharacterCount}}`.
//!
//! The documented limits: `gemini-embedding-001` takes one instance a request, the other
//! models up to 250, and 20,000 input tokens a request in all; an input beyond its 2048
//! tokens is cut (`statistics.truncated`) unless `autoTruncate` is false, when it is an
//! `INVALID_ARGUMENT`. Billable characters are the inputs' characters without white space.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::gemini_embed::{INPUT_TOKENS, model_dims};
use super::{ApiError, EmbedForm, EmbedInput, EmbedReq, EmbedText, json_bytes};

/// Instances in one request (`gemini-embedding-001`: one).
const MAX_INSTANCES: usize = 250;
/// Input tokens in one request.
const MAX_REQUEST_TOKENS: u64 = 20_000;

const TASK_TYPES: [&str; 8] = [
    "RETRIEVAL_QUERY",
    "RETRIEVAL_DOCUMENT",
    "SEMANTIC_SIMILARITY",
    "CLASSIFICATION",
    "CLUSTERING",
    "QUESTION_ANSWERING",
    "FACT_VERIFICATION",
    "CODE_RETRIEVAL_QUERY",
];

#[derive(Deserialize)]
struct Body {
    instances: Option<Vec<Instance>>,
    parameters: Option<Parameters>,
}

#[derive(Deserialize)]
struct Instance {
    content: Option<Value>,
    #[serde(alias = "taskType")]
    task_type: Option<String>,
}

#[derive(Deserialize)]
struct Parameters {
    #[serde(rename = "autoTruncate", alias = "auto_truncate")]
    auto_truncate: Option<bool>,
    #[serde(rename = "outputDimensionality", alias = "output_dimensionality")]
    output_dimensionality: Option<Value>,
}

/// Parses a `:predict` body for the text-embedding model `model`.
pub(super) fn parse(model: &str, body: &[u8]) -> Result<EmbedReq, ApiError> {
    let b: Body = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad(format!("Invalid JSON payload received. {e}")))?;
    let instances = b.instances.unwrap_or_default();
    if instances.is_empty() {
        return Err(ApiError::bad("Empty instances."));
    }
    let cap = if model.starts_with("gemini-embedding") {
        1
    } else {
        MAX_INSTANCES
    };
    if instances.len() > cap {
        return Err(ApiError::bad(format!(
            "Unable to submit request because {model} supports up to {cap} instances per \
             request, but {} were sent. Send fewer instances and try again.",
            instances.len()
        )));
    }
    let (auto_truncate, asked) = match b.parameters {
        Some(p) => (p.auto_truncate.unwrap_or(true), p.output_dimensionality),
        None => (true, None),
    };
    let native = model_dims(model);
    let dims = match asked {
        None | Some(Value::Null) => native,
        Some(v) => match v.as_u64() {
            Some(d) if (1..=native as u64).contains(&d) => d as usize,
            _ => {
                return Err(ApiError::bad(format!(
                    "Unsupported output dimensionality {v} for model {model}: it must be between \
                     1 and {native}."
                )));
            }
        },
    };
    let mut inputs = Vec::with_capacity(instances.len());
    for (i, inst) in instances.into_iter().enumerate() {
        if let Some(t) = inst.task_type.filter(|t| !TASK_TYPES.contains(&t.as_str())) {
            return Err(ApiError::bad(format!(
                "Invalid task_type {t:?} in instance {i}: expected one of {}.",
                TASK_TYPES.join(", ")
            )));
        }
        let Some(Value::String(text)) = inst.content else {
            return Err(ApiError::bad(format!(
                "Instance {i}: content is required and must be a string."
            )));
        };
        let input = EmbedInput::text(text);
        if !auto_truncate && input.tokens > INPUT_TOKENS {
            return Err(ApiError::bad(format!(
                "Unable to submit request because the input token count is {} but model \
                 {model} supports up to {INPUT_TOKENS}. Reduce the input token count and try \
                 again, or set autoTruncate to true.",
                input.tokens
            )));
        }
        inputs.push(input.truncate_to(INPUT_TOKENS));
    }
    let total: u64 = inputs.iter().map(|i| i.tokens).sum();
    if total > MAX_REQUEST_TOKENS {
        return Err(ApiError::bad(format!(
            "Unable to submit request because the input token count is {total} but the request \
             supports up to {MAX_REQUEST_TOKENS}. Send fewer or shorter instances and try again."
        )));
    }
    Ok(EmbedReq {
        model: model.to_owned(),
        inputs,
        native,
        dims,
        renormalize: false,
        form: EmbedForm::VertexPredict,
    })
}

#[derive(Serialize)]
struct Answer {
    predictions: Vec<Prediction>,
    metadata: Metadata,
}

#[derive(Serialize)]
struct Prediction {
    embeddings: Embedding,
}

#[derive(Serialize)]
struct Embedding {
    statistics: Statistics,
    values: Vec<f32>,
}

#[derive(Serialize)]
struct Statistics {
    truncated: bool,
    token_count: u64,
}

#[derive(Serialize)]
struct Metadata {
    #[serde(rename = "billableCharacterCount")]
    billable_characters: u64,
}

/// The answer to `req`.
pub(super) fn render(req: &EmbedReq) -> bytes::Bytes {
    let predictions = req
        .vectors()
        .into_iter()
        .zip(&req.inputs)
        .map(|(values, input)| Prediction {
            embeddings: Embedding {
                statistics: Statistics {
                    truncated: input.truncated,
                    token_count: input.tokens,
                },
                values,
            },
        })
        .collect();
    let billable = req
        .inputs
        .iter()
        .map(|i| match &i.text {
            EmbedText::Text(t) => t.chars().filter(|c| !c.is_whitespace()).count() as u64,
            EmbedText::Tokens(_) => 0,
        })
        .sum();
    json_bytes(&Answer {
        predictions,
        metadata: Metadata {
            billable_characters: billable,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refusal(model: &str, body: Value) -> String {
        match parse(model, body.to_string().as_bytes()) {
            Err(ApiError::BadRequest { message, .. }) => message,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn answers_each_instance_with_its_statistics() {
        let body = json!({"instances": [{"content": "The weather in Paris",
                                         "task_type": "RETRIEVAL_DOCUMENT"},
                                        {"content": "x".repeat(4 * 3000)}],
                          "parameters": {"outputDimensionality": 256}});
        let r = parse("text-embedding-005", body.to_string().as_bytes()).unwrap();
        let v: Value = serde_json::from_slice(&render(&r)).unwrap();
        let p = &v["predictions"];
        assert_eq!(p[0]["embeddings"]["values"].as_array().unwrap().len(), 256);
        assert_eq!(
            p[0]["embeddings"]["statistics"],
            json!({"truncated": false, "token_count": 5})
        );
        assert_eq!(
            p[1]["embeddings"]["statistics"],
            json!({"truncated": true, "token_count": 2048})
        );
        assert_eq!(v["metadata"]["billableCharacterCount"], 17 + 12_000);
        assert_eq!(r.input_tokens(), 5 + 2048);
    }

    #[test]
    fn refuses_beyond_the_documented_limits() {
        let one = json!({"content": "a"});
        for (model, body, needle) in [
            (
                "gemini-embedding-001",
                json!({"instances": [one, one]}),
                "up to 1 instances",
            ),
            (
                "text-embedding-005",
                json!({"instances": vec![one.clone(); 251]}),
                "up to 250",
            ),
            (
                "text-embedding-005",
                json!({"instances": vec![json!({"content": "x".repeat(8000)}); 11]}),
                "input token count is 22000 but the request supports up to 20000",
            ),
            (
                "text-embedding-005",
                json!({"instances": [{"content": "x".repeat(8200)}],
                       "parameters": {"autoTruncate": false}}),
                "supports up to 2048",
            ),
            (
                "text-embedding-005",
                json!({"instances": []}),
                "Empty instances.",
            ),
            (
                "text-embedding-005",
                json!({"instances": [one], "parameters": {"outputDimensionality": 769}}),
                "between 1 and 768",
            ),
        ] {
            let got = refusal(model, body);
            assert!(got.contains(needle), "{model}: {got}");
        }
    }
}
