//! The integration tests, in one binary (one link, one run): a module per behaviour area,
//! `support` for what they share. Everything binds loopback port 0 or runs on a scripted
//! transport; no test reaches the internet or sleeps on the wall clock to wait for logic.
//!
//! One area: `cargo test --test it failover::` (a module path filters its tests).

#[path = "../fixtures/config/catalogue.rs"]
mod catalogue;
mod support;

mod adapter_anthropic;
mod adapter_azure;
mod adapter_bedrock;
mod adapter_deepgram;
mod adapter_gemini;
mod adapter_openai;
mod adapter_vertex;
mod admission;
mod batch;
mod batch_cache;
mod batch_defaults;
mod batch_files;
mod batch_queue;
mod budget;
mod budget_shared;
mod bulk_lane;
mod cache;
mod cache_config;
mod circuit_breaker;
mod cli;
mod code_first;
mod config;
mod conformance;
mod cost;
mod docs;
mod e2e;
mod embeddings;
mod emulator_bulk;
mod example_chat;
mod example_tools;
mod extra_body;
mod failover;
mod first_contact;
mod http_client;
mod jobs;
mod jobs_postgres;
mod jobs_postgres_tls;
mod jobs_soak;
mod layers;
mod limiter_props;
mod metrics;
mod metrics_export;
mod proptests;
mod rate_limits;
mod secrets;
mod shared_auth;
mod shared_cluster;
mod shared_config;
mod shared_limits;
mod shared_processes;
mod shared_tls;
mod soak;
mod streaming;
mod structured;
mod tools_failover;
mod transcribe_queue;
mod transcription;
mod transport;
mod transport_safety;
mod turn_state;
mod wire_schemas;
mod worker;
