//! Orphaned failures are reported exactly once; awaited ones never; stuck jobs once.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Counter, Latch, poll_once, recording};
use loopguard::Fallible;
use loopguard::orphan::{OrphanHandler, ReportKind};
use loopguard::pool::Pool;

fn pool_with(handler: OrphanHandler, workers: usize) -> Pool {
    Pool::builder()
        .name("orphans")
        .workers(workers)
        .no_stuck_reports()
        .on_orphan(handler)
        .build()
        .unwrap()
}

on_every_executor! {
    async fn orphaned_panic_and_err_are_each_reported_once() {
        let (handler, seen) = recording();
        let pool = pool_with(handler, 1);
        let (started, release) = (Counter::new(), Latch::new());

        let (s, r) = (started.clone(), release.clone());
        let panicking = pool
            .try_run(move || -> u32 {
                s.add();
                r.wait();
                panic!("walk exploded")
            })
            .unwrap();
        started.wait_for(1);
        drop(panicking);
        release.open();
        pool.wait_idle().await;

        let (started, release) = (Counter::new(), Latch::new());
        let (s, r) = (started.clone(), release.clone());
        let mut failing = pool.run(Fallible(move || -> Result<(), String> {
            s.add();
            r.wait();
            Err("scrape failed".into())
        }));
        // Poll until admitted, then orphan it mid-run.
        assert!(poll_once(&mut failing).await.is_none());
        started.wait_for(1);
        drop(failing);
        release.open();
        pool.wait_idle().await;

        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!(seen[0].kind(), ReportKind::Panicked);
        assert_eq!(seen[0].message(), "walk exploded");
        assert_eq!(seen[0].origin(), "orphans");
        assert_eq!(seen[1].kind(), ReportKind::Failed);
        assert_eq!(seen[1].message(), "\"scrape failed\"");
        assert_eq!(pool.orphaned_failures(), 2);
        assert_eq!(pool.in_use(), 0, "slots released after reporting");
    }
}

on_every_executor! {
    async fn awaited_failures_are_never_reported() {
        let (handler, seen) = recording();
        let pool = pool_with(handler, 2);
        let err = pool.run(Fallible(|| -> Result<(), &str> { Err("mine") })).await.unwrap();
        assert_eq!(err, Err("mine"));
        // A slot comes back just after its outcome is delivered: wait, then fail fast.
        pool.wait_idle().await;
        let panicked = pool.try_run(|| -> () { panic!("also mine") }).unwrap().await;
        assert!(panicked.is_err());
        // Orphaned successes are not failures either.
        pool.wait_idle().await;
        drop(pool.try_run(|| String::from("rendered")).unwrap());
        pool.wait_idle().await;
        assert!(seen.lock().unwrap().is_empty());
        assert_eq!(pool.orphaned_failures(), 0);
        assert_eq!(pool.stats().jobs_error, 1);
        assert_eq!(pool.stats().jobs_panicked, 1);
    }
}

/// Races the drop of a `Job` against the job's completion many times. Every failure must
/// be seen exactly once: by the awaiting caller or by the handler, never both, never
/// neither.
#[test]
fn exactly_once_under_drop_completion_races() {
    const ROUNDS: usize = 3000;
    let reported = Arc::new(AtomicUsize::new(0));
    let count = reported.clone();
    let pool = pool_with(
        OrphanHandler::new(move |_| {
            count.fetch_add(1, Ordering::SeqCst);
        }),
        2,
    );
    let mut awaited = 0;
    for round in 0..ROUNDS {
        let job = pool
            .try_run(Fallible(move || -> Result<(), usize> { Err(round) }))
            .expect("slots are released before the next round");
        // Vary where the drop lands relative to the completion.
        for _ in 0..(round % 64) {
            std::hint::spin_loop();
        }
        if round % 5 == 0 {
            let dropper = std::thread::spawn(move || drop(job));
            dropper.join().unwrap();
        } else if round % 7 == 0 {
            assert_eq!(futures_lite::future::block_on(job), Ok(Err(round)));
            awaited += 1;
        } else {
            drop(job);
        }
        futures_lite::future::block_on(pool.wait_idle());
    }
    assert_eq!(reported.load(Ordering::SeqCst) + awaited, ROUNDS);
    assert_eq!(pool.orphaned_failures() as usize, ROUNDS - awaited);
    assert_eq!(pool.in_use(), 0);
}

