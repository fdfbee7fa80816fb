//! The cache's state and the token a running collection carries to store its result.
//!
//! A collection is marked in flight (under the state lock) before it is submitted, so only
//! one runs at a time. The [`Flight`] token travels with the collection (inside the pool
//! closure, or inside the spawned future) and stores its outcome itself, on the thread that
//! ran it: no caller has to be there. If the collection is dropped without running (the
//! pool refused it, the starter left while waiting for a slot, the executor dropped the
//! runner), the token's `Drop` clears the mark and wakes the waiters, and one of them starts
//! a new collection within its own deadline.
//!
//! No user code runs under the state lock. The cache keeps each outcome behind an `Arc`:
//! under the lock a caller only takes another reference ([`Shared`]), and it clones the
//! value (or error) out after the lock is released ([`clone_out`]), with a panic in that
//! `Clone` contained. The `Drop` of a value runs where its last reference goes: a replaced
//! outcome in [`Flight`]'s completion, after the lock; a caller's reference after its copy
//! was made; the state's own when the last handle goes (which may be on the collection's
//! thread). Each of those is contained too.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

// Under the crate's loom cfg (unit tests only) the state lock is loom's, so
// `flight/loom_model.rs` explores complete, give up, join and restart racing; normal
// builds never see loom.
pub(crate) use crate::sync::Mutex;

use crate::signal::Signal;
use futures_lite::FutureExt;

use crate::contain::{drop_contained, drop_quietly, panic_message, trace_panic};
use crate::emit::{Counted, RunOutcome};
use crate::failure::Panicked;
use crate::refresh::error::RefreshError;
use crate::sync::lock;

/// The counters of one cache, behind [`RefreshStats`](super::RefreshStats), each mirrored
/// into the metric registered when the cache was built.
#[derive(Debug)]
pub(crate) struct Counters {
    /// Finished collections, indexed by [`RunOutcome`].
    pub(crate) runs: [Counted; 2],
    pub(crate) hits: Counted,
    pub(crate) joins: Counted,
    pub(crate) expired: Counted,
}

/// A failed collection, as served to callers.
#[derive(Debug, Clone)]
pub(crate) enum Failure<E> {
    Failed(E),
    Panicked(Panicked),
}

impl<E> From<Failure<E>> for RefreshError<E> {
    fn from(failure: Failure<E>) -> RefreshError<E> {
        match failure {
            Failure::Failed(e) => RefreshError::Failed(e),
            Failure::Panicked(p) => RefreshError::Panicked(p),
        }
    }
}

/// One finished collection: its generation, when it started, what it produced.
pub(crate) struct Done<V> {
    pub(crate) generation: u64,
    pub(crate) started: Instant,
    pub(crate) value: V,
}

pub(crate) struct CacheState<T, E> {
    /// The last successful collection.
    pub(crate) success: Option<Done<Arc<T>>>,
    /// The last failed collection.
    pub(crate) failure: Option<Done<Arc<Failure<E>>>>,
    /// The generation of the collection in flight.
    pub(crate) in_flight: Option<u64>,
    pub(crate) next_gen: u64,
}

/// What the latest finished collection left in the cache, as a caller takes it under the
/// lock: another reference, cloned out with [`clone_out`] once the lock is released.
pub(crate) type Shared<T, E> = Result<(Arc<T>, Instant), Arc<Failure<E>>>;

/// The newest finished outcome, borrowed from the state.
enum Newest<'a, T, E> {
    Success(&'a Done<Arc<T>>),
    Failure(&'a Done<Arc<Failure<E>>>),
}

impl<T, E> Newest<'_, T, E> {
    fn generation(&self) -> u64 {
        match self {
            Newest::Success(done) => done.generation,
            Newest::Failure(done) => done.generation,
        }
    }

    /// Another reference to it: no user code runs.
    fn share(&self) -> Shared<T, E> {
        match self {
            Newest::Success(done) => Ok((Arc::clone(&done.value), done.started)),
            Newest::Failure(done) => Err(Arc::clone(&done.value)),
        }
    }
}

