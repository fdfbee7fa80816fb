//! Shielded async work: a future that keeps running when its awaiter leaves, and whose
//! failure is reported exactly once.
//!
//! A [`Shield`] turns a future into two halves with [`Shield::wrap`]:
//!
//! - a [`Runner`], which the application spawns on its own executor (smol, async-std, an
//!   `async_executor::LocalExecutor` for `!Send` futures, tokio) and detaches. It drives the
//!   future to completion, catching a panic;
//! - a [`Shielded`] handle. Awaiting it gives the output, or [`ShieldError::Panicked`].
//!   Dropping it *orphans* the work: the runner goes on, and if the work then fails (panics,
//!   or returns a failure in the sense of [`JobOutput`], such as an `Err`), the failure goes
//!   to the shield's [`OrphanHandler`], exactly once.
//!
//! This is the contract of a pool [`Job`](crate::Job) for async work. A failure the caller
//! awaited is never reported; an orphaned failure is never lost; completion and drop can
//! race in any order. The runner itself may be dropped before it finished (an executor
//! shutting down drops its tasks): the handle then resolves to [`ShieldError::RunnerDropped`]
//! instead of hanging.
//!
//! # Metrics
//!
//! Every orphaned failure is counted in [`ORPHANED_FAILURES_TOTAL`] with the label
//! `pool` set to the shield's name, the same series a pool of that name uses (so give
//! shields and pools distinct names), and in [`Shield::orphaned_failures`]. The series is
//! created with a zero when the shield is built, so install the recorder first.
//!
//! [`ORPHANED_FAILURES_TOTAL`]: crate::metrics::ORPHANED_FAILURES_TOTAL

use std::fmt;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::error::Panicked;
use crate::metrics::ORPHANED_FAILURES_TOTAL;
use crate::orphan::{describe_failure, OrphanHandler, Report};
use crate::outcome::JobOutput;
use crate::sync::{drop_quietly, lock, panic_message, wake_quietly};

/// Where orphaned async work reports its failures; see the [module docs](self).
///
/// A cheap handle (`Clone + Send + Sync`); clones share the handler and the counter.
///
/// # Examples
///
/// ```
/// use loopguard::{OrphanHandler, Shield};
///
/// # futures_lite::future::block_on(async {
/// let shield = Shield::with_handler("flush", OrphanHandler::new(|r| eprintln!("{r}")));
/// let (runner, handle) = shield.wrap(async { Ok::<u32, String>(7) });
/// // With smol: `smol::spawn(runner).detach();`
/// # let ex = async_executor::Executor::new();
/// # ex.spawn(runner).detach();
/// # let handle = ex.run(handle);
/// assert_eq!(handle.await.unwrap(), Ok(7));
/// # });
/// ```
#[derive(Clone)]
pub struct Shield {
    inner: Arc<Origin>,
}

/// What a shield's runners need to report a failure.
struct Origin {
    name: Arc<str>,
    handler: OrphanHandler,
    orphaned: AtomicU64,
    counter: ::metrics::Counter,
}

impl Shield {
    /// A shield named `name` whose orphaned failures go to [`OrphanHandler::log()`].
    ///
    /// # Examples
    ///
    /// ```
    /// let shield = loopguard::Shield::new("uploads");
    /// assert_eq!(shield.name(), "uploads");
    /// ```
    pub fn new(name: &str) -> Shield {
        Shield::with_handler(name, OrphanHandler::log())
    }

    /// A shield named `name` whose orphaned failures go to `handler`, the same kind of
    /// handler a pool takes (share one between them if you like). The handler runs on the
    /// thread that observes the orphaned failure: the runner's, or the one dropping the
    /// handle of work that had already failed.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::{OrphanHandler, Shield};
    ///
    /// let (handler, _reports) = OrphanHandler::channel(16);
    /// let shield = Shield::with_handler("uploads", handler);
    /// assert_eq!(shield.orphaned_failures(), 0);
    /// ```
    pub fn with_handler(name: &str, handler: OrphanHandler) -> Shield {
        let counter = ::metrics::counter!(ORPHANED_FAILURES_TOTAL, "pool" => name.to_string());
        counter.increment(0);
        Shield {
            inner: Arc::new(Origin {
                name: Arc::from(name),
                handler,
                orphaned: AtomicU64::new(0),
                counter,
            }),
        }
    }

