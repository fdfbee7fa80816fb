//! The admission gate: slots, FIFO waiters, hand-off and close.
//!
//! One atomic word holds the number of slots in use, the number of queued waiters and a
//! closed bit, so that "is a slot free *and* nobody is waiting" is decided by a single
//! compare-and-exchange. `try_acquire` and an uncontended `release` never take a lock.
//! A slot released while waiters are queued is handed to the oldest waiter directly: the
//! `in_use` count does not drop, so no concurrent `try_acquire` can take it.
//!
//! # Why this is sound, and the model that checks it
//!
//! The fast paths (`try_acquire`, and `release` while nobody waits) are a CAS on the whole
//! word; everything that changes the number of waiters does so under the queue lock,
//! together with the queue itself. So a fast path that raced a new waiter fails its CAS
//! (the word changed) and, seeing a waiter, goes the locked way; a locked release that
//! finds the queue empty knows the count is zero too. A waiter's state is set before its
//! waker is taken under the waker lock, and read after the waker is stored under the same
//! lock, so a grant is never missed. These orderings are exactly what a hand review gets
//! wrong, so `loom_model` below checks the races exhaustively:
//! `RUSTFLAGS="--cfg loopguard_loom" cargo test --release --lib loom_model`. As in
//! async-lock, a cfg swaps std's primitives for loom's and normal builds never see loom; the
//! cfg has a crate-specific name because dependencies (concurrent-queue) switch to loom
//! themselves under a plain `cfg(loom)` and then need features we do not want.

use std::collections::VecDeque;
use std::task::Waker;

use crate::sync::{drop_contained, wake};

// Only the crate's own unit tests see loom: the crate is also built as a plain library under
// the same flags (its tests depend on it, with the `tower` feature), and loom is a
// dev-dependency.
#[cfg(all(test, loopguard_loom))]
use loom::sync::{
    Arc, Mutex, MutexGuard,
    atomic::{AtomicU8, AtomicU64, Ordering},
};
#[cfg(not(all(test, loopguard_loom)))]
use std::sync::{
    Arc, Mutex, MutexGuard,
    atomic::{AtomicU8, AtomicU64, Ordering},
};

/// Locks `mutex`, recovering from poison (see `crate::sync::lock`; here the mutex may be
/// loom's).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

const IN_USE_ONE: u64 = 1;
const IN_USE_MASK: u64 = (1 << 31) - 1;
const WAITING_SHIFT: u32 = 31;
const WAITING_ONE: u64 = 1 << WAITING_SHIFT;
const WAITING_MASK: u64 = ((1 << 31) - 1) << WAITING_SHIFT;
const CLOSED: u64 = 1 << 63;

/// The largest capacity the gate supports.
pub(crate) const MAX_CAPACITY: usize = 1 << 16;

/// Why a slot was not acquired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    Saturated,
    Closed,
}

const WAITING: u8 = 0;
const GRANTED: u8 = 1;
const CLOSED_OUT: u8 = 2;

/// A queued waiter. The state only changes under the gate's queue lock.
#[derive(Debug)]
pub(crate) struct Waiter {
    state: AtomicU8,
    waker: Mutex<Option<Waker>>,
}

/// What a waiter sees when it looks at its state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitState {
    Waiting,
    Granted,
    Closed,
}

/// A shared handle to a queued waiter (`Arc`, loom's under `cfg(loopguard_loom)`).
pub(crate) type WaiterRef = Arc<Waiter>;

impl Waiter {
    pub(crate) fn new() -> WaiterRef {
        Arc::new(Waiter {
            state: AtomicU8::new(WAITING),
            waker: Mutex::new(None),
        })
    }

    /// Stores `waker` and returns the state observed afterwards, so a grant that races
    /// the registration is never missed.
    ///
    /// The clone of `waker` (user code) runs before the lock, and a waker it replaces is
    /// dropped after the lock is released, its `Drop` contained: a waker whose `clone`
    /// panics changes nothing, and one whose `Drop` panics or calls back into the gate
    /// neither deadlocks it nor loses the state.
    pub(crate) fn poll_state(&self, waker: &Waker) -> WaitState {
        let current = {
            let slot = lock(&self.waker);
            matches!(slot.as_ref(), Some(w) if w.will_wake(waker))
        };
        if !current {
            let fresh = waker.clone();
            let stale = lock(&self.waker).replace(fresh);
            drop_contained("a Waker", stale);
        }
        self.state()
    }

