//! The hand-off of one piece of work's outcome, between whoever runs it (a pool's worker
//! thread, a shield's runner) and whoever awaits it (a [`Job`](crate::pool::Job), a
//! [`Shielded`](crate::shield::Shielded)).
//!
//! Its stage moves under one mutex, so completion and drop cannot both claim the outcome,
//! nor both miss it: whichever comes second sees what the first did.
//!
//! A runner with accounting of its own (a pool's worker, which gives a slot back) delivers
//! in two steps: [`store`](Handoff::store) puts the outcome in place (a handle dropped
//! from then on reports it) but does not let the handle take it yet (nor `is_finished`
//! say so); the runner settles its accounting; then [`Stored::publish`] makes the outcome
//! takeable and wakes the handle. So a caller can only ever see its outcome once the
//! runner's accounting is done: a caller woken by its job never finds the job's slot
//! still held, whether it was woken or polled for another reason.
//!
//! | first                | second          | who reports a failure          |
//! |----------------------|-----------------|--------------------------------|
//! | runner delivers      | handle awaited  | nobody: the caller gets it     |
//! | runner delivers      | handle dropped  | the thread dropping the handle |
//! | handle dropped       | runner delivers | the runner                     |
//! | runner gone, nothing | handle awaited  | nobody: the caller is told     |
//!
//! Wakers are user code: one is only called after the lock is released, and a panic in it
//! is contained. Every transition is complete before that call, so a panicking waker can
//! lose nothing.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::failure::{Classifier, Panicked};
use crate::orphan::Reporter;

// Under the crate's loom cfg (unit tests only) the stage's mutex is loom's (see
// `crate::sync`), so the model in `handoff/loom_model.rs` explores every interleaving.
use crate::sync::{Mutex, lock};
use crate::waker_slot::{Visit, WakerSlot, register};

/// Where an outcome stands.
enum Stage<T> {
    /// Not finished; the waker of whoever awaits the handle.
    Running(WakerSlot),
    /// Finished and stored, not takeable yet: the runner still settles its own accounting
    /// (see [`Handoff::store`]). Keeps the waker of whoever awaits the handle.
    Stored(Result<T, Panicked>, Duration, WakerSlot),
    /// Finished and delivered, with how long the work ran; not yet taken.
    Ready(Result<T, Panicked>, Duration),
    /// The handle was dropped first: the runner reports when it delivers.
    Orphaned,
    /// The runner went away without an outcome (a shield's runner dropped by its executor).
    Abandoned,
    /// The outcome was taken, reported or discarded.
    Taken,
}

/// A finished piece of work: its outcome and how long it ran.
pub(crate) type Finished<T> = (Result<T, Panicked>, Duration);

/// What the awaiting side takes.
pub(crate) enum Taken<T> {
    /// The work's outcome and how long it ran.
    Outcome(Result<T, Panicked>, Duration),
    /// The runner went away without an outcome.
    Abandoned,
}

/// One outcome's hand-off; see the [module docs](self).
pub(crate) struct Handoff<T> {
    stage: Mutex<Stage<T>>,
    classify: Classifier<T>,
    reporter: Arc<Reporter>,
}

impl<T> Handoff<T> {
    /// A hand-off whose failures (as `classify` sees them) go to `reporter` when orphaned.
    pub(crate) fn new(classify: Classifier<T>, reporter: Arc<Reporter>) -> Handoff<T> {
        Handoff {
            stage: Mutex::new(Stage::Running(WakerSlot::new())),
            classify,
            reporter,
        }
    }

    /// Whether `result` is a failure: a panic, or an output the classifier says failed.
    pub(crate) fn is_failure(&self, result: &Result<T, Panicked>) -> bool {
        match result {
            Err(_) => true,
            Ok(output) => (self.classify)(output).is_some(),
        }
    }

    pub(crate) fn reporter(&self) -> &Arc<Reporter> {
        &self.reporter
    }

    /// The runner's side in one step (the loom model's runner; the pool's worker and the
    /// shield's runner settle their accounting between the two): the work finished. Hands
    /// the outcome over and wakes the handle, or reports it if the handle is gone.
    #[cfg(all(test, loopguard_loom))]
    pub(crate) fn deliver(&self, result: Result<T, Panicked>, elapsed: Duration) {
        self.store(result, elapsed).publish();
    }

