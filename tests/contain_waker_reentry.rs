//! The containment rule, one primitive at a time: loopguard's state is consistent before
//! any waker it stored is woken or dropped, and that happens outside every lock, contained.
//!
//! Each test stores a *hostile* waker (its `wake` and its `Drop` call back into the same
//! primitive, and its `Drop` panics) in a pool's gate, a `Job`, a `Shielded`, a
//! `KeyedGate`, a `Refresh` joiner and an orphan receiver, then makes loopguard let go of
//! it: by a poll with another waker, by a grant, by a drop. Dropping a waker under a lock
//! would re-lock a mutex its thread holds and hang (tokio's `release_permits_at_drop` is the
//! peer test); dropping it before the accounting would leak a slot or strand a waiter.
//! Every test runs under a watchdog, so a deadlock fails it instead of hanging CI.

mod common;

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use common::{Latch, hold, quiet_expected_panics, recording};
use futures_lite::{StreamExt, future};
use loopguard::Fallible;
use loopguard::deadline::Deadline;
use loopguard::keyed::KeyedGate;
use loopguard::orphan::OrphanHandler;
use loopguard::pool::Pool;
use loopguard::refresh::Refresh;
use loopguard::shield::Shield;

const WATCHDOG: Duration = Duration::from_secs(30);

/// A waker whose `wake` runs `on_wake` and whose last drop runs `on_drop`, then panics.
struct Hostile {
    on_wake: Box<dyn Fn() + Send + Sync>,
    on_drop: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    dropped: Arc<AtomicUsize>,
}

impl Wake for Hostile {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        (self.on_wake)();
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.dropped.fetch_add(1, Ordering::SeqCst);
        if let Some(f) = self.on_drop.lock().unwrap().take() {
            f();
        }
        panic!("expected hostile waker drop");
    }
}

/// A hostile waker and a count of its drops (0 until loopguard lets go of its last clone).
fn hostile(
    on_wake: impl Fn() + Send + Sync + 'static,
    on_drop: impl FnOnce() + Send + 'static,
) -> (Waker, Arc<AtomicUsize>) {
    let dropped = Arc::new(AtomicUsize::new(0));
    let waker = Waker::from(Arc::new(Hostile {
        on_wake: Box::new(on_wake),
        on_drop: Mutex::new(Some(Box::new(on_drop))),
        dropped: dropped.clone(),
    }));
    (waker, dropped)
}

/// A waker that does nothing, distinct from every hostile one (so `will_wake` is false).
fn plain() -> Waker {
    struct Plain;
    impl Wake for Plain {
        fn wake(self: Arc<Self>) {}
    }
    Waker::from(Arc::new(Plain))
}

fn poll_with<F: Future + ?Sized>(fut: Pin<&mut F>, waker: &Waker) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(waker))
}

/// Runs `test` under the shared watchdog, with expected panics kept quiet.
fn watchdog(test: impl FnOnce() + Send + 'static) {
    quiet_expected_panics();
    common::watchdog(WATCHDOG, test);
}

/// A pool's view, read from inside a waker: every read takes the gate's or the core's
/// locks, so a waker dropped under one of them would hang here.
fn pool_view(pool: &Pool) -> (usize, usize) {
    let refused = pool.try_run(|| ()).is_err();
    assert!(refused || pool.capacity() > 0);
    (pool.in_use(), pool.waiting())
}

#[test]
fn a_queued_run_re_polled_with_a_new_waker_drops_the_old_one_outside_the_gate() {
    watchdog(|| {
        let pool = Pool::builder().workers(1).build().unwrap();
        let release = Latch::new();
        let holder = hold(&pool, &release);
        let mut run = Box::pin(pool.run(|| 5_u8));
        let seen = Arc::new(Mutex::new(None));
        let (p, s) = (pool.clone(), seen.clone());
        let (a, dropped) = hostile(|| {}, move || *s.lock().unwrap() = Some(pool_view(&p)));
        assert!(poll_with(run.as_mut(), &a).is_pending());
        drop(a);
        // The gate lets go of `a`: its `Drop` reads the gate and panics, contained.
        assert!(poll_with(run.as_mut(), &plain()).is_pending());
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        assert_eq!(
            *seen.lock().unwrap(),
            Some((1, 1)),
            "in use 1, this run waiting"
        );
        release.open();
        future::block_on(holder).unwrap();
        assert_eq!(future::block_on(run), Ok(5));
        future::block_on(pool.wait_idle());
        assert_eq!((pool.in_use(), pool.waiting()), (0, 0));
    });
}

