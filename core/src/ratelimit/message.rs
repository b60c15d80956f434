//! Delays that only live in an error message's text.

// Internal: reachable from outside only with the `test-util` feature (tests, benches and
// fuzzers); without it every `pub` here is crate-private.
#![cfg_attr(not(feature = "test-util"), allow(unreachable_pub, dead_code))]

use std::time::Duration;

use super::duration::{decimal_prefix_in, go_duration_prefix};
use super::retry_after::sane_delay;

/// Phrases that introduce a delay, lower case. Each must be followed by whitespace and then
/// the delay.
const PHRASES: [&str; 4] = ["try again in", "try again after", "retry after", "retry in"];

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// Written-out units after a number and a space (`9 seconds`), longest first so that
/// `seconds` is not read as `s` followed by garbage.
const WORD_UNITS: [(&str, u128); 20] = [
    ("milliseconds", NANOS_PER_SEC / 1_000),
    ("millisecond", NANOS_PER_SEC / 1_000),
    ("seconds", NANOS_PER_SEC),
    ("minutes", 60 * NANOS_PER_SEC),
    ("second", NANOS_PER_SEC),
    ("minute", 60 * NANOS_PER_SEC),
    ("hours", 3_600 * NANOS_PER_SEC),
    ("days", 86_400 * NANOS_PER_SEC),
    ("secs", NANOS_PER_SEC),
    ("mins", 60 * NANOS_PER_SEC),
    ("hour", 3_600 * NANOS_PER_SEC),
    ("day", 86_400 * NANOS_PER_SEC),
    ("sec", NANOS_PER_SEC),
    ("min", 60 * NANOS_PER_SEC),
    ("hrs", 3_600 * NANOS_PER_SEC),
    ("ms", NANOS_PER_SEC / 1_000),
    ("hr", 3_600 * NANOS_PER_SEC),
    ("s", NANOS_PER_SEC),
    ("m", 60 * NANOS_PER_SEC),
    ("h", 3_600 * NANOS_PER_SEC),
];

/// Finds a delay stated only in an error message: the last resort when neither headers nor
/// a structured body say how long to wait.
///
/// Recognises, in any letter case, "try again in", "try again after", "retry after" and
/// "retry in" followed by either a Go-style duration (`18.642s`, `1m30.5s`, `20ms`, `6m0s`,
/// as OpenAI and Groq write it; `26.0s` as Gemini does) or a number and a unit word
/// (`9 seconds`, `86400 seconds`, `2 minutes`, as Azure OpenAI writes it). The first phrase
/// followed by a readable delay wins.
///
/// Returns `None` when there is no such phrase, or the delay is zero or longer than
/// [`MAX_SANE_RETRY_AFTER`](super::MAX_SANE_RETRY_AFTER). Never panics, whatever the text.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use llm_failover::ratelimit::delay_in_message;
///
/// let openai = "Rate limit reached for gpt-4o on tokens per min (TPM): Limit 30000, \
///               Used 29000, Requested 1500. Please try again in 1.2s.";
/// assert_eq!(delay_in_message(openai), Some(Duration::from_millis(1200)));
/// assert_eq!(
///     delay_in_message("Please retry after 9 seconds."),
///     Some(Duration::from_secs(9))
/// );
/// assert_eq!(delay_in_message("Please try again later."), None);
/// ```
pub fn delay_in_message(text: &str) -> Option<Duration> {
    // ASCII lowering keeps every byte offset, so slices stay on character boundaries.
    let lower = text.to_ascii_lowercase();
    let mut starts: Vec<usize> = PHRASES
        .iter()
        .flat_map(|phrase| {
            lower
                .match_indices(phrase)
                .map(move |(at, _)| at + phrase.len())
        })
        .collect();
    starts.sort_unstable();
    starts
        .into_iter()
        .find_map(|end| lower.get(end..).and_then(delay_after_phrase))
}

/// Reads `<whitespace><delay>` right after a phrase.
fn delay_after_phrase(rest: &str) -> Option<Duration> {
    let trimmed = rest.trim_start();
    if trimmed.len() == rest.len() {
        return None; // "retry inside" is not "retry in"
    }
    let delay = match go_duration_prefix(trimmed) {
        Some((d, _)) => d,
        None => number_and_word(trimmed)?,
    };
    sane_delay(delay)
}

