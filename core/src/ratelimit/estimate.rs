//! Token estimates for admission, before a request is sent.
//!
//! With the `tokenizer` feature (on by default), input tokens are counted with tiktoken-rs in
//! the model's encoding — `o200k_base` for the GPT-4o / GPT-4.1 / GPT-5 / o-series family,
//! `cl100k_base` for older OpenAI models — plus the chat format's per-message overhead. Other
//! vendors' tokenizers are not public, so their models get the `cl100k_base` count padded by
//! 20 %. Because OpenAI documents that its rate limiter itself estimates from the character
//! count (about 4 characters per token), the estimate is never below `ceil(characters / 4)`:
//! admission then agrees with the server's own arithmetic. Output tokens are `max_tokens`, or
//! a default when the request sets none.
//!
//! Without the feature, every count is the tokenizer-free bound — one token per UTF-8 byte,
//! padded by 20 % for other vendors' models — so [`estimate_chat`] equals [`chat_cost_bound`]:
//! never below what the provider counts, often about four times it for English text. Admission
//! is then more cautious where a token limit binds (and a prompt whose bytes exceed a token
//! bucket's whole capacity is refused as too large), until the usage each answer reports gives
//! the excess back.
//!
//! Encoders load once, lazily, on first use (tiktoken-rs singletons); never per request.
//! [`preload`] starts that load on a background thread as soon as a token limit is known, so
//! the first request that needs a count does not stall an async worker for the load.
//!
//! Counting costs time in proportion to the text (`BENCHMARKS.md`, B5). Where a request fits
//! comfortably in every token bucket, the router books [`chat_cost_bound`] instead — one byte
//! per token, which no BPE encoding can exceed — and counts exactly once the buckets are half
//! spent, where a request's size decides when it can be sent. Either way the reservation is
//! reconciled with the usage the provider reports.

// Internal: reachable from outside only with the `test-util` feature (tests, benches and
// fuzzers); without it every `pub` here is crate-private.
#![cfg_attr(not(feature = "test-util"), allow(unreachable_pub, dead_code))]

#[cfg(feature = "tokenizer")]
use tiktoken_rs::CoreBPE;

use super::store::Demand;
use crate::types::{ChatRequest, EmbeddingRequest};

/// Tokens added per message by the chat format (role, separators), per OpenAI's cookbook.
pub const TOKENS_PER_MESSAGE: u64 = 4;
/// Tokens that prime the assistant's reply.
pub const REPLY_PRIMING: u64 = 3;
/// Tokens added per tool definition or tool call by the wire format (its framing).
pub const TOKENS_PER_TOOL: u64 = 8;
/// Tokens booked per image: about the most a provider charges for one image it scales down
/// (Anthropic's ~1 600 for 1.15 megapixels; OpenAI's high detail 765 for 1024×1024). The
/// answer's usage gives back what it did not cost.
pub const IMAGE_TOKENS: u64 = 1_600;
/// Output tokens reserved when a request sets no `max_tokens`.
pub const DEFAULT_OUTPUT_TOKENS: u32 = 1024;

/// Which tokenizer an estimate uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Encoding {
    /// `o200k_base` (GPT-4o, GPT-4.1, GPT-5, o1/o3/o4).
    O200k,
    /// `cl100k_base` (GPT-4, GPT-3.5).
    Cl100k,
    /// Another vendor's model: `cl100k_base` count + 20 %.
    Padded,
}

impl Encoding {
    /// The encoding for `model` (a vendor prefix such as `openai/` is ignored).
    pub fn for_model(model: &str) -> Self {
        let m = model
            .rsplit('/')
            .next()
            .unwrap_or(model)
            .to_ascii_lowercase();
        let o200k = [
            "gpt-4o",
            "gpt-4.1",
            "gpt-4.5",
            "gpt-5",
            "o1",
            "o3",
            "o4",
            "chatgpt-4o",
            "gpt-oss",
        ];
        let cl100k = ["gpt-4", "gpt-3.5", "gpt-35", "text-embedding"];
        if o200k.iter().any(|p| m.starts_with(p)) {
            Encoding::O200k
        } else if cl100k.iter().any(|p| m.starts_with(p)) {
            Encoding::Cl100k
        } else {
            Encoding::Padded
        }
    }

    #[cfg(feature = "tokenizer")]
    fn bpe(self) -> &'static CoreBPE {
        match self {
            Encoding::O200k => tiktoken_rs::o200k_base_singleton(),
            Encoding::Cl100k | Encoding::Padded => tiktoken_rs::cl100k_base_singleton(),
        }
    }

    /// Tokens in `text` under this encoding (padded for [`Encoding::Padded`]), never below
    /// `ceil(chars / 4)`. Without the `tokenizer` feature: its UTF-8 bytes (padded likewise).
    pub fn count(self, text: &str) -> u64 {
        if text.is_empty() {
            return 0;
        }
        #[cfg(feature = "tokenizer")]
        let n = self.bpe().encode_ordinary(text).len() as u64;
        #[cfg(not(feature = "tokenizer"))]
        let n = text.len() as u64;
        let n = match self {
            Encoding::Padded => padded(n),
            _ => n,
        };
        n.max((text.chars().count() as u64).div_ceil(4))
    }
}

