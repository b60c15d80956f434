//! The admin endpoint, for out-of-process use (benchmarks, the demo, a shell):
//!
//! | request | effect |
//! | --- | --- |
//! | `GET /_admin/counters` | counters per provider: `{"openai": {"requests": …, "ok": …, "rate_limited": …, …}}` |
//! | `GET /_admin/log?limit=N` | the last N request-log entries (all kept when absent) |
//! | `POST /_admin/reset` | zero counters, clear the log, refill every bucket, drop pending scripts |
//! | `POST /_admin/faults` | `{"provider": "openai", "script": [{"kind": "status", "status": 503}], "append": false, "mix": [{"p": 0.1, "kind": "reset"}], "seed": 7}`: replace (or append to) the script, replace the mix (each part optional) |
//! | `POST /_admin/limits` | `{"provider": "openai", "model": "gpt-4o", "limits": {"rpm": 10, "tpm": 1000}, "minute_ms": 6000}`: new limits for the provider (or one model); buckets keep their level |
//! | `GET /_admin/service_account?provider=vertex` | a Vertex provider's service-account JSON key file, its `token_uri` the provider's token endpoint on this listener |

use axum::body::Body;
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, StatusCode};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};
use std::time::Duration;

use crate::config::Limits;
use crate::faults::{Fault, FaultConfig, WeightedFault};
use crate::state::App;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FaultsBody {
    provider: String,
    script: Option<Vec<Fault>>,
    #[serde(default)]
    append: bool,
    mix: Option<Vec<WeightedFault>>,
    seed: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsBody {
    provider: String,
    model: Option<String>,
    limits: Limits,
    minute_ms: Option<u64>,
}

fn reply(status: StatusCode, body: &Value) -> Response {
    let mut r = Response::new(Body::from(serde_json::to_vec(body).unwrap_or_default()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn problem(status: StatusCode, msg: impl Into<String>) -> Response {
    reply(status, &json!({"error": msg.into()}))
}

async fn json_body<T: for<'a> Deserialize<'a>>(body: Body) -> Result<T, Response> {
    let bytes = axum::body::to_bytes(body, 1 << 20)
        .await
        .map_err(|e| problem(StatusCode::BAD_REQUEST, format!("body: {e}")))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| problem(StatusCode::BAD_REQUEST, format!("body: {e}")))
}

/// Answers `/_admin/{rest}`.
pub(crate) async fn handle(app: &App, rest: &str, parts: &Parts, body: Body) -> Response {
    match (&parts.method, rest) {
        (&Method::GET, "counters") => reply(StatusCode::OK, &json!(app.counters())),
        (&Method::GET, "log") => {
            let log = app.log();
            let limit = super::query_param(parts.uri.query(), "limit")
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(log.len());
            let skip = log.len().saturating_sub(limit);
            reply(StatusCode::OK, &json!(&log[skip..]))
        }
        (&Method::GET, "service_account") => {
            let prefix = super::query_param(parts.uri.query(), "provider").unwrap_or_default();
            let Some(p) = app.provider(prefix) else {
                return problem(StatusCode::NOT_FOUND, format!("no provider {prefix:?}"));
            };
            let Some(id) = &p.google else {
                return problem(
                    StatusCode::BAD_REQUEST,
                    format!("{prefix:?} is a {} provider, not vertex", p.cfg.kind),
                );
            };
            let mut key = id.key().clone();
            let host = super::header(parts, "host").unwrap_or("127.0.0.1");
            key.token_uri = format!("http://{host}/{prefix}/token");
            let mut r = Response::new(Body::from(key.to_json()));
            r.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            r
        }
        (&Method::POST, "reset") => {
            app.reset();
            reply(StatusCode::OK, &json!({"reset": true}))
        }
        (&Method::POST, "faults") => {
            let b: FaultsBody = match json_body(body).await {
                Ok(b) => b,
                Err(r) => return r,
            };
            let Some(p) = app.provider(&b.provider) else {
                return problem(
                    StatusCode::NOT_FOUND,
                    format!("no provider {:?}", b.provider),
                );
            };
            if let Some(mix) = &b.mix {
                let check = FaultConfig {
                    mix: mix.clone(),
                    ..FaultConfig::default()
                };
                if let Err(e) = check.validate() {
                    return problem(StatusCode::BAD_REQUEST, e);
                }
            }
            if let Some(script) = b.script {
                if !b.append {
                    p.clear_script();
                }
                p.push_script(script);
            }
            if let Some(mix) = b.mix {
                p.set_mix(mix, b.seed);
            }
            reply(
                StatusCode::OK,
                &json!({"provider": b.provider, "pending": p.pending_script()}),
            )
        }
        (&Method::POST, "limits") => {
            let b: LimitsBody = match json_body(body).await {
                Ok(b) => b,
                Err(r) => return r,
            };
            let Some(p) = app.provider(&b.provider) else {
                return problem(
                    StatusCode::NOT_FOUND,
                    format!("no provider {:?}", b.provider),
                );
            };
            let bad = [b.limits.rpm, b.limits.tpm, b.limits.rpd, b.limits.tpd].contains(&Some(0))
                || b.limits.concurrency == Some(0)
                || b.minute_ms == Some(0);
            if bad {
                return problem(
                    StatusCode::BAD_REQUEST,
                    "a limit (or minute_ms) of 0 can never admit a request; omit it for none",
                );
            }
            p.set_limits(
                b.model.as_deref(),
                b.limits,
                b.minute_ms.map(Duration::from_millis),
                app.now().0,
            );
            reply(
                StatusCode::OK,
                &json!({"provider": b.provider, "limits": b.limits}),
            )
        }
        _ => problem(
            StatusCode::NOT_FOUND,
            format!("no admin route {} /_admin/{rest}", parts.method),
        ),
    }
}
