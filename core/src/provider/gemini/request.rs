//! The `generateContent` request body: contents (text, images, function calls and their
//! results), the system instruction, the tools and the tool choice, the generation config —
//! and the check that a request holds nothing this format cannot carry.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;
use serde_json::Value;

use super::PROVIDER_TYPE;
use crate::error::{Error, ErrorKind, Result};
use crate::id::ProviderId;
use crate::provider::body::json_f32;
use crate::provider::tools::{call_named, check_conversation, result_object};
use crate::types::{
    ChatRequest, Image, Message, ResponseFormat, Role, Tool, ToolChoice, TurnState,
};

/// The image types Gemini reads (image understanding guide, "Supported image formats").
const IMAGE_TYPES: [&str; 5] = [
    "image/png",
    "image/jpeg",
    "image/webp",
    "image/heic",
    "image/heif",
];

/// The thought signature Google documents for function calls Gemini did not sign itself
/// (history from another model, or calls whose signature was not kept): Gemini 3 refuses a
/// conversation whose function calls come back without one.
const FOREIGN_CALL_SIGNATURE: &str = "skip_thought_signature_validator";

/// A `GenerateContentRequest`. `Debug` shows its shape, never its text.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RequestBody<'a> {
    contents: Vec<Content<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system_instruction: Option<SystemInstruction<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<ToolSet<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_config: Option<ToolConfig<'a>>,
    #[serde(skip_serializing_if = "GenerationConfig::is_empty")]
    generation_config: GenerationConfig<'a>,
}

impl fmt::Debug for RequestBody<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestBody")
            .field("contents", &self.contents.len())
            .field("tools", &self.tools.len())
            .finish_non_exhaustive()
    }
}

#[derive(Serialize)]
struct Content<'a> {
    role: &'static str,
    parts: Vec<Part<'a>>,
    /// Whether it holds a turn's tool results (which share a content with nothing else).
    #[serde(skip)]
    results: bool,
}

#[derive(Serialize)]
struct SystemInstruction<'a> {
    parts: Vec<Part<'a>>,
}

/// One `Part`: exactly one of its data fields.
#[derive(Serialize)]
#[serde(untagged)]
enum Part<'a> {
    Text {
        text: &'a str,
    },
    /// The text of Gemini's own answer, with the signature it came with.
    SignedText {
        text: &'a str,
        #[serde(rename = "thoughtSignature")]
        thought_signature: &'a str,
    },
    Inline {
        #[serde(rename = "inlineData")]
        inline_data: Blob<'a>,
    },
    File {
        #[serde(rename = "fileData")]
        file_data: FileData<'a>,
    },
    Call {
        #[serde(rename = "functionCall")]
        function_call: FunctionCall<'a>,
        #[serde(rename = "thoughtSignature", skip_serializing_if = "Option::is_none")]
        thought_signature: Option<&'a str>,
    },
    Result {
        #[serde(rename = "functionResponse")]
        function_response: FunctionResponse<'a>,
    },
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Blob<'a> {
    mime_type: &'a str,
    data: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FileData<'a> {
    mime_type: &'static str,
    file_uri: &'a str,
}

#[derive(Serialize)]
struct FunctionCall<'a> {
    name: &'a str,
    args: &'a Value,
}

#[derive(Serialize)]
struct FunctionResponse<'a> {
    name: &'a str,
    response: Value,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolSet<'a> {
    function_declarations: Vec<FunctionDeclaration<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FunctionDeclaration<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    parameters_json_schema: &'a Value,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolConfig<'a> {
    function_calling_config: FunctionCallingConfig<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FunctionCallingConfig<'a> {
    mode: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    allowed_function_names: Vec<&'a str>,
}

#[derive(Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct GenerationConfig<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    response_mime_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_json_schema: Option<&'a Value>,
}

impl GenerationConfig<'_> {
    fn is_empty(&self) -> bool {
        self.max_output_tokens.is_none()
            && self.temperature.is_none()
            && self.stop_sequences.is_empty()
            && self.response_mime_type.is_none()
    }
}

/// Whether Gemini can carry everything `req` holds: the shared checks first, then what only
/// this format refuses (images it cannot take, call arguments that are not objects).
///
/// # Errors
///
/// `InvalidRequest` from the shared checks; `Unsupported` naming the message and the part.
pub(super) fn check(req: &ChatRequest) -> Result<()> {
    check_conversation(req, PROVIDER_TYPE)?;
    check_fields(req)?;
    for (i, m) in req.messages.iter().enumerate() {
        image_parts(i, m)?;
        if m.role == Role::Assistant {
            model_parts(i, m, None)?;
        }
    }
    Ok(())
}

