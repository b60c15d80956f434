//! OpenAI `POST /v1/embeddings` (and Azure's `…/deployments/{deployment}/embeddings`): the
//! request `{input, model, encoding_format, dimensions, user}`, checked against the limits
//! OpenAI documents, and the answer `{object: "list", data: [{object: "embedding", index,
//! embedding}], model, usage: {prompt_tokens, total_tokens}}`
//! (platform.openai.com/docs/api-reference/embeddings/create, …/docs/guides/embeddings).
//!
//! `input` is a string, an array of strings, an array of token ids or an array of such
//! arrays; at most 2048 inputs, each at most 8192 tokens and none empty, and at most 300,000
//! tokens in all. `encoding_format` is `float` (the default) or `base64` — the little-endian
//! f32s of each vector, which the official SDKs ask for unless told otherwise and decode
//! themselves. `dimensions` shortens a `text-embedding-3-*` vector (scaled to unit length
//! again); `text-embedding-ada-002` refuses it.
//!
//! Refusals are OpenAI's 400s: `'$.input' is invalid…` for an empty or mistyped input,
//! `array_above_max_length`, `Invalid 'input': maximum context length is 8192 tokens.`, and
//! the `max_tokens_per_request` type of `Requested N tokens, max 300000 tokens per request`
//! (as OpenAI answers it; github.com/langchain-ai/langchain/issues/31227 quotes one).

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::embed::base64_f32;
use super::{ApiError, EmbedForm, EmbedInput, EmbedReq, json_bytes};

/// Inputs in one request.
const MAX_INPUTS: usize = 2048;
/// Tokens in one input.
const MAX_INPUT_TOKENS: u64 = 8192;
/// Tokens in one request, every input together.
const MAX_REQUEST_TOKENS: u64 = 300_000;
/// The dimension of a model the emulator does not know (`text-embedding-3-small`'s).
const DEFAULT_DIMS: usize = 1536;

#[derive(Deserialize)]
struct Body {
    input: Option<Value>,
    model: Option<String>,
    encoding_format: Option<Value>,
    dimensions: Option<Value>,
}

/// (dimension, whether `dimensions` may shorten it) of a model (docs/guides/embeddings,
/// "Embedding models").
fn model_dims(model: &str) -> (usize, bool) {
    if model.starts_with("text-embedding-3-large") {
        (3072, true)
    } else if model.starts_with("text-embedding-ada-002") {
        (1536, false)
    } else {
        (DEFAULT_DIMS, true)
    }
}

fn invalid_input() -> ApiError {
    ApiError::bad(
        "'$.input' is invalid. Please check the API reference: \
         https://platform.openai.com/docs/api-reference.",
    )
}

/// Parses an embeddings request; `deployment` is Azure's (it names the model).
pub(super) fn parse(body: &[u8], deployment: Option<&str>) -> Result<EmbedReq, ApiError> {
    let b: Body = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad(format!(
            "We could not parse the JSON body of your request. (HINT: This likely means you \
             aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, \
             but what was sent was not valid JSON. If you have trouble figuring out how to fix \
             this, please contact us through our help center at help.openai.com.) ({e})"
        ))
    })?;
    let model = match (deployment, b.model) {
        (Some(d), _) => d.to_owned(),
        (None, Some(m)) if !m.is_empty() => m,
        (None, _) => {
            return Err(ApiError::bad_param(
                "you must provide a model parameter",
                "model",
                None,
            ));
        }
    };
    let base64 = match &b.encoding_format {
        None | Some(Value::Null) => false,
        Some(Value::String(f)) if f == "float" => false,
        Some(Value::String(f)) if f == "base64" => true,
        Some(other) => {
            return Err(ApiError::bad_param(
                format!("Invalid value: {other}. Supported values are: 'float' and 'base64'."),
                "encoding_format",
                Some("invalid_value"),
            ));
        }
    };
    let (native, shortens) = model_dims(&model);
    let dims = match &b.dimensions {
        None | Some(Value::Null) => native,
        Some(_) if !shortens => {
            return Err(ApiError::bad_param(
                "This model does not support specifying dimensions.",
                "dimensions",
                None,
            ));
        }
        Some(v) => match v.as_u64() {
            Some(d) if (1..=native as u64).contains(&d) => d as usize,
            _ => {
                return Err(ApiError::bad_param(
                    format!(
                        "Invalid value for 'dimensions' = {v}. Must be an integer between 1 \
                         and {native}."
                    ),
                    "dimensions",
                    Some("invalid_value"),
                ));
            }
        },
    };
    let inputs = read_inputs(b.input)?;
    Ok(EmbedReq {
        model,
        inputs,
        native,
        dims,
        renormalize: true,
        form: EmbedForm::OpenAi { base64 },
    })
}

