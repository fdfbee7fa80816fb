//! What loopguard emits: the series' names and labels (defined here once; each primitive
//! registers its own series with the `metrics` facade under these names, and the
//! prometheus-client collector reads them too), the counts loopguard keeps itself ([`Counted`], [`durations`]), the gauges the loop
//! publishes ([`Published`]), and the contained calls into the `metrics` recorder. The
//! public side (the table of series, [`describe_metrics`], the prometheus-client
//! collector) is `crate::telemetry`, which re-exports from here; nothing here imports it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ::metrics::{
    Counter, Gauge, Histogram, Unit, describe_counter, describe_gauge, describe_histogram,
};

use crate::contain::{CONTAINED, contain};

pub(crate) mod durations;
pub(crate) mod publisher;

use publisher::OnePublisher;

/// The instant each publishing round reads at: `now` for the first, the time of reading for
/// a round run again for a later caller (see [`OnePublisher`]), so that round's reading is
/// taken after that caller began.
pub(crate) fn round_clock(now: std::time::Instant) -> impl FnMut() -> std::time::Instant {
    let mut first = Some(now);
    move || first.take().unwrap_or_else(std::time::Instant::now)
}

/// Gauge: slots of the pool (its worker threads). Label `pool`.
pub(crate) const POOL_CAPACITY: &str = "loopguard_pool_capacity";
/// Gauge: slots held, orphaned jobs included. Label `pool`.
pub(crate) const POOL_IN_USE: &str = "loopguard_pool_in_use";
/// Gauge: callers waiting for a slot. Label `pool`.
pub(crate) const POOL_WAITING: &str = "loopguard_pool_waiting";
/// Counter: finished jobs. Labels `pool`, `outcome` (`ok`, `error`, `panicked`).
pub(crate) const POOL_JOBS_TOTAL: &str = "loopguard_pool_jobs_total";
/// Counter: `try_run` calls refused because the pool was saturated. Label `pool`.
///
/// A refusal only counts (one atomic add, so refusing stays cheap under a storm); the
/// recorder hears of the refusals in one update when the next job finishes and at
/// [`Pool::publish_metrics`](crate::pool::Pool::publish_metrics), so a scrape that
/// publishes first sees them all. [`PoolStats::rejected`](crate::pool::PoolStats::rejected)
/// is always exact.
pub(crate) const POOL_REJECTED_TOTAL: &str = "loopguard_pool_rejected_total";
/// Histogram: seconds from submission to admission (zero when a slot was free). Label `pool`.
pub(crate) const POOL_WAIT_SECONDS: &str = "loopguard_pool_wait_seconds";
/// Histogram: seconds a job ran on its worker thread. Label `pool`.
pub(crate) const POOL_JOB_SECONDS: &str = "loopguard_pool_job_seconds";
/// Upper bounds, in seconds, of the buckets a pool keeps for its wait and job durations
/// ([`PoolStats::wait_time`](crate::pool::PoolStats::wait_time),
/// [`PoolStats::job_time`](crate::pool::PoolStats::job_time)) and the prometheus-client
/// `Collector`'s histograms (feature `prometheus-client`). With the `metrics` facade the recorder chooses the
/// buckets; give it these to get the same series from both registries.
///
/// # Examples
///
/// ```
/// assert_eq!(loopguard::telemetry::DURATION_BUCKETS.last(), Some(&10.0));
/// ```
pub const DURATION_BUCKETS: [f64; 12] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Gauge: age in seconds of the oldest running job, 0 when idle. Label `pool`.
pub(crate) const POOL_OLDEST_JOB_SECONDS: &str = "loopguard_pool_oldest_job_seconds";
/// Gauge: time-weighted average of holders + waiters over the demand window. Label `pool`.
///
/// It counts what the pool admitted (and callers waiting in `run`), so under overload it
/// stops near the capacity exactly when `try_run` starts refusing: a refused attempt adds
/// no demand. To scale on load the pool refuses, use the offered load of
/// `ops/prometheus/loopguard-recording.yaml` (this gauge plus the rate of
/// `loopguard_pool_rejected_total` times the mean job time, by Little's law).
pub(crate) const POOL_DEMAND_AVG: &str = "loopguard_pool_demand_avg";
/// Counter: failures of orphaned jobs (reported to the orphan handler). Label `pool`.
pub(crate) const ORPHANED_FAILURES_TOTAL: &str = "loopguard_orphaned_failures_total";
/// Counter: jobs reported as stuck (running past the pool's threshold). Label `pool`.
pub(crate) const POOL_STUCK_JOBS_TOTAL: &str = "loopguard_pool_stuck_jobs_total";

