//! Admission, slot accounting, fairness and shutdown of `Pool`, on every executor.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::task::Poll;
use std::time::{Duration, Instant};

use common::{Counter, Latch, poll_once};
use loopguard::pool::{Pool, RunError, TryRunError};

fn pool(name: &str, workers: usize) -> Pool {
    Pool::builder()
        .name(name)
        .workers(workers)
        .no_stuck_reports()
        .build()
        .expect("pool")
}

/// Fills every slot of `pool` with a job that signals `started` and blocks on `release`.
fn fill(pool: &Pool, started: &Counter, release: &Latch) -> Vec<loopguard::pool::Job<usize>> {
    let jobs: Vec<_> = (0..pool.capacity())
        .map(|i| {
            let (started, release) = (started.clone(), release.clone());
            pool.try_run(move || {
                started.add();
                release.wait();
                i
            })
            .expect("a free slot")
        })
        .collect();
    started.wait_for(pool.capacity());
    jobs
}

on_every_executor! {
    async fn saturated_try_run_fails_fast_and_never_calls_the_job() {
        let pool = pool("sat", 2);
        let (started, release) = (Counter::new(), Latch::new());
        let jobs = fill(&pool, &started, &release);

        let called = Arc::new(AtomicBool::new(false));
        let flag = called.clone();
        let begin = Instant::now();
        let refused = pool.try_run(move || flag.store(true, Ordering::SeqCst));
        let took = begin.elapsed();
        let err = refused.expect_err("both workers are busy");
        assert!(err.is_saturated(), "{err}");
        assert!(err.retry_after_secs().unwrap() >= 1);
        assert!(took < Duration::from_millis(50), "try_run took {took:?}");
        assert_eq!(pool.stats().rejected, 1);

        // The job is handed back, never run.
        let job = err.into_inner();
        assert!(!called.load(Ordering::SeqCst));
        drop(job);

        release.open();
        let mut outputs = Vec::new();
        for job in jobs {
            outputs.push(job.await.expect("no panic"));
        }
        assert_eq!(outputs, vec![0, 1]);
        pool.wait_idle().await;
        assert_eq!(pool.in_use(), 0);
        assert!(!called.load(Ordering::SeqCst));
    }
}

on_every_executor! {
    async fn dropped_job_keeps_its_slot_until_its_thread_finishes() {
        let pool = pool("orphan-slot", 1);
        let (started, release) = (Counter::new(), Latch::new());
        let jobs = fill(&pool, &started, &release);
        drop(jobs);

        assert_eq!(pool.in_use(), 1, "the orphan still holds its slot");
        assert!(pool.try_run(|| 0).unwrap_err().is_saturated());

        release.open();
        pool.wait_idle().await;
        assert_eq!(pool.try_run(|| 7).expect("slot freed after the thread finished").await, Ok(7));
    }
}

on_every_executor! {
    async fn a_job_is_finished_only_once_its_outcome_is_delivered() {
        let pool = pool("finished", 1);
        let (started, release) = (Counter::new(), Latch::new());
        let mut jobs = fill(&pool, &started, &release);
        let job = jobs.pop().expect("one job");
        assert!(!job.is_finished(), "a running job is not finished");
        assert_eq!(format!("{job:?}"), "Job { finished: false }");
        release.open();
        // The worker gives the slot back after it delivered the outcome.
        pool.wait_idle().await;
        assert!(job.is_finished());
        assert_eq!(format!("{job:?}"), "Job { finished: true }");
        assert_eq!(job.await, Ok(0));
    }
}

on_every_executor! {
    async fn dropped_run_future_mid_job_keeps_its_slot() {
        let pool = pool("run-slot", 1);
        let (started, release) = (Counter::new(), Latch::new());
        let (s, r) = (started.clone(), release.clone());
        let mut run = pool.run(move || {
            s.add();
            r.wait();
        });
        assert!(poll_once(&mut run).await.is_none());
        started.wait_for(1);
        drop(run);

        assert_eq!(pool.in_use(), 1);
        assert!(pool.try_run(|| ()).unwrap_err().is_saturated());
        release.open();
        pool.wait_idle().await;
        assert!(pool.try_run(|| ()).is_ok());
    }
}

