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

mod routes;

pub use routes::serve;

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
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use loopguard::deadline::Deadline;
use loopguard::header::{SCRAPE_TIMEOUT_HEADER, scrape_deadline};
use loopguard::orphan::OrphanHandler;
use loopguard::pool::{Pool, RunError, TryRunError};
use loopguard::refresh::Refresh;
use loopguard::refresh::RefreshStats;
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
        loopguard::telemetry::describe_metrics();
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
    async fn offload<T: Send + 'static>(
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
