//! The one std/loom switch, and poison-free locking.
//!
//! The primitives a loom model explores (the gate, the hand-off, the workers' queue, the
//! keyed gate, the signal, the orphan channel, the refresh flight, the retry ledger, the
//! publisher) take their `Arc`, `Mutex`, `Condvar`, atomics and thread-locals from here,
//! as tokio's take theirs from its `loom` module. Only the crate's own unit tests see loom
//! (`cfg(all(test, loopguard_loom))`): the crate is also built as a plain library under the
//! same flags (its tests depend on it, with the `tower` feature), and loom is a
//! dev-dependency. Everything else uses std directly; [`lock`] takes either mutex.

#[cfg(all(test, loopguard_loom))]
pub(crate) use loom::sync::{Arc, Condvar, Mutex, MutexGuard, atomic};
#[cfg(not(all(test, loopguard_loom)))]
pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard, atomic};

/// A thread-local with a `const` initializer: std's, or loom's under the crate's loom cfg
/// (loom runs its threads on one OS thread; its macro has no `const` form).
#[cfg(not(all(test, loopguard_loom)))]
macro_rules! thread_local_const {
    ($(#[$attr:meta])* static $name:ident: $t:ty = $init:expr;) => {
        ::std::thread_local! { $(#[$attr])* static $name: $t = const { $init }; }
    };
}
#[cfg(all(test, loopguard_loom))]
macro_rules! thread_local_const {
    ($(#[$attr:meta])* static $name:ident: $t:ty = $init:expr;) => {
        ::loom::thread_local! { $(#[$attr])* static $name: $t = $init; }
    };
}
pub(crate) use thread_local_const;

use std::sync::PoisonError;

/// Locks `mutex`, recovering the guard if a panic poisoned it.
///
/// Every critical section in this crate leaves its data consistent before anything that
/// can panic runs, so a poisoned lock carries no broken invariant and is safe to reuse.
///
/// `mutex` is std's, or loom's: the modules a loom model explores take theirs from this
/// module, which swaps loom's in under the crate's loom cfg.
pub(crate) fn lock<M: Lock + ?Sized>(mutex: &M) -> M::Guard<'_> {
    mutex.lock_recovering()
}

/// A mutex [`lock`] takes: std's, and loom's under the crate's loom cfg.
pub(crate) trait Lock {
    /// The guard of a locked mutex.
    type Guard<'a>
    where
        Self: 'a;
    /// Locks, recovering the guard from poison.
    fn lock_recovering(&self) -> Self::Guard<'_>;
}

impl<T: ?Sized> Lock for std::sync::Mutex<T> {
    type Guard<'a>
        = std::sync::MutexGuard<'a, T>
    where
        Self: 'a;
    fn lock_recovering(&self) -> std::sync::MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(all(test, loopguard_loom))]
impl<T> Lock for loom::sync::Mutex<T> {
    type Guard<'a>
        = loom::sync::MutexGuard<'a, T>
    where
        Self: 'a;
    fn lock_recovering(&self) -> loom::sync::MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
