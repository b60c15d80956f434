//! Embeddings, the third operation, through the one router against the emulator: each wire
//! format (OpenAI, Azure's deployment path, Gemini's `embedContent` and
//! `batchEmbedContents`), many inputs answered in order, failover on a 429, a provider
//! without embeddings passed over, the token bucket charged with the inputs' tokens, and an
//! answer with the wrong number of vectors.
//!
//! Every vector is checked against the emulator's own (`embedding::text_vector`), so "in
//! order" means each input got its own vector back in its place.

use std::sync::Arc;
use std::time::Duration;

use llm_failover::clock::{Clock, ManualClock};
use llm_failover::config::{Config, Policy, ProviderConfig as Cfg, ProviderKind};
use llm_failover::provider::Provider;
use llm_failover::provider::anthropic::Anthropic;
use llm_failover::provider::azure::Azure;
use llm_failover::provider::gemini::Gemini;
use llm_failover::provider::openai::OpenAi;
use llm_failover::rng::SeededRng;
use llm_failover::{
    Capability, Client, Credential, EmbeddingRequest, EmbeddingResponse, Error, ErrorKind,
    InputType, Limits, ProviderId, ProviderSettings, RequestOptions,
};
use llm_failover_emulator::embedding::{cosine, text_vector};
use llm_failover_emulator::scripted::{Reply, ScriptedServer};
use llm_failover_emulator::{Emulator, Fault, ProviderConfig, RetryAfter, TimeSource};

const OPENAI_MODEL: &str = "text-embedding-3-small";
const GEMINI_MODEL: &str = "gemini-embedding-001";

fn shared(clock: &ManualClock) -> TimeSource {
    let c = clock.clone();
    TimeSource::new(move || (c.now(), c.wall()))
}

async fn emulator(clock: &ManualClock, providers: Vec<ProviderConfig>) -> Emulator {
    let mut b = Emulator::builder().time_source(shared(clock));
    for p in providers {
        b = b.provider(p);
    }
    b.start().await.unwrap()
}

fn openai(emu: &Emulator, prefix: &str) -> Arc<dyn Provider> {
    Arc::new(
        OpenAi::new(
            ProviderId::new(prefix),
            emu.base_url(prefix).parse().unwrap(),
        )
        .with_chat_model("gpt-4o-mini")
        .with_embedding_model(OPENAI_MODEL),
    )
}

fn keyed(emu: &Emulator, prefix: &str) -> ProviderSettings {
    ProviderSettings::new().credential(Credential::new(emu.key(prefix)))
}

fn client(clock: &ManualClock, providers: Vec<(Arc<dyn Provider>, ProviderSettings)>) -> Client {
    let mut b = Client::builder()
        .clock(Arc::new(clock.clone()))
        .rng(Arc::new(SeededRng::new(7)));
    for (p, s) in providers {
        b = b.provider(p, s);
    }
    b.build().unwrap()
}

/// Each vector is the emulator's vector of the input in the same place.
fn assert_in_order(answer: &EmbeddingResponse, inputs: &[&str], dims: usize) {
    assert_eq!(answer.vectors.len(), inputs.len(), "{answer:?}");
    for (i, (v, text)) in answer.vectors.iter().zip(inputs).enumerate() {
        assert_eq!(v.len(), dims, "[{i}]");
        let want = text_vector(text, dims);
        assert!(
            cosine(v, &want) > 0.999,
            "[{i}] is not the vector of {text:?}"
        );
    }
}

const TEXTS: [&str; 3] = [
    "the weather in Paris",
    "a recipe for pancakes",
    "Paris weather today",
];

#[tokio::test]
async fn openai_embeds_many_inputs_in_one_request_in_order() {
    let clock = ManualClock::new();
    let emu = emulator(&clock, vec![ProviderConfig::openai("openai")]).await;
    let c = client(
        &clock,
        vec![(openai(&emu, "openai"), keyed(&emu, "openai"))],
    );
    assert_eq!(c.embedding_providers(), [ProviderId::new("openai")]);

    let answer = c.embed(&EmbeddingRequest::many(TEXTS)).await.unwrap();
    assert_in_order(&answer, &TEXTS, 1536);
    assert_eq!(answer.provider.as_str(), "openai");
    assert_eq!(answer.model, OPENAI_MODEL);
    assert_eq!(answer.attempts, 1);
    let used = answer.usage.expect("OpenAI states usage").input_tokens;
    assert!(used > 0 && answer.usage.unwrap().output_tokens == 0);
    // One request for the three inputs; the related texts point the same way.
    assert_eq!(emu.counters("openai").requests, 1);
    let v = &answer.vectors;
    assert!(cosine(&v[0], &v[2]) > cosine(&v[0], &v[1]));

    // One input, shortened.
    let short = c
        .embed(&EmbeddingRequest::new(TEXTS[0]).dimensions(256))
        .await
        .unwrap();
    assert_eq!(short.dimensions(), Some(256));
}

