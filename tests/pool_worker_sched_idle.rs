//! `PoolBuilder::worker_sched_idle`: each worker runs in Linux's idle scheduling class
//! (`SCHED_IDLE`), read from `/proc/thread-self/stat` inside a job; the thread that built
//! the pool keeps its own class; the nice value is kept alongside; threads a job spawns
//! inherit the class; the default leaves the class alone.
#![cfg(target_os = "linux")]

mod common;

use std::sync::{Arc, Barrier};

use loopguard::pool::Pool;
use rustix::process::{getpriority_process, setpriority_process};

/// `SCHED_OTHER` and `SCHED_IDLE`, as the kernel numbers them.
const NORMAL: u32 = 0;
const IDLE: u32 = 5;

/// The calling thread's scheduling class and nice value, as the kernel reports them
/// (`/proc/thread-self/stat`, fields 41 and 19), independently of how they were set.
fn class_and_nice() -> (u32, i32) {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("/proc is mounted");
    // The name (field 2) may hold spaces and parentheses: fields 3 on follow the last ')'.
    let rest = &stat[stat.rfind(')').expect("a stat line") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields[n - 3];
    (
        field(41).parse().expect("policy"),
        field(19).parse().expect("nice"),
    )
}

on_every_executor!(
    async fn every_worker_runs_in_the_idle_class() {
        let (loop_class, loop_nice) = class_and_nice();
        let pool = Pool::builder()
            .name("idle-class")
            .workers(2)
            .worker_sched_idle(true)
            .build()
            .expect("a pool");
        // Both workers hold a job at once, so each worker is read, not the same one twice.
        let barrier = Arc::new(Barrier::new(2));
        let jobs: Vec<_> = (0..2)
            .map(|_| {
                let barrier = barrier.clone();
                pool.try_run(move || {
                    barrier.wait();
                    (
                        std::thread::current().name().map(String::from),
                        class_and_nice(),
                    )
                })
                .expect("two free slots")
            })
            .collect();
        let mut names = Vec::new();
        for job in jobs {
            let (name, (class, nice)) = job.await.expect("the job ran");
            assert_eq!(class, IDLE, "worker {name:?}");
            assert_eq!(
                nice, loop_nice,
                "worker {name:?} keeps the builder's nice value"
            );
            names.push(name);
        }
        names.sort();
        assert_eq!(
            names,
            [
                Some("idle-class-0".to_string()),
                Some("idle-class-1".to_string())
            ]
        );
        assert_eq!(
            class_and_nice(),
            (loop_class, loop_nice),
            "the loop's thread keeps its class"
        );
    }
);

#[test]
fn the_default_leaves_workers_in_the_normal_class() {
    let pool = Pool::builder().workers(1).build().expect("a pool");
    let (class, _) = futures_lite::future::block_on(pool.run(class_and_nice)).expect("ran");
    assert_eq!(class, NORMAL);
    let pool = Pool::builder()
        .workers(1)
        .worker_sched_idle(false)
        .build()
        .expect("a pool");
    let (class, _) = futures_lite::future::block_on(pool.run(class_and_nice)).expect("ran");
    assert_eq!(class, NORMAL);
}

#[test]
fn the_nice_value_is_set_as_well() {
    let own = getpriority_process(None).expect("getpriority");
    assert!(
        own < 12,
        "this test needs a thread below nice 12, it runs at {own}"
    );
    let pool = Pool::builder()
        .workers(1)
        .worker_sched_idle(true)
        .worker_nice(12)
        .build()
        .expect("a pool");
    let seen = futures_lite::future::block_on(pool.run(class_and_nice)).expect("ran");
    assert_eq!(seen, (IDLE, 12));
}

#[test]
fn a_worker_keeps_the_nice_value_of_the_thread_that_built_the_pool() {
    // Entering the class resets the nice value where the process is privileged (as CI's
    // root is): the worker must still never run above the thread that built the pool.
    // Unprivileged, the reset fails and there is nothing to restore: this test can only
    // catch a missing restore when run as root.
    let (builder, worker) = std::thread::spawn(|| {
        setpriority_process(None, 15).expect("raising one's own nice value needs no privilege");
        let pool = Pool::builder()
            .workers(1)
            .worker_sched_idle(true)
            .build()
            .expect("a pool");
        let worker = futures_lite::future::block_on(pool.run(class_and_nice)).expect("ran");
        (class_and_nice(), worker)
    })
    .join()
    .expect("the builder thread");
    assert_eq!(builder, (NORMAL, 15));
    assert_eq!(worker, (IDLE, 15));
}

#[test]
fn threads_a_job_spawns_inherit_the_class() {
    let pool = Pool::builder()
        .workers(1)
        .worker_sched_idle(true)
        .build()
        .expect("a pool");
    let (class, _) = futures_lite::future::block_on(pool.run(|| {
        std::thread::spawn(class_and_nice)
            .join()
            .expect("the spawned thread")
    }))
    .expect("the job ran");
    assert_eq!(class, IDLE);
}
