//! `[providers.NAME]`: one provider on its own (how environments use it is checked in
//! `mod.rs`).

use std::collections::BTreeMap;
use std::num::NonZeroU64;
use std::time::Duration;

use serde_json::Value;
use url::{Host, Url};

use super::Check;
use super::policy::millis;
use crate::config::keys::shown;
use crate::config::kind::ApiVersion;
use crate::config::raw::{RawLimits, RawProvider};
use crate::config::source::{Issue, TomlPath};
use crate::config::types::{ProviderConfig, ProviderKind};
use crate::id::ProviderId;
use crate::ratelimit::HeaderDialect;
use crate::ratelimit::Limits;

fn limits(path: &TomlPath, raw: &RawLimits) -> Check<Limits> {
    let positive = |key: &str, value: Option<i64>| -> Check<Option<NonZeroU64>> {
        match value {
            None => Ok(None),
            Some(n) => u64::try_from(n)
                .ok()
                .and_then(NonZeroU64::new)
                .map(Some)
                .ok_or_else(|| {
                    Issue::new(
                        path.key(key),
                        format!(
                            "must be a positive integer, not {n}; leave it out to learn the \
                             limit from the provider's headers"
                        ),
                    )
                }),
        }
    };
    Ok(Limits {
        rpm: positive("rpm", raw.rpm)?,
        tpm: positive("tpm", raw.tpm)?,
        rpd: positive("rpd", raw.rpd)?,
        tpd: positive("tpd", raw.tpd)?,
        audio_seconds_per_hour: positive("audio_seconds_per_hour", raw.audio_seconds_per_hour)?,
    })
}

pub(super) fn provider(path: &TomlPath, name: &str, raw: &RawProvider) -> Check<ProviderConfig> {
    let kind = ProviderKind::from_name(&raw.kind).ok_or_else(|| {
        let valid: Vec<&str> = ProviderKind::ALL.iter().map(|k| k.as_str()).collect();
        Issue::new(
            path.key("kind"),
            format!(
                "unknown kind {}; valid kinds: {}",
                shown(&raw.kind),
                valid.join(", ")
            ),
        )
    })?;
    let base_url = base_url(&path.key("base_url"), &raw.base_url, raw.allow_http)?;

    check_auth_and_names(path, raw)?;
    let (model, transcription_model) = models(path, kind, raw)?;
    if !kind.capabilities().embedding && raw.embedding_model.is_some() {
        return Err(Issue::new(
            path.key("embedding_model"),
            format!("kind {kind} cannot embed texts, so it takes no embedding_model"),
        ));
    }

    let api_version = api_version(path, kind, raw.api_version.as_deref())?;
    let header_dialect = match &raw.header_dialect {
        None => default_dialect(kind, &base_url),
        Some(d) => HeaderDialect::from_name(d).ok_or_else(|| {
            Issue::new(
                path.key("header_dialect"),
                format!(
                    "unknown dialect {}; valid dialects: openai, groq, azure, anthropic, generic",
                    shown(d)
                ),
            )
        })?,
    };

    let model_limits = model_limits(path, raw)?;
    let timeout = match raw.timeout_ms {
        None => None,
        Some(_) => Some(millis(path, "timeout_ms", raw.timeout_ms, Duration::ZERO)?),
    };

    Ok(ProviderConfig {
        id: ProviderId::new(name),
        kind,
        base_url,
        model,
        transcription_model,
        embedding_model: raw.embedding_model.clone(),
        keys: BTreeMap::new(),
        limits: match &raw.limits {
            None => Limits::none(),
            Some(l) => limits(&path.key("limits"), l)?,
        },
        model_limits,
        prices: prices(path, raw)?,
        budget: raw
            .budget
            .as_ref()
            .map(|b| super::budget(&path.key("budget"), b))
            .transpose()?,
        timeout,
        allow_http: raw.allow_http,
        api_version,
        header_dialect,
        extra_body: extra_body(&path.key("extra_body"), &raw.extra_body, &raw.extra_json)?,
        region: region(path, kind, raw.region.as_deref())?,
    })
}

