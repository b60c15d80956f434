//! Embeddings over loopback HTTP, each in its provider's format: OpenAI `/v1/embeddings`
//! (platform.openai.com/docs/api-reference/embeddings/create) and Azure's deployment route,
//! Gemini `:embedContent` / `:batchEmbedContents` (ai.google.dev/api/embeddings), Bedrock
//! `InvokeModel` for Titan and Cohere (docs.aws.amazon.com/bedrock/latest/userguide/
//! model-parameters-titan-embed-text.html, …/model-parameters-embed.html); each with its
//! documented limits, its tokens charged to the token bucket, and the usage in the log.
//! Vertex AI's embedding routes are tested with its other routes (`vertex.rs`).

use base64::Engine as _;
use llm_failover_emulator::embedding::{cosine, text_vector};
use llm_failover_emulator::{Emulator, Limits, ProviderConfig};
use serde_json::{Value, json};

use crate::bedrock::{AMZ_DATE, signed_for};
use crate::support::*;

fn openai_embeddings(emu: &Emulator, body: &Value) -> reqwest::RequestBuilder {
    client()
        .post(format!("{}/embeddings", emu.base_url("openai")))
        .bearer_auth(emu.key("openai"))
        .json(body)
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn length(v: &[f32]) -> f64 {
    v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt()
}

#[tokio::test]
async fn openai_answers_a_string_a_list_and_base64_with_usage() {
    let emu = Emulator::builder().openai("openai").start().await.unwrap();
    let (status, headers, body) = parts(
        openai_embeddings(
            &emu,
            &json!({"model": "text-embedding-3-small", "input": "The weather in Paris"}),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(h(&headers, "x-request-id").unwrap().starts_with("req_"));
    assert_eq!(body["object"], "list");
    assert_eq!(body["model"], "text-embedding-3-small");
    assert_eq!(body["data"][0]["object"], "embedding");
    assert_eq!(body["data"][0]["index"], 0);
    let v = floats(&body["data"][0]["embedding"]);
    assert_eq!(v.len(), 1536);
    assert!((length(&v) - 1.0).abs() < 1e-4);
    assert_eq!(v, text_vector("The weather in Paris", 1536));
    assert_eq!(
        body["usage"],
        json!({"prompt_tokens": 5, "total_tokens": 5})
    );

    // A list, shortened, in base64 (what the official SDKs ask for).
    let texts = ["Paris weather today", "How to bake bread"];
    let (status, _, body) = parts(
        openai_embeddings(
            &emu,
            &json!({"model": "text-embedding-3-large", "input": texts, "dimensions": 256,
                    "encoding_format": "base64"}),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let decoded: Vec<Vec<f32>> = (0..2)
        .map(|i| {
            assert_eq!(body["data"][i]["index"], i);
            let b64 = body["data"][i]["embedding"].as_str().unwrap();
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap();
            bytes
                .chunks(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect()
        })
        .collect();
    assert!(decoded.iter().all(|v| v.len() == 256));
    assert!(
        (length(&decoded[0]) - 1.0).abs() < 1e-4,
        "shortened and scaled"
    );
    let weather = &text_vector("The weather in Paris", 3072)[..256];
    assert!(cosine(&decoded[0], weather) > cosine(&decoded[1], weather));
    // Tokens: the estimate (characters / 4) of each input.
    assert_eq!(body["usage"]["prompt_tokens"], 5 + 5);

    let log = emu.log();
    let entry = log.last().unwrap();
    assert_eq!(entry.path, "/openai/v1/embeddings");
    assert_eq!(entry.model.as_deref(), Some("text-embedding-3-large"));
    assert_eq!((entry.usage, entry.tokens), (Some([10, 0]), 10));
    assert_eq!(emu.counters("openai").tokens, 15);
}

#[tokio::test]
async fn openai_refuses_its_documented_limits_with_its_400s() {
    let emu = Emulator::builder().openai("openai").start().await.unwrap();
    let m = "text-embedding-3-small";
    let cases = [
        (
            json!({"model": m, "input": vec!["a"; 2049]}),
            "invalid_request_error",
            Some("array_above_max_length"),
            "Invalid 'input': array too long. Expected an array with maximum length 2048, but \
             got an array with length 2049 instead.",
        ),
        (
            json!({"model": m, "input": ["ok", "x".repeat(4 * 8192 + 4)]}),
            "invalid_request_error",
            None,
            "Invalid 'input': maximum context length is 8192 tokens.",
        ),
        (
            json!({"model": m, "input": vec!["x".repeat(4 * 8000); 38]}),
            "max_tokens_per_request",
            Some("max_tokens_per_request"),
            "Requested 304000 tokens, max 300000 tokens per request",
        ),
        (
            json!({"model": m, "input": ""}),
            "invalid_request_error",
            None,
            "'$.input' is invalid. Please check the API reference: \
             https://platform.openai.com/docs/api-reference.",
        ),
    ];
    for (body, kind, code, message) in cases {
        let (status, _, got) = parts(openai_embeddings(&emu, &body).send().await.unwrap()).await;
        assert_eq!(status, 400, "{got}");
        assert_eq!(got["error"]["type"], kind, "{got}");
        assert_eq!(got["error"]["code"].as_str(), code, "{got}");
        assert_eq!(got["error"]["message"], message);
    }
    // 2048 inputs, 300,000 tokens: at the limits, answered.
    let (status, _, got) = parts(
        openai_embeddings(
            &emu,
            &json!({"model": m, "input": vec!["a b"; 2048], "dimensions": 4}),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["data"].as_array().unwrap().len(), 2048);
    let mut at_limit = vec!["x".repeat(4 * 8000); 37];
    at_limit.push("x".repeat(4 * 4000));
    let (status, _, got) = parts(
        openai_embeddings(
            &emu,
            &json!({"model": m, "input": at_limit, "dimensions": 2}),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["usage"]["prompt_tokens"], 300_000);
    assert!(emu.log().iter().take(4).all(|e| e.usage.is_none()));
}

#[tokio::test]
async fn embeddings_are_charged_to_the_token_bucket() {
    let emu = Emulator::builder()
        .provider(ProviderConfig::openai("openai").with_limits(Limits::per_minute(100, 1000)))
        .start()
        .await
        .unwrap();
    let text = "x".repeat(4 * 600); // 600 tokens
    let body = json!({"model": "text-embedding-3-small", "input": text});
    let (status, headers, _) = parts(openai_embeddings(&emu, &body).send().await.unwrap()).await;
    assert_eq!(status, 200);
    assert_eq!(h(&headers, "x-ratelimit-limit-tokens"), Some("1000"));
    assert_eq!(h(&headers, "x-ratelimit-remaining-tokens"), Some("400"));
    let (status, headers, got) = parts(openai_embeddings(&emu, &body).send().await.unwrap()).await;
    assert_eq!(status, 429, "{got}");
    assert_eq!(got["error"]["code"], "rate_limit_exceeded");
    assert_eq!(got["error"]["type"], "tokens");
    assert!(h(&headers, "retry-after").is_some());
    assert_eq!(emu.counters("openai").rate_limited, 1);
}

#[tokio::test]
async fn azure_embeds_with_its_deployment_as_the_model() {
    let emu = Emulator::builder().azure("azure").start().await.unwrap();
    let (status, headers, body) = parts(
        client()
            .post(format!(
                "{}/openai/deployments/text-embedding-3-small/embeddings?api-version=2024-10-21",
                emu.base_url("azure")
            ))
            .header("api-key", emu.key("azure"))
            .json(&json!({"input": ["one", "two"]}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(h(&headers, "apim-request-id").is_some());
    assert_eq!(body["model"], "text-embedding-3-small");
    assert_eq!(body["data"].as_array().unwrap().len(), 2);
    assert_eq!(body["data"][1]["embedding"].as_array().unwrap().len(), 1536);
    assert_eq!(emu.log()[0].usage, Some([2, 0]));
}

#[tokio::test]
async fn gemini_embeds_one_content_or_a_batch_of_at_most_100() {
    let emu = Emulator::builder().gemini("gemini").start().await.unwrap();
    let model = "gemini-embedding-001";
    let content = json!({"parts": [{"text": "What is the weather in Paris?"}]});
    let (status, _, one) = parts(
        gemini(
            &emu,
            "gemini",
            model,
            "embedContent",
            &json!({"model": format!("models/{model}"), "content": content,
                    "taskType": "RETRIEVAL_QUERY"}),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{one}");
    let full = floats(&one["embedding"]["values"]);
    assert_eq!(full.len(), 3072);
    assert!((length(&full) - 1.0).abs() < 1e-4);

    let request = json!({"model": format!("models/{model}"), "content": content,
                         "outputDimensionality": 768});
    let (status, _, batch) = parts(
        gemini(
            &emu,
            "gemini",
            model,
            "batchEmbedContents",
            &json!({"requests": [request, request]}),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{batch}");
    let short = floats(&batch["embeddings"][1]["values"]);
    assert_eq!(short, full[..768], "the first 768 values, not scaled again");
    assert_eq!(emu.log()[1].usage, Some([16, 0]));

    let (status, _, refused) = parts(
        gemini(
            &emu,
            "gemini",
            model,
            "batchEmbedContents",
            &json!({"requests": vec![request; 101]}),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        refused["error"],
        json!({"code": 400, "status": "INVALID_ARGUMENT", "message":
               "* BatchEmbedContentsRequest.requests: at most 100 requests can be in one batch\n"})
    );
}

#[tokio::test]
async fn bedrock_invokes_titan_and_cohere_signed() {
    let emu = crate::bedrock::start(ProviderConfig::bedrock("bedrock")).await;
    let creds = emu.aws_credentials("bedrock");
    let titan = "amazon.titan-embed-text-v2:0";
    let (status, headers, body) = parts(
        signed_for(
            &emu,
            titan,
            "invoke",
            &json!({"inputText": "Paris weather", "dimensions": 512, "normalize": true}),
            &creds,
            AMZ_DATE,
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(h(&headers, "x-amzn-bedrock-input-token-count"), Some("4"));
    assert!(h(&headers, "x-amzn-bedrock-invocation-latency").is_some());
    assert_eq!(body["inputTextTokenCount"], 4);
    assert_eq!(floats(&body["embedding"]).len(), 512);
    assert_eq!(body["embeddingsByType"]["float"], body["embedding"]);

    let cohere = "cohere.embed-english-v3";
    let (status, _, body) = parts(
        signed_for(
            &emu,
            cohere,
            "invoke",
            &json!({"texts": ["a", "b c"], "input_type": "search_document"}),
            &creds,
            AMZ_DATE,
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["response_type"], "embeddings_floats");
    assert_eq!(body["texts"], json!(["a", "b c"]));
    assert_eq!(floats(&body["embeddings"][1]).len(), 1024);
    assert_eq!(body["id"].as_str().map(str::len), Some(36));
    assert_eq!(emu.log().last().unwrap().usage, Some([2, 0]));

    // The schema check's refusal, and a body no model of this kind reads.
    let (status, headers, body) = parts(
        signed_for(
            &emu,
            cohere,
            "invoke",
            &json!({"texts": vec!["a"; 97], "input_type": "clustering"}),
            &creds,
            AMZ_DATE,
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        h(&headers, "x-amzn-errortype")
            .unwrap()
            .starts_with("ValidationException:")
    );
    assert_eq!(
        body["message"],
        "Malformed input request: #/texts: expected maximum item count: 96, found: 97, please \
         reformat your input and try again."
    );
    // Unsigned: AWS's own refusal before any model is asked.
    let (status, headers, _) = parts(
        client()
            .post(format!(
                "{}/model/{}/invoke",
                emu.base_url("bedrock"),
                titan.replace(':', "%3A")
            ))
            .json(&json!({"inputText": "x"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 403);
    assert!(
        h(&headers, "x-amzn-errortype")
            .unwrap()
            .starts_with("MissingAuthenticationTokenException")
    );
}
