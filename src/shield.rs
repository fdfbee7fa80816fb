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
//!   or returns an `Err` from a future wrapped in [`Fallible`]), the failure goes to the
//!   shield's [`OrphanHandler`], exactly once.
//!
//! [`Shield::spawn`] does both in one call for any executor: it wraps the work, hands the
//! runner to a spawn closure (`|runner| ex.spawn(runner).detach()`) and returns the handle.
//! A runner that is never spawned never runs: keep `wrap` for executors a closure cannot
//! reach, and spawn what it returns.
//!
//! The future's output may be of any type (see [`IntoShielded`]). This is the contract of a
//! pool [`Job`](crate::pool::Job) for async work, on the same hand-off. A failure the caller
//! awaited is never reported; an orphaned failure is never lost; completion and drop can
//! race in any order. The runner itself may be dropped before it finished (an executor
//! shutting down drops its tasks): the handle then resolves to [`ShieldError::RunnerDropped`]
//! instead of hanging.
//!
//! # Draining
//!
//! [`Shield::in_flight`] counts the work wrapped and not yet finished, and
//! [`Shield::wait_idle`] resolves when none is left: at shutdown, drop (or keep) the handles,
//! `shield.wait_idle().await`, then exit, and every orphaned failure has been reported. Work
//! counts from [`wrap`](Shield::wrap) until its runner has handed its outcome over (before
//! the handle is woken) or reported it (after the handler returned), or until the runner
//! is dropped.
//!
//! # Metrics
//!
//! Every orphaned failure is counted in `loopguard_orphaned_failures_total` with the label
//! `shield` set to the shield's name (a pool's carry `pool`), and in
//! [`Shield::orphaned_failures`]. The series is
//! created with a zero when the shield is built, so install the recorder first.
//!

use std::fmt;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::contain::{drop_quietly, panic_message};
use crate::failure::{self, Classifier, Fallible, Panicked};
use crate::handoff::{Finished, Handoff, Taken};
use crate::orphan::{OrphanHandler, Reporter};
use crate::signal::{Signal, Wait};

/// The sealed sides of [`IntoShielded`] and [`Detached`]: not nameable outside the crate.
mod sealed {
    use crate::failure::Classifier;

    pub trait Sealed {
        /// The future, and which of its outputs are failures an orphaned one reports.
        fn into_parts(
            self,
        ) -> (
            <Self as super::IntoShielded>::Future,
            Classifier<<Self as super::IntoShielded>::Output>,
        )
        where
            Self: super::IntoShielded + Sized;
    }
    pub trait SealedDetached {}
}

/// What a [`Shield`] wraps: any future, or a future whose output is `Result<T, E>` wrapped
/// in [`Fallible`] to have an orphaned `Err` reported.
///
/// Implemented for exactly those two; there is nothing to implement yourself.
///
/// # Examples
///
/// ```
/// use loopguard::Fallible;
/// use loopguard::shield::Shield;
///
/// # futures_lite::future::block_on(async {
/// let shield = Shield::new("flush")?;
/// let (runner, handle) = shield.wrap(Fallible(async { Err::<(), _>("disk full") }));
/// drop(handle); // nobody waits: the `Err` is reported
/// runner.await;
/// assert_eq!(shield.orphaned_failures(), 1);
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not work a shield can wrap",
    label = "not a future, nor `Fallible(..)` of one whose output is `Result<T, E: Debug>`",
    note = "a shield wraps a future (`async {{ .. }}`); wrap one whose output is `Result<T, E: Debug>` in `loopguard::Fallible(..)` to have an orphaned `Err` reported",
    note = "in `Fallible(async {{ .. }})` the output must be `Result<T, E>` whose error type `E` is `Debug`: add `#[derive(Debug)]` to `E`, or return `Err(e.to_string())`; without `Fallible` a `Result` of any error type is a plain output"
)]
pub trait IntoShielded: sealed::Sealed {
    /// The future that runs.
    type Future: Future<Output = Self::Output>;
    /// What the work returns.
    type Output;
}

impl<F: Future> IntoShielded for F {
    type Future = F;
    type Output = F::Output;
}

impl<F: Future> sealed::Sealed for F {
    fn into_parts(
        self,
    ) -> (
        <Self as IntoShielded>::Future,
        Classifier<<Self as IntoShielded>::Output>,
    ) {
        (self, failure::never::<F::Output>)
    }
}

impl<F, T, E> IntoShielded for Fallible<F>
where
    F: Future<Output = Result<T, E>>,
    E: fmt::Debug,
{
    type Future = F;
    type Output = Result<T, E>;
}

