//! A JSON value generated from a JSON Schema (or Gemini's OpenAPI subset of one):
//! deterministic, seeded, and valid for the schemas tools and structured answers use.
//!
//! Read: `const`, `enum`, `type` (a string or a list, `null` skipped; OpenAPI's upper-case
//! names too), `properties` (every listed one, plus any `required` name not listed),
//! `items` / `prefixItems`, `minItems` / `maxItems`, `minimum` / `maximum` and their
//! exclusive forms, `minLength` / `maxLength`, `format` (`date-time`, `date`, `time`,
//! `email`, `uri`, `uuid`, `ipv4`), `anyOf` / `oneOf` (the first alternative that is not
//! `null`), `allOf` (objects merged), local `$ref`s (`#/$defs/…`, `#/definitions/…`). A
//! string property named like a place or a search (`city`, `location`, `query`, …) takes a
//! word of the user's text. `pattern`, `multipleOf` and `uniqueItems` are not honoured.

use std::cell::Cell;

use serde_json::{Map, Value};

use crate::text::{complete, fnv1a, mix};

/// Nesting deeper than this (a recursive `$ref`) ends in `null`.
const MAX_DEPTH: usize = 12;

/// Values generated for one schema at most: past them (a schema of nested arrays that would
/// multiply), `null`.
const MAX_VALUES: u32 = 10_000;

/// Property names whose string value is a word of the user's text.
const SUBJECT_NAMES: &str = "
    city location place town country region address query q search term keyword topic
    subject
";

/// What generating a value needs besides the schema.
pub(crate) struct Gen<'a> {
    /// The whole schema, for `$ref`s.
    root: &'a Value,
    /// A word of the user's text (for `city`, `query`, …), if the text has one.
    subject: Option<&'a str>,
    /// Values still allowed.
    budget: Cell<u32>,
}

impl<'a> Gen<'a> {
    /// A generator for `root` (where `$ref`s point), with the user's `subject` word.
    pub(crate) fn new(root: &'a Value, subject: Option<&'a str>) -> Self {
        Gen {
            root,
            subject,
            budget: Cell::new(MAX_VALUES),
        }
    }

    /// The value `schema` describes, drawn from `seed`.
    pub(crate) fn value(&self, schema: &Value, seed: u64) -> Value {
        self.at(schema, seed, None, 0)
    }

    fn at(&self, schema: &Value, seed: u64, name: Option<&str>, depth: usize) -> Value {
        let left = self.budget.get();
        if depth > MAX_DEPTH || left == 0 {
            return Value::Null;
        }
        self.budget.set(left - 1);
        let Some(s) = schema.as_object() else {
            // `true` or a non-object: anything goes; a string is something.
            return Value::String(self.string(&Map::new(), seed, name));
        };
        if let Some(c) = s.get("const") {
            return c.clone();
        }
        if let Some(options) = s
            .get("enum")
            .and_then(Value::as_array)
            .filter(|e| !e.is_empty())
        {
            return options[(seed % options.len() as u64) as usize].clone();
        }
        if let Some(target) = s.get("$ref").and_then(Value::as_str) {
            return match self.resolve(target) {
                Some(t) => self.at(t, seed, name, depth + 1),
                None => Value::Null,
            };
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(alts) = s.get(key).and_then(Value::as_array) {
                let alt = alts.iter().find(|a| !is_null_schema(a)).or(alts.first());
                if let Some(a) = alt {
                    return self.at(a, seed, name, depth + 1);
                }
            }
        }
        if let Some(parts) = s.get("allOf").and_then(Value::as_array) {
            return self.at(&self.merged(parts, depth), seed, name, depth + 1);
        }
        match type_of(s).as_str() {
            "object" => self.object(s, seed, depth),
            "array" => self.array(s, seed, depth),
            "integer" => integer(s, seed),
            "number" => number(s, seed),
            "boolean" => Value::Bool(seed.is_multiple_of(2)),
            "null" => Value::Null,
            _ => Value::String(self.string(s, seed, name)),
        }
    }

    fn resolve(&self, target: &str) -> Option<&Value> {
        let pointer = target.strip_prefix('#')?;
        self.root.pointer(pointer)
    }

