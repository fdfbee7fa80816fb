//! `KeyedGate` async behaviour, each test run on five executors.

#[macro_use]
mod common;

use std::panic::AssertUnwindSafe;
use std::sync::mpsc;
use std::thread;

use futures_lite::{FutureExt, future};
use loopguard::keyed::KeyedGate;

fn gate() -> KeyedGate<&'static str> {
    KeyedGate::new("async").unwrap()
}

on_every_executor!(waiters_proceed_in_fifo_order, async {
    let gate = gate();
    let holder = gate.acquire("k").await;
    let (mut a, mut b, mut c) = (gate.acquire("k"), gate.acquire("k"), gate.acquire("k"));
    assert!(future::poll_once(&mut a).await.is_none());
    assert!(future::poll_once(&mut b).await.is_none());
    assert!(future::poll_once(&mut c).await.is_none());
    assert_eq!(gate.waiting(&"k"), 3);
    drop(holder);
    // The slot went to `a`: the others keep waiting even when polled first.
    assert!(future::poll_once(&mut c).await.is_none());
    assert!(future::poll_once(&mut b).await.is_none());
    drop(a.await);
    assert!(future::poll_once(&mut c).await.is_none());
    drop(b.await);
    let last = c.await;
    assert_eq!((gate.in_use(&"k"), gate.waiting(&"k")), (1, 0));
    drop(last);
    assert_eq!(gate.in_use(&"k"), 0);
});

on_every_executor!(busy_key_rejects_while_other_key_admits, async {
    let gate = gate();
    let backend = gate.acquire("backend").await;
    assert!(gate.try_acquire("backend").is_err());
    let frontend = future::poll_once(gate.acquire("frontend")).await;
    assert!(frontend.is_some(), "another key is admitted at once");
    assert_eq!(gate.rejected(), 1);
    drop(backend);
});

on_every_executor!(queued_waiters_make_the_key_busy, async {
    let gate = gate();
    let holder = gate.try_acquire("k").unwrap();
    let mut waiter = gate.acquire("k");
    assert!(future::poll_once(&mut waiter).await.is_none());
    drop(holder);
    // The freed slot belongs to the waiter, not to the next try_acquire.
    assert!(gate.try_acquire("k").is_err());
    drop(waiter.await);
    assert!(gate.try_acquire("k").is_ok());
});

async fn admitted_work(gate: &KeyedGate<&'static str>, fail: bool) -> Result<(), &'static str> {
    let _permit = gate.acquire("k").await;
    if fail {
        return Err("collector failed");
    }
    Ok(())
}

on_every_executor!(every_way_an_admitted_caller_ends_frees_the_key, async {
    let gate = gate();
    // Success.
    admitted_work(&gate, false).await.unwrap();
    assert_eq!(gate.in_use(&"k"), 0);
    // Error.
    assert!(admitted_work(&gate, true).await.is_err());
    assert_eq!(gate.in_use(&"k"), 0);
    // Panic, caught while unwinding.
    let caught = AssertUnwindSafe(async {
        let _permit = gate.acquire("k").await;
        panic!("collector panicked");
    })
    .catch_unwind()
    .await;
    assert!(caught.is_err());
    assert_eq!(gate.in_use(&"k"), 0);
    // Future dropped while holding the key.
    let mut holding = Box::pin(async {
        let _permit = gate.acquire("k").await;
        future::pending::<()>().await;
    });
    assert!(future::poll_once(&mut holding).await.is_none());
    assert_eq!(gate.in_use(&"k"), 1);
    drop(holding);
    assert_eq!(gate.in_use(&"k"), 0);
    assert!(gate.try_acquire("k").is_ok());
});

on_every_executor!(dropped_waiter_frees_nothing_and_takes_nothing, async {
    let gate = gate();
    let holder = gate.try_acquire("k").unwrap();
    let mut waiter = gate.acquire("k");
    assert!(future::poll_once(&mut waiter).await.is_none());
    assert_eq!((gate.in_use(&"k"), gate.waiting(&"k")), (1, 1));
    drop(waiter);
    assert_eq!((gate.in_use(&"k"), gate.waiting(&"k")), (1, 0));
    assert!(gate.try_acquire("k").is_err(), "the holder still holds");
    drop(holder);
    assert_eq!(gate.in_use(&"k"), 0);
    assert!(gate.try_acquire("k").is_ok(), "nothing was left reserved");
});

on_every_executor!(slot_handed_to_a_dropped_waiter_passes_on, async {
    let gate = gate();
    let holder = gate.try_acquire("k").unwrap();
    let (mut first, mut second) = (gate.acquire("k"), gate.acquire("k"));
    assert!(future::poll_once(&mut first).await.is_none());
    assert!(future::poll_once(&mut second).await.is_none());
    drop(holder); // handed to `first`...
    drop(first); // ...which leaves before resuming: `second` gets it
    assert_eq!((gate.in_use(&"k"), gate.waiting(&"k")), (1, 0));
    drop(second.await);
    // With no one left to pass it to, the slot returns to the key.
    let holder = gate.try_acquire("k").unwrap();
    let mut only = gate.acquire("k");
    assert!(future::poll_once(&mut only).await.is_none());
    drop(holder);
    drop(only);
    assert_eq!(gate.in_use(&"k"), 0);
});

on_every_executor!(release_on_another_thread_wakes_the_waiter, async {
    let gate = gate();
    let holder = gate.try_acquire("k").unwrap();
    let mut waiter = gate.acquire("k");
    assert!(future::poll_once(&mut waiter).await.is_none());
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let worker = thread::spawn(move || {
        go_rx.recv().unwrap();
        drop(holder);
    });
    go_tx.send(()).unwrap();
    let permit = waiter.await; // completes only if the release wakes us
    worker.join().unwrap();
    assert_eq!(*permit.key(), "k");
});
