//! Google Vertex AI over loopback HTTP: the token endpoint (the JWT bearer grant of RFC 7523
//! as developers.google.com/identity/protocols/oauth2/service-account describes it), the
//! access tokens it issues on the emulator's clock, the regional and global model paths of
//! cloud.google.com/vertex-ai/generative-ai/docs/reference/rest/v1/projects.locations.publishers.models
//! (`generateContent`, `streamGenerateContent`, `embedContent`, `batchEmbedContents`,
//! `predict`), Google's refusals and Vertex's 429 without headers.
//!
//! JWTs are signed here with ring (RSASSA-PKCS1-v1_5, SHA-256) by the key of the emulator's
//! key file, or by another key to be refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use llm_failover_emulator::{
    CLOUD_PLATFORM_SCOPE, Emulator, Fault, GOOGLE_TOKEN_URI, Limits, ProviderConfig, RetryAfter,
    ServiceAccountKey, TimeSource,
};
use reqwest::RequestBuilder;
use ring::rand::SystemRandom;
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use serde_json::{Value, json};

use crate::support::*;

/// 2026-01-02T03:04:05Z.
const T0: u64 = 1_767_323_045;

/// A key that is not the emulator's (made once with `openssl genpkey -algorithm RSA
/// -pkeyopt rsa_keygen_bits:2048` for this test).
const OTHER_KEY: &str = "\
-----BEGIN PRIVATE KEY-----\n\
MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQClDvNFyXqT47/w\n\
uc11DB0T72A2I4vD+335X7asBROunQ4jzCbGfjdkx8cjKhh7RT+0XijIJswA4v3V\n\
FuImnkZhk0dvVGDXIcd9O9//BBl3lJjBdQkwaZX5csX2slMgK8Ol3ANxi2+ePN+I\n\
4Ort0LAsNYNggbrkVJilCw4DxKYi0z+Pcw0OE0sXg53WXRYROhOSUhz7Nkjyw8lW\n\
O7ODl8V9VadGif5f4WC2QxAFcEn6ZCmIt0KlMOlx+VIIuz1gmXoTBNnRPuJma325\n\
RxerrPl2O7efOT5+yezs26n7j5h1Exog0Rklmic0ena4HNnTjhkieVI6unB1IJNx\n\
Ns4oL2zHAgMBAAECggEAOyNdJD7o7T3nkl9v7qT1ciQNC7i2pfRgkU2qzH1RLPnW\n\
jBrkNbAZNsGhZsb5WIlaJsypvfSwmQy7N3Loej+xJdq3+Hp56/qNWCBwxBT67u5N\n\
wNqm/TKHaoWlyhrgT6F+itmGXlNAHajfylITujtQM7bEqHoytQZeXpvUXKNDhywn\n\
ir9KeCb5zlQZchoYa/OtiiQ6Xil9e3sOa0AIhYo9vUKcaRVONY5ju+C72tXNJsDh\n\
5jGClu1rSxg3h7EC/f2/Kif1SygOjkFGaCmK2jtwqc18gda8b6H+GVwfXXy+2deg\n\
XjRFf2wvhAkjbGS0PwuJlRVpWh5yT+ZV45SXnRDieQKBgQDZlpkmJCSkwtHxBhWw\n\
rxi9wwbLc0Zqfbgwy7rwhfY7iONm/owGYgCYBiTIPwG4ORiHWSNi6hzRM+WGcMTs\n\
Y7w9bXFd1CDr21WAeFQF87QQyuPOk4jJV/86eV8P7lIB1si9Di4fekp7UK0YTdeO\n\
eQG3NBsN+lU1Cy66sZy0JCYCvQKBgQDCMmKYJllBENPS7SG48GUcOZ4Ezmw52kS8\n\
kfokFOCpMh4WgaWwRCB2PajSC2H0lF28QLNtjkT3x8T8VuEw3oD3yb/BE4G+yO0k\n\
PGzvujF1/rDcIjYH/gtzFRSE7VP02j+ns6iX4LFmya8LTNJi+2TxDS22nL3BUFEi\n\
3/+tbmgH0wKBgQCnk+77ixaVtl3OjWsjGpepfoy7IFr5JT44ho/BMstDatgIuL7L\n\
I6tlakXl23DNm1ui0ioIwlnTXW7Grg9cKCwP+zw2kWuReulM+l9r/heOX1Q4AzR0\n\
LUuqk1N9h4StWehcgpFPOPYoJyhI8Zq0ZcnGeWDk0QnSwnwI2UXhD34e2QKBgD7a\n\
yAavAtyIcccncW7GgDNugrLTjTv8ZZsTNH9RMpYQ3qQyOkqfAlLDCk1R2dar3tr7\n\
phejoLcCNcPm6uRCYEPTTPlVMv1pUzgTRr8g6LlkQiI+AHb9xv7sp8OOfUoXCdth\n\
zwO5ejHmvX1O1BmtfLJ4rX8ZpGFZealsDvk3bvx5AoGAXhqN9I/TDcITzv6QZXY3\n\
cz1dBAVQWptFBvRpbmg6Lp5PVpifwbxgQjYalW88BgRd0dmCxugYMEQAC0CCQMWz\n\
ym9gl1R8yjGG94CNljo3+UflXHIH/g3N4U4ZqT2aGN6c6+LQ6n0CE2jsVSBQxJHd\n\
WVR9ZXjrYo/Rx+ysNGkkLHU=\n\
-----END PRIVATE KEY-----\n\
";

