//! The cache's state and the token a running collection carries to store its result.
//!
//! A collection is marked in flight (under the state lock) before it is submitted, so only
//! one runs at a time. The [`Flight`] token travels with the collection (inside the pool
//! closure, or inside the spawned future) and stores its outcome itself, on the thread that
//! ran it: no caller has to be there. If the collection is dropped without running (the
//! pool refused it, the starter left while waiting for a slot, the executor dropped the
//! runner), the token's `Drop` clears the mark and wakes the waiters, and one of them starts
//! a new collection within its own deadline.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::signal::Signal;
use futures_lite::FutureExt;

use crate::emit::{Counted, RunOutcome};
use crate::failure::Panicked;
use crate::refresh::error::RefreshError;
use crate::sync::{drop_contained, lock, panic_message};

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
    pub(crate) success: Option<Done<T>>,
    /// The last failed collection.
    pub(crate) failure: Option<Done<Failure<E>>>,
    /// The generation of the collection in flight.
    pub(crate) in_flight: Option<u64>,
    pub(crate) next_gen: u64,
}

/// What the latest finished collection left in the cache.
pub(crate) type Cached<T, E> = Result<(T, Instant), Failure<E>>;

impl<T: Clone, E: Clone> CacheState<T, E> {
    pub(crate) fn new() -> CacheState<T, E> {
        CacheState {
            success: None,
            failure: None,
            in_flight: None,
            next_gen: 1,
        }
    }

    /// The outcome of the newest finished collection if it is generation `gen` or newer.
    pub(crate) fn outcome_since(&self, generation: u64) -> Option<Cached<T, E>> {
        let success_gen = self.success.as_ref().map_or(0, |d| d.generation);
        let failure_gen = self.failure.as_ref().map_or(0, |d| d.generation);
        match (&self.success, &self.failure) {
            (Some(s), _) if s.generation >= generation && success_gen > failure_gen => {
                Some(Ok((s.value.clone(), s.started)))
            }
            (_, Some(f)) if f.generation >= generation && failure_gen > success_gen => {
                Some(Err(f.value.clone()))
            }
            _ => None,
        }
    }

    /// What the cache may serve at `now` without collecting: the newest outcome, if it is a
    /// success younger than `ttl` or a failure younger than `failure_ttl`. Ages run from the
    /// collection's start and the bounds are strict: at `age == ttl` the entry is stale.
    pub(crate) fn cached_at(
        &self,
        now: Instant,
        ttl: Duration,
        failure_ttl: Duration,
    ) -> Option<Cached<T, E>> {
        let fresh = |started: Instant, ttl: Duration| now.saturating_duration_since(started) < ttl;
        let outcome = self.outcome_since(1)?;
        match &outcome {
            Ok((_, started)) if fresh(*started, ttl) => Some(outcome),
            Err(_) => match &self.failure {
                Some(f) if fresh(f.started, failure_ttl) => Some(outcome),
                _ => None,
            },
            Ok(_) => None,
        }
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
                        value,
                    };
                    (state.success.replace(done), None)
                }
                Err(value) => {
                    let done = Done {
                        generation,
                        started,
                        value,
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
