//! `Pool`: fixed worker threads behind an admission gate sized to them.

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::builder::PoolBuilder;
use crate::deadline::Deadline;
use crate::error::{Saturated, TryRunError};
use crate::gate::Refused;
use crate::job::{Cell, Job};
use crate::outcome::JobOutput;
use crate::run::Run;
use crate::shared::Shared;

/// A fixed set of worker threads for blocking work, behind an admission gate with exactly
/// one slot per thread.
///
/// An admitted job starts at once on a free thread; nothing queues behind the threads.
/// [`try_run`](Pool::try_run) fails fast when every slot is held, [`run`](Pool::run) waits
/// for a slot in FIFO order. A slot is released by the worker thread when the job has
/// finished and its outcome was delivered, never by the awaiting side, so a caller that
/// leaves cannot make room for new work while its own still occupies a thread.
///
/// `Pool` is a cheap handle (`Clone + Send + Sync`); clones share the threads.
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
/// use loopguard::{Pool, TryRunError};
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
/// [`RunError::Closed`]: crate::RunError::Closed
#[derive(Clone)]
pub struct Pool {
    handle: Arc<Handle>,
}

/// Closes the pool when the last `Pool` handle goes.
pub(crate) struct Handle {
    pub(crate) shared: Arc<Shared>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.close();
    }
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shared = self.shared();
        f.debug_struct("Pool")
            .field("name", &shared.name())
            .field("capacity", &shared.gate.capacity())
            .field("in_use", &shared.gate.in_use())
            .field("waiting", &shared.gate.waiting())
            .field("closed", &shared.gate.is_closed())
            .finish()
    }
}

/// A snapshot of a pool's counters, from [`Pool::stats`].
///
/// # Examples
///
/// ```
/// let pool = loopguard::Pool::builder().workers(3).build()?;
/// let stats = pool.stats();
/// assert_eq!(stats.capacity, 3);
/// assert_eq!(stats.in_use, 0);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct PoolStats {
    /// Slots (worker threads).
    pub capacity: usize,
    /// Slots held, orphaned jobs included.
    pub in_use: usize,
    /// Callers waiting in [`Pool::run`].
    pub waiting: usize,
    /// `try_run` calls refused because the pool was saturated.
    pub rejected: u64,
    /// Jobs that finished with a non-failure output.
    pub jobs_ok: u64,
    /// Jobs that returned a failure (an `Err`).
    pub jobs_error: u64,
    /// Jobs that panicked.
    pub jobs_panicked: u64,
    /// Failures of orphaned jobs, handed to the orphan handler.
    pub orphaned_failures: u64,
    /// Jobs reported as stuck.
    pub stuck_jobs: u64,
    /// Age of the oldest running job, `None` when no job runs.
    pub oldest_job_age: Option<Duration>,
    /// Time-weighted average of holders + waiters over the demand window.
    pub demand: f64,
}

