//! Tools, their calls and results, and images through the Gemini adapter (fixtures and the
//! docs they come from: the parent module's list).

use llm_failover::provider::Provider;
use llm_failover::provider::gemini::Gemini;
use llm_failover::{
    ChatChunk, ChatRequest, ErrorKind, FinishReason, Image, Message, ProviderId, Tool, ToolCall,
    ToolChoice, Usage,
};
use llm_failover_emulator::scripted::{Reply, ScriptedServer};
use serde_json::json;

use super::{MODEL, PATH, STREAM_PATH, chat, stream};
use crate::support::adapter::only_request;

const SIGNATURE: &str = "skip_thought_signature_validator";

/// The function-calling guide's two declarations, as the caller writes them (JSON Schema).
fn guide_tools() -> [Tool; 2] {
    [
        Tool::new(
            "schedule_meeting",
            json!({
                "type": "object",
                "properties": {
                    "attendees": {"type": "array", "items": {"type": "string"}},
                    "date": {"type": "string", "description": "Date of the meeting (e.g., '2024-07-29')"},
                    "time": {"type": "string", "description": "Time of the meeting (e.g., '15:00')"},
                    "topic": {"type": "string", "description": "The subject or topic of the meeting."}
                },
                "required": ["attendees", "date", "time", "topic"]
            }),
        )
        .description("Schedules a meeting with specified attendees at a given time and date."),
        Tool::new(
            "get_current_temperature",
            json!({
                "type": "object",
                "properties": {"location": {"type": "string", "description": "The city name, e.g. San Francisco"}},
                "required": ["location"],
                "additionalProperties": false
            }),
        )
        .description("Gets the current temperature for a given location."),
    ]
}

fn ok_reply(server: &ScriptedServer) {
    server.push(
        PATH,
        Reply::json(200, include_str!("../../fixtures/gemini/generate_ok.json")),
    );
}

#[tokio::test]
async fn declares_tools_with_their_json_schema_and_writes_each_tool_choice() {
    let [meeting, temperature] = guide_tools();
    let choices = [
        (None, None),
        (
            Some(ToolChoice::Auto),
            Some(json!({"functionCallingConfig": {"mode": "AUTO"}})),
        ),
        (
            Some(ToolChoice::None),
            Some(json!({"functionCallingConfig": {"mode": "NONE"}})),
        ),
        (
            Some(ToolChoice::Required),
            Some(json!({"functionCallingConfig": {"mode": "ANY"}})),
        ),
        (
            Some(ToolChoice::named("get_current_temperature")),
            Some(json!({"functionCallingConfig": {
                "mode": "ANY", "allowedFunctionNames": ["get_current_temperature"]}})),
        ),
    ];
    let server = ScriptedServer::start().await;
    for (choice, want) in choices {
        ok_reply(&server);
        let mut req = ChatRequest::from_prompt("Schedule a meeting with Bob and Alice.")
            .tool(meeting.clone())
            .tool(temperature.clone());
        if let Some(c) = choice.clone() {
            req = req.tool_choice(c);
        }
        chat(&server, &req).await.unwrap();
        let body = server.requests().pop().unwrap().json();
        assert_eq!(
            body["tools"],
            json!([{"functionDeclarations": [
                {
                    "name": "schedule_meeting",
                    "description": "Schedules a meeting with specified attendees at a given time and date.",
                    "parametersJsonSchema": meeting.parameters
                },
                {
                    "name": "get_current_temperature",
                    "description": "Gets the current temperature for a given location.",
                    "parametersJsonSchema": temperature.parameters
                }
            ]}]),
            "{choice:?}"
        );
        assert_eq!(body.get("toolConfig"), want.as_ref(), "{choice:?}");
        assert!(
            body["tools"][0]["functionDeclarations"][0]
                .get("parameters")
                .is_none()
        );
    }
}

