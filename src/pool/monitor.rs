//! The stuck-job monitor: reports each job that runs past the threshold, once.
//!
//! The monitor thread sleeps until the next instant a job could become stuck: the instant
//! the oldest unreported running job crosses the threshold, or, with none running, one
//! threshold from now (a job starting meanwhile cannot cross it sooner). Workers never
//! wake it, so starting a job costs nothing here; an idle pool's monitor wakes once per
//! threshold (every 60 s by default).

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::workers::Workers;
use crate::emit::Counted;
use crate::orphan::{ReportKind, Reporter};
use crate::sync::lock;

/// The monitor's stop signal.
pub(crate) struct Monitor {
    /// Set once the last worker exits: the monitor stops.
    stopped: Mutex<bool>,
    wake: Condvar,
}

impl Monitor {
    pub(crate) fn new() -> Monitor {
        Monitor {
            stopped: Mutex::new(false),
            wake: Condvar::new(),
        }
    }

    /// The last worker exited.
    pub(crate) fn stop(&self) {
        *lock(&self.stopped) = true;
        self.wake.notify_one();
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, bool>, timeout: Duration) -> MutexGuard<'a, bool> {
        match self.wake.wait_timeout(guard, timeout) {
            Ok((guard, _)) => guard,
            Err(poisoned) => poisoned.into_inner().0,
        }
    }
}

/// What the monitor reports to.
pub(crate) struct Watched<'a> {
    pub(crate) monitor: &'a Monitor,
    pub(crate) workers: &'a Workers,
    pub(crate) stuck: &'a Counted,
    pub(crate) reporter: &'a Reporter,
}

/// The monitor thread's body: until the last worker exits, reports every job running past
/// `threshold` once.
pub(crate) fn watch(watched: Watched<'_>, threshold: Duration) {
    let Watched {
        monitor,
        workers,
        stuck,
        reporter,
    } = watched;
    // Per worker, the stamp of the job last reported, so each job is reported once.
    let mut reported = vec![0u64; workers.count()];
    let mut due = Vec::new();
    loop {
        {
            let mut stopped = lock(&monitor.stopped);
            loop {
                if *stopped {
                    return;
                }
                let now = Instant::now();
                let mut next: Option<Instant> = None;
                for (worker, stamp) in workers.stamps().enumerate() {
                    if stamp == 0 || stamp == reported[worker] {
                        continue;
                    }
                    // A threshold too far out to add is never reached (checked: `Instant`
                    // addition panics on overflow).
                    let Some(at) = workers.start_of(stamp).checked_add(threshold) else {
                        continue;
                    };
                    if at <= now {
                        reported[worker] = stamp;
                        due.push(now.saturating_duration_since(workers.start_of(stamp)));
                    } else {
                        next = Some(next.map_or(at, |n| n.min(at)));
                    }
                }
                if !due.is_empty() {
                    break;
                }
                // With no job running, one that starts now is due a threshold from now.
                let timeout = next.map_or(threshold, |at| at.saturating_duration_since(now));
                stopped = monitor.wait(stopped, timeout);
            }
        }
        // Reported without the lock: the handler is user code and may close the pool.
        for age in due.drain(..) {
            stuck.count();
            let message = format!(
                "job has been running for {:.1}s, past the {:.1}s stuck threshold; it still holds its slot",
                age.as_secs_f64(),
                threshold.as_secs_f64()
            );
            reporter.report(ReportKind::Stuck, message, age);
            stuck.emit();
        }
    }
}
