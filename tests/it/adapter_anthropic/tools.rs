//! Tools, images and structured answers through the Anthropic adapter.
//!
//! Wire format references (fixtures are the docs' examples):
//! - Tool use: <https://docs.claude.com/en/docs/agents-and-tools/tool-use/overview> — the
//!   `get_weather` / `get_time` definitions, `message_tool_use.json` (the "Single tool
//!   example" answer, verbatim) and the follow-up request with its `tool_result`, and the
//!   "JSON mode" section (a single tool forced with `tool_choice`; its `record_summary`
//!   schema). `message_json_answer.json` is that section's answer as the adapter's answer
//!   tool receives it: the docs' `tool_use` answer shape, named `json_answer-record_summary`,
//!   its input following the schema (the docs show the request only).
//! - Implementing tool use: <https://docs.claude.com/en/docs/agents-and-tools/tool-use/implement-tool-use>
//!   — `tool_choice` `auto` / `any` / `tool` / `none`; "Parallel tool use" (one text block,
//!   then four calls `toolu_01` … `toolu_04`: `message_parallel_tool_use.json`, in the
//!   Messages API's message envelope); tool results "must immediately follow" their calls,
//!   and "the tool_result blocks must come FIRST in the content array".
//! - Streaming with tools: <https://docs.claude.com/en/docs/build-with-claude/streaming>,
//!   "Streaming request with tool use": `stream_tool_use.txt` verbatim (`content_block_start`
//!   with the `tool_use` id and name, `input_json_delta` pieces, `content_block_stop`).
//!   `stream_json_answer.txt` is the same answer as the adapter's forced answer tool gets it:
//!   no text block (forced tool use emits none, per "Forcing tool use" in the implementing
//!   guide) and the tool named `json_answer-weather`.
//! - Vision: <https://docs.claude.com/en/docs/build-with-claude/vision> — `image` blocks with
//!   a `base64` source (`media_type`, `data`) or a `url` source (the docs' ant photo), images
//!   before the text.

use llm_failover::provider::Provider;
use llm_failover::{
    ChatRequest, ErrorKind, FinishReason, Image, Message, ResponseFormat, Tool, ToolCall,
    ToolChoice, Usage,
};
use llm_failover_emulator::scripted::{Reply, ScriptedServer};
use serde_json::json;

use super::{PATH, chat, provider, stream};
use crate::support::adapter::only_request;

fn fixture_events(text: &str) -> Vec<String> {
    text.split_inclusive("\n\n").map(str::to_owned).collect()
}

/// The tool-use overview's `get_weather`.
fn weather_tool() -> Tool {
    Tool::new(
        "get_weather",
        json!({
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"],
                         "description": "The unit of temperature, either 'celsius' or 'fahrenheit'"}
            },
            "required": ["location"]
        }),
    )
    .description("Get the current weather in a given location")
}

/// The tool-use overview's `get_time`.
fn time_tool() -> Tool {
    Tool::new(
        "get_time",
        json!({
            "type": "object",
            "properties": {
                "timezone": {"type": "string", "description": "The IANA time zone name, e.g. America/Los_Angeles"}
            },
            "required": ["timezone"]
        }),
    )
    .description("Get the current time in a given time zone")
}

/// The "JSON mode" section's `record_summary` schema.
fn record_summary_schema() -> serde_json::Value {
    json!({
        "type": "object",
        "properties": {
            "key_colors": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "r": {"type": "number", "description": "red value [0.0, 1.0]"},
                        "g": {"type": "number", "description": "green value [0.0, 1.0]"},
                        "b": {"type": "number", "description": "blue value [0.0, 1.0]"},
                        "name": {"type": "string", "description": "Human-readable color name in snake_case, e.g. \"olive_green\" or \"turquoise\""}
                    },
                    "required": ["r", "g", "b", "name"]
                },
                "description": "Key colors in the image. Limit to less than four."
            },
            "description": {"type": "string", "description": "Image description. One to two sentences max."},
            "estimated_year": {"type": "integer", "description": "Estimated year that the image was taken, if it is a photo. Only set this if the image appears to be non-fictional. Rough estimates are okay!"}
        },
        "required": ["key_colors", "description"]
    })
}

