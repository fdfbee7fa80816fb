//! Honest operation metrics: one observation per finished operation, queue included.
//!
//! An [`Operation`] names a kind of call (say, `catalog`). Wrapping a call with
//! [`Operation::measure()`] starts its clock *at wrap time*, before the call's first
//! queue (a semaphore, a connection pool, a [`Pool`](crate::pool::Pool) slot), raises
//! `loopguard_operations_in_flight{operation}`, and when the call ends, one way or
//! another, records exactly one observation in
//! `loopguard_operation_duration_seconds{operation, outcome}`:
//!
//! | outcome | when |
//! |---|---|
//! | `success` | the output was classified as [`Outcome::Success`] |
//! | `deadline` | the output was classified as [`Outcome::Deadline`]: the budget ran out while the work ran, or in a wait that has no line (for example [`Expired`], a [`Spent`] in [`Phase::Running`]) |
//! | `deadline_in_line` | the output was classified as [`Outcome::DeadlineInLine`]: the budget ran out in line, before the work started (a [`Spent`] in [`Phase::InLine`]) |
//! | `error` | the output was classified as [`Outcome::Error`], or the future panicked |
//! | `cancelled` | the future was dropped before it finished |
//!
//! The in-flight gauge goes down on every one of those paths: it is held by a guard whose
//! `Drop` does the bookkeeping.
//!
//! How an output is classified is up to the [`Classify`] trait (implemented for
//! `Result<T, E>` where `E: Classify`, for [`Expired`], [`Spent`], [`RunError`],
//! [`WithinError`], [`RefreshError`], [`RetryError`], [`io::Error`] and [`Outcome`] itself),
//! or to a closure passed to [`Operation::measure_with()`].
//!
//! The two deadline outcomes together are every call whose budget ran out: a dashboard
//! that wants that share sums `outcome=~"deadline|deadline_in_line"`. Apart, they tell a
//! line that was too long (`deadline_in_line`: nothing ran, a refusal would have served the
//! caller better) from work that was too slow (`deadline`).
//!
//! # Series that exist from the start
//!
//! [`Operation::new()`] registers the five `outcome` histograms and the in-flight gauge
//! with the installed recorder, so they are known before the first call ends. Whether a
//! registered but never recorded histogram is *rendered* is up to the recorder: some
//! exporters only print a histogram once it has an observation. Install the recorder
//! before creating operations, like pools.
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use loopguard::deadline::Deadline;
//! use loopguard::operation::Operation;
//!
//! # futures_lite::future::block_on(async {
//! let catalog = Operation::new("catalog")?;
//! let deadline = Deadline::after(Duration::from_secs(1));
//!
//! // The clock starts here, before the (elided) semaphore and pool waits.
//! let result = catalog.measure(deadline.run(async { "catalog data" })).await;
//! assert_eq!(result, Ok("catalog data")); // recorded as `success`
//! # Ok::<(), std::io::Error>(())
//! # }).unwrap();
//! ```

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use ::metrics::{Gauge, Histogram, SharedString};

use crate::contain::contain;
use crate::deadline::{Expired, Phase, Spent};
use crate::pool::{RunError, WithinError};
use crate::refresh::RefreshError;
use crate::retry::RetryError;

const RECORDER: &str = "the metrics recorder";
use crate::emit::{
    self, LABEL_OPERATION, LABEL_OUTCOME, OPERATION_DURATION_SECONDS, OPERATIONS_IN_FLIGHT,
};

/// How an operation ended: the `outcome` label of
/// `loopguard_operation_duration_seconds`.
///
/// # Examples
///
/// ```
/// use loopguard::operation::Outcome;
///
/// assert_eq!(Outcome::Deadline.as_str(), "deadline");
/// assert_eq!(Outcome::ALL.len(), 5);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// The operation did what it was asked in time.
    Success,
    /// The operation's deadline passed first: while its work ran, or in a wait with no
    /// line (label `deadline`).
    Deadline,
    /// The operation's deadline passed while it waited in line, before its work started
    /// (label `deadline_in_line`).
    DeadlineInLine,
    /// The future was dropped before it finished.
    Cancelled,
    /// The operation failed for another reason (or panicked).
    Error,
}

impl Outcome {
    /// Every outcome, in label order.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::operation::Outcome;
    ///
    /// let labels: Vec<_> = Outcome::ALL.iter().map(|o| o.as_str()).collect();
    /// assert_eq!(labels, ["success", "deadline", "deadline_in_line", "cancelled", "error"]);
    /// ```
    pub const ALL: [Outcome; 5] = [
        Outcome::Success,
        Outcome::Deadline,
        Outcome::DeadlineInLine,
        Outcome::Cancelled,
        Outcome::Error,
    ];