/// A conversation started on OpenAI (its doc's answer: call `call_abc123`, plus a parallel
/// `call_def456`) goes on at Gemini: the calls are `model` parts, the results are one `user`
/// content of `functionResponse` parts named by the call each answers, and the user's next
/// message is a content of its own.
#[tokio::test]
async fn a_tool_conversation_started_on_openai_goes_on_with_results_named_by_call_id() {
    let openai: serde_json::Value = serde_json::from_str(include_str!(
        "../../fixtures/openai/chat_completion_tool_call.json"
    ))
    .unwrap();
    let call = &openai["choices"][0]["message"]["tool_calls"][0];
    let arguments: serde_json::Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    let boston = ToolCall::new(
        call["id"].as_str().unwrap(),
        call["function"]["name"].as_str().unwrap(),
        arguments,
    );
    assert_eq!(boston.id, "call_abc123");
    let paris = ToolCall::new(
        "call_def456",
        "get_current_weather",
        json!({"location": "Paris"}),
    );
    let weather = Tool::new(
        "get_current_weather",
        json!({"type": "object", "properties": {"location": {"type": "string"}}}),
    )
    .description("Gets the current weather in a city.");
    let req = ChatRequest::new()
        .system("Answer in one line.")
        .user("What's the weather like in Boston and Paris?")
        .tool(weather)
        .message(Message::assistant_calls(
            "Checking both.",
            vec![boston, paris],
        ))
        // Results in another order than the calls: each is named by its own call.
        .message(Message::tool_result("call_def456", "rainy, 14 C"))
        .message(Message::tool_result(
            "call_abc123",
            r#"{"temperature": 22, "unit": "celsius"}"#,
        ))
        .user("And which is warmer?");
    assert!(provider_for_checks().check_chat(&req).is_ok());

    let server = ScriptedServer::start().await;
    ok_reply(&server);
    chat(&server, &req).await.unwrap();
    let body = only_request(&server).json();
    assert_eq!(
        body["contents"],
        json!([
            {"role": "user", "parts": [{"text": "What's the weather like in Boston and Paris?"}]},
            {"role": "model", "parts": [
                {"text": "Checking both."},
                {"functionCall": {"name": "get_current_weather", "args": {"location": "Boston, MA"}},
                 "thoughtSignature": SIGNATURE},
                {"functionCall": {"name": "get_current_weather", "args": {"location": "Paris"}}}
            ]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "get_current_weather",
                                      "response": {"result": "rainy, 14 C"}}},
                {"functionResponse": {"name": "get_current_weather",
                                      "response": {"temperature": 22, "unit": "celsius"}}}
            ]},
            {"role": "user", "parts": [{"text": "And which is warmer?"}]}
        ])
    );
    assert_eq!(
        body["systemInstruction"],
        json!({"parts": [{"text": "Answer in one line."}]})
    );
    assert!(
        !body.to_string().contains("call_abc123"),
        "Gemini's ids are optional; another provider's are not sent"
    );
}

