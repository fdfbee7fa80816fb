//! Waiting for a slot of a [`Gate`] in FIFO order: the line under
//! [`Acquire`](super::permit::Acquire), the one wait of a pool's `Run` and of the tower
//! layer's waiting mode.
//!
//! Split in two steps so that the caller can do its own accounting between them:
//! [`start`](SlotWait::start) runs no user code; [`poll`](SlotWait::poll) clones the task's
//! waker, which may panic, and leaves everything in place if it does, so the caller's
//! `Drop` still withdraws the waiter.

use std::task::{Poll, Waker};

use super::{Enqueued, Gate, Refused, WaitState, Waiter, WaiterRef};

/// How [`SlotWait::start`] went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Started {
    /// A slot was free and nobody waited: the caller holds it.
    Acquired,
    /// The caller is queued; poll it.
    Queued,
    /// The gate is closed.
    Closed,
}

/// How a queued wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// The caller was granted a slot and holds it.
    Granted,
    /// The gate closed first; the caller holds nothing.
    Closed,
    /// The gate closed just after granting the caller a slot: it holds that slot and must
    /// give it back.
    ClosedHolding,
}

/// One caller's place in the queue of a gate.
#[derive(Debug, Default)]
pub(crate) struct SlotWait {
    waiter: Option<WaiterRef>,
    /// The wait ended or the caller left the queue (`cancel`); the waiter is kept only
    /// for a waker it may still store, dropped with this `SlotWait`.
    left: bool,
}

impl SlotWait {
    pub(crate) fn new() -> SlotWait {
        SlotWait::default()
    }

    /// Takes a free slot, or joins the queue. Runs no user code.
    pub(crate) fn start(&mut self, gate: &Gate) -> Started {
        debug_assert!(self.waiter.is_none() && !self.left, "started twice");
        match gate.try_acquire() {
            Ok(()) => Started::Acquired,
            Err(Refused::Closed) => Started::Closed,
            Err(Refused::Saturated) => {
                let waiter = Waiter::new();
                match gate.enqueue(&waiter) {
                    Enqueued::Acquired => Started::Acquired,
                    Enqueued::Closed => Started::Closed,
                    Enqueued::Queued => {
                        self.waiter = Some(waiter);
                        Started::Queued
                    }
                }
            }
        }
    }

    /// Registers `waker` and looks whether the wait has ended. `waker` is cloned (user
    /// code): if that panics, the caller is still queued and its `Drop` must
    /// [`cancel`](SlotWait::cancel).
    pub(crate) fn poll(&mut self, gate: &Gate, waker: &Waker) -> Poll<Ended> {
        std::task::ready!(self.register(waker));
        Poll::Ready(self.settle(gate))
    }

    /// The first half of [`poll`](SlotWait::poll), for a gate the caller reaches only
    /// under a lock of its own (a keyed gate's key table): registers `waker` (cloned, user
    /// code: call it outside every lock) and says whether the wait has ended, without
    /// touching the gate. `Ready` means: [`settle`](SlotWait::settle) now.
    pub(crate) fn register(&mut self, waker: &Waker) -> Poll<()> {
        let Some(waiter) = self.waiter.as_ref().filter(|_| !self.left) else {
            debug_assert!(false, "polled while not queued");
            return Poll::Ready(());
        };
        match waiter.poll_state(waker) {
            WaitState::Waiting => Poll::Pending,
            WaitState::Granted | WaitState::Closed => Poll::Ready(()),
        }
    }

    /// The second half of [`poll`](SlotWait::poll), once [`register`](SlotWait::register)
    /// saw the wait end: claims a granted slot. Runs no user code.
    pub(crate) fn settle(&mut self, gate: &Gate) -> Ended {
        let Some(waiter) = self.waiter.as_ref().filter(|_| !self.left) else {
            return Ended::Closed;
        };
        let ended = match waiter.state() {
            // Not ended after all (cannot happen after `register` said so): still queued.
            WaitState::Waiting => {
                debug_assert!(false, "settled while waiting");
                return Ended::Closed;
            }
            // The slot is ours once claimed; a gate that closed first took it back.
            WaitState::Granted if !gate.claim(waiter) => Ended::Closed,
            // Closing fails waiters; one that claimed its slot just before holds it.
            WaitState::Granted if gate.is_closed() => Ended::ClosedHolding,
            WaitState::Granted => Ended::Granted,
            WaitState::Closed => Ended::Closed,
        };
        // The waiter (and a waker stored by a poll that raced the grant) stays until this
        // `SlotWait` is dropped: the caller settles its accounting first.
        self.left = true;
        ended
    }

    /// Leaves the queue (the caller gives up). Returns `true` if a slot was granted
    /// meanwhile: the caller then holds it and must release it.
    ///
    /// The waker the waiter stored is not dropped here: the caller does its accounting
    /// first, and the waker goes when this `SlotWait` is dropped (see `Drop`).
    pub(crate) fn cancel(&mut self, gate: &Gate) -> bool {
        match &self.waiter {
            Some(waiter) if !self.left => {
                let granted = gate.cancel(waiter);
                self.left = true;
                granted
            }
            _ => false,
        }
    }
}

impl Drop for SlotWait {
    /// Drops the waker a waiter that left still stores, contained: its `Drop` is user code
    /// and may panic or call back into the gate, by now with every count settled.
    fn drop(&mut self) {
        if let Some(waiter) = self.waiter.take() {
            drop(waiter.take_waker());
        }
    }
}
