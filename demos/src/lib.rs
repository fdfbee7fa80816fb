//! loopguard's heavy demos, kept out of the examples a user copies.
//!
//! - [`server`]: `loopguard-exporter` on a thread of its own, its render placed as the
//!   storm's modes say (the crate's pool, its `Offload` baselines, the floor), serving the
//!   synthetic [`registry`] with walk counters and test hooks. The exporter to copy is
//!   `exporter/examples/registry_exporter/`.
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
pub mod faults;
pub mod outage;
pub mod registry;
pub mod server;
pub mod storm;
pub mod testing;
