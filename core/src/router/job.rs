//! What one request asks for — a chat answer, a streamed one, a transcript or embedding
//! vectors — as a [`Job`] whose `Output` is what the router returns: a chat job cannot be
//! answered with a transcript.

use std::future::Future;
use std::time::Duration;

use futures_util::StreamExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::Instrument;

use super::core::StreamWatch;
use super::stream::{ChatStream, whole};
use crate::cache::{Answerer, Fill, Key, bulk_key, chat_key, embedding_key, transcription_key};
use crate::clock::Clock;
use crate::error::Result;
use crate::http::Transport;
use crate::id::Capability;
use crate::id::ProviderId;
use crate::provider::bulk::BulkStep;
use crate::provider::{
    BulkAnswer, ChunkStream, Exchange, Provider, RequestContext, bulk_once, chat_once,
    chat_stream_once, embed_once, no_bulk, transcribe_once,
};
use crate::ratelimit::{
    Demand, chat_cost_bound, embedding_cost_bound, embedding_floor, estimate_chat,
    estimate_embedding, input_floor,
};
use crate::types::price::{Cost, Price, Spend};
use crate::types::{
    ChatChunk, ChatRequest, ChatResponse, EmbeddingRequest, EmbeddingResponse, Origin, Transcript,
    TranscriptionRequest, Usage, check_answer,
};

/// Whether admission counts tokens for a request, and the room known in its token buckets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TokenCounting {
    /// No token limit applies (none configured, none ever stated): nothing reads a count.
    Off,
    /// A token limit applies. `room`: what the buckets could take while staying at least half
    /// full, as of the last booking (`None`: not known).
    On { room: Option<u64> },
}

/// How an attempt's admission cost was reckoned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reckoning {
    /// No token limit applies: one request.
    Requests,
    /// The tokenizer-free bound ([`chat_cost_bound`]).
    Bound,
    /// The tiktoken count ([`estimate_chat`]).
    Count,
}

impl Reckoning {
    /// As an event tells it.
    pub(crate) fn pricing(self) -> crate::observe::Pricing {
        use crate::observe::Pricing;
        match self {
            Reckoning::Requests => Pricing::Requests,
            Reckoning::Bound => Pricing::Bound,
            Reckoning::Count => Pricing::Counted,
        }
    }
}

/// The tiktoken estimate of one request, counted at most once per model however many
/// providers and attempts price it.
#[derive(Debug, Default)]
pub(crate) struct TokenCounts(Vec<(String, Demand)>);

impl TokenCounts {
    fn known(&self, model: &str) -> Option<Demand> {
        self.0.iter().find(|(m, _)| m == model).map(|(_, c)| *c)
    }

    fn exact(&mut self, model: &str, count: impl FnOnce() -> Demand) -> Demand {
        if let Some(c) = self.known(model) {
            return c;
        }
        let c = count();
        self.0.push((model.to_owned(), c));
        c
    }
}

/// What one attempt sends with.
pub(crate) struct Attempt<'a> {
    pub(crate) adapter: &'a dyn Provider,
    pub(crate) transport: &'a dyn Transport,
    pub(crate) ctx: RequestContext<'a>,
    pub(crate) timeout: Duration,
    pub(crate) clock: &'a dyn Clock,
    pub(crate) span: &'a tracing::Span,
    /// Makes what a stream calls when it ends (only a stream job calls it).
    pub(crate) on_end: &'a (dyn Fn() -> StreamWatch + Sync),
}

/// What admission and limit keys need of a request, whatever kind of answer it asks for.
pub(crate) trait Admissible: Sync {
    /// What it asks of a provider.
    fn capability(&self) -> Capability;

    /// The model it names (`None`: each provider's default).
    fn model(&self) -> Option<&str>;

    /// What admission books for `model`.
    fn demand(
        &self,
        model: &str,
        tokens: TokenCounting,
        costs: &mut TokenCounts,
    ) -> (Demand, Reckoning);

