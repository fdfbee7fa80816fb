//! Retries inside one deadline.
//!
//! A [`Retry`] policy says how many attempts to make, how long to pause between them
//! ([`Backoff`]), how long one attempt may take, and which errors are worth another
//! try. [`Retry::run()`] spends a single [`Deadline`] on all of it:
//!
//! - no attempt starts once the deadline has passed;
//! - a backoff pause is cut at the deadline, and then no further attempt starts;
//! - an attempt whose result lands at or after the deadline is not a success;
//! - a server's "retry after D" (see [`Retry::decide`]) replaces the backoff step, and if
//!   it would land at or after the deadline the retry ends at once, without sleeping.
//!
//! Like every deadline in this crate, expiry is cooperative: it is seen when the
//! retry future is polled, never by interrupting an attempt's thread.
//!
//! # Failures that are retried
//!
//! A failure your rule retries is consumed by the retry: the rule saw it, and only the last
//! attempt's failure is returned (in [`RetryError`]). That includes a failure a loopguard
//! hand-off gave an attempt (a [`Job`](crate::pool::Job) that panicked): retried, it is not
//! reported to an orphan handler. A failure that ends the retry is returned, even past the
//! deadline; a *success* that lands after the deadline is refused (the retry ends with
//! [`RetryError::Deadline`]) and dropped.
//!
//! So an attempt must say "failed" with its `Err`: a failure carried inside a success (a
//! [`Fallible`](crate::Fallible) job's `Err` in `Ok(Err(e))`) is a success to `Retry`,
//! and dropped with it when late. Map it into the attempt's error, as the example of
//! [`Retry::run`] does with a job's outcome; a hand-off inside the attempt
//! ([`Pool::run_within`](crate::pool::Pool::run_within)) reports what *it* refuses.
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use loopguard::deadline::Deadline;
//! use loopguard::retry::{Backoff, Retry};
//!
//! # futures_lite::future::block_on(async {
//! let policy = Retry::new()
//!     .attempts(4)
//!     .backoff(Backoff::exponential(Duration::from_millis(1), Duration::from_millis(8)))
//!     .attempt_timeout(Duration::from_millis(300));
//! let deadline = Deadline::after(Duration::from_secs(1));
//!
//! let done = policy
//!     .run(deadline, |attempt| async move {
//!         if attempt < 3 { Err("busy") } else { Ok(attempt * 10) }
//!     })
//!     .await
//!     .unwrap();
//! assert_eq!((done.value, done.attempts), (30, 3));
//! # });
//! ```

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_lite::ready;

use crate::deadline::{self, Deadline, Expired, Sleep};

/// Whether a pause of `after` from now would end at or after `deadline`.
fn ends_past(deadline: Deadline, after: Duration) -> bool {
    deadline.remaining().is_some_and(|left| after >= left)
}

mod backoff;
mod rule;

pub use backoff::Backoff;
pub use rule::{AlwaysRetry, Decide, Decision, ShouldRetry};

/// A retry policy: attempts, backoff, per-attempt timeout and which errors to retry.
///
/// Build it once and share it: [`Retry::run()`] borrows it.
///
/// # Examples
///
/// ```
/// use std::io;
/// use std::time::Duration;
/// use loopguard::retry::{Backoff, Retry};
///
/// let policy = Retry::new()
///     .attempts(5)
///     .backoff(Backoff::fixed([Duration::from_millis(50), Duration::from_millis(200)]))
///     .retry_if(|e: &io::Error| e.kind() != io::ErrorKind::InvalidInput);
/// let _copy = policy.clone();
/// ```
#[derive(Clone)]
pub struct Retry<P = AlwaysRetry> {
    attempts: u32,
    backoff: Backoff,
    attempt_timeout: Option<Duration>,
    retry_if: P,
}

impl Retry {
    /// Three attempts, no backoff, no per-attempt timeout, every error retried.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::retry::Retry;
    ///
    /// let policy = Retry::new();
    /// # let _ = policy;
    /// ```
    pub fn new() -> Retry {
        Retry {
            attempts: 3,
            backoff: Backoff::none(),
            attempt_timeout: None,
            retry_if: AlwaysRetry,
        }
    }
}

impl Default for Retry {
    fn default() -> Retry {
        Retry::new()
    }
}

