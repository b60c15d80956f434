//! Tools, structured answers and images in every chat format: calls generated from the tools'
//! schemas, whole and streamed in each provider's documented shape, tool results quoted,
//! JSON of a response schema, images counted and never echoed, and the pairing of calls and
//! results checked as each provider checks it.

use llm_failover_emulator::Emulator;
use serde_json::{Value, json};

use crate::support::*;

const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

fn weather_schema() -> Value {
    json!({"type": "object",
           "properties": {"city": {"type": "string"},
                          "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"]})
}

fn time_schema() -> Value {
    json!({"type": "object", "properties": {"timezone": {"type": "string"}},
           "required": ["timezone"]})
}

/// OpenAI `tools` (platform.openai.com/docs/guides/function-calling).
fn openai_tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather",
            "description": "The current weather in a city.", "parameters": weather_schema()}},
        {"type": "function", "function": {"name": "get_time",
            "description": "The local time in a timezone.", "parameters": time_schema()}},
    ])
}

fn openai_asking(prompt: &str) -> Value {
    let mut b = chat_body(prompt);
    b["tools"] = openai_tools();
    b
}

async fn openai(emu: &Emulator, body: &Value) -> (u16, Value) {
    let (status, _, body) = parts(openai_chat(emu, "openai", body).send().await.unwrap()).await;
    (status, body)
}

