//! Tools, images and structured answers in the Chat Completions format, over loopback HTTP.
//!
//! Sources (each fixture is cited where it is loaded):
//! - the Chat Completions reference, https://platform.openai.com/docs/api-reference/chat/create:
//!   its "Functions" example (the `get_current_weather` tool, `tool_choice: "auto"`, and the
//!   answer `chat_completion_tool_call.json`), its "Image input" example (the request's text and
//!   `image_url` parts, the answer `chat_completion_image.json`), `tool_choice` ("none", "auto",
//!   "required", `{"type": "function", "function": {"name"}}`), the tool message
//!   (`role: "tool"`, `tool_call_id`, `content`) and the assistant message (`content` null with
//!   `tool_calls`);
//! - the function-calling guide, https://platform.openai.com/docs/guides/function-calling:
//!   parallel calls (several entries in one `tool_calls`, one `role: "tool"` message per
//!   result) and streaming ("the first chunk … `id`, `function.name` … then `arguments`
//!   pieces"; its streamed example is `call_DdmO9pD3xa9XTPNJ32zg2hcA`, `get_weather`,
//!   `{"location":"Paris, France"}`);
//! - the structured-outputs guide, https://platform.openai.com/docs/guides/structured-outputs
//!   (`response_format: {"type": "json_schema", "json_schema": {"name", "schema"}}`, its
//!   calendar-event example).

use llm_failover::{Image, Message, Tool, ToolCall, ToolChoice};
use serde_json::json;

use super::*;

/// The reference's "Functions" example tool.
fn weather_tool() -> Tool {
    Tool::new(
        "get_current_weather",
        json!({
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        }),
    )
    .description("Get the current weather in a given location")
}

fn weather_request() -> ChatRequest {
    ChatRequest::from_prompt("What is the weather like in Boston today?").tool(weather_tool())
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/fixtures/openai/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

#[tokio::test]
async fn sends_tools_and_each_tool_choice_as_the_reference_writes_them() {
    let choices = [
        (ToolChoice::Auto, json!("auto")),
        (ToolChoice::None, json!("none")),
        (ToolChoice::Required, json!("required")),
        (
            ToolChoice::named("get_current_weather"),
            json!({"type": "function", "function": {"name": "get_current_weather"}}),
        ),
    ];
    let h = Harness::new().await;
    for _ in 0..=choices.len() {
        h.server.push(
            CHAT,
            Reply::json(200, fixture("chat_completion_tool_call.json")),
        );
    }
    for (choice, _) in &choices {
        h.chat(&weather_request().tool_choice(choice.clone()))
            .await
            .result
            .unwrap();
    }
    h.chat(&weather_request()).await.result.unwrap();
    let sent = h.server.requests();
    for (got, (_, want)) in sent.iter().zip(&choices) {
        let body = got.json();
        assert_eq!(
            body["tools"],
            json!([{
                "type": "function",
                "function": {
                    "name": "get_current_weather",
                    "description": "Get the current weather in a given location",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                        },
                        "required": ["location"],
                    },
                },
            }])
        );
        assert_eq!(&body["tool_choice"], want);
        assert_eq!(
            body["messages"],
            json!([{"role": "user", "content": "What is the weather like in Boston today?"}])
        );
    }
    // No choice set: none sent (the API's default with tools is "auto").
    let last = sent.last().unwrap().json();
    assert!(last.get("tool_choice").is_none(), "{last}");
}

#[tokio::test]
async fn reads_the_reference_answer_with_one_tool_call() {
    // The reference's "Functions" example response.
    let h = Harness::new().await;
    h.server.push(
        CHAT,
        Reply::json(
            200,
            include_str!("../../fixtures/openai/chat_completion_tool_call.json"),
        ),
    );
    let resp = h.chat(&weather_request()).await.result.unwrap();
    assert_eq!(resp.text, "");
    assert_eq!(resp.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(
        resp.tool_calls,
        [ToolCall::new(
            "call_abc123",
            "get_current_weather",
            json!({"location": "Boston, MA"})
        )]
    );
    assert_eq!(resp.usage, Some(Usage::new(82, 17)));
    assert_eq!(resp.request_id.as_deref(), Some("chatcmpl-abc123"));
}

#[tokio::test]
async fn reads_parallel_calls_in_order_and_sends_the_conversation_back() {
    // The reference's "Functions" answer with a second call, as the guide's parallel function
    // calling describes; then the next turn: the assistant's calls and one result per call.
    let h = Harness::new().await;
    h.server.push(
        CHAT,
        Reply::json(
            200,
            include_str!("../../fixtures/openai/chat_completion_parallel_tool_calls.json"),
        ),
    );
    h.server.push(
        CHAT,
        Reply::json(
            200,
            include_str!("../../fixtures/openai/chat_completion.json"),
        ),
    );
    let first = ChatRequest::from_prompt("What is the weather like in Boston and Paris today?")
        .tool(weather_tool());
    let resp = h.chat(&first).await.result.unwrap();
    let calls: Vec<_> = resp
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.clone()))
        .collect();
    assert_eq!(
        calls,
        [
            (
                "call_abc123",
                "get_current_weather",
                json!({"location": "Boston, MA"})
            ),
            (
                "call_def456",
                "get_current_weather",
                json!({"location": "Paris, France", "unit": "celsius"})
            ),
        ]
    );
    assert_eq!(resp.finish_reason, Some(FinishReason::ToolCalls));

    let next = first
        .message(resp.to_message())
        .message(Message::tool_result(
            "call_abc123",
            r#"{"temperature": 22}"#,
        ))
        .message(Message::tool_result(
            "call_def456",
            r#"{"temperature": 18}"#,
        ));
    assert!(h.provider.check_chat(&next).is_ok());
    h.chat(&next).await.result.unwrap();
    let body = h.server.requests()[1].json();
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": "What is the weather like in Boston and Paris today?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_abc123", "type": "function",
                 "function": {"name": "get_current_weather", "arguments": "{\"location\":\"Boston, MA\"}"}},
                {"id": "call_def456", "type": "function",
                 "function": {"name": "get_current_weather",
                              "arguments": "{\"location\":\"Paris, France\",\"unit\":\"celsius\"}"}},
            ]},
            {"role": "tool", "tool_call_id": "call_abc123", "content": "{\"temperature\": 22}"},
            {"role": "tool", "tool_call_id": "call_def456", "content": "{\"temperature\": 18}"},
        ])
    );
    assert_eq!(body["tools"][0]["function"]["name"], "get_current_weather");
}

