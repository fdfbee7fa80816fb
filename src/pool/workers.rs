//! Dispatch: admitted jobs go to idle worker threads, which park when there is nothing to do.
//!
//! A job reaches this queue only after it took a slot, and there is one slot per worker, so
//! the queue never holds more jobs than there are workers that will take them: it is a
//! hand-off, not a backlog.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

// Under the crate's loom cfg (unit tests only) the queue's lock, the workers' condvars and
// the spinners' counter are loom's, so `workers/loom_model.rs` explores every interleaving of
// dispatch, spin, park, wake and close; normal builds never see loom.
use crate::sync::{Condvar, Mutex, MutexGuard, atomic::AtomicUsize, lock};

/// What a worker thread runs: an admitted job, which delivers or reports its own outcome
/// and gives its slot back. Never unwinds.
pub(crate) trait Task: Send + Sync {
    /// Runs the job on worker `worker`.
    fn run(self: Arc<Self>, worker: usize);
}

/// A dispatched job waiting for a worker.
struct Queued {
    task: Arc<dyn Task>,
    /// When it was dispatched (a [`stamp`](Workers::stamp)); 0 when spinning is off.
    at: u64,
}

/// The queue and the parked workers, under one lock.
struct Queue {
    tasks: VecDeque<Queued>,
    /// Parked workers, the most recently parked last: a new job wakes the warmest thread
    /// (its CPU is less likely to be in a deep idle state, its caches hold the pool), and
    /// no wake-up call is made at all when no worker is parked.
    idle: Vec<usize>,
    /// `listed[i]`: worker `i` is in `idle`.
    listed: Vec<bool>,
    /// Workers spinning for a job before they park. A new job wakes a parked worker only
    /// when the jobs queued outnumber them: each spinner takes the lock and looks at the
    /// queue again before it parks, so a job it was counted for is never stranded.
    ///
    /// Only spinners count. A worker finishing a job runs code it does not own (the
    /// caller's waker, the orphan handler, the output's `Drop`, the recorder), which may
    /// take long or wait for another job of this pool: a job dispatched meanwhile wakes a
    /// parked worker rather than wait for that one.
    spinning: usize,
}

impl Queue {
    /// Takes worker `index` off the idle list, wherever it is.
    fn unlist(&mut self, index: usize) {
        if std::mem::take(&mut self.listed[index]) {
            self.idle.retain(|&i| i != index);
        }
    }
}

/// The worker threads' side of a pool: dispatch, parking and what each worker is running.
pub(crate) struct Workers {
    queue: Mutex<Queue>,
    /// The length of `queue.tasks`, written under the lock, read by spinning workers.
    pending: AtomicUsize,
    /// Per worker: the start of its running job in nanoseconds since `epoch`, plus one;
    /// 0 when it runs none.
    started: Box<[AtomicU64]>,
    /// Per worker: wakes that worker alone (waited on with the queue lock).
    wake: Box<[Condvar]>,
    epoch: Instant,
    spin: Duration,
}

impl Workers {
    pub(crate) fn new(count: usize, spin: Duration) -> Workers {
        Workers {
            queue: Mutex::new(Queue {
                tasks: VecDeque::with_capacity(count),
                idle: Vec::with_capacity(count),
                listed: vec![false; count],
                spinning: 0,
            }),
            pending: AtomicUsize::new(0),
            started: (0..count).map(|_| AtomicU64::new(0)).collect(),
            wake: (0..count).map(|_| Condvar::new()).collect(),
            epoch: Instant::now(),
            spin,
        }
    }

    pub(crate) fn count(&self) -> usize {
        self.started.len()
    }

    /// Hands an admitted job to an idle worker: a spinning one if there is one for it,
    /// otherwise the most recently parked one, woken. No wake-up call is made when no worker
    /// is parked (a worker looks at the queue, under its lock, before it parks).
    pub(crate) fn dispatch(&self, task: Arc<dyn Task>) {
        let woken = {
            let at = if self.spin.is_zero() {
                0
            } else {
                self.stamp(Instant::now())
            };
            let mut queue = lock(&self.queue);
            queue.tasks.push_back(Queued { task, at });
            self.pending.store(queue.tasks.len(), Ordering::Relaxed);
            let woken = if queue.tasks.len() > queue.spinning {
                queue.idle.pop()
            } else {
                None
            };
            if let Some(index) = woken {
                queue.listed[index] = false;
            }
            woken
        };
        // Notified after unlocking, so the worker does not wake into a held lock. It was
        // taken off the idle list under the lock, so it cannot be missed in between.
        if let Some(index) = woken {
            self.wake[index].notify_one();
        }
    }

