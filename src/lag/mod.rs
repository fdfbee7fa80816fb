//! The loop measuring itself: how late a timer on it wakes, and which task held it.
//!
//! A single-threaded loop stays responsive only while every poll on it is short. When a
//! handler blocks it (a render left on the loop, a slow `Debug`, a lock), every other task
//! waits, and nothing names the culprit. A [`LoopLag`] gives the loop two instruments:
//!
//! - [`probe`](LoopLag::probe), a future you spawn on the loop: it sleeps one resolution on
//!   an async-io timer, records how late it was polled, and repeats, as Node's
//!   `perf_hooks.monitorEventLoopDelay` does. [`stats`](LoopLag::stats) gives the p50, p99
//!   and max lateness over a sliding window; `loopguard_loop_lag_seconds{loop}` gets every
//!   sample.
//! - [`instrument`](LoopLag::instrument), which wraps a future and times each of its polls,
//!   as tokio-metrics' `TaskMonitor` and asyncio's `slow_callback_duration` do: a poll over
//!   the slow-poll threshold is counted in `loopguard_loop_slow_polls_total{loop, task}` and
//!   logged, rate-limited, as "main: \`status-page\` held the loop for 87 ms".
//!
//! Both run on any executor (smol, `async_executor::LocalExecutor`, async-std, tokio's
//! current-thread runtime, `futures_lite::future::block_on`): the probe's timer is
//! async-io's.
//!
//! ```
//! use std::time::Duration;
//! use loopguard::lag::LoopLag;
//!
//! # futures_lite::future::block_on(async {
//! let lag = LoopLag::new("main")?; // 10 ms resolution, 50 ms slow-poll threshold
//! let ex = async_executor::LocalExecutor::new();
//! let probe = ex.spawn(lag.probe());
//!
//! ex.run(async {
//!     // Let the probe take its first sample, then a handler blocks the loop for 80 ms in
//!     // one poll: counted and logged.
//!     async_io::Timer::after(Duration::from_millis(30)).await;
//!     lag.instrument("status-page", async { std::thread::sleep(Duration::from_millis(80)) })
//!         .await;
//!     async_io::Timer::after(Duration::from_millis(30)).await;
//! })
//! .await;
//! drop(probe); // stops it
//!
//! let stats = lag.stats();
//! assert_eq!(stats.slow_polls, 1);
//! assert_eq!(lag.slow_polls("status-page"), 1);
//! assert!(stats.max >= Duration::from_millis(70), "{stats:?}"); // 80 ms less one resolution
//! # Ok::<(), std::io::Error>(())
//! # }).unwrap();
//! ```
//!
//! # Lateness, and Node's figures
//!
//! A sample is the time from the instant the probe's timer was due to the instant the
//! probe was polled: zero on a loop that does nothing else, plus the wake-up of the timer
//! and the executor (tens to hundreds of microseconds on an idle Linux loop). Node's
//! histogram records the time between its timer's firings instead, the resolution included
//! (idle, at 10 ms, its p50 reads about 10.15 ms): compare a Node figure less its
//! resolution with loopguard's. BENCHMARKS.md has both side by side (`examples/loop_lag.rs`
//! and `examples/loop_lag.js`).
//!
//! # Precision
//!
//! A stall of length `S` on the loop is read as one sample between `S - R` and `S` (plus the
//! wake-up delay), `R` being the resolution: the stall may start up to one resolution
//! before the probe's timer is due, and that part of it is not lateness. A sample `L` means
//! nothing on the loop could run for at least `L` after the timer was due: a task held the
//! loop, or the machine did not schedule its thread. Over a window with many stalls of the same length,
//! starting at various points of the probe's cycle, the max approaches `S`. The
//! instrumented futures have no such bound: each poll is timed with
//! [`Instant`](std::time::Instant) on both sides.
//!
//! # Caveats: what a timer probe cannot see
//!
//! - **A stall shorter than the resolution** may not be seen at all: if it ends before the
//!   probe's timer is due, the probe wakes on time. A poll over the slow-poll threshold in an
//!   [`instrument`](LoopLag::instrument)ed future is seen whatever the resolution.
//! - **The executor's own queueing before the timer fires**: the probe measures its own
//!   wake-up only. Between two of its ticks, tasks may wait in the executor's run queue
//!   behind others (a burst of many short polls) for longer than the probe, woken once per
//!   resolution, ever reads; it sees a queue only when its own wake-up falls behind it.
//! - **A loop that never yields** takes no sample until it yields: [`stats`](LoopLag::stats)
//!   read from another thread during the stall shows the figures from before it, and the
//!   stall appears as one sample once it has ended.
//!   [`LagStats::since_last_sample`] grows meanwhile: a watchdog thread can read that.
//! - **The thread that polls it**: spawn the probe on the loop you want measured (a
//!   `LocalExecutor`, a current-thread runtime, a `block_on`). On a multi-threaded
//!   executor it measures whichever worker polls it.
//!
//! Run one probe per `LoopLag`, on one loop: a second probe running at the same time
//! records into the same window (which then covers half the time) under the same `loop`
//! label. Give each loop a `LoopLag` of its own name.
//!
//! # Cost
//!
//! One async-io timer registration per resolution (100 per second by default), no
//! allocation per tick in the probe, and one observation of the lateness histogram per
//! sample; an instrumented poll costs two reads of the clock. Measured (BENCHMARKS.md): the
//! probe's own polls take about 5 µs of CPU a tick; async-io's timer path around them (its
//! reactor thread woken each tick) costs more, about 9 ms of CPU per second at 10 ms on a
//! shared 2-vCPU machine, where Node's idle process with its histogram costs about 6. A
//! coarser resolution costs proportionally less.
//!
//! # Metrics
//!
//! | name | type | labels |
//! |---|---|---|
//! | `loopguard_loop_lag_seconds` | histogram, one observation per sample | `loop` |
//! | `loopguard_loop_slow_polls_total` | counter | `loop`, `task` |
//!
//! The histogram is registered when the `LoopLag` is built, a task's counter (with a zero)
//! when the task is first instrumented. Task names are label values: keep them to a bounded
//! set (a handler's or a route's name, not a request's). With the `prometheus-client`
//! feature, `telemetry::Collector::lag` publishes the same series.

