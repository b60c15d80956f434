//! Embeddings in the OpenAI format (`POST {base_url}/embeddings`; Azure's deployment path):
//! `{model, input, dimensions}` → `{data: [{index, embedding}], model, usage}`
//! (platform.openai.com/docs/api-reference/embeddings/create).
//!
//! One input is sent as a string, several as an array (at most [`MAX_INPUTS`], the API's
//! limit: a larger request is refused before sending, so the router can fail over to a
//! provider that takes it). `encoding_format` is left to its default, `float`; an answer in
//! `base64` (asked for through the request's extra body) is read too. The vectors are put in
//! the order of each item's `index`.

use serde::Deserialize;
use serde_json::{Value, json};
use url::Url;

use crate::error::{Error, ErrorKind, Result};
use crate::http::{HttpRequest, RawResponse};
use crate::id::ProviderId;
use crate::provider::RequestContext;
use crate::types::{EmbeddingRequest, EmbeddingResponse, Usage};

/// Inputs one request may carry (the API reference's `input`: "cannot be an empty string,
/// and any array must be 2048 dimensions or less").
pub(crate) const MAX_INPUTS: usize = 2048;

/// Refuses more inputs than one OpenAI request takes.
pub(crate) fn check(id: &ProviderId, req: &EmbeddingRequest) -> Result<()> {
    if req.inputs.len() > MAX_INPUTS {
        return Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "provider `{id}` takes at most {MAX_INPUTS} embedding inputs per request, not {}; \
                 split the inputs into several requests",
                req.inputs.len()
            ),
        )
        .with_provider(id.clone()));
    }
    Ok(())
}

/// The request at `url` (`…/embeddings`). `model` is sent in the body (Azure takes it too and
/// goes by the deployment in the path).
pub(crate) fn build_request(
    url: Url,
    req: &EmbeddingRequest,
    ctx: &RequestContext<'_>,
) -> Result<HttpRequest> {
    let input = match req.inputs.as_slice() {
        [one] => json!(one),
        many => json!(many),
    };
    let mut body = json!({ "model": ctx.model, "input": input });
    if let Some(d) = req.dimensions {
        body["dimensions"] = json!(d);
    }
    HttpRequest::post_json(url, &body)
}

