//! The storm tells a refusal from an expiry: a 503 with `Retry-After` (no free slot)
//! counts as `rejected`, a 504 (the scrape's budget ran out first) as `expired`.

use std::sync::Arc;
use std::time::Duration;

/// The header in which Envoy sends its route timeout, in milliseconds.
const ENVOY_TIMEOUT_HEADER: &str = "x-envoy-expected-rq-timeout-ms";
use loopguard_demos::registry::{Registry, WalkKind};
use loopguard_demos::server::{Config, Exporter};
use loopguard_demos::storm::{Load, drive};
use loopguard_demos::testing::Latch;

#[test]
fn refusals_and_budget_expiries_are_counted_apart() {
    // One worker; the first scrape's walk is held on a latch until the storm is over, so
    // it outlives its 50 ms budget (Envoy's 100 ms, half kept by the 500 ms offset) and
    // every other scrape finds the only slot taken.
    let held = Latch::new();
    let hold = held.clone();
    let registry = Registry::new(100, Duration::ZERO)
        .expect("the recorder installs")
        .with_hook(move |kind| {
            if kind == WalkKind::Scrape {
                hold.wait();
            }
        });
    let config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        pool_name: "storm-kinds".to_string(),
        workers: 1,
        cardinality_interval: Duration::ZERO,
        // The normal class: an idle-class walk could starve behind the test run's own busy
        // threads (worker_priority.rs checks the exporter's default).
        worker_sched_idle: false,
        ..Config::default()
    };
    let exporter = Exporter::spawn(config, Arc::new(registry)).expect("the exporter starts");
    let run = drive(
        exporter.addr(),
        Load::Burst(5),
        &[(ENVOY_TIMEOUT_HEADER, "100")],
    );
    held.open();
    let run = run.expect("the storm ran");
    assert_eq!(run.other, 0, "{:?}", run.other_kinds);
    assert_eq!(
        (run.served.len(), run.expired.len(), run.rejected.len()),
        (0, 1, 4),
        "one scrape admitted and expired, four refused"
    );
    exporter.stop().expect("the exporter stops");
}
