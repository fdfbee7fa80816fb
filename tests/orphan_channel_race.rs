//! The orphan channel's receiver dropped while reports arrive (its own test binary: it
//! installs a counting global logger). Every report is received before the drop, logged by
//! the drop, or logged by the sender after it: none is lost, none is counted twice.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use futures_lite::future::block_on;
use loopguard::Fallible;
use loopguard::orphan::OrphanHandler;
use loopguard::shield::Shield;

/// Counts the orphan reports logged through it.
struct CountingLogger {
    reports: AtomicUsize,
}

impl log::Log for CountingLogger {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        if record.target() == "loopguard" && record.args().to_string().contains("orphaned work") {
            self.reports.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn flush(&self) {}
}

static LOGGER: CountingLogger = CountingLogger {
    reports: AtomicUsize::new(0),
};

const TRIALS: usize = 2_000;
const REPORTS: usize = 64;

#[test]
fn a_report_racing_the_receivers_drop_is_never_lost() {
    log::set_logger(&LOGGER).expect("no other logger in this binary");
    log::set_max_level(log::LevelFilter::Trace);
    let started = Instant::now();
    let mut trials = 0;
    let mut lossy = 0;
    while trials < TRIALS && started.elapsed() < Duration::from_secs(30) {
        let logged_before = LOGGER.reports.load(Ordering::SeqCst);
        let (handler, mut receiver) = OrphanHandler::channel(REPORTS * 2);
        let shield = Shield::with_handler("race", handler).unwrap();
        let go = Arc::new(Barrier::new(2));
        let sender = {
            let (shield, go) = (shield.clone(), go.clone());
            std::thread::spawn(move || {
                go.wait();
                for i in 0..REPORTS {
                    let (runner, handle) = shield.wrap(Fallible(async move { Err::<(), _>(i) }));
                    drop(handle);
                    block_on(runner);
                }
            })
        };
        go.wait();
        // Take a few, then drop the receiver somewhere in the middle of the stream.
        let mut received = 0;
        for _ in 0..(trials % 8) {
            if receiver.try_recv().is_some() {
                received += 1;
            }
            std::hint::spin_loop();
        }
        drop(receiver);
        sender.join().unwrap();
        let logged = LOGGER.reports.load(Ordering::SeqCst) - logged_before;
        assert_eq!(shield.orphaned_failures(), REPORTS as u64);
        assert!(received + logged <= REPORTS, "a report was counted twice");
        if received + logged < REPORTS {
            lossy += 1;
        }
        trials += 1;
    }
    assert!(trials >= 50, "only {trials} trials ran");
    assert_eq!(
        lossy, 0,
        "{lossy} of {trials} trials lost at least one report"
    );
}
