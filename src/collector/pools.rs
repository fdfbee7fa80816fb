//! The `pool` families: the admission series every [`Limit`] has (a pool's, or a tower
//! layer's own), and the job series only a pool has.

use std::fmt;
#[cfg(feature = "tower")]
use std::sync::Arc;

use prometheus_client::encoding::DescriptorEncoder;

use super::encode::{counters, gauges, histograms};
use crate::emit::durations::DurationStats;
use crate::emit::{
    JOB_OUTCOMES, LABEL_OUTCOME, ORPHANED_FAILURES_TOTAL, POOL_CAPACITY, POOL_DEMAND_AVG,
    POOL_IN_USE, POOL_JOB_SECONDS, POOL_JOBS_TOTAL, POOL_OLDEST_JOB_SECONDS, POOL_REJECTED_TOTAL,
    POOL_STUCK_JOBS_TOTAL, POOL_WAIT_SECONDS, POOL_WAITING,
};
#[cfg(feature = "tower")]
use crate::gate::limit::Limit;
use crate::pool::{Pool, PoolStats};

/// The label of a pool's series (a layer's own limit is labelled the same way).
use crate::emit::LABEL_POOL;

/// What admits under a `pool` label: a pool, or a tower layer's own limit.
#[derive(Clone)]
pub(super) enum Admits {
    Pool(Pool),
    /// (feature `tower`) A layer's own limit.
    #[cfg(feature = "tower")]
    Limit(Arc<Limit>),
}

impl Admits {
    /// Whether `self` and `other` are the same pool or limit (clones included).
    pub(super) fn same(&self, other: &Admits) -> bool {
        match (self, other) {
            (Admits::Pool(a), Admits::Pool(b)) => a.same_pool(b),
            #[cfg(feature = "tower")]
            (Admits::Limit(a), Admits::Limit(b)) => Arc::ptr_eq(a, b),
            #[cfg(feature = "tower")]
            _ => false,
        }
    }

    pub(super) fn name(&self) -> &str {
        match self {
            Admits::Pool(pool) => pool.name(),
            #[cfg(feature = "tower")]
            Admits::Limit(limit) => limit.name(),
        }
    }
}

/// One source's admission series as an encode reads them.
struct Admission {
    name: String,
    capacity: usize,
    /// In use, waiting, demand: as the last `publish_metrics` set them.
    published: (f64, f64, f64),
    rejected: u64,
    wait_time: DurationStats,
}

/// One pool's job series as an encode reads them.
struct Jobs {
    name: String,
    stats: PoolStats,
    oldest_job_seconds: f64,
}

fn label(name: &str) -> [(&'static str, &str); 1] {
    [(LABEL_POOL, name)]
}

/// Encodes the `pool` families of `sources`; nothing when there are none.
pub(super) fn encode(e: &mut DescriptorEncoder<'_>, sources: &[Admits]) -> fmt::Result {
    if sources.is_empty() {
        return Ok(());
    }
    let mut admission = Vec::with_capacity(sources.len());
    let mut jobs = Vec::new();
    for source in sources {
        match source {
            Admits::Pool(pool) => {
                let stats = pool.stats();
                let published = pool.published();
                admission.push(Admission {
                    name: pool.name().to_string(),
                    capacity: stats.capacity,
                    published: (published.in_use, published.waiting, published.demand_avg),
                    rejected: stats.rejected,
                    wait_time: stats.wait_time.clone(),
                });
                jobs.push(Jobs {
                    name: pool.name().to_string(),
                    stats,
                    oldest_job_seconds: published.oldest_job_seconds,
                });
            }
            #[cfg(feature = "tower")]
            Admits::Limit(limit) => admission.push(Admission {
                name: limit.name().to_string(),
                capacity: limit.capacity(),
                published: limit.published(),
                rejected: limit.rejected(),
                wait_time: limit.wait_time(),
            }),
        }
    }
    encode_admission(e, &admission)?;
    encode_jobs(e, &jobs)
}

fn encode_admission(e: &mut DescriptorEncoder<'_>, reads: &[Admission]) -> fmt::Result {
    gauges(e, POOL_CAPACITY, reads, |r| {
        (label(&r.name), r.capacity as f64)
    })?;
    gauges(e, POOL_IN_USE, reads, |r| (label(&r.name), r.published.0))?;
    gauges(e, POOL_WAITING, reads, |r| (label(&r.name), r.published.1))?;
    gauges(e, POOL_DEMAND_AVG, reads, |r| {
        (label(&r.name), r.published.2)
    })?;
    counters(e, POOL_REJECTED_TOTAL, reads, |r| {
        vec![(label(&r.name), r.rejected)]
    })?;
    histograms(e, POOL_WAIT_SECONDS, reads, |r| {
        (label(&r.name), &r.wait_time)
    })
}

fn encode_jobs(e: &mut DescriptorEncoder<'_>, reads: &[Jobs]) -> fmt::Result {
    if reads.is_empty() {
        return Ok(());
    }
    gauges(e, POOL_OLDEST_JOB_SECONDS, reads, |r| {
        (label(&r.name), r.oldest_job_seconds)
    })?;
    counters(e, POOL_JOBS_TOTAL, reads, |r| {
        let counts = [r.stats.jobs_ok, r.stats.jobs_error, r.stats.jobs_panicked];
        JOB_OUTCOMES
            .iter()
            .zip(counts)
            .map(|(outcome, count)| {
                (
                    [(LABEL_POOL, r.name.as_str()), (LABEL_OUTCOME, outcome)],
                    count,
                )
            })
            .collect()
    })?;
    counters(e, ORPHANED_FAILURES_TOTAL, reads, |r| {
        vec![(label(&r.name), r.stats.orphaned_failures)]
    })?;
    counters(e, POOL_STUCK_JOBS_TOTAL, reads, |r| {
        vec![(label(&r.name), r.stats.stuck_jobs)]
    })?;
    histograms(e, POOL_JOB_SECONDS, reads, |r| {
        (label(&r.name), &r.stats.job_time)
    })
}