#[tokio::test]
async fn sends_tools_with_their_input_schemas_and_each_tool_choice() {
    let server = ScriptedServer::start().await;
    let choices = [
        (None, None),
        (Some(ToolChoice::Auto), Some(json!({"type": "auto"}))),
        (Some(ToolChoice::None), Some(json!({"type": "none"}))),
        (Some(ToolChoice::Required), Some(json!({"type": "any"}))),
        (
            Some(ToolChoice::named("get_time")),
            Some(json!({"type": "tool", "name": "get_time"})),
        ),
    ];
    for _ in &choices {
        server.push(
            PATH,
            Reply::json(
                200,
                include_str!("../../fixtures/anthropic/message_tool_use.json"),
            ),
        );
    }
    for (choice, _) in &choices {
        let mut req = ChatRequest::from_prompt(
            "What is the weather like right now in New York? Also what time is it there?",
        )
        .tool(weather_tool())
        .tool(time_tool());
        req.tool_choice = choice.clone();
        chat(&server, &req).await.unwrap();
    }
    let reqs = server.requests();
    assert_eq!(
        reqs[0].json()["tools"],
        json!([
            {
                "name": "get_weather",
                "description": "Get the current weather in a given location",
                "input_schema": weather_tool().parameters
            },
            {
                "name": "get_time",
                "description": "Get the current time in a given time zone",
                "input_schema": time_tool().parameters
            }
        ])
    );
    for (got, (choice, want)) in reqs.iter().zip(&choices) {
        assert_eq!(got.json().get("tool_choice"), want.as_ref(), "{choice:?}");
        assert_eq!(got.json()["tools"].as_array().map(Vec::len), Some(2));
    }
}

#[tokio::test]
async fn reads_a_tool_use_answer_and_sends_its_result_back_as_the_docs_show() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(
            200,
            include_str!("../../fixtures/anthropic/message_tool_use.json"),
        ),
    );
    server.push(
        PATH,
        Reply::json(
            200,
            include_str!("../../fixtures/anthropic/message_ok.json"),
        ),
    );
    let question =
        ChatRequest::from_prompt("What is the weather like in San Francisco?").tool(weather_tool());
    let answer = chat(&server, &question).await.unwrap();
    assert_eq!(
        answer.text,
        "I'll check the current weather in San Francisco for you."
    );
    assert_eq!(answer.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(
        answer.tool_calls,
        vec![ToolCall::new(
            "toolu_01A09q90qw90lq917835lq9",
            "get_weather",
            json!({"location": "San Francisco, CA", "unit": "celsius"})
        )]
    );
    assert_eq!(answer.model, "claude-sonnet-4-5");

    let follow_up = question
        .message(answer.to_message())
        .message(Message::tool_result(
            "toolu_01A09q90qw90lq917835lq9",
            "15 degrees",
        ));
    chat(&server, &follow_up).await.unwrap();
    assert_eq!(
        server.requests()[1].json()["messages"],
        json!([
            {"role": "user", "content": "What is the weather like in San Francisco?"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "I'll check the current weather in San Francisco for you."},
                {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather",
                 "input": {"location": "San Francisco, CA", "unit": "celsius"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01A09q90qw90lq917835lq9", "content": "15 degrees"}
            ]}
        ])
    );
}

#[tokio::test]
async fn reads_parallel_calls_in_order_after_the_text_before_them() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(
            200,
            include_str!("../../fixtures/anthropic/message_parallel_tool_use.json"),
        ),
    );
    let req = ChatRequest::from_prompt("Weather and time in San Francisco and New York?")
        .tool(weather_tool())
        .tool(time_tool());
    let answer = chat(&server, &req).await.unwrap();
    assert_eq!(answer.text, "I'll check both locations...");
    assert_eq!(answer.finish_reason, Some(FinishReason::ToolCalls));
    let calls: Vec<(&str, &str, &serde_json::Value)> = answer
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), &c.arguments))
        .collect();
    assert_eq!(
        calls,
        [
            (
                "toolu_01",
                "get_weather",
                &json!({"location": "San Francisco, CA"})
            ),
            (
                "toolu_02",
                "get_weather",
                &json!({"location": "New York, NY"})
            ),
            (
                "toolu_03",
                "get_time",
                &json!({"timezone": "America/Los_Angeles"})
            ),
            (
                "toolu_04",
                "get_time",
                &json!({"timezone": "America/New_York"})
            ),
        ]
    );
    assert_eq!(answer.usage, Some(Usage::new(523, 89)));
}

