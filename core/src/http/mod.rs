//! What an adapter hands over and gets back: an [`HttpRequest`] it builds (a plain
//! description, cheap to clone and send again on retries and failover) and the
//! [`RawResponse`] it parses (status, headers, the body read up to a size cap).
//!
//! The client sends requests with reqwest — a client it builds (TLS from the `rustls` or
//! `native-tls` feature), or the caller's own (`ClientBuilder::http_client`) — with a total
//! timeout on every call; transport failures are `Timeout` or `Connect` errors. Redirects are
//! never followed, so a key never travels to another host: a 3xx is reported as a
//! configuration problem.
//!
//! # Examples
//!
//! Both halves of an exchange, without the network in between: the request an adapter
//! builds, and the response it is given back.
//!
//! ```
//! use reqwest::header::HeaderMap;
//! use llm_failover::http::{Body, HttpRequest, RawResponse};
//! use llm_failover::provider::{openai::OpenAi, Provider, RequestContext};
//! use llm_failover::{ChatRequest, Credential, ProviderId};
//!
//! let local = OpenAi::new(ProviderId::new("local"), "http://127.0.0.1:11434/v1".parse()?);
//! let key = Credential::new("sk-local");
//! let req: HttpRequest =
//!     local.chat_request(&ChatRequest::from_prompt("Hi"), &RequestContext::new("llama3.2", Some(&key)))?;
//! assert_eq!(req.url.as_str(), "http://127.0.0.1:11434/v1/chat/completions");
//! assert!(matches!(req.body, Body::Json(_)));
//! let again = req.clone(); // what a retry sends
//! assert_eq!(again.json_body(), req.json_body());
//!
//! let raw = RawResponse::new(
//!     200,
//!     HeaderMap::new(),
//!     r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"Hello!"},"finish_reason":"stop"}]}"#,
//! );
//! assert!(raw.is_success());
//! assert_eq!(local.chat_response(raw, "llama3.2")?.text, "Hello!");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod request;
#[cfg(any(test, feature = "test-util"))]
mod scripted;
mod transport;

pub use request::{Body, FormPart, HttpRequest, RawResponse};
#[cfg_attr(feature = "test-util", visibility::make(pub))]
#[cfg_attr(not(feature = "test-util"), allow(unused_imports))]
pub(crate) use request::{ByteStream, Streamed, StreamingResponse};
#[cfg(any(test, feature = "test-util"))]
pub use scripted::{Script, ScriptedTransport};
pub(crate) use transport::ClientChoice;
#[cfg_attr(feature = "test-util", visibility::make(pub))]
#[cfg_attr(not(feature = "test-util"), allow(unused_imports))]
pub(crate) use transport::{HttpTransport, TransportOptions};

use std::fmt;
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::error::Result;

/// Sends [`HttpRequest`]s: the crate's one seam to the network.
///
/// [`HttpTransport`] (reqwest) serves every client; tests script one
/// ([`ScriptedTransport`], feature `test-util`) to drive the router without sockets.
#[cfg_attr(feature = "test-util", visibility::make(pub))]
pub(crate) trait Transport: Send + Sync + fmt::Debug {
    /// Sends `req` and reads the whole response within `timeout`.
    ///
    /// # Errors
    ///
    /// `Timeout`, `Connect`, `Decode` (a body over the cap), `Config` (a redirect).
    fn send(&self, req: HttpRequest, timeout: Duration) -> BoxFuture<'static, Result<RawResponse>>;

    /// Sends `req`; a 2xx body streams (bounded by `timeout` as a whole), anything else is
    /// read whole.
    ///
    /// # Errors
    ///
    /// As [`send`](Self::send).
    fn send_streaming(
        &self,
        req: HttpRequest,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<Streamed>>;
}

fn _obj_safe(_: &dyn Transport) {}
