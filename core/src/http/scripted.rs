//! [`ScriptedTransport`]: answers from a script instead of the network (feature `test-util`).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::{BoxFuture, ready};
use futures_util::{FutureExt, StreamExt};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use super::{HttpRequest, RawResponse, Streamed, StreamingResponse, Transport};
use crate::error::{Error, ErrorKind, Result};

/// One scripted answer.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Script {
    /// A whole response (streamed requests get it as a stream when it is a 2xx).
    Reply(RawResponse),
    /// The send fails before any response: `Timeout` or `Connect`.
    Fail(ErrorKind),
    /// The server never answers: the send takes its whole timeout (on the tokio clock, so a
    /// test on paused time sees it at once), then fails with `Timeout`.
    Hang,
}

impl Script {
    /// A response of `status` with a JSON `body`.
    pub fn json(status: u16, body: impl Into<String>) -> Self {
        let mut headers = HeaderMap::new();
        headers.insert(
            reqwest::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Script::Reply(RawResponse::new(status, headers, Bytes::from(body.into())))
    }

    /// The same answer with one more header.
    ///
    /// # Panics
    ///
    /// When `name` or `value` is not a valid header (a mistake in the test).
    #[must_use]
    pub fn header(mut self, name: &str, value: &str) -> Self {
        if let Script::Reply(r) = &mut self {
            r.headers.append(
                HeaderName::try_from(name).expect("a valid header name"),
                HeaderValue::try_from(value).expect("a valid header value"),
            );
        }
        self
    }
}

#[derive(Debug, Default)]
struct State {
    /// Answers per host, in order.
    scripts: HashMap<String, VecDeque<Script>>,
    /// Every request sent, in order: (host, request).
    sent: Vec<(String, HttpRequest)>,
    /// The timeout each send was given, in order: (host, timeout).
    timeouts: Vec<(String, Duration)>,
}

/// A [`Transport`] whose answers are scripted per host: the router's tests drive every path
/// (failover, throttling, breakers) with it, no socket involved. Cloning shares the script.
///
/// A request to a host with no answer left fails with a `Connect` error naming the host, so
/// a test that sends more than it scripted fails visibly.
#[derive(Clone, Debug, Default)]
pub struct ScriptedTransport {
    state: Arc<Mutex<State>>,
}

impl ScriptedTransport {
    /// A transport with nothing scripted.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `script` as the next answer of `host`.
    pub fn push(&self, host: &str, script: Script) -> &Self {
        self.state()
            .scripts
            .entry(host.to_owned())
            .or_default()
            .push_back(script);
        self
    }

    /// How many requests went to `host`.
    pub fn count(&self, host: &str) -> usize {
        self.state().sent.iter().filter(|(h, _)| h == host).count()
    }

    /// The requests sent to `host`, in order.
    pub fn requests(&self, host: &str) -> Vec<HttpRequest> {
        self.state()
            .sent
            .iter()
            .filter(|(h, _)| h == host)
            .map(|(_, r)| r.clone())
            .collect()
    }

    /// The hosts of every request, in the order sent.
    pub fn hosts(&self) -> Vec<String> {
        self.state().sent.iter().map(|(h, _)| h.clone()).collect()
    }

    /// The timeouts the sends to `host` were given, in order.
    pub fn timeouts(&self, host: &str) -> Vec<Duration> {
        let state = self.state();
        state
            .timeouts
            .iter()
            .filter(|(h, _)| h == host)
            .map(|(_, t)| *t)
            .collect()
    }

    fn next(&self, req: HttpRequest, timeout: Duration) -> BoxFuture<'static, Result<RawResponse>> {
        let host = req.url.host_str().unwrap_or_default().to_owned();
        let mut state = self.state();
        let script = state.scripts.get_mut(&host).and_then(VecDeque::pop_front);
        state.sent.push((host.clone(), req));
        state.timeouts.push((host.clone(), timeout));
        let answer = match script {
            Some(Script::Reply(r)) => Ok(r),
            Some(Script::Fail(kind)) => Err(Error::new(kind, "scripted transport failure")),
            Some(Script::Hang) => {
                // The transport's own timer, as reqwest's timeout is: tokio's (paused in the
                // router's tests), not the client's clock.
                #[allow(clippy::disallowed_methods)]
                return async move {
                    tokio::time::sleep(timeout).await;
                    Err(Error::new(
                        ErrorKind::Timeout,
                        format!("scripted hang: no answer within {timeout:?}"),
                    ))
                }
                .boxed();
            }
            None => Err(Error::new(
                ErrorKind::Connect,
                format!("the script for `{host}` has no answer left"),
            )),
        };
        ready(answer).boxed()
    }
}

impl Transport for ScriptedTransport {
    fn send(&self, req: HttpRequest, timeout: Duration) -> BoxFuture<'static, Result<RawResponse>> {
        self.next(req, timeout)
    }

    fn send_streaming(
        &self,
        req: HttpRequest,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<Streamed>> {
        let answer = self.next(req, timeout).map(|raw| {
            raw.map(|raw| {
                if raw.is_success() {
                    let body = futures_util::stream::iter([Ok::<_, Error>(raw.body)]).boxed();
                    Streamed::Ok(StreamingResponse {
                        status: raw.status,
                        headers: raw.headers,
                        body,
                    })
                } else {
                    Streamed::Err(raw)
                }
            })
        });
        answer.boxed()
    }
}
