//! The owned [`Permit`] of a [`Limit`], and the one future that waits for one
//! ([`Acquire`]), after tokio's `Semaphore::acquire_owned` and `OwnedSemaphorePermit`.
//!
//! A permit is the only way a slot is held and its `Drop` the only way one comes back:
//! it samples the limit's `Retry-After` basis ([`Basis`]), gives the slot back (to the
//! oldest waiter if one waits: the count in use does not drop, so no `try_acquire` can
//! take it), and notifies idleness when it was the last. The pool's jobs, the tower
//! layer's requests and the waits of both hold permits of this one type, so the slot's life
//! has one owner whoever admitted it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::Refused;
use super::limit::{Basis, Limit};
use super::wait::{Ended, SlotWait, Started};

impl Limit {
    /// Takes a free slot if nobody waits, as an owned [`Permit`], counting it as demand; a
    /// refusal because the gate is saturated is counted as rejected when `count` says so (a
    /// caller that goes on to wait in line was not refused).
    ///
    /// Lock-free; allocates nothing. A refusal loads the gate's word and bumps the refusal
    /// count, nothing else; a grant clones the `Arc` and reads the clock only when the basis
    /// samples holds ([`Basis::Holds`]).
    #[inline]
    pub(crate) fn try_acquire(self: &Arc<Self>, count: bool) -> Result<Permit, Refused> {
        match self.gate.try_acquire() {
            Ok(()) => {
                self.add_demand(1);
                Ok(Permit::granted(Arc::clone(self)))
            }
            Err(Refused::Saturated) => {
                if count {
                    self.count_rejected();
                }
                Err(Refused::Saturated)
            }
            Err(Refused::Closed) => Err(Refused::Closed),
        }
    }
}

/// One held slot of a [`Limit`]. Dropping it is the one release (see the
/// [module docs](self)).
#[allow(unreachable_pub)]
pub struct Permit {
    limit: Arc<Limit>,
    /// When it was granted, read only under [`Basis::Holds`].
    granted: Option<Instant>,
    /// Under [`Basis::Jobs`]: the time the jobs run on it took, in nanoseconds (0: none).
    jobs: AtomicU64,
}

impl Permit {
    /// The permit of a slot just taken from `limit`'s gate (and counted as demand). The
    /// clock is read only when the basis samples holds.
    fn granted(limit: Arc<Limit>) -> Permit {
        Permit {
            granted: (limit.basis() == Basis::Holds).then(Instant::now),
            limit,
            jobs: AtomicU64::new(0),
        }
    }

    /// A slot granted to a waiter that will not use it (the gate closed, or the waiter
    /// left): dropping it passes the slot on, and samples nothing.
    fn unused(limit: &Arc<Limit>) -> Permit {
        Permit {
            limit: Arc::clone(limit),
            granted: None,
            jobs: AtomicU64::new(0),
        }
    }

    /// A job ran on this permit for `elapsed`: under [`Basis::Jobs`] the permit's sample is
    /// the time its jobs took (several jobs run one after the other on a request's permit
    /// add up). Taken by `&self`: a request's permit is shared with its response body.
    pub(crate) fn job_ran(&self, elapsed: Duration) {
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX).max(1);
        self.jobs.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Gives the slot back as dropping does, but samples nothing: the holder was refused
    /// after its grant (its deadline passed before it was served), so its hold measures no
    /// service, and a near-zero sample would drag the `Retry-After` basis down.
    #[cfg(any(test, feature = "tower"))]
    pub(crate) fn discard(mut self) {
        self.granted = None;
        *self.jobs.get_mut() = 0;
    }

    /// What this permit adds to the `Retry-After` basis when it is dropped.
    fn sample(&self) -> Option<Duration> {
        match self.limit.basis() {
            Basis::Holds => self.granted.map(|at| at.elapsed()),
            Basis::Jobs => match self.jobs.load(Ordering::Relaxed) {
                0 => None,
                nanos => Some(Duration::from_nanos(nanos)),
            },
        }
    }
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("granted", &self.granted)
            .field(
                "jobs",
                &Duration::from_nanos(self.jobs.load(Ordering::Relaxed)),
            )
            .finish_non_exhaustive()
    }
}

