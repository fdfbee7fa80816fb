//! [`Signal`]: tasks waiting for a condition that loopguard's own state decides (a pool gone
//! idle, its threads exited, a collection finished), woken by loopguard itself.
//!
//! It is loopguard's own rather than `event-listener`'s because the wakers it stores are
//! called by loopguard: each `wake` and each `Drop` of a stored waker runs after the lock is
//! released and is contained, so a waker that panics or calls back into the signal (or into
//! whatever notifies it) neither strands the other waiters nor unwinds into a worker thread.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

// Under the crate's loom cfg (unit tests only) the list's lock is loom's, so
// `signal/loom_model.rs` explores register, notify and drop racing; normal builds never
// see loom.
use crate::sync::Mutex;

use crate::sync::lock;
use crate::waker_slot::{Visit, WakerSlot, register};

/// A list of waiting tasks; see the [module docs](self).
#[derive(Default)]
pub(crate) struct Signal {
    waiters: Mutex<Waiters>,
}

#[derive(Default)]
struct Waiters {
    next_id: u64,
    list: Vec<(u64, WakerSlot)>,
}

impl Signal {
    pub(crate) fn new() -> Signal {
        Signal::default()
    }

    /// Wakes every task waiting now. Call it after changing the state the waiters' condition
    /// reads; the wakes run outside the lock, each contained.
    pub(crate) fn notify_all(&self) {
        let woken = std::mem::take(&mut lock(&self.waiters).list);
        for (_, mut waker) in woken {
            waker.take().wake();
        }
    }

    /// Resolves once `ready()` is true, looked at on every poll after registering the task:
    /// a [`notify_all`](Signal::notify_all) that follows a change `ready` sees is never
    /// missed.
    pub(crate) fn wait<C: Fn() -> bool>(&self, ready: C) -> Wait<'_, C> {
        Wait {
            signal: self,
            ready,
            id: None,
        }
    }

    /// Stores `waker` for `id` (a fresh id if `None`) through [`register`]: cloned outside
    /// the lock, the one it replaces dropped after the lock, contained.
    fn register(&self, id: &mut Option<u64>, waker: &Waker) {
        register(&self.waiters, waker, |waiters| {
            let me = *id.get_or_insert_with(|| {
                let me = waiters.next_id;
                waiters.next_id = me.wrapping_add(1);
                me
            });
            // A notify since the last look took the entry out: a new, empty one is listed
            // (the caller looks at its condition again after registering).
            let at = match waiters.list.iter().position(|(w, _)| *w == me) {
                Some(at) => at,
                None => {
                    waiters.list.push((me, WakerSlot::new()));
                    waiters.list.len() - 1
                }
            };
            Visit::Store(&mut waiters.list[at].1, ())
        });
    }

    /// Forgets the waiter `id`, dropping its waker after the lock, contained.
    fn deregister(&self, id: u64) {
        let removed = {
            let mut waiters = lock(&self.waiters);
            let at = waiters.list.iter().position(|(w, _)| *w == id);
            at.map(|at| waiters.list.swap_remove(at))
        };
        // Its waker's `Drop` runs here, contained (see `WakerSlot`).
        drop(removed);
    }
}

impl fmt::Debug for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signal")
            .field("waiting", &lock(&self.waiters).list.len())
            .finish()
    }
}

/// Future of [`Signal::wait`].
pub(crate) struct Wait<'a, C> {
    signal: &'a Signal,
    ready: C,
    id: Option<u64>,
}

impl<C: Fn() -> bool> Future for Wait<'_, C> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if (this.ready)() {
            return Poll::Ready(());
        }
        this.signal.register(&mut this.id, cx.waker());
        if (this.ready)() {
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

// Nothing is pinned structurally: `ready` is only called through `&`.
impl<C> Unpin for Wait<'_, C> {}

impl<C> Drop for Wait<'_, C> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.signal.deregister(id);
        }
    }
}

impl<C> fmt::Debug for Wait<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wait").field("id", &self.id).finish()
    }
}

/// Exhaustive interleavings of register, notify and drop, under loom.
#[cfg(all(test, loopguard_loom))]
mod loom_model;

#[cfg(all(test, not(loopguard_loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn debug_shows_the_waiters() {
        let signal = Signal::new();
        let mut wait = signal.wait(|| false);
        assert_eq!(format!("{wait:?}"), "Wait { id: None }");
        let mut cx = Context::from_waker(Waker::noop());
        assert!(Pin::new(&mut wait).poll(&mut cx).is_pending());
        assert_eq!(format!("{signal:?}"), "Signal { waiting: 1 }");
        assert!(format!("{wait:?}").starts_with("Wait { id: Some("));
        drop(wait);
        assert_eq!(format!("{signal:?}"), "Signal { waiting: 0 }");
    }

    #[test]
    fn a_notify_after_the_change_wakes_the_waiter() {
        let signal = Arc::new(Signal::new());
        let flag = Arc::new(AtomicBool::new(false));
        let setter = {
            let (signal, flag) = (signal.clone(), flag.clone());
            std::thread::spawn(move || {
                flag.store(true, Ordering::Release);
                signal.notify_all();
            })
        };
        futures_lite::future::block_on(signal.wait(|| flag.load(Ordering::Acquire)));
        setter.join().unwrap();
        assert_eq!(lock(&signal.waiters).list.len(), 0);
    }

    #[test]
    fn a_dropped_wait_leaves_no_waker_behind() {
        let signal = Signal::new();
        let mut wait = Box::pin(signal.wait(|| false));
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(wait.as_mut().poll(&mut cx).is_pending());
        assert!(wait.as_mut().poll(&mut cx).is_pending());
        assert_eq!(lock(&signal.waiters).list.len(), 1);
        drop(wait);
        assert_eq!(lock(&signal.waiters).list.len(), 0);
    }
}