/// `region`: for a kind that signs with AWS credentials only, an AWS region's shape
/// (`us-east-1`, `eu-central-2`, `us-gov-west-1`: lowercase letters, digits and dashes).
fn region(path: &TomlPath, kind: ProviderKind, region: Option<&str>) -> Check<Option<String>> {
    let Some(r) = region else { return Ok(None) };
    let at = path.key("region");
    if kind.kit().credential != super::super::kind::CredentialShape::Aws {
        return Err(Issue::new(
            at,
            format!("is the AWS region Bedrock signs for; kind {kind} takes none"),
        ));
    }
    let shaped = !r.is_empty()
        && r.len() <= 32
        && r.split('-').count() >= 3
        && r.split('-').all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        });
    if !shaped {
        return Err(Issue::new(
            at,
            format!("{} is not an AWS region (e.g. \"us-east-1\")", shown(r)),
        ));
    }
    Ok(Some(r.to_owned()))
}

/// `auth` is absent or `"none"`; `model`, `transcription_model` and `embedding_model` are
/// names.
fn check_auth_and_names(path: &TomlPath, raw: &RawProvider) -> Check<()> {
    match raw.auth.as_deref() {
        None | Some("none") => {}
        Some(_) => {
            return Err(Issue::new(
                path.key("auth"),
                "the only value is \"none\" (a local host that takes no key); leave it out to \
                 send the key named in api_key_env",
            ));
        }
    }

    for (key, value) in [
        ("model", &raw.model),
        ("transcription_model", &raw.transcription_model),
        ("embedding_model", &raw.embedding_model),
    ] {
        if let Some(v) = value
            && (v.trim().is_empty() || v.chars().any(|c| c.is_whitespace() || c.is_control()))
        {
            return Err(Issue::new(
                path.key(key),
                "must be a model (or deployment) name: not empty, no spaces",
            ));
        }
    }
    Ok(())
}

/// `prices`: per model name, a price in dollars (finite, ≥ 0).
fn prices(
    path: &TomlPath,
    raw: &RawProvider,
) -> Check<BTreeMap<String, crate::types::price::Price>> {
    let prices_path = path.key("prices");
    for (model_name, p) in &raw.prices {
        let at = prices_path.key(model_name);
        if model_name.trim().is_empty() {
            return Err(Issue::new(
                at,
                "must be keyed by a model name, not an empty string",
            ));
        }
        if let Some(problem) = p.problem() {
            return Err(Issue::new(at, problem));
        }
    }
    Ok(raw.prices.clone())
}

/// `model_limits`: per model name, its limits.
fn model_limits(path: &TomlPath, raw: &RawProvider) -> Check<BTreeMap<String, Limits>> {
    let mut model_limits = BTreeMap::new();
    let limits_path = path.key("model_limits");
    for (model_name, l) in &raw.model_limits {
        if model_name.trim().is_empty() {
            return Err(Issue::new(
                limits_path.key(model_name),
                "must be keyed by a model name, not an empty string",
            ));
        }
        model_limits.insert(model_name.clone(), limits(&limits_path.key(model_name), l)?);
    }
    Ok(model_limits)
}

/// `extra_body = { … }` as JSON: every TOML value has a JSON form but a date-time (write it
/// as a string) and a float that is not finite; `model` and `stream` are the SDK's to set.
fn extra_body(
    path: &TomlPath,
    table: &toml::Table,
    json_fields: &serde_json::Map<String, Value>,
) -> Check<serde_json::Map<String, Value>> {
    fn json(path: &TomlPath, v: &toml::Value) -> Check<Value> {
        Ok(match v {
            toml::Value::String(s) => Value::String(s.clone()),
            toml::Value::Integer(n) => Value::from(*n),
            toml::Value::Boolean(b) => Value::Bool(*b),
            toml::Value::Float(f) => serde_json::Number::from_f64(*f)
                .map(Value::Number)
                .ok_or_else(|| Issue::new(path.clone(), "is not a finite number; JSON has none"))?,
            toml::Value::Datetime(_) => {
                return Err(Issue::new(
                    path.clone(),
                    "is a TOML date-time, which JSON has no form for: write it as a string",
                ));
            }
            toml::Value::Array(items) => Value::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| json(&path.index(i), item))
                    .collect::<Check<_>>()?,
            ),
            toml::Value::Table(t) => Value::Object(
                t.iter()
                    .map(|(k, v)| Ok((k.clone(), json(&path.key(k), v)?)))
                    .collect::<Check<_>>()?,
            ),
        })
    }
    let mut out = serde_json::Map::new();
    for (k, v) in table {
        if matches!(k.as_str(), "model" | "stream") {
            return Err(Issue::new(
                path.key(k),
                "is the SDK's to set: name the model with `model` (or per request), and stream \
                 with chat_stream",
            ));
        }
        out.insert(k.clone(), json(&path.key(k), v)?);
    }
    for (k, v) in json_fields {
        if matches!(k.as_str(), "model" | "stream") {
            return Err(Issue::new(
                path.key(k),
                "is the SDK's to set: name the model with `model` (or per request), and stream with chat_stream",
            ));
        }
        out.insert(k.clone(), v.clone());
    }
    Ok(out)
}

