//! Prices and what requests cost.
//!
//! No price is shipped as truth — prices change: a model costs what its provider's settings
//! say ([`ProviderSettings::price`](crate::ProviderSettings::price), or `prices` in
//! `providers.toml`), and a model without a price has no cost (`None`, never zero).
//!
//! Money is counted in whole nano-dollars ([`Cost`]): sums are exact, so a batch's total is
//! the sum of its lines' costs to the last digit. A request's cost is rounded up to the next
//! nano-dollar.
//!
//! # Examples
//!
//! ```
//! use llm_failover::price::Price;
//! use llm_failover::Usage;
//!
//! // gpt-4o-mini as OpenAI listed it: $0.15 per million input tokens, $0.60 output; half of
//! // that through the Batch API.
//! let price = Price::per_million_tokens(0.15, 0.60).with_batch(0.075, 0.30);
//! let usage = Usage::new(1_000, 500);
//! assert_eq!(price.of_usage(usage).nano_usd(), 450_000); // $0.00045
//! assert_eq!(price.of_batch_usage(usage).nano_usd(), 225_000);
//!
//! // Input read from the provider's prompt cache at its own price ($0.075 here):
//! let price = price.with_cached_input(0.075);
//! let usage = Usage::new(1_000, 500).with_cached_input(800);
//! // 200 × $0.15 + 800 × $0.075 + 500 × $0.60, per million
//! assert_eq!(price.of_usage(usage).nano_usd(), 390_000);
//! ```

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::usage::Usage;
use crate::error::{Error, Result};

/// An amount of money, in whole nano-dollars (USD × 10⁹): exact to add.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cost(u64);

impl Cost {
    /// Nothing.
    pub const ZERO: Cost = Cost(0);

    /// `nano_usd` nano-dollars.
    pub const fn from_nano_usd(nano_usd: u64) -> Self {
        Cost(nano_usd)
    }

    /// `usd` dollars, to the nearest nano-dollar (a figure checked finite and ≥ 0 by the
    /// caller: [`not_dollars`]).
    pub(crate) fn from_usd(usd: f64) -> Self {
        Cost((usd * 1e9).round() as u64)
    }

    /// In nano-dollars.
    pub const fn nano_usd(self) -> u64 {
        self.0
    }

    /// In dollars (for reading; add [`Cost`]s, not these).
    pub fn usd(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// The sum, saturating.
    #[must_use]
    pub const fn saturating_add(self, other: Cost) -> Cost {
        Cost(self.0.saturating_add(other.0))
    }
}

impl std::ops::AddAssign for Cost {
    fn add_assign(&mut self, other: Cost) {
        *self = self.saturating_add(other);
    }
}

impl std::iter::Sum for Cost {
    fn sum<I: Iterator<Item = Cost>>(iter: I) -> Cost {
        iter.fold(Cost::ZERO, Cost::saturating_add)
    }
}

/// Dollars to nine places: `$0.000450000`.
impl fmt::Display for Cost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "${}.{:09}",
            self.0 / 1_000_000_000,
            self.0 % 1_000_000_000
        )
    }
}

/// Written as dollars (a JSON number with at most nine decimals), read back exactly.
impl Serialize for Cost {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_f64(self.usd())
    }
}

impl<'de> Deserialize<'de> for Cost {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let usd = f64::deserialize(d)?;
        if !usd.is_finite() || usd < 0.0 {
            return Err(serde::de::Error::custom(format!(
                "a cost is a finite number of dollars ≥ 0, not {usd}"
            )));
        }
        Ok(Cost::from_usd(usd))
    }
}

/// What a model costs, in US dollars: per million tokens (input, output; input read from the
/// provider's prompt cache and the Batch API's where they differ) and, for speech-to-text,
/// per minute of audio.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Price {
    /// Per million input tokens.
    #[serde(default)]
    pub input: f64,
    /// Per million output tokens.
    #[serde(default)]
    pub output: f64,
    /// Per million input tokens through the provider's Batch API (`None`: as [`input`](Self::input)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_input: Option<f64>,
    /// Per million output tokens through the provider's Batch API (`None`: as [`output`](Self::output)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_output: Option<f64>,
    /// Per million input tokens read from the provider's prompt cache
    /// ([`Usage::cached_input_tokens`]; `None`: as [`input`](Self::input)). Cache writes
    /// (Anthropic's, Bedrock's) are counted at the input price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input: Option<f64>,
    /// Per million cached input tokens through the Batch API (`None`: as
    /// [`cached_input`](Self::cached_input), else as the batch input).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_cached_input: Option<f64>,
    /// Per minute of audio transcribed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio_per_minute: Option<f64>,
}

impl Price {
    /// `input` and `output` dollars per million tokens.
    pub fn per_million_tokens(input: f64, output: f64) -> Self {
        Price {
            input,
            output,
            ..Price::default()
        }
    }

