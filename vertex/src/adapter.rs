//! The [`Vertex`] adapter: its endpoint (project, location), its model, its tokens, and the
//! `Provider` hooks — Gemini's bodies, read and written by the core's Gemini adapter.

use std::sync::Arc;

use http::HeaderMap;
use llm_failover_core::clock::Now;
use llm_failover_core::config::{ProviderConfig, ProviderKind};
use llm_failover_core::http::{HttpRequest, RawResponse};
use llm_failover_core::provider::gemini::Gemini;
use llm_failover_core::provider::{
    Authorized, Authorizing, Provider, RequestContext, StreamDecoder,
};
use llm_failover_core::{
    Capabilities, Capability, ChatRequest, ChatResponse, Credential, Error, ErrorKind, LimitReport,
    ProviderId, Result,
};
use url::Url;

use crate::key::is_key_json;
use crate::token::{self, Tokens};

/// The wire format's name, as written in `providers.toml` (`kind = "vertex"`).
pub const PROVIDER_TYPE: &str = "vertex";

/// Google Vertex AI's Gemini models (`…/publishers/google/models/{model}:generateContent`),
/// at a regional endpoint (or the global one), authorised with OAuth 2 access tokens.
///
/// The credential is a service account's JSON key file (`key_file` in `providers.toml`):
/// the adapter signs a JWT with it, exchanges it at the key's `token_uri` for an access token,
/// and sends that token until shortly before it expires (one fetch at a time, whatever the
/// number of requests). A credential that is an access token already (`ya29.…`, fetched by
/// your application) is sent as it is.
///
/// # Examples
///
/// ```
/// use llm_failover::vertex::Vertex;
/// use llm_failover::provider::{Provider, RequestContext};
/// use llm_failover::{Capability, ChatRequest, Credential, ProviderId};
///
/// let vertex = Vertex::new(ProviderId::new("vertex"), "my-project", "europe-west4")?
///     .with_model("gemini-2.5-flash");
/// assert_eq!(
///     vertex.base_url().unwrap().as_str(),
///     "https://europe-west4-aiplatform.googleapis.com/v1/projects/my-project/locations/europe-west4"
/// );
/// // The access token the client fetched for this request (an application's own works too):
/// let token = Credential::new("ya29.a0-example");
/// let model = vertex.default_model(Capability::Chat).unwrap();
/// let http = vertex.chat_request(&ChatRequest::from_prompt("Hi"), &RequestContext::new(model, Some(&token)))?;
/// assert_eq!(
///     http.url.path(),
///     "/v1/projects/my-project/locations/europe-west4/publishers/google/models/gemini-2.5-flash:generateContent"
/// );
/// assert!(http.headers["authorization"].is_sensitive());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Vertex {
    id: ProviderId,
    /// `…/v1/projects/{project}/locations/{location}`.
    base_url: Url,
    project: String,
    location: String,
    /// Gemini's bodies and answers, at `{base_url}/publishers/google`.
    gemini: Gemini,
    model: Option<String>,
    tokens: Arc<Tokens>,
}

impl Vertex {
    /// A provider named `id` for `project` at `location` (a region such as `us-central1`,
    /// or `global`), at Google's endpoint for it:
    /// `https://{location}-aiplatform.googleapis.com/v1/projects/{project}/locations/{location}`
    /// (`https://aiplatform.googleapis.com/…` for `global`).
    ///
    /// # Errors
    ///
    /// `Config` when the project or the location is empty or holds characters no Google
    /// project id or location has.
    pub fn new(id: ProviderId, project: &str, location: &str) -> Result<Self> {
        let at = || format!("provider `{id}`");
        let project = label(project, "project", &at)?;
        let location = label(location, "location", &at)?;
        let host = if location == "global" {
            "aiplatform.googleapis.com".to_owned()
        } else {
            format!("{location}-aiplatform.googleapis.com")
        };
        let url = format!("https://{host}/v1/projects/{project}/locations/{location}");
        let base_url = Url::parse(&url).map_err(|e| config(format!("{}: {e}", at())))?;
        Self::from_base_url(id, base_url)
    }

