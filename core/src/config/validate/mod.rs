//! Stage two: raw types → [`Config`], checking everything serde cannot.
//!
//! Each check returns an [`Issue`] naming the TOML path at fault; the caller adds the line
//! and column. Checks run in a fixed order (names, policy, `[shared]`, `[cache]`, providers,
//! environments, how environments use providers, `default_environment`), so the same file
//! always gives the same first error.

mod cache;
mod policy;
mod provider;
mod shared;

pub(crate) use provider::check_base_url_override;
pub(crate) use shared::{check_settings as check_shared_settings, check_url as check_redis_url};

use std::collections::{BTreeMap, HashMap};

use super::keys::{check_variable_name, looks_like_key, shown};
use super::kind::CredentialShape;
use super::raw::{RawConfig, RawEnvironment, RawProvider};
use super::source::{Issue, TomlPath};
use super::types::{Config, Environment, KeySource, ProviderConfig, ProviderKind};
use crate::id::{Capability, ProviderId};

/// The longest duration accepted anywhere (but `[cache] ttl_ms`): 30 days, in milliseconds.
const MAX_MS: i64 = 30 * 24 * 60 * 60 * 1000;

type Check<T> = Result<T, Issue>;

/// Validates a whole file.
pub(crate) fn validate(raw: &RawConfig) -> Check<Config> {
    let root = TomlPath::root();
    let providers_path = root.key("providers");
    let environments_path = root.key("environments");
    check_names(&providers_path, raw.providers.keys(), "provider")?;
    check_names(&environments_path, raw.environments.keys(), "environment")?;

    let policy = policy::policy(&root.key("policy"), &raw.policy)?;
    let shared = match &raw.shared {
        Some(s) => Some(shared::shared(&root.key("shared"), s)?),
        None => None,
    };
    let cache = match &raw.cache {
        Some(c) => Some(cache::cache(&root.key("cache"), c)?),
        None => None,
    };

    let mut providers = BTreeMap::new();
    for (name, p) in &raw.providers {
        let config = provider::provider(&providers_path.key(name), name, p)?;
        providers.insert(name.clone(), config);
    }

    let mut environments = BTreeMap::new();
    for (name, e) in &raw.environments {
        let env = environment(&environments_path.key(name), name, e, &providers)?;
        environments.insert(name.clone(), env);
    }

    for (name, p) in &raw.providers {
        let keys = keys(&providers_path.key(name), p, &environments)?;
        if let Some(config) = providers.get_mut(name) {
            config.keys = keys;
        }
    }
    check_uses(&providers_path, &environments, &providers)?;

    if !environments.contains_key(&raw.default_environment) {
        return Err(Issue::new(
            root.key("default_environment"),
            format!(
                "names environment {}, which is not defined under [environments]; defined: {}",
                shown(&raw.default_environment),
                listing(environments.keys())
            ),
        ));
    }

    Ok(Config {
        default_environment: raw.default_environment.clone(),
        environments,
        providers,
        policy,
        shared,
        cache,
        deadline_stated: raw.policy.deadline_ms.is_some(),
    })
}

/// `a, b, c` (or `none`).
fn listing<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let all: Vec<&str> = names.map(String::as_str).collect();
    if all.is_empty() {
        "none".to_owned()
    } else {
        all.join(", ")
    }
}

fn check_names<'a>(
    path: &TomlPath,
    names: impl Iterator<Item = &'a String>,
    what: &str,
) -> Check<()> {
    let mut folded: HashMap<String, &str> = HashMap::new();
    for name in names {
        let valid = name.len() <= 64
            && name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !valid {
            return Err(Issue::new(
                path.key(name),
                format!(
                    "is not a valid {what} name: use up to 64 letters, digits, `-`, `_` and \
                     `.`, starting with a letter or digit"
                ),
            ));
        }
        if let Some(other) = folded.insert(name.to_ascii_lowercase(), name) {
            return Err(Issue::new(
                path.key(name),
                format!(
                    "differs from {what} `{other}` only by case; {what} names must differ by \
                     more than case"
                ),
            ));
        }
    }
    Ok(())
}
fn environment(
    path: &TomlPath,
    name: &str,
    raw: &RawEnvironment,
    providers: &BTreeMap<String, ProviderConfig>,
) -> Check<Environment> {
    if raw.chat.is_empty() && raw.transcription.is_empty() && raw.embedding.is_empty() {
        return Err(Issue::new(
            path.clone(),
            "lists no providers; give it chat = [\"…\"], transcription = [\"…\"] and/or \
             embedding = [\"…\"]",
        ));
    }
    Ok(Environment {
        name: name.to_owned(),
        chat: failover_list(&path.key("chat"), &raw.chat, Capability::Chat, providers)?,
        transcription: failover_list(
            &path.key("transcription"),
            &raw.transcription,
            Capability::Transcription,
            providers,
        )?,
        embedding: failover_list(
            &path.key("embedding"),
            &raw.embedding,
            Capability::Embedding,
            providers,
        )?,
        budget: raw
            .budget
            .as_ref()
            .map(|b| budget(&path.key("budget"), b))
            .transpose()?,
        tenant_budgets: raw
            .tenant_budgets
            .iter()
            .map(|(tenant, b)| {
                let at = path.key("tenant_budgets").key(tenant);
                if tenant.trim().is_empty() {
                    return Err(Issue::new(
                        at,
                        "must be keyed by a tenant's name, not an empty string",
                    ));
                }
                Ok((tenant.clone(), budget(&at, b)?))
            })
            .collect::<Check<Vec<_>>>()?,
    })
}

