//! Bedrock `InvokeModel` (`POST /model/{modelId}/invoke`) for the embedding models: the body
//! is the model's own (docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_InvokeModel.html).
//!
//! - Amazon Titan Text Embeddings (docs.aws.amazon.com/bedrock/latest/userguide/
//!   model-parameters-titan-embed-text.html): V2 (`amazon.titan-embed-text-v2:0`) takes
//!   `{inputText, dimensions: 1024 | 512 | 256, normalize (true), embeddingTypes: ["float",
//!   "binary"]}` and answers `{embedding, inputTextTokenCount, embeddingsByType}`; G1
//!   (`amazon.titan-embed-text-v1`) takes `{inputText}` only and answers 1536 values. At most
//!   50,000 characters and 8192 tokens.
//! - Cohere Embed (…/model-parameters-embed.html): `{texts (at most 96, each at most 2048
//!   characters), input_type: search_document | search_query | classification | clustering,
//!   truncate, embedding_types: float | int8 | uint8 | binary | ubinary}` → `{embeddings,
//!   id, response_type: "embeddings_floats", texts}`, or with `embedding_types` the vectors by
//!   type under `embeddings` and `response_type: "embeddings_by_type"`. v3 models answer 1024
//!   values, `cohere.embed-v4:0` 1536 (or its `output_dimension`: 256, 512, 1024).
//!
//! Refusals are `ValidationException`s worded as Bedrock's JSON-schema check words them
//! ("Malformed input request: #/texts: expected maximum item count: 96, found: 97, please
//! reformat your input and try again."). Other models' `InvokeModel` bodies are not served:
//! chat goes through `Converse`.

use serde::Serialize;
use serde_json::{Map, Value};

use super::embed::{CohereType, int8, packed_bits, uint8};
use super::{ApiError, EmbedForm, EmbedInput, EmbedReq, EmbedText, json_bytes};
use crate::text::new_uuid;

/// Titan's input caps.
const TITAN_CHARS: u64 = 50_000;
const TITAN_TOKENS: u64 = 8192;
/// Cohere's caps.
const COHERE_TEXTS: usize = 96;
const COHERE_CHARS: u64 = 2048;

const COHERE_INPUT_TYPES: [&str; 5] = [
    "search_document",
    "search_query",
    "classification",
    "clustering",
    "image",
];

fn malformed(detail: impl std::fmt::Display) -> ApiError {
    ApiError::bad(format!(
        "Malformed input request: {detail}, please reformat your input and try again."
    ))
}

/// Parses an `InvokeModel` body for the embedding model `model`.
pub(super) fn parse(model: &str, body: &[u8]) -> Result<EmbedReq, ApiError> {
    let v: Value = serde_json::from_slice(body).map_err(malformed)?;
    let Value::Object(o) = v else {
        return Err(malformed(
            "#: expected type: JSONObject, found: something else",
        ));
    };
    if model.contains("titan-embed-text-v2") {
        titan(model, o, true)
    } else if model.contains("titan-embed-text-v1") || model.contains("titan-embed-g1-text") {
        titan(model, o, false)
    } else if model.contains("cohere.embed-") {
        cohere(model, o)
    } else {
        Err(ApiError::bad(format!(
            "The emulator serves InvokeModel for the embedding models only (Titan Text \
             Embeddings amazon.titan-embed-text-v2:0 and amazon.titan-embed-text-v1, Cohere \
             Embed cohere.embed-english-v3, cohere.embed-multilingual-v3 and \
             cohere.embed-v4:0), not {model}; chat goes through Converse."
        )))
    }
}

/// Refuses keys outside `known`, as Bedrock's schema check does.
fn only(o: &Map<String, Value>, known: &[&str]) -> Result<(), ApiError> {
    match o.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(malformed(format!(
            "#: extraneous key [{k}] is not permitted"
        ))),
        None => Ok(()),
    }
}

