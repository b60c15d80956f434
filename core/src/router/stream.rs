//! A streamed chat answer handed to the caller.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::Stream;

use super::core::StreamWatch;
use crate::cache::Fill;
use crate::error::{ErrorKind, Result};
use crate::id::ProviderId;
use crate::provider::ChunkStream;
use crate::types::price::{Cost, Price, Spend};
use crate::types::{ChatChunk, ChatResponse, FinishReason, Origin, Usage};

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
    /// `None`: an answer replayed from the cache, all of it buffered.
    rest: Option<ChunkStream>,
    provider: ProviderId,
    model: String,
    attempts: u32,
    usage: Option<Usage>,
    /// Told of each chunk from the provider, and of the end; `None` once ended.
    on_end: Option<StreamWatch>,
    origin: Origin,
    /// Assembles the answer for the cache, which keeps it if the stream reaches its end.
    recorder: Option<Recorder>,
    /// What it costs: the model's price and admission's estimate at it (see [`spend`](Self::spend)).
    priced: Option<(Price, Cost)>,
    /// Replayed from the cache, of a priced model: it cost nothing.
    free: bool,
}

/// A streamed answer as it arrives, for the cache.
struct Recorder {
    fill: Fill,
    answer: ChatResponse,
    now_ms: i64,
}

impl fmt::Debug for ChatStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatStream")
            .field("provider", &self.provider)
            .field("model", &self.model)
            .field("attempts", &self.attempts)
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

impl ChatStream {
    pub(crate) fn new(
        buffered: Vec<ChatChunk>,
        rest: ChunkStream,
        provider: ProviderId,
        model: &str,
        on_end: StreamWatch,
    ) -> Self {
        ChatStream {
            buffered: buffered.into(),
            rest: Some(rest),
            provider,
            model: model.to_owned(),
            attempts: 1,
            usage: None,
            on_end: Some(on_end),
            origin: Origin::Provider,
            recorder: None,
            priced: None,
            free: false,
        }
    }

    /// A kept answer, streamed again: its text in one chunk, then its finish reason, usage
    /// and tool calls in the last.
    pub(crate) fn replay(answer: ChatResponse, stored_at_ms: i64) -> Self {
        let mut text = ChatChunk::text(answer.text);
        text.model = Some(answer.model.clone());
        let last = ChatChunk {
            finish_reason: answer.finish_reason,
            usage: answer.usage,
            tool_calls: answer.tool_calls,
            ..ChatChunk::default()
        };
        ChatStream {
            buffered: VecDeque::from([text, last]),
            rest: None,
            provider: answer.provider,
            model: answer.model,
            attempts: 0,
            usage: None,
            on_end: None,
            origin: Origin::Cache { stored_at_ms },
            recorder: None,
            priced: None,
            free: answer.spend.is_some(),
        }
    }

    /// Has the answer kept by `fill` once it has all arrived (not if it ends in an error,
    /// is dropped early, ends cut by the content filter, or said nothing).
    pub(crate) fn record(&mut self, fill: Fill, now_ms: i64) {
        let mut answer = ChatResponse::new(self.provider.clone(), self.model.clone(), "");
        for chunk in &self.buffered {
            add_chunk(&mut answer, chunk);
        }
        self.recorder = Some(Recorder {
            fill,
            answer,
            now_ms,
        });
    }

    pub(crate) fn set_attempts(&mut self, attempts: u32) {
        self.attempts = attempts;
    }

    pub(crate) fn set_price(&mut self, price: Price, estimated: Cost) {
        self.priced = Some((price, estimated));
    }

    /// What the answer costs, where its model has a price: the estimate made before sending
    /// and, once the stream has delivered its usage (in its last chunk), what that usage
    /// costs. An answer replayed from the cache cost nothing.
    pub fn spend(&self) -> Option<Spend> {
        if self.free {
            return Some(Spend::free());
        }
        self.priced.map(|(price, estimated)| Spend {
            estimated: Some(estimated),
            actual: self.usage.map(|u| price.of_usage(u)),
        })
    }

    /// The provider streaming this answer.
    pub fn provider(&self) -> &ProviderId {
        &self.provider
    }

    /// The model requested.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// How many attempts the router made before this stream started (0: replayed from the
    /// cache).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Where the answer comes from: the provider, or the response cache.
    pub fn origin(&self) -> Origin {
        self.origin
    }

    fn end(&mut self, error: Option<ErrorKind>) {
        if let Some(on_end) = self.on_end.take() {
            on_end.end(self.usage, error);
        }
    }

    /// The stream reached its end: the whole answer goes to the cache.
    fn completed(&mut self) {
        let Some(Recorder {
            fill,
            mut answer,
            now_ms,
        }) = self.recorder.take()
        else {
            return;
        };
        if !whole(answer.finish_reason.as_ref()) || !answer.has_content() {
            return;
        }
        answer.attempts = self.attempts;
        answer.spend = self.spend();
        let Ok(value) = serde_json::to_vec(&answer) else {
            return;
        };
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            h.spawn(fill.keep(value, now_ms));
        }
    }

    /// A chunk passed to the caller (buffered ones were recorded when the recorder began).
    fn seen(&mut self, chunk: &ChatChunk, buffered: bool) {
        if let Some(u) = chunk.usage {
            self.usage = Some(u);
        }
        if let (Some(r), false) = (&mut self.recorder, buffered) {
            add_chunk(&mut r.answer, chunk);
        }
    }
}

/// Adds what `chunk` carries to `answer`.
fn add_chunk(answer: &mut ChatResponse, chunk: &ChatChunk) {
    answer.text.push_str(&chunk.delta);
    if chunk.finish_reason.is_some() {
        answer.finish_reason.clone_from(&chunk.finish_reason);
    }
    if chunk.usage.is_some() {
        answer.usage = chunk.usage;
    }
    if let Some(m) = &chunk.model {
        answer.model.clone_from(m);
    }
    answer.tool_calls.extend(chunk.tool_calls.iter().cloned());
}

/// Whether an answer that finished this way is whole, so worth keeping: not cut by the
/// content filter, not stopped for a reason this crate does not know.
pub(crate) fn whole(finish: Option<&FinishReason>) -> bool {
    matches!(
        finish,
        None | Some(FinishReason::Stop | FinishReason::Length | FinishReason::ToolCalls)
    )
}

impl Stream for ChatStream {
    type Item = Result<ChatChunk>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if let Some(chunk) = this.buffered.pop_front() {
            this.seen(&chunk, true);
            return Poll::Ready(Some(Ok(chunk)));
        }
        let (Some(rest), true) = (&mut this.rest, this.on_end.is_some()) else {
            return Poll::Ready(None);
        };
        match Pin::new(rest).poll_next(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(chunk))) => {
                if let Some(watch) = &mut this.on_end {
                    watch.chunk();
                }
                this.seen(&chunk, false);
                Poll::Ready(Some(Ok(chunk)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.recorder = None;
                this.end(Some(e.kind()));
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                this.completed();
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