#[tokio::test]
async fn arguments_that_are_not_json_are_a_decode_error_naming_the_tool() {
    // The reference answer with its arguments cut short (the reference warns: "the model does
    // not always generate valid JSON").
    let cut = include_str!("../../fixtures/openai/chat_completion_tool_call.json").replace(
        r#""{\n\"location\": \"Boston, MA\"\n}""#,
        r#""{\n\"location\": \"Bost""#,
    );
    assert_ne!(
        cut,
        include_str!("../../fixtures/openai/chat_completion_tool_call.json")
    );
    let h = Harness::new().await;
    h.server.push(CHAT, Reply::json(200, cut));
    let err = h.chat(&weather_request()).await.result.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Decode, "{err}");
    assert!(err.message().contains("`get_current_weather`"), "{err}");
    assert!(err.message().contains("tool_calls[0]"), "{err}");
    assert!(!err.message().contains("Bost"), "arguments stay out: {err}");
    assert_eq!(err.provider().map(ProviderId::as_str), Some("openai"));
    assert_eq!(err.status(), Some(200));
}

#[tokio::test]
async fn sends_an_image_url_and_a_base64_image_after_the_text() {
    // The reference's "Image input" example, and a carried image as a data URL.
    const URL: &str = "https://upload.wikimedia.org/wikipedia/commons/thumb/d/dd/Gfp-wisconsin-madison-the-nature-boardwalk.jpg/2560px-Gfp-wisconsin-madison-the-nature-boardwalk.jpg";
    let h = Harness::new().await;
    h.server.push(
        CHAT,
        Reply::json(
            200,
            include_str!("../../fixtures/openai/chat_completion_image.json"),
        ),
    );
    let req = ChatRequest::new().message(
        Message::user("What is in this image?")
            .image(Image::url(URL))
            .image(Image::base64("image/png", "iVBORw0KGgoAAAANSUhEUg==")),
    );
    assert!(h.provider.check_chat(&req).is_ok());
    let resp = h.chat(&req).await.result.unwrap();
    assert!(resp.text.starts_with("The image shows a wooden boardwalk"));
    assert_eq!(resp.model, "gpt-5.4");
    assert_eq!(
        h.only_request().json()["messages"],
        json!([{"role": "user", "content": [
            {"type": "text", "text": "What is in this image?"},
            {"type": "image_url", "image_url": {"url": URL}},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgoAAAANSUhEUg=="}},
        ]}])
    );
}

#[tokio::test]
async fn refuses_what_the_format_cannot_carry_before_sending() {
    let h = Harness::new().await;
    let tiff = ChatRequest::new()
        .message(Message::user("What is this?").image(Image::base64("image/tiff", "SUkqAA==")));
    let call = ToolCall::new("call_1", "get_current_weather", json!({"location": "Oslo"}));
    let interrupted = weather_request()
        .message(Message::assistant_calls("", vec![call]))
        .user("Never mind.")
        .message(Message::tool_result("call_1", "4 C"));
    for req in [&tiff, &interrupted] {
        let err = h.provider.check_chat(req).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
        assert_eq!(err.provider().map(ProviderId::as_str), Some("openai"));
        // A direct caller is refused the same way, before anything is sent.
        let ex = h.chat(req).await;
        assert_eq!(ex.result.unwrap_err().kind(), ErrorKind::Unsupported);
    }
    let orphan = ChatRequest::new().message(Message::tool_result("call_9", "4 C"));
    let err = h.provider.check_chat(&orphan).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidRequest, "{err}");
    assert!(err.message().starts_with("openai request:"), "{err}");
    assert!(h.server.requests().is_empty());
}

