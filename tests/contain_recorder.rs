//! A global metrics recorder whose every counter, gauge and histogram update panics (its
//! own test binary: the recorder is process-wide). Delivery and wake-ups come before any
//! metric, and every call into the recorder is contained, so an awaited job is delivered,
//! an orphaned failure is reported, a queued caller's slot is not leaked, a cache's joiners
//! are woken, an operation's output comes back, and `shutdown` returns.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use common::{Latch, bounded, hold};
use futures_lite::future::{self, block_on};
use loopguard::Fallible;
use loopguard::deadline::Deadline;
use loopguard::keyed::KeyedGate;
use loopguard::operation::Operation;
use loopguard::orphan::{OrphanHandler, ReportKind};
use loopguard::pool::Pool;
use loopguard::refresh::Refresh;
use metrics::{CounterFn, GaugeFn, HistogramFn, Key, KeyName, Metadata, SharedString, Unit};

const LIMIT: Duration = Duration::from_secs(10);

static CALLS: AtomicUsize = AtomicUsize::new(0);

fn boom() -> ! {
    CALLS.fetch_add(1, Ordering::SeqCst);
    panic!("expected recorder boom")
}

struct Panics;

impl CounterFn for Panics {
    fn increment(&self, _: u64) {
        boom()
    }
    fn absolute(&self, _: u64) {
        boom()
    }
}

impl GaugeFn for Panics {
    fn increment(&self, _: f64) {
        boom()
    }
    fn decrement(&self, _: f64) {
        boom()
    }
    fn set(&self, _: f64) {
        boom()
    }
}

impl HistogramFn for Panics {
    fn record(&self, _: f64) {
        boom()
    }
}

/// Registers fine, then panics on every update.
struct PanickingRecorder;

impl metrics::Recorder for PanickingRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {
        boom()
    }
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {
        boom()
    }
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {
        boom()
    }
    fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> metrics::Counter {
        metrics::Counter::from_arc(Arc::new(Panics))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::from_arc(Arc::new(Panics))
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> metrics::Histogram {
        metrics::Histogram::from_arc(Arc::new(Panics))
    }
}

fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        metrics::set_global_recorder(PanickingRecorder).expect("no other recorder here");
        common::quiet_expected_panics();
    });
}

#[test]
fn pools_deliver_report_and_release_with_a_panicking_recorder() {
    install();
    loopguard::telemetry::describe_metrics();
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let pool = Pool::builder()
        .workers(1)
        .no_stuck_reports()
        .on_orphan(OrphanHandler::new(move |r| {
            let _ = tx.lock().unwrap().send(r.kind());
        }))
        .build()
        .unwrap();
    block_on(async {
        // Awaited: the job-duration metric comes after delivery.
        assert_eq!(bounded(LIMIT, pool.run(|| 1)).await, Ok(1));
        // The slot is released just after delivery (and after the recorder's contained
        // panic): wait for it before asking for it again.
        bounded(LIMIT, pool.wait_idle()).await;
        // Orphaned: the counter comes after the handler.
        drop(pool.try_run(Fallible(|| Err::<(), _>("lost"))).unwrap());
        assert_eq!(rx.recv_timeout(LIMIT), Ok(ReportKind::Failed));
        assert_eq!(pool.orphaned_failures(), 1);
        // The report comes before the slot is released: wait for it.
        bounded(LIMIT, pool.wait_idle()).await;
        // Queued: the wait-time metric comes after the job is on its way.
        let release = Latch::new();
        let holder = hold(&pool, &release);
        let mut queued = Box::pin(pool.run(|| 2));
        assert!(future::poll_once(queued.as_mut()).await.is_none());
        release.open();
        bounded(LIMIT, holder).await.unwrap();
        assert_eq!(bounded(LIMIT, queued).await, Ok(2));
        bounded(LIMIT, pool.wait_idle()).await;
        // Refused: the rejection counter.
        let release = Latch::new();
        let holder = hold(&pool, &release);
        assert!(pool.try_run(|| ()).is_err());
        release.open();
        bounded(LIMIT, holder).await.unwrap();
        pool.publish_metrics();
        bounded(LIMIT, pool.wait_idle()).await;
        assert_eq!(pool.in_use(), 0, "a slot leaked");
        assert!(pool.try_run(|| ()).is_ok());
        bounded(LIMIT, pool.shutdown()).await;
    });
    assert!(
        CALLS.load(Ordering::SeqCst) > 0,
        "the recorder was never called"
    );
}

#[test]
fn a_caches_joiners_are_woken_with_a_panicking_recorder() {
    install();
    let pool = Pool::builder()
        .workers(1)
        .no_stuck_reports()
        .build()
        .unwrap();
    let release = Latch::new();
    let r = release.clone();
    let cache = Refresh::builder("recorded")
        .on_pool(&pool, move || {
            r.wait();
            Ok::<_, String>(42)
        })
        .unwrap();
    block_on(async {
        let calls = (0..4).map(|_| Box::pin(cache.get(Deadline::never())));
        let mut calls: Vec<_> = calls.collect();
        for call in &mut calls {
            assert!(future::poll_once(call.as_mut()).await.is_none());
        }
        release.open();
        for call in calls {
            assert_eq!(
                bounded(LIMIT, call).await,
                Ok(42),
                "a joiner was never woken"
            );
        }
        assert_eq!(cache.stats().runs_ok, 1);
    });
}

#[test]
fn operations_and_keyed_gates_work_with_a_panicking_recorder() {
    install();
    block_on(async {
        let op = Operation::new("recorded").unwrap();
        assert_eq!(
            bounded(LIMIT, op.measure(async { Ok::<_, std::io::Error>(3) }))
                .await
                .unwrap(),
            3
        );
        drop(op.start());
        let gate = KeyedGate::new("recorded").unwrap();
        let permit = gate.try_acquire("k").unwrap();
        assert!(gate.try_acquire("k").is_err());
        assert_eq!(gate.rejected(), 1);
        gate.publish_metrics();
        drop(permit);
        assert!(gate.try_acquire("k").is_ok());
    });
}
