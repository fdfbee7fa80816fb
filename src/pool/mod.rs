//! A bounded offload pool: fixed worker threads behind an admission gate sized to them.
//!
//! [`Pool::try_run`] fails fast when every slot is held ([`Saturated`], an HTTP 503 with
//! `Retry-After`), [`Pool::run`] waits for a slot in FIFO order, [`Pool::run_within`] does
//! so within a [`Deadline`]. Awaiting the [`Job`] (or the [`Run`]) gives the output;
//! dropping it orphans the job, which runs on and keeps its slot, and whose failure reaches
//! the pool's [`OrphanHandler`](crate::orphan::OrphanHandler) exactly once.
//!
//! The files of this module import downward. The handle (here) is on top; under it the
//! futures, [`Run`] in `run` and [`TryRunWithin`] in `within`, over `job` (what a pool
//! runs, the one admission path, the [`Job`] handle), `held` (the slot a request being
//! served holds) and `estimate` (early refusal); then `core` (the state they share), over
//! `threads` (starting the workers), `monitor` (stuck jobs), `workers` (dispatch and
//! parking), `stats`, `builder` and `error`. Admission itself is `crate::gate`, outside
//! this module: its fast paths are one compare-and-exchange, its waiters wait in a locked
//! FIFO (one acquire future for every waiter), and a slot is an owned permit whose `Drop`
//! is the one release (it samples the `Retry-After` basis, hands the slot to the oldest
//! waiter and notifies idleness). A job keeps its permit (or a share of a tower request's,
//! lent to it) until the worker drops it.

mod builder;
mod core;
pub(crate) mod deliver;
mod error;
pub(crate) mod estimate;
mod held;
mod job;
mod monitor;
mod run;
mod stats;
mod threads;
mod within;
mod workers;

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use self::core::Core;
use crate::deadline::Deadline;
use crate::emit::JobOutcome;

pub use self::builder::{MAX_WORKERS, PoolBuilder};
pub use self::error::{RunError, Saturated, TryRunError, WithinError};
#[cfg(feature = "tower")]
pub(crate) use self::job::Lent;
pub use self::job::{IntoJob, Job};
pub use self::run::Run;
pub use self::stats::PoolStats;
pub use self::within::TryRunWithin;
pub use crate::emit::durations::DurationStats;

