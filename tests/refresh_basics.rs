//! The single-flight TTL cache: one collection shared by concurrent callers, results cached
//! after every caller left, failures cached for their TTL, deadlines told from failures.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Counter, Latch, MapRecorder, bounded, poll_once};
use loopguard::deadline::{Deadline, Phase, Spent};
use loopguard::orphan::{OrphanHandler, Report, ReportKind};
use loopguard::pool::Pool;
use loopguard::refresh::{Refresh, RefreshError};

const LIMIT: Duration = Duration::from_secs(30);
const LONG: Duration = Duration::from_secs(60);

type Get<'a> = Pin<Box<dyn Future<Output = Result<u64, RefreshError<String>>> + 'a>>;

fn pool(workers: usize) -> (Pool, Arc<Mutex<Vec<Report>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let pool = Pool::builder()
        .name("collect")
        .workers(workers)
        .no_stuck_reports()
        .on_orphan(OrphanHandler::new(move |r| {
            sink.lock().unwrap().push(r.clone())
        }))
        .build()
        .unwrap();
    (pool, seen)
}

/// A collection that counts its runs, signals its start and blocks until `release` opens.
struct Gated {
    runs: Arc<AtomicUsize>,
    started: Counter,
    release: Latch,
}

impl Gated {
    fn new() -> Gated {
        Gated {
            runs: Arc::new(AtomicUsize::new(0)),
            started: Counter::new(),
            release: Latch::new(),
        }
    }

    fn cache(&self, pool: &Pool, ttl: Duration) -> Refresh<u64, String> {
        let (runs, started, release) = (
            self.runs.clone(),
            self.started.clone(),
            self.release.clone(),
        );
        Refresh::builder("gated")
            .ttl(ttl)
            .on_pool(pool, move || {
                let n = runs.fetch_add(1, Ordering::SeqCst) as u64 + 1;
                started.add();
                release.wait();
                Ok(n * 100)
            })
            .unwrap()
    }
}

fn soon() -> Deadline {
    Deadline::after(Duration::from_millis(30))
}

on_every_executor! {
    async fn overlapping_callers_share_one_collection() {
        let (pool, _) = pool(2);
        let gated = Gated::new();
        let cache = gated.cache(&pool, LONG);
        let mut first: Get<'_> = Box::pin(cache.get(Deadline::after(LIMIT)));
        assert!(poll_once(&mut first).await.is_none());
        gated.started.wait_for(1);
        let mut second: Get<'_> = Box::pin(cache.get(Deadline::after(LIMIT)));
        assert!(poll_once(&mut second).await.is_none());
        assert_eq!(cache.stats().joins, 1);
        gated.release.open();
        assert_eq!(bounded(LIMIT, first).await, Ok(100));
        assert_eq!(bounded(LIMIT, second).await, Ok(100));
        assert_eq!(gated.runs.load(Ordering::SeqCst), 1);
        assert_eq!(cache.get(Deadline::after(LIMIT)).await, Ok(100));
        let stats = cache.stats();
        assert_eq!((stats.runs_ok, stats.hits, stats.joins), (1, 1, 1));
    }
}