/// `(chat model, transcription model)`. Deepgram has one model, its speech model, written as
/// `model` (or `transcription_model`).
fn models(
    path: &TomlPath,
    kind: ProviderKind,
    raw: &RawProvider,
) -> Check<(Option<String>, Option<String>)> {
    let caps = kind.capabilities();
    if !caps.transcription && raw.transcription_model.is_some() {
        return Err(Issue::new(
            path.key("transcription_model"),
            format!("kind {kind} cannot transcribe audio, so it takes no transcription_model"),
        ));
    }
    if caps.chat {
        return Ok((raw.model.clone(), raw.transcription_model.clone()));
    }
    match (&raw.model, &raw.transcription_model) {
        (Some(a), Some(b)) if a != b => Err(Issue::new(
            path.key("transcription_model"),
            format!("kind {kind} has one model, its speech model: set `model` only"),
        )),
        (m, t) => Ok((None, t.clone().or_else(|| m.clone()))),
    }
}

fn api_version(path: &TomlPath, kind: ProviderKind, value: Option<&str>) -> Check<Option<String>> {
    let key = path.key("api_version");
    if let Some(v) = value
        && (v.is_empty()
            || !v
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.'))
    {
        return Err(Issue::new(
            key,
            "must be a version such as \"2024-10-21\" (letters, digits, `-`, `.`)",
        ));
    }
    match (kind.kit().api_version, value) {
        (ApiVersion::Required { what }, None) => Err(Issue::new(
            key,
            format!("is required for kind {kind}: {what}"),
        )),
        (ApiVersion::Defaulted { default, .. }, None) => Ok(Some(default.to_owned())),
        (ApiVersion::Required { .. } | ApiVersion::Defaulted { .. }, Some(v)) => {
            Ok(Some(v.to_owned()))
        }
        (ApiVersion::None, Some(_)) => {
            let takers: Vec<String> = ProviderKind::ALL
                .iter()
                .filter_map(|k| Some(format!("{k}'s {}", k.kit().api_version.what()?)))
                .collect();
            Err(Issue::new(
                key,
                format!(
                    "kind {kind} takes no api_version (only {})",
                    takers.join(" and ")
                ),
            ))
        }
        (ApiVersion::None, None) => Ok(None),
    }
}

fn base_url(path: &TomlPath, raw: &str, allow_http: bool) -> Check<Url> {
    let issue = |msg: String| Issue::new(path.clone(), msg);
    let url = Url::parse(raw).map_err(|e| {
        issue(format!(
            "is not a valid absolute URL ({e}); write it like \"https://api.openai.com/v1\""
        ))
    })?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(issue(
            "must not carry a user name or password; keys go in api_key_env".to_owned(),
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(issue(
            "must not carry a query (`?…`) or fragment (`#…`): keys go in api_key_env, Azure's \
             api-version in api_version"
                .to_owned(),
        ));
    }
    let host = match url.host() {
        Some(host) => host,
        None => return Err(issue("has no host".to_owned())),
    };
    match url.scheme() {
        "https" => Ok(url),
        "http" if allow_http || is_loopback(&host) => Ok(url),
        "http" => Err(issue(format!(
            "http:// to {} would send prompts and the key unencrypted; use https://, or set \
             allow_http = true for a trusted network (loopback needs neither)",
            shown(&host.to_string())
        ))),
        other => Err(issue(format!(
            "scheme {} is not supported; use https:// (or http:// to a loopback host)",
            shown(other)
        ))),
    }
}

/// Checks a base URL given in code for provider `id` by the rules of the file's `base_url`
/// (https, or http only to loopback or with `allow_http`; no user info, query or fragment).
pub(crate) fn check_base_url_override(id: &str, url: &Url, allow_http: bool) -> Check<()> {
    let path = TomlPath::root().key("providers").key(id).key("base_url");
    base_url(&path, url.as_str(), allow_http).map(drop)
}

/// 127.0.0.0/8, `::1` and `localhost`.
fn is_loopback(host: &Host<&str>) -> bool {
    match host {
        Host::Domain(d) => d.eq_ignore_ascii_case("localhost"),
        Host::Ipv4(ip) => ip.is_loopback(),
        Host::Ipv6(ip) => ip.is_loopback(),
    }
}

fn default_dialect(kind: ProviderKind, url: &Url) -> HeaderDialect {
    let host = url.host_str().unwrap_or("").to_ascii_lowercase();
    (kind.kit().dialect)(&host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Check<Url> {
        base_url(&TomlPath::root().key("base_url"), s, false)
    }

    #[test]
    fn loopback_is_127_slash_8_ipv6_one_and_localhost() {
        for ok in [
            "http://127.0.0.1/",
            "http://127.255.0.9:1/",
            "http://[::1]/",
            "http://localhost/",
            "http://LocalHost:8/",
        ] {
            assert!(url(ok).is_ok(), "{ok}");
        }
        for refused in [
            "http://128.0.0.1/",
            "http://[::2]/",
            "http://localhost.example.com/",
            "http://0.0.0.0/",
            "http://169.254.1.1/",
        ] {
            let issue = url(refused).unwrap_err();
            assert!(issue.message.contains("allow_http = true"), "{refused}");
        }
    }

    #[test]
    fn header_dialect_defaults_follow_kind_and_host() {
        let u = |s: &str| Url::parse(s).unwrap();
        let cases = [
            (
                ProviderKind::OpenAi,
                "https://api.groq.com/openai/v1",
                HeaderDialect::Groq,
            ),
            (
                ProviderKind::OpenAi,
                "https://API.GROQ.COM/openai/v1",
                HeaderDialect::Groq,
            ),
            (
                ProviderKind::OpenAi,
                "https://openrouter.ai/api/v1",
                HeaderDialect::Generic,
            ),
            (
                ProviderKind::OpenAi,
                "https://api.openai.com/v1",
                HeaderDialect::OpenAi,
            ),
            (
                ProviderKind::Azure,
                "https://r.openai.azure.com",
                HeaderDialect::Azure,
            ),
            (
                ProviderKind::Anthropic,
                "https://api.anthropic.com",
                HeaderDialect::Anthropic,
            ),
            (
                ProviderKind::Gemini,
                "https://g.example",
                HeaderDialect::Generic,
            ),
            (
                ProviderKind::Deepgram,
                "https://api.deepgram.com",
                HeaderDialect::Generic,
            ),
        ];
        for (kind, base, dialect) in cases {
            assert_eq!(default_dialect(kind, &u(base)), dialect, "{kind} {base}");
        }
    }

    #[test]
    fn api_version_is_required_for_azure_defaulted_for_anthropic_refused_elsewhere() {
        let p = TomlPath::root();
        assert!(api_version(&p, ProviderKind::Azure, None).is_err());
        assert_eq!(
            api_version(&p, ProviderKind::Azure, Some("2024-12-01-preview")).unwrap(),
            Some("2024-12-01-preview".to_owned())
        );
        assert_eq!(
            api_version(&p, ProviderKind::Anthropic, None).unwrap(),
            Some("2023-06-01".to_owned())
        );
        assert!(api_version(&p, ProviderKind::Gemini, Some("v1")).is_err());
        assert!(api_version(&p, ProviderKind::Azure, Some("2024\r\nx: y")).is_err());
    }
}