on_every_executor! {
    async fn run_waits_then_starts_promptly_after_a_release() {
        let pool = pool("wait", 1);
        let (started, release) = (Counter::new(), Latch::new());
        let jobs = fill(&pool, &started, &release);

        let mut run = pool.run(Instant::now);
        assert!(poll_once(&mut run).await.is_none(), "saturated: it must wait");
        assert_eq!(pool.waiting(), 1);

        let released = Instant::now();
        release.open();
        let began = run.await.expect("runs after the release");
        let delay = began.saturating_duration_since(released);
        assert!(delay < Duration::from_millis(200), "started {delay:?} after the release");
        for job in jobs {
            job.await.unwrap();
        }
        assert_eq!(pool.waiting(), 0);
    }
}

on_every_executor! {
    async fn waiters_are_not_starved_by_try_run() {
        let pool = pool("fair", 1);
        let (started, release) = (Counter::new(), Latch::new());
        let jobs = fill(&pool, &started, &release);

        // A waiter queues first.
        let admitted_by_try_run = Arc::new(AtomicUsize::new(0));
        let seen = admitted_by_try_run.clone();
        let mut waiter = pool.run(move || seen.load(Ordering::SeqCst));
        assert!(poll_once(&mut waiter).await.is_none());

        // A thread hammers try_run the whole time.
        let stop = Arc::new(AtomicBool::new(false));
        let hammering = Counter::new();
        let hammer = {
            let (pool, stop, count, hammering) =
                (pool.clone(), stop.clone(), admitted_by_try_run.clone(), hammering.clone());
            std::thread::spawn(move || {
                hammering.add();
                while !stop.load(Ordering::SeqCst) {
                    if let Ok(job) = pool.try_run(|| ()) {
                        count.fetch_add(1, Ordering::SeqCst);
                        drop(job);
                    }
                    std::hint::spin_loop();
                }
            })
        };
        hammering.wait_for(1);
        release.open();
        let try_runs_before_waiter = waiter.await.expect("the waiter ran");
        stop.store(true, Ordering::SeqCst);
        hammer.join().unwrap();
        assert_eq!(
            try_runs_before_waiter, 0,
            "a try_run took the slot freed for the oldest waiter"
        );
        for job in jobs {
            job.await.unwrap();
        }
    }
}

on_every_executor! {
    async fn concurrency_never_exceeds_capacity() {
        let pool = pool("cap", 2);
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let runs: Vec<_> = (0..24)
            .map(|i| {
                let (running, peak) = (running.clone(), peak.clone());
                pool.run(move || {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    std::thread::yield_now();
                    running.fetch_sub(1, Ordering::SeqCst);
                    i
                })
            })
            .collect();
        let mut outputs = Vec::new();
        for run in runs {
            outputs.push(run.await.unwrap());
        }
        assert_eq!(outputs, (0..24).collect::<Vec<_>>());
        assert!(peak.load(Ordering::SeqCst) <= 2, "peak {}", peak.load(Ordering::SeqCst));
        pool.wait_idle().await;
        assert_eq!(pool.in_use(), 0);
    }
}

on_every_executor! {
    async fn run_dropped_while_waiting_takes_nothing() {
        let pool = pool("cancel-wait", 1);
        let (started, release) = (Counter::new(), Latch::new());
        let jobs = fill(&pool, &started, &release);

        let called = Arc::new(AtomicBool::new(false));
        let flag = called.clone();
        let mut run = pool.run(move || flag.store(true, Ordering::SeqCst));
        assert!(poll_once(&mut run).await.is_none());
        assert_eq!(pool.waiting(), 1);
        drop(run);
        assert_eq!(pool.waiting(), 0);

        release.open();
        for job in jobs {
            job.await.unwrap();
        }
        pool.wait_idle().await;
        assert_eq!(pool.in_use(), 0);
        assert!(!called.load(Ordering::SeqCst), "a cancelled waiter's job never runs");
        // Full capacity is available again.
        let job = pool.try_run(|| 1).expect("capacity is whole");
        assert_eq!(job.await, Ok(1));
    }
}

