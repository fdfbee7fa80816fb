//! A Prometheus exporter on smol that survives scrape storms and connection floods.
//!
//! ```text
//! cargo run --release --example registry_exporter -- [--listen 127.0.0.1:9898] [--workers 2]
//!     [--worker-nice 10] [--worker-class idle] [--series 10000] [--walk-delay-ms 0] [--cache-ttl-ms 0] [--scrape-budget-ms 30000]
//!     [--scrape-timeout-offset-ms 500] [--demand-window-ms 5000]
//!     [--cardinality-interval-ms 30000]
//! ```
//!
//! This file is the pattern; `cli.rs` parses the flags and `http.rs` is HTTP plumbing (it
//! keeps connection floods from locking scrapers out). `/metrics` renders the registry
//! (`--series` gauges, some kept moving) on the pool, gzip-compressed there if asked, or
//! answers 503 + `Retry-After` at once when no slot is free. Its budget is the earliest of
//! `--scrape-budget-ms` and the caller's own budgets, less the offset; past it: 504 (see
//! [`budget_spent`]), and the walk keeps its slot until it ends. `/` shows the pool's stats,
//! `/healthz` never touches the pool, and a background cardinality walk waits its turn.

mod cli;
mod http;

use std::io::{self, Write as _};
use std::{convert::Infallible, rc::Rc, time::Duration};

use async_signal::{Signal, Signals};
use cli::Config;
use flate2::{Compression, write::GzEncoder};
use futures_lite::{FutureExt as _, StreamExt as _};
use http::{Connections, Reply, accepts_gzip, reply, then};
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_ENCODING, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::{HeaderMap, Request};
use loopguard::Fallible;
use loopguard::deadline::Deadline;
use loopguard::header::request_deadline;
use loopguard::orphan::OrphanHandler;
use loopguard::pool::{Pool, RunError, TryRunError};
use loopguard::refresh::Refresh;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use smol::channel::{Receiver, bounded};
use smol::{LocalExecutor, Timer};

/// 3.5x smaller for an eighth of the render's time; higher levels save a few percent more for
/// up to twenty times that CPU, spent holding a slot (BENCHMARKS.md).
const GZIP_LEVEL: u32 = 1;

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

/// The blocking walk, run on a worker: the recorder's rendering, compressed if asked.
fn walk(handle: &PrometheusHandle, delay: Duration, gzip: bool) -> io::Result<Bytes> {
    std::thread::sleep(delay);
    let text = Bytes::from(handle.render());
    if gzip { compress(&text) } else { Ok(text) }
}

fn compress(text: &[u8]) -> io::Result<Bytes> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::new(GZIP_LEVEL));
    encoder.write_all(text)?;
    Ok(encoder.finish()?.into())
}

struct App {
    config: Config,
    pool: Pool,
    handle: PrometheusHandle,
    /// With `--cache-ttl-ms`: one walk per TTL, kept plain and gzipped.
    cache: Option<Refresh<(Bytes, Bytes), String>>,
    /// Closed on shutdown.
    stop: Receiver<()>,
    conns: Connections,
    cardinality: std::cell::RefCell<String>,
}

