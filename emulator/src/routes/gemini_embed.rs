//! Gemini embeddings, on the Gemini API and on Vertex AI: `:embedContent` (one content) and
//! `:batchEmbedContents` (a list of requests).
//!
//! Gemini API (ai.google.dev/api/embeddings): `{model, content: {parts: [{text}]}, taskType,
//! title, outputDimensionality}` → `{embedding: {values}}`; the batch `{requests: [that, …]}`
//! → `{embeddings: [{values}, …]}`, at most 100 requests ("* BatchEmbedContentsRequest.requests:
//! at most 100 requests can be in one batch", as the API answers), each naming the model of
//! the URL (`models/…`). Inputs beyond the model's 2048 tokens are cut, not refused.
//!
//! Vertex AI (cloud.google.com/vertex-ai/generative-ai/docs/reference/rest/v1/
//! projects.locations.publishers.models/embedContent): the same `content`, its options at the
//! top level (`taskType`, `title`, `outputDimensionality`, `autoTruncate`) or, as google-genai
//! sends them, under `embedContentConfig`; the answer adds `usageMetadata` and `truncated`.
//! With `autoTruncate: false`, an input beyond the limit is an `INVALID_ARGUMENT`.
//!
//! Dimensions (ai.google.dev/gemini-api/docs/embeddings, cloud.google.com/vertex-ai/
//! generative-ai/docs/model-reference/text-embeddings-api): `gemini-embedding-*` 3072,
//! `text-embedding-004`/`-005`, `text-multilingual-embedding-002` and `embedding-001` 768.
//! A shortened vector is the first values of the full one, not scaled again (only the full
//! 3072 are normalised, the Gemini docs say).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ApiError, EmbedForm, EmbedInput, EmbedReq, json_bytes};

/// Requests in one Gemini API batch.
const GEMINI_BATCH: usize = 100;
/// Contents in one Vertex batch (the text embeddings API's 250 texts per request).
const VERTEX_BATCH: usize = 250;
/// Tokens of one input the models read (both APIs document 2048).
pub(super) const INPUT_TOKENS: u64 = 2048;

/// The task types both APIs document (`TaskType`, `EmbeddingTaskType`).
const TASK_TYPES: [&str; 10] = [
    "TASK_TYPE_UNSPECIFIED",
    "UNSPECIFIED",
    "RETRIEVAL_QUERY",
    "RETRIEVAL_DOCUMENT",
    "SEMANTIC_SIMILARITY",
    "CLASSIFICATION",
    "CLUSTERING",
    "QUESTION_ANSWERING",
    "FACT_VERIFICATION",
    "CODE_RETRIEVAL_QUERY",
];

/// The dimension of a Google embedding model.
pub(super) fn model_dims(model: &str) -> usize {
    if model.starts_with("gemini-embedding") {
        3072
    } else {
        768
    }
}

#[derive(Deserialize, Default)]
struct Options {
    #[serde(rename = "taskType", alias = "task_type")]
    task_type: Option<String>,
    #[serde(rename = "outputDimensionality", alias = "output_dimensionality")]
    output_dimensionality: Option<Value>,
    #[serde(rename = "autoTruncate", alias = "auto_truncate")]
    auto_truncate: Option<bool>,
}

#[derive(Deserialize)]
struct One {
    model: Option<String>,
    content: Option<Content>,
    #[serde(flatten)]
    options: Options,
    #[serde(rename = "embedContentConfig", alias = "embed_content_config")]
    config: Option<Options>,
}

#[derive(Deserialize)]
struct Batch {
    requests: Option<Vec<One>>,
}

#[derive(Deserialize)]
struct Content {
    parts: Option<Vec<Part>>,
}

#[derive(Deserialize)]
struct Part {
    text: Option<String>,
}

/// Which API, and so which rules and answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Api {
    Gemini,
    Vertex,
}

fn invalid(message: String) -> ApiError {
    ApiError::bad(message)
}

