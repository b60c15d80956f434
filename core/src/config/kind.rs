//! The provider kinds' registry: one row per kind.
//!
//! Everything the SDK knows of a kind outside its adapter is its row (a [`Kit`], in
//! [`ProviderKind::kit`]): its name in `providers.toml`, what it can do, the `api_version`
//! rule, and the header dialect its answers state limits in. The configuration's checks and
//! [`ProviderKind`]'s methods read the row; none matches on the kind. The adapter is the
//! kind's folder under `provider/`; its factory is the row's other half, in
//! [`from_config`](crate::provider::from_config) (the adapters sit above the configuration,
//! which cannot name them).
//!
//! What an adapter needs beyond building a body and reading an answer is a hook of the
//! [`Provider`](crate::provider::Provider) trait with a default: `finish` after the body is
//! complete (the extra body merged: where a request is signed), and `frames` for a stream
//! framed otherwise than as server-sent events.
//!
//! Adding a kind is one folder (the adapter) and one row: its variant and its arm in
//! [`ProviderKind::kit`] here, and its factory's arm in `from_config`.

use std::fmt;

use crate::id::Capabilities;
use crate::ratelimit::HeaderDialect;

/// The wire format a provider speaks (`kind = "…"` in `providers.toml`).
///
/// # Examples
///
/// ```
/// use llm_failover::config::ProviderKind;
/// use llm_failover::Capability;
///
/// let kind = ProviderKind::from_name("deepgram").unwrap();
/// assert_eq!(kind, ProviderKind::Deepgram);
/// assert_eq!(kind.as_str(), "deepgram");
/// assert!(kind.capabilities().supports(Capability::Transcription));
/// assert!(!kind.capabilities().supports(Capability::Chat));
/// assert_eq!(ProviderKind::from_name("cohere"), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProviderKind {
    /// OpenAI and every OpenAI-compatible host (Groq, Together, OpenRouter, DeepSeek,
    /// Mistral, Fireworks, xAI, vLLM, Ollama): chat, Whisper-style transcription and
    /// embeddings.
    OpenAi,
    /// Azure OpenAI deployments.
    Azure,
    /// Anthropic Messages API.
    Anthropic,
    /// Google Gemini `generateContent`.
    Gemini,
    /// Deepgram speech-to-text (`/v1/listen`).
    Deepgram,
    /// AWS Bedrock's Converse API (SigV4-signed): the Bedrock wing (`llm-failover-bedrock`,
    /// the facade's `bedrock` feature) brings its adapter.
    Bedrock,
    /// Google Vertex AI, Gemini on Vertex (regional endpoints, OAuth 2 access tokens of a
    /// service account): the Vertex wing (`llm-failover-vertex`, the facade's `vertex`
    /// feature) brings its adapter.
    Vertex,
}

impl ProviderKind {
    /// Every kind, in documentation order.
    pub const ALL: [ProviderKind; 7] = [
        ProviderKind::OpenAi,
        ProviderKind::Azure,
        ProviderKind::Anthropic,
        ProviderKind::Gemini,
        ProviderKind::Deepgram,
        ProviderKind::Bedrock,
        ProviderKind::Vertex,
    ];

    /// The kind's registry row: the one place a kind is matched on.
    pub(crate) fn kit(self) -> &'static Kit {
        const ALL: Capabilities = Capabilities {
            chat: true,
            transcription: true,
            embedding: true,
        };
        const CHAT: Capabilities = Capabilities {
            chat: true,
            transcription: false,
            embedding: false,
        };
        const CHAT_EMBED: Capabilities = Capabilities {
            embedding: true,
            ..CHAT
        };
        match self {
            ProviderKind::OpenAi => &Kit {
                name: "openai",
                capabilities: ALL,
                api_version: ApiVersion::None,
                dialect: |host| match host {
                    "api.groq.com" => HeaderDialect::Groq,
                    // OpenRouter states its limits its own way (X-RateLimit-*, the body).
                    h if h == "openrouter.ai" || h.ends_with(".openrouter.ai") => {
                        HeaderDialect::Generic
                    }
                    _ => HeaderDialect::OpenAi,
                },
                credential: CredentialShape::Key,
            },
            ProviderKind::Azure => &Kit {
                name: "azure",
                capabilities: ALL,
                api_version: ApiVersion::Required {
                    what: "the api-version query value, e.g. \"2024-10-21\"",
                },
                dialect: |_| HeaderDialect::Azure,
                credential: CredentialShape::Key,
            },
            ProviderKind::Anthropic => &Kit {
                name: "anthropic",
                capabilities: CHAT,
                api_version: ApiVersion::Defaulted {
                    what: "anthropic-version",
                    default: "2023-06-01",
                },
                dialect: |_| HeaderDialect::Anthropic,
                credential: CredentialShape::Key,
            },
            ProviderKind::Gemini => &Kit {
                name: "gemini",
                capabilities: CHAT_EMBED,
                api_version: ApiVersion::None,
                dialect: |_| HeaderDialect::Generic,
                credential: CredentialShape::Key,
            },
            ProviderKind::Deepgram => &Kit {
                name: "deepgram",
                capabilities: Capabilities {
                    chat: false,
                    transcription: true,
                    embedding: false,
                },
                api_version: ApiVersion::None,
                dialect: |_| HeaderDialect::Generic,
                credential: CredentialShape::Key,
            },
            // Bedrock states no limits in headers: its throttling is learned from its 429s.
            ProviderKind::Bedrock => &Kit {
                name: "bedrock",
                capabilities: CHAT_EMBED,
                api_version: ApiVersion::None,
                dialect: |_| HeaderDialect::Generic,
                credential: CredentialShape::Aws,
            },
            // Vertex states no limits in headers either (a 429 RESOURCE_EXHAUSTED alone); its
            // project and location are read from the base URL by the wing's factory.
            ProviderKind::Vertex => &Kit {
                name: "vertex",
                capabilities: CHAT,
                api_version: ApiVersion::None,
                dialect: |_| HeaderDialect::Generic,
                credential: CredentialShape::Key,
            },
        }
    }

    /// The name written in `providers.toml`; also the adapter module's name.
    pub fn as_str(self) -> &'static str {
        self.kit().name
    }

    /// Parses a kind name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// What a provider of this kind can do: OpenAI-compatible hosts and Azure chat,
    /// transcribe and embed, Gemini and Bedrock chat and embed, Anthropic chats, Deepgram
    /// transcribes.
    pub fn capabilities(self) -> Capabilities {
        self.kit().capabilities
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One provider kind's registry row.
pub(crate) struct Kit {
    /// The name in `providers.toml` (`kind = "…"`).
    pub(crate) name: &'static str,
    pub(crate) capabilities: Capabilities,
    /// What `api_version` means for it.
    pub(crate) api_version: ApiVersion,
    /// The dialect its answers state limits in, for the base URL's host (lowercase): a host
    /// that speaks another one (Groq, OpenRouter behind the OpenAI format) is named here.
    pub(crate) dialect: fn(host: &str) -> HeaderDialect,
    /// The credential it signs or authenticates with.
    pub(crate) credential: CredentialShape,
}

/// What a kind's credential is, in `providers.toml`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CredentialShape {
    /// One key: `api_key_env` or `key_file` (an API key, a service account's key file).
    Key,
    /// AWS credentials, parts from variables: `aws_credentials_env`.
    Aws,
}

