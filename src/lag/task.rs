//! One instrumented task's slow polls: the count (ours, mirrored into
//! `loopguard_loop_slow_polls_total`) and the rate-limited log line.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::builder::{Config, nanos};
use crate::contain::log_contained;
use crate::emit::{self, Counted, LABEL_LOOP, LABEL_TASK, LOOP_SLOW_POLLS_TOTAL};

/// `last_report` before the first line.
const NEVER: u64 = u64::MAX;

/// The slow polls of one task of one loop.
#[derive(Debug)]
pub(super) struct SlowTask {
    pub(super) config: Arc<Config>,
    pub(super) name: Arc<str>,
    count: Counted,
    /// When the last line was logged, in nanoseconds since the epoch; [`NEVER`] before.
    last_report: AtomicU64,
    /// Slow polls left out of the log since that line, and the longest of them (ns).
    left_out: AtomicU64,
    longest_left_out: AtomicU64,
}

impl SlowTask {
    /// Registers the task's series with the recorder (contained; its series then exists
    /// with a zero).
    pub(super) fn register(config: Arc<Config>, name: &str) -> SlowTask {
        let name: Arc<str> = name.into();
        let metric = emit::register(
            || {
                ::metrics::counter!(
                    LOOP_SLOW_POLLS_TOTAL,
                    LABEL_LOOP => config.name.to_string(),
                    LABEL_TASK => name.to_string()
                )
            },
            ::metrics::Counter::noop,
        );
        SlowTask {
            config,
            name,
            count: Counted::new(metric),
            last_report: AtomicU64::new(NEVER),
            left_out: AtomicU64::new(0),
            longest_left_out: AtomicU64::new(0),
        }
    }

    /// Slow polls counted so far.
    pub(super) fn count(&self) -> u64 {
        self.count.get()
    }

    /// One poll that took `took`, ending at `end`: counts it if it was slow, and logs it
    /// unless a line about this task was logged less than the report interval ago.
    pub(super) fn polled(&self, took: Duration, end: Instant) {
        if took <= self.config.slow_poll {
            return;
        }
        // Ours first, then the recorder (contained inside `bump`), then the logger.
        self.count.bump();
        let now = self.config.stamp(end);
        let last = self.last_report.load(Ordering::Relaxed);
        let due = last == NEVER || now.saturating_sub(last) >= nanos(self.config.report_interval);
        // One line per interval, even from several threads: only the one that moves the
        // mark logs.
        if due
            && self
                .last_report
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let left_out = self.left_out.swap(0, Ordering::Relaxed);
            let longest = self.longest_left_out.swap(0, Ordering::Relaxed);
            let (lag, task) = (&self.config.name, &self.name);
            if left_out == 0 {
                log_contained!(warn, "{lag}: `{task}` held the loop for {}", Ms(took));
            } else {
                log_contained!(
                    warn,
                    "{lag}: `{task}` held the loop for {} ({left_out} more slow polls since the \
                     last report, the longest {})",
                    Ms(took),
                    Ms(Duration::from_nanos(longest))
                );
            }
        } else {
            self.longest_left_out
                .fetch_max(nanos(took), Ordering::Relaxed);
            self.left_out.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A duration in milliseconds for a log line: `87 ms`, `3.4 ms`.
struct Ms(Duration);

impl fmt::Display for Ms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_secs_f64() * 1e3;
        if ms >= 10.0 {
            write!(f, "{ms:.0} ms")
        } else {
            write!(f, "{ms:.1} ms")
        }
    }
}

#[cfg(all(test, not(loopguard_loom)))]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_for_a_log_line() {
        assert_eq!(Ms(Duration::from_micros(87_400)).to_string(), "87 ms");
        assert_eq!(Ms(Duration::from_micros(3_440)).to_string(), "3.4 ms");
        assert_eq!(Ms(Duration::from_secs(2)).to_string(), "2000 ms");
    }
}
