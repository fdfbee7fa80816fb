//! `Refresh` runs no user code under its state lock: the `Clone` of a cached value or
//! error, and the `Drop` of a clone or of the last copy of a replaced value, run after the
//! lock is released, and a panic in them is contained. A `Clone` that calls back into the
//! cache does not deadlock it; a `Drop` that panics does not stop `get` from collecting
//! again; a `Clone` that panics gives that caller an error and leaves the cache working.
//! Every test runs under a watchdog, so a regression fails instead of hanging.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::{Latch, poll_once, quiet_expected_panics, recording, watchdog};
use futures_lite::future::block_on;
use loopguard::deadline::Deadline;
use loopguard::pool::Pool;
use loopguard::refresh::{Refresh, RefreshError};
use loopguard::telemetry::contained_panics;

const LIMIT: Duration = Duration::from_secs(30);

fn pool() -> Pool {
    Pool::builder()
        .workers(1)
        .no_stuck_reports()
        .build()
        .unwrap()
}

/// A one-worker pool whose orphan handler keeps every report (a panicking collection
/// would be one).
fn recording_pool() -> (Pool, Arc<Mutex<Vec<loopguard::orphan::Report>>>) {
    let (handler, seen) = recording();
    let pool = Pool::builder()
        .workers(1)
        .no_stuck_reports()
        .on_orphan(handler)
        .build()
        .unwrap();
    (pool, seen)
}

/// Runs `test` with [`ARMED`] to itself (one such test at a time), under the watchdog.
fn with_fuses(test: impl FnOnce() + Send + 'static) {
    quiet_expected_panics();
    let _one = FUSES.lock().unwrap_or_else(|e| e.into_inner());
    watchdog(LIMIT, test);
}

// ---- a Clone that calls back into the cache ------------------------------------------

/// The cache a `Reentrant`'s `Clone` looks at.
type Looked = Arc<OnceLock<Refresh<Reentrant, Reentrant>>>;

/// A value (and error) whose `Clone` reads the cache's stats, as a value that logs or
/// counts its copies might.
#[derive(Debug)]
struct Reentrant {
    n: u64,
    cache: Looked,
}

impl Clone for Reentrant {
    fn clone(&self) -> Reentrant {
        if let Some(cache) = self.cache.get() {
            let _ = cache.stats();
            let _ = cache.last_started();
            let _ = format!("{cache:?}");
        }
        Reentrant {
            n: self.n,
            cache: self.cache.clone(),
        }
    }
}

fn reentrant(n: u64, cache: &Looked) -> Reentrant {
    Reentrant {
        n,
        cache: cache.clone(),
    }
}

#[test]
fn a_value_whose_clone_reads_the_cache_does_not_deadlock_it() {
    watchdog(LIMIT, || {
        let pool = pool();
        let looked: Looked = Arc::default();
        let l = looked.clone();
        let runs = Arc::new(AtomicUsize::new(0));
        let r = runs.clone();
        // Collections 1 and 2 succeed, 3 fails.
        let cache = Refresh::builder("reentrant")
            .ttl(Duration::from_secs(3600))
            .on_pool(&pool, move || {
                let n = r.fetch_add(1, Ordering::SeqCst) as u64 + 1;
                if n < 3 {
                    Ok(reentrant(n, &l))
                } else {
                    Err(reentrant(n, &l))
                }
            })
            .unwrap();
        assert!(looked.set(cache.clone()).is_ok());
        block_on(async {
            // The starter's copy, a hit, a forced collection, a peek, a failure, and the
            // last success served as stale.
            assert_eq!(cache.get(Deadline::never()).await.unwrap().n, 1);
            assert_eq!(cache.get(Deadline::never()).await.unwrap().n, 1);
            assert_eq!(cache.refresh(Deadline::never()).await.unwrap().n, 2);
            assert_eq!(cache.peek().unwrap().n, 2);
            match cache.refresh(Deadline::never()).await {
                Err(RefreshError::Failed(e)) => assert_eq!(e.n, 3),
                other => panic!("expected the failure, got {other:?}"),
            }
            let served = cache.get_or_stale(Deadline::never()).await.unwrap();
            assert!(served.is_stale());
            assert_eq!(served.value().n, 2);
        });
        let stats = cache.stats();
        assert_eq!((stats.runs_ok, stats.runs_error, stats.hits), (2, 1, 2));
    });
}

