//! Google Vertex AI, Gemini on Vertex: `POST
//! /{v1|v1beta1}/projects/{project}/locations/{location}/publishers/google/models/{model}:{method}`
//! with the methods
//! - `generateContent` and `streamGenerateContent` (cloud.google.com/vertex-ai/generative-ai/
//!   docs/reference/rest/v1/projects.locations.publishers.models/generateContent,
//!   …/streamGenerateContent): Gemini's request and `GenerateContentResponse` (`gemini_generate.rs`),
//!   plus Vertex's `createTime` and `usageMetadata.trafficType`; the stream as `data: {…}`
//!   events with `?alt=sse`, else one JSON array, as Vertex documents it;
//! - `embedContent` and `batchEmbedContents` (…/embedContent; `gemini_embed.rs`) and
//!   `predict` for the text-embedding models (…/model-reference/text-embeddings-api;
//!   `vertex_predict.rs`).
//!
//! `location` is a region (`us-central1`) or `global`; `project` must be the provider's
//! (another gets Vertex's 403 `PERMISSION_DENIED`). Requests carry `Authorization: Bearer`
//! with an access token from the provider's `POST /token` (`token.rs`, `crate::oauth`); a
//! missing, unknown or expired one gets Google's 401 `UNAUTHENTICATED` with its `ErrorInfo`
//! reason (`CREDENTIALS_MISSING`, `ACCESS_TOKEN_TYPE_UNSUPPORTED`, `ACCESS_TOKEN_EXPIRED`;
//! an API key is "not supported by this API"). Errors are google.rpc's shape. No rate-limit
//! headers: a limit answers 429 `RESOURCE_EXHAUSTED` with Vertex's words — "Resource
//! exhausted. Please try again later. …" (cloud.google.com/vertex-ai/generative-ai/docs/
//! error-code-429) for a per-minute limit, the quota message ("Quota exceeded for
//! aiplatform.googleapis.com/… with base model: …") for one that a wait does not mend.

use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, StatusCode};
use bytes::Bytes;
use serde_json::{Value, json};

use super::gemini::{frame_stream, parse_generate, rpc};
use super::gemini_embed::{self, Api};
use super::gemini_generate as generate;
use super::{
    ApiError, ChatReq, Cx, EmbedForm, EmbedReq, Field, JSON, Op, OpKind, Rendered, Route,
    StreamParts, SttReq, Usage, Wire, auth_scheme, header, json_bytes, query_param, vertex_predict,
};
use crate::headers::rfc3339;
use crate::limits::LimitName;
use crate::oauth::Access;
use crate::text::Transcript;
use crate::tools::Answer;

pub(super) struct Vertex;

/// The cap on a request body (inline data included), as Gemini's.
const BODY_LIMIT: usize = 20 << 20;

/// A Vertex model path, split.
struct ModelPath<'a> {
    version: &'a str,
    project: &'a str,
    location: &'a str,
    model: &'a str,
    method: &'a str,
}

impl ModelPath<'_> {
    fn parse(path: &str) -> Option<ModelPath<'_>> {
        let s: Vec<&str> = path.strip_prefix('/')?.split('/').collect();
        let [
            version,
            "projects",
            project,
            "locations",
            location,
            "publishers",
            "google",
            "models",
            last,
        ] = s.as_slice()
        else {
            return None;
        };
        let (model, method) = last.rsplit_once(':')?;
        let ok = |x: &str| !x.is_empty();
        (matches!(*version, "v1" | "v1beta1") && ok(project) && ok(location) && ok(model))
            .then_some(ModelPath {
                version,
                project,
                location,
                model,
                method,
            })
    }

    /// The model's resource name.
    fn resource(&self) -> String {
        format!(
            "projects/{}/locations/{}/publishers/google/models/{}",
            self.project, self.location, self.model
        )
    }

    /// The RPC method, for `ErrorInfo.metadata.method`.
    fn rpc_method(&self) -> String {
        let mut m = self.method.to_owned();
        if let Some(first) = m.get_mut(..1) {
            first.make_ascii_uppercase();
        }
        format!(
            "google.cloud.aiplatform.{}.PredictionService.{m}",
            self.version
        )
    }
}

