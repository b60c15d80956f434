//! The one place that performs HTTP I/O.
//!
//! Adapters build an [`HttpRequest`] (a plain description, cheap to clone and re-send);
//! [`Transport`] sends it with reqwest and returns a [`RawResponse`] (status, headers, body
//! read up to a size cap) or, for streams, a [`StreamingResponse`]. Transport failures map
//! to [`ErrorKind::Timeout`] or [`ErrorKind::Connect`]. Redirects are never followed, so a
//! key never travels to another host; a 3xx is reported as a configuration problem.

mod request;
#[cfg(any(test, feature = "test-util"))]
mod scripted;
mod transport;

pub use request::{
    Body, ByteStream, FormPart, HttpRequest, RawResponse, Streamed, StreamingResponse,
};
#[cfg(any(test, feature = "test-util"))]
pub use scripted::{Script, ScriptedTransport};
#[cfg_attr(feature = "test-util", visibility::make(pub))]
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
