//! Shielded work can be counted and drained: `Shield::in_flight` counts work not yet
//! finished, `Shield::wait_idle` resolves when none is left, after every orphaned failure
//! was reported; an awaiting handle is woken only once its work no longer counts; a runner
//! dropped unspawned (or mid-run, or by a panicking `Drop`) resolves its handle to
//! `RunnerDropped` and leaves the count right. No sleeps: the tests wait on the shield.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use common::{bounded, poll_once};
use loopguard::Fallible;
use loopguard::orphan::{OrphanHandler, Report};
use loopguard::shield::{Shield, ShieldError, ShieldWaitIdle};

const LIMIT: Duration = Duration::from_secs(30);

/// Awaits `fut`, panicking once `limit` has passed even if `fut` would be ready by then:
/// a wait that is not woken fails instead of being rescued by the watchdog's own wake-up
/// (`common::bounded` polls `fut` first, so a late poll there can still succeed).
async fn promptly<F: Future>(limit: Duration, fut: F) -> F::Output {
    let watchdog = async {
        async_io::Timer::after(limit).await;
        panic!("not woken within {limit:?}");
    };
    futures_lite::future::or(watchdog, fut).await
}

/// A shield whose handler records every report.
fn recording(name: &str) -> (Shield, Arc<Mutex<Vec<Report>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let handler = OrphanHandler::new(move |report| sink.lock().unwrap().push(report.clone()));
    (Shield::with_handler(name, handler).unwrap(), seen)
}

const WORK: usize = 8;

on_every_executor! {
    async fn orphaned_work_on_other_threads_is_drained_at_shutdown() {
        common::quiet_expected_panics();
        let (shield, seen) = recording("drain");
        let (gate, opened) = smol::channel::bounded::<()>(1);
        let mut runners = Vec::new();
        for i in 0..WORK {
            let opened = opened.clone();
            let (runner, handle) = shield.wrap(Fallible(async move {
                // Ends when the gate closes.
                let _ = opened.recv().await;
                if i % 4 == 3 {
                    panic!("expected shielded boom {i}");
                }
                Err::<(), _>(format!("failed {i}"))
            }));
            drop(handle); // orphaned: only the handler will hear of a failure
            runners.push(std::thread::spawn(move || futures_lite::future::block_on(runner)));
        }
        assert_eq!(shield.in_flight(), WORK);

        let mut idle = Box::pin(shield.wait_idle());
        assert!(poll_once(&mut idle).await.is_none(), "work is in flight");
        assert!(format!("{idle:?}").contains("in_flight: 8"), "{idle:?}");
        gate.close();
        promptly(LIMIT, idle).await;

        // Nothing left, and every failure reported by the time the wait resolved.
        assert_eq!(shield.in_flight(), 0);
        assert_eq!(seen.lock().unwrap().len(), WORK, "{:?}", seen.lock().unwrap());
        assert_eq!(shield.orphaned_failures(), WORK as u64);
        for runner in runners {
            runner.join().unwrap();
        }
    }
}

on_every_executor! {
    async fn wait_idle_is_ready_at_once_when_nothing_is_in_flight_and_clones_share_the_count() {
        let (shield, _) = recording("idle");
        promptly(LIMIT, shield.wait_idle()).await;
        let clone = shield.clone();
        let (runner, handle) = clone.wrap(async { 5 });
        assert_eq!((shield.in_flight(), clone.in_flight()), (1, 1));
        let mut idle = Box::pin(shield.wait_idle());
        assert!(poll_once(&mut idle).await.is_none());
        runner.await;
        promptly(LIMIT, idle).await;
        assert_eq!(handle.await, Ok(5));
        assert_eq!(shield.in_flight(), 0);
    }
}

on_every_executor! {
    async fn a_runner_dropped_unspawned_or_mid_run_resolves_its_handle_and_the_count() {
        let (shield, seen) = recording("dropped");
        let (runner, handle) = shield.wrap(Fallible(async { Err::<(), _>("never ran") }));
        assert_eq!(shield.in_flight(), 1);
        let mut idle = Box::pin(shield.wait_idle());
        assert!(poll_once(&mut idle).await.is_none());
        drop(runner);
        promptly(LIMIT, idle).await;
        assert_eq!(shield.in_flight(), 0);
        assert_eq!(bounded(LIMIT, handle).await, Err(ShieldError::RunnerDropped));

        // Mid-run, with the handle waiting; and with the handle gone too.
        let (_gate, opened) = smol::channel::bounded::<()>(1);
        let (runner, mut handle) = shield.wrap(async move { opened.recv().await });
        let (other, orphan) = shield.wrap(async { 1 });
        drop(orphan);
        let mut runner = Box::pin(runner);
        assert!(poll_once(&mut runner).await.is_none());
        assert!(poll_once(&mut handle).await.is_none());
        assert_eq!(shield.in_flight(), 2);
        drop(runner);
        drop(other);
        assert_eq!(shield.in_flight(), 0);
        assert_eq!(bounded(LIMIT, handle).await, Err(ShieldError::RunnerDropped));
        promptly(LIMIT, shield.wait_idle()).await;
        assert!(seen.lock().unwrap().is_empty(), "cancelled work reports nothing");
    }
}

/// Records what `in_flight` read at the moment it was woken.
struct ReadAtWake {
    shield: Shield,
    read: Mutex<Option<usize>>,
}

impl Wake for ReadAtWake {
    fn wake(self: Arc<Self>) {
        *self.read.lock().unwrap() = Some(self.shield.in_flight());
    }
}