    /// `usd` per minute of audio (speech-to-text).
    pub fn per_audio_minute(usd: f64) -> Self {
        Price {
            audio_per_minute: Some(usd),
            ..Price::default()
        }
    }

    /// The Batch API's prices per million tokens, where they differ (most providers: half).
    #[must_use]
    pub fn with_batch(mut self, input: f64, output: f64) -> Self {
        self.batch_input = Some(input);
        self.batch_output = Some(output);
        self
    }

    /// The price per million input tokens read from the provider's prompt cache, where it
    /// differs from the input price (OpenAI: a tenth to a half of it; Anthropic: a tenth).
    #[must_use]
    pub fn with_cached_input(mut self, usd: f64) -> Self {
        self.cached_input = Some(usd);
        self
    }

    /// The Batch API's price per million cached input tokens, where it differs.
    #[must_use]
    pub fn with_batch_cached_input(mut self, usd: f64) -> Self {
        self.batch_cached_input = Some(usd);
        self
    }

    /// `Config` naming `what` unless every figure is a finite number ≥ 0.
    pub(crate) fn check(&self, what: &str) -> Result<()> {
        match self.problem() {
            None => Ok(()),
            Some(p) => Err(Error::config(format!("{what}: {p}"))),
        }
    }

    /// What is wrong with this price, if anything: a figure that is not a finite number ≥ 0.
    pub(crate) fn problem(&self) -> Option<String> {
        let figures = [
            ("input", Some(self.input)),
            ("output", Some(self.output)),
            ("batch_input", self.batch_input),
            ("batch_output", self.batch_output),
            ("cached_input", self.cached_input),
            ("batch_cached_input", self.batch_cached_input),
            ("audio_per_minute", self.audio_per_minute),
        ];
        not_dollars("a price", &figures)
    }

    /// What `usage` costs through the live API: its uncached input at the input price, its
    /// cached input at the cached-input price, its output at the output price.
    pub fn of_usage(&self, usage: Usage) -> Cost {
        let cached = self.cached_input.unwrap_or(self.input);
        tokens(usage.uncached_input(), self.input)
            .saturating_add(tokens(usage.cached_input_tokens, cached))
            .saturating_add(tokens(usage.output_tokens, self.output))
    }

    /// What `usage` costs through the provider's Batch API.
    pub fn of_batch_usage(&self, usage: Usage) -> Cost {
        let input = self.batch_input.unwrap_or(self.input);
        let cached = self
            .batch_cached_input
            .or(self.cached_input)
            .unwrap_or(input);
        tokens(usage.uncached_input(), input)
            .saturating_add(tokens(usage.cached_input_tokens, cached))
            .saturating_add(tokens(
                usage.output_tokens,
                self.batch_output.unwrap_or(self.output),
            ))
    }

    /// What `audio` costs to transcribe (`None`: no price per minute).
    pub fn of_audio(&self, audio: Duration) -> Option<Cost> {
        let per_minute = self.audio_per_minute?;
        Some(nano(audio.as_secs_f64() / 60.0 * per_minute * 1e9))
    }
}

/// The first of `figures` that is not an amount of dollars (a finite number ≥ 0), said as
/// `what` ("a price", "an amount") it must be.
pub(crate) fn not_dollars(what: &str, figures: &[(&str, Option<f64>)]) -> Option<String> {
    figures.iter().find_map(|&(name, v)| {
        let v = v?;
        (!v.is_finite() || v < 0.0)
            .then(|| format!("`{name}` must be {what} in dollars, a finite number ≥ 0, not {v}"))
    })
}

/// `n` tokens at `usd_per_million`.
fn tokens(n: u64, usd_per_million: f64) -> Cost {
    // USD per million tokens = nano-USD per thousandth of a token.
    nano(n as f64 * usd_per_million * 1e3)
}

/// `nano_usd`, rounded up to a whole nano-dollar (a float's last bit of error forgiven).
fn nano(nano_usd: f64) -> Cost {
    if !nano_usd.is_finite() || nano_usd <= 0.0 {
        return Cost::ZERO;
    }
    let whole = nano_usd.floor();
    let up = if nano_usd - whole > 1e-6 {
        whole + 1.0
    } else {
        whole
    };
    Cost(up.min(u64::MAX as f64) as u64)
}

/// What a request was estimated to cost before it was sent (its admission estimate: input
/// tokens and `max_tokens` at the prices), and what it cost by the usage it reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Spend {
    /// Before sending: admission's estimate at the prices — the prompt counted, or a token
    /// per byte (an upper bound) where no token limit applies, and `max_tokens` for the
    /// answer. `None` where nothing was estimated (an answer of a
    /// provider's Batch API).
    pub estimated: Option<Cost>,
    /// After: the usage the provider reported, at the prices (`None`: it reported none).
    pub actual: Option<Cost>,
}

