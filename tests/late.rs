//! One rule for late outputs: a failure that arrives after a deadline is returned or
//! reported, never dropped, whichever way the caller composed its waits
//! (`Deadline::run(job)`, `Deadline::run(pool.run(..))`, `Deadline::run(shielded)`, and a
//! `Refresh` whose collection panics just as its starter's deadline passes). A late
//! success is still refused.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{LandsAtDeadline, Latch, bounded, quiet_expected_panics, recording};
use futures_lite::future;
use loopguard::Fallible;
use loopguard::deadline::{Deadline, Expired};
use loopguard::orphan::Report;
use loopguard::pool::{Pool, RunError};
use loopguard::refresh::{Refresh, RefreshError};
use loopguard::shield::Shield;

const LIMIT: Duration = Duration::from_secs(30);

/// A deadline comfortably ahead of now, so the first poll starts inside it.
fn soon() -> Deadline {
    Deadline::after(Duration::from_millis(30))
}

on_every_executor! {
    async fn a_late_job_failure_is_returned_by_deadline_run() {
        quiet_expected_panics();
        let (handler, seen) = recording();
        let pool = Pool::builder().workers(1).on_orphan(handler).build().unwrap();

        // A panic, finished before the poll that takes it.
        let job = pool.try_run(|| -> u8 { panic!("expected boom") }).unwrap();
        pool.wait_idle().await;
        let deadline = soon();
        let out = bounded(LIMIT, deadline.run(LandsAtDeadline { inner: job, deadline })).await;
        match out {
            Ok(Err(panicked)) => assert_eq!(panicked.message(), "expected boom"),
            other => panic!("a late failure must be returned, got {other:?}"),
        }

        // An `Err` of fallible work: the same.
        let job = pool.try_run(Fallible(|| Err::<u8, _>("late err"))).unwrap();
        pool.wait_idle().await;
        let deadline = soon();
        let out = bounded(LIMIT, deadline.run(LandsAtDeadline { inner: job, deadline })).await;
        assert_eq!(out, Ok(Ok(Err("late err"))));

        // A late success is still refused (and nothing is reported for it).
        let job = pool.try_run(|| 7_u8).unwrap();
        pool.wait_idle().await;
        let deadline = soon();
        let out = bounded(LIMIT, deadline.run(LandsAtDeadline { inner: job, deadline })).await;
        assert_eq!(out, Err(Expired));

        pool.wait_idle().await;
        assert!(seen.lock().unwrap().is_empty(), "returned, so not reported: {:?}", seen.lock().unwrap());
    }
}

on_every_executor! {
    async fn a_late_run_failure_is_returned_by_deadline_run() {
        quiet_expected_panics();
        let (handler, seen) = recording();
        let pool = Pool::builder().workers(1).on_orphan(handler).build().unwrap();
        let release = Latch::new();
        let r = release.clone();
        let mut run = Box::pin(pool.run(move || -> u8 {
            r.wait();
            panic!("expected boom")
        }));
        // Admit it, let it fail, then take its outcome in the poll the deadline passes in.
        assert!(future::poll_once(run.as_mut()).await.is_none());
        release.open();
        pool.wait_idle().await;
        let deadline = soon();
        let out = bounded(LIMIT, deadline.run(LandsAtDeadline { inner: run, deadline })).await;
        assert!(matches!(out, Ok(Err(RunError::Panicked(_)))), "got {out:?}");
        assert!(seen.lock().unwrap().is_empty());
    }
}

on_every_executor! {
    async fn a_late_shielded_failure_is_returned_by_deadline_run() {
        quiet_expected_panics();
        let (handler, seen) = recording();
        let shield = Shield::with_handler("late", handler);
        let (runner, handle) = shield.wrap(Fallible(async { Err::<(), _>("late err") }));
        runner.await;
        let deadline = soon();
        let out = bounded(LIMIT, deadline.run(LandsAtDeadline { inner: handle, deadline })).await;
        assert_eq!(out, Ok(Ok(Err("late err"))));
        assert_eq!(shield.orphaned_failures(), 0);
        assert!(seen.lock().unwrap().is_empty());
    }
}

/// How many rounds the races below run, at most, and for how long.
const ROUNDS: usize = 2_000;
const RACE_TIME: Duration = Duration::from_secs(20);

