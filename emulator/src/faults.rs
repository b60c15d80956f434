//! Faults injected on request: an exact script per provider (for tests) or a seeded random mix
//! (for soaks).
//!
//! Each request to a provider first takes the next scripted step, if any, else draws from the
//! mix. "Early" faults ([`Fault::is_early`]) stand for the infrastructure in front of the
//! model (rate limiter, gateway, network) and answer before authentication and validation;
//! the others change an answer that is otherwise normal (and charged). A step consumed by a
//! request that fails before its fault applies (a 401, say) is not applied; the request log
//! shows every fault that was.
//!
//! In TOML and JSON a fault is a table tagged by `kind`:
//!
//! ```toml
//! [providers.openai.faults]
//! script = [
//!   { kind = "status", status = 503 },
//!   { kind = "rate_limit", retry_after = { seconds = 1 } },
//!   { kind = "pass" },
//! ]
//! seed = 7
//! mix = [
//!   { p = 0.05, kind = "rate_limit" },
//!   { p = 0.01, kind = "reset" },
//! ]
//! ```

use std::collections::VecDeque;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// What a 429's `Retry-After` (and the delay in its body) says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RetryAfter {
    /// Computed from the bucket state (one second when no limit is configured).
    #[default]
    Bucket,
    /// No `Retry-After`, and no delay in the body either.
    Absent,
    /// Delay-seconds.
    Seconds(u64),
    /// An HTTP-date this many seconds ahead.
    HttpDate(u64),
    /// Text that is neither (`soon`).
    Invalid,
    /// An HTTP-date an hour in the past.
    Past,
    /// An absurd delay (999999999 seconds, ~31 years).
    Huge,
}

/// One injected fault.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Fault {
    /// No fault: a normal answer (a script step that lets one request through).
    Pass,
    /// 429 in the provider's format (OpenAI `rate_limit_exceeded`, Anthropic
    /// `rate_limit_error`, Gemini `RESOURCE_EXHAUSTED`, Azure code "429").
    RateLimit {
        /// The `Retry-After` form.
        #[serde(default)]
        retry_after: RetryAfter,
    },
    /// Out of credit: OpenAI 429 `insufficient_quota`, Anthropic 400 "credit balance is too
    /// low", Gemini 429 with a quota of 0, Deepgram 402.
    InsufficientQuota,
    /// A per-day limit exhausted: 429 naming the daily limit, `Retry-After` a (scaled) day.
    DailyQuota,
    /// This HTTP status with the provider's error body (500, 502, 503, 504, 408, …).
    Status {
        /// The status.
        status: u16,
    },
    /// Overloaded: Anthropic 529 `overloaded_error`, Gemini 503 `UNAVAILABLE`, others 503.
    Overloaded,
    /// Holds the request (past the client's timeout), then drops the connection.
    Hang {
        /// How long; the provider's `hang_ms` when absent.
        #[serde(default)]
        ms: Option<u64>,
    },
    /// Drops the TCP connection without a response (RST).
    Reset,
    /// The response stops mid-body (the connection is cut).
    Truncated,
    /// A complete response whose JSON does not parse.
    MalformedJson,
    /// An HTML error page, as a proxy in front of the API sends it.
    Html {
        /// The status (502 when absent).
        #[serde(default = "bad_gateway")]
        status: u16,
    },
    /// A normal answer after `ms` + up to `jitter_ms` milliseconds.
    Latency {
        /// Fixed part.
        ms: u64,
        /// Random part.
        #[serde(default)]
        jitter_ms: u64,
    },
    /// A stream that sends some content, then the provider's error event (a non-streaming
    /// request gets a truncated body instead).
    StreamError,
    /// A normal answer whose rate-limit headers (and `retry-after`) do not parse.
    MalformedHeaders,
}

fn bad_gateway() -> u16 {
    502
}

