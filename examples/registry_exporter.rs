//! A Prometheus exporter on smol that survives scrape storms and connection floods.
//!
//! ```text
//! cargo run --release --example registry_exporter -- [--listen 127.0.0.1:9898] [--workers 2]
//!     [--series 10000] [--walk-delay-ms 0] [--cache-ttl-ms 0] [--scrape-budget-ms 30000]
//!     [--scrape-timeout-offset-ms 500] [--demand-window-ms 5000]
//!     [--cardinality-interval-ms 30000]
//! ```
//!
//! `/metrics` renders the registry (`--series` gauges, some kept moving) on the pool,
//! gzip-compressed there if asked, or answers 503 + `Retry-After` at once when no slot is
//! free. Its budget is the earliest of `--scrape-budget-ms` and the caller's own budgets less
//! the offset; past it: 503, and the walk keeps its slot until it ends. `/` shows the pool's
//! stats, `/healthz` never touches the pool, a background cardinality walk waits its turn.
//! No connection flood locks scrapers out: the listen backlog is the system's maximum, every
//! connection is accepted, over 10 000 the one idle the longest is closed, and a connection
//! holds no HTTP buffers before its first byte (10 s to start a head, 10 s to finish it).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::io::{self, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::{convert::Infallible, future::Future, rc::Rc, time::Duration};

use async_signal::{Signal, Signals};
use flate2::{Compression, write::GzEncoder};
use futures_lite::{FutureExt as _, StreamExt as _};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::{HeaderMap, Request, Response, server::conn::http1, service::service_fn};
use loopguard::Fallible;
use loopguard::deadline::Deadline;
use loopguard::header::request_deadline;
use loopguard::orphan::OrphanHandler;
use loopguard::pool::{Pool, RunError, TryRunError};
use loopguard::refresh::Refresh;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use smol::channel::{Receiver, Sender, bounded};
use smol::{Async, LocalExecutor, Timer};
use smol_hyper::rt::{FuturesIo, SmolTimer};

const USAGE: &str = "registry_exporter [--listen 127.0.0.1:9898] [--workers 2] [--series 10000] \
[--walk-delay-ms 0] [--cache-ttl-ms 0] [--scrape-budget-ms 30000] \
[--scrape-timeout-offset-ms 500] [--demand-window-ms 5000] [--cardinality-interval-ms 30000]";
const MAX_CONNECTIONS: usize = 10_000;
const EMFILE: i32 = rustix::io::Errno::MFILE.raw_os_error();
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// 3.5x smaller for an eighth of the render's time; higher levels save a few percent more for
/// up to twenty times that CPU, spent holding a slot (BENCHMARKS.md).
const GZIP_LEVEL: u32 = 1;

