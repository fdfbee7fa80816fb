//! `LoopLagBuilder`: the configuration of a [`LoopLag`](super::LoopLag) and its validation.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the probe wakes by default: 10 ms, as Node's `monitorEventLoopDelay`.
pub(super) const DEFAULT_RESOLUTION: Duration = Duration::from_millis(10);
/// A poll longer than this is slow by default.
pub(super) const DEFAULT_SLOW_POLL: Duration = Duration::from_millis(50);
/// How far back [`stats`](super::LoopLag::stats) looks by default.
pub(super) const DEFAULT_WINDOW: Duration = Duration::from_secs(60);
/// The shortest time between two log lines about one task's slow polls, by default.
pub(super) const DEFAULT_REPORT_INTERVAL: Duration = Duration::from_secs(10);
/// The longest resolution: a probe that wakes less often than hourly measures nothing
/// useful, and the bound keeps every timer's instant representable.
const MAX_RESOLUTION: Duration = Duration::from_secs(3600);
/// The most samples a window may have to hold (the window over the resolution): 16 bytes
/// each, allocated once when the `LoopLag` is built.
pub(super) const MAX_SAMPLES: u128 = 100_000;

/// Configures a [`LoopLag`](super::LoopLag). Created by
/// [`LoopLag::builder`](super::LoopLag::builder).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use loopguard::lag::LoopLag;
///
/// let lag = LoopLag::builder("main")
///     .resolution(Duration::from_millis(20))
///     .slow_poll_threshold(Duration::from_millis(100))
///     .window(Duration::from_secs(30))
///     .build()?;
/// assert_eq!(lag.resolution(), Duration::from_millis(20));
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct LoopLagBuilder {
    name: String,
    resolution: Duration,
    slow_poll: Duration,
    window: Duration,
    report_interval: Duration,
}

/// A validated configuration, shared by the probe, the instrumented futures and the stats.
#[derive(Debug)]
pub(super) struct Config {
    pub(super) name: Arc<str>,
    pub(super) resolution: Duration,
    pub(super) slow_poll: Duration,
    pub(super) window: Duration,
    pub(super) report_interval: Duration,
    /// Samples and reports are stamped in nanoseconds since this instant.
    pub(super) epoch: Instant,
    /// How many samples the window can hold: one per resolution, plus one.
    pub(super) capacity: usize,
}

impl Config {
    /// `at` in nanoseconds since the epoch (0 before it, saturating after 584 years).
    pub(super) fn stamp(&self, at: Instant) -> u64 {
        nanos(at.saturating_duration_since(self.epoch))
    }
}

/// `d` in nanoseconds, saturating.
pub(super) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl LoopLagBuilder {
    pub(super) fn new(name: &str) -> LoopLagBuilder {
        LoopLagBuilder {
            name: name.to_string(),
            resolution: DEFAULT_RESOLUTION,
            slow_poll: DEFAULT_SLOW_POLL,
            window: DEFAULT_WINDOW,
            report_interval: DEFAULT_REPORT_INTERVAL,
        }
    }

    /// How long the probe sleeps between two samples (default 10 ms, as Node). A shorter
    /// resolution sees shorter stalls and costs one timer more per tick (see the module's
    /// `# Precision`). At most one hour.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let lag = loopguard::lag::LoopLag::builder("main")
    ///     .resolution(Duration::from_millis(1))
    ///     .window(Duration::from_secs(10))
    ///     .build()?;
    /// assert_eq!(lag.resolution(), Duration::from_millis(1));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn resolution(mut self, resolution: Duration) -> LoopLagBuilder {
        self.resolution = resolution;
        self
    }

    /// A poll of an [`instrument`](super::LoopLag::instrument)ed future that takes longer
    /// than this is counted and logged (default 50 ms).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let lag = loopguard::lag::LoopLag::builder("main")
    ///     .slow_poll_threshold(Duration::from_millis(100))
    ///     .build()?;
    /// assert_eq!(lag.slow_poll_threshold(), Duration::from_millis(100));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn slow_poll_threshold(mut self, threshold: Duration) -> LoopLagBuilder {
        self.slow_poll = threshold;
        self
    }

    /// How far back [`stats`](super::LoopLag::stats) looks (default 60 s). The samples are
    /// kept in a buffer allocated once, one entry per resolution of the window (16 bytes
    /// each, about 94 KiB with the defaults): at least one resolution, and at most 100 000
    /// resolutions.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let lag = loopguard::lag::LoopLag::builder("main").window(Duration::from_secs(15)).build()?;
    /// assert_eq!(lag.window(), Duration::from_secs(15));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn window(mut self, window: Duration) -> LoopLagBuilder {
        self.window = window;
        self
    }

    /// The shortest time between two log lines about one task's slow polls (default 10 s).
    /// Every slow poll is counted; the first one of a task is logged at once, and the next
    /// line, once this much time has passed, says how many were left out and the longest of
    /// them. [`Duration::ZERO`] logs every slow poll; [`Duration::MAX`] only each task's first.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let lag = loopguard::lag::LoopLag::builder("main")
    ///     .report_interval(Duration::from_secs(60))
    ///     .build()?;
    /// # drop(lag);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn report_interval(mut self, interval: Duration) -> LoopLagBuilder {
        self.report_interval = interval;
        self
    }

    /// Checks the configuration.
    pub(super) fn validated(self) -> io::Result<Config> {
        crate::name::check("a loop lag", &self.name)?;
        if self.resolution.is_zero() || self.resolution > MAX_RESOLUTION {
            return Err(invalid(format!(
                "a loop lag's resolution must be positive and at most {MAX_RESOLUTION:?}, not {:?}",
                self.resolution
            )));
        }
        if self.slow_poll.is_zero() {
            return Err(invalid(
                "a loop lag's slow-poll threshold must be positive".to_string(),
            ));
        }
        let per_window = self.window.as_nanos() / self.resolution.as_nanos();
        if per_window == 0 || per_window > MAX_SAMPLES {
            return Err(invalid(format!(
                "a loop lag's window must hold between 1 and {MAX_SAMPLES} resolutions, not \
                 {:?} at a resolution of {:?}",
                self.window, self.resolution
            )));
        }
        Ok(Config {
            name: self.name.into(),
            resolution: self.resolution,
            slow_poll: self.slow_poll,
            window: self.window,
            report_interval: self.report_interval,
            epoch: Instant::now(),
            // At most 100 001: it fits.
            capacity: per_window as usize + 1,
        })
    }
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}
