//! One conformance table of refusals run against every adapter: what a status means when the
//! body says nothing a provider's format can read (a proxy's HTML page, an empty body, text,
//! bytes that are not UTF-8) is the same for every kind — the router decides on the kind,
//! so a 429 is throttling, a 401 a rejected key (terminal), a 5xx a server fault (retryable)
//! whichever wire format the provider speaks. Each adapter's own bodies stay in its tests;
//! this table is what they must all agree on, and a new kind is added to [`adapters`].

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use llm_failover::clock::Now;
use llm_failover::http::RawResponse;
use llm_failover::provider::Provider;
use llm_failover::provider::anthropic::Anthropic;
use llm_failover::provider::azure::Azure;
use llm_failover::provider::deepgram::Deepgram;
use llm_failover::provider::gemini::Gemini;
use llm_failover::provider::openai::OpenAi;
use llm_failover::{ErrorKind, ProviderId};
use reqwest::header::HeaderMap;

/// Every kind's adapter, as a client would build it (the wings' through the facade).
fn adapters() -> Vec<Arc<dyn Provider>> {
    let url = |u: &str| u.parse().unwrap();
    vec![
        Arc::new(OpenAi::new(
            ProviderId::new("openai"),
            url("https://api.openai.com/v1"),
        )),
        Arc::new(Azure::new(
            ProviderId::new("azure"),
            url("https://example.openai.azure.com/openai"),
            "2024-10-21",
        )),
        Arc::new(Anthropic::new(
            ProviderId::new("anthropic"),
            url("https://api.anthropic.com"),
        )),
        Arc::new(Gemini::new(
            ProviderId::new("gemini"),
            url("https://generativelanguage.googleapis.com/v1beta"),
        )),
        Arc::new(Deepgram::new(
            ProviderId::new("deepgram"),
            url("https://api.deepgram.com"),
        )),
        Arc::new(llm_failover::bedrock::Bedrock::new(
            ProviderId::new("bedrock"),
            url("https://bedrock-runtime.us-east-1.amazonaws.com"),
            "us-east-1",
        )),
        Arc::new(
            llm_failover::vertex::Vertex::new(ProviderId::new("vertex"), "p", "us-central1")
                .unwrap(),
        ),
    ]
}

fn now() -> Now {
    Now {
        instant: tokio::time::Instant::now(),
        wall: SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600),
    }
}

/// (status, body, the kind every adapter reads, terminal).
type Row = (u16, &'static [u8], ErrorKind, bool);

const HTML_502: &[u8] =
    b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>nginx</body></html>";

const TABLE: &[Row] = &[
    // Throttling, however it is worded, is retried after a wait, never given up for good.
    (429, b"Too Many Requests", ErrorKind::RateLimited, false),
    (429, b"", ErrorKind::RateLimited, false),
    // A key refused is terminal for that key: asking again cannot help.
    (401, b"Unauthorized", ErrorKind::Auth, true),
    (401, b"", ErrorKind::Auth, true),
    // A request the provider cannot take is terminal: the same request fails again.
    (400, b"Bad Request", ErrorKind::InvalidRequest, true),
    // Server faults are retried (a proxy's HTML page, an empty body, bytes that are not text).
    (500, b"Internal Server Error", ErrorKind::Server, false),
    (500, b"\xff\xfe\x00oops", ErrorKind::Server, false),
    (502, HTML_502, ErrorKind::Server, false),
    // A gateway's timeout is a timeout (retried), whichever provider is behind it.
    (504, b"", ErrorKind::Timeout, false),
];

#[tokio::test]
async fn every_adapter_reads_a_status_the_same_when_the_body_says_nothing() {
    let mut disagreements = Vec::new();
    for adapter in adapters() {
        for (status, body, kind, terminal) in TABLE {
            let mut headers = HeaderMap::new();
            headers.insert("content-type", "text/html".parse().unwrap());
            let raw = RawResponse::new(*status, headers, body.to_vec());
            let err = adapter.error(&raw, now());
            // (The status is the exchange's to attach, for every kind alike.)
            let got = (err.kind(), err.is_terminal());
            let want = (*kind, *terminal);
            if got != want {
                disagreements.push(format!(
                    "{} on {status} {:?}: got {got:?}, want {want:?} ({err})",
                    adapter.kind(),
                    String::from_utf8_lossy(body)
                ));
            }
            // Whatever the body held, the error is no panic and keeps the message short.
            assert!(err.to_string().len() < 2_000, "{}: {err}", adapter.kind());
        }
    }
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n"));
}
