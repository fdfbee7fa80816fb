//! A retry budget shared by calls, on every executor and across threads: first attempts
//! deposit, retries withdraw, a retry the budget cannot pay for is not made and the call
//! ends with its last failure; the budget is not touched by calls that would not retry.
//! Attempts report themselves through counters; no sleep orders anything.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use loopguard::deadline::Deadline;
use loopguard::retry::{AttemptError, Retry, RetryBudget, RetryError};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A policy of `attempts` sharing `budget`.
fn policy(attempts: u32, budget: &RetryBudget) -> Retry {
    Retry::new()
        .attempts(attempts)
        .unwrap()
        .budget(budget.clone())
}

/// Runs one call whose attempts all fail with their number; returns how it ended and the
/// attempts it made.
async fn failing_call(policy: &Retry) -> (RetryError<u32>, u32) {
    let made = AtomicU32::new(0);
    let result = policy
        .run(Deadline::after(secs(30)), |n| {
            made.fetch_add(1, Ordering::SeqCst);
            async move { Err::<(), u32>(n) }
        })
        .await;
    (result.unwrap_err(), made.into_inner())
}

on_every_executor! {
    /// One retry in reserve: the first call retries once, then ends with its second
    /// failure in `BudgetExhausted`; the next call makes its first attempt only.
    async fn a_refused_retry_ends_with_the_last_failure() {
        let budget = RetryBudget::new(secs(1), 1, 0.0).unwrap();
        let policy = policy(3, &budget);
        let (error, made) = failing_call(&policy).await;
        assert_eq!(made, 2);
        assert_eq!(error, RetryError::BudgetExhausted { attempts: 2, last: AttemptError::Failed(2) });
        assert_eq!(error.to_string(), "retry budget exhausted after 2 attempts");
        assert_eq!(error.error(), Some(&2));
        assert!(!error.is_deadline());
        let (error, made) = failing_call(&policy).await;
        assert_eq!(made, 1);
        assert_eq!(error, RetryError::BudgetExhausted { attempts: 1, last: AttemptError::Failed(1) });
        assert_eq!(error.to_string(), "retry budget exhausted after 1 attempt");
        assert_eq!(budget.refused(), 2);
    }
}

on_every_executor! {
    /// A ratio of 1: each call's own first attempt pays for its one retry, and the call
    /// succeeds on it.
    async fn first_attempts_deposit() {
        let budget = RetryBudget::new(secs(60), 0, 1.0).unwrap();
        let policy = policy(3, &budget);
        for _ in 0..5 {
            let out = policy
                .run(Deadline::never(), |n| async move { if n < 2 { Err(n) } else { Ok(n) } })
                .await;
            assert_eq!(out.map(|s| s.attempts), Ok(2));
        }
        assert_eq!((budget.available(), budget.refused()), (0, 0));
    }
}

on_every_executor! {
    /// Calls that would not retry leave the budget alone: a success, a non-retryable
    /// error, the attempt limit, a deadline spent before the first attempt.
    async fn calls_that_would_not_retry_spend_nothing() {
        let budget = RetryBudget::new(secs(60), 0, 1.0).unwrap();
        let ok = policy(3, &budget)
            .run(Deadline::never(), |n| async move { Ok::<u32, u32>(n) })
            .await;
        assert!(ok.is_ok());
        assert_eq!(budget.available(), 1, "a first attempt deposits");
        let fatal = policy(3, &budget).retry_if(|_: &u32| false);
        let out = fatal.run(Deadline::never(), |n| async move { Err::<(), u32>(n) }).await;
        assert!(matches!(out, Err(RetryError::NotRetryable { attempts: 1, .. })));
        let once = policy(1, &budget);
        let out = once.run(Deadline::never(), |n| async move { Err::<(), u32>(n) }).await;
        assert!(matches!(out, Err(RetryError::Exhausted { attempts: 1, .. })));
        assert_eq!(budget.available(), 3, "three first attempts, no retry");
        let spent = Deadline::after(Duration::ZERO);
        let out = policy(3, &budget).run(spent, |n| async move { Err::<(), u32>(n) }).await;
        assert!(matches!(out, Err(RetryError::Deadline { attempts: 0, .. })));
        assert_eq!((budget.available(), budget.refused()), (3, 0), "no attempt, no deposit");
    }
}

/// Calls on many threads through two policies sharing one budget: every retry made was
/// paid for by a first attempt, none is paid for twice, and what is left is what was not
/// spent.
#[test]
fn clones_share_one_budget_across_threads_and_policies() {
    const THREADS: u32 = 4;
    const CALLS: u32 = 500;
    let budget = RetryBudget::new(secs(600), 0, 0.5).unwrap();
    let (a, b) = (policy(2, &budget), policy(2, &budget.clone()));
    let attempts = Arc::new(AtomicU32::new(0));
    let barrier = Arc::new(Barrier::new(THREADS as usize));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let policy = if t % 2 == 0 { a.clone() } else { b.clone() };
            let (attempts, barrier) = (attempts.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let mut retried = 0u32;
                for _ in 0..CALLS {
                    let out = futures_lite::future::block_on(policy.run(Deadline::never(), |n| {
                        attempts.fetch_add(1, Ordering::SeqCst);
                        async move { Err::<(), u32>(n) }
                    }));
                    match out.unwrap_err() {
                        RetryError::Exhausted { attempts: 2, .. } => retried += 1,
                        RetryError::BudgetExhausted { attempts: 1, .. } => {}
                        other => panic!("unexpected {other:?}"),
                    }
                }
                retried
            })
        })
        .collect();
    let retried: u32 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let calls = THREADS * CALLS;
    assert_eq!(attempts.load(Ordering::SeqCst), calls + retried);
    // Each call deposited half a retry: every one is spent or still there.
    assert_eq!(
        u64::from(retried) + budget.available(),
        u64::from(calls / 2)
    );
    assert_eq!(budget.refused(), u64::from(calls - retried));
    assert!(retried > 0);
}
