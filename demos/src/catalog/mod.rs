//! A catalog client on smol: one deadline over the semaphore wait, the connection-pool
//! wait, every attempt, every backoff pause and the body read (`examples/catalog_client.rs`).

pub mod cli;
pub mod client;
