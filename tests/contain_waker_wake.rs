//! Wakers loopguard calls through `event-listener` / `async-channel` rather than
//! through its own contained `wake`. The crate docs promise that a panicking `Waker::wake`
//! "is contained: the other waiters are still woken, the slot still handed on", and that
//! a contained panic "kills no worker, leaks no slot, strands no waiter and loses no
//! report". Each test here registers one task whose waker panics with the piece under
//! review and checks that promise.
//!
//! Every test is bounded (a watchdog, or a deadline) and orders its events with latches,
//! counters and the pool's own state, never with sleeps.

mod common;

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::{Arc, mpsc};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use common::{Counter, Latch, bounded, hold, quiet_expected_panics, recording};
use futures_lite::Stream;
use futures_lite::future;
use loopguard::deadline::Deadline;
use loopguard::orphan::{OrphanHandler, ReportKind};
use loopguard::pool::Pool;
use loopguard::refresh::Refresh;
use loopguard::shield::Shield;

const LIMIT: Duration = Duration::from_secs(10);
const BOOM: &str = "expected waker boom";

/// A waker whose `wake` panics, as a buggy executor's might; it counts its calls first.
struct PanickingWaker(Counter);

impl Wake for PanickingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.add();
        panic!("{BOOM}");
    }
}

fn panicking_waker() -> Waker {
    counted_panicking_waker(Counter::new())
}

fn counted_panicking_waker(woken: Counter) -> Waker {
    Waker::from(Arc::new(PanickingWaker(woken)))
}

/// Polls `fut` once with `waker`.
fn poll_with<F: Future + ?Sized>(fut: Pin<&mut F>, waker: &Waker) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(waker))
}

/// The scheduler state letter (`R`, `S`, ...) of this process's thread named `name`.
fn thread_state(name: &str) -> Option<char> {
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let dir = task.ok()?.path();
        let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
        if comm.trim_end() == name {
            let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
            // `pid (comm) S ...`: the state follows the last ')'.
            let after = &stat[stat.rfind(')')? + 2..];
            return after.chars().next();
        }
    }
    None
}

/// Waits until thread `name` is blocked (state `S`) on several reads in a row: a parked
/// worker. Bounded by `LIMIT`.
fn wait_parked(name: &str) {
    let start = Instant::now();
    let mut in_a_row = 0;
    while in_a_row < 20 {
        assert!(start.elapsed() < LIMIT, "thread {name} never parked");
        if thread_state(name) == Some('S') {
            in_a_row += 1;
        } else {
            in_a_row = 0;
        }
        std::thread::yield_now();
    }
}

/// `shutdown()` hangs when the last slot of a closed pool is released into a `wait_idle`
/// listener whose waker panics, if the release (`Permit`'s drop) called `idle.notify`
/// (user wakers) before `workers.wake_all()` and the panic were not contained: it would
/// skip the wake-up of the parked workers and they would never see the pool is done.
#[test]
fn shutdown_completes_when_a_wait_idle_waker_panics() {
    quiet_expected_panics();
    let pool = Pool::builder().name("rv-idle").workers(2).build().unwrap();
    let release = Latch::new();
    let (tx, rx) = mpsc::channel();
    let started = Counter::new();
    let job = {
        let (release, started) = (release.clone(), started.clone());
        pool.try_run(move || {
            let _ = tx.send(std::thread::current().name().unwrap().to_string());
            started.add();
            release.wait();
        })
        .unwrap()
    };
    started.wait_for(1);
    let busy = rx.recv().unwrap();
    let other = if busy == "rv-idle-0" {
        "rv-idle-1"
    } else {
        "rv-idle-0"
    };

    // A task waits for the pool to go idle; its executor's waker panics.
    let mut idle = Box::pin(pool.wait_idle());
    assert!(poll_with(idle.as_mut(), &panicking_waker()).is_pending());

    pool.close();
    // The idle worker was woken by `close`, saw a job still running and parked again.
    wait_parked(other);
    release.open();
    drop(job);
    // Not dropped: its listener was left `Notified` by a panicking wake, and removing it
    // underflows event-listener's count (a panic in debug builds, a dead `Event` in
    // release builds; see the test below).
    std::mem::forget(idle);

    // Every thread must exit: shutdown may not hang.
    future::block_on(bounded(LIMIT, pool.shutdown()));
}

