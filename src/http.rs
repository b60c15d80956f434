//! The one place that performs HTTP I/O.
//!
//! Adapters build an [`HttpRequest`] (a plain description, cheap to clone and re-send);
//! [`Transport`] sends it with reqwest and returns a [`RawResponse`] (status, headers, body
//! read up to a size cap) or, for streams, a [`StreamingResponse`]. Transport failures map
//! to [`ErrorKind::Timeout`] or [`ErrorKind::Connect`]. Redirects are never followed, so a
//! key never travels to another host; a 3xx is reported as a configuration problem.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use reqwest::Method;
use url::Url;

use crate::error::{Error, ErrorKind, Result};

/// A request body, kept in a form that can be sent again (retries, failover).
#[derive(Clone)]
#[non_exhaustive]
pub enum Body {
    /// No body.
    Empty,
    /// A JSON document (sent with `Content-Type: application/json`).
    Json(Bytes),
    /// Raw bytes with their content type (Deepgram audio uploads).
    Bytes {
        /// The payload.
        bytes: Bytes,
        /// Its MIME type.
        content_type: String,
    },
    /// A `multipart/form-data` form, rebuilt for every send.
    Multipart(Vec<FormPart>),
}

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Body::Empty => f.write_str("Empty"),
            Body::Json(b) => write!(f, "Json({} bytes)", b.len()),
            Body::Bytes {
                bytes,
                content_type,
            } => {
                write!(f, "Bytes({} bytes of {content_type})", bytes.len())
            }
            Body::Multipart(parts) => f.debug_list().entries(parts).finish(),
        }
    }
}

/// One field of a multipart form.
#[derive(Clone)]
#[non_exhaustive]
pub enum FormPart {
    /// A text field.
    Text {
        /// Field name.
        name: String,
        /// Field value.
        value: String,
    },
    /// A file field.
    File {
        /// Field name.
        name: String,
        /// The file's bytes.
        bytes: Bytes,
        /// The file name sent.
        file_name: String,
        /// The file's MIME type.
        mime_type: String,
    },
}

impl FormPart {
    /// A text field.
    pub fn text(name: impl Into<String>, value: impl Into<String>) -> Self {
        FormPart::Text {
            name: name.into(),
            value: value.into(),
        }
    }

    /// A file field.
    pub fn file(
        name: impl Into<String>,
        bytes: Bytes,
        file_name: impl Into<String>,
        mime_type: impl Into<String>,
    ) -> Self {
        FormPart::File {
            name: name.into(),
            bytes,
            file_name: file_name.into(),
            mime_type: mime_type.into(),
        }
    }
}

impl fmt::Debug for FormPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FormPart::Text { name, value } => write!(f, "{name}=({} bytes)", value.len()),
            FormPart::File {
                name,
                bytes,
                file_name,
                mime_type,
            } => write!(
                f,
                "{name}=file({file_name}, {mime_type}, {} bytes)",
                bytes.len()
            ),
        }
    }
}

/// An HTTP request as an adapter describes it. `Debug` shows no body and no secret header.
#[derive(Clone)]
pub struct HttpRequest {
    /// The method.
    pub method: Method,
    /// The full URL.
    pub url: Url,
    /// Headers; credentials are marked sensitive.
    pub headers: HeaderMap,
    /// The body.
    pub body: Body,
}

impl HttpRequest {
    /// A request with no headers and no body.
    pub fn new(method: Method, url: Url) -> Self {
        HttpRequest {
            method,
            url,
            headers: HeaderMap::new(),
            body: Body::Empty,
        }
    }

    /// A `POST` of `body` as JSON.
    ///
    /// # Errors
    ///
    /// `InvalidRequest` if `body` cannot be serialised.
    pub fn post_json(url: Url, body: &impl serde::Serialize) -> Result<Self> {
        let json = serde_json::to_vec(body).map_err(|e| {
            Error::new(
                ErrorKind::InvalidRequest,
                format!("cannot serialise request: {e}"),
            )
        })?;
        Ok(HttpRequest {
            body: Body::Json(Bytes::from(json)),
            ..Self::new(Method::POST, url)
        })
    }