/// The admission cost of a chat request for `model`.
///
/// # Examples
///
/// ```
/// use llm_failover::ChatRequest;
/// use llm_failover::ratelimit::estimate_chat;
///
/// let cost = estimate_chat(&ChatRequest::from_prompt("Hello there").max_tokens(50), "gpt-4o-mini");
/// assert_eq!(cost.requests, 1);
/// assert_eq!(cost.output_tokens, 50);
/// assert!(cost.input_tokens >= 3);
/// ```
pub fn estimate_chat(req: &ChatRequest, model: &str) -> Demand {
    let enc = Encoding::for_model(model);
    chat_cost(req, |text| enc.count(text))
}

/// A chat request's cost with `tokens` counting each message's text: the chat format's
/// overhead added, `max_tokens` (or the default) reserved for the answer.
fn chat_cost(req: &ChatRequest, tokens: impl Fn(&str) -> u64) -> Demand {
    let json = |v: &serde_json::Value| tokens(&v.to_string());
    let messages: u64 = req
        .messages
        .iter()
        .map(|m| {
            let calls: u64 = m
                .tool_calls
                .iter()
                .map(|c| tokens(&c.id) + tokens(&c.name) + json(&c.arguments) + TOKENS_PER_TOOL)
                .sum();
            tokens(&m.content)
                + TOKENS_PER_MESSAGE
                + calls
                + m.tool_call_id.as_deref().map_or(0, &tokens)
                + IMAGE_TOKENS * m.images.len() as u64
        })
        .sum();
    // Tool definitions are sent with every request, and count as input.
    let tools: u64 = req
        .tools
        .iter()
        .map(|t| {
            tokens(&t.name)
                + t.description.as_deref().map_or(0, &tokens)
                + json(&t.parameters)
                + TOKENS_PER_TOOL
        })
        .sum();
    let input = messages + tools + REPLY_PRIMING;
    Demand {
        requests: 1,
        input_tokens: input,
        output_tokens: u64::from(req.max_tokens.unwrap_or(DEFAULT_OUTPUT_TOKENS)),
        audio_seconds: 0,
    }
}

/// Another vendor's count: the `cl100k_base` count + 20 %.
fn padded(n: u64) -> u64 {
    n + n.div_ceil(5)
}

/// An upper bound of [`estimate_chat`] that costs no tokenizing: every BPE token of
/// `o200k_base` and `cl100k_base` encodes at least one byte, so a message never has more
/// tokens than UTF-8 bytes (padded by 20 % for other vendors' models, as the estimate is).
///
/// # Examples
///
/// ```
/// use llm_failover::ChatRequest;
/// use llm_failover::ratelimit::{chat_cost_bound, estimate_chat};
///
/// let req = ChatRequest::from_prompt("Summarise the attached report in three lines.").max_tokens(80);
/// for model in ["gpt-4o-mini", "gpt-4", "claude-3-5-haiku-latest"] {
///     let (bound, exact) = (chat_cost_bound(&req, model), estimate_chat(&req, model));
///     assert!(bound.input_tokens >= exact.input_tokens);
///     assert_eq!(bound.output_tokens, exact.output_tokens);
/// }
/// ```
pub fn chat_cost_bound(req: &ChatRequest, model: &str) -> Demand {
    if Encoding::for_model(model) == Encoding::Padded {
        chat_cost(req, |text| padded(text.len() as u64))
    } else {
        chat_cost(req, |text| text.len() as u64)
    }
}

/// The admission cost of an embedding request for `model`: its inputs' tokens, counted as
/// a chat message's text is, and no output tokens (an embedding has none).
///
/// # Examples
///
/// ```
/// use llm_failover::EmbeddingRequest;
/// use llm_failover::ratelimit::{embedding_cost_bound, estimate_embedding};
///
/// let req = EmbeddingRequest::many(["hello world", "the weather in Paris"]);
/// let cost = estimate_embedding(&req, "text-embedding-3-small");
/// assert_eq!((cost.requests, cost.output_tokens), (1, 0));
/// assert!(cost.input_tokens >= 6);
/// assert!(embedding_cost_bound(&req, "text-embedding-3-small").input_tokens >= cost.input_tokens);
/// ```
pub fn estimate_embedding(req: &EmbeddingRequest, model: &str) -> Demand {
    let enc = Encoding::for_model(model);
    embedding_cost(req, |text| enc.count(text))
}