/// The `data:` payloads of a stream, parsed, without `[DONE]`.
async fn openai_stream(emu: &Emulator, prefix: &str, body: &Value) -> Vec<Value> {
    let mut body = body.clone();
    body["stream"] = json!(true);
    let req = if prefix == "azure" {
        azure_chat(emu, prefix, "gpt-4o-mini", &body)
    } else {
        openai_chat(emu, prefix, &body)
    };
    let (data, _) = sse(&req.send().await.unwrap().text().await.unwrap());
    data.iter()
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

// platform.openai.com/docs/guides/function-calling: `content: null`, `tool_calls`,
// `finish_reason: "tool_calls"`.
#[tokio::test]
async fn openai_answers_a_tool_offer_with_a_call_of_the_tool_the_user_mentions() {
    let emu = Emulator::builder().openai("openai").start().await.unwrap();
    let (status, body) = openai(&emu, &openai_asking("What's the weather in Paris?")).await;
    assert_eq!(status, 200, "{body}");
    let choice = &body["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert!(choice["message"]["content"].is_null());
    let calls = choice["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["type"], "function");
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    let id = calls[0]["id"].as_str().unwrap();
    assert!(id.starts_with("call_") && id.len() == 29, "{id}");
    let args: Value =
        serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args["city"], "Paris");
    assert!(["celsius", "fahrenheit"].contains(&args["unit"].as_str().unwrap()));
    let again = openai(&emu, &openai_asking("What's the weather in Paris?"))
        .await
        .1;
    assert_eq!(
        again["choices"][0]["message"]["tool_calls"].as_array(),
        Some(calls),
        "deterministic"
    );

    // Both tools mentioned: parallel calls, unless turned off; `none`: text.
    let both = openai_asking("What is the weather in Paris and the local time there?");
    let calls = openai(&emu, &both).await.1["choices"][0]["message"]["tool_calls"].clone();
    let names: Vec<&str> = calls
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["get_weather", "get_time"]);
    let mut one = both.clone();
    one["parallel_tool_calls"] = json!(false);
    let one = openai(&emu, &one).await.1;
    assert_eq!(
        one["choices"][0]["message"]["tool_calls"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let mut none = both.clone();
    none["tool_choice"] = json!("none");
    let none = openai(&emu, &none).await.1;
    assert_eq!(none["choices"][0]["finish_reason"], "stop");
    assert!(none["choices"][0]["message"]["content"].is_string());
    // `auto` and a text that mentions no tool: text; `required`: the first tool.
    let (_, plain) = openai(&emu, &openai_asking("Say hello")).await;
    assert_eq!(plain["choices"][0]["finish_reason"], "stop");
    let mut required = openai_asking("Say hello");
    required["tool_choice"] = json!("required");
    let required = openai(&emu, &required).await.1;
    assert_eq!(
        required["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
        "get_weather"
    );
}

// platform.openai.com/docs/api-reference/chat-streaming: `delta.tool_calls[{index, id, type,
// function: {name, arguments}}]`, then the arguments in pieces.
#[tokio::test]
async fn openai_and_azure_stream_a_call_as_indexed_deltas_with_the_arguments_in_pieces() {
    let emu = Emulator::builder()
        .openai("openai")
        .azure("azure")
        .start()
        .await
        .unwrap();
    let asking = openai_asking("What is the weather in Paris and the local time there?");
    let whole = openai(&emu, &asking).await.1["choices"][0]["message"]["tool_calls"].clone();
    for prefix in ["openai", "azure"] {
        let chunks = openai_stream(&emu, prefix, &asking).await;
        let deltas: Vec<&Value> = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].get(0))
            .collect();
        for (index, call) in whole.as_array().unwrap().iter().enumerate() {
            let mine: Vec<&&Value> = deltas.iter().filter(|d| d["index"] == index).collect();
            assert_eq!(mine[0]["id"], call["id"], "{prefix}");
            assert_eq!(mine[0]["type"], "function");
            assert_eq!(mine[0]["function"]["name"], call["function"]["name"]);
            assert_eq!(mine[0]["function"]["arguments"], "");
            let args: String = mine[1..]
                .iter()
                .map(|d| d["function"]["arguments"].as_str().unwrap())
                .collect();
            assert!(mine.len() >= 3, "{prefix}: arguments in two pieces or more");
            assert!(mine[1..].iter().all(|d| d.get("id").is_none()));
            assert_eq!(args, call["function"]["arguments"].as_str().unwrap());
        }
        let finish: Vec<&Value> = chunks
            .iter()
            .filter_map(|c| c["choices"][0].get("finish_reason"))
            .filter(|f| !f.is_null())
            .collect();
        assert_eq!(finish, [&json!("tool_calls")], "{prefix}");
    }
}

#[tokio::test]
async fn openai_quotes_tool_results_and_refuses_calls_and_results_that_do_not_pair() {
    let emu = Emulator::builder().openai("openai").start().await.unwrap();
    let asking = openai_asking("What's the weather in Paris?");
    let first = openai(&emu, &asking).await.1["choices"][0]["message"].clone();
    let id = first["tool_calls"][0]["id"].as_str().unwrap().to_owned();
    let mut follow = asking.clone();
    let msgs = follow["messages"].as_array_mut().unwrap();
    msgs.push(first.clone());
    msgs.push(json!({"role": "tool", "tool_call_id": id, "content": "18 C and sunny"}));
    let (status, done) = openai(&emu, &follow).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        done["choices"][0]["message"]["content"],
        "The tool get_weather returned: 18 C and sunny"
    );
    // Calls without their results, results of no call, a result without its call's id.
    let mut unanswered = asking.clone();
    unanswered["messages"]
        .as_array_mut()
        .unwrap()
        .push(first.clone());
    let (status, err) = openai(&emu, &unanswered).await;
    assert_eq!(status, 400);
    assert!(
        err["error"]["message"].as_str().unwrap().contains(&id),
        "{err}"
    );
    let mut orphan = asking.clone();
    orphan["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "tool", "tool_call_id": "call_x", "content": "?"}));
    let (status, err) = openai(&emu, &orphan).await;
    assert_eq!(status, 400);
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("must be a response to a preceeding message with 'tool_calls'")
    );
    let mut no_id = follow.clone();
    no_id["messages"][2]
        .as_object_mut()
        .unwrap()
        .remove("tool_call_id");
    let (status, err) = openai(&emu, &no_id).await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (400, Some("missing_required_parameter"))
    );
    // A tool choice without tools, a named tool that is not one.
    let mut choice_alone = chat_body("x");
    choice_alone["tool_choice"] = json!("auto");
    assert_eq!(openai(&emu, &choice_alone).await.0, 400);
    let mut unknown = asking.clone();
    unknown["tool_choice"] = json!({"type": "function", "function": {"name": "nope"}});
    assert_eq!(openai(&emu, &unknown).await.0, 400);
}

