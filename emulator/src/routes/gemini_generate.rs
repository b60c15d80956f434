//! Gemini `generateContent`: the request (text, `inlineData` / `fileData`, `functionCall`
//! and `functionResponse` parts; `tools[].functionDeclarations`, `toolConfig`,
//! `generationConfig.responseMimeType` / `responseJsonSchema` / `responseSchema`), checked
//! as Gemini checks it, and the answer, whole or streamed.
//!
//! Shapes: ai.google.dev/api/generate-content (the request, `GenerateContentResponse`,
//! `finishReason`), ai.google.dev/gemini-api/docs/function-calling
//! (`functionDeclarations[{name, description, parameters | parametersJsonSchema}]`,
//! `toolConfig.functionCallingConfig {mode: AUTO|ANY|NONE, allowedFunctionNames}`; answers
//! with `{"functionCall": {name, args}}` parts — parallel calls as several parts, no id —
//! and `finishReason: "STOP"`; results as `{"functionResponse": {name, response}}` parts of
//! the next user turn; streamed, a call arrives whole in one chunk),
//! ai.google.dev/gemini-api/docs/structured-output (`responseMimeType: "application/json"`
//! with `responseJsonSchema` (JSON Schema) or `responseSchema` (the OpenAPI subset); `text/
//! x.enum` for one enum value), ai.google.dev/gemini-api/docs/image-understanding
//! (`inlineData {mimeType, data}`).

use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiError, ChatReq, Usage};
use crate::text::{PromptDigest, new_id};
use crate::tools::{
    Answer, Asks, CallRef, Choice, Finish, Format, ResultRef, Said, ToolDef, add_to_prompt,
    last_turn,
};

/// An image: 258 tokens (one up to 384×384 px; larger ones are tiled in 768×768 tiles of
/// 258 each) — ai.google.dev/gemini-api/docs/tokens, "Multimodal tokens" (the emulator does
/// not read the image's size).
const IMAGE_TOKENS: u64 = 258;

#[derive(Deserialize)]
pub(super) struct GenerateBody {
    contents: Option<Vec<GContent>>,
    #[serde(rename = "systemInstruction", alias = "system_instruction")]
    system_instruction: Option<GContent>,
    #[serde(rename = "generationConfig", alias = "generation_config")]
    generation_config: Option<GenerationConfig>,
    tools: Option<Vec<GTool>>,
    #[serde(rename = "toolConfig", alias = "tool_config")]
    tool_config: Option<ToolConfig>,
}

#[derive(Deserialize)]
struct GContent {
    role: Option<String>,
    parts: Option<Vec<GPart>>,
}

#[derive(Deserialize)]
struct GPart {
    text: Option<String>,
    #[serde(rename = "inlineData", alias = "inline_data")]
    inline_data: Option<Blob>,
    #[serde(rename = "fileData", alias = "file_data")]
    file_data: Option<Value>,
    #[serde(rename = "functionCall", alias = "function_call")]
    function_call: Option<FnCall>,
    #[serde(rename = "functionResponse", alias = "function_response")]
    function_response: Option<FnResponse>,
    #[serde(rename = "thoughtSignature", alias = "thought_signature")]
    thought_signature: Option<String>,
}

#[derive(Deserialize)]
struct Blob {
    #[serde(rename = "mimeType", alias = "mime_type")]
    mime_type: Option<String>,
    data: Option<String>,
}

#[derive(Deserialize)]
struct FnCall {
    id: Option<String>,
    name: Option<String>,
    args: Option<Value>,
}

#[derive(Deserialize)]
struct FnResponse {
    id: Option<String>,
    name: Option<String>,
    response: Option<Value>,
}

#[derive(Deserialize)]
struct GTool {
    #[serde(rename = "functionDeclarations", alias = "function_declarations")]
    function_declarations: Option<Vec<FnDecl>>,
}

#[derive(Deserialize)]
struct FnDecl {
    name: Option<String>,
    description: Option<String>,
    parameters: Option<Value>,
    #[serde(rename = "parametersJsonSchema", alias = "parameters_json_schema")]
    parameters_json_schema: Option<Value>,
}

#[derive(Deserialize)]
struct ToolConfig {
    #[serde(rename = "functionCallingConfig", alias = "function_calling_config")]
    function_calling_config: Option<CallingConfig>,
}

