//! The admission gate: slots, FIFO waiters, hand-off and close. The one admission
//! primitive under the pool and the tower layer ([`wait`] is a caller's place in its line,
//! [`limit`] the gate with its accounting, [`permit`] the owned permit every holder holds
//! and the one future every waiter polls; a permit's `Drop` is the only release; [`tally`]
//! the refusals and `Retry-After` basis every admission object keeps the same way). A
//! keyed gate gives each key a [`Gate`] of its own, with one tally for all its keys.
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

pub(crate) mod limit;
pub(crate) mod permit;
pub(crate) mod tally;
pub(crate) mod wait;

use crate::waker_slot::{Taken, Visit, WakerSlot, register};

// std's, or loom's under the crate's loom cfg (see `crate::sync`).
use crate::sync::{
    Arc, Mutex,
    atomic::{AtomicU8, AtomicU64, Ordering},
    lock,
};

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
/// Handed a slot, not yet seen by its owner: `close` may still take the slot back.
const GRANTED: u8 = 1;
const CLOSED_OUT: u8 = 2;
/// Handed a slot, and its owner took it ([`Gate::claim`]): the owner releases it.
const CLAIMED: u8 = 3;

/// A queued waiter. The state only changes under the gate's queue lock.
#[derive(Debug)]
pub(crate) struct Waiter {
    state: AtomicU8,
    waker: Mutex<WakerSlot>,
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
            waker: Mutex::new(WakerSlot::new()),
        })
    }

    /// Stores `waker` and returns the state observed afterwards, so a grant that races
    /// the registration is never missed.
    ///
    /// Through [`register`]: the clone of `waker` (user code) runs outside the lock, and a
    /// waker it replaces is dropped after the lock is released, its `Drop` contained: a
    /// waker whose `clone` panics changes nothing, and one whose `Drop` panics or calls back
    /// into the gate neither deadlocks it nor loses the state.
    pub(crate) fn poll_state(&self, waker: &Waker) -> WaitState {
        register(&self.waker, waker, |slot| Visit::Store(slot, ()));
        self.state()
    }

    pub(crate) fn state(&self) -> WaitState {
        match self.state.load(Ordering::Acquire) {
            GRANTED | CLAIMED => WaitState::Granted,
            CLOSED_OUT => WaitState::Closed,
            _ => WaitState::Waiting,
        }
    }

    /// Takes the stored waker out, for the caller to drop outside every lock.
    pub(crate) fn take_waker(&self) -> Taken {
        lock(&self.waker).take()
    }

    /// Sets the state, then takes the waker out (the caller wakes it after every lock).
    fn set(&self, state: u8) -> Taken {
        self.state.store(state, Ordering::Release);
        lock(&self.waker).take()
    }
}

/// The waiters, under the gate's one lock.
#[derive(Debug, Default)]
struct Queue {
    /// In line, oldest first.
    waiting: VecDeque<Arc<Waiter>>,
    /// Handed a slot that their owner has not claimed yet: a closing gate takes those slots
    /// back, so a waiter that is never polled again cannot hold one for ever.
    granted: Vec<Arc<Waiter>>,
}

impl Queue {
    /// A granted waiter's owner takes its slot (under the gate's lock): from now on the
    /// owner releases it, and `close` leaves it alone. Returns `true`.
    fn claim(&mut self, waiter: &Arc<Waiter>) -> bool {
        waiter.state.store(CLAIMED, Ordering::Release);
        if let Some(at) = self.granted.iter().position(|w| Arc::ptr_eq(w, waiter)) {
            self.granted.swap_remove(at);
        }
        true
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
    queue: Mutex<Queue>,
}

impl Gate {
    pub(crate) fn new(capacity: usize) -> Gate {
        debug_assert!(capacity > 0 && capacity <= MAX_CAPACITY);
        Gate {
            word: AtomicU64::new(0),
            capacity: capacity as u64,
            queue: Mutex::new(Queue::default()),
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
                    queue.waiting.push_back(waiter.clone());
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
            match queue.waiting.pop_front() {
                Some(waiter) => {
                    let prev = self.word.fetch_sub(WAITING_ONE, Ordering::AcqRel);
                    let waker = waiter.set(GRANTED);
                    queue.granted.push(waiter);
                    (waker, (prev & IN_USE_MASK) as usize)
                }
                None => {
                    // The waiter we saw left before we got the lock.
                    let prev = self.word.fetch_sub(IN_USE_ONE, Ordering::AcqRel);
                    (Taken::default(), ((prev & IN_USE_MASK) - 1) as usize)
                }
            }
        };
        waker.wake();
        in_use
    }

