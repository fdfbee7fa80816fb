//! Operation metrics against a global test recorder (its own test binary, so what other
//! threads emit is seen too). Every test uses its own operation name: tests run in
//! parallel against the one recorder.

mod common;

use std::collections::HashMap;
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures_lite::future;
use loopguard::deadline::{Deadline, Expired};
use loopguard::operation::{Classify, Operation, Outcome};
use loopguard::retry::{AttemptError, Retry, RetryError};

// The series names, as a dashboard or alert spells them.
const OPERATION_DURATION_SECONDS: &str = "loopguard_operation_duration_seconds";
const OPERATIONS_IN_FLIGHT: &str = "loopguard_operations_in_flight";
use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};

#[derive(Default)]
struct Series {
    observations: Mutex<Vec<f64>>,
    gauge: Mutex<f64>,
}

impl CounterFn for Series {
    fn increment(&self, _: u64) {}
    fn absolute(&self, _: u64) {}
}

impl GaugeFn for Series {
    fn increment(&self, value: f64) {
        *self.gauge.lock().unwrap() += value;
    }
    fn decrement(&self, value: f64) {
        *self.gauge.lock().unwrap() -= value;
    }
    fn set(&self, value: f64) {
        *self.gauge.lock().unwrap() = value;
    }
}

impl HistogramFn for Series {
    fn record(&self, value: f64) {
        self.observations.lock().unwrap().push(value);
    }
}

/// Keeps every registered series by `name{label=value,...}` (labels sorted).
#[derive(Default)]
struct TestRecorder {
    series: Mutex<HashMap<String, Arc<Series>>>,
}

fn render(key: &Key) -> String {
    let mut labels: Vec<_> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    labels.sort();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

impl TestRecorder {
    fn get(&self, key: &Key) -> Arc<Series> {
        self.series
            .lock()
            .unwrap()
            .entry(render(key))
            .or_default()
            .clone()
    }
}

impl Recorder for TestRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.get(key))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.get(key))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.get(key))
    }
}

/// The global recorder, installed once for this binary.
fn recorder() -> &'static TestRecorder {
    static RECORDER: OnceLock<&'static TestRecorder> = OnceLock::new();
    RECORDER.get_or_init(|| {
        let leaked: &'static TestRecorder = Box::leak(Box::default());
        metrics::set_global_recorder(leaked).expect("no other recorder in this binary");
        loopguard::telemetry::describe_metrics();
        leaked
    })
}

/// A fresh operation name, unique within this binary.
fn unique(prefix: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!("{prefix}-{}", N.fetch_add(1, Ordering::Relaxed))
}

fn new_op(prefix: &str) -> Operation {
    recorder();
    Operation::new(unique(prefix)).unwrap()
}

fn lookup(key: &str) -> Option<Arc<Series>> {
    recorder().series.lock().unwrap().get(key).cloned()
}

/// Observations recorded for `op` with `outcome`; panics if the series was never registered.
fn observations(op: &Operation, outcome: Outcome) -> Vec<f64> {
    let key = format!(
        "{OPERATION_DURATION_SECONDS}{{operation={},outcome={}}}",
        op.name(),
        outcome.as_str()
    );
    let series = lookup(&key).unwrap_or_else(|| panic!("{key} was never registered"));
    series.observations.lock().unwrap().clone()
}

fn counts(op: &Operation) -> [usize; 5] {
    Outcome::ALL.map(|o| observations(op, o).len())
}

fn in_flight(op: &Operation) -> f64 {
    let key = format!("{OPERATIONS_IN_FLIGHT}{{operation={}}}", op.name());
    let series = lookup(&key).unwrap_or_else(|| panic!("{key} was never registered"));
    *series.gauge.lock().unwrap()
}

/// `[success, deadline, deadline_in_line, cancelled, error]` with a one in `outcome`'s place.
fn only(outcome: Outcome) -> [usize; 5] {
    Outcome::ALL.map(|o| usize::from(o == outcome))
}

