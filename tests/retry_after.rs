//! A retry rule that says "retry after D", on every executor: the hint replaces the backoff
//! step, and one that lands at or after the deadline ends the retry at once with the
//! deadline outcome instead of a sleep into expiry.

mod common;

use std::time::{Duration, Instant};

use common::{SLACK, assert_elapsed_near};
use loopguard::deadline::Deadline;
use loopguard::retry::{AttemptError, Backoff, Decision, Retry, RetryError, ShouldRetry};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A refused attempt, with the server's `Retry-After` if it sent one.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Refused {
    retry_after: Option<Duration>,
    retryable: bool,
}

fn refused(retry_after: Option<Duration>) -> Refused {
    Refused {
        retry_after,
        retryable: true,
    }
}

fn decide(e: &Refused) -> Decision {
    match (e.retryable, e.retry_after) {
        (false, _) => Decision::Stop,
        (true, Some(after)) => Decision::RetryAfter(after),
        (true, None) => Decision::Retry,
    }
}

/// Runs `policy` with attempts that fail with `errors[n - 1]` and then succeed; returns the
/// result and the instants at which attempts started.
async fn run_with<R: ShouldRetry<Refused> + Clone>(
    policy: &Retry<R>,
    deadline: Deadline,
    errors: Vec<Refused>,
) -> (Result<u32, RetryError<Refused>>, Vec<Instant>) {
    let starts = std::cell::RefCell::new(Vec::new());
    let result = policy
        .run(deadline, |n| {
            starts.borrow_mut().push(Instant::now());
            let outcome = match errors.get(n as usize - 1) {
                Some(error) => Err(error.clone()),
                None => Ok(n),
            };
            async move { outcome }
        })
        .await
        .map(|done| done.value);
    (result, starts.into_inner())
}

on_every_executor! {
    /// A 20 ms hint is used instead of a 2 s backoff step.
    async fn the_hint_replaces_the_backoff_step() {
        let policy = Retry::new()
            .attempts(3)
            .backoff(Backoff::fixed([Duration::from_secs(2)]))
            .decide(decide);
        let (result, starts) =
            run_with(&policy, Deadline::after(Duration::from_secs(10)), vec![refused(Some(ms(20)))]).await;
        assert_eq!(result, Ok(2));
        let pause = starts[1] - starts[0];
        assert!(pause >= ms(20) && pause < ms(20) + SLACK, "paused {pause:?}");
    }
}

on_every_executor! {
    /// With no backoff at all, a hint still makes the client wait as told.
    async fn a_hint_is_honoured_without_a_backoff() {
        let policy = Retry::new().attempts(2).decide(decide);
        let (result, starts) = run_with(&policy, Deadline::never(), vec![refused(Some(ms(100)))]).await;
        assert_eq!(result, Ok(2));
        let pause = starts[1] - starts[0];
        assert!(pause >= ms(100) && pause < ms(100) + SLACK, "paused {pause:?}");
    }
}

on_every_executor! {
    /// The server says 5 s, the budget is 300 ms: the retry ends at once with the deadline
    /// outcome and the last failure, without sleeping.
    async fn a_hint_past_the_deadline_ends_the_retry_at_once() {
        let policy = Retry::new()
            .attempts(5)
            .backoff(Backoff::fixed([ms(10)]))
            .decide(decide);
        let start = Instant::now();
        let error = refused(Some(Duration::from_secs(5)));
        let (result, starts) =
            run_with(&policy, Deadline::after(ms(300)), vec![error.clone(); 5]).await;
        assert_eq!(
            result,
            Err(RetryError::Deadline { attempts: 1, last: Some(AttemptError::Failed(error)) })
        );
        assert_eq!(starts.len(), 1);
        assert!(start.elapsed() < ms(150), "waited {:?}", start.elapsed());
    }
}

on_every_executor! {
    /// A hint that fits is slept, and the next hint that does not ends the retry: the
    /// retry ends about 100 ms in, not at the 400 ms deadline.
    async fn a_fitting_hint_then_one_past_the_deadline() {
        let policy = Retry::new().attempts(5).decide(decide);
        let start = Instant::now();
        let errors = vec![refused(Some(ms(100))), refused(Some(ms(1000)))];
        let (result, starts) = run_with(&policy, Deadline::after(ms(400)), errors).await;
        assert!(matches!(result, Err(RetryError::Deadline { attempts: 2, last: Some(_) })), "{result:?}");
        assert_eq!(starts.len(), 2);
        assert_elapsed_near(start, ms(100));
    }
}

on_every_executor! {
    /// No hint: the backoff decides; `Stop` ends the retry as not retryable.
    async fn without_a_hint_the_backoff_decides() {
        let policy = Retry::new().attempts(3).backoff(Backoff::fixed([ms(80)])).decide(decide);
        let (result, starts) = run_with(&policy, Deadline::never(), vec![refused(None)]).await;
        assert_eq!(result, Ok(2));
        let pause = starts[1] - starts[0];
        assert!(pause >= ms(80) && pause < ms(80) + SLACK, "paused {pause:?}");

        let fatal = Refused { retry_after: Some(ms(1)), retryable: false };
        let (result, starts) = run_with(&policy, Deadline::never(), vec![fatal.clone()]).await;
        assert_eq!(result, Err(RetryError::NotRetryable { attempts: 1, error: fatal }));
        assert_eq!(starts.len(), 1);
    }
}

on_every_executor! {
    /// A zero hint retries at once; the attempt limit still ends the retry.
    async fn a_zero_hint_retries_at_once_within_the_attempt_limit() {
        let policy = Retry::new()
            .attempts(3)
            .backoff(Backoff::fixed([Duration::from_secs(5)]))
            .decide(decide);
        let start = Instant::now();
        let error = refused(Some(Duration::ZERO));
        let (result, starts) = run_with(&policy, Deadline::never(), vec![error.clone(); 3]).await;
        assert_eq!(result, Err(RetryError::Exhausted { attempts: 3, last: AttemptError::Failed(error) }));
        assert_eq!(starts.len(), 3);
        assert!(start.elapsed() < SLACK, "waited {:?}", start.elapsed());
    }
}

/// A rule of one's own: `ShouldRetry::retry_after` is honoured like a `Decision`.
#[derive(Clone)]
struct OwnRule;

impl ShouldRetry<Refused> for OwnRule {
    fn should_retry(&self, error: &Refused) -> bool {
        error.retryable
    }

    fn retry_after(&self, error: &Refused) -> Option<Duration> {
        error.retry_after
    }
}

on_every_executor! {
    async fn an_own_rule_gives_the_hint() {
        let policy = Retry::new().attempts(3).retry_if_rule(OwnRule);
        let start = Instant::now();
        let error = refused(Some(Duration::from_secs(60)));
        let (result, _) = run_with(&policy, Deadline::after(Duration::from_secs(1)), vec![error]).await;
        assert!(matches!(result, Err(RetryError::Deadline { attempts: 1, .. })), "{result:?}");
        assert!(start.elapsed() < ms(500));

        // A closure rule has no hint: the (empty) backoff decides, and the retry succeeds.
        let closure = Retry::new().attempts(3).retry_if(|e: &Refused| e.retryable);
        let error = refused(Some(Duration::from_secs(60)));
        let (result, _) = run_with(&closure, Deadline::after(Duration::from_secs(1)), vec![error]).await;
        assert_eq!(result, Ok(2));
    }
}