/// What a kind's `api_version` in `providers.toml` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ApiVersion {
    /// It takes none.
    None,
    /// Required: `what` it is, with an example (Azure's `api-version` query value).
    Required { what: &'static str },
    /// Optional, sent as `what`, `default` when not set (Anthropic's `anthropic-version`).
    Defaulted {
        what: &'static str,
        default: &'static str,
    },
}

impl ApiVersion {
    /// The header or query value it sets, when it takes one.
    pub(crate) fn what(self) -> Option<&'static str> {
        match self {
            ApiVersion::None => None,
            ApiVersion::Required { what } | ApiVersion::Defaulted { what, .. } => Some(what),
        }
    }
}

impl fmt::Debug for Kit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kit")
            .field("name", &self.name)
            .field("capabilities", &self.capabilities)
            .field("api_version", &self.api_version)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each row names its own kind, and the names are distinct: `from_name` finds the kind
    /// of each.
    #[test]
    fn every_kind_has_one_row_and_its_name_finds_it() {
        for kind in ProviderKind::ALL {
            assert_eq!(ProviderKind::from_name(kind.kit().name), Some(kind));
        }
        let mut names: Vec<&str> = ProviderKind::ALL.iter().map(|k| k.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ProviderKind::ALL.len());
    }

    /// The rows' capabilities, as the documentation states them.
    #[test]
    fn the_rows_say_what_each_kind_can_do() {
        let table = [
            (ProviderKind::OpenAi, true, true, true),
            (ProviderKind::Azure, true, true, true),
            (ProviderKind::Anthropic, true, false, false),
            (ProviderKind::Gemini, true, false, true),
            (ProviderKind::Deepgram, false, true, false),
            (ProviderKind::Bedrock, true, false, true),
            (ProviderKind::Vertex, true, false, false),
        ];
        for (kind, chat, transcription, embedding) in table {
            let c = kind.capabilities();
            assert_eq!(
                (c.chat, c.transcription, c.embedding),
                (chat, transcription, embedding),
                "{kind}"
            );
        }
    }

    /// The header dialect of each kind, by host.
    #[test]
    fn the_dialect_follows_the_kind_and_the_host() {
        let table = [
            (
                ProviderKind::OpenAi,
                "api.openai.com",
                HeaderDialect::OpenAi,
            ),
            (ProviderKind::OpenAi, "api.groq.com", HeaderDialect::Groq),
            (
                ProviderKind::OpenAi,
                "openrouter.ai",
                HeaderDialect::Generic,
            ),
            (
                ProviderKind::OpenAi,
                "eu.openrouter.ai",
                HeaderDialect::Generic,
            ),
            (
                ProviderKind::Azure,
                "x.openai.azure.com",
                HeaderDialect::Azure,
            ),
            (
                ProviderKind::Anthropic,
                "api.anthropic.com",
                HeaderDialect::Anthropic,
            ),
            (
                ProviderKind::Gemini,
                "generativelanguage.googleapis.com",
                HeaderDialect::Generic,
            ),
            (
                ProviderKind::Deepgram,
                "api.deepgram.com",
                HeaderDialect::Generic,
            ),
            (
                ProviderKind::Vertex,
                "us-central1-aiplatform.googleapis.com",
                HeaderDialect::Generic,
            ),
        ];
        for (kind, host, dialect) in table {
            assert_eq!((kind.kit().dialect)(host), dialect, "{kind} at {host}");
        }
    }
}
