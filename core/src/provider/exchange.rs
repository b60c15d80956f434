//! One attempt against one provider: build, send, read, classify.
//!
//! The router calls these for every attempt; adapter tests call them directly to drive an
//! adapter over real HTTP. They never retry and never wait beyond the attempt's timeout.

// Internal: reachable from outside only with the `test-util` feature (tests, benches and
// fuzzers); without it every `pub` here is crate-private.
#![cfg_attr(not(feature = "test-util"), allow(unreachable_pub, dead_code))]

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::future::{Either, ready};
use futures_util::{FutureExt, Stream};
use tokio::time::Instant;

use super::bulk::{BulkReply, BulkStep};
use super::{FrameParser, Provider, RequestContext, StreamDecoder, extra};
use crate::clock::Now;
use crate::error::{Error, ErrorKind, Result};
use crate::http::{ByteStream, RawResponse, Streamed, Transport};
use crate::id::ProviderId;
use crate::ratelimit::LimitReport;
use crate::types::{
    ChatChunk, ChatRequest, ChatResponse, EmbeddingRequest, EmbeddingResponse, Transcript,
    TranscriptionRequest, count_mismatch,
};

/// The result of one attempt and the limits its response stated (`None` when no response
/// arrived: connection error, timeout).
#[derive(Debug)]
pub struct Exchange<T> {
    /// The answer or the classified error.
    pub result: Result<T>,
    /// The rate-limit report read from the response headers: `None` when no response
    /// arrived (connection error, timeout) or when it stated nothing. Boxed: most responses
    /// state nothing, and an attempt's result is moved through several futures.
    pub report: Option<Box<LimitReport>>,
    /// False when the request could not even be built: nothing went out.
    pub sent: bool,
}

fn finish<T>(
    provider: &dyn Provider,
    ctx: &RequestContext<'_>,
    now: Now,
    raw: Result<RawResponse>,
    parse: impl FnOnce(RawResponse) -> Result<T>,
) -> Exchange<T> {
    let raw = match raw {
        Ok(raw) => raw,
        Err(e) => {
            return Exchange {
                result: Err(decorate(e, provider, ctx, None)),
                report: None,
                sent: true,
            };
        }
    };
    let request_id = provider.request_id(&raw.headers);
    let status = raw.status;
    let (result, report) = if raw.is_success() {
        let report = provider.limit_report(&raw.headers, now);
        (parse(raw), report)
    } else {
        let report = provider.error_limit_report(&raw, now);
        (Err(provider.error(&raw, now)), report)
    };
    Exchange {
        result: result.map_err(|e| {
            let e = e.with_request_id(request_id);
            let e = if e.status().is_none() {
                e.with_status(status)
            } else {
                e
            };
            let e = decorate(e, provider, ctx, Some(&report));
            throttling(e, &report, now.instant)
        }),
        report: stated(report),
        sent: true,
    }
}

/// A report worth keeping: one that states something.
fn stated(report: LimitReport) -> Option<Box<LimitReport>> {
    (!report.is_empty()).then(|| Box::new(report))
}

/// Adds provider, model and limits to an error and removes the key from its message.
fn decorate(
    mut e: Error,
    provider: &dyn Provider,
    ctx: &RequestContext<'_>,
    report: Option<&LimitReport>,
) -> Error {
    if e.provider().is_none() {
        e = e.with_provider(provider.id().clone());
    }
    if e.model().is_none() {
        e = e.with_model(ctx.model);
    }
    if let Some(r) = report {
        if e.retry_after().is_none() {
            e = e.with_retry_after(r.retry_after);
        }
        if e.should_retry().is_none() {
            e = e.with_should_retry(r.should_retry);
        }
    }
    if let Some(c) = ctx.credential {
        for secret in c.secrets() {
            e = e.scrub(secret);
        }
    }
    e
}

/// A stated wait at least this long is not a rate limit to wait out but an allowance used
/// up: a 429 that says "come back in an hour or more" (a `Retry-After: 86400`, "Please retry
/// after 86400 seconds", a per-day window at 0 until midnight) is
/// [`QuotaExhausted`](ErrorKind::QuotaExhausted), as DESIGN.md's "not every 429 is a short
/// wait" asks. An hour: longer than any per-minute or per-10-minute window a provider
/// documents, shorter than any daily one.
pub(crate) const LONG_TERM: Duration = Duration::from_secs(3600);

