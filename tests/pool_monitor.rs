//! The stuck monitor's arithmetic: `stuck_after` accepts any positive duration, so the
//! instant a job becomes stuck (its start plus the threshold) may not fit in an `Instant`.
//! The monitor must use checked arithmetic (a job that can never be stuck in time is never
//! reported) and keep running: `stuck_after(Duration::MAX)` must not kill its thread.

use std::time::{Duration, Instant};

use loopguard::pool::Pool;

/// Whether this process has a thread named `name`.
fn thread_alive(name: &str) -> bool {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(Result::ok)
        .any(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|comm| comm.trim_end() == name)
        })
}

#[test]
fn a_huge_stuck_threshold_does_not_kill_the_monitor() {
    let pool = Pool::builder()
        .name("rv-max")
        .workers(1)
        .stuck_after(Duration::MAX)
        .build()
        .expect("a positive threshold is accepted");
    // The thread names itself when it starts.
    let start = Instant::now();
    while !thread_alive("rv-max-monitor") {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no monitor thread"
        );
        std::thread::yield_now();
    }
    // A job that runs while the monitor looks: its start wakes the monitor (it slept
    // without a timeout), which computes the job's due instant. Give it two seconds to
    // die; a healthy monitor is asleep again long before.
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let job = pool
        .try_run(move || {
            let _ = rx.recv();
        })
        .unwrap();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(2) && thread_alive("rv-max-monitor") {
        std::thread::yield_now();
    }
    drop(tx);
    futures_lite::future::block_on(job).unwrap();
    assert!(
        thread_alive("rv-max-monitor"),
        "the monitor thread died on `Instant + Duration::MAX`"
    );
}
