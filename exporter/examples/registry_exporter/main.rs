//! A Prometheus exporter on smol that survives scrape storms and connection floods.
//!
//! ```text
//! cargo run --release --example registry_exporter -- [--listen 127.0.0.1:9898]
//!     [--web.listen-address ADDR]... [--web.systemd-socket] [--web.config.file PATH] [--workers 2]
//!     [--worker-nice 10] [--worker-class idle] [--series 10000] [--walk-delay-ms 0] [--cache-ttl-ms 0] [--scrape-budget-ms 30000]
//!     [--scrape-timeout-offset-ms 500] [--demand-window-ms 5000]
//!     [--cardinality-interval-ms 30000]
//! ```
//!
//! `loopguard_exporter` serves (`/metrics` on the pool, 503 + `Retry-After` when no slot is
//! free, 504 past the budget, `/healthz`, `/` the pool's stats); `cli.rs` parses the flags;
//! `listeners.rs` binds them (or takes systemd's sockets); `registry.rs` holds the synthetic
//! registry and the cardinality walk, which waits its turn.

mod cli;
mod listeners;
mod registry;

use std::io;

use async_signal::{Signal, Signals};
use futures_lite::{FutureExt as _, StreamExt as _, future};
use loopguard::orphan::OrphanHandler;
use loopguard_exporter::Exporter;

fn main() {
    if std::env::args().any(|a| a == "--help" || a == "-h") {
        return println!("usage: {}", cli::USAGE);
    }
    let config = cli::parse(std::env::args().skip(1)).unwrap_or_else(|message| {
        eprintln!("error: {message}\n\nusage: {}", cli::USAGE);
        std::process::exit(2)
    });
    if let Err(err) = smol::block_on(run(config)) {
        eprintln!("registry_exporter: {err}");
        std::process::exit(1);
    }
}

async fn run(config: cli::Config) -> io::Result<()> {
    let handle = registry::install()?;
    let gauges = registry::series(config.series);
    let cardinality = registry::Cardinality::default();
    let mut exporter = Exporter::builder()
        .source(registry::Delayed(handle.clone(), config.walk_delay))
        .workers(config.workers)
        // Walks below the loop (Linux): see `PoolBuilder::worker_sched_idle` for the caveats.
        .worker_nice(config.worker_nice)
        .worker_sched_idle(config.worker_sched_idle)
        .demand_window(config.demand_window)
        .scrape_budget(config.scrape_budget)
        .scrape_timeout_offset(config.timeout_offset)
        // Failures of walks whose scrape left (budget spent) go to stderr, once each.
        .on_orphan(OrphanHandler::new(|report| eprintln!("orphaned: {report}")))
        .status_note(cardinality.note());
    exporter = cli::web_config(exporter, &config)?; // --web.config.file: auth, headers, limit, TLS
    if !config.cache_ttl.is_zero() {
        exporter = exporter.coalesce(config.cache_ttl); // one walk per TTL, shared
    }
    let exporter = exporter.build()?;
    let serving = listeners::serve(&exporter, &config)?; // one `listening on` line each
    let mut signals = Signals::new([Signal::Int, Signal::Term])?;
    let signalled = async {
        signals.next().await;
        eprintln!("shutting down (again to exit at once)");
        exporter.shutdown(); // refuse newcomers; let connections and walks finish
        signals.next().await;
        std::process::exit(130)
    };
    let walks = cardinality.walks(&exporter, &handle, config.cardinality_interval);
    let beside = future::zip(future::zip(registry::tick(gauges), signalled), walks);
    let beside = async {
        beside.await;
        future::pending().await
    };
    serving.or(beside).await
}