    /// The fewest input tokens the request can have been counted as (see [`input_floor`]);
    /// read only where tokens were booked.
    fn floor(&self) -> u64 {
        0
    }

    /// Why `adapter` cannot carry this request, if it cannot (checked before any send).
    fn refusal(&self, adapter: &dyn Provider) -> Option<crate::Error> {
        let _ = adapter;
        None
    }
}

/// What a request priced in tokens (a chat's, an embedding's) demands: one request where
/// tokens are not counted; the count already made for `model`; the `bound` where it fits the
/// known room (admitted at once, the excess held only until the answer's usage gives it back);
/// else the counted estimate (`exact`, counted once per model).
fn priced_in_tokens(
    model: &str,
    tokens: TokenCounting,
    costs: &mut TokenCounts,
    bound: impl FnOnce() -> Demand,
    exact: impl FnOnce() -> Demand,
) -> (Demand, Reckoning) {
    let TokenCounting::On { room } = tokens else {
        return (Demand::one_request(), Reckoning::Requests);
    };
    if let Some(c) = costs.known(model) {
        return (c, Reckoning::Count);
    }
    let bound = bound();
    match room {
        Some(room) if bound.tokens() <= room => (bound, Reckoning::Bound),
        _ => (costs.exact(model, exact), Reckoning::Count),
    }
}

/// A chat request: one request where tokens are not counted; the bound where it fits the
/// known room (admitted at once either way, the excess held only until the answer's usage
/// gives it back); else the counted estimate.
impl Admissible for ChatRequest {
    fn capability(&self) -> Capability {
        Capability::Chat
    }

    fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    fn demand(
        &self,
        model: &str,
        tokens: TokenCounting,
        costs: &mut TokenCounts,
    ) -> (Demand, Reckoning) {
        priced_in_tokens(
            model,
            tokens,
            costs,
            || chat_cost_bound(self, model),
            || estimate_chat(self, model),
        )
    }

    fn floor(&self) -> u64 {
        input_floor(self)
    }

    fn refusal(&self, adapter: &dyn Provider) -> Option<crate::Error> {
        adapter.check_chat(self).err()
    }
}

/// A transcription costs its request and its audio's seconds (cheap to read, and they have
/// their own bucket); audio whose length cannot be read (not WAV) costs its request only.
impl Admissible for TranscriptionRequest {
    fn capability(&self) -> Capability {
        Capability::Transcription
    }

    fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    fn demand(&self, _: &str, _: TokenCounting, _: &mut TokenCounts) -> (Demand, Reckoning) {
        let seconds = self
            .audio
            .duration()
            .map_or(0, |d| d.as_secs_f64().ceil() as u64);
        (Demand::audio(seconds), Reckoning::Requests)
    }
}

/// An embedding request costs its inputs' tokens and no output, priced as a chat's prompt
/// is: one request where tokens are not counted, the byte bound where it fits the known room,
/// else the counted estimate; reconciled with the usage the answer reports.
impl Admissible for EmbeddingRequest {
    fn capability(&self) -> Capability {
        Capability::Embedding
    }

    fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    fn demand(
        &self,
        model: &str,
        tokens: TokenCounting,
        costs: &mut TokenCounts,
    ) -> (Demand, Reckoning) {
        priced_in_tokens(
            model,
            tokens,
            costs,
            || embedding_cost_bound(self, model),
            || estimate_embedding(self, model),
        )
    }

    fn floor(&self) -> u64 {
        embedding_floor(self)
    }

    /// What the adapter refuses ([`Provider::check_embedding`]), and a provider with no
    /// embedding model for a request that names none: a chat provider added in code (an
    /// OpenAI-compatible host serves both) is passed over, not the end of the request.
    fn refusal(&self, adapter: &dyn Provider) -> Option<crate::Error> {
        if self.model.is_none() && adapter.default_model(Capability::Embedding).is_none() {
            let id = adapter.id();
            return Some(
                crate::Error::config(format!(
                    "provider `{id}` has no default embedding model: set `embedding_model` in \
                     providers.toml (with_embedding_model in code) or the request's model"
                ))
                .with_provider(id.clone()),
            );
        }
        adapter.check_embedding(self).err()
    }
}

