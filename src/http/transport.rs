//! [`HttpTransport`]: the transport over reqwest (rustls), the one place that awaits it.

use std::future::Future;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::future::BoxFuture;
use futures_util::{FutureExt, StreamExt};
use reqwest::header::{HeaderValue, CONTENT_TYPE};

use super::{Body, FormPart, HttpRequest, RawResponse, Streamed, StreamingResponse, Transport};
use crate::error::{Error, ErrorKind, Result};

/// Settings of an [`HttpTransport`].
#[derive(Clone, Debug)]
#[non_exhaustive]
#[cfg_attr(feature = "test-util", visibility::make(pub))]
pub(crate) struct TransportOptions {
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

/// Sends [`HttpRequest`]s with reqwest. Cheap to clone (reqwest's client is an `Arc`).
#[derive(Clone, Debug)]
#[cfg_attr(feature = "test-util", visibility::make(pub))]
pub(crate) struct HttpTransport {
    client: reqwest::Client,
    max_body: usize,
    usual_timeout: Option<Duration>,
}

impl HttpTransport {
    /// A transport with the given settings.
    ///
    /// # Errors
    ///
    /// `Config` if the TLS backend cannot be initialised.
    #[cfg_attr(feature = "test-util", visibility::make(pub))]
    pub(crate) fn new(opts: &TransportOptions) -> Result<Self> {
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
        Ok(HttpTransport {
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

    /// Sends `req` and reads the whole response within `timeout` (see [`Transport::send`]).
    fn whole(
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

    /// Sends `req`; a 2xx body streams (see [`Transport::send_streaming`]).
    fn streaming(
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

impl Transport for HttpTransport {
    fn send(&self, req: HttpRequest, timeout: Duration) -> BoxFuture<'static, Result<RawResponse>> {
        self.whole(req, timeout).boxed()
    }

    fn send_streaming(
        &self,
        req: HttpRequest,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<Streamed>> {
        self.streaming(req, timeout).boxed()
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