fn titan(model: &str, o: Map<String, Value>, v2: bool) -> Result<EmbedReq, ApiError> {
    let known: &[&str] = if v2 {
        &["inputText", "dimensions", "normalize", "embeddingTypes"]
    } else {
        &["inputText"]
    };
    only(&o, known)?;
    let text = match o.get("inputText") {
        Some(Value::String(t)) => t.clone(),
        Some(_) => return Err(malformed("#/inputText: expected type: String")),
        None => return Err(malformed("#: required key [inputText] not found")),
    };
    let chars = text.chars().count() as u64;
    if chars == 0 {
        return Err(malformed("#/inputText: expected minLength: 1, actual: 0"));
    }
    if chars > TITAN_CHARS {
        return Err(malformed(format!(
            "#/inputText: expected maxLength: {TITAN_CHARS}, actual: {chars}"
        )));
    }
    let input = EmbedInput::text(text);
    if input.tokens > TITAN_TOKENS {
        return Err(ApiError::bad(format!(
            "Too many input tokens. Max input tokens: {TITAN_TOKENS}, request input token \
             count: {}",
            input.tokens
        )));
    }
    let native = if v2 { 1024 } else { 1536 };
    let dims = match o.get("dimensions") {
        None => native,
        Some(d) => match d.as_u64() {
            Some(n @ (256 | 512 | 1024)) => n as usize,
            _ => {
                return Err(malformed(format!(
                    "#/dimensions: {d} is not a valid enum value"
                )));
            }
        },
    };
    let normalize = match o.get("normalize") {
        None => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(malformed("#/normalize: expected type: Boolean")),
    };
    let (mut float, mut binary) = (o.get("embeddingTypes").is_none(), false);
    if let Some(types) = o.get("embeddingTypes") {
        let Some(types) = types.as_array().filter(|t| !t.is_empty()) else {
            return Err(malformed(
                "#/embeddingTypes: expected minimum item count: 1",
            ));
        };
        for (i, t) in types.iter().enumerate() {
            match t.as_str() {
                Some("float") => float = true,
                Some("binary") => binary = true,
                _ => {
                    return Err(malformed(format!(
                        "#/embeddingTypes/{i}: {t} is not a valid enum value"
                    )));
                }
            }
        }
    }
    Ok(EmbedReq {
        model: model.to_owned(),
        inputs: vec![input],
        native,
        dims,
        renormalize: normalize,
        form: EmbedForm::Titan {
            v2,
            float,
            binary,
            normalize,
        },
    })
}

fn cohere(model: &str, o: Map<String, Value>) -> Result<EmbedReq, ApiError> {
    let v4 = model.contains("embed-v4");
    let mut known = vec![
        "texts",
        "images",
        "input_type",
        "truncate",
        "embedding_types",
    ];
    if v4 {
        known.extend(["output_dimension", "max_tokens", "inputs"]);
    }
    only(&o, &known)?;
    if o.contains_key("images") || o.contains_key("inputs") {
        return Err(ApiError::bad(
            "The emulator embeds texts only: send `texts` without `images` or `inputs`.",
        ));
    }
    let texts = match o.get("texts") {
        Some(Value::Array(t)) => t,
        Some(_) => return Err(malformed("#/texts: expected type: JSONArray")),
        None => return Err(malformed("#: required key [texts] not found")),
    };
    if texts.len() > COHERE_TEXTS {
        return Err(malformed(format!(
            "#/texts: expected maximum item count: {COHERE_TEXTS}, found: {}",
            texts.len()
        )));
    }
    let mut inputs = Vec::with_capacity(texts.len());
    for (i, t) in texts.iter().enumerate() {
        let Some(t) = t.as_str() else {
            return Err(malformed(format!("#/texts/{i}: expected type: String")));
        };
        let chars = t.chars().count() as u64;
        if chars > COHERE_CHARS {
            return Err(malformed(format!(
                "#/texts/{i}: expected maxLength: {COHERE_CHARS}, actual: {chars}"
            )));
        }
        inputs.push(EmbedInput::text(t));
    }
    match o.get("input_type") {
        None if !v4 => return Err(malformed("#: required key [input_type] not found")),
        None => {}
        Some(t) if t.as_str().is_some_and(|t| COHERE_INPUT_TYPES.contains(&t)) => {}
        Some(t) => {
            return Err(malformed(format!(
                "#/input_type: {t} is not a valid enum value"
            )));
        }
    }
    if let Some(t) = o.get("truncate")
        && !t
            .as_str()
            .is_some_and(|t| ["NONE", "START", "END"].contains(&t))
    {
        return Err(malformed(format!(
            "#/truncate: {t} is not a valid enum value"
        )));
    }
    let mut types = Vec::new();
    if let Some(list) = o.get("embedding_types") {
        let Some(list) = list.as_array() else {
            return Err(malformed("#/embedding_types: expected type: JSONArray"));
        };
        for (i, t) in list.iter().enumerate() {
            match t.as_str().and_then(CohereType::parse) {
                Some(t) => types.push(t),
                None => {
                    return Err(malformed(format!(
                        "#/embedding_types/{i}: {t} is not a valid enum value"
                    )));
                }
            }
        }
    }
    let native = if v4 { 1536 } else { 1024 };
    let dims = match o.get("output_dimension") {
        None => native,
        Some(d) => match d.as_u64() {
            Some(n @ (256 | 512 | 1024 | 1536)) => n as usize,
            _ => {
                return Err(malformed(format!(
                    "#/output_dimension: {d} is not a valid enum value"
                )));
            }
        },
    };
    Ok(EmbedReq {
        model: model.to_owned(),
        inputs,
        native,
        dims,
        renormalize: true,
        form: EmbedForm::Cohere { types },
    })
}