/// One kind of request: what it sends and what it returns.
pub(crate) trait Job: Sync {
    /// What the request returns.
    type Output: Send;

    /// Whether an attempt's timeout leaves the other providers their share of the deadline
    /// ([`attempt_timeout`](super::decide::attempt_timeout)). Not for a stream: its timeout
    /// bounds the whole answer as it arrives, which a share would cut short.
    const SHARES_DEADLINE: bool = true;

    /// The answer is a stream: an attempt ends at its first content, the stream later.
    const STREAMS: bool = false;

    /// The request, as admission sees it.
    type Request: Admissible;

    fn request(&self) -> &Self::Request;

    /// Sends one attempt.
    fn send<'a>(
        &'a self,
        a: Attempt<'a>,
    ) -> impl Future<Output = Exchange<Self::Output>> + Send + 'a;

    /// Stamps the answer with the number of requests sent; returns the usage it reports.
    fn finish(out: &mut Self::Output, sends: u32) -> Option<Usage>;

    /// The model the answer names.
    fn answered_model(out: &Self::Output) -> &str;

    /// The provider that answered.
    fn answered_by(out: &Self::Output) -> &ProviderId;

    /// Whether the answer has the shape the request asked for (a structured answer's JSON
    /// and schema); `InvalidAnswer` when not. A stream is not checked: it is the caller's
    /// as it arrives.
    fn check(&self, out: &Self::Output) -> crate::Result<()> {
        let _ = out;
        Ok(())
    }

    /// The answer as the response cache keeps it.
    type Kept: Serialize + DeserializeOwned + Send;

    /// This request's cache key, answered by one of `answerers`.
    fn cache_key(&self, answerers: &[Answerer<'_>]) -> Key;

    /// A kept answer served again, and the tokens it had used.
    fn replay(kept: Self::Kept, stored_at_ms: i64) -> (Self::Output, u64);

    /// A fresh answer for the cache: what to keep now, serialized — or `None`, when nothing
    /// is kept now (a stream keeps its answer when it has all arrived; an answer the
    /// content filter cut, or one without content, is never kept).
    fn keep(out: &mut Self::Output, fill: Fill, now_ms: i64) -> Option<(Fill, Vec<u8>)>;

    /// Stamps what the answer cost at `price`, `estimated` at admission; returns what it
    /// cost by its reported usage. An answer with no place for a cost (a stream, a remote
    /// batch's step) costs nothing here.
    fn priced(out: &mut Self::Output, price: &Price, estimated: Cost) -> Option<Cost> {
        let _ = (out, price, estimated);
        None
    }
}

/// Writes an answer's [`Spend`] — `estimated` before sending, `actual` by its usage — and
/// returns the latter.
fn stamp(spend: &mut Option<Spend>, estimated: Cost, actual: Option<Cost>) -> Option<Cost> {
    *spend = Some(Spend {
        estimated: Some(estimated),
        actual,
    });
    actual
}

/// What to keep of a whole answer.
fn keep_whole<T: Serialize>(whole: bool, out: &T, fill: Fill) -> Option<(Fill, Vec<u8>)> {
    if !whole {
        return None;
    }
    serde_json::to_vec(out).ok().map(|v| (fill, v))
}

/// The demand a request is priced at: admission's, or — where no token limit applies and
/// admission booked no tokens — the tokenizer-free bound, made now (never below the count,
/// no tokenizer tables).
pub(crate) fn priced_demand<R: Admissible + ?Sized>(
    request: &R,
    model: &str,
    cost: Demand,
    reckoning: Reckoning,
) -> Demand {
    match reckoning {
        Reckoning::Requests => {
            let bound = TokenCounting::On {
                room: Some(u64::MAX),
            };
            request.demand(model, bound, &mut TokenCounts::default()).0
        }
        _ => cost,
    }
}

/// What admission's estimate of a request costs at `price`: its input tokens and reserved
/// output tokens, and its seconds of audio where a price per minute is set.
pub(crate) fn estimate(price: &Price, d: &Demand) -> Cost {
    let tokens = price.of_usage(Usage::new(d.input_tokens, d.output_tokens));
    let audio = price
        .of_audio(Duration::from_secs(d.audio_seconds))
        .unwrap_or_default();
    tokens.saturating_add(audio)
}

/// A chat completion.
#[derive(Debug)]
pub(crate) struct Chat(pub(crate) ChatRequest);

impl Job for Chat {
    type Output = ChatResponse;
    type Request = ChatRequest;

    fn request(&self) -> &ChatRequest {
        &self.0
    }

    fn send<'a>(
        &'a self,
        a: Attempt<'a>,
    ) -> impl Future<Output = Exchange<ChatResponse>> + Send + 'a {
        let clock = a.clock;
        chat_once(
            a.adapter,
            a.transport,
            &self.0,
            a.ctx,
            a.timeout,
            move || clock.both(),
        )
    }

    fn answered_model(out: &ChatResponse) -> &str {
        &out.model
    }

    fn answered_by(out: &ChatResponse) -> &ProviderId {
        &out.provider
    }

    fn finish(out: &mut ChatResponse, sends: u32) -> Option<Usage> {
        out.attempts = sends;
        out.usage
    }

    fn priced(out: &mut ChatResponse, price: &Price, estimated: Cost) -> Option<Cost> {
        stamp(
            &mut out.spend,
            estimated,
            out.usage.map(|u| price.of_usage(u)),
        )
    }

    fn check(&self, out: &ChatResponse) -> crate::Result<()> {
        check_answer(&self.0, out)
    }

    type Kept = ChatResponse;

    fn cache_key(&self, answerers: &[Answerer<'_>]) -> Key {
        chat_key(&self.0, answerers)
    }

    fn replay(kept: ChatResponse, stored_at_ms: i64) -> (ChatResponse, u64) {
        replay_chat(kept, stored_at_ms)
    }

    fn keep(out: &mut ChatResponse, fill: Fill, _: i64) -> Option<(Fill, Vec<u8>)> {
        keep_whole(
            whole(out.finish_reason.as_ref()) && out.has_content(),
            out,
            fill,
        )
    }
}

