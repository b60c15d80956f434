//! The [`Bedrock`] adapter: its endpoint, region and model, and the `Provider` hooks.

use std::time::SystemTime;

use http::HeaderMap;
use llm_failover_core::clock::Now;
use llm_failover_core::config::{ProviderConfig, ProviderKind};
use llm_failover_core::http::{HttpRequest, RawResponse};
use llm_failover_core::provider::{FrameParser, Provider, RequestContext, StreamDecoder};
use llm_failover_core::ratelimit::{HeaderDialect, parse_limit_headers};
use llm_failover_core::{
    Capabilities, Capability, ChatRequest, ChatResponse, EmbeddingRequest, EmbeddingResponse,
    Error, ErrorKind, LimitReport, ProviderId, Result,
};
use url::Url;

use crate::{embed, error, sign, stream, wire};

/// The wire format's name, as written in `providers.toml` (`kind = "bedrock"`).
pub const PROVIDER_TYPE: &str = "bedrock";

/// An AWS Bedrock provider, through the Converse API: one request format for every model
/// Bedrock serves, each request signed with AWS Signature Version 4.
///
/// The credential is [`Credential::aws`](llm_failover_core::Credential::aws) (an access key
/// id, its secret access key, the session token of temporary credentials); the region is
/// the one the requests are signed for.
///
/// # Examples
///
/// ```
/// use llm_failover::bedrock::Bedrock;
/// use llm_failover::provider::{Provider, RequestContext};
/// use llm_failover::{Capability, ChatRequest, ProviderId};
///
/// let base = "https://bedrock-runtime.us-east-1.amazonaws.com".parse()?;
/// let bedrock = Bedrock::new(ProviderId::new("bedrock"), base, "us-east-1")
///     .with_model("anthropic.claude-3-haiku-20240307-v1:0");
/// let model = bedrock.default_model(Capability::Chat).unwrap();
/// let http = bedrock.chat_request(&ChatRequest::from_prompt("Hi"), &RequestContext::new(model, None))?;
/// assert_eq!(
///     http.url.as_str(),
///     "https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse"
/// );
/// let body: serde_json::Value = serde_json::from_slice(http.json_body().unwrap())?;
/// assert_eq!(body["messages"][0]["content"][0]["text"], "Hi");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Bedrock {
    id: ProviderId,
    base_url: Url,
    region: String,
    model: Option<String>,
    embedding_model: Option<String>,
}

impl Bedrock {
    /// A provider named `id` at `base_url` (`https://bedrock-runtime.{region}.amazonaws.com`,
    /// or a proxy's or an emulator's), signing for `region`, with no default model.
    pub fn new(id: ProviderId, base_url: Url, region: &str) -> Self {
        Bedrock {
            id,
            base_url,
            region: region.to_owned(),
            model: None,
            embedding_model: None,
        }
    }

