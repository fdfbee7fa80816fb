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
//!   it would land at or after the deadline the retry ends at once, without sleeping; one
//!   longer than [`Retry::max_retry_after`] (a minute by default) is not retried at all.
//!
//! A [`RetryBudget`] shared by every call to one dependency ([`Retry::budget`]) keeps
//! retries within a fraction of first attempts, so that an outage is not multiplied by
//! each caller's attempt limit.
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
//!     .attempts(4)?
//!     .backoff(Backoff::exponential(Duration::from_millis(1), Duration::from_millis(8)))
//!     .attempt_timeout(Duration::from_millis(300))?;
//! let deadline = Deadline::after(Duration::from_secs(1));
//!
//! let done = policy
//!     .run(deadline, |attempt| async move {
//!         if attempt < 3 { Err("busy") } else { Ok(attempt * 10) }
//!     })
//!     .await
//!     .unwrap();
//! assert_eq!((done.value, done.attempts), (30, 3));
//! # Ok::<(), std::io::Error>(())
//! # }).unwrap();
//! ```

use std::fmt;
use std::future::Future;
use std::io;
use std::time::Duration;

use crate::deadline::Deadline;

mod backoff;
mod budget;
mod error;
mod rule;
mod run;

pub use backoff::Backoff;
pub use budget::RetryBudget;
pub use error::{AttemptError, RetryError, Success};
pub use rule::{AlwaysRetry, BoxedRule, Decide, Decision, ShouldRetry};
pub use run::RetryRun;

/// How long a server's hint is honoured by default: a minute.
const DEFAULT_MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

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
///     .attempts(5)?
///     .backoff(Backoff::fixed([Duration::from_millis(50), Duration::from_millis(200)]))
///     .retry_if(|e: &io::Error| e.kind() != io::ErrorKind::InvalidInput);
/// let _copy = policy.clone();
/// # Ok::<(), io::Error>(())
/// ```
#[derive(Clone)]
pub struct Retry<P = AlwaysRetry> {
    attempts: u32,
    backoff: Backoff,
    attempt_timeout: Option<Duration>,
    max_retry_after: Duration,
    budget: Option<RetryBudget>,
    retry_if: P,
}

