//! [`Limit`]: a named [`Gate`] with the accounting every admission path shares: demand,
//! the idle signal, refusals, the wait histogram, the gauges, and the `Retry-After` basis.
//!
//! A [`Pool`](crate::pool::Pool) admits its jobs through one, the tower layer its requests
//! (through its own, or through a pool's with `AdmissionLayer::for_pool`), so every
//! admission path emits the same metric families under its name: `capacity`, `in_use`,
//! `waiting`, `rejected_total`, `wait_seconds` and `demand_avg`, labelled `pool`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ::metrics::{Counter, Gauge, Histogram};

use super::wait::{Ended, SlotWait};
use super::{Gate, Refused};
use crate::demand::Demand;
use crate::emit::durations::Durations;
use crate::emit::{
    self, Counted, POOL_CAPACITY, POOL_DEMAND_AVG, POOL_IN_USE, POOL_REJECTED_TOTAL,
    POOL_WAIT_SECONDS, POOL_WAITING, Published,
};
use crate::signal::Signal;

/// A named gate and its accounting; see the [module docs](self).
#[derive(Debug)]
pub(crate) struct Limit {
    pub(crate) name: Arc<str>,
    pub(crate) gate: Gate,
    /// Holders + waiters over time: +1 on admission or on queueing, -1 when the slot is
    /// released or the wait ends without a slot.
    demand: Demand,
    /// Notified when the last slot is released, and when the last outcome whose slot went
    /// back is published.
    idle: Signal,
    /// Finished jobs whose slot is back but whose outcome is not takeable yet (a worker
    /// between its release and its publish): [`wait_idle`](Limit::wait_idle) waits for
    /// them too, so an idle pool has every outcome ready to be taken.
    publishing: AtomicUsize,
    /// Refusals, counted at once and emitted in batches ([`Counted::flush`]).
    pub(crate) rejected: Counted,
    /// How long a slot is held, on average: the `Retry-After` basis.
    pub(crate) hold: Average,
    in_use: Published,
    waiting: Published,
    demand_avg: Published,
    wait_seconds: Histogram,
    /// The limit's own record of its waits, for `PoolStats` and the prometheus-client
    /// collector.
    pub(crate) wait_time: Durations,
}