#[tokio::test]
async fn continues_a_tool_conversation_begun_on_openai() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(
            200,
            include_str!("../../fixtures/anthropic/message_ok.json"),
        ),
    );
    // As OpenAI answered it: parallel calls with `call_…` ids, then one tool message per
    // result, then the user's next words; a second round with text before its call.
    let req = ChatRequest::new()
        .system("Be brief.")
        .user("What's the weather like in Paris and Tokyo?")
        .message(Message::assistant_calls(
            "",
            vec![
                ToolCall::new(
                    "call_abc123",
                    "get_weather",
                    json!({"location": "Paris, France"}),
                ),
                ToolCall::new(
                    "call_def456",
                    "get_weather",
                    json!({"location": "Tokyo, Japan"}),
                ),
            ],
        ))
        .message(Message::tool_result(
            "call_abc123",
            r#"{"temperature_c": 18}"#,
        ))
        .message(Message::tool_result(
            "call_def456",
            r#"{"temperature_c": 24}"#,
        ))
        .user("And the time in Tokyo?")
        .message(Message::assistant_calls(
            "Let me check.",
            vec![ToolCall::new(
                "call_ghi789",
                "get_time",
                json!({"timezone": "Asia/Tokyo"}),
            )],
        ))
        .message(Message::tool_result("call_ghi789", "21:04"))
        .tool(weather_tool())
        .tool(time_tool());
    provider(&server).check_chat(&req).unwrap();
    chat(&server, &req).await.unwrap();
    let body = only_request(&server).json();
    assert_eq!(body["system"], "Be brief.");
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": "What's the weather like in Paris and Tokyo?"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "call_abc123", "name": "get_weather", "input": {"location": "Paris, France"}},
                {"type": "tool_use", "id": "call_def456", "name": "get_weather", "input": {"location": "Tokyo, Japan"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_abc123", "content": "{\"temperature_c\": 18}"},
                {"type": "tool_result", "tool_use_id": "call_def456", "content": "{\"temperature_c\": 24}"},
                {"type": "text", "text": "And the time in Tokyo?"}
            ]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "call_ghi789", "name": "get_time", "input": {"timezone": "Asia/Tokyo"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_ghi789", "content": "21:04"}
            ]}
        ])
    );
}

#[tokio::test]
async fn ids_outside_anthropics_pattern_are_made_portable_on_calls_and_results_alike() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(
            200,
            include_str!("../../fixtures/anthropic/message_ok.json"),
        ),
    );
    let req = ChatRequest::from_prompt("Weather?")
        .message(Message::assistant_calls(
            "",
            vec![ToolCall::new(
                "fc:1/a",
                "get_weather",
                json!({"location": "Oslo"}),
            )],
        ))
        .message(Message::tool_result("fc:1/a", "-3 C"))
        .tool(weather_tool());
    chat(&server, &req).await.unwrap();
    let body = only_request(&server).json();
    assert_eq!(body["messages"][1]["content"][0]["id"], "fc_1_a");
    assert_eq!(body["messages"][2]["content"][0]["tool_use_id"], "fc_1_a");
}