on_every_executor! {
    async fn saturating_one_pool_leaves_another_alone() {
        let busy = pool("busy", 1);
        let other = pool("other", 1);
        let (started, release) = (Counter::new(), Latch::new());
        let jobs = fill(&busy, &started, &release);
        assert!(busy.try_run(|| 0).is_err());
        assert_eq!(other.try_run(|| 5).expect("other pool admits").await, Ok(5));
        assert_eq!(other.run(|| 6).await, Ok(6));
        release.open();
        for job in jobs {
            job.await.unwrap();
        }
    }
}

on_every_executor! {
    async fn jobs_run_on_threads_named_after_the_pool() {
        let pool = pool("registry-serve", 2);
        let (started, release) = (Counter::new(), Latch::new());
        let names: Vec<_> = (0..2)
            .map(|_| {
                let (started, release) = (started.clone(), release.clone());
                pool.try_run(move || {
                    started.add();
                    release.wait();
                    std::thread::current().name().map(String::from)
                })
                .unwrap()
            })
            .collect();
        started.wait_for(2);
        release.open();
        let mut seen = Vec::new();
        for job in names {
            seen.push(job.await.unwrap().expect("named thread"));
        }
        seen.sort();
        assert_eq!(seen, ["registry-serve-0", "registry-serve-1"]);
    }
}

on_every_executor! {
    async fn a_panic_is_returned_to_the_caller_with_its_message() {
        let pool = pool("panics", 1);
        let err = pool
            .try_run(|| -> u8 { panic!("registry walk failed at {}", 3) })
            .unwrap()
            .await
            .unwrap_err();
        assert_eq!(err.message(), "registry walk failed at 3");
        // The worker survived.
        assert_eq!(pool.run(|| 2).await, Ok(2));
        assert_eq!(pool.stats().jobs_panicked, 1);
    }
}

on_every_executor! {
    async fn close_fails_waiters_and_lets_running_jobs_finish() {
        let pool = pool("closing", 1);
        let (started, release) = (Counter::new(), Latch::new());
        let jobs = fill(&pool, &started, &release);
        let mut waiter = pool.run(|| 1);
        assert!(poll_once(&mut waiter).await.is_none());

        assert!(pool.close());
        assert_eq!(waiter.await, Err(RunError::Closed));
        assert!(matches!(pool.try_run(|| 1), Err(TryRunError::Closed(_))));
        assert_eq!(pool.run(|| 1).await, Err(RunError::Closed));

        release.open();
        for job in jobs {
            assert_eq!(job.await, Ok(0), "a running job finishes after close");
        }
        pool.shutdown().await;
        assert_eq!(pool.in_use(), 0);
    }
}

