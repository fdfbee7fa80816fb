//! Shared test helpers: one macro to run a behaviour on every executor, latches, counters
//! and futures that count their polls.
#![allow(dead_code, unused_macros)]

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

pub mod exposition;
#[cfg(feature = "tower")]
pub mod services;

/// Defines a module `$name` with one test per executor: `smol`, `async_std`,
/// `local_executor`, `block_on` and `tokio_current_thread`, each running the same body.
#[macro_export]
macro_rules! on_every_executor {
    ($name:ident, $body:expr) => {
        on_every_executor! {
            async fn $name() {
                $body.await
            }
        }
    };
    ($(#[$attr:meta])* async fn $name:ident() $body:block) => {
        $(#[$attr])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            async fn body() $body

            #[test]
            fn smol() {
                smol::block_on(body())
            }

            #[test]
            fn async_std() {
                async_std::task::block_on(body())
            }

            #[test]
            fn local_executor() {
                let ex = async_executor::LocalExecutor::new();
                futures_lite::future::block_on(ex.run(body()))
            }

            #[test]
            fn block_on() {
                futures_lite::future::block_on(body())
            }

            #[test]
            fn tokio_current_thread() {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a tokio runtime")
                    .block_on(body())
            }
        }
    };
}

/// A one-shot latch: threads block in `wait` until someone calls `open`.
#[derive(Clone, Default)]
pub struct Latch {
    inner: Arc<(Mutex<bool>, Condvar)>,
}

impl Latch {
    pub fn new() -> Latch {
        Latch::default()
    }

    pub fn open(&self) {
        *self.inner.0.lock().unwrap() = true;
        self.inner.1.notify_all();
    }

    pub fn is_open(&self) -> bool {
        *self.inner.0.lock().unwrap()
    }

    /// Blocks until the latch opens. Panics after a minute so a broken test fails instead
    /// of hanging CI.
    pub fn wait(&self) {
        let guard = self.inner.0.lock().unwrap();
        let (guard, timeout) = self
            .inner
            .1
            .wait_timeout_while(guard, Duration::from_secs(60), |open| !*open)
            .unwrap();
        assert!(!timeout.timed_out() || *guard, "latch never opened");
    }
}

/// Counts events and lets a thread wait until a count is reached.
#[derive(Clone, Default)]
pub struct Counter {
    inner: Arc<(Mutex<usize>, Condvar)>,
}

impl Counter {
    pub fn new() -> Counter {
        Counter::default()
    }

    pub fn add(&self) {
        *self.inner.0.lock().unwrap() += 1;
        self.inner.1.notify_all();
    }

    pub fn get(&self) -> usize {
        *self.inner.0.lock().unwrap()
    }

    /// Blocks until the count reaches `n`; panics after a minute.
    pub fn wait_for(&self, n: usize) {
        let guard = self.inner.0.lock().unwrap();
        let (guard, _) = self
            .inner
            .1
            .wait_timeout_while(guard, Duration::from_secs(60), |count| *count < n)
            .unwrap();
        assert!(*guard >= n, "count stayed at {} < {n}", *guard);
    }
}

/// Polls a future once, returning its output if it was ready.
pub async fn poll_once<F: std::future::Future + Unpin>(fut: &mut F) -> Option<F::Output> {
    futures_lite::future::poll_once(fut).await
}

/// Generous upper bound for "woke near the deadline" on a shared 2-core machine.
pub const SLACK: Duration = Duration::from_millis(200);

/// Asserts `start.elapsed()` is within `[at_least, at_least + SLACK)`.
#[track_caller]
pub fn assert_elapsed_near(start: Instant, at_least: Duration) {
    let took = start.elapsed();
    assert!(
        took >= at_least,
        "took {took:?}, expected at least {at_least:?}"
    );
    assert!(
        took < at_least + SLACK,
        "took {took:?}, expected under {:?}",
        at_least + SLACK
    );
}

/// A future that counts its polls and is ready with `value` after `pending_polls`
/// pending ones (waking itself each time).
pub struct Counted<T> {
    pub polls: Arc<AtomicUsize>,
    pending_polls: usize,
    value: Option<T>,
}

impl<T: Unpin> Counted<T> {
    pub fn new(value: T, pending_polls: usize) -> (Self, Arc<AtomicUsize>) {
        let polls = Arc::new(AtomicUsize::new(0));
        let fut = Counted {
            polls: polls.clone(),
            pending_polls,
            value: Some(value),
        };
        (fut, polls)
    }
}

impl<T: Unpin> Future for Counted<T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let this = self.get_mut();
        let seen = this.polls.fetch_add(1, Ordering::SeqCst);
        if seen < this.pending_polls {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        Poll::Ready(this.value.take().expect("Counted polled after completion"))
    }
}

