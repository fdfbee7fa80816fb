//! Which pool's slot the request being served on this thread holds (the tower layer's
//! `for_pool` mode), so that its handler cannot wait for a slot its own request holds.
//!
//! The layer marks the thread while it calls the inner service and while it polls the
//! handler's future; the mark is the address of the pool's shared state, alive for as long
//! as the request's slot is. A [`Pool::run`](super::Pool::run) polled there (an `.await` in
//! the handler) that would queue, or a [`Pool::try_run`](super::Pool::try_run) that would be
//! refused, is refused with `OwnSlot` instead: with its own request holding a slot, the
//! handler would wait for the others to free one, and on a one-worker pool for ever. Work
//! the handler spawns onto its executor is polled elsewhere and not seen.
//!
//! One `Cell<usize>` per thread with a constant initializer: no allocation, no lock, no
//! destructor; and a pool no layer admits requests on never reads it, so its saturated
//! `try_run` pays one relaxed load of a flag on the refusal path.

use std::sync::Arc;

use super::core::Core;

#[cfg(feature = "tower")]
thread_local! {
    static HELD: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[cfg(feature = "tower")]
fn address(core: &Arc<Core>) -> usize {
    Arc::as_ptr(core) as usize
}

/// The mark of a request holding a slot of a pool; the previous mark comes back on drop.
#[cfg(feature = "tower")]
#[must_use = "the mark lasts as long as the scope"]
pub(crate) struct Scope {
    previous: usize,
}

#[cfg(feature = "tower")]
impl Scope {
    fn set(mark: usize) -> Scope {
        Scope {
            previous: HELD.with(|held| held.replace(mark)),
        }
    }
}

#[cfg(feature = "tower")]
impl Drop for Scope {
    fn drop(&mut self) {
        HELD.with(|held| held.set(self.previous));
    }
}

/// Marks this thread as serving a request that holds one of `core`'s slots.
#[cfg(feature = "tower")]
pub(crate) fn enter(core: &Arc<Core>) -> Scope {
    Scope::set(address(core))
}

/// Clears the mark for a call that knows it is not asking for a second slot of its own.
#[cfg(feature = "tower")]
pub(crate) fn clear() -> Scope {
    Scope::set(0)
}

/// Whether the request served on this thread holds one of `core`'s slots.
///
/// A pool no layer admits requests on answers from its own state, without the thread-local.
#[cfg(feature = "tower")]
#[inline]
pub(crate) fn holds(core: &Arc<Core>) -> bool {
    core.layered.load(std::sync::atomic::Ordering::Relaxed)
        && HELD.with(|held| held.get()) == address(core)
}

/// Without the tower layer no request holds a pool's slot.
#[cfg(not(feature = "tower"))]
pub(crate) fn holds(_: &Arc<Core>) -> bool {
    false
}
