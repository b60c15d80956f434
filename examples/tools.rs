//! Tools and structured answers through every chat wire format: for OpenAI, Azure OpenAI,
//! Anthropic and Gemini in turn, a client with that one provider asks about the weather with
//! a `get_weather` tool, runs the call it gets back on a local fake tool, sends the result
//! ([`Message::tool_result`]) and prints the final answer; then asks for a weather report as
//! JSON of a schema ([`ResponseFormat::JsonSchema`]) and parses it into a Rust type
//! ([`ChatResponse::parse`](llm_failover::ChatResponse::parse)).
//!
//! ```sh
//! cargo run --example tools
//! ```
//!
//! The providers are served by the emulator in this process, on a free loopback port, with
//! its own keys: no key, no network. The emulator is not a model — it calls the tool your
//! text mentions with arguments generated from the tool's schema, quotes the tool's result
//! back, and answers a schema with JSON generated from it — but it speaks each provider's
//! wire format, so the same code runs against the real ones with their base URLs and keys.
//! The run exits non-zero when any format fails.

use std::error::Error;
use std::process::ExitCode;
use std::sync::Arc;

use llm_failover::provider::Provider;
use llm_failover::provider::anthropic::Anthropic;
use llm_failover::provider::azure::Azure;
use llm_failover::provider::gemini::Gemini;
use llm_failover::provider::openai::OpenAi;
use llm_failover::{
    ChatRequest, Client, Credential, FinishReason, Message, ProviderId, ProviderSettings,
    ResponseFormat, Tool, ToolCall,
};
use llm_failover_emulator::Emulator;
use serde::Deserialize;
use serde_json::{Value, json};

/// The chat wire formats, each served under its own name.
const FORMATS: [&str; 4] = ["openai", "azure", "anthropic", "gemini"];

/// The structured answer's type; its schema is [`report_schema`].
#[derive(Debug, Deserialize)]
struct Report {
    city: String,
    temperature_c: f64,
    conditions: String,
}

fn report_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "city": { "type": "string" },
            "temperature_c": { "type": "number" },
            "conditions": { "type": "string", "enum": ["sunny", "cloudy", "rain"] }
        },
        "required": ["city", "temperature_c", "conditions"],
        "additionalProperties": false
    })
}

fn weather_tool() -> Tool {
    Tool::new(
        "get_weather",
        json!({
            "type": "object",
            "properties": {
                "city": { "type": "string", "description": "The city, e.g. Paris" }
            },
            "required": ["city"],
            "additionalProperties": false
        }),
    )
    .description("The current weather in a city.")
}

/// The local tool: a fake weather service.
fn get_weather(call: &ToolCall) -> String {
    let city = call.arguments["city"].as_str().unwrap_or("nowhere");
    json!({ "city": city, "temperature_c": 18, "conditions": "sunny" }).to_string()
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(0) => ExitCode::SUCCESS,
        Ok(failed) => {
            eprintln!("{failed} check(s) failed");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("tools: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Every format in turn; the number of checks that failed.
async fn run() -> Result<usize, Box<dyn Error>> {
    let emu = Emulator::builder()
        .openai("openai")
        .azure("azure")
        .anthropic("anthropic")
        .gemini("gemini")
        .start()
        .await?;
    eprintln!("emulator on {} (loopback; no key, no network)", emu.url());
    let mut failed = 0;
    for format in FORMATS {
        let client = client_for(&emu, format)?;
        match tool_round_trip(&client).await {
            Ok(line) => println!("{format}: tool round trip: {line}"),
            Err(e) => {
                failed += 1;
                println!("{format}: tool round trip FAILED: {e}");
            }
        }
        match structured(&client).await {
            Ok(line) => println!("{format}: structured answer: {line}"),
            Err(e) => {
                failed += 1;
                println!("{format}: structured answer FAILED: {e}");
            }
        }
    }
    Ok(failed)
}

/// The adapter of `format`, pointed at the emulator (in an application: the provider's own
/// base URL).
fn adapter(emu: &Emulator, format: &str) -> Result<Arc<dyn Provider>, Box<dyn Error>> {
    let id = ProviderId::new(format);
    let base = emu.base_url(format);
    Ok(match format {
        "openai" => Arc::new(OpenAi::new(id, base.parse()?).with_chat_model("gpt-4o-mini")),
        "azure" => {
            Arc::new(Azure::new(id, base.parse()?, "2024-10-21").with_chat_model("gpt-4o-mini"))
        }
        "anthropic" => {
            Arc::new(Anthropic::new(id, base.parse()?).with_model("claude-3-5-haiku-latest"))
        }
        // Gemini's API version is part of its base URL.
        "gemini" => Arc::new(
            Gemini::new(id, format!("{base}/v1beta").parse()?).with_model("gemini-2.5-flash"),
        ),
        other => return Err(format!("no chat format `{other}`").into()),
    })
}

/// A client with `format`'s provider alone, keyed with the emulator's key.
fn client_for(emu: &Emulator, format: &str) -> Result<Client, Box<dyn Error>> {
    let settings = ProviderSettings::new().credential(Credential::new(emu.key(format)));
    Ok(Client::builder()
        .provider(adapter(emu, format)?, settings)
        .build()?)
}

/// Ask with the tool, run the call, send its result, return the final answer.
async fn tool_round_trip(client: &Client) -> Result<String, Box<dyn Error>> {
    let question = ChatRequest::new()
        .user("What's the weather in Paris right now?")
        .tool(weather_tool())
        .max_tokens(200);
    let turn = client.chat(question.clone()).await?;
    if turn.finish_reason != Some(FinishReason::ToolCalls) {
        return Err(format!("expected a tool call, got {:?}", turn.finish_reason).into());
    }
    let Some(call) = turn.tool_calls.first().cloned() else {
        return Err("the answer finished for tool calls but holds none".into());
    };
    if call.name != "get_weather" {
        return Err(format!("called `{}`, not get_weather", call.name).into());
    }
    let result = get_weather(&call);
    let follow_up = question
        .message(turn.to_message())
        .message(Message::tool_result(&call.id, &result));
    let answer = client.chat(follow_up).await?;
    if !answer.tool_calls.is_empty() || answer.text.trim().is_empty() {
        return Err("the tool's result did not get a text answer".into());
    }
    Ok(format!(
        "{} called get_weather({}), then answered via {}: {}",
        turn.provider, call.arguments, answer.provider, answer.text
    ))
}

/// Ask for JSON of a schema and parse it into [`Report`].
async fn structured(client: &Client) -> Result<String, Box<dyn Error>> {
    let request = ChatRequest::from_prompt("Describe the weather in Paris as a report.")
        .response_format(ResponseFormat::JsonSchema {
            name: "weather_report".into(),
            schema: report_schema(),
        })
        .max_tokens(200);
    let answer = client.chat(request).await?;
    let report: Report = answer.parse()?;
    if report.city.is_empty() || !report.temperature_c.is_finite() {
        return Err(format!("an empty report: {report:?}").into());
    }
    Ok(format!(
        "{} → Report {{ city: {:?}, temperature_c: {}, conditions: {:?} }}",
        answer.provider, report.city, report.temperature_c, report.conditions
    ))
}
