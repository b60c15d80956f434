//! Per-request options.

use std::sync::Arc;
use std::time::Duration;

use crate::admission::{Place, Priority, Tenant};
use crate::cache::CacheMode;
use crate::id::{Credential, ProviderId};

/// Options for one request: deadline, place in the admission order, provider pin,
/// credential override.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use llm_failover::admission::{Priority, Tenant};
/// use llm_failover::{Credential, RequestOptions};
///
/// // A customer brings its own OpenAI key: the limits and breaker of that account are kept
/// // apart from ours.
/// let opts = RequestOptions::new()
///     .deadline(Duration::from_secs(30))
///     .account("acme")
///     .credential("openai", Credential::new("sk-customer-key"))
///     .provider("openai");
/// assert!(!format!("{opts:?}").contains("sk-customer-key"));
///
/// // Nightly work for that customer, behind every interactive request on the same quota.
/// let nightly = RequestOptions::new().priority(Priority::Bulk).tenant(Tenant::new("acme"));
/// # let _ = nightly;
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct RequestOptions {
    pub(crate) deadline: Option<Duration>,
    pub(crate) max_wait: Option<Duration>,
    pub(crate) provider: Option<ProviderId>,
    pub(crate) credentials: Vec<(ProviderId, Credential)>,
    pub(crate) account: Option<Arc<str>>,
    /// The account scope of a request on the configured key that spends limits of their
    /// own at the provider (a Batch API's steps): its own buckets and breaker.
    pub(crate) scope: Option<&'static str>,
    priority: Priority,
    tenant: Option<Tenant>,
    pub(crate) cache: CacheMode,
    pub(crate) fail_over_invalid: bool,
}

/// The options of a call made without any, shared by every such call.
pub(crate) static NO_OPTIONS: RequestOptions = RequestOptions::new();

impl Default for RequestOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl RequestOptions {
    /// Defaults: the policy's deadline, every provider of the environment, configured keys.
    pub const fn new() -> Self {
        RequestOptions {
            deadline: None,
            max_wait: None,
            provider: None,
            credentials: Vec::new(),
            account: None,
            scope: None,
            priority: Priority::Interactive,
            tenant: None,
            cache: CacheMode::Use,
            fail_over_invalid: false,
        }
    }

    /// Longest total time for this request, waits included.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Longest time this request waits in this process — for a provider to reopen (a 429's
    /// stated delay, a breaker's cooldown, a transient failure's backoff) or for its booked
    /// slot — before it ends instead (default: the whole deadline). A request that would
    /// wait longer ends at once with the error saying when to come back
    /// ([`Error::retry_at`](crate::Error::retry_at)): [`ErrorKind::RateLimited`] when it was
    /// only throttled, [`ErrorKind::AllProvidersUnavailable`] otherwise.
    ///
    /// A job queue sets this short, so that a throttled job goes back to the queue until the
    /// stated time instead of holding a worker (and its lease) for hours.
    ///
    /// [`ErrorKind::RateLimited`]: crate::ErrorKind::RateLimited
    /// [`ErrorKind::AllProvidersUnavailable`]: crate::ErrorKind::AllProvidersUnavailable
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = Some(max_wait);
        self
    }

    /// Where this request stands in the [admission order](crate::admission) (default
    /// interactive): a bulk request takes only the slots of a quota that no interactive
    /// request wants, and waits in this process for one it can use at once.
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }

    /// Whose work this is (default [`Tenant::default`]): requests of one priority waiting
    /// for the same quota take turns by tenant ([admission order](crate::admission)).
    pub fn tenant(mut self, tenant: Tenant) -> Self {
        self.tenant = Some(tenant);
        self
    }

    /// Sends only to this provider (no failover).
    pub fn provider(mut self, provider: impl AsRef<str>) -> Self {
        self.provider = Some(ProviderId::new(provider));
        self
    }

    /// Uses `credential` for `provider` instead of the configured key (multi-tenant apps whose
    /// customers bring their own key). Limits and breaker state for an overridden key are
    /// kept separately from the configured key's, scoped by [`account`](Self::account).
    pub fn credential(mut self, provider: impl AsRef<str>, credential: Credential) -> Self {
        self.credentials
            .push((ProviderId::new(provider), credential));
        self
    }

    /// Names the account whose limits an overridden [credential](Self::credential) spends
    /// (the key's owner). Without it, requests with overridden credentials share one
    /// "override" account per provider.
    pub fn account(mut self, account: impl AsRef<str>) -> Self {
        self.account = Some(Arc::from(account.as_ref()));
        self
    }

    /// What this request does with the client's response cache, if it has one: look up and
    /// keep (the default), [bypass](CacheMode::Bypass) it, or [refresh](CacheMode::Refresh)
    /// the entry.
    pub fn cache(mut self, mode: CacheMode) -> Self {
        self.cache = mode;
        self
    }

    /// When a structured answer ([`ResponseFormat`](crate::ResponseFormat)) is not JSON or
    /// does not match its schema ([`ErrorKind::InvalidAnswer`](crate::ErrorKind::InvalidAnswer)):
    /// ask the next provider in the failover order that was not asked yet (each at most
    /// once), instead of returning the error at once. The provider that answered is not
    /// blamed for it (its breaker hears a success); the error is kept, and returned with the
    /// others if no provider answers in shape.
    pub fn fail_over_on_invalid_answer(mut self, yes: bool) -> Self {
        self.fail_over_invalid = yes;
        self
    }

    /// The tenant whose budget it spends: its [`Tenant`], else its account.
    pub(crate) fn budget_tenant(&self) -> Option<Arc<str>> {
        match &self.tenant {
            Some(t) => Some(Arc::from(t.as_str())),
            None => self.account.clone(),
        }
    }

    /// Its place in the admission order.
    pub(crate) fn place(&self) -> Place {
        Place {
            priority: self.priority,
            tenant: self.tenant.clone().unwrap_or_default(),
        }
    }

    pub(crate) fn credential_for(&self, provider: &ProviderId) -> Option<&Credential> {
        self.credentials
            .iter()
            .rev()
            .find(|(p, _)| p == provider)
            .map(|(_, c)| c)
    }

    /// The account scope for `provider`: `None` for the configured key and its live limits.
    pub(crate) fn account_for(&self, provider: &ProviderId) -> Option<Arc<str>> {
        match self.credential_for(provider) {
            Some(_) => Some(
                self.account
                    .clone()
                    .unwrap_or_else(|| Arc::from("override")),
            ),
            None => self.scope.map(Arc::from),
        }
    }
}