#[tokio::test]
async fn azure_embeds_through_its_deployment_path() {
    let clock = ManualClock::new();
    let emu = emulator(&clock, vec![ProviderConfig::azure("azure")]).await;
    let azure = Azure::new(
        ProviderId::new("azure"),
        emu.base_url("azure").parse().unwrap(),
        "2024-10-21",
    )
    .with_embedding_model(OPENAI_MODEL);
    let c = client(&clock, vec![(Arc::new(azure), keyed(&emu, "azure"))]);
    let answer = c.embed(&EmbeddingRequest::many(TEXTS)).await.unwrap();
    assert_in_order(&answer, &TEXTS, 1536);
    assert_eq!(answer.provider.as_str(), "azure");
    let log = emu.log();
    assert!(
        log[0]
            .path
            .ends_with(&format!("/openai/deployments/{OPENAI_MODEL}/embeddings")),
        "{:?}",
        log[0].path
    );
}

#[tokio::test]
async fn gemini_embeds_one_with_embed_content_and_many_with_a_batch() {
    let clock = ManualClock::new();
    let emu = emulator(&clock, vec![ProviderConfig::gemini("gemini")]).await;
    let gemini = Gemini::new(
        ProviderId::new("gemini"),
        format!("{}/v1beta", emu.base_url("gemini"))
            .parse()
            .unwrap(),
    )
    .with_embedding_model(GEMINI_MODEL);
    let c = client(&clock, vec![(Arc::new(gemini), keyed(&emu, "gemini"))]);

    let one = c
        .embed(&EmbeddingRequest::new(TEXTS[0]).input_type(InputType::Query))
        .await
        .unwrap();
    assert_in_order(&one, &TEXTS[..1], 3072);
    let many = c
        .embed(&EmbeddingRequest::many(TEXTS).input_type(InputType::Document))
        .await
        .unwrap();
    assert_in_order(&many, &TEXTS, 3072);
    assert_eq!(many.usage, None, "the Gemini API states no usage");
    let paths: Vec<String> = emu.log().into_iter().map(|e| e.path).collect();
    assert!(paths[0].ends_with(":embedContent"), "{paths:?}");
    assert!(paths[1].ends_with(":batchEmbedContents"), "{paths:?}");
    let short = c
        .embed(&EmbeddingRequest::many(TEXTS).dimensions(768))
        .await
        .unwrap();
    assert_eq!(short.dimensions(), Some(768));
}

#[tokio::test]
async fn a_429_fails_over_to_the_second_provider() {
    let clock = ManualClock::new();
    let emu = emulator(
        &clock,
        vec![
            ProviderConfig::openai("first"),
            ProviderConfig::openai("second"),
        ],
    )
    .await;
    emu.script(
        "first",
        [Fault::RateLimit {
            retry_after: RetryAfter::Seconds(20),
        }],
    );
    let c = client(
        &clock,
        vec![
            (openai(&emu, "first"), keyed(&emu, "first")),
            (openai(&emu, "second"), keyed(&emu, "second")),
        ],
    );
    let answer = c.embed(&EmbeddingRequest::many(TEXTS)).await.unwrap();
    assert_eq!(answer.provider.as_str(), "second");
    assert_eq!(answer.attempts, 2);
    assert_in_order(&answer, &TEXTS, 1536);
    let stats = c.stats();
    assert_eq!(stats.provider("first").map(|s| s.rate_limited), Some(1));
    // The first provider is closed for the stated 20 s: the next request goes straight on.
    let next = c.embed(&EmbeddingRequest::new("again")).await.unwrap();
    assert_eq!((next.provider.as_str(), next.attempts), ("second", 1));
    assert_eq!(emu.counters("first").requests, 1);
}

