//! A Vertex provider's OAuth 2 token endpoint, `POST /{prefix}/token`: Google's
//! `https://oauth2.googleapis.com/token` on loopback, where the key file's `token_uri` points.
//!
//! The request is a form (`application/x-www-form-urlencoded`) with
//! `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer` and the signed JWT in `assertion`
//! (RFC 7523, section 2.1; developers.google.com/identity/protocols/oauth2/service-account,
//! "Making the access token request"); the answer `{"access_token", "expires_in": 3599,
//! "token_type": "Bearer"}`, or a 400 `{"error", "error_description"}` (RFC 6749, section 5.2)
//! with Google's words (`crate::oauth`).
//!
//! Google's token service is not the Vertex API: its requests take no fault, limit or counter
//! of the provider, only a line in the request log.

use std::time::SystemTime;

use axum::body::Body;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{content_type, header, json_bytes};
use crate::oauth::{JWT_BEARER, TOKEN_LIFETIME};
use crate::state::{App, LogEntry, ProviderState};

/// A token request is a short form: this is plenty.
const BODY_LIMIT: usize = 64 << 10;

fn answer(status: StatusCode, body: &Value) -> Response {
    let mut r = Response::new(Body::from(json_bytes(body)));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    h.insert(
        CACHE_CONTROL,
        HeaderValue::from_static("no-cache, no-store, max-age=0, must-revalidate"),
    );
    r
}

fn refuse(error: &str, description: &str) -> Response {
    answer(
        StatusCode::BAD_REQUEST,
        &json!({"error": error, "error_description": description}),
    )
}

/// Answers a request to the token endpoint of `p`, and logs it.
pub(super) async fn handle(
    app: &App,
    p: &ProviderState,
    parts: &Parts,
    body: Body,
    now: Instant,
    wall: SystemTime,
) -> Response {
    let resp = exchange(p, parts, body, wall).await;
    let (at_ms, unix_ms) = app.stamp(now);
    app.record(LogEntry {
        at_ms,
        unix_ms,
        provider: p.cfg.prefix.clone(),
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        model: None,
        status: Some(resp.status().as_u16()),
        fault: None,
        stream: false,
        tokens: 0,
        request_id: None,
        usage: None,
        cached_input: 0,
        returned: [0, 0],
        stated: Vec::new(),
    });
    resp
}

async fn exchange(p: &ProviderState, parts: &Parts, body: Body, wall: SystemTime) -> Response {
    if parts.method != Method::POST {
        return answer(
            StatusCode::METHOD_NOT_ALLOWED,
            &json!({"error": "invalid_request",
                    "error_description": "The token endpoint takes POST only."}),
        );
    }
    let Some(id) = &p.google else {
        return refuse("invalid_request", "This provider issues no tokens.");
    };
    if content_type(parts) != "application/x-www-form-urlencoded" {
        return refuse(
            "invalid_request",
            "The request must be a form: Content-Type: application/x-www-form-urlencoded",
        );
    }
    let Ok(bytes) = axum::body::to_bytes(body, BODY_LIMIT).await else {
        return refuse("invalid_request", "The request body is too large.");
    };
    let form: Vec<(String, String)> = url::form_urlencoded::parse(&bytes).into_owned().collect();
    let field = |name: &str| {
        form.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let Some(grant) = field("grant_type") else {
        return refuse("invalid_request", "Missing required parameter: grant_type");
    };
    if grant != JWT_BEARER {
        return refuse(
            "unsupported_grant_type",
            &format!("Invalid grant_type: {grant}"),
        );
    }
    let Some(assertion) = field("assertion") else {
        return refuse("invalid_request", "Missing required parameter: assertion");
    };
    let own_uri = format!(
        "http://{}{}",
        header(parts, "host").unwrap_or("127.0.0.1"),
        parts.uri.path()
    );
    match id.grant(assertion, &own_uri, wall) {
        Ok(token) => answer(
            StatusCode::OK,
            &json!({
                "access_token": token,
                "expires_in": TOKEN_LIFETIME.as_secs(),
                "token_type": "Bearer",
            }),
        ),
        Err(r) => refuse(r.error, &r.description),
    }
}
