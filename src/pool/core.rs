//! The state a pool's handles, threads and jobs share.
//!
//! A slot is taken at admission through the pool's [`Limit`] (the gate and its accounting,
//! shared with the tower layer) as an owned [`Permit`](crate::gate::permit::Permit), which
//! the job keeps; the worker drops it once the job's outcome was stored or reported, and
//! that drop is the release.

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
use crate::gate::limit::{Basis, Limit, OnClosedIdle};
use crate::orphan::Reporter;
use crate::signal::Signal;
use crate::sync::lock;

pub(crate) struct Core {
    /// The pool's name, the gate and its accounting: slots, demand, refusals, waits, the
    /// idle signal. Shared with every permit it hands out (and with the pool's handle,
    /// which reads it without going through here).
    pub(crate) limit: Arc<Limit>,
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
}

/// The last permit of a closed pool went back (whoever dropped it: a worker, a waiter that
/// left, a request of the tower layer): the workers may exit.
impl OnClosedIdle for Core {
    fn closed_idle(&self) {
        self.workers.wake_all();
    }
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
            // The `Retry-After` basis of a pool is its jobs' time, whoever holds the slot.
            limit: Arc::new(Limit::new(name, workers, demand, Basis::Jobs)),
            workers: Workers::new(workers, builder.spin),
            monitor: Monitor::new(),
            live_workers: AtomicUsize::new(0),
            live_threads: AtomicUsize::new(0),
            exited: Signal::new(),
            threads: Mutex::new(Vec::with_capacity(workers + 1)),
        })
    }

    /// Whether a worker may exit: the pool is closed and no admitted job is left.
    pub(crate) fn is_done(&self) -> bool {
        self.limit.is_closed() && self.limit.in_use() == 0
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
    /// Closing may take back the slots of waiters granted but never polled: if none is
    /// left, the limit tells the workers (through [`OnClosedIdle`]) and the idle waiters.
    pub(crate) fn close(&self) -> bool {
        let closed = self.limit.close();
        if closed {
            self.workers.wake_all();
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
