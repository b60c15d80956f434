//! The Google service account a Vertex AI provider accepts: the JSON key file Google issues
//! for it (`type: service_account`, `project_id`, `private_key_id`, `private_key`,
//! `client_email`, `token_uri`, …), whose private key signs the JWT a client exchanges for an
//! access token at the provider's token endpoint.
//!
//! Unless a key file is configured, every Vertex provider uses the emulator's demo key — a
//! 2048-bit RSA key generated once with `openssl genpkey` for this crate and published in its
//! source, like [`DEFAULT_KEY`](super::DEFAULT_KEY): it guards nothing and must never be
//! trusted anywhere else — with a key id and a service-account email of its own, derived from
//! the prefix. (ring, which verifies the signatures, cannot make RSA keys, and a key made at
//! start would cost a pure-Rust big-number crate and seconds of a debug build.)

use std::fmt;
use std::path::Path;

use serde_json::{Value, json};

use crate::text::{fnv1a, mix};

/// The project a Vertex provider serves unless configured otherwise.
pub const DEFAULT_PROJECT: &str = "emulator-project";

/// The scope an access token for Vertex AI must carry.
pub const CLOUD_PLATFORM_SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// Google's token endpoint: the audience a service account's JWT names
/// (developers.google.com/identity/protocols/oauth2/service-account, "Create a JWT": "When
/// making an access token request this value is always <https://oauth2.googleapis.com/token>").
pub const GOOGLE_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";

/// The demo key (PKCS#8 PEM). Public: it protects nothing.
const DEMO_PRIVATE_KEY: &str = "\
-----BEGIN PRIVATE KEY-----\n\
MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQCkbkIRVHT0+rG1\n\
Od6zYvm2aC3fdue75oVlNeEjEKl/0WZnBfzriNwOIzqmNMtz6y48v0gEoOAdTrCl\n\
7oyZnmgXJxxg1AsomMSuM+6UiPWszU9XWRKzWwJNyQYzkvNn11yvjpX1EC2X7Ofg\n\
MN0ZSCvDAOMmC6Q076NgSWk1Ht+FUaoE2m/eNRQM47XeQJLDvzNq853rNdrh/Mc0\n\
7BBgEpNk78+iQoqN62JZ0v4Oj1MZbfkKk5me4n4n/6ZilDvCAnQuaQ1TvNuda3Bo\n\
UiS0EVgPiCEHMyuMlqCaz7QYspR8bpbXMjZm6n7xLmtfNk8KU7wLlHnhl+HxEb/d\n\
MKk6c0SZAgMBAAECggEADR4DHP8N7/ueSNjnnkuhZFbp/utNSAD3KAhs8AdMoEbY\n\
CpSwlSkXNfUDQR5R0yriJsQzJnRfgJMGFkyiEICxqNQsyEAuLjRGr2dy60xEPf9o\n\
ao1PZ7m1RLeKTDu3OXPVn+cp6RF786RZaJn5T2KhpBYqaL7xv+vUjpI4p31Ro0DM\n\
YBtRrpgWUhtpg+pyi8B2YKjDwNNusrCmkUK2n/6G05N1NHN7ffMQRBS15aghpZbA\n\
oZMUaF0HVmRpPxxHz7YP8XGa22tsWcY7x6BlcbANwxM1jdQSuPSEF1vo+1SG4KsW\n\
GkKmFyRy8+wlFj5Knuypmixz1hw64VD4+drcJ/YSQQKBgQDXFrJ27rqtEeruo2n4\n\
rmJv/3JvkIcNQr18CK3KJDtL1Y8/o2gEF7LO7FBt/CBWuBOeJAkrdz945w6pS7L6\n\
Un2EFNfyVUNboDxyKDpMI80M3uhdjf5fVFpc72j2pD1HV+FwNDabhddfN2BPrraj\n\
MRBqOlUnZisoh2MOCjgF3ssX2QKBgQDDtN/1wcYL6y/ur7pYJBzpXNHy01mrLLYK\n\
sfYqVmXEVRy3+wyxkUDrjzMg/kCG3Q7dAvFhzMJXvyzz7oMlnHOjpTiuxzPsq+PP\n\
OCVbai1w+q1hy/05m7EgGIWXG+QCXk1lcWYNT4DQsFgCDIxidOAD8F/way1QWRim\n\
EYiDABRawQKBgAa4rtsImszNwomykZ0z1d+qG+lgmtfPPhyiKMwoVbII+nECqj12\n\
gB/3QowtVNVg6zwF5EN3doRQtCSWOQGZklKOVDE+eNxkJX9rwmaet8mvLZO+3DQe\n\
brR4xs7uUvvnwyO+ffZeOFzBXkEfNJXk8p5fNEoG51Jc6LuHljiYvcABAoGAbC2V\n\
BoF/+aKdMjDMrl/34z69hp4xGJ90WOEaEzkCs83gPAp3b8e8vPjA6GHiRSn4R06T\n\
It5OJra0IHoc4DNk8HYpqOLP3uj82dRNQgSk7aiDImXhqXBYLkefwHFYTb7WxVYz\n\
dPQXXkO7whYxm1LDaSn7vidgOuOk7lcOwGrQ1YECgYEAhtd1u0y7tT1sL+X4U1qM\n\
gr7p4psY/QnNviKv8ka5dZPjVYVrZduV4Je+nI4APE1mjLkJdrNrtfzFAPDoA/Kl\n\
sgWvahHGhdS8j43EzXgmtkcpK7v0o0duRRpvdzoLJDpRf2//tv/p0Zs3CW68EKMj\n\
OsvKIpTZPwYzNO0jyE0a+fs=\n\
-----END PRIVATE KEY-----\n\
";