#[tokio::test]
async fn a_provider_without_embeddings_is_passed_over_or_refused_by_name() {
    let clock = ManualClock::new();
    let emu = emulator(
        &clock,
        vec![
            ProviderConfig::anthropic("claude"),
            ProviderConfig::openai("openai"),
        ],
    )
    .await;
    let claude: Arc<dyn Provider> = Arc::new(
        Anthropic::new(
            ProviderId::new("claude"),
            emu.base_url("claude").parse().unwrap(),
        )
        .with_model("claude-3-5-haiku-latest"),
    );
    assert!(!claude.capabilities().supports(Capability::Embedding));
    let c = client(
        &clock,
        vec![
            (claude.clone(), keyed(&emu, "claude")),
            (openai(&emu, "openai"), keyed(&emu, "openai")),
        ],
    );
    // A chat-only OpenAI-compatible host (no embedding model) is passed over, not the end
    // of the request.
    let chat_only: Arc<dyn Provider> = Arc::new(
        OpenAi::new(
            ProviderId::new("groq"),
            emu.base_url("openai").parse().unwrap(),
        )
        .with_chat_model("llama-3.3-70b-versatile"),
    );
    let mixed = client(
        &clock,
        vec![
            (chat_only.clone(), keyed(&emu, "openai")),
            (openai(&emu, "openai"), keyed(&emu, "openai")),
        ],
    );
    let served = mixed.embed(&EmbeddingRequest::new("hello")).await.unwrap();
    assert_eq!(served.provider.as_str(), "openai");
    let alone = client(&clock, vec![(chat_only, keyed(&emu, "openai"))]);
    let err = alone
        .embed(&EmbeddingRequest::new("hello"))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("no default embedding model"),
        "{err}"
    );

    // Chat goes to Claude first; embeddings only to the provider that has them.
    assert_eq!(c.chat_providers()[0].as_str(), "claude");
    assert_eq!(c.embedding_providers(), [ProviderId::new("openai")]);
    let answer = c.embed(&EmbeddingRequest::new("hello")).await.unwrap();
    assert_eq!(answer.provider.as_str(), "openai");
    assert_eq!(emu.counters("claude").requests, 0);
    assert_eq!(emu.counters("openai").requests, 2);

    // Pinned to the one without: refused before anything is sent, naming it.
    let pinned = RequestOptions::new().provider("claude");
    let err = c
        .embed_with(&EmbeddingRequest::new("hello"), &pinned)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert!(err.to_string().contains("claude"), "{err}");
    assert_eq!(emu.counters("claude").requests, 0);

    // Only Claude: no provider serves embeddings.
    let only = client(&clock, vec![(claude, keyed(&emu, "claude"))]);
    let err = only
        .embed(&EmbeddingRequest::new("hello"))
        .await
        .unwrap_err();
    assert!(err.is_config(), "{err}");
    assert!(err.to_string().contains("embedding"), "{err}");

    // In providers.toml, an environment cannot list it under `embedding`.
    let err = Config::builder("prod")
        .provider(
            "claude",
            Cfg::builder(ProviderKind::Anthropic, "https://api.anthropic.com")
                .model("claude-3-5-haiku-latest")
                .key_env("prod", "ANTHROPIC_API_KEY"),
        )
        .embedding("prod", ["claude"])
        .build()
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("environments.prod.embedding[0]: provider `claude` is of kind anthropic, which cannot embed texts"),
        "{err}"
    );
}