    /// Adds a header.
    ///
    /// # Errors
    ///
    /// `InvalidRequest` if the value is not a valid header value.
    pub fn header(mut self, name: &'static str, value: &str) -> Result<Self> {
        let v = HeaderValue::from_str(value).map_err(|_| {
            Error::new(
                ErrorKind::InvalidRequest,
                format!("invalid value for header `{name}`"),
            )
        })?;
        self.headers.insert(HeaderName::from_static(name), v);
        Ok(self)
    }

    /// Adds a header holding a secret: marked sensitive, and an invalid value is reported
    /// without echoing it.
    ///
    /// # Errors
    ///
    /// `Auth` if the key contains characters a header cannot carry.
    pub fn secret_header(mut self, name: &'static str, value: &str) -> Result<Self> {
        let mut v = HeaderValue::from_str(value).map_err(|_| {
            Error::new(
                ErrorKind::Auth,
                format!(
                    "the key for header `{name}` contains characters not allowed in HTTP headers"
                ),
            )
        })?;
        v.set_sensitive(true);
        self.headers.insert(HeaderName::from_static(name), v);
        Ok(self)
    }

    /// The JSON body, if it is one (for tests and tracing of sizes).
    pub fn json_body(&self) -> Option<&[u8]> {
        match &self.body {
            Body::Json(b) => Some(b),
            _ => None,
        }
    }
}

impl fmt::Debug for HttpRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpRequest")
            .field("method", &self.method)
            .field("url", &self.url.as_str())
            .field("headers", &self.headers) // sensitive values print as `Sensitive`
            .field("body", &self.body)
            .finish()
    }
}

/// A complete response: status, headers and the body (at most the transport's cap).
#[derive(Clone)]
pub struct RawResponse {
    /// HTTP status.
    pub status: u16,
    /// Response headers.
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
}

impl RawResponse {
    /// A response (for tests and adapters' unit tests).
    pub fn new(status: u16, headers: HeaderMap, body: impl Into<Bytes>) -> Self {
        RawResponse {
            status,
            headers,
            body: body.into(),
        }
    }

    /// True for 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body as text (lossy), for error messages.
    pub fn text_lossy(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

impl fmt::Debug for RawResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawResponse")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .field("body_len", &self.body.len())
            .finish()
    }
}

/// A byte stream of a response body.
pub type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes>> + Send>>;

/// A successful response whose body is still arriving.
pub struct StreamingResponse {
    /// HTTP status (2xx).
    pub status: u16,
    /// Response headers.
    pub headers: HeaderMap,
    /// The body, piece by piece.
    pub body: ByteStream,
}

impl fmt::Debug for StreamingResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamingResponse")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

/// What a send returned: a streaming body for a 2xx, or the whole (error) response.
#[derive(Debug)]
pub enum Streamed {
    /// 2xx: the body streams.
    Ok(StreamingResponse),
    /// Not 2xx: the complete response, for classification.
    Err(RawResponse),
}

/// Transport settings.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TransportOptions {
    /// Time allowed to establish a connection.
    pub connect_timeout: Duration,
    /// Longest silence while waiting for or reading a response, on top of each send's
    /// overall `timeout`; `None` (the default) sets none. Each limit is a timer armed per
    /// request and per body, so one equal to the overall timeout only costs time.
    pub read_timeout: Option<Duration>,
    /// The overall timeout most sends pass (the client's request timeout). It is set once on
    /// the HTTP client, so a send with exactly this timeout carries no per-request setting;
    /// any other timeout still applies. `None`: every send carries its own.
    pub usual_timeout: Option<Duration>,
    /// Largest response body read; a longer one is a `Decode` error.
    pub max_response_bytes: usize,
}

impl Default for TransportOptions {
    fn default() -> Self {
        TransportOptions {
            connect_timeout: Duration::from_secs(10),
            read_timeout: None,
            usual_timeout: None,
            max_response_bytes: 8 << 20,
        }
    }
}

