//! A `Waker` whose `clone` panics, polled into a queued `Run` or a waiting keyed `Acquire`:
//! the panic is the caller's (it comes out of the caller's own poll), but the future keeps
//! its place, so dropping it afterwards withdraws it. No slot is granted to a dead waiter,
//! no phantom demand stays behind, and the key is pruned as usual. A waker whose `drop`
//! panics, dropped when a keyed waiter leaves the line, is contained the same way.

mod common;

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, RawWaker, RawWakerVTable, Waker};
use std::time::{Duration, Instant};

use common::{Latch, bounded, hold};
use futures_lite::StreamExt as _;
use futures_lite::future::block_on;
use loopguard::Fallible;
use loopguard::keyed::KeyedGate;
use loopguard::orphan::OrphanHandler;
use loopguard::pool::Pool;

const LIMIT: Duration = Duration::from_secs(10);

fn clone_panics(_: *const ()) -> RawWaker {
    panic!("waker clone boom")
}
fn no_op(_: *const ()) {}

static CLONE_PANICS: RawWakerVTable = RawWakerVTable::new(clone_panics, no_op, no_op, no_op);

/// A waker whose `clone` panics; waking or dropping it does nothing.
fn clone_panicking_waker() -> Waker {
    // SAFETY: the data pointer is never read, and every vtable function is sound for it
    // on any thread: `clone` panics before making anything, the others do nothing.
    unsafe { Waker::from_raw(RawWaker::new(std::ptr::null(), &CLONE_PANICS)) }
}

/// Polls `future` once with a waker whose clone panics; returns whether that panicked.
fn poll_with_clone_panic<F: Future + Unpin>(future: &mut F) -> bool {
    let waker = clone_panicking_waker();
    let mut cx = Context::from_waker(&waker);
    catch_unwind(AssertUnwindSafe(|| Pin::new(future).poll(&mut cx))).is_err()
}

#[test]
fn a_queued_run_whose_waker_clone_panicked_leaves_the_queue_when_dropped() {
    let pool = Pool::builder()
        .workers(1)
        .no_stuck_reports()
        .build()
        .unwrap();
    let release = Latch::new();
    let holder = hold(&pool, &release);
    let mut run = Box::pin(pool.run(|| 1_u8));
    // The first poll queues the caller, then clones the waker: that panics.
    assert!(poll_with_clone_panic(&mut run), "the clone was not called");
    assert_eq!(pool.waiting(), 1, "the caller is still queued");
    drop(run);
    assert_eq!(pool.waiting(), 0, "dropping it withdrew it");
    release.open();
    block_on(async {
        bounded(LIMIT, holder).await.unwrap();
        // The holder's slot came back to the pool rather than to the dead waiter.
        bounded(LIMIT, pool.wait_idle()).await;
        assert_eq!(pool.in_use(), 0);
        assert_eq!(bounded(LIMIT, pool.run(|| 2_u8)).await, Ok(2));
        // That job's slot goes back just after its delivery (the slot rule).
        bounded(LIMIT, pool.wait_idle()).await;
        assert!(
            pool.try_run(|| ()).is_ok(),
            "try_run refused: the slot leaked"
        );
        bounded(LIMIT, pool.shutdown()).await;
    });
}

#[test]
fn a_keyed_acquire_whose_waker_clone_panicked_leaves_no_phantom_demand() {
    let window = Duration::from_millis(50);
    let gate = KeyedGate::builder("clone").window(window).build().unwrap();
    let permit = gate.try_acquire("busy").unwrap();
    let mut acquire = Box::pin(gate.acquire("busy"));
    assert!(
        poll_with_clone_panic(&mut acquire),
        "the clone was not called"
    );
    drop(acquire);
    assert_eq!(gate.waiting(&"busy"), 0);
    drop(permit);
    assert_eq!(gate.in_use(&"busy"), 0);
    assert_left_no_trace(&gate, window);
    assert!(gate.try_acquire("busy").is_ok());
}

static DROP_ARMED: AtomicBool = AtomicBool::new(false);

fn clone_drop_panicking(_: *const ()) -> RawWaker {
    RawWaker::new(std::ptr::null(), &DROP_PANICS)
}
fn drop_panics(_: *const ()) {
    if DROP_ARMED.load(Ordering::SeqCst) {
        panic!("waker drop boom")
    }
}

static DROP_PANICS: RawWakerVTable =
    RawWakerVTable::new(clone_drop_panicking, no_op, no_op, drop_panics);

