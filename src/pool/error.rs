//! Why a pool did not run a job, or gave no output for it.

use std::convert::Infallible;
use std::fmt;
use std::time::Duration;

use crate::deadline::Spent;
use crate::failure::Panicked;

/// Every slot of the pool is held: the job was not admitted. Hands the job back.
///
/// Built without allocating; [`retry_after`](Saturated::retry_after) is a hint for the
/// client (an HTTP `Retry-After`).
///
/// # Examples
///
/// ```
/// use loopguard::pool::{Pool, TryRunError};
/// use std::sync::mpsc;
///
/// let pool = Pool::builder().workers(1).build()?;
/// let (release, gate) = mpsc::channel::<()>();
/// let busy = pool.try_run(move || gate.recv().ok()).unwrap();
///
/// match pool.try_run(|| 42) {
///     Err(TryRunError::Saturated(saturated)) => {
///         assert!(saturated.retry_after_secs() >= 1);
///         let job = saturated.into_inner();
///         assert_eq!(job(), 42);
///     }
///     _ => unreachable!("the only worker is busy"),
/// }
/// release.send(()).unwrap();
/// # futures_lite::future::block_on(busy).unwrap();
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Saturated<F> {
    job: F,
    retry_after: Duration,
}

impl<F> Saturated<F> {
    pub(crate) fn new(job: F, retry_after: Duration) -> Saturated<F> {
        Saturated { job, retry_after }
    }

    /// How long the client should wait before trying again.
    ///
    /// # Precision
    ///
    /// Derived from what the pool has observed: a moving average of how long its jobs ran
    /// (the expected time until a slot is free again; a `for_pool` request counts with the
    /// time of the jobs it ran on its slot, not its whole hold; see
    /// [`PoolStats::mean_job_time`](super::PoolStats::mean_job_time)), never less than 1 ms
    /// and 1 s before any slot came back. It is a hint, not a promise: under `for_pool`,
    /// while requests hold their slots past their jobs (a response body still streaming),
    /// it is the pace of jobs, not of slots, and under-states the wait.
    /// [`retry_after_secs`](Saturated::retry_after_secs) rounds it up to whole seconds, which is
    /// always at least 1.
    ///
    /// # Examples
    ///
    /// ```
    /// # let pool = loopguard::pool::Pool::builder().workers(1).build()?;
    /// # let (tx, rx) = std::sync::mpsc::channel::<()>();
    /// # let busy = pool.try_run(move || rx.recv().ok()).unwrap();
    /// let err = pool.try_run(|| ()).unwrap_err();
    /// assert!(err.retry_after().unwrap() > std::time::Duration::ZERO);
    /// # tx.send(()).unwrap();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn retry_after(&self) -> Duration {
        self.retry_after
    }

    /// [`retry_after`](Saturated::retry_after) rounded up to whole seconds, at least 1: the
    /// value for an HTTP `Retry-After` header.
    ///
    /// # Examples
    ///
    /// ```
    /// # let pool = loopguard::pool::Pool::builder().workers(1).build()?;
    /// # let (tx, rx) = std::sync::mpsc::channel::<()>();
    /// # let busy = pool.try_run(move || rx.recv().ok()).unwrap();
    /// let err = pool.try_run(|| ()).unwrap_err();
    /// assert!(err.retry_after_secs().unwrap() >= 1);
    /// # tx.send(()).unwrap();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn retry_after_secs(&self) -> u64 {
        crate::gate::limit::whole_secs(self.retry_after)
    }

    /// Takes the job back.
    ///
    /// # Examples
    ///
    /// See [`Saturated`].
    pub fn into_inner(self) -> F {
        self.job
    }
}

impl<F> fmt::Debug for Saturated<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Saturated")
            .field("retry_after", &self.retry_after)
            .finish_non_exhaustive()
    }
}

impl<F> fmt::Display for Saturated<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pool is saturated, retry after {}s",
            self.retry_after_secs()
        )
    }
}

impl<F> std::error::Error for Saturated<F> {}

/// Why [`Pool::try_run`](super::Pool::try_run) did not admit a job. Hands the job back.
///
/// # Examples
///
/// ```
/// use loopguard::pool::{Pool, TryRunError};
///
/// let pool = Pool::builder().build()?;
/// pool.close();
/// let err = pool.try_run(|| 1).unwrap_err();
/// assert!(err.is_closed());
/// assert_eq!(err.to_string(), "pool is closed");
/// # Ok::<(), std::io::Error>(())
/// ```
#[non_exhaustive]
pub enum TryRunError<F> {
    /// Every slot is held.
    Saturated(Saturated<F>),
    /// The pool was closed.
    Closed(F),
    /// Every slot is held, one of them by the request whose handler asked (a layer made by
    /// `loopguard::tower::AdmissionLayer::for_pool`, feature `tower`): run the job on that
    /// slot with `Slot::try_run(&pool, job)`. Retrying will not help while the request
    /// holds it. Hands the job back.
    OwnSlot(F),
}