#[test]
fn a_joiner_whose_copy_reads_the_cache_does_not_deadlock_it() {
    watchdog(LIMIT, || {
        let pool = Pool::builder()
            .workers(2)
            .no_stuck_reports()
            .build()
            .unwrap();
        let looked: Looked = Arc::default();
        let l = looked.clone();
        let (started, release) = (Latch::new(), Latch::new());
        let (s, rel) = (started.clone(), release.clone());
        let cache = Refresh::builder("reentrant-join")
            .on_pool(&pool, move || {
                s.open();
                rel.wait();
                Ok(reentrant(7, &l))
            })
            .unwrap();
        assert!(looked.set(cache.clone()).is_ok());
        block_on(async {
            let mut starter = Box::pin(cache.get(Deadline::never()));
            assert!(poll_once(&mut starter).await.is_none());
            started.wait();
            let mut joiner = Box::pin(cache.get(Deadline::never()));
            assert!(poll_once(&mut joiner).await.is_none());
            release.open();
            assert_eq!(starter.await.unwrap().n, 7);
            assert_eq!(joiner.await.unwrap().n, 7);
        });
        assert_eq!(cache.stats().joins, 1);
    });
}

#[test]
fn an_error_whose_clone_reads_the_cache_does_not_deadlock_it() {
    watchdog(LIMIT, || {
        let pool = pool();
        let looked: Looked = Arc::default();
        let l = looked.clone();
        let cache = Refresh::builder("reentrant-error")
            .ttl(Duration::from_secs(3600))
            .on_pool(&pool, move || -> Result<Reentrant, Reentrant> {
                Err(reentrant(9, &l))
            })
            .unwrap();
        assert!(looked.set(cache.clone()).is_ok());
        block_on(async {
            // Served fresh, then from the failure cache.
            for _ in 0..2 {
                match cache.get(Deadline::never()).await {
                    Err(RefreshError::Failed(e)) => assert_eq!(e.n, 9),
                    other => panic!("expected the failure, got {other:?}"),
                }
            }
        });
        assert_eq!(cache.stats().runs_error, 1);
    });
}

/// A sink for `{:?}` that reads the cache's stats as it is written to, as a logger that
/// adds context might.
struct StatsWriter<'a>(&'a Refresh<u8, String>, String);

impl std::fmt::Write for StatsWriter<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let _ = self.0.stats();
        self.1.push_str(s);
        Ok(())
    }
}

#[test]
fn formatting_the_cache_into_a_sink_that_reads_it_does_not_deadlock() {
    watchdog(LIMIT, || {
        use std::fmt::Write as _;
        let pool = pool();
        let cache = Refresh::builder("debugged")
            .on_pool(&pool, || Ok::<u8, String>(1))
            .unwrap();
        let mut sink = StatsWriter(&cache, String::new());
        write!(sink, "{cache:?}").unwrap();
        assert!(sink.1.contains("in_flight: false"), "{}", sink.1);
    });
}

// ---- a Drop that panics ----------------------------------------------------------------

/// Whether the `Drop` of a `Fuse` panics. Set while loopguard holds the only copies; the
/// test disarms it before it drops its own.
static ARMED: AtomicBool = AtomicBool::new(false);

/// A value whose every `Drop` panics while [`ARMED`] is set.
#[derive(Debug, Clone, PartialEq)]
struct Fuse(u32);

impl Drop for Fuse {
    fn drop(&mut self) {
        // Not while unwinding already: a second panic would abort the whole test binary.
        if ARMED.load(Ordering::SeqCst) && !std::thread::panicking() {
            panic!("expected boom: a cached value's Drop")
        }
    }
}

/// Only one test of this binary arms [`ARMED`] at a time.
static FUSES: Mutex<()> = Mutex::new(());

fn fuse_cache(pool: &Pool, ttl: Duration) -> (Refresh<Fuse, String>, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let cache = Refresh::builder("fuses")
        .ttl(ttl)
        .on_pool(pool, move || {
            Ok(Fuse(r.fetch_add(1, Ordering::SeqCst) as u32 + 1))
        })
        .unwrap();
    (cache, runs)
}

