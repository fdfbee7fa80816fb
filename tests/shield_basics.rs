//! Shielded async work: awaited outcomes are never reported, orphaned failures exactly once
//! whatever the interleaving, a dropped runner never leaves the handle hanging.

mod common;

use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use common::{MapRecorder, bounded, poll_once};
use futures_lite::future::zip;
use loopguard::Fallible;
use loopguard::orphan::{OrphanHandler, Report, ReportKind};
use loopguard::shield::Runner;
use loopguard::shield::{Shield, ShieldError, Shielded};

const LIMIT: Duration = Duration::from_secs(30);

/// A shield whose handler records every report.
fn recording(name: &str) -> (Shield, Arc<Mutex<Vec<Report>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let handler = OrphanHandler::new(move |report| sink.lock().unwrap().push(report.clone()));
    (Shield::with_handler(name, handler).unwrap(), seen)
}

on_every_executor! {
    async fn awaited_outcomes_are_never_reported() {
        let (shield, seen) = recording("awaited");
        let (runner, handle) = shield.wrap(Fallible(async { Ok::<_, String>(42) }));
        let ((), out) = bounded(LIMIT, zip(runner, handle)).await;
        assert_eq!(out, Ok(Ok(42)));

        let (runner, handle) = shield.wrap(Fallible(async { Err::<u8, _>("refused".to_string()) }));
        let ((), out) = bounded(LIMIT, zip(runner, handle)).await;
        assert_eq!(out, Ok(Err("refused".to_string())));

        let (runner, handle) = shield.wrap(async { panic!("awaited boom") });
        let ((), out): ((), Result<(), _>) = bounded(LIMIT, zip(runner, handle)).await;
        match out {
            Err(ShieldError::Panicked(p)) => assert_eq!(p.message(), "awaited boom"),
            other => panic!("expected a panic, got {other:?}"),
        }
        // A failure that finished before the handle was awaited is still the caller's.
        let (runner, handle) = shield.wrap(Fallible(async { Err::<(), _>("late look") }));
        runner.await;
        assert!(handle.is_finished());
        assert_eq!(handle.await, Ok(Err("late look")));

        assert!(seen.lock().unwrap().is_empty(), "{:?}", seen.lock().unwrap());
        assert_eq!(shield.orphaned_failures(), 0);
    }
}

on_every_executor! {
    async fn orphaned_panic_and_err_are_reported_once() {
        let (shield, seen) = recording("orphans");
        // Dropped while the work waits: the runner reports when it finishes.
        let (tx, rx) = smol::channel::bounded::<()>(1);
        let (runner, handle) = shield.wrap(Fallible(async move {
            rx.recv().await.unwrap();
            Err::<(), _>("walk failed")
        }));
        let mut runner = Box::pin(runner);
        assert!(poll_once(&mut runner).await.is_none());
        drop(handle);
        tx.send(()).await.unwrap();
        bounded(LIMIT, runner).await;

        // Finished before the drop: the dropping side reports.
        let (runner, handle) = shield.wrap(async { panic!("walk exploded") });
        runner.await;
        assert!(seen.lock().unwrap().len() == 1, "not reported before the drop");
        drop::<Shielded<()>>(handle);

        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!(seen[0].kind(), ReportKind::Failed);
        assert_eq!(seen[0].message(), "\"walk failed\"");
        assert_eq!(seen[0].origin(), "orphans");
        assert_eq!(seen[1].kind(), ReportKind::Panicked);
        assert_eq!(seen[1].message(), "walk exploded");
        assert_eq!(shield.orphaned_failures(), 2);
    }
}

on_every_executor! {
    async fn orphaned_success_is_not_reported_and_work_runs_on() {
        let (shield, seen) = recording("quiet");
        let done = Arc::new(Mutex::new(false));
        let flag = done.clone();
        let (tx, rx) = smol::channel::bounded::<()>(1);
        let (runner, handle) = shield.wrap(Fallible(async move {
            rx.recv().await.unwrap();
            *flag.lock().unwrap() = true;
            Ok::<_, String>(1)
        }));
        let mut runner = Box::pin(runner);
        assert!(poll_once(&mut runner).await.is_none());
        drop(handle);
        tx.send(()).await.unwrap();
        bounded(LIMIT, runner).await;
        assert!(*done.lock().unwrap(), "the work finished after its handle left");
        assert!(seen.lock().unwrap().is_empty());
    }
}