/// A fixed set of worker threads for blocking work, behind an admission gate with exactly
/// one slot per thread.
///
/// An admitted job starts at once on a free thread; nothing queues behind the threads.
/// [`try_run`](Pool::try_run) fails fast when every slot is held, [`run`](Pool::run) waits
/// for a slot in FIFO order.
///
/// `Pool` is a cheap handle (`Clone + Send + Sync`); clones share the threads.
///
/// # The slot rule
///
/// A slot is held from admission until the worker thread has finished the job (returned
/// or panicked) *and* stored its outcome for the awaiting [`Job`], or reported it to the
/// orphan handler when nobody awaits it. It is released by the worker, never by the
/// awaiting side: dropping a [`Job`] or a [`Run`], or a deadline passing, never frees a
/// slot early, so a caller that leaves cannot make room for new work while its own still
/// occupies a thread. At quiescence ([`wait_idle`](Pool::wait_idle)), [`in_use`](Pool::in_use)
/// is 0.
///
/// **The slot is free when the caller wakes.** In order, the worker stores the outcome (or,
/// when nobody awaits it, hands a failure to the orphan handler, which so runs with the
/// slot held), tells the metrics recorder (also with the slot held), drops the job's
/// permit (the release: the job's time joins the `Retry-After` basis, the slot goes to the
/// oldest caller waiting in [`run`](Pool::run) if there is one), and only then lets the
/// caller take the outcome and wakes it; [`wait_idle`](Pool::wait_idle) resolves once no
/// slot is held and every such outcome is takeable. A caller that has its
/// output, however it was polled, never finds its job's slot still held: a `try_run`
/// issued straight after awaiting a job is not refused by it.
///
/// # Outputs
///
/// A job is any `FnOnce() -> T + Send + 'static` closure with a `Send + 'static` output
/// (see [`IntoJob`]). A panic is a failure; so is an `Err` of a closure wrapped in
/// [`Fallible`](crate::Fallible).
///
/// # Shutdown
///
/// [`close`](Pool::close), or dropping the last handle, stops admission: running and already
/// admitted jobs finish, callers waiting in [`run`](Pool::run) get [`RunError::Closed`], and
/// each thread exits once no admitted job is left. Dropping never blocks; a job that never
/// returns keeps its thread alive but does not delay process exit (Rust does not wait for
/// spawned threads when `main` returns). [`shutdown`](Pool::shutdown) closes and waits for
/// the threads to exit, then joins them.
///
/// # Examples
///
/// ```
/// use loopguard::pool::{Pool, TryRunError};
///
/// # futures_lite::future::block_on(async {
/// let pool = Pool::builder().name("registry-serve").workers(2).build()?;
///
/// // An HTTP handler fails fast:
/// match pool.try_run(|| "up 1\n".to_string()) {
///     Ok(job) => assert_eq!(job.await.unwrap(), "up 1\n"),
///     Err(TryRunError::Saturated(busy)) => println!("503, Retry-After: {}", busy.retry_after_secs()),
///     Err(err) => println!("{err}"),
/// }
///
/// // A background task waits its turn:
/// let series = pool.run(|| 10_000_u64).await.unwrap();
/// assert_eq!(series, 10_000);
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
///
#[derive(Clone)]
pub struct Pool {
    handle: Arc<Handle>,
}

/// Closes the pool when the last `Pool` handle goes.
///
/// It keeps the pool's limit beside the core: `try_run` reads the gate through one pointer,
/// as it would if the limit were inline in the core.
struct Handle {
    limit: Arc<crate::gate::limit::Limit>,
    core: Arc<Core>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.core.close();
    }
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let core = self.core();
        f.debug_struct("Pool")
            .field("name", &&**core.limit.name())
            .field("capacity", &core.limit.capacity())
            .field("in_use", &core.limit.in_use())
            .field("waiting", &core.limit.waiting())
            .field("closed", &core.limit.is_closed())
            .finish()
    }
}