#[tokio::test]
async fn sends_images_from_base64_and_url_sources_before_the_text() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(
            200,
            include_str!("../../fixtures/anthropic/message_ok.json"),
        ),
    );
    let ant =
        "https://upload.wikimedia.org/wikipedia/commons/a/a7/Camponotus_flavomarginatus_ant.jpg";
    let req = ChatRequest::new().message(
        Message::user("How are these images different?")
            .image(Image::base64("image/jpeg", "/9j/4AAQSkZJRg..."))
            .image(Image::url(ant)),
    );
    provider(&server).check_chat(&req).unwrap();
    chat(&server, &req).await.unwrap();
    assert_eq!(
        only_request(&server).json()["messages"],
        json!([{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQSkZJRg..."}},
            {"type": "image", "source": {"type": "url", "url": ant}},
            {"type": "text", "text": "How are these images different?"}
        ]}])
    );
}

#[tokio::test]
async fn a_schema_answer_is_a_forced_tool_whose_input_becomes_the_text() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(
            200,
            include_str!("../../fixtures/anthropic/message_json_answer.json"),
        ),
    );
    let req = ChatRequest::new()
        .message(
            Message::user("Describe this image.")
                .image(Image::base64("image/jpeg", "/9j/4AAQSkZJRg...")),
        )
        .response_format(ResponseFormat::JsonSchema {
            name: "record_summary".into(),
            schema: record_summary_schema(),
        });
    let answer = chat(&server, &req).await.unwrap();

    let body = only_request(&server).json();
    assert!(
        body.get("system").is_none(),
        "no instruction: the tool carries the schema"
    );
    let tools = body["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0]["name"], "json_answer-record_summary");
    assert_eq!(tools[0]["input_schema"], record_summary_schema());
    assert!(
        tools[0]["description"]
            .as_str()
            .unwrap()
            .contains("`record_summary`")
    );
    assert_eq!(
        body["tool_choice"],
        json!({"type": "tool", "name": "json_answer-record_summary", "disable_parallel_tool_use": true})
    );

    let fixture: serde_json::Value = serde_json::from_str(include_str!(
        "../../fixtures/anthropic/message_json_answer.json"
    ))
    .unwrap();
    assert_eq!(answer.json().unwrap(), fixture["content"][0]["input"]);
    assert_eq!(answer.text, fixture["content"][0]["input"].to_string());
    assert!(answer.tool_calls.is_empty(), "not a call of the caller's");
    assert_eq!(answer.finish_reason, Some(FinishReason::Stop));
}

#[tokio::test]
async fn json_object_is_forced_too_and_a_request_with_its_own_tools_gets_an_instruction() {
    let server = ScriptedServer::start().await;
    for _ in 0..2 {
        server.push(
            PATH,
            Reply::json(
                200,
                include_str!("../../fixtures/anthropic/message_ok.json"),
            ),
        );
    }
    let plain = ChatRequest::new()
        .system("Be exact.")
        .user("List two colours.")
        .response_format(ResponseFormat::JsonObject);
    chat(&server, &plain).await.unwrap();
    let schema = json!({"type": "object", "properties": {"colours": {"type": "array"}}});
    let with_tools = ChatRequest::from_prompt("List two colours, checking the weather first.")
        .tool(weather_tool())
        .tool_choice(ToolChoice::Auto)
        .response_format(ResponseFormat::JsonSchema {
            name: "palette".into(),
            schema: schema.clone(),
        });
    chat(&server, &with_tools).await.unwrap();

    let reqs = server.requests();
    let forced = reqs[0].json();
    assert_eq!(forced["system"], "Be exact.");
    assert_eq!(forced["tools"][0]["name"], "json_answer");
    assert_eq!(
        forced["tools"][0]["input_schema"],
        json!({"type": "object"})
    );
    assert_eq!(
        forced["tool_choice"],
        json!({"type": "tool", "name": "json_answer", "disable_parallel_tool_use": true})
    );
    assert!(forced.get("response_format").is_none());

    let told = reqs[1].json();
    assert_eq!(
        told["tools"].as_array().map(Vec::len),
        Some(1),
        "the caller's tool only"
    );
    assert_eq!(told["tool_choice"], json!({"type": "auto"}));
    let system = told["system"].as_str().unwrap();
    assert!(system.contains("`palette`"), "{system}");
    assert!(system.contains(&schema.to_string()), "{system}");
}