/// Each turn of calls is a step of its own: each one's first call carries the signature.
#[tokio::test]
async fn every_turn_of_calls_carries_the_signature_on_its_first_call_only() {
    let [meeting, temperature] = guide_tools();
    let first = ToolCall::new("a", "get_current_temperature", json!({"location": "Paris"}));
    let second = ToolCall::new("b", "get_current_temperature", json!({"location": "Rome"}));
    let third = ToolCall::new("c", "schedule_meeting", json!({"topic": "weather"}));
    let req = ChatRequest::from_prompt("Compare, then book a meeting.")
        .tool(meeting)
        .tool(temperature)
        .message(Message::assistant_calls("", vec![first, second]))
        .message(Message::tool_result("a", "18"))
        .message(Message::tool_result("b", "21"))
        .message(Message::assistant_calls("", vec![third]))
        .message(Message::tool_result("c", r#"{"booked": true}"#));
    let server = ScriptedServer::start().await;
    ok_reply(&server);
    chat(&server, &req).await.unwrap();
    let contents = only_request(&server).json()["contents"].clone();
    let signed: Vec<Vec<bool>> = [1, 3]
        .iter()
        .map(|&c| {
            contents[c]["parts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.get("thoughtSignature") == Some(&json!(SIGNATURE)))
                .collect()
        })
        .collect();
    assert_eq!(signed, [vec![true, false], vec![true]]);
    assert_eq!(
        contents[2]["parts"],
        json!([
            {"functionResponse": {"name": "get_current_temperature", "response": {"result": 18}}},
            {"functionResponse": {"name": "get_current_temperature", "response": {"result": 21}}}
        ])
    );
    assert_eq!(
        contents[4]["parts"],
        json!([{"functionResponse": {"name": "schedule_meeting", "response": {"booked": true}}}])
    );
}

/// The function-calling guide's answer: one call, no id — one is made up, the same every
/// time, and the turn goes back with the result named by it.
#[tokio::test]
async fn reads_a_function_call_and_makes_up_a_stable_id_the_result_is_named_by() {
    let server = ScriptedServer::start().await;
    for _ in 0..2 {
        server.push(
            PATH,
            Reply::json(
                200,
                include_str!("../../fixtures/gemini/function_call.json"),
            ),
        );
    }
    ok_reply(&server);
    let [meeting, _] = guide_tools();
    let ask = ChatRequest::from_prompt(
        "Schedule a meeting with Bob and Alice for 03/14/2025 at 10:00 AM about the Q3 planning.",
    )
    .tool(meeting);
    let turn = chat(&server, &ask).await.unwrap();
    assert_eq!(turn.text, "");
    assert_eq!(turn.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(turn.tool_calls.len(), 1);
    let call = &turn.tool_calls[0];
    assert_eq!(call.name, "schedule_meeting");
    assert_eq!(
        call.arguments,
        json!({"attendees": ["Bob", "Alice"], "date": "2025-03-14", "time": "10:00",
               "topic": "Q3 planning"})
    );
    assert!(
        call.id.starts_with("call_0_") && call.id.len() == "call_0_".len() + 8,
        "{}",
        call.id
    );
    let again = chat(&server, &ask).await.unwrap();
    assert_eq!(
        again.tool_calls, turn.tool_calls,
        "the same call, the same id"
    );

    let next = ask
        .message(turn.to_message())
        .message(Message::tool_result(&call.id, "Meeting scheduled."));
    chat(&server, &next).await.unwrap();
    let contents = server.requests().pop().unwrap().json()["contents"].clone();
    assert_eq!(
        contents[1],
        json!({"role": "model", "parts": [{"functionCall": {"name": "schedule_meeting",
            "args": call.arguments}, "thoughtSignature": SIGNATURE}]})
    );
    assert_eq!(
        contents[2],
        json!({"role": "user", "parts": [{"functionResponse": {"name": "schedule_meeting",
            "response": {"result": "Meeting scheduled."}}}]})
    );
}

#[tokio::test]
async fn reads_parallel_function_calls_in_order_with_distinct_ids() {
    let server = ScriptedServer::start().await;
    server.push(
        PATH,
        Reply::json(
            200,
            include_str!("../../fixtures/gemini/function_call_parallel.json"),
        ),
    );
    let resp = chat(
        &server,
        &ChatRequest::from_prompt("Turn this place into a party!"),
    )
    .await
    .unwrap();
    let names: Vec<&str> = resp.tool_calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["power_disco_ball", "start_music", "dim_lights"]);
    assert_eq!(
        resp.tool_calls[1].arguments,
        json!({"energetic": true, "loud": true})
    );
    assert_eq!(resp.tool_calls[2].arguments, json!({"brightness": 0.5}));
    for (i, c) in resp.tool_calls.iter().enumerate() {
        assert!(c.id.starts_with(&format!("call_{i}_")), "{}", c.id);
    }
    let mut ids: Vec<&str> = resp.tool_calls.iter().map(|c| c.id.as_str()).collect();
    ids.dedup();
    assert_eq!(ids.len(), 3);
    assert_eq!(resp.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(resp.text, "");
    assert_eq!(resp.usage, Some(Usage::new(187, 48)));
}

/// `FunctionCall.id` (API reference): when Gemini gives one, it is the call's id.
#[tokio::test]
async fn keeps_the_id_gemini_gives_a_call() {
    let server = ScriptedServer::start().await;
    let body = json!({"candidates": [{"content": {"role": "model", "parts": [
        {"functionCall": {"id": "8f2b1c9e", "name": "get_current_temperature",
                          "args": {"location": "London"}}}
    ]}, "finishReason": "STOP"}]});
    server.push(PATH, Reply::json(200, body.to_string()));
    let resp = chat(&server, &ChatRequest::from_prompt("Temperature in London?"))
        .await
        .unwrap();
    assert_eq!(resp.tool_calls[0].id, "8f2b1c9e");
}

#[tokio::test]
async fn streams_a_function_call_whole_and_ends_with_tool_calls() {
    let server = ScriptedServer::start().await;
    let events: Vec<String> = include_str!("../../fixtures/gemini/stream_function_call.txt")
        .split_inclusive("\n\n")
        .map(str::to_owned)
        .collect();
    server.push(STREAM_PATH, Reply::sse(events));
    server.push(
        PATH,
        Reply::json(
            200,
            json!({"candidates": [{"content": {"role": "model", "parts": [{"functionCall":
                {"name": "get_current_temperature", "args": {"location": "London"}}}]},
                "finishReason": "STOP"}]})
            .to_string(),
        ),
    );
    let [_, temperature] = guide_tools();
    let req = ChatRequest::from_prompt("What's the temperature in London?").tool(temperature);
    let chunks: Vec<ChatChunk> = stream(&server, &req)
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.unwrap())
        .collect();
    let calls: Vec<&ToolCall> = chunks.iter().flat_map(|c| &c.tool_calls).collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].name, "get_current_temperature");
    assert_eq!(calls[0].arguments, json!({"location": "London"}));
    assert_eq!(
        chunks[0].tool_calls.len(),
        1,
        "handed over on the chunk that carries it"
    );
    let last = chunks.last().unwrap();
    assert_eq!(last.finish_reason, Some(FinishReason::ToolCalls));
    assert_eq!(last.usage, Some(Usage::new(36, 17)));
    // The same call answered whole gets the same id.
    let whole = chat(&server, &req).await.unwrap();
    assert_eq!(whole.tool_calls[0].id, calls[0].id);
}

/// The image understanding guide's request: the image inline, then the text.
#[tokio::test]
async fn sends_an_inline_image_before_its_text() {
    let server = ScriptedServer::start().await;
    ok_reply(&server);
    let req = ChatRequest::new().message(
        Message::user("Caption this image.").image(Image::base64("image/jpeg", "/9j/4AAQSkZJRg==")),
    );
    assert!(provider_for_checks().check_chat(&req).is_ok());
    chat(&server, &req).await.unwrap();
    assert_eq!(
        only_request(&server).json()["contents"],
        json!([{"role": "user", "parts": [
            {"inlineData": {"mimeType": "image/jpeg", "data": "/9j/4AAQSkZJRg=="}},
            {"text": "Caption this image."}
        ]}])
    );
}

/// An `https` URL naming its type is fetched by Gemini (`fileData`); one Gemini cannot take —
/// not `https`, no type in its path, a type it does not read — is refused before anything is
/// sent, by `check_chat` (the router then skips Gemini) and by the request builder alike.
#[tokio::test]
async fn image_urls_gemini_fetches_are_file_data_and_others_are_refused_before_sending() {
    let server = ScriptedServer::start().await;
    ok_reply(&server);
    let url = "https://storage.example.com/signed/scones.jpg?X-Goog-Signature=abc";
    let req = ChatRequest::new().message(Message::user("What is this?").image(Image::url(url)));
    assert!(provider_for_checks().check_chat(&req).is_ok());
    chat(&server, &req).await.unwrap();
    assert_eq!(
        only_request(&server).json()["contents"][0]["parts"][0],
        json!({"fileData": {"mimeType": "image/jpeg", "fileUri": url}})
    );

    let server = ScriptedServer::start().await;
    for image in [
        Image::url("http://example.com/cat.png"),
        Image::url("https://example.com/render?id=42"),
        Image::base64("image/gif", "R0lGODlhAQABAAAAACw="),
    ] {
        let req = ChatRequest::new().message(Message::user("What is this?").image(image));
        let err = provider_for_checks().check_chat(&req).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
        assert!(err.message().contains("message 0's image 0"), "{err}");
        assert!(
            !err.message().contains("example.com"),
            "never the URL: {err}"
        );
        let sent = chat(&server, &req).await.unwrap_err();
        assert_eq!(sent.kind(), ErrorKind::Unsupported, "{sent}");
    }
    assert!(server.requests().is_empty());
}

/// The checks every format makes come first (a result answering no call).
#[tokio::test]
async fn check_chat_starts_with_the_shared_conversation_checks() {
    let req = ChatRequest::from_prompt("x").message(Message::tool_result("call_9", "18 C"));
    let err = provider_for_checks().check_chat(&req).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidRequest);
    assert!(err.message().starts_with("gemini request: "), "{err}");
    assert!(err.message().contains("no earlier assistant"), "{err}");
    // `required` with nothing to call is refused, not sent as `ANY` over no declarations.
    let req = ChatRequest::from_prompt("x").tool_choice(ToolChoice::Required);
    let err = provider_for_checks().check_chat(&req).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidRequest);
    assert!(err.message().contains("there are no tools"), "{err}");
}

fn provider_for_checks() -> Gemini {
    Gemini::new(
        ProviderId::new("gemini"),
        "http://127.0.0.1:9/v1beta".parse().unwrap(),
    )
    .with_model(MODEL)
}