/// `9 seconds`, `1.5 minutes`: a number, whitespace, and a unit word ending at a word
/// boundary.
fn number_and_word(s: &str) -> Option<Duration> {
    let (_, used) = decimal_prefix_in(s, 1)?;
    let number = s.get(..used)?;
    let after = s.get(used..)?;
    let word = after.trim_start();
    if word.len() == after.len() {
        return None;
    }
    let unit = WORD_UNITS.iter().find_map(|(name, nanos)| {
        let tail = word.strip_prefix(name)?;
        let at_boundary = !tail.starts_with(|c: char| c.is_alphanumeric());
        at_boundary.then_some(*nanos)
    })?;
    decimal_prefix_in(number, unit).map(|(d, _)| d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Option<Duration> {
        Some(Duration::from_millis(n))
    }

    fn secs(n: u64) -> Option<Duration> {
        Some(Duration::from_secs(n))
    }

    #[test]
    fn delays_in_provider_messages_are_found() {
        let cases: &[(&str, Option<Duration>)] = &[
            // https://platform.openai.com/docs/guides/rate-limits#error-mitigation
            // (429 message "… Please try again in 18.642s. Visit …")
            (
                "Rate limit reached for gpt-4 in organization org-abc on tokens per min. \
                 Limit: 10000 / min. Please try again in 18.642s. Visit \
                 https://platform.openai.com/account/rate-limits to learn more.",
                ms(18_642),
            ),
            ("Please try again in 1m30.5s.", ms(90_500)),
            ("Please try again in 6m0s.", secs(360)),
            ("Rate limit reached. Please try again in 20ms.", ms(20)),
            // https://console.groq.com/docs/rate-limits (429 body "… Please try again in 7.66s.")
            (
                "Rate limit reached for model `llama-3.3-70b-versatile` in organization \
                 `org_01` service tier `on_demand` on tokens per minute (TPM): Limit 6000, \
                 Used 5800, Requested 400. Please try again in 7.66s.",
                ms(7_660),
            ),
            // https://learn.microsoft.com/en-us/answers/questions/2140040/requests-to-the-chatcompletions-create-operation-u
            (
                "Requests to the ChatCompletions_Create Operation under Azure OpenAI API \
                 version 2024-10-01-preview have exceeded token rate limit of your current \
                 AIServices S0 pricing tier. Please retry after 37 seconds.",
                secs(37),
            ),
            ("Please retry after 9 seconds.", secs(9)),
            // Azure's exhausted daily quota: a day is returned, the router decides.
            ("Try again in 86400 seconds.", secs(86_400)),
            ("retry after 2 seconds", secs(2)),
            ("Retry after 1 second", secs(1)),
            ("RETRY AFTER 2 MINUTES", secs(120)),
            ("try again after 1.5 minutes", secs(90)),
            ("Please try again in 500 milliseconds", ms(500)),
            ("please try again in 1 hour", secs(3_600)),
            // https://ai.google.dev/gemini-api/docs/rate-limits (429 "… Please retry in 26.0s.")
            (
                "You exceeded your current quota. Please retry in 26.0s.",
                secs(26),
            ),
            (
                "Please retry in 26.484213s.",
                Some(Duration::from_micros(26_484_213)),
            ),
            // The first readable delay wins; an unreadable one is skipped.
            ("try again in a moment, or retry after 3s", secs(3)),
            ("retry in 2s, retry in 5s", secs(2)),
            // Multibyte text right before and after the phrase.
            ("réessayez — try again in 4s — 再試行", secs(4)),
            ("日本語try again in 5s", secs(5)),
        ];
        for (text, want) in cases {
            assert_eq!(delay_in_message(text), *want, "text {text:?}");
        }
    }

    #[test]
    fn messages_without_a_usable_delay_give_none() {
        let cases = [
            "",
            "Please try again later.",
            "You exceeded your current quota, please check your plan and billing details.",
            "try again in",
            "try again in ",
            "try again in soon",
            "try again in -5s",
            "try again in 5",
            "retry after 9",
            "retry after 9 sessions",
            "try again in 0s",
            "try again in 0 seconds",
            "try again in 1e400s",
            "try again in NaNs",
            // A number no duration can hold is garbage, not a delay.
            "try again in 99999999999999999999999999999h",
            "retry inside 5s",
            "retry after\u{b5}5s",
            "try again in \u{65e5}5s",
            "try again in 5 \u{79d2}",
        ];
        for text in cases {
            assert_eq!(delay_in_message(text), None, "text {text:?}");
        }
        // A valid delay beyond the maximum is the maximum, never "no delay".
        for text in ["try again in 31 days", "try again in 400 days"] {
            assert_eq!(
                delay_in_message(text),
                Some(super::super::MAX_SANE_RETRY_AFTER),
                "text {text:?}"
            );
        }
    }
}