on_every_executor! {
    async fn sixty_four_callers_on_an_empty_cache_cause_one_collection() {
        let (pool, _) = pool(4);
        let gated = Gated::new();
        let cache = gated.cache(&pool, LONG);
        let mut calls: Vec<Get<'_>> = (0..64)
            .map(|_| Box::pin(cache.get(Deadline::after(LIMIT))) as Get<'_>)
            .collect();
        for call in &mut calls {
            assert!(poll_once(call).await.is_none());
        }
        gated.started.wait_for(1);
        gated.release.open();
        for call in calls {
            assert_eq!(bounded(LIMIT, call).await, Ok(100));
        }
        assert_eq!(gated.runs.load(Ordering::SeqCst), 1);
        assert_eq!(cache.stats().joins, 63);
        assert_eq!(pool.stats().jobs_ok, 1);
    }
}

#[test]
fn sixty_four_threads_on_an_empty_cache_cause_one_collection() {
    let (pool, _) = pool(4);
    let gated = Gated::new();
    let cache = gated.cache(&pool, LONG);
    let entered = Counter::new();
    let threads: Vec<_> = (0..64)
        .map(|_| {
            let (cache, entered) = (cache.clone(), entered.clone());
            std::thread::spawn(move || {
                entered.add();
                futures_lite::future::block_on(cache.get(Deadline::after(LIMIT)))
            })
        })
        .collect();
    entered.wait_for(64);
    gated.started.wait_for(1);
    // Every caller is inside `get` before the collection may finish: wait until the other
    // 63 joined it (a caller arriving after completion would be a hit, also fine, but this
    // makes the test exercise the joins).
    let waited = Instant::now();
    while cache.stats().joins < 63 && waited.elapsed() < LIMIT {
        std::thread::yield_now();
    }
    gated.release.open();
    for thread in threads {
        assert_eq!(thread.join().unwrap(), Ok(100));
    }
    assert_eq!(gated.runs.load(Ordering::SeqCst), 1);
    assert_eq!(cache.stats().joins, 63);
}

on_every_executor! {
    async fn expired_waits_leave_the_collection_running_and_cached() {
        let (pool, _) = pool(1);
        let gated = Gated::new();
        let cache = gated.cache(&pool, LONG);
        // The starter's budget ends while the collection runs.
        assert_eq!(bounded(LIMIT, cache.get(soon())).await, Err(RefreshError::Expired(Spent::new(Phase::Running))));
        gated.started.wait_for(1);
        // A joiner's too.
        assert_eq!(bounded(LIMIT, cache.get(soon())).await, Err(RefreshError::Expired(Spent::new(Phase::Running))));
        assert!(cache.stats().in_flight);
        gated.release.open();
        pool.wait_idle().await;
        assert_eq!(cache.get(Deadline::after(LIMIT)).await, Ok(100));
        let stats = cache.stats();
        assert_eq!((stats.runs_ok, stats.hits, stats.expired_waits), (1, 1, 2));
        assert_eq!(stats.joins, 1);
        // An expired deadline on entry serves nothing and starts nothing.
        let past = Deadline::at(Instant::now());
        assert_eq!(cache.refresh(past).await, Err(RefreshError::Expired(Spent::new(Phase::InLine))));
        assert_eq!(gated.runs.load(Ordering::SeqCst), 1);
    }
}

on_every_executor! {
    async fn a_caller_that_leaves_does_not_cancel_the_collection() {
        let (pool, _) = pool(1);
        let gated = Gated::new();
        let cache = gated.cache(&pool, LONG);
        let mut call: Get<'_> = Box::pin(cache.get(Deadline::after(LIMIT)));
        assert!(poll_once(&mut call).await.is_none());
        gated.started.wait_for(1);
        drop(call);
        gated.release.open();
        pool.wait_idle().await;
        assert_eq!(cache.peek_at(Instant::now()), Some(100));
        assert_eq!(cache.get(Deadline::after(LIMIT)).await, Ok(100));
        assert_eq!(gated.runs.load(Ordering::SeqCst), 1);
    }
}

on_every_executor! {
    async fn a_starter_that_gives_up_before_a_slot_hands_over_to_a_joiner() {
        let (pool, _) = pool(1);
        let blocker = Latch::new();
        let b = blocker.clone();
        let busy = pool.try_run(move || b.wait()).unwrap();
        let gated = Gated::new();
        gated.release.open();
        let cache = gated.cache(&pool, LONG);
        let mut joiner: Get<'_> = Box::pin(cache.get(Deadline::after(LIMIT)));
        let starter = cache.get(soon());
        let mut starter: Get<'_> = Box::pin(starter);
        assert!(poll_once(&mut starter).await.is_none(), "waits for the slot");
        assert!(poll_once(&mut joiner).await.is_none(), "joins");
        // It waited for a pool slot: in line, the collection never started.
        assert_eq!(bounded(LIMIT, starter).await, Err(RefreshError::Expired(Spent::new(Phase::InLine))));
        assert_eq!(gated.runs.load(Ordering::SeqCst), 0, "nothing started");
        blocker.open();
        assert_eq!(bounded(LIMIT, joiner).await, Ok(100));
        busy.await.unwrap();
        assert_eq!(gated.runs.load(Ordering::SeqCst), 1);
    }
}

on_every_executor! {
    async fn failures_are_cached_for_their_ttl_then_retried() {
        let (pool, seen) = pool(1);
        let runs = Arc::new(AtomicUsize::new(0));
        let r = runs.clone();
        let failure_ttl = Duration::from_millis(80);
        let cache = Refresh::builder("flaky")
            .ttl(LONG)
            .failure_ttl(failure_ttl)
            .on_pool(&pool, move || match r.fetch_add(1, Ordering::SeqCst) {
                0 => Err("connection refused".to_string()),
                n => Ok(n as u64),
            }).unwrap();
        let deadline = Deadline::after(LIMIT);
        let failed = Err(RefreshError::Failed("connection refused".to_string()));
        assert_eq!(cache.get(deadline).await, failed);
        assert_eq!(cache.get(deadline).await, failed, "served from the cache");
        assert_eq!(cache.get(deadline).await, failed);
        assert_eq!(runs.load(Ordering::SeqCst), 1, "no re-run within the failure TTL");
        assert!(cache.get_or_stale(deadline).await.is_err(), "no success to fall back on");
        // After the failure TTL (age counted from the failed collection's start):
        async_io::Timer::at(cache.last_started().unwrap() + failure_ttl).await;
        assert_eq!(cache.get(deadline).await, Ok(1));
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        let stats = cache.stats();
        assert_eq!((stats.runs_ok, stats.runs_error, stats.hits), (1, 1, 3));
        assert!(seen.lock().unwrap().is_empty(), "an Err is served, not reported");
    }
}

on_every_executor! {
    async fn ttl_boundary_age_equal_to_ttl_is_stale() {
        let (pool, _) = pool(1);
        let runs = Arc::new(AtomicUsize::new(0));
        let r = runs.clone();
        let ttl = Duration::from_millis(60);
        let cache = Refresh::builder("edge")
            .ttl(ttl)
            .on_pool(&pool, move || Ok::<_, String>(r.fetch_add(1, Ordering::SeqCst) as u64)).unwrap();
        assert_eq!(cache.get(Deadline::after(LIMIT)).await, Ok(0));
        let started = cache.last_started().unwrap();
        assert_eq!(cache.peek_at(started + ttl - Duration::from_nanos(1)), Some(0));
        assert_eq!(cache.peek_at(started + ttl), None);
        async_io::Timer::at(started + ttl).await;
        assert_eq!(cache.get(Deadline::after(LIMIT)).await, Ok(1), "stale: collected again");
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }
}

on_every_executor! {
    async fn stale_only_when_asked_and_with_its_age() {
        let (pool, _) = pool(1);
        let runs = Arc::new(AtomicUsize::new(0));
        let r = runs.clone();
        let ttl = Duration::from_millis(40);
        let cache = Refresh::builder("stale").ttl(ttl).on_pool(&pool, move || {
            match r.fetch_add(1, Ordering::SeqCst) {
                0 => Ok(7),
                _ => Err("db down".to_string()),
            }
        }).unwrap();
        let deadline = Deadline::after(LIMIT);
        assert_eq!(cache.get(deadline).await, Ok(7));
        async_io::Timer::at(cache.last_started().unwrap() + ttl).await;
        assert_eq!(cache.get(deadline).await, Err(RefreshError::Failed("db down".into())));
        let served = cache.get_or_stale(deadline).await.unwrap();
        assert!(served.is_stale());
        assert_eq!(*served.value(), 7);
        assert!(served.age() >= ttl);
        assert_eq!(served.stale_because(), Some(&RefreshError::Failed("db down".into())));
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }
}

on_every_executor! {
    async fn forced_refresh_bypasses_the_cached_value() {
        let (pool, _) = pool(1);
        let runs = Arc::new(AtomicUsize::new(0));
        let r = runs.clone();
        let cache = Refresh::builder("warm")
            .ttl(LONG)
            .on_pool(&pool, move || Ok::<_, String>(r.fetch_add(1, Ordering::SeqCst) as u64)).unwrap();
        let deadline = Deadline::after(LIMIT);
        assert_eq!(cache.get(deadline).await, Ok(0));
        assert_eq!(cache.refresh(deadline).await, Ok(1));
        assert_eq!(cache.get(deadline).await, Ok(1), "the forced value is cached");
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }
}

on_every_executor! {
    async fn a_panicking_collection_is_reported_once_and_cached_as_a_failure() {
        let (pool, seen) = pool(1);
        let runs = Arc::new(AtomicUsize::new(0));
        let r = runs.clone();
        let cache = Refresh::builder("boom").ttl(LONG).on_pool(&pool, move || -> Result<u64, String> {
            r.fetch_add(1, Ordering::SeqCst);
            panic!("collector exploded")
        }).unwrap();
        let deadline = Deadline::after(LIMIT);
        // Awaited by its starter.
        match cache.get(deadline).await {
            Err(RefreshError::Panicked(p)) => assert_eq!(p.message(), "collector exploded"),
            other => panic!("expected a panic, got {other:?}"),
        }
        assert!(matches!(cache.get(deadline).await, Err(RefreshError::Panicked(_))));
        assert_eq!(runs.load(Ordering::SeqCst), 1, "cached as a failure");
        pool.wait_idle().await;
        // Left by its starter: a forced refresh whose caller drops out mid-collection.
        let mut call = Box::pin(cache.refresh(deadline));
        let _ = poll_once(&mut call).await;
        drop(call);
        pool.wait_idle().await;
        assert_eq!(runs.load(Ordering::SeqCst), 2);

        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 2, "once per panicking collection: {seen:?}");
        assert!(seen.iter().all(|r| r.kind() == ReportKind::Panicked));
        assert_eq!(seen[0].message(), "collector exploded");
        assert_eq!(pool.stats().jobs_panicked, 2);
        assert_eq!(cache.stats().runs_error, 2);
    }
}

