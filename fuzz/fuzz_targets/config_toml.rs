//! The `providers.toml` loader: TOML syntax, the key-policy scan, serde and validation, on
//! arbitrary text. Every refusal is a `Config` error that says where (a TOML path or a line
//! and column).
//!
//! Input: the file's bytes, read as UTF-8 (lossily, so every input reaches the parser).
#![no_main]

use fuzz_support::says_where;
use libfuzzer_sys::fuzz_target;
use llm_failover::config::Config;
use llm_failover::ErrorKind;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match Config::from_toml_str(&text) {
        Ok(config) => {
            // A valid file names a defined default environment.
            assert!(config.environment(&config.default_environment).is_ok());
        }
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::Config, "{e}");
            assert!(says_where(e.message()), "no path or position: {e}");
        }
    }
});
