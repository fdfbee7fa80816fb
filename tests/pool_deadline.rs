//! `Pool::run_within`: the slot wait spends the budget, a grant after expiry is handed
//! back, late results are refused, expiry orphans a running job without freeing its slot.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Counter, Latch, bounded, hold, poll_once};
use loopguard::Fallible;
use loopguard::deadline::{Deadline, Phase, Spent};
use loopguard::orphan::{OrphanHandler, Report};
use loopguard::pool::{Pool, RunError, WithinError};

const LIMIT: Duration = Duration::from_secs(30);

fn pool(workers: usize) -> Pool {
    Pool::builder()
        .name("budget")
        .workers(workers)
        .no_stuck_reports()
        .build()
        .unwrap()
}

/// Waits on the clock until `deadline` has passed (time is the thing under test here).
async fn pass(deadline: Deadline) {
    if let Some(at) = deadline.instant() {
        async_io::Timer::at(at).await;
    }
    assert!(deadline.is_expired());
}

on_every_executor! {
    async fn the_slot_wait_spends_the_budget() {
        let pool = pool(1);
        let release = Latch::new();
        let holder = hold(&pool, &release);

        let ran = Arc::new(AtomicBool::new(false));
        let flag = ran.clone();
        let budget = Duration::from_millis(60);
        let began = Instant::now();
        let out = bounded(LIMIT, pool.run_within(Deadline::after(budget), move || {
            flag.store(true, Ordering::SeqCst)
        }))
        .await;
        let took = began.elapsed();
        assert_eq!(out, Err(RunError::Expired(Spent::new(Phase::InLine))), "spent waiting for the slot");
        assert!(took >= budget, "returned before the deadline: {took:?}");
        assert!(took < budget + Duration::from_millis(300), "overshot: {took:?}");
        assert_eq!(pool.waiting(), 0, "the expired caller left the queue");

        release.open();
        holder.await.unwrap();
        pool.wait_idle().await;
        assert!(!ran.load(Ordering::SeqCst), "nothing starts after expiry");
        assert_eq!(pool.in_use(), 0);
    }
}

on_every_executor! {
    async fn a_slot_granted_after_expiry_goes_to_the_next_waiter() {
        let pool = pool(1);
        let release = Latch::new();
        let holder = hold(&pool, &release);

        let first_ran = Arc::new(AtomicBool::new(false));
        let flag = first_ran.clone();
        let deadline = Deadline::after(Duration::from_millis(30));
        let mut first = pool.run_within(deadline, move || flag.store(true, Ordering::SeqCst));
        let mut second = pool.run(|| "second");
        assert!(poll_once(&mut first).await.is_none());
        assert!(poll_once(&mut second).await.is_none());
        assert_eq!(pool.waiting(), 2);

        // Let the first caller's deadline pass without polling it, then free the slot:
        // the gate grants it to the oldest waiter, the expired one.
        pass(deadline).await;
        release.open();
        holder.await.unwrap();
        while pool.waiting() != 1 {
            std::thread::yield_now();
        }

        // Polled now, the expired caller hands the slot back at once.
        assert_eq!(first.await, Err(RunError::Expired(Spent::new(Phase::InLine))), "never admitted");
        assert_eq!(bounded(LIMIT, second).await, Ok("second"));
        assert!(!first_ran.load(Ordering::SeqCst));
        pool.wait_idle().await;
        assert_eq!(pool.in_use(), 0);
    }
}