    /// A provider named `id` at `base_url`, which names the project and the location:
    /// `https://{location}-aiplatform.googleapis.com/v1/projects/{project}/locations/{location}`,
    /// or a proxy's or an emulator's URL ending the same way (`…/v1beta1/projects/…` too).
    ///
    /// # Errors
    ///
    /// `Config` naming what is missing: the API version, the project or the location; or a
    /// Google regional host whose region is not the location.
    pub fn from_base_url(id: ProviderId, base_url: Url) -> Result<Self> {
        let shown = base_url.to_string();
        let (project, location) = endpoint_parts(&base_url)
            .map_err(|what| config(format!("provider `{id}`: base_url `{shown}` {what}")))?;
        let mut gemini_base = base_url.clone();
        gemini_base
            .path_segments_mut()
            .map_err(|()| {
                config(format!(
                    "provider `{id}`: base_url `{shown}` cannot carry a path"
                ))
            })?
            .pop_if_empty()
            .push("publishers")
            .push("google");
        Ok(Vertex {
            gemini: Gemini::new(id.clone(), gemini_base),
            id,
            base_url,
            project,
            location,
            model: None,
            tokens: Arc::default(),
        })
    }

    /// Sets the model used when a request names none (`gemini-2.5-flash`).
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// The Google Cloud project requests are billed to.
    pub fn project(&self) -> &str {
        &self.project
    }

    /// The location requests are served in (`us-central1`, `global`).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// Builds the adapter from a validated provider entry: the project and location read from
    /// its base URL, its model.
    ///
    /// # Errors
    ///
    /// `Config` naming the field: the entry is not of kind `vertex`, sets a
    /// `transcription_model` or an `api_version` (the version is part of `base_url`), or its
    /// base URL does not name the project and the location.
    pub fn from_config(cfg: &ProviderConfig) -> Result<Self> {
        let at = |field: &str| format!("providers.{}.{field}", cfg.id);
        if cfg.kind != ProviderKind::Vertex {
            return Err(config(format!(
                "{}: expected kind `{PROVIDER_TYPE}`, found `{}`",
                at("kind"),
                cfg.kind
            )));
        }
        if cfg.transcription_model.is_some() {
            return Err(config(format!(
                "{}: Vertex AI's Gemini API offers no speech-to-text here; remove it or use a \
                 transcription provider",
                at("transcription_model")
            )));
        }
        if cfg.api_version.is_some() {
            return Err(config(format!(
                "{}: Vertex AI's API version is part of `base_url` (…/v1/projects/…)",
                at("api_version")
            )));
        }
        endpoint_parts(&cfg.base_url)
            .map_err(|what| config(format!("{}: `{}` {what}", at("base_url"), cfg.base_url)))?;
        let mut provider = Self::from_base_url(cfg.id.clone(), cfg.base_url.clone())?;
        provider.model = cfg.model.clone();
        Ok(provider)
    }
}

/// The message of a configuration error.
fn config(message: String) -> Error {
    Error::new(ErrorKind::Config, message)
}

/// A project id or a location as a URL path segment: lower-case letters, digits and `-`.
fn label(value: &str, what: &str, at: &dyn Fn() -> String) -> Result<String> {
    let ok = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(value.to_owned())
    } else {
        Err(config(format!(
            "{}: the {what} `{value}` is not a Google Cloud {what} (lower-case letters, \
             digits and `-`)",
            at()
        )))
    }
}

/// The example every base URL message ends with.
const SHAPE: &str = "a Vertex AI base URL is \
     `https://{location}-aiplatform.googleapis.com/v1/projects/{project}/locations/{location}`";

/// The project and location `url` names, or what is missing.
pub(crate) fn endpoint_parts(url: &Url) -> std::result::Result<(String, String), String> {
    let segments: Vec<&str> = url
        .path_segments()
        .map(|s| s.filter(|s| !s.is_empty()).collect())
        .unwrap_or_default();
    let Some(p) = segments.iter().position(|s| *s == "projects") else {
        return Err(format!(
            "names no project (`…/projects/{{project}}/…`): {SHAPE}"
        ));
    };
    if !matches!(
        p.checked_sub(1).map(|v| segments[v]),
        Some("v1" | "v1beta1")
    ) {
        return Err(format!(
            "names no API version (`v1` or `v1beta1`) before `projects`: {SHAPE}"
        ));
    }
    let Some(project) = segments.get(p + 1).filter(|s| **s != "locations") else {
        return Err(format!("names no project after `projects/`: {SHAPE}"));
    };
    if segments.get(p + 2) != Some(&"locations") {
        return Err(format!(
            "names no location (`…/locations/{{location}}`): {SHAPE}"
        ));
    }
    let Some(location) = segments.get(p + 3) else {
        return Err(format!("names no location after `locations/`: {SHAPE}"));
    };
    if segments.len() > p + 4 {
        return Err(format!("goes on after the location: {SHAPE}"));
    }
    let host = url.host_str().unwrap_or_default();
    if let Some(region) = host.strip_suffix("-aiplatform.googleapis.com")
        && region != *location
    {
        return Err(format!(
            "is the endpoint of region `{region}`, not of location `{location}`: {SHAPE}"
        ));
    }
    Ok(((*project).to_owned(), (*location).to_owned()))
}

