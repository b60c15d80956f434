//! One provider's configuration: wire format, key, models, limits, header style, faults.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::aws::{self, AwsCredentials, DEFAULT_REGION};
use crate::faults::FaultConfig;

/// The key every provider accepts unless its config says otherwise.
pub const DEFAULT_KEY: &str = "emulator-key";

/// The wire format a provider speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Kind {
    /// OpenAI (and OpenAI-compatible hosts): `/v1/chat/completions`, `/v1/audio/transcriptions`.
    #[serde(rename = "openai")]
    OpenAi,
    /// Azure OpenAI: `/openai/deployments/{deployment}/chat/completions?api-version=…`.
    Azure,
    /// Anthropic: `/v1/messages`.
    Anthropic,
    /// Gemini: `/v1beta/models/{model}:generateContent` and `:streamGenerateContent`.
    Gemini,
    /// AWS Bedrock Runtime: `/model/{modelId}/converse` and `/converse-stream`, signed with
    /// AWS Signature Version 4.
    Bedrock,
    /// Google Vertex AI (Gemini on Vertex):
    /// `/v1/projects/{project}/locations/{location}/publishers/google/models/{model}:generateContent`
    /// and the rest, with OAuth 2 access tokens from its `/token` endpoint.
    Vertex,
    /// Deepgram: `/v1/listen`.
    Deepgram,
}

impl Kind {
    /// The name used in TOML (`kind = "openai"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::OpenAi => "openai",
            Kind::Azure => "azure",
            Kind::Anthropic => "anthropic",
            Kind::Gemini => "gemini",
            Kind::Bedrock => "bedrock",
            Kind::Vertex => "vertex",
            Kind::Deepgram => "deepgram",
        }
    }

    /// The header style this provider uses unless configured otherwise.
    pub fn default_headers(self) -> HeaderStyle {
        match self {
            Kind::OpenAi => HeaderStyle::OpenAi,
            Kind::Azure => HeaderStyle::Azure,
            Kind::Anthropic => HeaderStyle::Anthropic,
            Kind::Gemini | Kind::Bedrock | Kind::Vertex | Kind::Deepgram => HeaderStyle::None,
        }
    }

    /// Where limits are kept unless configured otherwise: per model for the chat providers
    /// (OpenAI, Anthropic, Gemini, Vertex and Bedrock limit each model separately; an Azure deployment
    /// is one model), per project for Deepgram.
    pub fn default_scope(self) -> LimitScope {
        match self {
            Kind::Deepgram => LimitScope::Provider,
            _ => LimitScope::Model,
        }
    }

    /// The path after the prefix that the provider's official SDK appends to its base URL
    /// (see [`Emulator::base_url`](crate::Emulator::base_url)).
    pub(crate) fn base_path(self) -> &'static str {
        match self {
            Kind::OpenAi => "/v1",
            Kind::Azure
            | Kind::Anthropic
            | Kind::Gemini
            | Kind::Bedrock
            | Kind::Vertex
            | Kind::Deepgram => "",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which family of rate-limit headers responses carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum HeaderStyle {
    /// `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, Go-style reset durations,
    /// per minute.
    #[serde(rename = "openai")]
    OpenAi,
    /// Groq: the OpenAI names, but the request headers count per day (RPD) and the token
    /// headers per minute (TPM).
    Groq,
    /// OpenRouter: `X-RateLimit-{Limit,Remaining,Reset}` for requests, reset in epoch
    /// milliseconds; OpenRouter's own 429 body.
    #[serde(rename = "openrouter")]
    OpenRouter,
    /// Azure OpenAI: `x-ratelimit-remaining-{requests,tokens}`, `x-rate-limit-reset-tokens`
    /// in seconds, `retry-after-ms` + `retry-after` on 429.
    Azure,
    /// `anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}`, RFC 3339 resets.
    Anthropic,
    /// LiteLLM's proxy: `x-ratelimit-{limit,remaining}-{requests,tokens}` with no reset, no
    /// `Retry-After` and no delay in a 429's text.
    #[serde(rename = "litellm")]
    LiteLlm,
    /// No rate-limit headers (Gemini, Vertex, Bedrock, Deepgram), and for OpenAI-format providers no
    /// delay in a 429's message either: a provider (or proxy) that states nothing at all.
    /// Gemini keeps its `RetryInfo` in the body.
    None,
}

/// Where a provider keeps its buckets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum LimitScope {
    /// One set of buckets per model (deployment for Azure).
    Model,
    /// One set of buckets for the whole provider.
    Provider,
}

/// What the token bucket is charged once the answer is known.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ChargeMode {
    /// Admission charges prompt estimate + `max_tokens`; after the answer the unused part of
    /// `max_tokens` is given back, so the bucket ends up charged prompt + actual output.
    #[default]
    Actual,
    /// The admission charge (prompt estimate + `max_tokens`) stays.
    Estimate,
}