impl<F, T, E> sealed::Sealed for Fallible<F>
where
    F: Future<Output = Result<T, E>>,
    E: fmt::Debug,
{
    fn into_parts(
        self,
    ) -> (
        <Self as IntoShielded>::Future,
        Classifier<<Self as IntoShielded>::Output>,
    ) {
        (self.0, failure::when_err::<T, E>)
    }
}

/// What the spawn closure of [`Shield::spawn`] returns: `()`, once it has spawned the runner
/// and let its task go. A task handle that cancels its task on drop (`smol::Task`,
/// `async_executor::Task`) is refused at compile time, with a message saying to detach it.
///
/// Implemented for `()` only; there is nothing to implement yourself.
///
/// # Examples
///
/// ```
/// # futures_lite::future::block_on(async {
/// let ex = async_executor::Executor::new();
/// let shield = loopguard::shield::Shield::new("flush")?;
/// // `.detach()` returns `()`: the task runs on without its handle.
/// let handle = shield.spawn(async { 2 }, |runner| ex.spawn(runner).detach());
/// assert_eq!(ex.run(handle).await, Ok(2));
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
#[diagnostic::on_unimplemented(
    message = "the spawn closure returns `{Self}`: a task handle that may cancel the work when dropped",
    label = "detach the task here: `ex.spawn(runner).detach()`",
    note = "`Shield::spawn` keeps no task handle, so its closure spawns the runner and detaches it, returning `()`: `.detach()` for smol and async-executor tasks; a tokio or async-std `JoinHandle` detaches when dropped: `drop(tokio::spawn(runner))`"
)]
pub trait Detached: sealed::SealedDetached {}

impl sealed::SealedDetached for () {}

impl Detached for () {}

/// Where orphaned async work reports its failures; see the [module docs](self).
///
/// A cheap handle (`Clone + Send + Sync`); clones share the handler and the counter.
///
/// # Examples
///
/// ```
/// use loopguard::orphan::OrphanHandler;
/// use loopguard::shield::Shield;
///
/// # futures_lite::future::block_on(async {
/// let shield = Shield::with_handler("flush", OrphanHandler::new(|r| eprintln!("{r}")))?;
/// let (runner, handle) = shield.wrap(async { Ok::<u32, String>(7) });
/// // With smol: `smol::spawn(runner).detach();`
/// # let ex = async_executor::Executor::new();
/// # ex.spawn(runner).detach();
/// # let handle = ex.run(handle);
/// assert_eq!(handle.await.unwrap(), Ok(7));
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct Shield {
    reporter: Arc<Reporter>,
    work: Arc<Tracker>,
}

/// The work of one shield (and its clones) not yet finished, and who waits for none.
#[derive(Debug, Default)]
struct Tracker {
    count: AtomicUsize,
    /// Finished work counted out of `count` whose outcome is not takeable yet (a runner
    /// between its finish and its publish): `wait_idle` waits for it too.
    publishing: AtomicUsize,
    idle: Signal,
}

impl Tracker {
    fn start(&self) {
        self.count.fetch_add(1, Ordering::AcqRel);
    }

    /// One piece of work is done (its outcome handed over or reported, or its runner gone).
    fn finish(&self) {
        if self.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.idle.notify_all();
        }
    }

    fn in_flight(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// A runner is about to count its work out before it publishes the outcome.
    fn begin_publish(&self) {
        self.publishing.fetch_add(1, Ordering::AcqRel);
    }

    /// The outcome announced by `begin_publish` is takeable.
    fn end_publish(&self) {
        if self.publishing.fetch_sub(1, Ordering::AcqRel) == 1 && self.in_flight() == 0 {
            self.idle.notify_all();
        }
    }

    /// Nothing in flight, and every outcome counted out is takeable.
    fn is_idle(&self) -> bool {
        self.in_flight() == 0 && self.publishing.load(Ordering::Acquire) == 0
    }
}

