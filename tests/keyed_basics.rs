//! `KeyedGate` with real threads, explicit synchronization and explicit instants.

mod common;

use std::sync::{Barrier, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use common::{MapRecorder, assert_close};
use futures_lite::future;
use loopguard::keyed::{Acquire, Busy, KeyPermit, KeyedGate};

// The series names, as a dashboard or alert spells them.
const KEYED_DEMAND_AVG: &str = "loopguard_keyed_demand_avg";
const KEYED_REJECTED_TOTAL: &str = "loopguard_keyed_rejected_total";

#[test]
fn simultaneous_rejecting_callers_admit_exactly_one() {
    const THREADS: usize = 64;
    let gate: KeyedGate<&'static str> = KeyedGate::new("race").unwrap();
    for round in 0..100 {
        let start = Barrier::new(THREADS);
        let decided = Barrier::new(THREADS);
        let admitted: usize = thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|_| {
                    s.spawn(|| {
                        start.wait();
                        let result = gate.try_acquire("repo");
                        decided.wait(); // hold any permit until everyone has tried
                        result.is_ok()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| usize::from(h.join().unwrap()))
                .sum()
        });
        assert_eq!(admitted, 1, "round {round}");
        assert_eq!(gate.in_use(&"repo"), 0);
        assert_eq!(gate.waiting(&"repo"), 0);
    }
    assert_eq!(gate.rejected(), 100 * (THREADS as u64 - 1));
}

#[test]
fn busy_key_rejects_at_once_while_other_keys_admit() {
    let gate = KeyedGate::new("repos").unwrap();
    let backend = gate.try_acquire("backend").unwrap();
    let busy: Busy<&str> = gate.try_acquire("backend").unwrap_err();
    assert_eq!(*busy.key(), "backend");
    assert_eq!(busy.to_string(), "key is busy");
    let frontend = gate.try_acquire("frontend").unwrap();
    assert_eq!((gate.in_use(&"backend"), gate.in_use(&"frontend")), (1, 1));
    assert_eq!(gate.rejected(), 1);
    drop((backend, frontend));
    assert!(gate.try_acquire("backend").is_ok());
}

#[test]
fn threads_waiting_on_a_busy_key_proceed_in_order() {
    const WAITERS: usize = 8;
    let gate = KeyedGate::new("fifo").unwrap();
    let holder = gate.try_acquire(1u32).unwrap();
    let (order_tx, order_rx) = mpsc::channel();
    thread::scope(|s| {
        for i in 0..WAITERS {
            let (waiter_gate, order_tx) = (gate.clone(), order_tx.clone());
            s.spawn(move || {
                let permit = future::block_on(waiter_gate.acquire(1));
                order_tx.send(i).unwrap(); // sent while still holding the key
                drop(permit);
            });
            // Enqueue in a known order: wait until waiter i is queued.
            while gate.waiting(&1) != i + 1 {
                thread::yield_now();
            }
        }
        drop(holder);
    });
    let order: Vec<usize> = order_rx.try_iter().collect();
    assert_eq!(order, (0..WAITERS).collect::<Vec<_>>());
    assert_eq!(gate.in_use(&1), 0);
}

#[test]
fn demand_counts_holders_and_waiters_but_not_rejections() {
    let gate = KeyedGate::new("demand").unwrap();
    let holder = gate.try_acquire("k").unwrap();
    for _ in 0..10 {
        assert!(gate.try_acquire("k").is_err());
    }
    let later = Instant::now() + Duration::from_secs(10);
    assert_close(gate.demand_at(&"k", later), 1.0);

    let mut waiter_a = gate.acquire("k");
    let mut waiter_b = gate.acquire("k");
    assert!(future::block_on(future::poll_once(&mut waiter_a)).is_none());
    assert!(future::block_on(future::poll_once(&mut waiter_b)).is_none());
    assert_close(gate.demand_at(&"k", later + Duration::from_secs(10)), 3.0);
    assert_eq!(gate.demand(&"other"), 0.0);
    assert_eq!(gate.demands().len(), 1);
    drop((holder, waiter_a, waiter_b));
}

#[test]
fn idle_keys_are_pruned_after_the_window() {
    let gate = KeyedGate::new("prune").unwrap();
    for key in 0..100u32 {
        drop(gate.try_acquire(key).unwrap());
    }
    let held = gate.try_acquire(1000).unwrap();
    assert_eq!(gate.tracked_keys(), 101);
    let after_window = Instant::now() + Duration::from_secs(5);
    gate.prune_at(after_window);
    assert_eq!(gate.tracked_keys(), 1, "held keys stay");
    drop(held);
    gate.prune_at(after_window + Duration::from_secs(5));
    assert_eq!(gate.tracked_keys(), 0);
}

#[test]
fn one_off_keys_are_swept_lazily() {
    let window = Duration::from_millis(1);
    let gate = KeyedGate::builder("lazy").window(window).build().unwrap();
    for key in 0..50u32 {
        drop(gate.try_acquire(key).unwrap());
    }
    let quiet_from = Instant::now();
    // Wait on the clock (not to order events): let the window pass.
    while quiet_from.elapsed() <= 2 * window {
        std::hint::spin_loop();
    }
    drop(gate.try_acquire(999).unwrap()); // a new key triggers the sweep
    assert_eq!(gate.tracked_keys(), 1);
}

#[test]
fn capacity_overrides_and_hand_off_with_several_slots() {
    let gate = KeyedGate::builder("cap")
        .capacity(2)
        .capacity_for("solo", 1)
        .build()
        .unwrap();
    let solo = gate.try_acquire("solo").unwrap();
    assert!(gate.try_acquire("solo").is_err());
    drop(solo);

    let a = gate.try_acquire("pair").unwrap();
    let b = gate.try_acquire("pair").unwrap();
    let mut c = gate.acquire("pair");
    assert!(future::block_on(future::poll_once(&mut c)).is_none());
    drop(a); // handed to c, which has not resumed yet
    assert_eq!((gate.in_use(&"pair"), gate.waiting(&"pair")), (2, 0));
    drop(b); // nobody is waiting: the slot returns to the key
    let d = gate.try_acquire("pair").expect("a slot is free");
    let c = future::block_on(c);
    assert_eq!(gate.in_use(&"pair"), 2);
    drop((c, d));
    assert_eq!(gate.in_use(&"pair"), 0);
}

#[test]
fn bad_configuration_is_an_error() {
    let zero = KeyedGate::<u8>::builder("x")
        .capacity(0)
        .build()
        .unwrap_err();
    assert_eq!(zero.kind(), std::io::ErrorKind::InvalidInput);
    assert_eq!(zero.to_string(), "key capacity must be at least one");
    let zero_override = KeyedGate::builder("x")
        .capacity_for(1u8, 0)
        .build()
        .unwrap_err();
    assert_eq!(zero_override.kind(), std::io::ErrorKind::InvalidInput);
    let window = KeyedGate::<u8>::builder("x")
        .window(Duration::ZERO)
        .build()
        .unwrap_err();
    assert_eq!(
        window.to_string(),
        "demand window must be greater than zero"
    );
}

#[test]
fn auto_traits_and_debug() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<KeyedGate<String>>();
    send_sync::<KeyPermit<String>>();
    send_sync::<Acquire<String>>();
    send_sync::<Busy<String>>();
    let gate = KeyedGate::new("dbg").unwrap();
    let permit = gate.try_acquire(1u8).unwrap();
    let acquire = gate.acquire(1);
    for text in [
        format!("{gate:?}"),
        format!("{permit:?}"),
        format!("{acquire:?}"),
        format!("{:?}", gate.try_acquire(1).unwrap_err()),
        format!("{:?}", KeyedGate::<u8>::builder("b")),
    ] {
        assert!(!text.is_empty());
    }
}

