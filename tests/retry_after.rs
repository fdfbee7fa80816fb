//! A retry rule that says "retry after D", on every executor: the hint replaces the backoff
//! step, and one that lands at or after the deadline ends the retry at once with the
//! deadline outcome instead of a sleep into expiry.

mod common;

use std::time::{Duration, Instant};

use common::{SLACK, assert_elapsed_near, bounded};
use loopguard::deadline::Deadline;
use loopguard::retry::{
    AttemptError, Backoff, BoxedRule, Decision, Retry, RetryError, ShouldRetry,
};

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
            .attempts(3).unwrap()
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
        let policy = Retry::new().attempts(2).unwrap().decide(decide);
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
            .attempts(5).unwrap()
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
        let policy = Retry::new().attempts(5).unwrap().decide(decide);
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
        let policy = Retry::new().attempts(3).unwrap().backoff(Backoff::fixed([ms(80)])).decide(decide);
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
            .attempts(3).unwrap()
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
        let policy = Retry::new().attempts(3).unwrap().retry_if_rule(OwnRule);
        let start = Instant::now();
        let error = refused(Some(Duration::from_secs(60)));
        let (result, _) = run_with(&policy, Deadline::after(Duration::from_secs(1)), vec![error]).await;
        assert!(matches!(result, Err(RetryError::Deadline { attempts: 1, .. })), "{result:?}");
        assert!(start.elapsed() < ms(500));

        // Boxed, the rule still gives its hint (and its verdict).
        let boxed: Retry<BoxedRule<Refused>> = Retry::new().attempts(3).unwrap().retry_if_rule(OwnRule).boxed();
        let start = Instant::now();
        let error = refused(Some(Duration::from_secs(60)));
        let (result, _) = run_with(&boxed, Deadline::after(Duration::from_secs(1)), vec![error]).await;
        assert!(matches!(result, Err(RetryError::Deadline { attempts: 1, .. })), "{result:?}");
        assert!(start.elapsed() < ms(500));
        let fatal = Refused { retry_after: None, retryable: false };
        let (result, _) = run_with(&boxed, Deadline::never(), vec![fatal.clone()]).await;
        assert_eq!(result, Err(RetryError::NotRetryable { attempts: 1, error: fatal }));

        // A closure rule has no hint: the (empty) backoff decides, and the retry succeeds.
        let closure = Retry::new().attempts(3).unwrap().retry_if(|e: &Refused| e.retryable);
        let error = refused(Some(Duration::from_secs(60)));
        let (result, _) = run_with(&closure, Deadline::after(Duration::from_secs(1)), vec![error]).await;
        assert_eq!(result, Ok(2));
    }
}

on_every_executor! {
    /// The default cap: a server that asks for a minute and a second (or for a date 68
    /// years ahead, as `header::retry_after` reads it) is not retried, and nothing sleeps,
    /// even with no deadline at all; a minute exactly is within the cap.
    async fn a_hint_beyond_the_default_cap_is_not_retried() {
        let policy = Retry::new().attempts(3).unwrap().decide(decide);
        let far = std::time::SystemTime::now() + Duration::from_secs(68 * 365 * 86_400);
        let date = loopguard::header::retry_after(httpdate::fmt_http_date(far).as_bytes());
        assert!(date.unwrap() > Duration::from_secs(2_000_000_000));
        for hint in [Duration::from_secs(61), date.unwrap(), Duration::MAX] {
            let start = Instant::now();
            let error = refused(Some(hint));
            // Bounded: a hint slept in full would never end.
            let run = run_with(&policy, Deadline::never(), vec![error.clone()]);
            let (result, starts) = bounded(Duration::from_secs(5), run).await;
            assert_eq!(result, Err(RetryError::NotRetryable { attempts: 1, error }));
            assert_eq!(starts.len(), 1);
            assert!(start.elapsed() < SLACK, "waited {:?}", start.elapsed());
        }
        // At the cap, honoured: the retry would sleep a minute, so the deadline ends it.
        let error = refused(Some(Duration::from_secs(60)));
        let (result, _) = run_with(&policy, Deadline::after(ms(50)), vec![error]).await;
        assert!(matches!(result, Err(RetryError::Deadline { attempts: 1, .. })), "{result:?}");
    }
}

