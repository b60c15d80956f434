//! [`ProviderSettings`]: what the router needs to know of one provider besides its adapter.

use std::collections::HashMap;
use std::time::Duration;

use crate::id::Credential;
use crate::ratelimit::Limits;
use crate::types::price::Price;

/// Settings of one provider added in code with
/// [`ClientBuilder::provider`](crate::ClientBuilder::provider).
///
/// # Examples
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use llm_failover::provider::openai::OpenAi;
/// use llm_failover::ratelimit::Limits;
/// use llm_failover::{Client, Credential, ProviderId, ProviderSettings};
///
/// let settings = ProviderSettings::new()
///     .limits(Limits::none().with_rpm(500).with_tpm(200_000))
///     .credential(Credential::new("sk-test"))
///     .timeout(Duration::from_secs(30));
/// let openai = OpenAi::new(ProviderId::new("openai"), "http://127.0.0.1:8080/v1".parse()?)
///     .with_chat_model("gpt-4o-mini");
/// let client = Client::builder().provider(Arc::new(openai), settings).build()?;
/// let limits = client.configured_limits("openai").unwrap();
/// assert_eq!(limits.rpm.map(|n| n.get()), Some(500));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ProviderSettings {
    /// Stated limits (unknown ones are learned from headers).
    pub limits: Limits,
    /// Limits of specific models.
    pub model_limits: HashMap<String, Limits>,
    /// Per-attempt timeout, overriding the policy's.
    pub timeout: Option<Duration>,
    /// The key to send (none for local hosts).
    pub credential: Option<Credential>,
    /// Provider-specific fields merged into every chat request's JSON body to this provider
    /// (`seed`, `top_p`, `user`, `safetySettings`, …): objects merge key by key, `null`
    /// removes a field the adapter writes, anything else replaces it (RFC 7396); a request's
    /// own [`extra_body`](crate::ChatRequest::extra_body) applies over these. `model` and
    /// `stream` are refused at build.
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// What each model costs (none shipped: a model without a price has no cost).
    pub prices: HashMap<String, Price>,
    /// What this provider may spend a day or a month: a request it cannot cover goes to the
    /// next provider ([`budget`](crate::budget)).
    pub budget: Option<crate::budget::Budget>,
}

impl ProviderSettings {
    /// No limits, no key.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the limits.
    #[must_use]
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets the key.
    #[must_use]
    pub fn credential(mut self, credential: Credential) -> Self {
        self.credential = Some(credential);
        self
    }

    /// Sets the per-attempt timeout.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets what `model` costs at this provider: its answers then carry their cost
    /// ([`ChatResponse::spend`](crate::ChatResponse::spend)).
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::ProviderSettings;
    /// use llm_failover::price::Price;
    ///
    /// let openai = ProviderSettings::new()
    ///     .price("gpt-4o-mini", Price::per_million_tokens(0.15, 0.60).with_batch(0.075, 0.30))
    ///     .price("whisper-1", Price::per_audio_minute(0.006));
    /// assert_eq!(openai.prices.len(), 2);
    /// ```
    #[must_use]
    pub fn price(mut self, model: impl Into<String>, price: Price) -> Self {
        self.prices.insert(model.into(), price);
        self
    }

    /// Sets what this provider may spend a calendar day or month, at its prices: a request
    /// whose estimated cost it cannot cover fails over to the next provider (a cheaper one
    /// may fit), as if this one were busy until the window's end.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::budget::Budget;
    /// use llm_failover::price::Price;
    /// use llm_failover::ProviderSettings;
    ///
    /// let openai = ProviderSettings::new()
    ///     .price("gpt-4o", Price::per_million_tokens(2.50, 10.00))
    ///     .budget(Budget::usd_per_day(5.0));
    /// assert_eq!(openai.budget.unwrap().usd_per_day, Some(5.0));
    /// ```
    #[must_use]
    pub fn budget(mut self, budget: crate::budget::Budget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Sets one extra body field sent with every chat request to this provider
    /// ([`extra_body`](Self::extra_body)).
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::ProviderSettings;
    /// use serde_json::json;
    ///
    /// // Gemini: merged into the adapter's generationConfig, not replacing it.
    /// let gemini = ProviderSettings::new()
    ///     .extra_body("generationConfig", json!({ "seed": 7, "topK": 40 }))
    ///     .extra_body("safetySettings", json!([
    ///         { "category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_ONLY_HIGH" }
    ///     ]));
    /// assert_eq!(gemini.extra_body["generationConfig"]["seed"], 7);
    /// ```
    #[must_use]
    pub fn extra_body(
        mut self,
        field: impl Into<String>,
        value: impl Into<serde_json::Value>,
    ) -> Self {
        self.extra_body.insert(field.into(), value.into());
        self
    }
}