/// A kept chat answer, marked as the cache's, and the tokens it had used.
fn replay_chat(mut kept: ChatResponse, stored_at_ms: i64) -> (ChatResponse, u64) {
    kept.attempts = 0;
    kept.origin = Origin::Cache { stored_at_ms };
    kept.spend = kept.spend.map(|_| Spend::free());
    let tokens = kept.usage.map_or(0, |u| u.total());
    (kept, tokens)
}

/// A streamed chat completion: fails over until its first content.
#[derive(Debug)]
pub(crate) struct Stream(pub(crate) ChatRequest);

impl Job for Stream {
    const SHARES_DEADLINE: bool = false;
    type Output = ChatStream;
    const STREAMS: bool = true;
    type Request = ChatRequest;

    fn request(&self) -> &ChatRequest {
        &self.0
    }

    async fn send<'a>(&'a self, a: Attempt<'a>) -> Exchange<ChatStream> {
        let clock = a.clock;
        let model = a.ctx.model;
        let x = chat_stream_once(
            a.adapter,
            a.transport,
            &self.0,
            a.ctx,
            a.timeout,
            move || clock.both(),
        )
        .await;
        let result =
            match x.result {
                Ok(stream) => first_content(stream).instrument(a.span.clone()).await.map(
                    |(buffered, rest)| {
                        ChatStream::new(buffered, rest, a.adapter.id().clone(), model, (a.on_end)())
                    },
                ),
                Err(e) => Err(e),
            };
        Exchange {
            result,
            report: x.report,
            sent: x.sent,
        }
    }

    fn answered_model(out: &ChatStream) -> &str {
        out.model()
    }

    fn answered_by(out: &ChatStream) -> &ProviderId {
        out.provider()
    }

    /// The cost is known when the stream ends (counted then, `StreamEnded::cost`): the
    /// stream keeps the price and the estimate for [`ChatStream::spend`].
    fn priced(out: &mut ChatStream, price: &Price, estimated: Cost) -> Option<Cost> {
        out.set_price(*price, estimated);
        None
    }

    fn finish(out: &mut ChatStream, sends: u32) -> Option<Usage> {
        out.set_attempts(sends);
        // Usage arrives at the stream's end; the stream reconciles it then.
        None
    }

    type Kept = ChatResponse;

    fn cache_key(&self, answerers: &[Answerer<'_>]) -> Key {
        // A streamed answer is the same answer: one key for both.
        chat_key(&self.0, answerers)
    }

    fn replay(kept: ChatResponse, stored_at_ms: i64) -> (ChatStream, u64) {
        let (answer, tokens) = replay_chat(kept, stored_at_ms);
        (ChatStream::replay(answer, stored_at_ms), tokens)
    }

    fn keep(out: &mut ChatStream, fill: Fill, now_ms: i64) -> Option<(Fill, Vec<u8>)> {
        out.record(fill, now_ms);
        None
    }
}

