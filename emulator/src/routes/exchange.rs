//! The life of one request, shared by every wire format.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use serde::Deserialize;
use tokio::time::Instant;

use super::body::{Inflight, parse_form, read_body, stream_body, stream_items, whole_body};
use super::{
    ApiError, ChatReq, CountReq, Cx, EmbedReq, Limited, Op, Route, SttReq, Usage, Wire,
    content_type, wire,
};
use crate::config::{ChargeMode, HeaderStyle};
use crate::faults::{Fault, RetryAfter};
use crate::headers::{RetryHeader, malformed_headers, rate_limit_headers, retry_headers};
use crate::limits::{Admission, LimitName, Snapshot, WindowState};
use crate::state::{App, LogEntry, ProviderState};
use crate::text::{new_id, transcribe};
use crate::tools::answer;

/// The state of one listener: the app, and the provider when the listener serves one
/// provider on its own port (paths then start at the root).
#[derive(Clone, Debug)]
pub(crate) struct Listener {
    pub(crate) app: Arc<App>,
    pub(crate) fixed: Option<Arc<ProviderState>>,
}

/// The handler's grip on its connection (the listener's side is `server.rs`).
#[derive(Clone, Debug)]
pub(crate) struct ConnHandle(pub(crate) Arc<AtomicBool>);

impl ConnHandle {
    /// Resets the connection instead of answering.
    pub(crate) fn reset(&self) {
        self.0.store(true, Ordering::Release);
    }
}

/// What the log keeps of an exchange.
#[derive(Debug, Default)]
struct Rec {
    model: Option<String>,
    fault: Option<&'static str>,
    stream: bool,
    tokens: u64,
    usage: Option<[u64; 2]>,
    cached_input: u64,
    returned: [u32; 2],
    stated: Vec<(String, String)>,
    dropped: bool,
    logged: bool,
}

struct Ex<'a> {
    app: &'a App,
    p: &'a Arc<ProviderState>,
    wire: &'static dyn Wire,
    parts: &'a Parts,
    now: Instant,
    conn: Option<ConnHandle>,
    cx: Cx<'a>,
    rec: Rec,
}

/// The fallback handler of every listener.
pub(crate) async fn handle(State(ls): State<Listener>, req: Request) -> Response {
    let (now, wall) = ls.app.now();
    let conn = req
        .extensions()
        .get::<ConnectInfo<ConnHandle>>()
        .map(|c| c.0.clone());
    let (parts, body) = req.into_parts();
    let path = parts.uri.path();
    let (provider, rest) = match &ls.fixed {
        Some(p) => (p.clone(), path),
        None => {
            if let Some(rest) = path.strip_prefix("/_admin/") {
                return super::admin::handle(&ls.app, rest, &parts, body).await;
            }
            let trimmed = path.strip_prefix('/').unwrap_or(path);
            let (prefix, rest) = match trimmed.find('/') {
                Some(i) => (&trimmed[..i], &trimmed[i..]),
                None => (trimmed, ""),
            };
            match ls.app.provider(prefix) {
                Some(p) => (p.clone(), rest),
                None => return unknown_prefix(prefix),
            }
        }
    };
    let wire = wire(provider.cfg.kind);
    if wire.token_path() == Some(rest) {
        return super::token::handle(&ls.app, &provider, &parts, body, now, wall).await;
    }
    provider.counters.request();
    let mut ex = Ex {
        app: &ls.app,
        p: &provider,
        wire,
        parts: &parts,
        now,
        conn,
        cx: Cx {
            provider: &provider,
            method: parts.method.as_str(),
            path: rest,
            started: now,
            request_id: String::new(),
            wall,
            api_version: None,
            latency: Duration::ZERO,
        },
        rec: Rec::default(),
    };
    ex.cx.request_id = request_id(provider.cfg.kind);
    let resp = run(&mut ex, rest, body).await;
    let status = (!ex.rec.dropped).then(|| resp.status().as_u16());
    ex.log(status);
    resp
}

