//! A duration histogram loopguard keeps itself (for `PoolStats` and the prometheus-client
//! collector), beside the one it emits through the `metrics` facade.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::DURATION_BUCKETS;

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