impl Pool {
    /// A builder for a pool.
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = loopguard::pool::Pool::builder().name("cardinality").workers(1).build()?;
    /// assert_eq!(pool.capacity(), 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn builder() -> PoolBuilder {
        PoolBuilder::new()
    }

    fn core(&self) -> &Arc<Core> {
        &self.handle.core
    }

    /// Admits `job` if a slot is free and nobody is waiting for one, and starts it at once on
    /// a worker thread.
    ///
    /// Never awaits. A refusal is a few atomic operations (a load of the gate's word, an add
    /// to the refusal count, a relaxed load of whether a tower layer lends this pool's slots,
    /// and one of the mean job time behind [`retry_after`](Saturated::retry_after)), plus one
    /// thread-local read when a layer does: it takes no lock,
    /// allocates nothing, queues nothing, and hands the job back inside the error (an
    /// admission is one compare-and-exchange on that word). An admission allocates the job's
    /// hand-off (one allocation) and takes two short, uncontended-in-practice locks (the
    /// demand signal's and the dispatch queue's) to hand the job to a worker. While callers wait in [`run`](Pool::run), `try_run`
    /// refuses, so a loop of `try_run` calls cannot starve them.
    ///
    /// # Errors
    ///
    /// [`TryRunError::Saturated`] when every slot is held or callers are waiting, with a
    /// [`retry_after`](Saturated::retry_after) hint; [`TryRunError::Closed`] after
    /// [`close`](Pool::close); [`TryRunError::OwnSlot`] instead of `Saturated` when called
    /// by the handler of a request that holds one of this pool's slots (the tower layer's
    /// `for_pool`): that request's `slot.try_run(&pool, job)` runs the job on its own slot.
    /// (That check is one thread-local read, made on the refusal path only.)
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let pool = loopguard::pool::Pool::builder().workers(1).build()?;
    /// let job = pool.try_run(|| 6 * 7).expect("an idle pool admits");
    /// assert_eq!(job.await, Ok(42));
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn try_run<W: IntoJob<T>, T: Send + 'static>(
        &self,
        job: W,
    ) -> Result<Job<T>, TryRunError<W>> {
        job::try_admit(&self.handle.limit, self.core(), job)
    }

    /// [`try_run`](Pool::try_run) and a deadline in one call: fails fast at the first poll
    /// when every slot is held, then resolves to the job's output within `deadline`.
    ///
    /// - At the first poll: [`WithinError::Saturated`] (the job back inside, nothing
    ///   queued) or [`WithinError::Closed`]; if the deadline has already passed,
    ///   [`WithinError::Expired`] in [`Phase::InLine`](crate::deadline::Phase::InLine) and the job never runs.
    /// - If the deadline passes while the job runs, [`WithinError::Expired`] in
    ///   [`Phase::Running`](crate::deadline::Phase::Running): the job runs
    ///   on, orphaned, keeps its slot until its thread is done, and a failure of it is
    ///   reported to the orphan handler, once.
    /// - An output delivered after the deadline is refused the same way.
    /// - In time, a plain job's output is the value; a [`Fallible`](crate::Fallible) job
    ///   resolves flat, to its `Ok` value or its own `Err` in [`WithinError::Failed`].
    ///
    /// An exporter's whole scrape is then one `match`, with a refusal (503 and
    /// `Retry-After`) told apart from a spent budget and from a failed walk.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before its first poll drops the job unrun; after that it
    /// orphans the job, exactly like dropping a [`Job`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loopguard::deadline::{Deadline, Phase};
    /// use loopguard::pool::{Pool, WithinError};
    ///
    /// # futures_lite::future::block_on(async {
    /// let pool = Pool::builder().workers(1).build()?;
    /// let budget = Deadline::after(Duration::from_millis(20));
    /// let slow = pool.try_run_within(budget, || std::thread::sleep(Duration::from_millis(200)));
    /// let Err(WithinError::Expired(spent)) = slow.await else { unreachable!("200 ms > 20 ms") };
    /// assert_eq!(spent.phase(), Phase::Running);
    /// // The walk still holds its slot, so the next caller is refused at once.
    /// let next = pool.try_run_within(Deadline::never(), || ()).await;
    /// assert!(next.unwrap_err().is_saturated());
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn try_run_within<W: IntoJob<T>, T: Send + 'static>(
        &self,
        deadline: Deadline,
        job: W,
    ) -> TryRunWithin<W, T> {
        TryRunWithin::new(self.core().clone(), job, deadline)
    }

    /// Waits for a slot, then runs `job` on a worker thread and resolves to its output.
    ///
    /// Waiters are served in FIFO order: a slot freed while callers wait goes to the oldest
    /// of them, not to a concurrent [`try_run`](Pool::try_run).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future while it waits leaves no trace: it takes no slot, and a slot
    /// handed to it at that moment passes on to the next waiter. Dropping it after the job
    /// started orphans the job, exactly like dropping a [`Job`].
    ///
    /// # Errors
    ///
    /// [`RunError::Closed`] if the pool closes before the job gets a slot;
    /// [`RunError::Panicked`] if the job panics; [`RunError::OwnSlot`] at once, instead of
    /// waiting, when it would have to wait and is awaited by the handler of a request that
    /// holds one of this pool's slots (the tower layer's `for_pool`: it would wait for
    /// itself; use that request's `slot.try_run(&pool, job)`).
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let pool = loopguard::pool::Pool::builder().workers(1).build()?;
    /// let (a, b) = futures_lite::future::zip(pool.run(|| 1), pool.run(|| 2)).await;
    /// assert_eq!((a.unwrap(), b.unwrap()), (1, 2));
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn run<W: IntoJob<T>, T: Send + 'static>(&self, job: W) -> Run<W, T> {
        Run::new(self.core().clone(), job, Deadline::never())
    }

    /// Like [`run`](Pool::run), within `deadline`: the wait for a slot spends the same budget
    /// as the job, and after expiry nothing new starts.
    ///
    /// - If the deadline passes while the caller waits, it leaves the queue; a slot granted
    ///   to it at that moment is handed back at once, to the next waiter. The future
    ///   resolves to [`RunError::Expired`] in [`Phase::InLine`](crate::deadline::Phase::InLine).
    /// - If the deadline passes while the job runs, the future resolves to
    ///   [`RunError::Expired`] in [`Phase::Running`](crate::deadline::Phase::Running) and the job is orphaned: it keeps its slot until its thread
    ///   finishes (a thread cannot be pre-empted), and a failure is reported to the orphan
    ///   handler.
    /// - An output that arrives after the deadline is not returned as success.
    ///
    /// Expiry is observed cooperatively, when the future is polled (its timer wakes it at
    /// the deadline).
    ///
    /// # Cancel safety
    ///
    /// As for [`run`](Pool::run).
    ///
    /// # Examples
    ///
    /// ```
    /// use loopguard::deadline::Deadline;
    /// use loopguard::pool::{Pool, RunError};
    /// use std::time::Duration;
    ///
    /// # futures_lite::future::block_on(async {
    /// let pool = Pool::builder().workers(1).build()?;
    /// let budget = Deadline::after(Duration::from_millis(20));
    /// let slow = pool.run_within(budget, || std::thread::sleep(Duration::from_millis(200)));
    /// assert!(matches!(slow.await, Err(RunError::Expired(_))));
    /// // The walk still holds its slot until its thread is done.
    /// assert_eq!(pool.in_use(), 1);
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    ///
    ///
    pub fn run_within<W: IntoJob<T>, T: Send + 'static>(
        &self,
        deadline: Deadline,
        job: W,
    ) -> Run<W, T> {
        Run::new(self.core().clone(), job, deadline)
    }

    /// The pool's name: its threads are `NAME-0`, `NAME-1`, …, and its metrics carry
    /// `pool="NAME"`.
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = loopguard::pool::Pool::builder().name("walks").build()?;
    /// assert_eq!(pool.name(), "walks");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        self.core().limit.name()
    }

    /// The number of slots, equal to the number of worker threads.
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = loopguard::pool::Pool::builder().workers(4).build()?;
    /// assert_eq!(pool.capacity(), 4);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn capacity(&self) -> usize {
        self.core().limit.capacity()
    }

    /// Slots held now, orphaned jobs included.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let pool = loopguard::pool::Pool::builder().build()?;
    /// drop(pool.try_run(|| ()));
    /// pool.wait_idle().await;
    /// assert_eq!(pool.in_use(), 0);
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn in_use(&self) -> usize {
        self.core().limit.in_use()
    }

    /// Callers waiting in [`run`](Pool::run) for a slot.
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = loopguard::pool::Pool::builder().build()?;
    /// assert_eq!(pool.waiting(), 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn waiting(&self) -> usize {
        self.core().limit.waiting()
    }

    /// The age of the oldest job running now, `None` when no job runs. A job older than the
    /// stuck threshold is also reported to the orphan handler (see
    /// [`PoolBuilder::stuck_after`]).
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = loopguard::pool::Pool::builder().build()?;
    /// assert_eq!(pool.oldest_job_age(), None);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn oldest_job_age(&self) -> Option<Duration> {
        self.core().workers.oldest_job_age(Instant::now())
    }

    /// The time-weighted average of holders + waiters over the demand window (default 5 s):
    /// a scaling signal that sees bursts between scrapes. 1.0 means one slot busy all the
    /// time; above the capacity means callers waited.
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = loopguard::pool::Pool::builder().build()?;
    /// assert_eq!(pool.demand(), 0.0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn demand(&self) -> f64 {
        self.core().limit.demand_at(Instant::now())
    }

    /// Failures of orphaned jobs so far (each one also went to the orphan handler).
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let pool = loopguard::pool::Pool::builder().build()?;
    /// drop(pool.try_run(loopguard::Fallible(|| -> Result<(), &str> { Err("gone") })));
    /// pool.wait_idle().await;
    /// assert_eq!(pool.orphaned_failures(), 1);
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn orphaned_failures(&self) -> u64 {
        self.core().reporter.orphaned()
    }

    /// A snapshot of the pool's counters.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let pool = loopguard::pool::Pool::builder().build()?;
    /// pool.run(|| ()).await.unwrap();
    /// assert_eq!(pool.stats().jobs_ok, 1);
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn stats(&self) -> PoolStats {
        let core = self.core();
        let now = Instant::now();
        PoolStats {
            capacity: core.limit.capacity(),
            in_use: core.limit.in_use(),
            waiting: core.limit.waiting(),
            rejected: core.limit.rejected(),
            jobs_ok: core.stats.jobs(JobOutcome::Ok),
            jobs_error: core.stats.jobs(JobOutcome::Error),
            jobs_panicked: core.stats.jobs(JobOutcome::Panicked),
            orphaned_failures: core.reporter.orphaned(),
            stuck_jobs: core.stats.stuck.get(),
            oldest_job_age: core.workers.oldest_job_age(now),
            demand: core.limit.demand_at(now),
            mean_job_time: core.limit.mean_hold(),
            wait_time: core.limit.wait_time(),
            job_time: core.stats.job_time.snapshot(),
        }
    }

    /// Updates the gauges that are read rather than pushed (`in_use`, `waiting`, the oldest
    /// job's age, the demand average) in the installed `metrics` recorder. Call it on the
    /// loop right before a scrape asks for its slot, so the numbers are fresh and the
    /// scrape does not count itself. See [`crate::telemetry`].
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = loopguard::pool::Pool::builder().build()?;
    /// pool.publish_metrics();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn publish_metrics(&self) {
        self.core().publish_metrics(Instant::now());
    }

    /// Stops admission. Running and admitted jobs finish; callers waiting in
    /// [`run`](Pool::run) fail with [`RunError::Closed`]; later
    /// submissions are refused. Returns whether this call closed the pool.
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = loopguard::pool::Pool::builder().build()?;
    /// assert!(pool.close());
    /// assert!(!pool.close());
    /// assert!(pool.is_closed());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn close(&self) -> bool {
        self.core().close()
    }

    /// Whether the pool was closed.
    ///
    /// # Examples
    ///
    /// See [`close`](Pool::close).
    pub fn is_closed(&self) -> bool {
        self.core().limit.is_closed()
    }

    /// Resolves once no slot is held (every admitted job, orphans included, has finished and
    /// delivered its outcome). Resolves at once on an idle pool.
    ///
    /// An orphan's failure is reported before its slot goes back, so it has been reported
    /// when this resolves. One case is not waited for: a [`Job`] handle dropped in the
    /// instant between its job's outcome being stored and being published reports that
    /// outcome (if it is a failure) on the dropping thread, which may be after this has
    /// resolved.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let pool = loopguard::pool::Pool::builder().build()?;
    /// drop(pool.try_run(|| std::thread::sleep(std::time::Duration::from_millis(5))));
    /// pool.wait_idle().await;
    /// assert_eq!(pool.in_use(), 0);
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn wait_idle(&self) {
        self.core().wait_idle().await
    }

    /// Whether `other` is a handle of this same pool.
    #[cfg(any(feature = "tower", feature = "prometheus-client"))]
    pub(crate) fn same_pool(&self, other: &Pool) -> bool {
        Arc::ptr_eq(self.core(), other.core())
    }

    /// A tower layer admits requests on this pool's slots (`AdmissionLayer::for_pool`).
    #[cfg(feature = "tower")]
    pub(crate) fn mark_layered(&self) {
        self.limit().mark_lent_to_requests();
    }

    /// Marks this thread as serving a request that holds one of this pool's slots, for as
    /// long as the scope lives (the tower layer's pool mode, around its handler).
    #[cfg(feature = "tower")]
    pub(crate) fn held_scope(&self) -> held::Scope {
        held::enter(self.limit())
    }

    /// Clears that mark for as long as the scope lives: a call that asks for a second
    /// slot knowingly (`Slot::try_run` with its slot busy).
    #[cfg(feature = "tower")]
    pub(crate) fn unheld_scope() -> held::Scope {
        held::clear()
    }

    /// The pool's limit: the gate and its accounting (the tower layer's pool mode admits
    /// requests on it).
    #[cfg(any(feature = "tower", test))]
    pub(crate) fn limit(&self) -> &Arc<crate::gate::limit::Limit> {
        &self.handle.limit
    }

    /// Runs `job` on `lent`, a share of a request's permit of this pool's limit.
    #[cfg(feature = "tower")]
    pub(crate) fn run_on_lent<W: IntoJob<T>, T: Send + 'static>(
        &self,
        job: W,
        lent: Lent,
    ) -> Job<T> {
        job::run_on_lent(self.core(), job, lent)
    }

    /// Reports a panic nobody else will see as an orphaned failure of this pool (used by a
    /// cache whose starter took the outcome and is its only witness).
    pub(crate) fn report_panic(&self, panicked: crate::Panicked, elapsed: Duration) {
        let never = crate::failure::never::<()>;
        self.core()
            .reporter
            .orphaned_outcome(Err(panicked), never, elapsed);
    }

    /// Closes the pool, waits until every worker thread has finished its jobs and exited,
    /// and joins the threads.
    ///
    /// A waiter that was granted a slot but is never polled again (its task was dropped
    /// with a stopped executor) does not hold up the shutdown: closing takes that slot back.
    ///
    /// Called from one of the pool's own threads (inside a job, or an orphan handler that
    /// runs on a worker or the stuck monitor), it closes the pool and returns at once
    /// without waiting: a thread cannot wait for itself to exit.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future leaves the pool closed and the threads finishing.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let pool = loopguard::pool::Pool::builder().name("bye").build()?;
    /// let job = pool.try_run(|| 1).unwrap();
    /// pool.shutdown().await;
    /// assert_eq!(job.await, Ok(1));
    /// assert!(pool.try_run(|| 2).unwrap_err().is_closed());
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn shutdown(&self) {
        self.core().close();
        // A job or a handler on one of this pool's threads cannot wait for that thread to
        // exit: closing is all it can do.
        if self.core().on_own_thread() {
            return;
        }
        self.core().wait_exited().await;
    }
}

impl PoolBuilder {
    /// Starts the worker threads.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] for zero or more than [`MAX_WORKERS`] workers, an
    /// empty name or one containing NUL, a zero stuck threshold or an invalid demand
    /// window; the spawn error (with the thread's name) when a thread cannot be started,
    /// in which case the threads already started exit.
    ///
    /// # Examples
    ///
    /// ```
    /// let err = loopguard::pool::Pool::builder().workers(1_000_000).build().unwrap_err();
    /// assert!(err.to_string().contains("between 1 and 1024"));
    /// ```
    pub fn build(self) -> io::Result<Pool> {
        let core = threads::start(&self)?;
        Ok(Pool {
            handle: Arc::new(Handle {
                limit: Arc::clone(&core.limit),
                core,
            }),
        })
    }
}