/// Rate limits of one provider (or one model). `None` = no limit.
///
/// Every limit is a continuously refilled bucket: capacity = the limit, refill = the limit
/// per window (a minute of [`EmulatorConfig::minute_ms`](super::EmulatorConfig::minute_ms), a day of 1440 such minutes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Limits {
    /// Requests per minute.
    pub rpm: Option<u64>,
    /// Tokens per minute (input estimate + `max_tokens`, see [`ChargeMode`]).
    pub tpm: Option<u64>,
    /// Requests per day.
    pub rpd: Option<u64>,
    /// Tokens per day.
    pub tpd: Option<u64>,
    /// Requests in flight at once (Deepgram limits concurrency, not rate).
    pub concurrency: Option<u32>,
}

impl Limits {
    /// No limits.
    pub fn none() -> Self {
        Self::default()
    }

    /// `rpm` requests and `tpm` tokens per minute.
    pub fn per_minute(rpm: u64, tpm: u64) -> Self {
        Limits {
            rpm: Some(rpm),
            tpm: Some(tpm),
            ..Self::default()
        }
    }

    /// Sets requests per minute.
    #[must_use]
    pub fn with_rpm(mut self, rpm: u64) -> Self {
        self.rpm = Some(rpm);
        self
    }

    /// Sets tokens per minute.
    #[must_use]
    pub fn with_tpm(mut self, tpm: u64) -> Self {
        self.tpm = Some(tpm);
        self
    }

    /// Sets requests per day.
    #[must_use]
    pub fn with_rpd(mut self, rpd: u64) -> Self {
        self.rpd = Some(rpd);
        self
    }

    /// Sets tokens per day.
    #[must_use]
    pub fn with_tpd(mut self, tpd: u64) -> Self {
        self.tpd = Some(tpd);
        self
    }

    /// Sets both per-day limits.
    #[must_use]
    pub fn with_daily(mut self, rpd: Option<u64>, tpd: Option<u64>) -> Self {
        self.rpd = rpd;
        self.tpd = tpd;
        self
    }

    /// Adds a concurrency limit.
    #[must_use]
    pub fn with_concurrency(mut self, concurrency: u32) -> Self {
        self.concurrency = Some(concurrency);
        self
    }

    /// True when no rate limit is set (concurrency aside).
    pub fn is_unlimited(&self) -> bool {
        self.rpm.is_none() && self.tpm.is_none() && self.rpd.is_none() && self.tpd.is_none()
    }
}

/// Added latency: `ms` plus a uniformly drawn `0..=jitter_ms`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Latency {
    /// Fixed part, in milliseconds.
    #[serde(default)]
    pub ms: u64,
    /// Random part, up to this many milliseconds.
    #[serde(default)]
    pub jitter_ms: u64,
}

