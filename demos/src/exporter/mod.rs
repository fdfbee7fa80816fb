//! The registry exporter's serving code with the offload switchable, for the storm and the
//! tests. The exporter to copy is the root crate's `examples/registry_exporter/`; this is
//! the same server with [`Mode`]s, walk counters and test hooks.
//!
//! One single-threaded loop (an `async_executor::LocalExecutor` driven by `smol::block_on`)
//! accepts connections ([`conns`]) and serves HTTP/1.1 with hyper through `smol-hyper`. The
//! registry ([`registry`]) is real: gauges in the process's `metrics-exporter-prometheus`
//! recorder, a loop-side ticker changing some of their values, `run_upkeep()` every five
//! seconds. Every walk (a `/metrics` scrape, the `/` status page, the background
//! cardinality report) is `render()` of that recorder, gzip-compressed on the same thread
//! when the scrape asks for it, run in one of four [`Mode`]s:
//!
//! - [`Mode::Loopguard`]: a `Pool` named `registry-serve`; HTTP handlers use `try_run` and
//!   answer 503 + `Retry-After` at once when no slot is free, 504 when the scrape's budget
//!   runs out first (its walk goes on; a proxy must not retry it), the cardinality walk
//!   waits with `run`;
//! - [`Mode::LoopguardCoalesced`]: as above, but `/metrics` goes through a `Refresh` named
//!   `registry` on that pool, so concurrent scrapes share one walk;
//! - [`Mode::Unbounded`]: `blocking::unblock` (`smol::unblock`) for every walk, the baseline
//!   that queues without bound;
//! - [`Mode::OnLoop`]: every walk on the loop thread itself, the baseline that offloads
//!   nothing.
//!
//! The pool's read-side gauges are published on the loop before a walk asks for its slot,
//! so a scrape never counts itself: an idle exporter reads `in_use 0`.

pub mod conns;
pub mod registry;
mod routes;
pub mod sliced;

pub use routes::serve;

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use event_listener::Event;
use futures_lite::future;
use hyper::body::Bytes;
use loopguard::deadline::{Deadline, Phase, Spent};
use loopguard::orphan::OrphanHandler;
use loopguard::pool::{Pool, RunError, TryRunError};
use loopguard::refresh::Refresh;
use loopguard::refresh::RefreshStats;
use smol::Timer;

use registry::{Encoding, Registry, WalkKind};

/// The default name of the pool every walk runs on (in the loopguard modes).
pub const POOL_NAME: &str = "registry-serve";

/// How registry walks are run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `blocking::unblock` for every walk: no admission control, an unbounded queue.
    Unbounded,
    /// A loopguard `Pool`: HTTP walks fail fast with 503 + `Retry-After` when saturated.
    Loopguard,
    /// A loopguard `Pool` with scrapes coalesced through a `Refresh` (needs a cache TTL).
    LoopguardCoalesced,
    /// Every walk on the loop thread: nothing offloaded.
    OnLoop,
}

impl Mode {
    /// The name used in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Unbounded => "unbounded",
            Mode::Loopguard => "loopguard",
            Mode::LoopguardCoalesced => "loopguard_coalesced",
            Mode::OnLoop => "on_loop",
        }
    }

    /// The mode called `name`.
    pub fn from_name(name: &str) -> Option<Mode> {
        [
            Mode::Unbounded,
            Mode::Loopguard,
            Mode::LoopguardCoalesced,
            Mode::OnLoop,
        ]
        .into_iter()
        .find(|m| m.name() == name)
    }
}

