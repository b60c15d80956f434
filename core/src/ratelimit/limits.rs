//! Configured limits: what the user says a provider allows.

use std::num::NonZeroU64;

/// Stated limits for one provider and model. `None` means "learn it from the headers".
///
/// # Examples
///
/// ```
/// use llm_failover::ratelimit::Limits;
/// use llm_failover::ProviderSettings;
///
/// let limits = Limits::none().with_rpm(500).with_tpm(200_000);
/// assert_eq!(limits.rpm.map(|n| n.get()), Some(500));
/// assert!(limits.limits_tokens());
/// assert_eq!(limits.with_tpm(0), Limits::none().with_rpm(500)); // 0 clears a limit
///
/// let settings = ProviderSettings::new().limits(limits);
/// # let _ = settings;
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Requests per minute.
    pub rpm: Option<NonZeroU64>,
    /// Tokens (input + output) per minute.
    pub tpm: Option<NonZeroU64>,
    /// Requests per day.
    pub rpd: Option<NonZeroU64>,
    /// Tokens per day.
    pub tpd: Option<NonZeroU64>,
    /// Seconds of audio per hour (speech-to-text providers that state one, e.g. Groq ASH).
    pub audio_seconds_per_hour: Option<NonZeroU64>,
}

impl Limits {
    /// No stated limits.
    pub fn none() -> Self {
        Self::default()
    }

    /// Sets requests per minute (0 clears it).
    #[must_use]
    pub fn with_rpm(mut self, rpm: u64) -> Self {
        self.rpm = NonZeroU64::new(rpm);
        self
    }

    /// Sets tokens per minute (0 clears it).
    #[must_use]
    pub fn with_tpm(mut self, tpm: u64) -> Self {
        self.tpm = NonZeroU64::new(tpm);
        self
    }

    /// Sets requests per day (0 clears it).
    #[must_use]
    pub fn with_rpd(mut self, rpd: u64) -> Self {
        self.rpd = NonZeroU64::new(rpd);
        self
    }

    /// Sets tokens per day (0 clears it).
    #[must_use]
    pub fn with_tpd(mut self, tpd: u64) -> Self {
        self.tpd = NonZeroU64::new(tpd);
        self
    }

    /// Sets seconds of audio per hour (0 clears it).
    #[must_use]
    pub fn with_audio_seconds_per_hour(mut self, seconds: u64) -> Self {
        self.audio_seconds_per_hour = NonZeroU64::new(seconds);
        self
    }

    /// Whether tokens are limited (per minute or per day): admission then needs a token count.
    pub fn limits_tokens(&self) -> bool {
        self.tpm.is_some() || self.tpd.is_some()
    }
}
