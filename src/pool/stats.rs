//! A pool's own counters and the metric handles it emits through.

use std::time::Duration;

use ::metrics::{Counter, Gauge, Histogram};

use crate::telemetry::{
    self, Counted, JOB_OUTCOMES, JobOutcome, POOL_JOB_SECONDS, POOL_JOBS_TOTAL,
    POOL_OLDEST_JOB_SECONDS, POOL_STUCK_JOBS_TOTAL,
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

/// The job counters a pool keeps itself, whatever recorder is installed, each mirrored
/// into its metric; and the handles of its job gauges and histograms. The admission series
/// (capacity, in use, waiting, refusals, waits, demand) are its
/// [`Limit`](crate::gate::limit::Limit)'s.
#[derive(Debug)]
pub(crate) struct Stats {
    /// Finished jobs, indexed by [`JobOutcome`].
    jobs: [Counted; 3],
    pub(crate) stuck: Counted,
    pub(crate) oldest_job_seconds: Gauge,
    job_seconds: Histogram,
}

impl Stats {
    /// Registers the job series of pool `name` with the recorder.
    pub(crate) fn register(name: &str) -> Stats {
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
        Stats {
            jobs: JOB_OUTCOMES.map(job),
            stuck: counter(POOL_STUCK_JOBS_TOTAL),
            oldest_job_seconds: gauge(POOL_OLDEST_JOB_SECONDS),
            job_seconds: histogram(POOL_JOB_SECONDS),
        }
    }

    pub(crate) fn jobs(&self, outcome: JobOutcome) -> u64 {
        self.jobs[outcome as usize].get()
    }

    /// Counts a finished job in the pool's own numbers (before its outcome is delivered, so
    /// whoever awaits it sees them). The recorder hears of it in
    /// [`emit_job`](Stats::emit_job), after delivery.
    pub(crate) fn count_job(&self, outcome: JobOutcome) {
        self.jobs[outcome as usize].count();
    }

    /// Tells the recorder about a job counted by [`count_job`](Stats::count_job).
    pub(crate) fn emit_job(&self, outcome: JobOutcome, elapsed: Duration) {
        self.jobs[outcome as usize].emit();
        telemetry::record(&self.job_seconds, elapsed);
    }
}