/// 401 `UNAUTHENTICATED` with an `ErrorInfo` of `reason`.
fn unauthenticated(cx: &Cx<'_>, message: &str, reason: &str) -> ApiError {
    let mut metadata = json!({"service": "aiplatform.googleapis.com"});
    if let Some(p) = ModelPath::parse(cx.path) {
        metadata["method"] = json!(p.rpc_method());
    }
    rpc(
        401,
        "UNAUTHENTICATED",
        message,
        vec![json!({
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": reason,
            "domain": "googleapis.com",
            "metadata": metadata,
        })],
    )
}

const MISSING_CREDENTIAL: &str = "Request is missing required authentication credential. \
     Expected OAuth 2 access token, login cookie or other valid authentication credential. See \
     https://developers.google.com/identity/sign-in/web/devconsole-project.";

const INVALID_CREDENTIAL: &str = "Request had invalid authentication credentials. Expected \
     OAuth 2 access token, login cookie or other valid authentication credential. See \
     https://developers.google.com/identity/sign-in/web/devconsole-project.";

/// The 429 of a limit: Vertex's shared-capacity words for a per-minute one, the quota
/// message for one a wait does not mend (too large, per day).
fn resource_exhausted(which: LimitName, too_large: bool, model: &str, embed: bool) -> ApiError {
    let message = if too_large || which.is_daily() {
        let metric = match (embed, which) {
            (true, _) => "online_prediction_requests_per_base_model",
            (false, LimitName::Tpm | LimitName::Tpd) => {
                "generate_content_input_tokens_per_minute_per_base_model"
            }
            (false, _) => "generate_content_requests_per_minute_per_project_per_base_model",
        };
        format!(
            "Quota exceeded for aiplatform.googleapis.com/{metric} with base model: {model}. \
             Please submit a quota increase request. \
             https://cloud.google.com/vertex-ai/docs/generative-ai/quotas-genai."
        )
    } else {
        "Resource exhausted. Please try again later. Please refer to \
         https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more details."
            .to_owned()
    };
    rpc(429, "RESOURCE_EXHAUSTED", &message, Vec::new())
}

/// Vertex's additions to a `GenerateContentResponse`.
fn vertex_fields(mut v: Value, cx: &Cx<'_>) -> Value {
    v["createTime"] = json!(rfc3339(cx.wall));
    if let Some(u) = v.get_mut("usageMetadata") {
        u["trafficType"] = json!("ON_DEMAND");
    }
    v
}

impl Wire for Vertex {
    fn caches_prompts(&self) -> bool {
        true
    }

    fn route(&self, method: &Method, path: &str, _query: Option<&str>) -> Option<Route> {
        if method != Method::POST {
            return None;
        }
        let p = ModelPath::parse(path)?;
        let (op, stream) = match p.method {
            "generateContent" => (OpKind::Chat, false),
            "streamGenerateContent" => (OpKind::Chat, true),
            "embedContent" | "batchEmbedContents" | "predict" => (OpKind::Embed, false),
            _ => return None,
        };
        Some(Route {
            model: Some(p.model.to_owned()),
            stream,
            ..Route::new(op)
        })
    }

    fn authorize(&self, parts: &Parts, _key: &str) -> Result<(), ApiError> {
        // The token is checked against the provider's in `verify`.
        match auth_scheme(parts, "bearer") {
            Some(t) if !t.is_empty() => Ok(()),
            _ => match header(parts, "x-goog-api-key")
                .or_else(|| query_param(parts.uri.query(), "key"))
            {
                Some(k) => Err(ApiError::WrongKey(k.to_owned())),
                None => Err(ApiError::MissingKey),
            },
        }
    }