/// A second `wait_idle` caller is stranded when the first one's waker panics: the
/// notification loop of `idle.notify(usize::MAX)` stops at the panic.
#[test]
fn wait_idle_wakes_every_waiter_when_one_waker_panics() {
    quiet_expected_panics();
    let pool = Pool::builder().name("rv-idle2").workers(1).build().unwrap();
    let release = Latch::new();
    let job = hold(&pool, &release);

    let mut first = Box::pin(pool.wait_idle());
    assert!(poll_with(first.as_mut(), &panicking_waker()).is_pending());
    let mut second = Box::pin(pool.wait_idle());
    future::block_on(async {
        assert!(future::poll_once(second.as_mut()).await.is_none());
    });

    release.open();
    drop(job);
    std::mem::forget(first);
    // The slot was released (in_use == 0), yet the second waiter must still be woken.
    future::block_on(bounded(LIMIT, second));
}

/// The stuck monitor dies when a channel handler's receiver task has a panicking waker:
/// `Sender::push` -> `async_channel::Sender::try_send` wakes the receiver's task inside
/// the monitor thread, outside any `contain`. Every later stuck job goes unreported.
#[test]
fn monitor_reports_later_stuck_jobs_after_a_receiver_waker_panics() {
    quiet_expected_panics();
    let (handler, mut reports) = OrphanHandler::channel(16);
    let pool = Pool::builder()
        .name("rv-monitor")
        .workers(1)
        .stuck_after(Duration::from_millis(30))
        .on_orphan(handler)
        .build()
        .unwrap();
    // The loop's report task polled the stream once; its executor's waker panics.
    assert!(
        Pin::new(&mut reports)
            .poll_next(&mut Context::from_waker(&panicking_waker()))
            .is_pending()
    );

    let first = Latch::new();
    let job = hold(&pool, &first);
    let report = future::block_on(bounded(LIMIT, reports.recv())).unwrap();
    assert_eq!(report.kind(), ReportKind::Stuck);
    first.open();
    drop(job);
    future::block_on(pool.wait_idle());

    // A second job gets stuck: it must be reported too (the threshold is 30 ms; allow
    // the monitor 100 times that).
    let second = Latch::new();
    let job = hold(&pool, &second);
    let report = future::block_on(async {
        future::or(async { reports.recv().await.map(|r| r.kind()) }, async {
            async_io::Timer::after(Duration::from_secs(3)).await;
            None
        })
        .await
    });
    second.open();
    drop(job);
    // Its stream listener was left `Notified` by the panicking wake: see above.
    std::mem::forget(reports);
    assert_eq!(
        report,
        Some(ReportKind::Stuck),
        "the second stuck job was never reported (stuck_jobs = {})",
        pool.stats().stuck_jobs
    );
}

/// Dropping a `Job` whose failure is ready reports it on the dropping thread; with a
/// channel handler whose receiver's waker panics, that panic escapes `Job::drop`
/// (`Handoff::orphan` is documented "Never panics"). A `Drop` that panics while the
/// caller unwinds aborts the process.
#[test]
fn dropping_a_failed_job_does_not_panic_when_the_receiver_waker_panics() {
    quiet_expected_panics();
    let (handler, mut reports) = OrphanHandler::channel(16);
    let pool = Pool::builder()
        .name("rv-drop")
        .workers(1)
        .on_orphan(handler)
        .build()
        .unwrap();
    let job = pool
        .try_run(|| -> () { panic!("expected job boom") })
        .unwrap();
    future::block_on(pool.wait_idle());
    assert!(job.is_finished());
    assert!(
        Pin::new(&mut reports)
            .poll_next(&mut Context::from_waker(&panicking_waker()))
            .is_pending()
    );
    let dropped = catch_unwind(AssertUnwindSafe(|| drop(job)));
    // The report itself was queued before the wake-up.
    let queued = reports.try_recv().map(|r| r.kind());
    std::mem::forget(reports);
    assert_eq!(queued, Some(ReportKind::Panicked));
    assert!(dropped.is_ok(), "Job::drop panicked");
}

/// The same for a `Shielded` handle.
#[test]
fn dropping_a_failed_shielded_does_not_panic_when_the_receiver_waker_panics() {
    quiet_expected_panics();
    let (handler, mut reports) = OrphanHandler::channel(16);
    let shield = Shield::with_handler("rv-shield", handler).unwrap();
    let (runner, handle) = shield.wrap(async { panic!("expected shield boom") });
    future::block_on(runner);
    assert!(
        Pin::new(&mut reports)
            .poll_next(&mut Context::from_waker(&panicking_waker()))
            .is_pending()
    );
    let dropped = catch_unwind(AssertUnwindSafe(|| drop(handle)));
    let queued = reports.try_recv().map(|r| r.kind());
    std::mem::forget(reports);
    assert_eq!(queued, Some(ReportKind::Panicked));
    assert!(dropped.is_ok(), "Shielded::drop panicked");
}