on_every_executor! {
    async fn dropped_runner_resolves_the_handle() {
        let (shield, seen) = recording("shutdown");
        // Never polled.
        let (runner, handle) = shield.wrap(Fallible(async { Err::<(), _>("never ran") }));
        drop(runner);
        assert_eq!(bounded(LIMIT, handle).await, Err(ShieldError::RunnerDropped));

        // Dropped mid-run, while the handle waits.
        let (_tx, rx) = smol::channel::bounded::<()>(1);
        let (runner, mut handle) = shield.wrap(async move { rx.recv().await });
        let mut runner = Box::pin(runner);
        assert!(poll_once(&mut runner).await.is_none());
        assert!(poll_once(&mut handle).await.is_none());
        drop(runner);
        assert_eq!(bounded(LIMIT, handle).await, Err(ShieldError::RunnerDropped));

        // Both dropped: nothing to report, nothing hangs.
        let (runner, handle) = shield.wrap(Fallible(async { Err::<(), _>("cancelled") }));
        drop(handle);
        drop(runner);
        assert!(seen.lock().unwrap().is_empty());
    }
}

#[test]
fn not_send_future_on_a_local_executor() {
    let (shield, seen) = recording("local");
    let ex = async_executor::LocalExecutor::new();
    futures_lite::future::block_on(ex.run(async {
        let state = std::rc::Rc::new(std::cell::Cell::new(20));
        let s = state.clone();
        let (runner, handle) = shield.wrap(async move {
            futures_lite::future::yield_now().await;
            s.set(s.get() + 1);
            s.get()
        });
        ex.spawn(runner).detach();
        assert_eq!(handle.await, Ok(21));

        let s = state.clone();
        let (runner, handle) = shield.wrap(Fallible(async move {
            futures_lite::future::yield_now().await;
            Err::<(), _>(format!("rc at {}", s.get()))
        }));
        let task = ex.spawn(runner);
        drop(handle);
        task.await;
    }));
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].message(), "\"rc at 21\"");
}

#[test]
fn spawned_and_detached_on_smol_and_tokio() {
    let (report_tx, report_rx) = std::sync::mpsc::channel::<Report>();
    let report_tx = Mutex::new(report_tx);
    let shield = Shield::with_handler(
        "spawned",
        OrphanHandler::new(move |r| report_tx.lock().unwrap().send(r.clone()).unwrap()),
    )
    .unwrap();
    let (runner, handle) = shield.wrap(Fallible(async { Err::<(), _>("smol orphan") }));
    drop(handle);
    smol::spawn(runner).detach();
    let report = report_rx
        .recv_timeout(LIMIT)
        .expect("reported from the smol task");
    assert_eq!(report.message(), "\"smol orphan\"");

    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        let (runner, handle) = shield.wrap(Fallible(async { Ok::<_, String>(5) }));
        tokio::spawn(runner);
        assert_eq!(handle.await, Ok(Ok(5)));
        let (runner, handle) = shield.wrap(Fallible(async { Err::<(), _>("tokio orphan") }));
        drop(handle);
        tokio::spawn(runner).await.unwrap();
    });
    assert_eq!(
        report_rx.recv_timeout(LIMIT).unwrap().message(),
        "\"tokio orphan\""
    );
    assert!(report_rx.try_recv().is_err());
    assert_eq!(shield.orphaned_failures(), 2);
}