/// Takes a value out of the test's hands without running its `Drop`.
fn keep(value: Fuse) -> u32 {
    let n = value.0;
    std::mem::forget(value);
    n
}

#[test]
fn a_panicking_drop_of_a_stale_value_does_not_stop_get_from_collecting_again() {
    with_fuses(|| {
        let (pool, seen) = recording_pool();
        // A TTL of zero: every value is stale at once, so every `get` collects again.
        let (cache, runs) = fuse_cache(&pool, Duration::ZERO);
        ARMED.store(true, Ordering::SeqCst);
        let got: Vec<u32> = block_on(async {
            let mut got = Vec::new();
            for _ in 0..3 {
                got.push(keep(cache.get(Deadline::never()).await.unwrap()));
            }
            got
        });
        // A real TTL, looked at past it: stale, not served, nothing dropped in the look.
        let (long, _) = fuse_cache(&pool, Duration::from_secs(60));
        let first = block_on(long.get(Deadline::never())).map(keep);
        let started = long.last_started().unwrap();
        let peeked = long.peek_at(started + Duration::from_secs(60));
        let fresh = long.peek_at(started).map(keep);
        block_on(pool.wait_idle());
        ARMED.store(false, Ordering::SeqCst);
        assert_eq!(got, vec![1, 2, 3]);
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        assert_eq!((first, peeked, fresh), (Ok(1), None, Some(1)));
        assert!(
            seen.lock().unwrap().is_empty(),
            "no collection panicked: {:?}",
            seen.lock().unwrap()
        );
        assert_eq!(cache.stats().runs_ok, 3);
    });
}

/// The last copy of a replaced value is dropped by whoever lets it go last: here a caller
/// that was still cloning it out when a new collection replaced it. Its panicking `Drop`
/// is contained there, and that caller still gets its copy.
#[test]
fn the_last_copy_of_a_replaced_value_is_dropped_contained() {
    with_fuses(|| {
        let pool = pool();
        let (entered, release) = (Latch::new(), Latch::new());
        let cache = slow_clone_cache(&pool, entered.clone(), release.clone());
        block_on(cache.get(Deadline::never()))
            .map(keep_slow)
            .unwrap();
        let reader = {
            let cache = cache.clone();
            std::thread::spawn(move || block_on(cache.get(Deadline::never())).map(keep_slow))
        };
        // The reader is inside the value's `Clone`, holding a reference to value 1.
        entered.wait();
        let before = contained_panics();
        ARMED.store(true, Ordering::SeqCst);
        let second = block_on(cache.refresh(Deadline::never())).map(keep_slow);
        block_on(pool.wait_idle());
        release.open();
        let read = reader.join().expect("the reader did not panic");
        ARMED.store(false, Ordering::SeqCst);
        assert_eq!(second, Ok(2));
        assert_eq!(read, Ok(1), "the reader still gets its copy");
        assert!(
            contained_panics() > before,
            "the Drop of value 1 was contained"
        );
        assert_eq!(block_on(cache.get(Deadline::never())).map(keep_slow), Ok(2));
    });
}

/// A value whose `Clone` of value 1 (once armed by `entered`) waits for `release`, and
/// whose `Drop` panics while [`ARMED`] is set.
struct SlowClone {
    n: u32,
    entered: Option<(Latch, Latch)>,
}

impl Clone for SlowClone {
    fn clone(&self) -> SlowClone {
        if let Some((entered, release)) = &self.entered {
            if self.n == 1 && !entered.is_open() {
                // The first clone (the starter's) passes; the second one waits.
                static FIRST: AtomicBool = AtomicBool::new(true);
                if !FIRST.swap(false, Ordering::SeqCst) {
                    entered.open();
                    release.wait();
                }
            }
        }
        SlowClone {
            n: self.n,
            entered: None,
        }
    }
}

impl Drop for SlowClone {
    fn drop(&mut self) {
        if ARMED.load(Ordering::SeqCst) && self.entered.is_some() && !std::thread::panicking() {
            panic!("expected boom: the last copy of a replaced value")
        }
    }
}

