//! The demos' server: `loopguard-exporter` on a thread of its own, serving the synthetic
//! [`Registry`], its render placed as a [`Mode`] says. Nothing here serves HTTP: the
//! connections, negotiation, slicing and status mapping are the crate's, so the storm, the
//! flood and the tests measure the code a user runs.
//!
//! - [`Mode::Loopguard`]: the crate as shipped (`Offload::Pool`);
//! - [`Mode::LoopguardCoalesced`]: the same with `coalesce(cache_ttl)`;
//! - [`Mode::Unbounded`], [`Mode::OnLoop`]: the crate's own baselines, `Offload::Unbounded`
//!   (`blocking::unblock` per scrape) and `Offload::OnLoop` (the render on the loop);
//! - [`Mode::Floor`]: the crate as shipped, but each walk sleeps as long as a real walk
//!   (render and gzip, timed at start) instead of rendering, and answers a few bytes: the
//!   loop then competes only with the client, the floor of what the others can reach.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use futures_lite::FutureExt as _;
use loopguard::orphan::OrphanHandler;
use loopguard::pool::RunError;
use loopguard_exporter::{Encoding, Format, GZIP_LEVEL, Offload, PROMETHEUS_TEXT, render_fn, walk};
use smol::Timer;

use crate::registry::{self, Registry, WalkKind};

pub use loopguard_exporter::POOL_NAME;

/// Where walks run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `Offload::Unbounded`: `blocking::unblock` for every walk, an unbounded queue.
    Unbounded,
    /// The crate as shipped: a loopguard pool, 503 + `Retry-After` when saturated.
    Loopguard,
    /// The crate with scrapes coalesced through a `Refresh` (needs a cache TTL).
    LoopguardCoalesced,
    /// `Offload::OnLoop`: every walk on the loop thread.
    OnLoop,
    /// The crate as shipped, each walk asleep for a real walk's time instead of rendering.
    Floor,
}

impl Mode {
    /// Every mode, in the storm's order.
    pub const ALL: [Mode; 5] = [
        Mode::Unbounded,
        Mode::Loopguard,
        Mode::LoopguardCoalesced,
        Mode::OnLoop,
        Mode::Floor,
    ];

    /// The name used in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Unbounded => "unbounded",
            Mode::Loopguard => "loopguard",
            Mode::LoopguardCoalesced => "loopguard_coalesced",
            Mode::OnLoop => "on_loop",
            Mode::Floor => "floor",
        }
    }

    /// The mode called `name`.
    pub fn from_name(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Whether walks run on the pool (and so have a class and a nice value).
    pub fn pooled(self) -> bool {
        matches!(
            self,
            Mode::Loopguard | Mode::LoopguardCoalesced | Mode::Floor
        )
    }
}

/// Everything the server can be told.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen; port 0 picks a free port.
    pub listen: SocketAddr,
    /// The pool's name (its `pool` label); tests that read gauges give each server its own.
    pub pool_name: String,
    /// Worker threads (and admission slots) of the pool.
    pub workers: usize,
    /// The workers' nice value (`ExporterBuilder::worker_nice`).
    pub worker_nice: u8,
    /// Whether the workers run in Linux's idle class (`ExporterBuilder::worker_sched_idle`).
    pub worker_sched_idle: bool,
    /// Gauge series in the registry: the size, and so the cost, of a walk.
    pub series: usize,
    /// A fixed blocking delay added to every walk.
    pub walk_delay: Duration,
    /// TTL of the coalescing cache ([`Mode::LoopguardCoalesced`]).
    pub cache_ttl: Duration,
    /// The budget of a scrape without a (valid) timeout header.
    pub scrape_budget: Duration,
    /// Taken off a valid scrape-timeout header.
    pub scrape_timeout_offset: Duration,
    /// The window of the pool's demand average.
    pub demand_window: Duration,
    /// Period of the background cardinality walk; zero turns it off.
    pub cardinality_interval: Duration,
    /// Where walks run.
    pub mode: Mode,
    /// `ExporterBuilder::header_read_timeout`.
    pub header_read_timeout: Duration,
    /// `ExporterBuilder::max_header_bytes`.
    pub max_header_bytes: usize,
    /// `ExporterBuilder::max_body_bytes`.
    pub max_body_bytes: usize,
    /// `ExporterBuilder::max_connections`.
    pub max_connections: usize,
    /// `ExporterBuilder::shutdown_grace`.
    pub shutdown_grace: Duration,
}