    /// The label value: `success`, `deadline`, `deadline_in_line`, `cancelled` or `error`.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::operation::Outcome;
    ///
    /// assert_eq!(Outcome::Cancelled.as_str(), "cancelled");
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Deadline => "deadline",
            Outcome::DeadlineInLine => "deadline_in_line",
            Outcome::Cancelled => "cancelled",
            Outcome::Error => "error",
        }
    }

    const fn index(self) -> usize {
        match self {
            Outcome::Success => 0,
            Outcome::Deadline => 1,
            Outcome::DeadlineInLine => 2,
            Outcome::Cancelled => 3,
            Outcome::Error => 4,
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Says which [`Outcome`] an operation that produced this value had.
///
/// For an error type, it answers "how did an operation that failed with this end?":
/// usually [`Outcome::Error`], [`Outcome::Deadline`] when the error means the budget ran
/// out. Implement it for your own error types; use [`Operation::measure_with()`] for
/// types you do not own.
///
/// # Examples
///
/// ```
/// use loopguard::operation::{Classify, Outcome};
/// use loopguard::deadline::Expired;
///
/// enum FetchError { TooLate, Refused }
///
/// impl Classify for FetchError {
///     fn outcome(&self) -> Outcome {
///         match self {
///             FetchError::TooLate => Outcome::Deadline,
///             FetchError::Refused => Outcome::Error,
///         }
///     }
/// }
///
/// assert_eq!(Ok::<u8, FetchError>(1).outcome(), Outcome::Success);
/// assert_eq!(Err::<u8, _>(FetchError::TooLate).outcome(), Outcome::Deadline);
/// assert_eq!(Err::<u8, _>(Expired).outcome(), Outcome::Deadline);
/// ```
pub trait Classify {
    /// The outcome to record.
    fn outcome(&self) -> Outcome;
}

impl Classify for Outcome {
    fn outcome(&self) -> Outcome {
        *self
    }
}

/// `Ok` is a success; `Err(e)` is whatever `e` says.
///
/// Whatever `Ok` holds is a success, a nested `Ok(Err(_))` included: `Pool::run_within` of
/// a [`Fallible`](crate::Fallible) job resolves to `Ok(Err(e))` when the job fails, so
/// measure [`Pool::try_run_within`](crate::pool::Pool::try_run_within) instead (it resolves flat,
/// the job's `Err` in [`WithinError::Failed`]) or flatten the result first:
///
/// ```
/// use loopguard::operation::{Classify, Outcome};
/// use loopguard::pool::RunError;
///
/// let nested: Result<Result<u8, std::io::Error>, RunError> =
///     Ok(Err(std::io::Error::other("walk failed")));
/// assert_eq!(nested.outcome(), Outcome::Success); // the job's failure is not seen
/// let flat = nested.map_err(std::io::Error::from).and_then(|r| r);
/// assert_eq!(flat.outcome(), Outcome::Error);
/// ```
impl<T, E: Classify> Classify for Result<T, E> {
    fn outcome(&self) -> Outcome {
        match self {
            Ok(_) => Outcome::Success,
            Err(e) => e.outcome(),
        }
    }
}

/// Always [`Outcome::Deadline`].
impl Classify for Expired {
    fn outcome(&self) -> Outcome {
        Outcome::Deadline
    }
}

/// [`Outcome::DeadlineInLine`] for a budget spent in line, [`Outcome::Deadline`] for one spent
/// while the work ran.
impl Classify for Spent {
    fn outcome(&self) -> Outcome {
        match self.phase() {
            Phase::InLine => Outcome::DeadlineInLine,
            _ => Outcome::Deadline,
        }
    }
}

/// [`Outcome::Deadline`] when the deadline ended the retry, [`Outcome::Error`] otherwise.
impl<E> Classify for RetryError<E> {
    fn outcome(&self) -> Outcome {
        if self.is_deadline() {
            Outcome::Deadline
        } else {
            Outcome::Error
        }
    }
}

/// The [`Spent`]'s outcome when the job's deadline passed, [`Outcome::Error`] otherwise (a
/// panic, a closed pool): `op.measure(pool.run_within(deadline, job))` just works.
impl Classify for RunError {
    fn outcome(&self) -> Outcome {
        match self {
            RunError::Expired(spent) => spent.outcome(),
            _ => Outcome::Error,
        }
    }
}

/// The [`Spent`]'s outcome when the deadline passed, [`Outcome::Error`] otherwise: a
/// refusal (`Saturated`, with its `Retry-After`) is an error of this operation, and so is a
/// [`Fallible`](crate::Fallible) job's own `Err` ([`WithinError::Failed`]).
impl<W, E> Classify for WithinError<W, E> {
    fn outcome(&self) -> Outcome {
        match self {
            WithinError::Expired(spent) => spent.outcome(),
            _ => Outcome::Error,
        }
    }
}

/// The [`Spent`]'s outcome when the caller's deadline ended, [`Outcome::Error`] otherwise.
impl<E> Classify for RefreshError<E> {
    fn outcome(&self) -> Outcome {
        match self {
            RefreshError::Expired(spent) => spent.outcome(),
            _ => Outcome::Error,
        }
    }
}

/// [`Outcome::Deadline`] for an error made from [`Expired`], the [`Spent`]'s outcome for one
/// made from a [`Spent`], [`Outcome::Error`] otherwise (other `TimedOut` errors included:
/// they are not this operation's budget).
impl Classify for io::Error {
    fn outcome(&self) -> Outcome {
        match self.get_ref() {
            Some(inner) if inner.is::<Expired>() => Outcome::Deadline,
            Some(inner) => match inner.downcast_ref::<Spent>() {
                Some(spent) => spent.outcome(),
                None => Outcome::Error,
            },
            _ => Outcome::Error,
        }
    }
}

/// A named kind of operation and its metric handles.
///
/// Cheap to clone (the handles are shared). Create it once, after the recorder is
/// installed, and measure every call through it.
///
/// # Examples
///
/// ```
/// use loopguard::operation::Operation;
///
/// let op = Operation::new("catalog")?;
/// assert_eq!(op.name(), "catalog");
/// assert_eq!(op.clone().name(), "catalog");
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone)]
pub struct Operation {
    inner: Arc<Handles>,
}