/// One provider the emulator serves.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ProviderConfig {
    /// The path prefix (`openai` serves `/openai/v1/chat/completions`). Taken from the table
    /// name in TOML.
    #[serde(skip)]
    pub prefix: String,
    /// Wire format.
    pub kind: Kind,
    /// The one key accepted (Bedrock signs with its AWS credentials instead, Vertex takes OAuth
    /// access tokens).
    #[serde(default = "default_key")]
    pub key: String,
    /// Bedrock: the region requests are signed for; [`DEFAULT_REGION`] when absent.
    #[serde(default)]
    pub region: Option<String>,
    /// Bedrock: the access key id accepted; when absent, one derived from the prefix.
    #[serde(default)]
    pub access_key_id: Option<String>,
    /// Bedrock: the secret access key of `access_key_id`; when absent, one derived from the
    /// prefix.
    #[serde(default)]
    pub secret_access_key: Option<String>,
    /// Bedrock: a session token every request must carry in `x-amz-security-token`
    /// (temporary credentials); none when absent.
    #[serde(default)]
    pub session_token: Option<String>,
    /// Vertex: the project requests name in their path; [`DEFAULT_PROJECT`](super::DEFAULT_PROJECT)
    /// when absent (or the key file's).
    #[serde(default)]
    pub project: Option<String>,
    /// Vertex: a service-account JSON key file (as Google issues them) whose key signs the
    /// JWTs the token endpoint accepts; the emulator's demo key when absent.
    #[serde(default)]
    pub service_account_file: Option<PathBuf>,
    /// Models (Azure: deployments) served; empty = any model name is accepted.
    #[serde(default)]
    pub models: Vec<String>,
    /// Limits of each model (or of the provider, see `scope`).
    #[serde(default)]
    pub limits: Limits,
    /// Limits for particular models, replacing `limits` for them.
    #[serde(default)]
    pub model_limits: BTreeMap<String, Limits>,
    /// Per model or per provider; default per [`Kind::default_scope`].
    #[serde(default)]
    pub scope: Option<LimitScope>,
    /// Rate-limit header family; default per [`Kind::default_headers`].
    #[serde(default)]
    pub headers: Option<HeaderStyle>,
    /// How tokens are charged.
    #[serde(default)]
    pub charge: ChargeMode,
    /// `max_tokens` assumed for cost when a request does not say (OpenAI, Gemini).
    #[serde(default = "default_max_tokens")]
    pub default_max_tokens: u64,
    /// A "minute" for this provider, overriding [`EmulatorConfig::minute_ms`](super::EmulatorConfig::minute_ms).
    #[serde(default)]
    pub minute_ms: Option<u64>,
    /// Count each limit in fixed windows that start again at each boundary (LiteLLM's
    /// per-minute counters) instead of continuously refilled buckets.
    #[serde(default)]
    pub fixed_windows: bool,
    /// Latency added to every answer.
    #[serde(default)]
    pub latency: Latency,
    /// Pause between streamed chunks, in milliseconds.
    #[serde(default)]
    pub stream_chunk_ms: u64,
    /// How long a `hang` fault holds the request before dropping the connection.
    #[serde(default = "default_hang_ms")]
    pub hang_ms: u64,
    /// Serve this provider on its own port too (paths then start at the root).
    #[serde(default)]
    pub port: Option<u16>,
    /// Largest request body, replacing the provider's own cap (OpenAI audio 25 MB, Anthropic
    /// 32 MB, Gemini 20 MB, …); larger bodies get the provider's 413.
    #[serde(default)]
    pub max_body_bytes: Option<usize>,
    /// Scripted faults and a random fault mix.
    #[serde(default)]
    pub faults: FaultConfig,
}

fn default_key() -> String {
    DEFAULT_KEY.to_owned()
}

fn default_max_tokens() -> u64 {
    1024
}

fn default_hang_ms() -> u64 {
    30_000
}

impl ProviderConfig {
    /// A provider of `kind` under `prefix`, key [`DEFAULT_KEY`], no limits, no faults.
    pub fn new(prefix: impl Into<String>, kind: Kind) -> Self {
        ProviderConfig {
            prefix: prefix.into(),
            kind,
            key: default_key(),
            region: None,
            access_key_id: None,
            secret_access_key: None,
            session_token: None,
            project: None,
            service_account_file: None,
            models: Vec::new(),
            limits: Limits::default(),
            model_limits: BTreeMap::new(),
            scope: None,
            headers: None,
            charge: ChargeMode::default(),
            default_max_tokens: default_max_tokens(),
            minute_ms: None,
            fixed_windows: false,
            latency: Latency::default(),
            stream_chunk_ms: 0,
            hang_ms: default_hang_ms(),
            port: None,
            max_body_bytes: None,
            faults: FaultConfig::default(),
        }
    }

    /// An OpenAI provider under `prefix`.
    pub fn openai(prefix: impl Into<String>) -> Self {
        Self::new(prefix, Kind::OpenAi)
    }

    /// An Azure OpenAI resource under `prefix`.
    pub fn azure(prefix: impl Into<String>) -> Self {
        Self::new(prefix, Kind::Azure)
    }

    /// An Anthropic provider under `prefix`.
    pub fn anthropic(prefix: impl Into<String>) -> Self {
        Self::new(prefix, Kind::Anthropic)
    }

    /// A Gemini provider under `prefix`.
    pub fn gemini(prefix: impl Into<String>) -> Self {
        Self::new(prefix, Kind::Gemini)
    }

    /// An AWS Bedrock Runtime provider under `prefix`, with credentials derived from the
    /// prefix (see [`aws_credentials`](Self::aws_credentials)).
    pub fn bedrock(prefix: impl Into<String>) -> Self {
        Self::new(prefix, Kind::Bedrock)
    }

    /// A Google Vertex AI provider under `prefix`: project `emulator-project`, the demo
    /// service-account key (see [`Emulator::service_account_key`](crate::Emulator::service_account_key)).
    pub fn vertex(prefix: impl Into<String>) -> Self {
        Self::new(prefix, Kind::Vertex)
    }

    /// A Deepgram provider under `prefix`.
    pub fn deepgram(prefix: impl Into<String>) -> Self {
        Self::new(prefix, Kind::Deepgram)
    }