#[tokio::test]
async fn gemini_refuses_more_than_a_batch_and_the_router_fails_over() {
    let clock = ManualClock::new();
    let emu = emulator(
        &clock,
        vec![
            ProviderConfig::gemini("gemini"),
            ProviderConfig::openai("openai"),
        ],
    )
    .await;
    let gemini = Gemini::new(
        ProviderId::new("gemini"),
        format!("{}/v1beta", emu.base_url("gemini"))
            .parse()
            .unwrap(),
    )
    .with_embedding_model(GEMINI_MODEL);
    let c = client(
        &clock,
        vec![
            (Arc::new(gemini.clone()), keyed(&emu, "gemini")),
            (openai(&emu, "openai"), keyed(&emu, "openai")),
        ],
    );
    let texts: Vec<String> = (0..150).map(|i| format!("text number {i}")).collect();
    let answer = c.embed(&EmbeddingRequest::many(&texts)).await.unwrap();
    assert_eq!(answer.provider.as_str(), "openai");
    assert_eq!(answer.vectors.len(), 150);
    assert_eq!(emu.counters("gemini").requests, 0);
    // A hundred fit in one batch.
    let hundred = c
        .embed(&EmbeddingRequest::many(&texts[..100]))
        .await
        .unwrap();
    assert_eq!(hundred.provider.as_str(), "gemini");

    // Gemini alone: the request ends before sending, saying why.
    let alone = client(&clock, vec![(Arc::new(gemini), keyed(&emu, "gemini"))]);
    let err = alone
        .embed(&EmbeddingRequest::many(&texts))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    assert!(err.to_string().contains("at most 100"), "{err}");
}

#[tokio::test]
async fn the_token_bucket_is_charged_the_inputs_tokens() {
    let clock = ManualClock::new();
    let emu = emulator(&clock, vec![ProviderConfig::openai("openai")]).await;
    let c = client(
        &clock,
        vec![(
            openai(&emu, "openai"),
            keyed(&emu, "openai").limits(Limits::none().with_rpm(1_000).with_tpm(100_000)),
        )],
    );
    let texts: Vec<String> = (0..20)
        .map(|i| format!("Document {i}: the quick brown fox jumps over the lazy dog."))
        .collect();
    let level = || async {
        let tokens = c
            .limits("openai", OPENAI_MODEL)
            .await
            .unwrap()
            .and_then(|l| l.tokens)
            .expect("a tpm is configured");
        assert_eq!(tokens.capacity, 100_000);
        tokens.level
    };
    let first = c.embed(&EmbeddingRequest::many(&texts)).await.unwrap();
    let before = level().await;
    let answer = c
        .embed(&EmbeddingRequest::many(&texts[..10]))
        .await
        .unwrap();
    let used = answer.usage.unwrap().input_tokens;
    assert!(
        used >= 100 && first.usage.unwrap().input_tokens > used,
        "{used}"
    );
    // The clock did not move: what the bucket lost is what the answer said it used (the
    // booking, made before, reconciled with the usage), and nothing for output.
    let after = level().await;
    assert!(
        (before - after - used as f64).abs() < 1.0,
        "level {before} -> {after} after {used} tokens"
    );
    // A request larger than the whole bucket is never sent.
    let small = client(
        &clock,
        vec![(
            openai(&emu, "openai"),
            keyed(&emu, "openai").limits(Limits::none().with_tpm(50)),
        )],
    );
    let err = small
        .embed(&EmbeddingRequest::many(&texts))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RequestTooLarge, "{err}");
    assert_eq!(emu.counters("openai").requests, 2);
}

/// `err` or one of the attempts it keeps.
fn find(err: &Error, f: impl Fn(&Error) -> bool) -> bool {
    f(err) || err.attempts().iter().any(f)
}