    /// The owner of a waiter that saw [`WaitState::Granted`] takes its slot. Returns
    /// `false` if the gate closed first and took the slot back (the owner holds nothing).
    pub(crate) fn claim(&self, waiter: &Arc<Waiter>) -> bool {
        let mut queue = lock(&self.queue);
        match waiter.state.load(Ordering::Acquire) {
            GRANTED => queue.claim(waiter),
            CLAIMED => true,
            _ => false,
        }
    }

    /// Withdraws a waiter that gives up. Returns `true` if it had been granted a slot
    /// meanwhile: the caller then owns that slot and must [`release`](Gate::release) it.
    pub(crate) fn cancel(&self, waiter: &Arc<Waiter>) -> bool {
        let mut queue = lock(&self.queue);
        match waiter.state.load(Ordering::Acquire) {
            GRANTED => queue.claim(waiter),
            WAITING => {
                if let Some(at) = queue.waiting.iter().position(|w| Arc::ptr_eq(w, waiter)) {
                    queue.waiting.remove(at);
                    self.word.fetch_sub(WAITING_ONE, Ordering::AcqRel);
                }
                false
            }
            // Closed out: nothing held. Claimed: its owner releases it (never cancelled).
            _ => false,
        }
    }

    /// Closes the gate: nothing is admitted any more, every queued waiter is told, and a
    /// slot granted to a waiter that has not claimed it yet is taken back (that waiter is
    /// told the gate closed). Returns whether this call closed it.
    pub(crate) fn close(&self) -> bool {
        let wakers: Vec<Taken> = {
            let mut queue = lock(&self.queue);
            let prev = self.word.fetch_or(CLOSED, Ordering::AcqRel);
            if prev & CLOSED != 0 {
                return false;
            }
            let queue = &mut *queue;
            let mut wakers = Vec::with_capacity(queue.waiting.len() + queue.granted.len());
            for waiter in queue.waiting.drain(..) {
                self.word.fetch_sub(WAITING_ONE, Ordering::AcqRel);
                wakers.push(waiter.set(CLOSED_OUT));
            }
            for waiter in queue.granted.drain(..) {
                self.word.fetch_sub(IN_USE_ONE, Ordering::AcqRel);
                wakers.push(waiter.set(CLOSED_OUT));
            }
            wakers
        };
        for waker in wakers {
            waker.wake();
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
    fn enqueue_takes_a_free_slot_only_when_nobody_waits() {
        // Reached by the pool only when a slot frees between `try_acquire` and `enqueue`.
        let gate = Gate::new(2);
        let first = Waiter::new();
        assert_eq!(gate.enqueue(&first), Enqueued::Acquired);
        assert_eq!((gate.in_use(), gate.waiting()), (1, 0));
        assert_eq!(gate.try_acquire(), Ok(()));
        let second = Waiter::new();
        assert_eq!(gate.enqueue(&second), Enqueued::Queued);
        assert_eq!((gate.in_use(), gate.waiting()), (2, 1));
        // The slot released goes to the oldest waiter; a newcomer queues behind.
        let third = Waiter::new();
        assert_eq!(gate.release(), 2);
        assert_eq!(second.state(), WaitState::Granted);
        assert_eq!(gate.enqueue(&third), Enqueued::Queued);
        assert!(gate.cancel(&second));
        assert!(!gate.cancel(&third));
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
mod loom_model;