#[derive(Deserialize)]
struct CallingConfig {
    mode: Option<String>,
    #[serde(rename = "allowedFunctionNames", alias = "allowed_function_names")]
    allowed_function_names: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct GenerationConfig {
    #[serde(rename = "maxOutputTokens", alias = "max_output_tokens")]
    max_output_tokens: Option<u64>,
    #[serde(rename = "responseMimeType", alias = "response_mime_type")]
    response_mime_type: Option<String>,
    #[serde(rename = "responseSchema", alias = "response_schema")]
    response_schema: Option<Value>,
    #[serde(rename = "responseJsonSchema", alias = "response_json_schema")]
    response_json_schema: Option<Value>,
}

/// Parses a `generateContent` body for `model`; `stream` and `sse` from the route.
pub(super) fn parse(
    b: GenerateBody,
    model: String,
    stream: bool,
    sse: bool,
) -> Result<ChatReq, ApiError> {
    let contents = b.contents.unwrap_or_default();
    if contents.is_empty() {
        return Err(ApiError::bad(
            "* GenerateContentRequest.contents: contents is not specified\n",
        ));
    }
    let mut prompt = PromptDigest::default();
    if let Some(s) = &b.system_instruction {
        for t in s.parts.iter().flatten().filter_map(|p| p.text.as_deref()) {
            prompt.add(t);
        }
    }
    let mut conv = Vec::with_capacity(contents.len());
    let mut image_tokens = 0;
    for (i, c) in contents.iter().enumerate() {
        let (said, images) = read_content(c, i, &mut prompt)?;
        image_tokens += images;
        conv.push(said);
    }
    check_turns(&conv)?;
    let returned = check_signatures(&model, &contents)?;
    let config = b.generation_config;
    let (tools, choice) = read_tools(b.tools.unwrap_or_default(), b.tool_config)?;
    let asks = Asks {
        tools,
        choice,
        parallel: true,
        last: last_turn(&conv),
        format: read_format(config.as_ref())?,
        preamble: false,
    };
    add_to_prompt(&asks, &mut prompt);
    Ok(ChatReq {
        model,
        prompt,
        max_tokens: config.and_then(|g| g.max_output_tokens),
        stream,
        sse,
        include_usage: true,
        asks,
        image_tokens,
        returned,
        thinking: false,
    })
}

/// The signature Google documents for function calls Gemini did not sign itself.
const FOREIGN_SIGNATURE: &str = "skip_thought_signature_validator";

/// The emulator's secret for its thought signatures (an HMAC of what they sign: the real ones
/// are opaque too).
const SIGNING_KEY: &[u8] = b"llm-failover emulator thought signatures";

/// Whether `model` signs its thinking and checks the signatures it gets back: Gemini 3
/// ("Gemini 3 models enforce strict validation on thought signatures for function calls";
/// ai.google.dev/gemini-api/docs/thought-signatures). Earlier models neither sign (without
/// thinking budgets) nor check, here.
pub(super) fn signs(model: &str) -> bool {
    model.starts_with("gemini-3")
}

/// The thought signature of a call (its name and arguments) or of an answer's text (`text`
/// with no arguments): base64 of an HMAC-SHA256, as opaque as Gemini's.
fn signature(name: &str, args: Option<&Value>) -> String {
    use base64::Engine as _;
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, SIGNING_KEY);
    let mut ctx = ring::hmac::Context::with_key(&key);
    ctx.update(name.as_bytes());
    ctx.update(b"\0");
    ctx.update(args.map(Value::to_string).unwrap_or_default().as_bytes());
    base64::engine::general_purpose::STANDARD.encode(ctx.sign().as_ref())
}