async fn run(config: Config) -> io::Result<()> {
    let recorder = PrometheusBuilder::new().set_buckets(&[0.001, 0.01, 0.1, 1.0, 10.0]);
    let handle = recorder
        .and_then(|r| r.install_recorder())
        .map_err(io::Error::other)?;
    loopguard::telemetry::describe_metrics();
    let labels = |i: usize| [("shard", (i % 64).to_string()), ("id", format!("{i:08x}"))];
    let gauge = |i| metrics::gauge!("synthetic_registry_series", &labels(i));
    let gauges: Vec<_> = (0..config.series).map(gauge).collect();
    // Failures of walks whose scrape left (budget spent) go to stderr, once each.
    let orphaned = OrphanHandler::new(|report| eprintln!("orphaned: {report}"));
    let pool = Pool::builder()
        .name("registry-serve")
        .workers(config.workers)
        // Walks run below the loop (Linux): refusals and /healthz answer while every
        // core renders. In the idle class the loop takes a CPU from a walk the moment it
        // wakes. See `PoolBuilder::worker_sched_idle` and `worker_nice` for the caveats.
        .worker_nice(config.worker_nice)
        .worker_sched_idle(config.worker_sched_idle)
        .demand_window(config.demand_window)
        .on_orphan(orphaned)
        .build()?;
    let cache = (!config.cache_ttl.is_zero()).then(|| {
        let (handle, delay) = (handle.clone(), config.walk_delay);
        let both = move || {
            let plain = walk(&handle, delay, false).map_err(|e| e.to_string())?;
            Ok((plain.clone(), compress(&plain).map_err(|e| e.to_string())?))
        };
        let ttl = config.cache_ttl;
        Refresh::builder("registry").ttl(ttl).on_pool(&pool, both)
    });
    let listener = http::listen(config.listen)?;
    println!("listening on http://{}", listener.get_ref().local_addr()?);
    let (stop_tx, stop) = bounded(1);
    let (alive, all_closed) = bounded::<()>(1); // every connection holds a clone of `alive`
    let conns = Connections::default();
    let cardinality = Default::default();
    let app = Rc::new(App {
        config,
        pool,
        handle,
        cache,
        stop,
        conns,
        cardinality,
    });
    let ex = LocalExecutor::new();
    ex.spawn(tick(gauges, app.clone())).detach();
    ex.spawn(cardinality_loop(app.clone())).detach();
    let mut signals = Signals::new([Signal::Int, Signal::Term])?;
    let accept = app.conns.accept(&listener, |stream| {
        let (app, alive) = (app.clone(), alive.clone());
        let serve = async move {
            let _alive = alive;
            let route = |request| route(&app, request);
            app.conns.serve(stream, &app.stop, route).await
        };
        ex.spawn(serve).detach();
    });
    ex.run(accept.or(then(signals.next(), ()))).await;
    eprintln!("shutting down (again to exit at once)");
    ex.spawn(async move { signals.next().await.map(|_| std::process::exit(130)) })
        .detach();
    drop((listener, stop_tx, alive)); // refuse newcomers; let connections finish
    let grace = || Deadline::after(Duration::from_secs(5));
    let _ = ex.run(grace().run(all_closed.recv())).await;
    app.pool.close();
    let _ = grace().run(app.pool.shutdown()).await;
    Ok(())
}

async fn route(app: &App, request: Request<Incoming>) -> Result<Reply, Infallible> {
    let deadline = deadline(request.headers(), &app.config); // the budget starts now
    let gzip = accepts_gzip(request.headers());
    // Read-side gauges, on the loop, before asking for a slot: a walk never counts itself.
    app.pool.publish_metrics();
    let get = request.method() == hyper::Method::GET;
    Ok(match request.uri().path() {
        "/" | "/metrics" | "/healthz" if !get => reply(405, "only GET\n"),
        "/healthz" => reply(200, "ok\n"),
        "/metrics" => metrics(app, deadline, gzip).await,
        "/" => {
            let (stats, cache) = (app.pool.stats(), app.cache.as_ref().map(Refresh::stats));
            let (open, card) = (app.conns.open(), app.cardinality.borrow());
            let page = format!("{open} connections; {card}\n{stats:#?}\n{cache:#?}\n");
            reply(200, page)
        }
        _ => reply(404, "not found\n"),
    })
}

