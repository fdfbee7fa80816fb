//! Metric names, their descriptions, and the handles a pool emits through.
//!
//! loopguard only *emits* through the [`metrics`] facade; the application installs the
//! recorder (for example `metrics-exporter-prometheus`). Handles are obtained when a pool is
//! built, so install the recorder before building pools. Every series of a pool is created
//! at build time with a zero value (each `outcome` label included), so dashboards and alerts
//! never see a missing series.
//!
//! Gauges that are integrated over time (`loopguard_pool_demand_avg`) or that age
//! (`loopguard_pool_oldest_job_seconds`) are updated *on read*: call
//! [`Pool::publish_metrics`](crate::Pool::publish_metrics) right before rendering a scrape.
//! The counters, histograms and the `in_use`/`waiting` gauges are updated as events happen.
//!
//! # Examples
//!
//! ```
//! // Once, at startup, after installing a recorder:
//! loopguard::metrics::describe_metrics();
//! assert_eq!(loopguard::metrics::POOL_IN_USE, "loopguard_pool_in_use");
//! ```

use ::metrics::{
    describe_counter, describe_gauge, describe_histogram, Counter, Gauge, Histogram, Unit,
};

/// Gauge: slots of the pool (its worker threads). Label `pool`.
pub const POOL_CAPACITY: &str = "loopguard_pool_capacity";
/// Gauge: slots held, orphaned jobs included. Label `pool`.
pub const POOL_IN_USE: &str = "loopguard_pool_in_use";
/// Gauge: callers waiting for a slot. Label `pool`.
pub const POOL_WAITING: &str = "loopguard_pool_waiting";
/// Counter: finished jobs. Labels `pool`, `outcome` (`ok`, `error`, `panicked`).
pub const POOL_JOBS_TOTAL: &str = "loopguard_pool_jobs_total";
/// Counter: `try_run` calls refused because the pool was saturated. Label `pool`.
pub const POOL_REJECTED_TOTAL: &str = "loopguard_pool_rejected_total";
/// Histogram: seconds from submission to admission (zero when a slot was free). Label `pool`.
pub const POOL_WAIT_SECONDS: &str = "loopguard_pool_wait_seconds";
/// Histogram: seconds a job ran on its worker thread. Label `pool`.
pub const POOL_JOB_SECONDS: &str = "loopguard_pool_job_seconds";
/// Gauge: age in seconds of the oldest running job, 0 when idle. Label `pool`.
pub const POOL_OLDEST_JOB_SECONDS: &str = "loopguard_pool_oldest_job_seconds";
/// Gauge: time-weighted average of holders + waiters over the demand window. Label `pool`.
pub const POOL_DEMAND_AVG: &str = "loopguard_pool_demand_avg";
/// Counter: failures of orphaned jobs (reported to the orphan handler). Label `pool`.
pub const ORPHANED_FAILURES_TOTAL: &str = "loopguard_orphaned_failures_total";
/// Counter: jobs reported as stuck (running past the pool's threshold). Label `pool`.
pub const POOL_STUCK_JOBS_TOTAL: &str = "loopguard_pool_stuck_jobs_total";

/// Gauge: time-weighted demand (holders + waiters) of one key of a
/// [`KeyedGate`](crate::keyed::KeyedGate) over its window. Labels: `gate`,
/// `key`. Updated on read, by [`KeyedGate::publish_metrics`](crate::keyed::KeyedGate::publish_metrics).
///
/// # Examples
///
/// ```
/// assert_eq!(loopguard::metrics::KEYED_DEMAND_AVG, "loopguard_keyed_demand_avg");
/// ```
pub const KEYED_DEMAND_AVG: &str = "loopguard_keyed_demand_avg";

/// Counter: calls to [`KeyedGate::try_acquire`](crate::keyed::KeyedGate::try_acquire)
/// rejected because the key was busy. Label: `gate`.
///
/// # Examples
///
/// ```
/// assert_eq!(
///     loopguard::metrics::KEYED_REJECTED_TOTAL,
///     "loopguard_keyed_rejected_total",
/// );
/// ```
pub const KEYED_REJECTED_TOTAL: &str = "loopguard_keyed_rejected_total";

/// Label naming the gate a series belongs to.
///
/// # Examples
///
/// ```
/// assert_eq!(loopguard::metrics::LABEL_GATE, "gate");
/// ```
pub const LABEL_GATE: &str = "gate";

/// Label naming the key of a keyed gate.
///
/// # Examples
///
/// ```
/// assert_eq!(loopguard::metrics::LABEL_KEY, "key");
/// ```
pub const LABEL_KEY: &str = "key";

