//! `Deadline`, `DeadlineRun` and `Sleep`: explicit instants for the arithmetic, real timers
//! (on every executor) for the futures.

mod common;

use std::collections::HashSet;
use std::error::Error;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use common::{Counted, assert_elapsed_near, ready_late};
use futures_lite::future;
use loopguard::deadline::{Deadline, Expired};
use loopguard::deadline::{DeadlineRun, Sleep};

const MS: fn(u64) -> Duration = Duration::from_millis;

#[test]
fn never_is_the_latest() {
    let now = Instant::now();
    let early = Deadline::at(now);
    let late = Deadline::at(now + Duration::from_secs(1_000_000));
    let never = Deadline::never();
    assert!(early < late && late < never && early < never);
    assert_eq!(never.cmp(&never), std::cmp::Ordering::Equal);
    let mut all = vec![never, late, early];
    all.sort();
    assert_eq!(all, [early, late, never]);
    assert_eq!(all.iter().max(), Some(&never));
}

#[test]
fn min_picks_the_earlier() {
    let now = Instant::now();
    let a = Deadline::at(now + MS(10));
    let b = Deadline::at(now + MS(20));
    assert_eq!(a.min(b), a);
    assert_eq!(b.min(a), a);
    assert_eq!(a.min(Deadline::never()), a);
    assert_eq!(Deadline::never().min(a), a);
    assert_eq!(Deadline::never().min(Deadline::never()), Deadline::never());
}

#[test]
fn overflow_saturates_to_never() {
    assert!(Deadline::after(Duration::MAX).is_never());
    assert_eq!(Deadline::after(Duration::MAX), Deadline::never());
    assert!(!Deadline::after(Duration::MAX).is_expired());
    let d = Deadline::after(Duration::from_secs(3600));
    assert!(!d.is_never());
    assert!(d.instant().is_some());
}

#[test]
fn at_keeps_the_instant() {
    let now = Instant::now();
    assert_eq!(Deadline::at(now).instant(), Some(now));
    assert_eq!(Deadline::never().instant(), None);
    let set: HashSet<_> = [Deadline::at(now), Deadline::at(now), Deadline::never()].into();
    assert_eq!(set.len(), 2);
}

#[test]
fn remaining_at_boundaries() {
    let now = Instant::now();
    let d = Deadline::at(now + MS(100));
    assert_eq!(d.remaining_at(now), Some(MS(100)));
    assert_eq!(d.remaining_at(now + MS(99)), Some(MS(1)));
    assert_eq!(d.remaining_at(now + MS(100)), Some(Duration::ZERO));
    assert_eq!(d.remaining_at(now + MS(5000)), Some(Duration::ZERO));
    assert_eq!(Deadline::never().remaining_at(now), None);
    assert_eq!(Deadline::never().remaining(), None);
    assert!(Deadline::after(MS(100)).remaining().unwrap() <= MS(100));
    assert_eq!(Deadline::at(now).remaining(), Some(Duration::ZERO));
}

#[test]
fn expired_at_and_after_the_instant() {
    let now = Instant::now();
    let d = Deadline::at(now + MS(100));
    assert!(!d.is_expired_at(now));
    assert!(!d.is_expired_at(now + MS(100) - Duration::from_nanos(1)));
    assert!(d.is_expired_at(now + MS(100)));
    assert!(d.is_expired_at(now + MS(101)));
    assert!(!Deadline::never().is_expired_at(now + Duration::from_secs(1_000_000)));
    assert!(Deadline::at(now).is_expired());
    assert!(!Deadline::after(Duration::from_secs(60)).is_expired());
}

#[test]
fn check_between_blocking_steps() {
    assert_eq!(Deadline::at(Instant::now()).check(), Err(Expired));
    assert_eq!(Deadline::never().check(), Ok(()));
    assert_eq!(Deadline::after(Duration::from_secs(60)).check(), Ok(()));

    // A blocking loop stops at the first check after expiry, never before.
    let deadline = Deadline::after(MS(30));
    let mut steps = 0;
    let result = loop {
        if let Err(e) = deadline.check() {
            break e;
        }
        steps += 1;
        std::thread::sleep(MS(5)); // the blocking work under test
    };
    assert_eq!(result, Expired);
    assert!(steps >= 1);
    assert!(deadline.is_expired());
}

#[test]
fn expired_error() {
    assert_eq!(Expired.to_string(), "deadline expired");
    assert!(Expired.source().is_none());
    let e: io::Error = Expired.into();
    assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    assert_eq!(e.to_string(), "deadline expired");
    let boxed: Box<dyn Error + Send + Sync> = Box::new(Expired);
    assert_eq!(boxed.to_string(), "deadline expired");
}

