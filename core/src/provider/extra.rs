//! Extra body fields: provider-specific request fields the neutral types do not name (`seed`,
//! `top_p`, `user`, `logit_bias`, Gemini's `safetySettings`, …), merged into the JSON body an
//! adapter built, after it built it — the same way for every adapter.
//!
//! The merge ([`merge`]) is a JSON merge patch ([RFC 7396]) with one guard: an object merges
//! into the object the adapter wrote, key by key and recursively (so Gemini's
//! `{"generationConfig": {"seed": 7}}` keeps the adapter's `generationConfig.temperature`);
//! any other value replaces what the adapter wrote under that key; `null` removes it. The
//! provider's fields apply first, then the request's, so a request overrides its provider.
//! The guard: `model` and `stream` at the top level are refused ([`check`]) — the model is
//! chosen by [`ChatRequest::model`](crate::ChatRequest::model) (limits and failover are kept
//! per model) and streaming by `chat_stream`, and a body that disagreed with them would be
//! read as the wrong answer.
//!
//! [RFC 7396]: https://www.rfc-editor.org/rfc/rfc7396

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::error::{Error, ErrorKind, Result};
use crate::http::{Body, HttpRequest};

/// Top-level fields extra fields may not set.
const RESERVED: [&str; 2] = ["model", "stream"];

/// Refuses extra fields that set what the SDK decides (`model`, `stream`); `whose` names them
/// in the error (`provider openai's extra_body`, `the request's extra_body`).
///
/// # Errors
///
/// `InvalidRequest` naming the field.
pub(crate) fn check(extra: &Map<String, Value>, whose: &str) -> Result<()> {
    match RESERVED.iter().find(|k| extra.contains_key(**k)) {
        None => Ok(()),
        Some(k) => Err(Error::new(
            ErrorKind::InvalidRequest,
            format!(
                "{whose} sets `{k}`, which the SDK decides: choose the model with \
             ChatRequest::model (limits and failover are kept per model) and streaming with \
             Client::chat_stream"
            ),
        )),
    }
}

/// Merges `patch` into `target` (RFC 7396): objects key by key, recursively; `null` removes;
/// anything else replaces.
pub(crate) fn merge(target: &mut Map<String, Value>, patch: &Map<String, Value>) {
    for (key, value) in patch {
        match value {
            Value::Null => {
                target.remove(key);
            }
            Value::Object(inner) => {
                let slot = target
                    .entry(key.clone())
                    .or_insert_with(|| Value::Object(Map::new()));
                if !slot.is_object() {
                    *slot = Value::Object(Map::new());
                }
                if let Value::Object(slot) = slot {
                    merge(slot, inner);
                }
            }
            other => {
                target.insert(key.clone(), other.clone());
            }
        }
    }
}

/// `http` with the provider's then the request's extra fields merged into its JSON body; as
/// it was when both are empty.
///
/// # Errors
///
/// `InvalidRequest` for a reserved field ([`check`]) or a request whose body is not a JSON
/// object (extra fields are for JSON APIs: a multipart upload has none).
pub(crate) fn apply(
    mut http: HttpRequest,
    provider: Option<&Map<String, Value>>,
    request: &Map<String, Value>,
) -> Result<HttpRequest> {
    let provider = provider.filter(|p| !p.is_empty());
    if provider.is_none() && request.is_empty() {
        return Ok(http);
    }
    check(request, "the request's extra_body")?;
    let Body::Json(bytes) = &http.body else {
        return Err(Error::new(
            ErrorKind::InvalidRequest,
            "extra_body applies to JSON request bodies only; this provider's request has none",
        ));
    };
    let mut body: Map<String, Value> = serde_json::from_slice(bytes).map_err(|e| {
        Error::new(
            ErrorKind::InvalidRequest,
            format!("the adapter's body is not a JSON object: {e}"),
        )
    })?;
    if let Some(p) = provider {
        merge(&mut body, p);
    }
    merge(&mut body, request);
    let bytes = serde_json::to_vec(&body).map_err(|e| {
        Error::new(
            ErrorKind::InvalidRequest,
            format!("cannot write the merged body: {e}"),
        )
    })?;
    http.body = Body::Json(Bytes::from(bytes));
    Ok(http)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            other => panic!("not an object: {other}"),
        }
    }

    #[test]
    fn a_patch_merges_objects_replaces_values_and_removes_nulls() {
        let cases = [
            // (adapter's body, patch) → body sent
            (
                json!({"a": 1}),
                json!({"seed": 7}),
                json!({"a": 1, "seed": 7}),
            ),
            (
                json!({"top_p": 1}),
                json!({"top_p": 0.5}),
                json!({"top_p": 0.5}),
            ),
            (
                json!({"generationConfig": {"temperature": 0.2}}),
                json!({"generationConfig": {"seed": 7}}),
                json!({"generationConfig": {"temperature": 0.2, "seed": 7}}),
            ),
            (
                json!({"stream_options": {"x": 1}, "a": 1}),
                json!({"stream_options": null}),
                json!({"a": 1}),
            ),
            (json!({"a": 1}), json!({"missing": null}), json!({"a": 1})),
            (
                json!({"a": 1}),
                json!({"a": {"b": 2}}),
                json!({"a": {"b": 2}}),
            ),
            (json!({"a": [1, 2]}), json!({"a": [3]}), json!({"a": [3]})),
            (
                json!({}),
                json!({"user": "u-42", "metadata": {"k": "v"}}),
                json!({"user": "u-42", "metadata": {"k": "v"}}),
            ),
        ];
        for (body, patch, want) in cases {
            let mut got = obj(body.clone());
            merge(&mut got, &obj(patch.clone()));
            assert_eq!(Value::Object(got), want, "{body} + {patch}");
        }
    }

    #[test]
    fn the_request_overrides_its_provider_and_reserved_fields_are_refused() {
        let http = HttpRequest::post_json(
            "http://127.0.0.1:1/v1/chat/completions".parse().unwrap(),
            &json!({"model": "m", "messages": [], "temperature": 0.2}),
        )
        .unwrap();
        let provider = obj(json!({"seed": 1, "user": "team"}));
        let request = obj(json!({"seed": 2, "temperature": null}));
        let sent = apply(http.clone(), Some(&provider), &request).unwrap();
        let Body::Json(bytes) = &sent.body else {
            panic!("not JSON")
        };
        let body: Value = serde_json::from_slice(bytes).unwrap();
        assert_eq!(
            body,
            json!({"model": "m", "messages": [], "seed": 2, "user": "team"})
        );

        // Nothing extra: the very same bytes.
        let same = apply(http.clone(), None, &Map::new()).unwrap();
        let (Body::Json(a), Body::Json(b)) = (&same.body, &http.body) else {
            panic!()
        };
        assert_eq!(a, b);

        for reserved in ["model", "stream"] {
            let e = apply(http.clone(), None, &obj(json!({reserved: true}))).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidRequest);
            assert!(e.to_string().contains(&format!("`{reserved}`")), "{e}");
        }
    }
}