fn read_at_wake(shield: &Shield) -> Arc<ReadAtWake> {
    Arc::new(ReadAtWake {
        shield: shield.clone(),
        read: Mutex::new(None),
    })
}

/// The awaiting side is woken only once its work no longer counts, so a caller that checks
/// (or drains) right after its handle resolved never finds its own work still in flight.
#[test]
fn a_handle_is_woken_after_its_work_stopped_counting() {
    let (shield, _) = recording("woken");
    for finish_by_drop in [false, true] {
        let (runner, handle) = shield.wrap(async { 3 });
        let mut handle = Box::pin(handle);
        let probe = read_at_wake(&shield);
        let waker = Waker::from(probe.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(handle.as_mut().poll(&mut cx).is_pending());
        if finish_by_drop {
            drop(runner);
            assert_eq!(
                handle.as_mut().poll(&mut cx),
                Poll::Ready(Err(ShieldError::RunnerDropped))
            );
        } else {
            futures_lite::future::block_on(runner);
            assert_eq!(handle.as_mut().poll(&mut cx), Poll::Ready(Ok(3)));
        }
        assert_eq!(*probe.read.lock().unwrap(), Some(0), "read at the wake-up");
    }
}

/// An orphaned failure still counts while its handler runs: a drain cannot resolve before
/// the report is out.
#[test]
fn an_orphaned_failure_counts_until_its_report_is_out() {
    let reads = Arc::new(Mutex::new(Vec::new()));
    let shield_slot: Arc<Mutex<Option<Shield>>> = Arc::default();
    let (r, s) = (reads.clone(), shield_slot.clone());
    let shield = Shield::with_handler(
        "counted",
        OrphanHandler::new(move |_| {
            let shield = s.lock().unwrap().clone().expect("set below");
            r.lock().unwrap().push(shield.in_flight());
        }),
    )
    .unwrap();
    *shield_slot.lock().unwrap() = Some(shield.clone());
    // Orphaned before it finished: the runner reports.
    let (runner, handle) = shield.wrap(Fallible(async { Err::<(), _>("late") }));
    drop(handle);
    futures_lite::future::block_on(runner);
    assert_eq!(shield.in_flight(), 0);
    // Finished before the handle's drop: the work no longer counts; the drop reports.
    let (runner, handle) = shield.wrap(Fallible(async { Err::<(), _>("early") }));
    futures_lite::future::block_on(runner);
    assert_eq!(shield.in_flight(), 0);
    drop(handle);
    assert_eq!(*reads.lock().unwrap(), vec![1, 0]);
    // The handler holds a clone of the shield: let it go.
    shield_slot.lock().unwrap().take();
}

/// A future whose `Drop` panics.
struct PanicOnDrop;

impl Future for PanicOnDrop {
    type Output = ();

    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        Poll::Pending
    }
}

impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        panic!("expected drop boom")
    }
}

/// An executor dropping a runner whose future's `Drop` panics: the panic is the
/// executor's to see, but the handle still resolves and the count is still right.
#[test]
fn a_runner_whose_future_panics_in_drop_still_leaves_the_count_right() {
    common::quiet_expected_panics();
    let (shield, _) = recording("drop-boom");
    let (runner, handle) = shield.wrap(PanicOnDrop);
    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(runner)));
    assert!(dropped.is_err(), "the future's own panic");
    assert_eq!(shield.in_flight(), 0);
    assert_eq!(
        futures_lite::future::block_on(bounded(LIMIT, handle)),
        Err(ShieldError::RunnerDropped)
    );
}

/// Shutdown on smol's global executor: work spawned and detached, handles dropped, one
/// `wait_idle` on the loop, then every report is in.
#[test]
fn drained_on_smol() {
    let (shield, seen) = recording("smol");
    smol::block_on(async {
        let (gate, opened) = smol::channel::bounded::<()>(1);
        for i in 0..WORK {
            let opened = opened.clone();
            let work = Fallible(async move {
                let _ = opened.recv().await;
                Err::<(), _>(i)
            });
            drop(shield.spawn(work, |runner| smol::spawn(runner).detach()));
        }
        gate.close();
        promptly(LIMIT, shield.wait_idle()).await;
    });
    assert_eq!(shield.in_flight(), 0);
    assert_eq!(seen.lock().unwrap().len(), WORK);
}

/// `!Send` work on a `LocalExecutor`, drained from a task of the same executor.
#[test]
fn drained_on_a_local_executor() {
    let (shield, seen) = recording("local");
    let ex = async_executor::LocalExecutor::new();
    futures_lite::future::block_on(ex.run(async {
        let (gate, opened) = smol::channel::bounded::<()>(1);
        for i in 0..WORK {
            let local = std::rc::Rc::new(i);
            let opened = opened.clone();
            let work = Fallible(async move {
                let _ = opened.recv().await;
                Err::<(), _>(*local)
            });
            drop(shield.spawn(work, |runner| ex.spawn(runner).detach()));
        }
        let idle = shield.wait_idle();
        gate.close();
        promptly(LIMIT, idle).await;
    }));
    assert_eq!(shield.in_flight(), 0);
    assert_eq!(seen.lock().unwrap().len(), WORK);
}

#[test]
fn auto_traits() {
    fn send_sync_unpin<T: Send + Sync + Unpin>() {}
    send_sync_unpin::<ShieldWaitIdle<'static>>();
    send_sync_unpin::<Shield>();
}
