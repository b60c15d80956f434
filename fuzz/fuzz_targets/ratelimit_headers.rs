//! Every rate-limit header dialect, `Retry-After`, `retry-after-ms` and `x-should-retry`, read
//! from a header map built of known names (and a few arbitrary ones) with arbitrary values.
//!
//! Input: a dialect byte, then header records (see `fuzz_support::header_map`).
#![no_main]

use fuzz_support::{check_delay, check_report, header_map, now, Bytes, DIALECTS};
use libfuzzer_sys::fuzz_target;
use llm_failover::ratelimit::{parse_limit_headers, retry_after, should_retry};

fuzz_target!(|data: &[u8]| {
    let mut input = Bytes::new(data);
    let dialect = DIALECTS[usize::from(input.byte()) % DIALECTS.len()];
    let headers = header_map(&mut input, 64);
    let now = now();
    let report = parse_limit_headers(dialect, &headers, now);
    check_report(&report, now);
    let delay = retry_after(&headers, now);
    if let Some(d) = delay {
        check_delay(d);
    }
    assert_eq!(
        report.retry_after, delay,
        "the report's delay is retry_after's"
    );
    assert_eq!(report.should_retry, should_retry(&headers));
});
