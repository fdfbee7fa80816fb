//! Exhaustive interleavings of the orphan report queue, under loom: a push racing the
//! receiver's poll, a push racing the receiver's drop, the last sender's drop racing the
//! receiver's poll.
//!
//! What every model checks: a receiver that saw `Pending` is woken by the push or by the
//! last sender's drop that follows (no lost wake-up), and then gets the report or the end
//! of the stream; a report pushed while the receiver goes is drained by the drop or logged
//! by the push, never left queued behind a closed receiver (where nobody would ever see
//! it).
//!
//! Seeded bug this catches (checked by hand, then restored): `OrphanReceiver::drop` taking
//! the queued reports in one critical section and setting `closed` in a second one:
//! `a_push_racing_the_receivers_drop_is_never_stranded` fails with "a report was left
//! queued behind a closed receiver".

use super::*;
use crate::loom_util::flag;
use crate::orphan::ReportKind;
use loom::thread;
use std::task::Waker;
use std::time::Duration;

fn report() -> Report {
    Report::new(
        Arc::from("model"),
        ReportKind::Failed,
        "failed".to_string(),
        Duration::ZERO,
    )
}

fn poll(receiver: &mut OrphanReceiver, waker: &Waker) -> Poll<Option<Report>> {
    Pin::new(receiver).poll_next(&mut Context::from_waker(waker))
}

/// Reports pushed after the close go to `log`: a level with no logger installed keeps them
/// off stderr (the stderr fallback is for a process with no logger at all).
fn quiet() {
    log::set_max_level(log::LevelFilter::Error);
}

/// A push on a worker races the receiver's first poll: the receiver gets the report at
/// once, or is woken and gets it on the next poll.
#[test]
fn a_push_racing_a_poll_is_never_missed() {
    loom::model(|| {
        let (sender, mut receiver) = bounded(1);
        let pusher = thread::spawn(move || sender.push(report()));
        let (woken, waker) = flag();
        let first = poll(&mut receiver, &waker);
        pusher.join().unwrap();
        let got = match first {
            Poll::Ready(got) => got,
            Poll::Pending => {
                assert!(woken.woken(), "a pending receiver was not woken");
                match poll(&mut receiver, &waker) {
                    Poll::Ready(got) => got,
                    Poll::Pending => panic!("woken, but nothing to receive"),
                }
            }
        };
        // The report, or the end: the sender was dropped after its push.
        assert!(got.is_some(), "the report was lost");
        assert!(matches!(poll(&mut receiver, &waker), Poll::Ready(None)));
    });
}

/// A push races the receiver's drop, with another handler clone alive: the report is
/// queued before the close and drained (logged) by the drop, or refused after it and
/// logged by the push; nothing stays queued.
#[test]
fn a_push_racing_the_receivers_drop_is_never_stranded() {
    loom::model(|| {
        quiet();
        let (sender, receiver) = bounded(2);
        let kept = sender.clone();
        let pusher = thread::spawn(move || sender.push(report()));
        drop(receiver);
        pusher.join().unwrap();
        let state = lock(&kept.queue.state);
        assert!(state.closed);
        assert!(
            state.reports.is_empty(),
            "a report was left queued behind a closed receiver"
        );
    });
}

/// The last handler clone goes while the receiver polls: the receiver sees the end at
/// once, or is woken and sees it on the next poll.
#[test]
fn the_last_senders_drop_racing_a_poll_ends_the_stream() {
    loom::model(|| {
        let (sender, mut receiver) = bounded(1);
        let other = sender.clone();
        let droppers = [
            thread::spawn(move || drop(sender)),
            thread::spawn(move || drop(other)),
        ];
        let (woken, waker) = flag();
        let first = poll(&mut receiver, &waker);
        for dropper in droppers {
            dropper.join().unwrap();
        }
        match first {
            Poll::Ready(got) => assert!(got.is_none()),
            Poll::Pending => {
                assert!(woken.woken(), "the end of the stream was not woken");
                assert!(matches!(poll(&mut receiver, &waker), Poll::Ready(None)));
            }
        }
    });
}
