//! The serving code of the registry exporter, shared by `examples/registry_exporter.rs`,
//! `examples/storm.rs` and `tests/exporter.rs`.
//!
//! One single-threaded loop (an `async_executor::LocalExecutor` driven by `smol::block_on`)
//! accepts connections and serves HTTP/1.1 with hyper through `smol-hyper`. Every registry
//! walk (a `/metrics` scrape, the `/` status page, the background cardinality report) runs
//! off the loop, in one of three [`Mode`]s:
//!
//! - [`Mode::Unbounded`]: `blocking::unblock` (`smol::unblock`) for every walk, the baseline
//!   that queues without bound;
//! - [`Mode::Loopguard`]: a `Pool` named `registry-serve`; HTTP handlers use `try_run` and
//!   answer 503 + `Retry-After` at once when no slot is free, the cardinality walk waits with
//!   `run`;
//! - [`Mode::LoopguardCoalesced`]: as above, but `/metrics` goes through a `Refresh` named
//!   `registry` on that pool, so concurrent scrapes share one walk.
#![allow(dead_code)]

use std::convert::Infallible;
use std::fmt::Write as _;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use event_listener::Event;
use futures_lite::future;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE, RETRY_AFTER};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use loopguard::header::{scrape_deadline, SCRAPE_TIMEOUT_HEADER};
use loopguard::refresh::RefreshStats;
use loopguard::{Deadline, OrphanHandler, Pool, Refresh, RunError, TryRunError};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use smol::net::{TcpListener, TcpStream};
use smol::{LocalExecutor, Timer};
use smol_hyper::rt::{FuturesIo, SmolTimer};

/// The pool every walk runs on (in the loopguard modes).
pub const POOL_NAME: &str = "registry-serve";

/// Histogram buckets, in seconds, for every histogram the recorder renders.
pub const BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// How registry walks are run off the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `blocking::unblock` for every walk: no admission control, an unbounded queue.
    Unbounded,
    /// A loopguard `Pool`: HTTP walks fail fast with 503 + `Retry-After` when saturated.
    Loopguard,
    /// A loopguard `Pool` with scrapes coalesced through a `Refresh` (needs a cache TTL).
    LoopguardCoalesced,
}

impl Mode {
    /// The name used in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Unbounded => "unbounded",
            Mode::Loopguard => "loopguard",
            Mode::LoopguardCoalesced => "loopguard_coalesced",
        }
    }
}

/// Everything the exporter can be told.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Worker threads (and admission slots) of the `registry-serve` pool.
    pub workers: usize,
    /// Synthetic series in the registry: the size, and so the cost, of a walk.
    pub series: usize,
    /// A fixed blocking delay added to every walk.
    pub walk_delay: Duration,
    /// TTL of the coalescing cache; zero turns it off.
    pub cache_ttl: Duration,
    /// The budget of a scrape without a (valid) scrape-timeout header.
    pub scrape_budget: Duration,
    /// Taken off a valid `X-Prometheus-Scrape-Timeout-Seconds` for encoding and network.
    pub scrape_timeout_offset: Duration,
    /// The window of the pool's demand average.
    pub demand_window: Duration,
    /// Period of the background cardinality walk; zero turns it off.
    pub cardinality_interval: Duration,
    /// How walks run.
    pub mode: Mode,
    /// A client must send a whole request head within this time (also bounds idle
    /// keep-alive connections and the body read).
    pub header_read_timeout: Duration,
    /// Largest request head hyper buffers (at least 8 KiB); larger heads get 431.
    pub max_header_bytes: usize,
    /// Largest request body read; larger bodies get 413.
    pub max_body_bytes: usize,
    /// Connections served at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// On shutdown, how long in-flight requests and walks may take to finish.
    pub shutdown_grace: Duration,
}

/// The default of `--scrape-timeout-offset-ms`: half a second, Prometheus' own margin
/// between a scrape's timeout and the time it needs to read and parse the response.
pub const DEFAULT_SCRAPE_TIMEOUT_OFFSET: Duration = Duration::from_millis(500);

impl Default for Config {
    fn default() -> Config {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 9898)),
            workers: 2,
            series: 10_000,
            walk_delay: Duration::ZERO,
            cache_ttl: Duration::ZERO,
            scrape_budget: Duration::from_secs(30),
            scrape_timeout_offset: DEFAULT_SCRAPE_TIMEOUT_OFFSET,
            demand_window: Duration::from_secs(5),
            cardinality_interval: Duration::from_secs(30),
            mode: Mode::Loopguard,
            header_read_timeout: Duration::from_secs(10),
            max_header_bytes: 16 * 1024,
            max_body_bytes: 64 * 1024,
            max_connections: 1024,
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

