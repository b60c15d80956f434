//! A loopback emulator of LLM provider APIs, for tests, benchmarks and the no-key demo.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations)]

pub mod scripted;