impl<P> fmt::Debug for Retry<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Retry")
            .field("attempts", &self.attempts)
            .field("backoff", &self.backoff)
            .field("attempt_timeout", &self.attempt_timeout)
            .finish_non_exhaustive()
    }
}

impl<P> Retry<P> {
    /// The most attempts to make, the first one included.
    ///
    /// At least one attempt is always allowed: `0` is taken as `1`.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::retry::Retry;
    ///
    /// let once = Retry::new().attempts(0); // same as `.attempts(1)`
    /// # let _ = once;
    /// ```
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts.max(1);
        self
    }

    /// The pauses between attempts.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loopguard::retry::{Backoff, Retry};
    ///
    /// let policy = Retry::new().backoff(Backoff::fixed([Duration::from_millis(100)]));
    /// # let _ = policy;
    /// ```
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// A limit for each attempt: an attempt runs within
    /// `min(deadline, start of attempt + timeout)`.
    ///
    /// An attempt cut by this limit ends as [`AttemptError::TimedOut`], which is
    /// always retried. One cut by the overall deadline ends the retry instead.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loopguard::retry::Retry;
    ///
    /// let policy = Retry::new().attempt_timeout(Duration::from_millis(250));
    /// # let _ = policy;
    /// ```
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = Some(timeout);
        self
    }

    /// Which errors deserve another attempt; the others end the retry at once with
    /// [`RetryError::NotRetryable`]. By default every error is retried.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::retry::Retry;
    ///
    /// #[derive(Debug)]
    /// struct HttpError { status: u16 }
    ///
    /// let policy = Retry::new().retry_if(|e: &HttpError| e.status >= 500);
    /// # let _ = policy;
    /// ```
    pub fn retry_if<E, Q>(self, rule: Q) -> Retry<Q>
    where
        Q: Fn(&E) -> bool,
    {
        self.retry_if_rule(rule)
    }

    /// Like [`retry_if`](Retry::retry_if), with a rule that can also say when to retry: a
    /// [`Decision::RetryAfter`] (a server's `Retry-After`, from
    /// [`header::retry_after`](crate::header::retry_after)) replaces the backoff's pause,
    /// and ends the retry at once with [`RetryError::Deadline`] if it would end at or after
    /// the deadline: no sleep that can only end in expiry.
    ///
    /// The rule is asked twice about an error it retries (whether, then when): keep it a
    /// plain function of the error. Under [`Deadline::never`] a hint is slept in full,
    /// however long the server asked for: give calls that honour servers' hints a deadline.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use loopguard::deadline::Deadline;
    /// use loopguard::retry::{Decision, Retry, RetryError};
    ///
    /// /// A 503 with the server's `Retry-After`, read with `loopguard::header::retry_after`.
    /// #[derive(Debug)]
    /// struct Unavailable { retry_after: Option<Duration> }
    ///
    /// let policy = Retry::new().attempts(3).decide(|e: &Unavailable| {
    ///     e.retry_after.map_or(Decision::Retry, Decision::RetryAfter)
    /// });
    /// # futures_lite::future::block_on(async {
    /// // The server asks for 5 s; the budget is 1 s: the retry ends at once.
    /// let start = Instant::now();
    /// let result = policy
    ///     .run(Deadline::after(Duration::from_secs(1)), |_| async {
    ///         Err::<(), _>(Unavailable { retry_after: Some(Duration::from_secs(5)) })
    ///     })
    ///     .await;
    /// assert!(matches!(result, Err(RetryError::Deadline { attempts: 1, .. })));
    /// assert!(start.elapsed() < Duration::from_millis(500));
    /// # });
    /// ```
    pub fn decide<E, Q>(self, rule: Q) -> Retry<Decide<Q>>
    where
        Q: Fn(&E) -> Decision,
    {
        self.retry_if_rule(Decide::new(rule))
    }

    /// Like [`retry_if`](Retry::retry_if), with any [`ShouldRetry`] rule (one of your own
    /// that implements [`ShouldRetry::retry_after`], for instance).
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::retry::{AlwaysRetry, Retry};
    ///
    /// let policy = Retry::new().retry_if_rule(AlwaysRetry);
    /// # let _ = policy;
    /// ```
    pub fn retry_if_rule<R>(self, rule: R) -> Retry<R> {
        Retry {
            attempts: self.attempts,
            backoff: self.backoff,
            attempt_timeout: self.attempt_timeout,
            retry_if: rule,
        }
    }

    /// Runs `attempt` under this policy, all within `deadline`.
    ///
    /// `attempt` is called with the attempt number, starting at `1`, each time an
    /// attempt starts, and never once `deadline` has passed.
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned future drops the running attempt, or the pause, at its
    /// current await point; no further attempt starts.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loopguard::deadline::Deadline;
    /// use loopguard::retry::{Retry, RetryError};
    ///
    /// # futures_lite::future::block_on(async {
    /// let result = Retry::new()
    ///     .attempts(2)
    ///     .run(Deadline::after(Duration::from_secs(1)), |_| async { Err::<(), _>("down") })
    ///     .await;
    /// assert!(matches!(result, Err(RetryError::Exhausted { attempts: 2, .. })));
    ///
    /// // A pool job as the attempt: its failure (a panic, or a `Fallible` job's `Err`) is
    /// // the attempt's error, so a late one is returned rather than dropped.
    /// let pool = loopguard::pool::Pool::builder().build().unwrap();
    /// let deadline = Deadline::after(Duration::from_secs(1));
    /// let rows = Retry::new()
    ///     .run(deadline, |_| {
    ///         let walk = pool.run_within(deadline, loopguard::Fallible(|| Ok::<u32, String>(7)));
    ///         async move { walk.await.map_err(|e| e.to_string())? }
    ///     })
    ///     .await;
    /// assert_eq!(rows.unwrap().value, 7);
    /// # });
    /// ```
    pub fn run<T, E, F, Fut>(&self, deadline: Deadline, attempt: F) -> Run<F, Fut, P, E>
    where
        P: ShouldRetry<E> + Clone,
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        Run {
            policy: self.clone(),
            deadline,
            make: attempt,
            started: 0,
            last: None,
            done: false,
            sleep: None,
            attempt: None,
        }
    }
}

