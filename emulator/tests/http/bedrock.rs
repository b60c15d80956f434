//! AWS Bedrock Runtime over loopback HTTP: SigV4-signed `Converse` and `ConverseStream`
//! (docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html,
//! …/API_runtime_ConverseStream.html), the signing refusals, throttling without headers, and
//! the event stream decoded frame by frame with both CRCs checked
//! (smithy.io/2.0/aws/amazon-eventstream.html).
//!
//! The emulator's wall clock is fixed (a `TimeSource`) so requests are signed for a known
//! instant; one of them is a request exactly as botocore signed it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use llm_failover_emulator::{
    AwsCredentials, Emulator, Fault, Limits, ProviderConfig, RetryAfter, TimeSource,
};
use reqwest::RequestBuilder;
use ring::{digest, hmac};
use serde_json::{Value, json};

use crate::support::*;

const MODEL: &str = "anthropic.claude-3-haiku-20240307-v1:0";

/// The emulator's clock: 2026-01-02T03:04:05Z.
pub(crate) const AMZ_DATE: &str = "20260102T030405Z";

fn wall() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_767_323_045)
}

pub(crate) async fn start(provider: ProviderConfig) -> Emulator {
    Emulator::builder()
        .provider(provider)
        .time_source(TimeSource::new(|| (tokio::time::Instant::now(), wall())))
        .start()
        .await
        .unwrap()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn sha256(data: &[u8]) -> String {
    hex(digest::digest(&digest::SHA256, data).as_ref())
}

fn hmac256(key: &[u8], data: &str) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data.as_bytes())
        .as_ref()
        .to_vec()
}

/// Each byte outside `A-Za-z0-9-_.~/` as `%XX`: the path, already encoded once, encoded
/// again, as SigV4 wants it for every service but S3.
fn encode_again(path: &str) -> String {
    path.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// `POST {base}/model/{model}/{op}`, signed with SigV4 (service `bedrock`) at `amz_date`
/// with `creds` — this test's own signer, written from the AWS documentation
/// (docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html).
fn signed(
    emu: &Emulator,
    op: &str,
    body: &Value,
    creds: &AwsCredentials,
    amz_date: &str,
) -> RequestBuilder {
    signed_for(emu, MODEL, op, body, creds, amz_date)
}

/// `POST {base}/model/{model}/{op}` of the `bedrock` provider, signed as [`signed`] signs.
pub(crate) fn signed_for(
    emu: &Emulator,
    model: &str,
    op: &str,
    body: &Value,
    creds: &AwsCredentials,
    amz_date: &str,
) -> RequestBuilder {
    let url = format!(
        "{}/model/{}/{op}",
        emu.base_url("bedrock"),
        model.replace(':', "%3A")
    );
    let parsed = reqwest::Url::parse(&url).unwrap();
    let host = format!("{}:{}", parsed.host_str().unwrap(), parsed.port().unwrap());
    let payload = serde_json::to_vec(body).unwrap();
    let mut headers = vec![
        ("content-type", "application/json".to_owned()),
        ("host", host),
        ("x-amz-date", amz_date.to_owned()),
    ];
    if let Some(t) = &creds.session_token {
        headers.push(("x-amz-security-token", t.clone()));
    }
    let names: Vec<&str> = headers.iter().map(|(n, _)| *n).collect();
    let canonical_headers: String = headers.iter().map(|(n, v)| format!("{n}:{v}\n")).collect();
    let canonical = format!(
        "POST\n{}\n\n{canonical_headers}\n{}\n{}",
        encode_again(parsed.path()),
        names.join(";"),
        sha256(&payload)
    );
    let date = &amz_date[..8];
    let scope = format!("{date}/{}/bedrock/aws4_request", creds.region);
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        sha256(canonical.as_bytes())
    );
    let key = [creds.region.as_str(), "bedrock", "aws4_request"]
        .iter()
        .fold(
            hmac256(format!("AWS4{}", creds.secret_access_key).as_bytes(), date),
            |k, part| hmac256(&k, part),
        );
    let signature = hex(&hmac256(&key, &to_sign));
    let mut req = client()
        .post(url)
        .header(
            "authorization",
            format!(
                "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={}, Signature={signature}",
                creds.access_key_id,
                names.join(";")
            ),
        )
        .header("content-type", "application/json")
        .header("x-amz-date", amz_date);
    if let Some(t) = &creds.session_token {
        req = req.header("x-amz-security-token", t);
    }
    req.body(payload)
}