const MODEL: &str = "gemini-2.0-flash";

/// An emulator whose wall clock stands at `T0` plus what `clock` holds (seconds).
async fn start(provider: ProviderConfig) -> (Emulator, Arc<AtomicU64>) {
    let clock = Arc::new(AtomicU64::new(0));
    let c = Arc::clone(&clock);
    let emu = Emulator::builder()
        .provider(provider)
        .time_source(TimeSource::new(move || {
            let wall = UNIX_EPOCH + Duration::from_secs(T0 + c.load(Ordering::SeqCst));
            (tokio::time::Instant::now(), wall)
        }))
        .start()
        .await
        .unwrap();
    (emu, clock)
}

fn der(pem: &str) -> Vec<u8> {
    let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    STANDARD.decode(b64).unwrap()
}

/// A JWT of `claims` signed RS256 with `pem`.
fn jwt(pem: &str, kid: &str, claims: &Value) -> String {
    let part = |v: &Value| URL_SAFE_NO_PAD.encode(v.to_string());
    let header = json!({"alg": "RS256", "typ": "JWT", "kid": kid});
    let signed = format!("{}.{}", part(&header), part(claims));
    let pair = RsaKeyPair::from_pkcs8(&der(pem)).unwrap();
    let mut sig = vec![0; pair.public().modulus_len()];
    pair.sign(
        &RSA_PKCS1_SHA256,
        &SystemRandom::new(),
        signed.as_bytes(),
        &mut sig,
    )
    .unwrap();
    format!("{signed}.{}", URL_SAFE_NO_PAD.encode(sig))
}

/// The claims google-auth sends for `key` at `iat`.
fn claims(key: &ServiceAccountKey, iat: u64) -> Value {
    json!({"iss": key.client_email, "scope": CLOUD_PLATFORM_SCOPE, "aud": GOOGLE_TOKEN_URI,
           "iat": iat, "exp": iat + 3600})
}

fn token_request(key: &ServiceAccountKey, assertion: &str) -> RequestBuilder {
    client().post(&key.token_uri).form(&[
        ("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"),
        ("assertion", assertion),
    ])
}

fn model_url(emu: &Emulator, version: &str, location: &str, model: &str, method: &str) -> String {
    format!(
        "{}/{version}/projects/emulator-project/locations/{location}/publishers/google/models/\
         {model}:{method}",
        emu.base_url("vertex")
    )
}

