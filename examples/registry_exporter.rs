//! A Prometheus exporter on smol that survives scrape storms.
//!
//! ```text
//! cargo run --release --example registry_exporter -- [--listen 127.0.0.1:9898] [--workers 2]
//!     [--series 10000] [--walk-delay-ms 0] [--cache-ttl-ms 0] [--scrape-budget-ms 30000]
//!     [--scrape-timeout-offset-ms 500] [--demand-window-ms 5000]
//!     [--cardinality-interval-ms 30000]
//! ```
//!
//! - `GET /metrics`: the registry walk (the recorder's rendering, loopguard's own metrics
//!   included, plus `--series` synthetic series) runs on the `registry-serve` pool. With no
//!   slot free: 503 at once with `Retry-After`. The budget is `--scrape-budget-ms`,
//!   shortened to `X-Prometheus-Scrape-Timeout-Seconds` minus `--scrape-timeout-offset-ms`
//!   when that header is valid; a scrape out of budget gets 503 while its walk keeps its slot
//!   until it ends. With `--cache-ttl-ms` above zero, scrapes share one walk per TTL.
//! - `GET /`: a status page whose numbers come from a walk on the same pool, gated the same way.
//! - `GET /healthz`: 200 without touching the pool.
//! - A background cardinality walk every `--cardinality-interval-ms` (0: off) waits for a slot.
//!
//! The offset defaults to 500 ms: Prometheus sends its whole scrape timeout, and the answer
//! still has to be encoded, sent and parsed within it. Ctrl-C or SIGTERM stops accepting,
//! lets requests in flight finish (5 s at most) and joins the pool; a second signal exits.

#[path = "support/cli.rs"]
mod cli;
#[path = "support/exporter.rs"]
mod exporter;

use std::sync::Arc;
use std::time::Duration;

use async_signal::{Signal, Signals};
use futures_lite::{StreamExt, future};

use exporter::{Config, Mode, Registry, Shared, Stop, serve};

const USAGE: &str = "registry_exporter [--listen 127.0.0.1:9898] [--workers 2] [--series 10000] \
[--walk-delay-ms 0] [--cache-ttl-ms 0] [--scrape-budget-ms 30000] \
[--scrape-timeout-offset-ms 500] [--demand-window-ms 5000] [--cardinality-interval-ms 30000]";

fn parse(mut args: cli::Args) -> Result<Config, String> {
    let mut config = Config::default();
    let ms = Duration::from_millis;
    while let Some(flag) = args.next_flag() {
        let (flag, inline) = flag?;
        match flag.as_str() {
            "--listen" => config.listen = args.value(&flag, inline)?,
            "--workers" => config.workers = args.value(&flag, inline)?,
            "--series" => config.series = args.value(&flag, inline)?,
            "--walk-delay-ms" => config.walk_delay = ms(args.value(&flag, inline)?),
            "--cache-ttl-ms" => config.cache_ttl = ms(args.value(&flag, inline)?),
            "--scrape-budget-ms" => config.scrape_budget = ms(args.value(&flag, inline)?),
            "--scrape-timeout-offset-ms" => {
                config.scrape_timeout_offset = ms(args.value(&flag, inline)?)
            }
            "--demand-window-ms" => config.demand_window = ms(args.value(&flag, inline)?),
            "--cardinality-interval-ms" => {
                config.cardinality_interval = ms(args.value(&flag, inline)?)
            }
            "--help" | "-h" => {
                println!("usage: {USAGE}");
                std::process::exit(0)
            }
            other => return Err(format!("unknown flag `{other}`")),
        }
    }
    if config.workers == 0 || config.workers > loopguard::pool::MAX_WORKERS {
        return Err(format!(
            "--workers must be between 1 and {}",
            loopguard::pool::MAX_WORKERS
        ));
    }
    if config.scrape_budget.is_zero() {
        return Err("--scrape-budget-ms must be above zero".into());
    }
    if config.demand_window.is_zero() {
        return Err("--demand-window-ms must be above zero".into());
    }
    if config.series > 100_000_000 {
        return Err("--series must be at most 100000000".into());
    }
    if !config.cache_ttl.is_zero() {
        config.mode = Mode::LoopguardCoalesced;
    }
    Ok(config)
}

fn main() {
    let config = match parse(cli::Args::from_env()) {
        Ok(config) => config,
        Err(message) => cli::fail(USAGE, &message),
    };
    if let Err(err) = run(config) {
        eprintln!("registry_exporter: {err}");
        std::process::exit(1);
    }
}

fn run(config: Config) -> std::io::Result<()> {
    smol::block_on(async {
        let mut signals = Signals::new([Signal::Int, Signal::Term])?;
        let listener = smol::net::TcpListener::bind(config.listen).await?;
        let registry = Arc::new(Registry::new(config.series, config.walk_delay));
        let shared = Shared::new(config, registry)?;
        println!("listening on http://{}", listener.local_addr()?);
        let stop = Stop::default();
        let watch = async {
            match signals.next().await {
                Some(Ok(signal)) => eprintln!("{signal:?}: shutting down (again to exit at once)"),
                Some(Err(err)) => eprintln!("signal handling failed ({err}): shutting down"),
                None => {}
            }
            stop.trigger();
            if signals.next().await.is_some() {
                std::process::exit(130);
            }
            future::pending::<std::io::Result<()>>().await
        };
        future::or(serve(listener, shared, stop.clone()), watch).await
    })
}