impl Shield {
    /// A shield named `name` (its series' `shield` label) whose orphaned failures go to
    /// [`OrphanHandler::log()`].
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`](std::io::ErrorKind::InvalidInput) for a name that is
    /// empty or has a NUL byte.
    ///
    /// # Examples
    ///
    /// ```
    /// let shield = loopguard::shield::Shield::new("uploads")?;
    /// assert_eq!(shield.name(), "uploads");
    /// let err = loopguard::shield::Shield::new("").unwrap_err();
    /// assert_eq!(err.to_string(), "a shield name must not be empty");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn new(name: &str) -> std::io::Result<Shield> {
        Shield::with_handler(name, OrphanHandler::log())
    }

    /// A shield named `name` whose orphaned failures go to `handler`, the same kind of
    /// handler a pool takes (share one between them if you like). The handler runs on the
    /// thread that observes the orphaned failure: the runner's, or the one dropping the
    /// handle of work that had already failed.
    ///
    /// # Errors
    ///
    /// As for [`new`](Shield::new).
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::orphan::OrphanHandler;
    /// use loopguard::shield::Shield;
    ///
    /// let (handler, _reports) = OrphanHandler::channel(16);
    /// let shield = Shield::with_handler("uploads", handler)?;
    /// assert_eq!(shield.orphaned_failures(), 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn with_handler(name: &str, handler: OrphanHandler) -> std::io::Result<Shield> {
        crate::name::check("a shield", name)?;
        Ok(Shield {
            reporter: Arc::new(Reporter::new(
                crate::emit::LABEL_SHIELD,
                Arc::from(name),
                handler,
            )),
            work: Arc::default(),
        })
    }

    /// Splits `work` into a [`Runner`] to spawn and a [`Shielded`] handle to await or
    /// drop. Nothing runs until the runner is polled.
    ///
    /// A runner that is never spawned never runs the work: `let (_runner, handle) =
    /// shield.wrap(..)` drops it at once, and the handle resolves to
    /// [`ShieldError::RunnerDropped`]. [`Shield::spawn`] spawns and returns the handle in one
    /// call; use `wrap` when the runner must go somewhere a closure cannot reach.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let shield = loopguard::shield::Shield::new("ping")?;
    /// let (runner, handle) = shield.wrap(async { 1 + 1 });
    /// runner.await; // normally spawned and detached
    /// assert_eq!(handle.await, Ok(2));
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn wrap<W: IntoShielded>(&self, work: W) -> (Runner<W::Future>, Shielded<W::Output>) {
        let (future, classify) = work.into_parts();
        let handoff = Arc::new(Handoff::new(classify, self.reporter.clone()));
        self.work.start();
        let runner = Runner {
            future: Some(future),
            delivery: Delivery {
                handoff: Some(handoff.clone()),
                work: self.work.clone(),
            },
            started: None,
        };
        (runner, Shielded { handoff })
    }

    /// Wraps `work` and hands its [`Runner`] to `spawn` at once, returning the handle: the
    /// one-call form of [`wrap`](Shield::wrap), for any executor. `spawn` must start the
    /// runner and let it go (detach it): a task handle that cancels on drop, such as
    /// `smol::Task` or `async_executor::Task`, must be detached, or the work is cancelled
    /// and the handle resolves to [`ShieldError::RunnerDropped`]. That is why `spawn`
    /// returns `()` (see [`Detached`]), not a task handle:
    ///
    /// - smol: `shield.spawn(work, |runner| smol::spawn(runner).detach())`
    /// - an `async_executor::Executor` or `LocalExecutor` (`!Send` work):
    ///   `shield.spawn(work, |runner| ex.spawn(runner).detach())`
    /// - async-std: `shield.spawn(work, |runner| drop(async_std::task::spawn(runner)))`
    /// - tokio: `shield.spawn(work, |runner| drop(tokio::spawn(runner)))`
    ///
    /// Awaiting the handle gives the output; dropping it orphans the work, as with `wrap`.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let ex = async_executor::LocalExecutor::new();
    /// let shield = loopguard::shield::Shield::new("flush")?;
    /// let rows = std::rc::Rc::new(vec![1, 2, 3]); // `!Send` work is fine on a LocalExecutor
    /// let handle = shield.spawn(async move { rows.len() }, |runner| ex.spawn(runner).detach());
    /// assert_eq!(ex.run(handle).await, Ok(3));
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn spawn<W: IntoShielded, D: Detached>(
        &self,
        work: W,
        spawn: impl FnOnce(Runner<W::Future>) -> D,
    ) -> Shielded<W::Output> {
        let (runner, handle) = self.wrap(work);
        spawn(runner);
        handle
    }

    /// The shield's name: the [`Report::origin`](crate::orphan::Report::origin) of its
    /// reports and its `pool` label.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(loopguard::shield::Shield::new("a")?.name(), "a");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        self.reporter.origin()
    }

    /// Orphaned failures reported so far by this shield and its clones.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let shield = loopguard::shield::Shield::new("quiet")?;
    /// let (runner, handle) = shield.wrap(async { panic!("lost") });
    /// drop(handle);
    /// runner.await;
    /// assert_eq!(shield.orphaned_failures(), 1);
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn orphaned_failures(&self) -> u64 {
        self.reporter.orphaned()
    }

    /// Work of this shield and its clones not yet finished: wrapped, and its runner has not
    /// yet handed the outcome over (or reported it), nor been dropped. A runner never
    /// spawned counts until it is dropped.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let shield = loopguard::shield::Shield::new("flush")?;
    /// let (runner, handle) = shield.wrap(async { 1 });
    /// assert_eq!(shield.in_flight(), 1);
    /// runner.await;
    /// assert_eq!(shield.in_flight(), 0, "finished, though nobody took the output yet");
    /// assert_eq!(handle.await, Ok(1));
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn in_flight(&self) -> usize {
        self.work.in_flight()
    }

    /// Resolves once [`in_flight`](Shield::in_flight) is zero: every piece of work wrapped so
    /// far has finished and its outcome was handed over (ready to be taken) or reported
    /// (orphaned failures included), or its runner was dropped. Resolves at once when nothing is in flight.
    /// Work wrapped after it resolved is not waited for.
    ///
    /// For a clean shutdown: drop the handles nobody will await, wait for this, then exit;
    /// no failure is lost to the exit.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes.
    ///
    /// # Caveats
    ///
    /// A handle dropped *after* its work finished reports the failure on the dropping
    /// thread, during that `drop`: a drop racing the wait on another thread may still be
    /// reporting when this resolves. Work whose runner is never polled again (a stalled
    /// executor) keeps this pending.
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::Fallible;
    /// use loopguard::shield::Shield;
    ///
    /// # futures_lite::future::block_on(async {
    /// let ex = async_executor::Executor::new();
    /// let shield = Shield::new("uploads")?;
    /// for _ in 0..3 {
    ///     // Orphaned at once: nobody awaits these.
    ///     drop(shield.spawn(Fallible(async { Err::<(), _>("refused") }), |runner| {
    ///         ex.spawn(runner).detach()
    ///     }));
    /// }
    /// assert_eq!(shield.in_flight(), 3);
    /// // At shutdown (with smol: `shield.wait_idle().await` on the loop):
    /// ex.run(shield.wait_idle()).await;
    /// assert_eq!((shield.in_flight(), shield.orphaned_failures()), (0, 3));
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn wait_idle(&self) -> ShieldWaitIdle<'_> {
        let work = &*self.work;
        let idle: IdleCheck<'_> = Box::new(move || work.is_idle());
        ShieldWaitIdle {
            work,
            wait: work.idle.wait(idle),
        }
    }

    /// Reports a failure nobody else will see, as an orphaned failure of this shield.
    pub(crate) fn report_panic(&self, panicked: Panicked, elapsed: Duration) {
        self.reporter
            .orphaned_outcome::<()>(Err(panicked), failure::never::<()>, elapsed);
    }
}

