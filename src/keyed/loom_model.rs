//! Exhaustive interleavings of the keyed hand-off, under loom: a permit's release (the
//! grant to the oldest waiter, by the key's gate, outside the table lock), a waiter's poll,
//! its cancel (the `Acquire` dropped), a newcomer's `try_acquire` and the sweep of idle
//! keys, racing. The key's gate is the crate's gate (its word, its queue, its waiters'
//! waker slots are loom's here too), reached under the key table's lock.
//!
//! What every model checks: a released slot goes to the oldest waiter or back to the key;
//! a waiter granted the slot just as it is cancelled passes it on; a waiter that saw
//! `Pending` is woken when it is granted; a newcomer never takes a slot past a waiter; the
//! sweep never removes a key someone holds or waits for; at the end nothing is held,
//! nothing waits, no demand is left over, and the key admits again. Never a slot lost (the
//! key would stay busy), never doubled (two permits at once).
//!
//! Seeded bugs they catch (each applied by hand, watched failing, restored):
//! - `Acquire`'s `Drop` not passing on a slot granted to it meanwhile (the `release` after a
//!   `cancel` that returns `true` left out): `cancel_races_release_and_passes_the_slot_on`,
//!   `cancel_races_release_and_returns_the_slot` and `sweep_races_release_and_cancel` fail
//!   (a slot still held at the end, or the younger waiter never granted).
//! - the first poll queuing without registering the task's waker (returning `Pending` right
//!   after the gate's `start`): four models fail ("a granted waiter was not woken").
//! - the sweep judging a key by the age of its demand alone (`removable_at` without the
//!   gate's counts, and `is_idle_at` without the level): `sweep_races_release_and_poll`
//!   fails (the held key removed under its holder). Either guard alone suffices: with only
//!   one of them left out, every model passes, rightly.
//! - `Acquire`'s `Drop` leaving the gate's line without leaving the demand: every cancel
//!   model fails ("demand left over").
//! - `publish_metrics` without `OnePublisher`: see the last model.

use super::*;
use crate::loom_util::{Flag, flag};
use loom::thread;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

const KEY: u32 = 1;

/// A gate with key `KEY` held by the returned permit.
fn held() -> (KeyedGate<u32>, KeyPermit<u32>) {
    let gate = KeyedGate::new("model").unwrap();
    let permit = gate.try_acquire(KEY).expect("an idle key");
    (gate, permit)
}

fn poll(acquire: &mut Acquire<u32>, waker: &Waker) -> Poll<KeyPermit<u32>> {
    Pin::new(acquire).poll(&mut Context::from_waker(waker))
}

/// A waiter queued behind the held key, and the flag of its waker.
fn queued(gate: &KeyedGate<u32>) -> (Acquire<u32>, Arc<Flag>, Waker) {
    let mut acquire = gate.acquire(KEY);
    let (woken, waker) = flag();
    assert!(poll(&mut acquire, &waker).is_pending());
    (acquire, woken, waker)
}

/// The permit is dropped on another thread.
fn spawn_release(permit: KeyPermit<u32>) -> thread::JoinHandle<()> {
    thread::spawn(move || drop(permit))
}

/// Polls a waiter that must have been granted: it was woken, and it gets its permit now.
fn granted(acquire: &mut Acquire<u32>, woken: &Flag, waker: &Waker) -> KeyPermit<u32> {
    assert!(woken.woken(), "a granted waiter was not woken");
    match poll(acquire, waker) {
        Poll::Ready(permit) => permit,
        Poll::Pending => panic!("a woken waiter was not granted"),
    }
}

/// Nothing held, nothing waiting, no demand left over, and the key admits again.
fn check_quiet(gate: &KeyedGate<u32>) {
    assert_eq!((gate.in_use(&KEY), gate.waiting(&KEY)), (0, 0));
    assert_eq!(gate.demand_level(&KEY), 0, "demand left over");
    let again = gate.try_acquire(KEY).expect("the key admits again");
    assert_eq!(gate.in_use(&KEY), 1);
    drop(again);
}

