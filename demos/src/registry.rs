//! The registry the demos serve: real gauge series in the process's
//! `metrics-exporter-prometheus` recorder, walk counters and test hooks around it.
//!
//! Nothing is formatted by hand: a scrape's walk is `render_to_write` of the installed
//! recorder into the buffer `loopguard-exporter` gives it, which holds `--series` gauges
//! with two labels (`shard`, `id`) next to loopguard's own metrics. The exporter crate
//! compresses it on the same worker ([`loopguard_exporter::walk`]).

use std::io::{self, Write as _};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use flate2::Compression;
use flate2::write::GzEncoder;
use hyper::body::Bytes;
pub use loopguard_exporter::{Encoding, Format, GZIP_LEVEL};
use metrics::Gauge;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// The name of the registry's gauges.
pub const SERIES_METRIC: &str = "synthetic_registry_series";

/// Histogram buckets, in seconds, for every histogram the recorder renders.
pub const BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// A scrape's body as the exporter's workers walk it: [`loopguard_exporter::walk`] of the
/// recorder (`render_to_write` into the buffer the thread keeps, gzip from it).
pub fn render_lean(handle: &PrometheusHandle, encoding: Encoding) -> io::Result<Bytes> {
    loopguard_exporter::walk(handle, Format::PrometheusText, encoding, GZIP_LEVEL).map(Bytes::from)
}

/// A scrape's body as it was rendered before the exporter's lean walk
/// ([`loopguard_exporter::walk`]): `render()` into a fresh `String`, then compressed from
/// it. Kept for `walk_cost`'s side by side.
pub fn render_plain(handle: &PrometheusHandle, encoding: Encoding) -> io::Result<Bytes> {
    let plain = handle.render();
    Ok(match encoding {
        Encoding::Identity => Bytes::from(plain),
        Encoding::Gzip => Bytes::from(gzip(plain.as_bytes())?),
        other => return Err(io::Error::other(format!("{other:?}: not measured before"))),
    })
}

/// Compresses `plain` with gzip at the exporter's level ([`GZIP_LEVEL`]).
pub fn gzip(plain: &[u8]) -> io::Result<Vec<u8>> {
    gzip_at(plain, GZIP_LEVEL)
}

/// Compresses `plain` with gzip at `level` (0 to 9).
pub fn gzip_at(plain: &[u8], level: u32) -> io::Result<Vec<u8>> {
    let mut encoder = GzEncoder::new(
        Vec::with_capacity(plain.len() / 8 + 64),
        Compression::new(level),
    );
    encoder.write_all(plain)?;
    encoder.finish()
}

/// The process-wide Prometheus recorder (installed once, on first use), with loopguard's
/// metric descriptions.
pub fn recorder() -> io::Result<PrometheusHandle> {
    static HANDLE: OnceLock<Result<PrometheusHandle, String>> = OnceLock::new();
    let installed = HANDLE.get_or_init(|| {
        let handle = PrometheusBuilder::new()
            .set_buckets(BUCKETS)
            .and_then(|b| b.install_recorder())
            .map_err(|e| format!("cannot install the Prometheus recorder: {e}"))?;
        loopguard::telemetry::describe_metrics();
        metrics::describe_gauge!(
            SERIES_METRIC,
            "A synthetic gauge; the registry's size sets the cost of a walk."
        );
        Ok(handle)
    });
    installed.clone().map_err(io::Error::other)
}

/// Registers `n` gauges named [`SERIES_METRIC`] in the installed recorder. Series `i` has
/// labels `shard` (`i % 64`) and `id` (eight hex digits, distinct for distinct `i`); the
/// same `i` always gives the same series.
pub fn register_series(n: usize) -> Vec<Gauge> {
    (0..n)
        .map(|i| {
            let gauge = metrics::gauge!(
                SERIES_METRIC,
                "shard" => (i % 64).to_string(),
                "id" => format!("{:08x}", (i as u32).wrapping_mul(2_654_435_761)),
            );
            gauge.set((i as f64).sqrt() * 1.5);
            gauge
        })
        .collect()
}

/// Counts series and metric families in a rendering.
pub fn count_series(rendering: &str) -> (usize, usize) {
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

/// What a walk is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalkKind {
    /// A `/metrics` scrape.
    Scrape,
    /// The background cardinality report.
    Cardinality,
}

type Hook = Box<dyn Fn(WalkKind) + Send + Sync>;

/// The registry: its gauges, an optional fixed delay per walk, a hook for tests, and
/// counters of the walks performed.
pub struct Registry {
    handle: PrometheusHandle,
    gauges: Vec<Gauge>,
    delay: Duration,
    hook: Option<Hook>,
    walks: [AtomicU64; 2],
    active: AtomicUsize,
    peak: AtomicUsize,
    ticks: AtomicU64,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("series", &self.gauges.len())
            .field("delay", &self.delay)
            .field("active", &self.active())
            .finish_non_exhaustive()
    }
}

impl Registry {
    /// Installs the recorder if needed and registers `series` gauges in it; every walk
    /// also sleeps `delay` (zero: none).
    pub fn new(series: usize, delay: Duration) -> io::Result<Registry> {
        let handle = recorder()?;
        Ok(Registry {
            handle,
            gauges: register_series(series),
            delay,
            hook: None,
            walks: Default::default(),
            active: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            ticks: AtomicU64::new(0),
        })
    }

    /// Calls `hook` on the walking thread at the start of every walk (tests block walks on
    /// a latch with it).
    pub fn with_hook(mut self, hook: impl Fn(WalkKind) + Send + Sync + 'static) -> Registry {
        self.hook = Some(Box::new(hook));
        self
    }

    /// The recorder's handle.
    pub fn handle(&self) -> &PrometheusHandle {
        &self.handle
    }

    /// Gauges registered by this registry.
    pub fn series(&self) -> usize {
        self.gauges.len()
    }

    /// Changes the values of the next 1 % of the gauges (at least one), round robin: the
    /// loop's ticker calls it, so successive walks render moving values.
    pub fn tick(&self) {
        let n = self.gauges.len();
        if n == 0 {
            return;
        }
        let round = self.ticks.fetch_add(1, Ordering::Relaxed);
        let step = (n / 100).max(1);
        let start = (round as usize).wrapping_mul(step) % n;
        for i in (start..start + step).map(|i| i % n) {
            self.gauges[i].set(fastrand::f64() * 100.0);
        }
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

    /// One full walk: the recorder's rendering (`render()`). Blocking.
    pub fn walk(&self, kind: WalkKind) -> String {
        self.walk_with(kind, PrometheusHandle::render)
    }

    /// One full walk, rendered by `render`: counted, hooked and delayed as configured.
    fn walk_with<T>(&self, kind: WalkKind, render: impl FnOnce(&PrometheusHandle) -> T) -> T {
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
        render(&self.handle)
    }

    /// A [`Mode::Floor`](crate::server::Mode::Floor) scrape's walk: counted and hooked as
    /// a scrape, then asleep for `asleep` instead of rendering. Blocking.
    pub fn sleep_walk(&self, asleep: Duration) {
        self.walk_with(WalkKind::Scrape, |_| std::thread::sleep(asleep));
    }

    /// The fixed delay every walk adds.
    pub fn delay(&self) -> Duration {
        self.delay
    }

    /// A scrape's walk: the rendering appended to `buffer` (the exporter's, kept per
    /// worker), counted, hooked and delayed as configured. Blocking.
    pub fn scrape_into(&self, buffer: &mut Vec<u8>) -> io::Result<()> {
        self.walk_with(WalkKind::Scrape, |handle| handle.render_to_write(buffer))
    }
}