/// What Gemini's reference requires of the request's own fields: a function declaration's
/// `description` ("Required. A brief description of the function", `FunctionDeclaration`)
/// and at most 5 `stopSequences` ("The set of character sequences (up to 5)",
/// `GenerationConfig`). Refused before sending, so the router asks another provider.
fn check_fields(req: &ChatRequest) -> Result<()> {
    let refuse = |what: String| {
        Err(Error::new(
            ErrorKind::Unsupported,
            format!("{PROVIDER_TYPE} cannot carry {what}"),
        ))
    };
    if let Some(t) = req
        .tools
        .iter()
        .find(|t| t.description.as_deref().is_none_or(|d| d.trim().is_empty()))
    {
        return refuse(format!(
            "tool `{}` without a description: a function declaration's `description` is \
             required",
            t.name
        ));
    }
    if req.stop.len() > MAX_STOP {
        return refuse(format!(
            "{} stop sequences: `stopSequences` takes at most {MAX_STOP}",
            req.stop.len()
        ));
    }
    Ok(())
}

/// The most stop sequences Gemini takes.
const MAX_STOP: usize = 5;

/// Translates a neutral request into a `GenerateContentRequest`.
///
/// # Errors
///
/// `InvalidRequest` for a request with no conversation, a tool result whose call is not in
/// it, or a temperature JSON cannot hold; `Unsupported` for a part Gemini cannot carry.
pub(super) fn request_body<'a>(
    req: &'a ChatRequest,
    provider: &ProviderId,
) -> Result<RequestBody<'a>> {
    check_fields(req)?;
    let mut system = Vec::new();
    let mut contents: Vec<Content<'_>> = Vec::new();
    for (i, m) in req.messages.iter().enumerate() {
        let (role, parts) = match m.role {
            Role::System => {
                system.push(Part::Text { text: &m.content });
                continue;
            }
            Role::User => ("user", user_parts(i, m)?),
            Role::Assistant => (
                "model",
                model_parts(i, m, TurnState::gemini(m.provider_state.as_ref(), provider))?,
            ),
            Role::Tool => ("user", vec![result_part(&req.messages, i)?]),
        };
        // Consecutive messages of one role share a content; a turn's results are one `user`
        // content of `functionResponse` parts only, as the function-calling guide sends them
        // (a user's text after them is a content of its own).
        let results = m.role == Role::Tool;
        match contents.last_mut() {
            Some(last) if last.role == role && last.results == results => last.parts.extend(parts),
            _ => contents.push(Content {
                role,
                parts,
                results,
            }),
        }
    }
    if contents.is_empty() {
        return Err(Error::new(
            ErrorKind::InvalidRequest,
            "a Gemini request needs at least one user or assistant message (system messages \
             alone are not a conversation)",
        ));
    }
    Ok(RequestBody {
        contents,
        system_instruction: (!system.is_empty()).then_some(SystemInstruction { parts: system }),
        tools: tool_sets(&req.tools),
        tool_config: req.tool_choice.as_ref().map(tool_config),
        generation_config: generation_config(req)?,
    })
}

fn generation_config(req: &ChatRequest) -> Result<GenerationConfig<'_>> {
    let (response_mime_type, response_json_schema) = match &req.response_format {
        ResponseFormat::Text => (None, None),
        ResponseFormat::JsonObject => (Some("application/json"), None),
        ResponseFormat::JsonSchema { schema, .. } => (Some("application/json"), Some(schema)),
    };
    Ok(GenerationConfig {
        max_output_tokens: req.max_tokens,
        temperature: req
            .temperature
            .map(|t| json_f32(t, "temperature"))
            .transpose()?,
        stop_sequences: &req.stop,
        response_mime_type,
        response_json_schema,
    })
}

/// A user message: its images, then its text (the order of the image understanding guide's
/// examples); the text alone when there are no images, even empty.
fn user_parts(i: usize, m: &Message) -> Result<Vec<Part<'_>>> {
    let mut parts = image_parts(i, m)?;
    if !m.content.is_empty() || parts.is_empty() {
        parts.push(Part::Text { text: &m.content });
    }
    Ok(parts)
}

/// Gemini's own signatures of a turn it wrote: per call id, and the text's.
type Signed<'a> = Option<(&'a BTreeMap<String, String>, Option<&'a str>)>;