/// A newcomer polls for the first time while the holder releases: it gets the slot at
/// once, or it queues and is granted it with a wake-up.
#[test]
fn release_races_a_first_poll() {
    loom::model(|| {
        let (gate, permit) = held();
        let releaser = spawn_release(permit);
        let mut acquire = gate.acquire(KEY);
        let (woken, waker) = flag();
        let first = poll(&mut acquire, &waker);
        releaser.join().unwrap();
        let permit = match first {
            Poll::Ready(permit) => permit,
            Poll::Pending => granted(&mut acquire, &woken, &waker),
        };
        assert_eq!((gate.in_use(&KEY), gate.waiting(&KEY)), (1, 0));
        drop(permit);
        check_quiet(&gate);
    });
}

/// Two waiters; the release races the younger one's re-poll with a new waker: the slot
/// goes to the oldest, the younger still waits, and is granted when the oldest is done.
#[test]
fn release_goes_to_the_oldest_waiter() {
    loom::model(|| {
        let (gate, permit) = held();
        let (mut oldest, oldest_woken, oldest_waker) = queued(&gate);
        let (mut younger, _, _) = queued(&gate);
        let releaser = spawn_release(permit);
        let (younger_woken, younger_waker) = flag();
        assert!(poll(&mut younger, &younger_waker).is_pending());
        releaser.join().unwrap();
        let first = granted(&mut oldest, &oldest_woken, &oldest_waker);
        assert!(!younger_woken.woken());
        assert_eq!((gate.in_use(&KEY), gate.waiting(&KEY)), (1, 1));
        drop(first);
        drop(granted(&mut younger, &younger_woken, &younger_waker));
        check_quiet(&gate);
    });
}

/// Two waiters; the oldest is cancelled while the slot is released to it: the slot passes
/// on to the younger, never lost, never doubled.
#[test]
fn cancel_races_release_and_passes_the_slot_on() {
    loom::model(|| {
        let (gate, permit) = held();
        let (oldest, _, _) = queued(&gate);
        let (mut younger, younger_woken, younger_waker) = queued(&gate);
        let releaser = spawn_release(permit);
        drop(oldest);
        releaser.join().unwrap();
        assert_eq!((gate.in_use(&KEY), gate.waiting(&KEY)), (1, 0));
        drop(granted(&mut younger, &younger_woken, &younger_waker));
        check_quiet(&gate);
    });
}

/// The only waiter is cancelled while the slot is released to it: the slot goes back to
/// the key.
#[test]
fn cancel_races_release_and_returns_the_slot() {
    loom::model(|| {
        let (gate, permit) = held();
        let (only, _, _) = queued(&gate);
        let releaser = spawn_release(permit);
        drop(only);
        releaser.join().unwrap();
        check_quiet(&gate);
    });
}

/// A newcomer's `try_acquire` races the release to the one waiter: whatever the order, the
/// slot is the waiter's (a key with a waiter is busy), and the refusal is counted once.
#[test]
fn try_acquire_never_overtakes_a_waiter() {
    loom::model(|| {
        let (gate, permit) = held();
        let (mut waiter, woken, waker) = queued(&gate);
        let newcomer = {
            let gate = gate.clone();
            thread::spawn(move || gate.try_acquire(KEY).is_ok())
        };
        drop(permit);
        assert!(!newcomer.join().unwrap(), "a newcomer overtook a waiter");
        assert_eq!(gate.rejected(), 1);
        drop(granted(&mut waiter, &woken, &waker));
        check_quiet(&gate);
    });
}

/// A sweep of idle keys (as of an hour later: anything idle is removable) races the
/// release to a waiter and the waiter's poll: the key, held or waited for throughout, is
/// never removed under them, and the waiter gets the slot.
#[test]
fn sweep_races_release_and_poll() {
    loom::model(|| {
        let (gate, permit) = held();
        let (mut waiter, woken, waker) = queued(&gate);
        let later = Instant::now() + Duration::from_secs(3600);
        let sweeper = {
            let gate = gate.clone();
            thread::spawn(move || gate.prune_at(later))
        };
        let releaser = spawn_release(permit);
        let mine = match poll(&mut waiter, &waker) {
            Poll::Ready(permit) => permit,
            Poll::Pending => {
                releaser.join().unwrap();
                sweeper.join().unwrap();
                let permit = granted(&mut waiter, &woken, &waker);
                assert_eq!((gate.in_use(&KEY), gate.waiting(&KEY)), (1, 0));
                drop(permit);
                check_quiet(&gate);
                return;
            }
        };
        releaser.join().unwrap();
        sweeper.join().unwrap();
        assert_eq!((gate.in_use(&KEY), gate.waiting(&KEY)), (1, 0));
        drop(mine);
        check_quiet(&gate);
    });
}