/// `input` as inputs, within OpenAI's limits.
fn read_inputs(input: Option<Value>) -> Result<Vec<EmbedInput>, ApiError> {
    let inputs = match input {
        None | Some(Value::Null) => {
            return Err(ApiError::bad_param(
                "Missing required parameter: 'input'.",
                "input",
                Some("missing_required_parameter"),
            ));
        }
        Some(Value::String(s)) => vec![text_input(s)?],
        Some(Value::Array(items)) => {
            if items.is_empty() {
                return Err(invalid_input());
            }
            if items.len() > MAX_INPUTS {
                return Err(ApiError::bad_param(
                    format!(
                        "Invalid 'input': array too long. Expected an array with maximum length \
                         {MAX_INPUTS}, but got an array with length {} instead.",
                        items.len()
                    ),
                    "input",
                    Some("array_above_max_length"),
                ));
            }
            if items.iter().all(Value::is_number) {
                vec![EmbedInput::token_ids(token_ids(&items)?)]
            } else {
                items
                    .into_iter()
                    .map(|item| match item {
                        Value::String(s) => text_input(s),
                        Value::Array(ids) if !ids.is_empty() => {
                            Ok(EmbedInput::token_ids(token_ids(&ids)?))
                        }
                        _ => Err(invalid_input()),
                    })
                    .collect::<Result<_, _>>()?
            }
        }
        Some(_) => return Err(invalid_input()),
    };
    if inputs.iter().any(|i| i.tokens > MAX_INPUT_TOKENS) {
        return Err(ApiError::bad(format!(
            "Invalid 'input': maximum context length is {MAX_INPUT_TOKENS} tokens."
        )));
    }
    let total: u64 = inputs.iter().map(|i| i.tokens).sum();
    if total > MAX_REQUEST_TOKENS {
        return Err(ApiError::Raw {
            status: 400,
            body: json!({"error": {
                "message": format!(
                    "Requested {total} tokens, max {MAX_REQUEST_TOKENS} tokens per request"
                ),
                "type": "max_tokens_per_request",
                "param": null,
                "code": "max_tokens_per_request",
            }}),
        });
    }
    Ok(inputs)
}

fn text_input(s: String) -> Result<EmbedInput, ApiError> {
    if s.is_empty() {
        return Err(invalid_input());
    }
    Ok(EmbedInput::text(s))
}

fn token_ids(items: &[Value]) -> Result<Vec<u32>, ApiError> {
    items
        .iter()
        .map(|v| {
            v.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(invalid_input)
        })
        .collect()
}

#[derive(Serialize)]
struct Answer<'a> {
    object: &'static str,
    data: Vec<Item>,
    model: &'a str,
    usage: Tokens,
}

