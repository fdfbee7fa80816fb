//! The stuck-job monitor: reports each job that runs past the threshold, once.
//!
//! The monitor thread sleeps until the instant the oldest unreported running job crosses
//! the threshold, and without a timeout while no job runs: an idle pool costs no wake-ups.
//! A worker starting a job wakes it only when it sleeps without a timeout.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::workers::Workers;
use crate::orphan::{ReportKind, Reporter};
use crate::sync::lock;
use crate::telemetry::Counted;

/// The monitor's wake-up signal.
pub(crate) struct Monitor {
    /// Set once the last worker exits: the monitor stops.
    stopped: Mutex<bool>,
    wake: Condvar,
    /// The monitor sleeps without a timeout (it saw no unreported running job).
    sleeping: AtomicBool,
}

impl Monitor {
    pub(crate) fn new() -> Monitor {
        Monitor {
            stopped: Mutex::new(false),
            wake: Condvar::new(),
            sleeping: AtomicBool::new(false),
        }
    }

    /// A worker started a job (its start stamp is stored): wake the monitor if it sleeps
    /// without a timeout. The stamp is stored and this flag read with `SeqCst`, and the
    /// monitor sets the flag before it reads the stamps: one of the two sees the other.
    pub(crate) fn job_started(&self) {
        if self.sleeping.load(Ordering::SeqCst) {
            let _stopped = lock(&self.stopped);
            self.wake.notify_one();
        }
    }

    /// The last worker exited.
    pub(crate) fn stop(&self) {
        *lock(&self.stopped) = true;
        self.wake.notify_one();
    }

    fn wait<'a>(
        &self,
        guard: MutexGuard<'a, bool>,
        timeout: Option<Duration>,
    ) -> MutexGuard<'a, bool> {
        let woken = match timeout {
            None => self.wake.wait(guard).map_err(|e| e.into_inner()),
            Some(timeout) => self
                .wake
                .wait_timeout(guard, timeout)
                .map(|(guard, _)| guard)
                .map_err(|e| e.into_inner().0),
        };
        woken.unwrap_or_else(|guard| guard)
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
                monitor.sleeping.store(true, Ordering::SeqCst);
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
                    monitor.sleeping.store(false, Ordering::SeqCst);
                    break;
                }
                if next.is_some() {
                    monitor.sleeping.store(false, Ordering::SeqCst);
                }
                let timeout = next.map(|at| at.saturating_duration_since(now));
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