fn slow_clone_cache(pool: &Pool, entered: Latch, release: Latch) -> Refresh<SlowClone, String> {
    let runs = Arc::new(AtomicUsize::new(0));
    Refresh::builder("slow-clone")
        .ttl(Duration::from_secs(3600))
        .on_pool(pool, move || {
            let n = runs.fetch_add(1, Ordering::SeqCst) as u32 + 1;
            Ok(SlowClone {
                n,
                entered: Some((entered.clone(), release.clone())),
            })
        })
        .unwrap()
}

impl std::fmt::Debug for SlowClone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlowClone").field("n", &self.n).finish()
    }
}

fn keep_slow(value: SlowClone) -> u32 {
    value.n
}

/// Dropping the last handle while a collection is in flight leaves the cache's state to
/// the collection, on its worker thread: a panicking `Drop` of the value stored there is
/// contained, not reported as a panicking collection.
#[test]
fn a_cache_dropped_mid_collection_drops_its_value_contained_on_the_worker() {
    with_fuses(|| {
        let (pool, seen) = recording_pool();
        let release = Latch::new();
        let rel = release.clone();
        let cache = Refresh::builder("dropped-mid-flight")
            .on_pool(&pool, move || {
                rel.wait();
                Ok::<_, String>(Fuse(1))
            })
            .unwrap();
        block_on(async {
            let mut get = Box::pin(cache.get(Deadline::never()));
            assert!(poll_once(&mut get).await.is_none());
        });
        drop(cache);
        let before = contained_panics();
        ARMED.store(true, Ordering::SeqCst);
        release.open();
        block_on(pool.wait_idle());
        ARMED.store(false, Ordering::SeqCst);
        assert!(
            contained_panics() > before,
            "the value's Drop was contained"
        );
        assert!(
            seen.lock().unwrap().is_empty(),
            "not a collection panic: {:?}",
            seen.lock().unwrap()
        );
    });
}

// ---- a Clone that panics ---------------------------------------------------------------

/// A value whose `Clone` panics while [`CLONE_PANICS`] is set.
#[derive(Debug)]
struct Brittle(u32);

static CLONE_PANICS: AtomicBool = AtomicBool::new(false);

impl Clone for Brittle {
    fn clone(&self) -> Brittle {
        if CLONE_PANICS.load(Ordering::SeqCst) {
            panic!("expected boom: a cached value's Clone")
        }
        Brittle(self.0)
    }
}

#[test]
fn a_panicking_clone_gives_that_caller_an_error_and_leaves_the_cache_working() {
    quiet_expected_panics();
    watchdog(LIMIT, || {
        let pool = pool();
        let runs = Arc::new(AtomicUsize::new(0));
        let r = runs.clone();
        let cache = Refresh::builder("brittle")
            .ttl(Duration::from_secs(3600))
            .on_pool(&pool, move || {
                Ok::<_, String>(Brittle(r.fetch_add(1, Ordering::SeqCst) as u32 + 1))
            })
            .unwrap();
        CLONE_PANICS.store(true, Ordering::SeqCst);
        let before = contained_panics();
        let (started, hit, stale, peeked) = block_on(async {
            (
                cache.get(Deadline::never()).await,
                cache.get(Deadline::never()).await,
                cache
                    .get_or_stale(Deadline::never())
                    .await
                    .map(|s| s.into_value().0),
                cache.peek(),
            )
        });
        CLONE_PANICS.store(false, Ordering::SeqCst);
        for got in [started, hit] {
            match got {
                Err(RefreshError::Panicked(p)) => {
                    assert!(p.message().contains("Clone"), "{}", p.message());
                    assert!(p.message().contains("expected boom"), "{}", p.message());
                }
                other => panic!("expected a contained panic, got {other:?}"),
            }
        }
        assert!(matches!(stale, Err(RefreshError::Panicked(_))), "{stale:?}");
        assert!(peeked.is_none());
        assert!(contained_panics() >= before + 4);
        // One collection, cached: the next caller gets the value, nothing was lost.
        let later = block_on(cache.get(Deadline::never())).map(|b| b.0);
        assert_eq!(later, Ok(1));
        let stats = cache.stats();
        assert_eq!((stats.runs_ok, stats.in_flight), (1, false));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    });
}
