//! The state shared by a pool's handles, its worker threads and its jobs.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use event_listener::Event;

use crate::builder::PoolBuilder;
use crate::demand::Demand;
use crate::error::Panicked;
use crate::gate::{Gate, WaiterRef};
use crate::job::{Classified, Task};
use crate::metrics::PoolMetrics;
use crate::orphan::{describe_failure, OrphanHandler, Report, ReportKind};
use crate::outcome::JobOutput;
use crate::sync::{drop_quietly, lock};

/// Counters kept by the pool itself, whatever recorder is installed.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) rejected: AtomicU64,
    /// Finished jobs by outcome: ok, error, panicked.
    pub(crate) jobs: [AtomicU64; 3],
    pub(crate) orphaned: AtomicU64,
    pub(crate) stuck: AtomicU64,
    /// Moving average of job durations, in nanoseconds; 0 until a job finished.
    pub(crate) avg_job_nanos: AtomicU64,
}

/// What one worker thread is doing, readable from any thread.
#[derive(Debug, Default)]
struct WorkerState {
    /// Start of the running job in nanoseconds since the pool's epoch, plus one; 0 when idle.
    started: AtomicU64,
    /// Wakes this worker alone (waited on with the queue lock).
    wake: Condvar,
}

/// The hand-off between admission and the workers, under one lock.
struct Queue {
    tasks: VecDeque<Arc<dyn Task>>,
    /// Parked workers, the most recently parked last: a new job wakes the warmest thread
    /// (its CPU is less likely to be in a deep idle state, its caches hold the pool), and
    /// no wake-up call is made at all when no worker is parked.
    idle: Vec<usize>,
    /// `parked[i]` is whether worker `i` is in `idle`.
    parked: Vec<bool>,
    /// Workers spinning for a job before they park. A new job wakes a parked worker only
    /// when the jobs queued outnumber them: each spinner takes the lock and looks at the
    /// queue again before it parks, so a job it was counted for is never stranded.
    spinning: usize,
}

/// How long a worker that ran out of jobs spins before it parks. A job submitted meanwhile
/// starts without a wake-up call, and the worker's CPU stays out of its idle state: on a VM
/// waking a halted vCPU costs tens of microseconds, a large part of a round trip. At most
/// this much CPU time is spent per job that ends with the queue empty.
const SPIN: Duration = Duration::from_micros(50);