/// An assistant message: its text (unless it only calls tools), then one `functionCall` part
/// per call. A turn this provider wrote gets back the thought signatures it came with, each
/// on its part (<https://ai.google.dev/gemini-api/docs/thought-signatures>: "return the
/// entire response with all parts and their signatures"); a first call without one of its
/// own carries the signature Google documents for calls it did not sign (another model's
/// history, or a turn whose state was not kept; only the first of parallel calls carries
/// one).
fn model_parts<'a>(i: usize, m: &'a Message, signed: Signed<'a>) -> Result<Vec<Part<'a>>> {
    let mut parts = Vec::with_capacity(m.tool_calls.len() + 1);
    if !m.content.is_empty() || m.tool_calls.is_empty() {
        parts.push(match signed.and_then(|(_, text)| text) {
            Some(thought_signature) => Part::SignedText {
                text: &m.content,
                thought_signature,
            },
            None => Part::Text { text: &m.content },
        });
    }
    for (k, call) in m.tool_calls.iter().enumerate() {
        if !call.arguments.is_object() {
            return Err(unsupported(format!(
                "message {i}'s call of `{}` has arguments that are not a JSON object (Gemini's \
                 functionCall.args is one)",
                call.name
            )));
        }
        parts.push(Part::Call {
            function_call: FunctionCall {
                name: &call.name,
                args: &call.arguments,
            },
            thought_signature: signed
                .and_then(|(calls, _)| calls.get(&call.id))
                .map(String::as_str)
                .or((k == 0).then_some(FOREIGN_CALL_SIGNATURE)),
        });
    }
    Ok(parts)
}

/// A tool's result as a `functionResponse`: Gemini ties it to its call by the function's
/// name, found from the call's id earlier in the conversation.
fn result_part(messages: &[Message], i: usize) -> Result<Part<'_>> {
    let m = &messages[i];
    let id = m.tool_call_id.as_deref().ok_or_else(|| {
        Error::new(
            ErrorKind::InvalidRequest,
            format!("gemini request: message {i} is a tool result without its call's id"),
        )
    })?;
    let call = call_named(messages, i, id).ok_or_else(|| {
        Error::new(
            ErrorKind::InvalidRequest,
            format!(
                "gemini request: message {i} is the result of call `{id}`, which no earlier \
                 assistant message made"
            ),
        )
    })?;
    Ok(Part::Result {
        function_response: FunctionResponse {
            name: &call.name,
            response: result_object(&m.content),
        },
    })
}

fn image_parts(i: usize, m: &Message) -> Result<Vec<Part<'_>>> {
    m.images
        .iter()
        .enumerate()
        .map(|(j, image)| {
            image_part(image).map_err(|why| unsupported(format!("message {i}'s image {j}: {why}")))
        })
        .collect()
}

/// An image as a part: carried bytes as `inlineData`; a `data:` URL likewise; an `https` URL
/// as `fileData`, which Gemini fetches (external URLs, file input methods guide) — when its
/// path names one of the types Gemini reads, since the part must say the type.
fn image_part(image: &Image) -> std::result::Result<Part<'_>, &'static str> {
    match image {
        Image::Base64 { media_type, data } => Ok(Part::Inline {
            inline_data: Blob {
                mime_type: known_type(media_type)?,
                data,
            },
        }),
        Image::Url { url } => match url.strip_prefix("data:") {
            Some(rest) => data_url_part(rest),
            None => Ok(Part::File {
                file_data: FileData {
                    mime_type: url_type(url)?,
                    file_uri: url,
                },
            }),
        },
    }
}

const NOT_A_TYPE: &str = "Gemini reads PNG, JPEG, WEBP, HEIC and HEIF images only";

/// `media_type` when Gemini reads it (compared without case, sent as given).
fn known_type(media_type: &str) -> std::result::Result<&str, &'static str> {
    IMAGE_TYPES
        .iter()
        .any(|t| t.eq_ignore_ascii_case(media_type))
        .then_some(media_type)
        .ok_or(NOT_A_TYPE)
}

/// `<mime>;base64,<data>` (what follows `data:`) as inline data.
fn data_url_part(rest: &str) -> std::result::Result<Part<'_>, &'static str> {
    let (header, data) = rest.split_once(',').ok_or("a data: URL without its data")?;
    let mime = header
        .strip_suffix(";base64")
        .ok_or("a data: URL that is not base64")?;
    Ok(Part::Inline {
        inline_data: Blob {
            mime_type: known_type(mime)?,
            data,
        },
    })
}