    /// Sets the model (a model id, an inference profile id or an ARN) used when a request
    /// names none.
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Sets the embedding model used when a request names none: a Titan Text Embeddings
    /// model (`amazon.titan-embed-text-v2:0`, one text per request) or a Cohere Embed model
    /// (`cohere.embed-english-v3`, up to 96), called through `InvokeModel`.
    ///
    /// # Examples
    ///
    /// ```
    /// use llm_failover::bedrock::Bedrock;
    /// use llm_failover::provider::{Provider, RequestContext};
    /// use llm_failover::{Capability, EmbeddingRequest, ProviderId};
    ///
    /// let bedrock = Bedrock::new(
    ///     ProviderId::new("bedrock"),
    ///     "https://bedrock-runtime.us-east-1.amazonaws.com".parse()?,
    ///     "us-east-1",
    /// )
    /// .with_embedding_model("cohere.embed-english-v3");
    /// let model = bedrock.default_model(Capability::Embedding).unwrap();
    /// let req = EmbeddingRequest::many(["a", "b"]);
    /// let http = bedrock.embedding_request(&req, &RequestContext::new(model, None))?;
    /// assert_eq!(http.url.path(), "/model/cohere.embed-english-v3/invoke");
    /// let body: serde_json::Value = serde_json::from_slice(http.json_body().unwrap())?;
    /// assert_eq!(body["texts"], serde_json::json!(["a", "b"]));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn with_embedding_model(mut self, model: impl Into<String>) -> Self {
        self.embedding_model = Some(model.into());
        self
    }

    /// The region requests are signed for.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// Builds the adapter from a validated provider entry: its base URL, its model, and the
    /// region read from the base URL's host.
    ///
    /// # Errors
    ///
    /// `Config` when the entry is not of kind `bedrock`, sets a `transcription_model`, or its
    /// host is not a Bedrock Runtime endpoint the region can be read from.
    pub fn from_config(cfg: &ProviderConfig) -> Result<Self> {
        let at = |field: &str| format!("providers.{}.{field}", cfg.id);
        let config = |m: String| Error::new(ErrorKind::Config, m);
        if cfg.kind != ProviderKind::Bedrock {
            return Err(config(format!(
                "{}: expected kind `{PROVIDER_TYPE}`, found `{}`",
                at("kind"),
                cfg.kind
            )));
        }
        if cfg.transcription_model.is_some() {
            return Err(config(format!(
                "{}: Bedrock's Converse API offers no speech-to-text; remove it or use a \
                 transcription provider",
                at("transcription_model")
            )));
        }
        let host = cfg.base_url.host_str().unwrap_or_default();
        let from_host = region_from_host(host);
        let region = match (cfg.region.as_deref(), from_host) {
            (Some(r), Some(h)) if r != h => {
                return Err(config(format!(
                    "{}: `{r}`, but the base URL's host `{host}` is in `{h}`: requests signed for \
                     one region are refused by another",
                    at("region")
                )));
            }
            (Some(r), _) => r,
            (None, Some(h)) => h,
            (None, None) => {
                return Err(config(format!(
                    "{}: cannot read the AWS region from the host `{host}`: a Bedrock base URL \
                     is `https://bedrock-runtime.<region>.amazonaws.com` (or \
                     `bedrock-runtime-fips.`); for another host (a VPC endpoint, a proxy) name \
                     it with region = \"us-east-1\"",
                    at("base_url")
                )));
            }
        };
        let mut provider = Self::new(cfg.id.clone(), cfg.base_url.clone(), region);
        provider.model = cfg.model.clone();
        provider.embedding_model = cfg.embedding_model.clone();
        Ok(provider)
    }

    /// `{base}/model/{modelId}/converse` (or `converse-stream`), the model id percent-encoded
    /// as the AWS SDKs encode a path label (`:` of a version, `/` of an ARN).
    fn endpoint(&self, model: &str, stream: bool) -> Result<Url> {
        let action = if stream {
            "converse-stream"
        } else {
            "converse"
        };
        self.model_url(model, action)
    }

    /// `{base}/model/{modelId}/{action}`.
    fn model_url(&self, model: &str, action: &str) -> Result<Url> {
        if self.base_url.cannot_be_a_base() {
            return Err(Error::new(
                ErrorKind::Config,
                format!(
                    "provider `{}`: base_url `{}` cannot carry a path",
                    self.id, self.base_url
                ),
            ));
        }
        let mut url = self.base_url.clone();
        let base = url.path().trim_end_matches('/').to_owned();
        url.set_path(&format!("{base}/model/{}/{action}", encode_label(model)));
        url.set_query(None);
        Ok(url)
    }
}