/// A Google service-account key, as the JSON key file Google issues holds it.
///
/// `Debug` leaves the private key out.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> std::io::Result<()> {
/// let emu = llm_failover_emulator::Emulator::builder().vertex("vertex").start().await?;
/// let key = emu.service_account_key("vertex");
/// assert_eq!(key.project_id, "emulator-project");
/// assert_eq!(key.client_email, "vertex@emulator-project.iam.gserviceaccount.com");
/// assert!(key.private_key.starts_with("-----BEGIN PRIVATE KEY-----"));
/// assert_eq!(key.token_uri, format!("{}/vertex/token", emu.url()));
/// // What `google.oauth2.service_account.Credentials.from_service_account_file` reads:
/// let file: serde_json::Value = serde_json::from_str(&key.to_json()).unwrap();
/// assert_eq!(file["type"], "service_account");
/// # Ok(()) }
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServiceAccountKey {
    /// The project (`emulator-project` unless configured).
    pub project_id: String,
    /// The key's id: a JWT's `kid`.
    pub private_key_id: String,
    /// The RSA private key, PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`).
    pub private_key: String,
    /// The service account's email: a JWT's `iss`.
    pub client_email: String,
    /// The service account's numeric id.
    pub client_id: String,
    /// Where tokens are fetched: the emulator's token endpoint, `…/{prefix}/token`.
    pub token_uri: String,
}

impl fmt::Debug for ServiceAccountKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceAccountKey")
            .field("project_id", &self.project_id)
            .field("private_key_id", &self.private_key_id)
            .field("private_key", &"…")
            .field("client_email", &self.client_email)
            .field("client_id", &self.client_id)
            .field("token_uri", &self.token_uri)
            .finish()
    }
}

impl ServiceAccountKey {
    /// The key file Google issues (what `gcloud iam service-accounts keys create` writes and
    /// `google.oauth2.service_account.Credentials.from_service_account_file` reads).
    pub fn to_json(&self) -> String {
        let email = &self.client_email;
        let cert = format!(
            "https://www.googleapis.com/robot/v1/metadata/x509/{}",
            email.replace('@', "%40")
        );
        let v = json!({
            "type": "service_account",
            "project_id": self.project_id,
            "private_key_id": self.private_key_id,
            "private_key": self.private_key,
            "client_email": email,
            "client_id": self.client_id,
            "auth_uri": "https://accounts.google.com/o/oauth2/auth",
            "token_uri": self.token_uri,
            "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
            "client_x509_cert_url": cert,
            "universe_domain": "googleapis.com",
        });
        serde_json::to_string_pretty(&v).unwrap_or_default()
    }