/// Completion on one thread races the handle's drop on another; every failure must be
/// reported exactly once, and an outcome taken by an awaiting caller never.
#[test]
fn drop_racing_completion_reports_exactly_once() {
    const ROUNDS: usize = 2000;
    let (shield, seen) = recording("race");
    for round in 0..ROUNDS {
        let panics = round % 2 == 0;
        let (runner, handle): (Runner<_>, Shielded<Result<(), &str>>) =
            shield.wrap(Fallible(async move {
                if panics {
                    panic!("race panic");
                }
                Err("race err")
            }));
        let start = Arc::new(Barrier::new(2));
        let go = start.clone();
        let thread = std::thread::spawn(move || {
            go.wait();
            futures_lite::future::block_on(runner);
        });
        start.wait();
        if round % 3 == 0 {
            std::thread::yield_now();
        }
        drop(handle);
        thread.join().unwrap();
        assert_eq!(
            shield.orphaned_failures(),
            round as u64 + 1,
            "round {round}"
        );
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), ROUNDS);
    let panicked = seen
        .iter()
        .filter(|r| r.kind() == ReportKind::Panicked)
        .count();
    assert_eq!(panicked, ROUNDS / 2);
}

/// The same race, but the handle is polled (registering a waker) before it is dropped.
#[test]
fn polled_then_dropped_racing_completion_reports_exactly_once() {
    const ROUNDS: usize = 1000;
    let (shield, _seen) = recording("race-polled");
    for round in 0..ROUNDS {
        let (runner, mut handle) = shield.wrap(Fallible(async { Err::<(), _>("late") }));
        assert!(futures_lite::future::block_on(poll_once(&mut handle)).is_none());
        let start = Arc::new(Barrier::new(2));
        let go = start.clone();
        let thread = std::thread::spawn(move || {
            go.wait();
            futures_lite::future::block_on(runner);
        });
        start.wait();
        drop(handle);
        thread.join().unwrap();
        assert_eq!(shield.orphaned_failures(), round as u64 + 1);
    }
}

#[test]
fn orphaned_failures_are_counted_with_the_shield_label() {
    let recorder = MapRecorder::default();
    let shield = metrics::with_local_recorder(&recorder, || Shield::new("flusher").unwrap());
    let id = "loopguard_orphaned_failures_total{shield=flusher}";
    assert_eq!(recorder.get(id), Some(0), "registered with a zero");
    let (runner, handle) = shield.wrap(Fallible(async { Err::<(), _>("x") }));
    drop(handle);
    futures_lite::future::block_on(runner);
    assert_eq!(recorder.get(id), Some(1));
}

#[test]
fn auto_traits_and_debug() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    fn unpin<T: Unpin>() {}
    send_sync::<Shield>();
    send_sync::<Shielded<u32>>();
    send_sync::<ShieldError>();
    send::<Runner<futures_lite::future::Ready<u32>>>();
    unpin::<Shielded<u32>>();
    unpin::<Runner<futures_lite::future::Ready<u32>>>();
    let shield = Shield::new("dbg").unwrap();
    assert_eq!(shield.name(), "dbg");
    let (runner, handle) = shield.wrap(async { 1 });
    assert_eq!(
        format!("{shield:?}"),
        "Shield { name: \"dbg\", in_flight: 1, orphaned_failures: 0 }"
    );
    assert_eq!(
        format!("{runner:?}"),
        "Runner { started: false, finished: false }"
    );
    assert_eq!(
        format!("{handle:?}"),
        "Shielded { origin: \"dbg\", finished: false }"
    );
    assert!(!handle.is_finished());
    futures_lite::future::block_on(runner);
    assert!(handle.is_finished());
    assert_eq!(
        format!("{handle:?}"),
        "Shielded { origin: \"dbg\", finished: true }"
    );
}

#[test]
fn shield_errors_say_what_happened() {
    use std::error::Error as _;
    let (runner, handle) = Shield::new("e").unwrap().wrap(async { 1 });
    drop(runner);
    let dropped = futures_lite::future::block_on(handle).unwrap_err();
    assert_eq!(
        dropped.to_string(),
        "shielded work was dropped before it finished"
    );
    assert!(dropped.source().is_none());

    common::quiet_expected_panics();
    let (runner, handle) = Shield::new("e")
        .unwrap()
        .wrap(async { panic!("expected: boom") });
    futures_lite::future::block_on(runner);
    let panicked = futures_lite::future::block_on(handle).unwrap_err();
    assert_eq!(
        panicked.to_string(),
        "shielded work panicked: expected: boom"
    );
    // Shown once: the message is in `Display`, so it is not a `source()` too.
    assert!(panicked.source().is_none());
}
