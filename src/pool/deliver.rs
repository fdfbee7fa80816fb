//! The end of a job on a worker thread: `Cell::run`'s tail, and the workers' loom model's.
//!
//! The outcome is stored first (not yet takeable; if the `Job` is gone, a failure is
//! reported with the slot still held), the recorder hears of the job, and then, in this
//! order: the limit counts a publish in progress ([`Limit::begin_publish`]), the slot goes
//! back (a permit's `Drop` samples the basis, hands the slot to the oldest waiter and
//! notifies idleness), the outcome is published (the caller is woken), and the publish
//! ends ([`Limit::end_publish`], which may notify idleness). A caller woken by its outcome
//! so always finds the slot free, and the pool reads idle only once the outcome is
//! takeable.
//!
//! The order holds even if something unwinds on the way (the recorder, the slot's `Drop`,
//! the publish): each step that is left runs as the stack unwinds, once, so the slot is
//! released and the caller woken exactly once, and no publish stays counted for ever.

use std::time::Duration;

use crate::failure::Panicked;
use crate::gate::limit::Limit;
use crate::handoff::{Handoff, Stored};

/// Stores `result` in `handoff`, runs `tell` (the recorder hears of the job), then lets
/// `slot` go and publishes the outcome, in the order of the [module docs](self), unwinding
/// or not.
pub(crate) fn deliver<T, S>(
    limit: &Limit,
    handoff: &Handoff<T>,
    result: Result<T, Panicked>,
    elapsed: Duration,
    slot: S,
    tell: impl FnOnce(),
) {
    let stored = handoff.store(result, elapsed);
    let publish = Publish {
        limit,
        parts: Some((slot, stored)),
    };
    tell();
    drop(publish);
}

/// The steps after `tell`, run by its `Drop` (so that an unwinding `tell` runs them too).
struct Publish<'a, T, S> {
    limit: &'a Limit,
    parts: Option<(S, Stored<'a, T>)>,
}

impl<T, S> Drop for Publish<'_, T, S> {
    fn drop(&mut self) {
        if let Some((slot, stored)) = self.parts.take() {
            self.limit.begin_publish();
            // Fields drop in declaration order, the rest still dropped if one unwinds.
            drop(Published {
                _slot: slot,
                _stored: stored,
                _end: EndPublish(self.limit),
            });
        }
    }
}

/// The slot, the stored outcome and the end of the publish, let go in this order.
struct Published<'a, T, S> {
    _slot: S,
    _stored: Stored<'a, T>,
    _end: EndPublish<'a>,
}

/// Ends a publish counted by [`Limit::begin_publish`] when dropped.
struct EndPublish<'a>(&'a Limit);

impl Drop for EndPublish<'_> {
    fn drop(&mut self) {
        self.0.end_publish();
    }
}

#[cfg(all(test, not(loopguard_loom)))]
mod tests;