mod builder;
mod probe;
mod state;
mod stats;
mod task;
mod timed;
mod window;

use std::fmt;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use self::state::Shared;

pub use self::builder::LoopLagBuilder;
pub use self::probe::Probe;
pub use self::stats::LagStats;
pub use self::timed::TimedPolls;

/// One loop's lag: a timer [`probe`](LoopLag::probe), the [`stats`](LoopLag::stats) of its
/// lateness over a sliding window, and slow polls of [`instrument`](LoopLag::instrument)ed
/// futures, named by task. See the [module docs](self) for what a timer probe can and
/// cannot see.
///
/// `LoopLag` is a cheap handle (`Clone + Send + Sync`); clones share the samples and the
/// counts. Its series are labelled `loop` = its name.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// # futures_lite::future::block_on(async {
/// let lag = loopguard::lag::LoopLag::new("main")?;
/// assert_eq!(lag.resolution(), Duration::from_millis(10));
/// assert_eq!(lag.slow_poll_threshold(), Duration::from_millis(50));
///
/// let probe = smol::spawn(lag.probe());
/// async_io::Timer::after(Duration::from_millis(50)).await;
/// drop(probe);
/// assert!(lag.stats().samples >= 1);
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct LoopLag {
    shared: Arc<Shared>,
}

