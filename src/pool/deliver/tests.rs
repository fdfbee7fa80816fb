use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures_lite::future::{block_on, poll_once};

use super::*;
use crate::demand::Demand;
use crate::failure::never;
use crate::gate::limit::Basis;
use crate::handoff::Taken;
use crate::orphan::{OrphanHandler, Reporter};

fn limit() -> Limit {
    Limit::new("deliver".into(), 1, Demand::default(), Basis::Jobs)
}

fn handoff() -> Handoff<u32> {
    let reporter = Reporter::new(
        crate::emit::LABEL_POOL,
        "deliver".into(),
        OrphanHandler::new(|_| {}),
    );
    Handoff::new(never::<u32>, Arc::new(reporter))
}

/// Whether the limit reads idle: no slot held (none is, here) and no publish in progress.
fn idle(limit: &Limit) -> bool {
    block_on(poll_once(limit.wait_idle())).is_some()
}

struct Counter(AtomicUsize);

impl Wake for Counter {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A handle waiting for the outcome: its waker counts the wakes.
fn waiting(handoff: &Handoff<u32>) -> Arc<Counter> {
    let counter = Arc::new(Counter(AtomicUsize::new(0)));
    let waker = Waker::from(counter.clone());
    let polled = handoff.poll_take(&mut Context::from_waker(&waker), "test");
    assert!(polled.is_pending());
    counter
}

/// What the slot saw when it was let go: the outcome takeable already, the limit idle.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Seen {
    published: bool,
    idle: bool,
}

/// A job's slot that looks at the hand-off and the limit when dropped, and may panic.
struct Slot<'a> {
    handoff: &'a Handoff<u32>,
    limit: &'a Limit,
    seen: &'a Cell<Option<Seen>>,
    panics: bool,
}

impl<'a> Slot<'a> {
    fn new(
        handoff: &'a Handoff<u32>,
        limit: &'a Limit,
        seen: &'a Cell<Option<Seen>>,
        panics: bool,
    ) -> Self {
        Slot {
            handoff,
            limit,
            seen,
            panics,
        }
    }
}

/// What the slot must see in every delivery: it goes before the publish, and the publish
/// keeps the limit from reading idle.
const BEFORE_THE_PUBLISH: Seen = Seen {
    published: false,
    idle: false,
};

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.seen.set(Some(Seen {
            published: self.handoff.is_finished(),
            idle: idle(self.limit),
        }));
        if self.panics {
            panic!("expected slot drop panic");
        }
    }
}

/// After an unwinding delivery: the caller was woken once, and takes the outcome; the
/// limit reads idle (no publish left counted).
fn assert_delivered_once(handoff: &Handoff<u32>, limit: &Limit, woken: &Counter) {
    assert_eq!(woken.0.load(Ordering::SeqCst), 1, "woken once");
    let waker = Waker::noop();
    match handoff.poll_take(&mut Context::from_waker(waker), "test") {
        Poll::Ready(Taken::Outcome(Ok(7), _)) => {}
        _ => panic!("the outcome was not published"),
    }
    assert!(idle(limit), "a publish stayed counted");
    assert_eq!(limit.publishing(), 0);
}

#[test]
fn the_slot_goes_before_the_publish_inside_one_counted_publish() {
    let (limit, handoff, seen) = (limit(), handoff(), Cell::new(None));
    let woken = waiting(&handoff);
    let told = Cell::new(false);
    let slot = Slot::new(&handoff, &limit, &seen, false);
    deliver(&limit, &handoff, Ok(7), Duration::ZERO, slot, || {
        assert!(!handoff.is_finished(), "told after the publish");
        assert!(seen.get().is_none(), "told after the slot went back");
        told.set(true);
    });
    assert!(told.get());
    assert_eq!(
        seen.get(),
        Some(BEFORE_THE_PUBLISH),
        "slot let go out of order"
    );
    assert_delivered_once(&handoff, &limit, &woken);
}

#[test]
fn a_slot_whose_drop_unwinds_is_still_followed_by_the_publish_and_its_end() {
    let (limit, handoff, seen) = (limit(), handoff(), Cell::new(None));
    let woken = waiting(&handoff);
    let slot = Slot::new(&handoff, &limit, &seen, true);
    let unwound = catch_unwind(AssertUnwindSafe(|| {
        deliver(&limit, &handoff, Ok(7), Duration::ZERO, slot, || {});
    }));
    assert!(
        unwound.is_err(),
        "the slot's panic is not deliver's to contain"
    );
    assert_eq!(seen.get(), Some(BEFORE_THE_PUBLISH));
    assert_delivered_once(&handoff, &limit, &woken);
}

#[test]
fn a_tell_that_unwinds_still_lets_the_slot_go_before_the_publish() {
    let (limit, handoff, seen) = (limit(), handoff(), Cell::new(None));
    let woken = waiting(&handoff);
    let slot = Slot::new(&handoff, &limit, &seen, false);
    let unwound = catch_unwind(AssertUnwindSafe(|| {
        deliver(&limit, &handoff, Ok(7), Duration::ZERO, slot, || {
            panic!("expected tell panic")
        });
    }));
    assert!(unwound.is_err());
    assert_eq!(
        seen.get(),
        Some(BEFORE_THE_PUBLISH),
        "slot let go out of order"
    );
    assert_delivered_once(&handoff, &limit, &woken);
}

/// A caller's waker that panics when woken.
struct Panicking;

impl Wake for Panicking {
    fn wake(self: Arc<Self>) {
        panic!("expected caller waker panic");
    }
}

#[test]
fn a_caller_waker_that_panics_while_a_step_unwinds_is_contained() {
    // The slot's drop unwinds; the publish then wakes a caller whose waker panics too. The
    // wake is contained: the delivery ends with the slot's panic and no abort, and the
    // outcome is takeable.
    let (limit, handoff, seen) = (limit(), handoff(), Cell::new(None));
    let waker = Waker::from(Arc::new(Panicking));
    let polled = handoff.poll_take(&mut Context::from_waker(&waker), "test");
    assert!(polled.is_pending());
    let slot = Slot::new(&handoff, &limit, &seen, true);
    let unwound = catch_unwind(AssertUnwindSafe(|| {
        deliver(&limit, &handoff, Ok(7), Duration::ZERO, slot, || {});
    }));
    let payload = unwound.expect_err("the slot's panic resumes");
    assert_eq!(
        payload.downcast_ref::<&str>(),
        Some(&"expected slot drop panic")
    );
    let noop = Waker::noop();
    match handoff.poll_take(&mut Context::from_waker(noop), "test") {
        Poll::Ready(Taken::Outcome(Ok(7), _)) => {}
        _ => panic!("the outcome was not published"),
    }
    assert!(idle(&limit), "a publish stayed counted");
}