/// Gauge: time-weighted demand (holders + waiters) of one key of a
/// [`KeyedGate`](crate::keyed::KeyedGate) over its window. Labels: `gate`,
/// `key`. Updated on read, by [`KeyedGate::publish_metrics`](crate::keyed::KeyedGate::publish_metrics).
pub(crate) const KEYED_DEMAND_AVG: &str = "loopguard_keyed_demand_avg";

/// Counter: calls to [`KeyedGate::try_acquire`](crate::keyed::KeyedGate::try_acquire)
/// rejected because the key was busy (and fail-fast requests a keyed tower layer refused).
/// Label: `gate`.
///
/// As a pool's refusals: a refusal only counts (one atomic add); the recorder hears of the
/// refusals in one update when a permit of the gate is dropped and at
/// [`KeyedGate::publish_metrics`](crate::keyed::KeyedGate::publish_metrics).
/// [`KeyedGate::rejected`](crate::keyed::KeyedGate::rejected) is always exact.
pub(crate) const KEYED_REJECTED_TOTAL: &str = "loopguard_keyed_rejected_total";

/// Counter: requests whose deadline passed before their key admitted them (a keyed tower
/// layer's waiting mode: spent on arrival, or while waiting in line). Label: `gate`.
/// Emitted in batches, as [`KEYED_REJECTED_TOTAL`].
pub(crate) const KEYED_EXPIRED_TOTAL: &str = "loopguard_keyed_expired_total";

/// Label naming the pool (or the tower admission layer's limit) a series belongs to.
pub(crate) const LABEL_POOL: &str = "pool";

/// Label naming the shield an orphaned-failures series belongs to.
pub(crate) const LABEL_SHIELD: &str = "shield";

/// Label naming the gate a series belongs to.
pub(crate) const LABEL_GATE: &str = "gate";

/// Label naming the key of a keyed gate.
pub(crate) const LABEL_KEY: &str = "key";

/// Histogram: seconds from the start of an operation (before its first queue) to its end,
/// one observation per operation. Labels `operation`, `outcome` (`success`, `deadline`, `deadline_in_line`,
/// `cancelled`, `error`). Emitted by [`Operation`](crate::operation::Operation).
pub(crate) const OPERATION_DURATION_SECONDS: &str = "loopguard_operation_duration_seconds";

/// Gauge: operations started and not yet finished, queued ones included. Label
/// `operation`. Emitted by [`Operation`](crate::operation::Operation).
pub(crate) const OPERATIONS_IN_FLIGHT: &str = "loopguard_operations_in_flight";

/// Label naming the operation a series belongs to.
pub(crate) const LABEL_OPERATION: &str = "operation";

/// Label naming how something ended.
pub(crate) const LABEL_OUTCOME: &str = "outcome";

/// Counter: collections of a [`Refresh`](crate::refresh::Refresh) cache that finished. Labels
/// `cache`, `outcome` (`ok`, `error`; a panicking collection counts as `error`).
pub(crate) const REFRESH_RUNS_TOTAL: &str = "loopguard_refresh_runs_total";

/// Counter: calls of a [`Refresh`](crate::refresh::Refresh) cache answered from the cache without
/// waiting (a fresh value, or a failure within its failure TTL). Label `cache`.
pub(crate) const REFRESH_HITS_TOTAL: &str = "loopguard_refresh_hits_total";

/// Counter: calls of a [`Refresh`](crate::refresh::Refresh) cache that joined a collection already
/// in flight instead of starting one. Label `cache`.
pub(crate) const REFRESH_JOINS_TOTAL: &str = "loopguard_refresh_joins_total";

/// Counter: calls of a [`Refresh`](crate::refresh::Refresh) cache that ended with
/// [`Expired`](crate::deadline::Expired) (the caller's deadline ran out before a value was ready; the
/// collection goes on). Label `cache`.
pub(crate) const REFRESH_EXPIRED_WAITS_TOTAL: &str = "loopguard_refresh_expired_waits_total";

/// Label naming the [`Refresh`](crate::refresh::Refresh) cache a series belongs to.
pub(crate) const LABEL_CACHE: &str = "cache";