    /// The runner's side, first step: the work finished. Stores the outcome, not yet
    /// takeable (a handle polled now keeps waiting, one dropped now reports it), or reports
    /// it at once if the handle is gone. The runner settles its own accounting, then calls
    /// [`Stored::publish`]; dropping the [`Stored`] publishes too. Never panics.
    pub(crate) fn store(&self, result: Result<T, Panicked>, elapsed: Duration) -> Stored<'_, T> {
        let mut stage = lock(&self.stage);
        match std::mem::replace(&mut *stage, Stage::Taken) {
            Stage::Running(waker) => {
                *stage = Stage::Stored(result, elapsed, waker);
                drop(stage);
                Stored(Some(self))
            }
            Stage::Orphaned => {
                drop(stage);
                self.report(result, elapsed);
                Stored(None)
            }
            // Delivered once only; a second outcome has nobody to go to.
            other @ (Stage::Stored(..) | Stage::Ready(..) | Stage::Abandoned | Stage::Taken) => {
                *stage = other;
                drop(stage);
                self.report(result, elapsed);
                Stored(None)
            }
        }
    }

    /// The second step of [`store`](Handoff::store): the stored outcome becomes takeable,
    /// and the handle's waker (taken out under the lock) is woken outside it, contained.
    fn publish(&self) {
        let mut stage = lock(&self.stage);
        match std::mem::replace(&mut *stage, Stage::Taken) {
            Stage::Stored(result, elapsed, mut waker) => {
                *stage = Stage::Ready(result, elapsed);
                drop(stage);
                waker.take().wake();
            }
            // The handle was dropped meanwhile and reported the outcome: nothing to do.
            other => *stage = other,
        }
    }

    /// The runner's side: it goes away without an outcome. Calls `finished` (the runner's
    /// own accounting) once the stage says so, then wakes the handle.
    pub(crate) fn abandon(&self, finished: impl FnOnce()) {
        let mut stage = lock(&self.stage);
        if let Stage::Running(waker) = &mut *stage {
            let waker = waker.take();
            *stage = Stage::Abandoned;
            drop(stage);
            finished();
            waker.wake();
        } else {
            drop(stage);
            finished();
        }
    }

    /// The handle's side: takes the outcome once it is there.
    ///
    /// # Panics
    ///
    /// When polled again after it returned `Ready`, with `what` naming the handle.
    pub(crate) fn poll_take(&self, cx: &mut Context<'_>, what: &str) -> Poll<Taken<T>> {
        // Through `register`: the task's waker is cloned outside the lock (user code: if
        // the clone panics, the stage is still `Running`), and a waker it replaces is
        // dropped after the lock is released, contained (it may call back into this
        // hand-off).
        let polled = register(&self.stage, cx.waker(), |stage| match stage {
            Stage::Running(waker) | Stage::Stored(_, _, waker) => Visit::Store(waker, None),
            Stage::Ready(..) => {
                let Stage::Ready(result, elapsed) = std::mem::replace(stage, Stage::Taken) else {
                    unreachable!("matched `Ready`")
                };
                Visit::Done(Some(Ok(Taken::Outcome(result, elapsed))))
            }
            Stage::Abandoned => {
                *stage = Stage::Taken;
                Visit::Done(Some(Ok(Taken::Abandoned)))
            }
            Stage::Orphaned | Stage::Taken => Visit::Done(Some(Err(()))),
        });
        match polled {
            None => Poll::Pending,
            Some(Ok(taken)) => Poll::Ready(taken),
            Some(Err(())) => panic!("`{what}` polled after completion"),
        }
    }

    /// The handle's side: it is dropped. The work is orphaned if still running; a finished
    /// outcome nobody took is reported now. Never panics.
    pub(crate) fn orphan(&self) {
        let mut stage = lock(&self.stage);
        match std::mem::replace(&mut *stage, Stage::Taken) {
            Stage::Running(waker) => {
                *stage = Stage::Orphaned;
                drop(stage);
                // Its waker's `Drop` is contained (see `WakerSlot`).
                drop(waker);
            }
            Stage::Ready(result, elapsed) => {
                drop(stage);
                self.report(result, elapsed);
            }
            // Stored, not yet published: the outcome is nobody's now; the runner's publish
            // finds nothing to do. The waker goes after the lock, contained.
            Stage::Stored(result, elapsed, waker) => {
                drop(stage);
                drop(waker);
                self.report(result, elapsed);
            }
            Stage::Orphaned | Stage::Abandoned | Stage::Taken => {}
        }
    }

    /// Whether the outcome is ready to be taken, or was (the runner finished or left). A
    /// stored outcome not yet published is not: a poll would still return `Pending`.
    pub(crate) fn is_finished(&self) -> bool {
        matches!(
            *lock(&self.stage),
            Stage::Ready(..) | Stage::Abandoned | Stage::Taken
        )
    }

    /// Reports an outcome nobody will take, if it is a failure.
    fn report(&self, result: Result<T, Panicked>, elapsed: Duration) {
        self.reporter
            .orphaned_outcome(result, self.classify, elapsed);
    }

    /// The handle's side: an outcome it took is refused after all (it came after the
    /// caller's deadline). A failure among it is reported: it reaches the handler instead
    /// of the caller. A refused success is dropped, its `Drop` contained.
    pub(crate) fn report_refused(&self, result: Result<T, Panicked>, elapsed: Duration) {
        self.report(result, elapsed);
    }
}

/// An outcome [stored](Handoff::store) but not yet takeable. [`publish`](Stored::publish)
/// (or dropping it, so that an unwinding runner strands no caller) makes it takeable and
/// wakes the handle.
#[must_use = "the outcome is not takeable until it is published"]
pub(crate) struct Stored<'a, T>(Option<&'a Handoff<T>>);

impl<T> Stored<'_, T> {
    /// Makes the outcome takeable and wakes the handle (contained, outside every lock).
    pub(crate) fn publish(mut self) {
        if let Some(handoff) = self.0.take() {
            handoff.publish();
        }
    }
}

impl<T> Drop for Stored<'_, T> {
    fn drop(&mut self) {
        if let Some(handoff) = self.0.take() {
            handoff.publish();
        }
    }
}

/// Exhaustive interleavings of deliver, take, orphan and abandon, under loom.
#[cfg(all(test, loopguard_loom))]
mod loom_model;