/// The image type an `https` URL's path names by its extension.
fn url_type(url: &str) -> std::result::Result<&'static str, &'static str> {
    let parsed = url::Url::parse(url).map_err(|_| "an image URL that does not parse")?;
    if parsed.scheme() != "https" {
        return Err("Gemini fetches https image URLs only; send the image inline");
    }
    let last = parsed.path_segments().and_then(|mut s| s.next_back());
    let ext = last
        .and_then(|name| name.rsplit_once('.'))
        .map(|(_, ext)| ext.to_ascii_lowercase());
    match ext.as_deref() {
        Some("png") => Ok("image/png"),
        Some("jpg" | "jpeg") => Ok("image/jpeg"),
        Some("webp") => Ok("image/webp"),
        Some("heic") => Ok("image/heic"),
        Some("heif") => Ok("image/heif"),
        _ => Err(
            "an image URL whose path does not end in .png, .jpg, .jpeg, .webp, .heic or .heif \
             (Gemini's fileData must name the type); send the image inline",
        ),
    }
}

fn unsupported(what: String) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!("{PROVIDER_TYPE} request: {what}"),
    )
}

/// The caller's tools as one `Tool` of `functionDeclarations`, each with its JSON Schema as
/// `parametersJsonSchema` (the field that takes JSON Schema; `parameters` takes Gemini's
/// OpenAPI subset).
fn tool_sets(tools: &[Tool]) -> Vec<ToolSet<'_>> {
    if tools.is_empty() {
        return Vec::new();
    }
    vec![ToolSet {
        function_declarations: tools
            .iter()
            .map(|t| FunctionDeclaration {
                name: &t.name,
                description: t.description.as_deref(),
                parameters_json_schema: &t.parameters,
            })
            .collect(),
    }]
}

/// `toolConfig.functionCallingConfig`: `AUTO`, `NONE`, `ANY`, or `ANY` limited to one name.
fn tool_config(choice: &ToolChoice) -> ToolConfig<'_> {
    let (mode, allowed_function_names) = match choice {
        ToolChoice::Auto => ("AUTO", Vec::new()),
        ToolChoice::None => ("NONE", Vec::new()),
        ToolChoice::Required => ("ANY", Vec::new()),
        ToolChoice::Tool(name) => ("ANY", vec![name.as_str()]),
    };
    ToolConfig {
        function_calling_config: FunctionCallingConfig {
            mode,
            allowed_function_names,
        },
    }
}

#[cfg(test)]
mod tests {

    /// A turn Gemini wrote goes back to it with its signatures on the parts they came with;
    /// to another provider (another key, project or region) with the placeholder on its
    /// first call only, and none on its text.
    #[test]
    fn own_signatures_go_back_to_their_provider_only() {
        let calls = vec![
            crate::types::ToolCall::new("c1", "f", json!({"x": 1})),
            crate::types::ToolCall::new("c2", "f", json!({"x": 2})),
        ];
        let mut signed = BTreeMap::new();
        signed.insert("c1".to_owned(), "U0lH".to_owned());
        let mut turn = Message::assistant_calls("Checking.", calls);
        turn.provider_state = Some(TurnState::new(
            ProviderId::new("g"),
            crate::types::StateData::Gemini {
                calls: signed,
                text: Some("VFhU".to_owned()),
            },
        ));
        let req = ChatRequest::from_prompt("x")
            .tool(Tool::new("f", json!({"type": "object"})).description("does f"))
            .message(turn)
            .message(Message::tool_result("c1", "1"))
            .message(Message::tool_result("c2", "2"));
        let parts = |to: &str| {
            serde_json::to_value(request_body(&req, &ProviderId::new(to)).unwrap()).unwrap()
                ["contents"][1]["parts"]
                .clone()
        };
        assert_eq!(
            parts("g"),
            json!([
                {"text": "Checking.", "thoughtSignature": "VFhU"},
                {"functionCall": {"name": "f", "args": {"x": 1}}, "thoughtSignature": "U0lH"},
                {"functionCall": {"name": "f", "args": {"x": 2}}}
            ])
        );
        assert_eq!(
            parts("g-eu"),
            json!([
                {"text": "Checking."},
                {"functionCall": {"name": "f", "args": {"x": 1}}, "thoughtSignature": FOREIGN_CALL_SIGNATURE},
                {"functionCall": {"name": "f", "args": {"x": 2}}}
            ])
        );
    }