#[test]
fn metrics_are_emitted_through_the_facade() {
    let recorder = MapRecorder::default();
    metrics::with_local_recorder(&recorder, || {
        let gate = KeyedGate::new("repos").unwrap();
        let permit = gate.try_acquire("backend").unwrap();
        assert!(gate.try_acquire("backend").is_err());
        assert!(gate.try_acquire("backend").is_err());
        gate.publish_metrics();
        let gauge = format!("{KEYED_DEMAND_AVG}{{gate=repos,key=backend}}");
        let value = f64::from_bits(recorder.get(&gauge).expect("gauge published"));
        assert!(value > 0.0 && value <= 1.0, "{value}");
        // Once the key is pruned, the next publication resets its gauge.
        drop(permit);
        gate.prune_at(Instant::now() + Duration::from_secs(10));
        assert_eq!(gate.tracked_keys(), 0);
        gate.publish_metrics();
        assert_eq!(recorder.get(&gauge), Some(0.0f64.to_bits()));
    });
    let rejected = format!("{KEYED_REJECTED_TOTAL}{{gate=repos}}");
    assert_eq!(recorder.get(&rejected), Some(2));
}

#[test]
fn a_key_swept_and_back_before_the_next_publication_keeps_its_value() {
    let recorder = MapRecorder::default();
    metrics::with_local_recorder(&recorder, || {
        let gate = KeyedGate::new("repos").unwrap();
        drop(gate.try_acquire("backend").unwrap());
        gate.publish_metrics(); // a non-zero value is published for the key
        let gauge = format!("{KEYED_DEMAND_AVG}{{gate=repos,key=backend}}");
        assert!(f64::from_bits(recorder.get(&gauge).unwrap()) > 0.0);
        // The key goes idle and is swept...
        gate.prune_at(Instant::now() + Duration::from_secs(10));
        assert_eq!(gate.tracked_keys(), 0);
        // ...and is busy again before anyone publishes.
        let permit = gate.try_acquire("backend").unwrap();
        std::thread::sleep(Duration::from_millis(2)); // let some demand accumulate
        gate.publish_metrics();
        let value = f64::from_bits(recorder.get(&gauge).unwrap());
        assert!(value > 0.0, "a busy key published {value}");
        drop(permit);
    });
}