#[derive(Deserialize)]
struct Wire {
    data: Vec<Item>,
    model: Option<String>,
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct Item {
    index: Option<usize>,
    embedding: Value,
}

#[derive(Deserialize)]
struct WireUsage {
    prompt_tokens: Option<u64>,
    total_tokens: Option<u64>,
}

/// Parses an answer: vectors by `index`, the usage's `prompt_tokens` as input tokens.
pub(crate) fn parse_response(
    id: &ProviderId,
    raw: &RawResponse,
    model: &str,
    request_id: Option<String>,
) -> Result<EmbeddingResponse> {
    let decode = |what: String| Error::decode(what).with_provider(id.clone());
    let wire: Wire = serde_json::from_slice(&raw.body)
        .map_err(|e| decode(format!("embedding answer is not the OpenAI format: {e}")))?;
    let n = wire.data.len();
    let mut vectors: Vec<Option<Vec<f32>>> = vec![None; n];
    for (pos, item) in wire.data.into_iter().enumerate() {
        let i = item.index.unwrap_or(pos);
        let slot = vectors
            .get_mut(i)
            .ok_or_else(|| decode(format!("embedding index {i} out of range (0..{n})")))?;
        if slot.is_some() {
            return Err(decode(format!("embedding index {i} answered twice")));
        }
        *slot = Some(vector(&item.embedding).map_err(|why| decode(format!("[{i}]: {why}")))?);
    }
    let vectors = vectors.into_iter().flatten().collect();
    let mut answer = EmbeddingResponse::new(
        id.clone(),
        wire.model
            .filter(|m| !m.is_empty())
            .as_deref()
            .unwrap_or(model),
        vectors,
    );
    answer.usage = wire
        .usage
        .and_then(|u| u.prompt_tokens.or(u.total_tokens).map(|t| Usage::new(t, 0)));
    answer.request_id = request_id;
    Ok(answer)
}

/// One vector: an array of numbers, or base64 of little-endian `f32`s.
fn vector(v: &Value) -> std::result::Result<Vec<f32>, String> {
    match v {
        Value::Array(items) => items
            .iter()
            .map(|x| {
                x.as_f64()
                    .map(|f| f as f32)
                    .ok_or_else(|| "a vector value is not a number".to_owned())
            })
            .collect(),
        Value::String(s) => {
            let bytes = base64_decode(s).ok_or("the base64 vector is not valid base64")?;
            if bytes.len() % 4 != 0 {
                return Err("the base64 vector is not whole 32-bit floats".to_owned());
            }
            Ok(bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect())
        }
        _ => Err("the vector is neither an array nor a base64 string".to_owned()),
    }
}

/// Standard base64 (padding optional).
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let s = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    for chunk in s.chunks(4) {
        if chunk.len() == 1 {
            return None;
        }
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= value(c)? << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderMap;

    use super::*;

    fn parse(body: &str) -> Result<EmbeddingResponse> {
        let raw = RawResponse::new(200, HeaderMap::new(), body.to_owned());
        parse_response(&ProviderId::new("p"), &raw, "m", None)
    }

    #[test]
    fn reads_vectors_by_index_and_base64() {
        // [1.0, -2.0] as little-endian f32s.
        let b64 = "AACAPwAAAMA=";
        let body = format!(
            r#"{{"data":[{{"index":1,"embedding":"{b64}"}},{{"index":0,"embedding":[0.5]}}],
            "model":"text-embedding-3-small","usage":{{"prompt_tokens":7,"total_tokens":7}}}}"#
        );
        let a = parse(&body).unwrap();
        assert_eq!(a.vectors, [vec![0.5], vec![1.0, -2.0]]);
        assert_eq!(a.model, "text-embedding-3-small");
        assert_eq!(a.usage.map(|u| u.input_tokens), Some(7));
    }

    #[test]
    fn a_broken_answer_is_a_decode_error_naming_the_provider() {
        for body in [
            r#"{"data":[{"index":3,"embedding":[1]}]}"#,
            r#"{"data":[{"index":0,"embedding":[1]},{"index":0,"embedding":[2]}]}"#,
            r#"{"data":[{"index":0,"embedding":"%%%"}]}"#,
            r#"{"data":[{"index":0,"embedding":["x"]}]}"#,
            r#"{"object":"list"}"#,
        ] {
            let err = parse(body).unwrap_err();
            assert!(err.is_decode(), "{body}: {err}");
            assert_eq!(err.provider().map(|p| p.as_str()), Some("p"));
        }
    }

    #[test]
    fn sends_one_input_as_a_string_and_many_as_an_array() {
        let url: Url = "http://127.0.0.1:1/v1/embeddings".parse().unwrap();
        let ctx = RequestContext::new("text-embedding-3-small", None);
        let body = |r: &EmbeddingRequest| -> Value {
            let http = build_request(url.clone(), r, &ctx).unwrap();
            serde_json::from_slice(http.json_body().unwrap()).unwrap()
        };
        assert_eq!(body(&EmbeddingRequest::new("a"))["input"], "a");
        let many = body(&EmbeddingRequest::many(["a", "b"]).dimensions(8));
        assert_eq!(many["input"], json!(["a", "b"]));
        assert_eq!(many["dimensions"], 8);
        assert!(many.get("encoding_format").is_none());
        let too_many = EmbeddingRequest::many((0..=MAX_INPUTS).map(|i| i.to_string()));
        let err = check(&ProviderId::new("p"), &too_many).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
    }

    #[test]
    fn base64_round_trips_known_values() {
        assert_eq!(base64_decode("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64_decode("aGk").unwrap(), b"hi");
        assert!(base64_decode("a").is_none());
    }
}
