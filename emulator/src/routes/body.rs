//! Bodies in and out: capped reads, multipart forms, answers cut or mangled by a fault,
//! streams paced chunk by chunk, and the concurrency slot a stream holds until its end.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Body;
use axum::http::header::CONTENT_LENGTH;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue};
use bytes::Bytes;

use super::{ApiError, Field, StreamParts, header};
use crate::faults::Fault;
use crate::state::ProviderState;

/// A whole body, possibly cut (truncated, stream error) or mangled (malformed JSON).
pub(super) fn whole_body(bytes: Bytes, fault: Option<&Fault>, h: &mut HeaderMap) -> Body {
    match fault {
        Some(Fault::Truncated | Fault::StreamError) => {
            // The full length is promised, half is sent, then the connection is cut.
            h.insert(CONTENT_LENGTH, HeaderValue::from(bytes.len()));
            let half = bytes.slice(..bytes.len() / 2);
            let items = vec![Ok(half), Err(cut())];
            stream_body(items, CUT_PAUSE, Inflight(None))
        }
        Some(Fault::MalformedJson) => Body::from(bytes.slice(..bytes.len() * 2 / 3)),
        _ => Body::from(bytes),
    }
}

/// A pause before a cut, so the part before it is flushed to the client first.
const CUT_PAUSE: Duration = Duration::from_millis(10);

fn cut() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::ConnectionReset, "emulated cut")
}

/// The items of a stream after a fault: an error event after half the content, a cut, or
/// one mangled event.
pub(super) fn stream_items(
    parts: StreamParts,
    fault: Option<&Fault>,
    error_event: impl FnOnce() -> Bytes,
) -> Vec<Result<Bytes, std::io::Error>> {
    let StreamParts { head, body, tail } = parts;
    let half = body.len().div_ceil(2).max(1).min(body.len());
    let mut out: Vec<Result<Bytes, std::io::Error>> = head.into_iter().map(Ok).collect();
    match fault {
        Some(Fault::StreamError) => {
            out.extend(body.into_iter().take(half).map(Ok));
            out.push(Ok(error_event()));
        }
        Some(Fault::Truncated) => {
            out.extend(body.into_iter().take(half).map(Ok));
            out.push(Err(cut()));
        }
        // (stream_body pauses at least CUT_PAUSE before an error item.)
        Some(Fault::MalformedJson) => {
            for (i, b) in body.into_iter().enumerate() {
                if i + 1 == half {
                    let mut broken = b.slice(..b.len() * 2 / 3).to_vec();
                    broken.extend_from_slice(b"\n\n");
                    out.push(Ok(Bytes::from(broken)));
                } else {
                    out.push(Ok(b));
                }
            }
            out.extend(tail.into_iter().map(Ok));
        }
        _ => {
            out.extend(body.into_iter().map(Ok));
            out.extend(tail.into_iter().map(Ok));
        }
    }
    out
}

/// A streamed body: items one after another, `gap` apart; `guard` lives until the end.
pub(super) fn stream_body(
    items: Vec<Result<Bytes, std::io::Error>>,
    gap: Duration,
    guard: Inflight,
) -> Body {
    let state = (VecDeque::from(items), true, guard);
    Body::from_stream(futures_util::stream::unfold(
        state,
        move |(mut items, first, guard)| async move {
            let item = items.pop_front()?;
            let pause = if item.is_err() {
                gap.max(CUT_PAUSE)
            } else {
                gap
            };
            if !first && !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
            Some((item, (items, false, guard)))
        },
    ))
}

/// A slot in the provider's concurrency limit, released on drop.
#[derive(Debug)]
pub(super) struct Inflight(pub(super) Option<Arc<ProviderState>>);

impl Inflight {
    pub(super) fn enter(p: &Arc<ProviderState>) -> Result<Inflight, u32> {
        let limit = p.concurrency_limit();
        if limit == 0 {
            return Ok(Inflight(None));
        }
        let before = p.inflight.fetch_add(1, Ordering::AcqRel);
        if before >= limit {
            p.inflight.fetch_sub(1, Ordering::AcqRel);
            return Err(limit);
        }
        Ok(Inflight(Some(Arc::clone(p))))
    }
}

impl Drop for Inflight {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            p.inflight.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Bodies up to this size past the cap are read and discarded before the 413, so the client
/// (still sending) sees the answer instead of a reset (a lingering close).
const DRAIN_LIMIT: u64 = 8 << 20;

pub(super) async fn read_body(parts: &Parts, body: Body, limit: usize) -> Result<Bytes, ApiError> {
    let declared = header(parts, "content-length").and_then(|v| v.parse::<u64>().ok());
    if let Some(len) = declared
        && len > limit as u64
    {
        if len <= limit as u64 + DRAIN_LIMIT {
            let mut data = body.into_data_stream();
            while let Some(Ok(_)) = futures_util::StreamExt::next(&mut data).await {}
        }
        return Err(ApiError::PayloadTooLarge {
            limit,
            got: Some(len),
        });
    }
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        if e.to_string().contains("length limit") {
            ApiError::PayloadTooLarge { limit, got: None }
        } else {
            ApiError::bad(format!("could not read the request body: {e}"))
        }
    })
}

pub(super) async fn parse_form(parts: &Parts, body: Bytes) -> Result<Vec<Field>, ApiError> {
    let ct = header(parts, "content-type").unwrap_or("");
    let boundary = multer::parse_boundary(ct)
        .map_err(|_| ApiError::bad("Invalid multipart/form-data: no boundary in Content-Type"))?;
    let stream = futures_util::stream::once(async move { Ok::<_, Infallible>(body) });
    let mut mp = multer::Multipart::new(stream, boundary);
    let mut out = Vec::new();
    loop {
        match mp.next_field().await {
            Ok(Some(f)) => {
                let name = f.name().unwrap_or_default().to_owned();
                let file_name = f.file_name().map(str::to_owned);
                let data = f
                    .bytes()
                    .await
                    .map_err(|e| ApiError::bad(format!("Invalid multipart/form-data: {e}")))?;
                out.push(Field {
                    name,
                    file_name,
                    data,
                });
            }
            Ok(None) => return Ok(out),
            Err(e) => return Err(ApiError::bad(format!("Invalid multipart/form-data: {e}"))),
        }
    }
}
