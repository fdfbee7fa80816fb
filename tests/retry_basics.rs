//! Retry within one deadline, on every executor. Attempts report themselves on a
//! channel; sleeps appear only as the thing under test (backoff, timeouts).

mod common;

use std::error::Error;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, TryRecvError};
use std::time::{Duration, Instant};

use common::{assert_elapsed_near, ready_late};
use futures_lite::future;
use loopguard::deadline::Deadline;
use loopguard::retry::{AttemptError, Backoff, Retry, RetryError, Success};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Failure {
    attempt: u32,
    retryable: bool,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "attempt {} broke", self.attempt)
    }
}

impl Error for Failure {}

fn fail(attempt: u32) -> Failure {
    Failure {
        attempt,
        retryable: true,
    }
}

/// Drains the attempt numbers reported so far.
fn reported(rx: &mpsc::Receiver<u32>) -> Vec<u32> {
    rx.try_iter().collect()
}

/// Sets its flag when dropped.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn backoff_pauses() {
    let b = Backoff::exponential(ms(10), ms(100));
    let got: Vec<_> = (0..6).map(|n| b.pause(n)).collect();
    assert_eq!(got, [ms(10), ms(20), ms(40), ms(80), ms(100), ms(100)]);
    assert_eq!(b.pause(u32::MAX), ms(100));
    assert_eq!(Backoff::exponential(ms(500), ms(100)).pause(0), ms(100));
    assert_eq!(
        Backoff::exponential(Duration::MAX, Duration::MAX).pause(3),
        Duration::MAX
    );

    let f = Backoff::fixed([ms(5), ms(7)]);
    assert_eq!(
        [f.pause(0), f.pause(1), f.pause(2), f.pause(u32::MAX)],
        [ms(5), ms(7), ms(7), ms(7)]
    );
    assert_eq!(Backoff::fixed([]).pause(0), Duration::ZERO);
    assert_eq!(Backoff::none().pause(0), Duration::ZERO);
    assert_eq!(Backoff::none().with_jitter().pause(4), Duration::ZERO);
}

#[test]
fn jitter_stays_between_half_and_full() {
    let b = Backoff::exponential(ms(100), ms(1000)).with_jitter();
    let draws: Vec<_> = (0..1000).map(|_| b.pause(1)).collect();
    assert!(draws.iter().all(|p| *p >= ms(100) && *p <= ms(200)));
    assert!(
        draws.iter().any(|p| *p != draws[0]),
        "jitter drew one value"
    );
    let huge = Backoff::fixed([Duration::MAX]).with_jitter().pause(0);
    assert!(huge >= Duration::MAX / 2);
}

#[test]
fn errors_display_and_chain() {
    let e = RetryError::Exhausted {
        attempts: 3,
        last: AttemptError::Failed(fail(3)),
    };
    assert_eq!(e.to_string(), "all 3 attempts failed");
    assert_eq!(e.attempts(), 3);
    assert!(!e.is_deadline());
    assert_eq!(e.error(), Some(&fail(3)));
    let source = e.source().expect("attempt error");
    assert_eq!(source.to_string(), "attempt failed");
    assert_eq!(
        source.source().expect("failure").to_string(),
        "attempt 3 broke"
    );

    let d: RetryError<Failure> = RetryError::Deadline {
        attempts: 1,
        last: None,
    };
    assert_eq!(d.to_string(), "deadline expired after 1 attempt");
    assert!(d.is_deadline() && d.source().is_none() && d.error().is_none());

    let n = RetryError::NotRetryable {
        attempts: 2,
        error: fail(2),
    };
    assert_eq!(n.to_string(), "attempt 2 failed and is not retried");
    assert_eq!(n.source().expect("error").to_string(), "attempt 2 broke");
    assert_eq!(
        AttemptError::<Failure>::TimedOut.to_string(),
        "attempt timed out"
    );
}

#[test]
fn zero_attempt_timeout_is_refused_not_clamped() {
    let err = Retry::new().attempt_timeout(Duration::ZERO).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert_eq!(
        err.to_string(),
        "a retry's attempt timeout must be more than zero"
    );
    // The smallest limit that can be honoured is taken as given.
    let tiny = Retry::new()
        .attempt_timeout(Duration::from_nanos(1))
        .unwrap();
    assert!(format!("{tiny:?}").contains("attempt_timeout: Some(1ns)"));
}

