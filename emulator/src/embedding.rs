//! The emulator's embedding vectors: deterministic, cheap, and meaningful enough for a demo.
//!
//! A vector is built by feature hashing: each word of the text (lower-cased runs of letters
//! and digits; for token input, each token id) adds ±1 at four positions drawn from a hash
//! of the word — one among the first 64, one among the first 256, one among the first 1024,
//! one anywhere — and a small dense part drawn from a hash of the whole text keeps two texts
//! with the same words (or none) apart. The result is scaled to unit length. So the same
//! input always gets the same vector, and texts that share words point in similar directions:
//! a retrieval demo ranks "the weather in Paris" nearest to "Paris weather today".
//!
//! A model's vector of fewer dimensions than its own is the first `n` values of the full one
//! (how Matryoshka-trained models — OpenAI's `text-embedding-3-*`, Gemini's embedding models,
//! Titan v2 — shorten theirs), scaled to unit length again where the provider documents it.
//! As with those models, the first values carry the most: every word has a position among
//! the first 64, so a shortened vector still ranks texts by the words they share.
//!
//! # Examples
//!
//! ```
//! use llm_failover_emulator::embedding::{cosine, text_vector};
//!
//! let a = text_vector("the weather in Paris", 1536);
//! let b = text_vector("Paris weather today", 1536);
//! let c = text_vector("a recipe for pancakes", 1536);
//! assert_eq!(a.len(), 1536);
//! assert_eq!(a, text_vector("the weather in Paris", 1536));
//! assert!(cosine(&a, &b) > cosine(&a, &c));
//! ```

use crate::text::{fnv1a, mix};

/// The ranges a word's positions are drawn from, one position in each (capped at the
/// vector's length): nested, so every prefix of 64 values or more holds some of each word.
const HIT_RANGES: [usize; 4] = [64, 256, 1024, usize::MAX];

/// The weight of the dense part, relative to one word's ±1.
const DENSE_WEIGHT: f64 = 0.05;

/// The unit vector of `dims` values for `text`.
///
/// # Panics
///
/// Never; `dims == 0` gives an empty vector.
pub fn text_vector(text: &str, dims: usize) -> Vec<f32> {
    let words = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| fnv1a(w.to_lowercase().as_bytes()));
    unit(raw(words, fnv1a(text.as_bytes()), dims))
}

/// The unit vector of `dims` values for a token array (OpenAI's `input: [int]`), each token
/// id a word.
pub fn tokens_vector(tokens: &[u32], dims: usize) -> Vec<f32> {
    let words = tokens.iter().map(|t| fnv1a(&t.to_le_bytes()));
    let whole: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
    unit(raw(words, fnv1a(&whole) ^ 0x7a11, dims))
}

/// The first `dims` values of `full`, scaled to unit length again when `renormalize`.
pub fn shorten(full: &[f32], dims: usize, renormalize: bool) -> Vec<f32> {
    let cut = full[..dims.min(full.len())].to_vec();
    if renormalize {
        unit(cut.iter().map(|v| f64::from(*v)).collect())
    } else {
        cut
    }
}

/// The cosine similarity of two vectors (0 when either is zero).
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let n = norm(a) * norm(b);
    if n == 0.0 { 0.0 } else { dot / n }
}

fn raw(words: impl Iterator<Item = u64>, seed: u64, dims: usize) -> Vec<f64> {
    let mut v = vec![0.0; dims];
    if dims == 0 {
        return v;
    }
    for w in words {
        let mut h = w;
        for range in HIT_RANGES {
            h = mix(h);
            let i = (h % range.min(dims) as u64) as usize;
            v[i] += if h >> 63 == 1 { -1.0 } else { 1.0 };
        }
    }
    let mut s = mix(seed);
    for x in &mut v {
        s = mix(s);
        // 53 random bits → [-1, 1).
        let r = (s >> 11) as f64 / (1u64 << 52) as f64 - 1.0;
        *x += r * DENSE_WEIGHT;
    }
    v
}

fn unit(v: Vec<f64>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
    let scale = if norm > 0.0 { 1.0 / norm } else { 0.0 };
    v.into_iter().map(|x| (x * scale) as f32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn length(v: &[f32]) -> f64 {
        v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt()
    }

    #[test]
    fn vectors_are_unit_length_and_deterministic() {
        for text in ["", "!!!", "hello", "The weather in Paris is sunny."] {
            let v = text_vector(text, 768);
            assert_eq!(v.len(), 768);
            assert!((length(&v) - 1.0).abs() < 1e-5, "{text:?}");
            assert_eq!(v, text_vector(text, 768));
        }
        assert!((length(&tokens_vector(&[1, 2, 3], 256)) - 1.0).abs() < 1e-5);
        assert!(text_vector("x", 0).is_empty());
    }

    #[test]
    fn shared_words_are_closer_than_none() {
        let a = text_vector("What's the weather in Paris?", 1024);
        let b = text_vector("Paris weather: sunny, 18 C", 1024);
        let c = text_vector("How do I bake sourdough bread", 1024);
        assert!(cosine(&a, &b) > 0.3, "{}", cosine(&a, &b));
        assert!(cosine(&a, &c).abs() < 0.2, "{}", cosine(&a, &c));
        assert!(cosine(&a, &text_vector("WHAT'S THE WEATHER IN PARIS", 1024)) > 0.9);
    }

    #[test]
    fn shortened_vectors_are_prefixes_that_still_rank() {
        let full = text_vector("matryoshka", 3072);
        let short = shorten(&full, 256, false);
        assert_eq!(short, full[..256]);
        assert!((length(&shorten(&full, 256, true)) - 1.0).abs() < 1e-5);
        assert_eq!(shorten(&full, 5000, false).len(), 3072);
        let a = shorten(&text_vector("the weather in Paris", 3072), 64, true);
        let b = shorten(&text_vector("Paris weather today", 3072), 64, true);
        let c = shorten(&text_vector("how to bake bread", 3072), 64, true);
        assert!(cosine(&a, &b) > cosine(&a, &c) + 0.2);
    }
}