/// Histogram: seconds from the start of an operation (before its first queue) to its end,
/// one observation per operation. Labels `operation`, `outcome` (`success`, `deadline`,
/// `cancelled`, `error`). Emitted by [`Operation`](crate::operation::Operation).
///
/// # Examples
///
/// ```
/// assert_eq!(
///     loopguard::metrics::OPERATION_DURATION_SECONDS,
///     "loopguard_operation_duration_seconds",
/// );
/// ```
pub const OPERATION_DURATION_SECONDS: &str = "loopguard_operation_duration_seconds";

/// Gauge: operations started and not yet finished, queued ones included. Label
/// `operation`. Emitted by [`Operation`](crate::operation::Operation).
///
/// # Examples
///
/// ```
/// assert_eq!(
///     loopguard::metrics::OPERATIONS_IN_FLIGHT,
///     "loopguard_operations_in_flight",
/// );
/// ```
pub const OPERATIONS_IN_FLIGHT: &str = "loopguard_operations_in_flight";

/// Label naming the operation a series belongs to.
///
/// # Examples
///
/// ```
/// assert_eq!(loopguard::metrics::LABEL_OPERATION, "operation");
/// ```
pub const LABEL_OPERATION: &str = "operation";

/// Label naming how something ended.
///
/// # Examples
///
/// ```
/// assert_eq!(loopguard::metrics::LABEL_OUTCOME, "outcome");
/// ```
pub const LABEL_OUTCOME: &str = "outcome";

/// The `outcome` label values of [`OPERATION_DURATION_SECONDS`].
///
/// # Examples
///
/// ```
/// assert!(loopguard::metrics::OPERATION_OUTCOMES.contains(&"cancelled"));
/// ```
pub const OPERATION_OUTCOMES: [&str; 4] = ["success", "deadline", "cancelled", "error"];

/// Counter: collections of a [`Refresh`](crate::Refresh) cache that finished. Labels
/// `cache`, `outcome` (`ok`, `error`; a panicking collection counts as `error`).
///
/// # Examples
///
/// ```
/// assert_eq!(loopguard::metrics::REFRESH_RUNS_TOTAL, "loopguard_refresh_runs_total");
/// ```
pub const REFRESH_RUNS_TOTAL: &str = "loopguard_refresh_runs_total";

/// Counter: calls of a [`Refresh`](crate::Refresh) cache answered from the cache without
/// waiting (a fresh value, or a failure within its failure TTL). Label `cache`.
///
/// # Examples
///
/// ```
/// assert_eq!(loopguard::metrics::REFRESH_HITS_TOTAL, "loopguard_refresh_hits_total");
/// ```
pub const REFRESH_HITS_TOTAL: &str = "loopguard_refresh_hits_total";

/// Counter: calls of a [`Refresh`](crate::Refresh) cache that joined a collection already
/// in flight instead of starting one. Label `cache`.
///
/// # Examples
///
/// ```
/// assert_eq!(loopguard::metrics::REFRESH_JOINS_TOTAL, "loopguard_refresh_joins_total");
/// ```
pub const REFRESH_JOINS_TOTAL: &str = "loopguard_refresh_joins_total";

/// Counter: calls of a [`Refresh`](crate::Refresh) cache that ended with
/// [`Expired`](crate::Expired) (the caller's deadline ran out before a value was ready; the
/// collection goes on). Label `cache`.
///
/// # Examples
///
/// ```
/// assert_eq!(
///     loopguard::metrics::REFRESH_EXPIRED_WAITS_TOTAL,
///     "loopguard_refresh_expired_waits_total",
/// );
/// ```
pub const REFRESH_EXPIRED_WAITS_TOTAL: &str = "loopguard_refresh_expired_waits_total";

/// Label naming the [`Refresh`](crate::Refresh) cache a series belongs to.
///
/// # Examples
///
/// ```
/// assert_eq!(loopguard::metrics::LABEL_CACHE, "cache");
/// ```
pub const LABEL_CACHE: &str = "cache";

/// The `outcome` label values of [`REFRESH_RUNS_TOTAL`].
///
/// # Examples
///
/// ```
/// assert_eq!(loopguard::metrics::REFRESH_OUTCOMES, ["ok", "error"]);
/// ```
pub const REFRESH_OUTCOMES: [&str; 2] = ["ok", "error"];

/// The `outcome` label values of [`POOL_JOBS_TOTAL`].
pub const JOB_OUTCOMES: [&str; 3] = ["ok", "error", "panicked"];

