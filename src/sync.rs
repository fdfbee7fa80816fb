//! Small synchronization helpers shared by the modules.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, recovering the guard if a panic poisoned it.
///
/// Every critical section in this crate leaves its data consistent before anything that
/// can panic runs, so a poisoned lock carries no broken invariant and is safe to reuse.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Describes a panic payload: its message when it is a string, a placeholder otherwise.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// Drops `value`, containing a panic from its `Drop` so that it cannot unwind into a
/// worker loop or a hand-off. Returns whether the drop panicked.
pub(crate) fn drop_quietly<T>(value: T) -> bool {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(value))).is_err()
}

/// Wakes a task. A `Waker` is user code: a panic in it must not unwind into a worker, a
/// `Drop`, or a loop that still has other tasks to wake.
pub(crate) fn wake_quietly(waker: std::task::Waker) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| waker.wake()));
}
