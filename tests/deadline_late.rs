//! One rule for late outputs, owned where the hand-off is owned.
//!
//! - `Deadline::run` is a timeout: an output produced in a poll that started before the
//!   deadline is returned (a failure or a success), so nothing a hand-off gave it is
//!   dropped on the way out.
//! - The futures that own a hand-off (`Pool::run_within`, `Pool::try_run_within`, a
//!   `Refresh`) refuse a success that lands after their deadline, and report a refused
//!   failure to the orphan handler exactly once.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{LandsAtDeadline, Latch, bounded, quiet_expected_panics, recording};
use futures_lite::future;
use loopguard::Fallible;
use loopguard::deadline::{Deadline, Expired, Phase, Spent};
use loopguard::orphan::Report;
use loopguard::pool::{Pool, RunError, WithinError};
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

        // A success produced in that poll is returned too: `Deadline::run` is a timeout,
        // and nothing decides its output but its one rule.
        let job = pool.try_run(|| 7_u8).unwrap();
        pool.wait_idle().await;
        let deadline = soon();
        let out = bounded(LIMIT, deadline.run(LandsAtDeadline { inner: job, deadline })).await;
        assert_eq!(out, Ok(Ok(7)));

        // A poll that starts after the deadline does not take the outcome: the job is
        // orphaned by the drop, and its failure is reported instead, once.
        let job = pool.try_run(|| -> u8 { panic!("expected boom, orphaned") }).unwrap();
        pool.wait_idle().await;
        let out = Deadline::at(Instant::now()).run(job).await;
        assert_eq!(out, Err(Expired));
        pool.wait_idle().await;
        let reports: Vec<String> = seen.lock().unwrap().drain(..).map(|r| r.message().to_string()).collect();
        assert_eq!(reports, ["expected boom, orphaned"]);

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
        let shield = Shield::with_handler("late", handler).unwrap();
        let (runner, handle) = shield.wrap(Fallible(async { Err::<(), _>("late err") }));
        runner.await;
        let deadline = soon();
        let out = bounded(LIMIT, deadline.run(LandsAtDeadline { inner: handle, deadline })).await;
        assert_eq!(out, Ok(Ok(Err("late err"))));
        assert_eq!(shield.orphaned_failures(), 0);
        assert!(seen.lock().unwrap().is_empty());
    }
}

// The worker delivers just after the deadline: `try_run_within` owns the hand-off, so it
// refuses a success that lands late and reports a refused failure, once.
on_every_executor! {
    async fn try_run_within_refuses_a_late_success_and_reports_a_late_failure() {
        quiet_expected_panics();
        let (handler, seen) = recording();
        let pool = Pool::builder().workers(1).on_orphan(handler).build().unwrap();

        // The job finishes after the deadline: the success is refused.
        let release = Arc::new(Latch::new());
        let r = release.clone();
        let deadline = Deadline::after(Duration::from_millis(300));
        let walk = pool.try_run_within(deadline, move || {
            r.wait();
            7_u8
        });
        let mut walk = Box::pin(walk);
        assert!(future::poll_once(walk.as_mut()).await.is_none(), "admitted and running");
        while !deadline.is_expired() {
            std::hint::spin_loop();
        }
        release.open();
        pool.wait_idle().await;
        // The outcome is delivered; the poll that sees it starts past the deadline.
        assert!(matches!(bounded(LIMIT, walk).await, Err(WithinError::Expired(s)) if s == Spent::new(Phase::Running)));

        // The same with a panic: refused, and reported to the handler exactly once.
        let release = Arc::new(Latch::new());
        let r = release.clone();
        let deadline = Deadline::after(Duration::from_millis(300));
        let walk = pool.try_run_within(deadline, move || -> u8 {
            r.wait();
            panic!("expected boom, late")
        });
        let mut walk = Box::pin(walk);
        assert!(future::poll_once(walk.as_mut()).await.is_none());
        while !deadline.is_expired() {
            std::hint::spin_loop();
        }
        release.open();
        pool.wait_idle().await;
        assert!(matches!(bounded(LIMIT, walk).await, Err(WithinError::Expired(s)) if s == Spent::new(Phase::Running)));
        pool.wait_idle().await;
        let reports: Vec<String> = seen.lock().unwrap().iter().map(|r| r.message().to_string()).collect();
        assert_eq!(reports, ["expected boom, late"]);

        // In time: the output, and the panic returned rather than reported.
        let out = pool.try_run_within(Deadline::never(), || -> u8 { panic!("expected boom, returned") }).await;
        assert!(matches!(out, Err(WithinError::Panicked(p)) if p.message() == "expected boom, returned"));
        // The slot comes back just after the outcome is delivered.
        pool.wait_idle().await;
        assert_eq!(pool.try_run_within(Deadline::never(), || 5_u8).await.ok(), Some(5));
        pool.wait_idle().await;
        assert_eq!(seen.lock().unwrap().len(), 1, "{:?}", seen.lock().unwrap());
        assert_eq!(pool.in_use(), 0);
    }
}

on_every_executor! {
    async fn try_run_within_fails_fast_and_expires_before_admission() {
        let pool = Pool::builder().workers(1).build().unwrap();
        let release = Arc::new(Latch::new());
        let r = release.clone();
        let busy = pool.try_run(move || r.wait()).unwrap();
        // Saturated at the first poll: nothing queued, the job back inside.
        match pool.try_run_within(Deadline::never(), || 3_u8).await {
            Err(WithinError::Saturated(refused)) => assert_eq!(refused.into_inner()(), 3),
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert_eq!((pool.in_use(), pool.waiting()), (1, 0));
        assert_eq!(pool.stats().rejected, 1);
        release.open();
        busy.await.unwrap();
        pool.wait_idle().await;
        // A deadline already spent: nothing starts, nothing is admitted.
        let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = ran.clone();
        let out = pool
            .try_run_within(Deadline::at(Instant::now()), move || flag.store(true, std::sync::atomic::Ordering::SeqCst))
            .await;
        assert!(matches!(out, Err(WithinError::Expired(s)) if s == Spent::new(Phase::InLine)));
        assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(pool.in_use(), 0);
        // Closed: the job comes back.
        pool.close();
        match pool.try_run_within(Deadline::never(), || 4_u8).await {
            Err(WithinError::Closed(job)) => assert_eq!(job(), 4),
            other => panic!("expected Closed, got {other:?}"),
        }
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
            Err(RefreshError::Panicked(_) | RefreshError::Expired(_)) => {}
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
            .on_pool(&pool, move || collection(&latch))
            .unwrap();
        let idle = Box::new(move || pool.in_use() == 0);
        (cache, seen, idle)
    });
}

#[test]
fn a_refresh_collection_panic_at_the_starters_deadline_is_reported_once_spawned() {
    race(|latch| {
        let (handler, seen) = recording();
        let shield = Shield::with_handler("race", handler).unwrap();
        let ex = Arc::new(async_executor::Executor::new());
        let driver = ex.clone();
        let finished = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let done = finished.clone();
        let cache = Refresh::builder("race")
            .ttl(Duration::ZERO)
            .spawned(
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
            )
            .unwrap();
        let idle = Box::new(move || finished.load(std::sync::atomic::Ordering::SeqCst));
        (cache, seen, idle)
    });
}