impl<T, E> CacheState<T, E> {
    pub(crate) fn new() -> CacheState<T, E> {
        CacheState {
            success: None,
            failure: None,
            in_flight: None,
            next_gen: 1,
        }
    }

    fn newest(&self) -> Option<Newest<'_, T, E>> {
        let success_gen = self.success.as_ref().map_or(0, |d| d.generation);
        let failure_gen = self.failure.as_ref().map_or(0, |d| d.generation);
        match (&self.success, &self.failure) {
            (Some(s), _) if success_gen > failure_gen => Some(Newest::Success(s)),
            (_, Some(f)) if failure_gen > success_gen => Some(Newest::Failure(f)),
            _ => None,
        }
    }

    /// The outcome of the newest finished collection if it is generation `gen` or newer.
    pub(crate) fn outcome_since(&self, generation: u64) -> Option<Shared<T, E>> {
        let newest = self.newest()?;
        (newest.generation() >= generation).then(|| newest.share())
    }

    /// What the cache may serve at `now` without collecting: the newest outcome, if it is a
    /// success younger than `ttl` or a failure younger than `failure_ttl`. Ages run from the
    /// collection's start and the bounds are strict: at `age == ttl` the entry is stale.
    /// A stale entry is not even referenced.
    pub(crate) fn cached_at(
        &self,
        now: Instant,
        ttl: Duration,
        failure_ttl: Duration,
    ) -> Option<Shared<T, E>> {
        let fresh = |started: Instant, ttl: Duration| now.saturating_duration_since(started) < ttl;
        let newest = self.newest()?;
        let is_fresh = match &newest {
            Newest::Success(done) => fresh(done.started, ttl),
            Newest::Failure(done) => fresh(done.started, failure_ttl),
        };
        is_fresh.then(|| newest.share())
    }
}

impl<T, E> Drop for CacheState<T, E> {
    /// The last handle (or the collection that outlived it) lets the cache go: the values'
    /// `Drop` is user code, and may run on a worker thread.
    fn drop(&mut self) {
        drop_contained(DROP_VALUE, self.success.take());
        drop_contained(DROP_ERROR, self.failure.take());
    }
}

/// What [`copy_out`] calls, as its traces and errors name it.
pub(crate) const CLONE_VALUE: &str = "the cached value's Clone";
pub(crate) const DROP_VALUE: &str = "a cached value's Drop";
const CLONE_ERROR: &str = "the cached error's Clone";
pub(crate) const DROP_ERROR: &str = "a cached error's Drop";

/// One caller's copy of a value the cache shares, made after the state lock is released.
/// The `Clone` is user code: a panic in it is contained and traced, and becomes the
/// caller's error. The reference is let go afterwards; if it was the last one (a newer
/// collection replaced the value meanwhile), the value's `Drop` runs here, contained.
pub(crate) fn copy_out<V: Clone>(what: &str, dropped: &str, shared: Arc<V>) -> Result<V, Panicked> {
    let copied = catch_unwind(AssertUnwindSafe(|| V::clone(&shared)));
    drop_contained(dropped, shared);
    copied.map_err(|payload| {
        let message = panic_message(&*payload);
        drop_quietly(payload);
        trace_panic(what, &message);
        Panicked::new(format!("{what} panicked: {message}"))
    })
}

/// A caller's copy of a shared outcome (see [`copy_out`]): the value with when its
/// collection started, or the error. A `Clone` that panicked is a
/// [`RefreshError::Panicked`] saying so.
pub(crate) fn clone_out<T: Clone, E: Clone>(
    shared: Shared<T, E>,
) -> Result<(T, Instant), RefreshError<E>> {
    match shared {
        Ok((value, started)) => match copy_out(CLONE_VALUE, DROP_VALUE, value) {
            Ok(value) => Ok((value, started)),
            Err(panicked) => Err(RefreshError::Panicked(panicked)),
        },
        Err(failure) => match copy_out(CLONE_ERROR, DROP_ERROR, failure) {
            Ok(failure) => Err(failure.into()),
            Err(panicked) => Err(RefreshError::Panicked(panicked)),
        },
    }
}

