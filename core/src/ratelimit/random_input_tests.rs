//! Random input: for a few thousand seeded random strings, no parser panics and every
//! answer keeps its invariants (no empty window, no reset in the past, no zero or absurd
//! delay).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use super::value::test_support::{ALL_DIALECTS, fixed_now};
use super::{
    LimitReport, MAX_SANE_RETRY_AFTER, delay_in_message, go_duration, parse_limit_headers,
    should_retry,
};
use crate::clock::Now;

/// Every header name any dialect reads.
const NAMES: [&str; 40] = super::RATE_LIMIT_HEADERS;

/// Pieces that steer random strings toward the parsers' interesting paths.
const FRAGMENTS: [&str; 40] = [
    "0",
    "1",
    "9",
    "60",
    "1717243230",
    "1717243230000",
    "99999999999999999999",
    ".",
    "-",
    "+",
    "e",
    "e400",
    "s",
    "m",
    "h",
    "ms",
    "us",
    "\u{b5}",
    "\u{3bc}",
    " ",
    "\t",
    ",",
    ";",
    "=",
    "\"",
    "\\",
    "r=",
    "t=",
    "q=",
    "w=",
    "NaN",
    "inf",
    "try again in ",
    "retry after ",
    " seconds",
    "\u{e9}",
    "\u{65e5}",
    "T12:00:30Z",
    "2024-06-01",
    "Sat, 01 Jun 2024 12:00:30 GMT",
];

fn random_text(rng: &mut StdRng) -> String {
    let mut s = String::new();
    for _ in 0..rng.random_range(0..12) {
        if rng.random_bool(0.2) {
            s.push(rng.random::<char>());
        } else {
            s.push_str(FRAGMENTS[rng.random_range(0..FRAGMENTS.len())]);
        }
    }
    s
}

fn assert_report_is_sane(report: &LimitReport, now: Now, input: &str) {
    if let Some(broken) = report.invariant_violation(now.instant) {
        panic!("{broken} for {input:?}");
    }
}

#[test]
fn thousands_of_random_strings_never_panic_any_parser() {
    let now = fixed_now();
    let mut rng = StdRng::seed_from_u64(0x5eed_1e55);
    for i in 0..3_000 {
        let text = random_text(&mut rng);
        let _ = go_duration(&text);
        if let Some(d) = delay_in_message(&text) {
            assert!(
                !d.is_zero() && d <= MAX_SANE_RETRY_AFTER,
                "{d:?} for {text:?}"
            );
        }
        // As a header value: the text itself, or its bytes plus a few random ones (which
        // may not be UTF-8) every other time.
        let mut raw: Vec<u8> = text.as_bytes().to_vec();
        if i % 2 == 1 {
            raw.extend((0..rng.random_range(1..4)).map(|_| rng.random::<u8>()));
        }
        let Ok(value) = HeaderValue::from_bytes(&raw) else {
            continue;
        };
        // Every name at once, and one name alone (so the fallbacks run too); the dialects
        // take turns to keep the test fast.
        let mut every = HeaderMap::new();
        for name in NAMES {
            every.insert(HeaderName::from_static(name), value.clone());
        }
        let mut one = HeaderMap::new();
        one.insert(
            HeaderName::from_static(NAMES[rng.random_range(0..NAMES.len())]),
            value,
        );
        let dialect = ALL_DIALECTS[i % ALL_DIALECTS.len()];
        for map in [&every, &one] {
            assert_report_is_sane(&parse_limit_headers(dialect, map, now), now, &text);
            let _ = should_retry(map);
        }
    }
}