fn request_id(kind: crate::config::Kind) -> String {
    use crate::config::Kind;
    match kind {
        Kind::OpenAi => new_id("req_", 32),
        Kind::Anthropic => new_id("req_011C", 20),
        Kind::Azure | Kind::Bedrock | Kind::Deepgram | Kind::Gemini | Kind::Vertex => {
            crate::text::new_uuid()
        }
    }
}

fn unknown_prefix(prefix: &str) -> Response {
    let body = serde_json::json!({
        "error": {
            "message": format!("the emulator serves no provider under /{prefix}"),
            "type": "invalid_request_error",
        }
    });
    let mut r = Response::new(Body::from(super::json_bytes(&body)));
    *r.status_mut() = StatusCode::NOT_FOUND;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(super::JSON));
    r
}

impl Ex<'_> {
    fn log(&mut self, status: Option<u16>) {
        if self.rec.logged {
            return;
        }
        self.rec.logged = true;
        let fault = self.rec.fault;
        self.p
            .counters
            .answer(status, fault.is_some(), self.rec.tokens);
        let (at_ms, unix_ms) = self.app.stamp(self.now);
        self.app.record(LogEntry {
            at_ms,
            unix_ms,
            provider: self.p.cfg.prefix.clone(),
            method: self.parts.method.to_string(),
            path: self.parts.uri.path().to_owned(),
            model: self.rec.model.take(),
            status,
            fault: fault.map(str::to_owned),
            stream: self.rec.stream,
            tokens: self.rec.tokens,
            request_id: status.map(|_| self.cx.request_id.clone()),
            usage: self.rec.usage.take(),
            cached_input: self.rec.cached_input,
            returned: self.rec.returned,
            stated: std::mem::take(&mut self.rec.stated),
        });
    }

    fn base_headers(&self, h: &mut HeaderMap, ct: &'static str) {
        h.insert(CONTENT_TYPE, HeaderValue::from_static(ct));
        self.wire.id_headers(&self.cx, h);
    }

    fn fail(&self, e: &ApiError) -> Response {
        let (status, ct, body) = self.wire.error(e, &self.cx);
        let mut r = Response::new(Body::from(body));
        *r.status_mut() = status;
        self.base_headers(r.headers_mut(), ct);
        self.wire.error_headers(e, r.headers_mut());
        if matches!(e, ApiError::InsufficientQuota) {
            // Out of credit is nothing a retry mends, and the providers say so to their
            // official SDKs, which obey `x-should-retry` before looking at the status
            // (openai-python `_base_client.py` `_should_retry`,
            // github.com/openai/openai-python; anthropic-sdk-python alike). A plain 429
            // leaves it out: that one is worth retrying.
            r.headers_mut().insert(
                HeaderName::from_static("x-should-retry"),
                HeaderValue::from_static("false"),
            );
        }
        r
    }

    fn limited(&mut self, l: Limited, snap: &Snapshot) -> Response {
        let header = l.header.clone();
        let mut r = self.fail(&ApiError::RateLimited(Box::new(l)));
        let style = self.p.cfg.header_style();
        // A LiteLLM proxy states its limits on its answers only: its 429 carries none
        // (recorded from LiteLLM 1.108.7's proxy).
        if style != HeaderStyle::LiteLlm {
            rate_limit_headers(style, snap, self.cx.wall, r.headers_mut());
        }
        retry_headers(style, &header, r.headers_mut());
        self.rec.stated = stated(r.headers());
        r
    }

    fn drop_connection(&mut self) -> Response {
        self.rec.dropped = true;
        match &self.conn {
            Some(c) => {
                c.reset();
                Response::new(Body::empty())
            }
            // No handle on the socket: a body that fails at once makes hyper abort.
            None => Response::new(Body::from_stream(futures_util::stream::once(async {
                Err::<Bytes, _>(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "emulated reset",
                ))
            }))),
        }
    }

    async fn pause(&self, d: Duration) {
        if d.is_zero() {
            return;
        }
        let mut rx = self.app.shutdown.clone();
        tokio::select! {
            () = tokio::time::sleep(d) => {}
            _ = rx.wait_for(|stop| *stop) => {}
        }
    }

    fn latency(&self, fault: Option<&Fault>) -> Duration {
        let l = self.p.cfg.latency;
        let mut d = Duration::from_millis(l.ms) + self.p.jitter(l.jitter_ms);
        if let Some(Fault::Latency { ms, jitter_ms }) = fault {
            d += Duration::from_millis(*ms) + self.p.jitter(*jitter_ms);
        }
        d
    }
}