#[test]
fn refusals_are_counted_at_once_and_emitted_in_batches() {
    let recorder = MapRecorder::default();
    let gate = metrics::with_local_recorder(&recorder, || KeyedGate::new("batch").unwrap());
    let series = format!("{KEYED_REJECTED_TOTAL}{{gate=batch}}");
    let held = gate.try_acquire("k").unwrap();
    for _ in 0..3 {
        assert!(gate.try_acquire("k").is_err());
    }
    // Exact at once; the recorder has not been told of each one.
    assert_eq!(gate.rejected(), 3);
    assert_eq!(recorder.get(&series), Some(0), "emitted one by one");
    // A permit's drop tells it, in one update.
    drop(held);
    assert_eq!(recorder.get(&series), Some(3));
    let held = gate.try_acquire("k").unwrap();
    assert!(gate.try_acquire("k").is_err());
    // So does a publish, and twice tells nothing twice.
    gate.publish_metrics();
    gate.publish_metrics();
    assert_eq!(recorder.get(&series), Some(4));
    drop(held);
    assert_eq!(recorder.get(&series), Some(4));
}

#[test]
fn a_capacity_the_gate_cannot_hold_is_refused() {
    let err = KeyedGate::<u8>::builder("big")
        .capacity(65_537)
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert_eq!(
        err.to_string(),
        "key capacity must be at most 65536, not 65537"
    );
    let err = KeyedGate::builder("big")
        .capacity_for(1u8, usize::MAX)
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    let gate = KeyedGate::builder("big").capacity(65_536).build().unwrap();
    let _permit = gate.try_acquire(1u8).unwrap();
    assert_eq!(gate.in_use(&1), 1);
}

