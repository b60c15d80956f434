//! A scripted loopback server for adapter tests: each reply is given in advance, in order,
//! per route; every request that arrives is recorded (method, path, query, headers, body,
//! multipart fields) so a test can assert exactly what the client sent.
//!
//! Dropping the server shuts it down and, unless the test is already panicking, panics if a
//! request arrived that had no scripted reply (reqwest's `tests/support/server.rs` habit).

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::oneshot;

/// How the body of a scripted reply is delivered.
#[derive(Clone, Debug)]
pub enum ReplyBody {
    /// The whole body at once.
    Full(Bytes),
    /// Pieces sent one after another, each after its delay (SSE streams).
    Chunks(Vec<(Duration, Bytes)>),
    /// These bytes, then the connection is cut before the body is complete.
    Truncated(Bytes),
    /// No response for this long (longer than the client's timeout), then an empty 200.
    Hang(Duration),
}

/// One scripted reply.
#[derive(Clone, Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Response headers.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: ReplyBody,
    /// Wait before answering.
    pub delay: Duration,
}

impl Reply {
    /// A reply with `status` and an empty body.
    pub fn status(status: u16) -> Self {
        Reply {
            status,
            headers: Vec::new(),
            body: ReplyBody::Full(Bytes::new()),
            delay: Duration::ZERO,
        }
    }

    /// A JSON reply.
    pub fn json(status: u16, body: impl Into<String>) -> Self {
        Self::status(status)
            .header("content-type", "application/json")
            .body(body.into())
    }

    /// A server-sent-event stream, one piece per event, sent as they are given.
    pub fn sse(events: impl IntoIterator<Item = impl Into<String>>) -> Self {
        let chunks = events
            .into_iter()
            .map(|e| (Duration::ZERO, Bytes::from(e.into())))
            .collect();
        Reply {
            body: ReplyBody::Chunks(chunks),
            ..Self::status(200).header("content-type", "text/event-stream")
        }
    }

    /// Adds a header.
    #[must_use]
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Replaces the body.
    #[must_use]
    pub fn body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = ReplyBody::Full(body.into());
        self
    }

    /// Replaces the body delivery.
    #[must_use]
    pub fn with_body(mut self, body: ReplyBody) -> Self {
        self.body = body;
        self
    }

    /// Waits `delay` before answering.
    #[must_use]
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

/// A field of a recorded multipart form.
#[derive(Clone, Debug)]
pub struct FormField {
    /// Field name.
    pub name: String,
    /// File name, for file fields.
    pub file_name: Option<String>,
    /// The part's content type, if given.
    pub content_type: Option<String>,
    /// The part's bytes.
    pub data: Bytes,
}

/// A request as it arrived.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// Method (`POST`).
    pub method: String,
    /// Path (`/v1/chat/completions`).
    pub path: String,
    /// Raw query string, if any.
    pub query: Option<String>,
    /// Headers.
    pub headers: HeaderMap,
    /// Body bytes.
    pub body: Bytes,
    /// Parsed fields when the body was `multipart/form-data`.
    pub form: Vec<FormField>,
}

impl Recorded {
    /// The body parsed as JSON.
    ///
    /// # Panics
    ///
    /// If it is not JSON (this is a test helper).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("request body is not JSON")
    }

    /// A header's value as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name)?.to_str().ok()
    }

    /// A multipart field by name.
    pub fn field(&self, name: &str) -> Option<&FormField> {
        self.form.iter().find(|f| f.name == name)
    }

    /// A text multipart field by name.
    pub fn field_text(&self, name: &str) -> Option<String> {
        self.field(name)
            .map(|f| String::from_utf8_lossy(&f.data).into_owned())
    }
}

#[derive(Default)]
struct Shared {
    script: HashMap<String, VecDeque<Reply>>,
    log: Vec<Recorded>,
    unexpected: Vec<String>,
}

type SharedState = Arc<Mutex<Shared>>;

fn lock(s: &SharedState) -> std::sync::MutexGuard<'_, Shared> {
    s.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A loopback server answering from a script.
///
/// # Examples
///
/// ```
/// use llm_failover_emulator::scripted::{Reply, ScriptedServer};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let server = ScriptedServer::start().await;
/// server.push("/v1/ping", Reply::json(200, r#"{"ok":true}"#));
/// // ... point a client at server.url() ...
/// # let _ = server.url();
/// # server.push("/unused", Reply::status(200)); server.forget_unused();
/// # drop(server);
/// # }
/// ```
pub struct ScriptedServer {
    addr: SocketAddr,
    state: SharedState,
    shutdown: Option<oneshot::Sender<()>>,
}

