//! Review: what `Pool::wait_idle` and `Job::is_finished` promise about the outcome.
//!
//! `wait_idle` says it resolves once "every admitted job ... has finished and delivered its
//! outcome", and `is_finished` says "the job has finished and its outcome is ready to be
//! taken". Since the worker stores the outcome, releases the slot (waking `wait_idle`) and
//! only then publishes it, both can be true while a poll of the job still returns
//! `Pending`.
//!
//! The window is made deterministic, not widened by sleeps: the `wait_idle` waker, woken
//! on the worker thread by the slot's release, blocks that worker until the test has looked.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use common::Latch;
use loopguard::pool::Pool;
use loopguard::shield::Shield;

/// A waker that, when woken on a thread whose name starts with `thread_prefix`, says so on
/// `woken` and then blocks that thread until `go` opens.
struct Blocking {
    thread_prefix: &'static str,
    woken: Mutex<mpsc::Sender<()>>,
    go: Latch,
}

impl Wake for Blocking {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let on_it = std::thread::current()
            .name()
            .is_some_and(|n| n.starts_with(self.thread_prefix));
        if on_it {
            let _ = self.woken.lock().unwrap().send(());
            self.go.wait();
        }
    }
}

/// Opens the latch when dropped, so a failing assertion never leaves a thread blocked.
struct OpenOnDrop(Latch);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

fn poll_once<F: Future + Unpin>(fut: &mut F) -> Poll<F::Output> {
    let mut cx = Context::from_waker(Waker::noop());
    Pin::new(fut).poll(&mut cx)
}

#[test]
#[ignore = "review finding: wait_idle and is_finished are true before the outcome is published"]
fn after_wait_idle_the_outcome_can_be_taken() {
    common::watchdog(Duration::from_secs(60), || {
        let pool = Pool::builder()
            .name("idle-outcome")
            .workers(1)
            .build()
            .expect("a pool");
        let release = Latch::new();
        let go = Latch::new();
        let _unblock = OpenOnDrop(go.clone());
        let (tx, woken) = mpsc::channel();
        let waker = Waker::from(Arc::new(Blocking {
            thread_prefix: "idle-outcome-",
            woken: Mutex::new(tx),
            go: go.clone(),
        }));

        let r = release.clone();
        let mut job = pool
            .try_run(move || {
                r.wait();
                7_u32
            })
            .expect("an idle pool admits");
        let mut idle = Box::pin(pool.wait_idle());
        assert!(
            idle.as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending(),
            "the job is running"
        );
        release.open();
        // The worker gave the slot back and is waking `wait_idle`: from here on it is held
        // in that wake, before it publishes the outcome.
        woken
            .recv_timeout(Duration::from_secs(30))
            .expect("the release wakes wait_idle");
        assert!(poll_once(&mut idle).is_ready(), "the pool is idle");
        assert_eq!(pool.in_use(), 0);
        let finished = job.is_finished();
        let polled = poll_once(&mut job);
        assert!(
            polled.is_ready(),
            "wait_idle resolved (is_finished: {finished}) but the job's outcome cannot be taken"
        );
    });
}

#[test]
#[ignore = "review finding: Shielded::is_finished is true before the outcome can be taken"]
fn a_finished_shielded_handle_can_be_taken() {
    common::watchdog(Duration::from_secs(60), || {
        let shield = Shield::new("finished-handle");
        let go = Latch::new();
        let _unblock = OpenOnDrop(go.clone());
        let (tx, woken) = mpsc::channel();
        let waker = Waker::from(Arc::new(Blocking {
            thread_prefix: "shield-runner",
            woken: Mutex::new(tx),
            go: go.clone(),
        }));
        let (runner, mut handle) = shield.wrap(async { 3_u8 });
        let mut idle = Box::pin(shield.wait_idle());
        assert!(
            idle.as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        let runner_thread = std::thread::Builder::new()
            .name("shield-runner".to_string())
            .spawn(move || futures_lite::future::block_on(runner))
            .unwrap();
        woken
            .recv_timeout(Duration::from_secs(30))
            .expect("the runner's finish wakes wait_idle");
        assert!(poll_once(&mut idle).is_ready());
        assert_eq!(shield.in_flight(), 0);
        let finished = handle.is_finished();
        let polled = poll_once(&mut handle);
        go.open();
        runner_thread.join().unwrap();
        assert!(
            polled.is_ready(),
            "in_flight is 0 (is_finished: {finished}) but the handle's outcome cannot be taken"
        );
    });
}