/// The default of `--worker-nice`, the crate's (BENCHMARKS.md, "Low-priority workers").
pub const DEFAULT_WORKER_NICE: u8 = 10;

/// The default of `--worker-class`, the crate's: `idle` (BENCHMARKS.md, "The idle class").
pub const DEFAULT_WORKER_SCHED_IDLE: bool = true;

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
            scrape_timeout_offset: Duration::from_millis(500),
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

/// The last background cardinality report.
#[derive(Debug, Clone, Default)]
pub struct Cardinality {
    /// Reports completed.
    pub runs: u64,
    /// Reports that failed.
    pub failures: u64,
    /// Series counted by the last report.
    pub series: usize,
    /// Metric families counted by the last report.
    pub families: usize,
    /// How long the last report waited for a slot and ran.
    pub took: Duration,
}

/// What the server's owner can read while it serves.
#[derive(Debug)]
pub struct Shared {
    exporter: loopguard_exporter::Exporter,
    registry: Arc<Registry>,
    config: Config,
    cardinality: Mutex<Cardinality>,
}

impl Shared {
    /// The exporter's pool.
    pub fn pool(&self) -> &loopguard::pool::Pool {
        self.exporter.pool()
    }

    /// The registry.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The last cardinality report.
    pub fn cardinality(&self) -> Cardinality {
        self.cardinality
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The exporter's loop lag (its default probe), read now.
    pub fn loop_lag(&self) -> Option<loopguard::lag::LagStats> {
        self.exporter.loop_lag().map(|lag| lag.stats())
    }

    /// Connections open now.
    pub fn connections(&self) -> usize {
        self.exporter.connections()
    }

    /// Connections closed so far to make room for newer ones.
    pub fn shed_connections(&self) -> u64 {
        self.exporter.shed_connections()
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }
}

/// A running server: the crate's exporter on a thread of its own.
#[derive(Debug)]
pub struct Exporter {
    addr: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl Exporter {
    /// Binds `config.listen` and serves `registry` on a new thread.
    pub fn spawn(config: Config, registry: Arc<Registry>) -> io::Result<Exporter> {
        let exporter = build(&config, &registry)?;
        let listener = TcpListener::bind(config.listen)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            exporter,
            registry,
            config,
            cardinality: Mutex::default(),
        });
        let (serving, (called, ready)) = (shared.clone(), std::sync::mpsc::channel());
        let thread = std::thread::Builder::new()
            .name("exporter-loop".into())
            .spawn(move || {
                let serve = serving.exporter.serve(listener); // the backlog is raised here
                let _ = called.send(());
                let beside = async {
                    futures_lite::future::zip(tick(&serving), cardinality_walks(&serving)).await;
                    futures_lite::future::pending().await
                };
                smol::block_on(serve.or(beside))
            })?;
        // The address is given out once the backlog is raised.
        let _ = ready.recv();
        Ok(Exporter {
            addr,
            shared,
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

    /// Shuts the exporter down and waits for its drain (at most about twice the grace).
    pub fn stop(mut self) -> io::Result<()> {
        self.shared.exporter.shutdown();
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(io::Error::other("the exporter loop panicked")),
            None => Ok(()),
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.shared.exporter.shutdown();
    }
}

/// The crate's exporter for `config`.
fn build(config: &Config, registry: &Arc<Registry>) -> io::Result<loopguard_exporter::Exporter> {
    let offload = match config.mode {
        Mode::Unbounded => Offload::Unbounded,
        Mode::OnLoop => Offload::OnLoop,
        Mode::Loopguard | Mode::LoopguardCoalesced | Mode::Floor => Offload::Pool,
    };
    let mut builder = loopguard_exporter::Exporter::builder()
        .pool_name(&config.pool_name)
        .workers(config.workers)
        .worker_nice(config.worker_nice)
        .worker_sched_idle(config.worker_sched_idle)
        .demand_window(config.demand_window)
        .scrape_budget(config.scrape_budget)
        .scrape_timeout_offset(config.scrape_timeout_offset)
        .offload(offload)
        .header_read_timeout(config.header_read_timeout)
        .max_header_bytes(config.max_header_bytes)
        .max_body_bytes(config.max_body_bytes)
        .max_connections(config.max_connections)
        .shutdown_grace(config.shutdown_grace)
        .on_orphan(OrphanHandler::new(|report| eprintln!("orphaned: {report}")));
    builder = match config.mode {
        Mode::Floor => {
            let asleep = real_walk_time(registry)?;
            let registry = registry.clone();
            builder.source(render_fn(PROMETHEUS_TEXT, move |buffer| {
                registry.sleep_walk(asleep);
                buffer
                    .extend_from_slice(b"# A floor walk: asleep as long as a real one.\nfloor 1\n");
                Ok(())
            }))
        }
        _ => {
            let registry = registry.clone();
            builder.source(render_fn(PROMETHEUS_TEXT, move |buffer| {
                registry.scrape_into(buffer)
            }))
        }
    };
    if config.mode == Mode::LoopguardCoalesced {
        builder = builder.coalesce(config.cache_ttl);
    }
    builder.build()
}

/// The median of three real scrape walks (render, then gzip as the storm asks), timed on
/// this thread before any load.
fn real_walk_time(registry: &Arc<Registry>) -> io::Result<Duration> {
    let handle = registry.handle().clone();
    let source = render_fn(PROMETHEUS_TEXT, move |buffer| {
        handle.render_to_write(buffer)
    });
    let mut times = Vec::new();
    for _ in 0..3 {
        let began = Instant::now();
        walk(&source, Format::PrometheusText, Encoding::Gzip, GZIP_LEVEL)?;
        times.push(began.elapsed());
    }
    times.sort();
    Ok(times[1])
}

/// Keeps values moving (1 % every 100 ms) and runs the recorder's upkeep every five
/// seconds, while the exporter serves.
async fn tick(shared: &Shared) {
    let mut ticks = 0_u64;
    while !shared.exporter.is_shut_down() {
        Timer::after(Duration::from_millis(100)).await;
        shared.registry.tick();
        ticks += 1;
        if ticks % 50 == 0 {
            shared.registry.handle().run_upkeep();
        }
    }
}

/// Every `cardinality_interval`, one walk that waits for a slot rather than failing.
#[allow(clippy::unneeded_struct_pattern)] // `Closed { .. }`: whatever fields it gains
async fn cardinality_walks(shared: &Shared) {
    let interval = shared.config.cardinality_interval;
    while !interval.is_zero() && !shared.exporter.is_shut_down() {
        Timer::after(interval).await;
        let began = Instant::now();
        let registry = shared.registry.clone();
        let count = move || registry::count_series(&registry.walk(WalkKind::Cardinality));
        shared.pool().publish_metrics();
        let walked = if shared.config.mode.pooled() {
            shared.pool().run(count).await
        } else {
            Ok(blocking::unblock(count).await)
        };
        let mut card = shared.cardinality.lock().unwrap_or_else(|e| e.into_inner());
        match walked {
            Ok((series, families)) => {
                card.runs += 1;
                card.series = series;
                card.families = families;
                card.took = began.elapsed();
            }
            Err(RunError::Closed { .. }) => return,
            Err(_) => card.failures += 1,
        }
    }
}
