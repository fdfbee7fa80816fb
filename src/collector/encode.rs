//! Writing one family to a prometheus-client encoder, with the facade's help text: gauges, counters and histograms over
//! any list of sources, each with its own label set. prometheus-client appends `_total` to
//! a counter's name and the unit to a name given with one, so loopguard's names are split
//! here.

use std::fmt;

use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use crate::emit::durations::DurationStats;
use crate::emit::{DURATION_BUCKETS, help};

/// `loopguard_x_seconds` as prometheus-client wants it: `loopguard_x` and the unit.
fn split_unit(name: &'static str) -> (&'static str, Option<&'static Unit>) {
    match name.strip_suffix("_seconds") {
        Some(stem) => (stem, Some(&Unit::Seconds)),
        None => (name, None),
    }
}

/// A family of one gauge per source.
pub(super) fn gauges<'a, S, L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &'static str,
    sources: &'a [S],
    series: impl Fn(&'a S) -> (L, f64),
) -> fmt::Result {
    let (stem, unit) = split_unit(name);
    let mut family = encoder.encode_descriptor(stem, help(name), unit, MetricType::Gauge)?;
    for source in sources {
        let (labels, value) = series(source);
        family.encode_family(&labels)?.encode_gauge(&value)?;
    }
    Ok(())
}

/// A family of counters, any number per source.
pub(super) fn counters<'a, S, L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &'static str,
    sources: &'a [S],
    series: impl Fn(&'a S) -> Vec<(L, u64)>,
) -> fmt::Result {
    let stem = name.strip_suffix("_total").unwrap_or(name);
    let mut family = encoder.encode_descriptor(stem, help(name), None, MetricType::Counter)?;
    for source in sources {
        for (labels, value) in series(source) {
            family
                .encode_family(&labels)?
                .encode_counter::<NoLabelSet, _, u64>(&value, None)?;
        }
    }
    Ok(())
}

/// A family of one histogram per source, in seconds, with [`DURATION_BUCKETS`].
pub(super) fn histograms<'a, S, L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder<'_>,
    name: &'static str,
    sources: &'a [S],
    series: impl Fn(&'a S) -> (L, &'a DurationStats),
) -> fmt::Result {
    let (stem, unit) = split_unit(name);
    let mut family = encoder.encode_descriptor(stem, help(name), unit, MetricType::Histogram)?;
    for source in sources {
        let (labels, durations) = series(source);
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
            .encode_family(&labels)?
            .encode_histogram::<NoLabelSet>(
                durations.sum.as_secs_f64(),
                durations.count,
                &buckets,
                None,
            )?;
    }
    Ok(())
}
