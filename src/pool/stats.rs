//! A pool's own counters and the metric handles it emits through.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ::metrics::{Counter, Gauge, Histogram};

use crate::telemetry::{
    self, Counted, JOB_OUTCOMES, JobOutcome, POOL_CAPACITY, POOL_DEMAND_AVG, POOL_IN_USE,
    POOL_JOB_SECONDS, POOL_JOBS_TOTAL, POOL_OLDEST_JOB_SECONDS, POOL_REJECTED_TOTAL,
    POOL_STUCK_JOBS_TOTAL, POOL_WAIT_SECONDS, POOL_WAITING,
};

/// A snapshot of a pool's counters, from [`Pool::stats`](super::Pool::stats).
///
/// # Examples
///
/// ```
/// let pool = loopguard::pool::Pool::builder().workers(3).build()?;
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
    /// Callers waiting in [`Pool::run`](super::Pool::run) for a slot.
    pub waiting: usize,
    /// `try_run` calls refused because the pool was saturated.
    pub rejected: u64,
    /// Jobs that finished with a non-failure output.
    pub jobs_ok: u64,
    /// Jobs that returned a failure (an `Err` of [`Fallible`](crate::Fallible) work).
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

/// Counters kept by the pool itself, whatever recorder is installed, each mirrored into
/// its metric; and the handles of the gauges and histograms.
#[derive(Debug)]
pub(crate) struct Stats {
    pub(crate) rejected: Counted,
    /// Finished jobs, indexed by [`JobOutcome`].
    jobs: [Counted; 3],
    pub(crate) stuck: Counted,
    /// Moving average of job durations, in nanoseconds; 0 until a job finished.
    avg_job_nanos: AtomicU64,
    pub(crate) in_use: Gauge,
    pub(crate) waiting: Gauge,
    pub(crate) oldest_job_seconds: Gauge,
    pub(crate) demand_avg: Gauge,
    wait_seconds: Histogram,
    job_seconds: Histogram,
}

impl Stats {
    /// Registers every series of pool `name` with the recorder, each with a zero.
    pub(crate) fn register(name: &str, capacity: usize) -> Stats {
        let label = || name.to_string();
        let counter = |metric: &'static str| {
            Counted::new(telemetry::register(
                || ::metrics::counter!(metric, "pool" => label()),
                Counter::noop,
            ))
        };
        let gauge = |metric: &'static str| {
            let gauge =
                telemetry::register(|| ::metrics::gauge!(metric, "pool" => label()), Gauge::noop);
            telemetry::set(&gauge, 0.0);
            gauge
        };
        let histogram = |metric: &'static str| {
            telemetry::register(
                || ::metrics::histogram!(metric, "pool" => label()),
                Histogram::noop,
            )
        };
        let job = |outcome: &'static str| {
            Counted::new(telemetry::register(
                || ::metrics::counter!(POOL_JOBS_TOTAL, "pool" => label(), "outcome" => outcome),
                Counter::noop,
            ))
        };
        telemetry::set(&gauge(POOL_CAPACITY), capacity as f64);
        Stats {
            rejected: counter(POOL_REJECTED_TOTAL),
            jobs: JOB_OUTCOMES.map(job),
            stuck: counter(POOL_STUCK_JOBS_TOTAL),
            avg_job_nanos: AtomicU64::new(0),
            in_use: gauge(POOL_IN_USE),
            waiting: gauge(POOL_WAITING),
            oldest_job_seconds: gauge(POOL_OLDEST_JOB_SECONDS),
            demand_avg: gauge(POOL_DEMAND_AVG),
            wait_seconds: histogram(POOL_WAIT_SECONDS),
            job_seconds: histogram(POOL_JOB_SECONDS),
        }
    }

    pub(crate) fn jobs(&self, outcome: JobOutcome) -> u64 {
        self.jobs[outcome as usize].get()
    }

    /// Counts a finished job in the pool's own numbers (before its outcome is delivered, so
    /// whoever awaits it sees them). The recorder hears of it in
    /// [`emit_job`](Stats::emit_job), after delivery.
    pub(crate) fn count_job(&self, outcome: JobOutcome, elapsed: Duration) {
        self.jobs[outcome as usize].count();
        // Exponential moving average with weight 1/8; lost updates under contention only
        // make the hint a little older.
        let sample = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX).max(1);
        let avg = self.avg_job_nanos.load(Ordering::Relaxed);
        let next = if avg == 0 {
            sample
        } else {
            avg - avg / 8 + sample / 8
        };
        self.avg_job_nanos.store(next.max(1), Ordering::Relaxed);
    }

    /// Tells the recorder about a job counted by [`count_job`](Stats::count_job).
    pub(crate) fn emit_job(&self, outcome: JobOutcome, elapsed: Duration) {
        self.jobs[outcome as usize].emit();
        telemetry::record(&self.job_seconds, elapsed);
    }

    /// Records the wait of an admitted caller.
    pub(crate) fn emit_wait(&self, waited: Duration) {
        telemetry::record(&self.wait_seconds, waited);
    }

    /// The retry hint for a refused caller: the moving average of job durations (how long a
    /// running job takes to free its slot), at least 1 ms, 1 s before any job finished.
    pub(crate) fn retry_after(&self) -> Duration {
        match self.avg_job_nanos.load(Ordering::Relaxed) {
            0 => Duration::from_secs(1),
            nanos => Duration::from_nanos(nanos).max(Duration::from_millis(1)),
        }
    }
}