/// Sends [`HttpRequest`]s. Cheap to clone (reqwest's client is an `Arc`).
#[derive(Clone, Debug)]
pub struct Transport {
    client: reqwest::Client,
    max_body: usize,
    usual_timeout: Option<Duration>,
}

impl Transport {
    /// A transport with the given settings.
    ///
    /// # Errors
    ///
    /// `Config` if the TLS backend cannot be initialised.
    pub fn new(opts: &TransportOptions) -> Result<Self> {
        let mut builder = reqwest::Client::builder().connect_timeout(opts.connect_timeout);
        if let Some(t) = opts.read_timeout {
            builder = builder.read_timeout(t);
        }
        if let Some(t) = opts.usual_timeout {
            builder = builder.timeout(t);
        }
        let client = builder
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("llm-failover/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::config(format!("cannot build the HTTP client: {e}")))?;
        Ok(Transport {
            client,
            max_body: opts.max_response_bytes,
            usual_timeout: opts.usual_timeout,
        })
    }

    /// Starts sending `req` as it is: its header map becomes the request's (no merge), its
    /// body is moved in; only a multipart form goes through reqwest's builder (it writes the
    /// boundary into the content type). Not `async`: the request is handed over here, and
    /// what the caller awaits is reqwest's own (boxed) future, not a copy of the request.
    fn start(
        &self,
        req: HttpRequest,
        timeout: Duration,
    ) -> Result<impl Future<Output = reqwest::Result<reqwest::Response>>> {
        let payload = match req.body {
            Body::Multipart(parts) => {
                let r = self
                    .client
                    .request(req.method, req.url)
                    .headers(req.headers)
                    .multipart(build_form(parts))
                    .build()
                    .map_err(map_err)?;
                return Ok(self.execute(r, timeout));
            }
            Body::Empty => None,
            Body::Json(bytes) => Some((HeaderValue::from_static("application/json"), bytes)),
            Body::Bytes {
                bytes,
                content_type,
            } => {
                let ct = HeaderValue::from_str(&content_type).map_err(|_| {
                    Error::new(
                        ErrorKind::InvalidRequest,
                        format!("`{content_type}` is not a valid Content-Type"),
                    )
                })?;
                Some((ct, bytes))
            }
        };
        let mut r = reqwest::Request::new(req.method, req.url);
        *r.headers_mut() = req.headers;
        if let Some((content_type, bytes)) = payload {
            r.headers_mut().insert(CONTENT_TYPE, content_type);
            *r.body_mut() = Some(bytes.into());
        }
        Ok(self.execute(r, timeout))
    }

    /// Hands `r` to reqwest, with `timeout` set on it unless it is the client's own.
    fn execute(
        &self,
        mut r: reqwest::Request,
        timeout: Duration,
    ) -> impl Future<Output = reqwest::Result<reqwest::Response>> {
        if self.usual_timeout != Some(timeout) {
            *r.timeout_mut() = Some(timeout);
        }
        self.client.execute(r)
    }

    /// Sends `req` and reads the whole response within `timeout`.
    ///
    /// # Errors
    ///
    /// `Timeout`, `Connect`, `Decode` (body over the cap), `Config` (a redirect).
    pub fn send(
        &self,
        req: HttpRequest,
        timeout: Duration,
    ) -> impl Future<Output = Result<RawResponse>> + Send + 'static {
        // The request is handed to reqwest before the first poll: the future keeps only
        // reqwest's (boxed) one and the body cap, not a copy of the request (an `async fn`
        // would hold its arguments to the end).
        let started = self.start(req, timeout);
        let cap = self.max_body;
        async move {
            let mut resp = started?.await.map_err(map_err)?;
            let status = not_redirected(&resp)?;
            let body = read_capped(&mut resp, cap).await?;
            // Taken, not cloned, once the body is read (the future does not carry them
            // across that wait).
            let headers = std::mem::take(resp.headers_mut());
            Ok(RawResponse {
                status,
                headers,
                body,
            })
        }
    }

