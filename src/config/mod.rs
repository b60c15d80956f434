//! `providers.toml`: environments, providers, limits and policy.

mod types;

pub use types::{Config, Environment, KeySource, Limits, Policy, ProviderConfig, ProviderKind};