    /// Splits `future` into a [`Runner`] to spawn and a [`Shielded`] handle to await or
    /// drop. Nothing runs until the runner is polled.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let shield = loopguard::Shield::new("ping");
    /// let (runner, handle) = shield.wrap(async { 1 + 1 });
    /// runner.await; // normally spawned and detached
    /// assert_eq!(handle.await, Ok(2));
    /// # });
    /// ```
    pub fn wrap<F>(&self, future: F) -> (Runner<F>, Shielded<F::Output>)
    where
        F: Future,
        F::Output: JobOutput,
    {
        let cell = Arc::new(Cell {
            origin: self.inner.clone(),
            slot: Mutex::new(Slot::Pending(None)),
            report: Origin::report::<F::Output>,
        });
        let runner = Runner {
            future: Some(future),
            delivery: Delivery {
                cell: Some(cell.clone()),
            },
            started: None,
        };
        (runner, Shielded { cell })
    }

    /// The shield's name: the [`Report::origin`] of its reports and its `pool` label.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(loopguard::Shield::new("a").name(), "a");
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Orphaned failures reported so far by this shield and its clones.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let shield = loopguard::Shield::new("quiet");
    /// let (runner, handle) = shield.wrap(async { Err::<(), _>("lost") });
    /// drop(handle);
    /// runner.await;
    /// assert_eq!(shield.orphaned_failures(), 1);
    /// # });
    /// ```
    pub fn orphaned_failures(&self) -> u64 {
        self.inner.orphaned.load(Ordering::Relaxed)
    }

    /// Reports a failure nobody else will see, as an orphaned failure of this shield.
    pub(crate) fn report<T: JobOutput>(&self, result: Result<T, Panicked>, elapsed: Duration) {
        self.inner.report(result, elapsed);
    }
}

impl Origin {
    fn report<T: JobOutput>(&self, result: Result<T, Panicked>, elapsed: Duration) {
        let Some((kind, message)) = describe_failure(&result) else {
            drop_quietly(result);
            return;
        };
        drop_quietly(result);
        self.orphaned.fetch_add(1, Ordering::Relaxed);
        self.counter.increment(1);
        self.handler
            .report(Report::new(self.name.clone(), kind, message, elapsed));
    }
}

impl fmt::Debug for Shield {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shield")
            .field("name", &self.name())
            .field("orphaned_failures", &self.orphaned_failures())
            .finish()
    }
}

/// Where the outcome of shielded work stands. Every transition happens under one lock, so
/// completion and drop cannot both claim (or both miss) a failure.
enum Slot<T> {
    /// Running; the waker of whoever awaits the handle.
    Pending(Option<Waker>),
    /// Finished, not yet taken by the handle.
    Ready(Result<T, Panicked>, Duration),
    /// The handle was dropped first: the runner reports.
    Orphaned,
    /// The runner was dropped before finishing.
    RunnerDropped,
    /// The outcome was taken, reported or discarded.
    Taken,
}

struct Cell<T> {
    origin: Arc<Origin>,
    slot: Mutex<Slot<T>>,
    /// `Origin::report::<T>`, captured where `T: JobOutput` is known, so that `Drop` of
    /// the handle needs no bound.
    report: fn(&Origin, Result<T, Panicked>, Duration),
}

impl<T: JobOutput> Cell<T> {
    /// The runner finished: hand the outcome over, or report it if the handle is gone.
    fn deliver(&self, result: Result<T, Panicked>, elapsed: Duration) {
        let mut slot = lock(&self.slot);
        match std::mem::replace(&mut *slot, Slot::Taken) {
            Slot::Pending(waker) => {
                *slot = Slot::Ready(result, elapsed);
                drop(slot);
                if let Some(waker) = waker {
                    wake_quietly(waker);
                }
            }
            _ => {
                drop(slot);
                self.origin.report(result, elapsed);
            }
        }
    }
}

