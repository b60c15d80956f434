//! The emulator over real loopback HTTP, with reqwest as the client.
//!
//! One test binary (modules per area) keeps the build small.

mod admin;
mod bedrock;
mod embeddings;
mod faults;
mod limits;
mod roundtrip;
mod sdk;
mod support;
mod tools;
mod validation;
mod vertex;
mod wire;
