//! Names and secrets every layer shares: provider ids, capabilities and credentials.
//!
//! The bottom layer of the crate: it depends on nothing else here.

use std::fmt;
use std::sync::Arc;

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

/// The name of a provider as configured in `providers.toml` (`openai`, `anthropic`, …).
///
/// Cheap to clone.
///
/// # Examples
///
/// ```
/// use llm_failover::ProviderId;
///
/// let id = ProviderId::new("openai");
/// assert_eq!(id.as_str(), "openai");
/// assert_eq!(id.to_string(), "openai");
/// assert_eq!(id, ProviderId::new("openai"));
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ProviderId(Arc<str>);

impl ProviderId {
    /// A provider id.
    pub fn new(name: impl AsRef<str>) -> Self {
        ProviderId(Arc::from(name.as_ref()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ProviderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for ProviderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for ProviderId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// What a request asks of a provider.
///
/// # Examples
///
/// ```
/// use llm_failover::config::ProviderKind;
/// use llm_failover::Capability;
///
/// let deepgram = ProviderKind::Deepgram.capabilities();
/// let offered: Vec<Capability> = Capability::ALL
///     .into_iter()
///     .filter(|c| deepgram.supports(*c))
///     .collect();
/// assert_eq!(offered, [Capability::Transcription]);
/// assert_eq!(Capability::Transcription.to_string(), "transcription");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Capability {
    /// Chat completions.
    Chat,
    /// Speech to text.
    Transcription,
    /// Embedding vectors of texts.
    Embedding,
}

impl Capability {
    /// Every capability.
    pub const ALL: [Capability; 3] = [
        Capability::Chat,
        Capability::Transcription,
        Capability::Embedding,
    ];

    /// This capability's position in [`ALL`](Self::ALL): the one table per-capability
    /// state is kept in.
    pub(crate) const fn index(self) -> usize {
        match self {
            Capability::Chat => 0,
            Capability::Transcription => 1,
            Capability::Embedding => 2,
        }
    }
}

/// One value per [`Capability`], indexed by it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PerCapability<T>([T; 3]);

impl<T> PerCapability<T> {
    /// The value of each capability, made by `f`.
    pub(crate) fn from_fn(mut f: impl FnMut(Capability) -> T) -> Self {
        PerCapability(Capability::ALL.map(&mut f))
    }

    /// The value for `capability`.
    pub(crate) fn get(&self, capability: Capability) -> &T {
        &self.0[capability.index()]
    }

    /// Replaces the value for `capability`.
    pub(crate) fn set(&mut self, capability: Capability, value: T) {
        self.0[capability.index()] = value;
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Capability::Chat => "chat",
            Capability::Transcription => "transcription",
            Capability::Embedding => "embedding",
        })
    }
}

/// What a provider can do.
///
/// # Examples
///
/// ```
/// use llm_failover::{Capabilities, Capability};
///
/// let chat_only = Capabilities { chat: true, ..Capabilities::default() };
/// assert!(chat_only.supports(Capability::Chat));
/// assert!(!chat_only.supports(Capability::Transcription));
/// assert!(!chat_only.supports(Capability::Embedding));
/// let none = Capabilities { chat: false, transcription: false, embedding: false };
/// assert_eq!(Capabilities::default(), none);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// Chat completions (and streaming).
    pub chat: bool,
    /// Speech to text.
    pub transcription: bool,
    /// Embedding vectors ([`Client::embed`](crate::Client::embed)).
    pub embedding: bool,
}

impl Capabilities {
    /// True when the provider offers `capability`.
    pub fn supports(&self, capability: Capability) -> bool {
        match capability {
            Capability::Chat => self.chat,
            Capability::Transcription => self.transcription,
            Capability::Embedding => self.embedding,
        }
    }
}

/// Where a credential came from; named in errors instead of the key itself.
///
/// # Examples
///
/// ```
/// use llm_failover::{Config, Credential, CredentialSource};
///
/// assert_eq!(Credential::new("sk-test").source(), &CredentialSource::Explicit);
///
/// # let config: Config = r#"
/// #     default_environment = "prod"
/// #     [environments.prod]
/// #     chat = ["openai"]
/// #     [providers.openai]
/// #     kind = "openai"
/// #     base_url = "https://api.openai.com/v1"
/// #     model = "gpt-4o-mini"
/// #     api_key_env = { prod = "OPENAI_API_KEY" }
/// # "#.parse()?;
/// // `api_key_env = { prod = "OPENAI_API_KEY" }` in providers.toml:
/// let key = config.credential("openai", "prod", &|_| Some("sk-test".to_owned()))?.unwrap();
/// assert_eq!(key.source(), &CredentialSource::Env("OPENAI_API_KEY".to_owned()));
/// assert_eq!(key.source().to_string(), "environment variable `OPENAI_API_KEY`");
/// # Ok::<(), llm_failover::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CredentialSource {
    /// Read from this environment variable.
    Env(String),
    /// Passed in code (builder or per-request override).
    Explicit,
    /// Read from this file (`key_file` in `providers.toml`: a service account's JSON key, a
    /// mounted secret).
    File(std::path::PathBuf),
}