impl Fault {
    /// The name used in logs and in TOML (`kind`).
    pub fn name(&self) -> &'static str {
        match self {
            Fault::Pass => "pass",
            Fault::RateLimit { .. } => "rate_limit",
            Fault::InsufficientQuota => "insufficient_quota",
            Fault::DailyQuota => "daily_quota",
            Fault::Status { .. } => "status",
            Fault::Overloaded => "overloaded",
            Fault::Hang { .. } => "hang",
            Fault::Reset => "reset",
            Fault::Truncated => "truncated",
            Fault::MalformedJson => "malformed_json",
            Fault::Html { .. } => "html",
            Fault::Latency { .. } => "latency",
            Fault::StreamError => "stream_error",
            Fault::MalformedHeaders => "malformed_headers",
        }
    }

    /// True for faults that answer before authentication, validation and limits.
    pub fn is_early(&self) -> bool {
        matches!(
            self,
            Fault::RateLimit { .. }
                | Fault::InsufficientQuota
                | Fault::DailyQuota
                | Fault::Status { .. }
                | Fault::Overloaded
                | Fault::Hang { .. }
                | Fault::Reset
                | Fault::Html { .. }
        )
    }
}

/// A fault with its probability, in a random mix.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WeightedFault {
    /// Probability per request, 0..=1.
    pub p: f64,
    /// The fault.
    #[serde(flatten)]
    pub fault: Fault,
}

/// A provider's faults: a script consumed first, then a seeded random mix.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultConfig {
    /// Exact steps for the next requests, in order.
    #[serde(default)]
    pub script: Vec<Fault>,
    /// Random faults; probabilities add up to at most 1 (the rest pass).
    #[serde(default)]
    pub mix: Vec<WeightedFault>,
    /// Seed of the mix (the emulator's `seed` when absent).
    #[serde(default)]
    pub seed: Option<u64>,
}

impl FaultConfig {
    /// A script.
    pub fn script(steps: impl IntoIterator<Item = Fault>) -> Self {
        FaultConfig {
            script: steps.into_iter().collect(),
            ..Self::default()
        }
    }

    /// A seeded mix.
    pub fn mix(seed: u64, mix: impl IntoIterator<Item = (f64, Fault)>) -> Self {
        FaultConfig {
            mix: mix
                .into_iter()
                .map(|(p, fault)| WeightedFault { p, fault })
                .collect(),
            seed: Some(seed),
            ..Self::default()
        }
    }

    /// Checks the probabilities.
    ///
    /// # Errors
    ///
    /// A probability that is not finite or outside 0..=1, or a sum above 1.
    pub fn validate(&self) -> Result<(), String> {
        let mut sum = 0.0;
        for (i, w) in self.mix.iter().enumerate() {
            if !w.p.is_finite() || !(0.0..=1.0).contains(&w.p) {
                return Err(format!("mix[{i}].p = {} is not within 0..=1", w.p));
            }
            sum += w.p;
        }
        if sum > 1.0 + 1e-9 {
            return Err(format!("mix probabilities add up to {sum}, above 1"));
        }
        Ok(())
    }
}

/// The running fault state of one provider.
#[derive(Debug)]
pub(crate) struct FaultState {
    script: VecDeque<Fault>,
    mix: Vec<WeightedFault>,
    rng: SmallRng,
}

impl FaultState {
    pub(crate) fn new(cfg: &FaultConfig, default_seed: u64) -> Self {
        FaultState {
            script: cfg.script.iter().cloned().collect(),
            mix: cfg.mix.clone(),
            rng: SmallRng::seed_from_u64(cfg.seed.unwrap_or(default_seed)),
        }
    }

    /// True when a request could get a fault (so the hot path can skip the lock otherwise).
    pub(crate) fn is_active(&self) -> bool {
        !self.script.is_empty() || !self.mix.is_empty()
    }

    /// The fault for the next request, if any.
    pub(crate) fn next(&mut self) -> Option<Fault> {
        if let Some(f) = self.script.pop_front() {
            return Some(f);
        }
        if self.mix.is_empty() {
            return None;
        }
        let x: f64 = self.rng.random();
        let mut acc = 0.0;
        for w in &self.mix {
            acc += w.p;
            if x < acc {
                return Some(w.fault.clone());
            }
        }
        None
    }

