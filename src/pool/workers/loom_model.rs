//! Exhaustive interleavings of the worker queue, under loom: dispatch, spin, park, wake and
//! close racing (the class of tokio#8056's lost wake-up).
//!
//! The model pool below is the real [`Workers`] and the real [`Gate`] (both on loom's
//! primitives), glued together exactly as `Core` glues them: a job takes a slot before it is
//! dispatched and gives it back when it has run; a worker may exit once the gate is closed
//! and no slot is held (`Core::is_done`); the last release on a closed gate and the close
//! itself wake every parked worker (`Core::release_slot`, `Core::idle_now`, `Core::close`).
//! `Core` itself carries metrics, a monitor and thread handles that loom does not need.
//!
//! What every model checks: each dispatched job runs exactly once; no worker stays parked
//! with a job queued or after close (loom reports a deadlock if every thread is blocked);
//! every worker returns from its loop once the pool is closed and no job is left.

use super::*;
use crate::gate::Gate;
use loom::thread;

/// A spin long enough never to end by the clock in a model (under loom a spin is one
/// look, see `spin_for_work`), and a stamp gap always within it, so the worker's
/// back-to-back record does not depend on real time.
const SPIN: Duration = Duration::from_secs(3600);

struct Pool {
    gate: Gate,
    workers: Workers,
    ran: AtomicUsize,
}

impl Pool {
    fn new(workers: usize, spin: Duration) -> Arc<Pool> {
        Arc::new(Pool {
            gate: Gate::new(workers),
            workers: Workers::new(workers, spin),
            ran: AtomicUsize::new(0),
        })
    }

    /// `Core::is_done`.
    fn is_done(&self) -> bool {
        self.gate.is_closed() && self.gate.in_use() == 0
    }

    /// `Core::release_slot` and `Core::idle_now`.
    fn release_slot(&self) {
        if self.gate.release() == 0 && self.gate.is_closed() {
            self.workers.wake_all();
        }
    }

    /// `Core::close`.
    fn close(&self) {
        if self.gate.close() {
            self.workers.wake_all();
        }
    }

    /// `Pool::try_run`: a slot, then the job to a worker.
    fn submit(self: &Arc<Self>) {
        self.gate.try_acquire().expect("a free slot");
        self.workers.dispatch(Arc::new(Job(self.clone())));
    }

    /// The worker loop of `threads::work`; returns how many jobs this worker ran.
    fn spawn_worker(
        self: &Arc<Self>,
        index: usize,
        back_to_back: bool,
    ) -> thread::JoinHandle<usize> {
        let pool = self.clone();
        thread::spawn(move || {
            let mut back_to_back = back_to_back;
            let mut ran = 0;
            while let Some(task) = pool
                .workers
                .next_task(index, &mut back_to_back, || pool.is_done())
            {
                task.run(index);
                ran += 1;
            }
            ran
        })
    }

    fn check_quiet(&self, jobs: usize) {
        assert_eq!(self.ran.load(Ordering::SeqCst), jobs, "a job ran not once");
        assert_eq!(self.gate.in_use(), 0);
        assert_eq!(self.workers.pending.load(Ordering::SeqCst), 0);
        let queue = lock(&self.workers.queue);
        assert!(queue.tasks.is_empty());
        assert_eq!(queue.spinning, 0);
    }
}

/// A job: counts that it ran, then gives its slot back.
struct Job(Arc<Pool>);

impl Task for Job {
    fn run(self: Arc<Self>, _worker: usize) {
        self.0.ran.fetch_add(1, Ordering::SeqCst);
        self.0.release_slot();
    }
}

/// One worker that parks at once (no spin): a job dispatched while it looks at the queue,
/// lists itself idle or parks is run, and a close racing the job's end lets it exit.
#[test]
fn dispatch_and_close_race_a_parking_worker() {
    loom::model(|| {
        let pool = Pool::new(1, Duration::ZERO);
        let worker = pool.spawn_worker(0, false);
        pool.submit();
        pool.close();
        assert_eq!(worker.join().unwrap(), 1);
        pool.check_quiet(1);
    });
}

/// One worker that spins before it parks: a job dispatched while it spins is not
/// announced with a wake-up (the spinner was counted for it); the spinner looks at the
/// queue again before it parks, so the job is never stranded.
#[test]
fn dispatch_and_close_race_a_spinning_worker() {
    loom::model(|| {
        let pool = Pool::new(1, SPIN);
        let worker = pool.spawn_worker(0, true);
        pool.submit();
        pool.close();
        assert_eq!(worker.join().unwrap(), 1);
        pool.check_quiet(1);
    });
}

/// The pool closes while its only worker parks and nothing was ever dispatched: the close
/// wakes it (or it sees the close before it parks) and it exits.
#[test]
fn close_races_an_idle_worker() {
    loom::model(|| {
        let pool = Pool::new(1, SPIN);
        let worker = pool.spawn_worker(0, true);
        pool.close();
        assert_eq!(worker.join().unwrap(), 0);
        pool.check_quiet(0);
    });
}

/// Two workers, one spinning and one parking, and two jobs dispatched back to back: the
/// second job, which outnumbers the spinners, wakes the parked worker or is taken by the
/// spinner after its first; both run, and both workers exit after close.
#[test]
fn two_jobs_race_a_spinning_and_a_parking_worker() {
    let mut builder = loom::model::Builder::new();
    // Three threads with many lock operations each: unbounded, loom did not finish in 8
    // minutes; with at most three preemptions per execution it takes about 40 s in a debug
    // build on 2 cores (2: about 5 s), and every seeded bug in the queue still fails it.
    builder.preemption_bound = Some(3);
    builder.check(|| {
        let pool = Pool::new(2, SPIN);
        let spinner = pool.spawn_worker(0, true);
        let parker = pool.spawn_worker(1, false);
        pool.submit();
        pool.submit();
        pool.close();
        let ran = spinner.join().unwrap() + parker.join().unwrap();
        assert_eq!(ran, 2);
        pool.check_quiet(2);
    });
}