#[test]
fn a_queued_runs_old_waker_may_close_the_pool_from_its_drop() {
    watchdog(|| {
        let pool = Pool::builder().workers(1).build().unwrap();
        let release = Latch::new();
        let holder = hold(&pool, &release);
        let mut run = Box::pin(pool.run(|| 5_u8));
        let p = pool.clone();
        // Closing takes the gate's queue and every waiter's waker lock: a waker dropped
        // under its waiter's lock would hang here.
        let (a, dropped) = hostile(|| {}, move || assert!(p.close()));
        assert!(poll_with(run.as_mut(), &a).is_pending());
        drop(a);
        // The close lands inside this very poll, after the waker went: the run sees it.
        let polled = poll_with(run.as_mut(), &plain());
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        assert!(pool.is_closed());
        assert_eq!(polled, Poll::Ready(Err(loopguard::pool::RunError::Closed)));
        release.open();
        future::block_on(holder).unwrap();
        future::block_on(pool.shutdown());
        assert_eq!((pool.in_use(), pool.waiting()), (0, 0));
    });
}

#[test]
fn a_granted_run_whose_waker_wakes_into_the_pool_is_admitted() {
    watchdog(|| {
        let pool = Pool::builder().workers(1).build().unwrap();
        let release = Latch::new();
        let holder = hold(&pool, &release);
        let mut run = Box::pin(pool.run(|| 6_u8));
        let woken = Arc::new(Mutex::new(None));
        let (p, w) = (pool.clone(), woken.clone());
        let (a, dropped) = hostile(move || *w.lock().unwrap() = Some(pool_view(&p)), || {});
        assert!(poll_with(run.as_mut(), &a).is_pending());
        drop(a);
        // The worker hands the slot over and wakes `a` (which reads the pool), then lets
        // go of it (its drop panics): all contained, on the worker thread.
        release.open();
        future::block_on(holder).unwrap();
        while dropped.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        assert_eq!(
            *woken.lock().unwrap(),
            Some((1, 0)),
            "granted: held, nobody waiting"
        );
        assert_eq!(future::block_on(run), Ok(6));
        future::block_on(pool.wait_idle());
        assert_eq!((pool.in_use(), pool.waiting()), (0, 0));
    });
}

#[test]
fn a_queued_run_dropped_settles_its_accounting_before_its_waker_goes() {
    watchdog(|| {
        let pool = Pool::builder().workers(1).build().unwrap();
        let release = Latch::new();
        let holder = hold(&pool, &release);
        let mut run = Box::pin(pool.run(|| 7_u8));
        let seen = Arc::new(Mutex::new(None));
        let (p, s) = (pool.clone(), seen.clone());
        let (a, dropped) = hostile(|| {}, move || *s.lock().unwrap() = Some(pool_view(&p)));
        assert!(poll_with(run.as_mut(), &a).is_pending());
        drop(a);
        let dropping = catch_unwind(AssertUnwindSafe(|| drop(run)));
        assert!(dropping.is_ok(), "the waker's panic came out of Run's drop");
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        assert_eq!(
            *seen.lock().unwrap(),
            Some((1, 0)),
            "the run had left the line"
        );
        release.open();
        future::block_on(holder).unwrap();
        future::block_on(pool.wait_idle());
        assert_eq!((pool.in_use(), pool.waiting()), (0, 0));
        assert_eq!(future::block_on(pool.run(|| 8_u8)), Ok(8));
    });
}

#[test]
fn a_job_lets_go_of_its_wakers_outside_its_hand_off() {
    watchdog(|| {
        let (handler, reports) = recording();
        let pool = Pool::builder()
            .workers(1)
            .on_orphan(handler)
            .build()
            .unwrap();
        let release = Latch::new();
        let r = release.clone();
        let mut job = pool.try_run(move || r.wait()).unwrap();
        let seen = Arc::new(Mutex::new(None));
        let (j, s) = (pool.clone(), seen.clone());
        let (a, dropped) = hostile(|| {}, move || *s.lock().unwrap() = Some(pool_view(&j)));
        assert!(poll_with(Pin::new(&mut job), &a).is_pending());
        drop(a);
        assert!(poll_with(Pin::new(&mut job), &plain()).is_pending());
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        assert_eq!(*seen.lock().unwrap(), Some((1, 0)));
        release.open();
        assert_eq!(future::block_on(job), Ok(()));

        // Dropped while it stores a hostile waker: orphaned, the failure reported once,
        // the waker's drop (which reads the pool's reports) contained.
        future::block_on(pool.wait_idle());
        let release = Latch::new();
        let r = release.clone();
        let mut job = pool
            .try_run(Fallible(move || {
                r.wait();
                Err::<(), _>("expected failure")
            }))
            .unwrap();
        let p = pool.clone();
        let (a, dropped) = hostile(
            || {},
            move || {
                let _ = pool_view(&p);
            },
        );
        assert!(poll_with(Pin::new(&mut job), &a).is_pending());
        drop(a);
        assert!(catch_unwind(AssertUnwindSafe(|| drop(job))).is_ok());
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        release.open();
        future::block_on(pool.wait_idle());
        assert_eq!(reports.lock().unwrap().len(), 1);
        assert_eq!(pool.in_use(), 0);
    });
}