on_every_executor! {
    async fn a_waiter_that_claimed_its_slot_keeps_it_through_close() {
        let pool = pool("claimed", 1);
        let (started, release) = (Counter::new(), Latch::new());
        let jobs = fill(&pool, &started, &release);
        let (second_started, second_release) = (Counter::new(), Latch::new());
        let (s, r) = (second_started.clone(), second_release.clone());
        let mut waiter = pool.run(move || {
            s.add();
            r.wait();
            2
        });
        assert!(poll_once(&mut waiter).await.is_none());
        release.open();
        // The freed slot is handed to the waiter and its task woken; the next poll claims
        // the slot and starts the job.
        futures_lite::future::poll_fn(|cx| {
            assert!(Pin::new(&mut waiter).poll(cx).is_pending());
            if format!("{waiter:?}").contains("\"running\"") {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
        second_started.wait_for(1);

        // Close takes back only slots granted and not yet claimed: this one runs a job.
        assert!(pool.close());
        assert_eq!(pool.in_use(), 1, "close took the slot of a running job");
        second_release.open();
        assert_eq!(waiter.await, Ok(2));
        for job in jobs {
            assert_eq!(job.await, Ok(0));
        }
        pool.shutdown().await;
        assert_eq!(pool.in_use(), 0);
    }
}

on_every_executor! {
    async fn a_dropped_waiter_leaves_nothing_for_close_to_take_back() {
        let pool = pool("dropped-waiter", 1);
        let (started, release) = (Counter::new(), Latch::new());
        let jobs = fill(&pool, &started, &release);
        let mut waiter = pool.run(|| 1);
        assert!(poll_once(&mut waiter).await.is_none());
        drop(waiter);
        assert_eq!(pool.waiting(), 0);

        release.open();
        for job in jobs {
            assert_eq!(job.await, Ok(0));
        }
        pool.wait_idle().await;
        assert_eq!(pool.in_use(), 0);
        // Nothing was granted to the waiter that left: closing takes nothing back.
        assert!(pool.close());
        assert_eq!(pool.in_use(), 0);
        pool.shutdown().await;
    }
}

on_every_executor! {
    async fn dropping_the_last_handle_does_not_block() {
        let pool = pool("dropped", 1);
        let (started, release) = (Counter::new(), Latch::new());
        let mut jobs = fill(&pool, &started, &release);
        let job = jobs.pop().unwrap();
        let begin = Instant::now();
        drop(pool);
        assert!(begin.elapsed() < Duration::from_secs(1), "drop blocked");
        release.open();
        assert_eq!(job.await, Ok(0), "the admitted job still completes");
    }
}

#[test]
fn bad_configuration_is_an_error_not_a_panic() {
    for workers in [0, loopguard::pool::MAX_WORKERS + 1, usize::MAX] {
        let err = Pool::builder().workers(workers).build().unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("workers"), "{err}");
    }
    for name in ["", "nul\0byte"] {
        let err = Pool::builder().name(name).build().unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}");
    }
    let err = Pool::builder()
        .stuck_after(Duration::ZERO)
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
}

#[test]
fn thread_spawn_failure_is_an_io_error() {
    // An absurd stack size makes the OS refuse the thread.
    let err = Pool::builder()
        .workers(1)
        .stack_size(usize::MAX / 2)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("cannot spawn thread"), "{err}");
}

#[test]
fn retry_after_rounds_up_to_at_least_a_second() {
    let pool = pool("hint", 1);
    let (tx, rx) = mpsc::channel::<()>();
    let job = pool.try_run(move || rx.recv().ok()).unwrap();
    let err = pool.try_run(|| None::<()>).unwrap_err();
    assert!(err.retry_after().unwrap() >= Duration::from_millis(1));
    assert!(err.retry_after_secs().unwrap() >= 1);
    tx.send(()).unwrap();
    futures_lite::future::block_on(job).unwrap();
}

on_every_executor! {
    async fn a_job_finds_its_own_wait_in_the_stats() {
        // The pool records a wait before the job can run, so an encode running as a job
        // (a scrape) counts its own wait, every time.
        let pool = pool("own-wait", 1);
        for round in 1..=20_u64 {
            let p = pool.clone();
            let seen = pool.run(move || p.stats().wait_time.count).await;
            assert_eq!(seen, Ok(round));
        }
    }
}

on_every_executor! {
    async fn the_oldest_job_age_is_the_running_jobs_and_none_when_idle() {
        let pool = pool("oldest", 2);
        assert_eq!(pool.oldest_job_age(), None);
        let submitted = Instant::now();
        let release = Latch::new();
        let (started_tx, started) = mpsc::channel();
        let r = release.clone();
        let job = pool
            .try_run(move || {
                started_tx.send(Instant::now()).unwrap();
                r.wait();
            })
            .unwrap();
        let began = started.recv().unwrap();
        // The clock is the thing under test: let the job's age grow past 20 ms. A thread
        // sleep, not an async-io timer, so that the `block_on` variant runs under Miri
        // (which has no `timerfd_create`); it orders nothing, the latch and channel do.
        std::thread::sleep((began + Duration::from_millis(20)).saturating_duration_since(Instant::now()));
        let looked = Instant::now();
        let age = pool.oldest_job_age().expect("a job runs");
        assert!(age >= looked - began, "{age:?} is younger than the job");
        assert!(age <= submitted.elapsed(), "{age:?} is older than the job");
        release.open();
        job.await.unwrap();
        pool.wait_idle().await;
        assert_eq!(pool.oldest_job_age(), None);
        assert_eq!(pool.stats().oldest_job_age, None);
    }
}
