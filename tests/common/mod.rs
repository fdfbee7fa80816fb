//! Shared test helpers: one macro to run a behaviour on every executor, and latches.
#![allow(dead_code, unused_macros)]

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Defines a module `$name` with one test per executor: `smol`, `async_std`,
/// `local_executor`, `block_on` and `tokio_current_thread`, each running the same body.
#[macro_export]
macro_rules! on_every_executor {
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