/// What a walk is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalkKind {
    /// A `/metrics` scrape.
    Scrape,
    /// The `/` status page.
    Status,
    /// The background cardinality report.
    Cardinality,
}

type Hook = Box<dyn Fn(WalkKind) + Send + Sync>;

/// The synthetic registry: `series` series rendered after the recorder's own, a fixed
/// delay, and counters of the walks performed.
pub struct Registry {
    series: usize,
    delay: Duration,
    hook: Option<Hook>,
    walks: [AtomicU64; 3],
    active: AtomicUsize,
    peak: AtomicUsize,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("series", &self.series)
            .field("delay", &self.delay)
            .field("active", &self.active())
            .finish_non_exhaustive()
    }
}

impl Registry {
    /// A registry of `series` synthetic series whose walks take at least `delay`.
    pub fn new(series: usize, delay: Duration) -> Registry {
        Registry {
            series,
            delay,
            hook: None,
            walks: Default::default(),
            active: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        }
    }

    /// Calls `hook` on the worker thread at the start of every walk (tests block walks
    /// on a latch with it).
    pub fn with_hook(mut self, hook: impl Fn(WalkKind) + Send + Sync + 'static) -> Registry {
        self.hook = Some(Box::new(hook));
        self
    }

    /// Walks started for `kind`.
    pub fn walks(&self, kind: WalkKind) -> u64 {
        self.walks[kind as usize].load(Ordering::SeqCst)
    }

    /// Walks running now.
    pub fn active(&self) -> usize {
        self.active.load(Ordering::SeqCst)
    }

    /// The most walks that ever ran at once.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }

    /// One full walk: the recorder's rendering plus the synthetic series. Blocking.
    pub fn walk(&self, kind: WalkKind, handle: &PrometheusHandle) -> String {
        struct Active<'a>(&'a AtomicUsize);
        impl Drop for Active<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.walks[kind as usize].fetch_add(1, Ordering::SeqCst);
        let now = self.active.fetch_add(1, Ordering::SeqCst) + 1;
        let _active = Active(&self.active);
        self.peak.fetch_max(now, Ordering::SeqCst);
        if let Some(hook) = &self.hook {
            hook(kind);
        }
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
        let mut out = handle.render();
        out.reserve(self.series * 64);
        out.push_str("# HELP synthetic_registry_series A synthetic series; the registry's size sets the cost of a walk.\n");
        out.push_str("# TYPE synthetic_registry_series gauge\n");
        for i in 0..self.series {
            // Label values and a float value per series, as a real registry formats them.
            let value = (i as f64).sqrt() * 1.5;
            let _ = writeln!(
                out,
                "synthetic_registry_series{{shard=\"{}\",id=\"{:08x}\"}} {}",
                i % 64,
                i.wrapping_mul(2_654_435_761),
                value
            );
        }
        out
    }
}

/// The process-wide Prometheus recorder (installed once, on first use) and loopguard's
/// metric descriptions.
pub fn recorder() -> io::Result<PrometheusHandle> {
    static HANDLE: OnceLock<Result<PrometheusHandle, String>> = OnceLock::new();
    let installed = HANDLE.get_or_init(|| {
        let handle = PrometheusBuilder::new()
            .set_buckets(BUCKETS)
            .and_then(|b| b.install_recorder())
            .map_err(|e| format!("cannot install the Prometheus recorder: {e}"))?;
        loopguard::metrics::describe_metrics();
        Ok(handle)
    });
    installed.clone().map_err(io::Error::other)
}

/// A one-shot stop signal, shared by the loop, its connections and whoever stops it.
#[derive(Debug, Clone, Default)]
pub struct Stop {
    inner: Arc<(AtomicBool, Event)>,
}

impl Stop {
    /// Asks everything waiting on this signal to stop.
    pub fn trigger(&self) {
        self.inner.0.store(true, Ordering::SeqCst);
        self.inner.1.notify(usize::MAX);
    }

    /// Whether [`trigger`](Stop::trigger) was called.
    pub fn is_triggered(&self) -> bool {
        self.inner.0.load(Ordering::SeqCst)
    }