    /// Reads a key file's fields (`private_key`, `client_email` required; the project, key id
    /// and client id when present).
    ///
    /// # Errors
    ///
    /// Not JSON, not a `service_account` key, or a required field missing.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let field = |name: &str| v.get(name).and_then(Value::as_str).map(str::to_owned);
        if field("type").as_deref() != Some("service_account") {
            return Err("not a service-account key (\"type\": \"service_account\")".to_owned());
        }
        let required = |name: &str| field(name).ok_or_else(|| format!("no \"{name}\""));
        Ok(ServiceAccountKey {
            private_key: required("private_key")?,
            client_email: required("client_email")?,
            project_id: field("project_id").unwrap_or_default(),
            private_key_id: field("private_key_id").unwrap_or_default(),
            client_id: field("client_id").unwrap_or_default(),
            token_uri: field("token_uri").unwrap_or_else(|| GOOGLE_TOKEN_URI.to_owned()),
        })
    }
}

/// The key of a Vertex provider under `prefix` serving `project`: read from `file` when one
/// is configured (its project then the file's unless `project` is set), else the demo key.
pub(crate) fn service_account(
    prefix: &str,
    project: Option<&str>,
    file: Option<&Path>,
) -> Result<ServiceAccountKey, String> {
    if let Some(path) = file {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut key =
            ServiceAccountKey::from_json(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        if let Some(p) = project {
            p.clone_into(&mut key.project_id);
        }
        if key.project_id.is_empty() {
            DEFAULT_PROJECT.clone_into(&mut key.project_id);
        }
        return Ok(key);
    }
    let project = project.unwrap_or(DEFAULT_PROJECT);
    let seed = mix(fnv1a(b"service account") ^ fnv1a(prefix.as_bytes()).rotate_left(13));
    let key_id: String = (0..5)
        .scan(seed, |x, _| {
            *x = mix(*x);
            Some(format!("{:08x}", *x as u32))
        })
        .collect();
    Ok(ServiceAccountKey {
        project_id: project.to_owned(),
        private_key_id: key_id,
        private_key: DEMO_PRIVATE_KEY.to_owned(),
        client_email: format!(
            "{}@{project}.iam.gserviceaccount.com",
            prefix.replace('_', "-")
        ),
        client_id: format!("1{:020}", mix(seed) % 10_000_000_000_000_000_000),
        token_uri: GOOGLE_TOKEN_URI.to_owned(),
    })
}

/// Why `project` is no Google project id, if it is not (6 to 30 lower-case letters, digits
/// and hyphens, starting with a letter and not ending with a hyphen).
pub(crate) fn check_project(project: &str) -> Result<(), String> {
    let ok = (6..=30).contains(&project.len())
        && project.starts_with(|c: char| c.is_ascii_lowercase())
        && !project.ends_with('-')
        && project
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{project:?} is no Google project id (6 to 30 of a-z, 0-9 and -, starting with a \
             letter)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_keys_differ_by_prefix_and_round_trip_through_json() {
        let a = service_account("vertex", None, None).unwrap();
        let b = service_account("vertex_2", Some("my-project-1"), None).unwrap();
        assert_eq!(a.private_key_id.len(), 40);
        assert_ne!(a.private_key_id, b.private_key_id);
        assert_eq!(
            b.client_email,
            "vertex-2@my-project-1.iam.gserviceaccount.com"
        );
        assert_eq!(a.client_id.len(), 21);
        assert_eq!(ServiceAccountKey::from_json(&a.to_json()).unwrap(), a);
        assert!(ServiceAccountKey::from_json("{}").is_err());
        assert!(!format!("{a:?}").contains("PRIVATE KEY"));
    }

    #[test]
    fn project_ids_have_googles_shape() {
        assert!(check_project(DEFAULT_PROJECT).is_ok());
        for bad in [
            "short",
            "Upper-case",
            "1starts-with-digit",
            "ends-with-",
            "has_underscore",
        ] {
            assert!(check_project(bad).is_err(), "{bad}");
        }
    }
}
