//! Durations as providers write them: Go-style (`6m0s`, `2m59.56s`, `12ms`), protobuf-JSON
//! (`"26s"`, `"0.5s"`) and plain decimal seconds or milliseconds (`1.5`, `250`).
//!
//! Everything is parsed by hand into exact integer nanoseconds (no float rounding: `59.56s` is
//! 59 s 560 ms), with checked arithmetic, so no input can panic or overflow.

// Internal: reachable from outside only with the `test-util` feature (tests, benches and
// fuzzers); without it every `pub` here is crate-private.
#![cfg_attr(not(feature = "test-util"), allow(unreachable_pub, dead_code))]

use std::time::Duration;

const NANOS_PER_SEC: u128 = 1_000_000_000;
const NANOS_PER_MILLI: u128 = 1_000_000;

/// The unit suffixes of a Go duration and their length in nanoseconds. Go accepts both the
/// micro sign (U+00B5) and the Greek small mu (U+03BC). `ms` comes before `m` so that `12ms`
/// is twelve milliseconds, not twelve minutes followed by garbage.
const GO_UNITS: [(&str, u128); 8] = [
    ("ns", 1),
    ("us", 1_000),
    ("\u{b5}s", 1_000),
    ("\u{3bc}s", 1_000),
    ("ms", NANOS_PER_MILLI),
    ("s", NANOS_PER_SEC),
    ("m", 60 * NANOS_PER_SEC),
    ("h", 3_600 * NANOS_PER_SEC),
];

/// Fraction digits beyond this many are below a nanosecond for every unit we accept and are
/// dropped (keeps the arithmetic inside `u128`).
const MAX_FRACTION_DIGITS: usize = 18;

/// Parses a Go-style duration (`1s`, `6m0s`, `12ms`, `2m59.56s`, `23h18m29.144s`, `0s`,
/// `1.5s`, `500us`, `500µs`, `10ns`, bare `0`), as OpenAI, Groq and most OpenAI-compatible
/// hosts send in `x-ratelimit-reset-*`. Also accepts the protobuf-JSON form Gemini uses in
/// `RetryInfo.retryDelay` (`26s`, `0.5s`, with or without the JSON quotes).
///
/// Returns `None` for anything else: negative values, an empty string, a number without a
/// unit, unknown units, embedded spaces, or a value that overflows [`Duration`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use llm_failover::ratelimit::go_duration;
///
/// assert_eq!(go_duration("6m0s"), Some(Duration::from_secs(360)));
/// assert_eq!(go_duration("12ms"), Some(Duration::from_millis(12)));
/// assert_eq!(go_duration("2m59.56s"), Some(Duration::from_millis(179_560)));
/// assert_eq!(go_duration("-1s"), None);
/// assert_eq!(go_duration("1.5"), None);
/// ```
pub fn go_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let s = s
        .strip_prefix('"')
        .and_then(|inner| inner.strip_suffix('"'))
        .unwrap_or(s);
    let s = s.strip_prefix('+').unwrap_or(s);
    if s == "0" {
        return Some(Duration::ZERO);
    }
    match go_duration_prefix(s)? {
        (d, used) if used == s.len() => Some(d),
        _ => None,
    }
}

/// The longest Go-style duration at the start of `s` and the number of bytes it spans, or
/// `None` when `s` does not start with `<number><unit>`. Used to read delays inside message
/// text, where the duration is followed by more words (`in 1m30.5s. Visit …`).
pub(super) fn go_duration_prefix(s: &str) -> Option<(Duration, usize)> {
    let mut total: u128 = 0;
    let mut pos = 0;
    while let Some(rest) = s.get(pos..) {
        let Some((number, used)) = Decimal::prefix(rest) else {
            break;
        };
        let after = rest.get(used..).unwrap_or_default();
        let Some((unit_len, unit)) = GO_UNITS
            .iter()
            .find(|(name, _)| after.starts_with(name))
            .map(|(name, nanos)| (name.len(), *nanos))
        else {
            break;
        };
        total = total.checked_add(number.scaled(unit)?)?;
        pos += used + unit_len;
    }
    if pos == 0 {
        return None;
    }
    Some((nanos_to_duration(total)?, pos))
}

