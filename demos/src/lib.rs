//! loopguard's heavy demos, kept out of the examples a user copies.
//!
//! - [`exporter`]: the registry exporter's serving code with its offload switchable
//!   (loopguard, `blocking::unblock`, on the loop) and hooks for tests; `examples/storm.rs`
//!   runs it three ways side by side. The file to copy is the root crate's
//!   `examples/registry_exporter/`.
//! - [`storm`]: the storm harness (a server per run in a child process, burst or sustained
//!   load, `/healthz` probed meanwhile); [`client`]: a minimal HTTP/1.1 client for it and
//!   the tests.
//! - [`catalog`]: a catalog client on smol (`examples/catalog_client.rs`).
//! - [`outage`]: a scripted outage and callers retrying into it, with and without a retry
//!   budget (`examples/retry_budget.rs`).
//! - [`cli`]: command-line parsing shared by the demos; [`testing`]: helpers for their tests;
//!   [`faults`]: code made to panic at random, for the soak.
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]

pub mod catalog;
pub mod chart;
pub mod cli;
pub mod client;
pub mod exporter;
pub mod faults;
pub mod outage;
pub mod storm;
pub mod testing;