/// An upper bound of [`estimate_embedding`] that costs no tokenizing (a token per UTF-8
/// byte, padded for other vendors' models), as [`chat_cost_bound`] is of a chat's.
pub fn embedding_cost_bound(req: &EmbeddingRequest, model: &str) -> Demand {
    if Encoding::for_model(model) == Encoding::Padded {
        embedding_cost(req, |text| padded(text.len() as u64))
    } else {
        embedding_cost(req, |text| text.len() as u64)
    }
}

fn embedding_cost(req: &EmbeddingRequest, tokens: impl Fn(&str) -> u64) -> Demand {
    Demand {
        requests: 1,
        input_tokens: req.inputs.iter().map(|t| tokens(t)).sum(),
        output_tokens: 0,
        audio_seconds: 0,
    }
}

/// The input tokens a provider's limiter counts at least for an embedding request:
/// `ceil(characters / 4)` over its inputs (see [`input_floor`]).
pub fn embedding_floor(req: &EmbeddingRequest) -> u64 {
    req.chars().div_ceil(4)
}

/// Starts loading `model`'s encoder on a background thread, once per encoding per process,
/// so that the first exact count does not pay the load on an async worker. Returns at once.
/// Without the `tokenizer` feature there is nothing to load.
#[cfg(not(feature = "tokenizer"))]
pub fn preload(_model: &str) {}

