//! `LagStats`: what [`LoopLag::stats`](super::LoopLag::stats) reads.

use std::time::Duration;

/// The probe's lateness over the sliding window, and the slow polls counted so far: what
/// [`LoopLag::stats`](super::LoopLag::stats) returns.
///
/// Lateness is how long after its timer was due the probe was polled (Node's
/// `monitorEventLoopDelay` records the time between firings instead, the resolution
/// included: compare a Node figure less its resolution). The percentiles are nearest-rank
/// over the samples of the window; with no sample they are zero.
///
/// # Examples
///
/// ```
/// let lag = loopguard::lag::LoopLag::new("main")?;
/// let stats = lag.stats();
/// assert_eq!(stats.samples, 0, "no probe runs yet");
/// assert_eq!(stats.max, std::time::Duration::ZERO);
/// assert_eq!(stats.since_last_sample, None);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LagStats {
    /// The median lateness.
    pub p50: Duration,
    /// The 99th percentile.
    pub p99: Duration,
    /// The largest lateness: at least the longest stall of the window less one resolution
    /// (see the module's `# Precision`).
    pub max: Duration,
    /// Samples in the window.
    pub samples: u64,
    /// Slow polls of every instrumented task since the `LoopLag` was built (not only in the
    /// window).
    pub slow_polls: u64,
    /// Time since the newest sample (`None` before the first). While the loop is held no
    /// sample is taken: read from another thread, this grows through a stall that the
    /// percentiles show only once it has ended.
    pub since_last_sample: Option<Duration>,
}
