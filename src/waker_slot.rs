//! A task's waker stored under a lock: the one way loopguard keeps one.
//!
//! A waker's `clone`, `wake` and `Drop` are user code: they may panic, or call back into
//! the primitive that stores the waker. So none of them runs while loopguard holds a lock,
//! and loopguard's state is consistent before any of them runs. Every primitive that
//! stores a waker (the gate's waiters, the hand-off, the signal, the orphan channel) keeps
//! it in a [`WakerSlot`] inside the state its mutex guards, and goes through this module:
//!
//! - [`register`] stores the polling task's waker: it looks under the lock whether the
//!   stored one already wakes the same task, clones the task's waker with the lock
//!   released (a panicking `clone` comes out of the caller's poll with nothing changed),
//!   stores the clone under the lock (looking at the state again, since it may have moved
//!   meanwhile), and drops the waker it replaced after the lock is released, contained;
//! - [`WakerSlot::take`] takes the waker out under the lock as a [`Taken`], which the
//!   caller wakes or drops once it has released the lock: [`Taken::wake`] and `Taken`'s
//!   `Drop` are contained ([`crate::contain`]), so a panicking waker unwinds into nothing.
//!
//! A `WakerSlot` dropped with its waker (its owner going away) drops it contained too.
//!
//! `waker_slot/loom_model.rs` checks a registration racing a take-and-wake, a new waker
//! replacing an old one, and a waker whose `Drop` re-enters the lock.

use std::fmt;
use std::task::Waker;

use crate::contain::{drop_contained, wake};
use crate::sync::{Mutex, lock};

/// A stored waker (or none), kept inside the state a mutex guards; see the
/// [module docs](self).
#[derive(Default)]
pub(crate) struct WakerSlot(Option<Waker>);

impl WakerSlot {
    /// An empty slot.
    pub(crate) const fn new() -> WakerSlot {
        WakerSlot(None)
    }

    /// Takes the waker out (under the lock), for the caller to wake or drop after it.
    pub(crate) fn take(&mut self) -> Taken {
        Taken(self.0.take())
    }

    /// Whether a waker is stored.
    #[cfg(test)]
    pub(crate) fn is_set(&self) -> bool {
        self.0.is_some()
    }
}

impl Drop for WakerSlot {
    fn drop(&mut self) {
        drop(self.take());
    }
}

impl fmt::Debug for WakerSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("WakerSlot").field(&self.0.is_some()).finish()
    }
}

/// A waker taken out of its [`WakerSlot`], or none: woken ([`wake`](Taken::wake)) or
/// dropped by the caller once it released the lock, both contained.
#[derive(Default)]
#[must_use = "wake it, or let it drop, once the lock is released"]
pub(crate) struct Taken(Option<Waker>);

impl Taken {
    /// Wakes the task, if there was a waker; a panic in its `wake` is contained.
    pub(crate) fn wake(mut self) {
        if let Some(waker) = self.0.take() {
            wake(waker);
        }
    }
}

impl Drop for Taken {
    /// Drops the waker, containing a panic in its `Drop`.
    fn drop(&mut self) {
        if let Some(waker) = self.0.take() {
            drop_contained("a Waker", waker);
        }
    }
}

impl fmt::Debug for Taken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Taken").field(&self.0.is_some()).finish()
    }
}

/// What [`register`]'s `visit` found under the lock.
pub(crate) enum Visit<'s, R> {
    /// Nothing to register (the wait is over): return `R`.
    Done(R),
    /// Store the task's waker in this slot, then return `R`.
    Store(&'s mut WakerSlot, R),
}

/// Registers the task's `waker` in the slot `visit` picks from the state `mutex` guards,
/// and returns what `visit` said. `visit` runs under the lock, once or twice (again after
/// the clone, the state looked at afresh); it runs no user code.
///
/// The clone of `waker` runs with the lock released; a panic there comes out of this call
/// with the state as `visit` left it. The waker replaced, or the clone that turned out
/// unneeded, is dropped after the lock is released, contained.
pub(crate) fn register<S, R>(
    mutex: &Mutex<S>,
    waker: &Waker,
    mut visit: impl FnMut(&mut S) -> Visit<'_, R>,
) -> R {
    let mut fresh: Option<Waker> = None;
    loop {
        let mut guard = lock(mutex);
        let (slot, out) = match visit(&mut guard) {
            Visit::Done(out) => {
                drop(guard);
                drop(Taken(fresh));
                return out;
            }
            Visit::Store(slot, out) => (slot, out),
        };
        if matches!(&slot.0, Some(stored) if stored.will_wake(waker)) {
            drop(guard);
            drop(Taken(fresh));
            return out;
        }
        if let Some(new) = fresh.take() {
            let stale = Taken(slot.0.replace(new));
            drop(guard);
            drop(stale);
            return out;
        }
        drop(guard);
        fresh = Some(waker.clone());
    }
}

/// Exhaustive interleavings of a registration racing a take-and-wake, under loom.
#[cfg(all(test, loopguard_loom))]
mod loom_model;

#[cfg(all(test, not(loopguard_loom)))]
mod tests;