#[tokio::test]
async fn streams_tool_use_pieces_into_one_whole_call() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::sse(fixture_events(include_str!(
            "../../fixtures/anthropic/stream_tool_use.txt"
        ))),
    );
    let req = ChatRequest::from_prompt("What is the weather like in San Francisco?")
        .tool(weather_tool())
        .tool_choice(ToolChoice::Required);
    let chunks: Vec<_> = stream(&server, &req)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.unwrap())
        .collect();

    let text: String = chunks.iter().map(|c| c.delta.as_str()).collect();
    assert_eq!(text, "Okay, let's check the weather for San Francisco, CA:");
    let with_calls: Vec<_> = chunks.iter().filter(|c| !c.tool_calls.is_empty()).collect();
    assert_eq!(with_calls.len(), 1, "the call goes out once, whole");
    assert_eq!(
        with_calls[0].tool_calls,
        vec![ToolCall::new(
            "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
            "get_weather",
            json!({"location": "San Francisco, CA", "unit": "fahrenheit"})
        )]
    );
    assert!(with_calls[0].finish_reason.is_none(), "at its block's stop");
    let last = chunks.last().unwrap();
    assert_eq!(last.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(last.usage, Some(Usage::new(472, 89)));
    let body = only_request(&server).json();
    assert_eq!(body["stream"], true);
    assert_eq!(body["tool_choice"], json!({"type": "any"}));
}

#[tokio::test]
async fn streams_a_structured_answer_as_text() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::sse(fixture_events(include_str!(
            "../../fixtures/anthropic/stream_json_answer.txt"
        ))),
    );
    let req = ChatRequest::from_prompt("What is the weather like in San Francisco?")
        .response_format(ResponseFormat::JsonSchema {
            name: "weather".into(),
            schema: weather_tool().parameters,
        });
    let chunks: Vec<_> = stream(&server, &req)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.unwrap())
        .collect();
    let text: String = chunks.iter().map(|c| c.delta.as_str()).collect();
    assert_eq!(
        text,
        r#"{"location": "San Francisco, CA", "unit": "fahrenheit"}"#
    );
    assert!(chunks.iter().all(|c| c.tool_calls.is_empty()));
    assert_eq!(
        chunks.last().unwrap().finish_reason,
        Some(FinishReason::Stop)
    );
    assert_eq!(
        only_request(&server).json()["tool_choice"],
        json!({"type": "tool", "name": "json_answer-weather", "disable_parallel_tool_use": true})
    );
}

#[tokio::test]
async fn refuses_before_sending_what_anthropic_cannot_carry() {
    let server = ScriptedServer::start().await;
    let call = || ToolCall::new("call_1", "get_weather", json!({"location": "Paris"}));
    let cases: Vec<(ChatRequest, ErrorKind, &str)> = vec![
        (
            ChatRequest::new()
                .message(Message::user("What is this?").image(Image::base64("image/bmp", "Qk0="))),
            ErrorKind::Unsupported,
            "`image/bmp`",
        ),
        (
            ChatRequest::from_prompt("Weather?")
                .message(Message::assistant_calls("", vec![call()]))
                .user("Never mind."),
            ErrorKind::Unsupported,
            "call `call_1` has no result",
        ),
        (
            ChatRequest::from_prompt("x").tool(Tool::new("json_answer", json!({"type": "object"}))),
            ErrorKind::Unsupported,
            "`json_answer`",
        ),
        (
            ChatRequest::from_prompt("x").message(Message::tool_result("call_9", "18 C")),
            ErrorKind::InvalidRequest,
            "no earlier assistant",
        ),
    ];
    for (req, kind, want) in cases {
        let err = provider(&server).check_chat(&req).unwrap_err();
        assert_eq!(err.kind(), kind, "{want}: {err}");
        assert!(err.message().contains(want), "{want}: {err}");
        let err = chat(&server, &req).await.unwrap_err();
        assert_eq!(err.kind(), kind, "{want}: {err}");
    }
    assert!(server.requests().is_empty(), "nothing sent");
}