impl Provider for Vertex {
    fn id(&self) -> &ProviderId {
        &self.id
    }

    fn kind(&self) -> &'static str {
        PROVIDER_TYPE
    }

    fn base_url(&self) -> Option<&Url> {
        Some(&self.base_url)
    }

    fn capabilities(&self) -> Capabilities {
        ProviderKind::Vertex.capabilities()
    }

    fn default_model(&self, capability: Capability) -> Option<&str> {
        match capability {
            Capability::Chat => self.model.as_deref(),
            _ => None,
        }
    }

    /// Gemini's request at Vertex's path, with `Authorization: Bearer` and the access token
    /// ([`authorize`](Provider::authorize) fetched it from the key).
    fn chat_request(&self, req: &ChatRequest, ctx: &RequestContext<'_>) -> Result<HttpRequest> {
        let Some(token) = ctx.credential else {
            return Err(Error::new(
                ErrorKind::Auth,
                format!(
                    "provider `{}` has no credential: give it a service account's key file \
                     (key_file in providers.toml) or an access token",
                    self.id
                ),
            ));
        };
        if is_key_json(token.expose()) {
            // Only the token it buys is ever sent: through the client, which fetches it.
            return Err(Error::new(
                ErrorKind::Auth,
                format!(
                    "provider `{}`: a service account's key is exchanged for an access token \
                     before a request is sent (Provider::authorize), never sent itself",
                    self.id
                ),
            ));
        }
        let mut inner = RequestContext::new(ctx.model, None);
        if ctx.stream {
            inner = inner.streaming();
        }
        if let Some(extra) = ctx.extra_body {
            inner = inner.with_extra_body(extra);
        }
        let http = self.gemini.chat_request(req, &inner)?;
        http.secret_header("authorization", &format!("Bearer {}", token.expose()))
    }

    fn check_chat(&self, req: &ChatRequest) -> Result<()> {
        self.gemini.check_chat(req)
    }

    fn chat_response(&self, raw: RawResponse, model: &str) -> Result<ChatResponse> {
        self.gemini.chat_response(raw, model)
    }

    fn stream_decoder(&self, model: &str) -> Box<dyn StreamDecoder> {
        self.gemini.stream_decoder(model)
    }

    /// Google's errors, as Gemini's: `RESOURCE_EXHAUSTED` (Vertex sends it without headers
    /// or `RetryInfo`) is `RateLimited`, a per-day quota `QuotaExhausted`, `UNAUTHENTICATED`
    /// is `Auth`, `PERMISSION_DENIED` (another project) `PermissionDenied`, a
    /// project without billing (`BILLING_DISABLED`) `QuotaExhausted`.
    fn error(&self, raw: &RawResponse, now: Now) -> Error {
        self.gemini.error(raw, now)
    }

    fn limit_report(&self, headers: &HeaderMap, now: Now) -> LimitReport {
        self.gemini.limit_report(headers, now)
    }

    fn error_limit_report(&self, raw: &RawResponse, now: Now) -> LimitReport {
        self.gemini.error_limit_report(raw, now)
    }

    fn request_id(&self, headers: &HeaderMap) -> Option<String> {
        self.gemini.request_id(headers)
    }

    /// A service account's key becomes an access token: the one held, or one fetched from the
    /// key's `token_uri` through the client's transport. An access token given as the
    /// credential is sent as it is.
    fn authorize<'a>(&'a self, auth: Authorizing<'a>) -> Option<Authorized<'a>> {
        let key = auth.credential.filter(|c| is_key_json(c.expose()))?;
        Some(Box::pin(
            self.tokens.token(key, auth.now, move |req| auth.send(req)),
        ))
    }

    /// A key that is no service account's JSON key (a file of another kind, a key without
    /// its private key) is refused when the client is built, naming the file.
    fn check_credential(&self, credential: Option<&Credential>) -> Result<()> {
        match credential {
            Some(c) if is_key_json(c.expose()) => token::parse(c).map(|_| ()),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use llm_failover_core::Config;

    use super::*;

    #[test]
    fn reads_the_project_and_location_from_the_base_url() {
        let table = [
            (
                "https://us-central1-aiplatform.googleapis.com/v1/projects/my-proj/locations/us-central1",
                Ok(("my-proj", "us-central1")),
            ),
            (
                "https://aiplatform.googleapis.com/v1beta1/projects/p-1/locations/global/",
                Ok(("p-1", "global")),
            ),
            (
                "http://127.0.0.1:4010/vertex/v1/projects/emulator-project/locations/europe-west4",
                Ok(("emulator-project", "europe-west4")),
            ),
            (
                "https://us-central1-aiplatform.googleapis.com",
                Err("names no project"),
            ),
            (
                "https://us-central1-aiplatform.googleapis.com/projects/p/locations/us-central1",
                Err("names no API version"),
            ),
            (
                "https://us-central1-aiplatform.googleapis.com/v1/projects/p",
                Err("names no location (`…/locations/{location}`)"),
            ),
            (
                "https://us-central1-aiplatform.googleapis.com/v1/projects/p/locations",
                Err("names no location after"),
            ),
            (
                "https://us-central1-aiplatform.googleapis.com/v1/projects/p/locations/us-central1/publishers",
                Err("goes on after the location"),
            ),
            (
                "https://us-central1-aiplatform.googleapis.com/v1/projects/p/locations/europe-west4",
                Err("region `us-central1`, not of location `europe-west4`"),
            ),
        ];
        for (url, want) in table {
            let got = endpoint_parts(&url.parse().unwrap());
            match (got, want) {
                (Ok((p, l)), Ok((wp, wl))) => {
                    assert_eq!((p.as_str(), l.as_str()), (wp, wl), "{url}")
                }
                (Err(e), Err(needle)) => assert!(e.contains(needle), "{url}: {e}"),
                (got, want) => panic!("{url}: {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn builds_the_regional_and_global_endpoints() {
        let v = Vertex::new(ProviderId::new("v"), "my-proj", "global").unwrap();
        assert_eq!(
            v.base_url().unwrap().as_str(),
            "https://aiplatform.googleapis.com/v1/projects/my-proj/locations/global"
        );
        let err = Vertex::new(ProviderId::new("v"), "My Project", "us-central1").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config);
        assert!(err.message().contains("the project `My Project`"), "{err}");
    }

    #[test]
    fn streams_with_sse_and_never_sends_a_key() {
        let v = Vertex::new(ProviderId::new("v"), "p-1", "us-central1")
            .unwrap()
            .with_model("gemini-2.5-flash");
        let token = Credential::new("ya29.token");
        let ctx = RequestContext::new("gemini-2.5-flash", Some(&token)).streaming();
        let http = v
            .chat_request(&ChatRequest::from_prompt("Hi"), &ctx)
            .unwrap();
        assert_eq!(
            http.url.as_str(),
            "https://us-central1-aiplatform.googleapis.com/v1/projects/p-1/locations/us-central1/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        );
        assert!(http.headers.get("x-goog-api-key").is_none());
        let key = Credential::new(crate::key::tests::key_json(
            "https://oauth2.googleapis.com/token",
        ));
        let ctx = RequestContext::new("gemini-2.5-flash", Some(&key));
        let err = v
            .chat_request(&ChatRequest::from_prompt("Hi"), &ctx)
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Auth);
        assert!(!err.message().contains("PRIVATE"));
    }

    fn config(base_url: &str) -> Result<Config> {
        Config::from_toml_str(&format!(
            r#"
            default_environment = "prod"
            [providers.vertex]
            kind = "vertex"
            base_url = "{base_url}"
            model = "gemini-2.5-flash"
            key_file = {{ prod = "/etc/llm/vertex-prod.json" }}
            [environments.prod]
            chat = ["vertex"]
            "#
        ))
    }

    #[test]
    fn from_config_reads_the_endpoint_and_names_the_field() {
        let cfg = config(
            "https://europe-west4-aiplatform.googleapis.com/v1/projects/my-proj/locations/europe-west4",
        )
        .unwrap();
        let v = Vertex::from_config(cfg.provider("vertex").unwrap()).unwrap();
        assert_eq!((v.project(), v.location()), ("my-proj", "europe-west4"));
        assert_eq!(v.default_model(Capability::Chat), Some("gemini-2.5-flash"));

        let cfg = config("https://europe-west4-aiplatform.googleapis.com").unwrap();
        let err = Vertex::from_config(cfg.provider("vertex").unwrap()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config);
        assert!(err.message().contains("providers.vertex.base_url"), "{err}");
        assert!(err.message().contains("names no project"), "{err}");
    }
}