impl fmt::Debug for Shield {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shield")
            .field("name", &self.name())
            .field("in_flight", &self.in_flight())
            .field("orphaned_failures", &self.orphaned_failures())
            .finish()
    }
}

/// The condition [`ShieldWaitIdle`] waits for.
type IdleCheck<'a> = Box<dyn Fn() -> bool + Send + Sync + 'a>;

/// Future for [`Shield::wait_idle`]: resolves once no work of the shield is in flight.
///
/// # Cancel safety
///
/// Cancel safe: dropping it only withdraws the wait.
///
/// # Examples
///
/// ```
/// use loopguard::shield::{Shield, ShieldWaitIdle};
///
/// # futures_lite::future::block_on(async {
/// let shield = Shield::new("idle").unwrap();
/// let idle: ShieldWaitIdle<'_> = shield.wait_idle();
/// assert_eq!(format!("{idle:?}"), "ShieldWaitIdle { in_flight: 0 }");
/// idle.await; // nothing in flight: at once
/// # });
/// ```
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct ShieldWaitIdle<'a> {
    work: &'a Tracker,
    wait: Wait<'a, IdleCheck<'a>>,
}

impl Future for ShieldWaitIdle<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.get_mut().wait).poll(cx)
    }
}

impl fmt::Debug for ShieldWaitIdle<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShieldWaitIdle")
            .field("in_flight", &self.work.in_flight())
            .finish()
    }
}

/// The runner's side of the hand-off; tells the handle if the runner goes without
/// delivering. Its work counts as in flight until it delivered or went.
struct Delivery<T> {
    handoff: Option<Arc<Handoff<T>>>,
    work: Arc<Tracker>,
}

