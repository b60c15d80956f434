//! What crosses the wire: requests as adapters describe them, responses as they arrived.

use std::fmt;
use std::pin::Pin;

use bytes::Bytes;
use futures_util::Stream;
use reqwest::Method;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use url::Url;

use crate::error::{Error, ErrorKind, Result};

/// A request body, kept in a form that can be sent again (retries, failover).
///
/// # Examples
///
/// ```
/// use llm_failover::http::{Body, HttpRequest};
///
/// let url = "http://127.0.0.1:8080/v1/chat/completions".parse()?;
/// let req = HttpRequest::post_json(url, &serde_json::json!({"model": "gpt-4o-mini"}))?;
/// match &req.body {
///     Body::Json(json) => assert_eq!(&json[..], br#"{"model":"gpt-4o-mini"}"#),
///     other => panic!("expected JSON, got {other:?}"),
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub enum Body {
    /// No body.
    Empty,
    /// A JSON document (sent with `Content-Type: application/json`).
    Json(Bytes),
    /// Raw bytes with their content type (Deepgram audio uploads).
    Bytes {
        /// The payload.
        bytes: Bytes,
        /// Its MIME type.
        content_type: String,
    },
    /// A `multipart/form-data` form, rebuilt for every send.
    Multipart(Vec<FormPart>),
}

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Body::Empty => f.write_str("Empty"),
            Body::Json(b) => write!(f, "Json({} bytes)", b.len()),
            Body::Bytes {
                bytes,
                content_type,
            } => {
                write!(f, "Bytes({} bytes of {content_type})", bytes.len())
            }
            Body::Multipart(parts) => f.debug_list().entries(parts).finish(),
        }
    }
}

/// One field of a multipart form.
///
/// # Examples
///
/// ```
/// use bytes::Bytes;
/// use llm_failover::http::{Body, FormPart};
///
/// let audio = Bytes::from_static(b"ID3\x04\x00");
/// let form = Body::Multipart(vec![
///     FormPart::text("model", "whisper-1"),
///     FormPart::file("file", audio, "memo.mp3", "audio/mpeg"),
/// ]);
/// let shown = format!("{form:?}"); // names and sizes only
/// assert!(shown.contains("memo.mp3") && !shown.contains("whisper-1"));
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub enum FormPart {
    /// A text field.
    Text {
        /// Field name.
        name: String,
        /// Field value.
        value: String,
    },
    /// A file field.
    File {
        /// Field name.
        name: String,
        /// The file's bytes.
        bytes: Bytes,
        /// The file name sent.
        file_name: String,
        /// The file's MIME type.
        mime_type: String,
    },
}

impl FormPart {
    /// A text field.
    pub fn text(name: impl Into<String>, value: impl Into<String>) -> Self {
        FormPart::Text {
            name: name.into(),
            value: value.into(),
        }
    }

    /// A file field.
    pub fn file(
        name: impl Into<String>,
        bytes: Bytes,
        file_name: impl Into<String>,
        mime_type: impl Into<String>,
    ) -> Self {
        FormPart::File {
            name: name.into(),
            bytes,
            file_name: file_name.into(),
            mime_type: mime_type.into(),
        }
    }
}

impl fmt::Debug for FormPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FormPart::Text { name, value } => write!(f, "{name}=({} bytes)", value.len()),
            FormPart::File {
                name,
                bytes,
                file_name,
                mime_type,
            } => write!(
                f,
                "{name}=file({file_name}, {mime_type}, {} bytes)",
                bytes.len()
            ),
        }
    }
}

/// An HTTP request as an adapter describes it. `Debug` shows no body and no secret header.
///
/// # Examples
///
/// ```
/// use reqwest::Method;
/// use llm_failover::http::HttpRequest;
///
/// let url = "http://127.0.0.1:8080/v1/chat/completions".parse()?;
/// let req = HttpRequest::post_json(url, &serde_json::json!({"model": "gpt-4o-mini"}))?
///     .header("x-title", "docs")?
///     .secret_header("authorization", "Bearer sk-test")?;
/// assert_eq!(req.method, Method::POST);
/// assert!(req.headers["authorization"].is_sensitive());
/// assert_eq!(req.json_body(), Some(&br#"{"model":"gpt-4o-mini"}"#[..]));
/// assert!(!format!("{req:?}").contains("sk-test"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct HttpRequest {
    /// The method.
    pub method: Method,
    /// The full URL.
    pub url: Url,
    /// Headers; credentials are marked sensitive.
    pub headers: HeaderMap,
    /// The body.
    pub body: Body,
}

impl HttpRequest {
    /// A request with no headers and no body.
    pub fn new(method: Method, url: Url) -> Self {
        HttpRequest {
            method,
            url,
            headers: HeaderMap::new(),
            body: Body::Empty,
        }
    }

    /// A `POST` of `body` as JSON.
    ///
    /// # Errors
    ///
    /// `InvalidRequest` if `body` cannot be serialised.
    pub fn post_json(url: Url, body: &impl serde::Serialize) -> Result<Self> {
        let json = serde_json::to_vec(body).map_err(|e| {
            Error::new(
                ErrorKind::InvalidRequest,
                format!("cannot serialise request: {e}"),
            )
        })?;
        Ok(HttpRequest {
            body: Body::Json(Bytes::from(json)),
            ..Self::new(Method::POST, url)
        })
    }