#[test]
fn zero_attempts_are_refused_not_clamped() {
    let err = Retry::new().attempts(0).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert_eq!(
        err.to_string(),
        "a retry's attempts must be at least 1, not 0"
    );
    // The default makes three.
    assert!(format!("{:?}", Retry::new()).contains("attempts: 3"));
}

#[test]
fn policy_is_debug_clone_and_futures_are_send() {
    fn send<T: Send>(_: &T) {}
    let policy = Retry::new()
        .attempts(1)
        .unwrap()
        .retry_if(|e: &Failure| e.retryable);
    let text = format!("{:?}", policy.clone());
    assert!(text.contains("attempts: 1"), "{text}");
    let fut = policy.run(Deadline::never(), |n| async move { Err::<(), _>(fail(n)) });
    send(&fut);
    assert!(format!("{fut:?}").contains("idle"));
}

on_every_executor!(transient_failures_then_success, async {
    let (tx, rx) = mpsc::channel();
    let out = Retry::new()
        .attempts(5)
        .unwrap()
        .backoff(Backoff::fixed([ms(5)]))
        .run(Deadline::after(Duration::from_secs(10)), move |n| {
            tx.send(n).expect("receiver alive");
            async move { if n < 3 { Err(fail(n)) } else { Ok(n * 10) } }
        })
        .await;
    assert_eq!(
        out,
        Ok(Success {
            value: 30,
            attempts: 3
        })
    );
    assert_eq!(reported(&rx), [1, 2, 3]);
});

on_every_executor!(persistent_failures_are_exhausted, async {
    let (tx, rx) = mpsc::channel();
    let start = Instant::now();
    let out = Retry::new()
        .attempts(3)
        .unwrap()
        .backoff(Backoff::fixed([ms(20)]))
        .run(Deadline::after(Duration::from_secs(10)), move |n| {
            tx.send(n).expect("receiver alive");
            async move { Err::<(), _>(fail(n)) }
        })
        .await;
    assert_eq!(
        out,
        Err(RetryError::Exhausted {
            attempts: 3,
            last: AttemptError::Failed(fail(3))
        })
    );
    assert!(start.elapsed() >= ms(40), "two pauses were skipped");
    assert_eq!(reported(&rx), [1, 2, 3]);

    // `attempts(1)` makes one attempt and no retry.
    let out = Retry::new()
        .attempts(1)
        .unwrap()
        .run(Deadline::never(), |n| async move { Err::<(), _>(fail(n)) })
        .await;
    assert_eq!(out.map_err(|e| e.attempts()), Err(1));
});

on_every_executor!(non_retryable_error_stops_at_once, async {
    let (tx, rx) = mpsc::channel();
    let out = Retry::new()
        .attempts(10)
        .unwrap()
        .retry_if(|e: &Failure| e.retryable)
        .run(Deadline::after(Duration::from_secs(10)), move |n| {
            tx.send(n).expect("receiver alive");
            async move {
                Err::<(), _>(Failure {
                    attempt: n,
                    retryable: n < 2,
                })
            }
        })
        .await;
    let want = Failure {
        attempt: 2,
        retryable: false,
    };
    assert_eq!(
        out,
        Err(RetryError::NotRetryable {
            attempts: 2,
            error: want
        })
    );
    assert_eq!(reported(&rx), [1, 2]);
});

on_every_executor!(
    attempt_timeouts_then_deadline_cuts_the_second_pause,
    async {
        // 0-200 attempt 1 times out, 200-500 pause, 500-700 attempt 2 times out,
        // 700-1000 pause, cut by the deadline at 900: exactly two attempts.
        let (tx, rx) = mpsc::channel();
        let start = Instant::now();
        let out = Retry::new()
            .attempts(10)
            .unwrap()
            .attempt_timeout(ms(200))
            .unwrap()
            .backoff(Backoff::fixed([ms(300)]))
            .run(Deadline::after(ms(900)), move |n| {
                tx.send(n).expect("receiver alive");
                future::pending::<Result<(), Failure>>()
            })
            .await;
        assert_eq!(
            out,
            Err(RetryError::Deadline {
                attempts: 2,
                last: Some(AttemptError::TimedOut)
            })
        );
        assert_elapsed_near(start, ms(900));
        assert_eq!(reported(&rx), [1, 2]);
    }
);