    fn verify(&self, parts: &Parts, _body: &Bytes, cx: &Cx<'_>) -> Result<(), ApiError> {
        let Some(id) = &cx.provider.google else {
            return Err(ApiError::MissingKey);
        };
        let token = auth_scheme(parts, "bearer").unwrap_or_default();
        match id.check(token, cx.wall) {
            Access::Valid => {}
            Access::Expired => {
                return Err(unauthenticated(
                    cx,
                    INVALID_CREDENTIAL,
                    "ACCESS_TOKEN_EXPIRED",
                ));
            }
            Access::Unknown => {
                return Err(unauthenticated(
                    cx,
                    INVALID_CREDENTIAL,
                    "ACCESS_TOKEN_TYPE_UNSUPPORTED",
                ));
            }
        }
        let p = ModelPath::parse(cx.path).ok_or(ApiError::NotFound)?;
        if p.project != id.key().project_id {
            return Err(rpc(
                403,
                "PERMISSION_DENIED",
                &format!(
                    "Permission 'aiplatform.endpoints.predict' denied on resource \
                     '//aiplatform.googleapis.com/{}' (or it may not exist).",
                    p.resource()
                ),
                vec![json!({
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "IAM_PERMISSION_DENIED",
                    "domain": "aiplatform.googleapis.com",
                    "metadata": {
                        "permission": "aiplatform.endpoints.predict",
                        "resource": p.resource(),
                    },
                })],
            ));
        }
        Ok(())
    }

    fn body_limit(&self, _op: OpKind) -> usize {
        BODY_LIMIT
    }

    fn parse(
        &self,
        route: &Route,
        parts: &Parts,
        body: &Bytes,
        _form: &[Field],
    ) -> Result<Op, ApiError> {
        let model = route.model.as_deref().unwrap_or_default();
        let method = parts.uri.path().rsplit_once(':').map_or("", |(_, m)| m);
        match method {
            "predict" => vertex_predict::parse(model, body).map(Op::Embed),
            "embedContent" | "batchEmbedContents" => {
                let batch = method == "batchEmbedContents";
                gemini_embed::parse(Api::Vertex, model, batch, body).map(Op::Embed)
            }
            _ => parse_generate(route, parts, body).map(Op::Chat),
        }
    }

