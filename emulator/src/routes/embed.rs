//! An embeddings request, provider-neutral: the inputs with their token counts, the
//! dimension asked for, and the shape of the answer its wire format renders. Each format's
//! parsing and rendering live beside its chat routes (`openai_embed.rs`, `gemini_embed.rs`,
//! `vertex_predict.rs`, `bedrock_invoke.rs`); the vectors are `crate::embedding`'s.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

use crate::embedding::{shorten, text_vector, tokens_vector};
use crate::text::estimate_tokens;

/// One input: text, or token ids (OpenAI's `input: [int]`).
#[derive(Clone, Debug)]
pub(crate) enum EmbedText {
    Text(String),
    Tokens(Vec<u32>),
}

impl EmbedText {
    /// Its tokens: the server-side estimate of text (characters / 4), the length of an array.
    pub(crate) fn tokens(&self) -> u64 {
        match self {
            EmbedText::Text(t) => estimate_tokens(t.chars().count() as u64),
            EmbedText::Tokens(t) => t.len() as u64,
        }
    }
}

/// One input as the answer counts it.
#[derive(Clone, Debug)]
pub(crate) struct EmbedInput {
    pub(crate) text: EmbedText,
    /// Tokens charged: the input's, or the model's limit when it was cut to it.
    pub(crate) tokens: u64,
    /// Cut to the model's input limit (Vertex's `autoTruncate`, Gemini's silent cut).
    pub(crate) truncated: bool,
}

impl EmbedInput {
    /// An input of `text`, whole.
    pub(crate) fn text(text: impl Into<String>) -> Self {
        let text = EmbedText::Text(text.into());
        EmbedInput {
            tokens: text.tokens(),
            text,
            truncated: false,
        }
    }

    /// An input of token ids, whole.
    pub(crate) fn token_ids(ids: Vec<u32>) -> Self {
        let text = EmbedText::Tokens(ids);
        EmbedInput {
            tokens: text.tokens(),
            text,
            truncated: false,
        }
    }

    /// Cut to `limit` tokens when longer (the vector is still the whole text's).
    pub(crate) fn truncate_to(mut self, limit: u64) -> Self {
        if self.tokens > limit {
            self.tokens = limit;
            self.truncated = true;
        }
        self
    }
}

/// Cohere's `embedding_types` (docs.aws.amazon.com/bedrock/latest/userguide/model-parameters-embed.html).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CohereType {
    Float,
    Int8,
    Uint8,
    Binary,
    Ubinary,
}

impl CohereType {
    pub(crate) fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "float" => CohereType::Float,
            "int8" => CohereType::Int8,
            "uint8" => CohereType::Uint8,
            "binary" => CohereType::Binary,
            "ubinary" => CohereType::Ubinary,
            _ => return None,
        })
    }
}

/// The shape of the answer: each wire format renders its own.
#[derive(Clone, Debug)]
pub(crate) enum EmbedForm {
    /// OpenAI and Azure: `data[].embedding` as floats, or base64 of little-endian f32s.
    OpenAi { base64: bool },
    /// Gemini API `:embedContent` (`{embedding}`) or `:batchEmbedContents` (`{embeddings}`).
    Gemini { batch: bool },
    /// Vertex `:embedContent` / `:batchEmbedContents`, with `usageMetadata`.
    VertexEmbed { batch: bool },
    /// Vertex `:predict` (`predictions[].embeddings {values, statistics}`).
    VertexPredict,
    /// Bedrock Titan text embeddings: v2 also answers `embeddingsByType`; `normalize: false`
    /// leaves the vector at a length of its own.
    Titan {
        v2: bool,
        float: bool,
        binary: bool,
        normalize: bool,
    },
    /// Bedrock Cohere embed: `embedding_types` asked for (none: `embeddings_floats`).
    Cohere { types: Vec<CohereType> },
}