fn converse_body(prompt: &str) -> Value {
    json!({
        "messages": [{"role": "user", "content": [{"text": prompt}]}],
        "inferenceConfig": {"maxTokens": 100},
    })
}

fn error_type(headers: &reqwest::header::HeaderMap) -> &str {
    h(headers, "x-amzn-errortype").unwrap_or_default()
}

// docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html (response)
#[tokio::test]
async fn a_signed_converse_request_is_answered_with_usage_and_metrics() {
    let emu = start(ProviderConfig::bedrock("bedrock").with_session_token("token-1")).await;
    let creds = emu.aws_credentials("bedrock");
    let (status, headers, body) = parts(
        signed(
            &emu,
            "converse",
            &converse_body("Say hello to Bedrock"),
            &creds,
            AMZ_DATE,
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(h(&headers, "content-type"), Some("application/json"));
    assert_eq!(h(&headers, "x-amzn-requestid").map(str::len), Some(36));
    assert!(
        !headers
            .keys()
            .any(|k| k.as_str().contains("ratelimit") || k == "retry-after"),
        "Bedrock states no limits: {headers:?}"
    );
    let message = &body["output"]["message"];
    assert_eq!(message["role"], "assistant");
    assert!(!message["content"][0]["text"].as_str().unwrap().is_empty());
    assert_eq!(body["stopReason"], "end_turn");
    let usage = &body["usage"];
    let (input, output) = (
        usage["inputTokens"].as_u64().unwrap(),
        usage["outputTokens"].as_u64().unwrap(),
    );
    assert_eq!(usage["totalTokens"].as_u64(), Some(input + output));
    assert_eq!(body["metrics"]["latencyMs"], 0);
    let log = emu.log();
    let entry = log.last().unwrap();
    assert_eq!(entry.model.as_deref(), Some(MODEL));
    assert_eq!(entry.usage, Some([input, output]));
    assert_eq!(entry.status, Some(200));
}

/// The request of `sigv4.rs`'s unit test, sent as botocore 1.44.8's `SigV4Auth` signed it
/// for `http://127.0.0.1:4010/bedrock/…` at 2026-01-02T03:04:05Z (the `Host` it signed is
/// sent as it is, whatever port the emulator listens on).
#[tokio::test]
async fn a_request_exactly_as_botocore_signed_it_is_answered() {
    let emu = start(
        ProviderConfig::bedrock("bedrock")
            .with_aws_credentials(
                "AKIAIOSFODNN7EXAMPLE",
                "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            )
            .with_session_token("session-token-example"),
    )
    .await;
    let send = |body: &'static str| {
        client()
            .post(format!(
                "{}/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse",
                emu.base_url("bedrock")
            ))
            .header("host", "127.0.0.1:4010")
            .header("content-type", "application/json")
            .header("x-amz-date", AMZ_DATE)
            .header("x-amz-security-token", "session-token-example")
            .header(
                "authorization",
                "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20260102/us-east-1/bedrock/\
                 aws4_request, SignedHeaders=content-type;host;x-amz-date;x-amz-security-token, \
                 Signature=41df3cfa31468023c21afe2c58d7afa581564485fee34456b569de00e70bcc23",
            )
            .body(body)
            .send()
    };
    let signed_body = r#"{"messages":[{"role":"user","content":[{"text":"Hello"}]}]}"#;
    let (status, _, body) = parts(send(signed_body).await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["output"]["message"]["role"], "assistant");
    // The same signature over another body.
    let (status, headers, body) = parts(send(r#"{"messages":[]}"#).await.unwrap()).await;
    assert_eq!(status, 403, "{body}");
    assert!(error_type(&headers).starts_with("InvalidSignatureException:"));
}

#[tokio::test]
async fn signing_refusals_are_aws_exceptions() {
    let emu = start(ProviderConfig::bedrock("bedrock").with_session_token("token-1")).await;
    let good = emu.aws_credentials("bedrock");
    let body = converse_body("hi");
    let refused = |creds: AwsCredentials, amz_date: &'static str| {
        let req = signed(&emu, "converse", &body, &creds, amz_date);
        async move { parts(req.send().await.unwrap()).await }
    };

    let mut wrong_secret = good.clone();
    wrong_secret.secret_access_key.push('x');
    let (status, headers, body) = refused(wrong_secret, AMZ_DATE).await;
    assert_eq!(status, 403);
    assert_eq!(
        error_type(&headers),
        "InvalidSignatureException:http://internal.amazon.com/coral/com.amazon.coral.service/"
    );
    let message = body["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "The request signature we calculated does not match the signature you provided."
        ),
        "{message}"
    );
    assert!(message.contains("%253A0/converse"), "{message}");

    let mut unknown_key = good.clone();
    unknown_key.access_key_id = "AKIAUNKNOWN000000000".into();
    let (status, headers, body) = refused(unknown_key, AMZ_DATE).await;
    assert_eq!(status, 403);
    assert!(error_type(&headers).starts_with("UnrecognizedClientException:"));
    assert_eq!(
        body["message"],
        "The security token included in the request is invalid."
    );

    let mut no_token = good.clone();
    no_token.session_token = None;
    let (status, headers, _) = refused(no_token, AMZ_DATE).await;
    assert_eq!(status, 403);
    assert!(error_type(&headers).starts_with("UnrecognizedClientException:"));

    let mut elsewhere = good.clone();
    elsewhere.region = "eu-west-1".into();
    let (status, _, body) = refused(elsewhere, AMZ_DATE).await;
    assert_eq!(status, 403);
    assert!(body["message"].as_str().unwrap().contains("valid region"));

    // Ten minutes behind the emulator's clock.
    let (status, headers, body) = refused(good.clone(), "20260102T025405Z").await;
    assert_eq!(status, 403);
    assert!(error_type(&headers).starts_with("InvalidSignatureException:"));
    assert_eq!(
        body["message"],
        "Signature expired: 20260102T025405Z is now earlier than 20260102T025905Z \
         (20260102T030405Z - 5 min.)"
    );

    let unsigned = client()
        .post(format!("{}/model/m/converse", emu.base_url("bedrock")))
        .json(&converse_body("hi"))
        .send()
        .await
        .unwrap();
    let (status, headers, body) = parts(unsigned).await;
    assert_eq!(status, 403);
    assert!(error_type(&headers).starts_with("MissingAuthenticationTokenException:"));
    assert_eq!(body["message"], "Missing Authentication Token");

    let c = emu.counters("bedrock");
    assert_eq!((c.requests, c.ok), (6, 0));
}

#[tokio::test]
async fn throttling_is_a_429_throttling_exception_without_headers() {
    let emu =
        start(ProviderConfig::bedrock("bedrock").with_limits(Limits::none().with_rpm(1))).await;
    let creds = emu.aws_credentials("bedrock");
    let send = || signed(&emu, "converse", &converse_body("hi"), &creds, AMZ_DATE).send();
    assert_eq!(send().await.unwrap().status(), 200);
    let (status, headers, body) = parts(send().await.unwrap()).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(
        error_type(&headers),
        "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/"
    );
    assert_eq!(
        body,
        json!({"message": "Too many requests, please wait before trying again."})
    );
    for (name, _) in &headers {
        let n = name.as_str();
        assert!(
            !n.contains("ratelimit") && !n.contains("rate-limit") && n != "retry-after",
            "{n} in {headers:?}"
        );
    }
    assert!(h(&headers, "x-amzn-requestid").is_some());

    // An injected 429 (whatever Retry-After form it asks for) looks the same.
    emu.reset();
    emu.script(
        "bedrock",
        [Fault::RateLimit {
            retry_after: RetryAfter::Seconds(5),
        }],
    );
    let (status, headers, body) = parts(send().await.unwrap()).await;
    assert_eq!(status, 429);
    assert!(error_type(&headers).starts_with("ThrottlingException:"));
    assert_eq!(h(&headers, "retry-after"), None);
    assert_eq!(
        body["message"],
        "Too many requests, please wait before trying again."
    );
    assert_eq!(emu.counters("bedrock").rate_limited, 1);
}

#[tokio::test]
async fn faults_and_refusals_are_bedrock_exceptions() {
    let emu = start(ProviderConfig::bedrock("bedrock").with_models([MODEL])).await;
    let creds = emu.aws_credentials("bedrock");
    let cases = [
        (Fault::Status { status: 408 }, 408, "ModelTimeoutException"),
        (Fault::Status { status: 429 }, 429, "ModelNotReadyException"),
        (
            Fault::Status { status: 500 },
            500,
            "InternalServerException",
        ),
        (Fault::Status { status: 403 }, 403, "AccessDeniedException"),
        (Fault::Overloaded, 503, "ServiceUnavailableException"),
        (
            Fault::InsufficientQuota,
            400,
            "ServiceQuotaExceededException",
        ),
        (Fault::DailyQuota, 429, "ThrottlingException"),
    ];
    for (fault, want_status, want_type) in cases {
        emu.script("bedrock", [fault.clone()]);
        let req = signed(&emu, "converse", &converse_body("hi"), &creds, AMZ_DATE);
        let (status, headers, body) = parts(req.send().await.unwrap()).await;
        assert_eq!(status, want_status, "{fault:?}: {body}");
        assert!(
            error_type(&headers).starts_with(&format!("{want_type}:")),
            "{fault:?}: {headers:?}"
        );
        assert!(
            body["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{body}"
        );
    }
    let zero = json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}],
                      "inferenceConfig": {"maxTokens": 0}});
    let (status, headers, body) = parts(
        signed(&emu, "converse", &zero, &creds, AMZ_DATE)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400);
    assert!(error_type(&headers).starts_with("ValidationException:"));
    assert_eq!(
        body["message"],
        "1 validation error detected: Value '0' at 'inferenceConfig.maxTokens' failed to \
         satisfy constraint: Member must have value greater than or equal to 1"
    );
}

