//! Exhaustive interleavings of the hand-off's races, under loom (see the
//! [hand-off](super)'s docs): the runner's `deliver` or `abandon` against the handle's
//! `poll_take` and `orphan`.
//!
//! What every model checks: a failure is returned to the taker or handed to the orphan
//! handler exactly once (never both, never neither); a taker that saw `Pending` was woken
//! through the waker it registered last (no lost wake-up), and then sees the outcome.
//!
//! The reports are observed through the real [`Reporter`] with a callback handler that
//! counts them (the handler runs on the reporting thread; the count is read after `join`).

use super::*;
use crate::failure::never;
use crate::loom_util::flag;
use crate::orphan::OrphanHandler;
use loom::sync::atomic::AtomicBool;
use loom::thread;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Waker;

/// A hand-off of `u32` outputs (only a panic is a failure) and the count of the reports its
/// orphan handler received.
fn handoff() -> (loom::sync::Arc<Handoff<u32>>, Arc<AtomicUsize>) {
    let reports = Arc::new(AtomicUsize::new(0));
    let seen = reports.clone();
    let handler = OrphanHandler::new(move |_| {
        seen.fetch_add(1, Ordering::SeqCst);
    });
    let reporter = Arc::new(Reporter::new(
        crate::emit::LABEL_POOL,
        "model".into(),
        handler,
    ));
    (
        loom::sync::Arc::new(Handoff::new(never::<u32>, reporter)),
        reports,
    )
}

fn failure() -> Result<u32, Panicked> {
    Err(Panicked::new("boom".to_string()))
}

/// The runner delivers `result` on another thread.
fn spawn_deliver(
    handoff: &loom::sync::Arc<Handoff<u32>>,
    result: Result<u32, Panicked>,
) -> thread::JoinHandle<()> {
    let handoff = handoff.clone();
    thread::spawn(move || handoff.deliver(result, Duration::ZERO))
}

/// How many failures the taker got out of `taken`.
fn failures_taken(taken: &Taken<u32>) -> usize {
    usize::from(matches!(taken, Taken::Outcome(Err(_), _)))
}

fn poll(handoff: &Handoff<u32>, waker: &Waker) -> Poll<Taken<u32>> {
    handoff.poll_take(&mut Context::from_waker(waker), "model")
}

/// Delivery races the handle's drop: the failure is reported exactly once, by whichever
/// side comes second.
#[test]
fn deliver_races_orphan() {
    loom::model(|| {
        let (handoff, reports) = handoff();
        let runner = spawn_deliver(&handoff, failure());
        handoff.orphan();
        runner.join().unwrap();
        assert_eq!(reports.load(Ordering::SeqCst), 1);
    });
}

/// Delivery races the taker's first poll: it takes the failure at once, or it was woken
/// and takes it on the next poll; nothing is reported.
#[test]
fn deliver_races_take() {
    loom::model(|| {
        let (handoff, reports) = handoff();
        let runner = spawn_deliver(&handoff, failure());
        let (woken, waker) = flag();
        let first = poll(&handoff, &waker);
        runner.join().unwrap();
        let taken = match first {
            Poll::Ready(taken) => taken,
            Poll::Pending => {
                assert!(woken.woken(), "a pending taker was not woken");
                match poll(&handoff, &waker) {
                    Poll::Ready(taken) => taken,
                    Poll::Pending => panic!("still pending after delivery"),
                }
            }
        };
        assert_eq!(failures_taken(&taken), 1);
        assert_eq!(reports.load(Ordering::SeqCst), 0);
    });
}

/// The taker polls once, then leaves (as a `Job` dropped after a `select` does), while the
/// runner delivers: the failure is returned or reported, exactly once.
#[test]
fn deliver_races_take_then_orphan() {
    loom::model(|| {
        let (handoff, reports) = handoff();
        let runner = spawn_deliver(&handoff, failure());
        let (_woken, waker) = flag();
        let taken = match poll(&handoff, &waker) {
            Poll::Ready(taken) => failures_taken(&taken),
            Poll::Pending => {
                handoff.orphan();
                0
            }
        };
        runner.join().unwrap();
        assert_eq!(taken + reports.load(Ordering::SeqCst), 1);
    });
}

/// The taker is polled by a new task (a waker that does not `will_wake` the stored one)
/// while the runner delivers: the new waker replaces the old one, so a taker still pending
/// after its second poll is woken through the *new* waker.
#[test]
fn deliver_races_waker_replacement() {
    loom::model(|| {
        let (handoff, reports) = handoff();
        let (_old_woken, old) = flag();
        assert!(poll(&handoff, &old).is_pending());
        let runner = spawn_deliver(&handoff, failure());
        let (new_woken, new) = flag();
        let second = poll(&handoff, &new);
        runner.join().unwrap();
        let taken = match second {
            Poll::Ready(taken) => taken,
            Poll::Pending => {
                assert!(new_woken.woken(), "the new waker was not woken");
                match poll(&handoff, &new) {
                    Poll::Ready(taken) => taken,
                    Poll::Pending => panic!("still pending after delivery"),
                }
            }
        };
        assert_eq!(failures_taken(&taken), 1);
        assert_eq!(reports.load(Ordering::SeqCst), 0);
    });
}