on_every_executor! {
    async fn a_closed_pool_is_not_a_collection_failure() {
        let (pool, _) = pool(1);
        let cache = Refresh::builder("closed").on_pool(&pool, || Ok::<u64, String>(1)).unwrap();
        pool.close();
        let err = cache.get(Deadline::after(LIMIT)).await.unwrap_err();
        assert_eq!(err, RefreshError::Closed);
        assert!(!err.is_failure());
        assert!(!cache.stats().in_flight);
    }
}

#[test]
fn metrics_are_registered_with_zeros_and_counted() {
    let recorder = MapRecorder::default();
    let (pool, _) = pool(1);
    let cache = metrics::with_local_recorder(&recorder, || {
        Refresh::builder("exp")
            .on_pool(&pool, || Ok::<u64, String>(1))
            .unwrap()
    });
    let get = |id: &str| recorder.get(id);
    for id in [
        "loopguard_refresh_runs_total{cache=exp,outcome=ok}",
        "loopguard_refresh_runs_total{cache=exp,outcome=error}",
        "loopguard_refresh_hits_total{cache=exp}",
        "loopguard_refresh_joins_total{cache=exp}",
        "loopguard_refresh_expired_waits_total{cache=exp}",
    ] {
        assert_eq!(get(id), Some(0), "{id}");
    }
    futures_lite::future::block_on(async {
        cache.get(Deadline::after(LIMIT)).await.unwrap();
        cache.get(Deadline::after(LIMIT)).await.unwrap();
        let _ = cache.get(Deadline::at(Instant::now())).await;
    });
    assert_eq!(
        get("loopguard_refresh_runs_total{cache=exp,outcome=ok}"),
        Some(1)
    );
    assert_eq!(get("loopguard_refresh_hits_total{cache=exp}"), Some(1));
    assert_eq!(
        get("loopguard_refresh_expired_waits_total{cache=exp}"),
        Some(1)
    );
}