/// A successful retry: the value and the number of attempts it took.
///
/// # Examples
///
/// ```
/// use loopguard::retry::Success;
///
/// let s = Success { value: "ok", attempts: 2 };
/// assert_eq!(s.attempts, 2);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Success<T> {
    /// What the successful attempt returned.
    pub value: T,
    /// Attempts started, the successful one included.
    pub attempts: u32,
}

/// How one attempt failed.
///
/// # Examples
///
/// ```
/// use loopguard::retry::AttemptError;
///
/// let e: AttemptError<&str> = AttemptError::TimedOut;
/// assert_eq!(e.to_string(), "attempt timed out");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AttemptError<E> {
    /// The attempt returned an error.
    Failed(E),
    /// The attempt ran out of its own timeout ([`Retry::attempt_timeout()`]).
    TimedOut,
}

impl<E> fmt::Display for AttemptError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AttemptError::Failed(_) => "attempt failed",
            AttemptError::TimedOut => "attempt timed out",
        })
    }
}

impl<E: Error + 'static> Error for AttemptError<E> {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            AttemptError::Failed(e) => Some(e),
            AttemptError::TimedOut => None,
        }
    }
}

/// Why a retry ended without success.
///
/// `attempts` always counts the attempts that were started.
///
/// # Examples
///
/// ```
/// use loopguard::retry::{AttemptError, RetryError};
///
/// let e: RetryError<&str> = RetryError::Deadline { attempts: 2, last: Some(AttemptError::TimedOut) };
/// assert!(e.is_deadline());
/// assert_eq!(e.attempts(), 2);
/// assert_eq!(e.to_string(), "deadline expired after 2 attempts");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RetryError<E> {
    /// The deadline passed: before an attempt could start, during a pause, or while an
    /// attempt ran (a result that came at or after the deadline is dropped).
    Deadline {
        /// Attempts started, the one the deadline cut included.
        attempts: u32,
        /// How the last attempt that ended before the deadline failed, if any did.
        last: Option<AttemptError<E>>,
    },
    /// Every allowed attempt failed with a retryable error.
    Exhausted {
        /// Attempts started: the policy's limit.
        attempts: u32,
        /// How the last attempt failed.
        last: AttemptError<E>,
    },
    /// An attempt failed with an error the policy does not retry.
    NotRetryable {
        /// Attempts started, the failing one included.
        attempts: u32,
        /// The error.
        error: E,
    },
}

