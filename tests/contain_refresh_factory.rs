//! Review: an async `Refresh` calls the user's `collect()` (the closure that makes a
//! collection's future) on the caller's task. A panic there is a panicking collection like
//! any other: it must be cached as `RefreshError::Panicked` for the failure TTL and reported
//! once to the shield's handler, not unwind out of `get` into the loop.

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use loopguard::deadline::Deadline;
use loopguard::refresh::{Refresh, RefreshError};
use loopguard::shield::Shield;

#[test]
fn a_panicking_collect_is_a_cached_reported_failure() {
    common::quiet_expected_panics();
    let (handler, reports) = common::recording();
    let shield = Shield::with_handler("factory-refresh", handler).unwrap();
    let ex = Arc::new(async_executor::Executor::new());
    let spawner = ex.clone();
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let cache: Refresh<u8, String> = Refresh::builder("factory")
        .ttl(Duration::from_secs(60))
        .spawned(
            &shield,
            move |runner| spawner.spawn(runner).detach(),
            move || -> std::future::Ready<Result<u8, String>> {
                counted.fetch_add(1, Ordering::SeqCst);
                panic!("expected: the query cannot be built")
            },
        )
        .unwrap();
    let first = catch_unwind(AssertUnwindSafe(|| {
        futures_lite::future::block_on(ex.run(cache.get(Deadline::after(Duration::from_secs(30)))))
    }));
    let first = first.unwrap_or_else(|_| panic!("the factory's panic unwound out of `get`"));
    match first {
        Err(RefreshError::Panicked(p)) => {
            assert!(p.message().contains("the query cannot be built"), "{p:?}")
        }
        other => panic!("want Panicked, got {other:?}"),
    }
    // Cached for the failure TTL: no second call of the factory.
    let second =
        futures_lite::future::block_on(ex.run(cache.get(Deadline::after(Duration::from_secs(30)))));
    assert!(
        matches!(second, Err(RefreshError::Panicked(_))),
        "{second:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    futures_lite::future::block_on(ex.run(shield.wait_idle()));
    let reports = reports.lock().unwrap();
    assert_eq!(reports.len(), 1, "reported exactly once: {reports:?}");
    assert!(!cache.stats().in_flight);
}