/// What a throttled answer means once its stated wait is known: the error's own delay, else
/// the reset of a window the same response states at 0 (OpenRouter's per-day free-model
/// limit arrives as `X-RateLimit-Remaining: 0` and a reset at midnight, without any delay).
fn throttling(e: Error, report: &LimitReport, now: Instant) -> Error {
    if !matches!(e.kind(), ErrorKind::RateLimited | ErrorKind::QuotaExhausted) {
        return e;
    }
    let delay = e.retry_after().or_else(|| {
        report
            .exhausted_until()
            .map(|at| at.saturating_duration_since(now))
            .filter(|d| !d.is_zero())
    });
    let kind = throttle_kind(e.kind(), delay);
    e.with_retry_after(delay).with_kind(kind)
}

/// The kind of a throttled answer whose stated wait is `delay` (a pure rule: see
/// [`LONG_TERM`]).
fn throttle_kind(kind: ErrorKind, delay: Option<Duration>) -> ErrorKind {
    match (kind, delay) {
        (ErrorKind::RateLimited, Some(d)) if d >= LONG_TERM => ErrorKind::QuotaExhausted,
        (kind, _) => kind,
    }
}

/// An exchange that failed before anything was sent (the request could not be built).
fn unsent<T>(e: Error, provider: &dyn Provider, ctx: &RequestContext<'_>) -> Exchange<T> {
    Exchange {
        result: Err(decorate(e, provider, ctx, None)),
        report: None,
        sent: false,
    }
}

/// Sends one chat request and reads the whole answer.
///
/// The request is built and handed to the transport when this is called; the future only
/// awaits the answer and reads it (it holds neither `req` nor a copy of the request, and is
/// no `async fn` state machine keeping its arguments twice).
#[cfg_attr(feature = "test-util", visibility::make(pub))]
pub(crate) fn chat_once<'a>(
    provider: &'a dyn Provider,
    transport: &dyn Transport,
    req: &ChatRequest,
    ctx: RequestContext<'a>,
    timeout: Duration,
    now: impl Fn() -> Now + Send + 'a,
) -> impl Future<Output = Exchange<ChatResponse>> + Send + 'a {
    let built = provider
        .chat_request(req, &ctx)
        .and_then(|http| extra::apply(http, ctx.extra_body, &req.extra_body))
        .and_then(|http| provider.finish(http, &ctx, now()));
    send_whole(
        provider,
        transport,
        built,
        ctx,
        timeout,
        now,
        |p, raw, model| p.chat_response(raw, model),
    )
}

/// Sends one transcription request and reads the whole answer.
///
/// Built and handed to the transport when called, as [`chat_once`].
#[cfg_attr(feature = "test-util", visibility::make(pub))]
pub(crate) fn transcribe_once<'a>(
    provider: &'a dyn Provider,
    transport: &dyn Transport,
    req: &TranscriptionRequest,
    ctx: RequestContext<'a>,
    timeout: Duration,
    now: impl Fn() -> Now + Send + 'a,
) -> impl Future<Output = Exchange<Transcript>> + Send + 'a {
    let built = provider
        .transcription_request(req, &ctx)
        .and_then(|http| provider.finish(http, &ctx, now()));
    send_whole(
        provider,
        transport,
        built,
        ctx,
        timeout,
        now,
        |p, raw, model| p.transcription_response(raw, model),
    )
}