/// Everything the exporter can be told.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen; port 0 picks a free port.
    pub listen: SocketAddr,
    /// The pool's name (its `pool` label); tests that read gauges give each exporter its own.
    pub pool_name: String,
    /// Worker threads (and admission slots) of the pool.
    pub workers: usize,
    /// The nice value the pool's workers run at (`PoolBuilder::worker_nice`; 0: the
    /// loop's own): at 10 the loop wins the CPU over walks when both want it.
    pub worker_nice: u8,
    /// Whether the pool's workers run in Linux's idle scheduling class
    /// (`PoolBuilder::worker_sched_idle`): the loop then takes a CPU from a walk the moment
    /// it wakes.
    pub worker_sched_idle: bool,
    /// Gauge series in the registry: the size, and so the cost, of a walk.
    pub series: usize,
    /// A fixed blocking delay added to every walk.
    pub walk_delay: Duration,
    /// TTL of the coalescing cache; zero turns it off.
    pub cache_ttl: Duration,
    /// The budget of a scrape without a (valid) timeout header.
    pub scrape_budget: Duration,
    /// Taken off a valid scrape-timeout header for encoding and network.
    pub scrape_timeout_offset: Duration,
    /// The window of the pool's demand average.
    pub demand_window: Duration,
    /// Period of the background cardinality walk; zero turns it off.
    pub cardinality_interval: Duration,
    /// How walks run.
    pub mode: Mode,
    /// A client must start a request head within this time, and finish it within as long
    /// again (also bounds idle keep-alive connections and the body read).
    pub header_read_timeout: Duration,
    /// Largest request head hyper buffers (at least 8 KiB); larger heads get 431.
    pub max_header_bytes: usize,
    /// Largest request body read; larger bodies get 413.
    pub max_body_bytes: usize,
    /// Connections open at most; over it the one idle the longest is closed.
    pub max_connections: usize,
    /// On shutdown, how long in-flight requests and walks may take to finish.
    pub shutdown_grace: Duration,
}

/// The default of `--worker-nice`: walks run below the loop, so that refusals and
/// `/healthz` answer at once while every core renders (BENCHMARKS.md, "Low-priority
/// workers").
pub const DEFAULT_WORKER_NICE: u8 = 10;

/// The default of `--worker-class`: `idle`, walks in the idle scheduling class, so that the
/// loop takes a CPU from a walk as it wakes instead of waiting, at nice 10, for the next
/// scheduler tick (BENCHMARKS.md, "The idle class").
pub const DEFAULT_WORKER_SCHED_IDLE: bool = true;

/// The default of `--scrape-timeout-offset-ms`: half a second, Prometheus' own margin
/// between a scrape's timeout and the time it needs to read and parse the response.
pub const DEFAULT_SCRAPE_TIMEOUT_OFFSET: Duration = Duration::from_millis(500);