impl Spend {
    /// An answer that cost nothing (the cache's).
    pub(crate) fn free() -> Self {
        Spend {
            estimated: Some(Cost::ZERO),
            actual: Some(Cost::ZERO),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cost_is_whole_nano_dollars_rounded_up() {
        let p = Price::per_million_tokens(0.15, 0.60).with_batch(0.075, 0.30);
        // (input, output) → live, batch (nano-USD)
        let table = [
            ((0, 0), 0, 0),
            ((1, 0), 150, 75),
            ((1, 1), 750, 375),
            ((1_000, 500), 450_000, 225_000),
            ((1_000_000, 0), 150_000_000, 75_000_000),
        ];
        for ((i, o), live, batch) in table {
            let u = Usage::new(i, o);
            assert_eq!(p.of_usage(u).nano_usd(), live, "{i} {o}");
            assert_eq!(p.of_batch_usage(u).nano_usd(), batch, "{i} {o}");
        }
        // A fraction of a nano-dollar costs one.
        let cheap = Price::per_million_tokens(0.0375, 0.0);
        let one = Usage::new(1, 0);
        assert_eq!(cheap.of_usage(one).nano_usd(), 38);
        // No batch price: the live one.
        assert_eq!(cheap.of_batch_usage(one).nano_usd(), 38);
        // Audio: $0.006 a minute, 90 s.
        let whisper = Price::per_audio_minute(0.006);
        assert_eq!(
            whisper
                .of_audio(Duration::from_secs(90))
                .map(Cost::nano_usd),
            Some(9_000_000)
        );
        assert_eq!(p.of_audio(Duration::from_secs(90)), None);
    }

    #[test]
    fn cached_input_costs_its_own_price_live_and_in_batches() {
        let p = Price::per_million_tokens(1.25, 10.0).with_batch(0.625, 5.0);
        // (input, cached, output), with cached-input prices (live, batch) →
        // live, batch (nano-USD)
        let table = [
            // No cached price: a cached token costs an input token.
            ((2_000, 1_024, 100), (None, None), 3_500_000, 1_750_000),
            // Cached at a tenth, and a tenth of the batch input through batches.
            (
                (2_000, 1_024, 100),
                (Some(0.125), Some(0.0625)),
                1_220_000 + 128_000 + 1_000_000,
                610_000 + 64_000 + 500_000,
            ),
            // A cached live price and no batch one: batches cache at the live cached price.
            (
                (2_000, 1_024, 0),
                (Some(0.125), None),
                1_220_000 + 128_000,
                610_000 + 128_000,
            ),
            // Nothing cached: the cached price changes nothing.
            (
                (2_000, 0, 100),
                (Some(0.125), Some(0.0625)),
                3_500_000,
                1_750_000,
            ),
            // All cached.
            (
                (1_000, 1_000, 0),
                (Some(0.125), Some(0.0625)),
                125_000,
                62_500,
            ),
        ];
        for ((i, c, o), (cached, batch_cached), live, batch) in table {
            let mut price = p;
            price.cached_input = cached;
            price.batch_cached_input = batch_cached;
            let u = Usage::new(i, o).with_cached_input(c);
            assert_eq!(price.of_usage(u).nano_usd(), live, "{i} {c} {o} {cached:?}");
            assert_eq!(
                price.of_batch_usage(u).nano_usd(),
                batch,
                "{i} {c} {o} {batch_cached:?}"
            );
        }
        let bad = Price::per_million_tokens(1.0, 1.0).with_cached_input(-0.1);
        assert!(
            bad.problem().unwrap().contains("`cached_input`"),
            "{:?}",
            bad.problem()
        );
    }

    #[test]
    fn costs_add_exactly_and_read_back_as_written() {
        let parts = [Cost(150), Cost(450_000), Cost(1)];
        let sum: Cost = parts.iter().copied().sum();
        assert_eq!(sum, Cost(450_151));
        assert_eq!(sum.to_string(), "$0.000450151");
        for c in [Cost(0), Cost(1), Cost(450_151), Cost(12_345_678_901)] {
            let text = serde_json::to_string(&c).unwrap();
            assert_eq!(serde_json::from_str::<Cost>(&text).unwrap(), c, "{text}");
        }
        assert!(serde_json::from_str::<Cost>("-1").is_err());
    }

    #[test]
    fn a_price_must_be_a_finite_amount() {
        let table = [
            (Price::per_million_tokens(0.15, 0.6), true),
            (Price::per_million_tokens(-0.1, 0.6), false),
            (Price::per_million_tokens(f64::NAN, 0.6), false),
            (
                Price::per_million_tokens(0.1, 0.6).with_batch(f64::INFINITY, 0.0),
                false,
            ),
            (Price::per_audio_minute(-1.0), false),
        ];
        for (p, ok) in table {
            let got = p.check("provider `p` model `m`");
            assert_eq!(got.is_ok(), ok, "{p:?}: {got:?}");
            if let Err(e) = got {
                assert!(e.to_string().contains("model `m`"), "{e}");
            }
        }
    }
}