#[test]
fn a_shielded_lets_go_of_its_wakers_outside_its_hand_off() {
    watchdog(|| {
        let (handler, reports) = recording();
        let shield = Shield::with_handler("hostile", handler).unwrap();
        let gate = Arc::new(Latch::new());
        let g = gate.clone();
        let (runner, mut handle) = shield.wrap(Fallible(async move {
            // Blocks the runner's thread until the test opens the latch.
            g.wait();
            Err::<(), _>("expected failure")
        }));
        let s = shield.clone();
        let (a, dropped) = hostile(|| {}, move || assert_eq!(s.orphaned_failures(), 0));
        assert!(poll_with(Pin::new(&mut handle), &a).is_pending());
        drop(a);
        assert!(poll_with(Pin::new(&mut handle), &plain()).is_pending());
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        // Stores a second hostile waker, then is dropped: orphaned, reported once.
        let s = shield.clone();
        let (b, dropped) = hostile(
            || {},
            move || {
                let _ = s.orphaned_failures();
            },
        );
        assert!(poll_with(Pin::new(&mut handle), &b).is_pending());
        drop(b);
        assert!(catch_unwind(AssertUnwindSafe(|| drop(handle))).is_ok());
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        gate.open();
        future::block_on(runner);
        assert_eq!(reports.lock().unwrap().len(), 1);
        assert_eq!(shield.orphaned_failures(), 1);
    });
}

#[test]
fn a_keyed_acquire_lets_go_of_its_wakers_outside_the_gate() {
    watchdog(|| {
        let gate: KeyedGate<&'static str> = KeyedGate::new("hostile").unwrap();
        let held = gate.try_acquire("k").unwrap();
        let mut acquire = Box::pin(gate.acquire("k"));
        let seen = Arc::new(Mutex::new(None));
        let (g, s) = (gate.clone(), seen.clone());
        let (a, dropped) = hostile(
            || {},
            move || {
                let busy = g.try_acquire("k").is_err();
                *s.lock().unwrap() = Some((g.in_use(&"k"), g.waiting(&"k"), busy));
            },
        );
        assert!(poll_with(acquire.as_mut(), &a).is_pending());
        drop(a);
        assert!(poll_with(acquire.as_mut(), &plain()).is_pending());
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        assert_eq!(*seen.lock().unwrap(), Some((1, 1, true)));

        // The poll that admits it lets go of a hostile waker stored before the grant.
        let g = gate.clone();
        let (b, dropped) = hostile(
            move || {
                let _ = g.in_use(&"other");
            },
            || {},
        );
        assert!(poll_with(acquire.as_mut(), &b).is_pending());
        drop(b);
        drop(held);
        let permit = match poll_with(acquire.as_mut(), &plain()) {
            Poll::Ready(permit) => permit,
            Poll::Pending => panic!("the released slot went to the waiter"),
        };
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        assert_eq!((gate.in_use(&"k"), gate.waiting(&"k")), (1, 0));
        drop(permit);

        // A queued acquire dropped with a hostile waker: out of the line, nothing held.
        let held = gate.try_acquire("k").unwrap();
        let mut acquire = Box::pin(gate.acquire("k"));
        let g = gate.clone();
        let (c, dropped) = hostile(|| {}, move || assert_eq!(g.waiting(&"k"), 0));
        assert!(poll_with(acquire.as_mut(), &c).is_pending());
        drop(c);
        assert!(catch_unwind(AssertUnwindSafe(|| drop(acquire))).is_ok());
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        drop(held);
        assert_eq!((gate.in_use(&"k"), gate.waiting(&"k")), (0, 0));
    });
}