    /// Resolves once the signal is triggered.
    pub async fn wait(&self) {
        loop {
            if self.is_triggered() {
                return;
            }
            let listener = self.inner.1.listen();
            if self.is_triggered() {
                return;
            }
            listener.await;
        }
    }
}

/// The last background cardinality report.
#[derive(Debug, Clone, Default)]
pub struct Cardinality {
    /// Reports completed.
    pub runs: u64,
    /// Reports that failed (the walk panicked or the pool closed).
    pub failures: u64,
    /// Series counted by the last report.
    pub series: usize,
    /// Metric families counted by the last report.
    pub families: usize,
    /// How long the last report waited for a slot and ran.
    pub took: Duration,
}

/// The state shared by the loop, its handlers and the exporter's owner.
pub struct Shared {
    config: Config,
    pool: Pool,
    registry: Arc<Registry>,
    handle: PrometheusHandle,
    cache: Option<Refresh<Bytes, String>>,
    cardinality: Mutex<Cardinality>,
    connections: AtomicUsize,
    connection_closed: Event,
}

impl Shared {
    /// Builds the pool (after installing the recorder, so its series exist) and the cache.
    pub fn new(config: Config, registry: Arc<Registry>) -> io::Result<Arc<Shared>> {
        let handle = recorder()?;
        if config.mode == Mode::LoopguardCoalesced && config.cache_ttl.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "coalescing needs a cache TTL above zero",
            ));
        }
        let pool = Pool::builder()
            .name(POOL_NAME)
            .workers(config.workers)
            .demand_window(config.demand_window)
            .on_orphan(OrphanHandler::new(|report| eprintln!("orphaned: {report}")))
            .build()?;
        let cache = (config.mode == Mode::LoopguardCoalesced).then(|| {
            let (registry, handle, pool_handle) = (registry.clone(), handle.clone(), pool.clone());
            Refresh::builder("registry")
                .ttl(config.cache_ttl)
                .on_pool(&pool, move || {
                    pool_handle.publish_metrics();
                    Ok::<_, String>(Bytes::from(registry.walk(WalkKind::Scrape, &handle)))
                })
        });
        Ok(Arc::new(Shared {
            config,
            pool,
            registry,
            handle,
            cache,
            cardinality: Mutex::new(Cardinality::default()),
            connections: AtomicUsize::new(0),
            connection_closed: Event::new(),
        }))
    }

    /// The `registry-serve` pool.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The synthetic registry.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The last cardinality report.
    pub fn cardinality(&self) -> Cardinality {
        self.cardinality
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The coalescing cache's counters, in the coalesced mode.
    pub fn cache_stats(&self) -> Option<RefreshStats> {
        self.cache.as_ref().map(Refresh::stats)
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Runs one walk of `kind` off the loop, as the mode says. `wait` chooses `run` (wait
    /// for a slot) over `try_run` (fail fast). The walk's output is mapped by `then` on the
    /// worker thread.
    async fn offload<T: loopguard::JobOutput>(
        &self,
        kind: WalkKind,
        wait: bool,
        deadline: Deadline,
        then: fn(String) -> T,
    ) -> Walked<T> {
        let (registry, handle, pool) = (
            self.registry.clone(),
            self.handle.clone(),
            self.pool.clone(),
        );
        let walk = move || {
            // Refresh the read-side gauges so the walk renders current numbers.
            pool.publish_metrics();
            then(registry.walk(kind, &handle))
        };
        if self.config.mode == Mode::Unbounded {
            return match deadline.run(smol::unblock(walk)).await {
                Ok(output) => Walked::Done(output),
                Err(_) => Walked::Expired,
            };
        }
        let outcome = if wait {
            self.pool.run_within(deadline, walk).await
        } else {
            match self.pool.try_run(walk) {
                Ok(job) => match deadline.run(job).await {
                    Ok(output) => output.map_err(RunError::Panicked),
                    // Dropping the job orphans it: the walk keeps its slot until it ends.
                    Err(expired) => Err(RunError::Expired(expired)),
                },
                Err(TryRunError::Saturated(busy)) => {
                    return Walked::Busy(busy.retry_after_secs());
                }
                Err(_) => Err(RunError::Closed),
            }
        };
        match outcome {
            Ok(output) => Walked::Done(output),
            Err(RunError::Expired(_)) => Walked::Expired,
            Err(RunError::Panicked(p)) => Walked::Failed(p.to_string()),
            Err(_) => Walked::Closed,
        }
    }
}

/// How an offloaded walk ended.
enum Walked<T> {
    Done(T),
    Busy(u64),
    Expired,
    Failed(String),
    Closed,
}

/// A running exporter: its loop on a thread of its own.
#[derive(Debug)]
pub struct Exporter {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Stop,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("config", &self.config)
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

impl Exporter {
    /// Binds `config.listen` and starts the loop on a new thread.
    pub fn spawn(config: Config, registry: Arc<Registry>) -> io::Result<Exporter> {
        let listener = std::net::TcpListener::bind(config.listen)?;
        let addr = listener.local_addr()?;
        let shared = Shared::new(config, registry)?;
        let stop = Stop::default();
        let thread = {
            let (shared, stop) = (shared.clone(), stop.clone());
            std::thread::Builder::new()
                .name("exporter-loop".into())
                .spawn(move || {
                    let listener = TcpListener::try_from(listener)?;
                    smol::block_on(serve(listener, shared, stop))
                })?
        };
        Ok(Exporter {
            addr,
            shared,
            stop,
            thread: Some(thread),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The shared state (pool, registry, cardinality report).
    pub fn shared(&self) -> &Shared {
        &self.shared
    }

    /// The stop signal of this exporter's loop.
    pub fn stop_signal(&self) -> Stop {
        self.stop.clone()
    }

    /// Stops the loop and waits for it (at most about twice the shutdown grace).
    pub fn stop(mut self) -> io::Result<()> {
        self.stop.trigger();
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(io::Error::other("the exporter loop panicked")),
            None => Ok(()),
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.stop.trigger();
    }
}

/// Serves `listener` on the current thread until `stop` is triggered, then drains:
/// connections get `shutdown_grace` to finish, the pool as long again for its walks.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>, stop: Stop) -> io::Result<()> {
    let ex = LocalExecutor::new();
    ex.run(async {
        let listener = listener;
        ex.spawn(cardinality_loop(shared.clone(), stop.clone()))
            .detach();
        ex.spawn(upkeep_loop(shared.handle.clone(), stop.clone()))
            .detach();
        while let Some(accepted) = next_connection(&listener, &shared, &stop).await {
            match accepted {
                Ok(stream) => {
                    let _ = stream.set_nodelay(true);
                    shared.connections.fetch_add(1, Ordering::SeqCst);
                    ex.spawn(connection(stream, shared.clone(), stop.clone()))
                        .detach();
                }
                Err(err) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    eprintln!("accept failed: {err}");
                    Timer::after(Duration::from_millis(50)).await;
                }
            }
        }
        // New connections are refused from here on.
        drop(listener);
        let drained = async {
            loop {
                let listener = shared.connection_closed.listen();
                if shared.connections.load(Ordering::SeqCst) == 0 {
                    return;
                }
                listener.await;
            }
        };
        let _ = Deadline::after(shared.config.shutdown_grace)
            .run(drained)
            .await;
    })
    .await;
    // Connections still open past the grace are dropped with the executor.
    drop(ex);
    shared.pool.close();
    if Deadline::after(shared.config.shutdown_grace)
        .run(shared.pool.shutdown())
        .await
        .is_err()
    {
        eprintln!("walks still running after the shutdown grace; leaving them behind");
    }
    Ok(())
}

/// The next accepted connection, waiting while `max_connections` are open; `None` on stop.
async fn next_connection(
    listener: &TcpListener,
    shared: &Shared,
    stop: &Stop,
) -> Option<io::Result<TcpStream>> {
    let accept = async {
        loop {
            let closed = shared.connection_closed.listen();
            if shared.connections.load(Ordering::SeqCst) < shared.config.max_connections {
                break;
            }
            closed.await;
        }
        Some(listener.accept().await.map(|(stream, _)| stream))
    };
    future::or(
        async {
            stop.wait().await;
            None
        },
        accept,
    )
    .await
}

/// Serves one connection; on stop, finishes the request in flight and closes.
async fn connection(stream: TcpStream, shared: Arc<Shared>, stop: Stop) {
    struct Open<'a>(&'a Shared);
    impl Drop for Open<'_> {
        fn drop(&mut self) {
            self.0.connections.fetch_sub(1, Ordering::SeqCst);
            self.0.connection_closed.notify(usize::MAX);
        }
    }
    let _open = Open(&shared);
    let service = {
        let shared = shared.clone();
        service_fn(move |request| handle(shared.clone(), request))
    };
    let mut builder = http1::Builder::new();
    builder
        .timer(SmolTimer::new())
        .header_read_timeout(shared.config.header_read_timeout)
        .max_buf_size(shared.config.max_header_bytes.max(8192));
    let conn = builder.serve_connection(FuturesIo::new(stream), service);
    let mut conn = std::pin::pin!(conn);
    let finished = future::or(async { Some(conn.as_mut().await) }, async {
        stop.wait().await;
        None
    })
    .await;
    let result = match finished {
        Some(result) => result,
        None => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    // Clients that leave, time out or send garbage are routine; nothing to report.
    drop(result);
}

type Reply = Response<Full<Bytes>>;

fn reply(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Reply {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Reply {
    reply(status, "text/plain; charset=utf-8", body)
}

fn busy(retry_after_secs: u64, what: &str) -> Reply {
    let mut response = text(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("{what}: every {POOL_NAME} worker is busy; retry after {retry_after_secs}s\n"),
    );
    response
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(retry_after_secs));
    response
}

fn walk_failed(walked: Walked<impl Sized>, what: &str) -> Reply {
    match walked {
        Walked::Busy(secs) => busy(secs, what),
        Walked::Expired => text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{what}: the budget ran out before the registry walk finished\n"),
        ),
        Walked::Failed(message) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{what}: the registry walk failed: {message}\n"),
        ),
        Walked::Closed | Walked::Done(_) => text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{what}: shutting down\n"),
        ),
    }
}

/// Routes one request.
async fn handle(shared: Arc<Shared>, request: Request<Incoming>) -> Result<Reply, Infallible> {
    // The budget starts now, before the body read and any queue.
    let deadline = scrape_deadline(
        request
            .headers()
            .get(SCRAPE_TIMEOUT_HEADER)
            .map(HeaderValue::as_bytes),
        shared.config.scrape_budget,
        shared.config.scrape_timeout_offset,
    );
    let path = request.uri().path().to_string();
    if !matches!(path.as_str(), "/" | "/metrics" | "/healthz") {
        return Ok(text(StatusCode::NOT_FOUND, "not found\n"));
    }
    if request.method() != Method::GET {
        let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET"));
        return Ok(response);
    }
    // A GET has no use for a body; read (and bound) it anyway so the connection stays usable.
    let body = Limited::new(request.into_body(), shared.config.max_body_bytes);
    match Deadline::after(shared.config.header_read_timeout)
        .run(body.collect())
        .await
    {
        Ok(Ok(_)) => {}
        Ok(Err(err)) if err.downcast_ref::<LengthLimitError>().is_some() => {
            return Ok(text(
                StatusCode::PAYLOAD_TOO_LARGE,
                "request body too large\n",
            ));
        }
        Ok(Err(_)) | Err(_) => return Ok(text(StatusCode::BAD_REQUEST, "bad request body\n")),
    }
    Ok(match path.as_str() {
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/metrics" => metrics(&shared, deadline).await,
        _ => status_page(&shared, deadline).await,
    })
}

const EXPOSITION: &str = "text/plain; version=0.0.4; charset=utf-8";

async fn metrics(shared: &Shared, deadline: Deadline) -> Reply {
    if let Some(cache) = &shared.cache {
        return match cache.get(deadline).await {
            Ok(body) => reply(StatusCode::OK, EXPOSITION, body),
            Err(err) if err.is_expired() => walk_failed(Walked::<()>::Expired, "scrape"),
            Err(err) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("scrape: the registry walk failed: {err}\n"),
            ),
        };
    }
    match shared
        .offload(WalkKind::Scrape, false, deadline, |body| body)
        .await
    {
        Walked::Done(body) => reply(StatusCode::OK, EXPOSITION, body),
        other => walk_failed(other, "scrape"),
    }
}

