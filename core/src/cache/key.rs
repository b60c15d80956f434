//! Cache keys: the SHA-256 of everything that decides an answer, and of whose answer it is.
//!
//! A chat key hashes the provider-neutral request as a whole (messages with their system
//! prompts, model override, `max_tokens`, temperature, stop sequences, response format, extra
//! body fields — every field `ChatRequest` has or gains), and then, for each provider that may
//! answer it in failover order, its name, the model it would be asked for, its own extra body
//! fields and the account the request spends there: the account's name and the key itself.
//! The key is hashed with the rest and never stored: a different key (another account,
//! another account) gives a different cache key, so no one is served another's answers, and
//! nothing in a cache key can be turned back into a prompt or a credential.
//!
//! JSON is hashed in a canonical form (object keys sorted), so the order extra body fields
//! were set in does not matter. Each field is length-prefixed, so no two different inputs
//! write the same bytes.

use sha2::{Digest, Sha256};

use super::store::Key;
use crate::types::{ChatRequest, EmbeddingRequest, TranscriptionRequest};

/// Bumped when what a key covers changes: older entries are then simply never hit.
const VERSION: &str = "llm-failover cache v1";

/// One provider that may answer, as far as its answer is concerned.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Answerer<'a> {
    pub(crate) provider: &'a str,
    /// The model it would be asked for (the request's, else the provider's default).
    pub(crate) model: &'a str,
    /// Fields the provider's settings merge into every chat body.
    pub(crate) extra_body: &'a serde_json::Map<String, serde_json::Value>,
    /// The account whose key is sent (`None`: the configured key).
    pub(crate) account: Option<&'a str>,
    /// The key sent (`None`: the provider takes none).
    pub(crate) credential: Option<&'a str>,
}