#[tokio::test]
async fn a_json_schema_answer_parses_into_the_callers_type() {
    // The structured-outputs guide's calendar-event example.
    #[derive(Debug, PartialEq, serde::Deserialize)]
    struct CalendarEvent {
        name: String,
        date: String,
        participants: Vec<String>,
    }
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "date": {"type": "string"},
            "participants": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["name", "date", "participants"],
        "additionalProperties": false,
    });
    let answer = r#"{"id":"chatcmpl-s","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"{\"name\":\"Science Fair\",\"date\":\"Friday\",\"participants\":[\"Alice\",\"Bob\"]}","refusal":null},"finish_reason":"stop"}]}"#;
    let h = Harness::new().await;
    h.server.push(CHAT, Reply::json(200, answer));
    let req = ChatRequest::new()
        .system("Extract the event information.")
        .user("Alice and Bob are going to a science fair on Friday.")
        .response_format(ResponseFormat::JsonSchema {
            name: "calendar_event".into(),
            schema: schema.clone(),
        });
    let resp = h.chat(&req).await.result.unwrap();
    assert_eq!(
        resp.parse::<CalendarEvent>().unwrap(),
        CalendarEvent {
            name: "Science Fair".into(),
            date: "Friday".into(),
            participants: vec!["Alice".into(), "Bob".into()],
        }
    );
    let body = h.only_request().json();
    assert_eq!(body["response_format"]["type"], "json_schema");
    assert_eq!(
        body["response_format"]["json_schema"]["name"],
        "calendar_event"
    );
    assert_eq!(body["response_format"]["json_schema"]["schema"], schema);
}

/// The stream's items, all of them `Ok`.
async fn stream_chunks(h: &Harness, req: &ChatRequest) -> Vec<ChatChunk> {
    collect(h.stream(req).await.result.unwrap())
        .await
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[tokio::test]
async fn a_streamed_call_is_put_together_and_handed_over_whole_with_the_finish() {
    // The guide's streamed call, split across TCP writes at every size.
    let sse = fixture("chat_stream_tool_call.sse");
    for size in [1, 7, 64, sse.len()] {
        let h = Harness::new().await;
        h.server.push(CHAT, sse_reply(&sse, size));
        let chunks = stream_chunks(&h, &weather_request()).await;
        let with_calls: Vec<_> = chunks.iter().filter(|c| !c.tool_calls.is_empty()).collect();
        assert_eq!(with_calls.len(), 1, "split {size}");
        assert_eq!(
            with_calls[0].tool_calls,
            [ToolCall::new(
                "call_DdmO9pD3xa9XTPNJ32zg2hcA",
                "get_weather",
                json!({"location": "Paris, France"})
            )],
            "split {size}"
        );
        assert_eq!(with_calls[0].finish_reason, Some(FinishReason::ToolCalls));
        assert!(chunks.iter().all(|c| c.delta.is_empty()), "split {size}");
        let usage: Vec<_> = chunks.iter().filter_map(|c| c.usage).collect();
        assert_eq!(usage, [Usage::new(67, 18)]);
        let body = h.only_request().json();
        assert_eq!(body["stream"], true);
        assert_eq!(body["tools"][0]["function"]["name"], "get_current_weather");
    }
}

#[tokio::test]
async fn parallel_streamed_calls_are_put_together_per_index() {
    let sse = fixture("chat_stream_parallel_tool_calls.sse");
    for size in [1, 5, sse.len()] {
        let h = Harness::new().await;
        h.server.push(CHAT, sse_reply(&sse, size));
        let chunks = stream_chunks(&h, &weather_request()).await;
        let calls: Vec<ToolCall> = chunks.into_iter().flat_map(|c| c.tool_calls).collect();
        assert_eq!(
            calls,
            [
                ToolCall::new(
                    "call_12345xyz",
                    "get_weather",
                    json!({"location": "Paris, France"})
                ),
                ToolCall::new(
                    "call_67890abc",
                    "get_weather",
                    json!({"location": "Bogotá, Colombia"})
                ),
            ],
            "split {size}"
        );
    }
}

#[tokio::test]
async fn streamed_arguments_that_are_not_json_end_the_stream_with_a_decode_error() {
    let whole = fixture("chat_stream_tool_call.sse");
    let sse = whole.replace(r#"{"arguments":"\"}"}"#, r#"{"arguments":""}"#);
    assert_ne!(sse, whole, "the last piece is cut");
    let h = Harness::new().await;
    h.server.push(CHAT, sse_reply(&sse, sse.len()));
    let items = collect(h.stream(&weather_request()).await.result.unwrap()).await;
    let err = items.into_iter().find_map(Result::err).expect("an error");
    assert_eq!(err.kind(), ErrorKind::Decode, "{err}");
    assert!(err.message().contains("`get_weather`"), "{err}");
    assert!(!err.message().contains("Paris"), "{err}");
}
