//! A pool's own counters and the metric handles it emits through.

use std::time::Duration;

use ::metrics::{Counter, Gauge, Histogram};

use crate::emit::durations::{DurationStats, Durations};
use crate::emit::{
    self, Counted, JOB_OUTCOMES, JobOutcome, POOL_JOB_SECONDS, POOL_JOBS_TOTAL,
    POOL_OLDEST_JOB_SECONDS, POOL_STUCK_JOBS_TOTAL, Published,
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
    /// Moving average of how long the pool's jobs ran (weight 1/8 per slot given back): the
    /// basis of [`Saturated::retry_after`](super::Saturated::retry_after), sampled when a
    /// job's slot goes back. A request admitted by the tower layer's `for_pool` holds one of
    /// the pool's slots from admission to the end of its body: what is averaged for it is
    /// the time of the jobs it ran on that slot (their sum, if it ran several), not its
    /// whole hold; a request that ran none adds nothing. `None` before the first job's slot
    /// came back.
    pub mean_job_time: Option<Duration>,
    /// How long admitted callers waited for their slot (zero when one was free), recorded
    /// at admission: the series of `loopguard_pool_wait_seconds`.
    pub wait_time: DurationStats,
    /// How long finished jobs ran on their worker, recorded before the outcome is
    /// delivered: the series of `loopguard_pool_job_seconds`.
    pub job_time: DurationStats,
}

#[cfg(feature = "prometheus-client")]
impl super::Pool {
    /// The read gauges as the last [`publish_metrics`](super::Pool::publish_metrics) set
    /// them: what a registry that reads (the prometheus-client collector) encodes.
    pub(crate) fn published(&self) -> emit::PublishedGauges {
        let core = self.core();
        let (in_use, waiting, demand_avg) = core.limit.published();
        emit::PublishedGauges {
            in_use,
            waiting,
            oldest_job_seconds: core.stats.oldest_job_seconds.last(),
            demand_avg,
        }
    }
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
    pub(crate) oldest_job_seconds: Published,
    job_seconds: Histogram,
    /// The pool's own record of the job histogram, for [`PoolStats`].
    pub(crate) job_time: Durations,
}

impl Stats {
    /// Registers the job series of pool `name` with the recorder.
    pub(crate) fn register(name: &str) -> Stats {
        let label = || name.to_string();
        let counter = |metric: &'static str| {
            Counted::new(emit::register(
                || ::metrics::counter!(metric, emit::LABEL_POOL => label()),
                Counter::noop,
            ))
        };
        let gauge = |metric: &'static str| {
            let gauge = emit::register(
                || ::metrics::gauge!(metric, emit::LABEL_POOL => label()),
                Gauge::noop,
            );
            emit::set(&gauge, 0.0);
            gauge
        };
        let published = |metric: &'static str| Published::new(gauge(metric));
        let histogram = |metric: &'static str| {
            emit::register(
                || ::metrics::histogram!(metric, emit::LABEL_POOL => label()),
                Histogram::noop,
            )
        };
        let job = |outcome: &'static str| {
            Counted::new(emit::register(
                || ::metrics::counter!(POOL_JOBS_TOTAL, emit::LABEL_POOL => label(), "outcome" => outcome),
                Counter::noop,
            ))
        };
        Stats {
            jobs: JOB_OUTCOMES.map(job),
            stuck: counter(POOL_STUCK_JOBS_TOTAL),
            oldest_job_seconds: published(POOL_OLDEST_JOB_SECONDS),
            job_seconds: histogram(POOL_JOB_SECONDS),
            job_time: Durations::default(),
        }
    }

    pub(crate) fn jobs(&self, outcome: JobOutcome) -> u64 {
        self.jobs[outcome as usize].get()
    }

    /// Counts a finished job in the pool's own numbers (before its outcome is stored, so
    /// whoever awaits it sees them). The recorder hears of it in
    /// [`emit_job`](Stats::emit_job), once the outcome is stored and before the slot goes
    /// back.
    pub(crate) fn count_job(&self, outcome: JobOutcome, elapsed: Duration) {
        self.jobs[outcome as usize].count();
        self.job_time.record(elapsed);
    }

    /// Tells the recorder about a job counted by [`count_job`](Stats::count_job).
    pub(crate) fn emit_job(&self, outcome: JobOutcome, elapsed: Duration) {
        self.jobs[outcome as usize].emit();
        emit::record(&self.job_seconds, elapsed);
    }
}