on_every_executor! {
    async fn a_panicking_handler_kills_no_worker_and_leaks_no_slot() {
        let pool = pool_with(OrphanHandler::new(|_| panic!("handler bug")), 1);
        for _ in 0..3 {
            drop(pool.try_run(Fallible(|| -> Result<(), ()> { Err(()) })).unwrap());
            pool.wait_idle().await;
            assert_eq!(pool.in_use(), 0);
        }
        assert_eq!(pool.orphaned_failures(), 3);
        // The single worker is alive.
        assert_eq!(pool.run(|| 9).await, Ok(9));
    }
}

on_every_executor! {
    async fn reports_reach_a_receiver_on_the_loop() {
        let (handler, mut reports) = OrphanHandler::channel(8);
        let pool = pool_with(handler, 1);
        drop(pool.try_run(Fallible(|| -> Result<u8, &str> { Err("late failure") })).unwrap());
        // !Send state on the loop side is fine: the receiver is drained by this task.
        let local = std::rc::Rc::new(std::cell::Cell::new(0));
        let report = reports.recv().await.expect("one report");
        local.set(local.get() + 1);
        assert_eq!(report.message(), "\"late failure\"");
        assert_eq!(local.get(), 1);
        drop(pool);
        assert!(reports.recv().await.is_none(), "stream ends with the last handler");
        assert_eq!(reports.dropped(), 0);
    }
}

#[test]
fn a_full_report_queue_drops_and_counts() {
    let (handler, mut reports) = OrphanHandler::channel(2);
    let pool = pool_with(handler, 1);
    assert!(reports.is_empty());
    for _ in 0..5 {
        drop(
            pool.try_run(Fallible(|| -> Result<(), ()> { Err(()) }))
                .unwrap(),
        );
        futures_lite::future::block_on(pool.wait_idle());
    }
    assert_eq!(reports.len(), 2);
    assert!(!reports.is_empty());
    assert_eq!(reports.dropped(), 3);
    assert_eq!(
        format!("{reports:?}"),
        "OrphanReceiver { queued: 2, capacity: 2, dropped: 3 }"
    );
    assert_eq!(pool.orphaned_failures(), 5, "the pool counts every failure");
    assert!(reports.try_recv().is_some());
    assert!(reports.try_recv().is_some());
    assert!(reports.is_empty());
}

#[test]
fn a_local_executor_task_handles_reports_with_non_send_state() {
    let ex = async_executor::LocalExecutor::new();
    let (handler, mut reports) = OrphanHandler::channel(8);
    let pool = pool_with(handler, 1);
    let log = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let sink = log.clone();
    let drain = ex.spawn(async move {
        while let Some(report) = reports.recv().await {
            sink.borrow_mut().push(report.message().to_string());
        }
    });
    futures_lite::future::block_on(ex.run(async {
        for i in 0..3 {
            drop(
                pool.try_run(Fallible(move || -> Result<(), i32> { Err(i) }))
                    .unwrap(),
            );
            pool.wait_idle().await;
        }
        drop(pool);
        drain.await;
    }));
    assert_eq!(*log.borrow(), ["0", "1", "2"]);
}

on_every_executor! {
    async fn a_stuck_job_is_reported_once_and_keeps_its_slot() {
        let (tx, rx) = std::sync::mpsc::channel();
        let tx = Mutex::new(tx);
        let pool = Pool::builder()
            .name("stuck")
            .workers(1)
            .stuck_after(Duration::from_millis(30))
            .on_orphan(OrphanHandler::new(move |report| {
                let _ = tx.lock().unwrap().send(report.clone());
            }))
            .build()
            .unwrap();
        let release = Latch::new();
        let r = release.clone();
        let job = pool.try_run(move || r.wait()).unwrap();

        let report = rx.recv_timeout(Duration::from_secs(30)).expect("a stuck report");
        assert_eq!(report.kind(), ReportKind::Stuck);
        assert!(report.elapsed() >= Duration::from_millis(30));
        assert!(pool.oldest_job_age().unwrap() >= Duration::from_millis(30));
        assert_eq!(pool.in_use(), 1);

        release.open();
        job.await.unwrap();
        // Only once per job, and nothing for the next, quick job.
        assert_eq!(pool.run(|| ()).await, Ok(()));
        pool.shutdown().await;
        assert!(rx.try_recv().is_err(), "reported more than once");
        assert_eq!(pool.stats().stuck_jobs, 1);
        assert_eq!(pool.oldest_job_age(), None);
    }
}
