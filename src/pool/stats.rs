//! A pool's own counters and the metric handles it emits through.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ::metrics::{Counter, Gauge, Histogram};

use crate::telemetry::{
    self, Counted, DURATION_BUCKETS, JOB_OUTCOMES, JobOutcome, POOL_CAPACITY, POOL_DEMAND_AVG,
    POOL_IN_USE, POOL_JOB_SECONDS, POOL_JOBS_TOTAL, POOL_OLDEST_JOB_SECONDS, POOL_REJECTED_TOTAL,
    POOL_STUCK_JOBS_TOTAL, POOL_WAIT_SECONDS, POOL_WAITING, Published,
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
    /// Moving average of job durations (weight 1/8 per finished job): the basis of
    /// [`Saturated::retry_after`](super::Saturated::retry_after). `None` before the first
    /// job finished.
    pub mean_job_time: Option<Duration>,
    /// How long admitted callers waited for their slot (zero when one was free), recorded
    /// at admission: the series of `loopguard_pool_wait_seconds`.
    pub wait_time: DurationStats,
    /// How long finished jobs ran on their worker, recorded before the outcome is
    /// delivered: the series of `loopguard_pool_job_seconds`.
    pub job_time: DurationStats,
}

/// Durations a pool recorded, as a Prometheus histogram holds them: how many, their sum,
/// and how many fell at or under each bound of
/// [`DURATION_BUCKETS`](crate::telemetry::DURATION_BUCKETS).
///
/// # Precision
///
/// Read while jobs finish, `count` and `buckets` agree (they come from the same counts),
/// while `sum` may already include a duration they do not, or miss one they do.
///
/// # Examples
///
/// ```
/// # futures_lite::future::block_on(async {
/// let pool = loopguard::pool::Pool::builder().build()?;
/// pool.run(|| ()).await.unwrap();
/// let jobs = pool.stats().job_time;
/// assert_eq!(jobs.count, 1);
/// assert_eq!(jobs.buckets.last(), Some(&1), "a no-op job takes less than 10 s");
/// assert!(jobs.sum < std::time::Duration::from_secs(10));
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DurationStats {
    /// Durations recorded.
    pub count: u64,
    /// Their sum.
    pub sum: Duration,
    /// Cumulative: `buckets[i]` durations were at most `DURATION_BUCKETS[i]` seconds.
    pub buckets: [u64; DURATION_BUCKETS.len()],
}

/// A pool's own duration histogram: one count per bucket (not cumulative; the last slot
/// holds durations above every bound) and the sum, in nanoseconds.
#[derive(Debug, Default)]
pub(crate) struct Durations {
    slots: [AtomicU64; DURATION_BUCKETS.len() + 1],
    sum_nanos: AtomicU64,
}

impl Durations {
    pub(crate) fn record(&self, value: Duration) {
        let seconds = value.as_secs_f64();
        let slot = DURATION_BUCKETS
            .iter()
            .position(|&bound| seconds <= bound)
            .unwrap_or(DURATION_BUCKETS.len());
        self.slots[slot].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(value.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> DurationStats {
        let mut buckets = [0; DURATION_BUCKETS.len()];
        let mut running = 0;
        for (bucket, slot) in buckets.iter_mut().zip(&self.slots) {
            running += slot.load(Ordering::Relaxed);
            *bucket = running;
        }
        let count = running + self.slots[DURATION_BUCKETS.len()].load(Ordering::Relaxed);
        DurationStats {
            count,
            sum: Duration::from_nanos(self.sum_nanos.load(Ordering::Relaxed)),
            buckets,
        }
    }
}

#[cfg(feature = "prometheus-client")]
impl super::Pool {
    /// The read gauges as the last [`publish_metrics`](super::Pool::publish_metrics) set
    /// them: what a registry that reads (the prometheus-client collector) encodes.
    pub(crate) fn published(&self) -> telemetry::PublishedGauges {
        let stats = &self.core().stats;
        telemetry::PublishedGauges {
            in_use: stats.in_use.last(),
            waiting: stats.waiting.last(),
            oldest_job_seconds: stats.oldest_job_seconds.last(),
            demand_avg: stats.demand_avg.last(),
        }
    }
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
    pub(crate) in_use: Published,
    pub(crate) waiting: Published,
    pub(crate) oldest_job_seconds: Published,
    pub(crate) demand_avg: Published,
    wait_seconds: Histogram,
    job_seconds: Histogram,
    /// The pool's own record of the two histograms, for [`PoolStats`].
    pub(crate) wait_time: Durations,
    pub(crate) job_time: Durations,
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
        let published = |metric: &'static str| Published::new(gauge(metric));
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
            in_use: published(POOL_IN_USE),
            waiting: published(POOL_WAITING),
            oldest_job_seconds: published(POOL_OLDEST_JOB_SECONDS),
            demand_avg: published(POOL_DEMAND_AVG),
            wait_seconds: histogram(POOL_WAIT_SECONDS),
            job_seconds: histogram(POOL_JOB_SECONDS),
            wait_time: Durations::default(),
            job_time: Durations::default(),
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
        self.job_time.record(elapsed);
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

    /// Tells the recorder about a job counted by [`count_job`](Stats::count_job), and
    /// about the refusals counted while it ran.
    pub(crate) fn emit_job(&self, outcome: JobOutcome, elapsed: Duration) {
        self.jobs[outcome as usize].emit();
        telemetry::record(&self.job_seconds, elapsed);
        self.rejected.flush();
    }

    /// Records the wait of an admitted caller.
    pub(crate) fn emit_wait(&self, waited: Duration) {
        self.wait_time.record(waited);
        telemetry::record(&self.wait_seconds, waited);
    }

    /// The moving average of job durations, `None` before a job finished.
    pub(crate) fn mean_job_time(&self) -> Option<Duration> {
        match self.avg_job_nanos.load(Ordering::Relaxed) {
            0 => None,
            nanos => Some(Duration::from_nanos(nanos)),
        }
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