    pub(crate) fn state(&self) -> WaitState {
        match self.state.load(Ordering::Acquire) {
            GRANTED => WaitState::Granted,
            CLOSED_OUT => WaitState::Closed,
            _ => WaitState::Waiting,
        }
    }

    /// Takes the stored waker out, for the caller to drop outside every lock.
    pub(crate) fn take_waker(&self) -> Option<Waker> {
        lock(&self.waker).take()
    }

    fn set(&self, state: u8) -> Option<Waker> {
        self.state.store(state, Ordering::Release);
        lock(&self.waker).take()
    }
}

/// The outcome of [`Gate::enqueue`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Enqueued {
    /// A slot was free and nobody was waiting: it is ours.
    Acquired,
    /// The waiter is queued.
    Queued,
    /// The gate is closed.
    Closed,
}

#[derive(Debug)]
pub(crate) struct Gate {
    word: AtomicU64,
    capacity: u64,
    queue: Mutex<VecDeque<Arc<Waiter>>>,
}

impl Gate {
    pub(crate) fn new(capacity: usize) -> Gate {
        debug_assert!(capacity > 0 && capacity <= MAX_CAPACITY);
        Gate {
            word: AtomicU64::new(0),
            capacity: capacity as u64,
            queue: Mutex::new(VecDeque::new()),
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity as usize
    }

    pub(crate) fn in_use(&self) -> usize {
        (self.word.load(Ordering::Acquire) & IN_USE_MASK) as usize
    }

    pub(crate) fn waiting(&self) -> usize {
        ((self.word.load(Ordering::Acquire) & WAITING_MASK) >> WAITING_SHIFT) as usize
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.word.load(Ordering::Acquire) & CLOSED != 0
    }

    /// Takes a slot if one is free and nobody waits for it. Lock-free, allocation-free.
    pub(crate) fn try_acquire(&self) -> Result<(), Refused> {
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            if word & CLOSED != 0 {
                return Err(Refused::Closed);
            }
            if word & IN_USE_MASK >= self.capacity || word & WAITING_MASK != 0 {
                return Err(Refused::Saturated);
            }
            match self.word.compare_exchange_weak(
                word,
                word + IN_USE_ONE,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(()),
                Err(actual) => word = actual,
            }
        }
    }

    /// Takes a free slot, or queues `waiter` behind the others.
    pub(crate) fn enqueue(&self, waiter: &Arc<Waiter>) -> Enqueued {
        let mut queue = lock(&self.queue);
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            if word & CLOSED != 0 {
                return Enqueued::Closed;
            }
            let free = word & IN_USE_MASK < self.capacity && word & WAITING_MASK == 0;
            let next = if free {
                word + IN_USE_ONE
            } else {
                word + WAITING_ONE
            };
            match self
                .word
                .compare_exchange_weak(word, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) if free => return Enqueued::Acquired,
                Ok(_) => {
                    queue.push_back(waiter.clone());
                    return Enqueued::Queued;
                }
                Err(actual) => word = actual,
            }
        }
    }

    /// Gives back a slot: to the oldest waiter if there is one, to the pool otherwise.
    /// Returns the number of slots in use afterwards.
    pub(crate) fn release(&self) -> usize {
        let mut word = self.word.load(Ordering::Relaxed);
        while word & WAITING_MASK == 0 {
            debug_assert!(word & IN_USE_MASK > 0, "released a slot nobody held");
            match self.word.compare_exchange_weak(
                word,
                word - IN_USE_ONE,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return ((word - IN_USE_ONE) & IN_USE_MASK) as usize,
                Err(actual) => word = actual,
            }
        }
        let (waker, in_use) = {
            let mut queue = lock(&self.queue);
            match queue.pop_front() {
                Some(waiter) => {
                    let prev = self.word.fetch_sub(WAITING_ONE, Ordering::AcqRel);
                    (waiter.set(GRANTED), (prev & IN_USE_MASK) as usize)
                }
                None => {
                    // The waiter we saw left before we got the lock.
                    let prev = self.word.fetch_sub(IN_USE_ONE, Ordering::AcqRel);
                    (None, ((prev & IN_USE_MASK) - 1) as usize)
                }
            }
        };
        if let Some(waker) = waker {
            wake(waker);
        }
        in_use
    }

    /// Withdraws a waiter that gives up. Returns `true` if it had been granted a slot
    /// meanwhile: the caller then owns that slot and must [`release`](Gate::release) it.
    pub(crate) fn cancel(&self, waiter: &Arc<Waiter>) -> bool {
        let mut queue = lock(&self.queue);
        match waiter.state() {
            WaitState::Granted => true,
            WaitState::Closed => false,
            WaitState::Waiting => {
                if let Some(at) = queue.iter().position(|w| Arc::ptr_eq(w, waiter)) {
                    queue.remove(at);
                    self.word.fetch_sub(WAITING_ONE, Ordering::AcqRel);
                }
                false
            }
        }
    }

    /// Closes the gate: nothing is admitted any more and every queued waiter is told.
    /// Returns whether this call closed it.
    pub(crate) fn close(&self) -> bool {
        let wakers: Vec<Waker> = {
            let mut queue = lock(&self.queue);
            let prev = self.word.fetch_or(CLOSED, Ordering::AcqRel);
            if prev & CLOSED != 0 {
                return false;
            }
            queue
                .drain(..)
                .filter_map(|waiter| {
                    self.word.fetch_sub(WAITING_ONE, Ordering::AcqRel);
                    waiter.set(CLOSED_OUT)
                })
                .collect()
        };
        for waker in wakers {
            wake(waker);
        }
        true
    }
}