/// A sweep races the release and the only waiter's cancel: whether the sweep removes the
/// idle key or not, nothing is held or waits afterwards and the key admits again.
#[test]
fn sweep_races_release_and_cancel() {
    loom::model(|| {
        let (gate, permit) = held();
        let (waiter, _, _) = queued(&gate);
        let later = Instant::now() + Duration::from_secs(3600);
        let sweeper = {
            let gate = gate.clone();
            thread::spawn(move || gate.prune_at(later))
        };
        let releaser = spawn_release(permit);
        drop(waiter);
        releaser.join().unwrap();
        sweeper.join().unwrap();
        check_quiet(&gate);
    });
}

// Two publishers and a sweep: `publish_metrics` snapshots under the table lock and sets the
// gauges (the recorder, user code) and `shown` outside it. The model's recorder keeps each
// gauge's last value under a loom lock, so loom explores every order of the two rounds'
// sets.

/// The last value of each gauge, by key label.
#[derive(Default)]
struct Values(loom::sync::Mutex<HashMap<String, f64>>);

struct ValueGauge {
    key: String,
    values: Arc<Values>,
}

impl metrics::GaugeFn for ValueGauge {
    fn increment(&self, _: f64) {}
    fn decrement(&self, _: f64) {}
    fn set(&self, value: f64) {
        let mut values = self.values.0.lock().unwrap();
        values.insert(self.key.clone(), value);
    }
}

struct ValueRecorder(Arc<Values>);

impl metrics::Recorder for ValueRecorder {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn register_counter(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        metrics::Counter::noop()
    }
    fn register_gauge(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        let label = key.labels().find(|l| l.key() == LABEL_KEY);
        metrics::Gauge::from_arc(Arc::new(ValueGauge {
            key: label.map_or_else(String::new, |l| l.value().to_string()),
            values: self.0.clone(),
        }))
    }
    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

/// One publisher publishes while another sweeps the idle key and then publishes its
/// removal: once both return, the key reads 0 (or is not shown at all), in the recorder
/// and in what the collector encodes. An older snapshot never lands last.
///
/// Seeded bug this catches (checked by hand, then restored): `publish_metrics` calling
/// `publish_round` directly, without `OnePublisher` (overlapping rounds): the model fails
/// with "an older snapshot overwrote a newer one".
#[test]
fn two_publishers_and_a_sweep_never_go_back_in_time() {
    loom::model(|| {
        let values = Arc::new(Values::default());
        let recorder = ValueRecorder(values.clone());
        // loom runs its threads on this OS thread: the local recorder is theirs too.
        metrics::with_local_recorder(&recorder, || {
            let gate = KeyedGate::new("model").unwrap();
            drop(gate.try_acquire(KEY).expect("an idle key"));
            let later = Instant::now() + Duration::from_secs(3600);
            let publisher = {
                let gate = gate.clone();
                thread::spawn(move || gate.publish_metrics())
            };
            gate.prune_at(later);
            assert_eq!(gate.tracked_keys(), 0);
            gate.publish_metrics();
            publisher.join().unwrap();
            let last = values.0.lock().unwrap().get(&KEY.to_string()).copied();
            assert!(
                last.is_none_or(|value| value == 0.0),
                "an older snapshot overwrote a newer one in the recorder: {last:?}"
            );
            let shown = gate.shown();
            assert!(
                shown.iter().all(|(_, value)| *value == 0.0),
                "an older snapshot overwrote a newer one in shown: {shown:?}"
            );
        });
    });
}
