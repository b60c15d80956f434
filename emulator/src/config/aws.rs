//! The AWS credentials a Bedrock provider accepts: an access key id and its secret (plus a
//! session token, when configured), and the region requests are signed for.
//!
//! Unless configured, the key id and the secret are derived from the provider's prefix: the
//! same configuration always gets the same credentials, two Bedrock providers get different
//! ones, and a test reads them with
//! [`Emulator::aws_credentials`](crate::Emulator::aws_credentials).

use std::fmt;

use crate::text::{fnv1a, mix};

/// The region a Bedrock provider signs for unless configured otherwise.
pub const DEFAULT_REGION: &str = "us-east-1";

/// What a client of a Bedrock provider signs its requests with (AWS Signature Version 4,
/// service `bedrock`).
///
/// `Debug` shows the key id and the region only.
///
/// # Examples
///
/// ```
/// use llm_failover_emulator::ProviderConfig;
///
/// let creds = ProviderConfig::bedrock("bedrock").aws_credentials();
/// assert!(creds.access_key_id.starts_with("AKIA") && creds.access_key_id.len() == 20);
/// assert_eq!(creds.secret_access_key.len(), 40);
/// assert_eq!((creds.session_token, creds.region.as_str()), (None, "us-east-1"));
///
/// let temporary = ProviderConfig::bedrock("bedrock")
///     .with_aws_credentials("ASIAEXAMPLE", "secret")
///     .with_session_token("token")
///     .with_region("eu-west-1")
///     .aws_credentials();
/// assert_eq!(temporary.session_token.as_deref(), Some("token"));
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AwsCredentials {
    /// The access key id (`AKIA…`), the first part of the `Credential` a request names.
    pub access_key_id: String,
    /// The secret access key the signature is computed with.
    pub secret_access_key: String,
    /// A session token every request must carry in `x-amz-security-token`.
    pub session_token: Option<String>,
    /// The region of the credential scope (`us-east-1`).
    pub region: String,
}

impl fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"…")
            .field("session_token", &self.session_token.as_ref().map(|_| "…"))
            .field("region", &self.region)
            .finish()
    }
}

/// `len` characters of `alphabet` drawn from a hash of `what` and `prefix`.
fn derived(what: &str, prefix: &str, alphabet: &[u8], len: usize) -> String {
    let mut x = mix(fnv1a(what.as_bytes()) ^ fnv1a(prefix.as_bytes()).rotate_left(17));
    (0..len)
        .map(|_| {
            x = mix(x);
            char::from(alphabet[(x % alphabet.len() as u64) as usize])
        })
        .collect()
}

/// An access key id of AWS's shape (`AKIA` and 16 characters of `A-Z2-7`) for `prefix`.
pub(crate) fn derived_access_key_id(prefix: &str) -> String {
    format!(
        "AKIA{}",
        derived(
            "access key id",
            prefix,
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567",
            16
        )
    )
}

/// A secret access key of AWS's shape (40 characters of base64's alphabet) for `prefix`.
pub(crate) fn derived_secret_access_key(prefix: &str) -> String {
    derived(
        "secret access key",
        prefix,
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
        40,
    )
}

/// Why a configured credential part cannot be signed with, if it cannot.
pub(crate) fn check_part(field: &str, value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("must not be empty".to_owned());
    }
    let bad = |c: char| c.is_whitespace() || c.is_control() || c == ',';
    let bad = match field {
        // The key id and the region are parts of `Credential=id/date/region/…`.
        "access_key_id" | "region" => value.chars().any(|c| bad(c) || c == '/' || c == '='),
        _ => value.chars().any(bad),
    };
    if bad {
        return Err(format!("{value:?} cannot be part of a signed request"));
    }
    if field == "region"
        && !value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Err(format!("{value:?} is no region name (like \"us-east-1\")"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_credentials_have_aws_shapes_and_differ_by_prefix() {
        let id = derived_access_key_id("bedrock");
        assert_eq!(id.len(), 20);
        assert!(id.starts_with("AKIA"));
        assert!(
            id[4..]
                .chars()
                .all(|c| c.is_ascii_uppercase() || ('2'..='7').contains(&c))
        );
        assert_eq!(derived_secret_access_key("bedrock").len(), 40);
        assert_eq!(
            id,
            derived_access_key_id("bedrock"),
            "the same prefix, the same id"
        );
        assert_ne!(id, derived_access_key_id("bedrock-2"));
        assert_ne!(
            derived_secret_access_key("bedrock"),
            derived_secret_access_key("bedrock-2")
        );
    }

    #[test]
    fn refuses_parts_that_cannot_be_signed_with() {
        assert!(check_part("region", "us-east-1").is_ok());
        assert!(check_part("region", "US East").is_err());
        assert!(check_part("access_key_id", "AKIA/x").is_err());
        assert!(check_part("secret_access_key", "a/b+c").is_ok());
        assert!(check_part("session_token", "").is_err());
    }

    #[test]
    fn debug_hides_the_secret_and_the_token() {
        let c = AwsCredentials {
            access_key_id: "AKIA1".into(),
            secret_access_key: "s3cr3t".into(),
            session_token: Some("t0k3n".into()),
            region: DEFAULT_REGION.into(),
        };
        let shown = format!("{c:?}");
        assert!(shown.contains("AKIA1") && !shown.contains("s3cr3t") && !shown.contains("t0k3n"));
    }
}
