//! A worker spins for its next job only when its jobs come back to back
//! ([`PoolBuilder::spin`](loopguard::pool::PoolBuilder::spin)): one whose jobs are spaced
//! out parks at once and burns no CPU between them.
//!
//! Measured by the worker thread's own CPU time, which each job reads from
//! `/proc/thread-self/schedstat` (Linux). The gaps between jobs are what is under test,
//! so they are made with `thread::sleep`; nothing is ordered by a sleep: every job is
//! awaited before the next is submitted. The spin is long (300 ms) so that a spinning
//! worker's CPU time stands far above the noise even on a loaded machine, where it yields
//! its core to others.
#![cfg(target_os = "linux")]

use std::thread;
use std::time::Duration;

use futures_lite::future::block_on;
use loopguard::pool::Pool;

const SPIN: Duration = Duration::from_millis(300);
const GAP: Duration = Duration::from_millis(400);

/// CPU time of the calling thread, or `None` on a kernel without schedstats.
fn thread_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let nanos = stat.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(nanos))
}

/// Whether this kernel tells a thread its CPU time; the tests skip (saying so) if not.
fn measurable() -> bool {
    let known = thread_cpu().is_some();
    if !known {
        eprintln!("skipped: /proc/thread-self/schedstat is not readable on this kernel");
    }
    known
}

/// Runs one job that reads its worker's CPU time at its start and end.
fn cpu_around_a_job(pool: &Pool) -> (Duration, Duration) {
    let cpu = || thread_cpu().expect("schedstat was readable");
    block_on(pool.run(move || {
        let start = cpu();
        (start, cpu())
    }))
    .expect("the job runs")
}

/// The worker's CPU time between the end of `before` and the start of `after`.
fn idle_cpu(before: (Duration, Duration), after: (Duration, Duration)) -> Duration {
    after.0.saturating_sub(before.1)
}

fn one_worker() -> Pool {
    Pool::builder()
        .name("spin")
        .workers(1)
        .spin(SPIN)
        .no_stuck_reports()
        .build()
        .expect("pool")
}

#[test]
fn a_worker_whose_jobs_are_spaced_out_parks_at_once() {
    if !measurable() {
        return;
    }
    let pool = one_worker();
    // The first gap may follow a job that came back to back with the worker's start.
    let _ = cpu_around_a_job(&pool);
    thread::sleep(GAP);
    let mut last = cpu_around_a_job(&pool);
    let mut spent = Duration::ZERO;
    for _ in 0..4 {
        thread::sleep(GAP);
        let next = cpu_around_a_job(&pool);
        spent += idle_cpu(last, next);
        last = next;
    }
    // A worker spinning after each of these jobs would spend up to 4 × 300 ms.
    assert!(
        spent < Duration::from_millis(60),
        "the worker spent {spent:?} of CPU between 4 spaced-out jobs"
    );
}

#[test]
fn a_worker_whose_jobs_come_back_to_back_spins_after_them() {
    if !measurable() {
        return;
    }
    let pool = one_worker();
    let mut spent = Duration::ZERO;
    for _ in 0..3 {
        // A run of back-to-back jobs, then a gap longer than the spin.
        let mut last = cpu_around_a_job(&pool);
        for _ in 0..20 {
            last = cpu_around_a_job(&pool);
        }
        thread::sleep(GAP);
        spent += idle_cpu(last, cpu_around_a_job(&pool));
    }
    // Each gap follows back-to-back jobs: the worker spins up to 300 ms in it.
    assert!(
        spent > Duration::from_millis(60),
        "the worker spent only {spent:?} of CPU in 3 gaps after back-to-back jobs"
    );
}

#[test]
fn a_worker_with_spinning_off_never_spins() {
    if !measurable() {
        return;
    }
    let pool = Pool::builder()
        .name("no-spin")
        .workers(1)
        .spin(Duration::ZERO)
        .no_stuck_reports()
        .build()
        .expect("pool");
    let mut spent = Duration::ZERO;
    for _ in 0..3 {
        let mut last = cpu_around_a_job(&pool);
        for _ in 0..20 {
            last = cpu_around_a_job(&pool);
        }
        thread::sleep(Duration::from_millis(100));
        spent += idle_cpu(last, cpu_around_a_job(&pool));
    }
    assert!(
        spent < Duration::from_millis(30),
        "the worker spent {spent:?} of CPU while parked"
    );
}