#[test]
fn auto_traits_and_debug() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>(_: &T) {}
    send_sync::<Refresh<u64, String>>();
    send_sync::<RefreshError<String>>();
    let (pool, _) = pool(1);
    let cache = Refresh::builder("dbg")
        .on_pool(&pool, || Ok::<u64, String>(1))
        .unwrap();
    send(&cache.get(Deadline::never()));
    send(&cache.get_or_stale(Deadline::never()));
    assert!(format!("{cache:?}").contains("dbg"));
}

/// An async collection gated by a channel, counting its runs.
fn async_cache(
    shield: &loopguard::shield::Shield,
    spawn: impl Fn(loopguard::refresh::CollectionRunner) + Send + Sync + 'static,
    gate: smol::channel::Receiver<Result<u64, String>>,
    runs: Arc<AtomicUsize>,
) -> Refresh<u64, String> {
    Refresh::builder("async")
        .ttl(LONG)
        .spawned(shield, spawn, move || {
            let (gate, runs) = (gate.clone(), runs.clone());
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                match gate.recv().await.expect("a gate value") {
                    Err(e) if e == "panic" => panic!("async collector exploded"),
                    other => other,
                }
            }
        })
        .unwrap()
}

#[test]
fn async_collection_on_smol_outlives_its_caller_and_panics_are_reported() {
    let (handler, mut reports) = OrphanHandler::channel(8);
    let shield = loopguard::shield::Shield::with_handler("async-refresh", handler).unwrap();
    let (tx, rx) = smol::channel::unbounded();
    let runs = Arc::new(AtomicUsize::new(0));
    let cache = async_cache(&shield, |r| smol::spawn(r).detach(), rx, runs.clone());
    smol::block_on(async {
        // The caller leaves; the spawned collection goes on and is cached.
        assert_eq!(
            cache.get(soon()).await,
            Err(RefreshError::Expired(Spent::new(Phase::Running)))
        );
        tx.send(Ok(5)).await.unwrap();
        // Joins the collection if it is still finishing, else a hit.
        assert_eq!(cache.get(Deadline::after(LIMIT)).await, Ok(5));
        assert_eq!(runs.load(Ordering::SeqCst), 1);

        // A panic, awaited by its starter: returned, cached, reported once.
        tx.send(Err("panic".into())).await.unwrap();
        assert!(matches!(
            cache.refresh(Deadline::after(LIMIT)).await,
            Err(RefreshError::Panicked(_))
        ));
        assert!(matches!(
            cache.get(Deadline::after(LIMIT)).await,
            Err(RefreshError::Panicked(_))
        ));
        let report = bounded(LIMIT, reports.recv()).await.unwrap();
        assert_eq!(report.kind(), ReportKind::Panicked);
        assert_eq!(report.origin(), "async-refresh");
        assert_eq!(report.message(), "async collector exploded");
        assert!(reports.try_recv().is_none());
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    });
}