#[cfg(all(test, not(loopguard_loom)))]
mod tests {
    use super::*;

    #[test]
    fn try_acquire_respects_capacity_and_waiters() {
        let gate = Gate::new(2);
        assert_eq!(gate.try_acquire(), Ok(()));
        assert_eq!(gate.try_acquire(), Ok(()));
        assert_eq!(gate.try_acquire(), Err(Refused::Saturated));
        let waiter = Waiter::new();
        assert_eq!(gate.enqueue(&waiter), Enqueued::Queued);
        assert_eq!(gate.waiting(), 1);
        // The release goes to the waiter, not to the pool.
        assert_eq!(gate.release(), 2);
        assert_eq!(waiter.state(), WaitState::Granted);
        assert_eq!(gate.try_acquire(), Err(Refused::Saturated));
        assert_eq!(gate.waiting(), 0);
        assert_eq!(gate.release(), 1);
        assert_eq!(gate.release(), 0);
    }

    #[test]
    fn a_free_slot_is_not_taken_past_a_waiter() {
        let gate = Gate::new(1);
        gate.try_acquire().unwrap();
        let first = Waiter::new();
        assert_eq!(gate.enqueue(&first), Enqueued::Queued);
        // While someone waits, even a fresh waiter must queue.
        let second = Waiter::new();
        assert_eq!(gate.enqueue(&second), Enqueued::Queued);
        gate.release();
        assert_eq!(first.state(), WaitState::Granted);
        assert_eq!(second.state(), WaitState::Waiting);
        // The first gives up after its grant: it releases, and the slot moves on.
        assert!(gate.cancel(&first));
        gate.release();
        assert_eq!(second.state(), WaitState::Granted);
        assert_eq!(gate.in_use(), 1);
        gate.release();
        assert_eq!(gate.in_use(), 0);
    }

    #[test]
    fn cancelled_waiter_leaves_no_trace() {
        let gate = Gate::new(1);
        gate.try_acquire().unwrap();
        let waiter = Waiter::new();
        gate.enqueue(&waiter);
        assert!(!gate.cancel(&waiter));
        assert_eq!(gate.waiting(), 0);
        gate.release();
        assert_eq!(gate.in_use(), 0);
        assert_eq!(gate.try_acquire(), Ok(()));
    }

    #[test]
    fn close_fails_waiters_and_refuses_admission() {
        let gate = Gate::new(1);
        gate.try_acquire().unwrap();
        let waiter = Waiter::new();
        gate.enqueue(&waiter);
        assert!(gate.close());
        assert!(!gate.close());
        assert_eq!(waiter.state(), WaitState::Closed);
        assert_eq!(gate.waiting(), 0);
        assert_eq!(gate.try_acquire(), Err(Refused::Closed));
        assert_eq!(gate.enqueue(&Waiter::new()), Enqueued::Closed);
        assert_eq!(gate.release(), 0);
    }
}

