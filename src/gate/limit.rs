//! [`Limit`]: a named [`Gate`] with the accounting every admission path shares: demand,
//! the idle signal, refusals, the wait histogram, the gauges, and the `Retry-After` basis.
//!
//! A [`Pool`](crate::pool::Pool) admits its jobs through one, the tower layer its requests
//! (through its own, or through a pool's with `AdmissionLayer::for_pool`), so every
//! admission path emits the same metric families under its name: `capacity`, `in_use`,
//! `waiting`, `rejected_total`, `wait_seconds` and `demand_avg`, labelled `pool`.
//!
//! A slot leaves a limit only as an owned [`Permit`](super::permit::Permit) ([`Limit::try_acquire`](Limit::try_acquire), or the one
//! acquire future [`Acquire`](super::permit::Acquire)), and comes back only through that
//! permit's `Drop`: it samples the `Retry-After` basis (per the limit's [`Basis`]), gives
//! the slot back (to the oldest waiter first) and notifies idleness. The fields are private
//! to `gate/`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use ::metrics::{Counter, Gauge, Histogram};

use super::Gate;
use super::tally::Tally;
use crate::demand::Demand;
use crate::emit::durations::{DurationStats, Durations};
use crate::emit::{
    self, Counted, POOL_CAPACITY, POOL_DEMAND_AVG, POOL_IN_USE, POOL_REJECTED_TOTAL,
    POOL_WAIT_SECONDS, POOL_WAITING, Published,
};
use crate::signal::Signal;

/// What a limit's `Retry-After` basis (its mean hold) averages, kept by the limit alone:
/// the [`Permit`](super::permit::Permit)'s `Drop` samples it, nothing else does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Basis {
    /// How long each permit was held, from its grant to its `Drop`: a tower layer's own
    /// limit, whose permit is a request's.
    Holds,
    /// How long the jobs run on a permit took ([`Permit::job_ran`](super::permit::Permit::job_ran)): a pool's limit. A
    /// request admitted on a pool's slots (`AdmissionLayer::for_pool`) holds its permit for
    /// longer than its job (the handler, the response body), and that longer hold is not
    /// the pace at which the pool frees slots for its jobs; a request that ran no job on its
    /// permit adds nothing.
    Jobs,
}

/// Told when the last permit of a closed limit is released (a pool's workers then exit).
pub(crate) trait OnClosedIdle: Send + Sync {
    /// The limit is closed and no permit is held any more. Runs no user code.
    fn closed_idle(&self);
}

/// A named gate and its accounting; see the [module docs](self).
#[derive(Debug)]
pub(crate) struct Limit {
    name: Arc<str>,
    pub(super) gate: Gate,
    basis: Basis,
    /// Holders + waiters over time: +1 on admission or on queueing, -1 when the permit is
    /// released or the wait ends without one.
    demand: Demand,
    /// Notified when the last permit is released, and when the last outcome whose permit
    /// went back is published.
    idle: Signal,
    /// Told first when the last permit of a closed limit goes back.
    closed_idle: OnceLock<Weak<dyn OnClosedIdle>>,
    /// Finished jobs whose permit is back but whose outcome is not takeable yet (a worker
    /// between its release and its publish): [`wait_idle`](Limit::wait_idle) waits for
    /// them too, so an idle pool has every outcome ready to be taken.
    publishing: AtomicUsize,
    /// Refusals (counted at once, emitted in batches) and the `Retry-After` basis, per
    /// [`Basis`]: the basis is fed by [`Permit`](super::permit::Permit)'s `Drop` only.
    tally: Tally,
    /// Whether a tower layer admits requests on this limit's permits and lends them to
    /// jobs (`AdmissionLayer::for_pool`): only then can a caller's request hold one, and a
    /// refusal looks at the thread's mark.
    #[cfg(feature = "tower")]
    lent_to_requests: std::sync::atomic::AtomicBool,
    in_use: Published,
    waiting: Published,
    demand_avg: Published,
    wait_seconds: Histogram,
    /// The limit's own record of its waits, for `PoolStats` and the prometheus-client
    /// collector.
    wait_time: Durations,
}

