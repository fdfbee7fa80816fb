//! A global logger that panics on every record (its own test binary: the logger is
//! process-wide). The default orphan handler logs; the stuck monitor reports through it;
//! an orphan channel whose receiver is gone falls back to it; a `Job` dropped after its
//! failure reports from the dropping thread. None of that may kill a worker or the monitor,
//! lose a count, panic into the caller, or hang `shutdown`.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Latch, bounded, quiet_expected_panics};
use futures_lite::future::block_on;
use loopguard::Fallible;
use loopguard::orphan::OrphanHandler;
use loopguard::pool::Pool;
use loopguard::shield::Shield;

const LIMIT: Duration = Duration::from_secs(10);

/// Records it was called, then panics.
struct PanickingLogger {
    calls: AtomicUsize,
}

impl log::Log for PanickingLogger {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, _: &log::Record<'_>) {
        self.calls.fetch_add(1, Ordering::SeqCst);
        panic!("expected logger boom")
    }

    fn flush(&self) {}
}

static LOGGER: PanickingLogger = PanickingLogger {
    calls: AtomicUsize::new(0),
};

fn install() {
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(log::LevelFilter::Trace);
    quiet_expected_panics();
}

/// Waits (bounded) until `f` holds: for state that has no event to wait on.
fn until(what: &str, f: impl Fn() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < LIMIT, "never: {what}");
        std::thread::yield_now();
    }
}

#[test]
fn the_default_handler_logging_into_a_panicking_logger_kills_no_worker() {
    install();
    let before = LOGGER.calls.load(Ordering::SeqCst);
    // One worker: if it dies, nothing ever runs again.
    let pool = Pool::builder()
        .workers(1)
        .on_orphan(OrphanHandler::log())
        .no_stuck_reports()
        .build()
        .unwrap();
    for round in 0..3u32 {
        drop(pool.try_run(move || -> u32 { panic!("expected job boom {round}") }));
        block_on(bounded(LIMIT, pool.wait_idle()));
    }
    assert!(
        LOGGER.calls.load(Ordering::SeqCst) >= before + 3,
        "the logger was not called"
    );
    assert_eq!(pool.orphaned_failures(), 3, "a report was not counted");
    assert_eq!(
        block_on(bounded(LIMIT, pool.run(|| 5))),
        Ok(5),
        "the worker died"
    );
    block_on(bounded(LIMIT, pool.shutdown()));
}

#[test]
fn dropping_a_failed_job_with_a_panicking_logger_does_not_panic() {
    install();
    let pool = Pool::builder()
        .workers(1)
        .no_stuck_reports()
        .build()
        .unwrap();
    let job = pool.try_run(Fallible(|| Err::<(), _>("lost"))).unwrap();
    block_on(bounded(LIMIT, pool.wait_idle()));
    // The report happens here, on this thread, into the panicking logger.
    drop(job);
    assert_eq!(pool.orphaned_failures(), 1);
    block_on(bounded(LIMIT, pool.shutdown()));
}

#[test]
fn the_stuck_monitor_survives_a_panicking_logger() {
    install();
    let pool = Pool::builder()
        .workers(1)
        .stuck_after(Duration::from_millis(20))
        .build()
        .unwrap();
    for expected in 1..=2u64 {
        let release = Latch::new();
        let r = release.clone();
        let job = pool.try_run(move || r.wait()).unwrap();
        // The monitor counts a stuck job, then logs it: the count shows it got that far.
        until("the job reported as stuck", || {
            pool.stats().stuck_jobs == expected
        });
        release.open();
        block_on(bounded(LIMIT, job)).unwrap();
    }
    block_on(bounded(LIMIT, pool.shutdown()));
}

#[test]
fn a_channel_without_receiver_falls_back_to_a_panicking_logger_safely() {
    install();
    let (handler, receiver) = OrphanHandler::channel(4);
    drop(receiver);
    let shield = Shield::with_handler("gone", handler).unwrap();
    let (runner, handle) = shield.wrap(Fallible(async { Err::<(), _>("nobody listens") }));
    drop(handle);
    block_on(runner);
    assert_eq!(shield.orphaned_failures(), 1);
}