/// A transcription.
#[derive(Debug)]
pub(crate) struct Transcribe(pub(crate) TranscriptionRequest);

impl Job for Transcribe {
    type Output = Transcript;
    type Request = TranscriptionRequest;

    fn request(&self) -> &TranscriptionRequest {
        &self.0
    }

    fn send<'a>(
        &'a self,
        a: Attempt<'a>,
    ) -> impl Future<Output = Exchange<Transcript>> + Send + 'a {
        let clock = a.clock;
        transcribe_once(
            a.adapter,
            a.transport,
            &self.0,
            a.ctx,
            a.timeout,
            move || clock.both(),
        )
    }

    fn answered_model(out: &Transcript) -> &str {
        &out.model
    }

    fn answered_by(out: &Transcript) -> &ProviderId {
        &out.provider
    }

    fn priced(out: &mut Transcript, price: &Price, estimated: Cost) -> Option<Cost> {
        stamp(
            &mut out.spend,
            estimated,
            out.duration.and_then(|d| price.of_audio(d)),
        )
    }

    fn finish(out: &mut Transcript, sends: u32) -> Option<Usage> {
        out.attempts = sends;
        None
    }

    type Kept = Transcript;

    fn cache_key(&self, answerers: &[Answerer<'_>]) -> Key {
        transcription_key(&self.0, answerers)
    }

    fn replay(mut kept: Transcript, stored_at_ms: i64) -> (Transcript, u64) {
        kept.attempts = 0;
        kept.origin = Origin::Cache { stored_at_ms };
        kept.spend = kept.spend.map(|_| Spend::free());
        (kept, 0)
    }

    fn keep(out: &mut Transcript, fill: Fill, _: i64) -> Option<(Fill, Vec<u8>)> {
        keep_whole(out.has_content(), out, fill)
    }
}

/// Embedding vectors.
#[derive(Debug)]
pub(crate) struct Embed(pub(crate) EmbeddingRequest);

impl Job for Embed {
    type Output = EmbeddingResponse;
    type Request = EmbeddingRequest;

    fn request(&self) -> &EmbeddingRequest {
        &self.0
    }