impl fmt::Display for CredentialSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CredentialSource::Env(var) => write!(f, "environment variable `{var}`"),
            CredentialSource::Explicit => f.write_str("credential passed in code"),
            CredentialSource::File(path) => write!(f, "key file `{}`", path.display()),
        }
    }
}

/// An API key and where it came from. `Debug` never shows the key.
///
/// # Examples
///
/// ```
/// use llm_failover::Credential;
///
/// let key = Credential::new("sk-test-123");
/// assert!(!format!("{key:?}").contains("sk-test-123"));
/// ```
#[derive(Clone)]
pub struct Credential {
    secret: SecretString,
    /// More than one key: the parts a signing provider needs (`None`: a key alone).
    parts: Option<Arc<CredentialParts>>,
    source: CredentialSource,
}

/// What a credential holds beyond one key: the parts a provider that signs its requests or
/// fetches its own tokens needs. `Debug` shows none of the secret parts.
///
/// # Examples
///
/// ```
/// use llm_failover::{Credential, CredentialParts};
///
/// let aws = Credential::aws("AKIAEXAMPLE", "wJalrEXAMPLEKEY", Some("FwoGEXAMPLETOKEN".into()));
/// let Some(CredentialParts::Aws { access_key_id, .. }) = aws.parts() else { panic!() };
/// assert_eq!(access_key_id, "AKIAEXAMPLE");
/// let shown = format!("{aws:?}");
/// assert!(!shown.contains("wJalrEXAMPLEKEY") && !shown.contains("FwoGEXAMPLETOKEN"));
/// // Every secret part, for an error message to be scrubbed of.
/// assert_eq!(aws.secrets().count(), 2);
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub enum CredentialParts {
    /// AWS credentials for SigV4: an access key id, its secret access key (the credential's
    /// key), and the session token of temporary credentials.
    Aws {
        /// The access key id (`AKIA…`, `ASIA…`): it names the key, and is sent.
        access_key_id: String,
        /// The session token of temporary credentials (STS), sent as `x-amz-security-token`.
        session_token: Option<SecretString>,
    },
}

impl fmt::Debug for CredentialParts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CredentialParts::Aws { session_token, .. } => f
                .debug_struct("Aws")
                .field("access_key_id", &"[redacted]")
                .field(
                    "session_token",
                    &session_token.as_ref().map(|_| "[redacted]"),
                )
                .finish(),
        }
    }
}

impl Credential {
    /// A key passed in code (e.g. a customer's own key).
    pub fn new(key: impl Into<String>) -> Self {
        Credential {
            secret: SecretString::from(key.into()),
            parts: None,
            source: CredentialSource::Explicit,
        }
    }

    /// AWS credentials passed in code: an access key id, its secret access key and, for
    /// temporary credentials, a session token. [`expose`](Self::expose) is the secret
    /// access key; [`parts`](Self::parts) the rest.
    pub fn aws(
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
        session_token: Option<String>,
    ) -> Self {
        Credential {
            secret: SecretString::from(secret_access_key.into()),
            parts: Some(Arc::new(CredentialParts::Aws {
                access_key_id: access_key_id.into(),
                session_token: session_token.map(SecretString::from),
            })),
            source: CredentialSource::Explicit,
        }
    }

    /// AWS credentials read from environment variables; `var` names the secret's.
    pub(crate) fn aws_from_env(
        access_key_id: String,
        secret_access_key: String,
        session_token: Option<String>,
        var: String,
    ) -> Self {
        let mut c = Self::aws(access_key_id, secret_access_key, session_token);
        c.source = CredentialSource::Env(var);
        c
    }

    /// A key read from environment variable `var`.
    pub(crate) fn from_env(key: String, var: impl Into<String>) -> Self {
        Credential {
            secret: SecretString::from(key),
            parts: None,
            source: CredentialSource::Env(var.into()),
        }
    }

    /// A key read from the file at `path` (its contents, surrounding whitespace trimmed).
    pub(crate) fn from_file(key: String, path: impl Into<std::path::PathBuf>) -> Self {
        Credential {
            secret: SecretString::from(key),
            parts: None,
            source: CredentialSource::File(path.into()),
        }
    }

    /// The parts beyond the key, when the credential has them.
    pub fn parts(&self) -> Option<&CredentialParts> {
        self.parts.as_deref()
    }

    /// Every secret the credential holds (the key, a session token), non-empty ones: what
    /// an error message is scrubbed of. Never log them.
    pub fn secrets(&self) -> impl Iterator<Item = &str> {
        let token = match self.parts.as_deref() {
            Some(CredentialParts::Aws { session_token, .. }) => session_token.as_ref(),
            None => None,
        };
        std::iter::once(self.expose())
            .chain(token.map(|t| t.expose_secret()))
            .filter(|s| !s.is_empty())
    }

    /// Where the key came from.
    pub fn source(&self) -> &CredentialSource {
        &self.source
    }

    /// The key itself, for adapters building headers. Never log it.
    pub fn expose(&self) -> &str {
        self.secret.expose_secret()
    }
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credential")
            .field("key", &"[redacted]")
            .field("parts", &self.parts)
            .field("source", &self.source)
            .finish()
    }
}
