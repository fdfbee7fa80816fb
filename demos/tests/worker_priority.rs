//! The exporter's walks run below its loop: at `Config::worker_nice` (10 by default), read
//! with `getpriority` on the walking thread itself, and in the idle scheduling class unless
//! `Config::worker_sched_idle` says otherwise, read from `/proc/thread-self/stat`, while the
//! loop keeps its own priority and class.
#![cfg(target_os = "linux")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use loopguard_demos::client;
use loopguard_demos::registry::Registry;
use loopguard_demos::server::{Config, DEFAULT_WORKER_NICE, DEFAULT_WORKER_SCHED_IDLE, Exporter};
use loopguard_demos::testing::run;
use rustix::process::getpriority_process;

fn nice() -> i32 {
    getpriority_process(None).expect("getpriority")
}

/// The calling thread's scheduling class (`stat` field 41: 0 normal, 5 idle).
fn class() -> u32 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("/proc is mounted");
    let rest = &stat[stat.rfind(')').expect("a stat line") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    fields[41 - 3].parse().expect("policy")
}

/// The nice values and classes of the threads that walked for one scrape of an exporter
/// whose workers were given `worker_nice` and `worker_sched_idle` (the defaults when
/// `None`).
fn walked_at(
    pool_name: &str,
    worker_nice: Option<u8>,
    worker_sched_idle: Option<bool>,
) -> Vec<(i32, u32)> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let registry = Registry::new(10, Duration::ZERO)
        .expect("the recorder installs")
        .with_hook(move |_| record.lock().unwrap().push((nice(), class())));
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
    if let Some(idle) = worker_sched_idle {
        config.worker_sched_idle = idle;
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
    const { assert!(DEFAULT_WORKER_SCHED_IDLE) };
    let own_class = class();
    assert_eq!(own_class, 0, "this test needs a thread in the normal class");
    assert_eq!(
        walked_at("priority-default", None, None),
        [(i32::from(DEFAULT_WORKER_NICE), 5)]
    );
    assert_eq!(
        walked_at("priority-off", Some(0), Some(false)),
        [(own, own_class)]
    );
    assert_eq!(walked_at("priority-class-only", Some(0), None), [(own, 5)]);
    assert_eq!(
        (nice(), class()),
        (own, own_class),
        "the test's own thread keeps its priority and class"
    );
}