on_every_executor! {
    /// A cap of one's own: a hint up to it is slept, one beyond it ends the retry, on the
    /// first attempt or a later one, whatever the attempt limit.
    async fn a_hint_up_to_the_cap_is_slept_and_beyond_it_ends_the_retry() {
        let policy = Retry::new().attempts(5).unwrap().max_retry_after(ms(60)).decide(decide);
        let errors = vec![refused(Some(ms(60))), refused(Some(ms(61)))];
        let start = Instant::now();
        let (result, starts) = run_with(&policy, Deadline::never(), errors.clone()).await;
        assert_eq!(result, Err(RetryError::NotRetryable { attempts: 2, error: errors[1].clone() }));
        assert_eq!(starts.len(), 2);
        let pause = starts[1] - starts[0];
        assert!(pause >= ms(60) && pause < ms(60) + SLACK, "paused {pause:?}");
        assert!(start.elapsed() < ms(60) + SLACK);
        // On the last attempt too: "do not retry" is said, not "exhausted".
        let last = Retry::new().attempts(1).unwrap().max_retry_after(ms(60)).decide(decide);
        let (result, _) = run_with(&last, Deadline::never(), vec![errors[1].clone()]).await;
        assert!(matches!(result, Err(RetryError::NotRetryable { attempts: 1, .. })), "{result:?}");
        // A zero cap retries only on zero hints.
        let zero = Retry::new().attempts(3).unwrap().max_retry_after(Duration::ZERO).decide(decide);
        let (result, _) = run_with(&zero, Deadline::never(), vec![refused(Some(Duration::ZERO))]).await;
        assert_eq!(result, Ok(2));
    }
}

/// A gRPC answer: `UNAVAILABLE`, with the server's `grpc-retry-pushback-ms` if it sent one.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Unavailable {
    pushback: Option<&'static [u8]>,
}

fn pushback(e: &Unavailable) -> Decision {
    e.pushback
        .map_or(Decision::Retry, loopguard::header::retry_pushback)
}

on_every_executor! {
    /// Server pushback through a rule: a delay replaces the backoff, a negative value or
    /// garbage is "do not retry", no pushback leaves the backoff to decide.
    async fn server_pushback_decides_the_retry() {
        let policy = Retry::new()
            .attempts(3).unwrap()
            .backoff(Backoff::fixed([Duration::from_secs(5)]))
            .decide(pushback);
        let start = Instant::now();
        let result = policy
            .run(Deadline::never(), |n| async move {
                if n == 1 { Err(Unavailable { pushback: Some(b"40") }) } else { Ok(n) }
            })
            .await;
        assert_eq!(result.map(|s| s.value), Ok(2));
        assert!(start.elapsed() >= ms(40) && start.elapsed() < ms(40) + SLACK);
        for stop in [&b"-1"[..], b"abc", b"10, 20"] {
            let start = Instant::now();
            let error = Unavailable { pushback: Some(stop) };
            let result = policy.run(Deadline::never(), |_| async { Err::<(), _>(error.clone()) }).await;
            assert_eq!(result, Err(RetryError::NotRetryable { attempts: 1, error: error.clone() }));
            assert!(start.elapsed() < SLACK);
        }
        // No pushback: the 5 s backoff would be slept, so a 50 ms deadline ends the retry.
        let result = policy
            .run(Deadline::after(ms(50)), |_| async { Err::<(), _>(Unavailable { pushback: None }) })
            .await;
        assert!(matches!(result, Err(RetryError::Deadline { attempts: 1, .. })), "{result:?}");
    }
}
