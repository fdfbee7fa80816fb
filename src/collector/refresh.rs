//! The `refresh` families: a cache's runs by outcome, hits, joins and expired waits.

use std::fmt;
use std::sync::Arc;

use prometheus_client::encoding::DescriptorEncoder;

use super::encode::counters;
use crate::emit::{
    LABEL_CACHE, LABEL_OUTCOME, REFRESH_EXPIRED_WAITS_TOTAL, REFRESH_HITS_TOTAL,
    REFRESH_JOINS_TOTAL, REFRESH_OUTCOMES, REFRESH_RUNS_TOTAL,
};
use crate::refresh::{Refresh, RefreshStats};

/// A refresh cache of any value and error type, as the collector reads it.
pub(super) trait ReadRefresh: Send + Sync {
    fn name(&self) -> &str;
    fn stats(&self) -> RefreshStats;
    /// Whether `self` is the cache `other` (a clone of it included).
    fn same(&self, other: &dyn ReadRefresh) -> bool {
        std::ptr::addr_eq(self.identity(), other.identity())
    }
    /// The address of the state a cache's clones share.
    fn identity(&self) -> *const ();
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

    fn identity(&self) -> *const () {
        Refresh::identity(self)
    }
}

fn label(name: &str) -> [(&'static str, &str); 1] {
    [(LABEL_CACHE, name)]
}

/// Encodes the `refresh` families of `caches`; nothing when there are none.
pub(super) fn encode(
    e: &mut DescriptorEncoder<'_>,
    caches: &[Arc<dyn ReadRefresh>],
) -> fmt::Result {
    if caches.is_empty() {
        return Ok(());
    }
    let reads: Vec<(&str, RefreshStats)> = caches.iter().map(|c| (c.name(), c.stats())).collect();
    counters(e, REFRESH_RUNS_TOTAL, &reads, |(cache, stats)| {
        REFRESH_OUTCOMES
            .iter()
            .zip([stats.runs_ok, stats.runs_error])
            .map(|(outcome, count)| ([(LABEL_CACHE, *cache), (LABEL_OUTCOME, outcome)], count))
            .collect()
    })?;
    counters(e, REFRESH_HITS_TOTAL, &reads, |(cache, stats)| {
        vec![(label(cache), stats.hits)]
    })?;
    counters(e, REFRESH_JOINS_TOTAL, &reads, |(cache, stats)| {
        vec![(label(cache), stats.joins)]
    })?;
    counters(e, REFRESH_EXPIRED_WAITS_TOTAL, &reads, |(cache, stats)| {
        vec![(label(cache), stats.expired_waits)]
    })
}