/// The numbers the status page shows, read from one rendering of the registry.
#[derive(Debug, Default, Clone)]
struct PageStats {
    capacity: f64,
    in_use: f64,
    waiting: f64,
    demand: f64,
    rejected: f64,
    orphaned_failures: f64,
    oldest_job_seconds: f64,
    stuck_jobs: f64,
    series: usize,
    bytes: usize,
}

impl loopguard::JobOutput for PageStats {}

impl PageStats {
    /// Reads the pool's series (label `pool="registry-serve"`) out of a rendering.
    fn read(rendering: String) -> PageStats {
        use loopguard::metrics as m;
        let mut stats = PageStats {
            bytes: rendering.len(),
            ..PageStats::default()
        };
        let label = format!("pool=\"{POOL_NAME}\"");
        for line in rendering.lines().filter(|l| !l.starts_with('#')) {
            stats.series += 1;
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            if !series.contains(&label) {
                continue;
            }
            let name = series.split('{').next().unwrap_or_default();
            let value: f64 = value.parse().unwrap_or(0.0);
            let slot = match name {
                n if n == m::POOL_CAPACITY => &mut stats.capacity,
                n if n == m::POOL_IN_USE => &mut stats.in_use,
                n if n == m::POOL_WAITING => &mut stats.waiting,
                n if n == m::POOL_DEMAND_AVG => &mut stats.demand,
                n if n == m::POOL_REJECTED_TOTAL => &mut stats.rejected,
                n if n == m::ORPHANED_FAILURES_TOTAL => &mut stats.orphaned_failures,
                n if n == m::POOL_OLDEST_JOB_SECONDS => &mut stats.oldest_job_seconds,
                n if n == m::POOL_STUCK_JOBS_TOTAL => &mut stats.stuck_jobs,
                _ => continue,
            };
            *slot = value;
        }
        stats
    }
}

