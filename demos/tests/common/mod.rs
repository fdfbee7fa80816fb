//! Helpers for the demos' tests: a latch for blocking walks, and a watchdog.

use std::future::Future;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

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

/// Awaits `fut`, panicking if it takes longer than `limit`: a broken contract then fails
/// the test instead of hanging it.
pub async fn bounded<F: Future>(limit: Duration, fut: F) -> F::Output {
    let watchdog = async {
        async_io::Timer::after(limit).await;
        panic!("not done within {limit:?}");
    };
    futures_lite::future::or(fut, watchdog).await
}