#[test]
fn async_collection_on_tokio() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (tx, rx) = smol::channel::unbounded();
    let runs = Arc::new(AtomicUsize::new(0));
    let shield = loopguard::shield::Shield::new("tokio-refresh").unwrap();
    let cache = async_cache(
        &shield,
        |r| {
            tokio::spawn(r);
        },
        rx,
        runs.clone(),
    );
    rt.block_on(async {
        tx.send(Ok(9)).await.unwrap();
        assert_eq!(cache.get(Deadline::after(LIMIT)).await, Ok(9));
        assert_eq!(cache.get(Deadline::after(LIMIT)).await, Ok(9));
    });
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

on_every_executor! {
    async fn a_dropped_runner_gives_closed_and_a_later_call_retries() {
        let shield = loopguard::shield::Shield::new("dropping").unwrap();
        let (tx, rx) = smol::channel::unbounded();
        let runs = Arc::new(AtomicUsize::new(0));
        let keep = Arc::new(AtomicUsize::new(0));
        let k = keep.clone();
        // The "executor" drops the first runner unpolled, runs later ones inline.
        let spawn = move |runner: loopguard::refresh::CollectionRunner| {
            if k.fetch_add(1, Ordering::SeqCst) > 0 {
                std::thread::spawn(move || futures_lite::future::block_on(runner));
            }
        };
        let cache = async_cache(&shield, spawn, rx, runs.clone());
        assert_eq!(cache.get(Deadline::after(LIMIT)).await, Err(RefreshError::Closed));
        assert!(!cache.stats().in_flight);
        tx.send(Ok(3)).await.unwrap();
        assert_eq!(bounded(LIMIT, cache.get(Deadline::after(LIMIT))).await, Ok(3));
        assert_eq!(runs.load(Ordering::SeqCst), 1, "the dropped one never ran");
    }
}