/// Counter: values of a timeout header that were not a timeout, ignored by
/// [`header::request_deadline`](crate::header::request_deadline) and
/// [`header::scrape_deadline`](crate::header::scrape_deadline). Label `header`, one of the
/// three timeout headers' lowercase names.
pub(crate) const IGNORED_BUDGET_HEADERS_TOTAL: &str = "loopguard_ignored_budget_headers_total";

/// Label naming the request header a series counts.
pub(crate) const LABEL_HEADER: &str = "header";

/// Counter: retries a [`RetryBudget`](crate::retry::RetryBudget) refused. Label `budget`.
pub(crate) const RETRY_BUDGET_REFUSED_TOTAL: &str = "loopguard_retry_budget_refused_total";

/// Label naming the retry budget a series belongs to.
pub(crate) const LABEL_BUDGET: &str = "budget";

/// Histogram: seconds a [`LoopLag`](crate::lag::LoopLag) probe woke after its timer was due,
/// one observation per tick. Label `loop`.
pub(crate) const LOOP_LAG_SECONDS: &str = "loopguard_loop_lag_seconds";

/// Counter: polls of an instrumented future that held the loop longer than the slow-poll
/// threshold. Labels `loop`, `task`.
pub(crate) const LOOP_SLOW_POLLS_TOTAL: &str = "loopguard_loop_slow_polls_total";

/// Label naming the loop a [`LoopLag`](crate::lag::LoopLag) measures.
pub(crate) const LABEL_LOOP: &str = "loop";

/// Label naming the task an instrumented future was given.
pub(crate) const LABEL_TASK: &str = "task";

/// The `outcome` label values of [`REFRESH_RUNS_TOTAL`].
pub(crate) const REFRESH_OUTCOMES: [&str; 2] = [RunOutcome::Ok.label(), RunOutcome::Error.label()];

/// The `outcome` label values of `loopguard_pool_jobs_total`.
pub(crate) const JOB_OUTCOMES: [&str; 3] = [
    JobOutcome::Ok.label(),
    JobOutcome::Error.label(),
    JobOutcome::Panicked.label(),
];

/// How a pool job ended: the `outcome` label of `loopguard_pool_jobs_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JobOutcome {
    Ok = 0,
    Error = 1,
    Panicked = 2,
}

impl JobOutcome {
    pub(crate) const fn label(self) -> &'static str {
        match self {
            JobOutcome::Ok => "ok",
            JobOutcome::Error => "error",
            JobOutcome::Panicked => "panicked",
        }
    }
}

/// How a refresh collection ended: the `outcome` label of [`REFRESH_RUNS_TOTAL`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunOutcome {
    Ok = 0,
    Error = 1,
}

impl RunOutcome {
    pub(crate) const fn label(self) -> &'static str {
        match self {
            RunOutcome::Ok => "ok",
            RunOutcome::Error => "error",
        }
    }
}

/// Panics of code loopguard does not own (wakers, loggers, metrics recorders, orphan
/// handlers, `Debug` and `Drop` impls of outputs) that loopguard caught in this process.
///
/// Each one is contained where it happened, so it kills no worker, leaks no slot, strands
/// no waiter and loses no report; it also leaves a line on stderr (not through `log`,
/// which may be what panicked). A job's own panic is not counted here: it is the job's
/// outcome, returned or reported as [`Panicked`](crate::Panicked).
///
/// # Examples
///
/// ```
/// let before = loopguard::telemetry::contained_panics();
/// assert!(loopguard::telemetry::contained_panics() >= before);
/// ```
pub fn contained_panics() -> u64 {
    CONTAINED.load(Ordering::Relaxed)
}

/// Registers help text and units for every metric loopguard emits. Call it once after the
/// recorder is installed; calling it again is harmless.
///
/// # Examples
///
/// ```
/// loopguard::telemetry::describe_metrics();
/// ```
pub fn describe_metrics() {
    contain("the metrics recorder", describe_all);
}

