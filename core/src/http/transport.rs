//! [`HttpTransport`]: the transport over reqwest, the one place that awaits it — with a client
//! it builds (TLS from the `rustls` or `native-tls` feature) or the caller's own.

use std::future::Future;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::future::BoxFuture;
use futures_util::{FutureExt, StreamExt};
use reqwest::header::{CONTENT_TYPE, HeaderValue, USER_AGENT};
use url::Url;

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
    /// The `User-Agent` header. `None` (the default): `llm-failover/<version>` on a client the
    /// transport builds, and none of its own on a caller's client (whose default headers then
    /// apply). A value set here is sent with a caller's client too, in place of its default.
    pub user_agent: Option<HeaderValue>,
}

impl Default for TransportOptions {
    fn default() -> Self {
        TransportOptions {
            connect_timeout: Duration::from_secs(10),
            read_timeout: None,
            usual_timeout: None,
            max_response_bytes: 8 << 20,
            user_agent: None,
        }
    }
}

/// Whether a client the transport builds can speak TLS.
const TLS: bool = cfg!(any(feature = "rustls", feature = "native-tls"));

/// The user agent of a client the transport builds when none is configured.
const DEFAULT_USER_AGENT: &str = concat!("llm-failover/", env!("CARGO_PKG_VERSION"));

/// How a client's builder chose to reach the network: a `reqwest::Client` of the caller's
/// (`None`: one built from the policy) and a user agent (`None`: see
/// [`TransportOptions::user_agent`]). Ignored when a [`Transport`] is injected.
#[derive(Clone, Debug, Default)]
pub(crate) struct ClientChoice {
    pub(crate) client: Option<reqwest::Client>,
    pub(crate) user_agent: Option<String>,
}