/// Sends one embedding request and reads the whole answer: one vector per input, or a
/// `Decode` error naming the provider.
///
/// Built and handed to the transport when called, as [`chat_once`]. The request's own extra
/// body is merged; the provider's (its chat requests') is not.
#[cfg_attr(feature = "test-util", visibility::make(pub))]
pub(crate) fn embed_once<'a>(
    provider: &'a dyn Provider,
    transport: &dyn Transport,
    req: &EmbeddingRequest,
    ctx: RequestContext<'a>,
    timeout: Duration,
    now: impl Fn() -> Now + Send + 'a,
) -> impl Future<Output = Exchange<EmbeddingResponse>> + Send + 'a {
    let built = req
        .check()
        .and_then(|()| provider.embedding_request(req, &ctx))
        .and_then(|http| extra::apply(http, None, &req.extra_body))
        .and_then(|http| provider.finish(http, &ctx, now()));
    let want = req.inputs.len();
    send_whole(
        provider,
        transport,
        built,
        ctx,
        timeout,
        now,
        move |p, raw, model| {
            let answer = p.embedding_response(raw, model)?;
            if answer.vectors.len() == want {
                Ok(answer)
            } else {
                Err(count_mismatch(p.id(), want, answer.vectors.len()))
            }
        },
    )
}

/// What one step of a remote batch got from the provider that holds the batch.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct BulkAnswer {
    pub(crate) provider: ProviderId,
    pub(crate) model: String,
    pub(crate) reply: BulkReply,
}

/// Sends one step of a remote batch ([`BulkApi::request`]) and reads its answer
/// ([`BulkApi::reply`]); a provider without a Batch API refuses it before sending.
///
/// Built and handed to the transport when called, as [`chat_once`].
pub(crate) fn bulk_once<'a>(
    provider: &'a dyn Provider,
    transport: &dyn Transport,
    step: &'a BulkStep,
    ctx: RequestContext<'a>,
    timeout: Duration,
    now: impl Fn() -> Now + Send + 'a,
) -> impl Future<Output = Exchange<BulkAnswer>> + Send + 'a {
    let built = provider
        .bulk()
        .ok_or_else(|| no_bulk(provider.id()))
        .and_then(|api| api.request(step, &ctx))
        .and_then(|http| provider.finish(http, &ctx, now()));
    send_whole(
        provider,
        transport,
        built,
        ctx,
        timeout,
        now,
        move |p, raw, model| {
            let api = p.bulk().ok_or_else(|| no_bulk(p.id()))?;
            Ok(BulkAnswer {
                provider: p.id().clone(),
                model: model.to_owned(),
                reply: api.reply(step, raw)?,
            })
        },
    )
}

/// The refusal of a bulk step to a provider without a Batch API.
pub(crate) fn no_bulk(id: &ProviderId) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!("provider `{id}` has no Batch API: its items go through the live lane"),
    )
    .with_provider(id.clone())
}

/// Hands a `built` request to the transport now; the future reads the whole answer and
/// `parse`s a 2xx body for the model in `ctx` (`parse` captures nothing: the future carries
/// no more than the provider, the context and the clock).
fn send_whole<'a, T: Send + 'a>(
    provider: &'a dyn Provider,
    transport: &dyn Transport,
    built: Result<crate::http::HttpRequest>,
    ctx: RequestContext<'a>,
    timeout: Duration,
    now: impl Fn() -> Now + Send + 'a,
    parse: impl FnOnce(&dyn Provider, RawResponse, &str) -> Result<T> + Send + 'a,
) -> impl Future<Output = Exchange<T>> + Send + 'a {
    match built {
        Ok(http) => Either::Left(transport.send(http, timeout).map(move |raw| {
            finish(provider, &ctx, now(), raw, |raw| {
                parse(provider, raw, ctx.model)
            })
        })),
        Err(e) => Either::Right(ready(unsent(e, provider, &ctx))),
    }
}