async fn run(x: &mut Ex<'_>, rest: &str, body: Body) -> Response {
    let Some(route) = x.wire.route(&x.parts.method, rest, x.parts.uri.query()) else {
        return match super::bulk_dispatch::route(x.p.cfg.kind, &x.parts.method, rest) {
            Some(b) => bulk(x, b, body).await,
            None => x.fail(&ApiError::NotFound),
        };
    };
    x.cx.api_version = super::query_param(x.parts.uri.query(), "api-version").map(str::to_owned);
    x.rec.model.clone_from(&route.model);
    let fault = x.p.next_fault();
    if let Some(f) = fault.as_ref().filter(|f| f.is_early()) {
        x.rec.fault = Some(f.name());
        return early(x, f, &route, body).await;
    }
    if let Err(e) = x.wire.authorize(x.parts, &x.p.cfg.key) {
        return x.fail(&e);
    }
    let guard = match Inflight::enter(x.p) {
        Ok(g) => g,
        Err(limit) => {
            let l = Limited {
                which: LimitName::Concurrency,
                limit: u64::from(limit),
                used: u64::from(limit),
                requested: 1,
                delay: None,
                header: RetryHeader::Absent,
                too_large: false,
                model: route.model.clone().unwrap_or_default(),
            };
            return x.limited(l, &Snapshot::default());
        }
    };
    let limit =
        x.p.cfg
            .max_body_bytes
            .unwrap_or_else(|| x.wire.body_limit(route.op));
    let body = match read_body(x.parts, body, limit).await {
        Ok(b) => b,
        Err(e) => return x.fail(&e),
    };
    if let Err(e) = x.wire.verify(x.parts, &body, &x.cx) {
        return x.fail(&e);
    }
    let form = if content_type(x.parts) == "multipart/form-data" {
        match parse_form(x.parts, body.clone()).await {
            Ok(f) => f,
            Err(e) => return x.fail(&e),
        }
    } else {
        Vec::new()
    };
    let op = match x.wire.parse(&route, x.parts, &body, &form) {
        Ok(op) => op,
        Err(e) => return x.fail(&e),
    };
    x.rec.model = Some(op.model().to_owned());
    let models = &x.p.cfg.models;
    if !models.is_empty() && !models.iter().any(|m| m == op.model()) {
        return x.fail(&ApiError::ModelNotFound(op.model().to_owned()));
    }
    let fault = fault.filter(|f| *f != Fault::Pass);
    if let Some(f) = &fault {
        x.rec.fault = Some(f.name());
    }
    match op {
        Op::Chat(req) => chat(x, req, fault, guard).await,
        Op::Stt(req) => stt(x, req, fault).await,
        Op::Count(req) => {
            drop(guard);
            count(x, req, fault).await
        }
        Op::Embed(req) => embed(x, req, fault, guard).await,
    }
}