/// The key of a chat request answered by one of `answerers`.
pub(crate) fn chat_key(req: &ChatRequest, answerers: &[Answerer<'_>]) -> Key {
    let mut h = Hasher::new("chat");
    // A request serializes as plain data: it cannot fail (no non-string map keys).
    let request = serde_json::to_value(req).unwrap_or(serde_json::Value::Null);
    h.json(&request);
    h.answerers(answerers);
    h.finish()
}

/// The key of an embedding request: the request as a whole (inputs in order, model,
/// dimensions, input type, extra body), then who may answer it.
pub(crate) fn embedding_key(req: &EmbeddingRequest, answerers: &[Answerer<'_>]) -> Key {
    let mut h = Hasher::new("embedding");
    let request = serde_json::to_value(req).unwrap_or(serde_json::Value::Null);
    h.json(&request);
    h.answerers(answerers);
    h.finish()
}

/// The key of a bulk step (never kept: see `BulkCall`): its model and who may answer.
pub(crate) fn bulk_key(model: &str, answerers: &[Answerer<'_>]) -> Key {
    let mut h = Hasher::new("bulk");
    h.str(model);
    h.answerers(answerers);
    h.finish()
}

/// The key of a transcription: the audio by its SHA-256 (and its type), then the options.
pub(crate) fn transcription_key(req: &TranscriptionRequest, answerers: &[Answerer<'_>]) -> Key {
    let mut h = Hasher::new("transcription");
    h.bytes(Sha256::digest(req.audio.bytes()).as_slice());
    h.str(req.audio.mime_type());
    h.opt(req.model.as_deref());
    h.opt(req.language.as_deref());
    h.opt(req.prompt.as_deref());
    h.str(req.response_format.as_str());
    h.opt(
        req.temperature
            .map(f32::to_bits)
            .map(|b| b.to_string())
            .as_deref(),
    );
    h.answerers(answerers);
    h.finish()
}

/// Length-prefixed fields into one SHA-256.
struct Hasher(Sha256);

impl Hasher {
    fn new(kind: &str) -> Self {
        let mut h = Hasher(Sha256::new());
        h.str(VERSION);
        h.str(kind);
        h
    }

    fn bytes(&mut self, b: &[u8]) {
        self.0.update((b.len() as u64).to_le_bytes());
        self.0.update(b);
    }

    fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }

    fn opt(&mut self, s: Option<&str>) {
        match s {
            None => self.0.update([0]),
            Some(s) => {
                self.0.update([1]);
                self.str(s);
            }
        }
    }

    /// `v` in canonical JSON, straight into the hash (JSON ends where it ends: a 0 byte,
    /// which no JSON text holds, closes it).
    fn json(&mut self, v: &serde_json::Value) {
        canonical(v, &mut self.0);
        self.0.update([0]);
    }

    fn json_map(&mut self, map: &serde_json::Map<String, serde_json::Value>) {
        canonical_map(map, &mut self.0);
        self.0.update([0]);
    }

    fn answerers(&mut self, answerers: &[Answerer<'_>]) {
        self.0.update((answerers.len() as u64).to_le_bytes());
        for a in answerers {
            self.str(a.provider);
            self.str(a.model);
            self.json_map(a.extra_body);
            self.opt(a.account);
            self.opt(a.credential);
        }
    }

    fn finish(self) -> Key {
        Key(self.0.finalize().into())
    }
}

/// `v` as JSON with every object's keys in sorted order, into `out`.
fn canonical(v: &serde_json::Value, out: &mut Sha256) {
    use serde_json::Value;
    match v {
        Value::Object(map) => canonical_map(map, out),
        Value::Array(items) => {
            out.update(b"[");
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.update(b",");
                }
                canonical(v, out);
            }
            out.update(b"]");
        }
        // Scalars have one way to be written (a string escaped as serde_json escapes it).
        scalar => write_json(scalar, out),
    }
}

/// `v` as serde_json writes it, straight into `out` (no string in between).
fn write_json<T: serde::Serialize + ?Sized>(v: &T, out: &mut Sha256) {
    struct HashWriter<'a>(&'a mut Sha256);
    impl std::io::Write for HashWriter<'_> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.update(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    // Writing a string or a number into a hash cannot fail.
    let _ = serde_json::to_writer(HashWriter(out), v);
}

/// `map` as a JSON object with its keys in sorted order, into `out`.
fn canonical_map(map: &serde_json::Map<String, serde_json::Value>, out: &mut Sha256) {
    let mut fields: Vec<_> = map.iter().collect();
    fields.sort_by(|a, b| a.0.cmp(b.0));
    out.update(b"{");
    for (i, (k, v)) in fields.into_iter().enumerate() {
        if i > 0 {
            out.update(b",");
        }
        write_json(k, out);
        out.update(b":");
        canonical(v, out);
    }
    out.update(b"}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{AudioInput, ResponseFormat};

    fn none() -> serde_json::Map<String, serde_json::Value> {
        serde_json::Map::new()
    }

    fn one<'a>(
        extra: &'a serde_json::Map<String, serde_json::Value>,
        credential: Option<&'a str>,
    ) -> [Answerer<'a>; 1] {
        [Answerer {
            provider: "openai",
            model: "gpt-4o-mini",
            extra_body: extra,
            account: None,
            credential,
        }]
    }

    fn base() -> ChatRequest {
        ChatRequest::new()
            .system("Be brief.")
            .user("Why is the sky blue?")
    }

    /// Every change to what decides the answer (or whose it is) changes the key.
    #[test]
    fn each_field_that_decides_the_answer_changes_the_key() {
        let extra = none();
        let k = |req: &ChatRequest| chat_key(req, &one(&extra, Some("sk-a")));
        let schema = ResponseFormat::JsonSchema {
            name: "s".into(),
            schema: serde_json::json!({"type": "object"}),
        };
        let variants: Vec<(&str, ChatRequest)> = vec![
            (
                "user text",
                ChatRequest::new()
                    .system("Be brief.")
                    .user("Why is grass green?"),
            ),
            (
                "system",
                ChatRequest::new()
                    .system("Be long.")
                    .user("Why is the sky blue?"),
            ),
            ("one more message", base().assistant("Rayleigh.")),
            ("model", base().model("gpt-4o")),
            ("max_tokens", base().max_tokens(10)),
            ("temperature", base().temperature(0.5)),
            ("stop", base().stop("\n")),
            (
                "json mode",
                base().response_format(ResponseFormat::JsonObject),
            ),
            ("schema", base().response_format(schema)),
            ("extra body", base().extra_body("seed", 1)),
        ];
        let mut seen = vec![k(&base())];
        for (what, req) in &variants {
            let key = k(req);
            assert!(!seen.contains(&key), "{what} did not change the key");
            seen.push(key);
        }
        assert_eq!(k(&base()), seen[0], "the same request, the same key");
    }

    #[test]
    fn whose_answer_it_is_changes_the_key() {
        let (extra, seeded) = (
            none(),
            serde_json::Map::from_iter([("seed".into(), 7.into())]),
        );
        let req = base();
        let ours = chat_key(&req, &one(&extra, Some("sk-a")));
        let mut tenant = one(&extra, Some("sk-a"));
        tenant[0].account = Some("acme");
        let mut other_model = one(&extra, Some("sk-a"));
        other_model[0].model = "gpt-4o";
        let mut other_provider = one(&extra, Some("sk-a"));
        other_provider[0].provider = "groq";
        let two = [one(&extra, Some("sk-a"))[0], other_provider[0]];
        for (what, answerers) in [
            ("another key", one(&extra, Some("sk-b")).to_vec()),
            ("no key", one(&extra, None).to_vec()),
            ("a tenant", tenant.to_vec()),
            ("another model", other_model.to_vec()),
            ("another provider", other_provider.to_vec()),
            (
                "the provider's extra body",
                one(&seeded, Some("sk-a")).to_vec(),
            ),
            ("a failover order", two.to_vec()),
            ("the order reversed", vec![two[1], two[0]]),
        ] {
            assert_ne!(chat_key(&req, &answerers), ours, "{what}");
        }
    }

    #[test]
    fn extra_body_order_does_not_matter_and_no_two_splits_collide() {
        let extra = none();
        let a = base().extra_body("seed", 1).extra_body("top_p", 0.5);
        let b = base().extra_body("top_p", 0.5).extra_body("seed", 1);
        assert_eq!(
            chat_key(&a, &one(&extra, None)),
            chat_key(&b, &one(&extra, None))
        );
        // "ab" + "c" and "a" + "bc" are different fields.
        let mut h1 = Hasher::new("t");
        h1.str("ab");
        h1.str("c");
        let mut h2 = Hasher::new("t");
        h2.str("a");
        h2.str("bc");
        assert_ne!(h1.finish(), h2.finish());
    }

    #[test]
    fn the_credential_is_not_in_the_key_and_the_key_is_its_hash_only() {
        let extra = none();
        let key = chat_key(&base(), &one(&extra, Some("sk-secret-123")));
        assert_eq!(key.hex().len(), 64);
        assert!(!key.hex().contains("secret"));
        assert!(!format!("{key:?}").contains("secret"));
    }

    #[test]
    fn a_transcription_key_follows_the_audio_and_its_options() {
        let extra = none();
        let audio = |b: &[u8]| AudioInput::from_bytes(b.to_vec(), "a.mp3").unwrap();
        let k = |r: &TranscriptionRequest| transcription_key(r, &one(&extra, Some("k")));
        let req = TranscriptionRequest::new(audio(b"abc"));
        let same = TranscriptionRequest::new(audio(b"abc"));
        assert_eq!(k(&req), k(&same));
        for (what, other) in [
            ("other audio", TranscriptionRequest::new(audio(b"abd"))),
            (
                "language",
                TranscriptionRequest::new(audio(b"abc")).language("en"),
            ),
            (
                "prompt",
                TranscriptionRequest::new(audio(b"abc")).prompt("Names"),
            ),
            (
                "model",
                TranscriptionRequest::new(audio(b"abc")).model("whisper-1"),
            ),
        ] {
            assert_ne!(k(&other), k(&req), "{what}");
        }
        assert_ne!(
            transcription_key(&req, &one(&extra, Some("other"))),
            k(&req),
            "another key"
        );
    }
}