struct Handles {
    name: SharedString,
    durations: [Histogram; 5],
    in_flight: Gauge,
}

impl fmt::Debug for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Operation")
            .field("name", &&*self.inner.name)
            .finish_non_exhaustive()
    }
}

impl Operation {
    /// Registers the series of operation `name`: the five `outcome` histograms and the
    /// in-flight gauge.
    ///
    /// The gauge is registered with a zero *increment*, not set to zero, so creating a
    /// second `Operation` with the same name while calls are in flight does not clobber
    /// it. Keep `name` to a fixed set (a dependency, an endpoint), never a URL or an ID.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] for a name that is empty or has a NUL byte; nothing
    /// is registered then.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::operation::Operation;
    ///
    /// let op = Operation::new(format!("catalog-{}", "eu"))?;
    /// assert_eq!(op.name(), "catalog-eu");
    /// let err = Operation::new("").unwrap_err();
    /// assert_eq!(err.to_string(), "an operation name must not be empty");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn new(name: impl Into<SharedString>) -> io::Result<Operation> {
        let name: SharedString = name.into();
        crate::name::check("an operation", &name)?;
        let histogram = |outcome: Outcome| {
            emit::register(
                || {
                    ::metrics::histogram!(
                        OPERATION_DURATION_SECONDS,
                        LABEL_OPERATION => name.clone(),
                        LABEL_OUTCOME => outcome.as_str(),
                    )
                },
                Histogram::noop,
            )
        };
        let in_flight = emit::register(
            || ::metrics::gauge!(OPERATIONS_IN_FLIGHT, LABEL_OPERATION => name.clone()),
            Gauge::noop,
        );
        contain(RECORDER, || in_flight.increment(0.0));
        Ok(Operation {
            inner: Arc::new(Handles {
                durations: Outcome::ALL.map(histogram),
                in_flight,
                name,
            }),
        })
    }

    /// The operation's name (its `operation` label).
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::operation::Operation;
    ///
    /// assert_eq!(Operation::new("search")?.name(), "search");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Starts measuring one call by hand: the clock starts and the in-flight gauge goes
    /// up now. End it with [`Guard::finish()`]; dropping the guard unfinished records
    /// `cancelled` (or `error` while the thread panics).
    ///
    /// For futures, [`Operation::measure()`] does this for you.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::operation::{Operation, Outcome};
    ///
    /// let op = Operation::new("report")?;
    /// let guard = op.start();
    /// // ... blocking steps, each checking a deadline ...
    /// let took = guard.finish(Outcome::Success);
    /// assert!(took.as_secs() < 60);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn start(&self) -> Guard {
        contain(RECORDER, || self.inner.in_flight.increment(1.0));
        Guard {
            handles: Some(self.inner.clone()),
            started: Instant::now(),
        }
    }

    /// Measures `future`, classifying its output with [`Classify`].
    ///
    /// The clock starts and the in-flight gauge goes up **when this is called**, not when
    /// the future is first polled: build the wrapper before the call's first queue (an
    /// executor's run queue included) and the queue is counted.
    ///
    /// The output is passed through unchanged.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loopguard::deadline::{Deadline, Expired};
    /// use loopguard::operation::Operation;
    ///
    /// # futures_lite::future::block_on(async {
    /// let op = Operation::new("stuck")?;
    /// let deadline = Deadline::after(Duration::from_millis(5));
    /// let out = op.measure(deadline.run(futures_lite::future::pending::<()>())).await;
    /// assert_eq!(out, Err(Expired)); // recorded as `deadline`
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn measure<F>(&self, future: F) -> Measure<F, fn(&F::Output) -> Outcome>
    where
        F: Future,
        F::Output: Classify,
    {
        self.measure_with(future, <F::Output as Classify>::outcome)
    }

    /// Measures `future`, classifying its output with `classify`.
    ///
    /// Same clock and gauge rules as [`Operation::measure()`].
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::operation::{Operation, Outcome};
    ///
    /// # futures_lite::future::block_on(async {
    /// let op = Operation::new("lookup")?;
    /// let found = op
    ///     .measure_with(async { Some(7) }, |out: &Option<u32>| match out {
    ///         Some(_) => Outcome::Success,
    ///         None => Outcome::Error,
    ///     })
    ///     .await;
    /// assert_eq!(found, Some(7));
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn measure_with<F, C>(&self, future: F, classify: C) -> Measure<F, C>
    where
        F: Future,
        C: FnOnce(&F::Output) -> Outcome,
    {
        Measure {
            guard: self.start(),
            classify: Some(classify),
            future,
        }
    }
}