/// The help text of the series `name`, one text for every registry (the `metrics`
/// facade through [`describe_metrics`], the prometheus-client collector).
pub(crate) fn help(name: &str) -> &'static str {
    match name {
        POOL_CAPACITY => "Slots (worker threads) of the pool.",
        POOL_IN_USE => "Slots held by admitted jobs, orphaned jobs included.",
        POOL_WAITING => "Callers waiting for a slot.",
        POOL_JOBS_TOTAL => "Jobs finished, by outcome (ok, error, panicked).",
        POOL_REJECTED_TOTAL => "Submissions refused at once because every slot was held.",
        POOL_WAIT_SECONDS => "Time from submission to admission, zero when a slot was free.",
        POOL_JOB_SECONDS => "Time a job ran on its worker thread.",
        POOL_OLDEST_JOB_SECONDS => "Age of the oldest running job, 0 when idle.",
        POOL_DEMAND_AVG => "Time-weighted average of holders plus waiters over the demand window.",
        ORPHANED_FAILURES_TOTAL => {
            "Failures of work whose caller had left, reported to the orphan handler."
        }
        KEYED_DEMAND_AVG => {
            "Time-weighted average of holders plus waiters of one key over the gate's window."
        }
        KEYED_REJECTED_TOTAL => "Reject-when-busy admissions refused because the key was busy.",
        KEYED_EXPIRED_TOTAL => "Requests whose deadline passed before their key admitted them.",
        OPERATION_DURATION_SECONDS => {
            "Time from the start of an operation, queues included, to its end, by outcome."
        }
        OPERATIONS_IN_FLIGHT => "Operations started and not yet finished, queued ones included.",
        POOL_STUCK_JOBS_TOTAL => "Jobs that ran past the pool's stuck threshold.",
        REFRESH_RUNS_TOTAL => {
            "Collections of a refresh cache that finished, by outcome (ok, error)."
        }
        REFRESH_HITS_TOTAL => "Calls answered from a refresh cache without waiting.",
        REFRESH_JOINS_TOTAL => "Calls that joined a refresh collection already in flight.",
        REFRESH_EXPIRED_WAITS_TOTAL => {
            "Calls of a refresh cache whose deadline ended before a value was ready."
        }
        IGNORED_BUDGET_HEADERS_TOTAL => {
            "Values of a timeout header that were not a timeout, ignored for the budget."
        }
        RETRY_BUDGET_REFUSED_TOTAL => {
            "Retries a retry budget refused: the call ended with its last failure."
        }
        LOOP_LAG_SECONDS => "Time the loop's lag probe woke after its timer was due.",
        LOOP_SLOW_POLLS_TOTAL => {
            "Polls of an instrumented task that held the loop past the slow-poll threshold."
        }
        _ => "",
    }
}

fn describe_all() {
    describe_gauge!(POOL_CAPACITY, Unit::Count, help(POOL_CAPACITY));
    describe_gauge!(POOL_IN_USE, Unit::Count, help(POOL_IN_USE));
    describe_gauge!(POOL_WAITING, Unit::Count, help(POOL_WAITING));
    describe_counter!(POOL_JOBS_TOTAL, Unit::Count, help(POOL_JOBS_TOTAL));
    describe_counter!(POOL_REJECTED_TOTAL, Unit::Count, help(POOL_REJECTED_TOTAL));
    describe_histogram!(POOL_WAIT_SECONDS, Unit::Seconds, help(POOL_WAIT_SECONDS));
    describe_histogram!(POOL_JOB_SECONDS, Unit::Seconds, help(POOL_JOB_SECONDS));
    describe_gauge!(
        POOL_OLDEST_JOB_SECONDS,
        Unit::Seconds,
        help(POOL_OLDEST_JOB_SECONDS)
    );
    describe_gauge!(POOL_DEMAND_AVG, Unit::Count, help(POOL_DEMAND_AVG));
    describe_counter!(
        ORPHANED_FAILURES_TOTAL,
        Unit::Count,
        help(ORPHANED_FAILURES_TOTAL)
    );
    describe_gauge!(KEYED_DEMAND_AVG, Unit::Count, help(KEYED_DEMAND_AVG));
    describe_counter!(
        KEYED_REJECTED_TOTAL,
        Unit::Count,
        help(KEYED_REJECTED_TOTAL)
    );
    describe_counter!(KEYED_EXPIRED_TOTAL, Unit::Count, help(KEYED_EXPIRED_TOTAL));
    describe_histogram!(
        OPERATION_DURATION_SECONDS,
        Unit::Seconds,
        help(OPERATION_DURATION_SECONDS)
    );
    describe_gauge!(
        OPERATIONS_IN_FLIGHT,
        Unit::Count,
        help(OPERATIONS_IN_FLIGHT)
    );
    describe_counter!(
        POOL_STUCK_JOBS_TOTAL,
        Unit::Count,
        help(POOL_STUCK_JOBS_TOTAL)
    );
    describe_counter!(REFRESH_RUNS_TOTAL, Unit::Count, help(REFRESH_RUNS_TOTAL));
    describe_counter!(REFRESH_HITS_TOTAL, Unit::Count, help(REFRESH_HITS_TOTAL));
    describe_counter!(REFRESH_JOINS_TOTAL, Unit::Count, help(REFRESH_JOINS_TOTAL));
    describe_counter!(
        REFRESH_EXPIRED_WAITS_TOTAL,
        Unit::Count,
        help(REFRESH_EXPIRED_WAITS_TOTAL)
    );
    describe_counter!(
        IGNORED_BUDGET_HEADERS_TOTAL,
        Unit::Count,
        help(IGNORED_BUDGET_HEADERS_TOTAL)
    );
    describe_counter!(
        RETRY_BUDGET_REFUSED_TOTAL,
        Unit::Count,
        help(RETRY_BUDGET_REFUSED_TOTAL)
    );
    describe_histogram!(LOOP_LAG_SECONDS, Unit::Seconds, help(LOOP_LAG_SECONDS));
    describe_counter!(
        LOOP_SLOW_POLLS_TOTAL,
        Unit::Count,
        help(LOOP_SLOW_POLLS_TOTAL)
    );
}