/// What [`TryRunError::OwnSlot`], [`WithinError::OwnSlot`] and [`RunError::OwnSlot`] say.
const OWN_SLOT: &str = "this request holds one of the pool's slots and none other is free: \
                        run the job on it with `slot.try_run(&pool, job)`";

impl<F> TryRunError<F> {
    /// Whether the pool was saturated.
    ///
    /// # Examples
    ///
    /// See [`Saturated`].
    pub fn is_saturated(&self) -> bool {
        matches!(self, TryRunError::Saturated(_))
    }

    /// Whether the pool was closed.
    ///
    /// # Examples
    ///
    /// See [`TryRunError`].
    pub fn is_closed(&self) -> bool {
        matches!(self, TryRunError::Closed(_))
    }

    /// The retry hint when the pool was saturated; `None` when it is closed (retrying will
    /// not help).
    ///
    /// # Examples
    ///
    /// See [`Saturated::retry_after`].
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            TryRunError::Saturated(s) => Some(s.retry_after()),
            TryRunError::Closed(_) | TryRunError::OwnSlot(_) => None,
        }
    }

    /// The retry hint in whole seconds (at least 1) when the pool was saturated.
    ///
    /// # Examples
    ///
    /// See [`Saturated::retry_after_secs`].
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            TryRunError::Saturated(s) => Some(s.retry_after_secs()),
            TryRunError::Closed(_) | TryRunError::OwnSlot(_) => None,
        }
    }

    /// Takes the job back.
    ///
    /// # Examples
    ///
    /// ```
    /// # let pool = loopguard::pool::Pool::builder().build()?;
    /// pool.close();
    /// let job = pool.try_run(|| 5).unwrap_err().into_inner();
    /// assert_eq!(job(), 5);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn into_inner(self) -> F {
        match self {
            TryRunError::Saturated(s) => s.into_inner(),
            TryRunError::Closed(f) | TryRunError::OwnSlot(f) => f,
        }
    }
}

impl<F> fmt::Debug for TryRunError<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryRunError::Saturated(s) => f.debug_tuple("Saturated").field(s).finish(),
            TryRunError::Closed(_) => f.write_str("Closed(..)"),
            TryRunError::OwnSlot(_) => f.write_str("OwnSlot(..)"),
        }
    }
}

impl<F> fmt::Display for TryRunError<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryRunError::Saturated(s) => fmt::Display::fmt(s, f),
            TryRunError::Closed(_) => f.write_str("pool is closed"),
            TryRunError::OwnSlot(_) => f.write_str(OWN_SLOT),
        }
    }
}

impl<F> std::error::Error for TryRunError<F> {}

impl<F> From<TryRunError<F>> for std::io::Error {
    fn from(err: TryRunError<F>) -> std::io::Error {
        let kind = match err {
            TryRunError::Saturated(_) => std::io::ErrorKind::WouldBlock,
            TryRunError::Closed(_) => std::io::ErrorKind::BrokenPipe,
            TryRunError::OwnSlot(_) => std::io::ErrorKind::InvalidInput,
        };
        std::io::Error::new(kind, err.to_string())
    }
}

/// Why a job submitted with [`Pool::run`](super::Pool::run) gave no output.
///
/// # Examples
///
/// ```
/// use loopguard::pool::{Pool, RunError};
///
/// # futures_lite::future::block_on(async {
/// let pool = Pool::builder().build()?;
/// pool.close();
/// assert_eq!(pool.run(|| 1).await, Err(RunError::Closed));
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunError {
    /// The pool was closed before the job got a slot; the job never ran.
    Closed,
    /// The job ran and panicked.
    Panicked(Panicked),
    /// The deadline passed before the job got a slot ([`Phase::InLine`]), or before its
    /// output was delivered ([`Phase::Running`]). In the second case the job keeps running,
    /// orphaned, and keeps its slot until done. [`Spent::phase`] says which.
    ///
    /// [`Phase::InLine`]: crate::deadline::Phase::InLine
    /// [`Phase::Running`]: crate::deadline::Phase::Running
    Expired(Spent),
    /// No slot was free and the request whose handler awaits this holds one of the pool's
    /// (see [`TryRunError::OwnSlot`]): waiting would wait for itself. The job never ran.
    OwnSlot,
    /// Refused at once, instead of waiting in line, by a [`Run`](super::Run) that was asked
    /// to [`refuse_early`](super::Run::refuse_early): at the pool's measured pace the line
    /// ahead and the job itself would not be done before the deadline. The job never ran;
    /// `retry_after` is the estimated wait for a slot (at least 1 ms), for a `Retry-After`.
    WouldExpire {
        /// The estimated wait for a slot.
        retry_after: Duration,
    },
}