/// Registers help text and units for every metric loopguard emits. Call it once after the
/// recorder is installed; calling it again is harmless.
///
/// # Examples
///
/// ```
/// loopguard::metrics::describe_metrics();
/// ```
pub fn describe_metrics() {
    describe_gauge!(
        POOL_CAPACITY,
        Unit::Count,
        "Slots (worker threads) of the pool."
    );
    describe_gauge!(
        POOL_IN_USE,
        Unit::Count,
        "Slots held by admitted jobs, orphaned jobs included."
    );
    describe_gauge!(POOL_WAITING, Unit::Count, "Callers waiting for a slot.");
    describe_counter!(
        POOL_JOBS_TOTAL,
        Unit::Count,
        "Jobs finished, by outcome (ok, error, panicked)."
    );
    describe_counter!(
        POOL_REJECTED_TOTAL,
        Unit::Count,
        "Submissions refused at once because every slot was held."
    );
    describe_histogram!(
        POOL_WAIT_SECONDS,
        Unit::Seconds,
        "Time from submission to admission, zero when a slot was free."
    );
    describe_histogram!(
        POOL_JOB_SECONDS,
        Unit::Seconds,
        "Time a job ran on its worker thread."
    );
    describe_gauge!(
        POOL_OLDEST_JOB_SECONDS,
        Unit::Seconds,
        "Age of the oldest running job, 0 when idle."
    );
    describe_gauge!(
        POOL_DEMAND_AVG,
        Unit::Count,
        "Time-weighted average of holders plus waiters over the demand window."
    );
    describe_counter!(
        ORPHANED_FAILURES_TOTAL,
        Unit::Count,
        "Failures of work whose caller had left, reported to the orphan handler."
    );
    describe_gauge!(
        KEYED_DEMAND_AVG,
        Unit::Count,
        "Time-weighted average of holders plus waiters of one key over the gate's window."
    );
    describe_counter!(
        KEYED_REJECTED_TOTAL,
        Unit::Count,
        "Reject-when-busy admissions refused because the key was busy."
    );
    describe_histogram!(
        OPERATION_DURATION_SECONDS,
        Unit::Seconds,
        "Time from the start of an operation, queues included, to its end, by outcome."
    );
    describe_gauge!(
        OPERATIONS_IN_FLIGHT,
        Unit::Count,
        "Operations started and not yet finished, queued ones included."
    );
    describe_counter!(
        POOL_STUCK_JOBS_TOTAL,
        Unit::Count,
        "Jobs that ran past the pool's stuck threshold."
    );
    describe_counter!(
        REFRESH_RUNS_TOTAL,
        Unit::Count,
        "Collections of a refresh cache that finished, by outcome (ok, error)."
    );
    describe_counter!(
        REFRESH_HITS_TOTAL,
        Unit::Count,
        "Calls answered from a refresh cache without waiting."
    );
    describe_counter!(
        REFRESH_JOINS_TOTAL,
        Unit::Count,
        "Calls that joined a refresh collection already in flight."
    );
    describe_counter!(
        REFRESH_EXPIRED_WAITS_TOTAL,
        Unit::Count,
        "Calls of a refresh cache whose deadline ended before a value was ready."
    );
}

/// The handles one pool emits through, registered when the pool is built.
#[derive(Debug)]
pub(crate) struct PoolMetrics {
    pub(crate) in_use: Gauge,
    pub(crate) waiting: Gauge,
    pub(crate) jobs: [Counter; 3],
    pub(crate) rejected: Counter,
    pub(crate) wait_seconds: Histogram,
    pub(crate) job_seconds: Histogram,
    pub(crate) oldest_job_seconds: Gauge,
    pub(crate) demand_avg: Gauge,
    pub(crate) orphaned_failures: Counter,
    pub(crate) stuck_jobs: Counter,
}

impl PoolMetrics {
    pub(crate) fn register(pool: &str, capacity: usize) -> PoolMetrics {
        let label = pool.to_string();
        let gauge = |name: &'static str| {
            let g = ::metrics::gauge!(name, "pool" => label.clone());
            g.set(0.0);
            g
        };
        let counter = |name: &'static str| {
            let c = ::metrics::counter!(name, "pool" => label.clone());
            c.increment(0);
            c
        };
        let job = |outcome: &'static str| {
            let c =
                ::metrics::counter!(POOL_JOBS_TOTAL, "pool" => label.clone(), "outcome" => outcome);
            c.increment(0);
            c
        };
        gauge(POOL_CAPACITY).set(capacity as f64);
        PoolMetrics {
            in_use: gauge(POOL_IN_USE),
            waiting: gauge(POOL_WAITING),
            jobs: JOB_OUTCOMES.map(job),
            rejected: counter(POOL_REJECTED_TOTAL),
            wait_seconds: ::metrics::histogram!(POOL_WAIT_SECONDS, "pool" => label.clone()),
            job_seconds: ::metrics::histogram!(POOL_JOB_SECONDS, "pool" => label.clone()),
            oldest_job_seconds: gauge(POOL_OLDEST_JOB_SECONDS),
            demand_avg: gauge(POOL_DEMAND_AVG),
            orphaned_failures: counter(ORPHANED_FAILURES_TOTAL),
            stuck_jobs: counter(POOL_STUCK_JOBS_TOTAL),
        }
    }
}
