//! One publisher at a time: publishes of the same gauges never overlap, so an older
//! snapshot can never overwrite a newer one in the recorder.
//!
//! A publish snapshots state under a lock, then sets gauges outside it (the recorder is
//! user code). Two publishes that overlap would race on the second step: a slow one that
//! snapshotted a key before it was swept could write the key's old value after a fast one
//! wrote the 0 of its removal, and nothing would ever correct it. Serializing the rounds
//! closes that, without a lock around the recorder: a call that finds a round running
//! leaves its request behind and returns at once, and the running publisher does one more
//! round, with a snapshot taken after that call began, before it lets go.
//!
//! A call from inside a round of the same publisher on the same thread (a recorder that
//! publishes again) returns at once and asks for nothing, so it can neither deadlock nor
//! keep the round going for ever.

use crate::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use std::cell::RefCell;

// The publishers with a round in progress on this thread (loom's thread-locals under its
// cfg, from `crate::sync`: loom runs its threads on one OS thread).
crate::sync::thread_local_const! {
    static PUBLISHING: RefCell<Vec<usize>> = RefCell::new(Vec::new());
}

/// Serializes the publishing rounds of one set of gauges; see the [module docs](self).
#[derive(Debug, Default)]
pub(crate) struct OnePublisher {
    /// A round is in progress.
    busy: AtomicBool,
    /// Calls made since the last round took its snapshot, and not covered by it.
    pending: AtomicUsize,
}

impl OnePublisher {
    pub(crate) fn new() -> OnePublisher {
        OnePublisher::default()
    }

    /// Runs `round` (snapshot, then set) now, or leaves it to the publisher already
    /// running, which runs it again before it returns. When this returns, a round that
    /// began after this call has run or will run; no two rounds ever overlap.
    ///
    /// `round` must contain the user code it calls (it runs with no lock of this type
    /// held); if it unwinds anyway, the next call publishes.
    pub(crate) fn publish(&self, mut round: impl FnMut()) {
        let me = std::ptr::from_ref(self) as usize;
        if PUBLISHING.with(|on| on.borrow().contains(&me)) {
            return;
        }
        self.pending.fetch_add(1, Ordering::SeqCst);
        // A request left after the last round's snapshot is seen here: it was counted
        // before the caller's failed `compare_exchange`, so before `busy` was cleared.
        while self.pending.load(Ordering::SeqCst) > 0 {
            if self
                .busy
                .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
            {
                // The running publisher sees our request once it clears `busy`.
                return;
            }
            // Every request counted so far is covered by the snapshot this round takes.
            self.pending.store(0, Ordering::SeqCst);
            let _round = Round::enter(self, me);
            round();
        }
    }
}

/// A round in progress on this thread; clears `busy` when it ends, even by unwinding.
struct Round<'a> {
    publisher: &'a OnePublisher,
    me: usize,
}

impl<'a> Round<'a> {
    fn enter(publisher: &'a OnePublisher, me: usize) -> Round<'a> {
        PUBLISHING.with(|on| on.borrow_mut().push(me));
        Round { publisher, me }
    }
}

impl Drop for Round<'_> {
    fn drop(&mut self) {
        PUBLISHING.with(|on| {
            let mut on = on.borrow_mut();
            if let Some(at) = on.iter().rposition(|&p| p == self.me) {
                on.swap_remove(at);
            }
        });
        self.publisher.busy.store(false, Ordering::SeqCst);
    }
}

#[cfg(all(test, not(loopguard_loom)))]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier, mpsc};

    /// A call made while a round runs returns at once; the running publisher does one more
    /// round for it before it returns, so what was asked for is published, once.
    #[test]
    fn a_call_during_a_round_gets_one_more_round() {
        let publisher = Arc::new(OnePublisher::new());
        let rounds = Arc::new(AtomicUsize::new(0));
        let (entered_tx, entered) = mpsc::channel();
        let (go, go_rx) = mpsc::channel::<()>();
        let slow = {
            let (publisher, rounds) = (publisher.clone(), rounds.clone());
            std::thread::spawn(move || {
                publisher.publish(|| {
                    if rounds.fetch_add(1, Ordering::SeqCst) == 0 {
                        entered_tx.send(()).unwrap();
                        go_rx.recv().unwrap();
                    }
                })
            })
        };
        entered.recv().unwrap();
        publisher.publish(|| panic!("a second round overlapped the first"));
        go.send(()).unwrap();
        slow.join().unwrap();
        assert_eq!(rounds.load(Ordering::SeqCst), 2);
    }

    /// A round that publishes again from inside (a re-entrant recorder) neither deadlocks
    /// nor loops.
    #[test]
    fn a_reentrant_call_returns_at_once() {
        let publisher = OnePublisher::new();
        let mut rounds = 0;
        publisher.publish(|| {
            rounds += 1;
            publisher.publish(|| panic!("re-entered"));
        });
        assert_eq!(rounds, 1);
        // And the next call publishes as usual.
        let mut again = 0;
        publisher.publish(|| again += 1);
        assert_eq!(again, 1);
    }

    /// Many publishers at once: rounds never overlap, and every call is covered by a round
    /// that began after it.
    #[test]
    fn rounds_never_overlap() {
        const THREADS: usize = 4;
        let publisher = Arc::new(OnePublisher::new());
        let inside = Arc::new(AtomicUsize::new(0));
        let started = Arc::new(AtomicUsize::new(0));
        let snapshot = Arc::new(AtomicUsize::new(0));
        let barrier = Arc::new(Barrier::new(THREADS));
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let (publisher, inside, started, snapshot, barrier) = (
                    publisher.clone(),
                    inside.clone(),
                    started.clone(),
                    snapshot.clone(),
                    barrier.clone(),
                );
                std::thread::spawn(move || {
                    barrier.wait();
                    for _ in 0..2_000 {
                        started.fetch_add(1, Ordering::SeqCst);
                        publisher.publish(|| {
                            assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "overlap");
                            snapshot.store(started.load(Ordering::SeqCst), Ordering::SeqCst);
                            inside.fetch_sub(1, Ordering::SeqCst);
                        });
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        // The last round's snapshot saw every call.
        assert_eq!(snapshot.load(Ordering::SeqCst), THREADS * 2_000);
    }
}