impl Drop for Permit {
    /// Samples the basis, gives the slot back (handing it to the oldest waiter, whose
    /// waker runs outside every lock) and notifies idleness at the last slot.
    fn drop(&mut self) {
        self.limit.release(self.sample());
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not polled yet: no slot asked for.
    Start,
    /// In line, counted as demand.
    Queued,
    /// Granted, closed out, or left.
    Done,
}

/// The one wait for a [`Permit`], FIFO: a pool's `Run` and the tower layer's waiting mode
/// both wait through it. Nothing happens until it is polled; dropping it (or
/// [`leave`](Acquire::leave)) withdraws a queued caller, and a slot granted meanwhile goes
/// on to the next in line.
///
/// The caller's waker is cloned in a poll (user code): a panic there leaves the caller
/// queued, for `Drop` to withdraw.
#[allow(unreachable_pub)]
pub struct Acquire {
    /// Moved into the permit when the caller is granted one (no second `Arc` clone per
    /// admission); `None` only once the wait ended with a grant.
    limit: Option<Arc<Limit>>,
    wait: SlotWait,
    state: State,
    created: Instant,
}

impl std::fmt::Debug for Acquire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acquire")
            .field("state", &self.state)
            .field("created", &self.created)
            .finish_non_exhaustive()
    }
}

impl Acquire {
    /// A wait for a slot of `limit`, its wait measured from now.
    pub(crate) fn new(limit: Arc<Limit>) -> Acquire {
        Acquire {
            limit: Some(limit),
            wait: SlotWait::new(),
            state: State::Start,
            created: Instant::now(),
        }
    }

    /// Takes a free slot, or joins the line and looks whether the wait has ended: the
    /// permit and how long the caller waited (already in the limit's own record: tell the
    /// recorder with [`Limit::emit_wait`] once the caller's state is settled), or `None`
    /// if the limit is closed. `Pending` only while in line.
    pub(crate) fn poll_acquire(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<(Permit, Duration)>> {
        let Some(limit) = self.limit.as_ref() else {
            debug_assert!(false, "`Acquire` polled after it was granted");
            return Poll::Ready(None);
        };
        if self.state == State::Start {
            match self.wait.start(&limit.gate) {
                Started::Acquired => {
                    self.state = State::Done;
                    limit.add_demand(1);
                    return Poll::Ready(Some(self.grant()));
                }
                Started::Closed => {
                    self.state = State::Done;
                    return Poll::Ready(None);
                }
                Started::Queued => {
                    limit.add_demand(1);
                    self.state = State::Queued;
                }
            }
        }
        if self.state == State::Done {
            debug_assert!(false, "`Acquire` polled after it ended");
            return Poll::Ready(None);
        }
        // The waker is cloned in here (user code); a panic leaves us queued, for `Drop`.
        let ended = std::task::ready!(self.wait.poll(&limit.gate, cx.waker()));
        self.state = State::Done;
        match ended {
            // Counted as demand since it queued.
            Ended::Granted => Poll::Ready(Some(self.grant())),
            Ended::Closed => {
                limit.add_demand(-1);
                Poll::Ready(None)
            }
            // Claimed just before the close: the slot goes back at once.
            Ended::ClosedHolding => {
                drop(Permit::unused(limit));
                Poll::Ready(None)
            }
        }
    }

    /// The caller holds a slot: its permit (which takes the limit's `Arc` over), its wait
    /// in the limit's own record.
    fn grant(&mut self) -> (Permit, Duration) {
        let limit = self.limit.take().expect("granted once");
        let waited = self.created.elapsed();
        // The permit first: nothing between the `take` and it could leave the slot unowned.
        let permit = Permit::granted(limit);
        permit.limit.note_wait(waited);
        (permit, waited)
    }

    /// Whether the caller waits in line.
    pub(crate) fn is_queued(&self) -> bool {
        self.state == State::Queued
    }

    /// Leaves the line (the caller gives up: dropped, refused in line, or its deadline
    /// passed): a slot granted meanwhile goes on to the next in line. Nothing if not queued.
    pub(crate) fn leave(&mut self) {
        let Some(limit) = self.limit.as_ref().filter(|_| self.state == State::Queued) else {
            return;
        };
        self.state = State::Done;
        if self.wait.cancel(&limit.gate) {
            drop(Permit::unused(limit));
        } else {
            limit.add_demand(-1);
        }
    }
}

impl Future for Acquire {
    type Output = Option<Permit>;

    /// The permit once granted, its wait told to the recorder; `None` if the limit closed.
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Permit>> {
        let acquired = std::task::ready!(self.poll_acquire(cx));
        Poll::Ready(acquired.map(|(permit, waited)| {
            permit.limit.emit_wait(waited);
            permit
        }))
    }
}

impl Drop for Acquire {
    fn drop(&mut self) {
        self.leave();
    }
}

#[cfg(all(test, not(loopguard_loom)))]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::demand::Demand;

    fn limit(capacity: usize, basis: Basis) -> Arc<Limit> {
        Arc::new(Limit::new(
            "permit".into(),
            capacity,
            Demand::default(),
            basis,
        ))
    }

