//! `Shield::spawn`: the work is wrapped, its runner handed to the spawn closure and the
//! handle returned in one call, on a `LocalExecutor` (`!Send` work) and on a multi-threaded
//! smol executor (real threads), with the orphan contract of `wrap`. A spawn closure that
//! drops a cancelling task instead of detaching it cancels the work: the handle says so.

mod common;

use std::rc::Rc;
use std::sync::mpsc;
use std::time::Duration;

use common::{Latch, bounded};
use futures_lite::future::block_on;
use loopguard::Fallible;
use loopguard::orphan::{OrphanHandler, ReportKind};
use loopguard::shield::{Shield, ShieldError};

const LIMIT: Duration = Duration::from_secs(30);

#[test]
fn local_work_is_spawned_and_its_handle_returned() {
    let ex = async_executor::LocalExecutor::new();
    let shield = Shield::new("local").unwrap();
    let rows = Rc::new(vec![1, 2, 3]);
    let mut spawned = 0;
    let handle = shield.spawn(async move { rows.len() }, |runner| {
        spawned += 1;
        ex.spawn(runner).detach();
    });
    assert_eq!(spawned, 1, "the runner is spawned before `spawn` returns");
    assert_eq!(block_on(ex.run(bounded(LIMIT, handle))), Ok(3));
}

#[test]
fn orphaned_failure_on_executor_threads_is_reported_once() {
    let ex = std::sync::Arc::new(async_executor::Executor::new());
    let (stop_tx, stop_rx) = smol::channel::bounded::<()>(1);
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let ex = ex.clone();
            let stop = stop_rx.clone();
            std::thread::spawn(move || block_on(ex.run(stop.recv())))
        })
        .collect();

    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let shield = Shield::with_handler(
        "threads",
        OrphanHandler::new(move |r| {
            let _ = tx.lock().unwrap().send(r.kind());
        }),
    )
    .unwrap();
    let release = Latch::new();
    let gate = release.clone();
    let handle = shield.spawn(
        Fallible(async move {
            gate.wait(); // blocks an executor thread until the handle is gone
            Err::<(), _>("flush failed")
        }),
        |runner| ex.spawn(runner).detach(),
    );
    drop(handle);
    release.open();
    assert_eq!(rx.recv_timeout(LIMIT), Ok(ReportKind::Failed));
    // Once the executor threads are joined, no runner is mid-poll: nothing more can come.
    drop(stop_tx);
    for thread in threads {
        assert!(
            thread.join().unwrap().is_err(),
            "stopped by the closed channel"
        );
    }
    assert_eq!(
        rx.try_recv(),
        Err(mpsc::TryRecvError::Empty),
        "reported twice"
    );
    assert_eq!(shield.orphaned_failures(), 1);
}

#[test]
fn a_task_dropped_instead_of_detached_cancels_the_work() {
    let ex = async_executor::LocalExecutor::new();
    let shield = Shield::new("dropped").unwrap();
    let handle = shield.spawn(async { 1 }, |runner| drop(ex.spawn(runner)));
    assert_eq!(
        block_on(ex.run(bounded(LIMIT, handle))),
        Err(ShieldError::RunnerDropped)
    );
}