/// A cached value whose `Drop` panics.
struct Bomb {
    n: u32,
    armed: bool,
}

impl Clone for Bomb {
    /// Callers get harmless copies; only the instance the cache keeps is armed.
    fn clone(&self) -> Bomb {
        Bomb {
            n: self.n,
            armed: false,
        }
    }
}

impl Drop for Bomb {
    fn drop(&mut self) {
        if self.armed {
            panic!("expected boom: a cached value's Drop");
        }
    }
}

/// A new collection replaces a cached value whose `Drop` panics: the joiners of the new
/// collection are still woken (with `Deadline::never()` they would otherwise wait for
/// ever), the run is counted as ok, and nothing is reported as panicked.
#[test]
fn a_replaced_cached_value_whose_drop_panics_loses_nothing() {
    common::quiet_expected_panics();
    let (handler, seen) = common::recording();
    let pool = Pool::builder()
        .workers(1)
        .on_orphan(handler)
        .build()
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let second = Latch::new();
    let (r, gate) = (runs.clone(), second.clone());
    let cache: Refresh<Bomb, String> = Refresh::builder("bombs")
        .ttl(Duration::ZERO)
        .on_pool(&pool, move || {
            let n = r.fetch_add(1, Ordering::SeqCst) as u32 + 1;
            if n == 2 {
                gate.wait();
            }
            Ok(Bomb { n, armed: n == 1 })
        })
        .unwrap();
    futures_lite::future::block_on(bounded(Duration::from_secs(30), async {
        assert_eq!(cache.get(Deadline::never()).await.unwrap().n, 1);
        pool.wait_idle().await;
        // The second collection waits for the latch; a joiner waits for it with no deadline.
        let mut starter = Box::pin(cache.get(Deadline::never()));
        assert!(poll_once(&mut starter).await.is_none());
        let mut joiner = Box::pin(cache.get(Deadline::never()));
        assert!(poll_once(&mut joiner).await.is_none());
        second.open();
        assert_eq!(starter.await.unwrap().n, 2);
        assert_eq!(joiner.await.unwrap().n, 2);
        pool.wait_idle().await;
    }));
    let stats = cache.stats();
    assert_eq!((stats.runs_ok, stats.runs_error), (2, 0));
    assert!(
        seen.lock().unwrap().is_empty(),
        "{:?}",
        seen.lock().unwrap()
    );
    drop(cache);
}
