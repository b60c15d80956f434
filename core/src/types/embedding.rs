//! Embedding requests and results.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{Origin, Usage};
use crate::error::{Error, ErrorKind, Result};
use crate::id::ProviderId;

/// What the vectors will be used for, for providers whose models embed a text differently
/// by its use (Gemini's `taskType`, Cohere's `input_type`). Providers without such an option
/// (OpenAI, Titan) embed the same way whatever it says: it is not sent to them.
///
/// # Examples
///
/// ```
/// use llm_failover::{EmbeddingRequest, InputType};
///
/// let query = EmbeddingRequest::new("weather in Paris").input_type(InputType::Query);
/// assert_eq!(query.input_type, Some(InputType::Query));
/// assert_eq!(InputType::Document.as_str(), "document");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum InputType {
    /// A search query (Gemini `RETRIEVAL_QUERY`, Cohere `search_query`).
    Query,
    /// A document to be searched (Gemini `RETRIEVAL_DOCUMENT`, Cohere `search_document`).
    Document,
    /// Texts compared with each other (Gemini `SEMANTIC_SIMILARITY`; Cohere has none: its
    /// `search_document` is sent).
    Similarity,
    /// Texts to classify (Gemini `CLASSIFICATION`, Cohere `classification`).
    Classification,
    /// Texts to cluster (Gemini `CLUSTERING`, Cohere `clustering`).
    Clustering,
}

impl InputType {
    /// A short lower-case name (`"query"`), as batch input lines write it.
    pub fn as_str(self) -> &'static str {
        match self {
            InputType::Query => "query",
            InputType::Document => "document",
            InputType::Similarity => "similarity",
            InputType::Classification => "classification",
            InputType::Clustering => "clustering",
        }
    }
}

/// A request for the embedding vectors of one or more texts, answered in one response with
/// one vector per text, in the same order.
///
/// `Debug` shows how many texts and how long they are together, never the texts.
///
/// # Examples
///
/// ```
/// use llm_failover::{EmbeddingRequest, InputType};
///
/// let one = EmbeddingRequest::new("The quick brown fox");
/// assert_eq!(one.inputs.len(), 1);
///
/// let many = EmbeddingRequest::many(["first text", "second text"])
///     .input("third text")
///     .model("text-embedding-3-small")
///     .dimensions(256)
///     .input_type(InputType::Document);
/// assert_eq!(many.inputs, ["first text", "second text", "third text"]);
/// assert_eq!(many.dimensions, Some(256));
/// assert!(!format!("{many:?}").contains("first text"));
/// ```
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EmbeddingRequest {
    /// The texts, each embedded on its own; the answer's vectors are in this order.
    pub inputs: Vec<String>,
    /// Overrides the provider's configured embedding model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Fewer dimensions than the model's own, where the model can shorten its vectors
    /// (OpenAI `dimensions`, Gemini `outputDimensionality`, Titan v2 `dimensions`, Cohere v4
    /// `output_dimension`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dimensions: Option<u32>,
    /// What the vectors are for, where the provider asks ([`InputType`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_type: Option<InputType>,
    /// Fields merged into this request's JSON body, over the adapter's (objects merge key by
    /// key; `null` removes a field). The provider's own
    /// [`extra_body`](crate::ProviderSettings::extra_body) is for its chat requests and is
    /// not merged here.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub extra_body: serde_json::Map<String, serde_json::Value>,
}

impl EmbeddingRequest {
    /// A request for one text's vector.
    pub fn new(input: impl Into<String>) -> Self {
        Self::many([input])
    }

    /// A request for the vectors of several texts, in one call where the provider takes
    /// several (OpenAI and Azure up to 2,048, Gemini up to 100).
    pub fn many<S: Into<String>>(inputs: impl IntoIterator<Item = S>) -> Self {
        EmbeddingRequest {
            inputs: inputs.into_iter().map(Into::into).collect(),
            model: None,
            dimensions: None,
            input_type: None,
            extra_body: serde_json::Map::new(),
        }
    }

    /// Adds one more text.
    #[must_use]
    pub fn input(mut self, input: impl Into<String>) -> Self {
        self.inputs.push(input.into());
        self
    }

    /// Sets the model.
    #[must_use]
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Sets the number of dimensions.
    #[must_use]
    pub fn dimensions(mut self, dimensions: u32) -> Self {
        self.dimensions = Some(dimensions);
        self
    }

    /// Sets what the vectors are for.
    #[must_use]
    pub fn input_type(mut self, input_type: InputType) -> Self {
        self.input_type = Some(input_type);
        self
    }

    /// Sets one extra body field ([`extra_body`](Self::extra_body)).
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::EmbeddingRequest;
    ///
    /// let req = EmbeddingRequest::new("hello").extra_body("user", "user-42");
    /// assert_eq!(req.extra_body["user"], "user-42");
    /// ```
    #[must_use]
    pub fn extra_body(
        mut self,
        key: impl Into<String>,
        value: impl Into<serde_json::Value>,
    ) -> Self {
        self.extra_body.insert(key.into(), value.into());
        self
    }

    /// The checks every format makes: at least one input, none empty, dimensions not zero.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidRequest`] saying which.
    pub(crate) fn check(&self) -> Result<()> {
        let invalid = |m: String| Err(Error::new(ErrorKind::InvalidRequest, m));
        if self.inputs.is_empty() {
            return invalid("an embedding request needs at least one input".to_owned());
        }
        if let Some(i) = self.inputs.iter().position(|t| t.trim().is_empty()) {
            return invalid(format!(
                "embedding input [{i}] is empty (providers refuse empty inputs)"
            ));
        }
        if self.dimensions == Some(0) {
            return invalid("dimensions must be at least 1".to_owned());
        }
        Ok(())
    }

