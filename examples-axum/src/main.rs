//! axum on smol (no tokio runtime) with loopguard's admission layer:
//!
//! ```text
//! cargo run -p loopguard-axum-example -- [--listen 127.0.0.1:9899] [--workers 2] [--series 10000]
//! curl -H 'X-Prometheus-Scrape-Timeout-Seconds: 10' http://127.0.0.1:9899/metrics
//! ```
//!
//! `--workers` scrapes render at once, on a pool of as many threads; the next one gets 503
//! with `Retry-After` at once. A scrape's budget is its timeout header less 500 ms, at most
//! 30 s.

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use loopguard::pool::Pool;
use loopguard_axum_example::{Registry, app};
use metrics_exporter_prometheus::PrometheusBuilder;
use smol::Async;

struct Args {
    listen: String,
    workers: usize,
    series: u64,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args {
        listen: "127.0.0.1:9899".into(),
        workers: 2,
        series: 10_000,
    };
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag}: missing value"))?;
        let number = |what: &str| {
            value
                .parse::<u64>()
                .map_err(|_| format!("{what}: not a number: {value:?}"))
        };
        match flag.as_str() {
            "--listen" => parsed.listen = value.clone(),
            "--workers" => parsed.workers = number("--workers")?.clamp(1, 64) as usize,
            "--series" => parsed.series = number("--series")?,
            _ => return Err(format!("unknown option {flag:?}")),
        }
    }
    Ok(parsed)
}

fn main() {
    if let Err(err) = run() {
        eprintln!("loopguard-axum-example: {err}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let args = parse(std::env::args().skip(1))?;
    // A real registry: the application installs the recorder, loopguard emits into it.
    let recorder = PrometheusBuilder::new()
        .set_buckets(&[0.001, 0.01, 0.1, 1.0, 10.0])
        .map_err(|e| e.to_string())?
        .build_recorder();
    let handle = Arc::new(recorder.handle());
    metrics::set_global_recorder(recorder).map_err(|e| e.to_string())?;
    loopguard::telemetry::describe_metrics();
    for shard in 0..args.series {
        metrics::counter!("catalog_items_total", "shard" => shard.to_string()).increment(shard);
    }
    let pool = Pool::builder()
        .name("registry-serve")
        .workers(args.workers)
        .build();
    let registry = Registry {
        pool: pool.map_err(|e| e.to_string())?,
        handle,
    };
    let router = app(
        registry,
        Duration::from_secs(30),
        Duration::from_millis(500),
    );

    let listener = TcpListener::bind(&args.listen).map_err(|e| format!("{}: {e}", args.listen))?;
    let listener = Async::new(listener).map_err(|e| e.to_string())?;
    let addr = listener.get_ref().local_addr().map_err(|e| e.to_string())?;
    println!("listening on http://{addr}");
    let ex = Arc::new(smol::Executor::new());
    smol::block_on(ex.run(smol_axum::serve(ex.clone(), listener, router)))
        .map_err(|e| e.to_string())
}
