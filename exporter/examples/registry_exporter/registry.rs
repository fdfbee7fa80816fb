//! The synthetic registry beside the exporter: `--series` gauges in the
//! metrics-exporter-prometheus recorder, a ticker keeping some moving, an optional delay per
//! walk, and the background cardinality walk.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use loopguard::pool::RunError;
use loopguard_exporter::{Exporter, Format, Source};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use smol::Timer;

/// Installs the recorder (histograms with buckets, so they render as histograms).
pub fn install() -> io::Result<PrometheusHandle> {
    let recorder = PrometheusBuilder::new().set_buckets(&[0.001, 0.01, 0.1, 1.0, 10.0]);
    let handle = recorder
        .and_then(|r| r.install_recorder())
        .map_err(io::Error::other)?;
    loopguard::telemetry::describe_metrics();
    Ok(handle)
}

/// `n` gauges with two labels.
pub fn series(n: usize) -> Vec<metrics::Gauge> {
    let labels = |i: usize| [("shard", (i % 64).to_string()), ("id", format!("{i:08x}"))];
    (0..n)
        .map(|i| metrics::gauge!("synthetic_registry_series", &labels(i)))
        .collect()
}

/// The recorder, each walk taking `--walk-delay-ms` longer (for tests and demos).
pub struct Delayed(pub PrometheusHandle, pub Duration);

impl Source for Delayed {
    fn content_type(&self, asked: Format) -> &'static str {
        self.0.content_type(asked)
    }

    fn render(&self, asked: Format, buffer: &mut Vec<u8>) -> io::Result<()> {
        std::thread::sleep(self.1);
        Source::render(&self.0, asked, buffer)
    }

    fn upkeep(&self) {
        self.0.upkeep();
    }
}

/// Keeps some values moving: 1 % of the gauges every 100 ms.
pub async fn tick(gauges: Vec<metrics::Gauge>) {
    let (n, step) = (gauges.len(), gauges.len() / 100 + 1);
    for round in 0_usize.. {
        Timer::after(Duration::from_millis(100)).await;
        for i in (round * step..round * step + step).filter(|_| n > 0) {
            gauges[i % n].set(fastrand::f64() * 100.0);
        }
    }
}

/// The last cardinality report, for the status page's first line.
#[derive(Clone, Default)]
pub struct Cardinality(Arc<Mutex<String>>);

impl Cardinality {
    pub fn note(&self) -> impl Fn() -> String + Send + Sync + 'static {
        let report = self.0.clone();
        move || report.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// Every `interval` (zero: never), a walk on the exporter's pool that waits for a slot
    /// rather than failing, until the pool closes.
    #[allow(clippy::unneeded_struct_pattern)] // `Closed { .. }`: whatever fields it gains
    pub async fn walks(&self, exporter: &Exporter, handle: &PrometheusHandle, interval: Duration) {
        while !interval.is_zero() && !exporter.is_shut_down() {
            Timer::after(interval).await;
            exporter.pool().publish_metrics();
            let handle = handle.clone();
            let count = move || {
                handle
                    .render()
                    .lines()
                    .filter(|l| !l.starts_with('#'))
                    .count()
            };
            let report = match exporter.pool().run(count).await {
                Ok(lines) => format!("cardinality: {lines} series"),
                Err(RunError::Closed { .. }) => return,
                Err(err) => format!("cardinality walk failed: {err}"),
            };
            *self.0.lock().unwrap_or_else(|e| e.into_inner()) = report;
        }
    }
}