#[tokio::test]
async fn an_answer_with_the_wrong_number_of_vectors_is_a_decode_error_naming_the_provider() {
    let server = ScriptedServer::start().await;
    let one_vector = r#"{"object":"list","data":[{"object":"embedding","index":0,
        "embedding":[0.6,0.8]}],"model":"text-embedding-3-small",
        "usage":{"prompt_tokens":4,"total_tokens":4}}"#;
    server.push("/v1/embeddings", Reply::json(200, one_vector));
    let p = OpenAi::new(
        ProviderId::new("short"),
        format!("{}/v1", server.url()).parse().unwrap(),
    )
    .with_embedding_model(OPENAI_MODEL);
    let mut policy = Policy::default();
    policy.max_attempts = 1;
    let clock = ManualClock::new();
    let c = Client::builder()
        .clock(Arc::new(clock))
        .rng(Arc::new(SeededRng::new(7)))
        .policy(policy)
        .provider(Arc::new(p), ProviderSettings::new())
        .build()
        .unwrap();
    let err = c
        .embed_with(
            &EmbeddingRequest::many(["a", "b"]),
            &RequestOptions::new().deadline(Duration::from_secs(5)),
        )
        .await
        .unwrap_err();
    assert!(
        find(&err, |e| e.is_decode()
            && e.provider().map(|p| p.as_str()) == Some("short")
            && e.message()
                .contains("1 embedding vector(s) for 2 input(s)")),
        "{err:?}"
    );
    // An empty input is refused before sending.
    let err = c
        .embed(&EmbeddingRequest::many(["a", ""]))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidRequest, "{err}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn the_batch_runs_embedding_lines_beside_chat_lines_and_resumes() {
    use llm_failover::batch::{FileJob, Runner, Stop};

    let clock = ManualClock::new();
    let emu = emulator(&clock, vec![ProviderConfig::openai("openai")]).await;
    let c = client(
        &clock,
        vec![(openai(&emu, "openai"), keyed(&emu, "openai"))],
    );
    let dir = std::env::temp_dir().join(format!("llm-failover-embed-batch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (input, output) = (dir.join("in.jsonl"), dir.join("out.jsonl"));
    let lines = [
        r#"{"id": "q1", "prompt": "Name a prime.", "max_tokens": 8}"#,
        r#"{"id": "d1", "input": "the weather in Paris"}"#,
        r#"{"id": "d2", "input": ["a recipe for pancakes", "Paris weather today"], "dimensions": 64}"#,
        r#"{"id": "bad", "input": "x", "prompt": "y"}"#,
    ];
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let runner = Runner::new(c.clone()).concurrency(4);
    let report = FileJob::new(&input, &output)
        .run(&runner, &Stop::new())
        .await
        .unwrap();
    assert_eq!(report.run.ok, 3, "{report:?}");
    assert_eq!(report.run.failed(), 1);

    let results: Vec<serde_json::Value> = std::fs::read_to_string(&output)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let by_id = |id: &str| results.iter().find(|v| v["id"] == id).unwrap().clone();
    let q1 = by_id("q1");
    assert!(
        q1["text"].is_string() && q1.get("vectors").is_none(),
        "{q1}"
    );
    let d1 = by_id("d1");
    assert_eq!(d1.get("text"), None, "{d1}");
    assert_eq!(
        (d1["ok"].as_bool(), d1["provider"].as_str()),
        (Some(true), Some("openai"))
    );
    assert_eq!(d1["usage"]["output_tokens"], 0);
    let v: Vec<f32> = serde_json::from_value(d1["vectors"][0].clone()).unwrap();
    assert!(cosine(&v, &text_vector("the weather in Paris", 1536)) > 0.999);
    let d2: Vec<Vec<f32>> = serde_json::from_value(by_id("d2")["vectors"].clone()).unwrap();
    assert_eq!((d2.len(), d2[0].len()), (2, 64));
    let bad = by_id("bad");
    assert_eq!(bad["error"]["kind"], "invalid_input");
    assert!(
        bad["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not both"),
        "{bad}"
    );

    // A rerun sends nothing: every answered line, chat or embedding, is kept.
    let sent = emu.counters("openai").requests;
    assert_eq!(sent, 3);
    let again = FileJob::new(&input, &output)
        .run(&runner, &Stop::new())
        .await
        .unwrap();
    assert_eq!((again.skipped_ok, again.run.ok), (3, 0), "{again:?}");
    assert_eq!(emu.counters("openai").requests, sent);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_batch_on_the_queue_runs_embedding_lines() {
    use llm_failover::batch::Stop;
    use llm_failover_queue::{Queue, QueuedJob};

    let emu = Emulator::builder()
        .provider(ProviderConfig::openai("openai"))
        .start()
        .await
        .unwrap();
    let c = Client::builder()
        .provider(openai(&emu, "openai"), keyed(&emu, "openai"))
        .build()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("llm-failover-embed-queue-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (input, output) = (dir.join("in.jsonl"), dir.join("out.jsonl"));
    let lines = [
        r#"{"id": "d1", "input": "the weather in Paris"}"#,
        r#"{"id": "q1", "prompt": "Name a prime.", "max_tokens": 8}"#,
        r#"{"id": "d2", "input": ["a recipe for pancakes", "Paris weather today"]}"#,
    ];
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let queue = Queue::open(&format!("sqlite:{}", dir.join("jobs.sqlite").display()))
        .await
        .unwrap();
    let report = QueuedJob::new(&input, &output, queue.clone())
        .run(&c, &Stop::new())
        .await
        .unwrap();
    assert_eq!(
        (report.enqueued, report.ok, report.failed),
        (3, 3, 0),
        "{report:?}"
    );
    let got: Vec<serde_json::Value> = std::fs::read_to_string(&output)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(got[0]["id"], "d1");
    assert_eq!(got[0]["vectors"].as_array().map(Vec::len), Some(1));
    assert!(got[1]["text"].is_string());
    let d2: Vec<Vec<f32>> = serde_json::from_value(got[2]["vectors"].clone()).unwrap();
    assert!(cosine(&d2[1], &text_vector("Paris weather today", 1536)) > 0.999);
    // A rerun enqueues and sends nothing.
    let again = QueuedJob::new(&input, &output, queue)
        .run(&c, &Stop::new())
        .await
        .unwrap();
    assert_eq!((again.enqueued, again.ok), (0, 3));
    assert_eq!(emu.counters("openai").requests, 3);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn bedrock_embeds_with_titan_one_text_and_cohere_many_signed() {
    use llm_failover::bedrock::Bedrock;

    let clock = ManualClock::new();
    let emu = emulator(&clock, vec![ProviderConfig::bedrock("bedrock")]).await;
    let aws = emu.aws_credentials("bedrock");
    let credential = Credential::aws(
        aws.access_key_id.clone(),
        aws.secret_access_key.clone(),
        aws.session_token.clone(),
    );
    let bedrock = |model: &str| {
        Bedrock::new(
            ProviderId::new(format!("bedrock-{}", &model[..5])),
            emu.base_url("bedrock").parse().unwrap(),
            &aws.region,
        )
        .with_embedding_model(model)
    };
    let titan = bedrock("amazon.titan-embed-text-v2:0");
    let cohere = bedrock("cohere.embed-english-v3");
    let c = client(
        &clock,
        vec![
            (
                Arc::new(titan),
                ProviderSettings::new().credential(credential.clone()),
            ),
            (
                Arc::new(cohere),
                ProviderSettings::new().credential(credential),
            ),
        ],
    );
    // One text: Titan, the first in the order.
    let one = c
        .embed(&EmbeddingRequest::new(TEXTS[0]).dimensions(256))
        .await
        .unwrap();
    assert_eq!(one.provider.as_str(), "bedrock-amazo");
    assert_eq!(one.dimensions(), Some(256));
    assert!(one.usage.is_some_and(|u| u.input_tokens > 0));
    // Three texts: Titan takes one per request, so Cohere answers them in one.
    let many = c
        .embed(&EmbeddingRequest::many(TEXTS).input_type(InputType::Query))
        .await
        .unwrap();
    assert_eq!(many.provider.as_str(), "bedrock-coher");
    assert_in_order(&many, &TEXTS, 1024);
    assert!(many.usage.is_some_and(|u| u.input_tokens > 0));
    // Every request went through with a verified signature, to InvokeModel.
    let c = emu.counters("bedrock");
    assert_eq!((c.requests, c.ok), (2, 2), "{c:?}");
    assert!(emu.log().iter().all(|e| e.path.ends_with("/invoke")));
}

#[tokio::test]
async fn the_same_embedding_request_is_answered_from_the_cache() {
    use llm_failover::Origin;
    use llm_failover::cache::Cache;

    let clock = ManualClock::new();
    let emu = emulator(&clock, vec![ProviderConfig::openai("openai")]).await;
    let c = Client::builder()
        .clock(Arc::new(clock.clone()))
        .rng(Arc::new(SeededRng::new(7)))
        .provider(openai(&emu, "openai"), keyed(&emu, "openai"))
        .cache(Cache::memory())
        .build()
        .unwrap();
    let req = EmbeddingRequest::many(TEXTS);
    let first = c.embed(&req).await.unwrap();
    let again = c.embed(&req).await.unwrap();
    assert!(again.origin.is_cache(), "{again:?}");
    assert_eq!((again.attempts, &again.vectors), (0, &first.vectors));
    assert_eq!(first.origin, Origin::Provider);
    // Other dimensions are another request.
    let short = c.embed(&req.clone().dimensions(64)).await.unwrap();
    assert!(!short.origin.is_cache());
    assert_eq!(emu.counters("openai").requests, 2);
}