#[test]
fn every_series_is_registered_up_front_at_zero() {
    let op = new_op("registered");
    assert_eq!(counts(&op), [0, 0, 0, 0, 0]);
    assert_eq!(in_flight(&op), 0.0);
}

#[test]
fn a_second_handle_does_not_reset_the_gauge() {
    let op = new_op("twice");
    let guard = op.start();
    let again = Operation::new(op.name().to_string()).unwrap();
    assert_eq!(in_flight(&again), 1.0);
    guard.finish(Outcome::Success);
    assert_eq!(in_flight(&op), 0.0);
}

on_every_executor!(
    async fn success_is_observed_once() {
        let op = new_op("success");
        let out = op.measure(async { Ok::<_, Expired>(5) }).await;
        assert_eq!(out, Ok(5));
        assert_eq!(counts(&op), only(Outcome::Success));
        assert_eq!(in_flight(&op), 0.0);
    }
);

on_every_executor!(
    async fn deadline_is_observed_once_with_the_full_wait() {
        let op = new_op("deadline");
        let deadline = Deadline::after(Duration::from_millis(20));
        let out = op.measure(deadline.run(future::pending::<()>())).await;
        assert_eq!(out, Err(Expired));
        assert_eq!(counts(&op), only(Outcome::Deadline));
        assert!(observations(&op, Outcome::Deadline)[0] >= 0.020);
        assert_eq!(in_flight(&op), 0.0);
    }
);

on_every_executor!(
    async fn cancelled_is_observed_once_when_dropped_mid_wait() {
        let op = new_op("cancelled");
        let mut fut = Box::pin(op.measure(Deadline::never().run(future::pending::<()>())));
        assert!(future::poll_once(&mut fut).await.is_none());
        assert_eq!(in_flight(&op), 1.0);
        assert_eq!(counts(&op), [0, 0, 0, 0, 0]);
        drop(fut);
        assert_eq!(counts(&op), only(Outcome::Cancelled));
        assert_eq!(in_flight(&op), 0.0);
    }
);

#[test]
fn dropped_before_the_first_poll_is_cancelled() {
    let op = new_op("never-polled");
    let fut = op.measure(async { Ok::<(), Expired>(()) });
    assert_eq!(in_flight(&op), 1.0, "in flight from wrap time");
    drop(fut);
    assert_eq!(counts(&op), only(Outcome::Cancelled));
    assert_eq!(in_flight(&op), 0.0);
}

#[test]
fn errors_are_classified() {
    let op = new_op("errors");
    let io_error =
        future::block_on(op.measure(async { Err::<(), _>(io::Error::other("refused")) }));
    assert!(io_error.is_err());
    assert_eq!(counts(&op), only(Outcome::Error));

    let op = new_op("io-expired");
    let _ = future::block_on(op.measure(async { Err::<(), _>(io::Error::from(Expired)) }));
    assert_eq!(counts(&op), only(Outcome::Deadline));

    // A timeout that is not this operation's budget is an error.
    let op = new_op("io-timeout");
    let _ = future::block_on(
        op.measure(async { Err::<(), _>(io::Error::new(io::ErrorKind::TimedOut, "upstream")) }),
    );
    assert_eq!(counts(&op), only(Outcome::Error));
}

#[test]
fn retry_errors_are_classified() {
    let exhausted: RetryError<&str> = RetryError::Exhausted {
        attempts: 3,
        last: AttemptError::Failed("503"),
    };
    assert_eq!(exhausted.outcome(), Outcome::Error);
    let late: RetryError<&str> = RetryError::Deadline {
        attempts: 2,
        last: Some(AttemptError::TimedOut),
    };
    assert_eq!(late.outcome(), Outcome::Deadline);

    // Through a real retry: every attempt fails, the deadline cuts the backoff.
    let op = new_op("retry");
    let policy = Retry::new()
        .attempts(3)
        .unwrap()
        .backoff(loopguard::retry::Backoff::fixed([Duration::from_secs(60)]));
    let out = future::block_on(op.measure(
        policy.run(Deadline::after(Duration::from_millis(20)), |_| async {
            Err::<(), _>("down")
        }),
    ));
    assert!(matches!(out, Err(RetryError::Deadline { attempts: 1, .. })));
    assert_eq!(counts(&op), only(Outcome::Deadline));
}