/// One decoded event-stream frame.
#[derive(Debug)]
struct Frame {
    headers: Vec<(String, String)>,
    payload: Value,
}

impl Frame {
    fn header(&self, name: &str) -> &str {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map_or("", |(_, v)| v.as_str())
    }
}

/// Decodes a whole `application/vnd.amazon.eventstream` body, checking each frame's lengths,
/// prelude CRC and message CRC (only string headers, the ones Bedrock sends).
fn decode(mut bytes: &[u8]) -> Vec<Frame> {
    let be32 = |b: &[u8]| u32::from_be_bytes(b[..4].try_into().unwrap());
    let mut frames = Vec::new();
    while !bytes.is_empty() {
        assert!(bytes.len() >= 16, "a frame of {} bytes", bytes.len());
        let total = be32(&bytes[0..]) as usize;
        let headers_len = be32(&bytes[4..]) as usize;
        assert_eq!(
            be32(&bytes[8..]),
            crc32fast::hash(&bytes[..8]),
            "prelude CRC"
        );
        let (frame, rest) = bytes.split_at(total);
        assert_eq!(
            be32(&frame[total - 4..]),
            crc32fast::hash(&frame[..total - 4]),
            "message CRC"
        );
        let mut hs = &frame[12..12 + headers_len];
        let mut headers = Vec::new();
        while !hs.is_empty() {
            let n = hs[0] as usize;
            let name = String::from_utf8(hs[1..1 + n].to_vec()).unwrap();
            assert_eq!(hs[1 + n], 7, "a string header");
            let len = u16::from_be_bytes([hs[2 + n], hs[3 + n]]) as usize;
            let value = String::from_utf8(hs[4 + n..4 + n + len].to_vec()).unwrap();
            headers.push((name, value));
            hs = &hs[4 + n + len..];
        }
        let payload = serde_json::from_slice(&frame[12 + headers_len..total - 4]).unwrap();
        frames.push(Frame { headers, payload });
        bytes = rest;
    }
    frames
}

// docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ConverseStream.html
#[tokio::test]
async fn a_stream_decodes_frame_by_frame_into_the_whole_answer() {
    let emu = start(ProviderConfig::bedrock("bedrock")).await;
    let creds = emu.aws_credentials("bedrock");
    let body = json!({
        "messages": [{"role": "user", "content": [{"text": "What's the weather in Paris?"}]}],
        "toolConfig": {"tools": [{"toolSpec": {
            "name": "get_weather", "description": "The current weather in a city.",
            "inputSchema": {"json": {"type": "object",
                "properties": {"city": {"type": "string"}}, "required": ["city"]}},
        }}]},
    });
    let whole = parts(
        signed(&emu, "converse", &body, &creds, AMZ_DATE)
            .send()
            .await
            .unwrap(),
    )
    .await
    .2;
    let resp = signed(&emu, "converse-stream", &body, &creds, AMZ_DATE)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        h(resp.headers(), "content-type"),
        Some("application/vnd.amazon.eventstream")
    );
    let frames = decode(&resp.bytes().await.unwrap());
    for f in &frames {
        assert_eq!(f.header(":message-type"), "event", "{f:?}");
        assert_eq!(f.header(":content-type"), "application/json", "{f:?}");
    }
    let kinds: Vec<&str> = frames.iter().map(|f| f.header(":event-type")).collect();
    assert_eq!(kinds[0], "messageStart");
    assert_eq!(frames[0].payload, json!({"role": "assistant"}));
    assert_eq!(&kinds[kinds.len() - 2..], ["messageStop", "metadata"]);
    // The text block (the preamble), then the call, as the whole answer has them.
    let text: String = frames
        .iter()
        .filter_map(|f| f.payload["delta"]["text"].as_str())
        .collect();
    let content = &whole["output"]["message"]["content"];
    assert_eq!(text, content[0]["text"].as_str().unwrap());
    let start = frames
        .iter()
        .find(|f| f.header(":event-type") == "contentBlockStart")
        .unwrap();
    assert_eq!(start.payload["contentBlockIndex"], 1);
    assert_eq!(
        start.payload["start"]["toolUse"],
        json!({
            "toolUseId": content[1]["toolUse"]["toolUseId"], "name": "get_weather",
        })
    );
    let input: String = frames
        .iter()
        .filter_map(|f| f.payload["delta"]["toolUse"]["input"].as_str())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&input).unwrap(),
        content[1]["toolUse"]["input"]
    );
    let stops = kinds.iter().filter(|k| **k == "contentBlockStop").count();
    assert_eq!(stops, 2);
    assert_eq!(frames[frames.len() - 2].payload["stopReason"], "tool_use");
    assert_eq!(frames[frames.len() - 1].payload["usage"], whole["usage"]);
    assert!(emu.log().last().unwrap().stream);
}

#[tokio::test]
async fn a_stream_error_is_a_throttling_exception_frame() {
    let emu = start(ProviderConfig::bedrock("bedrock")).await;
    let creds = emu.aws_credentials("bedrock");
    emu.script("bedrock", [Fault::StreamError]);
    let resp = signed(
        &emu,
        "converse-stream",
        &converse_body("Tell me a long story about the sea"),
        &creds,
        AMZ_DATE,
    )
    .send()
    .await
    .unwrap();
    assert_eq!(resp.status(), 200);
    let frames = decode(&resp.bytes().await.unwrap());
    let last = frames.last().unwrap();
    assert_eq!(last.header(":message-type"), "exception");
    assert_eq!(last.header(":exception-type"), "throttlingException");
    assert!(
        last.payload["message"]
            .as_str()
            .unwrap()
            .starts_with("Too many requests")
    );
    assert!(
        frames.iter().all(|f| f.header(":event-type") != "metadata"),
        "cut before the end"
    );
}