impl<E> RetryError<E> {
    /// The number of attempts that were started.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::retry::RetryError;
    ///
    /// assert_eq!(RetryError::NotRetryable { attempts: 1, error: "bad" }.attempts(), 1);
    /// ```
    pub fn attempts(&self) -> u32 {
        match self {
            RetryError::Deadline { attempts, .. }
            | RetryError::Exhausted { attempts, .. }
            | RetryError::NotRetryable { attempts, .. } => *attempts,
        }
    }

    /// Whether the deadline ended the retry.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::retry::RetryError;
    ///
    /// assert!(RetryError::<()>::Deadline { attempts: 0, last: None }.is_deadline());
    /// ```
    pub fn is_deadline(&self) -> bool {
        matches!(self, RetryError::Deadline { .. })
    }

    /// The error returned by the last failed attempt, if it returned one.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::retry::{AttemptError, RetryError};
    ///
    /// let e = RetryError::Exhausted { attempts: 3, last: AttemptError::Failed("down") };
    /// assert_eq!(e.error(), Some(&"down"));
    /// ```
    pub fn error(&self) -> Option<&E> {
        match self {
            RetryError::Deadline {
                last: Some(AttemptError::Failed(e)),
                ..
            }
            | RetryError::Exhausted {
                last: AttemptError::Failed(e),
                ..
            }
            | RetryError::NotRetryable { error: e, .. } => Some(e),
            _ => None,
        }
    }
}

impl<E> fmt::Display for RetryError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.attempts();
        let s = if n == 1 { "" } else { "s" };
        match self {
            RetryError::Deadline { .. } => write!(f, "deadline expired after {n} attempt{s}"),
            RetryError::Exhausted { .. } => write!(f, "all {n} attempt{s} failed"),
            RetryError::NotRetryable { .. } => write!(f, "attempt {n} failed and is not retried"),
        }
    }
}

impl<E: Error + 'static> Error for RetryError<E> {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            RetryError::Deadline { last, .. } => last.as_ref().map(|e| e as _),
            RetryError::Exhausted { last, .. } => Some(last),
            RetryError::NotRetryable { error, .. } => Some(error),
        }
    }
}

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
    /// use loopguard::retry::{Retry, Run};
    ///
    /// # futures_lite::future::block_on(async {
    /// let policy = Retry::new();
    /// let fut = policy.run(Deadline::never(), |n| async move { Ok::<u32, ()>(n) });
    /// println!("{fut:?}");
    /// assert_eq!(fut.await.unwrap().value, 1);
    /// # });
    /// ```
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct Run<F, Fut, P, E> {
        policy: Retry<P>,
        deadline: Deadline,
        make: F,
        started: u32,
        last: Option<AttemptError<E>>,
        done: bool,
        sleep: Option<Sleep>,
        #[pin]
        attempt: Option<deadline::Run<Fut>>,
    }
}

/// The deadline ended the retry: the last failure goes back to the caller.
fn deadline_error<E>(last: &mut Option<AttemptError<E>>, attempts: u32) -> RetryError<E> {
    RetryError::Deadline {
        attempts,
        last: last.take(),
    }
}

impl<F, Fut, P, E> fmt::Debug for Run<F, Fut, P, E> {
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
        f.debug_struct("Run")
            .field("policy", &self.policy)
            .field("deadline", &self.deadline)
            .field("attempts", &self.started)
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

impl<F, Fut, P, T, E> Future for Run<F, Fut, P, E>
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    P: ShouldRetry<E>,
{
    type Output = Result<Success<T>, RetryError<E>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        assert!(!*this.done, "`Run` polled after completion");
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
                        crate::sync::drop_contained("a refused late output", value);
                        break Err(deadline_error(this.last, n));
                    }
                    Ok(Ok(value)) => break Ok(Success { value, attempts: n }),
                    Ok(Err(error)) if !this.policy.retry_if.should_retry(&error) => {
                        break Err(RetryError::NotRetryable { attempts: n, error });
                    }
                    Ok(Err(error)) => {
                        hint = this.policy.retry_if.retry_after(&error);
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