/// A request to the provider's Batch API (`bulk.rs`): the early faults and the key as for
/// any request, then the batch store answers; the live endpoints' limits do not apply.
async fn bulk(x: &mut Ex<'_>, route: super::bulk::BulkRoute, body: Body) -> Response {
    x.cx.api_version = super::query_param(x.parts.uri.query(), "api-version").map(str::to_owned);
    let fault = x.p.next_fault();
    if let Some(f) = fault.as_ref().filter(|f| f.is_early()) {
        x.rec.fault = Some(f.name());
        return early(x, f, &Route::new(super::OpKind::Chat), body).await;
    }
    if let Err(e) = x.wire.authorize(x.parts, &x.p.cfg.key) {
        return x.fail(&e);
    }
    let body = match read_body(x.parts, body, route.body_limit()).await {
        Ok(b) => b,
        Err(e) => return x.fail(&e),
    };
    match super::bulk_dispatch::answer(x.p, x.wire, x.parts, &x.cx, x.now, route, body).await {
        Ok(reply) => {
            x.rec.model = reply.model;
            let mut r = Response::new(Body::from(reply.body));
            *r.status_mut() = reply.status;
            x.base_headers(r.headers_mut(), reply.content_type);
            r
        }
        Err(e) => x.fail(&e),
    }
}

/// Faults that answer before authentication: the infrastructure in front of the model.
async fn early(x: &mut Ex<'_>, f: &Fault, route: &Route, body: Body) -> Response {
    match f {
        Fault::Reset => x.drop_connection(),
        Fault::Hang { ms } => {
            let d = Duration::from_millis(ms.unwrap_or(x.p.cfg.hang_ms));
            x.rec.dropped = true;
            x.log(None);
            x.pause(d).await;
            x.drop_connection()
        }
        Fault::Html { status } => html_page(*status),
        Fault::Status { status } => x.fail(&ApiError::Status(*status)),
        Fault::Overloaded => x.fail(&ApiError::Overloaded),
        Fault::InsufficientQuota => x.fail(&ApiError::InsufficientQuota),
        Fault::RateLimit { retry_after } => {
            let model = early_model(x, route, body).await;
            let (snap, limits) = x.p.peek(&model, x.now);
            let minute = x.p.minute();
            let bucket = limits.rpm.map_or(Duration::from_secs(1), |rpm| {
                Duration::from_secs_f64(minute.as_secs_f64() / rpm.max(1) as f64)
            });
            let (delay, header) = retry_form(*retry_after, bucket, x.cx.wall);
            let limit = limits.rpm.unwrap_or(60);
            let l = Limited {
                which: LimitName::Rpm,
                limit,
                used: limit,
                requested: 1,
                delay,
                header,
                too_large: false,
                model,
            };
            x.limited(l, &snap)
        }
        Fault::DailyQuota => {
            let model = early_model(x, route, body).await;
            let (mut snap, limits) = x.p.peek(&model, x.now);
            let day = crate::limits::day_of(x.p.minute());
            let limit = limits.rpd.unwrap_or(1000);
            snap.rpd = Some(WindowState {
                limit,
                remaining: 0,
                reset: day,
            });
            let l = Limited {
                which: LimitName::Rpd,
                limit,
                used: limit,
                requested: 1,
                delay: Some(day),
                header: RetryHeader::Delay(day),
                too_large: false,
                model,
            };
            x.limited(l, &snap)
        }
        // Late faults never reach here.
        _ => x.fail(&ApiError::Status(500)),
    }
}

/// The model an early 429 names: from the path, else the body's `model`, else the first
/// configured model.
async fn early_model(x: &Ex<'_>, route: &Route, body: Body) -> String {
    #[derive(Deserialize)]
    struct Peek {
        model: Option<String>,
    }
    if let Some(m) = &route.model {
        return m.clone();
    }
    if let Ok(b) = axum::body::to_bytes(body, 1 << 20).await
        && let Ok(Peek { model: Some(m) }) = serde_json::from_slice::<Peek>(&b)
    {
        return m;
    }
    x.p.cfg
        .models
        .first()
        .cloned()
        .unwrap_or_else(|| "default".to_owned())
}

