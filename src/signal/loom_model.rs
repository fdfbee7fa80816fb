//! Exhaustive interleavings of a [`Signal`], under loom: a task registers (polls its
//! `Wait`) while the condition changes and the signal is notified, and a `Wait` is dropped
//! while a notify runs.
//!
//! What every model checks: a wait whose poll returned `Pending` is woken by a notify that
//! follows the change it waits for (no lost wake-up); a dropped wait leaves no waker
//! behind; a notify takes every waker out, so nothing stays listed at the end.
//!
//! Seeded bug this catches (checked by hand, then restored): `Wait::poll` without its
//! second look at the condition after registering (the `if (this.ready)()` after
//! `register`): `a_notify_racing_the_registration_is_never_lost` fails with "a pending wait
//! was not woken".

use super::*;
use crate::loom_util::flag;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;
use std::sync::Arc;

fn poll<C: Fn() -> bool>(wait: &mut Wait<'_, C>, waker: &Waker) -> Poll<()> {
    Pin::new(wait).poll(&mut Context::from_waker(waker))
}

fn listed(signal: &Signal) -> usize {
    lock(&signal.waiters).list.len()
}

/// The condition becomes true and the signal is notified on another thread while the task
/// polls its wait for the first time: it sees the change, or it is woken.
#[test]
fn a_notify_racing_the_registration_is_never_lost() {
    loom::model(|| {
        let signal = Arc::new(Signal::new());
        let ready = Arc::new(AtomicBool::new(false));
        let notifier = {
            let (signal, ready) = (signal.clone(), ready.clone());
            thread::spawn(move || {
                ready.store(true, Ordering::SeqCst);
                signal.notify_all();
            })
        };
        let (woken, waker) = flag();
        let mut wait = signal.wait(|| ready.load(Ordering::SeqCst));
        let first = poll(&mut wait, &waker);
        notifier.join().unwrap();
        if first.is_pending() {
            assert!(woken.woken(), "a pending wait was not woken");
            assert!(poll(&mut wait, &waker).is_ready());
        }
        drop(wait);
        assert_eq!(listed(&signal), 0);
    });
}

/// A second poll with a new waker (the task moved) races the notify: the waker stored last
/// before the notify is the one woken, and the stale one is let go outside the lock.
#[test]
fn a_re_registration_racing_a_notify_wakes_the_new_waker() {
    loom::model(|| {
        let signal = Arc::new(Signal::new());
        let ready = Arc::new(AtomicBool::new(false));
        let (_, old) = flag();
        let mut wait = signal.wait(|| ready.load(Ordering::SeqCst));
        assert!(poll(&mut wait, &old).is_pending());
        let notifier = {
            let (signal, ready) = (signal.clone(), ready.clone());
            thread::spawn(move || {
                ready.store(true, Ordering::SeqCst);
                signal.notify_all();
            })
        };
        let (woken, new) = flag();
        let second = poll(&mut wait, &new);
        notifier.join().unwrap();
        if second.is_pending() {
            assert!(woken.woken(), "the new waker was not woken");
        }
        drop(wait);
        assert_eq!(listed(&signal), 0);
    });
}

/// Two waits, one dropped while the notify runs: the other is woken, and nothing stays
/// listed whichever goes first.
#[test]
fn a_drop_racing_a_notify_leaves_nothing_behind() {
    loom::model(|| {
        let signal = Arc::new(Signal::new());
        let ready = Arc::new(AtomicBool::new(false));
        let (_, gone_waker) = flag();
        let (woken, stays_waker) = flag();
        let mut gone = signal.wait(|| ready.load(Ordering::SeqCst));
        let mut stays = signal.wait(|| ready.load(Ordering::SeqCst));
        assert!(poll(&mut gone, &gone_waker).is_pending());
        assert!(poll(&mut stays, &stays_waker).is_pending());
        let notifier = {
            let (signal, ready) = (signal.clone(), ready.clone());
            thread::spawn(move || {
                ready.store(true, Ordering::SeqCst);
                signal.notify_all();
            })
        };
        drop(gone);
        notifier.join().unwrap();
        assert!(woken.woken(), "the remaining wait was not woken");
        assert!(poll(&mut stays, &stays_waker).is_ready());
        drop(stays);
        assert_eq!(listed(&signal), 0);
    });
}
