//! A recording reverse proxy on loopback: every request is forwarded as it came to the
//! upstream (the emulator) and its answer sent back, while the method, path, query, content
//! type and body are kept — exactly the bytes the SDK put on the wire, and the status the
//! emulator gave them. Headers are forwarded but never kept (the credential is in one).
//!
//! Answers are read whole before they are sent back (a stream arrives in one piece); nothing
//! here waits on a clock.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use tokio::sync::oneshot;

/// One request as it went through.
#[derive(Clone, Debug)]
pub(super) struct Captured {
    /// `POST`.
    pub(super) method: String,
    /// The path, without the query.
    pub(super) path: String,
    /// The raw query string.
    pub(super) query: Option<String>,
    /// The request's `content-type`.
    pub(super) content_type: Option<String>,
    /// The body, byte for byte.
    pub(super) body: Bytes,
    /// The upstream's status; `None` when it could not be reached.
    pub(super) status: Option<u16>,
}

#[derive(Clone)]
struct Shared {
    upstream: String,
    client: reqwest::Client,
    log: Arc<Mutex<Vec<Captured>>>,
}

/// The proxy; dropping it stops it.
pub(super) struct Recorder {
    addr: SocketAddr,
    log: Arc<Mutex<Vec<Captured>>>,
    shutdown: Option<oneshot::Sender<()>>,
}

/// Hop-by-hop headers and the ones the client library sets itself.
const NOT_FORWARDED: [HeaderName; 4] = [
    header::HOST,
    header::CONTENT_LENGTH,
    header::CONNECTION,
    header::TRANSFER_ENCODING,
];

impl Recorder {
    /// Starts on `127.0.0.1:0`, forwarding to `upstream` (`http://127.0.0.1:PORT`, no slash).
    pub(super) async fn start(upstream: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let shared = Shared {
            upstream,
            // No proxy from the environment: the upstream is on loopback.
            client: reqwest::Client::builder().no_proxy().build().unwrap(),
            log: log.clone(),
        };
        let app = axum::Router::new().fallback(forward).with_state(shared);
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await;
        });
        Recorder {
            addr,
            log,
            shutdown: Some(tx),
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub(super) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request since the last call, oldest first.
    pub(super) fn take(&self) -> Vec<Captured> {
        std::mem::take(&mut *self.log.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

async fn forward(State(s): State<Shared>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, 64 << 20)
        .await
        .unwrap_or_default();
    let target = format!(
        "{}{}",
        s.upstream,
        parts.uri.path_and_query().map_or("/", |p| p.as_str())
    );
    let mut out = s
        .client
        .request(parts.method.clone(), target)
        .body(body.clone());
    for (name, value) in &parts.headers {
        if !NOT_FORWARDED.contains(name) {
            out = out.header(name, value);
        }
    }
    let answer = out.send().await;
    let status = answer.as_ref().ok().map(|a| a.status().as_u16());
    s.log
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Captured {
            method: parts.method.to_string(),
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().map(str::to_owned),
            content_type: parts
                .headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            body,
            status,
        });
    let Ok(answer) = answer else {
        return Response::builder()
            .status(StatusCode::BAD_GATEWAY)
            .body(Body::from("the recorder could not reach the emulator"))
            .unwrap_or_default();
    };
    let mut reply = Response::builder().status(answer.status());
    for (name, value) in answer.headers() {
        if !NOT_FORWARDED.contains(name) {
            reply = reply.header(name, value);
        }
    }
    let bytes = answer.bytes().await.unwrap_or_default();
    reply.body(Body::from(bytes)).unwrap_or_default()
}