// platform.openai.com/docs/guides/structured-outputs: the JSON as `content`.
#[tokio::test]
async fn openai_structured_answers_are_json_of_the_schema() {
    let emu = Emulator::builder().openai("openai").start().await.unwrap();
    let mut req = chat_body("Describe the weather in Paris as a report.");
    req["response_format"] = json!({"type": "json_schema", "json_schema": {
        "name": "report", "strict": true,
        "schema": {"type": "object", "additionalProperties": false,
                   "properties": {"city": {"type": "string"}, "temperature": {"type": "number"},
                                  "conditions": {"type": "string", "enum": ["sunny", "rain"]}},
                   "required": ["city", "temperature", "conditions"]}}});
    let (status, body) = openai(&emu, &req).await;
    assert_eq!(status, 200, "{body}");
    let text = body["choices"][0]["message"]["content"].as_str().unwrap();
    let report: Value = serde_json::from_str(text).unwrap();
    assert_eq!(report["city"], "Paris");
    assert!(report["temperature"].is_number());
    assert!(["sunny", "rain"].contains(&report["conditions"].as_str().unwrap()));
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    // Streamed, the same JSON in pieces.
    let chunks = openai_stream(&emu, "openai", &req).await;
    let streamed: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(streamed, text);
    req["response_format"] = json!({"type": "json_object"});
    let body = openai(&emu, &req).await.1;
    let obj: Value =
        serde_json::from_str(body["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
    assert!(obj["answer"].is_string());
    req["response_format"] = json!({"type": "json_schema", "json_schema": {"schema": {}}});
    assert_eq!(openai(&emu, &req).await.0, 400, "a schema needs its name");
}

// platform.openai.com/docs/guides/images-vision: 85 tokens at low detail; the emulator counts
// any other as 765 (a 1024×1024 image at high detail).
#[tokio::test]
async fn openai_images_are_counted_into_usage_and_never_echoed() {
    let emu = Emulator::builder().openai("openai").start().await.unwrap();
    let with = |detail: Option<&str>| {
        let mut image = json!({"url": format!("data:image/png;base64,{PNG}")});
        if let Some(d) = detail {
            image["detail"] = json!(d);
        }
        json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image_url", "image_url": image}]}]})
    };
    let text_only = openai(&emu, &chat_body("What is in this picture?")).await.1;
    let base = text_only["usage"]["prompt_tokens"].as_u64().unwrap();
    let high = openai(&emu, &with(None)).await.1;
    assert_eq!(high["usage"]["prompt_tokens"].as_u64().unwrap(), base + 765);
    assert!(!high.to_string().contains(PNG));
    let low = openai(&emu, &with(Some("low"))).await.1;
    assert_eq!(low["usage"]["prompt_tokens"].as_u64().unwrap(), base + 85);
    let mut bad = with(None);
    bad["messages"][0]["content"][1]["image_url"]["url"] = json!("data:text/plain;base64,eA==");
    assert_eq!(openai(&emu, &bad).await.0, 400);
    let mut not_user = with(None);
    not_user["messages"][0]["role"] = json!("assistant");
    let (status, err) = openai(&emu, &not_user).await;
    assert_eq!(status, 400);
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("only allowed for messages with role 'user'")
    );
}

/// Anthropic `tools` (docs.claude.com/en/docs/agents-and-tools/tool-use/implement-tool-use).
fn anthropic_asking(prompt: &str) -> Value {
    let mut b = messages_body(prompt, 256);
    b["tools"] = json!([
        {"name": "get_weather", "description": "The current weather in a city.",
         "input_schema": weather_schema()},
        {"name": "get_time", "description": "The local time in a timezone.",
         "input_schema": time_schema()},
    ]);
    b
}

async fn anthropic(emu: &Emulator, body: &Value) -> (u16, Value) {
    let (status, _, body) = parts(
        anthropic_messages(emu, "anthropic", body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    (status, body)
}

// docs.claude.com/en/docs/agents-and-tools/tool-use/implement-tool-use: `tool_use` blocks,
// `stop_reason: "tool_use"`; with `any` or `tool`, no text before them.
#[tokio::test]
async fn anthropic_answers_with_tool_use_blocks_whole_and_streamed() {
    let emu = Emulator::builder()
        .anthropic("anthropic")
        .start()
        .await
        .unwrap();
    let asking = anthropic_asking("What's the weather in Paris?");
    let (status, m) = anthropic(&emu, &asking).await;
    assert_eq!(status, 200, "{m}");
    assert_eq!(m["stop_reason"], "tool_use");
    let content = m["content"].as_array().unwrap();
    assert_eq!(content[0]["type"], "text", "auto: a word before the call");
    let call = &content[1];
    assert_eq!(
        (&call["type"], &call["name"]),
        (&json!("tool_use"), &json!("get_weather"))
    );
    assert!(call["id"].as_str().unwrap().starts_with("toolu_01"));
    assert_eq!(call["input"]["city"], "Paris");
    let mut any = asking.clone();
    any["tool_choice"] = json!({"type": "any"});
    let forced = anthropic(&emu, &any).await.1;
    assert_eq!(forced["content"].as_array().unwrap().len(), 1);
    assert_eq!(forced["content"][0]["type"], "tool_use");

    // Streamed: a text block, then the tool_use block started with `input: {}`, its input in
    // `input_json_delta` pieces, stopped; `stop_reason: tool_use`.
    let mut streamed = asking.clone();
    streamed["stream"] = json!(true);
    let text = anthropic_messages(&emu, "anthropic", &streamed)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let (data, events) = sse(&text);
    assert_eq!(events.first().map(String::as_str), Some("message_start"));
    assert_eq!(events.last().map(String::as_str), Some("message_stop"));
    let data: Vec<Value> = data
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let start = data
        .iter()
        .find(|e| e["type"] == "content_block_start" && e["index"] == 1)
        .unwrap();
    assert_eq!(start["content_block"]["type"], "tool_use");
    assert_eq!(start["content_block"]["id"], call["id"]);
    assert_eq!(start["content_block"]["input"], json!({}));
    let pieces: Vec<&str> = data
        .iter()
        .filter(|e| e["delta"]["type"] == "input_json_delta")
        .map(|e| e["delta"]["partial_json"].as_str().unwrap())
        .collect();
    assert!(pieces.len() >= 2);
    assert_eq!(
        serde_json::from_str::<Value>(&pieces.concat()).unwrap(),
        call["input"]
    );
    let stops = data
        .iter()
        .filter(|e| e["type"] == "content_block_stop")
        .count();
    assert_eq!(stops, 2);
    let delta = data.iter().find(|e| e["type"] == "message_delta").unwrap();
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
}

#[tokio::test]
async fn anthropic_quotes_tool_results_and_refuses_tool_use_without_its_result() {
    let emu = Emulator::builder()
        .anthropic("anthropic")
        .start()
        .await
        .unwrap();
    let asking = anthropic_asking("What's the weather in Paris?");
    let m = anthropic(&emu, &asking).await.1;
    let id = m["content"][1]["id"].clone();
    let mut follow = asking.clone();
    let msgs = follow["messages"].as_array_mut().unwrap();
    msgs.push(json!({"role": "assistant", "content": m["content"]}));
    msgs.push(json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": id, "content": [{"type": "text", "text": "18 C and sunny"}]}]}));
    let (status, done) = anthropic(&emu, &follow).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["stop_reason"], "end_turn");
    assert_eq!(
        done["content"][0]["text"],
        "The tool get_weather returned: 18 C and sunny"
    );
    let mut unanswered = follow.clone();
    unanswered["messages"][2] = json!({"role": "user", "content": "and?"});
    let (status, err) = anthropic(&emu, &unanswered).await;
    assert_eq!(status, 400);
    let msg = err["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("`tool_use` ids were found without `tool_result` blocks"),
        "{msg}"
    );
    let mut orphan = follow.clone();
    orphan["messages"][2]["content"][0]["tool_use_id"] = json!("toolu_nope");
    assert_eq!(anthropic(&emu, &orphan).await.0, 400);
    let mut choice_alone = messages_body("x", 10);
    choice_alone["tool_choice"] = json!({"type": "auto"});
    assert_eq!(anthropic(&emu, &choice_alone).await.0, 400);
}

// The forced tool (the docs' JSON mode), and `output_config.format`
// (platform.claude.com/docs/en/build-with-claude/structured-outputs).
#[tokio::test]
async fn anthropic_structured_answers_come_through_a_forced_tool_or_output_config() {
    let emu = Emulator::builder()
        .anthropic("anthropic")
        .start()
        .await
        .unwrap();
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"},
        "temperature": {"type": "number"}}, "required": ["city", "temperature"]});
    let mut req = messages_body("Describe the weather in Paris as a report.", 256);
    req["tools"] = json!([{"name": "report", "input_schema": schema}]);
    req["tool_choice"] = json!({"type": "tool", "name": "report"});
    let m = anthropic(&emu, &req).await.1;
    assert_eq!(m["stop_reason"], "tool_use");
    assert_eq!(m["content"].as_array().unwrap().len(), 1);
    assert_eq!(m["content"][0]["input"]["city"], "Paris");
    assert!(m["content"][0]["input"]["temperature"].is_number());
    let mut config = messages_body("Describe the weather in Paris as a report.", 256);
    config["output_config"] = json!({"format": {"type": "json_schema", "schema": schema}});
    let m = anthropic(&emu, &config).await.1;
    assert_eq!(m["stop_reason"], "end_turn");
    let report: Value = serde_json::from_str(m["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(report["city"], "Paris");
}

// docs.claude.com/en/docs/build-with-claude/vision: base64 and URL sources; about 1,600
// tokens an image.
#[tokio::test]
async fn anthropic_images_are_counted_the_same_by_messages_and_count_tokens() {
    let emu = Emulator::builder()
        .anthropic("anthropic")
        .start()
        .await
        .unwrap();
    let with = |source: Value| {
        json!({"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [{"role": "user",
            "content": [{"type": "image", "source": source},
                        {"type": "text", "text": "What is in this picture?"}]}]})
    };
    let base = anthropic(&emu, &messages_body("What is in this picture?", 64))
        .await
        .1["usage"]["input_tokens"]
        .as_u64()
        .unwrap();
    let image = with(json!({"type": "base64", "media_type": "image/png", "data": PNG}));
    let m = anthropic(&emu, &image).await.1;
    assert_eq!(m["usage"]["input_tokens"].as_u64().unwrap(), base + 1600);
    assert!(!m.to_string().contains(PNG));
    let counted = parts(
        anthropic_count(&emu, "anthropic", &image)
            .send()
            .await
            .unwrap(),
    )
    .await
    .2;
    assert_eq!(counted["input_tokens"], m["usage"]["input_tokens"]);
    let url = with(json!({"type": "url", "url": "https://example.com/cat.png"}));
    assert_eq!(anthropic(&emu, &url).await.0, 200);
    let bmp = with(json!({"type": "base64", "media_type": "image/bmp", "data": PNG}));
    let (status, err) = anthropic(&emu, &bmp).await;
    assert_eq!(status, 400);
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("media_type")
    );
}

