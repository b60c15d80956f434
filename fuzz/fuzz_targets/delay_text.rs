//! Durations and delays written as text: Go-style durations (`x-ratelimit-reset-*`, Gemini's
//! `retryDelay`), delays inside error messages ("try again in 1.2s"), and the same text as a
//! `Retry-After` / `retry-after-ms` value.
//!
//! Input: arbitrary bytes, read as UTF-8 (lossily) for the text parsers and raw for headers.
#![no_main]

use fuzz_support::{check_delay, now};
use libfuzzer_sys::fuzz_target;
use llm_failover::ratelimit::{delay_in_message, go_duration, retry_after};
use reqwest::header::{HeaderMap, HeaderValue};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Some(d) = go_duration(&text) {
        // Whatever was accepted reads back exactly from its plain seconds form.
        let plain = format!("{}.{:09}s", d.as_secs(), d.subsec_nanos());
        assert_eq!(go_duration(&plain), Some(d), "{plain}");
    }
    if let Some(d) = delay_in_message(&text) {
        check_delay(d);
    }
    if let Ok(value) = HeaderValue::from_bytes(data) {
        let now = now();
        for name in ["retry-after", "retry-after-ms"] {
            let mut headers = HeaderMap::new();
            headers.insert(name, value.clone());
            if let Some(d) = retry_after(&headers, now) {
                check_delay(d);
            }
        }
    }
});