/// The region of a Bedrock Runtime host: `bedrock-runtime.{region}.amazonaws.com`,
/// `bedrock-runtime-fips.{region}.amazonaws.com` (and `.amazonaws.com.cn`).
pub(crate) fn region_from_host(host: &str) -> Option<&str> {
    let rest = host
        .strip_prefix("bedrock-runtime.")
        .or_else(|| host.strip_prefix("bedrock-runtime-fips."))?;
    let region = rest
        .strip_suffix(".amazonaws.com")
        .or_else(|| rest.strip_suffix(".amazonaws.com.cn"))?;
    let valid = !region.is_empty()
        && region
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    valid.then_some(region)
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn encode_label(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Provider for Bedrock {
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
        Capabilities {
            chat: true,
            embedding: true,
            ..Capabilities::default()
        }
    }

    fn default_model(&self, capability: Capability) -> Option<&str> {
        match capability {
            Capability::Chat => self.model.as_deref(),
            Capability::Embedding => self.embedding_model.as_deref(),
            _ => None,
        }
    }

    fn chat_request(&self, req: &ChatRequest, ctx: &RequestContext<'_>) -> Result<HttpRequest> {
        let body = wire::request_body(req)?;
        HttpRequest::post_json(self.endpoint(ctx.model, ctx.stream)?, &body)
    }

    fn check_chat(&self, req: &ChatRequest) -> Result<()> {
        wire::check(req)
    }

    fn chat_response(&self, raw: RawResponse, model: &str) -> Result<ChatResponse> {
        let mut resp = wire::parse_response(&self.id, &raw.body, model)?;
        resp.request_id = self.request_id(&raw.headers);
        Ok(resp)
    }

    fn stream_decoder(&self, model: &str) -> Box<dyn StreamDecoder> {
        Box::new(stream::Decoder::new(model))
    }

    /// Titan embeds one text per request, Cohere up to 96; other models are refused.
    fn check_embedding(&self, req: &EmbeddingRequest) -> Result<()> {
        let model = req.model.as_deref().or(self.embedding_model.as_deref());
        embed::check(&self.id, req, model)
    }

    fn embedding_request(
        &self,
        req: &EmbeddingRequest,
        ctx: &RequestContext<'_>,
    ) -> Result<HttpRequest> {
        let body = embed::request_body(&self.id, req, ctx.model)?;
        HttpRequest::post_json(self.model_url(ctx.model, "invoke")?, &body)
    }

    fn embedding_response(&self, raw: RawResponse, model: &str) -> Result<EmbeddingResponse> {
        let mut answer = embed::parse_response(&self.id, &raw.body, &raw.headers, model)?;
        answer.request_id = self.request_id(&raw.headers);
        Ok(answer)
    }

    fn error(&self, raw: &RawResponse, now: Now) -> Error {
        let _ = now; // Bedrock states no delays.
        let error_type = raw
            .headers
            .get("x-amzn-errortype")
            .and_then(|v| v.to_str().ok());
        error::classify(raw.status, error_type, &raw.body)
    }

    /// Bedrock states no limits in headers: its throttling is learned from its 429s. A proxy
    /// in front of it may (a `Retry-After`, the generic forms), so the generic reader runs,
    /// as for every kind whose registry row says `generic` (Gemini, Vertex).
    fn limit_report(&self, headers: &HeaderMap, now: Now) -> LimitReport {
        parse_limit_headers(HeaderDialect::Generic, headers, now)
    }

    fn request_id(&self, headers: &HeaderMap) -> Option<String> {
        headers
            .get("x-amzn-requestid")
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    }

    fn finish(&self, req: HttpRequest, ctx: &RequestContext<'_>, now: Now) -> Result<HttpRequest> {
        let at: SystemTime = now.wall;
        sign::sign_request(req, &self.id, &self.region, ctx.credential, at)
    }

    fn frames(&self) -> Box<dyn FrameParser> {
        Box::new(stream::EventStream::default())
    }
}

#[cfg(test)]
mod tests {
    use llm_failover_core::Config;

    use super::*;

    #[test]
    fn reads_the_region_from_aws_hosts_only() {
        let table = [
            ("bedrock-runtime.us-east-1.amazonaws.com", Some("us-east-1")),
            (
                "bedrock-runtime-fips.us-gov-west-1.amazonaws.com",
                Some("us-gov-west-1"),
            ),
            (
                "bedrock-runtime.cn-north-1.amazonaws.com.cn",
                Some("cn-north-1"),
            ),
            ("bedrock.us-east-1.amazonaws.com", None),
            ("bedrock-runtime..amazonaws.com", None),
            ("bedrock-runtime.us-east-1.example.com", None),
            ("127.0.0.1", None),
        ];
        for (host, region) in table {
            assert_eq!(region_from_host(host), region, "{host}");
        }
    }

    #[test]
    fn encodes_the_model_id_in_the_path() {
        let b = Bedrock::new(
            ProviderId::new("b"),
            "http://127.0.0.1:9/bedrock/".parse().unwrap(),
            "us-east-1",
        );
        let table = [
            (
                "amazon.nova-lite-v1:0",
                false,
                "/bedrock/model/amazon.nova-lite-v1%3A0/converse",
            ),
            (
                "arn:aws:bedrock:us-east-1:123:inference-profile/us.x",
                true,
                "/bedrock/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123%3Ainference-profile%2Fus.x/converse-stream",
            ),
        ];
        for (model, stream, path) in table {
            assert_eq!(b.endpoint(model, stream).unwrap().path(), path);
        }
    }

    fn config(base_url: &str) -> Result<Config> {
        let toml = format!(
            r#"
            default_environment = "dev"
            [providers.aws]
            kind = "bedrock"
            base_url = "{base_url}"
            model = "amazon.nova-lite-v1:0"
            aws_credentials_env = {{ dev = {{ access_key_id = "AWS_ACCESS_KEY_ID", secret_access_key = "AWS_SECRET_ACCESS_KEY" }} }}
            [environments.dev]
            chat = ["aws"]
            "#
        );
        Config::from_toml_str(&toml)
    }

    #[test]
    fn from_config_reads_the_region_from_the_host() {
        let cfg = config("https://bedrock-runtime.eu-west-1.amazonaws.com").unwrap();
        let b = Bedrock::from_config(cfg.provider("aws").unwrap()).unwrap();
        assert_eq!(b.region(), "eu-west-1");
        assert_eq!(
            b.default_model(Capability::Chat),
            Some("amazon.nova-lite-v1:0")
        );
    }

    /// `region` names the region for a host that does not (a VPC endpoint, a proxy); one
    /// that contradicts the host is refused; `region` on another kind is refused by the
    /// configuration.
    #[test]
    fn a_named_region_serves_another_host_and_must_agree_with_an_aws_one() {
        let with_region = |base_url: &str, region: &str| {
            Config::from_toml_str(&format!(
                r#"
                default_environment = "dev"
                [providers.aws]
                kind = "bedrock"
                base_url = "{base_url}"
                region = "{region}"
                model = "amazon.nova-lite-v1:0"
                aws_credentials_env = {{ dev = {{ access_key_id = "AWS_ACCESS_KEY_ID", secret_access_key = "AWS_SECRET_ACCESS_KEY" }} }}
                [environments.dev]
                chat = ["aws"]
                "#
            ))
        };
        let cfg = with_region(
            "https://vpce-0abc.bedrock-runtime.example.internal",
            "eu-central-2",
        )
        .unwrap();
        let b = Bedrock::from_config(cfg.provider("aws").unwrap()).unwrap();
        assert_eq!(b.region(), "eu-central-2");
        let cfg = with_region(
            "https://bedrock-runtime.us-east-1.amazonaws.com",
            "eu-west-1",
        )
        .unwrap();
        let err = Bedrock::from_config(cfg.provider("aws").unwrap()).unwrap_err();
        assert!(err.message().contains("providers.aws.region"), "{err}");
        let err = with_region("https://x.example.com", "Frankfurt").unwrap_err();
        assert!(err.to_string().contains("is not an AWS region"), "{err}");
    }

    #[test]
    fn from_config_refuses_a_host_without_a_region() {
        let cfg = config("https://llm-proxy.example.com").unwrap();
        let err = Bedrock::from_config(cfg.provider("aws").unwrap()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Config);
        assert!(err.message().contains("providers.aws.base_url"), "{err}");
        assert!(
            err.message().contains("cannot read the AWS region"),
            "{err}"
        );
    }
}
