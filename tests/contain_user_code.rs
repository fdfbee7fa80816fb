//! User code that misbehaves inside the pool's machinery (a panicking `Waker`, `Debug`
//! impl, an output's `Drop`, or an orphan handler that closes the pool) kills no worker,
//! leaks no slot, strands no waiter and never hangs `shutdown`.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, mpsc};
use std::task::{Context, Wake, Waker};
use std::time::Duration;

use futures_lite::future;
use loopguard::Fallible;
use loopguard::orphan::{OrphanHandler, Report};
use loopguard::pool::Pool;

const LIMIT: Duration = Duration::from_secs(10);

/// Runs `f` to completion, or gives `None` after `limit`: a broken contract fails the test
/// instead of hanging it.
fn within<T>(limit: Duration, f: impl Future<Output = T>) -> Option<T> {
    future::block_on(future::or(async { Some(f.await) }, async {
        async_io::Timer::after(limit).await;
        None
    }))
}

struct PanicWake;

impl Wake for PanicWake {
    fn wake(self: Arc<Self>) {
        panic!("waker boom")
    }
}

struct FlagWake(AtomicBool);

impl Wake for FlagWake {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst)
    }
}

fn pool(workers: usize) -> Pool {
    Pool::builder()
        .workers(workers)
        .no_stuck_reports()
        .build()
        .unwrap()
}

#[test]
fn a_panicking_waker_woken_by_a_grant_kills_no_worker() {
    let pool = pool(1);
    let (tx, rx) = mpsc::channel::<()>();
    let holder = pool.try_run(move || rx.recv().is_ok()).unwrap();
    let mut waiter = pool.run(|| 7u32);
    let waker = Waker::from(Arc::new(PanicWake));
    assert!(
        Pin::new(&mut waiter)
            .poll(&mut Context::from_waker(&waker))
            .is_pending()
    );
    assert_eq!(pool.waiting(), 1);
    tx.send(()).unwrap();
    assert!(within(LIMIT, holder).is_some());
    // The grant (and the panicking wake) happen on the worker as it releases the slot.
    while pool.waiting() != 0 {
        std::thread::yield_now();
    }
    assert_eq!(within(LIMIT, waiter), Some(Ok(7)), "the worker died");
    assert!(within(LIMIT, pool.shutdown()).is_some(), "shutdown hangs");
}

#[test]
fn a_panicking_waker_on_close_strands_no_other_waiter() {
    let pool = pool(1);
    let (tx, rx) = mpsc::channel::<()>();
    let _holder = pool.try_run(move || rx.recv().is_ok()).unwrap();
    let mut bad = pool.run(|| 1u32);
    let mut good = pool.run(|| 2u32);
    let panicking = Waker::from(Arc::new(PanicWake));
    let flag = Arc::new(FlagWake(AtomicBool::new(false)));
    let flagging = Waker::from(flag.clone());
    assert!(
        Pin::new(&mut bad)
            .poll(&mut Context::from_waker(&panicking))
            .is_pending()
    );
    assert!(
        Pin::new(&mut good)
            .poll(&mut Context::from_waker(&flagging))
            .is_pending()
    );
    assert!(pool.close(), "close must not panic");
    assert!(
        flag.0.load(Ordering::SeqCst),
        "the second waiter was never woken"
    );
    tx.send(()).unwrap();
    assert!(within(LIMIT, pool.shutdown()).is_some());
}

#[test]
fn a_stuck_report_handler_that_closes_the_pool_does_not_hang_shutdown() {
    let cell: Arc<OnceLock<Pool>> = Arc::new(OnceLock::new());
    let (closed_tx, closed_rx) = mpsc::channel::<()>();
    let closed_tx = Mutex::new(closed_tx);
    let handle = cell.clone();
    let handler = OrphanHandler::new(move |_: &Report| {
        if let Some(pool) = handle.get() {
            pool.close();
            let _ = closed_tx.lock().unwrap().send(());
        }
    });
    let pool = Pool::builder()
        .workers(1)
        .stuck_after(Duration::from_millis(20))
        .on_orphan(handler)
        .build()
        .unwrap();
    cell.set(pool.clone()).unwrap();
    // The job runs until the stuck report has closed the pool.
    let job = pool
        .try_run(move || closed_rx.recv_timeout(LIMIT).is_ok())
        .unwrap();
    assert_eq!(within(LIMIT, job), Some(Ok(true)));
    assert!(pool.is_closed());
    assert!(within(LIMIT, pool.shutdown()).is_some(), "shutdown hangs");
}

struct BadDebug;

impl fmt::Debug for BadDebug {
    fn fmt(&self, _: &mut fmt::Formatter<'_>) -> fmt::Result {
        panic!("debug boom")
    }
}

#[test]
fn an_orphaned_error_whose_debug_panics_is_still_reported_and_frees_its_slot() {
    let reports = Arc::new(Mutex::new(Vec::new()));
    let sink = reports.clone();
    let pool = Pool::builder()
        .workers(1)
        .no_stuck_reports()
        .on_orphan(OrphanHandler::new(move |r: &Report| {
            sink.lock().unwrap().push(r.message().to_string())
        }))
        .build()
        .unwrap();
    let (tx, rx) = mpsc::channel::<()>();
    let job = pool
        .try_run(Fallible(move || {
            let _ = rx.recv();
            Err::<(), _>(BadDebug)
        }))
        .unwrap();
    drop(job);
    tx.send(()).unwrap();
    assert!(within(LIMIT, pool.wait_idle()).is_some(), "slot leaked");
    assert_eq!(reports.lock().unwrap().len(), 1, "the failure was lost");
    assert_eq!(
        within(LIMIT, pool.run(|| 3)),
        Some(Ok(3)),
        "the worker died"
    );
}

/// An output whose `Drop` panics: user code that runs on the worker when nobody takes it.
struct BadDrop;

impl Drop for BadDrop {
    fn drop(&mut self) {
        panic!("drop boom")
    }
}

#[test]
fn a_panicking_output_drop_kills_no_worker() {
    let pool = pool(1);
    let (tx, rx) = mpsc::channel::<()>();
    let job = pool
        .try_run(move || {
            let _ = rx.recv();
            BadDrop
        })
        .unwrap();
    drop(job);
    tx.send(()).unwrap();
    assert!(within(LIMIT, pool.wait_idle()).is_some(), "slot leaked");
    assert_eq!(
        within(LIMIT, pool.run(|| 4)),
        Some(Ok(4)),
        "the worker died"
    );
    assert_eq!(pool.stats().jobs_ok, 2);
}
