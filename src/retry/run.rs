//! [`RetryRun`], the future of [`Retry::run`]: attempts, pauses and the budget, within one
//! deadline.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_lite::ready;

use crate::deadline::{self, Deadline, Expired, Sleep};

use super::{AttemptError, Retry, RetryError, ShouldRetry, Success};

pin_project_lite::pin_project! {
    /// Future for [`Retry::run()`].
    ///
    /// # Cancel safety
    ///
    /// Dropping it drops the running attempt or pause; no further attempt starts.
    ///
    /// # Panics
    ///
    /// Panics if polled again after it completed.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::deadline::Deadline;
    /// use loopguard::retry::{Retry, RetryRun};
    ///
    /// # futures_lite::future::block_on(async {
    /// let policy = Retry::new();
    /// let fut = policy.run(Deadline::never(), |n| async move { Ok::<u32, ()>(n) });
    /// println!("{fut:?}");
    /// assert_eq!(fut.await.unwrap().value, 1);
    /// # });
    /// ```
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct RetryRun<F, Fut, P, E> {
        policy: Retry<P>,
        deadline: Deadline,
        make: F,
        started: u32,
        last: Option<AttemptError<E>>,
        done: bool,
        sleep: Option<Sleep>,
        #[pin]
        attempt: Option<deadline::DeadlineRun<Fut>>,
    }
}

impl<F, Fut, P, E> RetryRun<F, Fut, P, E> {
    pub(super) fn new(policy: Retry<P>, deadline: Deadline, make: F) -> Self {
        RetryRun {
            policy,
            deadline,
            make,
            started: 0,
            last: None,
            done: false,
            sleep: None,
            attempt: None,
        }
    }
}

/// Whether a pause of `after` from now would end at or after `deadline`.
fn ends_past(deadline: Deadline, after: Duration) -> bool {
    deadline.remaining().is_some_and(|left| after >= left)
}

/// The deadline ended the retry: the last failure goes back to the caller.
fn deadline_error<E>(last: &mut Option<AttemptError<E>>, attempts: u32) -> RetryError<E> {
    RetryError::Deadline {
        attempts,
        last: last.take(),
    }
}

impl<F, Fut, P, E> fmt::Debug for RetryRun<F, Fut, P, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = if self.done {
            "done"
        } else if self.attempt.is_some() {
            "attempt"
        } else if self.sleep.is_some() {
            "backoff"
        } else {
            "idle"
        };
        f.debug_struct("RetryRun")
            .field("policy", &self.policy)
            .field("deadline", &self.deadline)
            .field("attempts", &self.started)
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

impl<F, Fut, P, T, E> Future for RetryRun<F, Fut, P, E>
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    P: ShouldRetry<E>,
{
    type Output = Result<Success<T>, RetryError<E>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        assert!(!*this.done, "`RetryRun` polled after completion");
        let deadline = *this.deadline;
        let outcome = loop {
            if let Some(running) = this.attempt.as_mut().as_pin_mut() {
                let result = ready!(running.poll(cx));
                this.attempt.set(None);
                let n = *this.started;
                let mut hint = None;
                let failure = match result {
                    // A success that lands after the deadline is too late: refused, and
                    // dropped with its `Drop` contained. A late `Err` is still returned,
                    // inside the error: no failure of an attempt is dropped on the way out.
                    Ok(Ok(value)) if deadline.is_expired() => {
                        crate::contain::drop_contained("a refused late output", value);
                        break Err(deadline_error(this.last, n));
                    }
                    Ok(Ok(value)) => break Ok(Success { value, attempts: n }),
                    Ok(Err(error)) if !this.policy.retry_if.should_retry(&error) => {
                        break Err(RetryError::NotRetryable { attempts: n, error });
                    }
                    Ok(Err(error)) => {
                        hint = this.policy.retry_if.retry_after(&error);
                        // A server that asks for longer than the policy waits is not
                        // retried: that is what it asked for, within any wait we make.
                        if hint.is_some_and(|after| after > this.policy.max_retry_after) {
                            break Err(RetryError::NotRetryable { attempts: n, error });
                        }
                        AttemptError::Failed(error)
                    }
                    Err(Expired) if deadline.is_expired() => {
                        break Err(deadline_error(this.last, n));
                    }
                    Err(Expired) => AttemptError::TimedOut,
                };
                if n >= this.policy.attempts {
                    break Err(RetryError::Exhausted {
                        attempts: n,
                        last: failure,
                    });
                }
                // A server's hint replaces the backoff step; one that ends at or after
                // the deadline ends the retry now rather than sleeping into expiry.
                let pause = match hint {
                    Some(after) if ends_past(deadline, after) => {
                        let last = Some(failure);
                        break Err(RetryError::Deadline { attempts: n, last });
                    }
                    Some(after) => after,
                    None => this.policy.backoff.pause(n - 1),
                };
                // Last: a token is spent only on a retry nothing else ruled out.
                if let Some(budget) = &this.policy.budget {
                    if !budget.withdraw() {
                        break Err(RetryError::BudgetExhausted {
                            attempts: n,
                            last: failure,
                        });
                    }
                }
                *this.last = Some(failure);
                if !pause.is_zero() {
                    *this.sleep = Some(deadline.sleep(pause));
                }
            }
            if let Some(sleep) = this.sleep.as_mut() {
                let slept = ready!(Pin::new(sleep).poll(cx));
                *this.sleep = None;
                if slept.is_err() {
                    break Err(deadline_error(this.last, *this.started));
                }
            }
            // Nothing starts after expiry.
            if deadline.is_expired() {
                break Err(deadline_error(this.last, *this.started));
            }
            *this.started += 1;
            if *this.started == 1 {
                if let Some(budget) = &this.policy.budget {
                    budget.deposit();
                }
            }
            let attempt_deadline = match this.policy.attempt_timeout {
                Some(timeout) => deadline.min(Deadline::after(timeout)),
                None => deadline,
            };
            let future = (this.make)(*this.started);
            this.attempt.set(Some(attempt_deadline.run(future)));
        };
        *this.done = true;
        Poll::Ready(outcome)
    }
}
