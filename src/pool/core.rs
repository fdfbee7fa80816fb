//! The state a pool's handles, threads and jobs share, and the accounting of its slots.
//!
//! A slot is taken at admission ([`Gate`]), counted as demand while held or waited for, and
//! given back by [`Core::release_slot`] once the job's outcome was delivered or reported.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use super::builder::PoolBuilder;
use super::gate::Gate;
use super::monitor::Monitor;
use super::stats::Stats;
use super::wait::SlotWait;
use super::workers::Workers;
use crate::demand::Demand;
use crate::orphan::Reporter;
use crate::signal::Signal;
use crate::sync::lock;
use crate::telemetry;

pub(crate) struct Core {
    pub(crate) name: Arc<str>,
    pub(crate) gate: Gate,
    pub(crate) workers: Workers,
    pub(crate) stats: Stats,
    pub(crate) reporter: Arc<Reporter>,
    pub(crate) monitor: Monitor,
    /// Holders + waiters over time: +1 on admission or on queueing, -1 when the slot is
    /// released or the wait ends without a slot.
    demand: Demand,
    /// Worker threads that have not exited yet.
    live_workers: AtomicUsize,
    /// All threads (workers and monitor) that have not exited yet.
    live_threads: AtomicUsize,
    /// Notified when the last slot is released.
    idle: Signal,
    /// Notified when the last thread exits.
    exited: Signal,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Core {
    /// The shared state of a pool described by `builder`, with no thread started yet.
    pub(crate) fn new(builder: &PoolBuilder) -> io::Result<Core> {
        let workers = builder.validated_workers()?;
        let name: Arc<str> = builder.validated_name()?.into();
        let demand = builder.validated_demand()?;
        Ok(Core {
            stats: Stats::register(&name, workers),
            reporter: Arc::new(Reporter::new(name.clone(), builder.handler.clone())),
            name,
            gate: Gate::new(workers),
            workers: Workers::new(workers, builder.spin),
            monitor: Monitor::new(),
            demand,
            live_workers: AtomicUsize::new(0),
            live_threads: AtomicUsize::new(0),
            idle: Signal::new(),
            exited: Signal::new(),
            threads: Mutex::new(Vec::with_capacity(workers + 1)),
        })
    }

    /// Whether a worker may exit: the pool is closed and no admitted job is left.
    pub(crate) fn is_done(&self) -> bool {
        self.gate.is_closed() && self.gate.in_use() == 0
    }

    /// Accounts for an admission. `queued` says whether the caller was already counted as
    /// demand while it waited.
    pub(crate) fn admitted(&self, queued: bool) {
        if !queued {
            self.demand.add(1);
        }
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
    pub(crate) fn abandon_wait(&self, wait: &mut SlotWait) {
        if wait.cancel(&self.gate) {
            self.release_slot();
        } else {
            self.demand.add(-1);
        }
    }

    /// Gives back a slot: that of a finished job, or one granted to a waiter that left.
    pub(crate) fn release_slot(&self) {
        self.demand.add(-1);
        if self.gate.release() == 0 {
            // The workers first: they are ours; the idle waiters' wakers are user code.
            if self.gate.is_closed() {
                self.workers.wake_all();
            }
            self.idle.notify_all();
        }
    }

    pub(crate) fn demand_at(&self, now: Instant) -> f64 {
        self.demand.average_at(now)
    }

    pub(crate) fn publish_metrics(&self, now: Instant) {
        let stats = &self.stats;
        stats.rejected.flush();
        telemetry::set(&stats.in_use, self.gate.in_use() as f64);
        telemetry::set(&stats.waiting, self.gate.waiting() as f64);
        let oldest = self.workers.oldest_job_age(now).unwrap_or_default();
        telemetry::set(&stats.oldest_job_seconds, oldest.as_secs_f64());
        telemetry::set(&stats.demand_avg, self.demand_at(now));
    }

    /// Stops admission; returns whether this call closed the pool.
    pub(crate) fn close(&self) -> bool {
        let closed = self.gate.close();
        if closed {
            self.workers.wake_all();
        }
        closed
    }

    pub(crate) async fn wait_idle(&self) {
        self.idle.wait(|| self.gate.in_use() == 0).await
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