/// A `RetryAfter` form → (delay stated in the body, `Retry-After` header).
fn retry_form(
    form: RetryAfter,
    bucket: Duration,
    wall: std::time::SystemTime,
) -> (Option<Duration>, RetryHeader) {
    let date = |t: std::time::SystemTime| RetryHeader::Raw(httpdate::fmt_http_date(t));
    match form {
        RetryAfter::Bucket => (Some(bucket), RetryHeader::Delay(bucket)),
        RetryAfter::Absent => (None, RetryHeader::Absent),
        RetryAfter::Seconds(n) => {
            let d = Duration::from_secs(n);
            (Some(d), RetryHeader::Delay(d))
        }
        RetryAfter::HttpDate(n) => {
            let d = Duration::from_secs(n);
            (Some(d), date(wall.checked_add(d).unwrap_or(wall)))
        }
        RetryAfter::Invalid => (None, RetryHeader::Raw("soon".to_owned())),
        RetryAfter::Past => (
            None,
            date(wall.checked_sub(Duration::from_secs(3600)).unwrap_or(wall)),
        ),
        RetryAfter::Huge => (
            Some(Duration::from_secs(999_999_999)),
            RetryHeader::Raw("999999999".to_owned()),
        ),
    }
}

fn html_page(status: u16) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    let title = format!(
        "{} {}",
        code.as_u16(),
        code.canonical_reason().unwrap_or("Error")
    );
    let page = format!(
        "<html>\r\n<head><title>{title}</title></head>\r\n<body>\r\n<center><h1>{title}</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
    );
    let mut r = Response::new(Body::from(page));
    *r.status_mut() = code;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    r
}

/// Charges `reserve` tokens (giving `refund` back at once) to `model`'s buckets: the
/// snapshot to state on the answer (none when the provider has no limits), or the 429.
fn admit(
    x: &mut Ex<'_>,
    model: &str,
    reserve: u64,
    refund: u64,
) -> Result<Option<Snapshot>, Box<Response>> {
    let Some(ch) = x.p.charge(model, reserve, refund, x.now) else {
        return Ok(None);
    };
    match ch.admission {
        Admission::Admitted => Ok(Some(ch.snapshot)),
        Admission::Denied(d) => {
            // The late fault this request took is used up, not applied: no answer to change.
            x.rec.fault = None;
            let l = Limited {
                which: d.which,
                limit: d.limit,
                used: d.used,
                requested: d.requested,
                delay: d.retry_after,
                header: d
                    .retry_after
                    .map_or(RetryHeader::Absent, RetryHeader::Delay),
                too_large: d.retry_after.is_none(),
                model: model.to_owned(),
            };
            Err(Box::new(x.limited(l, &ch.snapshot)))
        }
    }
}

async fn chat(x: &mut Ex<'_>, req: ChatReq, fault: Option<Fault>, guard: Inflight) -> Response {
    let cfg = &x.p.cfg;
    let a = answer(
        &req.asks,
        req.prompt.seed,
        req.max_tokens.unwrap_or(u64::MAX),
    );
    let input = req.input_tokens();
    let reserve = input.saturating_add(req.max_tokens.unwrap_or(cfg.default_max_tokens));
    let used = input.saturating_add(a.tokens());
    let refund = match cfg.charge {
        ChargeMode::Actual => reserve.saturating_sub(used),
        _ => 0,
    };
    let snapshot = match admit(x, &req.model, reserve, refund) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    x.rec.tokens = reserve - refund;
    x.rec.stream = req.stream;
    let delay = x.latency(fault.as_ref());
    x.cx.latency = delay;
    x.pause(delay).await;
    let cached = if x.wire.caches_prompts() {
        x.p.prompt_cache.cached(req.prompt.seed, input)
    } else {
        0
    };
    let usage = Usage {
        input,
        output: a.tokens(),
        cached,
    };
    x.rec.usage = Some([input, a.tokens()]);
    x.rec.cached_input = cached;
    x.rec.returned = req.returned;
    let mut h = HeaderMap::new();
    let body = if req.stream {
        x.base_headers(&mut h, x.wire.stream_content_type(&req));
        let parts = x.wire.chat_stream(&req, &a, usage, &x.cx);
        let items = stream_items(parts, fault.as_ref(), || x.wire.stream_error(&x.cx));
        stream_body(items, Duration::from_millis(cfg.stream_chunk_ms), guard)
    } else {
        x.base_headers(&mut h, super::JSON);
        drop(guard);
        whole_body(x.wire.chat(&req, &a, usage, &x.cx), fault.as_ref(), &mut h)
    };
    finish(x, body, h, snapshot, fault.as_ref())
}