/// Checks the thought signatures a Gemini 3 request sends back, as the guide says Gemini
/// does: in the current turn (the function-calling steps since the last user message of
/// text), each step's first `functionCall` part must carry its signature — the one given
/// with it, or the placeholder for calls from elsewhere — else `400` ("Function call is
/// missing a thought_signature in functionCall parts…", the guide's wording; the emulator's
/// for a signature that is not the call's). Earlier turns are not checked.
///
/// Returns what came back over the whole conversation: `[own signatures that verified,
/// placeholders]` (text parts' signatures count as own when they verify against their text).
fn check_signatures(model: &str, contents: &[GContent]) -> Result<[u32; 2], ApiError> {
    let mut returned = [0u32; 2];
    if !signs(model) {
        return Ok(returned);
    }
    let is_user_text = |c: &GContent| {
        c.role.as_deref() != Some("model") && c.parts.iter().flatten().any(|p| p.text.is_some())
    };
    let current = contents.iter().rposition(is_user_text).unwrap_or(0);
    for (i, c) in contents.iter().enumerate() {
        if c.role.as_deref() != Some("model") {
            continue;
        }
        let parts = c.parts.as_deref().unwrap_or_default();
        let mut first_call = true;
        for (j, p) in parts.iter().enumerate() {
            let sig = p.thought_signature.as_deref();
            let verified = match (&p.function_call, &p.text) {
                (Some(f), _) => {
                    let name = f.name.as_deref().unwrap_or_default();
                    let own = sig == Some(signature(name, f.args.as_ref()).as_str());
                    if first_call && i > current && !own && sig != Some(FOREIGN_SIGNATURE) {
                        let what = if sig.is_none() {
                            "Function call is missing a thought_signature in functionCall \
                             parts. This is required for tools to work correctly, and missing \
                             thought_signature may lead to degraded model performance."
                        } else {
                            "Function call has a thought_signature that is not the one given \
                             with it."
                        };
                        return Err(ApiError::bad(format!(
                            "{what} Additional data, function call `default_api:{name}` , \
                             position {}. Please refer to \
                             https://ai.google.dev/gemini-api/docs/thought-signatures for more \
                             details.",
                            j + 1
                        )));
                    }
                    first_call = false;
                    own
                }
                (None, Some(t)) => sig == Some(signature(t, None).as_str()),
                (None, None) => false,
            };
            if verified {
                returned[0] += 1;
            } else if sig == Some(FOREIGN_SIGNATURE) {
                returned[1] += 1;
            }
        }
    }
    Ok(returned)
}

/// One content as the answer reads it (its text, calls and results into `prompt`), and what
/// its images cost.
fn read_content(
    c: &GContent,
    i: usize,
    prompt: &mut PromptDigest,
) -> Result<(Said, u64), ApiError> {
    let model = match c.role.as_deref() {
        None | Some("user" | "function") => false,
        Some("model") => true,
        Some(other) => {
            return Err(ApiError::bad(format!(
                "Please use a valid role: user, model. (got '{other}')"
            )));
        }
    };
    let (mut texts, mut calls, mut results, mut images) = (Vec::new(), Vec::new(), Vec::new(), 0);
    for (j, p) in c.parts.iter().flatten().enumerate() {
        let at = format!("GenerateContentRequest.contents[{i}].parts[{j}]");
        if let Some(t) = &p.text {
            prompt.add(t);
            texts.push(t.as_str());
        }
        if let Some(blob) = &p.inline_data {
            if blob.mime_type.as_deref().is_none_or(str::is_empty) {
                return Err(ApiError::bad(format!(
                    "* {at}.inline_data.mime_type: mime_type is not specified\n"
                )));
            }
            if blob.data.as_deref().is_none_or(str::is_empty) {
                return Err(ApiError::bad(format!(
                    "* {at}.inline_data.data: data is not specified\n"
                )));
            }
            images += IMAGE_TOKENS;
        }
        if p.file_data.is_some() {
            images += IMAGE_TOKENS;
        }
        if let Some(f) = &p.function_call {
            let name = f.name.clone().ok_or_else(|| {
                ApiError::bad(format!(
                    "* {at}.function_call.name: Name cannot be empty.\n"
                ))
            })?;
            prompt.add(&name);
            prompt.add(&f.args.as_ref().map(Value::to_string).unwrap_or_default());
            calls.push(CallRef {
                id: f.id.clone(),
                name,
            });
        }
        if let Some(r) = &p.function_response {
            let name = r.name.clone().ok_or_else(|| {
                ApiError::bad(format!(
                    "* {at}.function_response.name: Name cannot be empty.\n"
                ))
            })?;
            let content = response_text(r.response.as_ref());
            prompt.add(&content);
            results.push(ResultRef {
                id: r.id.clone(),
                name: Some(name),
                content,
            });
        }
    }
    let said = if model {
        Said::Assistant(calls)
    } else if !results.is_empty() {
        Said::Results(results)
    } else {
        Said::User(texts.join("\n"))
    };
    Ok((said, images))
}