/// Starts loading `model`'s encoder on a background thread, once per encoding per process,
/// so that the first exact count does not pay the load on an async worker. Returns at once.
#[cfg(feature = "tokenizer")]
pub fn preload(model: &str) {
    use std::sync::atomic::{AtomicBool, Ordering};
    static STARTED: [AtomicBool; 2] = [AtomicBool::new(false), AtomicBool::new(false)];
    let enc = Encoding::for_model(model);
    let slot = match enc {
        Encoding::O200k => 0,
        Encoding::Cl100k | Encoding::Padded => 1,
    };
    if STARTED[slot].swap(true, Ordering::Relaxed) {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("llm-failover-tokenizer".to_owned())
        .spawn(move || {
            enc.bpe();
        });
    if spawned.is_err() {
        // No thread to spare: the first count loads it, as without a preload.
        STARTED[slot].store(false, Ordering::Relaxed);
    }
}

/// The input tokens a provider's rate limiter counts at least: `ceil(characters / 4)` over
/// the messages, as OpenAI documents its own estimate. When usage is reconciled after an
/// answer, the input side is charged `max(reported input, this)` — the reported count is the
/// model's tokenizer, the limiter's count may be the character estimate.
pub fn input_floor(req: &ChatRequest) -> u64 {
    let chars: usize = req.messages.iter().map(|m| m.content.chars().count()).sum();
    (chars as u64).div_ceil(4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_encoding_by_model_family() {
        assert_eq!(Encoding::for_model("gpt-4o-mini"), Encoding::O200k);
        assert_eq!(Encoding::for_model("openai/gpt-4.1"), Encoding::O200k);
        assert_eq!(Encoding::for_model("o3-mini"), Encoding::O200k);
        assert_eq!(Encoding::for_model("gpt-4-turbo"), Encoding::Cl100k);
        assert_eq!(Encoding::for_model("gpt-3.5-turbo"), Encoding::Cl100k);
        assert_eq!(
            Encoding::for_model("claude-3-5-haiku-latest"),
            Encoding::Padded
        );
        assert_eq!(
            Encoding::for_model("llama-3.1-8b-instant"),
            Encoding::Padded
        );
    }

    #[cfg(feature = "tokenizer")]
    #[test]
    fn counts_known_strings_exactly() {
        // "hello world" is two tokens in both OpenAI encodings; chars/4 = 3 is the floor.
        assert_eq!(Encoding::O200k.count("hello world"), 3);
        // A long ordinary sentence is above the chars/4 floor in neither direction by much.
        let text = "The quick brown fox jumps over the lazy dog. ".repeat(20);
        let n = Encoding::O200k.count(&text);
        assert!(n >= (text.len() as u64).div_ceil(4));
        assert!(n < text.len() as u64 / 2);
    }

    #[cfg(feature = "tokenizer")]
    #[test]
    fn pads_other_vendors() {
        let text = "Bonjour, comment allez-vous aujourd'hui ? ".repeat(10);
        let base = tiktoken_rs::cl100k_base_singleton()
            .encode_ordinary(&text)
            .len() as u64;
        assert!(Encoding::Padded.count(&text) >= base + base / 5);
    }

    #[test]
    fn the_bound_is_never_below_the_estimate() {
        let texts = [
            "",
            "hi",
            "The quick brown fox jumps over the lazy dog.",
            "fn main() { println!(\"{}\", 1 + 2); }",
            "日本語のテキストはトークンが多い。",
            "Привет, как дела? Всё хорошо.",
            "🙂🙃🙂🙃 emoji 🙂",
            "\u{0}\u{1}\u{7f}  \t\n\r",
        ];
        for model in ["gpt-4o", "gpt-4", "claude-3-5-haiku-latest", "llama-3.1-8b"] {
            for t in texts {
                let req = ChatRequest::new().system(t).user(t).max_tokens(7);
                let (b, e) = (chat_cost_bound(&req, model), estimate_chat(&req, model));
                assert!(
                    b.input_tokens >= e.input_tokens,
                    "{model} {t:?}: {b:?} < {e:?}"
                );
                assert_eq!((b.requests, b.output_tokens), (e.requests, e.output_tokens));
            }
        }
    }

    #[cfg(not(feature = "tokenizer"))]
    #[test]
    fn without_the_tokenizer_the_estimate_is_the_bound() {
        let req = ChatRequest::new()
            .system("Be brief.")
            .user("日本語のテキスト 🙂")
            .max_tokens(10);
        for model in ["gpt-4o", "gpt-4", "claude-3-5-haiku-latest"] {
            assert_eq!(estimate_chat(&req, model), chat_cost_bound(&req, model));
        }
        assert_eq!(Encoding::O200k.count("hello world"), 11);
        assert_eq!(Encoding::Padded.count("hello world"), 11 + 3);
        preload("gpt-4o"); // nothing to load: returns at once
    }

    #[test]
    fn tool_definitions_calls_results_and_images_count_as_input() {
        use crate::types::{Image, Message, Tool, ToolCall};
        let base = ChatRequest::from_prompt("Weather in Paris?").max_tokens(10);
        let schema =
            serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}});
        let with_tool = base.clone().tool(Tool::new("get_weather", schema.clone()));
        let call = ToolCall::new(
            "call_1",
            "get_weather",
            serde_json::json!({"city": "Paris"}),
        );
        let with_turn = with_tool
            .clone()
            .message(Message::assistant_calls("", vec![call]))
            .message(Message::tool_result("call_1", r#"{"temperature_c": 18}"#));
        let with_image = base
            .clone()
            .message(Message::user("And this?").image(Image::base64("image/png", "AAAA")));
        for model in ["gpt-4o-mini", "claude-3-5-haiku-latest"] {
            let est = |r: &ChatRequest| estimate_chat(r, model).input_tokens;
            let bound = |r: &ChatRequest| chat_cost_bound(r, model).input_tokens;
            let tool_cost = est(&with_tool) - est(&base);
            assert!(tool_cost >= Encoding::for_model(model).count(&schema.to_string()));
            // The call (its id, name, arguments, framing) and the result (its id, text), two
            // messages more.
            let c = |t: &str| Encoding::for_model(model).count(t);
            let turn = 2 * TOKENS_PER_MESSAGE
                + TOKENS_PER_TOOL
                + 2 * c("call_1")
                + c("get_weather")
                + c(&serde_json::json!({"city": "Paris"}).to_string())
                + c(r#"{"temperature_c": 18}"#);
            assert_eq!(est(&with_turn), est(&with_tool) + turn);
            assert!(est(&with_image) >= est(&base) + IMAGE_TOKENS);
            for r in [&with_tool, &with_turn, &with_image] {
                assert!(bound(r) >= est(r), "{model}: the bound stays a bound");
            }
        }
    }

    #[test]
    fn an_embedding_costs_its_inputs_and_no_output() {
        let req = EmbeddingRequest::many(["hello world", "日本語のテキスト"]);
        for model in ["text-embedding-3-small", "gemini-embedding-001"] {
            let enc = Encoding::for_model(model);
            let cost = estimate_embedding(&req, model);
            assert_eq!(
                cost.input_tokens,
                enc.count("hello world") + enc.count("日本語のテキスト")
            );
            assert_eq!((cost.requests, cost.output_tokens), (1, 0));
            assert!(embedding_cost_bound(&req, model).input_tokens >= cost.input_tokens);
        }
        assert_eq!(embedding_floor(&req), (11u64 + 8).div_ceil(4));
    }

    #[test]
    fn chat_cost_adds_overhead_and_max_tokens() {
        let req = ChatRequest::new()
            .system("Be brief.")
            .user("Hi")
            .max_tokens(10);
        let cost = estimate_chat(&req, "gpt-4o");
        let content = Encoding::O200k.count("Be brief.") + Encoding::O200k.count("Hi");
        assert_eq!(
            cost.input_tokens,
            content + 2 * TOKENS_PER_MESSAGE + REPLY_PRIMING
        );
        assert_eq!(cost.output_tokens, 10);
        let cost = estimate_chat(&ChatRequest::from_prompt("Hi"), "gpt-4o");
        assert_eq!(cost.output_tokens, u64::from(DEFAULT_OUTPUT_TOKENS));
    }
}
