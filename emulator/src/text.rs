//! Deterministic content: token estimates, generated answers, transcripts, request ids.
//!
//! The emulator is not a model: an answer is a sequence of words drawn from a fixed
//! vocabulary by a hash of the prompt, so the same prompt always gets the same answer. One
//! word counts as one output token, so `max_tokens` cuts an answer exactly where a model
//! would stop with `finish_reason: "length"`.

use std::sync::atomic::{AtomicU64, Ordering};

const VOCAB: &[&str] = &[
    "the",
    "model",
    "answers",
    "with",
    "a",
    "short",
    "and",
    "deterministic",
    "reply",
    "about",
    "rate",
    "limits",
    "tokens",
    "requests",
    "every",
    "minute",
    "provider",
    "window",
    "bucket",
    "refills",
    "slowly",
    "while",
    "clients",
    "wait",
    "for",
    "their",
    "turn",
    "so",
    "nothing",
    "breaks",
    "under",
    "load",
    "headers",
    "tell",
    "how",
    "much",
    "is",
    "left",
    "quota",
    "resets",
    "soon",
    "then",
    "traffic",
    "flows",
    "again",
    "calmly",
    "through",
    "loopback",
    "servers",
    "stream",
    "chunks",
    "of",
    "text",
    "in",
    "order",
    "until",
    "done",
];

/// FNV-1a over bytes.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A 64-bit mixer (splitmix64), for drawing word after word from one seed.
pub(crate) fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The server-side token estimate of text: characters / 4, rounded up (how OpenAI documents
/// its rate-limit accounting).
pub fn estimate_tokens(chars: u64) -> u64 {
    chars.div_ceil(4)
}

/// Accumulates the prompt of a request: its character count and a hash of its text.
#[derive(Clone, Copy, Debug)]
pub struct PromptDigest {
    /// Characters (Unicode scalar values).
    pub chars: u64,
    /// Hash of the text, seeding the answer.
    pub seed: u64,
}

impl Default for PromptDigest {
    fn default() -> Self {
        PromptDigest {
            chars: 0,
            seed: fnv1a(b""),
        }
    }
}

impl PromptDigest {
    /// Adds one piece of text.
    pub fn add(&mut self, text: &str) {
        self.chars += text.chars().count() as u64;
        self.seed = mix(self.seed ^ fnv1a(text.as_bytes()));
    }

    /// The prompt's token estimate.
    pub fn tokens(&self) -> u64 {
        estimate_tokens(self.chars)
    }
}

/// A generated answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The text.
    pub text: String,
    /// Output tokens (one per word).
    pub tokens: u64,
    /// True when `max_tokens` cut it short.
    pub truncated: bool,
}

/// The answer to a prompt whose digest seeds it: 8 to 47 words, at most `max_tokens`.
pub fn complete(seed: u64, max_tokens: u64) -> Completion {
    let natural = 8 + seed % 40;
    let n = natural.min(max_tokens);
    let mut text = String::with_capacity(n as usize * 8);
    let mut x = seed;
    for i in 0..n {
        x = mix(x);
        let w = VOCAB[(x % VOCAB.len() as u64) as usize];
        if i == 0 {
            let mut cs = w.chars();
            if let Some(c) = cs.next() {
                text.extend(c.to_uppercase());
                text.push_str(cs.as_str());
            }
        } else {
            text.push(' ');
            text.push_str(w);
        }
    }
    let truncated = n < natural;
    if !truncated && n > 0 {
        text.push('.');
    }
    Completion {
        text,
        tokens: n,
        truncated,
    }
}

/// A fixed text as an answer: cut after `max_tokens` words (one token per word, as
/// [`complete`] counts them), `truncated` when cut.
pub fn fixed(text: &str, max_tokens: u64) -> Completion {
    let words = text.split(' ').filter(|w| !w.is_empty()).count() as u64;
    if words <= max_tokens {
        return Completion {
            text: text.to_owned(),
            tokens: words,
            truncated: false,
        };
    }
    let kept: Vec<&str> = text
        .split(' ')
        .filter(|w| !w.is_empty())
        .take(max_tokens as usize)
        .collect();
    Completion {
        text: kept.join(" "),
        tokens: max_tokens,
        truncated: true,
    }
}