    /// A function declaration without its required `description`, and six stop sequences
    /// (Gemini takes five), are refused before sending, naming what and why.
    #[test]
    fn what_gemini_requires_of_the_fields_is_checked_before_sending() {
        let described = Tool::new("f", json!({"type": "object"})).description("does f");
        let bare = Tool::new("g", json!({"type": "object"}));
        assert!(check(&ChatRequest::from_prompt("x").tool(described.clone())).is_ok());
        for tool in [bare.clone(), bare.description("  ")] {
            let req = ChatRequest::from_prompt("x")
                .tool(described.clone())
                .tool(tool);
            let err = check(&req).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Unsupported);
            assert!(
                err.message().contains("tool `g` without a description"),
                "{err}"
            );
            assert_eq!(
                request_body(&req, &ProviderId::new("g"))
                    .unwrap_err()
                    .kind(),
                ErrorKind::Unsupported
            );
        }
        let five = ["a", "b", "c", "d", "e"]
            .into_iter()
            .fold(ChatRequest::from_prompt("x"), |r, s| r.stop(s));
        assert!(check(&five).is_ok());
        let err = check(&five.stop("f")).unwrap_err();
        assert!(
            err.message().contains("`stopSequences` takes at most 5"),
            "{err}"
        );
    }

    use serde_json::json;

    use super::*;
    use crate::types::ToolCall;

    fn body(req: &ChatRequest) -> Value {
        serde_json::to_value(request_body(req, &ProviderId::new("g")).unwrap()).unwrap()
    }

    #[test]
    fn roles_become_user_and_model_with_same_role_runs_as_parts() {
        let req = ChatRequest::new()
            .system("Be brief.")
            .user("a")
            .user("b")
            .assistant("c")
            .system("Use French.");
        assert_eq!(
            body(&req),
            json!({
                "contents": [
                    {"role": "user", "parts": [{"text": "a"}, {"text": "b"}]},
                    {"role": "model", "parts": [{"text": "c"}]}
                ],
                "systemInstruction": {"parts": [{"text": "Be brief."}, {"text": "Use French."}]}
            })
        );
    }

    #[test]
    fn json_schema_sets_mime_type_and_the_json_schema_field() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        let req = ChatRequest::from_prompt("x").response_format(ResponseFormat::JsonSchema {
            name: "thing".into(),
            schema: schema.clone(),
        });
        let v = body(&req);
        assert_eq!(
            v["generationConfig"],
            json!({"responseMimeType": "application/json", "responseJsonSchema": schema})
        );
    }

    #[test]
    fn image_types_and_urls_gemini_cannot_read_are_refused_by_name() {
        let refused = [
            (Image::base64("image/gif", "R0lGOD"), "PNG, JPEG"),
            (
                Image::url("http://example.com/a.png"),
                "https image URLs only",
            ),
            (
                Image::url("https://example.com/photo?id=7"),
                "does not end in",
            ),
            (Image::url("data:image/png,rawbytes"), "not base64"),
            (Image::url("not a url"), "does not parse"),
        ];
        for (image, want) in refused {
            let req = ChatRequest::new().message(Message::user("What is it?").image(image));
            let err = check(&req).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Unsupported, "{want}");
            assert!(err.message().contains("message 0's image 0"), "{err}");
            assert!(err.message().contains(want), "{want}: {err}");
            assert!(
                !err.message().contains("example.com"),
                "never the URL: {err}"
            );
            assert_eq!(
                request_body(&req, &ProviderId::new("g"))
                    .err()
                    .map(|e| e.kind()),
                Some(ErrorKind::Unsupported),
                "the body is refused alike: {want}"
            );
        }
    }

    #[test]
    fn carried_images_and_image_urls_become_inline_and_file_data() {
        let req = ChatRequest::new().message(
            Message::user("")
                .image(Image::base64("image/JPEG", "/9j/4AAQ"))
                .image(Image::url("data:image/webp;base64,UklGR"))
                .image(Image::url("https://example.com/cats/tabby.HEIC?sig=abc")),
        );
        assert!(check(&req).is_ok());
        assert_eq!(
            body(&req)["contents"][0]["parts"],
            json!([
                {"inlineData": {"mimeType": "image/JPEG", "data": "/9j/4AAQ"}},
                {"inlineData": {"mimeType": "image/webp", "data": "UklGR"}},
                {"fileData": {"mimeType": "image/heic",
                              "fileUri": "https://example.com/cats/tabby.HEIC?sig=abc"}}
            ])
        );
    }

    #[test]
    fn calls_with_arguments_that_are_not_objects_are_refused() {
        let call = ToolCall::new("c1", "f", json!([1, 2]));
        let req = ChatRequest::from_prompt("x")
            .tool(Tool::new("f", json!({"type": "object"})).description("f"))
            .message(Message::assistant_calls("", vec![call]));
        let err = check(&req).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
        assert!(err.message().contains("message 1's call of `f`"), "{err}");
    }

    #[test]
    fn debug_shows_the_shape_never_the_text() {
        let req = ChatRequest::from_prompt("secret prompt");
        let shown = format!("{:?}", request_body(&req, &ProviderId::new("g")).unwrap());
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("contents: 1"), "{shown}");
    }
}