/// A future that blocks its thread until `until`, then is ready with `value`: a
/// result that is computed late.
pub async fn ready_late<T>(until: Instant, value: T) -> T {
    let now = Instant::now();
    if until > now {
        std::thread::sleep(until - now);
    }
    value
}

/// Asserts that `a` and `b` differ by less than 1e-9.
#[track_caller]
pub fn assert_close(a: f64, b: f64) {
    assert!((a - b).abs() < 1e-9, "{a} != {b}");
}

/// Awaits `fut`, panicking if it takes longer than `limit`: a broken contract then fails
/// the test instead of hanging it.
pub async fn bounded<F: Future>(limit: Duration, fut: F) -> F::Output {
    let watchdog = async {
        async_io::Timer::after(limit).await;
        panic!("not done within {limit:?}");
    };
    futures_lite::future::or(fut, watchdog).await
}

/// Occupies one slot of `pool` with a job that blocks until `release` opens; returns once
/// the job is running.
pub fn hold(pool: &loopguard::pool::Pool, release: &Latch) -> loopguard::pool::Job<()> {
    let started = Counter::new();
    let (s, r) = (started.clone(), release.clone());
    let job = pool
        .try_run(move || {
            s.add();
            r.wait();
        })
        .expect("a free slot");
    started.wait_for(1);
    job
}

/// A minimal `metrics` recorder keeping every counter and gauge in a map keyed by
/// `name{label=value,...}` (labels in emission order). Histograms are dropped.
#[derive(Default)]
pub struct MapRecorder {
    values: Mutex<std::collections::HashMap<String, Arc<std::sync::atomic::AtomicU64>>>,
}

impl MapRecorder {
    fn handle(&self, key: &metrics::Key) -> Arc<std::sync::atomic::AtomicU64> {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        let id = format!("{}{{{}}}", key.name(), labels.join(","));
        Arc::clone(self.values.lock().unwrap().entry(id).or_default())
    }

    /// The value of `name{labels}`, `None` if it was never registered.
    pub fn get(&self, id: &str) -> Option<u64> {
        let values = self.values.lock().unwrap();
        values.get(id).map(|v| v.load(Ordering::Relaxed))
    }
}

impl metrics::Recorder for MapRecorder {
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
    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        metrics::Counter::from_arc(self.handle(key))
    }
    fn register_gauge(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::from_arc(self.handle(key))
    }
    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

/// Keeps panics whose message starts with `expected ` (the tests' own, on purpose) off
/// stderr; every other panic is printed as usual. Installed once per test binary.
pub fn quiet_expected_panics() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let message = info
                .payload()
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| info.payload().downcast_ref::<String>().map(String::as_str))
                .unwrap_or("");
            if !message.starts_with("expected ") {
                default(info)
            }
        }));
    });
}

/// An orphan handler that keeps every report.
pub fn recording() -> (
    loopguard::orphan::OrphanHandler,
    Arc<Mutex<Vec<loopguard::orphan::Report>>>,
) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let handler = loopguard::orphan::OrphanHandler::new(move |report| {
        sink.lock().unwrap().push(report.clone())
    });
    (handler, seen)
}

/// Polls `inner`, and when it is ready, holds on to its output until `deadline` has
/// passed: the output lands in the very poll in which the deadline passes, the placement
/// in which a deadline that re-checks the clock would drop it.
pub struct LandsAtDeadline<F> {
    pub inner: F,
    pub deadline: loopguard::deadline::Deadline,
}

impl<F: Future + Unpin> Future for LandsAtDeadline<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let deadline = self.deadline;
        let output = std::task::ready!(Pin::new(&mut self.inner).poll(cx));
        while !deadline.is_expired() {
            std::hint::spin_loop();
        }
        Poll::Ready(output)
    }
}

/// Runs `test` on a thread of its own and fails if it does not finish within `limit`: a
/// deadlock or a hang fails the test instead of hanging CI. A panic in `test` is resumed.
pub fn watchdog(limit: Duration, test: impl FnOnce() + Send + 'static) {
    let (done, finished) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        test();
        let _ = done.send(());
    });
    match finished.recv_timeout(limit) {
        Ok(()) => thread.join().unwrap(),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            if let Err(panic) = thread.join() {
                std::panic::resume_unwind(panic);
            }
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("hung: not done within {limit:?}")
        }
    }
}