impl LoopLag {
    /// A `LoopLag` named `name` with the defaults: a resolution of 10 ms (as Node), a
    /// slow-poll threshold of 50 ms, a window of 60 s, at most one log line per task every
    /// 10 s.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] for an empty name or one with a NUL byte.
    ///
    /// # Examples
    ///
    /// ```
    /// let lag = loopguard::lag::LoopLag::new("main")?;
    /// assert_eq!(lag.name(), "main");
    /// let err = loopguard::lag::LoopLag::new("").unwrap_err();
    /// assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn new(name: &str) -> io::Result<LoopLag> {
        LoopLag::builder(name).build()
    }

    /// A builder for a `LoopLag` named `name`, starting from the defaults of
    /// [`new`](LoopLag::new).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let lag = loopguard::lag::LoopLag::builder("main")
    ///     .slow_poll_threshold(Duration::from_millis(20))
    ///     .build()?;
    /// assert_eq!(lag.slow_poll_threshold(), Duration::from_millis(20));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn builder(name: &str) -> LoopLagBuilder {
        LoopLagBuilder::new(name)
    }

    /// The probe: a future to spawn on the loop you want measured (it never completes;
    /// drop it, or cancel its task, to stop it). See [`Probe`].
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let lag = loopguard::lag::LoopLag::new("main")?;
    /// let ex = async_executor::LocalExecutor::new();
    /// ex.spawn(lag.probe()).detach(); // runs as long as the executor does
    /// ex.run(async_io::Timer::after(std::time::Duration::from_millis(30))).await;
    /// assert!(lag.stats().samples >= 1);
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn probe(&self) -> Probe {
        Probe::new(Arc::clone(&self.shared))
    }

    /// The probe's lateness over the window (p50, p99, max, samples), the slow polls
    /// counted so far, and the time since the newest sample. Copies and sorts the window's
    /// samples: meant for a status page or a scrape, not for every poll.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let lag = loopguard::lag::LoopLag::new("main")?;
    /// let work = async {
    ///     async_io::Timer::after(std::time::Duration::from_millis(50)).await;
    /// };
    /// futures_lite::future::or(lag.probe(), work).await;
    /// let stats = lag.stats();
    /// assert!(stats.p50 <= stats.p99 && stats.p99 <= stats.max);
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    #[must_use]
    pub fn stats(&self) -> LagStats {
        self.shared.stats()
    }

    /// Wraps `future` so that each of its polls is timed: a poll longer than the slow-poll
    /// threshold is counted under `task` and logged (rate-limited). See [`TimedPolls`].
    ///
    /// The first call for a task registers its series; later calls find it without
    /// allocating. `task` is a label value: keep task names to a bounded set.
    ///
    /// # Examples
    ///
    /// ```
    /// # futures_lite::future::block_on(async {
    /// let lag = loopguard::lag::LoopLag::new("main")?;
    /// let answer = lag.instrument("compute", async { 6 * 7 }).await;
    /// assert_eq!(answer, 42);
    /// # Ok::<(), std::io::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn instrument<F: Future>(&self, task: &str, future: F) -> TimedPolls<F> {
        TimedPolls::new(future, self.shared.task(task))
    }

    /// Slow polls counted under `task` so far (0 for a task never instrumented).
    ///
    /// # Examples
    ///
    /// ```
    /// let lag = loopguard::lag::LoopLag::new("main")?;
    /// assert_eq!(lag.slow_polls("status-page"), 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn slow_polls(&self, task: &str) -> u64 {
        self.shared.slow_polls(task)
    }

    /// The name: the `loop` label of its series.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(loopguard::lag::LoopLag::new("main")?.name(), "main");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.shared.config.name
    }

    /// How long the probe sleeps between samples.
    ///
    /// # Examples
    ///
    /// ```
    /// let lag = loopguard::lag::LoopLag::new("main")?;
    /// assert_eq!(lag.resolution(), std::time::Duration::from_millis(10));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn resolution(&self) -> Duration {
        self.shared.config.resolution
    }

    /// A poll longer than this is slow.
    ///
    /// # Examples
    ///
    /// ```
    /// let lag = loopguard::lag::LoopLag::new("main")?;
    /// assert_eq!(lag.slow_poll_threshold(), std::time::Duration::from_millis(50));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn slow_poll_threshold(&self) -> Duration {
        self.shared.config.slow_poll
    }

    /// How far back [`stats`](LoopLag::stats) looks.
    ///
    /// # Examples
    ///
    /// ```
    /// let lag = loopguard::lag::LoopLag::new("main")?;
    /// assert_eq!(lag.window(), std::time::Duration::from_secs(60));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn window(&self) -> Duration {
        self.shared.config.window
    }

    /// Whether `self` and `other` are the same `LoopLag` (clones of one another).
    #[cfg_attr(not(feature = "prometheus-client"), allow(dead_code))]
    pub(crate) fn same(&self, other: &LoopLag) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// Every task's name and slow polls, by name (for the collector).
    #[cfg_attr(not(feature = "prometheus-client"), allow(dead_code))]
    pub(crate) fn tasks(&self) -> Vec<(Arc<str>, u64)> {
        self.shared.tasks()
    }

    /// Every sample so far, as a histogram (for the collector).
    #[cfg_attr(not(feature = "prometheus-client"), allow(dead_code))]
    pub(crate) fn durations(&self) -> crate::emit::durations::DurationStats {
        self.shared.durations()
    }
}

impl LoopLagBuilder {
    /// Builds the `LoopLag`: allocates its window and registers its histogram.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] for an empty name or one with a NUL byte, a zero
    /// resolution or one above an hour, a zero slow-poll threshold, or a window shorter than
    /// the resolution or longer than 100 000 of them.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use loopguard::lag::LoopLag;
    ///
    /// let err = LoopLag::builder("main").resolution(Duration::ZERO).build().unwrap_err();
    /// assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    /// assert!(LoopLag::builder("main").window(Duration::from_millis(5)).build().is_err());
    /// ```
    pub fn build(self) -> io::Result<LoopLag> {
        let config = self.validated()?;
        Ok(LoopLag {
            shared: Arc::new(Shared::new(config)),
        })
    }
}

impl fmt::Debug for LoopLag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let config = &self.shared.config;
        f.debug_struct("LoopLag")
            .field("name", &config.name)
            .field("resolution", &config.resolution)
            .field("slow_poll_threshold", &config.slow_poll)
            .field("window", &config.window)
            .finish_non_exhaustive()
    }
}
