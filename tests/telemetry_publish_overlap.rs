//! Two `publish_metrics` calls that overlap (a keyed gate's, a pool's), and a change
//! between them: an older snapshot never overwrites a newer one, in the `metrics` recorder
//! or in what the prometheus-client collector encodes. Real threads; the slow publisher is
//! parked inside the recorder by a channel, never by a sleep.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use loopguard::keyed::KeyedGate;
use loopguard::pool::Pool;
use loopguard::telemetry::Collector;
use metrics::{Counter, Gauge, GaugeFn, Histogram, Key, KeyName, Metadata, SharedString, Unit};
use prometheus_client::registry::Registry;

/// The gauges' last values, by `name{labels}`; the first gauge set made on the thread
/// named `slow` waits there until `go`, after telling `entered`.
#[derive(Default)]
struct Held {
    values: Mutex<HashMap<String, f64>>,
    hold: Mutex<Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>>,
}

struct Handle {
    id: String,
    held: Arc<Held>,
}

impl GaugeFn for Handle {
    fn increment(&self, _: f64) {}
    fn decrement(&self, _: f64) {}
    fn set(&self, value: f64) {
        if thread::current().name() == Some("slow") {
            let hold = self.held.hold.lock().unwrap().take();
            if let Some((entered, go)) = hold {
                entered.send(()).unwrap();
                go.recv().unwrap();
            }
        }
        self.held
            .values
            .lock()
            .unwrap()
            .insert(self.id.clone(), value);
    }
}

struct Recorder(Arc<Held>);

impl metrics::Recorder for Recorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
        Counter::noop()
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        let id = format!("{}{{{}}}", key.name(), labels.join(","));
        Gauge::from_arc(Arc::new(Handle {
            id,
            held: self.0.clone(),
        }))
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

const SERIES: &str = "loopguard_keyed_demand_avg{gate=repos,key=backend}";

/// A slow publisher snapshots a busy key, then stalls in the recorder; meanwhile the key is
/// released and swept, and a second publisher publishes its removal. Once both return, the
/// key reads 0 in the recorder and in the collector's encode: before publishes were one at
/// a time, the slow one wrote the key's old demand last and it stayed for good.
#[test]
fn a_stalled_publish_never_overwrites_a_later_one() {
    for round in 0..20 {
        let held = Arc::new(Held::default());
        let (entered_tx, entered) = mpsc::channel();
        let (go, go_rx) = mpsc::channel();
        *held.hold.lock().unwrap() = Some((entered_tx, go_rx));
        let recorder = Arc::new(Recorder(held.clone()));

        let gate: KeyedGate<&'static str> = KeyedGate::new("repos").unwrap();
        let permit = gate.try_acquire("backend").unwrap();
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Collector::new().keyed(&gate)));

        let slow = {
            let (gate, recorder) = (gate.clone(), recorder.clone());
            thread::Builder::new()
                .name("slow".into())
                .spawn(move || metrics::with_local_recorder(&*recorder, || gate.publish_metrics()))
                .unwrap()
        };
        // The slow publisher has its snapshot (the key busy) and is inside the recorder.
        entered.recv().unwrap();
        drop(permit);
        gate.prune_at(Instant::now() + Duration::from_secs(3600));
        assert_eq!(
            gate.tracked_keys(),
            0,
            "round {round}: the idle key was swept"
        );
        metrics::with_local_recorder(&*recorder, || gate.publish_metrics());
        go.send(()).unwrap();
        slow.join().unwrap();

        let value = held.values.lock().unwrap().get(SERIES).copied();
        assert_eq!(
            value,
            Some(0.0),
            "round {round}: the recorder kept an old snapshot"
        );
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with(r#"loopguard_keyed_demand_avg{gate="repos",key="backend"}"#));
        if let Some(line) = line {
            assert!(
                line.ends_with(" 0.0"),
                "round {round}: the collector kept an old snapshot: {line}"
            );
        }
    }
}