/// A non-negative decimal number of seconds (`30`, `1.5`, `.5`), as in `Retry-After`
/// delay-seconds (RFC 9110 allows only digits; a fraction is tolerated) or Azure's bare-second
/// reset headers. Signs, exponents, `NaN`, `inf` and trailing garbage are rejected.
pub(super) fn decimal_seconds(s: &str) -> Option<Duration> {
    decimal_in(s, NANOS_PER_SEC)
}

/// A non-negative decimal number of milliseconds (`retry-after-ms: 250`).
pub(super) fn decimal_millis(s: &str) -> Option<Duration> {
    decimal_in(s, NANOS_PER_MILLI)
}

/// A non-negative decimal number at the start of `s`, in the unit `unit_nanos`: the duration
/// and the bytes consumed.
pub(super) fn decimal_prefix_in(s: &str, unit_nanos: u128) -> Option<(Duration, usize)> {
    let (number, used) = Decimal::prefix(s)?;
    Some((nanos_to_duration(number.scaled(unit_nanos)?)?, used))
}

/// `s` (trimmed) as a non-negative decimal number of seconds, in nanoseconds, when it is
/// nothing else: used to tell epoch seconds, epoch milliseconds and delta seconds apart by
/// magnitude without going through a float.
pub(super) fn decimal_nanos_of_seconds(s: &str) -> Option<u128> {
    let s = s.trim();
    match Decimal::prefix(s)? {
        (number, used) if used == s.len() => number.scaled(NANOS_PER_SEC),
        _ => None,
    }
}

fn decimal_in(s: &str, unit_nanos: u128) -> Option<Duration> {
    let s = s.trim();
    match decimal_prefix_in(s, unit_nanos)? {
        (d, used) if used == s.len() => Some(d),
        _ => None,
    }
}

/// Converts integer nanoseconds to a [`Duration`], or `None` past `Duration::MAX`.
pub(super) fn nanos_to_duration(nanos: u128) -> Option<Duration> {
    let secs = u64::try_from(nanos / NANOS_PER_SEC).ok()?;
    let sub = u32::try_from(nanos % NANOS_PER_SEC).ok()?;
    Some(Duration::new(secs, sub))
}

/// An unsigned decimal number as written: integer part and fraction digits.
struct Decimal<'a> {
    int: u128,
    fraction: &'a str,
}

impl<'a> Decimal<'a> {
    /// Reads `digits[.digits]` (also `.5` and `5.`) at the start of `s`; at least one digit.
    fn prefix(s: &'a str) -> Option<(Self, usize)> {
        let int_len = ascii_digits(s);
        let int_digits = s.get(..int_len)?;
        let mut int: u128 = 0;
        for b in int_digits.bytes() {
            int = int.checked_mul(10)?.checked_add(u128::from(b - b'0'))?;
        }
        let mut used = int_len;
        let mut fraction = "";
        if let Some(after_dot) = s.get(int_len..).and_then(|r| r.strip_prefix('.')) {
            let frac_len = ascii_digits(after_dot);
            if int_len + frac_len > 0 {
                fraction = after_dot.get(..frac_len)?;
                used += 1 + frac_len;
            }
        }
        if int_len + fraction.len() == 0 {
            return None;
        }
        Some((Decimal { int, fraction }, used))
    }

    /// The number times `unit` nanoseconds, truncated to whole nanoseconds.
    fn scaled(&self, unit: u128) -> Option<u128> {
        let whole = self.int.checked_mul(unit)?;
        let digits = self
            .fraction
            .get(..self.fraction.len().min(MAX_FRACTION_DIGITS))?;
        let mut numerator: u128 = 0;
        let mut denominator: u128 = 1;
        for b in digits.bytes() {
            numerator = numerator * 10 + u128::from(b - b'0');
            denominator *= 10;
        }
        whole.checked_add(numerator.checked_mul(unit)? / denominator)
    }
}

