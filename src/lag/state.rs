//! What the clones of a `LoopLag`, its probes and its instrumented futures share: the
//! window of samples, the lateness histogram (ours and the recorder's) and the tasks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ::metrics::Histogram;

use super::builder::{Config, nanos};
use super::stats::LagStats;
use super::task::SlowTask;
use super::window::{Window, percentile};
use crate::emit::durations::{DurationStats, Durations};
use crate::emit::{self, LABEL_LOOP, LOOP_LAG_SECONDS};
use crate::sync::lock;

#[derive(Debug)]
pub(super) struct Shared {
    pub(super) config: Arc<Config>,
    window: Mutex<Window>,
    /// Every sample, for the prometheus-client collector.
    durations: Durations,
    /// Every sample, for the `metrics` recorder.
    histogram: Histogram,
    /// The tasks instrumented so far, by name. Entries are never removed: task names are a
    /// bounded set, like label values.
    tasks: Mutex<HashMap<Arc<str>, Arc<SlowTask>>>,
}

impl Shared {
    /// Allocates the window and registers the histogram (contained).
    pub(super) fn new(config: Config) -> Shared {
        let histogram = emit::register(
            || ::metrics::histogram!(LOOP_LAG_SECONDS, LABEL_LOOP => config.name.to_string()),
            Histogram::noop,
        );
        Shared {
            window: Mutex::new(Window::new(config.capacity)),
            config: Arc::new(config),
            durations: Durations::default(),
            histogram,
            tasks: Mutex::new(HashMap::new()),
        }
    }

    /// Records one tick of the probe: polled at `now`, `late` after its timer was due.
    pub(super) fn record(&self, now: Instant, late: Duration) {
        let at = self.config.stamp(now);
        lock(&self.window).push(at, nanos(late));
        self.durations.record(late);
        // The recorder last, outside the lock, contained.
        emit::record(&self.histogram, late);
    }

    /// The task named `name`, registered on first use. The recorder is called outside the
    /// lock; a lookup of a known task allocates nothing.
    pub(super) fn task(&self, name: &str) -> Arc<SlowTask> {
        if let Some(known) = lock(&self.tasks).get(name) {
            return Arc::clone(known);
        }
        let fresh = Arc::new(SlowTask::register(Arc::clone(&self.config), name));
        let (task, lost) = {
            let mut tasks = lock(&self.tasks);
            match tasks.get(name) {
                // Another thread registered it meanwhile: use that one.
                Some(known) => (Arc::clone(known), Some(fresh)),
                None => {
                    tasks.insert(Arc::clone(&fresh.name), Arc::clone(&fresh));
                    (fresh, None)
                }
            }
        };
        // A recorder handle's `Drop` is the recorder's code: never under the lock.
        drop(lost);
        task
    }

    /// Slow polls of the task `name` (0 for a task never instrumented).
    pub(super) fn slow_polls(&self, name: &str) -> u64 {
        lock(&self.tasks).get(name).map_or(0, |task| task.count())
    }

    /// Every task's name and slow polls, by name.
    #[cfg_attr(not(feature = "prometheus-client"), allow(dead_code))]
    pub(super) fn tasks(&self) -> Vec<(Arc<str>, u64)> {
        let mut tasks: Vec<_> = lock(&self.tasks)
            .values()
            .map(|task| (Arc::clone(&task.name), task.count()))
            .collect();
        tasks.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        tasks
    }

    /// Every sample recorded, as a histogram with the crate's buckets.
    #[cfg_attr(not(feature = "prometheus-client"), allow(dead_code))]
    pub(super) fn durations(&self) -> DurationStats {
        self.durations.snapshot()
    }

    pub(super) fn stats(&self) -> LagStats {
        let now = Instant::now();
        let since = self
            .config
            .stamp(now)
            .saturating_sub(nanos(self.config.window));
        let mut late = Vec::new();
        let newest = lock(&self.window).since(since, &mut late);
        late.sort_unstable();
        let slow_polls = lock(&self.tasks).values().map(|task| task.count()).sum();
        LagStats {
            p50: Duration::from_nanos(percentile(&late, 50)),
            p99: Duration::from_nanos(percentile(&late, 99)),
            max: Duration::from_nanos(late.last().copied().unwrap_or(0)),
            samples: late.len() as u64,
            slow_polls,
            since_last_sample: newest
                .map(|at| Duration::from_nanos(self.config.stamp(now).saturating_sub(at))),
        }
    }
}
