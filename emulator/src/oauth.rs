//! OAuth 2 for Vertex AI: a service account's JWT exchanged for an access token (the JWT
//! bearer grant of RFC 7523, as Google's token endpoint serves it), and the tokens a Vertex
//! provider then accepts in `Authorization: Bearer`.
//!
//! The assertion is checked as developers.google.com/identity/protocols/oauth2/service-account
//! describes it ("Preparing to make an authorized API call", "Addendum: … JWT"): a JWS of
//! three base64url parts, header `{"alg": "RS256", "typ": "JWT", "kid"}`, claims `iss` (the
//! service account's email), `scope` (space-separated; Vertex AI needs `cloud-platform`),
//! `aud` (`https://oauth2.googleapis.com/token`; the key file's `token_uri` — the emulator's
//! own endpoint — is taken too, as the clients that name it expect), `iat` and `exp` (at most
//! an hour apart, `exp` not passed), signed RS256 (RSASSA-PKCS1-v1_5 with SHA-256, ring
//! verifying it) by the key whose public half the provider holds. Refusals are Google's:
//! `invalid_grant` with `Invalid JWT Signature.`, `Invalid grant: account not found`,
//! `Invalid JWT: Failed audience check…`, `Invalid JWT: Token must be a short-lived token (60
//! minutes) and in a reasonable timeframe…`, and `invalid_scope`.
//!
//! An access token lives [`TOKEN_LIFETIME`] on the emulator's clock (its `TimeSource`), as
//! Google's answer `{"access_token", "expires_in": 3599, "token_type": "Bearer"}` says.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::signature::{self, KeyPair as _, RsaKeyPair, UnparsedPublicKey};
use serde_json::Value;

use crate::config::{CLOUD_PLATFORM_SCOPE, GOOGLE_TOKEN_URI, ServiceAccountKey};
use crate::text::new_id;

/// The tokens' map, a panic elsewhere notwithstanding (as `state::lock`, which imports this
/// module: not imported back).
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How long an access token lasts: Google answers `"expires_in": 3599`.
pub(crate) const TOKEN_LIFETIME: Duration = Duration::from_secs(3599);

/// The longest an assertion may live (`exp - iat`): an hour.
const MAX_ASSERTION: u64 = 3600;

/// How far in the future an assertion's `iat` may be (clock skew).
const SKEW: u64 = 300;

/// The JWT bearer grant type (RFC 7523, section 2.1).
pub(crate) const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// A refused grant: the OAuth `error` code and Google's `error_description`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) error: &'static str,
    pub(crate) description: String,
}

impl Refusal {
    fn grant(description: impl Into<String>) -> Self {
        Refusal {
            error: "invalid_grant",
            description: description.into(),
        }
    }
}

/// What a bearer token is, now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    Valid,
    Expired,
    Unknown,
}

/// A Vertex provider's service account: its key, the public half that verifies its JWTs,
/// and the access tokens issued (each with its expiry on the emulator's wall clock).
#[derive(Debug)]
pub(crate) struct Identity {
    key: ServiceAccountKey,
    public_key: Vec<u8>,
    tokens: Mutex<HashMap<String, SystemTime>>,
}

/// A PEM block's bytes (any label; PKCS#8 is checked by ring).
fn pem_der(pem: &str) -> Result<Vec<u8>, String> {
    if !pem.contains("-----BEGIN PRIVATE KEY-----") {
        return Err(
            "private_key is not a PKCS#8 PEM key (\"-----BEGIN PRIVATE KEY-----\", as Google \
             issues them)"
                .to_owned(),
        );
    }
    let b64: String = pem
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .flat_map(|l| l.trim().chars())
        .collect();
    STANDARD
        .decode(b64)
        .map_err(|e| format!("private_key is not base64 PEM: {e}"))
}

impl Identity {
    /// The identity of `key`.
    ///
    /// # Errors
    ///
    /// The private key is not an RSA key in PKCS#8 PEM of 2048 bits or more.
    pub(crate) fn new(key: ServiceAccountKey) -> Result<Self, String> {
        let der = pem_der(&key.private_key)?;
        let pair = RsaKeyPair::from_pkcs8(&der)
            .map_err(|e| format!("private_key is no RSA key ring accepts: {e}"))?;
        Ok(Identity {
            public_key: pair.public_key().as_ref().to_vec(),
            key,
            tokens: Mutex::new(HashMap::new()),
        })
    }