#[test]
fn a_gate_reads_its_name_and_a_held_keys_demand() {
    let gate = KeyedGate::new("named").unwrap();
    assert_eq!(gate.name(), "named");
    let held = gate.try_acquire("k").unwrap();
    let since = Instant::now();
    // Wait on the clock (not to order events): let some demand accumulate.
    while since.elapsed() < Duration::from_millis(2) {
        std::hint::spin_loop();
    }
    let demand = gate.demand(&"k");
    assert!(demand > 0.0 && demand <= 1.0, "{demand}");
    drop(held);
}

#[test]
fn prune_removes_keys_idle_for_a_window_now() {
    let window = Duration::from_millis(1);
    let gate = KeyedGate::builder("prune-now")
        .window(window)
        .build()
        .unwrap();
    drop(gate.try_acquire(1u32).unwrap());
    let held = gate.try_acquire(2u32).unwrap();
    let quiet_from = Instant::now();
    // Wait on the clock (not to order events): let the window pass.
    while quiet_from.elapsed() <= 2 * window {
        std::hint::spin_loop();
    }
    gate.prune();
    assert_eq!(
        gate.tracked_keys(),
        1,
        "the idle key goes, the held one stays"
    );
    drop(held);
}

#[test]
fn a_key_swept_before_it_was_ever_published_gets_no_series() {
    let recorder = MapRecorder::default();
    metrics::with_local_recorder(&recorder, || {
        let gate = KeyedGate::new("repos").unwrap();
        drop(gate.try_acquire("once").unwrap());
        gate.prune_at(Instant::now() + Duration::from_secs(10));
        assert_eq!(gate.tracked_keys(), 0);
        gate.publish_metrics();
    });
    let gauge = format!("{KEYED_DEMAND_AVG}{{gate=repos,key=once}}");
    assert_eq!(
        recorder.get(&gauge),
        None,
        "a zero published for a key never shown"
    );
}

/// A key whose `Hash` panics while its switch is on (keys are equal by their number).
#[derive(Debug, Clone)]
struct Touchy(u32, std::sync::Arc<std::sync::atomic::AtomicBool>);

impl PartialEq for Touchy {
    fn eq(&self, other: &Touchy) -> bool {
        self.0 == other.0
    }
}

impl Eq for Touchy {}

impl std::hash::Hash for Touchy {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        assert!(
            !self.1.load(std::sync::atomic::Ordering::SeqCst),
            "expected Hash panic"
        );
        self.0.hash(state);
    }
}

#[test]
fn a_key_whose_hash_panics_on_release_still_frees_its_slot_and_its_line() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let gate = KeyedGate::new("touchy").unwrap();
    let switch = std::sync::Arc::new(AtomicBool::new(false));
    let key = Touchy(1, switch.clone());
    // A holder released while the key's Hash panics: contained, the slot is back.
    let permit = gate.try_acquire(key.clone()).unwrap();
    switch.store(true, Ordering::SeqCst);
    drop(permit);
    switch.store(false, Ordering::SeqCst);
    assert_eq!(gate.in_use(&key), 0, "the slot leaked");
    // A waiter that leaves while the key's Hash panics: out of the line, the next release
    // does not hand the slot to it.
    let held = gate.try_acquire(key.clone()).unwrap();
    let mut leaving = Box::pin(gate.acquire(key.clone()));
    assert!(
        futures_lite::future::block_on(futures_lite::future::poll_once(&mut leaving)).is_none()
    );
    switch.store(true, Ordering::SeqCst);
    drop(leaving);
    switch.store(false, Ordering::SeqCst);
    drop(held);
    assert_eq!(gate.in_use(&key), 0, "the slot went to a waiter that left");
    assert!(gate.try_acquire(key.clone()).is_ok(), "the key stayed busy");
}