/// The shared part of a cache the flight needs.
pub(crate) struct CacheCore<T, E> {
    pub(crate) state: Mutex<CacheState<T, E>>,
    pub(crate) event: Signal,
    pub(crate) counters: Counters,
}

/// Carried by a running collection; stores its outcome, or, if dropped without one, gives
/// the flight up so that a waiter can start another.
pub(crate) struct Flight<T, E> {
    pub(crate) core: Arc<CacheCore<T, E>>,
    pub(crate) generation: u64,
}

impl<T, E> Flight<T, E> {
    fn complete(self, started: Instant, result: Result<T, Failure<E>>) {
        let ok = result.is_ok();
        // The outcome this one replaces: its `Drop` is user code, run after the lock, the
        // count and the wake-ups, contained.
        let (replaced_value, replaced_failure) = {
            let mut state = lock(&self.core.state);
            if state.in_flight == Some(self.generation) {
                state.in_flight = None;
            }
            let generation = self.generation;
            match result {
                Ok(value) => {
                    let done = Done {
                        generation,
                        started,
                        value: Arc::new(value),
                    };
                    (state.success.replace(done), None)
                }
                Err(value) => {
                    let done = Done {
                        generation,
                        started,
                        value: Arc::new(value),
                    };
                    (None, state.failure.replace(done))
                }
            }
        };
        let run = &self.core.counters.runs[if ok {
            RunOutcome::Ok
        } else {
            RunOutcome::Error
        } as usize];
        run.count();
        self.core.event.notify_all();
        // The recorder is user code: it hears of the run once the waiters are woken.
        run.emit();
        drop_contained("a replaced cached value's Drop", replaced_value);
        drop_contained("a replaced cached failure's Drop", replaced_failure);
        // Dropped here: the flight is no longer marked, so `Drop` gives nothing up.
    }
}

impl<T, E> Drop for Flight<T, E> {
    fn drop(&mut self) {
        let gave_up = {
            let mut state = lock(&self.core.state);
            let mine = state.in_flight == Some(self.generation);
            if mine {
                state.in_flight = None;
            }
            mine
        };
        if gave_up {
            self.core.event.notify_all();
        }
    }
}

/// Runs a blocking collection on the current (worker) thread and stores its outcome. A
/// panic is stored as a failure, then resumed so the pool counts and reports it.
pub(crate) fn run_blocking<T, E>(flight: Flight<T, E>, collect: &dyn Fn() -> Result<T, E>) {
    let started = Instant::now();
    match catch_unwind(AssertUnwindSafe(collect)) {
        Ok(result) => flight.complete(started, result.map_err(Failure::Failed)),
        Err(payload) => {
            let panicked = Panicked::new(panic_message(&*payload));
            flight.complete(started, Err(Failure::Panicked(panicked)));
            resume_unwind(payload)
        }
    }
}

/// The async counterpart of [`run_blocking`], driven by a shield's runner.
pub(crate) async fn run_async<T, E, F>(flight: Flight<T, E>, collection: F)
where
    F: Future<Output = Result<T, E>>,
{
    let started = Instant::now();
    match AssertUnwindSafe(collection).catch_unwind().await {
        Ok(result) => flight.complete(started, result.map_err(Failure::Failed)),
        Err(payload) => {
            let panicked = Panicked::new(panic_message(&*payload));
            flight.complete(started, Err(Failure::Panicked(panicked)));
            resume_unwind(payload)
        }
    }
}

/// Exhaustive interleavings of a flight's completion, its give-up, a joiner and a restart,
/// under loom.
#[cfg(all(test, loopguard_loom))]
mod loom_model;