#[test]
fn auto_traits() {
    fn send_sync<T: Send + Sync>() {}
    fn unpin<T: Unpin>() {}
    send_sync::<Deadline>();
    send_sync::<Expired>();
    send_sync::<Sleep>();
    unpin::<Sleep>();
    send_sync::<DeadlineRun<future::Ready<u8>>>();
    unpin::<DeadlineRun<future::Ready<u8>>>();
    let f = Deadline::never().run(async {});
    assert!(format!("{f:?}").contains("DeadlineRun"));
    assert!(format!("{:?}", Deadline::never().sleep(MS(1))).contains("Sleep"));
}

/// Blocks its thread until `until`, then is pending (waking itself at once): the
/// deadline passes between two polls.
struct PendingPastDeadline {
    until: Instant,
    polls: Arc<AtomicUsize>,
}

impl Future for PendingPastDeadline {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.polls.fetch_add(1, Ordering::SeqCst);
        let now = Instant::now();
        if self.until > now {
            std::thread::sleep(self.until - now);
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

on_every_executor!(within_ok_before_the_deadline, async {
    let out = Deadline::after(Duration::from_secs(10))
        .run(async { 7 })
        .await;
    assert_eq!(out, Ok(7));
    let (inner, polls) = Counted::new("x", 3);
    assert_eq!(Deadline::never().run(inner).await, Ok("x"));
    assert_eq!(polls.load(Ordering::SeqCst), 4);
});

// The one rule of `Deadline::run`: an output produced by a poll that started before the
// deadline is returned, even if the clock passed the deadline during that poll; a poll
// that starts after it does not poll the inner future (`within_never_polls_after_expiry`).
on_every_executor!(within_returns_an_output_produced_in_its_poll, async {
    let deadline = Deadline::after(MS(40));
    let at = deadline.instant().unwrap();
    assert_eq!(deadline.run(ready_late(at + MS(20), 1)).await, Ok(1));
    assert!(deadline.is_expired());

    // Ready exactly at the deadline instant: produced in the poll, so returned too.
    let deadline = Deadline::after(MS(20));
    let at = deadline.instant().unwrap();
    assert_eq!(deadline.run(ready_late(at, 2)).await, Ok(2));
});

on_every_executor!(within_never_polls_after_expiry, async {
    let (inner, polls) = Counted::new(1, 0);
    let out = Deadline::at(Instant::now()).run(inner).await;
    assert_eq!(out, Err(Expired));
    assert_eq!(polls.load(Ordering::SeqCst), 0, "inner polled after expiry");

    // The deadline passes while the inner future is pending: no second poll.
    let deadline = Deadline::after(MS(20));
    let polls = Arc::new(AtomicUsize::new(0));
    let inner = PendingPastDeadline {
        until: deadline.instant().unwrap() + MS(5),
        polls: polls.clone(),
    };
    assert_eq!(deadline.run(inner).await, Err(Expired));
    assert_eq!(polls.load(Ordering::SeqCst), 1);
});

on_every_executor!(within_cuts_a_pending_future_near_the_deadline, async {
    let start = Instant::now();
    let out = Deadline::after(MS(100)).run(future::pending::<()>()).await;
    assert_eq!(out, Err(Expired));
    assert_elapsed_near(start, MS(100));
});

on_every_executor!(within_never_has_no_timer, async {
    let mut within = Deadline::never().run(future::pending::<()>());
    assert_eq!(future::poll_once(&mut within).await, None);
    assert!(format!("{within:?}").contains("timer_armed: false"));
});

on_every_executor!(sleep_runs_its_course_inside_the_deadline, async {
    let start = Instant::now();
    assert_eq!(
        Deadline::after(Duration::from_secs(10)).sleep(MS(50)).await,
        Ok(())
    );
    assert_elapsed_near(start, MS(50));
    let start = Instant::now();
    assert_eq!(Deadline::never().sleep(MS(30)).await, Ok(()));
    assert_elapsed_near(start, MS(30));
    assert_eq!(Deadline::never().sleep(Duration::ZERO).await, Ok(()));
});

on_every_executor!(a_sleep_waits_on_its_timer_not_on_the_cpu, async {
    // Its first poll arms the timer and returns: a sleep that spun until its end would
    // return `Ready` from this poll, a second later.
    let mut nap = Deadline::never().sleep(Duration::from_secs(1));
    let start = Instant::now();
    assert_eq!(future::poll_once(&mut nap).await, None);
    assert!(
        start.elapsed() < Duration::from_millis(500),
        "the poll waited"
    );
});

on_every_executor!(sleep_is_cut_at_the_deadline, async {
    let start = Instant::now();
    let out = Deadline::after(MS(100))
        .sleep(Duration::from_secs(10))
        .await;
    assert_eq!(out, Err(Expired));
    assert_elapsed_near(start, MS(100));

    // Already expired: the deadline wins even over a zero sleep.
    let expired = Deadline::at(Instant::now());
    assert_eq!(expired.sleep(Duration::ZERO).await, Err(Expired));
    assert_eq!(expired.sleep(Duration::MAX).await, Err(Expired));
});