/// A `functionResponse.response` as text: the string of a one-field object
/// (`{"result": "18 C"}`, how results that are text are wrapped), else its JSON.
fn response_text(v: Option<&Value>) -> String {
    match v {
        None => String::new(),
        Some(Value::Object(o)) if o.len() == 1 => match o.values().next() {
            Some(Value::String(s)) => s.clone(),
            _ => Value::Object(o.clone()).to_string(),
        },
        Some(other) => other.to_string(),
    }
}

/// Calls and responses take turns as Gemini requires (its own messages): a call turn right
/// after a user turn or a response turn; a response turn right after a call turn, with as
/// many responses as calls.
fn check_turns(conv: &[Said]) -> Result<(), ApiError> {
    for (i, said) in conv.iter().enumerate() {
        let before = i.checked_sub(1).map(|p| &conv[p]);
        match said {
            Said::Results(results) => match before {
                Some(Said::Assistant(calls)) if !calls.is_empty() => {
                    if calls.len() != results.len() {
                        return Err(ApiError::bad(
                            "Please ensure that the number of function response parts is equal \
                             to the number of function call parts of the function call turn.",
                        ));
                    }
                }
                _ => {
                    return Err(ApiError::bad(
                        "Please ensure that function response turn comes immediately after a \
                         function call turn.",
                    ));
                }
            },
            Said::Assistant(calls)
                if !calls.is_empty()
                    && !matches!(before, Some(Said::User(_) | Said::Results(_))) =>
            {
                return Err(ApiError::bad(
                    "Please ensure that function call turn comes immediately after a user turn \
                     or after a function response turn.",
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

fn read_tools(
    tools: Vec<GTool>,
    config: Option<ToolConfig>,
) -> Result<(Vec<ToolDef>, Choice), ApiError> {
    let mut defs = Vec::new();
    for (i, t) in tools.into_iter().enumerate() {
        for (j, d) in t.function_declarations.into_iter().flatten().enumerate() {
            let Some(name) = d.name.filter(|n| !n.is_empty()) else {
                return Err(ApiError::bad(format!(
                    "* GenerateContentRequest.tools[{i}].function_declarations[{j}].name: Name \
                     cannot be empty.\n"
                )));
            };
            defs.push(ToolDef {
                name,
                description: d.description.unwrap_or_default(),
                schema: d
                    .parameters_json_schema
                    .or(d.parameters)
                    .unwrap_or_else(|| json!({})),
            });
        }
    }
    let calling = config.and_then(|c| c.function_calling_config);
    let (mode, allowed) = match calling {
        Some(c) => (c.mode, c.allowed_function_names.unwrap_or_default()),
        None => (None, Vec::new()),
    };
    let choice = match mode.as_deref() {
        None | Some("AUTO" | "VALIDATED" | "MODE_UNSPECIFIED") => Choice::Auto,
        Some("NONE") => Choice::None,
        Some("ANY") if allowed.len() == 1 => Choice::Named(allowed[0].clone()),
        Some("ANY") => {
            if !allowed.is_empty() {
                defs.retain(|d| allowed.contains(&d.name));
            }
            Choice::Any
        }
        Some(other) => {
            return Err(ApiError::bad(format!(
                "Invalid value at 'tool_config.function_calling_config.mode' \
                 (type.googleapis.com/google.ai.generativelanguage.v1beta.FunctionCallingConfig.Mode), \
                 \"{other}\""
            )));
        }
    };
    Ok((defs, choice))
}

fn read_format(g: Option<&GenerationConfig>) -> Result<Format, ApiError> {
    let Some(g) = g else {
        return Ok(Format::Text);
    };
    let schema = g
        .response_json_schema
        .as_ref()
        .or(g.response_schema.as_ref());
    match (g.response_mime_type.as_deref(), schema) {
        (Some("application/json"), Some(s)) => Ok(Format::Schema(s.clone())),
        (Some("application/json"), None) => Ok(Format::JsonObject),
        (Some("text/x.enum"), Some(s)) => Ok(Format::Enum(s.clone())),
        (_, Some(_)) => Err(ApiError::bad(
            "* GenerationConfig.response_mime_type: a response schema needs response_mime_type \
             application/json or text/x.enum\n",
        )),
        (None | Some("text/plain"), None) => Ok(Format::Text),
        (Some(other), None) => Err(ApiError::bad(format!(
            "* GenerationConfig.response_mime_type: allowed mimetypes are `text/plain`, \
             `application/json`, `application/xml`, `application/yaml` and `text/x.enum` (got \
             `{other}`)\n"
        ))),
    }
}

fn finish(a: &Answer) -> &'static str {
    match a.finish() {
        Finish::Length => "MAX_TOKENS",
        // A call is a normal stop: Gemini says so with its functionCall parts.
        Finish::Stop | Finish::ToolCalls => "STOP",
    }
}

/// The parts of the whole answer: its calls, else its text. A model that signs
/// ([`signs`]) signs the first call of the step, or the text ("the signature is attached to
/// the first functionCall part"; without calls, "in the last part").
pub(super) fn answer_parts(req: &ChatReq, a: &Answer) -> Value {
    let signs = signs(&req.model);
    if a.calls.is_empty() {
        let mut part = json!({"text": a.text.text});
        if signs {
            part["thoughtSignature"] = json!(signature(&a.text.text, None));
        }
        json!([part])
    } else {
        a.calls
            .iter()
            .enumerate()
            .map(|(k, c)| {
                let mut part = json!({"functionCall": {"name": c.name, "args": c.arguments}});
                if signs && k == 0 {
                    part["thoughtSignature"] = json!(signature(&c.name, Some(&c.arguments)));
                }
                part
            })
            .collect()
    }
}

/// One `GenerateContentResponse` with `parts`; the last one of an answer carries its finish
/// reason and usage.
pub(super) fn response(req: &ChatReq, parts: Value, last: Option<(&Answer, Usage)>) -> Value {
    let mut candidate = json!({
        "content": {"parts": parts, "role": "model"},
        "index": 0,
    });
    let mut v = json!({
        "candidates": [],
        "modelVersion": req.model,
        "responseId": new_id("", 22),
    });
    if let Some((a, u)) = last {
        candidate["finishReason"] = json!(finish(a));
        v["usageMetadata"] = json!({
            "promptTokenCount": u.input,
            "candidatesTokenCount": u.output,
            "totalTokenCount": u.input + u.output,
            "promptTokensDetails": prompt_details(req, u),
        });
        // Implicit caching: the cached part of the prompt, within `promptTokenCount`
        // (https://ai.google.dev/api/generate-content#UsageMetadata).
        if u.cached > 0 {
            v["usageMetadata"]["cachedContentTokenCount"] = json!(u.cached);
            v["usageMetadata"]["cacheTokensDetails"] =
                json!([{"modality": "TEXT", "tokenCount": u.cached}]);
        }
    }
    v["candidates"] = json!([candidate]);
    v
}

/// The prompt's tokens by modality: text, and images when there are some.
fn prompt_details(req: &ChatReq, u: Usage) -> Value {
    let images = req.image_tokens.min(u.input);
    let mut details = vec![json!({"modality": "TEXT", "tokenCount": u.input - images})];
    if images > 0 {
        details.push(json!({"modality": "IMAGE", "tokenCount": images}));
    }
    Value::Array(details)
}

/// The chunks of a streamed answer: the text in pieces, or the calls whole in one.
///
/// A model that signs sends the text's signature on an empty text part of the last chunk
/// (streamed, "the signature may arrive in a final chunk with an empty text part").
pub(super) fn stream_chunks(req: &ChatReq, a: &Answer, usage: Usage) -> Vec<Value> {
    if !a.calls.is_empty() {
        return vec![response(req, answer_parts(req, a), Some((a, usage)))];
    }
    let mut pieces = a.deltas();
    if pieces.is_empty() {
        pieces.push("");
    }
    let n = pieces.len();
    pieces
        .into_iter()
        .enumerate()
        .map(|(i, d)| {
            let last = (i + 1 == n).then_some((a, usage));
            let mut parts = vec![json!({ "text": d })];
            if last.is_some() && signs(&req.model) {
                parts.push(json!({"text": "", "thoughtSignature": signature(&a.text.text, None)}));
            }
            response(req, Value::Array(parts), last)
        })
        .collect()
}
