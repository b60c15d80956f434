//! A Google service account's JSON key, as the key file Google issues holds it
//! (`gcloud iam service-accounts keys create`): what signs the JWT exchanged for an access
//! token.
//!
//! Nothing here ever shows the key: messages say which field is missing or malformed, never a
//! value, and [`ServiceAccount`]'s `Debug` leaves the private key out.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ring::signature::RsaKeyPair;
use serde_json::Value;
use url::Url;

/// Google's token endpoint, where a key file without `token_uri` sends its JWT
/// (developers.google.com/identity/protocols/oauth2/service-account, "Create a JWT").
pub(crate) const GOOGLE_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";

/// A parsed service-account key: who it is, where its tokens come from, and the RSA key that
/// signs its JWTs.
pub(crate) struct ServiceAccount {
    /// The service account's email: the JWT's `iss`.
    pub(crate) client_email: String,
    /// The key's id: the JWT header's `kid` (when the file has one).
    pub(crate) private_key_id: Option<String>,
    /// Where the JWT is exchanged for an access token: the JWT's `aud`.
    pub(crate) token_uri: Url,
    pub(crate) signer: RsaKeyPair,
}

impl fmt::Debug for ServiceAccount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceAccount")
            .field("client_email", &self.client_email)
            .field("token_uri", &self.token_uri.as_str())
            .finish_non_exhaustive()
    }
}

/// Whether a credential's text is a JSON key rather than an access token (which never starts
/// with `{`).
pub(crate) fn is_key_json(text: &str) -> bool {
    text.trim_start().starts_with('{')
}

impl ServiceAccount {
    /// Reads a key file's text.
    ///
    /// # Errors
    ///
    /// What is wrong, in words that never quote the file: not JSON (with the line and
    /// column), not of `"type": "service_account"`, a field missing, a private key that is
    /// not an RSA key in PKCS#8 PEM, a `token_uri` that is not an `https` URL (or `http` to
    /// a loopback host).
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| {
            format!(
                "is not JSON (line {}, column {}): a service account's key file is",
                e.line(),
                e.column()
            )
        })?;
        let field = |name: &str| v.get(name).and_then(Value::as_str);
        if field("type") != Some("service_account") {
            return Err("is not a service-account key: its \"type\" is not \
                        \"service_account\" (download a JSON key of the service account)"
                .to_owned());
        }
        let required = |name: &str| {
            field(name)
                .filter(|s| !s.trim().is_empty())
                .ok_or_else(|| format!("has no \"{name}\": not a whole service-account key"))
        };
        let client_email = required("client_email")?.to_owned();
        let der = pem_der(required("private_key")?)?;
        let signer = RsaKeyPair::from_pkcs8(&der)
            .map_err(|e| format!("holds a \"private_key\" that is no RSA key in PKCS#8 ({e})"))?;
        let token_uri = match field("token_uri") {
            None => GOOGLE_TOKEN_URI.to_owned(),
            Some(uri) => uri.to_owned(),
        };
        let token_uri = Url::parse(&token_uri).ok().filter(allowed).ok_or_else(|| {
            "holds a \"token_uri\" that is not an https URL (or http to this machine)".to_owned()
        })?;
        Ok(ServiceAccount {
            client_email,
            private_key_id: field("private_key_id")
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
            token_uri,
            signer,
        })
    }
}

/// `https`, or `http` to a loopback host (an emulator, a local proxy): a JWT never crosses a
/// network in the clear.
fn allowed(url: &Url) -> bool {
    match url.scheme() {
        "https" => true,
        "http" => match url.host() {
            Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            None => false,
        },
        _ => false,
    }
}