fn generate(emu: &Emulator, token: &str, body: &Value) -> RequestBuilder {
    client()
        .post(model_url(
            emu,
            "v1",
            "us-central1",
            MODEL,
            "generateContent",
        ))
        .bearer_auth(token)
        .json(body)
}

#[tokio::test]
async fn a_valid_jwt_gets_a_token_the_model_routes_accept() {
    let (emu, _) = start(ProviderConfig::vertex("vertex")).await;
    let key = emu.service_account_key("vertex");
    assert_eq!(key.token_uri, format!("{}/vertex/token", emu.url()));
    let assertion = jwt(&key.private_key, &key.private_key_id, &claims(&key, T0));
    let (status, headers, body) =
        parts(token_request(&key, &assertion).send().await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        h(&headers, "content-type")
            .unwrap()
            .starts_with("application/json")
    );
    assert_eq!(body["token_type"], "Bearer");
    assert_eq!(body["expires_in"], 3599);
    let token = body["access_token"].as_str().unwrap();
    assert!(token.starts_with("ya29."));

    let (status, headers, answer) = parts(
        generate(&emu, token, &gemini_body("Hello, Vertex"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert!(!headers.keys().any(|k| k.as_str().contains("ratelimit")));
    assert_eq!(answer["candidates"][0]["content"]["role"], "model");
    assert_eq!(answer["candidates"][0]["finishReason"], "STOP");
    assert_eq!(answer["createTime"], "2026-01-02T03:04:05Z");
    assert_eq!(answer["usageMetadata"]["trafficType"], "ON_DEMAND");
    assert_eq!(answer["modelVersion"], MODEL);

    // The token request is logged but is no request of the Vertex API.
    let log = emu.log();
    assert_eq!(log[0].path, "/vertex/token");
    assert_eq!((log[0].status, log[0].model.as_deref()), (Some(200), None));
    assert_eq!(log[1].model.as_deref(), Some(MODEL));
    assert_eq!(emu.counters("vertex").requests, 1);

    // The key file's own token URI is an audience too (Go's and Rust's clients name it).
    let mut own = claims(&key, T0);
    own["aud"] = json!(key.token_uri);
    let assertion = jwt(&key.private_key, &key.private_key_id, &own);
    let (status, _, body) = parts(token_request(&key, &assertion).send().await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn the_token_endpoint_refuses_as_google_does() {
    let (emu, _) = start(ProviderConfig::vertex("vertex")).await;
    let key = emu.service_account_key("vertex");
    let good = claims(&key, T0);
    let with = |k: &str, v: Value| {
        let mut c = good.clone();
        c[k] = v;
        c
    };
    let sign = |c: &Value| jwt(&key.private_key, &key.private_key_id, c);
    let cases = [
        (
            jwt(OTHER_KEY, &key.private_key_id, &good),
            "invalid_grant",
            "Invalid JWT Signature.",
        ),
        (
            sign(&with("aud", json!("https://example.com/token"))),
            "invalid_grant",
            "Invalid JWT: Failed audience check. The right audience is \
             https://oauth2.googleapis.com/token",
        ),
        (
            sign(&claims(&key, T0 - 7200)),
            "invalid_grant",
            "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable \
             timeframe. Check your iat and exp values in the JWT claim.",
        ),
        (
            sign(&with("exp", json!(T0 + 7200))),
            "invalid_grant",
            "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable \
             timeframe. Check your iat and exp values in the JWT claim.",
        ),
        (
            sign(&with(
                "scope",
                json!("https://www.googleapis.com/auth/userinfo.email"),
            )),
            "invalid_scope",
            "Invalid OAuth scope or ID token audience provided.",
        ),
        (
            sign(&with(
                "iss",
                json!("nobody@emulator-project.iam.gserviceaccount.com"),
            )),
            "invalid_grant",
            "Invalid grant: account not found",
        ),
    ];
    for (assertion, error, description) in cases {
        let (status, _, body) = parts(token_request(&key, &assertion).send().await.unwrap()).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(
            body,
            json!({"error": error, "error_description": description})
        );
    }
    let (status, _, body) = parts(
        client()
            .post(&key.token_uri)
            .form(&[("grant_type", "client_credentials")])
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, &body["error"]),
        (400, &json!("unsupported_grant_type"))
    );
    let (status, _, body) = parts(
        client()
            .post(&key.token_uri)
            .json(&json!({"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, &body["error"]), (400, &json!("invalid_request")));
    assert_eq!(emu.counters("vertex").requests, 0);
}

#[tokio::test]
async fn access_tokens_expire_on_the_emulators_clock() {
    let (emu, clock) = start(ProviderConfig::vertex("vertex")).await;
    let token = emu.access_token("vertex");
    let body = gemini_body("Hello");
    let (status, _, _) = parts(generate(&emu, &token, &body).send().await.unwrap()).await;
    assert_eq!(status, 200);
    clock.store(3598, Ordering::SeqCst);
    let (status, _, _) = parts(generate(&emu, &token, &body).send().await.unwrap()).await;
    assert_eq!(status, 200, "still valid a second before its end");
    clock.store(3599, Ordering::SeqCst);
    let reason = |b: &Value| b["error"]["details"][0]["reason"].clone();
    let (status, headers, refused) =
        parts(generate(&emu, &token, &body).send().await.unwrap()).await;
    assert_eq!(status, 401);
    assert!(
        h(&headers, "content-type")
            .unwrap()
            .starts_with("application/json")
    );
    assert_eq!(refused["error"]["status"], "UNAUTHENTICATED");
    assert_eq!(reason(&refused), "ACCESS_TOKEN_EXPIRED");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Request had invalid authentication credentials.")
    );
    assert_eq!(
        refused["error"]["details"][0]["metadata"]["method"],
        "google.cloud.aiplatform.v1.PredictionService.GenerateContent"
    );
    let (status, _, refused) =
        parts(generate(&emu, "ya29.unknown", &body).send().await.unwrap()).await;
    assert_eq!(
        (status, reason(&refused)),
        (401, json!("ACCESS_TOKEN_TYPE_UNSUPPORTED"))
    );
    let url = model_url(&emu, "v1", "us-central1", MODEL, "generateContent");
    let (status, _, refused) = parts(client().post(&url).json(&body).send().await.unwrap()).await;
    assert_eq!(
        (status, reason(&refused)),
        (401, json!("CREDENTIALS_MISSING"))
    );
    let (status, _, refused) = parts(
        client()
            .post(&url)
            .header("x-goog-api-key", "emulator-key")
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 401);
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("API keys are not supported by this API.")
    );
}

#[tokio::test]
async fn serves_v1_and_v1beta1_regional_and_global_and_both_stream_forms() {
    let (emu, _) = start(ProviderConfig::vertex("vertex")).await;
    let token = emu.access_token("vertex");
    let body = gemini_body("Tell me about the sea");
    for (version, location) in [
        ("v1", "us-central1"),
        ("v1beta1", "europe-west4"),
        ("v1", "global"),
    ] {
        let url = model_url(&emu, version, location, MODEL, "generateContent");
        let (status, _, answer) = parts(
            client()
                .post(url)
                .bearer_auth(&token)
                .json(&body)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200, "{version} {location}: {answer}");
    }
    let whole = {
        let (_, _, a) = parts(generate(&emu, &token, &body).send().await.unwrap()).await;
        a["candidates"][0]["content"]["parts"][0]["text"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let stream_url = model_url(&emu, "v1", "us-central1", MODEL, "streamGenerateContent");
    let sse = client()
        .post(format!("{stream_url}?alt=sse"))
        .bearer_auth(&token)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(h(sse.headers(), "content-type"), Some("text/event-stream"));
    let (data, _) = crate::support::sse(&sse.text().await.unwrap());
    let chunks: Vec<Value> = data
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let text: String = chunks
        .iter()
        .map(|c| {
            c["candidates"][0]["content"]["parts"][0]["text"]
                .as_str()
                .unwrap()
        })
        .collect();
    assert_eq!(text, whole);
    assert_eq!(
        chunks.last().unwrap()["candidates"][0]["finishReason"],
        "STOP"
    );
    assert!(chunks.iter().all(|c| c["createTime"].is_string()));
    // Without alt=sse: one JSON array of the same chunks.
    let (status, headers, array) = parts(
        client()
            .post(&stream_url)
            .bearer_auth(&token)
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(h(&headers, "content-type"), Some("application/json"));
    assert_eq!(array.as_array().unwrap().len(), chunks.len());

    // Another project, another method, Gemini API's path: Vertex's refusals.
    let other = format!(
        "{}/v1/projects/another-project/locations/us-central1/publishers/google/models/{MODEL}:\
         generateContent",
        emu.base_url("vertex")
    );
    let (status, _, refused) = parts(
        client()
            .post(other)
            .bearer_auth(&token)
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, &refused["error"]["status"]),
        (403, &json!("PERMISSION_DENIED"))
    );
    for url in [
        model_url(&emu, "v1", "us-central1", MODEL, "countTokens"),
        format!(
            "{}/v1beta/models/{MODEL}:generateContent",
            emu.base_url("vertex")
        ),
    ] {
        let (status, _, refused) = parts(
            client()
                .post(url)
                .bearer_auth(&token)
                .json(&body)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(
            (status, &refused["error"]["status"]),
            (404, &json!("NOT_FOUND"))
        );
    }
}

#[tokio::test]
async fn throttles_with_resource_exhausted_and_no_headers() {
    let (emu, _) =
        start(ProviderConfig::vertex("vertex").with_limits(Limits::none().with_rpm(1))).await;
    let token = emu.access_token("vertex");
    let body = gemini_body("Hello");
    let (status, _, _) = parts(generate(&emu, &token, &body).send().await.unwrap()).await;
    assert_eq!(status, 200);
    let (status, headers, refused) =
        parts(generate(&emu, &token, &body).send().await.unwrap()).await;
    assert_eq!(status, 429);
    assert!(
        !headers
            .keys()
            .any(|k| k.as_str().contains("ratelimit") || k == "retry-after"),
        "{headers:?}"
    );
    assert_eq!(
        refused,
        json!({"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message":
            "Resource exhausted. Please try again later. Please refer to \
             https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more \
             details."}})
    );
    emu.set_limits("vertex", None, Limits::none());
    emu.script(
        "vertex",
        [Fault::RateLimit {
            retry_after: RetryAfter::Seconds(3),
        }],
    );
    let (status, headers, refused) =
        parts(generate(&emu, &token, &body).send().await.unwrap()).await;
    assert_eq!(
        (status, &refused["error"]["status"]),
        (429, &json!("RESOURCE_EXHAUSTED"))
    );
    assert!(h(&headers, "retry-after").is_none());
    emu.script("vertex", [Fault::InsufficientQuota]);
    let (status, _, refused) = parts(generate(&emu, &token, &body).send().await.unwrap()).await;
    assert_eq!(status, 403);
    assert_eq!(refused["error"]["details"][0]["reason"], "BILLING_DISABLED");
}

#[tokio::test]
async fn embeds_through_predict_embed_content_and_batches_within_the_limits() {
    let (emu, _) = start(ProviderConfig::vertex("vertex")).await;
    let token = emu.access_token("vertex");
    let post = |model: &str, method: &str, body: Value| {
        client()
            .post(model_url(&emu, "v1", "us-central1", model, method))
            .bearer_auth(&token)
            .json(&body)
    };
    let (status, _, p) = parts(
        post(
            "text-embedding-005",
            "predict",
            json!({"instances": [{"content": "The weather in Paris", "task_type": "RETRIEVAL_QUERY"},
                                 {"content": "How to bake bread"}],
                   "parameters": {"outputDimensionality": 256}}),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{p}");
    let first = &p["predictions"][0]["embeddings"];
    assert_eq!(first["values"].as_array().unwrap().len(), 256);
    assert_eq!(
        first["statistics"],
        json!({"truncated": false, "token_count": 5})
    );
    assert_eq!(p["metadata"]["billableCharacterCount"], 17 + 14);
    assert_eq!(emu.log().last().unwrap().usage, Some([10, 0]));

    let (status, _, one) = parts(
        post(
            "gemini-embedding-001",
            "embedContent",
            json!({"content": {"parts": [{"text": "The weather in Paris"}]},
                   "embedContentConfig": {"taskType": "RETRIEVAL_DOCUMENT",
                                          "outputDimensionality": 768}}),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{one}");
    assert_eq!(one["embedding"]["values"].as_array().unwrap().len(), 768);
    assert_eq!(
        one["usageMetadata"],
        json!({"promptTokenCount": 5, "totalTokenCount": 5})
    );
    assert_eq!(one["truncated"], false);

    let content = json!({"content": {"parts": [{"text": "x"}]}});
    let (status, _, batch) = parts(
        post(
            "gemini-embedding-001",
            "batchEmbedContents",
            json!({"requests": [content, content, content]}),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{batch}");
    assert_eq!(batch["embeddings"].as_array().unwrap().len(), 3);

    for (model, body, needle) in [
        (
            "gemini-embedding-001",
            json!({"instances": [{"content": "a"}, {"content": "b"}]}),
            "supports up to 1 instances per request",
        ),
        (
            "text-embedding-005",
            json!({"instances": vec![json!({"content": "x".repeat(8000)}); 11]}),
            "the request supports up to 20000",
        ),
        (
            "text-embedding-005",
            json!({"instances": [{"content": "x".repeat(8200)}],
                   "parameters": {"autoTruncate": false}}),
            "supports up to 2048",
        ),
    ] {
        let (status, _, refused) = parts(post(model, "predict", body).send().await.unwrap()).await;
        assert_eq!(status, 400, "{refused}");
        assert_eq!(refused["error"]["status"], "INVALID_ARGUMENT");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{message}");
    }
}

#[tokio::test]
async fn a_configured_key_file_replaces_the_demo_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("key.json");
    let file = json!({
        "type": "service_account",
        "project_id": "my-project-42",
        "private_key_id": "0123456789abcdef",
        "private_key": OTHER_KEY,
        "client_email": "runner@my-project-42.iam.gserviceaccount.com",
        "client_id": "100000000000000000001",
        "token_uri": "https://oauth2.googleapis.com/token",
    });
    std::fs::write(&path, file.to_string()).unwrap();
    let (emu, _) = start(ProviderConfig::vertex("vertex").with_service_account_file(&path)).await;
    let key = emu.service_account_key("vertex");
    assert_eq!(key.project_id, "my-project-42");
    assert_eq!(key.private_key, OTHER_KEY);
    let assertion = jwt(OTHER_KEY, "0123456789abcdef", &claims(&key, T0));
    let (status, _, body) = parts(token_request(&key, &assertion).send().await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
    // The admin endpoint serves the same file, for a client in another process.
    let served: Value = client()
        .get(format!(
            "{}/_admin/service_account?provider=vertex",
            emu.url()
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(served["private_key"], OTHER_KEY);
    assert_eq!(served["token_uri"], key.token_uri.as_str());

    // A file that holds no key: the emulator does not start, and says why.
    std::fs::write(&path, "{\"type\": \"service_account\"}").unwrap();
    let err = Emulator::builder()
        .provider(ProviderConfig::vertex("vertex").with_service_account_file(&path))
        .start()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert!(
        err.to_string()
            .contains("providers.vertex.service_account_file"),
        "{err}"
    );
}