/// Exhaustive interleavings of the gate's races, under loom. Run with
/// `RUSTFLAGS="--cfg loopguard_loom" cargo test --lib loom_model --release`.
#[cfg(all(test, loopguard_loom))]
mod loom_model {
    use super::*;
    use loom::sync::atomic::AtomicBool;
    use loom::thread;
    use std::task::Wake;

    /// A waker that remembers it was woken.
    struct Flag(AtomicBool);

    impl Wake for Flag {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    fn flag() -> (std::sync::Arc<Flag>, Waker) {
        let flag = std::sync::Arc::new(Flag(AtomicBool::new(false)));
        (flag.clone(), Waker::from(flag))
    }

    /// A gate of one slot, held.
    fn held() -> Arc<Gate> {
        let gate = Arc::new(Gate::new(1));
        gate.try_acquire().unwrap();
        gate
    }

    /// `release` of `gate` on another thread.
    fn spawn_release(gate: &Arc<Gate>) -> thread::JoinHandle<usize> {
        let gate = gate.clone();
        thread::spawn(move || gate.release())
    }

    /// One slot, held; `release` on another thread.
    fn held_gate() -> (Arc<Gate>, thread::JoinHandle<usize>) {
        let gate = held();
        let releaser = spawn_release(&gate);
        (gate, releaser)
    }

    /// A newcomer tries, then queues, while the holder releases: it ends up with the slot,
    /// at once or by a grant; it is never left queued behind a free slot.
    #[test]
    fn release_races_a_newcomer() {
        loom::model(|| {
            let (gate, releaser) = held_gate();
            let waiter = Waiter::new();
            let acquired = match gate.try_acquire() {
                Ok(()) => true,
                Err(Refused::Saturated) => match gate.enqueue(&waiter) {
                    Enqueued::Acquired => true,
                    Enqueued::Queued => false,
                    Enqueued::Closed => unreachable!("nothing closes"),
                },
                Err(Refused::Closed) => unreachable!("nothing closes"),
            };
            releaser.join().unwrap();
            if !acquired {
                assert_eq!(waiter.state(), WaitState::Granted);
            }
            assert_eq!((gate.in_use(), gate.waiting()), (1, 0));
        });
    }

    /// A queued waiter registers its waker while the slot is released to it: it sees the
    /// grant, or it is woken. No lost wake-up.
    #[test]
    fn grant_races_waker_registration() {
        loom::model(|| {
            let gate = held();
            let waiter = Waiter::new();
            assert_eq!(gate.enqueue(&waiter), Enqueued::Queued);
            let releaser = spawn_release(&gate);
            let (woken, waker) = flag();
            let seen = waiter.poll_state(&waker);
            releaser.join().unwrap();
            assert!(seen == WaitState::Granted || woken.0.load(Ordering::SeqCst));
            assert_eq!(waiter.state(), WaitState::Granted);
            assert_eq!((gate.in_use(), gate.waiting()), (1, 0));
        });
    }

    /// A queued waiter gives up while the slot is released to it: the slot is passed on or
    /// returned, never lost.
    #[test]
    fn release_races_cancel() {
        loom::model(|| {
            let gate = held();
            let waiter = Waiter::new();
            assert_eq!(gate.enqueue(&waiter), Enqueued::Queued);
            let releaser = spawn_release(&gate);
            // A waiter granted the slot meanwhile owns it and gives it back.
            if gate.cancel(&waiter) {
                gate.release();
            }
            releaser.join().unwrap();
            assert_eq!((gate.in_use(), gate.waiting()), (0, 0));
            assert_eq!(gate.try_acquire(), Ok(()));
        });
    }

    /// A slot released while someone waits goes to the waiter, never to a concurrent
    /// `try_acquire`.
    #[test]
    fn try_acquire_never_overtakes_a_waiter() {
        loom::model(|| {
            let gate = held();
            let waiter = Waiter::new();
            assert_eq!(gate.enqueue(&waiter), Enqueued::Queued);
            let releaser = spawn_release(&gate);
            assert_eq!(gate.try_acquire(), Err(Refused::Saturated));
            releaser.join().unwrap();
            assert_eq!(waiter.state(), WaitState::Granted);
            assert_eq!((gate.in_use(), gate.waiting()), (1, 0));
        });
    }

