//! A catalog client on smol: one deadline over the semaphore wait, the connection-pool
//! wait, every attempt, every backoff pause and the body read, measured as one operation.
//!
//! ```text
//! catalog_client [--budget-ms 1000] [--attempt-timeout-ms 400] [--attempts 3]
//!                [--backoff-ms 100,200] [--concurrency 20] [--requests 1] URL
//! ```
//!
//! Runs `--requests` operations at once, sharing one semaphore of `--concurrency` slots
//! and one pool of as many HTTP/1.1 connections. Each operation's budget starts before it
//! queues for the semaphore. A 2xx response with its body read in full is a success; 503
//! is retried, after the server's `Retry-After` if it sent one (the operation ends at once
//! when that would be past its budget); other statuses and connection errors are errors.
//! Prints one JSON line per operation as it finishes and exits 0 only if every one
//! succeeded (2 on a bad command line). `--attempt-timeout-ms 0` turns the per-attempt
//! timeout off.
//!
//! Try it against any local HTTP server, e.g. `python3 -m http.server 8080`:
//!
//! ```text
//! cargo run --example catalog_client -- --requests 5 http://127.0.0.1:8080/
//! ```

use std::sync::Arc;

use loopguard_demos::catalog::cli;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // One thread: the loop the client must keep responsive.
    let executor = Arc::new(smol::Executor::new());
    let spawn = cli::spawner(executor.clone());
    let code = smol::block_on(executor.run(cli::main_with(&args, spawn)));
    std::process::exit(code);
}