/// The runner goes away without an outcome (a shield's runner dropped by its executor)
/// while the taker polls: the taker is told, at once or after a wake-up; nothing is
/// reported.
#[test]
fn abandon_races_take() {
    loom::model(|| {
        let (handoff, reports) = handoff();
        let runner = {
            let handoff = handoff.clone();
            thread::spawn(move || handoff.abandon(|| {}))
        };
        let (woken, waker) = flag();
        let first = poll(&handoff, &waker);
        runner.join().unwrap();
        let taken = match first {
            Poll::Ready(taken) => taken,
            Poll::Pending => {
                assert!(woken.woken(), "a pending taker was not woken");
                match poll(&handoff, &waker) {
                    Poll::Ready(taken) => taken,
                    Poll::Pending => panic!("still pending after abandon"),
                }
            }
        };
        assert!(matches!(taken, Taken::Abandoned));
        assert_eq!(reports.load(Ordering::SeqCst), 0);
    });
}

/// The runner abandons while the handle is dropped: nothing to report, nothing panics.
#[test]
fn abandon_races_orphan() {
    loom::model(|| {
        let (handoff, reports) = handoff();
        let runner = {
            let handoff = handoff.clone();
            thread::spawn(move || handoff.abandon(|| {}))
        };
        handoff.orphan();
        runner.join().unwrap();
        assert_eq!(reports.load(Ordering::SeqCst), 0);
    });
}

/// A success is never reported, whoever comes second; a taker that got it holds it.
#[test]
fn success_races_take_then_orphan() {
    loom::model(|| {
        let (handoff, reports) = handoff();
        let runner = spawn_deliver(&handoff, Ok(7));
        let (_woken, waker) = flag();
        match poll(&handoff, &waker) {
            Poll::Ready(Taken::Outcome(Ok(7), _)) => {}
            Poll::Ready(_) => panic!("took something else than the output"),
            Poll::Pending => handoff.orphan(),
        }
        runner.join().unwrap();
        assert_eq!(reports.load(Ordering::SeqCst), 0);
    });
}

/// The runner stores, settles its own accounting (here: a flag standing for the slot's
/// release), then publishes, while the taker polls: a taker that gets the outcome always
/// sees the accounting done, however it was polled (woken, or polled early), and a
/// pending taker is woken after it.
#[test]
fn store_then_publish_races_take() {
    loom::model(|| {
        let (handoff, reports) = handoff();
        let released = loom::sync::Arc::new(AtomicBool::new(false));
        let runner = {
            let (handoff, released) = (handoff.clone(), released.clone());
            thread::spawn(move || {
                let stored = handoff.store(failure(), Duration::ZERO);
                released.store(true, Ordering::SeqCst);
                stored.publish();
            })
        };
        let (woken, waker) = flag();
        let first = poll(&handoff, &waker);
        if first.is_ready() {
            assert!(released.load(Ordering::SeqCst), "taken before the release");
        }
        // A second poll before the runner is done (a spurious wake-up) sees nothing early.
        let second = match first {
            Poll::Ready(taken) => Some(taken),
            Poll::Pending => match poll(&handoff, &waker) {
                Poll::Ready(taken) => {
                    assert!(released.load(Ordering::SeqCst), "taken before the release");
                    Some(taken)
                }
                Poll::Pending => None,
            },
        };
        runner.join().unwrap();
        let taken = match second {
            Some(taken) => taken,
            None => {
                assert!(woken.woken(), "a pending taker was not woken");
                match poll(&handoff, &waker) {
                    Poll::Ready(taken) => taken,
                    Poll::Pending => panic!("still pending after publish"),
                }
            }
        };
        assert_eq!(failures_taken(&taken), 1);
        assert_eq!(reports.load(Ordering::SeqCst), 0);
    });
}

/// The handle is dropped while the runner is between its store and its publish: the
/// failure is reported exactly once (by the dropping side, or by the store if the drop came
/// first), and the publish that follows finds nothing to do.
#[test]
fn store_then_publish_races_orphan() {
    loom::model(|| {
        let (handoff, reports) = handoff();
        let runner = {
            let handoff = handoff.clone();
            thread::spawn(move || handoff.store(failure(), Duration::ZERO).publish())
        };
        let (_woken, waker) = flag();
        let taken = match poll(&handoff, &waker) {
            Poll::Ready(taken) => failures_taken(&taken),
            Poll::Pending => {
                handoff.orphan();
                0
            }
        };
        runner.join().unwrap();
        assert_eq!(taken + reports.load(Ordering::SeqCst), 1);
        assert!(handoff.is_finished());
    });
}