impl Limit {
    /// A limit of `capacity` slots named `name` whose `Retry-After` basis is `basis`, its
    /// series registered with the recorder (the gauges at their values, the counter at
    /// zero).
    pub(crate) fn new(name: Arc<str>, capacity: usize, demand: Demand, basis: Basis) -> Limit {
        let label = || name.to_string();
        let gauge = |metric: &'static str| {
            let gauge = emit::register(
                || ::metrics::gauge!(metric, emit::LABEL_POOL => label()),
                Gauge::noop,
            );
            emit::set(&gauge, 0.0);
            gauge
        };
        emit::set(&gauge(POOL_CAPACITY), capacity as f64);
        let rejected = Counted::new(emit::register(
            || ::metrics::counter!(POOL_REJECTED_TOTAL, emit::LABEL_POOL => label()),
            Counter::noop,
        ));
        let wait_seconds = emit::register(
            || ::metrics::histogram!(POOL_WAIT_SECONDS, emit::LABEL_POOL => label()),
            Histogram::noop,
        );
        Limit {
            in_use: Published::new(gauge(POOL_IN_USE)),
            waiting: Published::new(gauge(POOL_WAITING)),
            demand_avg: Published::new(gauge(POOL_DEMAND_AVG)),
            wait_time: Durations::default(),
            name,
            gate: Gate::new(capacity),
            basis,
            demand,
            idle: Signal::new(),
            closed_idle: OnceLock::new(),
            publishing: AtomicUsize::new(0),
            tally: Tally::new(rejected),
            #[cfg(feature = "tower")]
            lent_to_requests: std::sync::atomic::AtomicBool::new(false),
            wait_seconds,
        }
    }

    /// Who is told, before the idle waiters, that the last permit of this closed limit
    /// went back (a pool's workers). Set once; later calls change nothing.
    pub(crate) fn on_closed_idle(&self, hook: Weak<dyn OnClosedIdle>) {
        let _ = self.closed_idle.set(hook);
    }

    pub(crate) fn name(&self) -> &Arc<str> {
        &self.name
    }

    pub(crate) fn capacity(&self) -> usize {
        self.gate.capacity()
    }

    pub(crate) fn in_use(&self) -> usize {
        self.gate.in_use()
    }

    pub(crate) fn waiting(&self) -> usize {
        self.gate.waiting()
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.gate.is_closed()
    }

    pub(crate) fn basis(&self) -> Basis {
        self.basis
    }

    /// Counts a refusal (emitted in batches).
    #[inline]
    pub(crate) fn count_rejected(&self) {
        self.tally.count_rejected();
    }

    /// Refusals counted so far.
    pub(crate) fn rejected(&self) -> u64 {
        self.tally.rejected()
    }

    /// Emits the refusals counted since the last flush.
    pub(crate) fn flush_rejected(&self) {
        self.tally.flush_rejected();
    }

    /// The limit's own record of its waits.
    pub(crate) fn wait_time(&self) -> DurationStats {
        self.wait_time.snapshot()
    }

    /// Records the wait of an admitted caller in the limit's own record: before the
    /// admission can be seen, so `stats()` counts it. The recorder hears of it through
    /// [`emit_wait`](Limit::emit_wait), once the caller's state is settled.
    pub(crate) fn note_wait(&self, waited: Duration) {
        self.wait_time.record(waited);
    }

    /// Records the wait of an admitted caller: in the limit's own record, then to the
    /// recorder (user code: call it last).
    #[cfg(feature = "tower")]
    pub(crate) fn record_wait(&self, waited: Duration) {
        self.note_wait(waited);
        self.emit_wait(waited);
    }

    /// Tells the recorder of a wait already in the limit's own record (user code).
    pub(crate) fn emit_wait(&self, waited: Duration) {
        emit::record(&self.wait_seconds, waited);
    }

    /// A caller joined the line, or was admitted without being counted yet.
    pub(super) fn add_demand(&self, delta: isize) {
        self.demand.add(delta);
    }

    /// The one release, from [`Permit`](super::permit::Permit)'s `Drop`: samples the basis (`sample`, if the
    /// permit has one), takes the permit off the demand, gives the slot back (to the oldest
    /// waiter if there is one, waking it), and at the last slot notifies idleness.
    pub(super) fn release(&self, sample: Option<Duration>) {
        if let Some(sample) = sample {
            self.tally.sample_hold(sample);
        }
        self.demand.add(-1);
        if self.gate.release() == 0 {
            self.idle_now();
        }
    }

    /// No permit is held: the hook of a closed limit first (ours: a pool's workers), then
    /// the tasks in [`wait_idle`](Limit::wait_idle) (their wakers are user code).
    fn idle_now(&self) {
        if self.gate.is_closed() {
            if let Some(hook) = self.closed_idle.get().and_then(Weak::upgrade) {
                hook.closed_idle();
            }
        }
        self.idle.notify_all();
    }

    /// Stops admission: every queued waiter is told, a slot granted to a waiter that has
    /// not claimed it is taken back. Returns whether this call closed the limit; if none
    /// is held any more, idleness is notified.
    pub(crate) fn close(&self) -> bool {
        let closed = self.gate.close();
        if closed && self.gate.in_use() == 0 {
            self.idle_now();
        }
        closed
    }

    /// A worker is about to drop the permit of a job whose outcome it publishes after.
    pub(crate) fn begin_publish(&self) {
        self.publishing.fetch_add(1, Ordering::AcqRel);
    }

    /// Publishes in progress (a test's check that none stayed counted).
    #[cfg(test)]
    pub(crate) fn publishing(&self) -> usize {
        self.publishing.load(Ordering::Acquire)
    }

    /// The outcome announced by [`begin_publish`](Limit::begin_publish) is takeable: if
    /// that was the last one and no permit is held, idleness is notified.
    pub(crate) fn end_publish(&self) {
        if self.publishing.fetch_sub(1, Ordering::AcqRel) == 1 && self.gate.in_use() == 0 {
            self.idle_now();
        }
    }

    /// Resolves once no slot is held and every outcome whose slot went back is published.
    pub(crate) async fn wait_idle(&self) {
        self.idle
            .wait(|| self.gate.in_use() == 0 && self.publishing.load(Ordering::Acquire) == 0)
            .await
    }

    /// Holders and waiters counted as demand now (the models check none is left over).
    #[cfg(all(test, loopguard_loom))]
    pub(crate) fn demand_level(&self) -> usize {
        self.demand.level()
    }

    pub(crate) fn demand_at(&self, now: Instant) -> f64 {
        self.demand.average_at(now)
    }

    /// A tower layer admits requests on this limit and lends their permits to jobs.
    #[cfg(feature = "tower")]
    pub(crate) fn mark_lent_to_requests(&self) {
        self.lent_to_requests.store(true, Ordering::Relaxed);
    }

    /// Whether a tower layer admits requests on this limit (one relaxed load).
    #[cfg(feature = "tower")]
    #[inline]
    pub(crate) fn is_lent_to_requests(&self) -> bool {
        self.lent_to_requests.load(Ordering::Relaxed)
    }

    /// Publishes the gauges read on the caller's thread, and the refusals counted so far.
    pub(crate) fn publish(&self, now: Instant) {
        self.tally.flush_rejected();
        // One publisher at a time per gauge: overlapping publishes never leave an older
        // reading last.
        self.in_use.publish(|| self.gate.in_use() as f64);
        self.waiting.publish(|| self.gate.waiting() as f64);
        let mut at = emit::round_clock(now);
        self.demand_avg.publish(|| self.demand_at(at()));
    }

    /// The gauges as the last [`publish`](Limit::publish) set them: in use, waiting, demand.
    #[cfg(feature = "prometheus-client")]
    pub(crate) fn published(&self) -> (f64, f64, f64) {
        (
            self.in_use.last(),
            self.waiting.last(),
            self.demand_avg.last(),
        )
    }

    /// The mean of the basis (see [`Basis`]), `None` before the first sample: a pool's
    /// `mean_job_time`, the `h` of an early refusal's estimate.
    pub(crate) fn mean_hold(&self) -> Option<Duration> {
        self.tally.mean_hold()
    }

    /// The hint for a refused caller: the mean of the basis, at least 1 ms; 1 s before any
    /// sample.
    pub(crate) fn retry_after(&self) -> Duration {
        self.tally.retry_after()
    }
}

/// Whole seconds, rounded up, at least 1: what `Retry-After` carries.
pub(crate) fn whole_secs(hint: Duration) -> u64 {
    let secs = hint.as_secs();
    let secs = if hint.subsec_nanos() > 0 {
        secs.saturating_add(1)
    } else {
        secs
    };
    secs.max(1)
}

#[cfg(all(test, not(loopguard_loom)))]
mod tests {
    use super::*;

    #[test]
    fn hints_round_up_to_whole_seconds() {
        let ms = Duration::from_millis;
        assert_eq!(whole_secs(ms(0)), 1);
        assert_eq!(whole_secs(ms(1)), 1);
        assert_eq!(whole_secs(ms(1000)), 1);
        assert_eq!(whole_secs(ms(1001)), 2);
        assert_eq!(whole_secs(Duration::MAX), u64::MAX);
    }
}
