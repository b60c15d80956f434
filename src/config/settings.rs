//! [`ProviderSettings`]: what the router needs to know of one provider besides its adapter.

use std::collections::HashMap;
use std::time::Duration;

use crate::id::Credential;
use crate::ratelimit::Limits;

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
}
