//! What a retry ends with: [`Success`], or a [`RetryError`] carrying the last
//! [`AttemptError`].

use std::error::Error;
use std::fmt;

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
    /// The attempt ran out of its own timeout ([`Retry::attempt_timeout()`](super::Retry::attempt_timeout)).
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
    /// An attempt failed with an error the policy does not retry: its rule said
    /// [`Decision::Stop`](super::Decision::Stop), or the server asked to wait longer than
    /// the policy's [`max_retry_after`](super::Retry::max_retry_after).
    NotRetryable {
        /// Attempts started, the failing one included.
        attempts: u32,
        /// The error.
        error: E,
    },
    /// The policy's [`RetryBudget`](super::RetryBudget) had no retry left: the call ends
    /// with its last failure instead of another attempt.
    BudgetExhausted {
        /// Attempts started, the failing one included.
        attempts: u32,
        /// How the last attempt failed.
        last: AttemptError<E>,
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
            | RetryError::NotRetryable { attempts, .. }
            | RetryError::BudgetExhausted { attempts, .. } => *attempts,
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
            | RetryError::BudgetExhausted {
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
            RetryError::BudgetExhausted { .. } => {
                write!(f, "retry budget exhausted after {n} attempt{s}")
            }
        }
    }
}

impl<E: Error + 'static> Error for RetryError<E> {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            RetryError::Deadline { last, .. } => last.as_ref().map(|e| e as _),
            RetryError::Exhausted { last, .. } | RetryError::BudgetExhausted { last, .. } => {
                Some(last)
            }
            RetryError::NotRetryable { error, .. } => Some(error),
        }
    }
}
