//! Helpers for the demos' tests: a latch to hold walks, watchdogs, and room for many sockets.

use std::future::Future;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long a test waits for anything before it fails: generous, the machine may be busy.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// A one-shot latch: threads block in `wait` until someone calls `open`.
#[derive(Debug, Clone, Default)]
pub struct Latch {
    inner: Arc<(Mutex<bool>, Condvar)>,
}

impl Latch {
    /// A closed latch.
    pub fn new() -> Latch {
        Latch::default()
    }

    /// Opens the latch for good, releasing every waiter.
    pub fn open(&self) {
        *self.inner.0.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.inner.1.notify_all();
    }

    /// Blocks until the latch opens. Panics after a minute so a broken test fails instead
    /// of hanging CI.
    pub fn wait(&self) {
        let guard = self.inner.0.lock().unwrap_or_else(|p| p.into_inner());
        let (guard, timeout) = self
            .inner
            .1
            .wait_timeout_while(guard, Duration::from_secs(60), |open| !*open)
            .unwrap_or_else(|p| p.into_inner());
        assert!(!timeout.timed_out() || *guard, "latch never opened");
    }
}

/// Runs `fut` on smol, panicking if it takes longer than [`PATIENCE`].
pub fn run<T>(fut: impl Future<Output = T>) -> T {
    smol::block_on(bounded(PATIENCE, fut))
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

/// Waits until `cond` holds (checked every few milliseconds), panicking after [`PATIENCE`].
pub async fn until(what: &str, cond: impl Fn() -> bool) {
    let began = Instant::now();
    while !cond() {
        assert!(began.elapsed() < PATIENCE, "never saw: {what}");
        async_io::Timer::after(Duration::from_millis(2)).await;
    }
}

/// Raises this process's open-file limit to at least `wanted` if the hard limit allows, and
/// returns the limit now in force (a flood test sizes itself by it).
pub fn raise_fd_limit(wanted: u64) -> u64 {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let current = limit.current.unwrap_or(u64::MAX);
    if current >= wanted {
        return current;
    }
    let target = limit.maximum.map_or(wanted, |max| max.min(wanted));
    let raised = rustix::process::Rlimit {
        current: Some(target),
        maximum: limit.maximum,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => target,
        Err(_) => current,
    }
}
