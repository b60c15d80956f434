//! AWS Signature Version 4 over the finished request
//! (<https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_sigv-create-signed-request.html>):
//! service `bedrock`, the provider's region, signed at the clock's wall time. aws-sigv4 builds
//! the canonical request (the path encoded a second time, as every service but S3 wants), the
//! string to sign and the signature; the `Authorization`, `x-amz-date` and, for temporary
//! credentials, `x-amz-security-token` headers it returns are added, the secret ones marked
//! sensitive. `host` is signed from the URL (reqwest sends the same).

use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use http::header::{HeaderName, HeaderValue};
use llm_failover_core::http::{Body, HttpRequest};
use llm_failover_core::{Credential, CredentialParts, Error, ErrorKind, ProviderId, Result};
use secrecy::ExposeSecret;

/// The service name in the credential scope.
pub(crate) const SERVICE: &str = "bedrock";

/// `req` with its SigV4 headers.
///
/// # Errors
///
/// `Auth` when there is no credential or it has no AWS parts (nothing is sent);
/// `InvalidRequest` when the request cannot be signed (a body that is not bytes, a header
/// value that is not text).
pub(crate) fn sign_request(
    mut req: HttpRequest,
    id: &ProviderId,
    region: &str,
    credential: Option<&Credential>,
    at: SystemTime,
) -> Result<HttpRequest> {
    let Some(credential) = credential else {
        return Err(Error::new(
            ErrorKind::Auth,
            format!(
                "provider `{id}` (bedrock): no credential to sign the request with; Bedrock \
                 needs AWS credentials (`Credential::aws(access_key_id, secret_access_key, \
                 session_token)`)"
            ),
        ));
    };
    let Some(CredentialParts::Aws {
        access_key_id,
        session_token,
    }) = credential.parts()
    else {
        return Err(Error::new(
            ErrorKind::Auth,
            format!(
                "provider `{id}` (bedrock): the credential has no access key id: Bedrock signs \
                 with AWS credentials (`Credential::aws(access_key_id, secret_access_key, \
                 session_token)`), not an API key"
            ),
        ));
    };
    let body: &[u8] = match &req.body {
        Body::Json(bytes) => bytes,
        Body::Empty => &[],
        other => {
            return Err(Error::new(
                ErrorKind::InvalidRequest,
                format!("provider `{id}` (bedrock): cannot sign a body of {other:?}"),
            ));
        }
    };
    let mut headers = Vec::with_capacity(req.headers.len());
    for (name, value) in &req.headers {
        let value = value.to_str().map_err(|_| {
            Error::new(
                ErrorKind::InvalidRequest,
                format!("provider `{id}` (bedrock): header `{name}` is not text: cannot sign it"),
            )
        })?;
        headers.push((name.as_str(), value));
    }
    let identity = Credentials::new(
        access_key_id.as_str(),
        credential.expose(),
        session_token.as_ref().map(|t| t.expose_secret().to_owned()),
        None,
        "llm-failover",
    )
    .into();
    let cannot = |what: &dyn std::fmt::Display| {
        Error::new(
            ErrorKind::InvalidRequest,
            format!("provider `{id}` (bedrock): cannot sign the request: {what}"),
        )
    };
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(SERVICE)
        .time(at)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| cannot(&e))?
        .into();
    let signable = SignableRequest::new(
        req.method.as_str(),
        req.url.as_str(),
        headers.into_iter(),
        SignableBody::Bytes(body),
    )
    .map_err(|e| cannot(&e))?;
    let (instructions, _signature) = sign(signable, &params)
        .map_err(|e| cannot(&e))?
        .into_parts();
    let (signed, _params) = instructions.into_parts();
    for header in signed {
        let mut value = HeaderValue::from_str(header.value()).map_err(|_| {
            Error::new(
                ErrorKind::Auth,
                format!(
                    "provider `{id}` (bedrock): the credential holds characters a header \
                     cannot carry (`{}`)",
                    header.name()
                ),
            )
        })?;
        value.set_sensitive(header.sensitive() || header.name() == "authorization");
        let name = HeaderName::from_bytes(header.name().as_bytes())
            .map_err(|_| cannot(&format_args!("`{}` is not a header name", header.name())))?;
        req.headers.insert(name, value);
    }
    Ok(req)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// The example request of AWS's SigV4 test suite's shape: the headers added, the scope
    /// of the region and service, the secrets never shown.
    #[test]
    fn adds_the_signature_headers_with_the_scope() {
        let url = "https://bedrock-runtime.us-east-1.amazonaws.com/model/m/converse"
            .parse()
            .unwrap();
        let req = HttpRequest::post_json(url, &serde_json::json!({"messages": []})).unwrap();
        let cred = Credential::aws(
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            Some("FwoGEXAMPLETOKEN".into()),
        );
        // 2015-08-30T12:36:00Z, the date of AWS's examples.
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_440_938_160);
        let id = ProviderId::new("bedrock");
        let signed = sign_request(req, &id, "us-east-1", Some(&cred), at).unwrap();
        assert_eq!(signed.headers["x-amz-date"], "20150830T123600Z");
        let auth = signed.headers["authorization"].to_str().unwrap();
        assert!(
            auth.starts_with(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/bedrock/aws4_request, \
             SignedHeaders=host;x-amz-date;x-amz-security-token, Signature="
            ),
            "{auth}"
        );
        assert!(signed.headers["authorization"].is_sensitive());
        assert!(signed.headers["x-amz-security-token"].is_sensitive());
        assert_eq!(signed.headers["x-amz-security-token"], "FwoGEXAMPLETOKEN");
        let shown = format!("{signed:?}");
        assert!(
            !shown.contains("wJalr") && !shown.contains("FwoG"),
            "{shown}"
        );
    }

    /// No credential, or a plain key: `Auth`, naming what is missing, never the key.
    #[test]
    fn refuses_credentials_without_aws_parts() {
        let url: url::Url = "https://bedrock-runtime.us-east-1.amazonaws.com/"
            .parse()
            .unwrap();
        let id = ProviderId::new("bedrock");
        let req = || HttpRequest::post_json(url.clone(), &serde_json::json!({})).unwrap();
        let err = sign_request(req(), &id, "us-east-1", None, SystemTime::UNIX_EPOCH).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Auth);
        assert!(err.message().contains("no credential"), "{err}");
        let key = Credential::new("sk-not-aws");
        let err =
            sign_request(req(), &id, "us-east-1", Some(&key), SystemTime::UNIX_EPOCH).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Auth);
        assert!(err.message().contains("access key id"), "{err}");
        assert!(!err.message().contains("sk-not-aws"));
    }
}