#[test]
fn closure_classifier() {
    let op = new_op("closure");
    let out = future::block_on(op.measure_with(async { None::<u8> }, |o: &Option<u8>| {
        if o.is_some() {
            Outcome::Success
        } else {
            Outcome::Error
        }
    }));
    assert_eq!(out, None);
    assert_eq!(counts(&op), only(Outcome::Error));
}

/// The clock starts when the call is wrapped, not when it is first polled: a queue in
/// front of the first poll (here a blocked thread) is part of the duration.
#[test]
fn the_clock_starts_at_wrap_time() {
    let op = new_op("wrap-time");
    let fut = op.measure(async { Ok::<(), Expired>(()) });
    std::thread::sleep(Duration::from_millis(50)); // the queue under test
    future::block_on(fut).unwrap();
    assert_eq!(counts(&op), only(Outcome::Success));
    let took = observations(&op, Outcome::Success)[0];
    assert!(took >= 0.050, "recorded {took}s, the queue was 50 ms");
}

#[test]
fn a_panic_is_an_error_and_leaves_the_gauge() {
    let op = new_op("panic");
    let fut = op.measure(async {
        if op.name().starts_with("panic") {
            panic!("boom");
        }
        Ok::<(), Expired>(())
    });
    let caught = panic::catch_unwind(AssertUnwindSafe(|| future::block_on(fut)));
    assert!(caught.is_err());
    assert_eq!(counts(&op), only(Outcome::Error));
    assert_eq!(in_flight(&op), 0.0);
}

/// Measured on another thread, read here: the recorder is global.
#[test]
fn concurrent_calls_each_observed_once_from_other_threads() {
    let op = new_op("threads");
    let (tx, rx) = std::sync::mpsc::channel();
    let workers: Vec<_> = (0..4)
        .map(|i| {
            let op = op.clone();
            let tx = tx.clone();
            std::thread::spawn(move || {
                future::block_on(op.measure(async move {
                    future::yield_now().await;
                    tx.send(()).unwrap();
                    if i % 2 == 0 { Ok(()) } else { Err(Expired) }
                }))
            })
        })
        .collect();
    for w in workers {
        let _ = w.join().unwrap();
    }
    assert_eq!(rx.try_iter().count(), 4);
    assert_eq!(counts(&op), [2, 2, 0, 0, 0]);
    assert_eq!(in_flight(&op), 0.0);
}

#[test]
fn manual_guard_records_once() {
    let op = new_op("guard");
    let a = op.start();
    let b = op.start();
    assert_eq!(in_flight(&op), 2.0);
    a.finish(Outcome::Deadline);
    drop(b);
    assert_eq!(counts(&op), [0, 1, 0, 1, 0]);
    assert_eq!(in_flight(&op), 0.0);
}