    pub(crate) fn key(&self) -> &ServiceAccountKey {
        &self.key
    }

    /// Exchanges `assertion` for an access token, `own_uri` (the token endpoint as it was
    /// called) being an audience besides Google's.
    pub(crate) fn grant(
        &self,
        assertion: &str,
        own_uri: &str,
        now: SystemTime,
    ) -> Result<String, Refusal> {
        self.verify(assertion, own_uri, now)?;
        Ok(self.issue(now))
    }

    /// A new access token valid for [`TOKEN_LIFETIME`] from `now`.
    pub(crate) fn issue(&self, now: SystemTime) -> String {
        let token = new_id("ya29.c.", 120);
        let mut tokens = lock(&self.tokens);
        // Expired tokens are kept a day (to answer ACCESS_TOKEN_EXPIRED), then forgotten.
        let day = Duration::from_secs(86_400);
        tokens.retain(|_, exp| exp.checked_add(day).is_none_or(|t| t > now));
        tokens.insert(token.clone(), now + TOKEN_LIFETIME);
        token
    }

    /// Whether `token` is one of ours and still valid at `now`.
    pub(crate) fn check(&self, token: &str, now: SystemTime) -> Access {
        match lock(&self.tokens).get(token) {
            Some(exp) if now < *exp => Access::Valid,
            Some(_) => Access::Expired,
            None => Access::Unknown,
        }
    }