    /// Adds a header (the name in any case: HTTP names are case-insensitive).
    ///
    /// # Errors
    ///
    /// `InvalidRequest` if the name or the value is not valid in a header.
    pub fn header(mut self, name: &str, value: &str) -> Result<Self> {
        let v = HeaderValue::from_str(value).map_err(|_| {
            Error::new(
                ErrorKind::InvalidRequest,
                format!("invalid value for header `{name}`"),
            )
        })?;
        self.headers.insert(header_name(name)?, v);
        Ok(self)
    }

    /// Adds a header holding a secret: marked sensitive, and an invalid value is reported
    /// without echoing it.
    ///
    /// # Errors
    ///
    /// `Auth` if the key contains characters a header cannot carry; `InvalidRequest` if the
    /// name is not a valid header name.
    pub fn secret_header(mut self, name: &str, value: &str) -> Result<Self> {
        let mut v = HeaderValue::from_str(value).map_err(|_| {
            Error::new(
                ErrorKind::Auth,
                format!(
                    "the key for header `{name}` contains characters not allowed in HTTP headers"
                ),
            )
        })?;
        v.set_sensitive(true);
        self.headers.insert(header_name(name)?, v);
        Ok(self)
    }

    /// The JSON body, if it is one (for tests and tracing of sizes).
    pub fn json_body(&self) -> Option<&[u8]> {
        match &self.body {
            Body::Json(b) => Some(b),
            _ => None,
        }
    }
}

/// `name` as a header name, or an `InvalidRequest` error saying which.
fn header_name(name: &str) -> Result<HeaderName> {
    HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
        Error::new(
            ErrorKind::InvalidRequest,
            format!("`{name}` is not a valid header name"),
        )
    })
}

impl fmt::Debug for HttpRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpRequest")
            .field("method", &self.method)
            .field("url", &self.url.as_str())
            .field("headers", &self.headers) // sensitive values print as `Sensitive`
            .field("body", &self.body)
            .finish()
    }
}

/// A complete response: status, headers and the body (at most the transport's cap).
///
/// # Examples
///
/// ```
/// use reqwest::header::HeaderMap;
/// use llm_failover::clock::{Clock, TokioClock};
/// use llm_failover::http::RawResponse;
/// use llm_failover::provider::{openai::OpenAi, Provider};
/// use llm_failover::ProviderId;
///
/// let raw = RawResponse::new(429, HeaderMap::new(), r#"{"error":{"message":"Slow down"}}"#);
/// assert!(!raw.is_success());
/// assert!(raw.text_lossy().contains("Slow down"));
///
/// let openai = OpenAi::new(ProviderId::new("openai"), "http://127.0.0.1:8080/v1".parse()?);
/// let err = openai.error(&raw, TokioClock.both());
/// assert!(err.is_rate_limited());
/// assert_eq!(err.status(), Some(429));
/// # Ok::<(), url::ParseError>(())
/// ```
#[derive(Clone)]
pub struct RawResponse {
    /// HTTP status.
    pub status: u16,
    /// Response headers.
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
}

impl RawResponse {
    /// A response (for tests and adapters' unit tests).
    pub fn new(status: u16, headers: HeaderMap, body: impl Into<Bytes>) -> Self {
        RawResponse {
            status,
            headers,
            body: body.into(),
        }
    }

    /// True for 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body as text (lossy), for error messages.
    pub fn text_lossy(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

impl fmt::Debug for RawResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawResponse")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .field("body_len", &self.body.len())
            .finish()
    }
}

/// A byte stream of a response body.
#[cfg_attr(feature = "test-util", visibility::make(pub))]
pub(crate) type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes>> + Send>>;

/// A successful response whose body is still arriving.
#[cfg_attr(feature = "test-util", visibility::make(pub))]
pub(crate) struct StreamingResponse {
    /// HTTP status (2xx).
    pub status: u16,
    /// Response headers.
    pub headers: HeaderMap,
    /// The body, piece by piece.
    pub body: ByteStream,
}

impl fmt::Debug for StreamingResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamingResponse")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

/// What a send returned: a streaming body for a 2xx, or the whole (error) response.
#[derive(Debug)]
#[cfg_attr(feature = "test-util", visibility::make(pub))]
pub(crate) enum Streamed {
    /// 2xx: the body streams.
    Ok(StreamingResponse),
    /// Not 2xx: the complete response, for classification.
    Err(RawResponse),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found while writing the examples: an uppercase or invalid name panicked (it was read
    /// with `HeaderName::from_static`).
    #[test]
    fn header_names_in_any_case_are_taken_and_invalid_ones_are_an_error() {
        let url: Url = "http://127.0.0.1:1/".parse().unwrap();
        let r = HttpRequest::new(Method::GET, url.clone())
            .header("X-Title", "demo")
            .unwrap()
            .secret_header("X-Api-Key", "sk-test")
            .unwrap();
        assert_eq!(r.headers["x-title"], "demo");
        assert!(r.headers["x-api-key"].is_sensitive());
        for bad in ["bad name", "", "x:y"] {
            let err = HttpRequest::new(Method::GET, url.clone())
                .header(bad, "v")
                .unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidRequest, "{bad:?}");
            let err = HttpRequest::new(Method::GET, url.clone())
                .secret_header(bad, "sk-test")
                .unwrap_err();
            assert!(!err.to_string().contains("sk-test"), "{err}");
        }
    }
}