#[test]
fn a_refresh_joiner_lets_go_of_its_waker_outside_the_cache() {
    watchdog(|| {
        let pool = Pool::builder().workers(1).build().unwrap();
        let release = Latch::new();
        let r = release.clone();
        let cache: Refresh<u8, String> = Refresh::builder("hostile")
            .ttl(Duration::from_secs(60))
            .on_pool(&pool, move || {
                r.wait();
                Ok(9)
            })
            .unwrap();
        let mut starter = Box::pin(cache.get(Deadline::never()));
        let mut joiner = Box::pin(cache.get(Deadline::never()));
        assert!(poll_with(starter.as_mut(), &plain()).is_pending());
        let c = cache.clone();
        let (a, dropped) = hostile(
            || {},
            move || assert_eq!(c.peek_at(std::time::Instant::now()), None),
        );
        assert!(poll_with(joiner.as_mut(), &a).is_pending());
        drop(a);
        assert!(poll_with(joiner.as_mut(), &plain()).is_pending());
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        // A second hostile joiner is woken by the collection (its wake reads the cache).
        let c = cache.clone();
        let (b, dropped) = hostile(
            move || assert_eq!(c.peek_at(std::time::Instant::now()), Some(9)),
            || {},
        );
        let mut third = Box::pin(cache.get(Deadline::never()));
        assert!(poll_with(third.as_mut(), &b).is_pending());
        drop(b);
        release.open();
        assert_eq!(future::block_on(starter).unwrap(), 9);
        assert_eq!(future::block_on(joiner).unwrap(), 9);
        assert_eq!(future::block_on(third).unwrap(), 9);
        drop(cache);
        assert!(dropped.load(Ordering::SeqCst) <= 1);
    });
}

#[test]
fn an_orphan_receiver_lets_go_of_its_waker_outside_its_queue_and_loses_no_report() {
    watchdog(|| {
        let (handler, mut reports) = OrphanHandler::channel(8);
        let pool = Pool::builder()
            .workers(1)
            .on_orphan(handler)
            .build()
            .unwrap();
        let p = pool.clone();
        let (a, dropped) = hostile(
            || {},
            move || {
                let _ = pool_view(&p);
            },
        );
        {
            let mut next = reports.next();
            assert!(poll_with(Pin::new(&mut next), &a).is_pending());
        }
        drop(a);
        let p = pool.clone();
        let (b, _) = hostile(
            move || {
                let _ = pool_view(&p);
            },
            || {},
        );
        {
            let mut next = reports.next();
            assert!(poll_with(Pin::new(&mut next), &b).is_pending());
        }
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        drop(b);
        // A failure nobody awaits: the worker queues it and wakes `b` (its wake reads the
        // pool, its drop panics), contained on the worker; the report is there.
        future::block_on(pool.wait_idle());
        drop(
            pool.try_run(Fallible(|| Err::<(), _>("expected failure")))
                .unwrap(),
        );
        future::block_on(pool.wait_idle());
        let report = future::block_on(reports.next()).expect("the report");
        assert_eq!(report.message(), "\"expected failure\"");
        assert_eq!(pool.in_use(), 0);
    });
}

/// A request waiting in line behind the tower layer, holding a waker whose `Drop` reads the
/// layer and panics: re-polled with another waker, then dropped, it leaves the line cleanly
/// and leaks no slot.
#[cfg(feature = "tower")]
#[test]
fn a_waiting_tower_request_lets_go_of_its_waker_after_leaving_the_line() {
    use loopguard::tower::AdmissionLayer;
    use tower_layer::Layer;
    use tower_service::Service;

    #[derive(Clone)]
    struct Hello;
    impl Service<http::Request<()>> for Hello {
        type Response = http::Response<&'static str>;
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<Self::Response, Self::Error>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, _: http::Request<()>) -> Self::Future {
            std::future::ready(Ok(http::Response::new("hello")))
        }
    }

    watchdog(|| {
        let layer = AdmissionLayer::new("hostile-edge", 1)
            .unwrap()
            .wait_within_deadline();
        let mut service = layer.layer(Hello);
        let first = future::block_on(service.call(http::Request::new(()))).unwrap();
        let mut waiting = Box::pin(service.call(http::Request::new(())));
        let seen = Arc::new(Mutex::new(None));
        let (l, s) = (layer.clone(), seen.clone());
        let (a, dropped) = hostile(
            || {},
            move || *s.lock().unwrap() = Some((l.in_use(), l.waiting())),
        );
        assert!(poll_with(waiting.as_mut(), &a).is_pending());
        drop(a);
        // Re-polled with another waker: the old one goes, outside the gate, contained.
        assert!(poll_with(waiting.as_mut(), &plain()).is_pending());
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        assert_eq!(*seen.lock().unwrap(), Some((1, 1)));
        // A second hostile waker, then the request leaves: out of the line, nothing held.
        let l = layer.clone();
        let (b, dropped) = hostile(|| {}, move || assert_eq!(l.waiting(), 0));
        assert!(poll_with(waiting.as_mut(), &b).is_pending());
        drop(b);
        assert!(catch_unwind(AssertUnwindSafe(|| drop(waiting))).is_ok());
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        drop(first);
        assert_eq!((layer.in_use(), layer.waiting()), (0, 0));
        let again = future::block_on(service.call(http::Request::new(()))).unwrap();
        assert_eq!(again.status(), http::StatusCode::OK);
    });
}