/// A refresh collection wakes its joiners with `event.notify(usize::MAX)` on the worker
/// thread (`Flight::complete`). One joiner's panicking waker (a) strands the joiners
/// queued behind it until their deadline and (b) turns the successful collection into a
/// panicked job, which the starter then reports to the orphan handler as a failure.
#[test]
fn a_refresh_joiner_waker_panic_strands_no_joiner_and_reports_nothing() {
    quiet_expected_panics();
    let (handler, reports) = recording();
    let pool = Pool::builder()
        .name("rv-refresh")
        .workers(1)
        .on_orphan(handler)
        .build()
        .unwrap();
    let release = Latch::new();
    let started = Counter::new();
    let refresh = {
        let (release, started) = (release.clone(), started.clone());
        Refresh::builder("rv-refresh")
            .ttl(Duration::from_secs(60))
            .on_pool(&pool, move || {
                started.add();
                release.wait();
                Ok::<u32, String>(7)
            })
            .unwrap()
    };

    // The starter, on its own thread.
    let starter = {
        let refresh = refresh.clone();
        std::thread::spawn(move || {
            future::block_on(refresh.get(Deadline::after(Duration::from_secs(30))))
        })
    };
    started.wait_for(1);

    // Joiner B: its executor's waker panics.
    let mut b = Box::pin(refresh.get(Deadline::never()));
    assert!(poll_with(b.as_mut(), &panicking_waker()).is_pending());
    // Joiner C, queued behind B, with a 5 s budget.
    let c = {
        let refresh = refresh.clone();
        std::thread::spawn(move || {
            future::block_on(refresh.get(Deadline::after(Duration::from_secs(5))))
        })
    };
    let start = Instant::now();
    while refresh.stats().joins < 2 {
        assert!(start.elapsed() < LIMIT, "joiner C never joined");
        std::thread::yield_now();
    }

    release.open();
    let starter = starter.join().unwrap();
    std::mem::forget(b);
    let c = c.join().unwrap();
    future::block_on(pool.wait_idle());
    assert_eq!(starter, Ok(7));
    assert_eq!(refresh.stats().runs_ok, 1);
    let seen: Vec<String> = reports
        .lock()
        .unwrap()
        .iter()
        .map(|r| format!("{:?}: {}", r.kind(), r.message()))
        .collect();
    assert_eq!(c, Ok(7), "joiner C was stranded until its deadline");
    assert!(
        seen.is_empty(),
        "a successful collection was reported: {seen:?}"
    );
}

/// Worse than one lost wake-up: event-listener marks a listener `Notified` *before*
/// calling its waker and bumps its `notified` count after, so a panicking waker leaves
/// the count one short. Removing that listener (dropping the `wait_idle` future, as any
/// caller that gives up does) then underflows it: a panic in debug builds; in release
/// builds the count wraps to `usize::MAX` and every later `notify` of the pool's idle
/// event wakes nobody, so `wait_idle` never resolves again. Run in both profiles:
/// `cargo test --test review_contain` and `cargo test --release --test review_contain`.
#[test]
fn wait_idle_still_wakes_after_a_panicking_waiter_left() {
    quiet_expected_panics();
    let pool = Pool::builder().name("rv-idle3").workers(1).build().unwrap();
    let release = Latch::new();
    let job = hold(&pool, &release);
    let woken = Counter::new();
    let mut first = Box::pin(pool.wait_idle());
    assert!(poll_with(first.as_mut(), &counted_panicking_waker(woken.clone())).is_pending());
    release.open();
    drop(job);
    // The worker released the slot and called the waker.
    woken.wait_for(1);
    // The caller gives up on its wait.
    let dropped = catch_unwind(AssertUnwindSafe(|| drop(first)));
    assert!(
        dropped.is_ok(),
        "dropping a wait_idle future panicked (event-listener count underflow)"
    );

    // Business as usual afterwards: a job, and a caller waiting for the pool to idle.
    let release = Latch::new();
    let job = hold(&pool, &release);
    let mut again = Box::pin(pool.wait_idle());
    future::block_on(async {
        assert!(future::poll_once(again.as_mut()).await.is_none());
    });
    release.open();
    drop(job);
    future::block_on(bounded(LIMIT, again));
}
