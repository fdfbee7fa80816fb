//! A `prometheus_client` collector over loopguard's own numbers (feature `prometheus-client`).

use std::fmt;

use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use std::sync::Arc;

use crate::pool::{DurationStats, Pool, PoolStats};
use crate::refresh::{Refresh, RefreshStats};

use super::{
    DURATION_BUCKETS, JOB_OUTCOMES, LABEL_CACHE, LABEL_OUTCOME, ORPHANED_FAILURES_TOTAL,
    POOL_CAPACITY, POOL_DEMAND_AVG, POOL_IN_USE, POOL_JOB_SECONDS, POOL_JOBS_TOTAL,
    POOL_OLDEST_JOB_SECONDS, POOL_REJECTED_TOTAL, POOL_STUCK_JOBS_TOTAL, POOL_WAIT_SECONDS,
    POOL_WAITING, REFRESH_EXPIRED_WAITS_TOTAL, REFRESH_HITS_TOTAL, REFRESH_JOINS_TOTAL,
    REFRESH_OUTCOMES, REFRESH_RUNS_TOTAL,
};

/// Publishes loopguard's series to a [`prometheus_client`] registry: the same families,
/// names, labels and types as the `metrics` facade (see [`crate::telemetry`]).
///
/// Register it once with
/// [`Registry::register_collector`](prometheus_client::registry::Registry::register_collector);
/// every encode of the registry then reads the pools and refresh caches it was given.
/// Keyed gates, shields and operations are not collected yet: their series
/// (`loopguard_keyed_*`, a shield's orphaned failures, `loopguard_operation*`) go through
/// the `metrics` facade only.
///
/// # Honest numbers
///
/// The gauges that are read rather than pushed (`loopguard_pool_in_use`,
/// `loopguard_pool_waiting`, `loopguard_pool_oldest_job_seconds`,
/// `loopguard_pool_demand_avg`) are the values the last
/// [`Pool::publish_metrics`] read, exactly as with the `metrics` facade: call it on the loop
/// before the scrape asks for its slot, and an encode that runs inside a job of the same
/// pool does not count itself (an idle pool reads `loopguard_pool_in_use 0`). Before the
/// first `publish_metrics` they read 0. Counters and histograms are read when the registry
/// is encoded. Histogram buckets are [`DURATION_BUCKETS`](super::DURATION_BUCKETS).
///
/// # Examples
///
/// ```
/// use prometheus_client::registry::Registry;
///
/// # futures_lite::future::block_on(async {
/// let pool = loopguard::pool::Pool::builder().name("render").workers(1).build()?;
/// let mut registry = Registry::default();
/// registry.register_collector(Box::new(loopguard::telemetry::Collector::new().pool(&pool)));
/// let registry = std::sync::Arc::new(registry);
///
/// // A scrape: publish on the loop, then encode on the pool.
/// pool.publish_metrics();
/// let shared = registry.clone();
/// let text = pool
///     .run(move || {
///         let mut out = String::new();
///         prometheus_client::encoding::text::encode(&mut out, &shared).unwrap();
///         out
///     })
///     .await
///     .unwrap();
/// assert!(text.contains("loopguard_pool_in_use{pool=\"render\"} 0.0\n"));
/// # Ok::<(), std::io::Error>(())
/// # }).unwrap();
/// ```
#[derive(Clone, Default)]
pub struct Collector {
    pools: Vec<Pool>,
    refreshes: Vec<Arc<dyn ReadRefresh>>,
}

/// One counter of a refresh cache's stats.
type ReadCount = fn(&RefreshStats) -> u64;

/// A refresh cache of any value and error type, as the collector reads it.
trait ReadRefresh: Send + Sync {
    fn name(&self) -> &str;
    fn stats(&self) -> RefreshStats;
}

impl<T: 'static, E: 'static> ReadRefresh for Refresh<T, E>
where
    Refresh<T, E>: Send + Sync,
{
    fn name(&self) -> &str {
        Refresh::name(self)
    }

    fn stats(&self) -> RefreshStats {
        Refresh::stats(self)
    }
}

impl Collector {
    /// A collector of nothing yet; add what it reads with [`pool`](Collector::pool).
    ///
    /// # Examples
    ///
    /// ```
    /// let collector = loopguard::telemetry::Collector::new();
    /// # drop(collector);
    /// ```
    pub fn new() -> Collector {
        Collector::default()
    }