/// Splits text into stream deltas of at most `chars` characters each (for text without
/// spaces to split at, such as compact JSON); the deltas concatenate to the text.
pub fn pieces(text: &str, chars: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    for (n, (i, _)) in text.char_indices().enumerate() {
        if n > 0 && n % chars.max(1) == 0 {
            out.push(&text[start..i]);
            start = i;
        }
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// Splits text into stream deltas of about `words` words each (spaces kept, so the deltas
/// concatenate to the text).
pub fn deltas(text: &str, words: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut count = 0;
    for (i, c) in text.char_indices() {
        if c == ' ' {
            count += 1;
            if count == words {
                out.push(&text[start..i]);
                start = i;
                count = 0;
            }
        }
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// A transcript of some audio.
#[derive(Clone, Debug, PartialEq)]
pub struct Transcript {
    /// The text.
    pub text: String,
    /// Audio length in seconds.
    pub duration: f64,
    /// Words with start and end times, in seconds.
    pub words: Vec<(String, f64, f64)>,
}

/// `seconds` of silence as a WAV file (16 kHz, mono, 16-bit PCM): the audio the tests and
/// examples send when only its shape matters.
pub fn silent_wav(seconds: f64) -> Vec<u8> {
    const RATE: u32 = 16_000;
    let data_len = (seconds.max(0.0) * f64::from(RATE * 2)) as u32 & !1;
    let mut w = Vec::with_capacity(44 + data_len as usize);
    w.extend_from_slice(b"RIFF");
    w.extend_from_slice(&(36 + data_len).to_le_bytes());
    w.extend_from_slice(b"WAVEfmt ");
    w.extend_from_slice(&16u32.to_le_bytes()); // fmt chunk size
    w.extend_from_slice(&1u16.to_le_bytes()); // PCM
    w.extend_from_slice(&1u16.to_le_bytes()); // mono
    w.extend_from_slice(&RATE.to_le_bytes());
    w.extend_from_slice(&(RATE * 2).to_le_bytes()); // bytes per second
    w.extend_from_slice(&2u16.to_le_bytes()); // block align
    w.extend_from_slice(&16u16.to_le_bytes()); // bits per sample
    w.extend_from_slice(b"data");
    w.extend_from_slice(&data_len.to_le_bytes());
    w.resize(w.len() + data_len as usize, 0);
    w
}

/// The duration of audio: from a WAV header when there is one, else assuming 16 kB/s
/// (128 kbit/s, typical of compressed speech).
pub fn audio_duration(audio: &[u8]) -> f64 {
    wav_duration(audio).unwrap_or(audio.len() as f64 / 16_000.0)
}

fn wav_duration(b: &[u8]) -> Option<f64> {
    if b.get(0..4)? != b"RIFF" || b.get(8..12)? != b"WAVE" {
        return None;
    }
    let u32_at =
        |i: usize| -> Option<u32> { Some(u32::from_le_bytes(b.get(i..i + 4)?.try_into().ok()?)) };
    let mut i = 12;
    let mut byte_rate = None;
    while i + 8 <= b.len() {
        let id = b.get(i..i + 4)?;
        let size = u32_at(i + 4)? as usize;
        if id == b"fmt " {
            byte_rate = Some(u32_at(i + 16)?);
        } else if id == b"data" {
            let rate = f64::from(byte_rate.filter(|r| *r > 0)?);
            let len = size.min(b.len().saturating_sub(i + 8));
            return Some(len as f64 / rate);
        }
        i = i.checked_add(8 + size + (size & 1))?;
    }
    None
}

/// A deterministic transcript of `audio`: about 2.5 words a second, seeded by the audio's
/// bytes (the first and last 64 KiB and the length, so large files hash fast).
pub fn transcribe(audio: &[u8]) -> Transcript {
    let duration = audio_duration(audio);
    let head = &audio[..audio.len().min(65_536)];
    let tail = &audio[audio.len().saturating_sub(65_536)..];
    let seed = mix(fnv1a(head) ^ fnv1a(tail).rotate_left(17) ^ audio.len() as u64);
    let n = ((duration * 2.5).round() as u64).max(1);
    let mut c = complete(seed, n.min(100_000));
    if !c.text.ends_with('.') {
        c.text.push('.');
    }
    let words: Vec<&str> = c.text.split(' ').collect();
    let step = duration / words.len().max(1) as f64;
    let timed = words
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let start = i as f64 * step;
            ((*w).to_owned(), round3(start), round3(start + step * 0.9))
        })
        .collect();
    Transcript {
        text: c.text,
        duration: round3(duration),
        words: timed,
    }
}

/// Rounds to milliseconds.
pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn next_id() -> u64 {
    let n = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    mix(n ^ 0x005e_ed0f_e4a1)
}

/// A fresh id of `len` alphanumeric characters after `prefix` (`chatcmpl-…`, `msg_01…`,
/// `req_…`).
pub fn new_id(prefix: &str, len: usize) -> String {
    hashed_id(prefix, len, next_id())
}

/// The id of `len` alphanumeric characters after `prefix` that `seed` gives: the same seed,
/// the same id (tool call ids, derived from a hash of the request).
pub fn hashed_id(prefix: &str, len: usize, seed: u64) -> String {
    const ALPHA: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut out = String::with_capacity(prefix.len() + len);
    out.push_str(prefix);
    let mut x = mix(seed);
    for i in 0..len {
        if i % 10 == 9 {
            x = mix(x);
        }
        out.push(char::from(ALPHA[(x % ALPHA.len() as u64) as usize]));
        x /= ALPHA.len() as u64;
    }
    out
}

/// A fresh UUID-shaped id (Azure `apim-request-id`, Deepgram `request_id`).
pub fn new_uuid() -> String {
    let a = next_id();
    let b = mix(a);
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0x0fff,
        ((b >> 48) & 0x3fff) | 0x8000,
        b & 0xffff_ffff_ffff
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_a_quarter_token_per_character_rounded_up() {
        assert_eq!(estimate_tokens(0), 0);
        assert_eq!(estimate_tokens(1), 1);
        assert_eq!(estimate_tokens(4), 1);
        assert_eq!(estimate_tokens(5), 2);
        let mut d = PromptDigest::default();
        d.add("héllo");
        d.add("abc");
        assert_eq!((d.chars, d.tokens()), (8, 2));
    }

    #[test]
    fn the_same_prompt_gets_the_same_answer_and_max_tokens_cuts_it() {
        let mut d = PromptDigest::default();
        d.add("Say hello");
        let a = complete(d.seed, 1000);
        assert_eq!(a, complete(d.seed, 1000));
        assert!((8..48).contains(&a.tokens));
        assert!(!a.truncated);
        assert!(a.text.ends_with('.'));
        assert_eq!(a.text.split(' ').count() as u64, a.tokens);
        let cut = complete(d.seed, 3);
        assert_eq!((cut.tokens, cut.truncated), (3, true));
        assert!(a.text.starts_with(&cut.text));
        assert_eq!(complete(d.seed, 0).text, "");
    }

    #[test]
    fn deltas_concatenate_to_the_text() {
        let text = "one two three four five six seven";
        let parts = deltas(text, 3);
        assert_eq!(parts, vec!["one two three", " four five six", " seven"]);
        assert_eq!(parts.concat(), text);
        assert!(deltas("", 3).is_empty());
    }

    #[test]
    fn fixed_texts_are_cut_at_max_tokens_and_pieces_concatenate() {
        let whole = fixed("The tool get_weather returned: sunny", 10);
        assert_eq!((whole.tokens, whole.truncated), (5, false));
        assert_eq!(whole.text, "The tool get_weather returned: sunny");
        let cut = fixed("The tool get_weather returned: sunny", 2);
        assert_eq!(
            (cut.text.as_str(), cut.tokens, cut.truncated),
            ("The tool", 2, true)
        );
        let json = r#"{"city":"Paris","ünits":"c"}"#;
        let parts = pieces(json, 8);
        assert!(parts.len() >= 3 && parts.iter().all(|p| p.chars().count() <= 8));
        assert_eq!(parts.concat(), json);
        assert!(pieces("", 8).is_empty());
        assert_eq!(hashed_id("call_", 24, 7), hashed_id("call_", 24, 7));
        assert_ne!(hashed_id("call_", 24, 7), hashed_id("call_", 24, 8));
        assert_eq!(hashed_id("call_", 24, 7).len(), 5 + 24);
    }

    #[test]
    fn reads_wav_duration_from_the_header() {
        // 16 kHz mono 16-bit: 32000 bytes/s; 16000 bytes of data = 0.5 s.
        let wav = silent_wav(0.5);
        assert_eq!(wav.len(), 44 + 16_000);
        assert_eq!(audio_duration(&wav), 0.5);
        // A lying header (data longer than the file) is clamped, never indexed past the end.
        let short = &wav[..wav.len() - 8000];
        assert_eq!(audio_duration(short), 0.25);
        assert_eq!(audio_duration(b"RIFF\xff\xff\xff\xffWAVE"), 12.0 / 16_000.0);
        let t = transcribe(&wav);
        assert_eq!(t.duration, 0.5);
        assert!(!t.text.is_empty());
        assert_eq!(t.words.len(), t.text.split(' ').count());
    }

    #[test]
    fn ids_are_unique_and_shaped() {
        let a = new_id("chatcmpl-", 29);
        let b = new_id("chatcmpl-", 29);
        assert_ne!(a, b);
        assert_eq!(a.len(), 9 + 29);
        let u = new_uuid();
        assert_eq!(u.len(), 36);
        assert_eq!(u.matches('-').count(), 4);
    }
}
