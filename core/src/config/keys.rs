//! The key policy: variable names in the file, keys in the environment, one key per provider
//! per environment.
//!
//! Nothing here ever formats a key. Functions that look at a value that might be a key return
//! a verdict, and the messages they build name the TOML path or the variable instead.

/// Fields that hold one literal key when someone writes it into the file.
pub(crate) const LITERAL_KEY_FIELDS: &[&str] = &[
    "api_key",
    "apikey",
    "key",
    "token",
    "api_token",
    "access_token",
    "auth_token",
    "bearer_token",
    "secret",
    "password",
    "authorization",
];

/// Fields that hold several keys (a pool to rotate through).
pub(crate) const KEY_POOL_FIELDS: &[&str] = &["api_keys", "keys", "tokens", "secrets"];

/// Prefixes that vendors put on their keys (OpenAI and Anthropic `sk-`, Groq `gsk_`, Google
/// `AIza`, xAI `xai-`, Perplexity `pplx-`).
const KEY_PREFIXES: &[&str] = &["sk-", "gsk_", "AIza", "xai-", "pplx-"];

/// The fix, said once for every "a key is in the file" message.
pub(crate) const WRITE_THE_NAME: &str =
    "looks like an API key; write the NAME of the environment variable that holds it";

/// Why a list of keys is refused.
pub(crate) const ONE_KEY_PER_ENVIRONMENT: &str = "one legitimate key per provider per \
     environment; rotating several keys to multiply a quota breaks providers' terms of service";

/// `^[A-Za-z_][A-Za-z0-9_]*$`: what a portable environment variable name looks like.
pub(crate) fn is_env_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' => {}
        _ => return false,
    }
    chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// True when `value` looks like a key rather than a name: a vendor key prefix, a long run of
/// hex digits, or a long string whose characters switch between lower case, upper case and
/// digits as often as random text does.
pub(crate) fn looks_like_key(value: &str) -> bool {
    if KEY_PREFIXES.iter().any(|p| value.starts_with(p)) || is_aws_key_id(value) {
        return true;
    }
    value
        .split(|c: char| !c.is_ascii_alphanumeric())
        .any(|run| is_hex_blob(run) || is_random_mix(run))
}

/// An AWS access key id: `AKIA` (long-term) or `ASIA` (temporary) and 16 more uppercase
/// letters and digits (IAM's "Unique identifiers" reference).
fn is_aws_key_id(value: &str) -> bool {
    value.len() == 20
        && (value.starts_with("AKIA") || value.starts_with("ASIA"))
        && value
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

fn is_hex_blob(run: &str) -> bool {
    run.len() >= 32
        && run.chars().all(|c| c.is_ascii_hexdigit())
        && run.chars().any(|c| c.is_ascii_digit())
        && run.chars().any(|c| c.is_ascii_alphabetic())
}

fn is_random_mix(run: &str) -> bool {
    #[derive(PartialEq, Clone, Copy)]
    enum Class {
        Lower,
        Upper,
        Digit,
    }
    fn class(c: char) -> Class {
        if c.is_ascii_lowercase() {
            Class::Lower
        } else if c.is_ascii_uppercase() {
            Class::Upper
        } else {
            Class::Digit
        }
    }
    if run.len() < 20 {
        return false;
    }
    let classes: Vec<Class> = run.chars().map(class).collect();
    let has = |k: Class| classes.contains(&k);
    if !(has(Class::Lower) && has(Class::Upper) && has(Class::Digit)) {
        return false;
    }
    let switches = classes.windows(2).filter(|w| w[0] != w[1]).count();
    switches * 3 >= classes.len()
}

/// A name from the file, back-quoted for a message, unless it looks like a key, which is never
/// repeated.
pub(crate) fn shown(value: &str) -> String {
    if looks_like_key(value) {
        "(a value that looks like an API key, not repeated here)".to_owned()
    } else {
        format!("`{value}`")
    }
}

/// What is wrong with an `api_key_env` value, if anything (a message to follow its path).
pub(crate) fn check_variable_name(value: &str) -> Option<String> {
    if looks_like_key(value) {
        Some(format!("this value {WRITE_THE_NAME}"))
    } else if !is_env_var_name(value) {
        Some(format!(
            "is not an environment variable name (letters, digits and `_`, not starting with \
             a digit); it {WRITE_THE_NAME}"
        ))
    } else {
        None
    }
}

/// What is wrong with a key read from a variable, if anything. Never shows the key.
pub(crate) fn check_key_value(value: &str) -> Option<&'static str> {
    if value.trim().is_empty() {
        Some("is set but empty")
    } else if value
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || !c.is_ascii())
    {
        Some(
            "holds whitespace, control or non-ASCII characters, which no API key has (a stray newline or quote?)",
        )
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variable_names_are_names() {
        for name in [
            "OPENAI_API_KEY",
            "_X",
            "openai_key_dev",
            "LLM_FAILOVER_DEMO_KEY",
            "AZURE_OPENAI_API_KEY_2",
            "MyCompanyOpenAIKeyProd",
            "AWS_ACCESS_KEY_ID",
            "AKIA_KEY_ID_FOR_PROD",
        ] {
            assert!(is_env_var_name(name), "{name}");
            assert!(!looks_like_key(name), "{name}");
        }
    }

    #[test]
    fn keys_are_recognised_by_prefix_and_shape() {
        for key in [
            "sk-proj-abc",
            "sk-ant-api03-abc",
            "gsk_abc",
            "AIzaSyA1b2C3d4E5f6G7h8I9j0",
            "xai-abc",
            "0123456789abcdef0123456789abcdef01234567",
            "Qx7pL2mZ9tR4vB8nK3wY6sD1fG5hJ0cE",
            "AKIAIOSFODNN7EXAMPLE",
            "ASIAXYZ0123456789ABC",
        ] {
            assert!(looks_like_key(key), "{key}");
            assert!(check_variable_name(key).is_some(), "{key}");
        }
    }

    #[test]
    fn invalid_names_get_the_write_the_name_message() {
        for bad in ["", "1ABC", "MY-KEY", "MY KEY", "$OPENAI_API_KEY"] {
            let msg = check_variable_name(bad).unwrap();
            assert!(msg.contains(WRITE_THE_NAME), "{msg}");
        }
    }

    #[test]
    fn shown_never_repeats_a_key() {
        assert_eq!(shown("openai"), "`openai`");
        assert!(!shown("sk-SENTINEL-123").contains("SENTINEL"));
    }

    #[test]
    fn key_values_with_whitespace_or_nothing_are_refused() {
        assert_eq!(check_key_value("  "), Some("is set but empty"));
        assert!(check_key_value("sk-abc\n").is_some());
        assert!(check_key_value("sk-abc").is_none());
    }
}