/// Parses `:embedContent` (`batch` false) or `:batchEmbedContents` for `model`.
pub(super) fn parse(api: Api, model: &str, batch: bool, body: &[u8]) -> Result<EmbedReq, ApiError> {
    let what = if batch {
        "BatchEmbedContentsRequest"
    } else {
        "EmbedContentRequest"
    };
    let parse_error =
        |e: serde_json::Error| invalid(format!("Invalid JSON payload received. {e} (in {what})"));
    let requests: Vec<(String, One)> = if batch {
        let b: Batch = serde_json::from_slice(body).map_err(parse_error)?;
        let requests = b.requests.unwrap_or_default();
        if requests.is_empty() {
            return Err(invalid(format!(
                "* {what}.requests: requests is not specified\n"
            )));
        }
        let cap = if api == Api::Gemini {
            GEMINI_BATCH
        } else {
            VERTEX_BATCH
        };
        if requests.len() > cap {
            return Err(invalid(format!(
                "* {what}.requests: at most {cap} requests can be in one batch\n"
            )));
        }
        requests
            .into_iter()
            .enumerate()
            .map(|(i, r)| (format!("{what}.requests[{i}]"), r))
            .collect()
    } else {
        let one: One = serde_json::from_slice(body).map_err(parse_error)?;
        vec![(what.to_owned(), one)]
    };
    let native = model_dims(model);
    let mut dims = None;
    let mut inputs = Vec::with_capacity(requests.len());
    for (at, r) in requests {
        // Gemini API batch requests name their model, and it is the URL's.
        if api == Api::Gemini && batch {
            let want = format!("models/{model}");
            match r.model.as_deref() {
                Some(m) if m == want || m == model => {}
                Some(m) => {
                    return Err(invalid(format!(
                        "* {at}.model: the model of a request ({m}) must be the model of the \
                         URL ({want})\n"
                    )));
                }
                None => return Err(invalid(format!("* {at}.model: model is required\n"))),
            }
        }
        let options = r.config.unwrap_or_default();
        let task = options.task_type.or(r.options.task_type);
        if let Some(t) = task.filter(|t| !TASK_TYPES.contains(&t.as_str())) {
            return Err(invalid(format!(
                "Invalid value at '{}.task_type' ({}), \"{t}\"",
                at.to_lowercase(),
                if api == Api::Gemini {
                    "type.googleapis.com/google.ai.generativelanguage.v1beta.TaskType"
                } else {
                    "type.googleapis.com/google.cloud.aiplatform.v1.EmbeddingTaskType"
                }
            )));
        }
        let asked = options
            .output_dimensionality
            .or(r.options.output_dimensionality);
        let d = match asked {
            None | Some(Value::Null) => native,
            Some(v) => match v.as_u64() {
                Some(d) if (1..=native as u64).contains(&d) => d as usize,
                _ => {
                    return Err(invalid(format!(
                        "* {at}.output_dimensionality: must be between 1 and {native} for \
                         {model} (got {v})\n"
                    )));
                }
            },
        };
        // One dimension per answer: the first request's (google-genai sends one config).
        dims.get_or_insert(d);
        let text = content_text(r.content, &at)?;
        let input = EmbedInput::text(text);
        let auto_truncate = options.auto_truncate.or(r.options.auto_truncate);
        if api == Api::Vertex && auto_truncate == Some(false) && input.tokens > INPUT_TOKENS {
            return Err(invalid(format!(
                "Unable to submit request because the input token count is {} but model \
                 {model} supports up to {INPUT_TOKENS}. Reduce the input token count and try \
                 again, or set autoTruncate to true.",
                input.tokens
            )));
        }
        inputs.push(input.truncate_to(INPUT_TOKENS));
    }
    let form = match api {
        Api::Gemini => EmbedForm::Gemini { batch },
        Api::Vertex => EmbedForm::VertexEmbed { batch },
    };
    Ok(EmbedReq {
        model: model.to_owned(),
        inputs,
        native,
        dims: dims.unwrap_or(native),
        renormalize: false,
        form,
    })
}

/// The text of a content: its text parts, joined by a new line.
fn content_text(content: Option<Content>, at: &str) -> Result<String, ApiError> {
    let parts = content.and_then(|c| c.parts).unwrap_or_default();
    if parts.is_empty() {
        return Err(invalid(format!(
            "* {at}.content: content is not specified\n"
        )));
    }
    let mut texts = Vec::with_capacity(parts.len());
    for (j, p) in parts.into_iter().enumerate() {
        match p.text {
            Some(t) => texts.push(t),
            None => {
                return Err(invalid(format!(
                    "* {at}.content.parts[{j}]: the emulator embeds text parts only\n"
                )));
            }
        }
    }
    Ok(texts.join("\n"))
}

#[derive(Serialize)]
struct Values {
    values: Vec<f32>,
}

