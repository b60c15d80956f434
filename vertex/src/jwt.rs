//! The JWT a service account signs to ask for an access token: OAuth 2's JWT bearer grant
//! (RFC 7523, section 2.1) as Google's token endpoint takes it
//! (developers.google.com/identity/protocols/oauth2/service-account, "Preparing to make an
//! authorized API call"): header `{"alg": "RS256", "typ": "JWT", "kid"}`, claims `iss` (the
//! service account's email), `scope`, `aud` (the key file's `token_uri`), `iat` and `exp` (an
//! hour later: the longest Google takes), signed with RSASSA-PKCS1-v1_5 and SHA-256 (ring).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::RSA_PKCS1_SHA256;
use serde::Serialize;

use crate::key::ServiceAccount;

/// The scope Vertex AI needs.
pub(crate) const CLOUD_PLATFORM: &str = "https://www.googleapis.com/auth/cloud-platform";

/// The grant type of a JWT exchanged for a token (RFC 7523, section 2.1).
pub(crate) const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// How long an assertion is valid: the hour Google allows at most.
pub(crate) const ASSERTION_LIFETIME: Duration = Duration::from_secs(3600);

/// The JWT's claims.
#[derive(Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Claims<'a> {
    pub(crate) iss: &'a str,
    pub(crate) scope: &'a str,
    pub(crate) aud: &'a str,
    pub(crate) iat: u64,
    pub(crate) exp: u64,
}

/// The claims `account` states at wall-clock time `at`.
pub(crate) fn claims(account: &ServiceAccount, at: SystemTime) -> Claims<'_> {
    let iat = at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    Claims {
        iss: &account.client_email,
        scope: CLOUD_PLATFORM,
        aud: account.token_uri.as_str(),
        iat,
        exp: iat + ASSERTION_LIFETIME.as_secs(),
    }
}

#[derive(Serialize)]
struct Header<'a> {
    alg: &'static str,
    typ: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    kid: Option<&'a str>,
}

/// The signed assertion (`header.claims.signature`, each base64url without padding).
///
/// # Errors
///
/// When ring cannot sign (it does not happen with a key it parsed): the reason, no key.
pub(crate) fn assertion(account: &ServiceAccount, at: SystemTime) -> Result<String, String> {
    let header = Header {
        alg: "RS256",
        typ: "JWT",
        kid: account.private_key_id.as_deref(),
    };
    let part = |v: Vec<u8>| URL_SAFE_NO_PAD.encode(v);
    let json = |e: serde_json::Error| format!("the JWT could not be written: {e}");
    let head = part(serde_json::to_vec(&header).map_err(json)?);
    let body = part(serde_json::to_vec(&claims(account, at)).map_err(json)?);
    let signed = format!("{head}.{body}");
    let mut signature = vec![0; account.signer.public().modulus_len()];
    account
        .signer
        .sign(
            &RSA_PKCS1_SHA256,
            &SystemRandom::new(),
            signed.as_bytes(),
            &mut signature,
        )
        .map_err(|_| "the service account's key could not sign the JWT".to_owned())?;
    Ok(format!("{signed}.{}", part(signature)))
}

#[cfg(test)]
mod tests {
    use ring::signature::{KeyPair as _, RSA_PKCS1_2048_8192_SHA256, UnparsedPublicKey};

    use super::*;
    use crate::key::tests::key_json;

    fn account() -> ServiceAccount {
        ServiceAccount::parse(&key_json("http://127.0.0.1:4010/vertex/token")).unwrap()
    }

    #[test]
    fn the_claims_are_googles_for_an_hour() {
        let sa = account();
        let at = UNIX_EPOCH + Duration::from_secs(1_767_323_045);
        assert_eq!(
            claims(&sa, at),
            Claims {
                iss: "vertex@emulator-project.iam.gserviceaccount.com",
                scope: "https://www.googleapis.com/auth/cloud-platform",
                aud: "http://127.0.0.1:4010/vertex/token",
                iat: 1_767_323_045,
                exp: 1_767_323_045 + 3600,
            }
        );
    }

    #[test]
    fn the_assertion_is_an_rs256_jwt_the_public_key_verifies() {
        let sa = account();
        let at = UNIX_EPOCH + Duration::from_secs(1_767_323_045);
        let jwt = assertion(&sa, at).unwrap();
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        let decode = |p: &str| URL_SAFE_NO_PAD.decode(p).unwrap();
        let header: serde_json::Value = serde_json::from_slice(&decode(parts[0])).unwrap();
        assert_eq!(
            header,
            serde_json::json!({"alg": "RS256", "typ": "JWT", "kid": "0123abcd"})
        );
        let claims: serde_json::Value = serde_json::from_slice(&decode(parts[1])).unwrap();
        assert_eq!(claims["exp"], 1_767_323_045 + 3600);
        let public = sa.signer.public_key().as_ref().to_vec();
        let signed = format!("{}.{}", parts[0], parts[1]);
        UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, public)
            .verify(signed.as_bytes(), &decode(parts[2]))
            .expect("a valid signature");
    }
}