/// The DER bytes of a PKCS#8 PEM block (`-----BEGIN PRIVATE KEY-----`, as Google issues keys).
fn pem_der(pem: &str) -> Result<Vec<u8>, String> {
    let not_pem = || {
        "holds a \"private_key\" that is not a PKCS#8 PEM key (\"-----BEGIN PRIVATE \
         KEY-----\", as Google issues them)"
            .to_owned()
    };
    let body = pem
        .trim()
        .strip_prefix("-----BEGIN PRIVATE KEY-----")
        .and_then(|rest| rest.trim_end().strip_suffix("-----END PRIVATE KEY-----"))
        .ok_or_else(not_pem)?;
    let b64: String = body.chars().filter(|c| !c.is_whitespace()).collect();
    STANDARD.decode(b64).map_err(|_| not_pem())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The emulator's published demo key (llm-failover-emulator, config/google.rs): it guards
    /// nothing.
    pub(crate) const DEMO_KEY: &str = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQCkbkIRVHT0+rG1\nOd6zYvm2aC3fdue75oVlNeEjEKl/0WZnBfzriNwOIzqmNMtz6y48v0gEoOAdTrCl\n7oyZnmgXJxxg1AsomMSuM+6UiPWszU9XWRKzWwJNyQYzkvNn11yvjpX1EC2X7Ofg\nMN0ZSCvDAOMmC6Q076NgSWk1Ht+FUaoE2m/eNRQM47XeQJLDvzNq853rNdrh/Mc0\n7BBgEpNk78+iQoqN62JZ0v4Oj1MZbfkKk5me4n4n/6ZilDvCAnQuaQ1TvNuda3Bo\nUiS0EVgPiCEHMyuMlqCaz7QYspR8bpbXMjZm6n7xLmtfNk8KU7wLlHnhl+HxEb/d\nMKk6c0SZAgMBAAECggEADR4DHP8N7/ueSNjnnkuhZFbp/utNSAD3KAhs8AdMoEbY\nCpSwlSkXNfUDQR5R0yriJsQzJnRfgJMGFkyiEICxqNQsyEAuLjRGr2dy60xEPf9o\nao1PZ7m1RLeKTDu3OXPVn+cp6RF786RZaJn5T2KhpBYqaL7xv+vUjpI4p31Ro0DM\nYBtRrpgWUhtpg+pyi8B2YKjDwNNusrCmkUK2n/6G05N1NHN7ffMQRBS15aghpZbA\noZMUaF0HVmRpPxxHz7YP8XGa22tsWcY7x6BlcbANwxM1jdQSuPSEF1vo+1SG4KsW\nGkKmFyRy8+wlFj5Knuypmixz1hw64VD4+drcJ/YSQQKBgQDXFrJ27rqtEeruo2n4\nrmJv/3JvkIcNQr18CK3KJDtL1Y8/o2gEF7LO7FBt/CBWuBOeJAkrdz945w6pS7L6\nUn2EFNfyVUNboDxyKDpMI80M3uhdjf5fVFpc72j2pD1HV+FwNDabhddfN2BPrraj\nMRBqOlUnZisoh2MOCjgF3ssX2QKBgQDDtN/1wcYL6y/ur7pYJBzpXNHy01mrLLYK\nsfYqVmXEVRy3+wyxkUDrjzMg/kCG3Q7dAvFhzMJXvyzz7oMlnHOjpTiuxzPsq+PP\nOCVbai1w+q1hy/05m7EgGIWXG+QCXk1lcWYNT4DQsFgCDIxidOAD8F/way1QWRim\nEYiDABRawQKBgAa4rtsImszNwomykZ0z1d+qG+lgmtfPPhyiKMwoVbII+nECqj12\ngB/3QowtVNVg6zwF5EN3doRQtCSWOQGZklKOVDE+eNxkJX9rwmaet8mvLZO+3DQe\nbrR4xs7uUvvnwyO+ffZeOFzBXkEfNJXk8p5fNEoG51Jc6LuHljiYvcABAoGAbC2V\nBoF/+aKdMjDMrl/34z69hp4xGJ90WOEaEzkCs83gPAp3b8e8vPjA6GHiRSn4R06T\nIt5OJra0IHoc4DNk8HYpqOLP3uj82dRNQgSk7aiDImXhqXBYLkefwHFYTb7WxVYz\ndPQXXkO7whYxm1LDaSn7vidgOuOk7lcOwGrQ1YECgYEAhtd1u0y7tT1sL+X4U1qM\ngr7p4psY/QnNviKv8ka5dZPjVYVrZduV4Je+nI4APE1mjLkJdrNrtfzFAPDoA/Kl\nsgWvahHGhdS8j43EzXgmtkcpK7v0o0duRRpvdzoLJDpRf2//tv/p0Zs3CW68EKMj\nOsvKIpTZPwYzNO0jyE0a+fs=\n-----END PRIVATE KEY-----\n";

    /// A key file of the demo key, `token_uri` as given.
    pub(crate) fn key_json(token_uri: &str) -> String {
        serde_json::json!({
            "type": "service_account",
            "project_id": "emulator-project",
            "private_key_id": "0123abcd",
            "private_key": DEMO_KEY,
            "client_email": "vertex@emulator-project.iam.gserviceaccount.com",
            "token_uri": token_uri,
        })
        .to_string()
    }

    #[test]
    fn reads_a_key_file_and_never_shows_the_key() {
        let sa = ServiceAccount::parse(&key_json("https://oauth2.googleapis.com/token")).unwrap();
        assert_eq!(
            sa.client_email,
            "vertex@emulator-project.iam.gserviceaccount.com"
        );
        assert_eq!(sa.private_key_id.as_deref(), Some("0123abcd"));
        assert_eq!(sa.token_uri.as_str(), GOOGLE_TOKEN_URI);
        assert!(!format!("{sa:?}").contains("MIIE"));
    }

    #[test]
    fn says_what_is_wrong_with_a_key_file_without_quoting_it() {
        let mut no_type: Value = serde_json::from_str(&key_json(GOOGLE_TOKEN_URI)).unwrap();
        no_type["type"] = "authorized_user".into();
        let mut no_email = no_type.clone();
        no_email["type"] = "service_account".into();
        no_email.as_object_mut().unwrap().remove("client_email");
        let mut bad_key = no_email.clone();
        bad_key["client_email"] = "a@b".into();
        bad_key["private_key"] =
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----".into();
        let mut rsa_pem = bad_key.clone();
        rsa_pem["private_key"] = DEMO_KEY.replace("PRIVATE KEY", "RSA PRIVATE KEY").into();
        let mut plain_http = bad_key.clone();
        plain_http["private_key"] = DEMO_KEY.into();
        plain_http["token_uri"] = "http://tokens.example.com/token".into();
        let table = [
            (
                "sk-not-json-SECRET".to_owned(),
                "is not JSON (line 1, column 1)",
            ),
            (no_type.to_string(), "is not a service-account key"),
            (no_email.to_string(), "has no \"client_email\""),
            (bad_key.to_string(), "no RSA key in PKCS#8"),
            (rsa_pem.to_string(), "not a PKCS#8 PEM key"),
            (
                plain_http.to_string(),
                "\"token_uri\" that is not an https URL",
            ),
        ];
        for (text, want) in table {
            let err = ServiceAccount::parse(&text).unwrap_err();
            assert!(err.contains(want), "{want}: {err}");
            assert!(!err.contains("SECRET") && !err.contains("AAAA"), "{err}");
        }
        let loopback = key_json("http://127.0.0.1:4010/vertex/token");
        assert!(ServiceAccount::parse(&loopback).is_ok());
    }
}
