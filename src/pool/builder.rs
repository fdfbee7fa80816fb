//! `PoolBuilder`: configuration and validation of a pool.

use std::io;
use std::time::Duration;

use crate::demand::{DEFAULT_WINDOW, Demand};
use crate::gate::MAX_CAPACITY;
use crate::orphan::OrphanHandler;

/// The most worker threads a pool may have.
pub const MAX_WORKERS: usize = 1024;

/// The highest (least favourable) nice value on Linux.
const MAX_NICE: u8 = 19;

const DEFAULT_STUCK_AFTER: Duration = Duration::from_secs(60);

/// How long a worker whose jobs come back to back spins for the next one by default (see
/// [`PoolBuilder::spin`]).
const DEFAULT_SPIN: Duration = Duration::from_micros(50);

/// Configures a [`Pool`](super::Pool). Created by [`Pool::builder`](super::Pool::builder).
///
/// # Examples
///
/// ```
/// use loopguard::orphan::OrphanHandler;
/// use loopguard::pool::Pool;
/// use std::time::Duration;
///
/// let pool = Pool::builder()
///     .name("registry-serve")
///     .workers(2)
///     .stuck_after(Duration::from_secs(30))
///     .on_orphan(OrphanHandler::log())
///     .build()?;
/// assert_eq!(pool.capacity(), 2);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct PoolBuilder {
    name: String,
    workers: usize,
    pub(crate) stack_size: Option<usize>,
    pub(crate) handler: OrphanHandler,
    stuck_after: Option<Duration>,
    demand_window: Duration,
    pub(crate) spin: Duration,
    worker_nice: u8,
    pub(crate) worker_sched_idle: bool,
}

impl Default for PoolBuilder {
    fn default() -> Self {
        PoolBuilder::new()
    }
}