fn ascii_digits(s: &str) -> usize {
    s.bytes().take_while(u8::is_ascii_digit).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn go_durations_read_as_providers_send_them() {
        let cases: &[(&str, Duration)] = &[
            // https://platform.openai.com/docs/guides/rate-limits#rate-limits-in-headers
            // (sample values of x-ratelimit-reset-requests / -tokens)
            ("1s", secs(1)),
            ("6m0s", secs(360)),
            // https://community.openai.com/t/how-to-get-rate-limit-reset-time-for-response-api/1268905
            // (x-ratelimit-reset-requests: 12ms, x-ratelimit-reset-tokens: 9ms)
            ("12ms", ms(12)),
            ("9ms", ms(9)),
            // https://console.groq.com/docs/rate-limits#rate-limit-headers
            ("2m59.56s", ms(179_560)),
            ("7.66s", ms(7_660)),
            // Long token windows seen on OpenAI daily limits.
            ("23h18m29.144s", ms(((23 * 60 + 18) * 60 + 29) * 1000 + 144)),
            ("0s", secs(0)),
            ("0", secs(0)),
            ("1.5s", ms(1_500)),
            ("+1s", secs(1)),
            (".5s", ms(500)),
            ("1h", secs(3_600)),
            ("1h0m0s", secs(3_600)),
            ("500us", Duration::from_micros(500)),
            ("500\u{b5}s", Duration::from_micros(500)),
            ("500\u{3bc}s", Duration::from_micros(500)),
            ("10ns", Duration::from_nanos(10)),
            ("1.000000001s", Duration::new(1, 1)),
            // Digits below a nanosecond are truncated, not rounded.
            ("1.0000000019s", Duration::new(1, 1)),
            // https://cloud.google.com/apis/design/errors#retryinfo ("retryDelay": "26s"),
            // protobuf-JSON durations, with and without the JSON quotes.
            ("26s", secs(26)),
            ("0.5s", ms(500)),
            ("\"26s\"", secs(26)),
            ("  6m0s \t", secs(360)),
        ];
        for (input, want) in cases {
            assert_eq!(go_duration(input), Some(*want), "input {input:?}");
        }
    }

    #[test]
    fn go_durations_reject_bad_forms() {
        let cases = [
            "",
            " ",
            "-1s",
            "-0",
            "-6m0s",
            "1",
            "1.5",
            "s",
            "ms",
            ".s",
            "1 s",
            "1x",
            "1sx",
            "1e3s",
            "1e400",
            "NaN",
            "inf",
            "infs",
            "1..5s",
            "1s-1s",
            "\"26s",
            "99999999999999999999999999999999999999999h",
            "18446744073709551616s",
            "5124095576030432h",
        ];
        for input in cases {
            assert_eq!(go_duration(input), None, "input {input:?}");
        }
    }

    #[test]
    fn largest_representable_duration_is_accepted_and_one_more_second_is_not() {
        assert_eq!(
            go_duration(&format!("{}s", u64::MAX)),
            Some(Duration::from_secs(u64::MAX))
        );
        assert_eq!(go_duration(&format!("{}s1s", u64::MAX)), None);
    }

    #[test]
    fn prefix_stops_where_the_duration_ends() {
        let cases: &[(&str, Option<(Duration, usize)>)] = &[
            ("18.642s. Visit", Some((ms(18_642), 7))),
            ("1m30.5s.", Some((ms(90_500), 7))),
            ("20ms", Some((ms(20), 4))),
            ("9 seconds", None),
            ("seconds", None),
            ("", None),
        ];
        for (input, want) in cases {
            assert_eq!(go_duration_prefix(input), *want, "input {input:?}");
        }
    }

    #[test]
    fn decimal_seconds_and_millis_accept_only_plain_non_negative_numbers() {
        let good: &[(&str, Duration)] = &[
            ("30", secs(30)),
            ("1.5", ms(1_500)),
            (" 7 ", secs(7)),
            ("0", secs(0)),
            ("5.", secs(5)),
            (".25", ms(250)),
        ];
        for (input, want) in good {
            assert_eq!(decimal_seconds(input), Some(*want), "input {input:?}");
            assert_eq!(
                decimal_millis(input),
                Some(*want / 1000),
                "input {input:?} as ms"
            );
        }
        let bad = [
            "", "-1", "+1", "1e3", "1e400", "NaN", "nan", "inf", "-inf", "1s", "1,5", "0x10", ".",
            "1 2", "١",
        ];
        for input in bad {
            assert_eq!(decimal_seconds(input), None, "input {input:?}");
            assert_eq!(decimal_millis(input), None, "input {input:?}");
        }
    }

    #[test]
    fn epoch_sized_numbers_keep_every_digit() {
        assert_eq!(
            decimal_nanos_of_seconds("1741305600000"),
            Some(1_741_305_600_000 * NANOS_PER_SEC)
        );
        assert_eq!(decimal_nanos_of_seconds("1.5"), Some(1_500_000_000));
        assert_eq!(decimal_nanos_of_seconds("1.5x"), None);
    }
}