    fn send<'a>(
        &'a self,
        a: Attempt<'a>,
    ) -> impl Future<Output = Exchange<EmbeddingResponse>> + Send + 'a {
        let clock = a.clock;
        embed_once(
            a.adapter,
            a.transport,
            &self.0,
            a.ctx,
            a.timeout,
            move || clock.both(),
        )
    }

    fn answered_model(out: &EmbeddingResponse) -> &str {
        &out.model
    }

    fn answered_by(out: &EmbeddingResponse) -> &ProviderId {
        &out.provider
    }

    /// An answer that states no usage (the Gemini API's) settles the booking at the inputs'
    /// characters / 4 ([`embedding_floor`]): the provider's own rule of thumb, rather than
    /// holding a byte-count bound until the window refills.
    fn finish(out: &mut EmbeddingResponse, sends: u32) -> Option<Usage> {
        out.attempts = sends;
        Some(out.usage.unwrap_or_default())
    }

    fn priced(out: &mut EmbeddingResponse, price: &Price, estimated: Cost) -> Option<Cost> {
        stamp(
            &mut out.spend,
            estimated,
            out.usage.map(|u| price.of_usage(u)),
        )
    }

    type Kept = EmbeddingResponse;

    fn cache_key(&self, answerers: &[Answerer<'_>]) -> Key {
        embedding_key(&self.0, answerers)
    }

    fn replay(mut kept: EmbeddingResponse, stored_at_ms: i64) -> (EmbeddingResponse, u64) {
        kept.attempts = 0;
        kept.origin = Origin::Cache { stored_at_ms };
        kept.spend = kept.spend.map(|_| Spend::free());
        let tokens = kept.usage.map_or(0, |u| u.total());
        (kept, tokens)
    }

    fn keep(out: &mut EmbeddingResponse, fill: Fill, _: i64) -> Option<(Fill, Vec<u8>)> {
        keep_whole(out.has_content(), out, fill)
    }
}

/// Reads a stream until its first content (text or a finish), so a failure before any
/// content can still fail over. Returns what was read and the rest.
async fn first_content(mut stream: ChunkStream) -> Result<(Vec<ChatChunk>, ChunkStream)> {
    let mut buffered = Vec::new();
    loop {
        match stream.next().await {
            Some(Ok(chunk)) => {
                let content = !chunk.delta.is_empty() || chunk.finish_reason.is_some();
                buffered.push(chunk);
                if content {
                    return Ok((buffered, stream));
                }
            }
            Some(Err(e)) => return Err(e),
            None => return Ok((buffered, stream)),
        }
    }
}

/// One step of a remote batch, sent to the provider that holds it (the caller pins it):
/// through the same admission (one request of the provider's bucket), breaker and retries as
/// any request. Never cached.
#[derive(Debug)]
pub(crate) struct BulkCall {
    /// The model of the batch (its limit key).
    pub(crate) model: String,
    pub(crate) step: BulkStep,
}

impl Admissible for BulkCall {
    fn capability(&self) -> Capability {
        Capability::Chat
    }

    fn model(&self) -> Option<&str> {
        Some(&self.model)
    }

    fn demand(&self, _: &str, _: TokenCounting, _: &mut TokenCounts) -> (Demand, Reckoning) {
        (Demand::one_request(), Reckoning::Requests)
    }

    fn refusal(&self, adapter: &dyn Provider) -> Option<crate::Error> {
        adapter.bulk().is_none().then(|| no_bulk(adapter.id()))
    }
}

impl Job for BulkCall {
    type Output = BulkAnswer;
    type Request = BulkCall;

    fn request(&self) -> &BulkCall {
        self
    }

    fn send<'a>(
        &'a self,
        a: Attempt<'a>,
    ) -> impl Future<Output = Exchange<BulkAnswer>> + Send + 'a {
        let clock = a.clock;
        bulk_once(
            a.adapter,
            a.transport,
            &self.step,
            a.ctx,
            a.timeout,
            move || clock.both(),
        )
    }

    fn finish(_: &mut BulkAnswer, _: u32) -> Option<Usage> {
        None
    }

    fn answered_model(out: &BulkAnswer) -> &str {
        &out.model
    }

    fn answered_by(out: &BulkAnswer) -> &ProviderId {
        &out.provider
    }

    type Kept = BulkAnswer;

    /// A step is never kept ([`keep`](Self::keep)), so its key finds nothing.
    fn cache_key(&self, answerers: &[Answerer<'_>]) -> Key {
        bulk_key(&self.model, answerers)
    }

    fn replay(kept: BulkAnswer, _: i64) -> (BulkAnswer, u64) {
        (kept, 0)
    }

    fn keep(_: &mut BulkAnswer, _: Fill, _: i64) -> Option<(Fill, Vec<u8>)> {
        None
    }
}
