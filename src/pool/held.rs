//! Which pool's slot the request being served on this thread holds (the tower layer's
//! `for_pool` mode), so that its handler cannot wait for a slot its own request holds.
//!
//! The layer marks the thread while it calls the inner service and while it polls the
//! handler's future; the mark is the address of the pool's limit, alive for as long as the
//! request's permit is. A [`Pool::run`](super::Pool::run) polled there (an `.await` in
//! the handler) that would queue, or a [`Pool::try_run`](super::Pool::try_run) that would be
//! refused, is refused with `OwnSlot` instead: with its own request holding a slot, the
//! handler would wait for the others to free one, and on a one-worker pool for ever. Work
//! the handler spawns onto its executor is polled elsewhere and not seen.
//!
//! One `Cell<usize>` per thread with a constant initializer: no allocation, no lock, no
//! destructor; and a pool no layer admits requests on never reads it, so its saturated
//! `try_run` pays one relaxed load of a flag on the refusal path.

use crate::gate::limit::Limit;

#[cfg(feature = "tower")]
thread_local! {
    static HELD: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[cfg(feature = "tower")]
fn address(limit: &Limit) -> usize {
    limit as *const Limit as usize
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

/// Marks this thread as serving a request that holds one of `limit`'s permits.
#[cfg(feature = "tower")]
pub(crate) fn enter(limit: &Limit) -> Scope {
    Scope::set(address(limit))
}

/// Clears the mark for a call that knows it is not asking for a second slot of its own.
#[cfg(feature = "tower")]
pub(crate) fn clear() -> Scope {
    Scope::set(0)
}

/// Whether the request served on this thread holds one of `limit`'s permits.
///
/// A pool no layer admits requests on answers from its limit's flag, without the
/// thread-local.
#[cfg(feature = "tower")]
#[inline]
pub(crate) fn holds(limit: &Limit) -> bool {
    limit.is_lent_to_requests() && HELD.with(|held| held.get()) == address(limit)
}

/// Without the tower layer no request holds a pool's slot.
#[cfg(not(feature = "tower"))]
#[inline]
pub(crate) fn holds(_: &Limit) -> bool {
    false
}
