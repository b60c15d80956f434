//! A streamed chat answer handed to the caller.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::Stream;

use crate::error::{ErrorKind, Result};
use crate::id::ProviderId;
use crate::provider::ChunkStream;
use crate::types::{ChatChunk, Usage};

/// Called once when a stream ends (or is dropped): the usage it reported, and the kind of
/// the error that ended it, if one did. The router reconciles the booking and tells the
/// breaker.
pub(crate) type StreamEnd = Box<dyn FnOnce(Option<Usage>, Option<ErrorKind>) + Send>;

/// The chunks of a streamed chat answer.
///
/// The router has already read up to the first content, so a provider that failed before
/// sending any content was failed over; an error after that comes out of this stream. When
/// the stream ends, reported usage is reconciled with the tokens reserved for it.
///
/// # Examples
///
/// ```no_run
/// use futures_util::StreamExt;
/// # async fn run(client: llm_failover::Client) -> llm_failover::Result<()> {
/// let mut stream = client.chat_stream(llm_failover::ChatRequest::from_prompt("Hi")).await?;
/// println!("answered by {}", stream.provider());
/// while let Some(chunk) = stream.next().await {
///     print!("{}", chunk?.delta);
/// }
/// # Ok(()) }
/// ```
pub struct ChatStream {
    buffered: VecDeque<ChatChunk>,
    rest: ChunkStream,
    provider: ProviderId,
    model: String,
    attempts: u32,
    usage: Option<Usage>,
    /// `None` once ended.
    on_end: Option<StreamEnd>,
}

impl fmt::Debug for ChatStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatStream")
            .field("provider", &self.provider)
            .field("model", &self.model)
            .field("attempts", &self.attempts)
            .finish_non_exhaustive()
    }
}

impl ChatStream {
    pub(crate) fn new(
        buffered: Vec<ChatChunk>,
        rest: ChunkStream,
        provider: ProviderId,
        model: &str,
        on_end: StreamEnd,
    ) -> Self {
        ChatStream {
            buffered: buffered.into(),
            rest,
            provider,
            model: model.to_owned(),
            attempts: 1,
            usage: None,
            on_end: Some(on_end),
        }
    }

    pub(crate) fn set_attempts(&mut self, attempts: u32) {
        self.attempts = attempts;
    }

    /// The provider streaming this answer.
    pub fn provider(&self) -> &ProviderId {
        &self.provider
    }

    /// The model requested.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// How many attempts the router made before this stream started.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    fn end(&mut self, error: Option<ErrorKind>) {
        if let Some(on_end) = self.on_end.take() {
            on_end(self.usage, error);
        }
    }

    fn seen(&mut self, chunk: &ChatChunk) {
        if let Some(u) = chunk.usage {
            self.usage = Some(u);
        }
    }
}

impl Stream for ChatStream {
    type Item = Result<ChatChunk>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if let Some(chunk) = this.buffered.pop_front() {
            this.seen(&chunk);
            return Poll::Ready(Some(Ok(chunk)));
        }
        if this.on_end.is_none() {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.rest).poll_next(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(chunk))) => {
                this.seen(&chunk);
                Poll::Ready(Some(Ok(chunk)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.end(Some(e.kind()));
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                this.end(None);
                Poll::Ready(None)
            }
        }
    }
}

impl Drop for ChatStream {
    fn drop(&mut self) {
        // Dropped early: still give back what was not used, as far as usage is known.
        self.end(None);
    }
}