    fn error(&self, e: &ApiError, cx: &Cx<'_>) -> Rendered {
        let path = ModelPath::parse(cx.path);
        let e = match e {
            ApiError::NotFound => rpc(
                404,
                "NOT_FOUND",
                &format!(
                    "The requested URL {} was not found on this server.",
                    cx.path
                ),
                Vec::new(),
            ),
            ApiError::MissingKey => unauthenticated(cx, MISSING_CREDENTIAL, "CREDENTIALS_MISSING"),
            ApiError::WrongKey(_) => unauthenticated(
                cx,
                "API keys are not supported by this API. Expected OAuth2 access token or other \
                 authentication credentials that assert a principal. See \
                 https://cloud.google.com/docs/authentication",
                "CREDENTIALS_MISSING",
            ),
            ApiError::BadRequest { message, .. } => {
                rpc(400, "INVALID_ARGUMENT", message, Vec::new())
            }
            ApiError::ModelNotFound(m) => {
                let resource = path.as_ref().map_or_else(|| m.clone(), ModelPath::resource);
                rpc(
                    404,
                    "NOT_FOUND",
                    &format!(
                        "Publisher Model `{resource}` was not found or your project does not \
                         have access to it. Please ensure you are using a valid model version. \
                         For more information, see: \
                         https://cloud.google.com/vertex-ai/generative-ai/docs/learn/model-versions"
                    ),
                    Vec::new(),
                )
            }
            ApiError::PayloadTooLarge { limit, .. } => rpc(
                400,
                "INVALID_ARGUMENT",
                &format!("Request payload size exceeds the limit: {limit} bytes."),
                Vec::new(),
            ),
            ApiError::RateLimited(l) => {
                let embed = path.as_ref().is_some_and(|p| {
                    matches!(p.method, "predict" | "embedContent" | "batchEmbedContents")
                });
                resource_exhausted(l.which, l.too_large, &l.model, embed)
            }
            // Vertex has no prepaid credit: an account that cannot pay is a project without
            // billing.
            ApiError::InsufficientQuota => {
                let project = path.as_ref().map_or("", |p| p.project);
                rpc(
                    403,
                    "PERMISSION_DENIED",
                    &format!(
                        "This API method requires billing to be enabled. Please enable billing \
                         on project #{project} by visiting \
                         https://console.developers.google.com/billing/enable?project={project} \
                         then retry. If you enabled billing for this project recently, wait a \
                         few minutes for the action to propagate to our systems and retry."
                    ),
                    vec![json!({
                        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                        "reason": "BILLING_DISABLED",
                        "domain": "googleapis.com",
                        "metadata": {"service": "aiplatform.googleapis.com"},
                    })],
                )
            }
            ApiError::Overloaded | ApiError::Status(503) => rpc(
                503,
                "UNAVAILABLE",
                "The service is currently unavailable.",
                Vec::new(),
            ),
            ApiError::Status(504) => rpc(
                504,
                "DEADLINE_EXCEEDED",
                "Deadline expired before operation could complete.",
                Vec::new(),
            ),
            ApiError::Status(s) if *s >= 500 => {
                rpc(*s, "INTERNAL", "Internal error encountered.", Vec::new())
            }
            ApiError::Status(s) => rpc(
                *s,
                "FAILED_PRECONDITION",
                StatusCode::from_u16(*s)
                    .ok()
                    .and_then(|c| c.canonical_reason())
                    .unwrap_or("Error"),
                Vec::new(),
            ),
            ApiError::Raw { .. } => e.clone(),
        };
        match e {
            ApiError::Raw { status, body } => (
                StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                JSON,
                json_bytes(&body),
            ),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, JSON, Bytes::new()),
        }
    }

    fn chat(&self, req: &ChatReq, a: &Answer, usage: Usage, cx: &Cx<'_>) -> Bytes {
        let v = generate::response(req, generate::answer_parts(req, a), Some((a, usage)));
        json_bytes(&vertex_fields(v, cx))
    }

    fn chat_stream(&self, req: &ChatReq, a: &Answer, usage: Usage, cx: &Cx<'_>) -> StreamParts {
        let chunks = generate::stream_chunks(req, a, usage)
            .into_iter()
            .map(|v| vertex_fields(v, cx))
            .collect();
        frame_stream(req, chunks)
    }

    fn stream_error(&self, _cx: &Cx<'_>) -> Bytes {
        let err = json!({"error": {"code": 500, "status": "INTERNAL",
            "message": "Internal error encountered."}});
        Bytes::from(format!("data: {err}\r\n\r\n"))
    }

    fn transcript(&self, _req: &SttReq, _t: &Transcript, _cx: &Cx<'_>) -> (&'static str, Bytes) {
        // No Vertex route parses into a transcription.
        (JSON, Bytes::new())
    }

    fn embeddings(&self, req: &EmbedReq, _cx: &Cx<'_>) -> Bytes {
        match req.form {
            EmbedForm::VertexPredict => vertex_predict::render(req),
            _ => gemini_embed::render(req),
        }
    }

    fn token_path(&self) -> Option<&'static str> {
        Some("/token")
    }

    fn id_headers(&self, _cx: &Cx<'_>, _h: &mut HeaderMap) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_the_documented_paths_only() {
        let base = "projects/p-123456/locations/us-central1/publishers/google/models";
        for (version, method, op, stream) in [
            ("v1", "generateContent", OpKind::Chat, false),
            ("v1beta1", "streamGenerateContent", OpKind::Chat, true),
            ("v1", "embedContent", OpKind::Embed, false),
            ("v1", "batchEmbedContents", OpKind::Embed, false),
            ("v1", "predict", OpKind::Embed, false),
        ] {
            let path = format!("/{version}/{base}/gemini-2.0-flash:{method}");
            let r = Vertex.route(&Method::POST, &path, None).unwrap();
            assert_eq!(
                (r.op, r.stream, r.model.as_deref()),
                (op, stream, Some("gemini-2.0-flash")),
                "{path}"
            );
        }
        let global =
            "/v1/projects/p-123456/locations/global/publishers/google/models/m:generateContent";
        assert!(Vertex.route(&Method::POST, global, None).is_some());
        for bad in [
            "/v1beta/models/m:generateContent",
            "/v2/projects/p/locations/l/publishers/google/models/m:generateContent",
            "/v1/projects/p/locations/l/publishers/anthropic/models/m:rawPredict",
            "/v1/projects/p/locations/l/publishers/google/models/m:countTokens",
            "/v1/projects//locations/l/publishers/google/models/m:generateContent",
        ] {
            assert!(Vertex.route(&Method::POST, bad, None).is_none(), "{bad}");
        }
        let p = ModelPath::parse(global).unwrap();
        assert_eq!(
            p.rpc_method(),
            "google.cloud.aiplatform.v1.PredictionService.GenerateContent"
        );
    }
}
