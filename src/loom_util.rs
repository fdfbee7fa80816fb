//! What the loom models share (unit tests under the crate's loom cfg only): a waker that
//! remembers it was woken, and a `block_on` that parks the loom thread while its future is
//! pending.

use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

/// A waker that remembers it was woken.
pub(crate) struct Flag(AtomicBool);

impl Flag {
    pub(crate) fn woken(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A [`Flag`] and its waker.
pub(crate) fn flag() -> (Arc<Flag>, Waker) {
    let flag = Arc::new(Flag(AtomicBool::new(false)));
    (flag.clone(), Waker::from(flag))
}

/// Wakes a parked loom thread.
struct Unpark(thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `future` on this loom thread, parking it while the future is pending (loom reports
/// a deadlock if nothing ever wakes it).
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(output) => return output,
            Poll::Pending => thread::park(),
        }
    }
}