/// `op.measure(pool.run_within(..))` and `op.measure(pool.try_run_within(..))`, the shapes
/// the README's Operations section describes, compile and record the right outcome.
#[test]
fn a_pools_deadline_futures_are_measured_by_their_outcome() {
    use loopguard::deadline::{Deadline, Phase, Spent};
    use loopguard::operation::{Classify, Outcome};
    use loopguard::pool::{Pool, RunError, WithinError};

    let pool = Pool::builder().workers(1).build().unwrap();
    futures_lite::future::block_on(async {
        let ok = pool.run_within(Deadline::never(), || 1_u8).await;
        assert_eq!(ok.outcome(), Outcome::Success);
        let late: Result<u8, RunError> = Err(RunError::Expired(Spent::new(Phase::Running)));
        assert_eq!(late.outcome(), Outcome::Deadline);
        let queued: Result<u8, RunError> = Err(RunError::Expired(Spent::new(Phase::InLine)));
        assert_eq!(queued.outcome(), Outcome::DeadlineInLine);
        assert_eq!(Err::<u8, _>(RunError::Closed).outcome(), Outcome::Error);
        let spent = pool
            .try_run_within(Deadline::at(std::time::Instant::now()), || 2_u8)
            .await;
        assert!(matches!(spent, Err(WithinError::Expired(s)) if s.phase() == Phase::InLine));
        assert_eq!(spent.outcome(), Outcome::DeadlineInLine);
        // Measured whole, as the README's Operations section shows.
        let op = loopguard::operation::Operation::new("walk").unwrap();
        let walked = op
            .measure(pool.run_within(Deadline::never(), || 3_u8))
            .await;
        assert_eq!(walked, Ok(3));
        // The slot comes back just after the outcome is delivered.
        pool.wait_idle().await;
        let admitted = op
            .measure(pool.try_run_within(Deadline::never(), || 4_u8))
            .await;
        assert_eq!(admitted.ok(), Some(4));
    });
}

/// The two phases of a spent budget land in two series: `deadline_in_line` for a caller
/// that never got a slot, `deadline` for one whose job ran past it; through `RunError`,
/// `WithinError`, `RefreshError` and an `io::Error` made from them alike.
#[test]
fn a_budget_spent_in_line_and_one_spent_running_are_told_apart() {
    use loopguard::deadline::{Phase, Spent};
    use loopguard::pool::{Pool, RunError};
    use loopguard::refresh::{Refresh, RefreshError};
    use std::sync::mpsc;

    let pool = Pool::builder().workers(1).build().unwrap();
    let op = new_op("phases");
    let (release, gate) = mpsc::channel::<()>();
    let (started, running) = mpsc::channel::<()>();
    future::block_on(async {
        // The only slot is held by a job that runs past its caller's 30 ms.
        let holder = op.measure(pool.run_within(
            Deadline::after(Duration::from_millis(30)),
            move || {
                started.send(()).unwrap();
                gate.recv().ok();
            },
        ));
        let holder = common::bounded(Duration::from_secs(10), holder).await;
        assert_eq!(holder, Err(RunError::Expired(Spent::new(Phase::Running))));
        running.recv().unwrap();
        assert_eq!(counts(&op), only(Outcome::Deadline));
        // A second caller waits in line behind it until its own 30 ms are gone.
        let queued = op.measure(pool.run_within(Deadline::after(Duration::from_millis(30)), || ()));
        let queued = common::bounded(Duration::from_secs(10), queued).await;
        assert_eq!(queued, Err(RunError::Expired(Spent::new(Phase::InLine))));
        assert_eq!(counts(&op), [0, 1, 1, 0, 0]);
        // The same phases through the other errors and through `io::Error`.
        let io_in_line: io::Error = RunError::Expired(Spent::new(Phase::InLine)).into();
        assert_eq!(io_in_line.kind(), io::ErrorKind::TimedOut);
        assert_eq!(Err::<(), _>(io_in_line).outcome(), Outcome::DeadlineInLine);
        let io_running: io::Error = Spent::new(Phase::Running).into();
        assert_eq!(Err::<(), _>(io_running).outcome(), Outcome::Deadline);
        let cache = Refresh::builder("phases")
            .on_pool(&pool, || Ok::<u8, String>(1))
            .unwrap();
        let refreshed = op
            .measure(cache.get(Deadline::after(Duration::from_millis(30))))
            .await;
        assert_eq!(
            refreshed,
            Err(RefreshError::Expired(Spent::new(Phase::InLine))),
            "no slot for it"
        );
        assert_eq!(counts(&op), [0, 1, 2, 0, 0]);
        release.send(()).unwrap();
        pool.wait_idle().await;
    });
}