/// A recorder that publishes the same gate again from inside a gauge set: the inner call
/// returns at once (one publisher at a time must not deadlock on itself, nor keep the round
/// going for ever), and the outer publish completes with its one round.
#[test]
fn a_recorder_that_publishes_again_neither_deadlocks_nor_loops() {
    struct Reentrant {
        gate: Mutex<Option<KeyedGate<&'static str>>>,
        sets: std::sync::atomic::AtomicUsize,
    }
    struct ReentrantGauge(Arc<Reentrant>);
    impl GaugeFn for ReentrantGauge {
        fn increment(&self, _: f64) {}
        fn decrement(&self, _: f64) {}
        fn set(&self, _: f64) {
            let sets = self
                .0
                .sets
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            // Past 100 rounds it stops calling back, so a publish that kept going round
            // ends and the count below fails, instead of the test hanging.
            if sets >= 100 {
                return;
            }
            let gate = self.0.gate.lock().unwrap().clone();
            if let Some(gate) = gate {
                gate.publish_metrics();
            }
        }
    }
    struct ReentrantRecorder(Arc<Reentrant>);
    impl metrics::Recorder for ReentrantRecorder {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
            Counter::noop()
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::from_arc(Arc::new(ReentrantGauge(self.0.clone())))
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }

    let state = Arc::new(Reentrant {
        gate: Mutex::new(None),
        sets: std::sync::atomic::AtomicUsize::new(0),
    });
    let (done_tx, done) = mpsc::channel();
    let publisher = {
        let state = state.clone();
        thread::spawn(move || {
            let recorder = ReentrantRecorder(state.clone());
            metrics::with_local_recorder(&recorder, || {
                let gate: KeyedGate<&'static str> = KeyedGate::new("repos").unwrap();
                let _permit = gate.try_acquire("backend").unwrap();
                *state.gate.lock().unwrap() = Some(gate.clone());
                gate.publish_metrics();
                state.gate.lock().unwrap().take();
            });
            done_tx.send(()).unwrap();
        })
    };
    // A watchdog, not an ordering: a publish that deadlocked on itself never sends.
    done.recv_timeout(Duration::from_secs(60))
        .expect("a re-entrant publish deadlocked");
    publisher.join().unwrap();
    // One round, one key: the inner calls published nothing.
    let sets = state.sets.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(sets, 1, "the publish went round {sets} times");
}

/// A slow publisher reads a pool with its one slot held, then stalls in the recorder;
/// meanwhile the job ends and a second publisher publishes the idle pool. Once both
/// return, `in_use` reads 0 in the recorder and in the collector's encode: before each
/// gauge was published one round at a time, the slow one wrote its 1 last, and an idle
/// pool read busy until the next publish.
#[test]
fn a_stalled_pool_publish_never_overwrites_a_later_one() {
    const IN_USE: &str = "loopguard_pool_in_use{pool=walks}";
    for round in 0..20 {
        let held = Arc::new(Held::default());
        let (entered_tx, entered) = mpsc::channel();
        let (go, go_rx) = mpsc::channel();
        *held.hold.lock().unwrap() = Some((entered_tx, go_rx));
        let recorder = Arc::new(Recorder(held.clone()));
        // The pool's gauges are registered with the recorder when it is built.
        let pool = metrics::with_local_recorder(&*recorder, || {
            Pool::builder().name("walks").workers(1).build().unwrap()
        });
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Collector::new().pool(&pool)));

        let (started_tx, started) = mpsc::channel();
        let (finish, finish_rx) = mpsc::channel::<()>();
        let job = pool
            .try_run(move || {
                started_tx.send(()).unwrap();
                finish_rx.recv().unwrap();
            })
            .unwrap();
        started.recv().unwrap();
        let slow = {
            let pool = pool.clone();
            thread::Builder::new()
                .name("slow".into())
                .spawn(move || pool.publish_metrics())
                .unwrap()
        };
        // The slow publisher read `in_use` 1 and is inside the recorder.
        entered.recv().unwrap();
        finish.send(()).unwrap();
        futures_lite::future::block_on(job).unwrap();
        assert_eq!(
            pool.in_use(),
            0,
            "round {round}: the slot is free once the job's output is in"
        );
        pool.publish_metrics();
        go.send(()).unwrap();
        slow.join().unwrap();

        let value = held.values.lock().unwrap().get(IN_USE).copied();
        assert_eq!(
            value,
            Some(0.0),
            "round {round}: the recorder kept an old reading"
        );
        // The collector reads the value kept before the recorder is called, so this stall
        // alone does not make it stale; it must stay 0 all the same.
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("loopguard_pool_in_use{pool=\"walks\"} 0.0\n"),
            "round {round}: the collector kept an old reading:\n{text}"
        );
    }
}
