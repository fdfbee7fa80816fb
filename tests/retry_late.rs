//! The late-output rule composed with `Retry`: nothing starts after expiry, an attempt's
//! `Err` that lands after the deadline is returned inside the error (never dropped), and a
//! success that lands after it is refused. A hand-off inside an attempt
//! (`Pool::run_within`) refuses what lands late there and reports a refused failure:
//! exactly once either way.
//!
//! The deadline passes *inside* one poll here (the point of these tests): the output is
//! taken, then the poll spins until the deadline is behind it. Everything else is ordered
//! by the pool's own state (`wait_idle`) and latches, never by sleeps.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::{LandsAtDeadline, Latch, bounded, quiet_expected_panics, recording};
use futures_lite::future;
use loopguard::Fallible;
use loopguard::deadline::Deadline;
use loopguard::orphan::OrphanHandler;
use loopguard::pool::Pool;
use loopguard::retry::{AttemptError, Retry, RetryError};

const LIMIT: Duration = Duration::from_secs(30);
/// Rounds per test: each lands one output in the poll its deadline passes in.
const ROUNDS: usize = 100;

fn soon() -> Deadline {
    Deadline::after(Duration::from_millis(30))
}

fn one_worker(handler: OrphanHandler) -> Pool {
    Pool::builder()
        .workers(1)
        .on_orphan(handler)
        .build()
        .unwrap()
}

/// A job's panic, handed to an attempt that returns it as its `Err` in the poll the
/// deadline passes in: `Retry` returns it (no second attempt starts after expiry).
#[test]
fn retry_returns_a_failure_that_lands_at_its_deadline_and_starts_nothing_after() {
    quiet_expected_panics();
    let (handler, seen) = recording();
    let pool = one_worker(handler);
    for round in 0..ROUNDS {
        let job = pool.try_run(|| -> u8 { panic!("expected boom") }).unwrap();
        future::block_on(pool.wait_idle());
        let deadline = soon();
        let mut job = Some(job);
        let made = Arc::new(AtomicU32::new(0));
        let counted = made.clone();
        let out = future::block_on(bounded(
            LIMIT,
            Retry::new().attempts(3).unwrap().run(deadline, move |_| {
                counted.fetch_add(1, Ordering::SeqCst);
                let job = job.take().expect("one attempt only");
                LandsAtDeadline {
                    inner: job,
                    deadline,
                }
            }),
        ));
        match out {
            Err(RetryError::Deadline {
                attempts: 1,
                last: Some(AttemptError::Failed(panicked)),
            }) => assert_eq!(panicked.message(), "expected boom"),
            other => panic!("round {round}: the late failure must be returned, got {other:?}"),
        }
        assert_eq!(
            made.load(Ordering::SeqCst),
            1,
            "an attempt started after expiry"
        );
        future::block_on(pool.wait_idle());
        assert!(seen.lock().unwrap().is_empty(), "returned, so not reported");
    }
}

/// A success that lands in the poll the deadline passes in is refused by `Retry`.
#[test]
fn retry_refuses_a_success_that_lands_at_its_deadline() {
    let pool = one_worker(OrphanHandler::log());
    for round in 0..ROUNDS {
        let job = pool.try_run(|| 7_u8).unwrap();
        future::block_on(pool.wait_idle());
        let deadline = soon();
        let mut job = Some(job);
        let out = future::block_on(bounded(
            LIMIT,
            Retry::new()
                .attempts(1)
                .unwrap()
                .run(deadline, move |_| LandsAtDeadline {
                    inner: job.take().expect("one attempt"),
                    deadline,
                }),
        ));
        assert!(
            matches!(
                out,
                Err(RetryError::Deadline {
                    attempts: 1,
                    last: None
                })
            ),
            "round {round}: a late success must be refused, got {out:?}"
        );
    }
}

/// `Pool::run_within` inside an attempt owns the hand-off: a `Fallible` job's `Err` that
/// lands after the deadline is refused by `Run` and reported once; one in time is
/// returned through `Retry`. Either way, exactly once.
#[test]
fn a_fallible_err_through_run_within_in_an_attempt_is_returned_or_reported_once() {
    let (handler, seen) = recording();
    let pool = one_worker(handler);
    let mut late = 0;
    for round in 0..ROUNDS {
        let deadline = Deadline::after(Duration::from_millis(5));
        let release = Latch::new();
        let opener = release.clone();
        let attempt_pool = pool.clone();
        let mut release = Some(release);
        // The job waits for the latch, opened around the deadline from another thread.
        let at = deadline.instant().unwrap();
        let open_at =
            at + Duration::from_micros((round % 40) as u64 * 50) - Duration::from_millis(1);
        let opener_thread = std::thread::spawn(move || {
            while std::time::Instant::now() < open_at {
                std::hint::spin_loop();
            }
            opener.open();
        });
        let out = future::block_on(bounded(
            LIMIT,
            Retry::new().attempts(1).unwrap().run(deadline, move |_| {
                let release = release.take().expect("one attempt");
                let walk = attempt_pool.run_within(
                    deadline,
                    Fallible(move || {
                        release.wait();
                        Err::<u8, _>("late err")
                    }),
                );
                // The job's failure is the attempt's error: a late one is returned, not
                // dropped as a late success would be.
                async move {
                    match walk.await {
                        Ok(Ok(value)) => Ok(value),
                        Ok(Err(err)) => Err(err.to_string()),
                        Err(run) => Err(run.to_string()),
                    }
                }
            }),
        ));
        opener_thread.join().unwrap();
        future::block_on(pool.wait_idle());
        if matches!(out, Err(RetryError::Deadline { attempts: 0, .. })) {
            // A loaded machine polled the retry first after its deadline: nothing started.
            continue;
        }
        let returned = matches!(&out, Err(e) if e.error().is_some_and(|e| e == "late err"));
        let reported = std::mem::take(&mut *seen.lock().unwrap()).len();
        match (returned, reported) {
            (true, 0) => {}
            (false, 1) => {
                late += 1;
                assert!(
                    matches!(
                        out,
                        Err(RetryError::Deadline { .. } | RetryError::Exhausted { .. })
                    ),
                    "round {round}: {out:?}"
                );
            }
            _ => panic!("round {round}: returned {returned}, reported {reported} times: {out:?}"),
        }
    }
    // Both placements happen on any machine: the latch sweeps across the deadline.
    assert!(late > 0, "no round landed late");
}
