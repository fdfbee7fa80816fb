//! Which errors are retried, and when: [`ShouldRetry`], its default [`AlwaysRetry`],
//! [`Decide`], a rule that can also say "retry after D" (a server's `Retry-After`), and
//! [`BoxedRule`], any rule behind one type a struct can name.

use std::fmt;
use std::sync::Arc;
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
    /// [`RetryError::Deadline`](super::RetryError::Deadline), without sleeping, and one
    /// longer than the policy's [`max_retry_after`](super::Retry::max_retry_after) is a
    /// "do not retry" ([`RetryError::NotRetryable`](super::RetryError::NotRetryable)). The
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
    /// Not worth another attempt (or the server said not to retry: a negative
    /// [`retry_pushback`](crate::header::retry_pushback)): the retry ends with
    /// [`RetryError::NotRetryable`](super::RetryError::NotRetryable).
    Stop,
    /// Retry after the backoff's pause.
    Retry,
    /// Retry after this long instead of the backoff's pause; end the retry at once if that
    /// would be at or after the deadline, and treat it as [`Stop`](Decision::Stop) if it is
    /// longer than the policy's [`max_retry_after`](super::Retry::max_retry_after).
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

/// Any rule behind one type: a [`Retry<BoxedRule<E>>`](super::Retry) can be named in a
/// struct field or a function's signature whatever closure it was built with. Made by
/// [`Retry::boxed`](super::Retry::boxed) or [`BoxedRule::new`]; cloning it (as every
/// [`Retry::run`](super::Retry::run) does) clones an `Arc`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use loopguard::deadline::Deadline;
/// use loopguard::retry::{BoxedRule, Decision, Retry};
///
/// #[derive(Debug)]
/// struct HttpError { status: u16, retry_after: Option<Duration> }
///
/// /// A client that keeps its policy, whatever closure decides.
/// struct Catalog {
///     policy: Retry<BoxedRule<HttpError>>,
/// }
///
/// impl Catalog {
///     fn new() -> std::io::Result<Catalog> {
///         let policy = Retry::new()
///             .attempts(3)?
///             .decide(|e: &HttpError| match (e.status, e.retry_after) {
///                 (503, Some(after)) => Decision::RetryAfter(after),
///                 (500.., _) => Decision::Retry,
///                 _ => Decision::Stop,
///             })
///             .boxed();
///         Ok(Catalog { policy })
///     }
/// }
///
/// # futures_lite::future::block_on(async {
/// let catalog = Catalog::new()?;
/// let result = catalog
///     .policy
///     .run(Deadline::never(), |n| async move {
///         if n < 2 { Err(HttpError { status: 503, retry_after: Some(Duration::ZERO) }) } else { Ok(n) }
///     })
///     .await;
/// assert_eq!(result.unwrap().value, 2);
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
pub struct BoxedRule<E> {
    rule: Arc<dyn ShouldRetry<E> + Send + Sync>,
}

impl<E> BoxedRule<E> {
    /// `rule` behind one type.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::retry::{BoxedRule, ShouldRetry};
    ///
    /// let rule: BoxedRule<u16> = BoxedRule::new(|status: &u16| *status >= 500);
    /// assert!(rule.should_retry(&503) && !rule.should_retry(&404));
    /// ```
    pub fn new<R>(rule: R) -> BoxedRule<E>
    where
        R: ShouldRetry<E> + Send + Sync + 'static,
    {
        BoxedRule {
            rule: Arc::new(rule),
        }
    }
}

impl<E> Clone for BoxedRule<E> {
    fn clone(&self) -> Self {
        BoxedRule {
            rule: Arc::clone(&self.rule),
        }
    }
}

impl<E> fmt::Debug for BoxedRule<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BoxedRule").finish_non_exhaustive()
    }
}

impl<E> ShouldRetry<E> for BoxedRule<E> {
    fn should_retry(&self, error: &E) -> bool {
        self.rule.should_retry(error)
    }

    fn retry_after(&self, error: &E) -> Option<Duration> {
        self.rule.retry_after(error)
    }
}
