//! Which errors are retried, and when: [`ShouldRetry`], its default [`AlwaysRetry`], and
//! [`Decide`], a rule that can also say "retry after D" (a server's `Retry-After`).

use std::time::Duration;

/// Decides whether an error is worth another attempt, and may say when to make it.
///
/// Implemented by [`AlwaysRetry`], by every `Fn(&E) -> bool`, and by [`Decide`] (a rule
/// returning a [`Decision`]).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use loopguard::retry::{AlwaysRetry, ShouldRetry};
///
/// assert!(AlwaysRetry.should_retry(&"anything"));
/// assert!(!(|e: &u16| *e >= 500).should_retry(&404));
/// assert_eq!((|e: &u16| *e >= 500).retry_after(&503), None);
///
/// // A rule of your own that honours a server's hint.
/// struct Busy;
/// impl ShouldRetry<(u16, Option<Duration>)> for Busy {
///     fn should_retry(&self, (status, _): &(u16, Option<Duration>)) -> bool {
///         *status == 503
///     }
///     fn retry_after(&self, (_, hint): &(u16, Option<Duration>)) -> Option<Duration> {
///         *hint
///     }
/// }
/// assert_eq!(Busy.retry_after(&(503, Some(Duration::from_secs(2)))), Some(Duration::from_secs(2)));
/// ```
pub trait ShouldRetry<E> {
    /// Whether `error` deserves another attempt.
    fn should_retry(&self, error: &E) -> bool;

    /// When to make the next attempt after `error`, if the error says so (a server's
    /// `Retry-After`, read with [`header::retry_after`](crate::header::retry_after)).
    ///
    /// Called only for an error [`should_retry`](ShouldRetry::should_retry) accepted. A
    /// hint replaces the backoff step for that pause; a hint that would end at or after the
    /// deadline ends the retry at once with
    /// [`RetryError::Deadline`](super::RetryError::Deadline), without sleeping. The
    /// default gives none: the backoff decides.
    ///
    /// # Examples
    ///
    /// See [`ShouldRetry`].
    fn retry_after(&self, error: &E) -> Option<Duration> {
        let _ = error;
        None
    }
}

/// The default rule: every error is retried.
///
/// # Examples
///
/// ```
/// use loopguard::retry::{AlwaysRetry, ShouldRetry};
///
/// assert!(AlwaysRetry.should_retry(&std::fmt::Error));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AlwaysRetry;

impl<E> ShouldRetry<E> for AlwaysRetry {
    fn should_retry(&self, _: &E) -> bool {
        true
    }
}

impl<E, F: Fn(&E) -> bool> ShouldRetry<E> for F {
    fn should_retry(&self, error: &E) -> bool {
        self(error)
    }
}

/// What a [`Decide`] rule says about one error.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use loopguard::retry::Decision;
///
/// let hint = Some(Duration::from_secs(1));
/// let decision = hint.map_or(Decision::Retry, Decision::RetryAfter);
/// assert_eq!(decision, Decision::RetryAfter(Duration::from_secs(1)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Decision {
    /// Not worth another attempt: the retry ends with
    /// [`RetryError::NotRetryable`](super::RetryError::NotRetryable).
    Stop,
    /// Retry after the backoff's pause.
    Retry,
    /// Retry after this long instead of the backoff's pause, or end the retry at once if
    /// that would be at or after the deadline.
    RetryAfter(Duration),
}

/// A rule from a closure returning a [`Decision`]: made by
/// [`Retry::decide`](super::Retry::decide).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use loopguard::retry::{Decide, Decision, ShouldRetry};
///
/// let rule = Decide::new(|status: &u16| match status {
///     503 => Decision::RetryAfter(Duration::from_secs(2)),
///     500.. => Decision::Retry,
///     _ => Decision::Stop,
/// });
/// assert!(!rule.should_retry(&404));
/// assert_eq!(rule.retry_after(&500), None);
/// assert_eq!(rule.retry_after(&503), Some(Duration::from_secs(2)));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Decide<F>(F);

impl<F> Decide<F> {
    /// A rule that asks `decide` about each error.
    ///
    /// # Examples
    ///
    /// See [`Decide`].
    pub fn new<E>(decide: F) -> Decide<F>
    where
        F: Fn(&E) -> Decision,
    {
        Decide(decide)
    }
}

impl<E, F: Fn(&E) -> Decision> ShouldRetry<E> for Decide<F> {
    fn should_retry(&self, error: &E) -> bool {
        (self.0)(error) != Decision::Stop
    }

    fn retry_after(&self, error: &E) -> Option<Duration> {
        match (self.0)(error) {
            Decision::RetryAfter(after) => Some(after),
            Decision::Stop | Decision::Retry => None,
        }
    }
}