async fn status_page(shared: &Shared, deadline: Deadline) -> Reply {
    let stats = match shared
        .offload(WalkKind::Status, false, deadline, PageStats::read)
        .await
    {
        Walked::Done(stats) => stats,
        other => return walk_failed(other, "status page"),
    };
    let card = shared.cardinality();
    let config = &shared.config;
    let rows = [
        ("mode", config.mode.name().to_string()),
        ("capacity (workers)", stats.capacity.to_string()),
        ("in use", stats.in_use.to_string()),
        ("waiting", stats.waiting.to_string()),
        (
            "demand (avg over window)",
            format!("{:.3} over {:?}", stats.demand, config.demand_window),
        ),
        ("rejections", stats.rejected.to_string()),
        ("orphaned failures", stats.orphaned_failures.to_string()),
        (
            "oldest job age",
            format!("{:.3} s", stats.oldest_job_seconds),
        ),
        ("stuck jobs reported", stats.stuck_jobs.to_string()),
        ("series in this walk", stats.series.to_string()),
        ("bytes in this walk", stats.bytes.to_string()),
        (
            "cardinality reports",
            format!(
                "{} ({} failed); last: {} series in {} families, {:?}",
                card.runs, card.failures, card.series, card.families, card.took
            ),
        ),
    ];
    let mut html = String::from(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>registry exporter</title></head>\n<body><h1>registry exporter</h1>\n<table>\n",
    );
    for (name, value) in rows {
        let _ = writeln!(html, "<tr><th>{name}</th><td>{value}</td></tr>");
    }
    html.push_str("</table>\n<p><a href=\"/metrics\">/metrics</a> · <a href=\"/healthz\">/healthz</a></p>\n</body></html>\n");
    reply(StatusCode::OK, "text/html; charset=utf-8", html)
}