/// A count kept by loopguard itself (for `stats()`), mirrored into a metric.
///
/// The atomic is ours and always exact; the metric handle goes to the recorder, user code,
/// so every call into it is contained.
#[derive(Debug)]
pub(crate) struct Counted {
    value: AtomicU64,
    /// How much of `value` the recorder has heard of, for counts emitted in batches.
    emitted: AtomicU64,
    metric: Counter,
}

impl Counted {
    /// Wraps a registered handle and creates its series with a zero.
    pub(crate) fn new(metric: Counter) -> Counted {
        contain("the metrics recorder", || metric.increment(0));
        Counted {
            value: AtomicU64::new(0),
            emitted: AtomicU64::new(0),
            metric,
        }
    }

    /// Counts one, then tells the recorder.
    pub(crate) fn bump(&self) {
        self.count();
        self.emit();
    }

    /// Counts one in the atomic only; [`emit`](Counted::emit) tells the recorder later.
    pub(crate) fn count(&self) {
        self.value.fetch_add(1, Ordering::Relaxed);
    }

    /// Tells the recorder about one counted event.
    pub(crate) fn emit(&self) {
        self.emitted.fetch_add(1, Ordering::Relaxed);
        contain("the metrics recorder", || self.metric.increment(1));
    }

    /// Tells the recorder about every event counted with [`count`](Counted::count) and not
    /// emitted yet, in one call: for hot paths that only count.
    ///
    /// Flushes race (a worker at each job's end, the loop publishing gauges): the mark of
    /// what was emitted only moves forward (`fetch_max`), so a stale flush emits nothing
    /// and no event is emitted twice.
    pub(crate) fn flush(&self) {
        let counted = self.value.load(Ordering::Relaxed);
        // Nothing new (the common case on a hot path): no read-modify-write.
        if counted <= self.emitted.load(Ordering::Relaxed) {
            return;
        }
        let before = self.emitted.fetch_max(counted, Ordering::Relaxed);
        if counted > before {
            contain("the metrics recorder", || {
                self.metric.increment(counted - before)
            });
        }
    }

    pub(crate) fn get(&self) -> u64 {
        self.value.load(Ordering::Relaxed)
    }
}

/// Registers a handle with the recorder, containing a panicking recorder (the series is
/// then lost, nothing else).
pub(crate) fn register<H>(make: impl FnOnce() -> H, noop: fn() -> H) -> H {
    contain("the metrics recorder", make).unwrap_or_else(noop)
}

/// Sets a gauge, contained.
pub(crate) fn set(gauge: &impl SetGauge, value: f64) {
    gauge.set_to(value);
}

/// A gauge loopguard sets: a plain handle, or a [`Published`] one.
pub(crate) trait SetGauge {
    fn set_to(&self, value: f64);
}

impl SetGauge for Gauge {
    fn set_to(&self, value: f64) {
        contain("the metrics recorder", || self.set(value));
    }
}

