//! Admission that knows its budget: `pool.run_within(deadline, job).refuse_early()` refuses
//! at once a caller whose place in line, at the pool's measured pace, cannot be served
//! before its deadline, and admits one that can; the estimate is `(k + 1) · h / c + h`.
//! Budgets are set from the pool's own measured hold (its `Retry-After` basis), so the
//! tests do not depend on how fast this machine sleeps. On every executor.

mod common;

use std::time::{Duration, Instant};

use common::{Latch, bounded, hold, poll_once};
use loopguard::deadline::{Deadline, Phase, Spent};
use loopguard::pool::{Pool, RunError};

const LIMIT: Duration = Duration::from_secs(20);

/// A one-worker pool that has measured a hold of about `job` (one job of that length).
async fn paced(job: Duration) -> Pool {
    let pool = Pool::builder().name("paced").workers(1).build().unwrap();
    pool.run(move || std::thread::sleep(job)).await.unwrap();
    pool.wait_idle().await;
    pool
}

/// The pool's mean hold, read as a refused `try_run`'s hint while its slot is held.
fn mean_hold(pool: &Pool) -> Duration {
    pool.try_run(|| ())
        .unwrap_err()
        .retry_after()
        .expect("saturated")
}

on_every_executor! {
    async fn a_caller_that_cannot_make_it_is_refused_at_once_instead_of_at_its_deadline() {
        let pool = paced(Duration::from_millis(200)).await;
        let release = Latch::new();
        let busy = hold(&pool, &release);
        let h = mean_hold(&pool);
        // The walk ahead and its own need about 2h; it has 1.5h.
        let budget = h * 3 / 2;

        let began = Instant::now();
        let early = bounded(LIMIT, pool.run_within(Deadline::after(budget), || 1).refuse_early()).await;
        let refused_after = began.elapsed();
        let Err(RunError::WouldExpire { retry_after }) = early else {
            panic!("expected an early refusal, got {early:?}");
        };
        assert_eq!(retry_after, h, "the hint is the expected wait: one hold");
        assert!(refused_after < budget / 2, "refused after {refused_after:?} of {budget:?}");
        assert_eq!((pool.in_use(), pool.waiting()), (1, 0), "it left no trace in line");

        // The same caller without the opt-in waits its whole budget for the same answer.
        let began = Instant::now();
        let waited = bounded(LIMIT, pool.run_within(Deadline::after(budget), || 1)).await;
        assert_eq!(waited, Err(RunError::Expired(Spent::new(Phase::InLine))));
        assert!(began.elapsed() >= budget);

        release.open();
        busy.await.unwrap();
        pool.wait_idle().await;
        assert_eq!(pool.in_use(), 0);
        // A slot free: served at once even with less than a hold left (no line, nothing to
        // estimate; its own quick job is done in time).
        let served = pool.run_within(Deadline::after(h / 2), || 2).refuse_early();
        assert_eq!(bounded(LIMIT, served).await, Ok(2));
    }
}

on_every_executor! {
    async fn a_caller_the_estimate_lets_in_is_served_when_the_line_moves_faster() {
        let pool = paced(Duration::from_millis(200)).await;
        let release = Latch::new();
        let busy = hold(&pool, &release);
        let h = mean_hold(&pool);

        // First in line: expected done at 2h, budget 10h.
        let mut first = Box::pin(pool.run_within(Deadline::after(h * 10), || "first").refuse_early());
        assert!(poll_once(&mut first).await.is_none(), "queued");
        // Second: expected done at (1 + 1)·h + h = 3h; its 3.5h are enough by the estimate.
        let joined = Instant::now();
        let mut second = Box::pin(pool.run_within(Deadline::after(h * 7 / 2), || "second").refuse_early());
        assert!(poll_once(&mut second).await.is_none(), "queued, not refused");
        // Third: expected done at 4h; 3.5h are not enough by the estimate, so it is refused
        // at once, even though (below) the line will clear in a moment: the estimate's
        // wrong refusal when the jobs ahead are quicker than the mean.
        let third = pool.run_within(Deadline::after(h * 7 / 2), || "third").refuse_early();
        let third = bounded(LIMIT, third).await;
        assert!(matches!(third, Err(RunError::WouldExpire { retry_after }) if retry_after == h * 3), "{third:?}");
        assert_eq!(pool.waiting(), 2);

        // The line moves faster than the estimate: the walk ahead ends now and the jobs in
        // line take no time.
        release.open();
        busy.await.unwrap();
        assert_eq!(bounded(LIMIT, first).await, Ok("first"));
        assert_eq!(bounded(LIMIT, second).await, Ok("second"));
        let took = joined.elapsed();
        assert!(took < h * 3, "served after {took:?}, before the estimated {:?}", h * 3);
        pool.wait_idle().await;
        assert_eq!(pool.in_use(), 0);
    }
}

on_every_executor! {
    async fn without_a_measured_pace_or_a_deadline_nobody_is_refused_early() {
        // No job has finished: no hold measured, no estimate.
        let pool = Pool::builder().name("unpaced").workers(1).build().unwrap();
        let release = Latch::new();
        let busy = hold(&pool, &release);
        let mut waiting = Box::pin(pool.run_within(Deadline::after(Duration::from_millis(1)), || 1).refuse_early());
        let out = bounded(LIMIT, &mut waiting).await;
        assert_eq!(out, Err(RunError::Expired(Spent::new(Phase::InLine))), "waited, then expired");
        release.open();
        busy.await.unwrap();
        pool.wait_idle().await;

        // Measured, but no deadline: a caller with all the time in the world waits.
        let pool = paced(Duration::from_millis(50)).await;
        let release = Latch::new();
        let busy = hold(&pool, &release);
        let mut patient = Box::pin(pool.run(|| 3).refuse_early());
        assert!(poll_once(&mut patient).await.is_none(), "queued");
        release.open();
        busy.await.unwrap();
        assert_eq!(bounded(LIMIT, patient).await, Ok(3));
    }
}

#[test]
fn an_early_refusal_says_why_and_when_to_come_back() {
    let refused = RunError::WouldExpire {
        retry_after: Duration::from_millis(1500),
    };
    assert_eq!(refused.retry_after(), Some(Duration::from_millis(1500)));
    assert_eq!(
        refused.to_string(),
        "refused at once: at the pool's pace the job would not be done before its deadline, \
         retry after 2s"
    );
    let io: std::io::Error = refused.into();
    assert_eq!(io.kind(), std::io::ErrorKind::WouldBlock);
    assert_eq!(RunError::Closed.retry_after(), None);
}