/// An embeddings request.
#[derive(Clone, Debug)]
pub(crate) struct EmbedReq {
    pub(crate) model: String,
    pub(crate) inputs: Vec<EmbedInput>,
    /// The model's own dimension.
    pub(crate) native: usize,
    /// The dimension asked for (at most `native`).
    pub(crate) dims: usize,
    /// Scale a shortened vector to unit length again (OpenAI, Titan's `normalize`); Gemini's
    /// shortened vectors are not (ai.google.dev/gemini-api/docs/embeddings: only the full
    /// 3072 dimensions are normalised).
    pub(crate) renormalize: bool,
    pub(crate) form: EmbedForm,
}

impl EmbedReq {
    /// Tokens of every input together: what the token buckets are charged.
    pub(crate) fn input_tokens(&self) -> u64 {
        self.inputs.iter().map(|i| i.tokens).sum()
    }

    /// The vector of each input, in order.
    pub(crate) fn vectors(&self) -> Vec<Vec<f32>> {
        self.inputs
            .iter()
            .map(|i| {
                let full = match &i.text {
                    EmbedText::Text(t) => text_vector(t, self.native),
                    EmbedText::Tokens(t) => tokens_vector(t, self.native),
                };
                if self.dims >= self.native {
                    full
                } else {
                    shorten(&full, self.dims, self.renormalize)
                }
            })
            .collect()
    }
}

/// A vector as base64 of its little-endian f32s (OpenAI's `encoding_format: "base64"`).
pub(crate) fn base64_f32(v: &[f32]) -> String {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    STANDARD.encode(bytes)
}

/// A unit vector quantised to signed bytes (Cohere `int8`).
pub(crate) fn int8(v: &[f32]) -> Vec<i64> {
    v.iter()
        .map(|x| i64::from((x * 127.0).round().clamp(-128.0, 127.0) as i8))
        .collect()
}

/// A unit vector quantised to unsigned bytes (Cohere `uint8`).
pub(crate) fn uint8(v: &[f32]) -> Vec<i64> {
    v.iter()
        .map(|x| i64::from((x * 127.0 + 128.0).round().clamp(0.0, 255.0) as u8))
        .collect()
}

/// One bit per value (positive: 1), eight to a byte, first value in the high bit; as
/// unsigned bytes (Cohere `ubinary`) or signed (`binary`).
pub(crate) fn packed_bits(v: &[f32], signed: bool) -> Vec<i64> {
    v.chunks(8)
        .map(|c| {
            let byte = c
                .iter()
                .enumerate()
                .fold(0u8, |b, (i, x)| if *x > 0.0 { b | (0x80 >> i) } else { b });
            if signed {
                i64::from(byte as i8)
            } else {
                i64::from(byte)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_the_estimate_or_the_limit_when_cut() {
        let long = EmbedInput::text("x".repeat(40)).truncate_to(4);
        assert_eq!((long.tokens, long.truncated), (4, true));
        let short = EmbedInput::text("abcd").truncate_to(4);
        assert_eq!((short.tokens, short.truncated), (1, false));
        assert_eq!(EmbedInput::token_ids(vec![1, 2, 3]).tokens, 3);
    }

    #[test]
    fn encodes_floats_as_openai_decodes_them() {
        // numpy.frombuffer(base64.b64decode(s), dtype="float32")
        assert_eq!(base64_f32(&[1.0, -2.0]), "AACAPwAAAMA=");
    }

    #[test]
    fn quantises_like_cohere() {
        let v = [1.0, -1.0, 0.0, 0.5, -0.1, 0.2, 0.3, 0.4, 0.9];
        assert_eq!(int8(&v)[..4], [127, -127, 0, 64]);
        assert_eq!(uint8(&v)[..4], [255, 1, 128, 192]);
        // 1 0 0 1 0 1 1 1 | 1 → 0b1001_0111, 0b1000_0000
        assert_eq!(packed_bits(&v, false), [0b1001_0111, 0b1000_0000]);
        assert_eq!(packed_bits(&v, true), [0b1001_0111_u8 as i8 as i64, -128]);
    }
}