impl<T> Cell<T> {
    /// The runner is gone without an outcome.
    fn runner_dropped(&self) {
        let mut slot = lock(&self.slot);
        match std::mem::replace(&mut *slot, Slot::Taken) {
            Slot::Pending(waker) => {
                *slot = Slot::RunnerDropped;
                drop(slot);
                if let Some(waker) = waker {
                    wake_quietly(waker);
                }
            }
            other => *slot = other,
        }
    }
}

/// The runner's side of the cell; tells the handle if the runner goes without delivering.
struct Delivery<T> {
    cell: Option<Arc<Cell<T>>>,
}

impl<T> Drop for Delivery<T> {
    fn drop(&mut self) {
        if let Some(cell) = self.cell.take() {
            cell.runner_dropped();
        }
    }
}

pin_project_lite::pin_project! {
    /// The half of [`Shield::wrap`] that runs the work: spawn it on your executor and detach
    /// it. It resolves to `()` once the work has finished and its outcome was handed to the
    /// [`Shielded`] handle or reported.
    ///
    /// It is `Send` when the wrapped future is, so a `!Send` future runs on a
    /// `LocalExecutor` and a `Send` one anywhere.
    ///
    /// # Cancel safety
    ///
    /// Dropping the runner before it finished cancels the work (there is no one else to run
    /// it); the handle then resolves to [`ShieldError::RunnerDropped`]. No failure is reported
    /// for cancelled work.
    ///
    /// # Panics
    ///
    /// Never propagates a panic of the wrapped future: it is caught and handed to the handle
    /// (or reported). Polling the runner after it resolved returns `Ready(())` again.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let ex = async_executor::LocalExecutor::new();
    /// let shield = loopguard::Shield::new("local");
    /// let rc = std::rc::Rc::new(5); // `!Send` state is fine on a LocalExecutor
    /// let (runner, handle) = shield.wrap(async move { *rc * 2 });
    /// ex.spawn(runner).detach();
    /// assert_eq!(ex.run(handle).await, Ok(10));
    /// # });
    /// ```
    #[must_use = "a Runner does nothing unless spawned or polled"]
    pub struct Runner<F: Future> {
        #[pin]
        future: Option<F>,
        delivery: Delivery<F::Output>,
        started: Option<Instant>,
    }
}

impl<F> Future for Runner<F>
where
    F: Future,
    F::Output: JobOutput,
{
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut this = self.project();
        let Some(future) = this.future.as_mut().as_pin_mut() else {
            return Poll::Ready(());
        };
        let started = *this.started.get_or_insert_with(Instant::now);
        let result = match catch_unwind(AssertUnwindSafe(|| future.poll(cx))) {
            Ok(Poll::Pending) => return Poll::Pending,
            Ok(Poll::Ready(output)) => Ok(output),
            Err(payload) => {
                let message = panic_message(&*payload);
                drop_quietly(payload);
                Err(Panicked::new(message))
            }
        };
        // Drop the finished future before delivering, containing a panic from its `Drop`.
        let _ = catch_unwind(AssertUnwindSafe(|| this.future.set(None)));
        if let Some(cell) = this.delivery.cell.take() {
            cell.deliver(result, started.elapsed());
        }
        Poll::Ready(())
    }
}

impl<F: Future> fmt::Debug for Runner<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runner")
            .field("started", &self.started.is_some())
            .field("finished", &self.future.is_none())
            .finish()
    }
}

