//! The validator's negative controls: hand-made bodies each provider refuses, each beside
//! the documentation that says why. A validator that passed everything would pass the
//! capture test too; this one shows it fails, at the field at fault.

use serde_json::{Value, json};

use super::{AZURE_API_VERSION, errors, table, validate};

/// Hand-made bodies each provider refuses: the validator must say so, at the field at fault.
#[tokio::test]
async fn the_validator_refuses_what_the_providers_refuse() {
    let user = json!([{"role": "user", "content": "Hi"}]);
    // (name, entry, the paths that must be reported)
    let controls: Vec<(&str, Value, Vec<&str>)> = vec![
        // `stop`: "Up to 4 sequences" (maxItems 4):
        // https://platform.openai.com/docs/api-reference/chat/create#chat-create-stop
        (
            "openai: 5 stop sequences",
            chat(
                "openai",
                json!({
                    "model": "gpt-4o-mini",
                    "messages": user,
                    "stop": ["a", "b", "c", "d", "e"]
                }),
            ),
            vec!["$.stop"],
        ),
        // `response_format.json_schema.name`: "Must be a-z, A-Z, 0-9, or contain underscores
        // and dashes, with a maximum length of 64":
        // https://platform.openai.com/docs/api-reference/chat/create#chat-create-response_format
        (
            "openai: json_schema name with spaces and dots",
            chat(
                "openai",
                json!({
                    "model": "gpt-4o-mini",
                    "messages": user,
                    "response_format": {
                        "type": "json_schema",
                        "json_schema": {"name": "my schema.v2", "schema": {"type": "object"}}
                    }
                }),
            ),
            vec!["$.response_format.json_schema.name"],
        ),
        // A message field openai-python's `ChatCompletionUserMessageParam` does not have:
        // https://platform.openai.com/docs/api-reference/chat/create#chat-create-messages
        (
            "openai: unknown message field",
            chat(
                "openai",
                json!({
                    "model": "gpt-4o-mini",
                    "messages": [{"role": "user", "content": "Hi", "mood": "cheerful"}]
                }),
            ),
            vec!["$.messages[0].mood"],
        ),
        // Azure 2024-10-21: `stop` maxItems 4, and no `stream_options` in
        // createChatCompletionRequest:
        // https://learn.microsoft.com/en-us/azure/ai-services/openai/reference#chat-completions
        (
            "azure: 5 stop sequences and stream_options",
            chat(
                "azure",
                json!({
                    "messages": user,
                    "stream": true,
                    "stream_options": {"include_usage": true},
                    "stop": ["a", "b", "c", "d", "e"]
                }),
            ),
            vec!["$.stop", "$.stream_options"],
        ),
        // The erratum the validator applies to Azure's 2024-10-21 spec (`json_schema` requires
        // `name`, not `type` too: see ERRATA in emulator/sdk/wire_schemas.py) keeps `name`
        // required: a `json_schema` without one is still refused.
        (
            "azure: json_schema without a name",
            chat(
                "azure",
                json!({
                    "messages": user,
                    "response_format": {
                        "type": "json_schema",
                        "json_schema": {"schema": {"type": "object"}, "strict": true}
                    }
                }),
            ),
            vec!["$.response_format.json_schema"],
        ),
        // `temperature` "Ranges from 0.0 to 1.0"; an unknown field; a `tool_use.id` outside
        // ^[a-zA-Z0-9_-]+$: https://docs.anthropic.com/en/api/messages
        (
            "anthropic: temperature 1.5, unknown field, dotted tool_use id",
            chat(
                "anthropic",
                json!({
                    "model": "claude-3-5-haiku-latest",
                    "max_tokens": 64,
                    "temperature": 1.5,
                    "mood": "cheerful",
                    "messages": [
                        {"role": "user", "content": "Weather?"},
                        {"role": "assistant", "content": [{
                            "type": "tool_use", "id": "functions.get_weather:0",
                            "name": "get_weather", "input": {}
                        }]},
                        {"role": "user", "content": [{
                            "type": "tool_result", "tool_use_id": "functions.get_weather:0",
                            "content": "18C"
                        }]}
                    ]
                }),
            ),
            vec![
                "$.temperature",
                "$.mood",
                "$.messages[1].content[0].id",
                "$.messages[2].content[0].tool_use_id",
            ],
        ),
        // What the API answers 400 to beyond its types: "stop_sequences: each stop sequence
        // must contain non-whitespace", "all messages must have non-empty content except for
        // the optional final assistant message" (fields of
        // https://docs.anthropic.com/en/api/messages); the final assistant turn may be empty.
        (
            "anthropic: blank stop sequence, empty assistant turn",
            chat(
                "anthropic",
                json!({
                    "model": "claude-3-5-haiku-latest",
                    "max_tokens": 64,
                    "stop_sequences": ["END", " \n"],
                    "messages": [
                        {"role": "user", "content": "Hi"},
                        {"role": "assistant", "content": ""},
                        {"role": "user", "content": "Still there?"},
                        {"role": "assistant", "content": ""}
                    ]
                }),
            ),
            vec!["$.stop_sequences[1]", "$.messages[1].content"],
        ),
        // A FunctionDeclaration without its required `description`
        // (https://ai.google.dev/api/caching#FunctionDeclaration); 6 `stopSequences` ("up to
        // 5") and a field GenerationConfig does not have
        // (https://ai.google.dev/api/generate-content#generationconfig).
        (
            "gemini: undescribed function, 6 stop sequences, unknown config field",
            chat(
                "gemini",
                json!({
                    "contents": [{"role": "user", "parts": [{"text": "Weather?"}]}],
                    "tools": [{"functionDeclarations": [
                        {"name": "get_weather", "parametersJsonSchema": {"type": "object"}}
                    ]}],
                    "generationConfig": {
                        "stopSequences": ["a", "b", "c", "d", "e", "f"],
                        "maxOutputTokenz": 5
                    }
                }),
            ),
            vec![
                "$.tools[0].functionDeclarations[0].description",
                "$.generationConfig.stopSequences",
                "$.generationConfig.maxOutputTokenz",
            ],
        ),
        // `file` and `model` are required, `response_format` one of json, text, srt,
        // verbose_json, vtt: https://platform.openai.com/docs/api-reference/audio/createTranscription
        (
            "openai: transcription without model, unknown format",
            json!({
                "format": "openai",
                "kind": "transcription",
                "outcome": "sent",
                "form": [
                    {"name": "file", "file_name": "memo.wav", "content_type": "audio/wav",
                     "size": 44},
                    {"name": "response_format", "text": "docx"}
                ]
            }),
            vec!["$", "$.response_format"],
        ),
    ];
    let entries: Vec<Value> = controls
        .iter()
        .map(|(name, e, _)| {
            let mut e = e.clone();
            e["case"] = json!(name);
            e
        })
        .collect();
    let results = validate("controls", &entries).await;
    let report = table(&results);
    println!("{report}");
    for ((name, _, paths), r) in controls.iter().zip(&results) {
        assert_eq!(r["verdict"], "invalid", "{name}\n{report}");
        let found = errors(r);
        for path in paths {
            assert!(
                found.iter().any(|(p, _)| p == path),
                "{name}: nothing reported at {path}\n{report}"
            );
        }
    }
}

/// A chat entry as the capture test writes them (Azure's at the api-version its spec is for).
fn chat(format: &str, body: Value) -> Value {
    json!({
        "format": format,
        "kind": "chat",
        "stream": false,
        "outcome": "sent",
        "query": format!("api-version={AZURE_API_VERSION}"),
        "status": null,
        "body": body
    })
}