    /// Sends `req`; a 2xx body streams (bounded by `timeout` as a whole), anything else is
    /// read completely.
    ///
    /// # Errors
    ///
    /// As [`send`](Self::send).
    pub fn send_streaming(
        &self,
        req: HttpRequest,
        timeout: Duration,
    ) -> impl Future<Output = Result<Streamed>> + Send + 'static {
        let started = self.start(req, timeout);
        let cap = self.max_body;
        async move {
            let mut resp = started?.await.map_err(map_err)?;
            let status = not_redirected(&resp)?;
            let headers = resp.headers().clone();
            if !(200..300).contains(&status) {
                let body = read_capped(&mut resp, cap).await?;
                return Ok(Streamed::Err(RawResponse {
                    status,
                    headers,
                    body,
                }));
            }
            let body = resp.bytes_stream().map(|r| r.map_err(map_err)).boxed();
            Ok(Streamed::Ok(StreamingResponse {
                status,
                headers,
                body,
            }))
        }
    }
}

fn build_form(parts: Vec<FormPart>) -> reqwest::multipart::Form {
    parts
        .into_iter()
        .fold(reqwest::multipart::Form::new(), |form, part| match part {
            FormPart::Text { name, value } => form.text(name, value),
            FormPart::File {
                name,
                bytes,
                file_name,
                mime_type,
            } => {
                let part = |b: Bytes| {
                    let len = b.len() as u64;
                    reqwest::multipart::Part::stream_with_length(b, len)
                        .file_name(file_name.clone())
                };
                // An unparseable MIME type is sent without one rather than failing the send.
                let p = part(bytes.clone())
                    .mime_str(&mime_type)
                    .unwrap_or_else(|_| part(bytes));
                form.part(name, p)
            }
        })
}

/// The response's status, or a `Config` error for a redirect (never followed).
fn not_redirected(resp: &reqwest::Response) -> Result<u16> {
    let status = resp.status().as_u16();
    if (300..400).contains(&status) {
        let to = resp
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("?");
        return Err(Error::config(format!(
            "the provider answered {status} redirecting to `{to}`; redirects are not followed \
             (a key must never travel to another host): fix `base_url`"
        ))
        .with_status(status));
    }
    Ok(status)
}

async fn read_capped(resp: &mut reqwest::Response, cap: usize) -> Result<Bytes> {
    if let Some(len) = resp.content_length() {
        if len > cap as u64 {
            return Err(too_big(resp.status().as_u16(), cap));
        }
    }
    // The common case — a small body in one piece — is returned as it came, uncopied.
    let Some(first) = resp.chunk().await.map_err(map_err)? else {
        return Ok(Bytes::new());
    };
    if first.len() > cap {
        return Err(too_big(resp.status().as_u16(), cap));
    }
    let Some(second) = resp.chunk().await.map_err(map_err)? else {
        return Ok(first);
    };
    let mut buf = BytesMut::with_capacity(first.len() + second.len());
    buf.extend_from_slice(&first);
    let mut next = Some(second);
    while let Some(chunk) = next {
        if buf.len() + chunk.len() > cap {
            return Err(too_big(resp.status().as_u16(), cap));
        }
        buf.extend_from_slice(&chunk);
        next = resp.chunk().await.map_err(map_err)?;
    }
    Ok(buf.freeze())
}

fn too_big(status: u16, cap: usize) -> Error {
    Error::decode(format!("response body larger than the {cap}-byte cap")).with_status(status)
}

fn map_err(e: reqwest::Error) -> Error {
    let kind = if e.is_timeout() {
        ErrorKind::Timeout
    } else {
        ErrorKind::Connect
    };
    let what = if e.is_timeout() {
        "request timed out"
    } else if e.is_connect() {
        "could not connect"
    } else if e.is_body() || e.is_decode() {
        "connection lost while reading the response"
    } else {
        "transport error"
    };
    // reqwest's message may contain the URL; it never contains headers.
    let detail = std::error::Error::source(&e)
        .map(|s| s.to_string())
        .unwrap_or_default();
    let msg = if detail.is_empty() {
        what.to_owned()
    } else {
        format!("{what}: {detail}")
    };
    Error::new(kind, msg).with_source(e.without_url())
}