pub(crate) struct Shared {
    name: Arc<str>,
    pub(crate) gate: Gate,
    queue: Mutex<Queue>,
    /// The length of `queue.tasks`, written under the lock, read by spinning workers.
    pending: AtomicUsize,
    handler: OrphanHandler,
    workers: Box<[WorkerState]>,
    epoch: Instant,
    pub(crate) stats: Stats,
    metrics: PoolMetrics,
    /// Holders + waiters over time: +1 on admission or on queueing, -1 when the slot is
    /// released or the wait ends without a slot.
    demand: Demand,
    /// Lets `close` wake the stuck-job monitor.
    monitor: (Mutex<()>, Condvar),
    live_threads: AtomicUsize,
    idle: Event,
    exited: Event,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Shared {
    pub(crate) fn start(builder: PoolBuilder) -> io::Result<Arc<Shared>> {
        let workers = builder.validated_workers()?;
        let name: Arc<str> = builder.validated_name()?.into();
        let stuck_after = builder.validated_stuck_after()?;
        let demand = builder.validated_demand()?;
        let shared = Arc::new(Shared {
            metrics: PoolMetrics::register(&name, workers),
            name,
            gate: Gate::new(workers),
            queue: Mutex::new(Queue {
                tasks: VecDeque::with_capacity(workers),
                idle: Vec::with_capacity(workers),
                parked: vec![false; workers],
                spinning: 0,
            }),
            pending: AtomicUsize::new(0),
            handler: builder.handler.clone(),
            workers: (0..workers).map(|_| WorkerState::default()).collect(),
            epoch: Instant::now(),
            stats: Stats::default(),
            demand,
            monitor: (Mutex::new(()), Condvar::new()),
            live_threads: AtomicUsize::new(0),
            idle: Event::new(),
            exited: Event::new(),
            threads: Mutex::new(Vec::with_capacity(workers + 1)),
        });
        for index in 0..workers {
            let worker = shared.clone();
            let name = format!("{}-{index}", shared.name);
            shared.spawn(&builder, name, move || worker.work(index))?;
        }
        if let Some(threshold) = stuck_after {
            let monitor = shared.clone();
            let name = format!("{}-monitor", shared.name);
            shared.spawn(&builder, name, move || monitor.watch(threshold))?;
        }
        Ok(shared)
    }

    fn spawn(
        self: &Arc<Self>,
        builder: &PoolBuilder,
        name: String,
        body: impl FnOnce() + Send + 'static,
    ) -> io::Result<()> {
        let mut thread = std::thread::Builder::new().name(name.clone());
        if let Some(size) = builder.stack_size {
            thread = thread.stack_size(size);
        }
        self.live_threads.fetch_add(1, Ordering::AcqRel);
        let exiting = self.clone();
        let spawned = thread.spawn(move || {
            body();
            exiting.thread_exited();
        });
        match spawned {
            Ok(handle) => {
                lock(&self.threads).push(handle);
                Ok(())
            }
            Err(err) => {
                self.live_threads.fetch_sub(1, Ordering::AcqRel);
                // Threads already running exit once they see the pool closed.
                self.close();
                Err(io::Error::new(
                    err.kind(),
                    format!("cannot spawn thread `{name}`: {err}"),
                ))
            }
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The loop of worker `index`: take a job, run it, until the pool is closed and no
    /// admitted job is left.
    fn work(&self, index: usize) {
        while let Some(task) = self.next_task(index) {
            // `Task::run` contains the job's panic and gives its slot back even while
            // unwinding; this keeps the worker alive if anything else it calls (a metrics
            // recorder, a logger) panics.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| task.run(index))).is_err() {
                log::error!(target: "loopguard", "pool `{}`: a worker survived a panic outside its job", self.name);
            }
        }
    }

    /// The next job for worker `index`; `None` once the pool is closed and no admitted job
    /// is left. Spins for [`SPIN`] before parking.
    fn next_task(&self, index: usize) -> Option<Arc<dyn Task>> {
        let mut spun = false;
        let mut queue = lock(&self.queue);
        loop {
            if let Some(task) = queue.tasks.pop_front() {
                self.pending.store(queue.tasks.len(), Ordering::Relaxed);
                return Some(task);
            }
            if self.gate.is_closed() && self.gate.in_use() == 0 {
                return None;
            }
            if !spun {
                spun = true;
                queue.spinning += 1;
                drop(queue);
                self.spin_for_work();
                queue = lock(&self.queue);
                queue.spinning -= 1;
                continue;
            }
            // After a spurious wake-up the worker is still listed: list it once.
            if !queue.parked[index] {
                queue.parked[index] = true;
                queue.idle.push(index);
            }
            queue = self.workers[index]
                .wake
                .wait(queue)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    /// Spins (yielding now and then) until a job is queued, the pool closes, or [`SPIN`]
    /// has passed.
    fn spin_for_work(&self) {
        let start = Instant::now();
        loop {
            for _ in 0..64 {
                if self.pending.load(Ordering::Relaxed) != 0 || self.gate.is_closed() {
                    return;
                }
                std::hint::spin_loop();
            }
            if start.elapsed() >= SPIN {
                return;
            }
            std::thread::yield_now();
        }
    }

    /// Hands an admitted job to an idle worker: a spinning one if there is one for it,
    /// otherwise the most recently parked one, woken. No wake-up call is made when no worker
    /// is parked (a worker looks at the queue, under its lock, before it parks).
    pub(crate) fn dispatch(&self, task: Arc<dyn Task>) {
        let woken = {
            let mut queue = lock(&self.queue);
            queue.tasks.push_back(task);
            self.pending.store(queue.tasks.len(), Ordering::Relaxed);
            let woken = if queue.tasks.len() > queue.spinning {
                queue.idle.pop()
            } else {
                None
            };
            if let Some(index) = woken {
                queue.parked[index] = false;
            }
            woken
        };
        // Notified after unlocking, so the worker does not wake into a held lock. It was
        // taken off the idle list under the lock, so it cannot be missed in between.
        if let Some(index) = woken {
            self.workers[index].wake.notify_one();
        }
    }

    /// Wakes every parked worker, so each one sees that the pool closed.
    fn wake_all_workers(&self) {
        let mut queue = lock(&self.queue);
        for index in std::mem::take(&mut queue.idle) {
            queue.parked[index] = false;
            self.workers[index].wake.notify_one();
        }
    }

    /// Accounts for an admission. `queued` says whether the caller was already counted as
    /// demand while it waited.
    pub(crate) fn admitted(&self, waited: Duration, queued: bool) {
        if !queued {
            self.demand.add(1);
        }
        self.metrics.wait_seconds.record(waited);
    }

    /// A caller joined the queue of waiters.
    pub(crate) fn queued(&self) {
        self.demand.add(1);
    }

    /// A queued caller was told the pool closed: its wait ends without a slot.
    pub(crate) fn wait_closed(&self) {
        self.demand.add(-1);
    }

    /// A queued caller gives up (dropped, or its deadline passed). A slot granted to it in
    /// the meantime goes on to the next waiter.
    pub(crate) fn abandon_wait(&self, waiter: &WaiterRef) {
        if self.gate.cancel(waiter) {
            self.finish_slot();
        } else {
            self.demand.add(-1);
        }
    }

    pub(crate) fn demand_at(&self, now: Instant) -> f64 {
        self.demand.average_at(now)
    }

    pub(crate) fn count_rejection(&self) {
        self.stats.rejected.fetch_add(1, Ordering::Relaxed);
        self.metrics.rejected.increment(1);
    }

    /// The retry hint for a refused caller: the moving average of job durations (how long a
    /// running job takes to free its slot), at least 1 ms, 1 s before any job finished.
    pub(crate) fn retry_after(&self) -> Duration {
        match self.stats.avg_job_nanos.load(Ordering::Relaxed) {
            0 => Duration::from_secs(1),
            nanos => Duration::from_nanos(nanos).max(Duration::from_millis(1)),
        }
    }

    pub(crate) fn job_started(&self, worker: usize, at: Instant) {
        let nanos = at.saturating_duration_since(self.epoch).as_nanos();
        let stamp = u64::try_from(nanos).unwrap_or(u64::MAX - 1) + 1;
        self.workers[worker].started.store(stamp, Ordering::Release);
    }

    pub(crate) fn job_ended(&self, worker: usize, elapsed: Duration, outcome: Classified) {
        self.workers[worker].started.store(0, Ordering::Release);
        let index = outcome as usize;
        self.stats.jobs[index].fetch_add(1, Ordering::Relaxed);
        self.metrics.jobs[index].increment(1);
        self.metrics.job_seconds.record(elapsed);
        // Exponential moving average with weight 1/8; lost updates under contention only
        // make the hint a little older.
        let sample = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX).max(1);
        let avg = self.stats.avg_job_nanos.load(Ordering::Relaxed);
        let next = if avg == 0 {
            sample
        } else {
            avg - avg / 8 + sample / 8
        };
        self.stats
            .avg_job_nanos
            .store(next.max(1), Ordering::Relaxed);
    }

    /// Gives back a slot: that of a finished job, or one granted to a waiter that left.
    pub(crate) fn finish_slot(&self) {
        self.demand.add(-1);
        if self.gate.release() == 0 {
            self.idle.notify(usize::MAX);
            if self.gate.is_closed() {
                self.wake_all_workers();
            }
        }
    }

    /// Reports the outcome of a job nobody awaits, if it is a failure; drops it otherwise.
    pub(crate) fn report_orphan<T: JobOutput>(
        &self,
        result: Result<T, Panicked>,
        elapsed: Duration,
    ) {
        let Some((kind, message)) = describe_failure(&result) else {
            drop_quietly(result);
            return;
        };
        drop_quietly(result);
        self.stats.orphaned.fetch_add(1, Ordering::Relaxed);
        self.metrics.orphaned_failures.increment(1);
        self.handler
            .report(Report::new(self.name.clone(), kind, message, elapsed));
    }

    pub(crate) fn oldest_job_age(&self, now: Instant) -> Option<Duration> {
        let oldest = self
            .workers
            .iter()
            .map(|w| w.started.load(Ordering::Acquire))
            .filter(|&stamp| stamp != 0)
            .min()?;
        let started = self.epoch + Duration::from_nanos(oldest - 1);
        Some(now.saturating_duration_since(started))
    }

    pub(crate) fn publish_metrics(&self, now: Instant) {
        self.metrics.in_use.set(self.gate.in_use() as f64);
        self.metrics.waiting.set(self.gate.waiting() as f64);
        let oldest = self.oldest_job_age(now).unwrap_or_default();
        self.metrics.oldest_job_seconds.set(oldest.as_secs_f64());
        self.metrics.demand_avg.set(self.demand_at(now));
    }

    pub(crate) fn close(&self) -> bool {
        let closed = self.gate.close();
        if closed {
            self.wake_all_workers();
            let _monitor = lock(&self.monitor.0);
            self.monitor.1.notify_all();
        }
        closed
    }

    pub(crate) async fn wait_idle(&self) {
        loop {
            if self.gate.in_use() == 0 {
                return;
            }
            let listener = self.idle.listen();
            if self.gate.in_use() == 0 {
                return;
            }
            listener.await;
        }
    }

    pub(crate) async fn wait_exited(&self) {
        loop {
            if self.live_threads.load(Ordering::Acquire) == 0 {
                break;
            }
            let listener = self.exited.listen();
            if self.live_threads.load(Ordering::Acquire) == 0 {
                break;
            }
            listener.await;
        }
        let handles: Vec<JoinHandle<()>> = lock(&self.threads).drain(..).collect();
        for handle in handles {
            // The thread has done its last step; joining only collects it.
            let _ = handle.join();
        }
    }

    fn thread_exited(&self) {
        if self.live_threads.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.exited.notify(usize::MAX);
        }
        // The monitor stops once the last worker is gone.
        let _monitor = lock(&self.monitor.0);
        self.monitor.1.notify_all();
    }

    /// The stuck-job monitor: reports each job running past `threshold` once.
    fn watch(&self, threshold: Duration) {
        let interval = (threshold / 10).clamp(Duration::from_millis(5), Duration::from_secs(1));
        let mut reported = vec![0u64; self.workers.len()];
        let mut due = Vec::new();
        loop {
            {
                let guard = lock(&self.monitor.0);
                // Only the workers count: the monitor's own thread is one of the live threads.
                if self.live_threads.load(Ordering::Acquire) <= 1 {
                    return;
                }
                // The lock is released before any report: the handler is user code and may
                // close the pool, which takes this lock.
                drop(match self.monitor.1.wait_timeout(guard, interval) {
                    Ok((guard, _)) => guard,
                    Err(poisoned) => poisoned.into_inner().0,
                });
            }
            let now = Instant::now();
            for (worker, seen) in self.workers.iter().zip(reported.iter_mut()) {
                let stamp = worker.started.load(Ordering::Acquire);
                if stamp == 0 || stamp == *seen {
                    continue;
                }
                let started = self.epoch + Duration::from_nanos(stamp - 1);
                let age = now.saturating_duration_since(started);
                if age >= threshold {
                    *seen = stamp;
                    due.push(age);
                }
            }
            for age in due.drain(..) {
                let reported = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    self.report_stuck(age, threshold)
                }));
                if reported.is_err() {
                    log::error!(target: "loopguard", "pool `{}`: a stuck-job report panicked", self.name);
                }
            }
        }
    }

    fn report_stuck(&self, age: Duration, threshold: Duration) {
        self.stats.stuck.fetch_add(1, Ordering::Relaxed);
        self.metrics.stuck_jobs.increment(1);
        let message = format!(
            "job has been running for {:.1}s, past the {:.1}s stuck threshold; it still holds its slot",
            age.as_secs_f64(),
            threshold.as_secs_f64()
        );
        self.handler.report(Report::new(
            self.name.clone(),
            ReportKind::Stuck,
            message,
            age,
        ));
    }
}
