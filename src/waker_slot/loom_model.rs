//! Exhaustive interleavings of the waker slot, under loom: a task registers (its first
//! poll, or a second one with a new waker) while another thread changes the state and takes
//! the waker out to wake it, and a waker whose `Drop` re-enters the lock is replaced.
//!
//! What every model checks: a registration that returned "pending" is woken by a take that
//! follows the change it looked at (no lost wake-up), through the waker stored last; a
//! replaced waker is dropped with the lock released.
//!
//! Seeded bugs this catches (checked by hand, then restored):
//! - `register` treating any stored waker as the task's own (`Some(_)` for
//!   `Some(stored) if stored.will_wake(waker)`): `a_new_waker_racing_a_take_is_the_one_woken`
//!   fails with "the new waker was not woken";
//! - `register` dropping the replaced waker before the lock (`drop(stale)` before
//!   `drop(guard)`): `a_replaced_waker_that_re_enters_is_dropped_after_the_lock` fails, loom
//!   reporting a deadlock.
//!
//! A clone made under the lock cannot be seen here (a safe waker's `clone` is an `Arc`'s,
//! which runs no code of ours): `tests/contain_waker_clone.rs` catches that one, with a
//! waker whose `clone` locks the orphan channel's queue.

use super::*;
use crate::loom_util::flag;
use loom::thread;
use std::sync::{Arc, Weak};
use std::task::{Wake, Waker};

/// The state a primitive guards: whether the wait is over, and the waiting task's waker.
#[derive(Default)]
struct State {
    over: bool,
    slot: WakerSlot,
}

/// One poll: `true` if the wait is over, `false` if the waker is stored.
fn poll(state: &Mutex<State>, waker: &Waker) -> bool {
    register(state, waker, |state| {
        if state.over {
            Visit::Done(true)
        } else {
            Visit::Store(&mut state.slot, false)
        }
    })
}

/// The other side: ends the wait, takes the waker out under the lock, wakes it after.
fn finish(state: &Mutex<State>) {
    let waker = {
        let mut state = lock(state);
        state.over = true;
        state.slot.take()
    };
    waker.wake();
}

/// [`finish`] on another thread.
fn spawn_finish(state: &Arc<Mutex<State>>) -> thread::JoinHandle<()> {
    let state = state.clone();
    thread::spawn(move || finish(&state))
}

#[test]
fn a_take_racing_a_registration_is_never_lost() {
    loom::model(|| {
        let state = Arc::new(Mutex::new(State::default()));
        let finisher = spawn_finish(&state);
        let (woken, waker) = flag();
        let over = poll(&state, &waker);
        finisher.join().unwrap();
        if !over {
            assert!(woken.woken(), "a pending registration was not woken");
        }
        assert!(!lock(&*state).slot.is_set());
    });
}

#[test]
fn a_new_waker_racing_a_take_is_the_one_woken() {
    loom::model(|| {
        let state = Arc::new(Mutex::new(State::default()));
        let (_, old) = flag();
        assert!(!poll(&state, &old));
        let finisher = spawn_finish(&state);
        let (woken, new) = flag();
        let over = poll(&state, &new);
        finisher.join().unwrap();
        if !over {
            assert!(woken.woken(), "the new waker was not woken");
        }
    });
}

/// A waker whose last `Drop` locks the mutex of the slot it was stored in.
struct ReEnters(Weak<Mutex<State>>);

impl Wake for ReEnters {
    fn wake(self: Arc<Self>) {}
}

impl Drop for ReEnters {
    fn drop(&mut self) {
        if let Some(state) = self.0.upgrade() {
            drop(lock(&*state));
        }
    }
}

#[test]
fn a_replaced_waker_that_re_enters_is_dropped_after_the_lock() {
    loom::model(|| {
        let state = Arc::new(Mutex::new(State::default()));
        let old = Waker::from(Arc::new(ReEnters(Arc::downgrade(&state))));
        assert!(!poll(&state, &old));
        drop(old);
        let finisher = spawn_finish(&state);
        let (woken, new) = flag();
        let over = poll(&state, &new);
        finisher.join().unwrap();
        if !over {
            assert!(woken.woken(), "the new waker was not woken");
        }
    });
}