impl std::fmt::Debug for ScriptedServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedServer")
            .field("addr", &self.addr)
            .finish()
    }
}

impl ScriptedServer {
    /// Starts a server on `127.0.0.1:0`.
    ///
    /// # Panics
    ///
    /// If no loopback port can be bound.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let state = SharedState::default();
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(state.clone());
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await;
        });
        ScriptedServer {
            addr,
            state,
            shutdown: Some(tx),
        }
    }

    /// `http://127.0.0.1:PORT` (no trailing slash).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queues `reply` for the next request to `path` (query string ignored).
    pub fn push(&self, path: &str, reply: Reply) {
        lock(&self.state)
            .script
            .entry(path.to_owned())
            .or_default()
            .push_back(reply);
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.state).log.clone()
    }

    /// How many requests arrived for `path`.
    pub fn count(&self, path: &str) -> usize {
        lock(&self.state)
            .log
            .iter()
            .filter(|r| r.path == path)
            .count()
    }

    /// Replies still queued (not consumed), per path.
    pub fn pending(&self) -> usize {
        lock(&self.state).script.values().map(VecDeque::len).sum()
    }

    /// Drops replies nobody asked for.
    pub fn forget_unused(&self) {
        lock(&self.state).script.clear();
    }
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        let unexpected = std::mem::take(&mut lock(&self.state).unexpected);
        if !std::thread::panicking() && !unexpected.is_empty() {
            panic!("requests with no scripted reply: {unexpected:?}");
        }
    }
}

async fn handle(State(state): State<SharedState>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, 64 << 20)
        .await
        .unwrap_or_default();
    let path = parts.uri.path().to_owned();
    let form = parse_form(&parts.headers, body.clone()).await;
    let recorded = Recorded {
        method: parts.method.to_string(),
        path: path.clone(),
        query: parts.uri.query().map(str::to_owned),
        headers: parts.headers,
        body,
        form,
    };
    let reply = {
        let mut s = lock(&state);
        s.log.push(recorded);
        let reply = s.script.get_mut(&path).and_then(VecDeque::pop_front);
        if reply.is_none() {
            s.unexpected.push(format!("{} {path}", parts.method));
        }
        reply
    };
    let Some(reply) = reply else {
        return Response::builder()
            .status(StatusCode::NOT_IMPLEMENTED)
            .body(Body::from(format!("no scripted reply for {path}")))
            .unwrap_or_default();
    };
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    build(reply).await
}

async fn build(reply: Reply) -> Response {
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = match reply.body {
        ReplyBody::Full(b) => Body::from(b),
        ReplyBody::Chunks(chunks) => Body::from_stream(futures_util::stream::iter(chunks).then(
            |(delay, bytes)| async move {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                Ok::<_, Infallible>(bytes)
            },
        )),
        ReplyBody::Truncated(b) => {
            // Send the head and the bytes first, then cut: a client sees a response that
            // started and never finished.
            let items: Vec<Result<Bytes, std::io::Error>> = vec![
                Ok(b),
                Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "scripted cut",
                )),
            ];
            Body::from_stream(futures_util::stream::iter(items).then(|item| async move {
                if item.is_err() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                item
            }))
        }
        ReplyBody::Hang(d) => {
            tokio::time::sleep(d).await;
            Body::empty()
        }
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    for (k, v) in reply.headers {
        if let (Ok(k), Ok(v)) = (
            HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_bytes(v.as_bytes()),
        ) {
            resp.headers_mut().append(k, v);
        }
    }
    resp
}

async fn parse_form(headers: &HeaderMap, body: Bytes) -> Vec<FormField> {
    let Some(ct) = headers.get("content-type").and_then(|v| v.to_str().ok()) else {
        return Vec::new();
    };
    let Ok(boundary) = multer::parse_boundary(ct) else {
        return Vec::new();
    };
    let stream = futures_util::stream::once(async move { Ok::<_, Infallible>(body) });
    let mut mp = multer::Multipart::new(stream, boundary);
    let mut out = Vec::new();
    while let Ok(Some(field)) = mp.next_field().await {
        let name = field.name().unwrap_or_default().to_owned();
        let file_name = field.file_name().map(str::to_owned);
        let content_type = field.content_type().map(|m| m.to_string());
        let data = field.bytes().await.unwrap_or_default();
        out.push(FormField {
            name,
            file_name,
            content_type,
            data,
        });
    }
    out
}
