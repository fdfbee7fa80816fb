//! The exporter's walks run below its loop: at `Config::worker_nice` (10 by default), read
//! with `getpriority` on the walking thread itself, while the loop keeps its own priority.
#![cfg(target_os = "linux")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use loopguard_demos::client;
use loopguard_demos::exporter::registry::Registry;
use loopguard_demos::exporter::{Config, DEFAULT_WORKER_NICE, Exporter};
use loopguard_demos::testing::run;
use rustix::process::getpriority_process;

fn nice() -> i32 {
    getpriority_process(None).expect("getpriority")
}

/// The nice values of the threads that walked for one scrape of an exporter whose workers
/// were given `worker_nice` (the default when `None`).
fn walked_at(pool_name: &str, worker_nice: Option<u8>) -> Vec<i32> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let registry = Registry::new(10, Duration::ZERO)
        .expect("the recorder installs")
        .with_hook(move |_| record.lock().unwrap().push(nice()));
    let mut config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        pool_name: pool_name.to_string(),
        workers: 2,
        cardinality_interval: Duration::ZERO,
        ..Config::default()
    };
    if let Some(n) = worker_nice {
        config.worker_nice = n;
    }
    let exporter = Exporter::spawn(config, Arc::new(registry)).expect("the exporter starts");
    run(async {
        let response = client::get(exporter.addr(), "/metrics", &[]).await.unwrap();
        assert_eq!(response.status, 200);
    });
    exporter.stop().expect("the exporter stops");
    seen.lock().unwrap().clone()
}

#[test]
fn scrapes_walk_below_the_loop_by_default() {
    let own = nice();
    assert!(
        own < i32::from(DEFAULT_WORKER_NICE),
        "this test needs a thread below nice 10"
    );
    assert_eq!(
        walked_at("priority-default", None),
        [i32::from(DEFAULT_WORKER_NICE)]
    );
    assert_eq!(walked_at("priority-off", Some(0)), [own]);
    assert_eq!(nice(), own, "the test's own thread keeps its priority");
}
