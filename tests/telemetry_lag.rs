//! The loop's series through a real `metrics-exporter-prometheus` recorder installed
//! globally (this binary of its own: a thread-local recorder misses other threads) and
//! through `telemetry::Collector` in a real prometheus-client `Registry`: the same
//! `loopguard_loop_lag_seconds{loop}` histogram (every sample the probe took, a stall in
//! the bucket above it) and `loopguard_loop_slow_polls_total{loop, task}` (a task's series
//! from its first instrumented future, with a zero), same names, labels, types, help and
//! values from both.

mod common;

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use async_io::Timer;
use common::bounded;
use common::exposition::{Samples, assert_same_samples, helps, samples, types};
use futures_lite::future::{self, block_on};
use loopguard::lag::LoopLag;
use loopguard::telemetry::{Collector, DURATION_BUCKETS};
use metrics_exporter_prometheus::PrometheusBuilder;
use prometheus_client::registry::Registry;

const LIMIT: Duration = Duration::from_secs(30);

fn value(samples: &Samples, name: &str, labels: &[(&str, &str)]) -> f64 {
    let key = (
        name.to_string(),
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    *samples
        .get(&key)
        .unwrap_or_else(|| panic!("no {key:?} in {samples:?}"))
}

/// Waits on timers until `lag` has `n` samples.
async fn until_samples(lag: &LoopLag, n: u64) {
    while lag.stats().samples < n {
        Timer::after(Duration::from_millis(1)).await;
    }
}

/// Holds the thread for `ms` in its one poll.
struct Hold(u64);

impl Future for Hold {
    type Output = ();

    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        std::thread::sleep(Duration::from_millis(self.0));
        Poll::Ready(())
    }
}

#[test]
fn the_loop_series_are_the_same_through_the_facade_and_the_collector() {
    let facade = PrometheusBuilder::new()
        .set_buckets(&DURATION_BUCKETS)
        .unwrap()
        .install_recorder()
        .expect("the only recorder of this binary");
    loopguard::telemetry::describe_metrics();
    let lag = LoopLag::new("main").unwrap();

    // A task instrumented but never slow has its series, at zero.
    block_on(lag.instrument("quick", Hold(0)));
    let text = facade.render();
    assert_eq!(
        value(
            &samples(&text, "loop", "main"),
            "loopguard_loop_slow_polls_total",
            &[("loop", "main"), ("task", "quick")]
        ),
        0.0,
        "{text}"
    );

    // The probe runs in the loop's task on this thread (the facade is global anyway); the
    // loop stalls for 80 ms once, and a task holds it 60 ms in one poll.
    block_on(bounded(
        LIMIT,
        future::or(
            async {
                until_samples(&lag, 3).await;
                std::thread::sleep(Duration::from_millis(80));
                let n = lag.stats().samples;
                until_samples(&lag, n + 1).await;
                lag.instrument("render", Hold(60)).await;
            },
            async {
                lag.probe().await;
                unreachable!()
            },
        ),
    ));
    // The probe is dropped: nothing changes between the two reads.
    let stats = lag.stats();
    let facade_text = facade.render();
    let mut registry = Registry::default();
    // Given twice (itself and a clone): read once.
    registry.register_collector(Box::new(Collector::new().lag(&lag).lag(&lag.clone())));
    let mut ours = String::new();
    prometheus_client::encoding::text::encode(&mut ours, &registry).unwrap();

    let (theirs, mine) = (
        samples(&facade_text, "loop", "main"),
        samples(&ours, "loop", "main"),
    );
    assert_same_samples(&theirs, &mine, (&facade_text, &ours));
    assert_eq!(helps(&facade_text), helps(&ours));
    assert_eq!(types(&facade_text), types(&ours));
    let loop_families = |set: BTreeSet<(String, String)>| {
        set.into_iter()
            .filter(|(name, _)| name.starts_with("loopguard_loop_"))
            .count()
    };
    assert_eq!(loop_families(helps(&ours)), 2, "{ours}");
    assert_eq!(loop_families(types(&ours)), 2, "{ours}");

    // The values are what happened.
    let lag_count = value(
        &mine,
        "loopguard_loop_lag_seconds_count",
        &[("loop", "main")],
    );
    assert_eq!(lag_count, stats.samples as f64, "every sample, once");
    let under_50ms = value(
        &mine,
        "loopguard_loop_lag_seconds_bucket",
        &[("loop", "main"), ("le", "0.05")],
    );
    assert!(
        under_50ms < lag_count,
        "the 80 ms stall is above 50 ms: {ours}"
    );
    assert!(value(&mine, "loopguard_loop_lag_seconds_sum", &[("loop", "main")]) >= 0.07);
    let slow = |task| {
        value(
            &mine,
            "loopguard_loop_slow_polls_total",
            &[("loop", "main"), ("task", task)],
        )
    };
    assert_eq!((slow("render"), slow("quick")), (1.0, 0.0), "{ours}");
    let lines = ours
        .lines()
        .filter(|l| l.starts_with("loopguard_loop_lag_seconds_count{"))
        .count();
    assert_eq!(lines, 1, "one source, once: {ours}");
}