/// One call being measured by hand; see [`Operation::start()`].
///
/// Exactly one observation is recorded: by [`Guard::finish()`], or by `Drop` as
/// `cancelled` (as `error` if the thread is panicking). The in-flight gauge goes down
/// in either case.
///
/// # Examples
///
/// ```
/// use loopguard::operation::{Operation, Outcome};
///
/// let op = Operation::new("walk")?;
/// let guard = op.start();
/// assert!(guard.elapsed().as_secs() < 60);
/// drop(guard); // recorded as `cancelled`
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Guard {
    handles: Option<Arc<Handles>>,
    started: Instant,
}

impl Guard {
    /// Time since the call started.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::operation::Operation;
    ///
    /// let guard = Operation::new("x")?.start();
    /// assert!(guard.elapsed() <= guard.elapsed());
    /// # guard.finish(loopguard::operation::Outcome::Success);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn elapsed(&self) -> std::time::Duration {
        self.started.elapsed()
    }

    /// Records the call as finished with `outcome` and returns its duration.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::operation::{Operation, Outcome};
    ///
    /// let took = Operation::new("x")?.start().finish(Outcome::Error);
    /// assert!(took.as_secs() < 60);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn finish(mut self, outcome: Outcome) -> std::time::Duration {
        self.record(outcome)
    }

    fn record(&mut self, outcome: Outcome) -> std::time::Duration {
        let took = self.started.elapsed();
        if let Some(handles) = self.handles.take() {
            // The recorder is user code: a panic loses that update, never the output.
            contain(RECORDER, || {
                handles.durations[outcome.index()].record(took.as_secs_f64())
            });
            contain(RECORDER, || handles.in_flight.decrement(1.0));
        }
        took
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let outcome = if std::thread::panicking() {
            Outcome::Error
        } else {
            Outcome::Cancelled
        };
        self.record(outcome);
    }
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("operation", &self.handles.as_ref().map(|h| &*h.name))
            .field("started", &self.started)
            .field("finished", &self.handles.is_none())
            .finish()
    }
}

pin_project_lite::pin_project! {
    /// Future for [`Operation::measure()`] and [`Operation::measure_with()`]: the inner
    /// future's output, unchanged, with one observation recorded when it is produced.
    ///
    /// # Cancel safety
    ///
    /// Dropping it before it finished drops the inner future and records `cancelled`.
    ///
    /// # Panics
    ///
    /// Panics if polled again after it completed. If the inner future or the classifier
    /// panics, the call is recorded as `error` while unwinding.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::operation::Measure;
    /// use loopguard::operation::{Operation, Outcome};
    ///
    /// # futures_lite::future::block_on(async {
    /// let op = Operation::new("ping").unwrap();
    /// let fut: Measure<_, _> = op.measure(async { Outcome::Success });
    /// println!("{fut:?}");
    /// assert_eq!(fut.await, Outcome::Success);
    /// # });
    /// ```
    #[must_use = "futures do nothing unless you `.await` or poll them"]
    pub struct Measure<F, C> {
        guard: Guard,
        classify: Option<C>,
        #[pin]
        future: F,
    }
}

impl<F, C> fmt::Debug for Measure<F, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Measure")
            .field("guard", &self.guard)
            .finish_non_exhaustive()
    }
}

impl<F, C> Future for Measure<F, C>
where
    F: Future,
    C: FnOnce(&F::Output) -> Outcome,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        assert!(this.classify.is_some(), "`Measure` polled after completion");
        let output = futures_lite::ready!(this.future.poll(cx));
        if let Some(classify) = this.classify.take() {
            let outcome = classify(&output);
            this.guard.record(outcome);
        }
        Poll::Ready(output)
    }
}