on_every_executor!(no_attempt_after_expiry, async {
    // Expired before the first attempt: the closure is never called.
    let (tx, rx) = mpsc::channel();
    let out = Retry::new()
        .run(Deadline::at(Instant::now()), move |n| {
            tx.send(n).expect("receiver alive");
            async move { Ok::<_, Failure>(n) }
        })
        .await;
    assert_eq!(
        out,
        Err(RetryError::Deadline {
            attempts: 0,
            last: None
        })
    );
    assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));

    // Attempts that fail slowly: the one running when the deadline passes is the last.
    let (tx, rx) = mpsc::channel();
    let deadline = Deadline::after(ms(100));
    let out = Retry::new()
        .attempts(1000)
        .unwrap()
        .run(deadline, move |n| {
            tx.send(n).expect("receiver alive");
            ready_late(Instant::now() + ms(30), Err::<(), _>(fail(n)))
        })
        .await;
    let started = reported(&rx);
    let err = out.expect_err("cannot succeed");
    assert!(err.is_deadline(), "{err:?}");
    assert_eq!(err.attempts() as usize, started.len());
    assert!((1..=4).contains(&started.len()), "{started:?}");
});

on_every_executor!(deadline_cuts_a_running_attempt, async {
    let start = Instant::now();
    let out = Retry::new()
        .run(Deadline::after(ms(100)), |_| {
            future::pending::<Result<(), Failure>>()
        })
        .await;
    assert_eq!(
        out,
        Err(RetryError::Deadline {
            attempts: 1,
            last: None
        })
    );
    assert_elapsed_near(start, ms(100));
});

on_every_executor!(late_success_is_not_success, async {
    let deadline = Deadline::after(ms(50));
    let at = deadline.instant().expect("a real deadline");
    let out = Retry::new()
        .run(deadline, move |n| {
            ready_late(at + ms(20), Ok::<_, Failure>(n))
        })
        .await;
    assert_eq!(
        out,
        Err(RetryError::Deadline {
            attempts: 1,
            last: None
        })
    );

    // The same with an attempt timeout longer than what is left.
    let deadline = Deadline::after(ms(50));
    let at = deadline.instant().expect("a real deadline");
    let out = Retry::new()
        .attempt_timeout(Duration::from_secs(5))
        .unwrap()
        .run(deadline, move |n| ready_late(at, Ok::<_, Failure>(n)))
        .await;
    assert!(out.expect_err("late").is_deadline());
});

on_every_executor!(dropping_during_backoff_starts_no_attempt, async {
    let (tx, rx) = mpsc::channel();
    let mut fut = Box::pin(
        Retry::new()
            .attempts(5)
            .unwrap()
            .backoff(Backoff::fixed([ms(150)]))
            .run(Deadline::after(Duration::from_secs(10)), move |n| {
                tx.send(n).expect("receiver alive");
                async move { Err::<(), _>(fail(n)) }
            }),
    );
    // One poll runs attempt 1 (it fails at once) and parks in the pause.
    assert!(future::poll_once(fut.as_mut()).await.is_none());
    assert_eq!(rx.try_recv(), Ok(1));
    assert!(format!("{fut:?}").contains("backoff"));
    drop(fut);
    // The closure went with the future: nothing can start another attempt.
    assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    async_io::Timer::after(ms(300)).await; // longer than the pause
    assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
});

on_every_executor!(dropping_during_an_attempt_drops_it, async {
    let (tx, rx) = mpsc::channel();
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = dropped.clone();
    let mut fut = Box::pin(Retry::new().run(Deadline::never(), move |n| {
        tx.send(n).expect("receiver alive");
        let guard = DropFlag(flag.clone());
        async move {
            let _guard = guard;
            future::pending::<Result<(), Failure>>().await
        }
    }));
    assert!(future::poll_once(fut.as_mut()).await.is_none());
    assert_eq!(rx.try_recv(), Ok(1));
    assert!(!dropped.load(Ordering::SeqCst));
    drop(fut);
    assert!(dropped.load(Ordering::SeqCst), "attempt kept running");
    assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
});