async fn stt(x: &mut Ex<'_>, req: SttReq, fault: Option<Fault>) -> Response {
    let snapshot = match admit(x, &req.model, 0, 0) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    let delay = x.latency(fault.as_ref());
    x.pause(delay).await;
    let t = transcribe(&req.audio);
    let (ct, bytes) = x.wire.transcript(&req, &t, &x.cx);
    let mut h = HeaderMap::new();
    x.base_headers(&mut h, ct);
    let body = whole_body(bytes, fault.as_ref(), &mut h);
    finish(x, body, h, snapshot, fault.as_ref())
}

/// Embeddings: the inputs' tokens charged to the token buckets (an embedding has no output),
/// and reported as the usage `[input, 0]`.
async fn embed(x: &mut Ex<'_>, req: EmbedReq, fault: Option<Fault>, guard: Inflight) -> Response {
    let input = req.input_tokens();
    let snapshot = match admit(x, &req.model, input, 0) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    x.rec.tokens = input;
    let delay = x.latency(fault.as_ref());
    x.cx.latency = delay;
    x.pause(delay).await;
    x.rec.usage = Some([input, 0]);
    let mut h = HeaderMap::new();
    x.base_headers(&mut h, super::JSON);
    x.wire.embed_headers(&req, &x.cx, &mut h);
    let bytes = x.wire.embeddings(&req, &x.cx);
    drop(guard);
    let body = whole_body(bytes, fault.as_ref(), &mut h);
    finish(x, body, h, snapshot, fault.as_ref())
}

/// A token count: the prompt's estimate, the one a chat request is charged, booking nothing
/// in the limits (a count is no message) and stating none.
async fn count(x: &mut Ex<'_>, req: CountReq, fault: Option<Fault>) -> Response {
    let delay = x.latency(fault.as_ref());
    x.pause(delay).await;
    let tokens = req.prompt.tokens() + req.image_tokens;
    let bytes = x.wire.token_count(&req, tokens, &x.cx);
    let mut h = HeaderMap::new();
    x.base_headers(&mut h, super::JSON);
    let body = whole_body(bytes, fault.as_ref(), &mut h);
    finish(x, body, h, None, fault.as_ref())
}

fn finish(
    x: &mut Ex<'_>,
    body: Body,
    mut h: HeaderMap,
    snapshot: Option<Snapshot>,
    fault: Option<&Fault>,
) -> Response {
    let style = x.p.cfg.header_style();
    if let Some(s) = snapshot {
        rate_limit_headers(style, &s, x.cx.wall, &mut h);
    }
    if fault == Some(&Fault::MalformedHeaders) {
        malformed_headers(style, &mut h);
    }
    x.rec.stated = stated(&h);
    let mut r = Response::new(body);
    *r.headers_mut() = h;
    r
}

/// The limit headers in `h`, for the log: name and value, in name order.
fn stated(h: &HeaderMap) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = h
        .iter()
        .filter(|(name, _)| {
            let n = name.as_str();
            n.contains("ratelimit") || n.contains("rate-limit") || n == "retry-after"
        })
        .map(|(name, v)| {
            let value = String::from_utf8_lossy(v.as_bytes()).into_owned();
            (name.as_str().to_owned(), value)
        })
        .collect();
    out.sort();
    out
}