#[derive(Serialize)]
struct Titan<'a> {
    embedding: &'a [f32],
    #[serde(rename = "inputTextTokenCount")]
    tokens: u64,
    #[serde(rename = "embeddingsByType", skip_serializing_if = "Option::is_none")]
    by_type: Option<TitanTypes<'a>>,
}

#[derive(Serialize)]
struct TitanTypes<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    float: Option<&'a [f32]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    binary: Option<Vec<u8>>,
}

#[derive(Serialize)]
struct Cohere<'a> {
    embeddings: CohereEmbeddings<'a>,
    id: String,
    response_type: &'static str,
    texts: Vec<&'a str>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum CohereEmbeddings<'a> {
    Floats(&'a [Vec<f32>]),
    ByType(CohereTypes<'a>),
}

#[derive(Serialize, Default)]
struct CohereTypes<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    float: Option<&'a [Vec<f32>]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    int8: Option<Vec<Vec<i64>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    uint8: Option<Vec<Vec<i64>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    binary: Option<Vec<Vec<i64>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ubinary: Option<Vec<Vec<i64>>>,
}

/// The answer to `req` (a Titan or Cohere form).
pub(super) fn render(req: &EmbedReq) -> bytes::Bytes {
    let vectors = req.vectors();
    match &req.form {
        EmbedForm::Titan {
            v2,
            float,
            binary,
            normalize,
        } => {
            let mut v = vectors.into_iter().next().unwrap_or_default();
            if !normalize {
                // Not scaled to unit length: some length of its own, the same every time.
                let length = (req.input_tokens().max(1) as f32).sqrt();
                v.iter_mut().for_each(|x| *x *= length);
            }
            let by_type = v2.then(|| TitanTypes {
                float: float.then_some(v.as_slice()),
                binary: binary.then(|| v.iter().map(|x| u8::from(*x > 0.0)).collect()),
            });
            json_bytes(&Titan {
                embedding: &v,
                tokens: req.input_tokens(),
                by_type,
            })
        }
        EmbedForm::Cohere { types } => {
            let texts = req
                .inputs
                .iter()
                .map(|i| match &i.text {
                    EmbedText::Text(t) => t.as_str(),
                    EmbedText::Tokens(_) => "",
                })
                .collect();
            let each = |f: fn(&[f32]) -> Vec<i64>| Some(vectors.iter().map(|v| f(v)).collect());
            let (embeddings, response_type) = if types.is_empty() {
                (CohereEmbeddings::Floats(&vectors), "embeddings_floats")
            } else {
                let mut by = CohereTypes::default();
                for t in types {
                    match t {
                        CohereType::Float => by.float = Some(&vectors),
                        CohereType::Int8 => by.int8 = each(int8),
                        CohereType::Uint8 => by.uint8 = each(uint8),
                        CohereType::Binary => by.binary = each(|v| packed_bits(v, true)),
                        CohereType::Ubinary => by.ubinary = each(|v| packed_bits(v, false)),
                    }
                }
                (CohereEmbeddings::ByType(by), "embeddings_by_type")
            };
            json_bytes(&Cohere {
                embeddings,
                id: new_uuid(),
                response_type,
                texts,
            })
        }
        _ => json_bytes(&Value::Null),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn message(model: &str, body: Value) -> String {
        match parse(model, body.to_string().as_bytes()) {
            Err(ApiError::BadRequest { message, .. }) => message,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn titan_v2_answers_the_dimensions_and_types_asked() {
        let body = json!({"inputText": "hello there", "dimensions": 256,
                          "embeddingTypes": ["float", "binary"]});
        let r = parse("amazon.titan-embed-text-v2:0", body.to_string().as_bytes()).unwrap();
        let v: Value = serde_json::from_slice(&render(&r)).unwrap();
        assert_eq!(v["embedding"].as_array().unwrap().len(), 256);
        assert_eq!(v["inputTextTokenCount"], 3);
        assert_eq!(
            v["embeddingsByType"]["binary"].as_array().unwrap().len(),
            256
        );
        assert_eq!(v["embeddingsByType"]["float"], v["embedding"]);
        let g1 = parse("amazon.titan-embed-text-v1", br#"{"inputText": "x"}"#).unwrap();
        let v: Value = serde_json::from_slice(&render(&g1)).unwrap();
        assert_eq!(v["embedding"].as_array().unwrap().len(), 1536);
        assert!(v.get("embeddingsByType").is_none());
    }

    #[test]
    fn cohere_answers_floats_or_each_type() {
        let body = json!({"texts": ["a", "b"], "input_type": "search_document"});
        let r = parse("cohere.embed-english-v3", body.to_string().as_bytes()).unwrap();
        let v: Value = serde_json::from_slice(&render(&r)).unwrap();
        assert_eq!(v["response_type"], "embeddings_floats");
        assert_eq!(v["embeddings"][1].as_array().unwrap().len(), 1024);
        assert_eq!(v["texts"], json!(["a", "b"]));
        let typed = json!({"texts": ["a"], "input_type": "search_query",
                           "embedding_types": ["int8", "ubinary"]});
        let r = parse("cohere.embed-multilingual-v3", typed.to_string().as_bytes()).unwrap();
        let v: Value = serde_json::from_slice(&render(&r)).unwrap();
        assert_eq!(v["response_type"], "embeddings_by_type");
        assert_eq!(v["embeddings"]["int8"][0].as_array().unwrap().len(), 1024);
        assert_eq!(v["embeddings"]["ubinary"][0].as_array().unwrap().len(), 128);
    }

    #[test]
    fn refuses_as_the_schema_check_does() {
        let titan = "amazon.titan-embed-text-v2:0";
        let cohere = "cohere.embed-english-v3";
        for (model, body, needle) in [
            (titan, json!({}), "required key [inputText] not found"),
            (
                titan,
                json!({"inputText": "x", "dims": 1}),
                "extraneous key [dims]",
            ),
            (
                titan,
                json!({"inputText": "x", "dimensions": 100}),
                "#/dimensions: 100",
            ),
            (
                titan,
                json!({"inputText": "x".repeat(50_001)}),
                "maxLength: 50000",
            ),
            (
                titan,
                json!({"inputText": "x ".repeat(20_000)}),
                "Max input tokens: 8192",
            ),
            (cohere, json!({"texts": ["a"]}), "required key [input_type]"),
            (
                cohere,
                json!({"texts": vec!["a"; 97], "input_type": "clustering"}),
                "expected maximum item count: 96, found: 97",
            ),
            (
                cohere,
                json!({"texts": ["x".repeat(2049)], "input_type": "clustering"}),
                "#/texts/0: expected maxLength: 2048, actual: 2049",
            ),
            (
                cohere,
                json!({"texts": ["a"], "input_type": "clustering", "embedding_types": ["f"]}),
                "#/embedding_types/0",
            ),
            (
                "anthropic.claude-3-haiku",
                json!({}),
                "embedding models only",
            ),
        ] {
            let got = message(model, body.clone());
            assert!(got.contains(needle), "{model} {body:.60}: {got}");
        }
    }
}
