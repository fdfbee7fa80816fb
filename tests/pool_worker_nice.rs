//! `PoolBuilder::worker_nice`: each worker runs at the nice value it was given, read from
//! inside a job with `getpriority`; the thread that built the pool keeps its own; a worker
//! never runs above its builder; threads a job spawns inherit the worker's value.
#![cfg(target_os = "linux")]

mod common;

use std::io::ErrorKind;

use loopguard::pool::Pool;
use rustix::process::{getpriority_process, setpriority_process};

/// The calling thread's nice value (on Linux, `PRIO_PROCESS` with pid 0 is this thread).
fn nice() -> i32 {
    getpriority_process(None).expect("getpriority")
}

/// A nice value above the calling thread's own, so that a worker ignoring the setting
/// would read a different value.
fn target() -> u8 {
    let own = nice();
    assert!(
        own < 19,
        "the tests need a thread below nice 19, this one runs at {own}"
    );
    u8::try_from((own + 5).clamp(10, 19)).expect("0..=19")
}

on_every_executor!(
    async fn every_worker_runs_at_the_value_it_was_given() {
        let want = target();
        let loop_nice = nice();
        let pool = Pool::builder()
            .name("niced")
            .workers(2)
            .worker_nice(want)
            .build()
            .expect("a pool");
        // Both workers hold a job at once (a barrier inside the jobs), so each worker's
        // value is read, not the same one twice.
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
        let jobs: Vec<_> = (0..2)
            .map(|_| {
                let barrier = barrier.clone();
                pool.try_run(move || {
                    barrier.wait();
                    (std::thread::current().name().map(String::from), nice())
                })
                .expect("two free slots")
            })
            .collect();
        let mut names = Vec::new();
        for job in jobs {
            let (name, job_nice) = job.await.expect("the job ran");
            assert_eq!(job_nice, i32::from(want), "worker {name:?}");
            names.push(name);
        }
        names.sort();
        assert_eq!(
            names,
            [Some("niced-0".to_string()), Some("niced-1".to_string())]
        );
        assert_eq!(nice(), loop_nice, "the loop's thread keeps its priority");
    }
);

#[test]
fn the_default_leaves_workers_at_the_builders_value() {
    let own = nice();
    let pool = Pool::builder().workers(1).build().expect("a pool");
    let job_nice = futures_lite::future::block_on(pool.run(nice)).expect("the job ran");
    assert_eq!(job_nice, own);
}

#[test]
fn a_worker_never_runs_above_the_thread_that_built_the_pool() {
    // Built on a thread that already runs at 15, a pool asked for 12 keeps 15: lowering
    // a nice value would raise the workers above the loop (and needs privilege).
    let own = std::thread::spawn(|| {
        setpriority_process(None, 15).expect("raising one's own nice value needs no privilege");
        let pool = Pool::builder()
            .workers(1)
            .worker_nice(12)
            .build()
            .expect("a pool");
        let job_nice = futures_lite::future::block_on(pool.run(nice)).expect("the job ran");
        (nice(), job_nice)
    })
    .join()
    .expect("the builder thread");
    assert_eq!(own, (15, 15));
}

#[test]
fn threads_a_job_spawns_inherit_the_workers_value() {
    let want = target();
    let pool = Pool::builder()
        .workers(1)
        .worker_nice(want)
        .build()
        .expect("a pool");
    let spawned = futures_lite::future::block_on(
        pool.run(|| std::thread::spawn(nice).join().expect("the spawned thread")),
    )
    .expect("the job ran");
    assert_eq!(spawned, i32::from(want));
}

#[test]
fn values_above_19_are_refused() {
    for nice in [20, 40, u8::MAX] {
        let err = Pool::builder().worker_nice(nice).build().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{nice}");
        assert!(err.to_string().contains("nice"), "{err}");
    }
    Pool::builder()
        .workers(1)
        .worker_nice(19)
        .build()
        .expect("19 is the highest value");
}