#[test]
fn a_keyed_acquire_whose_waker_drop_panics_leaves_the_line_cleanly() {
    let window = Duration::from_millis(50);
    let gate = KeyedGate::builder("drop").window(window).build().unwrap();
    let permit = gate.try_acquire("busy").unwrap();
    let mut acquire = Box::pin(gate.acquire("busy"));
    {
        // SAFETY: as `clone_panicking_waker`: the data pointer is never read, and every
        // vtable function is sound for it on any thread.
        let waker = unsafe { Waker::from_raw(RawWaker::new(std::ptr::null(), &DROP_PANICS)) };
        let mut cx = Context::from_waker(&waker);
        assert!(acquire.as_mut().poll(&mut cx).is_pending(), "it waits");
    }
    // The gate keeps a clone; leaving the line drops it, and that panics.
    DROP_ARMED.store(true, Ordering::SeqCst);
    let dropped = catch_unwind(AssertUnwindSafe(|| drop(acquire)));
    DROP_ARMED.store(false, Ordering::SeqCst);
    assert!(
        dropped.is_ok(),
        "the waker's panic came out of `Acquire::drop`"
    );
    assert_eq!(gate.waiting(&"busy"), 0);
    drop(permit);
    assert_left_no_trace(&gate, window);
}

/// Once the window has passed with nobody holding or waiting, the key `busy` reads no
/// demand and goes away.
fn assert_left_no_trace(gate: &KeyedGate<&'static str>, window: Duration) {
    let later = Instant::now() + 3 * window;
    assert_eq!(
        gate.demand_at(&"busy", later),
        0.0,
        "a phantom unit of demand"
    );
    gate.prune_at(later);
    assert_eq!(gate.tracked_keys(), 0, "the key is never pruned");
}

/// A no-op HTTP service for the tower layer.
#[cfg(feature = "tower")]
#[derive(Clone)]
struct Noop;

#[cfg(feature = "tower")]
impl tower_service::Service<http::Request<()>> for Noop {
    type Response = http::Response<String>;
    type Error = std::convert::Infallible;
    type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Request<()>) -> Self::Future {
        std::future::ready(Ok(http::Response::new("ok".to_string())))
    }
}

#[cfg(feature = "tower")]
#[test]
fn a_waiting_request_whose_waker_clone_panicked_leaves_the_line_when_dropped() {
    use tower_layer::Layer as _;
    use tower_service::Service as _;

    let layer = loopguard::tower::AdmissionLayer::new("test", 1)
        .unwrap()
        .wait_within_deadline();
    let mut service = layer.layer(Noop);
    let held = block_on(service.call(http::Request::new(()))).unwrap();
    let mut waiting = Box::pin(service.call(http::Request::new(())));
    // The first poll joins the line, then clones the waker: that panics.
    assert!(
        poll_with_clone_panic(&mut waiting),
        "the clone was not called"
    );
    assert_eq!(layer.waiting(), 1, "the request is still in line");
    drop(waiting);
    assert_eq!(layer.waiting(), 0, "dropping it withdrew it");
    drop(held);
    assert_eq!(
        layer.in_use(),
        0,
        "the slot came back, not to the dead waiter"
    );
    let next = block_on(service.call(http::Request::new(()))).unwrap();
    assert_eq!(next.status(), http::StatusCode::OK);
}

/// The handler whose clone `clone_reenters` makes: cloning it locks its channel's queue.
static REENTRY_HANDLER: OnceLock<OrphanHandler> = OnceLock::new();
/// How many times `clone_reenters` ran.
static REENTRY_CLONES: AtomicUsize = AtomicUsize::new(0);

fn clone_reenters(data: *const ()) -> RawWaker {
    // Counting a new sender locks the orphan channel's queue: under that lock, this hangs.
    drop(REENTRY_HANDLER.get().expect("the handler is set").clone());
    REENTRY_CLONES.fetch_add(1, Ordering::SeqCst);
    RawWaker::new(data, &CLONE_REENTERS)
}

static CLONE_REENTERS: RawWakerVTable = RawWakerVTable::new(clone_reenters, no_op, no_op, no_op);

/// A waker whose `clone` clones `REENTRY_HANDLER`; waking or dropping it does nothing.
fn clone_reentering_waker() -> Waker {
    // SAFETY: the data pointer is never read, and every vtable function is sound for it on
    // any thread: `clone` returns the same null pointer with this vtable, the others do
    // nothing.
    unsafe { Waker::from_raw(RawWaker::new(std::ptr::null(), &CLONE_REENTERS)) }
}

/// The stored waker's `clone` runs outside the lock of whatever stores it (here the orphan
/// channel's queue, which a waker can reach through a handler clone): a receiver polled
/// with a waker whose `clone` re-enters the queue registers it, then receives.
#[test]
fn an_orphan_receiver_clones_its_waker_outside_its_queue() {
    common::watchdog(LIMIT, || {
        let (handler, mut reports) = OrphanHandler::channel(4);
        assert!(REENTRY_HANDLER.set(handler.clone()).is_ok(), "set once");
        let waker = clone_reentering_waker();
        let mut next = reports.next();
        assert!(
            Pin::new(&mut next)
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        assert_eq!(REENTRY_CLONES.load(Ordering::SeqCst), 1, "stored once");
        drop(next);
        let pool = Pool::builder()
            .workers(1)
            .on_orphan(handler)
            .build()
            .unwrap();
        drop(
            pool.try_run(Fallible(|| Err::<(), _>("expected failure")))
                .unwrap(),
        );
        let report = block_on(reports.next()).expect("the report");
        assert_eq!(report.message(), "\"expected failure\"");
    });
}