    /// Accepts `key` instead of [`DEFAULT_KEY`].
    #[must_use]
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.key = key.into();
        self
    }

    /// Bedrock: accepts requests signed with this access key id and secret access key
    /// instead of the ones derived from the prefix.
    #[must_use]
    pub fn with_aws_credentials(
        mut self,
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
    ) -> Self {
        self.access_key_id = Some(access_key_id.into());
        self.secret_access_key = Some(secret_access_key.into());
        self
    }

    /// Bedrock: requires this session token in `x-amz-security-token` (temporary
    /// credentials).
    #[must_use]
    pub fn with_session_token(mut self, token: impl Into<String>) -> Self {
        self.session_token = Some(token.into());
        self
    }

    /// Vertex: the project requests name (default [`DEFAULT_PROJECT`](super::DEFAULT_PROJECT)).
    #[must_use]
    pub fn with_project(mut self, project: impl Into<String>) -> Self {
        self.project = Some(project.into());
        self
    }

    /// Vertex: accepts JWTs signed by the key of this service-account JSON key file instead
    /// of the demo key (read when the emulator starts).
    #[must_use]
    pub fn with_service_account_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.service_account_file = Some(path.into());
        self
    }

    /// Bedrock: the region requests are signed for (default [`DEFAULT_REGION`]).
    #[must_use]
    pub fn with_region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// The AWS credentials a Bedrock provider accepts: the configured ones, else an access
    /// key id and secret derived from the prefix (the same prefix, the same credentials),
    /// the session token if one is configured, and the region ([`DEFAULT_REGION`] unless
    /// configured).
    pub fn aws_credentials(&self) -> AwsCredentials {
        AwsCredentials {
            access_key_id: self
                .access_key_id
                .clone()
                .unwrap_or_else(|| aws::derived_access_key_id(&self.prefix)),
            secret_access_key: self
                .secret_access_key
                .clone()
                .unwrap_or_else(|| aws::derived_secret_access_key(&self.prefix)),
            session_token: self.session_token.clone(),
            region: self
                .region
                .clone()
                .unwrap_or_else(|| DEFAULT_REGION.to_owned()),
        }
    }

    /// Serves only these models (deployments for Azure).
    #[must_use]
    pub fn with_models<S: Into<String>>(mut self, models: impl IntoIterator<Item = S>) -> Self {
        self.models = models.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the limits.
    #[must_use]
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets the limits of one model.
    #[must_use]
    pub fn with_model_limits(mut self, model: impl Into<String>, limits: Limits) -> Self {
        self.model_limits.insert(model.into(), limits);
        self
    }

    /// Keeps buckets per model or per provider.
    #[must_use]
    pub fn with_scope(mut self, scope: LimitScope) -> Self {
        self.scope = Some(scope);
        self
    }

    /// Sends this header family.
    #[must_use]
    pub fn with_headers(mut self, style: HeaderStyle) -> Self {
        self.headers = Some(style);
        self
    }

    /// Sets the charge mode.
    #[must_use]
    pub fn with_charge(mut self, charge: ChargeMode) -> Self {
        self.charge = charge;
        self
    }

    /// Counts every limit in fixed windows (see [`fixed_windows`](Self::fixed_windows)).
    #[must_use]
    pub fn with_fixed_windows(mut self) -> Self {
        self.fixed_windows = true;
        self
    }

    /// Sets this provider's minute length.
    #[must_use]
    pub fn with_minute_ms(mut self, minute_ms: u64) -> Self {
        self.minute_ms = Some(minute_ms);
        self
    }

    /// Adds latency to every answer.
    #[must_use]
    pub fn with_latency(mut self, ms: u64, jitter_ms: u64) -> Self {
        self.latency = Latency { ms, jitter_ms };
        self
    }

    /// Pauses between streamed chunks.
    #[must_use]
    pub fn with_stream_chunk_ms(mut self, ms: u64) -> Self {
        self.stream_chunk_ms = ms;
        self
    }

    /// How long a `hang` fault lasts.
    #[must_use]
    pub fn with_hang_ms(mut self, ms: u64) -> Self {
        self.hang_ms = ms;
        self
    }

    /// Serves this provider on its own port too.
    #[must_use]
    pub fn with_port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Caps request bodies at `bytes`.
    #[must_use]
    pub fn with_max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = Some(bytes);
        self
    }

    /// Sets the faults.
    #[must_use]
    pub fn with_faults(mut self, faults: FaultConfig) -> Self {
        self.faults = faults;
        self
    }

    /// The header style in effect.
    pub fn header_style(&self) -> HeaderStyle {
        self.headers.unwrap_or_else(|| self.kind.default_headers())
    }

    /// The limit scope in effect.
    pub fn limit_scope(&self) -> LimitScope {
        self.scope.unwrap_or_else(|| self.kind.default_scope())
    }

    /// The limits that apply to `model`.
    pub fn limits_for(&self, model: &str) -> Limits {
        self.model_limits.get(model).copied().unwrap_or(self.limits)
    }
}