    #[test]
    fn a_permits_drop_is_the_release_and_hands_the_slot_to_the_oldest_waiter() {
        let limit = limit(1, Basis::Jobs);
        let held = limit.try_acquire(true).expect("a free slot");
        assert_eq!(limit.in_use(), 1);
        assert!(limit.try_acquire(true).is_err(), "one slot, held");
        assert_eq!(limit.rejected(), 1);
        let mut first = Acquire::new(limit.clone());
        let mut second = Acquire::new(limit.clone());
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(first.poll_acquire(&mut cx).is_pending());
        assert!(second.poll_acquire(&mut cx).is_pending());
        assert_eq!(limit.waiting(), 2);
        drop(held);
        // Handed off: still in use, and not to a newcomer.
        assert_eq!((limit.in_use(), limit.waiting()), (1, 1));
        assert!(
            limit.try_acquire(false).is_err(),
            "a newcomer overtook a waiter"
        );
        let Poll::Ready(Some((granted, _))) = first.poll_acquire(&mut cx) else {
            panic!("the oldest waiter was not granted the slot");
        };
        assert!(second.poll_acquire(&mut cx).is_pending());
        // The second gives up: nothing is held for it, and the granted permit's drop frees
        // the slot for good.
        drop(second);
        assert_eq!(limit.waiting(), 0);
        drop(granted);
        assert_eq!((limit.in_use(), limit.waiting()), (0, 0));
        assert!(limit.try_acquire(false).is_ok());
    }

    #[test]
    fn under_the_holds_basis_a_permit_samples_its_hold() {
        let limit = limit(1, Basis::Holds);
        assert_eq!(limit.mean_hold(), None);
        // Read before the grant: the hold sampled at the drop cannot be longer.
        let before = Instant::now();
        let permit = limit.try_acquire(false).unwrap();
        std::thread::sleep(Duration::from_millis(20)); // the hold under test
        drop(permit);
        let mean = limit.mean_hold().expect("sampled at its drop");
        assert!(mean >= Duration::from_millis(20) && mean <= before.elapsed());
    }

    #[test]
    fn a_discarded_permit_gives_its_slot_back_and_samples_nothing() {
        for basis in [Basis::Holds, Basis::Jobs] {
            let limit = limit(1, basis);
            let served = limit.try_acquire(false).unwrap();
            served.job_ran(Duration::from_millis(40));
            std::thread::sleep(Duration::from_millis(40)); // the hold of a served caller
            drop(served);
            let basis_before = limit.mean_hold().expect("one sample");
            // Refused after its grant, with or without a job's time on it: no sample.
            let refused = limit.try_acquire(false).unwrap();
            refused.job_ran(Duration::from_millis(1));
            let mut waiter = Acquire::new(limit.clone());
            let waker = std::task::Waker::noop();
            let mut cx = Context::from_waker(waker);
            assert!(waiter.poll_acquire(&mut cx).is_pending());
            refused.discard();
            assert_eq!(limit.mean_hold(), Some(basis_before), "{basis:?}");
            // The slot went on to the waiter, as a drop would have passed it.
            assert!(matches!(waiter.poll_acquire(&mut cx), Poll::Ready(Some(_))));
        }
    }

    #[test]
    fn under_the_jobs_basis_a_permit_samples_its_jobs_only() {
        let limit = limit(1, Basis::Jobs);
        // No job ran on it: nothing to sample, however long it was held.
        drop(limit.try_acquire(false).unwrap());
        assert_eq!(limit.mean_hold(), None);
        // Two jobs ran on it, one after the other: their sum, not the hold.
        let permit = limit.try_acquire(false).unwrap();
        permit.job_ran(Duration::from_millis(3));
        permit.job_ran(Duration::from_millis(4));
        std::thread::sleep(Duration::from_millis(20));
        drop(permit);
        assert_eq!(limit.mean_hold(), Some(Duration::from_millis(7)));
    }

    #[test]
    fn a_slot_taken_back_from_a_closing_wait_samples_nothing() {
        let limit = limit(1, Basis::Holds);
        let held = limit.try_acquire(false).unwrap();
        let mut acquire = Acquire::new(limit.clone());
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(acquire.poll_acquire(&mut cx).is_pending());
        // Granted, then left before it was seen: the slot goes back unsampled.
        drop(held);
        let sampled = limit.mean_hold();
        acquire.leave();
        assert_eq!(limit.mean_hold(), sampled, "an unused grant was sampled");
        assert_eq!((limit.in_use(), limit.waiting()), (0, 0));
        // Closed while waiting: `None`, and the limit is idle.
        let held = limit.try_acquire(false).unwrap();
        let mut acquire = Acquire::new(limit.clone());
        assert!(acquire.poll_acquire(&mut cx).is_pending());
        assert!(limit.close());
        assert!(matches!(acquire.poll_acquire(&mut cx), Poll::Ready(None)));
        drop(held);
        assert_eq!((limit.in_use(), limit.waiting()), (0, 0));
        assert!(matches!(limit.try_acquire(false), Err(Refused::Closed)));
    }
}