/// A budget: an amount a day and/or a month (finite, ≥ 0), in a time zone this system knows.
pub(super) fn budget(path: &TomlPath, b: &crate::budget::Budget) -> Check<crate::budget::Budget> {
    match b.problem() {
        Some(problem) => Err(Issue::new(path.clone(), problem)),
        None => Ok(b.clone()),
    }
}

fn failover_list(
    path: &TomlPath,
    names: &[String],
    capability: Capability,
    providers: &BTreeMap<String, ProviderConfig>,
) -> Check<Vec<ProviderId>> {
    let mut ids = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        let here = path.index(i);
        if let Some(first) = names.iter().position(|n| n == name).filter(|&f| f < i) {
            return Err(Issue::new(
                here,
                format!(
                    "lists provider {} again (first at [{first}]); list each provider once",
                    shown(name)
                ),
            ));
        }
        let Some(config) = providers.get(name) else {
            let hint = providers
                .keys()
                .find(|k| k.eq_ignore_ascii_case(name))
                .map(|k| format!(" (did you mean `{k}`?)"))
                .unwrap_or_default();
            return Err(Issue::new(
                here,
                format!(
                    "names provider {}, which is not defined under [providers]{hint}; defined: {}",
                    shown(name),
                    listing(providers.keys())
                ),
            ));
        };
        if !config.kind.capabilities().supports(capability) {
            let able: Vec<&str> = ProviderKind::ALL
                .iter()
                .filter(|k| k.capabilities().supports(capability))
                .map(|k| k.as_str())
                .collect();
            let verb = match capability {
                Capability::Chat => "chat",
                Capability::Transcription => "transcribe audio",
                Capability::Embedding => "embed texts",
            };
            return Err(Issue::new(
                here,
                format!(
                    "provider `{name}` is of kind {}, which cannot {verb}; kinds that can: {}",
                    config.kind,
                    able.join(", ")
                ),
            ));
        }
        ids.push(config.id.clone());
    }
    Ok(ids)
}

/// Where each environment's key comes from, for one provider.
fn keys(
    path: &TomlPath,
    raw: &RawProvider,
    environments: &BTreeMap<String, Environment>,
) -> Check<BTreeMap<String, KeySource>> {
    let key_path = path.key("api_key_env");
    let aws = ProviderKind::from_name(&raw.kind)
        .is_some_and(|k| k.kit().credential == CredentialShape::Aws);
    check_credential_shape(path, raw, aws)?;
    if raw.key_in_code {
        if raw.auth.is_some()
            || raw.api_key_env.is_some()
            || raw.key_file.is_some()
            || raw.aws_credentials_env.is_some()
        {
            return Err(Issue::new(
                key_path,
                "the key is handed over in code (key_in_code), so this provider must name no \
                 variable and no auth",
            ));
        }
        return Ok(environments
            .keys()
            .map(|env| (env.clone(), KeySource::InCode))
            .collect());
    }
    if raw.auth.is_some() {
        if raw.api_key_env.is_some() || raw.key_file.is_some() || raw.aws_credentials_env.is_some()
        {
            return Err(Issue::new(
                path.key("auth"),
                "auth = \"none\" sends no key, so this provider must not have api_key_env or \
                 key_file",
            ));
        }
        return Ok(environments
            .keys()
            .map(|env| (env.clone(), KeySource::None))
            .collect());
    }
    let mut keys = BTreeMap::new();
    for (env, var) in raw.api_key_env.iter().flatten() {
        let entry = key_path.key(env);
        defined(&entry, env, environments)?;
        if let Some(message) = check_variable_name(var) {
            return Err(Issue::new(entry, message));
        }
        keys.insert(env.clone(), KeySource::Env(var.clone()));
    }
    for (env, file) in raw.key_file.iter().flatten() {
        let entry = path.key("key_file").key(env);
        defined(&entry, env, environments)?;
        if keys.contains_key(env) {
            return Err(Issue::new(
                entry,
                format!(
                    "api_key_env names a variable for environment `{env}` too: one key per \
                     provider per environment, from a variable or from a file"
                ),
            ));
        }
        if file.trim().is_empty() || looks_like_key(file) {
            return Err(Issue::new(
                entry,
                "must be the path of the file that holds the key (its contents never go in \
                 this file)",
            ));
        }
        keys.insert(env.clone(), KeySource::File(file.into()));
    }
    for (env, vars) in raw.aws_credentials_env.iter().flatten() {
        let entry = path.key("aws_credentials_env").key(env);
        defined(&entry, env, environments)?;
        for (field, var) in [
            ("access_key_id", Some(&vars.access_key_id)),
            ("secret_access_key", Some(&vars.secret_access_key)),
            ("session_token", vars.session_token.as_ref()),
        ] {
            if let Some(message) = var.and_then(|v| check_variable_name(v)) {
                return Err(Issue::new(entry.key(field), message));
            }
        }
        keys.insert(
            env.clone(),
            KeySource::Aws {
                access_key_id: vars.access_key_id.clone(),
                secret_access_key: vars.secret_access_key.clone(),
                session_token: vars.session_token.clone(),
            },
        );
    }
    Ok(keys)
}

