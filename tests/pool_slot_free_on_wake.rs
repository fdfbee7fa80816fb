//! The slot is free when the caller wakes: a worker stores a job's outcome, gives the slot
//! back, and only then lets the caller take the outcome. So a caller that awaits a job and
//! at once asks for another slot is never refused by its own finished job, and a pool
//! reads idle as soon as the last caller has its output.
//!
//! At the natural rate: no widened window, no sleeps; each round is a real worker thread
//! finishing a real job while the caller's executor polls.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use loopguard::Fallible;
use loopguard::deadline::Deadline;
use loopguard::orphan::OrphanHandler;
use loopguard::pool::{Pool, TryRunError};

const ROUNDS: usize = 10_000;

fn one_worker(name: &str) -> Pool {
    Pool::builder()
        .name(name)
        .workers(1)
        .build()
        .expect("a pool")
}

on_every_executor!(
    /// 10 000 rounds of "await a job, then `try_run`" on a full 1-worker pool: never
    /// refused. Before the fix, the woken caller raced the worker's release and lost often.
    async fn a_try_run_after_awaiting_a_job_is_never_refused() {
        let pool = one_worker("await-then-try");
        let mut job = pool.try_run(|| 0_usize).expect("an idle pool admits");
        for round in 1..=ROUNDS {
            let done = job.await.expect("the job ran");
            assert_eq!(done, round - 1);
            job = match pool.try_run(move || round) {
                Ok(job) => job,
                Err(TryRunError::Saturated(_)) => {
                    panic!("round {round}: refused by the job just awaited")
                }
                Err(err) => panic!("round {round}: {err}"),
            };
        }
        assert_eq!(job.await.expect("the last job ran"), ROUNDS);
        assert_eq!(
            pool.in_use(),
            0,
            "the slot is back once the output is taken"
        );
    }
);

on_every_executor!(
    /// The same through `try_run_within` (what an exporter calls per scrape), with a
    /// `Fallible` job: after each answer the slot is free for the next scrape.
    async fn a_scrape_after_a_scrape_is_never_refused() {
        let pool = one_worker("scrape-then-scrape");
        for round in 0..ROUNDS {
            let deadline = Deadline::after(Duration::from_secs(30));
            let walk = Fallible(move || Ok::<_, String>(round));
            match pool.try_run_within(deadline, walk).await {
                Ok(n) => assert_eq!(n, round),
                Err(err) => panic!("round {round}: refused, expired or failed: {err}"),
            }
            assert_eq!(pool.in_use(), 0, "round {round}: the slot is still held");
        }
    }
);

on_every_executor!(
    /// A waiting caller (`run`) that goes on to `try_run` at once is not refused either.
    async fn a_try_run_after_run_is_never_refused() {
        let pool = one_worker("run-then-try");
        for round in 0..ROUNDS / 4 {
            assert_eq!(pool.run(move || round).await, Ok(round));
            let job = pool
                .try_run(move || round)
                .unwrap_or_else(|err| panic!("round {round}: {err}"));
            assert_eq!(job.await.expect("the job ran"), round);
        }
    }
);

/// Twelve threads each `block_on(pool.run(..))` on a 2-worker pool, many rounds: the caller
/// that gets the last output sees `in_use() == 0` at once, with no `wait_idle`.
#[test]
fn the_pool_is_idle_as_soon_as_the_last_caller_has_its_output() {
    const CALLERS: usize = 12;
    const ROUNDS: usize = 200;
    let pool = Pool::builder()
        .name("last-caller")
        .workers(2)
        .build()
        .expect("a pool");
    for round in 0..ROUNDS {
        let start = Arc::new(Barrier::new(CALLERS));
        let finished = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..CALLERS)
            .map(|caller| {
                let (pool, start, finished) = (pool.clone(), start.clone(), finished.clone());
                std::thread::spawn(move || {
                    start.wait();
                    let out = futures_lite::future::block_on(pool.run(move || caller));
                    assert_eq!(out, Ok(caller));
                    // The caller whose output comes last: every other one has its output,
                    // so every job has ended.
                    if finished.fetch_add(1, Ordering::AcqRel) == CALLERS - 1 {
                        pool.in_use()
                    } else {
                        0
                    }
                })
            })
            .collect();
        let in_use: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(
            in_use, 0,
            "round {round}: a slot still held after the last output"
        );
    }
}

on_every_executor!(
    /// The orphan handler runs with the slot still held (it reads `in_use() == 1`), the
    /// failure is reported once, and the slot is back by the time the pool reads idle.
    async fn an_orphaned_failure_is_reported_before_the_slot_goes_back() {
        let in_use_at_report = Arc::new(AtomicUsize::new(usize::MAX));
        let reports = Arc::new(AtomicUsize::new(0));
        // The handler reads the pool through this cell; emptied at the end, so the pool and
        // its handler do not keep each other alive.
        let cell: Arc<Mutex<Option<Pool>>> = Arc::new(Mutex::new(None));
        let pool = {
            let (in_use_at_report, reports, cell) =
                (in_use_at_report.clone(), reports.clone(), cell.clone());
            let handler = OrphanHandler::new(move |_| {
                reports.fetch_add(1, Ordering::AcqRel);
                if let Some(pool) = cell.lock().unwrap().as_ref() {
                    in_use_at_report.store(pool.in_use(), Ordering::Release);
                }
            });
            Pool::builder()
                .name("orphan-order")
                .workers(1)
                .on_orphan(handler)
                .build()
                .expect("a pool")
        };
        *cell.lock().unwrap() = Some(pool.clone());
        let gate = common::Latch::new();
        let job = {
            let gate = gate.clone();
            pool.try_run(Fallible(move || {
                gate.wait();
                Err::<(), _>("lost")
            }))
            .expect("an idle pool admits")
        };
        drop(job);
        gate.open();
        pool.wait_idle().await;
        assert_eq!(reports.load(Ordering::Acquire), 1, "reported once");
        assert_eq!(
            in_use_at_report.load(Ordering::Acquire),
            1,
            "the handler ran while the slot was held"
        );
        assert_eq!(pool.in_use(), 0);
        assert!(pool.try_run(|| ()).is_ok());
        cell.lock().unwrap().take();
    }
);
