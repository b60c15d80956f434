//! Each adapter's response parsers, success and error paths: `chat_response`,
//! `transcription_response`, `error` and `limit_report`, on a `RawResponse` whose status,
//! headers and body come from the input.
//!
//! Input: adapter byte (OpenAI, Azure, Anthropic, Gemini, Deepgram), dialect byte, operation
//! byte (chat or transcription), status (u16, mapped to 100..=599), content-type byte, header
//! count byte and header records (see `fuzz_support::header_map`), then the body.
#![no_main]

use fuzz_support::{adapters, check_error, check_report, header_map, now, Bytes, DIALECTS};
use libfuzzer_sys::fuzz_target;
use llm_failover::http::RawResponse;
use reqwest::header::{HeaderValue, CONTENT_TYPE};

const CONTENT_TYPES: [&str; 6] = [
    "application/json",
    "application/json; charset=utf-8",
    "text/plain; charset=utf-8",
    "text/html",
    "text/event-stream",
    "",
];

fuzz_target!(|data: &[u8]| {
    let mut input = Bytes::new(data);
    let adapter_index = usize::from(input.byte()) % 5;
    let dialect = DIALECTS[usize::from(input.byte()) % DIALECTS.len()];
    let transcription = input.byte() % 2 == 1;
    let status = 100 + input.u16() % 500;
    let content_type = CONTENT_TYPES[usize::from(input.byte()) % CONTENT_TYPES.len()];
    let header_count = usize::from(input.byte() % 8);
    let mut headers = header_map(&mut input, header_count);
    if !content_type.is_empty() {
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    }
    let body = input.rest().to_vec();

    let adapter = adapters(dialect)[adapter_index].clone();
    let now = now();
    check_report(&adapter.limit_report(&headers, now), now);
    let _ = adapter.request_id(&headers);
    let raw = RawResponse::new(status, headers, body);
    if raw.is_success() {
        let model = "m";
        if transcription {
            if let Err(e) = adapter.transcription_response(raw, model) {
                check_error(&e);
            }
        } else if let Err(e) = adapter.chat_response(raw, model) {
            check_error(&e);
        }
    } else {
        let e = adapter.error(&raw, now);
        check_error(&e);
        assert!(!e.kind().as_str().is_empty());
    }
});