/// `env`, named at `entry`, is one of `[environments]`.
fn defined(entry: &TomlPath, env: &str, environments: &BTreeMap<String, Environment>) -> Check<()> {
    if environments.contains_key(env) {
        return Ok(());
    }
    Err(Issue::new(
        entry.clone(),
        format!(
            "no environment {} is defined under [environments]; defined: {}",
            shown(env),
            listing(environments.keys())
        ),
    ))
}

/// A kind that signs with AWS credentials takes them from `aws_credentials_env`, never one
/// key; the others the other way round.
fn check_credential_shape(path: &TomlPath, raw: &RawProvider, aws: bool) -> Check<()> {
    let one_key = [
        ("api_key_env", raw.api_key_env.is_some()),
        ("key_file", raw.key_file.is_some()),
    ];
    if aws {
        if let Some((field, _)) = one_key.into_iter().find(|(_, set)| *set) {
            return Err(Issue::new(
                path.key(field),
                format!(
                    "kind = \"{}\" signs with AWS credentials, not one key: name their variables \
                     with aws_credentials_env = {{ ENV = {{ access_key_id = \"AWS_ACCESS_KEY_ID\", \
                     secret_access_key = \"AWS_SECRET_ACCESS_KEY\" }} }} (and session_token = \
                     \"AWS_SESSION_TOKEN\" for temporary credentials)",
                    raw.kind
                ),
            ));
        }
    } else if raw.aws_credentials_env.is_some() {
        return Err(Issue::new(
            path.key("aws_credentials_env"),
            format!(
                "is for kind = \"bedrock\" (AWS credentials); kind = \"{}\" takes one key, from \
                 api_key_env or key_file",
                raw.kind
            ),
        ));
    }
    Ok(())
}

/// Every provider an environment lists has what that use needs: a key source for the
/// environment and a default model for the capability.
fn check_uses(
    path: &TomlPath,
    environments: &BTreeMap<String, Environment>,
    providers: &BTreeMap<String, ProviderConfig>,
) -> Check<()> {
    for env in environments.values() {
        for (capability, ids) in [
            (Capability::Chat, &env.chat),
            (Capability::Transcription, &env.transcription),
            (Capability::Embedding, &env.embedding),
        ] {
            for id in ids {
                let Some(p) = providers.get(id.as_str()) else {
                    continue;
                };
                let here = path.key(id.as_str());
                let used = format!("environment `{}` lists it under {capability}", env.name);
                if !p.keys.contains_key(&env.name) {
                    return Err(Issue::new(
                        here.key("api_key_env"),
                        format!(
                            "has no entry for environment `{}`, and {used}; add {} = \
                             \"VARIABLE_NAME\" (or key_file = {{ {} = \"PATH\" }} for a key \
                             in a file, aws_credentials_env for Bedrock, or auth = \"none\" for \
                             a local host that takes no key)",
                            env.name, env.name, env.name
                        ),
                    ));
                }
                let (field, present) = match capability {
                    // A kind that only transcribes has one model, its speech model.
                    Capability::Transcription if !p.kind.capabilities().chat => {
                        ("model", p.transcription_model.is_some())
                    }
                    Capability::Transcription => {
                        ("transcription_model", p.transcription_model.is_some())
                    }
                    Capability::Chat => ("model", p.model.is_some()),
                    Capability::Embedding => ("embedding_model", p.embedding_model.is_some()),
                };
                if !present {
                    return Err(Issue::new(here.key(field), format!("is required: {used}")));
                }
            }
        }
    }
    Ok(())
}