impl PoolBuilder {
    /// The defaults: name `loopguard`, one worker per available CPU (at least one), orphan
    /// reports logged, jobs running longer than 60 s reported as stuck.
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = loopguard::pool::PoolBuilder::new().build()?;
    /// assert_eq!(pool.name(), "loopguard");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn new() -> PoolBuilder {
        PoolBuilder {
            name: "loopguard".to_string(),
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
            stack_size: None,
            handler: OrphanHandler::log(),
            stuck_after: Some(DEFAULT_STUCK_AFTER),
            demand_window: DEFAULT_WINDOW,
            spin: DEFAULT_SPIN,
            worker_nice: 0,
            worker_sched_idle: false,
        }
    }

    /// Names the pool. Its threads are called `NAME-0`, `NAME-1`, … (and `NAME-monitor` for
    /// the stuck-job monitor), and its metrics carry the label `pool="NAME"`. The name must
    /// be non-empty and free of NUL bytes; [`build`](PoolBuilder::build) says so otherwise.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let pool = loopguard::pool::Pool::builder().name("walks").workers(1).build()?;
    /// let thread = pool.run(|| std::thread::current().name().map(String::from)).await.unwrap();
    /// assert_eq!(thread.as_deref(), Some("walks-0"));
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn name(mut self, name: &str) -> PoolBuilder {
        self.name = name.to_string();
        self
    }

    /// The number of worker threads, which is also the number of slots: between 1 and
    /// [`MAX_WORKERS`]; [`build`](PoolBuilder::build) refuses other values.
    ///
    /// # Examples
    ///
    /// ```
    /// let err = loopguard::pool::Pool::builder().workers(0).build().unwrap_err();
    /// assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    /// ```
    pub fn workers(mut self, workers: usize) -> PoolBuilder {
        self.workers = workers;
        self
    }

    /// The stack size of each worker thread, in bytes (the platform default otherwise).
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = loopguard::pool::Pool::builder().stack_size(4 << 20).build()?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn stack_size(mut self, bytes: usize) -> PoolBuilder {
        self.stack_size = Some(bytes);
        self
    }

    /// Where failures of orphaned jobs and stuck-job reports go. The default logs them.
    ///
    /// # Examples
    ///
    /// ```
    /// let (handler, reports) = loopguard::orphan::OrphanHandler::channel(32);
    /// let pool = loopguard::pool::Pool::builder().on_orphan(handler).build()?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn on_orphan(mut self, handler: OrphanHandler) -> PoolBuilder {
        self.handler = handler;
        self
    }

    /// Reports a job to the orphan handler, once, when it has run longer than `threshold`
    /// (default 60 s). The job is not interrupted (nothing can pre-empt a thread) and still
    /// holds its slot; the report makes a job that never finishes visible instead of
    /// leaving the pool quietly saturated. A zero threshold is refused by
    /// [`build`](PoolBuilder::build).
    ///
    /// # Precision
    ///
    /// A monitor thread sleeps until the instant the oldest unreported job crosses the
    /// threshold (one threshold ahead while no job runs), so the report comes as soon as
    /// the thread is scheduled after that instant, usually within a millisecond. Starting a
    /// job never wakes it; an idle pool's monitor wakes once per threshold.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let pool = loopguard::pool::Pool::builder().stuck_after(Duration::from_secs(10)).build()?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn stuck_after(mut self, threshold: Duration) -> PoolBuilder {
        self.stuck_after = Some(threshold);
        self
    }

    /// Turns stuck-job reports off (and with them the monitor thread).
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = loopguard::pool::Pool::builder().no_stuck_reports().build()?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn no_stuck_reports(mut self) -> PoolBuilder {
        self.stuck_after = None;
        self
    }

    /// The window of the pool's demand signal (default 5 s): the time-weighted average of
    /// holders + waiters over this window is [`Pool::demand`](super::Pool::demand) and the
    /// `loopguard_pool_demand_avg` gauge. A zero window is refused by
    /// [`build`](PoolBuilder::build).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let pool = loopguard::pool::Pool::builder().demand_window(Duration::from_secs(30)).build()?;
    /// assert_eq!(pool.demand(), 0.0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn demand_window(mut self, window: Duration) -> PoolBuilder {
        self.demand_window = window;
        self
    }

    /// How long a worker that ran out of jobs spins (yielding) for the next one before it
    /// parks, when its jobs come back to back (default 50 µs; zero turns spinning off).
    ///
    /// A job submitted while a worker spins starts without a wake-up call. That saves the
    /// cost of waking a parked thread (on a VM, waking a halted vCPU can take tens of
    /// microseconds) at the price of CPU time burnt on a core the event loop may need. So a
    /// worker spins only after a job that was dispatched within `spin` of the worker running
    /// out of jobs: a pool whose jobs are spaced out (a scrape every few seconds, a job
    /// every millisecond) parks at once and burns nothing between them, and at most `spin`
    /// is spent when a run of back-to-back jobs ends. BENCHMARKS.md has the round trip and
    /// the CPU per job both ways.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// // Workers that always park at once.
    /// let pool = loopguard::pool::Pool::builder().spin(Duration::ZERO).build()?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn spin(mut self, spin: Duration) -> PoolBuilder {
        self.spin = spin;
        self
    }

    /// Runs each worker thread at nice value `nice` (1 to 19; default 0: workers keep the
    /// priority of the thread that built the pool), so that the event loop wins the CPU
    /// when both want it.
    ///
    /// At the loop's priority, a burst of walks on every core gets the same share of a busy
    /// CPU as the one thread that answers everyone. At a higher nice value the workers
    /// still use every idle cycle, but a loop that wants the CPU gets it first. It is off
    /// by default because the same value lets every other process on the machine win too:
    /// turn it on where the walks compete with their own loop rather than with neighbours
    /// (a container of its own; `loopguard-exporter` does by default). BENCHMARKS.md ("Low-priority
    /// workers") has the storms with and without it.
    ///
    /// On Linux each worker sets its own nice value when it starts
    /// (`setpriority(PRIO_PROCESS, 0)`, which acts on the calling thread only, through
    /// rustix), to `nice` or to the value it inherited if that is already higher: a worker
    /// never runs above the thread that built the pool. A worker that cannot set it (a
    /// seccomp filter, say) logs a warning and runs on at the priority it has. Elsewhere
    /// this setting does nothing (per-thread nice values are a Linux feature; no safe,
    /// portable API lowers one thread's priority). A value above 19 is refused by
    /// [`build`](PoolBuilder::build).
    ///
    /// # Caveats
    ///
    /// - **One way.** An unprivileged thread cannot lower its nice value again
    ///   (`CAP_SYS_NICE`, or `RLIMIT_NICE`, is needed): a worker stays at this priority
    ///   until it exits.
    /// - **Inherited.** A thread a job spawns starts at the worker's nice value, and so
    ///   does a process it starts (`std::process::Command`).
    /// - **Priority inversion.** A job that holds a lock the loop wants (a `Mutex` shared
    ///   with the loop, a registry's write lock) holds it at the worker's priority: on a
    ///   busy machine the loop may wait longer for it than with workers at the loop's
    ///   priority. Keep such critical sections short, or leave this setting off.
    /// - **Not a quota.** Nice values weigh threads against each other; a cgroup CPU quota
    ///   (a container's CPU limit) still throttles the whole process, loop included, once
    ///   the workers have spent it. Other processes at nice 0 on the same machine also win
    ///   the CPU over the workers, so a walk may take longer on a busy host.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let pool = loopguard::pool::Pool::builder().workers(1).worker_nice(10).build()?;
    /// // On Linux the job runs at nice 10 (unless the process already ran higher);
    /// // elsewhere the setting does nothing.
    /// pool.run(|| { /* a walk the event loop must not wait behind */ }).await.unwrap();
    ///
    /// let err = loopguard::pool::Pool::builder().worker_nice(20).build().unwrap_err();
    /// assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn worker_nice(mut self, nice: u8) -> PoolBuilder {
        self.worker_nice = nice;
        self
    }

    /// Runs each worker thread in Linux's idle scheduling class, `SCHED_IDLE` (default
    /// off), so that a thread of the normal class, the event loop first, takes a CPU from a
    /// worker the moment it wakes.
    ///
    /// [`worker_nice`](PoolBuilder::worker_nice) weighs the workers against the loop, but
    /// a weight is not a turn: Linux's scheduler lets a thread that has just been given a
    /// CPU run its slice, so a loop woken behind a worker may wait until the next
    /// scheduler tick. A normal thread that wakes preempts an idle-class thread of its
    /// cgroup at once, and a CPU running only idle-class threads counts as idle where the
    /// kernel places a waking thread. It is not a guarantee: a normal thread that has used
    /// up its share may still wait behind an idle-class one until the next tick.
    /// BENCHMARKS.md ("The idle class") has the scheduler traces and the storms in each
    /// class.
    ///
    /// On Linux each worker moves itself into the class when it starts; one that cannot (a
    /// seccomp filter, say) logs a warning and runs on in the class it has. The nice value
    /// of [`worker_nice`](PoolBuilder::worker_nice) is set as well: the idle class ignores
    /// it, but a thread that leaves the class gets it back. Elsewhere this setting does
    /// nothing (no safe API here lowers one thread's class on other systems).
    ///
    /// # Caveats
    ///
    /// Those of [`worker_nice`](PoolBuilder::worker_nice), stronger:
    ///
    /// - **Starvation.** An idle-class thread weighs 3 against 1 024 for a normal thread at
    ///   nice 0: while any normal thread keeps a CPU busy, a worker there gets about 0.3 %
    ///   of it. Walks then crawl and their deadlines expire. Turn it on where the loop is
    ///   the only busy normal thread its workers compete with, such as a process alone in
    ///   a container: with the CPU controller on (cgroup v2's `cpu`, as in Kubernetes), the
    ///   kernel weighs the container's cgroup against its neighbours as one, and the
    ///   workers yield only to the threads of their own cgroup. Without it, every normal
    ///   thread on the host comes first.
    /// - **Inherited.** Threads a job spawns, and processes it starts, begin in the idle
    ///   class.
    /// - **One way.** An unprivileged thread leaves the class only within its
    ///   `RLIMIT_NICE` (usually not at all).
    /// - **Priority inversion.** A job holding a lock the loop waits for runs at the
    ///   class's weight; keep such critical sections short. The pool has one such lock of
    ///   its own: a worker takes the job queue's mutex for a few instructions to take a job
    ///   or park, and the loop takes it to hand a job over. A worker preempted inside it
    ///   holds up that hand-off until it runs again.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let pool = loopguard::pool::Pool::builder()
    ///     .workers(1)
    ///     .worker_sched_idle(true)
    ///     .build()?;
    /// // On Linux the job runs in the idle class; elsewhere the setting does nothing.
    /// pool.run(|| { /* a walk the event loop must never wait behind */ }).await.unwrap();
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn worker_sched_idle(mut self, idle: bool) -> PoolBuilder {
        self.worker_sched_idle = idle;
        self
    }

    pub(crate) fn validated_nice(&self) -> io::Result<u8> {
        if self.worker_nice > MAX_NICE {
            return Err(invalid(format!(
                "a worker nice value is between 0 and {MAX_NICE}, got {}",
                self.worker_nice
            )));
        }
        Ok(self.worker_nice)
    }

    pub(crate) fn validated_workers(&self) -> io::Result<usize> {
        if self.workers == 0 || self.workers > MAX_WORKERS.min(MAX_CAPACITY) {
            return Err(invalid(format!(
                "a pool needs between 1 and {MAX_WORKERS} workers, got {}",
                self.workers
            )));
        }
        Ok(self.workers)
    }

    pub(crate) fn validated_name(&self) -> io::Result<&str> {
        crate::name::check("a pool", &self.name)?;
        Ok(&self.name)
    }

    pub(crate) fn validated_demand(&self) -> io::Result<Demand> {
        Demand::new(self.demand_window)
            .map_err(|err| invalid(format!("invalid demand window: {err}")))
    }

    pub(crate) fn validated_stuck_after(&self) -> io::Result<Option<Duration>> {
        match self.stuck_after {
            Some(threshold) if threshold.is_zero() => {
                Err(invalid("the stuck threshold must be positive".to_string()))
            }
            other => Ok(other),
        }
    }
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}