impl RunError {
    /// The `Retry-After` hint of a [`RunError::WouldExpire`] refusal; `None` otherwise.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::pool::RunError;
    ///
    /// assert_eq!(RunError::Closed.retry_after(), None);
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            RunError::WouldExpire { retry_after } => Some(*retry_after),
            _ => None,
        }
    }
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Closed => f.write_str("pool closed before the job got a slot"),
            RunError::OwnSlot => f.write_str(OWN_SLOT),
            RunError::WouldExpire { retry_after } => write!(
                f,
                "refused at once: at the pool's pace the job would not be done before its \
                 deadline, retry after {}s",
                crate::gate::limit::whole_secs(*retry_after)
            ),
            RunError::Panicked(p) => fmt::Display::fmt(p, f),
            RunError::Expired(e) => fmt::Display::fmt(e, f),
        }
    }
}

/// No `source()`: the `Display` of a variant is its payload's, so a chain printed by a
/// reporter names each cause once.
impl std::error::Error for RunError {}

impl From<Panicked> for RunError {
    fn from(p: Panicked) -> RunError {
        RunError::Panicked(p)
    }
}

impl From<RunError> for std::io::Error {
    fn from(err: RunError) -> std::io::Error {
        match err {
            RunError::Closed => std::io::Error::new(std::io::ErrorKind::BrokenPipe, err),
            RunError::OwnSlot => std::io::Error::new(std::io::ErrorKind::InvalidInput, err),
            RunError::WouldExpire { .. } => {
                std::io::Error::new(std::io::ErrorKind::WouldBlock, err)
            }
            RunError::Panicked(p) => std::io::Error::other(p),
            RunError::Expired(e) => e.into(),
        }
    }
}

/// The error of [`Pool::try_run_within`](super::Pool::try_run_within): fail fast and a
/// deadline in one call.
///
/// `E` is the job's own error: the `Err` type of a [`Fallible`](crate::Fallible) job, whose
/// `Err` arrives as [`WithinError::Failed`] (the future resolves to
/// `Result<T, WithinError<W, E>>`, not to `Ok(Err(e))`), and [`Infallible`] for a plain job
/// (`WithinError<W>`).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use loopguard::deadline::Deadline;
/// use loopguard::pool::{Pool, WithinError};
///
/// # futures_lite::future::block_on(async {
/// let pool = Pool::builder().workers(1).build()?;
/// let deadline = Deadline::after(Duration::from_secs(5));
/// let body = match pool.try_run_within(deadline, || "up 1\n".to_string()).await {
///     Ok(body) => body,
///     Err(WithinError::Saturated(busy)) => format!("503, retry after {}s", busy.retry_after_secs()),
///     Err(WithinError::Expired(_)) => "503: budget spent, the walk goes on".to_string(),
///     Err(err) => return Err(err.into()),
/// };
/// assert_eq!(body, "up 1\n");
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
///
/// A [`Fallible`](crate::Fallible) job, one `match` for the whole scrape:
///
/// ```
/// use loopguard::Fallible;
/// use loopguard::deadline::Deadline;
/// use loopguard::pool::{Pool, WithinError};
///
/// # futures_lite::future::block_on(async {
/// let pool = Pool::builder().workers(1).build()?;
/// let walk = || std::fs::read_to_string("/no/such/registry");
/// let status = match pool.try_run_within(Deadline::never(), Fallible(walk)).await {
///     Ok(_body) => 200,
///     Err(WithinError::Failed(err)) => {
///         assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
///         500
///     }
///     Err(WithinError::Saturated(_) | WithinError::Expired(_)) => 503,
///     Err(_) => 500,
/// };
/// assert_eq!(status, 500);
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
#[non_exhaustive]
pub enum WithinError<W, E = Infallible> {
    /// Every slot was held when the future was first polled: nothing was queued, and the
    /// job comes back inside.
    Saturated(Saturated<W>),
    /// The deadline passed: before admission ([`Phase::InLine`]: the job never ran), or
    /// while the job ran or after it finished too late ([`Phase::Running`]). An admitted job
    /// runs on and keeps its slot until its thread is done; a failure of it is reported to
    /// the orphan handler, once. [`Spent::phase`] says which.
    ///
    /// [`Phase::InLine`]: crate::deadline::Phase::InLine
    /// [`Phase::Running`]: crate::deadline::Phase::Running
    Expired(Spent),
    /// The job ran and panicked.
    Panicked(Panicked),
    /// The job ran and returned this error: a [`Fallible`](crate::Fallible) job's `Err`, in
    /// time (a late one goes to the orphan handler, and the caller gets
    /// [`Expired`](WithinError::Expired)). Never made for a plain job (`E` is
    /// [`Infallible`]).
    Failed(E),
    /// The pool was closed; the job never ran and comes back inside.
    Closed(W),
    /// Every slot was held, one by the request whose handler asked: see
    /// [`TryRunError::OwnSlot`]. The job never ran and comes back inside.
    OwnSlot(W),
}

