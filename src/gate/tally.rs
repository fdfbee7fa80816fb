//! [`Tally`]: what every admission object counts the same way, whatever its queues: the
//! refusals (counted at once, told to the recorder in batches) and the `Retry-After` basis
//! (the moving mean of how long a slot is held). A [`Limit`](super::limit::Limit) keeps one
//! for its one gate, a [`KeyedGate`](crate::keyed::KeyedGate) one for all its keys' gates.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::emit::Counted;

/// Refusals and the `Retry-After` basis of one admission object; see the
/// [module docs](self).
#[derive(Debug)]
pub(crate) struct Tally {
    /// Refusals, counted at once and emitted in batches ([`Counted::flush`]).
    rejected: Counted,
    /// The `Retry-After` basis: fed only where a slot comes back.
    hold: Average,
}

impl Tally {
    /// A tally whose refusals go to `rejected` (its series created at zero).
    pub(crate) fn new(rejected: Counted) -> Tally {
        Tally {
            rejected,
            hold: Average::default(),
        }
    }

    /// Counts a refusal: one atomic add, nothing told to the recorder yet.
    #[inline]
    pub(crate) fn count_rejected(&self) {
        self.rejected.count();
    }

    /// Refusals counted so far (exact).
    pub(crate) fn rejected(&self) -> u64 {
        self.rejected.get()
    }

    /// Tells the recorder of the refusals counted since the last flush, in one update
    /// (user code: call it outside every lock).
    pub(crate) fn flush_rejected(&self) {
        self.rejected.flush();
    }

    /// A slot was held for `sample`: into the `Retry-After` basis.
    pub(crate) fn sample_hold(&self, sample: Duration) {
        self.hold.add(sample);
    }

    /// The mean of the basis, `None` before the first sample.
    pub(crate) fn mean_hold(&self) -> Option<Duration> {
        self.hold.get()
    }

    /// The hint for a refused caller: the mean of the basis, at least 1 ms; 1 s before any
    /// sample.
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

#[cfg(all(test, not(loopguard_loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_average_starts_at_the_first_sample_and_moves_by_an_eighth() {
        let avg = Average::default();
        assert_eq!(avg.get(), None);
        avg.add(Duration::from_nanos(800));
        assert_eq!(avg.get(), Some(Duration::from_nanos(800)));
        avg.add(Duration::from_nanos(1600));
        assert_eq!(avg.get(), Some(Duration::from_nanos(900)));
    }

    #[test]
    fn the_hint_is_one_second_before_a_sample_and_at_least_a_millisecond_after() {
        let tally = Tally::new(Counted::new(::metrics::Counter::noop()));
        assert_eq!(tally.retry_after(), Duration::from_secs(1));
        assert_eq!(tally.mean_hold(), None);
        tally.sample_hold(Duration::from_micros(10));
        assert_eq!(tally.mean_hold(), Some(Duration::from_micros(10)));
        assert_eq!(tally.retry_after(), Duration::from_millis(1));
        tally.count_rejected();
        tally.count_rejected();
        assert_eq!(tally.rejected(), 2);
    }
}