    pub(crate) fn push_script(&mut self, steps: impl IntoIterator<Item = Fault>) {
        self.script.extend(steps);
    }

    pub(crate) fn clear_script(&mut self) {
        self.script.clear();
    }

    pub(crate) fn set_mix(&mut self, mix: Vec<WeightedFault>, seed: u64) {
        self.mix = mix;
        self.rng = SmallRng::seed_from_u64(seed);
    }

    /// `0..=max` milliseconds, from the same seeded generator.
    pub(crate) fn jitter(&mut self, max_ms: u64) -> Duration {
        if max_ms == 0 {
            return Duration::ZERO;
        }
        Duration::from_millis(self.rng.random_range(0..=max_ms))
    }

    pub(crate) fn pending(&self) -> usize {
        self.script.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_is_consumed_in_order_then_nothing() {
        let cfg = FaultConfig::script([
            Fault::Status { status: 503 },
            Fault::RateLimit {
                retry_after: RetryAfter::Seconds(1),
            },
            Fault::Pass,
        ]);
        let mut st = FaultState::new(&cfg, 0);
        assert_eq!(st.next(), Some(Fault::Status { status: 503 }));
        assert_eq!(
            st.next(),
            Some(Fault::RateLimit {
                retry_after: RetryAfter::Seconds(1)
            })
        );
        assert_eq!(st.next(), Some(Fault::Pass));
        assert_eq!(st.next(), None);
        assert!(!st.is_active());
    }

    #[test]
    fn a_seeded_mix_repeats_and_keeps_its_proportions() {
        let cfg = FaultConfig::mix(42, [(0.25, Fault::Reset), (0.25, Fault::Truncated)]);
        let draw = || {
            let mut st = FaultState::new(&cfg, 0);
            (0..4000).map(|_| st.next()).collect::<Vec<_>>()
        };
        let a = draw();
        assert_eq!(a, draw(), "same seed, same sequence");
        let resets = a.iter().filter(|f| **f == Some(Fault::Reset)).count();
        let none = a.iter().filter(|f| f.is_none()).count();
        assert!((850..1150).contains(&resets), "{resets}");
        assert!((1850..2150).contains(&none), "{none}");
    }

    #[test]
    fn parses_from_toml_tagged_by_kind() {
        let cfg: FaultConfig = toml::from_str(
            r#"
            script = [
              { kind = "status", status = 503 },
              { kind = "rate_limit", retry_after = { seconds = 1 } },
              { kind = "rate_limit", retry_after = "absent" },
              { kind = "html" },
              { kind = "hang" },
            ]
            seed = 3
            mix = [ { p = 0.5, kind = "latency", ms = 5, jitter_ms = 2 } ]
            "#,
        )
        .unwrap();
        assert_eq!(
            cfg.script,
            vec![
                Fault::Status { status: 503 },
                Fault::RateLimit {
                    retry_after: RetryAfter::Seconds(1)
                },
                Fault::RateLimit {
                    retry_after: RetryAfter::Absent
                },
                Fault::Html { status: 502 },
                Fault::Hang { ms: None },
            ]
        );
        assert_eq!(
            cfg.mix,
            vec![WeightedFault {
                p: 0.5,
                fault: Fault::Latency {
                    ms: 5,
                    jitter_ms: 2
                }
            }]
        );
    }

    #[test]
    fn rejects_probabilities_out_of_range() {
        for mix in [
            vec![(1.5, Fault::Reset)],
            vec![(-0.1, Fault::Reset)],
            vec![(f64::NAN, Fault::Reset)],
            vec![(0.6, Fault::Reset), (0.6, Fault::Truncated)],
        ] {
            assert!(FaultConfig::mix(1, mix).validate().is_err());
        }
        assert!(
            FaultConfig::mix(1, [(0.5, Fault::Reset), (0.5, Fault::Pass)])
                .validate()
                .is_ok()
        );
    }
}