impl ClientChoice {
    /// The transport this choice makes with `opts` (the policy's settings).
    ///
    /// # Errors
    ///
    /// `Config` if the user agent is not a valid header value or the client cannot be built.
    pub(crate) fn transport(self, mut opts: TransportOptions) -> Result<HttpTransport> {
        if let Some(ua) = self.user_agent {
            opts.user_agent = Some(HeaderValue::try_from(ua).map_err(|_| {
                Error::config("the user agent is not a valid header value (visible ASCII only)")
            })?);
        }
        match self.client {
            Some(client) => Ok(HttpTransport::from_client(client, &opts)),
            None => HttpTransport::new(&opts),
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
    /// Set on each request (a caller's client: its own default is only a default).
    user_agent: Option<HeaderValue>,
    /// A caller's client may follow redirects: each response's URL is checked.
    check_redirects: bool,
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
        let user_agent = opts
            .user_agent
            .clone()
            .unwrap_or_else(|| HeaderValue::from_static(DEFAULT_USER_AGENT));
        let client = builder
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(user_agent)
            .build()
            .map_err(|e| Error::config(format!("cannot build the HTTP client: {e}")))?;
        Ok(HttpTransport {
            client,
            max_body: opts.max_response_bytes,
            usual_timeout: opts.usual_timeout,
            user_agent: None,
            check_redirects: false,
        })
    }

    /// A transport over the caller's `client`: its proxies, root certificates, default
    /// headers and connection pool apply; from `opts`, the body cap and the user agent (when
    /// set) do. Every send carries its own timeout, so each attempt stays bounded whatever
    /// the client's; the connect and read timeouts are the client's own (`opts`' are not
    /// applied). A header the request sets (a key, the content type) replaces the client's
    /// default of that name.
    ///
    /// Build `client` with `redirect(reqwest::redirect::Policy::none())`: reqwest follows
    /// redirects by default and drops only `Authorization` on the way, so a key sent in
    /// another header would travel to the redirect's host. A response that arrived by
    /// following a redirect is refused (`Config`), but by then the request was sent there.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::http::{HttpTransport, TransportOptions};
    /// use reqwest::header::{HeaderMap, HeaderValue};
    ///
    /// let mut headers = HeaderMap::new();
    /// headers.insert("x-team", HeaderValue::from_static("research"));
    /// let client = reqwest::Client::builder()
    ///     .default_headers(headers)
    ///     .redirect(reqwest::redirect::Policy::none())
    ///     .build()?;
    /// let transport = HttpTransport::from_client(client, &TransportOptions::default());
    /// # let _ = transport;
    /// # Ok::<(), reqwest::Error>(())
    /// ```
    #[cfg_attr(feature = "test-util", visibility::make(pub))]
    pub(crate) fn from_client(client: reqwest::Client, opts: &TransportOptions) -> Self {
        HttpTransport {
            client,
            max_body: opts.max_response_bytes,
            usual_timeout: None,
            user_agent: opts.user_agent.clone(),
            check_redirects: true,
        }
    }

    /// Starts sending `req` as it is: its header map becomes the request's (no merge), its
    /// body is moved in; only a multipart form goes through reqwest's builder (it writes the
    /// boundary into the content type). Not `async`: the request is handed over here, and
    /// what the caller awaits is reqwest's own (boxed) future, not a copy of the request.
    fn start(
        &self,
        mut req: HttpRequest,
        timeout: Duration,
    ) -> Result<impl Future<Output = reqwest::Result<reqwest::Response>> + use<>> {
        if let Some(ua) = &self.user_agent {
            req.headers.entry(USER_AGENT).or_insert_with(|| ua.clone());
        }
        // A client of ours built without a TLS backend cannot speak https: say so, rather than
        // fail over on what would look like a connection error.
        if !TLS && !self.check_redirects && req.url.scheme() == "https" {
            return Err(Error::config(format!(
                "`{}` is https, and llm-failover was built without TLS: enable its `rustls` or \
                 `native-tls` feature, or bring a reqwest::Client (ClientBuilder::http_client)",
                without_query(&req.url)
            )));
        }
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
    ) -> impl Future<Output = reqwest::Result<reqwest::Response>> + use<> {
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
    ) -> impl Future<Output = Result<RawResponse>> + Send + 'static + use<> {
        // The request is handed to reqwest before the first poll: the future keeps only
        // reqwest's (boxed) one and the body cap, not a copy of the request (an `async fn`
        // would hold its arguments to the end).
        let sent_to = self.check_redirects.then(|| req.url.clone());
        let started = self.start(req, timeout);
        let cap = self.max_body;
        async move {
            let mut resp = started?.await.map_err(map_err)?;
            let status = not_redirected(&resp, sent_to.as_ref())?;
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
    ) -> impl Future<Output = Result<Streamed>> + Send + 'static + use<> {
        let sent_to = self.check_redirects.then(|| req.url.clone());
        let started = self.start(req, timeout);
        let cap = self.max_body;
        async move {
            let mut resp = started?.await.map_err(map_err)?;
            let status = not_redirected(&resp, sent_to.as_ref())?;
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

/// The response's status, or a `Config` error for a redirect (never followed), or for a
/// response from elsewhere than `sent_to` (a caller's client that followed one).
fn not_redirected(resp: &reqwest::Response, sent_to: Option<&Url>) -> Result<u16> {
    let status = resp.status().as_u16();
    if let Some(sent_to) = sent_to.filter(|u| *u != resp.url()) {
        return Err(Error::config(format!(
            "the HTTP client followed a redirect from `{}` to `{}`; a key must never travel to \
             another host: build the reqwest::Client with redirect::Policy::none(), and fix \
             `base_url`",
            without_query(sent_to),
            without_query(resp.url()),
        ))
        .with_status(status));
    }
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

/// `url` without its query and fragment (where a key could be).
fn without_query(url: &Url) -> String {
    let mut u = url.clone();
    u.set_query(None);
    u.set_fragment(None);
    u.to_string()
}

async fn read_capped(resp: &mut reqwest::Response, cap: usize) -> Result<Bytes> {
    if let Some(len) = resp.content_length()
        && len > cap as u64
    {
        return Err(too_big(resp.status().as_u16(), cap));
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
    let err = Error::new(kind, msg);
    let err = if e.is_connect() {
        err.undelivered()
    } else {
        err
    };
    err.with_source(e.without_url())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn without_tls_an_https_url_is_a_config_error_not_a_connection_failure() {
        let t = HttpTransport::new(&TransportOptions::default()).unwrap();
        let req = HttpRequest::new(
            reqwest::Method::GET,
            "https://127.0.0.1:9/v1/models?key=secret".parse().unwrap(),
        );
        let result = t.send(req, Duration::from_secs(1)).await;
        if TLS {
            // Built with TLS: it tries (nothing listens there).
            assert_eq!(result.unwrap_err().kind(), ErrorKind::Connect);
        } else {
            let e = result.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Config, "{e}");
            assert!(e.to_string().contains("rustls"), "{e}");
            assert!(!e.to_string().contains("secret"), "{e}");
        }
    }
}