/// A gauge read on the loop and set by `publish_metrics`, which also keeps the value it
/// set: registries that read rather than receive (the prometheus-client `Collector`)
/// encode what the loop published, not what a scrape running on a worker would see.
///
/// Publishes of one gauge are one at a time ([`OnePublisher`]): two that overlap never
/// leave the older reading last, in the recorder or in [`last`](Published::last).
#[derive(Debug)]
pub(crate) struct Published {
    gauge: Gauge,
    /// The last value set, as `f64` bits; 0.0 until the first set.
    last: AtomicU64,
    publisher: OnePublisher,
}

impl Published {
    pub(crate) fn new(gauge: Gauge) -> Published {
        Published {
            gauge,
            last: AtomicU64::new(0.0_f64.to_bits()),
            publisher: OnePublisher::new(),
        }
    }

    /// Reads the value with `read` and sets it, one round at a time: a call made while
    /// another is publishing this gauge returns at once, and that one reads and sets again
    /// for it (see [`OnePublisher`]). `read` runs in every round it is given.
    pub(crate) fn publish(&self, mut read: impl FnMut() -> f64) {
        self.publisher.publish(|| self.set_to(read()));
    }

    /// The value last published.
    #[cfg(feature = "prometheus-client")]
    pub(crate) fn last(&self) -> f64 {
        f64::from_bits(self.last.load(Ordering::Relaxed))
    }
}

/// A pool's read gauges as its `publish_metrics` last set them.
#[cfg(feature = "prometheus-client")]
#[derive(Debug, Clone, Copy)]
pub(crate) struct PublishedGauges {
    pub(crate) in_use: f64,
    pub(crate) waiting: f64,
    pub(crate) oldest_job_seconds: f64,
    pub(crate) demand_avg: f64,
}

impl SetGauge for Published {
    fn set_to(&self, value: f64) {
        // Ours first: the recorder is code loopguard does not own.
        self.last.store(value.to_bits(), Ordering::Relaxed);
        self.gauge.set_to(value);
    }
}

/// Records a duration in seconds, contained.
pub(crate) fn record(histogram: &Histogram, value: Duration) {
    contain("the metrics recorder", || histogram.record(value));
}

#[cfg(all(test, not(loopguard_loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Every series has its help text, so neither registry shows an empty `# HELP`.
    #[test]
    fn every_series_has_help() {
        for name in [
            POOL_CAPACITY,
            POOL_IN_USE,
            POOL_WAITING,
            POOL_JOBS_TOTAL,
            POOL_REJECTED_TOTAL,
            POOL_WAIT_SECONDS,
            POOL_JOB_SECONDS,
            POOL_OLDEST_JOB_SECONDS,
            POOL_DEMAND_AVG,
            ORPHANED_FAILURES_TOTAL,
            POOL_STUCK_JOBS_TOTAL,
            KEYED_DEMAND_AVG,
            KEYED_REJECTED_TOTAL,
            OPERATION_DURATION_SECONDS,
            OPERATIONS_IN_FLIGHT,
            REFRESH_RUNS_TOTAL,
            REFRESH_HITS_TOTAL,
            REFRESH_JOINS_TOTAL,
            REFRESH_EXPIRED_WAITS_TOTAL,
            IGNORED_BUDGET_HEADERS_TOTAL,
            RETRY_BUDGET_REFUSED_TOTAL,
            LOOP_LAG_SECONDS,
            LOOP_SLOW_POLLS_TOTAL,
        ] {
            assert!(!help(name).is_empty(), "{name} has no help");
        }
    }

    /// Racing flushes emit every counted event exactly once: with a mark that could move
    /// backwards (a `swap`), a stale flush let a later one emit the same events again.
    #[test]
    fn racing_flushes_emit_each_event_once() {
        for _trial in 0..200 {
            let total = Arc::new(AtomicU64::new(0));
            let counted = Arc::new(Counted::new(Counter::from_arc(total.clone())));
            let barrier = Arc::new(std::sync::Barrier::new(4));
            let threads: Vec<_> = (0..4)
                .map(|_| {
                    let (counted, barrier) = (counted.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        for i in 0..2_000 {
                            counted.count();
                            if i % 3 == 0 {
                                counted.flush();
                            }
                        }
                    })
                })
                .collect();
            for thread in threads {
                thread.join().unwrap();
            }
            counted.flush();
            assert_eq!(counted.get(), 8_000);
            assert_eq!(total.load(Ordering::Relaxed), 8_000, "emitted != counted");
        }
    }
}