#[derive(Serialize)]
struct Single {
    embedding: Values,
    #[serde(rename = "usageMetadata", skip_serializing_if = "Option::is_none")]
    usage: Option<UsageMetadata>,
    #[serde(skip_serializing_if = "Option::is_none")]
    truncated: Option<bool>,
}

#[derive(Serialize)]
struct Many {
    embeddings: Vec<Values>,
    #[serde(rename = "usageMetadata", skip_serializing_if = "Option::is_none")]
    usage: Option<UsageMetadata>,
}

#[derive(Serialize)]
struct UsageMetadata {
    #[serde(rename = "promptTokenCount")]
    prompt: u64,
    #[serde(rename = "totalTokenCount")]
    total: u64,
}

/// The answer to `req` (a Gemini API or Vertex `embedContent`/`batchEmbedContents` form).
pub(super) fn render(req: &EmbedReq) -> bytes::Bytes {
    let (vertex, batch) = match req.form {
        EmbedForm::VertexEmbed { batch } => (true, batch),
        EmbedForm::Gemini { batch } => (false, batch),
        _ => (false, true),
    };
    let tokens = req.input_tokens();
    let usage = vertex.then_some(UsageMetadata {
        prompt: tokens,
        total: tokens,
    });
    let mut values = req.vectors().into_iter().map(|values| Values { values });
    if batch {
        json_bytes(&Many {
            embeddings: values.collect(),
            usage,
        })
    } else {
        json_bytes(&Single {
            embedding: values.next().unwrap_or(Values { values: Vec::new() }),
            usage,
            truncated: vertex.then(|| req.inputs.iter().any(|i| i.truncated)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn message(r: Result<EmbedReq, ApiError>) -> String {
        match r {
            Err(ApiError::BadRequest { message, .. }) => message,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_gemini_batch_names_its_model_and_holds_at_most_100() {
        let one = json!({"model": "models/gemini-embedding-001",
                         "content": {"parts": [{"text": "hi"}]}, "outputDimensionality": 8});
        let ok = json!({"requests": [one, one]}).to_string();
        let r = parse(Api::Gemini, "gemini-embedding-001", true, ok.as_bytes()).unwrap();
        assert_eq!((r.inputs.len(), r.native, r.dims), (2, 3072, 8));
        let v: Value = serde_json::from_slice(&render(&r)).unwrap();
        assert_eq!(v["embeddings"][1]["values"].as_array().unwrap().len(), 8);
        assert!(v.get("usageMetadata").is_none());
        let many = json!({"requests": vec![one.clone(); 101]}).to_string();
        let got = message(parse(
            Api::Gemini,
            "gemini-embedding-001",
            true,
            many.as_bytes(),
        ));
        assert_eq!(
            got,
            "* BatchEmbedContentsRequest.requests: at most 100 requests can be in one batch\n"
        );
        let other = json!({"requests": [{"model": "models/x", "content": one["content"]}]});
        let got = message(parse(
            Api::Gemini,
            "gemini-embedding-001",
            true,
            other.to_string().as_bytes(),
        ));
        assert!(got.contains("requests[0].model"), "{got}");
    }

    #[test]
    fn vertex_reads_its_config_and_cuts_or_refuses_long_inputs() {
        let long = "x".repeat(4 * 3000);
        let body = json!({"content": {"parts": [{"text": long}]},
                          "embedContentConfig": {"taskType": "RETRIEVAL_QUERY"}});
        let r = parse(
            Api::Vertex,
            "gemini-embedding-001",
            false,
            body.to_string().as_bytes(),
        )
        .unwrap();
        assert_eq!((r.input_tokens(), r.inputs[0].truncated), (2048, true));
        let v: Value = serde_json::from_slice(&render(&r)).unwrap();
        assert_eq!(v["embedding"]["values"].as_array().unwrap().len(), 3072);
        assert_eq!(v["usageMetadata"]["promptTokenCount"], 2048);
        assert_eq!(v["truncated"], true);
        let strict = json!({"content": {"parts": [{"text": long}]}, "autoTruncate": false});
        let got = message(parse(
            Api::Vertex,
            "gemini-embedding-001",
            false,
            strict.to_string().as_bytes(),
        ));
        assert!(got.contains("supports up to 2048"), "{got}");
        let bad_task = json!({"content": {"parts": [{"text": "a"}]}, "taskType": "NOPE"});
        let got = message(parse(
            Api::Vertex,
            "text-embedding-005",
            false,
            bad_task.to_string().as_bytes(),
        ));
        assert!(got.contains("\"NOPE\""), "{got}");
    }
}
