//! `Pool::shutdown` always returns: when a waiter granted a slot is never polled again
//! (its executor stopped), and when it is called from the pool's own threads (inside a job,
//! inside an orphan handler). Each case runs under a watchdog: a hang fails the test.

mod common;

use std::future::Future;
use std::sync::mpsc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use common::{Latch, hold};
use futures_lite::future;
use loopguard::Fallible;
use loopguard::orphan::OrphanHandler;
use loopguard::pool::{Pool, RunError};

const WATCHDOG: Duration = Duration::from_secs(30);

/// Runs `test` under the shared watchdog.
fn watchdog(test: impl FnOnce() + Send + 'static) {
    common::watchdog(WATCHDOG, test);
}

#[test]
fn a_granted_waiter_never_polled_again_does_not_hold_up_shutdown() {
    watchdog(|| {
        let pool = Pool::builder().name("granted").workers(1).build().unwrap();
        let release = Latch::new();
        let holder = hold(&pool, &release);
        let mut run = Box::pin(pool.run(|| 1_u8));
        let mut cx = Context::from_waker(Waker::noop());
        assert!(run.as_mut().poll(&mut cx).is_pending());
        assert_eq!(pool.waiting(), 1);
        // The holder finishes: its slot is handed to the waiter, whose task is never polled
        // again (as if the loop had stopped).
        release.open();
        future::block_on(holder).unwrap();
        // The worker hands the slot over just after it delivered the holder's outcome.
        while pool.waiting() != 0 {
            std::thread::yield_now();
        }
        assert_eq!(
            (pool.in_use(), pool.waiting()),
            (1, 0),
            "granted, not yet claimed"
        );
        // `main` shuts the pool down before dropping the stopped executor's tasks.
        future::block_on(pool.shutdown());
        assert_eq!(pool.in_use(), 0, "the unclaimed slot was taken back");
        // The waiter, polled at last, only ever learns the pool closed.
        assert_eq!(
            run.as_mut().poll(&mut cx),
            Poll::Ready(Err(RunError::Closed))
        );
        assert_eq!(pool.in_use(), 0);
    });
}

#[test]
fn shutdown_from_inside_a_job_closes_and_returns() {
    watchdog(|| {
        let pool = Pool::builder()
            .name("self-stop")
            .workers(1)
            .build()
            .unwrap();
        let inner = pool.clone();
        let job = pool
            .try_run(move || {
                future::block_on(inner.shutdown());
                inner.is_closed()
            })
            .unwrap();
        assert_eq!(future::block_on(job), Ok(true));
        // From outside, shutdown waits for the threads as usual.
        future::block_on(pool.shutdown());
        assert!(pool.try_run(|| ()).unwrap_err().is_closed());
    });
}

#[test]
fn shutdown_from_an_orphan_handler_closes_and_returns() {
    watchdog(|| {
        let (seen, reported) = mpsc::channel();
        let slot: std::sync::Arc<std::sync::Mutex<Option<Pool>>> = Default::default();
        let target = slot.clone();
        let handler = OrphanHandler::new(move |_report| {
            let pool = target.lock().unwrap().clone();
            if let Some(pool) = pool {
                future::block_on(pool.shutdown());
                let _ = seen.send(pool.is_closed());
            }
        });
        let pool = Pool::builder()
            .name("handler-stop")
            .workers(1)
            .on_orphan(handler)
            .build()
            .unwrap();
        *slot.lock().unwrap() = Some(pool.clone());
        // Orphaned before it finishes, so the worker itself reports (and runs the handler).
        let release = Latch::new();
        let r = release.clone();
        let job = pool
            .try_run(Fallible(move || {
                r.wait();
                Err::<(), _>("expected failure")
            }))
            .unwrap();
        drop(job);
        release.open();
        assert_eq!(reported.recv_timeout(WATCHDOG), Ok(true));
        slot.lock().unwrap().take();
        future::block_on(pool.shutdown());
    });
}