impl Default for Config {
    fn default() -> Config {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 9898)),
            pool_name: POOL_NAME.to_string(),
            workers: 2,
            worker_nice: DEFAULT_WORKER_NICE,
            worker_sched_idle: DEFAULT_WORKER_SCHED_IDLE,
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
            max_connections: 10_000,
            shutdown_grace: Duration::from_secs(5),
        }
    }
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

    /// Resolves to `true` after `period`, or to `false` as soon as the signal is triggered.
    pub async fn sleep(&self, period: Duration) -> bool {
        let tick = async {
            Timer::after(period).await;
            true
        };
        let stopped = async {
            self.wait().await;
            false
        };
        future::or(stopped, tick).await
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

/// One rendering in both encodings, as the coalescing cache keeps it.
#[derive(Debug, Clone)]
pub struct Rendered {
    /// The exposition text.
    pub plain: Bytes,
    /// The same, gzip-compressed.
    pub gzip: Bytes,
}

/// The state shared by the loop, its handlers and the exporter's owner.
pub struct Shared {
    config: Config,
    pool: Pool,
    registry: Arc<Registry>,
    cache: Option<Refresh<Rendered, String>>,
    cardinality: Mutex<Cardinality>,
    connections: AtomicUsize,
    shed: AtomicUsize,
    connection_closed: Event,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("config", &self.config)
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// Builds the pool and the cache around `registry`.
    pub fn new(config: Config, registry: Arc<Registry>) -> io::Result<Arc<Shared>> {
        if config.mode == Mode::LoopguardCoalesced && config.cache_ttl.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "coalescing needs a cache TTL above zero",
            ));
        }
        let pool = Pool::builder()
            .name(&config.pool_name)
            .workers(config.workers)
            .worker_nice(config.worker_nice)
            .worker_sched_idle(config.worker_sched_idle)
            .demand_window(config.demand_window)
            .on_orphan(OrphanHandler::new(|report| eprintln!("orphaned: {report}")))
            .build()?;
        let cache = (config.mode == Mode::LoopguardCoalesced).then(|| {
            let registry = registry.clone();
            Refresh::builder("registry")
                .ttl(config.cache_ttl)
                .on_pool(&pool, move || {
                    let plain = registry.walk(WalkKind::Scrape);
                    let gzip = registry::gzip(plain.as_bytes()).map_err(|e| e.to_string())?;
                    Ok(Rendered {
                        plain: plain.into(),
                        gzip: gzip.into(),
                    })
                })
        });
        Ok(Arc::new(Shared {
            config,
            pool,
            registry,
            cache,
            cardinality: Mutex::new(Cardinality::default()),
            connections: AtomicUsize::new(0),
            shed: AtomicUsize::new(0),
            connection_closed: Event::new(),
        }))
    }

    /// The pool.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The registry.
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

    /// Connections open now.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Connections closed so far to make room for newer ones.
    pub fn shed_connections(&self) -> usize {
        self.shed.load(Ordering::SeqCst)
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Runs `walk` as the mode says. `wait` chooses `run` (wait for a slot) over `try_run`
    /// (fail fast). The pool's read-side gauges are published first, on the loop, so the
    /// walk never counts itself.
    async fn offload<T, F>(&self, wait: bool, deadline: Deadline, walk: F) -> Walked<T>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        self.pool.publish_metrics();
        match self.config.mode {
            Mode::OnLoop => return Walked::Done(walk()),
            Mode::Unbounded => {
                return match deadline.run(smol::unblock(walk)).await {
                    Ok(output) => Walked::Done(output),
                    Err(_) => Walked::Expired,
                };
            }
            Mode::Loopguard | Mode::LoopguardCoalesced => {}
        }
        let outcome = if wait {
            self.pool.run_within(deadline, walk).await
        } else {
            match self.pool.try_run(walk) {
                Ok(job) => match deadline.run(job).await {
                    Ok(output) => output.map_err(RunError::Panicked),
                    // Dropping the job orphans it: the walk keeps its slot until it ends.
                    Err(_) => Err(RunError::Expired(Spent::new(Phase::Running))),
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

impl Exporter {
    /// Binds `config.listen` and starts the loop on a new thread.
    pub fn spawn(config: Config, registry: Arc<Registry>) -> io::Result<Exporter> {
        let listener = conns::bind(config.listen)?;
        let addr = listener.local_addr()?;
        let shared = Shared::new(config, registry)?;
        let stop = Stop::default();
        let thread = {
            let (shared, stop) = (shared.clone(), stop.clone());
            std::thread::Builder::new()
                .name("exporter-loop".into())
                .spawn(move || smol::block_on(serve(listener, shared, stop)))?
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

/// Every `cardinality_interval`, one walk that waits for a slot rather than failing.
async fn cardinality_loop(shared: Arc<Shared>, stop: Stop) {
    let interval = shared.config.cardinality_interval;
    if interval.is_zero() {
        return;
    }
    while stop.sleep(interval).await {
        let began = Instant::now();
        let registry = shared.registry.clone();
        let walk = move || registry::count_series(&registry.walk(WalkKind::Cardinality));
        let walked = shared.offload(true, Deadline::never(), walk).await;
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

/// The recorder's upkeep every five seconds, and the ticker that keeps values moving.
async fn upkeep_loop(registry: Arc<Registry>, stop: Stop) {
    let mut ticks = 0_u64;
    while stop.sleep(Duration::from_millis(100)).await {
        registry.tick();
        ticks += 1;
        if ticks % 50 == 0 {
            registry.handle().run_upkeep();
        }
    }
}

/// The `Accept-Encoding` of a request, read as [`Encoding::negotiate`] does. Several
/// header lines are one comma-separated list (RFC 9110, section 5.3).
fn encoding(headers: &hyper::HeaderMap) -> Encoding {
    let mut lines = headers.get_all(hyper::header::ACCEPT_ENCODING).iter();
    let Some(first) = lines.next() else {
        return Encoding::negotiate(None);
    };
    let mut joined = first.as_bytes().to_vec();
    for line in lines {
        joined.extend_from_slice(b", ");
        joined.extend_from_slice(line.as_bytes());
    }
    Encoding::negotiate(Some(&joined))
}
