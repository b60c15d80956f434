//! A [`Contract`] from a JSON Schema.

use std::sync::Arc;

use super::Contract;
use crate::Job;
use llm_failover_core::wing::schema_failures;
use llm_failover_core::{Error, ErrorKind, Result};

/// A [`Contract`] that accepts a result only when it is valid against `schema` (any draft the
/// `jsonschema` crate knows; `$schema` picks it, 2020-12 when absent). A `$ref` to another
/// document is not fetched: the schema must be whole.
///
/// A refusal names where and which keyword failed — `/urgency: enum` — never the value
/// (a model's words stay out of the queue's reasons and listings).
///
/// # Examples
///
/// ```
/// use llm_failover_queue::{schema_contract, NewJob, Queue};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> llm_failover::Result<()> {
/// let triage = schema_contract(&serde_json::json!({
///     "type": "object",
///     "required": ["category", "urgency"],
///     "properties": {
///         "category": { "type": "string" },
///         "urgency": { "enum": ["low", "normal", "high"] }
///     }
/// }))?;
/// // Given to a worker: `Worker::builder(queue, client).contract("triage", triage)`.
/// # let queue = Queue::sqlite_in_memory()?;
/// # queue.enqueue(NewJob::new("a", "triage", "{}"), 0).await?;
/// # let job = queue.claim("w", std::time::Duration::from_secs(9), 0).await?.unwrap();
/// assert!(triage(&job, r#"{"category": "billing", "urgency": "high"}"#).is_ok());
/// let refused = triage(&job, r#"{"category": "billing", "urgency": "banana"}"#).unwrap_err();
/// assert_eq!(refused, "the result fails its schema at /urgency: enum");
/// assert!(!refused.contains("banana"));
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// `Config` when `schema` is not a valid JSON Schema.
pub fn schema_contract(schema: &serde_json::Value) -> Result<Contract> {
    let validator = jsonschema::validator_for(schema).map_err(|e| {
        Error::new(
            ErrorKind::Config,
            format!("a contract's JSON Schema is not valid: {e}"),
        )
    })?;
    Ok(Arc::new(move |_: &Job, result: &str| {
        let value: serde_json::Value =
            serde_json::from_str(result).map_err(|e| format!("the result is not JSON: {e}"))?;
        match schema_failures(&validator, &value) {
            None => Ok(()),
            Some(failures) => Err(format!("the result fails its schema at {failures}")),
        }
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::JobState;
    use llm_failover_core::admission::Priority;

    fn job() -> Job {
        Job {
            id: "a".into(),
            kind: "triage".into(),
            tenant: "t".into(),
            priority: Priority::Bulk,
            payload: "{}".into(),
            state: JobState::Running,
            attempt: 1,
            failures: 0,
            eligible_at_ms: 0,
            lease_until_ms: None,
            worker: None,
            last_error: None,
            reason: None,
            result: None,
            created_at_ms: 0,
        }
    }

    #[test]
    fn a_refusal_names_paths_and_keywords_never_values_and_counts_the_rest() {
        let schema = json!({
            "type": "object",
            "properties": {
                "a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"},
                "d": {"type": "integer"}, "e": {"maxLength": 3}
            }
        });
        let check = schema_contract(&schema).unwrap();
        let result = r#"{"a":"SECRET1","b":"SECRET2","c":"SECRET3","d":"SECRET4","e":"SECRET5"}"#;
        let reason = check(&job(), result).unwrap_err();
        assert!(
            reason.starts_with("the result fails its schema at /"),
            "{reason}"
        );
        assert!(reason.ends_with("(and 2 more)"), "{reason}");
        assert!(!reason.contains("SECRET"), "{reason}");
        assert_eq!(
            check(&job(), "[1]").unwrap_err(),
            "the result fails its schema at /: type"
        );
        assert!(
            check(&job(), "not json")
                .unwrap_err()
                .starts_with("the result is not JSON")
        );
    }

    #[test]
    fn a_schema_that_is_not_valid_is_a_config_error() {
        let err = schema_contract(&json!({"type": "no-such-type"}))
            .err()
            .unwrap();
        assert_eq!(err.kind(), ErrorKind::Config);
        assert!(
            err.to_string().contains("JSON Schema is not valid"),
            "{err}"
        );
    }
}