    /// The next job for worker `index`; `None` once `done()` says the worker may exit and
    /// no job is queued.
    ///
    /// A worker spins for the configured time before parking only when its jobs come back
    /// to back: when its last job was dispatched within that time of the worker running
    /// out of jobs. `back_to_back` is that worker's own record of it, kept by its loop. A
    /// worker whose jobs are spaced out parks at once and burns nothing between them; the
    /// first job of a burst finds it parked, the next ones find it spinning.
    pub(crate) fn next_task(
        &self,
        index: usize,
        back_to_back: &mut bool,
        done: impl Fn() -> bool,
    ) -> Option<Arc<dyn Task>> {
        let idle_from = (!self.spin.is_zero()).then(|| self.stamp(Instant::now()));
        let mut may_spin = *back_to_back;
        let mut queue = lock(&self.queue);
        loop {
            if let Some(Queued { task, at }) = queue.tasks.pop_front() {
                self.pending.store(queue.tasks.len(), Ordering::Relaxed);
                // A worker woken spuriously may still be listed as idle: unlist it, or a
                // later dispatch would "wake" this busy worker while another stays parked.
                queue.unlist(index);
                if let Some(from) = idle_from {
                    // Zero when the job was queued before this worker looked.
                    let gap = at.saturating_sub(from);
                    *back_to_back = u128::from(gap) <= self.spin.as_nanos();
                }
                return Some(task);
            }
            if done() {
                queue.unlist(index);
                return None;
            }
            if may_spin {
                may_spin = false;
                queue.spinning += 1;
                drop(queue);
                self.spin_for_work(&done);
                queue = lock(&self.queue);
                queue.spinning -= 1;
                continue;
            }
            // After a spurious wake-up the worker is still listed: list it once.
            if !queue.listed[index] {
                queue.listed[index] = true;
                queue.idle.push(index);
            }
            queue = self.park(index, queue);
        }
    }

    fn park<'a>(&self, index: usize, queue: MutexGuard<'a, Queue>) -> MutexGuard<'a, Queue> {
        self.wake[index]
            .wait(queue)
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Spins (yielding now and then) until a job is queued, `done()` holds, or the spin
    /// time has passed.
    #[cfg(not(all(test, loopguard_loom)))]
    fn spin_for_work(&self, done: &impl Fn() -> bool) {
        let start = Instant::now();
        loop {
            for _ in 0..64 {
                if self.pending.load(Ordering::Relaxed) != 0 || done() {
                    return;
                }
                std::hint::spin_loop();
            }
            if start.elapsed() >= self.spin {
                return;
            }
            std::thread::yield_now();
        }
    }

    /// Under loom, a spin is one look: whether it ends because it saw a job or because its
    /// time ran out, the worker takes the lock and looks at the queue again, so the only
    /// thing that matters is that the spin can end at any point, which loom explores.
    #[cfg(all(test, loopguard_loom))]
    fn spin_for_work(&self, done: &impl Fn() -> bool) {
        let _ = self.pending.load(Ordering::Relaxed) != 0 || done();
    }

    /// Wakes every parked worker, so each one looks at whether it may exit.
    pub(crate) fn wake_all(&self) {
        let mut queue = lock(&self.queue);
        for index in std::mem::take(&mut queue.idle) {
            queue.listed[index] = false;
            self.wake[index].notify_one();
        }
    }

    /// Worker `index` starts a job at `at`.
    pub(crate) fn job_started(&self, index: usize, at: Instant) {
        self.started[index].store(self.stamp(at), Ordering::Release);
    }

    /// Worker `index` finished its job.
    pub(crate) fn job_ended(&self, index: usize) {
        self.started[index].store(0, Ordering::Release);
    }

    /// Per worker, the start stamp of its running job (0 when idle): compare with
    /// [`start_of`](Workers::start_of).
    pub(crate) fn stamps(&self) -> impl Iterator<Item = u64> + '_ {
        self.started.iter().map(|s| s.load(Ordering::Acquire))
    }

    /// The instant a non-zero stamp stands for.
    pub(crate) fn start_of(&self, stamp: u64) -> Instant {
        self.epoch + Duration::from_nanos(stamp - 1)
    }

    fn stamp(&self, at: Instant) -> u64 {
        let nanos = at.saturating_duration_since(self.epoch).as_nanos();
        u64::try_from(nanos).unwrap_or(u64::MAX - 1) + 1
    }

    /// The age of the oldest running job at `now`.
    pub(crate) fn oldest_job_age(&self, now: Instant) -> Option<Duration> {
        let oldest = self.stamps().filter(|&stamp| stamp != 0).min()?;
        Some(now.saturating_duration_since(self.start_of(oldest)))
    }
}

/// Exhaustive interleavings of dispatch, spin, park, wake and close, under loom.
#[cfg(all(test, loopguard_loom))]
mod loom_model;

#[cfg(all(test, not(loopguard_loom)))]
mod tests {
    use super::*;

    /// A stamp stands for exactly the instant it was taken (0 is kept for "idle"), and an
    /// instant beyond the stamps' range (584 years on) saturates instead of overflowing.
    #[test]
    fn a_stamp_stands_for_its_instant() {
        let workers = Workers::new(1, Duration::ZERO);
        let at = Instant::now();
        let stamp = workers.stamp(at);
        assert_ne!(stamp, 0);
        assert_eq!(workers.start_of(stamp), at);
        assert_eq!(
            workers.start_of(workers.stamp(workers.epoch)),
            workers.epoch
        );
        let beyond = Duration::from_nanos(u64::MAX) + Duration::from_secs(1);
        if let Some(far) = workers.epoch.checked_add(beyond) {
            assert_eq!(workers.stamp(far), u64::MAX);
        }
    }
}