impl<T> Delivery<T> {
    /// Stores the outcome (or reports it, if the handle is gone), counts the work as
    /// finished, then lets the handle take the outcome: a caller woken by its work never
    /// finds it still in flight, and a drain never resolves before a report is out.
    fn deliver(&mut self, result: Result<T, Panicked>, elapsed: Duration) {
        if let Some(handoff) = self.handoff.take() {
            let stored = handoff.store(result, elapsed);
            self.work.begin_publish();
            self.work.finish();
            stored.publish();
            self.work.end_publish();
        }
    }
}

impl<T> Drop for Delivery<T> {
    fn drop(&mut self) {
        if let Some(handoff) = self.handoff.take() {
            let work = &self.work;
            handoff.abandon(|| work.finish());
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
    /// let shield = loopguard::shield::Shield::new("local")?;
    /// let rc = std::rc::Rc::new(5); // `!Send` state is fine on a LocalExecutor
    /// let (runner, handle) = shield.wrap(async move { *rc * 2 });
    /// ex.spawn(runner).detach();
    /// assert_eq!(ex.run(handle).await, Ok(10));
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    #[must_use = "the work never runs unless the Runner is spawned: `ex.spawn(runner).detach()`, or `Shield::spawn(work, |runner| ex.spawn(runner).detach())` in one call"]
    pub struct Runner<F: Future> {
        #[pin]
        future: Option<F>,
        delivery: Delivery<F::Output>,
        started: Option<Instant>,
    }
}

impl<F: Future> Future for Runner<F> {
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
        this.delivery.deliver(result, started.elapsed());
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
/// if it fails (panics, or returns an `Err` from [`Fallible`] work) the failure goes to the
/// shield's [`OrphanHandler`] exactly once, whether the work finished before or after the
/// drop. A failure returned to an awaiting caller is never reported.
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
/// let shield = loopguard::shield::Shield::new("walk")?;
/// let (runner, handle) = shield.wrap(walk());
/// runner.await;
/// let err: loopguard::shield::ShieldError = handle.await.unwrap_err();
/// assert_eq!(err.to_string(), "shielded work panicked: walk failed");
/// assert_eq!(shield.orphaned_failures(), 0, "awaited, so not reported");
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
#[must_use = "dropping a Shielded handle orphans the work: it runs on and only failures are reported"]
pub struct Shielded<T> {
    handoff: Arc<Handoff<T>>,
}

impl<T> Shielded<T> {
    /// Whether the outcome is ready to be taken (the work finished, or its runner was
    /// dropped).
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let (runner, handle) = loopguard::shield::Shield::new("s")?.wrap(async { 3 });
    /// assert!(!handle.is_finished());
    /// runner.await;
    /// assert!(handle.is_finished());
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn is_finished(&self) -> bool {
        self.handoff.is_finished()
    }

    /// Takes the outcome with how long the work ran, for a caller that may still refuse it.
    pub(crate) fn poll_outcome(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Finished<T>, ShieldError>> {
        self.handoff
            .poll_take(cx, "Shielded")
            .map(|taken| match taken {
                Taken::Outcome(result, elapsed) => Ok((result, elapsed)),
                Taken::Abandoned => Err(ShieldError::RunnerDropped),
            })
    }
}

impl<T> Future for Shielded<T> {
    type Output = Result<T, ShieldError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().poll_outcome(cx).map(|taken| match taken {
            Ok((result, _)) => result.map_err(ShieldError::Panicked),
            Err(err) => Err(err),
        })
    }
}

impl<T> Drop for Shielded<T> {
    fn drop(&mut self) {
        self.handoff.orphan();
    }
}

impl<T> fmt::Debug for Shielded<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shielded")
            .field("origin", &self.handoff.reporter().origin())
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
/// let (runner, handle) = loopguard::shield::Shield::new("s")?.wrap(async { 1 });
/// drop(runner); // say, the executor shut down
/// let err = handle.await.unwrap_err();
/// assert!(matches!(err, loopguard::shield::ShieldError::RunnerDropped));
/// assert_eq!(err.to_string(), "shielded work was dropped before it finished");
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
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

/// No `source()`: `Display` already shows the panic's message, so a chain printed by a
/// reporter names each cause once.
impl std::error::Error for ShieldError {}

impl From<ShieldError> for std::io::Error {
    fn from(err: ShieldError) -> std::io::Error {
        std::io::Error::other(err)
    }
}
