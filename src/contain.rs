//! The one way this crate contains code it does not own.
//!
//! Where loopguard itself calls such code (a job, a waker it stored, a logger, a metrics
//! recorder, an orphan handler, a failure's `Debug`, the `Drop` of an output or of a waker
//! it let go), the call goes through [`contain`] or a helper built on it, with loopguard's
//! own state already consistent and no lock held. A panic there is caught, so it cannot
//! unwind into a worker loop, a `Drop`, or a hand-off that still has work to do, and it
//! leaves a trace: [`trace_panic`] writes one line to stderr, which needs no user code.
//! Other crates' primitives are not wrapped: what they call is theirs to call.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Waker;

/// Panics of user code contained so far in this process; read by
/// [`telemetry::contained_panics`](crate::telemetry::contained_panics).
pub(crate) static CONTAINED: AtomicU64 = AtomicU64::new(0);

/// Runs `f`, user code, containing a panic: `None` if it panicked. The panic payload is
/// dropped with its own `Drop` contained too, and a line naming `what` goes to stderr.
pub(crate) fn contain<R>(what: &str, f: impl FnOnce() -> R) -> Option<R> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(value) => Some(value),
        Err(payload) => {
            let message = panic_message(&*payload);
            drop_quietly(payload);
            trace_panic(what, &message);
            None
        }
    }
}

/// The trace a contained panic leaves: one line on stderr. Not through `log`, because the
/// logger is user code too (and may be what panicked).
pub(crate) fn trace_panic(what: &str, message: &str) {
    // The first few get a line each; after that they are only counted, so code that keeps
    // panicking cannot flood stderr.
    const LINES: u64 = 8;
    let seen = CONTAINED.fetch_add(1, Ordering::Relaxed);
    if seen >= LINES {
        return;
    }
    // `eprintln!` panics if stderr is closed; a trace must never add a panic of its own.
    let _ = catch_unwind(|| {
        use std::io::Write as _;
        let mut stderr = std::io::stderr();
        let _ = writeln!(
            stderr,
            "loopguard: {what} panicked and was contained: {message}"
        );
        if seen + 1 == LINES {
            let _ = writeln!(
                stderr,
                "loopguard: further contained panics are only counted (telemetry::contained_panics)"
            );
        }
    });
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

/// Drops `value`, containing a panic from its `Drop` (no trace: a payload's `Drop` is the
/// only caller, and tracing it would recurse). Returns whether the drop panicked.
pub(crate) fn drop_quietly<T>(value: T) -> bool {
    catch_unwind(AssertUnwindSafe(move || drop(value))).is_err()
}

/// Drops `value`, an output of user code nobody will take, containing a panic in its `Drop`
/// and leaving a trace naming `what`.
pub(crate) fn drop_contained<T>(what: &str, value: T) {
    contain(what, move || drop(value));
}

/// Wakes a task. A `Waker` is user code: a panic in it must not unwind into a worker, a
/// `Drop`, or a loop that still has other tasks to wake.
pub(crate) fn wake(waker: Waker) {
    contain("a Waker", || waker.wake());
}

/// Logs through the `log` facade, containing a panicking logger.
macro_rules! log_contained {
    ($level:ident, $($arg:tt)+) => {
        $crate::contain::contain("the logger", || ::log::$level!(target: "loopguard", $($arg)+))
    };
}
pub(crate) use log_contained;
