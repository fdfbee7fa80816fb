//! The late-output rule (`src/late.rs`, `Within` in `src/deadline.rs`) composed
//! with `Retry`. `Within` returns a late output when a loopguard hand-off gave the inner
//! future a failure during that poll; `Retry` then decides what to do with the output,
//! and an enclosing `Within` trusts the thread-local count.
//!
//! The deadline passes *inside* one poll here (the point of these tests): the output is
//! taken, then the poll spins until the deadline is behind it. Everything else is ordered
//! by the pool's own state (`wait_idle`), never by sleeps.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use common::{LandsAtDeadline, bounded, quiet_expected_panics, recording};
use futures_lite::future;
use loopguard::deadline::{Deadline, Expired};
use loopguard::orphan::OrphanHandler;
use loopguard::pool::Pool;
use loopguard::retry::{Retry, RetryError};
use loopguard::{Fallible, Panicked};

const LIMIT: Duration = Duration::from_secs(30);
/// Rounds per test: each lands one output in the poll its deadline passes in.
const ROUNDS: usize = 200;

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

/// `Within` hands `Retry` a late `Err` of `Fallible` work (it travels inside `T`, as
/// `Ok(Ok(Err(e)))`) past `Retry`'s deadline. `Retry` used to answer
/// `RetryError::Deadline { last: None }` and drop it, so the failure was neither returned
/// nor reported; it must be one or the other.
#[test]
fn retry_does_not_drop_a_late_fallible_err() {
    quiet_expected_panics();
    let (handler, seen) = recording();
    let pool = one_worker(handler);
    let mut lost = Vec::new();
    for round in 0..ROUNDS {
        let job = pool.try_run(Fallible(|| Err::<u8, _>("late err"))).unwrap();
        future::block_on(pool.wait_idle());
        let deadline = soon();
        let mut job = Some(job);
        let out = future::block_on(bounded(
            LIMIT,
            Retry::new()
                .attempts(1)
                .run(deadline, move |_| LandsAtDeadline {
                    inner: job.take().expect("one attempt"),
                    deadline,
                }),
        ));
        future::block_on(pool.wait_idle());
        let returned = format!("{out:?}").contains("late err");
        let reported = std::mem::take(&mut *seen.lock().unwrap()).len();
        if !(returned || reported == 1) {
            lost.push((round, format!("{out:?}")));
        }
    }
    assert!(
        lost.is_empty(),
        "{}/{ROUNDS} rounds: the job's Err was neither returned nor reported, e.g. {:?}",
        lost.len(),
        lost[0]
    );
}

/// A `Retry` with a budget of its own inside a shorter `Deadline::run`: attempt 1 takes a
/// panic (the hand-off counts it as handed out), `Retry` retries and discards it, attempt 2
/// succeeds in the same poll, past the outer deadline. `Retry` used to leave the panic on
/// the count, so the outer `Within` returned the late *success* while the panic was
/// neither returned nor reported. A retried failure is consumed: the late success is
/// refused as any late success is.
#[test]
fn within_does_not_return_a_late_success_when_retry_swallowed_the_failure() {
    quiet_expected_panics();
    let (handler, seen) = recording();
    let pool = one_worker(handler);
    type Attempt = Pin<Box<dyn Future<Output = Result<u8, Panicked>>>>;
    let mut late = Vec::new();
    for round in 0..ROUNDS {
        let job = pool.try_run(|| -> u8 { panic!("expected boom") }).unwrap();
        future::block_on(pool.wait_idle());
        let outer = soon();
        let mut job = Some(job);
        let retry = Retry::new()
            .attempts(2)
            .run(Deadline::never(), move |n| -> Attempt {
                match n {
                    1 => Box::pin(LandsAtDeadline {
                        inner: job.take().expect("attempt 1 once"),
                        deadline: outer,
                    }),
                    _ => Box::pin(async { Ok(7) }),
                }
            });
        let out: Result<Result<_, RetryError<Panicked>>, Expired> =
            future::block_on(bounded(LIMIT, outer.run(retry)));
        future::block_on(pool.wait_idle());
        let reported = std::mem::take(&mut *seen.lock().unwrap()).len();
        if matches!(out, Ok(Ok(_))) {
            late.push((round, format!("{out:?}"), reported));
        }
    }
    assert!(
        late.is_empty(),
        "{}/{ROUNDS} rounds: a success completed after the deadline was returned \
         (round, output, times the swallowed panic was reported): {:?}",
        late.len(),
        late[0]
    );
}