/// The handle of shielded work, from [`Shield::wrap`].
///
/// Awaiting it gives the work's output, or a [`ShieldError`].
///
/// # Cancel safety
///
/// Dropping the handle *orphans* the work; it never cancels it. The runner finishes it, and
/// if it fails (panics, or returns an `Err` or another failure in the sense of
/// [`JobOutput`]) the failure goes to the shield's [`OrphanHandler`] exactly once, whether
/// the work finished before or after the drop. A failure returned to an awaiting caller is
/// never reported.
///
/// # Panics
///
/// Polling the handle again after it returned `Poll::Ready` panics.
///
/// # Examples
///
/// ```
/// # futures_lite::future::block_on(async {
/// async fn walk() -> u64 {
///     panic!("walk failed")
/// }
///
/// let shield = loopguard::Shield::new("walk");
/// let (runner, handle) = shield.wrap(walk());
/// runner.await;
/// let err: loopguard::ShieldError = handle.await.unwrap_err();
/// assert_eq!(err.to_string(), "shielded work panicked: walk failed");
/// assert_eq!(shield.orphaned_failures(), 0, "awaited, so not reported");
/// # });
/// ```
#[must_use = "dropping a Shielded handle orphans the work: it runs on and only failures are reported"]
pub struct Shielded<T> {
    cell: Arc<Cell<T>>,
}

impl<T> Shielded<T> {
    /// Whether the outcome is ready to be taken (the work finished, or its runner was
    /// dropped).
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let (runner, handle) = loopguard::Shield::new("s").wrap(async { 3 });
    /// assert!(!handle.is_finished());
    /// runner.await;
    /// assert!(handle.is_finished());
    /// # });
    /// ```
    pub fn is_finished(&self) -> bool {
        matches!(
            *lock(&self.cell.slot),
            Slot::Ready(..) | Slot::RunnerDropped | Slot::Taken
        )
    }
}

impl<T> Future for Shielded<T> {
    type Output = Result<T, ShieldError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut slot = lock(&self.cell.slot);
        match &mut *slot {
            Slot::Pending(waker) => {
                match waker {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => *waker = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
            Slot::Ready(..) => match std::mem::replace(&mut *slot, Slot::Taken) {
                Slot::Ready(result, _) => Poll::Ready(result.map_err(ShieldError::Panicked)),
                _ => unreachable!("matched Ready"),
            },
            Slot::RunnerDropped => {
                *slot = Slot::Taken;
                Poll::Ready(Err(ShieldError::RunnerDropped))
            }
            Slot::Orphaned | Slot::Taken => panic!("`Shielded` polled after completion"),
        }
    }
}

impl<T> Drop for Shielded<T> {
    fn drop(&mut self) {
        let mut slot = lock(&self.cell.slot);
        match std::mem::replace(&mut *slot, Slot::Taken) {
            Slot::Pending(_) => *slot = Slot::Orphaned,
            Slot::Ready(result, elapsed) => {
                drop(slot);
                (self.cell.report)(&self.cell.origin, result, elapsed);
            }
            Slot::Orphaned | Slot::RunnerDropped | Slot::Taken => {}
        }
    }
}

impl<T> fmt::Debug for Shielded<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shielded")
            .field("origin", &&*self.cell.origin.name)
            .field("finished", &self.is_finished())
            .finish()
    }
}

/// Why a [`Shielded`] handle resolved without the work's output.
///
/// # Examples
///
/// ```
/// # futures_lite::future::block_on(async {
/// let (runner, handle) = loopguard::Shield::new("s").wrap(async { 1 });
/// drop(runner); // say, the executor shut down
/// let err = handle.await.unwrap_err();
/// assert!(matches!(err, loopguard::ShieldError::RunnerDropped));
/// assert_eq!(err.to_string(), "shielded work was dropped before it finished");
/// # });
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShieldError {
    /// The work panicked.
    Panicked(Panicked),
    /// The [`Runner`] was dropped before the work finished, so it never will.
    RunnerDropped,
}

impl fmt::Display for ShieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShieldError::Panicked(p) => write!(f, "shielded work panicked: {}", p.message()),
            ShieldError::RunnerDropped => {
                f.write_str("shielded work was dropped before it finished")
            }
        }
    }
}

impl std::error::Error for ShieldError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ShieldError::Panicked(p) => Some(p),
            ShieldError::RunnerDropped => None,
        }
    }
}

impl From<ShieldError> for std::io::Error {
    fn from(err: ShieldError) -> std::io::Error {
        std::io::Error::other(err)
    }
}