/// Opens a streamed chat answer. Errors before the first event (status, connection) come
/// back here; errors after it come out of the stream.
///
/// Built and handed to the transport when called, as [`chat_once`].
#[cfg_attr(feature = "test-util", visibility::make(pub))]
pub(crate) fn chat_stream_once<'a>(
    provider: &'a dyn Provider,
    transport: &dyn Transport,
    req: &ChatRequest,
    ctx: RequestContext<'a>,
    timeout: Duration,
    now: impl Fn() -> Now + Send + 'a,
) -> impl Future<Output = Exchange<ChunkStream>> + Send + 'a {
    let ctx = ctx.streaming();
    let built = provider
        .chat_request(req, &ctx)
        .and_then(|http| extra::apply(http, ctx.extra_body, &req.extra_body))
        .and_then(|http| provider.finish(http, &ctx, now()));
    let sending = match built {
        Ok(http) => transport.send_streaming(http, timeout),
        Err(e) => return Either::Right(ready(unsent(e, provider, &ctx))),
    };
    Either::Left(sending.map(move |sent| match sent {
        Err(e) => Exchange {
            result: Err(decorate(e, provider, &ctx, None)),
            report: None,
            sent: true,
        },
        Ok(Streamed::Err(raw)) => finish(provider, &ctx, now(), Ok(raw), |_| {
            Err(Error::decode(
                "unreachable: error response parsed as a stream",
            ))
        }),
        Ok(Streamed::Ok(resp)) => {
            let now = now();
            let report = provider.limit_report(&resp.headers, now);
            let err_ctx = ErrorContext {
                provider: provider.id().clone(),
                model: ctx.model.to_owned(),
                status: resp.status,
                request_id: provider.request_id(&resp.headers),
                secrets: ctx
                    .credential
                    .map(|c| c.secrets().map(str::to_owned).collect())
                    .unwrap_or_default(),
            };
            Exchange {
                result: Ok(ChunkStream {
                    body: resp.body,
                    parser: provider.frames(),
                    decoder: provider.stream_decoder(ctx.model),
                    ready: VecDeque::new(),
                    ended: false,
                    err_ctx,
                }),
                report: stated(report),
                sent: true,
            }
        }
    }))
}

struct ErrorContext {
    provider: super::ProviderId,
    model: String,
    status: u16,
    request_id: Option<String>,
    /// Every secret of the credential, non-empty.
    secrets: Vec<String>,
}

impl ErrorContext {
    fn decorate(&self, mut e: Error) -> Error {
        if e.provider().is_none() {
            e = e.with_provider(self.provider.clone());
        }
        if e.model().is_none() {
            e = e.with_model(self.model.clone());
        }
        if e.status().is_none() {
            e = e.with_status(self.status);
        }
        if e.request_id().is_none() {
            e = e.with_request_id(self.request_id.clone());
        }
        for s in &self.secrets {
            e = e.scrub(s);
        }
        e
    }
}

/// The chunks of one streamed answer, decoded from server-sent events.
///
/// Ends with `None` after the provider's end marker; a body that ends before it yields a
/// `Decode` error ("stream ended before completion"); an error event yields the matching
/// error. Nothing is yielded after an error.
pub struct ChunkStream {
    body: ByteStream,
    parser: Box<dyn FrameParser>,
    decoder: Box<dyn StreamDecoder>,
    ready: VecDeque<ChatChunk>,
    ended: bool,
    err_ctx: ErrorContext,
}

impl fmt::Debug for ChunkStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChunkStream")
            .field("provider", &self.err_ctx.provider)
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl ChunkStream {
    fn fail(&mut self, e: Error) -> Poll<Option<Result<ChatChunk>>> {
        self.ended = true;
        self.ready.clear();
        Poll::Ready(Some(Err(self.err_ctx.decorate(e))))
    }
}

