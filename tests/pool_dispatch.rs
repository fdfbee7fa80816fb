//! A job is never left waiting for a worker that is busy in someone else's code, nor for
//! one that spins for it without looking.
//!
//! After its job returns, a worker runs code it does not own before it looks at the queue
//! again: the caller's waker, the orphan handler, the `Drop` of an orphaned output, the
//! metrics recorder. If that code waits for another job of the same pool, the job must go
//! to another (parked) worker; waiting for the busy one would deadlock.

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::Latch;
use futures_lite::future::block_on;
use loopguard::pool::Pool;

/// An output whose `Drop` waits (up to `patience`) for a message that only another job of
/// the pool sends.
struct WaitsOnDrop {
    entered: Latch,
    message: mpsc::Receiver<()>,
    patience: Duration,
}

impl Drop for WaitsOnDrop {
    fn drop(&mut self) {
        self.entered.open();
        let _ = self.message.recv_timeout(self.patience);
    }
}

fn a_job_runs_while_another_worker_drops_an_orphaned_output(spin: Duration) {
    let pool = Pool::builder()
        .name("dispatch")
        .workers(2)
        .spin(spin)
        .no_stuck_reports()
        .build()
        .expect("pool");
    let (send, message) = mpsc::channel();
    let (entered, go) = (Latch::new(), Latch::new());
    let patience = Duration::from_secs(20);
    let output = {
        let (entered, go) = (entered.clone(), go.clone());
        move || {
            go.wait();
            WaitsOnDrop {
                entered,
                message,
                patience,
            }
        }
    };
    // Orphaned: its worker drops the output when the job returns.
    drop(pool.try_run(output).expect("a free slot"));
    go.open();
    entered.wait();

    // That worker is now inside the output's `Drop`, waiting for this job.
    let start = Instant::now();
    block_on(pool.run(move || send.send(()).expect("the output is waiting"))).expect("runs");
    let took = start.elapsed();
    assert!(
        took < patience / 2,
        "the job waited {took:?} for the worker busy dropping an orphaned output"
    );
    block_on(pool.shutdown());
}

#[test]
fn a_job_runs_while_another_worker_drops_an_orphaned_output_spinning_off() {
    a_job_runs_while_another_worker_drops_an_orphaned_output(Duration::ZERO);
}

#[test]
fn a_job_runs_while_another_worker_drops_an_orphaned_output_spinning_on() {
    a_job_runs_while_another_worker_drops_an_orphaned_output(Duration::from_micros(50));
}

/// A job submitted while the worker spins for the next one is taken at once, not when the
/// spin runs out: with a 5 s spin, back-to-back jobs on one worker (each submitted as soon
/// as the last returned, so the worker is spinning or about to) take far less than one
/// spin each.
#[test]
fn a_spinning_worker_takes_a_new_job_at_once() {
    let spin = Duration::from_secs(5);
    let pool = Pool::builder()
        .name("spinning")
        .workers(1)
        .spin(spin)
        .no_stuck_reports()
        .build()
        .expect("pool");
    let start = Instant::now();
    for round in 0..5_u64 {
        assert_eq!(block_on(pool.run(move || round)), Ok(round));
    }
    let took = start.elapsed();
    assert!(
        took < spin / 2,
        "5 back-to-back jobs took {took:?}: a spinner waited out its spin"
    );
    block_on(pool.shutdown());
}