on_every_executor! {
    async fn expiry_mid_job_orphans_it_and_keeps_its_slot() {
        let reports = Arc::new(Mutex::new(Vec::<Report>::new()));
        let sink = reports.clone();
        let pool = Pool::builder()
            .name("budget")
            .workers(1)
            .no_stuck_reports()
            .on_orphan(OrphanHandler::new(move |r| sink.lock().unwrap().push(r.clone())))
            .build()
            .unwrap();
        let (started, release) = (Counter::new(), Latch::new());
        let (s, r) = (started.clone(), release.clone());
        let deadline = Deadline::after(Duration::from_millis(40));
        let out = bounded(LIMIT, pool.run_within(deadline, Fallible(move || -> Result<(), &str> {
            s.add();
            r.wait();
            Err("walk failed late")
        })))
        .await;
        assert_eq!(out, Err(RunError::Expired(Spent::new(Phase::Running))));
        started.wait_for(1);
        assert_eq!(pool.in_use(), 1, "the orphaned walk keeps its slot");
        assert!(pool.try_run(|| ()).unwrap_err().is_saturated());

        release.open();
        pool.wait_idle().await;
        let reports = reports.lock().unwrap();
        assert_eq!(reports.len(), 1, "the late failure is reported exactly once");
        assert_eq!(reports[0].message(), "\"walk failed late\"");
    }
}

on_every_executor! {
    async fn a_result_that_lands_after_the_deadline_is_not_success() {
        let pool = pool(1);
        let deadline = Deadline::after(Duration::from_millis(30));
        let done = Counter::new();
        let d = done.clone();
        let mut run = pool.run_within(deadline, move || {
            d.add();
            7
        });
        // Admitted and (very likely) finished before the deadline, but not observed until
        // after it.
        let first = poll_once(&mut run).await;
        if first.is_some() {
            // Finished within the very first poll: legitimately in time.
            assert_eq!(first, Some(Ok(7)));
            return;
        }
        done.wait_for(1);
        pass(deadline).await;
        assert_eq!(run.await, Err(RunError::Expired(Spent::new(Phase::Running))), "admitted: it ran");
        pool.wait_idle().await;
        assert_eq!(pool.in_use(), 0);
    }
}

on_every_executor! {
    async fn an_already_expired_deadline_starts_nothing() {
        let pool = pool(1);
        let ran = Arc::new(AtomicBool::new(false));
        let flag = ran.clone();
        let expired = Deadline::at(Instant::now());
        let out = pool.run_within(expired, move || flag.store(true, Ordering::SeqCst)).await;
        assert_eq!(out, Err(RunError::Expired(Spent::new(Phase::InLine))));
        pool.wait_idle().await;
        assert!(!ran.load(Ordering::SeqCst));
        assert_eq!(pool.stats().jobs_ok, 0);
    }
}

on_every_executor! {
    async fn a_generous_deadline_changes_nothing() {
        let pool = pool(2);
        let deadline = Deadline::after(Duration::from_secs(60));
        assert_eq!(pool.run_within(deadline, || 1 + 1).await, Ok(2));
        assert_eq!(pool.run_within(Deadline::never(), || 3).await, Ok(3));
    }
}

on_every_executor! {
    async fn try_run_within_shows_its_pool_and_phase() {
        let pool = pool(1);
        let release = Latch::new();
        let opened = release.clone();
        let mut walk = pool.try_run_within(Deadline::never(), move || opened.wait());
        let shown = format!("{walk:?}");
        assert!(shown.starts_with("TryRunWithin { pool: \"budget\", phase: \"start\""), "{shown}");
        assert!(poll_once(&mut walk).await.is_none(), "the job holds its slot");
        let shown = format!("{walk:?}");
        assert!(shown.contains("phase: \"running\""), "{shown}");
        release.open();
        assert_eq!(walk.await.ok(), Some(()));
    }
}

on_every_executor! {
    async fn try_run_within_expires_at_its_deadline_while_its_job_runs() {
        let pool = pool(1);
        let release = Latch::new();
        let opened = release.clone();
        let budget = Deadline::after(Duration::from_millis(50));
        let walk = pool.try_run_within(budget, move || opened.wait());
        // The job is still held by the latch: only the deadline's timer can end the wait.
        let out = bounded(LIMIT, walk).await;
        assert!(matches!(out, Err(WithinError::Expired(s)) if s == Spent::new(Phase::Running)), "{out:?}");
        assert_eq!(pool.in_use(), 1, "the orphaned job keeps its slot");
        release.open();
        pool.wait_idle().await;
    }
}
