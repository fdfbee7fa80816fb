//! The state a pool's handles, threads and jobs share.
//!
//! A slot is taken at admission through the pool's [`Limit`] (the gate and its accounting,
//! shared with the tower layer), and given back by [`Core::release_slot`] once the job's
//! outcome was delivered or reported.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use super::builder::PoolBuilder;
use super::monitor::Monitor;
use super::stats::Stats;
use super::workers::Workers;
use crate::emit;
use crate::gate::limit::Limit;
use crate::orphan::Reporter;
use crate::signal::Signal;
use crate::sync::lock;

pub(crate) struct Core {
    /// The pool's name, the gate and its accounting: slots, demand, refusals, waits, the
    /// idle signal.
    pub(crate) limit: Limit,
    pub(crate) workers: Workers,
    pub(crate) stats: Stats,
    pub(crate) reporter: Arc<Reporter>,
    pub(crate) monitor: Monitor,
    /// Worker threads that have not exited yet.
    live_workers: AtomicUsize,
    /// All threads (workers and monitor) that have not exited yet.
    live_threads: AtomicUsize,
    /// Notified when the last thread exits.
    exited: Signal,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Whether a tower layer admits requests on this pool's slots (`for_pool`): only then
    /// can a caller's request hold one, and a refusal looks at the thread's mark.
    #[cfg(feature = "tower")]
    pub(crate) layered: std::sync::atomic::AtomicBool,
}

impl Core {
    /// The shared state of a pool described by `builder`, with no thread started yet.
    pub(crate) fn new(builder: &PoolBuilder) -> io::Result<Core> {
        let workers = builder.validated_workers()?;
        let name: Arc<str> = builder.validated_name()?.into();
        let demand = builder.validated_demand()?;
        Ok(Core {
            stats: Stats::register(&name),
            reporter: Arc::new(Reporter::new(
                emit::LABEL_POOL,
                name.clone(),
                builder.handler.clone(),
            )),
            limit: Limit::new(name, workers, demand),
            workers: Workers::new(workers, builder.spin),
            monitor: Monitor::new(),
            live_workers: AtomicUsize::new(0),
            live_threads: AtomicUsize::new(0),
            exited: Signal::new(),
            threads: Mutex::new(Vec::with_capacity(workers + 1)),
            #[cfg(feature = "tower")]
            layered: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Whether a worker may exit: the pool is closed and no admitted job is left.
    pub(crate) fn is_done(&self) -> bool {
        let gate = &self.limit.gate;
        gate.is_closed() && gate.in_use() == 0
    }

    /// Gives back a slot: that of a finished job, or one granted to a waiter that left.
    pub(crate) fn release_slot(&self) {
        if self.limit.release() == 0 {
            self.idle_now();
        }
    }

    /// The outcome of a job whose slot went back (after
    /// [`Limit::begin_publish`](crate::gate::limit::Limit::begin_publish)) is takeable now:
    /// if that was the last one, the pool is idle.
    pub(crate) fn published(&self) {
        if self.limit.end_publish() {
            self.idle_now();
        }
    }

    /// A queued caller gives up (dropped, or its deadline passed); a slot granted to it in
    /// the meantime goes on.
    pub(crate) fn abandon_wait(&self, wait: &mut crate::gate::wait::SlotWait) {
        if self.limit.abandon_wait(wait) {
            self.idle_now();
        }
    }

    /// The last slot came back: wakes the workers of a closed pool (they are ours), then
    /// the tasks waiting for idle (their wakers are user code).
    pub(crate) fn idle_now(&self) {
        if self.limit.gate.is_closed() {
            self.workers.wake_all();
        }
        self.limit.notify_idle();
    }

    pub(crate) fn publish_metrics(&self, now: Instant) {
        self.limit.publish(now);
        let mut at = emit::round_clock(now);
        let mut oldest = || self.workers.oldest_job_age(at()).unwrap_or_default();
        self.stats
            .oldest_job_seconds
            .publish(|| oldest().as_secs_f64());
    }

    /// Stops admission; returns whether this call closed the pool.
    pub(crate) fn close(&self) -> bool {
        let closed = self.limit.gate.close();
        if closed {
            self.workers.wake_all();
            // Closing may have taken back the slots of waiters granted but never polled.
            if self.limit.gate.in_use() == 0 {
                self.limit.notify_idle();
            }
        }
        closed
    }

    pub(crate) async fn wait_idle(&self) {
        self.limit.wait_idle().await
    }

    pub(crate) async fn wait_exited(&self) {
        let exited = || self.live_threads.load(Ordering::Acquire) == 0;
        self.exited.wait(exited).await;
        let handles: Vec<JoinHandle<()>> = lock(&self.threads).drain(..).collect();
        for handle in handles {
            // The thread has done its last step; joining only collects it.
            let _ = handle.join();
        }
    }

    /// Whether the calling thread is one of this pool's (a worker or the monitor): such a
    /// thread, running a job or a handler, cannot wait for the pool's threads to exit.
    pub(crate) fn on_own_thread(&self) -> bool {
        let me = std::thread::current().id();
        lock(&self.threads)
            .iter()
            .any(|handle| handle.thread().id() == me)
    }

    /// A thread is about to start; `worker` says whether it is a worker.
    pub(crate) fn thread_starting(&self, worker: bool) {
        self.live_threads.fetch_add(1, Ordering::AcqRel);
        if worker {
            self.live_workers.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// A thread started; keep its handle for `shutdown` to join.
    pub(crate) fn thread_started(&self, handle: JoinHandle<()>) {
        lock(&self.threads).push(handle);
    }

    /// A thread has exited (or never started). The monitor stops after the last worker.
    pub(crate) fn thread_exited(&self, worker: bool) {
        if worker && self.live_workers.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.monitor.stop();
        }
        if self.live_threads.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.exited.notify_all();
        }
    }
}