#[derive(Serialize)]
struct Item {
    object: &'static str,
    index: usize,
    embedding: Embedding,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Embedding {
    Floats(Vec<f32>),
    Base64(String),
}

#[derive(Serialize)]
struct Tokens {
    prompt_tokens: u64,
    total_tokens: u64,
}

/// The answer to `req`.
pub(super) fn render(req: &EmbedReq) -> bytes::Bytes {
    let base64 = matches!(req.form, EmbedForm::OpenAi { base64: true });
    let data = req
        .vectors()
        .into_iter()
        .enumerate()
        .map(|(index, v)| Item {
            object: "embedding",
            index,
            embedding: if base64 {
                Embedding::Base64(base64_f32(&v))
            } else {
                Embedding::Floats(v)
            },
        })
        .collect();
    let tokens = req.input_tokens();
    json_bytes(&Answer {
        object: "list",
        data,
        model: &req.model,
        usage: Tokens {
            prompt_tokens: tokens,
            total_tokens: tokens,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(body: Value) -> String {
        match parse(body.to_string().as_bytes(), None) {
            Err(ApiError::BadRequest { message, .. }) => message,
            Err(ApiError::Raw { body, .. }) => body["error"]["message"].to_string(),
            Err(other) => panic!("{other:?}"),
            Ok(r) => panic!("accepted: {r:?}"),
        }
    }

    #[test]
    fn reads_every_input_form() {
        let model = "text-embedding-3-small";
        for (input, n, tokens) in [
            (json!("hello world!"), 1, 3),
            (json!(["a", "bb"]), 2, 2),
            (json!([1, 2, 3]), 1, 3),
            (json!([[1, 2], [3]]), 2, 3),
        ] {
            let r = parse(
                json!({"model": model, "input": input})
                    .to_string()
                    .as_bytes(),
                None,
            )
            .unwrap();
            assert_eq!((r.inputs.len(), r.input_tokens()), (n, tokens), "{input}");
            assert_eq!((r.native, r.dims), (1536, 1536));
        }
    }

    #[test]
    fn refuses_what_openai_refuses() {
        let m = "text-embedding-3-small";
        for (body, needle) in [
            (json!({"model": m, "input": ""}), "'$.input' is invalid"),
            (json!({"model": m, "input": []}), "'$.input' is invalid"),
            (
                json!({"model": m, "input": ["a", 1]}),
                "'$.input' is invalid",
            ),
            (json!({"model": m, "input": [-1]}), "'$.input' is invalid"),
            (json!({"model": m}), "'input'"),
            (json!({"input": "x"}), "model parameter"),
            (
                json!({"model": m, "input": vec!["a"; 2049]}),
                "maximum length 2048, but got an array with length 2049",
            ),
            (
                json!({"model": m, "input": "x".repeat(4 * 8192 + 1)}),
                "maximum context length is 8192 tokens",
            ),
            (
                json!({"model": m, "input": vec!["x".repeat(4 * 8000); 38]}),
                "Requested 304000 tokens, max 300000 tokens per request",
            ),
            (
                json!({"model": "text-embedding-ada-002", "input": "x", "dimensions": 8}),
                "does not support specifying dimensions",
            ),
            (
                json!({"model": m, "input": "x", "dimensions": 1537}),
                "between 1 and 1536",
            ),
            (
                json!({"model": m, "input": "x", "encoding_format": "hex"}),
                "'float' and 'base64'",
            ),
        ] {
            let got = refusal(body.clone());
            assert!(got.contains(needle), "{body:.80}: {got}");
        }
    }

    #[test]
    fn renders_floats_or_base64_of_the_dimension_asked() {
        let body = json!({"model": "text-embedding-3-large", "input": ["a b", "c"],
                          "dimensions": 4, "encoding_format": "base64"});
        let r = parse(body.to_string().as_bytes(), None).unwrap();
        let v: Value = serde_json::from_slice(&render(&r)).unwrap();
        assert_eq!(v["object"], "list");
        assert_eq!(v["data"][1]["index"], 1);
        assert_eq!(v["data"][0]["embedding"].as_str().unwrap().len(), 24); // 16 bytes
        assert_eq!(v["usage"], json!({"prompt_tokens": 2, "total_tokens": 2}));
        let floats = parse(br#"{"model": "m", "input": "a"}"#, None).unwrap();
        let v: Value = serde_json::from_slice(&render(&floats)).unwrap();
        assert_eq!(v["data"][0]["embedding"].as_array().unwrap().len(), 1536);
    }
}