impl Limit {
    /// A limit of `capacity` slots named `name`, its series registered with the recorder
    /// (the gauges at their values, the counter at zero).
    pub(crate) fn new(name: Arc<str>, capacity: usize, demand: Demand) -> Limit {
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
            demand,
            idle: Signal::new(),
            publishing: AtomicUsize::new(0),
            rejected,
            hold: Average::default(),
            wait_seconds,
        }
    }

    /// Takes a free slot if nobody waits, counting it as demand; a refusal because the
    /// gate is saturated is counted as rejected when `count` says so (a caller that goes on
    /// to wait in line was not refused). Lock-free; allocates nothing.
    pub(crate) fn try_acquire(&self, count: bool) -> Result<(), Refused> {
        match self.gate.try_acquire() {
            Ok(()) => {
                self.demand.add(1);
                Ok(())
            }
            Err(Refused::Saturated) => {
                if count {
                    self.rejected.count();
                }
                Err(Refused::Saturated)
            }
            Err(Refused::Closed) => Err(Refused::Closed),
        }
    }

    /// Accounts for an admission that took the slot from the [`Gate`] directly, or through
    /// a [`SlotWait`]: `counted` says whether the caller was counted as demand already (in
    /// line, or by [`try_acquire`](Limit::try_acquire)). Call it before anything can
    /// release the slot.
    pub(crate) fn admitted(&self, counted: bool) {
        if !counted {
            self.demand.add(1);
        }
    }

    /// Records the wait of an admitted caller: in the limit's own record, then to the
    /// recorder (user code: call it last).
    #[cfg(feature = "tower")]
    pub(crate) fn record_wait(&self, waited: Duration) {
        self.wait_time.record(waited);
        self.emit_wait(waited);
    }

    /// Tells the recorder of a wait already in the limit's own record (user code).
    pub(crate) fn emit_wait(&self, waited: Duration) {
        emit::record(&self.wait_seconds, waited);
    }

    /// A caller joined the line.
    pub(crate) fn queued(&self) {
        self.demand.add(1);
    }

    /// A queued caller's wait ended as `ended` without admission (the gate closed): it is
    /// no longer demand, and a slot granted just before the close goes back. Returns
    /// whether the slot released was the last one held.
    pub(crate) fn wait_closed(&self, ended: Ended) -> bool {
        if ended == Ended::ClosedHolding {
            self.release() == 0
        } else {
            self.demand.add(-1);
            false
        }
    }

    /// A queued caller gives up (dropped, or its deadline passed). A slot granted to it in
    /// the meantime goes on. Returns whether the slot released was the last one held.
    pub(crate) fn abandon_wait(&self, wait: &mut SlotWait) -> bool {
        if wait.cancel(&self.gate) {
            self.release() == 0
        } else {
            self.demand.add(-1);
            false
        }
    }

    /// Gives a slot back (to the oldest waiter if there is one) and takes it off the
    /// demand. Returns the slots in use afterwards; at 0 the caller notifies
    /// [`idle`](Limit::notify_idle) once its own wake-ups are done.
    pub(crate) fn release(&self) -> usize {
        self.demand.add(-1);
        self.gate.release()
    }

    /// Wakes the tasks in [`wait_idle`](Limit::wait_idle).
    pub(crate) fn notify_idle(&self) {
        self.idle.notify_all();
    }

    /// A worker is about to give back the slot of a job whose outcome it publishes after.
    pub(crate) fn begin_publish(&self) {
        self.publishing.fetch_add(1, Ordering::AcqRel);
    }

    /// The outcome announced by [`begin_publish`](Limit::begin_publish) is takeable.
    /// Returns whether the limit is idle now: the caller then notifies
    /// [`idle`](Limit::notify_idle).
    pub(crate) fn end_publish(&self) -> bool {
        self.publishing.fetch_sub(1, Ordering::AcqRel) == 1 && self.gate.in_use() == 0
    }

    /// Resolves once no slot is held and every outcome whose slot went back is published.
    pub(crate) async fn wait_idle(&self) {
        self.idle
            .wait(|| self.gate.in_use() == 0 && self.publishing.load(Ordering::Acquire) == 0)
            .await
    }

    pub(crate) fn demand_at(&self, now: Instant) -> f64 {
        self.demand.average_at(now)
    }

    /// Publishes the gauges read on the caller's thread, and the refusals counted so far.
    pub(crate) fn publish(&self, now: Instant) {
        self.rejected.flush();
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

    /// The hint for a refused caller: how long a slot is held on average, at least 1 ms;
    /// 1 s before any slot came back.
    pub(crate) fn retry_after(&self) -> Duration {
        self.hold.get().map_or(Duration::from_secs(1), |avg| {
            avg.max(Duration::from_millis(1))
        })
    }
}

/// A moving average of durations (weight 1/8), lock-free; lost updates under contention
/// only make it a little older.
#[derive(Debug, Default)]
pub(crate) struct Average {
    nanos: AtomicU64,
}

impl Average {
    pub(crate) fn add(&self, sample: Duration) {
        let sample = u64::try_from(sample.as_nanos()).unwrap_or(u64::MAX).max(1);
        let avg = self.nanos.load(Ordering::Relaxed);
        let next = if avg == 0 {
            sample
        } else {
            avg - avg / 8 + sample / 8
        };
        self.nanos.store(next.max(1), Ordering::Relaxed);
    }

    /// The average, `None` before the first sample.
    pub(crate) fn get(&self) -> Option<Duration> {
        match self.nanos.load(Ordering::Relaxed) {
            0 => None,
            nanos => Some(Duration::from_nanos(nanos)),
        }
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

    #[test]
    fn the_average_starts_at_the_first_sample_and_moves_by_an_eighth() {
        let avg = Average::default();
        assert_eq!(avg.get(), None);
        avg.add(Duration::from_nanos(800));
        assert_eq!(avg.get(), Some(Duration::from_nanos(800)));
        avg.add(Duration::from_nanos(1600));
        assert_eq!(avg.get(), Some(Duration::from_nanos(900)));
    }
}