/// Gemini `tools` (ai.google.dev/gemini-api/docs/function-calling): one declaration with a
/// JSON Schema, one with the OpenAPI subset.
fn gemini_asking(prompt: &str) -> Value {
    let mut b = gemini_body(prompt);
    b["tools"] = json!([{"functionDeclarations": [
        {"name": "get_weather", "description": "The current weather in a city.",
         "parametersJsonSchema": weather_schema()},
        {"name": "get_time", "description": "The local time in a timezone.",
         "parameters": {"type": "OBJECT", "properties": {"timezone": {"type": "STRING"}}}},
    ]}]);
    b
}

async fn gemini_generate(emu: &Emulator, verb: &str, body: &Value) -> (u16, Value) {
    let (status, _, body) = parts(
        gemini(emu, "gemini", "gemini-2.0-flash", verb, body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    (status, body)
}

// ai.google.dev/gemini-api/docs/function-calling: `functionCall` parts (parallel: several),
// `finishReason: STOP`; streamed, each call whole.
#[tokio::test]
async fn gemini_answers_with_function_call_parts_whole_and_streamed() {
    let emu = Emulator::builder().gemini("gemini").start().await.unwrap();
    let asking = gemini_asking("What is the weather in Paris and the local time there?");
    let (status, r) = gemini_generate(&emu, "generateContent", &asking).await;
    assert_eq!(status, 200, "{r}");
    let candidate = &r["candidates"][0];
    assert_eq!(candidate["finishReason"], "STOP");
    let calls = candidate["content"]["parts"].as_array().unwrap();
    assert_eq!(calls[0]["functionCall"]["name"], "get_weather");
    assert_eq!(calls[0]["functionCall"]["args"]["city"], "Paris");
    assert_eq!(calls[1]["functionCall"]["name"], "get_time");
    assert!(calls[1]["functionCall"]["args"]["timezone"].is_string());
    assert!(
        calls[0]["functionCall"].get("id").is_none(),
        "Gemini's calls have no id"
    );
    // Streamed: one chunk with both calls, whole.
    let resp = gemini(
        &emu,
        "gemini",
        "gemini-2.0-flash",
        "streamGenerateContent?alt=sse",
        &asking,
    )
    .send()
    .await
    .unwrap();
    let (data, _) = sse(&resp.text().await.unwrap());
    assert_eq!(data.len(), 1);
    let chunk: Value = serde_json::from_str(&data[0]).unwrap();
    assert_eq!(
        chunk["candidates"][0]["content"]["parts"].as_array(),
        Some(calls)
    );
    assert_eq!(chunk["candidates"][0]["finishReason"], "STOP");
    // ANY with one allowed name: that one; NONE: text.
    let mut named = asking.clone();
    named["toolConfig"] = json!({"functionCallingConfig": {"mode": "ANY",
                                                           "allowedFunctionNames": ["get_time"]}});
    let r = gemini_generate(&emu, "generateContent", &named).await.1;
    let parts = r["candidates"][0]["content"]["parts"].as_array().unwrap();
    assert_eq!(parts.len(), 1);
    assert_eq!(parts[0]["functionCall"]["name"], "get_time");
    named["toolConfig"]["functionCallingConfig"] = json!({"mode": "NONE"});
    let r = gemini_generate(&emu, "generateContent", &named).await.1;
    assert!(r["candidates"][0]["content"]["parts"][0]["text"].is_string());
}

#[tokio::test]
async fn gemini_quotes_function_responses_and_checks_the_turns() {
    let emu = Emulator::builder().gemini("gemini").start().await.unwrap();
    let asking = gemini_asking("What's the weather in Paris?");
    let r = gemini_generate(&emu, "generateContent", &asking).await.1;
    let model_turn = r["candidates"][0]["content"].clone();
    let mut follow = asking.clone();
    let contents = follow["contents"].as_array_mut().unwrap();
    contents.push(model_turn);
    contents.push(json!({"role": "user", "parts": [{"functionResponse": {
        "name": "get_weather", "response": {"result": "18 C and sunny"}}}]}));
    let (status, done) = gemini_generate(&emu, "generateContent", &follow).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(
        done["candidates"][0]["content"]["parts"][0]["text"],
        "The tool get_weather returned: 18 C and sunny"
    );
    let mut two = follow.clone();
    two["contents"][2]["parts"]
        .as_array_mut()
        .unwrap()
        .push(json!({"functionResponse": {"name": "get_weather", "response": {}}}));
    let (status, err) = gemini_generate(&emu, "generateContent", &two).await;
    assert_eq!(
        (status, err["error"]["status"].as_str()),
        (400, Some("INVALID_ARGUMENT"))
    );
    let mut stray = follow.clone();
    stray["contents"].as_array_mut().unwrap().remove(1);
    let (status, err) = gemini_generate(&emu, "generateContent", &stray).await;
    assert_eq!(status, 400);
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("function response turn comes immediately after a function call turn")
    );
}

// ai.google.dev/gemini-api/docs/structured-output; ai.google.dev/gemini-api/docs/tokens (258
// tokens an image).
#[tokio::test]
async fn gemini_structured_answers_follow_either_schema_and_images_are_counted() {
    let emu = Emulator::builder().gemini("gemini").start().await.unwrap();
    let prompt = "Describe the weather in Paris as a report.";
    let json_schema = json!({"type": "object", "properties": {"city": {"type": "string"},
        "temperature": {"type": "number"}}, "required": ["city", "temperature"]});
    let openapi = json!({"type": "OBJECT", "properties": {"city": {"type": "STRING"},
        "temperature": {"type": "NUMBER"}}, "required": ["city", "temperature"]});
    for (field, schema) in [
        ("responseJsonSchema", json_schema),
        ("responseSchema", openapi),
    ] {
        let mut req = gemini_body(prompt);
        req["generationConfig"] = json!({"responseMimeType": "application/json", field: schema});
        let (status, r) = gemini_generate(&emu, "generateContent", &req).await;
        assert_eq!(status, 200, "{field}: {r}");
        let text = r["candidates"][0]["content"]["parts"][0]["text"]
            .as_str()
            .unwrap();
        let report: Value = serde_json::from_str(text).unwrap();
        assert_eq!(report["city"], "Paris", "{field}");
        assert!(report["temperature"].is_number(), "{field}");
    }
    let mut choice = gemini_body("Is it raining?");
    choice["generationConfig"] = json!({"responseMimeType": "text/x.enum",
        "responseSchema": {"type": "STRING", "format": "enum", "enum": ["yes", "no"]}});
    let r = gemini_generate(&emu, "generateContent", &choice).await.1;
    let answer = r["candidates"][0]["content"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert!(["yes", "no"].contains(&answer), "{answer}");

    let base = gemini_generate(&emu, "generateContent", &gemini_body("What is this?"))
        .await
        .1["usageMetadata"]["promptTokenCount"]
        .as_u64()
        .unwrap();
    let image = json!({"contents": [{"role": "user", "parts": [
        {"inlineData": {"mimeType": "image/png", "data": PNG}}, {"text": "What is this?"}]}]});
    let r = gemini_generate(&emu, "generateContent", &image).await.1;
    assert_eq!(
        r["usageMetadata"]["promptTokenCount"].as_u64().unwrap(),
        base + 258
    );
    assert_eq!(
        r["usageMetadata"]["promptTokensDetails"][1],
        json!({"modality": "IMAGE", "tokenCount": 258})
    );
    assert!(!r.to_string().contains(PNG));
}