struct Config {
    listen: SocketAddr,
    workers: usize,
    series: usize,
    /// walk delay, cache TTL, scrape budget, timeout offset, demand window, cardinality
    ms: [Duration; 6],
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Config, String> {
    let names = "walk-delay cache-ttl scrape-budget scrape-timeout-offset demand-window";
    let names: Vec<_> = names.split(' ').chain(["cardinality-interval"]).collect();
    let ms = [0, 0, 30_000, 500, 5_000, 30_000].map(Duration::from_millis);
    let (listen, workers, series) = (([127, 0, 0, 1], 9898).into(), 2, 10_000);
    let mut c = Config {
        listen,
        workers,
        series,
        ms,
    };
    while let Some(arg) = args.next() {
        let (flag, value) = match arg.split_once('=') {
            Some((flag, value)) => (flag.to_string(), Some(value.to_string())),
            None => (arg, args.next()),
        };
        let value = value.ok_or(format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        let number = || value.parse::<u32>().map_err(|e| bad(&e));
        match flag.as_str() {
            "--listen" => c.listen = value.parse().map_err(|e| bad(&e))?,
            "--workers" => c.workers = number()? as usize,
            "--series" => c.series = number()?.min(100_000_000) as usize,
            _ => match names.iter().position(|n| flag == format!("--{n}-ms")) {
                Some(i) => c.ms[i] = Duration::from_millis(number()?.into()),
                None => return Err(format!("unknown flag `{flag}`")),
            },
        }
    }
    let max = loopguard::pool::MAX_WORKERS;
    if !(1..=max).contains(&c.workers) || c.ms[2].is_zero() || c.ms[4].is_zero() {
        return Err(format!("--workers: 1 to {max}; budget, window: above 0"));
    }
    Ok(c)
}

fn main() {
    if std::env::args().any(|a| a == "--help" || a == "-h") {
        return println!("usage: {USAGE}");
    }
    let config = parse(std::env::args().skip(1)).unwrap_or_else(|message| {
        eprintln!("error: {message}\n\nusage: {USAGE}");
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

/// Awaits `fut`, then gives `value`.
async fn then<T>(fut: impl Future, value: T) -> T {
    fut.await;
    value
}

struct App {
    config: Config,
    pool: Pool,
    handle: PrometheusHandle,
    cache: Option<Refresh<(Bytes, Bytes), String>>, // (plain, gzip)
    stop: Receiver<()>,                             // closed on shutdown
    idle: RefCell<BTreeMap<u64, Sender<()>>>,       // idle connections, the oldest first
    next: Cell<u64>,
    open: Cell<usize>,
    cardinality: RefCell<String>,
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
    let [delay, ttl, _, _, window, _] = config.ms;
    // Failures of walks whose scrape left (budget spent) go to stderr, once each.
    let orphaned = OrphanHandler::new(|report| eprintln!("orphaned: {report}"));
    let pool = Pool::builder().name("registry-serve").on_orphan(orphaned);
    let pool = pool.workers(config.workers).demand_window(window).build()?;
    let cache = (!ttl.is_zero()).then(|| {
        let handle = handle.clone();
        let both = move || walk(&handle, delay, false).and_then(|p| Ok((compress(&p)?, p)));
        let both = move || {
            both()
                .map(|(gzip, plain)| (plain, gzip))
                .map_err(|e| e.to_string())
        };
        Refresh::builder("registry").ttl(ttl).on_pool(&pool, both)
    });
    // std listens with a backlog of 128; listening again raises it to the system's maximum.
    let listener = TcpListener::bind(config.listen)?;
    rustix::net::listen(&listener, i32::MAX)?;
    let listener = Async::new(listener)?;
    println!("listening on http://{}", listener.get_ref().local_addr()?);
    let (stop_tx, stop) = bounded(1);
    let (alive, all_closed) = bounded::<()>(1); // every connection holds a clone of `alive`
    let (idle, next, open, cardinality) = Default::default();
    let app = App {
        config,
        pool,
        handle,
        cache,
        stop,
        idle,
        next,
        open,
        cardinality,
    };
    let (app, ex) = (Rc::new(app), LocalExecutor::new());
    ex.spawn(tick(gauges, app.clone())).detach();
    ex.spawn(cardinality_loop(app.clone())).detach();
    let mut signals = Signals::new([Signal::Int, Signal::Term])?;
    let accept = async {
        loop {
            match listener.accept().await {
                Ok((stream, _)) if app.open.get() < MAX_CONNECTIONS || shed_oldest_idle(&app) => {
                    ex.spawn(connection(app.clone(), stream, alive.clone()))
                        .detach();
                }
                Ok(_) => {} // every connection has a request in progress: drop this one
                // Out of file descriptors: make room.
                Err(e) if e.raw_os_error() == Some(EMFILE) && shed_oldest_idle(&app) => {}
                Err(_) => drop(Timer::after(Duration::from_millis(50)).await),
            }
        }
    };
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

fn shed_oldest_idle(app: &App) -> bool {
    let oldest = app.idle.borrow_mut().pop_first();
    oldest.map(|(_, conn)| conn.close()).is_some()
}

fn set_idle(app: &App, conn: &Sender<()>) -> u64 {
    let key = app.next.replace(app.next.get() + 1);
    app.idle.borrow_mut().insert(key, conn.clone());
    key
}

async fn connection(app: Rc<App>, stream: Async<TcpStream>, _alive: Sender<()>) {
    let _ = stream.get_ref().set_nodelay(true);
    let (conn, shed) = bounded::<()>(1); // `shed.recv()` ends once `conn` is closed
    let key = Cell::new(set_idle(&app, &conn));
    app.open.set(app.open.get() + 1);
    let ended = |on_stop| then(app.stop.recv(), on_stop).or(then(shed.recv(), false));
    // Nothing sent yet: no HTTP buffers until there is something to read.
    let first_byte = then(stream.readable(), true).or(then(Timer::after(HEAD_TIMEOUT), false));
    if first_byte.or(ended(false)).await {
        let service = service_fn(|request| {
            app.idle.borrow_mut().remove(&key.get()); // a request in progress: never shed
            let (app, conn, key) = (&app, &conn, &key);
            async move {
                let reply = handle(app, request).await;
                key.set(set_idle(app, conn));
                reply
            }
        });
        let mut http = http1::Builder::new();
        http.timer(SmolTimer::new())
            .header_read_timeout(HEAD_TIMEOUT);
        // At most 16 KiB of head (431 past it); smol's TcpStream shuts its write side on close,
        // so such an error reaches the client before the connection resets.
        let io = FuturesIo::new(smol::net::TcpStream::from(stream));
        let http = http.max_buf_size(16 << 10).serve_connection(io, service);
        let mut http = std::pin::pin!(http);
        if then(http.as_mut(), false).or(ended(true)).await {
            http.as_mut().graceful_shutdown(); // finish the request in flight
            let _ = http.await;
        }
    }
    app.idle.borrow_mut().remove(&key.get());
    app.open.set(app.open.get() - 1);
}

type Reply = Response<Full<Bytes>>;

fn reply(status: u16, body: impl Into<Bytes>) -> Reply {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or_default();
    response
}

async fn handle(app: &App, request: Request<Incoming>) -> Result<Reply, Infallible> {
    let deadline = deadline(request.headers(), &app.config); // the budget starts now
    let gzip = accepts_gzip(request.headers());
    let get = request.method() == hyper::Method::GET;
    // Read-side gauges, on the loop, before asking for a slot: a walk never counts itself.
    app.pool.publish_metrics();
    Ok(match request.uri().path() {
        "/" | "/metrics" | "/healthz" if !get => reply(405, "only GET\n"),
        "/healthz" => reply(200, "ok\n"),
        "/metrics" => metrics(app, deadline, gzip).await,
        "/" => {
            let (stats, cache) = (app.pool.stats(), app.cache.as_ref().map(Refresh::stats));
            let (open, card) = (app.open.get(), app.cardinality.borrow());
            reply(
                200,
                format!("{open} connections; {card}\n{stats:#?}\n{cache:#?}\n"),
            )
        }
        _ => reply(404, "not found\n"),
    })
}

async fn metrics(app: &App, deadline: Deadline, gzip: bool) -> Reply {
    let body = if let Some(cache) = &app.cache {
        match cache.get(deadline).await {
            Ok((plain, zipped)) => {
                if gzip {
                    zipped
                } else {
                    plain
                }
            }
            Err(err) => return reply(503, format!("no registry walk in time: {err}\n")),
        }
    } else {
        let (handle, delay) = (app.handle.clone(), app.config.ms[0]);
        // `Fallible`: if this scrape leaves, an `Err` of its walk is still reported.
        match app
            .pool
            .try_run(Fallible(move || walk(&handle, delay, gzip)))
        {
            // Past the deadline the job is dropped, orphaned: its walk keeps the slot.
            Ok(job) => match deadline.run(job).await {
                Ok(Ok(Ok(body))) => body,
                Ok(Ok(Err(err))) => return reply(500, format!("walk failed: {err}\n")),
                Ok(Err(panicked)) => return reply(500, format!("walk failed: {panicked}\n")),
                Err(_) => return reply(503, "budget spent; the walk goes on\n"),
            },
            Err(TryRunError::Saturated(busy)) => {
                let mut response = reply(503, "every registry-serve worker is busy\n");
                let retry_after = busy.retry_after_secs().into();
                response.headers_mut().insert(RETRY_AFTER, retry_after);
                return response;
            }
            Err(_) => return reply(503, "shutting down\n"),
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
    let interval = app.config.ms[5];
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
    let [_, _, budget, offset, ..] = config.ms;
    request_deadline(
        |name| headers.get(name).map(HeaderValue::as_bytes),
        budget,
        offset,
    )
}

fn accepts_gzip(headers: &HeaderMap) -> bool {
    let values = headers
        .get_all(ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok());
    let refused = |p: &str| {
        p.strip_prefix("q=")
            .is_some_and(|q| q.parse().map_or(true, |q: f32| q <= 0.0))
    };
    values.flat_map(|v| v.split(',')).any(|item| {
        let mut parts = item.split(';').map(str::trim);
        let gzip = parts
            .next()
            .is_some_and(|c| c.eq_ignore_ascii_case("gzip") || c == "*");
        gzip && !parts.any(refused)
    })
}