    /// Adds `pool`'s series (label `pool` = its name). The collector holds a handle to the
    /// pool; give each pool once.
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = loopguard::pool::Pool::builder().build()?;
    /// let collector = loopguard::telemetry::Collector::new().pool(&pool);
    /// # drop(collector);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn pool(mut self, pool: &Pool) -> Collector {
        self.pools.push(pool.clone());
        self
    }

    /// Adds the series of the refresh cache `cache` (label `cache` = its name): its runs by
    /// outcome, hits, joins and expired waits, all counters, read when the registry is
    /// encoded.
    ///
    /// # Examples
    ///
    /// ```
    /// let pool = loopguard::pool::Pool::builder().build()?;
    /// let cache = loopguard::refresh::Refresh::builder("registry")
    ///     .on_pool(&pool, || Ok::<_, String>("up 1\n".to_string()));
    /// let collector = loopguard::telemetry::Collector::new().pool(&pool).refresh(&cache);
    /// # drop(collector);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn refresh<T: 'static, E: 'static>(mut self, cache: &Refresh<T, E>) -> Collector
    where
        Refresh<T, E>: Send + Sync,
    {
        self.refreshes.push(Arc::new(cache.clone()));
        self
    }
}

impl fmt::Debug for Collector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Collector")
            .field(
                "pools",
                &self.pools.iter().map(Pool::name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// One pool as an encode reads it: its name, its stats, and the gauges it last published.
struct Read {
    name: String,
    stats: PoolStats,
    published: super::PublishedGauges,
}

/// The label set of a pool's series.
fn pool_label(read: &Read) -> [(&'static str, &str); 1] {
    [("pool", read.name.as_str())]
}

/// A family of one gauge per pool. Names ending in `_seconds` are given as a stem and a
/// unit, which prometheus-client appends.
fn gauges(
    encoder: &mut DescriptorEncoder<'_>,
    name: &'static str,
    help: &str,
    reads: &[Read],
    value: impl Fn(&Read) -> f64,
) -> fmt::Result {
    let (name, unit) = split_unit(name);
    let mut family = encoder.encode_descriptor(name, help, unit, MetricType::Gauge)?;
    for read in reads {
        family
            .encode_family(&pool_label(read))?
            .encode_gauge(&value(read))?;
    }
    Ok(())
}

/// A family of one counter per pool. prometheus-client appends `_total` itself.
fn counters(
    encoder: &mut DescriptorEncoder<'_>,
    name: &'static str,
    help: &str,
    reads: &[Read],
    value: impl Fn(&Read) -> u64,
) -> fmt::Result {
    let name = name.strip_suffix("_total").unwrap_or(name);
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for read in reads {
        family
            .encode_family(&pool_label(read))?
            .encode_counter::<NoLabelSet, _, u64>(&value(read), None)?;
    }
    Ok(())
}

/// A family of one histogram per pool, in seconds, with [`DURATION_BUCKETS`].
fn histograms(
    encoder: &mut DescriptorEncoder<'_>,
    name: &'static str,
    help: &str,
    reads: &[Read],
    value: impl Fn(&Read) -> &DurationStats,
) -> fmt::Result {
    let (name, unit) = split_unit(name);
    let mut family = encoder.encode_descriptor(name, help, unit, MetricType::Histogram)?;
    for read in reads {
        let durations = value(read);
        // prometheus-client takes per-bucket counts and accumulates them itself; the
        // `+Inf` bucket is the total count.
        let mut buckets = Vec::with_capacity(DURATION_BUCKETS.len() + 1);
        let mut below = 0;
        for (&bound, &cumulative) in DURATION_BUCKETS.iter().zip(&durations.buckets) {
            buckets.push((bound, cumulative - below));
            below = cumulative;
        }
        buckets.push((f64::INFINITY, durations.count - below));
        family
            .encode_family(&pool_label(read))?
            .encode_histogram::<NoLabelSet>(
                durations.sum.as_secs_f64(),
                durations.count,
                &buckets,
                None,
            )?;
    }
    Ok(())
}

/// `loopguard_x_seconds` as prometheus-client wants it: `loopguard_x` and the unit.
fn split_unit(name: &'static str) -> (&'static str, Option<&'static Unit>) {
    match name.strip_suffix("_seconds") {
        Some(stem) => (stem, Some(&Unit::Seconds)),
        None => (name, None),
    }
}

impl prometheus_client::collector::Collector for Collector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        if !self.pools.is_empty() {
            self.encode_pools(&mut encoder)?;
        }
        if !self.refreshes.is_empty() {
            self.encode_refreshes(&mut encoder)?;
        }
        Ok(())
    }
}

impl Collector {
    fn encode_refreshes(&self, e: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let reads: Vec<(&str, RefreshStats)> = self
            .refreshes
            .iter()
            .map(|r| (r.name(), r.stats()))
            .collect();
        let mut family = e.encode_descriptor(
            REFRESH_RUNS_TOTAL
                .strip_suffix("_total")
                .unwrap_or(REFRESH_RUNS_TOTAL),
            "Collections run by a refresh cache, by outcome.",
            None,
            MetricType::Counter,
        )?;
        for (cache, stats) in &reads {
            for (outcome, count) in REFRESH_OUTCOMES
                .iter()
                .zip([stats.runs_ok, stats.runs_error])
            {
                family
                    .encode_family(&[(LABEL_CACHE, *cache), (LABEL_OUTCOME, outcome)])?
                    .encode_counter::<NoLabelSet, _, u64>(&count, None)?;
            }
        }
        let counters: [(&str, &str, ReadCount); 3] = [
            (
                REFRESH_HITS_TOTAL,
                "Calls answered from a refresh cache without waiting.",
                |s| s.hits,
            ),
            (
                REFRESH_JOINS_TOTAL,
                "Calls that joined a refresh collection already in flight.",
                |s| s.joins,
            ),
            (
                REFRESH_EXPIRED_WAITS_TOTAL,
                "Calls of a refresh cache whose deadline ended before a value was ready.",
                |s| s.expired_waits,
            ),
        ];
        for (name, help, value) in counters {
            let stem = name.strip_suffix("_total").unwrap_or(name);
            let mut family = e.encode_descriptor(stem, help, None, MetricType::Counter)?;
            for (cache, stats) in &reads {
                family
                    .encode_family(&[(LABEL_CACHE, *cache)])?
                    .encode_counter::<NoLabelSet, _, u64>(&value(stats), None)?;
            }
        }
        Ok(())
    }

    fn encode_pools(&self, encoder: &mut DescriptorEncoder<'_>) -> fmt::Result {
        let reads: Vec<Read> = self
            .pools
            .iter()
            .map(|pool| Read {
                name: pool.name().to_string(),
                stats: pool.stats(),
                published: pool.published(),
            })
            .collect();
        let e = encoder;
        gauges(
            e,
            POOL_CAPACITY,
            "Slots of the pool (its worker threads).",
            &reads,
            |r| r.stats.capacity as f64,
        )?;
        gauges(
            e,
            POOL_IN_USE,
            "Slots held, orphaned jobs included.",
            &reads,
            |r| r.published.in_use,
        )?;
        gauges(
            e,
            POOL_WAITING,
            "Callers waiting for a slot.",
            &reads,
            |r| r.published.waiting,
        )?;
        gauges(
            e,
            POOL_OLDEST_JOB_SECONDS,
            "Age of the oldest running job, 0 when idle.",
            &reads,
            |r| r.published.oldest_job_seconds,
        )?;
        gauges(
            e,
            POOL_DEMAND_AVG,
            "Time-weighted average of holders and waiters over the demand window.",
            &reads,
            |r| r.published.demand_avg,
        )?;

        // Two labels: written out rather than through `counters`.
        let mut family = e.encode_descriptor(
            POOL_JOBS_TOTAL
                .strip_suffix("_total")
                .unwrap_or(POOL_JOBS_TOTAL),
            "Finished jobs, by outcome.",
            None,
            MetricType::Counter,
        )?;
        for read in &reads {
            let counts = [
                read.stats.jobs_ok,
                read.stats.jobs_error,
                read.stats.jobs_panicked,
            ];
            for (outcome, count) in JOB_OUTCOMES.iter().zip(counts) {
                family
                    .encode_family(&[("pool", read.name.as_str()), (LABEL_OUTCOME, outcome)])?
                    .encode_counter::<NoLabelSet, _, u64>(&count, None)?;
            }
        }

        counters(
            e,
            POOL_REJECTED_TOTAL,
            "try_run calls refused because the pool was saturated.",
            &reads,
            |r| r.stats.rejected,
        )?;
        counters(
            e,
            ORPHANED_FAILURES_TOTAL,
            "Failures of orphaned jobs, handed to the orphan handler.",
            &reads,
            |r| r.stats.orphaned_failures,
        )?;
        counters(
            e,
            POOL_STUCK_JOBS_TOTAL,
            "Jobs reported as stuck.",
            &reads,
            |r| r.stats.stuck_jobs,
        )?;
        histograms(
            e,
            POOL_WAIT_SECONDS,
            "Time from submission to admission.",
            &reads,
            |r| &r.stats.wait_time,
        )?;
        histograms(
            e,
            POOL_JOB_SECONDS,
            "Time a job ran on its worker thread.",
            &reads,
            |r| &r.stats.job_time,
        )
    }
}
