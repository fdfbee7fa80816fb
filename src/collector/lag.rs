//! The `loop` families: a loop's lateness histogram and its tasks' slow polls.

use std::fmt;

use prometheus_client::encoding::DescriptorEncoder;

use super::encode::{counters, histograms};
use crate::emit::{LABEL_LOOP, LABEL_TASK, LOOP_LAG_SECONDS, LOOP_SLOW_POLLS_TOTAL};
use crate::lag::LoopLag;

/// Encodes the `loop` families of `lags`; nothing when there are none.
pub(super) fn encode(e: &mut DescriptorEncoder<'_>, lags: &[LoopLag]) -> fmt::Result {
    if lags.is_empty() {
        return Ok(());
    }
    let reads: Vec<_> = lags
        .iter()
        .map(|lag| (lag.name(), lag.durations(), lag.tasks()))
        .collect();
    histograms(e, LOOP_LAG_SECONDS, &reads, |(name, durations, _)| {
        ([(LABEL_LOOP, *name)], durations)
    })?;
    counters(e, LOOP_SLOW_POLLS_TOTAL, &reads, |(name, _, tasks)| {
        tasks
            .iter()
            .map(|(task, count)| ([(LABEL_LOOP, *name), (LABEL_TASK, &**task)], *count))
            .collect()
    })
}