    /// `allOf`'s parts as one object schema (their `properties` and `required` joined); a
    /// part that is no object schema is taken as it is when it is the first.
    fn merged(&self, parts: &[Value], depth: usize) -> Value {
        let mut properties = Map::new();
        let mut required: Vec<Value> = Vec::new();
        for part in parts {
            let part = match part.get("$ref").and_then(Value::as_str) {
                Some(t) if depth < MAX_DEPTH => self.resolve(t).unwrap_or(part),
                _ => part,
            };
            if let Some(p) = part.get("properties").and_then(Value::as_object) {
                properties.extend(p.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            if let Some(r) = part.get("required").and_then(Value::as_array) {
                required.extend(r.iter().cloned());
            }
        }
        if properties.is_empty() && required.is_empty() {
            return parts.first().cloned().unwrap_or(Value::Null);
        }
        serde_json::json!({"type": "object", "properties": properties, "required": required})
    }

    fn object(&self, s: &Map<String, Value>, seed: u64, depth: usize) -> Value {
        let mut out = Map::new();
        let empty = Map::new();
        let properties = s
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        for (key, schema) in properties {
            let v = self.at(
                schema,
                mix(seed ^ fnv1a(key.as_bytes())),
                Some(key),
                depth + 1,
            );
            out.insert(key.clone(), v);
        }
        let required = s.get("required").and_then(Value::as_array);
        for key in required.into_iter().flatten().filter_map(Value::as_str) {
            if !out.contains_key(key) {
                let v = self.string(&Map::new(), mix(seed ^ fnv1a(key.as_bytes())), Some(key));
                out.insert(key.to_owned(), Value::String(v));
            }
        }
        Value::Object(out)
    }

    fn array(&self, s: &Map<String, Value>, seed: u64, depth: usize) -> Value {
        let min = s.get("minItems").and_then(Value::as_u64).unwrap_or(0);
        let max = s
            .get("maxItems")
            .and_then(Value::as_u64)
            .unwrap_or(u64::MAX);
        let prefix = s.get("prefixItems").and_then(Value::as_array);
        let n = prefix
            .map_or(2, |p| p.len() as u64)
            .max(min)
            .min(max)
            .min(64);
        let any = Value::Object(Map::new());
        let items = s.get("items").unwrap_or(&any);
        let values = (0..n)
            .map(|i| {
                let schema = prefix.and_then(|p| p.get(i as usize)).unwrap_or(items);
                self.at(schema, mix(seed ^ i.wrapping_add(1)), None, depth + 1)
            })
            .collect();
        Value::Array(values)
    }

    fn string(&self, s: &Map<String, Value>, seed: u64, name: Option<&str>) -> String {
        let format = s.get("format").and_then(Value::as_str).unwrap_or("");
        let mut text = match format {
            "date-time" => "2025-01-01T12:00:00Z".to_owned(),
            "date" => "2025-01-01".to_owned(),
            "time" => "12:00:00".to_owned(),
            "email" => "user@example.com".to_owned(),
            "uri" | "url" | "iri" => "https://example.com/".to_owned(),
            "ipv4" => "127.0.0.1".to_owned(),
            "uuid" => format!(
                "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
                seed >> 32,
                (seed >> 16) & 0xffff,
                seed & 0x0fff,
                (seed >> 4) & 0x0fff,
                mix(seed) & 0xffff_ffff_ffff
            ),
            _ => match (name.filter(|n| is_subject(n)), self.subject) {
                (Some(_), Some(word)) => word.to_owned(),
                _ => complete(seed, 3).text,
            },
        };
        let min = s.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize;
        while text.chars().count() < min {
            text.push_str(" text");
        }
        if let Some(max) = s.get("maxLength").and_then(Value::as_u64) {
            text = text.chars().take(max as usize).collect();
        }
        text
    }
}

/// Whether a property named `name` holds a place or a search (`city`, `user_location`,
/// `searchQuery`; not `capacity`).
fn is_subject(name: &str) -> bool {
    name_parts(name)
        .iter()
        .any(|part| SUBJECT_NAMES.split_whitespace().any(|s| s == part))
}

/// The words of an identifier, lower-cased: split at `_`, `-`, spaces and camelCase humps
/// (`get_weather`, `getWeather` → `get`, `weather`).
pub(super) fn name_parts(name: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut word = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if !c.is_alphanumeric() {
            prev_lower = false;
            if !word.is_empty() {
                parts.push(std::mem::take(&mut word));
            }
            continue;
        }
        if c.is_uppercase() && prev_lower && !word.is_empty() {
            parts.push(std::mem::take(&mut word));
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        word.extend(c.to_lowercase());
    }
    if !word.is_empty() {
        parts.push(word);
    }
    parts
}

fn is_null_schema(v: &Value) -> bool {
    v.get("type").and_then(Value::as_str) == Some("null")
}

/// The schema's type, lower-cased (OpenAPI's `STRING`…), the first that is not `null` of a
/// list; without one, what its keywords imply.
fn type_of(s: &Map<String, Value>) -> String {
    let named = match s.get("type") {
        Some(Value::String(t)) => Some(t.to_ascii_lowercase()),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_ascii_lowercase)
            .find(|t| t != "null")
            .or_else(|| Some("null".to_owned())),
        _ => None,
    };
    named.unwrap_or_else(|| {
        if s.contains_key("properties") || s.contains_key("required") {
            "object".to_owned()
        } else if s.contains_key("items") || s.contains_key("prefixItems") {
            "array".to_owned()
        } else {
            "string".to_owned()
        }
    })
}

/// The bounds `minimum`/`maximum` (and exclusive forms, numbers only) give, integral ones
/// moved in by `step` when exclusive; `span` wide around what is given when a bound is
/// missing.
fn bounds(s: &Map<String, Value>, step: f64, span: f64) -> (f64, f64) {
    let get = |k: &str| s.get(k).and_then(Value::as_f64);
    let lo = get("minimum").or_else(|| get("exclusiveMinimum").map(|x| x + step));
    let hi = get("maximum").or_else(|| get("exclusiveMaximum").map(|x| x - step));
    match (lo, hi) {
        (Some(lo), Some(hi)) if hi >= lo => (lo, hi),
        (Some(lo), Some(_)) => (lo, lo),
        (Some(lo), None) => (lo, lo + span),
        (None, Some(hi)) => (hi - span, hi),
        (None, None) => (0.0, span),
    }
}

fn integer(s: &Map<String, Value>, seed: u64) -> Value {
    let (lo, hi) = bounds(s, 1.0, 100.0);
    let (lo, hi) = (lo.ceil(), hi.floor().max(lo.ceil()));
    let width = (hi - lo).min(1e15) as u64 + 1;
    let v = lo + (seed % width) as f64;
    Value::from(v as i64)
}

fn number(s: &Map<String, Value>, seed: u64) -> Value {
    let (lo, hi) = bounds(s, 0.1, 100.0);
    let steps = ((hi - lo) * 10.0).clamp(0.0, 1e15) as u64 + 1;
    let v = ((lo + (seed % steps) as f64 / 10.0) * 10.0).round() / 10.0;
    serde_json::Number::from_f64(v.clamp(lo, hi)).map_or(Value::Null, Value::Number)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn generated(schema: &Value, subject: Option<&str>) -> Value {
        Gen::new(schema, subject).value(schema, 42)
    }

    #[test]
    fn objects_get_every_listed_and_required_property() {
        let schema = json!({
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "detailed": {"type": "boolean"},
                "kind": {"const": "forecast"},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 3},
                "ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                "note": {"type": ["string", "null"]},
            },
            "required": ["city", "extra"],
        });
        let v = generated(&schema, Some("Paris"));
        assert_eq!(v["city"], "Paris");
        assert!(["celsius", "fahrenheit"].contains(&v["unit"].as_str().unwrap()));
        assert!((1..=7).contains(&v["days"].as_i64().unwrap()));
        assert!(v["detailed"].is_boolean());
        assert_eq!(v["kind"], "forecast");
        assert_eq!(v["tags"].as_array().unwrap().len(), 3);
        let r = v["ratio"].as_f64().unwrap();
        assert!(r > 0.0 && r <= 1.0, "{r}");
        assert!(v["note"].is_string());
        assert!(v["extra"].is_string());
        assert_eq!(v, generated(&schema, Some("Paris")), "deterministic");
    }

    #[test]
    fn follows_refs_alternatives_and_openapi_types() {
        let schema = json!({
            "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "INTEGER"}},
                                "required": ["x"]}},
            "type": "object",
            "properties": {
                "at": {"$ref": "#/$defs/Point"},
                "maybe": {"anyOf": [{"type": "null"}, {"type": "number"}]},
                "both": {"allOf": [{"properties": {"a": {"type": "string"}}},
                                   {"properties": {"b": {"type": "boolean"}}}]},
                "when": {"type": "string", "format": "date-time"},
                "short": {"type": "string", "maxLength": 4},
                "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]},
                "loop": {"$ref": "#"},
            },
        });
        let v = generated(&schema, None);
        assert!(v["at"]["x"].is_i64());
        assert!(v["maybe"].is_number());
        assert!(v["both"]["a"].is_string() && v["both"]["b"].is_boolean());
        assert_eq!(v["when"], "2025-01-01T12:00:00Z");
        assert!(v["short"].as_str().unwrap().chars().count() <= 4);
        assert!(v["pair"][0].is_string() && v["pair"][1].is_i64());
        // A recursive schema ends, in nulls, never overflowing the stack.
        let mut depth = 0;
        let mut node = &v["loop"];
        while node.is_object() {
            depth += 1;
            node = &node["loop"];
        }
        assert!(depth <= MAX_DEPTH, "{depth}");
        // Nested arrays that would multiply stop at the budget.
        let mut wide = json!({"type": "integer"});
        for _ in 0..10 {
            wide = json!({"type": "array", "items": wide, "minItems": 64});
        }
        let v = generated(&wide, None);
        assert!(v.to_string().matches("null").count() > 0);
    }

    #[test]
    fn subject_properties_are_recognised_by_name() {
        for name in [
            "city",
            "location",
            "query",
            "user_location",
            "searchQuery",
            "q",
        ] {
            assert!(is_subject(name), "{name}");
        }
        for name in ["unit", "days", "quality", "capacity"] {
            assert!(!is_subject(name), "{name}");
        }
        let schema = json!({"type": "object", "properties": {"query": {"type": "string"}}});
        assert_eq!(generated(&schema, Some("tokyo"))["query"], "tokyo");
        assert!(generated(&json!({}), None).is_string());
    }
}