    /// Close, release and a new waiter, all at once: nobody is left waiting, the count of
    /// waiters returns to zero, and a granted waiter holds the only slot.
    #[test]
    fn close_races_release_and_enqueue() {
        loom::model(|| {
            let (gate, releaser) = held_gate();
            let closer = {
                let gate = gate.clone();
                thread::spawn(move || gate.close())
            };
            let waiter = Waiter::new();
            let queued = gate.enqueue(&waiter);
            releaser.join().unwrap();
            assert!(closer.join().unwrap());
            assert_eq!(gate.waiting(), 0);
            match (queued, waiter.state()) {
                (Enqueued::Queued, WaitState::Granted) | (Enqueued::Acquired, _) => {
                    assert_eq!(gate.in_use(), 1)
                }
                (Enqueued::Queued, WaitState::Closed) | (Enqueued::Closed, _) => {
                    assert_eq!(gate.in_use(), 0)
                }
                (Enqueued::Queued, WaitState::Waiting) => panic!("left waiting after close"),
            }
        });
    }

    // Review additions: the waiter's side as `Run` drives it (`SlotWait`), against grant
    // and close at once.

    use crate::pool::wait::{Ended, SlotWait, Started};

    /// A queued `SlotWait` polls (registering its waker) while the slot is released to it
    /// and the gate closes: it sees its end or is woken, and whatever it ends with, the
    /// slot it may hold is given back exactly once, as `Run` does (`Granted` -> the job
    /// runs and releases; `ClosedHolding` -> released at once; `Closed` -> nothing).
    #[test]
    fn slot_wait_poll_races_grant_and_close() {
        loom::model(|| {
            let (gate, releaser) = held_gate();
            let mut wait = SlotWait::new();
            let queued = wait.start(&gate);
            let closer = {
                let gate = gate.clone();
                thread::spawn(move || gate.close())
            };
            let (woken, waker) = flag();
            let polled = match queued {
                Started::Queued => Some(wait.poll(&gate, &waker)),
                _ => None,
            };
            releaser.join().unwrap();
            assert!(closer.join().unwrap());
            let ended = match (queued, polled) {
                (Started::Acquired, _) => Some(Ended::Granted),
                (Started::Closed, _) => None,
                (Started::Queued, Some(std::task::Poll::Ready(ended))) => Some(ended),
                (Started::Queued, _) => {
                    // Pending: it must have been woken, and a second look ends the wait.
                    assert!(
                        woken.0.load(Ordering::SeqCst),
                        "a queued waiter was not woken"
                    );
                    match wait.poll(&gate, &waker) {
                        std::task::Poll::Ready(ended) => Some(ended),
                        std::task::Poll::Pending => panic!("still waiting after close"),
                    }
                }
            };
            if matches!(ended, Some(Ended::Granted | Ended::ClosedHolding)) {
                gate.release();
            }
            assert_eq!((gate.in_use(), gate.waiting()), (0, 0));
        });
    }

    /// A queued `SlotWait` gives up (`cancel`, as `Run`'s drop or expiry does) while the
    /// slot is released to it and the gate closes: the slot is given back exactly once and
    /// nothing stays queued.
    #[test]
    fn slot_wait_cancel_races_grant_and_close() {
        loom::model(|| {
            let (gate, releaser) = held_gate();
            let mut wait = SlotWait::new();
            let queued = wait.start(&gate);
            let closer = {
                let gate = gate.clone();
                thread::spawn(move || gate.close())
            };
            let holds = match queued {
                Started::Acquired => true,
                Started::Closed => false,
                Started::Queued => wait.cancel(&gate),
            };
            if holds {
                gate.release();
            }
            releaser.join().unwrap();
            assert!(closer.join().unwrap());
            assert_eq!((gate.in_use(), gate.waiting()), (0, 0));
        });
    }

    /// Two queued waiters, the first gives up while the slot is released: the grant goes
    /// to the second (FIFO with withdrawal), never to nobody.
    #[test]
    fn cancel_of_the_first_waiter_passes_the_grant_on() {
        loom::model(|| {
            let gate = held();
            let mut first = SlotWait::new();
            let mut second = SlotWait::new();
            assert_eq!(first.start(&gate), Started::Queued);
            assert_eq!(second.start(&gate), Started::Queued);
            let releaser = spawn_release(&gate);
            if first.cancel(&gate) {
                gate.release();
            }
            releaser.join().unwrap();
            let (_woken, waker) = flag();
            assert_eq!(
                second.poll(&gate, &waker),
                std::task::Poll::Ready(Ended::Granted)
            );
            assert_eq!((gate.in_use(), gate.waiting()), (1, 0));
        });
    }
}