impl Pool {
    /// A builder for a pool.
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = loopguard::Pool::builder().name("cardinality").workers(1).build()?;
    /// assert_eq!(pool.capacity(), 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn builder() -> PoolBuilder {
        PoolBuilder::new()
    }

    pub(crate) fn from_shared(shared: Arc<Shared>) -> Pool {
        Pool {
            handle: Arc::new(Handle { shared }),
        }
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.handle.shared
    }

    /// Admits `job` if a slot is free and nobody is waiting for one, and starts it at once on
    /// a worker thread.
    ///
    /// Never awaits, never blocks on other callers (the gate is one atomic word) and, when it
    /// refuses, neither allocates nor queues anything: the job is handed back inside the
    /// error. While callers wait in [`run`](Pool::run), `try_run` refuses, so a loop of
    /// `try_run` calls cannot starve them.
    ///
    /// # Errors
    ///
    /// [`TryRunError::Saturated`] when every slot is held or callers are waiting, with a
    /// [`retry_after`](Saturated::retry_after) hint; [`TryRunError::Closed`] after
    /// [`close`](Pool::close).
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let pool = loopguard::Pool::builder().workers(1).build()?;
    /// let job = pool.try_run(|| 6 * 7).expect("an idle pool admits");
    /// assert_eq!(job.await, Ok(42));
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn try_run<F, T>(&self, job: F) -> Result<Job<T>, TryRunError<F>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: JobOutput,
    {
        let shared = self.shared();
        match shared.gate.try_acquire() {
            Ok(()) => Ok(shared.admit(job, Duration::ZERO, false)),
            Err(Refused::Saturated) => {
                shared.count_rejection();
                Err(TryRunError::Saturated(Saturated::new(
                    job,
                    shared.retry_after(),
                )))
            }
            Err(Refused::Closed) => Err(TryRunError::Closed(job)),
        }
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
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let pool = loopguard::Pool::builder().workers(1).build()?;
    /// let (a, b) = futures_lite::future::zip(pool.run(|| 1), pool.run(|| 2)).await;
    /// assert_eq!((a.unwrap(), b.unwrap()), (1, 2));
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn run<F, T>(&self, job: F) -> Run<F, T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: JobOutput,
    {
        Run::new(self.shared().clone(), job, Deadline::never())
    }

    /// Like [`run`](Pool::run), within `deadline`: the wait for a slot spends the same budget
    /// as the job, and after expiry nothing new starts.
    ///
    /// - If the deadline passes while the caller waits, it leaves the queue; a slot granted
    ///   to it at that moment is handed back at once, to the next waiter.
    /// - If the deadline passes while the job runs, the future resolves to
    ///   [`RunError::Expired`] and the job is orphaned: it keeps its slot until its thread
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
    /// use loopguard::{Deadline, Pool, RunError};
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
    /// [`RunError::Expired`]: crate::RunError::Expired
    pub fn run_within<F, T>(&self, deadline: Deadline, job: F) -> Run<F, T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: JobOutput,
    {
        Run::new(self.shared().clone(), job, deadline)
    }

    /// The pool's name: its threads are `NAME-0`, `NAME-1`, …, and its metrics carry
    /// `pool="NAME"`.
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = loopguard::Pool::builder().name("walks").build()?;
    /// assert_eq!(pool.name(), "walks");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        self.shared().name()
    }

    /// The number of slots, equal to the number of worker threads.
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = loopguard::Pool::builder().workers(4).build()?;
    /// assert_eq!(pool.capacity(), 4);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn capacity(&self) -> usize {
        self.shared().gate.capacity()
    }

    /// Slots held now, orphaned jobs included.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let pool = loopguard::Pool::builder().build()?;
    /// drop(pool.try_run(|| ()));
    /// pool.wait_idle().await;
    /// assert_eq!(pool.in_use(), 0);
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn in_use(&self) -> usize {
        self.shared().gate.in_use()
    }

    /// Callers waiting in [`run`](Pool::run) for a slot.
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = loopguard::Pool::builder().build()?;
    /// assert_eq!(pool.waiting(), 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn waiting(&self) -> usize {
        self.shared().gate.waiting()
    }

    /// The age of the oldest job running now, `None` when no job runs. A job older than the
    /// stuck threshold is also reported to the orphan handler (see
    /// [`PoolBuilder::stuck_after`]).
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = loopguard::Pool::builder().build()?;
    /// assert_eq!(pool.oldest_job_age(), None);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn oldest_job_age(&self) -> Option<Duration> {
        self.shared().oldest_job_age(Instant::now())
    }

    /// The time-weighted average of holders + waiters over the demand window (default 5 s):
    /// a scaling signal that sees bursts between scrapes. 1.0 means one slot busy all the
    /// time; above the capacity means callers waited.
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = loopguard::Pool::builder().build()?;
    /// assert_eq!(pool.demand(), 0.0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn demand(&self) -> f64 {
        self.shared().demand_at(Instant::now())
    }

    /// Failures of orphaned jobs so far (each one also went to the orphan handler).
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let pool = loopguard::Pool::builder().build()?;
    /// drop(pool.try_run(|| -> Result<(), &str> { Err("gone") }));
    /// pool.wait_idle().await;
    /// assert_eq!(pool.orphaned_failures(), 1);
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn orphaned_failures(&self) -> u64 {
        self.shared().stats.orphaned.load(Ordering::Relaxed)
    }

    /// A snapshot of the pool's counters.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let pool = loopguard::Pool::builder().build()?;
    /// pool.run(|| ()).await.unwrap();
    /// assert_eq!(pool.stats().jobs_ok, 1);
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn stats(&self) -> PoolStats {
        let shared = self.shared();
        let now = Instant::now();
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        PoolStats {
            capacity: shared.gate.capacity(),
            in_use: shared.gate.in_use(),
            waiting: shared.gate.waiting(),
            rejected: load(&shared.stats.rejected),
            jobs_ok: load(&shared.stats.jobs[0]),
            jobs_error: load(&shared.stats.jobs[1]),
            jobs_panicked: load(&shared.stats.jobs[2]),
            orphaned_failures: load(&shared.stats.orphaned),
            stuck_jobs: load(&shared.stats.stuck),
            oldest_job_age: shared.oldest_job_age(now),
            demand: shared.demand_at(now),
        }
    }

    /// Updates the gauges that are read rather than pushed (`in_use`, `waiting`, the oldest
    /// job's age, the demand average) in the installed `metrics` recorder. Call it right
    /// before rendering a scrape so they are fresh. See [`crate::metrics`].
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = loopguard::Pool::builder().build()?;
    /// pool.publish_metrics();
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn publish_metrics(&self) {
        self.shared().publish_metrics(Instant::now());
    }

    /// Stops admission. Running and admitted jobs finish; callers waiting in
    /// [`run`](Pool::run) fail with [`RunError::Closed`](crate::RunError::Closed); later
    /// submissions are refused. Returns whether this call closed the pool.
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = loopguard::Pool::builder().build()?;
    /// assert!(pool.close());
    /// assert!(!pool.close());
    /// assert!(pool.is_closed());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn close(&self) -> bool {
        self.shared().close()
    }

    /// Whether the pool was closed.
    ///
    /// # Examples
    ///
    /// See [`close`](Pool::close).
    pub fn is_closed(&self) -> bool {
        self.shared().gate.is_closed()
    }

    /// Resolves once no slot is held (every admitted job, orphans included, has finished and
    /// delivered its outcome). Resolves at once on an idle pool.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only observes.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let pool = loopguard::Pool::builder().build()?;
    /// drop(pool.try_run(|| std::thread::sleep(std::time::Duration::from_millis(5))));
    /// pool.wait_idle().await;
    /// assert_eq!(pool.in_use(), 0);
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn wait_idle(&self) {
        self.shared().wait_idle().await
    }

    /// Closes the pool, waits until every worker thread has finished its jobs and exited,
    /// and joins the threads.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future leaves the pool closed and the threads finishing.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let pool = loopguard::Pool::builder().name("bye").build()?;
    /// let job = pool.try_run(|| 1).unwrap();
    /// pool.shutdown().await;
    /// assert_eq!(job.await, Ok(1));
    /// assert!(pool.try_run(|| 2).unwrap_err().is_closed());
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn shutdown(&self) {
        self.shared().close();
        self.shared().wait_exited().await;
    }

    /// Builds a pool from a finished builder (used by [`PoolBuilder::build`]).
    pub(crate) fn start(builder: PoolBuilder) -> io::Result<Pool> {
        Shared::start(builder).map(Pool::from_shared)
    }
}

impl Shared {
    /// Hands a job whose slot is already held to a worker.
    pub(crate) fn admit<F, T>(self: &Arc<Self>, job: F, waited: Duration, queued: bool) -> Job<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: JobOutput,
    {
        self.admitted(waited, queued);
        Cell::submit(self, job)
    }
}