    fn verify(&self, assertion: &str, own_uri: &str, now: SystemTime) -> Result<(), Refusal> {
        let malformed = || Refusal::grant("Invalid JWT: the assertion is not a signed JWT");
        let mut parts = assertion.split('.');
        let (Some(head), Some(body), Some(sig), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(malformed());
        };
        let decode = |part: &str| URL_SAFE_NO_PAD.decode(part.trim_end_matches('='));
        let json = |part: &str| -> Option<Value> {
            decode(part)
                .ok()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                .filter(Value::is_object)
        };
        let (Some(header), Some(claims)) = (json(head), json(body)) else {
            return Err(malformed());
        };
        if header["alg"] != "RS256" {
            return Err(Refusal::grant(format!(
                "Invalid JWT: the signing algorithm must be RS256, not {}",
                header["alg"]
            )));
        }
        if claims["iss"].as_str() != Some(self.key.client_email.as_str()) {
            return Err(Refusal::grant("Invalid grant: account not found"));
        }
        let kid_ok = header
            .get("kid")
            .and_then(Value::as_str)
            .is_none_or(|kid| kid == self.key.private_key_id);
        let signed = &assertion[..head.len() + 1 + body.len()];
        let verified = decode(sig).is_ok_and(|sig| {
            UnparsedPublicKey::new(&signature::RSA_PKCS1_2048_8192_SHA256, &self.public_key)
                .verify(signed.as_bytes(), &sig)
                .is_ok()
        });
        if !(kid_ok && verified) {
            return Err(Refusal::grant("Invalid JWT Signature."));
        }
        let aud_ok = |a: &Value| a == GOOGLE_TOKEN_URI || a == own_uri;
        let audience = match &claims["aud"] {
            Value::Array(list) => list.iter().any(aud_ok),
            other => aud_ok(other),
        };
        if !audience {
            return Err(Refusal::grant(format!(
                "Invalid JWT: Failed audience check. The right audience is {GOOGLE_TOKEN_URI}"
            )));
        }
        let now = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let (iat, exp) = (claims["iat"].as_u64(), claims["exp"].as_u64());
        let timely = match (iat, exp) {
            (Some(iat), Some(exp)) => {
                exp > iat && exp - iat <= MAX_ASSERTION && exp > now && iat <= now + SKEW
            }
            _ => false,
        };
        if !timely {
            return Err(Refusal::grant(
                "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable \
                 timeframe. Check your iat and exp values in the JWT claim.",
            ));
        }
        let scopes = claims["scope"].as_str().unwrap_or_default();
        if !scopes.split_whitespace().any(|s| s == CLOUD_PLATFORM_SCOPE) {
            return Err(Refusal {
                error: "invalid_scope",
                description: "Invalid OAuth scope or ID token audience provided.".to_owned(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::google::service_account;
    use ring::rand::SystemRandom;
    use serde_json::json;

    const OWN: &str = "http://127.0.0.1:4010/vertex/token";

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn jwt(key: &ServiceAccountKey, header: Value, claims: Value) -> String {
        let part = |v: &Value| URL_SAFE_NO_PAD.encode(v.to_string());
        let signed = format!("{}.{}", part(&header), part(&claims));
        let pair = RsaKeyPair::from_pkcs8(&pem_der(&key.private_key).unwrap()).unwrap();
        let mut sig = vec![0; pair.public().modulus_len()];
        pair.sign(
            &signature::RSA_PKCS1_SHA256,
            &SystemRandom::new(),
            signed.as_bytes(),
            &mut sig,
        )
        .unwrap();
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(sig))
    }

    /// A JWT of `claims` whose claims were changed after signing (another scope).
    fn tampered(key: &ServiceAccountKey, claims: &Value) -> String {
        let signed = jwt(key, header(key), claims.clone());
        let mut parts: Vec<String> = signed.split('.').map(str::to_owned).collect();
        let mut changed = claims.clone();
        changed["scope"] = json!(format!("{CLOUD_PLATFORM_SCOPE} email"));
        parts[1] = URL_SAFE_NO_PAD.encode(changed.to_string());
        parts.join(".")
    }

    fn claims(key: &ServiceAccountKey, iat: u64) -> Value {
        json!({"iss": key.client_email, "scope": CLOUD_PLATFORM_SCOPE,
               "aud": GOOGLE_TOKEN_URI, "iat": iat, "exp": iat + 3600})
    }

    fn header(key: &ServiceAccountKey) -> Value {
        json!({"alg": "RS256", "typ": "JWT", "kid": key.private_key_id})
    }

    #[test]
    fn a_valid_assertion_gets_a_token_that_expires_on_the_emulators_clock() {
        let key = service_account("vertex", None, None).unwrap();
        let id = Identity::new(key.clone()).unwrap();
        let t0 = 1_767_323_045;
        let token = id
            .grant(&jwt(&key, header(&key), claims(&key, t0)), OWN, at(t0))
            .unwrap();
        assert!(token.starts_with("ya29."));
        assert_eq!(id.check(&token, at(t0 + 3598)), Access::Valid);
        assert_eq!(id.check(&token, at(t0 + 3599)), Access::Expired);
        assert_eq!(id.check("ya29.other", at(t0)), Access::Unknown);
        let mut own = claims(&key, t0);
        own["aud"] = json!(OWN);
        assert!(id.grant(&jwt(&key, header(&key), own), OWN, at(t0)).is_ok());
    }

    #[test]
    fn refuses_assertions_as_google_does() {
        let key = service_account("vertex", None, None).unwrap();
        let id = Identity::new(key.clone()).unwrap();
        let t0 = 1_767_323_045;
        let good = claims(&key, t0);
        let with = |k: &str, v: Value| {
            let mut c = good.clone();
            c[k] = v;
            c
        };
        let cases = [
            (
                jwt(&key, header(&key), with("aud", json!("https://x/token"))),
                "audience",
            ),
            (
                jwt(&key, header(&key), with("iat", json!(t0 - 7200))),
                "short-lived",
            ),
            (
                jwt(&key, header(&key), claims(&key, t0 - 3601)),
                "short-lived",
            ),
            (
                jwt(&key, header(&key), with("scope", json!("email"))),
                "invalid_scope",
            ),
            (
                jwt(&key, header(&key), with("iss", json!("x@y"))),
                "account not found",
            ),
            (
                jwt(
                    &key,
                    json!({"alg": "RS256", "kid": "another"}),
                    good.clone(),
                ),
                "Invalid JWT Signature.",
            ),
            (
                format!("{}x", jwt(&key, header(&key), good.clone())),
                "Invalid JWT Signature.",
            ),
            (tampered(&key, &good), "Invalid JWT Signature."),
            ("not.a-jwt".to_owned(), "not a signed JWT"),
        ];
        for (assertion, needle) in cases {
            let r = id.grant(&assertion, OWN, at(t0)).unwrap_err();
            assert!(
                r.description.contains(needle) || r.error == needle,
                "{needle}: {r:?}"
            );
        }
    }
}