impl Stream for ChunkStream {
    type Item = Result<ChatChunk>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if let Some(chunk) = this.ready.pop_front() {
                return Poll::Ready(Some(Ok(chunk)));
            }
            if this.ended {
                return Poll::Ready(None);
            }
            if this.decoder.is_done() {
                this.ended = true;
                return Poll::Ready(None);
            }
            match this.body.as_mut().poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(e))) => return this.fail(e),
                Poll::Ready(Some(Ok(bytes))) => {
                    let events = match this.parser.feed(&bytes) {
                        Ok(ev) => ev,
                        Err(e) => return this.fail(e),
                    };
                    for ev in &events {
                        if this.decoder.is_done() {
                            break;
                        }
                        match this.decoder.decode(ev) {
                            Ok(Some(chunk)) => this.ready.push_back(chunk),
                            Ok(None) => {}
                            Err(e) => return this.fail(e),
                        }
                    }
                }
                Poll::Ready(None) => {
                    // A last event the format lets end without its terminator.
                    if let Ok(events) = this.parser.end() {
                        for ev in &events {
                            match this.decoder.decode(ev) {
                                Ok(Some(chunk)) => this.ready.push_back(chunk),
                                Ok(None) => {}
                                Err(e) => return this.fail(e),
                            }
                        }
                    }
                    if !this.decoder.is_done() {
                        return this.fail(Error::decode(
                            "stream ended before the provider signalled completion",
                        ));
                    }
                    this.ended = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ratelimit::{Per, Window};

    /// An adapter that signs its requests (the OpenAI format's, plus a header over the body)
    /// and streams JSON lines: what the provider kit's two hooks are for.
    #[derive(Debug)]
    struct Signing(super::super::openai::OpenAi);

    impl Provider for Signing {
        fn id(&self) -> &crate::id::ProviderId {
            self.0.id()
        }
        fn kind(&self) -> &'static str {
            "signing"
        }
        fn capabilities(&self) -> crate::id::Capabilities {
            self.0.capabilities()
        }
        fn default_model(&self, c: crate::id::Capability) -> Option<&str> {
            self.0.default_model(c)
        }
        fn chat_request(
            &self,
            req: &ChatRequest,
            ctx: &RequestContext<'_>,
        ) -> Result<crate::http::HttpRequest> {
            self.0.chat_request(req, ctx)
        }
        fn chat_response(&self, raw: RawResponse, model: &str) -> Result<ChatResponse> {
            self.0.chat_response(raw, model)
        }
        fn stream_decoder(&self, model: &str) -> Box<dyn StreamDecoder> {
            self.0.stream_decoder(model)
        }
        fn error(&self, raw: &RawResponse, now: Now) -> Error {
            self.0.error(raw, now)
        }
        fn limit_report(&self, headers: &reqwest::header::HeaderMap, now: Now) -> LimitReport {
            self.0.limit_report(headers, now)
        }
        fn finish(
            &self,
            mut req: crate::http::HttpRequest,
            _: &RequestContext<'_>,
            _: Now,
        ) -> Result<crate::http::HttpRequest> {
            let body = req.json_body().unwrap_or_default();
            let signed = format!("len={};seed={}", body.len(), {
                let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
                v["seed"].clone()
            });
            req.headers
                .insert("x-signed", signed.parse().expect("a header value"));
            Ok(req)
        }
        fn frames(&self) -> Box<dyn FrameParser> {
            Box::new(super::super::JsonLines::new())
        }
    }

    /// An error that echoes any part of a credential with parts (an AWS secret access key,
    /// its session token) says none of them.
    #[tokio::test]
    async fn an_error_is_scrubbed_of_every_secret_part() {
        use crate::http::{Script, ScriptedTransport};
        let (secret, token) = ("wJalrXUtnFEMIEXAMPLEKEY", "FwoGZXIvYXdzEXAMPLETOKEN");
        let body =
            format!(r#"{{"error":{{"message":"bad signature for {secret} with {token}"}}}}"#);
        let transport = ScriptedTransport::new();
        transport.push("signing.test", Script::json(403, body));
        let provider = signing();
        let cred = crate::id::Credential::aws("AKIAEXAMPLE", secret, Some(token.to_owned()));
        let ctx = RequestContext::new("m", Some(&cred));
        let now = || crate::clock::Clock::both(&crate::clock::TokioClock);
        let req = ChatRequest::from_prompt("Say hi.");
        let ex = chat_once(&provider, &transport, &req, ctx, 10 * S, now).await;
        let e = ex.result.expect_err("refused");
        let shown = format!("{e} {e:?}");
        assert!(shown.contains("bad signature"), "{shown}");
        assert!(!shown.contains(secret) && !shown.contains(token), "{shown}");
    }

    fn signing() -> Signing {
        let url = "http://signing.test/v1".parse().expect("a URL");
        Signing(super::super::openai::OpenAi::new(
            crate::id::ProviderId::new("p"),
            url,
        ))
    }

    /// `finish` sees the body as sent — the extra body merged — and what it sets goes out;
    /// a stream is cut by the adapter's own framing.
    #[tokio::test]
    async fn the_finishing_step_signs_the_complete_body_and_frames_cut_the_stream() {
        use crate::http::{Script, ScriptedTransport};
        let transport = ScriptedTransport::new();
        let ok = r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}"#;
        transport.push("signing.test", Script::json(200, ok));
        let provider = signing();
        let extra = serde_json::json!({"seed": 7})
            .as_object()
            .cloned()
            .unwrap_or_default();
        let ctx = RequestContext::new("m", None).with_extra_body(&extra);
        let now = || crate::clock::Clock::both(&crate::clock::TokioClock);
        let req = ChatRequest::from_prompt("Say hi.");
        let ex = chat_once(&provider, &transport, &req, ctx, 10 * S, now).await;
        assert_eq!(ex.result.map(|r| r.text).ok().as_deref(), Some("hi"));
        let sent = &transport.requests("signing.test")[0];
        let body = sent.json_body().unwrap_or_default();
        let signed = sent.headers.get("x-signed").and_then(|v| v.to_str().ok());
        assert_eq!(signed, Some(format!("len={};seed=7", body.len()).as_str()));

        // Streamed: JSON lines, each an OpenAI chunk, the last without its newline.
        let lines = concat!(
            r#"{"choices":[{"index":0,"delta":{"content":"Hel"}}]}"#,
            "\n",
            r#"{"choices":[{"index":0,"delta":{"content":"lo"}}]}"#,
            "\n[DONE]"
        );
        transport.push("signing.test", Script::json(200, lines));
        let ctx = RequestContext::new("m", None);
        let ex = chat_stream_once(&provider, &transport, &req, ctx, 10 * S, now).await;
        let stream = ex.result.expect("the stream opens");
        let chunks: Vec<String> = futures_util::StreamExt::collect::<Vec<_>>(stream)
            .await
            .into_iter()
            .map(|c| c.map(|c| c.delta).unwrap_or_else(|e| e.to_string()))
            .collect();
        assert_eq!(chunks.concat(), "Hello");
    }

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_throttled_answers_kind_follows_its_stated_wait() {
        use ErrorKind::*;
        let cases = [
            (RateLimited, None, RateLimited),
            (RateLimited, Some(59 * S), RateLimited),
            (RateLimited, Some(LONG_TERM - S), RateLimited),
            (RateLimited, Some(LONG_TERM), QuotaExhausted),
            (RateLimited, Some(86_400 * S), QuotaExhausted),
            (QuotaExhausted, Some(S), QuotaExhausted),
            (QuotaExhausted, None, QuotaExhausted),
            (Overloaded, Some(86_400 * S), Overloaded),
        ];
        for (kind, delay, want) in cases {
            assert_eq!(throttle_kind(kind, delay), want, "{kind:?} {delay:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_exhausted_window_gives_a_throttled_answer_its_delay() {
        let now = Instant::now();
        let day = LimitReport {
            requests: Some(Window {
                limit: Some(50),
                remaining: Some(0),
                reset_at: Some(now + 5 * 3600 * S),
                per: Per::Unknown,
            }),
            ..LimitReport::default()
        };
        let e = throttling(Error::new(ErrorKind::RateLimited, "x"), &day, now);
        assert_eq!(
            (e.kind(), e.retry_after()),
            (ErrorKind::QuotaExhausted, Some(5 * 3600 * S))
        );
        // The error's own delay comes first.
        let e = Error::new(ErrorKind::RateLimited, "x").with_retry_after(Some(2 * S));
        let e = throttling(e, &day, now);
        assert_eq!(
            (e.kind(), e.retry_after()),
            (ErrorKind::RateLimited, Some(2 * S))
        );
        // Other kinds are left alone.
        let e = throttling(Error::new(ErrorKind::Server, "x"), &day, now);
        assert_eq!((e.kind(), e.retry_after()), (ErrorKind::Server, None));
        // A window with room says nothing about a wait.
        let room = LimitReport {
            requests: Some(Window {
                remaining: Some(3),
                ..day.requests.unwrap()
            }),
            ..LimitReport::default()
        };
        let e = throttling(Error::new(ErrorKind::RateLimited, "x"), &room, now);
        assert_eq!((e.kind(), e.retry_after()), (ErrorKind::RateLimited, None));
    }
}