impl Retry {
    /// Three attempts, no backoff, no per-attempt timeout, every error retried, a server's
    /// hint honoured up to a minute, no retry budget.
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
            max_retry_after: DEFAULT_MAX_RETRY_AFTER,
            budget: None,
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
            .field("max_retry_after", &self.max_retry_after)
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

impl<P> Retry<P> {
    /// The most attempts to make, the first one included: at least 1 (`1` makes no
    /// retry).
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] for `0`: a call always makes its first attempt, and
    /// a limit it cannot honour is refused rather than taken as `1`.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::retry::Retry;
    ///
    /// let once = Retry::new().attempts(1)?;
    /// let err = Retry::new().attempts(0).unwrap_err();
    /// assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    /// assert_eq!(err.to_string(), "a retry's attempts must be at least 1, not 0");
    /// # let _ = once;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn attempts(mut self, attempts: u32) -> io::Result<Self> {
        if attempts == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a retry's attempts must be at least 1, not 0",
            ));
        }
        self.attempts = attempts;
        Ok(self)
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
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] for [`Duration::ZERO`]: a poll that starts at a
    /// deadline never polls the attempt (see [`Deadline::run`](crate::deadline::Deadline::run)),
    /// so every attempt would time out unstarted. A limit it cannot honour is refused, as
    /// for [`attempts(0)`](Retry::attempts).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loopguard::retry::Retry;
    ///
    /// let policy = Retry::new().attempt_timeout(Duration::from_millis(250))?;
    /// let err = Retry::new().attempt_timeout(Duration::ZERO).unwrap_err();
    /// assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    /// assert_eq!(err.to_string(), "a retry's attempt timeout must be more than zero");
    /// # let _ = policy;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn attempt_timeout(mut self, timeout: Duration) -> io::Result<Self> {
        if timeout.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a retry's attempt timeout must be more than zero",
            ));
        }
        self.attempt_timeout = Some(timeout);
        Ok(self)
    }

    /// The longest server hint honoured (a [`Decision::RetryAfter`], a rule's
    /// [`ShouldRetry::retry_after`]): a minute by default. A hint longer than this is a
    /// "do not retry": the retry ends at once with [`RetryError::NotRetryable`] and the
    /// error that carried it, rather than sleeping for as long as the server asked (a
    /// `Retry-After` date 68 years ahead) or retrying sooner than it allows. A hint equal
    /// to it is honoured. Under a deadline, a hint that would end past the deadline ends
    /// the retry too, with [`RetryError::Deadline`].
    ///
    /// `Duration::MAX` honours any hint; `Duration::ZERO` retries only on hints of zero.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loopguard::deadline::Deadline;
    /// use loopguard::retry::{Decision, Retry, RetryError};
    ///
    /// # futures_lite::future::block_on(async {
    /// // The server asks for an hour; the policy waits at most 10 s: not retried.
    /// let policy = Retry::new()
    ///     .max_retry_after(Duration::from_secs(10))
    ///     .decide(|_: &&str| Decision::RetryAfter(Duration::from_secs(3600)));
    /// let result = policy.run(Deadline::never(), |_| async { Err::<(), _>("busy") }).await;
    /// assert!(matches!(result, Err(RetryError::NotRetryable { attempts: 1, error: "busy" })));
    /// # });
    /// ```
    pub fn max_retry_after(mut self, longest: Duration) -> Self {
        self.max_retry_after = longest;
        self
    }

    /// Shares `budget` with every call of this policy (and of any other policy given a
    /// clone of it): each call's first attempt deposits, each retry withdraws, and a retry
    /// the budget cannot pay for is not made: the call ends with
    /// [`RetryError::BudgetExhausted`] and its last failure. The withdrawal comes last,
    /// once the rule, the attempt limit, the hint and the deadline all allow the retry,
    /// and before its pause; a retry whose pause the deadline then cuts has spent its
    /// token, as in Finagle and tower. See [`RetryBudget`] for when to leave it off.
    ///
    /// The budget's name is fixed from here on (see [`RetryBudget::named`]).
    ///
    /// # Examples
    ///
    /// See [`RetryBudget`].
    pub fn budget(mut self, budget: RetryBudget) -> Self {
        budget.seal();
        self.budget = Some(budget);
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
    /// plain function of the error. A hint is honoured up to
    /// [`max_retry_after`](Retry::max_retry_after) (a minute by default), even under
    /// [`Deadline::never`]; a longer one ends the retry as not retryable. A gRPC server's
    /// `grpc-retry-pushback-ms` reads as a `Decision` with
    /// [`header::retry_pushback`](crate::header::retry_pushback).
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
    /// let policy = Retry::new().attempts(3)?.decide(|e: &Unavailable| {
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
    /// # Ok::<(), std::io::Error>(())
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
        self.map_rule(|_| rule)
    }

    /// The same policy with its rule behind a [`BoxedRule`]: a type a struct can name
    /// (`Retry<BoxedRule<E>>`) whatever closure the rule is, with no cast.
    ///
    /// # Examples
    ///
    /// See [`BoxedRule`].
    pub fn boxed<E>(self) -> Retry<BoxedRule<E>>
    where
        P: ShouldRetry<E> + Send + Sync + 'static,
    {
        self.map_rule(BoxedRule::new)
    }

    /// The same policy with the rule `change` makes of this one's.
    fn map_rule<R>(self, change: impl FnOnce(P) -> R) -> Retry<R> {
        Retry {
            attempts: self.attempts,
            backoff: self.backoff,
            attempt_timeout: self.attempt_timeout,
            max_retry_after: self.max_retry_after,
            budget: self.budget,
            retry_if: change(self.retry_if),
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
    ///     .attempts(2)?
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
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn run<T, E, F, Fut>(&self, deadline: Deadline, attempt: F) -> RetryRun<F, Fut, P, E>
    where
        P: ShouldRetry<E> + Clone,
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        RetryRun::new(self.clone(), deadline, attempt)
    }
}