/// One round of a `Refresh` whose collection panics at about the instant its starter's
/// deadline passes. Returns how many times the panic reached the orphan handler, `None`
/// when the round was void (its first poll came after the deadline).
fn refresh_round<F>(offset_us: i64, make: &F) -> Option<usize>
where
    F: Fn(
        Arc<Latch>,
    ) -> (
        Refresh<u8, String>,
        Arc<Mutex<Vec<Report>>>,
        Box<dyn Fn() -> bool>,
    ),
{
    let latch = Arc::new(Latch::new());
    let (cache, seen, idle) = make(latch.clone());
    let budget = Duration::from_millis(2);
    let deadline = Deadline::after(budget);
    let mut get = Box::pin(cache.get(deadline));
    let started = future::block_on(async {
        // Start the collection; it waits on the latch. On a loaded machine the first poll
        // may already come after the deadline: then nothing started, and the round is void.
        if future::poll_once(get.as_mut()).await.is_some() {
            return false;
        }
        // Open the latch around the deadline, earlier or later by `offset_us`.
        let at = deadline.instant().unwrap();
        let open_at = if offset_us < 0 {
            at - Duration::from_micros(offset_us.unsigned_abs())
        } else {
            at + Duration::from_micros(offset_us as u64)
        };
        while Instant::now() < open_at {
            std::hint::spin_loop();
        }
        latch.open();
        match bounded(LIMIT, get).await {
            Err(RefreshError::Panicked(_) | RefreshError::Expired) => {}
            other => panic!("unexpected outcome {other:?}"),
        }
        true
    });
    if !started {
        latch.open();
        return None;
    }
    // Whatever the caller saw, the panic reaches the handler once.
    let started = Instant::now();
    while !idle() {
        assert!(started.elapsed() < LIMIT, "the collection never finished");
        std::thread::yield_now();
    }
    let reports = seen.lock().unwrap().len();
    Some(reports)
}

fn race<F>(make: F)
where
    F: Fn(
        Arc<Latch>,
    ) -> (
        Refresh<u8, String>,
        Arc<Mutex<Vec<Report>>>,
        Box<dyn Fn() -> bool>,
    ),
{
    quiet_expected_panics();
    let started = Instant::now();
    let mut lost = 0;
    let mut twice = 0;
    let mut rounds = 0;
    while rounds < ROUNDS && started.elapsed() < RACE_TIME {
        // Sweep the latch from 120 µs before the deadline to 20 µs after it.
        let offset = (rounds % 141) as i64 - 120;
        match refresh_round(offset, &make) {
            None => continue,
            Some(0) => lost += 1,
            Some(1) => {}
            Some(_) => twice += 1,
        }
        rounds += 1;
    }
    assert!(rounds >= 200, "only {rounds} rounds ran");
    assert_eq!(
        (lost, twice),
        (0, 0),
        "of {rounds} rounds: lost, reported twice"
    );
}

/// Blocks until the latch opens, then panics: the collection.
fn collection(latch: &Latch) -> Result<u8, String> {
    latch.wait();
    panic!("expected boom")
}

#[test]
fn a_refresh_collection_panic_at_the_starters_deadline_is_reported_once_pool() {
    race(|latch| {
        let (handler, seen) = recording();
        let pool = Pool::builder()
            .workers(1)
            .on_orphan(handler)
            .no_stuck_reports()
            .build()
            .unwrap();
        let cache = Refresh::builder("race")
            .ttl(Duration::ZERO)
            .failure_ttl(Duration::ZERO)
            .on_pool(&pool, move || collection(&latch));
        let idle = Box::new(move || pool.in_use() == 0);
        (cache, seen, idle)
    });
}

#[test]
fn a_refresh_collection_panic_at_the_starters_deadline_is_reported_once_spawned() {
    race(|latch| {
        let (handler, seen) = recording();
        let shield = Shield::with_handler("race", handler);
        let ex = Arc::new(async_executor::Executor::new());
        let driver = ex.clone();
        let finished = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let done = finished.clone();
        let cache = Refresh::builder("race").ttl(Duration::ZERO).spawned(
            &shield,
            move |runner| {
                // Each collection runs on a thread of its own: the latch blocks it.
                let ex = driver.clone();
                let done = done.clone();
                let task = ex.spawn(runner);
                std::thread::spawn(move || {
                    future::block_on(ex.run(task));
                    done.store(true, std::sync::atomic::Ordering::SeqCst);
                });
            },
            move || {
                let latch = latch.clone();
                async move { collection(&latch) }
            },
        );
        let idle = Box::new(move || finished.load(std::sync::atomic::Ordering::SeqCst));
        (cache, seen, idle)
    });
}