impl<W, E> WithinError<W, E> {
    /// Whether this is a fail-fast refusal ([`WithinError::Saturated`]): every slot was
    /// busy, so a 503 with `Retry-After` fits. An expired budget is not a refusal.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::deadline::Deadline;
    /// use loopguard::pool::{Pool, WithinError};
    ///
    /// # futures_lite::future::block_on(async {
    /// let pool = Pool::builder().build()?;
    /// let late = pool.try_run_within(Deadline::after(std::time::Duration::ZERO), || ()).await;
    /// assert!(!late.unwrap_err().is_saturated());
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn is_saturated(&self) -> bool {
        matches!(self, WithinError::Saturated(_))
    }

    /// The `Retry-After` hint of a [`WithinError::Saturated`] refusal.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::deadline::Deadline;
    /// use loopguard::pool::Pool;
    ///
    /// # futures_lite::future::block_on(async {
    /// let pool = Pool::builder().build()?;
    /// let late = pool.try_run_within(Deadline::after(std::time::Duration::ZERO), || ()).await;
    /// assert_eq!(late.unwrap_err().retry_after(), None);
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            WithinError::Saturated(s) => Some(s.retry_after()),
            _ => None,
        }
    }
}

impl<W, E> From<TryRunError<W>> for WithinError<W, E> {
    fn from(err: TryRunError<W>) -> WithinError<W, E> {
        match err {
            TryRunError::Saturated(s) => WithinError::Saturated(s),
            TryRunError::Closed(w) => WithinError::Closed(w),
            TryRunError::OwnSlot(w) => WithinError::OwnSlot(w),
        }
    }
}

impl<W, E: fmt::Debug> fmt::Debug for WithinError<W, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WithinError::Saturated(s) => f.debug_tuple("Saturated").field(s).finish(),
            WithinError::Expired(e) => f.debug_tuple("Expired").field(e).finish(),
            WithinError::Panicked(p) => f.debug_tuple("Panicked").field(p).finish(),
            WithinError::Failed(e) => f.debug_tuple("Failed").field(e).finish(),
            WithinError::Closed(_) => f.write_str("Closed(..)"),
            WithinError::OwnSlot(_) => f.write_str("OwnSlot(..)"),
        }
    }
}

impl<W, E: fmt::Display> fmt::Display for WithinError<W, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WithinError::Saturated(s) => fmt::Display::fmt(s, f),
            WithinError::Expired(e) => fmt::Display::fmt(e, f),
            WithinError::Panicked(p) => fmt::Display::fmt(p, f),
            WithinError::Failed(e) => write!(f, "job failed: {e}"),
            WithinError::Closed(_) => f.write_str("pool is closed"),
            WithinError::OwnSlot(_) => f.write_str(OWN_SLOT),
        }
    }
}

/// `Display` shows the job's error, so `source()` is that error's own source (the next
/// cause it does not print), and `None` for the other variants, whose `Display` is their
/// payload's: a chain printed by a reporter names each cause once.
impl<W, E: std::error::Error + 'static> std::error::Error for WithinError<W, E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WithinError::Failed(e) => e.source(),
            _ => None,
        }
    }
}

/// A [`WithinError::Failed`] becomes [`io::ErrorKind::Other`](std::io::ErrorKind::Other)
/// wrapping the job's error; match it first to keep an `io::Error`'s own kind.
impl<W, E> From<WithinError<W, E>> for std::io::Error
where
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn from(err: WithinError<W, E>) -> std::io::Error {
        match err {
            WithinError::Saturated(s) => TryRunError::Saturated(s).into(),
            WithinError::Closed(w) => TryRunError::Closed(w).into(),
            WithinError::OwnSlot(w) => TryRunError::OwnSlot(w).into(),
            WithinError::Expired(e) => e.into(),
            WithinError::Panicked(p) => std::io::Error::other(p),
            WithinError::Failed(e) => std::io::Error::other(e),
        }
    }
}
