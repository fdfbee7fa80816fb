//! Review: what `Pool::wait_idle` and `Job::is_finished` promise about the outcome.
//!
//! `wait_idle` says it resolves once "every admitted job ... has finished and delivered its
//! outcome", and `is_finished` says "the job has finished and its outcome is ready to be
//! taken". The worker stores the outcome, releases the slot (waking `wait_idle`) and only
//! then publishes it: in between, neither may claim what a poll of the job would deny. The
//! same holds for a shield's runner, its `wait_idle` and `Shielded::is_finished`.
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
        assert_eq!(
            pool.in_use(),
            0,
            "the slot is back before the caller is woken"
        );
        let idle_now = poll_once(&mut idle).is_ready();
        let finished = job.is_finished();
        let takeable = match poll_once(&mut job) {
            Poll::Ready(out) => {
                assert_eq!(out, Ok(7));
                true
            }
            Poll::Pending => false,
        };
        assert!(
            takeable || !idle_now,
            "wait_idle resolved but the job's outcome cannot be taken"
        );
        assert!(
            takeable || !finished,
            "is_finished says so but the job's outcome cannot be taken"
        );
        go.open();
        if !takeable {
            futures_lite::future::block_on(idle);
            assert!(job.is_finished(), "idle: the outcome is published");
            assert_eq!(poll_once(&mut job), Poll::Ready(Ok(7)));
        }
    });
}

#[test]
fn a_finished_shielded_handle_can_be_taken() {
    common::watchdog(Duration::from_secs(60), || {
        let shield = Shield::new("finished-handle").unwrap();
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
        assert_eq!(
            shield.in_flight(),
            0,
            "counted out before the handle is woken"
        );
        let idle_now = poll_once(&mut idle).is_ready();
        let finished = handle.is_finished();
        let takeable = poll_once(&mut handle).is_ready();
        go.open();
        runner_thread.join().unwrap();
        assert!(
            takeable || !idle_now,
            "wait_idle resolved but the handle's outcome cannot be taken"
        );
        assert!(
            takeable || !finished,
            "is_finished says so but the handle's outcome cannot be taken"
        );
        futures_lite::future::block_on(idle);
        if !takeable {
            assert!(handle.is_finished());
            assert_eq!(poll_once(&mut handle), Poll::Ready(Ok(3)));
        }
    });
}