/// Counts series and metric families in a rendering.
fn count_series(rendering: String) -> (usize, usize) {
    let mut series = 0;
    let mut families = 0;
    for line in rendering.lines() {
        if line.starts_with("# TYPE ") {
            families += 1;
        } else if !line.starts_with('#') && !line.is_empty() {
            series += 1;
        }
    }
    (series, families)
}

/// Every `cardinality_interval`, one walk that waits for a slot rather than failing.
async fn cardinality_loop(shared: Arc<Shared>, stop: Stop) {
    let interval = shared.config.cardinality_interval;
    if interval.is_zero() {
        return;
    }
    loop {
        let tick = async {
            Timer::after(interval).await;
            true
        };
        let stopped = async {
            stop.wait().await;
            false
        };
        if !future::or(stopped, tick).await {
            return;
        }
        let began = Instant::now();
        let walked = shared
            .offload(WalkKind::Cardinality, true, Deadline::never(), count_series)
            .await;
        let mut card = shared
            .cardinality
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        match walked {
            Walked::Done((series, families)) => {
                card.runs += 1;
                card.series = series;
                card.families = families;
                card.took = began.elapsed();
            }
            Walked::Closed => return,
            _ => card.failures += 1,
        }
    }
}

/// Histogram upkeep for the recorder, every five seconds.
async fn upkeep_loop(handle: PrometheusHandle, stop: Stop) {
    loop {
        let tick = async {
            Timer::after(Duration::from_secs(5)).await;
            true
        };
        let stopped = async {
            stop.wait().await;
            false
        };
        if !future::or(stopped, tick).await {
            return;
        }
        handle.run_upkeep();
    }
}
