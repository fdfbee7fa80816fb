use super::*;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::task::Wake;

/// A waker that counts its wakes; its clones are counted by the `Arc`.
struct Plain(AtomicUsize);

impl Wake for Plain {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn plain() -> (Arc<Plain>, Waker) {
    let plain = Arc::new(Plain(AtomicUsize::new(0)));
    (plain.clone(), Waker::from(plain))
}

/// A waker whose last `Drop` looks whether the slot's mutex is free, then panics; its
/// `wake` panics too (and then its `Drop` only looks).
struct Hostile {
    mutex: Weak<Mutex<WakerSlot>>,
    dropped_with_lock_free: Arc<AtomicBool>,
    dropped: Arc<AtomicBool>,
}

impl Wake for Hostile {
    fn wake(self: Arc<Self>) {
        panic!("expected hostile wake");
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        let free = self.mutex.upgrade().is_some_and(|m| m.try_lock().is_ok());
        self.dropped_with_lock_free.store(free, Ordering::SeqCst);
        self.dropped.store(true, Ordering::SeqCst);
        // Not while its own `wake`'s panic unwinds (that would abort).
        if !std::thread::panicking() {
            panic!("expected hostile waker drop");
        }
    }
}

/// A [`Hostile`] waker of `mutex`, stored in it (the caller's handle dropped), and its two
/// flags: dropped with the lock free, dropped.
fn stored_hostile(mutex: &Arc<Mutex<WakerSlot>>) -> (Arc<AtomicBool>, Arc<AtomicBool>) {
    let free = Arc::new(AtomicBool::new(false));
    let dropped = Arc::new(AtomicBool::new(false));
    let hostile = Waker::from(Arc::new(Hostile {
        mutex: Arc::downgrade(mutex),
        dropped_with_lock_free: free.clone(),
        dropped: dropped.clone(),
    }));
    store(mutex, &hostile);
    drop(hostile);
    (free, dropped)
}

fn store(mutex: &Mutex<WakerSlot>, waker: &Waker) {
    register(mutex, waker, |slot| Visit::Store(slot, ()));
}

#[test]
fn the_same_task_is_stored_once() {
    let mutex = Mutex::new(WakerSlot::new());
    let (counted, waker) = plain();
    store(&mutex, &waker);
    assert!(lock(&mutex).is_set());
    assert_eq!(
        Arc::strong_count(&counted),
        3,
        "ours, the waker and the stored clone"
    );
    store(&mutex, &waker);
    assert_eq!(
        Arc::strong_count(&counted),
        3,
        "a clone of the same task was kept"
    );
    let (_, other) = plain();
    store(&mutex, &other);
    assert_eq!(
        Arc::strong_count(&counted),
        2,
        "the replaced waker was not let go"
    );
    lock(&mutex).take().wake();
    assert!(!lock(&mutex).is_set());
}

#[test]
fn a_replaced_waker_is_dropped_after_the_lock_contained() {
    let mutex = Arc::new(Mutex::new(WakerSlot::new()));
    let (free, dropped) = stored_hostile(&mutex);
    assert!(!dropped.load(Ordering::SeqCst));
    let (_, other) = plain();
    // Replacing it drops the hostile waker: after the lock, and its panic is contained.
    store(&mutex, &other);
    assert!(
        dropped.load(Ordering::SeqCst),
        "the replaced waker was kept"
    );
    assert!(
        free.load(Ordering::SeqCst),
        "the replaced waker was dropped under the lock"
    );
}

#[test]
fn a_registration_that_finds_the_wait_over_stores_nothing() {
    let mutex = Mutex::new((true, WakerSlot::new()));
    let (counted, waker) = plain();
    let over = register(&mutex, &waker, |(over, slot)| {
        if *over {
            Visit::Done(true)
        } else {
            Visit::Store(slot, false)
        }
    });
    assert!(over);
    assert!(!lock(&mutex).1.is_set());
    assert_eq!(Arc::strong_count(&counted), 2, "a clone was kept");
}

#[test]
fn a_taken_waker_is_woken_and_dropped_contained() {
    let mutex = Arc::new(Mutex::new(WakerSlot::new()));
    let (free, dropped) = stored_hostile(&mutex);
    let taken = lock(&*mutex).take();
    // Both its `wake` and its `Drop` panic: neither unwinds out of here.
    taken.wake();
    assert!(dropped.load(Ordering::SeqCst));
    assert!(free.load(Ordering::SeqCst));
    // An empty slot hands out nothing to wake.
    Taken::default().wake();
    let (counted, waker) = plain();
    store(&mutex, &waker);
    drop(waker);
    drop(mutex);
    assert_eq!(
        Arc::strong_count(&counted),
        1,
        "a dropped slot kept its waker"
    );
    assert_eq!(counted.0.load(Ordering::SeqCst), 0);
}