async fn metrics(app: &App, deadline: Deadline, gzip: bool) -> Reply {
    let body = match &app.cache {
        Some(cache) => match cache.get(deadline).await {
            Ok((_, zipped)) if gzip => zipped,
            Ok((plain, _)) => plain,
            Err(err) if err.is_expired() => return budget_spent(),
            Err(err) => return reply(503, format!("no registry walk in time: {err}\n")),
        },
        None => {
            let (handle, delay) = (app.handle.clone(), app.config.walk_delay);
            // `Fallible`: if this scrape leaves, an `Err` of its walk is still reported.
            match app
                .pool
                .try_run(Fallible(move || walk(&handle, delay, gzip)))
            {
                // Past the deadline the job is dropped, orphaned: its walk keeps the slot.
                Ok(job) => match deadline.run(job).await {
                    Ok(Ok(Ok(body))) => body,
                    Ok(Ok(Err(err))) => return reply(500, format!("walk failed: {err}\n")),
                    Ok(Err(panic)) => return reply(500, format!("walk failed: {panic}\n")),
                    Err(_) => return budget_spent(),
                },
                Err(TryRunError::Saturated(busy)) => {
                    let mut response = reply(503, "every registry-serve worker is busy\n");
                    let retry_after = busy.retry_after_secs().into();
                    response.headers_mut().insert(RETRY_AFTER, retry_after);
                    return response;
                }
                Err(_) => return reply(503, "shutting down\n"),
            }
        }
    };
    let mut response = reply(200, body);
    let headers = response.headers_mut();
    let exposition = HeaderValue::from_static("text/plain; version=0.0.4");
    headers.insert(CONTENT_TYPE, exposition);
    headers.insert("vary", HeaderValue::from_static("accept-encoding"));
    if gzip {
        headers.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    response
}

/// The answer to a scrape whose budget ran out: `504`, never `503`, and no `Retry-After`.
///
/// A `503` + `Retry-After` says "no slot was free, nothing started". A spent budget is
/// different: the walk started and goes on holding its slot, and another attempt elsewhere
/// starts a second walk, as long as the first, that meets the same budget. Proxies choose retries by status
/// (Istio/Envoy `retryOn`, HAProxy `retry-on`, nginx `proxy_next_upstream`), not by
/// headers, so only a status of its own keeps them from retrying it; `504` ("no timely
/// answer from what this server was waiting on", here its worker) is the one that fits and
/// is outside every shipped retry list (`ops/`). Prometheus fails the scrape either way, and
/// its target page tells the two apart: 503 saturated, 504 walk longer than the budget.
fn budget_spent() -> Reply {
    reply(504, "budget spent; the walk goes on\n")
}

/// Keeps some values moving (1 % every 100 ms) and runs the recorder's upkeep every 5 s.
async fn tick(gauges: Vec<metrics::Gauge>, app: Rc<App>) {
    let (n, step) = (gauges.len(), gauges.len() / 100 + 1);
    for round in 0_usize.. {
        Timer::after(Duration::from_millis(100)).await;
        for i in (round * step..round * step + step).filter(|_| n > 0) {
            gauges[i % n].set(fastrand::f64() * 100.0);
        }
        if round % 50 == 0 {
            app.handle.run_upkeep();
        }
    }
}

/// The background cardinality walk: it waits for a slot rather than failing.
async fn cardinality_loop(app: Rc<App>) {
    let interval = app.config.cardinality_interval;
    let next = || then(Timer::after(interval), true).or(then(app.stop.recv(), false));
    while !interval.is_zero() && next().await {
        app.pool.publish_metrics();
        let handle = app.handle.clone();
        let count = move || {
            handle
                .render()
                .lines()
                .filter(|l| !l.starts_with('#'))
                .count()
        };
        *app.cardinality.borrow_mut() = match app.pool.run(count).await {
            Ok(lines) => format!("cardinality: {lines} series"),
            Err(RunError::Closed) => return,
            Err(err) => format!("cardinality walk failed: {err}"),
        };
    }
}

/// The earliest of the server's budget and each one the caller sent (Prometheus', Envoy's,
/// gRPC's), less the offset.
fn deadline(headers: &HeaderMap, config: &Config) -> Deadline {
    request_deadline(headers, config.scrape_budget, config.timeout_offset)
}