    /// The characters of every input together.
    pub(crate) fn chars(&self) -> u64 {
        self.inputs.iter().map(|t| t.chars().count() as u64).sum()
    }
}

impl fmt::Debug for EmbeddingRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddingRequest")
            .field("inputs", &self.inputs.len())
            .field(
                "input_bytes",
                &self.inputs.iter().map(String::len).sum::<usize>(),
            )
            .field("model", &self.model)
            .field("dimensions", &self.dimensions)
            .field("input_type", &self.input_type)
            .field("extra_body", &self.extra_body.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The vectors of an [`EmbeddingRequest`]: one per input, in the inputs' order.
///
/// `Debug` shows how many vectors and their length, never the values.
///
/// # Examples
///
/// ```
/// use llm_failover::{EmbeddingResponse, ProviderId};
///
/// fn cosine(a: &[f32], b: &[f32]) -> f32 {
///     let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
///     let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
///     dot / (norm(a) * norm(b))
/// }
///
/// // `Client::embed` returns one; `new` builds one, e.g. for a test.
/// let answer = EmbeddingResponse::new(
///     ProviderId::new("openai"),
///     "text-embedding-3-small",
///     vec![vec![1.0, 0.0], vec![0.6, 0.8]],
/// );
/// assert_eq!(answer.dimensions(), Some(2));
/// assert!((cosine(&answer.vectors[0], &answer.vectors[1]) - 0.6).abs() < 1e-6);
/// ```
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EmbeddingResponse {
    /// One vector per input, in the request's order.
    pub vectors: Vec<Vec<f32>>,
    /// Tokens counted, when the provider says (embeddings have input tokens only).
    pub usage: Option<Usage>,
    /// The provider that answered.
    pub provider: ProviderId,
    /// The model that answered.
    pub model: String,
    /// The provider's request id.
    pub request_id: Option<String>,
    /// How many attempts the router made (1 = first try; 0 = served from the cache).
    pub attempts: u32,
    /// Where the vectors came from: the provider, or the response cache.
    #[serde(default)]
    pub origin: Origin,
    /// What it cost, where the model has a price (its input tokens at the input price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spend: Option<crate::types::price::Spend>,
}

impl EmbeddingResponse {
    /// An answer from `provider` with these vectors; the other fields empty.
    pub fn new(provider: ProviderId, model: impl Into<String>, vectors: Vec<Vec<f32>>) -> Self {
        EmbeddingResponse {
            vectors,
            usage: None,
            provider,
            model: model.into(),
            request_id: None,
            attempts: 1,
            origin: Origin::Provider,
            spend: None,
        }
    }

    /// The length of the vectors (the first one's), `None` when there are none.
    pub fn dimensions(&self) -> Option<usize> {
        self.vectors.first().map(Vec::len)
    }

    /// Whether it holds a vector with values (one without is returned but never kept by the
    /// response cache).
    pub(crate) fn has_content(&self) -> bool {
        !self.vectors.is_empty() && self.vectors.iter().all(|v| !v.is_empty())
    }
}

impl fmt::Debug for EmbeddingResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddingResponse")
            .field("vectors", &self.vectors.len())
            .field("dimensions", &self.dimensions())
            .field("usage", &self.usage)
            .field("provider", &self.provider)
            .field("model", &self.model)
            .field("request_id", &self.request_id)
            .field("attempts", &self.attempts)
            .field("origin", &self.origin)
            .field("spend", &self.spend)
            .finish()
    }
}

/// An answer with `got` vectors for `want` inputs: a `Decode` error naming the provider.
pub(crate) fn count_mismatch(provider: &ProviderId, want: usize, got: usize) -> Error {
    Error::decode(format!(
        "provider `{provider}` answered {got} embedding vector(s) for {want} input(s)"
    ))
    .with_provider(provider.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_inputs_before_anything_is_sent() {
        assert!(EmbeddingRequest::new("a").check().is_ok());
        let none = EmbeddingRequest::many(Vec::<String>::new());
        assert_eq!(none.check().unwrap_err().kind(), ErrorKind::InvalidRequest);
        let err = EmbeddingRequest::many(["a", " "]).check().unwrap_err();
        assert!(err.message().contains("[1]"), "{err}");
        assert!(EmbeddingRequest::new("a").dimensions(0).check().is_err());
    }

    #[test]
    fn debug_shows_neither_texts_nor_values() {
        let req = EmbeddingRequest::many(["secret text", "another"]).extra_body("user", "u1");
        let shown = format!("{req:?}");
        assert!(
            !shown.contains("secret") && !shown.contains("u1"),
            "{shown}"
        );
        assert!(shown.contains("inputs: 2"), "{shown}");
        let resp = EmbeddingResponse::new(ProviderId::new("p"), "m", vec![vec![0.125; 3]]);
        let shown = format!("{resp:?}");
        assert!(!shown.contains("0.125"), "{shown}");
        assert!(shown.contains("dimensions: Some(3)"), "{shown}");
    }

    #[test]
    fn serializes_only_what_is_set() {
        let json = serde_json::to_value(EmbeddingRequest::new("x")).unwrap();
        assert_eq!(json, serde_json::json!({ "inputs": ["x"] }));
        let back: EmbeddingRequest = serde_json::from_value(json).unwrap();
        assert_eq!(back, EmbeddingRequest::new("x"));
        assert!(count_mismatch(&ProviderId::new("p"), 2, 1).is_decode());
    }
}
